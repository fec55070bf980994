//! Bootstrap: how the processes of a job learn each other's rank, address
//! and descriptor table at start-up.
//!
//! - **Identity** ([`JobInfo::from_env`]): `BCL_RANK`, `BCL_SIZE`,
//!   `BCL_LOCAL_RANK`, `BCL_NODE`, `BCL_JOB_ID` (set by `bcl-run`), or under
//!   Slurm `SLURM_PROCID`, `SLURM_NTASKS`, `SLURM_LOCALID`, `SLURM_JOB_ID`,
//!   `SLURMD_NODENAME`; or, started by hydra's `mpiexec` or Slurm's
//!   `srun --mpi=pmi2` (`PMI_FD` set, no rendezvous, no static file), from
//!   PMI-2 ([`super::pmi2`], [`JobInfo::new`]).
//! - **Rendezvous** ([`RendezvousServer`], [`exchange`]): a key-value
//!   exchange over a stream socket (`tcp:HOST:PORT`, or `unix:PATH`, which
//!   crosses network namespaces) that `bcl-run` starts on the launch host.
//!   Every rank sends one line of JSON: protocol version, job id, the job's
//!   secret, rank, size, process address and descriptor table; once all
//!   ranks are in, each gets the whole table of tables. The secret
//!   (`BCL_JOB_SECRET`, 128 random bits) is compared in constant time; a
//!   wrong secret, another job id, another protocol version, a rank out of
//!   range or twice, and ranks that never show up within the timeout are
//!   each a clear error on both sides, never a hang. The connection stays
//!   open for [`Session::barrier`].
//! - **Static** ([`StaticJob`]): a TOML file lists every rank's address and
//!   descriptors; nothing is exchanged.

use super::descriptor::DescriptorTable;
use bcl_core::ProcessAddr;
use serde::{Deserialize, Serialize};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// Version of the rendezvous protocol.
pub const PROTOCOL_VERSION: u32 = 1;
/// Longest line accepted on the rendezvous socket.
const MAX_LINE: usize = 1 << 20;

/// A bootstrap failure, for a person.
#[derive(Debug, thiserror::Error)]
pub enum BootstrapError {
    /// The environment does not say who this process is.
    #[error("job identity: {0}")]
    Identity(String),
    /// The rendezvous refused this process or failed.
    #[error("rendezvous: {0}")]
    Rendezvous(String),
    /// Nothing within the time limit.
    #[error("rendezvous: {0}")]
    Timeout(String),
    /// The PMI-2 launcher (hydra's `mpiexec`, Slurm's `srun --mpi=pmi2`)
    /// refused or failed.
    #[error("PMI-2: {0}")]
    Pmi(#[from] super::pmi2::Pmi2Error),
    /// A static job file cannot be used.
    #[error("static job file {file}: {message}")]
    Static {
        /// The file.
        file: PathBuf,
        /// Why.
        message: String,
    },
}

/// Who this process is in its job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobInfo {
    /// Rank, `0..size`.
    pub rank: u32,
    /// Processes in the job.
    pub size: u32,
    /// Rank among the job's processes on this node.
    pub local_rank: u32,
    /// The node's name in the cluster configuration, if known.
    pub node: Option<String>,
    /// The job's id.
    pub job_id: String,
}

fn env_u32(
    get: &dyn Fn(&str) -> Option<String>,
    name: &str,
) -> Result<Option<u32>, BootstrapError> {
    match get(name) {
        None => Ok(None),
        Some(v) => v
            .trim()
            .parse()
            .map(Some)
            .map_err(|_| BootstrapError::Identity(format!("{name}={v:?} is not a number"))),
    }
}

impl JobInfo {
    /// An identity given by a launcher (PMI-2: rank and size from
    /// `fullinit`, the local rank from the placement of the ranks, the job
    /// id from `job-getid`); the rank must be below the size.
    pub fn new(
        rank: u32,
        size: u32,
        local_rank: u32,
        node: Option<String>,
        job_id: String,
    ) -> Result<JobInfo, BootstrapError> {
        if size == 0 || rank >= size || local_rank > rank {
            return Err(BootstrapError::Identity(format!(
                "rank {rank} (local rank {local_rank}) is not below the job size {size}"
            )));
        }
        Ok(JobInfo {
            rank,
            size,
            local_rank,
            node,
            job_id,
        })
    }

    /// Reads the identity from the environment (see the module
    /// documentation): `BCL_*` first, then Slurm's variables.
    pub fn from_env() -> Result<JobInfo, BootstrapError> {
        Self::from_lookup(&|k| std::env::var(k).ok())
    }

