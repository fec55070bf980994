//! BCL over shared memory through the whole engine: system-channel messages
//! of every size (direct, inline frame, exchange-queue frame), normal
//! channels and RMA as bulk transfers, one event queue for shared-memory
//! and network peers, blocking mode, and peers that die.

mod common;
mod shm_common;

use bcl::shm::ShmMethod;
use bcl::{ChannelEvent, Endpoint, JobKey, ProcessAddr, ProgressMode};
use shm_common::{
    endpoint, expect_send_failed_peer_gone, job, pattern, put_then_get, shm_descriptor, CHILD,
    PARENT, T,
};
use std::time::Duration;

/// Sizes that take every path: direct messages, inline frames (the engine
/// falls back to frames when the shortcut is not free), big frames.
const SIZES: [usize; 8] = [0, 1, 8, 200, 231, 232, 5000, 16 * 1024];

/// Sends `rounds` rounds of a message of every size in [`SIZES`] to `to`,
/// one at a time; returns them in order.
fn send_rounds(ep: &mut Endpoint, to: ProcessAddr, rounds: usize) -> Vec<Vec<u8>> {
    let mut sent = Vec::new();
    for r in 0..rounds {
        for (k, &len) in SIZES.iter().enumerate() {
            let m = pattern(len, (r * 10 + k) as u32);
            ep.send_blocking(to, &m, T).unwrap();
            sent.push(m);
        }
    }
    sent
}

fn exchange(mode: ProgressMode, tag: u32) {
    let job = job(tag);
    let (a, b) = (ProcessAddr::new(1, 1), ProcessAddr::new(1, 2));
    let mut ea = endpoint(job, a, mode);
    let eb = endpoint(job, b, mode);
    ea.add_peer(b, eb.descriptors()[0].clone());
    let rounds = 300;
    let receiver = std::thread::spawn(move || {
        let mut eb = eb;
        let mut got = Vec::new();
        for i in 0..rounds * SIZES.len() {
            let d = match eb.recv_blocking(T) {
                Ok(d) => d,
                Err(e) => panic!(
                    "message {i}: {e}; receiver {:?} {}",
                    eb.port().stats(),
                    eb.port().debug_summary()
                ),
            };
            assert_eq!(d.from, a);
            got.push(eb.message(&d).unwrap().to_vec());
            eb.release(d).unwrap();
        }
        (got, *eb.port().stats())
    });
    let expect = send_rounds(&mut ea, b, rounds);
    let (got, rx_stats) = receiver.join().unwrap();
    assert_eq!(got.len(), expect.len());
    assert!(
        got == expect,
        "every message exactly once, in order, intact"
    );
    let tx_stats = *ea.port().stats();
    assert_eq!(tx_stats.retransmits, 0);
    assert_eq!(
        tx_stats.acks_sent + rx_stats.acks_sent,
        0,
        "nothing to acknowledge in memory"
    );
    assert_eq!(rx_stats.bad_frames.total(), 0);
}

#[test]
fn messages_of_every_size_arrive_in_order_busy_polling() {
    exchange(ProgressMode::BusyPoll, 1);
}

#[test]
fn messages_of_every_size_arrive_in_order_blocking() {
    exchange(ProgressMode::Blocking, 2);
}

/// The busy-polling receive shortcut takes direct messages in place from the
/// ring and everything else through progress rounds; together they keep
/// every sender's order and lose nothing.
#[test]
fn poll_recv_with_keeps_order_across_direct_and_framed_messages() {
    let job = job(4);
    let (a, b) = (ProcessAddr::new(1, 1), ProcessAddr::new(1, 2));
    let mut ea = endpoint(job, a, ProgressMode::BusyPoll);
    let eb = endpoint(job, b, ProgressMode::BusyPoll);
    ea.add_peer(b, eb.descriptors()[0].clone());
    let rounds = 500;
    let receiver = std::thread::spawn(move || {
        let mut eb = eb;
        let mut got = Vec::new();
        let deadline = std::time::Instant::now() + T;
        while got.len() < rounds * SIZES.len() {
            assert!(
                std::time::Instant::now() < deadline,
                "{} received",
                got.len()
            );
            if let Some((from, m)) = eb
                .poll_recv_with(|from, bytes| (from, bytes.to_vec()))
                .unwrap()
            {
                assert_eq!(from, a);
                got.push(m);
            }
        }
        let shm = eb.method_mut::<ShmMethod>().unwrap().stats();
        (got, shm, *eb.port().stats())
    });
    let expect = send_rounds(&mut ea, b, rounds);
    let (got, shm, port) = receiver.join().unwrap();
    assert!(
        got == expect,
        "every message exactly once, in order, intact"
    );
    assert!(
        shm.direct_received > 0,
        "direct messages taken in place: {shm:?}"
    );
    assert!(
        port.frames_received > shm.direct_received,
        "big messages came as frames: {port:?}"
    );
    assert_eq!(port.messages_delivered, expect.len() as u64);
}

