//! The collective algorithms: each a pure function from a [`Shape`] to the
//! calling rank's [`Schedule`].
//!
//! # Buffer layouts
//!
//! All lengths are in bytes. `counts[r]` is rank r's block; blocks are
//! packed in rank order (block r starts at the sum of `counts[..r]`).
//!
//! | collective | INPUT | OUTPUT |
//! |---|---|---|
//! | barrier | empty | empty |
//! | bcast | root: `len` bytes; others empty | `len` |
//! | reduce | `len` | `len` (the result at the root; scratch elsewhere) |
//! | allreduce | `len` | `len` |
//! | gather | `counts[rank]` | root: all blocks; others empty |
//! | scatter | root: all blocks; others empty | `counts[rank]` |
//! | allgather | `counts[rank]` | all blocks |
//! | alltoall | `send_counts` blocks, packed | `recv_counts` blocks, packed |
//! | reduce-scatter | all blocks (`len` = their sum) | `counts[rank]` |
//! | scan, exscan | `len` | `len` (exscan: rank 0's output is left zeroed) |
//!
//! # Determinism
//!
//! An algorithm marked deterministic ([`Algorithm::deterministic`]) computes
//! every element of a reduction with the canonical tree over ranks
//! ([`super::op::reduce_canonical`], split by
//! [`super::op::canonical_split`]); so its floating-point results are the
//! same bits for every deterministic algorithm, root and placement of one
//! communicator size.

use super::schedule::{Round, Schedule, Step};

mod allgather;
mod allreduce;
mod alltoall;
mod barrier;
mod blocks;
mod canonical;
mod linear;
mod reduce_scatter;
mod scan;
mod scatter_allgather;
mod tree;
mod two_level;

#[cfg(test)]
mod tests;

/// The collective operations.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Collective {
    /// Wait for everyone.
    Barrier,
    /// Root's data to everyone.
    Bcast,
    /// Everyone's data combined at the root.
    Reduce,
    /// Everyone's data combined at everyone.
    Allreduce,
    /// Everyone's block to the root.
    Gather,
    /// The root's blocks, one to each.
    Scatter,
    /// Everyone's block to everyone.
    Allgather,
    /// A block from every rank to every rank.
    Alltoall,
    /// Combined, then block r to rank r.
    ReduceScatter,
    /// Rank r gets the combination of ranks 0..=r.
    Scan,
    /// Rank r gets the combination of ranks 0..r.
    Exscan,
}

impl Collective {
    /// Every collective.
    pub const ALL: [Collective; 11] = [
        Collective::Barrier,
        Collective::Bcast,
        Collective::Reduce,
        Collective::Allreduce,
        Collective::Gather,
        Collective::Scatter,
        Collective::Allgather,
        Collective::Alltoall,
        Collective::ReduceScatter,
        Collective::Scan,
        Collective::Exscan,
    ];

    /// Lower-case name, as in `BCL_COLL_ALG` (`reduce_scatter`).
    pub fn name(self) -> &'static str {
        match self {
            Collective::Barrier => "barrier",
            Collective::Bcast => "bcast",
            Collective::Reduce => "reduce",
            Collective::Allreduce => "allreduce",
            Collective::Gather => "gather",
            Collective::Scatter => "scatter",
            Collective::Allgather => "allgather",
            Collective::Alltoall => "alltoall",
            Collective::ReduceScatter => "reduce_scatter",
            Collective::Scan => "scan",
            Collective::Exscan => "exscan",
        }
    }

    /// The collective named `s`.
    pub fn from_name(s: &str) -> Option<Collective> {
        Collective::ALL.into_iter().find(|c| c.name() == s)
    }

    /// Whether it combines data with a reduction.
    pub fn reduces(self) -> bool {
        matches!(
            self,
            Collective::Reduce
                | Collective::Allreduce
                | Collective::ReduceScatter
                | Collective::Scan
                | Collective::Exscan
        )
    }

    /// The algorithms that implement it.
    pub fn algorithms(self) -> &'static [Algorithm] {
        use Algorithm::*;
        match self {
            Collective::Barrier => &[Dissemination, TwoLevel],
            Collective::Bcast => &[BinomialTree, ScatterAllgather, TwoLevel],
            Collective::Reduce => &[BinomialTree, ReduceScatterGather, TwoLevel],
            Collective::Allreduce => &[
                RecursiveDoubling,
                ReduceBcast,
                Rabenseifner,
                ReduceScatterAllgather,
                Ring,
                TwoLevel,
            ],
            Collective::Gather | Collective::Scatter => &[BinomialTree, Linear],
            Collective::Allgather => &[Ring, RecursiveDoubling, Bruck],
            Collective::Alltoall => &[Pairwise, Bruck],
            Collective::ReduceScatter => &[Pairwise, RecursiveHalving, Ring],
            Collective::Scan | Collective::Exscan => &[RecursiveDoubling],
        }
    }
}

