//! Multi-rail end to end in bcl-lab namespaces: `bcl-bw --rails` streams
//! verified messages over two and four veth pairs between two nodes, over
//! rails of different methods, with one rail impaired, and with one rail
//! taken down and brought back mid-stream; every message arrives once, in
//! order, intact, and each rail carries its part. Needs root; fails loudly
//! without it unless BCL_SKIP_PRIVILEGED=1.

mod rails_common;
mod serve_common;

use bcl_lab::{require_privileges, Lab, LabGuard};
use serde_json::Value;
use std::path::{Path, PathBuf};

const BW: &str = env!("CARGO_BIN_EXE_bcl-bw");

fn config(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../configs/lab")
        .join(file)
}

/// The lab of `file` under a prefix of this test, brought up.
fn lab(file: &str, tag: &str) -> (Lab, LabGuard) {
    let lab = Lab::load(&config(file))
        .unwrap()
        .with_prefix(&format!("t{}-{tag}", std::process::id()))
        .unwrap();
    let guard = LabGuard::new(lab.clone()).unwrap();
    (lab, guard)
}

/// Everything arrived once, in order, intact.
fn assert_exactly_once(report: &Value, messages: u64) {
    let v = &report["verify"];
    assert_eq!(v["delivered"], messages, "{v}");
    for k in ["lost", "duplicated", "out_of_order", "corrupted"] {
        assert_eq!(v[k], 0, "{k}: {v}");
    }
}

/// The sender's rails from its report: (state, bytes acknowledged, times
/// out of service).
fn rails(report: &Value) -> Vec<(String, u64, u64)> {
    report["rails"]
        .as_array()
        .unwrap_or_else(|| panic!("no rails in {report}"))
        .iter()
        .map(|r| {
            (
                r["state"].as_str().unwrap().to_string(),
                r["bytes_delivered"].as_u64().unwrap(),
                r["downs"].as_u64().unwrap(),
            )
        })
        .collect()
}

/// A verified `bcl-bw --lab` run over `rails` with `extra` options;
/// returns the sender's report.
fn run(lab_file: &str, tag: &str, method: &str, rails: &str, extra: &[&str]) -> Value {
    let (lab, _guard) = lab(lab_file, tag);
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("bw.json");
    let out = std::process::Command::new(BW)
        .args(["--method", method, "--lab"])
        .arg(config(lab_file))
        .args(["--nodes", "b,a", "--rails", rails, "--verify"])
        .args(extra)
        .arg("--json")
        .arg(&json)
        .env("BCL_LAB_PREFIX", lab.prefix())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "bcl-bw exit {}: {}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap()
}

/// Each of the rails carried at least a quarter of an equal share.
fn assert_every_rail_carried(report: &Value, n: usize) {
    let r = rails(report);
    assert_eq!(r.len(), n, "{report}");
    let total: u64 = r.iter().map(|x| x.1).sum();
    for (i, (state, bytes, _)) in r.iter().enumerate() {
        assert_eq!(state, "up", "rail {i}: {report}");
        assert!(
            *bytes * n as u64 * 4 > total,
            "rail {i} carried {bytes} of {total} bytes: {report}"
        );
    }
}

#[test]
fn two_and_four_rails_stripe_verified_streams() {
    if !require_privileges("two_and_four_rails_stripe_verified_streams") {
        return;
    }
    let args = ["--sizes", "64K,1000", "--iters", "40", "--warmup", "2"];
    let two = run("rails2.toml", "rail2", "packet", "to-r0,to-r1", &args);
    assert_exactly_once(&two, 2 * 42 * 64);
    assert_every_rail_carried(&two, 2);
    let four = run(
        "rails4.toml",
        "rail4",
        "packet",
        "to-r0,to-r1,to-r2,to-r3",
        &args,
    );
    assert_exactly_once(&four, 2 * 42 * 64);
    assert_every_rail_carried(&four, 4);
}

#[test]
fn rails_of_different_methods_stripe_a_verified_stream() {
    if !require_privileges("rails_of_different_methods_stripe_a_verified_stream") {
        return;
    }
    let report = run(
        "rails2.toml",
        "railmix",
        "packet",
        "afxdp@to-r0,packet@to-r1",
        &["--sizes", "64K", "--iters", "40", "--warmup", "2"],
    );
    assert_exactly_once(&report, 42 * 64);
    assert_every_rail_carried(&report, 2);
    let methods: Vec<&str> = report["rails"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["method"].as_str().unwrap())
        .collect();
    assert_eq!(methods, ["afxdp", "packet"]);
}

#[test]
fn an_impaired_rail_loses_and_duplicates_nothing() {
    if !require_privileges("an_impaired_rail_loses_and_duplicates_nothing") {
        return;
    }
    let report = run(
        "rails-impaired.toml",
        "railimp",
        "packet",
        "to-r0,to-r1",
        &["--sizes", "64K,100", "--iters", "30", "--warmup", "2"],
    );
    assert_exactly_once(&report, 2 * 32 * 64);
    assert!(
        report["counters"]["retransmits"].as_u64().unwrap() > 0,
        "the lossy rail's frames were resent: {report}"
    );
    let r = rails(&report);
    assert!(
        r.iter().all(|x| x.1 > 0),
        "both rails carried data: {report}"
    );
}

#[test]
fn a_rail_taken_down_mid_stream_is_left_and_used_again_when_it_returns() {
    if !require_privileges("a_rail_taken_down_mid_stream_is_left_and_used_again") {
        return;
    }
    // Shaped rails (100 Mbit/s each): the stream takes seconds whatever
    // the host's speed, and each rail's part is set by its link.
    let (lab, _guard) = lab("rails4-shaped.toml", "raildown");
    let dir = tempfile::tempdir().unwrap();
    let (report, took) =
        rails_common::stream_through_an_outage(&lab, "packet", None, &dir.path().join("bw.json"));
    rails_common::assert_rail_left_and_used_again(&report, took);
}

#[test]
fn a_job_with_rails_in_its_cluster_file_stripes_over_every_nic() {
    if !require_privileges("a_job_with_rails_in_its_cluster_file_stripes_over_every_nic") {
        return;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("bw.json");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_bcl-run"))
        .current_dir(&root)
        .env("BCL_LAB_PREFIX", format!("t{}-railjob", std::process::id()))
        .env_remove("BCL_METHODS")
        .env_remove("BCL_RAILS")
        .args([
            "--lab",
            "configs/lab/rails2.toml",
            "--cluster",
            "configs/rails2-cluster.toml",
            "--per-node",
            "1",
            "--timeout",
            "60",
            "--",
            BW,
            "--sizes",
            "64K",
            "--iters",
            "30",
            "--warmup",
            "2",
            "--verify",
            "--json",
        ])
        .arg(&json)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "bcl-run exit {}: {}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_exactly_once(&report, 32 * 64);
    // afxdp on each process's own NIC is the main link (the policy's
    // first), packet on the other NIC the second rail.
    assert_every_rail_carried(&report, 2);
    let methods: Vec<&str> = report["rails"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["method"].as_str().unwrap())
        .collect();
    assert_eq!(methods, ["afxdp", "packet"], "{report}");
}
