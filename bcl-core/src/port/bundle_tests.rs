//! Bundles: small queued system-channel messages sharing one frame.

use super::tests::{addr, config, pattern, unbundled, Net, Wired};
use super::*;
use crate::event::SendFailure;
use crate::method::LinkId;
use crate::wire::{self, bundle, flags};
use proptest::prelude::*;
use std::time::Duration;

impl Wired {
    fn flags(&self) -> u8 {
        self.bytes[3]
    }
    fn is_bundle(&self) -> bool {
        self.flags() & flags::BUNDLE != 0
    }
    /// The records of a bundle frame.
    fn records(&self) -> Vec<Vec<u8>> {
        bundle::records(&self.bytes[HEADER_LEN..])
            .map(<[u8]>::to_vec)
            .collect()
    }
}

fn small(k: usize) -> Vec<u8> {
    pattern(16, k as u8)
}

/// Messages delivered to port `to`, in order, with their sender.
fn payloads(got: &[(usize, ProcessAddr, Vec<u8>)]) -> Vec<Vec<u8>> {
    got.iter().map(|(_, _, m)| m.clone()).collect()
}

/// Port 0 queues every message of `sent` for port 1.
fn send_all(net: &mut Net, sent: &[Vec<u8>]) {
    for m in sent {
        net.ports[0].send(net.now, addr(1), m).unwrap();
    }
}

/// Two ports on a 300-byte MTU; port 1 has a ring of `ring_blocks` blocks
/// and the given eager limit.
fn small_ring_net(ring_blocks: u32, eager_limit: usize) -> Net {
    let mut c1 = config(1);
    c1.ring_blocks = ring_blocks;
    c1.eager_limit = eager_limit;
    Net::with_mtu(vec![config(0), c1], 300)
}

#[test]
fn queued_small_messages_share_frames_and_arrive_once_in_order() {
    let mut net = Net::new(vec![config(0), config(1)]);
    let sent: Vec<Vec<u8>> = (0..200).map(small).collect();
    send_all(&mut net, &sent);
    let frames = net.transmit();
    // 1436 payload bytes take 79 records of 18 bytes: 200 messages in 3.
    assert_eq!(frames.len(), 3);
    assert!(frames.iter().all(Wired::is_bundle));
    let records: Vec<Vec<u8>> = frames.iter().flat_map(Wired::records).collect();
    assert_eq!(records, sent, "the records are the messages, in order");
    assert!(frames.iter().all(|f| f.bytes.len() <= super::tests::MTU));
    net.deliver(&frames);
    let mut got = net.drain_deliveries();
    got.extend(net.run_perfect());
    assert_eq!(payloads(&got), sent);
    let events = net.send_events(0);
    assert_eq!(events.len(), 200);
    assert!(events.iter().all(|e| matches!(e, SendEvent::Complete(_))));
    let s = net.ports[0].stats();
    assert_eq!((s.bundles_sent, s.messages_bundled), (3, 200));
    assert_eq!(s.data_frames_sent, 3);
    assert_eq!(s.messages_completed, 200);
    assert_eq!(net.ports[1].stats().bundles_received, 3);
    assert_eq!(net.ports[1].stats().messages_delivered, 200);
}

#[test]
fn at_most_the_receivers_reassembly_entries_of_messages_fly_at_once() {
    let mut net = Net::new(vec![config(0), config(1)]);
    let sent: Vec<Vec<u8>> = (0..1000).map(small).collect();
    send_all(&mut net, &sent);
    let frames = net.transmit();
    let carried: usize = frames.iter().map(|f| f.records().len()).sum();
    assert_eq!(
        carried,
        super::peer::RX_MSGS,
        "then it waits for acknowledgements"
    );
    assert!(net.transmit().is_empty());
    net.deliver(&frames);
    let mut got = net.drain_deliveries();
    got.extend(net.run_perfect());
    assert_eq!(payloads(&got), sent);
    assert_eq!(net.send_events(0).len(), 1000);
}

