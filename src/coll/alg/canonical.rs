//! The canonical reduction tree seen as aligned blocks of ranks.
//!
//! [`crate::coll::op::reduce_canonical`] over ranks `[0, n)` splits at the
//! largest power of two below the range, so its subtrees are exactly the
//! aligned blocks `[a, a + 2^k)` (a a multiple of 2^k) cut at n, with
//! single-child levels skipped. Step k of a canonical algorithm combines the
//! partials of the two halves of every aligned 2^(k+1) block, the lower half
//! always the left operand; this module gives the halves' bounds and who
//! exchanges with whom when every member of a half holds its partial.

use std::ops::Range;

/// A rank's aligned 2^k block and its sibling (the other half of the
/// aligned 2^(k+1) block), both cut at the group size.
#[derive(Clone, Debug)]
pub(super) struct Siblings {
    /// The index of the rank these blocks are seen from.
    me: usize,
    /// The rank's own block.
    pub own: Range<usize>,
    /// The sibling block, not empty.
    pub other: Range<usize>,
}

impl Siblings {
    /// The blocks of step `k` for index `me` of `n`, or `None` when the
    /// sibling block is empty (nothing to combine at this step).
    pub fn at(me: usize, n: usize, k: usize) -> Option<Siblings> {
        let size = 1 << k;
        let own_lo = me >> k << k;
        let other_lo = own_lo ^ size;
        if other_lo >= n {
            return None;
        }
        Some(Siblings {
            me,
            own: own_lo..(own_lo + size).min(n),
            other: other_lo..(other_lo + size).min(n),
        })
    }

    /// Whether the own block is the lower half (its partial is the left
    /// operand).
    pub fn own_is_lower(&self) -> bool {
        self.own.start < self.other.start
    }

    /// The member of the sibling block this rank receives the sibling's
    /// partial from: the one at the same offset, modulo the sibling's size.
    pub fn source(&self) -> usize {
        self.other.start + (self.me - self.own.start) % self.other.len()
    }

    /// The members of the sibling block this rank sends its own block's
    /// partial to: those whose [`Siblings::source`] it is.
    pub fn destinations(&self) -> impl Iterator<Item = usize> + '_ {
        (self.me - self.own.start..self.other.len())
            .step_by(self.own.len())
            .map(|offset| self.other.start + offset)
    }
}
