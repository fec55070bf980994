//! [`Coll`]: a process's communicators and their collective operations
//! over one endpoint.

use super::alg::{Algorithm, Collective, Shape};
use super::board::{self, BoardAdvance, BoardRun, CommBoard};
use super::comm::Comm;
use super::error::CollError;
use super::hierarchy::Hierarchy;
use super::messenger::{Messenger, RecvId, SendId};
use super::op::{Datatype, Element, Op};
use super::request::{Advance, Running};
use crate::endpoint::Endpoint;
use bcl_core::ProcessAddr;
use rustc_hash::FxHashMap as HashMap;
use std::sync::Arc;
use std::time::Duration;

/// Progress rounds between two looks at the clock in a waiting call.
const CLOCK_CHECK_ROUNDS: u32 = 64;

/// The algorithm name reported for blocking calls through the node
/// hierarchy (boards inside nodes, the leaders between them).
pub const HIERARCHICAL: &str = "two_level_board";

/// Looks at a board between two progress rounds of a blocking board call.
const BOARD_LOOKS_PER_ROUND: usize = 16;

/// An operation in progress: a schedule of messages, or a call on its
/// communicator's board.
enum InFlight {
    Messages(Running),
    Board(BoardRun),
}

/// A blocking call on the caller's bytes, in place: which collective, its
/// root (0 if unrooted) and its reduction.
#[derive(Clone, Copy)]
struct InPlace<'a> {
    collective: Collective,
    root: usize,
    reduction: Option<&'a (Op, Datatype)>,
}

impl<'a> InPlace<'a> {
    fn new(collective: Collective, root: usize, reduction: Option<&'a (Op, Datatype)>) -> Self {
        InPlace {
            collective,
            root,
            reduction,
        }
    }
}

/// A collective operation started and not yet taken back with
/// [`Coll::test`] or [`Coll::wait`].
#[derive(Debug, PartialEq, Eq, Hash)]
#[must_use = "a request must be waited on or tested to completion"]
pub struct Request(usize);

/// The arguments of one collective call, in bytes (see the buffer layouts
/// in [`super::alg`]).
#[derive(Clone, Debug)]
pub struct Call {
    /// Which collective.
    pub collective: Collective,
    /// The root of rooted collectives (0 otherwise).
    pub root: usize,
    /// The caller's input.
    pub input: Vec<u8>,
    /// Message length (bcast: also at ranks other than the root).
    pub len: usize,
    /// The reduction, for collectives that reduce.
    pub reduction: Option<(Op, Datatype)>,
    /// Block lengths per rank (gather, scatter, allgather, reduce-scatter).
    pub counts: Vec<usize>,
    /// Alltoall: bytes sent to each rank.
    pub send_counts: Vec<usize>,
    /// Alltoall: bytes received from each rank.
    pub recv_counts: Vec<usize>,
    /// Use this algorithm instead of the selector's choice.
    pub algorithm: Option<Algorithm>,
    /// Alltoall: every rank passes the same counts (MPI_Alltoall rather
    /// than MPI_Alltoallv), which lets the selector consider algorithms
    /// that need equal blocks.
    pub uniform: bool,
}

impl Call {
    /// The same call with root `root`.
    pub fn root(mut self, root: usize) -> Call {
        self.root = root;
        self
    }

    /// The same call reducing elements of `dt` with `op`.
    pub fn reducing(mut self, op: Op, dt: Datatype) -> Call {
        self.reduction = Some((op, dt));
        self
    }

    /// The same call with block lengths `counts` (gather, scatter,
    /// allgather, reduce-scatter).
    pub fn counts(mut self, counts: Vec<usize>) -> Call {
        self.counts = counts;
        self
    }

    /// A call of `collective` with `input` and everything else empty.
    pub fn new(collective: Collective, input: Vec<u8>) -> Call {
        Call {
            collective,
            root: 0,
            len: input.len(),
            input,
            reduction: None,
            counts: Vec::new(),
            send_counts: Vec::new(),
            recv_counts: Vec::new(),
            algorithm: None,
            uniform: false,
        }
    }
}

/// A process's communicators and collectives over one endpoint: the world
/// communicator of its job, the communicators made from it, and the
/// operations in progress.
///
/// An operation completes locally: its last messages may still be
/// unacknowledged, and a peer may still be retransmitting to this process.
/// Call [`Coll::flush`] before dropping a `Coll` whose peers go on (the
/// end of a job: a final barrier, then `flush`).
pub struct Coll {
    msg: Messenger,
    world: Comm,
    /// Next communicator id this process would propose.
    next_id: u32,
    /// Collective sequence number per communicator id.
    seqs: HashMap<u32, u32>,
    /// Shrinks done per communicator id (see [`Coll::shrink`]).
    shrinks: HashMap<u32, u32>,
    running: HashMap<usize, InFlight>,
    /// The board of each communicator that used one (see [`board`]).
    boards: HashMap<u32, CommBoard>,
    board_enabled: bool,
    /// Whether the endpoint has shared memory (boards are possible).
    has_shm: bool,
    /// The node hierarchy of each communicator asked about (see
    /// [`Hierarchy`]).
    hierarchies: HashMap<u32, Option<Arc<Hierarchy>>>,
    finished: HashMap<usize, Result<Vec<u8>, CollError>>,
    /// Operations `advance_all` found complete (kept to reuse its memory).
    done: Vec<(usize, Result<Vec<u8>, CollError>)>,
    next_request: usize,
    deterministic: bool,
    timeout: Option<Duration>,
    yield_when_idle: bool,
    selector: super::select::Selector,
    schedules: super::schedule::Cache,
    /// Failed members, seen here or reported (see [`super::notice`]).
    failures: super::notice::Failures,
    /// The communicator a hierarchical call runs for: a failure of any of
    /// its members fails the call's steps on the smaller communicators.
    scope: Option<Comm>,
}

/// Why `comm` (or `scope`, the communicator of the hierarchical call in
/// progress) cannot complete a collective, if it cannot.
fn failure_in(
    msg: &Messenger,
    failures: &super::notice::Failures,
    scope: Option<&Comm>,
    comm: &Comm,
) -> Option<CollError> {
    failures
        .of(msg, comm)
        .or_else(|| scope.and_then(|s| failures.of(msg, s)))
}

impl Coll {
    /// Collectives over `ep` in the job whose members are `members` (index
    /// = rank; every member passes the same list). The endpoint must
    /// already know how to reach the members.
    pub fn new(ep: Endpoint, members: Vec<ProcessAddr>) -> Result<Coll, CollError> {
        let rank = members
            .iter()
            .position(|&a| a == ep.local())
            .ok_or_else(|| {
                CollError::Invalid(format!(
                    "this endpoint ({}) is not among the {} members",
                    ep.local(),
                    members.len()
                ))
            })?;
        let world = Comm::new(0, rank, Arc::from(members));
        let mut ep = ep;
        let has_shm = ep.method_mut::<bcl_shm::ShmMethod>().is_some();
        Ok(Coll {
            msg: Messenger::new(ep),
            has_shm,
            hierarchies: HashMap::default(),
            world,
            next_id: 1,
            seqs: HashMap::default(),
            shrinks: HashMap::default(),
            running: HashMap::default(),
            boards: HashMap::default(),
            board_enabled: board::enabled_from_env(),
            finished: HashMap::default(),
            done: Vec::new(),
            next_request: 0,
            deterministic: super::select::deterministic_from_env(),
            timeout: None,
            yield_when_idle: false,
            selector: super::select::Selector::from_env()?,
            schedules: super::schedule::Cache::default(),
            failures: Default::default(),
            scope: None,
        })
    }

