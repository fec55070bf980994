//! `bcl-ether`: what BCL's Ethernet methods share.
//!
//! The `packet` (AF_PACKET), `afxdp` (AF_XDP) and `vfio` (a NIC driven
//! from user space) methods all carry BCL frames as the payload of
//! Ethernet II frames with the BCL EtherType, so a peer of one is a peer of
//! the others. What they must agree on lives here, once:
//!
//! - [`mac`]: the MAC address type [`Mac`] and its text form.
//! - [`frame`]: the frame layout — the [`Frame`] view (checked
//!   constructor, one accessor per field), [`HEADER_LEN`] and the other
//!   sizes, [`write_header`].
//! - [`descriptor`]: the one descriptor grammar `MAC[/IFINDEX][@PCI]`
//!   ([`DescriptorAddress`]) and [`peer_mac`], which every method's
//!   `open_link` uses.
//! - [`filter`]: the receive filter ([`RxFilter`]: EtherType, destination,
//!   source, runts) with its drop reasons ([`Discard`]) and the counters
//!   every method reports ([`RxStats`]).
//! - [`station`]: the filter, the peer table that numbers links by MAC
//!   and the counters together ([`Station`]), which is what a driver holds.
//! - [`iface`]: the host's interfaces (index, MAC, state), with the choice
//!   of "the only interface that is up".
//!
//! This crate is a library for drivers, not a method: it opens nothing,
//! makes no system call on the frame path and has no `unsafe`. Nothing in
//! it panics on bytes or text from the network.

#![forbid(unsafe_code)]

pub mod descriptor;
pub mod filter;
pub mod frame;
pub mod iface;
pub mod mac;
pub mod station;

pub use descriptor::{peer_mac, DescriptorAddress, ETHERNET_METHODS};
pub use filter::{Accepted, Discard, RxFilter, RxStats, SharedRxStats};
pub use frame::{
    header, write_header, Frame, Header, TooShort, DESTINATION_OFFSET, ETHERTYPE_OFFSET,
    HEADER_LEN, MIN_ETHERTYPE, MIN_FRAME_LEN, SOURCE_OFFSET, VLAN_TAG_LEN,
};
pub use iface::{choose_interface, interfaces, Interface, InterfaceError};
pub use mac::Mac;
pub use station::{Peers, Station, MAX_PEERS};
