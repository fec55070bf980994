//! The two ends of the copy-free bulk path, over a hand-driven wire:
//! placement (the receiver asks `placement` for every frame the way a
//! peeking method does, and transfer data lands straight in the posted
//! buffer) and gathered sends (the sender's payload goes out from the
//! application's buffer through `poll_transmit_gather`).

use super::super::tests::{addr, config, pattern, Net, Wired};
use super::*;
use crate::event::ChannelEvent;
use crate::method::LinkId;
use std::time::Duration;

const MTU: usize = 9000;

/// What the placing receiver did with the frames it was given.
#[derive(Default, Debug)]
struct Placing {
    placed: usize,
    ordinary: usize,
}

/// Hands `frames` to their ports as a placing method would: the header
/// first, then the payload into the place the port names (flipping a
/// payload byte of the frames `corrupt` picks), else the whole frame.
fn deliver_placing(
    net: &mut Net,
    frames: &[Wired],
    counts: &mut Placing,
    corrupt: &mut dyn FnMut(&Wired) -> bool,
) {
    for f in frames {
        let route = Route {
            method: 0,
            link: LinkId(f.from as u32),
        };
        let (head, payload) = f.bytes.split_at(HEADER_LEN);
        let port = &mut net.ports[f.to];
        match port.placement(route, head) {
            Some(dst) => {
                assert_eq!(dst.len(), payload.len(), "a place is the payload's size");
                dst.copy_from_slice(payload);
                if corrupt(f) {
                    dst[dst.len() / 2] ^= 0x40;
                }
                port.handle_placed_frame(net.now, route, head);
                counts.placed += 1;
            }
            None => {
                port.handle_frame(net.now, route, &f.bytes);
                counts.ordinary += 1;
            }
        }
    }
}

/// Runs the wire until nothing moves; `shuffle` may reorder or drop each
/// batch of frames in flight.
fn run_placing(
    net: &mut Net,
    counts: &mut Placing,
    shuffle: &mut dyn FnMut(Vec<Wired>) -> Vec<Wired>,
    corrupt: &mut dyn FnMut(&Wired) -> bool,
) -> Vec<Vec<ChannelEvent>> {
    net.run_channels(|net, frames| {
        let frames = shuffle(frames);
        deliver_placing(net, &frames, counts, corrupt);
    })
}

fn received(ev: &[ChannelEvent]) -> Vec<Vec<u8>> {
    ev.iter()
        .filter_map(|e| match e {
            ChannelEvent::Received { buffer, len, .. } => Some(buffer[..*len].to_vec()),
            _ => None,
        })
        .collect()
}

fn data_frames_to(frames: &[Wired], to: usize) -> usize {
    frames
        .iter()
        .filter(|f| f.to == to && f.kind() == FrameType::Data)
        .count()
}

#[test]
fn transfer_data_in_order_is_placed_whole_and_arrives_intact() {
    for announce in [false, true] {
        let mut net = Net::with_mtu(vec![config(0), config(1)], MTU);
        let ch = net.ports[1].open_normal_channel().unwrap();
        // Announced to the sender (its data starts the transfer) or to
        // anybody (the sender asks first, the receiver answers READY).
        let from = announce.then(|| addr(0));
        net.ports[1]
            .post(net.now, ch, from, vec![0; 200_000])
            .unwrap();
        let mut counts = Placing::default();
        run_placing(&mut net, &mut counts, &mut |f| f, &mut |_| false);
        let msg = pattern(150_000, 3);
        net.ports[0]
            .send_on_channel(net.now, addr(1), ch, msg.clone())
            .unwrap();
        let mut sent_data = 0;
        let ev = run_placing(
            &mut net,
            &mut counts,
            &mut |f| {
                sent_data += data_frames_to(&f, 1);
                f
            },
            &mut |_| false,
        );
        assert_eq!(received(&ev[1]), vec![msg], "announce {announce}");
        // Every data frame of the transfer was placed, nothing else was;
        // except, when the buffer was announced, the first: it is the first
        // sequenced frame from the sender, and opens its sequence space
        // (the ordinary path) where a request did that otherwise.
        let frames_of_msg = 150_000usize.div_ceil(MTU - HEADER_LEN);
        let first_opens = usize::from(announce);
        assert_eq!(
            counts.placed,
            frames_of_msg - first_opens,
            "announce {announce}"
        );
        assert_eq!(sent_data, frames_of_msg, "announce {announce}");
        assert_eq!(net.ports[1].stats().bad_frames.total(), 0);
    }
}

