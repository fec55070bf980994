//! `bcl-stat`: live counters of the BCL processes on this node, like `top`.
//!
//! ```text
//! bcl-stat                         # every second, redrawn in place
//! bcl-stat --once                  # one snapshot (no rates: they need two)
//! bcl-stat --once --json           # the same as one JSON object
//! bcl-stat --json --count 2        # two JSON lines a second apart (rates in the second)
//! bcl-stat --pid 1234 --addr 1.2   # only these processes
//! ```
//!
//! Every `bcl::Endpoint` publishes a statistics page
//! (`/dev/shm/bcl-stat-PID-NODE.PORT`, see `bcl::stats_page` and
//! `bcl_shm::stats_page`); this tool reads them consistently (a seqlock),
//! removes the pages of dead processes, notes pages it cannot read, and
//! shows per process and per peer the method, RTT, retransmissions, queue
//! depths, frames and bytes, and rates: the difference between two
//! readings of a page over the difference of the times the process
//! refreshed it.
//!
//! On a terminal the screen is redrawn in place (cursor home, each line
//! cleared to its end, the rest of the screen cleared: no flicker, and
//! nothing to restore on Ctrl-C); otherwise snapshots are plain text,
//! separated by a blank line.

use bcl::shm::stats_page::{
    monotonic_ns, port_words, scan, PageSnapshot, PeerRecord, Scan, PORT_COUNTERS,
};
use bcl::ProcessAddr;
use clap::Parser;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

#[derive(Parser, Debug)]
#[command(
    name = "bcl-stat",
    about = "Live counters of the BCL processes on this node (their statistics pages), like top"
)]
struct Args {
    /// Seconds between refreshes.
    #[arg(long, default_value_t = 1.0, value_parser = parse_interval)]
    interval: f64,
    /// Print one snapshot and exit.
    #[arg(long)]
    once: bool,
    /// Stop after this many snapshots (default: run until interrupted).
    #[arg(long)]
    count: Option<u64>,
    /// Print JSON: one object per snapshot, one per line.
    #[arg(long)]
    json: bool,
    /// Only the process with this pid (repeatable).
    #[arg(long)]
    pid: Vec<u32>,
    /// Only the endpoint with this address NODE.PORT (repeatable).
    #[arg(long)]
    addr: Vec<ProcessAddr>,
    /// Where the pages are (default: $BCL_STATS_DIR, else /dev/shm).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Do not remove the pages of dead processes (only note them).
    #[arg(long)]
    no_clean: bool,
}

fn parse_interval(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .parse()
        .map_err(|_| format!("{s:?} is not a number of seconds"))?;
    if v.is_finite() && v >= 0.01 {
        Ok(v)
    } else {
        Err("the interval must be at least 0.01 s".into())
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bcl-stat: {e}");
            ExitCode::from(2)
        }
    }
}

/// A page's identity across readings: a new process or endpoint at the
/// same file name starts its rates afresh.
type PageKey = (PathBuf, u32, u64, u64);

fn key(p: &PageSnapshot) -> PageKey {
    (
        p.path.clone(),
        p.identity.pid,
        p.identity.start_time,
        p.identity.created_mono_ns,
    )
}

fn run(args: &Args) -> Result<(), String> {
    let dir = args
        .dir
        .clone()
        .or_else(|| std::env::var_os("BCL_STATS_DIR").map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from(bcl::stats_page::DEFAULT_DIR));
    let count = if args.once {
        1
    } else {
        args.count.unwrap_or(u64::MAX)
    };
    let tty = !args.json && !args.once && std::io::stdout().is_terminal();
    let mut previous: HashMap<PageKey, PageSnapshot> = HashMap::new();
    let mut out = std::io::stdout().lock();
    if tty {
        // Clear once; later frames overwrite in place.
        write!(out, "\x1b[H\x1b[2J").map_err(|e| e.to_string())?;
    }
    for i in 0..count {
        if i > 0 {
            std::thread::sleep(Duration::from_secs_f64(args.interval));
        }
        let mut found =
            scan(&dir, !args.no_clean).map_err(|e| format!("reading {}: {e}", dir.display()))?;
        found.pages.retain(|p| {
            (args.pid.is_empty() || args.pid.contains(&p.identity.pid))
                && (args.addr.is_empty() || args.addr.contains(&p.identity.addr))
        });
        found
            .pages
            .sort_by_key(|p| (p.identity.pid, p.identity.addr, p.path.clone()));
        let now = monotonic_ns();
        let frame = if args.json {
            let mut s = snapshot_json(&dir, &found, &previous, now).to_string();
            s.push('\n');
            s
        } else {
            let text = snapshot_text(&dir, &found, &previous, now, args.interval);
            if tty {
                // Home, every line cleared to its end, the rest cleared.
                let mut f = String::from("\x1b[H");
                for line in text.lines() {
                    f.push_str(line);
                    f.push_str("\x1b[K\n");
                }
                f.push_str("\x1b[J");
                f
            } else if i > 0 {
                format!("\n{text}")
            } else {
                text
            }
        };
        // One write per frame, so the terminal never shows half of one.
        out.write_all(frame.as_bytes())
            .and_then(|()| out.flush())
            .map_err(|e| format!("writing: {e}"))?;
        previous = found.pages.into_iter().map(|p| (key(&p), p)).collect();
    }
    Ok(())
}