    /// Like [`from_env`](Self::from_env) with another source of variables.
    pub fn from_lookup(get: &dyn Fn(&str) -> Option<String>) -> Result<JobInfo, BootstrapError> {
        let (rank, size, local, job, node) = if get("BCL_RANK").is_some() {
            (
                env_u32(get, "BCL_RANK")?,
                env_u32(get, "BCL_SIZE")?,
                env_u32(get, "BCL_LOCAL_RANK")?,
                get("BCL_JOB_ID"),
                get("BCL_NODE"),
            )
        } else if get("SLURM_PROCID").is_some() {
            (
                env_u32(get, "SLURM_PROCID")?,
                env_u32(get, "SLURM_NTASKS")?,
                env_u32(get, "SLURM_LOCALID")?,
                get("SLURM_JOB_ID"),
                get("BCL_NODE").or_else(|| get("SLURMD_NODENAME")),
            )
        } else {
            return Err(BootstrapError::Identity(
                "neither BCL_RANK (set by bcl-run), SLURM_PROCID nor PMI_FD (mpiexec, srun --mpi=pmi2) is set: start the program with bcl-run or a PMI-2 launcher".into(),
            ));
        };
        let rank = rank.unwrap_or(0);
        let size = size.ok_or_else(|| {
            BootstrapError::Identity("the job size (BCL_SIZE or SLURM_NTASKS) is not set".into())
        })?;
        if size == 0 || rank >= size {
            return Err(BootstrapError::Identity(format!(
                "rank {rank} is not below the job size {size}"
            )));
        }
        Ok(JobInfo {
            rank,
            size,
            local_rank: local.unwrap_or(0),
            node,
            job_id: job.unwrap_or_else(|| "0".into()),
        })
    }
}

/// Where the rendezvous listens: `tcp:HOST:PORT` or `unix:PATH`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RendezvousAddr {
    /// A TCP address.
    Tcp(String),
    /// A Unix socket path (reachable from every network namespace).
    Unix(PathBuf),
}

impl std::fmt::Display for RendezvousAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RendezvousAddr::Tcp(a) => write!(f, "tcp:{a}"),
            RendezvousAddr::Unix(p) => write!(f, "unix:{}", p.display()),
        }
    }
}

impl std::str::FromStr for RendezvousAddr {
    type Err = BootstrapError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if let Some(a) = s.strip_prefix("tcp:") {
            Ok(RendezvousAddr::Tcp(a.to_string()))
        } else if let Some(p) = s.strip_prefix("unix:") {
            Ok(RendezvousAddr::Unix(PathBuf::from(p)))
        } else {
            Err(BootstrapError::Rendezvous(format!(
                "{s:?} is not tcp:HOST:PORT or unix:PATH"
            )))
        }
    }
}

pub(super) trait Stream: Read + Write + Send {
    /// Limits how long a read waits.
    fn set_timeout(&self, t: Option<Duration>) -> std::io::Result<()>;
    /// Limits how long a write waits.
    fn set_write_limit(&self, t: Option<Duration>) -> std::io::Result<()>;
    fn try_clone_box(&self) -> std::io::Result<Box<dyn Stream>>;
}

impl Stream for TcpStream {
    fn set_timeout(&self, t: Option<Duration>) -> std::io::Result<()> {
        self.set_read_timeout(t)
    }
    fn set_write_limit(&self, t: Option<Duration>) -> std::io::Result<()> {
        self.set_write_timeout(t)
    }
    fn try_clone_box(&self) -> std::io::Result<Box<dyn Stream>> {
        Ok(Box::new(self.try_clone()?))
    }
}

impl Stream for UnixStream {
    fn set_timeout(&self, t: Option<Duration>) -> std::io::Result<()> {
        self.set_read_timeout(t)
    }
    fn set_write_limit(&self, t: Option<Duration>) -> std::io::Result<()> {
        self.set_write_timeout(t)
    }
    fn try_clone_box(&self) -> std::io::Result<Box<dyn Stream>> {
        Ok(Box::new(self.try_clone()?))
    }
}

/// A fresh random job secret: 128 bits as 32 hex digits.
pub fn new_secret() -> std::io::Result<String> {
    let mut b = [0u8; 16];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut b)?;
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
}

/// Compares two secrets in time independent of where they differ.
pub fn secrets_equal(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let mut diff = (a.len() ^ b.len()) as u8 | u8::from(a.len() != b.len());
    for i in 0..a.len().max(b.len()) {
        diff |= a.get(i).copied().unwrap_or(0) ^ b.get(i).copied().unwrap_or(0);
    }
    diff == 0
}

#[derive(Serialize, Deserialize)]
struct Hello {
    bcl_rendezvous: u32,
    job: String,
    secret: String,
    rank: u32,
    size: u32,
    addr: String,
    table: serde_json::Value,
}

/// One rank as the rendezvous reports it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Member {
    /// Its rank.
    pub rank: u32,
    /// Its BCL process address (`NODE.PORT`).
    pub addr: String,
    /// Its descriptor table.
    pub table: DescriptorTable,
}

#[derive(Serialize, Deserialize)]
struct Reply {
    ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    error: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    members: Vec<Member>,
}

#[derive(Default)]
pub(super) struct State {
    pub(super) members: Vec<Option<Member>>,
    failed: Option<String>,
    barriers: std::collections::HashMap<u64, u32>,
    connected: u32,
    finished: u32,
    /// Control feeds and detached nodes (see [`super::control`]).
    pub(super) controls: super::control::Controls,
}

/// The rendezvous service of one job (see the module documentation).
pub struct RendezvousServer {
    listener: Listener,
    addr: RendezvousAddr,
    secret: String,
    job: String,
    size: u32,
    timeout: Duration,
    rejoin: bool,
}

