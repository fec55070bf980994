//! `bcl-ether`: what BCL's Ethernet methods share.
//!
//! The `packet` (AF_PACKET), `afxdp` (AF_XDP) and `vfio` (a NIC driven
//! from user space) methods all carry BCL frames as the payload of
//! Ethernet II frames with the BCL EtherType, so a peer of one is a peer of
//! the others. What they must agree on lives here, once:
//!
//! - [`iface`]: MAC addresses ([`Mac`]) and the host's interfaces (index,
//!   MAC, state), with the choice of "the only interface that is up".
//!
//! This crate is a library for drivers, not a method: it opens nothing.

pub mod iface;

pub use iface::{choose_interface, interfaces, Interface, InterfaceError, Mac};
