//! Binomial trees: bcast, gather and scatter by rank relative to the root,
//! and reduce along the canonical tree.
//!
//! The bcast, gather and scatter trees are MPICH's: relative rank v's
//! parent is v minus its lowest set bit and its subtree is the contiguous
//! range `[v, v + lowest bit)`, so a subtree's blocks travel as one piece
//! (two when the range wraps past rank P − 1, as absolute ranks).

use super::blocks::{binomial_subtree, ceil_log2, wrapped, Blocks};
use super::Shape;
use crate::coll::schedule::{Buf, Combine, Schedule, INPUT, OUTPUT};
use std::ops::Range;

/// Binomial bcast: the root copies its input to its output and the tree
/// sends it on (P − 1 messages in ⌈log2 P⌉ rounds).
pub(super) fn bcast(shape: &Shape) -> Schedule {
    let mut s = Schedule::new();
    if shape.rank == shape.root {
        s.round().copy(INPUT, 0..shape.len, OUTPUT, 0);
    }
    let ranks: Vec<usize> = (0..shape.size).collect();
    binomial_bcast(&mut s, &ranks, shape.rank, shape.root, OUTPUT, 0..shape.len);
    s
}

/// Appends a binomial bcast of `buf[range]` among `group` (communicator
/// ranks by index) from index `root`, for the member with index `me`: the
/// root's `buf[range]` must hold the data.
pub(super) fn binomial_bcast(
    s: &mut Schedule,
    group: &[usize],
    me: usize,
    root: usize,
    buf: Buf,
    range: Range<usize>,
) {
    let n = group.len();
    let rounds = ceil_log2(n);
    let v = (me + n - root) % n;
    let rank_of = |u: usize| group[(u + root) % n];
    for t in 0..rounds {
        let mask = 1 << (rounds - 1 - t);
        if v.is_multiple_of(2 * mask) && v + mask < n {
            s.round().send(rank_of(v + mask), buf, range.clone());
        } else if v % (2 * mask) == mask {
            s.round()
                .recv(rank_of(v - mask), buf, range.clone(), Combine::Replace);
        }
    }
}

/// Reduce along the canonical tree: every rank starts from a copy of its
/// input in its output; the result ends in the root's output.
pub(super) fn reduce(shape: &Shape) -> Schedule {
    let mut s = Schedule::new();
    s.round().copy(INPUT, 0..shape.len, OUTPUT, 0);
    let ranks: Vec<usize> = (0..shape.size).collect();
    canonical_reduce(&mut s, &ranks, shape.rank, shape.root, OUTPUT, 0..shape.len);
    s
}

/// Appends a reduce of `buf[range]` among `group` (by index) to index
/// `root` along the canonical tree over the indices, for member `me`.
///
/// At step k every aligned block of 2^(k+1) indices combines its halves'
/// partials. A block's partial is kept by its leader: the root when the root
/// is inside, else its lowest index. The upper half's leader sends to the
/// lower half's (the receiver's own partial is the left operand), except
/// when the root is in the upper half: then the lower half's leader sends to
/// the root, whose partial is the right operand. So the combination is the
/// canonical one for any root, in ⌈log2 n⌉ rounds with no extra hop.
pub(super) fn canonical_reduce(
    s: &mut Schedule,
    group: &[usize],
    me: usize,
    root: usize,
    buf: Buf,
    range: Range<usize>,
) {
    let n = group.len();
    for k in 0..ceil_log2(n) {
        let half = 1 << k;
        let lower = me >> (k + 1) << (k + 1);
        let upper = lower + half;
        if upper >= n {
            continue;
        }
        let upper_end = (upper + half).min(n);
        let (sender, receiver, combine) = if (upper..upper_end).contains(&root) {
            (lower, root, Combine::IncomingLeft)
        } else if (lower..upper).contains(&root) {
            (upper, root, Combine::IncomingRight)
        } else {
            (upper, lower, Combine::IncomingRight)
        };
        if me == sender {
            s.round().send(group[receiver], buf, range.clone());
        } else if me == receiver {
            s.round().recv(group[sender], buf, range.clone(), combine);
        }
    }
}

