//! A PMI-2 client: joining a job started by the launchers clusters already
//! run, MPICH's hydra (`mpiexec`) and Slurm (`srun --mpi=pmi2`), without
//! `bcl-run`.
//!
//! Both launchers give each process one end of a socket pair, its number
//! in `$PMI_FD`, and serve a key-value space (KVS) with a fence over it.
//! [`join`](super::join::join) uses it when `$PMI_FD` is set and neither
//! `$BCL_RENDEZVOUS` nor `$BCL_STATIC` is ([`start`], then
//! [`PmiStart::exchange`]):
//!
//! 1. `fullinit`: rank and size; `job-getid`: the job id (the same at
//!    every rank, so the job key is too);
//! 2. every rank puts its node identity ([`node_identity`]), fences and
//!    reads every rank's: the node index is the order of first appearance
//!    of each node among the ranks, the local rank the number of lower
//!    ranks on the same node ([`placement`]);
//! 3. once its endpoint is built, every rank puts its process address and
//!    descriptor table, fences again and reads every rank's.
//!
//! The connection stays open in the [`Session`]: its barrier is a
//! `kvs-fence`, and dropping it sends `finalize` (hydra takes a process
//! that closes the connection without it for a failed one).
//!
//! # Wire format
//!
//! The first exchange is PMI-1's, one line each way:
//! `cmd=init pmi_version=2 pmi_subversion=0\n`, answered by
//! `cmd=response_to_init pmi_version=2 pmi_subversion=0 rc=0\n`. Every
//! later command and reply is a frame ([`Command`]): its length in 6
//! ASCII characters (decimal, left-justified and padded with spaces), then
//! `cmd=NAME;key=value;...;`, every pair ended by `;`. A `;` inside a value
//! is written `;;` (MPICH's rule; [`Command::encode`], [`Command::decode`]).
//! Replies carry `rc` (0 = success) and, on failure, `errmsg`.
//!
//! # Limits, and how values get through them
//!
//! Keys are at most [`MAX_KEYLEN`] (64) bytes and values [`MAX_VALLEN`]
//! (1024): hydra 4.0 silently cuts longer values, and neither hydra 4.0
//! nor Slurm 22.05 turns `;;` back into `;` (hydra cuts the value there,
//! Slurm ends it). [`Pmi2::kvs_put`] therefore refuses a value that is too
//! long or holds a `;`, and BCL's own values go through [`Pmi2::put`] and
//! [`Pmi2::get`]: the value is percent-encoded ([`encode_value`]: every
//! byte but ASCII letters, digits and `-_.:/,{}[]@+` becomes `%XX`, so no
//! `;`, `=`, space or quote reaches the launcher) and **split across
//! several keys** of at most [`CHUNK`] bytes each: `KEY` holds
//! `N:` and the first piece, `KEY.1` ... `KEY.(N-1)` the rest. A
//! descriptor table (up to 8 KiB of JSON) takes one to a dozen keys.
//!
//! Every reply that is not the expected one (another command, no `rc`, a
//! non-zero `rc`, a bad length field, a pair without `=`, a closed
//! connection) is a [`Pmi2Error`] naming the command; every wait has a
//! time limit.

use super::bootstrap::{BootstrapError, JobInfo, Member, Session};
use super::descriptor::DescriptorTable;
use super::node_identity;
use bcl_core::ProcessAddr;
use std::io::{Read, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Characters of the length field that precedes every command.
pub const LEN_FIELD: usize = 6;
/// Longest key the launchers accept (`PMI2_MAX_KEYLEN`).
pub const MAX_KEYLEN: usize = 64;
/// Longest value the launchers keep (`PMI2_MAX_VALLEN`; hydra 4.0 cuts
/// longer ones without saying so).
pub const MAX_VALLEN: usize = 1024;
/// Longest command or reply accepted (MPICH's limit: 64 KiB).
pub const MAX_COMMAND: usize = 64 * 1024;
/// Most bytes of an encoded value [`Pmi2::put`] stores under one key
/// (below [`MAX_VALLEN`], leaving room for the piece count).
pub const CHUNK: usize = 1000;
/// Most keys one value may be split across.
const MAX_PIECES: usize = 4096;
/// Longest PMI-1 init reply line.
const MAX_LINE: usize = 1024;

/// Set once the inherited `PMI_FD` has been taken by this process.
static FD_TAKEN: AtomicBool = AtomicBool::new(false);

/// A PMI-2 failure, naming the command.
#[derive(Debug, thiserror::Error)]
pub enum Pmi2Error {
    /// The inherited connection cannot be used (`PMI_FD` unset, not a
    /// number, not an open socket, taken already).
    #[error("{0}")]
    Setup(String),
    /// A request this client refuses to send (a key or value over the
    /// launchers' limits, a `;` in a raw value).
    #[error("{cmd}: {why}")]
    Invalid {
        /// The command.
        cmd: String,
        /// Why.
        why: String,
    },
    /// Reading or writing the connection failed.
    #[error("{cmd}: {source}")]
    Io {
        /// The command.
        cmd: String,
        /// The error.
        source: std::io::Error,
    },
    /// No (complete) reply in time.
    #[error(
        "{cmd}: no reply from the launcher within {timeout:?} (other ranks missing or stuck?)"
    )]
    Timeout {
        /// The command.
        cmd: String,
        /// How long it waited.
        timeout: Duration,
    },
    /// The launcher closed the connection.
    #[error("{cmd}: the launcher closed the PMI connection")]
    Closed {
        /// The command.
        cmd: String,
    },
    /// The reply cannot be parsed or lacks a field.
    #[error("{cmd}: malformed reply: {why}")]
    Malformed {
        /// The command.
        cmd: String,
        /// What is wrong.
        why: String,
    },
    /// Another reply than the command's.
    #[error("{cmd}: expected {expected}, the launcher answered {got}")]
    Unexpected {
        /// The command.
        cmd: String,
        /// The reply expected.
        expected: String,
        /// The reply received (cut to 200 characters).
        got: String,
    },
    /// The launcher answered with a non-zero `rc`.
    #[error("{cmd}: refused by the launcher (rc={rc}{})", if msg.is_empty() { String::new() } else { format!(": {msg}") })]
    Refused {
        /// The command.
        cmd: String,
        /// Its return code.
        rc: i64,
        /// Its `errmsg`, if any.
        msg: String,
    },
}

/// One PMI-2 command or reply: its name and its other pairs, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Command {
    /// The value of `cmd`.
    pub cmd: String,
    /// The other key/value pairs, in order (keys may repeat).
    pub pairs: Vec<(String, String)>,
}

impl Command {
    /// A command without pairs.
    pub fn new(cmd: &str) -> Command {
        Command {
            cmd: cmd.to_string(),
            pairs: Vec::new(),
        }
    }

    /// Adds a pair.
    pub fn with(mut self, key: &str, value: impl Into<String>) -> Command {
        self.pairs.push((key.to_string(), value.into()));
        self
    }

