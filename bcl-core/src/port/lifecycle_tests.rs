//! A peer's life: restarts told apart by incarnation, frames of a dead
//! incarnation dropped, peers reported down, back and restarted.

use super::tests::{addr, caps, config, Net, MTU};
use super::*;
use crate::event::{ChannelEvent, SendFailure, TransferError};
use crate::method::LinkId;
use std::time::Duration;

/// Replaces port `i` of `net` by a fresh process at the same address with
/// incarnation `epoch`: no memory of anything, routes to everyone.
fn restart(net: &mut Net, i: usize, epoch: u32) {
    let mut c = config(i);
    c.epoch = epoch;
    let mut fresh = Port::new(c).unwrap();
    fresh.add_method(caps(MTU)).unwrap();
    for j in 0..net.ports.len() {
        if j != i {
            let route = Route {
                method: 0,
                link: LinkId(j as u32),
            };
            fresh.set_route(net.now, addr(j), route).unwrap();
        }
    }
    net.ports[i] = fresh;
}

fn peer_events(port: &mut Port) -> Vec<PeerEvent> {
    std::iter::from_fn(|| port.poll_peer_event()).collect()
}

#[test]
fn frames_of_a_dead_incarnation_are_dropped_and_counted() {
    let mut net = Net::new(vec![config(0), config(1)]);
    net.ports[0].send(net.now, addr(1), b"first").unwrap();
    net.run_perfect();
    // The old process sends once more; the frame is still in flight when
    // it dies and a new process takes its address.
    net.ports[0]
        .send(net.now, addr(1), b"from the dead")
        .unwrap();
    let in_flight = net.transmit();
    assert!(!in_flight.is_empty());
    restart(&mut net, 0, 5000);
    net.ports[0].send(net.now, addr(1), b"new life").unwrap();
    let got = net.run_perfect();
    assert_eq!(got, vec![(1, addr(0), b"new life".to_vec())]);
    assert_eq!(
        peer_events(&mut net.ports[1]),
        vec![PeerEvent::Restarted(addr(0))]
    );
    // The old frame turns up late: dropped, counted, nothing delivered.
    let stale_before = net.ports[1].stats().bad_frames.stale;
    let received = net.ports[1].stats().frames_received;
    net.deliver(&in_flight);
    assert_eq!(net.ports[1].stats().bad_frames.stale, stale_before + 1);
    assert_eq!(net.ports[1].stats().frames_received, received);
    assert!(net.drain_deliveries().is_empty());
    // And the new process's stream goes on undisturbed.
    net.ports[0].send(net.now, addr(1), b"still here").unwrap();
    assert_eq!(
        net.run_perfect(),
        vec![(1, addr(0), b"still here".to_vec())]
    );
    assert_eq!(net.ports[1].stats().peers_restarted, 1);
}

#[test]
fn sends_in_flight_to_a_restarted_peer_fail_and_later_ones_arrive_once() {
    let mut net = Net::new(vec![config(0), config(1)]);
    net.ports[1].send(net.now, addr(0), b"hello").unwrap();
    net.run_perfect();
    // Port 0 sends; port 1 dies before receiving it.
    let lost = net.ports[0].send(net.now, addr(1), b"lost").unwrap();
    let dropped = net.transmit();
    assert!(!dropped.is_empty());
    restart(&mut net, 1, 6000);
    net.ports[1].send(net.now, addr(0), b"I am back").unwrap();
    let got = net.run_perfect();
    assert_eq!(got, vec![(0, addr(1), b"I am back".to_vec())]);
    assert_eq!(
        peer_events(&mut net.ports[0]),
        vec![PeerEvent::Restarted(addr(1))]
    );
    let events = net.send_events(0);
    assert!(
        events.contains(&SendEvent::Failed(
            lost,
            SendFailure::PeerRestarted(addr(1))
        )),
        "{events:?}"
    );
    // Both directions work afresh, exactly once, and the survivor's new
    // stream is not taken for a restart of the survivor.
    let again = net.ports[0].send(net.now, addr(1), b"again").unwrap();
    net.ports[1].send(net.now, addr(0), b"and you").unwrap();
    let mut got = net.run_perfect();
    got.sort();
    assert_eq!(
        got,
        vec![
            (0, addr(1), b"and you".to_vec()),
            (1, addr(0), b"again".to_vec())
        ]
    );
    assert!(net.send_events(0).contains(&SendEvent::Complete(again)));
    assert!(peer_events(&mut net.ports[1]).is_empty());
    assert_eq!(net.ports[0].stats().peers_restarted, 1);
    assert_eq!(net.ports[1].stats().peers_restarted, 0);
}

