//! `bcl-info`: the probe table, and the method matrix of a cluster file
//! computed by the endpoints' own policy code (pins included).

use std::path::PathBuf;
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn info(args: &[&str], methods: Option<&str>) -> (bool, serde_json::Value, String) {
    let mut c = Command::new(env!("CARGO_BIN_EXE_bcl-info"));
    c.current_dir(root()).args(args).env_remove("BCL_NODE");
    match methods {
        Some(m) => c.env("BCL_METHODS", m),
        None => c.env_remove("BCL_METHODS"),
    };
    let out = c.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let v = serde_json::from_str(&stdout).unwrap_or(serde_json::Value::Null);
    (
        out.status.success(),
        v,
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

fn method(v: &serde_json::Value, from: &str, to: &str) -> (String, String) {
    let x = v["matrix"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["from"] == from && x["to"] == to)
        .unwrap_or_else(|| panic!("no pair {from} -> {to}"));
    (
        x["method"].as_str().unwrap().to_string(),
        x["reason"].as_str().unwrap().to_string(),
    )
}

#[test]
fn the_mixed_clusters_matrix_follows_the_policy() {
    let (ok, v, err) = info(
        &[
            "--cluster",
            "configs/mixed.toml",
            "--per-node",
            "2",
            "--json",
        ],
        None,
    );
    assert!(ok, "{err}");
    let names: Vec<String> = ["a1", "a2", "p", "u"]
        .iter()
        .flat_map(|n| (0..2).map(move |l| format!("{n}/{l}")))
        .collect();
    assert_eq!(v["matrix"].as_array().unwrap().len(), 56);
    for a in &names {
        for b in names.iter().filter(|b| *b != a) {
            let (na, nb) = (a.split('/').next().unwrap(), b.split('/').next().unwrap());
            // a1 and a2 have one AF_XDP NIC per process.
            let holds_xdp = |r: &str| r.starts_with("a1/") || r.starts_with("a2/");
            let want = if na == nb {
                "shm"
            } else if na == "u" || nb == "u" {
                "udp"
            } else if holds_xdp(a) && holds_xdp(b) {
                "afxdp"
            } else {
                "packet"
            };
            let (m, why) = method(&v, a, b);
            assert_eq!(m, want, "{a} -> {b}: {why}");
        }
    }
    // A third process per node finds both AF_XDP NICs of a1 taken.
    let (ok, v3, err) = info(
        &[
            "--cluster",
            "configs/mixed.toml",
            "--per-node",
            "3",
            "--json",
        ],
        None,
    );
    assert!(ok, "{err}");
    assert_eq!(method(&v3, "a1/1", "a2/1").0, "afxdp");
    let (m, why) = method(&v3, "a1/2", "a2/0");
    assert_eq!(m, "packet", "{why}");
    assert!(why.contains("afxdp: not open here"), "{why}");
    let (_, why) = method(&v, "a1/0", "u/0");
    assert!(why.contains("routed (IP) from A to B"), "{why}");
    assert!(why.contains("packet: the peer does not offer it"), "{why}");
    let methods: Vec<&str> = v["methods"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["method"].as_str().unwrap())
        .collect();
    assert_eq!(
        methods,
        ["shm", "bcld", "vfio", "afxdp", "packet", "udp", "sim"]
    );
    assert!(v["nics"]
        .as_array()
        .unwrap()
        .iter()
        .any(|n| n["name"] == "lo" && n["excluded"] == "loopback"));
}

#[test]
fn pins_change_the_matrix_and_say_so() {
    let (ok, v, err) = info(
        &[
            "--cluster",
            "configs/mixed.toml",
            "--per-node",
            "2",
            "--json",
        ],
        Some("udp"),
    );
    assert!(ok, "{err}");
    assert!(v["matrix"]
        .as_array()
        .unwrap()
        .iter()
        .all(|x| x["method"] == "udp"));
    assert_eq!(v["pin"], "BCL_METHODS=udp");
    let (ok, v, err) = info(
        &["--cluster", "configs/mixed.toml", "--json"],
        Some("afxdp,packet"),
    );
    assert!(ok, "{err}");
    assert_eq!(method(&v, "a1/0", "a2/0").0, "afxdp");
    assert_eq!(method(&v, "a1/0", "p/0").0, "packet");
    let (m, why) = method(&v, "a1/0", "u/0");
    assert_eq!(m, "none");
    assert!(
        why.contains("restricted by BCL_METHODS=afxdp,packet"),
        "{why}"
    );
    let (ok, _, err) = info(&["--json"], Some("tcp"));
    assert!(!ok);
    assert!(
        err.contains("BCL_METHODS=tcp: unknown method \"tcp\""),
        "{err}"
    );
}

#[test]
fn a_bad_cluster_file_names_file_line_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("bad.toml");
    std::fs::write(
        &f,
        "[[fabric]]\nname = \"A\"\n\n[[node]]\nname = \"n\"\n[[node.nic]]\nfabric = \"Z\"\n",
    )
    .unwrap();
    let (ok, _, err) = info(&["--cluster", f.to_str().unwrap()], None);
    assert!(!ok);
    assert!(
        err.contains("bad.toml:7: node.nic.fabric: node \"n\": fabric \"Z\" is not defined"),
        "{err}"
    );
}

fn coll_table(env: &[(&str, &str)]) -> (bool, String, String) {
    let mut c = Command::new(env!("CARGO_BIN_EXE_bcl-info"));
    c.current_dir(root())
        .args(["--coll", "--per-node", "4"])
        .env_remove("BCL_COLL_ALG")
        .env_remove("BCL_COLL_MODEL")
        .env_remove("BCL_COLL_DETERMINISTIC");
    for (k, v) in env {
        c.env(k, v);
    }
    let out = c.output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).to_string(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

#[test]
fn coll_prints_a_choice_for_every_collective() {
    let (ok, out, err) = coll_table(&[]);
    assert!(ok, "{err}");
    for c in bcl::coll::alg::Collective::ALL {
        assert!(
            out.lines().any(|l| l.starts_with(c.name())),
            "no row for {}:\n{out}",
            c.name()
        );
    }
    // Deterministic by default: the ring allreduce is never chosen.
    assert!(out.contains("deterministic reductions"));
    assert!(!out
        .lines()
        .any(|l| l.starts_with("allreduce") && l.contains(" ring ")));
}

#[test]
fn coll_reads_overrides_and_model_and_names_bad_ones() {
    let (ok, out, err) = coll_table(&[("BCL_COLL_ALG", "allreduce:ring")]);
    assert!(ok, "{err}");
    assert!(out.contains("BCL_COLL_ALG: allreduce runs ring"), "{out}");

    let (ok, _, err) = coll_table(&[("BCL_COLL_ALG", "allreduce:bruck")]);
    assert!(!ok);
    assert!(err.contains("bruck does not implement allreduce"), "{err}");
    assert!(
        err.contains("recursive_doubling"),
        "the valid names are listed: {err}"
    );

    let dir = std::env::temp_dir().join(format!("bcl-info-coll-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let model = dir.join("model.toml");
    std::fs::write(
        &model,
        "[coll.loggp.inter]\nl_us = 5.0\no_s_us = 1.0\no_r_us = 1.0\ng_us = 2.0\nbig_g_ns_per_byte = 0.5\n",
    )
    .unwrap();
    let (ok, out, err) = coll_table(&[("BCL_COLL_MODEL", model.to_str().unwrap())]);
    assert!(ok, "{err}");
    assert!(out.contains("inter-node LogGP: L 5.000 µs"), "{out}");
    std::fs::write(&model, "[coll.loggp.inter]\nl_us = \"fast\"\n").unwrap();
    let (ok, _, err) = coll_table(&[("BCL_COLL_MODEL", model.to_str().unwrap())]);
    assert!(!ok);
    assert!(
        err.contains("model.toml") && err.contains("coll.loggp.inter"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).ok();
}