    /// Collectives for a process that joined a job with
    /// [`crate::cluster::join`].
    pub fn from_joined(j: crate::cluster::join::Joined) -> Result<Coll, CollError> {
        Coll::new(j.endpoint, j.addrs)
    }

    /// The job's communicator.
    pub fn world(&self) -> &Comm {
        &self.world
    }

    /// The tagged messaging underneath.
    pub fn messenger(&mut self) -> &mut Messenger {
        &mut self.msg
    }

    /// Whether float reductions are bitwise reproducible (default on;
    /// `BCL_COLL_DETERMINISTIC=0` or this call turns it off, which lets the
    /// selector use algorithms that combine in another order, such as the
    /// ring allreduce).
    pub fn set_deterministic(&mut self, on: bool) {
        self.deterministic = on;
    }

    /// Whether reductions are deterministic.
    pub fn deterministic(&self) -> bool {
        self.deterministic
    }

    /// Makes blocking calls fail with [`CollError::Timeout`] after
    /// `timeout` (default: wait as long as it takes; a peer that dies
    /// fails the call anyway once its sends time out).
    pub fn set_timeout(&mut self, timeout: Option<Duration>) {
        self.timeout = timeout;
    }

    /// With a busy-polling endpoint, gives the CPU away
    /// (`sched_yield`) after every waiting round that moved nothing: for
    /// more ranks than cores, where pure spinning keeps the rank a message
    /// is waiting for off the CPU, and blocking in epoll costs a wake-up
    /// per message (Open MPI's `mpi_yield_when_idle`).
    pub fn set_yield_when_idle(&mut self, on: bool) {
        self.yield_when_idle = on;
    }

    /// The selector (cost model and overrides) choosing algorithms.
    pub fn selector(&self) -> &super::select::Selector {
        &self.selector
    }

    /// Replaces the selector.
    pub fn set_selector(&mut self, s: super::select::Selector) {
        self.selector = s;
    }

    /// The algorithm a call with this shape would use (`uniform`: see
    /// [`Call::uniform`]).
    pub fn choose(&self, shape: &Shape, uniform: bool) -> Result<Algorithm, CollError> {
        self.selector.choose(shape, self.deterministic, uniform)
    }

    /// One round of progress: the endpoint, then every operation in
    /// progress. Returns what moved.
    pub fn progress(&mut self) -> Result<usize, CollError> {
        let moved = self.msg.progress()?;
        self.advance_all();
        Ok(moved)
    }

    /// Advances every operation in progress; returns whether a board call
    /// moved (message algorithms move with the messenger's progress).
    fn advance_all(&mut self) -> bool {
        let failed = self.failures.changed(&mut self.msg);
        if self.running.is_empty() {
            return false;
        }
        let mut done = std::mem::take(&mut self.done);
        if failed {
            self.fail_with_dead_members();
        }
        let mut fallbacks = Vec::new();
        let mut moved = false;
        for (&id, run) in self.running.iter_mut() {
            let r = match run {
                InFlight::Messages(run) => run.advance(&mut self.msg).map(|a| match a {
                    Advance::Pending => None,
                    Advance::Done(out) => Some(out),
                }),
                InFlight::Board(run) => {
                    let cb = self.boards.entry(run.comm_id()).or_default();
                    let head = cb.is_head(id);
                    match run.advance(head, cb, &mut self.msg) {
                        Ok(BoardAdvance::Pending(m)) => {
                            moved |= m;
                            Ok(None)
                        }
                        Ok(BoardAdvance::Done(out)) => {
                            moved = true;
                            cb.remove(id);
                            Ok(Some(out))
                        }
                        Ok(BoardAdvance::Fallback(call)) => {
                            cb.remove(id);
                            fallbacks.push((id, run.comm().clone(), call, run.tag()));
                            Ok(None)
                        }
                        Err(e) => {
                            cb.remove(id);
                            Err(e)
                        }
                    }
                }
            };
            match r {
                Ok(None) => {}
                Ok(Some(out)) => done.push((id, Ok(out))),
                Err(e) => {
                    let comm = match run {
                        InFlight::Messages(run) => run.comm(),
                        InFlight::Board(run) => run.comm(),
                    };
                    done.push((id, Err(e.in_comm(comm))));
                }
            }
        }
        for (id, comm, call, tag) in fallbacks {
            moved = true;
            match self.over_messages(&comm, call, tag) {
                Ok(run) => {
                    self.running.insert(id, InFlight::Messages(run));
                }
                Err(e) => done.push((id, Err(e))),
            }
        }
        for (id, r) in done.drain(..) {
            self.finish(id, r);
        }
        self.done = done;
        moved
    }

    /// Ends operation `id` with `r`; a failure this process saw itself is
    /// told to the communicator's other members (see [`super::notice`]).
    fn finish(&mut self, id: usize, r: Result<Vec<u8>, CollError>) {
        if let Some(run) = self.running.remove(&id) {
            if let Err(e) = &r {
                let comm = match &run {
                    InFlight::Messages(run) => run.comm(),
                    InFlight::Board(run) => run.comm(),
                };
                self.failures.tell(&mut self.msg, comm, e);
            }
        }
        self.finished.insert(id, r);
    }

    /// Ends, with the failure, every operation in progress on a
    /// communicator that cannot complete one any more (see
    /// [`super::notice`]).
    fn fail_with_dead_members(&mut self) {
        let mut doomed = Vec::new();
        for (&id, run) in &self.running {
            let comm = match run {
                InFlight::Messages(run) => run.comm(),
                InFlight::Board(run) => run.comm(),
            };
            if let Some(e) = failure_in(&self.msg, &self.failures, self.scope.as_ref(), comm) {
                if matches!(run, InFlight::Board(_)) {
                    if let Some(cb) = self.boards.get_mut(&comm.id()) {
                        cb.remove(id);
                    }
                }
                doomed.push((id, Err(e.in_comm(comm))));
            }
        }
        // Those are not advanced any more.
        for (id, r) in doomed {
            self.finish(id, r);
        }
    }

    /// Whether the endpoint sleeps in epoll when idle (blocking mode).
    fn sleeps(&self) -> bool {
        self.msg.endpoint().mode() == crate::endpoint::ProgressMode::Blocking
    }

