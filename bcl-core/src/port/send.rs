//! The sending side: accepting messages, framing them into the window,
//! retransmission, and what acknowledgements do to the window.

use super::congestion::{CongestionRound, Verdict};
use super::congestion_log::CongestionCause;
use super::loss::{self, RackMark};
use super::peer::{Liveness, PeerIdx, TxSlot, TxWindow, NO_MSG, RX_MSGS};
use super::{OnDone, OutBody, OutMessage, Port, SendError};
use crate::addr::ProcessAddr;
use crate::event::{ChannelEvent, SendEvent, SendFailure, SendHandle, TransferError};
use crate::method::{GatherSend, LinkId, NoGather, TxFrame};
use crate::seq::Seq;
use crate::time::Time;
use crate::wire::{
    self, bundle, flags, AckBody, FrameType, HeaderFields, NakReason, HEADER_LEN, SACK_BITS,
};
use zerocopy::network_endian::{U16, U32};
use zerocopy::IntoBytes;

/// Whether a peer may put new data on the wire now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Gate {
    /// Yes.
    Open,
    /// No: the window is full or nothing waits.
    Closed,
    /// Data waits and the window has room, but pacing holds it until then.
    PacedUntil(Time),
}

impl Port {
    /// Accepts `data` for eager delivery to `dst` on the system channel.
    ///
    /// The bytes are copied into the port's send pool, so the caller's buffer
    /// is free again at once. The message is delivered exactly once, in
    /// order with this port's other messages to `dst`; the send-completion
    /// queue reports [`SendEvent::Complete`] when `dst` has acknowledged it.
    pub fn send(
        &mut self,
        now: Time,
        dst: ProcessAddr,
        data: &[u8],
    ) -> Result<SendHandle, SendError> {
        self.send_ordered(now, dst, data, FrameType::Data)
    }

    /// Accepts a service message for `dst` (see [`FrameType::Service`]):
    /// as [`Port::send`], in the same order with this port's other
    /// messages to `dst`, but delivered to the receiver's service queue
    /// ([`Port::poll_service_delivery`]) instead of its application's.
    pub fn send_service(
        &mut self,
        now: Time,
        dst: ProcessAddr,
        data: &[u8],
    ) -> Result<SendHandle, SendError> {
        self.send_ordered(now, dst, data, FrameType::Service)
    }

    /// Queues a service failure for the engine, once per peer in a row.
    pub(super) fn note_service_failure(&mut self, f: SendFailure) {
        if self.service_failures.back() != Some(&f)
            && self.service_failures.len() < self.cfg.max_peers.max(64)
        {
            self.service_failures.push_back(f);
        }
    }

    /// Records a service message the engine carried itself (see
    /// [`Port::record_direct_send`]); nothing is reported for it.
    pub fn record_direct_service_send(&mut self) {
        self.stats.messages_sent += 1;
    }

    fn send_ordered(
        &mut self,
        now: Time,
        dst: ProcessAddr,
        data: &[u8],
        kind: FrameType,
    ) -> Result<SendHandle, SendError> {
        if data.len() > self.cfg.eager_limit {
            return Err(SendError::TooLarge {
                len: data.len(),
                limit: self.cfg.eager_limit,
            });
        }
        if dst == self.cfg.local {
            return Err(SendError::SelfSend(dst));
        }
        // Completions not yet reaped count too, so the event queue stays
        // bounded even for an application that never polls it.
        let pending = self.outstanding + self.send_events.len();
        if pending >= self.cfg.max_outstanding_sends {
            return Err(SendError::WouldBlock(pending));
        }
        let idx = self.peer_idx_or_create(dst)?;
        let Some(m) = self.alloc_message(false) else {
            return Err(SendError::WouldBlock(self.outstanding));
        };
        let data = self.take_buffer(data);
        let handle = self.new_handle();
        self.outstanding += 1;
        self.stats.messages_sent += 1;
        let on_done = if kind == FrameType::Service {
            OnDone::Service
        } else {
            OnDone::System
        };
        self.queue_ordered(idx, m, handle, kind, OutBody::Pooled(data), on_done, now);
        Ok(handle)
    }

    /// A fresh send handle.
    pub(super) fn new_handle(&mut self) -> SendHandle {
        let h = SendHandle(self.next_handle);
        self.next_handle += 1;
        h
    }

