//! Scan and exscan by recursive doubling on the canonical tree.
//!
//! The canonical reduction of ranks `[0, n)` is the right-nested
//! combination of the aligned blocks of n's binary decomposition, largest
//! first, each reduced canonically. So rank r builds its prefix from the
//! partials of the lower siblings of its aligned blocks, smallest first,
//! each one the left operand: the inclusive prefix (`[0, r + 1)`) starts
//! from the rank's own contribution, the exclusive one (`[0, r)`) from the
//! first lower sibling. The sibling partials come from the same exchange
//! as the generalized recursive-doubling allreduce, pruned to the messages
//! that end up in some prefix.

use super::blocks::ceil_log2;
use super::canonical::Siblings;
use super::Shape;
use crate::coll::schedule::{Combine, Schedule, INPUT, OUTPUT};

/// Which prefix a rank gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Prefix {
    /// Ranks `0..=r` (scan).
    Inclusive,
    /// Ranks `0..r` (exscan; rank 0's output is not written).
    Exclusive,
}

/// The schedule of scan or exscan. Each step k with a sibling block is one
/// round: the partial of the rank's 2^k block (kept in a scratch buffer)
/// goes to the sibling members that need it, and the sibling's partial is
/// combined into the block partial and, when the sibling is lower, into the
/// prefix (in the output).
pub(super) fn scan(shape: &Shape, prefix: Prefix) -> Schedule {
    let p = shape.size;
    let r = shape.rank;
    let all = 0..shape.len;
    let mut s = Schedule::new();
    if prefix == Prefix::Inclusive {
        s.round().copy(INPUT, all.clone(), OUTPUT, 0);
    }
    let mut needs = Needs::new(p);
    let steps = ceil_log2(p);
    // The block partial is read from the input until it first changes.
    let updates_partial = (0..steps).any(|k| needs.receives(r, k) && needs.sends_from(r, k + 1));
    let partial = if updates_partial {
        let partial = s.scratch(shape.len);
        s.round().copy(INPUT, all.clone(), partial, 0);
        partial
    } else {
        INPUT
    };
    // A lower sibling's partial that goes to both the block partial and the
    // prefix is received here and applied at the start of the next round.
    let needs_incoming = (0..steps).any(|k| {
        Siblings::at(r, p, k).is_some_and(|sib| !sib.own_is_lower()) && needs.sends_from(r, k + 1)
    });
    let incoming = needs_incoming.then(|| s.scratch(shape.len));
    let mut prefix_empty = prefix == Prefix::Exclusive;
    for k in 0..steps {
        let Some(sib) = Siblings::at(r, p, k) else {
            continue;
        };
        let round = s.round();
        for to in sib.destinations() {
            if needs.receives(to, k) {
                round.send(to, partial, all.clone());
            }
        }
        if !needs.receives(r, k) {
            continue;
        }
        let from = sib.source();
        let keep_partial = needs.sends_from(r, k + 1);
        if sib.own_is_lower() {
            // Only the block partial changes.
            round.recv(from, partial, all.clone(), Combine::IncomingRight);
        } else if let (true, Some(incoming)) = (keep_partial, incoming) {
            round.recv(from, incoming, all.clone(), Combine::Replace);
            let apply = s.round();
            apply.reduce(incoming, all.clone(), partial, 0, true);
            if prefix_empty {
                apply.copy(incoming, all.clone(), OUTPUT, 0);
            } else {
                apply.reduce(incoming, all.clone(), OUTPUT, 0, true);
            }
            prefix_empty = false;
        } else {
            // Only the prefix changes: combine straight into it.
            let combine = if prefix_empty {
                Combine::Replace
            } else {
                Combine::IncomingLeft
            };
            round.recv(from, OUTPUT, all.clone(), combine);
            prefix_empty = false;
        }
    }
    s
}

/// Which members need which sibling partials. A member in the upper half
/// of a step always needs the lower half's partial (its prefix grows); a
/// member in the lower half needs the upper half's only if the partial of
/// the combined block is sent on to someone who needs it later.
struct Needs {
    /// Group size.
    n: usize,
    /// ⌈log2 n⌉.
    steps: usize,
    /// Memo of [`Needs::receives`], by member and step.
    memo: Vec<Option<bool>>,
}

impl Needs {
    /// Nothing known yet, for a group of `n`.
    fn new(n: usize) -> Needs {
        let steps = ceil_log2(n);
        Needs {
            n,
            steps,
            memo: vec![None; n * steps],
        }
    }

    /// Whether `member` receives its sibling's partial at step `k`.
    fn receives(&mut self, member: usize, k: usize) -> bool {
        if let Some(known) = self.memo[member * self.steps + k] {
            return known;
        }
        let answer = match Siblings::at(member, self.n, k) {
            None => false,
            Some(sib) => !sib.own_is_lower() || self.sends_from(member, k + 1),
        };
        self.memo[member * self.steps + k] = Some(answer);
        answer
    }

    /// Whether `member` sends its block partial at step `first` or later.
    fn sends_from(&mut self, member: usize, first: usize) -> bool {
        (first..self.steps).any(|k| {
            Siblings::at(member, self.n, k)
                .is_some_and(|sib| sib.destinations().any(|to| self.receives(to, k)))
        })
    }
}
