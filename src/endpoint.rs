//! The progress engine: one port, its methods and a clock.
//!
//! An [`Endpoint`] moves frames between the protocol core's [`Port`] and the
//! transport methods: each [`Endpoint::progress`] call shows the port every
//! frame the methods received, runs due timers, finds routes for new peers
//! and lets the port fill the methods' transmit buffers.
//!
//! # Busy-poll and blocking modes
//!
//! Each endpoint runs in one of two [`ProgressMode`]s, chosen when it is
//! built; application code is the same in both. The waiting calls
//! ([`Endpoint::wait_send`], [`Endpoint::recv_blocking`],
//! [`Endpoint::send_blocking`], and [`Endpoint::progress_or_wait`] for
//! hand-written loops) make progress until their condition holds; between
//! rounds that moved nothing they
//!
//! - **busy-poll** ([`ProgressMode::BusyPoll`]): go straight on with the next
//!   round. Lowest latency, one CPU at 100 %.
//! - **block** ([`ProgressMode::Blocking`]): sleep in `epoll_wait` on every
//!   method's [`readiness_fd`](bcl_core::Method::readiness_fd) plus a timerfd
//!   armed for the port's next protocol deadline (delayed ACK,
//!   retransmission timeout, back-off) or the caller's own limit, whichever
//!   comes first. An idle endpoint burns no CPU.
//!
//! A method without a readiness descriptor (the simulated fabric) can only
//! be polled: an endpoint with such a method busy-polls even when built in
//! blocking mode ([`Endpoint::mode`] says which mode is in effect).

use crate::clock::{Clock, MonotonicClock};
use crate::method_slot::MethodSlot;
use crate::schedule::{self, Schedule};
use crate::wait::{Waiter, Woken};
use bcl_core::method::{Descriptor, DirectHead, LinkId, MessageClass, Method, MethodError, Route};
use bcl_core::port::{Port, ReleaseError, SendError};
use bcl_core::{
    ConfigError, Delivery, JobKey, NodeId, PeerEvent, PortConfig, ProcessAddr, SendEvent,
    SendFailure, SendHandle, Time,
};
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

/// Frames taken from one method per progress round, at most.
const RX_BUDGET: usize = 64;

/// Rounds between two looks at the clock of a busy-polling waiting call
/// (see [`Endpoint::progress_until`]).
const CLOCK_CHECK_ROUNDS: u32 = 64;

/// Rounds one [`Endpoint::service`] call runs at most while every round
/// moves something (64 frames each at most), before the event loop gets
/// its turn back.
pub const SERVICE_ROUNDS: usize = 16;

/// Calls of [`Endpoint::poll_recv_with`] between two looks at the clock in
/// [`Endpoint::recv_with_until`]: most of them are quick polls of a few
/// loads, next to which a clock reading is expensive.
const QUICK_CLOCK_CHECK_POLLS: u32 = 1024;

