//! A node daemon with two NICs, in the two-rail lab (configs/lab/rails2.toml:
//! nodes a and b joined by two veth pairs):
//!
//! - a job with rails on (configs/rails2-bcld.toml), its ranks unprivileged,
//!   goes through both NICs of each daemon, one connection per NIC, and its
//!   verified stream arrives exactly once, striped over both;
//! - one process address is one process: a second connection of it through
//!   another NIC is accepted from the same process and refused from another
//!   one, and a NIC the daemon does not own is refused by name;
//! - a NIC taken down under the daemons mid-stream (shaped rails lab) is
//!   left by the clients' rails, which see no error from the daemon, only
//!   frames that go unanswered, and used again when it returns.
//!
//! Needs root; fails loudly without it unless BCL_SKIP_PRIVILEGED=1.

mod bcld_common;
mod rails_common;
mod serve_common;

use bcl::core::method::{Method, OpenSpec};
use bcl::shm::engine::EngineMethod;
use bcl::{JobKey, ProcessAddr};
use bcl_lab::{require_privileges, Lab, LabGuard};
use bcld_common::{open_dir, public_copy, Daemon};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The two-rail lab under a prefix of this test (down again on drop).
fn lab_up(tag: &str) -> (Lab, LabGuard, String) {
    lab_of("rails2.toml", tag)
}

/// The lab `file` under a prefix of this test (down again on drop).
fn lab_of(file: &str, tag: &str) -> (Lab, LabGuard, String) {
    let prefix = format!("t{}-{tag}", std::process::id() % 100_000);
    let lab = Lab::load(&root().join("configs/lab").join(file))
        .unwrap()
        .with_prefix(&prefix)
        .unwrap();
    let guard = LabGuard::new(lab.clone()).unwrap();
    (lab, guard, prefix)
}

/// The counters of `d` by name (0 for one never counted).
fn counter(d: &Daemon, name: &str) -> u64 {
    d.counter(name)
}

#[test]
fn a_job_with_rails_goes_through_every_nic_of_its_daemon() {
    if !require_privileges("a_job_with_rails_goes_through_every_nic_of_its_daemon") {
        return;
    }
    let (lab, _guard, prefix) = lab_up("bdr");
    let dir = open_dir();
    let cluster = root().join("configs/rails2-bcld.toml");
    let daemons: Vec<Daemon> = ["a", "b"]
        .iter()
        .map(|n| Daemon::from_cluster(&lab, n, &cluster, dir.path()))
        .collect();
    for d in &daemons {
        let s = d.status();
        assert_eq!(
            s.nic_names,
            ["to-r0", "to-r1"],
            "both NICs allow bcld: {s:?}"
        );
        assert!(s.nics.iter().all(|n| n.starts_with("packet:")), "{s:?}");
    }
    let bw = public_copy(env!("CARGO_BIN_EXE_bcl-bw"), dir.path());
    let json = dir.path().join("bw.json");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_bcl-run"))
        .current_dir(root())
        .env("BCL_LAB_PREFIX", &prefix)
        .env("BCL_BCLD_SOCKET", dir.path().join("bcld-%n.sock"))
        .env_remove("BCL_METHODS")
        .env_remove("BCL_RAILS")
        .args([
            "--lab",
            "configs/lab/rails2.toml",
            "--cluster",
            "configs/rails2-bcld.toml",
            "--per-node",
            "1",
            "--user",
            "65534",
            "--timeout",
            "60",
            "--",
        ])
        .arg(&bw)
        .args([
            "--sizes", "64K", "--iters", "30", "--warmup", "2", "--verify", "--json",
        ])
        .arg(&json)
        .output()
        .unwrap();
    let log = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "bcl-run exit {}: {log}", out.status);
    let report: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let v = &report["verify"];
    assert_eq!(v["delivered"], 32 * 64, "{v}");
    for k in ["lost", "duplicated", "out_of_order", "corrupted"] {
        assert_eq!(v[k], 0, "{k}: {v}");
    }
    // Two rails, both through the daemon, each carrying a fair part.
    let rails = report["rails"].as_array().expect("rails in the report");
    assert_eq!(rails.len(), 2, "{report}");
    let bytes: Vec<u64> = rails
        .iter()
        .map(|r| {
            assert_eq!(r["method"], "bcld", "{report}");
            r["bytes_delivered"].as_u64().unwrap()
        })
        .collect();
    let total: u64 = bytes.iter().sum();
    assert!(
        bytes.iter().all(|b| b * 8 > total),
        "rails carried {bytes:?}: {report}"
    );
    // Each daemon sent on both of its NICs, refused nothing, and let
    // both connections of its rank go.
    for (d, n) in daemons.iter().zip(["a", "b"]) {
        let s = d.status();
        assert!(counter(d, "nic0_tx_frames") > 100, "{n}: {s:?}");
        assert!(counter(d, "nic1_tx_frames") > 100, "{n}: {s:?}");
        assert_eq!(counter(d, "clients_left"), 2, "{n}: {s:?}");
        assert!(
            !s.counters
                .iter()
                .any(|(k, v)| k.starts_with("refused") && *v > 0),
            "{n}: {s:?}"
        );
    }
}