/// An algorithm; which collectives it serves is
/// [`Collective::algorithms`]'s business.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Algorithm {
    /// Each round, rank r signals r + 2^k and waits for r − 2^k.
    Dissemination,
    /// Binomial tree rooted at the root (bcast, scatter, gather; reduce
    /// combines along the canonical tree, each block gathered at its
    /// leader: the root where it is inside, else the lowest rank).
    BinomialTree,
    /// The root exchanges with every rank directly.
    Linear,
    /// Bcast as a binomial scatter of `len / P` pieces plus a ring
    /// allgather (large messages).
    ScatterAllgather,
    /// Reduce as a pairwise reduce-scatter plus a gather to the root.
    ReduceScatterGather,
    /// Partners at distance 2^k exchange what they hold (allreduce on the
    /// canonical tree for any P; allgather; scan).
    RecursiveDoubling,
    /// Allreduce as a binomial reduce to rank 0 and a binomial bcast.
    ReduceBcast,
    /// Allreduce as recursive-halving reduce-scatter plus
    /// recursive-doubling allgather (P a power of two).
    Rabenseifner,
    /// Allreduce as a pairwise reduce-scatter plus a ring allgather.
    ReduceScatterAllgather,
    /// Neighbour exchange round a ring (allgather; reduce-scatter and
    /// allreduce combine in ring order: not deterministic).
    Ring,
    /// Bruck's log-step algorithm (allgather, and alltoall with equal
    /// blocks).
    Bruck,
    /// P − 1 rounds, rank r exchanging with r ± k.
    Pairwise,
    /// Reduce-scatter halving the data each round (P a power of two).
    RecursiveHalving,
    /// Shared memory inside a node, one leader per node across nodes
    /// (BCL-3's hierarchy).
    TwoLevel,
}

impl Algorithm {
    /// Every algorithm.
    pub const ALL: [Algorithm; 14] = [
        Algorithm::Dissemination,
        Algorithm::BinomialTree,
        Algorithm::Linear,
        Algorithm::ScatterAllgather,
        Algorithm::ReduceScatterGather,
        Algorithm::RecursiveDoubling,
        Algorithm::ReduceBcast,
        Algorithm::Rabenseifner,
        Algorithm::ReduceScatterAllgather,
        Algorithm::Ring,
        Algorithm::Bruck,
        Algorithm::Pairwise,
        Algorithm::RecursiveHalving,
        Algorithm::TwoLevel,
    ];

    /// Lower-case name, as in `BCL_COLL_ALG=allreduce:ring`.
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::Dissemination => "dissemination",
            Algorithm::BinomialTree => "binomial",
            Algorithm::Linear => "linear",
            Algorithm::ScatterAllgather => "scatter_allgather",
            Algorithm::ReduceScatterGather => "reduce_scatter_gather",
            Algorithm::RecursiveDoubling => "recursive_doubling",
            Algorithm::ReduceBcast => "reduce_bcast",
            Algorithm::Rabenseifner => "rabenseifner",
            Algorithm::ReduceScatterAllgather => "reduce_scatter_allgather",
            Algorithm::Ring => "ring",
            Algorithm::Bruck => "bruck",
            Algorithm::Pairwise => "pairwise",
            Algorithm::RecursiveHalving => "recursive_halving",
            Algorithm::TwoLevel => "two_level",
        }
    }

    /// The algorithm named `s`.
    pub fn from_name(s: &str) -> Option<Algorithm> {
        Algorithm::ALL.into_iter().find(|a| a.name() == s)
    }

    /// Whether its reductions follow the canonical tree (see the module
    /// documentation). Algorithms of collectives without reduction are
    /// deterministic trivially.
    pub fn deterministic(self, c: Collective) -> bool {
        !(c.reduces() && self == Algorithm::Ring)
    }
}

