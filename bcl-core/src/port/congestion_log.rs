//! An opt-in log of congestion-control changes: every time a peer's window
//! of whole frames moves, what moved it and the controller's view of the
//! path just after, for tools that show congestion control at work (the
//! packet capture's congestion records).
//!
//! Off unless [`Port::set_congestion_log`] turned it on: off, each place
//! that feeds the controller pays one predictable branch and nothing else.
//! On, the changes wait in a bounded queue (the latest
//! [`CONGESTION_LOG_CAPACITY`]; when it is full the oldest is dropped and
//! counted, [`Port::congestion_changes_dropped`]) until
//! [`Port::poll_congestion_change`] takes them.

use super::peer::Peer;
use super::{congestion_info, CongestionInfo, Port};
use crate::addr::ProcessAddr;
use crate::config::PortConfig;
use crate::time::Time;
use std::collections::VecDeque;
use std::time::Duration;

/// Changes the log keeps before it drops the oldest.
pub const CONGESTION_LOG_CAPACITY: usize = 1024;

/// What moved a peer's congestion window.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CongestionCause {
    /// Round trips under the target grew it (slow start or additive
    /// increase).
    Increase,
    /// A round whose least round-trip sample showed queueing over the
    /// target shrank it.
    DelayDecrease,
    /// A frame judged lost (by time and sequence) behind a queue shrank it.
    Loss,
    /// A retransmission timeout behind a queue shrank it.
    Timeout,
    /// The peer reported frames resent after a loss as duplicates: the loss
    /// decrease was undone.
    Undo,
    /// The peer reported frames missing on their way to it (from any
    /// sender) while our path to it showed a queue: a dormant controller
    /// (mode auto) woke.
    Echo,
}

/// One change of a peer's window of whole frames, as the congestion log
/// ([`Port::set_congestion_log`]) records it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CongestionChange {
    /// The peer whose window changed.
    pub peer: ProcessAddr,
    /// When: the time the port was given with the call that changed it.
    pub at: Time,
    /// What changed it.
    pub cause: CongestionCause,
    /// Whether the window still doubles per round trip after the change.
    pub slow_start: bool,
    /// The controller's view after the change, as
    /// [`PeerInfo::congestion`](super::PeerInfo::congestion) shows it.
    pub info: CongestionInfo,
    /// The smoothed round trip, once measured.
    pub srtt: Option<Duration>,
    /// Frames in flight to the peer (sent, not cumulatively acknowledged).
    pub in_flight: u32,
}

/// The log itself: a separate field of the port, so that it can be written
/// while a peer is borrowed.
#[derive(Debug, Default)]
pub(super) struct CongestionLog {
    on: bool,
    changes: VecDeque<CongestionChange>,
    dropped: u64,
}

impl CongestionLog {
    /// Whether changes are recorded: the one branch the controller's
    /// callers pay when the log is off.
    #[inline(always)]
    pub fn is_on(&self) -> bool {
        self.on
    }

    /// Records a change of peer `p`'s window, whose whole frames were
    /// `before`, if it changed.
    #[cold]
    pub fn record(
        &mut self,
        cfg: &PortConfig,
        p: &Peer,
        before: u32,
        at: Time,
        cause: CongestionCause,
    ) {
        if p.cc.limit_frames(cfg.tx_window) == before {
            return;
        }
        if self.changes.len() >= CONGESTION_LOG_CAPACITY {
            self.changes.pop_front();
            self.dropped += 1;
        }
        self.changes.push_back(CongestionChange {
            peer: p.addr,
            at,
            cause,
            slow_start: p.cc.in_slow_start(),
            info: congestion_info(cfg, p),
            srtt: p.rtt.srtt(),
            in_flight: p.in_flight(),
        });
    }
}

impl Port {
    /// Turns the log of congestion changes on or off (off by default):
    /// while on, every change of a controlled peer's window of whole frames
    /// is recorded with its cause and the controller's view just after it
    /// ([`CongestionChange`]), for [`Port::poll_congestion_change`]. Off, it
    /// costs one predictable branch where the controller is fed. The log
    /// keeps the latest [`CONGESTION_LOG_CAPACITY`] changes; when it is full
    /// the oldest is dropped and counted
    /// ([`Port::congestion_changes_dropped`]). Changes already recorded
    /// stay until polled when it is turned off.
    pub fn set_congestion_log(&mut self, on: bool) {
        self.cc_log.on = on;
    }

