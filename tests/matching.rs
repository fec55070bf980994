//! MPI's message matching in the messenger, whole stack in virtual time:
//! receives of any sender or any tag, the order in which messages and
//! receives pair up, probe, cancel and synchronous sends.
//!
//! Each step runs until the fabric is quiet, so the order in which
//! messages arrive is the order of the steps, and a reference matcher (two
//! lists searched front to back, as the MPI standard words it) says what
//! each receive must get.

// Only the job is used here, not its drive loop.
#[allow(dead_code)]
mod coll_common;

use bcl::coll::messenger::{Envelope, Pattern, RecvId};
use bcl::coll::Coll;
use bcl::sim::FaultProfile;
use bcl::{ProcessAddr, SimCluster};
use proptest::prelude::*;
use std::time::Duration;

/// A context no communicator of the job uses.
const CONTEXT: u32 = 1 << 30;

/// Runs every process for `span` of virtual time.
fn settle(cluster: &mut SimCluster, colls: &mut [Coll], span: Duration) {
    let end = cluster.now() + span;
    loop {
        let mut moved = 0;
        for c in colls.iter_mut() {
            moved += c.messenger().progress_full().unwrap();
        }
        if moved > 0 {
            continue;
        }
        let next = colls
            .iter_mut()
            .filter_map(|c| c.messenger().endpoint().next_timeout())
            .chain(cluster.fabric.next_delivery())
            .min();
        match next {
            Some(t) if t < end => cluster.clock.set(t.max(cluster.now())),
            _ => {
                cluster.clock.set(end);
                return;
            }
        }
    }
}

const STEP: Duration = Duration::from_millis(1);

fn addr(i: usize) -> ProcessAddr {
    SimCluster::addr(i)
}

fn any(from: Option<usize>, tag: Option<u64>) -> Pattern {
    Pattern {
        context: CONTEXT,
        from: from.map(addr),
        tag,
    }
}

/// Sends `data` from `from` to process 0 and lets it arrive.
fn send(cluster: &mut SimCluster, colls: &mut [Coll], from: usize, tag: u64, data: &[u8]) {
    let id = colls[from]
        .messenger()
        .isend(addr(0), CONTEXT, tag, data)
        .unwrap();
    settle(cluster, colls, STEP);
    assert!(matches!(
        colls[from].messenger().take_send(id),
        Some(Ok(()))
    ));
}

/// The receive's (sender, tag, data), once complete.
fn taken(colls: &mut [Coll], id: RecvId) -> Option<(usize, u64, Vec<u8>)> {
    let r = colls[0].messenger().take_received(id)?.unwrap();
    let from = (0..colls.len()).find(|&i| addr(i) == r.from).unwrap();
    Some((from, r.tag, r.data))
}

#[test]
fn wildcards_take_messages_in_arrival_order_and_report_the_envelope() {
    let (mut cluster, mut colls) = coll_common::sim_job(3, FaultProfile::default());
    let c = &mut colls;
    send(&mut cluster, c, 1, 5, b"a");
    send(&mut cluster, c, 2, 9, b"b");
    send(&mut cluster, c, 1, 6, b"c");
    // A probe sees the earliest match and takes nothing.
    let first = Envelope {
        from: addr(1),
        tag: 5,
        len: 1,
    };
    assert_eq!(c[0].messenger().probe(&any(None, None)), Some(first));
    assert_eq!(c[0].messenger().probe(&any(None, None)), Some(first));
    assert_eq!(
        c[0].messenger().probe(&any(Some(2), None)).map(|e| e.tag),
        Some(9)
    );
    assert_eq!(c[0].messenger().probe(&any(Some(2), Some(5))), None);
    // Any tag from 1, then anything, then anything: arrival order.
    let r1 = c[0].messenger().irecv_matching(any(Some(1), None));
    let r2 = c[0].messenger().irecv_matching(any(None, None));
    let r3 = c[0].messenger().irecv_matching(any(None, Some(6)));
    assert_eq!(taken(c, r1), Some((1, 5, b"a".to_vec())));
    assert_eq!(taken(c, r2), Some((2, 9, b"b".to_vec())));
    assert_eq!(taken(c, r3), Some((1, 6, b"c".to_vec())));
    assert_eq!(c[0].messenger().probe(&any(None, None)), None);
}

