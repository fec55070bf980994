//! When the progress engine does what: the heuristics that keep a
//! busy-polling round short, each with its reason.
//!
//! A busy-poll round's length is the delay before an arrival is seen, so
//! the engine leaves out of a round what has no work, while bounding how
//! long anything can be left out:
//!
//! * **idle system-call methods** (`Schedule::skip_rx`): a method whose
//!   receive poll is a system call (UDP) and that found nothing
//!   `IDLE_AFTER_EMPTY_POLLS` times in a row is polled only every
//!   `IDLE_POLL_EVERY` rounds until it delivers again. This is the
//!   answer to BCL-3's polling problem for methods whose arrivals the
//!   kernel does not post into our memory: the cheap methods (shared
//!   memory, packet and AF_XDP rings, VFIO) are looked at every round, and
//!   an idle socket costs an eighth of a system call per round instead of
//!   one.
//! * **clock reuse** (`Schedule::round_time`): reading the clock is a
//!   large part of an idle round, and nothing depends on the time to within
//!   a few microseconds unless a timer is near, so a busy-polling engine on
//!   the system clock reuses one reading for up to `CLOCK_REUSE_ROUNDS`
//!   rounds while no send is outstanding and no timer is due within
//!   `CLOCK_REUSE_HORIZON`. An outstanding send may have frames in flight,
//!   whose acknowledgements are round-trip samples: timed by a reused
//!   reading, older than a frame's own send time, they came out as zero
//!   and made the path's base round trip 1 ns.
//! * **short rounds** (`Schedule::end_round_early`): a round in which a
//!   direct method brought messages and nothing else has work (nothing to
//!   transmit, no timer due, no housekeeping) ends right there, handing the
//!   messages to the caller; at most `MAX_SHORT_ROUNDS` in a row, then a
//!   full round, so a stream of arrivals cannot starve timers.
//! * **quick polls** (`Schedule::quick_poll`): between full rounds,
//!   [`Endpoint::poll_recv_with`](crate::Endpoint::poll_recv_with) only
//!   looks at the head of a direct method's receive queue (a few loads), up
//!   to `QUICK_POLLS` times (more when nothing else can bring work).
//! * **dead-peer checks** (`peer_check_due`): direct methods look for
//!   dead peers every `PEER_CHECK_ROUNDS` rounds.

use crate::clock::Clock;
use crate::method_slot::MethodSlot;
use bcl_core::port::Port;
use bcl_core::Time;
use std::time::Duration;

/// Empty polls after which a system-call method counts as idle.
pub(crate) const IDLE_AFTER_EMPTY_POLLS: u32 = 8;
/// An idle system-call method is polled every this many rounds.
pub(crate) const IDLE_POLL_EVERY: u64 = 8;

/// Rounds of a busy-polling engine with no timer due soon that reuse one
/// clock reading (a fifth of a shared-memory transfer's rounds was reading
/// the clock).
pub(crate) const CLOCK_REUSE_ROUNDS: u32 = 32;
/// A timer further away than this from the last reading does not need a
/// fresh one every round (a transfer's stall check is seconds away; a
/// delayed acknowledgement is not).
pub(crate) const CLOCK_REUSE_HORIZON: Duration = Duration::from_millis(1);

/// Progress rounds in a row that may end right after a direct method
/// brought messages; the next round then runs everything.
pub(crate) const MAX_SHORT_ROUNDS: u32 = 4;

/// Quick polls allowed between full rounds when the endpoint has other
/// methods or armed timers. A full round is what a message arriving during
/// it waits behind, so fewer of them shorten a ping-pong; other methods'
/// arrivals then wait at most this many quick polls (some 100-200 ns).
/// Work queued when a full round ends (items behind a full queue,
/// transfers, frames to transmit) allows no quick polls.
pub(crate) const QUICK_POLLS: u32 = 16;

/// Quick polls allowed when the endpoint's only method has the direct path
/// and no timer is armed: nothing but that method can bring work, and its
/// own queued work always gets a full round at once. The periodic look for
/// dead peers then comes every [`PEER_CHECK_ROUNDS`] × this many calls
/// (milliseconds).
pub(crate) const QUICK_POLLS_DIRECT_ONLY: u32 = 256;

/// How often (in progress rounds) direct methods look for dead peers when
/// nothing else makes them.
pub(crate) const PEER_CHECK_ROUNDS: u64 = 4096;

/// Whether round `round` is one in which direct methods look for dead
/// peers.
pub(crate) fn peer_check_due(round: u64) -> bool {
    round.is_multiple_of(PEER_CHECK_ROUNDS)
}

/// One method's record of its receive polls (see [`Schedule::skip_rx`]).
#[derive(Clone, Copy, Debug)]
struct RxPolls {
    syscall: bool,
    empty_streak: u32,
}

/// The engine's scheduling state (see the module documentation).
pub(crate) struct Schedule {
    /// Busy-polling on the system clock: idle rounds may reuse a reading.
    reuse_clock: bool,
    /// The last clock reading of a progress round.
    last_now: Time,
    /// Rounds that may still reuse `last_now`.
    clock_reuse_left: u32,
    /// Per method: how its receive polls went.
    rx_polls: Vec<RxPolls>,
    /// Rounds in a row that ended early.
    short_rounds: u32,
    /// Quick polls since the last full round.
    quick_polls: u32,
    /// Quick polls allowed before the next full round.
    quick_limit: u32,
}

