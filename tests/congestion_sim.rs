//! Congestion control over the simulated fabric, in virtual time: senders
//! stream into one receiver behind a bottleneck (a shared link with a
//! finite queue that drops at the tail, as a switch port does), and every
//! message must arrive exactly once, in order and intact, the link must be
//! used, few frames resent, and several senders must share it fairly.

use bcl::core::{CongestionMode, SendError};
use bcl::sim::{Bottleneck, FaultProfile};
use bcl::{Error, SendEvent, SimCluster};
use proptest::prelude::*;
use proptest::test_runner::FileFailurePersistence;
use std::time::Duration;

/// Message `k` of sender `s`: its sender and number, then a byte of its
/// own throughout (cheap to make and compare in a test build, where runs
/// carry hundreds of megabytes).
fn message(s: usize, k: usize, len: usize) -> Vec<u8> {
    let mut m = vec![(s * 5 + k * 3) as u8; len];
    m[..8].copy_from_slice(&((s as u64) << 32 | k as u64).to_le_bytes());
    m
}

/// One run: `senders` stream `messages` messages of `size` bytes each into
/// the last endpoint, behind `neck`; `delay` one way on every link.
#[derive(Clone, Debug)]
struct Run {
    senders: usize,
    messages: usize,
    size: usize,
    neck: Option<Bottleneck>,
    delay: Duration,
    reorder: f64,
    /// Sender `s` starts `s` times this late, when the others keep a queue.
    stagger: Duration,
    congestion: CongestionMode,
    /// Congestion control's target queueing delay (None: the default).
    target: Option<Duration>,
}

/// What a run measured.
#[derive(Debug)]
struct Outcome {
    /// Payload bytes per second through the bottleneck, over the whole run.
    goodput: f64,
    /// Data frames resent over data frames sent, all senders.
    resent: f64,
    /// Jain's fairness index over the bytes each sender delivered in the
    /// second half of the time all were sending (from the last start until
    /// the first one finished): when the shares have converged.
    jain: f64,
    /// The least share of any sender in that half (1/n when fair).
    least_share: f64,
    queue_drops: u64,
    /// The senders' port counters.
    stats: Vec<bcl::PortStats>,
}

fn jain(x: &[f64]) -> f64 {
    let sum: f64 = x.iter().sum();
    let squares: f64 = x.iter().map(|v| v * v).sum();
    if squares == 0.0 {
        return 0.0;
    }
    sum * sum / (x.len() as f64 * squares)
}