    /// The first value of `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.pairs
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// The frame: the 6-character length, then `cmd=NAME;k=v;...;` with
    /// every `;` of a value doubled. Keys must be 1 to [`MAX_KEYLEN`] bytes
    /// without `=` or `;`; values at most [`MAX_VALLEN`] bytes before
    /// escaping; the frame's body at most 999999 bytes.
    pub fn encode(&self) -> Result<Vec<u8>, String> {
        let mut body = String::new();
        let all = std::iter::once(("cmd", self.cmd.as_str()))
            .chain(self.pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        for (k, v) in all {
            if k.is_empty() || k.len() > MAX_KEYLEN || k.contains(['=', ';']) {
                return Err(format!(
                    "key {k:?}: keys are 1 to {MAX_KEYLEN} bytes without '=' or ';'"
                ));
            }
            if v.len() > MAX_VALLEN {
                return Err(format!(
                    "value of {k:?} is {} bytes, the launchers keep at most {MAX_VALLEN}",
                    v.len()
                ));
            }
            body.push_str(k);
            body.push('=');
            body.push_str(&v.replace(';', ";;"));
            body.push(';');
        }
        if body.len() >= 10usize.pow(LEN_FIELD as u32) {
            return Err(format!(
                "{} bytes do not fit the {LEN_FIELD}-digit length field",
                body.len()
            ));
        }
        let mut out = format!("{:<width$}", body.len(), width = LEN_FIELD).into_bytes();
        out.extend_from_slice(body.as_bytes());
        Ok(out)
    }

    /// Parses a frame's body (after the length field): pairs `key=value;`,
    /// the first `cmd`, `;;` inside a value standing for `;`.
    pub fn decode(body: &[u8]) -> Result<Command, String> {
        let text = std::str::from_utf8(body).map_err(|_| "not UTF-8".to_string())?;
        if text.is_empty() {
            return Err("empty".into());
        }
        let b = text.as_bytes();
        let mut pairs: Vec<(String, String)> = Vec::new();
        let mut i = 0;
        while i < b.len() {
            let key_start = i;
            while i < b.len() && b[i] != b'=' && b[i] != b';' {
                i += 1;
            }
            if i == b.len() || b[i] == b';' {
                return Err(format!(
                    "{:?} has no '='",
                    cut(&text[key_start..i.min(b.len())])
                ));
            }
            let key = &text[key_start..i];
            if key.is_empty() {
                return Err(format!("a pair without a key at byte {key_start}"));
            }
            i += 1; // '='
            let mut value = String::new();
            let mut start = i;
            loop {
                if i == b.len() {
                    return Err(format!(
                        "the value of {key:?} is not ended by ';' (reply cut short?)"
                    ));
                }
                if b[i] == b';' {
                    value.push_str(&text[start..i]);
                    if b.get(i + 1) == Some(&b';') {
                        value.push(';');
                        i += 2;
                        start = i;
                        continue;
                    }
                    i += 1;
                    break;
                }
                i += 1;
            }
            pairs.push((key.to_string(), value));
        }
        let mut it = pairs.into_iter();
        match it.next() {
            Some((k, v)) if k == "cmd" => Ok(Command {
                cmd: v,
                pairs: it.collect(),
            }),
            Some((k, _)) => Err(format!("the first pair is {k:?}, not cmd")),
            None => Err("no pairs".into()),
        }
    }

    /// The text of the frame for error messages (cut to 200 characters).
    fn describe(&self) -> String {
        let mut s = format!("cmd={}", self.cmd);
        for (k, v) in &self.pairs {
            s.push_str(&format!(";{k}={v}"));
        }
        cut(&s)
    }
}

/// `s` cut to 200 characters for messages.
fn cut(s: &str) -> String {
    match s.char_indices().nth(200) {
        Some((i, _)) => format!("{}...", &s[..i]),
        None => s.to_string(),
    }
}

/// Whether [`encode_value`] keeps `b` as it is.
fn plain(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"-_.:/,{}[]@+".contains(&b)
}

/// `value` with every byte but ASCII letters, digits and `-_.:/,{}[]@+`
/// written `%XX` (upper-case hex): no `;`, `=`, `%`, space, quote or
/// control character is left, so any launcher keeps it as it is.
pub fn encode_value(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for &b in value.as_bytes() {
        if plain(b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The inverse of [`encode_value`].
pub fn decode_value(text: &str) -> Result<String, String> {
    let b = text.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = text
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| format!("bad escape at byte {i} of the value"))?;
            out.push(hex);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| "the decoded value is not UTF-8".into())
}

/// Splits an encoded value into pieces: the first at most `first` bytes,
/// the others at most [`CHUNK`], never inside a `%XX`.
fn split_encoded(enc: &str, first: usize) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = enc;
    let mut limit = first;
    loop {
        if rest.len() <= limit {
            out.push(rest);
            return out;
        }
        let mut at = limit;
        // Do not cut a %XX: back up to its '%'.
        for back in 1..=2 {
            if at >= back && rest.as_bytes()[at - back] == b'%' {
                at -= back;
                break;
            }
        }
        out.push(&rest[..at]);
        rest = &rest[at..];
        limit = CHUNK;
    }
}

/// The key of piece `i` (> 0) of the value stored under `key`.
fn piece_key(key: &str, i: usize) -> String {
    format!("{key}.{i}")
}

/// What `fullinit` said about this process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FullInit {
    /// Rank, `0..size`.
    pub rank: u32,
    /// Processes in the job.
    pub size: u32,
    /// The application number (hydra: 0; Slurm: -1).
    pub appnum: i64,
    /// The job that spawned this one, if it was spawned.
    pub spawner_jobid: Option<String>,
    /// Whether the launcher runs the job under a debugger.
    pub debugged: bool,
    /// Whether the launcher asks for verbose PMI output.
    pub verbose: bool,
}

/// A PMI-2 connection after `fullinit` (see the module documentation).
pub struct Pmi2 {
    stream: UnixStream,
    init: FullInit,
    job_id: String,
    finalized: bool,
    /// Why the connection is out of step (a reply not read in time, a
    /// broken frame): every later command fails with this.
    broken: Option<String>,
}

impl std::fmt::Debug for Pmi2 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pmi2")
            .field("init", &self.init)
            .field("job_id", &self.job_id)
            .field("finalized", &self.finalized)
            .field("broken", &self.broken)
            .finish()
    }
}

/// Whether the environment asks for PMI-2: `$PMI_FD` set, `$BCL_RENDEZVOUS`
/// and `$BCL_STATIC` not.
pub fn requested() -> bool {
    std::env::var_os("PMI_FD").is_some()
        && std::env::var_os("BCL_RENDEZVOUS").is_none()
        && std::env::var_os("BCL_STATIC").is_none()
}

/// Takes ownership of the connection the launcher left in `$PMI_FD`
/// (once per process: a second call is an error).
fn inherited_stream() -> Result<UnixStream, Pmi2Error> {
    let v = std::env::var("PMI_FD").map_err(|_| {
        Pmi2Error::Setup("PMI_FD is not set (not started by a PMI-2 launcher)".into())
    })?;
    let fd: i32 =
        v.trim().parse().ok().filter(|n| *n >= 0).ok_or_else(|| {
            Pmi2Error::Setup(format!("PMI_FD={v:?} is not a file descriptor number"))
        })?;
    // Check before taking ownership that the number names an open socket.
    let target = std::fs::read_link(format!("/proc/self/fd/{fd}")).map_err(|e| {
        Pmi2Error::Setup(format!(
            "PMI_FD={fd}: no such open file descriptor in this process ({e}); was it closed, or inherited from another job?"
        ))
    })?;
    if !target.to_string_lossy().starts_with("socket:") {
        return Err(Pmi2Error::Setup(format!(
            "PMI_FD={fd} is {}, not the launcher's socket",
            target.display()
        )));
    }
    if FD_TAKEN.swap(true, Ordering::SeqCst) {
        return Err(Pmi2Error::Setup(format!(
            "PMI_FD={fd} is already in use by this process (one PMI-2 connection per process)"
        )));
    }
    // SAFETY: fd is open in this process (checked through /proc above), is
    // the socket the launcher handed over for this process's PMI
    // connection, and nothing else in the process owns it: FD_TAKEN makes
    // this the only place that takes it, once.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    // Programs this process starts must not inherit the connection.
    nix::fcntl::fcntl(
        &owned,
        nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC),
    )
    .map_err(|e| Pmi2Error::Setup(format!("PMI_FD={fd}: setting close-on-exec: {e}")))?;
    Ok(UnixStream::from(owned))
}

