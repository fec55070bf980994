//! The engine's rings: how an application reaches `bcld`, the per-node
//! daemon that owns the node's NICs (BCL-3's semi-user-level mode).
//!
//! An application (a *client*) does not open the NIC. It connects to the
//! daemon's Unix socket and says which job it belongs to ([`Request::Hello`]);
//! the daemon learns the caller's uid and pid from the kernel
//! (`SO_PEERCRED`), checks the job's secret, and gives the client a pair
//! of private shared-memory rings, each an inbox of this crate
//! ([`Mailbox`](crate::Mailbox)) with one sender:
//!
//! * the **daemon's ring** of the client, created by the daemon and handed
//!   to the client's uid: the client writes the frames it sends into it;
//! * the **client's ring**, created by the client: the daemon writes the
//!   frames that arrive for the client into it.
//!
//! Every message in either ring is a 4-byte link number (little-endian)
//! followed by one BCL frame ([`LINK_PREFIX`]). Links are the daemon's NIC
//! method's links (one per peer station), plus [`LOCAL_LINK`] for the
//! daemon's other local clients. A client asks for a link to a peer's
//! descriptor over the socket ([`Request::OpenLink`]).
//!
//! A daemon may own several NICs. A client connection (and its pair of
//! rings) goes through one of them, the one its hello names
//! ([`Request::Hello::nic`]; the daemon's first by default). A process
//! that wants several NICs as rails opens one connection per NIC, each a
//! method of its endpoint, and the core stripes over them as over direct
//! rails; every connection of one process address must come from the same
//! process.
//!
//! The trusted path is the daemon's: it sends a client's frame only if its
//! header names the client's own process address and job key, and
//! delivers a received frame only to the client whose job and port the
//! header names. A client therefore cannot send as another process or into
//! another job, and never sees another job's frames.
//!
//! [`EngineMethod`] is the client's side, a BCL method like any other
//! (`bcld`, in the registry as [`EngineKind`]); the daemon is the `bcld`
//! tool.

mod client;
mod kind;

pub use client::{query_status, EngineMethod, EngineStats};
pub use kind::EngineKind;

use crate::layout::Geometry;
use bcl_core::ProcessAddr;
use serde::{Deserialize, Serialize};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::PathBuf;

/// The method's name, in descriptors, pins and `--method`.
pub const METHOD_NAME: &str = "bcld";

/// Where the daemon listens unless told otherwise.
pub const DEFAULT_SOCKET: &str = "/run/bcl/bcld.sock";

/// The environment variable naming the daemon's socket for applications.
pub const SOCKET_ENV: &str = "BCL_BCLD_SOCKET";

/// The version of the socket protocol; a daemon refuses other versions.
pub const PROTOCOL_VERSION: u32 = 1;

/// Bytes before the frame in every ring message: the link, little-endian.
pub const LINK_PREFIX: usize = 4;

/// The link on which frames between two clients of one daemon travel (no
/// NIC involved).
pub const LOCAL_LINK: u32 = u32::MAX - 1;

/// Largest BCL frame the rings carry (a jumbo Ethernet payload).
pub const MAX_FRAME: usize = 9216;

/// The most NICs one daemon owns.
pub const MAX_NICS: usize = 16;

/// Where the NIC index sits in a ring's shared-memory node id.
const RING_NIC_SHIFT: u32 = 26;

/// Node ids with any of these bits are reserved for the rings'
/// shared-memory addresses (which ring, and through which of the daemon's
/// NICs), so that they never meet a process's own mailbox: clients must
/// use node ids below 2^26.
pub const RING_NODE_BITS: u32 = 0b11_1111 << RING_NIC_SHIFT;

/// The shared-memory address of the ring the client reads (the client's
/// own ring) for the client at `client`, connected through the daemon's
/// NIC number `nic` (below [`MAX_NICS`]).
pub fn client_ring_addr(client: ProcessAddr, nic: usize) -> ProcessAddr {
    ProcessAddr::new(client.node.0 | 1 << 30 | ring_nic(nic), client.port.0)
}

/// The shared-memory address of the ring the daemon reads for the client
/// at `client`, connected through the daemon's NIC number `nic`.
pub fn daemon_ring_addr(client: ProcessAddr, nic: usize) -> ProcessAddr {
    ProcessAddr::new(client.node.0 | 1 << 31 | ring_nic(nic), client.port.0)
}

