//! BCL jobs started by the launchers clusters already run, without
//! `bcl-run`: every rank of `bcl-coll --check` joins through PMI-2
//! (`bcl::cluster::pmi2`: rank and size from the launcher, placement from
//! the ranks' node identities, descriptor tables through the launcher's
//! key-value space), then runs and checks every collective.
//!
//! - MPICH's hydra: `mpiexec.hydra -n 1..4` (Debian's `mpich` package).
//! - Slurm: `srun --mpi=pmi2 -n 2, 4` on the one-host cluster of
//!   `tests/slurm/setup.sh` (Debian's `slurmctld slurmd slurm-client
//!   munge`; needs root). A cluster the test started is stopped again.
//!
//! `scripts/test` installs both. A launcher that is missing (or, for
//! Slurm, not being root) fails the test loudly unless
//! `BCL_SKIP_PRIVILEGED=1` is set.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Seconds each run may take in all (a hang fails the test instead of
/// blocking it).
const RUN_LIMIT: Duration = Duration::from_secs(300);

/// Whether privileged or launcher tests may be skipped.
fn skip_allowed() -> bool {
    std::env::var("BCL_SKIP_PRIVILEGED").as_deref() == Ok("1")
}

/// Skips (with a note) when allowed, else fails naming what is missing.
fn cannot_run(test: &str, why: &str) {
    if skip_allowed() {
        eprintln!("SKIP {test}: {why} (BCL_SKIP_PRIVILEGED=1)");
        return;
    }
    panic!(
        "{test}: {why}; scripts/test installs what it needs (or set BCL_SKIP_PRIVILEGED=1 to skip)"
    );
}

/// Whether the effective uid is 0 (from /proc/self/status).
fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            let uid = s.lines().find(|l| l.starts_with("Uid:"))?;
            uid.split_whitespace().nth(2).map(|u| u == "0")
        })
        .unwrap_or(false)
}

fn on_path(bin: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/usr/bin")])
        .map(|d| d.join(bin))
        .find(|p| p.is_file())
}

/// Runs `cmd` to completion within [`RUN_LIMIT`]; kills it and fails
/// the test, with what it printed, if it takes longer.
fn run(mut cmd: Command) -> Output {
    let what = format!("{cmd:?}");
    // No bcl-run job around the launcher: its ranks must use PMI-2.
    for v in [
        "BCL_RENDEZVOUS",
        "BCL_STATIC",
        "BCL_RANK",
        "BCL_SIZE",
        "BCL_JOB_SECRET",
    ] {
        cmd.env_remove(v);
    }
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("starting {what}: {e}"));
    let pipe = |r: Option<Box<dyn Read + Send>>| {
        let mut r = r.unwrap();
        std::thread::spawn(move || {
            let mut v = Vec::new();
            let _ = r.read_to_end(&mut v);
            v
        })
    };
    let out = pipe(child.stdout.take().map(|s| Box::new(s) as _));
    let err = pipe(child.stderr.take().map(|s| Box::new(s) as _));
    let deadline = Instant::now() + RUN_LIMIT;
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "{what} did not finish within {RUN_LIMIT:?}\nstdout:\n{}\nstderr:\n{}",
                String::from_utf8_lossy(&out.join().unwrap()),
                String::from_utf8_lossy(&err.join().unwrap())
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    Output {
        status,
        stdout: out.join().unwrap(),
        stderr: err.join().unwrap(),
    }
}

