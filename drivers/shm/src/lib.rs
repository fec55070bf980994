//! bcl-shm: BCL's intra-node shared-memory primitives.
//!
//! Processes on one node talk through shared memory (BCL-3 §3.2). Each
//! process owns one segment under `/dev/shm` holding its receive
//! structures; peers map it on first contact and write into it:
//!
//! * the **inbox** ([`inbox`]): one per receiver, a ring of fixed-size
//!   slots for small messages, many producers, one consumer; a producer
//!   claims a slot with one compare-and-swap, the consumer's read index is
//!   private, a full inbox is back-pressure;
//! * **exchange queues** ([`exchange`]): one per ordered pair, single
//!   producer single consumer, for large messages, cut into chunks that are
//!   pipelined so the two copies overlap;
//! * **sleeping and waking** ([`bell`], [`doorbell`]): a receiver with
//!   nothing to do sleeps in `epoll` on a socket its peers ring only when it
//!   is asleep;
//! * **cleanup and peer death** ([`segment`], [`proc`]): segments of dead
//!   processes are removed at start; a dead peer is detected by pid and
//!   start time (pidfds) and reported, never waited for forever.
//!
//! [`Mailbox`] puts these together as the shared-memory side of one
//! process, and [`ShmMethod`] is the BCL method built on it. The README
//! describes the layout, the algorithms with their memory-ordering
//! arguments, the tests and the limits.
//!
//! This crate is a "memory module": `unsafe` is allowed here, each block
//! with its `// SAFETY:` argument. Shared memory is accessed only through
//! atomics and raw-pointer copies, except for a published inbox slot, which
//! the consumer may view as `&[u8]` until it releases it (see
//! [`Incoming::bytes`]). Every index and length read from shared memory is
//! validated: a buggy peer can make us drop its messages, not panic.
//!
//! Under `--cfg loom` only the lock-free algorithms and their models are
//! compiled (see `loom.sh`).

// Under loom only the models use the algorithms.
#![cfg_attr(loom, allow(dead_code))]

pub mod bell;
#[cfg(not(loom))]
pub mod board;
#[cfg(not(loom))]
pub mod cma;
pub(crate) mod copy;
pub mod exchange;
#[cfg(not(loom))]
pub mod heap;
pub mod inbox;
pub(crate) mod sync;

#[cfg(loom)]
mod loom_models;

#[cfg(not(loom))]
pub mod doorbell;
#[cfg(not(loom))]
pub mod engine;
#[cfg(not(loom))]
pub mod kind;
#[cfg(not(loom))]
pub mod layout;
#[cfg(not(loom))]
mod mailbox;
#[cfg(not(loom))]
pub mod method;

#[cfg(not(loom))]
pub mod node_board;
#[cfg(not(loom))]
pub mod proc;
#[cfg(not(loom))]
pub mod segment;
#[cfg(not(loom))]
pub mod stats_page;

pub use exchange::{ExError, PullProgress, PushProgress};
#[cfg(not(loom))]
pub use kind::ShmKind;
#[cfg(not(loom))]
pub use layout::Geometry;
#[cfg(not(loom))]
pub use mailbox::{Incoming, Mailbox, MailboxConfig, PeerId, ShmEvent};
#[cfg(not(loom))]
pub use method::{node_identity, probe, ShmMethod, ShmMethodStats, METHOD_NAME};

#[cfg(not(loom))]
pub use board::{board_name, Board};

#[cfg(not(loom))]
pub use node_board::{node_board_name, NodeBoard};
#[cfg(not(loom))]
pub use segment::{cleanup_stale, segment_name, CleanupReport};

#[cfg(not(loom))]
use bcl_core::ProcessAddr;
#[cfg(not(loom))]
use std::path::PathBuf;

/// Why [`Mailbox::try_send`] did not send. Small and `Copy` because it is
/// returned on the hot path (`Full` is routine back-pressure).
#[cfg(not(loom))]
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SendError {
    /// The peer's inbox is full: nothing was sent; retry on a later progress
    /// call (back-pressure, not loss).
    #[error("the peer's inbox is full; retry later")]
    Full,
    /// The message does not fit in an inbox slot; use the exchange queue.
    #[error("message of {len} bytes exceeds the {max}-byte inbox slot; send it through the exchange queue")]
    TooLarge {
        /// The message length.
        len: usize,
        /// The slot capacity.
        max: usize,
    },
    /// The peer died or closed (connect again to reach a new incarnation).
    #[error("peer {0} is gone (died or closed)")]
    PeerGone(ProcessAddr),
    /// No such peer id.
    #[error("no peer {0:?} in this mailbox")]
    UnknownPeer(mailbox::PeerId),
}

#[cfg(not(loom))]
impl From<SendError> for ShmError {
    fn from(e: SendError) -> Self {
        match e {
            SendError::Full => ShmError::Full,
            SendError::TooLarge { len, max } => ShmError::TooLarge { len, max },
            SendError::PeerGone(addr) => ShmError::PeerGone { addr },
            SendError::UnknownPeer(p) => ShmError::UnknownPeer(p),
        }
    }
}

/// Anything that can go wrong in this crate.
#[cfg(not(loom))]
#[derive(Debug, thiserror::Error)]
pub enum ShmError {
    /// The inbox of the peer is full: nothing was sent; retry on a later
    /// progress call (back-pressure, not loss).
    #[error("the peer's inbox is full; retry later")]
    Full,
    /// The message does not fit in an inbox slot; use the exchange queue.
    #[error("message of {len} bytes exceeds the {max}-byte inbox slot; send it through the exchange queue")]
    TooLarge {
        /// The message length.
        len: usize,
        /// The slot capacity.
        max: usize,
    },
    /// The peer died or closed; its link is dead (connect again to reach a
    /// new incarnation).
    #[error("peer {addr} is gone (died or closed)")]
    PeerGone {
        /// The peer.
        addr: ProcessAddr,
    },
    /// No such peer id.
    #[error("no peer {0:?} in this mailbox")]
    UnknownPeer(mailbox::PeerId),
    /// The peer has no segment (not started, or gone).
    #[error("no shared-memory segment for process {addr} at {}", path.display())]
    NoSuchPeer {
        /// The peer.
        addr: ProcessAddr,
        /// Where its segment would be.
        path: PathBuf,
    },
    /// The peer's segment exists but is still being initialised; retry.
    #[error("the segment of process {addr} is still being created; retry")]
    NotReady {
        /// The peer.
        addr: ProcessAddr,
    },
    /// The peer's directory has no free entry for another sender.
    #[error("process {addr} has no free directory entry for another sender (raise dir_entries)")]
    DirectoryFull {
        /// The peer.
        addr: ProcessAddr,
    },
    /// A live process already owns this address's segment.
    #[error("address in use: {} belongs to live process {pid}", path.display())]
    AddressInUse {
        /// The segment.
        path: PathBuf,
        /// Its owner.
        pid: u32,
    },
    /// A peer's segment failed validation.
    #[error("bad segment {}: {reason}", path.display())]
    BadSegment {
        /// The segment.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The configuration cannot work.
    #[error("bad shared-memory configuration: {0}")]
    BadConfig(String),
    /// An exchange-queue error.
    #[error(transparent)]
    Exchange(#[from] ExError),
    /// An operating-system call failed.
    #[error("{context}: {source}")]
    Io {
        /// What we were doing.
        context: String,
        /// The error.
        #[source]
        source: std::io::Error,
    },
}
