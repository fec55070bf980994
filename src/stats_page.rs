//! The endpoint's statistics page: live counters for `bcl-stat`.
//!
//! Every [`Endpoint`] publishes a small shared-memory page
//! (`/dev/shm/bcl-stat-PID-NODE.PORT`, layout and seqlock in
//! [`bcl_shm::stats_page`]) with its identity (pid and start time, address,
//! job, methods, progress mode), the port's counters ([`PortStats`](bcl_core::PortStats)), the
//! engine's, each method's, and the most recently active peers (route,
//! RTT and RTO, the port's per-peer counters, queue depths). `bcl-stat`
//! lists and shows the pages of a node's processes.
//!
//! # Cost
//!
//! The data path pays nothing new: the page is refreshed from counters the
//! port keeps anyway, at most every [`StatsConfig::interval`] (100 ms by
//! default), and whether a refresh is due is one comparison of the progress
//! round's time (the reading [`crate::schedule`] makes or reuses anyway)
//! with a deadline. A refresh copies the counters into the page under its
//! seqlock (a few microseconds with 64 peers). Rounds that are not full
//! progress rounds (quick polls of the direct path) do not look.
//!
//! # On and off
//!
//! On by default. `BCL_STATS=0` in the environment turns it off,
//! `BCL_STATS_DIR` puts the pages elsewhere (tests, a private
//! `bcl-stat --dir`); [`EndpointBuilder::stats`] overrides both. A page
//! that cannot be created (no `/dev/shm`, no room) never fails the
//! endpoint: [`Endpoint::stats_page_error`] says why.
//!
//! # What per-peer counters count
//!
//! The per-peer frames and bytes are the port's: every frame it sends or
//! takes for that peer. Messages that a direct method (shared memory)
//! carries whole, without the port framing them, are counted per process
//! only (`messages_sent`, `messages_delivered`): counting them per peer
//! would add a lookup to the path whose latency this page must not move.

use crate::endpoint::{Endpoint, EndpointBuilder, ProgressMode};
use bcl_core::port::PeerInfo;
use bcl_core::{ProcessAddr, Time};
use bcl_shm::stats_page::{
    monotonic_ns, EngineRow, MethodRow, PageBody, PageIdentity, PageMode, PageWriter, PeerRecord,
    DEFAULT_PEER_CAPACITY,
};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How often a page is refreshed at most, by default: ten times per
/// `bcl-stat` refresh (one second), so what it shows is at most a tenth of
/// its interval old, and a refresh (microseconds) costs ~0.01 % of a core.
pub const DEFAULT_INTERVAL: Duration = Duration::from_millis(100);

/// Where pages go by default.
pub const DEFAULT_DIR: &str = "/dev/shm";

/// Whether and how an endpoint publishes its statistics page (see the
/// module documentation).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StatsConfig {
    /// Publish a page (default: yes, unless `BCL_STATS=0`).
    pub enabled: bool,
    /// Refresh it at most this often.
    pub interval: Duration,
    /// In this directory (default `/dev/shm`, or `BCL_STATS_DIR`).
    pub dir: PathBuf,
    /// List at most this many peers, the most recently active.
    pub peers: u32,
}

impl Default for StatsConfig {
    fn default() -> Self {
        StatsConfig {
            enabled: true,
            interval: DEFAULT_INTERVAL,
            dir: PathBuf::from(DEFAULT_DIR),
            peers: DEFAULT_PEER_CAPACITY,
        }
    }
}

impl StatsConfig {
    /// The defaults, changed by `BCL_STATS` (`0`, `off`, `no` or `false`
    /// turn the page off) and `BCL_STATS_DIR`.
    pub fn from_env() -> StatsConfig {
        let mut c = StatsConfig::default();
        if let Ok(v) = std::env::var("BCL_STATS") {
            c.enabled = !matches!(
                v.trim().to_ascii_lowercase().as_str(),
                "0" | "off" | "no" | "false"
            );
        }
        if let Some(d) = std::env::var_os("BCL_STATS_DIR").filter(|d| !d.is_empty()) {
            c.dir = PathBuf::from(d);
        }
        c
    }
}

/// The page of one endpoint and what refreshing it needs.
pub(crate) struct StatsPage {
    writer: PageWriter,
    interval: Duration,
    /// The body, reused from refresh to refresh (no allocation once warm).
    body: PageBody,
    /// Per peer: its counters at the last refresh, and when they last
    /// changed (to list the most recently active peers).
    activity: HashMap<ProcessAddr, Activity>,
}

/// What a peer looked like at the last refresh.
#[derive(Clone, Copy)]
struct Activity {
    seen: (u64, u64, u32, u32),
    last_active_ns: u64,
}

/// The endpoint's page: off, failed (why), or published.
#[derive(Default)]
pub(crate) enum PageState {
    /// Not asked for.
    #[default]
    Off,
    /// Asked for, could not be created.
    Failed(String),
    /// Published.
    On(Box<StatsPage>),
}

impl EndpointBuilder {
    /// Changes whether and how the endpoint publishes its statistics page
    /// (see [`crate::stats_page`]); starts from [`StatsConfig::from_env`],
    /// so a setting made here overrides the environment.
    pub fn stats(mut self, f: impl FnOnce(&mut StatsConfig)) -> Self {
        f(&mut self.stats);
        self
    }
}

impl Endpoint {
    /// Creates the page `cfg` asks for (called once, by the builder).
    pub(crate) fn open_stats_page(&mut self, cfg: StatsConfig) {
        if !cfg.enabled {
            return;
        }
        self.stats_page = match create(self, &cfg) {
            Ok(page) => {
                // The first refresh comes with the first progress round.
                self.stats_due = Time::ZERO;
                PageState::On(Box::new(page))
            }
            Err(e) => PageState::Failed(e),
        };
    }

