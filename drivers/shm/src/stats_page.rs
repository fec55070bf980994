//! Statistics pages: one small shared-memory file per endpoint that
//! publishes its counters to readers in other processes (`bcl-stat`).
//!
//! # Files
//!
//! A page is `DIR/bcl-stat-PID-NODE.PORT` (`DIR` is `/dev/shm` by default;
//! a second endpoint with the same address in the same process gets
//! `-N` appended), mode 0600 like the segments: only its user (and root)
//! can read who talks to whom and how much. It is created with `O_EXCL`
//! under the same per-user directory lock as the segments
//! ([`crate::segment`]), and unlinked when its [`PageWriter`] is dropped.
//! A page whose owner (pid and start time, [`crate::proc`]) is dead is
//! stale: [`scan`] removes it (writers scan once per process when they
//! create their first page; `bcl-stat` on every refresh).
//!
//! # Layout
//!
//! The page is an array of 64-bit words, every one accessed atomically
//! (never through a Rust reference: the owner writes while others read).
//! Word offsets:
//!
//! ```text
//! 0    header (64 words), written once before `state = READY`
//!        magic "BCLSTAT1", version, page length, peer capacity, words per
//!        peer, method capacity, state, pid, start time, node, port, job
//!        key, progress mode, method count, creation time, refresh interval,
//!        method names (8 x 16 bytes)
//! 64   seq: the seqlock's version, odd while the owner writes
//! 65   body (the snapshot the seqlock protects)
//!        refresh time (CLOCK_MONOTONIC ns), endpoint clock, refreshes,
//!        engine rounds/waits/wake-ups, outstanding sends, ring blocks free
//!        and total, peers total and listed
//! 80     PortStats, PORT_COUNTERS order (48 words reserved)
//! 128    per method: rx_frames, tx_frames, rx_foreign, rx_malformed,
//!        tx_errors (8 methods, 48 words reserved)
//! 192    peers: capacity x 20 words (address, route, srtt, rto, PeerStats,
//!        queued, in flight, last active, congestion window, base round
//!        trip, queueing delay, pacing rate), the most recently active first
//! ```
//!
//! # Seqlock
//!
//! One writer (the endpoint) per page. [`PageWriter::publish`] stores
//! `seq + 1` (odd), a release fence, the body with relaxed stores, then
//! `seq + 2` with release. A reader loads `seq` (relaxed, then an acquire
//! fence), copies the body with relaxed loads, fences (acquire) and loads
//! `seq` again: the copy is a snapshot of one publication exactly when both
//! loads saw the same even value (Boehm's seqlock in the C++/Rust memory
//! model). The reader maps the file read-only and uses only relaxed loads
//! of single words, which are allowed on read-only memory.
//!
//! # Validation
//!
//! A page is another process's memory: every word read from it is
//! checked (magic, version, that the geometry gives exactly the page
//! length, that the file is that long, counts within capacities, method
//! indices within the method table, names printable), so a corrupt,
//! truncated or hostile page is reported as [`PageError`], never a panic
//! or an out-of-bounds read. A page that never holds still (its writer died
//! between the two `seq` stores) is [`PageError::Unstable`].
//!
//! Limit: a file that is truncated *while* a reader has it mapped makes the
//! reader's next load fault (`SIGBUS`). The owner never truncates; only
//! its own user (or root) can write the file, and such a process can
//! already kill the reader outright.

use crate::proc;
use crate::segment::{file_len, open_raw, DirLock, Mapping};
use bcl_core::stats::{BadFrames, PeerStats, PortStats};
use bcl_core::{CongestionInfo, JobKey, ProcessAddr};
use std::io;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{fence, AtomicU64, Ordering};
use std::time::Duration;

/// "BCLSTAT1" as a little-endian word.
pub const MAGIC: u64 = u64::from_le_bytes(*b"BCLSTAT1");
/// Layout version; readers refuse others.
pub const VERSION: u64 = 1;
/// File-name prefix of every page.
pub const PREFIX: &str = "bcl-stat-";
/// Peers a page lists by default (the most recently active).
pub const DEFAULT_PEER_CAPACITY: u32 = 64;
/// Most peers a page may list (bounds what a reader maps).
pub const MAX_PEER_CAPACITY: u32 = 4096;
/// Methods a page has room for.
pub const METHOD_CAPACITY: usize = 8;
/// Bytes of a method name (NUL-padded).
const NAME_BYTES: usize = 16;

/// Page states (word `W_STATE`).
const STATE_INIT: u64 = 0;
const STATE_READY: u64 = 1;
const STATE_CLOSED: u64 = 2;

// Header words.
const W_MAGIC: usize = 0;
const W_VERSION: usize = 1;
const W_PAGE_LEN: usize = 2;
const W_PEER_CAP: usize = 3;
const W_PEER_WORDS: usize = 4;
const W_METHOD_CAP: usize = 5;
const W_STATE: usize = 6;
const W_PID: usize = 7;
const W_START: usize = 8;
const W_NODE: usize = 9;
const W_PORT: usize = 10;
const W_JOB: usize = 11;
const W_MODE: usize = 12;
const W_METHOD_COUNT: usize = 13;
const W_CREATED: usize = 14;
const W_INTERVAL: usize = 15;
const W_NAMES: usize = 16;
const HEADER_WORDS: usize = 64;

// Body words.
const W_SEQ: usize = 64;
const W_REFRESH_NS: usize = 65;
const W_NOW_NS: usize = 66;
const W_REFRESHES: usize = 67;
const W_ROUNDS: usize = 68;
const W_WAITS: usize = 69;
const W_WOKEN_FRAMES: usize = 70;
const W_WOKEN_TIMER: usize = 71;
const W_OUTSTANDING: usize = 72;
const W_RING_FREE: usize = 73;
const W_RING_BLOCKS: usize = 74;
const W_PEERS_TOTAL: usize = 75;
const W_PEERS_LISTED: usize = 76;
const W_COUNTERS: usize = 80;
const W_METHODS: usize = 128;
const METHOD_WORDS: usize = 5;
const W_PEERS: usize = 192;
/// Words per peer record.
pub const PEER_WORDS: usize = 20;

/// Marks "no value" in a word (no route, no RTT sample yet).
const NONE: u64 = u64::MAX;

