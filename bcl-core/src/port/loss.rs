//! Loss detection by time and sequence, in the spirit of TCP's RACK
//! (RFC 8985).
//!
//! A frame is not lost just because a later one arrived first: multi-queue
//! NICs, several rails, bridges with jitter and routed paths all reorder.
//! The sender remembers the most recently *sent* frame known to be delivered
//! (the RACK mark: its send time, sequence number and the round trip of that
//! delivery). A frame still unacknowledged is judged lost when it was sent
//! before the mark and the mark's round trip plus a *reordering window* have
//! passed since it was sent; until then a timer waits for it. A resent frame
//! has a new send time, so a lost resend is found the same way, and a frame
//! is never resent twice on the same evidence.
//!
//! The reordering window is zero until the path has been seen to reorder (a
//! frame sent once was delivered after a later-sent one), so a plain loss is
//! repaired as soon as the receiver's bitmap shows a later frame. After
//! that the window is a quarter of the minimum round trip times a
//! multiplier. The multiplier rises at once to cover how late an overtaken
//! frame arrived (measured when it arrives before being resent), doubles,
//! at most once per round trip, whenever the receiver reports
//! duplicates in its acknowledgements (resends that were not needed, like
//! TCP's D-SACK; not those a timeout's resends explain), and falls back to
//! one after 16 loss recoveries without either. The window is capped at two
//! smoothed round trips: a path may hold a frame back by more than one round
//! trip (a reordering bridge, the simulated fabric's hold-back), and a true
//! loss on such a path is still found within about three round trips; the
//! retransmission timeout remains the backstop.
//!
//! A resent frame's delivery is ambiguous (the first copy may be the one
//! that arrived), and frames carry no timestamps to tell. It moves the mark
//! unless a timeout was shown spurious since the last clean round-trip
//! sample: then the estimate is known to be below the path's round trip (a
//! queue grew), a short "round trip" of a resend proves nothing, and marks
//! set by resends would judge every frame still in the queue lost, resend
//! it, and leave no frame sent once to sample, round after round. Nor is a
//! frame sent once that is delivered after a mark set by a resend taken as
//! overtaken: the mark's first copy may be the one that arrived, and after
//! a timeout's probe of the newest frame, the frames behind a lost
//! acknowledgement would all look overtaken by the whole stall and widen
//! the window past the timeout.

use super::congestion::Verdict;
use super::congestion_log::CongestionCause;
use super::peer::{PeerIdx, TxSlot};
use super::Port;
use crate::rtt::RttEstimator;
use crate::seq::Seq;
use crate::time::Time;
use std::time::Duration;

/// Loss recoveries after which a widened reordering window shrinks back.
const REORDER_WINDOW_PERSIST: u8 = 16;

/// The most recently sent frame known to be delivered.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct RackMark {
    /// Its [`TxSlot::sent_order`].
    pub order: u32,
    /// The round trip of its delivery, in nanoseconds.
    pub rtt_ns: u32,
    /// A frame has been delivered since the window was taken.
    pub known: bool,
    /// It was a frame sent more than once, whose delivery may be its first
    /// copy's: frames sent once before it and delivered after it do not
    /// show reordering (a timeout's probe of the newest frame, arriving
    /// before the frames behind a lost acknowledgement, would otherwise
    /// widen the reordering window to the whole stall).
    pub resent: bool,
}

/// What the sender knows about reordering on the path to one peer.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ReorderState {
    /// Look for losses again at this instant (a frame sent before the mark
    /// whose window has not passed yet).
    pub deadline: Time,
    /// The path has delivered a frame after a later-sent one.
    pub seen: bool,
    /// The window in quarters of the minimum round trip.
    pub multiplier: u8,
    /// Loss recoveries left before the multiplier falls back to one.
    pub recoveries_left: u8,
    /// The multiplier grows again only once the cumulative acknowledgement
    /// passes this point (once per round trip).
    pub round_end: Seq,
    /// A timeout resent frames the receiver may hold (its probes, or the
    /// whole window): duplicates reported until an acknowledgement reports
    /// none are those, not reordering.
    pub after_timeout: bool,
}

impl ReorderState {
    /// No reordering seen on a path whose first frame is `initial_seq`.
    pub const fn new(initial_seq: Seq) -> Self {
        ReorderState {
            deadline: Time::NEVER,
            seen: false,
            multiplier: 1,
            recoveries_left: 0,
            round_end: initial_seq,
            after_timeout: false,
        }
    }

