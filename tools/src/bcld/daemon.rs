//! The daemon: its NICs, the listening socket, the clients, and the loop
//! that moves frames between the clients' rings and the NICs.
//!
//! One thread does everything, in rounds: accept new clients, answer
//! their requests, move frames from every client's ring to its NIC (per
//! NIC, all its clients' frames in one transmit burst of the NIC method),
//! move received frames into the rings of the clients they are for, and
//! sleep when a round found nothing to do (unless busy-polling), in one
//! epoll set of everything that can wake it.

use super::bundler::Offer;
use super::nic::Nic;
use super::session::{Cred, Job, Session};
use super::trusted::{check_outgoing, destination, Undeliverable};
use bcl::core::method::{Descriptor, LinkId, TxFrame};
use bcl::core::wire::container;
use bcl::core::{JobKey, ProcessAddr};
use bcl::shm::engine::{ClientStatus, Status, WaitSet, LOCAL_LINK, RING_NODE_BITS};
use std::collections::{BTreeMap, HashMap};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Frames taken from one client's ring per round, so that one busy client
/// cannot hold the NIC while others wait.
const PER_CLIENT_BURST: usize = 32;

/// Frames received from the NIC per round.
const RX_BURST: usize = 64;

/// Longest sleep: the daemon wakes this often even when idle, to notice
/// dead clients whose sockets the kernel has not closed yet.
const IDLE_SLEEP_MS: u16 = 1000;

/// A daemon that has not slept looks at its sockets this often.
const SOCKET_PERIOD: Duration = Duration::from_millis(1);

/// A link a client says leads to a daemon is probed this often until that
/// daemon answers...
const PROBE_PERIOD: Duration = Duration::from_secs(1);

/// ...at most this many times.
const PROBE_TRIES: u32 = 5;

/// How the daemon runs.
#[derive(Clone, Debug)]
pub struct Config {
    /// The node's id (the same as in the cluster description).
    pub node: u32,
    /// The Unix socket clients connect to.
    pub socket: PathBuf,
    /// The NICs and the methods to try on each, best first: the daemon
    /// owns every NIC that opens with one of its candidates (the first
    /// that opens), numbered in the order the NICs are first named.
    pub candidates: Vec<Candidate>,
    /// The EtherType of BCL frames; `None`: the method's default for jobs.
    pub ethertype: Option<u16>,
    /// Spin instead of sleeping when idle.
    pub busy_poll: bool,
    /// Bundle small frames of several clients for the same remote daemon
    /// into one container frame (containers from other daemons are always
    /// accepted).
    pub bundle: bool,
    /// Where the rings live.
    pub shm_dir: PathBuf,
}

/// A NIC and a method to open it with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Candidate {
    /// The method (`packet`, `afxdp`, `vfio`).
    pub method: String,
    /// The interface or PCI device; `None`: the only candidate there is.
    pub nic: Option<String>,
}

impl std::fmt::Display for Candidate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.nic {
            Some(n) => write!(f, "{} on {n}", self.method),
            None => write!(f, "{} on the only NIC", self.method),
        }
    }
}

/// Why the daemon could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// A setting cannot work.
    #[error("{0}")]
    Config(String),
    /// Another daemon answers on the socket.
    #[error("another bcld answers at {0}; stop it first (or use another --socket)")]
    Running(PathBuf),
    /// No NIC method could be opened.
    #[error("no NIC could be opened: {0}")]
    Nic(String),
    /// A system call failed.
    #[error("{context}: {source}")]
    Io {
        /// What the daemon was doing.
        context: String,
        /// The error.
        #[source]
        source: io::Error,
    },
}

fn io_err(context: impl Into<String>) -> impl FnOnce(io::Error) -> StartError {
    let context = context.into();
    move |source| StartError::Io { context, source }
}

/// Counters of the daemon as a whole, by name.
pub type Counters = BTreeMap<&'static str, u64>;

