//! Property tests of the whole protocol over the simulated fabric, in
//! virtual time: for random fault profiles (up to 30 % loss, reordering,
//! duplication, corruption, delay, jitter), several senders stream messages
//! of random sizes to one receiver whose application consumes slowly. Every
//! message must arrive exactly once, in order per sender, byte-identical;
//! every send must complete; memory must stay bounded; the run must end.

use bcl::core::{CongestionMode, SendError};
use bcl::sim::FaultProfile;
use bcl::{Error, SendEvent, SimCluster};
use proptest::prelude::*;
use proptest::test_runner::FileFailurePersistence;
use std::collections::VecDeque;
use std::time::Duration;

/// The bytes of message `k` from sender `s`: a header naming both, then a
/// pattern that depends on both.
fn message(s: usize, k: usize, len: usize) -> Vec<u8> {
    let mut m: Vec<u8> = (0..len)
        .map(|i| {
            (i as u8)
                .wrapping_mul(13)
                .wrapping_add((s * 7 + k * 3) as u8)
        })
        .collect();
    let tag = ((s as u32) << 16 | k as u32).to_le_bytes();
    let n = len.min(4);
    m[..n].copy_from_slice(&tag[..n]);
    m
}

/// One scenario.
#[derive(Clone, Debug)]
struct Scenario {
    faults: FaultProfile,
    seed: u64,
    /// Message sizes, per sender.
    sizes: Vec<Vec<usize>>,
    /// Receive ring blocks (256 B each); small rings force back-pressure.
    ring_blocks: u32,
    /// Virtual time the receiving application holds each message.
    hold: Duration,
    mtu: usize,
}

fn sizes() -> impl Strategy<Value = usize> {
    prop_oneof![
        4 => 0usize..64,
        3 => 64usize..1500,
        2 => 1500usize..6000,
        1 => 6000usize..=16 * 1024,
    ]
}

fn scenario() -> impl Strategy<Value = Scenario> {
    (
        (0.0..0.3f64, 0.0..0.3f64, 0.0..0.1f64, 0.0..0.05f64),
        (
            0u64..30,
            0u64..20,
            prop_oneof![3 => Just(None), 1 => (10_000_000u64..2_000_000_000).prop_map(Some)],
        ),
        any::<u64>(),
        proptest::collection::vec(proptest::collection::vec(sizes(), 1..30), 1..7),
        prop_oneof![Just(80u32), Just(200), Just(4096)],
        0u64..200,
        prop_oneof![Just(300usize), Just(1500), Just(9000)],
    )
        .prop_map(
            |(
                (loss, reorder, duplicate, corrupt),
                (delay_us, jitter_us, rate),
                seed,
                sizes,
                ring_blocks,
                hold_us,
                mtu,
            )| {
                Scenario {
                    faults: FaultProfile {
                        loss,
                        duplicate,
                        reorder,
                        corrupt,
                        delay: Duration::from_micros(delay_us),
                        jitter: Duration::from_micros(jitter_us),
                        rate_bytes_per_sec: rate,
                    },
                    seed,
                    sizes,
                    ring_blocks,
                    hold: Duration::from_micros(hold_us),
                    mtu,
                }
            },
        )
}

/// What a run produced, for comparing runs.
#[derive(Debug, PartialEq)]
struct Outcome {
    end_time_ns: u64,
    receiver_stats: bcl::PortStats,
    /// Messages the senders sent in bundles (several in one frame).
    messages_bundled: u64,
    /// DATA frames the senders sent (first sendings).
    data_frames_sent: u64,
    /// DATA frames the senders sent again.
    retransmits: u64,
    /// What the fabric did to the frames (faults injected).
    fabric: bcl::sim::FabricStats,
    /// Frames every endpoint dropped for a CRC32C mismatch (corruption
    /// caught, data and acknowledgements alike).
    bad_checksum: u64,
}

/// Runs a scenario to the end and checks every property on the way.
fn run(sc: &Scenario) -> Result<Outcome, TestCaseError> {
    run_with(sc, 64)
}