/// Anything that can go wrong in an endpoint call.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The port refused the send.
    #[error(transparent)]
    Send(#[from] SendError),
    /// The send was accepted but failed.
    #[error("send failed: {0}")]
    Failed(#[from] SendFailure),
    /// A method failed.
    #[error(transparent)]
    Method(#[from] MethodError),
    /// The configuration cannot work.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A delivery was released twice.
    #[error(transparent)]
    Release(#[from] ReleaseError),
    /// The endpoint has no method.
    #[error("an endpoint needs at least one method")]
    NoMethod,
    /// The wait ran out of time.
    #[error("timed out after {0:?}")]
    Timeout(Duration),
    /// The blocking mode's epoll set or timer failed.
    #[error("blocking wait: {0}")]
    Wait(#[from] std::io::Error),
    /// The capture file asked for (by `BCL_PCAP` or the builder) cannot be
    /// written (see [`crate::capture`]).
    #[error("cannot write the capture file {path} named by {from}: {source}")]
    Capture {
        /// Who asked for it.
        from: crate::capture::Source,
        /// The file named.
        path: std::path::PathBuf,
        /// Why not.
        #[source]
        source: std::io::Error,
    },
}

/// How an endpoint waits between progress rounds that moved nothing (see the
/// module documentation).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ProgressMode {
    /// Poll again at once: lowest latency, a CPU busy all the time.
    #[default]
    BusyPoll,
    /// Sleep in epoll on the methods' descriptors and the next deadline.
    Blocking,
}

impl ProgressMode {
    /// `busy-poll` or `blocking`, as in the tools' reports.
    pub fn name(self) -> &'static str {
        match self {
            ProgressMode::BusyPoll => "busy-poll",
            ProgressMode::Blocking => "blocking",
        }
    }
}

/// Counters of the progress engine itself.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EngineStats {
    /// Progress rounds run.
    pub rounds: u64,
    /// Times the endpoint went to sleep (blocking mode only).
    pub waits: u64,
    /// Sleeps ended by a method's descriptor becoming readable.
    pub woken_by_frames: u64,
    /// Sleeps ended by the timer (a protocol deadline or the caller's limit).
    pub woken_by_timer: u64,
    /// Sends that failed on a rail's method (its link went down): its
    /// rails were taken out of service instead of failing the progress.
    pub rail_send_errors: u64,
}

/// Builds an [`Endpoint`].
pub struct EndpointBuilder {
    cfg: PortConfig,
    methods: Vec<Box<dyn Method>>,
    clock: Option<Arc<dyn Clock>>,
    mode: ProgressMode,
    /// The statistics page (see [`crate::stats_page`]).
    pub(crate) stats: crate::stats_page::StatsConfig,
    pcap: Option<std::path::PathBuf>,
    /// A setting from the environment that cannot work, reported by
    /// [`EndpointBuilder::build`].
    env_problem: Option<ConfigError>,
    /// Reach peers through every method that can (multi-rail).
    rails: bool,
}

/// `BCL_CONGESTION` (`off`, `auto` or `on`; also `0`/`1`, `no`/`yes`,
/// `false`/`true`): when congestion control acts for every endpoint of the
/// process (default `off`; `auto`: per peer, once its path loses frames behind a
/// queue; see `bcl_core::CongestionMode`), unless the program configures
/// it itself. `None` when unset.
fn congestion_from_env() -> Option<Result<bcl_core::CongestionMode, ConfigError>> {
    let v = std::env::var("BCL_CONGESTION").ok()?;
    Some(
        bcl_core::CongestionMode::parse(&v).ok_or_else(|| ConfigError {
            field: "BCL_CONGESTION",
            problem: format!("is {v:?} in the environment, must be off, auto or on"),
        }),
    )
}

/// `BCL_LIVENESS`: how every endpoint of the process watches the peers it
/// depends on (see `bcl_core::LivenessConfig`), unless the program
/// configures it itself: `off`, `on` (the defaults), or a check period
/// with an optional number of periods of silence after which a peer is
/// declared dead, `PERIOD[,MISSES]` (`500ms`, `2s,3`). `None` when unset.
fn liveness_from_env(
    current: bcl_core::LivenessConfig,
) -> Option<Result<bcl_core::LivenessConfig, ConfigError>> {
    let v = std::env::var("BCL_LIVENESS").ok()?;
    Some(parse_liveness(&v, current))
}

/// `current` changed as the `BCL_LIVENESS` value `v` says.
fn parse_liveness(
    v: &str,
    mut current: bcl_core::LivenessConfig,
) -> Result<bcl_core::LivenessConfig, ConfigError> {
    let bad = |why: &str| ConfigError {
        field: "BCL_LIVENESS",
        problem: format!("is {v:?} in the environment: {why}"),
    };
    let t = v.trim().to_ascii_lowercase();
    match t.as_str() {
        "off" | "0" | "no" | "false" => current.enabled = false,
        "on" | "1" | "yes" | "true" => current.enabled = true,
        spec => {
            let (period, misses) = match spec.split_once(',') {
                Some((p, m)) => (p.trim(), Some(m.trim())),
                None => (spec, None),
            };
            let (number, unit) = match period.strip_suffix("ms") {
                Some(n) => (n, 1),
                None => match period.strip_suffix('s') {
                    Some(n) => (n, 1000),
                    None => return Err(bad("the period needs a unit, ms or s (\"500ms\")")),
                },
            };
            let Ok(n) = number.trim().parse::<u64>() else {
                return Err(bad("expected off, on or PERIOD[,MISSES] (\"500ms,3\")"));
            };
            current.enabled = true;
            current.period = Duration::from_millis(n.saturating_mul(unit));
            if let Some(m) = misses {
                match m.parse() {
                    Ok(m) => current.misses = m,
                    Err(_) => return Err(bad("MISSES must be a whole number")),
                }
            }
        }
    }
    Ok(current)
}

impl EndpointBuilder {
    /// Adds a method; earlier methods are preferred when several can reach a
    /// peer.
    pub fn method(mut self, m: Box<dyn Method>) -> Self {
        self.methods.push(m);
        self
    }

    /// Uses `clock` instead of the monotonic clock (a simulated fabric's
    /// virtual clock, for instance).
    pub fn clock(mut self, clock: impl Clock + 'static) -> Self {
        self.clock = Some(Arc::new(clock));
        self
    }

    /// Chooses busy-poll (the default) or blocking mode.
    pub fn mode(mut self, mode: ProgressMode) -> Self {
        self.mode = mode;
        self
    }

    /// Records every frame, direct message and transfer the endpoint sends
    /// and receives into the pcap-ng file `path`, instead of the file
    /// `BCL_PCAP` names (see [`crate::capture`]).
    pub fn pcap(mut self, path: impl Into<std::path::PathBuf>) -> Self {
        self.pcap = Some(path.into());
        self
    }

    /// Changes the port configuration.
    pub fn configure(mut self, f: impl FnOnce(&mut PortConfig)) -> Self {
        f(&mut self.cfg);
        self
    }

    /// Reaches each peer through every method of this endpoint that can
    /// (rails: methods on different NICs of one fabric), striping large
    /// messages over them, instead of through the first one only (see
    /// `bcl_core::Port::set_rails`). A method's link that fails to send is
    /// taken out of service for its peers, not reported as an error. Shared
    /// memory is never a rail.
    pub fn rails(mut self, on: bool) -> Self {
        self.rails = on;
        self
    }

    /// Creates the endpoint.
    pub fn build(self) -> Result<Endpoint, Error> {
        if let Some(problem) = self.env_problem {
            return Err(problem.into());
        }
        if self.methods.is_empty() {
            return Err(Error::NoMethod);
        }
        let capture = match crate::capture::requested(self.pcap) {
            Some((path, from)) => Some(
                crate::capture::Capture::open(&path, self.cfg.local, self.cfg.job)
                    .map_err(|source| Error::Capture { from, path, source })?,
            ),
            None => None,
        };
        let mut port = Port::new(self.cfg)?;
        let mut methods: Vec<MethodSlot> = self.methods.into_iter().map(MethodSlot::new).collect();
        let mut cc_capture = None;
        if let Some(c) = &capture {
            methods = methods.into_iter().map(|m| c.wrap(m)).collect();
            // Congestion-state records, when there is congestion control.
            if port.config().congestion.controls() {
                port.set_congestion_log(true);
                cc_capture = Some(c.congestion_tap());
            }
        }
        for (i, m) in methods.iter().enumerate() {
            port.add_method(m.caps())?;
            if self.rails && !m.caps().reliable {
                port.allow_rails(i as u8).map_err(|e| MethodError::Other {
                    method: m.name(),
                    reason: e.to_string(),
                })?;
            }
            // A direct method moves transfer data whole.
            if m.is_direct() {
                port.set_method_bulk(i as u8)
                    .map_err(|e| MethodError::Other {
                        method: m.name(),
                        reason: e.to_string(),
                    })?;
            }
        }
        let fds: Vec<_> = methods.iter().map(|m| m.readiness_fd()).collect();
        let all_signal = fds.iter().all(Option::is_some);
        let fds: Vec<_> = fds.into_iter().flatten().collect();
        // An endpoint on a caller's clock (a simulation in virtual time)
        // cannot be served by a descriptor whose timer runs in real time,
        // and simulations build thousands of endpoints in one process: it
        // gets no epoll set of its own unless it asked to block.
        let waiter = if self.mode == ProgressMode::Blocking || self.clock.is_none() {
            Some(Waiter::new(&fds)?)
        } else {
            crate::wait::never_ready()?;
            None
        };
        let blocking = self.mode == ProgressMode::Blocking && all_signal;
        let busy = self.mode == ProgressMode::BusyPoll;
        let schedule = Schedule::new(&methods, busy, self.clock.is_none());
        let quick = methods.iter().position(MethodSlot::is_direct);
        let mut ep = Endpoint {
            port,
            waiter,
            blocking,
            all_signal,
            poll_armed: false,
            last_round_rx: 0,
            stats: EngineStats::default(),
            has_direct: quick.is_some(),
            quick,
            methods,
            schedule,
            clock: self
                .clock
                .unwrap_or_else(|| Arc::new(MonotonicClock::new())),
            directory: crate::cluster::Directory::with_rails(self.rails),
            send_events: VecDeque::new(),
            channel_events: VecDeque::new(),
            stats_page: Default::default(),
            stats_due: Time::NEVER,
            cc_capture,
            extras_due: Time::NEVER,
            services: Default::default(),
            admin: None,
        };
        ep.open_stats_page(self.stats);
        ep.reschedule_extras();
        Ok(ep)
    }
}

/// A port with its methods and clock (see the module documentation).
pub struct Endpoint {
    port: Port,
    /// An epoll set over the methods' descriptors and a timer: blocking
    /// mode sleeps in it, and [`AsFd`](std::os::fd::AsFd) hands it to
    /// other event loops. `None` for a busy-polling endpoint on a caller's
    /// clock (simulations), whose descriptor is never readable.
    waiter: Option<Waiter>,
    /// Whether the engine sleeps in `waiter` between idle rounds (blocking
    /// mode was asked for and every method has a descriptor).
    blocking: bool,
    /// Whether every method has a descriptor in `waiter`.
    all_signal: bool,
    /// [`Endpoint::service`] armed the descriptor for an outside event
    /// loop: the methods' `finish_wait` is due before the next round.
    poll_armed: bool,
    /// Frames received by the last progress round (a full round that
    /// received none found every receive queue empty).
    last_round_rx: usize,
    stats: EngineStats,
    methods: Vec<MethodSlot>,
    clock: Arc<dyn Clock>,
    /// Peers' descriptors and tables, the selection policy, link records.
    directory: crate::cluster::Directory,
    /// Send events taken from the port while waiting for another one.
    send_events: VecDeque<SendEvent>,
    /// Channel events taken from the port while waiting for another one.
    pub(crate) channel_events: VecDeque<bcl_core::ChannelEvent>,
    /// Whether any method has the direct path.
    has_direct: bool,
    /// The direct method that [`Endpoint::poll_recv_with`]'s quick polls
    /// look at (the first one).
    quick: Option<usize>,
    /// When the engine does what (see [`crate::schedule`]).
    schedule: Schedule,
    /// The statistics page (see [`crate::stats_page`]).
    pub(crate) stats_page: crate::stats_page::PageState,
    /// When a progress round refreshes the page next (`NEVER` without one).
    pub(crate) stats_due: Time,
    /// Where the port's congestion changes are recorded (capture on and
    /// congestion control on; see [`crate::capture`]).
    cc_capture: Option<crate::capture::CongestionTap>,
    /// When a progress round does its periodic work next
    /// ([`Endpoint::round_extras`]): the page's refresh time, or every
    /// round while congestion changes are recorded.
    extras_due: Time,
    /// Remote service requests: handlers, requests pending, answers to
    /// send (see [`crate::service`]).
    pub(crate) services: crate::service::Services,
    /// Operator commands (detach, rejoin) from the job's control feed.
    admin: Option<crate::admin::AdminInbox>,
}

/// A new endpoint's incarnation: the wall clock in milliseconds (wrapping
/// every 49 days), and in one process always beyond the last one handed
/// out, so an endpoint restarted at the same address has a larger number in
/// serial order than its predecessor and peers drop frames of the old one
/// still in flight. A wrap between two starts is tolerated: peers take the
/// new number as a restart once the old one has been silent for
/// [`bcl_core::port::STALE_FRAME_LIFETIME`].
fn next_incarnation() -> u32 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static LAST: AtomicU32 = AtomicU32::new(0);
    let since_unix = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let clock = since_unix.as_millis() as u32;
    let mut last = LAST.load(Ordering::Relaxed);
    loop {
        let next = if (clock.wrapping_sub(last) as i32) > 0 {
            clock
        } else {
            last.wrapping_add(1)
        };
        match LAST.compare_exchange_weak(last, next, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => return next,
            Err(now) => last = now,
        }
    }
}

