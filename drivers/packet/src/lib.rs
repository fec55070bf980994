//! `bcl-packet`: the `packet` method of BCL, raw Ethernet through AF_PACKET.
//!
//! BCL frames travel as the payload of Ethernet II frames with the BCL
//! EtherType (default 0x88B5, IEEE local experimental; configurable), the
//! data-link-layer transport of DLMC: no IP, no UDP, the kernel only moves
//! frames. It works on any Linux NIC, veth included, and needs CAP_NET_RAW
//! ([`probe`] says so instead of failing later).
//!
//! - **Descriptor**: `packet:MAC/IFINDEX`, e.g. `packet:02:bc:01:00:00:02/3`
//!   (one token): the interface's MAC address, which is what peers send to,
//!   and its index on its own host (informational). Links are opened from
//!   a descriptor of any Ethernet method in the shared grammar
//!   `MAC[/IFINDEX][@PCI]` ([`bcl_ether::descriptor`]).
//! - **Sockets and rings**: one `AF_PACKET`/`SOCK_RAW` socket bound to the
//!   interface and to the EtherType (so the kernel hands it only BCL frames),
//!   with `PACKET_QDISC_BYPASS`, `PACKET_IGNORE_OUTGOING`, and PACKET_MMAP
//!   receive and transmit rings (TPACKET_V2). Receiving is reading the shared
//!   ring: a busy-polling endpoint makes no system call while idle, and the
//!   core reads every frame in place. Transmitting is writing frames straight
//!   into the transmit ring (the core encodes into it) and one `send()` per
//!   burst.
//! - **Links**: one per peer MAC. A frame from a MAC never seen before gets a
//!   new link, so the core can answer it. Framing, the receive filter, the
//!   peer table and the filter counters are [`bcl_ether::Station`]'s.
//! - **Blocking mode**: [`bcl_core::Method::readiness_fd`] is the socket; it
//!   polls readable while the receive ring holds a frame.
//! - **Interface**: [`PacketConfig::ifname`], or the only non-loopback
//!   interface that is up ([`bcl_ether::choose_interface`] explains when
//!   there are none or several).

pub mod kind;
mod method;
mod raw;
mod sys;

pub use kind::{PacketKind, JOB_ETHERTYPE};
pub use method::{
    parse_address, probe, PacketConfig, PacketCounters, PacketMethod, PacketStats, METHOD_NAME,
};
pub use raw::RawPacket;

#[cfg(test)]
mod tests;
