//! Liveness per node pair, between real processes on two bcl-lab nodes
//! over udp: two ranks on node 1 watch the two ranks of node 2 (critical,
//! 100 ms period, 3 misses). With the node board (the default) the
//! watchers' pings together stay within one per node pair per period;
//! with `BCL_NODE_LIVENESS=off` (each process on its own) they are counted
//! for comparison. Then rank 3 is SIGKILLed: both watchers declare it
//! dead, and never rank 2, its live neighbour. Needs root; fails loudly
//! without it unless BCL_SKIP_PRIVILEGED=1.

use bcl_lab::require_privileges;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// Checks while the four ranks all live.
const PERIODS: u32 = 30;
const PERIOD: Duration = Duration::from_millis(100);

/// Runs the job; returns its output (asserting it succeeded).
fn job(per_node_board: bool) -> String {
    let lab = Path::new(env!("CARGO_MANIFEST_DIR")).join("../configs/lab/switched4.toml");
    let mut c = Command::new(env!("CARGO_BIN_EXE_bcl-run"));
    c.args(["-n", "4", "--per-node", "2", "--timeout", "60", "--lab"])
        .arg(&lab)
        .args(["--nodes", "n1,n2", "--keep-going", "--"])
        .arg(std::env::current_exe().unwrap())
        .args([
            "node_watching_rank",
            "--exact",
            "--nocapture",
            "--test-threads=1",
            "-q",
        ])
        .env("BCL_LAB_PREFIX", format!("t{}-nl", std::process::id()))
        .env("BCL_METHODS", "udp")
        .env("BCL_LIVENESS", "100ms,3")
        .env("BCL_NODE_LIVENESS_TEST", "1");
    if !per_node_board {
        c.env("BCL_NODE_LIVENESS", "off");
    }
    let out = c.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    // Rank 3 is killed on purpose: the job's status is its SIGKILL.
    assert!(
        stderr.contains("rank 3 failed (signal: 9 (SIGKILL))"),
        "{stdout}\n{stderr}"
    );
    for r in [0, 1, 2] {
        assert!(
            stdout.contains(&format!("[{r}] done")),
            "rank {r}: {stdout}\n{stderr}"
        );
    }
    stdout
}

/// The pings ranks 0 and 1 sent while everyone lived.
fn pings(out: &str) -> u64 {
    out.lines()
        .filter_map(|l| {
            l.split_once("] pings while all lived: ")?
                .1
                .parse::<u64>()
                .ok()
        })
        .sum()
}

#[test]
fn two_watchers_cost_one_ping_per_node_pair_and_a_dead_rank_is_found() {
    if !require_privileges("two_watchers_cost_one_ping_per_node_pair_and_a_dead_rank_is_found") {
        return;
    }
    let per_node = job(true);
    let per_process = job(false);
    let (node_pings, process_pings) = (pings(&per_node), pings(&per_process));
    eprintln!(
        "{PERIODS} periods, 2 watchers x 2 watched on another node: {node_pings} pings per node pair, {process_pings} per process pair"
    );
    // At most one per node pair and period (+1: the first check).
    assert!(
        node_pings <= u64::from(PERIODS) + 1,
        "{node_pings} pings\n{per_node}"
    );
    assert!(node_pings > 0, "{per_node}");
    for out in [&per_node, &per_process] {
        for r in [0, 1] {
            assert!(out.contains(&format!("[{r}] rank 3 down after")), "{out}");
        }
        assert!(!out.contains("false death"), "{out}");
    }
    for l in per_node.lines().filter(|l| l.contains("down after")) {
        eprintln!("{l}");
    }
}

/// A rank of the test above (does nothing in a normal test run).
#[test]
fn node_watching_rank() {
    use bcl::cluster::join::{join, JoinOptions};
    use bcl::PeerEvent;
    if std::env::var_os("BCL_NODE_LIVENESS_TEST").is_none()
        || std::env::var_os("BCL_RANK").is_none()
    {
        return;
    }
    let mut joined = join(JoinOptions::default()).unwrap();
    let me = joined.info.rank;
    let addrs = joined.addrs.clone();
    let ep = &mut joined.endpoint;
    let start = Instant::now();
    // bench/liveness.sh --node-kills shortens the live phase.
    let periods = std::env::var("BCL_NODE_LIVENESS_PERIODS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(PERIODS);
    let all_lived = PERIOD * periods;
    let end = all_lived + Duration::from_secs(2);
    let step = |ep: &mut bcl::Endpoint| {
        let until = ep.now() + Duration::from_millis(1);
        ep.progress_or_wait(Some(until)).unwrap();
    };
    if me >= 2 {
        // Rank 3 dies at a point of the period that varies from run to run
        // (the watchers' checks keep the phase of their start).
        let dies = all_lived + Duration::from_millis(u64::from(std::process::id() % 100));
        // Live until after the watchers have stopped watching (their
        // clocks start a few ms apart): leaving earlier would be a death.
        while start.elapsed() < end + Duration::from_secs(1) {
            if me == 3 && start.elapsed() >= dies {
                // CLOCK_MONOTONIC is the host's, shared by the lab's
                // namespaces: the bench subtracts it from the watchers'.
                println!("killed at {} ns", monotonic_ns());
                let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGKILL);
            }
            step(ep);
        }
        println!("done");
        return;
    }
    for r in [2, 3] {
        ep.watch_peer(addrs[r], true).unwrap();
    }
    let mut reported = false;
    while start.elapsed() < end {
        step(ep);
        if !reported && start.elapsed() >= all_lived {
            println!("pings while all lived: {}", ep.port().stats().pings_sent);
            reported = true;
        }
        while let Some(ev) = ep.poll_peer_event() {
            if let PeerEvent::Down(a) = ev {
                let r = addrs.iter().position(|x| *x == a).unwrap();
                match start.elapsed().checked_sub(all_lived) {
                    Some(after) if r == 3 => {
                        println!(
                            "rank {r} down after {:.0} ms, at {} ns",
                            after.as_secs_f64() * 1e3,
                            monotonic_ns()
                        )
                    }
                    // Alive all along: a false death.
                    _ => println!("rank {r} down, a false death (at {:?} after the live phase; declared dead by liveness so far: {})", start.elapsed().checked_sub(all_lived), ep.port().stats().peers_declared_dead),
                }
            }
        }
    }
    println!("done");
}

/// Nanoseconds of the host's `CLOCK_MONOTONIC`.
fn monotonic_ns() -> u128 {
    let t = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC).unwrap();
    Duration::new(t.tv_sec() as u64, t.tv_nsec() as u32).as_nanos()
}
