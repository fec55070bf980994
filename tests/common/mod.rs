//! Helpers of the whole-stack tests on real kernels: lab clusters with a
//! per-test prefix, endpoints of the packet and udp methods inside lab
//! nodes, and self-checking messages.

#![allow(dead_code)]

use bcl::packet::{PacketConfig, PacketCounters, PacketMethod};
use bcl::udp::{UdpConfig, UdpMethod};
use bcl::{Descriptor, Endpoint, JobKey, Method, ProcessAddr, ProgressMode};
use bcl_lab::{Lab, LabGuard};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The job of every test.
pub const JOB: JobKey = JobKey(0x7e57);
/// The receiving (serving) process.
pub const SERVER: ProcessAddr = ProcessAddr::new(2, 0);
/// The sending (client) process.
pub const CLIENT: ProcessAddr = ProcessAddr::new(1, 0);

/// The methods under test.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wire {
    /// Raw Ethernet.
    Packet,
    /// UDP.
    Udp,
}

/// This test binary again, running only its `child_entry` test: the peer
/// process of a multi-process test (its role comes in environment
/// variables set on the returned command).
pub fn child_process() -> std::process::Command {
    let mut c = std::process::Command::new(std::env::current_exe().unwrap());
    c.args([
        "child_entry",
        "--exact",
        "--nocapture",
        "--test-threads=1",
        "-q",
    ]);
    c
}

/// A shipped topology file.
pub fn config(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("configs/lab")
        .join(file)
}

/// Brings `file` up under a prefix of this test's own.
pub fn lab(file: &str, tag: &str) -> LabGuard {
    let lab = Lab::load(&config(file))
        .unwrap()
        .with_prefix(&format!("t{}-{tag}", std::process::id()))
        .unwrap()
        .with_bridge_binary(&bcl_lab::test_binary());
    LabGuard::new(lab).unwrap_or_else(|e| panic!("up {file}: {e}"))
}

/// An endpoint of `wire` in the calling thread's namespace (the node's only
/// interface), with the packet method's counters when it is one.
pub fn endpoint(
    wire: Wire,
    addr: ProcessAddr,
    mode: ProgressMode,
) -> (Endpoint, Option<Arc<PacketCounters>>) {
    let (method, counters): (Box<dyn Method>, _) = match wire {
        Wire::Packet => {
            let m = PacketMethod::open(PacketConfig::default()).unwrap();
            let c = m.counters();
            (Box::new(m), Some(c))
        }
        Wire::Udp => (
            Box::new(UdpMethod::open(UdpConfig::new("0.0.0.0:0".parse().unwrap())).unwrap()),
            None,
        ),
    };
    let ep = Endpoint::builder(addr, JOB)
        .method(method)
        .mode(mode)
        .build()
        .unwrap();
    (ep, counters)
}

/// The size of message `i` of a mixed-size stream: 1 byte to 9000 bytes
/// (up to seven frames), most of them small.
pub fn mixed_size(i: u64) -> usize {
    const SIZES: [usize; 8] = [1, 9, 64, 300, 1200, 1600, 4000, 9000];
    SIZES[(i.wrapping_mul(2_654_435_761) >> 7) as usize % SIZES.len()]
}

/// Message `i` of `len` bytes: its number (when it fits) and a pattern
/// derived from it, so any damage, loss, duplicate or reordering shows.
pub fn message(i: u64, len: usize) -> Vec<u8> {
    let mut m: Vec<u8> = (0..len)
        .map(|k| (k as u64).wrapping_mul(131).wrapping_add(i.wrapping_mul(7)) as u8)
        .collect();
    let n = len.min(8);
    m[..n].copy_from_slice(&i.to_le_bytes()[..n]);
    m
}

/// The descriptor of `ep`'s only method.
pub fn descriptor(ep: &Endpoint) -> Descriptor {
    ep.descriptors()[0].clone()
}

