//! Capture (`BCL_PCAP`, `EndpointBuilder::pcap`) read back by `tshark` with
//! the shipped dissector (tools/wireshark/bcl.lua): over shared memory
//! (direct messages, frames, a bulk transfer), over udp on loopback
//! (message count, sequence numbers, a bundle split into its messages, the
//! ACK that acknowledges them, CRC32C verified), over the simulated fabric
//! with loss (the dissector's retransmissions are the port's), in a child
//! process through the environment variable (`%p`, and the pid fallback of
//! a locked file), congestion-state records (kind 4) of a udp stream and
//! of a simulated stream behind a bottleneck with congestion control on,
//! remote service requests' messages over shm and udp, and, as root, over the packet method on a veth
//! pair captured by tshark itself (the Ethernet decode).
//!
//! `tshark` must be installed (scripts/test installs it); without it these
//! tests fail, unless BCL_SKIP_PRIVILEGED=1.

mod common;

use bcl::shm::ShmMethod;
use bcl::sim::{FabricConfig, FaultProfile, SimClock, SimFabric, VirtualClock};
use bcl::udp::{UdpConfig, UdpMethod};
use bcl::{Endpoint, JobKey, PortConfig, ProcessAddr, ProgressMode};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// How long any one wait of these tests may take (a guard against hangs,
/// not a measurement).
const T: Duration = Duration::from_secs(30);

/// The dissector.
fn dissector() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tools/wireshark/bcl.lua")
}

