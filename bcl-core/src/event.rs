//! Completion events: what the port tells the application.

use crate::addr::ProcessAddr;
use crate::ring::RingSlot;

/// Names one accepted send, for matching its completion.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SendHandle(pub u64);

/// An entry of the send-completion queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendEvent {
    /// The receiver acknowledged the whole message.
    Complete(SendHandle),
    /// The message could not be delivered.
    Failed(SendHandle, SendFailure),
}

impl SendEvent {
    /// The send this event is about.
    pub fn handle(&self) -> SendHandle {
        match self {
            SendEvent::Complete(h) | SendEvent::Failed(h, _) => *h,
        }
    }
}

/// Why a send failed after it was accepted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SendFailure {
    /// The peer did not acknowledge anything through the configured number
    /// of consecutive retransmission timeouts.
    #[error("peer {0} unreachable: no acknowledgement through repeated timeouts")]
    PeerUnreachable(ProcessAddr),
    /// No method of this port can reach the peer (no descriptor known, or
    /// none of a method this port has).
    #[error("no route to peer {0}: no known descriptor of a method this port has")]
    NoRoute(ProcessAddr),
}

/// An entry of the receive-completion queue: a message is in the ring.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Delivery {
    /// The sender.
    pub from: ProcessAddr,
    /// Where the message lies; read it with `Port::message`, give it back
    /// with `Port::release`.
    pub slot: RingSlot,
    /// Message length in bytes.
    pub len: u32,
}
