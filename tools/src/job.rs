//! The tools under `bcl-run`: when `BCL_RANK` is set, `bcl-pingpong` and
//! `bcl-bw` join the job (see `bcl::cluster::join`) instead of opening a
//! method themselves: rank 0 measures against rank 1 over the method the
//! job's policy chose for that pair (ranks 2 and up join and leave), so
//! the tools run across a real cluster the way applications do.
//!
//! ```text
//! bcl-run --hosts a,b -- bcl-pingpong --sizes 8,1K
//! bcl-run --lab configs/lab/mixed.toml --cluster configs/mixed.toml --nodes a1,a2 -- bcl-bw --verify
//! ```

use crate::bcl_transport::BclTransport;
use crate::end::{configure, EndSpec};
use crate::transport::BoxTransport;
use bcl::cluster::join::{join as join_job, JoinOptions};
use bcl::ProgressMode;
use std::sync::OnceLock;
use std::time::Duration;

static METHOD: OnceLock<String> = OnceLock::new();

/// 64-bit FNV-1a of a file, with its length: tells builds apart.
/// `bcl-run` puts the program's in `BCL_PROGRAM_HASH`, and a rank compares
/// it with its own executable's to check that every rank runs one build.
pub fn file_hash(path: &std::path::Path) -> std::io::Result<String> {
    let bytes = std::fs::read(path)?;
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in &bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    Ok(format!("{h:016x}-{}", bytes.len()))
}

/// The method name for reports: the method the job chose for rank 0 ↔
/// rank 1 when running under `bcl-run`, else `default` (the --method).
pub fn method_name(default: &'static str) -> &'static str {
    METHOD.get().map_or(default, String::as_str)
}

/// Where to write the --json report: under `bcl-run` only rank 0 writes
/// it (the receiver's verify counts travel to the sender, so rank 0's
/// report is complete); elsewhere `json` as given.
pub fn report_path(json: &Option<std::path::PathBuf>) -> Option<&std::path::PathBuf> {
    let rank = std::env::var("BCL_RANK").ok();
    match rank.as_deref() {
        None | Some("0") => json.as_ref(),
        Some(_) => None,
    }
}

/// This process's end of a measurement under `bcl-run`.
pub enum JobEnd {
    /// Rank 0: measures, towards rank 1.
    Client(BoxTransport),
    /// Rank 1: echoes / receives.
    Server(BoxTransport),
    /// Any other rank: nothing to do.
    Idle,
}

/// Joins the job if started by `bcl-run` (`BCL_RANK` set); `None`
/// otherwise. The first message (rank 0 to rank 1) opens the link, so its
/// method is known before the measurement starts; it is printed and used
/// in the report.
pub fn join(spec: &EndSpec) -> Result<Option<JobEnd>, String> {
    if std::env::var_os("BCL_RANK").is_none() {
        return Ok(None);
    }
    let rto_min = spec.rto_min;
    let congestion = spec.congestion;
    let mut joined = join_job(JoinOptions {
        timeout: Duration::from_secs(30),
        mode: if spec.busy_poll {
            ProgressMode::BusyPoll
        } else {
            ProgressMode::Blocking
        },
        configure: Box::new(move |cfg, mtu| {
            configure(cfg, mtu, rto_min);
            if let Some(mode) = congestion {
                cfg.congestion.mode = mode;
            }
        }),
        ..JoinOptions::default()
    })
    .map_err(|e| e.to_string())?;
    for n in &joined.notes {
        eprintln!("# note: {n}");
    }
    if joined.info.size < 2 {
        return Err("a measurement needs at least 2 ranks (bcl-run -n 2)".into());
    }
    let wait = Duration::from_secs(30);
    let ep = &mut joined.endpoint;
    let (peer, end) = match joined.info.rank {
        0 => {
            let peer = joined.addrs[1];
            ep.send_blocking(peer, b"bcl-job-hello", wait)
                .map_err(|e| format!("first message to rank 1: {e}"))?;
            (peer, 0)
        }
        1 => {
            let d = ep
                .recv_blocking(wait)
                .map_err(|e| format!("first message from rank 0: {e}"))?;
            ep.release(d).map_err(|e| e.to_string())?;
            (joined.addrs[0], 1)
        }
        _ => return Ok(Some(JobEnd::Idle)),
    };
    let link = ep.link(peer);
    let (method, reason) = match link {
        Some(r) => (r.method.unwrap_or_else(|| "none".into()), r.reason),
        None => ("none".into(), "no link".into()),
    };
    println!("# job: rank 0 <-> rank 1 over {method} ({reason})");
    let _ = METHOD.set(method);
    let ep = joined.endpoint;
    Ok(Some(if end == 0 {
        JobEnd::Client(Box::new(BclTransport::new(ep, Some(peer))))
    } else {
        JobEnd::Server(Box::new(BclTransport::new(ep, None)))
    }))
}