impl Endpoint {
    /// Starts building an endpoint for process `local` of job `job`.
    pub fn builder(local: ProcessAddr, job: JobKey) -> EndpointBuilder {
        let mut cfg = PortConfig::new(local, job);
        cfg.epoch = next_incarnation();
        let mut env_problem = None;
        match congestion_from_env() {
            Some(Ok(mode)) => cfg.congestion.mode = mode,
            Some(Err(e)) => env_problem = Some(e),
            None => {}
        }
        match liveness_from_env(cfg.liveness) {
            Some(Ok(l)) => cfg.liveness = l,
            Some(Err(e)) => env_problem = env_problem.or(Some(e)),
            None => {}
        }
        EndpointBuilder {
            cfg,
            methods: Vec::new(),
            clock: None,
            mode: ProgressMode::default(),
            stats: crate::stats_page::StatsConfig::from_env(),
            pcap: None,
            rails: false,
            env_problem,
        }
    }

    /// This endpoint's process address.
    pub fn local(&self) -> ProcessAddr {
        self.port.local()
    }

    /// The protocol state, for statistics and inspection.
    pub fn port(&self) -> &Port {
        &self.port
    }

    /// The protocol state, for the crate's own extensions (channels).
    pub(crate) fn port_mut(&mut self) -> &mut Port {
        &mut self.port
    }

    /// The mode in effect: [`ProgressMode::Blocking`] only if it was asked
    /// for and every method has a readiness descriptor.
    pub fn mode(&self) -> ProgressMode {
        if self.blocking {
            ProgressMode::Blocking
        } else {
            ProgressMode::BusyPoll
        }
    }

    /// The progress engine's counters.
    pub fn engine_stats(&self) -> EngineStats {
        self.stats
    }

    /// The current time on the endpoint's clock.
    pub fn now(&self) -> Time {
        self.clock.now()
    }

    /// The descriptors peers can reach this endpoint by, one per method.
    pub fn descriptors(&self) -> Vec<Descriptor> {
        self.methods.iter().map(|m| m.descriptor()).collect()
    }

    /// The endpoint's methods.
    pub fn methods(&self) -> impl Iterator<Item = &dyn Method> {
        self.methods.iter().map(|m| &**m)
    }

    /// The endpoint's method of type `M`, if it has one: for that method's
    /// own counters and settings (for example
    /// [`ShmMethod::stats`](bcl_shm::ShmMethod::stats)). Works for every
    /// method type (`Method` has `Any` as a supertrait).
    pub fn method_mut<M: Method>(&mut self) -> Option<&mut M> {
        self.methods.iter_mut().find_map(|m| m.downcast_mut::<M>())
    }

    /// Tells the endpoint that `addr` can be reached at `descriptor`.
    pub fn add_peer(&mut self, addr: ProcessAddr, descriptor: Descriptor) {
        self.directory.add(addr, descriptor);
    }

    /// Tells the endpoint every method `addr` can be reached by (its
    /// descriptor table); with a [policy](Endpoint::set_policy) the method
    /// is chosen from it on first send.
    pub fn add_peer_table(
        &mut self,
        addr: ProcessAddr,
        table: crate::cluster::descriptor::DescriptorTable,
    ) {
        self.directory.add_table(addr, table);
    }

    /// Chooses methods per peer by `policy` from now on (see
    /// [`crate::cluster`]).
    pub fn set_policy(&mut self, policy: crate::cluster::LocalPolicy) {
        self.directory.set_policy(policy);
    }

    /// The policy set with [`Endpoint::set_policy`].
    pub fn policy(&self) -> Option<&crate::cluster::LocalPolicy> {
        self.directory.policy()
    }

