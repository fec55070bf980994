//! One-copy transfers over shared memory: with bcl-shm's shared heap as
//! the global allocator, large send buffers live in memfds the receiver
//! maps, and it copies normal-channel messages, RMA puts and get replies
//! straight from them. Checks the data, that the one-copy path was the one
//! taken (and the exchange queue when the receiver refuses), and that a
//! sender whose receiver dies while lent its buffer gets an error event.

mod shm_common;

use bcl::shm::heap::SharedHeap;
use bcl::shm::ShmMethod;
use bcl::{ChannelEvent, Endpoint, JobKey, ProcessAddr, ProgressMode};
use shm_common::{
    endpoint as endpoint_in, expect_send_failed_peer_gone, job, pattern, put_then_get,
    shm_descriptor, CHILD, PARENT, T,
};
use std::time::Duration;

#[global_allocator]
static HEAP: SharedHeap = SharedHeap::new();

fn endpoint(job: JobKey, addr: ProcessAddr) -> Endpoint {
    endpoint_in(job, addr, ProgressMode::BusyPoll)
}

fn shm_stats(ep: &mut Endpoint) -> bcl::shm::ShmMethodStats {
    ep.method_mut::<ShmMethod>().unwrap().stats()
}

/// Sizes of the normal-channel messages: one below the heap's threshold
/// (private memory: pushed), the rest in the heap (one copy), the largest
/// copied in several steps.
const SIZES: [usize; 5] = [100 << 10, 256 << 10, (1 << 20) + 3, 4 << 20, 20 << 20];
const IN_HEAP: u64 = 4;

/// Sends every size on a normal channel, then an RMA put and get of 3 MiB
/// into a region of `b`; checks everything arrived intact. Returns the
/// sender's and the receiver's shm counters.
fn transfers(
    tag: u32,
    read_peer_heaps: bool,
    mode: ProgressMode,
) -> (bcl::shm::ShmMethodStats, bcl::shm::ShmMethodStats) {
    let job = job(tag);
    let (a, b) = (ProcessAddr::new(1, 1), ProcessAddr::new(1, 2));
    let mut ea = endpoint_in(job, a, mode);
    let mut eb = endpoint_in(job, b, mode);
    eb.method_mut::<ShmMethod>()
        .unwrap()
        .set_read_peer_heaps(read_peer_heaps);
    ea.add_peer(b, eb.descriptors()[0].clone());
    let ch = eb.open_normal_channel().unwrap();
    let region = eb.register(vec![0; 8 << 20]);
    let rma = eb.open_rma_channel(region, 77).unwrap();
    let receiver = std::thread::spawn(move || {
        let mut got = Vec::new();
        for &len in &SIZES {
            let (from, buf, n) = eb.recv_on_channel(ch, None, vec![0; len + 5], T).unwrap();
            assert_eq!((from, n), (a, len));
            got.push(buf[..n].to_vec());
        }
        // Serve RMA until the initiator says it is done.
        let d = eb.recv_blocking(T).unwrap();
        eb.release(d).unwrap();
        let region_bytes = eb.region(region).unwrap()[1 << 20..4 << 20].to_vec();
        (got, region_bytes, shm_stats(&mut eb))
    });
    for (i, &len) in SIZES.iter().enumerate() {
        let m = pattern(len, i as u32);
        let back = ea.send_on_channel_blocking(b, ch, m.clone(), T).unwrap();
        assert!(back == m, "the send buffer comes back unchanged");
    }
    let put = put_then_get(&mut ea, b, rma);
    ea.send_blocking(b, b"done", T).unwrap();
    let (received, region_bytes, rx) = receiver.join().unwrap();
    for (i, (m, &len)) in received.iter().zip(&SIZES).enumerate() {
        assert!(
            *m == pattern(len, i as u32),
            "message of {len} bytes intact"
        );
    }
    assert!(region_bytes == put, "the put landed in the region");
    // The receiver's answers to one-copy transfers (which count them as
    // shared here) may still be on their way when its thread ends: take
    // them in before counting.
    let deadline = std::time::Instant::now() + T;
    while ea.method_mut::<ShmMethod>().unwrap().transfers_lent() > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "answers to lent transfers never came: {:?}",
            shm_stats(&mut ea)
        );
        ea.progress().unwrap();
    }
    (shm_stats(&mut ea), rx)
}

#[test]
fn large_transfers_are_copied_once_from_the_senders_heap() {
    one_copy(1, ProgressMode::BusyPoll);
}

/// Blocking endpoints: the receiver must not sleep while it has a transfer
/// half copied (20 MiB takes three copy steps).
#[test]
fn large_transfers_are_copied_once_in_blocking_mode() {
    one_copy(4, ProgressMode::Blocking);
}

fn one_copy(tag: u32, mode: ProgressMode) {
    let (tx, rx) = transfers(tag, true, mode);
    // Four normal-channel messages and the put from a's heap, the get
    // reply from b's region (8 MiB: in b's heap).
    assert_eq!(tx.bulk_sent_shared, IN_HEAP + 1, "{tx:?}");
    assert_eq!(rx.bulk_received_shared, IN_HEAP + 1, "{rx:?}");
    assert_eq!(rx.bulk_sent_shared, 1, "the get reply: {rx:?}");
    assert_eq!(tx.bulk_received_shared, 1, "{tx:?}");
    // The message below the heap's threshold was pushed.
    assert_eq!(tx.bulk_sent, IN_HEAP + 2, "{tx:?}");
    assert_eq!(rx.shared_refused, 0);
}