/// NIC number `nic` in a ring's node id.
fn ring_nic(nic: usize) -> u32 {
    ((nic % MAX_NICS) as u32) << RING_NIC_SHIFT
}

/// The geometry of both rings of a client whose frames are at most `mtu`
/// bytes: one sender, slots that hold a whole frame and its link, and the
/// smallest exchange queue (frames never use it).
pub fn ring_geometry(mtu: usize) -> Geometry {
    let slot = crate::inbox::SLOT_HDR + LINK_PREFIX + mtu.min(MAX_FRAME);
    Geometry {
        inbox_slots: 512,
        block_size: slot.next_multiple_of(64) as u32,
        dir_entries: 1,
        chunk_size: 64,
        chunks: 2,
    }
}

/// The daemon's socket: `$BCL_BCLD_SOCKET`, else [`DEFAULT_SOCKET`]. A
/// `%n` in the variable becomes the node's name (`$BCL_NODE`, which
/// `bcl-run` gives every rank), so that one setting serves a job whose
/// nodes share a file system but not a daemon (lab namespaces, containers).
pub fn socket_path() -> PathBuf {
    match std::env::var(SOCKET_ENV) {
        Ok(p) => PathBuf::from(expand_node(&p, std::env::var("BCL_NODE").ok().as_deref())),
        Err(_) => PathBuf::from(DEFAULT_SOCKET),
    }
}

/// `path` with `%n` replaced by `node` (left as it is without one).
fn expand_node(path: &str, node: Option<&str>) -> String {
    match node {
        Some(n) => path.replace("%n", n),
        None => path.to_string(),
    }
}

/// What a client (or `bcl-info`) asks the daemon, one JSON object per line.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Request {
    /// The first request of a client: who it is.
    Hello {
        /// [`PROTOCOL_VERSION`].
        version: u32,
        /// The job key.
        job: u32,
        /// The job's secret (`BCL_JOB_SECRET`, empty when the job has
        /// none): every client of one job must present the same one.
        secret: String,
        /// The client's process address, `NODE.PORT`; the node must be
        /// the daemon's.
        local: String,
        /// The daemon's NIC to go through, by the name the daemon opened
        /// it with (interface or PCI address); none: its first NIC.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        nic: Option<String>,
    },
    /// The client has created its ring (at [`client_ring_addr`]); the
    /// daemon maps it and creates its own.
    Attach,
    /// A link to the peer with this descriptor (`METHOD:ADDRESS`, of the
    /// daemon's method family).
    OpenLink {
        /// The peer's descriptor.
        descriptor: String,
        /// The peer is a client of a daemon too (its descriptor is a
        /// `bcld` one): the daemon may probe whether small frames can be
        /// bundled for it. A hint only; bundling starts when the other
        /// daemon answers.
        #[serde(default)]
        to_daemon: bool,
    },
    /// The daemon's NICs and clients, for people (needs no hello).
    Status,
}

/// The daemon's answers, one per request.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reply {
    /// The hello was accepted.
    Welcome {
        /// The daemon's node.
        node: u32,
        /// Largest BCL frame the client may send.
        mtu: usize,
        /// The method of the client's NIC (`packet`, `afxdp`, ...).
        method: String,
        /// The daemon's descriptor on the client's NIC: the address peers
        /// reach this client at (the method's name aside).
        address: String,
        /// The daemon's pid, for messages.
        pid: u32,
        /// The number of the client's NIC among the daemon's (its rings'
        /// addresses carry it).
        #[serde(default)]
        nic: usize,
        /// All the daemon's NICs' descriptors (`METHOD:ADDRESS`), in
        /// number order.
        #[serde(default)]
        nics: Vec<String>,
    },
    /// The rings are connected: the client connects to the daemon's ring
    /// and may send.
    Attached,
    /// The link for an [`Request::OpenLink`].
    Link {
        /// The link number to put before frames for that peer.
        link: u32,
    },
    /// The answer to [`Request::Status`].
    Status(Status),
    /// The request was refused; nothing changed.
    Refused {
        /// Why, for a person.
        reason: String,
    },
}

/// What the daemon reports about itself.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Status {
    /// The daemon's node.
    pub node: u32,
    /// Its pid.
    pub pid: u32,
    /// Each NIC's descriptor (`METHOD:ADDRESS`), in number order.
    pub nics: Vec<String>,
    /// Each NIC's name (interface or PCI address; empty for a NIC opened
    /// unnamed), in number order: what a client's hello may name.
    #[serde(default)]
    pub nic_names: Vec<String>,
    /// The clients connected now.
    pub clients: Vec<ClientStatus>,
    /// Counters of the daemon as a whole, by name.
    pub counters: Vec<(String, u64)>,
}

