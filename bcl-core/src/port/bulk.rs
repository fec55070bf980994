//! What the port offers an engine whose method moves data itself (shared
//! memory): transfer data handed over whole instead of framed ("bulk"), and
//! a shortcut for small system-channel messages.
//!
//! **Bulk transfers.** Over a method marked with [`Port::set_method_bulk`],
//! the data of a normal-channel send, an RMA put or the reply to an RMA get is
//! not cut into frames: once the rendezvous (or RMA request) has gone through
//! as ordinary control messages, the engine takes the transfer with
//! [`Port::next_outbound_bulk`], moves [`Port::bulk_source`] to the peer by
//! its own means (the shared-memory exchange queue, one copy, pipelined), and
//! reports [`Port::outbound_bulk_done`]. On the receiving side the engine asks
//! [`Port::inbound_bulk`] where the announced data goes, fills
//! [`Port::bulk_dest`] (the posted buffer, the region or the get buffer —
//! one copy) and reports [`Port::inbound_bulk_done`]. Completion events are
//! the same as for framed transfers.
//!
//! **Direct messages.** A system-channel message to a peer reached by such a
//! method, when nothing else of that peer is queued, may skip framing
//! altogether: the engine writes it whole ([`Port::direct_route`],
//! [`Port::record_direct_send`]) and the receiving engine hands it to
//! [`Port::deliver_direct`]. Order with framed messages is kept because the
//! shortcut is taken only when nothing framed is pending.

use super::channels::RxTransfer;
use super::{OnDone, Port};
use crate::addr::ProcessAddr;
use crate::event::{ChannelEvent, ChannelId, Delivery, SendEvent, SendHandle, TransferError};
use crate::method::Route;
use crate::time::Time;

/// What kind of data a bulk transfer carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BulkKind {
    /// A message for a normal channel's posted buffer.
    Normal,
    /// RMA put data for a region.
    Put,
    /// The data answering an RMA get.
    GetReply,
}

impl BulkKind {
    /// Wire code (for engines that announce transfers).
    pub fn code(self) -> u8 {
        match self {
            BulkKind::Normal => 1,
            BulkKind::Put => 2,
            BulkKind::GetReply => 3,
        }
    }

    /// The kind with wire code `code`.
    pub fn from_code(code: u8) -> Option<BulkKind> {
        match code {
            1 => Some(BulkKind::Normal),
            2 => Some(BulkKind::Put),
            3 => Some(BulkKind::GetReply),
            _ => None,
        }
    }
}

/// Names one bulk transfer between the port and its engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BulkToken {
    /// Outgoing: the message slot; incoming: the peer.
    index: u32,
    transfer: u32,
    kind: BulkKind,
}

/// An outgoing transfer whose data the engine is to move.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OutboundBulk {
    /// Names it in later calls.
    pub token: BulkToken,
    /// The receiver.
    pub peer: ProcessAddr,
    /// Its route.
    pub route: Route,
    /// What it is.
    pub kind: BulkKind,
    /// The channel (normal channel, or the open channel of the RMA).
    pub channel: u16,
    /// Transfer id, as the receiver knows it.
    pub transfer: u32,
    /// Bytes.
    pub len: u64,
}

impl Port {
    /// Whether transfers are waiting for the engine to move their data
    /// ([`Port::next_outbound_bulk`] would return one, or skip a stale one).
    pub fn has_outbound_bulk(&self) -> bool {
        !self.bulk_ready.is_empty()
    }

    /// The next transfer whose data the engine must move itself, if any.
    pub fn next_outbound_bulk(&mut self) -> Option<OutboundBulk> {
        while let Some(m) = self.bulk_ready.pop_front() {
            let Some(msg) = self.messages[m as usize].as_ref() else {
                continue;
            };
            let kind = match msg.on_done {
                OnDone::ChannelSend => BulkKind::Normal,
                OnDone::Put => BulkKind::Put,
                OnDone::GetReply => BulkKind::GetReply,
                _ => continue,
            };
            let p = &self.peers[msg.peer as usize];
            let Some(route) = p.route else { continue };
            return Some(OutboundBulk {
                token: BulkToken {
                    index: m,
                    transfer: msg.msg_id,
                    kind,
                },
                peer: p.addr,
                route,
                kind,
                channel: msg.channel,
                transfer: msg.msg_id,
                len: u64::from(self.body_len(&msg.body)),
            });
        }
        None
    }