/// The running daemon.
pub struct Daemon {
    cfg: Config,
    /// The NICs, by number.
    nics: Vec<Nic>,
    /// What did not open at start, for people.
    start_notes: Vec<String>,
    /// Largest frame a client may send: the smallest of the NICs'.
    mtu: usize,
    listener: UnixListener,
    sessions: Vec<Option<Session>>,
    /// The session of each (job, port, NIC number).
    by_port: HashMap<(u32, u16, usize), usize>,
    jobs: HashMap<u32, Job>,
    counters: Counters,
    /// Frames between two local clients, waiting for delivery: records of
    /// job (4), port (2), the sender's NIC (1), length (2) and the frame.
    local: Vec<u8>,
    /// The client whose ring is read first in the next round.
    next_first: usize,
    /// The listening socket or a client's socket may have something.
    sockets_due: bool,
    /// What the daemon sleeps on: its socket, its NIC, every client's
    /// socket and ring.
    waits: WaitSet,
    /// The tokens of what woke the last sleep.
    woke: Vec<u64>,
}

/// Wait-set token of the listening socket.
const LISTENER_TOKEN: u64 = 0;
/// Wait-set token of NIC number 0 (NIC k has this plus k); above every
/// client's.
const NIC_TOKEN: u64 = 1 << 40;

/// Wait-set token of the socket of the client in slot `i`.
fn socket_token(i: usize) -> u64 {
    2 + 2 * i as u64
}

/// Wait-set token of the ring of the client in slot `i`.
fn ring_token(i: usize) -> u64 {
    3 + 2 * i as u64
}

/// Whether `token` is a socket's (the listener's or a client's): the
/// sockets are read only when one woke the daemon.
fn is_socket_token(token: u64) -> bool {
    token == LISTENER_TOKEN || ((2..NIC_TOKEN).contains(&token) && token.is_multiple_of(2))
}

impl Daemon {
    /// Cleans up what a previous daemon left, opens the NIC and listens.
    pub fn start(cfg: Config) -> Result<Daemon, StartError> {
        if cfg.node & RING_NODE_BITS != 0 {
            return Err(StartError::Config(format!(
                "--node {} is too large: node ids of clients must be below 2^26",
                cfg.node
            )));
        }
        let cleaned = bcl::shm::cleanup_stale(&cfg.shm_dir)
            .map_err(|e| StartError::Config(format!("cleaning up old rings: {e}")))?;
        if !cleaned.removed.is_empty() {
            eprintln!(
                "bcld: removed {} shared-memory files of dead processes",
                cleaned.removed.len()
            );
        }
        let (nics, start_notes) = super::nic::open_all(&cfg)?;
        let mtu = nics.iter().map(|n| n.mtu).min().unwrap_or_default();
        let listener = listen(&cfg.socket)?;
        let waits = WaitSet::new().map_err(io_err("creating the wait set"))?;
        waits
            .add(listener.as_raw_fd(), LISTENER_TOKEN)
            .map_err(io_err("adding the socket to the wait set"))?;
        for (k, nic) in nics.iter().enumerate() {
            if let Some(fd) = nic.method.readiness_fd() {
                waits
                    .add(fd, NIC_TOKEN + k as u64)
                    .map_err(io_err("adding a NIC to the wait set"))?;
            }
        }
        Ok(Daemon {
            cfg,
            nics,
            start_notes,
            mtu,
            listener,
            sessions: Vec::new(),
            by_port: HashMap::new(),
            jobs: HashMap::new(),
            counters: Counters::new(),
            local: Vec::new(),
            next_first: 0,
            sockets_due: true,
            waits,
            woke: Vec::new(),
        })
    }

    /// The descriptor of the first NIC (the one a client's hello gets
    /// when it names none).
    pub fn descriptor(&self) -> Descriptor {
        self.nics[0].descriptor()
    }

    /// Every NIC as `NAME=METHOD:ADDRESS`, by number.
    pub fn nic_labels(&self) -> Vec<String> {
        self.nics.iter().map(Nic::label).collect()
    }

    /// What did not open, and the methods' notes (attach mode, queues).
    pub fn notes(&self) -> Vec<String> {
        let mut notes = self.start_notes.clone();
        for (k, n) in self.nics.iter().enumerate() {
            notes.extend(
                n.method
                    .notes()
                    .into_iter()
                    .map(|x| format!("NIC {k}: {x}")),
            );
        }
        notes
    }

