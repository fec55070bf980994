//! `bcl-run`: launches the processes of one job and runs its rendezvous.
//!
//! ```text
//! bcl-run -n 4 -- ./my-program ARGS                  # 4 ranks on this host
//! bcl-run --hosts a,b --per-node 2 -- ./my-program  # over ssh (--dry-run prints the commands)
//! bcl-run --lab configs/lab/mixed.toml --cluster configs/mixed.toml --per-node 2 -- ./prog
//! ```
//!
//! Ranks are laid out in blocks: ranks `0..K` on the first node, `K..2K` on
//! the second, and so on. Each rank gets `BCL_RANK`, `BCL_SIZE`,
//! `BCL_LOCAL_RANK`, `BCL_NODE`, `BCL_NODE_INDEX`, `BCL_JOB_ID`,
//! `BCL_JOB_SECRET`, `BCL_RENDEZVOUS`, `BCL_TIMEOUT_SECS`, `BCL_PROGRAM_HASH`
//! (of the program file, so ranks can check they run the same build),
//! `BCL_CLUSTER` with
//! `--cluster`, and `BCL_METHODS` when set here. Output lines are prefixed
//! with `[RANK] `. The exit status is the first failing rank's (128 + signal
//! for a rank killed by a signal); when a rank fails, the others are sent
//! SIGTERM (or go on, with `--keep-going`; with `--restart N` the failed
//! rank is started again, up to N times, with `BCL_RESTART=K`, and joins the
//! running job through the rendezvous). SIGINT and SIGTERM are forwarded to
//! every rank (each rank runs in its own process group, which gets the
//! signal). When every rank has
//! ended, the job's files left in /dev/shm (a killed rank's segment and
//! doorbell, a board not every member mapped) and the statistics pages of
//! dead processes are removed, and listed on stderr (local and lab jobs).
//!
//! Over ssh, each rank runs under a small remote shell wrapper
//! ([`REMOTE_WRAPPER`]): the job secret travels on the ssh session's
//! standard input (never on a command line, where `ps` on the remote host
//! would show it), and the wrapper sends the rank SIGTERM when that input
//! closes. `bcl-run` forwards a signal (or stops the ranks after a failure)
//! by closing it, so the rank's own exit status still comes back through
//! ssh; a second signal kills the local ssh processes. `--ssh-command`
//! replaces `ssh` (e.g. `ssh -p 2222 -i KEY`).

use bcl::cluster::bootstrap::{new_secret, RendezvousAddr, RendezvousServer};
use bcl::cluster::resources::ClusterConfig;
use bcl_lab::{Lab, LabGuard};
use bcl_tools::job::file_hash;
use clap::Parser;
use nix::sys::signal::Signal;
use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook::iterator::Signals;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::sync::mpsc;
use std::time::Duration;