#[test]
fn a_message_goes_to_the_earliest_posted_receive_it_matches() {
    let (mut cluster, mut colls) = coll_common::sim_job(2, FaultProfile::default());
    let c = &mut colls;
    let exact = c[0].messenger().irecv_matching(any(Some(1), Some(3)));
    let wild = c[0].messenger().irecv_matching(any(None, None));
    send(&mut cluster, c, 1, 3, b"x");
    assert_eq!(taken(c, exact), Some((1, 3, b"x".to_vec())));
    assert_eq!(taken(c, wild), None);
    let exact = c[0].messenger().irecv_matching(any(Some(1), Some(3)));
    send(&mut cluster, c, 1, 3, b"y");
    assert_eq!(taken(c, wild), Some((1, 3, b"y".to_vec())));
    assert_eq!(taken(c, exact), None);
    // Withdrawn, the receive takes nothing; the next message waits.
    assert!(c[0].messenger().cancel_recv(exact));
    send(&mut cluster, c, 1, 3, b"z");
    assert_eq!(
        c[0].messenger().probe(&any(None, None)).map(|e| e.len),
        Some(1)
    );
    let late = c[0].messenger().irecv_matching(any(Some(1), Some(3)));
    assert_eq!(taken(c, late), Some((1, 3, b"z".to_vec())));
    // A completed receive cannot be withdrawn.
    let done = c[0].messenger().irecv_matching(any(None, None));
    send(&mut cluster, c, 1, 0, b"");
    assert!(!c[0].messenger().cancel_recv(done));
    assert_eq!(taken(c, done), Some((1, 0, Vec::new())));
}

#[test]
fn large_messages_match_wildcards_like_small_ones() {
    let (mut cluster, mut colls) = coll_common::sim_job(3, FaultProfile::default());
    let c = &mut colls;
    let big: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    let s = c[2].messenger().isend(addr(0), CONTEXT, 4, &big).unwrap();
    settle(&mut cluster, c, STEP);
    send(&mut cluster, c, 1, 4, b"small");
    assert_eq!(
        c[0].messenger().probe(&any(None, Some(4))),
        Some(Envelope {
            from: addr(2),
            tag: 4,
            len: big.len()
        })
    );
    let r = c[0].messenger().irecv_matching(any(None, Some(4)));
    settle(&mut cluster, c, STEP * 20);
    assert_eq!(taken(c, r), Some((2, 4, big)));
    assert!(matches!(c[2].messenger().take_send(s), Some(Ok(()))));
    let r = c[0].messenger().irecv_matching(any(None, None));
    assert_eq!(taken(c, r), Some((1, 4, b"small".to_vec())));
}

#[test]
fn a_synchronous_send_completes_only_once_a_receive_matched_it() {
    let (mut cluster, mut colls) = coll_common::sim_job(2, FaultProfile::default());
    let c = &mut colls;
    for len in [0usize, 8, 200_000] {
        let data = vec![7u8; len];
        let s = c[1]
            .messenger()
            .isend_sync(addr(0), CONTEXT, 1, &data)
            .unwrap();
        settle(&mut cluster, c, STEP * 5);
        assert!(c[1].messenger().take_send(s).is_none(), "{len} B: before");
        let r = c[0].messenger().irecv_matching(any(None, None));
        settle(&mut cluster, c, STEP * 20);
        assert_eq!(taken(c, r), Some((1, 1, data)), "{len} B");
        assert!(
            matches!(c[1].messenger().take_send(s), Some(Ok(()))),
            "{len} B"
        );
    }
}

