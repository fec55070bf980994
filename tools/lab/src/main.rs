//! `bcl-lab`: build, inspect and remove test clusters of network namespaces.

use std::collections::HashSet;
use std::io::{IsTerminal, Write};
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use bcl_lab::{Lab, LabError, LabReport};
use clap::{Parser, Subcommand};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

#[derive(Parser)]
#[command(
    name = "bcl-lab",
    version,
    about = "Test clusters on one machine: namespaces, veth links, switches, routers and impaired links",
    long_about = "Builds a test cluster on one machine from a TOML topology (see configs/lab/ and \
tools/lab/README.md): every node is a network namespace, links are veth pairs, a switch is a Linux \
bridge in its own namespace, routers forward IPv4 between subnets, and impaired links pass through \
an impairment bridge process (seeded loss, duplication, delay, jitter, reordering, corruption, rate \
limit, per direction).\n\nEvery object carries the lab's prefix: the `--prefix` option, else \
$BCL_LAB_PREFIX, else the file's `prefix`, else `bl-` + the file name. Namespaces are named \
PREFIX.NODE, PREFIX.SWITCH and PREFIX.imp.LINK; state (pid files, counters, logs) lives in \
/run/bcl-lab/PREFIX/. Needs root."
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(clap::Args)]
struct LabArgs {
    /// Topology file (TOML).
    file: PathBuf,
    /// Prefix of every object of the lab (overrides $BCL_LAB_PREFIX and the file's `prefix`).
    #[arg(long)]
    prefix: Option<String>,
}

