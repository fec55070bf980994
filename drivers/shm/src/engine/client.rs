//! The client's side of the engine: [`EngineMethod`], a BCL method whose
//! frames go through `bcld`'s rings instead of a NIC.

use super::{
    client_ring_addr, daemon_ring_addr, ring_geometry, Reply, Request, METHOD_NAME,
    PROTOCOL_VERSION,
};
use crate::{Mailbox, MailboxConfig, PeerId, SendError, ShmEvent};
use bcl_core::method::{
    Descriptor, LinkId, Method, MethodCaps, MethodCounters, MethodError, OpenSpec, TxFrame,
};
use bcl_core::ProcessAddr;
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::os::fd::RawFd;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How long a request to the daemon may take before the client gives up.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// Frames moved per [`Method::tx_burst`] call at most.
const TX_BURST: usize = 64;

/// What an [`EngineMethod`] counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EngineStats {
    /// Frames written into the daemon's ring.
    pub tx_frames: u64,
    /// Frames shown to the core.
    pub rx_frames: u64,
    /// Ring messages too short to hold a link and a frame (a daemon bug).
    pub rx_malformed: u64,
    /// Times a burst stopped because the daemon's ring was full.
    pub ring_full: u64,
}

/// A BCL method through the per-node daemon `bcld` (see the module
/// documentation of [`crate::engine`]).
pub struct EngineMethod {
    ctl: BufReader<UnixStream>,
    socket: PathBuf,
    ring: Mailbox,
    daemon: PeerId,
    daemon_pid: u32,
    node: u32,
    mtu: usize,
    nic_method: String,
    address: String,
    /// The daemon's NIC this connection goes through, by number.
    nic: usize,
    links: HashMap<String, LinkId>,
    scratch: Vec<u8>,
    stats: EngineStats,
    /// Why the daemon cannot be used any more, once it went away.
    gone: Option<String>,
}

impl std::fmt::Debug for EngineMethod {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EngineMethod")
            .field("socket", &self.socket)
            .field("node", &self.node)
            .field("nic_method", &self.nic_method)
            .field("address", &self.address)
            .finish_non_exhaustive()
    }
}

fn other(reason: impl Into<String>) -> MethodError {
    MethodError::Other {
        method: METHOD_NAME,
        reason: reason.into(),
    }
}

fn io(context: impl Into<String>, source: std::io::Error) -> MethodError {
    MethodError::Io {
        method: METHOD_NAME,
        context: context.into(),
        source,
    }
}

/// Sends `req` on `ctl` and reads the daemon's one-line answer.
fn ask(ctl: &mut BufReader<UnixStream>, req: &Request) -> Result<Reply, MethodError> {
    let mut line = serde_json::to_string(req).map_err(|e| other(e.to_string()))?;
    line.push('\n');
    ctl.get_mut()
        .write_all(line.as_bytes())
        .map_err(|e| io("writing to bcld", e))?;
    let mut answer = String::new();
    match ctl.read_line(&mut answer) {
        Ok(0) => Err(other("bcld closed the connection")),
        Ok(_) => serde_json::from_str(&answer).map_err(|e| {
            other(format!(
                "bcld answered something unreadable ({e}): {answer:?}"
            ))
        }),
        Err(e) => Err(io("waiting for bcld's answer", e)),
    }
}

/// Asks the daemon at `socket` for its status (for `bcl-info`).
pub fn query_status(socket: &Path) -> Result<super::Status, MethodError> {
    let stream = UnixStream::connect(socket)
        .map_err(|e| io(format!("connecting to bcld at {}", socket.display()), e))?;
    stream
        .set_read_timeout(Some(REQUEST_TIMEOUT))
        .map_err(|e| io("setting a timeout", e))?;
    let mut ctl = BufReader::new(stream);
    match ask(&mut ctl, &Request::Status)? {
        Reply::Status(s) => Ok(s),
        Reply::Refused { reason } => Err(other(reason)),
        r => Err(other(format!("bcld answered {r:?} to a status request"))),
    }
}

