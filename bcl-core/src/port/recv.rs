//! The receiving side: validation, duplicate suppression, reassembly into
//! the ring, in-order delivery and what to acknowledge.

use super::peer::{PeerIdx, RxMsg, RxWindow, RX_MSGS};
use super::{Port, RingReservation};
use crate::event::Delivery;
use crate::method::Route;
use crate::ring::RingSlot;
use crate::sack::RX_WINDOW;
use crate::seq::Seq;
use crate::time::Time;
use crate::wire::{self, AckBody, Frame, FrameType, NakReason};

/// The system channel's number.
const SYSTEM_CHANNEL: u16 = 0;

impl Port {
    /// Takes one received frame, `bytes` starting at the BCL header, that
    /// arrived on `route` at `now`. Invalid frames are dropped and counted in
    /// [`PortStats::bad_frames`](crate::stats::PortStats); nothing panics on
    /// any input.
    pub fn handle_frame(&mut self, now: Time, route: Route, bytes: &[u8]) {
        if usize::from(route.method) >= self.method_mtu.len() {
            self.stats.bad_frames.bad_type += 1;
            return;
        }
        let frame = match wire::parse(bytes, &self.expect) {
            Ok(f) => f,
            Err(e) => {
                self.stats.bad_frames.count(e);
                return;
            }
        };
        let idx = match self.peer_idx_or_create(frame.src()) {
            Ok(idx) => idx,
            Err(_) => {
                self.stats.bad_frames.too_many_peers += 1;
                return;
            }
        };
        if self.peers[idx as usize].route.is_none() {
            // First contact from this peer: answer the way it came.
            self.apply_route(idx, route);
        }
        self.stats.frames_received += 1;
        self.peers[idx as usize].stats.frames_received += 1;

        if frame.kind() == FrameType::Data {
            self.note_sender_epoch(idx, &frame);
        }
        // An acknowledgement of frames we never sent (for instance one meant
        // for an earlier incarnation of this port) is ignored, but a DATA
        // frame carrying it is still good data.
        let ack_valid = match frame.ack() {
            Some(ack) => self.on_cumulative_ack(idx, Seq(ack), frame.ack_is_fresh(), now),
            None => true,
        };
        if !ack_valid {
            self.stats.bad_frames.bad_ack += 1;
        }
        match frame.kind() {
            FrameType::Data => self.on_data(idx, &frame, now),
            FrameType::Ack | FrameType::Nak if ack_valid => {
                match (frame.ack(), AckBody::read(frame.payload())) {
                    (Some(ack), Some(body)) => self.on_ack_body(idx, Seq(ack), body, now),
                    _ => self.stats.bad_frames.bad_ack += 1,
                }
            }
            FrameType::Ack | FrameType::Nak => {}
            _ => self.stats.bad_frames.bad_type += 1,
        }
        self.schedule(idx, now);
        self.arm_timer(idx);
        self.recycle_windows(idx);
    }

    /// Learns where the sender's sequence space starts: on first contact, when
    /// the sender restarted (new epoch), or when it moved its window past
    /// frames we never saw (it gave up on them).
    fn note_sender_epoch(&mut self, idx: PeerIdx, frame: &Frame<'_>) {
        let h = frame.header();
        let base = Seq(h.base.get());
        let p = &self.peers[idx as usize];
        let restart = !p.rx_known || p.rx_epoch != frame.epoch() || p.expected.before(base);
        if !restart {
            return;
        }
        // Drop any half-assembled messages of the old sequence space.
        if let Some(mut w) = self.peers[idx as usize].rx.take() {
            for e in w.msgs.iter_mut() {
                if let Some(m) = e.take() {
                    self.ring.free(m.slot);
                }
            }
            w.active_msgs = 0;
            w.bitmap = Default::default();
            self.rx_windows.push(w);
        }
        let p = &mut self.peers[idx as usize];
        p.rx_known = true;
        p.rx_epoch = frame.epoch();
        p.expected = base;
        p.deliver_seq = base;
        p.deliver_msg_id = None;
        p.unacked = 0;
        p.last_ack_sent = base;
    }