    /// The link to `addr`: the method chosen and why (or why none), once
    /// the link exists.
    pub fn link(&self, addr: ProcessAddr) -> Option<crate::cluster::select::LinkRecord> {
        crate::cluster::link(&self.directory, &self.methods, &self.port, addr)
    }

    /// The rails to `addr`, with the name of each one's method; empty if
    /// the peer is reached one way only.
    pub fn rails(&self, addr: ProcessAddr) -> Vec<(&'static str, bcl_core::RailInfo)> {
        self.port
            .rails(addr)
            .into_iter()
            .filter_map(|r| {
                let m = self.methods.get(usize::from(r.route.method))?;
                Some((m.name(), r))
            })
            .collect()
    }

    /// The earliest instant a timer of the port is due.
    pub fn next_timeout(&self) -> Option<Time> {
        self.port.poll_timeout()
    }

    /// The port and the remote-service state, borrowed apart.
    pub(crate) fn port_and_services(&mut self) -> (&mut Port, &mut crate::service::Services) {
        (&mut self.port, &mut self.services)
    }

    /// One round of progress: receive, run timers, route new peers,
    /// transmit; then handle the service messages received (remote service
    /// requests and their answers, see [`crate::service`]). Returns the
    /// number of frames and service messages moved.
    pub fn progress(&mut self) -> Result<usize, Error> {
        let moved = self.progress_round()?;
        if self.services_due() {
            return Ok(moved + self.run_services()?);
        }
        Ok(moved)
    }

    /// Whether the remote-service layer has work: service messages
    /// delivered, failures reported, or work of its own.
    #[inline]
    fn services_due(&self) -> bool {
        self.port.has_service_deliveries()
            || self.port.has_service_failures()
            || self.services.has_work()
    }

    fn progress_round(&mut self) -> Result<usize, Error> {
        if self.poll_armed {
            self.end_poll_wait();
        }
        let now = self.schedule.round_time(&*self.clock, &self.port);
        if self.admin.as_ref().is_some_and(|a| a.pending()) {
            self.apply_admin_commands(now);
        }
        if now >= self.extras_due {
            self.round_extras(now);
        }
        self.stats.rounds += 1;
        let round = self.stats.rounds;
        let check_peers = schedule::peer_check_due(round);
        let mut moved = 0;
        let mut direct_got = 0;
        let mut housekeeping = false;
        for (i, m) in self.methods.iter_mut().enumerate() {
            let port = &mut self.port;
            let method = i as u8;
            if let Some(d) = m.direct() {
                let got = crate::direct::receive(d, method, port, now, RX_BUDGET);
                direct_got += got;
                moved += got;
                housekeeping |= check_peers || crate::direct::housekeeping_due(d, port);
                continue;
            }
            if self.schedule.skip_rx(i, round) {
                continue;
            }
            let n = m.rx_burst_placing(RX_BUDGET, &mut PortSink { port, now, method })?;
            self.schedule.record_rx(i, n);
            moved += n;
        }
        self.last_round_rx = moved;
        // A direct method brought something and nothing else is waiting:
        // hand it to the caller now, and leave timers, transmission and
        // housekeeping (none of which has work) to the next round. On a
        // ping-pong this takes them off the path from arrival to reply.
        if self
            .schedule
            .end_round_early(direct_got, housekeeping, &self.port, now)
        {
            return Ok(moved);
        }
        self.port.handle_timeout(now);
        if self.port.has_transmit_work() {
            let sent = self.transmit_at(now)?;
            // Frames handed to a direct method are reported written there.
            housekeeping |= sent > 0 && self.has_direct;
            moved += sent;
        }
        // Skipped in rounds where it has nothing to do: most busy-poll
        // rounds, whose length is the delay before an arrival is seen.
        if housekeeping {
            for (i, m) in self.methods.iter_mut().enumerate() {
                if let Some(d) = m.direct() {
                    let port = &mut self.port;
                    moved += crate::direct::housekeeping(d, i as u8, port, now, check_peers);
                }
            }
        }
        Ok(moved)
    }

    /// A progress round's periodic work, once `extras_due` came: writes the
    /// congestion changes of the rounds before to the capture, refreshes
    /// the statistics page when its time came. One comparison per round
    /// decides it, the same whether there is such work or not.
    #[cold]
    fn round_extras(&mut self, now: Time) {
        if let Some(cc) = self.cc_capture.as_mut() {
            cc.drain(&mut self.port);
        }
        if now >= self.stats_due {
            self.refresh_stats_page(now);
        }
        self.reschedule_extras();
    }

    /// Sets when [`Endpoint::round_extras`] runs next.
    fn reschedule_extras(&mut self) {
        self.extras_due = if self.cc_capture.is_some() {
            Time::ZERO
        } else {
            self.stats_due
        };
    }

    /// Puts on the wire what the port has ready now (routing new peers
    /// first), without receiving or running timers: one transmit burst per
    /// method. Calling it right after [`Endpoint::send`] saves the latency of
    /// the receive half of a [`progress`](Endpoint::progress) round (a
    /// system call on socket methods) before the message leaves. Returns the
    /// number of frames sent.
    pub fn transmit(&mut self) -> Result<usize, Error> {
        if !self.port.has_transmit_work() {
            return Ok(0);
        }
        let now = self.clock.now();
        self.transmit_at(now)
    }

    fn transmit_at(&mut self, now: Time) -> Result<usize, Error> {
        while let Some(addr) = self.port.next_unrouted() {
            self.route(addr, now);
        }
        let mut moved = 0;
        for (i, m) in self.methods.iter_mut().enumerate() {
            let method = i as u8;
            if self.port.wants_transmit(method) {
                let port = &mut self.port;
                let sent = m.tx_burst_gather(&mut |buf, gather| {
                    port.poll_transmit_gather(method, now, buf, gather)
                });
                match sent {
                    Ok(n) => moved += n,
                    // A rail whose link went down (the interface is down
                    // or gone): its peers go on over their other rails.
                    Err(_) if port.is_rail_method(method) => {
                        self.stats.rail_send_errors += 1;
                        port.rail_failed(method, now);
                    }
                    Err(e) => return Err(e.into()),
                }
            }
        }
        Ok(moved)
    }