/// Between copy steps of a transfer, the receiving method has work of its
/// own: a blocking engine must not sleep then (no peer would wake it).
#[test]
fn a_receiver_half_way_through_a_copy_does_not_sleep() {
    use bcl::core::method::Method;
    let job = job(5);
    let (a, b) = (ProcessAddr::new(1, 1), ProcessAddr::new(1, 2));
    let mut ea = endpoint(job, a);
    let mut eb = endpoint(job, b);
    ea.add_peer(b, eb.descriptors()[0].clone());
    eb.add_peer(a, ea.descriptors()[0].clone());
    let ch = eb.open_normal_channel().unwrap();
    eb.post(ch, Some(a), vec![0; 20 << 20]).unwrap();
    let m = pattern(20 << 20, 3);
    ea.send_on_channel(b, ch, m.clone()).unwrap();
    let deadline = std::time::Instant::now() + T;
    while eb.method_mut::<ShmMethod>().unwrap().copies_in_progress() == 0 {
        assert!(std::time::Instant::now() < deadline, "never started");
        ea.progress().unwrap();
        eb.progress().unwrap();
    }
    let shm = eb.method_mut::<ShmMethod>().unwrap();
    let may_sleep = shm.prepare_wait();
    shm.finish_wait();
    assert!(!may_sleep, "12 MiB left to copy: no sleeping");
    let got = loop {
        assert!(std::time::Instant::now() < deadline, "never finished");
        ea.progress().unwrap();
        eb.progress().unwrap();
        if let Some(ChannelEvent::Received { buffer, len, .. }) = eb.poll_channel_event() {
            break buffer[..len].to_vec();
        }
    };
    assert!(got == m);
    assert_eq!(shm_stats(&mut eb).bulk_received_shared, 1);
}

#[test]
fn a_receiver_that_does_not_read_peer_heaps_gets_the_data_pushed() {
    let (tx, rx) = transfers(2, false, ProgressMode::BusyPoll);
    assert_eq!(rx.shared_refused, IN_HEAP + 1, "{rx:?}");
    assert_eq!(tx.bulk_sent_shared, 0, "{tx:?}");
    assert_eq!(rx.bulk_received_shared, 0, "{rx:?}");
    assert_eq!(tx.bulk_sent, IN_HEAP + 2, "everything pushed: {tx:?}");
    // The get reply comes from b, and a reads peer heaps.
    assert_eq!(tx.bulk_received_shared, 1, "{tx:?}");
}

// ------------------------------------------------------------------------
// A receiver that dies while it holds the sender's buffer.

/// A transfer several copy steps long (the receiver copies 8 MiB of it per
/// progress call).
const BIG: usize = 256 << 20;

/// The peer process: opens a channel, tells the parent, posts a buffer,
/// takes the parent's notice (copying the first step), and then stops
/// making progress (it never finishes, never answers) until it is killed.
#[test]
fn child_entry() {
    let Ok(job) = std::env::var("BCL_SHARED_HEAP_CHILD_JOB") else {
        return;
    };
    let job = JobKey(job.parse().unwrap());
    let mut ep = endpoint(job, CHILD);
    ep.add_peer(PARENT, shm_descriptor(PARENT));
    let ch = ep.open_normal_channel().unwrap();
    ep.post(ch, Some(PARENT), vec![0; BIG]).unwrap();
    ep.send_blocking(PARENT, &ch.0.to_le_bytes(), T).unwrap();
    let deadline = std::time::Instant::now() + T;
    while ep.port().transfers_in_progress() == 0 && std::time::Instant::now() < deadline {
        ep.progress().unwrap();
    }
    std::thread::sleep(T);
}

#[test]
fn a_receiver_killed_while_lent_the_buffer_is_an_error_event_for_the_sender() {
    let job = job(3);
    let mut ep = endpoint(job, PARENT);
    ep.add_peer(CHILD, shm_descriptor(CHILD));
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["child_entry", "--exact", "--nocapture", "-q"])
        .env("BCL_SHARED_HEAP_CHILD_JOB", job.0.to_string())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let d = ep.recv_blocking(T).unwrap();
    let ch = bcl::core::ChannelId(u16::from_le_bytes(
        ep.message(&d).unwrap().try_into().unwrap(),
    ));
    ep.release(d).unwrap();
    let h = ep.send_on_channel(CHILD, ch, vec![9; BIG]).unwrap();
    // The notice is out once the method holds the transfer as lent; the
    // child never answers, so nothing completes meanwhile.
    let lent = std::time::Instant::now() + Duration::from_millis(300);
    while std::time::Instant::now() < lent {
        ep.progress().unwrap();
        if let Some(ev) = ep.poll_channel_event() {
            panic!("nothing completes while the child holds the buffer: {ev:?}");
        }
    }
    let shm = ep.method_mut::<ShmMethod>().unwrap();
    assert_eq!(shm.transfers_lent(), 1, "the child is reading our buffer");
    child.kill().unwrap();
    child.wait().unwrap();
    let buffer = expect_send_failed_peer_gone(&mut ep, h, CHILD);
    assert!(
        buffer.len() == BIG && buffer.iter().all(|&b| b == 9),
        "the send buffer comes back"
    );
    let shm = ep.method_mut::<ShmMethod>().unwrap();
    assert_eq!(shm.stats().bulk_sent_shared, 0);
    assert_eq!(shm.transfers_lent(), 0, "forgotten with the receiver");
}