/// What one rank's schedule is generated from.
#[derive(Clone, Debug)]
pub struct Shape<'a> {
    /// The collective.
    pub collective: Collective,
    /// This rank.
    pub rank: usize,
    /// Communicator size P.
    pub size: usize,
    /// The root (rooted collectives; 0 otherwise).
    pub root: usize,
    /// Message length in bytes (bcast, reduce, allreduce, scan, exscan;
    /// reduce-scatter: the sum of `counts`).
    pub len: usize,
    /// Element size in bytes: data is split only at element boundaries (1
    /// for collectives without reduction).
    pub elem: usize,
    /// Block lengths per rank (gather, scatter, allgather, reduce-scatter;
    /// empty otherwise).
    pub counts: &'a [usize],
    /// Alltoall: bytes this rank sends to each rank.
    pub send_counts: &'a [usize],
    /// Alltoall: bytes this rank receives from each rank.
    pub recv_counts: &'a [usize],
    /// The node of each rank (for two-level algorithms).
    pub nodes: &'a [u32],
}

/// Why an algorithm cannot serve a shape.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{algorithm} cannot run {collective}: {reason}")]
pub struct NotApplicable {
    /// The algorithm's name.
    pub algorithm: &'static str,
    /// The collective's name.
    pub collective: &'static str,
    /// Why.
    pub reason: String,
}

/// The calling rank's schedule of `alg` for `shape`.
pub fn schedule(alg: Algorithm, shape: &Shape) -> Result<Schedule, NotApplicable> {
    generate(alg, shape).map(Schedule::compact)
}

fn generate(alg: Algorithm, shape: &Shape) -> Result<Schedule, NotApplicable> {
    use Algorithm as A;
    use Collective as C;
    check_shape(alg, shape)?;
    let schedule = match (shape.collective, alg) {
        (C::Barrier, A::Dissemination) => barrier::dissemination(shape),
        (C::Barrier, A::TwoLevel) => two_level::barrier(alg, shape)?,
        (C::Bcast, A::BinomialTree) => tree::bcast(shape),
        (C::Bcast, A::ScatterAllgather) => scatter_allgather::bcast(shape),
        (C::Bcast, A::TwoLevel) => two_level::bcast(alg, shape)?,
        (C::Reduce, A::BinomialTree) => tree::reduce(shape),
        (C::Reduce, A::ReduceScatterGather) => reduce_scatter::reduce_then_gather(shape),
        (C::Reduce, A::TwoLevel) => two_level::reduce(alg, shape)?,
        (C::Allreduce, A::RecursiveDoubling) => allreduce::recursive_doubling(shape),
        (C::Allreduce, A::ReduceBcast) => allreduce::reduce_bcast(shape),
        (C::Allreduce, A::Rabenseifner) => allreduce::rabenseifner(alg, shape)?,
        (C::Allreduce, A::ReduceScatterAllgather) => allreduce::reduce_scatter_allgather(shape),
        (C::Allreduce, A::Ring) => allreduce::ring(shape),
        (C::Allreduce, A::TwoLevel) => two_level::allreduce(alg, shape)?,
        (C::Gather, A::BinomialTree) => tree::gather(shape),
        (C::Gather, A::Linear) => linear::gather(shape),
        (C::Scatter, A::BinomialTree) => tree::scatter(shape),
        (C::Scatter, A::Linear) => linear::scatter(shape),
        (C::Allgather, A::Ring) => allgather::ring(shape),
        (C::Allgather, A::RecursiveDoubling) => allgather::recursive_doubling(alg, shape)?,
        (C::Allgather, A::Bruck) => allgather::bruck(shape),
        (C::Alltoall, A::Pairwise) => alltoall::pairwise(shape),
        (C::Alltoall, A::Bruck) => alltoall::bruck(alg, shape)?,
        (C::ReduceScatter, A::Pairwise) => reduce_scatter::pairwise(shape),
        (C::ReduceScatter, A::RecursiveHalving) => reduce_scatter::recursive_halving(alg, shape)?,
        (C::ReduceScatter, A::Ring) => reduce_scatter::ring(shape),
        (C::Scan, A::RecursiveDoubling) => scan::scan(shape, scan::Prefix::Inclusive),
        (C::Exscan, A::RecursiveDoubling) => scan::scan(shape, scan::Prefix::Exclusive),
        _ => {
            return Err(not_applicable(
                alg,
                shape,
                "not an algorithm of this collective",
            ))
        }
    };
    Ok(merge_local_rounds(schedule.compact()))
}

