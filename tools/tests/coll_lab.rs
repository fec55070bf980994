//! The collectives over a real mixed job: `bcl-run` starts two ranks on
//! each of two lab nodes (network namespaces joined by a veth pair), so
//! ranks on one node talk over shared memory and ranks on different nodes
//! over AF_PACKET; every rank runs `bcl-coll --check` (every collective,
//! sizes 0 B to 320 KB, on the world, a duplicate and a split
//! communicator, results checked bit for bit). Needs root; fails loudly
//! without it unless BCL_SKIP_PRIVILEGED=1.

use bcl_lab::require_privileges;
use std::path::PathBuf;
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

#[test]
fn every_collective_is_right_over_shared_memory_and_packet() {
    if !require_privileges("every_collective_is_right_over_shared_memory_and_packet") {
        return;
    }
    let out = Command::new(env!("CARGO_BIN_EXE_bcl-run"))
        .current_dir(root())
        .env("BCL_LAB_PREFIX", format!("t{}-coll", std::process::id()))
        .env("BCL_METHODS", "shm,packet")
        .args([
            "--lab",
            "configs/lab/pair.toml",
            "--nodes",
            "a,b",
            "--per-node",
            "2",
            "--timeout",
            "60",
            "--",
            env!("CARGO_BIN_EXE_bcl-coll"),
            "--check",
            "--blocking",
        ])
        .output()
        .expect("run bcl-run");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "bcl-run failed: {}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
    let mut ranks = Vec::new();
    for line in stdout.lines() {
        let Some((tag, rest)) = line.split_once("] check ") else {
            continue;
        };
        let v: serde_json::Value = serde_json::from_str(rest).unwrap();
        let rank: u64 = tag.trim_start_matches('[').parse().unwrap();
        assert_eq!(v["rank"].as_u64(), Some(rank));
        // 11 collectives × 4 lengths × 2 roots, plus 7 overlapping, on
        // 3 communicators.
        assert_eq!(v["calls"].as_u64(), Some(285), "{line}");
        let methods: Vec<&str> = v["methods"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m.as_str().unwrap())
            .collect();
        assert_eq!(methods, ["packet", "shm"], "rank {rank}'s links: {line}");
        // The world and its duplicate go through boards inside the nodes
        // and leaders between them; the even/odd halves have one rank per
        // node, so no hierarchy.
        assert_eq!(v["hierarchies"].as_u64(), Some(2), "{line}");
        ranks.push(rank);
    }
    ranks.sort();
    assert_eq!(
        ranks,
        [0, 1, 2, 3],
        "every rank checked:\n{stdout}\n{stderr}"
    );
}