/// One step of a matching scenario.
#[derive(Clone, Debug)]
enum Step {
    /// Process `from` (1 or 2) sends to 0 under `tag`.
    Send { from: usize, tag: u64 },
    /// Process 0 posts a receive.
    Post {
        from: Option<usize>,
        tag: Option<u64>,
    },
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        (1..3usize, 0..3u64).prop_map(|(from, tag)| Step::Send { from, tag }),
        (
            proptest::option::of(1..3usize),
            proptest::option::of(0..3u64)
        )
            .prop_map(|(from, tag)| Step::Post { from, tag }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Random sends and receives with random wildcards: every receive gets
    /// what the reference matcher says, and what is left over is the same.
    #[test]
    fn matching_follows_the_reference(steps in proptest::collection::vec(step(), 1..24)) {
        let (mut cluster, mut colls) = coll_common::sim_job(3, FaultProfile::default());
        let c = &mut colls;
        // The reference: unmatched messages and receives, each in order.
        let mut waiting_msgs: Vec<(usize, u64, u8)> = Vec::new();
        let mut waiting_recvs: Vec<(Option<usize>, Option<u64>, usize)> = Vec::new();
        let mut expect: Vec<Option<(usize, u64, Vec<u8>)>> = Vec::new();
        let mut ids = Vec::new();
        let fits = |f: Option<usize>, t: Option<u64>, from: usize, tag: u64| {
            f.is_none_or(|f| f == from) && t.is_none_or(|t| t == tag)
        };
        for (n, s) in steps.iter().enumerate() {
            let payload = n as u8;
            match *s {
                Step::Send { from, tag } => {
                    send(&mut cluster, c, from, tag, &[payload]);
                    match waiting_recvs.iter().position(|&(f, t, _)| fits(f, t, from, tag)) {
                        Some(i) => {
                            let (_, _, r) = waiting_recvs.remove(i);
                            expect[r] = Some((from, tag, vec![payload]));
                        }
                        None => waiting_msgs.push((from, tag, payload)),
                    }
                }
                Step::Post { from, tag } => {
                    ids.push(c[0].messenger().irecv_matching(any(from, tag)));
                    let r = expect.len();
                    expect.push(None);
                    match waiting_msgs.iter().position(|&(f, t, _)| fits(from, tag, f, t)) {
                        Some(i) => {
                            let (f, t, p) = waiting_msgs.remove(i);
                            expect[r] = Some((f, t, vec![p]));
                        }
                        None => waiting_recvs.push((from, tag, r)),
                    }
                }
            }
        }
        for (r, id) in ids.into_iter().enumerate() {
            prop_assert_eq!(taken(c, id), expect[r].clone(), "receive {}", r);
        }
        let left = c[0].messenger().probe(&any(None, None)).map(|e| e.tag);
        prop_assert_eq!(left, waiting_msgs.first().map(|m| m.1));
    }
}

#[test]
fn a_synchronous_send_to_oneself_completes_when_received() {
    let (mut cluster, mut colls) = coll_common::sim_job(1, FaultProfile::default());
    let c = &mut colls;
    let s = c[0]
        .messenger()
        .isend_sync(addr(0), CONTEXT, 2, b"me")
        .unwrap();
    settle(&mut cluster, c, STEP);
    assert!(c[0].messenger().take_send(s).is_none());
    let r = c[0].messenger().irecv_matching(any(Some(0), Some(2)));
    assert_eq!(taken(c, r), Some((0, 2, b"me".to_vec())));
    assert!(matches!(c[0].messenger().take_send(s), Some(Ok(()))));
}

#[test]
fn recv_now_copies_in_place_and_keeps_the_matching_order() {
    use bcl::coll::messenger::RecvNow;
    let (mut cluster, mut colls) = coll_common::sim_job(3, FaultProfile::default());
    let c = &mut colls;
    let mut buf = [0u8; 4];
    // Nothing yet.
    assert_eq!(
        c[0].messenger()
            .recv_now(&any(None, None), &mut buf)
            .unwrap(),
        RecvNow::Nothing
    );
    // An earlier posted receive gets the message first.
    let posted = c[0].messenger().irecv_matching(any(Some(1), Some(7)));
    send(&mut cluster, c, 1, 7, b"first");
    send(&mut cluster, c, 1, 7, b"second");
    assert_eq!(taken(c, posted), Some((1, 7, b"first".to_vec())));
    // The next one is copied in place, cut to the buffer, its whole
    // length reported.
    let got = c[0].messenger().recv_now(&any(None, Some(7)), &mut buf);
    assert_eq!(
        got.unwrap(),
        RecvNow::Got(Envelope {
            from: addr(1),
            tag: 7,
            len: 6
        })
    );
    assert_eq!(&buf, b"seco");
    // A large message gets a posted receive.
    let big = vec![3u8; 200_000];
    let s = c[2].messenger().isend(addr(0), CONTEXT, 8, &big).unwrap();
    settle(&mut cluster, c, STEP);
    let RecvNow::Posted(id) = c[0]
        .messenger()
        .recv_now(&any(Some(2), None), &mut buf)
        .unwrap()
    else {
        panic!("a rendezvous needs a posted receive");
    };
    settle(&mut cluster, c, STEP * 20);
    assert_eq!(taken(c, id), Some((2, 8, big)));
    assert!(matches!(c[2].messenger().take_send(s), Some(Ok(()))));
}

/// A receive's own buffer, handed back to the test when the messenger is
/// done with it.
struct Collect {
    buf: Vec<u8>,
    back: std::sync::mpsc::Sender<Vec<u8>>,
}

impl bcl::coll::messenger::RecvBuffer for Collect {
    fn bytes(&mut self) -> &mut [u8] {
        &mut self.buf
    }
}

impl Drop for Collect {
    fn drop(&mut self) {
        let _ = self.back.send(std::mem::take(&mut self.buf));
    }
}

fn collect(len: usize) -> (Box<Collect>, std::sync::mpsc::Receiver<Vec<u8>>) {
    let (back, rx) = std::sync::mpsc::channel();
    (
        Box::new(Collect {
            buf: vec![0; len],
            back,
        }),
        rx,
    )
}

#[test]
fn messages_land_in_the_receives_own_buffer_and_regions_are_read_in_place() {
    use bcl::coll::messenger::{Incoming, RecvNow};
    use bcl::shm::cma::Region;
    let (mut cluster, mut colls) = coll_common::sim_job(2, FaultProfile::default());
    let c = &mut colls;
    // A small message lands in the buffer of a posted receive.
    let (buf, mem) = collect(8);
    let r = c[0].messenger().irecv_into(any(None, None), buf);
    send(&mut cluster, c, 1, 3, b"landed");
    let got = c[0].messenger().take_incoming(r).unwrap().unwrap();
    let Incoming::Landed(e) = got else {
        panic!("expected the message in the buffer: {got:?}");
    };
    assert_eq!((e.from, e.tag, e.len), (addr(1), 3, 6));
    assert_eq!(&mem.recv().unwrap()[..6], b"landed");
    // A region (the endpoints share this process, so the read works):
    // into a posted receive's buffer, then through recv_now.
    let src: Vec<u8> = (0..300_000u32).map(|i| (i % 253) as u8).collect();
    let (buf, mem) = collect(src.len());
    let r = c[0].messenger().irecv_into(any(Some(1), Some(4)), buf);
    let region = Region::local(src.as_ptr() as usize, src.len()).unwrap();
    let s = c[1]
        .messenger()
        .isend_region(addr(0), CONTEXT, 4, region)
        .unwrap();
    settle(&mut cluster, c, STEP);
    assert!(matches!(
        c[0].messenger().take_incoming(r),
        Some(Ok(Incoming::Landed(_)))
    ));
    assert_eq!(mem.recv().unwrap(), src);
    assert!(matches!(c[1].messenger().take_send(s), Some(Ok(()))));
    let s = c[1]
        .messenger()
        .isend_region(addr(0), CONTEXT, 5, region)
        .unwrap();
    settle(&mut cluster, c, STEP);
    let mut into = vec![0u8; 1000];
    let got = c[0].messenger().recv_now(&any(None, Some(5)), &mut into);
    assert_eq!(
        got.unwrap(),
        RecvNow::Got(Envelope {
            from: addr(1),
            tag: 5,
            len: src.len()
        })
    );
    assert_eq!(into, src[..1000]);
    settle(&mut cluster, c, STEP);
    assert!(matches!(c[1].messenger().take_send(s), Some(Ok(()))));
    let stats = c[0].messenger().stats();
    assert_eq!(stats.read_remote, 2);
}

#[test]
fn a_large_message_by_rendezvous_lands_in_the_receives_own_buffer() {
    use bcl::coll::messenger::Incoming;
    let (mut cluster, mut colls) = coll_common::sim_job(2, FaultProfile::default());
    let c = &mut colls;
    let src: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    // Posted first, with room for all of it: the message comes on a
    // normal channel and is put in the receive's buffer when complete.
    let (buf, mem) = collect(src.len());
    let r = c[0].messenger().irecv_into(any(Some(1), Some(6)), buf);
    send(&mut cluster, c, 1, 6, &src);
    let got = c[0].messenger().take_incoming(r).unwrap().unwrap();
    let Incoming::Landed(e) = got else {
        panic!("expected the message in the buffer: {got:?}");
    };
    assert_eq!((e.from, e.tag, e.len), (addr(1), 6, src.len()));
    assert_eq!(mem.recv().unwrap(), src);
    // A buffer shorter than the message gets what fits, and the envelope
    // says how long the message was (the caller reports truncation).
    let (buf, mem) = collect(1000);
    let r = c[0].messenger().irecv_into(any(Some(1), Some(7)), buf);
    send(&mut cluster, c, 1, 7, &src);
    let Some(Ok(Incoming::Landed(e))) = c[0].messenger().take_incoming(r) else {
        panic!("expected the message's start in the buffer");
    };
    assert_eq!(e.len, src.len());
    assert_eq!(mem.recv().unwrap(), src[..1000]);
    assert_eq!(c[1].messenger().stats().rendezvous_sent, 2);
}

/// Memory lent for a send; says when the port is done with it.
struct LentSend {
    bytes: Vec<u8>,
    done: std::sync::mpsc::Sender<()>,
}

impl bcl::core::lent::LentBytes for LentSend {
    fn bytes(&self) -> &[u8] {
        &self.bytes
    }
}

impl Drop for LentSend {
    fn drop(&mut self) {
        let _ = self.done.send(());
    }
}

/// `bytes` lent for a send, and the receiver of its "given back" signal.
fn lent_send(bytes: Vec<u8>) -> (Box<LentSend>, std::sync::mpsc::Receiver<()>) {
    let (done, given_back) = std::sync::mpsc::channel();
    (Box::new(LentSend { bytes, done }), given_back)
}

/// A receive buffer that can be lent: its vector moves into the lent box,
/// which gives it back when the port is done with it.
struct Lendable {
    buf: Vec<u8>,
    back: std::sync::mpsc::Sender<Vec<u8>>,
}

struct LentRecv(Collect);

impl bcl::core::lent::LentBytes for LentRecv {
    fn bytes(&self) -> &[u8] {
        &self.0.buf
    }
}

impl bcl::core::lent::LentBytesMut for LentRecv {
    fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.0.buf
    }
}

