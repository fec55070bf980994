//! Re-join between real processes over udp on the loopback: two survivors
//! in this process keep a verified stream going both ways while a third
//! process at a fixed address is killed (SIGKILL) and restarted three
//! times, each start a new incarnation that talks to both survivors at once.
//!
//! Checked: the survivors' streams are delivered exactly once and in order
//! throughout; every incarnation's messages reach both survivors, in order
//! and from its first one; each restart is reported once
//! (`PeerEvent::Restarted`), with the survivors' sends that were in flight
//! failing as `PeerRestarted`; no message of a dead incarnation is
//! delivered after its successor was heard. The restarted process checks
//! what it receives is in order too. The time from each start to its first
//! message at both survivors is printed (bench/rejoin.sh collects it).

mod common;

use bcl::udp::{UdpConfig, UdpMethod};
use bcl::{Endpoint, JobKey, PeerEvent, ProcessAddr, ProgressMode, SendEvent, SendFailure};
use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, UdpSocket};
use std::process::{Child, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const JOB: JobKey = JobKey(0x2e70);
const RESTARTS: u32 = 3;
/// How long each incarnation runs before it is killed.
const LIFE: Duration = Duration::from_millis(400);
const MSG_LEN: usize = 64;

fn survivor_s() -> ProcessAddr {
    ProcessAddr::new(1, 0)
}
fn survivor_t() -> ProcessAddr {
    ProcessAddr::new(3, 0)
}
fn restarted_r() -> ProcessAddr {
    ProcessAddr::new(2, 0)
}

fn endpoint(addr: ProcessAddr, at: SocketAddr) -> Endpoint {
    Endpoint::builder(addr, JOB)
        .method(Box::new(UdpMethod::open(UdpConfig::new(at)).unwrap()))
        .mode(ProgressMode::BusyPoll)
        .build()
        .unwrap()
}

/// A message: who sent it, which incarnation (the restarted process's
/// start number; 0 for survivors), its number in the sender's stream to
/// this receiver, and bytes that follow from those.
fn message(from: u8, incarnation: u8, seq: u32) -> Vec<u8> {
    let mut m = vec![from, incarnation];
    m.extend_from_slice(&seq.to_le_bytes());
    m.extend((m.len()..MSG_LEN).map(|i| (seq as usize * 31 + i * 7 + usize::from(from)) as u8));
    m
}

/// Parses and verifies a message: (from, incarnation, seq).
fn parse(m: &[u8]) -> (u8, u8, u32) {
    assert_eq!(m.len(), MSG_LEN, "message length");
    let seq = u32::from_le_bytes(m[2..6].try_into().unwrap());
    assert_eq!(m, &message(m[0], m[1], seq)[..], "message bytes corrupted");
    (m[0], m[1], seq)
}

/// One endpoint's streams: the next number to send to each peer, and the
/// next expected from each (sender, incarnation).
struct Streams {
    ep: Endpoint,
    id: u8,
    next_to: Vec<(ProcessAddr, u32)>,
    /// Per sender id: (incarnation, next seq expected).
    expect: std::collections::HashMap<u8, (u8, u32)>,
    /// Per incarnation of the restarted process: when its first message
    /// arrived.
    first_from_r: std::collections::HashMap<u8, Instant>,
    delivered: u64,
    restarts_seen: u32,
    restart_failures: u64,
}

impl Streams {
    fn new(ep: Endpoint, id: u8) -> Streams {
        Streams {
            ep,
            id,
            next_to: Vec::new(),
            expect: Default::default(),
            first_from_r: Default::default(),
            delivered: 0,
            restarts_seen: 0,
            restart_failures: 0,
        }
    }

    /// Sends the next message to every peer that has room, takes what
    /// arrived and checks it.
    fn step(&mut self) {
        std::thread::sleep(Duration::from_micros(50));
        self.ep.progress().unwrap();
        for (dst, next) in self.next_to.iter_mut() {
            if self.ep.port().outstanding_sends() < 64
                && self.ep.send(*dst, &message(self.id, 0, *next)).is_ok()
            {
                *next += 1;
            }
        }
        while let Some(d) = self.ep.poll_delivery() {
            let (from, incarnation, seq) = parse(self.ep.message(&d).unwrap());
            self.ep.release(d).unwrap();
            self.delivered += 1;
            let e = self.expect.entry(from).or_insert((incarnation, 0));
            if from == 2 {
                assert!(
                    incarnation >= e.0,
                    "endpoint {}: a message of incarnation {incarnation} after one of {}",
                    self.id,
                    e.0
                );
                if incarnation > e.0 {
                    *e = (incarnation, 0);
                }
                self.first_from_r
                    .entry(incarnation)
                    .or_insert_with(Instant::now);
            }
            assert_eq!(
                seq, e.1,
                "endpoint {}: from {from} (incarnation {incarnation}): got {seq}, expected {}",
                self.id, e.1
            );
            e.1 += 1;
        }
        while let Some(ev) = self.ep.poll_send_event() {
            if let SendEvent::Failed(_, f) = ev {
                assert_eq!(
                    f.peer(),
                    restarted_r(),
                    "endpoint {}: only sends to the restarted process may fail: {f}",
                    self.id
                );
                if f == SendFailure::PeerRestarted(restarted_r()) {
                    self.restart_failures += 1;
                }
            }
        }
        while let Some(ev) = self.ep.poll_peer_event() {
            assert_eq!(ev.peer(), restarted_r(), "endpoint {}: {ev:?}", self.id);
            if let PeerEvent::Restarted(_) = ev {
                self.restarts_seen += 1;
            }
        }
    }
}

/// The restarted process, killed when dropped; its output lines arrive on
/// `lines`.
struct Restartable {
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl Drop for Restartable {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(incarnation: u8, at: SocketAddr, s: &Endpoint, t: &Endpoint) -> Restartable {
    let mut child = common::child_process()
        .env(
            "BCL_REJOIN_CHILD",
            format!(
                "{incarnation};{at};{};{}",
                s.descriptors()[0],
                t.descriptors()[0]
            ),
        )
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let out = child.stdout.take().unwrap();
    let (tx, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for l in BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send(l).is_err() {
                return;
            }
        }
    });
    Restartable { child, lines }
}

#[test]
fn a_process_killed_and_restarted_three_times_rejoins_while_survivors_stream_on() {
    let r_at: SocketAddr = {
        let probe = UdpSocket::bind("127.0.0.1:0").unwrap();
        probe.local_addr().unwrap()
    };
    let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let mut s = Streams::new(endpoint(survivor_s(), any), 1);
    let mut t = Streams::new(endpoint(survivor_t(), any), 3);
    s.ep.add_peer(survivor_t(), t.ep.descriptors()[0].clone());
    t.ep.add_peer(survivor_s(), s.ep.descriptors()[0].clone());
    s.next_to.push((survivor_t(), 0));
    t.next_to.push((survivor_s(), 0));

    let mut rejoin_times = Vec::new();
    for incarnation in 0..=RESTARTS as u8 {
        let started = Instant::now();
        let r = start(incarnation, r_at, &s.ep, &t.ep);
        let mut descriptor = None;
        let heard_by_both = |s: &Streams, t: &Streams| {
            s.first_from_r.contains_key(&incarnation) && t.first_from_r.contains_key(&incarnation)
        };
        // It lives at least LIFE, and until both survivors heard it (a
        // loaded machine may take long to start it).
        while started.elapsed() < LIFE || !heard_by_both(&s, &t) {
            s.step();
            t.step();
            while let Ok(l) = r.lines.try_recv() {
                assert!(!l.starts_with("BAD"), "incarnation {incarnation}: {l}");
                if let Some(d) = l.strip_prefix("descriptor ") {
                    descriptor = Some(d.to_string());
                }
            }
            if let (Some(d), 0) = (&descriptor, incarnation) {
                if s.next_to.len() == 1 {
                    s.ep.add_peer(restarted_r(), d.parse().unwrap());
                    t.ep.add_peer(restarted_r(), d.parse().unwrap());
                    s.next_to.push((restarted_r(), 0));
                    t.next_to.push((restarted_r(), 0));
                }
            }
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "incarnation {incarnation}: descriptor {descriptor:?}, no message at both survivors after a minute"
            );
        }
        let (at_s, at_t) = (s.first_from_r[&incarnation], t.first_from_r[&incarnation]);
        rejoin_times.push(at_s.max(at_t) - started);
        drop(r);
        let before = s.delivered + t.delivered;
        // The survivors' streams go on while nobody is at the address.
        let gap_end = Instant::now() + Duration::from_millis(20);
        while Instant::now() < gap_end {
            s.step();
            t.step();
        }
        assert!(s.delivered + t.delivered > before);
    }
    for (i, took) in rejoin_times.iter().enumerate() {
        println!(
            "rejoin: incarnation {i}: first message at both survivors {took:?} after its start"
        );
    }
    assert_eq!(s.restarts_seen, RESTARTS);
    assert_eq!(t.restarts_seen, RESTARTS);
    for x in [&s, &t] {
        let to_other = x.next_to[0].1;
        println!(
            "endpoint {}: sent {to_other} to the other survivor, {} deliveries, {} sends failed by restarts",
            x.id, x.delivered, x.restart_failures
        );
        assert!(to_other > 100);
    }
    let stale = s.ep.port().stats().bad_frames.stale + t.ep.port().stats().bad_frames.stale;
    println!("stale frames dropped at the survivors: {stale}");
    // Each survivor's stream to the other: everything sent was delivered
    // (exactly once and in order, checked as it arrived).
    let deadline = Instant::now() + Duration::from_secs(10);
    s.next_to.truncate(1);
    t.next_to.truncate(1);
    let (sent_s, sent_t) = (s.next_to[0].1, t.next_to[0].1);
    s.next_to.clear();
    t.next_to.clear();
    while (t.expect.get(&1).map_or(0, |e| e.1) < sent_s
        || s.expect.get(&3).map_or(0, |e| e.1) < sent_t)
        && Instant::now() < deadline
    {
        s.step();
        t.step();
    }
    assert_eq!(t.expect[&1].1, sent_s);
    assert_eq!(s.expect[&3].1, sent_t);
}

