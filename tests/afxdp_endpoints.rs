//! The whole stack over AF_XDP (root): two `bcl::Endpoint`s in two network
//! namespaces exchange verified messages through `AfXdpMethod`, directly
//! and through the lab's impairment bridge (loss, reordering, duplication,
//! corruption, with a fixed seed), with exactly-once, in-order delivery;
//! through the bridge, its counters show every fault was injected and the
//! ports' show the corrupted frames were caught by the CRC32C.

mod common;

use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use bcl::afxdp::{AfXdpConfig, AfXdpMethod};
use bcl::{Descriptor, Endpoint, JobKey, PortStats, ProcessAddr, ProgressMode, SendEvent};
use bcl_lab::{Lab, LabGuard};

/// Brings up `file` under a prefix of its own, or returns `None` when
/// privileged tests are skipped (`BCL_SKIP_PRIVILEGED=1`); panics with a
/// clear message when they cannot run otherwise.
fn lab(file: &str, test: &str) -> Option<LabGuard> {
    static N: AtomicU32 = AtomicU32::new(0);
    bcl_lab::require_privileges(test)
        .then(|| common::lab(file, &format!("ax{}", N.fetch_add(1, Ordering::Relaxed))))
}

/// The name of the single interface of `node`.
fn ifname(lab: &Lab, node: &str) -> String {
    lab.interfaces(node).expect("interfaces").remove(0).ifname
}

const SIZES: [usize; 8] = [1, 8, 64, 1000, 1444, 1445, 4000, 16384];

fn message(i: u32, from: u32) -> Vec<u8> {
    common::message(u64::from(i ^ (from << 24)), SIZES[i as usize % SIZES.len()])
}

/// One side: sends `count` messages to the peer, checks the `count` it
/// receives arrive exactly once and in order, then keeps acknowledging
/// until both sides are done. In blocking mode it sleeps on the method's
/// readiness descriptor between rounds that moved nothing. Returns the port
/// statistics, and them with the engine's as text for the log.
#[allow(clippy::too_many_arguments)]
fn run_side(
    mode: ProgressMode,
    me: u32,
    peer: u32,
    method: Box<dyn bcl::Method>,
    count: u32,
    to_peer: mpsc::Sender<Descriptor>,
    from_peer: mpsc::Receiver<Descriptor>,
    finished: Arc<AtomicUsize>,
    timeout: Duration,
) -> (PortStats, String) {
    let name = method.name();
    let mut ep = Endpoint::builder(ProcessAddr::new(me, 0), JobKey(5))
        .method(method)
        .mode(mode)
        .build()
        .expect("endpoint");
    assert_eq!(ep.mode(), mode, "the method has a readiness descriptor");
    to_peer.send(ep.descriptors()[0].clone()).unwrap();
    let peer_addr = ProcessAddr::new(peer, 0);
    // The engine routes by method name; afxdp and packet put the same
    // frames on the wire and share the MAC/IFINDEX address form, so a
    // peer's descriptor of the other method is offered under our name.
    let d = from_peer.recv().unwrap();
    ep.add_peer(peer_addr, Descriptor::new(name, d.address));
    if mode == ProgressMode::BusyPoll {
        // Start late, so that a blocking peer is asleep when our first
        // frames come (the test checks they woke it).
        std::thread::sleep(Duration::from_millis(50));
    }
    // A blocking side sends nothing before the peer's first message, so
    // until then it has no deadline of its own and sleeps on the method's
    // descriptor alone: only a frame can wake it, however late the peer's
    // thread gets a CPU. (A side that sent first would sleep on its
    // retransmission timer too, and on a loaded machine could be awake,
    // woken by that timer, when the peer's frames came.)
    let waits_for_peer = mode == ProgressMode::Blocking;
    let deadline = Instant::now() + timeout;
    let (mut sent, mut completed, mut received) = (0u32, 0u32, 0u32);
    let mut marked = false;
    loop {
        assert!(
            Instant::now() < deadline,
            "node {me}: timed out: sent {sent}, completed {completed}, received {received}: {:?}",
            ep.port().stats()
        );
        let may_send = !waits_for_peer || received > 0;
        while may_send && sent < count && sent - completed < 64 {
            ep.send(peer_addr, &message(sent, me)).expect("send");
            sent += 1;
        }
        let limit = ep.now()
            + if may_send {
                Duration::from_millis(20)
            } else {
                deadline.saturating_duration_since(Instant::now())
            };
        ep.progress_or_wait(Some(limit)).expect("progress");
        while let Some(ev) = ep.poll_send_event() {
            match ev {
                SendEvent::Complete(_) => completed += 1,
                SendEvent::Failed(_, f) => panic!("node {me}: send failed: {f}"),
            }
        }
        while let Some(d) = ep.poll_delivery() {
            assert_eq!(d.from, peer_addr);
            let bytes = ep.message(&d).expect("message bytes").to_vec();
            assert_eq!(
                bytes,
                message(received, peer),
                "node {me}: message {received} exactly once, in order"
            );
            received += 1;
            ep.release(d).unwrap();
        }
        assert!(received <= count, "node {me}: extra deliveries");
        if completed == count && received == count && !marked {
            marked = true;
            finished.fetch_add(1, Ordering::SeqCst);
        }
        if marked && finished.load(Ordering::SeqCst) == 2 {
            // Linger a little so the peer's last acknowledgements go out.
            let t = Instant::now();
            while t.elapsed() < Duration::from_millis(50) {
                ep.progress().expect("progress");
            }
            break;
        }
    }
    if mode == ProgressMode::Blocking {
        let e = ep.engine_stats();
        assert!(
            e.woken_by_frames > 0,
            "node {me}: never woken by a frame: {e:?}"
        );
    }
    let stats = *ep.port().stats();
    (stats, format!("{stats:?} {:?}", ep.engine_stats()))
}

