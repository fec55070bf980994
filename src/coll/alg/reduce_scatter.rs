//! Reduce-scatter: pairwise with a local canonical reduction (any P,
//! deterministic), recursive halving (P a power of two, deterministic) and
//! ring (not deterministic); and reduce as a reduce-scatter plus a gather.

use super::blocks::{binomial_subtree, ceil_log2, wrapped, Blocks};
use super::{Algorithm, NotApplicable, Shape};
use crate::coll::op::canonical_split;
use crate::coll::schedule::{Buf, Combine, Round, Schedule, INPUT, OUTPUT};
use std::ops::Range;

/// Pairwise reduce-scatter of the input's blocks `counts`.
pub(super) fn pairwise(shape: &Shape) -> Schedule {
    let blocks = Blocks::packed(shape.counts.iter().copied());
    let mut s = Schedule::new();
    pairwise_reduce_scatter(&mut s, shape.size, shape.rank, &blocks, OUTPUT, 0);
    s
}

/// Appends a pairwise reduce-scatter over all `p` ranks for rank `me`:
/// block d of everyone's input goes to rank d (P − 1 rounds, rank r sending
/// to r + k and receiving from r − k in round k) into a scratch slot per
/// source, and the P slots are reduced locally in the canonical order; the
/// result lands in `dst` at `at`.
pub(super) fn pairwise_reduce_scatter(
    s: &mut Schedule,
    p: usize,
    me: usize,
    blocks: &Blocks,
    dst: Buf,
    at: usize,
) {
    let own = blocks.len(me);
    if p == 1 {
        s.round().copy(INPUT, blocks.range(me), dst, at);
        return;
    }
    let slots = s.scratch(p * own);
    let slot = |i: usize| i * own..(i + 1) * own;
    s.round()
        .copy(INPUT, blocks.range(me), slots, slot(me).start);
    for k in 1..p {
        let to = (me + k) % p;
        let from = (me + p - k) % p;
        s.round()
            .send(to, INPUT, blocks.range(to))
            .recv(from, slots, slot(from), Combine::Replace);
    }
    let round = s.round();
    reduce_slots(round, slots, own, 0..p);
    round.copy(slots, slot(0), dst, at);
}

/// Adds the local steps that reduce slots `ranks` of `slots` (each `own`
/// bytes) in the canonical order, leaving the result in the first one.
fn reduce_slots(round: &mut Round, slots: Buf, own: usize, ranks: Range<usize>) {
    if ranks.len() < 2 {
        return;
    }
    let split = canonical_split(ranks.start, ranks.end);
    reduce_slots(round, slots, own, ranks.start..split);
    reduce_slots(round, slots, own, split..ranks.end);
    round.reduce(
        slots,
        split * own..(split + 1) * own,
        slots,
        ranks.start * own,
        false,
    );
}

/// Reduce as a pairwise reduce-scatter into P element-aligned blocks of
/// every rank's output, then a binomial gather of the blocks to the root
/// (by relative rank; a subtree's blocks go in one message, or two when
/// its ranks wrap past P − 1).
pub(super) fn reduce_then_gather(shape: &Shape) -> Schedule {
    let p = shape.size;
    let root = shape.root;
    let blocks = Blocks::even(shape.len, shape.elem, p);
    let mut s = Schedule::new();
    pairwise_reduce_scatter(
        &mut s,
        p,
        shape.rank,
        &blocks,
        OUTPUT,
        blocks.start(shape.rank),
    );
    let v = (shape.rank + p - root) % p;
    let subtree_len = |u: usize| binomial_subtree(u, p).len();
    for t in 0..ceil_log2(p) {
        let mask = 1 << t;
        if v & mask != 0 {
            let to = (v - mask + root) % p;
            let round = s.round();
            for ranks in wrapped(shape.rank, subtree_len(v), p) {
                round.send(to, OUTPUT, blocks.span(ranks));
            }
            break;
        }
        if v + mask < p {
            let from = (v + mask + root) % p;
            let round = s.round();
            for ranks in wrapped(from, subtree_len(v + mask), p) {
                round.recv(from, OUTPUT, blocks.span(ranks), Combine::Replace);
            }
        }
    }
    s
}

/// Recursive halving (P a power of two): the input's blocks are first put
/// in bit-reversed order in a scratch buffer, so that in round k, partners
/// r and r XOR 2^k (distance 1 first, as the canonical tree) split their
/// common range into two adjacent halves by bit k of the block index; each
/// keeps the half of its own bit and receives the partner's partial of it,
/// the lower rank's on the left. The last range is block r. Blocks may
/// have any lengths.
pub(super) fn recursive_halving(alg: Algorithm, shape: &Shape) -> Result<Schedule, NotApplicable> {
    super::require_power_of_two(alg, shape)?;
    let p = shape.size;
    let r = shape.rank;
    let steps = ceil_log2(p);
    let reversed = |i: usize| {
        if steps == 0 {
            i
        } else {
            i.reverse_bits() >> (usize::BITS as usize - steps)
        }
    };
    let blocks = Blocks::packed(shape.counts.iter().copied());
    // Position j of the scratch holds block reversed(j).
    let positions = Blocks::packed((0..p).map(|j| shape.counts[reversed(j)]));
    let mut s = Schedule::new();
    let work = s.scratch(shape.len);
    let round = s.round();
    for j in 0..p {
        round.copy(INPUT, blocks.range(reversed(j)), work, positions.start(j));
    }
    let (mut lo, mut hi) = (0, p);
    for k in 0..steps {
        let mid = (lo + hi) / 2;
        let upper = r & (1 << k) != 0;
        let (keep, give) = if upper {
            (mid..hi, lo..mid)
        } else {
            (lo..mid, mid..hi)
        };
        let combine = if upper {
            Combine::IncomingLeft
        } else {
            Combine::IncomingRight
        };
        s.round()
            .send(r ^ (1 << k), work, positions.span(give))
            .recv(r ^ (1 << k), work, positions.span(keep.clone()), combine);
        (lo, hi) = (keep.start, keep.end);
    }
    s.round().copy(work, positions.range(lo), OUTPUT, 0);
    Ok(s)
}

/// Ring reduce-scatter (not deterministic: a block's partial is combined
/// in ring order from the rank after its owner).
pub(super) fn ring(shape: &Shape) -> Schedule {
    let blocks = Blocks::packed(shape.counts.iter().copied());
    let mut s = Schedule::new();
    let work = s.scratch(shape.len);
    s.round().copy(INPUT, 0..shape.len, work, 0);
    ring_reduce_scatter(&mut s, shape.size, shape.rank, &blocks, work);
    s.round().copy(work, blocks.range(shape.rank), OUTPUT, 0);
    s
}

/// Appends a ring reduce-scatter over all `p` ranks in `buf` (holding the
/// rank's contribution): in round j rank r passes its partial of block
/// r − j − 1 to r + 1 and combines the partial of block r − j − 2 from
/// r − 1. After P − 1 rounds block r of `buf` is complete.
pub(super) fn ring_reduce_scatter(
    s: &mut Schedule,
    p: usize,
    me: usize,
    blocks: &Blocks,
    buf: Buf,
) {
    for j in 0..p.saturating_sub(1) {
        s.round()
            .send((me + 1) % p, buf, blocks.range((me + 2 * p - j - 1) % p))
            .recv(
                (me + p - 1) % p,
                buf,
                blocks.range((me + 2 * p - j - 2) % p),
                Combine::IncomingLeft,
            );
    }
}
