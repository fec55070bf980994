//! The VFIO layer, the virtio-net driver and the `vfio` method on real
//! (emulated) hardware: runs `tests/vm/run.sh`, which boots a QEMU guest
//! with an emulated Intel IOMMU and virtio-net NICs, binds them to
//! vfio-pci and runs `tests/vm/guest-tests.sh` inside: the `bcl-vfio`
//! tool's list/bind/check/exchange/unbind, `bcl-pingpong` and `bcl-bw
//! --verify` with `--method vfio` between two NICs (one process each), a
//! two-rank `bcl-run` job in which the cluster layer opens vfio on each
//! rank's NIC from the resource database (`bcl-alltoall`, verified), and
//! the same tools between a guest NIC on vfio and BCL on AF_PACKET on the
//! host side of a tap (in a network namespace of its own), both ways.
//! Passes only when the guest ran and passed as many tests as the list has
//! `run` lines (the guest's `guest-tests: ran N passed N`), so a list cut
//! short or a test that silently never ran fails it.
//!
//! The same harness also boots the guest on a newer Debian kernel (from
//! trixie-backports), whose virtio-net binds AF_XDP sockets zero-copy, and
//! runs `tests/vm/afxdp-zc-tests.sh`: the `afxdp` method's verified stream,
//! foreign traffic beside it and a SIGKILLed process's successor, each
//! required to report its queue bound zero-copy (veth, the host's only NIC,
//! refuses zero-copy). The two guests run one after the other.
//!
//! Needs root (apt-get for qemu-system-x86 and busybox-static, the kernel
//! cache in /var/cache/bcl-vm, the namespace and the tap). Set
//! `BCL_SKIP_PRIVILEGED=1` to skip it; otherwise it fails loudly when it
//! cannot run.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::{BufRead, BufReader, IsTerminal};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::Mutex;
use std::time::Duration;

/// Held while a guest runs: one at a time (each takes a CPU, and they share
/// the kernel cache and the guest binaries' build).
static ONE_GUEST: Mutex<()> = Mutex::new(());

/// The guest's test list: `$BCL_VM_TESTS` (which run.sh runs instead when
/// set), else tests/vm/guest-tests.sh.
fn test_list() -> PathBuf {
    match std::env::var_os("BCL_VM_TESTS") {
        Some(p) => PathBuf::from(p),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/vm/guest-tests.sh"),
    }
}

/// The number of tests in a guest test list: its lines that start with
/// `run ` (one test per line, as the list's header requires).
fn count_tests(list: &str) -> usize {
    list.lines().filter(|l| l.starts_with("run ")).count()
}

/// The guest's `guest-tests: ran N passed M` line, from run.sh's stderr,
/// where the guest console's lines start with `  | `.
fn guest_counts(stderr: &str) -> Option<&str> {
    stderr
        .lines()
        .rev()
        .filter_map(|l| l.strip_prefix("  | "))
        .map(str::trim_end)
        .find(|l| l.starts_with("guest-tests: ran "))
}

/// Runs run.sh and returns its exit status and standard error (its
/// standard output is not used). The guest takes minutes and run.sh's
/// output is kept for the checks, so while it runs a spinner on this
/// process's standard error shows the latest `run.sh:` or guest test line;
/// the spinner is drawn only when standard error is a terminal, so CI logs
/// and captured runs see no change.
fn run_with_spinner(script: &Path, env: &[(&str, &str)]) -> (ExitStatus, String) {
    let visible = std::io::stderr().is_terminal();
    let target = if visible {
        ProgressDrawTarget::stderr()
    } else {
        ProgressDrawTarget::hidden()
    };
    let spinner = ProgressBar::with_draw_target(None, target);
    if let Ok(style) = ProgressStyle::with_template("{spinner} tests/vm/run.sh {elapsed} {msg}") {
        spinner.set_style(style);
    }
    if visible {
        spinner.enable_steady_tick(Duration::from_millis(200));
    }
    let mut child = Command::new("bash")
        .arg(script)
        .envs(env.iter().copied())
        // As Command::output had it: no standard input (QEMU's serial
        // console must not read the terminal).
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("cannot run bash");
    let mut pipe = BufReader::new(child.stderr.take().expect("piped stderr"));
    let mut stderr = String::new();
    let mut line = Vec::new();
    while pipe.read_until(b'\n', &mut line).unwrap_or(0) > 0 {
        let text = String::from_utf8_lossy(&line);
        let shown = text.trim_end();
        if shown.starts_with("run.sh:") || shown.contains("BCL-VM-TEST") {
            spinner.set_message(shown.trim_start_matches("  | ").to_string());
        }
        stderr.push_str(&text);
        line.clear();
    }
    let status = child.wait().expect("waiting for run.sh");
    spinner.finish_and_clear();
    (status, stderr)
}

