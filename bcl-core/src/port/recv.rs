//! The receiving side: validation, duplicate suppression, reassembly into
//! the ring, in-order delivery and what to acknowledge.

use super::lifecycle::Incarnation;
use super::peer::{Liveness, PeerIdx, RxMsg, RxWindow};
use super::{MethodInfo, Port, RingReservation, SendError};
use crate::event::{Delivery, TransferError};
use crate::method::Route;
use crate::ring::RingSlot;
use crate::sack::RX_WINDOW;
use crate::seq::Seq;
use crate::time::Time;
use crate::wire::{self, bundle, AckBody, Frame, FrameType, NakReason};

/// How long after frames last went missing in a peer's stream the port's
/// frames carry [`wire::flags::CONGESTED`]: long enough to reach every
/// sender into it that keeps sending (each frame of ours carries it), short
/// enough to end soon after the queue stopped overflowing.
const CONGESTED_ECHO: std::time::Duration = std::time::Duration::from_millis(50);

/// The system channel's number.
pub(super) const SYSTEM_CHANNEL: u16 = 0;

impl Port {
    /// Takes one received frame, `bytes` starting at the BCL header, that
    /// arrived on `route` at `now`. Invalid frames are dropped and counted in
    /// [`PortStats::bad_frames`](crate::stats::PortStats); nothing panics on
    /// any input.
    ///
    /// Returns false only for an unsequenced frame (from a method that never
    /// loses, such as shared memory) that the port cannot take now because
    /// its receive ring is full: the method must keep it and offer it again
    /// later (back-pressure instead of loss). Every other frame is taken or
    /// dropped for good, and true is returned.
    pub fn handle_frame(&mut self, now: Time, route: Route, bytes: &[u8]) -> bool {
        let Some(info) = self.methods.get(usize::from(route.method)).copied() else {
            self.stats.bad_frames.bad_type += 1;
            return true;
        };
        let expect = wire::Expect {
            require_crc: self.crc_for(route.method),
            ..self.expect
        };
        let frame = match wire::parse(bytes, &expect) {
            Ok(f) => f,
            Err(e) => {
                self.stats.bad_frames.count(e);
                return true;
            }
        };
        self.handle_parsed(now, route, info, &frame, bytes.len())
    }