    /// Runs a blocking barrier, bcast, reduce or allreduce straight on the
    /// caller's bytes when its communicator's board is set up and no
    /// earlier board call is queued: no copy into a message buffer and
    /// back. `None`: not now; run it the usual way.
    fn on_board_now(
        &mut self,
        comm: &Comm,
        call: InPlace,
        data: &mut [u8],
    ) -> Option<Result<(), CollError>> {
        if !self.uses_board(comm, call.collective)
            || !self
                .boards
                .get(&comm.id())
                .is_some_and(|b| b.idle_and_ready())
        {
            return None;
        }
        Some(
            self.run_on_board(comm, call, data)
                .map_err(|e| e.in_comm(comm)),
        )
    }

    /// The fast paths of a blocking call on bytes: through the node
    /// hierarchy, or on the board. `None`: neither applies now.
    fn fast_path(
        &mut self,
        comm: &Comm,
        call: InPlace,
        data: &mut [u8],
    ) -> Option<Result<(), CollError>> {
        if let Some(h) = self.hierarchy_for(comm, call.collective, call.reduction) {
            return Some(
                self.run_hierarchical(comm, &h, call, data)
                    .map_err(|e| e.in_comm(comm)),
            );
        }
        self.on_board_now(comm, call, data)
    }

    fn run_on_board(
        &mut self,
        comm: &Comm,
        call: InPlace,
        data: &mut [u8],
    ) -> Result<(), CollError> {
        let (collective, root, reduction) = (call.collective, call.root, call.reduction);
        if root >= comm.size() {
            return Err(CollError::Invalid(format!(
                "root {root} in a communicator of {}",
                comm.size()
            )));
        }
        if let Some((op, dt)) = reduction {
            op.check(*dt)?;
        }
        // Every member numbers its calls alike, whichever way they run.
        let seq = self.seqs.entry(comm.id()).or_insert(0);
        *seq = seq.wrapping_add(1);
        let task = board::Task {
            collective,
            root,
            me: comm.rank(),
            reduction,
        };
        let mut phases = board::Phases::default();
        let deadline = self.timeout.map(|t| (t, self.msg.endpoint().now() + t));
        let mut rounds: u32 = 0;
        loop {
            let cb = self.boards.entry(comm.id()).or_default();
            let mut moved = false;
            // Look at the board a few times (a look that finds nothing
            // reads lines already in this core's cache) between progress
            // rounds of the endpoint, which cost more.
            for _ in 0..BOARD_LOOKS_PER_ROUND {
                let (done, m) = cb.step(&mut phases, &task, data)?;
                if done {
                    return Ok(());
                }
                moved |= m;
                if m {
                    break;
                }
            }
            // Keep the endpoint (acknowledgements, peers' retransmissions)
            // and any other operation going.
            moved |= self.msg.progress()? > 0;
            moved |= self.advance_all();
            if let Some(e) = failure_in(&self.msg, &self.failures, self.scope.as_ref(), comm) {
                return Err(e);
            }
            rounds = rounds.wrapping_add(1);
            if let Some((t, d)) = deadline {
                if rounds.is_multiple_of(CLOCK_CHECK_ROUNDS) && self.msg.endpoint().now() >= d {
                    return Err(CollError::Timeout(t));
                }
            }
            if !moved {
                if self.yield_when_idle || self.sleeps() {
                    self.idle()?;
                } else {
                    self.flush_boards();
                }
            }
        }
    }

    /// A waiting round found nothing and the CPU is to be given away: first
    /// one full progress round (every method, not only the shortest path
    /// that busy-polling rounds take), so a message on another method is
    /// not left behind many yields; then `sched_yield` if it found nothing.
    fn idle(&mut self) -> Result<(), CollError> {
        self.flush_boards();
        if self.msg.progress_full()? == 0 && !self.advance_all() {
            std::thread::yield_now();
        }
        Ok(())
    }

    /// Publishes every board's lazily kept `done` (see [`board`]): called
    /// by every waiting loop when a round found nothing, so no member is
    /// held up by what this one has read but not yet said.
    fn flush_boards(&mut self) {
        for b in self.boards.values_mut() {
            b.flush_done();
        }
    }

    /// Whether a board call is in progress: board phases raise no event
    /// an endpoint could sleep on, so waiting spins (or yields) instead.
    fn board_pending(&self) -> bool {
        self.boards.values().any(|b| b.busy())
    }

    /// Makes progress until every message this process sent has been
    /// acknowledged (or `timeout` passes), then keeps answering its peers'
    /// last retransmissions until its timers are quiet. Call it before
    /// dropping a `Coll` whose peers may still be waiting for it: an
    /// operation completes locally once its messages are handed to the
    /// port, not when they arrive. Returns whether everything was
    /// acknowledged.
    pub fn flush(&mut self, timeout: Duration) -> Result<bool, CollError> {
        let ep = self.msg.endpoint_mut();
        let deadline = ep.now() + timeout;
        Ok(ep.flush_until(deadline)?)
    }

    /// The result of `req` if it is complete (the request is then used
    /// up), after one round of progress.
    pub fn test(&mut self, req: &Request) -> Result<Option<Vec<u8>>, CollError> {
        if !self.finished.contains_key(&req.0) {
            self.progress()?;
        }
        match self.finished.remove(&req.0) {
            Some(r) => r.map(Some),
            None if self.running.contains_key(&req.0) => Ok(None),
            None => Err(CollError::NoSuchRequest),
        }
    }

    /// Makes progress until `req` completes and returns its output.
    pub fn wait(&mut self, req: Request) -> Result<Vec<u8>, CollError> {
        self.wait_for(|c| c.finished.contains_key(&req.0) || !c.running.contains_key(&req.0))?;
        self.finished
            .remove(&req.0)
            .unwrap_or(Err(CollError::NoSuchRequest))
    }

    /// Makes progress until `done` holds: every operation in progress and
    /// every message move meanwhile. Between rounds that move nothing it
    /// sleeps on the endpoint (blocking mode), yields (when set to) or
    /// spins, as [`Coll::wait`] does; fails with [`CollError::Timeout`]
    /// after the timeout set with [`Coll::set_timeout`]. For waits on
    /// anything the progress engine completes: point-to-point messages of
    /// [`Coll::messenger`], several requests at once.
    pub fn wait_for(&mut self, mut done: impl FnMut(&mut Coll) -> bool) -> Result<(), CollError> {
        let deadline = self.timeout.map(|t| (t, self.msg.endpoint().now() + t));
        let mut rounds: u32 = 0;
        loop {
            if done(self) {
                return Ok(());
            }
            // A clock reading costs more than a busy-poll round: look at
            // it every CLOCK_CHECK_ROUNDS rounds only.
            rounds = rounds.wrapping_add(1);
            if let Some((t, d)) = deadline {
                if rounds.is_multiple_of(CLOCK_CHECK_ROUNDS) && self.msg.endpoint().now() >= d {
                    return Err(CollError::Timeout(t));
                }
            }
            let mut moved = if self.board_pending() {
                self.msg.progress()?
            } else {
                self.msg.progress_or_wait(deadline.map(|(_, d)| d))?
            };
            moved += usize::from(self.advance_all());
            if moved == 0 {
                if self.yield_when_idle || self.sleeps() && self.board_pending() {
                    self.idle()?;
                } else {
                    self.flush_boards();
                }
            }
        }
    }

