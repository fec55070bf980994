//! `bcl-stat` and the endpoints' statistics pages: three endpoints in this
//! process (shared memory and UDP) exchange messages and their pages hold
//! exactly the port's counters and their peers' methods; `bcl-stat --once
//! --json`, run as a child, sees them; the page of a process killed with
//! SIGKILL is removed by `bcl-stat`; a corrupt page is noted, never fatal.

use bcl::shm::stats_page::{read_page, PageSnapshot};
use bcl::shm::ShmMethod;
use bcl::udp::{UdpConfig, UdpMethod};
use bcl::{Endpoint, JobKey, ProcessAddr};
use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long any one wait of these tests may take (a bound against hangs,
/// not a measurement).
const T: Duration = Duration::from_secs(30);

fn bcl_stat(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_bcl-stat"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn bcl_stat_json(args: &[&str]) -> Value {
    let mut all = vec!["--once", "--json"];
    all.extend_from_slice(args);
    let (ok, out, err) = bcl_stat(&all);
    assert!(ok, "bcl-stat {all:?} failed: {err}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
}

/// An endpoint with `methods`, its page forced on (whatever `BCL_STATS`
/// says) in the default directory.
fn endpoint(addr: ProcessAddr, job: JobKey, shm: bool, udp: bool) -> Endpoint {
    let mut b = Endpoint::builder(addr, job).stats(|s| s.enabled = true);
    if shm {
        b = b.method(Box::new(ShmMethod::open(job, addr).unwrap()));
    }
    if udp {
        let cfg = UdpConfig::new("127.0.0.1:0".parse().unwrap());
        b = b.method(Box::new(UdpMethod::open(cfg).unwrap()));
    }
    b.build().unwrap()
}

/// Runs progress rounds on all of `eps` until `done` holds.
fn pump(eps: &mut [&mut Endpoint], mut done: impl FnMut(&mut [&mut Endpoint]) -> bool) {
    let start = Instant::now();
    while !done(eps) {
        assert!(start.elapsed() < T, "no progress");
        for e in eps.iter_mut() {
            e.progress().unwrap();
        }
    }
}

fn page(ep: &Endpoint) -> PageSnapshot {
    let path = ep.stats_page_path().unwrap_or_else(|| {
        panic!("no page: {:?}", ep.stats_page_error());
    });
    read_page(path).unwrap()
}

#[test]
fn pages_hold_the_ports_counters_and_bcl_stat_lists_them() {
    let job = JobKey(std::process::id() << 8 ^ 0x51);
    let (a, b, c) = (
        ProcessAddr::new(7, 1),
        ProcessAddr::new(7, 2),
        ProcessAddr::new(8, 1),
    );
    // A reaches B over shared memory and C over UDP.
    let mut ea = endpoint(a, job, true, true);
    let mut eb = endpoint(b, job, true, false);
    let mut ec = endpoint(c, job, false, true);
    ea.add_peer(b, eb.descriptors()[0].clone());
    ea.add_peer(c, ec.descriptors()[0].clone());
    eb.add_peer(a, ea.descriptors()[0].clone());
    ec.add_peer(a, ea.descriptors()[1].clone());
    let rounds = 50;
    for i in 0..rounds {
        let msg = vec![i as u8; 100 + i];
        ea.send(b, &msg).unwrap();
        ea.send(c, &msg).unwrap();
        let mut replies = 0;
        pump(&mut [&mut ea, &mut eb, &mut ec], |eps| {
            for e in eps[1..].iter_mut() {
                if let Some(d) = e.poll_delivery() {
                    let m = e.message(&d).unwrap().to_vec();
                    e.release(d).unwrap();
                    e.send(a, &m).unwrap();
                }
            }
            while let Some(d) = eps[0].poll_delivery() {
                eps[0].release(d).unwrap();
                replies += 1;
            }
            replies == 2
        });
    }
    // Everything acknowledged, nothing left to send.
    pump(&mut [&mut ea, &mut eb, &mut ec], |eps| {
        eps.iter()
            .all(|e| e.port().outstanding_sends() == 0 && !e.port().has_transmit_work())
    });

    for ep in [&mut ea, &mut eb, &mut ec] {
        assert!(ep.publish_stats());
        let s = page(ep);
        assert_eq!(s.identity.pid, std::process::id());
        assert_eq!(s.identity.addr, ep.local());
        assert_eq!(s.identity.job, job);
        let names: Vec<&str> = ep.methods().map(|m| m.name()).collect();
        assert_eq!(s.identity.methods, names);
        assert_eq!(s.body.port, *ep.port().stats(), "{}", ep.local());
        assert_eq!(s.body.peers_total, ep.port().peer_count() as u64);
        assert_eq!(s.body.peers.len(), ep.port().peer_count());
        for p in &s.body.peers {
            let info = ep.port().peer_info(p.addr).unwrap();
            assert_eq!(p.stats, info.stats);
            assert_eq!(p.method, info.route.map(|r| r.method));
            assert_eq!((p.rto, p.srtt), (info.rto, info.srtt));
        }
    }
    let sa = page(&ea);
    let method_of = |s: &PageSnapshot, addr| {
        let p = s.body.peers.iter().find(|p| p.addr == addr).unwrap();
        s.identity.methods[p.method.unwrap() as usize].clone()
    };
    assert_eq!(method_of(&sa, b), "shm");
    assert_eq!(method_of(&sa, c), "udp");
    let to_c = sa.body.peers.iter().find(|p| p.addr == c).unwrap();
    assert!(to_c.stats.frames_sent >= rounds as u64 && to_c.srtt.is_some());
    assert!(to_c.stats.bytes_sent > to_c.stats.frames_sent * 100);
    assert!(sa.body.port.messages_sent >= 2 * rounds as u64);

    // bcl-stat, another process, sees the same.
    let pid = std::process::id().to_string();
    let v = bcl_stat_json(&[
        "--pid", &pid, "--addr", "7.1", "--addr", "7.2", "--addr", "8.1",
    ]);
    let procs = v["processes"].as_array().unwrap();
    assert_eq!(procs.len(), 3, "{v}");
    let pa = procs.iter().find(|p| p["addr"] == "7.1").unwrap();
    assert_eq!(pa["methods"], serde_json::json!(["shm", "udp"]));
    assert_eq!(pa["job"], format!("{:08x}", job.0));
    assert_eq!(pa["port"]["messages_sent"], ea.port().stats().messages_sent);
    assert!(pa["rates"].is_null(), "one reading has no rates");
    let peers = pa["peers"].as_array().unwrap();
    let peer = |addr: &str| peers.iter().find(|p| p["addr"] == addr).unwrap();
    assert_eq!(peer("7.2")["method"], "shm");
    assert_eq!(peer("8.1")["method"], "udp");
    assert_eq!(peer("8.1")["bytes_sent"], to_c.stats.bytes_sent);
    assert!(peer("8.1")["srtt_ns"].as_u64().unwrap() > 0);
    // Two readings: the second has rates.
    let (ok, out, err) = bcl_stat(&[
        "--json",
        "--count",
        "2",
        "--interval",
        "0.05",
        "--pid",
        &pid,
        "--addr",
        "7.1",
    ]);
    assert!(ok, "{err}");
    let lines: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2);
    assert!(
        lines[1]["processes"][0]["rates"].is_object(),
        "{}",
        lines[1]
    );
    // And as text.
    let (ok, out, err) = bcl_stat(&["--once", "--pid", &pid, "--addr", "7.1"]);
    assert!(ok, "{err}");
    assert!(
        out.contains("shm,udp") && out.contains("8.1") && out.contains("udp"),
        "{out}"
    );

    // Pages go with their endpoints.
    let paths: Vec<_> = [&ea, &eb, &ec]
        .iter()
        .map(|e| e.stats_page_path().unwrap().to_path_buf())
        .collect();
    drop((ea, eb, ec));
    for p in paths {
        assert!(!p.exists(), "{} left behind", p.display());
    }
}

#[test]
fn the_page_can_be_turned_off() {
    let job = JobKey(std::process::id() << 8 ^ 0x52);
    let ep = Endpoint::builder(ProcessAddr::new(9, 1), job)
        .method(Box::new(
            ShmMethod::open(job, ProcessAddr::new(9, 1)).unwrap(),
        ))
        .stats(|s| s.enabled = false)
        .build()
        .unwrap();
    assert!(ep.stats_page_path().is_none() && ep.stats_page_error().is_none());
}

/// A private page directory under /dev/shm, removed at the end.
fn private_dir(tag: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("bcl-stat-test-{tag}-"))
        .tempdir_in("/dev/shm")
        .unwrap()
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| n.starts_with("bcl-stat-"))
        .collect();
    v.sort();
    v
}

