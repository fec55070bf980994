//! The board tier: barrier, bcast, reduce and allreduce of a communicator
//! whose members all run on this node go through one shared-memory board
//! ([`bcl_shm::Board`]) instead of messages.
//!
//! Over messages, even on shared memory, every step of a collective costs
//! a message: a header, matching, a slot claimed in the receiver's inbox.
//! On a board a member publishes its part once (its data, then a stamp)
//! and every other member reads it in place: a barrier is one counter store
//! and a look at the others', an allreduce one copy in and a reduction
//! that reads every member's slot where it lies. That is BCL-3's hierarchy
//! inside a node (shared memory there, messages between nodes), taken one
//! step further than sending messages over shared memory. The protocol and
//! its memory-ordering argument are in [`bcl_shm::board`].
//!
//! # Which calls use it
//!
//! A call of one of the four collectives on a communicator of two or more
//! members that are all on this node, with no algorithm forced by the call
//! or by `BCL_COLL_ALG` for that collective, and `BCL_COLL_BOARD` not `0`.
//! The first such call on a communicator sets the board up: every member
//! maps it (the first creates it) and a one-byte allreduce over messages
//! agrees whether all of them could; if one could not (no shm method in the
//! endpoint, as on the simulated fabric, or no room in `/dev/shm`), the
//! communicator's calls go over messages, chosen by the cost model, from
//! then on. The LogGP model is not asked: it prices messages, and a board
//! phase costs one cache-line hand-off, below any shared-memory message.
//!
//! # Order and determinism
//!
//! Board calls of a communicator run one after the other, in the order
//! they were started (every member starts them in the same order), each
//! in phases of at most one slot ([`SLOT_LEN`]) of data. Reductions use
//! [`reduce_canonical`] over all members' slots, so their results are the
//! same bits as every deterministic message algorithm's.

use super::alg::{self, Algorithm, Collective, Shape};
use super::comm::Comm;
use super::error::CollError;
use super::messenger::Messenger;
use super::op::{reduce_canonical, BuiltinOp, Datatype, Op};
use super::request::{Advance, Running};
use super::runtime::Call;
use bcl_core::ProcessAddr;
use std::collections::VecDeque;
use std::hash::{Hash, Hasher};
use std::time::{Duration, Instant};

/// The environment variable that turns the board tier off (`0`, `off`,
/// `false`).
pub const BOARD_VAR: &str = "BCL_COLL_BOARD";

/// Bytes of data per member and phase. Large calls run in phases of this
/// size: 64 KiB chunks keep both copies of a pipelined bcast in the
/// caches while a phase's hand-off (well under a microsecond) stays small
/// against its copy.
pub const SLOT_LEN: usize = 64 * 1024;

/// Allreduces of at least this many bytes take two phases per chunk,
/// each member reducing only its share (see `CommBoard::step_split`).
pub const SPLIT_MIN: usize = 16 * 1024;

/// Slots per member: how many phases a member may run ahead of the
/// slowest reader (a root issuing bcasts back to back, a fast rank in a
/// large reduction). A board takes `BUFFERS × P × SLOT_LEN` bytes of
/// address space for large payloads (plus a 4 KiB lane per member for
/// small ones); only the pages written are allocated.
pub const BUFFERS: usize = 8;

/// The algorithm name reported for calls on the board.
pub const NAME: &str = "shared_board";

/// Whether the environment allows the board tier (default on).
pub fn enabled_from_env() -> bool {
    !matches!(
        std::env::var(BOARD_VAR).as_deref(),
        Ok("0") | Ok("off") | Ok("false")
    )
}

/// Whether `c` on `comm` is a board call (before knowing whether the
/// board could be set up).
pub(crate) fn eligible(comm: &Comm, c: Collective) -> bool {
    let nodes = comm.nodes();
    matches!(
        c,
        Collective::Barrier | Collective::Bcast | Collective::Reduce | Collective::Allreduce
    ) && nodes.len() >= 2
        && nodes.iter().all(|&n| n == nodes[0])
}