/// The page length in bytes for `peers` peer records, rounded up to 4 KiB.
pub fn page_len(peers: u32) -> usize {
    let bytes = (W_PEERS + peers as usize * PEER_WORDS) * 8;
    bytes.div_ceil(4096) * 4096
}

/// The port counters in page order, by the names `bcl-stat --json` uses.
pub const PORT_COUNTERS: [&str; 48] = [
    "frames_sent",
    "frames_received",
    "data_frames_sent",
    "retransmits",
    "acks_sent",
    "naks_sent",
    "timeouts",
    "duplicates",
    "ring_full_drops",
    "ring_full_backoffs",
    "rx_backpressure",
    "reneged",
    "bundles_sent",
    "messages_bundled",
    "bundles_received",
    "messages_sent",
    "messages_completed",
    "messages_failed",
    "messages_delivered",
    "transfers_received",
    "transfer_frames_dropped",
    "channel_events",
    "bad_truncated",
    "bad_version",
    "bad_type",
    "bad_flags",
    "bad_length",
    "bad_checksum",
    "missing_checksum",
    "wrong_job",
    "wrong_destination",
    "out_of_window",
    "bad_ack",
    "too_many_peers",
    "bad_bundle",
    "frames_judged_lost",
    "duplicates_reported",
    "congestion_decreases",
    "congestion_undos",
    "pacing_waits",
    "pings_sent",
    "peers_declared_dead",
    "stale_frames",
    "peers_restarted",
    "frames_from_detached",
    "rails_down",
    "rails_up",
    "rail_probes",
];

/// `s` as words in [`PORT_COUNTERS`] order.
pub fn port_words(s: &PortStats) -> [u64; PORT_COUNTERS.len()] {
    let b = &s.bad_frames;
    [
        s.frames_sent,
        s.frames_received,
        s.data_frames_sent,
        s.retransmits,
        s.acks_sent,
        s.naks_sent,
        s.timeouts,
        s.duplicates,
        s.ring_full_drops,
        s.ring_full_backoffs,
        s.rx_backpressure,
        s.reneged,
        s.bundles_sent,
        s.messages_bundled,
        s.bundles_received,
        s.messages_sent,
        s.messages_completed,
        s.messages_failed,
        s.messages_delivered,
        s.transfers_received,
        s.transfer_frames_dropped,
        s.channel_events,
        b.truncated,
        b.bad_version,
        b.bad_type,
        b.bad_flags,
        b.bad_length,
        b.bad_checksum,
        b.missing_checksum,
        b.wrong_job,
        b.wrong_destination,
        b.out_of_window,
        b.bad_ack,
        b.too_many_peers,
        b.bad_bundle,
        s.frames_judged_lost,
        s.duplicates_reported,
        s.congestion_decreases,
        s.congestion_undos,
        s.pacing_waits,
        s.pings_sent,
        s.peers_declared_dead,
        b.stale,
        s.peers_restarted,
        s.frames_from_detached,
        s.rails_down,
        s.rails_up,
        s.rail_probes,
    ]
}

/// The inverse of [`port_words`].
pub fn port_from_words(w: &[u64; PORT_COUNTERS.len()]) -> PortStats {
    PortStats {
        frames_sent: w[0],
        frames_received: w[1],
        data_frames_sent: w[2],
        retransmits: w[3],
        acks_sent: w[4],
        naks_sent: w[5],
        timeouts: w[6],
        duplicates: w[7],
        ring_full_drops: w[8],
        ring_full_backoffs: w[9],
        rx_backpressure: w[10],
        reneged: w[11],
        bundles_sent: w[12],
        messages_bundled: w[13],
        bundles_received: w[14],
        messages_sent: w[15],
        messages_completed: w[16],
        messages_failed: w[17],
        messages_delivered: w[18],
        transfers_received: w[19],
        transfer_frames_dropped: w[20],
        channel_events: w[21],
        frames_judged_lost: w[35],
        duplicates_reported: w[36],
        congestion_decreases: w[37],
        congestion_undos: w[38],
        pacing_waits: w[39],
        pings_sent: w[40],
        peers_declared_dead: w[41],
        peers_restarted: w[43],
        frames_from_detached: w[44],
        rails_down: w[45],
        rails_up: w[46],
        rail_probes: w[47],
        bad_frames: BadFrames {
            truncated: w[22],
            bad_version: w[23],
            bad_type: w[24],
            bad_flags: w[25],
            bad_length: w[26],
            bad_checksum: w[27],
            missing_checksum: w[28],
            wrong_job: w[29],
            wrong_destination: w[30],
            out_of_window: w[31],
            bad_ack: w[32],
            too_many_peers: w[33],
            bad_bundle: w[34],
            stale: w[42],
        },
    }
}

/// How the endpoint progresses (word `W_MODE`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PageMode {
    /// Busy-polling.
    BusyPoll,
    /// Sleeping in epoll between idle rounds.
    Blocking,
}

impl PageMode {
    /// `busy-poll` or `blocking`, as the tools print it.
    pub fn name(self) -> &'static str {
        match self {
            PageMode::BusyPoll => "busy-poll",
            PageMode::Blocking => "blocking",
        }
    }
}

/// What a page says about its endpoint for its whole life (the header).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PageIdentity {
    /// The owning process.
    pub pid: u32,
    /// Its start time (clock ticks since boot, `/proc/PID/stat` field 22).
    pub start_time: u64,
    /// The endpoint's address.
    pub addr: ProcessAddr,
    /// Its job.
    pub job: JobKey,
    /// Its progress mode.
    pub mode: PageMode,
    /// Its methods' names, by method index (at most [`METHOD_CAPACITY`]
    /// are published).
    pub methods: Vec<String>,
    /// Peers the page lists at most.
    pub peer_capacity: u32,
    /// How often the endpoint refreshes the page, at most.
    pub interval: Duration,
    /// When the page was created (CLOCK_MONOTONIC).
    pub created_mono_ns: u64,
}

/// One method's counters as the page has them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MethodRow {
    /// Frames shown to the core (0 where the core counts them).
    pub rx_frames: u64,
    /// Frames handed to the medium.
    pub tx_frames: u64,
    /// Received frames that were not for this endpoint.
    pub rx_foreign: u64,
    /// Received frames that were malformed.
    pub rx_malformed: u64,
    /// Frames lost on the way out.
    pub tx_errors: u64,
}