    /// Runs rounds until `stop` is set.
    pub fn run(&mut self, stop: &Arc<AtomicBool>) {
        let mut checked = Instant::now();
        while !stop.load(Ordering::Relaxed) {
            // The sockets cost a system call each to look at: only when the
            // last sleep says they have something, or once a millisecond
            // while the daemon is too busy to sleep.
            let mut work = false;
            if self.sockets_due || checked.elapsed() >= SOCKET_PERIOD {
                checked = Instant::now();
                self.sockets_due = false;
                work |= self.accept();
                work |= self.serve_requests();
                self.sockets_due = work;
                self.probe_again();
            }
            work |= self.forward_out();
            work |= self.forward_in();
            if !work && !self.cfg.busy_poll {
                self.sleep();
            }
        }
    }

    fn count(&mut self, name: &'static str) {
        *self.counters.entry(name).or_default() += 1;
    }

    fn accept(&mut self) -> bool {
        let mut any = false;
        loop {
            match self.listener.accept() {
                Ok((stream, _)) => {
                    any = true;
                    match Cred::of(&stream) {
                        Ok(cred) if stream.set_nonblocking(true).is_ok() => {
                            self.count("connections");
                            let s = Session::new(stream, cred);
                            let i = match self.sessions.iter().position(Option::is_none) {
                                Some(i) => i,
                                None => {
                                    self.sessions.push(None);
                                    self.sessions.len() - 1
                                }
                            };
                            if self.waits.add(s.ctl_fd(), socket_token(i)).is_err() {
                                self.count("wait_set_errors");
                            }
                            self.sessions[i] = Some(s);
                        }
                        _ => self.count("connections_without_credentials"),
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return any,
                Err(_) => {
                    self.count("accept_errors");
                    return any;
                }
            }
        }
    }

    /// Reads every client's socket and answers complete requests; removes
    /// clients whose socket closed.
    fn serve_requests(&mut self) -> bool {
        let mut any = false;
        for i in 0..self.sessions.len() {
            let Some(mut s) = self.sessions[i].take() else {
                continue;
            };
            let (requests, open) = s.read_requests();
            any |= !requests.is_empty() || !open;
            for line in requests {
                let reply = self.answer(i, &mut s, &line);
                if s.reply(&reply).is_err() {
                    break;
                }
            }
            if open && !s.ring_gone() {
                self.sessions[i] = Some(s);
            } else {
                self.forget(s);
            }
        }
        any
    }

    fn answer(&mut self, i: usize, s: &mut Session, line: &str) -> bcl::shm::engine::Reply {
        use bcl::shm::engine::{Reply, Request};
        let request: Request = match serde_json::from_str(line) {
            Ok(r) => r,
            Err(e) => {
                self.count("refused_requests");
                return Reply::Refused {
                    reason: format!("not a request ({e})"),
                };
            }
        };
        let reply = match request {
            Request::Hello {
                version,
                job,
                secret,
                local,
                nic,
            } => self.hello(i, s, version, JobKey(job), &secret, &local, nic.as_deref()),
            Request::Attach => {
                let reply = s.attach(&self.cfg.shm_dir, self.mtu);
                if let Some(fd) = s.ring_fd().filter(|_| matches!(reply, Reply::Attached)) {
                    if self.waits.add(fd, ring_token(i)).is_err() {
                        self.count("wait_set_errors");
                    }
                }
                reply
            }
            Request::OpenLink {
                descriptor,
                to_daemon,
            } => self.open_link(s, &descriptor, to_daemon),
            Request::Status => Reply::Status(self.status()),
        };
        if matches!(reply, Reply::Refused { .. }) {
            self.count("refused_requests");
            s.count("refused_requests");
        }
        reply
    }

    #[allow(clippy::too_many_arguments)]
    fn hello(
        &mut self,
        i: usize,
        s: &mut Session,
        version: u32,
        job: JobKey,
        secret: &str,
        local: &str,
        nic: Option<&str>,
    ) -> bcl::shm::engine::Reply {
        use bcl::shm::engine::{Reply, PROTOCOL_VERSION};
        let refuse = |reason: String| Reply::Refused { reason };
        if version != PROTOCOL_VERSION {
            return refuse(format!(
                "protocol version {version}; this bcld speaks {PROTOCOL_VERSION}"
            ));
        }
        if s.identity().is_some() {
            return refuse("this connection has said hello already".into());
        }
        let addr: ProcessAddr = match local.parse() {
            Ok(a) => a,
            Err(e) => return refuse(e.to_string()),
        };
        if addr.node.0 != self.cfg.node {
            return refuse(format!(
                "this bcld serves node {}; the endpoint is {addr} (open it with node {})",
                self.cfg.node, self.cfg.node
            ));
        }
        let k = match nic {
            None => 0,
            Some(name) => match self
                .nics
                .iter()
                .position(|n| n.name.as_deref() == Some(name))
            {
                Some(k) => k,
                None => {
                    return refuse(format!(
                        "this bcld owns no NIC {name:?} (its NICs: {})",
                        self.nic_labels().join(", ")
                    ))
                }
            },
        };
        let cred = s.cred();
        // One process address is one process: its connections through
        // the other NICs must come from the same pid.
        for j in 0..self.nics.len() {
            let Some(&other) = self.by_port.get(&(job.0, addr.port.0, j)) else {
                continue;
            };
            let pid = self.sessions[other].as_ref().map_or(0, |o| o.cred().pid);
            if j == k {
                return refuse(format!(
                    "{addr} of job {:#x} is taken by pid {pid} on NIC {k}",
                    job.0
                ));
            }
            if pid != cred.pid {
                return refuse(format!("{addr} of job {:#x} is taken by pid {pid}", job.0));
            }
        }
        match self.jobs.get_mut(&job.0) {
            Some(j) => {
                if j.uid != cred.uid {
                    return refuse(format!(
                        "job {:#x} belongs to uid {}, not uid {}",
                        job.0, j.uid, cred.uid
                    ));
                }
                if !j.secret_matches(secret) {
                    return refuse(format!("wrong secret for job {:#x}", job.0));
                }
                j.members += 1;
            }
            None => {
                self.jobs.insert(job.0, Job::new(cred.uid, secret));
            }
        }
        s.set_identity(job, addr, k);
        self.by_port.insert((job.0, addr.port.0, k), i);
        Reply::Welcome {
            node: self.cfg.node,
            mtu: self.mtu,
            method: self.nics[k].method.name().to_string(),
            address: self.nics[k].address.clone(),
            pid: std::process::id(),
            nic: k,
            nics: self
                .nics
                .iter()
                .map(|n| n.descriptor().to_string())
                .collect(),
        }
    }

    fn open_link(
        &mut self,
        s: &mut Session,
        descriptor: &str,
        to_daemon: bool,
    ) -> bcl::shm::engine::Reply {
        use bcl::shm::engine::Reply;
        if s.identity().is_none() {
            return Reply::Refused {
                reason: "say hello first".into(),
            };
        }
        let d: Descriptor = match descriptor.parse() {
            Ok(d) => d,
            Err(e) => {
                self.count("refused_descriptors");
                return Reply::Refused {
                    reason: e.to_string(),
                };
            }
        };
        // A peer on one of our own NICs is another client of ours.
        if self.nics.iter().any(|n| n.is(&d)) {
            return Reply::Link { link: LOCAL_LINK };
        }
        let sends_with = self.nics[s.nic()].method.name();
        if d.method != sends_with {
            self.count("refused_descriptors");
            return Reply::Refused {
                reason: format!("{d}: this client's NIC of bcld sends with {sends_with}"),
            };
        }
        let nic = &mut self.nics[s.nic()];
        match nic.method.open_link(&d) {
            Ok(l) => {
                nic.links = nic.links.max(l.0.saturating_add(1));
                if to_daemon
                    && self.cfg.bundle
                    && !nic.daemon_links.contains(&l.0)
                    && !nic.probing.contains_key(&l.0)
                {
                    nic.bundler.probe(l.0, true);
                    nic.probing.insert(l.0, (Instant::now(), 1));
                }
                Reply::Link { link: l.0 }
            }
            Err(e) => {
                self.count("refused_descriptors");
                Reply::Refused {
                    reason: e.to_string(),
                }
            }
        }
    }

    /// The daemon's NIC, clients and counters.
    pub fn status(&self) -> Status {
        let mut counters: Vec<(String, u64)> = self
            .counters
            .iter()
            .map(|(k, v)| (k.to_string(), *v))
            .collect();
        let sum = |f: &dyn Fn(&Nic) -> u64| self.nics.iter().map(f).sum::<u64>();
        counters.push((
            "nic_tx_frames".into(),
            sum(&|n| n.method.counters().tx_frames),
        ));
        counters.push((
            "nic_rx_dropped".into(),
            sum(&|n| n.method.counters().rx_dropped()),
        ));
        counters.push(("tx_containers".into(), sum(&|n| n.bundler.containers)));
        counters.push((
            "tx_frames_bundled".into(),
            sum(&|n| n.bundler.frames_bundled),
        ));
        counters.push(("probes_sent".into(), sum(&|n| n.bundler.probes)));
        counters.push(("daemon_links".into(), sum(&|n| n.daemon_links.len() as u64)));
        if self.nics.len() > 1 {
            for (k, n) in self.nics.iter().enumerate() {
                let c = n.method.counters();
                counters.push((format!("nic{k}_tx_frames"), c.tx_frames));
                counters.push((format!("nic{k}_rx_frames"), c.rx_frames));
            }
        }
        Status {
            node: self.cfg.node,
            pid: std::process::id(),
            nics: self
                .nics
                .iter()
                .map(|n| n.descriptor().to_string())
                .collect(),
            nic_names: self
                .nics
                .iter()
                .map(|n| n.name.clone().unwrap_or_default())
                .collect(),
            clients: self
                .sessions
                .iter()
                .flatten()
                .filter_map(|s| {
                    let (job, addr) = s.identity()?;
                    Some(ClientStatus {
                        addr: addr.to_string(),
                        job: job.0,
                        uid: s.cred().uid,
                        pid: s.cred().pid,
                        counters: s.counters(),
                    })
                })
                .collect(),
            counters,
        }
    }

    /// Removes a client: its port, its job membership, its ring.
    fn forget(&mut self, s: Session) {
        if let Some(why) = s.broken() {
            self.count("clients_dropped_broken_ring");
            let who = s.identity().map(|(_, a)| a.to_string()).unwrap_or_default();
            eprintln!("bcld: dropped client {who} (pid {}): {why}", s.cred().pid);
        }
        if let Some((job, addr)) = s.identity() {
            self.by_port.remove(&(job.0, addr.port.0, s.nic()));
            if let Some(j) = self.jobs.get_mut(&job.0) {
                j.members -= 1;
                if j.members == 0 {
                    self.jobs.remove(&job.0);
                }
            }
            self.count("clients_left");
        }
        drop(s);
        // A client that died leaves its own ring behind; the daemon may
        // remove it (and any other ring of a dead process).
        let _ = bcl::shm::cleanup_stale(&self.cfg.shm_dir);
    }

    /// Probes again the links a client said lead to a daemon that has not
    /// answered (the probe or its answer may have been lost).
    fn probe_again(&mut self) {
        let now = Instant::now();
        for nic in &mut self.nics {
            let Nic {
                probing,
                daemon_links,
                bundler,
                ..
            } = nic;
            probing.retain(|link, (last, tries)| {
                if daemon_links.contains(link) || *tries >= PROBE_TRIES {
                    return false;
                }
                if now.duration_since(*last) >= PROBE_PERIOD {
                    bundler.probe(*link, true);
                    *last = now;
                    *tries += 1;
                }
                true
            });
        }
    }

    /// Moves frames from the clients' rings to their NICs (and to local
    /// clients); returns whether it moved any.
    fn forward_out(&mut self) -> bool {
        let n = self.sessions.len();
        let first = if n == 0 { 0 } else { self.next_first % n };
        self.next_first = first + 1;
        self.local.clear();
        let mut work = false;
        for k in 0..self.nics.len() {
            work |= self.forward_out_on(k, first);
        }
        self.deliver_local();
        work
    }

    /// [`forward_out`](Self::forward_out) for the clients of NIC `k`,
    /// starting at the client in slot `first`. Small frames for a link
    /// that leads to a daemon travel in containers
    /// ([`Bundler`](super::bundler::Bundler)).
    fn forward_out_on(&mut self, k: usize, first: usize) -> bool {
        let Daemon {
            nics,
            sessions,
            counters,
            local,
            mtu,
            cfg,
            ..
        } = self;
        let nic = &mut nics[k];
        for link in nic.answers_due.drain(..) {
            nic.bundler.probe(link, false);
        }
        let Nic {
            method,
            links,
            bundler,
            daemon_links,
            ..
        } = nic;
        let n = sessions.len();
        if n == 0 && !bundler.has_ready() {
            return false;
        }
        let bundle = cfg.bundle;
        let mut visited = 0;
        let mut taken = 0;
        let mut moved = 0usize;
        let mut closed = false;
        let mut source = |buf: &mut [u8]| -> Option<TxFrame> {
            loop {
                if let Some(tx) = bundler.pop_ready(buf) {
                    return Some(tx);
                }
                if visited >= n {
                    if closed {
                        return None;
                    }
                    bundler.close_all();
                    closed = true;
                    continue;
                }
                let idx = (first + visited) % n;
                let next = |visited: &mut usize, taken: &mut usize| {
                    *visited += 1;
                    *taken = 0;
                };
                let Some(s) = sessions[idx].as_mut().filter(|s| s.nic() == k) else {
                    next(&mut visited, &mut taken);
                    continue;
                };
                if taken >= PER_CLIENT_BURST {
                    next(&mut visited, &mut taken);
                    continue;
                }
                let Some((job, addr)) = s.identity() else {
                    next(&mut visited, &mut taken);
                    continue;
                };
                let Some((m, stats)) = s.next_message() else {
                    next(&mut visited, &mut taken);
                    continue;
                };
                taken += 1;
                moved += 1;
                let out = match check_outgoing(m.bytes(), job, addr, *mtu) {
                    Ok(out) => out,
                    Err(r) => {
                        *stats.entry(r.name()).or_default() += 1;
                        *counters.entry(r.name()).or_default() += 1;
                        m.release();
                        continue;
                    }
                };
                if out.link == LOCAL_LINK {
                    // Kept for delivery after the burst: the target's ring
                    // belongs to another session.
                    local.extend_from_slice(&job.0.to_le_bytes());
                    local.extend_from_slice(&out.dst.port.0.to_le_bytes());
                    local.push(k as u8);
                    local.extend_from_slice(&(out.frame.len() as u16).to_le_bytes());
                    local.extend_from_slice(out.frame);
                    *stats.entry("tx_local").or_default() += 1;
                    m.release();
                    continue;
                }
                if out.link >= *links {
                    let name = super::trusted::Refusal::UnknownLink.name();
                    *stats.entry(name).or_default() += 1;
                    *counters.entry(name).or_default() += 1;
                    m.release();
                    continue;
                }
                *stats.entry("tx_frames").or_default() += 1;
                let to_daemon = bundle && daemon_links.contains(&out.link);
                if bundler.offer(out.link, out.frame, to_daemon) == Offer::Taken {
                    m.release();
                    continue;
                }
                let len = out.frame.len().min(buf.len());
                buf[..len].copy_from_slice(&out.frame[..len]);
                let link = LinkId(out.link);
                m.release();
                return Some(TxFrame { link, len });
            }
        };
        let mut tx_errors = 0;
        loop {
            match method.tx_burst(&mut source) {
                Ok(0) => break,
                Ok(_) => {}
                Err(_) => {
                    tx_errors += 1;
                    break;
                }
            }
        }
        if tx_errors > 0 {
            *counters.entry("nic_tx_errors").or_default() += tx_errors;
        }
        moved > 0 || bundler.has_ready()
    }

    /// Delivers the frames between local clients collected by
    /// [`forward_out`](Self::forward_out): to the receiver's connection
    /// through the sender's NIC, else through any of its NICs.
    fn deliver_local(&mut self) {
        let local = std::mem::take(&mut self.local);
        let mut rest = &local[..];
        while let Some((head, tail)) = rest.split_first_chunk::<9>() {
            let job = JobKey(u32::from_le_bytes([head[0], head[1], head[2], head[3]]));
            let port = u16::from_le_bytes([head[4], head[5]]);
            let nic = usize::from(head[6]);
            let len = usize::from(u16::from_le_bytes([head[7], head[8]]));
            let (frame, after) = tail.split_at(len.min(tail.len()));
            rest = after;
            let through = std::iter::once(nic).chain((0..self.nics.len()).filter(|&j| j != nic));
            let mut result = Err(Undeliverable::NoClient);
            for j in through {
                result = deliver_to(
                    &mut self.sessions,
                    &self.by_port,
                    (job, port, j),
                    LOCAL_LINK,
                    frame,
                );
                if !matches!(result, Err(Undeliverable::NoClient)) {
                    break;
                }
            }
            if let Err(u) = result {
                self.count(u.name());
            }
        }
        self.local = local;
    }

    /// Moves received frames into the clients' rings; returns whether any
    /// arrived.
    fn forward_in(&mut self) -> bool {
        let mut any = false;
        for k in 0..self.nics.len() {
            any |= self.forward_in_on(k);
        }
        any
    }

    /// [`forward_in`](Self::forward_in) for NIC `k`: its frames go to the
    /// clients connected through it.
    fn forward_in_on(&mut self, k: usize) -> bool {
        let Daemon {
            nics,
            sessions,
            by_port,
            counters,
            cfg,
            ..
        } = self;
        let Nic {
            method,
            links,
            daemon_links,
            probing,
            answers_due,
            ..
        } = &mut nics[k];
        let node = cfg.node;
        let mut deliver = |link: u32, frame: &[u8], counters: &mut Counters| {
            let r = destination(frame, node)
                .and_then(|(job, port)| deliver_to(sessions, by_port, (job, port, k), link, frame));
            match r {
                Ok(()) => *counters.entry("rx_delivered").or_default() += 1,
                Err(u) => *counters.entry(u.name()).or_default() += 1,
            }
        };
        let result = method.rx_burst(RX_BURST, &mut |link, frame| {
            *links = (*links).max(link.0.saturating_add(1));
            if !container::is_container(frame) {
                deliver(link.0, frame, counters);
                return;
            }
            // Another daemon's container: each frame inside is checked and
            // delivered as if it had come alone.
            let Some(c) = container::parse(frame) else {
                *counters.entry("rx_malformed").or_default() += 1;
                return;
            };
            *counters.entry("rx_containers").or_default() += 1;
            if daemon_links.insert(link.0) {
                probing.remove(&link.0);
            }
            if c.ping && !answers_due.contains(&link.0) {
                answers_due.push(link.0);
            }
            for inner in c.frames() {
                deliver(link.0, inner, counters);
            }
        });
        match result {
            Ok(n) => n > 0,
            Err(_) => {
                self.count("nic_rx_errors");
                false
            }
        }
    }

    /// Sleeps until a client, a NIC or the listening socket has work.
    fn sleep(&mut self) {
        let mut ready = true;
        for n in &mut self.nics {
            ready &= n.method.prepare_wait();
        }
        for s in self.sessions.iter_mut().flatten() {
            ready &= s.prepare_wait();
        }
        if ready {
            let n = self
                .waits
                .wait(i32::from(IDLE_SLEEP_MS), &mut self.woke)
                .unwrap_or(0);
            // A timeout (nothing woke us) is the time to look at everything.
            self.sockets_due |= n == 0 || self.woke.iter().any(|&t| is_socket_token(t));
            self.count("sleeps");
        }
        for n in &mut self.nics {
            n.method.finish_wait();
        }
        for s in self.sessions.iter_mut().flatten() {
            s.finish_wait();
            // A client dropped for a broken ring goes at the next look at
            // the sockets.
            self.sockets_due |= s.ring_gone();
        }
    }
}

/// Puts `frame` from `link` into the ring of the client `(job, port, NIC)`.
fn deliver_to(
    sessions: &mut [Option<Session>],
    by_port: &HashMap<(u32, u16, usize), usize>,
    (job, port, nic): (JobKey, u16, usize),
    link: u32,
    frame: &[u8],
) -> Result<(), Undeliverable> {
    let s = by_port
        .get(&(job.0, port, nic))
        .and_then(|&i| sessions.get_mut(i)?.as_mut())
        .ok_or(Undeliverable::NoClient)?;
    s.deliver(link, frame)
}

/// Binds the socket at `path`: the directory is created, a stale socket
/// of a dead daemon is removed, a live daemon's is left alone.
fn listen(path: &std::path::Path) -> Result<UnixListener, StartError> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(io_err(format!("creating {}", dir.display())))?;
    }
    if path.exists() {
        if UnixStream::connect(path).is_ok() {
            return Err(StartError::Running(path.to_path_buf()));
        }
        std::fs::remove_file(path).map_err(io_err(format!(
            "removing the stale socket {}",
            path.display()
        )))?;
    }
    let listener =
        UnixListener::bind(path).map_err(io_err(format!("binding {}", path.display())))?;
    // Anyone may connect: the daemon decides by the caller's credentials.
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666))
        .map_err(io_err(format!("opening {} to all users", path.display())))?;
    listener
        .set_nonblocking(true)
        .map_err(io_err("making the socket non-blocking"))?;
    Ok(listener)
}