#[test]
fn an_unreachable_peer_fails_each_bundled_message_once() {
    let mut c0 = config(0);
    c0.max_timeouts = 3;
    let mut net = Net::new(vec![c0, config(1)]);
    let mut handles: Vec<SendHandle> = (0..100)
        .map(|k| net.ports[0].send(net.now, addr(1), &small(k)).unwrap())
        .collect();
    for _ in 0..10 {
        let lost = net.transmit(); // everything is lost
        assert!(lost
            .iter()
            .all(|f| f.kind() != FrameType::Data || f.is_bundle()));
        net.advance_to_next_timer();
    }
    let expected = SendFailure::PeerUnreachable(addr(1));
    let mut failed: Vec<SendHandle> = net
        .send_events(0)
        .into_iter()
        .map(|e| match e {
            SendEvent::Failed(h, f) => {
                assert_eq!(f, expected);
                h
            }
            other => panic!("unexpected {other:?}"),
        })
        .collect();
    failed.sort_by_key(|h| h.0);
    handles.sort_by_key(|h| h.0);
    assert_eq!(failed, handles, "each message fails exactly once");
    assert_eq!(net.ports[0].outstanding_sends(), 0);
    // Usable again afterwards, bundles and all.
    for k in 0..10 {
        net.ports[0].send(net.now, addr(1), &small(k)).unwrap();
    }
    let got = net.run_perfect();
    assert_eq!(payloads(&got), (0..10).map(small).collect::<Vec<_>>());
}

#[test]
fn a_lone_message_goes_alone_and_at_once() {
    let mut net = Net::new(vec![config(0), config(1)]);
    net.ports[0].send(net.now, addr(1), b"alone").unwrap();
    let f = net.transmit();
    assert_eq!(f.len(), 1);
    assert!(!f[0].is_bundle());
    net.deliver(&f);
    // A message sent after the first frame left is not held back either.
    net.ports[0].send(net.now, addr(1), b"next").unwrap();
    let f = net.transmit();
    assert_eq!(f.len(), 1);
    assert!(!f[0].is_bundle());
    assert_eq!(net.ports[0].stats().bundles_sent, 0);
}

#[test]
fn bundling_can_be_turned_off() {
    let mut net = Net::new(vec![unbundled(0), config(1)]);
    for k in 0..10 {
        net.ports[0].send(net.now, addr(1), &small(k)).unwrap();
    }
    let f = net.transmit();
    assert_eq!(f.len(), 10);
    assert!(!f.iter().any(Wired::is_bundle));
}

#[test]
fn large_and_control_messages_are_not_bundled_but_keep_their_place() {
    let mut net = Net::new(vec![config(0), config(1)]);
    let sent = vec![
        small(0),
        small(1),
        pattern(3000, 9), // three frames of its own
        small(2),
        pattern(1420, 8), // fits one frame, but not with another
        small(3),
        small(4),
    ];
    send_all(&mut net, &sent);
    let frames = net.transmit();
    let shape: Vec<(bool, usize)> = frames
        .iter()
        .map(|f| {
            (
                f.is_bundle(),
                if f.is_bundle() { f.records().len() } else { 1 },
            )
        })
        .collect();
    assert_eq!(
        shape,
        vec![
            (true, 2),
            (false, 1),
            (false, 1),
            (false, 1),
            (false, 1), // small(2) alone: the 1420-byte one does not fit with it
            (false, 1),
            (true, 2)
        ]
    );
    net.deliver(&frames);
    let mut got = net.drain_deliveries();
    got.extend(net.run_perfect());
    assert_eq!(payloads(&got), sent);
}

#[test]
fn bundles_respect_a_small_mtu() {
    let mut net = Net::with_mtu(vec![config(0), config(1)], 300);
    for k in 0..50 {
        net.ports[0]
            .send(net.now, addr(1), &pattern(30, k))
            .unwrap();
    }
    let frames = net.transmit();
    // (300 - 64 - 2) / 32 = 7 records per frame.
    assert!(frames.iter().all(|f| f.bytes.len() <= 300));
    assert_eq!(frames[0].records().len(), 7);
    assert_eq!(frames.len(), 8);
    net.deliver(&frames);
    let mut got = net.drain_deliveries();
    got.extend(net.run_perfect());
    assert_eq!(got.len(), 50);
}

