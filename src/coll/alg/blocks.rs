//! Where each rank's block lies in a buffer, and the rank arithmetic the
//! algorithms share (logarithms, relative ranks, ranges that wrap round
//! the communicator).

use std::ops::Range;

/// ⌈log2 n⌉: the rounds of a tree or doubling over `n` ranks (0 for one).
pub(super) fn ceil_log2(n: usize) -> usize {
    n.next_power_of_two().trailing_zeros() as usize
}

/// The byte ranges of blocks packed in index order.
#[derive(Clone, Debug)]
pub(super) struct Blocks {
    /// `offsets[i]` is where block i starts; one more entry for the end.
    offsets: Vec<usize>,
}

impl Blocks {
    /// Blocks of the given lengths, packed.
    pub fn packed(counts: impl IntoIterator<Item = usize>) -> Blocks {
        let mut offsets = vec![0];
        let mut end = 0;
        for n in counts {
            end += n;
            offsets.push(end);
        }
        Blocks { offsets }
    }

    /// `len` bytes in `parts` blocks of ⌈elements / parts⌉ whole `elem`-byte
    /// elements each (the last ones shorter or empty).
    pub fn even(len: usize, elem: usize, parts: usize) -> Blocks {
        let elements = len / elem;
        let per = elements.div_ceil(parts);
        Blocks::packed((0..parts).map(|i| {
            let start = (i * per).min(elements);
            let end = ((i + 1) * per).min(elements);
            (end - start) * elem
        }))
    }

    /// Block `i`.
    pub fn range(&self, i: usize) -> Range<usize> {
        self.offsets[i]..self.offsets[i + 1]
    }

    /// Blocks `first..end` together (they are adjacent).
    pub fn span(&self, blocks: Range<usize>) -> Range<usize> {
        self.offsets[blocks.start]..self.offsets[blocks.end]
    }

    /// Where block `i` starts.
    pub fn start(&self, i: usize) -> usize {
        self.offsets[i]
    }

    /// Length of block `i`.
    pub fn len(&self, i: usize) -> usize {
        self.offsets[i + 1] - self.offsets[i]
    }

    /// Total bytes.
    pub fn total(&self) -> usize {
        *self.offsets.last().expect("offsets start with 0")
    }
}

/// The `n` ranks `start, start + 1, …` modulo `p`, as at most two ranges of
/// ranks: the part up to `p` and the part that wraps to 0 (maybe empty).
pub(super) fn wrapped(start: usize, n: usize, p: usize) -> [Range<usize>; 2] {
    let end = start + n;
    if end <= p {
        [start..end, 0..0]
    } else {
        [start..p, 0..end - p]
    }
}

/// The relative ranks of the subtree of relative rank `v` in MPICH's
/// binomial tree over `p` ranks: `[v, v + lowest set bit of v)` cut at p
/// (everything for the root, 0).
pub(super) fn binomial_subtree(v: usize, p: usize) -> Range<usize> {
    let size = if v == 0 { p } else { 1 << v.trailing_zeros() };
    v..(v + size).min(p)
}
