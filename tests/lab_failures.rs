//! Failures between two lab nodes (network namespaces joined by a veth
//! pair), with a verified stream each way over udp and liveness on (period
//! 200 ms, 5 misses: a peer is declared gone 1.0 s after its last
//! frame):
//!
//! - the link goes down for 300 ms, less than that bound: nobody is declared gone,
//!   nothing fails, everything arrives exactly once and in order;
//! - the link goes down for longer (a partition) and comes back: each side
//!   reports the other `Down`, then `Up` at its first frame after the heal;
//!   what was reported sent arrived, nothing twice or out of order, and new
//!   traffic flows;
//! - node b's process is stopped (SIGSTOP) for 500 ms, less than the
//!   (misses − 1) periods liveness tolerates: nobody is declared gone,
//!   nothing fails or is lost, and both directions go on after it resumes;
//! - it is stopped for 2 s, past the bound: node a reports it `Down` while
//!   it is stopped, then `Up` once it resumes, and both directions carry
//!   new traffic, in order;
//! - node b "reboots": its process is killed, its namespace deleted and made
//!   again, and a new process starts there at the same BCL address: node a
//!   reports it `Restarted` and both directions carry new traffic.

mod common;

use bcl::udp::{UdpConfig, UdpMethod};
use bcl::{Endpoint, PeerEvent, ProcessAddr, ProgressMode, SendEvent, SendFailure, SendHandle};
use bcl_lab::LabGuard;
use std::collections::HashMap;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const PERIOD: Duration = Duration::from_millis(200);
const MISSES: u32 = 5;
const A: ProcessAddr = ProcessAddr::new(1, 0);
const B: ProcessAddr = ProcessAddr::new(2, 0);
const A_AT: &str = "10.77.1.1:7001";
const B_AT: &str = "10.77.1.2:7002";
const MSG_LEN: usize = 200;

fn endpoint(me: ProcessAddr, at: &str, peer: ProcessAddr, peer_at: &str) -> Endpoint {
    let mut ep = Endpoint::builder(me, common::JOB)
        .method(Box::new(
            UdpMethod::open(UdpConfig::new(at.parse().unwrap())).unwrap(),
        ))
        .mode(ProgressMode::Blocking)
        .configure(|c| {
            c.liveness.enabled = true;
            c.liveness.period = PERIOD;
            c.liveness.misses = MISSES;
        })
        .build()
        .unwrap();
    ep.add_peer(peer, format!("udp:{peer_at}").parse().unwrap());
    ep
}

/// What one side saw.
#[derive(Debug, Default)]
struct Seen {
    sent: u32,
    completed: Vec<u32>,
    failed: Vec<(u32, SendFailure)>,
    received: Vec<u32>,
    /// When each of `received` arrived.
    received_at: Vec<Instant>,
    events: Vec<(PeerEvent, Instant)>,
}

/// Streams numbered messages to `peer` and checks what arrives, until
/// `stop`; then stops sending and lets what is in flight finish (or fail),
/// and keeps answering until both sides (`drained`) are done.
fn stream(
    ep: &mut Endpoint,
    peer: ProcessAddr,
    stop: &AtomicBool,
    drained: &AtomicUsize,
    sides: usize,
) -> Seen {
    let mut seen = Seen::default();
    let mut handles: HashMap<SendHandle, u32> = HashMap::new();
    let mut drain_until = None;
    let mut done = false;
    loop {
        let until = ep.now() + Duration::from_millis(1);
        ep.progress_or_wait(Some(until)).unwrap();
        if drain_until.is_none() && stop.load(Ordering::Relaxed) {
            drain_until = Some(Instant::now() + Duration::from_secs(5));
        }
        if drain_until.is_none() && ep.port().outstanding_sends() < 64 {
            let mut m = vec![0u8; MSG_LEN];
            m[..4].copy_from_slice(&seen.sent.to_le_bytes());
            if let Ok(h) = ep.send(peer, &m) {
                handles.insert(h, seen.sent);
                seen.sent += 1;
            }
        }
        while let Some(d) = ep.poll_delivery() {
            let m = ep.message(&d).unwrap();
            assert_eq!(m.len(), MSG_LEN);
            seen.received
                .push(u32::from_le_bytes(m[..4].try_into().unwrap()));
            seen.received_at.push(Instant::now());
            ep.release(d).unwrap();
        }
        while let Some(ev) = ep.poll_send_event() {
            match ev {
                SendEvent::Complete(h) => seen.completed.push(handles.remove(&h).unwrap()),
                SendEvent::Failed(h, f) => seen.failed.push((handles.remove(&h).unwrap(), f)),
            }
        }
        while let Some(ev) = ep.poll_peer_event() {
            seen.events.push((ev, Instant::now()));
        }
        if let Some(t) = drain_until {
            if !done && (handles.is_empty() || Instant::now() > t) {
                done = true;
                drained.fetch_add(1, Ordering::Relaxed);
            }
            if done && drained.load(Ordering::Relaxed) == sides {
                return seen;
            }
        }
    }
}