#[test]
fn a_transfer_from_a_process_that_restarts_fails_naming_it() {
    let mut net = Net::new(vec![config(0), config(1)]);
    let ch = net.ports[1].open_normal_channel().unwrap();
    net.ports[1]
        .post(net.now, ch, None, vec![0; 1 << 20])
        .unwrap();
    net.ports[0]
        .send_on_channel(net.now, addr(1), ch, vec![7; 1 << 20])
        .unwrap();
    // Some of the transfer gets through, then the sender dies.
    for _ in 0..3 {
        let frames = net.transmit();
        net.now = net.now + Duration::from_micros(1);
        net.deliver(&frames);
    }
    restart(&mut net, 0, 7000);
    net.ports[0].send(net.now, addr(1), b"new").unwrap();
    net.run_perfect();
    let failed: Vec<_> = std::iter::from_fn(|| net.ports[1].poll_channel_event())
        .filter_map(|e| match e {
            ChannelEvent::ReceiveFailed { from, error, .. } => Some((from, error)),
            _ => None,
        })
        .collect();
    assert_eq!(
        failed,
        vec![(addr(0), TransferError::PeerRestarted(addr(0)))]
    );
}

#[test]
fn an_older_number_after_a_long_silence_is_a_wrapped_restart() {
    let mut c0 = config(0);
    c0.epoch = 0x9000_0000;
    let mut net = Net::new(vec![c0, config(1)]);
    net.ports[0].send(net.now, addr(1), b"long ago").unwrap();
    net.run_perfect();
    // Longer than any frame lives in flight; the new start's number is
    // "older" in serial order only because the clock wrapped.
    net.advance(lifecycle::STALE_FRAME_LIFETIME + Duration::from_millis(100));
    restart(&mut net, 0, 0x1000_0000);
    net.ports[0].send(net.now, addr(1), b"now").unwrap();
    assert_eq!(net.run_perfect(), vec![(1, addr(0), b"now".to_vec())]);
    assert_eq!(
        peer_events(&mut net.ports[1]),
        vec![PeerEvent::Restarted(addr(0))]
    );
    assert_eq!(net.ports[1].stats().bad_frames.stale, 0);
}

#[test]
fn a_peer_declared_gone_and_heard_again_is_reported_back() {
    let mut net = Net::new(vec![config(0), config(1)]);
    net.ports[1].send(net.now, addr(0), b"one").unwrap();
    net.run_perfect();
    net.ports[0].peer_gone(net.now, addr(1));
    // Declared once, however often it is said.
    net.ports[0].peer_gone(net.now, addr(1));
    assert_eq!(
        peer_events(&mut net.ports[0]),
        vec![PeerEvent::Down(addr(1))]
    );
    // It was only cut off (the same incarnation speaks again).
    net.ports[1].send(net.now, addr(0), b"two").unwrap();
    assert_eq!(net.run_perfect(), vec![(0, addr(1), b"two".to_vec())]);
    assert_eq!(peer_events(&mut net.ports[0]), vec![PeerEvent::Up(addr(1))]);
    // And the survivor can send to it again.
    net.ports[0].send(net.now, addr(1), b"three").unwrap();
    assert_eq!(net.run_perfect(), vec![(1, addr(0), b"three".to_vec())]);
    assert_eq!(net.ports[0].stats().peers_restarted, 0);
}

