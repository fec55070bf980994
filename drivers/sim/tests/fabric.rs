//! Behaviour of the simulated fabric in virtual time.

use std::time::Duration;

use bcl_core::{Descriptor, LinkId, Method, MethodError, Time, TxFrame};
use bcl_sim::{
    Bottleneck, FabricConfig, FabricStats, FaultProfile, FaultSpec, SimClock, SimEndpoint,
    SimFabric, VirtualClock, MAX_TX_BURST,
};
use proptest::prelude::*;

const US: u64 = 1_000;

fn t(nanos: u64) -> Time {
    Time::from_nanos(nanos)
}

fn fabric(faults: FaultProfile, seed: u64) -> (SimFabric, VirtualClock) {
    let clock = VirtualClock::new();
    let fabric = SimFabric::new(FabricConfig {
        faults,
        seed,
        clock: SimClock::Virtual(clock.clone()),
        ..FabricConfig::default()
    });
    (fabric, clock)
}

/// Sends `frames` from `ep` to address `to`, all in one burst if they fit.
fn send(ep: &mut SimEndpoint, to: u32, frames: &[Vec<u8>]) -> usize {
    let mut next = frames.iter();
    let mut total = 0;
    loop {
        let sent = ep
            .tx_burst(&mut |buf| {
                let frame = next.next()?;
                buf[..frame.len()].copy_from_slice(frame);
                Some(TxFrame {
                    link: LinkId(to),
                    len: frame.len(),
                })
            })
            .unwrap();
        total += sent;
        if sent < MAX_TX_BURST {
            return total;
        }
    }
}

fn recv(ep: &mut SimEndpoint) -> Vec<(u32, Vec<u8>)> {
    let mut got = Vec::new();
    ep.rx_burst(usize::MAX, &mut |from, bytes| {
        got.push((from.0, bytes.to_vec()))
    })
    .unwrap();
    got
}

/// One delivery: when, to whom, from whom, what.
#[derive(Clone, Debug, PartialEq)]
struct Delivery {
    at: Time,
    to: u32,
    from: u32,
    bytes: Vec<u8>,
}

/// A frame to send: when, from which endpoint (index), to which address.
struct Send {
    at: Time,
    from: usize,
    to: u32,
    bytes: Vec<u8>,
}

/// Drives the fabric in virtual time: sends each frame at its time, and
/// receives on every endpoint at every delivery time, until nothing is in
/// flight. Returns the deliveries in the order they were seen.
fn run(
    fabric: &SimFabric,
    clock: &VirtualClock,
    eps: &mut [SimEndpoint],
    mut sends: Vec<Send>,
) -> Vec<Delivery> {
    sends.sort_by_key(|s| s.at);
    let mut sends = sends.into_iter().peekable();
    let mut trace = Vec::new();
    loop {
        let next_send = sends.peek().map(|s| s.at);
        let next = match (next_send, fabric.next_delivery()) {
            (None, None) => break,
            (a, b) => a.into_iter().chain(b).min().unwrap(),
        };
        assert!(next >= clock.now(), "time went backwards");
        clock.set(next);
        while sends.peek().is_some_and(|s| s.at <= next) {
            let s = sends.next().unwrap();
            send(&mut eps[s.from], s.to, &[s.bytes]);
        }
        for ep in eps.iter_mut() {
            let to = ep.address();
            for (from, bytes) in recv(ep) {
                trace.push(Delivery {
                    at: clock.now(),
                    to,
                    from,
                    bytes,
                });
            }
        }
    }
    assert_eq!(fabric.in_flight(), 0);
    trace
}

/// Frame `i`: its number in 4 bytes, then filler up to `len` bytes.
fn numbered(i: u32, len: usize) -> Vec<u8> {
    let mut v = i.to_be_bytes().to_vec();
    v.resize(len.max(4), 0xA5);
    v
}

fn number(bytes: &[u8]) -> u32 {
    u32::from_be_bytes(bytes[..4].try_into().unwrap())
}

