//! The node daemon `bcld` end to end, one daemon in each of two lab
//! namespaces (nodes 1 and 2 on a veth pair), each owning its node's NIC
//! with the packet method:
//!
//! - unprivileged tools (uid 65534) stream verified messages through the
//!   daemons, and a job's uid is enforced: another user cannot join it;
//! - a hostile client writes forged sources, foreign job keys, garbage and
//!   unknown links into its ring and asks for malformed descriptors and
//!   identities: all refused and counted by name, nothing delivered, while
//!   its one honest frame arrives; two jobs on the same daemons at the same
//!   ports never see each other's frames;
//! - a client killed with SIGKILL mid-stream is reclaimed (ring files
//!   gone, its port free) while another pair streams on untouched; a
//!   daemon killed with SIGKILL gives its clients an error naming it, not a
//!   hang, and a restarted daemon cleans up and serves again;
//! - a daemon client and a same-node peer that reach each other by
//!   different methods (one through the daemon, the other through shared
//!   memory) complete every send both ways.
//!
//! Needs root; fails loudly without it unless BCL_SKIP_PRIVILEGED=1.

mod bcld_common;
mod serve_common;

use bcl::core::method::{Descriptor, LinkId, Method, OpenSpec, TxFrame};
use bcl::core::wire::{encode, FrameType, HeaderFields, HEADER_LEN};
use bcl::shm::engine::EngineMethod;
use bcl::{Endpoint, JobKey, ProcessAddr, ProgressMode, SendEvent};
use bcl_lab::{require_privileges, Lab, LabGuard};
use bcld_common::{open_dir, public_copy, Daemon, UidWatch};
use serde_json::Value;
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const BW: &str = env!("CARGO_BIN_EXE_bcl-bw");
const PINGPONG: &str = env!("CARGO_BIN_EXE_bcl-pingpong");
/// The unprivileged user the tools run as.
const NOBODY: &str = "65534";
/// The tools' job key (bcl_tools::end::JOB).
const TOOLS_JOB: JobKey = JobKey(0xbc1_7001);

fn config(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../configs/lab")
        .join(file)
}

/// The pair lab under a prefix of this test (down again on drop).
fn lab_up(tag: &str) -> (Lab, LabGuard) {
    let lab = Lab::load(&config("pair.toml"))
        .unwrap()
        .with_prefix(&format!("t{}-{tag}", std::process::id()))
        .unwrap()
        .with_bridge_binary(&bcl_lab::test_binary());
    let guard = LabGuard::new(lab.clone()).unwrap();
    (lab, guard)
}

/// The daemons of both nodes: a is node 1, b is node 2.
fn daemons(lab: &Lab, dir: &Path) -> (Daemon, Daemon) {
    (
        Daemon::on_node(lab, "a", 1, dir.join("a.sock")),
        Daemon::on_node(lab, "b", 2, dir.join("b.sock")),
    )
}

/// An engine endpoint of process `local` of `job` on `daemon`.
fn client(daemon: &Daemon, job: JobKey, local: ProcessAddr, secret: &str) -> EngineMethod {
    EngineMethod::connect(&daemon.socket, &OpenSpec::new(job, local), secret).unwrap()
}

fn frame(job: JobKey, src: ProcessAddr, dst: ProcessAddr, payload: &[u8]) -> Vec<u8> {
    let mut buf = vec![0u8; HEADER_LEN + payload.len()];
    let f = HeaderFields {
        kind: Some(FrameType::Data),
        job,
        src,
        dst,
        msg_len: payload.len() as u32,
        ..HeaderFields::default()
    };
    let n = encode(&mut buf, &f, payload, true).unwrap();
    buf.truncate(n);
    buf
}

