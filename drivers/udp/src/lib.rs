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
//! - **Segmentation offload**: runs of equal-sized frames to one peer in a
//!   burst go to the kernel as one segmented send (`UDP_SEGMENT`) and come
//!   back as one coalesced datagram (`UDP_GRO`) that the method cuts into
//!   its frames: the frames on the wire are unchanged, the kernel's
//!   per-datagram work is done once per run ([`UdpConfig::gso`]).
//! - **No copy of ours for bulk data**: while datagrams of [`PLACE_MIN`]
//!   bytes and more arrive, the method peeks at each header and reads the
//!   payload straight into the posted buffer the core names
//!   (`Method::rx_burst_placing`); while such frames go out, each leaves as
//!   its header plus the application's bytes in one gathering `sendmsg`
//!   (`Method::tx_burst_gather`, [`GATHER_MIN`]). So a normal-channel
//!   transfer is copied once on each side, by the kernel, as over TCP.
//! - **Integrity**: the UDP checksum, verified by the receiving kernel,
//!   stands in for the core's CRC32C unless [`UdpConfig::crc32c`] asks for
//!   it.
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
pub use method::{
    probe, UdpConfig, UdpMethod, UdpStats, BATCH, GATHER_MIN, METHOD_NAME, PLACE_MIN,
};