/// Everything `from` completed arrived at `to`; `to` got nothing twice and
/// nothing out of order.
fn check_stream(from: &Seen, to: &Seen, what: &str) {
    assert!(
        to.received.windows(2).all(|w| w[0] < w[1]),
        "{what}: received out of order or twice"
    );
    let got: std::collections::HashSet<u32> = to.received.iter().copied().collect();
    let lost: Vec<u32> = from
        .completed
        .iter()
        .copied()
        .filter(|i| !got.contains(i))
        .collect();
    assert!(
        lost.is_empty(),
        "{what}: completed but never delivered: {lost:?}"
    );
}

/// Runs both sides in their namespaces; `disrupt` runs in between, after a
/// second of traffic. Returns both sides' views.
fn with_streams(lab: &LabGuard, disrupt: impl FnOnce()) -> (Seen, Seen) {
    let stop = Arc::new(AtomicBool::new(false));
    let drained = Arc::new(AtomicUsize::new(0));
    let side = |me, at: &'static str, peer, peer_at: &'static str, node: &str| {
        let (stop, drained) = (stop.clone(), drained.clone());
        lab.spawn_in(node, move || {
            let mut ep = endpoint(me, at, peer, peer_at);
            stream(&mut ep, peer, &stop, &drained, 2)
        })
    };
    let a = side(A, A_AT, B, B_AT, "a");
    let b = side(B, B_AT, A, A_AT, "b");
    std::thread::sleep(Duration::from_secs(1));
    disrupt();
    // Time to recover and carry new traffic.
    std::thread::sleep(Duration::from_secs(2));
    stop.store(true, Ordering::Relaxed);
    (a.join().unwrap(), b.join().unwrap())
}

fn link(lab: &LabGuard, up: bool) {
    let ns = lab.netns("a").unwrap();
    let ifname = lab.interfaces("a").unwrap()[0].ifname.clone();
    let state = if up { "up" } else { "down" };
    let ok = Command::new("ip")
        .args(["-n", &ns, "link", "set", &ifname, state])
        .status()
        .unwrap()
        .success();
    assert!(ok, "ip link set {ifname} {state} in {ns}");
}

#[test]
fn a_link_down_for_less_than_the_bound_loses_and_fails_nothing() {
    if !bcl_lab::require_privileges("a_link_down_for_less_than_the_bound") {
        return;
    }
    let lab = common::lab("pair.toml", "flap");
    let (a, b) = with_streams(&lab, || {
        link(&lab, false);
        std::thread::sleep(Duration::from_millis(300));
        link(&lab, true);
    });
    for (x, what) in [(&a, "a"), (&b, "b")] {
        assert!(x.events.is_empty(), "{what}: {:?}", x.events);
        assert!(
            x.failed.is_empty(),
            "{what}: {:?}",
            &x.failed[..x.failed.len().min(3)]
        );
        assert!(x.sent > 100, "{what} sent only {}", x.sent);
        assert_eq!(
            x.completed.len() as u32,
            x.sent,
            "{what}: not everything completed"
        );
    }
    check_stream(&a, &b, "a to b");
    check_stream(&b, &a, "b to a");
    assert_eq!(b.received.len() as u32, a.sent);
    assert_eq!(a.received.len() as u32, b.sent);
}