impl bcl::coll::messenger::RecvBuffer for Lendable {
    fn bytes(&mut self) -> &mut [u8] {
        &mut self.buf
    }

    fn lend(&mut self) -> Option<Box<dyn bcl::core::lent::LentBytesMut>> {
        Some(Box::new(LentRecv(Collect {
            buf: std::mem::take(&mut self.buf),
            back: self.back.clone(),
        })))
    }
}

#[test]
fn lent_memory_is_sent_from_and_received_into_without_a_copy() {
    use bcl::coll::messenger::Incoming;
    let (mut cluster, mut colls) = coll_common::sim_job(2, FaultProfile::default());
    let c = &mut colls;
    let src: Vec<u8> = (0..300_000u32).map(|i| (i % 241) as u8).collect();
    let (back, landed) = std::sync::mpsc::channel();
    let r = c[0].messenger().irecv_into(
        any(Some(1), Some(8)),
        Box::new(Lendable {
            buf: vec![0; src.len()],
            back,
        }),
    );
    let (lent, sent) = lent_send(src.clone());
    let s = c[1]
        .messenger()
        .isend_lent(addr(0), CONTEXT, 8, lent)
        .unwrap();
    settle(&mut cluster, c, STEP);
    assert!(matches!(c[1].messenger().take_send(s), Some(Ok(()))));
    assert!(sent.try_recv().is_ok(), "the port gave the lent send back");
    let Some(Ok(Incoming::Landed(e))) = c[0].messenger().take_incoming(r) else {
        panic!("expected the message in the lent buffer");
    };
    assert_eq!((e.from, e.tag, e.len), (addr(1), 8, src.len()));
    assert_eq!(
        landed.try_recv().unwrap(),
        src,
        "written into the lent memory"
    );
    assert_eq!(c[1].messenger().stats().lent_sent, 1);
    assert_eq!(c[0].messenger().stats().lent_received, 1);
    // A small message from lent memory goes inline, copied at once.
    let (lent, sent) = lent_send(b"small".to_vec());
    let s = c[1]
        .messenger()
        .isend_lent(addr(0), CONTEXT, 9, lent)
        .unwrap();
    assert!(sent.try_recv().is_ok(), "copied and given back at once");
    settle(&mut cluster, c, STEP);
    assert!(matches!(c[1].messenger().take_send(s), Some(Ok(()))));
    let mut into = [0u8; 8];
    let got = c[0].messenger().recv_now(&any(Some(1), Some(9)), &mut into);
    assert!(matches!(got, Ok(bcl::coll::messenger::RecvNow::Got(_))));
    assert_eq!(&into[..5], b"small");
    assert_eq!(c[1].messenger().stats().lent_sent, 1);
}

