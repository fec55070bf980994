//! `bcl-udp`: the `udp` method of BCL.
//!
//! BCL frames (header plus payload, see `bcl_core::wire`) travel as UDP
//! payloads through ordinary kernel sockets. It is the method for routed
//! networks and for unprivileged users: it needs no capability, crosses IP
//! routers, and works over IPv4 and IPv6.
//!
//! - **Descriptor**: `udp:IP:PORT` or `udp:[IPv6]:PORT` (one token). A method
//!   bound to a wildcard address resolves it to an interface address first
//!   ([`local_ip`]), so a descriptor never names `0.0.0.0` or `::`.
//! - **Batching**: one `recvmmsg` receives up to [`BATCH`] datagrams and one
//!   `sendmmsg` sends every frame of a transmit burst. Buffers are
//!   preallocated once; the core writes frames straight into them and reads
//!   received frames in place.
//! - **Links**: one per peer socket address. A datagram from an address never
//!   seen before gets a new link, so the core can answer a peer it did not
//!   know ([`bcl_core::Method::rx_burst`]).
//! - **Blocking mode**: [`bcl_core::Method::readiness_fd`] is the socket.
//!
//! ```no_run
//! use bcl_core::Method;
//! use bcl_udp::{UdpConfig, UdpMethod};
//!
//! let m = UdpMethod::open(UdpConfig::new("0.0.0.0:0".parse().unwrap())).unwrap();
//! println!("reach me at {}", m.descriptor()); // e.g. udp:10.77.1.1:41234
//! ```

mod addr;
pub mod kind;
mod method;
mod sys;

pub use addr::{local_ip, parse_address, LocalIpError};
pub use kind::UdpKind;
pub use method::{probe, UdpConfig, UdpMethod, UdpStats, BATCH, METHOD_NAME};