    /// Widens the window to at least `late` (a frame arrived that much
    /// after it would have without reordering), in quarters of the minimum
    /// round trip; it stays at least that wide for the next recoveries.
    fn cover(&mut self, late: Duration, rtt: &RttEstimator) {
        let Some(quarter) = rtt.min_rtt().map(|m| m / 4) else {
            return;
        };
        if late.is_zero() || quarter.is_zero() {
            return;
        }
        let needed = (late.as_nanos() / quarter.as_nanos() + 1).min(u128::from(u8::MAX)) as u8;
        if needed > self.multiplier {
            self.multiplier = needed;
            self.recoveries_left = REORDER_WINDOW_PERSIST;
        }
    }

    /// The current reordering window.
    pub fn window(&self, rtt: &RttEstimator) -> Duration {
        if !self.seen {
            return Duration::ZERO;
        }
        match (rtt.min_rtt(), rtt.srtt()) {
            (Some(min), Some(srtt)) => (min / 4 * u32::from(self.multiplier)).min(srtt * 2),
            _ => Duration::ZERO,
        }
    }
}

/// Whether the transmission numbered `order` left before the one numbered
/// `other` (wrapping, like sequence numbers: everything compared is in
/// flight, far less than 2^31 sendings apart).
pub(super) fn sent_before(order: u32, other: u32) -> bool {
    (order.wrapping_sub(other) as i32) < 0
}

/// Frame `slot` is newly known delivered at `now`: moves the mark, and
/// returns true if it did. A frame sent once that arrived after a
/// later-sent one shows the path reorders, and how late it was: the window
/// grows at once to cover that lateness.
pub(super) fn note_delivered(
    mark: &mut RackMark,
    reorder: &mut ReorderState,
    rtt: &RttEstimator,
    slot: &TxSlot,
    now: Time,
) -> bool {
    let round_trip = now.saturating_since(slot.last_sent);
    if slot.sent_count > 1 && rtt.estimate_too_low() {
        // Perhaps the first copy's delivery: see the module documentation.
        return false;
    }
    if mark.known && sent_before(slot.sent_order, mark.order) {
        if slot.sent_count == 1 && !mark.resent {
            reorder.seen = true;
            let expected =
                Duration::from_nanos(u64::from(mark.rtt_ns)).max(rtt.min_rtt().unwrap_or_default());
            reorder.cover(round_trip.saturating_sub(expected), rtt);
        }
        return false;
    }
    *mark = RackMark {
        order: slot.sent_order,
        rtt_ns: u32::try_from(round_trip.as_nanos()).unwrap_or(u32::MAX),
        known: true,
        resent: slot.sent_count > 1,
    };
    true
}

/// The mark of the rail frame `slot` to peer `idx` is in flight on, if it
/// is on a rail that has one.
fn rail_mark(
    rail_sets: &rustc_hash::FxHashMap<PeerIdx, super::rails::RailSet>,
    idx: PeerIdx,
    slot: &TxSlot,
) -> Option<RackMark> {
    let r = usize::from(slot.rail.checked_sub(1)?);
    let mark = rail_sets.get(&idx)?.rails.get(r)?.mark;
    mark.known.then_some(mark)
}