/// `n` frames from endpoint 0 to address 1, one every `gap_ns` from `start`.
fn stream(n: u32, start: u64, gap_ns: u64, len: usize) -> Vec<Send> {
    (0..n)
        .map(|i| Send {
            at: t(start + u64::from(i) * gap_ns),
            from: 0,
            to: 1,
            bytes: numbered(i, len),
        })
        .collect()
}

fn assert_conserved(s: &FabricStats, in_flight: usize) {
    assert_eq!(
        s.offered + s.duplicated,
        s.delivered + s.dropped + in_flight as u64,
        "{s}"
    );
}

#[test]
fn descriptor_and_open_link() {
    let (fabric, _) = fabric(FaultProfile::default(), 0);
    let mut eps: Vec<_> = (0..4).map(|_| fabric.endpoint()).collect();
    assert_eq!(eps[3].address(), 3);
    assert_eq!(eps[3].descriptor().to_string(), "sim:3");
    assert_eq!(eps[0].name(), "sim");
    let d3 = eps[3].descriptor();
    assert_eq!(eps[0].open_link(&d3).unwrap(), LinkId(3));
    assert_eq!(eps[0].open_link(&d3).unwrap(), LinkId(3));
    let d0 = eps[0].descriptor();
    assert_eq!(eps[0].open_link(&d0).unwrap(), LinkId(0));
    assert!(eps[0].readiness_fd().is_none());

    for (text, words) in [
        ("udp:10.0.0.1:7000", "udp"),
        ("sim:x", "not an endpoint number"),
        ("sim:+1", "not an endpoint number"),
        ("sim:-1", "not an endpoint number"),
        ("sim:4", "no endpoint 4"),
        ("sim:99999999999", "not an endpoint number"),
    ] {
        let d: Descriptor = text.parse().unwrap();
        match eps[0].open_link(&d) {
            Err(MethodError::BadDescriptor {
                method,
                descriptor,
                reason,
            }) => {
                assert_eq!(method, "sim");
                assert_eq!(descriptor, d);
                assert!(reason.contains(words), "{text}: {reason}");
            }
            other => panic!("{text}: {other:?}"),
        }
    }
}

#[test]
fn caps_and_lent_buffers_follow_the_mtu() {
    let clock = VirtualClock::new();
    let fabric = SimFabric::new(FabricConfig {
        mtu: 9000,
        clock: clock.clone().into(),
        ..FabricConfig::default()
    });
    let mut a = fabric.endpoint();
    let caps = a.caps();
    assert_eq!(caps.mtu, 9000);
    assert!(!caps.integrity);
    assert!(!caps.reliable);
    let mut lent = Vec::new();
    let sent = a
        .tx_burst(&mut |buf| {
            lent.push(buf.len());
            None
        })
        .unwrap();
    assert_eq!(sent, 0);
    assert_eq!(lent, vec![9000]);
}

