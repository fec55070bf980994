//! The tools end to end in bcl-lab namespaces, as scripts use them: both
//! ends started by `--lab FILE --nodes A,B`, the `listening:` line, the JSON
//! contract, exit statuses, and cleanup by `bcl-lab down` after a run that
//! was killed. Needs root; fails loudly without it unless
//! BCL_SKIP_PRIVILEGED=1.

mod serve_common;

use bcl_lab::{require_privileges, Lab};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const PINGPONG: &str = env!("CARGO_BIN_EXE_bcl-pingpong");
const BW: &str = env!("CARGO_BIN_EXE_bcl-bw");

fn config(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../configs/lab")
        .join(file)
}

fn prefix(tag: &str) -> String {
    format!("t{}-{tag}", std::process::id())
}

fn json(path: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

fn namespaces_of(prefix: &str) -> Vec<String> {
    let out = Command::new("ip").args(["netns", "list"]).output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| n.starts_with(&format!("{prefix}.")))
        .map(String::from)
        .collect()
}

/// Processes of this test's bcl-bw started as one end of a run (`--serve`
/// or `--connect`), found in /proc (no procps needed).
fn ends_of_a_run() -> Vec<u32> {
    let mut pids = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(raw) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
            continue;
        };
        let argv: Vec<String> = raw
            .split(|b| *b == 0)
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        if argv.iter().any(|a| a == BW) && argv.iter().any(|a| a == "--serve" || a == "--connect") {
            pids.push(pid);
        }
    }
    pids
}

#[test]
fn pingpong_over_packet_in_a_lab_writes_the_contract_json() {
    if !require_privileges("pingpong_over_packet_in_a_lab") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("pp.json");
    let p = prefix("tool-pp");
    let status = Command::new(PINGPONG)
        .args(["--method", "packet", "--lab"])
        .arg(config("pair.toml"))
        .args([
            "--nodes", "b,a", "--sizes", "64,2000", "--iters", "300", "--warmup", "20",
        ])
        .arg("--json")
        .arg(&out)
        .env("BCL_LAB_PREFIX", &p)
        .status()
        .unwrap();
    assert!(status.success());
    let v = json(&out);
    assert_eq!(v["tool"], "bcl-pingpong");
    assert_eq!(v["method"], "packet");
    assert_eq!(v["mode"], "blocking");
    assert_eq!(v["results"].as_array().unwrap().len(), 2);
    // First contact, then 2 sizes x (20 warm-up + 300 timed).
    assert_eq!(v["counters"]["received"], 641);
    assert_eq!(v["counters"]["lost"], 0);
    assert!(v["first_contact_ns"].as_u64().unwrap() > 0);
    // The tool brought the lab up and took it down again.
    assert!(namespaces_of(&p).is_empty());
}

#[test]
fn pingpong_over_the_bare_packet_floor_writes_the_contract_json() {
    if !require_privileges("pingpong_over_the_bare_packet_floor") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    for busy in [false, true] {
        let out = dir.path().join(format!("raw-{busy}.json"));
        let p = prefix(&format!("tool-raw{}", u8::from(busy)));
        let mut args = vec![
            "--method",
            "packet-raw",
            "--nodes",
            "b,a",
            "--sizes",
            "64,1400",
            "--iters",
            "300",
            "--warmup",
            "20",
        ];
        if busy {
            args.push("--busy-poll");
        }
        let status = Command::new(PINGPONG)
            .arg("--lab")
            .arg(config("pair.toml"))
            .args(&args)
            .arg("--json")
            .arg(&out)
            .env("BCL_LAB_PREFIX", &p)
            .status()
            .unwrap();
        assert!(status.success());
        let v = json(&out);
        assert_eq!(v["method"], "packet-raw");
        assert_eq!(v["mode"], if busy { "busy-poll" } else { "blocking" });
        let results = v["results"].as_array().unwrap();
        assert_eq!(results[1]["size"], 1400);
        assert!(results[1]["p50_ns"].as_u64().unwrap() > 0);
        // First contact, then 2 sizes x (20 warm-up + 300 timed), and no
        // BCL protocol underneath: nothing resent.
        assert_eq!(v["counters"]["received"], 641, "{v}");
        assert_eq!(v["counters"]["lost"], 0);
        assert_eq!(v["counters"]["corrupt"], 0);
        assert_eq!(v["counters"]["retransmits"], 0);
        assert!(namespaces_of(&p).is_empty());
    }
}

#[test]
fn bw_with_verify_reports_the_same_counts_on_both_sides() {
    if !require_privileges("bw_with_verify_reports_the_same_counts") {
        return;
    }
    let p = prefix("tool-bw");
    let lab = Lab::load(&config("pair.toml"))
        .unwrap()
        .with_prefix(&p)
        .unwrap();
    let _guard = bcl_lab::LabGuard::new(lab.clone()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (sj, cj) = (
        dir.path().join("server.json"),
        dir.path().join("client.json"),
    );
    // The two ends by hand, as a script on two hosts would run them.
    let mut server = lab.command("b", BW).unwrap();
    server
        .args(["--method", "udp", "--serve", "--verify", "--json"])
        .arg(&sj);
    // The rest of the server's report is read on, as a script would.
    let (mut server, descriptor, rest) = serve_common::spawn_listening(server);
    assert!(descriptor.starts_with("udp:10.77.1.2:"), "{descriptor}");
    let client = lab
        .command("a", BW)
        .unwrap()
        .args([
            "--method",
            "udp",
            "--verify",
            "--sizes",
            "64,8K,64K",
            "--iters",
            "5",
        ])
        .args(["--connect", &descriptor, "--json"])
        .arg(&cj)
        .status()
        .unwrap();
    assert!(client.success());
    assert!(server.wait().unwrap().success());
    let report = rest.join().unwrap();
    assert!(
        report.contains("# verify: delivered 2880 lost 0"),
        "{report}"
    );
    let (s, c) = (json(&sj), json(&cj));
    assert_eq!(s["verify"], c["verify"]);
    assert_eq!(c["verify"]["delivered"], 3 * 15 * 64);
    assert_eq!(c["verify"]["lost"], 0);
    assert_eq!(c["channel"], "system");
    let r = &c["results"][2];
    assert_eq!(r["size"], 65536);
    assert_eq!(r["messages"], 5 * 64);
    assert!(r["mbytes_per_s"].as_f64().unwrap() > 0.0);
}

#[test]
fn lab_down_cleans_up_after_a_killed_run() {
    if !require_privileges("lab_down_cleans_up_after_a_killed_run") {
        return;
    }
    let p = prefix("tool-kill");
    // A long run that brings the lab up itself ...
    let mut run = Command::new(BW)
        .args(["--method", "kernel-tcp", "--lab"])
        .arg(config("pair.toml"))
        .args(["--nodes", "b,a", "--sizes", "64", "--iters", "100000000"])
        .env("BCL_LAB_PREFIX", &p)
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while namespaces_of(&p).len() < 2 {
        assert!(Instant::now() < deadline, "the lab never came up");
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(500));
    // ... killed without a chance to clean up: namespaces and both ends stay.
    run.kill().unwrap();
    run.wait().unwrap();
    assert_eq!(namespaces_of(&p).len(), 2);
    let lab = Lab::load(&config("pair.toml"))
        .unwrap()
        .with_prefix(&p)
        .unwrap();
    lab.down().unwrap();
    assert!(namespaces_of(&p).is_empty());
    // No end of the run survives (they are stopped by `down`; give them a
    // moment to exit).
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let left = ends_of_a_run();
        if left.is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "left running: {left:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}
