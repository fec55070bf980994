//! Ports over a reliable method that moves transfer data itself (as shared
//! memory does): unsequenced frames, back-pressure, bulk transfers, direct
//! messages, departures.

use super::tests::{addr, config, pattern};
use super::*;
use crate::event::{ChannelEvent, ChannelId, SendEvent, TransferError};
use crate::method::{LinkId, MethodCaps};
use crate::wire::{flags, HEADER_LEN};

/// Two ports joined by a perfect, in-order, lossless method, with a fake
/// engine that moves bulk transfers by copying source into destination.
struct Pair {
    ports: [Port; 2],
    now: Time,
    /// Frames refused by a full ring, per receiver, in order.
    held: [Vec<Vec<u8>>; 2],
    /// Frames each side's method has written (into the peer's ring, held
    /// or not), reported to its port as a shared-memory engine does.
    written: [u64; 2],
    /// Whether `run` reports written frames to the ports.
    confirm: bool,
}

const RELIABLE: MethodCaps = MethodCaps {
    mtu: 65_535,
    integrity: true,
    reliable: true,
};

impl Pair {
    fn new(c0: PortConfig, c1: PortConfig) -> Pair {
        let mut ports = [Port::new(c0).unwrap(), Port::new(c1).unwrap()];
        for (i, p) in ports.iter_mut().enumerate() {
            let m = p.add_method(RELIABLE).unwrap();
            p.set_method_bulk(m).unwrap();
            p.set_route(
                Time::ZERO,
                addr(1 - i),
                Route {
                    method: 0,
                    link: LinkId(1 - i as u32),
                },
            )
            .unwrap();
        }
        Pair {
            ports,
            now: Time::ZERO,
            held: [Vec::new(), Vec::new()],
            written: [0, 0],
            confirm: true,
        }
    }

    /// Moves everything until nothing moves; returns the frames that went.
    fn run(&mut self) -> Vec<(usize, Vec<u8>)> {
        let mut sent = Vec::new();
        let mut buf = vec![0u8; RELIABLE.mtu];
        loop {
            let mut moved = false;
            for i in 0..2 {
                // Frames held by back-pressure go first, in order.
                while let Some(f) = self.held[1 - i].first().cloned() {
                    if !self.ports[1 - i].handle_frame(
                        self.now,
                        Route {
                            method: 0,
                            link: LinkId(i as u32),
                        },
                        &f,
                    ) {
                        break;
                    }
                    self.held[1 - i].remove(0);
                    moved = true;
                }
                while let Some(tx) = self.ports[i].poll_transmit(0, self.now, &mut buf) {
                    let f = buf[..tx.len].to_vec();
                    sent.push((i, f.clone()));
                    self.written[i] += 1;
                    moved = true;
                    if !self.held[1 - i].is_empty()
                        || !self.ports[1 - i].handle_frame(
                            self.now,
                            Route {
                                method: 0,
                                link: LinkId(i as u32),
                            },
                            &f,
                        )
                    {
                        self.held[1 - i].push(f);
                    }
                }
                if self.confirm {
                    self.ports[i].confirm_written(self.now, addr(1 - i), self.written[i]);
                }
                while let Some(b) = self.ports[i].next_outbound_bulk() {
                    moved = true;
                    let data = self.ports[i].bulk_source(b.token).unwrap().to_vec();
                    assert_eq!(data.len() as u64, b.len);
                    let from = self.ports[i].local();
                    let now = self.now;
                    match self.ports[1 - i]
                        .inbound_bulk(now, from, b.kind, b.channel, b.transfer, b.len)
                    {
                        Some(t) => {
                            self.ports[1 - i]
                                .bulk_dest(t)
                                .unwrap()
                                .copy_from_slice(&data);
                            self.ports[1 - i].inbound_bulk_done(now, t);
                        }
                        None => panic!("nobody waits for bulk transfer {b:?}"),
                    }
                    self.ports[i].outbound_bulk_done(now, b.token);
                }
            }
            if !moved {
                return sent;
            }
        }
    }
}

fn events(p: &mut Port) -> Vec<ChannelEvent> {
    std::iter::from_fn(|| p.poll_channel_event()).collect()
}