/// A communicator's board and its queue of calls.
#[derive(Default)]
pub(crate) struct CommBoard {
    state: State,
    /// The phase the next call starts at (phases start at 1: every
    /// counter is 0 on a fresh board).
    next_phase: u64,
    /// Calls started on the board (their numbers, for the call words).
    calls: u64,
    /// Board calls not finished, in start order (request ids).
    queue: VecDeque<usize>,
    scratch: Vec<u8>,
    /// What this member last read of the others' counters.
    seen: Seen,
    /// This member's own `done`, published lazily.
    done: LazyDone,
    /// This member's rank on the board.
    me: usize,
    liveness: Liveness,
}

/// The last values read of every member's stamps and `done` counter:
/// lower bounds, since both only grow. A member whose wait is already
/// covered by what it saw does not read the line again: while a root runs
/// phases ahead of a reader, the root reads the reader's `done` line once
/// for several phases instead of pulling it across every phase.
#[derive(Default)]
struct Seen {
    /// The highest phase each member was seen to publish.
    posted: Vec<u64>,
    done: Vec<u64>,
}

impl Seen {
    /// Whether member `r`, which must publish at `phase`, has. Having seen
    /// it publish any later phase is enough: it runs phases in order.
    fn posted(&mut self, board: &bcl_shm::Board, r: usize, phase: u64, len: usize) -> bool {
        if self.posted[r] < phase {
            let stamp = board.stamp(phase, r, len);
            self.posted[r] = self.posted[r].max(stamp);
        }
        self.posted[r] >= phase
    }

    fn all_posted(&mut self, board: &bcl_shm::Board, phase: u64, len: usize) -> bool {
        (0..self.posted.len()).all(|r| self.posted(board, r, phase, len))
    }

    /// A member sets `done` for a phase before it publishes the next, so
    /// having seen it publish q shows it done with q − 1.
    fn all_done(&mut self, board: &bcl_shm::Board, phase: u64) -> bool {
        (0..self.done.len()).all(|r| {
            if self.done[r] < phase && self.posted[r] <= phase {
                self.done[r] = board.done(r);
            }
            self.done[r] >= phase || self.posted[r] > phase
        })
    }
}

/// This member's `done` counter, published every [`DONE_EVERY`] phases and
/// whenever it is about to wait (on the board, or idle in any waiting loop
/// of [`super::Coll`]), rather than after every phase. A writer that needs
/// the buffer back then pulls the line across once for several phases, as
/// a fast box's reader returns its slots in batches. A member that runs
/// phases without ever waiting holds back at most `DONE_EVERY − 1` of
/// them, so a writer still runs `BUFFERS − DONE_EVERY + 1` phases ahead;
/// one that stops calling in may hold a writer up until it calls in again,
/// which a collective's semantics allow (it may synchronise).
#[derive(Default)]
struct LazyDone {
    finished: u64,
    published: u64,
}

/// Phases between two publications of `done` by a member that never waits.
const DONE_EVERY: u64 = BUFFERS as u64 / 2;

impl LazyDone {
    fn finished(&mut self, board: &bcl_shm::Board, me: usize, phase: u64) {
        self.finished = phase;
        if phase.is_multiple_of(DONE_EVERY) {
            self.flush(board, me);
        }
    }

    fn flush(&mut self, board: &bcl_shm::Board, me: usize) {
        if self.published < self.finished {
            board.set_done(me, self.finished);
            self.published = self.finished;
        }
    }
}

impl CommBoard {
    /// Publishes this member's `done` if it has finished phases it has not
    /// said (call before waiting on anything else).
    pub fn flush_done(&mut self) {
        if let State::Ready(board) = &self.state {
            self.done.flush(board, self.me);
        }
    }
}

