//! `--method afxdp` and `--method afxdp-raw` of the tools end to end in
//! bcl-lab namespaces (native XDP on veth): pingpong and verified
//! streaming, the fault profile through an impaired link, a veth with two
//! queues per side, foreign traffic (ICMP echo, a UDP flow) on the same
//! interfaces while BCL streams, the XDP program gone after both ends are
//! killed with SIGKILL, and the message of an interface AF_XDP cannot use.
//! Needs root; fails loudly without it unless BCL_SKIP_PRIVILEGED=1.

mod serve_common;

use bcl_lab::{require_privileges, Lab, LabGuard};
use serde_json::Value;
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const PINGPONG: &str = env!("CARGO_BIN_EXE_bcl-pingpong");
const BW: &str = env!("CARGO_BIN_EXE_bcl-bw");

fn config(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../configs/lab")
        .join(file)
}

/// `file` brought up under a prefix of this test (down again on drop).
fn lab_up(file: &str, tag: &str) -> (Lab, LabGuard) {
    let lab = Lab::load(&config(file))
        .unwrap()
        .with_prefix(&format!("t{}-{tag}", std::process::id()))
        .unwrap()
        .with_bridge_binary(&bcl_lab::test_binary());
    let guard = LabGuard::new(lab.clone()).unwrap();
    (lab, guard)
}