#[test]
fn a_receive_into_lent_memory_fails_only_after_the_port_gave_the_memory_back() {
    // The owner of lent memory may free it as soon as its receive ends:
    // when the sender is lost, the port must have let go of the memory
    // (no late frame may write there) before the receive reports failure.
    let wire = FaultProfile {
        delay: Duration::from_micros(20),
        ..FaultProfile::default()
    };
    let (mut cluster, mut colls) = coll_common::sim_job(2, wire);
    let c = &mut colls;
    let (back, given_back) = std::sync::mpsc::channel();
    let r = c[0].messenger().irecv_into(
        any(Some(1), Some(8)),
        Box::new(Lendable {
            buf: vec![0; 3 << 20],
            back,
        }),
    );
    let (lent, _sent) = lent_send(vec![7; 3 << 20]);
    c[1].messenger()
        .isend_lent(addr(0), CONTEXT, 8, lent)
        .unwrap();
    // Until the receiver has lent its buffer to the port; then the two are
    // cut apart, and the receiver's next message to the sender fails.
    for _ in 0..10_000 {
        if c[0].messenger().stats().lent_received == 1 {
            break;
        }
        settle(&mut cluster, c, Duration::from_micros(1));
    }
    assert_eq!(c[0].messenger().stats().lent_received, 1);
    let cut = FaultProfile {
        loss: 1.0,
        ..FaultProfile::default()
    };
    cluster.fabric.set_faults(0, 1, cut.clone());
    cluster.fabric.set_faults(1, 0, cut);
    let probe = vec![1u8; 64];
    c[0].messenger().isend(addr(1), CONTEXT, 9, &probe).unwrap();
    let mut failed = false;
    for _ in 0..600 {
        settle(&mut cluster, c, Duration::from_millis(100));
        if let Some(result) = c[0].messenger().take_incoming(r) {
            assert!(result.is_err(), "the receive cannot succeed: {result:?}");
            failed = true;
            break;
        }
        assert!(
            given_back.try_recv().is_err(),
            "the memory came back while its receive is still open"
        );
    }
    assert!(
        failed,
        "the receive did not fail within 60 s of virtual time"
    );
    assert!(
        given_back.try_recv().is_ok(),
        "the receive failed while the port still held its memory"
    );
}

