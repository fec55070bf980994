//! Where the two ends run: pinning to CPUs, and `--lab FILE --nodes A,B`,
//! which starts this same tool twice inside two `bcl-lab` namespaces (the
//! first node serves, the second connects) and relays their output.

use bcl_lab::{Lab, LabGuard};
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ExitCode, Stdio};
use std::time::{Duration, Instant};

/// Pins the calling thread to `cpu`.
pub fn pin_current_thread(cpu: usize) -> Result<(), String> {
    let mut set = nix::sched::CpuSet::new();
    set.set(cpu)
        .map_err(|e| format!("--pin: CPU {cpu} is out of range: {e}"))?;
    nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set)
        .map_err(|e| format!("--pin: cannot pin to CPU {cpu}: {e}"))
}

/// Parses `--pin`: a comma-separated list of CPU numbers.
pub fn parse_cpus(text: &str) -> Result<Vec<usize>, String> {
    let cpus = text
        .split(',')
        .map(|c| {
            c.trim()
                .parse::<usize>()
                .map_err(|_| format!("{c:?} is not a CPU number (example: --pin 0,1)"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    if cpus.is_empty() {
        return Err("no CPU given".into());
    }
    Ok(cpus)
}

/// CPU of the serving end (first of the list) and of the connecting end
/// (second, or the first again).
pub fn split_pins(cpus: Option<&[usize]>) -> (Option<usize>, Option<usize>) {
    match cpus {
        None | Some([]) => (None, None),
        Some([one]) => (Some(*one), Some(*one)),
        Some([a, b, ..]) => (Some(*a), Some(*b)),
    }
}

/// Parses `--nodes A,B`.
pub fn parse_nodes(text: &str) -> Result<(String, String), String> {
    match text.split(',').collect::<Vec<_>>().as_slice() {
        [a, b] if !a.is_empty() && !b.is_empty() && a != b => Ok((a.to_string(), b.to_string())),
        _ => Err(format!(
            "--nodes {text:?}: expected two different node names, e.g. --nodes a,b"
        )),
    }
}

/// The command line of this run without the options that choose where the
/// ends run (`--lab`, `--nodes`, `--local`, `--pin`, `--serve`, `--connect`)
/// and, for the server, without the output files.
fn passthrough(args: &[String], server: bool) -> Vec<String> {
    let mut with_value = vec!["--lab", "--nodes", "--pin", "--connect"];
    if server {
        with_value.extend(["--json", "--hgrm", "--plot"]);
    }
    let flags = ["--local", "--serve"];
    let mut out = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let name = a.split('=').next().unwrap_or(a);
        if flags.contains(&a.as_str()) {
            continue;
        }
        if with_value.contains(&name) {
            if !a.contains('=') {
                it.next();
            }
            continue;
        }
        out.push(a.clone());
    }
    out
}

/// Runs the tool's two ends in lab namespaces: `nodes.0` serves, `nodes.1`
/// connects. Brings the lab up (and down afterwards) if it is not up.
/// Returns the client's exit status, or the server's if the client
/// succeeded and the server did not.
pub fn run_in_lab(
    file: &Path,
    nodes: &(String, String),
    pins: Option<&[usize]>,
) -> Result<ExitCode, String> {
    let lab = Lab::load(file).map_err(|e| e.to_string())?;
    for n in [&nodes.0, &nodes.1] {
        lab.netns(n).map_err(|e| format!("--nodes: {e}"))?;
    }
    let _guard = if lab.is_up() {
        None
    } else {
        Some(LabGuard::new(lab.clone()).map_err(|e| format!("bringing the lab up: {e}"))?)
    };
    let exe = std::env::current_exe().map_err(|e| format!("own executable: {e}"))?;
    let exe = exe.to_string_lossy().into_owned();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (server_pin, client_pin) = split_pins(pins);

    let mut server_cmd = lab.command(&nodes.0, &exe).map_err(|e| e.to_string())?;
    server_cmd.args(passthrough(&args, true)).arg("--serve");
    if let Some(c) = server_pin {
        server_cmd.args(["--pin", &c.to_string()]);
    }
    let mut server = server_cmd
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("starting the server in node {}: {e}", nodes.0))?;
    let stdout = server.stdout.take().ok_or("no server stdout")?;
    let mut lines = BufReader::new(stdout).lines();
    let descriptor = match lines.next() {
        Some(Ok(line)) if line.starts_with("listening: ") => {
            line["listening: ".len()..].trim().to_string()
        }
        other => {
            let status = wait_briefly(&mut server);
            return Err(format!(
                "the server in node {} did not print `listening: DESCRIPTOR` (got {other:?}; exit {status:?})",
                nodes.0
            ));
        }
    };
    let relay = std::thread::spawn(move || {
        for line in lines.map_while(Result::ok) {
            println!("[server] {line}");
        }
    });
    let mut client_cmd = lab.command(&nodes.1, &exe).map_err(|e| e.to_string())?;
    client_cmd
        .args(passthrough(&args, false))
        .args(["--connect", &descriptor]);
    if let Some(c) = client_pin {
        client_cmd.args(["--pin", &c.to_string()]);
    }
    let client_status = client_cmd
        .status()
        .map_err(|e| format!("starting the client in node {}: {e}", nodes.1))?;
    if !client_status.success() {
        // The run is over: do not leave the server waiting for a client.
        let _ = server.kill();
    }
    let server_status = wait_briefly(&mut server);
    let _ = relay.join();
    let _ = std::io::stdout().flush();
    let code = |s: Option<std::process::ExitStatus>| {
        s.and_then(|s| s.code())
            .map_or(2u8, |c| u8::try_from(c).unwrap_or(2))
    };
    let client_code = code(Some(client_status));
    Ok(ExitCode::from(if client_code != 0 {
        client_code
    } else {
        code(server_status)
    }))
}

/// Waits up to 30 s for `child`, then kills it.
fn wait_briefly(child: &mut Child) -> Option<std::process::ExitStatus> {
    let end = Instant::now() + Duration::from_secs(30);
    while Instant::now() < end {
        match child.try_wait() {
            Ok(Some(s)) => return Some(s),
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(_) => return None,
        }
    }
    let _ = child.kill();
    child.wait().ok()
}

/// Runs `f` on a new thread pinned to `cpu` (if any).
pub fn spawn_pinned<T: Send + 'static>(
    cpu: Option<usize>,
    f: impl FnOnce() -> T + Send + 'static,
) -> std::thread::JoinHandle<Result<T, String>> {
    std::thread::spawn(move || {
        if let Some(c) = cpu {
            pin_current_thread(c)?;
        }
        Ok(f())
    })
}

/// Prints the server's `listening:` line (exactly one line, flushed).
pub fn announce(descriptor: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "listening: {descriptor}");
    let _ = out.flush();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn ends_get_the_run_options_without_the_placement_ones() {
        let args = s(&[
            "--method",
            "udp",
            "--lab",
            "f.toml",
            "--nodes=a,b",
            "--pin",
            "0,1",
            "--json",
            "o.json",
            "--plot=o.svg",
            "--local",
            "--sizes",
            "64",
        ]);
        assert_eq!(
            passthrough(&args, false),
            s(&[
                "--method",
                "udp",
                "--json",
                "o.json",
                "--plot=o.svg",
                "--sizes",
                "64"
            ])
        );
        assert_eq!(
            passthrough(&args, true),
            s(&["--method", "udp", "--sizes", "64"])
        );
    }

    #[test]
    fn placement_values_are_checked() {
        assert_eq!(parse_cpus("0,1").unwrap(), vec![0, 1]);
        assert!(parse_cpus("0,x").unwrap_err().contains("not a CPU"));
        assert_eq!(split_pins(Some(&[3])), (Some(3), Some(3)));
        assert_eq!(split_pins(Some(&[0, 1])), (Some(0), Some(1)));
        assert_eq!(parse_nodes("a,b").unwrap(), ("a".into(), "b".into()));
        assert!(parse_nodes("a").unwrap_err().contains("two different"));
        assert!(parse_nodes("a,a").is_err());
    }
}