    /// Like [`Coll::wait_for`] for a `done` that polls the messenger itself
    /// ([`Messenger::recv_now`]): while busy-polling with nothing else in
    /// progress, the loop leaves the receiving to `done` and runs a full
    /// progress round (timers, acknowledgements) only every few rounds, so
    /// the awaited message is taken in place rather than queued first.
    /// Otherwise (blocking mode, yielding, collectives in progress) it is
    /// [`Coll::wait_for`].
    pub fn wait_polling(
        &mut self,
        mut done: impl FnMut(&mut Coll) -> Result<bool, CollError>,
    ) -> Result<(), CollError> {
        let quiet = self.msg.endpoint().mode() == crate::endpoint::ProgressMode::BusyPoll
            && !self.yield_when_idle
            && self.running.is_empty()
            && !self.board_pending();
        if !quiet {
            let mut failed = None;
            self.wait_for(|c| match done(c) {
                Ok(d) => d,
                Err(e) => {
                    failed = Some(e);
                    true
                }
            })?;
            return failed.map_or(Ok(()), Err);
        }
        let deadline = self.timeout.map(|t| (t, self.msg.endpoint().now() + t));
        loop {
            for _ in 0..CLOCK_CHECK_ROUNDS {
                if done(self)? {
                    return Ok(());
                }
            }
            self.msg.progress_full()?;
            self.flush_boards();
            if let Some((t, d)) = deadline {
                if self.msg.endpoint().now() >= d {
                    return Err(CollError::Timeout(t));
                }
            }
        }
    }

    /// Starts a collective on `comm` (non-blocking; see [`Coll::wait`]).
    /// Every member must start the same collectives on `comm` in the same
    /// order, with matching arguments.
    pub fn start(&mut self, comm: &Comm, call: Call) -> Result<Request, CollError> {
        let seq = self.seqs.entry(comm.id()).or_insert(0);
        let tag = u64::from(*seq);
        let run = if call.algorithm.is_none() && self.uses_board(comm, call.collective) {
            check(comm, &call, comm.nodes())?;
            InFlight::Board(BoardRun::new(comm.clone(), call, tag, &mut self.msg.pool))
        } else {
            InFlight::Messages(self.over_messages(comm, call, tag)?)
        };
        // The sequence number is used up only by a call that started.
        let seq = self.seqs.entry(comm.id()).or_insert(0);
        *seq = seq.wrapping_add(1);
        let id = self.next_request;
        self.next_request += 1;
        // A communicator with a failed member cannot complete a collective
        // (every member numbers the call alike all the same). A failure
        // seen here is told to the members, which may wait on this one.
        if let Some(e) = failure_in(&self.msg, &self.failures, self.scope.as_ref(), comm) {
            self.failures.tell(&mut self.msg, comm, &e);
            self.finished.insert(id, Err(e.in_comm(comm)));
            return Ok(Request(id));
        }
        if matches!(run, InFlight::Board(_)) {
            self.boards.entry(comm.id()).or_default().push(id);
        }
        self.running.insert(id, run);
        // Start it now: its first sends go out with the next progress.
        self.advance_all();
        Ok(Request(id))
    }

    /// Whether a call of `collective` on `comm` that names no algorithm
    /// goes to the communicator's board (see [`board`]): the shared-memory
    /// tiers allowed for it, all members on this node, and the board not
    /// known to fail.
    fn uses_board(&self, comm: &Comm, collective: Collective) -> bool {
        self.memory_tiers(collective)
            && board::eligible(comm, collective)
            && !self.boards.get(&comm.id()).is_some_and(|b| b.unavailable())
    }

    /// Whether `collective` may use the shared-memory tiers (a board, the
    /// node hierarchy): one of the four they serve, boards allowed, and
    /// no algorithm forced for it by `BCL_COLL_ALG`.
    fn memory_tiers(&self, collective: Collective) -> bool {
        self.board_enabled
            && matches!(
                collective,
                Collective::Barrier
                    | Collective::Bcast
                    | Collective::Reduce
                    | Collective::Allreduce
            )
            && self.selector.overrides().get(collective).is_none()
    }

    /// Whether `comm`'s blocking barrier, bcast, reduce and allreduce have
    /// gone through its node hierarchy (boards inside nodes, leaders
    /// between them).
    pub fn hierarchical(&self, comm: &Comm) -> bool {
        self.hierarchies
            .get(&comm.id())
            .is_some_and(|h| h.is_some())
    }

    /// Whether `comm`'s barrier, bcast, reduce and allreduce run on its
    /// shared-memory board (set up by the first of them; see [`board`]).
    pub fn on_board(&self, comm: &Comm) -> bool {
        self.boards.get(&comm.id()).is_some_and(|b| b.ready())
    }

