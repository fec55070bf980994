//! Alltoall: pairwise exchange (any block lengths) and Bruck's log-step
//! algorithm (equal blocks).

use super::blocks::{ceil_log2, Blocks};
use super::{not_applicable, Algorithm, NotApplicable, Shape};
use crate::coll::schedule::{Combine, Schedule, INPUT, OUTPUT};

/// Pairwise exchange: the own block is copied locally, then in round k
/// (1 ≤ k < P) rank r sends to r + k and receives from r − k.
pub(super) fn pairwise(shape: &Shape) -> Schedule {
    let p = shape.size;
    let r = shape.rank;
    let sent = Blocks::packed(shape.send_counts.iter().copied());
    let received = Blocks::packed(shape.recv_counts.iter().copied());
    let mut s = Schedule::new();
    s.round()
        .copy(INPUT, sent.range(r), OUTPUT, received.start(r));
    for k in 1..p {
        let to = (r + k) % p;
        let from = (r + p - k) % p;
        s.round().send(to, INPUT, sent.range(to)).recv(
            from,
            OUTPUT,
            received.range(from),
            Combine::Replace,
        );
    }
    s
}

/// Bruck's alltoall (every block the same length b): the blocks are
/// rotated so that position i holds the block for rank r + i; in round k
/// the blocks at positions with bit k set go, packed, to r + 2^k and the
/// same positions are refilled from r − 2^k; position i then holds the
/// block from rank r − i. ⌈log2 P⌉ messages of about P/2 blocks each.
pub(super) fn bruck(alg: Algorithm, shape: &Shape) -> Result<Schedule, NotApplicable> {
    let p = shape.size;
    let r = shape.rank;
    let b = shape.send_counts[0];
    if shape
        .send_counts
        .iter()
        .chain(shape.recv_counts)
        .any(|&n| n != b)
    {
        return Err(not_applicable(
            alg,
            shape,
            "the blocks sent and received are not all the same length",
        ));
    }
    let block = |i: usize| i * b..(i + 1) * b;
    let mut s = Schedule::new();
    if p == 1 {
        s.round().copy(INPUT, block(0), OUTPUT, 0);
        return Ok(s);
    }
    let rotated = s.scratch(p * b);
    let packed_out = s.scratch(p.div_ceil(2) * b);
    let packed_in = s.scratch(p.div_ceil(2) * b);
    // Position i of `rotated` holds the block for rank r + i.
    s.round()
        .copy(INPUT, r * b..p * b, rotated, 0)
        .copy(INPUT, 0..r * b, rotated, (p - r) * b);
    let steps = ceil_log2(p);
    for k in 0..steps {
        let bit = 1 << k;
        // Positions with bit k set, as runs of up to 2^k adjacent blocks.
        let runs: Vec<std::ops::Range<usize>> = (0..p)
            .step_by(2 * bit)
            .map(|start| (start + bit).min(p)..(start + 2 * bit).min(p))
            .filter(|run| !run.is_empty())
            .collect();
        let moved: usize = runs.iter().map(|run| run.len()).sum();
        let round = s.round();
        let mut at = 0;
        for run in &runs {
            round.copy(rotated, run.start * b..run.end * b, packed_out, at);
            at += run.len() * b;
        }
        round.send((r + bit) % p, packed_out, 0..moved * b).recv(
            (r + p - bit) % p,
            packed_in,
            0..moved * b,
            Combine::Replace,
        );
        let unpack = s.round();
        let mut at = 0;
        for run in &runs {
            unpack.copy(packed_in, at..at + run.len() * b, rotated, run.start * b);
            at += run.len() * b;
        }
    }
    // The block from rank j is at position r − j.
    let round = s.round();
    for j in 0..p {
        round.copy(rotated, block((r + p - j) % p), OUTPUT, j * b);
    }
    Ok(s)
}