#[derive(Parser, Debug)]
#[command(
    name = "bcl-run",
    about = "Launch the processes of a BCL job (locally, over ssh, or in bcl-lab namespaces) and run its rendezvous"
)]
struct Args {
    /// Number of processes (default: --per-node times the number of nodes;
    /// locally: 2).
    #[arg(short = 'n', long = "np")]
    np: Option<u32>,
    /// Processes per node (default: -n spread over the nodes).
    #[arg(long)]
    per_node: Option<u32>,
    /// Hosts to start ranks on over ssh, comma-separated.
    #[arg(long, value_delimiter = ',', conflicts_with = "lab")]
    hosts: Vec<String>,
    /// A file with one host per line (`#` comments), like --hosts.
    #[arg(long, conflicts_with_all = ["lab", "hosts"])]
    hostfile: Option<PathBuf>,
    /// Resource database: its nodes are the hosts (their `host`, or the
    /// lab nodes with --lab), and ranks get BCL_CLUSTER.
    #[arg(long)]
    cluster: Option<PathBuf>,
    /// Start the ranks in the namespaces of this bcl-lab topology (brought
    /// up and down if it is not up).
    #[arg(long)]
    lab: Option<PathBuf>,
    /// Lab nodes to use (default: the cluster file's nodes).
    #[arg(long, value_delimiter = ',', requires = "lab")]
    nodes: Vec<String>,
    /// Print the command line of every rank and exit.
    #[arg(long)]
    dry_run: bool,
    /// Seconds the ranks have to find each other.
    #[arg(long, default_value_t = 30)]
    timeout: u64,
    /// When a rank fails (exits non-zero or is killed), report it and let
    /// the others run to their end instead of stopping them. The exit
    /// status is still the first failing rank's. The survivors see the
    /// dead rank's operations fail (liveness: `BCL_LIVENESS`).
    #[arg(long)]
    keep_going: bool,
    /// Restart a rank that fails (exits non-zero or is killed) up to N
    /// times, as the same rank at the same BCL address, with
    /// `BCL_RESTART=K` (1 for the first restart) in its environment; the
    /// other ranks go on. The new process joins again through the
    /// rendezvous, and its peers take it as a new incarnation: what was in
    /// flight with the old one fails, new traffic flows. A rank that fails
    /// once more is handled as without --restart (see --keep-going).
    /// Rendezvous barriers do not tell a restarted rank's calls apart, so a
    /// program meant to be restarted should not use them.
    #[arg(long, value_name = "N", default_value_t = 0)]
    restart: u32,
    /// Address of this host that remote ranks reach the rendezvous at
    /// (ssh mode; default: this host's address on the default route).
    #[arg(long)]
    rendezvous_host: Option<String>,
    /// Extra environment for every rank, KEY=VALUE (repeatable).
    #[arg(long = "env")]
    envs: Vec<String>,
    /// The ssh command, split on whitespace (ssh mode), e.g. `ssh -p 2222
    /// -i ~/.ssh/cluster_key`. `-o BatchMode=yes` and the host follow.
    #[arg(long, default_value = "ssh")]
    ssh_command: String,
    /// Run the ranks as USER (a user name, or UID[:GID]) instead of as
    /// bcl-run's own user, with no supplementary groups (through
    /// `setpriv`). For a launcher that must be root, as in the lab (its
    /// namespaces): the ranks then run unprivileged, as a cluster's users'
    /// do, and reach the NICs only through the node daemons (`bcld`). The
    /// rendezvous socket is handed to that user; ranks prove themselves
    /// with the job's secret. Locally and in the lab, not over ssh (ranks
    /// there run as the ssh user).
    #[arg(long, value_name = "USER", conflicts_with_all = ["hosts", "hostfile"])]
    user: Option<String>,
    /// The program and its arguments.
    #[arg(last = true, required = true)]
    command: Vec<String>,
}

/// The uid and gid of `--user`: a user name, or UID[:GID] (the gid defaults
/// to the user's, else to the uid).
fn parse_user(text: &str) -> Result<(u32, u32), String> {
    use nix::unistd::User;
    let (name, group) = match text.split_once(':') {
        Some((n, g)) => (n, Some(g)),
        None => (text, None),
    };
    let uid_and_default_gid = match name.parse::<u32>() {
        Ok(uid) => {
            let gid = User::from_uid(uid.into())
                .ok()
                .flatten()
                .map_or(uid, |u| u.gid.as_raw());
            (uid, gid)
        }
        Err(_) => match User::from_name(name) {
            Ok(Some(u)) => (u.uid.as_raw(), u.gid.as_raw()),
            _ => {
                return Err(format!(
                    "--user {text}: no user {name:?} (give a user name or UID[:GID])"
                ))
            }
        },
    };
    let gid = match group {
        None => uid_and_default_gid.1,
        Some(g) => g
            .parse()
            .map_err(|_| format!("--user {text}: {g:?} is not a numeric GID"))?,
    };
    Ok((uid_and_default_gid.0, gid))
}

/// The command that runs `program` as `user` (uid, gid) with no
/// supplementary groups, or `program` itself without a user.
fn as_user(user: Option<(u32, u32)>, program: &str) -> (String, Vec<String>) {
    match user {
        Some((uid, gid)) => (
            "setpriv".into(),
            vec![
                format!("--reuid={uid}"),
                format!("--regid={gid}"),
                "--clear-groups".into(),
                "--".into(),
                program.into(),
            ],
        ),
        None => (program.into(), Vec::new()),
    }
}

/// A directory removed when dropped (the lab rendezvous socket's), also
/// when `bcl-run` returns early with an error.
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A file removed when dropped (the job file `bcl-admin` reads).
struct RemoveOnDrop(PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Where the ranks run.
enum Place {
    Local,
    Ssh(Vec<String>),
    Lab(Lab, Vec<String>),
}

/// One rank to start.
struct Rank {
    rank: u32,
    local: u32,
    node_index: u32,
    node: String,
}

fn fail(msg: impl std::fmt::Display) -> ExitCode {
    eprintln!("bcl-run: {msg}");
    ExitCode::from(2)
}

/// The program's file: as given if it has a '/', else found in PATH.
fn resolve(program: &str) -> Option<PathBuf> {
    if program.contains('/') {
        return std::fs::canonicalize(program).ok();
    }
    std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join(program))
            .find(|f| f.is_file())
    })
}

