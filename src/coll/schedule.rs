//! A collective operation as data: per rank, a list of rounds of sends,
//! receives and local steps.
//!
//! Every algorithm in [`super::alg`] is a function from (rank, size,
//! message layout) to a [`Schedule`]; nothing in an algorithm does I/O. The
//! same schedules run over the network (the request engine in
//! [`super::Coll`]), in memory for tests ([`super::sim`]) and in the LogGP
//! timing model ([`super::cost`]).
//!
//! # Round semantics
//!
//! A round runs in three phases:
//! 1. its local steps ([`Step::Copy`], [`Step::Reduce`]) in order;
//! 2. all its sends and receives at once (a send reads its range as it is
//!    after phase 1);
//! 3. when every receive of the round has arrived, the received data is
//!    written or combined into place in step order — never in arrival
//!    order, so results do not depend on timing.
//!
//! The next round starts after phase 3. Two receives of one round must not
//! write the same bytes unless both combine (then step order decides the
//! operand order). The messages one rank sends another in one round are
//! matched in the order they are listed.

use std::ops::Range;

/// Index of a buffer of a running operation. The engine owns the buffers;
/// [`Layout`] says which is which.
pub type Buf = usize;

/// The operation's input (the user's contribution).
pub const INPUT: Buf = 0;
/// The operation's output.
pub const OUTPUT: Buf = 1;
/// First scratch buffer; scratch buffers are sized by [`Schedule::scratch`].
pub const SCRATCH: Buf = 2;

/// How received bytes go into their buffer range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Combine {
    /// Overwrite the range.
    Replace,
    /// `range = received op range`: the received data is the left
    /// (lower-ranked) operand.
    IncomingLeft,
    /// `range = range op received`: the received data is the right
    /// (higher-ranked) operand.
    IncomingRight,
}

/// One step of a round.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Send `buf[range]` to the communicator rank `to`.
    Send {
        /// Destination rank.
        to: usize,
        /// Source buffer.
        buf: Buf,
        /// Bytes of it.
        range: Range<usize>,
    },
    /// Receive a message of exactly `range.len()` bytes from rank `from`
    /// into `buf[range]`.
    Recv {
        /// Source rank.
        from: usize,
        /// Destination buffer.
        buf: Buf,
        /// Where in it.
        range: Range<usize>,
        /// Overwrite or combine.
        combine: Combine,
    },
    /// Copy `from[range]` to `to[at..at + range.len()]`.
    Copy {
        /// Source buffer.
        from: Buf,
        /// Bytes of it.
        range: Range<usize>,
        /// Destination buffer.
        to: Buf,
        /// Offset in it.
        at: usize,
    },
    /// Combine `from[range]` into `to[at..at + range.len()]`; `from_is_left`
    /// says whether the source is the left operand.
    Reduce {
        /// Source buffer.
        from: Buf,
        /// Bytes of it.
        range: Range<usize>,
        /// Destination buffer (both operand and result).
        to: Buf,
        /// Offset in it.
        at: usize,
        /// The source is the left operand (`to = from op to`).
        from_is_left: bool,
    },
}

/// Steps that start together (see the module documentation).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Round {
    /// The steps, local ones first by convention.
    pub steps: Vec<Step>,
}

/// What one rank does in one collective operation.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Schedule {
    /// Lengths of the scratch buffers [`SCRATCH`], `SCRATCH + 1`, ….
    pub scratch: Vec<usize>,
    /// The rounds, in order.
    pub rounds: Vec<Round>,
}

impl Schedule {
    /// An empty schedule.
    pub fn new() -> Schedule {
        Schedule::default()
    }

    /// Adds a scratch buffer of `len` bytes and returns its index.
    pub fn scratch(&mut self, len: usize) -> Buf {
        self.scratch.push(len);
        SCRATCH + self.scratch.len() - 1
    }

    /// Starts a new round and returns it.
    pub fn round(&mut self) -> &mut Round {
        self.rounds.push(Round::default());
        self.rounds.last_mut().expect("just pushed")
    }

    /// Messages this rank sends, over all rounds.
    pub fn sends(&self) -> usize {
        self.steps()
            .filter(|s| matches!(s, Step::Send { .. }))
            .count()
    }

    /// Every step, round by round.
    pub fn steps(&self) -> impl Iterator<Item = &Step> {
        self.rounds.iter().flat_map(|r| r.steps.iter())
    }

    /// Drops empty rounds (an algorithm may open a round it ends up not
    /// using).
    pub fn compact(mut self) -> Schedule {
        self.rounds.retain(|r| !r.steps.is_empty());
        self
    }
}

impl Round {
    /// Sends `buf[range]` to `to`.
    pub fn send(&mut self, to: usize, buf: Buf, range: Range<usize>) -> &mut Self {
        if !range.is_empty() {
            self.steps.push(Step::Send { to, buf, range });
        }
        self
    }