    /// [`Port::handle_frame`] after the frame is validated; `wire_len` is
    /// its length on the wire (header and payload).
    pub(super) fn handle_parsed(
        &mut self,
        now: Time,
        route: Route,
        info: MethodInfo,
        frame: &Frame<'_>,
        wire_len: usize,
    ) -> bool {
        let unsequenced = frame.flags() & wire::flags::UNSEQUENCED != 0;
        if unsequenced && !info.caps.reliable {
            // Only a method that never loses may skip sequence numbers.
            self.stats.bad_frames.bad_flags += 1;
            return true;
        }
        let idx = match self.peer_idx_or_create(frame.src()) {
            Ok(idx) => idx,
            Err(SendError::NodeDetached(_)) => {
                self.note_from_detached();
                return true;
            }
            Err(_) => {
                self.stats.bad_frames.too_many_peers += 1;
                return true;
            }
        };
        if self.peers[idx as usize].route.is_none() {
            // First contact from this peer: answer the way it came.
            self.apply_route(idx, route);
        }
        let incarnation = self.note_incarnation(idx, frame, now);
        match incarnation {
            Incarnation::Stale => return true,
            // A restarted process may be reached another way than its
            // predecessor (a new UDP port): answer the way it came.
            Incarnation::Restarted => self.apply_route(idx, route),
            Incarnation::Current => {}
        }
        if info.rails || self.peers[idx as usize].has_rails() {
            let ping = frame.flags() & wire::flags::PING != 0;
            self.rail_arrival(idx, route, ping, now);
        }
        // An acknowledgement or NAK from a peer that answers over a method
        // that never loses (its frames unsequenced) while we reach it over
        // one that may: the acknowledgement part applies as from any peer.
        let unsequenced = unsequenced && is_sequenced(frame.kind());
        if unsequenced {
            if let Some(ack) = frame.ack() {
                if !self.on_cumulative_ack(idx, Seq(ack), frame.ack_is_fresh(), now) {
                    self.stats.bad_frames.bad_ack += 1;
                }
            }
            let taken = self.on_unsequenced(idx, frame, now);
            if incarnation == Incarnation::Restarted {
                self.finish_restart(idx);
            }
            if taken {
                self.stats.frames_received += 1;
                let p = &mut self.peers[idx as usize].stats;
                p.frames_received += 1;
                p.bytes_received += wire_len as u64;
                self.start_channel_sends(now);
                self.schedule(idx, now);
            }
            return taken;
        }
        // A frame of an abandoned stream is stale, counted there only (as
        // a frame of a dead incarnation is).
        let sequenced = is_sequenced(frame.kind());
        if sequenced && !self.note_sender_stream(idx, frame) {
            return true;
        }
        self.stats.frames_received += 1;
        let p = &mut self.peers[idx as usize].stats;
        p.frames_received += 1;
        p.bytes_received += wire_len as u64;
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
        if frame.flags() & wire::flags::CONGESTED != 0 {
            self.on_congestion_echo(idx, now);
        }
        match frame.kind() {
            _ if sequenced => self.on_sequenced(idx, frame, now),
            FrameType::Ack | FrameType::Nak if ack_valid => {
                if frame.flags() & wire::flags::PING != 0 {
                    self.peers[idx as usize]
                        .liveness
                        .set(Liveness::ANSWER_PING, true);
                }
                if frame.flags() & wire::flags::NODE != 0 {
                    // The peer's node vouches for its live processes.
                    let view = frame
                        .payload()
                        .get(size_of::<AckBody>()..)
                        .and_then(super::node::decode_view);
                    match view {
                        Some(live) => self.note_view(frame.src().node, live, now),
                        None => self.stats.bad_frames.bad_ack += 1,
                    }
                }
                match (frame.ack(), AckBody::read(frame.payload())) {
                    (Some(ack), Some(body)) => self.on_ack_body(idx, Seq(ack), body, now),
                    // Liveness only: a ping or an answer from a peer with
                    // nothing of ours to acknowledge.
                    (None, Some(_)) if frame.kind() == FrameType::Ack => {}
                    _ => self.stats.bad_frames.bad_ack += 1,
                }
            }
            _ => {}
        }
        if incarnation == Incarnation::Restarted {
            self.finish_restart(idx);
        }
        self.start_channel_sends(now);
        self.schedule(idx, now);
        self.arm_timer(idx);
        self.recycle_windows(idx);
        true
    }

    /// Forgets peer `idx`'s half-assembled messages (their ring space goes
    /// back) and returns its receive window to the pool: the sender started
    /// a new sequence space.
    pub(super) fn discard_rx_window(&mut self, idx: PeerIdx) {
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
    }

    /// A frame from a method that never loses, duplicates or reorders: no
    /// sequence number, no acknowledgement. Ordered messages are delivered
    /// in message-id order (from 0 in each sender epoch); transfer data goes
    /// straight to its buffer. False if an ordered message needs ring space
    /// that is not free now.
    fn on_unsequenced(&mut self, idx: PeerIdx, frame: &Frame<'_>, now: Time) -> bool {
        let p = &self.peers[idx as usize];
        if !p.rx_known || p.rx_generation != frame.generation() {
            // A new sender stream (such a method neither reorders nor
            // delays, so no older one is in flight): forget what was
            // half-assembled.
            if p.rx_known {
                let from = p.addr;
                self.fail_transfers_from(idx, TransferError::Stalled(from));
            }
            self.discard_rx_window(idx);
            let p = &mut self.peers[idx as usize];
            p.rx_known = true;
            p.rx_unsequenced = true;
            p.rx_generation = frame.generation();
            p.set_deliver_id(Some(0));
        }
        let h = frame.header();
        let kind = frame.kind();
        if !is_sequenced(kind) {
            // ACK/NAK have no meaning here.
            self.stats.bad_frames.bad_type += 1;
            return true;
        }
        if !is_ordered(kind, h.channel.get()) {
            self.on_transfer_data(idx, frame, now);
            return true;
        }
        let msg_len = h.msg_len.get();
        if msg_len as usize > self.cfg.eager_limit {
            self.stats.bad_frames.bad_length += 1;
            return true;
        }
        let msg_id = h.msg_id.get();
        let p = &mut self.peers[idx as usize];
        if p.deliver_id().is_some_and(|d| Seq(msg_id).before(Seq(d))) {
            self.stats.duplicates += 1;
            return true;
        }
        if p.rx.is_none() {
            p.rx = Some(self.rx_windows.pop().unwrap_or_else(RxWindow::new));
        }
        let first_seq = Seq(h.msg_seq.get());
        if !self.place_fragment(
            idx,
            frame,
            msg_id,
            msg_len,
            first_seq,
            h.frag_offset.get(),
            now,
        ) {
            self.stats.rx_backpressure += 1;
            return false;
        }
        self.deliver(idx, now);
        self.recycle_windows(idx);
        true
    }

