//! Normal and open channels over a hand-driven in-memory wire.

use super::tests::{addr, config, pattern, Net, Wired};
use super::*;
use crate::event::{ChannelEvent, ChannelId, TransferError};
use crate::wire::FrameType;
use std::time::Duration;

/// Moves frames through the wire until nothing moves, dropping every
/// `drop_every`-th frame (0: none), and collects channel events per port.
fn run(net: &mut Net, drop_every: usize) -> Vec<Vec<ChannelEvent>> {
    let mut count = 0usize;
    net.run_channels(|net, frames| {
        let kept: Vec<Wired> = frames
            .into_iter()
            .filter(|_| {
                count += 1;
                drop_every == 0 || !count.is_multiple_of(drop_every)
            })
            .collect();
        net.deliver(&kept);
    })
}

fn received(ev: &[ChannelEvent]) -> Vec<(ChannelId, ProcessAddr, Vec<u8>)> {
    ev.iter()
        .filter_map(|e| match e {
            ChannelEvent::Received {
                channel,
                from,
                buffer,
                len,
            } => Some((*channel, *from, buffer[..*len].to_vec())),
            _ => None,
        })
        .collect()
}

#[test]
fn sender_first_waits_for_the_post_then_lands_in_the_buffer() {
    let mut net = Net::new(vec![config(0), config(1)]);
    let ch = net.ports[1].open_normal_channel().unwrap();
    let msg = pattern(100_000, 7);
    let h = net.ports[0]
        .send_on_channel(net.now, addr(1), ch, msg.clone())
        .unwrap();
    let ev = run(&mut net, 0);
    assert!(
        ev[0].is_empty() && ev[1].is_empty(),
        "nothing before the buffer is posted"
    );
    net.ports[1]
        .post(net.now, ch, None, vec![0; 200_000])
        .unwrap();
    let ev = run(&mut net, 0);
    assert_eq!(received(&ev[1]), vec![(ch, addr(0), msg.clone())]);
    assert_eq!(
        ev[0],
        vec![ChannelEvent::SendDone {
            handle: h,
            buffer: msg
        }]
    );
    assert_eq!(net.ports[1].stats().transfers_received, 1);
}

#[test]
fn receiver_first_for_a_known_sender_saves_the_request() {
    let mut net = Net::new(vec![config(0), config(1)]);
    let ch = net.ports[1].open_normal_channel().unwrap();
    net.ports[1]
        .post(net.now, ch, Some(addr(0)), vec![0; 5000])
        .unwrap();
    run(&mut net, 0);
    let msg = pattern(4000, 1);
    net.ports[0]
        .send_on_channel(net.now, addr(1), ch, msg.clone())
        .unwrap();
    let frames = net.transmit();
    assert!(
        frames.iter().all(|f| f.kind() == FrameType::Data),
        "data at once, no request: {:?}",
        frames.iter().map(Wired::kind).collect::<Vec<_>>()
    );
    net.deliver(&frames);
    let ev = run(&mut net, 0);
    assert_eq!(received(&ev[1]), vec![(ch, addr(0), msg)]);
}

#[test]
fn receiver_first_for_anybody_answers_the_request_at_once() {
    let mut net = Net::new(vec![config(0), config(1)]);
    let ch = net.ports[1].open_normal_channel().unwrap();
    net.ports[1].post(net.now, ch, None, vec![0; 5000]).unwrap();
    let msg = pattern(3000, 2);
    net.ports[0]
        .send_on_channel(net.now, addr(1), ch, msg.clone())
        .unwrap();
    let ev = run(&mut net, 0);
    assert_eq!(received(&ev[1]), vec![(ch, addr(0), msg)]);
}

