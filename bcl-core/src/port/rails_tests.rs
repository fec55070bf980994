//! Multi-rail peers over simulated rails of given speeds, in virtual time:
//! striping follows each rail's speed, a dead rail is taken out and what
//! was on it is resent on the others, a rail that returns is used again,
//! and every message arrives once, in order, intact.

use super::tests::{addr, caps, config, pattern, MTU};
use super::*;
use crate::method::LinkId;
use std::collections::BTreeMap;
use std::time::Duration;

/// One direction-independent simulated rail: a serialising link with a
/// queue limit (a shaped switch port) and a propagation delay.
#[derive(Clone, Debug)]
struct SimRail {
    /// Bytes per microsecond.
    rate: u64,
    delay: Duration,
    /// Frames waiting longer than this at the sender's end are dropped.
    queue_limit: Duration,
    /// Cut: every frame is lost.
    cut: bool,
    /// Drop every n-th frame (0: none).
    drop_every: u64,
    sent: u64,
    /// Per direction: when the link is free again.
    free_at: [Time; 2],
}

impl SimRail {
    fn new(rate_bytes_per_us: u64, delay_us: u64) -> Self {
        SimRail {
            rate: rate_bytes_per_us,
            delay: Duration::from_micros(delay_us),
            queue_limit: Duration::from_millis(2),
            cut: false,
            drop_every: 0,
            sent: 0,
            free_at: [Time::ZERO; 2],
        }
    }
}

/// Two ports joined by rails; port i's method r is rail r.
struct RailNet {
    ports: [Port; 2],
    rails: Vec<SimRail>,
    now: Time,
    /// Arrivals: (time, order) -> (to, rail, bytes).
    arrivals: BTreeMap<(Time, u64), (usize, u8, Vec<u8>)>,
    order: u64,
    /// Payload bytes that arrived per rail, by direction 0 -> 1.
    bytes_on: Vec<u64>,
}

impl RailNet {
    fn new(rails: Vec<SimRail>, learn_on_receiver: bool) -> Self {
        let mk = |i: usize| {
            let mut p = Port::new(config(i)).unwrap();
            for _ in &rails {
                let m = p.add_method(caps(MTU)).unwrap();
                p.allow_rails(m).unwrap();
            }
            p
        };
        let mut ports = [mk(0), mk(1)];
        let routes: Vec<Route> = (0..rails.len())
            .map(|r| Route {
                method: r as u8,
                link: LinkId(1),
            })
            .collect();
        ports[0].set_rails(Time::ZERO, addr(1), &routes).unwrap();
        if !learn_on_receiver {
            let back: Vec<Route> = (0..rails.len())
                .map(|r| Route {
                    method: r as u8,
                    link: LinkId(0),
                })
                .collect();
            ports[1].set_rails(Time::ZERO, addr(0), &back).unwrap();
        }
        let n = rails.len();
        RailNet {
            ports,
            rails,
            now: Time::ZERO,
            arrivals: BTreeMap::new(),
            order: 0,
            bytes_on: vec![0; n],
        }
    }

    /// Puts on the rails whatever the ports have.
    fn transmit(&mut self) {
        let mut buf = vec![0u8; MTU];
        for i in 0..2 {
            for r in 0..self.rails.len() {
                while let Some(tx) = self.ports[i].poll_transmit(r as u8, self.now, &mut buf) {
                    let to = tx.link.0 as usize;
                    let rail = &mut self.rails[r];
                    rail.sent += 1;
                    let start = rail.free_at[i].max(self.now);
                    if rail.cut
                        || (rail.drop_every > 0 && rail.sent.is_multiple_of(rail.drop_every))
                        || start.saturating_since(self.now) > rail.queue_limit
                    {
                        continue;
                    }
                    let wire = Duration::from_nanos(tx.len as u64 * 1000 / rail.rate);
                    rail.free_at[i] = start + wire;
                    let at = start + wire + rail.delay;
                    self.order += 1;
                    self.arrivals
                        .insert((at, self.order), (to, r as u8, buf[..tx.len].to_vec()));
                    if i == 0 {
                        self.bytes_on[r] += tx.len as u64;
                    }
                }
            }
        }
    }

