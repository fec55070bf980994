//! The C programs of `mpi/tests/c` (point-to-point semantics, every
//! collective against a reference, datatypes, errors, and the classic
//! examples), built with `bclcc` and run on this library: with 1 to 4
//! ranks under `bcl-run`, under MPICH's `mpiexec` (hydra, through PMI-2),
//! under Slurm's `srun --mpi=pmi2` (the one-host cluster of
//! `tests/slurm/setup.sh`), built by MPICH's own `mpicc` and run on BCL
//! through the ABI, and across two lab nodes (shared memory inside a node,
//! AF_PACKET between).
//!
//! Each program prints `OK <name> ranks=<N>` from rank 0 when every check
//! passed and aborts otherwise. The lab and Slurm cases need root and fail
//! loudly without it unless `BCL_SKIP_PRIVILEGED=1`; the MPICH and Slurm
//! cases need their packages (`scripts/test` installs them) and fail
//! loudly without them.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Mutex;
use std::time::Duration;

/// One job at a time: the jobs busy-poll, and this host has 2 cores.
static ONE_JOB: Mutex<()> = Mutex::new(());

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn sources() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c")
}

fn bclcc() -> &'static str {
    env!("CARGO_BIN_EXE_bclcc")
}

/// `bcl-run`, built beside `bclcc` by the same `cargo test --workspace`.
fn bcl_run() -> PathBuf {
    let p = Path::new(bclcc()).with_file_name("bcl-run");
    assert!(
        p.exists(),
        "{} is missing: build it first (cargo build -p bcl-tools, or run the workspace's tests)",
        p.display()
    );
    p
}

/// The test programs (every `.c` there but the ABI check's).
fn programs() -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(sources())
        .unwrap()
        .filter_map(|e| {
            let name = e.ok()?.file_name().into_string().ok()?;
            let stem = name.strip_suffix(".c")?;
            (stem != "abi_constants").then(|| stem.to_string())
        })
        .collect();
    v.sort();
    assert!(
        v.len() >= 7,
        "expected the test programs in {}: {v:?}",
        sources().display()
    );
    v
}