    fn on_data(&mut self, idx: PeerIdx, frame: &Frame<'_>, now: Time) {
        let h = frame.header();
        let seq = Seq(h.seq.get());
        let p = &mut self.peers[idx as usize];
        let Some(offset) = seq.since(p.expected) else {
            // Already delivered: our acknowledgement was lost or is late.
            p.stats.duplicates += 1;
            self.stats.duplicates += 1;
            p.ack_now = true;
            return;
        };
        if offset >= RX_WINDOW {
            self.stats.bad_frames.out_of_window += 1;
            return;
        }
        let msg_len = h.msg_len.get();
        if h.channel.get() != SYSTEM_CHANNEL {
            self.stats.bad_frames.bad_type += 1;
            return;
        }
        if msg_len as usize > self.cfg.eager_limit {
            self.stats.bad_frames.bad_length += 1;
            return;
        }
        if p.rx.is_none() {
            p.rx = Some(self.rx_windows.pop().unwrap_or_else(RxWindow::new));
        }
        let Some(w) = p.rx.as_mut() else { return };
        if w.bitmap.get(offset) {
            p.stats.duplicates += 1;
            self.stats.duplicates += 1;
            p.ack_now = true;
            return;
        }
        let msg_id = h.msg_id.get();
        let entry = match *w.entry(msg_id) {
            Some(e) if e.msg_id == msg_id => {
                if e.len != msg_len {
                    self.stats.bad_frames.bad_length += 1;
                    return;
                }
                e
            }
            Some(_) => {
                // Another message holds this entry: not possible from an honest
                // sender within the window.
                self.stats.bad_frames.out_of_window += 1;
                return;
            }
            None => {
                let Some(slot) = self.alloc_rx_slot(idx, msg_id, msg_len, offset == 0, now) else {
                    let p = &mut self.peers[idx as usize];
                    p.stats.ring_full_drops += 1;
                    self.stats.ring_full_drops += 1;
                    if p.nak == NakReason::None || p.nak == NakReason::Gap {
                        p.nak = NakReason::RingFull;
                        p.nak_dropped = seq;
                    }
                    return;
                };
                RxMsg {
                    has_first: false,
                    msg_id,
                    slot,
                    len: msg_len,
                    received: 0,
                    first_seq: seq,
                    last_seq: seq,
                }
            }
        };
        let p = &mut self.peers[idx as usize];
        let Some(w) = p.rx.as_mut() else { return };
        let payload = frame.payload();
        let start = h.frag_offset.get() as usize;
        if let Some(dst) = self
            .ring
            .bytes_mut(entry.slot)
            .and_then(|b| b.get_mut(start..start + payload.len()))
        {
            dst.copy_from_slice(payload);
        }
        let mut entry = entry;
        entry.received += payload.len() as u32;
        if start == 0 {
            entry.has_first = true;
            entry.first_seq = seq;
        }
        if entry.last_seq.before(seq) {
            entry.last_seq = seq;
        }
        if w.entry(msg_id).is_none() {
            w.active_msgs += 1;
        }
        *w.entry_mut(msg_id) = Some(entry);
        w.bitmap.set(offset);

        if offset == 0 {
            let run = w.bitmap.leading_run();
            w.bitmap.advance(run);
            p.expected = p.expected.plus(run);
            p.unacked += run;
            if p.unacked >= self.cfg.ack_every {
                p.ack_now = true;
            } else if p.ack_deadline == Time::NEVER {
                p.ack_deadline = now + self.cfg.ack_delay;
            }
            if !w.bitmap.is_empty() && p.nak == NakReason::None {
                // A gap remains ahead: say so, so the sender fills it.
                p.nak = NakReason::Gap;
            }
            self.deliver(idx);
        } else if p.nak == NakReason::None {
            p.nak = NakReason::Gap;
        }
    }