/// A buffer that says it is reusable: kept once its message landed.
struct Reusable(Vec<u8>);

impl bcl::coll::messenger::RecvBuffer for Reusable {
    fn bytes(&mut self) -> &mut [u8] {
        &mut self.0
    }

    fn reusable(&self) -> bool {
        true
    }
}

#[test]
fn a_reusable_buffer_comes_back_after_its_message_landed_and_others_are_dropped() {
    let (mut cluster, mut colls) = coll_common::sim_job(2, FaultProfile::default());
    let c = &mut colls;
    // A buffer that is not reusable is dropped (it gives its bytes back).
    let (buf, mem) = collect(8);
    let r = c[0].messenger().irecv_into(any(None, None), buf);
    send(&mut cluster, c, 1, 3, b"dropped");
    assert!(c[0].messenger().take_incoming(r).is_some());
    assert_eq!(&mem.recv().unwrap()[..7], b"dropped");
    assert!(c[0].messenger().spare_buffer::<Collect>().is_none());
    // A reusable one comes back, with the message in it, for the next
    // receive.
    let r = c[0]
        .messenger()
        .irecv_into(any(None, None), Box::new(Reusable(vec![0; 8])));
    send(&mut cluster, c, 1, 4, b"kept");
    assert!(c[0].messenger().take_incoming(r).is_some());
    let back = c[0].messenger().spare_buffer::<Reusable>().expect("kept");
    assert_eq!(&back.0[..4], b"kept");
    assert!(c[0].messenger().spare_buffer::<Reusable>().is_none());
}