    /// In blocking mode, sleeps until a method has received something, the
    /// port's next deadline, or `until`, whichever comes first; returns at
    /// once if there is something to transmit. In busy-poll mode returns at
    /// once.
    pub fn wait(&mut self, until: Option<Time>) -> Result<(), Error> {
        if !self.blocking {
            return Ok(());
        }
        self.end_poll_wait();
        self.port.drop_stale_timers();
        let Some(timeout) = self.idle_for(until) else {
            return Ok(());
        };
        // Methods arm what makes their peers wake us, and re-check: one with
        // work says so and nobody sleeps.
        let mut sleep = true;
        for m in self.methods.iter_mut() {
            sleep &= m.prepare_wait();
        }
        if sleep {
            self.stats.waits += 1;
            let Some(waiter) = self.waiter.as_mut() else {
                return Ok(());
            };
            let woken = waiter.wait(timeout);
            for m in self.methods.iter_mut() {
                m.finish_wait();
            }
            match woken? {
                Woken::Ready => self.stats.woken_by_frames += 1,
                Woken::Timer => self.stats.woken_by_timer += 1,
                Woken::Spurious => {}
            }
        } else {
            for m in self.methods.iter_mut() {
                m.finish_wait();
            }
        }
        Ok(())
    }

    /// Adds `fd` to what wakes the endpoint (its blocking waits and its
    /// descriptor): for work that comes from outside its methods, such as
    /// the answers of worker threads. Whoever owns `fd` makes it readable
    /// when there is work and drains it in the progress that does the work
    /// (a level-triggered source that stays readable keeps waking the
    /// endpoint). The endpoint keeps no reference: once `fd` is closed it
    /// wakes nothing. A busy-polling endpoint on a caller's clock has no
    /// wait to wake: nothing to add to.
    pub fn add_wake_source(&mut self, fd: std::os::fd::BorrowedFd<'_>) -> Result<(), Error> {
        if let Some(w) = self.waiter.as_mut() {
            w.add_source(fd)?;
        }
        Ok(())
    }

    /// How long the engine may sleep: `None` if there is work now (a method
    /// wants to transmit, or a deadline has passed), else the time to the
    /// next deadline or `until` (`Some(None)`: no deadline at all).
    fn idle_for(&self, until: Option<Time>) -> Option<Option<Duration>> {
        let (now, deadline) = self.idle_until(until)?;
        Some(deadline.map(|d| d - now))
    }

    /// Like [`Endpoint::idle_for`], as instants: `None` if there is work
    /// now, else the present and the next deadline (the port's or `until`,
    /// whichever is first; `None`: no deadline at all).
    fn idle_until(&self, until: Option<Time>) -> Option<(Time, Option<Time>)> {
        if (0..self.methods.len()).any(|i| self.port.wants_transmit(i as u8)) {
            return None;
        }
        let now = self.clock.now();
        let deadline = match (self.port.poll_timeout(), until) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        match deadline {
            Some(d) if d <= now => None,
            _ => Some((now, deadline)),
        }
    }

    /// Progress for an event loop of the application's own (epoll, mio,
    /// tokio's `AsyncFd`) that waits on the endpoint's descriptor
    /// ([`AsFd`](std::os::fd::AsFd)).
    ///
    /// The contract: register the descriptor for readability (level- or
    /// edge-triggered). Call `service` once at the start, each time the
    /// descriptor is readable, and after anything the application did to
    /// the endpoint since the last call (sends, releases, posted buffers)
    /// before the loop waits again: the frames that work makes leave in its
    /// rounds. Take the events it produced ([`Endpoint::poll_delivery`],
    /// [`Endpoint::poll_send_event`], ...) in between. `service` runs
    /// progress rounds until one moves nothing, then arms the descriptor
    /// for whatever comes next: a frame or a peer's doorbell on any method,
    /// or the port's next timer (acknowledgements, retransmissions,
    /// pacing). It returns the frames and messages moved.
    ///
    /// The descriptor then stays quiet until there is work: an idle
    /// endpoint costs no wake-ups. After [`SERVICE_ROUNDS`] rounds that all
    /// moved something, `service` returns anyway (other work of the loop
    /// gets its turn) with the descriptor readable at once. So does every
    /// call when a method has no descriptor of its own (it can only be
    /// polled): the loop then polls through the descriptor.
    pub fn service(&mut self) -> Result<usize, Error> {
        self.service_rounds(false).map(|(moved, _)| moved)
    }

    /// Like [`Endpoint::service`], but returns as soon as a round produced
    /// events for the application (a delivery, a send's completion or
    /// failure, a channel event), without arming the descriptor. The
    /// caller hands the events out, lets whoever awaits them act (a reply
    /// leaves in the service its send makes), and must call a service
    /// again before it waits: the descriptor may not wake it (its timer
    /// is not set for the deadlines that round made). This takes the
    /// confirming receive poll and the timer's arming (a system call each)
    /// off the path from an arrival to the answer it leads to.
    ///
    /// Returns the frames moved and whether the descriptor is armed.
    #[cfg(feature = "tokio")]
    pub(crate) fn service_for_events(&mut self) -> Result<(usize, bool), Error> {
        self.service_rounds(true)
    }

    /// The rounds of a service; with `stop_at_events`, it ends unarmed
    /// after a round that produced events for the application.
    fn service_rounds(&mut self, stop_at_events: bool) -> Result<(usize, bool), Error> {
        let mut moved = 0;
        for _ in 0..SERVICE_ROUNDS {
            self.schedule.full_round_next();
            let events = stop_at_events.then(|| self.event_count());
            let n = self.progress()?;
            moved += n;
            if events.is_some_and(|e| e != self.event_count()) {
                return Ok((moved, false));
            }
            // A round that moved nothing, or (without a direct method) only
            // sent: every receive poll of it (a full round polls every
            // method) came back empty, so no confirming round is needed
            // before arming. A direct method's round also moves bulk data
            // in its housekeeping, which may have more to move: there only
            // a round that moved nothing says so.
            let only_sent = !self.has_direct && self.last_round_rx == 0;
            if (n == 0 || only_sent) && self.arm_for_poll()? {
                return Ok((moved, true));
            }
        }
        if let Some(w) = self.waiter.as_mut() {
            w.arm(Some(Duration::ZERO))?;
        }
        Ok((moved, true))
    }

    /// Events the port has produced for the application so far
    /// (deliveries, send completions and failures, channel events): a
    /// change says a round made some.
    fn event_count(&self) -> u64 {
        let s = self.port.stats();
        s.messages_completed
            + s.messages_failed
            + s.messages_delivered
            + s.channel_events
            + self.services.events()
    }

    /// After a round that moved nothing: arms the descriptor for what comes
    /// next, or says there is work now (`false`).
    fn arm_for_poll(&mut self) -> Result<bool, Error> {
        self.port.drop_stale_timers();
        let Some((now, deadline)) = self.idle_until(None) else {
            return Ok(false);
        };
        // As before a sleep: methods arm what makes their peers signal, and
        // one that already has work says so.
        let mut quiet = true;
        for m in self.methods.iter_mut() {
            quiet &= m.prepare_wait();
        }
        if !quiet {
            for m in self.methods.iter_mut() {
                m.finish_wait();
            }
            return Ok(false);
        }
        let Some(waiter) = self.waiter.as_mut() else {
            // A simulation's endpoint: its caller drives its clock.
            return Ok(true);
        };
        self.poll_armed = true;
        match deadline {
            // Without a descriptor for every method, the loop polls.
            _ if !self.all_signal => waiter.arm(Some(Duration::ZERO))?,
            Some(d) => waiter.arm_at(d, now)?,
            None => waiter.arm(None)?,
        }
        Ok(true)
    }