/// Binomial gather: each rank gathers its subtree's blocks in relative
/// rank order in a scratch buffer (leaves send their input) and sends them
/// to its parent in one message, or two to the root when the subtree's
/// absolute ranks wrap past P − 1; the root receives into place.
pub(super) fn gather(shape: &Shape) -> Schedule {
    let p = shape.size;
    let root = shape.root;
    let blocks = Blocks::packed(shape.counts.iter().copied());
    let v = (shape.rank + p - root) % p;
    let own = shape.counts[shape.rank];
    let mine = binomial_subtree(v, p);
    // Offsets of the subtree's blocks in relative order.
    let local = Blocks::packed(mine.clone().map(|u| shape.counts[(u + root) % p]));
    let in_subtree = |ranks: &Range<usize>| local.span(ranks.start - v..ranks.end - v);

    let mut s = Schedule::new();
    let work = if v == 0 {
        s.round().copy(INPUT, 0..own, OUTPUT, blocks.start(root));
        OUTPUT
    } else if mine.len() == 1 {
        INPUT
    } else {
        let work = s.scratch(local.total());
        s.round().copy(INPUT, 0..own, work, 0);
        work
    };
    for t in 0..ceil_log2(p) {
        let mask = 1 << t;
        if v & mask != 0 {
            let parent = (v - mask + root) % p;
            let round = s.round();
            if v == mask {
                // The parent is the root: one message per absolute piece.
                let mut at = 0;
                for ranks in wrapped((v + root) % p, mine.len(), p) {
                    let n = blocks.span(ranks).len();
                    round.send(parent, work, at..at + n);
                    at += n;
                }
            } else {
                round.send(parent, work, 0..local.total());
            }
            break;
        }
        let child = v + mask;
        if child < p {
            let theirs = binomial_subtree(child, p);
            let from = (child + root) % p;
            let round = s.round();
            if v == 0 {
                for ranks in wrapped(from, theirs.len(), p) {
                    round.recv(from, OUTPUT, blocks.span(ranks), Combine::Replace);
                }
            } else {
                round.recv(from, work, in_subtree(&theirs), Combine::Replace);
            }
        }
    }
    s
}

/// Binomial scatter, the gather reversed: the root sends each child its
/// subtree's blocks (one or two messages), inner ranks receive theirs in
/// relative order into a scratch buffer and pass their children's on;
/// leaves receive straight into their output.
pub(super) fn scatter(shape: &Shape) -> Schedule {
    let p = shape.size;
    let root = shape.root;
    let blocks = Blocks::packed(shape.counts.iter().copied());
    let v = (shape.rank + p - root) % p;
    let own = shape.counts[shape.rank];
    let mine = binomial_subtree(v, p);
    let local = Blocks::packed(mine.clone().map(|u| shape.counts[(u + root) % p]));
    let in_subtree = |ranks: &Range<usize>| local.span(ranks.start - v..ranks.end - v);

    let mut s = Schedule::new();
    let work = if v == 0 {
        s.round().copy(INPUT, blocks.range(root), OUTPUT, 0);
        INPUT
    } else if mine.len() == 1 {
        OUTPUT
    } else {
        s.scratch(local.total())
    };
    let rounds = ceil_log2(p);
    for t in 0..rounds {
        let mask = 1 << (rounds - 1 - t);
        if v % (2 * mask) == mask {
            let parent = (v - mask + root) % p;
            let round = s.round();
            if v == mask {
                let mut at = 0;
                for ranks in wrapped((v + root) % p, mine.len(), p) {
                    let n = blocks.span(ranks).len();
                    round.recv(parent, work, at..at + n, Combine::Replace);
                    at += n;
                }
            } else {
                round.recv(parent, work, 0..local.total(), Combine::Replace);
            }
            if work != OUTPUT {
                s.round().copy(work, 0..own, OUTPUT, 0);
            }
        } else if v.is_multiple_of(2 * mask) && v + mask < p {
            let child = v + mask;
            let theirs = binomial_subtree(child, p);
            let to = (child + root) % p;
            let round = s.round();
            if v == 0 {
                for ranks in wrapped(to, theirs.len(), p) {
                    round.send(to, INPUT, blocks.span(ranks));
                }
            } else {
                round.send(to, work, in_subtree(&theirs));
            }
        }
    }
    s
}
