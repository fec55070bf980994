//! The fabric on a real clock, shared by two threads.

use std::thread;
use std::time::{Duration, Instant};

use bcl_core::{LinkId, Method, TxFrame};
use bcl_sim::{FabricConfig, RealClock, SimClock, SimEndpoint, SimFabric};

const ROUNDS: u32 = 1000;

/// Waits for one frame. The deadline only turns a hang into a failure; it
/// is not a performance threshold.
fn receive_one(ep: &mut SimEndpoint) -> (LinkId, Vec<u8>) {
    let give_up = Instant::now() + Duration::from_secs(60);
    let mut got = None;
    loop {
        ep.rx_burst(1, &mut |from, bytes| got = Some((from, bytes.to_vec())))
            .unwrap();
        if let Some(frame) = got {
            return frame;
        }
        assert!(Instant::now() < give_up, "no frame within 60 s");
        thread::yield_now();
    }
}

fn send_one(ep: &mut SimEndpoint, link: LinkId, bytes: &[u8]) {
    let mut once = Some(bytes);
    let sent = ep
        .tx_burst(&mut |buf| {
            let bytes = once.take()?;
            buf[..bytes.len()].copy_from_slice(bytes);
            Some(TxFrame {
                link,
                len: bytes.len(),
            })
        })
        .unwrap();
    assert_eq!(sent, 1);
}

fn payload(i: u32) -> Vec<u8> {
    let len = 8 + (i as usize * 13) % 1400;
    let mut v = i.to_le_bytes().to_vec();
    v.extend((0..len).map(|j| (j as u32 ^ i) as u8));
    v
}

#[test]
fn two_threads_ping_pong_a_thousand_frames_intact() {
    let fabric = SimFabric::new(FabricConfig {
        clock: SimClock::Real(RealClock::new()),
        ..FabricConfig::default()
    });
    let mut a = fabric.endpoint();
    let mut b = fabric.endpoint();
    let to_b = a.open_link(&b.descriptor()).unwrap();

    let echo = thread::spawn(move || {
        for i in 0..ROUNDS {
            let (from, bytes) = receive_one(&mut b);
            assert_eq!(bytes, payload(i));
            // Answer on the link the frame came from.
            send_one(&mut b, from, &bytes);
        }
    });

    for i in 0..ROUNDS {
        send_one(&mut a, to_b, &payload(i));
        let (from, bytes) = receive_one(&mut a);
        assert_eq!(from, to_b);
        assert_eq!(bytes, payload(i));
    }
    echo.join().unwrap();

    let s = fabric.stats();
    assert_eq!(s.offered, 2 * u64::from(ROUNDS));
    assert_eq!(s.delivered, 2 * u64::from(ROUNDS));
    assert_eq!(s.dropped, 0);
    assert_eq!(fabric.in_flight(), 0);
}

#[test]
fn two_threads_stream_concurrently() {
    let fabric = SimFabric::new(FabricConfig {
        clock: SimClock::Real(RealClock::new()),
        ..FabricConfig::default()
    });
    let a = fabric.endpoint();
    let b = fabric.endpoint();
    // Both directions at once: each thread sends all its frames while
    // receiving the other's.
    let run = |mut me: SimEndpoint, peer: u32| {
        move || {
            let mut next_send = 0;
            let mut next_recv = 0;
            let give_up = Instant::now() + Duration::from_secs(60);
            while next_recv < ROUNDS {
                if next_send < ROUNDS {
                    me.tx_burst(&mut |buf| {
                        if next_send == ROUNDS {
                            return None;
                        }
                        let p = payload(next_send);
                        buf[..p.len()].copy_from_slice(&p);
                        next_send += 1;
                        Some(TxFrame {
                            link: LinkId(peer),
                            len: p.len(),
                        })
                    })
                    .unwrap();
                }
                me.rx_burst(32, &mut |from, bytes| {
                    assert_eq!(from, LinkId(peer));
                    assert_eq!(bytes, payload(next_recv));
                    next_recv += 1;
                })
                .unwrap();
                assert!(Instant::now() < give_up, "stuck at {next_recv}");
            }
        }
    };
    let ta = thread::spawn(run(a, 1));
    let tb = thread::spawn(run(b, 0));
    ta.join().unwrap();
    tb.join().unwrap();
    let s = fabric.stats();
    assert_eq!(s.delivered, 2 * u64::from(ROUNDS));
    assert_eq!(s.dropped, 0);
}