/// Looks for dead members while a board call waits: every
/// [`LIVENESS_LOOKS`] fruitless looks it reads the clock, and every
/// [`LIVENESS_PERIOD`] it checks the members' pids.
#[derive(Default)]
struct Liveness {
    members: Vec<ProcessAddr>,
    idle_looks: u32,
    last_check: Option<Instant>,
    /// The number of the call this member is in (counted from 1 on this
    /// board) and the word it announced for it.
    call: (u64, u64),
}

/// Bits of a call word that hold the call's number; the others hold a
/// hash of its arguments ([`call_word`]).
const NUMBER_BITS: u32 = 40;

// A member waiting in call c has the others within BUFFERS phases, so
// within BUFFERS calls: their words for call c are still on the board.
const _: () = assert!(BUFFERS < bcl_shm::board::CALL_HISTORY);

/// The word a member announces on the board for its call number `call`:
/// members whose words for the same number differ started that call with
/// different arguments (they would wait at different places forever).
fn call_word(call: u64, task: &Task, len: usize) -> u64 {
    let mut h = rustc_hash::FxHasher::default();
    (
        task.collective,
        task.root,
        len,
        task.reduction.map(|(_, dt)| *dt),
    )
        .hash(&mut h);
    (h.finish() << NUMBER_BITS) | (call & ((1 << NUMBER_BITS) - 1))
}

/// Fruitless looks at a board between two clock readings.
const LIVENESS_LOOKS: u32 = 1024;

/// How often a waiting member checks that the others are alive.
pub const LIVENESS_PERIOD: Duration = Duration::from_millis(100);

impl Liveness {
    fn waiting(&mut self, board: &bcl_shm::Board) -> Result<(), CollError> {
        self.idle_looks = self.idle_looks.wrapping_add(1);
        if !self.idle_looks.is_multiple_of(LIVENESS_LOOKS) {
            return Ok(());
        }
        let now = Instant::now();
        let last = *self.last_check.get_or_insert(now);
        if now.duration_since(last) < LIVENESS_PERIOD {
            return Ok(());
        }
        self.last_check = Some(now);
        let (call, mine) = self.call;
        if mine != 0 {
            let number = |w: u64| w & ((1 << NUMBER_BITS) - 1);
            for r in 0..self.members.len() {
                let w = board.announced_call(r, call);
                if w != mine && number(w) == number(mine) {
                    let who = self.members.get(r).map_or("?".into(), |a| a.to_string());
                    return Err(CollError::Invalid(format!(
                        "peer {who} started this collective call with other arguments than this process (operation, root, length or datatype): every rank must pass the same"
                    )));
                }
            }
        }
        match board.first_dead() {
            Some((rank, pid)) => Err(CollError::PeerFailed {
                peer: self.members.get(rank).copied().unwrap_or(ProcessAddr {
                    node: bcl_core::NodeId(0),
                    port: bcl_core::PortId(0),
                }),
                rank: None,
                why: format!("its process (pid {pid}) died during a collective on the node's shared-memory board"),
            }),
            None => Ok(()),
        }
    }
}

#[derive(Default)]
enum State {
    /// No call has asked yet.
    #[default]
    Unknown,
    /// The first call is agreeing; our own mapping, if it worked.
    Agreeing(Option<bcl_shm::Board>),
    Ready(bcl_shm::Board),
    /// Some member could not map it: messages from now on.
    Unavailable,
}

impl CommBoard {
    /// Queues request `id` (started now, so after every call queued
    /// before).
    pub fn push(&mut self, id: usize) {
        self.queue.push_back(id);
    }

    /// Forgets request `id` (finished, failed or gone over to messages).
    pub fn remove(&mut self, id: usize) {
        self.queue.retain(|&q| q != id);
    }

    /// Whether `id` is the oldest board call of the communicator.
    pub fn is_head(&self, id: usize) -> bool {
        self.queue.front() == Some(&id)
    }

    /// Whether board calls are queued.
    pub fn busy(&self) -> bool {
        !self.queue.is_empty()
    }