/// A fresh directory for one test's files.
fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("bcl-capture-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Whether tshark can run; panics with what to do when it cannot, unless
/// BCL_SKIP_PRIVILEGED=1 (then the test is skipped).
fn have_tshark(test: &str) -> bool {
    let ok = Command::new("tshark")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if ok {
        return true;
    }
    if std::env::var("BCL_SKIP_PRIVILEGED").is_ok_and(|v| v == "1") {
        println!("SKIP {test}: tshark is not installed (BCL_SKIP_PRIVILEGED=1)");
        return false;
    }
    panic!(
        "{test}: tshark is not installed; scripts/test installs it (apt-get install tshark), or set BCL_SKIP_PRIVILEGED=1 to skip"
    );
}

/// A tshark run on `file` with the dissector loaded: with a home of its own
/// (so no installed copy of the plugin or personal preference interferes),
/// failing on any error it prints (a Lua error does not fail tshark).
fn tshark(file: &Path, args: &[&str]) -> String {
    let (ok, stdout, stderr) = tshark_run(file, args);
    assert!(ok, "tshark {args:?} on {}:\n{stderr}", file.display());
    stdout
}

/// Runs tshark on `file` (see [`tshark`]): whether it ran without any
/// error, its output and its standard error.
fn tshark_run(file: &Path, args: &[&str]) -> (bool, String, String) {
    let home = file.with_extension("home");
    std::fs::create_dir_all(&home).unwrap();
    let script = format!("lua_script:{}", dissector().display());
    let out = Command::new("tshark")
        .env("HOME", &home)
        .env("XDG_CONFIG_HOME", home.join(".config"))
        .arg("-r")
        .arg(file)
        .args(["-X", &script])
        .args(args)
        .output()
        .expect("run tshark");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let quiet = stderr
        .lines()
        .all(|l| l.contains("Running as user") || l.trim().is_empty());
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    (out.status.success() && quiet, stdout, stderr)
}

/// The records of `file` that match `filter`, each as the values of
/// `fields` (several occurrences of one field joined by commas).
fn fields(file: &Path, filter: &str, fields: &[&str]) -> Vec<Vec<String>> {
    parse_fields(&tshark(file, &fields_args(filter, fields)))
}

fn parse_fields(out: &str) -> Vec<Vec<String>> {
    out.lines()
        .map(|l| l.split('\t').map(str::to_string).collect())
        .collect()
}

/// Waits until `file`, which a capture is still writing, has records
/// matching `filter` that `done` accepts; returns them. (A live capture
/// hands frames to its file in blocks, some time after they crossed the
/// interface; stopping it earlier loses them.)
fn wait_for_records(
    file: &Path,
    filter: &str,
    want: &[&str],
    done: impl Fn(&[Vec<String>]) -> bool,
) -> Vec<Vec<String>> {
    let deadline = Instant::now() + T;
    loop {
        let (_, out, _) = tshark_run(file, &fields_args(filter, want));
        let rows = parse_fields(&out);
        if done(&rows) {
            return rows;
        }
        assert!(
            Instant::now() < deadline,
            "{} never held the records: {rows:?}",
            file.display()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn fields_args<'a>(filter: &'a str, fields: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![
        "-Y",
        filter,
        "-T",
        "fields",
        "-E",
        "separator=/t",
        "-E",
        "occurrence=a",
        "-E",
        "aggregator=,",
    ];
    for f in fields {
        args.extend(["-e", f]);
    }
    args
}

/// Lower-case hex of `bytes`, as tshark prints a bytes field.
fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn num(s: &str) -> u64 {
    s.parse()
        .unwrap_or_else(|_| panic!("{s:?} is not a decimal number"))
}

/// `n` bytes that differ with `seed`.
fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(29).wrapping_add(seed))
        .collect()
}

// ------------------------------------------------------------------------
// Shared memory: direct messages, frames and a bulk transfer.

#[test]
fn shm_capture_shows_direct_messages_frames_and_transfers() {
    if !have_tshark("shm_capture") {
        return;
    }
    let dir = scratch("shm");
    let file = dir.join("shm.pcapng");
    let job = JobKey(std::process::id() << 8 ^ 0xc1);
    let (a, b) = (ProcessAddr::new(1, 1), ProcessAddr::new(1, 2));
    let build = |addr| {
        Endpoint::builder(addr, job)
            .method(Box::new(ShmMethod::open(job, addr).unwrap()))
            .pcap(&file)
            .build()
            .unwrap()
    };
    let mut ea = build(a);
    let mut eb = build(b);
    ea.add_peer(b, eb.descriptors()[0].clone());
    let smalls: Vec<Vec<u8>> = (0..5).map(|i| pattern(8, i)).collect();
    let big = pattern(5000, 99);
    let transfer = pattern(100_000, 7);
    let ch = eb.open_normal_channel().unwrap();
    let (smalls_b, big_b, transfer_b) = (smalls.clone(), big.clone(), transfer.clone());
    let receiver = std::thread::spawn(move || {
        for want in [&b"first"[..]]
            .into_iter()
            .chain(smalls_b.iter().chain([&big_b]).map(|m| &m[..]))
        {
            let got = eb
                .recv_with_until(eb.now() + T, |from, m| (from, m.to_vec()))
                .unwrap()
                .expect("a message in time");
            assert_eq!((got.0, &got.1[..]), (a, want));
        }
        let (from, buf, len) = eb.recv_on_channel(ch, None, vec![0; 200_000], T).unwrap();
        assert_eq!((from, &buf[..len]), (a, &transfer_b[..]));
        eb.flush_until(eb.now() + Duration::from_millis(100))
            .unwrap();
    });
    // The first message opens the link (through the port, as a frame);
    // small ones after it travel as direct messages.
    ea.send_blocking(b, b"first", T).unwrap();
    for m in smalls.iter().chain([&big]) {
        ea.send_blocking(b, m, T).unwrap();
    }
    ea.send_on_channel_blocking(b, ch, transfer.clone(), T)
        .unwrap();
    receiver.join().unwrap();
    drop(ea);

    // Direct messages: each recorded once by the sender and once by the
    // receiver, with both processes and the bytes.
    let direct = fields(
        &file,
        "bcl.cap.kind == 2",
        &[
            "bcl.cap.direction",
            "bcl.cap.local",
            "bcl.cap.peer",
            "bcl.cap.method",
            "bcl.direct.data",
        ],
    );
    let sent: Vec<_> = direct.iter().filter(|r| r[0] == "2").collect();
    let got: Vec<_> = direct.iter().filter(|r| r[0] == "1").collect();
    assert_eq!(sent.len(), smalls.len(), "{direct:?}");
    assert_eq!(got.len(), smalls.len(), "{direct:?}");
    for (i, m) in smalls.iter().enumerate() {
        assert_eq!(sent[i][1..], ["1.1", "1.2", "shm", &hex(m)], "sent {i}");
        assert_eq!(got[i][1..], ["1.2", "1.1", "shm", &hex(m)], "received {i}");
    }
    // The 5000-byte message travels as an unsequenced DATA frame.
    let data = fields(
        &file,
        "bcl.type == 1 && bcl.msg_len == 5000",
        &[
            "bcl.cap.direction",
            "bcl.flags.unsequenced",
            "bcl.src",
            "bcl.dst",
            "bcl.payload_len",
        ],
    );
    assert!(
        data.iter()
            .any(|r| r[0] == "2" && r[2] == "1.1" && r[3] == "1.2"),
        "{data:?}"
    );
    assert!(data.iter().any(|r| r[0] == "1"), "{data:?}");
    assert!(
        data.iter().all(|r| r[1] == "1" || r[1] == "True"),
        "{data:?}"
    );
    let payload: u64 = data
        .iter()
        .filter(|r| r[0] == "2")
        .map(|r| num(&r[4]))
        .sum();
    assert_eq!(payload, 5000, "{data:?}");
    // The transfer: a rendezvous request frame, then its data as one bulk
    // record on each side.
    assert!(!fields(&file, "bcl.type == 4", &["bcl.rndv.len"]).is_empty());
    let bulk = fields(
        &file,
        "bcl.cap.kind == 3",
        &[
            "bcl.cap.direction",
            "bcl.cap.bulk_kind",
            "bcl.cap.total_len",
            "bcl.cap.peer",
        ],
    );
    assert_eq!(bulk.len(), 2, "{bulk:?}");
    assert!(bulk.iter().any(|r| r[..] == ["2", "1", "100000", "1.2"]));
    assert!(bulk.iter().any(|r| r[..] == ["1", "1", "100000", "1.1"]));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Remote service requests' messages as the dissector shows them: over
/// shared memory as direct service messages (capture kind 5), over udp as
/// SERVICE frames (type 10); request and reply with the handler and request
/// ids, and the payloads.
#[test]
fn service_messages_are_dissected_over_shm_and_udp() {
    if !have_tshark("service_capture") {
        return;
    }
    let dir = scratch("service");
    let job = JobKey(std::process::id() << 8 ^ 0x5e);
    let shm_file = dir.join("shm.pcapng");
    let (a, b) = (ProcessAddr::new(1, 1), ProcessAddr::new(1, 2));
    let shm = |addr| {
        Endpoint::builder(addr, job)
            .method(Box::new(ShmMethod::open(job, addr).unwrap()))
            .pcap(&shm_file)
            .build()
            .unwrap()
    };
    let udp_file = dir.join("udp.pcapng");
    for (mut client, mut server, file, kind_filter) in [
        (shm(a), shm(b), &shm_file, "bcl.cap.kind == 5"),
        (
            udp_endpoint(ProcessAddr::new(2, 1), &udp_file),
            udp_endpoint(ProcessAddr::new(2, 2), &udp_file),
            &udp_file,
            "bcl.type == 10",
        ),
    ] {
        client.add_peer(server.local(), server.descriptors()[0].clone());
        server.add_peer(client.local(), client.descriptors()[0].clone());
        server
            .register_handler(7, |_, p, reply| {
                reply.extend_from_slice(p);
                reply.push(b'!');
            })
            .unwrap();
        let to = server.local();
        // The first request opens the link; the second, over shared
        // memory, goes as a direct service message.
        let mut answers = Vec::new();
        for payload in [&b"one"[..], b"two"] {
            let r = client.rsr(to, 7, payload).unwrap();
            drive(&mut client, &mut server, |c, _| {
                if let Some(done) = c.poll_rsr_completion() {
                    assert_eq!(done.request, r);
                    answers.push(done.result.unwrap());
                }
                answers.len() == r.number as usize + 1
            });
        }
        assert_eq!(answers, [b"one!".to_vec(), b"two!".to_vec()]);
        drop(client);
        drop(server);
        let rows = fields(
            file,
            kind_filter,
            &[
                "bcl.cap.direction",
                "bcl.svc.kind",
                "bcl.svc.handler",
                "bcl.svc.request",
                "bcl.svc.body",
            ],
        );
        // Sent by the client: request 1 ("two") to handler 7; sent by the
        // server: its reply "two!".
        let two = ["7", "1"];
        assert!(
            rows.iter()
                .any(|r| r[0] == "2" && r[1] == "1" && r[2..4] == two && r[4] == hex(b"two")),
            "{file:?}: {rows:?}"
        );
        assert!(
            rows.iter()
                .any(|r| r[0] == "2" && r[1] == "2" && r[2..4] == two && r[4] == hex(b"two!")),
            "{file:?}: {rows:?}"
        );
        let info = info_column(file, kind_filter);
        assert!(
            info.iter()
                .any(|i| i.contains("request handler=7 request=1")),
            "{info:?}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

// ------------------------------------------------------------------------
// UDP on loopback: sequence numbers, a bundle, an ACK, the CRC.

/// Makes progress on both until `done` says so.
fn drive(
    a: &mut Endpoint,
    b: &mut Endpoint,
    mut done: impl FnMut(&mut Endpoint, &mut Endpoint) -> bool,
) {
    let deadline = Instant::now() + T;
    while !done(a, b) {
        assert!(Instant::now() < deadline, "no progress in {T:?}");
        a.progress().unwrap();
        b.progress().unwrap();
    }
}

fn udp_endpoint(addr: ProcessAddr, file: &Path) -> Endpoint {
    udp_endpoint_with(addr, file, |_| {})
}

/// [`udp_endpoint`], with `f` changing its configuration.
fn udp_endpoint_with(addr: ProcessAddr, file: &Path, f: impl FnOnce(&mut PortConfig)) -> Endpoint {
    // With the CRC32C the udp method leaves out by default, so that the
    // dissector's check of it is tested too.
    let m = UdpMethod::open(UdpConfig {
        crc32c: true,
        ..UdpConfig::new("127.0.0.1:0".parse().unwrap())
    })
    .unwrap();
    Endpoint::builder(addr, JobKey(0xca97))
        .method(Box::new(m))
        .mode(ProgressMode::BusyPoll)
        // No retransmission from a slow test thread muddying the counts.
        .configure(|c| {
            c.rto.min = Duration::from_secs(5);
            c.rto.initial = Duration::from_secs(5);
            c.rto.max = c.rto.max.max(Duration::from_secs(5));
            f(c);
        })
        .pcap(file)
        .build()
        .unwrap()
}

/// Delivers everything `b` has.
fn take_all(b: &mut Endpoint, got: &mut Vec<Vec<u8>>) {
    while let Some(d) = b.poll_delivery() {
        got.push(b.message(&d).unwrap().to_vec());
        b.release(d).unwrap();
    }
}

#[test]
fn udp_capture_decodes_sequence_bundle_ack_and_crc() {
    if !have_tshark("udp_capture") {
        return;
    }
    let dir = scratch("udp");
    let file = dir.join("udp.pcapng");
    let (pa, pb) = (ProcessAddr::new(1, 0), ProcessAddr::new(2, 0));
    let mut a = udp_endpoint(pa, &file);
    let mut b = udp_endpoint(pb, &file);
    a.add_peer(pb, b.descriptors()[0].clone());
    let mut got = Vec::new();
    // Three messages one at a time: three DATA frames.
    let singles: Vec<Vec<u8>> = (0..3).map(|i| pattern(40, i)).collect();
    for m in &singles {
        a.send(pb, m).unwrap();
        let want = got.len() + 1;
        drive(&mut a, &mut b, |_, b| {
            take_all(b, &mut got);
            got.len() == want
        });
    }
    // Five queued at once: one bundle.
    let bundled: Vec<Vec<u8>> = (0..5).map(|i| pattern(16 + i, 50 + i as u8)).collect();
    for m in &bundled {
        a.send(pb, m).unwrap();
    }
    drive(&mut a, &mut b, |a, b| {
        take_all(b, &mut got);
        got.len() == 8 && a.port().outstanding_sends() == 0
    });
    assert_eq!(got, [singles.clone(), bundled.clone()].concat());
    let bundles_sent = a.port().stats().bundles_sent;
    drop((a, b));

    // The DATA frames a sent: four, consecutive sequence numbers, the last
    // one the bundle, split into its five messages with consecutive ids.
    let sent = fields(
        &file,
        "bcl.type == 1 && bcl.cap.direction == 2 && !bcl.analysis.retransmission",
        &[
            "bcl.seq",
            "bcl.msg_id",
            "bcl.flags.bundle",
            "bcl.bundle.count",
            "bcl.bundle.msg_id",
            "bcl.bundle.data",
            "bcl.src",
            "bcl.dst",
            "bcl.cap.method",
        ],
    );
    assert_eq!(bundles_sent, 1);
    assert_eq!(sent.len(), 4, "{sent:?}");
    let seqs: Vec<u64> = sent.iter().map(|r| num(&r[0])).collect();
    assert!(
        seqs.windows(2).all(|w| w[1] == w[0] + 1),
        "sequence numbers increase by one: {seqs:?}"
    );
    assert!(sent.iter().all(|r| r[6..] == ["1.0", "2.0", "udp"]));
    let bundle = &sent[3];
    assert!(bundle[2] == "1" || bundle[2] == "True", "{bundle:?}");
    assert_eq!(bundle[3], "5");
    let first_id = num(&bundle[1]);
    let ids: Vec<String> = (0..5).map(|i| (first_id + i).to_string()).collect();
    assert_eq!(bundle[4], ids.join(","));
    let datas: Vec<String> = bundled.iter().map(|m| hex(m)).collect();
    assert_eq!(bundle[5], datas.join(","));
    assert_eq!(
        first_id,
        num(&sent[2][1]) + 1,
        "ids continue after the singles"
    );
    // The receiver saw the same four.
    let received = fields(
        &file,
        "bcl.type == 1 && bcl.cap.direction == 1 && bcl.cap.local == \"2.0\"",
        &["bcl.seq"],
    );
    let rseqs: Vec<u64> = received.iter().map(|r| num(&r[0])).collect();
    assert_eq!(rseqs, seqs);
    // An ACK from b acknowledges everything: cumulative ack = last seq + 1.
    let acks = fields(
        &file,
        "bcl.type == 2 && bcl.cap.direction == 2",
        &[
            "bcl.ack",
            "bcl.src",
            "bcl.dst",
            "bcl.nak.reason",
            "bcl.sack.count",
        ],
    );
    let last = seqs[3];
    assert!(
        acks.iter()
            .any(|r| num(&r[0]) == last + 1 && r[1] == "2.0" && r[2] == "1.0" && r[3] == "0"),
        "an ACK of {}: {acks:?}",
        last + 1
    );
    // Every frame carries a CRC32C (asked for: udp leaves it out by
    // default), and the dissector verifies each one.
    let crcs = fields(&file, "bcl.type", &["bcl.crc.status"]);
    assert!(!crcs.is_empty());
    assert!(crcs.iter().all(|r| r[0] == "1"), "{crcs:?}");
    // No sequence trouble on loopback.
    assert!(fields(&file, "bcl.analysis", &["frame.number"]).is_empty());
    let _ = std::fs::remove_dir_all(&dir);
}

// ------------------------------------------------------------------------
// Congestion state: kind-4 records of a stream over udp.

/// The dissector's text for a nanosecond field (all ones: unknown).
fn us_text(ns: u64) -> String {
    match ns {
        0xFFFF_FFFF => "unknown".into(),
        10_000.. => format!("{} µs", (ns + 500) / 1000),
        _ => format!("{}.{} µs", ns / 1000, ns % 1000 / 100),
    }
}

/// The Info column of the records of `file` that match `filter`, one line
/// each (a column format of the Info column alone: its field's name
/// differs between tshark versions).
fn info_column(file: &Path, filter: &str) -> Vec<String> {
    tshark(
        file,
        &["-o", "gui.column.format:\"Info\",\"%i\"", "-Y", filter],
    )
    .lines()
    .map(|l| l.trim().to_string())
    .collect()
}

/// A congestion record as read back: cause code, window, base round trip,
/// queueing delay (ns, all ones unknown).
#[derive(Debug)]
struct CcRecord {
    cause: u64,
    window: u64,
    base: u64,
    qdelay: u64,
}

/// Reads back the congestion records of `file` (all by sender 1.0 about
/// 2.0, whose window started at `initial` and ends at `last_window`) and
/// checks each one: pseudo-header, fields in range, the window moving the
/// way its cause says, the Info column.
fn congestion_records(
    file: &Path,
    initial: u32,
    tx_window: u32,
    last_window: u32,
) -> Vec<CcRecord> {
    let rows = fields(
        file,
        "bcl.cap.kind == 4",
        &[
            "frame.interface_name",
            "bcl.cap.direction",
            "bcl.cap.local",
            "bcl.cap.peer",
            "bcl.cap.method",
            "bcl.cap.link",
            "bcl.cap.total_len",
            "bcl.cc.cause",
            "bcl.cc.slow_start",
            "bcl.cc.window",
            "bcl.cc.base_rtt",
            "bcl.cc.qdelay",
            "bcl.cc.srtt",
            "bcl.cc.in_flight",
            "bcl.cc.pacing_rate",
            "frame.packet_flags_direction",
        ],
    );
    let info = info_column(file, "bcl.cap.kind == 4");
    assert_eq!(info.len(), rows.len(), "{info:?}");
    assert!(!rows.is_empty(), "no congestion records");
    let causes = ["increase", "delay decrease", "loss", "timeout", "undo"];
    let mut last = u64::from(initial);
    let mut out = Vec::new();
    for (r, info) in rows.iter().zip(&info) {
        // Only the sender's window changes: it alone sends sequenced data.
        assert_eq!(
            r[..7],
            ["1.0/cc", "0", "1.0", "2.0", "cc", "4294967295", "32"],
            "{r:?}"
        );
        let cause = num(&r[7]);
        assert!((1..=5).contains(&cause), "{r:?}");
        let slow = match r[8].as_str() {
            "1" | "True" => true,
            "0" | "False" => false,
            other => panic!("slow start {other:?}"),
        };
        let window = num(&r[9]);
        assert!((1..=u64::from(tx_window)).contains(&window), "{r:?}");
        // Each record is a change, in the direction its cause says.
        match cause {
            1 | 5 => assert!(window > last, "{r:?} after {last}"),
            _ => assert!(window < last, "{r:?} after {last}"),
        }
        last = window;
        let (base, qdelay, srtt) = (num(&r[10]), num(&r[11]), num(&r[12]));
        // A change comes with a round-trip sample or after one: measured
        // (the base at least 1 ns; on loopback a round trip can take less
        // than the engine's reuse of a clock reading, so a smoothed round
        // trip of 0 can be).
        assert!(base > 0 && base < 0xFFFF_FFFF, "{r:?}");
        assert!(srtt < 0xFFFF_FFFF, "{r:?}");
        assert!(qdelay <= srtt, "{r:?}");
        assert!(num(&r[13]) <= u64::from(tx_window), "{r:?}");
        num(&r[14]);
        // Direction 0 in epb_flags too.
        assert!(
            r[15]
                .strip_prefix("0x")
                .is_some_and(|h| u64::from_str_radix(h, 16) == Ok(0)),
            "{r:?}"
        );
        let want = format!(
            "[cc] Congestion 1.0 → 2.0: {}, window {window} frames, qdelay {}, base {}{}",
            causes[cause as usize - 1],
            us_text(qdelay),
            us_text(base),
            if slow { ", slow start" } else { "" }
        );
        assert_eq!(info, &want);
        out.push(CcRecord {
            cause,
            window,
            base,
            qdelay,
        });
    }
    assert_eq!(
        last,
        u64::from(last_window),
        "the last record shows the window the peer has"
    );
    out
}

/// Congestion control on (off by default), from a window of `initial`
/// frames, one frame per message.
fn congestion_on(c: &mut PortConfig, initial: u32) {
    c.bundle = false;
    c.congestion.mode = bcl::core::CongestionMode::On;
    c.congestion.initial_window = initial;
    c.congestion.min_window = initial.min(2);
}

#[test]
fn udp_capture_records_congestion_window_changes() {
    if !have_tshark("congestion_capture") {
        return;
    }
    let dir = scratch("cc");
    let file = dir.join("cc.pcapng");
    let (pa, pb) = (ProcessAddr::new(1, 0), ProcessAddr::new(2, 0));
    // From a small window: slow start has to grow it.
    let initial = 2;
    let mut a = udp_endpoint_with(pa, &file, |c| congestion_on(c, initial));
    let mut b = udp_endpoint_with(pb, &file, |c| congestion_on(c, initial));
    a.add_peer(pb, b.descriptors()[0].clone());
    let count = 400;
    let mut got = Vec::new();
    for i in 0..count {
        a.send(pb, &pattern(1000, i as u8)).unwrap();
    }
    drive(&mut a, &mut b, |a, b| {
        take_all(b, &mut got);
        got.len() == count && a.port().outstanding_sends() == 0
    });
    assert_eq!(got.len(), count);
    let tx_window = a.port().config().tx_window;
    let now = a
        .port()
        .peer_info(pb)
        .and_then(|i| i.congestion)
        .expect("the peer is controlled");
    // The changes not written yet are written when the endpoints shut down.
    drop((a, b));

    let records = congestion_records(&file, initial, tx_window, now.window);
    assert!(
        records.iter().any(|r| r.cause == 1),
        "slow start grew the window: {records:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Streams `count` messages of `size` bytes from `eps[0]` to `eps[1]` over
/// the simulated `fabric`, advancing the virtual `clock` when nothing
/// moves, until all are received and acknowledged; returns what arrived.
fn stream_in_virtual_time(
    eps: &mut [Endpoint],
    fabric: &SimFabric,
    clock: &VirtualClock,
    count: usize,
    size: usize,
) -> Vec<Vec<u8>> {
    let (pa, pb) = (eps[0].local(), eps[1].local());
    let d = eps[1].descriptors()[0].clone();
    eps[0].add_peer(pb, d);
    let d = eps[0].descriptors()[0].clone();
    eps[1].add_peer(pa, d);
    let mut sent = 0;
    let mut got = Vec::new();
    let mut steps = 0u64;
    while got.len() < count || eps[0].port().outstanding_sends() > 0 {
        steps += 1;
        assert!(steps < 10_000_000, "the simulated run does not finish");
        while sent < count && eps[0].send(pb, &pattern(size, sent as u8)).is_ok() {
            sent += 1;
        }
        let mut moved = 0;
        for ep in eps.iter_mut() {
            moved += ep.progress().unwrap();
        }
        take_all(&mut eps[1], &mut got);
        if moved == 0 {
            let next = [
                fabric.next_delivery(),
                eps[0].next_timeout(),
                eps[1].next_timeout(),
            ]
            .into_iter()
            .flatten()
            .min();
            if let Some(t) = next {
                if t > clock.now() {
                    clock.set(t);
                }
            }
        }
    }
    got
}

#[test]
fn sim_capture_records_delay_decreases_behind_a_bottleneck() {
    if !have_tshark("congestion_bottleneck_capture") {
        return;
    }
    let dir = scratch("cc-sim");
    let file = dir.join("cc-sim.pcapng");
    let clock = VirtualClock::new();
    let fabric = SimFabric::new(FabricConfig {
        faults: FaultProfile {
            delay: Duration::from_micros(20),
            ..FaultProfile::perfect()
        },
        clock: SimClock::Virtual(clock.clone()),
        ..FabricConfig::default()
    });
    let initial = 4;
    let mut eps: Vec<Endpoint> = (0..2u32)
        .map(|i| {
            Endpoint::builder(ProcessAddr::new(i + 1, 0), JobKey(0xcc51))
                .method(Box::new(fabric.endpoint()))
                .clock(SimClock::Virtual(clock.clone()))
                .configure(|c| {
                    c.epoch = 1 + i;
                    congestion_on(c, initial);
                })
                .pcap(&file)
                .build()
                .unwrap()
        })
        .collect();
    // 1 Gbit/s into the receiver, with a queue that never drops here: the
    // window grows until the queue shows, then shrinks by delay.
    fabric.set_bottleneck(
        1,
        Some(bcl::sim::Bottleneck {
            rate_bytes_per_sec: 125_000_000,
            queue_bytes: 4 << 20,
        }),
    );
    let count = 1500;
    let (_, pb) = (eps[0].local(), eps[1].local());
    let got = stream_in_virtual_time(&mut eps, &fabric, &clock, count, 1400);
    assert_eq!(got.len(), count, "every message arrived");
    let tx_window = eps[0].port().config().tx_window;
    let now = eps[0]
        .port()
        .peer_info(pb)
        .and_then(|i| i.congestion)
        .expect("the peer is controlled");
    drop(eps);

    let records = congestion_records(&file, initial, tx_window, now.window);
    assert!(records.iter().any(|r| r.cause == 1), "{records:?}");
    let decreases: Vec<&CcRecord> = records.iter().filter(|r| r.cause == 2).collect();
    assert!(!decreases.is_empty(), "{records:?}");
    // The base is the path's: two hops of 20 µs and more.
    assert!(
        records
            .iter()
            .all(|r| r.base >= 40_000 && r.base < 1_000_000),
        "{records:?}"
    );
    // A delay decrease is a queue: the smoothed round trip stood well over
    // the base, and the window went far below the bound.
    assert!(
        decreases
            .iter()
            .any(|r| r.qdelay >= 50_000 && r.qdelay < 0xFFFF_FFFF),
        "{decreases:?}"
    );
    assert!(decreases.iter().all(|r| r.window < u64::from(tx_window)));
    let _ = std::fs::remove_dir_all(&dir);
}

// ------------------------------------------------------------------------
// A lossy simulated wire: the dissector's analysis against the ports'.

#[test]
fn sequence_analysis_matches_the_ports_counts_on_a_lossy_wire() {
    if !have_tshark("sequence_analysis") {
        return;
    }
    let dir = scratch("sim");
    let file = dir.join("sim.pcapng");
    let clock = VirtualClock::new();
    let fabric = SimFabric::new(FabricConfig {
        faults: FaultProfile {
            loss: 0.1,
            reorder: 0.05,
            ..FaultProfile::perfect()
        },
        seed: 11,
        clock: SimClock::Virtual(clock.clone()),
        ..FabricConfig::default()
    });
    let mut eps: Vec<Endpoint> = (0..2u32)
        .map(|i| {
            Endpoint::builder(ProcessAddr::new(i + 1, 0), JobKey(0x51a1))
                .method(Box::new(fabric.endpoint()))
                .clock(SimClock::Virtual(clock.clone()))
                .configure(|c| c.epoch = 1 + i)
                .pcap(&file)
                .build()
                .unwrap()
        })
        .collect();
    let count = 300;
    let got = stream_in_virtual_time(&mut eps, &fabric, &clock, count, 200);
    let expect: Vec<Vec<u8>> = (0..count).map(|i| pattern(200, i as u8)).collect();
    assert_eq!(got, expect);
    let (tx, rx) = (*eps[0].port().stats(), *eps[1].port().stats());
    drop(eps);
    assert!(tx.retransmits > 0, "the lossy wire made the sender resend");

    // The sender's capture point: each resend is flagged (a retransmission,
    // or a duplicate if the receiver had already acknowledged it).
    let resent = fields(
        &file,
        "(bcl.analysis.retransmission || bcl.analysis.duplicate) && bcl.cap.local == \"1.0\"",
        &["bcl.seq", "bcl.analysis.first_frame"],
    );
    assert_eq!(resent.len() as u64, tx.retransmits, "{resent:?}");
    assert!(resent.iter().all(|r| !r[1].is_empty()));
    // The receiver's: every copy of a frame it already had is flagged (a
    // retransmission or a duplicate), and the losses show as gaps or
    // frames out of order.
    let again = fields(
        &file,
        "(bcl.analysis.retransmission || bcl.analysis.duplicate) && bcl.cap.local == \"2.0\" && bcl.type == 1",
        &["bcl.seq"],
    );
    assert_eq!(again.len() as u64, rx.duplicates, "{again:?}");
    let holes = fields(
        &file,
        "(bcl.analysis.gap || bcl.analysis.out_of_order) && bcl.cap.local == \"2.0\"",
        &["bcl.seq"],
    );
    assert!(!holes.is_empty());
    let _ = std::fs::remove_dir_all(&dir);
}

// ------------------------------------------------------------------------
// The environment variable, in other processes.

/// The child of the environment-variable test: an shm exchange between two
/// endpoints built without any capture option (so only BCL_PCAP can turn
/// it on).
#[test]
fn child_entry() {
    let Ok(tag) = std::env::var("BCL_CAPTURE_CHILD") else {
        return;
    };
    let job = JobKey(std::process::id() << 8 ^ tag.parse::<u32>().unwrap());
    let (a, b) = (ProcessAddr::new(3, 1), ProcessAddr::new(3, 2));
    let build = |addr| {
        Endpoint::builder(addr, job)
            .method(Box::new(ShmMethod::open(job, addr).unwrap()))
            .build()
            .unwrap()
    };
    let mut ea = build(a);
    let mut eb = build(b);
    ea.add_peer(b, eb.descriptors()[0].clone());
    ea.send_blocking(b, b"hello from the child", T).unwrap();
    let got = eb.recv_with_until(eb.now() + T, |_, m| m.to_vec()).unwrap();
    assert_eq!(got.as_deref(), Some(&b"hello from the child"[..]));
}

/// The process ids of the records of the child's message in `file`: one
/// sent and one received, whether it went as a frame or a direct message.
fn child_records(file: &Path) -> Vec<String> {
    let rows = fields(
        file,
        "bcl.payload || bcl.direct.data",
        &[
            "bcl.cap.pid",
            "bcl.payload",
            "bcl.direct.data",
            "bcl.cap.direction",
        ],
    );
    let hello = hex(b"hello from the child");
    let mine: Vec<&Vec<String>> = rows
        .iter()
        .filter(|r| r[1] == hello || r[2] == hello)
        .collect();
    assert_eq!(mine.len(), 2, "{rows:?}");
    assert!(mine.iter().any(|r| r[3] == "1") && mine.iter().any(|r| r[3] == "2"));
    let mut pids: Vec<String> = mine.iter().map(|r| r[0].clone()).collect();
    pids.dedup();
    pids
}

fn run_child(pcap: &Path, tag: u32) -> u32 {
    let mut child = common::child_process()
        .env("BCL_CAPTURE_CHILD", tag.to_string())
        .env("BCL_PCAP", pcap)
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id();
    assert!(child.wait().unwrap().success());
    pid
}

#[test]
fn bcl_pcap_names_a_file_per_process() {
    if !have_tshark("bcl_pcap_env") {
        return;
    }
    let dir = scratch("env");
    // %p: the child's own file.
    let pid = run_child(&dir.join("run-%p.pcapng"), 1);
    let file = dir.join(format!("run-{pid}.pcapng"));
    assert_eq!(child_records(&file), [pid.to_string()]);
    // A file this process holds: the child writes FILE.PID.EXT beside it,
    // and this process's records stay its own.
    let held = dir.join("held.pcapng");
    let job = JobKey(std::process::id() << 8 ^ 0xe1);
    let me = ProcessAddr::new(4, 1);
    let ep = Endpoint::builder(me, job)
        .method(Box::new(ShmMethod::open(job, me).unwrap()))
        .pcap(&held)
        .build()
        .unwrap();
    let pid = run_child(&held, 2);
    let theirs = dir.join(format!("held.{pid}.pcapng"));
    assert_eq!(child_records(&theirs), [pid.to_string()]);
    drop(ep);
    let ours = tshark(&held, &["-T", "fields", "-e", "frame.interface_name"]);
    assert!(ours.trim().is_empty(), "no record in the held file: {ours}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_unwritable_capture_file_fails_the_build_and_names_it() {
    let job = JobKey(std::process::id() << 8 ^ 0xe2);
    let me = ProcessAddr::new(5, 1);
    let err = Endpoint::builder(me, job)
        .method(Box::new(ShmMethod::open(job, me).unwrap()))
        .pcap("/nonexistent-bcl-dir/x.pcapng")
        .build()
        .err()
        .expect("the build fails");
    let text = err.to_string();
    assert!(
        matches!(err, bcl::Error::Capture { .. }) && text.contains("/nonexistent-bcl-dir/x.pcapng"),
        "{text}"
    );
}

// ------------------------------------------------------------------------
// As root: the packet method on a veth pair, captured by tshark on the
// wire (Ethernet II, EtherType 0x88B5) and by BCL_PCAP at the same time.

#[test]
fn packet_frames_captured_on_a_veth_decode_as_bcl() {
    if !bcl_lab::require_privileges("packet_capture") || !have_tshark("packet_capture") {
        return;
    }
    use bcl::packet::{PacketConfig, PacketMethod};
    use std::io::{BufRead, BufReader};
    let dir = scratch("packet");
    let ours = dir.join("ours.pcapng");
    let lab = common::lab("pair.toml", "cap");
    // dumpcap on both nodes' interfaces: the packet method sends with
    // PACKET_QDISC_BYPASS, which hides a host's own outgoing frames from
    // its taps, so each side's capture holds what it received.
    let mut dumps: Vec<(std::process::Child, BufReader<std::process::ChildStderr>)> = ["a", "b"]
        .iter()
        .map(|node| {
            let ifname = lab.interfaces(node).unwrap()[0].ifname.clone();
            let mut c = lab
                .command(node, "dumpcap")
                .unwrap()
                .args(["-q", "-i", &ifname, "-f", "ether proto 0x88b5", "-w"])
                .arg(dir.join(format!("wire-{node}.pcapng")))
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            // It says when it is capturing.
            let mut err = BufReader::new(c.stderr.take().unwrap());
            let mut line = String::new();
            while !line.contains("Capturing on") {
                line.clear();
                assert!(
                    err.read_line(&mut line).unwrap() > 0,
                    "dumpcap did not start capturing"
                );
            }
            // Its standard error stays open: it writes there when it stops.
            (c, err)
        })
        .collect();
    let (pa, pb) = (ProcessAddr::new(1, 0), ProcessAddr::new(2, 0));
    let open = move |addr, file: PathBuf| {
        Endpoint::builder(addr, JobKey(0x7e57))
            .method(Box::new(
                PacketMethod::open(PacketConfig::default()).unwrap(),
            ))
            .pcap(file)
            .build()
            .unwrap()
    };
    let (tx_d, rx_d) = std::sync::mpsc::channel();
    let ours_b = ours.clone();
    let receiver = lab.spawn_in("b", move || {
        let mut eb = open(pb, ours_b);
        tx_d.send(eb.descriptors()[0].clone()).unwrap();
        for i in 0..10u8 {
            let m = eb
                .recv_with_until(eb.now() + T, |_, m| m.to_vec())
                .unwrap()
                .expect("a message in time");
            assert_eq!(m, pattern(100, i));
        }
        eb.flush_until(eb.now() + Duration::from_millis(200))
            .unwrap();
    });
    let ours_a = ours.clone();
    let desc = rx_d.recv().unwrap();
    lab.spawn_in("a", move || {
        let mut ea = open(pa, ours_a);
        ea.add_peer(pb, desc);
        for i in 0..10u8 {
            ea.send_blocking(pb, &pattern(100, i), T).unwrap();
        }
    })
    .join()
    .unwrap();
    receiver.join().unwrap();
    // Every message's DATA frame reached b's capture, and an ACK a's.
    let payloads: Vec<String> = (0..10).map(|i| hex(&pattern(100, i))).collect();
    let wire_b = dir.join("wire-b.pcapng");
    let wire_a = dir.join("wire-a.pcapng");
    wait_for_records(
        &wire_b,
        "eth.type == 0x88b5 && bcl.type == 1",
        &["bcl.payload"],
        |rows| payloads.iter().all(|p| rows.iter().any(|r| &r[0] == p)),
    );
    wait_for_records(
        &wire_a,
        "eth.type == 0x88b5 && bcl.type == 2",
        &["bcl.ack"],
        |rows| !rows.is_empty(),
    );
    // Stop dumpcap (SIGINT: it finishes the file) and wait for it.
    for (dump, err) in &mut dumps {
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(dump.id() as i32),
            nix::sys::signal::Signal::SIGINT,
        )
        .unwrap();
        let mut rest = String::new();
        std::io::Read::read_to_string(err, &mut rest).unwrap();
        assert!(dump.wait().unwrap().success(), "dumpcap: {rest}");
    }
    drop(lab);

    let on_wire = fields(
        &wire_b,
        "eth.type == 0x88b5 && bcl.type == 1",
        &[
            "bcl.seq",
            "bcl.src",
            "bcl.dst",
            "bcl.crc.status",
            "bcl.payload",
        ],
    );
    let seen: Vec<&str> = on_wire.iter().map(|r| r[4].as_str()).collect();
    for p in &payloads {
        assert!(
            seen.contains(&p.as_str()),
            "message {p} on the wire: {on_wire:?}"
        );
    }
    assert!(on_wire
        .iter()
        .all(|r| r[1] == "1.0" && r[2] == "2.0" && r[3] == "1"));
    let acks = fields(
        &wire_a,
        "eth.type == 0x88b5 && bcl.type == 2",
        &["bcl.ack", "bcl.src"],
    );
    assert!(!acks.is_empty(), "the ACKs cross the wire too");
    // BCL_PCAP recorded the same DATA frames on both sides.
    let ours_data = fields(
        &ours,
        "bcl.type == 1 && !bcl.analysis.retransmission",
        &["bcl.cap.direction", "bcl.cap.method", "bcl.seq"],
    );
    assert!(ours_data.iter().all(|r| r[1] == "packet"));
    assert_eq!(
        ours_data.iter().filter(|r| r[0] == "2").count(),
        10,
        "{ours_data:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// With liveness shared per node, the answer to a ping carries the
/// answering node's live ports after the ACK body (`bcl.flags.node`,
/// `bcl.node.ports`): here port 3 of node 2, this very process.
#[test]
fn a_ping_answer_carries_the_node_s_live_ports() {
    if !have_tshark("node_capture") {
        return;
    }
    let dir = scratch("node");
    let file = dir.join("node.pcapng");
    let job = JobKey(std::process::id() << 8 ^ 0x1e);
    let udp = |addr: ProcessAddr, file: Option<&Path>| {
        let m = UdpMethod::open(UdpConfig::new("127.0.0.1:0".parse().unwrap())).unwrap();
        let mut b = Endpoint::builder(addr, job)
            .method(Box::new(m))
            .mode(ProgressMode::BusyPoll)
            .configure(|c| {
                c.liveness.enabled = true;
                c.liveness.period = Duration::from_millis(20);
            });
        if let Some(f) = file {
            b = b.pcap(f);
        }
        b.build().unwrap()
    };
    let (pa, pb) = (ProcessAddr::new(1, 0), ProcessAddr::new(2, 3));
    let mut a = udp(pa, Some(&file));
    let mut b = udp(pb, None);
    b.share_liveness_on_node().unwrap();
    a.add_peer(pb, b.descriptors()[0].clone());
    b.add_peer(pa, a.descriptors()[0].clone());
    a.send(pb, b"hello").unwrap();
    a.watch_peer(pb, true).unwrap();
    drive(&mut a, &mut b, |a, _| a.port().stats().pings_sent >= 2);
    // The last answer back.
    let until = Instant::now() + Duration::from_millis(100);
    while Instant::now() < until {
        a.progress().unwrap();
        b.progress().unwrap();
    }
    drop(a);
    drop(b);
    let rows = fields(&file, "bcl.flags.node == 1", &["bcl.src", "bcl.node.ports"]);
    assert!(!rows.is_empty(), "no answer with the node's live ports");
    for r in &rows {
        assert_eq!(r, &vec!["2.3".to_string(), "3".to_string()]);
    }
    let _ = std::fs::remove_dir_all(&dir);
}
