//! The engine's side of methods with the direct path
//! ([`DirectMethod`]): what they receive goes to the port, what the port
//! hands over for them (transfers) goes to them, and what they report
//! (frames written, transfers done, peers gone) goes back to the port.
//!
//! Two adapters over the [`Port`] implement the method's callback
//! interfaces: [`PortRx`] ([`RxHandler`]) and [`PortTransfers`]
//! ([`TransferHost`]). Nothing here knows which method it serves.

use crate::method_slot::MethodSlot;
use bcl_core::method::{DirectMethod, LinkId, MessageClass, Route, RxHandler, TransferHost};
use bcl_core::port::{BulkKind, BulkToken, OutboundBulk, Port};
use bcl_core::{ProcessAddr, Time, TransferError};

/// Hands what a direct method received to the port.
struct PortRx<'a> {
    port: &'a mut Port,
    now: Time,
    method: u8,
}

impl RxHandler for PortRx<'_> {
    fn frame(&mut self, link: LinkId, bytes: &[u8]) -> bool {
        let route = Route {
            method: self.method,
            link,
        };
        self.port.handle_frame(self.now, route, bytes)
    }

    fn direct(&mut self, from: ProcessAddr, class: MessageClass, bytes: &[u8]) -> bool {
        match class {
            MessageClass::Application => self.port.deliver_direct(from, bytes),
            MessageClass::Service => self.port.deliver_direct_service(from, bytes),
        }
    }

    fn bulk_start(
        &mut self,
        from: ProcessAddr,
        kind: BulkKind,
        channel: u16,
        transfer: u32,
        len: u64,
    ) -> Option<BulkToken> {
        self.port
            .inbound_bulk(self.now, from, kind, channel, transfer, len)
    }

    fn bulk_dest(&mut self, token: BulkToken) -> Option<&mut [u8]> {
        self.port.bulk_dest(token)
    }

    fn bulk_done(&mut self, token: BulkToken) {
        self.port.inbound_bulk_done(self.now, token);
    }
}

/// The port's outbound transfers for one direct method, and the reports
/// that method makes.
struct PortTransfers<'a> {
    port: &'a mut Port,
    now: Time,
    method: u8,
}

impl TransferHost for PortTransfers<'_> {
    fn next_transfer(&mut self) -> Option<OutboundBulk> {
        while let Some(b) = self.port.next_outbound_bulk() {
            if b.route.method == self.method {
                return Some(b);
            }
            // Routed to a method that does not move transfers whole: the
            // port never does this for a peer on a framed method, so the
            // peer's route changed under the transfer.
            let error = TransferError::PeerUnreachable(b.peer);
            self.port.outbound_bulk_failed(self.now, b.token, error);
        }
        None
    }

    fn transfer_data(&self, token: BulkToken) -> Option<&[u8]> {
        self.port.bulk_source(token)
    }

    fn transfer_sent(&mut self, token: BulkToken) {
        self.port.outbound_bulk_done(self.now, token);
    }

    fn transfer_failed(&mut self, token: BulkToken, peer: ProcessAddr) {
        let error = TransferError::PeerUnreachable(peer);
        self.port.outbound_bulk_failed(self.now, token, error);
    }

    fn frames_written(&mut self, peer: ProcessAddr, total: u64) {
        self.port.confirm_written(self.now, peer, total);
    }

    fn peer_gone(&mut self, peer: ProcessAddr) {
        self.port.peer_gone(self.now, peer);
    }
}

/// Receives up to `budget` items of the direct method at index `method`
/// into `port`. Returns the items handled.
pub(crate) fn receive(
    m: &mut dyn DirectMethod,
    method: u8,
    port: &mut Port,
    now: Time,
    budget: usize,
) -> usize {
    m.poll_rx(budget, &mut PortRx { port, now, method })
}

/// Whether [`housekeeping`] has work for the method: its own, or
/// transfers the port holds.
pub(crate) fn housekeeping_due(m: &dyn DirectMethod, port: &Port) -> bool {
    m.has_pending_work() || port.has_outbound_bulk()
}

/// Moves transfers and reports between the method at index `method` and
/// `port` (see [`DirectMethod::housekeeping`]). Returns work done.
pub(crate) fn housekeeping(
    m: &mut dyn DirectMethod,
    method: u8,
    port: &mut Port,
    now: Time,
    check_peers: bool,
) -> usize {
    m.housekeeping(&mut PortTransfers { port, now, method }, check_peers)
}

/// Sends a system-channel message of `class` as a direct message if `dst`
/// is routed over a method with the direct path, nothing of it is queued
/// and the port may accept a send. False: send it through the port. The
/// caller records the send with the port.
#[inline]
pub(crate) fn try_send(
    methods: &mut [MethodSlot],
    port: &Port,
    dst: ProcessAddr,
    class: MessageClass,
    data: &[u8],
) -> bool {
    if !port.can_accept_send() {
        return false;
    }
    let Some(route) = port.direct_route(dst) else {
        return false;
    };
    let Some(m) = methods
        .get_mut(usize::from(route.method))
        .and_then(MethodSlot::direct)
    else {
        return false;
    };
    m.send_direct(route.link, class, data).is_ok()
}
