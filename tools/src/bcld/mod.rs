//! `bcld`: the per-node engine of BCL's semi-user-level mode.
//!
//! One daemon per node opens the node's NICs and serves the node's BCL
//! processes, which then need no privilege: a process reaches the daemon
//! through its Unix socket and a pair of shared-memory rings
//! (`bcl::shm::engine`), and the daemon sends and receives for it. The
//! daemon is the trusted path: it lets a frame out only in its client's
//! own name and job ([`trusted`]), and hands a received frame only to the
//! client of the job and port it is addressed to.
//!
//! - [`bundler`]: small frames of several clients in one container for a
//!   remote daemon.
//! - [`daemon`]: the NIC, the socket, the loop.
//! - [`resources`]: the node and its NICs from a cluster file.
//! - [`session`]: one client (credentials, identity, rings).
//! - [`trusted`]: the checks on every frame, in and out.

pub mod bundler;
pub mod daemon;
pub mod nic;
pub mod resources;
pub mod session;
pub mod trusted;

pub use daemon::{Candidate, Config, Daemon, StartError};
