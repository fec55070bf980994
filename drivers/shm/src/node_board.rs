//! The node's liveness board: what the processes of one job on one node
//! share so that liveness costs one heartbeat per node pair, not one per
//! process pair.
//!
//! One file per job and node, `DIR/bcl-live-JOB-NODE` (mode 0600; the node
//! number is in the name because lab "nodes" share one `/dev/shm`):
//!
//! ```text
//! page 0    header (magic, version, ready), then one 16-byte identity per
//!           port 0..127: the pid and start time of the process at that
//!           port (0: none)
//! page 1..  256 remote-node lines of 64 bytes: node number (0: free), when
//!           a process of this node last pinged it, the last view of its
//!           live ports (a seqlock: sequence, time, two bitmap words), and
//!           the port pinged last (+ 1; 0: none)
//! ```
//!
//! - A process registers its identity at its port ([`NodeBoard::register`]);
//!   [`NodeBoard::live_ports`] reads the identities and `/proc`: a port is
//!   live while its process exists with that start time and is neither a
//!   zombie nor stopped (a process stopped by a signal or a debugger
//!   answers nothing, so it is not live until it resumes).
//! - A process that wants a fresh view of a remote node takes that node's
//!   ping turn ([`NodeBoard::take_ping`]): at most one process of this node
//!   wins it per period, and only the winner pings; the port it pings is
//!   remembered, so that one that does not answer is not pinged next
//!   ([`NodeBoard::unanswered`]).
//! - The answer (the remote node's live ports) is written to that node's
//!   line ([`NodeBoard::set_view`]) and read by every process of this node
//!   ([`NodeBoard::view`]).
//!
//! Times are nanoseconds of `CLOCK_MONOTONIC` (the same for every process
//! of the host). Ports from 128 up are not on the board: their processes
//! are watched one by one, as without a board.
//!
//! Like the rest of this crate, the board trusts its users' protocol, not
//! their data: indices come from our side, so a process writing garbage
//! can make views wrong (a peer pinged, or declared dead after the bound
//! like a silent one), never make us read or write outside the mapping.

use crate::segment::{create_or_open, file_len, DirLock, Mapping};
use crate::sync::{AtomicU64, Ordering};
use crate::ShmError;
use bcl_core::JobKey;
use std::io;
use std::path::{Path, PathBuf};

const MAGIC: u64 = 0x4243_4c2d_4c49_5645; // "BCL-LIVE"
const VERSION: u64 = 1;
/// Ports on the board: 0..PORTS.
pub const PORTS: u16 = 128;
/// Remote nodes the board keeps views of.
const REMOTES: usize = 256;
const PAGE: usize = 4096;
const IDENTITY_OFF: usize = 64;
const REMOTE_OFF: usize = PAGE;
const LINE: usize = 64;
const TOTAL: usize = REMOTE_OFF + REMOTES * LINE;

/// The board's file name for node `node` of job `job`.
pub fn node_board_name(job: JobKey, node: u32) -> String {
    format!("bcl-live-{:08x}-{node}", job.0)
}

/// A remote node's live ports as last seen: bit `p` of the 128 is port
/// `p`, and `at_ns` is when the view arrived (ns of `CLOCK_MONOTONIC`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NodeView {
    /// When the view arrived.
    pub at_ns: u64,
    /// Live ports, bit p of word p / 64.
    pub live: [u64; 2],
}

/// One job's liveness board on this node (see the module documentation).
pub struct NodeBoard {
    map: Mapping,
    path: PathBuf,
}

impl NodeBoard {
    /// Opens the board `name` in `dir`, creating it if it is not there.
    pub fn open(dir: &Path, name: &str) -> Result<NodeBoard, ShmError> {
        let path = dir.join(name);
        let io = |context: String| move |source: io::Error| ShmError::Io { context, source };
        let _lock = DirLock::acquire(dir).map_err(io(format!("locking {}", dir.display())))?;
        let (fd, created) = create_or_open(&path, TOTAL)?;
        if !created {
            let len = file_len(&fd).map_err(io(format!("reading {}", path.display())))?;
            if len != TOTAL as u64 {
                return Err(ShmError::BadSegment {
                    path,
                    reason: format!("{len} bytes, expected {TOTAL} for a liveness board"),
                });
            }
        }
        let map = Mapping::map(&fd, TOTAL).map_err(|e| {
            if created {
                let _ = std::fs::remove_file(&path);
            }
            io(format!("mapping {}", path.display()))(e)
        })?;
        let board = NodeBoard { map, path };
        if created {
            board.word(0).store(MAGIC, Ordering::Relaxed);
            board.word(8).store(VERSION, Ordering::Relaxed);
            board.word(16).store(1, Ordering::Release);
        } else if board.word(16).load(Ordering::Acquire) != 1
            || board.word(0).load(Ordering::Acquire) != MAGIC
            || board.word(8).load(Ordering::Acquire) != VERSION
        {
            return Err(ShmError::BadSegment {
                path: board.path.clone(),
                reason: "not an initialised liveness board of this version".into(),
            });
        }
        Ok(board)
    }