/// Which method a node runs.
#[derive(Clone, Copy)]
enum Kind {
    AfXdp,
    Packet,
}

fn open(kind: Kind, ifname: String) -> Box<dyn bcl::Method> {
    match kind {
        Kind::AfXdp => Box::new(AfXdpMethod::open(AfXdpConfig::new(ifname)).expect("open afxdp")),
        Kind::Packet => Box::new(
            bcl::packet::PacketMethod::open(bcl::packet::PacketConfig {
                ifname: Some(ifname),
                ..Default::default()
            })
            .expect("open packet"),
        ),
    }
}

fn exchange(
    file: &str,
    test: &str,
    modes: [ProgressMode; 2],
    count: u32,
    timeout: Duration,
) -> Option<(LabGuard, [PortStats; 2])> {
    exchange_with(
        file,
        test,
        modes,
        [Kind::AfXdp, Kind::AfXdp],
        count,
        timeout,
    )
}

fn exchange_with(
    file: &str,
    test: &str,
    modes: [ProgressMode; 2],
    kinds: [Kind; 2],
    count: u32,
    timeout: Duration,
) -> Option<(LabGuard, [PortStats; 2])> {
    let lab = lab(file, test)?;
    let if_a = ifname(&lab, "a");
    let if_b = ifname(&lab, "b");
    let (a_tx, a_rx) = mpsc::channel();
    let (b_tx, b_rx) = mpsc::channel();
    let finished = Arc::new(AtomicUsize::new(0));
    let f2 = finished.clone();
    let a = lab.spawn_in("a", move || {
        run_side(
            modes[0],
            1,
            2,
            open(kinds[0], if_a),
            count,
            a_tx,
            b_rx,
            finished,
            timeout,
        )
    });
    let b = lab.spawn_in("b", move || {
        run_side(
            modes[1],
            2,
            1,
            open(kinds[1], if_b),
            count,
            b_tx,
            a_rx,
            f2,
            timeout,
        )
    });
    let (pa, sa) = a.join().expect("node a");
    let (pb, sb) = b.join().expect("node b");
    println!("a: {sa}\nb: {sb}");
    Some((lab, [pa, pb]))
}

#[test]
fn endpoints_exchange_verified_messages_over_afxdp() {
    exchange(
        "pair.toml",
        "endpoints_exchange_verified_messages_over_afxdp",
        [ProgressMode::BusyPoll, ProgressMode::BusyPoll],
        400,
        Duration::from_secs(30),
    );
}

#[test]
fn exactly_once_in_order_through_an_impaired_link() {
    let Some((lab, ports)) = exchange(
        "lossy-pair.toml",
        "exactly_once_in_order_through_an_impaired_link",
        [ProgressMode::BusyPoll, ProgressMode::BusyPoll],
        300,
        Duration::from_secs(60),
    ) else {
        return;
    };
    // The faults really happened on the way (the bridge writes its counters
    // every 100 ms while frames flow).
    std::thread::sleep(Duration::from_millis(300));
    let counters = lab.impairment_counters().expect("impairment counters");
    let text = format!("{counters:?}");
    println!("{text}");
    let sum = |f: fn(&bcl_lab::ImpairCounters) -> u64| counters.iter().map(f).sum::<u64>();
    assert!(sum(|c| c.dropped) > 0, "no loss injected: {text}");
    assert!(sum(|c| c.duplicated) > 0, "no duplication injected: {text}");
    assert!(sum(|c| c.reordered) > 0, "no reordering injected: {text}");
    assert!(sum(|c| c.corrupted) > 0, "no corruption injected: {text}");
    // Nothing below BCL checks a frame that crossed veth and the bridge
    // (no Ethernet FCS, no IP checksum on raw frames): the CRC32C caught
    // the corrupted ones, on whichever side received them.
    let caught: u64 = ports.iter().map(|p| p.bad_frames.bad_checksum).sum();
    assert!(
        caught > 0,
        "{} frames corrupted, none caught by the CRC32C: {ports:?}",
        sum(|c| c.corrupted)
    );
}

#[test]
fn a_blocking_endpoint_sleeps_on_the_readiness_descriptor() {
    // b sleeps in epoll on the AF_XDP socket between rounds; a busy-polls.
    exchange(
        "pair-2q.toml",
        "a_blocking_endpoint_sleeps_on_the_readiness_descriptor",
        [ProgressMode::BusyPoll, ProgressMode::Blocking],
        200,
        Duration::from_secs(30),
    );
}

#[test]
fn an_afxdp_endpoint_and_a_packet_endpoint_interoperate() {
    // Same Ethernet framing: BCL over AF_XDP on one node, BCL over
    // AF_PACKET (the `packet` method, through the `bcl` crate) on the other.
    exchange_with(
        "pair.toml",
        "an_afxdp_endpoint_and_a_packet_endpoint_interoperate",
        [ProgressMode::BusyPoll, ProgressMode::BusyPoll],
        [Kind::AfXdp, Kind::Packet],
        200,
        Duration::from_secs(30),
    );
}

#[test]
fn endpoints_exchange_verified_messages_in_multi_buffer_frames() {
    // MTU 65535: the 4000- and 16384-byte messages travel as one BCL frame
    // spanning several UMEM chunks.
    exchange(
        "pair-jumbo.toml",
        "endpoints_exchange_verified_messages_in_multi_buffer_frames",
        [ProgressMode::BusyPoll, ProgressMode::Blocking],
        400,
        Duration::from_secs(30),
    );
}