    /// Ends the wait that [`Endpoint::service`] armed, before any other
    /// round or sleep.
    fn end_poll_wait(&mut self) {
        if self.poll_armed {
            self.poll_armed = false;
            for m in self.methods.iter_mut() {
                m.finish_wait();
            }
        }
    }

    /// One round of progress; if it moved nothing, [`Endpoint::wait`]s (up
    /// to `until`). The building block of application loops that run in
    /// both modes.
    pub fn progress_or_wait(&mut self, until: Option<Time>) -> Result<usize, Error> {
        if !self.blocking {
            // Busy polling: `wait` would return at once.
            return self.progress();
        }
        let before = self.event_count();
        let moved = self.progress()?;
        // A completion or failure can come from a timer alone (no frame
        // moved): the caller must see it before anything sleeps.
        if moved == 0 && self.event_count() == before {
            self.wait(until)?;
        }
        Ok(moved)
    }

    /// Opens the route to `addr` (by policy, see [`crate::cluster`]), or
    /// fails the peer's sends.
    fn route(&mut self, addr: ProcessAddr, now: Time) {
        crate::cluster::route(
            &mut self.directory,
            &mut self.methods,
            &mut self.port,
            addr,
            now,
        );
    }

    /// Accepts `data` for delivery to `dst` (see [`Port::send`]).
    pub fn send(&mut self, dst: ProcessAddr, data: &[u8]) -> Result<SendHandle, Error> {
        if self.has_direct {
            let class = MessageClass::Application;
            if crate::direct::try_send(&mut self.methods, &self.port, dst, class, data) {
                return Ok(self.port.record_direct_send()?);
            }
        }
        let now = self.clock.now();
        Ok(self.port.send(now, dst, data)?)
    }

    /// Sends a service message as a direct message if the peer is reached
    /// by a direct method with nothing queued; false: send it otherwise.
    #[inline]
    pub(crate) fn try_send_service_direct(&mut self, dst: ProcessAddr, data: &[u8]) -> bool {
        let class = MessageClass::Service;
        let sent = self.has_direct
            && crate::direct::try_send(&mut self.methods, &self.port, dst, class, data);
        if sent {
            self.port.record_direct_service_send();
        }
        sent
    }

    /// [`Endpoint::try_send_service_direct`] for the answer an inline
    /// handler left in the remote-service layer's answer slot.
    #[inline]
    pub(crate) fn try_send_answer_direct(&mut self, dst: ProcessAddr) -> bool {
        let class = MessageClass::Service;
        let answer = &self.services.answer;
        let sent = self.has_direct
            && crate::direct::try_send(&mut self.methods, &self.port, dst, class, answer);
        if sent {
            self.port.record_direct_service_send();
        }
        sent
    }

    /// Sends a service message (see [`crate::service`]) as [`Endpoint::send`]
    /// sends a message; no send event reports it.
    pub(crate) fn send_service(&mut self, dst: ProcessAddr, data: &[u8]) -> Result<(), Error> {
        if self.try_send_service_direct(dst, data) {
            return Ok(());
        }
        let now = self.clock.now();
        self.port.send_service(now, dst, data)?;
        Ok(())
    }

    /// Next send-completion event.
    pub fn poll_send_event(&mut self) -> Option<SendEvent> {
        self.send_events
            .pop_front()
            .or_else(|| self.port.poll_send_event())
    }

    /// Next change in a peer's life: gone (reported by a method, or
    /// declared dead by liveness; retransmission timeouts that give up fail
    /// the sends instead), back, or restarted (see
    /// [`Port::poll_peer_event`]).
    ///
    /// [`Port::poll_peer_event`]: bcl_core::Port::poll_peer_event
    pub fn poll_peer_event(&mut self) -> Option<PeerEvent> {
        self.port.poll_peer_event()
    }

    /// Cuts node `node` off this endpoint, as an operator's partition (see
    /// [`Port::detach_node`]): its processes are reported
    /// [`PeerEvent::Down`] at once, everything with them fails, and nothing
    /// is exchanged with them until [`Endpoint::rejoin_node`]. The
    /// endpoint's own node isolates it from every other node.
    ///
    /// [`Port::detach_node`]: bcl_core::Port::detach_node
    pub fn detach_node(&mut self, node: NodeId) {
        let now = self.clock.now();
        self.port.detach_node(now, node);
    }

    /// Brings node `node` back: its known processes are pinged and each
    /// that answers is reported [`PeerEvent::Up`].
    pub fn rejoin_node(&mut self, node: NodeId) {
        let now = self.clock.now();
        self.port.rejoin_node(now, node);
    }

    /// The nodes detached from this endpoint (its own if it is isolated).
    pub fn detached_nodes(&self) -> Vec<NodeId> {
        self.port.detached_nodes()
    }

    /// Shares liveness with the job's other processes on this node
    /// through the node's liveness board in `/dev/shm` (see
    /// [`bcl_core::port::node`]): peers are watched per node, one heartbeat
    /// per node pair instead of one per process pair, and this process's
    /// answers to pings carry its node's live processes. Every process of
    /// a job joined with [`crate::cluster::join::join`] does it (unless
    /// `BCL_NODE_LIVENESS=off`); it is for processes whose ports are
    /// numbered per node, as a job's are.
    pub fn share_liveness_on_node(&mut self) -> Result<(), String> {
        let now = self.clock.now();
        let cfg = self.port.config();
        let shared = crate::node_liveness::BoardLiveness::open(
            std::path::Path::new("/dev/shm"),
            cfg.job,
            cfg.local,
            now,
        )
        .map_err(|e| e.to_string())?;
        self.port.set_node_liveness(Box::new(shared));
        Ok(())
    }

    /// Takes operator commands from `inbox` from now on (applied at the
    /// start of each progress round; a blocked endpoint wakes for them).
    pub fn set_admin_inbox(&mut self, inbox: crate::admin::AdminInbox) -> Result<(), Error> {
        self.add_wake_source(inbox.wake_fd())?;
        self.admin = Some(inbox);
        Ok(())
    }

    fn apply_admin_commands(&mut self, now: Time) {
        let Some(inbox) = self.admin.as_ref() else {
            return;
        };
        for command in inbox.take() {
            match command {
                crate::admin::AdminCommand::Detach(node) => self.port.detach_node(now, node),
                crate::admin::AdminCommand::Rejoin(node) => self.port.rejoin_node(now, node),
            }
        }
    }

