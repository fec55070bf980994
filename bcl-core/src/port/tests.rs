//! Behaviour of the port over a hand-driven in-memory wire.

use super::peer::Peer;
use super::*;
use crate::addr::JobKey;
use crate::event::{ChannelEvent, SendFailure};
use crate::method::{LinkId, MethodCaps};
use crate::wire::{self, FrameType, HEADER_LEN};
use std::time::Duration;

pub(super) const MTU: usize = 1500;

pub(super) fn caps(mtu: usize) -> MethodCaps {
    MethodCaps {
        mtu,
        integrity: false,
        reliable: false,
    }
}

pub(super) fn addr(i: usize) -> ProcessAddr {
    ProcessAddr::new(i as u32 + 1, 0)
}

pub(super) fn config(i: usize) -> PortConfig {
    let mut c = PortConfig::new(addr(i), JobKey(7));
    c.epoch = 1000 + i as u32;
    // Congestion control on from the first frame (off by default), so that
    // every test here runs through it too;
    // tests that count the frames one transmit round puts out start at the
    // window's bound.
    c.congestion.mode = crate::CongestionMode::On;
    c.congestion.initial_window = 0;
    // Liveness off: these tests run "until nothing moves and no timer is
    // left", and a buffer posted for a live peer that never sends keeps it
    // pinged for ever (liveness_tests.rs turns it on).
    c.liveness.enabled = false;
    c
}

/// A configuration that sends one frame per message (no bundles), for
/// tests that count frames to check per-frame mechanics.
pub(super) fn unbundled(i: usize) -> PortConfig {
    let mut c = config(i);
    c.bundle = false;
    c
}

/// A frame on the wire.
#[derive(Clone, Debug)]
pub(super) struct Wired {
    pub from: usize,
    pub to: usize,
    pub bytes: Vec<u8>,
}

impl Wired {
    pub fn kind(&self) -> FrameType {
        FrameType::from_code(self.bytes[1]).unwrap()
    }
    pub fn seq(&self) -> u32 {
        u32::from_be_bytes(self.bytes[24..28].try_into().unwrap())
    }
}

/// Ports joined by a wire the test controls frame by frame.
pub(super) struct Net {
    pub ports: Vec<Port>,
    pub now: Time,
    mtu: usize,
}

impl Net {
    pub fn new(configs: Vec<PortConfig>) -> Net {
        Net::with_mtu(configs, MTU)
    }

    pub fn with_mtu(configs: Vec<PortConfig>, mtu: usize) -> Net {
        let mut ports: Vec<Port> = configs.into_iter().map(|c| Port::new(c).unwrap()).collect();
        let n = ports.len();
        for (i, p) in ports.iter_mut().enumerate() {
            assert_eq!(p.add_method(caps(mtu)).unwrap(), 0);
            for j in 0..n {
                if i != j {
                    p.set_route(
                        Time::ZERO,
                        addr(j),
                        Route {
                            method: 0,
                            link: LinkId(j as u32),
                        },
                    )
                    .unwrap();
                }
            }
        }
        Net {
            ports,
            now: Time::ZERO,
            mtu,
        }
    }

    /// Ports already set up (routes are the caller's: link `j` is port
    /// `j`).
    pub fn with_ports(ports: Vec<Port>, mtu: usize) -> Net {
        Net {
            ports,
            now: Time::ZERO,
            mtu,
        }
    }

    /// Every frame the ports want to send now.
    pub fn transmit(&mut self) -> Vec<Wired> {
        let mut out = Vec::new();
        let mut buf = vec![0u8; self.mtu];
        for (i, p) in self.ports.iter_mut().enumerate() {
            while let Some(tx) = p.poll_transmit(0, self.now, &mut buf) {
                assert!(tx.len <= self.mtu);
                out.push(Wired {
                    from: i,
                    to: tx.link.0 as usize,
                    bytes: buf[..tx.len].to_vec(),
                });
            }
        }
        out
    }

    pub fn deliver(&mut self, frames: &[Wired]) {
        for f in frames {
            let route = Route {
                method: 0,
                link: LinkId(f.from as u32),
            };
            self.ports[f.to].handle_frame(self.now, route, &f.bytes);
        }
    }

    pub fn advance(&mut self, d: Duration) {
        self.now = self.now + d;
        for p in &mut self.ports {
            p.handle_timeout(self.now);
        }
    }

    /// Jumps to the earliest timer of any port and runs it.
    pub fn advance_to_next_timer(&mut self) -> bool {
        let Some(t) = self.ports.iter().filter_map(|p| p.poll_timeout()).min() else {
            return false;
        };
        if t > self.now {
            self.now = t;
        }
        for p in &mut self.ports {
            p.handle_timeout(self.now);
        }
        true
    }

