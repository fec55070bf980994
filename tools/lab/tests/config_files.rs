//! Topology files: every shipped config loads, and bad files give errors that
//! name the file, the line and the field. No privileges needed.

use std::path::{Path, PathBuf};

use bcl_lab::{Lab, LabError};

fn configs() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../configs/lab")
}

#[test]
fn shipped_configs_load() {
    let expect: &[(&str, &[&str], u32)] = &[
        ("pair.toml", &["a", "b"], 1),
        ("pair-2q.toml", &["a", "b"], 2),
        ("switched4.toml", &["n1", "n2", "n3", "n4"], 1),
        ("lossy-pair.toml", &["a", "b"], 1),
        ("routed.toml", &["a", "r", "b"], 1),
        ("pair-bridged.toml", &["a", "b"], 1),
        ("pair-default.toml", &["a", "b"], 0),
        ("bottleneck.toml", &["a", "b"], 1),
        ("incast.toml", &["s1", "s2", "s3", "s4", "p", "r"], 1),
        ("rails2.toml", &["a", "b"], 1),
        ("rails4.toml", &["a", "b"], 1),
        ("rails-impaired.toml", &["a", "b"], 1),
        ("rails4-shaped.toml", &["a", "b"], 1),
    ];
    for (file, nodes, queues) in expect {
        let lab = Lab::load(&configs().join(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
        assert_eq!(
            lab.nodes(),
            nodes.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
            "{file}"
        );
        for n in *nodes {
            let ifs = lab.interfaces(n).unwrap();
            assert!(!ifs.is_empty(), "{file}: {n} has interfaces");
            for i in ifs {
                assert!(i.ifname.len() <= bcl_lab::IFNAME_MAX);
                assert_eq!(i.queues, *queues, "{file}");
                assert!(i.ipv4.is_some());
            }
            assert!(lab
                .netns(n)
                .unwrap()
                .starts_with(&format!("{}.", lab.prefix())));
        }
    }
    let pair = Lab::load(&configs().join("pair.toml")).unwrap();
    let a = &pair.interfaces("a").unwrap()[0];
    assert_eq!(a.ifname, "to-b");
    assert_eq!(a.ipv4.unwrap().to_string(), "10.77.1.1/24");
    assert_eq!(
        pair.interfaces("b").unwrap()[0].ipv4.unwrap().to_string(),
        "10.77.1.2/24"
    );
    let q2 = Lab::load(&configs().join("pair-2q.toml")).unwrap();
    assert_eq!(q2.interfaces("b").unwrap()[0].mac, "02:00:00:00:02:02");
    let lossy = Lab::load(&configs().join("lossy-pair.toml")).unwrap();
    assert_eq!(lossy.impaired_links(), vec!["a-b".to_string()]);
    let r = lossy.report();
    let imp = r.links[0].impair.as_ref().unwrap();
    assert_eq!(
        (
            imp.forward.loss,
            imp.forward.reorder,
            imp.forward.duplicate,
            imp.forward.corrupt
        ),
        (0.1, 0.25, 0.05, 0.01)
    );
    assert_eq!(imp.forward, imp.reverse);
    let routed = Lab::load(&configs().join("routed.toml")).unwrap();
    let rep = routed.report();
    assert!(rep.nodes.iter().any(|n| n.router));
    assert_eq!(rep.nodes[0].routes[0].dest, "10.77.6.0/24");
    // The shaped switches: every port gets this token bucket.
    for (file, rate, ports) in [
        ("bottleneck.toml", 200_000_000, 2),
        ("incast.toml", 1_000_000_000, 6),
    ] {
        let rep = Lab::load(&configs().join(file)).unwrap().report();
        let sw = &rep.switches[0];
        assert_eq!(
            sw.shape,
            Some(bcl_lab::SwitchShape {
                rate_bps: rate,
                burst_bytes: 16384,
                limit_bytes: 262144
            }),
            "{file}"
        );
        assert_eq!(sw.ports.len(), ports, "{file}");
    }
    let incast = Lab::load(&configs().join("incast.toml")).unwrap();
    assert_eq!(address(&incast, "r", "sw"), "10.77.11.6/24");
}

#[test]
fn every_shipped_config_loads() {
    for e in std::fs::read_dir(configs()).unwrap() {
        let path = e.unwrap().path();
        if path.extension().is_some_and(|x| x == "toml") {
            Lab::load(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        }
    }
}

#[test]
fn shape_errors_name_the_file_line_and_field() {
    let src = |shape: &str| {
        format!("[[node]]\nname = \"a\"\n[[node]]\nname = \"b\"\n[[switch]]\nname = \"sw\"\nmembers = [\"a\", \"b\"]\n[switch.shape]\n{shape}")
    };
    let (e, p) = load_err("shape-rate.toml", &src("rate = \"200mbps\"\n"));
    assert!(
        e.starts_with(&format!("{p}:9: switch \"sw\": shape.rate: "))
            && e.contains("bytes per second"),
        "{e}"
    );
    let (e, p) = load_err(
        "shape-burst.toml",
        &src("rate = \"1gbit\"\nburst = \"1kb\"\n"),
    );
    assert!(
        e.starts_with(&format!(
            "{p}:10: switch \"sw\": shape.burst = 1024 bytes is less than one frame"
        )),
        "{e}"
    );
}

/// Writes `src` to a temp file, loads it and returns what loading gave and
/// the path. The file and its directory (one per file name: tests run in
/// parallel) are removed afterwards.
fn load_src(name: &str, src: &str) -> (Result<Lab, LabError>, String) {
    let dir = std::env::temp_dir().join(format!("bcl-lab-cfg-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, src).unwrap();
    let loaded = Lab::load(&path);
    std::fs::remove_file(&path).unwrap();
    std::fs::remove_dir(&dir).unwrap();
    (loaded, path.display().to_string())
}

/// Loads `src` from a temp file (see [`load_src`]) and returns the load
/// error's text and the path.
fn load_err(name: &str, src: &str) -> (String, String) {
    let (loaded, path) = load_src(name, src);
    (loaded.expect_err("must be rejected").to_string(), path)
}

/// Loads `src` from a temp file (see [`load_src`]), which must load.
fn load_ok(name: &str, src: &str) -> Lab {
    let (loaded, path) = load_src(name, src);
    loaded.unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The address of `node`'s interface towards `peer`.
fn address(lab: &Lab, node: &str, peer: &str) -> String {
    let ifs = lab.interfaces(node).unwrap();
    let i = ifs.iter().find(|i| i.peer == peer).expect("interface");
    i.ipv4.unwrap().to_string()
}

const PAIR: &str = "[[node]]\nname = \"a\"\n[[node]]\nname = \"b\"\n[[link]]\nname = \"a-b\"\nendpoints = [\"a\", \"b\"]\n";

/// Three nodes in a row: two segments, a-b and b-c.
const CHAIN: &str = "[[node]]\nname = \"a\"\n[[node]]\nname = \"b\"\n[[node]]\nname = \"c\"\n[[link]]\nendpoints = [\"a\", \"b\"]\n[[link]]\nendpoints = [\"b\", \"c\"]\n";

#[test]
fn a_slash_24_pool_gives_its_one_slash_24() {
    let lab = load_ok(
        "pool24.toml",
        &format!("subnet_pool = \"10.9.0.0/24\"\n{PAIR}"),
    );
    assert_eq!(address(&lab, "a", "b"), "10.9.0.1/24");
    assert_eq!(address(&lab, "b", "a"), "10.9.0.2/24");
    // A second segment finds no /24 left: the error names the field, the
    // segment and the file.
    let (e, p) = load_err(
        "pool24-full.toml",
        &format!("subnet_pool = \"10.9.0.0/24\"\n{CHAIN}"),
    );
    assert_eq!(
        e,
        format!("{p}: subnet_pool 10.9.0.0/24 has no /24 left for \"b-c\"")
    );
    // A larger pool gives its second /24 first and its first one last.
    let lab = load_ok(
        "pool23.toml",
        &format!("subnet_pool = \"10.9.0.0/23\"\n{CHAIN}"),
    );
    assert_eq!(address(&lab, "a", "b"), "10.9.1.1/24");
    assert_eq!(address(&lab, "c", "b"), "10.9.0.2/24");
}

#[test]
fn a_pool_at_the_top_of_the_address_space_loads() {
    let lab = load_ok(
        "pool-top24.toml",
        &format!("subnet_pool = \"255.255.255.0/24\"\n{PAIR}"),
    );
    assert_eq!(address(&lab, "a", "b"), "255.255.255.1/24");
    assert_eq!(address(&lab, "b", "a"), "255.255.255.2/24");
    let lab = load_ok(
        "pool-top23.toml",
        &format!("subnet_pool = \"255.255.254.0/23\"\n{CHAIN}"),
    );
    assert_eq!(address(&lab, "a", "b"), "255.255.255.1/24");
    assert_eq!(address(&lab, "c", "b"), "255.255.254.2/24");
    let (e, p) = load_err(
        "pool-top-full.toml",
        &format!("subnet_pool = \"255.255.255.0/24\"\n{CHAIN}"),
    );
    assert_eq!(
        e,
        format!("{p}: subnet_pool 255.255.255.0/24 has no /24 left for \"b-c\"")
    );
}

#[test]
fn derived_macs_step_past_every_mac_given_in_the_file() {
    // b's interface on a-b would derive 02:bc:00:01:00:02 and, taken, its
    // 0x80 neighbour; a takes both explicitly, so b gets the next free one.
    let src = "[[node]]\nname = \"a\"\n[[node.iface]]\non = \"a-b\"\nmac = \"02:bc:00:01:00:02\"\n[[node.iface]]\non = \"a-c\"\nmac = \"02:bc:00:01:80:02\"\n[[node]]\nname = \"b\"\n[[node]]\nname = \"c\"\n[[link]]\nname = \"a-b\"\nendpoints = [\"a\", \"b\"]\n[[link]]\nname = \"a-c\"\nendpoints = [\"a\", \"c\"]\n";
    let lab = load_ok("macs.toml", src);
    let mac_of = |node: &str, peer: &str| {
        let ifs = lab.interfaces(node).unwrap();
        ifs.iter().find(|i| i.peer == peer).unwrap().mac.clone()
    };
    assert_eq!(mac_of("a", "b"), "02:bc:00:01:00:02");
    assert_eq!(mac_of("a", "c"), "02:bc:00:01:80:02");
    assert_eq!(mac_of("b", "a"), "02:bc:00:01:01:02");
}

#[test]
fn unknown_field() {
    let (e, p) = load_err("unknown.toml", &format!("{PAIR}queuez = 2\n"));
    assert!(e.starts_with(&format!("{p}:8: ")), "{e}");
    assert!(e.contains("queuez"), "{e}");
}

#[test]
fn undefined_node_in_link() {
    let src = "[[node]]\nname = \"a\"\n[[node]]\nname = \"b\"\n\n[[link]]\nname = \"a-b\"\nendpoints = [\"a\", \"c\"]\n";
    let (e, p) = load_err("undefined.toml", src);
    assert_eq!(e, format!("{p}:8: link \"a-b\": node \"c\" is not defined"));
}

#[test]
fn duplicate_node() {
    let (e, p) = load_err("dup.toml", &format!("{PAIR}[[node]]\nname = \"b\"\n"));
    assert!(
        e.starts_with(&format!("{p}:9: ")) && e.contains("node \"b\"") && e.contains("duplicate"),
        "{e}"
    );
}

#[test]
fn bad_duration() {
    let (e, p) = load_err(
        "dur.toml",
        &format!("{PAIR}[link.impair]\ndelay = \"50 microseconds\"\n"),
    );
    assert!(e.starts_with(&format!("{p}:9: ")), "{e}");
    assert!(
        e.contains("link \"a-b\"") && e.contains("impair.delay") && e.contains("bad duration"),
        "{e}"
    );
}

#[test]
fn probability_above_one() {
    let (e, p) = load_err(
        "prob.toml",
        &format!("{PAIR}[link.impair]\nseed = 1\n[link.impair.forward]\nloss = 1.5\n"),
    );
    assert!(e.starts_with(&format!("{p}:11: ")), "{e}");
    assert!(
        e.contains("impair.forward.loss") && e.contains("probability"),
        "{e}"
    );
}

#[test]
fn interface_name_too_long() {
    let src = format!("{PAIR}[[node.iface]]\non = \"a-b\"\nifname = \"sixteen-chars-xx\"\n");
    let (e, p) = load_err("ifname.toml", &src);
    assert!(e.starts_with(&format!("{p}:10: ")), "{e}");
    assert!(e.contains("ifname") && e.contains("IFNAMSIZ"), "{e}");
}

#[test]
fn garbage_and_missing_files_are_errors_not_panics() {
    for (i, src) in [
        "\u{0}\u{1}",
        "[[node]",
        "node = []",
        "[[link]]\nendpoints = [1, 2]",
        "mtu = 9999999",
    ]
    .iter()
    .enumerate()
    {
        let (e, p) = load_err(&format!("garbage{i}.toml"), src);
        assert!(e.starts_with(&p), "{e}");
    }
    let e = Lab::load(Path::new("/nonexistent/lab.toml"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("/nonexistent/lab.toml"), "{e}");
}