fn run(r: &Run) -> Result<Outcome, TestCaseError> {
    let receiver = r.senders;
    let faults = FaultProfile {
        delay: r.delay,
        reorder: r.reorder,
        ..FaultProfile::default()
    };
    let mut c = SimCluster::new(r.senders + 1, faults, 7, 1500, |_, cfg| {
        cfg.ring_blocks = 1 << 16;
        cfg.congestion.mode = r.congestion;
        if let Some(t) = r.target {
            cfg.congestion.target_delay = t;
            cfg.congestion.flow_scaling = t;
        }
    })
    .map_err(|e| TestCaseError::fail(e.to_string()))?;
    c.fabric.set_bottleneck(receiver as u32, r.neck);
    let rx_addr = SimCluster::addr(receiver);
    let mut next_to_send = vec![0usize; r.senders];
    let mut completed = vec![0usize; r.senders];
    let mut next_expected = vec![0usize; r.senders];
    let mut delivered_bytes = vec![0f64; r.senders];
    let mut at_first_done: Option<(u64, Vec<f64>)> = None;
    // Delivered bytes per sender once all have started, sampled as they
    // grow (for the halfway point).
    let mut history: Vec<(u64, Vec<f64>)> = Vec::new();
    let start = c.now();
    let last_start = start + r.stagger * (r.senders as u32 - 1);
    loop {
        for s in 0..r.senders {
            let started = c.now() >= start + r.stagger * s as u32;
            while started && next_to_send[s] < r.messages {
                let k = next_to_send[s];
                match c.endpoints[s].send(rx_addr, &message(s, k, r.size)) {
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
        }
        while let Some(d) = c.endpoints[receiver].poll_delivery() {
            let s = (d.from.node.0 - 1) as usize;
            prop_assert!(s < r.senders, "delivery from unknown {}", d.from);
            let k = next_expected[s];
            prop_assert!(k < r.messages, "sender {s}: more deliveries than sends");
            let got = c.endpoints[receiver].message(&d).expect("live delivery");
            prop_assert!(
                got == &message(s, k, r.size)[..],
                "sender {s} message {k} damaged or out of order"
            );
            next_expected[s] += 1;
            delivered_bytes[s] += r.size as f64;
            c.endpoints[receiver]
                .release(d)
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
        }
        if at_first_done.is_none() && c.now() >= last_start {
            let now = c.now().as_nanos();
            if history
                .last()
                .is_none_or(|(_, last)| *last != delivered_bytes)
            {
                history.push((now, delivered_bytes.clone()));
            }
            if next_expected.contains(&r.messages) {
                at_first_done = Some((now, delivered_bytes.clone()));
            }
        }
        if completed.iter().all(|&n| n == r.messages)
            && next_expected.iter().all(|&n| n == r.messages)
        {
            break;
        }
        prop_assert!(
            c.now().as_nanos() < 60_000_000_000,
            "not done after 60 virtual seconds: delivered {:?} of {}",
            next_expected,
            r.messages
        );
        c.step().map_err(|e| TestCaseError::fail(e.to_string()))?;
    }
    let seconds = c.now().saturating_since(start).as_secs_f64();
    let total: f64 = delivered_bytes.iter().sum();
    let (mut data, mut resent) = (0u64, 0u64);
    for ep in &c.endpoints[..r.senders] {
        data += ep.port().stats().data_frames_sent;
        resent += ep.port().stats().retransmits;
    }
    let (end_time, end) = at_first_done.unwrap_or((0, vec![0.0; r.senders]));
    let middle = (last_start.as_nanos() + end_time) / 2;
    let half = history
        .iter()
        .find(|(t, _)| *t >= middle)
        .map(|(_, v)| v.clone())
        .unwrap_or_else(|| vec![0.0; r.senders]);
    let shares: Vec<f64> = end.iter().zip(&half).map(|(e, h)| e - h).collect();
    let sum: f64 = shares.iter().sum();
    Ok(Outcome {
        goodput: total / seconds,
        resent: resent as f64 / data.max(1) as f64,
        jain: jain(&shares),
        least_share: shares.iter().cloned().fold(f64::MAX, f64::min) / sum.max(1.0),
        queue_drops: c.fabric.stats().queue_drops,
        stats: c.endpoints[..r.senders]
            .iter()
            .map(|e| *e.port().stats())
            .collect(),
    })
}

fn config(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases: std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(cases),
        max_shrink_iters: 20,
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/congestion_sim.proptest-regressions"
        )))),
        ..ProptestConfig::default()
    }
}

/// A bottleneck of 100 Mbit/s to 10 Gbit/s whose queue takes 250 µs to
/// 2 ms to drain (at least the delay congestion control aims at: 100 µs
/// plus up to 100 µs for small windows; a shallower queue needs a smaller
/// `target_delay`, see `a_shallow_queue_needs_a_smaller_target`), one-way
/// delays of 2 to 50 µs.
fn neck() -> impl Strategy<Value = (Bottleneck, Duration)> {
    (12_500_000u64..1_250_000_000, 250u64..2000, 2u64..50).prop_map(|(rate, queue_us, delay_us)| {
        (
            Bottleneck {
                rate_bytes_per_sec: rate,
                queue_bytes: (rate * queue_us / 1_000_000).max(16 * 1024),
            },
            Duration::from_micros(delay_us),
        )
    })
}

/// An incast of `senders` into one receiver behind `neck` (its queue at
/// least two smallest windows per sender: a shallower one overflows
/// whatever the senders do), sender `s` starting `s × stagger_ms` late,
/// with enough messages for the first sender, which has the link to itself
/// until the second starts, to send 150 ms after the last start.
fn incast(
    neck: Bottleneck,
    delay: Duration,
    senders: usize,
    stagger_ms: u64,
    congestion: CongestionMode,
) -> Run {
    let neck = Bottleneck {
        queue_bytes: neck.queue_bytes.max(senders as u64 * 4 * 1500),
        ..neck
    };
    let stagger = Duration::from_millis(stagger_ms);
    let rate = neck.rate_bytes_per_sec as f64;
    let head_start = (stagger * (senders as u32 - 1)).as_secs_f64();
    let messages = ((rate * (head_start + 0.15 / senders as f64) / 8192.0) as usize).max(200);
    Run {
        senders,
        messages,
        size: 8192,
        neck: Some(neck),
        delay,
        reorder: 0.0,
        stagger,
        congestion,
        target: None,
    }
}

