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
//!   hang, and a restarted daemon cleans up and serves again.
//!
//! Needs root; fails loudly without it unless BCL_SKIP_PRIVILEGED=1.

use bcl::core::method::{Descriptor, LinkId, Method, OpenSpec, TxFrame};
use bcl::core::wire::{encode, FrameType, HeaderFields, HEADER_LEN};
use bcl::shm::engine::{query_status, EngineMethod, Status};
use bcl::{Endpoint, JobKey, ProcessAddr, ProgressMode, SendEvent};
use bcl_lab::{require_privileges, Lab, LabGuard};
use serde_json::Value;
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const BCLD: &str = env!("CARGO_BIN_EXE_bcld");
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

/// A directory every user may enter and write (sockets, JSON output,
/// copies of the tools an unprivileged user can execute wherever the
/// checkout lives).
fn open_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    dir
}

/// `tool` copied into `dir`, executable by everybody.
fn public_copy(tool: &str, dir: &Path) -> PathBuf {
    let to = dir.join(Path::new(tool).file_name().unwrap());
    std::fs::copy(tool, &to).unwrap();
    std::fs::set_permissions(&to, std::fs::Permissions::from_mode(0o755)).unwrap();
    to
}

/// A `bcld` running in a lab namespace.
struct Daemon {
    child: Child,
    socket: PathBuf,
    node: u32,
}

impl Daemon {
    fn start(lab: &Lab, ns: &str, node: u32, socket: PathBuf) -> Daemon {
        let nic = lab.interfaces(ns).unwrap().remove(0).ifname;
        let child = lab
            .command(ns, BCLD)
            .unwrap()
            .args(["--foreground", "--node", &node.to_string(), "--nic", &nic])
            .arg("--socket")
            .arg(&socket)
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let d = Daemon {
            child,
            socket,
            node,
        };
        let until = Instant::now() + Duration::from_secs(20);
        while query_status(&d.socket).is_err() {
            assert!(Instant::now() < until, "bcld on {ns} did not come up");
            std::thread::sleep(Duration::from_millis(50));
        }
        d
    }

    fn status(&self) -> Status {
        query_status(&self.socket).unwrap()
    }

    fn counter(&self, name: &str) -> u64 {
        let s = self.status();
        s.counters
            .iter()
            .find(|(k, _)| k == name)
            .map_or(0, |(_, v)| *v)
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Waits until the daemon lists no client at `addr`.
    fn wait_gone(&self, addr: &str) {
        let until = Instant::now() + Duration::from_secs(10);
        while self.status().clients.iter().any(|c| c.addr == addr) {
            assert!(
                Instant::now() < until,
                "bcld still lists {addr}: {:?}",
                self.status()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let _ = self.child.wait();
    }
}

/// The daemons of both nodes: a is node 1, b is node 2.
fn daemons(lab: &Lab, dir: &Path) -> (Daemon, Daemon) {
    (
        Daemon::start(lab, "a", 1, dir.join("a.sock")),
        Daemon::start(lab, "b", 2, dir.join("b.sock")),
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
    let mut child = c
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    let d = line
        .strip_prefix("listening: ")
        .unwrap_or_else(|| panic!("no listening line: {line:?}"))
        .trim()
        .to_string();
    std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
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
        assert!(daemon.counter("rx_delivered") > 1000, "{s:?}");
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
        r.err().expect("refused").to_string()
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
    let a = Daemon::start(&lab, "a", 1, dir.path().join("a.sock"));
    assert!(ring_files(job, 1, 5).iter().all(|p| !p
        .to_string_lossy()
        .contains(&format!("-{}-", 1u32 | 1 << 31))));
    let _again = client(&a, job, ProcessAddr::new(1, 6), "");
    assert_eq!(a.node, 1);
}