#[test]
fn a_partition_longer_than_the_bound_is_reported_down_then_up() {
    if !bcl_lab::require_privileges("a_partition_longer_than_the_bound") {
        return;
    }
    let lab = common::lab("pair.toml", "part");
    let mut cut = None;
    let mut healed = None;
    let (a, b) = with_streams(&lab, || {
        link(&lab, false);
        cut = Some(Instant::now());
        std::thread::sleep(Duration::from_secs(3));
        // Taken before the link comes up: a frame may arrive (and the
        // peer be reported up) before `ip link set up` has returned.
        healed = Some(Instant::now());
        link(&lab, true);
    });
    let (cut, healed) = (cut.unwrap(), healed.unwrap());
    for (x, peer, what) in [(&a, B, "a"), (&b, A, "b")] {
        let kinds: Vec<PeerEvent> = x.events.iter().map(|e| e.0).collect();
        assert_eq!(
            kinds,
            vec![PeerEvent::Down(peer), PeerEvent::Up(peer)],
            "{what}"
        );
        let (down_at, up_at) = (x.events[0].1, x.events[1].1);
        println!(
            "{what}: declared the other down {:?} after the cut, back {:?} after the heal",
            down_at - cut,
            up_at.saturating_duration_since(healed)
        );
        assert!(down_at > cut && up_at > healed);
        assert!(
            x.failed
                .iter()
                .all(|(_, f)| *f == SendFailure::PeerUnreachable(peer)),
            "{what}: {:?}",
            &x.failed[..x.failed.len().min(3)]
        );
        assert!(
            !x.failed.is_empty(),
            "{what}: nothing failed across the partition"
        );
    }
    check_stream(&a, &b, "a to b");
    check_stream(&b, &a, "b to a");
    // New traffic after the heal: messages sent after the last failure
    // arrived.
    for (from, to, what) in [(&a, &b, "a to b"), (&b, &a, "b to a")] {
        let last_failed = from.failed.iter().map(|f| f.0).max().unwrap();
        let after = to.received.iter().filter(|&&i| i > last_failed).count();
        assert!(after > 100, "{what}: only {after} messages after the heal");
    }
}

fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().unwrap();
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The process on node b, numbering its messages from `base`; its output
/// lines arrive on the returned channel. Killed when dropped.
struct NodeB {
    child: std::process::Child,
    lines: std::sync::mpsc::Receiver<String>,
}

impl NodeB {
    fn start(lab: &LabGuard, base: u32) -> NodeB {
        let exe = std::env::current_exe().unwrap();
        let mut child = lab
            .command("b", exe.to_str().unwrap())
            .unwrap()
            .args([
                "child_entry",
                "--exact",
                "--nocapture",
                "--test-threads=1",
                "-q",
            ])
            .env("BCL_LAB_FAILURES_CHILD", base.to_string())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let out = child.stdout.take().unwrap();
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            use std::io::BufRead;
            for l in std::io::BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(l).is_err() {
                    return;
                }
            }
        });
        NodeB { child, lines }
    }

    /// Its output so far.
    fn output(&self) -> Vec<String> {
        self.lines.try_iter().collect()
    }
}

