//! Allgather: ring, recursive doubling and Bruck. Blocks may have any
//! lengths (zero included); a block is the bytes `counts[r]` of rank r,
//! packed in rank order in the output.

use super::blocks::{ceil_log2, Blocks};
use super::{Algorithm, NotApplicable, Shape};
use crate::coll::schedule::{Buf, Combine, Schedule, INPUT, OUTPUT};

/// Ring allgather: P − 1 rounds, each passing one block to the right
/// neighbour.
pub(super) fn ring(shape: &Shape) -> Schedule {
    let blocks = Blocks::packed(shape.counts.iter().copied());
    let mut s = Schedule::new();
    s.round().copy(
        INPUT,
        0..blocks.len(shape.rank),
        OUTPUT,
        blocks.start(shape.rank),
    );
    let ranks: Vec<usize> = (0..shape.size).collect();
    ring_allgather(&mut s, &ranks, shape.rank, &blocks, OUTPUT);
    s
}

/// Appends a ring allgather among `group` (by index) for member `me`:
/// member i's block is `blocks.range(i)` of `buf`, and each member's own
/// block must be in place. In round j, member i passes block i − j to
/// i + 1 and receives block i − j − 1 from i − 1.
pub(super) fn ring_allgather(
    s: &mut Schedule,
    group: &[usize],
    me: usize,
    blocks: &Blocks,
    buf: Buf,
) {
    let n = group.len();
    let right = group[(me + 1) % n];
    let left = group[(me + n - 1) % n];
    for j in 0..n.saturating_sub(1) {
        s.round()
            .send(right, buf, blocks.range((me + n - j) % n))
            .recv(
                left,
                buf,
                blocks.range((me + 2 * n - j - 1) % n),
                Combine::Replace,
            );
    }
}

/// Recursive-doubling allgather (P a power of two): in round k, partners
/// r and r XOR 2^k swap the blocks of their aligned 2^k rank blocks, which
/// are adjacent in the output.
pub(super) fn recursive_doubling(alg: Algorithm, shape: &Shape) -> Result<Schedule, NotApplicable> {
    super::require_power_of_two(alg, shape)?;
    let p = shape.size;
    let r = shape.rank;
    let blocks = Blocks::packed(shape.counts.iter().copied());
    let mut s = Schedule::new();
    s.round()
        .copy(INPUT, 0..blocks.len(r), OUTPUT, blocks.start(r));
    for k in 0..ceil_log2(p) {
        let size = 1 << k;
        let own = r >> k << k;
        let partner = own ^ size;
        s.round()
            .send(r ^ size, OUTPUT, blocks.span(own..own + size))
            .recv(
                r ^ size,
                OUTPUT,
                blocks.span(partner..partner + size),
                Combine::Replace,
            );
    }
    Ok(s)
}

/// Bruck's allgather, any P: blocks are kept rotated (rank r's scratch
/// holds blocks r, r + 1, …), so in round k rank r sends its first
/// min(2^k, P − 2^k) blocks to r − 2^k in one message and appends those of
/// r + 2^k; a final rotation puts them in rank order. Rank 0 needs no
/// rotation and works in its output.
pub(super) fn bruck(shape: &Shape) -> Schedule {
    let p = shape.size;
    let r = shape.rank;
    let blocks = Blocks::packed(shape.counts.iter().copied());
    let rotated = Blocks::packed((0..p).map(|i| shape.counts[(r + i) % p]));
    let mut s = Schedule::new();
    let work = if r == 0 {
        OUTPUT
    } else {
        s.scratch(blocks.total())
    };
    s.round().copy(INPUT, 0..blocks.len(r), work, 0);
    for k in 0..ceil_log2(p) {
        let have = 1 << k;
        let n = have.min(p - have);
        s.round()
            .send((r + p - have) % p, work, rotated.span(0..n))
            .recv(
                (r + have) % p,
                work,
                rotated.span(have..have + n),
                Combine::Replace,
            );
    }
    if r != 0 {
        s.round()
            .copy(work, rotated.span(0..p - r), OUTPUT, blocks.start(r))
            .copy(work, rotated.span(p - r..p), OUTPUT, 0);
    }
    s
}