#[test]
fn a_message_larger_than_the_buffer_fails_on_both_sides_and_writes_nothing() {
    let mut net = Net::new(vec![config(0), config(1)]);
    let ch = net.ports[1].open_normal_channel().unwrap();
    net.ports[1]
        .post(net.now, ch, None, vec![0xEE; 1000])
        .unwrap();
    let msg = pattern(1001, 3);
    let h = net.ports[0]
        .send_on_channel(net.now, addr(1), ch, msg.clone())
        .unwrap();
    let ev = run(&mut net, 0);
    let too_large = TransferError::TooLarge {
        len: 1001,
        capacity: 1000,
    };
    assert_eq!(
        ev[0],
        vec![ChannelEvent::SendFailed {
            handle: h,
            buffer: msg,
            error: too_large
        }]
    );
    assert_eq!(
        ev[1],
        vec![ChannelEvent::ReceiveFailed {
            channel: ch,
            from: addr(0),
            error: too_large,
            buffer: None
        }]
    );
    // The buffer is still posted and untouched.
    assert_eq!(
        net.ports[1].cancel_post(net.now, ch).unwrap(),
        Some(vec![0xEE; 1000])
    );
}

#[test]
fn large_transfers_survive_loss_and_interleave_with_small_messages() {
    let mut net = Net::new(vec![config(0), config(1)]);
    let ch = net.ports[1].open_normal_channel().unwrap();
    let big = pattern(3 << 20, 9);
    net.ports[1]
        .post(net.now, ch, Some(addr(0)), vec![0; 3 << 20])
        .unwrap();
    run(&mut net, 0);
    net.ports[0]
        .send_on_channel(net.now, addr(1), ch, big.clone())
        .unwrap();
    // A small message sent after the transfer started goes past it.
    for _ in 0..5 {
        let f = net.transmit();
        net.deliver(&f);
    }
    net.ports[0].send(net.now, addr(1), b"small").unwrap();
    let mut small_first = false;
    for _ in 0..20 {
        let f = net.transmit();
        net.deliver(&f);
        if net.ports[1].poll_delivery().is_some() {
            small_first = net.ports[1].stats().transfers_received == 0;
            break;
        }
    }
    assert!(
        small_first,
        "the small message waited for the 3 MiB transfer"
    );
    let ev = run(&mut net, 13);
    assert_eq!(received(&ev[1]), vec![(ch, addr(0), big)]);
    assert!(net.ports[0].stats().retransmits > 0);
}

#[test]
fn concurrent_transfers_on_several_channels_and_from_several_peers() {
    let mut net = Net::new(vec![config(0), config(1), config(2)]);
    let chans: Vec<ChannelId> = (0..3)
        .map(|_| net.ports[2].open_normal_channel().unwrap())
        .collect();
    let mut expect = Vec::new();
    for (k, &ch) in chans.iter().enumerate() {
        net.ports[2]
            .post(net.now, ch, None, vec![0; 300_000])
            .unwrap();
        let from = k % 2;
        let msg = pattern(100_000 + k * 50_000, k as u8);
        net.ports[from]
            .send_on_channel(net.now, addr(2), ch, msg.clone())
            .unwrap();
        expect.push((ch, addr(from), msg));
    }
    let ev = run(&mut net, 17);
    let mut got = received(&ev[2]);
    got.sort_by_key(|g| g.0);
    assert_eq!(got, expect);
}

#[test]
fn requests_wait_in_order_and_are_served_as_buffers_are_posted() {
    let mut net = Net::new(vec![config(0), config(1), config(2)]);
    let ch = net.ports[2].open_normal_channel().unwrap();
    net.ports[0]
        .send_on_channel(net.now, addr(2), ch, pattern(10, 0))
        .unwrap();
    run(&mut net, 0);
    net.ports[1]
        .send_on_channel(net.now, addr(2), ch, pattern(20, 1))
        .unwrap();
    run(&mut net, 0);
    let mut got = Vec::new();
    for _ in 0..2 {
        net.ports[2].post(net.now, ch, None, vec![0; 100]).unwrap();
        got.extend(received(&run(&mut net, 0)[2]));
    }
    assert_eq!(
        got,
        vec![(ch, addr(0), pattern(10, 0)), (ch, addr(1), pattern(20, 1))]
    );
}

