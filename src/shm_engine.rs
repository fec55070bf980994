//! The progress engine's side of the shared-memory method.
//!
//! Shared memory is a method like the others for frames, but it also moves
//! what the core hands it whole: transfer data (normal channels, RMA) pushed
//! into the per-pair exchange queue and pulled straight into its destination
//! (one copy each side, pipelined), and small system-channel messages sent
//! directly without a BCL header (one cache line for 8 bytes). This module
//! connects [`ShmMethod`]'s extra interface to the [`Port`].

use crate::method_slot::MethodSlot;
use bcl_core::method::{LinkId, Route};
use bcl_core::port::{BulkKind, BulkToken, Port};
use bcl_core::{ProcessAddr, Time, TransferError};
use bcl_shm::{RxHandler, ShmEvent, ShmMethod};

/// How often (in progress rounds) a busy-polling engine looks for dead
/// shared-memory peers.
const PEER_CHECK_ROUNDS: u64 = 4096;

/// The engine's state for its shared-memory method.
pub(crate) struct ShmSide {
    /// Index of the method in the endpoint's list.
    pub index: u8,
    bulk: Vec<(LinkId, BulkToken)>,
}

/// Finds the shared-memory method among `methods`.
pub(crate) fn find(methods: &mut [MethodSlot]) -> Option<ShmSide> {
    methods.iter_mut().enumerate().find_map(|(i, m)| {
        m.shm().map(|_| ShmSide {
            index: i as u8,
            bulk: Vec::new(),
        })
    })
}

/// The shared-memory method of `side`.
#[inline]
pub(crate) fn method<'a>(
    methods: &'a mut [MethodSlot],
    side: &ShmSide,
) -> Option<&'a mut ShmMethod> {
    methods.get_mut(usize::from(side.index))?.shm()
}

/// Hands received items to the port.
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

    fn direct(&mut self, from: ProcessAddr, bytes: &[u8]) -> bool {
        self.port.deliver_direct(from, bytes)
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

impl ShmSide {
    /// Receives what shared memory brought. Returns the items handled.
    pub fn receive(
        &mut self,
        shm: &mut ShmMethod,
        port: &mut Port,
        now: Time,
        budget: usize,
    ) -> usize {
        let mut rx = PortRx {
            port,
            now,
            method: self.index,
        };
        shm.poll_rx(budget, &mut rx)
    }

    /// Whether [`ShmSide::housekeeping`] has anything to do in round
    /// `round`: transfers to start or push, frames to flush, written counts
    /// or events to report, or the periodic look for dead peers.
    pub fn housekeeping_due(&self, shm: &ShmMethod, port: &Port, round: u64) -> bool {
        shm.has_pending_work()
            || port.has_outbound_bulk()
            || round.is_multiple_of(PEER_CHECK_ROUNDS)
    }

    /// Moves transfer data out, turns peer deaths into failures, and now and
    /// then looks for dead peers. Returns work done.
    pub fn housekeeping(
        &mut self,
        shm: &mut ShmMethod,
        port: &mut Port,
        now: Time,
        round: u64,
    ) -> usize {
        let mut work = 0;
        // Transfers the port hands over.
        while let Some(b) = port.next_outbound_bulk() {
            work += 1;
            if b.route.method == self.index {
                shm.start_bulk(&b, port.bulk_source(b.token).unwrap_or(&[]));
            } else {
                port.outbound_bulk_failed(now, b.token, TransferError::PeerUnreachable(b.peer));
            }
        }
        // Their data, as far as the exchange queues take it.
        shm.bulk_to_push(&mut self.bulk);
        for &(link, token) in &self.bulk {
            let Some(src) = port.bulk_source(token) else {
                continue;
            };
            match shm.push_bulk(link, src) {
                Ok(true) => {
                    port.outbound_bulk_done(now, token);
                    work += 1;
                }
                Ok(false) => {}
                Err(addr) => {
                    port.outbound_bulk_failed(now, token, TransferError::PeerUnreachable(addr))
                }
            }
        }
        shm.flush();
        // Transfers receivers copied from our shared heap are done.
        work += shm.drain_pulled(|token| port.outbound_bulk_done(now, token));
        // Frames to shared-memory peers complete once in the peer's ring.
        shm.drain_written(|addr, written| port.confirm_written(now, addr, written));
        if round.is_multiple_of(PEER_CHECK_ROUNDS) {
            shm.check_peers();
        }
        while let Some(ev) = shm.poll_event() {
            work += 1;
            if let ShmEvent::PeerDied { addr, .. } | ShmEvent::PeerClosed { addr } = ev {
                port.peer_gone(now, addr);
            }
        }
        work
    }

    /// Sends a system-channel message directly if the peer is reached by
    /// shared memory and nothing of it is queued. `None`: send through the
    /// port.
    pub fn try_direct(
        &self,
        shm: &mut ShmMethod,
        port: &mut Port,
        dst: ProcessAddr,
        data: &[u8],
    ) -> Option<bcl_core::SendHandle> {
        if data.len() > shm.max_direct() || !port.can_accept_send() {
            return None;
        }
        let route = port.direct_route(dst)?;
        if route.method != self.index {
            return None;
        }
        shm.send_direct(route.link, data).ok()?;
        port.record_direct_send().ok()
    }
}
