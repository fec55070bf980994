//! Congestion control end to end through a shaped switch (bcl-lab's
//! `[switch.shape]`: a token bucket on the bridge's egress), with verified
//! streams: one sender through a 200 Mbit/s bottleneck, and two senders
//! into one receiver (incast). Needs root; fails loudly without it unless
//! BCL_SKIP_PRIVILEGED=1.

mod serve_common;

use bcl_lab::{require_privileges, Lab, LabGuard};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Child;

const BW: &str = env!("CARGO_BIN_EXE_bcl-bw");

fn lab(file: &str, tag: &str) -> Lab {
    let path: PathBuf = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../configs/lab")
        .join(file);
    Lab::load(&path)
        .unwrap()
        .with_prefix(&format!("t{}-{tag}", std::process::id()))
        .unwrap()
}

/// A `bcl-bw --serve` on `node` and its descriptor; the rest of its
/// output is read by a thread (returned) so that it never blocks.
fn serve(lab: &Lab, node: &str, method: &str) -> (Child, String, std::thread::JoinHandle<String>) {
    let mut server = lab.command(node, BW).unwrap();
    server.args([
        "--method",
        method,
        "--serve",
        "--verify",
        "--congestion",
        "on",
    ]);
    serve_common::spawn_listening(server)
}

/// Streams `iters` windows of 64 × 64 KiB from `node` to `descriptor` with
/// congestion control on; returns the JSON report.
fn stream(lab: &Lab, node: &str, method: &str, descriptor: &str, iters: u32, json: &Path) -> Value {
    let status = lab
        .command(node, BW)
        .unwrap()
        .args(["--method", method, "--verify", "--congestion", "on"])
        .args([
            "--sizes",
            "65536",
            "--iters",
            &iters.to_string(),
            "--warmup",
            "1",
        ])
        .args(["--connect", descriptor, "--json"])
        .arg(json)
        .status()
        .unwrap();
    assert!(status.success(), "{node}: bcl-bw exit {status}");
    serde_json::from_slice(&std::fs::read(json).unwrap()).unwrap()
}

/// Everything arrived once, in order, intact.
fn assert_exactly_once(report: &Value, messages: u64) {
    let v = &report["verify"];
    assert_eq!(v["delivered"], messages, "{v}");
    for k in ["lost", "duplicated", "out_of_order", "corrupted"] {
        assert_eq!(v[k], 0, "{k}: {v}");
    }
}

#[test]
fn a_verified_stream_through_a_shaped_bottleneck_is_controlled() {
    if !require_privileges("a_verified_stream_through_a_shaped_bottleneck") {
        return;
    }
    let lab = lab("bottleneck.toml", "cc-bneck");
    let _guard = LabGuard::new(lab.clone()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (mut server, descriptor, rest) = serve(&lab, "b", "packet");
    let report = stream(
        &lab,
        "a",
        "packet",
        &descriptor,
        4,
        &dir.path().join("a.json"),
    );
    assert!(server.wait().unwrap().success(), "{}", rest.join().unwrap());
    assert_exactly_once(&report, 5 * 64);
    // 20 MiB through a 200 Mbit/s port with a 256 KiB queue: the window
    // (starting at 16 frames, bounded by 128) met the queue and shrank.
    let c = &report["counters"];
    assert!(c["data_frames"].as_u64().unwrap() > 0, "{c}");
    assert!(c["congestion_decreases"].as_u64().unwrap() > 0, "{c}");
}

#[test]
fn two_senders_into_one_receiver_through_a_shaped_switch_arrive_exactly_once() {
    if !require_privileges("two_senders_into_one_receiver_through_a_shaped_switch") {
        return;
    }
    let lab = lab("incast.toml", "cc-incast");
    let _guard = LabGuard::new(lab.clone()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    // One server per sender on r (udp: each its own port).
    let ends: Vec<_> = ["s1", "s2"]
        .iter()
        .map(|s| (*s, serve(&lab, "r", "udp")))
        .collect();
    let senders: Vec<_> = ends
        .iter()
        .map(|(node, (_, descriptor, _))| {
            let (lab, node, descriptor) = (lab.clone(), node.to_string(), descriptor.clone());
            let json = dir.path().join(format!("{node}.json"));
            std::thread::spawn(move || stream(&lab, &node, "udp", &descriptor, 6, &json))
        })
        .collect();
    for s in senders {
        assert_exactly_once(&s.join().unwrap(), 7 * 64);
    }
    for (node, (mut server, _, rest)) in ends {
        assert!(
            server.wait().unwrap().success(),
            "server for {node}: {}",
            rest.join().unwrap()
        );
    }
}