impl EngineMethod {
    /// Connects to the daemon at `socket` as the process `spec.local` of
    /// job `spec.job`, presenting `secret`, through the daemon's NIC named
    /// `spec.nic` (its first NIC if none), and sets up the rings.
    pub fn connect(socket: &Path, spec: &OpenSpec, secret: &str) -> Result<Self, MethodError> {
        let stream = UnixStream::connect(socket).map_err(|e| MethodError::NotUsable {
            method: METHOD_NAME,
            reason: format!(
                "no bcld answers at {} ({e}); start it (`bcld --foreground`) or point {} at its socket",
                socket.display(),
                super::SOCKET_ENV
            ),
        })?;
        stream
            .set_read_timeout(Some(REQUEST_TIMEOUT))
            .map_err(|e| io("setting a timeout", e))?;
        let mut ctl = BufReader::new(stream);
        let refused = |reason: String| MethodError::NotUsable {
            method: METHOD_NAME,
            reason: format!("bcld at {} refused: {reason}", socket.display()),
        };
        let hello = Request::Hello {
            version: PROTOCOL_VERSION,
            job: spec.job.0,
            secret: secret.to_string(),
            local: spec.local.to_string(),
            nic: spec.nic.clone(),
        };
        let (node, mtu, nic_method, address, daemon_pid, nic) = match ask(&mut ctl, &hello)? {
            Reply::Welcome {
                node,
                mtu,
                method,
                address,
                pid,
                nic,
                ..
            } => (node, mtu, method, address, pid, nic),
            Reply::Refused { reason } => return Err(refused(reason)),
            r => return Err(other(format!("bcld answered {r:?} to hello"))),
        };
        if nic >= super::MAX_NICS {
            return Err(other(format!("bcld gave NIC number {nic}")));
        }
        if !(bcl_core::wire::HEADER_LEN..=super::MAX_FRAME).contains(&mtu) {
            return Err(other(format!(
                "bcld offers an impossible MTU of {mtu} bytes"
            )));
        }
        let mut cfg = MailboxConfig::new(spec.job, client_ring_addr(spec.local, nic));
        cfg.geometry = ring_geometry(mtu);
        let mut ring = Mailbox::open(cfg).map_err(|e| other(format!("creating our ring: {e}")))?;
        match ask(&mut ctl, &Request::Attach)? {
            Reply::Attached => {}
            Reply::Refused { reason } => return Err(refused(reason)),
            r => return Err(other(format!("bcld answered {r:?} to attach"))),
        }
        let daemon = ring
            .connect(daemon_ring_addr(spec.local, nic))
            .map_err(|e| other(format!("mapping bcld's ring: {e}")))?;
        if ring.peer_pid(daemon) != Some(daemon_pid) {
            return Err(other(format!(
                "the ring at {} is not bcld's (owner {:?}, bcld is pid {daemon_pid})",
                daemon_ring_addr(spec.local, nic),
                ring.peer_pid(daemon)
            )));
        }
        Ok(EngineMethod {
            ctl,
            socket: socket.to_path_buf(),
            ring,
            daemon,
            daemon_pid,
            node,
            mtu,
            nic_method,
            address,
            nic,
            links: HashMap::new(),
            scratch: vec![0; mtu],
            stats: EngineStats::default(),
            gone: None,
        })
    }

    /// This endpoint's process address.
    pub fn local(&self) -> ProcessAddr {
        let a = self.ring.local();
        ProcessAddr::new(a.node.0 & !super::RING_NODE_BITS, a.port.0)
    }

    /// What the method counted.
    pub fn stats(&self) -> EngineStats {
        self.stats
    }

    /// Fails once the daemon went away; looks at the ring's events.
    fn check_daemon(&mut self) -> Result<(), MethodError> {
        while let Some(ev) = self.ring.poll_event() {
            let why = match ev {
                ShmEvent::PeerDied { pid, .. } => format!("bcld (pid {pid}) exited"),
                ShmEvent::PeerClosed { .. } => {
                    format!("bcld (pid {}) closed our ring", self.daemon_pid)
                }
                ShmEvent::Corrupt { what, .. } => {
                    format!("our ring from bcld is corrupt ({what})")
                }
            };
            self.gone.get_or_insert(format!(
                "{why}; frames through it are lost. Restart the daemon and open the endpoint again"
            ));
        }
        match &self.gone {
            Some(why) => Err(other(why.clone())),
            None => Ok(()),
        }
    }
}