#[test]
fn a_lost_bundle_is_resent_whole_and_duplicates_deliver_nothing() {
    let mut net = Net::new(vec![config(0), config(1)]);
    let sent: Vec<Vec<u8>> = (0..200).map(small).collect();
    send_all(&mut net, &sent);
    let frames = net.transmit();
    assert_eq!(frames.len(), 3);
    // The first bundle is lost, the third arrives twice.
    net.deliver(&frames[1..]);
    net.deliver(&frames[2..]);
    assert!(net.drain_deliveries().is_empty(), "nothing out of order");
    let mut got = Vec::new();
    for _ in 0..50 {
        let f = net.transmit();
        if f.is_empty() && !net.advance_to_next_timer() {
            break;
        }
        // Whatever is resent is a whole copy of the bundle it resends.
        for r in f.iter().filter(|f| f.kind() == FrameType::Data) {
            let original = frames.iter().find(|o| o.seq() == r.seq()).unwrap();
            assert!(r.is_bundle());
            assert_eq!(r.records(), original.records());
        }
        net.now = net.now + Duration::from_micros(1);
        net.deliver(&f);
        got.extend(net.drain_deliveries());
    }
    got.extend(net.run_perfect());
    assert_eq!(payloads(&got), sent, "exactly once, in order");
    assert_eq!(net.send_events(0).len(), 200);
    assert!(net.ports[0].stats().retransmits >= 1);
    assert!(net.ports[1].stats().duplicates >= 1);
}

#[test]
fn a_bundle_the_ring_cannot_take_is_refused_whole_when_out_of_order() {
    // 16 blocks; an out-of-order message needs 4 blocks of headroom beyond
    // itself (eager limit 1 KiB).
    let mut net = small_ring_net(16, 1024);
    let sent: Vec<Vec<u8>> = (0..14).map(|k| pattern(30, k)).collect();
    send_all(&mut net, &sent);
    let frames = net.transmit();
    assert_eq!(frames.len(), 2, "7 + 7 records");
    // The second bundle arrives first: 7 blocks + 4 headroom fit 16.
    net.deliver(&frames[1..]);
    assert_eq!(net.ports[1].ring_free_blocks(), 9);
    // Had only 10 been free, it would have been refused whole.
    let mut small_ring = small_ring_net(10, 1024);
    send_all(&mut small_ring, &sent);
    let f = small_ring.transmit();
    small_ring.deliver(&f[1..]);
    assert_eq!(small_ring.ports[1].ring_free_blocks(), 10, "nothing taken");
    assert_eq!(small_ring.ports[1].stats().ring_full_drops, 1);
    assert!(small_ring.drain_deliveries().is_empty());
    // Then the first arrives and both go through in order.
    small_ring.deliver(&f[..1]);
    let mut got = small_ring.drain_deliveries();
    got.extend(small_ring.run_perfect());
    assert_eq!(payloads(&got), sent);
    assert_eq!(small_ring.send_events(0).len(), 14);
}

#[test]
fn a_bundle_larger_than_the_free_ring_delivers_in_order_without_duplicates() {
    // The application holds what it gets for a while: a 4-block ring takes
    // a 7-record bundle in instalments; every message still arrives once.
    let mut net = small_ring_net(4, 256);
    let sent: Vec<Vec<u8>> = (0..14).map(|k| pattern(30, k)).collect();
    send_all(&mut net, &sent);
    let frames = net.transmit();
    assert_eq!(frames.len(), 2);
    net.deliver(&frames);
    // Four records fit; the bundle is refused (not acknowledged).
    let mut held = Vec::new();
    while let Some(d) = net.ports[1].poll_delivery() {
        held.push(d);
    }
    assert_eq!(held.len(), 4);
    assert!(net.ports[1].stats().ring_full_drops >= 1);
    let mut got: Vec<Vec<u8>> = held
        .iter()
        .map(|d| net.ports[1].message(d).unwrap().to_vec())
        .collect();
    for d in held {
        net.ports[1].release(d.slot).unwrap();
    }
    for _ in 0..10_000 {
        let f = net.transmit();
        if f.is_empty() {
            if !net.advance_to_next_timer() {
                break;
            }
            continue;
        }
        net.now = net.now + Duration::from_micros(1);
        net.deliver(&f);
        // Take one delivery at a time and hold it for a round.
        let d: Vec<_> = std::iter::from_fn(|| net.ports[1].poll_delivery()).collect();
        for d in d {
            got.push(net.ports[1].message(&d).unwrap().to_vec());
            net.ports[1].release(d.slot).unwrap();
        }
    }
    assert_eq!(got, sent);
    assert_eq!(net.send_events(0).len(), 14);
    assert_eq!(net.ports[1].ring_free_blocks(), 4);
}