/// A fresh directory for this test's executables.
fn out_dir(test: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("bclmpi-{}-{test}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Compiles `prog` with `cc` (bclcc or an MPI's mpicc) into `dir`.
fn build(cc: &str, prog: &str, dir: &Path) -> PathBuf {
    let exe = dir.join(prog);
    let out = Command::new(cc)
        .args(["-O2", "-Wall", "-Wextra", "-Werror", "-o"])
        .arg(&exe)
        .arg(sources().join(format!("{prog}.c")))
        .arg("-lm")
        .output()
        .unwrap_or_else(|e| panic!("running {cc}: {e}"));
    assert!(
        out.status.success(),
        "{cc} {prog}.c failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}

/// Runs `cmd` with a timeout and checks the program's verdict.
fn check(mut cmd: Command, prog: &str, n: usize, what: &str) -> Output {
    let out = run_with_timeout(&mut cmd, Duration::from_secs(120));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let ok = format!("OK {prog} ranks={n}");
    assert!(
        out.status.success() && stdout.contains(&ok),
        "{prog} with {n} ranks {what}: {}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
    out
}

fn run_with_timeout(cmd: &mut Command, limit: Duration) -> Output {
    let child = cmd
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("starting {cmd:?}: {e}"));
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        if rx.recv_timeout(limit).is_err() {
            // Still running: stop it (and say so through the status).
            let _ = Command::new("kill").arg(pid.to_string()).status();
        }
    });
    let out = child.wait_with_output().unwrap();
    let _ = tx.send(());
    out
}

fn under_bcl_run(exe: &Path, n: usize) -> Command {
    let mut c = Command::new(bcl_run());
    c.args(["-n", &n.to_string(), "--timeout", "90", "--"])
        .arg(exe);
    c
}

/// Whether MPICH's tools are here; fails loudly if not (scripts/test
/// installs the `mpich` and `libmpich-dev` packages).
fn require_mpich(tool: &str) {
    let found = Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        found,
        "{tool} is missing: install Debian's mpich, libmpich-dev and slurm-client (scripts/test does)"
    );
}

#[test]
fn every_program_passes_under_bcl_run_with_1_to_4_ranks() {
    let dir = out_dir("bclrun");
    for prog in programs() {
        let exe = build(bclcc(), &prog, &dir);
        for n in 1..=4 {
            let _one = ONE_JOB.lock().unwrap_or_else(|e| e.into_inner());
            check(under_bcl_run(&exe, n), &prog, n, "under bcl-run");
        }
    }
}

#[test]
fn every_program_passes_under_mpich_mpiexec() {
    require_mpich("mpiexec.hydra");
    let dir = out_dir("hydra");
    for prog in programs() {
        let exe = build(bclcc(), &prog, &dir);
        for n in [1, 2, 3, 4] {
            let _one = ONE_JOB.lock().unwrap_or_else(|e| e.into_inner());
            let mut c = Command::new("mpiexec.hydra");
            c.args(["-n", &n.to_string()]).arg(&exe);
            check(c, &prog, n, "under mpiexec.hydra");
        }
    }
}

#[test]
fn programs_built_by_mpich_run_on_bcl_unmodified() {
    require_mpich("mpicc.mpich");
    let dir = out_dir("mpich-abi");
    let libdir = Command::new(bclcc()).arg("--libdir").output().unwrap();
    assert!(libdir.status.success());
    let libdir = String::from_utf8(libdir.stdout).unwrap().trim().to_string();
    for prog in programs() {
        let exe = build("mpicc.mpich", &prog, &dir);
        // The program was linked by MPICH against libmpich.so.12; with
        // BCL's directory first it loads libbclmpi under that name.
        let ldd = Command::new("ldd")
            .arg(&exe)
            .env("LD_LIBRARY_PATH", &libdir)
            .output()
            .unwrap();
        let ldd = String::from_utf8_lossy(&ldd.stdout);
        assert!(
            ldd.lines()
                .any(|l| l.contains("libmpich.so.12") && l.contains(&libdir)),
            "{prog} does not load libmpich.so.12 from {libdir}:\n{ldd}"
        );
        for n in [1, 2, 3, 4] {
            let _one = ONE_JOB.lock().unwrap_or_else(|e| e.into_inner());
            let mut c = under_bcl_run(&exe, n);
            c.env("LD_LIBRARY_PATH", &libdir);
            let out = check(c, &prog, n, "built by mpicc.mpich, run on BCL");
            if prog == "hello" {
                let stdout = String::from_utf8_lossy(&out.stdout);
                assert!(
                    stdout.contains("BCL MPI"),
                    "hello did not run on BCL's library:\n{stdout}"
                );
            }
        }
    }
}

#[test]
fn every_program_passes_across_two_lab_nodes() {
    if !bcl_lab::require_privileges("every_program_passes_across_two_lab_nodes") {
        return;
    }
    let dir = out_dir("lab");
    for prog in programs() {
        let exe = build(bclcc(), &prog, &dir);
        let _one = ONE_JOB.lock().unwrap_or_else(|e| e.into_inner());
        let mut c = Command::new(bcl_run());
        c.current_dir(repo())
            .env("BCL_LAB_PREFIX", format!("t{}-mpi", std::process::id()))
            .env("BCL_METHODS", "shm,packet")
            .args([
                "--lab",
                "configs/lab/pair.toml",
                "--nodes",
                "a,b",
                "--per-node",
                "2",
                "--timeout",
                "90",
                "--",
            ])
            .arg(&exe);
        check(c, &prog, 4, "on 2 lab nodes x 2 ranks");
    }
}

/// The one-host Slurm cluster of `tests/slurm/setup.sh`, stopped again if
/// this test started it.
struct Slurm {
    script: PathBuf,
    started: bool,
}

impl Slurm {
    fn up() -> Slurm {
        let script = repo().join("tests/slurm/setup.sh");
        let out = Command::new(&script).arg("start").output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{} start failed: {}\n{stdout}\n{}",
            script.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        Slurm {
            started: stdout.lines().any(|l| l == "started"),
            script,
        }
    }
}

impl Drop for Slurm {
    fn drop(&mut self) {
        if self.started {
            let _ = Command::new(&self.script).arg("stop").output();
        }
    }
}

#[test]
fn every_program_passes_under_slurm_srun() {
    if !bcl_lab::require_privileges("every_program_passes_under_slurm_srun") {
        return;
    }
    require_mpich("srun");
    let dir = out_dir("srun");
    let _slurm = Slurm::up();
    for prog in programs() {
        let exe = build(bclcc(), &prog, &dir);
        for n in [1, 4] {
            let _one = ONE_JOB.lock().unwrap_or_else(|e| e.into_inner());
            let mut c = Command::new("srun");
            c.args(["--mpi=pmi2", "-n", &n.to_string(), "--time=5"])
                .arg(&exe);
            check(c, &prog, n, "under srun --mpi=pmi2");
        }
    }
}

/// Builds `tests/c/faults/NAME.c` with `bclcc`, warnings as errors.
fn build_fault_program(name: &str) -> PathBuf {
    let dir = out_dir("faults");
    let src = sources().join(format!("faults/{name}.c"));
    let exe = dir.join(name);
    let out = Command::new(bclcc())
        .args(["-O2", "-Wall", "-Wextra", "-Werror", "-o"])
        .arg(&exe)
        .arg(&src)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}

#[test]
fn the_survivors_of_a_dead_rank_shrink_the_world_and_go_on() {
    let exe = build_fault_program("shrink");
    for n in [2, 3, 4] {
        let _one = ONE_JOB.lock().unwrap_or_else(|e| e.into_inner());
        check(
            under_bcl_run(&exe, n),
            "shrink",
            n,
            "with its last rank dead",
        );
    }
    // Over udp the dead rank is noticed by liveness (off under MPI unless
    // asked for).
    let _one = ONE_JOB.lock().unwrap_or_else(|e| e.into_inner());
    let mut c = under_bcl_run(&exe, 4);
    c.env("BCL_METHODS", "udp").env("BCL_LIVENESS", "200ms,3");
    check(c, "shrink", 4, "over udp with its last rank dead");
}

#[test]
fn a_dead_rank_makes_operations_with_it_fail_instead_of_hanging() {
    let exe = build_fault_program("peer_death");
    for n in [2, 3, 4] {
        let _one = ONE_JOB.lock().unwrap_or_else(|e| e.into_inner());
        check(
            under_bcl_run(&exe, n),
            "peer_death",
            n,
            "with its last rank dead",
        );
    }
}