/// One client, as [`Status`] shows it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientStatus {
    /// Its process address.
    pub addr: String,
    /// Its job key.
    pub job: u32,
    /// Its uid and pid, as the kernel told the daemon.
    pub uid: u32,
    /// Its pid.
    pub pid: u32,
    /// Its counters, by name.
    pub counters: Vec<(String, u64)>,
}

/// The set of file descriptors the daemon sleeps on (its socket, its NIC,
/// its clients' sockets and rings), each with a token: an epoll instance,
/// so that a sleep costs the same with any number of clients (a `poll`
/// over every fd registers and unregisters each one on every call). A fd
/// leaves the set when it is closed.
#[derive(Debug)]
pub struct WaitSet {
    epoll: OwnedFd,
}

impl WaitSet {
    /// An empty set.
    pub fn new() -> std::io::Result<WaitSet> {
        // SAFETY: plain epoll_create1; the result is checked.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: a fresh fd that nothing else owns.
        let epoll = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(WaitSet { epoll })
    }

    /// Wakes a [`wait`](Self::wait) with `token` while `fd` is readable
    /// (or has hung up).
    pub fn add(&self, fd: RawFd, token: u64) -> std::io::Result<()> {
        let mut ev = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: token,
        };
        // SAFETY: a valid epoll fd and event struct; the kernel checks `fd`
        // (EBADF for one that is not open) and only reads `ev`.
        let r =
            unsafe { libc::epoll_ctl(self.epoll.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut ev) };
        if r < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }

    /// Sleeps until a fd of the set is readable or `timeout_ms` passes
    /// (negative: no limit), and puts the tokens of the readable ones in
    /// `ready`; an interrupted sleep (a signal) returns none.
    pub fn wait(&self, timeout_ms: i32, ready: &mut Vec<u64>) -> std::io::Result<usize> {
        const MAX_EVENTS: usize = 64;
        let mut events = [libc::epoll_event { events: 0, u64: 0 }; MAX_EVENTS];
        // SAFETY: `events` has room for MAX_EVENTS entries and lives across
        // the call; the kernel writes at most that many.
        let n = unsafe {
            libc::epoll_wait(
                self.epoll.as_raw_fd(),
                events.as_mut_ptr(),
                MAX_EVENTS as i32,
                timeout_ms,
            )
        };
        ready.clear();
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                return Ok(0);
            }
            return Err(e);
        }
        ready.extend(events[..n as usize].iter().map(|e| e.u64));
        Ok(n as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_pattern_in_the_socket_path_takes_the_nodes_name() {
        assert_eq!(
            expand_node("/tmp/bcld-%n.sock", Some("a1")),
            "/tmp/bcld-a1.sock"
        );
        assert_eq!(
            expand_node("/run/bcl/bcld.sock", Some("a1")),
            "/run/bcl/bcld.sock"
        );
        assert_eq!(expand_node("/tmp/bcld-%n.sock", None), "/tmp/bcld-%n.sock");
    }

    #[test]
    fn ring_slots_hold_a_link_and_a_whole_frame() {
        for mtu in [1500, 4096, 9000, MAX_FRAME, 65535] {
            let g = ring_geometry(mtu);
            assert!(g.validate().is_ok(), "{g:?}");
            assert!(g.max_inline() >= LINK_PREFIX + mtu.min(MAX_FRAME));
            assert_eq!(g.dir_entries, 1);
        }
        let a = ProcessAddr::new(3, 9);
        let mut seen = std::collections::HashSet::new();
        for nic in 0..MAX_NICS {
            for ring in [client_ring_addr(a, nic), daemon_ring_addr(a, nic)] {
                assert!(seen.insert(ring), "{ring} twice");
                assert_eq!(ring.node.0 & !RING_NODE_BITS, 3);
                assert_eq!(ring.port, a.port);
            }
        }
        // The largest client node id keeps its rings apart too.
        let top = ProcessAddr::new(!RING_NODE_BITS, 1);
        assert_ne!(client_ring_addr(top, 0), client_ring_addr(top, 1));
        assert_eq!(
            client_ring_addr(top, 5).node.0 & !RING_NODE_BITS,
            !RING_NODE_BITS
        );
    }
}