#[test]
fn vfio_guest_runs_all_guest_tests() {
    run_guest("vfio", &test_list(), &[]);
}

#[test]
fn afxdp_binds_zero_copy_in_a_guest_with_a_newer_kernel() {
    let list = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/vm/afxdp-zc-tests.sh");
    let list_arg = list.to_string_lossy().into_owned();
    let Some(stderr) = run_guest(
        "AF_XDP zero-copy",
        &list,
        &[
            ("BCL_VM_KERNEL_SUITE", "trixie-backports"),
            ("BCL_VM_TESTS", &list_arg),
            ("BCL_VM_MIXED", "0"),
        ],
    ) else {
        return;
    };
    // The guest's tests check the mode themselves; this says it here too.
    let modes: Vec<&str> = stderr
        .lines()
        .filter_map(|l| l.split_once("BCL-VM-AFXDP-MODE: ").map(|(_, m)| m.trim()))
        .collect();
    assert!(!modes.is_empty(), "the guest reported no AF_XDP bind mode");
    for m in &modes {
        assert!(
            m.contains("zero-copy, "),
            "a queue was not bound zero-copy: {m}"
        );
    }
    eprintln!(
        "AF_XDP in the guest: {} binds, all zero-copy: {}",
        modes.len(),
        modes[0]
    );
}

/// Runs tests/vm/run.sh with `env` and the guest test list `list`, and
/// checks that the guest ran and passed every test of it; returns run.sh's
/// standard error (`None`: skipped, with `BCL_SKIP_PRIVILEGED=1`).
fn run_guest(what: &str, list: &Path, env: &[(&str, &str)]) -> Option<String> {
    if std::env::var("BCL_SKIP_PRIVILEGED").as_deref() == Ok("1") {
        eprintln!("SKIP {what} VM test (tests/vm/run.sh): BCL_SKIP_PRIVILEGED=1");
        return None;
    }
    let _one = ONE_GUEST.lock().unwrap_or_else(|e| e.into_inner());
    let euid = std::fs::metadata("/proc/self")
        .expect("reading /proc/self")
        .uid();
    assert_eq!(
        euid, 0,
        "the {what} VM test must run as root (it installs qemu-system-x86 and busybox-static \
         with apt-get and caches a kernel in /var/cache/bcl-vm); \
         set BCL_SKIP_PRIVILEGED=1 to skip it"
    );
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/vm/run.sh");
    assert!(script.exists(), "{} is missing", script.display());
    let expected = count_tests(
        &std::fs::read_to_string(list)
            .unwrap_or_else(|e| panic!("reading {}: {e}", list.display())),
    );
    assert!(expected > 0, "{} has no `run` line", list.display());
    let (status, stderr) = run_with_spinner(&script, env);
    // The harness's own summary lines (not the whole guest console).
    for line in stderr.lines().filter(|l| l.starts_with("run.sh:")) {
        eprintln!("{line}");
    }
    if !status.success() {
        let tail: Vec<&str> = stderr.lines().rev().take(80).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        panic!(
            "tests/vm/run.sh failed ({}); last lines:\n{}",
            status,
            tail.join("\n")
        );
    }
    assert!(
        stderr.contains("BCL-VM-RESULT: PASS"),
        "run.sh exited 0 without the guest's PASS marker"
    );
    let counts = guest_counts(&stderr).unwrap_or_else(|| {
        panic!("the guest did not say how many tests it ran (expected {expected})")
    });
    eprintln!("guest: {counts}; {} has {expected} tests", list.display());
    assert_eq!(
        counts,
        format!("guest-tests: ran {expected} passed {expected}"),
        "every test of {} must run and pass",
        list.display()
    );
    Some(stderr)
}

#[test]
fn guest_counts_are_read_from_the_console_only() {
    let stderr = "run.sh: FAIL: the guest reported 'guest-tests: ran 1 passed 1'\n  \
                  | BCL-VM-TEST PASS a\n  | guest-tests: ran 2 passed 1\r\n  | done\n";
    assert_eq!(guest_counts(stderr), Some("guest-tests: ran 2 passed 1"));
    assert_eq!(guest_counts("run.sh: guest-tests: ran 1 passed 1\n"), None);
    assert_eq!(
        count_tests("# run x\nrun a true\n  run b true\nrun c sh -c 'run d'\n"),
        2
    );
}