#[test]
fn frames_over_a_reliable_method_carry_no_sequence_number_and_no_crc() {
    let mut pair = Pair::new(config(0), config(1));
    let h: Vec<_> = (0..5u8)
        .map(|i| {
            pair.ports[0]
                .send(pair.now, addr(1), &pattern(100 + usize::from(i), i))
                .unwrap()
        })
        .collect();
    let sent = pair.run();
    assert_eq!(
        sent.len(),
        5,
        "no acknowledgements either, and no bundles (only sequenced frames carry them)"
    );
    for (_, f) in &sent {
        let fl = f[3];
        assert_ne!(fl & flags::UNSEQUENCED, 0);
        assert_eq!(fl & (flags::CRC | flags::ACK | flags::BUNDLE), 0);
    }
    // Complete as soon as written.
    let done: Vec<_> = std::iter::from_fn(|| pair.ports[0].poll_send_event()).collect();
    assert_eq!(
        done,
        h.into_iter().map(SendEvent::Complete).collect::<Vec<_>>()
    );
    let mut got = Vec::new();
    while let Some(d) = pair.ports[1].poll_delivery() {
        got.push(pair.ports[1].message(&d).unwrap().to_vec());
        pair.ports[1].release(d.slot).unwrap();
    }
    assert_eq!(
        got,
        (0..5u8)
            .map(|i| pattern(100 + usize::from(i), i))
            .collect::<Vec<_>>()
    );
    assert_eq!(
        pair.ports[0].poll_timeout(),
        None,
        "no timers for unsequenced peers"
    );
}

#[test]
fn a_full_ring_refuses_unsequenced_frames_until_released() {
    let mut c1 = config(1);
    c1.ring_blocks = 4;
    c1.eager_limit = 1024;
    let mut pair = Pair::new(config(0), c1);
    for i in 0..6u8 {
        pair.ports[0]
            .send(pair.now, addr(1), &pattern(200, i))
            .unwrap();
    }
    pair.run();
    assert_eq!(
        pair.held[1].len(),
        2,
        "two frames wait outside the full ring"
    );
    let mut got = Vec::new();
    while let Some(d) = pair.ports[1].poll_delivery() {
        got.push(pair.ports[1].message(&d).unwrap().to_vec());
        pair.ports[1].release(d.slot).unwrap();
    }
    pair.run();
    while let Some(d) = pair.ports[1].poll_delivery() {
        got.push(pair.ports[1].message(&d).unwrap().to_vec());
        pair.ports[1].release(d.slot).unwrap();
    }
    assert_eq!(
        got,
        (0..6u8).map(|i| pattern(200, i)).collect::<Vec<_>>(),
        "nothing lost, in order"
    );
}

#[test]
fn unsequenced_frames_from_a_method_that_may_lose_are_refused() {
    let mut pair = Pair::new(config(0), config(1));
    pair.ports[0].send(pair.now, addr(1), b"x").unwrap();
    let mut buf = vec![0u8; 2000];
    let tx = pair.ports[0].poll_transmit(0, pair.now, &mut buf).unwrap();
    let mut lossy = Port::new(config(1)).unwrap();
    lossy
        .add_method(MethodCaps {
            mtu: 1500,
            integrity: true,
            reliable: false,
        })
        .unwrap();
    assert!(lossy.handle_frame(
        Time::ZERO,
        Route {
            method: 0,
            link: LinkId(0)
        },
        &buf[..tx.len]
    ));
    assert_eq!(lossy.stats().bad_frames.bad_flags, 1);
    assert!(lossy.poll_delivery().is_none());
}

#[test]
fn normal_channel_data_moves_as_one_bulk_transfer() {
    let mut pair = Pair::new(config(0), config(1));
    let ch = pair.ports[1].open_normal_channel().unwrap();
    pair.ports[1]
        .post(pair.now, ch, None, vec![0; 5 << 20])
        .unwrap();
    let msg = pattern(4 << 20, 3);
    let h = pair.ports[0]
        .send_on_channel(pair.now, addr(1), ch, msg.clone())
        .unwrap();
    let sent = pair.run();
    assert!(
        sent.iter().all(|(_, f)| f.len() < HEADER_LEN + 64),
        "only control frames: the data went as a bulk transfer"
    );
    assert_eq!(
        events(&mut pair.ports[0]),
        vec![ChannelEvent::SendDone {
            handle: h,
            buffer: msg.clone()
        }]
    );
    match &events(&mut pair.ports[1])[..] {
        [ChannelEvent::Received { buffer, len, .. }] => assert_eq!(&buffer[..*len], &msg[..]),
        other => panic!("{other:?}"),
    }
}

#[test]
fn rma_moves_as_bulk_transfers_and_checks_still_apply() {
    let mut pair = Pair::new(config(0), config(1));
    let region = pair.ports[1].register(vec![0; 1 << 20]);
    let ch = pair.ports[1].open_rma_channel(region, 9).unwrap();
    let data = pattern(300_000, 5);
    let put = pair.ports[0]
        .put(pair.now, addr(1), ch, 9, 1000, data.clone())
        .unwrap();
    pair.run();
    assert_eq!(
        events(&mut pair.ports[0]),
        vec![ChannelEvent::PutDone {
            handle: put,
            buffer: data.clone()
        }]
    );
    assert_eq!(
        &pair.ports[1].region(region).unwrap()[1000..301_000],
        &data[..]
    );
    let get = pair.ports[0]
        .get(pair.now, addr(1), ch, 9, 1000, vec![0; 300_000])
        .unwrap();
    let bad = pair.ports[0]
        .get(pair.now, addr(1), ch, 8, 0, vec![0; 10])
        .unwrap();
    pair.run();
    let ev = events(&mut pair.ports[0]);
    assert!(ev.contains(&ChannelEvent::GetDone {
        handle: get,
        buffer: data
    }));
    assert!(ev.iter().any(|e| matches!(e, ChannelEvent::RmaFailed { handle, error: TransferError::BadKey, .. } if *handle == bad)));
    assert!(events(&mut pair.ports[1]).is_empty());
}