    /// Whether the board is set up and in use.
    pub fn ready(&self) -> bool {
        matches!(self.state, State::Ready(_))
    }

    /// Whether the board is known not to work for this communicator.
    pub fn unavailable(&self) -> bool {
        matches!(self.state, State::Unavailable)
    }
}

/// What one member does in a board call.
pub(crate) struct Task<'a> {
    pub collective: Collective,
    pub root: usize,
    /// The member's rank.
    pub me: usize,
    pub reduction: Option<&'a (Op, Datatype)>,
}

/// The error of a call on a board that is not set up yet.
fn not_set_up() -> CollError {
    CollError::Invalid("a board call before its board is set up".into())
}

/// How far one board call got through its phases.
#[derive(Default)]
pub(crate) struct Phases {
    /// Phase of chunk 0, once the call is at the head of its queue.
    first: Option<u64>,
    /// The chunk being worked on, and whether this member posted it.
    at: usize,
    posted: bool,
}

impl CommBoard {
    /// Whether a call may run on the board straight away: it is set up and
    /// no earlier call is queued.
    pub fn idle_and_ready(&self) -> bool {
        self.queue.is_empty() && self.ready()
    }

    /// Runs `task`'s phases over `data` (its input, then its output) as far
    /// as the other members let it; returns (finished, moved). Phases of
    /// at most [`SLOT_LEN`] bytes, a whole number of elements.
    pub fn step(
        &mut self,
        ph: &mut Phases,
        task: &Task,
        data: &mut [u8],
    ) -> Result<(bool, bool), CollError> {
        let elem = task.reduction.map_or(1, |(op, dt)| op.element_size(*dt));
        let chunk = SLOT_LEN - SLOT_LEN % elem;
        let chunks = data.len().div_ceil(chunk).max(1);
        let (me, root, c) = (task.me, task.root, task.collective);
        if c == Collective::Allreduce && data.len() >= SPLIT_MIN {
            return self.step_split(ph, task, data, chunk);
        }
        let first = self.first_phase(ph, task, data.len(), chunks)?;
        let State::Ready(board) = &self.state else {
            return Err(not_set_up());
        };
        let mut moved = false;
        while ph.at < chunks {
            let phase = first + ph.at as u64;
            let lo = (ph.at * chunk).min(data.len());
            let hi = (lo + chunk).min(data.len());
            if !ph.posted {
                let writes = match c {
                    Collective::Barrier => false,
                    Collective::Bcast => me == root,
                    _ => true,
                };
                if writes {
                    // The buffer was last used at phase − BUFFERS: everyone
                    // must be done reading it.
                    let reuse = phase.saturating_sub(BUFFERS as u64);
                    if reuse > 0 && !self.seen.all_done(board, reuse) {
                        self.done.flush(board, me);
                        if !moved {
                            self.liveness.waiting(board)?;
                        }
                        return Ok((false, moved));
                    }
                    board.write(phase, me, &data[lo..hi]);
                }
                if writes || c == Collective::Barrier {
                    board.publish(phase, me, hi - lo);
                }
                ph.posted = true;
                moved = true;
            }
            let needs_all = match c {
                Collective::Barrier | Collective::Allreduce => true,
                Collective::Reduce => me == root,
                _ => false,
            };
            let ready = if needs_all {
                self.seen.all_posted(board, phase, hi - lo)
            } else {
                c != Collective::Bcast
                    || me == root
                    || self.seen.posted(board, root, phase, hi - lo)
            };
            if !ready {
                self.done.flush(board, me);
                if !moved {
                    self.liveness.waiting(board)?;
                }
                return Ok((false, moved));
            }
            let reduces = c == Collective::Allreduce || (c == Collective::Reduce && me == root);
            if c == Collective::Bcast && me != root {
                board.read(phase, root, &mut data[lo..hi]);
            } else if reduces {
                let (op, dt) = task
                    .reduction
                    .ok_or_else(|| CollError::Invalid("a reduction without an operation".into()))?;
                let out = &mut data[lo..hi];
                let scratch = &mut self.scratch;
                board.with_slots(phase, hi - lo, |slots| {
                    reduce_canonical(op, *dt, slots, out, scratch)
                })?;
            }
            self.done.finished(board, me, phase);
            ph.at += 1;
            ph.posted = false;
            moved = true;
        }
        Ok((true, moved))
    }