/// One peer as the page has it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerRecord {
    /// The peer.
    pub addr: ProcessAddr,
    /// Index of its route's method (into [`PageIdentity::methods`]), if
    /// routed.
    pub method: Option<u8>,
    /// Its route's link in that method.
    pub link: u32,
    /// Smoothed round-trip time, once measured.
    pub srtt: Option<Duration>,
    /// Retransmission timeout.
    pub rto: Duration,
    /// The port's counters of the peer.
    pub stats: PeerStats,
    /// Messages and transfers accepted, not yet framed.
    pub queued: u32,
    /// Frames in flight (sent, not acknowledged).
    pub in_flight: u32,
    /// When its counters last changed (CLOCK_MONOTONIC ns, at a refresh).
    pub last_active_mono_ns: u64,
    /// Congestion control's state, if the peer is controlled.
    pub congestion: Option<CongestionInfo>,
}

/// The engine's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EngineRow {
    /// Progress rounds.
    pub rounds: u64,
    /// Sleeps (blocking mode).
    pub waits: u64,
    /// Sleeps ended by a method's descriptor.
    pub woken_by_frames: u64,
    /// Sleeps ended by the timer.
    pub woken_by_timer: u64,
}

/// Everything one publication writes (the seqlock's body).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PageBody {
    /// When it was written (CLOCK_MONOTONIC ns; 0: [`PageWriter::publish`]
    /// reads the clock).
    pub refresh_mono_ns: u64,
    /// The endpoint's clock at the refresh (ns since its origin).
    pub endpoint_now_ns: u64,
    /// Publications so far, this one included (set by `publish`).
    pub refreshes: u64,
    /// The progress engine's counters.
    pub engine: EngineRow,
    /// Sends accepted and not yet completed.
    pub outstanding_sends: u64,
    /// Free blocks of the system channel's receive ring.
    pub ring_free_blocks: u64,
    /// Blocks of that ring.
    pub ring_blocks: u64,
    /// Peers the port keeps state for (the page lists at most its
    /// capacity of them).
    pub peers_total: u64,
    /// The port's counters.
    pub port: PortStats,
    /// Per method, by index.
    pub methods: Vec<MethodRow>,
    /// The listed peers, most recently active first.
    pub peers: Vec<PeerRecord>,
}

/// A consistent reading of a page.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PageSnapshot {
    /// The file.
    pub path: PathBuf,
    /// Its header.
    pub identity: PageIdentity,
    /// The seqlock version the body was read at (even).
    pub seq: u64,
    /// The body.
    pub body: PageBody,
}

/// Why a page could not be read.
#[derive(Debug, thiserror::Error)]
pub enum PageError {
    /// Opening, sizing or mapping it failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: &'static str,
        /// The error.
        #[source]
        source: io::Error,
    },
    /// Its owner is still writing the header.
    #[error("being created")]
    NotReady,
    /// Its owner closed it (it is about to disappear).
    #[error("closed")]
    Closed,
    /// The contents are not a valid page.
    #[error("corrupt: {0}")]
    Corrupt(String),
    /// No stable snapshot after many tries (its writer died mid-update?).
    #[error("no stable snapshot (seq {0} never held still)")]
    Unstable(u64),
}

/// Why a page could not be created.
#[derive(Debug, thiserror::Error)]
#[error("statistics page in {dir}: {context}: {source}")]
pub struct CreateError {
    /// The directory.
    pub dir: PathBuf,
    /// What was being done.
    pub context: String,
    /// The error.
    #[source]
    pub source: io::Error,
}

/// CLOCK_MONOTONIC in nanoseconds: comparable between processes of one
/// host, unlike an `Instant`.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into a valid buffer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
}

/// The file name of the `n`-th page of `addr` in process `pid` (`n` = 0
/// has no suffix).
pub fn page_name(pid: u32, addr: ProcessAddr, n: u32) -> String {
    if n == 0 {
        format!("{PREFIX}{pid}-{}.{}", addr.node.0, addr.port.0)
    } else {
        format!("{PREFIX}{pid}-{}.{}-{n}", addr.node.0, addr.port.0)
    }
}

/// The pid a page's file name carries, if `name` is a page name
/// (`bcl-stat-PID-NODE.PORT[-N]`).
pub fn pid_of_name(name: &str) -> Option<u32> {
    let rest = name.strip_prefix(PREFIX)?;
    let (pid, addr) = rest.split_once('-')?;
    let addr = addr.split('-').next()?;
    let (node, port) = addr.split_once('.')?;
    node.parse::<u32>().ok()?;
    port.parse::<u16>().ok()?;
    pid.parse().ok()
}

/// A page's memory as words; all access atomic.
struct Words {
    map: Mapping,
}

impl Words {
    fn word(&self, i: usize) -> &AtomicU64 {
        assert!((i + 1) * 8 <= self.map.len(), "word {i} outside the page");
        // SAFETY: the mapping is page-aligned, so word `i` (checked above
        // to lie inside it) is 8-aligned and in bounds; the bytes are only
        // ever accessed as AtomicU64, by every process, so a shared
        // reference to the atomic is sound (AtomicU64 has interior
        // mutability). The mapping outlives the reference (`&self`).
        unsafe { &*(self.map.ptr().add(i * 8) as *const AtomicU64) }
    }

    fn load(&self, i: usize) -> u64 {
        self.word(i).load(Ordering::Relaxed)
    }

    fn store(&self, i: usize, v: u64) {
        self.word(i).store(v, Ordering::Relaxed);
    }
}

/// The owner's side of a page (see the module documentation): created by
/// [`PageWriter::create`], refreshed by [`PageWriter::publish`], removed on
/// drop.
pub struct PageWriter {
    words: Words,
    path: PathBuf,
    seq: u64,
    refreshes: u64,
    peer_capacity: usize,
    method_count: usize,
}

impl std::fmt::Debug for PageWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PageWriter")
            .field("path", &self.path)
            .field("seq", &self.seq)
            .finish()
    }
}