impl Port {
    /// Marks as lost, and queues for resending, every frame to peer `idx`
    /// sent before the mark whose reordering window has passed; sets the
    /// reorder timer for the earliest of the others.
    pub(super) fn detect_losses(&mut self, idx: PeerIdx, now: Time) {
        let p = &mut self.peers[idx as usize];
        p.reorder.deadline = Time::NEVER;
        let wait = {
            let Some(w) = p.tx.as_ref() else { return };
            if !w.rack.known {
                return;
            }
            // Never less than the least round trip: a mark set by a resend
            // whose first copy had arrived carries a round trip too short to
            // judge older frames by.
            let rtt = Duration::from_nanos(u64::from(w.rack.rtt_ns));
            rtt.max(p.rtt.min_rtt().unwrap_or_default()) + p.reorder.window(&p.rtt)
        };
        let (una, next) = (p.una, p.next_seq);
        let rails = p.has_rails();
        let min_rtt = p.rtt.min_rtt().unwrap_or_default();
        let reorder_window = p.reorder.window(&p.rtt);
        let Some(w) = p.tx.as_mut() else { return };
        let mark = w.rack;
        let mut lost: Option<(Seq, Seq)> = None;
        let mut deadline = Time::NEVER;
        let mut s = una;
        while s != next {
            let slot = w.slot_mut(s);
            // Over rails a frame is judged by the mark of its own rail
            // (each rail keeps order; rails between them do not).
            let (mark, wait) = match rails {
                false => (mark, wait),
                true => match rail_mark(&self.rail_sets, idx, slot) {
                    Some(m) => {
                        let rtt = Duration::from_nanos(u64::from(m.rtt_ns));
                        (m, rtt.max(min_rtt) + reorder_window)
                    }
                    None => {
                        s = s.next();
                        continue;
                    }
                },
            };
            if !sent_before(slot.sent_order, mark.order) {
                if slot.sent_count == 1 && !rails {
                    // Frames after this one went out later still: none of
                    // them can be before the mark.
                    break;
                }
            } else if !slot.sacked && !slot.lost {
                let due = slot.last_sent + wait;
                if now >= due {
                    slot.lost = true;
                    Port::rail_slot_done(&mut self.rail_sets, idx, slot, false, now);
                    self.stats.frames_judged_lost += 1;
                    lost = Some(lost.map_or((s, s), |(first, _)| (first, s)));
                } else {
                    deadline = deadline.min(due);
                }
            }
            s = s.next();
        }
        p.reorder.deadline = deadline;
        if let Some((first, last)) = lost {
            if self.cfg.congestion.controls() {
                let before = p.cc;
                if p.cc.on_loss(&self.cfg.congestion, &mut w.cc, una, next) == Verdict::Decreased {
                    self.stats.congestion_decreases += 1;
                }
                if self.cc_log.is_on() {
                    let before = before.limit_frames(self.cfg.tx_window);
                    self.cc_log
                        .record(&self.cfg, p, before, now, CongestionCause::Loss);
                }
            }
            p.add_retx_range(first, last.next(), false);
            if p.reorder.recoveries_left > 0 {
                p.reorder.recoveries_left -= 1;
                if p.reorder.recoveries_left == 0 {
                    p.reorder.multiplier = 1;
                }
            }
        }
    }

    /// Peer `idx` reported `count` duplicate frames: resends that were not
    /// needed (or copies the network made), in an acknowledgement taken at
    /// `now`. Widens the reordering window, at most once per round trip,
    /// unless a timeout's resends explain them.
    pub(super) fn on_duplicates_reported(&mut self, idx: PeerIdx, count: u8, now: Time) {
        let p = &mut self.peers[idx as usize];
        if count == 0 {
            p.reorder.after_timeout = false;
            return;
        }
        self.stats.duplicates_reported += u64::from(count);
        if let Some(w) = p.tx.as_mut() {
            let before = p.cc;
            if p.cc.on_spurious_resend(&mut w.cc) {
                self.stats.congestion_undos += 1;
            }
            if self.cc_log.is_on() {
                let before = before.limit_frames(self.cfg.tx_window);
                self.cc_log
                    .record(&self.cfg, p, before, now, CongestionCause::Undo);
            }
        }
        if p.reorder.after_timeout {
            // What the timeout resent had arrived.
            p.rtt.timeout_was_spurious();
            return;
        }
        let r = &mut p.reorder;
        r.seen = true;
        if !p.una.before(r.round_end) {
            r.multiplier = r.multiplier.saturating_mul(2);
            r.round_end = p.next_seq;
        }
        r.recoveries_left = REORDER_WINDOW_PERSIST;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_resend_moves_no_mark_while_the_round_trip_estimate_is_too_low() {
        let mut rtt = RttEstimator::new();
        rtt.sample(Duration::from_micros(40));
        let mut reorder = ReorderState::new(Seq(0));
        let first = TxSlot {
            sent_count: 1,
            sent_order: 1,
            last_sent: Time::ZERO,
            ..TxSlot::default()
        };
        let resend = TxSlot {
            sent_count: 2,
            sent_order: 5,
            last_sent: Time::ZERO + Duration::from_micros(300),
            ..TxSlot::default()
        };
        let now = Time::ZERO + Duration::from_micros(310);
        let mut mark = RackMark::default();
        assert!(note_delivered(&mut mark, &mut reorder, &rtt, &resend, now));
        assert_eq!(mark.order, 5);
        rtt.timeout_was_spurious();
        let mut mark = RackMark::default();
        assert!(!note_delivered(&mut mark, &mut reorder, &rtt, &resend, now));
        assert!(!mark.known);
        // A frame sent once still moves it.
        assert!(note_delivered(&mut mark, &mut reorder, &rtt, &first, now));
        assert_eq!(mark.order, 1);
    }
}