    /// The first phase of the call `ph` tracks. On the call's first step it
    /// takes `phases` phases for it and announces the call (its number and
    /// arguments) on the board, so that a member calling with other
    /// arguments is caught instead of hanging.
    fn first_phase(
        &mut self,
        ph: &mut Phases,
        task: &Task,
        len: usize,
        phases: usize,
    ) -> Result<u64, CollError> {
        if let Some(first) = ph.first {
            return Ok(first);
        }
        let State::Ready(board) = &self.state else {
            return Err(not_set_up());
        };
        let first = self.next_phase;
        self.next_phase += phases as u64;
        ph.first = Some(first);
        self.calls += 1;
        let word = call_word(self.calls, task, len);
        self.liveness.call = (self.calls, word);
        board.announce_call(task.me, self.calls, word);
        Ok(first)
    }

    /// A large allreduce in two phases per chunk, so that no member reads
    /// every member's whole chunk: in the first each member publishes its
    /// chunk and reduces its share (1/P of the elements) from all of them;
    /// in the second it publishes that share of the result and copies the
    /// others' shares. Every element is still reduced by
    /// [`reduce_canonical`] over all members in rank order, so the bits
    /// are those of the one-phase form.
    fn step_split(
        &mut self,
        ph: &mut Phases,
        task: &Task,
        data: &mut [u8],
        chunk: usize,
    ) -> Result<(bool, bool), CollError> {
        let (op, dt) = task
            .reduction
            .ok_or_else(|| CollError::Invalid("a reduction without an operation".into()))?;
        let elem = op.element_size(*dt);
        let me = task.me;
        let phases = 2 * data.len().div_ceil(chunk).max(1);
        let first = self.first_phase(ph, task, data.len(), phases)?;
        let State::Ready(board) = &self.state else {
            return Err(not_set_up());
        };
        let p = board.ranks();
        let mut moved = false;
        macro_rules! wait {
            () => {{
                self.done.flush(board, me);
                if !moved {
                    self.liveness.waiting(board)?;
                }
                return Ok((false, moved));
            }};
        }
        while ph.at < phases {
            let phase = first + ph.at as u64;
            let lo = (ph.at / 2 * chunk).min(data.len());
            let hi = (lo + chunk).min(data.len());
            let elems = (hi - lo) / elem;
            // Member r's share of the chunk, in bytes from its start.
            let share = |r: usize| (r * elems / p * elem)..((r + 1) * elems / p * elem);
            let reuse = phase.saturating_sub(BUFFERS as u64);
            if !ph.posted {
                if reuse > 0 && !self.seen.all_done(board, reuse) {
                    wait!();
                }
                if ph.at.is_multiple_of(2) {
                    board.write(phase, me, &data[lo..hi]);
                    board.publish(phase, me, hi - lo);
                } else {
                    let mine = share(me);
                    let bytes = &data[lo + mine.start..lo + mine.end];
                    board.write(phase, me, bytes);
                    board.publish(phase, me, mine.len());
                }
                ph.posted = true;
                moved = true;
            }
            if ph.at.is_multiple_of(2) {
                if !self.seen.all_posted(board, phase, hi - lo) {
                    wait!();
                }
                let mine = share(me);
                let out = &mut data[lo + mine.start..lo + mine.end];
                let scratch = &mut self.scratch;
                board.with_slots(phase, hi - lo, |slots| {
                    let parts: Vec<&[u8]> = slots.iter().map(|s| &s[mine.clone()]).collect();
                    reduce_canonical(op, *dt, &parts, out, scratch)
                })?;
            } else {
                if !(0..p).all(|r| self.seen.posted(board, r, phase, share(r).len())) {
                    wait!();
                }
                for r in (0..p).filter(|&r| r != me) {
                    let theirs = share(r);
                    board.read(phase, r, &mut data[lo + theirs.start..lo + theirs.end]);
                }
            }
            self.done.finished(board, me, phase);
            ph.at += 1;
            ph.posted = false;
            moved = true;
        }
        Ok((true, moved))
    }
}