    /// The outgoing message of `token`, if it is still there.
    fn bulk_message(&self, token: BulkToken) -> Option<&super::OutMessage> {
        self.messages
            .get(token.index as usize)
            .and_then(Option::as_ref)
            .filter(|m| m.msg_id == token.transfer && m.is_transfer())
    }

    /// The bytes of an outgoing bulk transfer.
    pub fn bulk_source(&self, token: BulkToken) -> Option<&[u8]> {
        let msg = self.bulk_message(token)?;
        let len = self.body_len(&msg.body);
        self.body_bytes(&msg.body, 0, len)
    }

    /// The engine moved all of an outgoing transfer.
    pub fn outbound_bulk_done(&mut self, now: Time, token: BulkToken) {
        if self.bulk_message(token).is_some() {
            self.complete_message(token.index, None);
            self.start_channel_sends(now);
        }
    }

    /// The engine could not move an outgoing transfer.
    pub fn outbound_bulk_failed(&mut self, now: Time, token: BulkToken, error: TransferError) {
        if self.bulk_message(token).is_some() {
            self.fail_transfer(token.index, error);
            self.start_channel_sends(now);
        }
    }

    /// Where `len` bytes of transfer `transfer` of `kind` announced by `from`
    /// on `channel` go. `None` if nobody waits for them (cancelled or never
    /// asked for): the engine then discards the data, and a normal-channel
    /// sender is told its transfer was cancelled.
    pub fn inbound_bulk(
        &mut self,
        now: Time,
        from: ProcessAddr,
        kind: BulkKind,
        channel: u16,
        transfer: u32,
        len: u64,
    ) -> Option<BulkToken> {
        if self.cut_off(from) {
            self.note_from_detached();
            return None;
        }
        let idx = self.peer_idx(from)?;
        let known = match kind {
            BulkKind::GetReply => self
                .get_waits
                .get(&(idx, transfer))
                .is_some_and(|w| w.len() as u64 == len),
            BulkKind::Normal => {
                self.rx_transfers.contains_key(&(idx, transfer))
                    || self.adopt_announced(idx, ChannelId(channel), transfer, len, now)
            }
            BulkKind::Put => matches!(
                self.rx_transfers.get(&(idx, transfer)),
                Some(RxTransfer::Put { len: l, .. }) if *l == len
            ),
        };
        if !known {
            self.stats.transfer_frames_dropped += 1;
            if kind == BulkKind::Normal {
                self.cancel_inbound(idx, channel, transfer, now);
            }
            return None;
        }
        Some(BulkToken {
            index: idx,
            transfer,
            kind,
        })
    }

    /// The buffer an incoming bulk transfer is written into.
    pub fn bulk_dest(&mut self, token: BulkToken) -> Option<&mut [u8]> {
        let key = (token.index, token.transfer);
        match token.kind {
            BulkKind::GetReply => self.get_waits.get_mut(&key).map(|w| w.buffer_mut()),
            BulkKind::Normal | BulkKind::Put => self.transfer_dest(key),
        }
    }

    /// The engine wrote all of an incoming transfer.
    pub fn inbound_bulk_done(&mut self, now: Time, token: BulkToken) {
        let key = (token.index, token.transfer);
        match token.kind {
            BulkKind::GetReply => {
                if let Some(w) = self.get_waits.remove(&key) {
                    let (handle, buffer) = w.into_parts();
                    self.push_channel_event(ChannelEvent::GetDone { handle, buffer });
                }
            }
            BulkKind::Normal | BulkKind::Put => self.finish_inbound(key, now),
        }
    }

