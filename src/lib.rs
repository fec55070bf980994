//! # BCL: a userspace cluster communication stack
//!
//! This is the crate applications depend on. It re-exports the protocol core
//! ([`core`], the `bcl-core` crate) and every transport method's crate
//! (shared memory, [`shm`]; a NIC driven through VFIO, [`vfio`]; AF_XDP,
//! [`afxdp`]; raw Ethernet through AF_PACKET, [`packet`]; UDP, [`udp`]; the
//! simulated fabric, [`sim`]; what the Ethernet methods share, [`ether`]),
//! lists their kinds in one table, the method [`Registry`], and drives open
//! methods with a progress engine, [`Endpoint`]: one communication endpoint
//! (a port) with its methods and a clock, in busy-poll or blocking mode
//! ([`ProgressMode`]). The [`cluster`] layer chooses a method per peer and
//! joins a job; [`channels`] adds normal and open channels, and
//! [`service`] remote service requests (active messages: handlers
//! registered under an id, called by peers).
//!
//! ```
//! use bcl::{Endpoint, JobKey, ProcessAddr};
//! use bcl::sim::{FabricConfig, SimFabric};
//!
//! let fabric = SimFabric::new(FabricConfig::default());
//! let mut a = Endpoint::builder(ProcessAddr::new(1, 0), JobKey(7))
//!     .method(Box::new(fabric.endpoint()))
//!     .clock(fabric.clock())
//!     .build()
//!     .unwrap();
//! let mut b = Endpoint::builder(ProcessAddr::new(2, 0), JobKey(7))
//!     .method(Box::new(fabric.endpoint()))
//!     .clock(fabric.clock())
//!     .build()
//!     .unwrap();
//! a.add_peer(b.local(), b.descriptors()[0].clone());
//! let handle = a.send(b.local(), b"hello").unwrap();
//! let timeout = std::time::Duration::from_secs(5);
//! // Single-threaded: drive both ends until the message is in.
//! let got = loop {
//!     a.progress().unwrap();
//!     b.progress().unwrap();
//!     if let Some(d) = b.poll_delivery() {
//!         break d;
//!     }
//! };
//! assert_eq!(b.message(&got).unwrap(), b"hello");
//! b.release(got).unwrap();
//! # let _ = (handle, timeout);
//! ```

pub mod admin;
pub mod capture;
pub mod channels;
pub mod clock;
pub mod cluster;
pub mod coll;
mod direct;
pub mod endpoint;
pub mod group;
mod method_slot;
mod node_liveness;
pub mod registry;
pub mod rsr;
pub mod schedule;
pub mod service;
pub mod simnet;
pub mod stats_page;
#[cfg(feature = "tokio")]
pub mod tokio;
mod wait;

pub use bcl_afxdp as afxdp;
pub use bcl_core as core;
pub use bcl_core::{
    ChannelError, ChannelEvent, ChannelId, Delivery, Descriptor, JobKey, LinkId, Method,
    MethodCaps, NodeId, PeerEvent, PortConfig, PortId, PortStats, ProcessAddr, Refused, RegionId,
    SendEvent, SendFailure, SendHandle, Time, TransferError,
};
pub use bcl_ether as ether;
pub use bcl_packet as packet;
pub use bcl_shm as shm;
pub use bcl_sim as sim;
pub use bcl_udp as udp;
pub use bcl_vfio as vfio;
pub use channels::{TransferFailed, TransferFailure};
pub use clock::{Clock, MonotonicClock};
pub use endpoint::{Endpoint, EndpointBuilder, EngineStats, Error, ProgressMode};
pub use registry::Registry;
pub use simnet::SimCluster;
pub use stats_page::StatsConfig;