impl PageWriter {
    /// Creates the page of `id` in `dir` (removing a stale page of the same
    /// name first) and marks it ready; the body stays zero until the first
    /// [`publish`](PageWriter::publish).
    pub fn create(dir: &Path, id: &PageIdentity) -> Result<PageWriter, CreateError> {
        let err = |context: String| {
            let dir = dir.to_path_buf();
            move |source: io::Error| CreateError {
                dir,
                context,
                source,
            }
        };
        let cap = id.peer_capacity.min(MAX_PEER_CAPACITY);
        let len = page_len(cap);
        let _lock = DirLock::acquire(dir).map_err(err("locking the directory".into()))?;
        let mut n = 0u32;
        let (fd, path) = loop {
            let path = dir.join(page_name(id.pid, id.addr, n));
            match open_raw(&path, libc::O_RDWR | libc::O_CREAT | libc::O_EXCL, 0o600) {
                Ok(fd) => break (fd, path),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                    // Ours (another endpoint with this address) or a dead
                    // process's with our pid: skip the first, remove the
                    // second. We hold the lock, so a page without a valid
                    // header is not one being created.
                    if owner_alive_or_unknown(&path) {
                        n += 1;
                    } else {
                        let _ = std::fs::remove_file(&path);
                    }
                }
                Err(e) => return Err(err(format!("creating {}", path.display()))(e)),
            }
        };
        let fail = |e: CreateError| {
            let _ = std::fs::remove_file(&path);
            e
        };
        // SAFETY: ftruncate on our own fd.
        if unsafe { libc::ftruncate(fd.as_raw_fd(), len as libc::off_t) } != 0 {
            let e = io::Error::last_os_error();
            return Err(fail(err(format!("sizing {}", path.display()))(e)));
        }
        let map = Mapping::map(&fd, len)
            .map_err(|e| fail(err(format!("mapping {}", path.display()))(e)))?;
        let words = Words { map };
        let methods = id.methods.len().min(METHOD_CAPACITY);
        let header = [
            (W_MAGIC, MAGIC),
            (W_VERSION, VERSION),
            (W_PAGE_LEN, len as u64),
            (W_PEER_CAP, u64::from(cap)),
            (W_PEER_WORDS, PEER_WORDS as u64),
            (W_METHOD_CAP, METHOD_CAPACITY as u64),
            (W_PID, u64::from(id.pid)),
            (W_START, id.start_time),
            (W_NODE, u64::from(id.addr.node.0)),
            (W_PORT, u64::from(id.addr.port.0)),
            (W_JOB, u64::from(id.job.0)),
            (W_MODE, matches!(id.mode, PageMode::Blocking) as u64),
            (W_METHOD_COUNT, methods as u64),
            (W_CREATED, id.created_mono_ns),
            (
                W_INTERVAL,
                id.interval.as_nanos().min(u128::from(u64::MAX)) as u64,
            ),
        ];
        for (w, v) in header {
            words.store(w, v);
        }
        for (i, name) in id.methods.iter().take(METHOD_CAPACITY).enumerate() {
            let mut b = [0u8; NAME_BYTES];
            let n = name.len().min(NAME_BYTES - 1);
            b[..n].copy_from_slice(&name.as_bytes()[..n]);
            words.store(
                W_NAMES + 2 * i,
                u64::from_le_bytes(b[..8].try_into().unwrap()),
            );
            words.store(
                W_NAMES + 2 * i + 1,
                u64::from_le_bytes(b[8..].try_into().unwrap()),
            );
        }
        // Readers check the state (acquire) before the header.
        words.word(W_STATE).store(STATE_READY, Ordering::Release);
        Ok(PageWriter {
            words,
            path,
            seq: 0,
            refreshes: 0,
            peer_capacity: cap as usize,
            method_count: methods,
        })
    }

    /// The page's file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Peers the page can list.
    pub fn peer_capacity(&self) -> usize {
        self.peer_capacity
    }

    /// Writes `body` as one seqlock publication (see the module
    /// documentation), stamping its refresh time and count. Peers beyond
    /// the capacity and methods beyond [`METHOD_CAPACITY`] are left out.
    pub fn publish(&mut self, body: &PageBody) {
        let w = &self.words;
        self.refreshes += 1;
        let refresh_ns = match body.refresh_mono_ns {
            0 => monotonic_ns(),
            t => t,
        };
        // Odd: a reader that sees it (or sees it change) retries.
        w.store(W_SEQ, self.seq + 1);
        fence(Ordering::Release);
        let peers = &body.peers[..body.peers.len().min(self.peer_capacity)];
        let scalars = [
            (W_REFRESH_NS, refresh_ns),
            (W_NOW_NS, body.endpoint_now_ns),
            (W_REFRESHES, self.refreshes),
            (W_ROUNDS, body.engine.rounds),
            (W_WAITS, body.engine.waits),
            (W_WOKEN_FRAMES, body.engine.woken_by_frames),
            (W_WOKEN_TIMER, body.engine.woken_by_timer),
            (W_OUTSTANDING, body.outstanding_sends),
            (W_RING_FREE, body.ring_free_blocks),
            (W_RING_BLOCKS, body.ring_blocks),
            (W_PEERS_TOTAL, body.peers_total),
            (W_PEERS_LISTED, peers.len() as u64),
        ];
        for (i, v) in scalars {
            w.store(i, v);
        }
        for (i, v) in port_words(&body.port).into_iter().enumerate() {
            w.store(W_COUNTERS + i, v);
        }
        for i in 0..self.method_count {
            let m = body.methods.get(i).copied().unwrap_or_default();
            let base = W_METHODS + i * METHOD_WORDS;
            for (k, v) in [
                m.rx_frames,
                m.tx_frames,
                m.rx_foreign,
                m.rx_malformed,
                m.tx_errors,
            ]
            .into_iter()
            .enumerate()
            {
                w.store(base + k, v);
            }
        }
        for (i, p) in peers.iter().enumerate() {
            for (k, v) in peer_words(p).into_iter().enumerate() {
                w.store(W_PEERS + i * PEER_WORDS + k, v);
            }
        }
        self.seq += 2;
        w.word(W_SEQ).store(self.seq, Ordering::Release);
    }
}

impl Drop for PageWriter {
    fn drop(&mut self) {
        self.words
            .word(W_STATE)
            .store(STATE_CLOSED, Ordering::Release);
        let _ = std::fs::remove_file(&self.path);
    }
}