#[test]
fn the_page_of_a_killed_process_is_removed_by_bcl_stat() {
    let dir = private_dir("dead");
    let d = dir.path().to_str().unwrap();
    // A UDP pingpong server: an endpoint that waits for its client.
    let mut child = Command::new(env!("CARGO_BIN_EXE_bcl-pingpong"))
        .args([
            "--method",
            "udp",
            "--serve",
            "--bind",
            "127.0.0.1",
            "--wait-client-s",
            "60",
        ])
        .env("BCL_STATS", "1")
        .env("BCL_STATS_DIR", dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(line.starts_with("listening:"), "{line:?}");
    let pid = child.id();
    let v = bcl_stat_json(&["--dir", d]);
    let procs = v["processes"].as_array().unwrap();
    assert_eq!(procs.len(), 1, "{v}");
    assert_eq!(procs[0]["pid"], pid);
    assert_eq!(procs[0]["methods"], serde_json::json!(["udp"]));
    let page = procs[0]["page"].as_str().unwrap().to_string();

    child.kill().unwrap(); // SIGKILL: no destructor runs
    child.wait().unwrap();
    assert!(
        Path::new(&page).exists(),
        "a killed process leaves its page"
    );
    // --no-clean only notes it.
    let v = bcl_stat_json(&["--dir", d, "--no-clean"]);
    assert!(
        v["notes"][0]["note"].as_str().unwrap().contains("dead"),
        "{v}"
    );
    assert!(Path::new(&page).exists());
    let v = bcl_stat_json(&["--dir", d]);
    assert_eq!(v["processes"].as_array().unwrap().len(), 0);
    assert_eq!(v["removed"][0]["page"], page.as_str());
    assert_eq!(v["removed"][0]["pid"], pid);
    assert!(names(dir.path()).is_empty(), "{:?}", names(dir.path()));
}

#[test]
fn a_corrupt_page_is_skipped_with_a_note() {
    let dir = private_dir("corrupt");
    let d = dir.path().to_str().unwrap();
    let job = JobKey(std::process::id() << 8 ^ 0x53);
    let addr = ProcessAddr::new(9, 2);
    // One good page...
    let ep = Endpoint::builder(addr, job)
        .method(Box::new(ShmMethod::open(job, addr).unwrap()))
        .stats(|s| {
            s.enabled = true;
            s.dir = dir.path().to_path_buf();
        })
        .build()
        .unwrap();
    assert!(ep.stats_page_path().unwrap().starts_with(dir.path()));
    // ... and garbage under a live pid's name (ours): kept, noted.
    let me = std::process::id();
    let garbage = dir.path().join(format!("bcl-stat-{me}-9.9"));
    std::fs::write(&garbage, vec![0xa5u8; 5000]).unwrap();
    let v = bcl_stat_json(&["--dir", d]);
    assert_eq!(v["processes"].as_array().unwrap().len(), 1, "{v}");
    assert_eq!(v["processes"][0]["addr"], "9.2");
    let notes = v["notes"].as_array().unwrap();
    assert_eq!(notes.len(), 1, "{v}");
    assert_eq!(notes[0]["page"], garbage.to_str().unwrap());
    assert!(notes[0]["note"].as_str().unwrap().contains("corrupt"));
    assert!(garbage.exists());
    // Truncated to a few bytes, and as text: still a note.
    std::fs::write(&garbage, b"BCL").unwrap();
    let (ok, out, err) = bcl_stat(&["--once", "--dir", d]);
    assert!(ok, "{err}");
    assert!(out.contains("note:") && out.contains("corrupt"), "{out}");
    drop(ep);
}