    /// Moves frames through a perfect wire, 1 µs per hop, until nothing
    /// moves and no timer is left, releasing every delivery at once.
    pub fn run_perfect(&mut self) -> Vec<(usize, ProcessAddr, Vec<u8>)> {
        let mut got = Vec::new();
        for _ in 0..100_000 {
            let frames = self.transmit();
            if frames.is_empty() {
                if !self.advance_to_next_timer() {
                    return got;
                }
                continue;
            }
            self.now = self.now + Duration::from_micros(1);
            self.deliver(&frames);
            got.extend(self.drain_deliveries());
        }
        panic!("did not settle");
    }

    /// Moves frames until nothing moves and no timer is left, 1 µs per
    /// hop: each batch of frames in flight goes to `wire`, which delivers
    /// what it keeps (and may drop, reorder or alter frames). Returns the
    /// channel events of each port.
    pub fn run_channels(
        &mut self,
        mut wire: impl FnMut(&mut Net, Vec<Wired>),
    ) -> Vec<Vec<ChannelEvent>> {
        let mut events: Vec<Vec<ChannelEvent>> = self.ports.iter().map(|_| Vec::new()).collect();
        for _ in 0..2_000_000 {
            let frames = self.transmit();
            for (i, p) in self.ports.iter_mut().enumerate() {
                while let Some(e) = p.poll_channel_event() {
                    events[i].push(e);
                }
            }
            if frames.is_empty() {
                if !self.advance_to_next_timer() {
                    return events;
                }
                continue;
            }
            self.now = self.now + Duration::from_micros(1);
            wire(self, frames);
            self.drain_deliveries();
        }
        panic!("did not settle");
    }

    pub fn drain_deliveries(&mut self) -> Vec<(usize, ProcessAddr, Vec<u8>)> {
        let mut got = Vec::new();
        for (i, p) in self.ports.iter_mut().enumerate() {
            while let Some(d) = p.poll_delivery() {
                got.push((i, d.from, p.message(&d).unwrap().to_vec()));
                p.release(d.slot).unwrap();
            }
        }
        got
    }

    pub fn send_events(&mut self, i: usize) -> Vec<SendEvent> {
        std::iter::from_fn(|| self.ports[i].poll_send_event()).collect()
    }
}

pub(super) fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

#[test]
fn a_message_is_delivered_and_completes_when_acknowledged() {
    let mut net = Net::new(vec![config(0), config(1)]);
    let h = net.ports[0].send(net.now, addr(1), b"hello").unwrap();
    let frames = net.transmit();
    assert_eq!(frames.len(), 1);
    net.deliver(&frames);
    let got = net.drain_deliveries();
    assert_eq!(got, vec![(1, addr(0), b"hello".to_vec())]);
    assert!(
        net.send_events(0).is_empty(),
        "not complete before the acknowledgement"
    );
    // The receiver delays its acknowledgement…
    assert!(net.transmit().is_empty());
    net.advance(Duration::from_micros(20));
    let acks = net.transmit();
    assert_eq!(acks.len(), 1);
    assert_eq!(acks[0].kind(), FrameType::Ack);
    net.deliver(&acks);
    assert_eq!(net.send_events(0), vec![SendEvent::Complete(h)]);
    assert_eq!(net.ports[0].outstanding_sends(), 0);
}

#[test]
fn a_reply_carries_the_acknowledgement() {
    let mut net = Net::new(vec![config(0), config(1)]);
    let h = net.ports[0].send(net.now, addr(1), b"ping").unwrap();
    let f = net.transmit();
    net.deliver(&f);
    net.drain_deliveries();
    net.ports[1].send(net.now, addr(0), b"pong").unwrap();
    let f = net.transmit();
    assert_eq!(f.len(), 1, "one DATA frame, no separate ACK");
    assert_eq!(f[0].kind(), FrameType::Data);
    net.deliver(&f);
    assert_eq!(net.send_events(0), vec![SendEvent::Complete(h)]);
    assert_eq!(net.ports[1].stats().acks_sent, 0);
}