/// Per-second rate of a counter between two readings `dt` seconds apart.
fn rate(new: u64, old: u64, dt: f64) -> f64 {
    if dt > 0.0 {
        new.saturating_sub(old) as f64 / dt
    } else {
        0.0
    }
}

/// Seconds between two readings of one page (by the owner's refresh
/// times), if there is an earlier reading.
fn page_dt(p: &PageSnapshot, prev: Option<&PageSnapshot>) -> Option<f64> {
    let prev = prev?;
    Some(
        p.body
            .refresh_mono_ns
            .saturating_sub(prev.body.refresh_mono_ns) as f64
            / 1e9,
    )
}

/// The process-wide rates: messages, frames, retransmissions per second.
fn process_rates(p: &PageSnapshot, prev: &PageSnapshot, dt: f64) -> [(&'static str, f64); 5] {
    let (a, b) = (&p.body.port, &prev.body.port);
    [
        ("messages_sent", rate(a.messages_sent, b.messages_sent, dt)),
        (
            "messages_delivered",
            rate(a.messages_delivered, b.messages_delivered, dt),
        ),
        ("frames_sent", rate(a.frames_sent, b.frames_sent, dt)),
        (
            "frames_received",
            rate(a.frames_received, b.frames_received, dt),
        ),
        ("retransmits", rate(a.retransmits, b.retransmits, dt)),
    ]
}

/// A peer's rates: frames and bytes each way, retransmissions.
fn peer_rates(p: &PeerRecord, prev: &PeerRecord, dt: f64) -> [(&'static str, f64); 5] {
    let (a, b) = (&p.stats, &prev.stats);
    [
        ("frames_sent", rate(a.frames_sent, b.frames_sent, dt)),
        (
            "frames_received",
            rate(a.frames_received, b.frames_received, dt),
        ),
        ("bytes_sent", rate(a.bytes_sent, b.bytes_sent, dt)),
        (
            "bytes_received",
            rate(a.bytes_received, b.bytes_received, dt),
        ),
        ("retransmits", rate(a.retransmits, b.retransmits, dt)),
    ]
}

fn prev_peer(prev: Option<&PageSnapshot>, addr: ProcessAddr) -> Option<&PeerRecord> {
    prev?.body.peers.iter().find(|q| q.addr == addr)
}

fn method_name(p: &PageSnapshot, m: Option<u8>) -> Option<&str> {
    m.and_then(|m| p.identity.methods.get(usize::from(m)))
        .map(String::as_str)
}

fn rates_json(r: &[(&str, f64)]) -> Value {
    Value::Object(r.iter().map(|(k, v)| (k.to_string(), json!(v))).collect())
}

/// One snapshot as the JSON object of the contract (`--json`).
fn snapshot_json(
    dir: &std::path::Path,
    s: &Scan,
    previous: &HashMap<PageKey, PageSnapshot>,
    now: u64,
) -> Value {
    let processes: Vec<Value> = s
        .pages
        .iter()
        .map(|p| {
            let prev = previous.get(&key(p));
            let dt = page_dt(p, prev);
            let b = &p.body;
            let mut port: serde_json::Map<String, Value> = PORT_COUNTERS
                .iter()
                .zip(port_words(&b.port))
                .map(|(k, v)| (k.to_string(), json!(v)))
                .collect();
            port.insert("bad_frames_total".into(), json!(b.port.bad_frames.total()));
            let methods: Vec<Value> = p
                .identity
                .methods
                .iter()
                .zip(&b.methods)
                .map(|(name, m)| {
                    json!({
                        "method": name,
                        "rx_frames": m.rx_frames,
                        "tx_frames": m.tx_frames,
                        "rx_foreign": m.rx_foreign,
                        "rx_malformed": m.rx_malformed,
                        "tx_errors": m.tx_errors,
                    })
                })
                .collect();
            let peers: Vec<Value> = b
                .peers
                .iter()
                .map(|q| {
                    let rates = match (dt, prev_peer(prev, q.addr)) {
                        (Some(dt), Some(old)) => rates_json(&peer_rates(q, old, dt)),
                        _ => Value::Null,
                    };
                    json!({
                        "addr": q.addr.to_string(),
                        "method": method_name(p, q.method),
                        "link": q.link,
                        "srtt_ns": q.srtt.map(|d| d.as_nanos() as u64),
                        "rto_ns": q.rto.as_nanos() as u64,
                        "retransmits": q.stats.retransmits,
                        "frames_sent": q.stats.frames_sent,
                        "frames_received": q.stats.frames_received,
                        "bytes_sent": q.stats.bytes_sent,
                        "bytes_received": q.stats.bytes_received,
                        "duplicates": q.stats.duplicates,
                        "ring_full_drops": q.stats.ring_full_drops,
                        "queued": q.queued,
                        "in_flight": q.in_flight,
                        "congestion": q.congestion.map(|c| json!({
                            "window": c.window,
                            "base_rtt_ns": c.base_rtt.map(|d| d.as_nanos() as u64),
                            "queueing_delay_ns": c.queueing_delay.map(|d| d.as_nanos() as u64),
                            "pacing_bytes_per_s": c.pacing_rate,
                        })),
                        "idle_ms": ms(b.refresh_mono_ns.saturating_sub(q.last_active_mono_ns)),
                        "rates": rates,
                    })
                })
                .collect();
            let rates = match (dt, prev) {
                (Some(dt), Some(old)) => {
                    let mut r = rates_json(&process_rates(p, old, dt));
                    r["interval_s"] = json!(dt);
                    r
                }
                _ => Value::Null,
            };
            json!({
                "page": p.path.display().to_string(),
                "pid": p.identity.pid,
                "start_time": p.identity.start_time,
                "addr": p.identity.addr.to_string(),
                "job": format!("{:08x}", p.identity.job.0),
                "mode": p.identity.mode.name(),
                "methods": p.identity.methods,
                "interval_ms": p.identity.interval.as_secs_f64() * 1e3,
                "seq": p.seq,
                "refreshes": b.refreshes,
                "age_ms": ms(now.saturating_sub(b.refresh_mono_ns)),
                "endpoint_now_ns": b.endpoint_now_ns,
                "engine": {
                    "rounds": b.engine.rounds,
                    "waits": b.engine.waits,
                    "woken_by_frames": b.engine.woken_by_frames,
                    "woken_by_timer": b.engine.woken_by_timer,
                },
                "outstanding_sends": b.outstanding_sends,
                "ring_free_blocks": b.ring_free_blocks,
                "ring_blocks": b.ring_blocks,
                "peers_total": b.peers_total,
                "port": port,
                "method_counters": methods,
                "rates": rates,
                "peers": peers,
            })
        })
        .collect();
    json!({
        "tool": "bcl-stat",
        "version": 1,
        "dir": dir.display().to_string(),
        "time_mono_ns": now,
        "processes": processes,
        "notes": s.notes.iter().map(|(p, n)| json!({"page": p.display().to_string(), "note": n})).collect::<Vec<_>>(),
        "removed": s.removed.iter().map(|(p, pid)| json!({"page": p.display().to_string(), "pid": pid})).collect::<Vec<_>>(),
    })
}

fn ms(ns: u64) -> f64 {
    (ns as f64 / 1e4).round() / 100.0
}

/// A count with an SI suffix (`1.2M`), at most 6 characters.
fn si(v: f64) -> String {
    let (v, unit) = if v >= 1e12 {
        (v / 1e12, "T")
    } else if v >= 1e9 {
        (v / 1e9, "G")
    } else if v >= 1e6 {
        (v / 1e6, "M")
    } else if v >= 1e4 {
        (v / 1e3, "K")
    } else {
        return format!("{}", v.round() as u64);
    };
    if v >= 100.0 {
        format!("{v:.0}{unit}")
    } else {
        format!("{v:.1}{unit}")
    }
}

/// A duration as `850ns`, `12.5us`, `3.1ms`, `2.0s`.
fn dur(ns: u64) -> String {
    let v = ns as f64;
    if v < 1e3 {
        format!("{ns}ns")
    } else if v < 1e6 {
        format!("{:.1}us", v / 1e3)
    } else if v < 1e9 {
        format!("{:.1}ms", v / 1e6)
    } else {
        format!("{:.1}s", v / 1e9)
    }
}

/// One snapshot as text: a line per process, an indented line per peer,
/// then notes and removals.
fn snapshot_text(
    dir: &std::path::Path,
    s: &Scan,
    previous: &HashMap<PageKey, PageSnapshot>,
    now: u64,
    interval: f64,
) -> String {
    let mut t = String::new();
    let _ = writeln!(
        t,
        "bcl-stat: {} BCL endpoint{} in {} (every {interval} s; rates need two readings)",
        s.pages.len(),
        if s.pages.len() == 1 { "" } else { "s" },
        dir.display(),
    );
    for p in &s.pages {
        let prev = previous.get(&key(p));
        let dt = page_dt(p, prev);
        let b = &p.body;
        let r = |i: usize| match (dt, prev) {
            (Some(dt), Some(old)) => si(process_rates(p, old, dt)[i].1),
            _ => "-".into(),
        };
        let _ = writeln!(t);
        let _ = writeln!(
            t,
            "{:>7} {:<9} {:<8} {:<9} {:<10} {:>6} {:>5} {:>9} {:>7} {:>7} {:>7} {:>7} {:>6} {:>6} {:>5}",
            "PID", "ADDR", "JOB", "MODE", "METHODS", "AGE", "OUT", "RING", "TXMSG/s", "RXMSG/s", "TXFRM/s", "RXFRM/s", "RETX", "TMOUT", "BAD"
        );
        let _ = writeln!(
            t,
            "{:>7} {:<9} {:<8} {:<9} {:<10} {:>6} {:>5} {:>9} {:>7} {:>7} {:>7} {:>7} {:>6} {:>6} {:>5}",
            p.identity.pid,
            p.identity.addr.to_string(),
            format!("{:08x}", p.identity.job.0),
            p.identity.mode.name(),
            p.identity.methods.join(","),
            dur(now.saturating_sub(b.refresh_mono_ns)),
            si(b.outstanding_sends as f64),
            format!("{}/{}", b.ring_free_blocks, b.ring_blocks),
            r(0),
            r(1),
            r(2),
            r(3),
            si(b.port.retransmits as f64),
            si(b.port.timeouts as f64),
            si(b.port.bad_frames.total() as f64),
        );
        let _ = writeln!(
            t,
            "        messages {} sent, {} delivered, {} failed; frames {} sent, {} received; engine {} rounds, {} sleeps",
            si(b.port.messages_sent as f64),
            si(b.port.messages_delivered as f64),
            si(b.port.messages_failed as f64),
            si(b.port.frames_sent as f64),
            si(b.port.frames_received as f64),
            si(b.engine.rounds as f64),
            si(b.engine.waits as f64),
        );
        if b.peers.is_empty() {
            let _ = writeln!(t, "        no peers");
            continue;
        }
        let _ = writeln!(
            t,
            "        {:<9} {:<7} {:>8} {:>8} {:>6} {:>5} {:>5} {:>5} {:>7} {:>7} {:>7} {:>7} {:>7} {:>7} {:>7} {:>5} {:>6}",
            "PEER", "METHOD", "SRTT", "RTO", "RETX", "QUEUE", "FLIGHT", "CWND", "QDELAY", "TXFRM", "RXFRM", "TXBYTES", "RXBYTES", "TXB/s", "RXB/s", "DROP", "IDLE"
        );
        for q in &b.peers {
            let pr = match (dt, prev_peer(prev, q.addr)) {
                (Some(dt), Some(old)) => Some(peer_rates(q, old, dt)),
                _ => None,
            };
            let pr = |i: usize| pr.map_or("-".into(), |r| si(r[i].1));
            let _ = writeln!(
                t,
                "        {:<9} {:<7} {:>8} {:>8} {:>6} {:>5} {:>5} {:>5} {:>7} {:>7} {:>7} {:>7} {:>7} {:>7} {:>7} {:>5} {:>6}",
                q.addr.to_string(),
                method_name(p, q.method).unwrap_or("-"),
                q.srtt.map_or("-".into(), |d| dur(d.as_nanos() as u64)),
                dur(q.rto.as_nanos() as u64),
                si(q.stats.retransmits as f64),
                si(f64::from(q.queued)),
                si(f64::from(q.in_flight)),
                q.congestion.map_or("-".into(), |c| c.window.to_string()),
                q.congestion
                    .and_then(|c| c.queueing_delay)
                    .map_or("-".into(), |d| dur(d.as_nanos() as u64)),
                si(q.stats.frames_sent as f64),
                si(q.stats.frames_received as f64),
                si(q.stats.bytes_sent as f64),
                si(q.stats.bytes_received as f64),
                pr(2),
                pr(3),
                si((q.stats.duplicates + q.stats.ring_full_drops) as f64),
                dur(b.refresh_mono_ns.saturating_sub(q.last_active_mono_ns)),
            );
        }
        if b.peers_total > b.peers.len() as u64 {
            let _ = writeln!(
                t,
                "        ... {} more peers (the page lists the {} most recently active)",
                b.peers_total - b.peers.len() as u64,
                b.peers.len()
            );
        }
    }
    for (path, note) in &s.notes {
        let _ = writeln!(t, "note: {}: {note}", path.display());
    }
    for (path, pid) in &s.removed {
        let _ = writeln!(t, "removed: {} (process {pid} is dead)", path.display());
    }
    t
}