    /// The word at byte offset `off` (8-aligned, inside the mapping).
    fn word(&self, off: usize) -> &AtomicU64 {
        assert!(off.is_multiple_of(8) && off + 8 <= TOTAL, "word {off}");
        // SAFETY: `off` is 8-aligned and inside the page-aligned mapping of
        // TOTAL bytes (checked above); an AtomicU64 is valid for any bit
        // pattern, and the mapping lives as long as `self`.
        unsafe { &*(self.map.ptr().add(off) as *const AtomicU64) }
    }

    /// The process at `port` is (`pid`, `start`) from now on.
    pub fn register(&self, port: u16, pid: u32, start: u64) {
        if port < PORTS {
            let off = IDENTITY_OFF + usize::from(port) * 16;
            self.word(off + 8).store(start, Ordering::Relaxed);
            self.word(off).store(u64::from(pid), Ordering::Release);
        }
    }

    /// The process `pid` leaves `port` (if it is still the one there).
    pub fn unregister(&self, port: u16, pid: u32) {
        if port < PORTS {
            let off = IDENTITY_OFF + usize::from(port) * 16;
            let _ = self.word(off).compare_exchange(
                u64::from(pid),
                0,
                Ordering::AcqRel,
                Ordering::Relaxed,
            );
        }
    }

    /// The ports whose process is live now (see the module documentation).
    pub fn live_ports(&self) -> [u64; 2] {
        let mut live = [0u64; 2];
        for port in 0..usize::from(PORTS) {
            let off = IDENTITY_OFF + port * 16;
            let pid = self.word(off).load(Ordering::Acquire);
            if pid == 0 || pid > u64::from(u32::MAX) {
                continue;
            }
            let start = self.word(off + 8).load(Ordering::Relaxed);
            let running = match crate::proc::stat(pid as u32) {
                Ok(Some((state, s))) => s == start && !matches!(state, 'Z' | 'X' | 'T' | 't'),
                Ok(None) => false,
                // Cannot judge: live (never declare dead what we cannot see).
                Err(_) => true,
            };
            if running {
                live[port / 64] |= 1 << (port % 64);
            }
        }
        live
    }

    /// Whether any process is registered and exists (the last one to
    /// leave removes the file).
    pub fn anyone_left(&self) -> bool {
        (0..usize::from(PORTS)).any(|port| {
            let off = IDENTITY_OFF + port * 16;
            let pid = self.word(off).load(Ordering::Acquire);
            pid != 0
                && pid <= u64::from(u32::MAX)
                && crate::proc::is_alive(pid as u32, self.word(off + 8).load(Ordering::Relaxed))
        })
    }

    /// The line of remote node `node`, claimed if it has none yet; `None`
    /// when every line belongs to another node.
    fn line(&self, node: u32) -> Option<usize> {
        if node == 0 {
            return None;
        }
        let start = (node as usize).wrapping_mul(0x9e37_79b9) % REMOTES;
        for i in 0..REMOTES {
            let off = REMOTE_OFF + ((start + i) % REMOTES) * LINE;
            let w = self.word(off);
            match w.load(Ordering::Acquire) {
                n if n == u64::from(node) => return Some(off),
                0 => match w.compare_exchange(
                    0,
                    u64::from(node),
                    Ordering::AcqRel,
                    Ordering::Acquire,
                ) {
                    Ok(_) => return Some(off),
                    Err(n) if n == u64::from(node) => return Some(off),
                    Err(_) => {}
                },
                _ => {}
            }
        }
        None
    }

    /// Takes node `node`'s ping turn at `now_ns`: true if no process of
    /// this node took it within the last `period_ns` (the caller pings),
    /// false if one did (or the board has no line for the node: then the
    /// caller pings as if there were no board, and true is returned).
    /// The winner's `port` (the one it pings) is remembered.
    pub fn take_ping(&self, node: u32, now_ns: u64, period_ns: u64, port: u16) -> bool {
        let Some(off) = self.line(node) else {
            return true;
        };
        let w = self.word(off + 8);
        let last = w.load(Ordering::Acquire);
        if last != 0 && now_ns.saturating_sub(last) < period_ns {
            return false;
        }
        let won = w
            .compare_exchange(last, now_ns.max(1), Ordering::AcqRel, Ordering::Relaxed)
            .is_ok();
        if won {
            self.word(off + 48)
                .store(u64::from(port) + 1, Ordering::Release);
        }
        won
    }

