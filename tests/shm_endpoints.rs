//! BCL over shared memory through the whole engine: system-channel messages
//! of every size (direct, inline frame, exchange-queue frame), normal
//! channels and RMA as bulk transfers, one event queue for shared-memory
//! and network peers, blocking mode, and peers that die.

use bcl::shm::ShmMethod;
use bcl::{ChannelEvent, Endpoint, JobKey, ProcessAddr, ProgressMode};
use std::time::Duration;

const T: Duration = Duration::from_secs(20);

/// A job key unique to this test run, so concurrent runs never meet.
fn job(tag: u32) -> JobKey {
    JobKey(std::process::id() << 8 ^ tag)
}

fn endpoint(job: JobKey, addr: ProcessAddr, mode: ProgressMode) -> Endpoint {
    Endpoint::builder(addr, job)
        .method(Box::new(ShmMethod::open(job, addr).unwrap()))
        .mode(mode)
        .build()
        .unwrap()
}

fn pattern(len: usize, seed: u32) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u32).wrapping_mul(31).wrapping_add(seed) as u8)
        .collect()
}

/// Sizes that take every path: direct messages, inline frames (the engine
/// falls back to frames when the shortcut is not free), big frames.
const SIZES: [usize; 8] = [0, 1, 8, 200, 231, 232, 5000, 16 * 1024];

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
    let mut expect = Vec::new();
    for r in 0..rounds {
        for (k, &len) in SIZES.iter().enumerate() {
            let m = pattern(len, (r * 10 + k) as u32);
            ea.send_blocking(b, &m, T).unwrap();
            expect.push(m);
        }
    }
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
    let put = pattern(3 << 20, 5);
    ea.put_blocking(b, rma, 77, 1 << 20, put.clone(), T)
        .unwrap();
    let got = ea
        .get_blocking(b, rma, 77, 1 << 20, vec![0; 3 << 20], T)
        .unwrap();
    assert!(got == put, "get reads what put wrote");
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
