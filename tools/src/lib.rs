//! Shared code of BCL's command-line tools, one concept per module:
//!
//! - [`transport`]: the message [`Transport`](transport::Transport) the
//!   tools measure; [`bcl_transport`] (BCL on any method) and [`kernel`]
//!   (the kernel UDP/TCP baselines) implement it.
//! - [`methods`]: opening an end of a chosen method, as server or client.
//! - [`launch`]: where the ends run (threads, lab namespaces, pinned CPUs).
//! - [`cli`]: the command-line options both tools share.
//! - [`job`]: the tools under `bcl-run` (rank 0 measures against rank 1).
//! - [`pingpong`] and [`bw`]: the two measurements, written once against
//!   `Transport`.
//! - [`latency`], [`report`], [`args`]: histograms, the JSON contract and
//!   tables, argument values.

pub mod afxdp_method;
pub mod args;
pub mod bcl_transport;
pub mod bw;
pub mod cli;
pub mod job;
pub mod kernel;
pub mod latency;
pub mod launch;
pub mod local_methods;
pub mod methods;
pub mod pingpong;
pub mod report;
pub mod transport;
pub mod vfio_method;