#[test]
fn a_frame_longer_than_the_mtu_is_an_error_after_the_frames_before_it() {
    let (fabric, _) = fabric(FaultProfile::default(), 0);
    let mut a = fabric.endpoint();
    let mut b = fabric.endpoint();
    let mut n = 0;
    let r = a.tx_burst(&mut |buf| {
        n += 1;
        let len = if n == 3 { buf.len() + 1 } else { 10 };
        Some(TxFrame {
            link: LinkId(1),
            len,
        })
    });
    match r {
        Err(MethodError::Other { method, reason }) => {
            assert_eq!(method, "sim");
            assert!(reason.contains("1501"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(fabric.stats().offered, 2);
    assert_eq!(recv(&mut b).len(), 2);
}

#[test]
fn one_burst_sends_at_most_max_tx_burst_frames() {
    let (fabric, _) = fabric(FaultProfile::default(), 0);
    let mut a = fabric.endpoint();
    let _b = fabric.endpoint();
    let mut calls = 0;
    let sent = a
        .tx_burst(&mut |_| {
            calls += 1;
            Some(TxFrame {
                link: LinkId(1),
                len: 1,
            })
        })
        .unwrap();
    assert_eq!(sent, MAX_TX_BURST);
    assert_eq!(calls, MAX_TX_BURST);
    assert_eq!(fabric.in_flight(), MAX_TX_BURST);
}

#[test]
fn rx_budget_and_tie_order() {
    let (fabric, _) = fabric(FaultProfile::default(), 0);
    let mut a = fabric.endpoint();
    let mut b = fabric.endpoint();
    let frames: Vec<_> = (0..10).map(|i| numbered(i, 8)).collect();
    send(&mut a, 1, &frames);
    let mut seen = Vec::new();
    assert_eq!(b.rx_burst(0, &mut |_, _| panic!()).unwrap(), 0);
    assert_eq!(
        b.rx_burst(3, &mut |from, bytes| {
            assert_eq!(from, LinkId(0));
            seen.push(number(bytes));
        })
        .unwrap(),
        3
    );
    assert_eq!(fabric.in_flight(), 7);
    b.rx_burst(100, &mut |_, bytes| seen.push(number(bytes)))
        .unwrap();
    assert_eq!(seen, (0..10).collect::<Vec<_>>());
    assert_eq!(fabric.in_flight(), 0);
}

#[test]
fn the_sink_may_call_into_the_fabric() {
    let (fabric, _) = fabric(FaultProfile::default(), 0);
    let mut a = fabric.endpoint();
    let mut b = fabric.endpoint();
    send(&mut a, 1, &[vec![1, 2, 3]]);
    let f = fabric.clone();
    let n = b
        .rx_burst(8, &mut |_, _| {
            // Would deadlock if the lock were held.
            assert_eq!(f.in_flight(), 0);
            let _ = f.stats();
        })
        .unwrap();
    assert_eq!(n, 1);
}

#[test]
fn nothing_arrives_before_the_delay_and_everything_at_it() {
    let delay = Duration::from_micros(10);
    let (fabric, clock) = fabric(
        FaultProfile {
            delay,
            ..FaultProfile::default()
        },
        1,
    );
    let mut a = fabric.endpoint();
    let mut b = fabric.endpoint();
    clock.set(t(1_000));
    send(&mut a, 1, &[b"ping".to_vec()]);
    assert_eq!(fabric.in_flight(), 1);
    assert_eq!(fabric.next_delivery(), Some(t(1_000 + 10 * US)));
    clock.set(t(1_000 + 10 * US - 1));
    assert!(recv(&mut b).is_empty());
    clock.set(t(1_000 + 10 * US));
    assert_eq!(recv(&mut b), vec![(0, b"ping".to_vec())]);
    assert_eq!(fabric.next_delivery(), None);
}

#[test]
fn jitter_stays_within_its_bounds_and_varies() {
    let profile = FaultProfile {
        delay: Duration::from_micros(10),
        jitter: Duration::from_micros(2),
        ..FaultProfile::default()
    };
    let (fabric, clock) = fabric(profile, 3);
    let mut eps = [fabric.endpoint(), fabric.endpoint()];
    let sends = stream(500, 0, 3 * US, 16);
    let trace = run(&fabric, &clock, &mut eps, sends);
    assert_eq!(trace.len(), 500);
    let mut latencies = Vec::new();
    for d in &trace {
        let sent = t(u64::from(number(&d.bytes)) * 3 * US);
        let latency = (d.at - sent).as_nanos() as u64;
        assert!(
            (10 * US..=12 * US).contains(&latency),
            "latency {latency} ns"
        );
        latencies.push(latency);
    }
    latencies.sort_unstable();
    latencies.dedup();
    assert!(latencies.len() > 100, "jitter barely varies: {latencies:?}");
}

#[test]
fn jitter_alone_never_reorders() {
    for seed in 0..20 {
        let profile = FaultProfile {
            jitter: Duration::from_micros(50),
            ..FaultProfile::default()
        };
        let (fabric, clock) = fabric(profile, seed);
        let mut eps = [fabric.endpoint(), fabric.endpoint()];
        let trace = run(&fabric, &clock, &mut eps, stream(200, 0, US, 8));
        let order: Vec<_> = trace.iter().map(|d| number(&d.bytes)).collect();
        assert_eq!(order, (0..200).collect::<Vec<_>>(), "seed {seed}");
        assert_eq!(fabric.stats().reordered, 0);
    }
}

#[test]
fn rate_limit_spaces_deliveries_by_serialisation_time() {
    let profile = FaultProfile {
        delay: Duration::from_micros(10),
        // One byte per microsecond.
        rate_bytes_per_sec: Some(1_000_000),
        ..FaultProfile::default()
    };
    let (fabric, clock) = fabric(profile, 0);
    let mut eps = [fabric.endpoint(), fabric.endpoint()];
    // Five 100-byte frames at once, then one after the wire is idle again.
    let mut sends = stream(5, 0, 0, 100);
    sends.push(Send {
        at: t(1_000 * US),
        from: 0,
        to: 1,
        bytes: numbered(5, 50),
    });
    let trace = run(&fabric, &clock, &mut eps, sends);
    let times: Vec<_> = trace.iter().map(|d| d.at.as_nanos() / US).collect();
    assert_eq!(times, vec![110, 210, 310, 410, 510, 1_060]);
    assert_eq!(fabric.stats().delayed_by_rate, 4);
}

#[test]
fn rate_limit_applies_per_directed_link() {
    let profile = FaultProfile {
        rate_bytes_per_sec: Some(1_000_000),
        ..FaultProfile::default()
    };
    let (fabric, clock) = fabric(profile, 0);
    let mut eps = [fabric.endpoint(), fabric.endpoint(), fabric.endpoint()];
    let mut sends = stream(1, 0, 0, 100);
    sends.push(Send {
        at: t(0),
        from: 0,
        to: 2,
        bytes: numbered(1, 100),
    });
    sends.push(Send {
        at: t(0),
        from: 1,
        to: 0,
        bytes: numbered(2, 100),
    });
    let trace = run(&fabric, &clock, &mut eps, sends);
    assert_eq!(trace.len(), 3);
    assert!(trace.iter().all(|d| d.at == t(100 * US)), "{trace:?}");
}

#[test]
fn a_bottleneck_is_shared_by_every_sender_and_drops_at_the_tail() {
    let (fabric, clock) = fabric(FaultProfile::default(), 0);
    let mut eps = [fabric.endpoint(), fabric.endpoint(), fabric.endpoint()];
    // One byte per microsecond into endpoint 2, room for two frames waiting.
    fabric.set_bottleneck(
        2,
        Some(Bottleneck {
            rate_bytes_per_sec: 1_000_000,
            queue_bytes: 200,
        }),
    );
    // Two senders, three 100-byte frames each, all at once: the first goes
    // on the wire, two wait, the other three find the queue full.
    let mut sends = Vec::new();
    for from in 0..2 {
        for i in 0..3 {
            sends.push(Send {
                at: t(0),
                from,
                to: 2,
                bytes: numbered((from * 10 + i) as u32, 100),
            });
        }
    }
    // Endpoint 0's traffic to endpoint 1 does not cross it.
    sends.push(Send {
        at: t(0),
        from: 0,
        to: 1,
        bytes: numbered(99, 100),
    });
    let trace = run(&fabric, &clock, &mut eps, sends);
    let times: Vec<_> = trace.iter().map(|d| d.at.as_nanos() / US).collect();
    assert_eq!(times, vec![0, 100, 200, 300], "{trace:?}");
    let s = fabric.stats();
    assert_eq!((s.queue_drops, s.dropped), (3, 3), "{s}");
    assert_conserved(&s, fabric.in_flight());
    // Removed, the link is unlimited again.
    fabric.set_bottleneck(2, None);
    let sends = (0..3)
        .map(|i| Send {
            at: t(1_000 * US),
            from: 0,
            to: 2,
            bytes: numbered(i, 100),
        })
        .collect();
    let trace = run(&fabric, &clock, &mut eps, sends);
    assert_eq!(trace.len(), 3);
    assert!(trace.iter().all(|d| d.at == t(1_000 * US)), "{trace:?}");
}

#[test]
fn loss_one_drops_everything() {
    let (fabric, clock) = fabric(
        FaultProfile {
            loss: 1.0,
            ..FaultProfile::default()
        },
        5,
    );
    let mut eps = [fabric.endpoint(), fabric.endpoint()];
    let trace = run(&fabric, &clock, &mut eps, stream(100, 0, US, 32));
    assert!(trace.is_empty());
    let s = fabric.stats();
    assert_eq!((s.offered, s.dropped, s.delivered), (100, 100, 0));
    assert_eq!(s.unroutable, 0);
    assert_conserved(&s, 0);
}

#[test]
fn partial_loss_drops_some() {
    let (fabric, clock) = fabric(
        FaultProfile {
            loss: 0.3,
            ..FaultProfile::default()
        },
        5,
    );
    let mut eps = [fabric.endpoint(), fabric.endpoint()];
    let trace = run(&fabric, &clock, &mut eps, stream(1000, 0, US, 32));
    let s = fabric.stats();
    assert!(s.dropped > 0 && s.delivered > 0, "{s}");
    assert_eq!(s.delivered as usize, trace.len());
    assert_conserved(&s, 0);
}

#[test]
fn duplicate_one_delivers_two_copies() {
    let (fabric, clock) = fabric(
        FaultProfile {
            duplicate: 1.0,
            ..FaultProfile::default()
        },
        5,
    );
    let mut eps = [fabric.endpoint(), fabric.endpoint()];
    let sends = stream(50, 0, US, 40);
    let originals: Vec<_> = sends.iter().map(|s| s.bytes.clone()).collect();
    let trace = run(&fabric, &clock, &mut eps, sends);
    assert_eq!(trace.len(), 100);
    for original in &originals {
        assert_eq!(trace.iter().filter(|d| &d.bytes == original).count(), 2);
    }
    let s = fabric.stats();
    assert_eq!((s.offered, s.duplicated, s.delivered), (50, 50, 100));
    assert_conserved(&s, 0);
}

#[test]
fn corrupt_one_flips_one_to_three_bits_of_every_frame() {
    let (fabric, clock) = fabric(
        FaultProfile {
            corrupt: 1.0,
            ..FaultProfile::default()
        },
        9,
    );
    let mut eps = [fabric.endpoint(), fabric.endpoint()];
    // Frames of 1 to 1500 bytes, each a different pattern.
    let sends: Vec<_> = (0..300u32)
        .map(|i| {
            let len = 1 + (i as usize * 37) % 1500;
            Send {
                at: t(u64::from(i) * US),
                from: 0,
                to: 1,
                bytes: (0..len).map(|j| (i as usize + j) as u8).collect(),
            }
        })
        .collect();
    let originals: Vec<_> = sends.iter().map(|s| s.bytes.clone()).collect();
    let trace = run(&fabric, &clock, &mut eps, sends);
    assert_eq!(trace.len(), 300);
    let mut flips_seen = [0; 4];
    for (original, d) in originals.iter().zip(&trace) {
        assert_eq!(original.len(), d.bytes.len());
        let flips: u32 = original
            .iter()
            .zip(&d.bytes)
            .map(|(a, b)| (a ^ b).count_ones())
            .sum();
        assert!((1..=3).contains(&flips), "{flips} bits flipped");
        flips_seen[flips as usize] += 1;
    }
    assert!(flips_seen[1] > 0 && flips_seen[2] > 0 && flips_seen[3] > 0);
    assert_eq!(fabric.stats().corrupted, 300);

    // An empty frame has nothing to corrupt.
    let mut a = fabric.endpoint();
    let mut b = fabric.endpoint();
    let to = b.address();
    send(&mut a, to, &[Vec::new()]);
    assert_eq!(recv(&mut b), vec![(a.address(), Vec::new())]);
    assert_eq!(fabric.stats().corrupted, 300);
}

fn order_of(profile: &FaultProfile, seed: u64) -> (Vec<u32>, FabricStats) {
    let (fabric, clock) = fabric(profile.clone(), seed);
    let mut eps = [fabric.endpoint(), fabric.endpoint()];
    let trace = run(&fabric, &clock, &mut eps, stream(200, 0, US, 8));
    (
        trace.iter().map(|d| number(&d.bytes)).collect(),
        fabric.stats(),
    )
}

#[test]
fn reorder_overtakes_and_no_reorder_keeps_order() {
    let reordering = FaultProfile {
        reorder: 0.1,
        delay: Duration::from_micros(2),
        ..FaultProfile::default()
    };
    let (order, stats) = order_of(&reordering, 11);
    assert!(stats.reordered > 0);
    assert_eq!(order.len(), 200, "reordering must not lose frames");
    let mut sorted = order.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, (0..200).collect::<Vec<_>>());
    assert_ne!(order, sorted, "reorder=0.1 delivered everything in order");

    // Jitter larger than the gap between frames still keeps them in order.
    let in_order = FaultProfile {
        reorder: 0.0,
        jitter: Duration::from_micros(5),
        ..reordering
    };
    for seed in 0..20 {
        let (order, stats) = order_of(&in_order, seed);
        assert_eq!(order, (0..200).collect::<Vec<_>>(), "seed {seed}");
        assert_eq!(stats.reordered, 0);
    }
}

fn lossy_profile() -> FaultProfile {
    FaultProfile {
        loss: 0.1,
        duplicate: 0.1,
        reorder: 0.1,
        corrupt: 0.1,
        delay: Duration::from_micros(5),
        jitter: Duration::from_micros(3),
        rate_bytes_per_sec: Some(100_000_000),
    }
}

/// A two-way exchange under faults: 0 and 1 stream to each other.
fn lossy_trace(seed: u64) -> (Vec<Delivery>, FabricStats) {
    let (fabric, clock) = fabric(lossy_profile(), seed);
    let mut eps = [fabric.endpoint(), fabric.endpoint()];
    let mut sends = stream(300, 0, 700, 200);
    sends.extend((0..300).map(|i| Send {
        at: t(350 + u64::from(i) * 700),
        from: 1,
        to: 0,
        bytes: numbered(1_000 + i, 100),
    }));
    let trace = run(&fabric, &clock, &mut eps, sends);
    (trace, fabric.stats())
}

#[test]
fn same_seed_same_trace_different_seed_different_trace() {
    let (first, first_stats) = lossy_trace(42);
    let (second, second_stats) = lossy_trace(42);
    assert_eq!(first, second);
    assert_eq!(first_stats, second_stats);
    let s = first_stats;
    assert!(
        s.dropped > 0 && s.duplicated > 0 && s.reordered > 0 && s.corrupted > 0,
        "{s}"
    );
    assert_eq!(s.delivered as usize, first.len());
    assert_conserved(&s, 0);

    let (other, _) = lossy_trace(43);
    assert_ne!(first, other);
}

#[test]
fn the_seed_of_a_fault_spec_drives_the_fabric() {
    let spec: FaultSpec = "loss=0.2,dup=0.2,reorder=0.2,delay=3us,jitter=1us,seed=77"
        .parse()
        .unwrap();
    let make = || {
        let (fabric, clock) = fabric(spec.profile.clone(), spec.seed);
        let mut eps = [fabric.endpoint(), fabric.endpoint()];
        run(&fabric, &clock, &mut eps, stream(100, 0, US, 8))
    };
    assert_eq!(make(), make());
}

#[test]
fn per_direction_override_applies_to_one_direction_only() {
    let (fabric, clock) = fabric(FaultProfile::default(), 0);
    let mut eps = [fabric.endpoint(), fabric.endpoint()];
    fabric.set_faults(
        0,
        1,
        FaultProfile {
            loss: 1.0,
            ..FaultProfile::default()
        },
    );
    let mut sends = stream(20, 0, US, 8);
    sends.extend((0..20).map(|i| Send {
        at: t(u64::from(i) * US),
        from: 1,
        to: 0,
        bytes: numbered(100 + i, 8),
    }));
    let trace = run(&fabric, &clock, &mut eps, sends);
    assert_eq!(trace.len(), 20);
    assert!(trace.iter().all(|d| d.from == 1 && d.to == 0));
    assert_eq!(fabric.stats().dropped, 20);

    // Clearing the override restores the default (perfect) profile.
    fabric.clear_faults(0, 1);
    let trace = run(
        &fabric,
        &clock,
        &mut eps,
        stream(5, clock.now().as_nanos(), US, 8),
    );
    assert_eq!(trace.len(), 5);

    // A new default applies where there is no override.
    fabric.set_faults(1, 0, FaultProfile::default());
    fabric.set_default_faults(FaultProfile {
        loss: 1.0,
        ..FaultProfile::default()
    });
    let now = clock.now().as_nanos();
    let mut sends = stream(5, now, US, 8);
    sends.extend((0..5).map(|i| Send {
        at: t(now + u64::from(i) * US),
        from: 1,
        to: 0,
        bytes: numbered(200 + i, 8),
    }));
    let trace = run(&fabric, &clock, &mut eps, sends);
    assert_eq!(trace.len(), 5);
    assert!(trace.iter().all(|d| d.from == 1));
}

#[test]
fn unknown_and_shut_down_destinations_are_counted() {
    let (fabric, _) = fabric(FaultProfile::default(), 0);
    let mut a = fabric.endpoint();
    let mut b = fabric.endpoint();
    send(&mut a, 99, &[vec![1], vec![2]]);
    send(&mut a, u32::MAX, &[vec![3]]);
    let s = fabric.stats();
    assert_eq!((s.offered, s.dropped, s.unroutable), (3, 3, 3));

    // Frames queued for an endpoint that shuts down are dropped with it.
    send(&mut a, 1, &[vec![4], vec![5]]);
    assert_eq!(fabric.in_flight(), 2);
    b.shutdown();
    assert_eq!(fabric.in_flight(), 0);
    let s = fabric.stats();
    assert_eq!((s.dropped, s.unroutable), (5, 3));
    assert!(matches!(
        b.rx_burst(1, &mut |_, _| {}),
        Err(MethodError::Other { .. })
    ));
    assert!(matches!(
        b.tx_burst(&mut |_| None),
        Err(MethodError::Other { .. })
    ));
    send(&mut a, 1, &[vec![6]]);
    let s = fabric.stats();
    assert_eq!((s.dropped, s.unroutable), (6, 4));

    // So are frames for an endpoint that was dropped.
    let c = fabric.endpoint();
    send(&mut a, c.address(), &[vec![7]]);
    drop(c);
    send(&mut a, 2, &[vec![8]]);
    let s = fabric.stats();
    assert_eq!((s.offered, s.dropped, s.unroutable), (8, 8, 5));
    assert_conserved(&s, fabric.in_flight());
    let shown = s.to_string();
    assert!(
        shown.contains("offered=8") && shown.contains("unroutable=5"),
        "{shown}"
    );
}

#[test]
fn buffers_are_recycled_in_steady_state() {
    let (fabric, _) = fabric(FaultProfile::default(), 0);
    let mut a = fabric.endpoint();
    let mut b = fabric.endpoint();
    let frame = vec![vec![7u8; 100]];
    for _ in 0..10 {
        send(&mut a, 1, &frame);
        recv(&mut b);
        send(&mut b, 0, &frame);
        recv(&mut a);
    }
    let warm = fabric.stats().buffers_allocated;
    for _ in 0..1000 {
        send(&mut a, 1, &frame);
        assert_eq!(recv(&mut b).len(), 1);
        send(&mut b, 0, &frame);
        assert_eq!(recv(&mut a).len(), 1);
    }
    assert_eq!(fabric.stats().buffers_allocated, warm);
    // One frame in flight, plus the buffer each endpoint lends to learn
    // that the core has nothing more to send.
    assert!(warm <= 3, "{warm} buffers for a ping-pong");

    // One-way streaming also settles.
    for _ in 0..10 {
        send(&mut a, 1, &vec![vec![1u8; 10]; 200]);
        recv(&mut b);
    }
    let warm = fabric.stats().buffers_allocated;
    for _ in 0..100 {
        send(&mut a, 1, &vec![vec![1u8; 10]; 200]);
        assert_eq!(recv(&mut b).len(), 200);
    }
    assert_eq!(fabric.stats().buffers_allocated, warm);
}

#[test]
fn fabric_clock_is_the_configured_clock() {
    let (fabric, clock) = fabric(FaultProfile::default(), 0);
    clock.advance(Duration::from_millis(3));
    assert_eq!(fabric.now(), t(3_000_000));
    assert_eq!(fabric.clock().now(), t(3_000_000));
    fabric.clock().as_virtual().unwrap().set(t(5_000_000));
    assert_eq!(clock.now(), t(5_000_000));
}

#[derive(Clone, Debug)]
enum Op {
    Send { from: usize, to: u32, len: usize },
    Advance(u64),
    Recv { at: usize, budget: usize },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0usize..3, 0u32..4, 0usize..64).prop_map(|(from, to, len)| Op::Send { from, to, len }),
        (0u64..20_000).prop_map(Op::Advance),
        (0usize..3, 0usize..5).prop_map(|(at, budget)| Op::Recv { at, budget }),
    ]
}

fn probability() -> impl Strategy<Value = f64> {
    prop_oneof![Just(0.0), Just(1.0), 0.0f64..=1.0]
}

proptest! {
    /// Under any profile and any calls: frames are conserved, nothing is
    /// delivered early, uncorrupted frames arrive intact, and no frame
    /// arrives more often than it was sent plus duplicated.
    #[test]
    fn any_run_conserves_frames(
        loss in probability(),
        duplicate in probability(),
        reorder in probability(),
        delay in 0u64..10_000,
        jitter in 0u64..10_000,
        rate in proptest::option::of(1_000u64..1_000_000_000),
        seed: u64,
        ops in proptest::collection::vec(op(), 0..200),
    ) {
        let profile = FaultProfile {
            loss,
            duplicate,
            reorder,
            corrupt: 0.0,
            delay: Duration::from_nanos(delay),
            jitter: Duration::from_nanos(jitter),
            rate_bytes_per_sec: rate,
        };
        let (fabric, clock) = fabric(profile, seed);
        let mut eps = [fabric.endpoint(), fabric.endpoint(), fabric.endpoint()];
        let mut sent_at = Vec::new();
        let mut received = Vec::new();
        for op in ops {
            match op {
                Op::Send { from, to, len } => {
                    let id = sent_at.len() as u32;
                    sent_at.push(clock.now());
                    send(&mut eps[from], to, &[numbered(id, len)]);
                }
                Op::Advance(ns) => clock.advance(Duration::from_nanos(ns)),
                Op::Recv { at, budget } => {
                    let n = eps[at]
                        .rx_burst(budget, &mut |_, bytes| received.push((bytes.to_vec(), clock.now())))
                        .unwrap();
                    prop_assert!(n <= budget);
                }
            }
            prop_assert_eq!(
                fabric.next_delivery().is_some(),
                fabric.in_flight() > 0
            );
            let s = fabric.stats();
            prop_assert_eq!(
                s.offered + s.duplicated,
                s.delivered + s.dropped + fabric.in_flight() as u64
            );
        }
        let s = fabric.stats();
        prop_assert_eq!(s.offered, sent_at.len() as u64);
        prop_assert_eq!(s.delivered, received.len() as u64);
        let mut copies = vec![0u32; sent_at.len()];
        for (bytes, at) in &received {
            let id = number(bytes) as usize;
            prop_assert_eq!(bytes, &numbered(id as u32, bytes.len()));
            prop_assert!(*at >= sent_at[id] + Duration::from_nanos(delay));
            copies[id] += 1;
            prop_assert!(copies[id] <= 2);
        }
        if duplicate == 0.0 {
            prop_assert!(copies.iter().all(|c| *c <= 1));
        }
    }
}