impl Pmi2 {
    /// Connects through the launcher's `$PMI_FD` and runs `init`,
    /// `fullinit` (with `$PMI_RANK` or `$PMI_ID` and `$PMI_JOBID` when
    /// set) and `job-getid`, each within `timeout`.
    pub fn from_env(timeout: Duration) -> Result<Pmi2, Pmi2Error> {
        let stream = inherited_stream()?;
        let pmi_rank = std::env::var("PMI_RANK")
            .or_else(|_| std::env::var("PMI_ID"))
            .ok();
        let pmi_jobid = std::env::var("PMI_JOBID").ok();
        Pmi2::connect(stream, pmi_rank.as_deref(), pmi_jobid.as_deref(), timeout)
    }

    /// Like [`from_env`](Self::from_env) on a given connection.
    pub fn connect(
        stream: UnixStream,
        pmi_rank: Option<&str>,
        pmi_jobid: Option<&str>,
        timeout: Duration,
    ) -> Result<Pmi2, Pmi2Error> {
        let mut p = Pmi2 {
            stream,
            init: FullInit {
                rank: 0,
                size: 1,
                appnum: 0,
                spawner_jobid: None,
                debugged: false,
                verbose: false,
            },
            job_id: String::new(),
            finalized: false,
            broken: None,
        };
        p.pmi1_init(timeout)?;
        let mut req = Command::new("fullinit");
        if let Some(j) = pmi_jobid {
            req = req.with("pmijobid", j);
        }
        if let Some(r) = pmi_rank {
            req = req.with("pmirank", r);
        }
        req = req.with("threaded", "FALSE");
        let r = p.call(&req, "fullinit-response", timeout)?;
        p.init = parse_fullinit(&r)?;
        let r = p.call(&Command::new("job-getid"), "job-getid-response", timeout)?;
        p.job_id = required(&r, "job-getid", "jobid")?.to_string();
        if p.job_id.is_empty() {
            return Err(Pmi2Error::Malformed {
                cmd: "job-getid".into(),
                why: "empty jobid".into(),
            });
        }
        Ok(p)
    }

    /// What `fullinit` answered.
    pub fn init(&self) -> &FullInit {
        &self.init
    }

    /// This process's rank.
    pub fn rank(&self) -> u32 {
        self.init.rank
    }

    /// Processes in the job.
    pub fn size(&self) -> u32 {
        self.init.size
    }

    /// The job id (`job-getid`), the same at every rank.
    pub fn job_id(&self) -> &str {
        &self.job_id
    }

    /// The PMI-1 handshake that starts every PMI-2 connection.
    fn pmi1_init(&mut self, timeout: Duration) -> Result<(), Pmi2Error> {
        let cmd = "init";
        let deadline = Instant::now() + timeout;
        self.write_all(cmd, b"cmd=init pmi_version=2 pmi_subversion=0\n", deadline)?;
        let mut line = Vec::new();
        loop {
            let mut b = [0u8; 1];
            self.read_full(cmd, &mut b, deadline, timeout)?;
            if b[0] == b'\n' {
                break;
            }
            line.push(b[0]);
            if line.len() > MAX_LINE {
                return Err(Pmi2Error::Malformed {
                    cmd: cmd.into(),
                    why: format!("no end of line in {MAX_LINE} bytes"),
                });
            }
        }
        let text = String::from_utf8_lossy(&line).into_owned();
        let get = |key: &str| {
            text.split_whitespace()
                .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
        };
        if get("cmd") != Some("response_to_init") {
            return Err(Pmi2Error::Unexpected {
                cmd: cmd.into(),
                expected: "cmd=response_to_init".into(),
                got: cut(&text),
            });
        }
        let version = (get("pmi_version"), get("pmi_subversion"));
        match get("rc").map(str::parse::<i64>) {
            Some(Ok(0)) if version.0 == Some("2") => Ok(()),
            Some(Ok(0)) | Some(Ok(_)) | None => Err(Pmi2Error::Refused {
                cmd: cmd.into(),
                rc: get("rc").and_then(|r| r.parse().ok()).unwrap_or(-1),
                msg: format!(
                    "the launcher does not speak PMI-2: it offers version {}.{} ({})",
                    version.0.unwrap_or("?"),
                    version.1.unwrap_or("?"),
                    cut(&text)
                ),
            }),
            Some(Err(_)) => Err(Pmi2Error::Malformed {
                cmd: cmd.into(),
                why: format!("rc is not a number in {:?}", cut(&text)),
            }),
        }
    }

