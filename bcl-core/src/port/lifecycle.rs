//! A peer's life as the port sees it: gone, back, restarted.
//!
//! Every frame carries the sender's *incarnation* (the header's `epoch`
//! field), a number that grows with each start of a process at one address
//! (the endpoint takes it from the wall clock). The port remembers each
//! peer's incarnation from the first frame it hears:
//!
//! - a frame of the same incarnation is current;
//! - a frame of a *newer* one (in serial-number order) means the peer
//!   restarted: what was in flight with the old process fails with
//!   `PeerRestarted`, both directions start fresh sequence spaces, the
//!   peer is answered the way the frame came (the new process may have a
//!   new UDP port), and [`PeerEvent::Restarted`] is reported;
//! - a frame of an *older* one is stale (a frame of a dead process still in
//!   flight) and is dropped and counted (`bad_frames.stale`) — unless the
//!   current incarnation has been silent for [`STALE_FRAME_LIFETIME`] or was
//!   declared gone, since no frame lives that long in flight: then the
//!   "older" number can only be a newer start whose incarnation wrapped
//!   around, and it is taken as a restart.
//!
//! A peer declared gone ([`Port::peer_gone`]: its method saw its process
//! close, or liveness found it silent) is reported [`PeerEvent::Down`];
//! heard from again in the same incarnation (a partition healed, a stopped
//! process resumed) it is reported [`PeerEvent::Up`].

use super::peer::{Liveness, PeerIdx};
use super::Port;
use crate::addr::ProcessAddr;
use crate::event::{PeerEvent, SendFailure, TransferError};
use crate::time::Time;
use crate::wire::{Frame, NakReason};
use core::time::Duration;

/// How long a frame may still be in flight after its sender's next frame
/// arrived: a frame of an older incarnation is stale only while the current
/// incarnation was heard within this.
pub const STALE_FRAME_LIFETIME: Duration = Duration::from_secs(1);
const STALE_FRAME_LIFETIME_TICKS: u16 = (STALE_FRAME_LIFETIME.as_nanos() >> TICK_SHIFT) as u16;

/// A tick of `Peer::last_heard_tick` is 2^20 ns (about 1 ms): fine
/// enough for liveness to date a peer's last frame, wrapping every 69 s.
/// Only spans shorter than that are compared: the stale-frame lifetime,
/// and a frame that arrived since the liveness check before.
const TICK_SHIFT: u32 = 20;

/// `t` in ticks, wrapping (for `Peer::last_heard_tick`).
fn tick(t: Time) -> u16 {
    (t.as_nanos() >> TICK_SHIFT) as u16
}

/// What a frame's incarnation says about its sender.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Incarnation {
    /// The one we know (or the first we hear).
    Current,
    /// A newer one: the peer restarted. The caller handles the frame as
    /// first contact, then calls [`Port::finish_restart`].
    Restarted,
    /// An older one, still in flight: drop the frame.
    Stale,
}

impl Port {
    /// When peer `idx`'s last frame arrived, to the tick (the start of its
    /// tick: at most a tick early), and not before `not_before`. A frame
    /// more than one wrap ago (69 s) looks later than it was.
    pub(super) fn last_frame_at(&self, idx: PeerIdx, now: Time, not_before: Time) -> Time {
        let ticks_ago = u64::from(tick(now).wrapping_sub(self.peers[idx as usize].last_heard_tick));
        let now_tick_start = now.as_nanos() >> TICK_SHIFT << TICK_SHIFT;
        Time::from_nanos(now_tick_start.saturating_sub(ticks_ago << TICK_SHIFT))
            .max(not_before)
            .min(now)
    }

