//! Liveness: silent peers that something depends on are pinged and, after
//! the bound, declared dead; live ones that pause for less are not; idle
//! ones cost nothing.

use super::tests::{addr, config, pattern, Net, Wired};
use super::*;
use crate::event::{ChannelEvent, SendFailure, TransferError};
use std::time::Duration;

pub(super) const PERIOD: Duration = Duration::from_millis(100);
pub(super) const MISSES: u32 = 3;

pub(super) fn watched_config(i: usize) -> PortConfig {
    let mut c = config(i);
    c.liveness.enabled = true;
    c.liveness.period = PERIOD;
    c.liveness.misses = MISSES;
    c
}

/// What a port is doing at a given instant.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum State {
    Running,
    /// Stopped (descheduled, SIGSTOP): frames to it wait, it runs nothing.
    Paused,
    /// Gone: frames to it are lost, it runs nothing.
    Dead,
}

/// What a run saw.
#[derive(Default, Debug)]
pub(super) struct Seen {
    /// (port, peer it declared gone, when).
    pub gone: Vec<(usize, ProcessAddr, Time)>,
    pub channel_events: Vec<(usize, ChannelEvent)>,
    /// Frames each port sent.
    pub frames: Vec<Wired>,
}

/// Runs `net` until `until`, 1 µs per hop, with each port's `state(port,
/// now)`: frames to a paused port are held until it runs again, frames to
/// or from a dead one are lost, and neither runs its timers.
pub(super) fn run(net: &mut Net, until: Time, state: impl Fn(usize, Time) -> State) -> Seen {
    let mut seen = Seen::default();
    let mut held: Vec<Wired> = Vec::new();
    let n = net.ports.len();
    loop {
        let now = net.now;
        let running = |i: usize| state(i, now) == State::Running;
        let mut frames = net.transmit();
        seen.frames.extend(frames.iter().cloned());
        frames.retain(|f| running(f.from) && state(f.to, now) != State::Dead);
        let (ready, wait): (Vec<_>, Vec<_>) =
            held.drain(..).chain(frames).partition(|f| running(f.to));
        held = wait;
        for i in 0..n {
            while let Some(e) = net.ports[i].poll_peer_event() {
                if let PeerEvent::Down(a) = e {
                    seen.gone.push((i, a, now));
                }
            }
            while let Some(e) = net.ports[i].poll_channel_event() {
                seen.channel_events.push((i, e));
            }
        }
        if !ready.is_empty() {
            net.now = now + Duration::from_micros(1);
            net.deliver(&ready);
            net.drain_deliveries();
            continue;
        }
        // Nothing moves: the next timer of a running port, or the next
        // millisecond (a paused port may run again).
        let timer = (0..n)
            .filter(|&i| running(i))
            .filter_map(|i| net.ports[i].poll_timeout())
            .min();
        let next = timer
            .unwrap_or(Time::NEVER)
            .min(now + Duration::from_millis(1))
            .max(now);
        if next > until {
            return seen;
        }
        net.now = next;
        for i in 0..n {
            if state(i, next) == State::Running {
                net.ports[i].handle_timeout(next);
            }
        }
    }
}

/// Pings from the first silent check to the verdict: one at the first
/// (a live peer answers it), then a burst at each check after.
fn pings_before_verdict() -> u64 {
    1 + (1 + u64::from(super::liveness::SUSPECT_EXTRA_PINGS)) * u64::from(MISSES - 2)
}

/// Port 1 is gone from the start; the others run.
fn only_port_1_dead(i: usize, _: Time) -> State {
    if i == 1 {
        State::Dead
    } else {
        State::Running
    }
}

/// A receiver posts a buffer for one sender, which dies before sending:
/// the sender is declared dead `misses` periods after its last frame (two
/// pings first), and the posted receive fails naming it.
#[test]
fn a_peer_we_wait_for_that_dies_is_declared_dead_after_the_bound() {
    let mut net = Net::new(vec![watched_config(0), watched_config(1)]);
    // One exchange first, so that both know each other.
    net.ports[1]
        .send(net.now, addr(0), &pattern(100, 1))
        .unwrap();
    let got = net.run_perfect();
    assert_eq!(got.len(), 1);
    let ch = net.ports[0].open_normal_channel().unwrap();
    net.ports[0]
        .post(net.now, ch, Some(addr(1)), vec![0; 4096])
        .unwrap();
    let died = net.now;
    let seen = run(&mut net, died + PERIOD * 10, only_port_1_dead);
    assert_eq!(seen.gone.len(), 1, "{seen:?}");
    let (who, gone, when) = seen.gone[0];
    assert_eq!((who, gone), (0, addr(1)));
    // `misses` periods after its last frame (a millisecond before `died`),
    // to the tick of about a millisecond.
    let took = when.saturating_since(died);
    assert!(
        took + Duration::from_millis(3) >= PERIOD * MISSES && took <= PERIOD * MISSES,
        "declared dead after {took:?}"
    );
    assert_eq!(net.ports[0].stats().peers_declared_dead, 1);
    assert_eq!(net.ports[0].stats().pings_sent, pings_before_verdict());
    assert!(
        seen.channel_events.iter().any(|(i, e)| *i == 0
            && matches!(e, ChannelEvent::ReceiveFailed { error: TransferError::PeerUnreachable(a), .. } if *a == addr(1))),
        "{:?}",
        seen.channel_events
    );
}

