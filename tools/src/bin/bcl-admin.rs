//! `bcl-admin`: an operator's commands to a running BCL job, through the
//! rendezvous of the `bcl-run` that launched it.
//!
//! - `bcl-admin jobs` lists this user's running jobs;
//! - `bcl-admin status` lists the job's nodes, their ranks, and which are
//!   detached;
//! - `bcl-admin detach NODE` cuts NODE off the job: every rank elsewhere
//!   sees its processes go down at once (`PeerDown`) and exchanges nothing
//!   more with them, and its own ranks stop talking to the other nodes;
//!   the others go on without it;
//! - `bcl-admin rejoin NODE` brings it back: the ranks on both sides ping
//!   each other and report each other up (`PeerUp`), and traffic flows
//!   again.
//!
//! NODE is a node's name as the job knows it (a lab node, a host name: the
//! ranks' `BCL_NODE`) or its number (the NODE of `NODE.PORT` addresses).
//! The job is found through the file `bcl-run` leaves in
//! `$XDG_RUNTIME_DIR/bcl-jobs` (else `/tmp/bcl-jobs-UID`); `--job` picks one
//! when several run, and `--rendezvous` with `BCL_JOB_SECRET` reaches a
//! job whose file is not on this host.

use bcl::cluster::bootstrap::RendezvousAddr;
use bcl::cluster::control::{self, AdminReply, AdminRequest, JobFile};
use clap::{Parser, Subcommand};
use std::process::ExitCode;
use std::time::Duration;

#[derive(Parser, Debug)]
#[command(
    name = "bcl-admin",
    about = "Detach a node from a running BCL job and bring it back, through the job's rendezvous",
    after_help = "NODE is a node's name as the job knows it (a lab node, a host: the ranks' BCL_NODE) or its number (the NODE of NODE.PORT addresses); `bcl-admin status` lists them."
)]
struct Args {
    /// The job (its id, or a unique prefix of it; default: the only job of
    /// this user that runs). `bcl-admin jobs` lists them.
    #[arg(long, global = true)]
    job: Option<String>,
    /// Reach the job's rendezvous at this address (`tcp:HOST:PORT` or
    /// `unix:PATH`) instead of through its job file; needs --job and the
    /// job's secret in BCL_JOB_SECRET.
    #[arg(long, global = true, requires = "job")]
    rendezvous: Option<String>,
    /// Print the rendezvous' answer as JSON.
    #[arg(long, global = true)]
    json: bool,
    /// Seconds to wait for the rendezvous.
    #[arg(long, global = true, default_value_t = 5)]
    timeout: u64,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// List this user's running jobs.
    Jobs,
    /// List the job's nodes, their ranks, and which are detached.
    Status,
    /// Cut NODE off the job: the other nodes see its ranks go down at once
    /// and go on without them.
    Detach {
        /// The node's name or number.
        node: String,
    },
    /// Bring NODE back: its ranks and the others' report each other up.
    Rejoin {
        /// The node's name or number.
        node: String,
    },
}

/// The job to talk to: its id, rendezvous and secret.
fn find_job(args: &Args) -> Result<(String, RendezvousAddr, String), String> {
    if let Some(at) = &args.rendezvous {
        let job = args.job.clone().unwrap_or_default();
        let secret = std::env::var("BCL_JOB_SECRET")
            .map_err(|_| "--rendezvous needs the job's secret in BCL_JOB_SECRET".to_string())?;
        let at = at.parse::<RendezvousAddr>().map_err(|e| e.to_string())?;
        return Ok((job, at, secret));
    }
    let jobs = JobFile::running();
    let dir = JobFile::dir();
    let chosen: Vec<&JobFile> = match &args.job {
        Some(id) => jobs
            .iter()
            .filter(|j| j.job.starts_with(id.as_str()))
            .collect(),
        None => jobs.iter().collect(),
    };
    match chosen.as_slice() {
        [one] => {
            let at = one
                .rendezvous
                .parse::<RendezvousAddr>()
                .map_err(|e| format!("job {}: {e}", one.job))?;
            Ok((one.job.clone(), at, one.secret.clone()))
        }
        [] => Err(match &args.job {
            Some(id) => format!(
                "no running job {id:?} of this user in {} (`bcl-admin jobs` lists them)",
                dir.display()
            ),
            None => format!(
                "no running job of this user in {} (jobs started by bcl-run appear there)",
                dir.display()
            ),
        }),
        several => Err(format!(
            "{} jobs run; pick one with --job: {}",
            several.len(),
            several
                .iter()
                .map(|j| j.job.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}

fn print_nodes(reply: &AdminReply) {
    for n in &reply.nodes {
        let ranks: Vec<String> = n.ranks.iter().map(u32::to_string).collect();
        println!(
            "node {:<4} {:<16} ranks {:<12} {}",
            n.node,
            n.name,
            ranks.join(","),
            if n.detached { "DETACHED" } else { "attached" }
        );
    }
}

fn run(args: &Args) -> Result<(), String> {
    if let Command::Jobs = args.command {
        let jobs = JobFile::running();
        if args.json {
            let v: Vec<serde_json::Value> = jobs
                .iter()
                .map(|j| {
                    serde_json::json!({"job": j.job, "ranks": j.ranks, "launcher_pid": j.launcher_pid,
                                       "rendezvous": j.rendezvous, "command": j.command})
                })
                .collect();
            println!("{}", serde_json::Value::Array(v));
        } else if jobs.is_empty() {
            println!("no running job (in {})", JobFile::dir().display());
        } else {
            for j in &jobs {
                println!(
                    "{}  {} ranks  bcl-run pid {}  {}",
                    j.job, j.ranks, j.launcher_pid, j.command
                );
            }
        }
        return Ok(());
    }
    let (job, at, secret) = find_job(args)?;
    let request = match &args.command {
        Command::Jobs => unreachable!("handled above"),
        Command::Status => AdminRequest::Status,
        Command::Detach { node } => AdminRequest::Detach(node.clone()),
        Command::Rejoin { node } => AdminRequest::Rejoin(node.clone()),
    };
    let reply = control::request(
        &at,
        &secret,
        &job,
        request.clone(),
        Duration::from_secs(args.timeout.max(1)),
    )
    .map_err(|e| format!("job {job}: {e}"))?;
    if args.json {
        println!(
            "{}",
            serde_json::to_string(&reply).map_err(|e| e.to_string())?
        );
        return Ok(());
    }
    match (&request, reply.node) {
        (AdminRequest::Detach(name), Some(n)) => {
            println!("detached node {n} ({name}): told {} ranks", reply.told)
        }
        (AdminRequest::Rejoin(name), Some(n)) => {
            println!("rejoined node {n} ({name}): told {} ranks", reply.told)
        }
        _ => {}
    }
    print_nodes(&reply);
    Ok(())
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bcl-admin: {e}");
            ExitCode::from(1)
        }
    }
}
