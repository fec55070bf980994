//! Linear gather and scatter: the root exchanges with every rank directly,
//! in one round (P − 1 messages, all at the root).

use super::blocks::Blocks;
use super::Shape;
use crate::coll::schedule::{Combine, Schedule, INPUT, OUTPUT};

/// Every rank sends its block to the root, which receives each into place.
pub(super) fn gather(shape: &Shape) -> Schedule {
    let blocks = Blocks::packed(shape.counts.iter().copied());
    let mut s = Schedule::new();
    let round = s.round();
    if shape.rank == shape.root {
        round.copy(
            INPUT,
            0..blocks.len(shape.rank),
            OUTPUT,
            blocks.start(shape.rank),
        );
        for from in (0..shape.size).filter(|&r| r != shape.root) {
            round.recv(from, OUTPUT, blocks.range(from), Combine::Replace);
        }
    } else {
        round.send(shape.root, INPUT, 0..blocks.len(shape.rank));
    }
    s
}

/// The root sends every rank its block.
pub(super) fn scatter(shape: &Shape) -> Schedule {
    let blocks = Blocks::packed(shape.counts.iter().copied());
    let mut s = Schedule::new();
    let round = s.round();
    if shape.rank == shape.root {
        round.copy(INPUT, blocks.range(shape.rank), OUTPUT, 0);
        for to in (0..shape.size).filter(|&r| r != shape.root) {
            round.send(to, INPUT, blocks.range(to));
        }
    } else {
        round.recv(
            shape.root,
            OUTPUT,
            0..blocks.len(shape.rank),
            Combine::Replace,
        );
    }
    s
}