/// [`run`] with up to `max_outstanding` sends outstanding per sender (many
/// queued small messages form bundles).
fn run_with(sc: &Scenario, max_outstanding: usize) -> Result<Outcome, TestCaseError> {
    run_in_mode(sc, max_outstanding, CongestionMode::default())
}

/// [`run_with`] with every port's congestion control in `mode`.
fn run_in_mode(
    sc: &Scenario,
    max_outstanding: usize,
    mode: CongestionMode,
) -> Result<Outcome, TestCaseError> {
    let senders = sc.sizes.len();
    let receiver = senders;
    let mut c = SimCluster::new(senders + 1, sc.faults.clone(), sc.seed, sc.mtu, |i, cfg| {
        if i == receiver {
            cfg.ring_blocks = sc.ring_blocks;
        }
        // Small MTUs need many frames for the largest message; keep the
        // eager limit within the window.
        cfg.eager_limit = 16 * 1024;
        cfg.max_outstanding_sends = max_outstanding;
        cfg.congestion.mode = mode;
    })
    .map_err(|e| TestCaseError::fail(e.to_string()))?;
    let rx_addr = SimCluster::addr(receiver);

    let mut next_to_send = vec![0usize; senders];
    let mut completed = vec![0usize; senders];
    let mut next_expected = vec![0usize; senders];
    let mut held: VecDeque<(bcl::Time, bcl::Delivery)> = VecDeque::new();
    let total: usize = sc.sizes.iter().map(Vec::len).sum();
    let mut delivered = 0;
    let mut steps = 0u64;

    loop {
        // Senders offer what the port accepts.
        for s in 0..senders {
            while next_to_send[s] < sc.sizes[s].len() {
                let k = next_to_send[s];
                let m = message(s, k, sc.sizes[s][k]);
                match c.endpoints[s].send(rx_addr, &m) {
                    Ok(_) => next_to_send[s] += 1,
                    Err(Error::Send(SendError::WouldBlock(_))) => break,
                    Err(e) => return Err(TestCaseError::fail(format!("send: {e}"))),
                }
            }
            while let Some(ev) = c.endpoints[s].poll_send_event() {
                match ev {
                    SendEvent::Complete(_) => completed[s] += 1,
                    SendEvent::Failed(_, f) => {
                        return Err(TestCaseError::fail(format!("sender {s}: {f}")))
                    }
                }
            }
            // Bounded memory: never more outstanding than configured.
            prop_assert!(c.endpoints[s].port().outstanding_sends() <= max_outstanding);
        }
        // The receiving application takes messages, checks them, and gives
        // each back after holding it a while.
        let now = c.now();
        while let Some(d) = c.endpoints[receiver].poll_delivery() {
            let s = (d.from.node.0 - 1) as usize;
            prop_assert!(s < senders, "delivery from unknown {}", d.from);
            let k = next_expected[s];
            prop_assert!(
                k < sc.sizes[s].len(),
                "sender {s}: more deliveries than sends"
            );
            let got = c.endpoints[receiver].message(&d).expect("live delivery");
            prop_assert_eq!(
                got,
                &message(s, k, sc.sizes[s][k])[..],
                "sender {} message {}",
                s,
                k
            );
            next_expected[s] += 1;
            delivered += 1;
            held.push_back((now + sc.hold, d));
        }
        while held.front().is_some_and(|(t, _)| *t <= now) {
            let (_, d) = held.pop_front().expect("front exists");
            c.endpoints[receiver]
                .release(d)
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
        }
        let all_done =
            delivered == total && completed.iter().zip(&sc.sizes).all(|(c, s)| *c == s.len());
        if all_done && held.is_empty() {
            break;
        }
        steps += 1;
        // Healthy runs end within a few virtual seconds.
        if steps > 2_000_000 || c.now().as_nanos() > 120_000_000_000 {
            let mut state = String::new();
            for (i, ep) in c.endpoints.iter().enumerate() {
                state += &format!("\n  endpoint {i}: {}", ep.port().debug_summary());
                for peer in ep.port().peers().collect::<Vec<_>>() {
                    state += &format!(
                        "\n  endpoint {i}: {}",
                        ep.port().peer_debug(peer).unwrap_or_default()
                    );
                }
            }
            prop_assert!(
                false,
                "run did not end: {delivered}/{total} delivered at {:?};{state}",
                c.now()
            );
        }
        let more = c.step().map_err(|e| TestCaseError::fail(e.to_string()))?;
        if !more && held.is_empty() && delivered != total {
            // Nothing in flight, no timer, nothing held: anything missing now
            // would never come.
            let mut state = String::new();
            for (i, ep) in c.endpoints.iter().enumerate() {
                state += &format!("\n  endpoint {i}: {}", ep.port().debug_summary());
                for peer in ep.port().peers().collect::<Vec<_>>() {
                    state += &format!("\n  endpoint {i}: {}", ep.port().debug_summary());
                    state += &format!(
                        "\n  endpoint {i}: {}",
                        ep.port().peer_debug(peer).unwrap_or_default()
                    );
                }
            }
            prop_assert_eq!(delivered, total, "run stalled at {:?};{}", c.now(), state);
        }
        if !more {
            if let Some((t, _)) = held.front() {
                c.clock.set(*t);
            }
        }
    }

    // Let the last acknowledgements and timers settle: then nothing may be
    // left moving (no traffic without a reason).
    let mut settle_steps = 0u64;
    while c.step().map_err(|e| TestCaseError::fail(e.to_string()))? {
        settle_steps += 1;
        if settle_steps > 1_000_000 {
            let frames = c.fabric.stats();
            let mut state = String::new();
            for (i, ep) in c.endpoints.iter().enumerate() {
                state += &format!(
                    "\n  endpoint {i}: {} {:?}",
                    ep.port().debug_summary(),
                    ep.port().stats()
                );
            }
            prop_assert!(
                false,
                "traffic does not stop after the run: {frames}{state}"
            );
        }
    }
    let rx = c.endpoints[receiver].port();
    prop_assert_eq!(rx.ring_free_blocks(), sc.ring_blocks, "ring fully returned");
    for (i, ep) in c.endpoints.iter().enumerate() {
        prop_assert_eq!(
            ep.port().outstanding_sends(),
            0,
            "endpoint {} still has sends",
            i
        );
        prop_assert_eq!(
            ep.port().active_windows(),
            (0, 0),
            "endpoint {} holds windows when idle",
            i
        );
    }
    prop_assert_eq!(c.fabric.in_flight(), 0);
    let senders_stats = || c.endpoints[..senders].iter().map(|e| *e.port().stats());
    Ok(Outcome {
        end_time_ns: c.now().as_nanos(),
        receiver_stats: *rx.stats(),
        messages_bundled: senders_stats().map(|s| s.messages_bundled).sum(),
        data_frames_sent: senders_stats().map(|s| s.data_frames_sent).sum(),
        retransmits: senders_stats().map(|s| s.retransmits).sum(),
        fabric: c.fabric.stats(),
        bad_checksum: c
            .endpoints
            .iter()
            .map(|e| e.port().stats().bad_frames.bad_checksum)
            .sum(),
    })
}

