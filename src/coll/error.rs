//! What can go wrong in a communicator call.

use super::alg::NotApplicable;
use super::op::OpError;
use bcl_core::ProcessAddr;

/// Anything a communicator operation can fail with.
#[derive(Debug, thiserror::Error)]
pub enum CollError {
    /// The endpoint underneath failed.
    #[error(transparent)]
    Endpoint(#[from] crate::endpoint::Error),
    /// A peer the operation needs cannot be reached.
    #[error("peer {peer}{} failed: {why}", rank_note(.rank))]
    PeerFailed {
        /// The peer.
        peer: ProcessAddr,
        /// Its rank in the communicator of the operation that failed, once
        /// that operation has seen the failure (the messenger underneath
        /// knows addresses only).
        rank: Option<usize>,
        /// What was seen.
        why: String,
    },
    /// A message arrived with another length than the receive expected
    /// (the ranks disagree about the operation's arguments).
    #[error(
        "expected {expected} bytes from {from} and got {got}: do all ranks pass the same counts?"
    )]
    Length {
        /// The sender.
        from: ProcessAddr,
        /// What the receive expected.
        expected: usize,
        /// What came.
        got: usize,
    },
    /// The reduction cannot be applied.
    #[error(transparent)]
    Op(#[from] OpError),
    /// The chosen or requested algorithm cannot run this operation.
    #[error(transparent)]
    NotApplicable(#[from] NotApplicable),
    /// An argument is wrong (rank out of range, counts of the wrong
    /// length, a buffer of the wrong size); the text says which.
    #[error("invalid argument: {0}")]
    Invalid(String),
    /// The operation did not complete in time.
    #[error("timed out after {0:?}")]
    Timeout(std::time::Duration),
    /// The request is unknown (already completed and taken, or never made).
    #[error("no such request")]
    NoSuchRequest,
}

fn rank_note(rank: &Option<usize>) -> String {
    rank.map(|r| format!(" (rank {r})")).unwrap_or_default()
}

impl CollError {
    /// This error as seen by an operation on `comm`: a failed peer is
    /// named by its rank there too.
    pub fn in_comm(self, comm: &super::comm::Comm) -> CollError {
        self.naming_rank(|peer| comm.rank_of(peer))
    }

    /// This error with a failed peer named by the rank `rank_of` gives
    /// it (unless it already has one).
    pub fn naming_rank(mut self, rank_of: impl FnOnce(ProcessAddr) -> Option<usize>) -> CollError {
        if let CollError::PeerFailed { peer, rank, .. } = &mut self {
            if rank.is_none() {
                *rank = rank_of(*peer);
            }
        }
        self
    }
}
