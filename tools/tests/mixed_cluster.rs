//! The mixed-hardware cluster from one binary: `configs/lab/mixed.toml`
//! (two AF_XDP nodes with one NIC per process and an AF_PACKET-only node
//! on fabric A, a UDP-only node behind a router) with the resource
//! database `configs/mixed.toml`, two processes per node, all started by
//! `bcl-run` from one build of `bcl-alltoall`. Every pair exchanges
//! verified messages of 8 B to 1 MiB; the test checks that every rank ran
//! the same file (by hash) and asserts the method matrix. Then the same job
//! with `BCL_METHODS=udp`, and one with three processes per node (more
//! processes than AF_XDP NICs). Then the same job with the node daemon
//! on (`configs/mixed-bcld.toml`): a1, a2 and p each run `bcld`, which owns
//! the node's fabric-A NIC (AF_XDP on a1 and a2, AF_PACKET on p), and the
//! ranks reach fabric A only through it. Needs root.

mod bcld_common;

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Output of one job: per rank its hash, per (rank, peer) method and
/// reason, per rank the count of messages received, and the notes on
/// methods left out.
#[derive(Default)]
struct Job {
    hashes: HashMap<u32, String>,
    links: HashMap<(u32, u32), (String, String)>,
    received: HashMap<u32, u64>,
    notes: Vec<(u32, String)>,
}

fn run_job(prefix: &str, methods: Option<&str>) -> Job {
    run_program(
        prefix,
        methods,
        2,
        &[
            env!("CARGO_BIN_EXE_bcl-alltoall"),
            "--sizes",
            "8,64,1024,8192,65536,1048576",
            "--timeout",
            "60",
        ],
    )
}

fn run_program(prefix: &str, methods: Option<&str>, per_node: u32, program: &[&str]) -> Job {
    run_on(
        "configs/mixed.toml",
        &[],
        prefix,
        methods,
        per_node,
        None,
        program,
    )
}

/// [`run_program`] with the resource database `cluster`, `env` added to
/// bcl-run's environment, and the ranks run as `user` (`bcl-run --user`).
fn run_on(
    cluster: &str,
    env: &[(&str, &str)],
    prefix: &str,
    methods: Option<&str>,
    per_node: u32,
    user: Option<&str>,
    program: &[&str],
) -> Job {
    let mut c = Command::new(env!("CARGO_BIN_EXE_bcl-run"));
    c.current_dir(root())
        .env("BCL_LAB_PREFIX", prefix)
        .envs(env.iter().copied())
        .args([
            "--lab",
            "configs/lab/mixed.toml",
            "--cluster",
            cluster,
            "--per-node",
            &per_node.to_string(),
            "--timeout",
            "30",
        ])
        .args(user.map(|u| ["--user", u]).iter().flatten())
        .arg("--")
        .args(program);
    match methods {
        Some(m) => c.env("BCL_METHODS", m),
        None => c.env_remove("BCL_METHODS"),
    };
    let out = c.output().expect("run bcl-run");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "bcl-run failed: {}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
    let mut job = Job::default();
    // Notes on methods left out go to the ranks' stderr.
    for line in stderr.lines() {
        let Some((tag, rest)) = line.split_once("] ") else {
            continue;
        };
        if let (Ok(rank), Some(note)) = (
            tag.trim_start_matches('[').parse::<u32>(),
            rest.strip_prefix("note: "),
        ) {
            job.notes.push((rank, note.to_string()));
        }
    }
    for line in stdout.lines() {
        let Some((tag, rest)) = line.split_once("] ") else {
            continue;
        };
        let rank: u32 = tag.trim_start_matches('[').parse().unwrap();
        let Some((kind, json)) = rest.split_once(' ') else {
            continue;
        };
        let v: serde_json::Value = match serde_json::from_str(json) {
            Ok(v) => v,
            Err(_) => continue,
        };
        assert_eq!(v["rank"].as_u64(), Some(u64::from(rank)), "{line}");
        match kind {
            "hash" => {
                job.hashes
                    .insert(rank, v["hash"].as_str().unwrap().to_string());
            }
            "link" => {
                let peer = v["peer"].as_u64().unwrap() as u32;
                job.links.insert(
                    (rank, peer),
                    (
                        v["method"].as_str().unwrap().to_string(),
                        v["reason"].as_str().unwrap().to_string(),
                    ),
                );
            }
            "done" => {
                job.received.insert(rank, v["received"].as_u64().unwrap());
            }
            _ => {}
        }
    }
    job
}