#[test]
fn direct_messages_skip_framing_only_when_nothing_is_queued() {
    let mut pair = Pair::new(config(0), config(1));
    let route = pair.ports[0]
        .direct_route(addr(1))
        .expect("idle reliable peer");
    assert_eq!(route.link, LinkId(1));
    let h = pair.ports[0].record_direct_send().unwrap();
    assert_eq!(
        pair.ports[0].poll_send_event(),
        Some(SendEvent::Complete(h))
    );
    assert!(pair.ports[1].deliver_direct(addr(0), b"direct"));
    let d = pair.ports[1].poll_delivery().unwrap();
    assert_eq!(pair.ports[1].message(&d).unwrap(), b"direct");
    // Something queued: no shortcut (it would overtake).
    pair.ports[0].send(pair.now, addr(1), b"framed").unwrap();
    assert_eq!(pair.ports[0].direct_route(addr(1)), None);
    pair.run();
    assert!(pair.ports[0].direct_route(addr(1)).is_some());
}

#[test]
fn a_peer_that_goes_away_fails_everything_with_it() {
    let mut pair = Pair::new(config(0), config(1));
    let ch = pair.ports[1].open_normal_channel().unwrap();
    // A send waiting for a buffer, a get waiting for data, an incoming
    // transfer the receiver accepted.
    let s = pair.ports[0]
        .send_on_channel(pair.now, addr(1), ch, vec![1; 100])
        .unwrap();
    let g = pair.ports[0]
        .get(pair.now, addr(1), ChannelId(40), 0, 0, vec![0; 10])
        .unwrap();
    pair.ports[0].peer_gone(pair.now, addr(1));
    let ev = events(&mut pair.ports[0]);
    let gone = TransferError::PeerUnreachable(addr(1));
    assert!(ev.iter().any(|e| matches!(e, ChannelEvent::SendFailed { handle, error, .. } if *handle == s && *error == gone)));
    assert!(ev.iter().any(|e| matches!(e, ChannelEvent::RmaFailed { handle, error, .. } if *handle == g && *error == gone)));
    assert_eq!(pair.ports[0].outstanding_sends(), 0);
    // The departure itself is reported once, for receivers waiting on it.
    assert_eq!(
        pair.ports[0].poll_peer_event(),
        Some(PeerEvent::Down(addr(1)))
    );
    assert_eq!(pair.ports[0].poll_peer_event(), None);
    // Also for a peer nothing was ever sent to.
    pair.ports[0].peer_gone(pair.now, addr(7));
    assert_eq!(
        pair.ports[0].poll_peer_event(),
        Some(PeerEvent::Down(addr(7)))
    );
}

#[test]
fn sends_over_a_reliable_method_complete_only_when_written() {
    let mut pair = Pair::new(config(0), config(1));
    pair.confirm = false;
    let h: Vec<_> = (0..3u8)
        .map(|i| {
            pair.ports[0]
                .send(pair.now, addr(1), &pattern(64, i))
                .unwrap()
        })
        .collect();
    pair.run();
    assert_eq!(
        pair.ports[0].poll_send_event(),
        None,
        "handed over but not reported written: not complete"
    );
    // The method reports two of the three written, then all three.
    pair.ports[0].confirm_written(pair.now, addr(1), 2);
    let done: Vec<_> = std::iter::from_fn(|| pair.ports[0].poll_send_event()).collect();
    assert_eq!(
        done,
        vec![SendEvent::Complete(h[0]), SendEvent::Complete(h[1])]
    );
    // The third waits in the method: no timer, no retransmission, however
    // long it waits.
    assert_eq!(pair.ports[0].poll_timeout(), None);
    let later = pair.now + std::time::Duration::from_secs(30);
    pair.ports[0].handle_timeout(later);
    let mut buf = vec![0u8; RELIABLE.mtu];
    assert!(pair.ports[0].poll_transmit(0, later, &mut buf).is_none());
    assert_eq!(pair.ports[0].stats().retransmits, 0);
    pair.ports[0].confirm_written(pair.now, addr(1), 3);
    assert_eq!(
        pair.ports[0].poll_send_event(),
        Some(SendEvent::Complete(h[2]))
    );
    // A stale or repeated report changes nothing.
    pair.ports[0].confirm_written(pair.now, addr(1), 1);
    assert_eq!(pair.ports[0].poll_send_event(), None);
}