    /// The name of the algorithm a blocking call with this shape would run
    /// on `comm` (reductions: with a commutative operation):
    /// [`board::NAME`] for board calls (while the board is not known to
    /// fail), `two_level_board` through the node hierarchy, else the
    /// selector's choice.
    pub fn algorithm_name(
        &self,
        comm: &Comm,
        shape: &Shape,
        uniform: bool,
    ) -> Result<&'static str, CollError> {
        if self.uses_board(comm, shape.collective) {
            return Ok(board::NAME);
        }
        let hierarchical = self.has_shm
            && self.memory_tiers(shape.collective)
            && Hierarchy::of(comm)
                .is_some_and(|h| h.aligned || !shape.collective.reduces() || !self.deterministic);
        if hierarchical {
            return Ok(HIERARCHICAL);
        }
        self.choose(shape, uniform).map(Algorithm::name)
    }

    /// The call as messages: its schedule (the selector's algorithm unless
    /// the call names one) and buffers.
    fn over_messages(&mut self, comm: &Comm, call: Call, tag: u64) -> Result<Running, CollError> {
        let (shape, out_len) = check(comm, &call, comm.nodes())?;
        let (selector, deterministic) = (&self.selector, self.deterministic);
        let (_, schedule) =
            self.schedules
                .get(comm.id(), call.algorithm, deterministic, &shape, || {
                    selector.choose(&shape, deterministic, call.uniform)
                })?;
        Ok(Running::new(
            comm.clone(),
            schedule,
            (call.input, out_len),
            call.reduction,
            tag,
            &mut self.msg.pool,
        ))
    }

    /// Starts `call` and waits for it.
    pub fn run(&mut self, comm: &Comm, mut call: Call) -> Result<Vec<u8>, CollError> {
        if call.algorithm.is_none() {
            if let Some(h) = self.hierarchy_for(comm, call.collective, call.reduction.as_ref()) {
                let mut data = std::mem::take(&mut call.input);
                if call.collective == Collective::Bcast && comm.rank() != call.root {
                    data = self.msg.pool.take(call.len);
                }
                let red = call.reduction.take();
                let in_place = InPlace::new(call.collective, call.root, red.as_ref());
                if let Some(e) = failure_in(&self.msg, &self.failures, None, comm) {
                    self.failures.tell(&mut self.msg, comm, &e);
                    return Err(e.in_comm(comm));
                }
                // Its steps run on smaller communicators: a failure of any
                // member of this one fails them, and one seen here is told
                // to all of its members.
                let outer = self.scope.replace(comm.clone());
                let r = self.run_hierarchical(comm, &h, in_place, &mut data);
                self.scope = outer;
                if let Err(e) = &r {
                    self.failures.tell(&mut self.msg, comm, e);
                }
                r.map_err(|e| e.in_comm(comm))?;
                return Ok(data);
            }
        }
        let r = self.start(comm, call)?;
        self.wait(r)
    }

    /// The hierarchy `collective` goes through on `comm`: barrier, bcast,
    /// reduce and allreduce of a communicator spanning several nodes, some
    /// with two or more members, when boards are possible and allowed and
    /// the collective's algorithm is not forced; reductions only on
    /// aligned placements while deterministic (or with a non-commutative
    /// operation), where the hierarchy keeps the canonical order. Like
    /// `BCL_COLL_ALG`, `BCL_COLL_BOARD` must be the same on every rank.
    fn hierarchy_for(
        &mut self,
        comm: &Comm,
        collective: Collective,
        reduction: Option<&(Op, Datatype)>,
    ) -> Option<Arc<Hierarchy>> {
        if !self.has_shm || !self.memory_tiers(collective) {
            return None;
        }
        let h = self
            .hierarchies
            .entry(comm.id())
            .or_insert_with(|| Hierarchy::of(comm).map(Arc::new))
            .clone()?;
        let keeps_order = |op: &Op| !self.deterministic && op.is_commutative();
        match reduction {
            Some((op, _)) if !h.aligned && !keeps_order(op) => None,
            _ => Some(h),
        }
    }

    /// Runs a barrier, bcast, reduce or allreduce of `comm` through its
    /// node hierarchy, in place on `data`: inside each node on its board,
    /// between nodes among the leaders.
    fn run_hierarchical(
        &mut self,
        comm: &Comm,
        h: &Hierarchy,
        call: InPlace,
        data: &mut [u8],
    ) -> Result<(), CollError> {
        let (collective, root, reduction) = (call.collective, call.root, call.reduction);
        let Some(&(root_node, root_index)) = h.place.get(root) else {
            return Err(CollError::Invalid(format!(
                "root {root} in a communicator of {}",
                comm.size()
            )));
        };
        let my_node = h.place[comm.rank()].0;
        let node = &h.node;
        match collective {
            Collective::Barrier => {
                // Arrive at the leader, leaders' barrier, release.
                let arrive = (Op::Builtin(super::op::BuiltinOp::BitOr), Datatype::U8);
                self.run_bytes(
                    node,
                    InPlace::new(Collective::Reduce, 0, Some(&arrive)),
                    &mut [],
                )?;
                if let Some(l) = &h.leaders {
                    self.run_bytes(l, InPlace::new(Collective::Barrier, 0, None), &mut [])?;
                }
                self.run_bytes(node, InPlace::new(Collective::Bcast, 0, None), &mut [])
            }
            Collective::Bcast => {
                let root_leads = root_index == 0;
                if my_node == root_node && !root_leads {
                    self.run_bytes(
                        node,
                        InPlace::new(Collective::Bcast, root_index, None),
                        data,
                    )?;
                }
                if let Some(l) = &h.leaders {
                    self.run_bytes(l, InPlace::new(Collective::Bcast, root_node, None), data)?;
                }
                if my_node != root_node || root_leads {
                    self.run_bytes(node, InPlace::new(Collective::Bcast, 0, None), data)?;
                }
                Ok(())
            }
            Collective::Allreduce => {
                self.run_bytes(node, InPlace::new(Collective::Reduce, 0, reduction), data)?;
                if let Some(l) = &h.leaders {
                    self.run_bytes(l, InPlace::new(Collective::Allreduce, 0, reduction), data)?;
                }
                self.run_bytes(node, InPlace::new(Collective::Bcast, 0, None), data)
            }
            Collective::Reduce => {
                // Partial results in a copy: only the root's data changes.
                let mut partial = self.msg.pool.copy_of(data);
                self.run_bytes(
                    node,
                    InPlace::new(Collective::Reduce, 0, reduction),
                    &mut partial,
                )?;
                if let Some(l) = &h.leaders {
                    self.run_bytes(
                        l,
                        InPlace::new(Collective::Reduce, root_node, reduction),
                        &mut partial,
                    )?;
                }
                if my_node == root_node && root_index != 0 {
                    self.run_bytes(node, InPlace::new(Collective::Bcast, 0, None), &mut partial)?;
                }
                if comm.rank() == root {
                    data.copy_from_slice(&partial);
                }
                self.msg.pool.give(partial);
                Ok(())
            }
            other => Err(CollError::Invalid(format!(
                "{} has no hierarchical form",
                other.name()
            ))),
        }
    }

    /// One blocking call on bytes, in place (bcast and allreduce: every
    /// rank's `data` gets the result; reduce: the root's): on the board
    /// when it can, else over messages.
    fn run_bytes(&mut self, comm: &Comm, call: InPlace, data: &mut [u8]) -> Result<(), CollError> {
        if comm.size() == 1 {
            return Ok(());
        }
        if let Some(r) = self.on_board_now(comm, call, data) {
            return r;
        }
        let (collective, root, reduction) = (call.collective, call.root, call.reduction);
        let input = match collective {
            Collective::Barrier => Vec::new(),
            Collective::Bcast if comm.rank() != root => Vec::new(),
            _ => self.msg.pool.copy_of(data),
        };
        let mut call = Call::new(collective, input).root(root);
        call.len = data.len();
        call.reduction = reduction.cloned();
        let r = self.start(comm, call)?;
        let out = self.wait(r)?;
        let writes = match collective {
            Collective::Barrier => false,
            Collective::Reduce => comm.rank() == root,
            _ => true,
        };
        if writes {
            if out.len() != data.len() {
                return Err(CollError::Invalid(format!(
                    "result of {} bytes for a buffer of {}",
                    out.len(),
                    data.len()
                )));
            }
            data.copy_from_slice(&out);
        }
        self.msg.pool.give(out);
        Ok(())
    }

    /// A blocking barrier, bcast, reduce or allreduce on the caller's
    /// bytes, in place: bcast and allreduce leave the result in every
    /// rank's `data`, reduce in the root's (the others' `data` is left as it
    /// was). The byte-level form of [`Coll::bcast`], [`Coll::reduce`] and
    /// [`Coll::allreduce`], with the same fast paths (the node hierarchy,
    /// the board); for bindings that hold untyped buffers.
    pub fn in_place(
        &mut self,
        comm: &Comm,
        collective: Collective,
        root: usize,
        reduction: Option<&(Op, Datatype)>,
        data: &mut [u8],
    ) -> Result<(), CollError> {
        match collective {
            Collective::Barrier
            | Collective::Bcast
            | Collective::Reduce
            | Collective::Allreduce => {}
            other => {
                return Err(CollError::Invalid(format!(
                    "{} does not run in place",
                    other.name()
                )))
            }
        }
        let call = InPlace::new(collective, root, reduction);
        if let Some(r) = self.fast_path(comm, call, data) {
            return r;
        }
        self.run_bytes(comm, call, data)
    }

    // ---- Non-blocking calls on bytes --------------------------------

    /// Starts a barrier.
    pub fn ibarrier(&mut self, comm: &Comm) -> Result<Request, CollError> {
        self.start(comm, Call::new(Collective::Barrier, Vec::new()))
    }

    /// Starts a broadcast of `len` bytes from `root`: the root passes the
    /// data, the others anything (only its length matters: `len`).
    pub fn ibcast(
        &mut self,
        comm: &Comm,
        root: usize,
        data: Vec<u8>,
        len: usize,
    ) -> Result<Request, CollError> {
        let mut c = Call::new(Collective::Bcast, data);
        c.root = root;
        c.len = len;
        if comm.rank() != root {
            c.input = Vec::new();
        }
        self.start(comm, c)
    }

    /// Starts a reduction of `data` to `root`.
    pub fn ireduce(
        &mut self,
        comm: &Comm,
        root: usize,
        data: Vec<u8>,
        dt: Datatype,
        op: Op,
    ) -> Result<Request, CollError> {
        self.start(
            comm,
            Call::new(Collective::Reduce, data)
                .root(root)
                .reducing(op, dt),
        )
    }

    /// Starts a reduction whose result every rank gets.
    pub fn iallreduce(
        &mut self,
        comm: &Comm,
        data: Vec<u8>,
        dt: Datatype,
        op: Op,
    ) -> Result<Request, CollError> {
        self.start(
            comm,
            Call::new(Collective::Allreduce, data).reducing(op, dt),
        )
    }

    /// Starts a gather of every rank's block (`counts[r]` bytes from rank
    /// r) to `root`, packed in rank order.
    pub fn igatherv(
        &mut self,
        comm: &Comm,
        root: usize,
        data: Vec<u8>,
        counts: Vec<usize>,
    ) -> Result<Request, CollError> {
        self.start(
            comm,
            Call::new(Collective::Gather, data)
                .root(root)
                .counts(counts),
        )
    }

    /// Starts a scatter of the root's packed blocks, `counts[r]` bytes to
    /// rank r.
    pub fn iscatterv(
        &mut self,
        comm: &Comm,
        root: usize,
        data: Vec<u8>,
        counts: Vec<usize>,
    ) -> Result<Request, CollError> {
        self.start(
            comm,
            Call::new(Collective::Scatter, data)
                .root(root)
                .counts(counts),
        )
    }

    /// Starts an allgather: every rank's block (`counts[r]` bytes) to
    /// everyone, packed in rank order.
    pub fn iallgatherv(
        &mut self,
        comm: &Comm,
        data: Vec<u8>,
        counts: Vec<usize>,
    ) -> Result<Request, CollError> {
        self.start(comm, Call::new(Collective::Allgather, data).counts(counts))
    }

    /// Starts an all-to-all: `data` holds the blocks for each rank packed
    /// (`send_counts[r]` bytes for rank r); the output holds the blocks from
    /// each rank (`recv_counts[r]` bytes from rank r).
    pub fn ialltoallv(
        &mut self,
        comm: &Comm,
        data: Vec<u8>,
        send_counts: Vec<usize>,
        recv_counts: Vec<usize>,
    ) -> Result<Request, CollError> {
        let mut c = Call::new(Collective::Alltoall, data);
        c.send_counts = send_counts;
        c.recv_counts = recv_counts;
        self.start(comm, c)
    }

    /// Starts a reduce-scatter: `data` (the sum of `counts` bytes) is
    /// reduced over all ranks and rank r gets block r (`counts[r]` bytes).
    pub fn ireduce_scatter(
        &mut self,
        comm: &Comm,
        data: Vec<u8>,
        counts: Vec<usize>,
        dt: Datatype,
        op: Op,
    ) -> Result<Request, CollError> {
        let c = Call::new(Collective::ReduceScatter, data);
        self.start(comm, c.counts(counts).reducing(op, dt))
    }

    /// Starts an inclusive prefix reduction.
    pub fn iscan(
        &mut self,
        comm: &Comm,
        data: Vec<u8>,
        dt: Datatype,
        op: Op,
    ) -> Result<Request, CollError> {
        self.start(comm, Call::new(Collective::Scan, data).reducing(op, dt))
    }

    /// Starts an exclusive prefix reduction (rank 0's output is zeroed).
    pub fn iexscan(
        &mut self,
        comm: &Comm,
        data: Vec<u8>,
        dt: Datatype,
        op: Op,
    ) -> Result<Request, CollError> {
        self.start(comm, Call::new(Collective::Exscan, data).reducing(op, dt))
    }

    // ---- Blocking calls on typed slices ------------------------------

    /// Waits until every member has called it.
    pub fn barrier(&mut self, comm: &Comm) -> Result<(), CollError> {
        if let Some(r) = self.fast_path(comm, InPlace::new(Collective::Barrier, 0, None), &mut []) {
            return r;
        }
        let r = self.ibarrier(comm)?;
        self.wait(r).map(drop)
    }

    /// Broadcasts the root's `data` into every rank's `data` (same length
    /// everywhere).
    pub fn bcast<T: Element>(
        &mut self,
        comm: &Comm,
        root: usize,
        data: &mut [T],
    ) -> Result<(), CollError> {
        let bytes = data.as_mut_bytes();
        if let Some(r) = self.fast_path(comm, InPlace::new(Collective::Bcast, root, None), bytes) {
            return r;
        }
        let input = if comm.rank() == root {
            self.msg.pool.copy_of(data.as_bytes())
        } else {
            Vec::new()
        };
        let mut call = Call::new(Collective::Bcast, input).root(root);
        call.len = std::mem::size_of_val(data);
        self.run_into(comm, call, data, true)
    }

    /// Reduces every rank's `data` in place: afterwards every rank's `data`
    /// holds the result (MPI's allreduce with `MPI_IN_PLACE`).
    pub fn allreduce<T: Element>(
        &mut self,
        comm: &Comm,
        data: &mut [T],
        op: impl Into<Op>,
    ) -> Result<(), CollError> {
        let red = (op.into(), T::DATATYPE);
        let bytes = data.as_mut_bytes();
        let call = InPlace::new(Collective::Allreduce, 0, Some(&red));
        if let Some(r) = self.fast_path(comm, call, bytes) {
            return r;
        }
        let call = self.reduction(Collective::Allreduce, data, red.0);
        self.run_into(comm, call, data, true)
    }

    /// Reduces every rank's `data` to `root`: the result replaces the
    /// root's `data`; other ranks' `data` is left as it was.
    pub fn reduce<T: Element>(
        &mut self,
        comm: &Comm,
        root: usize,
        data: &mut [T],
        op: impl Into<Op>,
    ) -> Result<(), CollError> {
        let red = (op.into(), T::DATATYPE);
        let bytes = data.as_mut_bytes();
        let call = InPlace::new(Collective::Reduce, root, Some(&red));
        if let Some(r) = self.fast_path(comm, call, bytes) {
            return r;
        }
        let call = self.reduction(Collective::Reduce, data, red.0).root(root);
        self.run_into(comm, call, data, comm.rank() == root)
    }

    /// Gathers every rank's `data` (same length everywhere) at `root`,
    /// in rank order; `None` at the other ranks.
    pub fn gather<T: Element>(
        &mut self,
        comm: &Comm,
        root: usize,
        data: &[T],
    ) -> Result<Option<Vec<T>>, CollError> {
        let counts = vec![std::mem::size_of_val(data); comm.size()];
        let input = self.msg.pool.copy_of(data.as_bytes());
        let r = self.igatherv(comm, root, input, counts)?;
        let out = self.wait(r)?;
        (comm.rank() == root).then(|| from_bytes(&out)).transpose()
    }

    /// Scatters the root's `data` in `size` equal blocks, block r to rank r
    /// (`data` is ignored elsewhere; `block` elements each).
    pub fn scatter<T: Element>(
        &mut self,
        comm: &Comm,
        root: usize,
        data: &[T],
        block: usize,
    ) -> Result<Vec<T>, CollError> {
        let counts = vec![block * std::mem::size_of::<T>(); comm.size()];
        let input = if comm.rank() == root {
            let input = self.msg.pool.copy_of(data.as_bytes());
            input
        } else {
            Vec::new()
        };
        let r = self.iscatterv(comm, root, input, counts)?;
        from_bytes(&self.wait(r)?)
    }

    /// Every rank's `data` (same length everywhere) to everyone, in rank
    /// order.
    pub fn allgather<T: Element>(&mut self, comm: &Comm, data: &[T]) -> Result<Vec<T>, CollError> {
        let counts = vec![std::mem::size_of_val(data); comm.size()];
        let input = self.msg.pool.copy_of(data.as_bytes());
        let r = self.iallgatherv(comm, input, counts)?;
        from_bytes(&self.wait(r)?)
    }

    /// `data` holds `size` equal blocks; block r goes to rank r, and the
    /// result holds the block from each rank.
    pub fn alltoall<T: Element>(&mut self, comm: &Comm, data: &[T]) -> Result<Vec<T>, CollError> {
        let p = comm.size();
        if !data.len().is_multiple_of(p) {
            return Err(CollError::Invalid(format!(
                "alltoall of {} elements does not split into {p} equal blocks",
                data.len()
            )));
        }
        let counts = vec![std::mem::size_of_val(data) / p; p];
        let input = self.msg.pool.copy_of(data.as_bytes());
        let mut c = Call::new(Collective::Alltoall, input);
        c.send_counts = counts.clone();
        c.recv_counts = counts;
        c.uniform = true;
        let r = self.start(comm, c)?;
        from_bytes(&self.wait(r)?)
    }

    /// Reduces `data` (`size` equal blocks) over all ranks; rank r gets
    /// block r of the result (MPI's reduce_scatter_block).
    pub fn reduce_scatter_block<T: Element>(
        &mut self,
        comm: &Comm,
        data: &[T],
        op: impl Into<Op>,
    ) -> Result<Vec<T>, CollError> {
        let p = comm.size();
        if !data.len().is_multiple_of(p) {
            return Err(CollError::Invalid(format!(
                "reduce-scatter of {} elements does not split into {p} equal blocks",
                data.len()
            )));
        }
        let counts = vec![std::mem::size_of_val(data) / p; p];
        let input = self.msg.pool.copy_of(data.as_bytes());
        let r = self.ireduce_scatter(comm, input, counts, T::DATATYPE, op.into())?;
        from_bytes(&self.wait(r)?)
    }

    /// Inclusive prefix reduction in place: rank r's `data` becomes the
    /// reduction over ranks 0..=r.
    pub fn scan<T: Element>(
        &mut self,
        comm: &Comm,
        data: &mut [T],
        op: impl Into<Op>,
    ) -> Result<(), CollError> {
        let call = self.reduction(Collective::Scan, data, op.into());
        self.run_into(comm, call, data, true)
    }

    /// Exclusive prefix reduction in place: rank r's `data` becomes the
    /// reduction over ranks 0..r (rank 0's `data` is left as it was).
    pub fn exscan<T: Element>(
        &mut self,
        comm: &Comm,
        data: &mut [T],
        op: impl Into<Op>,
    ) -> Result<(), CollError> {
        let call = self.reduction(Collective::Exscan, data, op.into());
        self.run_into(comm, call, data, comm.rank() > 0)
    }

    /// A call of the reduction `c` on a copy of `data`.
    fn reduction<T: Element>(&mut self, c: Collective, data: &[T], op: Op) -> Call {
        let input = self.msg.pool.copy_of(data.as_bytes());
        Call::new(c, input).reducing(op, T::DATATYPE)
    }

    /// Runs `call` and, when `write_back`, copies its output into `data`.
    fn run_into<T: Element>(
        &mut self,
        comm: &Comm,
        call: Call,
        data: &mut [T],
        write_back: bool,
    ) -> Result<(), CollError> {
        let out = self.run(comm, call)?;
        if write_back {
            copy_into(data, &out)?;
        }
        self.msg.pool.give(out);
        Ok(())
    }

    // ---- Communicators -------------------------------------------------

    /// A communicator of this process alone (MPI_COMM_SELF), made without
    /// messages: no other process ever sees its id, so a locally unused one
    /// will do.
    pub fn solo(&mut self) -> Comm {
        let id = self.next_id;
        self.next_id += 1;
        let me = self.world.addr(self.world.rank()).expect("own rank");
        Comm::new(id, 0, Arc::from(vec![me]))
    }

    /// The communicator id this process would propose next.
    pub(super) fn next_id(&self) -> u32 {
        self.next_id
    }

    /// Sets the communicator id to propose next (after an agreement).
    pub(super) fn set_next_id(&mut self, id: u32) {
        self.next_id = id;
    }

    /// The number of the next shrink of communicator `id` (every member
    /// counts its shrinks of a communicator alike).
    pub(super) fn next_shrink(&mut self, id: u32) -> u32 {
        let n = self.shrinks.entry(id).or_insert(0);
        *n = n.wrapping_add(1);
        *n
    }

    /// A new communicator with the same members and ranks and its own
    /// message space (collective over `comm`).
    pub fn dup(&mut self, comm: &Comm) -> Result<Comm, CollError> {
        let mut id = [self.next_id];
        self.allreduce(comm, &mut id, super::op::BuiltinOp::Max)?;
        self.next_id = id[0] + 1;
        Ok(Comm::new(id[0], comm.rank(), Arc::from(comm.members())))
    }

    /// Splits `comm` by `color` (collective over `comm`): the members with
    /// the same color form a new communicator, ranked by `key` and then by
    /// their rank in `comm`. `None` (MPI_UNDEFINED) takes no part and gets
    /// `None` back.
    pub fn split(
        &mut self,
        comm: &Comm,
        color: Option<u32>,
        key: i32,
    ) -> Result<Option<Comm>, CollError> {
        // Each member's (has color, color, key, proposed id).
        let mine = [
            i64::from(color.is_some()),
            i64::from(color.unwrap_or(0)),
            i64::from(key),
            i64::from(self.next_id),
        ];
        let all = self.allgather(comm, &mine)?;
        let id = all.chunks(4).map(|m| m[3]).max().unwrap_or(0);
        let id = u32::try_from(id)
            .map_err(|_| CollError::Invalid("communicator ids exhausted".into()))?;
        self.next_id = id + 1;
        let Some(color) = color else {
            return Ok(None);
        };
        let mut members: Vec<(i64, usize)> = all
            .chunks(4)
            .enumerate()
            .filter(|(_, m)| m[0] == 1 && m[1] == i64::from(color))
            .map(|(r, m)| (m[2], r))
            .collect();
        members.sort();
        let rank = members
            .iter()
            .position(|&(_, r)| r == comm.rank())
            .expect("the caller has this color");
        let addrs: Vec<ProcessAddr> = members.iter().map(|&(_, r)| comm.members()[r]).collect();
        Ok(Some(Comm::new(id, rank, Arc::from(addrs))))
    }

    // ---- Point-to-point on a communicator ----------------------------

    /// Sends `data` to rank `to` of `comm` under `tag` (copied at once).
    pub fn isend(
        &mut self,
        comm: &Comm,
        to: usize,
        tag: u32,
        data: &[u8],
    ) -> Result<SendId, CollError> {
        let dst = comm.addr(to)?;
        self.msg
            .isend(dst, comm.p2p_context(), u64::from(tag), data)
    }

    /// Posts a receive for the next message from rank `from` of `comm`
    /// under `tag`.
    pub fn irecv(&mut self, comm: &Comm, from: usize, tag: u32) -> Result<RecvId, CollError> {
        let src = comm.addr(from)?;
        self.msg.irecv(src, comm.p2p_context(), u64::from(tag))
    }

    /// Sends and waits until a large message's data is out.
    pub fn send(&mut self, comm: &Comm, to: usize, tag: u32, data: &[u8]) -> Result<(), CollError> {
        let id = self.isend(comm, to, tag, data)?;
        loop {
            if let Some(r) = self.msg.take_send(id) {
                return r.map_err(|e| e.in_comm(comm));
            }
            self.msg.progress_or_wait(None)?;
            self.advance_all();
        }
    }

    /// Receives the next message from rank `from` of `comm` under `tag`.
    pub fn recv(&mut self, comm: &Comm, from: usize, tag: u32) -> Result<Vec<u8>, CollError> {
        let id = self.irecv(comm, from, tag)?;
        self.wait_recv(id).map_err(|e| e.in_comm(comm))
    }

    /// Makes progress until receive `id` completes.
    pub fn wait_recv(&mut self, id: RecvId) -> Result<Vec<u8>, CollError> {
        loop {
            if let Some(r) = self.msg.take_recv(id) {
                return r;
            }
            self.msg.progress_or_wait(None)?;
            self.advance_all();
        }
    }
}

