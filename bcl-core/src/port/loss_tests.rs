//! Loss detection by time and sequence over a hand-driven wire: frames
//! overtaken are not resent within the reordering window, lost frames and
//! lost resends are found without a timeout, and reported duplicates widen
//! the window.

use super::tests::{addr, config, pattern, Net, Wired};
use super::*;
use std::time::Duration;

/// Two ports; a 10 000-byte message is 7 frames. The receiver delays its
/// acknowledgements by 2 µs only, so that they come back well within a
/// round trip.
fn net() -> Net {
    let mut receiver = config(1);
    receiver.ack_delay = us(2);
    Net::new(vec![config(0), receiver])
}

fn us(n: u64) -> Duration {
    Duration::from_micros(n)
}

/// Sends a 7-frame message from port 0 and returns its frames.
fn send_message(net: &mut Net, seed: u8) -> (Vec<u8>, Vec<Wired>) {
    let msg = pattern(10_000, seed);
    net.ports[0].send(net.now, addr(1), &msg).unwrap();
    let frames = net.transmit();
    assert_eq!(frames.len(), 7);
    (msg, frames)
}

/// Frame 0 of a message arrives last, after the receiver has NAKed the gap
/// but before the NAK reaches the sender: the sender sees the path reorder,
/// without having resent anything. Returns the net with a round trip of
/// 47 µs measured.
fn net_that_has_seen_reordering() -> Net {
    let mut net = net();
    let (msg, f) = send_message(&mut net, 1);
    net.now = net.now + us(20);
    net.deliver(&f[1..]);
    let nak = net.transmit();
    assert_eq!(nak.len(), 1);
    assert_eq!(nak[0].kind(), FrameType::Nak);
    net.now = net.now + us(5);
    net.deliver(&f[..1]);
    assert_eq!(net.drain_deliveries()[0].2, msg);
    let ack = delayed_ack(&mut net);
    net.now = net.now + us(20);
    net.deliver(&nak);
    net.deliver(&ack);
    let out = net.transmit();
    assert!(out.is_empty(), "nothing resent: {out:?}");
    assert_eq!(net.ports[0].stats().retransmits, 0);
    let info = net.ports[0].peer_info(addr(1)).unwrap();
    assert!(
        info.reorder_window > Duration::ZERO,
        "reordering seen: {info:?}"
    );
    net
}

/// The receiver's delayed acknowledgement, 2 µs on.
fn delayed_ack(net: &mut Net) -> Vec<Wired> {
    net.now = net.now + us(2);
    net.ports[1].handle_timeout(net.now);
    let ack = net.transmit();
    assert_eq!(ack.len(), 1);
    assert_eq!(ack[0].kind(), FrameType::Ack);
    ack
}

#[test]
fn a_path_that_never_reordered_resends_a_gap_at_once() {
    let mut net = net();
    let (msg, f) = send_message(&mut net, 2);
    net.now = net.now + us(20);
    net.deliver(&f[1..]);
    let nak = net.transmit();
    net.now = net.now + us(20);
    net.deliver(&nak);
    let info = net.ports[0].peer_info(addr(1)).unwrap();
    assert_eq!(info.reorder_window, Duration::ZERO);
    let resent = net.transmit();
    assert_eq!(resent.len(), 1);
    assert_eq!(resent[0].seq(), f[0].seq());
    net.deliver(&resent);
    assert_eq!(net.drain_deliveries()[0].2, msg);
    assert_eq!(net.ports[0].stats().frames_judged_lost, 1);
}

#[test]
fn a_frame_overtaken_within_the_reordering_window_is_not_resent() {
    let mut net = net_that_has_seen_reordering();
    let window = net.ports[0].peer_info(addr(1)).unwrap().reorder_window;
    let (msg, f) = send_message(&mut net, 3);
    net.now = net.now + us(20);
    net.deliver(&f[1..]);
    let nak = net.transmit();
    net.now = net.now + us(20);
    net.deliver(&nak);
    assert!(net.transmit().is_empty(), "frame 0 may still come");
    let check = net.ports[0].peer_info(addr(1)).unwrap().loss_check_at;
    assert!(
        check.is_some_and(|t| t > net.now && t <= net.now + us(10) + window),
        "a reorder check is due after the window: {check:?}, now {:?}",
        net.now
    );
    // Frame 0 arrives late; the sender learns before the check.
    net.deliver(&f[..1]);
    assert_eq!(net.drain_deliveries()[0].2, msg);
    let ack = delayed_ack(&mut net);
    net.deliver(&ack);
    net.advance(window + us(100));
    assert!(net.transmit().is_empty());
    let st = net.ports[0].stats();
    assert_eq!(st.retransmits, 0, "{st:?}");
    assert_eq!(st.timeouts, 0);
    assert_eq!(net.send_events(0).len(), 2);
}

