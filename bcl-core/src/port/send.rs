//! The sending side: accepting messages, framing them into the window,
//! retransmission, and what acknowledgements do to the window.

use super::peer::{PeerIdx, TxSlot, TxWindow, NO_MSG};
use super::{OutMessage, Port, SendError};
use crate::addr::ProcessAddr;
use crate::event::{SendEvent, SendFailure, SendHandle};
use crate::method::TxFrame;
use crate::seq::Seq;
use crate::time::Time;
use crate::wire::{self, flags, AckBody, FrameType, HeaderFields, NakReason, SACK_BITS};
use zerocopy::network_endian::{U16, U32};
use zerocopy::IntoBytes;

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
        let Some(m) = self.free_messages.pop() else {
            return Err(SendError::WouldBlock(self.outstanding));
        };
        let data = self.take_buffer(data);
        let handle = SendHandle(self.next_handle);
        self.next_handle += 1;
        self.outstanding += 1;
        self.stats.messages_sent += 1;

        let p = &mut self.peers[idx as usize];
        let msg_id = p.next_msg_id;
        p.next_msg_id = p.next_msg_id.wrapping_add(1);
        self.messages[m as usize] = Some(OutMessage {
            handle,
            peer: idx,
            data,
            msg_id,
            first_seq: Seq(0),
            next_offset: 0,
            next: NO_MSG,
        });
        if p.queue_tail == NO_MSG {
            p.queue_head = m;
        } else if let Some(prev) = self.messages[p.queue_tail as usize].as_mut() {
            prev.next = m;
        }
        p.queue_tail = m;
        if p.tx.is_none() {
            p.tx = Some(self.tx_windows.pop().unwrap_or_else(TxWindow::new));
        }
        self.schedule(idx, now);
        Ok(handle)
    }

    /// Writes the next frame for method `method` into `buf` (lent by that
    /// method, at least its MTU long) and says where it goes; `None` when the
    /// port has nothing more for this method now.
    pub fn poll_transmit(&mut self, method: u8, now: Time, buf: &mut [u8]) -> Option<TxFrame> {
        loop {
            let idx = self.ready.get_mut(method as usize)?.pop_front()?;
            self.peers[idx as usize].queued = false;
            let written = self.emit(idx, now, buf);
            self.schedule(idx, now);
            self.arm_timer(idx);
            if let Some(len) = written {
                let p = &mut self.peers[idx as usize];
                p.stats.frames_sent += 1;
                self.stats.frames_sent += 1;
                let link = p.route?.link;
                return Some(TxFrame { link, len });
            }
            self.recycle_windows(idx);
        }
    }

    /// One frame for peer `idx`: a NAK first, then a retransmission, then new
    /// data (carrying any acknowledgement), then a plain ACK.
    fn emit(&mut self, idx: PeerIdx, now: Time, buf: &mut [u8]) -> Option<usize> {
        let p = &self.peers[idx as usize];
        if p.nak != NakReason::None {
            return self.emit_ack(idx, buf);
        }
        if now >= p.busy_until {
            if p.retx_pending() {
                if let Some(len) = self.emit_retransmission(idx, now, buf) {
                    return Some(len);
                }
            }
            let p = &self.peers[idx as usize];
            if p.queue_head != NO_MSG && p.in_flight() < self.cfg.tx_window {
                return self.emit_new_data(idx, now, buf);
            }
        }
        if self.peers[idx as usize].ack_now {
            return self.emit_ack(idx, buf);
        }
        None
    }

    /// Header fields common to every frame to peer `idx`, with the
    /// piggybacked acknowledgement when we have one to give.
    fn fields_to(&self, idx: PeerIdx, kind: FrameType) -> HeaderFields {
        let p = &self.peers[idx as usize];
        let flag_bits = match (p.rx_known, p.last_ack_sent.before(p.expected)) {
            (false, _) => 0,
            (true, false) => flags::ACK,
            (true, true) => flags::ACK | flags::ACK_FRESH,
        };
        HeaderFields {
            kind: Some(kind),
            flags: flag_bits,
            job: self.cfg.job,
            src: self.cfg.local,
            dst: p.addr,
            epoch: self.cfg.epoch ^ (u32::from(p.tx_generation) << 24),
            ack: p.expected.0,
            base: p.una.0,
            ..HeaderFields::default()
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

    fn emit_new_data(&mut self, idx: PeerIdx, now: Time, buf: &mut [u8]) -> Option<usize> {
        let p = &self.peers[idx as usize];
        let m = p.queue_head;
        let seq = p.next_seq;
        let frag_payload = u32::from(p.frag_payload);
        let msg = self.messages[m as usize].as_ref()?;
        let total = msg.data.len() as u32;
        let offset = msg.next_offset;
        let len = (total - offset).min(frag_payload);
        let last = offset + len == total;
        let first_seq = if offset == 0 { seq } else { msg.first_seq };
        let mut fields = self.fields_to(idx, FrameType::Data);
        fields.seq = seq.0;
        fields.msg_id = msg.msg_id;
        fields.msg_seq = first_seq.0;
        fields.frag_offset = u64::from(offset);
        fields.msg_len = total;
        let frame_len = wire::encode(
            buf,
            &fields,
            &msg.data[offset as usize..(offset + len) as usize],
            self.cfg.crc,
        )
        .ok()?;

        if let Some(msg) = self.messages[m as usize].as_mut() {
            msg.next_offset = offset + len;
            msg.first_seq = first_seq;
        }
        let next_in_queue = self.messages[m as usize]
            .as_ref()
            .map_or(NO_MSG, |x| x.next);
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
            last_sent: now,
        };
        p.next_seq = seq.next();
        if last {
            p.queue_head = next_in_queue;
            if p.queue_head == NO_MSG {
                p.queue_tail = NO_MSG;
            }
        }
        if p.rto_deadline == Time::NEVER {
            p.rto_deadline = now + rto;
        }
        self.ack_carried(idx);
        self.stats.data_frames_sent += 1;
        Some(frame_len)
    }

    /// Resends the next frame of the sweep that still needs it.
    fn emit_retransmission(&mut self, idx: PeerIdx, now: Time, buf: &mut [u8]) -> Option<usize> {
        let min_age = {
            let p = &self.peers[idx as usize];
            p.rtt.srtt().map_or(self.cfg.rto.min, |s| s / 2)
        };
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
            if slot.sacked || (!all && now.saturating_since(slot.last_sent) < min_age) {
                continue;
            }
            let msg = self.messages[slot.msg as usize].as_ref()?;
            let mut fields = self.fields_to(idx, FrameType::Data);
            fields.seq = seq.0;
            fields.msg_id = msg.msg_id;
            fields.msg_seq = msg.first_seq.0;
            fields.frag_offset = u64::from(slot.offset);
            fields.msg_len = msg.data.len() as u32;
            let range = slot.offset as usize..slot.offset as usize + usize::from(slot.len);
            let frame_len = wire::encode(buf, &fields, &msg.data[range], self.cfg.crc).ok()?;
            let p = &mut self.peers[idx as usize];
            if let Some(w) = p.tx.as_mut() {
                let s = w.slot_mut(seq);
                s.sent_count = s.sent_count.saturating_add(1);
                s.last_sent = now;
            }
            p.stats.retransmits += 1;
            self.stats.retransmits += 1;
            self.ack_carried(idx);
            return Some(frame_len);
        }
    }

    /// An ACK or NAK frame with the selective bitmap.
    fn emit_ack(&mut self, idx: PeerIdx, buf: &mut [u8]) -> Option<usize> {
        let p = &self.peers[idx as usize];
        if !p.rx_known {
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
        let fields = self.fields_to(idx, kind);
        let len = wire::encode(buf, &fields, body.as_bytes(), self.cfg.crc).ok()?;
        let p = &mut self.peers[idx as usize];
        p.nak = NakReason::None;
        self.ack_carried(idx);
        if kind == FrameType::Ack {
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
        let mut clean = fresh;
        let mut s = p.una;
        while clean && s != ack {
            clean = w.slot(s).sent_count == 1;
            s = s.next();
        }
        let old_una = p.una;
        let p = &mut self.peers[idx as usize];
        if clean {
            p.rtt.sample(now.saturating_since(newest.last_sent));
        } else {
            p.rtt.reset_backoff();
        }
        p.una = ack;
        p.consecutive_timeouts = 0;
        p.busy_shift = 0;
        if p.retx_from.before(ack) {
            p.retx_from = ack;
        }
        p.rto_deadline = if p.una == p.next_seq {
            Time::NEVER
        } else {
            now + p.rtt.rto(&self.cfg.rto)
        };
        let mut s = old_una;
        while s != ack {
            let slot = self.peers[idx as usize].tx.as_ref().map(|w| *w.slot(s));
            if let Some(slot) = slot.filter(|slot| slot.last_of_msg) {
                self.complete_message(slot.msg, None);
            }
            s = s.next();
        }
        true
    }

    /// Applies the selective part and reason of an ACK or NAK body.
    pub(super) fn on_ack_body(&mut self, idx: PeerIdx, ack: Seq, body: &AckBody, now: Time) {
        // The bitmap is the receiver's whole view of the window past `ack`:
        // frames it no longer holds (it may drop out-of-order data to make
        // room) are un-marked, so they are sent again.
        let p = &mut self.peers[idx as usize];
        let (una, next) = (p.una, p.next_seq);
        let mut highest_sacked = None;
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
                    w.slot_mut(s).sacked = held;
                    if held {
                        highest_sacked = Some(s);
                    }
                }
                s = s.next();
            }
        }
        match body.reason() {
            NakReason::None => {}
            NakReason::Gap => {
                if let Some(h) = highest_sacked {
                    p.add_retx_range(ack, h, false);
                }
            }
            NakReason::RingFull => {
                self.stats.ring_full_backoffs += 1;
                let p = &mut self.peers[idx as usize];
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
        let p = &mut self.peers[idx as usize];
        p.consecutive_timeouts = p.consecutive_timeouts.saturating_add(1);
        if u32::from(p.consecutive_timeouts) > self.cfg.max_timeouts {
            let addr = p.addr;
            self.fail_peer(idx, SendFailure::PeerUnreachable(addr));
            return;
        }
        p.rtt.back_off();
        let (una, next) = (p.una, p.next_seq);
        // After a timeout, selective acknowledgements are not trusted: the
        // receiver may have dropped what it held (RFC 2018, RFC 6675).
        if let Some(w) = p.tx.as_mut() {
            let mut s = una;
            while s != next {
                w.slot_mut(s).sacked = false;
                s = s.next();
            }
        }
        p.add_retx_range(una, next, true);
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

    /// Gives up on everything queued or in flight to peer `idx`.
    fn fail_peer(&mut self, idx: PeerIdx, failure: SendFailure) -> usize {
        let mut victims = Vec::new();
        {
            let p = &self.peers[idx as usize];
            if let Some(w) = p.tx.as_ref() {
                let mut s = p.una;
                while s != p.next_seq {
                    let slot = w.slot(s);
                    if slot.last_of_msg {
                        victims.push(slot.msg);
                    }
                    s = s.next();
                }
            }
            let mut m = p.queue_head;
            while m != NO_MSG {
                victims.push(m);
                m = self.messages[m as usize]
                    .as_ref()
                    .map_or(NO_MSG, |x| x.next);
            }
        }
        // A message partly framed sits both in the window (not as last) and at
        // the queue head; it was pushed once, from the queue.
        // A new sequence space from here: the receiver sees a new epoch and
        // starts over, message ids from 0.
        let p = &mut self.peers[idx as usize];
        p.tx_generation = p.tx_generation.wrapping_add(1);
        p.next_msg_id = 0;
        p.una = p.next_seq;
        p.retx_from = p.next_seq;
        p.retx_to = p.next_seq;
        p.queue_head = NO_MSG;
        p.queue_tail = NO_MSG;
        p.rto_deadline = Time::NEVER;
        p.busy_until = Time::ZERO;
        p.consecutive_timeouts = 0;
        p.rtt.reset_backoff();
        let failed = victims.len();
        for m in victims {
            self.complete_message(m, Some(failure));
        }
        failed
    }

    /// Frees message `m` and reports its completion or failure.
    fn complete_message(&mut self, m: u32, failure: Option<SendFailure>) {
        let Some(msg) = self.free_message(m) else {
            return;
        };
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
        debug_assert!(msg.peer < self.peers.len() as PeerIdx);
        self.recycle_buffer(msg.data);
    }
}