/// What runs each rank on a remote host (`sh -c WRAPPER bcl-rank env
/// KEY=VALUE... PROGRAM ARGS...`): reads the job secret from the first line
/// of standard input, starts the rank, and sends it SIGTERM when standard
/// input closes (`bcl-run` closing the session's input: a forwarded
/// signal) or the wrapper itself gets SIGHUP/SIGINT/SIGTERM; exits with the
/// rank's status. The watcher reads through a saved descriptor because a
/// background job's standard input is /dev/null in a non-interactive shell.
pub const REMOTE_WRAPPER: &str = concat!(
    "IFS= read -r BCL_JOB_SECRET || { echo 'bcl-run: no job secret on standard input' >&2; exit 111; }; ",
    "export BCL_JOB_SECRET; exec 3<&0; ",
    "\"$@\" </dev/null 3<&- & p=$!; ",
    "( while IFS= read -r _; do :; done <&3; kill -TERM \"$p\" 2>/dev/null ) >/dev/null 2>&1 & w=$!; ",
    "exec 3<&-; trap 'kill -TERM \"$p\" 2>/dev/null' HUP INT TERM; ",
    "while :; do wait \"$p\"; s=$?; kill -0 \"$p\" 2>/dev/null || break; done; ",
    "kill \"$w\" 2>/dev/null; exit \"$s\""
);