#[test]
fn normal_channel_and_rma_move_as_bulk_transfers() {
    let job = job(3);
    let (a, b) = (ProcessAddr::new(1, 1), ProcessAddr::new(1, 2));
    let mut ea = endpoint(job, a, ProgressMode::BusyPoll);
    let mut eb = endpoint(job, b, ProgressMode::BusyPoll);
    ea.add_peer(b, eb.descriptors()[0].clone());
    let ch = eb.open_normal_channel().unwrap();
    let region = eb.register(vec![0; 8 << 20]);
    let rma = eb.open_rma_channel(region, 77).unwrap();
    let big = pattern(4 << 20, 9);
    let receiver = std::thread::spawn(move || {
        let (from, buf, len) = eb.recv_on_channel(ch, None, vec![0; 5 << 20], T).unwrap();
        assert_eq!(from, a);
        // Serve RMA until the initiator says it is done.
        let d = eb.recv_blocking(T).unwrap();
        eb.release(d).unwrap();
        (
            buf[..len].to_vec(),
            eb.region(region).unwrap()[1 << 20..(1 << 20) + (3 << 20)].to_vec(),
        )
    });
    let back = ea.send_on_channel_blocking(b, ch, big.clone(), T).unwrap();
    assert_eq!(back, big, "the send buffer comes back");
    let put = put_then_get(&mut ea, b, rma);
    assert!(matches!(
        ea.get_blocking(b, rma, 78, 0, vec![0; 8], T)
            .unwrap_err()
            .error,
        bcl::TransferFailure::Transfer(bcl::TransferError::BadKey)
    ));
    ea.send_blocking(b, b"done", T).unwrap();
    let (received, region_bytes) = receiver.join().unwrap();
    assert!(received == big, "4 MiB through the exchange queue");
    assert!(region_bytes == put);
    assert_eq!(ea.port().stats().retransmits, 0);
    // The data went as bulk transfers, not frames: a handful of frames only.
    assert!(
        ea.port().stats().frames_sent < 50,
        "{:?}",
        ea.port().stats()
    );
    let _ = ChannelEvent::SendDone {
        handle: bcl::SendHandle(0),
        buffer: vec![],
    };
}

// ------------------------------------------------------------------------
// Peers in other processes that die mid-transfer.

/// A transfer far too large to finish before the test kills its peer.
const HUGE: usize = 1 << 30;

/// This test binary again, as the peer process of a multi-process test.
fn spawn_child(role: &str, job: JobKey) -> std::process::Child {
    common::child_process()
        .env("BCL_SHM_ENDPOINT_CHILD", role)
        .env("BCL_SHM_JOB", job.0.to_string())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap()
}

/// The peer process of the multi-process tests (does nothing in a normal
/// test run).
#[test]
fn child_entry() {
    let Ok(role) = std::env::var("BCL_SHM_ENDPOINT_CHILD") else {
        return;
    };
    let job = JobKey(std::env::var("BCL_SHM_JOB").unwrap().parse().unwrap());
    let mut ep = endpoint(job, CHILD, ProgressMode::BusyPoll);
    ep.add_peer(PARENT, shm_descriptor(PARENT));
    match role.as_str() {
        // Waits for the parent's channel number, then sends it a message
        // it will be killed in the middle of.
        "sender" => {
            ep.send_blocking(PARENT, b"ready", T).unwrap();
            let d = ep.recv_blocking(T).unwrap();
            let ch = bcl::core::ChannelId(u16::from_le_bytes(
                ep.message(&d).unwrap().try_into().unwrap(),
            ));
            ep.release(d).unwrap();
            let _ = ep.send_on_channel_blocking(PARENT, ch, vec![7; HUGE], T);
        }
        // Opens a channel, tells the parent, and receives into it until it
        // is killed.
        "receiver" => {
            let ch = ep.open_normal_channel().unwrap();
            ep.send_blocking(PARENT, &ch.0.to_le_bytes(), T).unwrap();
            let _ = ep.recv_on_channel(ch, Some(PARENT), vec![0; HUGE], T);
        }
        other => panic!("unknown child role {other}"),
    }
}

/// Drives `ep` until its transfer with the child is under way (accepted
/// by both sides), then 50 ms more so data streams: a 1 GiB transfer is far
/// from done by then.
fn until_streaming(ep: &mut Endpoint) {
    let deadline = std::time::Instant::now() + T;
    while ep.port().transfers_in_progress() == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the transfer never started"
        );
        ep.progress().unwrap();
    }
    let streaming = std::time::Instant::now() + Duration::from_millis(50);
    while std::time::Instant::now() < streaming {
        ep.progress().unwrap();
    }
    assert_eq!(ep.port().transfers_in_progress(), 1, "still under way");
}