/// The send-done events of `ev`, by handle.
fn sends_done(ev: &[ChannelEvent]) -> Vec<crate::event::SendHandle> {
    ev.iter()
        .filter_map(|e| match e {
            ChannelEvent::SendDone { handle, .. } => Some(*handle),
            _ => None,
        })
        .collect()
}

#[test]
fn a_second_send_waits_for_the_one_streaming_on_an_announced_buffer() {
    // The request of a second send would reach the receiver before the
    // first send's data (requests go first) and take the announced buffer;
    // the first send's data would then be dropped yet acknowledged.
    let mut net = Net::new(vec![config(0), config(1)]);
    let ch = net.ports[1].open_normal_channel().unwrap();
    net.ports[1]
        .post(net.now, ch, Some(addr(0)), vec![0; 5000])
        .unwrap();
    run(&mut net, 0);
    let (m1, m2) = (pattern(4000, 1), pattern(100, 2));
    let h1 = net.ports[0]
        .send_on_channel(net.now, addr(1), ch, m1.clone())
        .unwrap();
    let h2 = net.ports[0]
        .send_on_channel(net.now, addr(1), ch, m2.clone())
        .unwrap();
    let ev = run(&mut net, 0);
    assert_eq!(received(&ev[1]), vec![(ch, addr(0), m1)]);
    assert_eq!(sends_done(&ev[0]), vec![h1], "the second waits for a post");
    net.ports[1].post(net.now, ch, None, vec![0; 5000]).unwrap();
    let ev = run(&mut net, 0);
    assert_eq!(received(&ev[1]), vec![(ch, addr(0), m2)]);
    assert_eq!(sends_done(&ev[0]), vec![h2]);
}

#[test]
fn an_announcement_overtaken_by_an_earlier_request_is_not_streamed_on() {
    // The receiver announces a buffer while the first send's request is on
    // its way; the request takes that buffer, so a second send must not
    // stream on the announcement.
    let mut net = Net::new(vec![config(0), config(1)]);
    let ch = net.ports[1].open_normal_channel().unwrap();
    let (m1, m2) = (pattern(300, 3), pattern(200, 4));
    let h1 = net.ports[0]
        .send_on_channel(net.now, addr(1), ch, m1.clone())
        .unwrap();
    let request = net.transmit();
    assert!(request.iter().any(|f| f.kind() == FrameType::RndvRequest));
    net.ports[1]
        .post(net.now, ch, Some(addr(0)), vec![0; 1000])
        .unwrap();
    let announcement = net.transmit();
    net.deliver(&announcement);
    let h2 = net.ports[0]
        .send_on_channel(net.now, addr(1), ch, m2.clone())
        .unwrap();
    net.deliver(&request);
    let ev = run(&mut net, 0);
    assert_eq!(received(&ev[1]), vec![(ch, addr(0), m1)]);
    assert_eq!(sends_done(&ev[0]), vec![h1]);
    net.ports[1].post(net.now, ch, None, vec![0; 1000]).unwrap();
    let ev = run(&mut net, 0);
    assert_eq!(received(&ev[1]), vec![(ch, addr(0), m2)]);
    assert_eq!(sends_done(&ev[0]), vec![h2]);
}

#[test]
fn cancelling_a_buffer_mid_transfer_fails_the_send_and_returns_the_buffer() {
    let mut net = Net::new(vec![config(0), config(1)]);
    let ch = net.ports[1].open_normal_channel().unwrap();
    net.ports[1]
        .post(net.now, ch, None, vec![0; 1 << 20])
        .unwrap();
    let h = net.ports[0]
        .send_on_channel(net.now, addr(1), ch, pattern(1 << 20, 4))
        .unwrap();
    for _ in 0..6 {
        let f = net.transmit();
        net.deliver(&f);
    }
    let back = net.ports[1].cancel_post(net.now, ch).unwrap().unwrap();
    assert_eq!(back.len(), 1 << 20);
    let ev = run(&mut net, 0);
    assert!(
        matches!(&ev[0][..], [ChannelEvent::SendFailed { handle, error: TransferError::Cancelled, buffer }] if *handle == h && buffer.len() == 1 << 20),
        "{:?}",
        ev[0]
            .iter()
            .map(|e| format!("{e:?}").chars().take(80).collect::<String>())
            .collect::<Vec<_>>()
    );
    assert!(received(&ev[1]).is_empty());
    assert_eq!(
        net.ports[0].outstanding_sends(),
        0,
        "no zombie counts against the application"
    );
}