fn duration_word(d: Option<Duration>) -> u64 {
    d.map_or(NONE, |d| d.as_nanos().min(u128::from(NONE - 1)) as u64)
}

fn peer_words(p: &PeerRecord) -> [u64; PEER_WORDS] {
    [
        u64::from(p.addr.node.0),
        u64::from(p.addr.port.0),
        p.method.map_or(NONE, u64::from),
        u64::from(p.link),
        duration_word(p.srtt),
        duration_word(Some(p.rto)),
        p.stats.retransmits,
        p.stats.frames_sent,
        p.stats.frames_received,
        p.stats.bytes_sent,
        p.stats.bytes_received,
        p.stats.duplicates,
        p.stats.ring_full_drops,
        u64::from(p.queued),
        u64::from(p.in_flight),
        p.last_active_mono_ns,
        p.congestion.map_or(NONE, |c| u64::from(c.window)),
        duration_word(p.congestion.and_then(|c| c.base_rtt)),
        duration_word(p.congestion.and_then(|c| c.queueing_delay)),
        p.congestion
            .and_then(|c| c.pacing_rate)
            .map_or(NONE, |r| r.min(NONE - 1)),
    ]
}

fn peer_from_words(w: &[u64], methods: usize) -> Result<PeerRecord, String> {
    let small = |v: u64, max: u64, what: &str| {
        if v <= max {
            Ok(v)
        } else {
            Err(format!("peer {what} {v} out of range"))
        }
    };
    let method = match w[2] {
        NONE => None,
        m if (m as usize) < methods => Some(m as u8),
        m => return Err(format!("peer route names method {m} of {methods}")),
    };
    let rto = match w[5] {
        NONE => return Err("peer without an RTO".into()),
        ns => Duration::from_nanos(ns),
    };
    Ok(PeerRecord {
        addr: ProcessAddr::new(
            small(w[0], u64::from(u32::MAX), "node")? as u32,
            small(w[1], u64::from(u16::MAX), "port")? as u16,
        ),
        method,
        link: small(w[3], u64::from(u32::MAX), "link")? as u32,
        srtt: (w[4] != NONE).then(|| Duration::from_nanos(w[4])),
        rto,
        stats: PeerStats {
            retransmits: w[6],
            frames_sent: w[7],
            frames_received: w[8],
            bytes_sent: w[9],
            bytes_received: w[10],
            duplicates: w[11],
            ring_full_drops: w[12],
        },
        queued: small(w[13], u64::from(u32::MAX), "queue depth")? as u32,
        in_flight: small(w[14], u64::from(u32::MAX), "frames in flight")? as u32,
        last_active_mono_ns: w[15],
        congestion: match w[16] {
            NONE => None,
            window => Some(CongestionInfo {
                window: small(window, u64::from(u32::MAX), "congestion window")? as u32,
                base_rtt: (w[17] != NONE).then(|| Duration::from_nanos(w[17])),
                queueing_delay: (w[18] != NONE).then(|| Duration::from_nanos(w[18])),
                pacing_rate: (w[19] != NONE).then_some(w[19]),
            }),
        },
    })
}

/// Most attempts at a stable snapshot before [`PageError::Unstable`].
const READ_ATTEMPTS: u32 = 10_000;

/// Reads the page at `path`: validates the header, then copies the body
/// under the seqlock (see the module documentation). Never panics on any
/// contents.
pub fn read_page(path: &Path) -> Result<PageSnapshot, PageError> {
    let io = |context: &'static str| move |source: io::Error| PageError::Io { context, source };
    let fd = open_raw(path, libc::O_RDONLY, 0).map_err(io("opening"))?;
    let size = file_len(&fd).map_err(io("sizing"))?;
    if size < (HEADER_WORDS as u64 + 1) * 8 {
        return Err(PageError::Corrupt(format!(
            "{size} bytes, shorter than a header"
        )));
    }
    let max = page_len(MAX_PEER_CAPACITY) as u64;
    let map_len = size.min(max) as usize;
    let words = Words {
        map: Mapping::map_read_only(&fd, map_len).map_err(io("mapping"))?,
    };
    drop(fd);
    match words.load(W_STATE) {
        STATE_READY => {}
        STATE_INIT => return Err(PageError::NotReady),
        STATE_CLOSED => return Err(PageError::Closed),
        s => return Err(PageError::Corrupt(format!("unknown state {s}"))),
    }
    // Pairs with the owner's release store of READY: the header is
    // complete.
    fence(Ordering::Acquire);
    let identity = read_identity(&words, size)?;
    let cap = identity.peer_capacity as usize;
    let methods = identity.methods.len();
    let body_words = W_PEERS + cap * PEER_WORDS - W_SEQ;
    let mut buf = vec![0u64; body_words];
    for _ in 0..READ_ATTEMPTS {
        let s1 = words.load(W_SEQ);
        fence(Ordering::Acquire);
        if s1 % 2 == 1 {
            std::thread::yield_now();
            continue;
        }
        for (k, b) in buf.iter_mut().enumerate() {
            *b = words.load(W_SEQ + k);
        }
        fence(Ordering::Acquire);
        let s2 = words.load(W_SEQ);
        if s1 == s2 {
            let body = parse_body(&buf, cap, methods).map_err(PageError::Corrupt)?;
            return Ok(PageSnapshot {
                path: path.to_path_buf(),
                identity,
                seq: s1,
                body,
            });
        }
    }
    Err(PageError::Unstable(words.load(W_SEQ)))
}

