//! # bcl-afxdp: BCL's AF_XDP method
//!
//! Kernel-bypass raw Ethernet on any NIC with an XDP-capable Linux driver
//! (and on veth): BCL frames travel in Ethernet II frames of their own
//! EtherType (default 0x88B5) through AF_XDP sockets, so neither side's
//! kernel network stack touches them, while every other frame on the
//! interface (ARP, IP, SSH, …) goes on to the kernel untouched.
//!
//! * [`AfXdpMethod`] implements [`bcl_core::Method`] (name `afxdp`,
//!   descriptor `afxdp:MAC/IFINDEX`); it talks to `packet` (AF_PACKET) and
//!   `vfio` peers too, since the frames are the same: framing, the
//!   receive filter, the descriptor grammar and the peer table are
//!   [`bcl_ether`]'s.
//! * [`RawXsk`] is the same machinery with a whole-frame API and no
//!   protocol: the floor that BCL is measured against (`afxdp-raw`).
//! * [`probe`] says whether the method can run here, and why not (where
//!   it cannot, the cluster layer opens `packet` instead, with the reason).
//! * [`AfXdpConfig`] holds the settings; [`ModeReport`] says what was
//!   obtained (native or generic XDP, zero-copy or copy per queue) and why.
//! * [`bpf`] holds the XDP redirect program — fifteen eBPF instructions
//!   built in Rust, no C toolchain — and the `bpf(2)` calls around it.
//!
//! Everything runs in the calling thread's network namespace. See the
//! crate README for modes and fallback, multi-queue steering and limits.

pub mod bpf;
pub mod config;
pub mod kind;
pub mod method;
pub mod netlink;
pub mod raw;
mod ring;
mod sys;
mod umem;
pub mod xdp;
mod xsk;

pub use config::{
    AfXdpConfig, AfXdpError, AttachMode, BindMode, ModeReport, QueueReport, Queues,
    DEFAULT_ETHERTYPE, XDP_PACKET_HEADROOM,
};
pub use kind::AfXdpKind;
pub use method::{probe, AfXdpMethod, MethodStats, METHOD_NAME};
pub use raw::RawXsk;
pub use ring::XdpDesc;
pub use sys::wait_readable;
pub use umem::UmemPages;
pub use xsk::QueueStats;