    /// Advances to the next arrival or timer and handles it; false when
    /// nothing is left.
    fn step(&mut self) -> bool {
        self.transmit();
        let next_arrival = self.arrivals.keys().next().map(|k| k.0);
        let next_timer = self.ports.iter().filter_map(|p| p.poll_timeout()).min();
        let Some(t) = [next_arrival, next_timer].into_iter().flatten().min() else {
            return false;
        };
        self.now = self.now.max(t);
        while let Some((&(at, o), _)) = self.arrivals.iter().next() {
            if at > self.now {
                break;
            }
            let (to, rail, bytes) = self.arrivals.remove(&(at, o)).unwrap();
            let route = Route {
                method: rail,
                link: LinkId(1 - to as u32),
            };
            self.ports[to].handle_frame(self.now, route, &bytes);
        }
        for p in &mut self.ports {
            p.handle_timeout(self.now);
        }
        true
    }

    /// Messages delivered to port 1, released.
    fn received(&mut self) -> Vec<Vec<u8>> {
        let p = &mut self.ports[1];
        let mut got = Vec::new();
        while let Some(d) = p.poll_delivery() {
            got.push(p.message(&d).unwrap().to_vec());
            p.release(d.slot).unwrap();
        }
        got
    }

    /// Streams `count` messages of `len` bytes from port 0 to port 1,
    /// keeping `depth` outstanding, calling `during(net, sent)` as it goes;
    /// checks every one arrives once, in order, intact. Returns the
    /// virtual time it took.
    fn stream(
        &mut self,
        count: usize,
        len: usize,
        depth: usize,
        mut during: impl FnMut(&mut RailNet, usize),
    ) -> Duration {
        let start = self.now;
        let mut sent = 0;
        let mut got = 0;
        let mut steps = 0u64;
        while got < count {
            while sent < count && sent - got.min(sent) < depth {
                let body = pattern(len, sent as u8);
                if self.ports[0].send(self.now, addr(1), &body).is_err() {
                    break;
                }
                sent += 1;
            }
            during(self, sent);
            assert!(
                self.step(),
                "stalled at {got}/{count}: rails {:?}; {}",
                self.ports[0].rails(addr(1)),
                self.ports[0].debug_summary()
            );
            let (tagged, counted) = self.ports[0].rail_counts(addr(1));
            assert_eq!(tagged, counted, "rail accounting at {got}/{count}");
            for m in self.received() {
                assert_eq!(
                    m,
                    pattern(len, got as u8),
                    "message {got} wrong or out of order"
                );
                got += 1;
            }
            while self.ports[0].poll_send_event().is_some() {}
            steps += 1;
            assert!(
                steps < 5_000_000 && self.now.saturating_since(start) < Duration::from_secs(5),
                "did not finish: {got}/{count} after {steps} steps, {:?}; rails {:?}; {}",
                self.now.saturating_since(start),
                self.ports[0].rails(addr(1)),
                self.ports[0].debug_summary()
            );
        }
        assert!(
            self.received().is_empty(),
            "nothing arrives beyond the messages sent"
        );
        self.now.saturating_since(start)
    }
}

#[test]
fn two_equal_rails_carry_equal_shares_and_twice_one_rails_rate() {
    let one = RailNet::new(vec![SimRail::new(125, 10)], false).stream(800, 12_000, 64, |_, _| {});
    let mut net = RailNet::new(vec![SimRail::new(125, 10), SimRail::new(125, 10)], false);
    let two = net.stream(800, 12_000, 64, |_, _| {});
    let speedup = one.as_secs_f64() / two.as_secs_f64();
    assert!(
        speedup > 1.7,
        "two rails {two:?} against one {one:?}: {speedup:.2}x"
    );
    let share = net.bytes_on[0] as f64 / (net.bytes_on[0] + net.bytes_on[1]) as f64;
    assert!((0.4..0.6).contains(&share), "rail 0 carried {share:.2}");
    let rails = net.ports[0].rails(addr(1));
    assert_eq!(rails.len(), 2);
    assert!(
        rails
            .iter()
            .all(|r| r.state == RailState::Up && r.downs == 0),
        "{rails:?}"
    );
}

#[test]
fn shares_follow_each_rails_speed() {
    // Rail 1 is three times as fast as rail 0.
    let mut net = RailNet::new(vec![SimRail::new(40, 10), SimRail::new(120, 10)], false);
    let both = net.stream(600, 12_000, 64, |_, _| {});
    let share_fast = net.bytes_on[1] as f64 / (net.bytes_on[0] + net.bytes_on[1]) as f64;
    assert!(
        (0.62..0.88).contains(&share_fast),
        "the fast rail carried {share_fast:.2} of the bytes"
    );
    let fast_only =
        RailNet::new(vec![SimRail::new(120, 10)], false).stream(600, 12_000, 64, |_, _| {});
    assert!(
        both < fast_only,
        "both rails ({both:?}) beat the fast one alone ({fast_only:?})"
    );
}

