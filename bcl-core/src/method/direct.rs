//! The direct path: an extension of [`Method`] for methods that move whole
//! messages and transfer data, not only frames.
//!
//! A method whose medium neither loses nor reorders (shared memory) can do
//! more than carry frames:
//!
//! * **direct messages**: a small system-channel message to a peer with
//!   nothing else queued travels whole, without a BCL header
//!   ([`DirectMethod::send_direct`]), and the receiver reads it in place
//!   from the method's receive slot, which the method lends until the next
//!   receive call ([`DirectMethod::take_direct`]) — no copy, no progress
//!   round;
//! * **bulk transfers**: the data of a normal-channel message, an RMA put
//!   or a get reply is not cut into frames; the method moves it from the
//!   port's source buffer straight into the receiver's destination buffer
//!   (see [`Port::next_outbound_bulk`](crate::Port::next_outbound_bulk)
//!   and [`Port::inbound_bulk`](crate::Port::inbound_bulk)).
//!
//! The engine implements the two callback interfaces, [`RxHandler`] (what
//! arrives) and [`TransferHost`] (what to send and what to report), over
//! its port; the method implements [`DirectMethod`] and hands itself over
//! with [`Method::into_direct`]. Nothing here names a concrete method.

use super::{LinkId, Method};
use crate::addr::ProcessAddr;
use crate::port::{BulkKind, BulkToken, OutboundBulk};

/// What receiving through a direct method hands the engine (implemented by
/// the engine over its port).
pub trait RxHandler {
    /// A BCL frame from `link`; false = cannot take it now (keep it).
    fn frame(&mut self, link: LinkId, bytes: &[u8]) -> bool;
    /// A whole system-channel message of `class` from `from`; false =
    /// cannot take it now (keep it).
    fn direct(&mut self, from: ProcessAddr, class: MessageClass, bytes: &[u8]) -> bool;
    /// Transfer data announced by `from`: where it goes (`None`: discard).
    fn bulk_start(
        &mut self,
        from: ProcessAddr,
        kind: BulkKind,
        channel: u16,
        transfer: u32,
        len: u64,
    ) -> Option<BulkToken>;
    /// The destination buffer of an accepted transfer (exactly its length).
    fn bulk_dest(&mut self, token: BulkToken) -> Option<&mut [u8]>;
    /// All of an accepted transfer's data is in its destination.
    fn bulk_done(&mut self, token: BulkToken);
}

/// What a direct method's housekeeping asks of the engine and reports to it
/// (implemented by the engine over its port).
pub trait TransferHost {
    /// The next outbound transfer for this method, if any.
    fn next_transfer(&mut self) -> Option<OutboundBulk>;
    /// The source bytes of a transfer handed over by
    /// [`TransferHost::next_transfer`] (`None` once it is finished or
    /// failed).
    fn transfer_data(&self, token: BulkToken) -> Option<&[u8]>;
    /// All of the transfer's data is with the receiver: it is done for the
    /// sender.
    fn transfer_sent(&mut self, token: BulkToken);
    /// The transfer cannot be delivered: `peer` is gone.
    fn transfer_failed(&mut self, token: BulkToken, peer: ProcessAddr);
    /// `total` frames have been written for `peer` since its link was made
    /// (a reliable method's frames are delivered once written).
    fn frames_written(&mut self, peer: ProcessAddr, total: u64);
    /// `peer` died or closed: fail what is pending for it.
    fn peer_gone(&mut self, peer: ProcessAddr);
}

/// Whom a whole message is for at the receiving engine: the application's
/// receive queue, or the engine's remote-service layer (see
/// [`FrameType::Service`](crate::wire::FrameType::Service)). A direct
/// method carries the class with the message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MessageClass {
    /// A system-channel message for the application.
    Application,
    /// A service message (a remote service request or its answer).
    Service,
}

/// What [`DirectMethod::take_direct`] found at the head of the receive
/// queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DirectHead<'a> {
    /// A direct message from a sender, in place in its receive slot, which
    /// is lent until the next receive call.
    Message(ProcessAddr, &'a [u8]),
    /// A direct service message, lent the same way.
    Service(ProcessAddr, &'a [u8]),
    /// Nothing.
    Empty,
    /// Something else (a frame, a transfer notice): for
    /// [`DirectMethod::poll_rx`].
    Other,
}

/// Why a direct message was not sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DirectError {
    /// Something of this link is queued, or there is no room now: send
    /// through the port instead (it keeps the order).
    #[error("the link is busy; send through the port")]
    Busy,
    /// Larger than a direct message may be.
    #[error("message too large for a direct message")]
    TooLarge,
    /// The peer is gone.
    #[error("peer {0} is gone")]
    Gone(ProcessAddr),
}

/// A method that moves whole messages and transfer data (see the module
/// documentation). An engine that holds one calls
/// [`poll_rx`](DirectMethod::poll_rx) instead of
/// [`Method::rx_burst`], and [`housekeeping`](DirectMethod::housekeeping)
/// when [`has_pending_work`](DirectMethod::has_pending_work) says so.
///
/// Such a method must be reliable ([`MethodCaps::reliable`](super::MethodCaps)):
/// direct messages and transfer data carry no sequence number.
pub trait DirectMethod: Method {
    /// Receives up to `budget` items — frames, direct messages, transfer
    /// data — into `rx`, in the order the peers sent them. Returns the
    /// number handled.
    fn poll_rx(&mut self, budget: usize, rx: &mut dyn RxHandler) -> usize;

    /// Takes the next received item if it is a direct message, in place:
    /// the receive path with no copy and no engine round, a few loads when
    /// nothing is there. The message's slot is lent to the caller until its
    /// next receive call on this method (`take_direct` or
    /// [`poll_rx`](DirectMethod::poll_rx)), which gives it back first — so
    /// giving it back is not on the path from arrival to reply, and the
    /// caller's handling of the bytes compiles into the caller (no closure
    /// behind an indirect call).
    fn take_direct(&mut self) -> DirectHead<'_>;

    /// Like [`take_direct`](DirectMethod::take_direct), but takes only a
    /// service message ([`DirectHead::Service`]); anything else is
    /// [`DirectHead::Other`] and stays where it is, for `take_direct` or
    /// [`poll_rx`](DirectMethod::poll_rx). How a loop that waits for
    /// service messages alone leaves the application's messages alone.
    fn take_direct_service(&mut self) -> DirectHead<'_>;

    /// Sends a whole system-channel message of `class` to the peer of
    /// `link` if nothing of that link is queued and there is room;
    /// otherwise says why not (the engine then sends it through the port).
    fn send_direct(
        &mut self,
        link: LinkId,
        class: MessageClass,
        data: &[u8],
    ) -> Result<(), DirectError>;

    /// Takes the port's outbound transfers, moves their data as far as the
    /// medium allows, and reports what finished, what was written and which
    /// peers are gone; with `check_peers`, also looks for dead peers now.
    /// Returns the amount of work done (0: nothing happened).
    fn housekeeping(&mut self, host: &mut dyn TransferHost, check_peers: bool) -> usize;

    /// Whether [`housekeeping`](DirectMethod::housekeeping) has anything to
    /// do besides transfers the port holds: items queued behind a full
    /// queue, counts or events to report.
    fn has_pending_work(&self) -> bool;

    /// Whether the method has work of its own besides messages arriving:
    /// transfer data owed or being copied, items queued or to report. An
    /// engine takes shortcuts (polling only for direct messages) only when
    /// this is false.
    fn has_queued_work(&self) -> bool;
}