/// Sends `frames` (link, bytes) through `m` as they are, whatever they say.
fn send_raw(m: &mut EngineMethod, frames: &[(u32, Vec<u8>)]) {
    let mut next = 0;
    while next < frames.len() {
        m.tx_burst(&mut |buf| {
            let (link, bytes) = frames.get(next)?;
            buf[..bytes.len()].copy_from_slice(bytes);
            next += 1;
            Some(TxFrame {
                link: LinkId(*link),
                len: bytes.len(),
            })
        })
        .unwrap();
    }
}

/// Every frame `m` receives within `wait`.
fn received(m: &mut EngineMethod, wait: Duration) -> Vec<Vec<u8>> {
    let mut got = Vec::new();
    let until = Instant::now() + wait;
    while Instant::now() < until {
        m.rx_burst(64, &mut |_, f| got.push(f.to_vec())).unwrap();
        std::thread::sleep(Duration::from_millis(1));
    }
    got
}

/// The payload of a BCL frame.
fn payload(frame: &[u8]) -> &[u8] {
    &frame[HEADER_LEN..]
}

/// Runs `tool` on `ns` as the unprivileged user, reaching the daemon at
/// `socket`.
fn as_nobody(lab: &Lab, ns: &str, tool: &Path, socket: &Path, args: &[&str]) -> Command {
    let mut c = lab.command(ns, "setpriv").unwrap();
    c.args([
        &format!("--reuid={NOBODY}"),
        &format!("--regid={NOBODY}"),
        "--clear-groups",
    ])
    .arg(tool)
    .args(args)
    .env("BCL_BCLD_SOCKET", socket);
    c
}

/// Starts a `--serve` end and returns it with its descriptor.
fn serve(mut c: Command) -> (Child, String) {
    c.stderr(Stdio::null());
    let (child, d, _output) = serve_common::spawn_listening(c);
    (child, d)
}

fn ring_files(job: JobKey, node: u32, port: u16) -> Vec<PathBuf> {
    [node | 1 << 30, node | 1 << 31]
        .iter()
        .map(|n| PathBuf::from(format!("/dev/shm/bcl-{:08x}-{n}-{port}", job.0)))
        .filter(|p| p.exists())
        .collect()
}

#[test]
fn unprivileged_tools_stream_verified_messages_through_the_daemons() {
    if !require_privileges("unprivileged_tools_stream_through_bcld") {
        return;
    }
    let (lab, _guard) = lab_up("bcldbw");
    let dir = open_dir();
    let (a, b) = daemons(&lab, dir.path());
    let bw = public_copy(BW, dir.path());
    let pingpong = public_copy(PINGPONG, dir.path());

    let (mut server, d) = serve(as_nobody(
        &lab,
        "b",
        &bw,
        &b.socket,
        &["--method", "bcld", "--serve", "--verify"],
    ));
    assert!(d.starts_with("bcld:"), "{d}");
    let out = dir.path().join("bw.json");
    let run = as_nobody(
        &lab,
        "a",
        &bw,
        &a.socket,
        &[
            "--method",
            "bcld",
            "--connect",
            &d,
            "--verify",
            "--sizes",
            "16,1400,64K",
            "--iters",
            "5",
            "--warmup",
            "1",
            "--json",
            out.to_str().unwrap(),
        ],
    )
    .output()
    .unwrap();
    assert!(
        run.status.success(),
        "bcl-bw through bcld: {}\n{}",
        run.status,
        String::from_utf8_lossy(&run.stderr)
    );
    let _ = server.kill();
    let _ = server.wait();
    let v: Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    assert_eq!(v["method"], "bcld");
    for k in ["lost", "duplicated", "out_of_order", "corrupted"] {
        assert_eq!(v["verify"][k], 0, "{k}: {v}");
    }
    assert_eq!(v["verify"]["delivered"], 3 * 6 * 64, "{v}");
    // Both clients are gone and reclaimed; the daemons refused nothing.
    a.wait_gone("1.0");
    b.wait_gone("2.0");
    for (daemon, node) in [(&a, 1), (&b, 2)] {
        let s = daemon.status();
        assert!(
            !s.counters
                .iter()
                .any(|(k, v)| k.starts_with("refused") && *v > 0),
            "{s:?}"
        );
        // b received the data (thousands of frames: the 64 KiB messages
        // alone are 46 each), a the acknowledgements (as many as the
        // receiver's ACK coalescing sends).
        let least = if node == 2 { 1000 } else { 1 };
        assert!(daemon.counter("rx_delivered") >= least, "{s:?}");
        assert!(ring_files(TOOLS_JOB, node, 0).is_empty());
    }

    // A round trip through both daemons, blocking on every side.
    let (mut server, d) = serve(as_nobody(
        &lab,
        "b",
        &pingpong,
        &b.socket,
        &["--method", "bcld", "--serve"],
    ));
    let run = as_nobody(
        &lab,
        "a",
        &pingpong,
        &a.socket,
        &[
            "--method",
            "bcld",
            "--connect",
            &d,
            "--iters",
            "300",
            "--sizes",
            "8,4K",
        ],
    )
    .output()
    .unwrap();
    let _ = server.kill();
    let _ = server.wait();
    assert!(
        run.status.success(),
        "bcl-pingpong through bcld: {}",
        String::from_utf8_lossy(&run.stderr)
    );

    // A job belongs to the user of its first client: the tools' job, held
    // by root here, refuses the unprivileged user's server.
    let _holder = client(&b, TOOLS_JOB, ProcessAddr::new(2, 9), "");
    let run = as_nobody(
        &lab,
        "b",
        &pingpong,
        &b.socket,
        &["--method", "bcld", "--serve"],
    )
    .output()
    .unwrap();
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(!run.status.success(), "{err}");
    assert!(err.contains("belongs to uid 0, not uid 65534"), "{err}");
}