enum Listener {
    Tcp(TcpListener),
    Unix(UnixListener, PathBuf),
}

impl RendezvousServer {
    /// Listens at `addr` (a TCP port 0 is chosen by the kernel) for the
    /// `size` ranks of job `job`; ranks must show up within `timeout`.
    pub fn bind(
        addr: &RendezvousAddr,
        secret: &str,
        job: &str,
        size: u32,
        timeout: Duration,
    ) -> Result<RendezvousServer, BootstrapError> {
        let io = |e: std::io::Error| BootstrapError::Rendezvous(format!("listen on {addr}: {e}"));
        let (listener, addr) = match addr {
            RendezvousAddr::Tcp(a) => {
                let l = TcpListener::bind(a).map_err(io)?;
                let local = l.local_addr().map_err(io)?;
                (Listener::Tcp(l), RendezvousAddr::Tcp(local.to_string()))
            }
            RendezvousAddr::Unix(p) => {
                let l = UnixListener::bind(p).map_err(io)?;
                (
                    Listener::Unix(l, p.clone()),
                    RendezvousAddr::Unix(p.clone()),
                )
            }
        };
        Ok(RendezvousServer {
            listener,
            addr,
            secret: secret.to_string(),
            job: job.to_string(),
            size,
            timeout,
            rejoin: false,
        })
    }

    /// Lets a rank join again after it joined once (a restarted process):
    /// its new entry replaces the old one and it gets every member's at
    /// once. The service then runs until the process ends instead of
    /// returning once every rank has joined. Barriers count a re-joined
    /// rank's requests like any other's, so a program that is restarted
    /// should not use them.
    pub fn allow_rejoin(mut self) -> Self {
        self.rejoin = true;
        self
    }

    /// After a failure, answers every later connection with `why` (in a
    /// background thread, for the life of the process), so a rank that
    /// comes late learns what happened instead of finding nobody there.
    fn refuse_late_comers(&self, why: String) {
        let listener = match &self.listener {
            Listener::Tcp(l) => l.try_clone().map(Listener::Tcp),
            Listener::Unix(l, p) => l.try_clone().map(|l| Listener::Unix(l, p.clone())),
        };
        let Ok(listener) = listener else { return };
        std::thread::spawn(move || loop {
            let stream: Option<Box<dyn Stream>> = match &listener {
                Listener::Tcp(l) => l.accept().ok().map(|(s, _)| {
                    let _ = s.set_nonblocking(false);
                    Box::new(s) as Box<dyn Stream>
                }),
                Listener::Unix(l, _) => l.accept().ok().map(|(s, _)| {
                    let _ = s.set_nonblocking(false);
                    Box::new(s) as Box<dyn Stream>
                }),
            };
            match stream {
                Some(mut s) => refuse(s.as_mut(), why.clone()),
                None => std::thread::sleep(Duration::from_millis(5)),
            }
        });
    }

    /// The address ranks connect to (with the port the kernel chose).
    pub fn addr(&self) -> &RendezvousAddr {
        &self.addr
    }

    /// Serves the job: returns the members once every rank has joined and
    /// then closed its connection, or the first failure (a rank missing at
    /// the timeout). Refused connections (wrong secret, ...) are answered
    /// with the reason and do not end the service.
    pub fn serve(self) -> Result<Vec<Member>, BootstrapError> {
        let state = Arc::new((
            Mutex::new(State {
                members: vec![None; self.size as usize],
                ..State::default()
            }),
            Condvar::new(),
        ));
        let deadline = Instant::now() + self.timeout;
        match &self.listener {
            Listener::Tcp(l) => l.set_nonblocking(true),
            Listener::Unix(l, _) => l.set_nonblocking(true),
        }
        .map_err(|e| BootstrapError::Rendezvous(e.to_string()))?;
        let shared = Arc::new(Shared {
            secret: self.secret.clone(),
            job: self.job.clone(),
            size: self.size,
            deadline,
            rejoin: self.rejoin.then_some(self.timeout),
        });
        loop {
            {
                let (lock, cv) = &*state;
                let mut s = lock.lock().unwrap_or_else(|e| e.into_inner());
                let all_in = s.members.iter().all(Option::is_some);
                if all_in && s.finished >= s.connected && !self.rejoin {
                    return Ok(s.members.iter().flatten().cloned().collect());
                }
                if let Some(f) = s.failed.clone().filter(|_| s.finished >= s.connected) {
                    self.refuse_late_comers(f.clone());
                    return Err(BootstrapError::Timeout(f));
                }
                if !all_in && Instant::now() >= deadline && s.failed.is_none() {
                    let missing: Vec<String> = s
                        .members
                        .iter()
                        .enumerate()
                        .filter(|(_, m)| m.is_none())
                        .map(|(i, _)| i.to_string())
                        .collect();
                    s.failed = Some(format!(
                        "rank(s) {} never showed up within {:?}",
                        missing.join(", "),
                        self.timeout
                    ));
                    cv.notify_all();
                }
            }
            let accepted: Option<Box<dyn Stream>> = match &self.listener {
                Listener::Tcp(l) => l.accept().ok().map(|(s, _)| {
                    let _ = s.set_nonblocking(false);
                    let _ = s.set_nodelay(true);
                    Box::new(s) as Box<dyn Stream>
                }),
                Listener::Unix(l, _) => l.accept().ok().map(|(s, _)| {
                    let _ = s.set_nonblocking(false);
                    Box::new(s) as Box<dyn Stream>
                }),
            };
            match accepted {
                Some(mut stream) => {
                    let (st, sh) = (state.clone(), shared.clone());
                    {
                        let mut s = state.0.lock().unwrap_or_else(|e| e.into_inner());
                        // One thread per connection: bounded, so a flood of
                        // connections cannot exhaust the launcher.
                        // A rank holds two: its session and its
                        // control feed.
                        if s.connected - s.finished >= 3 * self.size + 16 {
                            drop(s);
                            refuse(stream.as_mut(), "too many open connections".into());
                            continue;
                        }
                        s.connected += 1;
                    }
                    std::thread::spawn(move || {
                        serve_one(stream, &st, &sh);
                        let (lock, cv) = &*st;
                        lock.lock().unwrap_or_else(|e| e.into_inner()).finished += 1;
                        cv.notify_all();
                    });
                }
                None => std::thread::sleep(Duration::from_millis(5)),
            }
        }
    }
}