    /// Learns where the sender's sequence space starts: on first contact, or
    /// when the sender starts a new stream (a newer generation: it gave up
    /// on us and began afresh, so transfers of its old stream will never
    /// finish). A frame of an older generation is stale: false, drop it. A
    /// window base beyond what we expect in the same stream is a protocol
    /// violation; we follow the sender anyway so the exchange cannot stall.
    fn note_sender_stream(&mut self, idx: PeerIdx, frame: &Frame<'_>) -> bool {
        let h = frame.header();
        let base = Seq(h.base.get());
        let p = &self.peers[idx as usize];
        let ahead = frame.generation().wrapping_sub(p.rx_generation) as i8;
        if p.rx_known {
            if ahead < 0 {
                self.stats.bad_frames.stale += 1;
                return false;
            }
            if ahead == 0 && !p.expected.before(base) {
                return true;
            }
            if ahead == 0 {
                self.stats.bad_frames.out_of_window += 1;
            } else {
                let from = p.addr;
                self.fail_transfers_from(idx, TransferError::Stalled(from));
            }
        }
        // Drop any half-assembled messages of the old sequence space.
        self.discard_rx_window(idx);
        let p = &mut self.peers[idx as usize];
        p.rx_known = true;
        p.rx_unsequenced = false;
        p.rx_generation = frame.generation();
        p.expected = base;
        // Which message comes next is learnt from the frame at `base`.
        p.set_deliver_id(None);
        p.unacked = 0;
        p.last_ack_sent = base;
        true
    }