#[test]
fn only_transfer_data_at_or_beyond_the_frontier_and_not_yet_received_is_placed() {
    // Without a CRC32C, so that the frame starting the transfer into the
    // announced buffer may be placed too (see the next tests).
    let mut configs = vec![config(0), config(1)];
    for c in &mut configs {
        c.crc = false;
    }
    let mut net = Net::with_mtu(configs, MTU);
    let ch = net.ports[1].open_normal_channel().unwrap();
    net.ports[1]
        .post(net.now, ch, Some(addr(0)), vec![0; 100_000])
        .unwrap();
    let mut counts = Placing::default();
    run_placing(&mut net, &mut counts, &mut |f| f, &mut |_| false);
    // A system-channel message is never placed.
    let mut counts = Placing::default();
    net.ports[0].send(net.now, addr(1), b"hello").unwrap();
    let frames = net.transmit();
    deliver_placing(&mut net, &frames, &mut counts, &mut |_| false);
    assert_eq!((counts.placed, counts.ordinary), (0, frames.len()));

    let msg = pattern(4 * (MTU - HEADER_LEN), 9);
    net.ports[0]
        .send_on_channel(net.now, addr(1), ch, msg.clone())
        .unwrap();
    let frames: Vec<Wired> = net
        .transmit()
        .into_iter()
        .filter(|f| f.kind() == FrameType::Data)
        .collect();
    assert_eq!(frames.len(), 4);
    let route = Route {
        method: 0,
        link: LinkId(0),
    };
    let header = |i: usize| &frames[i].bytes[..HEADER_LEN];
    // The third frame overtook the first two: it lands beyond the frontier.
    assert!(net.ports[1].placement(route, header(2)).is_some());
    deliver_placing(&mut net, &frames[2..3], &mut counts, &mut |_| false);
    // Now the first two lie before the frontier: the ordinary path.
    assert!(net.ports[1].placement(route, header(0)).is_none());
    assert!(net.ports[1].placement(route, header(1)).is_none());
    // A duplicate of a frame received is not placed either.
    assert!(net.ports[1].placement(route, header(2)).is_none());
    // The fourth is beyond the frontier again.
    assert!(net.ports[1].placement(route, header(3)).is_some());
    let mut counts = Placing::default();
    deliver_placing(&mut net, &frames, &mut counts, &mut |_| false);
    assert_eq!((counts.placed, counts.ordinary), (1, 3));
    let ev = run_placing(&mut net, &mut counts, &mut |f| f, &mut |_| false);
    assert_eq!(received(&ev[1]), vec![msg]);
    assert_eq!(net.ports[1].stats().duplicates, 1);
}

#[test]
fn a_placed_frame_that_fails_its_crc_is_dropped_and_its_range_rewritten() {
    let mut net = Net::with_mtu(vec![config(0), config(1)], MTU);
    let ch = net.ports[1].open_normal_channel().unwrap();
    net.ports[1]
        .post(net.now, ch, Some(addr(0)), vec![0; 100_000])
        .unwrap();
    let mut counts = Placing::default();
    run_placing(&mut net, &mut counts, &mut |f| f, &mut |_| false);
    let msg = pattern(90_000, 5);
    net.ports[0]
        .send_on_channel(net.now, addr(1), ch, msg.clone())
        .unwrap();
    let mut data_seen = 0;
    let ev = run_placing(&mut net, &mut counts, &mut |f| f, &mut |f| {
        // Corrupt the third data frame's first copy only.
        if f.kind() == FrameType::Data && f.to == 1 {
            data_seen += 1;
            return data_seen == 3;
        }
        false
    });
    assert_eq!(net.ports[1].stats().bad_frames.bad_checksum, 1);
    assert_eq!(received(&ev[1]), vec![msg]);
}