#[test]
fn a_process_address_is_one_process_on_every_nic_of_the_daemon() {
    if !require_privileges("a_process_address_is_one_process_on_every_nic_of_the_daemon") {
        return;
    }
    let (lab, _guard, _) = lab_up("bdn");
    let dir = open_dir();
    let args: Vec<String> = ["--node", "2", "--nic", "to-r0", "--nic", "to-r1"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let daemon = Daemon::start(&lab, "b", &args, dir.path().join("b.sock"));
    // The tools' job and the address `bcl-pingpong --serve --port 3`
    // takes (port 3: the other tests' tools take port 0, and their rings
    // share /dev/shm with these).
    let job = JobKey(0xbc1_7001);
    let me = ProcessAddr::new(2, 3);
    let spec_at = |at: ProcessAddr, nic: Option<&str>| {
        let mut s = OpenSpec::new(job, at);
        s.nic = nic.map(str::to_string);
        s
    };
    let spec = |nic: Option<&str>| spec_at(me, nic);
    let first = EngineMethod::connect(&daemon.socket, &spec(None), "").unwrap();
    let second = EngineMethod::connect(&daemon.socket, &spec(Some("to-r1")), "").unwrap();
    assert_ne!(
        first.descriptor(),
        second.descriptor(),
        "the first NIC unnamed, then the second by name"
    );
    assert_eq!(daemon.status().clients.len(), 2);
    // The same NIC twice: refused, even from the same process.
    let again = EngineMethod::connect(&daemon.socket, &spec(Some("to-r0")), "")
        .expect_err("a second connection through NIC 0");
    assert!(again.to_string().contains("on NIC 0"), "{again}");
    // A NIC the daemon does not own: refused, naming the ones it does.
    let other_port = spec_at(ProcessAddr::new(2, 5), Some("eth9"));
    let unknown =
        EngineMethod::connect(&daemon.socket, &other_port, "").expect_err("an unknown NIC");
    let text = unknown.to_string();
    assert!(
        text.contains("owns no NIC \"eth9\"") && text.contains("to-r1="),
        "{text}"
    );
    drop(second);
    let until = Instant::now() + Duration::from_secs(10);
    while daemon.status().clients.len() != 1 {
        assert!(Instant::now() < until, "{:?}", daemon.status());
        std::thread::sleep(Duration::from_millis(50));
    }
    // Another process may not take this address through the free NIC (a
    // server that got it would wait for a client: `timeout` ends it).
    let out = lab
        .command("b", "timeout")
        .unwrap()
        .arg("20")
        .arg(env!("CARGO_BIN_EXE_bcl-pingpong"))
        .env("BCL_BCLD_SOCKET", &daemon.socket)
        .args([
            "--method", "bcld", "--ifname", "to-r1", "--serve", "--port", "3",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains(&format!("is taken by pid {}", std::process::id())),
        "{err}"
    );
    drop(first);
}

#[test]
fn a_nic_taken_down_under_the_daemons_is_left_by_the_rails_and_used_again() {
    if !require_privileges("a_nic_taken_down_under_the_daemons_is_left_by_the_rails") {
        return;
    }
    // Shaped rails (100 Mbit/s each): the stream takes seconds whatever the
    // host's speed, and each rail's part is set by its link.
    let (lab, _guard, _) = lab_of("rails4-shaped.toml", "bdd");
    let dir = open_dir();
    let nics: Vec<String> = ["--nic", "to-r0", "--nic", "to-r1"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let daemon = |ns: &str, node: u32| {
        let mut args = vec!["--node".to_string(), node.to_string()];
        args.extend(nics.iter().cloned());
        Daemon::start(&lab, ns, &args, dir.path().join(format!("{ns}.sock")))
    };
    let (a, b) = (daemon("a", 1), daemon("b", 2));
    let (report, took) = rails_common::stream_through_an_outage(
        &lab,
        "bcld",
        Some((&a.socket, &b.socket)),
        &dir.path().join("bw.json"),
    );
    rails_common::assert_rail_left_and_used_again(&report, took);
    // The daemon saw no error (AF_PACKET sends on a downed veth vanish
    // without one): the rails left the NIC on silence alone, and both of
    // the daemon's NICs carried the stream.
    let s = a.status();
    assert_eq!(counter(&a, "nic_tx_errors"), 0, "{s:?}");
    assert!(counter(&a, "nic1_tx_frames") > 1000, "{s:?}");
}