#[test]
fn zero_length_transfers_complete() {
    let mut net = Net::new(vec![config(0), config(1)]);
    let ch = net.ports[1].open_normal_channel().unwrap();
    net.ports[1].post(net.now, ch, None, vec![0; 8]).unwrap();
    net.ports[0]
        .send_on_channel(net.now, addr(1), ch, Vec::new())
        .unwrap();
    let ev = run(&mut net, 0);
    assert_eq!(received(&ev[1]), vec![(ch, addr(0), vec![])]);
    assert!(matches!(ev[0][..], [ChannelEvent::SendDone { .. }]));
}

#[test]
fn sending_to_a_missing_channel_fails() {
    let mut net = Net::new(vec![config(0), config(1)]);
    let h = net.ports[0]
        .send_on_channel(net.now, addr(1), ChannelId(9), pattern(10, 0))
        .unwrap();
    let ev = run(&mut net, 0);
    assert_eq!(
        ev[0],
        vec![ChannelEvent::SendFailed {
            handle: h,
            buffer: pattern(10, 0),
            error: TransferError::NoSuchChannel(ChannelId(9))
        }]
    );
}

#[test]
fn rma_put_and_get_small_and_large() {
    let mut net = Net::new(vec![config(0), config(1)]);
    let region = net.ports[1].register(vec![0; 4 << 20]);
    let ch = net.ports[1].open_rma_channel(region, 0xC0FFEE).unwrap();
    // Small (inline) and large puts.
    let small = pattern(100, 1);
    let large = pattern(2 << 20, 2);
    let hs = net.ports[0]
        .put(net.now, addr(1), ch, 0xC0FFEE, 10, small.clone())
        .unwrap();
    let hl = net.ports[0]
        .put(net.now, addr(1), ch, 0xC0FFEE, 1 << 20, large.clone())
        .unwrap();
    let ev = run(&mut net, 11);
    assert!(ev[1].is_empty(), "RMA completes at the initiator only");
    assert!(ev[0].contains(&ChannelEvent::PutDone {
        handle: hs,
        buffer: small.clone()
    }));
    assert!(ev[0].contains(&ChannelEvent::PutDone {
        handle: hl,
        buffer: large.clone()
    }));
    let r = net.ports[1].region(region).unwrap();
    assert_eq!(&r[10..110], &small[..]);
    assert_eq!(&r[1 << 20..3 << 20], &large[..]);
    // Read both back.
    let g1 = net.ports[0]
        .get(net.now, addr(1), ch, 0xC0FFEE, 10, vec![0; 100])
        .unwrap();
    let g2 = net.ports[0]
        .get(net.now, addr(1), ch, 0xC0FFEE, 1 << 20, vec![0; 2 << 20])
        .unwrap();
    let ev = run(&mut net, 7);
    assert!(ev[0].contains(&ChannelEvent::GetDone {
        handle: g1,
        buffer: small
    }));
    assert!(ev[0].contains(&ChannelEvent::GetDone {
        handle: g2,
        buffer: large
    }));
    assert!(ev[1].is_empty());
}