    /// Checks the incarnation of `frame`, from peer `idx`, against the one
    /// known, and notes a peer that restarted or came back.
    pub(super) fn note_incarnation(
        &mut self,
        idx: PeerIdx,
        frame: &Frame<'_>,
        now: Time,
    ) -> Incarnation {
        let heard = frame.epoch();
        let now_tick = tick(now);
        let p = &mut self.peers[idx as usize];
        let verdict = if !p.liveness.has(Liveness::INCARNATION_KNOWN) || p.incarnation == heard {
            Incarnation::Current
        } else {
            let newer = (heard.wrapping_sub(p.incarnation) as i32) > 0;
            let known_is_live = !p.liveness.has(Liveness::DOWN)
                && now_tick.wrapping_sub(p.last_heard_tick) < STALE_FRAME_LIFETIME_TICKS;
            if !newer && known_is_live {
                self.stats.bad_frames.stale += 1;
                return Incarnation::Stale;
            }
            Incarnation::Restarted
        };
        p.incarnation = heard;
        p.last_heard_tick = now_tick;
        p.liveness.set(Liveness::INCARNATION_KNOWN, true);
        let was_down = p.liveness.has(Liveness::DOWN);
        p.liveness.set(Liveness::DOWN, false);
        let addr = p.addr;
        if verdict == Incarnation::Restarted {
            self.stats.peers_restarted += 1;
            self.push_peer_event(PeerEvent::Restarted(addr));
            self.forget_old_incarnation(idx);
        } else if was_down {
            self.push_peer_event(PeerEvent::Up(addr));
        }
        verdict
    }

    /// The receiving half of a restart: what arrived from the old process
    /// and is half-assembled is dropped, transfers from it fail, and its
    /// new sequence space is learnt from the frames to come.
    fn forget_old_incarnation(&mut self, idx: PeerIdx) {
        let addr = self.peers[idx as usize].addr;
        self.fail_transfers_from(idx, TransferError::PeerRestarted(addr));
        self.discard_rx_window(idx);
        let p = &mut self.peers[idx as usize];
        p.rx_known = false;
        p.set_deliver_id(None);
        p.unacked = 0;
        p.ack_now = false;
        p.ack_deadline = Time::NEVER;
        p.nak = NakReason::None;
        p.dups_unreported = 0;
    }

    /// The sending half of a restart, once the frame that revealed it has
    /// been handled (its acknowledgement counts: the new process
    /// acknowledges what it received of our stream): everything still
    /// unacknowledged or queued fails, remote reads from the old process
    /// fail, and our next frames start a new sequence space.
    pub(super) fn finish_restart(&mut self, idx: PeerIdx) {
        let addr = self.peers[idx as usize].addr;
        self.fail_peer(idx, SendFailure::PeerRestarted(addr));
    }

    /// `addr` is gone (its process died or closed, as a method that can
    /// tell reports, or liveness declared it dead): everything queued or in
    /// flight to it fails, remote reads from it fail, transfers arriving
    /// from it and buffers posted for it fail, and [`Port::poll_peer_event`]
    /// reports [`PeerEvent::Down`]. A frame heard from it later reports it
    /// back ([`PeerEvent::Up`], or [`PeerEvent::Restarted`] from a new
    /// incarnation, which starts afresh).
    ///
    /// Where its stream to us stands is kept: a peer that was only stopped
    /// or cut off, and never gave up on us, resumes the same stream and
    /// resends what it saw no acknowledgement for; the kept position tells
    /// those frames apart as duplicates. A peer that gave up on us starts a
    /// new stream generation, which resets the position anyway.
    pub fn peer_gone(&mut self, now: Time, addr: ProcessAddr) {
        let _ = now;
        self.note_service_failure(SendFailure::PeerUnreachable(addr));
        let Some(idx) = self.peer_idx(addr) else {
            self.push_peer_event(PeerEvent::Down(addr));
            return;
        };
        if !self.peers[idx as usize].liveness.has(Liveness::DOWN) {
            self.push_peer_event(PeerEvent::Down(addr));
        }
        // Everything to it fails, bulk transfers handed to the engine too
        // (they are among the peer's transfers).
        self.fail_peer(idx, SendFailure::PeerUnreachable(addr));
        self.fail_inbound_from(idx, TransferError::PeerUnreachable(addr));
        self.peers[idx as usize].liveness.set(Liveness::DOWN, true);
    }

    /// Queues `event` for [`Port::poll_peer_event`], within a bound (an
    /// application that never looks loses the oldest, not memory).
    pub(super) fn push_peer_event(&mut self, event: PeerEvent) {
        if self.peer_events.len() >= self.cfg.max_peers.max(64) {
            self.peer_events.pop_front();
        }
        self.peer_events.push_back(event);
    }
}