#[test]
fn a_hostile_client_is_refused_and_counted_and_jobs_stay_apart() {
    if !require_privileges("a_hostile_client_is_refused") {
        return;
    }
    let (lab, _guard) = lab_up("bcldhostile");
    let dir = open_dir();
    let (a, b) = daemons(&lab, dir.path());
    let job = JobKey(0x5eed_0001);
    let other_job = JobKey(0x5eed_0002);
    let (h_addr, v_addr) = (ProcessAddr::new(1, 7), ProcessAddr::new(2, 7));
    let mut hostile = client(&a, job, h_addr, "s1");
    let mut victim = client(&b, job, v_addr, "s1");
    // Another job at the same port on the same daemon.
    let mut bystander = client(&b, other_job, v_addr, "s2");

    // Identities that are not the caller's are refused at hello.
    let refusal = |r: Result<EngineMethod, bcl::core::method::MethodError>| {
        r.expect_err("refused").to_string()
    };
    let spec = |j, n, p| OpenSpec::new(j, ProcessAddr::new(n, p));
    let e = refusal(EngineMethod::connect(&a.socket, &spec(job, 3, 7), "s1"));
    assert!(e.contains("serves node 1"), "{e}");
    let e = refusal(EngineMethod::connect(&a.socket, &spec(job, 1, 7), "s1"));
    assert!(e.contains("taken by pid"), "{e}");
    let e = refusal(EngineMethod::connect(&a.socket, &spec(job, 1, 8), "wrong"));
    assert!(e.contains("wrong secret"), "{e}");
    // A request that is not one, on a raw connection.
    let mut raw = UnixStream::connect(&a.socket).unwrap();
    raw.write_all(b"{\"hello\": 17}\n").unwrap();
    let mut answer = String::new();
    BufReader::new(&raw).read_line(&mut answer).unwrap();
    assert!(answer.contains("refused"), "{answer}");
    // Malformed descriptors.
    for bad in ["zz:not-a-mac", "", "02:bc:00:01:00"] {
        let r = hostile.open_link(&Descriptor::new("bcld", bad));
        assert!(r.is_err(), "{bad:?} opened");
    }
    assert!(a.counter("refused_descriptors") >= 3);

    let link = hostile.open_link(&victim.descriptor()).unwrap().0;
    let honest = frame(job, h_addr, v_addr, b"honest");
    let frames = vec![
        (
            link,
            frame(job, ProcessAddr::new(1, 8), v_addr, b"forged port"),
        ),
        (
            link,
            frame(job, ProcessAddr::new(2, 7), v_addr, b"forged node"),
        ),
        (link, frame(other_job, h_addr, v_addr, b"into another job")),
        (link, vec![0xff; 7]),
        (link, honest[..HEADER_LEN + 2].to_vec()),
        (12_345, frame(job, h_addr, v_addr, b"unknown link")),
        (
            link,
            frame(job, h_addr, ProcessAddr::new(2, 99), b"nobody there"),
        ),
        (link, honest.clone()),
    ];
    send_raw(&mut hostile, &frames);
    let got = received(&mut victim, Duration::from_millis(500));
    assert_eq!(got.len(), 1, "the victim got {got:?}");
    assert_eq!(payload(&got[0]), b"honest");
    let got = received(&mut bystander, Duration::from_millis(100));
    assert!(got.is_empty(), "the other job got {got:?}");
    let count = |n| a.counter(n);
    assert_eq!(count("refused_forged_source"), 2);
    assert_eq!(count("refused_foreign_job"), 1);
    assert_eq!(count("refused_malformed"), 2);
    assert_eq!(count("refused_unknown_link"), 1);
    let h = a.status();
    let mine = h.clients.iter().find(|c| c.addr == "1.7").unwrap();
    assert!(mine
        .counters
        .contains(&("refused_forged_source".to_string(), 2)));
    assert_eq!(b.counter("rx_no_client"), 1);
    assert_eq!(b.counter("rx_delivered"), 1);

    // The other job's honest frame reaches only the other job.
    let mut other_sender = client(&a, other_job, h_addr, "s2");
    let l = other_sender.open_link(&bystander.descriptor()).unwrap().0;
    send_raw(
        &mut other_sender,
        &[(l, frame(other_job, h_addr, v_addr, b"k"))],
    );
    let got = received(&mut bystander, Duration::from_millis(500));
    assert_eq!(got.len(), 1);
    assert_eq!(payload(&got[0]), b"k");
    assert!(received(&mut victim, Duration::from_millis(100)).is_empty());

    // Two clients of one daemon reach each other without the NIC.
    let mut near = client(&b, job, ProcessAddr::new(2, 8), "s1");
    let l = near.open_link(&victim.descriptor()).unwrap().0;
    let local = frame(job, ProcessAddr::new(2, 8), v_addr, b"local");
    send_raw(&mut near, &[(l, local)]);
    let got = received(&mut victim, Duration::from_millis(500));
    assert_eq!(got.len(), 1);
    assert_eq!(payload(&got[0]), b"local");

    // The hostile client's user may write its ring's file: garbage over the
    // ring's control words and slots. The daemon reads every index and
    // length it finds there as untrusted: it goes on serving, another
    // client's frame still arrives, and the broken client is dropped.
    let ring = format!(
        "/dev/shm/bcl-{:08x}-{}-{}",
        job.0,
        1u32 | 1 << 31,
        h_addr.port.0
    );
    let file = std::fs::OpenOptions::new().write(true).open(&ring).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&file, &vec![0xa5; 64 << 10], 4096).unwrap();
    let _ = hostile.tx_burst(&mut |buf| {
        buf[..honest.len()].copy_from_slice(&honest);
        None
    });
    std::thread::sleep(Duration::from_millis(200));
    let after_addr = ProcessAddr::new(1, 11);
    let mut after = client(&a, job, after_addr, "s1");
    let l = after.open_link(&victim.descriptor()).unwrap().0;
    send_raw(&mut after, &[(l, frame(job, after_addr, v_addr, b"after"))]);
    let got = received(&mut victim, Duration::from_millis(500));
    assert!(
        got.iter().any(|f| payload(f) == b"after"),
        "nothing from the honest client after the corruption: {got:?}"
    );
    assert!(got
        .iter()
        .all(|f| payload(f) == b"after" || payload(f) == b"honest"));
    // The broken ring's client is dropped (so the daemon sleeps again
    // instead of being kept awake by a ring that always claims work).
    let until = Instant::now() + Duration::from_secs(10);
    while a.counter("clients_dropped_broken_ring") == 0 {
        assert!(Instant::now() < until, "{:?}", a.status());
        std::thread::sleep(Duration::from_millis(50));
    }
    let s = a.status();
    assert!(
        !s.clients.iter().any(|c| c.addr == "1.7" && c.job == job.0),
        "{s:?}"
    );
    assert_eq!(s.clients.len(), 2, "{s:?}");
}