#[test]
fn a_cut_rail_is_taken_out_its_frames_resent_elsewhere_and_used_again_when_it_returns() {
    let mut net = RailNet::new(vec![SimRail::new(125, 10), SimRail::new(125, 10)], true);
    let mut cut_at = None;
    let mut healed = false;
    net.stream(3000, 12_000, 64, |net, sent| {
        if sent >= 600 && cut_at.is_none() {
            net.rails[1].cut = true;
            cut_at = Some(net.now);
        }
        if sent >= 1500 && !healed {
            assert_eq!(
                net.ports[0].rails(addr(1))[1].state,
                RailState::TimedOut,
                "the cut rail is out of service"
            );
            net.rails[1].cut = false;
            healed = true;
        }
    });
    let rails = net.ports[0].rails(addr(1));
    assert_eq!(rails[1].downs, 1, "{rails:?}");
    assert_eq!(rails[1].state, RailState::Up, "back in service: {rails:?}");
    assert!(net.ports[0].stats().rails_down == 1 && net.ports[0].stats().rails_up == 1);
    assert!(net.ports[0].stats().rail_probes >= 1);
    // After the return, the rail carried a fair part again.
    assert!(
        rails[1].bytes_delivered > rails[0].bytes_delivered / 4,
        "{rails:?}"
    );
    // The receiver learnt the rails by itself.
    assert_eq!(net.ports[1].rails(addr(0)).len(), 2);
}

#[test]
fn a_lossy_rail_keeps_every_message_once_and_in_order() {
    let mut lossy = SimRail::new(125, 10);
    lossy.drop_every = 13;
    let mut net = RailNet::new(vec![SimRail::new(125, 10), lossy], false);
    net.stream(1500, 9_000, 64, |_, _| {});
    assert!(net.ports[0].stats().retransmits > 0);
}

#[test]
fn a_link_reported_down_is_left_at_once() {
    let mut net = RailNet::new(vec![SimRail::new(125, 10), SimRail::new(125, 10)], false);
    let mut done = false;
    net.stream(1000, 12_000, 64, |net, sent| {
        if sent >= 300 && !done {
            net.rails[0].cut = true;
            let now = net.now;
            net.ports[0].rail_failed(0, now);
            done = true;
            let rails = net.ports[0].rails(addr(1));
            assert_eq!(rails[0].state, RailState::LinkDown);
            assert_eq!(rails[0].in_flight, 0);
        }
    });
    // The last rail up is never taken out.
    let now = net.now;
    net.ports[0].rail_failed(1, now);
    assert_eq!(net.ports[0].rails(addr(1))[1].state, RailState::Up);
}

#[test]
fn small_messages_use_every_rail_and_stay_in_order() {
    let mut net = RailNet::new(vec![SimRail::new(125, 10), SimRail::new(125, 10)], false);
    net.stream(5000, 64, 256, |_, _| {});
    let rails = net.ports[0].rails(addr(1));
    assert!(rails.iter().all(|r| r.frames_sent > 0), "{rails:?}");
}

#[test]
fn rails_are_checked() {
    let mut p = Port::new(config(0)).unwrap();
    let a = p.add_method(caps(MTU)).unwrap();
    let r = |method| Route {
        method,
        link: LinkId(1),
    };
    assert_eq!(
        p.set_rails(Time::ZERO, addr(1), &[]),
        Err(RouteError::NoRails)
    );
    assert_eq!(
        p.set_rails(Time::ZERO, addr(1), &[r(a), r(a)]),
        Err(RouteError::RailMethodTwice(a))
    );
    assert_eq!(
        p.set_rails(Time::ZERO, addr(1), &[r(a), r(9)]),
        Err(RouteError::UnknownMethod(9))
    );
    let shm = p
        .add_method(MethodCaps {
            reliable: true,
            ..caps(MTU)
        })
        .unwrap();
    assert_eq!(
        p.set_rails(Time::ZERO, addr(1), &[r(a), r(shm)]),
        Err(RouteError::RailOnReliableMethod(shm))
    );
    // One route: an ordinary peer.
    p.set_rails(Time::ZERO, addr(1), &[r(a)]).unwrap();
    assert!(p.rails(addr(1)).is_empty());
}