fn read_identity(w: &Words, size: u64) -> Result<PageIdentity, PageError> {
    let bad = |s: String| PageError::Corrupt(s);
    if w.load(W_MAGIC) != MAGIC {
        return Err(bad("bad magic".into()));
    }
    let version = w.load(W_VERSION);
    if version != VERSION {
        return Err(bad(format!(
            "layout version {version}, this reader knows {VERSION}"
        )));
    }
    let cap = w.load(W_PEER_CAP);
    if cap > u64::from(MAX_PEER_CAPACITY) {
        return Err(bad(format!(
            "peer capacity {cap} above {MAX_PEER_CAPACITY}"
        )));
    }
    let len = w.load(W_PAGE_LEN);
    if len != page_len(cap as u32) as u64 {
        return Err(bad(format!("page length {len} does not match {cap} peers")));
    }
    if size < len {
        return Err(bad(format!("truncated: {size} bytes of {len}")));
    }
    if w.load(W_PEER_WORDS) != PEER_WORDS as u64 || w.load(W_METHOD_CAP) != METHOD_CAPACITY as u64 {
        return Err(bad("unknown record sizes".into()));
    }
    let pid = w.load(W_PID);
    let node = w.load(W_NODE);
    let port = w.load(W_PORT);
    let job = w.load(W_JOB);
    if pid == 0 || pid > u64::from(u32::MAX) {
        return Err(bad(format!("pid {pid}")));
    }
    if node > u64::from(u32::MAX) || port > u64::from(u16::MAX) || job > u64::from(u32::MAX) {
        return Err(bad(format!(
            "address {node}.{port} or job {job} out of range"
        )));
    }
    let mode = match w.load(W_MODE) {
        0 => PageMode::BusyPoll,
        1 => PageMode::Blocking,
        m => return Err(bad(format!("progress mode {m}"))),
    };
    let count = w.load(W_METHOD_COUNT);
    if count > METHOD_CAPACITY as u64 {
        return Err(bad(format!("{count} methods")));
    }
    let mut methods = Vec::with_capacity(count as usize);
    for i in 0..count as usize {
        let mut b = [0u8; NAME_BYTES];
        b[..8].copy_from_slice(&w.load(W_NAMES + 2 * i).to_le_bytes());
        b[8..].copy_from_slice(&w.load(W_NAMES + 2 * i + 1).to_le_bytes());
        let n = b.iter().position(|&c| c == 0).unwrap_or(NAME_BYTES);
        let name = &b[..n];
        if name.is_empty() || !name.iter().all(|c| c.is_ascii_graphic()) {
            return Err(bad(format!("method {i} has no printable name")));
        }
        methods.push(String::from_utf8_lossy(name).into_owned());
    }
    Ok(PageIdentity {
        pid: pid as u32,
        start_time: w.load(W_START),
        addr: ProcessAddr::new(node as u32, port as u16),
        job: JobKey(job as u32),
        mode,
        methods,
        peer_capacity: cap as u32,
        interval: Duration::from_nanos(w.load(W_INTERVAL)),
        created_mono_ns: w.load(W_CREATED),
    })
}

/// Parses a body copied from word [`W_SEQ`] on.
fn parse_body(b: &[u64], cap: usize, methods: usize) -> Result<PageBody, String> {
    let at = |w: usize| b[w - W_SEQ];
    let listed = at(W_PEERS_LISTED);
    if listed > cap as u64 {
        return Err(format!("{listed} peers listed, capacity {cap}"));
    }
    let mut port = [0u64; PORT_COUNTERS.len()];
    for (i, v) in port.iter_mut().enumerate() {
        *v = at(W_COUNTERS + i);
    }
    let method_rows = (0..methods)
        .map(|i| {
            let base = W_METHODS + i * METHOD_WORDS;
            MethodRow {
                rx_frames: at(base),
                tx_frames: at(base + 1),
                rx_foreign: at(base + 2),
                rx_malformed: at(base + 3),
                tx_errors: at(base + 4),
            }
        })
        .collect();
    let mut peers = Vec::with_capacity(listed as usize);
    for i in 0..listed as usize {
        let from = W_PEERS + i * PEER_WORDS - W_SEQ;
        peers.push(peer_from_words(&b[from..from + PEER_WORDS], methods)?);
    }
    Ok(PageBody {
        refresh_mono_ns: at(W_REFRESH_NS),
        endpoint_now_ns: at(W_NOW_NS),
        refreshes: at(W_REFRESHES),
        engine: EngineRow {
            rounds: at(W_ROUNDS),
            waits: at(W_WAITS),
            woken_by_frames: at(W_WOKEN_FRAMES),
            woken_by_timer: at(W_WOKEN_TIMER),
        },
        outstanding_sends: at(W_OUTSTANDING),
        ring_free_blocks: at(W_RING_FREE),
        ring_blocks: at(W_RING_BLOCKS),
        peers_total: at(W_PEERS_TOTAL),
        port: port_from_words(&port),
        methods: method_rows,
        peers,
    })
}

/// Whether the page at `path` belongs to a live process, or cannot be
/// judged (kept either way). A page with a valid header is judged by its
/// pid and start time; one without (corrupt, truncated, still being
/// created) by the pid in its name: kept while a process with that pid
/// exists.
fn owner_alive_or_unknown(path: &Path) -> bool {
    match read_page(path) {
        Ok(p) => proc::is_alive(p.identity.pid, p.identity.start_time),
        Err(PageError::Io { source, .. }) if source.kind() == io::ErrorKind::NotFound => false,
        Err(_) => {
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
            match pid_of_name(name) {
                Some(pid) => !matches!(proc::stat(pid), Ok(None)),
                None => true,
            }
        }
    }
}

/// What [`scan`] found in a directory.
#[derive(Debug, Default)]
pub struct Scan {
    /// Pages of live processes, read consistently, by file name.
    pub pages: Vec<PageSnapshot>,
    /// Pages removed because their owners are dead, with the dead pid.
    pub removed: Vec<(PathBuf, u32)>,
    /// Pages that could not be read, or stale pages that could not be
    /// removed, with the reason.
    pub notes: Vec<(PathBuf, String)>,
}