    /// Writes all of `buf` before `deadline`.
    fn write_all(&mut self, cmd: &str, buf: &[u8], deadline: Instant) -> Result<(), Pmi2Error> {
        let left = deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(1));
        self.stream
            .set_write_timeout(Some(left))
            .map_err(|source| Pmi2Error::Io {
                cmd: cmd.into(),
                source,
            })?;
        self.stream
            .write_all(buf)
            .map_err(|source| match source.kind() {
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => {
                    Pmi2Error::Timeout {
                        cmd: cmd.into(),
                        timeout: left,
                    }
                }
                std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset => {
                    Pmi2Error::Closed { cmd: cmd.into() }
                }
                _ => Pmi2Error::Io {
                    cmd: cmd.into(),
                    source,
                },
            })
    }

    /// Fills `buf` before `deadline`.
    fn read_full(
        &mut self,
        cmd: &str,
        buf: &mut [u8],
        deadline: Instant,
        timeout: Duration,
    ) -> Result<(), Pmi2Error> {
        let mut got = 0;
        while got < buf.len() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Pmi2Error::Timeout {
                    cmd: cmd.into(),
                    timeout,
                });
            }
            self.stream
                .set_read_timeout(Some(left))
                .map_err(|source| Pmi2Error::Io {
                    cmd: cmd.into(),
                    source,
                })?;
            match self.stream.read(&mut buf[got..]) {
                Ok(0) => return Err(Pmi2Error::Closed { cmd: cmd.into() }),
                Ok(n) => got += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    return Err(Pmi2Error::Timeout {
                        cmd: cmd.into(),
                        timeout,
                    })
                }
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {
                    return Err(Pmi2Error::Closed { cmd: cmd.into() })
                }
                Err(source) => {
                    return Err(Pmi2Error::Io {
                        cmd: cmd.into(),
                        source,
                    })
                }
            }
        }
        Ok(())
    }

    /// Reads one frame.
    fn read_frame(
        &mut self,
        cmd: &str,
        deadline: Instant,
        timeout: Duration,
    ) -> Result<Command, Pmi2Error> {
        let mut len = [0u8; LEN_FIELD];
        self.read_full(cmd, &mut len, deadline, timeout)?;
        let field = String::from_utf8_lossy(&len).into_owned();
        let n: usize = field.trim().parse().map_err(|_| Pmi2Error::Malformed {
            cmd: cmd.into(),
            why: format!("length field {field:?} is not a number"),
        })?;
        if n == 0 || n > MAX_COMMAND {
            return Err(Pmi2Error::Malformed {
                cmd: cmd.into(),
                why: format!("length {n} is not between 1 and {MAX_COMMAND}"),
            });
        }
        let mut body = vec![0u8; n];
        self.read_full(cmd, &mut body, deadline, timeout)?;
        Command::decode(&body).map_err(|why| Pmi2Error::Malformed {
            cmd: cmd.into(),
            why: format!("{why} in {:?}", cut(&String::from_utf8_lossy(&body))),
        })
    }

    /// Sends `req` and reads its reply, which must be `expect` with
    /// `rc=0`.
    fn call(
        &mut self,
        req: &Command,
        expect: &str,
        timeout: Duration,
    ) -> Result<Command, Pmi2Error> {
        let cmd = req.cmd.clone();
        if self.finalized {
            return Err(Pmi2Error::Invalid {
                cmd,
                why: "the PMI connection is finalized".into(),
            });
        }
        if let Some(why) = &self.broken {
            return Err(Pmi2Error::Invalid {
                cmd,
                why: format!("the PMI connection is out of step after an earlier failure ({why})"),
            });
        }
        let frame = req.encode().map_err(|why| Pmi2Error::Invalid {
            cmd: cmd.clone(),
            why,
        })?;
        let deadline = Instant::now() + timeout;
        let reply = self
            .write_all(&cmd, &frame, deadline)
            .and_then(|()| self.read_frame(&cmd, deadline, timeout))
            .inspect_err(|e| self.broken = Some(e.to_string()))?;
        if reply.cmd != expect {
            return Err(Pmi2Error::Unexpected {
                cmd,
                expected: expect.to_string(),
                got: reply.describe(),
            });
        }
        let rc = required(&reply, &cmd, "rc")?;
        let rc: i64 = rc.trim().parse().map_err(|_| Pmi2Error::Malformed {
            cmd: cmd.clone(),
            why: format!("rc={rc:?} is not a number"),
        })?;
        if rc != 0 {
            return Err(Pmi2Error::Refused {
                cmd,
                rc,
                msg: reply.get("errmsg").unwrap_or_default().to_string(),
            });
        }
        Ok(reply)
    }

    /// `kvs-put`: stores `value` under `key` in the job's KVS (visible to
    /// the other ranks after the next [`kvs_fence`](Self::kvs_fence)). The
    /// value is sent as it is: at most [`MAX_VALLEN`] bytes and no `;`
    /// (which the launchers do not unescape); [`put`](Self::put) takes
    /// any value.
    pub fn kvs_put(&mut self, key: &str, value: &str, timeout: Duration) -> Result<(), Pmi2Error> {
        if value.contains(';') {
            return Err(Pmi2Error::Invalid {
                cmd: "kvs-put".into(),
                why: format!(
                    "the value of {key:?} holds a ';', which hydra and Slurm do not read back (use put, which encodes it)"
                ),
            });
        }
        let req = Command::new("kvs-put")
            .with("key", key)
            .with("value", value);
        self.call(&req, "kvs-put-response", timeout).map(|_| ())
    }

    /// `kvs-fence`: waits until every rank has fenced; afterwards every
    /// value put before it is visible to every rank. Also the barrier of
    /// a PMI-2 [`Session`].
    pub fn kvs_fence(&mut self, timeout: Duration) -> Result<(), Pmi2Error> {
        self.call(&Command::new("kvs-fence"), "kvs-fence-response", timeout)
            .map(|_| ())
    }

    /// `kvs-get` in this job: the value of `key`, `None` if no rank put
    /// it (before the last fence).
    pub fn kvs_get(&mut self, key: &str, timeout: Duration) -> Result<Option<String>, Pmi2Error> {
        let req = Command::new("kvs-get")
            .with("jobid", self.job_id.clone())
            .with("srcid", "-1")
            .with("key", key);
        let r = self.call(&req, "kvs-get-response", timeout)?;
        found_value(&r, "kvs-get")
    }

    /// `info-getjobattr`: a job attribute (`PMI_process_mapping`,
    /// `universeSize`, ...), `None` if the launcher has none.
    pub fn job_attr(&mut self, key: &str, timeout: Duration) -> Result<Option<String>, Pmi2Error> {
        let req = Command::new("info-getjobattr").with("key", key);
        let r = self.call(&req, "info-getjobattr-response", timeout)?;
        found_value(&r, "info-getjobattr")
    }

    /// The node of every rank as the launcher placed them
    /// (`PMI_process_mapping`, [`parse_process_mapping`]), `None` if it does
    /// not say.
    pub fn process_mapping(&mut self, timeout: Duration) -> Result<Option<Vec<u32>>, Pmi2Error> {
        let size = self.size();
        match self.job_attr("PMI_process_mapping", timeout)? {
            None => Ok(None),
            Some(v) => {
                parse_process_mapping(&v, size)
                    .map(Some)
                    .map_err(|why| Pmi2Error::Malformed {
                        cmd: "info-getjobattr".into(),
                        why: format!("PMI_process_mapping {v:?}: {why}"),
                    })
            }
        }
    }

    /// Stores any value under `key`: percent-encoded ([`encode_value`])
    /// and split across `key`, `key.1`, ... (at most [`CHUNK`] bytes
    /// each; see the module documentation). `key` leaves room for the
    /// piece suffix: at most [`MAX_KEYLEN`] - 5 bytes.
    pub fn put(&mut self, key: &str, value: &str, timeout: Duration) -> Result<(), Pmi2Error> {
        if key.len() + 5 > MAX_KEYLEN {
            return Err(Pmi2Error::Invalid {
                cmd: "kvs-put".into(),
                why: format!(
                    "key {key:?}: at most {} bytes (pieces add .N)",
                    MAX_KEYLEN - 5
                ),
            });
        }
        let pieces = split_value(value);
        if pieces.len() > MAX_PIECES {
            return Err(Pmi2Error::Invalid {
                cmd: "kvs-put".into(),
                why: format!(
                    "the value of {key:?} ({} bytes) needs more than {MAX_PIECES} keys",
                    value.len()
                ),
            });
        }
        for (i, p) in pieces.iter().enumerate() {
            let k = if i == 0 {
                key.to_string()
            } else {
                piece_key(key, i)
            };
            self.kvs_put(&k, p, timeout)?;
        }
        Ok(())
    }

    /// Reads a value stored by [`put`](Self::put) (at any rank, before the
    /// last fence); `None` if there is none.
    pub fn get(&mut self, key: &str, timeout: Duration) -> Result<Option<String>, Pmi2Error> {
        let bad = |why: String| Pmi2Error::Malformed {
            cmd: "kvs-get".into(),
            why: format!("value of {key:?}: {why}"),
        };
        let Some(first) = self.kvs_get(key, timeout)? else {
            return Ok(None);
        };
        let (n, piece) = first
            .split_once(':')
            .ok_or_else(|| bad("no piece count (not stored by BCL?)".into()))?;
        let n: usize = n
            .parse()
            .ok()
            .filter(|n| (1..=MAX_PIECES).contains(n))
            .ok_or_else(|| bad(format!("piece count {n:?} is not 1 to {MAX_PIECES}")))?;
        let mut enc = piece.to_string();
        for i in 1..n {
            let k = piece_key(key, i);
            match self.kvs_get(&k, timeout)? {
                Some(p) => enc.push_str(&p),
                None => return Err(bad(format!("piece {k:?} of {n} is missing"))),
            }
        }
        decode_value(&enc).map(Some).map_err(bad)
    }

    /// `abort`: asks the launcher to end the whole job, with `message`
    /// (no reply is expected: the launcher kills the processes; Slurm
    /// cancels the step, hydra 4.0 does not know the command but ends the
    /// job all the same).
    pub fn abort(&mut self, exit_code: i32, message: &str) -> Result<(), Pmi2Error> {
        // No ';' (the launchers do not unescape it), within the limit.
        let mut msg = String::new();
        for c in message.chars().map(|c| if c == ';' { ',' } else { c }) {
            if msg.len() + c.len_utf8() > MAX_VALLEN {
                break;
            }
            msg.push(c);
        }
        let req = Command::new("abort")
            .with("isworld", "TRUE")
            .with("exitcode", exit_code.to_string())
            .with("msg", msg);
        let frame = req.encode().map_err(|why| Pmi2Error::Invalid {
            cmd: "abort".into(),
            why,
        })?;
        self.write_all("abort", &frame, Instant::now() + Duration::from_secs(5))
    }

    /// `finalize`: tells the launcher this process is done with PMI (a
    /// process that exits without it counts as failed for hydra). Once;
    /// later calls do nothing.
    pub fn finalize(&mut self, timeout: Duration) -> Result<(), Pmi2Error> {
        if self.finalized {
            return Ok(());
        }
        if self.broken.is_some() {
            // Nothing sensible can be read back: just hang up.
            self.finalized = true;
            let _ = self.stream.shutdown(std::net::Shutdown::Both);
            return Ok(());
        }
        let r = self.call(&Command::new("finalize"), "finalize-response", timeout);
        self.finalized = true;
        let _ = self.stream.shutdown(std::net::Shutdown::Both);
        r.map(|_| ())
    }
}