#[test]
fn a_deadline_that_a_reply_met_is_not_a_timeout_to_sleep_for() {
    let mut net = Net::new(vec![config(0), config(1)]);
    net.ports[0].send(net.now, addr(1), b"ping").unwrap();
    let f = net.transmit();
    net.deliver(&f);
    net.drain_deliveries();
    // The receiver's delayed acknowledgement is due in 20 µs...
    let ack_due = net.now + Duration::from_micros(20);
    assert_eq!(net.ports[1].poll_timeout(), Some(ack_due));
    // ...until the reply carries it: then only the reply's retransmission
    // timeout is left.
    net.ports[1].send(net.now, addr(0), b"pong").unwrap();
    assert_eq!(net.transmit().len(), 1);
    let stale = net.ports[1].poll_timeout();
    assert_eq!(stale, Some(ack_due), "the heap entry is left in place");
    net.ports[1].drop_stale_timers();
    let next = net.ports[1].poll_timeout().unwrap();
    assert!(next > ack_due, "{next:?} is the retransmission timeout");
    // Nothing was due at the stale instant, and the real deadline still
    // fires: the unanswered pong is resent after its timeout.
    net.advance(Duration::from_micros(20));
    assert!(net.transmit().is_empty());
    net.now = next;
    net.ports[1].handle_timeout(next);
    let resent = net.transmit();
    assert_eq!(resent.len(), 1);
    assert_eq!(resent[0].kind(), FrameType::Data);
    assert_eq!(net.ports[1].stats().retransmits, 1);
}

#[test]
fn acknowledgement_is_immediate_after_ack_every_frames() {
    let mut c = config(1);
    c.ack_every = 4;
    let mut net = Net::new(vec![unbundled(0), c]);
    for i in 0..4u8 {
        net.ports[0].send(net.now, addr(1), &[i]).unwrap();
    }
    let f = net.transmit();
    assert_eq!(f.len(), 4);
    net.deliver(&f);
    let acks = net.transmit();
    assert_eq!(acks.len(), 1, "ack without waiting for the delay");
    assert_eq!(acks[0].kind(), FrameType::Ack);
    net.deliver(&acks);
    assert_eq!(net.send_events(0).len(), 4);
}

#[test]
fn large_messages_are_fragmented_and_reassembled_intact() {
    let mut net = Net::new(vec![config(0), config(1)]);
    let msg = pattern(16 * 1024, 3);
    net.ports[0].send(net.now, addr(1), &msg).unwrap();
    let f = net.transmit();
    assert_eq!(f.len(), msg.len().div_ceil(MTU - HEADER_LEN));
    net.deliver(&f);
    let got = net.drain_deliveries();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].2, msg);
}

#[test]
fn empty_messages_are_messages_too() {
    let mut net = Net::new(vec![config(0), config(1)]);
    net.ports[0].send(net.now, addr(1), b"").unwrap();
    net.ports[0].send(net.now, addr(1), b"x").unwrap();
    let got = net.run_perfect();
    assert_eq!(got, vec![(1, addr(0), vec![]), (1, addr(0), b"x".to_vec())]);
    assert_eq!(net.send_events(0).len(), 2);
}

#[test]
fn a_lost_fragment_is_nakked_and_resent_selectively() {
    let mut net = Net::new(vec![config(0), config(1)]);
    let msg = pattern(10_000, 9);
    net.ports[0].send(net.now, addr(1), &msg).unwrap();
    let mut f = net.transmit();
    let lost = f.remove(3);
    net.deliver(&f);
    assert!(net.drain_deliveries().is_empty());
    let naks = net.transmit();
    assert_eq!(naks.len(), 1);
    assert_eq!(naks[0].kind(), FrameType::Nak);
    // The NAK comes back a while later; the path has never reordered, so
    // the frame overtaken is judged lost at once.
    net.now = net.now + Duration::from_micros(150);
    net.deliver(&naks);
    let resent = net.transmit();
    assert_eq!(resent.len(), 1, "only the missing fragment is resent");
    assert_eq!(resent[0].seq(), lost.seq());
    assert_eq!(
        resent[0].bytes[HEADER_LEN..],
        lost.bytes[HEADER_LEN..],
        "same payload"
    );
    net.deliver(&resent);
    let got = net.drain_deliveries();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].2, msg);
    assert_eq!(net.ports[0].stats().retransmits, 1);
    assert_eq!(
        net.ports[0].stats().timeouts,
        0,
        "recovered without a timeout"
    );
}

#[test]
fn a_lost_lone_frame_is_recovered_by_timeout_with_backoff() {
    let mut net = Net::new(vec![config(0), config(1)]);
    let h = net.ports[0].send(net.now, addr(1), b"lonely").unwrap();
    let first = net.transmit();
    assert_eq!(first.len(), 1);
    // Lost. Nothing happens before the initial RTO (1 ms).
    net.advance(Duration::from_micros(999));
    assert!(net.transmit().is_empty());
    net.advance(Duration::from_micros(1));
    let again = net.transmit();
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].bytes, first[0].bytes, "the same frame, unchanged");
    // Lost again: the next timeout is twice as long.
    net.advance(Duration::from_micros(1999));
    assert!(net.transmit().is_empty());
    net.advance(Duration::from_micros(1));
    let third = net.transmit();
    assert_eq!(third.len(), 1);
    net.deliver(&third);
    assert_eq!(net.drain_deliveries().len(), 1);
    net.run_perfect();
    assert_eq!(net.send_events(0), vec![SendEvent::Complete(h)]);
    assert_eq!(net.ports[0].stats().timeouts, 2);
    assert_eq!(net.ports[0].stats().retransmits, 2);
}