fn json(path: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

/// Runs a tool with both ends in `lab` (already up: the tool leaves it up).
fn run_in(lab: &Lab, tool: &str, args: &[&str], json_out: &Path) -> Output {
    let out = Command::new(tool)
        .args(args)
        .arg("--lab")
        .arg(lab.file())
        .args(["--nodes", "b,a", "--json"])
        .arg(json_out)
        .env("BCL_LAB_PREFIX", lab.prefix())
        .output()
        .unwrap();
    let text = format!(
        "{tool} {args:?}: {}\n--- stdout\n{}\n--- stderr\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    out
}

/// The XDP attachment `ip link` shows on `node`'s interface (`xdp`,
/// `xdpgeneric`, ... with the program id), or None.
fn xdp_of(lab: &Lab, node: &str) -> Option<String> {
    let ifname = lab.interfaces(node).unwrap().remove(0).ifname;
    let out = lab
        .command(node, "ip")
        .unwrap()
        .args(["-d", "link", "show", "dev", &ifname])
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.contains("prog/xdp").then_some(text)
}

#[test]
fn pingpong_over_afxdp_and_the_bare_floor_write_the_contract_json() {
    if !require_privileges("pingpong_over_afxdp_and_the_bare_floor") {
        return;
    }
    let (lab, _guard) = lab_up("pair.toml", "axpp");
    let dir = tempfile::tempdir().unwrap();
    for (method, busy) in [("afxdp", true), ("afxdp", false), ("afxdp-raw", true)] {
        let out = dir.path().join(format!("{method}-{busy}.json"));
        let mut args = vec![
            "--method", method, "--sizes", "64,1400", "--iters", "300", "--warmup", "20",
        ];
        if busy {
            args.push("--busy-poll");
        }
        let o = run_in(&lab, PINGPONG, &args, &out);
        // Both ends said what they obtained: native XDP on veth, copy mode.
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(
            err.matches("native (driver) attach accepted").count(),
            2,
            "{err}"
        );
        assert!(err.contains("queue 0: copy"), "{err}");
        let v = json(&out);
        assert_eq!(v["tool"], "bcl-pingpong");
        assert_eq!(v["method"], method);
        assert_eq!(v["mode"], if busy { "busy-poll" } else { "blocking" });
        let results = v["results"].as_array().unwrap();
        assert_eq!(results.len(), 2);
        assert_eq!(results[1]["size"], 1400);
        assert!(results[1]["p50_ns"].as_u64().unwrap() > 0);
        // First contact, then 2 sizes x (20 warm-up + 300 timed).
        assert_eq!(v["counters"]["received"], 641, "{v}");
        assert_eq!(v["counters"]["lost"], 0);
        assert_eq!(v["counters"]["corrupt"], 0);
        if method == "afxdp-raw" {
            assert_eq!(v["counters"]["retransmits"], 0);
        }
    }
    // Both ends exited: their programs went with them.
    assert!(xdp_of(&lab, "a").is_none() && xdp_of(&lab, "b").is_none());
}

#[test]
fn pingpong_over_afxdp_on_a_two_queue_veth() {
    if !require_privileges("pingpong_over_afxdp_on_a_two_queue_veth") {
        return;
    }
    let (lab, _guard) = lab_up("pair-2q.toml", "ax2q");
    assert_eq!(lab.interfaces("a").unwrap()[0].queues, 2);
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("pp.json");
    let o = run_in(
        &lab,
        PINGPONG,
        &[
            "--method",
            "afxdp",
            "--busy-poll",
            "--sizes",
            "64,3000",
            "--iters",
            "300",
        ],
        &out,
    );
    // One socket per RX queue on both sides.
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("2 active RX queues"), "{err}");
    assert_eq!(err.matches("queue 1: copy").count(), 2, "{err}");
    let v = json(&out);
    assert_eq!(v["counters"]["lost"], 0, "{v}");
    assert_eq!(v["results"][1]["size"], 3000);
}

#[test]
fn verified_streams_over_afxdp_including_an_impaired_link() {
    if !require_privileges("verified_streams_over_afxdp") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // A clean veth: 16 B … 64 KiB messages (64 KiB ones span 45 frames).
    {
        let (lab, _guard) = lab_up("pair.toml", "axbw");
        let out = dir.path().join("bw.json");
        run_in(
            &lab,
            BW,
            &[
                "--method",
                "afxdp",
                "--busy-poll",
                "--verify",
                "--sizes",
                "16,1400,64K",
                "--iters",
                "5",
                "--warmup",
                "1",
            ],
            &out,
        );
        let v = json(&out);
        assert_eq!(v["method"], "afxdp");
        assert_eq!(v["verify"]["lost"], 0, "{v}");
        assert_eq!(v["verify"]["duplicated"], 0);
        assert_eq!(v["verify"]["out_of_order"], 0);
        assert_eq!(v["verify"]["corrupted"], 0);
        // Nothing on a clean veth makes a frame BCL would drop.
        assert_eq!(v["counters"]["bad_frames"], 0, "{v}");
        // 3 sizes x (1 warm-up + 5 timed windows) x 64 messages.
        assert_eq!(v["verify"]["delivered"], 3 * 6 * 64, "{v}");
        assert_eq!(v["results"][2]["size"], 65536);
    }
    // The fault profile of configs/lab/lossy-pair.toml: 10 % loss, 25 %
    // reordering, 5 % duplication, 1 % corruption, both ways, fixed seed
    // (its first corrupted frame a -> b is the 22nd). Every message still
    // arrives exactly once, in order, intact (--verify fails the run
    // otherwise).
    let (lab, _guard) = lab_up("lossy-pair.toml", "axlossy");
    let out = dir.path().join("lossy.json");
    run_in(
        &lab,
        BW,
        &[
            "--method",
            "afxdp",
            "--verify",
            "--sizes",
            "64,1400",
            "--iters",
            "3",
            "--warmup",
            "1",
            "--rto-min-us",
            "2000",
        ],
        &out,
    );
    let v = json(&out);
    assert_eq!(v["verify"]["delivered"], 2 * 4 * 64, "{v}");
    for k in ["lost", "duplicated", "out_of_order", "corrupted"] {
        assert_eq!(v["verify"][k], 0, "{k}: {v}");
    }
    assert!(v["counters"]["retransmits"].as_u64().unwrap() > 0, "{v}");
    // The faults really happened on the way (the bridge writes its counters
    // every 100 ms while frames flow).
    std::thread::sleep(Duration::from_millis(300));
    let counters = lab.impairment_counters().unwrap();
    let text = format!("{counters:?}");
    let sum = |f: fn(&bcl_lab::ImpairCounters) -> u64| counters.iter().map(f).sum::<u64>();
    assert!(sum(|c| c.dropped) > 0, "no loss injected: {text}");
    assert!(sum(|c| c.duplicated) > 0, "no duplication injected: {text}");
    assert!(sum(|c| c.reordered) > 0, "no reordering injected: {text}");
    assert!(sum(|c| c.corrupted) > 0, "no corruption injected: {text}");
    println!(
        "bridge corrupted {} frames; BCL dropped {} bad frames; {text}",
        sum(|c| c.corrupted),
        v["counters"]["bad_frames"]
    );
    // And the corrupted frames were caught: nothing below BCL checks a raw
    // frame, so BCL dropped them (its bad frames, both ends; zero on the
    // clean veth above, so these are the bridge's doing).
    assert!(
        v["counters"]["bad_frames"].as_u64().unwrap() > 0,
        "{} frames corrupted, none dropped by BCL: {v}",
        sum(|c| c.corrupted)
    );
}

/// Starts one end of `tool` in `node`; for a server, returns its
/// `listening:` descriptor.
fn start_end(lab: &Lab, node: &str, tool: &str, args: &[&str]) -> (Child, Option<String>) {
    let serve = args.contains(&"--serve");
    let mut end = lab.command(node, tool).unwrap();
    end.args(args).stderr(Stdio::null());
    if !serve {
        return (end.stdout(Stdio::null()).spawn().unwrap(), None);
    }
    let (child, d, _output) = serve_common::spawn_listening(end);
    (child, Some(d))
}

/// An ICMP echo request (type 8) with its checksum.
fn echo_request(id: u16, seq: u16) -> Vec<u8> {
    let mut p = vec![8, 0, 0, 0];
    p.extend_from_slice(&id.to_be_bytes());
    p.extend_from_slice(&seq.to_be_bytes());
    p.extend_from_slice(b"bcl-afxdp-foreign-traffic");
    if p.len() % 2 == 1 {
        p.push(0);
    }
    let mut sum: u32 = p
        .chunks(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    p[2..4].copy_from_slice(&(!(sum as u16)).to_be_bytes());
    p
}

/// Pings `to` `count` times over a raw ICMP socket (this thread's
/// namespace); returns the replies received.
fn ping(to: Ipv4Addr, count: u16) -> u16 {
    use nix::sys::socket::{
        recv, sendto, setsockopt, socket, sockopt, AddressFamily, MsgFlags, SockFlag, SockProtocol,
        SockType, SockaddrIn,
    };
    use std::os::fd::AsRawFd;
    let fd = socket(
        AddressFamily::Inet,
        SockType::Raw,
        SockFlag::empty(),
        SockProtocol::Icmp,
    )
    .unwrap();
    setsockopt(
        &fd,
        sockopt::ReceiveTimeout,
        &nix::sys::time::TimeVal::new(0, 200_000),
    )
    .unwrap();
    let id = std::process::id() as u16;
    let dest = SockaddrIn::from(SocketAddrV4::new(to, 0));
    let mut replies = 0;
    let mut buf = [0u8; 1500];
    for seq in 0..count {
        sendto(
            fd.as_raw_fd(),
            &echo_request(id, seq),
            &dest,
            MsgFlags::empty(),
        )
        .unwrap();
        let deadline = Instant::now() + Duration::from_secs(2);
        while Instant::now() < deadline {
            let Ok(n) = recv(fd.as_raw_fd(), &mut buf, MsgFlags::empty()) else {
                continue;
            };
            // IPv4 header, then ICMP: echo reply (0) with our id and seq.
            let ihl = usize::from(buf[0] & 0x0f) * 4;
            let icmp = &buf[ihl.min(n)..n];
            if icmp.len() >= 8
                && icmp[0] == 0
                && icmp[4..6] == id.to_be_bytes()
                && icmp[6..8] == seq.to_be_bytes()
            {
                replies += 1;
                break;
            }
        }
    }
    replies
}

#[test]
fn foreign_traffic_flows_while_afxdp_streams_and_sigkill_removes_the_program() {
    if !require_privileges("foreign_traffic_flows_while_afxdp_streams") {
        return;
    }
    let (lab, _guard) = lab_up("pair.toml", "axfor");
    let ip = |n: &str| lab.interfaces(n).unwrap()[0].ipv4.unwrap().addr;
    let (ip_a, ip_b) = (ip("a"), ip("b"));
    // A long BCL stream from a to b over afxdp (blocking mode, so that the
    // kernel's own traffic gets CPU time on two vCPUs).
    let (mut server, d) = start_end(
        &lab,
        "b",
        BW,
        &["--method", "afxdp", "--serve", "--sizes", "1K"],
    );
    let d = d.unwrap();
    assert!(d.starts_with("afxdp:"), "{d}");
    let (mut client, _) = start_end(
        &lab,
        "a",
        BW,
        &[
            "--method",
            "afxdp",
            "--connect",
            &d,
            "--sizes",
            "1K",
            "--iters",
            "100000000",
        ],
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    while xdp_of(&lab, "a").is_none() || xdp_of(&lab, "b").is_none() {
        assert!(Instant::now() < deadline, "the ends never attached");
        assert!(client.try_wait().unwrap().is_none(), "the client exited");
        std::thread::sleep(Duration::from_millis(20));
    }
    let program = xdp_of(&lab, "b").unwrap();
    assert!(program.contains("bcl_xsk"), "{program}");
    // A kernel UDP echo in b, and ICMP echo plus a UDP flow from a.
    let l2 = lab.clone();
    let done = Arc::new(AtomicBool::new(false));
    let echo_done = done.clone();
    let (bound_tx, bound_rx) = std::sync::mpsc::channel();
    let echo = std::thread::spawn(move || {
        l2.enter("b").unwrap();
        let s = UdpSocket::bind((ip_b, 7007)).unwrap();
        bound_tx.send(()).unwrap();
        s.set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        let mut buf = [0u8; 2048];
        while !echo_done.load(Ordering::Relaxed) {
            if let Ok((n, from)) = s.recv_from(&mut buf) {
                s.send_to(&buf[..n], from).unwrap();
            }
        }
    });
    bound_rx.recv().unwrap();
    let l2 = lab.clone();
    let flows = std::thread::spawn(move || {
        l2.enter("a").unwrap();
        let replies = ping(ip_b, 20);
        let s = UdpSocket::bind((ip_a, 0)).unwrap();
        s.set_read_timeout(Some(Duration::from_millis(500)))
            .unwrap();
        let mut buf = [0u8; 2048];
        // UDP may lose a datagram on a loaded machine (the kernel's backlog,
        // not the XDP program, which passes everything that is not BCL):
        // each message is sent up to 5 times, and every one must come back.
        let mut resent = 0;
        for i in 0..100u32 {
            let msg: Vec<u8> = (0..64 + i).map(|k| (k ^ i) as u8).collect();
            let mut echoed = false;
            for _attempt in 0..5 {
                s.send_to(&msg, (ip_b, 7007)).unwrap();
                // Skip late echoes of earlier attempts.
                while let Ok((n, _)) = s.recv_from(&mut buf) {
                    if buf[..n] == msg[..] {
                        echoed = true;
                        break;
                    }
                }
                if echoed {
                    break;
                }
                resent += 1;
            }
            assert!(
                echoed,
                "UDP echo {i} while BCL streams: no answer to 5 tries"
            );
        }
        (replies, resent)
    });
    let (replies, resent) = flows.join().unwrap();
    done.store(true, Ordering::Relaxed);
    echo.join().unwrap();
    assert_eq!(replies, 20, "ICMP echo replies");
    assert!(
        resent < 50,
        "UDP barely got through: {resent} resends for 100 echoes"
    );
    // BCL was streaming the whole time.
    assert!(
        client.try_wait().unwrap().is_none(),
        "the stream ended early"
    );
    assert!(
        server.try_wait().unwrap().is_none(),
        "the server ended early"
    );
    // SIGKILL both ends: no chance to detach; the BPF links go with them.
    client.kill().unwrap();
    server.kill().unwrap();
    client.wait().unwrap();
    server.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while xdp_of(&lab, "a").is_some() || xdp_of(&lab, "b").is_some() {
        assert!(Instant::now() < deadline, "XDP program left after SIGKILL");
        std::thread::sleep(Duration::from_millis(20));
    }
    // And the interfaces serve a new run at once.
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("again.json");
    run_in(
        &lab,
        PINGPONG,
        &["--method", "afxdp", "--sizes", "64", "--iters", "100"],
        &out,
    );
    assert_eq!(json(&out)["counters"]["lost"], 0);
}

#[test]
fn an_interface_afxdp_cannot_use_is_explained() {
    // No privileges needed: without them the reason is the capabilities.
    let out = Command::new(PINGPONG)
        .args(["--method", "afxdp", "--serve", "--ifname", "bcl-no-such-if"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("method afxdp is not usable here") && err.contains("bcl-no-such-if"),
        "{err}"
    );
    assert!(err.contains("--method packet"), "{err}");
    assert!(
        err.contains("no interface bcl-no-such-if") || err.contains("needs CAP_"),
        "{err}"
    );
    assert!(out.stdout.is_empty(), "no listening line when unusable");
}