/// The value of `key` in reply `r` to `cmd`, or a malformed-reply error.
fn required<'a>(r: &'a Command, cmd: &str, key: &str) -> Result<&'a str, Pmi2Error> {
    r.get(key).ok_or_else(|| Pmi2Error::Malformed {
        cmd: cmd.into(),
        why: format!("no {key} in {}", r.describe()),
    })
}

/// `found` and `value` of a get reply.
fn found_value(r: &Command, cmd: &str) -> Result<Option<String>, Pmi2Error> {
    match parse_bool(required(r, cmd, "found")?) {
        Some(true) => Ok(Some(required(r, cmd, "value")?.to_string())),
        Some(false) => Ok(None),
        None => Err(Pmi2Error::Malformed {
            cmd: cmd.into(),
            why: format!("found is not TRUE or FALSE in {}", r.describe()),
        }),
    }
}

/// PMI's booleans: `TRUE`/`FALSE` (any case), or 1/0.
fn parse_bool(v: &str) -> Option<bool> {
    match v.trim() {
        x if x.eq_ignore_ascii_case("true") || x == "1" => Some(true),
        x if x.eq_ignore_ascii_case("false") || x == "0" => Some(false),
        _ => None,
    }
}

/// Checks and reads a `fullinit-response`.
fn parse_fullinit(r: &Command) -> Result<FullInit, Pmi2Error> {
    let cmd = "fullinit";
    let bad = |why: String| Pmi2Error::Malformed {
        cmd: cmd.into(),
        why,
    };
    let int = |key: &str| -> Result<i64, Pmi2Error> {
        let v = required(r, cmd, key)?;
        v.trim()
            .parse()
            .map_err(|_| bad(format!("{key}={v:?} is not a number")))
    };
    if let Some(v) = r.get("pmi-version") {
        if v.trim() != "2" {
            return Err(bad(format!("pmi-version={v:?}, expected 2")));
        }
    }
    let rank = int("rank")?;
    let size = int("size")?;
    if size < 1 || size > i64::from(u32::MAX) || rank < 0 || rank >= size {
        return Err(bad(format!("rank {rank} of size {size}")));
    }
    let flag = |key: &str| -> Result<bool, Pmi2Error> {
        match r.get(key) {
            None => Ok(false),
            Some(v) => parse_bool(v).ok_or_else(|| bad(format!("{key}={v:?} is not a boolean"))),
        }
    };
    Ok(FullInit {
        rank: rank as u32,
        size: size as u32,
        appnum: int("appnum")?,
        spawner_jobid: r.get("spawner-jobid").map(str::to_string),
        debugged: flag("debugged")?,
        verbose: flag("pmiverbose")?,
    })
}

/// Splits a value as [`Pmi2::put`] stores it: the encoded pieces, the
/// first prefixed with the piece count and `:`.
fn split_value(value: &str) -> Vec<String> {
    let enc = encode_value(value);
    // The count prefix takes digits(n) + 1 bytes of the first piece; n
    // depends on the split, so settle it by iterating (at most twice).
    let mut digits = 1;
    loop {
        let pieces = split_encoded(&enc, CHUNK - digits - 1);
        let n = pieces.len().to_string();
        if n.len() <= digits {
            let mut out: Vec<String> = pieces.iter().map(|p| p.to_string()).collect();
            out[0] = format!("{n}:{}", out[0]);
            return out;
        }
        digits = n.len();
    }
}

/// Parses `PMI_process_mapping` (`(vector,(start,nodes,per_node),...)`:
/// blocks of `per_node` consecutive ranks on each of `nodes` nodes from
/// node `start` on, the vector repeated until every rank is placed) into
/// the node of each of `size` ranks.
pub fn parse_process_mapping(text: &str, size: u32) -> Result<Vec<u32>, String> {
    let t: String = text.chars().filter(|c| !c.is_whitespace()).collect();
    let inner = t
        .strip_prefix("(vector,")
        .and_then(|s| s.strip_suffix(')'))
        .ok_or("not (vector,...)")?;
    let mut blocks = Vec::new();
    for part in inner.split("),") {
        let p = part.trim_start_matches('(').trim_end_matches(')');
        let nums: Vec<u32> = p
            .split(',')
            .map(|x| {
                x.parse::<u32>()
                    .map_err(|_| format!("{x:?} is not a number"))
            })
            .collect::<Result<_, _>>()?;
        let [start, nodes, per] = nums[..] else {
            return Err(format!("({p}) is not (start,nodes,ranks per node)"));
        };
        if nodes == 0 || per == 0 {
            return Err(format!("({p}) places no rank"));
        }
        blocks.push((start, nodes, per));
    }
    let mut out = Vec::with_capacity(size as usize);
    'fill: loop {
        for &(start, nodes, per) in &blocks {
            for node in start..start.saturating_add(nodes) {
                for _ in 0..per {
                    if out.len() == size as usize {
                        break 'fill;
                    }
                    out.push(node);
                }
            }
        }
    }
    Ok(out)
}

/// The node index and local rank of `rank` among ranks whose node
/// identities are `nodes` (index = rank): node indices number the distinct
/// identities in order of first appearance; the local rank counts the
/// lower ranks with the same identity.
pub fn placement(nodes: &[String], rank: usize) -> (u32, u32) {
    let mine = &nodes[rank];
    let mut seen: Vec<&String> = Vec::new();
    for n in nodes {
        if !seen.contains(&n) {
            seen.push(n);
        }
    }
    let index = seen.iter().position(|n| *n == mine).unwrap_or(0) as u32;
    let local = nodes[..rank].iter().filter(|n| *n == mine).count() as u32;
    (index, local)
}

/// Key of rank `r`'s node identity.
fn node_key(r: u32) -> String {
    format!("bcl.node.{r}")
}

/// Key of rank `r`'s address and table.
fn member_key(r: u32) -> String {
    format!("bcl.member.{r}")
}

/// A process that has learnt who it is through PMI-2 and waits to publish
/// its address and table ([`exchange`](Self::exchange)).
#[derive(Debug)]
pub struct PmiStart {
    pmi: Pmi2,
    /// Who it is: rank and size from `fullinit`, local rank from the node
    /// exchange, the job id from `job-getid`, the node name from
    /// `$BCL_NODE` (or Slurm's `$SLURMD_NODENAME`).
    pub info: JobInfo,
    /// The index of its node among the job's nodes (order of first
    /// appearance by rank).
    pub node_index: u32,
    /// Every rank's node identity, index = rank.
    pub nodes: Vec<String>,
}

/// Connects through `$PMI_FD` and places this process: steps 1 and 2 of
/// the module documentation, with this node's [`node_identity`].
pub fn start(timeout: Duration) -> Result<PmiStart, BootstrapError> {
    let pmi = Pmi2::from_env(timeout)?;
    let node = std::env::var("BCL_NODE")
        .or_else(|_| std::env::var("SLURMD_NODENAME"))
        .ok();
    start_on(pmi, &node_identity(), node, timeout)
}

/// [`start`] on a connection, with a given node identity.
pub fn start_on(
    mut pmi: Pmi2,
    identity: &str,
    node: Option<String>,
    timeout: Duration,
) -> Result<PmiStart, BootstrapError> {
    let (rank, size) = (pmi.rank(), pmi.size());
    pmi.put(&node_key(rank), identity, timeout)?;
    pmi.kvs_fence(timeout)?;
    let mut nodes = Vec::with_capacity(size as usize);
    for r in 0..size {
        match pmi.get(&node_key(r), timeout)? {
            Some(n) => nodes.push(n),
            None => {
                return Err(Pmi2Error::Malformed {
                    cmd: "kvs-get".into(),
                    why: format!("rank {r} put no node identity before the fence"),
                }
                .into())
            }
        }
    }
    let (node_index, local_rank) = placement(&nodes, rank as usize);
    let info = JobInfo::new(rank, size, local_rank, node, pmi.job_id().to_string())?;
    Ok(PmiStart {
        pmi,
        info,
        node_index,
        nodes,
    })
}