    /// A reliable method reports that it has written `written` frames to
    /// `addr` in all (since its link to `addr` was made): frames to a
    /// reliable peer complete when written, not when handed over, so a
    /// message the method had to hold back (ring full) is not reported
    /// complete early, and the window bounds what the method holds.
    pub fn confirm_written(&mut self, now: Time, addr: ProcessAddr, written: u64) {
        let Some(idx) = self.peer_idx(addr) else {
            return;
        };
        let p = &self.peers[idx as usize];
        if !p.reliable {
            return;
        }
        // Both counts wrap; what the method holds is far below 2^31.
        let held = p.unseq_handed.wrapping_sub(written as u32) as i32;
        let held = u32::try_from(held).unwrap_or(0).min(p.in_flight());
        let ack = p.next_seq.plus(held.wrapping_neg());
        if ack != p.una {
            self.on_cumulative_ack(idx, ack, false, now);
            self.schedule(idx, now);
            self.recycle_windows(idx);
        }
    }

    // ------------------------------------------------------ direct messages

    /// The route for a system-channel message to `dst` that may skip
    /// framing: the peer's route is by a reliable method and nothing of it
    /// is queued or being framed. `None` otherwise (send normally).
    pub fn direct_route(&self, dst: ProcessAddr) -> Option<Route> {
        let p = &self.peers[self.peer_idx(dst)? as usize];
        (p.reliable && !p.has_unframed() && !p.queued).then_some(p.route?)
    }

    /// Whether a send would be accepted now (fewer sends outstanding than
    /// configured, counting unreaped completions).
    pub fn can_accept_send(&self) -> bool {
        self.outstanding + self.send_events.len() < self.cfg.max_outstanding_sends
    }

    /// Records a system-channel send the engine carried itself; its
    /// completion is queued at once. Refused (with the count) when as many
    /// sends are outstanding as configured.
    pub fn record_direct_send(&mut self) -> Result<SendHandle, super::SendError> {
        let pending = self.outstanding + self.send_events.len();
        if pending >= self.cfg.max_outstanding_sends {
            return Err(super::SendError::WouldBlock(pending));
        }
        let handle = self.new_handle();
        self.stats.messages_sent += 1;
        self.stats.messages_completed += 1;
        self.send_events.push_back(SendEvent::Complete(handle));
        Ok(handle)
    }

    /// Delivers a system-channel message that arrived whole by a method's
    /// shortcut. False if the ring has no room now: keep it and offer it
    /// again later (back-pressure, never loss).
    pub fn deliver_direct(&mut self, from: ProcessAddr, bytes: &[u8]) -> bool {
        self.deliver_direct_to(from, bytes, false)
    }

    /// As [`Port::deliver_direct`] for a service message (see
    /// [`Port::send_service`]): it goes to the service queue.
    pub fn deliver_direct_service(&mut self, from: ProcessAddr, bytes: &[u8]) -> bool {
        self.deliver_direct_to(from, bytes, true)
    }

    fn deliver_direct_to(&mut self, from: ProcessAddr, bytes: &[u8], service: bool) -> bool {
        if self.cut_off(from) {
            self.note_from_detached();
            return true;
        }
        if bytes.len() > self.cfg.eager_limit {
            self.stats.bad_frames.bad_length += 1;
            return true;
        }
        let Some(slot) = self.ring.alloc_with(bytes) else {
            self.stats.rx_backpressure += 1;
            return false;
        };
        self.stats.frames_received += 1;
        self.stats.messages_delivered += 1;
        let delivery = Delivery {
            from,
            slot,
            len: bytes.len() as u32,
        };
        if service {
            self.service_deliveries.push_back(delivery);
        } else {
            self.deliveries.push_back(delivery);
        }
        true
    }

    /// Counts a direct message the engine handed to the application
    /// itself, without the port's ring (see [`Port::deliver_direct`]).
    pub fn count_direct_delivery(&mut self) {
        self.stats.frames_received += 1;
        self.stats.messages_delivered += 1;
    }
}