#[test]
fn a_lost_frame_is_resent_when_its_reordering_window_has_passed() {
    let mut net = net_that_has_seen_reordering();
    let window = net.ports[0].peer_info(addr(1)).unwrap().reorder_window;
    let (msg, f) = send_message(&mut net, 4);
    net.now = net.now + us(20);
    net.deliver(&f[1..]); // frame 0 is lost
    let nak = net.transmit();
    net.now = net.now + us(20);
    net.deliver(&nak);
    assert!(net.transmit().is_empty(), "not yet: it may be overtaken");
    net.advance(window + us(10));
    let resent = net.transmit();
    assert_eq!(resent.len(), 1, "the reorder check found it lost");
    assert_eq!(resent[0].seq(), f[0].seq());
    net.deliver(&resent);
    assert_eq!(net.drain_deliveries()[0].2, msg);
    assert_eq!(net.ports[0].stats().timeouts, 0, "found without a timeout");
}

#[test]
fn a_lost_resend_is_found_by_a_later_frame_not_by_a_timeout() {
    let mut net = net();
    let (msg, f) = send_message(&mut net, 5);
    net.now = net.now + us(20);
    net.deliver(&f[1..]);
    let nak = net.transmit();
    net.now = net.now + us(20);
    net.deliver(&nak);
    let resent = net.transmit();
    assert_eq!(resent.len(), 1);
    // The resend is lost too. A message sent after it gets through, and
    // its acknowledgement shows that something sent later arrived.
    net.ports[0].send(net.now, addr(1), b"later").unwrap();
    let later = net.transmit();
    assert_eq!(later.len(), 1);
    net.now = net.now + us(20);
    net.deliver(&later);
    // Nothing new is missing: the receiver acknowledges after its delay.
    assert!(net.transmit().is_empty());
    let ack = delayed_ack(&mut net);
    net.now = net.now + us(20);
    net.deliver(&ack);
    let again = net.transmit();
    assert_eq!(again.len(), 1, "the lost resend is resent");
    assert_eq!(again[0].seq(), f[0].seq());
    net.deliver(&again);
    let got = net.drain_deliveries();
    assert_eq!(got.len(), 2);
    assert_eq!(got[0].2, msg);
    assert_eq!(got[1].2, b"later");
    let st = net.ports[0].stats();
    assert_eq!((st.retransmits, st.timeouts), (2, 0), "{st:?}");
}

#[test]
fn reported_duplicates_widen_the_reordering_window() {
    let mut net = net_that_has_seen_reordering();
    let before = net.ports[0].peer_info(addr(1)).unwrap().reorder_window;
    net.ports[0].send(net.now, addr(1), b"twice").unwrap();
    let f = net.transmit();
    net.now = net.now + us(20);
    net.deliver(&f);
    net.deliver(&f); // the wire (or a needless resend) brings it again
    let ack = net.transmit();
    assert_eq!(ack.len(), 1);
    assert_eq!(reported_duplicates(&ack[0]), 1, "the ACK reports it");
    net.now = net.now + us(20);
    net.deliver(&ack);
    assert_eq!(net.ports[0].stats().duplicates_reported, 1);
    let after = net.ports[0].peer_info(addr(1)).unwrap().reorder_window;
    assert!(after > before, "window {before:?} -> {after:?}");
}

/// The duplicate count an ACK or NAK frame reports.
fn reported_duplicates(frame: &Wired) -> u8 {
    let body = crate::wire::AckBody::read(&frame.bytes[HEADER_LEN..]).unwrap();
    body.duplicates
}

/// A timeout fires while the frames are only queued (the round trip outgrew
/// the timeout), and the acknowledgement of the first copies comes back
/// sooner after the probe than any round trip could: the timeout was
/// spurious, so it stays backed off instead of falling back to the old
/// estimate (which would time out again at once).
#[test]
fn a_spurious_timeout_keeps_the_timeout_backed_off() {
    for ack_after_probe in [us(5), us(100)] {
        let mut net = net();
        // A first exchange measures a round trip of about 42 µs.
        let (_, f) = send_message(&mut net, 9);
        net.now = net.now + us(20);
        net.deliver(&f);
        net.drain_deliveries();
        let ack = delayed_ack(&mut net);
        net.now = net.now + us(20);
        net.deliver(&ack);
        let rto = net.ports[0].peer_info(addr(1)).unwrap().rto;
        // The next message's frames wait in a queue past the timeout.
        let (_, f) = send_message(&mut net, 10);
        net.now = net.now + rto + us(1);
        net.ports[0].handle_timeout(net.now);
        let probes = net.transmit();
        assert_eq!(probes.len(), 2, "oldest and newest resent");
        assert_eq!(net.ports[0].peer_info(addr(1)).unwrap().rto, rto * 2);
        // The first copies arrive and are acknowledged.
        net.deliver(&f);
        net.drain_deliveries();
        let ack = delayed_ack(&mut net);
        net.now = net.now + ack_after_probe;
        net.deliver(&ack);
        let after = net.ports[0].peer_info(addr(1)).unwrap().rto;
        if ack_after_probe < us(42) {
            assert_eq!(after, rto * 2, "spurious: stays backed off");
        } else {
            assert_eq!(after, rto, "may be the probe's: backoff reset");
        }
    }
}