/// A message to a dead peer fails at the liveness bound, long before its
/// retransmission timeouts would give up.
#[test]
fn a_send_to_a_dead_peer_fails_at_the_liveness_bound() {
    let mut net = Net::new(vec![watched_config(0), watched_config(1)]);
    let h = net.ports[0]
        .send(net.now, addr(1), &pattern(100, 1))
        .unwrap();
    let start = net.now;
    let seen = run(&mut net, start + PERIOD * 10, only_port_1_dead);
    assert_eq!(seen.gone.len(), 1, "{seen:?}");
    assert!(seen.gone[0].2.saturating_since(start) <= PERIOD * (MISSES + 1));
    let mut failed = false;
    while let Some(e) = net.ports[0].poll_send_event() {
        failed |= matches!(e, SendEvent::Failed(handle, SendFailure::PeerUnreachable(a)) if handle == h && a == addr(1));
    }
    assert!(failed, "the message did not fail naming the peer");
    assert!(net.ports[0].stats().timeouts < u64::from(net.ports[0].config().max_timeouts));
}

/// A peer that stops for less than `misses − 1` periods (a busy CPU, a
/// stopped process) answers the ping that follows and is never declared
/// dead, however often it pauses.
#[test]
fn a_live_peer_that_pauses_for_less_than_the_bound_is_not_declared_dead() {
    let mut net = Net::new(vec![watched_config(0), watched_config(1)]);
    let ch = net.ports[0].open_normal_channel().unwrap();
    net.ports[0]
        .post(net.now, ch, Some(addr(1)), vec![0; 4096])
        .unwrap();
    let start = net.now;
    // Paused 190 ms of every 250, under the 200 ms that 3 misses of 100 ms
    // tolerate.
    let pause = Duration::from_millis(190);
    let seen = run(&mut net, start + Duration::from_secs(3), |i, now| {
        let phase = now.saturating_since(start).as_millis() % 250;
        if i == 1 && phase < pause.as_millis() {
            State::Paused
        } else {
            State::Running
        }
    });
    assert!(seen.gone.is_empty(), "{:?}", seen.gone);
    let s = net.ports[0].stats();
    assert!(s.pings_sent >= 4, "{s:?}");
    assert_eq!(s.peers_declared_dead, 0);
    // The answers of a port with nothing to acknowledge are liveness
    // frames, not bad acknowledgements.
    assert_eq!(s.bad_frames.bad_ack, 0);
    assert_eq!(net.ports[1].stats().bad_frames.bad_ack, 0);
}

/// When nothing depends on a peer any more, the port stops watching it:
/// no timer is left (a flush before exit does not wait), and no ping goes
/// out however long both stay idle.
#[test]
fn an_idle_peer_costs_no_timer_and_no_frame() {
    let mut net = Net::new(vec![
        watched_config(0),
        watched_config(1),
        watched_config(2),
    ]);
    for to in [1, 2] {
        net.ports[0]
            .send(net.now, addr(to), &pattern(3000, to as u8))
            .unwrap();
    }
    assert_eq!(net.run_perfect().len(), 2);
    for p in &net.ports {
        assert_eq!(p.poll_timeout(), None);
    }
    let idle_from = net.now;
    let seen = run(&mut net, idle_from + Duration::from_secs(10), |_, _| {
        State::Running
    });
    assert!(seen.frames.is_empty(), "{:?}", seen.frames);
    assert_eq!(net.ports[0].stats().pings_sent, 0);
}