#[test]
fn a_timeout_probes_with_the_oldest_and_newest_frames_and_the_nak_names_the_losses() {
    let mut net = Net::new(vec![unbundled(0), config(1)]);
    for i in 0..10u8 {
        net.ports[0].send(net.now, addr(1), &[i]).unwrap();
    }
    assert_eq!(net.transmit().len(), 10); // all lost
    net.advance(Duration::from_millis(1));
    let probe = net.transmit();
    let seqs: Vec<u32> = probe.iter().map(Wired::seq).collect();
    assert_eq!(seqs, vec![9, 0], "the newest and the oldest frame probe");
    net.deliver(&probe);
    let nak = net.transmit();
    assert_eq!(nak.len(), 1);
    assert_eq!(nak[0].kind(), FrameType::Nak);
    net.deliver(&nak);
    let rest = net.transmit();
    assert_eq!(rest.len(), 8, "exactly the missing frames are resent");
    net.deliver(&rest);
    net.run_perfect();
    assert_eq!(net.send_events(0).len(), 10);
    assert_eq!(net.ports[0].stats().timeouts, 1);
}

#[test]
fn a_stalled_receiver_costs_one_resent_frame_not_a_window() {
    let mut net = Net::new(vec![config(0), config(1)]);
    for i in 0..50u8 {
        net.ports[0].send(net.now, addr(1), &[i]).unwrap();
    }
    let sent = net.transmit();
    // The receiver stalls for 5 ms: timeouts fire, frames are not lost.
    let mut probes = Vec::new();
    for _ in 0..5 {
        net.advance(Duration::from_millis(1));
        probes.extend(net.transmit());
    }
    net.deliver(&sent);
    net.deliver(&probes);
    net.run_perfect();
    assert_eq!(net.send_events(0).len(), 50);
    assert!(
        net.ports[0].stats().timeouts >= 2,
        "{:?}",
        net.ports[0].stats()
    );
    assert_eq!(
        net.ports[0].stats().retransmits,
        probes.len() as u64,
        "only probes were resent"
    );
    assert!(
        probes.len() <= 6,
        "backed-off probes of two frames: {}",
        probes.len()
    );
}

#[test]
fn rtt_is_sampled_only_from_frames_sent_once() {
    let mut net = Net::new(vec![config(0), config(1)]);
    net.ports[0].send(net.now, addr(1), b"a").unwrap();
    let f = net.transmit();
    net.now = net.now + Duration::from_micros(10);
    net.deliver(&f);
    net.ports[1].send(net.now, addr(0), b"b").unwrap();
    let f = net.transmit();
    net.now = net.now + Duration::from_micros(10);
    net.deliver(&f);
    let info = net.ports[0].peer_info(addr(1)).unwrap();
    assert_eq!(info.srtt, Some(Duration::from_micros(20)));

    // A retransmitted frame's acknowledgement gives no sample.
    net.ports[0].send(net.now, addr(1), b"c").unwrap();
    net.transmit(); // lost
    net.advance(Duration::from_millis(5));
    let f = net.transmit();
    // Both time out: the lost frame also carried the acknowledgement of "b".
    let summary: Vec<_> = f.iter().map(|w| (w.from, w.kind(), w.seq())).collect();
    assert_eq!(
        summary,
        vec![(0, FrameType::Data, 1), (1, FrameType::Data, 0)]
    );
    net.deliver(&f);
    net.advance(Duration::from_micros(20));
    let acks = net.transmit();
    net.deliver(&acks);
    let info = net.ports[0].peer_info(addr(1)).unwrap();
    assert_eq!(info.srtt, Some(Duration::from_micros(20)), "Karn's rule");
}

