//! Collectives on a node's shared-memory board: `bcl-run` starts three
//! ranks on this machine and each runs `bcl-coll --check` (every
//! collective, sizes 0 B to 320 KB, first and last rank as root, plus calls
//! started together and waited on in reverse order, on the world, a
//! duplicate and an even/odd split; results checked bit for bit). Barrier,
//! bcast, reduce and allreduce of every communicator of two or more ranks
//! run on its board; the others go over shared-memory messages. Checked
//! busy-polling, yielding and sleeping in epoll (a board gives no event to
//! wake on, so a waiting rank must not sleep), with the board turned off,
//! and that no board file is left in /dev/shm.

use std::process::Command;

/// Runs the check in a 3-rank job; returns each rank's (calls, boards).
fn check(mode: Option<&str>, board_env: Option<&str>) -> Vec<(u64, u64)> {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_bcl-run"));
    cmd.args(["-n", "3", "--timeout", "120", "--"])
        .arg(env!("CARGO_BIN_EXE_bcl-coll"))
        .arg("--check")
        .args(mode);
    match board_env {
        Some(v) => cmd.env("BCL_COLL_BOARD", v),
        None => cmd.env_remove("BCL_COLL_BOARD"),
    };
    let out = cmd.output().expect("run bcl-run");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "bcl-run {mode:?} failed: {}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
    let mut ranks = vec![None; 3];
    for line in stdout.lines() {
        let Some((tag, rest)) = line.split_once("] check ") else {
            continue;
        };
        let v: serde_json::Value = serde_json::from_str(rest).unwrap();
        let rank: usize = tag.trim_start_matches('[').parse().unwrap();
        assert_eq!(v["methods"], serde_json::json!(["shm"]), "{line}");
        assert_eq!(v["hierarchies"].as_u64(), Some(0), "one node: {line}");
        ranks[rank] = Some((v["calls"].as_u64().unwrap(), v["boards"].as_u64().unwrap()));
    }
    ranks
        .into_iter()
        .map(|r| r.unwrap_or_else(|| panic!("a rank did not check:\n{stdout}\n{stderr}")))
        .collect()
}

fn board_files() -> Vec<String> {
    std::fs::read_dir("/dev/shm")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with("bcl-board-"))
        .collect()
}

#[test]
fn every_collective_is_right_on_the_board() {
    let before = board_files();
    for mode in [None, Some("--yield"), Some("--blocking")] {
        // World and duplicate on every rank; the even split {0, 2} too,
        // the odd one ({1}) is a single rank and needs no board.
        let got = check(mode, None);
        assert_eq!(got, [(285, 3), (285, 2), (285, 3)], "mode {mode:?}");
    }
    let off = check(None, Some("0"));
    assert_eq!(off, [(285, 0), (285, 0), (285, 0)], "BCL_COLL_BOARD=0");
    let left: Vec<String> = board_files()
        .into_iter()
        .filter(|f| !before.contains(f))
        .collect();
    assert!(left.is_empty(), "board files left behind: {left:?}");
}

/// A rank killed while the others wait for it on the board: they fail
/// with the board's liveness error instead of waiting forever. Each rank runs under `sh`, which exits 0 whatever
/// happens to it, so `bcl-run` does not stop the survivors itself.
#[test]
fn a_member_killed_during_a_board_barrier_fails_the_others() {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;
    let script =
        r#""$0" --ops barrier --iters 1000000000 --warmup 0 & echo "pid $!"; wait; exit 0"#;
    let mut run = Command::new(env!("CARGO_BIN_EXE_bcl-run"))
        .args(["-n", "3", "--timeout", "120", "--", "sh", "-c", script])
        .arg(env!("CARGO_BIN_EXE_bcl-coll"))
        .env_remove("BCL_COLL_BOARD")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run bcl-run");
    let stdout = run.stdout.take().unwrap();
    let mut lines = BufReader::new(stdout).lines();
    let victim: i32 = loop {
        let line = lines
            .next()
            .expect("bcl-run ended before rank 2 started")
            .unwrap();
        if let Some(pid) = line.strip_prefix("[2] pid ") {
            break pid.trim().parse().unwrap();
        }
    };
    // Let the job join and set its board up: then every rank spins in
    // barriers.
    std::thread::sleep(std::time::Duration::from_secs(3));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(victim),
        nix::sys::signal::Signal::SIGKILL,
    )
    .expect("kill rank 2");
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut run.stderr.take().unwrap(), &mut stderr).unwrap();
    run.wait().unwrap();
    let all = format!("{}\n{stderr}", rest.join("\n"));
    // The first survivor to look names rank 2; it then exits, so the other
    // may name either rank 2 or that survivor. Either the board's liveness
    // check or the shared-memory method (which watches its peers'
    // processes) sees the death first.
    let mut named_victim = false;
    for rank in 0..2 {
        let expect = format!("[{rank}] bcl-coll: barrier of 0 bytes: peer");
        let line = all
            .lines()
            .find(|l| l.starts_with(&expect))
            .unwrap_or_else(|| panic!("rank {rank} did not fail:\n{all}"));
        let board = "died during a collective on the node's shared-memory board";
        assert!(
            line.contains(board) || line.contains("its process is gone or silent"),
            "{line}"
        );
        named_victim |= line.contains("(rank 2) failed")
            && (!line.contains(board) || line.contains(&format!("(pid {victim}) died")));
    }
    assert!(
        named_victim,
        "no survivor named rank 2 (pid {victim}):\n{all}"
    );
}

/// Ranks that call the same collective with different lengths (8 bytes at
/// the root, 64 KiB at the other: one waits in a lane line, the other in
/// a slot) fail with an error that says so instead of waiting forever.
#[test]
fn a_board_call_with_different_lengths_fails_instead_of_hanging() {
    let script = r#"if [ "$BCL_RANK" = 1 ]; then S=65536; else S=8; fi; exec "$0" --ops bcast --sizes $S --iters 100 --warmup 0"#;
    let out = Command::new(env!("CARGO_BIN_EXE_bcl-run"))
        .args(["-n", "2", "--timeout", "120", "--", "sh", "-c", script])
        .arg(env!("CARGO_BIN_EXE_bcl-coll"))
        .env_remove("BCL_COLL_BOARD")
        .output()
        .expect("run bcl-run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "the job succeeded:\n{stderr}");
    assert!(
        stderr
            .lines()
            .any(|l| l.starts_with("[1] bcl-coll: bcast of 65536 bytes:")
                && l.contains("started this collective call with other arguments")),
        "{stderr}"
    );
    assert!(!stderr.contains("timed out"), "{stderr}");
}