impl Schedule {
    /// The schedule of an endpoint with `methods` that busy-polls (`busy`)
    /// or blocks; `system_clock`: the endpoint reads the monotonic clock (a
    /// simulated clock is never reused).
    pub(crate) fn new(methods: &[MethodSlot], busy: bool, system_clock: bool) -> Schedule {
        Schedule {
            reuse_clock: system_clock && busy,
            last_now: Time::ZERO,
            clock_reuse_left: 0,
            rx_polls: methods
                .iter()
                .map(|m| RxPolls {
                    syscall: busy && m.rx_poll_is_syscall(),
                    empty_streak: 0,
                })
                .collect(),
            short_rounds: 0,
            quick_polls: 0,
            quick_limit: 0,
        }
    }

    /// Forgets what lets busy-polling rounds cut corners (a reused clock
    /// reading, skipped polls of idle system-call methods): the next round
    /// reads the clock and polls every method. For rounds run because a
    /// descriptor said there is work.
    pub(crate) fn full_round_next(&mut self) {
        self.clock_reuse_left = 0;
        for p in &mut self.rx_polls {
            p.empty_streak = 0;
        }
    }

    /// The time of a progress round: a fresh reading, or the last one while
    /// it may be reused.
    pub(crate) fn round_time(&mut self, clock: &dyn Clock, port: &Port) -> Time {
        let horizon = self.last_now + CLOCK_REUSE_HORIZON;
        if self.clock_reuse_left > 0
            && port.outstanding_sends() == 0
            && port.poll_timeout().is_none_or(|t| t > horizon)
        {
            self.clock_reuse_left -= 1;
            return self.last_now;
        }
        self.last_now = clock.now();
        if self.reuse_clock {
            self.clock_reuse_left = CLOCK_REUSE_ROUNDS;
        }
        self.last_now
    }

    /// Whether round `round` skips polling method `i` (an idle system-call
    /// method between its periodic polls).
    #[inline]
    pub(crate) fn skip_rx(&self, i: usize, round: u64) -> bool {
        let p = &self.rx_polls[i];
        p.syscall
            && p.empty_streak >= IDLE_AFTER_EMPTY_POLLS
            && !round.is_multiple_of(IDLE_POLL_EVERY)
    }

    /// Records that polling method `i` brought `n` frames.
    #[inline]
    pub(crate) fn record_rx(&mut self, i: usize, n: usize) {
        let p = &mut self.rx_polls[i];
        p.empty_streak = if n == 0 {
            p.empty_streak.saturating_add(1)
        } else {
            0
        };
    }

    /// Whether a round in which direct methods brought `got` items ends now:
    /// something came, no housekeeping is due, nothing is to transmit, no
    /// timer is due, and the last rounds did not all end early.
    #[inline]
    pub(crate) fn end_round_early(
        &mut self,
        got: usize,
        housekeeping: bool,
        port: &Port,
        now: Time,
    ) -> bool {
        let early = got > 0
            && self.short_rounds < MAX_SHORT_ROUNDS
            && !housekeeping
            && !port.has_transmit_work()
            && port.poll_timeout().is_none_or(|t| t > now);
        if early {
            self.short_rounds += 1;
        } else {
            self.short_rounds = 0;
        }
        early
    }

    /// Whether this call of `poll_recv_with` may be a quick poll (counted
    /// if so); otherwise a full round is due.
    #[inline]
    pub(crate) fn quick_poll(&mut self) -> bool {
        if self.quick_polls < self.quick_limit {
            self.quick_polls += 1;
            true
        } else {
            false
        }
    }

    /// A full round ran: allow up to [`quick_poll_limit`] quick polls.
    pub(crate) fn full_round_done(&mut self, limit: u32) {
        self.quick_polls = 0;
        self.quick_limit = limit;
    }
}

/// Quick polls allowed after a full round: none while the direct method
/// or the port has work queued (the next call's full round does it), many
/// when the direct method is the only method and no timer is armed.
pub(crate) fn quick_poll_limit(queued_work: bool, direct_only: bool, port: &Port) -> u32 {
    if queued_work || port.has_transmit_work() {
        0
    } else if direct_only && port.poll_timeout().is_none() {
        QUICK_POLLS_DIRECT_ONLY
    } else {
        QUICK_POLLS
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bcl_core::{JobKey, PortConfig, ProcessAddr};
    use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

    /// A clock that moves 1 µs per reading and counts its readings.
    #[derive(Default)]
    struct CountingClock {
        now_ns: AtomicU64,
        reads: AtomicU32,
    }

    impl Clock for CountingClock {
        fn now(&self) -> Time {
            self.reads.fetch_add(1, Ordering::Relaxed);
            Time::from_nanos(self.now_ns.fetch_add(1_000, Ordering::Relaxed) + 1_000)
        }
    }

    /// Idle busy-polling rounds share a reading; rounds with a send
    /// outstanding read the clock each, so that a frame's acknowledgement
    /// is never timed before the frame was sent.
    #[test]
    fn idle_rounds_reuse_the_clock_and_rounds_with_a_send_outstanding_read_it() {
        let clock = CountingClock::default();
        let mut schedule = Schedule::new(&[], true, true);
        let mut cfg = PortConfig::new(ProcessAddr::new(1, 0), JobKey(7));
        cfg.liveness.enabled = false;
        let mut port = Port::new(cfg).unwrap();
        for _ in 0..10 {
            schedule.round_time(&clock, &port);
        }
        assert_eq!(clock.reads.load(Ordering::Relaxed), 1, "idle rounds reuse");

        let now = clock.now();
        port.send(now, ProcessAddr::new(2, 0), b"in flight")
            .unwrap();
        assert_eq!(port.outstanding_sends(), 1);
        let before = clock.reads.load(Ordering::Relaxed);
        let mut last = now;
        for _ in 0..10 {
            let t = schedule.round_time(&clock, &port);
            assert!(t > last, "round time {t:?} not after {last:?}");
            last = t;
        }
        assert_eq!(clock.reads.load(Ordering::Relaxed), before + 10);
    }
}