#[test]
fn a_repeated_acknowledgement_gives_no_round_trip_sample() {
    let mut net = Net::new(vec![config(0), config(1)]);
    // One clean exchange: srtt = 20 µs.
    net.ports[0].send(net.now, addr(1), b"a").unwrap();
    let f = net.transmit();
    net.now = net.now + Duration::from_micros(10);
    net.deliver(&f);
    net.drain_deliveries();
    net.ports[1].send(net.now, addr(0), b"b").unwrap();
    let f = net.transmit();
    net.now = net.now + Duration::from_micros(10);
    net.deliver(&f);
    net.drain_deliveries();
    assert_eq!(
        net.ports[0].peer_info(addr(1)).unwrap().srtt,
        Some(Duration::from_micros(20))
    );
    // Ping (sent once) arrives; the pong carrying its acknowledgement is lost
    // and resent a timeout later, with the same acknowledgement.
    net.ports[0].send(net.now, addr(1), b"c").unwrap();
    let f = net.transmit();
    net.deliver(&f);
    net.drain_deliveries();
    net.ports[1].send(net.now, addr(0), b"d").unwrap();
    let lost = net.transmit();
    assert_eq!(lost.len(), 1);
    net.advance(Duration::from_millis(1));
    let again = net.transmit();
    let pong: Vec<Wired> = again.into_iter().filter(|w| w.from == 1).collect();
    assert_eq!(pong.len(), 1);
    assert_eq!(
        pong[0].bytes[3] & wire::flags::ACK_FRESH,
        0,
        "the repeat is not fresh"
    );
    net.deliver(&pong);
    assert_eq!(
        net.send_events(0).len(),
        2,
        "the acknowledgement still completes the send"
    );
    assert_eq!(
        net.ports[0].peer_info(addr(1)).unwrap().srtt,
        Some(Duration::from_micros(20)),
        "a millisecond-old repeat must not be taken as a round trip"
    );
}

#[test]
fn duplicates_are_dropped_counted_and_reacknowledged() {
    let mut net = Net::new(vec![config(0), config(1)]);
    net.ports[0].send(net.now, addr(1), b"once").unwrap();
    let f = net.transmit();
    net.deliver(&f);
    net.deliver(&f);
    net.deliver(&f);
    let got = net.drain_deliveries();
    assert_eq!(got.len(), 1);
    assert_eq!(net.ports[1].stats().duplicates, 2);
    // A duplicate means our acknowledgement may be lost: answer at once.
    let acks = net.transmit();
    assert_eq!(acks.len(), 1);
    assert_eq!(acks[0].kind(), FrameType::Ack);
}

#[test]
fn reordered_frames_are_delivered_in_order() {
    let mut net = Net::new(vec![config(0), config(1)]);
    let msgs: Vec<Vec<u8>> = (0..20).map(|i| pattern(100 + i * 300, i as u8)).collect();
    for m in &msgs {
        net.ports[0].send(net.now, addr(1), m).unwrap();
    }
    let mut f = net.transmit();
    f.reverse();
    net.deliver(&f);
    let got: Vec<Vec<u8>> = net.drain_deliveries().into_iter().map(|g| g.2).collect();
    assert_eq!(got, msgs);
    net.run_perfect();
    assert_eq!(net.send_events(0).len(), 20);
    assert_eq!(
        net.ports[0].stats().retransmits,
        0,
        "reordering alone needs no resend"
    );
}

#[test]
fn sequence_numbers_wrap_without_harm() {
    let mut c0 = config(0);
    c0.initial_seq = u32::MAX - 5;
    let mut net = Net::new(vec![c0, config(1)]);
    let msgs: Vec<Vec<u8>> = (0..50).map(|i| pattern(3000, i as u8)).collect();
    for m in &msgs {
        net.ports[0].send(net.now, addr(1), m).unwrap();
    }
    let wired = net.transmit();
    assert!(wired.iter().any(|w| w.seq() == u32::MAX) && wired.iter().any(|w| w.seq() == 0));
    // Lose one frame on each side of the wrap.
    let kept: Vec<Wired> = wired
        .into_iter()
        .filter(|w| w.seq() != u32::MAX - 1 && w.seq() != 2)
        .collect();
    net.deliver(&kept);
    let mut got: Vec<Vec<u8>> = net.drain_deliveries().into_iter().map(|g| g.2).collect();
    got.extend(net.run_perfect().into_iter().map(|g| g.2));
    assert_eq!(got, msgs);
    assert_eq!(net.send_events(0).len(), 50);
}

#[test]
fn a_full_ring_drops_nakks_and_the_sender_backs_off_until_it_drains() {
    let mut c1 = config(1);
    c1.ring_blocks = 4;
    c1.ring_block_size = 256;
    c1.eager_limit = 1024;
    let mut net = Net::new(vec![unbundled(0), c1]);
    for i in 0..8u8 {
        net.ports[0]
            .send(net.now, addr(1), &pattern(200, i))
            .unwrap();
    }
    let f = net.transmit();
    assert_eq!(f.len(), 8);
    net.deliver(&f);
    // Four fit; the application does not consume them yet.
    assert_eq!(net.ports[1].stats().ring_full_drops, 4);
    let mut held = Vec::new();
    while let Some(d) = net.ports[1].poll_delivery() {
        held.push(d);
    }
    assert_eq!(held.len(), 4);
    let nak = net.transmit();
    assert_eq!(nak.len(), 1);
    assert_eq!(nak[0].kind(), FrameType::Nak);
    net.deliver(&nak);
    assert_eq!(net.ports[0].stats().ring_full_backoffs, 1);
    // Backing off: nothing for 20 µs.
    assert!(net.transmit().is_empty());
    net.advance(Duration::from_micros(20));
    let resent = net.transmit();
    assert_eq!(resent.len(), 4, "the dropped frames come again");
    net.deliver(&resent);
    assert_eq!(net.ports[1].stats().ring_full_drops, 8, "still full");
    // Now the application drains the ring; the next round gets through.
    for d in held {
        net.ports[1].release(d.slot).unwrap();
    }
    let got = net.run_perfect();
    assert_eq!(got.len(), 4);
    assert_eq!(net.send_events(0).len(), 8);
    assert_eq!(
        net.ports[0].stats().timeouts,
        0,
        "a full ring is back-pressure, not loss"
    );
}