#[test]
fn malformed_bundles_are_dropped_and_counted_before_anything_is_delivered() {
    let mut net = Net::new(vec![config(0), config(1)]);
    for k in 0..3 {
        net.ports[0].send(net.now, addr(1), &small(k)).unwrap();
    }
    let frames = net.transmit();
    assert_eq!(frames.len(), 1);
    let good = frames[0].clone();
    let route = Route {
        method: 0,
        link: LinkId(0),
    };
    // A record past the end (CRC recomputed so only the bundle is wrong).
    let mut fields = wire::HeaderFields {
        kind: Some(FrameType::Data),
        flags: flags::BUNDLE,
        job: net.ports[1].config().job,
        src: addr(0),
        dst: addr(1),
        epoch: 1000,
        seq: good.seq(),
        msg_seq: good.seq(),
        ..Default::default()
    };
    let mut payload = good.bytes[HEADER_LEN..].to_vec();
    payload[2..4].copy_from_slice(&1000u16.to_be_bytes());
    fields.msg_len = payload.len() as u32;
    let mut bad = vec![0u8; HEADER_LEN + payload.len()];
    wire::encode(&mut bad, &fields, &payload, true).unwrap();
    assert!(net.ports[1].handle_frame(net.now, route, &bad));
    // A record longer than the receiver's eager limit.
    let mut c1 = config(1);
    c1.eager_limit = 8;
    let mut strict = Port::new(c1).unwrap();
    strict.add_method(super::tests::caps(1500)).unwrap();
    assert!(strict.handle_frame(net.now, route, &good.bytes));
    assert_eq!(strict.stats().bad_frames.bad_bundle, 1);
    assert!(strict.poll_delivery().is_none());
    assert_eq!(net.ports[1].stats().bad_frames.bad_bundle, 1);
    assert!(net.ports[1].poll_delivery().is_none());
    // The good one still delivers all three.
    net.deliver(&frames);
    assert_eq!(net.drain_deliveries().len(), 3);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Arbitrary payloads in bundle frames from a known peer never panic
    /// the port, and whatever it delivers is exactly the frame's records.
    #[test]
    fn arbitrary_bundle_payloads_never_panic_the_port(
        payload in proptest::collection::vec(any::<u8>(), 0..400),
        count in 0u16..6,
    ) {
        let mut c1 = config(1);
        c1.eager_limit = 64;
        let mut port = Port::new(c1).unwrap();
        port.add_method(super::tests::caps(1500)).unwrap();
        let mut payload = payload;
        if payload.len() >= 2 {
            payload[..2].copy_from_slice(&count.to_be_bytes());
        }
        let fields = wire::HeaderFields {
            kind: Some(FrameType::Data),
            flags: flags::BUNDLE,
            job: port.config().job,
            src: addr(0),
            dst: addr(1),
            epoch: 1000,
            msg_len: payload.len() as u32,
            ..Default::default()
        };
        let mut frame = vec![0u8; HEADER_LEN + payload.len()];
        wire::encode(&mut frame, &fields, &payload, true).unwrap();
        let route = Route { method: 0, link: LinkId(0) };
        prop_assert!(port.handle_frame(Time::ZERO, route, &frame));
        let deliveries: Vec<_> = std::iter::from_fn(|| port.poll_delivery()).collect();
        let got: Vec<Vec<u8>> = deliveries
            .iter()
            .map(|d| port.message(d).unwrap().to_vec())
            .collect();
        if got.is_empty() {
            prop_assert_eq!(port.stats().bad_frames.total(), 1);
        } else {
            let want: Vec<Vec<u8>> = bundle::records(&payload).map(<[u8]>::to_vec).collect();
            prop_assert_eq!(got, want);
        }
    }
}