/// `default_cases` cases (PROPTEST_CASES overrides), failures kept in the
/// regressions file next to this test.
fn proptest_config(default_cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases: std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default_cases),
        max_shrink_iters: 200,
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/sim_properties.proptest-regressions"
        )))),
        ..ProptestConfig::default()
    }
}

/// Many small messages per sender, with room to queue them: bundles form.
fn small_scenario() -> impl Strategy<Value = Scenario> {
    (
        scenario(),
        proptest::collection::vec(proptest::collection::vec(0usize..64, 40..300), 1..4),
    )
        .prop_map(|(sc, sizes)| Scenario { sizes, ..sc })
}

proptest! {
    #![proptest_config(proptest_config(96))]

    #[test]
    fn every_message_arrives_exactly_once_in_order_and_intact(sc in scenario()) {
        run(&sc)?;
    }
}

proptest! {
    #![proptest_config(proptest_config(48))]

    /// Many small messages queued at once travel in bundles, and under every
    /// fault profile each still arrives exactly once, in order and intact.
    #[test]
    fn bundled_small_messages_arrive_exactly_once_in_order_and_intact(sc in small_scenario()) {
        let out = run_with(&sc, 512)?;
        prop_assert!(out.messages_bundled > 0, "bundles formed: {:?}", out);
        let total: usize = sc.sizes.iter().map(Vec::len).sum();
        prop_assert!(
            out.data_frames_sent < total as u64,
            "fewer frames than messages: {} frames for {} messages",
            out.data_frames_sent,
            total
        );
    }
}

