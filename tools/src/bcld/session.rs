//! One client of the daemon: its socket, who the kernel says it is, which
//! job and process it is, and its pair of rings.

use super::daemon::Counters;
use super::trusted::Undeliverable;
use bcl::core::{JobKey, ProcessAddr};
use bcl::shm::engine::{client_ring_addr, daemon_ring_addr, ring_geometry, Reply};
use bcl::shm::{Mailbox, MailboxConfig, PeerId, SendError, ShmEvent};
use nix::sys::socket::{getsockopt, sockopt::PeerCredentials};
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

/// Longest request line; a client that sends a longer one is dropped.
const MAX_REQUEST: usize = 64 << 10;

/// Who is at the other end of a socket, as the kernel says
/// (`SO_PEERCRED`: taken when the client connected, not forgeable).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cred {
    /// User id.
    pub uid: u32,
    /// Group id.
    pub gid: u32,
    /// Process id.
    pub pid: u32,
}

impl Cred {
    /// The credentials of the peer of `stream`.
    pub fn of(stream: &UnixStream) -> io::Result<Cred> {
        let c = getsockopt(stream, PeerCredentials).map_err(io::Error::from)?;
        Ok(Cred {
            uid: c.uid(),
            gid: c.gid(),
            pid: u32::try_from(c.pid()).unwrap_or(0),
        })
    }
}

/// A job the daemon serves: the user it belongs to and its secret, fixed
/// by its first client; every later client must match both.
#[derive(Debug)]
pub struct Job {
    /// The user whose processes make up the job.
    pub uid: u32,
    secret: String,
    /// Clients of the job connected now.
    pub members: usize,
}

impl Job {
    /// A job started by a client of `uid` that presented `secret`.
    pub fn new(uid: u32, secret: &str) -> Job {
        Job {
            uid,
            secret: secret.to_string(),
            members: 1,
        }
    }

    /// Whether `secret` is the job's, compared in time independent of
    /// where they differ.
    pub fn secret_matches(&self, secret: &str) -> bool {
        let (a, b) = (self.secret.as_bytes(), secret.as_bytes());
        a.len() == b.len() && a.iter().zip(b).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0
    }
}

/// One connected client.
pub struct Session {
    ctl: UnixStream,
    inbuf: Vec<u8>,
    cred: Cred,
    identity: Option<(JobKey, ProcessAddr)>,
    /// The number of the daemon's NIC the client goes through.
    nic: usize,
    /// The ring the client writes (ours), which also sends into the
    /// client's ring through `client`.
    ring: Option<Mailbox>,
    client: Option<PeerId>,
    counters: Counters,
    gone: bool,
    /// Since when the ring has refused every sleep (it claimed to have
    /// work) without giving a message.
    stalled_since: Option<Instant>,
    /// Why the client's ring was found broken, if it was.
    broken: Option<String>,
}

/// How long a ring may refuse every sleep without giving a message before
/// the daemon takes it for broken: a client that wrote over its control
/// words would otherwise keep the daemon from ever sleeping. Much longer
/// than a client preempted in the middle of writing a message.
const STALL_LIMIT: Duration = Duration::from_secs(2);

impl Session {
    /// A client that connected on `ctl` with credentials `cred`.
    pub fn new(ctl: UnixStream, cred: Cred) -> Session {
        Session {
            ctl,
            inbuf: Vec::new(),
            cred,
            identity: None,
            nic: 0,
            ring: None,
            client: None,
            counters: Counters::new(),
            gone: false,
            stalled_since: None,
            broken: None,
        }
    }

    /// Who the kernel says the client is.
    pub fn cred(&self) -> Cred {
        self.cred
    }

    /// The job and process address the client said hello with.
    pub fn identity(&self) -> Option<(JobKey, ProcessAddr)> {
        self.identity
    }

    /// Records the client's accepted hello: who it is and the NIC (by
    /// number) it goes through.
    pub fn set_identity(&mut self, job: JobKey, addr: ProcessAddr, nic: usize) {
        self.identity = Some((job, addr));
        self.nic = nic;
    }

    /// The number of the daemon's NIC the client goes through.
    pub fn nic(&self) -> usize {
        self.nic
    }

    /// Counts one `name`.
    pub fn count(&mut self, name: &'static str) {
        *self.counters.entry(name).or_default() += 1;
    }

    /// The client's counters, for status.
    pub fn counters(&self) -> Vec<(String, u64)> {
        self.counters
            .iter()
            .map(|(k, v)| (k.to_string(), *v))
            .collect()
    }

    /// The socket's fd, for sleeping.
    pub fn ctl_fd(&self) -> RawFd {
        self.ctl.as_raw_fd()
    }

    /// The ring's readiness fd, for sleeping.
    pub fn ring_fd(&self) -> Option<RawFd> {
        self.ring.as_ref().map(Mailbox::readiness_fd)
    }

    /// The next message in the ring the client writes (in place, until
    /// released), with the client's counters.
    pub fn next_message(&mut self) -> Option<(bcl::shm::Incoming<'_>, &mut Counters)> {
        let m = self.ring.as_mut()?.recv()?;
        self.stalled_since = None;
        Some((m, &mut self.counters))
    }