    /// Puts a message into slot `m` and at the end of peer `idx`'s ordered
    /// queue (system-channel and control messages: delivered in this order).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn queue_ordered(
        &mut self,
        idx: PeerIdx,
        m: u32,
        handle: SendHandle,
        kind: FrameType,
        body: OutBody,
        on_done: OnDone,
        now: Time,
    ) {
        let p = &mut self.peers[idx as usize];
        let msg_id = p.next_msg_id;
        p.next_msg_id = p.next_msg_id.wrapping_add(1);
        self.messages[m as usize] = Some(OutMessage {
            handle,
            peer: idx,
            kind,
            channel: 0,
            body,
            on_done,
            msg_id,
            first_seq: Seq(0),
            next_offset: 0,
            in_flight: 0,
            rma_offset: 0,
            next: NO_MSG,
        });
        if p.queue_tail == NO_MSG {
            p.queue_head = m;
        } else if let Some(prev) = self.messages[p.queue_tail as usize].as_mut() {
            prev.next = m;
        }
        p.queue_tail = m;
        self.ensure_tx_window(idx);
        self.schedule(idx, now);
    }

    /// Queues a control message (its body already encoded) to peer `idx`.
    pub(super) fn queue_control(&mut self, idx: PeerIdx, kind: FrameType, body: &[u8], now: Time) {
        let Some(m) = self.alloc_message(true) else {
            return;
        };
        let data = self.take_buffer(body);
        self.queue_ordered(
            idx,
            m,
            SendHandle(u64::MAX),
            kind,
            OutBody::Pooled(data),
            OnDone::Internal,
            now,
        );
    }

    /// Puts transfer `m` (already in its slot) at the end of its peer's
    /// transfer queue: it streams from now on, in chunks taking turns with
    /// the ordered messages.
    pub(super) fn queue_transfer(&mut self, m: u32, now: Time) {
        let Some(msg) = self.messages[m as usize].as_mut() else {
            return;
        };
        msg.next = NO_MSG;
        let idx = msg.peer;
        if self.peers[idx as usize].bulk {
            // The method moves the data itself: hand it to the engine.
            self.bulk_ready.push_back(m);
            return;
        }
        self.append_transfer(m);
        self.ensure_tx_window(idx);
        self.schedule(idx, now);
    }

    fn ensure_tx_window(&mut self, idx: PeerIdx) {
        let p = &mut self.peers[idx as usize];
        if p.tx.is_none() {
            let mut w = self.tx_windows.pop().unwrap_or_else(TxWindow::new);
            w.rack = RackMark::default();
            w.cc = CongestionRound::default();
            w.last_timeout = Time::ZERO;
            p.tx = Some(w);
        }
    }

    /// Writes the next frame for method `method` into `buf` (lent by that
    /// method, at least its MTU long) and says where it goes; `None` when the
    /// port has nothing more for this method now.
    pub fn poll_transmit(&mut self, method: u8, now: Time, buf: &mut [u8]) -> Option<TxFrame> {
        self.poll_transmit_gather(method, now, buf, &mut NoGather)
    }

    /// [`Port::poll_transmit`] for a method that sends frames in two pieces
    /// ([`Method::tx_burst_gather`](crate::method::Method::tx_burst_gather)):
    /// a data frame whose payload is at least `gather`'s
    /// [`min_payload`](GatherSend::min_payload) and lies in a message body
    /// (the application's buffer, a region, the pool) gets only its header
    /// written into `buf` and is sent at once through `gather`, its payload
    /// from where it lies; the frame is returned all the same.
    pub fn poll_transmit_gather(
        &mut self,
        method: u8,
        now: Time,
        buf: &mut [u8],
        gather: &mut dyn GatherSend,
    ) -> Option<TxFrame> {
        loop {
            let idx = self.ready.get_mut(method as usize)?.pop_front()?;
            let rail = if self.peers[idx as usize].has_rails() {
                match self.rail_dequeued(idx, method) {
                    Some(r) => Some(r),
                    None => continue,
                }
            } else {
                self.peers[idx as usize].queued = false;
                None
            };
            self.tx_rail = rail.map(|r| r as u8);
            let written = match rail {
                Some(r) => self.emit_on_rail(idx, r, now, buf, gather),
                None => self.emit(idx, now, buf, gather),
            };
            let link = self.tx_link(idx);
            self.tx_rail = None;
            self.schedule(idx, now);
            self.arm_timer(idx);
            if let Some(len) = written {
                // Whatever we sent it, we may now depend on its answer.
                self.start_watching(idx, now);
                let p = &mut self.peers[idx as usize];
                p.stats.frames_sent += 1;
                p.stats.bytes_sent += len as u64;
                self.stats.frames_sent += 1;
                return Some(TxFrame { link: link?, len });
            }
            self.recycle_windows(idx);
        }
    }

    /// One frame for peer `idx`: a NAK first, then a retransmission, then new
    /// data (carrying any acknowledgement), then a plain ACK.
    pub(super) fn emit(
        &mut self,
        idx: PeerIdx,
        now: Time,
        buf: &mut [u8],
        gather: &mut dyn GatherSend,
    ) -> Option<usize> {
        let p = &self.peers[idx as usize];
        if self.cut_off(p.addr) {
            return None;
        }
        if p.nak != NakReason::None || p.liveness.has(Liveness::PING_NOW | Liveness::ANSWER_PING) {
            return self.emit_ack(idx, now, buf);
        }
        if now >= p.busy_until {
            if p.probe_newest {
                if let Some(len) = self.emit_probe(idx, now, buf, gather) {
                    return Some(len);
                }
            }
            let p = &self.peers[idx as usize];
            if p.retx_pending() {
                if let Some(len) = self.emit_retransmission(idx, now, buf, gather) {
                    return Some(len);
                }
            }
            // New data only within the rail's room (resends replace frames
            // already counted in flight).
            if self.can_frame_new(idx, now) && self.tx_rail_room(idx) {
                if let Some(len) = self.emit_new_data(idx, now, buf, gather) {
                    return Some(len);
                }
            }
        }
        if self.peers[idx as usize].ack_now {
            return self.emit_ack(idx, now, buf);
        }
        None
    }

    /// Header fields common to every frame to peer `idx`, with the
    /// piggybacked acknowledgement when we have one to give: whenever the
    /// peer's frames to us carry sequence numbers, whatever our own route
    /// to it. (The two directions may go by different methods: a peer that
    /// reaches us over Ethernet waits for our acknowledgements even when we
    /// answer over shared memory, whose frames are unsequenced.)
    fn fields_to(&self, idx: PeerIdx, kind: FrameType, now: Time) -> HeaderFields {
        let p = &self.peers[idx as usize];
        let mut flag_bits = if p.reliable {
            flags::UNSEQUENCED
        } else if now < self.congested_until {
            flags::CONGESTED
        } else {
            0
        };
        if p.rx_known && !p.rx_unsequenced {
            flag_bits |= flags::ACK;
            if p.last_ack_sent.before(p.expected) {
                flag_bits |= flags::ACK_FRESH;
            }
        }
        HeaderFields {
            kind: Some(kind),
            flags: flag_bits,
            job: self.cfg.job,
            src: self.cfg.local,
            dst: p.addr,
            epoch: self.cfg.epoch,
            generation: p.tx_generation,
            ack: p.expected.0,
            base: p.una.0,
            ..HeaderFields::default()
        }
    }

    /// Whether frames to peer `idx` carry a CRC32C (its route's method may
    /// guarantee integrity).
    fn peer_crc(&self, idx: PeerIdx) -> bool {
        match self.peers[idx as usize].route {
            Some(r) => self.crc_for(r.method),
            None => self.cfg.crc,
        }
    }

    /// Marks the acknowledgement state as carried by the frame just built.
    fn ack_carried(&mut self, idx: PeerIdx) {
        let p = &mut self.peers[idx as usize];
        if p.rx_known {
            p.ack_now = false;
            p.unacked = 0;
            p.ack_deadline = Time::NEVER;
            p.last_ack_sent = p.expected;
        }
    }

    /// The message or transfer chunk to frame next for peer `idx`: the one
    /// being framed, else the next ordered message or transfer chunk, taking
    /// turns. An ordered message is framed whole before anything else (its
    /// frames must be consecutive); a transfer goes in chunks of
    /// [`CHUNK_FRAMES`] consecutive frames, then to the back of the queue.
    fn next_unit(&mut self, idx: PeerIdx) -> Option<u32> {
        let p = &self.peers[idx as usize];
        if p.framing != NO_MSG {
            return Some(p.framing);
        }
        let ordered_ready = p.queue_head != NO_MSG && self.ordered_may_start(idx, p.queue_head);
        let p = &mut self.peers[idx as usize];
        let take_transfer = p.xfer_head != NO_MSG && (p.transfer_turn || !ordered_ready);
        let m = if take_transfer {
            let m = p.xfer_head;
            p.xfer_head = self.messages[m as usize]
                .as_ref()
                .map_or(NO_MSG, |x| x.next);
            if p.xfer_head == NO_MSG {
                p.xfer_tail = NO_MSG;
            }
            p.chunk_left = CHUNK_FRAMES;
            m
        } else if ordered_ready {
            let m = p.queue_head;
            p.queue_head = self.messages[m as usize]
                .as_ref()
                .map_or(NO_MSG, |x| x.next);
            if p.queue_head == NO_MSG {
                p.queue_tail = NO_MSG;
            }
            m
        } else {
            return None;
        };
        p.transfer_turn = !take_transfer;
        p.framing = m;
        if let Some(msg) = self.messages[m as usize].as_mut() {
            msg.next = NO_MSG;
            // The unit's first frame gets the next sequence number.
            msg.first_seq = p.next_seq;
        }
        Some(m)
    }

    fn emit_new_data(
        &mut self,
        idx: PeerIdx,
        now: Time,
        buf: &mut [u8],
        gather: &mut dyn GatherSend,
    ) -> Option<usize> {
        let m = self.next_unit(idx)?;
        self.rail_start_stripe(idx);
        if self.bundle_forms(idx, m) {
            return self.emit_bundle(idx, m, now, buf);
        }
        let p = &self.peers[idx as usize];
        let seq = p.next_seq;
        let frag_payload = u32::from(p.frag_payload);
        let msg = self.messages[m as usize].as_ref()?;
        let total = self.body_len(&msg.body);
        let offset = msg.next_offset;
        let len = (total - offset).min(frag_payload);
        let last = offset + len == total;
        let transfer = msg.is_transfer();
        // Ordered messages: the sequence number of their first frame.
        // Transfer frames: the id of the next ordered message to be framed,
        // so a receiver meeting this sender at this frame knows where the
        // ordered stream stands.
        let first_seq = if transfer {
            let head = self.peers[idx as usize].queue_head;
            Seq(self
                .messages
                .get(head as usize)
                .and_then(Option::as_ref)
                .map_or(p.next_msg_id, |x| x.msg_id))
        } else {
            msg.first_seq
        };
        let mut fields = self.fields_to(idx, msg.kind, now);
        fields.seq = seq.0;
        fields.channel = msg.channel;
        fields.msg_id = msg.msg_id;
        fields.msg_seq = first_seq.0;
        fields.frag_offset = u64::from(offset);
        fields.msg_len = total;
        let Some(payload) = self.body_bytes(&msg.body, offset, len) else {
            // The region behind a get reply went away (unregister refuses while
            // a reply streams, so this is a bug): give up on it.
            self.fail_transfer(m, TransferError::Unregistered);
            return None;
        };
        let link = self.tx_link(idx);
        let frame_len = frame_out(buf, &fields, payload, self.peer_crc(idx), link, gather)?;
        if let Some(msg) = self.messages[m as usize].as_mut() {
            msg.next_offset = offset + len;
            msg.in_flight += 1;
        }
        let rto = self.peers[idx as usize].rtt.rto(&self.cfg.rto);
        let p = &mut self.peers[idx as usize];
        let w = p.tx.as_mut()?;
        *w.slot_mut(seq) = TxSlot {
            msg: m,
            offset,
            len: len as u16,
            sent_count: 1,
            last_of_msg: last,
            sacked: false,
            lost: false,
            bundle: false,
            rail: 0,
            msg_seq: first_seq,
            last_sent: now,
            sent_order: p.transmissions,
        };
        p.transmissions = p.transmissions.wrapping_add(1);
        p.next_seq = seq.next();
        self.rail_sent(idx, seq, len as u16, now);
        self.advance_framing(idx, m, last, transfer);
        let p = &mut self.peers[idx as usize];
        if p.reliable {
            // Never resent: it is acknowledged when the method reports it
            // written (confirm_written), so no timer.
            p.unseq_handed = p.unseq_handed.wrapping_add(1);
            self.stats.data_frames_sent += 1;
            return Some(frame_len);
        }
        if p.rto_deadline == Time::NEVER {
            p.rto_deadline = now + rto;
        }
        self.ack_carried(idx);
        self.stats.data_frames_sent += 1;
        self.pace(idx, now);
        Some(frame_len)
    }

    /// A sequenced DATA frame left for peer `idx` at `now`: pacing spaces
    /// the next one.
    fn pace(&mut self, idx: PeerIdx, now: Time) {
        if !self.cfg.congestion.controls() {
            return;
        }
        let p = &mut self.peers[idx as usize];
        let srtt = p.rtt.srtt();
        if let Some(w) = p.tx.as_mut() {
            p.cc.on_sent(
                &self.cfg.congestion,
                &mut w.cc,
                now,
                srtt,
                self.cfg.tx_window,
            );
        }
    }

    /// After a frame of unit `m` went out: the unit is done, or a transfer's
    /// chunk is, and the transfer goes to the back of the queue.
    fn advance_framing(&mut self, idx: PeerIdx, m: u32, last: bool, transfer: bool) {
        let p = &mut self.peers[idx as usize];
        if last {
            p.framing = NO_MSG;
        } else if transfer {
            p.chunk_left = p.chunk_left.saturating_sub(1);
            if p.chunk_left == 0 {
                p.framing = NO_MSG;
                self.append_transfer(m);
            }
        }
    }

    /// Length and id of message `m` if it may travel in a bundle: a
    /// system-channel message (not a control message or a transfer) not
    /// framed yet.
    fn bundleable(&self, m: u32) -> Option<(usize, u32)> {
        let msg = self.messages.get(m as usize)?.as_ref()?;
        match (&msg.body, msg.on_done, msg.kind) {
            (OutBody::Pooled(v), OnDone::System, FrameType::Data) if msg.next_offset == 0 => {
                Some((v.len(), msg.msg_id))
            }
            _ => None,
        }
    }

    /// The id of the oldest ordered message to peer `idx` not yet
    /// acknowledged (`None` if it cannot be told), given that `m` is the
    /// ordered message about to be framed.
    fn oldest_unacked_msg_id(&self, idx: PeerIdx, m: u32) -> Option<u32> {
        let p = &self.peers[idx as usize];
        if p.una == p.next_seq {
            return Some(self.messages.get(m as usize)?.as_ref()?.msg_id);
        }
        let slot = p.tx.as_ref()?.slot(p.una);
        let msg = self.messages.get(slot.msg as usize)?.as_ref()?;
        // A transfer frame records the id of the next ordered message.
        Some(if msg.is_transfer() {
            slot.msg_seq.0
        } else {
            msg.msg_id
        })
    }

    /// Whether ordered message `m` (not framed yet) may start now: its id
    /// is fewer than [`RX_MSGS`] past the oldest ordered message to the peer
    /// not yet acknowledged. The receiver keeps undelivered messages in
    /// `RX_MSGS` entries indexed by id; this keeps every id it may have to
    /// hold at once in a different entry. One frame per message never comes
    /// near it (at most 256 frames fly); bundles do. Peers over a method
    /// that never loses need no bound (their frames are never held out of
    /// order).
    pub(super) fn ordered_may_start(&self, idx: PeerIdx, m: u32) -> bool {
        let p = &self.peers[idx as usize];
        if p.reliable {
            return true;
        }
        let Some(id) = self
            .messages
            .get(m as usize)
            .and_then(Option::as_ref)
            .map(|x| x.msg_id)
        else {
            return true;
        };
        self.oldest_unacked_msg_id(idx, m)
            .is_none_or(|oldest| id.wrapping_sub(oldest) < RX_MSGS as u32)
    }

    /// Whether peer `idx` has new data that may be framed now: room in the
    /// window, and a unit being framed, a transfer waiting, or an ordered
    /// message that may start.
    pub(super) fn can_frame_new(&self, idx: PeerIdx, now: Time) -> bool {
        self.new_data_gate(idx, now) == Gate::Open
    }

    /// Frames peer `idx` may have in flight: its congestion window (also
    /// while dormant, when it only grows) if congestion control is on,
    /// else the configured window.
    pub(super) fn peer_window(&self, idx: PeerIdx) -> u32 {
        let p = &self.peers[idx as usize];
        if self.cfg.congestion.controls() && !p.reliable {
            let w =
                p.cc.allowed_frames(&self.cfg.congestion, p.tx.as_ref().map(|w| &w.cc));
            // Over rails the window is spread: each rail's queue sees its
            // share, so the delay the controller judges is that of one
            // rail's part, and the window it settles on is per rail.
            w.saturating_mul(self.rails_up(idx)).min(self.cfg.tx_window)
        } else {
            self.cfg.tx_window
        }
    }

    /// Whether the rail being served may carry a data frame for peer
    /// `idx` (always, for a peer without rails).
    #[inline]
    fn tx_rail_room(&self, idx: PeerIdx) -> bool {
        match self.tx_rail_of(idx) {
            None => true,
            Some(r) => self.rail_has_room(idx, r, self.peer_window(idx)),
        }
    }

    /// Whether peer `idx` may frame new data at `now`, and if only pacing
    /// stops it, until when.
    pub(super) fn new_data_gate(&self, idx: PeerIdx, now: Time) -> Gate {
        let p = &self.peers[idx as usize];
        let controlled = self.cfg.congestion.controls() && !p.reliable && !p.cc.is_dormant();
        let window = self.peer_window(idx);
        if p.in_flight() >= window {
            return Gate::Closed;
        }
        let waiting = p.framing != NO_MSG
            || p.xfer_head != NO_MSG
            || (p.queue_head != NO_MSG && self.ordered_may_start(idx, p.queue_head));
        if !waiting {
            return Gate::Closed;
        }
        // Pacing spaces one path's frames; a peer with rails spreads its
        // window over several paths, each with its own queue.
        if controlled && !p.has_rails() {
            if let Some(w) = &p.tx {
                if let Some(t) = p.cc.paced_until(&w.cc, now) {
                    return Gate::PacedUntil(t);
                }
            }
        }
        Gate::Open
    }

    /// Whether the frame about to carry ordered message `m` (its first
    /// frame) should be a bundle: bundling is on, the peer's method
    /// sequences frames, and `m` and the next queued message are both
    /// bundleable and fit one frame together.
    fn bundle_forms(&self, idx: PeerIdx, m: u32) -> bool {
        let p = &self.peers[idx as usize];
        if !self.cfg.bundle || p.reliable || p.queue_head == NO_MSG {
            return false;
        }
        let (Some((len1, _)), Some((len2, id2))) =
            (self.bundleable(m), self.bundleable(p.queue_head))
        else {
            return false;
        };
        if bundle::payload_len([len1, len2]) > usize::from(p.frag_payload) {
            return false;
        }
        self.oldest_unacked_msg_id(idx, m)
            .is_some_and(|oldest| id2.wrapping_sub(oldest) < RX_MSGS as u32)
    }

    /// Frames message `m` and the bundleable messages queued behind it, as
    /// many as fit, into one bundle frame (see [`wire::bundle`]).
    fn emit_bundle(&mut self, idx: PeerIdx, m: u32, now: Time, buf: &mut [u8]) -> Option<usize> {
        let p = &self.peers[idx as usize];
        let seq = p.next_seq;
        let end = (HEADER_LEN + usize::from(p.frag_payload)).min(buf.len());
        let oldest = self.oldest_unacked_msg_id(idx, m)?;
        let span = RX_MSGS as u32;
        let (_, first_id) = self.bundleable(m)?;
        let mut w = bundle::Writer::new(buf.get_mut(HEADER_LEN..end)?)?;
        if !w.push(self.pooled_bytes(m)) {
            return None;
        }
        let mut last = m;
        loop {
            let head = self.peers[idx as usize].queue_head;
            let Some((len, id)) = self.bundleable(head) else {
                break;
            };
            if !w.fits(len) || id.wrapping_sub(oldest) >= span {
                break;
            }
            w.push(self.pooled_bytes(head));
            let next = self.messages[head as usize]
                .as_ref()
                .map_or(NO_MSG, |x| x.next);
            let p = &mut self.peers[idx as usize];
            p.queue_head = next;
            if next == NO_MSG {
                p.queue_tail = NO_MSG;
            }
            if let Some(x) = self.messages[head as usize].as_mut() {
                x.next = NO_MSG;
                x.first_seq = seq;
            }
            if let Some(x) = self.messages[last as usize].as_mut() {
                x.next = head;
            }
            last = head;
        }
        let count = u64::from(w.count());
        let payload_len = w.finish();
        // Every member is framed whole and has one frame in flight.
        let mut member = m;
        while let Some(x) = self
            .messages
            .get_mut(member as usize)
            .and_then(Option::as_mut)
        {
            x.next_offset = match &x.body {
                OutBody::Pooled(v) => v.len() as u32,
                _ => 0,
            };
            x.in_flight += 1;
            member = x.next;
        }
        let mut fields = self.fields_to(idx, FrameType::Data, now);
        fields.flags |= flags::BUNDLE;
        fields.seq = seq.0;
        fields.msg_id = first_id;
        fields.msg_seq = seq.0;
        fields.msg_len = payload_len as u32;
        let frame_len =
            wire::encode_header_for_payload_in_place(buf, &fields, payload_len, self.peer_crc(idx))
                .ok()?;
        let rto = self.peers[idx as usize].rtt.rto(&self.cfg.rto);
        let p = &mut self.peers[idx as usize];
        let w = p.tx.as_mut()?;
        *w.slot_mut(seq) = TxSlot {
            msg: m,
            offset: 0,
            len: payload_len as u16,
            sent_count: 1,
            last_of_msg: true,
            sacked: false,
            lost: false,
            bundle: true,
            rail: 0,
            msg_seq: seq,
            last_sent: now,
            sent_order: p.transmissions,
        };
        p.transmissions = p.transmissions.wrapping_add(1);
        p.next_seq = seq.next();
        p.framing = NO_MSG;
        self.rail_sent(idx, seq, payload_len as u16, now);
        let p = &mut self.peers[idx as usize];
        if p.rto_deadline == Time::NEVER {
            p.rto_deadline = now + rto;
        }
        self.ack_carried(idx);
        self.stats.data_frames_sent += 1;
        self.stats.bundles_sent += 1;
        self.stats.messages_bundled += count;
        self.pace(idx, now);
        Some(frame_len)
    }

    /// The bytes of pooled message `m` (empty for any other body).
    fn pooled_bytes(&self, m: u32) -> &[u8] {
        match self.messages.get(m as usize).and_then(Option::as_ref) {
            Some(OutMessage {
                body: OutBody::Pooled(v),
                ..
            }) => v,
            _ => &[],
        }
    }

    /// Writes again the bundle whose first message is `m` (the members
    /// linked behind it) into `payload`; returns the payload length.
    fn rewrite_bundle(&self, m: u32, payload: &mut [u8]) -> Option<usize> {
        let mut w = bundle::Writer::new(payload)?;
        let mut member = m;
        while member != NO_MSG {
            if !w.push(self.pooled_bytes(member)) {
                return None;
            }
            member = self.messages.get(member as usize)?.as_ref()?.next;
        }
        Some(w.finish())
    }

    /// The messages of a bundle whose first message is `m`, in order.
    fn bundle_members(&self, m: u32) -> impl Iterator<Item = u32> + '_ {
        std::iter::successors(Some(m), move |&x| {
            self.messages
                .get(x as usize)
                .and_then(Option::as_ref)
                .map(|msg| msg.next)
                .filter(|&n| n != NO_MSG)
        })
    }

    /// Puts a transfer at the back of its peer's queue (a new one, or one
    /// whose chunk is done).
    fn append_transfer(&mut self, m: u32) {
        let Some(idx) = self.messages[m as usize].as_ref().map(|x| x.peer) else {
            return;
        };
        let p = &mut self.peers[idx as usize];
        if p.xfer_tail == NO_MSG {
            p.xfer_head = m;
        } else if let Some(prev) = self.messages[p.xfer_tail as usize].as_mut() {
            prev.next = m;
        }
        p.xfer_tail = m;
    }

    /// Length of a message body.
    pub(super) fn body_len(&self, body: &OutBody) -> u32 {
        match body {
            OutBody::Pooled(v) => v.len() as u32,
            OutBody::Owned(b) => b.len() as u32,
            OutBody::Region { len, .. } | OutBody::Void { len } => *len,
        }
    }

    /// Bytes `[offset, offset + len)` of a message body.
    pub(super) fn body_bytes<'a>(
        &'a self,
        body: &'a OutBody,
        offset: u32,
        len: u32,
    ) -> Option<&'a [u8]> {
        let range = offset as usize..(offset + len) as usize;
        match body {
            OutBody::Pooled(v) => v.get(range),
            OutBody::Owned(b) => b.get(range),
            OutBody::Region {
                region,
                offset: base,
                ..
            } => {
                let data = self.region_data(*region)?;
                let start = usize::try_from(*base).ok()?;
                data.get(start + range.start..start + range.end)
            }
            OutBody::Void { .. } => Some(&[]),
        }
    }

    /// Resends the newest frame in flight (the second half of a timeout's
    /// probe).
    fn emit_probe(
        &mut self,
        idx: PeerIdx,
        now: Time,
        buf: &mut [u8],
        gather: &mut dyn GatherSend,
    ) -> Option<usize> {
        let p = &mut self.peers[idx as usize];
        p.probe_newest = false;
        if p.una == p.next_seq {
            return None;
        }
        let newest = p.next_seq.plus(u32::MAX);
        // Reuse the sweep for one frame, then restore the sweep as it was.
        let saved = (p.retx_from, p.retx_to, p.retx_all);
        p.retx_from = newest;
        p.retx_to = p.next_seq;
        p.retx_all = true;
        let len = self.emit_retransmission(idx, now, buf, gather);
        let p = &mut self.peers[idx as usize];
        (p.retx_from, p.retx_to, p.retx_all) = saved;
        len
    }

    /// Resends the next frame of the sweep that still needs it.
    fn emit_retransmission(
        &mut self,
        idx: PeerIdx,
        now: Time,
        buf: &mut [u8],
        gather: &mut dyn GatherSend,
    ) -> Option<usize> {
        loop {
            let p = &mut self.peers[idx as usize];
            if !p.retx_pending() {
                return None;
            }
            let seq = p.retx_from;
            p.retx_from = seq.next();
            if seq.before(p.una) || !seq.before(p.next_seq) {
                continue;
            }
            let all = p.retx_all;
            let slot = *p.tx.as_ref()?.slot(seq);
            if slot.sacked || (!all && !slot.lost) {
                continue;
            }
            let msg = self.messages[slot.msg as usize].as_ref()?;
            let mut fields = self.fields_to(idx, msg.kind, now);
            fields.seq = seq.0;
            fields.channel = msg.channel;
            fields.msg_id = msg.msg_id;
            fields.msg_seq = slot.msg_seq.0;
            fields.frag_offset = u64::from(slot.offset);
            let frame_len = if slot.bundle {
                let end = (HEADER_LEN + usize::from(slot.len)).min(buf.len());
                let len = self.rewrite_bundle(slot.msg, buf.get_mut(HEADER_LEN..end)?)?;
                fields.flags |= flags::BUNDLE;
                fields.msg_len = len as u32;
                wire::encode_header_for_payload_in_place(buf, &fields, len, self.peer_crc(idx))
                    .ok()?
            } else {
                fields.msg_len = self.body_len(&msg.body);
                let payload = self.body_bytes(&msg.body, slot.offset, u32::from(slot.len))?;
                let link = self.tx_link(idx);
                frame_out(buf, &fields, payload, self.peer_crc(idx), link, gather)?
            };
            let p = &mut self.peers[idx as usize];
            if let Some(w) = p.tx.as_mut() {
                let s = w.slot_mut(seq);
                s.sent_count = s.sent_count.saturating_add(1);
                s.last_sent = now;
                s.lost = false;
                s.sent_order = p.transmissions;
                p.transmissions = p.transmissions.wrapping_add(1);
            }
            self.rail_sent(idx, seq, slot.len, now);
            let p = &mut self.peers[idx as usize];
            // The oldest frame sent again starts its timeout afresh: its
            // acknowledgement cannot come before a round trip from now, and
            // a timeout armed at an older acknowledgement would fire while
            // the resend is on its way, resending twice more for nothing.
            if seq == p.una && !p.reliable {
                let deadline = now + p.rtt.rto(&self.cfg.rto);
                if p.rto_deadline < deadline {
                    p.rto_deadline = deadline;
                }
            }
            p.stats.retransmits += 1;
            self.stats.retransmits += 1;
            self.ack_carried(idx);
            self.pace(idx, now);
            return Some(frame_len);
        }
    }

    /// An ACK or NAK frame with the selective bitmap; a ping, or the answer
    /// to one, when liveness asks (without an acknowledgement if we have
    /// none to give).
    pub(super) fn emit_ack(&mut self, idx: PeerIdx, now: Time, buf: &mut [u8]) -> Option<usize> {
        let p = &self.peers[idx as usize];
        let ping = p.liveness.has(Liveness::PING_NOW);
        let answer = p.liveness.has(Liveness::ANSWER_PING);
        if !p.rx_known && !p.liveness.has(Liveness::PING_NOW | Liveness::ANSWER_PING) {
            // Nothing to acknowledge: the NAK/ACK request is stale.
            let p = &mut self.peers[idx as usize];
            p.ack_now = false;
            p.nak = NakReason::None;
            return None;
        }
        let reason = p.nak;
        let kind = if reason == NakReason::None {
            FrameType::Ack
        } else {
            FrameType::Nak
        };
        let mut body = AckBody::new(reason);
        if let Some(rx) = p.rx.as_ref() {
            body.sack_bits = U16::new(rx.bitmap.to_wire(&mut body.bitmap));
        }
        body.dropped_seq = U32::new(p.nak_dropped.0);
        body.duplicates = p.dups_unreported;
        let mut fields = self.fields_to(idx, kind, now);
        if ping {
            fields.flags |= flags::PING;
        }
        // An answer to a ping carries this node's live ports, when this
        // node shares liveness (see `node`).
        let view = if answer && kind == FrameType::Ack {
            self.local_view(now)
        } else {
            None
        };
        let len = match view {
            Some(live) => {
                fields.flags |= flags::NODE;
                let mut payload = [0u8; size_of::<AckBody>() + wire::NODE_VIEW_LEN];
                payload[..size_of::<AckBody>()].copy_from_slice(body.as_bytes());
                payload[size_of::<AckBody>()..].copy_from_slice(&super::node::encode_view(&live));
                wire::encode(buf, &fields, &payload, self.peer_crc(idx)).ok()?
            }
            None => wire::encode(buf, &fields, body.as_bytes(), self.peer_crc(idx)).ok()?,
        };
        let p = &mut self.peers[idx as usize];
        p.nak = NakReason::None;
        p.dups_unreported = 0;
        p.liveness.set(Liveness::ANSWER_PING, false);
        // More pings due: the peer stays ready for the next one.
        let extra = p.liveness.extra_pings();
        if ping && extra > 0 {
            p.liveness.set_extra_pings(extra - 1);
        } else {
            p.liveness.set(Liveness::PING_NOW, false);
        }
        self.ack_carried(idx);
        if ping {
            self.stats.pings_sent += 1;
        } else if kind == FrameType::Ack {
            self.stats.acks_sent += 1;
        } else {
            self.stats.naks_sent += 1;
        }
        Some(len)
    }

    /// Applies a cumulative acknowledgement `ack` from peer `idx`: completes
    /// every message whose last fragment it covers. A round-trip sample is
    /// taken only if the acknowledgement is `fresh` (sent for the first
    /// time) and every frame it newly covers was sent once (Karn's rule,
    /// extended to holes and to repeated acknowledgements).
    /// Returns false if the value acknowledges frames never sent.
    pub(super) fn on_cumulative_ack(
        &mut self,
        idx: PeerIdx,
        ack: Seq,
        fresh: bool,
        now: Time,
    ) -> bool {
        let p = &self.peers[idx as usize];
        let Some(advance) = ack.since(p.una) else {
            return true; // older than what we know: a late frame
        };
        if advance == 0 {
            return true;
        }
        if advance > p.in_flight() {
            return false;
        }
        let Some(w) = p.tx.as_ref() else {
            return false;
        };
        // Karn's rule, extended: a sample only if no frame this ACK newly
        // covers was sent twice (else the ACK may have waited for the resend
        // that filled a hole), and the ACK itself is sent for the first time.
        let newest = *w.slot(ack.plus(u32::MAX));
        // A newest frame already selectively acknowledged gave its sample
        // then; the time since it was sent now is how long the hole before
        // it took to fill, not a round trip. One sent before the last
        // timeout may be acknowledged only now because the timeout's probe
        // made the receiver answer (its first acknowledgement was lost).
        let mut clean = fresh && !newest.sacked && newest.last_sent >= w.last_timeout;
        let mut s = p.una;
        while clean && s != ack {
            clean = w.slot(s).sent_count == 1;
            s = s.next();
        }
        // A frame resent less than the least round trip ago cannot have
        // been acknowledged by its resend: an earlier copy got through, and
        // the timeout that resent it was spurious (the round trip outgrew
        // the timeout, behind a growing queue).
        let min_rtt = p.rtt.min_rtt().unwrap_or_default();
        // Once the timeout has doubled thrice, an acknowledgement of the
        // oldest frame alone is taken as its resend's: had the first copy
        // arrived late, the frames sent after it would likely have come
        // with it. (Taken as spurious, it kept the timeout doubling while
        // every frame in flight was a lost resend and a standing queue had
        // raised the least round trip: one frame recovered per timeout, up
        // to 200 ms each.)
        let single = advance == 1 && p.rtt.backoff_shift() >= SINGLE_ACK_NOT_SPURIOUS_AFTER;
        let mut spurious = false;
        let mut s = p.una;
        while !clean && !spurious && !single && s != ack {
            let slot = w.slot(s);
            spurious = slot.sent_count > 1 && now.saturating_since(slot.last_sent) < min_rtt;
            s = s.next();
        }
        let old_una = p.una;
        let next = p.next_seq;
        let p = &mut self.peers[idx as usize];
        let sample = clean.then(|| now.saturating_since(newest.last_sent));
        match sample {
            Some(round_trip) => p.rtt.sample(round_trip),
            // After a spurious timeout the backed-off timeout stays until a
            // clean sample: falling back to the old estimate would time out
            // again at once (as Eifel and F-RTO do in TCP).
            None if spurious => {}
            // Karn's algorithm keeps a backed-off timeout until a clean
            // sample; under heavy loss clean samples are rare and the timeout
            // would sit at its cap. Since a timeout only costs one probe
            // frame here, progress resets the backoff instead.
            None => p.rtt.reset_backoff(),
        }
        if let Some(round_trip) = sample {
            self.congestion_sample(idx, round_trip, advance, ack, next, now);
        } else if self.cfg.congestion.controls() {
            // A dormant window grows with what is acknowledged, sample or
            // not (resends and timeouts leave few clean samples).
            let p = &mut self.peers[idx as usize];
            if !p.reliable && p.cc.is_dormant() {
                p.cc.grow_dormant(advance, self.cfg.tx_window);
            }
        }

        let p = &mut self.peers[idx as usize];
        p.una = ack;
        p.consecutive_timeouts = 0;
        p.busy_shift = 0;
        if p.retx_from.before(ack) {
            p.retx_from = ack;
        }
        // A reliable method never loses what it wrote: no timer.
        p.rto_deadline = if p.una == p.next_seq || p.reliable {
            Time::NEVER
        } else {
            now + p.rtt.rto(&self.cfg.rto)
        };
        if p.una == p.next_seq {
            p.reorder.deadline = Time::NEVER;
        }
        let mut s = old_una;
        while s != ack {
            let p = &mut self.peers[idx as usize];
            let rail_sets = &mut self.rail_sets;
            let slot = p.tx.as_mut().map(|w| {
                let slot = *w.slot(s);
                if !slot.sacked {
                    loss::note_delivered(&mut w.rack, &mut p.reorder, &p.rtt, &slot, now);
                }
                Port::rail_slot_done(rail_sets, idx, w.slot_mut(s), true, now);
                slot
            });
            match slot {
                Some(slot) if slot.bundle => self.bundle_acknowledged(slot.msg),
                Some(slot) => self.frame_acknowledged(slot.msg, slot.last_of_msg),
                None => {}
            }
            s = s.next();
        }
        if self.peers[idx as usize].has_rails() {
            self.check_rails(idx, now);
        }
        true
    }

    /// One frame of message `m` is cumulatively acknowledged.
    fn frame_acknowledged(&mut self, m: u32, last_of_msg: bool) {
        let Some(msg) = self.messages.get_mut(m as usize).and_then(Option::as_mut) else {
            return;
        };
        msg.in_flight = msg.in_flight.saturating_sub(1);
        let void = matches!(msg.body, OutBody::Void { .. });
        if void {
            if msg.in_flight == 0 && msg.next_offset >= self.body_len_of(m) {
                self.free_message(m);
            }
        } else if last_of_msg {
            self.complete_message(m, None);
        }
    }

    /// A bundle frame is cumulatively acknowledged: each of its messages,
    /// first `m` and then those linked behind it, completes.
    fn bundle_acknowledged(&mut self, m: u32) {
        let mut member = m;
        while let Some(msg) = self.messages.get(member as usize).and_then(Option::as_ref) {
            let next = msg.next;
            self.complete_message(member, None);
            if next == NO_MSG {
                break;
            }
            member = next;
        }
    }

    fn body_len_of(&self, m: u32) -> u32 {
        self.messages[m as usize]
            .as_ref()
            .map_or(0, |x| self.body_len(&x.body))
    }

    /// Feeds congestion control a round-trip sample that came with an
    /// acknowledgement newly covering `acked` frames (`una`, `next`: the
    /// window after it).
    fn congestion_sample(
        &mut self,
        idx: PeerIdx,
        round_trip: std::time::Duration,
        acked: u32,
        una: Seq,
        next: Seq,
        now: Time,
    ) {
        let cfg = &self.cfg.congestion;
        let p = &mut self.peers[idx as usize];
        if !cfg.controls() || p.reliable {
            return;
        }
        let Some(w) = p.tx.as_mut() else { return };
        let bound = self.cfg.tx_window;
        let before = p.cc;
        let verdict =
            p.cc.on_round_trip(cfg, &mut w.cc, round_trip, acked, una, next, now, bound);
        if verdict == Verdict::Decreased {
            self.stats.congestion_decreases += 1;
        }
        if self.cc_log.is_on() {
            let before = before.limit_frames(self.cfg.tx_window);
            let cause = if p.cc.limit_frames(self.cfg.tx_window) < before {
                CongestionCause::DelayDecrease
            } else {
                CongestionCause::Increase
            };
            self.cc_log.record(&self.cfg, p, before, now, cause);
        }
    }

    /// Peer `idx` says frames went missing on their way to it lately
    /// ([`flags::CONGESTED`]): a dormant controller (mode auto) wakes, as
    /// after a loss of our own.
    pub(super) fn on_congestion_echo(&mut self, idx: PeerIdx, now: Time) {
        let cfg = &self.cfg.congestion;
        let p = &mut self.peers[idx as usize];
        if !cfg.controls() || p.reliable || !p.cc.is_dormant() {
            return;
        }
        let Some(w) = p.tx.as_mut() else { return };
        let before = p.cc;
        if p.cc.on_congestion_echo(cfg, &mut w.cc, p.una, p.next_seq) == Verdict::Decreased {
            self.stats.congestion_decreases += 1;
            if self.cc_log.is_on() {
                let before = before.limit_frames(self.cfg.tx_window);
                self.cc_log
                    .record(&self.cfg, p, before, now, CongestionCause::Echo);
            }
        }
    }

    /// Applies the selective part and reason of an ACK or NAK body.
    pub(super) fn on_ack_body(&mut self, idx: PeerIdx, ack: Seq, body: &AckBody, now: Time) {
        // The bitmap is the receiver's whole view of the window past `ack`:
        // frames it no longer holds (it may drop out-of-order data to make
        // room) are un-marked, so they are sent again.
        let p = &mut self.peers[idx as usize];
        let (una, next) = (p.una, p.next_seq);
        // The newest frame sent once that this body newly shows delivered:
        // a round-trip sample free of Karn's ambiguity, which matters when
        // reordering makes every cumulative acknowledgement cover a resend.
        let mut sample = None;
        if let Some(w) = p.tx.as_mut() {
            // The frame at the cumulative acknowledgement is by definition
            // missing at the receiver.
            if ack.in_window(una, next.since(una).unwrap_or(0)) {
                w.slot_mut(ack).sacked = false;
            }
            let mut s = ack.next();
            while s.before(next) && s.since(ack).is_some_and(|d| d <= SACK_BITS as u32) {
                if !s.before(una) {
                    let held = body.is_set((s.since(ack).unwrap_or(1) - 1) as usize);
                    let slot = w.slot_mut(s);
                    let newly = held && !slot.sacked;
                    slot.sacked = held;
                    if newly {
                        Port::rail_slot_done(&mut self.rail_sets, idx, slot, true, now);
                        let slot = *slot;
                        if loss::note_delivered(&mut w.rack, &mut p.reorder, &p.rtt, &slot, now)
                            && slot.sent_count == 1
                            && slot.last_sent >= w.last_timeout
                        {
                            sample = Some(now.saturating_since(slot.last_sent));
                        }
                    }
                }
                s = s.next();
            }
        }
        if let Some(round_trip) = sample {
            p.rtt.sample(round_trip);
            self.congestion_sample(idx, round_trip, 0, una, next, now);
        }
        self.on_duplicates_reported(idx, body.duplicates, now);
        if self.peers[idx as usize].has_rails() {
            self.check_rails(idx, now);
        }
        match body.reason() {
            NakReason::None | NakReason::Gap => {
                // Frames sent before one that arrived may be lost, or only
                // overtaken (a scan that stops at the first frame sent
                // after the mark: one step when nothing is missing).
                if una != next {
                    self.detect_losses(idx, now);
                }
            }
            NakReason::RingFull => {
                let p = &mut self.peers[idx as usize];
                self.stats.ring_full_backoffs += 1;
                // The peer answers: it is alive, only full.
                p.consecutive_timeouts = 0;
                if now >= p.busy_until {
                    let backoff = self
                        .cfg
                        .ring_full_backoff
                        .saturating_mul(1 << p.busy_shift.min(20))
                        .min(self.cfg.rto.max);
                    p.busy_shift = p.busy_shift.saturating_add(1);
                    p.busy_until = now + backoff;
                    // The timeout waits for the back-off: a full ring is not loss.
                    let rto = p.rtt.rto(&self.cfg.rto);
                    if p.una != p.next_seq {
                        p.rto_deadline = p.busy_until + rto;
                    }
                }
                // After the back-off, resend everything the bitmap says is
                // missing: the dropped frame and anything lost before it (a
                // stream of ring-full NAKs keeps the timeout from firing, so
                // nothing else would repair those holes).
                p.add_retx_range(ack, next, true);
            }
        }
    }

    /// A retransmission timeout fired for peer `idx`.
    pub(super) fn on_retransmission_timeout(&mut self, idx: PeerIdx, now: Time) {
        self.stats.timeouts += 1;
        if self.peers[idx as usize].has_rails() {
            self.check_rails(idx, now);
            self.rails_on_timeout(idx);
        }
        let p = &mut self.peers[idx as usize];
        p.consecutive_timeouts = p.consecutive_timeouts.saturating_add(1);
        if u32::from(p.consecutive_timeouts) > self.cfg.max_timeouts {
            let addr = p.addr;
            self.fail_peer(idx, SendFailure::PeerUnreachable(addr));
            return;
        }
        p.rtt.back_off();
        let (una, next) = (p.una, p.next_seq);
        if self.cfg.congestion.controls() && !p.reliable {
            if let Some(w) = p.tx.as_mut() {
                let consecutive = p.consecutive_timeouts;
                let before = p.cc;
                let verdict = p.cc.on_timeout(
                    &self.cfg.congestion,
                    &mut w.cc,
                    consecutive.into(),
                    una,
                    next,
                );
                if verdict == Verdict::Decreased {
                    self.stats.congestion_decreases += 1;
                }
                if self.cc_log.is_on() {
                    let before = before.limit_frames(self.cfg.tx_window);
                    self.cc_log
                        .record(&self.cfg, p, before, now, CongestionCause::Timeout);
                }
            }
        }
        // After a timeout, selective acknowledgements are not trusted: the
        // receiver may have dropped what it held (RFC 2018, RFC 6675). Nor
        // is the mark of loss detection: with the selective flags gone,
        // every frame sent before it would look lost, while the receiver
        // may hold them all. The next acknowledgement sets both again.
        if let Some(w) = p.tx.as_mut() {
            let mut s = una;
            while s != next {
                w.slot_mut(s).sacked = false;
                s = s.next();
            }
            w.rack = RackMark::default();
            w.last_timeout = now;
        }
        p.reorder.deadline = Time::NEVER;
        p.reorder.after_timeout = true;
        // The timeout may be a receiver that stalled (a vCPU taken away for
        // a few ms), not a loss, and resending the whole window would double
        // the traffic for nothing. So probe: resend the oldest frame (if it
        // gets through, the cumulative acknowledgement moves) and the newest
        // (its arrival shows the receiver any holes before it, and the NAK
        // names exactly them). Only after several silent timeouts in a row
        // is the whole window resent.
        if u32::from(p.consecutive_timeouts) >= FULL_RESEND_AFTER_TIMEOUTS {
            p.add_retx_range(una, next, true);
        } else {
            // The oldest frame is resent as if judged lost, so that a sweep
            // already pending (frames judged lost) stays selective.
            if let Some(w) = p.tx.as_mut() {
                w.slot_mut(una).lost = true;
            }
            p.add_retx_range(una, una.next(), false);
            // The newest frame is worth probing only once its
            // acknowledgement is overdue: sent less than a round trip ago,
            // it is still on its way, and the copy would arrive as a
            // duplicate whose acknowledgement looks like reordering.
            let newest = next.plus(u32::MAX);
            let overdue = p.tx.as_ref().is_some_and(|w| {
                let since = now.saturating_since(w.slot(newest).last_sent);
                since >= p.rtt.srtt().unwrap_or_default()
            });
            p.probe_newest = newest != una && overdue;
        }
        p.rto_deadline = now + p.rtt.rto(&self.cfg.rto);
    }

    /// Fails every send queued or in flight to `addr` with `failure` (for
    /// example when no route can be found for it). Returns how many failed.
    pub fn fail_sends_to(&mut self, addr: ProcessAddr, failure: SendFailure) -> usize {
        match self.peer_idx(addr) {
            Some(idx) => self.fail_peer(idx, failure),
            None => 0,
        }
    }

    /// Gives up on everything queued or in flight to peer `idx`, and on the
    /// remote reads waiting for it.
    pub(super) fn fail_peer(&mut self, idx: PeerIdx, failure: SendFailure) -> usize {
        let mut victims = Vec::new();
        {
            let p = &self.peers[idx as usize];
            if let Some(w) = p.tx.as_ref() {
                let mut s = p.una;
                while s != p.next_seq {
                    let slot = w.slot(s);
                    if slot.bundle {
                        victims.extend(self.bundle_members(slot.msg));
                    } else {
                        victims.push(slot.msg);
                    }
                    s = s.next();
                }
            }
            if p.framing != NO_MSG {
                victims.push(p.framing);
            }
            for head in [p.queue_head, p.xfer_head] {
                let mut m = head;
                while m != NO_MSG {
                    victims.push(m);
                    m = self.messages[m as usize]
                        .as_ref()
                        .map_or(NO_MSG, |x| x.next);
                }
            }
        }
        // Transfers waiting for an answer from this peer.
        victims.extend(
            self.out_transfers
                .iter()
                .filter(|((peer, _), _)| *peer == idx)
                .map(|(_, m)| *m),
        );
        victims.sort_unstable();
        victims.dedup();
        // A new sequence space from here: the receiver sees a new epoch and
        // starts over, message ids from 0.
        self.rails_forget_flight(idx);
        let p = &mut self.peers[idx as usize];
        p.tx_generation = p.tx_generation.wrapping_add(1);
        p.next_msg_id = 0;
        p.unseq_handed = 0;
        p.una = p.next_seq;
        p.retx_from = p.next_seq;
        p.retx_to = p.next_seq;
        p.queue_head = NO_MSG;
        p.queue_tail = NO_MSG;
        p.xfer_head = NO_MSG;
        p.xfer_tail = NO_MSG;
        p.framing = NO_MSG;
        p.rto_deadline = Time::NEVER;
        p.reorder.deadline = Time::NEVER;
        p.busy_until = Time::ZERO;
        p.consecutive_timeouts = 0;
        p.rtt.reset_backoff();
        let failed = victims.len();
        for m in victims {
            self.complete_message(m, Some(failure));
        }
        self.fail_get_waits(idx, failure);
        failed
    }

    /// Frees message `m` and reports its completion or failure the way its
    /// kind asks.
    pub(super) fn complete_message(&mut self, m: u32, failure: Option<SendFailure>) {
        let Some(msg) = self.free_message(m) else {
            return;
        };
        if msg.is_transfer() {
            self.out_transfers.remove(&(msg.peer, msg.msg_id));
        }
        if msg.on_done == OnDone::ChannelSend {
            self.channel_send_ended(msg.peer, msg.channel, m);
        }
        let error = failure.map(TransferError::from);
        match (msg.on_done, msg.body) {
            (OnDone::System, OutBody::Pooled(data)) => {
                match failure {
                    None => {
                        self.stats.messages_completed += 1;
                        self.send_events.push_back(SendEvent::Complete(msg.handle));
                    }
                    Some(f) => {
                        self.stats.messages_failed += 1;
                        self.send_events.push_back(SendEvent::Failed(msg.handle, f));
                    }
                }
                self.recycle_buffer(data);
            }
            (OnDone::Internal, OutBody::Pooled(data)) => self.recycle_buffer(data),
            (OnDone::Service, OutBody::Pooled(data)) => {
                if let Some(f) = failure {
                    self.note_service_failure(f);
                }
                self.recycle_buffer(data);
            }
            (OnDone::ChannelSend, OutBody::Owned(buffer)) => {
                self.push_channel_event(match error {
                    None => ChannelEvent::SendDone {
                        handle: msg.handle,
                        buffer: buffer.into_vec(),
                    },
                    Some(error) => ChannelEvent::SendFailed {
                        handle: msg.handle,
                        buffer: buffer.into_vec(),
                        error,
                    },
                });
            }
            (OnDone::Put, OutBody::Owned(buffer)) => {
                self.push_channel_event(match error {
                    None => ChannelEvent::PutDone {
                        handle: msg.handle,
                        buffer: buffer.into_vec(),
                    },
                    Some(error) => ChannelEvent::RmaFailed {
                        handle: msg.handle,
                        buffer: buffer.into_vec(),
                        error,
                    },
                });
            }
            (OnDone::GetReply, OutBody::Region { region, .. }) => self.region_release(region),
            _ => {}
        }
    }

    /// Ends transfer `m` with `error` (reported in its channel event). Frames
    /// of it still in flight keep the slot, emptied, until acknowledged.
    pub(super) fn fail_transfer(&mut self, m: u32, error: TransferError) {
        let Some(msg) = self.messages[m as usize].as_ref() else {
            return;
        };
        let (peer, msg_id, handle, on_done) = (msg.peer, msg.msg_id, msg.handle, msg.on_done);
        let channel = msg.channel;
        let len = self.body_len(&msg.body);
        if on_done == OnDone::ChannelSend {
            self.channel_send_ended(peer, channel, m);
        }
        let Some(msg) = self.messages[m as usize].as_mut() else {
            return;
        };
        let body = std::mem::replace(&mut msg.body, OutBody::Void { len });
        // Nothing more of it is framed.
        msg.next_offset = len;
        let in_flight = msg.in_flight;
        self.out_transfers.remove(&(peer, msg_id));
        self.unlink_transfer(peer, m);
        if in_flight == 0 {
            self.free_message(m);
        } else if on_done != OnDone::Internal && on_done != OnDone::GetReply {
            // The zombie no longer counts against the application's limit.
            self.outstanding -= 1;
            if let Some(msg) = self.messages[m as usize].as_mut() {
                msg.on_done = OnDone::Internal;
            }
        }
        match (on_done, body) {
            (OnDone::ChannelSend, OutBody::Owned(buffer)) => {
                self.push_channel_event(ChannelEvent::SendFailed {
                    handle,
                    buffer: buffer.into_vec(),
                    error,
                });
            }
            (OnDone::Put, OutBody::Owned(buffer)) => {
                self.push_channel_event(ChannelEvent::RmaFailed {
                    handle,
                    buffer: buffer.into_vec(),
                    error,
                });
            }
            (OnDone::GetReply, OutBody::Region { region, .. }) => self.region_release(region),
            _ => {}
        }
    }

    /// Takes transfer `m` out of its peer's transfer queue and framing, if
    /// there. Frames of it still in flight are acknowledged as usual but no
    /// longer complete anything (their slot points to a freed message).
    fn unlink_transfer(&mut self, idx: PeerIdx, m: u32) {
        let p = &mut self.peers[idx as usize];
        if p.framing == m {
            p.framing = NO_MSG;
        }
        let mut prev = NO_MSG;
        let mut cur = p.xfer_head;
        while cur != NO_MSG {
            let next = self.messages[cur as usize]
                .as_ref()
                .map_or(NO_MSG, |x| x.next);
            if cur == m {
                if prev == NO_MSG {
                    p.xfer_head = next;
                } else if let Some(pm) = self.messages[prev as usize].as_mut() {
                    pm.next = next;
                }
                if p.xfer_tail == m {
                    p.xfer_tail = prev;
                }
                return;
            }
            prev = cur;
            cur = next;
        }
    }
}