#[test]
fn a_sender_killed_mid_transfer_is_an_error_event_for_the_receiver() {
    let job = job(10);
    let mut ep = endpoint(job, PARENT, ProgressMode::BusyPoll);
    ep.add_peer(CHILD, shm_descriptor(CHILD));
    let ch = ep.open_normal_channel().unwrap();
    let mut child = spawn_child("sender", job);
    let d = ep.recv_blocking(T).unwrap();
    assert_eq!(ep.message(&d).unwrap(), b"ready");
    ep.release(d).unwrap();
    ep.send_blocking(CHILD, &ch.0.to_le_bytes(), T).unwrap();
    ep.post(ch, Some(CHILD), vec![0; HUGE]).unwrap();
    // Kill the sender once its data is streaming into our buffer.
    until_streaming(&mut ep);
    child.kill().unwrap();
    child.wait().unwrap();
    let started = std::time::Instant::now();
    let ev = ep
        .wait_channel_event(|e| matches!(e, ChannelEvent::ReceiveFailed { .. }), T)
        .expect("an error event, not a hang");
    let ChannelEvent::ReceiveFailed { from, error, .. } = ev else {
        unreachable!()
    };
    assert_eq!(from, CHILD);
    assert!(
        matches!(error, bcl::TransferError::PeerUnreachable(a) if a == CHILD),
        "{error:?}"
    );
    eprintln!("receiver learnt of the death in {:?}", started.elapsed());
}

#[test]
fn a_receiver_killed_mid_transfer_is_an_error_event_for_the_sender() {
    let job = job(11);
    let mut ep = endpoint(job, PARENT, ProgressMode::BusyPoll);
    ep.add_peer(CHILD, shm_descriptor(CHILD));
    let mut child = spawn_child("receiver", job);
    let d = ep.recv_blocking(T).unwrap();
    let ch = bcl::core::ChannelId(u16::from_le_bytes(
        ep.message(&d).unwrap().try_into().unwrap(),
    ));
    ep.release(d).unwrap();
    let h = ep.send_on_channel(CHILD, ch, vec![3; HUGE]).unwrap();
    until_streaming(&mut ep);
    child.kill().unwrap();
    child.wait().unwrap();
    let buffer = expect_send_failed_peer_gone(&mut ep, h, CHILD);
    assert_eq!(buffer.len(), HUGE, "the send buffer comes back");
}

// ------------------------------------------------------------------------
// One poll for all methods.

/// Per sender: messages in order and intact, then a normal-channel
/// transfer, whatever method carries them.
fn stream_to(ep: &mut Endpoint, to: ProcessAddr, seed: u32, ch: bcl::core::ChannelId) {
    for i in 0..2000u32 {
        let m = pattern(8 + (i as usize * 37) % 3000, seed + i);
        ep.send_blocking(to, &m, T).unwrap();
    }
    let big = pattern(1 << 20, seed);
    ep.send_on_channel_blocking(to, ch, big, T).unwrap();
}