/// Streams numbered messages between two engine endpoints until `stop`;
/// returns (sent and completed, received in order) of the receiving side.
fn stream(ep: &mut Endpoint, peer: ProcessAddr, stop: &AtomicBool) -> (u32, Vec<u32>, usize) {
    let mut sent = 0u32;
    let mut completed = 0usize;
    let mut got = Vec::new();
    let mut handles = HashMap::new();
    let mut until = None;
    loop {
        if until.is_none() && stop.load(Ordering::Relaxed) {
            until = Some(Instant::now() + Duration::from_secs(3));
        }
        if until.is_some_and(|t| Instant::now() > t) {
            return (sent, got, completed);
        }
        ep.progress_or_wait(Some(ep.now() + Duration::from_millis(1)))
            .unwrap();
        if until.is_none() && ep.port().outstanding_sends() < 32 {
            if let Ok(h) = ep.send(peer, &sent.to_le_bytes()) {
                handles.insert(h, sent);
                sent += 1;
            }
        }
        while let Some(d) = ep.poll_delivery() {
            let m = ep.message(&d).unwrap();
            got.push(u32::from_le_bytes(m[..4].try_into().unwrap()));
            ep.release(d).unwrap();
        }
        while let Some(ev) = ep.poll_send_event() {
            match ev {
                SendEvent::Complete(h) => {
                    handles.remove(&h);
                    completed += 1;
                }
                SendEvent::Failed(h, f) => panic!("send {:?} failed: {f:?}", handles.get(&h)),
            }
        }
    }
}