pub(super) fn send_line(w: &mut dyn Stream, v: &impl Serialize) -> std::io::Result<()> {
    let mut line = serde_json::to_string(v).map_err(std::io::Error::other)?;
    line.push('\n');
    w.write_all(line.as_bytes())?;
    w.flush()
}

pub(super) fn read_line(r: &mut BufReader<Box<dyn Stream>>) -> std::io::Result<Option<String>> {
    let mut buf = Vec::new();
    let n = r
        .by_ref()
        .take(MAX_LINE as u64)
        .read_until(b'\n', &mut buf)?;
    if n == 0 {
        return Ok(None);
    }
    if buf.last() != Some(&b'\n') {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "line too long or cut short",
        ));
    }
    String::from_utf8(buf)
        .map(Some)
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidData, "not UTF-8"))
}

pub(super) fn refuse(w: &mut dyn Stream, why: String) {
    let _ = send_line(
        w,
        &Reply {
            ok: false,
            error: Some(why),
            members: Vec::new(),
        },
    );
}

/// What every connection of one rendezvous service checks against.
struct Shared {
    secret: String,
    job: String,
    size: u32,
    /// When the first round must be complete.
    deadline: Instant,
    /// With re-joins allowed: how long a re-joining rank may take to say
    /// hello.
    rejoin: Option<Duration>,
}