/// Checks a call's arguments and gives its shape and output length.
fn check<'a>(comm: &Comm, c: &'a Call, nodes: &'a [u32]) -> Result<(Shape<'a>, usize), CollError> {
    let p = comm.size();
    let bad = |s: String| Err(CollError::Invalid(s));
    if c.root >= p {
        return bad(format!("root {} in a communicator of {p}", c.root));
    }
    let elem = match &c.reduction {
        Some((op, dt)) => {
            op.check(*dt)?;
            op.element_size(*dt)
        }
        None if c.collective.reduces() => {
            return bad(format!("{} needs a reduction", c.collective.name()))
        }
        None => 1,
    };
    let counts_len = |v: &[usize], what: &str| {
        if v.len() != p {
            Err(CollError::Invalid(format!(
                "{what} has {} entries for a communicator of {p}",
                v.len()
            )))
        } else {
            Ok(())
        }
    };
    let rank = comm.rank();
    let input_is = |n: usize| {
        if c.input.len() != n {
            Err(CollError::Invalid(format!(
                "{} input of {} bytes, expected {n}",
                c.collective.name(),
                c.input.len()
            )))
        } else {
            Ok(())
        }
    };
    let mut len = c.len;
    let out_len = match c.collective {
        Collective::Barrier => 0,
        Collective::Bcast => {
            if rank == c.root {
                input_is(c.len)?;
            }
            c.len
        }
        Collective::Reduce | Collective::Allreduce | Collective::Scan | Collective::Exscan => {
            len = c.input.len();
            c.input.len()
        }
        Collective::Gather => {
            counts_len(&c.counts, "counts")?;
            input_is(c.counts[rank])?;
            if rank == c.root {
                c.counts.iter().sum()
            } else {
                0
            }
        }
        Collective::Scatter => {
            counts_len(&c.counts, "counts")?;
            if rank == c.root {
                input_is(c.counts.iter().sum())?;
            }
            c.counts[rank]
        }
        Collective::Allgather => {
            counts_len(&c.counts, "counts")?;
            input_is(c.counts[rank])?;
            c.counts.iter().sum()
        }
        Collective::Alltoall => {
            counts_len(&c.send_counts, "send_counts")?;
            counts_len(&c.recv_counts, "recv_counts")?;
            input_is(c.send_counts.iter().sum())?;
            c.recv_counts.iter().sum()
        }
        Collective::ReduceScatter => {
            counts_len(&c.counts, "counts")?;
            len = c.counts.iter().sum();
            input_is(len)?;
            if c.counts.iter().any(|n| n % elem != 0) {
                return bad(format!(
                    "reduce-scatter counts must be multiples of the element size {elem}"
                ));
            }
            c.counts[rank]
        }
    };
    if !len.is_multiple_of(elem) {
        return bad(format!(
            "{len} bytes is not a whole number of {elem}-byte elements"
        ));
    }
    let shape = Shape {
        collective: c.collective,
        rank,
        size: p,
        root: c.root,
        len,
        elem,
        counts: &c.counts,
        send_counts: &c.send_counts,
        recv_counts: &c.recv_counts,
        nodes,
    };
    Ok((shape, out_len))
}

fn copy_into<T: Element>(data: &mut [T], out: &[u8]) -> Result<(), CollError> {
    let dst = data.as_mut_bytes();
    if dst.len() != out.len() {
        return Err(CollError::Invalid(format!(
            "result of {} bytes for a buffer of {}",
            out.len(),
            dst.len()
        )));
    }
    dst.copy_from_slice(out);
    Ok(())
}

fn from_bytes<T: Element>(b: &[u8]) -> Result<Vec<T>, CollError> {
    let n = std::mem::size_of::<T>();
    if !b.len().is_multiple_of(n) {
        return Err(CollError::Invalid(format!(
            "{} bytes is not a whole number of elements",
            b.len()
        )));
    }
    Ok(b.chunks_exact(n)
        .map(|c| T::read_from_bytes(c).expect("chunk of the element's size"))
        .collect())
}

use zerocopy::IntoBytes;