fn engine_endpoint(daemon: &Daemon, job: JobKey, me: ProcessAddr) -> (Endpoint, Descriptor) {
    let m = client(daemon, job, me, "");
    let d = m.descriptor();
    let ep = Endpoint::builder(me, job)
        .method(Box::new(m))
        .mode(ProgressMode::Blocking)
        .build()
        .unwrap();
    (ep, d)
}

#[test]
fn a_killed_client_is_reclaimed_and_a_killed_daemon_is_an_error_not_a_hang() {
    if !require_privileges("a_killed_client_is_reclaimed") {
        return;
    }
    let (lab, _guard) = lab_up("bcldkill");
    let dir = open_dir();
    let (mut a, b) = daemons(&lab, dir.path());
    let bw = public_copy(BW, dir.path());
    let job = JobKey(0x5eed_0003);
    let (e1, e2) = (ProcessAddr::new(1, 5), ProcessAddr::new(2, 5));
    let (mut ep1, d1) = engine_endpoint(&a, job, e1);
    let (mut ep2, d2) = engine_endpoint(&b, job, e2);
    ep1.add_peer(e2, d2);
    ep2.add_peer(e1, d1);
    let stop = Arc::new(AtomicBool::new(false));
    let s1 = {
        let stop = stop.clone();
        std::thread::spawn(move || stream(&mut ep1, e2, &stop))
    };
    let s2 = {
        let stop = stop.clone();
        std::thread::spawn(move || stream(&mut ep2, e1, &stop))
    };

    // Another pair streams through the same daemons; its client is killed
    // mid-stream.
    let (mut server, d) = serve(as_nobody(
        &lab,
        "b",
        &bw,
        &b.socket,
        &["--method", "bcld", "--serve"],
    ));
    let mut victim = as_nobody(
        &lab,
        "a",
        &bw,
        &a.socket,
        &[
            "--method",
            "bcld",
            "--connect",
            &d,
            "--sizes",
            "64K",
            "--iters",
            "100000",
        ],
    )
    .stdout(Stdio::null())
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    let until = Instant::now() + Duration::from_secs(10);
    while !a.status().clients.iter().any(|c| c.addr == "1.0") {
        assert!(Instant::now() < until, "the bcl-bw client never connected");
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(700));
    // setpriv exec'd bcl-bw: the child's pid is the tool's.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(victim.id() as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let _ = victim.wait();
    a.wait_gone("1.0");
    assert!(
        !ring_files(TOOLS_JOB, 1, 0).iter().any(|p| p
            .to_string_lossy()
            .contains(&format!("-{}-", 1u32 | 1 << 31))),
        "the daemon's ring of the killed client is still there"
    );
    let _ = server.kill();
    let _ = server.wait();
    std::thread::sleep(Duration::from_millis(500));
    stop.store(true, Ordering::Relaxed);
    let (sent1, got1, done1) = s1.join().unwrap();
    let (sent2, got2, done2) = s2.join().unwrap();
    for (sent, done, got, what) in [(sent1, done1, &got2, "1->2"), (sent2, done2, &got1, "2->1")] {
        assert!(sent > 100, "{what}: only {sent} sent");
        assert!(
            got.windows(2).all(|w| w[1] == w[0] + 1),
            "{what}: out of order"
        );
        assert!(
            got.len() >= done,
            "{what}: {done} completed, {} arrived",
            got.len()
        );
    }

    // The daemon dies: its client's next calls fail and say why.
    let (mut ep, _) = engine_endpoint(&a, job, ProcessAddr::new(1, 6));
    let pid = a.pid();
    a.kill();
    let until = Instant::now() + Duration::from_secs(10);
    let err = loop {
        match ep.progress_or_wait(Some(ep.now() + Duration::from_millis(100))) {
            Err(e) => break e.to_string(),
            Ok(_) => assert!(Instant::now() < until, "no error after bcld died"),
        }
    };
    assert!(err.contains(&format!("bcld (pid {pid}) exited")), "{err}");
    // Reconnecting is opening the endpoint again (after dropping the old
    // one, whose ring holds the address).
    drop(ep);
    // A new daemon removes what the dead one left and serves again.
    let a = Daemon::on_node(&lab, "a", 1, dir.path().join("a.sock"));
    assert!(ring_files(job, 1, 5).iter().all(|p| !p
        .to_string_lossy()
        .contains(&format!("-{}-", 1u32 | 1 << 31))));
    let _again = client(&a, job, ProcessAddr::new(1, 6), "");
}