#[test]
fn the_next_message_in_order_evicts_out_of_order_ones_to_get_in() {
    // Ring of 10 blocks of 256 B; messages up to 1 KiB (4 blocks of headroom).
    let mut rx = config(2);
    rx.ring_blocks = 10;
    rx.eager_limit = 1024;
    let mut net = Net::new(vec![config(0), config(1), rx]);
    // Port 0 sends m0 (4 blocks) then m1, m2 (3 blocks each); m0 is lost.
    for len in [1000, 600, 600] {
        net.ports[0]
            .send(net.now, addr(2), &pattern(len, len as u8))
            .unwrap();
    }
    let mut f = net.transmit();
    f.remove(0);
    net.deliver(&f);
    // m1 and m2 wait in the ring for m0 (10 - 6 = 4 blocks free).
    assert_eq!(net.ports[2].ring_free_blocks(), 4);
    // Port 1's next message takes 3 blocks: only 1 is left.
    net.ports[1]
        .send(net.now, addr(2), &pattern(700, 1))
        .unwrap();
    let f = net.transmit();
    let f1: Vec<Wired> = f.into_iter().filter(|w| w.from == 1).collect();
    net.deliver(&f1);
    assert_eq!(net.ports[2].ring_free_blocks(), 1);
    let held = net.ports[2].poll_delivery().unwrap();
    // m0 comes again: it is next in order for port 0 but does not fit, so
    // port 0's out-of-order messages are dropped to make room.
    // (The timeout probes with m2, a duplicate; the NAK it draws names m0.)
    net.advance(Duration::from_millis(2));
    for _ in 0..4 {
        let f = net.transmit();
        net.deliver(&f);
    }
    assert_eq!(net.ports[2].stats().reneged, 1);
    net.ports[2].release(held.slot).unwrap();
    // Everything still arrives, in order, once.
    let got: Vec<Vec<u8>> = net
        .run_perfect()
        .into_iter()
        .filter(|g| g.1 == addr(0))
        .map(|g| g.2)
        .collect();
    assert_eq!(
        got,
        vec![pattern(1000, 232), pattern(600, 88), pattern(600, 88)]
    );
    assert_eq!(net.send_events(0).len(), 3);
}

#[test]
fn an_unreachable_peer_fails_every_outstanding_send() {
    let mut c0 = config(0);
    c0.max_timeouts = 3;
    let mut net = Net::new(vec![c0, config(1)]);
    let h1 = net.ports[0].send(net.now, addr(1), b"one").unwrap();
    let h2 = net.ports[0]
        .send(net.now, addr(1), &pattern(5000, 1))
        .unwrap();
    for _ in 0..10 {
        net.transmit(); // everything is lost
        net.advance_to_next_timer();
    }
    let events = net.send_events(0);
    let expected = SendFailure::PeerUnreachable(addr(1));
    assert_eq!(
        events,
        vec![
            SendEvent::Failed(h1, expected),
            SendEvent::Failed(h2, expected)
        ]
    );
    assert_eq!(net.ports[0].outstanding_sends(), 0);
    // The peer can be used again afterwards: its receiver resynchronises from
    // the window base.
    net.ports[0].send(net.now, addr(1), b"later").unwrap();
    let got = net.run_perfect();
    assert_eq!(got, vec![(1, addr(0), b"later".to_vec())]);
}

#[test]
fn a_restarted_receiver_gets_the_messages_after_its_restart() {
    let mut net = Net::new(vec![config(0), config(1)]);
    net.ports[0].send(net.now, addr(1), b"before").unwrap();
    net.run_perfect();
    // Port 1 restarts: a new incarnation with a new epoch and no memory.
    let mut c1 = config(1);
    c1.epoch = 5555;
    let mut fresh = Port::new(c1).unwrap();
    fresh.add_method(caps(MTU)).unwrap();
    net.ports[1] = fresh;
    net.ports[0].send(net.now, addr(1), b"after").unwrap();
    let got = net.run_perfect();
    assert_eq!(got, vec![(1, addr(0), b"after".to_vec())]);
    assert_eq!(net.send_events(0).len(), 2);
}