impl PmiStart {
    /// Publishes this rank's address and table, fences, and returns every
    /// rank's (index = rank) with the [`Session`] that keeps the
    /// connection (its barrier is a fence; dropping it finalizes): what
    /// [`exchange`](super::bootstrap::exchange) returns for `bcl-run`.
    pub fn exchange(
        mut self,
        addr: ProcessAddr,
        table: &DescriptorTable,
        timeout: Duration,
    ) -> Result<(Vec<Member>, Session), BootstrapError> {
        let rank = self.info.rank;
        let mine = serde_json::json!({"addr": addr.to_string(), "table": table});
        self.pmi
            .put(&member_key(rank), &mine.to_string(), timeout)?;
        self.pmi.kvs_fence(timeout)?;
        let mut members = Vec::with_capacity(self.info.size as usize);
        for r in 0..self.info.size {
            let bad = |why: String| {
                BootstrapError::from(Pmi2Error::Malformed {
                    cmd: "kvs-get".into(),
                    why: format!("rank {r}'s address and table: {why}"),
                })
            };
            let text = self
                .pmi
                .get(&member_key(r), timeout)?
                .ok_or_else(|| bad("not put before the fence".into()))?;
            let v: serde_json::Value =
                serde_json::from_str(&text).map_err(|e| bad(e.to_string()))?;
            let a = v
                .get("addr")
                .and_then(serde_json::Value::as_str)
                .ok_or_else(|| bad("no addr".into()))?;
            a.parse::<ProcessAddr>()
                .map_err(|_| bad(format!("bad process address {a:?}")))?;
            let t = DescriptorTable::from_value(v.get("table").cloned().unwrap_or_default())
                .map_err(|e| bad(e.to_string()))?;
            members.push(Member {
                rank: r,
                addr: a.to_string(),
                table: t,
            });
        }
        Ok((members, Session::from_pmi(self.pmi)))
    }

    /// The connection, for other PMI calls before the exchange.
    pub fn pmi(&mut self) -> &mut Pmi2 {
        &mut self.pmi
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::sync::{Arc, Condvar, Mutex};

    const T: Duration = Duration::from_secs(10);

    /// Reads one frame at the server's end.
    fn server_read(s: &mut UnixStream) -> Option<Command> {
        let mut len = [0u8; LEN_FIELD];
        s.read_exact(&mut len).ok()?;
        let n: usize = String::from_utf8_lossy(&len).trim().parse().unwrap();
        let mut body = vec![0u8; n];
        s.read_exact(&mut body).unwrap();
        Some(Command::decode(&body).unwrap())
    }

    fn server_send(s: &mut UnixStream, c: &Command) {
        s.write_all(&c.encode().unwrap()).unwrap();
    }

    /// Answers the PMI-1 init line (after checking it).
    fn server_init(s: &mut UnixStream, reply: &str) {
        let mut line = Vec::new();
        let mut b = [0u8; 1];
        while s.read_exact(&mut b).is_ok() && b[0] != b'\n' {
            line.push(b[0]);
        }
        assert_eq!(line, b"cmd=init pmi_version=2 pmi_subversion=0");
        s.write_all(reply.as_bytes()).unwrap();
    }

    const INIT_OK: &str = "cmd=response_to_init pmi_version=2 pmi_subversion=0 rc=0\n";

    /// A fake launcher for `size` ranks: one thread per connection, a
    /// shared KVS, fences across all ranks, every request recorded.
    struct FakeLauncher {
        kvs: Mutex<(HashMap<String, String>, u64, u32)>,
        cv: Condvar,
        size: u32,
        seen: Mutex<Vec<Command>>,
    }

    impl FakeLauncher {
        fn new(size: u32) -> Arc<FakeLauncher> {
            Arc::new(FakeLauncher {
                kvs: Mutex::new((HashMap::new(), 0, 0)),
                cv: Condvar::new(),
                size,
                seen: Mutex::new(Vec::new()),
            })
        }

        /// Serves rank `rank` on `s` until finalize or close.
        fn serve(self: &Arc<Self>, mut s: UnixStream, rank: u32) {
            server_init(&mut s, INIT_OK);
            while let Some(c) = server_read(&mut s) {
                self.seen.lock().unwrap().push(c.clone());
                let reply = match c.cmd.as_str() {
                    "fullinit" => {
                        assert_eq!(c.get("pmirank"), Some(rank.to_string().as_str()));
                        Command::new("fullinit-response")
                            .with("pmi-version", "2")
                            .with("pmi-subversion", "0")
                            .with("rank", rank.to_string())
                            .with("size", self.size.to_string())
                            .with("appnum", "0")
                            .with("debugged", "FALSE")
                            .with("pmiverbose", "FALSE")
                            .with("rc", "0")
                    }
                    "job-getid" => Command::new("job-getid-response")
                        .with("jobid", "kvs_42_0")
                        .with("rc", "0"),
                    "kvs-put" => {
                        let v = c.get("value").unwrap();
                        assert!(v.len() <= MAX_VALLEN && !v.contains([';', '=', ' ']));
                        assert!(c.get("key").unwrap().len() <= MAX_KEYLEN);
                        let mut k = self.kvs.lock().unwrap();
                        k.0.insert(c.get("key").unwrap().into(), v.into());
                        Command::new("kvs-put-response").with("rc", "0")
                    }
                    "kvs-fence" => {
                        let mut k = self.kvs.lock().unwrap();
                        let gen = k.1;
                        k.2 += 1;
                        if k.2 == self.size {
                            k.2 = 0;
                            k.1 += 1;
                            self.cv.notify_all();
                        } else {
                            while k.1 == gen {
                                k = self.cv.wait(k).unwrap();
                            }
                        }
                        Command::new("kvs-fence-response").with("rc", "0")
                    }
                    "kvs-get" => {
                        assert_eq!(c.get("jobid"), Some("kvs_42_0"));
                        let k = self.kvs.lock().unwrap();
                        match k.0.get(c.get("key").unwrap()) {
                            Some(v) => Command::new("kvs-get-response")
                                .with("found", "TRUE")
                                .with("value", v.clone())
                                .with("rc", "0"),
                            None => Command::new("kvs-get-response")
                                .with("found", "FALSE")
                                .with("rc", "0"),
                        }
                    }
                    "info-getjobattr" => Command::new("info-getjobattr-response")
                        .with("found", "TRUE")
                        .with("value", "(vector,(0,2,2))")
                        .with("rc", "0"),
                    "finalize" => {
                        server_send(&mut s, &Command::new("finalize-response").with("rc", "0"));
                        return;
                    }
                    other => panic!("unexpected command {other}"),
                };
                server_send(&mut s, &reply);
            }
        }
    }

    /// A client connected to a server thread running `serve`.
    fn with_server(
        serve: impl FnOnce(UnixStream) + Send + 'static,
    ) -> (UnixStream, std::thread::JoinHandle<()>) {
        let (c, s) = UnixStream::pair().unwrap();
        (c, std::thread::spawn(move || serve(s)))
    }

    /// A server that does init and fullinit properly, then answers the
    /// next request with `reply` (raw bytes, frame and all).
    fn answering(reply: Vec<u8>) -> impl FnOnce(UnixStream) + Send + 'static {
        move |mut s| {
            server_init(&mut s, INIT_OK);
            server_read(&mut s).unwrap();
            server_send(
                &mut s,
                &Command::new("fullinit-response")
                    .with("rank", "0")
                    .with("size", "1")
                    .with("appnum", "0")
                    .with("rc", "0"),
            );
            server_read(&mut s).unwrap();
            server_send(
                &mut s,
                &Command::new("job-getid-response")
                    .with("jobid", "j")
                    .with("rc", "0"),
            );
            if server_read(&mut s).is_some() && !reply.is_empty() {
                s.write_all(&reply).unwrap();
            }
            // Hold the connection open until the client is done.
            let mut b = [0u8; 1];
            let _ = s.read(&mut b);
        }
    }