    /// Ring space for a new message from peer `idx`.
    ///
    /// The ring must never fill up with messages that cannot be delivered
    /// because an earlier one is missing, or the earlier one could never get
    /// in (a reassembly deadlock). So: a message that starts ahead of the
    /// next wanted frame (`head_of_line` false) only gets space if enough
    /// stays free for a full eager message; the head-of-line message may
    /// evict this peer's out-of-order messages (reneging: they are resent);
    /// and when it still does not fit, the ring is reserved for it, so other
    /// senders' messages cannot starve it, until it gets in or the
    /// reservation expires.
    fn alloc_rx_slot(
        &mut self,
        idx: PeerIdx,
        msg_id: u32,
        len: u32,
        head_of_line: bool,
        now: Time,
    ) -> Option<RingSlot> {
        if let Some(r) = self.ring_reservation {
            if r.until <= now {
                self.ring_reservation = None;
            } else if (r.peer, r.msg_id) != (idx, msg_id) {
                return None;
            }
        }
        let need = self.ring.blocks_for(len as usize);
        if !head_of_line {
            let headroom = self.ring.blocks_for(self.cfg.eager_limit);
            if self.ring.free_blocks() < need + headroom {
                return None;
            }
            return self.ring.alloc(len as usize);
        }
        let slot = self.ring.alloc(len as usize).or_else(|| {
            self.renege(idx);
            self.ring.alloc(len as usize)
        });
        match slot {
            Some(_) => {
                if self
                    .ring_reservation
                    .is_some_and(|r| r.peer == idx && r.msg_id == msg_id)
                {
                    self.ring_reservation = None;
                }
            }
            None => {
                if self.ring_reservation.is_none() {
                    self.ring_reservation = Some(RingReservation {
                        peer: idx,
                        msg_id,
                        until: now + self.cfg.rto.max * 2,
                    });
                }
            }
        }
        slot
    }

    /// Drops every message peer `idx` has ahead of the next wanted frame,
    /// returning their ring space. Only called when the next wanted frame
    /// needs space, so every held message is out of order; the sender learns
    /// from the next acknowledgement's bitmap that they must come again.
    fn renege(&mut self, idx: PeerIdx) {
        let p = &mut self.peers[idx as usize];
        let Some(w) = p.rx.as_mut() else { return };
        if w.active_msgs == 0 {
            return;
        }
        for e in w.msgs.iter_mut() {
            if let Some(m) = e.take() {
                self.ring.free(m.slot);
            }
        }
        w.active_msgs = 0;
        w.bitmap = Default::default();
        self.stats.reneged += 1;
    }

    /// Announces, in order, every message of peer `idx` that is complete and
    /// has nothing missing before it.
    fn deliver(&mut self, idx: PeerIdx) {
        let p = &mut self.peers[idx as usize];
        let Some(w) = p.rx.as_mut() else { return };
        loop {
            if !p.deliver_seq.before(p.expected) {
                return;
            }
            let id = match p.deliver_msg_id {
                Some(id) => id,
                None => {
                    // First delivery in this sequence space: find the message
                    // that starts where delivery stands.
                    let found = w
                        .msgs
                        .iter()
                        .flatten()
                        .find(|m| m.has_first && m.first_seq == p.deliver_seq);
                    match found {
                        Some(m) => m.msg_id,
                        None => return,
                    }
                }
            };
            let slot = w.entry_mut(id);
            let Some(m) =
                slot.filter(|m| m.msg_id == id && m.has_first && m.first_seq == p.deliver_seq)
            else {
                return;
            };
            if m.received != m.len || !m.last_seq.before(p.expected) {
                return;
            }
            *slot = None;
            w.active_msgs -= 1;
            p.deliver_seq = m.last_seq.next();
            p.deliver_msg_id = Some(id.wrapping_add(1));
            self.deliveries.push_back(Delivery {
                from: p.addr,
                slot: m.slot,
                len: m.len,
            });
            self.stats.messages_delivered += 1;
            debug_assert!(RX_MSGS.is_power_of_two());
        }
    }
}