fn shell_quote(s: &str) -> String {
    if !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./:=,@+%".contains(&b))
    {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

fn main() -> ExitCode {
    // Take the signals we forward with handlers (signal-hook), not by
    // blocking them: a blocked mask is inherited by the ranks, which would
    // then never see the SIGTERM forwarded to them. Installed before any
    // rank starts; the ranks get the default dispositions back at exec.
    let forwarded = match Signals::new([SIGINT, SIGTERM]) {
        Ok(s) => s,
        Err(e) => return fail(format!("handling SIGINT and SIGTERM: {e}")),
    };
    let args = Args::parse();
    match run(args, forwarded) {
        Ok(code) => code,
        Err(e) => fail(e),
    }
}

fn run(args: Args, mut forwarded: Signals) -> Result<ExitCode, String> {
    let cluster = match &args.cluster {
        Some(p) => Some(ClusterConfig::load(p).map_err(|e| e.to_string())?),
        None => None,
    };
    let cluster_path = args
        .cluster
        .as_ref()
        .map(|p| std::fs::canonicalize(p).unwrap_or_else(|_| p.clone()));
    let mut hosts = args.hosts.clone();
    if let Some(f) = &args.hostfile {
        let text = std::fs::read_to_string(f).map_err(|e| format!("{}: {e}", f.display()))?;
        hosts.extend(
            text.lines()
                .map(|l| l.split('#').next().unwrap_or("").trim())
                .filter(|l| !l.is_empty())
                .map(str::to_string),
        );
        if hosts.is_empty() {
            return Err(format!("{}: no hosts", f.display()));
        }
    }
    let user = args.user.as_deref().map(parse_user).transpose()?;
    let place = if let Some(lab_file) = &args.lab {
        let lab = Lab::load(lab_file).map_err(|e| e.to_string())?;
        let nodes = if !args.nodes.is_empty() {
            args.nodes.clone()
        } else if let Some(c) = &cluster {
            c.nodes.iter().map(|n| n.name.clone()).collect()
        } else {
            return Err("--lab needs --nodes or --cluster (which lab nodes run ranks)".into());
        };
        for n in &nodes {
            lab.netns(n).map_err(|e| format!("--nodes: {e}"))?;
        }
        Place::Lab(lab, nodes)
    } else if !hosts.is_empty() {
        Place::Ssh(hosts)
    } else if let Some(c) = cluster.as_ref().filter(|c| !c.nodes.is_empty()) {
        // A cluster file without --lab: its nodes' hosts over ssh.
        Place::Ssh(c.nodes.iter().map(|n| n.host.clone()).collect())
    } else {
        Place::Local
    };
    let node_names: Vec<String> = match &place {
        Place::Local => vec!["local".into()],
        Place::Ssh(h) => match &cluster {
            Some(c) if c.nodes.len() == h.len() => c.nodes.iter().map(|n| n.name.clone()).collect(),
            _ => h.clone(),
        },
        Place::Lab(_, n) => n.clone(),
    };
    let n_nodes = node_names.len() as u32;
    let (np, per_node) = match (args.np, args.per_node) {
        (Some(n), Some(k)) => (n, k),
        (Some(n), None) => (n, n.div_ceil(n_nodes)),
        (None, Some(k)) => (k * n_nodes, k),
        (None, None) if matches!(place, Place::Local) => (2, 2),
        (None, None) => (n_nodes, 1),
    };
    if np == 0 || per_node == 0 {
        return Err("-n and --per-node must be at least 1".into());
    }
    if np > per_node * n_nodes {
        return Err(format!(
            "-n {np} does not fit {n_nodes} node(s) x --per-node {per_node}"
        ));
    }
    let ranks: Vec<Rank> = (0..np)
        .map(|r| Rank {
            rank: r,
            local: r % per_node,
            node_index: r / per_node,
            node: node_names[(r / per_node) as usize].clone(),
        })
        .collect();

    let program = &args.command[0];
    let program_file = resolve(program);
    let hash = match (&place, &program_file) {
        (_, Some(f)) => file_hash(f).map_err(|e| format!("{}: {e}", f.display()))?,
        (Place::Ssh(_), None) => "remote".into(),
        (_, None) => return Err(format!("{program}: no such program")),
    };
    let job_id = format!(
        "{}-{}",
        std::process::id(),
        nix::time::clock_gettime(nix::time::ClockId::CLOCK_REALTIME)
            .map(|t| t.tv_sec())
            .unwrap_or(0)
    );
    let secret = new_secret().map_err(|e| format!("job secret: {e}"))?;
    let timeout = Duration::from_secs(args.timeout);
    let _sock_dir: Option<TempDir>;
    let listen = match &place {
        Place::Local => RendezvousAddr::Tcp("127.0.0.1:0".into()),
        Place::Lab(..) => {
            let dir = std::env::temp_dir().join(format!("bcl-run-{job_id}"));
            std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
            let sock = RendezvousAddr::Unix(dir.join("rendezvous.sock"));
            _sock_dir = Some(TempDir(dir));
            sock
        }
        Place::Ssh(_) => RendezvousAddr::Tcp("0.0.0.0:0".into()),
    };
    let server = RendezvousServer::bind(&listen, &secret, &job_id, np, timeout)
        .map_err(|e| e.to_string())?;
    if let (Some((uid, gid)), RendezvousAddr::Unix(path)) = (user, server.addr()) {
        // The ranks' user must be able to connect (and reach the socket).
        std::os::unix::fs::chown(path, Some(uid), Some(gid))
            .map_err(|e| format!("handing {} to --user: {e}", path.display()))?;
        if let Some(dir) = path.parent() {
            std::fs::set_permissions(dir, std::os::unix::fs::PermissionsExt::from_mode(0o711))
                .map_err(|e| format!("opening {} to --user: {e}", dir.display()))?;
        }
    }
    let server = if args.restart > 0 {
        server.allow_rejoin()
    } else {
        server
    };
    let published = match (server.addr(), &place) {
        (RendezvousAddr::Tcp(a), Place::Ssh(_)) => {
            let port = a.rsplit(':').next().unwrap_or("0");
            let host = match &args.rendezvous_host {
                Some(h) => h.clone(),
                None => bcl::udp::local_ip("0.0.0.0".parse().expect("an address"))
                    .map_err(|e| format!("{} (use --rendezvous-host)", e.0))?
                    .to_string(),
            };
            RendezvousAddr::Tcp(format!("{host}:{port}"))
        }
        (a, _) => a.clone(),
    };

    let env_for = |r: &Rank, restart: u32| -> Vec<(String, String)> {
        let mut v = vec![
            ("BCL_RANK".to_string(), r.rank.to_string()),
            ("BCL_SIZE".into(), np.to_string()),
            ("BCL_LOCAL_RANK".into(), r.local.to_string()),
            ("BCL_NODE".into(), r.node.clone()),
            ("BCL_NODE_INDEX".into(), r.node_index.to_string()),
            ("BCL_JOB_ID".into(), job_id.clone()),
            ("BCL_JOB_SECRET".into(), secret.clone()),
            ("BCL_RENDEZVOUS".into(), published.to_string()),
            ("BCL_PROGRAM_HASH".into(), hash.clone()),
            ("BCL_TIMEOUT_SECS".into(), args.timeout.to_string()),
        ];
        if let Some(p) = &cluster_path {
            v.push(("BCL_CLUSTER".into(), p.display().to_string()));
        }
        if restart > 0 {
            v.push(("BCL_RESTART".into(), restart.to_string()));
        }
        if let Ok(m) = std::env::var("BCL_METHODS") {
            v.push(("BCL_METHODS".into(), m));
        }
        for e in &args.envs {
            if let Some((k, val)) = e.split_once('=') {
                v.push((k.to_string(), val.to_string()));
            }
        }
        v
    };
    let ssh: Vec<String> = args
        .ssh_command
        .split_whitespace()
        .map(str::to_string)
        .collect();
    if ssh.is_empty() {
        return Err("--ssh-command is empty".into());
    }
    let over_ssh = matches!(place, Place::Ssh(_));
    let command_for = |r: &Rank, restart: u32| -> Result<Command, String> {
        let env = env_for(r, restart);
        let mut c = match &place {
            Place::Local => {
                let (exe, pre) = as_user(user, program);
                let mut c = Command::new(exe);
                c.args(pre).args(&args.command[1..]);
                c
            }
            Place::Lab(lab, _) => {
                let exe = program_file
                    .as_ref()
                    .map(|p| p.display().to_string())
                    .unwrap_or(program.clone());
                let (exe, pre) = as_user(user, &exe);
                let mut c = lab.command(&r.node, &exe).map_err(|e| e.to_string())?;
                c.args(pre).args(&args.command[1..]);
                c
            }
            Place::Ssh(hosts) => {
                let host = &hosts[r.node_index as usize];
                let mut remote = vec![
                    "sh".to_string(),
                    "-c".into(),
                    shell_quote(REMOTE_WRAPPER),
                    "bcl-rank".into(),
                    "env".into(),
                ];
                // The secret goes on standard input, not here.
                remote.extend(
                    env.iter()
                        .filter(|(k, _)| k != "BCL_JOB_SECRET")
                        .map(|(k, v)| shell_quote(&format!("{k}={v}"))),
                );
                remote.extend(args.command.iter().map(|a| shell_quote(a)));
                let mut c = Command::new(&ssh[0]);
                c.args(&ssh[1..])
                    .args(["-o", "BatchMode=yes", host])
                    .arg(remote.join(" "));
                return Ok(c);
            }
        };
        c.envs(env);
        Ok(c)
    };

    if args.dry_run {
        for r in &ranks {
            let c = command_for(r, 0)?;
            let mut line: Vec<String> = Vec::new();
            if !matches!(place, Place::Ssh(_)) {
                line.extend(
                    env_for(r, 0)
                        .iter()
                        .map(|(k, v)| shell_quote(&format!("{k}={v}"))),
                );
            }
            line.push(shell_quote(&c.get_program().to_string_lossy()));
            line.extend(c.get_args().map(|a| shell_quote(&a.to_string_lossy())));
            println!("[{}] {}", r.rank, line.join(" "));
        }
        return Ok(ExitCode::SUCCESS);
    }

    let _guard = match &place {
        Place::Lab(lab, _) if !lab.is_up() => {
            Some(LabGuard::new(lab.clone()).map_err(|e| format!("bringing the lab up: {e}"))?)
        }
        _ => None,
    };
    // What `bcl-admin` needs to reach this job (removed when it ends).
    let job_file = bcl::cluster::control::JobFile {
        job: job_id.clone(),
        rendezvous: match server.addr() {
            RendezvousAddr::Tcp(a) if a.starts_with("0.0.0.0:") => {
                format!("tcp:127.0.0.1:{}", a.rsplit(':').next().unwrap_or("0"))
            }
            a => a.to_string(),
        },
        secret: secret.clone(),
        launcher_pid: std::process::id(),
        ranks: np,
        command: args.command.join(" "),
    };
    let _job_file = match job_file.write() {
        Ok(path) => Some(RemoveOnDrop(path)),
        Err(e) => {
            eprintln!("bcl-run: bcl-admin will not find this job: {e}");
            None
        }
    };
    std::thread::spawn(move || {
        if let Err(e) = server.serve() {
            eprintln!("bcl-run: {e}");
        }
    });

    // Over ssh: the standard input of every rank's session; closing it
    // stops the rank (see REMOTE_WRAPPER).
    let session_inputs: std::sync::Arc<std::sync::Mutex<Vec<std::process::ChildStdin>>> =
        Default::default();
    let (tx, rx) = mpsc::channel::<(u32, std::process::ExitStatus)>();
    let mut outputs = Vec::new();
    // Starts rank `r` (its `restart`-th restart; 0: its first start) and
    // returns its process id; its exit status arrives on `rx`.
    let mut spawn = |r: &Rank, restart: u32| -> Result<i32, String> {
        let mut c = command_for(r, restart)?;
        // Each rank leads its own process group: signals go to the rank
        // and everything it started.
        std::os::unix::process::CommandExt::process_group(&mut c, 0);
        c.stdin(if over_ssh {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
        let mut child = c
            .spawn()
            .map_err(|e| format!("starting rank {}: {e}", r.rank))?;
        if let Some(mut input) = child.stdin.take() {
            // The remote wrapper reads the secret, then holds the input
            // open until we close it (see REMOTE_WRAPPER).
            let _ = writeln!(input, "{secret}");
            if let Ok(mut l) = session_inputs.lock() {
                l.push(input);
            }
        }
        let rank = r.rank;
        if let Some(out) = child.stdout.take() {
            outputs.push(std::thread::spawn(move || prefix(rank, out, false)));
        }
        if let Some(err) = child.stderr.take() {
            outputs.push(std::thread::spawn(move || prefix(rank, err, true)));
        }
        let pid = child.id() as i32;
        let tx = tx.clone();
        std::thread::spawn(move || {
            if let Ok(status) = child.wait() {
                let _ = tx.send((rank, status));
            }
        });
        Ok(pid)
    };
    let mut pids: Vec<(u32, i32)> = Vec::new();
    for r in &ranks {
        match spawn(r, 0) {
            Ok(pid) => pids.push((r.rank, pid)),
            Err(e) => {
                for (_, pid) in &pids {
                    let _ =
                        nix::sys::signal::kill(nix::unistd::Pid::from_raw(-*pid), Signal::SIGTERM);
                }
                return Err(e);
            }
        }
    }
    let alive = std::sync::Arc::new(std::sync::Mutex::new(pids.clone()));
    // Stops the ranks still running: with `sig` locally; over ssh by
    // closing their sessions' input, then, the second time, by killing
    // the ssh processes.
    let stops = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
    let stop = {
        let alive = alive.clone();
        let inputs = session_inputs.clone();
        let stops = stops.clone();
        move |sig: Signal| {
            let list = alive.lock().map(|l| l.clone()).unwrap_or_default();
            let n = stops.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            if over_ssh && n == 0 {
                if let Ok(mut l) = inputs.lock() {
                    l.clear();
                }
                return list.len();
            }
            for (_, pid) in &list {
                let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(-pid), sig);
            }
            list.len()
        }
    };
    {
        let stop = stop.clone();
        std::thread::spawn(move || {
            for raw in forwarded.forever() {
                let Ok(sig) = Signal::try_from(raw) else {
                    continue;
                };
                let n = stop(sig);
                eprintln!("bcl-run: {sig}: forwarding to {n} rank(s)");
            }
        });
    }
    let keep_going = args.keep_going;
    let mut first_failure: Option<(u32, u8)> = None;
    let mut running = ranks.len();
    let mut restarts = vec![0u32; ranks.len()];
    while running > 0 {
        let Ok((rank, status)) = rx.recv() else { break };
        if let Ok(mut l) = alive.lock() {
            l.retain(|(r, _)| *r != rank);
        }
        let code = match (
            status.code(),
            std::os::unix::process::ExitStatusExt::signal(&status),
        ) {
            (Some(c), _) => c as u8,
            (None, Some(s)) => 128u8.wrapping_add(s as u8),
            _ => 1,
        };
        let stopping = stops.load(std::sync::atomic::Ordering::Relaxed) > 0;
        let done = &mut restarts[rank as usize];
        if code != 0 && *done < args.restart && !stopping {
            *done += 1;
            eprintln!(
                "bcl-run: rank {rank} failed ({status}); restarting it ({} of {})",
                *done, args.restart
            );
            match spawn(&ranks[rank as usize], *done) {
                Ok(pid) => {
                    if let Ok(mut l) = alive.lock() {
                        l.push((rank, pid));
                    }
                    continue;
                }
                // Handled as the failure it is: the others stop (or go on
                // with --keep-going).
                Err(e) => eprintln!("bcl-run: {e}"),
            }
        }
        running -= 1;
        if code != 0 && keep_going {
            eprintln!(
                "bcl-run: rank {rank} failed ({status}); the other ranks go on (--keep-going)"
            );
            first_failure.get_or_insert((rank, code));
        } else if code != 0 && first_failure.is_none() {
            first_failure = Some((rank, code));
            // Unless a stop is under way already (a forwarded signal: over
            // ssh, a second stop would kill the sessions, cutting the
            // ranks' last output).
            if stops.load(std::sync::atomic::Ordering::Relaxed) == 0 {
                eprintln!("bcl-run: rank {rank} failed ({status}); stopping the other ranks");
                stop(Signal::SIGTERM);
            }
        }
    }
    for o in outputs {
        let _ = o.join();
    }
    if matches!(place, Place::Local | Place::Lab(..)) {
        remove_leftovers(Path::new(SHM_DIR), &job_id);
    }
    Ok(match first_failure {
        Some((_, code)) => ExitCode::from(code.max(1)),
        None => ExitCode::SUCCESS,
    })
}

/// Where the ranks' shared-memory files live (the shm method's default).
const SHM_DIR: &str = "/dev/shm";

/// Removes the shared-memory files of job `job_id` from `dir` once all its
/// ranks have ended: a rank killed while it had a segment (or a board that
/// not every member mapped yet) leaves its file behind. Statistics pages
/// are named by process, not job: those of dead processes go too (the
/// sweep every page writer does at its start). Local and lab ranks share
/// this host's `dir`; over ssh every host has its own.
fn remove_leftovers(dir: &Path, job_id: &str) {
    let key = bcl::cluster::join::job_key(job_id).0;
    let prefixes = [
        format!("bcl-{key:08x}-"),
        format!("bcl-board-{key:08x}-"),
        format!("bcl-live-{key:08x}-"),
    ];
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut removed = Vec::new();
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if prefixes.iter().any(|p| name.starts_with(p)) && std::fs::remove_file(e.path()).is_ok() {
            removed.push(name);
        }
    }
    if let Ok(scan) = bcl::shm::stats_page::scan(dir, true) {
        removed.extend(
            scan.removed
                .iter()
                .filter_map(|(p, _)| Some(p.file_name()?.to_string_lossy().into_owned())),
        );
    }
    if !removed.is_empty() {
        removed.sort();
        eprintln!(
            "bcl-run: removed what the job left in {}: {}",
            dir.display(),
            removed.join(", ")
        );
    }
}

/// Copies `from` line by line to our stdout (or stderr), prefixed `[RANK] `.
fn prefix(rank: u32, from: impl std::io::Read, err: bool) {
    let r = BufReader::new(from);
    for line in r.split(b'\n') {
        let Ok(line) = line else { return };
        let text = String::from_utf8_lossy(&line);
        if err {
            let mut e = std::io::stderr().lock();
            let _ = writeln!(e, "[{rank}] {text}");
        } else {
            let mut o = std::io::stdout().lock();
            let _ = writeln!(o, "[{rank}] {text}");
            let _ = o.flush();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_user_is_a_name_or_numbers() {
        assert_eq!(parse_user("root").unwrap(), (0, 0));
        assert_eq!(parse_user("0").unwrap(), (0, 0));
        assert_eq!(parse_user("65534:100").unwrap(), (65534, 100));
        // A uid without an entry keeps its number as the gid.
        assert_eq!(parse_user("4000123").unwrap(), (4000123, 4000123));
        let e = parse_user("no-such-user-here").unwrap_err();
        assert!(e.contains(r#"no user "no-such-user-here""#), "{e}");
        let e = parse_user("65534:staff").unwrap_err();
        assert!(e.contains("not a numeric GID"), "{e}");
    }

    #[test]
    fn ranks_of_a_user_start_through_setpriv() {
        let (exe, pre) = as_user(Some((65534, 65534)), "/srv/prog");
        assert_eq!(exe, "setpriv");
        assert_eq!(
            pre,
            [
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                "--",
                "/srv/prog"
            ]
        );
        assert_eq!(
            as_user(None, "/srv/prog"),
            ("/srv/prog".to_string(), vec![])
        );
    }
}