    fn frame(body: &str) -> Vec<u8> {
        format!("{:<6}{body}", body.len()).into_bytes()
    }

    #[test]
    fn commands_encode_with_a_length_field_and_doubled_semicolons() {
        let c = Command::new("kvs-put")
            .with("key", "k")
            .with("value", "a;b=c");
        let f = c.encode().unwrap();
        assert_eq!(f, b"31    cmd=kvs-put;key=k;value=a;;b=c;");
        assert_eq!(Command::decode(&f[LEN_FIELD..]).unwrap(), c);
        // ';;' at the end of a value, '=' inside one, an empty value.
        let c = Command::new("x")
            .with("a", "b;")
            .with("e", "")
            .with("f", "k=v=w");
        assert_eq!(
            Command::decode(&c.encode().unwrap()[LEN_FIELD..]).unwrap(),
            c
        );
        // The launchers' own replies.
        let r = Command::decode(b"cmd=fullinit-response;pmi-version=2;pmi-subversion=0;rank=0;size=2;appnum=0;debugged=FALSE;pmiverbose=FALSE;rc=0;").unwrap();
        assert_eq!(r.cmd, "fullinit-response");
        assert_eq!(r.get("size"), Some("2"));
        assert_eq!(r.get("debugged"), Some("FALSE"));
        // Limits are refused, not cut.
        let long_key = "k".repeat(MAX_KEYLEN + 1);
        assert!(Command::new("kvs-get")
            .with(&long_key, "v")
            .encode()
            .unwrap_err()
            .contains("1 to 64 bytes"));
        assert!(Command::new("kvs-put")
            .with("value", "v".repeat(MAX_VALLEN + 1))
            .encode()
            .unwrap_err()
            .contains("at most 1024"));
        assert!(Command::new("c").with("a=b", "v").encode().is_err());
    }

    #[test]
    fn malformed_frames_say_what_is_wrong() {
        let err = |b: &[u8]| Command::decode(b).unwrap_err();
        assert_eq!(err(b""), "empty");
        assert!(err(b"rc=0;cmd=x;").contains("first pair is \"rc\""));
        assert!(err(b"cmd=x;rc").contains("no '='"));
        assert!(err(b"cmd=x;rc;").contains("no '='"));
        assert!(err(b"cmd=x;rc=0").contains("not ended by ';'"));
        assert!(err(b"cmd=x;=0;").contains("without a key"));
        assert!(err(&[b'c', b'm', b'd', b'=', 0xff, b';']).contains("UTF-8"));
    }

    #[test]
    fn values_are_percent_encoded_without_separators() {
        for v in [
            "",
            "plain-text_1.2:3/4,{}[]@+",
            "a;b=c d%e\"f'g\n\t",
            "ünïcödé ✓",
            r#"{"version":1,"node":"x","entries":[{"method":"shm","address":"1.0@x"}]}"#,
        ] {
            let e = encode_value(v);
            assert!(
                !e.contains([';', '=', ' ', '"', '\n', '\'']),
                "{v:?} -> {e:?}"
            );
            assert_eq!(decode_value(&e).unwrap(), v);
        }
        assert_eq!(encode_value("a;b=c%"), "a%3Bb%3Dc%25");
        assert!(decode_value("ab%4").is_err());
        assert!(decode_value("%zz").is_err());
    }

    #[test]
    fn long_values_split_across_keys_within_the_limits() {
        // Escapes straddle every cut position across these lengths.
        for len in [0, 1, 997, 998, 999, 1000, 1001, 2500, 20_000] {
            let value: String = (0..len)
                .map(|i| if i % 7 == 0 { ';' } else { 'x' })
                .collect();
            let pieces = split_value(&value);
            assert!(pieces.iter().all(|p| p.len() <= CHUNK), "{len}");
            let (n, first) = pieces[0].split_once(':').unwrap();
            assert_eq!(n.parse::<usize>().unwrap(), pieces.len());
            let joined: String = std::iter::once(first)
                .chain(pieces[1..].iter().map(String::as_str))
                .collect();
            assert_eq!(decode_value(&joined).unwrap(), value, "{len}");
            for p in &pieces {
                assert!(decode_value(p.split_once(':').map_or(p, |x| x.1)).is_ok());
            }
        }
        assert_eq!(split_value(&"y".repeat(3000)).len(), 4);
    }

    #[test]
    fn put_and_get_round_trip_values_of_any_size_through_a_launcher() {
        let l = FakeLauncher::new(1);
        let l2 = l.clone();
        let (c, h) = with_server(move |s| l2.serve(s, 0));
        let mut p = Pmi2::connect(c, Some("0"), None, T).unwrap();
        assert_eq!((p.rank(), p.size(), p.job_id()), (0, 1, "kvs_42_0"));
        let big: String = (0..9000)
            .map(|i| char::from(b' ' + (i % 95) as u8))
            .collect();
        p.put("bcl.big", &big, T).unwrap();
        p.put("bcl.small", "a;b", T).unwrap();
        p.kvs_fence(T).unwrap();
        assert_eq!(p.get("bcl.big", T).unwrap().as_deref(), Some(big.as_str()));
        assert_eq!(p.get("bcl.small", T).unwrap().as_deref(), Some("a;b"));
        assert_eq!(p.get("bcl.none", T).unwrap(), None);
        assert_eq!(
            p.kvs_get("bcl.small", T).unwrap().as_deref(),
            Some("1:a%3Bb")
        );
        let puts = l
            .seen
            .lock()
            .unwrap()
            .iter()
            .filter(|c| c.cmd == "kvs-put" && c.get("key").unwrap().starts_with("bcl.big"))
            .count();
        assert!(puts > 9, "a 9000-byte value over {puts} keys");
        // A raw value with ';' is refused before it reaches the launcher.
        let e = p.kvs_put("k", "a;b", T).unwrap_err().to_string();
        assert!(e.starts_with("kvs-put: ") && e.contains("';'"), "{e}");
        assert_eq!(p.process_mapping(T).unwrap(), Some(vec![0]));
        p.finalize(T).unwrap();
        p.finalize(T).unwrap();
        assert!(p
            .kvs_fence(T)
            .unwrap_err()
            .to_string()
            .contains("finalized"));
        h.join().unwrap();
        let seen = l.seen.lock().unwrap();
        assert_eq!(seen[0].get("threaded"), Some("FALSE"));
        assert_eq!(seen.last().unwrap().cmd, "finalize");
    }

