//! Labs on the real kernel: namespaces, veth, bridges, routers, the
//! impairment bridge, and cleanup. Need root; they fail loudly without it
//! unless BCL_SKIP_PRIVILEGED=1. Every test uses its own prefix
//! (`t<pid>-<name>`), so they run in parallel and never meet another run.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bcl_lab::{require_privileges, ImpairCounters, Lab, LabError, LabGuard};
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_bcl-lab");

fn config(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../configs/lab")
        .join(file)
}

fn prefix(tag: &str) -> String {
    format!("t{}-{tag}", std::process::id())
}

fn lab(file: &str, tag: &str) -> Lab {
    Lab::load(&config(file))
        .unwrap()
        .with_prefix(&prefix(tag))
        .unwrap()
        .with_bridge_binary(Path::new(BIN))
}

fn guard(file: &str, tag: &str) -> LabGuard {
    LabGuard::new(lab(file, tag)).unwrap_or_else(|e| panic!("up {file}: {e}"))
}

fn ip_json(args: &[&str]) -> Value {
    let out = Command::new("ip").arg("-j").args(args).output().unwrap();
    assert!(
        out.status.success(),
        "ip -j {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn netns_with_prefix(p: &str) -> Vec<String> {
    let out = Command::new("ip").args(["netns", "list"]).output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| n.starts_with(&format!("{p}.")))
        .map(String::from)
        .collect()
}

fn bridges_with_prefix(p: &str) -> Vec<u32> {
    let mut v = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(raw) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
            continue;
        };
        let argv: Vec<String> = raw
            .split(|b| *b == 0)
            .map(|s| String::from_utf8_lossy(s).into_owned())
            .collect();
        if argv.len() > 3
            && argv[1] == "impair"
            && argv.windows(2).any(|w| w[0] == "--prefix" && w[1] == p)
        {
            v.push(pid);
        }
    }
    v
}

/// A UDP receiver started in `node`, bound to `addr`.
struct Receiver {
    child: Child,
    out: BufReader<std::process::ChildStdout>,
}

