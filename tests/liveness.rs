//! Liveness between real processes over udp on the loopback: the parent
//! posts a buffer for a child and so depends on it; the child is then
//! stopped for less than the bound (SIGSTOP, SIGCONT), stopped for longer,
//! or killed (SIGKILL). A child that resumes in time is never declared
//! dead; one that does not is, within the bound, and the posted receive
//! fails naming it.

mod common;

use bcl::udp::{UdpConfig, UdpMethod};
use bcl::{ChannelEvent, Descriptor, Endpoint, JobKey, ProcessAddr, ProgressMode, TransferError};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const JOB: JobKey = JobKey(0x11fe);
const PERIOD: Duration = Duration::from_millis(100);
const MISSES: u32 = 3;

fn parent_addr() -> ProcessAddr {
    ProcessAddr::new(1, 0)
}

fn child_addr() -> ProcessAddr {
    ProcessAddr::new(2, 0)
}

fn endpoint(addr: ProcessAddr, period: Duration) -> Endpoint {
    Endpoint::builder(addr, JOB)
        .method(Box::new(
            UdpMethod::open(UdpConfig::new("127.0.0.1:0".parse().unwrap())).unwrap(),
        ))
        .mode(ProgressMode::Blocking)
        .configure(|c| {
            c.liveness.enabled = true;
            c.liveness.period = period;
            c.liveness.misses = MISSES;
        })
        .build()
        .unwrap()
}

/// The child process, killed when dropped.
struct ChildPeer(Child);