    /// A frame that carries a sequence number: system-channel data and
    /// control messages (ordered, through the ring), or transfer data
    /// (straight to its buffer).
    fn on_sequenced(&mut self, idx: PeerIdx, frame: &Frame<'_>, now: Time) {
        let h = frame.header();
        let seq = Seq(h.seq.get());
        let p = &mut self.peers[idx as usize];
        let Some(offset) = seq.since(p.expected) else {
            // Already received: our acknowledgement was lost or is late.
            p.stats.duplicates += 1;
            self.stats.duplicates += 1;
            p.answer_duplicate();
            return;
        };
        if offset >= RX_WINDOW {
            self.stats.bad_frames.out_of_window += 1;
            return;
        }
        let msg_len = h.msg_len.get();
        let ordered = is_ordered(frame.kind(), h.channel.get());
        if ordered && !frame.is_bundle() && msg_len as usize > self.cfg.eager_limit {
            self.stats.bad_frames.bad_length += 1;
            return;
        }
        let msg_id = h.msg_id.get();
        let first_seq = Seq(h.msg_seq.get());
        // Frames of one message are consecutive from `msg_seq`; a frame whose
        // message would reach back more than a window is not from an honest
        // sender.
        if ordered && seq.since(first_seq).is_none_or(|d| d >= RX_WINDOW) {
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
            p.answer_duplicate();
            return;
        }
        if !ordered {
            let p = &mut self.peers[idx as usize];
            if offset == 0 && p.deliver_id().is_none() {
                // The first frame of the sender's window is transfer data: it
                // says which ordered message comes next.
                p.set_deliver_id(Some(first_seq.0));
                self.drop_entries_before(idx, first_seq.0);
            }
            self.on_transfer_data(idx, frame, now);
        } else {
            let p = &mut self.peers[idx as usize];
            if offset == 0 && p.deliver_id().is_none() {
                // The first frame of the sender's window: delivery starts with
                // its message, or with the next one if its message began
                // before the window (those earlier frames were acknowledged to
                // somebody else).
                let next = if first_seq == seq {
                    msg_id
                } else {
                    msg_id.wrapping_add(1)
                };
                p.set_deliver_id(Some(next));
                self.drop_entries_before(idx, next);
            }
            let p = &mut self.peers[idx as usize];
            let delivered_already = p.deliver_id().is_some_and(|d| Seq(msg_id).before(Seq(d)));
            if frame.is_bundle() {
                match self.place_bundle(idx, frame, now) {
                    BundleOutcome::Placed => {}
                    BundleOutcome::Malformed => {
                        self.stats.bad_frames.bad_bundle += 1;
                        return;
                    }
                    BundleOutcome::Collision => {
                        self.stats.bad_frames.out_of_window += 1;
                        return;
                    }
                    BundleOutcome::RingFull => {
                        self.refuse_ring_full(idx, seq);
                        return;
                    }
                    BundleOutcome::PrefixTaken => {
                        self.refuse_ring_full(idx, seq);
                        self.deliver(idx, now);
                        return;
                    }
                }
            } else if !delivered_already {
                let start = h.frag_offset.get();
                if !self.place_fragment(idx, frame, msg_id, msg_len, first_seq, start, now) {
                    self.refuse_ring_full(idx, seq);
                    return;
                }
            } else {
                // A frame of a message delivered already (resent after our
                // window was trimmed): only its sequence number matters.
                self.peers[idx as usize].stats.duplicates += 1;
                self.stats.duplicates += 1;
            }
        }
        let p = &mut self.peers[idx as usize];
        let Some(w) = p.rx.as_mut() else { return };
        // Frames are missing right before this one that were not missing
        // before it came: it skipped over them.
        let new_gap = offset > 0 && w.bitmap.highest().is_none_or(|h| offset > h + 1);
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
        } else if new_gap {
            // Say at once that frames are missing.
            if p.nak == NakReason::None {
                p.nak = NakReason::Gap;
            }
            if self.cfg.congestion.controls() {
                self.congested_until = now + CONGESTED_ECHO;
            }
        } else if p.ack_deadline == Time::NEVER {
            // An overtaken frame filled a hole, or the run after a hole
            // grew: nothing new is missing. The next acknowledgement, at
            // most the ACK delay away, tells the sender (within its
            // reordering window); a NAK per frame would double the frames
            // on a path that reorders much.
            p.ack_deadline = now + self.cfg.ack_delay;
        }
        self.deliver(idx, now);
    }

    /// Frame `seq` of peer `idx` did not fit the ring: it is dropped (not
    /// marked received) and the sender is told to back off (NAK, ring full).
    fn refuse_ring_full(&mut self, idx: PeerIdx, seq: Seq) {
        let p = &mut self.peers[idx as usize];
        p.stats.ring_full_drops += 1;
        self.stats.ring_full_drops += 1;
        if p.nak == NakReason::None || p.nak == NakReason::Gap {
            p.nak = NakReason::RingFull;
            p.nak_dropped = seq;
        }
    }

    /// Places the records of a bundle frame (validated by the parser) in
    /// the ring, each as a complete message with id `msg_id + i`, skipping
    /// those delivered or held already. Record lengths are checked against
    /// the eager limit before anything is placed.
    ///
    /// A bundle is taken whole or not at all, with one exception that keeps
    /// a small ring from deadlocking on a bundle larger than the space it
    /// can ever offer: when the bundle's first new message is the next one
    /// to deliver and the ring cannot take them all, the records that fit
    /// are taken, in order from that one, and delivered, and the frame is
    /// still refused (not acknowledged, NAK ring full). Its resent copies
    /// then skip the delivered records by id, so delivery stays exactly
    /// once and in order.
    fn place_bundle(&mut self, idx: PeerIdx, frame: &Frame<'_>, now: Time) -> BundleOutcome {
        let h = frame.header();
        let first_id = h.msg_id.get();
        let seq = Seq(h.seq.get());
        let records = bundle::records(frame.payload());
        if records.clone().any(|r| r.len() > self.cfg.eager_limit) {
            return BundleOutcome::Malformed;
        }
        // What the ring must take: the records neither delivered nor held.
        let mut need = 0;
        let mut first_needed = None;
        for (i, r) in records.clone().enumerate() {
            let id = first_id.wrapping_add(i as u32);
            match self.bundle_record_state(idx, id) {
                RecordState::Done => {}
                RecordState::Collision => return BundleOutcome::Collision,
                RecordState::Needed => {
                    need += self.ring.blocks_for(r.len());
                    first_needed.get_or_insert(id);
                }
            }
        }
        let Some(first_needed) = first_needed else {
            // Everything in it arrived before (a resent bundle whose first
            // copy our window trimmed, or refused after taking a prefix):
            // only its sequence number matters.
            self.peers[idx as usize].stats.duplicates += 1;
            self.stats.duplicates += 1;
            return BundleOutcome::Placed;
        };
        let admission = self.admit_bundle(idx, first_needed, need, now);
        if admission == Admission::No {
            return BundleOutcome::RingFull;
        }
        let mut placed = std::mem::take(&mut self.bundle_scratch);
        placed.clear();
        let mut outcome = BundleOutcome::Placed;
        let mut first_unplaced = None;
        for (i, r) in records.enumerate() {
            let id = first_id.wrapping_add(i as u32);
            match self.bundle_record_state(idx, id) {
                RecordState::Done => continue,
                RecordState::Collision => {
                    outcome = BundleOutcome::Collision;
                    break;
                }
                RecordState::Needed => {}
            }
            let slot = self.ring.alloc(r.len());
            let Some((slot, w)) = slot.zip(self.peers[idx as usize].rx.as_mut()) else {
                if let Some(slot) = slot {
                    self.ring.free(slot);
                }
                outcome = BundleOutcome::RingFull;
                first_unplaced = Some(id);
                break;
            };
            if let Some(dst) = self.ring.bytes_mut(slot).and_then(|b| b.get_mut(..r.len())) {
                dst.copy_from_slice(r);
            }
            *w.entry_mut(id) = Some(RxMsg {
                kind: FrameType::Data,
                msg_id: id,
                slot,
                len: r.len() as u32,
                received: r.len() as u32,
                first_seq: seq,
                last_seq: seq,
            });
            w.active_msgs += 1;
            placed.push(id);
        }
        let ours = |r: &RingReservation| r.peer == idx;
        match outcome {
            BundleOutcome::Placed => {
                if self.ring_reservation.as_ref().is_some_and(ours) {
                    self.ring_reservation = None;
                }
                self.stats.bundles_received += 1;
            }
            BundleOutcome::RingFull if admission == Admission::Prefix => {
                // Keep the in-order prefix (delivered by the caller's
                // `deliver`), and hold the ring for the first record left.
                if let Some(id) = first_unplaced {
                    if self.ring_reservation.is_none_or(|r| ours(&r)) {
                        self.ring_reservation = Some(RingReservation {
                            peer: idx,
                            msg_id: id,
                            until: now + self.cfg.rto.max * 2,
                        });
                    }
                }
                if !placed.is_empty() {
                    outcome = BundleOutcome::PrefixTaken;
                }
            }
            _ => {
                // Refused as a whole: give back what this frame took.
                if let Some(w) = self.peers[idx as usize].rx.as_mut() {
                    for &id in &placed {
                        if let Some(m) = w.entry_mut(id).take() {
                            w.active_msgs -= 1;
                            self.ring.free(m.slot);
                        }
                    }
                }
            }
        }
        self.bundle_scratch = placed;
        outcome
    }

    /// Whether message `id` of a bundle from peer `idx` still needs a place
    /// in the ring.
    fn bundle_record_state(&self, idx: PeerIdx, id: u32) -> RecordState {
        let p = &self.peers[idx as usize];
        if p.deliver_id().is_some_and(|d| Seq(id).before(Seq(d))) {
            return RecordState::Done;
        }
        match p.rx.as_ref().and_then(|w| *w.entry(id)) {
            None => RecordState::Needed,
            Some(e) if e.msg_id == id => RecordState::Done,
            // Another message holds the entry: not possible from an honest
            // sender, which keeps its bundles within the entries.
            Some(_) => RecordState::Collision,
        }
    }

    /// Whether the ring may take `need` blocks for a bundle from peer `idx`
    /// whose first new message is `first_needed`: the same rules as for one
    /// message ([`Port::alloc_rx_slot`]), applied to the bundle as a whole;
    /// a bundle next in order that does not fit may place a prefix.
    fn admit_bundle(&mut self, idx: PeerIdx, first_needed: u32, need: u32, now: Time) -> Admission {
        if let Some(r) = self.ring_reservation {
            if r.until <= now {
                self.ring_reservation = None;
            } else if (r.peer, r.msg_id) != (idx, first_needed) {
                return Admission::No;
            }
        }
        let head_of_line = self.peers[idx as usize].deliver_id() == Some(first_needed);
        if !head_of_line {
            let headroom = self.ring.blocks_for(self.cfg.eager_limit);
            return if self.ring.free_blocks() >= need + headroom {
                Admission::Whole
            } else {
                Admission::No
            };
        }
        if self.ring.free_blocks() < need {
            self.renege_all(now);
        }
        if self.ring.free_blocks() < need {
            return Admission::Prefix;
        }
        Admission::Whole
    }

    /// Copies one fragment into its message's ring space, taking space for a
    /// new message first. False if there is no room (the frame is dropped).
    #[allow(clippy::too_many_arguments)]
    fn place_fragment(
        &mut self,
        idx: PeerIdx,
        frame: &Frame<'_>,
        msg_id: u32,
        msg_len: u32,
        first_seq: Seq,
        start: u64,
        now: Time,
    ) -> bool {
        let seq = Seq(frame.header().seq.get());
        let existing = self.peers[idx as usize]
            .rx
            .as_ref()
            .and_then(|w| *w.entry(msg_id));
        let entry = match existing {
            Some(e) if e.msg_id == msg_id => {
                if e.len != msg_len || e.first_seq != first_seq || e.kind != frame.kind() {
                    self.stats.bad_frames.bad_length += 1;
                    return true;
                }
                e
            }
            Some(_) => {
                // Another message holds this entry: not possible from an
                // honest sender within the window.
                self.stats.bad_frames.out_of_window += 1;
                return true;
            }
            None => {
                let head_of_line = self.peers[idx as usize].deliver_id() == Some(msg_id);
                let Some(slot) = self.alloc_rx_slot(idx, msg_id, msg_len, head_of_line, now) else {
                    return false;
                };
                RxMsg {
                    kind: frame.kind(),
                    msg_id,
                    slot,
                    len: msg_len,
                    received: 0,
                    first_seq,
                    last_seq: seq,
                }
            }
        };
        let payload = frame.payload();
        if let Some(dst) = usize::try_from(start).ok().and_then(|start| {
            self.ring
                .bytes_mut(entry.slot)
                .and_then(|b| b.get_mut(start..start + payload.len()))
        }) {
            dst.copy_from_slice(payload);
        }
        let mut entry = entry;
        entry.received += payload.len() as u32;
        if entry.last_seq.before(seq) {
            entry.last_seq = seq;
        }
        let p = &mut self.peers[idx as usize];
        let Some(w) = p.rx.as_mut() else { return true };
        if w.entry(msg_id).is_none() {
            w.active_msgs += 1;
        }
        *w.entry_mut(msg_id) = Some(entry);
        true
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
            self.renege_all(now);
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

    /// Drops every message not yet delivered from every peer, returning
    /// their ring space, and forgets exactly their frames (each message's
    /// frames are consecutive from its `msg_seq`). Only called when a
    /// message that is next in order for its sender cannot get space: then
    /// whatever else the ring holds for undelivered messages is in the way.
    /// (A message that is next in order and already has space keeps it: it
    /// needs no more space to complete.) Each peer affected is sent an
    /// acknowledgement at once, whose bitmap tells it what to send again.
    fn renege_all(&mut self, now: Time) {
        let mut reneged = false;
        for idx in 0..self.peers.len() as PeerIdx {
            let p = &mut self.peers[idx as usize];
            if p.rx_unsequenced {
                continue;
            }
            let (expected, deliver_id) = (p.expected, p.deliver_id());
            let Some(w) = p.rx.as_mut() else { continue };
            if w.active_msgs == 0 {
                continue;
            }
            let mut dropped = false;
            for e in w.msgs.iter_mut() {
                let Some(m) = *e else { continue };
                if deliver_id == Some(m.msg_id) {
                    continue;
                }
                *e = None;
                w.active_msgs -= 1;
                self.ring.free(m.slot);
                let mut s = m.first_seq;
                while !m.last_seq.before(s) {
                    if let Some(off) = s.since(expected) {
                        w.bitmap.clear(off);
                    }
                    s = s.next();
                }
                dropped = true;
            }
            if dropped {
                reneged = true;
                p.ack_now = true;
                self.schedule(idx, now);
                self.arm_timer(idx);
            }
        }
        if reneged {
            self.stats.reneged += 1;
        }
    }

    /// Frees the entries of messages before `first` (they cannot be
    /// completed in this sequence space).
    fn drop_entries_before(&mut self, idx: PeerIdx, first: u32) {
        let p = &mut self.peers[idx as usize];
        let Some(w) = p.rx.as_mut() else { return };
        for e in w.msgs.iter_mut() {
            if e.is_some_and(|m| Seq(m.msg_id).before(Seq(first))) {
                if let Some(m) = e.take() {
                    self.ring.free(m.slot);
                    w.active_msgs -= 1;
                }
            }
        }
    }

    /// Announces, in id order, every message of peer `idx` that is complete;
    /// control messages are handled here, in the same order.
    fn deliver(&mut self, idx: PeerIdx, now: Time) {
        loop {
            let p = &mut self.peers[idx as usize];
            let Some(id) = p.deliver_id() else { return };
            let Some(w) = p.rx.as_mut() else { return };
            let slot = w.entry_mut(id);
            let Some(m) = slot.filter(|m| m.msg_id == id && m.received == m.len) else {
                return;
            };
            *slot = None;
            w.active_msgs -= 1;
            p.set_deliver_id(Some(id.wrapping_add(1)));
            let from = p.addr;
            let delivery = Delivery {
                from,
                slot: m.slot,
                len: m.len,
            };
            if m.kind == FrameType::Data {
                self.deliveries.push_back(delivery);
                self.stats.messages_delivered += 1;
            } else if m.kind == FrameType::Service {
                self.service_deliveries.push_back(delivery);
                self.stats.messages_delivered += 1;
            } else {
                let body = self
                    .ring
                    .bytes(m.slot)
                    .map(|b| b[..m.len as usize].to_vec())
                    .unwrap_or_default();
                self.ring.free(m.slot);
                self.on_control(idx, m.kind, &body, now);
            }
        }
    }
}