/// Consecutive timeouts (without progress) after which the whole window is
/// resent rather than probed: 200 + 400 + 800 µs of silence at the default
/// minimum timeout, longer than a scheduler stall. Public so that the Spin
/// model of the protocol (`models/reliability.pml`) is generated from it.
pub const FULL_RESEND_AFTER_TIMEOUTS: u32 = 3;

/// Doublings of the timeout after which an acknowledgement of the oldest
/// frame alone, soon after it was resent, counts as the resend's own (the
/// backoff is reset) rather than a sign the timeout was spurious (the
/// backoff is kept): see `on_cumulative_ack`.
const SINGLE_ACK_NOT_SPURIOUS_AFTER: u8 = 3;

/// Frames of a transfer framed one after the other before the next ordered
/// message may go: large enough to stream efficiently, small enough that a
/// small message waits at most this many frames behind a large transfer.
pub(super) const CHUNK_FRAMES: u16 = 32;

/// Writes a frame with `payload` into `buf` and returns its length; or,
/// when `gather` sends payloads this large from where they lie, writes only
/// the header and sends the frame through it at once.
fn frame_out(
    buf: &mut [u8],
    fields: &HeaderFields,
    payload: &[u8],
    crc: bool,
    link: Option<LinkId>,
    gather: &mut dyn GatherSend,
) -> Option<usize> {
    match link {
        Some(link) if payload.len() >= gather.min_payload() => {
            let len = wire::encode_header_for_payload_elsewhere(buf, fields, payload, crc).ok()?;
            gather.send(link, &buf[..HEADER_LEN], payload);
            Some(len)
        }
        _ => wire::encode(buf, fields, payload, crc).ok(),
    }
}
