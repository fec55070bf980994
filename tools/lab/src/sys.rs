//! Running `ip` and friends, finding namespaces and processes.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::LabError;

/// Where `ip netns` keeps named namespaces.
pub(crate) const NETNS_DIR: &str = "/run/netns";

/// Renders a command line for messages.
pub(crate) fn render(cmd: &Command) -> String {
    let mut s = cmd.get_program().to_string_lossy().into_owned();
    for a in cmd.get_args() {
        s.push(' ');
        s.push_str(&a.to_string_lossy());
    }
    s
}

/// Runs `cmd` to completion; on failure the error names the command and
/// carries its stderr. Returns stdout.
pub(crate) fn run(cmd: &mut Command) -> Result<String, LabError> {
    let line = render(cmd);
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|e| LabError::Io {
            context: format!("cannot run `{line}`"),
            source: e,
        })?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(LabError::Command {
            command: line,
            status: out.status.to_string(),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        })
    }
}

/// Runs `ip ARGS...`.
pub(crate) fn ip<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> Result<String, LabError> {
    run(Command::new("ip").args(args))
}

/// Named network namespaces (the entries of /run/netns).
pub(crate) fn list_netns() -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(NETNS_DIR)
        .map(|d| {
            d.filter_map(|e| e.ok())
                .filter_map(|e| e.file_name().into_string().ok())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// Whether the named namespace exists.
pub(crate) fn netns_exists(name: &str) -> bool {
    Path::new(NETNS_DIR).join(name).exists()
}

/// The argument vector of a process, if it is alive and readable.
pub(crate) fn cmdline(pid: u32) -> Option<Vec<String>> {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    if raw.is_empty() {
        return None; // zombie or kernel thread
    }
    Some(
        raw.split(|b| *b == 0)
            .filter(|s| !s.is_empty())
            .map(|s| String::from_utf8_lossy(s).into_owned())
            .collect(),
    )
}

/// Whether `pid` is alive (a zombie counts as gone).
pub(crate) fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => {
            // state is the field after the ")" that closes the command name
            let state = s
                .rsplit_once(')')
                .and_then(|(_, r)| r.split_whitespace().next());
            !matches!(state, Some("Z") | Some("X") | None)
        }
        Err(_) => false,
    }
}

/// Whether `argv` is an impairment bridge of the lab `prefix`.
pub(crate) fn is_bridge_of(argv: &[String], prefix: &str) -> bool {
    argv.len() >= 2
        && argv[1] == "impair"
        && argv
            .windows(2)
            .any(|w| w[0] == "--prefix" && w[1] == prefix)
}

/// All live impairment bridges of the lab `prefix`, found through /proc.
pub(crate) fn scan_bridges(prefix: &str) -> Vec<u32> {
    let mut v = Vec::new();
    if let Ok(d) = std::fs::read_dir("/proc") {
        for e in d.flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
                continue;
            };
            if let Some(argv) = cmdline(pid) {
                if is_bridge_of(&argv, prefix) && alive(pid) {
                    v.push(pid);
                }
            }
        }
    }
    v
}

/// Sends a signal with kill(1) (keeps `unsafe` out of process handling).
pub(crate) fn signal(pid: u32, sig: &str) {
    let _ = Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

/// Stops processes: SIGTERM, up to `grace` to exit, then SIGKILL. Returns the
/// pids still alive at the end (should be none).
pub(crate) fn stop_processes(pids: &[u32], grace: Duration) -> Vec<u32> {
    let live: Vec<u32> = pids.iter().copied().filter(|p| alive(*p)).collect();
    if live.is_empty() {
        return live;
    }
    for p in &live {
        signal(*p, "TERM");
    }
    let t = Instant::now();
    while t.elapsed() < grace && live.iter().any(|p| alive(*p)) {
        std::thread::sleep(Duration::from_millis(10));
    }
    let rest: Vec<u32> = live.iter().copied().filter(|p| alive(*p)).collect();
    for p in &rest {
        signal(*p, "KILL");
    }
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(2) && rest.iter().any(|p| alive(*p)) {
        std::thread::sleep(Duration::from_millis(10));
    }
    rest.into_iter().filter(|p| alive(*p)).collect()
}

/// Pids of processes whose network namespace is `ns` (`ip netns pids`).
pub(crate) fn netns_pids(ns: &str) -> Vec<u32> {
    ip(&["netns", "pids", ns])
        .map(|s| {
            s.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// Whether we run as root (effective uid 0), from /proc/self/status.
pub(crate) fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).map(|u| u == "0"))
        })
        .unwrap_or(false)
}

/// Finds an executable in PATH.
pub(crate) fn which(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join(name))
            .find(|f| f.is_file())
    })
}