/// The restarted process (does nothing in a normal test run): binds the
/// fixed address, prints its descriptor, then streams numbered messages to
/// both survivors and checks theirs arrive in order until it is killed.
#[test]
fn child_entry() {
    let Ok(spec) = std::env::var("BCL_REJOIN_CHILD") else {
        return;
    };
    let parts: Vec<&str> = spec.split(';').collect();
    let incarnation: u8 = parts[0].parse().unwrap();
    let mut ep = endpoint(restarted_r(), parts[1].parse().unwrap());
    ep.add_peer(survivor_s(), parts[2].parse().unwrap());
    ep.add_peer(survivor_t(), parts[3].parse().unwrap());
    println!("descriptor {}", ep.descriptors()[0]);
    let mut next = [0u32; 2];
    let mut last_seen: std::collections::HashMap<u8, u32> = Default::default();
    loop {
        ep.progress().unwrap();
        for (i, dst) in [survivor_s(), survivor_t()].into_iter().enumerate() {
            if ep.port().outstanding_sends() < 64
                && ep.send(dst, &message(2, incarnation, next[i])).is_ok()
            {
                next[i] += 1;
            }
        }
        while let Some(d) = ep.poll_delivery() {
            let (from, _, seq) = parse(ep.message(&d).unwrap());
            ep.release(d).unwrap();
            // Sends that failed by a restart leave gaps; nothing may come
            // twice or out of order.
            if let Some(&last) = last_seen.get(&from) {
                if seq <= last {
                    println!("BAD from {from}: {seq} after {last}");
                    std::process::exit(1);
                }
            }
            last_seen.insert(from, seq);
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}