proptest! {
    #![proptest_config(config(8))]

    /// One sender behind a bottleneck uses it (at least 3/4 of the link over
    /// a run that includes slow start) and resends at most 5 % of its
    /// frames, where the fixed window alone overflows the queue again and
    /// again.
    #[test]
    fn one_sender_fills_a_bottleneck_and_resends_at_most_five_percent((neck, delay) in neck()) {
        let r = Run { senders: 1, messages: 800, size: 8192, neck: Some(neck), delay, reorder: 0.0, stagger: Duration::ZERO, congestion: CongestionMode::On, target: None };
        let out = run(&r)?;
        prop_assert!(out.resent <= 0.05, "{:.1} % resent: {out:?} ({r:?})", out.resent * 100.0);
        let link = neck.rate_bytes_per_sec as f64;
        // Slow start and the last window's drain are part of the run.
        prop_assert!(out.goodput >= 0.75 * link, "goodput {:.0} of {link:.0} B/s: {out:?} ({r:?})", out.goodput);
    }

    /// Several senders into one receiver (the shape of gather, reduce and
    /// all-to-all), starting together or one after another while the
    /// others keep a queue: every message arrives exactly once and in
    /// order, at most 5 % of the data frames are resent or dropped at the
    /// queue, and over the second half of the time all of them send the
    /// shares converge (Jain's index at least 0.6; measured over 1,200
    /// cases: 0.99 in the median, 0.94 at the 5th percentile, 0.88 at the
    /// 1st, 0.69 at worst) and
    /// nobody starves (each gets at least a
    /// third of a fair share). The run lasts 150 ms of virtual time after
    /// the last start: some fifteen base-round-trip epochs, whose probes
    /// undo the latecomer bias of delay signals. The queue holds at least
    /// two smallest windows per sender: a shallower one overflows whatever
    /// the senders do.
    #[test]
    fn incast_converges_to_fair_shares_without_resending(
        (neck, delay) in neck(),
        senders in 2usize..6,
        stagger_ms in prop_oneof![Just(0u64), 1u64..20],
    ) {
        let r = incast(neck, delay, senders, stagger_ms, CongestionMode::On);
        let out = run(&r)?;
        println!(
            "{senders} senders, {stagger_ms} ms apart: Jain {:.3}, least share {:.3}, resent {:.4}",
            out.jain, out.least_share, out.resent
        );
        let data: u64 = out.stats.iter().map(|s| s.data_frames_sent).sum();
        prop_assert!(
            out.queue_drops * 20 <= data,
            "{} of {data} data frames dropped at the queue: {out:?} ({r:?})",
            out.queue_drops
        );
        prop_assert!(out.resent <= 0.05, "{:.1} % resent: {out:?} ({r:?})", out.resent * 100.0);
        prop_assert!(out.jain >= 0.6, "Jain {:.3}: {out:?} ({r:?})", out.jain);
        prop_assert!(
            out.least_share * 3.0 * senders as f64 >= 1.0,
            "least share {:.3}: {out:?} ({r:?})",
            out.least_share
        );
    }

    /// The same incasts in mode auto: every sender starts
    /// dormant (slow start up to the fixed window, whatever the delay) and
    /// wakes at its first frame judged lost, or when the receiver reports
    /// frames missing (`CONGESTED`). The first overflow costs resends, and
    /// then the shares converge as with control from the start. Measured
    /// over 900 random cases of this shape (three seeds of 300, a test not
    /// kept): Jain 1.00 in the median, 0.94–0.95 at the 5th percentile,
    /// 0.83 at worst; least share 0.45 of a fair one at worst; resent
    /// 0.03 % in the median, 1.3–1.7 % at the 95th percentile, 4.4 % at
    /// worst; goodput at least 0.93 of the link. Control from the start
    /// (`on`), 600 of the cases: Jain 0.94 at the 5th percentile, 0.78 at
    /// worst, resent 4.0 % at worst. Without control (`off`): Jain
    /// 0.75–0.77 at the 5th percentile, resent 4 % in the median and up to
    /// 590 %, goodput down to 0.27 of the link.
    #[test]
    fn incast_in_auto_mode_wakes_every_sender_and_converges(
        (neck, delay) in neck(),
        senders in 2usize..6,
        stagger_ms in prop_oneof![Just(0u64), 1u64..20],
    ) {
        let r = incast(neck, delay, senders, stagger_ms, CongestionMode::Auto);
        let rate = r.neck.map_or(0.0, |n| n.rate_bytes_per_sec as f64);
        let out = run(&r)?;
        println!(
            "auto: {senders} senders, {stagger_ms} ms apart: Jain {:.3}, least share {:.3}, resent {:.4}, goodput {:.3}",
            out.jain, out.least_share, out.resent, out.goodput / rate
        );
        prop_assert!(out.resent <= 0.10, "{:.1} % resent: {out:?} ({r:?})", out.resent * 100.0);
        prop_assert!(out.goodput >= 0.85 * rate, "goodput {:.3} of the link: {out:?} ({r:?})", out.goodput / rate);
        prop_assert!(out.jain >= 0.6, "Jain {:.3}: {out:?} ({r:?})", out.jain);
        prop_assert!(
            out.least_share * 3.0 * senders as f64 >= 1.0,
            "least share {:.3}: {out:?} ({r:?})",
            out.least_share
        );
    }
}