    #[test]
    fn unexpected_replies_are_errors_naming_the_command() {
        let fence = |reply: Vec<u8>| {
            let (c, h) = with_server(answering(reply));
            let mut p = Pmi2::connect(c, None, None, T).unwrap();
            let e = p.kvs_fence(Duration::from_millis(300)).unwrap_err();
            drop(p);
            h.join().unwrap();
            e.to_string()
        };
        let e = fence(frame("cmd=kvs-put-response;rc=0;"));
        assert_eq!(
            e,
            "kvs-fence: expected kvs-fence-response, the launcher answered cmd=kvs-put-response;rc=0"
        );
        let e = fence(frame("cmd=kvs-fence-response;rc=7;errmsg=no luck;"));
        assert_eq!(e, "kvs-fence: refused by the launcher (rc=7: no luck)");
        let e = fence(frame("cmd=kvs-fence-response;"));
        assert!(e.starts_with("kvs-fence: malformed reply: no rc"), "{e}");
        let e = fence(frame("cmd=kvs-fence-response;rc=x;"));
        assert!(e.contains("rc=\"x\" is not a number"), "{e}");
        let e = fence(b"abcdefcmd=kvs-fence-response;rc=0;".to_vec());
        assert!(e.contains("length field \"abcdef\" is not a number"), "{e}");
        let e = fence(b"0     ".to_vec());
        assert!(e.contains("length 0 is not between"), "{e}");
        let e = fence(frame("cmd=kvs-fence-response;rc"));
        assert!(
            e.starts_with("kvs-fence: malformed reply: \"rc\" has no '='"),
            "{e}"
        );
        // A reply cut short, then silence: a timeout, not a hang.
        let e = fence(b"40    cmd=kvs-fence".to_vec());
        assert!(
            e.starts_with("kvs-fence: no reply from the launcher within"),
            "{e}"
        );
        // No reply at all; the next command does not read the late reply
        // as its own.
        let (c, h) = with_server(answering(Vec::new()));
        let mut p = Pmi2::connect(c, None, None, T).unwrap();
        let e = p
            .kvs_fence(Duration::from_millis(300))
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("kvs-fence: no reply"), "{e}");
        let e = p.kvs_get("k", T).unwrap_err().to_string();
        assert!(
            e.starts_with("kvs-get: the PMI connection is out of step after an earlier failure (kvs-fence: no reply"),
            "{e}"
        );
        p.finalize(T).unwrap();
        drop(p);
        h.join().unwrap();
        // A launcher that hangs up.
        let (c, h) = with_server(|mut s| {
            server_init(&mut s, INIT_OK);
            server_read(&mut s);
        });
        let e = Pmi2::connect(c, None, None, T).unwrap_err().to_string();
        h.join().unwrap();
        assert_eq!(e, "fullinit: the launcher closed the PMI connection");
    }

    #[test]
    fn abort_asks_for_the_whole_job_without_waiting() {
        let (tx, rx) = std::sync::mpsc::channel();
        let (c, h) = with_server(move |mut s| {
            server_init(&mut s, INIT_OK);
            server_read(&mut s);
            server_send(
                &mut s,
                &Command::new("fullinit-response")
                    .with("rank", "0")
                    .with("size", "1")
                    .with("appnum", "-1")
                    .with("rc", "0"),
            );
            server_read(&mut s);
            server_send(
                &mut s,
                &Command::new("job-getid-response")
                    .with("jobid", "7.0")
                    .with("rc", "0"),
            );
            tx.send(server_read(&mut s).unwrap()).unwrap();
        });
        let mut p = Pmi2::connect(c, Some("0"), Some("7.0"), T).unwrap();
        assert_eq!(p.init().appnum, -1);
        p.abort(3, &format!("bad; {}", "x".repeat(2000))).unwrap();
        let got = rx.recv().unwrap();
        h.join().unwrap();
        assert_eq!(got.cmd, "abort");
        assert_eq!(got.get("isworld"), Some("TRUE"));
        assert_eq!(got.get("exitcode"), Some("3"));
        let msg = got.get("msg").unwrap();
        assert!(
            msg.starts_with("bad, xx") && msg.len() == MAX_VALLEN,
            "{msg}"
        );
    }

    #[test]
    fn bad_init_and_fullinit_replies_are_refused() {
        let connect = |serve: Box<dyn FnOnce(UnixStream) + Send>| {
            let (c, h) = with_server(serve);
            let r = Pmi2::connect(c, None, None, Duration::from_millis(500));
            h.join().unwrap();
            r.unwrap_err().to_string()
        };
        // A PMI-1-only launcher.
        let e = connect(Box::new(|mut s| {
            server_init(
                &mut s,
                "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=-1\n",
            )
        }));
        assert!(e.starts_with("init: refused by the launcher (rc=-1: the launcher does not speak PMI-2: it offers version 1.1"), "{e}");
        let e = connect(Box::new(|mut s| server_init(&mut s, "cmd=what\n")));
        assert!(e.starts_with("init: expected cmd=response_to_init"), "{e}");
        let fullinit = |reply: &'static str| -> Box<dyn FnOnce(UnixStream) + Send> {
            Box::new(move |mut s| {
                server_init(&mut s, INIT_OK);
                server_read(&mut s);
                s.write_all(&frame(reply)).unwrap();
                let _ = s.read(&mut [0u8; 1]);
            })
        };
        let e = connect(fullinit(
            "cmd=fullinit-response;rank=2;size=2;appnum=0;rc=0;",
        ));
        assert_eq!(e, "fullinit: malformed reply: rank 2 of size 2");
        let e = connect(fullinit("cmd=fullinit-response;size=2;appnum=0;rc=0;"));
        assert!(
            e.starts_with("fullinit: malformed reply: no rank in"),
            "{e}"
        );
        let e = connect(fullinit(
            "cmd=fullinit-response;rank=0;size=2;appnum=0;debugged=maybe;rc=0;",
        ));
        assert!(e.contains("debugged=\"maybe\" is not a boolean"), "{e}");
        let e = connect(fullinit(
            "cmd=fullinit-response;rc=14;errmsg=pmijobid missing;",
        ));
        assert_eq!(
            e,
            "fullinit: refused by the launcher (rc=14: pmijobid missing)"
        );
    }

    #[test]
    fn ranks_are_placed_by_node_in_order_of_first_appearance() {
        let n = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let nodes = n(&["b", "a", "b", "c", "a"]);
        let got: Vec<(u32, u32)> = (0..5).map(|r| placement(&nodes, r)).collect();
        assert_eq!(got, [(0, 0), (1, 0), (0, 1), (2, 0), (1, 1)]);
        assert_eq!(placement(&n(&["x"]), 0), (0, 0));
    }

    #[test]
    fn process_mappings_parse() {
        assert_eq!(
            parse_process_mapping("(vector,(0,1,1))", 2).unwrap(),
            [0, 0]
        );
        assert_eq!(
            parse_process_mapping("(vector,(0,2,2))", 5).unwrap(),
            [0, 0, 1, 1, 0]
        );
        assert_eq!(
            parse_process_mapping("(vector,(0,2,1),(2,1,2))", 4).unwrap(),
            [0, 1, 2, 2]
        );
        assert!(parse_process_mapping("(vector,(0,0,1))", 1).is_err());
        assert!(parse_process_mapping("(list,(0,1,1))", 1).is_err());
        assert!(parse_process_mapping("(vector,(0,1))", 1).is_err());
    }

    #[test]
    fn a_job_of_three_exchanges_places_and_tables_through_the_launcher() {
        let l = FakeLauncher::new(3);
        let identities = ["node-b", "node-a", "node-b"];
        let mut handles = Vec::new();
        for r in 0..3u32 {
            let l2 = l.clone();
            let (c, h) = with_server(move |s| l2.serve(s, r));
            handles.push(h);
            handles.push(std::thread::spawn(move || {
                let p = Pmi2::connect(c, Some(&r.to_string()), None, T).unwrap();
                let st = start_on(p, identities[r as usize], None, T).unwrap();
                let (ni, lr) = (st.node_index, st.info.local_rank);
                assert_eq!(st.info.job_id, "kvs_42_0");
                let addr = ProcessAddr::new(ni + 1, lr as u16);
                let mut t = DescriptorTable::new(identities[r as usize], "h");
                t.push(
                    &bcl_core::Descriptor::new("udp", format!("10.0.0.{r}:99")),
                    Some("A"),
                );
                let (members, mut session) = st.exchange(addr, &t, T).unwrap();
                session.barrier(T).unwrap();
                let got: Vec<(u32, String, String)> = members
                    .iter()
                    .map(|m| (m.rank, m.addr.clone(), m.table.entries[0].address.clone()))
                    .collect();
                assert_eq!(
                    got,
                    [
                        (0, "1.0".to_string(), "10.0.0.0:99".to_string()),
                        (1, "2.0".to_string(), "10.0.0.1:99".to_string()),
                        (2, "1.1".to_string(), "10.0.0.2:99".to_string()),
                    ]
                );
                // Dropping the session finalizes.
            }));
        }
        for h in handles {
            h.join().unwrap();
        }
        let seen = l.seen.lock().unwrap();
        assert_eq!(seen.iter().filter(|c| c.cmd == "finalize").count(), 3);
        assert_eq!(seen.iter().filter(|c| c.cmd == "kvs-fence").count(), 9);
    }
}