#[test]
fn frames_of_an_abandoned_stream_are_stale_after_the_new_one_starts() {
    let mut c0 = config(0);
    c0.max_timeouts = 1;
    let mut net = Net::new(vec![c0, config(1)]);
    net.ports[0].send(net.now, addr(1), b"first").unwrap();
    net.run_perfect();
    // A frame of the first stream is held up on the way...
    net.ports[0].send(net.now, addr(1), b"held up").unwrap();
    let held = net.transmit();
    assert_eq!(held.len(), 1);
    // ...and its resends are lost, so the sender gives up on the peer and
    // starts a new stream (a new generation, same incarnation).
    while net.ports[0].outstanding_sends() > 0 {
        assert!(net.advance_to_next_timer());
        net.transmit();
    }
    net.ports[0].send(net.now, addr(1), b"fresh").unwrap();
    assert_eq!(net.run_perfect(), vec![(1, addr(0), b"fresh".to_vec())]);
    assert!(peer_events(&mut net.ports[1]).is_empty());
    let received = net.ports[1].stats().frames_received;
    net.deliver(&held);
    assert_eq!(net.ports[1].stats().bad_frames.stale, 1);
    // Counted as stale only, as a frame of a dead incarnation is.
    assert_eq!(net.ports[1].stats().frames_received, received);
    assert!(net.drain_deliveries().is_empty());
}

#[test]
fn a_restarted_peer_is_answered_the_way_it_came() {
    let mut net = Net::new(vec![config(0), config(1)]);
    net.ports[1].send(net.now, addr(0), b"old").unwrap();
    net.run_perfect();
    // The new process has another address on the method (link 7 here).
    restart(&mut net, 1, 8000);
    net.ports[1].send(net.now, addr(0), b"new").unwrap();
    let frames = net.transmit();
    let moved = Route {
        method: 0,
        link: LinkId(7),
    };
    for f in &frames {
        net.ports[0].handle_frame(net.now, moved, &f.bytes);
    }
    assert_eq!(net.drain_deliveries(), vec![(0, addr(1), b"new".to_vec())]);
    net.ports[0].send(net.now, addr(1), b"reply").unwrap();
    let mut buf = vec![0u8; MTU];
    let tx = net.ports[0].poll_transmit(0, net.now, &mut buf).unwrap();
    assert_eq!(tx.link, LinkId(7));
}

/// Port 1 streams to port 0, which watches it, and then stops for longer
/// than the liveness bound with everything sent to it lost meanwhile (a
/// stopped process whose socket buffer overflowed: port 0's
/// acknowledgements never reach it). Port 0 declares it dead; it resumes
/// and resends what it saw no acknowledgement for: those
/// frames are duplicates of messages port 0 delivered, and are not
/// delivered again (port 0 kept where port 1's stream stood). Port 1, whose
/// own checks ran late, pings port 0 before judging it and never declares
/// it dead.
#[test]
fn a_peer_declared_down_that_resumes_its_stream_delivers_nothing_twice() {
    use super::liveness_tests::{run, watched_config, State, MISSES, PERIOD};
    let mut net = Net::new(vec![watched_config(0), watched_config(1)]);
    net.ports[0].watch_peer(net.now, addr(1), true).unwrap();
    const MESSAGES: u64 = 20;
    for i in 0..MESSAGES {
        net.ports[1]
            .send(net.now, addr(0), &[i as u8; 100])
            .unwrap();
    }
    // Its frames go out at once; from the next microsecond it is stopped
    // (nothing it is sent survives) until well past the bound.
    let start = net.now;
    let resumes = start + PERIOD * (MISSES + 2);
    let seen = run(&mut net, resumes + PERIOD * 5, |i, now| {
        if i == 1 && now > start && now < resumes {
            State::Dead
        } else {
            State::Running
        }
    });
    let gone: Vec<_> = seen.gone.iter().map(|g| (g.0, g.1)).collect();
    assert_eq!(gone, vec![(0, addr(1))]);
    assert!(seen.gone[0].2 < resumes);
    let s = net.ports[0].stats();
    assert_eq!(s.messages_delivered, MESSAGES, "{s:?}");
    assert!(s.duplicates > 0, "port 1 resent nothing: {s:?}");
    assert_eq!(net.ports[1].stats().messages_completed, MESSAGES);
}