#[test]
fn a_restarted_sender_is_heard_from_its_new_start() {
    let mut net = Net::new(vec![config(0), config(1)]);
    for i in 0..3u8 {
        net.ports[0].send(net.now, addr(1), &[i]).unwrap();
    }
    net.run_perfect();
    let mut c0 = config(0);
    c0.epoch = 4242;
    let mut fresh = Port::new(c0).unwrap();
    fresh.add_method(caps(MTU)).unwrap();
    fresh
        .set_route(
            net.now,
            addr(1),
            Route {
                method: 0,
                link: LinkId(1),
            },
        )
        .unwrap();
    net.ports[0] = fresh;
    net.ports[0].send(net.now, addr(1), b"new life").unwrap();
    let got = net.run_perfect();
    assert_eq!(got, vec![(1, addr(0), b"new life".to_vec())]);
}

#[test]
fn frames_of_other_jobs_and_garbage_are_dropped_and_counted() {
    let mut other = config(0);
    other.job = JobKey(8);
    let mut net = Net::new(vec![other, config(1)]);
    net.ports[0].send(net.now, addr(1), b"intruder").unwrap();
    let f = net.transmit();
    net.deliver(&f);
    assert!(net.drain_deliveries().is_empty());
    let route = Route {
        method: 0,
        link: LinkId(0),
    };
    net.ports[1].handle_frame(net.now, route, &[1, 2, 3]);
    net.ports[1].handle_frame(
        net.now,
        Route {
            method: 9,
            link: LinkId(0),
        },
        &f[0].bytes,
    );
    let bad = net.ports[1].stats().bad_frames;
    assert_eq!(bad.wrong_job, 1);
    assert_eq!(bad.truncated, 1);
    assert_eq!(bad.bad_type, 1, "unregistered method");
    let info = net.ports[1].peer_info(addr(0)).unwrap();
    assert_eq!(
        info.stats.frames_received, 0,
        "rejected frames count nowhere else"
    );
}

#[test]
fn corrupted_frames_are_dropped_and_recovered() {
    let mut net = Net::new(vec![config(0), config(1)]);
    net.ports[0]
        .send(net.now, addr(1), &pattern(100, 1))
        .unwrap();
    let mut f = net.transmit();
    f[0].bytes[70] ^= 0x10;
    net.deliver(&f);
    assert_eq!(net.ports[1].stats().bad_frames.bad_checksum, 1);
    let got = net.run_perfect();
    assert_eq!(got, vec![(1, addr(0), pattern(100, 1))]);
}

#[test]
fn acknowledgements_of_unsent_frames_are_rejected() {
    let mut net = Net::new(vec![config(0), config(1)]);
    net.ports[0].send(net.now, addr(1), b"x").unwrap();
    let f = net.transmit();
    net.deliver(&f);
    // Forge an ACK from port 1 acknowledging far more than was sent.
    let mut fields = wire::HeaderFields {
        kind: Some(FrameType::Ack),
        flags: wire::flags::ACK,
        job: JobKey(7),
        src: addr(1),
        dst: addr(0),
        epoch: 1001,
        ack: 500,
        ..Default::default()
    };
    let body = wire::AckBody::new(wire::NakReason::None);
    let mut buf = vec![0u8; 200];
    let n = wire::encode(
        &mut buf,
        &fields,
        zerocopy::IntoBytes::as_bytes(&body),
        true,
    )
    .unwrap();
    net.ports[0].handle_frame(
        net.now,
        Route {
            method: 0,
            link: LinkId(1),
        },
        &buf[..n],
    );
    assert_eq!(net.ports[0].stats().bad_frames.bad_ack, 1);
    assert!(net.send_events(0).is_empty());
    fields.ack = 1;
    let n = wire::encode(
        &mut buf,
        &fields,
        zerocopy::IntoBytes::as_bytes(&body),
        true,
    )
    .unwrap();
    net.ports[0].handle_frame(
        net.now,
        Route {
            method: 0,
            link: LinkId(1),
        },
        &buf[..n],
    );
    assert_eq!(net.send_events(0).len(), 1);
}