/// What became of a bundle frame's records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum BundleOutcome {
    /// All of them are delivered or held now.
    Placed,
    /// A record is longer than the eager limit: the frame is dropped.
    Malformed,
    /// A record's message id meets another message's entry: the frame is
    /// dropped (an honest sender never does this).
    Collision,
    /// The ring cannot take them all: none was taken.
    RingFull,
    /// The ring could take only the first of them (in order from the next
    /// message to deliver): those were taken, the frame is refused.
    PrefixTaken,
}

/// What the ring may take of a bundle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Admission {
    /// All its new records.
    Whole,
    /// As many as fit, in order (it is next in order and does not fit).
    Prefix,
    /// Nothing now.
    No,
}

/// Whether one record of a bundle still needs ring space.
enum RecordState {
    /// Delivered or held already.
    Done,
    /// Needs a place.
    Needed,
    /// Its entry is taken by another message.
    Collision,
}

/// Whether frames of this type carry a sequence number (and so are
/// acknowledged and resent).
fn is_sequenced(kind: FrameType) -> bool {
    !matches!(kind, FrameType::Ack | FrameType::Nak)
}

/// Whether a sequenced frame belongs to the ordered message stream
/// (system-channel data and control messages) rather than to a transfer.
fn is_ordered(kind: FrameType, channel: u16) -> bool {
    match kind {
        FrameType::Data => channel == SYSTEM_CHANNEL,
        FrameType::RmaGetReply => false,
        _ => true,
    }
}