    /// Whether congestion changes are being recorded.
    pub fn congestion_log(&self) -> bool {
        self.cc_log.on
    }

    /// The oldest congestion change recorded and not taken yet.
    pub fn poll_congestion_change(&mut self) -> Option<CongestionChange> {
        self.cc_log.changes.pop_front()
    }

    /// Changes dropped because the log was full (the oldest go first),
    /// since the port was created.
    pub fn congestion_changes_dropped(&self) -> u64 {
        self.cc_log.dropped
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{addr, unbundled, Net, Wired};
    use super::*;
    use crate::wire::HEADER_LEN;

    /// One bottleneck run: port 0 streams `messages` one-frame messages to
    /// port 1, from a window of `initial` frames, through a link that
    /// serves one frame per 12 µs, 10 µs one way, whose queue drops frames
    /// that find `limit` waiting (`None`: never); returns the changes port
    /// 0 recorded.
    fn bottleneck(
        log: bool,
        messages: usize,
        initial: u32,
        limit: Option<usize>,
    ) -> (Vec<CongestionChange>, Net) {
        let mut cfg = unbundled(0);
        cfg.congestion.initial_window = initial;
        let mut net = Net::new(vec![cfg, unbundled(1)]);
        net.ports[0].set_congestion_log(log);
        assert_eq!(net.ports[0].congestion_log(), log);
        let serve = Duration::from_micros(12);
        let delay = Duration::from_micros(10);
        let body = vec![7u8; super::super::tests::MTU - HEADER_LEN];
        for _ in 0..messages {
            net.ports[0].send(net.now, addr(1), &body).unwrap();
        }
        // Frames on the way, with their arrival times; when the bottleneck
        // is free again.
        let mut wire: Vec<(Time, Wired)> = Vec::new();
        let mut free_at = Time::ZERO;
        let mut delivered = 0;
        let mut changes = Vec::new();
        for _ in 0..1_000_000 {
            for f in net.transmit() {
                let queued = wire
                    .iter()
                    .filter(|(t, w)| w.from == 0 && *t > net.now + delay)
                    .count();
                if f.from == 0 && limit.is_some_and(|l| queued >= l) {
                    continue;
                }
                let arrive = if f.from == 0 {
                    let done = free_at.max(net.now) + serve;
                    free_at = done;
                    done + delay
                } else {
                    net.now + delay
                };
                wire.push((arrive, f));
            }
            delivered += net.drain_deliveries().len();
            changes.extend(std::iter::from_fn(|| net.ports[0].poll_congestion_change()));
            if delivered == messages && net.ports[0].outstanding_sends() == 0 {
                return (changes, net);
            }
            let next_frame = wire.iter().map(|(t, _)| *t).min();
            let next_timer = net.ports.iter().filter_map(|p| p.poll_timeout()).min();
            let Some(t) = next_frame.into_iter().chain(next_timer).min() else {
                panic!("stalled with {delivered} of {messages} delivered");
            };
            net.now = net.now.max(t);
            wire.sort_by_key(|(t, _)| *t);
            let due = wire.iter().take_while(|(t, _)| *t <= net.now).count();
            let arrived: Vec<Wired> = wire.drain(..due).map(|(_, f)| f).collect();
            net.deliver(&arrived);
            for p in &mut net.ports {
                p.handle_timeout(net.now);
            }
        }
        panic!("did not finish");
    }

    #[test]
    fn with_the_log_on_a_bottleneck_shows_increases_and_delay_decreases() {
        let (changes, net) = bottleneck(true, 600, 4, None);
        let tx_window = net.ports[0].config().tx_window;
        let increases = changes
            .iter()
            .filter(|c| c.cause == CongestionCause::Increase)
            .count();
        let decreases = changes
            .iter()
            .filter(|c| c.cause == CongestionCause::DelayDecrease)
            .count();
        assert!(increases > 0, "{changes:#?}");
        assert!(decreases > 0, "{changes:#?}");
        let mut last = 4;
        let mut at = Time::ZERO;
        for c in &changes {
            assert_eq!(c.peer, addr(1));
            assert!(c.at >= at, "changes in time order");
            at = c.at;
            let w = c.info.window;
            assert!((2..=tx_window).contains(&w), "{c:?}");
            assert_ne!(w, last, "a change moves the window: {c:?}");
            match c.cause {
                CongestionCause::Increase => assert!(w > last, "{c:?} after {last}"),
                CongestionCause::DelayDecrease => assert!(w < last, "{c:?} after {last}"),
                other => panic!("no loss through a queue that never drops: {other:?}"),
            }
            last = w;
            // Once measured, the base is about the path's round trip
            // without a queue: two hops of 10 µs, 12 µs of serving, and
            // the receiver's acknowledgement delay.
            if let Some(base) = c.info.base_rtt {
                assert!(base >= Duration::from_micros(20), "{c:?}");
                assert!(base < Duration::from_micros(200), "{c:?}");
            }
        }
        // Slow start ended (a decrease ends it), and the last change left
        // the window the peer has now.
        assert!(changes.iter().any(|c| c.slow_start));
        assert!(!changes.last().unwrap().slow_start);
        let now = net.ports[0].peer_info(addr(1)).unwrap().congestion.unwrap();
        assert_eq!(changes.last().unwrap().info.window, now.window);
        // A decrease comes from a queue: the window it left is far below
        // the bound, near what the path holds at the target (about 12
        // frames of queueing at 12 µs each, plus the few in flight).
        let least = changes.iter().map(|c| c.info.window).min().unwrap();
        assert!(least < 32, "{least}");
        assert_eq!(net.ports[0].congestion_changes_dropped(), 0);
    }

    #[test]
    fn with_the_log_off_nothing_is_recorded() {
        let (changes, net) = bottleneck(false, 600, 4, None);
        assert!(changes.is_empty(), "{changes:?}");
        assert!(net.ports[0].stats().congestion_decreases > 0);
        assert_eq!(net.ports[0].congestion_changes_dropped(), 0);
    }

    /// A window far over what the queue holds: frames dropped at its tail
    /// are judged lost (and some time out), each decrease recorded with
    /// its cause.
    #[test]
    fn a_queue_that_overflows_records_losses() {
        let (changes, net) = bottleneck(true, 600, 64, Some(8));
        let stats = net.ports[0].stats();
        assert!(stats.frames_judged_lost > 0, "{stats:?}");
        let mut last = 64;
        for c in &changes {
            assert_eq!(c.peer, addr(1));
            let w = c.info.window;
            match c.cause {
                CongestionCause::Increase | CongestionCause::Undo => assert!(w > last, "{c:?}"),
                _ => assert!(w < last, "{c:?} after {last}"),
            }
            last = w;
        }
        assert!(
            changes.iter().any(|c| c.cause == CongestionCause::Loss),
            "{changes:#?}"
        );
    }

    #[test]
    fn a_full_log_drops_the_oldest_and_counts_them() {
        let mut log = CongestionLog {
            on: true,
            ..CongestionLog::default()
        };
        let cfg = super::super::tests::config(0);
        let p = Peer::new(
            addr(1),
            cfg.initial_seq,
            super::super::congestion::Congestion::new(&cfg.congestion, cfg.tx_window),
        );
        let window = p.cc.window_frames();
        for i in 0..CONGESTION_LOG_CAPACITY as u64 + 5 {
            // Claimed to have moved from one frame more.
            log.record(
                &cfg,
                &p,
                window + 1,
                Time::from_nanos(i),
                CongestionCause::DelayDecrease,
            );
        }
        // Nothing moved: not recorded.
        log.record(&cfg, &p, window, Time::ZERO, CongestionCause::Increase);
        assert_eq!(log.changes.len(), CONGESTION_LOG_CAPACITY);
        assert_eq!(log.dropped, 5);
        assert_eq!(log.changes.front().unwrap().at, Time::from_nanos(5));
    }
}