/// A peer marked critical is watched while idle: pinged every period while
/// it answers (even one that never heard from us), declared dead once it
/// stops.
#[test]
fn a_critical_peer_is_watched_while_idle() {
    let mut net = Net::new(vec![watched_config(0), watched_config(1)]);
    net.ports[0].watch_peer(net.now, addr(1), true).unwrap();
    let start = net.now;
    let dies = start + Duration::from_secs(1);
    let seen = run(&mut net, start + Duration::from_secs(2), |i, now| {
        if i == 1 && now >= dies {
            State::Dead
        } else {
            State::Running
        }
    });
    assert_eq!(seen.gone.len(), 1, "{seen:?}");
    let took = seen.gone[0].2.saturating_since(dies);
    assert!(
        took <= PERIOD * (MISSES + 1),
        "declared dead {took:?} after it died"
    );
    // While it answered, a ping every period (its answer is a period old
    // at the next check); then those of the silent checks before the
    // verdict.
    let pings = net.ports[0].stats().pings_sent;
    let alive_checks = (dies.saturating_since(start).as_millis() / PERIOD.as_millis()) as u64;
    assert!(
        (alive_checks - 1..=alive_checks + pings_before_verdict()).contains(&pings),
        "{pings} pings"
    );
    assert_eq!(net.ports[0].stats().bad_frames.bad_ack, 0);
}

/// A live peer busy with our stream is heard through its acknowledgements:
/// no ping is sent.
#[test]
fn an_exchange_in_progress_sends_no_ping() {
    let mut net = Net::new(vec![watched_config(0), watched_config(1)]);
    for i in 0..200u8 {
        net.ports[0]
            .send(net.now, addr(1), &pattern(2000, i))
            .unwrap();
        if i % 20 == 0 {
            net.advance(Duration::from_millis(30));
            net.run_perfect();
        }
    }
    net.run_perfect();
    assert_eq!(net.ports[0].stats().pings_sent, 0);
    assert_eq!(net.ports[0].stats().messages_completed, 200);
}

#[test]
fn liveness_configuration_is_checked() {
    let mut c = watched_config(0);
    c.liveness.misses = 1;
    let e = Port::new(c).err().expect("one miss is refused");
    assert_eq!(e.field, "liveness.misses");
    let mut c = watched_config(0);
    c.liveness.period = Duration::ZERO;
    assert_eq!(Port::new(c).err().unwrap().field, "liveness.period");
}

/// Port 0 and `n` peers that know only port 0 (small rings, so a thousand
/// fit), each of which has sent port 0 one message: port 0 knows them all.
fn star(n: usize) -> Net {
    let small = |i: usize| {
        let mut c = watched_config(i);
        c.ring_blocks = 64;
        c
    };
    let mut net = Net::new(vec![small(0)]);
    for i in 1..=n {
        let mut p = Port::new(small(i)).unwrap();
        p.add_method(super::tests::caps(super::tests::MTU)).unwrap();
        let to_0 = Route {
            method: 0,
            link: crate::method::LinkId(0),
        };
        p.set_route(net.now, addr(0), to_0).unwrap();
        let to_i = Route {
            method: 0,
            link: crate::method::LinkId(i as u32),
        };
        net.ports[0].set_route(net.now, addr(i), to_i).unwrap();
        p.send(net.now, addr(0), &[i as u8]).unwrap();
        net.ports.push(p);
    }
    assert_eq!(net.run_perfect().len(), n);
    net
}

/// Liveness work follows the peers something depends on, not the peers
/// known: a thousand idle peers cost no timer and no frame; marked
/// critical, each is pinged at most once a period (every other period
/// while it answers); one critical among a thousand idle costs one peer's
/// pings.
#[test]
fn liveness_work_follows_watched_peers_not_known_ones() {
    const N: usize = 1000;
    let periods = 20u32;
    let mut net = star(N);
    assert_eq!(net.ports[0].poll_timeout(), None);
    let from = net.now;
    let seen = run(&mut net, from + PERIOD * periods, |_, _| State::Running);
    assert!(seen.frames.is_empty(), "{} frames", seen.frames.len());

    net.ports[0].watch_peer(net.now, addr(7), true).unwrap();
    let from = net.now;
    let seen = run(&mut net, from + PERIOD * periods, |_, _| State::Running);
    let one = net.ports[0].stats().pings_sent;
    assert!(
        (1..=u64::from(periods)).contains(&one),
        "{one} pings to one critical peer"
    );
    assert!(seen.gone.is_empty());

    for i in 1..=N {
        net.ports[0].watch_peer(net.now, addr(i), true).unwrap();
    }
    let from = net.now;
    let seen = run(&mut net, from + PERIOD * periods, |_, _| State::Running);
    let all = net.ports[0].stats().pings_sent - one;
    let sent_by_0 = seen.frames.iter().filter(|f| f.from == 0).count() as u64;
    println!(
        "{N} critical live peers, {periods} periods: {all} pings ({:.2} per peer per period), {sent_by_0} frames from the watcher",
        all as f64 / (N as f64 * f64::from(periods))
    );
    assert!(all <= (N as u64) * u64::from(periods), "{all} pings");
    assert!(all >= (N as u64) * u64::from(periods) / 3, "{all} pings");
    assert_eq!(sent_by_0, all, "one frame per ping, nothing else");
    assert!(seen.gone.is_empty());
}
