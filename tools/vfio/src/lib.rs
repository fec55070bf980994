//! The `bcl-vfio` tool's logic (the binary in `main.rs` is a thin clap
//! front end): NIC listing and vfio-pci binding ([`admin`]), the VFIO
//! layer self-test ([`check`]) and the two-NIC frame exchange through the
//! `vfio` method ([`exchange`]).

pub mod admin;
pub mod check;
pub mod exchange;
