//! Bcast for large messages (van de Geijn, as in MPICH): the root's data
//! cut into P pieces of ⌈len / P⌉ bytes, scattered down a binomial tree by
//! relative rank, then gathered by everyone round a ring. Each byte crosses
//! about two links instead of log2 P.

use super::allgather::ring_allgather;
use super::blocks::{binomial_subtree, ceil_log2, Blocks};
use super::Shape;
use crate::coll::schedule::{Combine, Schedule, INPUT, OUTPUT};

/// The scatter-allgather bcast. Piece i (of relative rank i) is at byte
/// i·⌈len / P⌉ of the message; pieces past the end are empty, so short
/// messages send fewer, shorter messages.
pub(super) fn bcast(shape: &Shape) -> Schedule {
    let p = shape.size;
    let root = shape.root;
    let v = (shape.rank + p - root) % p;
    let pieces = Blocks::even(shape.len, 1, p);
    let mut s = Schedule::new();
    if v == 0 {
        s.round().copy(INPUT, 0..shape.len, OUTPUT, 0);
    }
    // Scatter: the pieces of a binomial subtree are adjacent.
    let subtree = |u: usize| binomial_subtree(u, p);
    let rounds = ceil_log2(p);
    for t in 0..rounds {
        let mask = 1 << (rounds - 1 - t);
        if v % (2 * mask) == mask {
            let from = (v - mask + root) % p;
            s.round()
                .recv(from, OUTPUT, pieces.span(subtree(v)), Combine::Replace);
        } else if v.is_multiple_of(2 * mask) && v + mask < p {
            let to = (v + mask + root) % p;
            s.round().send(to, OUTPUT, pieces.span(subtree(v + mask)));
        }
    }
    // Allgather: ring in relative rank order.
    let ring: Vec<usize> = (0..p).map(|u| (u + root) % p).collect();
    ring_allgather(&mut s, &ring, v, &pieces, OUTPUT);
    s
}