#[derive(Subcommand)]
enum Cmd {
    /// Create the lab: namespaces, links, switches, addresses, routes, impairment bridges.
    ///
    /// Refuses if any namespace of the lab (PREFIX.*) or its state directory
    /// already exists; run `down` first. On failure, removes what it created.
    Up(LabArgs),
    /// Remove the lab and anything a crashed run left behind.
    ///
    /// Stops the lab's impairment bridges (pid files and a /proc scan), ends
    /// processes left in its namespaces, deletes every namespace named PREFIX.*
    /// and the state directory. Succeeds quietly when nothing is there.
    Down(LabArgs),
    /// Run a command inside a node's namespace; its exit status is passed through.
    ///
    /// Example: bcl-lab exec configs/lab/pair.toml a -- ip -br addr
    Exec {
        #[command(flatten)]
        lab: LabArgs,
        /// Node name.
        node: String,
        /// The command and its arguments, after `--`.
        #[arg(last = true, required = true, num_args = 1..)]
        cmd: Vec<String>,
    },
    /// Print nodes, namespaces, interfaces, MACs, addresses, routes, links,
    /// impairment settings and live impairment counters.
    Show {
        #[command(flatten)]
        lab: LabArgs,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Run an impairment bridge (started by `up` inside the middle namespace).
    #[command(hide = true)]
    Impair {
        /// The lab's prefix (lets `down` find this process).
        #[arg(long)]
        prefix: String,
        /// The impaired link.
        #[arg(long)]
        link: String,
        /// Spec file written by `up`.
        #[arg(long)]
        spec: PathBuf,
    },
    /// Test helper: send numbered UDP datagrams.
    #[command(hide = true)]
    UdpSend {
        /// Destination address.
        #[arg(long)]
        to: SocketAddr,
        /// Datagrams to send (ignored with --secs).
        #[arg(long, default_value_t = 1000)]
        count: u64,
        /// Payload bytes (at least 8: the sequence number).
        #[arg(long, default_value_t = 64)]
        size: usize,
        /// Flood: send as fast as possible for this many seconds.
        #[arg(long)]
        secs: Option<f64>,
        /// Pause between datagrams, microseconds.
        #[arg(long, default_value_t = 0)]
        gap_us: u64,
    },
    /// Test helper: receive numbered UDP datagrams and report counts as JSON.
    ///
    /// Prints `ready` once bound, then a JSON line when the flow has been
    /// idle for --idle-ms after the first datagram (or --wait-ms passed
    /// without any).
    #[command(hide = true)]
    UdpRecv {
        /// Address to bind.
        #[arg(long)]
        bind: SocketAddr,
        /// How long to wait for the first datagram, ms.
        #[arg(long, default_value_t = 10_000)]
        wait_ms: u64,
        /// End after this long without a datagram, ms.
        #[arg(long, default_value_t = 1_000)]
        idle_ms: u64,
    },
}

/// The progress bar of `up`: on standard error when it is a terminal,
/// hidden otherwise (scripts and tests see the same output as before).
fn up_bar() -> ProgressBar {
    let target = if std::io::stderr().is_terminal() {
        ProgressDrawTarget::stderr()
    } else {
        ProgressDrawTarget::hidden()
    };
    let bar = ProgressBar::with_draw_target(None, target);
    if let Ok(style) = ProgressStyle::with_template("bcl-lab up [{bar:32}] {pos}/{len} {msg}") {
        bar.set_style(style.progress_chars("=> "));
    }
    bar
}

fn load(a: &LabArgs) -> Result<Lab, LabError> {
    let lab = Lab::load(&a.file)?;
    match &a.prefix {
        Some(p) => lab.with_prefix(p),
        None => Ok(lab),
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("bcl-lab: error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> Result<ExitCode, Box<dyn std::error::Error>> {
    match cli.cmd {
        Cmd::Up(a) => {
            let lab = load(&a)?;
            let bar = up_bar();
            let r = lab.up_observed(&mut |s| {
                bar.set_length(s.total as u64);
                bar.set_message(s.what.to_string());
                bar.set_position(s.done as u64);
            });
            bar.finish_and_clear();
            r?;
            println!(
                "lab {} is up: {} node(s); `bcl-lab show {}` for details",
                lab.prefix(),
                lab.nodes().len(),
                a.file.display()
            );
        }
        Cmd::Down(a) => {
            let lab = load(&a)?;
            lab.down()?;
        }
        Cmd::Exec { lab, node, cmd } => {
            let lab = load(&lab)?;
            let mut c = lab.command(&node, &cmd[0])?;
            if !lab.is_up() {
                return Err(LabError::NotUp {
                    prefix: lab.prefix().to_string(),
                }
                .into());
            }
            c.args(&cmd[1..]);
            let e = c.exec();
            return Err(format!("cannot run ip netns exec: {e}").into());
        }
        Cmd::Show { lab, json } => {
            let r = load(&lab)?.report();
            if json {
                println!("{}", serde_json::to_string_pretty(&r)?);
            } else {
                print_report(&r);
            }
        }
        Cmd::Impair { spec, .. } => {
            bcl_lab::internal::run_bridge(&spec)?;
        }
        Cmd::UdpSend {
            to,
            count,
            size,
            secs,
            gap_us,
        } => udp_send(to, count, size, secs, gap_us)?,
        Cmd::UdpRecv {
            bind,
            wait_ms,
            idle_ms,
        } => udp_recv(bind, wait_ms, idle_ms)?,
    }
    Ok(ExitCode::SUCCESS)
}

fn print_report(r: &LabReport) {
    println!(
        "lab {} ({}): {}",
        r.prefix,
        r.file,
        if r.up { "up" } else { "down" }
    );
    println!("state dir: {}", r.state_dir);
    for n in &r.nodes {
        println!(
            "node {}{}  netns {}",
            n.name,
            if n.router { " (router)" } else { "" },
            n.netns
        );
        for i in &n.interfaces {
            println!(
                "  {:<15} {}  {:<18} link {} ({}{})  peer {}  queues {}  mtu {}",
                i.ifname,
                i.mac,
                i.ipv4.map(|a| a.to_string()).unwrap_or_else(|| "-".into()),
                i.link,
                if i.segment != i.link {
                    format!("switch {}", i.segment)
                } else {
                    "point-to-point".into()
                },
                if i.impaired { ", impaired" } else { "" },
                i.peer,
                i.queues,
                i.mtu
            );
        }
        for rt in &n.routes {
            println!("  route {} via {} dev {}", rt.dest, rt.via, rt.dev);
        }
    }
    for s in &r.switches {
        println!(
            "switch {}  netns {}  bridge {}  subnet {}",
            s.name, s.netns, s.bridge, s.subnet
        );
        if let Some(shape) = &s.shape {
            println!("  shaped: {} on the egress of every port", shape.describe());
        }
        for (node, port) in &s.ports {
            println!("  port {port} -> {node}");
        }
    }
    for l in &r.links {
        println!(
            "link {}: {} <-> {}  subnet {}  queues {}  mtu {}",
            l.name, l.endpoints[0], l.endpoints[1], l.subnet, l.queues, l.mtu
        );
        if let Some(i) = &l.impair {
            println!(
                "  impaired via netns {} (seed {}, bridge {})",
                i.netns,
                i.seed,
                i.pid
                    .map(|p| format!("pid {p}"))
                    .unwrap_or_else(|| "not running".into())
            );
            println!(
                "  {} -> {}: {}",
                l.endpoints[0],
                l.endpoints[1],
                i.forward.describe()
            );
            println!(
                "  {} -> {}: {}",
                l.endpoints[1],
                l.endpoints[0],
                i.reverse.describe()
            );
            for c in r.counters.iter().filter(|c| c.link == l.name) {
                println!(
                    "  counters {} -> {}: in {} out {} dropped {} duplicated {} delayed {} reordered {} corrupted {} rate_limited {} queued {} tx_errors {} kernel_drops {}",
                    c.from,
                    c.to,
                    c.frames_in,
                    c.frames_out,
                    c.dropped,
                    c.duplicated,
                    c.delayed,
                    c.reordered,
                    c.corrupted,
                    c.rate_limited,
                    c.queued,
                    c.tx_errors,
                    c.kernel_drops
                );
            }
        }
    }
}

fn udp_send(
    to: SocketAddr,
    count: u64,
    size: usize,
    secs: Option<f64>,
    gap_us: u64,
) -> Result<(), Box<dyn std::error::Error>> {
    let bind: SocketAddr = if to.is_ipv4() {
        "0.0.0.0:0".parse()?
    } else {
        "[::]:0".parse()?
    };
    let s = UdpSocket::bind(bind)?;
    let mut buf = vec![0u8; size.max(8)];
    let t0 = Instant::now();
    let limit = secs.map(Duration::from_secs_f64);
    let (mut sent, mut errors) = (0u64, 0u64);
    let mut seq = 0u64;
    loop {
        match limit {
            Some(l) if t0.elapsed() >= l => break,
            None if seq >= count => break,
            _ => {}
        }
        buf[..8].copy_from_slice(&seq.to_be_bytes());
        seq += 1;
        match s.send_to(&buf, to) {
            Ok(_) => sent += 1,
            Err(_) => errors += 1,
        }
        if gap_us > 0 {
            std::thread::sleep(Duration::from_micros(gap_us));
        }
    }
    let j = serde_json::json!({"sent": sent, "errors": errors, "secs": t0.elapsed().as_secs_f64()});
    println!("{j}");
    Ok(())
}

fn udp_recv(
    bind: SocketAddr,
    wait_ms: u64,
    idle_ms: u64,
) -> Result<(), Box<dyn std::error::Error>> {
    let s = UdpSocket::bind(bind)?;
    bcl_lab::internal::set_rcvbuf(s.as_raw_fd(), 16 << 20);
    {
        let mut o = std::io::stdout().lock();
        writeln!(o, "ready {}", s.local_addr()?)?;
        o.flush()?;
    }
    let mut buf = vec![0u8; 65_536];
    let mut seen: HashSet<u64> = HashSet::new();
    let (mut received, mut duplicates, mut out_of_order, mut bytes) = (0u64, 0u64, 0u64, 0u64);
    let mut max_seq: Option<u64> = None;
    let mut first: Option<Instant> = None;
    let mut last = Instant::now();
    s.set_read_timeout(Some(Duration::from_millis(wait_ms.max(1))))?;
    loop {
        match s.recv_from(&mut buf) {
            Ok((n, _)) => {
                last = Instant::now();
                if first.is_none() {
                    first = Some(last);
                    s.set_read_timeout(Some(Duration::from_millis(idle_ms.max(1))))?;
                }
                received += 1;
                bytes += n as u64;
                if n >= 8 {
                    let seq = u64::from_be_bytes(buf[..8].try_into().expect("8 bytes"));
                    if !seen.insert(seq) {
                        duplicates += 1;
                    } else if max_seq.is_some_and(|m| seq < m) {
                        out_of_order += 1;
                    }
                    max_seq = Some(max_seq.map_or(seq, |m| m.max(seq)));
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                break;
            }
            Err(e) => return Err(e.into()),
        }
    }
    let secs = first
        .map(|f| last.duration_since(f).as_secs_f64())
        .unwrap_or(0.0);
    let j = serde_json::json!({
        "received": received, "unique": seen.len(), "duplicates": duplicates,
        "out_of_order": out_of_order, "bytes": bytes, "secs": secs,
    });
    println!("{j}");
    Ok(())
}