    /// The file of this endpoint's statistics page, if it publishes one.
    pub fn stats_page_path(&self) -> Option<&Path> {
        match &self.stats_page {
            PageState::On(p) => Some(p.writer.path()),
            _ => None,
        }
    }

    /// Why the statistics page asked for could not be created.
    pub fn stats_page_error(&self) -> Option<&str> {
        match &self.stats_page {
            PageState::Failed(e) => Some(e),
            _ => None,
        }
    }

    /// Refreshes the statistics page now, whether due or not (progress
    /// rounds do it every [`StatsConfig::interval`]). Returns whether there
    /// is a page.
    pub fn publish_stats(&mut self) -> bool {
        let now = self.now();
        self.refresh_stats_page(now);
        matches!(self.stats_page, PageState::On(_))
    }

    /// Copies the counters into the page and sets the next refresh's time.
    /// Called by a progress round whose time reached `stats_due`.
    #[cold]
    pub(crate) fn refresh_stats_page(&mut self, now: Time) {
        // Taken out while the endpoint is read, put back at the end.
        let PageState::On(mut page) = std::mem::take(&mut self.stats_page) else {
            self.stats_due = Time::NEVER;
            return;
        };
        self.stats_due = now + page.interval;
        self.fill_page(&mut page, now);
        page.writer.publish(&page.body);
        self.stats_page = PageState::On(page);
    }

    /// Copies the endpoint's counters into `page`'s body.
    fn fill_page(&self, page: &mut StatsPage, now: Time) {
        let mono = monotonic_ns();
        let port = self.port();
        let engine = self.engine_stats();
        let body = &mut page.body;
        body.refresh_mono_ns = mono;
        body.endpoint_now_ns = now.as_nanos();
        body.engine = EngineRow {
            rounds: engine.rounds,
            waits: engine.waits,
            woken_by_frames: engine.woken_by_frames,
            woken_by_timer: engine.woken_by_timer,
        };
        body.outstanding_sends = port.outstanding_sends() as u64;
        body.ring_free_blocks = u64::from(port.ring_free_blocks());
        body.ring_blocks = u64::from(port.config().ring_blocks);
        body.peers_total = port.peer_count() as u64;
        body.port = *port.stats();
        body.methods.clear();
        body.methods.extend(self.methods().map(|m| {
            let c = m.counters();
            MethodRow {
                rx_frames: c.rx_frames,
                tx_frames: c.tx_frames,
                rx_foreign: c.rx_foreign,
                rx_malformed: c.rx_malformed,
                tx_errors: c.tx_errors,
            }
        }));
        body.peers.clear();
        for info in port.peer_infos() {
            let seen = (
                info.stats.frames_sent,
                info.stats.frames_received,
                info.queued,
                info.in_flight,
            );
            let a = page.activity.entry(info.addr).or_insert(Activity {
                seen,
                last_active_ns: mono,
            });
            if a.seen != seen {
                *a = Activity {
                    seen,
                    last_active_ns: mono,
                };
            }
            body.peers.push(record(&info, a.last_active_ns));
        }
        // The most recently active first; among equals, by address (a
        // stable order for the reader).
        body.peers
            .sort_unstable_by_key(|p| (std::cmp::Reverse(p.last_active_mono_ns), p.addr));
    }
}

/// The page for endpoint `ep` as `cfg` asks.
fn create(ep: &Endpoint, cfg: &StatsConfig) -> Result<StatsPage, String> {
    start_cleanup(&cfg.dir);
    let start_time =
        bcl_shm::proc::self_start_time().map_err(|e| format!("reading /proc/self/stat: {e}"))?;
    let id = PageIdentity {
        pid: std::process::id(),
        start_time,
        addr: ep.local(),
        job: ep.port().config().job,
        mode: match ep.mode() {
            ProgressMode::BusyPoll => PageMode::BusyPoll,
            ProgressMode::Blocking => PageMode::Blocking,
        },
        methods: ep.methods().map(|m| m.name().to_string()).collect(),
        peer_capacity: cfg.peers,
        interval: cfg.interval,
        created_mono_ns: monotonic_ns(),
    };
    let writer = PageWriter::create(&cfg.dir, &id).map_err(|e| e.to_string())?;
    Ok(StatsPage {
        writer,
        interval: cfg.interval,
        body: PageBody::default(),
        activity: HashMap::new(),
    })
}

/// Removes dead processes' pages from `dir`, once per process and
/// directory (like the segments' cleanup when a mailbox opens).
fn start_cleanup(dir: &Path) {
    use std::sync::Mutex;
    static CLEANED: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());
    let mut done = CLEANED.lock().unwrap_or_else(|e| e.into_inner());
    if done.iter().any(|d| d == dir) {
        return;
    }
    done.push(dir.to_path_buf());
    let _ = bcl_shm::stats_page::scan(dir, true);
}

/// A peer's record as the page has it.
fn record(info: &PeerInfo, last_active_ns: u64) -> PeerRecord {
    PeerRecord {
        addr: info.addr,
        method: info.route.map(|r| r.method),
        link: info.route.map_or(0, |r| r.link.0),
        srtt: info.srtt,
        rto: info.rto,
        stats: info.stats,
        queued: info.queued,
        in_flight: info.in_flight,
        last_active_mono_ns: last_active_ns,
        congestion: info.congestion,
    }
}