#[test]
fn four_ranks_per_node_share_one_afxdp_nic_through_the_daemon() {
    if !require_privileges("four_ranks_per_node_share_one_afxdp_nic") {
        return;
    }
    let (lab, _guard) = lab_up("bcld4");
    let dir = open_dir();
    // Each node's daemon owns its NIC with AF_XDP; bcl-run numbers the lab
    // nodes a, b as 1, 2.
    let daemon = |ns: &str, node: u32| {
        let nic = lab.interfaces(ns).unwrap().remove(0).ifname;
        let args: Vec<String> = [
            "--node",
            &node.to_string(),
            "--nic",
            &nic,
            "--method",
            "afxdp",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        Daemon::start(&lab, ns, &args, dir.path().join(format!("bcld-{ns}.sock")))
    };
    let (a, b) = (daemon("a", 1), daemon("b", 2));
    assert!(a.status().nics[0].starts_with("afxdp:"), "{:?}", a.status());
    // bcl-run is root (the lab's namespaces); the ranks run as uid 65534
    // (--user) and reach the NICs only through the daemons.
    let alltoall = public_copy(env!("CARGO_BIN_EXE_bcl-alltoall"), dir.path());
    let watch = UidWatch::start(vec![a.socket.clone(), b.socket.clone()]);
    let out = Command::new(env!("CARGO_BIN_EXE_bcl-run"))
        .env("BCL_LAB_PREFIX", lab.prefix())
        .env("BCL_BCLD_SOCKET", dir.path().join("bcld-%n.sock"))
        .arg("--lab")
        .arg(lab.file())
        .args(["--nodes", "a,b", "--per-node", "4", "--timeout", "60"])
        .args(["--user", NOBODY, "--"])
        .arg(&alltoall)
        .args(["--sizes", "8,1024,65536", "--timeout", "60"])
        .output()
        .unwrap();
    let seen = watch.stop();
    assert!(!seen.is_empty(), "no client seen while the job ran");
    assert!(
        seen.iter().all(|&uid| uid.to_string() == NOBODY),
        "clients of uids {seen:?}"
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "bcl-run: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    // Every rank got everything; ranks of different nodes went through the
    // daemons, ranks of one node through shared memory.
    let mut links = 0;
    for line in stdout.lines() {
        let Some((tag, rest)) = line.split_once("] ") else {
            continue;
        };
        let rank: u32 = tag.trim_start_matches('[').parse().unwrap();
        if let Some(json) = rest.strip_prefix("link ") {
            let v: Value = serde_json::from_str(json).unwrap();
            let peer = v["peer"].as_u64().unwrap() as u32;
            let want = if rank / 4 == peer / 4 { "shm" } else { "bcld" };
            assert_eq!(v["method"], want, "{line}");
            links += 1;
        }
        if let Some(json) = rest.strip_prefix("done ") {
            let v: Value = serde_json::from_str(json).unwrap();
            assert_eq!(v["received"], 7 * 3, "{line}");
        }
    }
    assert_eq!(links, 8 * 7, "{stdout}");
    for d in [&a, &b] {
        let s = d.status();
        assert!(s.clients.is_empty(), "{s:?}");
        let count = |k: &str| s.counters.iter().find(|(x, _)| x == k).map_or(0, |c| c.1);
        assert_eq!(count("clients_left"), 4, "{s:?}");
        assert!(count("rx_delivered") > 0, "{s:?}");
    }
}

#[test]
fn small_frames_of_several_clients_travel_in_containers_between_daemons() {
    if !require_privileges("small_frames_of_several_clients_travel_in_containers") {
        return;
    }
    let (lab, _guard) = lab_up("bcldbundle");
    let dir = open_dir();
    let (a, b) = daemons(&lab, dir.path());
    let job = JobKey(0x5eed_0005);
    let stop = Arc::new(AtomicBool::new(false));
    let mut threads = Vec::new();
    // Four pairs of clients stream small numbered messages both ways at
    // once: each daemon round carries frames of several clients (messages
    // and acknowledgements) to the one other daemon.
    for port in 11..15u16 {
        let (e1, e2) = (ProcessAddr::new(1, port), ProcessAddr::new(2, port));
        let (mut ep1, d1) = engine_endpoint(&a, job, e1);
        let (mut ep2, d2) = engine_endpoint(&b, job, e2);
        ep1.add_peer(e2, d2);
        ep2.add_peer(e1, d1);
        for (mut ep, peer) in [(ep1, e2), (ep2, e1)] {
            let stop = stop.clone();
            threads.push(std::thread::spawn(move || stream(&mut ep, peer, &stop)));
        }
    }
    std::thread::sleep(Duration::from_secs(2));
    stop.store(true, Ordering::Relaxed);
    let results: Vec<_> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    // Thread 2k streams to thread 2k+1 and back.
    for pair in results.chunks(2) {
        for (from, to) in [(&pair[0], &pair[1]), (&pair[1], &pair[0])] {
            let (sent, _, done) = *from;
            let got = &to.1;
            assert!(sent > 100, "only {sent} sent");
            assert!(
                got.iter().enumerate().all(|(i, &n)| n == i as u32),
                "lost, duplicated or out of order"
            );
            assert!(got.len() >= done, "{done} completed, {} arrived", got.len());
        }
    }
    for (d, name) in [(&a, "a"), (&b, "b")] {
        let containers = d.counter("tx_containers");
        let bundled = d.counter("tx_frames_bundled");
        let received = d.counter("rx_containers");
        eprintln!(
            "daemon {name}: {containers} containers of {bundled} frames sent, {received} received"
        );
        assert!(containers > 0, "daemon {name} sent no container");
        assert!(
            bundled >= 2 * containers,
            "containers hold two frames or more"
        );
        assert!(received > 0, "daemon {name} received no container");
        assert_eq!(
            d.counter("daemon_links"),
            1,
            "daemon {name}: one other daemon"
        );
        for refusal in ["rx_malformed", "rx_no_client", "refused_malformed"] {
            assert_eq!(d.counter(refusal), 0, "daemon {name}: {refusal}");
        }
    }
}

#[test]
fn a_daemon_client_and_a_shm_peer_that_route_differently_still_complete_every_send() {
    if !require_privileges("a_daemon_client_and_a_shm_peer_that_route_differently") {
        return;
    }
    let (lab, _guard) = lab_up("bcldasym");
    let dir = open_dir();
    let (_a, b) = daemons(&lab, dir.path());
    let job = JobKey(0x5eed_0005);
    let (x, y) = (ProcessAddr::new(2, 7), ProcessAddr::new(2, 8));
    // Each with the daemon and shared memory, as same-node ranks are;
    // x knows only y's daemon descriptor and y only x's shared-memory one,
    // so x sends through the daemon (sequenced, acknowledged) and y
    // answers through shared memory (unsequenced).
    let open = |me: ProcessAddr| {
        let shm = bcl::registry::Registry::builtin()
            .lookup("shm")
            .unwrap()
            .open(&OpenSpec::new(job, me))
            .unwrap();
        let engine = client(&b, job, me, "");
        let (d_shm, d_engine) = (shm.descriptor(), engine.descriptor());
        let ep = Endpoint::builder(me, job)
            .method(Box::new(engine))
            .method(shm)
            .mode(ProgressMode::Blocking)
            .build()
            .unwrap();
        (ep, d_engine, d_shm)
    };
    let (mut ex, dx_engine, dx_shm) = open(x);
    let (mut ey, dy_engine, _) = open(y);
    assert!(dx_engine.method == "bcld" && dx_shm.method == "shm");
    ex.add_peer(y, dy_engine);
    ey.add_peer(x, dx_shm);
    let stop = Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    let tx = std::thread::spawn(move || {
        let r = stream(&mut ex, y, &s);
        (r, ex.port().stats().retransmits)
    });
    let s = stop.clone();
    let ty = std::thread::spawn(move || stream(&mut ey, x, &s));
    std::thread::sleep(Duration::from_secs(2));
    stop.store(true, Ordering::Relaxed);
    // `stream` fails on any send failure ("no acknowledgement" before).
    let ((x_sent, x_got, x_done), x_resent) = tx.join().unwrap();
    let (y_sent, y_got, y_done) = ty.join().unwrap();
    assert!(x_sent > 100 && y_sent > 100, "{x_sent} {y_sent}");
    assert_eq!(x_done, x_sent as usize, "every send of x completed");
    assert_eq!(y_done, y_sent as usize, "every send of y completed");
    assert_eq!(
        y_got,
        (0..x_sent).collect::<Vec<_>>(),
        "x -> y once, in order"
    );
    assert_eq!(
        x_got,
        (0..y_sent).collect::<Vec<_>>(),
        "y -> x once, in order"
    );
    assert!(
        x_resent < u64::from(x_sent),
        "x resent {x_resent} of {x_sent}"
    );
}