/// A wire that reorders and loses nothing: up to 30 % of the frames held
/// back by one to three one-way delays (so later frames overtake them),
/// one-way delays of 10 to 100 µs. One to three senders stream about 8800
/// frames each (1 to 6 KB messages) into a ring that never fills: long
/// enough that the first round trips, before the sender has seen how much
/// the path reorders (up to about a hundred frames resent), are not most
/// of the run. No rate
/// limit: a full window queued behind a slow link stretches the round trip
/// past the retransmission timeout, which is congestion, not reordering.
fn reorder_only_scenario() -> impl Strategy<Value = Scenario> {
    (0.01..0.3f64, 10u64..100, any::<u64>(), 1usize..4).prop_map(
        |(reorder, delay_us, seed, senders)| Scenario {
            faults: FaultProfile {
                reorder,
                delay: Duration::from_micros(delay_us),
                ..FaultProfile::default()
            },
            seed,
            sizes: (0..senders)
                .map(|s| {
                    (0..3000)
                        .map(|k| 1000 + (k * 977 + s * 31) % 5000)
                        .collect()
                })
                .collect(),
            ring_blocks: 1 << 16,
            hold: Duration::ZERO,
            mtu: 1500,
        },
    )
}

/// Like [`reorder_only_scenario`], with loss instead of reordering: 1 to
/// 5 % of the frames lost, in both directions.
fn loss_only_scenario() -> impl Strategy<Value = Scenario> {
    (reorder_only_scenario(), 0.01..0.05f64).prop_map(|(sc, loss)| Scenario {
        faults: FaultProfile {
            reorder: 0.0,
            loss,
            ..sc.faults
        },
        ..sc
    })
}

proptest! {
    #![proptest_config(proptest_config(16))]

    /// Frames overtaken are not taken for lost: at most 2 % of the data
    /// frames are resent (a few while the reordering window adapts).
    #[test]
    fn reordering_alone_resends_at_most_two_percent(sc in reorder_only_scenario()) {
        let out = run(&sc)?;
        prop_assert!(out.fabric.reordered > 0, "the wire reordered: {}", out.fabric);
        prop_assert!(
            out.retransmits * 50 <= out.data_frames_sent,
            "{} of {} data frames resent ({:.2} %) with only reordering: {}",
            out.retransmits,
            out.data_frames_sent,
            100.0 * out.retransmits as f64 / out.data_frames_sent as f64,
            out.fabric
        );
    }

    /// Loss is repaired by resending about what was lost, with congestion
    /// control off, on or auto: at most a quarter more frames (plus a few)
    /// than the wire dropped, data and acknowledgements alike, and at most
    /// twice the loss rate of the data frames. (Resends that are lost again
    /// count twice; a lost acknowledgement with nothing after it costs a
    /// timeout, whose probes the receiver may hold.) A timeout armed before
    /// the oldest frame was resent, firing while the resend was on its way,
    /// or a probe of a newest frame sent less than a round trip ago, which
    /// made the frames before it look overtaken and widened the reordering
    /// window past the timeout, resent a third to twice as much again.
    #[test]
    fn loss_alone_resends_about_what_was_lost_in_every_mode(sc in loss_only_scenario()) {
        for mode in [CongestionMode::Off, CongestionMode::Auto, CongestionMode::On] {
            let out = run_in_mode(&sc, 64, mode)?;
            let dropped = out.fabric.dropped;
            prop_assert!(
                out.retransmits <= dropped + dropped / 4 + 8,
                "mode {}: {} data frames resent, {} frames dropped: {}",
                mode.name(),
                out.retransmits,
                dropped,
                out.fabric
            );
            let bound = 2.0 * sc.faults.loss * out.data_frames_sent as f64;
            prop_assert!(
                out.retransmits as f64 <= bound,
                "mode {}: {} of {} data frames resent at {:.1} % loss (bound {bound:.0}): {}",
                mode.name(),
                out.retransmits,
                out.data_frames_sent,
                100.0 * sc.faults.loss,
                out.fabric
            );
        }
    }

}