/// Reads every page in `dir` (files named `bcl-stat-PID-…`); with `clean`,
/// removes the pages of dead processes (under the directory lock, judged
/// again there). Pages that cannot be read are noted, never fatal.
pub fn scan(dir: &Path, clean: bool) -> io::Result<Scan> {
    let mut names: Vec<String> = std::fs::read_dir(dir)?
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| pid_of_name(n).is_some())
        .collect();
    names.sort();
    let mut out = Scan::default();
    let mut stale = Vec::new();
    for name in names {
        let path = dir.join(&name);
        match read_page(&path) {
            Ok(p) => {
                if proc::is_alive(p.identity.pid, p.identity.start_time) {
                    out.pages.push(p);
                } else {
                    stale.push((path, p.identity.pid));
                }
            }
            // Gone meanwhile, or closing: nothing to show or note.
            Err(PageError::Io { source, .. }) if source.kind() == io::ErrorKind::NotFound => {}
            Err(PageError::Closed) => {}
            Err(e) => {
                let pid = pid_of_name(&name).unwrap_or(0);
                if matches!(proc::stat(pid), Ok(None)) {
                    stale.push((path, pid));
                } else {
                    out.notes.push((path, e.to_string()));
                }
            }
        }
    }
    if stale.is_empty() {
        return Ok(out);
    }
    if !clean {
        for (path, pid) in stale {
            out.notes
                .push((path, format!("stale: process {pid} is dead (not removed)")));
        }
        return Ok(out);
    }
    let _lock = DirLock::acquire(dir)?;
    for (path, pid) in stale {
        // Judged again under the lock: a process that reused the pid may
        // have created a page of the same name since.
        if owner_alive_or_unknown(&path) {
            continue;
        }
        match std::fs::remove_file(&path) {
            Ok(()) => out.removed.push((path, pid)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => out.notes.push((
                path,
                format!("stale (process {pid} is dead), not removed: {e}"),
            )),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;

    fn identity(addr: ProcessAddr) -> PageIdentity {
        PageIdentity {
            pid: std::process::id(),
            start_time: proc::self_start_time().unwrap(),
            addr,
            job: JobKey(0xbeef),
            mode: PageMode::BusyPoll,
            methods: vec!["shm".into(), "udp".into()],
            peer_capacity: 4,
            interval: Duration::from_millis(100),
            created_mono_ns: monotonic_ns(),
        }
    }

    fn dir() -> tempdir::Dir {
        tempdir::Dir::new()
    }

    /// A private directory under /dev/shm, removed on drop.
    mod tempdir {
        pub struct Dir(pub std::path::PathBuf);
        impl Dir {
            pub fn new() -> Dir {
                use std::sync::atomic::{AtomicU32, Ordering};
                static N: AtomicU32 = AtomicU32::new(0);
                let p = std::path::PathBuf::from(format!(
                    "/dev/shm/bcl-stat-test-{}-{}",
                    std::process::id(),
                    N.fetch_add(1, Ordering::Relaxed)
                ));
                std::fs::create_dir_all(&p).unwrap();
                Dir(p)
            }
        }
        impl Drop for Dir {
            fn drop(&mut self) {
                let _ = std::fs::remove_dir_all(&self.0);
            }
        }
    }

    fn peer(i: u32, v: u64) -> PeerRecord {
        PeerRecord {
            addr: ProcessAddr::new(i, 1),
            method: Some((i % 2) as u8),
            link: i,
            srtt: (i > 0).then(|| Duration::from_micros(u64::from(i))),
            rto: Duration::from_micros(200),
            stats: PeerStats {
                frames_sent: v,
                frames_received: v,
                bytes_sent: v * 3,
                bytes_received: v * 3,
                retransmits: !v,
                duplicates: v,
                ring_full_drops: !v,
            },
            queued: i,
            in_flight: i,
            last_active_mono_ns: v,
            congestion: (!i.is_multiple_of(3)).then(|| CongestionInfo {
                window: i,
                base_rtt: (i > 1).then(|| Duration::from_micros(u64::from(i))),
                queueing_delay: Some(Duration::from_nanos(v)),
                pacing_rate: i.is_multiple_of(2).then_some(v),
            }),
        }
    }

    #[test]
    fn names() {
        let a = ProcessAddr::new(3, 7);
        assert_eq!(page_name(12, a, 0), "bcl-stat-12-3.7");
        assert_eq!(page_name(12, a, 2), "bcl-stat-12-3.7-2");
        assert_eq!(pid_of_name("bcl-stat-12-3.7"), Some(12));
        assert_eq!(pid_of_name("bcl-stat-12-3.7-2"), Some(12));
        assert_eq!(pid_of_name("bcl-stat-x-3.7"), None);
        assert_eq!(pid_of_name("bcl-stat-12-3"), None);
        assert_eq!(pid_of_name("bcl-lock-0"), None);
        assert_eq!(pid_of_name("bcl-stat-test-1-0"), None);
    }

    #[test]
    fn round_trip_and_removal_on_drop() {
        let d = dir();
        let id = identity(ProcessAddr::new(1, 2));
        let mut w = PageWriter::create(&d.0, &id).unwrap();
        let path = w.path().to_path_buf();
        let mut body = PageBody {
            endpoint_now_ns: 5,
            engine: EngineRow {
                rounds: 9,
                ..Default::default()
            },
            outstanding_sends: 3,
            ring_blocks: 64,
            ring_free_blocks: 60,
            peers_total: 6,
            port: PortStats {
                frames_sent: 11,
                ..Default::default()
            },
            methods: vec![MethodRow {
                tx_frames: 4,
                ..Default::default()
            }],
            peers: (0..6).map(|i| peer(i, u64::from(i) * 10)).collect(),
            ..Default::default()
        };
        body.port.bad_frames.bad_bundle = 2;
        w.publish(&body);
        let s = read_page(&path).unwrap();
        assert_eq!(s.identity, id);
        assert_eq!(s.seq, 2);
        assert_eq!(s.body.refreshes, 1);
        assert_eq!(s.body.port, body.port);
        assert_eq!(s.body.peers, body.peers[..4], "capacity 4");
        assert_eq!(s.body.peers_total, 6);
        assert_eq!(s.body.methods[0], body.methods[0]);
        assert_eq!(s.body.methods[1], MethodRow::default());
        // A second endpoint with the same address gets its own page.
        let w2 = PageWriter::create(&d.0, &id).unwrap();
        assert_ne!(w2.path(), path);
        let scan = scan(&d.0, true).unwrap();
        assert_eq!(scan.pages.len(), 2);
        assert!(scan.removed.is_empty() && scan.notes.is_empty());
        drop(w);
        drop(w2);
        assert!(!path.exists());
        assert!(scan_names(&d.0).is_empty());
    }

    fn scan_names(dir: &Path) -> Vec<String> {
        std::fs::read_dir(dir)
            .unwrap()
            .flatten()
            .filter_map(|e| e.file_name().into_string().ok())
            .filter(|n| n.starts_with(PREFIX))
            .collect()
    }

    #[test]
    fn garbage_is_noted_never_a_panic() {
        let d = dir();
        let me = std::process::id();
        let id = identity(ProcessAddr::new(1, 2));
        let w = PageWriter::create(&d.0, &id).unwrap();
        let good = std::fs::read(w.path()).unwrap();
        // Pseudo-random garbage of many lengths, and the good page with
        // each header word and the peer count corrupted in turn.
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut cases: Vec<Vec<u8>> = Vec::new();
        for len in [0, 7, 512, 520, 4096, 12288, 70000] {
            cases.push(
                (0..len)
                    .map(|_| {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        x as u8
                    })
                    .collect(),
            );
        }
        for word in (0..HEADER_WORDS).chain([W_SEQ, W_PEERS_LISTED, W_PEERS + 2, W_PEERS + 5]) {
            let mut b = good.clone();
            b[word * 8..word * 8 + 8]
                .copy_from_slice(&(x.rotate_left(word as u32) | 1).to_le_bytes());
            cases.push(b);
        }
        cases.push(good[..good.len() - 4096].to_vec());
        let path = d.0.join(page_name(me, ProcessAddr::new(9, 9), 0));
        for (i, c) in cases.iter().enumerate() {
            std::fs::write(&path, c).unwrap();
            // Never a panic; errors are fine, and so is a page whose
            // corrupted word happens to be a valid value.
            let _ = read_page(&path);
            // Noted as corrupt, or read (a corrupted word that happens to be
            // a valid value), or removed (one that names a dead owner).
            let s = scan(&d.0, true).unwrap();
            assert_eq!(
                s.pages.len() + s.notes.len() + s.removed.len(),
                2,
                "case {i}: {s:?}"
            );
        }
        std::fs::write(&path, b"garbage").unwrap();
        let s = scan(&d.0, true).unwrap();
        assert_eq!(s.notes.len(), 1);
        assert!(s.notes[0].1.contains("corrupt"), "{:?}", s.notes);
        assert!(path.exists(), "a live pid's page is not removed");
        drop(w);
    }

    #[test]
    fn stale_pages_are_removed() {
        let d = dir();
        let mut id = identity(ProcessAddr::new(1, 2));
        // The same pid with another start time: a dead incarnation.
        id.start_time += 1;
        let w = PageWriter::create(&d.0, &id).unwrap();
        let path = w.path().to_path_buf();
        std::mem::forget(w);
        let s = scan(&d.0, false).unwrap();
        assert!(s.pages.is_empty());
        assert_eq!(s.notes.len(), 1);
        assert!(path.exists());
        let s = scan(&d.0, true).unwrap();
        assert_eq!(s.removed, vec![(path.clone(), std::process::id())]);
        assert!(!path.exists());
        // Garbage named after a pid that does not exist is stale too.
        let ghost = d.0.join("bcl-stat-4294967294-1.1");
        std::fs::write(&ghost, b"x").unwrap();
        let s = scan(&d.0, true).unwrap();
        assert_eq!(s.removed.len(), 1);
        assert!(!ghost.exists());
        // Creation replaces a dead incarnation's page of the same name.
        let live = identity(ProcessAddr::new(1, 2));
        let w = PageWriter::create(&d.0, &id).unwrap();
        let old = w.path().to_path_buf();
        std::mem::forget(w);
        let w = PageWriter::create(&d.0, &live).unwrap();
        assert_eq!(w.path(), old, "the stale page's name is reused");
        assert_eq!(read_page(&old).unwrap().identity, live);
    }

    /// A writer thread publishes bodies whose words must agree in pairs
    /// (every counter of a publication derives from one number); reader
    /// threads read the page through a second, read-only mapping, as
    /// another process would, and check every snapshot. A torn snapshot
    /// mixes two publications and breaks a pair.
    #[test]
    fn seqlock_readers_never_see_a_torn_snapshot() {
        let d = dir();
        let mut id = identity(ProcessAddr::new(1, 2));
        id.peer_capacity = 64;
        let mut w = PageWriter::create(&d.0, &id).unwrap();
        let path = w.path().to_path_buf();
        let stop = Arc::new(AtomicBool::new(false));
        const PUBLICATIONS: u64 = 50_000;
        let body_of = |v: u64| {
            let mut port = PortStats {
                frames_sent: v,
                frames_received: !v,
                ..Default::default()
            };
            port.bad_frames.bad_bundle = v.wrapping_mul(3);
            PageBody {
                endpoint_now_ns: v,
                outstanding_sends: !v,
                port,
                methods: vec![
                    MethodRow {
                        tx_frames: v,
                        rx_frames: !v,
                        ..Default::default()
                    };
                    2
                ],
                peers: (0..64).map(|i| peer(i, v)).collect(),
                ..Default::default()
            }
        };
        // Every snapshot must be of a publication: publish one before the
        // readers start.
        w.publish(&body_of(1));
        let readers: Vec<_> = (0..2)
            .map(|_| {
                let stop = stop.clone();
                let path = path.clone();
                std::thread::spawn(move || {
                    let mut seen = 0u64;
                    let mut last = 0;
                    while !stop.load(Ordering::Relaxed) || seen == 0 {
                        // A writer that never pauses (this one; a real one
                        // refreshes every 100 ms) can outrun a reader on a
                        // loaded host: that is `Unstable`, never a torn copy.
                        let s = match read_page(&path) {
                            Ok(s) => s,
                            Err(PageError::Unstable(_)) => continue,
                            Err(e) => panic!("{e}"),
                        };
                        let b = &s.body;
                        let v = b.endpoint_now_ns;
                        assert_eq!(b.outstanding_sends, !v);
                        assert_eq!(b.port.frames_sent, v);
                        assert_eq!(b.port.frames_received, !v);
                        assert_eq!(b.port.bad_frames.bad_bundle, v.wrapping_mul(3));
                        assert_eq!(b.methods[1].rx_frames, !v);
                        assert_eq!(b.refreshes, v, "refresh count is the value's");
                        assert_eq!(b.peers, body_of(v).peers);
                        assert!(s.seq >= last, "versions never go back");
                        last = s.seq;
                        seen += 1;
                    }
                    seen
                })
            })
            .collect();
        for v in 2..=PUBLICATIONS {
            w.publish(&body_of(v));
        }
        stop.store(true, Ordering::Relaxed);
        for r in readers {
            assert!(r.join().unwrap() > 0);
        }
    }
}