/// What a two-node run measured.
pub struct Run {
    /// The sender's (client's) port counters.
    pub sender: bcl::PortStats,
    /// The receiver's (server's) port counters.
    pub receiver: bcl::PortStats,
    /// The receiver's packet-method counters, for the packet method.
    pub receiver_packet: Option<bcl::packet::PacketStats>,
    /// Messages the checking side compared byte for byte with what was sent
    /// and found intact (the receiver of a stream, the client of a
    /// pingpong, which checks each echo): counted as they pass, so a run
    /// that checked fewer than it sent shows here.
    pub checked: u64,
}

const WAIT: std::time::Duration = std::time::Duration::from_secs(60);

/// Keeps `ep` making progress until `done` is set (so the last
/// acknowledgements reach the peer).
fn serve_until(ep: &mut Endpoint, done: &std::sync::atomic::AtomicBool) {
    while !done.load(std::sync::atomic::Ordering::Acquire) {
        let soon = ep.now() + std::time::Duration::from_millis(5);
        ep.progress_or_wait(Some(soon)).unwrap();
        while ep.poll_send_event().is_some() {}
    }
}

/// Sends `msg` from `ep` to `to`, making progress while the port is full.
pub fn send(ep: &mut Endpoint, to: ProcessAddr, msg: &[u8]) {
    loop {
        match ep.send(to, msg) {
            Ok(_) => return,
            Err(bcl::Error::Send(bcl::core::SendError::WouldBlock(_))) => {
                while let Some(ev) = ep.poll_send_event() {
                    assert!(matches!(ev, bcl::SendEvent::Complete(_)), "{ev:?}");
                }
                let soon = ep.now() + std::time::Duration::from_millis(5);
                ep.progress_or_wait(Some(soon)).unwrap();
            }
            Err(e) => panic!("send: {e}"),
        }
    }
}

/// Waits until every send of `ep` is acknowledged.
fn drain(ep: &mut Endpoint) {
    let deadline = std::time::Instant::now() + WAIT;
    while ep.port().outstanding_sends() > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "sends not acknowledged in time"
        );
        let soon = ep.now() + std::time::Duration::from_millis(5);
        ep.progress_or_wait(Some(soon)).unwrap();
        while let Some(ev) = ep.poll_send_event() {
            assert!(matches!(ev, bcl::SendEvent::Complete(_)), "{ev:?}");
        }
    }
}

/// Node `a` streams `count` messages (sizes from `size`) to node `b` over
/// `wire`; `b` checks that each arrives exactly once, in order, intact.
/// `during` runs on a third thread inside node `a` while the stream flows
/// (for injecting foreign frames); it is given `b`'s descriptor.
pub fn stream(
    lab: &Lab,
    wire: Wire,
    mode: ProgressMode,
    count: u64,
    size: fn(u64) -> usize,
    during: Option<Box<dyn FnOnce(Descriptor) + Send>>,
) -> Run {
    use std::sync::atomic::{AtomicBool, Ordering};
    let done = Arc::new(AtomicBool::new(false));
    let (tx, rx) = std::sync::mpsc::channel();
    let lab_b = lab.clone();
    let done_b = done.clone();
    let receiver = std::thread::spawn(move || {
        lab_b.enter("b").unwrap();
        let (mut ep, counters) = endpoint(wire, SERVER, mode);
        tx.send(descriptor(&ep)).unwrap();
        let mut checked = 0u64;
        for i in 0..count {
            let d = ep
                .recv_blocking(WAIT)
                .unwrap_or_else(|e| panic!("message {i} of {count} did not arrive: {e}"));
            assert_eq!(d.from, CLIENT);
            let got = ep.message(&d).unwrap();
            let want = message(i, size(i));
            assert!(
                got == want.as_slice(),
                "message {i}: {} bytes, expected {} (first bytes {:?} vs {:?})",
                got.len(),
                want.len(),
                &got[..got.len().min(8)],
                &want[..want.len().min(8)]
            );
            ep.release(d).unwrap();
            checked += 1;
        }
        serve_until(&mut ep, &done_b);
        assert!(ep.poll_delivery().is_none(), "a message arrived twice");
        (*ep.port().stats(), counters.map(|c| c.snapshot()), checked)
    });
    let desc = rx.recv().expect("receiver started");
    let injector = during.map(|f| {
        let lab_i = lab.clone();
        let d = desc.clone();
        std::thread::spawn(move || {
            lab_i.enter("a").unwrap();
            f(d)
        })
    });
    let lab_a = lab.clone();
    let sender = std::thread::spawn(move || {
        lab_a.enter("a").unwrap();
        let (mut ep, _) = endpoint(wire, CLIENT, mode);
        ep.add_peer(SERVER, desc);
        for i in 0..count {
            send(&mut ep, SERVER, &message(i, size(i)));
        }
        drain(&mut ep);
        *ep.port().stats()
    });
    let sender_stats = sender.join();
    done.store(true, Ordering::Release);
    if let Some(i) = injector {
        i.join().expect("injector panicked");
    }
    let (receiver_stats, receiver_packet, checked) = receiver.join().expect("receiver panicked");
    Run {
        sender: sender_stats.expect("sender panicked"),
        receiver: receiver_stats,
        receiver_packet,
        checked,
    }
}