#[test]
fn one_blocking_poll_serves_shared_memory_and_network_peers_alike() {
    use bcl::udp::{UdpConfig, UdpMethod};
    let job = job(12);
    let (a, b, c) = (
        ProcessAddr::new(1, 1),
        ProcessAddr::new(1, 2),
        ProcessAddr::new(2, 1),
    );
    let udp = || Box::new(UdpMethod::open(UdpConfig::new("127.0.0.1:0".parse().unwrap())).unwrap());
    // `a` reaches `b` by shared memory and `c` by UDP, and sleeps in one
    // epoll on both methods when idle.
    let mut ea = Endpoint::builder(a, job)
        .method(Box::new(ShmMethod::open(job, a).unwrap()))
        .method(udp())
        .mode(ProgressMode::Blocking)
        .build()
        .unwrap();
    let mut eb = endpoint(job, b, ProgressMode::Blocking);
    let mut ec = Endpoint::builder(c, job)
        .method(udp())
        .mode(ProgressMode::Blocking)
        .build()
        .unwrap();
    let da = ea.descriptors();
    assert_eq!(
        (da[0].method.as_str(), da[1].method.as_str()),
        ("shm", "udp")
    );
    // Each method is reachable by its own type; a type it lacks is not.
    assert!(ea.method_mut::<ShmMethod>().is_some());
    assert!(ea.method_mut::<UdpMethod>().is_some());
    assert!(ec.method_mut::<ShmMethod>().is_none());
    eb.add_peer(a, da[0].clone());
    ec.add_peer(a, da[1].clone());
    ea.add_peer(b, eb.descriptors()[0].clone());
    ea.add_peer(c, ec.descriptors()[0].clone());
    let (chb, chc) = (
        ea.open_normal_channel().unwrap(),
        ea.open_normal_channel().unwrap(),
    );
    ea.post(chb, Some(b), vec![0; 1 << 20]).unwrap();
    ea.post(chc, Some(c), vec![0; 1 << 20]).unwrap();
    let tb = std::thread::spawn(move || {
        stream_to(&mut eb, a, 1, chb);
        eb
    });
    let tc = std::thread::spawn(move || {
        stream_to(&mut ec, a, 2, chc);
        ec
    });
    // One loop, one wait: whatever comes first is handled first.
    let mut next = [0u32; 2];
    let mut transfers = 0;
    let deadline = std::time::Instant::now() + T;
    while next != [2000, 2000] || transfers < 2 {
        assert!(
            std::time::Instant::now() < deadline,
            "stuck at {next:?}, {transfers} transfers"
        );
        while let Some(d) = ea.poll_delivery() {
            let k = usize::from(d.from == c);
            let (seed, i) = ([1, 2][k], next[k]);
            assert_eq!(
                ea.message(&d).unwrap(),
                &pattern(8 + (i as usize * 37) % 3000, seed + i)[..],
                "message {i} from {}",
                d.from
            );
            next[k] += 1;
            ea.release(d).unwrap();
        }
        while let Some(ev) = ea.poll_channel_event() {
            let ChannelEvent::Received {
                from, buffer, len, ..
            } = ev
            else {
                panic!("unexpected {ev:?}");
            };
            assert_eq!(len, 1 << 20);
            assert!(buffer == pattern(1 << 20, if from == b { 1 } else { 2 }));
            transfers += 1;
        }
        let soon = ea.now() + Duration::from_millis(100);
        ea.progress_or_wait(Some(soon)).unwrap();
    }
    // Keep acknowledging until both senders are done.
    while !(tb.is_finished() && tc.is_finished()) {
        let soon = ea.now() + Duration::from_millis(5);
        ea.progress_or_wait(Some(soon)).unwrap();
    }
    let (eb, ec) = (tb.join().unwrap(), tc.join().unwrap());
    let s = ea.engine_stats();
    assert!(s.woken_by_frames > 0, "it slept and was woken: {s:?}");
    // Each link ran its own protocol in the same poll: the shm peer's
    // frames were never resent, the UDP peer's were acknowledged.
    assert_eq!(eb.port().stats().retransmits, 0);
    assert!(ec.port().stats().messages_completed >= 2000);
    assert!(
        ea.port().stats().acks_sent > 0,
        "UDP frames were acknowledged"
    );
}

/// Normal-channel messages larger than the exchange queue (16 x 64 KiB),
/// both ends sleeping between rounds: the sender must be woken when the
/// receiver frees chunks, not by its timer. (A partial push used to leave
/// the sender asleep without asking to be woken: each 4 MiB message then
/// waited for the timeout.)
#[test]
fn large_normal_channel_messages_flow_in_blocking_mode() {
    let job = job(13);
    let (a, b) = (ProcessAddr::new(1, 1), ProcessAddr::new(1, 2));
    let mut ea = endpoint(job, a, ProgressMode::Blocking);
    let mut eb = endpoint(job, b, ProgressMode::Blocking);
    ea.add_peer(b, eb.descriptors()[0].clone());
    let ch = eb.open_normal_channel().unwrap();
    let len = 4 << 20;
    const ROUNDS: u32 = 8;
    let receiver = std::thread::spawn(move || {
        let mut buf = vec![0; len];
        for k in 0..ROUNDS {
            let (_, back, n) = eb
                .recv_on_channel(ch, Some(a), buf, Duration::from_secs(5))
                .unwrap_or_else(|e| panic!("message {k}: {e}"));
            assert_eq!(n, len);
            assert!(back == pattern(len, k), "message {k} intact");
            buf = back;
        }
        eb.engine_stats()
    });
    let started = std::time::Instant::now();
    for k in 0..ROUNDS {
        ea.send_on_channel_blocking(b, ch, pattern(len, k), Duration::from_secs(5))
            .unwrap_or_else(|e| panic!("send {k}: {e}"));
    }
    let rx = receiver.join().unwrap();
    let tx = ea.engine_stats();
    eprintln!(
        "{ROUNDS} x 4 MiB in {:?}; sender {tx:?}, receiver {rx:?}",
        started.elapsed()
    );
    assert!(tx.waits > 0 || rx.waits > 0, "the ends did sleep");
    assert_eq!(
        tx.woken_by_timer, 0,
        "the sender was never left to its timer: {tx:?}"
    );
}