#[test]
fn send_refuses_what_it_cannot_take_and_says_why() {
    let mut c = config(0);
    c.max_outstanding_sends = 2;
    let mut net = Net::new(vec![c, config(1)]);
    let err = net.ports[0]
        .send(net.now, addr(1), &vec![0; 16 * 1024 + 1])
        .unwrap_err();
    assert!(matches!(
        err,
        SendError::TooLarge {
            len: 16385,
            limit: 16384
        }
    ));
    assert!(err.to_string().contains("normal channel"), "{err}");
    assert!(matches!(
        net.ports[0].send(net.now, addr(0), b"me"),
        Err(SendError::SelfSend(_))
    ));
    net.ports[0].send(net.now, addr(1), b"1").unwrap();
    net.ports[0].send(net.now, addr(1), b"2").unwrap();
    assert_eq!(
        net.ports[0].send(net.now, addr(1), b"3"),
        Err(SendError::WouldBlock(2))
    );
    net.run_perfect();
    // Completed, but the completions are not reaped yet: still full.
    assert_eq!(
        net.ports[0].send(net.now, addr(1), b"3"),
        Err(SendError::WouldBlock(2))
    );
    assert_eq!(net.send_events(0).len(), 2);
    assert!(net.ports[0].send(net.now, addr(1), b"3").is_ok());
}

#[test]
fn releasing_twice_is_an_error_not_corruption() {
    let mut net = Net::new(vec![config(0), config(1)]);
    net.ports[0].send(net.now, addr(1), b"x").unwrap();
    let f = net.transmit();
    net.deliver(&f);
    let d = net.ports[1].poll_delivery().unwrap();
    net.ports[1].release(d.slot).unwrap();
    assert_eq!(net.ports[1].release(d.slot), Err(ReleaseError(d.slot)));
    assert!(net.ports[1].message(&d).is_none());
}

#[test]
fn peers_without_a_route_are_reported_to_the_engine() {
    let mut p = Port::new(config(0)).unwrap();
    p.add_method(caps(MTU)).unwrap();
    p.send(Time::ZERO, addr(5), b"x").unwrap();
    let mut buf = vec![0u8; MTU];
    assert!(p.poll_transmit(0, Time::ZERO, &mut buf).is_none());
    assert_eq!(p.next_unrouted(), Some(addr(5)));
    assert_eq!(p.next_unrouted(), None);
    assert_eq!(
        p.set_route(
            Time::ZERO,
            addr(5),
            Route {
                method: 3,
                link: LinkId(0)
            }
        ),
        Err(RouteError::UnknownMethod(3))
    );
    p.set_route(
        Time::ZERO,
        addr(5),
        Route {
            method: 0,
            link: LinkId(9),
        },
    )
    .unwrap();
    let tx = p.poll_transmit(0, Time::ZERO, &mut buf).unwrap();
    assert_eq!(tx.link, LinkId(9));
}

#[test]
fn idle_peer_state_is_small_and_windows_go_back_to_the_pool() {
    println!("idle per-peer state: {} bytes", std::mem::size_of::<Peer>());
    assert!(
        std::mem::size_of::<Peer>() <= 256,
        "idle per-peer state is {} bytes",
        std::mem::size_of::<Peer>()
    );
    let mut net = Net::new(vec![config(0), config(1)]);
    for i in 0..10u8 {
        net.ports[0]
            .send(net.now, addr(1), &pattern(4000, i))
            .unwrap();
    }
    let mut f = net.transmit();
    f.remove(0);
    net.deliver(&f);
    // The sender holds a window while frames are in flight; the receiver
    // while something is out of order.
    assert_eq!(net.ports[0].active_windows(), (1, 0));
    assert_eq!(net.ports[1].active_windows(), (0, 1));
    net.run_perfect();
    assert_eq!(net.ports[1].stats().messages_delivered, 10);
    // Idle again: no per-peer heap memory left on either side.
    assert_eq!(net.ports[0].active_windows(), (0, 0));
    assert_eq!(net.ports[1].active_windows(), (0, 0));
}

#[test]
fn config_errors_name_the_field() {
    let mut c = config(0);
    c.tx_window = 1000;
    assert_eq!(Port::new(c).err().unwrap().field, "tx_window");
    let mut c = config(0);
    c.eager_limit = 64 * 1024;
    let mut p = Port::new(c).unwrap();
    // 64 KiB over 100-byte frames needs more frames than the window.
    assert_eq!(p.add_method(caps(100)).unwrap_err().field, "eager_limit");
    assert_eq!(p.add_method(caps(40)).unwrap_err().field, "mtu");
}

#[test]
fn the_window_bounds_frames_in_flight() {
    let mut c0 = unbundled(0);
    c0.tx_window = 8;
    let mut net = Net::new(vec![c0, config(1)]);
    for i in 0..20u8 {
        net.ports[0].send(net.now, addr(1), &[i]).unwrap();
    }
    let first = net.transmit();
    assert_eq!(first.len(), 8);
    assert!(net.transmit().is_empty());
    net.deliver(&first);
    let mut got = net.drain_deliveries();
    got.extend(net.run_perfect());
    assert_eq!(got.len(), 20);
    assert_eq!(net.send_events(0).len(), 20);
}