/// Node `a` sends `iters` messages (sizes from `size`) to node `b`, which
/// echoes each; `a` checks every echo before sending the next.
pub fn pingpong(
    lab: &Lab,
    wire: Wire,
    mode: ProgressMode,
    iters: u64,
    size: fn(u64) -> usize,
) -> Run {
    use std::sync::atomic::{AtomicBool, Ordering};
    let done = Arc::new(AtomicBool::new(false));
    let (tx, rx) = std::sync::mpsc::channel();
    let lab_b = lab.clone();
    let done_b = done.clone();
    let server = std::thread::spawn(move || {
        lab_b.enter("b").unwrap();
        let (mut ep, counters) = endpoint(wire, SERVER, mode);
        tx.send(descriptor(&ep)).unwrap();
        for _ in 0..iters {
            let d = ep.recv_blocking(WAIT).unwrap();
            let echo = ep.message(&d).unwrap().to_vec();
            let from = d.from;
            ep.release(d).unwrap();
            send(&mut ep, from, &echo);
        }
        serve_until(&mut ep, &done_b);
        (*ep.port().stats(), counters.map(|c| c.snapshot()))
    });
    let desc = rx.recv().expect("server started");
    let lab_a = lab.clone();
    let client = std::thread::spawn(move || {
        lab_a.enter("a").unwrap();
        let (mut ep, _) = endpoint(wire, CLIENT, mode);
        ep.add_peer(SERVER, desc);
        let mut checked = 0u64;
        for i in 0..iters {
            let msg = message(i, size(i));
            send(&mut ep, SERVER, &msg);
            let d = ep
                .recv_blocking(WAIT)
                .unwrap_or_else(|e| panic!("echo {i}: {e}"));
            assert_eq!(d.from, SERVER);
            assert!(
                ep.message(&d).unwrap() == msg.as_slice(),
                "echo {i} differs"
            );
            ep.release(d).unwrap();
            checked += 1;
        }
        drain(&mut ep);
        (*ep.port().stats(), checked)
    });
    let client_result = client.join();
    done.store(true, Ordering::Release);
    let (server_stats, server_packet) = server.join().expect("server panicked");
    let (client_stats, checked) = client_result.expect("client panicked");
    Run {
        sender: client_stats,
        receiver: server_stats,
        receiver_packet: server_packet,
        checked,
    }
}