/// Refuses shapes whose size is not a power of two, for the algorithms
/// that pair ranks by XOR.
fn require_power_of_two(alg: Algorithm, shape: &Shape) -> Result<(), NotApplicable> {
    let p = shape.size;
    if p.is_power_of_two() {
        Ok(())
    } else {
        Err(not_applicable(
            alg,
            shape,
            format!("{p} ranks is not a power of two"),
        ))
    }
}

/// The error for `alg` refusing `shape` because of `reason`.
fn not_applicable(alg: Algorithm, shape: &Shape, reason: impl Into<String>) -> NotApplicable {
    NotApplicable {
        algorithm: alg.name(),
        collective: shape.collective.name(),
        reason: reason.into(),
    }
}

/// Refuses shapes no algorithm can serve (ranks out of range, block lists
/// of the wrong length, lengths that are not whole elements), so that the
/// algorithms can index freely.
fn check_shape(alg: Algorithm, shape: &Shape) -> Result<(), NotApplicable> {
    let refuse = |reason: String| Err(not_applicable(alg, shape, reason));
    let p = shape.size;
    if p == 0 || shape.rank >= p || shape.root >= p {
        return refuse(format!(
            "rank {} and root {} must be below the size {p}",
            shape.rank, shape.root
        ));
    }
    let c = shape.collective;
    if c.reduces() && (shape.elem == 0 || !shape.len.is_multiple_of(shape.elem)) {
        return refuse(format!(
            "the length {} is not a whole number of {}-byte elements",
            shape.len, shape.elem
        ));
    }
    let blocked = matches!(
        c,
        Collective::Gather
            | Collective::Scatter
            | Collective::Allgather
            | Collective::ReduceScatter
    );
    if blocked && shape.counts.len() != p {
        return refuse(format!("{} counts for {p} ranks", shape.counts.len()));
    }
    if c == Collective::ReduceScatter {
        if shape.counts.iter().sum::<usize>() != shape.len {
            return refuse(format!(
                "the counts do not add up to the length {}",
                shape.len
            ));
        }
        if shape.counts.iter().any(|n| !n.is_multiple_of(shape.elem)) {
            return refuse(format!(
                "a count is not a whole number of {}-byte elements",
                shape.elem
            ));
        }
    }
    if c == Collective::Alltoall && (shape.send_counts.len() != p || shape.recv_counts.len() != p) {
        return refuse(format!(
            "{} send counts and {} receive counts for {p} ranks",
            shape.send_counts.len(),
            shape.recv_counts.len()
        ));
    }
    Ok(())
}

/// Moves the steps of every round that has only local steps to the front
/// of the next round: local steps run first in a round, so the result is
/// the same and the schedule has fewer rounds. Algorithms can then write a
/// local preparation as a round of its own.
fn merge_local_rounds(schedule: Schedule) -> Schedule {
    let mut rounds: Vec<Round> = Vec::with_capacity(schedule.rounds.len());
    let mut pending: Vec<Step> = Vec::new();
    for round in schedule.rounds {
        let local = round
            .steps
            .iter()
            .all(|s| matches!(s, Step::Copy { .. } | Step::Reduce { .. }));
        pending.extend(round.steps);
        if !local {
            rounds.push(Round {
                steps: std::mem::take(&mut pending),
            });
        }
    }
    if !pending.is_empty() {
        rounds.push(Round { steps: pending });
    }
    Schedule {
        scratch: schedule.scratch,
        rounds,
    }
}