/// With `per` ranks per node, ranks `per*k ..` are on node k: a1, a2, p, u.
fn node(rank: u32, per: u32) -> &'static str {
    ["a1", "a2", "p", "u"][(rank / per) as usize]
}

/// The method of `a -> b` with `per` ranks per node.
fn expected(a: u32, b: u32, per: u32) -> &'static str {
    let (na, nb) = (node(a, per), node(b, per));
    if na == nb {
        return "shm";
    }
    if na == "u" || nb == "u" {
        return "udp";
    }
    // a1 and a2 have two AF_XDP NICs on fabric A, one per process for the
    // first two local ranks: every pair between those uses AF_XDP; every
    // other pair on fabric A AF_PACKET.
    let afxdp = |r: u32| (node(r, per) == "a1" || node(r, per) == "a2") && r % per < 2;
    if afxdp(a) && afxdp(b) {
        "afxdp"
    } else {
        "packet"
    }
}

fn check(job: &Job, pinned_udp: bool) {
    let n = 8u32;
    assert_eq!(job.hashes.len(), n as usize, "every rank reports its hash");
    let first = job.hashes[&0].clone();
    assert!(
        job.hashes.values().all(|h| *h == first),
        "not one binary: {:?}",
        job.hashes
    );
    for r in 0..n {
        assert_eq!(
            job.received.get(&r),
            Some(&(7 * 6)),
            "rank {r} received everything"
        );
        for p in (0..n).filter(|p| *p != r) {
            let (method, reason) = job
                .links
                .get(&(r, p))
                .unwrap_or_else(|| panic!("no link {r}->{p}"));
            let want = if pinned_udp { "udp" } else { expected(r, p, 2) };
            assert_eq!(method, want, "rank {r} -> {p}: {reason}");
        }
    }
    // The reasons say why, from the side that opened the link.
    let (_, why) = &job.links[&(0, 2)];
    if pinned_udp {
        assert!(job
            .links
            .values()
            .any(|(_, r)| r.contains("[pinned by BCL_METHODS=udp]")));
    } else {
        assert!(
            why.contains("same fabric A") || why.contains("the peer chose"),
            "{why}"
        );
        assert!(job
            .links
            .values()
            .any(|(m, r)| m == "udp" && r.contains("routed (IP) from")));
    }
}

#[test]
fn mixed_cluster_all_to_all_with_the_method_matrix_then_all_udp() {
    if !bcl_lab::require_privileges("mixed_cluster_all_to_all_with_the_method_matrix_then_all_udp")
    {
        return;
    }
    let prefix = format!("bl-mx{}", std::process::id() % 100_000);
    let lab = bcl_lab::Lab::load(&root().join("configs/lab/mixed.toml"))
        .unwrap()
        .with_prefix(&prefix)
        .unwrap();
    let _guard = bcl_lab::LabGuard::new(lab).expect("lab up");
    let job = run_job(&prefix, None);
    check(&job, false);
    let job = run_job(&prefix, Some("udp"));
    check(&job, true);
    // bcl-info --job: a running job's links, the same matrix.
    let info = run_program(&prefix, None, 2, &[env!("CARGO_BIN_EXE_bcl-info"), "--job"]);
    assert_eq!(info.links.len(), 56);
    for ((r, p), (m, why)) in &info.links {
        assert_eq!(m, expected(*r, *p, 2), "bcl-info --job: {r} -> {p}: {why}");
    }
    // Three processes per node: a1 and a2 have two AF_XDP NICs, so local
    // rank 2 does not open afxdp (its note says why) and reaches fabric A
    // by packet on to-fa, where local rank 0's XDP program is attached
    // (it passes the cluster layer's packet EtherType to the kernel).
    let job = run_program(
        &prefix,
        None,
        3,
        &[
            env!("CARGO_BIN_EXE_bcl-alltoall"),
            "--sizes",
            "8,65536",
            "--timeout",
            "60",
        ],
    );
    assert_eq!(job.hashes.len(), 12);
    for r in 0..12u32 {
        assert_eq!(job.received.get(&r), Some(&(11 * 2)), "rank {r}");
        for p in (0..12).filter(|p| *p != r) {
            let (m, why) = &job.links[&(r, p)];
            assert_eq!(m, expected(r, p, 3), "3 per node: {r} -> {p}: {why}");
        }
    }
    for r in [2, 5] {
        assert!(
            job.notes.iter().any(|(x, n)| *x == r
                && n.starts_with("afxdp on fabric A: not opened by local rank 2: its 2 NICs (to-fa, to-fa-2) are held by local ranks 0-1")),
            "rank {r}: {:?}",
            job.notes
        );
    }
    // The measuring tools under bcl-run: rank 0 on a1 against rank 1 on a2
    // pick AF_XDP; a2 against u picks UDP.
    for (nodes, method) in [("a1,a2", "afxdp"), ("a2,u", "udp")] {
        let json =
            std::env::temp_dir().join(format!("bcl-mixed-pp-{}-{method}.json", std::process::id()));
        let out = Command::new(env!("CARGO_BIN_EXE_bcl-run"))
            .current_dir(root())
            .env("BCL_LAB_PREFIX", &prefix)
            .env_remove("BCL_METHODS")
            .args([
                "--lab",
                "configs/lab/mixed.toml",
                "--cluster",
                "configs/mixed.toml",
            ])
            .args(["--nodes", nodes, "--", env!("CARGO_BIN_EXE_bcl-pingpong")])
            .args(["--sizes", "8,1024", "--iters", "200", "--warmup", "20"])
            .arg("--json")
            .arg(&json)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
        let _ = std::fs::remove_file(&json);
        assert_eq!(v["method"], method, "{nodes}");
        assert_eq!(v["results"][0]["iters"], 200);
    }
}