    /// Marks `addr` critical (`true`): watched for liveness even while
    /// nothing is outstanding with it, and reported by
    /// [`Endpoint::poll_peer_event`] once silent for the liveness bound (see
    /// [`Port::watch_peer`]). `false` watches it only while something is
    /// outstanding.
    ///
    /// [`Port::watch_peer`]: bcl_core::Port::watch_peer
    pub fn watch_peer(&mut self, addr: ProcessAddr, critical: bool) -> Result<(), Error> {
        let now = self.clock.now();
        self.port.watch_peer(now, addr, critical)?;
        Ok(())
    }

    /// Next delivered message.
    pub fn poll_delivery(&mut self) -> Option<Delivery> {
        self.port.poll_delivery()
    }

    /// The bytes of a delivered message, until it is released.
    pub fn message(&self, d: &Delivery) -> Option<&[u8]> {
        self.port.message(d)
    }

    /// Busy-polling receive with the shortest path: hands the next
    /// system-channel message to `f` and releases it. In order: a message
    /// already delivered to the port; else a direct message at the head of
    /// the first direct method's receive queue, read in place (no copy, no
    /// progress round); else, every
    /// `QUICK_POLLS`-th call ([`crate::schedule`]; and every
    /// call when the endpoint has no direct method), a full
    /// [`progress`](Endpoint::progress) round. `None`: nothing this call;
    /// call again (other work waits at most that many calls).
    pub fn poll_recv_with<R>(
        &mut self,
        f: impl FnOnce(ProcessAddr, &[u8]) -> R,
    ) -> Result<Option<R>, Error> {
        if let Some(d) = self.port.poll_delivery() {
            let r = f(d.from, self.port.message(&d).unwrap_or_default());
            self.port.release(d.slot)?;
            return Ok(Some(r));
        }
        if let Some(q) = self.quick {
            if let Some(m) = self.methods[q].direct() {
                match m.take_direct() {
                    DirectHead::Message(from, bytes) => {
                        self.port.count_direct_delivery();
                        return Ok(Some(f(from, bytes)));
                    }
                    DirectHead::Service(from, bytes) => {
                        // A remote service request or answer, handled where
                        // it lies; its answer leaves now.
                        self.port.count_direct_delivery();
                        if self.services.on_message(from, bytes) {
                            self.after_service_in_place()?;
                        }
                        return Ok(None);
                    }
                    DirectHead::Empty if self.schedule.quick_poll() => return Ok(None),
                    DirectHead::Empty | DirectHead::Other => {}
                }
            }
        }
        self.progress()?;
        let limit = self.quick_poll_limit();
        self.schedule.full_round_done(limit);
        match self.port.poll_delivery() {
            Some(d) => {
                let r = f(d.from, self.port.message(&d).unwrap_or_default());
                self.port.release(d.slot)?;
                Ok(Some(r))
            }
            None => Ok(None),
        }
    }

    /// Busy-polling progress for remote service requests (see
    /// [`crate::service`]) with the shortest path, as
    /// [`Endpoint::poll_recv_with`] is for messages: a service message at
    /// the head of the first direct method's receive queue is handled
    /// where it lies (no copy, no progress round) and its answer sent; else,
    /// every few calls, a full [`progress`](Endpoint::progress) round. The
    /// application's messages are left for its receive calls. Returns
    /// whether it did anything for this layer (a message handled, an
    /// answer sent, a completion made).
    pub fn poll_rsr(&mut self) -> Result<bool, Error> {
        if let Some(q) = self.quick {
            if !self.port.has_service_deliveries() {
                if let Some(m) = self.methods[q].direct() {
                    match m.take_direct_service() {
                        DirectHead::Service(from, bytes) => {
                            self.port.count_direct_delivery();
                            if self.services.on_message(from, bytes) {
                                self.after_service_in_place()?;
                            }
                            return Ok(true);
                        }
                        DirectHead::Empty if self.schedule.quick_poll() => return Ok(false),
                        _ => {}
                    }
                }
            }
        }
        let before = self.services.activity();
        self.progress()?;
        let limit = self.quick_poll_limit();
        self.schedule.full_round_done(limit);
        Ok(self.services.activity() != before)
    }

    /// After a service message handled in place made an answer or a
    /// completion: the answer leaves now; other work of the layer waits
    /// for the next round.
    #[inline]
    fn after_service_in_place(&mut self) -> Result<(), Error> {
        if self.services.has_clearances() {
            self.run_services()?;
        } else {
            self.flush_service_outbox()?;
        }
        Ok(())
    }

    /// Quick polls allowed after a full round (see
    /// [`schedule::quick_poll_limit`]).
    fn quick_poll_limit(&mut self) -> u32 {
        let only = self.methods.len() == 1;
        let Some(m) = self.quick.and_then(|q| self.methods[q].direct()) else {
            return 0;
        };
        schedule::quick_poll_limit(m.has_queued_work(), only, &self.port)
    }

    /// Gives a delivered message's ring space back.
    pub fn release(&mut self, d: Delivery) -> Result<(), Error> {
        Ok(self.port.release(d.slot)?)
    }

    /// Makes progress until `handle` completes, fails, or `timeout` passes.
    /// Other send events are kept for [`Endpoint::poll_send_event`].
    pub fn wait_send(&mut self, handle: SendHandle, timeout: Duration) -> Result<(), Error> {
        let deadline = self.clock.now() + timeout;
        loop {
            while let Some(ev) = self.port.poll_send_event() {
                if ev.handle() == handle {
                    return match ev {
                        SendEvent::Complete(_) => Ok(()),
                        SendEvent::Failed(_, f) => Err(Error::Failed(f)),
                    };
                }
                self.send_events.push_back(ev);
            }
            if self.clock.now() >= deadline {
                return Err(Error::Timeout(timeout));
            }
            self.progress_or_wait(Some(deadline))?;
        }
    }

    /// Sends `data` to `dst` and waits until it is acknowledged.
    pub fn send_blocking(
        &mut self,
        dst: ProcessAddr,
        data: &[u8],
        timeout: Duration,
    ) -> Result<(), Error> {
        let deadline = self.clock.now() + timeout;
        let handle = self.send_until(dst, data, deadline)?;
        let left = deadline.saturating_since(self.clock.now());
        self.wait_send(handle, left)
    }

    /// Accepts `data` for `dst` like [`Endpoint::send`], making progress
    /// while the port has as many sends outstanding as it takes
    /// ([`SendError::WouldBlock`]), until `deadline`. Completion events of
    /// earlier sends that arrive meanwhile are kept for
    /// [`Endpoint::poll_send_event`] (and no longer hold the port's room).
    pub fn send_until(
        &mut self,
        dst: ProcessAddr,
        data: &[u8],
        deadline: Time,
    ) -> Result<SendHandle, Error> {
        // The clock is read only when the port is full: a send that goes
        // through at once costs no clock reading.
        let mut start = None;
        loop {
            match self.send(dst, data) {
                Err(Error::Send(SendError::WouldBlock(_))) => {
                    let now = self.clock.now();
                    let since = *start.get_or_insert(now);
                    if now >= deadline {
                        return Err(Error::Timeout(now.saturating_since(since)));
                    }
                    while let Some(ev) = self.port.poll_send_event() {
                        self.send_events.push_back(ev);
                    }
                    self.progress_or_wait(Some(deadline))?;
                }
                other => return other,
            }
        }
    }