fn receiver(lab: &Lab, node: &str, addr: &str, idle_ms: u64) -> Receiver {
    let mut child = lab
        .command(node, BIN)
        .unwrap()
        .args([
            "udp-recv",
            "--bind",
            addr,
            "--idle-ms",
            &idle_ms.to_string(),
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert!(line.starts_with("ready"), "receiver in {node}: {line:?}");
    Receiver { child, out }
}

impl Receiver {
    fn finish(mut self) -> Value {
        let mut rest = String::new();
        self.out.read_to_string(&mut rest).unwrap();
        assert!(self.child.wait().unwrap().success());
        serde_json::from_str(rest.lines().last().expect("result line")).unwrap()
    }
}

fn send(lab: &Lab, node: &str, to: &str, count: u64, gap_us: u64) -> Value {
    let out = lab
        .command(node, BIN)
        .unwrap()
        .args([
            "udp-send",
            "--to",
            to,
            "--count",
            &count.to_string(),
            "--gap-us",
            &gap_us.to_string(),
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "udp-send: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Sends `count` datagrams from `from` to `to` (an `ip:port` in node `to_node`).
fn udp(lab: &Lab, from: &str, to_node: &str, to: &str, count: u64) -> Value {
    let r = receiver(lab, to_node, to, 500);
    let s = send(lab, from, to, count, 0);
    assert_eq!(s["sent"], count);
    r.finish()
}

fn addr_of(lab: &Lab, node: &str) -> String {
    lab.interfaces(node).unwrap()[0]
        .ipv4
        .unwrap()
        .addr
        .to_string()
}

#[test]
fn pair_up_configures_everything_and_down_removes_it() {
    if !require_privileges("pair_up_configures_everything_and_down_removes_it") {
        return;
    }
    let p = prefix("pair");
    let lab = guard("pair.toml", "pair");
    assert!(lab.is_up());
    let mut names = Vec::new();
    for node in ["a", "b"] {
        let ns = lab.netns(node).unwrap();
        assert_eq!(ns, format!("{p}.{node}"));
        for i in lab.interfaces(node).unwrap() {
            names.push(i.ifname.clone());
            let link = &ip_json(&["-n", &ns, "-d", "link", "show", "dev", &i.ifname])[0];
            assert_eq!(link["address"], i.mac.as_str(), "{node} {}", i.ifname);
            assert_eq!(link["mtu"], 1500);
            assert_eq!(link["num_tx_queues"], i.queues);
            assert_eq!(link["num_rx_queues"], i.queues);
            assert_eq!(link["operstate"], "UP", "{node}: {link}");
            let addr = &ip_json(&["-n", &ns, "addr", "show", "dev", &i.ifname])[0]["addr_info"];
            let cidr = i.ipv4.unwrap();
            assert!(
                addr.as_array()
                    .unwrap()
                    .iter()
                    .any(|a| a["local"] == cidr.addr.to_string().as_str()
                        && a["prefixlen"] == cidr.prefix_len),
                "{node}: {addr}"
            );
        }
    }
    // UDP a -> b and b -> a through the namespaces.
    let r = udp(&lab, "a", "b", &format!("{}:9000", addr_of(&lab, "b")), 200);
    assert_eq!(
        (r["received"].as_u64(), r["unique"].as_u64()),
        (Some(200), Some(200)),
        "{r}"
    );
    let r = udp(&lab, "b", "a", &format!("{}:9000", addr_of(&lab, "a")), 200);
    assert_eq!(r["unique"], 200, "{r}");
    // `exec` passes the exit status through.
    let st = Command::new(BIN)
        .args(["exec", "--prefix", &p])
        .arg(config("pair.toml"))
        .args(["b", "--", "sh", "-c", "exit 7"])
        .status()
        .unwrap();
    assert_eq!(st.code(), Some(7));
    // `up` again is refused and says what to do.
    let e = lab.up().unwrap_err();
    assert!(
        matches!(e, LabError::AlreadyUp { .. }) && e.to_string().contains("down"),
        "{e}"
    );
    assert!(matches!(
        lab.command("zz", "true"),
        Err(LabError::UnknownNode { .. })
    ));

    let state = lab.state_dir();
    drop(lab);
    assert!(
        netns_with_prefix(&p).is_empty(),
        "namespaces left: {:?}",
        netns_with_prefix(&p)
    );
    assert!(!state.exists());
    let root: Vec<String> = ip_json(&["link", "show"])
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["ifname"].as_str().unwrap_or("").to_string())
        .collect();
    // Nothing was ever created in the root namespace; check none of our names is there.
    for n in names {
        assert!(
            !root.contains(&n) || n == "lo",
            "veth {n} left in the root namespace"
        );
    }
}

#[test]
fn pair_2q_has_two_queues_per_side() {
    if !require_privileges("pair_2q_has_two_queues_per_side") {
        return;
    }
    let lab = guard("pair-2q.toml", "p2q");
    for (node, mac) in [("a", "02:00:00:00:02:01"), ("b", "02:00:00:00:02:02")] {
        let i = &lab.interfaces(node).unwrap()[0];
        assert_eq!(i.mac, mac);
        let link = &ip_json(&[
            "-n",
            &lab.netns(node).unwrap(),
            "-d",
            "link",
            "show",
            "dev",
            &i.ifname,
        ])[0];
        assert_eq!(
            (
                link["num_tx_queues"].as_u64(),
                link["num_rx_queues"].as_u64()
            ),
            (Some(2), Some(2))
        );
        assert_eq!(link["address"], mac);
    }
    let r = udp(&lab, "a", "b", &format!("{}:9000", addr_of(&lab, "b")), 100);
    assert_eq!(r["unique"], 100);
}

#[test]
fn switched4_all_pairs_reachable() {
    if !require_privileges("switched4_all_pairs_reachable") {
        return;
    }
    let lab = guard("switched4.toml", "sw4");
    let nodes = lab.nodes();
    assert_eq!(nodes.len(), 4);
    // One receiver per ordered pair (port 9000 + index of the sender).
    let mut rx = Vec::new();
    for (di, dst) in nodes.iter().enumerate() {
        for (si, src) in nodes.iter().enumerate() {
            if si != di {
                let to = format!("{}:{}", addr_of(&lab, dst), 9000 + si);
                rx.push((
                    src.clone(),
                    dst.clone(),
                    to.clone(),
                    receiver(&lab, dst, &to, 800),
                ));
            }
        }
    }
    for (src, _, to, _) in &rx {
        send(&lab, src, to, 50, 0);
    }
    for (src, dst, _, r) in rx {
        let v = r.finish();
        assert_eq!(v["unique"], 50, "{src} -> {dst}: {v}");
    }
    // The switch is a bridge with four ports in its own namespace.
    let sw = format!("{}.sw", lab.prefix());
    let ports = ip_json(&["-n", &sw, "link", "show", "master", "br0"]);
    assert_eq!(ports.as_array().unwrap().len(), 4);
}

#[test]
fn a_node_with_two_ports_on_a_switch_answers_on_each_for_its_own_address() {
    if !require_privileges("a_node_with_two_ports_on_a_switch_answers_on_each_for_its_own_address")
    {
        return;
    }
    // configs/lab/mixed.toml: a1 has two ports on switch fa.
    let lab = guard("mixed.toml", "mp");
    let ifs = lab.interfaces("a1").unwrap();
    let on_fa: Vec<_> = ifs.iter().filter(|f| f.segment == "fa").collect();
    assert_eq!(on_fa.len(), 2, "{ifs:?}");
    assert_eq!(
        (on_fa[0].ifname.as_str(), on_fa[1].ifname.as_str()),
        ("to-fa", "to-fa-2")
    );
    assert_ne!(on_fa[0].mac, on_fa[1].mac);
    let sw = format!("{}.fa", lab.prefix());
    let ports = ip_json(&["-n", &sw, "link", "show", "master", "br0"]);
    assert_eq!(
        ports.as_array().unwrap().len(),
        6,
        "a1, a2 twice; p, r once"
    );
    let rx_packets = |ifname: &str| {
        let v = ip_json(&[
            "-n",
            &lab.netns("a1").unwrap(),
            "-s",
            "link",
            "show",
            ifname,
        ]);
        v[0]["stats64"]["rx"]["packets"].as_u64().unwrap()
    };
    for f in &on_fa {
        let ip = f.ipv4.unwrap().addr.to_string();
        let before = rx_packets(&f.ifname);
        let r = udp(&lab, "p", "a1", &format!("{ip}:9000"), 100);
        assert_eq!(r["unique"], 100, "p -> a1 {ip}: {r}");
        // The frames came in on the port that has the address: p learnt
        // that port's MAC for it (each port answers ARP for its own
        // address only).
        assert!(rx_packets(&f.ifname) >= before + 100, "{}", f.ifname);
        let neigh = ip_json(&["-n", &lab.netns("p").unwrap(), "neigh", "show", &ip]);
        assert_eq!(
            neigh[0]["lladdr"].as_str(),
            Some(f.mac.as_str()),
            "p's neighbour entry for {ip}: {neigh}"
        );
    }
}

#[test]
fn routed_sides_reach_each_other_through_the_router() {
    if !require_privileges("routed_sides_reach_each_other_through_the_router") {
        return;
    }
    let lab = guard("routed.toml", "rt");
    let (a, b) = (addr_of(&lab, "a"), addr_of(&lab, "b"));
    assert_ne!(
        a.rsplit_once('.').unwrap().0,
        b.rsplit_once('.').unwrap().0,
        "different subnets"
    );
    let r = udp(&lab, "a", "b", &format!("{b}:9000"), 100);
    assert_eq!(r["unique"], 100, "{r}");
    let r = udp(&lab, "b", "a", &format!("{a}:9000"), 100);
    assert_eq!(r["unique"], 100, "{r}");
    // Forwarding is on in the router only.
    let fwd = |n: &str| {
        let o = lab
            .command(n, "cat")
            .unwrap()
            .arg("/proc/sys/net/ipv4/ip_forward")
            .output()
            .unwrap();
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    };
    assert_eq!((fwd("r").as_str(), fwd("a").as_str()), ("1", "0"));
}

/// Reads the counters until two reads 300 ms apart agree and nothing is queued.
fn settled_counters(lab: &Lab) -> Vec<ImpairCounters> {
    let t = Instant::now();
    let mut last = lab.impairment_counters().unwrap();
    loop {
        std::thread::sleep(Duration::from_millis(300));
        let now = lab.impairment_counters().unwrap();
        if now == last && now.iter().all(|c| c.queued == 0) {
            return now;
        }
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "counters never settled: {now:?}"
        );
        last = now;
    }
}

#[test]
fn lossy_pair_loses_duplicates_reorders_corrupts_and_counts() {
    if !require_privileges("lossy_pair_loses_duplicates_reorders_corrupts_and_counts") {
        return;
    }
    const N: u64 = 3000;
    let lab = guard("lossy-pair.toml", "lossy");
    // Static neighbours: no ARP through the lossy link, so that every frame
    // the bridge sees is one of our datagrams (a lost ARP request would park
    // the datagrams in the sender's neighbour queue instead).
    for (me, peer) in [("a", "b"), ("b", "a")] {
        let i = &lab.interfaces(me).unwrap()[0];
        let p = &lab.interfaces(peer).unwrap()[0];
        let st = Command::new("ip")
            .args(["-n", &lab.netns(me).unwrap(), "neigh", "replace"])
            .args([
                &p.ipv4.unwrap().addr.to_string(),
                "lladdr",
                &p.mac,
                "dev",
                &i.ifname,
                "nud",
                "permanent",
            ])
            .status()
            .unwrap();
        assert!(st.success());
    }
    let to = format!("{}:9000", addr_of(&lab, "b"));
    let r = receiver(&lab, "b", &to, 1000);
    let s = send(&lab, "a", &to, N, 20);
    assert_eq!(s["sent"], N);
    let r = r.finish();
    let (received, unique) = (
        r["received"].as_u64().unwrap(),
        r["unique"].as_u64().unwrap(),
    );
    assert!(unique > 0 && unique < N, "{r}");
    assert!(r["duplicates"].as_u64().unwrap() > 0, "{r}");
    assert!(r["out_of_order"].as_u64().unwrap() > 0, "{r}");

    let c = settled_counters(&lab);
    assert_eq!(c.len(), 2);
    let ab = c
        .iter()
        .find(|c| c.from == "a" && c.to == "b")
        .expect("a->b counters");
    assert_eq!(ab.link, "a-b");
    assert_eq!(ab.frames_in, N, "{ab:?}");
    assert!(
        ab.dropped > 0 && ab.duplicated > 0 && ab.reordered > 0 && ab.corrupted > 0,
        "{ab:?}"
    );
    assert_eq!(ab.delayed, 0);
    assert_eq!(ab.rate_limited, 0);
    assert!(
        ab.is_consistent(),
        "in + duplicated == out + dropped + rate_limited + tx_errors + queued: {ab:?}"
    );
    for c in &c {
        assert!(c.is_consistent(), "{c:?}");
        assert_eq!(c.kernel_drops, 0);
    }
    // Every datagram that left the bridge arrived, except the corrupted ones
    // (and duplicates of corrupted ones): the receiver's IP/UDP checksums
    // caught every flipped bit.
    let lost_after = ab.frames_out - received;
    assert!(
        lost_after >= ab.corrupted && lost_after <= 2 * ab.corrupted,
        "received {received}: {ab:?}"
    );

    // `show --json` carries the same counters.
    let out = Command::new(BIN)
        .args(["show", "--json", "--prefix", lab.prefix()])
        .arg(config("lossy-pair.toml"))
        .output()
        .unwrap();
    assert!(out.status.success());
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["up"], true);
    assert_eq!(v["counters"][0]["frames_in"], ab.frames_in);
    assert!(v["links"][0]["impair"]["pid"].as_u64().is_some());
}

#[test]
fn down_cleans_up_after_killed_bridges_and_lost_state() {
    if !require_privileges("down_cleans_up_after_killed_bridges_and_lost_state") {
        return;
    }
    // 1. Bridge killed with SIGKILL, namespaces left, a stray process in a node.
    let l = lab("lossy-pair.toml", "kill");
    let p = l.prefix().to_string();
    l.up().unwrap();
    let pid = l.bridge_pid("a-b").expect("bridge running");
    assert!(Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()
        .unwrap()
        .success());
    let t = Instant::now();
    while bridges_with_prefix(&p).contains(&pid) {
        assert!(t.elapsed() < Duration::from_secs(5));
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut stray = l.command("a", "sleep").unwrap().arg("600").spawn().unwrap();
    // `ip netns exec` enters the namespace and then runs sleep: wait until it
    // has, or down() may scan the namespace before the stray is in it (the
    // stray then outlived the lab and this test waited for it to end).
    let t = Instant::now();
    while std::fs::read_to_string(format!("/proc/{}/comm", stray.id()))
        .map_or(true, |c| c.trim() != "sleep")
    {
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "the stray never started"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(!netns_with_prefix(&p).is_empty());
    l.down().unwrap();
    assert!(
        netns_with_prefix(&p).is_empty(),
        "{:?}",
        netns_with_prefix(&p)
    );
    assert!(!l.state_dir().exists());
    assert!(
        stray.wait().unwrap().code().is_none(),
        "stray process was killed"
    );

    // 2. State directory lost while the bridge runs: found through /proc.
    let l = lab("lossy-pair.toml", "lost");
    let p = l.prefix().to_string();
    l.up().unwrap();
    assert_eq!(bridges_with_prefix(&p).len(), 1);
    std::fs::remove_dir_all(l.state_dir()).unwrap();
    l.down().unwrap();
    assert!(
        bridges_with_prefix(&p).is_empty(),
        "bridge survived: {:?}",
        bridges_with_prefix(&p)
    );
    assert!(netns_with_prefix(&p).is_empty());

    // 3. A lab that was never up: down succeeds quietly.
    let never = lab("routed.toml", "never");
    assert!(!never.is_up());
    never.down().unwrap();
    assert!(matches!(
        never.impairment_counters(),
        Err(LabError::NotUp { .. })
    ));
}

#[test]
fn two_labs_from_one_file_coexist_and_down_only_touches_its_own() {
    if !require_privileges("two_labs_from_one_file_coexist_and_down_only_touches_its_own") {
        return;
    }
    let one = guard("pair-bridged.toml", "co1");
    // A prefix that extends the first one must not be mistaken for it.
    let two = LabGuard::new(
        Lab::load(&config("pair-bridged.toml"))
            .unwrap()
            .with_prefix(&format!("{}-x", one.prefix()))
            .unwrap()
            .with_bridge_binary(Path::new(BIN)),
    )
    .unwrap();
    assert!(one.is_up() && two.is_up());
    let to = format!("{}:9000", addr_of(&one, "b"));
    assert_eq!(udp(&one, "a", "b", &to, 100)["unique"], 100);
    assert_eq!(udp(&two, "a", "b", &to, 100)["unique"], 100);
    let (p1, p2) = (one.prefix().to_string(), two.prefix().to_string());
    drop(one);
    assert!(netns_with_prefix(&p1).is_empty());
    assert!(bridges_with_prefix(&p1).is_empty());
    assert!(two.is_up());
    assert_eq!(netns_with_prefix(&p2).len(), 3);
    assert_eq!(bridges_with_prefix(&p2).len(), 1);
    assert_eq!(udp(&two, "a", "b", &to, 100)["unique"], 100);
    let c = two.impairment_counters().unwrap();
    assert!(c[0].frames_in >= 200, "{c:?}");
}

#[test]
fn delay_jitter_and_rate_limit_are_applied_per_direction() {
    if !require_privileges("delay_jitter_and_rate_limit_are_applied_per_direction") {
        return;
    }
    let dir = std::env::temp_dir().join(format!("bcl-lab-shaped-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("shaped.toml");
    std::fs::write(
        &file,
        r#"
[[node]]
name = "a"
[[node]]
name = "b"
[[link]]
endpoints = ["a", "b"]
[link.impair]
seed = 5
delay = "1ms"
jitter = "300us"
[link.impair.forward]
rate = "5mbit"
limit = "10ms"
"#,
    )
    .unwrap();
    let lab = LabGuard::new(
        Lab::load(&file)
            .unwrap()
            .with_prefix(&prefix("shaped"))
            .unwrap()
            .with_bridge_binary(Path::new(BIN)),
    )
    .unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    let to = format!("{}:9000", addr_of(&lab, "b"));
    // Offer far more than 5 Mbit/s: 3000 datagrams of 1000 bytes, unpaced.
    let r = receiver(&lab, "b", &to, 1000);
    let out = lab
        .command("a", BIN)
        .unwrap()
        .args(["udp-send", "--to", &to, "--count", "3000", "--size", "1000"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let r = r.finish();
    let c = settled_counters(&lab);
    let ab = c.iter().find(|c| c.from == "a").unwrap();
    let ba = c.iter().find(|c| c.from == "b").unwrap();
    assert!(ab.rate_limited > 0 && ab.shaped > 0, "{ab:?}");
    assert_eq!(
        ab.delayed, ab.frames_out,
        "every forwarded frame was delayed: {ab:?}"
    );
    assert_eq!(ab.dropped + ab.duplicated + ab.corrupted + ab.reordered, 0);
    assert!(ab.is_consistent(), "{ab:?}");
    // What entered the bridge either arrived or was rate limited (apart from
    // an ARP request or two). Datagrams sent while ARP was resolving may have
    // been dropped by the sender's neighbour queue, before the bridge.
    let unique = r["unique"].as_u64().unwrap();
    assert!(
        ab.frames_in <= 3002 && unique + ab.rate_limited <= ab.frames_in,
        "{r} {ab:?}"
    );
    assert!(ab.frames_in - unique - ab.rate_limited <= 2, "{r} {ab:?}");
    // The reverse direction (ARP replies) is delayed but never rate limited.
    assert_eq!(ba.rate_limited + ba.shaped, 0, "{ba:?}");
    assert_eq!(ba.delayed, ba.frames_out);
}

#[test]
fn threads_can_enter_node_namespaces() {
    if !require_privileges("threads_can_enter_node_namespaces") {
        return;
    }
    let g = guard("pair.toml", "enter");
    let b_addr = format!("{}:7455", addr_of(&g, "b"));
    let lab_b: Lab = lab("pair.toml", "enter");
    let bind = b_addr.clone();
    let receiver = std::thread::spawn(move || {
        lab_b.enter("b").unwrap();
        let sock = std::net::UdpSocket::bind(&bind).unwrap();
        sock.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut buf = [0u8; 64];
        let (n, _) = sock.recv_from(&mut buf).unwrap();
        buf[..n].to_vec()
    });
    let lab_a: Lab = lab("pair.toml", "enter");
    let sender = std::thread::spawn(move || {
        lab_a.enter("a").unwrap();
        let sock = std::net::UdpSocket::bind("0.0.0.0:0").unwrap();
        // The receiver may not be bound yet: send until it answers.
        for _ in 0..50 {
            sock.send_to(b"through the namespaces", &b_addr).unwrap();
            std::thread::sleep(Duration::from_millis(20));
        }
    });
    assert_eq!(receiver.join().unwrap(), b"through the namespaces");
    sender.join().unwrap();
    assert!(g.enter("nonexistent").is_err());
}

#[test]
fn up_reports_every_part_and_shows_a_bar_only_on_a_terminal() {
    if !require_privileges("up_reports_every_part_and_shows_a_bar_only_on_a_terminal") {
        return;
    }
    // The library tells each part as it is made, counting up to the total.
    let l = lab("pair.toml", "steps");
    let mut steps: Vec<(usize, usize, String)> = Vec::new();
    let r = l.up_observed(&mut |s| steps.push((s.done, s.total, s.what.to_string())));
    let down = l.down();
    r.unwrap();
    down.unwrap();
    let total = steps[0].1;
    // pair.toml: two namespaces, one link, two nodes' addresses.
    assert_eq!(total, 5, "{steps:?}");
    assert_eq!(
        steps.iter().map(|s| s.0).collect::<Vec<_>>(),
        (1..=total).collect::<Vec<_>>()
    );
    assert!(steps.iter().all(|s| s.1 == total), "{steps:?}");
    assert!(
        steps
            .iter()
            .any(|s| s.2 == format!("namespace {}.a", l.prefix())),
        "{steps:?}"
    );

    // `bcl-lab up` under a pipe: the result line and nothing of a bar.
    let p = prefix("bar");
    let file = config("pair.toml");
    let file = file.to_str().unwrap();
    let down = || {
        let st = Command::new(BIN)
            .args(["down", "--prefix", &p, file])
            .status()
            .unwrap();
        assert!(st.success());
    };
    let out = Command::new(BIN)
        .args(["up", "--prefix", &p, file])
        .output()
        .unwrap();
    down();
    assert!(out.status.success(), "{out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stdout.contains(&format!("lab {p} is up")), "{stdout}");
    assert!(
        !stderr.contains("bcl-lab up [") && !stderr.contains(['\r', '\x1b']),
        "{stderr:?}"
    );

    // On a pseudo-terminal (util-linux's `script`): the bar, to the last part.
    let out = Command::new("script")
        .args([
            "-q",
            "-e",
            "-c",
            &format!("{BIN} up --prefix {p} {file}"),
            "/dev/null",
        ])
        .output()
        .expect("script (util-linux) runs bcl-lab on a pseudo-terminal");
    down();
    assert!(out.status.success(), "{out:?}");
    let tty = String::from_utf8_lossy(&out.stdout);
    assert!(tty.contains("bcl-lab up ["), "{tty:?}");
    assert!(tty.contains(&format!("{total}/{total}")), "{tty:?}");
    assert!(tty.contains(&format!("lab {p} is up")), "{tty:?}");
}

#[test]
fn a_shaped_switch_puts_a_token_bucket_on_every_port_and_tcp_goes_no_faster() {
    if !require_privileges(
        "a_shaped_switch_puts_a_token_bucket_on_every_port_and_tcp_goes_no_faster",
    ) {
        return;
    }
    let dir = std::env::temp_dir().join(format!("bcl-lab-tbf-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("tbf.toml");
    std::fs::write(
        &file,
        r#"
[[node]]
name = "a"
[[node]]
name = "b"
[[switch]]
name = "sw"
members = ["a", "b"]
[switch.shape]
rate = "20mbit"
"#,
    )
    .unwrap();
    let p = prefix("tbf");
    let lab = LabGuard::new(
        Lab::load(&file)
            .unwrap()
            .with_prefix(&p)
            .unwrap()
            .with_bridge_binary(Path::new(BIN)),
    )
    .unwrap();
    // Every port of the switch (the bridge's egress towards each member)
    // has the token bucket, with the file's rate and the default depth.
    let sw = lab.report().switches[0].netns.clone();
    for port in ["p0", "p1"] {
        let out = Command::new("tc")
            .args(["-n", &sw, "qdisc", "show", "dev", port])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "tc: {out:?}");
        assert!(
            text.contains("qdisc tbf") && text.contains("rate 20Mbit"),
            "{port}: {text}"
        );
    }
    let out = Command::new(BIN)
        .args(["show", "--prefix", &p])
        .arg(&file)
        .output()
        .unwrap();
    let show = String::from_utf8_lossy(&out.stdout);
    assert!(
        show.contains("shaped: tbf rate 20mbit burst 16384 B limit 262144 B"),
        "{show}"
    );
    std::fs::remove_dir_all(&dir).unwrap();

    // 2.5 MB over kernel TCP from a to b: at 20 Mbit/s that takes 1 s. The
    // bound is half of it, so a slow machine (which only makes it slower)
    // cannot fail the test; unshaped, veth moves it in milliseconds.
    const BYTES: usize = 2_500_000;
    let to = format!("{}:7456", addr_of(&lab, "b"));
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let bind = to.clone();
    let receiver = lab.spawn_in("b", move || {
        let listener = std::net::TcpListener::bind(&bind).unwrap();
        ready_tx.send(()).unwrap();
        let (mut conn, _) = listener.accept().unwrap();
        let t0 = Instant::now();
        let mut buf = vec![0u8; 1 << 16];
        let mut got = 0;
        loop {
            let n = conn.read(&mut buf).unwrap();
            if n == 0 {
                break;
            }
            got += n;
        }
        (got, t0.elapsed())
    });
    ready_rx.recv_timeout(Duration::from_secs(10)).unwrap();
    let sender = lab.spawn_in("a", move || {
        use std::io::Write;
        let mut conn = std::net::TcpStream::connect(&to).unwrap();
        let t0 = Instant::now();
        conn.write_all(&vec![0x5a; BYTES]).unwrap();
        conn.shutdown(std::net::Shutdown::Write).unwrap();
        t0
    });
    sender.join().unwrap();
    let (got, elapsed) = receiver.join().unwrap();
    assert_eq!(got, BYTES);
    let ideal = Duration::from_secs_f64(BYTES as f64 * 8.0 / 20e6);
    assert!(
        elapsed >= ideal / 2,
        "2.5 MB through a 20 Mbit/s switch in {elapsed:?}: faster than half the ideal {ideal:?}"
    );
    println!("2.5 MB through a 20 Mbit/s shaped switch: {elapsed:?} (ideal {ideal:?})");
}
