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
    /// A new incarnation of the peer (its process restarted) appeared
    /// before the message was acknowledged; the old process may or may not
    /// have received it.
    #[error("peer {0} restarted before acknowledging the message")]
    PeerRestarted(ProcessAddr),
}

impl SendFailure {
    /// The peer the failure is about.
    pub fn peer(&self) -> ProcessAddr {
        match *self {
            SendFailure::PeerUnreachable(a)
            | SendFailure::NoRoute(a)
            | SendFailure::PeerRestarted(a) => a,
        }
    }
}

impl From<SendFailure> for TransferError {
    /// The error a transfer (or remote read) reports when its messages
    /// failed this way.
    fn from(f: SendFailure) -> Self {
        match f {
            SendFailure::PeerUnreachable(a) | SendFailure::NoRoute(a) => {
                TransferError::PeerUnreachable(a)
            }
            SendFailure::PeerRestarted(a) => TransferError::PeerRestarted(a),
        }
    }
}

/// A change in what the port knows about a peer's life, in the order it
/// learnt them ([`crate::Port::poll_peer_event`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PeerEvent {
    /// The peer is gone: its method reported its process closed, or it
    /// stayed silent through the liveness bound. Everything in flight to
    /// or from it has failed.
    Down(ProcessAddr),
    /// A peer reported [`PeerEvent::Down`] was heard from again in the
    /// same incarnation (a partition healed, a stopped process resumed).
    Up(ProcessAddr),
    /// A new incarnation of the peer spoke: its process restarted at the
    /// same address. What was in flight with the old one has failed; both
    /// directions start fresh sequence spaces.
    Restarted(ProcessAddr),
}

impl PeerEvent {
    /// The peer the event is about.
    pub fn peer(&self) -> ProcessAddr {
        match *self {
            PeerEvent::Down(a) | PeerEvent::Up(a) | PeerEvent::Restarted(a) => a,
        }
    }
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

/// A normal or open channel of a port. Channel 0 is the system channel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ChannelId(pub u16);

/// A memory region registered with a port for remote access.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RegionId {
    /// Slot in the port's region table.
    pub index: u32,
    /// Distinguishes successive registrations in the same slot, so a stale
    /// id never reaches another registration's memory.
    pub generation: u32,
}

/// Why a transfer on a normal or open channel failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TransferError {
    /// The message is larger than the buffer posted for it.
    #[error(
        "message of {len} bytes does not fit the {capacity}-byte buffer posted on the channel"
    )]
    TooLarge {
        /// Message length.
        len: u64,
        /// Size of the posted buffer.
        capacity: u64,
    },
    /// The peer has no such channel (or not of the right kind).
    #[error("the peer has no channel {0:?} of that kind")]
    NoSuchChannel(ChannelId),
    /// The receiver cancelled the buffer posted for the transfer.
    #[error("the receiver cancelled its posted buffer")]
    Cancelled,
    /// The peer stopped answering.
    #[error("peer {0} unreachable")]
    PeerUnreachable(ProcessAddr),
    /// The peer's process restarted in the middle of the transfer.
    #[error("peer {0} restarted in the middle of the transfer")]
    PeerRestarted(ProcessAddr),
    /// The peer sent nothing for the transfer in too long.
    #[error("peer {0} stopped sending in the middle of a transfer")]
    Stalled(ProcessAddr),
    /// The RMA key does not match the region's.
    #[error("wrong key for the remote region")]
    BadKey,
    /// The RMA range lies outside the region.
    #[error("range {offset}+{len} lies outside the {region_len}-byte remote region")]
    OutOfBounds {
        /// Requested offset.
        offset: u64,
        /// Requested length.
        len: u64,
        /// The region's length.
        region_len: u64,
    },
    /// The remote region was unregistered.
    #[error("the remote region was unregistered")]
    Unregistered,
}

/// An entry of a port's channel-event queue: completions of transfers on
/// normal and open channels, each giving the buffer back to its owner.
#[derive(Debug, PartialEq, Eq)]
pub enum ChannelEvent {
    /// A send on a normal channel was received in full; the buffer is back.
    SendDone {
        /// The send.
        handle: SendHandle,
        /// The buffer that was sent.
        buffer: Vec<u8>,
    },
    /// A send on a normal channel failed; the buffer is back.
    SendFailed {
        /// The send.
        handle: SendHandle,
        /// The buffer that was to be sent.
        buffer: Vec<u8>,
        /// Why.
        error: TransferError,
    },
    /// A message arrived in the buffer posted on `channel`.
    Received {
        /// The channel.
        channel: ChannelId,
        /// The sender.
        from: ProcessAddr,
        /// The posted buffer, holding the message in its first `len` bytes.
        buffer: Vec<u8>,
        /// Message length.
        len: usize,
    },
    /// A message for `channel` could not be received. If a buffer was posted
    /// and nothing was written into it, it stays posted.
    ReceiveFailed {
        /// The channel.
        channel: ChannelId,
        /// The sender.
        from: ProcessAddr,
        /// Why.
        error: TransferError,
        /// The posted buffer, when the failure took it down (the transfer had
        /// started writing into it).
        buffer: Option<Vec<u8>>,
    },
    /// A remote write completed; the source buffer is back.
    PutDone {
        /// The put.
        handle: SendHandle,
        /// Its data.
        buffer: Vec<u8>,
    },
    /// A remote read completed; the buffer holds the data.
    GetDone {
        /// The get.
        handle: SendHandle,
        /// The data read.
        buffer: Vec<u8>,
    },
    /// A remote write or read failed; the buffer is back.
    RmaFailed {
        /// The put or get.
        handle: SendHandle,
        /// Its buffer.
        buffer: Vec<u8>,
        /// Why.
        error: TransferError,
    },
}
