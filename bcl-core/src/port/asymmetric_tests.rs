//! Two peers that reach each other by different kinds of method: one
//! sends over a method that may lose (sequence numbers, acknowledgements,
//! retransmissions), the other answers over one that never loses (shared
//! memory: unsequenced frames, nothing acknowledged). It happens when the
//! two ends choose from different descriptor lists (one end's node daemon
//! route, the other's shared memory). Every message must still arrive
//! once, and every send complete.

use super::tests::{addr, caps, config, pattern, MTU};
use super::*;
use crate::event::SendEvent;
use crate::method::{LinkId, MethodCaps};
use std::time::Duration;

/// Method 0 of both ports: never loses (as shared memory).
const RELIABLE: MethodCaps = MethodCaps {
    mtu: MTU,
    integrity: true,
    reliable: true,
};
/// Method 1 of both ports: may lose (as an Ethernet method).
const LOSSY: u8 = 1;

/// Both ports with both methods; port 0 reaches port 1 over `to_1` and
/// port 1 reaches port 0 over `to_0` (method numbers).
fn ports_with(to_1: u8, to_0: u8) -> [Port; 2] {
    let mut ports = [Port::new(config(0)).unwrap(), Port::new(config(1)).unwrap()];
    for (i, p) in ports.iter_mut().enumerate() {
        assert_eq!(p.add_method(RELIABLE).unwrap(), 0);
        assert_eq!(p.add_method(caps(MTU)).unwrap(), LOSSY);
        let method = if i == 0 { to_1 } else { to_0 };
        let route = Route {
            method,
            link: LinkId(1 - i as u32),
        };
        p.set_route(Time::ZERO, addr(1 - i), route).unwrap();
    }
    ports
}

/// Runs both ports over a perfect wire, 1 µs per hop, until nothing moves
/// and no timer is left (or 10 s of virtual time); returns the messages
/// each port received and the send events each saw.
fn run(ports: &mut [Port; 2]) -> ([Vec<Vec<u8>>; 2], [Vec<SendEvent>; 2]) {
    let mut now = Time::ZERO;
    let mut got: [Vec<Vec<u8>>; 2] = [Vec::new(), Vec::new()];
    let mut events: [Vec<SendEvent>; 2] = [Vec::new(), Vec::new()];
    let mut written = [0u64; 2];
    let mut buf = vec![0u8; MTU];
    let end = Time::ZERO + Duration::from_secs(10);
    while now < end {
        let mut moved = false;
        for i in 0..2 {
            for method in [0, LOSSY] {
                while let Some(tx) = ports[i].poll_transmit(method, now, &mut buf) {
                    moved = true;
                    let frame = buf[..tx.len].to_vec();
                    let route = Route {
                        method,
                        link: LinkId(i as u32),
                    };
                    assert!(ports[1 - i].handle_frame(now, route, &frame));
                    if method == 0 {
                        written[i] += 1;
                    }
                }
            }
            ports[i].confirm_written(now, addr(1 - i), written[i]);
            while let Some(d) = ports[i].poll_delivery() {
                got[i].push(ports[i].message(&d).unwrap().to_vec());
                ports[i].release(d.slot).unwrap();
            }
            events[i].extend(std::iter::from_fn(|| ports[i].poll_send_event()));
        }
        if moved {
            now = now + Duration::from_micros(1);
            continue;
        }
        match ports.iter().filter_map(|p| p.poll_timeout()).min() {
            Some(t) => {
                now = now.max(t);
                for p in ports.iter_mut() {
                    p.handle_timeout(now);
                }
            }
            None => break,
        }
    }
    (got, events)
}

#[test]
fn a_peer_that_answers_over_a_method_that_never_loses_still_acknowledges() {
    let mut ports = ports_with(LOSSY, 0);
    let sizes = [8usize, 1000, 5000, 64];
    for (k, len) in sizes.iter().enumerate() {
        ports[0]
            .send(Time::ZERO, addr(1), &pattern(*len, k as u8))
            .unwrap();
        ports[1]
            .send(Time::ZERO, addr(0), &pattern(*len, 100 + k as u8))
            .unwrap();
    }
    let (got, events) = run(&mut ports);
    for (i, seed) in [(1usize, 0u8), (0, 100)] {
        let want: Vec<Vec<u8>> = sizes
            .iter()
            .enumerate()
            .map(|(k, len)| pattern(*len, seed + k as u8))
            .collect();
        assert_eq!(
            got[i], want,
            "port {i} receives every message once, in order"
        );
    }
    for (i, ev) in events.iter().enumerate() {
        assert_eq!(ev.len(), sizes.len(), "port {i}: {ev:?}");
        assert!(
            ev.iter().all(|e| matches!(e, SendEvent::Complete(_))),
            "port {i}: {ev:?}"
        );
        // Nothing refused on the way: the acknowledgements on unsequenced
        // frames are taken as such, and no acknowledgement is attached to
        // frames towards a peer whose own frames are unsequenced.
        let s = ports[i].stats();
        assert_eq!(s.bad_frames.total(), 0, "port {i}: {:?}", s.bad_frames);
    }
    // Acknowledged in time over a perfect wire: nothing resent.
    assert_eq!(ports[0].stats().retransmits, 0);
}

#[test]
fn symmetric_routes_keep_their_frames_as_they_were() {
    // Both over the method that never loses: no acknowledgements at all.
    let mut ports = ports_with(0, 0);
    ports[0]
        .send(Time::ZERO, addr(1), &pattern(100, 1))
        .unwrap();
    ports[1]
        .send(Time::ZERO, addr(0), &pattern(100, 2))
        .unwrap();
    let mut buf = vec![0u8; MTU];
    for i in 0..2 {
        let tx = ports[i].poll_transmit(0, Time::ZERO, &mut buf).unwrap();
        let expect = crate::wire::Expect {
            job: config(1 - i).job,
            local: addr(1 - i),
            require_crc: false,
        };
        let frame = crate::wire::parse(&buf[..tx.len], &expect).unwrap();
        assert_eq!(frame.ack(), None, "port {i}");
        assert_ne!(frame.flags() & crate::wire::flags::UNSEQUENCED, 0);
        let route = Route {
            method: 0,
            link: LinkId(i as u32),
        };
        let copy = buf[..tx.len].to_vec();
        assert!(ports[1 - i].handle_frame(Time::ZERO, route, &copy));
    }
    // Both over the method that may lose: acknowledgements as before.
    let mut lossy = ports_with(LOSSY, LOSSY);
    lossy[0]
        .send(Time::ZERO, addr(1), &pattern(100, 1))
        .unwrap();
    let (got, _) = run(&mut lossy);
    assert_eq!(got[1], [pattern(100, 1)]);
    assert!(lossy[1].stats().acks_sent > 0);
}