    /// The port of `node` pinged last, if no view of `node` arrived since.
    pub fn unanswered(&self, node: u32) -> Option<u16> {
        let off = self.line(node)?;
        let port = self.word(off + 48).load(Ordering::Acquire);
        let pinged = self.word(off + 8).load(Ordering::Acquire);
        let answered = self.view(node).is_some_and(|v| v.at_ns >= pinged);
        (port != 0 && !answered).then(|| (port - 1) as u16)
    }

    /// Stores a view of node `node` (its live ports) that arrived at
    /// `now_ns`.
    pub fn set_view(&self, node: u32, live: [u64; 2], now_ns: u64) {
        let Some(off) = self.line(node) else {
            return;
        };
        let seq = self.word(off + 16);
        let s = seq.load(Ordering::Relaxed);
        if s % 2 == 1
            || seq
                .compare_exchange(s, s + 1, Ordering::AcqRel, Ordering::Relaxed)
                .is_err()
        {
            // Another process is storing a view of it right now: one is
            // enough.
            return;
        }
        self.word(off + 24).store(now_ns, Ordering::Relaxed);
        self.word(off + 32).store(live[0], Ordering::Relaxed);
        self.word(off + 40).store(live[1], Ordering::Relaxed);
        seq.store(s + 2, Ordering::Release);
    }

    /// The last view of node `node`, if any.
    pub fn view(&self, node: u32) -> Option<NodeView> {
        let off = self.line(node)?;
        let seq = self.word(off + 16);
        for _ in 0..4 {
            let s = seq.load(Ordering::Acquire);
            if s % 2 == 1 {
                std::hint::spin_loop();
                continue;
            }
            let at_ns = self.word(off + 24).load(Ordering::Acquire);
            let live = [
                self.word(off + 32).load(Ordering::Acquire),
                self.word(off + 40).load(Ordering::Acquire),
            ];
            if seq.load(Ordering::Acquire) == s {
                return (s != 0).then_some(NodeView { at_ns, live });
            }
        }
        None
    }

    /// Removes the file (the mapping stays valid).
    pub fn unlink(&self) {
        let _ = std::fs::remove_file(&self.path);
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(test: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("bcl-live-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn ports_of_live_processes_are_live_and_others_not() {
        let d = dir("ports");
        let name = node_board_name(JobKey(7), 2);
        let a = NodeBoard::open(&d, &name).unwrap();
        let b = NodeBoard::open(&d, &name).unwrap();
        let me = std::process::id();
        let start = crate::proc::self_start_time().unwrap();
        a.register(3, me, start);
        // A dead process (its start time is not ours) and one out of range.
        b.register(70, me, start + 1);
        b.register(200, me, start);
        assert_eq!(b.live_ports(), [1 << 3, 0]);
        assert!(a.anyone_left());
        b.unregister(3, me + 1);
        assert_eq!(a.live_ports(), [1 << 3, 0], "only its own process leaves");
        a.unregister(3, me);
        assert_eq!(a.live_ports(), [0, 0]);
        assert!(!a.anyone_left());
        a.unlink();
        assert!(!d.join(&name).exists());
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn one_ping_per_period_and_views_shared() {
        let d = dir("views");
        let name = node_board_name(JobKey(7), 1);
        let a = NodeBoard::open(&d, &name).unwrap();
        let b = NodeBoard::open(&d, &name).unwrap();
        assert!(a.view(5).is_none());
        assert!(a.take_ping(5, 1000, 100, 4));
        assert_eq!(b.unanswered(5), Some(4));
        assert!(
            !b.take_ping(5, 1050, 100, 9),
            "the turn is taken for the period"
        );
        assert!(
            b.take_ping(6, 1050, 100, 0),
            "another node has its own turn"
        );
        assert!(b.take_ping(5, 1100, 100, 2));
        b.set_view(5, [0b101, 1 << 63], 1101);
        assert_eq!(a.unanswered(5), None, "answered");
        assert_eq!(
            a.view(5),
            Some(NodeView {
                at_ns: 1101,
                live: [0b101, 1 << 63]
            })
        );
        assert!(a.view(6).is_none(), "a node pinged but never answered");
        // Node 0 is no node; nodes beyond the lines still ping.
        assert!(a.take_ping(0, 1200, 100, 0));
        let _ = std::fs::remove_dir_all(&d);
    }
}