fn serve_one(stream: Box<dyn Stream>, state: &Arc<(Mutex<State>, Condvar)>, shared: &Shared) {
    let Shared {
        secret,
        job,
        size,
        deadline,
        rejoin,
    } = shared;
    let Ok(mut w) = stream.try_clone_box() else {
        return;
    };
    let left = deadline
        .saturating_duration_since(Instant::now())
        .max(rejoin.unwrap_or_default())
        .max(Duration::from_millis(1));
    let _ = stream.set_timeout(Some(left));
    let mut r = BufReader::new(stream);
    let line = match read_line(&mut r) {
        Ok(Some(l)) => l,
        Ok(None) => return,
        Err(e) => return refuse(w.as_mut(), format!("bad hello: {e}")),
    };
    let value: serde_json::Value = match serde_json::from_str(&line) {
        Ok(v) => v,
        Err(e) => return refuse(w.as_mut(), format!("bad hello: {e}")),
    };
    match value.get("bcl_rendezvous").and_then(serde_json::Value::as_u64) {
        Some(v) if v == u64::from(PROTOCOL_VERSION) => {}
        Some(v) => {
            return refuse(
                w.as_mut(),
                format!("rendezvous protocol version {v}, the launcher speaks version {PROTOCOL_VERSION} (mixed builds?)"),
            )
        }
        None => return refuse(w.as_mut(), "not a BCL rendezvous hello".into()),
    }
    if super::control::is_control(&value) {
        let _ = r.get_ref().set_timeout(Some(Duration::from_secs(5)));
        return super::control::serve(value, w, r, state, job, secret);
    }
    let hello: Hello = match serde_json::from_value(value) {
        Ok(h) => h,
        Err(e) => return refuse(w.as_mut(), format!("bad hello: {e}")),
    };
    if !secrets_equal(&hello.secret, secret) {
        return refuse(w.as_mut(), "wrong job secret (BCL_JOB_SECRET)".into());
    }
    if hello.job != *job {
        return refuse(
            w.as_mut(),
            format!("job {:?} is not this job ({job:?})", hello.job),
        );
    }
    if hello.size != *size {
        return refuse(
            w.as_mut(),
            format!("job size {} but the job has {size} ranks", hello.size),
        );
    }
    let table = match DescriptorTable::from_value(hello.table) {
        Ok(t) => t,
        Err(e) => return refuse(w.as_mut(), format!("rank {}: {e}", hello.rank)),
    };
    if hello.addr.parse::<ProcessAddr>().is_err() {
        return refuse(w.as_mut(), format!("bad process address {:?}", hello.addr));
    }
    let (lock, cv) = &**state;
    let rank = hello.rank;
    {
        let mut s = lock.lock().unwrap_or_else(|e| e.into_inner());
        match s.members.get(rank as usize) {
            None => {
                drop(s);
                return refuse(
                    w.as_mut(),
                    format!("rank {rank} is not below the job size {size}"),
                );
            }
            Some(Some(_)) if rejoin.is_none() => {
                drop(s);
                return refuse(w.as_mut(), format!("rank {rank} joined twice"));
            }
            Some(Some(_)) => {}
            Some(None) => {}
        }
        s.members[rank as usize] = Some(Member {
            rank,
            addr: hello.addr,
            table,
        });
        cv.notify_all();
    }
    // Wait for everybody (or the failure).
    let members = {
        let mut s = lock.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if let Some(f) = &s.failed {
                let f = f.clone();
                drop(s);
                return refuse(w.as_mut(), f);
            }
            if s.members.iter().all(Option::is_some) {
                break s.members.iter().flatten().cloned().collect::<Vec<_>>();
            }
            let wait = deadline
                .saturating_duration_since(Instant::now())
                .max(Duration::from_millis(5));
            s = cv
                .wait_timeout(s, wait)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    };
    if send_line(
        w.as_mut(),
        &Reply {
            ok: true,
            error: None,
            members,
        },
    )
    .is_err()
    {
        return;
    }
    // Barriers until the rank hangs up.
    let _ = r.get_ref().set_timeout(None);
    while let Ok(Some(line)) = read_line(&mut r) {
        #[derive(Deserialize)]
        struct Barrier {
            barrier: u64,
            timeout_ms: u64,
        }
        let Ok(b) = serde_json::from_str::<Barrier>(&line) else {
            return refuse(w.as_mut(), "expected a barrier request".into());
        };
        let until = Instant::now() + Duration::from_millis(b.timeout_ms);
        let mut s = lock.lock().unwrap_or_else(|e| e.into_inner());
        *s.barriers.entry(b.barrier).or_insert(0) += 1;
        cv.notify_all();
        let outcome = loop {
            if s.barriers.get(&b.barrier).copied().unwrap_or(0) >= *size {
                break Ok(());
            }
            if Instant::now() >= until {
                let n = s.barriers.get(&b.barrier).copied().unwrap_or(0);
                break Err(format!(
                    "barrier {}: {n} of {size} ranks arrived within {} ms",
                    b.barrier, b.timeout_ms
                ));
            }
            s = cv
                .wait_timeout(s, until.saturating_duration_since(Instant::now()))
                .unwrap_or_else(|e| e.into_inner())
                .0;
        };
        drop(s);
        let reply = match outcome {
            Ok(()) => Reply {
                ok: true,
                error: None,
                members: Vec::new(),
            },
            Err(e) => Reply {
                ok: false,
                error: Some(e),
                members: Vec::new(),
            },
        };
        if send_line(w.as_mut(), &reply).is_err() {
            return;
        }
    }
}

/// A rank's connection to the rendezvous, or to its PMI-2 launcher, kept
/// for barriers.
pub struct Session {
    kind: SessionKind,
}

enum SessionKind {
    Rendezvous {
        reader: BufReader<Box<dyn Stream>>,
        writer: Box<dyn Stream>,
        next_barrier: u64,
    },
    Pmi(PmiSession),
}

/// A PMI-2 connection that sends `finalize` when dropped.
struct PmiSession(super::pmi2::Pmi2);

impl Drop for PmiSession {
    fn drop(&mut self) {
        let _ = self.0.finalize(Duration::from_secs(10));
    }
}

impl Session {
    /// A session over a PMI-2 connection: its barrier is `kvs-fence`;
    /// dropping it sends `finalize`.
    pub fn from_pmi(pmi: super::pmi2::Pmi2) -> Session {
        Session {
            kind: SessionKind::Pmi(PmiSession(pmi)),
        }
    }

    /// The PMI-2 connection, when the job was started by a PMI-2 launcher
    /// (for `abort`, job attributes, more KVS exchanges).
    pub fn pmi(&mut self) -> Option<&mut super::pmi2::Pmi2> {
        match &mut self.kind {
            SessionKind::Pmi(p) => Some(&mut p.0),
            SessionKind::Rendezvous { .. } => None,
        }
    }

    /// Waits until every rank has called `barrier` as often as this one.
    pub fn barrier(&mut self, timeout: Duration) -> Result<(), BootstrapError> {
        let (reader, writer, next_barrier) = match &mut self.kind {
            SessionKind::Pmi(p) => return Ok(p.0.kvs_fence(timeout)?),
            SessionKind::Rendezvous {
                reader,
                writer,
                next_barrier,
            } => (reader, writer, next_barrier),
        };
        let id = *next_barrier;
        *next_barrier += 1;
        let ms = timeout.as_millis() as u64;
        let req = serde_json::json!({"barrier": id, "timeout_ms": ms});
        send_line(writer.as_mut(), &req)
            .map_err(|e| BootstrapError::Rendezvous(format!("barrier {id}: {e}")))?;
        let _ = reader
            .get_ref()
            .set_timeout(Some(timeout + Duration::from_secs(2)));
        let reply = read_reply(reader, &format!("barrier {id}"), timeout)?;
        match reply.ok {
            true => Ok(()),
            false => Err(BootstrapError::Timeout(reply.error.unwrap_or_default())),
        }
    }
}