#[test]
fn rma_key_and_bounds_are_checked_before_any_byte_is_written() {
    let mut net = Net::new(vec![config(0), config(1)]);
    let region = net.ports[1].register(vec![7; 1000]);
    let ch = net.ports[1].open_rma_channel(region, 42).unwrap();
    let bad_key = net.ports[0]
        .put(net.now, addr(1), ch, 41, 0, vec![1; 10])
        .unwrap();
    let oob = net.ports[0]
        .put(net.now, addr(1), ch, 42, 995, vec![1; 10])
        .unwrap();
    let oob_big = net.ports[0]
        .put(net.now, addr(1), ch, 42, 0, vec![1; 5000])
        .unwrap();
    let overflow = net.ports[0]
        .get(net.now, addr(1), ch, 42, u64::MAX - 3, vec![0; 10])
        .unwrap();
    let no_chan = net.ports[0]
        .get(net.now, addr(1), ChannelId(77), 42, 0, vec![0; 10])
        .unwrap();
    let ev = run(&mut net, 0);
    let failed = |h| {
        ev[0].iter().find_map(|e| match e {
            ChannelEvent::RmaFailed { handle, error, .. } if *handle == h => Some(*error),
            _ => None,
        })
    };
    assert_eq!(failed(bad_key), Some(TransferError::BadKey));
    assert_eq!(
        failed(oob),
        Some(TransferError::OutOfBounds {
            offset: 995,
            len: 10,
            region_len: 1000
        })
    );
    assert_eq!(
        failed(oob_big),
        Some(TransferError::OutOfBounds {
            offset: 0,
            len: 5000,
            region_len: 1000
        })
    );
    assert!(matches!(
        failed(overflow),
        Some(TransferError::OutOfBounds { .. })
    ));
    assert_eq!(
        failed(no_chan),
        Some(TransferError::NoSuchChannel(ChannelId(77)))
    );
    assert_eq!(
        net.ports[1].region(region).unwrap(),
        &[7u8; 1000][..],
        "target memory untouched"
    );
}

#[test]
fn unregistering_ends_remote_access_safely() {
    let mut net = Net::new(vec![config(0), config(1)]);
    let region = net.ports[1].register(vec![0; 1 << 20]);
    let ch = net.ports[1].open_rma_channel(region, 1).unwrap();
    // A get in progress keeps the region registered.
    let g = net.ports[0]
        .get(net.now, addr(1), ch, 1, 0, vec![0; 1 << 20])
        .unwrap();
    for _ in 0..4 {
        let f = net.transmit();
        net.deliver(&f);
    }
    assert!(matches!(
        net.ports[1].unregister(net.now, region),
        Err(ChannelError::RegionBusy(_, 1))
    ));
    let ev = run(&mut net, 0);
    assert!(matches!(&ev[0][..], [ChannelEvent::GetDone { handle, .. }] if *handle == g));
    let back = net.ports[1].unregister(net.now, region).unwrap();
    assert_eq!(back.len(), 1 << 20);
    // Later accesses fail at the initiator; the stale id reaches nothing.
    let p = net.ports[0]
        .put(net.now, addr(1), ch, 1, 0, vec![1; 10])
        .unwrap();
    let ev = run(&mut net, 0);
    assert!(
        matches!(&ev[0][..], [ChannelEvent::RmaFailed { handle, error: TransferError::NoSuchChannel(_), .. }] if *handle == p)
    );
    assert!(net.ports[1].region(region).is_none());
    assert!(net.ports[1].unregister(net.now, region).is_err());
    // A new registration in the same slot is not reachable through the old id.
    let fresh = net.ports[1].register(vec![5; 10]);
    assert_eq!(fresh.index, region.index);
    assert!(net.ports[1].region(region).is_none());
}

#[test]
fn a_sender_vanishing_mid_transfer_is_an_error_not_a_hang() {
    let mut rx = config(1);
    rx.transfer_timeout = Duration::from_millis(50);
    let mut net = Net::new(vec![config(0), rx]);
    let ch = net.ports[1].open_normal_channel().unwrap();
    net.ports[1]
        .post(net.now, ch, None, vec![0; 1 << 20])
        .unwrap();
    net.ports[0]
        .send_on_channel(net.now, addr(1), ch, pattern(1 << 20, 1))
        .unwrap();
    for _ in 0..6 {
        let f = net.transmit();
        net.deliver(&f);
    }
    // The sender disappears: its frames no longer arrive.
    let mut events = Vec::new();
    for _ in 0..200 {
        net.transmit();
        if !net.advance_to_next_timer() {
            break;
        }
        while let Some(e) = net.ports[1].poll_channel_event() {
            events.push(e);
        }
        if !events.is_empty() {
            break;
        }
    }
    assert!(
        matches!(&events[..], [ChannelEvent::ReceiveFailed { error: TransferError::Stalled(a), buffer: Some(b), .. }] if *a == addr(0) && b.len() == 1 << 20),
        "{events:?}"
    );
}