impl ChildPeer {
    fn signal(&self, sig: &str) {
        let ok = Command::new("kill")
            .args([sig, &self.0.id().to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill {sig} failed");
    }
}

impl Drop for ChildPeer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A parent endpoint that depends on a child process: it posted a buffer
/// for it, which the child never fills.
fn parent_waiting_for_a_child(period: Duration) -> (Endpoint, ChildPeer) {
    let mut ep = endpoint(parent_addr(), period);
    let mut child = common::child_process()
        .env("BCL_LIVENESS_CHILD", ep.descriptors()[0].to_string())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    // The test harness may print its own lines first.
    let descriptor: Descriptor = BufReader::new(child.stdout.take().unwrap())
        .lines()
        .map_while(Result::ok)
        .find_map(|l| l.strip_prefix("descriptor ").map(str::to_string))
        .expect("the child never printed its descriptor")
        .parse()
        .unwrap();
    ep.add_peer(child_addr(), descriptor);
    let ch = ep.open_normal_channel().unwrap();
    ep.post(ch, Some(child_addr()), vec![0; 4096]).unwrap();
    (ep, ChildPeer(child))
}

/// What driving the parent saw.
#[derive(Debug, Default)]
struct Seen {
    gone: Option<(ProcessAddr, Instant)>,
    receive_failed: Option<TransferError>,
}

/// Makes progress on `ep` for `d`, or until a peer is declared gone and
/// the posted receive failed.
fn drive(ep: &mut Endpoint, d: Duration, seen: &mut Seen) {
    let end = Instant::now() + d;
    while Instant::now() < end {
        let until = ep.now() + Duration::from_millis(5);
        ep.progress_or_wait(Some(until)).unwrap();
        if let Some(bcl::PeerEvent::Down(a)) = ep.poll_peer_event() {
            seen.gone.get_or_insert((a, Instant::now()));
        }
        while let Some(e) = ep.poll_channel_event() {
            if let ChannelEvent::ReceiveFailed { error, .. } = e {
                seen.receive_failed = Some(error);
            }
        }
        if seen.gone.is_some() && seen.receive_failed.is_some() {
            return;
        }
    }
}

#[test]
fn a_stopped_peer_that_resumes_within_the_bound_is_not_declared_dead() {
    // Stopped for 100 ms, three times, where checks 200 ms apart tolerate
    // (misses − 1) periods, 400 ms: a loaded machine may take its time to
    // run the child again.
    let period = PERIOD * 2;
    let (mut ep, child) = parent_waiting_for_a_child(period);
    let mut seen = Seen::default();
    drive(&mut ep, period * 3, &mut seen);
    for _ in 0..3 {
        child.signal("-STOP");
        drive(&mut ep, Duration::from_millis(100), &mut seen);
        child.signal("-CONT");
        drive(&mut ep, period * 3, &mut seen);
    }
    assert!(seen.gone.is_none(), "{seen:?}");
    let s = ep.port().stats();
    assert!(s.pings_sent > 0, "{s:?}");
    assert_eq!(s.peers_declared_dead, 0);
}

#[test]
fn a_peer_stopped_past_the_bound_is_declared_dead() {
    declared_dead_after("-STOP");
}

#[test]
fn a_killed_peer_is_declared_dead() {
    declared_dead_after("-KILL");
}

/// Signals the child with `sig` while the parent waits on it: the child is
/// declared dead `misses` periods after its last frame, an answer to a
/// ping at most a period (and a late check) before the signal — so not
/// sooner than about `misses − 1` periods after it — and the posted
/// receive fails naming it.
fn declared_dead_after(sig: &str) {
    let (mut ep, child) = parent_waiting_for_a_child(PERIOD);
    let mut seen = Seen::default();
    drive(&mut ep, PERIOD * 3, &mut seen);
    assert!(seen.gone.is_none(), "{seen:?}");
    child.signal(sig);
    let since = Instant::now();
    drive(&mut ep, Duration::from_secs(10), &mut seen);
    let (who, when) = seen.gone.expect("the child was never declared dead");
    assert_eq!(who, child_addr());
    let took = when - since;
    println!("declared dead {took:?} after it stopped (bound {MISSES} × {PERIOD:?} after its last frame)");
    assert!(
        took >= PERIOD * (MISSES - 1) - PERIOD / 2,
        "declared dead after only {took:?}"
    );
    assert_eq!(
        seen.receive_failed,
        Some(TransferError::PeerUnreachable(child_addr()))
    );
    assert_eq!(ep.port().stats().peers_declared_dead, 1);
}

/// The child process of these tests (does nothing in a normal test run):
/// an endpoint that answers its parent until it is stopped or killed.
#[test]
fn child_entry() {
    let Ok(parent) = std::env::var("BCL_LIVENESS_CHILD") else {
        return;
    };
    let mut ep = endpoint(child_addr(), PERIOD);
    ep.add_peer(parent_addr(), parent.parse().unwrap());
    println!("descriptor {}", ep.descriptors()[0]);
    loop {
        let until = ep.now() + Duration::from_secs(1);
        ep.progress_or_wait(Some(until)).unwrap();
    }
}

/// A soak for `bench/liveness.sh` (does nothing in a normal test run):
/// with `BCL_LIVENESS_SOAK=SECONDS`, a parent waits on a live child that
/// answers all along, for that long, and prints how often the child was
/// declared dead (never, unless liveness mistakes load for death) and how
/// many pings it took.
#[test]
fn soak_entry() {
    let Ok(seconds) = std::env::var("BCL_LIVENESS_SOAK") else {
        return;
    };
    let seconds: u64 = seconds.parse().expect("BCL_LIVENESS_SOAK=SECONDS");
    let end = Instant::now() + Duration::from_secs(seconds);
    let mut false_deaths = 0;
    let mut pings = 0;
    while Instant::now() < end {
        let (mut ep, _child) = parent_waiting_for_a_child(PERIOD);
        let mut seen = Seen::default();
        let left = end.saturating_duration_since(Instant::now());
        drive(&mut ep, left.min(Duration::from_secs(60)), &mut seen);
        pings += ep.port().stats().pings_sent;
        if seen.gone.is_some() {
            false_deaths += 1;
        }
    }
    println!("soak {seconds} s: {false_deaths} false deaths, {pings} pings");
}