/// Checks a `bcl-coll --check` job of `n` ranks: it succeeded, and every
/// rank 0..n reported its check once, with the same number of calls, over
/// shared memory (all ranks are on this host).
fn assert_checked(launcher: &str, n: usize, out: &Output) {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{launcher} -n {n}: {}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
    let mut seen: Vec<Option<serde_json::Value>> = vec![None; n];
    for line in stdout.lines() {
        let Some(rest) = line.split_once("check ").map(|x| x.1) else {
            continue;
        };
        let v: serde_json::Value = serde_json::from_str(rest).unwrap();
        let rank = v["rank"].as_u64().unwrap() as usize;
        assert!(rank < n, "{launcher} -n {n}: rank {rank} reported: {line}");
        assert!(
            seen[rank].is_none(),
            "{launcher} -n {n}: rank {rank} twice:\n{stdout}"
        );
        let methods = if n == 1 {
            serde_json::json!([])
        } else {
            serde_json::json!(["shm"])
        };
        assert_eq!(v["methods"], methods, "{launcher} -n {n}: {line}");
        assert_eq!(v["hierarchies"].as_u64(), Some(0), "one node: {line}");
        seen[rank] = Some(v);
    }
    let calls: Vec<u64> = seen
        .iter()
        .enumerate()
        .map(|(r, v)| {
            let v = v.as_ref().unwrap_or_else(|| {
                panic!("{launcher} -n {n}: rank {r} did not report\nstdout:\n{stdout}\nstderr:\n{stderr}")
            });
            v["calls"].as_u64().unwrap()
        })
        .collect();
    assert!(
        calls[0] > 0 && calls.iter().all(|c| *c == calls[0]),
        "{launcher} -n {n}: calls per rank {calls:?}"
    );
}

#[test]
fn bcl_coll_checks_every_collective_under_hydra_mpiexec() {
    let Some(mpiexec) = on_path("mpiexec.hydra") else {
        return cannot_run(
            "hydra mpiexec test",
            "mpiexec.hydra is not installed (Debian package mpich)",
        );
    };
    for n in 1..=4usize {
        let mut cmd = Command::new(&mpiexec);
        cmd.args(["-n", &n.to_string()])
            .arg(env!("CARGO_BIN_EXE_bcl-coll"))
            .args(["--check", "--timeout", "120"]);
        let out = run(cmd);
        assert_checked("mpiexec.hydra", n, &out);
    }
}

/// The one-host Slurm cluster of `tests/slurm/setup.sh`; stopped on drop
/// if this test started it.
struct SlurmCluster {
    script: PathBuf,
    started: bool,
}

impl SlurmCluster {
    fn up() -> SlurmCluster {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/slurm/setup.sh");
        let out = run({
            let mut c = Command::new(&script);
            c.arg("start");
            c
        });
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{} failed: {}\nstdout:\n{stdout}\nstderr:\n{}",
            script.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        SlurmCluster {
            started: stdout.lines().any(|l| l == "started"),
            script,
        }
    }
}

impl Drop for SlurmCluster {
    fn drop(&mut self) {
        if self.started {
            let _ = Command::new(&self.script)
                .arg("stop")
                .stdout(Stdio::null())
                .status();
        }
    }
}

#[test]
fn bcl_coll_checks_every_collective_under_slurm_srun_pmi2() {
    let test = "Slurm srun --mpi=pmi2 test";
    if !is_root() {
        return cannot_run(test, "needs root (it runs slurmctld and slurmd)");
    }
    let missing: Vec<&str> = ["slurmctld", "slurmd", "srun", "munged"]
        .into_iter()
        .filter(|b| on_path(b).is_none())
        .collect();
    if !missing.is_empty() {
        return cannot_run(
            test,
            &format!(
                "{} not installed (Debian packages slurmctld slurmd slurm-client munge)",
                missing.join(", ")
            ),
        );
    }
    let _cluster = SlurmCluster::up();
    for n in [2usize, 4] {
        let mut cmd = Command::new(on_path("srun").unwrap());
        cmd.args(["--mpi=pmi2", "-n", &n.to_string(), "--time=10"])
            .arg(env!("CARGO_BIN_EXE_bcl-coll"))
            .args(["--check", "--timeout", "120"]);
        let out = run(cmd);
        assert_checked("srun --mpi=pmi2", n, &out);
    }
}