    /// Before the daemon sleeps: arms the ring's wake-up; false if the
    /// ring has work (then the daemon does not sleep). A ring that keeps
    /// refusing without giving a message is broken: the client is dropped.
    pub fn prepare_wait(&mut self) -> bool {
        let Some(ring) = self.ring.as_mut() else {
            return true;
        };
        let ready = ring.prepare_wait();
        if ready {
            self.stalled_since = None;
        } else {
            let since = *self.stalled_since.get_or_insert_with(Instant::now);
            if since.elapsed() > STALL_LIMIT && !self.gone {
                self.gone = true;
                self.broken = Some(format!(
                    "its ring claimed work for {STALL_LIMIT:?} without giving a message"
                ));
            }
        }
        ready
    }

    /// After the daemon's sleep (or its decision not to sleep).
    pub fn finish_wait(&mut self) {
        if let Some(ring) = self.ring.as_mut() {
            ring.finish_wait();
        }
    }

    /// Why the client's ring was found broken (written over, or refusing
    /// every sleep), if it was.
    pub fn broken(&self) -> Option<&str> {
        self.broken.as_deref()
    }

    /// Whether the client is to be dropped: its ring reports that it died
    /// or closed, or broke the ring's protocol.
    pub fn ring_gone(&mut self) -> bool {
        if let Some(ring) = self.ring.as_mut() {
            while let Some(ev) = ring.poll_event() {
                match ev {
                    ShmEvent::PeerDied { .. } | ShmEvent::PeerClosed { .. } => self.gone = true,
                    ShmEvent::Corrupt { what, .. } => {
                        self.gone = true;
                        self.broken
                            .get_or_insert(format!("its ring broke the protocol: {what}"));
                    }
                }
            }
        }
        self.gone
    }

    /// Reads what the client sent; returns the complete request lines and
    /// whether the socket is still open (false: the client closed it, or
    /// broke the protocol).
    pub fn read_requests(&mut self) -> (Vec<String>, bool) {
        let mut buf = [0u8; 4096];
        let mut open = true;
        loop {
            match self.ctl.read(&mut buf) {
                Ok(0) => {
                    open = false;
                    break;
                }
                Ok(n) => self.inbuf.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => {
                    open = false;
                    break;
                }
            }
        }
        let mut lines = Vec::new();
        while let Some(end) = self.inbuf.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = self.inbuf.drain(..=end).collect();
            lines.push(String::from_utf8_lossy(&line[..end]).into_owned());
        }
        if self.inbuf.len() > MAX_REQUEST {
            open = false;
        }
        (lines, open)
    }

    /// Sends `reply` as one line.
    pub fn reply(&mut self, reply: &Reply) -> io::Result<()> {
        let mut line = serde_json::to_vec(reply).map_err(io::Error::other)?;
        line.push(b'\n');
        self.ctl.set_nonblocking(false)?;
        self.ctl
            .set_write_timeout(Some(std::time::Duration::from_secs(1)))?;
        let r = self.ctl.write_all(&line);
        self.ctl.set_nonblocking(true)?;
        r
    }

    /// Creates the ring the client writes, hands it to the client's user,
    /// and maps the client's own ring, which must belong to the process
    /// that connected.
    pub fn attach(&mut self, shm_dir: &Path, mtu: usize) -> Reply {
        let refuse = |reason: String| Reply::Refused { reason };
        let Some((job, addr)) = self.identity else {
            return refuse("say hello first".into());
        };
        if self.ring.is_some() {
            return refuse("attached already".into());
        }
        let mut cfg = MailboxConfig::new(job, daemon_ring_addr(addr, self.nic));
        cfg.dir = shm_dir.to_path_buf();
        cfg.geometry = ring_geometry(mtu);
        cfg.cleanup_on_open = false;
        let mut ring = match Mailbox::open(cfg) {
            Ok(r) => r,
            Err(e) => return refuse(format!("creating your ring: {e}")),
        };
        for path in [ring.segment_path().to_path_buf(), ring.doorbell_path()] {
            if let Err(e) =
                std::os::unix::fs::chown(&path, Some(self.cred.uid), Some(self.cred.gid))
            {
                return refuse(format!(
                    "handing {} to uid {}: {e}",
                    path.display(),
                    self.cred.uid
                ));
            }
        }
        let client = match ring.connect(client_ring_addr(addr, self.nic)) {
            Ok(p) => p,
            Err(e) => return refuse(format!("mapping your ring: {e}")),
        };
        if ring.peer_pid(client) != Some(self.cred.pid) {
            return refuse(format!(
                "the ring at {} belongs to pid {:?}, not to you (pid {})",
                client_ring_addr(addr, self.nic),
                ring.peer_pid(client),
                self.cred.pid
            ));
        }
        self.ring = Some(ring);
        self.client = Some(client);
        Reply::Attached
    }

    /// Puts a frame from `link` into the client's ring.
    pub fn deliver(&mut self, link: u32, frame: &[u8]) -> Result<(), Undeliverable> {
        let (Some(ring), Some(client)) = (self.ring.as_mut(), self.client) else {
            return Err(Undeliverable::NoClient);
        };
        // Checked first, so that a full ring is not a send that waits for
        // room: the frame is dropped (the sender's protocol resends it), and
        // the daemon has nothing to be woken for.
        if !ring.room_now(client) {
            *self.counters.entry("rx_ring_full").or_default() += 1;
            return Err(Undeliverable::RingFull);
        }
        match ring.try_send_prefixed(client, &link.to_le_bytes(), frame) {
            Ok(()) => {
                *self.counters.entry("rx_frames").or_default() += 1;
                Ok(())
            }
            Err(SendError::Full) => {
                *self.counters.entry("rx_ring_full").or_default() += 1;
                Err(Undeliverable::RingFull)
            }
            Err(_) => {
                self.gone = true;
                Err(Undeliverable::NoClient)
            }
        }
    }
}