/// One board call in progress.
pub(crate) struct BoardRun {
    comm: Comm,
    /// The call, its input moved to `data`.
    call: Call,
    tag: u64,
    /// Input, then output (bcast: the root's data; reductions combine in
    /// place once the input is on the board).
    data: Vec<u8>,
    phases: Phases,
    /// The set-up agreement in flight (first call only).
    agreement: Option<Box<Running>>,
}

/// How far a board call got.
pub(crate) enum BoardAdvance {
    /// Waiting; whether anything moved.
    Pending(bool),
    /// Done; the output.
    Done(Vec<u8>),
    /// The board cannot be used: run this call over messages.
    Fallback(Call),
}

impl BoardRun {
    /// A board call of `comm` (see [`eligible`]) whose messages, if it
    /// sets the board up or falls back, carry `tag`.
    pub fn new(comm: Comm, mut call: Call, tag: u64, pool: &mut super::pool::Pool) -> BoardRun {
        let mut data = std::mem::take(&mut call.input);
        if call.collective == Collective::Bcast && comm.rank() != call.root {
            pool.give(data);
            data = pool.take(call.len);
        }
        BoardRun {
            comm,
            call,
            tag,
            data,
            phases: Phases::default(),
            agreement: None,
        }
    }

    /// The communicator's id.
    pub fn comm_id(&self) -> u32 {
        self.comm.id()
    }

    /// The communicator.
    pub fn comm(&self) -> &Comm {
        &self.comm
    }

    /// The tag of its messages.
    pub fn tag(&self) -> u64 {
        self.tag
    }

    /// Moves the call as far as it can without waiting. `head` says it is
    /// the oldest board call of its communicator: only that one may run.
    pub fn advance(
        &mut self,
        head: bool,
        cb: &mut CommBoard,
        msg: &mut Messenger,
    ) -> Result<BoardAdvance, CollError> {
        if !head {
            return Ok(BoardAdvance::Pending(false));
        }
        if let Some(e) = self.failed_member(msg) {
            return Err(e);
        }
        match &cb.state {
            State::Unknown => {
                let board = self.map_board(msg);
                self.agreement = Some(Box::new(self.agree(board.is_some(), msg)?));
                cb.state = State::Agreeing(board);
                self.advance_agreement(cb, msg)
            }
            State::Agreeing(_) => self.advance_agreement(cb, msg),
            State::Unavailable => Ok(BoardAdvance::Fallback(self.take_call())),
            State::Ready(_) => self.run_phases(cb),
        }
    }

    /// The call with its input back, for running it over messages.
    fn take_call(&mut self) -> Call {
        let mut call =
            std::mem::replace(&mut self.call, Call::new(Collective::Barrier, Vec::new()));
        call.input = std::mem::take(&mut self.data);
        if call.collective == Collective::Bcast && self.comm.rank() != call.root {
            call.input.clear();
        }
        call
    }

    fn failed_member(&self, msg: &Messenger) -> Option<CollError> {
        self.comm
            .members()
            .iter()
            .find_map(|&a| msg.peer_failure(a))
    }

