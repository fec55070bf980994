//! `bcl-bw --channel normal|open` end to end, unprivileged: both ends in
//! this process over the simulated fabric with faults and over udp on
//! loopback, `--verify` and the JSON contract; and the clear refusals
//! (channels on a baseline, a system-channel message above the eager
//! limit).

use serde_json::Value;
use std::path::Path;
use std::process::Command;

const BW: &str = env!("CARGO_BIN_EXE_bcl-bw");

fn json(path: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

/// Runs bcl-bw with `args` plus `--local --verify --json`, expects success
/// and returns the JSON report.
fn run(args: &[&str]) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bw.json");
    let out = Command::new(BW)
        .args(args)
        .args(["--local", "--verify", "--json"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "bcl-bw {args:?}: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    json(&path)
}

/// Checks a run of `sizes`, each `per_size` messages in all (warm-up
/// included), on `channel` with `depth[i]` messages in flight at size i.
fn check(v: &Value, channel: &str, sizes: &[u64], per_size: u64, depth: &[u64]) {
    assert_eq!(v["tool"], "bcl-bw");
    assert_eq!(v["channel"], channel);
    let results = v["results"].as_array().unwrap();
    assert_eq!(results.len(), sizes.len());
    for ((r, size), d) in results.iter().zip(sizes).zip(depth) {
        assert_eq!(r["size"], *size);
        let messages = r["messages"].as_u64().unwrap();
        assert!(messages > 0, "{r}");
        assert_eq!(r["bytes"].as_u64().unwrap(), messages * size);
        assert!(r["mbytes_per_s"].as_f64().unwrap() > 0.0, "{r}");
        assert_eq!(r["channels"].as_u64(), Some(*d), "{r}");
    }
    let verify = &v["verify"];
    assert_eq!(verify["delivered"], per_size * sizes.len() as u64, "{v}");
    for k in ["lost", "duplicated", "out_of_order", "corrupted"] {
        assert_eq!(verify[k], 0, "{k}: {v}");
    }
}

const FAULTS: &str = "loss=0.01,reorder=0.05,dup=0.01,corrupt=0.005,seed=3";

/// Normal channels through a faulty simulated wire, fewer channels than
/// messages per window (so buffers are re-posted while the sender waits,
/// in either order) and sizes past the eager limit.
#[test]
fn normal_channels_over_a_faulty_sim_wire() {
    let v = run(&[
        "--method",
        "sim",
        "--fault",
        FAULTS,
        "--channel",
        "normal",
        "--channels",
        "3",
        "--sizes",
        "64K,1M",
        "--window",
        "4",
        "--iters",
        "2",
        "--warmup",
        "1",
    ]);
    check(&v, "normal", &[65536, 1 << 20], 12, &[3, 3]);
    assert_faults_repaired(&v);
}

/// The faults of [`FAULTS`] happened and were dealt with: lost frames were
/// sent again, and corrupted ones were dropped (the simulated fabric
/// corrupts, duplicates and reorders, but makes no malformed frame of its
/// own: bad frames are the corrupted ones the CRC32C caught).
fn assert_faults_repaired(v: &Value) {
    println!("counters: {}", v["counters"]);
    assert!(v["counters"]["retransmits"].as_u64().unwrap() > 0, "{v}");
    assert!(v["counters"]["bad_frames"].as_u64().unwrap() > 0, "{v}");
}

/// An open channel through a faulty simulated wire: puts into a ring of
/// slots, the last message read back with a get and compared.
#[test]
fn an_open_channel_over_a_faulty_sim_wire() {
    let v = run(&[
        "--method",
        "sim",
        "--fault",
        FAULTS,
        "--channel",
        "open",
        "--channels",
        "2",
        "--sizes",
        "64K,1M",
        "--window",
        "3",
        "--iters",
        "2",
        "--warmup",
        "1",
    ]);
    check(&v, "open", &[65536, 1 << 20], 9, &[2, 2]);
    assert_faults_repaired(&v);
}

/// Over udp on loopback, with the default number of channels (about 4 MiB
/// in flight: 16 of 100 000 bytes, 2 of 6 MiB) and a size of several
/// megabytes; --memcpy adds the memcpy baseline per size.
#[test]
fn normal_and_open_channels_over_udp_loopback() {
    for channel in ["normal", "open"] {
        let v = run(&[
            "--method",
            "udp",
            "--bind",
            "127.0.0.1",
            "--channel",
            channel,
            "--sizes",
            "100000,6M",
            "--window",
            "4",
            "--iters",
            "2",
            "--warmup",
            "1",
            "--memcpy",
        ]);
        check(&v, channel, &[100_000, 6 << 20], 12, &[16, 2]);
        for r in v["results"].as_array().unwrap() {
            assert!(r["memcpy_mbytes_per_s"].as_f64().unwrap() > 0.0, "{r}");
        }
    }
}

fn refused(args: &[&str]) -> String {
    let out = Command::new(BW).args(args).output().unwrap();
    assert!(!out.status.success(), "bcl-bw {args:?} succeeded");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn channels_on_a_baseline_and_big_system_messages_are_refused_clearly() {
    let e = refused(&[
        "--method",
        "kernel-tcp",
        "--local",
        "--channel",
        "normal",
        "--sizes",
        "64K",
    ]);
    assert!(e.contains("without BCL's channels"), "{e}");
    let e = refused(&["--method", "sim", "--local", "--sizes", "4M"]);
    assert!(
        e.contains("eager limit") && e.contains("--channel normal"),
        "{e}"
    );
    let e = refused(&["--method", "sim", "--local", "--channels", "4"]);
    assert!(e.contains("--channel normal"), "{e}");
}