    /// Receives into `buf[range]` from `from`.
    pub fn recv(
        &mut self,
        from: usize,
        buf: Buf,
        range: Range<usize>,
        combine: Combine,
    ) -> &mut Self {
        if !range.is_empty() {
            self.steps.push(Step::Recv {
                from,
                buf,
                range,
                combine,
            });
        }
        self
    }

    /// Copies `from[range]` to `to[at..]`.
    pub fn copy(&mut self, from: Buf, range: Range<usize>, to: Buf, at: usize) -> &mut Self {
        if !range.is_empty() && (from != to || range.start != at) {
            self.steps.push(Step::Copy {
                from,
                range,
                to,
                at,
            });
        }
        self
    }

    /// Combines `from[range]` into `to[at..]`.
    pub fn reduce(
        &mut self,
        from: Buf,
        range: Range<usize>,
        to: Buf,
        at: usize,
        from_is_left: bool,
    ) -> &mut Self {
        if !range.is_empty() {
            self.steps.push(Step::Reduce {
                from,
                range,
                to,
                at,
                from_is_left,
            });
        }
        self
    }
}

/// What a call's algorithm and schedule depend on: the shape without the
/// placement (a communicator id names one member list in a process), the
/// algorithm asked for, if any, and whether reductions must be
/// deterministic.
// The manual `PartialEq` is the derived one without `memcmp` on empty
// slices (see `same`), so it agrees with the derived `Hash`.
#[allow(clippy::derived_hash_with_manual_eq)]
#[derive(Clone, Eq, Hash)]
struct CacheKey {
    communicator: u32,
    forced: Option<super::alg::Algorithm>,
    deterministic: bool,
    collective: super::alg::Collective,
    rank: usize,
    root: usize,
    len: usize,
    elem: usize,
    counts: Vec<usize>,
    send_counts: Vec<usize>,
    recv_counts: Vec<usize>,
}

impl PartialEq for CacheKey {
    fn eq(&self, o: &Self) -> bool {
        self.communicator == o.communicator
            && self.forced == o.forced
            && self.deterministic == o.deterministic
            && self.collective == o.collective
            && self.rank == o.rank
            && self.root == o.root
            && self.len == o.len
            && self.elem == o.elem
            && same(&self.counts, &o.counts)
            && same(&self.send_counts, &o.send_counts)
            && same(&self.recv_counts, &o.recv_counts)
    }
}

/// Slice equality that never calls `memcmp` on empty slices: glibc's
/// AVX-512 `memcmp` reads an empty `Vec`'s dangling pointer with a masked
/// load, which costs a microcode assist — 160 ns per comparison measured
/// here, against 5 ns for three elements — and the derived `==` on a key
/// of three empty lists made that half of a small collective's time.
fn same<T: PartialEq>(a: &[T], b: &[T]) -> bool {
    a.len() == b.len() && (a.is_empty() || a == b)
}

/// Algorithms chosen and schedules generated, by communicator and shape: a
/// collective called again with the same arguments (the common case in a
/// loop) costs one lookup instead of a selection and a generation.
#[derive(Default)]
pub struct Cache {
    map: rustc_hash::FxHashMap<CacheKey, (super::alg::Algorithm, std::sync::Arc<Schedule>)>,
}

/// Entries a cache keeps at most; beyond, it starts afresh.
const CACHE_LIMIT: usize = 256;

impl Cache {
    /// The algorithm (`forced`, or else what `choose` picks) and its
    /// schedule for `shape` on the communicator `communicator`, found once.
    pub fn get<E: From<super::alg::NotApplicable>>(
        &mut self,
        communicator: u32,
        forced: Option<super::alg::Algorithm>,
        deterministic: bool,
        shape: &super::alg::Shape,
        choose: impl FnOnce() -> Result<super::alg::Algorithm, E>,
    ) -> Result<(super::alg::Algorithm, std::sync::Arc<Schedule>), E> {
        let key = CacheKey {
            communicator,
            forced,
            deterministic,
            collective: shape.collective,
            rank: shape.rank,
            root: shape.root,
            len: shape.len,
            elem: shape.elem,
            counts: shape.counts.to_vec(),
            send_counts: shape.send_counts.to_vec(),
            recv_counts: shape.recv_counts.to_vec(),
        };
        if let Some((a, s)) = self.map.get(&key) {
            return Ok((*a, s.clone()));
        }
        let algorithm = match forced {
            Some(a) => a,
            None => choose()?,
        };
        let s = std::sync::Arc::new(super::alg::schedule(algorithm, shape)?);
        if self.map.len() >= CACHE_LIMIT {
            self.map.clear();
        }
        self.map.insert(key, (algorithm, s.clone()));
        Ok((algorithm, s))
    }
}