    /// Maps the communicator's board, if this endpoint has shared memory.
    fn map_board(&self, msg: &mut Messenger) -> Option<bcl_shm::Board> {
        let ep = msg.endpoint_mut();
        let shm = ep.method_mut::<bcl_shm::ShmMethod>()?;
        let cfg = shm.mailbox().config();
        let (job, dir) = (cfg.job, cfg.dir.clone());
        let mut h = rustc_hash::FxHasher::default();
        self.comm.id().hash(&mut h);
        for a in self.comm.members() {
            (a.node.0, a.port.0).hash(&mut h);
        }
        let name = bcl_shm::board_name(job, self.comm.nodes()[0], h.finish());
        match bcl_shm::Board::open(&dir, &name, self.comm.size(), BUFFERS, SLOT_LEN).and_then(|b| {
            b.join(self.comm.rank())
                .map_err(|source| bcl_shm::ShmError::Io {
                    context: "reading /proc/self/stat".into(),
                    source,
                })?;
            Ok(b)
        }) {
            Ok(b) => Some(b),
            Err(e) => {
                eprintln!("bcl: collectives over messages on this node: board {name}: {e}");
                None
            }
        }
    }

    /// Starts the one-byte allreduce (bitwise and) that tells every member
    /// whether all of them mapped the board. Its messages carry this
    /// call's tag with the top bit set, a tag no call uses.
    fn agree(&self, mapped: bool, msg: &mut Messenger) -> Result<Running, CollError> {
        let shape = Shape {
            collective: Collective::Allreduce,
            rank: self.comm.rank(),
            size: self.comm.size(),
            root: 0,
            len: 1,
            elem: 1,
            counts: &[],
            send_counts: &[],
            recv_counts: &[],
            nodes: self.comm.nodes(),
        };
        let schedule = alg::schedule(Algorithm::RecursiveDoubling, &shape)
            .map_err(|e| CollError::Invalid(e.to_string()))?;
        Ok(Running::new(
            self.comm.clone(),
            std::sync::Arc::new(schedule),
            (vec![u8::from(mapped)], 1),
            Some((Op::Builtin(BuiltinOp::BitAnd), Datatype::U8)),
            self.tag | 1 << 63,
            &mut msg.pool,
        ))
    }

    fn advance_agreement(
        &mut self,
        cb: &mut CommBoard,
        msg: &mut Messenger,
    ) -> Result<BoardAdvance, CollError> {
        let Some(run) = self.agreement.as_mut() else {
            return Err(CollError::Invalid(
                "a board call found another call's set-up in progress".into(),
            ));
        };
        let out = match run.advance(msg)? {
            Advance::Pending => return Ok(BoardAdvance::Pending(false)),
            Advance::Done(out) => out,
        };
        self.agreement = None;
        let State::Agreeing(board) = std::mem::take(&mut cb.state) else {
            unreachable!("advance_agreement runs while agreeing");
        };
        let all_mapped = out.first() == Some(&1);
        if self.comm.rank() == 0 {
            // Every member has mapped it or given up: nobody opens it again.
            if let Some(b) = &board {
                if let Err(e) = b.unlink() {
                    eprintln!("bcl: removing board {}: {e}", b.path().display());
                }
            }
        }
        match (all_mapped, board) {
            (true, Some(b)) => {
                cb.state = State::Ready(b);
                cb.liveness.members = self.comm.members().to_vec();
                cb.me = self.comm.rank();
                cb.seen = Seen {
                    posted: vec![0; self.comm.size()],
                    done: vec![0; self.comm.size()],
                };
                cb.next_phase = 1;
                self.run_phases(cb)
            }
            _ => {
                cb.state = State::Unavailable;
                Ok(BoardAdvance::Fallback(self.take_call()))
            }
        }
    }

    /// Runs the call's phases on a ready board as far as the other
    /// members let it.
    fn run_phases(&mut self, cb: &mut CommBoard) -> Result<BoardAdvance, CollError> {
        let call = Task {
            collective: self.call.collective,
            root: self.call.root,
            me: self.comm.rank(),
            reduction: self.call.reduction.as_ref(),
        };
        let (done, moved) = cb.step(&mut self.phases, &call, &mut self.data)?;
        Ok(if done {
            BoardAdvance::Done(std::mem::take(&mut self.data))
        } else {
            BoardAdvance::Pending(moved)
        })
    }
}