impl Method for EngineMethod {
    fn name(&self) -> &'static str {
        METHOD_NAME
    }

    fn caps(&self) -> MethodCaps {
        MethodCaps {
            mtu: self.mtu,
            integrity: false,
            reliable: false,
        }
    }

    fn descriptor(&self) -> Descriptor {
        Descriptor::new(METHOD_NAME, self.address.clone())
    }

    fn open_link(&mut self, peer: &Descriptor) -> Result<LinkId, MethodError> {
        if let Some(&l) = self.links.get(&peer.address) {
            return Ok(l);
        }
        self.check_daemon()?;
        let req = Request::OpenLink {
            descriptor: format!("{}:{}", self.nic_method, peer.address),
            to_daemon: peer.method == METHOD_NAME,
        };
        match ask(&mut self.ctl, &req)? {
            Reply::Link { link } => {
                self.links.insert(peer.address.clone(), LinkId(link));
                Ok(LinkId(link))
            }
            Reply::Refused { reason } => Err(MethodError::BadDescriptor {
                method: METHOD_NAME,
                descriptor: peer.clone(),
                reason,
            }),
            r => Err(other(format!("bcld answered {r:?} to open-link"))),
        }
    }

    fn rx_burst(
        &mut self,
        budget: usize,
        sink: &mut dyn FnMut(LinkId, &[u8]),
    ) -> Result<usize, MethodError> {
        let stats = &mut self.stats;
        let n = self
            .ring
            .recv_burst(budget, |_, msg| match msg.split_first_chunk() {
                Some((link, frame)) if !frame.is_empty() => {
                    stats.rx_frames += 1;
                    sink(LinkId(u32::from_le_bytes(*link)), frame);
                }
                _ => stats.rx_malformed += 1,
            });
        if n == 0 {
            self.check_daemon()?;
        }
        Ok(n)
    }

    fn tx_burst(
        &mut self,
        source: &mut dyn FnMut(&mut [u8]) -> Option<TxFrame>,
    ) -> Result<usize, MethodError> {
        self.check_daemon()?;
        let mut sent = 0;
        while sent < TX_BURST {
            if !self.ring.has_room(self.daemon) {
                self.stats.ring_full += 1;
                break;
            }
            let Some(f) = source(&mut self.scratch) else {
                break;
            };
            let frame = &self.scratch[..f.len.min(self.mtu)];
            match self
                .ring
                .try_send_prefixed(self.daemon, &f.link.0.to_le_bytes(), frame)
            {
                Ok(()) => {
                    sent += 1;
                    self.stats.tx_frames += 1;
                }
                // The only sender found room just before: not reachable,
                // but a frame lost here is recovered by the protocol.
                Err(SendError::Full) => self.stats.ring_full += 1,
                Err(e) => {
                    self.gone
                        .get_or_insert(format!("bcld's ring cannot be written: {e}"));
                    return self.check_daemon().map(|()| sent);
                }
            }
        }
        Ok(sent)
    }

    fn readiness_fd(&self) -> Option<RawFd> {
        Some(self.ring.readiness_fd())
    }

    fn prepare_wait(&mut self) -> bool {
        self.ring.prepare_wait()
    }

    fn finish_wait(&mut self) {
        self.ring.finish_wait();
    }

    fn counters(&self) -> MethodCounters {
        let s = self.stats;
        MethodCounters {
            rx_frames: s.rx_frames,
            tx_frames: s.tx_frames,
            rx_malformed: s.rx_malformed,
            detail: vec![("ring_full", s.ring_full)],
            ..MethodCounters::default()
        }
    }

    fn notes(&self) -> Vec<String> {
        vec![format!(
            "through bcld (pid {}) at {}: node {}, its NIC {}, {}:{}, frames up to {} B",
            self.daemon_pid,
            self.socket.display(),
            self.node,
            self.nic,
            self.nic_method,
            self.address,
            self.mtu
        )]
    }
}