/// The impairment bridges' counters of `lab`, all links and directions,
/// once they are on disk (a bridge writes them every 100 ms while frames
/// flow).
pub fn bridge_counters(lab: &Lab) -> Vec<bcl_lab::ImpairCounters> {
    std::thread::sleep(std::time::Duration::from_millis(300));
    lab.impairment_counters().unwrap()
}

/// The sum of `field` over `counters`.
pub fn total(
    counters: &[bcl_lab::ImpairCounters],
    field: fn(&bcl_lab::ImpairCounters) -> u64,
) -> u64 {
    counters.iter().map(field).sum()
}

/// IPv4 datagrams that `node`'s kernel rejected for a bad checksum: IP
/// header errors (a flipped header bit fails the header checksum) plus UDP
/// checksum errors, from the node's `/proc/net/snmp`.
pub fn kernel_checksum_rejects(lab: &Lab, node: &str) -> u64 {
    let out = lab
        .command(node, "cat")
        .unwrap()
        .arg("/proc/net/snmp")
        .output()
        .unwrap();
    assert!(out.status.success(), "cat /proc/net/snmp in {node}");
    let text = String::from_utf8(out.stdout).unwrap();
    snmp(&text, "Ip", "InHdrErrors") + snmp(&text, "Udp", "InCsumErrors")
}

/// Counter `name` of protocol `proto` in `/proc/net/snmp` text (a line of
/// names followed by a line of values, both starting with `PROTO:`).
fn snmp(text: &str, proto: &str, name: &str) -> u64 {
    let prefix = format!("{proto}:");
    let mut lines = text.lines().filter(|l| l.starts_with(&prefix));
    let (names, values) = (lines.next(), lines.next());
    let (Some(names), Some(values)) = (names, values) else {
        panic!("no {proto} lines in /proc/net/snmp:\n{text}");
    };
    let at = names
        .split_whitespace()
        .position(|n| n == name)
        .unwrap_or_else(|| panic!("no {proto} {name} in /proc/net/snmp:\n{text}"));
    values.split_whitespace().nth(at).unwrap().parse().unwrap()
}

/// Checks that the impairment bridge of `lab` corrupted frames during the
/// run and that every layer that should catch them did. Over the packet
/// method nothing below BCL checks a veth frame (no Ethernet FCS), so our
/// CRC32C must have caught corrupted frames (`bad_checksum` of `ports`,
/// the run's ports on both sides). Over udp the receiving kernels' IP and
/// UDP checksums catch every flipped bit first (counted in the nodes'
/// `/proc/net/snmp`), so no damaged datagram ever reaches BCL. Returns the
/// bridge's counters for the caller's further checks.
pub fn assert_corruption_injected_and_caught(
    lab: &Lab,
    wire: Wire,
    ports: &[bcl::PortStats],
) -> Vec<bcl_lab::ImpairCounters> {
    let imp = bridge_counters(lab);
    let corrupted = total(&imp, |c| c.corrupted);
    assert!(corrupted > 0, "the bridge corrupted no frame: {imp:?}");
    let crc: u64 = ports.iter().map(|p| p.bad_frames.bad_checksum).sum();
    match wire {
        Wire::Packet => {
            println!("corrupted by the bridge: {corrupted}; caught by our CRC32C: {crc}");
            assert!(
                crc > 0,
                "the bridge corrupted {corrupted} frames, our CRC32C caught none: {ports:?}"
            );
        }
        Wire::Udp => {
            let kernel: u64 = lab
                .nodes()
                .iter()
                .map(|n| kernel_checksum_rejects(lab, n))
                .sum();
            println!(
                "corrupted by the bridge: {corrupted}; caught by the kernels' IP/UDP \
                 checksums: {kernel}; by our CRC32C: {crc}"
            );
            assert!(
                kernel > 0,
                "the bridge corrupted {corrupted} frames, the kernels' checksums caught none"
            );
            assert_eq!(crc, 0, "a damaged datagram got past the kernel's checksums");
        }
    }
    imp
}