fn read_reply(
    r: &mut BufReader<Box<dyn Stream>>,
    what: &str,
    timeout: Duration,
) -> Result<Reply, BootstrapError> {
    match read_line(r) {
        Ok(Some(line)) => serde_json::from_str(&line)
            .map_err(|e| BootstrapError::Rendezvous(format!("{what}: bad reply: {e}"))),
        Ok(None) => Err(BootstrapError::Rendezvous(format!(
            "{what}: the rendezvous closed the connection"
        ))),
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ) =>
        {
            Err(BootstrapError::Timeout(format!(
                "{what}: no answer within {timeout:?} (other ranks missing?)"
            )))
        }
        Err(e) => Err(BootstrapError::Rendezvous(format!("{what}: {e}"))),
    }
}

/// Joins the job at the rendezvous `at`: publishes this rank's address and
/// table and returns every rank's (index = rank), plus the session for
/// barriers. Retries connecting until `timeout`.
pub fn exchange(
    at: &RendezvousAddr,
    secret: &str,
    info: &JobInfo,
    addr: ProcessAddr,
    table: &DescriptorTable,
    timeout: Duration,
) -> Result<(Vec<Member>, Session), BootstrapError> {
    let deadline = Instant::now() + timeout;
    let stream: Box<dyn Stream> = loop {
        let r: std::io::Result<Box<dyn Stream>> = match at {
            RendezvousAddr::Tcp(a) => TcpStream::connect(a).map(|s| {
                let _ = s.set_nodelay(true);
                Box::new(s) as Box<dyn Stream>
            }),
            RendezvousAddr::Unix(p) => {
                UnixStream::connect(p).map(|s| Box::new(s) as Box<dyn Stream>)
            }
        };
        match r {
            Ok(s) => break s,
            Err(e) if Instant::now() >= deadline => {
                return Err(BootstrapError::Timeout(format!(
                    "cannot reach the rendezvous at {at} within {timeout:?}: {e}"
                )))
            }
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    };
    let mut writer = stream
        .try_clone_box()
        .map_err(|e| BootstrapError::Rendezvous(e.to_string()))?;
    let left = deadline
        .saturating_duration_since(Instant::now())
        .max(Duration::from_millis(1));
    stream
        .set_timeout(Some(left))
        .map_err(|e| BootstrapError::Rendezvous(e.to_string()))?;
    let hello = Hello {
        bcl_rendezvous: PROTOCOL_VERSION,
        job: info.job_id.clone(),
        secret: secret.to_string(),
        rank: info.rank,
        size: info.size,
        addr: addr.to_string(),
        table: serde_json::to_value(table)
            .map_err(|e| BootstrapError::Rendezvous(e.to_string()))?,
    };
    send_line(writer.as_mut(), &hello)
        .map_err(|e| BootstrapError::Rendezvous(format!("sending hello to {at}: {e}")))?;
    let mut reader = BufReader::new(stream);
    let reply = read_reply(&mut reader, &format!("rank {} at {at}", info.rank), timeout)?;
    if !reply.ok {
        return Err(BootstrapError::Rendezvous(format!(
            "rank {} refused: {}",
            info.rank,
            reply.error.unwrap_or_default()
        )));
    }
    let members = reply.members;
    if members.len() != info.size as usize
        || members
            .iter()
            .enumerate()
            .any(|(i, m)| m.rank as usize != i)
    {
        return Err(BootstrapError::Rendezvous(format!(
            "the rendezvous answered with {} members for a job of {}",
            members.len(),
            info.size
        )));
    }
    Ok((
        members,
        Session {
            kind: SessionKind::Rendezvous {
                reader,
                writer,
                next_barrier: 0,
            },
        },
    ))
}

/// A job described entirely by a file: every rank's address and
/// descriptors.
///
/// ```toml
/// [[process]]
/// rank = 0
/// addr = "1.0"                       # BCL process address NODE.PORT
/// node = "a1"                        # node identity (equal = shared memory)
/// descriptors = ["udp:10.0.0.1:7000"]
/// fabric = "A"                       # optional, for all its descriptors
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StaticJob {
    /// Every rank, index = rank.
    pub members: Vec<Member>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct StaticFile {
    process: Vec<StaticProcess>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct StaticProcess {
    rank: u32,
    addr: String,
    node: String,
    descriptors: Vec<String>,
    fabric: Option<String>,
}

impl StaticJob {
    /// Reads `path`.
    pub fn load(path: &Path) -> Result<StaticJob, BootstrapError> {
        let err = |message: String| BootstrapError::Static {
            file: path.to_path_buf(),
            message,
        };
        let text = std::fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
        Self::parse(&text).map_err(err)
    }

    /// Parses the text of a static job file.
    pub fn parse(text: &str) -> Result<StaticJob, String> {
        let f: StaticFile = toml::from_str(text).map_err(|e| {
            let line = e
                .span()
                .map(|s| text[..s.start.min(text.len())].matches('\n').count() + 1);
            format!(
                "line {}: {}",
                line.map_or("?".into(), |l| l.to_string()),
                e.message()
            )
        })?;
        let n = f.process.len();
        let mut members: Vec<Option<Member>> = vec![None; n];
        for p in f.process {
            let slot = members
                .get_mut(p.rank as usize)
                .ok_or_else(|| format!("rank {} but only {n} processes are listed", p.rank))?;
            if slot.is_some() {
                return Err(format!("rank {} is listed twice", p.rank));
            }
            p.addr
                .parse::<ProcessAddr>()
                .map_err(|_| format!("rank {}: addr {:?} is not NODE.PORT", p.rank, p.addr))?;
            let mut table = DescriptorTable::new(p.node.clone(), p.node);
            for d in &p.descriptors {
                let d: bcl_core::Descriptor =
                    d.parse().map_err(|e| format!("rank {}: {e}", p.rank))?;
                table.push(&d, p.fabric.as_deref());
            }
            *slot = Some(Member {
                rank: p.rank,
                addr: p.addr,
                table,
            });
        }
        Ok(StaticJob {
            members: members.into_iter().flatten().collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(n: u32) -> DescriptorTable {
        let mut t = DescriptorTable::new(format!("node{n}"), "h");
        t.push(&format!("udp:10.0.0.{n}:7000").parse().unwrap(), Some("A"));
        t
    }

    fn info(rank: u32, size: u32) -> JobInfo {
        JobInfo {
            rank,
            size,
            local_rank: 0,
            node: None,
            job_id: "j1".into(),
        }
    }

    fn server(
        size: u32,
        timeout: Duration,
    ) -> (
        RendezvousAddr,
        std::thread::JoinHandle<Result<Vec<Member>, BootstrapError>>,
    ) {
        let s = RendezvousServer::bind(
            &RendezvousAddr::Tcp("127.0.0.1:0".into()),
            "s3cret",
            "j1",
            size,
            timeout,
        )
        .unwrap();
        let at = s.addr().clone();
        (at, std::thread::spawn(move || s.serve()))
    }

    #[test]
    fn ranks_exchange_tables_and_meet_at_barriers() {
        let (at, srv) = server(3, Duration::from_secs(10));
        let ranks: Vec<_> = (0..3)
            .map(|r| {
                let at = at.clone();
                std::thread::spawn(move || {
                    let (m, mut s) = exchange(
                        &at,
                        "s3cret",
                        &info(r, 3),
                        ProcessAddr::new(r + 1, 0),
                        &table(r),
                        Duration::from_secs(10),
                    )
                    .unwrap();
                    s.barrier(Duration::from_secs(10)).unwrap();
                    s.barrier(Duration::from_secs(10)).unwrap();
                    m
                })
            })
            .collect();
        for r in ranks {
            let m = r.join().unwrap();
            assert_eq!(m.len(), 3);
            for (i, x) in m.iter().enumerate() {
                assert_eq!(x.rank as usize, i);
                assert_eq!(x.table, table(i as u32));
                assert_eq!(x.addr, format!("{}.0", i + 1));
            }
        }
        assert_eq!(srv.join().unwrap().unwrap().len(), 3);
    }

    #[test]
    fn a_restarted_rank_joins_again_only_where_allowed() {
        for allowed in [false, true] {
            let s = RendezvousServer::bind(
                &RendezvousAddr::Tcp("127.0.0.1:0".into()),
                "s3cret",
                "j1",
                2,
                Duration::from_secs(10),
            )
            .unwrap();
            let s = if allowed { s.allow_rejoin() } else { s };
            let at = s.addr().clone();
            std::thread::spawn(move || s.serve());
            let join = |rank: u32, t: DescriptorTable| {
                let at = at.clone();
                std::thread::spawn(move || {
                    exchange(
                        &at,
                        "s3cret",
                        &info(rank, 2),
                        ProcessAddr::new(rank + 1, 0),
                        &t,
                        Duration::from_secs(10),
                    )
                })
            };
            // Their sessions stay open (the service would end otherwise).
            let first: Vec<_> = [join(0, table(0)), join(1, table(1))]
                .into_iter()
                .map(|h| h.join().unwrap().unwrap())
                .collect();
            assert_eq!(first[0].0, first[1].0);
            // Rank 1 restarts with a new table.
            let again = join(1, table(9)).join().unwrap();
            if allowed {
                let (m, _) = again.unwrap();
                assert_eq!(m[0].table, table(0));
                assert_eq!(m[1].table, table(9));
            } else {
                let e = again.err().unwrap().to_string();
                assert!(e.contains("rank 1 joined twice"), "{e}");
            }
        }
    }

    #[test]
    fn failures_are_clear_errors_not_hangs() {
        let (at, srv) = server(2, Duration::from_millis(800));
        let wrong = exchange(
            &at,
            "nope",
            &info(0, 2),
            ProcessAddr::new(1, 0),
            &table(0),
            Duration::from_secs(5),
        )
        .err()
        .unwrap()
        .to_string();
        assert!(wrong.contains("wrong job secret"), "{wrong}");
        let other_job = JobInfo {
            job_id: "j2".into(),
            ..info(0, 2)
        };
        let e = exchange(
            &at,
            "s3cret",
            &other_job,
            ProcessAddr::new(1, 0),
            &table(0),
            Duration::from_secs(5),
        )
        .err()
        .unwrap()
        .to_string();
        assert!(e.contains("is not this job"), "{e}");
        // Rank 1 never shows up: rank 0 is told so, and the server ends.
        let e = exchange(
            &at,
            "s3cret",
            &info(0, 2),
            ProcessAddr::new(1, 0),
            &table(0),
            Duration::from_secs(5),
        )
        .err()
        .unwrap()
        .to_string();
        assert!(e.contains("rank(s) 1 never showed up"), "{e}");
        let e = srv.join().unwrap().unwrap_err().to_string();
        assert!(e.contains("never showed up"), "{e}");
    }

    #[test]
    fn a_version_mismatch_is_named() {
        let (at, _srv) = server(1, Duration::from_millis(500));
        let RendezvousAddr::Tcp(a) = &at else {
            unreachable!()
        };
        let mut s = TcpStream::connect(a).unwrap();
        s.write_all(b"{\"bcl_rendezvous\":7}\n").unwrap();
        let mut reply = String::new();
        BufReader::new(s).read_line(&mut reply).unwrap();
        assert!(
            reply.contains("protocol version 7, the launcher speaks version 1"),
            "{reply}"
        );
    }

    #[test]
    fn nobody_listening_times_out() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let at = RendezvousAddr::Tcp(l.local_addr().unwrap().to_string());
        drop(l);
        let t = Instant::now();
        let e = exchange(
            &at,
            "x",
            &info(0, 1),
            ProcessAddr::new(1, 0),
            &table(0),
            Duration::from_millis(300),
        )
        .err()
        .unwrap()
        .to_string();
        assert!(e.contains("cannot reach the rendezvous"), "{e}");
        assert!(t.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn identity_from_bcl_and_slurm_variables() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| v.to_string())
            }
        };
        let j = JobInfo::from_lookup(&env(&[
            ("BCL_RANK", "2"),
            ("BCL_SIZE", "4"),
            ("BCL_LOCAL_RANK", "1"),
            ("BCL_NODE", "a1"),
            ("BCL_JOB_ID", "x"),
        ]))
        .unwrap();
        assert_eq!(
            (
                j.rank,
                j.size,
                j.local_rank,
                j.node.as_deref(),
                j.job_id.as_str()
            ),
            (2, 4, 1, Some("a1"), "x")
        );
        let j = JobInfo::from_lookup(&env(&[
            ("SLURM_PROCID", "5"),
            ("SLURM_NTASKS", "8"),
            ("SLURM_LOCALID", "1"),
            ("SLURM_JOB_ID", "991"),
            ("SLURMD_NODENAME", "cn7"),
        ]))
        .unwrap();
        assert_eq!(
            (
                j.rank,
                j.size,
                j.local_rank,
                j.node.as_deref(),
                j.job_id.as_str()
            ),
            (5, 8, 1, Some("cn7"), "991")
        );
        assert!(JobInfo::from_lookup(&env(&[]))
            .unwrap_err()
            .to_string()
            .contains("bcl-run"));
        assert!(
            JobInfo::from_lookup(&env(&[("BCL_RANK", "4"), ("BCL_SIZE", "4")]))
                .unwrap_err()
                .to_string()
                .contains("not below")
        );
        assert!(
            JobInfo::from_lookup(&env(&[("BCL_RANK", "x"), ("BCL_SIZE", "4")]))
                .unwrap_err()
                .to_string()
                .contains("not a number")
        );
    }

    #[test]
    fn secrets_compare_exactly() {
        assert!(secrets_equal("abc", "abc"));
        assert!(!secrets_equal("abc", "abd"));
        assert!(!secrets_equal("abc", "ab"));
        assert!(!secrets_equal("", "a"));
        let s = new_secret().unwrap();
        assert_eq!(s.len(), 32);
        assert_ne!(s, new_secret().unwrap());
    }

    #[test]
    fn static_job_files() {
        let j = StaticJob::parse(
            "[[process]]\nrank = 1\naddr = \"2.0\"\nnode = \"b\"\ndescriptors = [\"udp:10.0.0.2:7000\"]\nfabric = \"A\"\n\
             [[process]]\nrank = 0\naddr = \"1.0\"\nnode = \"a\"\ndescriptors = [\"udp:10.0.0.1:7000\"]\n",
        )
        .unwrap();
        assert_eq!(j.members[0].addr, "1.0");
        assert_eq!(j.members[1].table.entries[0].fabric.as_deref(), Some("A"));
        let e = StaticJob::parse(
            "[[process]]\nrank = 3\naddr = \"2.0\"\nnode = \"b\"\ndescriptors = []\n",
        )
        .unwrap_err();
        assert!(e.contains("only 1 processes"), "{e}");
        let e = StaticJob::parse(
            "[[process]]\nrank = 0\naddr = \"x\"\nnode = \"b\"\ndescriptors = []\n",
        )
        .unwrap_err();
        assert!(e.contains("NODE.PORT"), "{e}");
        let e = StaticJob::parse("[[process]]\nrank = 0\nbogus = 1\n").unwrap_err();
        assert!(e.starts_with("line 3:"), "{e}");
    }
}