#[test]
fn mixed_cluster_all_to_all_through_the_node_daemons() {
    if !bcl_lab::require_privileges("mixed_cluster_all_to_all_through_the_node_daemons") {
        return;
    }
    use bcld_common::{open_dir, public_copy, Daemon, UidWatch};
    let prefix = format!("bl-mxd{}", std::process::id() % 100_000);
    let lab = bcl_lab::Lab::load(&root().join("configs/lab/mixed.toml"))
        .unwrap()
        .with_prefix(&prefix)
        .unwrap();
    let _guard = bcl_lab::LabGuard::new(lab.clone()).expect("lab up");
    let dir = open_dir();
    let cluster = root().join("configs/mixed-bcld.toml");
    // Each daemon finds its node and NIC in the resource database.
    let daemons: Vec<Daemon> = ["a1", "a2", "p"]
        .iter()
        .map(|n| Daemon::from_cluster(&lab, n, &cluster, dir.path()))
        .collect();
    let nics: Vec<String> = daemons.iter().map(|d| d.status().nics[0].clone()).collect();
    assert!(
        nics[0].starts_with("afxdp:") && nics[1].starts_with("afxdp:"),
        "{nics:?}"
    );
    assert!(nics[2].starts_with("packet:"), "{nics:?}");
    let socket = dir.path().join("bcld-%n.sock");
    // The ranks run unprivileged (uid 65534), as a cluster's users do: on
    // a1, a2 and p they reach the NIC only through the daemon.
    let alltoall = public_copy(env!("CARGO_BIN_EXE_bcl-alltoall"), dir.path());
    let watch = UidWatch::start(daemons.iter().map(|d| d.socket.clone()).collect());
    let job = run_on(
        "configs/mixed-bcld.toml",
        &[("BCL_BCLD_SOCKET", socket.to_str().unwrap())],
        &prefix,
        None,
        2,
        Some("65534"),
        &[
            alltoall.to_str().unwrap(),
            "--sizes",
            "8,64,1024,8192,65536,1048576",
            "--timeout",
            "60",
        ],
    );
    let seen = watch.stop();
    assert!(!seen.is_empty(), "no client seen while the job ran");
    assert!(
        seen.iter().all(|&uid| uid == 65534),
        "clients of uids {seen:?}"
    );
    assert_eq!(job.hashes.len(), 8, "every rank reports its hash");
    for r in 0..8u32 {
        assert_eq!(job.received.get(&r), Some(&(7 * 6)), "rank {r}");
        for p in (0..8).filter(|p| *p != r) {
            let (m, why) = &job.links[&(r, p)];
            let want = match (node(r, 2), node(p, 2)) {
                (a, b) if a == b => "shm",
                ("u", _) | (_, "u") => "udp",
                _ => "bcld",
            };
            assert_eq!(m, want, "{r} -> {p}: {why}");
        }
    }
    // Both ranks of a node went through its one daemon, which refused
    // nothing and let them go at the end.
    for (d, n) in daemons.iter().zip(["a1", "a2", "p"]) {
        let s = d.status();
        assert!(s.clients.is_empty(), "{n}: {s:?}");
        let count = |k: &str| s.counters.iter().find(|(x, _)| x == k).map_or(0, |c| c.1);
        assert_eq!(count("clients_left"), 2, "{n}: {s:?}");
        assert!(count("rx_delivered") > 0, "{n}: {s:?}");
        assert!(
            !s.counters
                .iter()
                .any(|(k, v)| k.starts_with("refused") && *v > 0),
            "{n}: {s:?}"
        );
    }
}