#[test]
fn a_receiver_vanishing_fails_the_transfer_at_the_sender() {
    let mut tx = config(0);
    tx.max_timeouts = 3;
    let mut net = Net::new(vec![tx, config(1)]);
    let h = net.ports[0]
        .send_on_channel(net.now, addr(1), ChannelId(1), pattern(1000, 1))
        .unwrap();
    let g = net.ports[0]
        .get(net.now, addr(1), ChannelId(1), 0, 0, vec![0; 10])
        .unwrap();
    let mut events = Vec::new();
    for _ in 0..100 {
        net.transmit(); // nothing arrives
        net.advance_to_next_timer();
        while let Some(e) = net.ports[0].poll_channel_event() {
            events.push(e);
        }
    }
    let unreachable = TransferError::PeerUnreachable(addr(1));
    assert!(events.iter().any(|e| matches!(e, ChannelEvent::SendFailed { handle, error, .. } if *handle == h && *error == unreachable)));
    assert!(events.iter().any(|e| matches!(e, ChannelEvent::RmaFailed { handle, error, .. } if *handle == g && *error == unreachable)));
    assert_eq!(net.ports[0].outstanding_sends(), 0);
}

#[test]
fn channel_calls_refuse_with_the_buffer_back() {
    let mut p = Port::new(config(0)).unwrap();
    let r = p
        .post(Time::ZERO, ChannelId(3), None, vec![1, 2, 3])
        .unwrap_err();
    assert_eq!(r.error, ChannelError::NoSuchChannel(ChannelId(3)));
    assert_eq!(r.buffer, vec![1, 2, 3]);
    let ch = p.open_normal_channel().unwrap();
    p.post(Time::ZERO, ch, None, vec![0]).unwrap();
    let r = p.post(Time::ZERO, ch, None, vec![9]).unwrap_err();
    assert_eq!(r.error, ChannelError::AlreadyPosted(ch));
    assert_eq!(r.buffer, vec![9]);
    let r = p
        .send_on_channel(Time::ZERO, addr(0), ch, vec![4])
        .unwrap_err();
    assert!(matches!(
        r.error,
        ChannelError::Send(SendError::SelfSend(_))
    ));
    assert_eq!(r.buffer, vec![4]);
    assert_eq!(p.close_channel(Time::ZERO, ch).unwrap(), Some(vec![0]));
    assert!(p.close_channel(Time::ZERO, ch).is_err());
}

#[test]
fn a_port_done_with_its_transfers_has_no_timer_left() {
    // A process flushes before it exits: it waits for its port's timers.
    // The watchdog over arriving transfers must not be one of them once
    // no transfer is left, or every exit after a transfer waits half the
    // transfer timeout.
    let mut net = Net::new(vec![config(0), config(1)]);
    let ch = net.ports[1].open_normal_channel().unwrap();
    net.ports[1]
        .post(net.now, ch, None, vec![0; 200_000])
        .unwrap();
    let msg = pattern(150_000, 3);
    net.ports[0]
        .send_on_channel(net.now, addr(1), ch, msg.clone())
        .unwrap();
    let start = net.now;
    let ev = run(&mut net, 0);
    assert_eq!(received(&ev[1]), vec![(ch, addr(0), msg)]);
    let took = net.now.saturating_since(start);
    let watchdog = config(1).transfer_timeout / 2;
    assert!(
        took < watchdog,
        "the ports settled after {took:?}, not before the stall check's {watchdog:?}"
    );
    assert_eq!(net.ports[0].poll_timeout(), None);
    assert_eq!(net.ports[1].poll_timeout(), None);
}