#[test]
fn placed_transfers_survive_loss_and_reordering_intact() {
    for seed in 1..=8u64 {
        let mut net = Net::with_mtu(vec![config(0), config(1)], MTU);
        let ch = net.ports[1].open_normal_channel().unwrap();
        let mut counts = Placing::default();
        let mut rng = seed;
        let mut next = move || {
            // xorshift: a fixed, seeded sequence.
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        let mut expected = Vec::new();
        for round in 0..4u8 {
            net.ports[1]
                .post(
                    net.now,
                    ch,
                    (round % 2 == 0).then(|| addr(0)),
                    vec![0; 64_000],
                )
                .unwrap();
            let msg = pattern(40_000 + usize::from(round) * 5_000, round);
            net.ports[0]
                .send_on_channel(net.now, addr(1), ch, msg.clone())
                .unwrap();
            expected.push(msg);
            let ev = run_placing(
                &mut net,
                &mut counts,
                &mut |mut f| {
                    // Drop about one frame in eight, swap neighbours often.
                    f.retain(|_| !next().is_multiple_of(8));
                    for i in 1..f.len() {
                        if next().is_multiple_of(3) {
                            f.swap(i - 1, i);
                        }
                    }
                    f
                },
                &mut |_| false,
            );
            assert_eq!(
                received(&ev[1]),
                vec![expected[usize::from(round)].clone()],
                "seed {seed} round {round}"
            );
        }
        assert!(counts.placed > 0, "seed {seed}: {counts:?}");
    }
}

/// A [`GatherSend`](crate::method::GatherSend) that keeps what it is given,
/// joined, as the wire would.
struct Collect {
    min: usize,
    sent: Vec<(LinkId, Vec<u8>)>,
}

impl crate::method::GatherSend for Collect {
    fn min_payload(&self) -> usize {
        self.min
    }

    fn send(&mut self, link: LinkId, header: &[u8], payload: &[u8]) {
        assert_eq!(header.len(), HEADER_LEN);
        self.sent.push((link, [header, payload].concat()));
    }
}

#[test]
fn large_payloads_are_sent_gathered_and_arrive_intact_with_their_crc() {
    let mut net = Net::with_mtu(vec![config(0), config(1)], MTU);
    let ch = net.ports[1].open_normal_channel().unwrap();
    net.ports[1]
        .post(net.now, ch, None, vec![0; 300_000])
        .unwrap();
    let msg = pattern(250_000, 4);
    net.ports[0]
        .send_on_channel(net.now, addr(1), ch, msg.clone())
        .unwrap();
    let mut gathered = 0;
    let mut whole = 0;
    let mut dropped = 0;
    let mut events = Vec::new();
    let mut buf = vec![0u8; MTU];
    for _ in 0..100_000 {
        let mut frames = Vec::new();
        for i in 0..2 {
            let mut out = Collect {
                min: 1000,
                sent: Vec::new(),
            };
            while let Some(tx) = net.ports[i].poll_transmit_gather(0, net.now, &mut buf, &mut out) {
                let bytes = match out.sent.pop() {
                    Some((link, bytes)) => {
                        assert_eq!(link, tx.link);
                        assert_eq!(bytes.len(), tx.len);
                        gathered += 1;
                        bytes
                    }
                    None => {
                        whole += 1;
                        buf[..tx.len].to_vec()
                    }
                };
                // The tenth frame is lost: its resend is gathered too.
                if whole + gathered == 10 {
                    dropped += 1;
                    continue;
                }
                frames.push(Wired {
                    from: i,
                    to: tx.link.0 as usize,
                    bytes,
                });
            }
        }
        while let Some(e) = net.ports[1].poll_channel_event() {
            events.push(e);
        }
        if frames.is_empty() {
            if !net.advance_to_next_timer() {
                break;
            }
            continue;
        }
        net.now = net.now + Duration::from_micros(1);
        net.deliver(&frames);
    }
    assert_eq!(received(&events), vec![msg]);
    assert_eq!(dropped, 1);
    // Every data frame of the transfer (28, one resent) went gathered; the
    // request, READY and acknowledgements (small) whole.
    assert_eq!(gathered, 250_000usize.div_ceil(MTU - HEADER_LEN) + 1);
    assert!(whole >= 3, "{whole}");
    assert_eq!(net.ports[1].stats().bad_frames.total(), 0);
}

/// The first frame of a transfer into an announced buffer is placed only
/// where no CRC32C is checked after the write: with one, a frame failing it
/// could leave bytes past the end of the message that really comes.
#[test]
fn an_announced_buffer_takes_a_first_frame_in_place_only_without_a_crc() {
    for crc in [true, false] {
        let mut configs = vec![config(0), config(1)];
        for c in &mut configs {
            c.crc = crc;
        }
        let mut net = Net::with_mtu(configs, MTU);
        let ch = net.ports[1].open_normal_channel().unwrap();
        let mut counts = Placing::default();
        // A first message opens the sender's sequence space.
        net.ports[1]
            .post(net.now, ch, Some(addr(0)), vec![0; 50_000])
            .unwrap();
        net.ports[0]
            .send_on_channel(net.now, addr(1), ch, pattern(20_000, 1))
            .unwrap();
        run_placing(&mut net, &mut counts, &mut |f| f, &mut |_| false);
        net.ports[1]
            .post(net.now, ch, Some(addr(0)), vec![0; 50_000])
            .unwrap();
        run_placing(&mut net, &mut counts, &mut |f| f, &mut |_| false);
        let msg = pattern(30_000, 2);
        net.ports[0]
            .send_on_channel(net.now, addr(1), ch, msg.clone())
            .unwrap();
        let frames = net.transmit();
        let first = frames
            .iter()
            .find(|f| f.kind() == FrameType::Data)
            .expect("the data starts at once");
        let route = Route {
            method: 0,
            link: LinkId(0),
        };
        let placed = net.ports[1]
            .placement(route, &first.bytes[..HEADER_LEN])
            .is_some();
        assert_eq!(placed, !crc, "crc {crc}");
        let mut counts = Placing::default();
        deliver_placing(&mut net, &frames, &mut counts, &mut |_| false);
        let ev = run_placing(&mut net, &mut counts, &mut |f| f, &mut |_| false);
        assert_eq!(received(&ev[1]), vec![msg], "crc {crc}");
    }
}