/// 30 % loss, 10 % duplicates, 30 % reordering, 5 % corruption, delay and
/// jitter.
fn harsh_faults() -> FaultProfile {
    FaultProfile {
        loss: 0.3,
        duplicate: 0.1,
        reorder: 0.3,
        corrupt: 0.05,
        delay: Duration::from_micros(10),
        jitter: Duration::from_micros(5),
        rate_bytes_per_sec: None,
    }
}

/// Bundles under harsh faults and a small ring: they form, and every message
/// is delivered exactly once, in order.
#[test]
fn harsh_faults_with_bundles_are_all_repaired() {
    let sc = Scenario {
        faults: harsh_faults(),
        seed: 43,
        sizes: (0..3)
            .map(|s| (0..400).map(|k| (k * 7 + s * 13) % 48).collect())
            .collect(),
        ring_blocks: 80,
        hold: Duration::from_micros(50),
        mtu: 1500,
    };
    let out = run_with(&sc, 512).unwrap();
    let st = out.receiver_stats;
    assert_eq!(st.messages_delivered, 1200);
    assert!(st.bundles_received > 0, "{st:?}");
    assert!(
        out.data_frames_sent * 4 < 1200,
        "bundles carry several messages each: {} frames",
        out.data_frames_sent
    );
    assert!(st.duplicates > 0, "duplicates were dropped: {st:?}");
    assert!(st.ring_full_drops > 0, "the small ring pushed back: {st:?}");
    assert_harsh_faults_injected_and_caught(&out);
}

/// Every fault of [`harsh_faults`] happened on the fabric, and the
/// corrupted frames were caught by the CRC32C.
fn assert_harsh_faults_injected_and_caught(out: &Outcome) {
    let f = out.fabric;
    assert!(
        f.dropped > 0 && f.duplicated > 0 && f.reordered > 0 && f.corrupted > 0,
        "every fault was injected: {f}"
    );
    assert!(
        out.bad_checksum > 0,
        "{} frames corrupted, none caught by the CRC32C",
        f.corrupted
    );
}

/// A fixed, harsh scenario: 30 % loss plus every other fault, four senders,
/// a small ring. Shows that faults really happened and were repaired.
#[test]
fn harsh_faults_are_all_repaired() {
    let sc = Scenario {
        faults: harsh_faults(),
        seed: 42,
        sizes: (0..4)
            .map(|s| (0..60).map(|k| (k * 977 + s * 31) % 16_000).collect())
            .collect(),
        ring_blocks: 80,
        hold: Duration::from_micros(50),
        mtu: 1500,
    };
    let out = run(&sc).unwrap();
    let st = out.receiver_stats;
    assert_eq!(st.messages_delivered, 240);
    assert!(
        st.bad_frames.bad_checksum > 0,
        "corruption was caught: {st:?}"
    );
    assert!(st.duplicates > 0, "duplicates were dropped: {st:?}");
    assert!(st.ring_full_drops > 0, "the small ring pushed back: {st:?}");
    assert_harsh_faults_injected_and_caught(&out);
}