    /// Makes progress until a message is delivered or `timeout` passes.
    pub fn recv_blocking(&mut self, timeout: Duration) -> Result<Delivery, Error> {
        let deadline = self.clock.now() + timeout;
        self.recv_until(deadline)?.ok_or(Error::Timeout(timeout))
    }

    /// Makes progress (sleeping between idle rounds in blocking mode) until
    /// `ready` returns something, or until `deadline` (`Ok(None)`).
    /// `ready` sees the endpoint before every round; it is how the waiting
    /// calls below are written, and how an application waits for a
    /// condition of its own.
    pub fn progress_until<R>(
        &mut self,
        deadline: Time,
        mut ready: impl FnMut(&mut Endpoint) -> Result<Option<R>, Error>,
    ) -> Result<Option<R>, Error> {
        // A busy-polling loop reads the clock every CLOCK_CHECK_ROUNDS
        // rounds only (a reading is a large part of an idle round); a
        // blocking one every round (a round sleeps, and after the deadline
        // it returns at once).
        let every = if self.blocking { 1 } else { CLOCK_CHECK_ROUNDS };
        let mut rounds = 0u32;
        loop {
            if let Some(r) = ready(self)? {
                return Ok(Some(r));
            }
            if rounds.is_multiple_of(every) && self.clock.now() >= deadline {
                return Ok(None);
            }
            rounds = rounds.wrapping_add(1);
            self.progress_or_wait(Some(deadline))?;
        }
    }

    /// Makes progress until a message is delivered (`Some`) or `deadline`
    /// passes (`None`).
    pub fn recv_until(&mut self, deadline: Time) -> Result<Option<Delivery>, Error> {
        self.progress_until(deadline, |ep| Ok(ep.port.poll_delivery()))
    }

    /// Waits until `deadline` for the next system-channel message, shows it
    /// to `f` (sender, bytes) and releases it; `Ok(None)` if none came in
    /// time. A busy-polling endpoint takes the shortest path
    /// ([`Endpoint::poll_recv_with`]); a blocking one sleeps between idle
    /// rounds.
    pub fn recv_with_until<R>(
        &mut self,
        deadline: Time,
        f: impl FnOnce(ProcessAddr, &[u8]) -> R,
    ) -> Result<Option<R>, Error> {
        if self.blocking {
            return match self.recv_until(deadline)? {
                Some(d) => {
                    let r = f(d.from, self.port.message(&d).unwrap_or_default());
                    self.port.release(d.slot)?;
                    Ok(Some(r))
                }
                None => Ok(None),
            };
        }
        let mut f = Some(f);
        let mut polls = 0u32;
        loop {
            let mut out = None;
            let got = self.poll_recv_with(|from, bytes| {
                out = f.take().map(|f| f(from, bytes));
            })?;
            if got.is_some() {
                return Ok(out);
            }
            polls = polls.wrapping_add(1);
            if polls.is_multiple_of(QUICK_CLOCK_CHECK_POLLS) && self.clock.now() >= deadline {
                return Ok(None);
            }
        }
    }

    /// Makes progress until every accepted send has completed or failed,
    /// or `deadline` passes; then, up to `deadline`, keeps answering while
    /// the port has timers armed (a peer's last retransmissions want their
    /// acknowledgements). Returns whether nothing was left outstanding.
    /// Send events stay queued for [`Endpoint::poll_send_event`].
    pub fn flush_until(&mut self, deadline: Time) -> Result<bool, Error> {
        let done = self
            .progress_until(deadline, |ep| {
                Ok((ep.port.outstanding_sends() == 0).then_some(()))
            })?
            .is_some();
        self.progress_until(deadline, |ep| Ok(ep.next_timeout().is_none().then_some(())))?;
        Ok(done)
    }

    /// Shuts the methods down (after writing the congestion changes not
    /// yet in the capture).
    pub fn shutdown(&mut self) {
        if let Some(cc) = self.cc_capture.as_mut() {
            cc.drain(&mut self.port);
        }
        for m in &mut self.methods {
            m.shutdown();
        }
    }
}

/// The endpoint's descriptor for an application's event loop: readable
/// when the endpoint needs [`Endpoint::service`] (see there for the
/// contract). An epoll set over every method's descriptor and a timer for
/// the port's deadlines; it exists in both progress modes. A busy-polling
/// endpoint on a caller's clock (a simulation in virtual time) has no set
/// of its own: its descriptor is never readable, and its caller drives it
/// with progress rounds.
impl std::os::fd::AsFd for Endpoint {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        match &self.waiter {
            Some(w) => w.fd(),
            None => crate::wait::never_ready()
                .unwrap_or_else(|_| unreachable!("created when the endpoint was built")),
        }
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// The port as the receiver of one method's frames in a progress round.
struct PortSink<'a> {
    port: &'a mut Port,
    now: Time,
    method: u8,
}

impl bcl_core::RxSink for PortSink<'_> {
    fn frame(&mut self, link: LinkId, bytes: &[u8]) {
        let route = Route {
            method: self.method,
            link,
        };
        self.port.handle_frame(self.now, route, bytes);
    }

    fn placement(&mut self, link: LinkId, header: &[u8]) -> Option<&mut [u8]> {
        let route = Route {
            method: self.method,
            link,
        };
        self.port.placement(route, header)
    }

    fn placed(&mut self, link: LinkId, header: &[u8]) {
        let route = Route {
            method: self.method,
            link,
        };
        self.port.handle_placed_frame(self.now, route, header);
    }
}

#[cfg(test)]
mod tests {
    use super::parse_liveness;
    use bcl_core::LivenessConfig;
    use std::time::Duration;

    #[test]
    fn bcl_liveness_values() {
        let d = LivenessConfig::default();
        assert!(!parse_liveness("off", d).unwrap().enabled);
        assert_eq!(parse_liveness(" ON ", d).unwrap(), d);
        let l = parse_liveness("500ms", d).unwrap();
        assert_eq!((l.period, l.misses), (Duration::from_millis(500), d.misses));
        let l = parse_liveness("2s,3", d).unwrap();
        assert_eq!((l.period, l.misses), (Duration::from_secs(2), 3));
        for bad in ["500", "fast", "1s,x", "ms"] {
            let e = parse_liveness(bad, d).unwrap_err();
            assert_eq!(e.field, "BCL_LIVENESS", "{bad}");
            assert!(e.problem.contains(bad), "{e}");
        }
    }
}
