//! Allreduce: recursive doubling on the canonical tree (any P), reduce plus
//! bcast, Rabenseifner (P a power of two), reduce-scatter plus allgather,
//! and ring (not deterministic).

use super::allgather::ring_allgather;
use super::blocks::{ceil_log2, Blocks};
use super::canonical::Siblings;
use super::reduce_scatter::{pairwise_reduce_scatter, ring_reduce_scatter};
use super::tree::{binomial_bcast, canonical_reduce};
use super::{Algorithm, NotApplicable, Shape};
use crate::coll::schedule::{Buf, Combine, Schedule, INPUT, OUTPUT};
use std::ops::Range;

/// Recursive doubling generalized to any P (see [`exchange_partials`]).
pub(super) fn recursive_doubling(shape: &Shape) -> Schedule {
    let mut s = Schedule::new();
    s.round().copy(INPUT, 0..shape.len, OUTPUT, 0);
    let ranks: Vec<usize> = (0..shape.size).collect();
    exchange_partials(&mut s, &ranks, shape.rank, OUTPUT, 0..shape.len);
    s
}

/// Appends recursive doubling on the canonical tree among `group` (by
/// index) for member `me`, whose `buf[range]` holds its contribution and
/// ends with everyone's.
///
/// After step k every member holds the partial of its aligned 2^(k+1)
/// block. At step k a member takes the partial of the sibling of its 2^k
/// block from the sibling's member at the same offset (modulo the sibling's
/// size, which is smaller when cut at the group's end) and sends its own to
/// the sibling's members it is that source for; the lower block's partial is
/// the left operand. One round per step, ⌈log2 n⌉ rounds.
pub(super) fn exchange_partials(
    s: &mut Schedule,
    group: &[usize],
    me: usize,
    buf: Buf,
    range: Range<usize>,
) {
    let n = group.len();
    for k in 0..ceil_log2(n) {
        let Some(sib) = Siblings::at(me, n, k) else {
            continue;
        };
        let combine = if sib.own_is_lower() {
            Combine::IncomingRight
        } else {
            Combine::IncomingLeft
        };
        let round = s.round();
        for to in sib.destinations() {
            round.send(group[to], buf, range.clone());
        }
        round.recv(group[sib.source()], buf, range.clone(), combine);
    }
}

/// The canonical reduce to rank 0, then a binomial bcast from it.
pub(super) fn reduce_bcast(shape: &Shape) -> Schedule {
    let mut s = Schedule::new();
    s.round().copy(INPUT, 0..shape.len, OUTPUT, 0);
    let ranks: Vec<usize> = (0..shape.size).collect();
    canonical_reduce(&mut s, &ranks, shape.rank, 0, OUTPUT, 0..shape.len);
    binomial_bcast(&mut s, &ranks, shape.rank, 0, OUTPUT, 0..shape.len);
    s
}

/// Rabenseifner's allreduce (P a power of two): recursive-halving
/// reduce-scatter, partner r XOR 2^k in step k (distance 1 first), each
/// keeping the half of the common element range selected by bit k of its
/// rank and combining the partner's partial of it, the lower rank's on the
/// left. Before step k partners hold the partials of their aligned 2^k
/// blocks over the same range (it depends only on the bits below k), so
/// every element is combined along the canonical tree. Then the
/// recursive-doubling allgather retraces the halving in reverse.
pub(super) fn rabenseifner(alg: Algorithm, shape: &Shape) -> Result<Schedule, NotApplicable> {
    super::require_power_of_two(alg, shape)?;
    let p = shape.size;
    let r = shape.rank;
    let elem = shape.elem;
    let bytes = |elements: &Range<usize>| elements.start * elem..elements.end * elem;
    let mut s = Schedule::new();
    s.round().copy(INPUT, 0..shape.len, OUTPUT, 0);
    // The element range held before each step.
    let mut held = Vec::with_capacity(ceil_log2(p) + 1);
    held.push(0..shape.len / elem);
    for k in 0..ceil_log2(p) {
        let range = held[k].clone();
        let mid = range.start + range.len() / 2;
        let upper = r & (1 << k) != 0;
        let (keep, give) = if upper {
            (mid..range.end, range.start..mid)
        } else {
            (range.start..mid, mid..range.end)
        };
        let combine = if upper {
            Combine::IncomingLeft
        } else {
            Combine::IncomingRight
        };
        s.round().send(r ^ (1 << k), OUTPUT, bytes(&give)).recv(
            r ^ (1 << k),
            OUTPUT,
            bytes(&keep),
            combine,
        );
        held.push(keep);
    }
    for k in (0..ceil_log2(p)).rev() {
        let mine = &held[k + 1];
        let whole = &held[k];
        let theirs = if mine.start == whole.start {
            mine.end..whole.end
        } else {
            whole.start..mine.start
        };
        s.round().send(r ^ (1 << k), OUTPUT, bytes(mine)).recv(
            r ^ (1 << k),
            OUTPUT,
            bytes(&theirs),
            Combine::Replace,
        );
    }
    Ok(s)
}

/// Pairwise reduce-scatter into P element-aligned blocks (canonical), then
/// a ring allgather of the blocks.
pub(super) fn reduce_scatter_allgather(shape: &Shape) -> Schedule {
    let blocks = Blocks::even(shape.len, shape.elem, shape.size);
    let mut s = Schedule::new();
    pairwise_reduce_scatter(
        &mut s,
        shape.size,
        shape.rank,
        &blocks,
        OUTPUT,
        blocks.start(shape.rank),
    );
    let ranks: Vec<usize> = (0..shape.size).collect();
    ring_allgather(&mut s, &ranks, shape.rank, &blocks, OUTPUT);
    s
}

/// The classic ring allreduce: ring reduce-scatter then ring allgather,
/// 2(P − 1) rounds of len / P bytes. Partials are combined in ring order,
/// so it is not deterministic.
pub(super) fn ring(shape: &Shape) -> Schedule {
    let blocks = Blocks::even(shape.len, shape.elem, shape.size);
    let mut s = Schedule::new();
    s.round().copy(INPUT, 0..shape.len, OUTPUT, 0);
    ring_reduce_scatter(&mut s, shape.size, shape.rank, &blocks, OUTPUT);
    let ranks: Vec<usize> = (0..shape.size).collect();
    ring_allgather(&mut s, &ranks, shape.rank, &blocks, OUTPUT);
    s
}