impl Drop for NodeB {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Node b goes away whole and comes back: its namespace (with its end of
/// the link, which takes node a's end along) is deleted and made again
/// with the same interfaces and addresses.
fn reboot_b(lab: &LabGuard) {
    let (ns_a, ns_b) = (lab.netns("a").unwrap(), lab.netns("b").unwrap());
    let ia = lab.interfaces("a").unwrap().remove(0);
    let ib = lab.interfaces("b").unwrap().remove(0);
    ip(&["netns", "del", &ns_b]);
    // The kernel tears the namespace down a moment later: node a's end of
    // the link goes with it.
    let gone_by = Instant::now() + Duration::from_secs(10);
    while Command::new("ip")
        .args(["-n", &ns_a, "link", "show", &ia.ifname])
        .output()
        .unwrap()
        .status
        .success()
    {
        assert!(Instant::now() < gone_by, "{} still exists", ia.ifname);
        std::thread::sleep(Duration::from_millis(10));
    }
    ip(&["netns", "add", &ns_b]);
    ip(&["-n", &ns_b, "link", "set", "lo", "up"]);
    ip(&[
        "link", "add", &ia.ifname, "netns", &ns_a, "address", &ia.mac, "type", "veth", "peer",
        "name", &ib.ifname, "netns", &ns_b, "address", &ib.mac,
    ]);
    for (ns, i) in [(&ns_a, &ia), (&ns_b, &ib)] {
        let cidr = i.ipv4.as_ref().unwrap().to_string();
        ip(&["-n", ns, "addr", "add", &cidr, "dev", &i.ifname]);
        ip(&["-n", ns, "link", "set", &i.ifname, "up"]);
    }
}

#[test]
fn a_node_that_reboots_rejoins_with_a_new_process() {
    if !bcl_lab::require_privileges("a_node_that_reboots_rejoins") {
        return;
    }
    let lab = common::lab("pair.toml", "boot");
    const NEW_BASE: u32 = 1_000_000;
    let stop = Arc::new(AtomicBool::new(false));
    let drained = Arc::new(AtomicUsize::new(0));
    let a = {
        let (stop, drained) = (stop.clone(), drained.clone());
        lab.spawn_in("a", move || {
            let mut ep = endpoint(A, A_AT, B, B_AT);
            stream(&mut ep, B, &stop, &drained, 1)
        })
    };
    let first = NodeB::start(&lab, 0);
    std::thread::sleep(Duration::from_secs(1));
    drop(first);
    let down = Instant::now();
    reboot_b(&lab);
    let second = NodeB::start(&lab, NEW_BASE);
    println!(
        "node b rebooted and its process started again in {:?}",
        down.elapsed()
    );
    std::thread::sleep(Duration::from_secs(2));
    stop.store(true, Ordering::Relaxed);
    let a = a.join().unwrap();
    let out = second.output();
    drop(second);

    let kinds: Vec<PeerEvent> = a.events.iter().map(|e| e.0).collect();
    assert_eq!(
        kinds
            .iter()
            .filter(|&&k| k == PeerEvent::Restarted(B))
            .count(),
        1,
        "{kinds:?}"
    );
    assert_eq!(kinds.last(), Some(&PeerEvent::Restarted(B)), "{kinds:?}");
    let back = a.events.last().unwrap().1;
    println!(
        "node a heard the new process {:?} after b went down",
        back - down
    );
    assert!(
        a.received.windows(2).all(|w| w[0] < w[1]),
        "a received out of order or twice"
    );
    let old = a.received.iter().filter(|&&i| i < NEW_BASE).count();
    let new = a.received.iter().filter(|&&i| i >= NEW_BASE).count();
    assert!(
        old > 100 && new > 100,
        "from the old process {old}, the new {new}"
    );
    assert!(
        a.failed.iter().all(|(_, f)| f.peer() == B),
        "{:?}",
        &a.failed[..a.failed.len().min(3)]
    );
    assert!(!out.iter().any(|l| l.starts_with("BAD")), "{out:?}");
    assert!(
        out.iter().any(|l| l.starts_with("from-a ")),
        "the new process got nothing from a: {out:?}"
    );
}

/// What a run of [`stop_b_for`] saw.
struct Stopped {
    /// Node a's view.
    a: Seen,
    /// Node b's output after it was resumed.
    b_after: Vec<String>,
    stopped: Instant,
    resumed: Instant,
}

/// Node b's process is stopped (SIGSTOP) while both stream, then resumed
/// (SIGCONT).
fn stop_b_for(lab: &LabGuard, stopped: Duration) -> Stopped {
    let stop = Arc::new(AtomicBool::new(false));
    let drained = Arc::new(AtomicUsize::new(0));
    let a = {
        let (stop, drained) = (stop.clone(), drained.clone());
        lab.spawn_in("a", move || {
            let mut ep = endpoint(A, A_AT, B, B_AT);
            stream(&mut ep, B, &stop, &drained, 1)
        })
    };
    let b = NodeB::start(lab, 0);
    std::thread::sleep(Duration::from_secs(1));
    let signal = |sig| nix::sys::signal::kill(nix::unistd::Pid::from_raw(b.child.id() as i32), sig);
    signal(nix::sys::signal::Signal::SIGSTOP).unwrap();
    let stopped_at = Instant::now();
    std::thread::sleep(stopped);
    let _before = b.output();
    signal(nix::sys::signal::Signal::SIGCONT).unwrap();
    let resumed_at = Instant::now();
    // Time to recover and carry new traffic.
    std::thread::sleep(Duration::from_secs(2));
    stop.store(true, Ordering::Relaxed);
    let a = a.join().unwrap();
    Stopped {
        a,
        b_after: b.output(),
        stopped: stopped_at,
        resumed: resumed_at,
    }
}

impl Stopped {
    /// Messages a got from b after `t`.
    fn a_received_after(&self, t: Instant) -> usize {
        self.a.received_at.iter().filter(|&&at| at > t).count()
    }
}

/// Each side received the other's messages in order, nothing twice, and
/// new ones after b resumed (b prints `from-a N` every 100 from a).
fn check_both_ways(r: &Stopped) {
    assert!(
        r.a.received.windows(2).all(|w| w[0] < w[1]),
        "a received out of order or twice"
    );
    assert!(
        !r.b_after.iter().any(|l| l.starts_with("BAD")),
        "{:?}",
        r.b_after
    );
    let after = r.a_received_after(r.resumed);
    assert!(
        after > 100,
        "a got only {after} messages from b after it resumed"
    );
    assert!(
        r.b_after.iter().any(|l| l.starts_with("from-a ")),
        "b got nothing from a after it resumed: {:?}",
        r.b_after
    );
}

#[test]
fn a_process_stopped_for_less_than_the_bound_loses_and_fails_nothing() {
    if !bcl_lab::require_privileges("a_process_stopped_for_less_than_the_bound") {
        return;
    }
    let lab = common::lab("pair.toml", "stop");
    // Under the (misses − 1) periods that liveness tolerates (800 ms).
    let r = stop_b_for(&lab, Duration::from_millis(500));
    let a = &r.a;
    assert!(a.events.is_empty(), "{:?}", a.events);
    assert!(
        a.failed.is_empty(),
        "{:?}",
        &a.failed[..a.failed.len().min(3)]
    );
    assert!(a.sent > 100, "a sent only {}", a.sent);
    assert_eq!(a.completed.len() as u32, a.sent, "not everything completed");
    check_both_ways(&r);
    // Nothing b sent was lost: its numbers arrived without a gap.
    let expected: Vec<u32> = (0..a.received.len() as u32).collect();
    assert_eq!(a.received, expected, "a's messages from b have a gap");
    println!(
        "b stopped 500 ms: a sent {} (all completed), received {} ({} after b resumed)",
        a.sent,
        a.received.len(),
        r.a_received_after(r.resumed)
    );
}

#[test]
fn a_process_stopped_past_the_bound_is_declared_down_then_up() {
    if !bcl_lab::require_privileges("a_process_stopped_past_the_bound") {
        return;
    }
    let lab = common::lab("pair.toml", "stpl");
    let r = stop_b_for(&lab, Duration::from_secs(2));
    let (a, stopped, resumed) = (&r.a, r.stopped, r.resumed);
    let kinds: Vec<PeerEvent> = a.events.iter().map(|e| e.0).collect();
    assert_eq!(kinds, vec![PeerEvent::Down(B), PeerEvent::Up(B)]);
    let (down_at, up_at) = (a.events[0].1, a.events[1].1);
    println!(
        "b stopped 2 s: declared down {:?} after the stop (bound {:?} after its last frame), up {:?} after it resumed",
        down_at - stopped,
        PERIOD * MISSES,
        up_at.saturating_duration_since(resumed)
    );
    // Declared down while it was stopped: silent since the stop at most.
    assert!(down_at > stopped && down_at < resumed);
    assert!(up_at > resumed);
    assert!(
        a.failed
            .iter()
            .all(|(_, f)| *f == SendFailure::PeerUnreachable(B)),
        "{:?}",
        &a.failed[..a.failed.len().min(3)]
    );
    assert!(!a.failed.is_empty(), "nothing failed while b was stopped");
    check_both_ways(&r);
}

/// The process of node b (does nothing in a normal test run): streams to
/// node a, numbered from its base, and checks a's messages arrive in order
/// (printing `from-a N` every 100) until it is killed.
#[test]
fn child_entry() {
    let Ok(base) = std::env::var("BCL_LAB_FAILURES_CHILD") else {
        return;
    };
    let mut next: u32 = base.parse().unwrap();
    let mut ep = endpoint(B, B_AT, A, A_AT);
    let (mut last, mut count) = (None, 0u32);
    loop {
        let until = ep.now() + Duration::from_millis(1);
        ep.progress_or_wait(Some(until)).unwrap();
        if ep.port().outstanding_sends() < 64 {
            let mut m = vec![0u8; MSG_LEN];
            m[..4].copy_from_slice(&next.to_le_bytes());
            if ep.send(A, &m).is_ok() {
                next += 1;
            }
        }
        while ep.poll_send_event().is_some() {}
        while let Some(d) = ep.poll_delivery() {
            let i = u32::from_le_bytes(ep.message(&d).unwrap()[..4].try_into().unwrap());
            ep.release(d).unwrap();
            if last.is_some_and(|l| i <= l) {
                println!("BAD from a: {i} after {last:?}");
                std::process::exit(1);
            }
            last = Some(i);
            count += 1;
            if count % 100 == 0 {
                println!("from-a {count}");
            }
        }
    }
}
