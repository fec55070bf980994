//! `bcl-sim`: an in-process simulated fabric for BCL, with seeded,
//! deterministic fault injection.
//!
//! A [`SimFabric`] connects any number of [`SimEndpoint`]s, each of which
//! implements the core's [`Method`](bcl_core::Method) trait under the name
//! `sim`. Frames are opaque bytes; on each directed link the fabric applies
//! a [`FaultProfile`]: loss, duplication, reordering, bit corruption, delay
//! with jitter, and a rate limit.
//!
//! The fabric runs on a [`SimClock`]:
//!
//! - **virtual time** ([`VirtualClock`]): time moves only when the test
//!   harness moves it, typically to the earlier of
//!   [`SimFabric::next_delivery`] and the protocol's next deadline. Runs
//!   with the same seed and the same calls are identical, which is what the
//!   core's property tests need;
//! - **real time** ([`RealClock`]): threads ping-pong through the fabric to
//!   measure the protocol's CPU cost without a kernel in the way.
//!
//! ```
//! use bcl_core::{LinkId, Method, TxFrame};
//! use bcl_sim::{FabricConfig, FaultSpec, SimFabric};
//!
//! let spec: FaultSpec = "delay=10us,seed=7".parse().unwrap();
//! let fabric = SimFabric::new(FabricConfig {
//!     faults: spec.profile,
//!     seed: spec.seed,
//!     ..FabricConfig::default()
//! });
//! let mut a = fabric.endpoint();
//! let mut b = fabric.endpoint();
//! let to_b = a.open_link(&b.descriptor()).unwrap();
//! let mut once = Some(to_b);
//! a.tx_burst(&mut |buf| {
//!     let link = once.take()?;
//!     buf[..5].copy_from_slice(b"hello");
//!     Some(TxFrame { link, len: 5 })
//! })
//! .unwrap();
//!
//! // Nothing arrives before the delay has passed...
//! assert_eq!(b.rx_burst(8, &mut |_, _| {}).unwrap(), 0);
//! let clock = fabric.clock();
//! clock.as_virtual().unwrap().set(fabric.next_delivery().unwrap());
//! // ...then the frame does, with the sender's address as its link.
//! let mut got = Vec::new();
//! b.rx_burst(8, &mut |from, bytes| got.push((from, bytes.to_vec()))).unwrap();
//! assert_eq!(got, vec![(LinkId(a.address()), b"hello".to_vec())]);
//! ```

#![forbid(unsafe_code)]

mod clock;
mod fabric;
pub mod fault;
pub mod kind;

pub use clock::{RealClock, SimClock, VirtualClock};
pub use fabric::{
    Bottleneck, FabricConfig, FabricStats, SimEndpoint, SimFabric, MAX_TX_BURST, METHOD_NAME,
};
pub use fault::{FaultProfile, FaultSpec, FaultSpecError, FaultSpecProblem};
pub use kind::SimKind;
