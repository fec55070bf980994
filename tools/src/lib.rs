//! Shared code of BCL's command-line tools, one concept per module:
//!
//! - [`transport`]: the message [`Transport`](transport::Transport) the
//!   tools measure; [`bcl_transport`] (BCL on any method) and the
//!   baselines — [`kernel`] (kernel UDP/TCP), [`local`] (Unix socket, the
//!   shared-memory floor), [`afxdp_raw`] (the AF_XDP floor),
//!   [`packet_raw`] (the AF_PACKET floor) — implement it.
//! - [`end`]: the `--method` value (a method of the registry or a
//!   baseline) and an end's settings.
//! - [`methods`]: opening an end of a chosen method, as server or client.
//! - [`launch`]: where the ends run (threads, lab namespaces, pinned CPUs).
//! - [`cli`]: the command-line options both tools share.
//! - [`job`]: the tools under `bcl-run` (rank 0 measures against rank 1).
//! - [`pingpong`], [`bw`] and [`loggp`]: the measurements (round trips,
//!   bandwidth, LogGP parameters), written once against `Transport`.
//! - [`latency`], [`report`], [`args`]: histograms, the JSON contract and
//!   tables, argument values.
//! - [`plot`]: charts of the results (`--plot`, `bcl-plot`); [`progress`]:
//!   progress bars of long runs.
//! - [`bcld`]: the per-node engine daemon (the `bcld` binary).

pub mod afxdp_raw;
pub mod args;
pub mod bcl_transport;
pub mod bcld;
pub mod bw;
pub mod cli;
pub mod coll_check;
pub mod end;
pub mod job;
pub mod kernel;
pub mod latency;
pub mod launch;
pub mod local;
pub mod loggp;
pub mod methods;
pub mod packet_raw;
pub mod pingpong;
pub mod plot;
pub mod progress;
pub mod report;
pub mod transport;