/// A queue that drains in 60 µs never shows the default target of
/// queueing delay; a target below that (here 20 µs) keeps it from
/// overflowing again.
#[test]
fn a_shallow_queue_needs_a_smaller_target() {
    let neck = Bottleneck {
        rate_bytes_per_sec: 1_143_293_442,
        queue_bytes: 67_584,
    };
    let r = Run {
        senders: 1,
        messages: 800,
        size: 8192,
        neck: Some(neck),
        delay: Duration::from_micros(29),
        reorder: 0.0,
        stagger: Duration::ZERO,
        congestion: CongestionMode::On,
        target: Some(Duration::from_micros(20)),
    };
    let out = run(&r).unwrap();
    println!("shallow queue, 20 µs target: {out:?}");
    assert!(out.resent <= 0.05, "{out:?}");
    assert!(
        out.goodput >= 0.75 * neck.rate_bytes_per_sec as f64,
        "{out:?}"
    );
}

/// The same bottleneck without congestion control: the fixed window
/// overflows the queue (what the properties above are measured against).
#[test]
fn without_congestion_control_the_fixed_window_overflows_a_small_queue() {
    let r = Run {
        senders: 4,
        messages: 200,
        size: 8192,
        neck: Some(Bottleneck {
            rate_bytes_per_sec: 125_000_000,
            queue_bytes: 64 * 1024,
        }),
        delay: Duration::from_micros(10),
        reorder: 0.0,
        stagger: Duration::ZERO,
        congestion: CongestionMode::Off,
        target: None,
    };
    let off = run(&r).unwrap();
    let on = run(&Run {
        congestion: CongestionMode::On,
        ..r.clone()
    })
    .unwrap();
    println!("off: {off:?}\non:  {on:?}");
    assert!(off.queue_drops > 0, "{off:?}");
    assert!(on.resent < off.resent, "on {on:?}\noff {off:?}");
}

/// Random loss and reordering are not congestion: with congestion control
/// on, a stream through a lossy or reordering wire (no bottleneck) takes at
/// most a fifth longer than with the fixed window, and resends no more.
#[test]
fn random_loss_and_reordering_are_not_congestion() {
    for (loss, reorder) in [(0.01, 0.0), (0.0, 0.14)] {
        let mut runs = Vec::new();
        for cc in [false, true] {
            let faults = FaultProfile {
                delay: Duration::from_micros(50),
                loss,
                reorder,
                ..FaultProfile::default()
            };
            let mut c = SimCluster::new(2, faults, 11, 1500, |_, cfg| {
                cfg.ring_blocks = 1 << 16;
                cfg.congestion.mode = if cc {
                    CongestionMode::On
                } else {
                    CongestionMode::Off
                };
            })
            .unwrap();
            let rx = SimCluster::addr(1);
            let (mut sent, mut got, mut done) = (0usize, 0usize, 0usize);
            let n = 3000;
            while done < n || got < n {
                while sent < n {
                    match c.endpoints[0].send(rx, &message(0, sent, 1000 + (sent * 977) % 5000)) {
                        Ok(_) => sent += 1,
                        Err(_) => break,
                    }
                }
                while let Some(ev) = c.endpoints[0].poll_send_event() {
                    assert!(matches!(ev, SendEvent::Complete(_)), "{ev:?}");
                    done += 1;
                }
                while let Some(d) = c.endpoints[1].poll_delivery() {
                    assert_eq!(
                        c.endpoints[1].message(&d).unwrap(),
                        &message(0, got, 1000 + (got * 977) % 5000)[..]
                    );
                    got += 1;
                    c.endpoints[1].release(d).unwrap();
                }
                assert!(c.now().as_nanos() < 10_000_000_000, "stuck");
                c.step().unwrap();
            }
            let s = *c.endpoints[0].port().stats();
            println!(
                "loss {loss} reorder {reorder} congestion {cc}: {:?}, {} of {} resent",
                c.now(),
                s.retransmits,
                s.data_frames_sent
            );
            runs.push((c.now().as_nanos(), s.retransmits));
        }
        let ((t_off, r_off), (t_on, r_on)) = (runs[0], runs[1]);
        assert!(
            t_on * 5 <= t_off * 6,
            "loss {loss} reorder {reorder}: {t_on} ns with congestion control, {t_off} without"
        );
        assert!(
            r_on <= r_off,
            "loss {loss} reorder {reorder}: {r_on} resent with congestion control, {r_off} without"
        );
    }
}