/// The same seed gives the same run, so a failure can be replayed.
#[test]
fn runs_are_deterministic() {
    let sc = Scenario {
        faults: FaultProfile {
            loss: 0.2,
            duplicate: 0.05,
            reorder: 0.2,
            corrupt: 0.02,
            delay: Duration::from_micros(5),
            jitter: Duration::from_micros(5),
            rate_bytes_per_sec: None,
        },
        seed: 7,
        sizes: vec![vec![100, 5000, 16_000, 3], vec![1, 2, 3000]],
        ring_blocks: 200,
        hold: Duration::from_micros(20),
        mtu: 1500,
    };
    let a = run(&sc).unwrap();
    let b = run(&sc).unwrap();
    assert_eq!(a, b);
}

/// Regression: one sender, a small ring and jumbo frames once stalled with
/// nothing in flight and no timer (found by the property test above).
#[test]
fn small_ring_with_jumbo_frames_does_not_stall() {
    let sc = Scenario {
        faults: FaultProfile {
            loss: 0.15550700311440063,
            duplicate: 0.05850369931970061,
            reorder: 0.15618413538980283,
            corrupt: 0.003831827976790401,
            delay: Duration::ZERO,
            jitter: Duration::from_micros(13),
            rate_bytes_per_sec: None,
        },
        seed: 14168157411105130237,
        sizes: vec![vec![0, 0, 0, 4865, 3073, 3841, 3585, 1537, 1818]],
        ring_blocks: 80,
        hold: Duration::from_micros(198),
        mtu: 9000,
    };
    run(&sc).unwrap();
}

/// Regression: six senders, a ring of 80 blocks and 300-byte frames (a 16 KiB
/// message needs 64 of the 80 blocks) once livelocked (found by the property
/// test above).
#[test]
fn six_senders_into_a_tiny_ring_do_not_livelock() {
    let sc = Scenario {
        faults: FaultProfile {
            loss: 0.0,
            duplicate: 0.04209567238880227,
            reorder: 0.0,
            corrupt: 0.013766480419226476,
            delay: Duration::from_micros(1),
            jitter: Duration::from_micros(1),
            rate_bytes_per_sec: None,
        },
        seed: 5827402436435842654,
        sizes: vec![
            vec![1025, 0, 4013, 0, 0, 0, 945, 719, 1084, 60, 3667, 602, 14218],
            vec![
                47, 657, 1421, 58, 419, 785, 2316, 996, 14, 726, 60, 2395, 54, 2507, 36, 1380,
            ],
            vec![437, 15552, 15845, 4723, 1289, 8177, 4607, 3888],
            vec![
                1030, 847, 310, 20, 4819, 850, 1490, 50, 11, 46, 1225, 714, 2919, 16187, 4503,
                4195, 273, 31, 125, 6319, 1425, 1283, 9, 891, 1108, 869, 12, 44,
            ],
            vec![
                5351, 3815, 203, 45, 930, 1794, 5267, 550, 327, 13972, 825, 13, 2149,
            ],
            vec![
                38, 708, 388, 38, 2970, 10, 46, 25, 5049, 5713, 11684, 47, 1124, 1966, 45, 24, 972,
                1973, 141,
            ],
        ],
        ring_blocks: 80,
        hold: Duration::from_micros(14),
        mtu: 300,
    };
    run(&sc).unwrap();
}

/// Regression: after a run through a slow (10 MB/s) wire with 300-byte frames,
/// frames were still in flight when the test stopped waiting for them.
#[test]
fn traffic_stops_after_a_rate_limited_run() {
    let sc = Scenario {
        faults: FaultProfile {
            loss: 0.05035357099240076,
            duplicate: 0.0,
            reorder: 0.0978296404301544,
            corrupt: 0.0,
            delay: Duration::ZERO,
            jitter: Duration::from_micros(1),
            rate_bytes_per_sec: Some(10_000_000),
        },
        seed: 1542721964014056628,
        sizes: vec![
            vec![709, 3915, 10836, 13217, 2597],
            vec![
                682, 856, 1177, 6427, 28, 1020, 45, 58, 1083, 12, 1226, 3917, 790, 57, 162, 800,
                586, 605, 925, 4123, 762, 5563,
            ],
        ],
        ring_blocks: 80,
        hold: Duration::from_micros(65),
        mtu: 300,
    };
    run(&sc).unwrap();
}
