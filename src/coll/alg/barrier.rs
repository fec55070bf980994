//! Barrier by dissemination: in round k rank r signals r + 2^k and waits
//! for r − 2^k, so after ⌈log2 P⌉ rounds everyone has heard, directly or
//! not, from everyone.

use super::blocks::ceil_log2;
use super::Shape;
use crate::coll::schedule::{Combine, Schedule};

/// The dissemination barrier over all ranks.
pub(super) fn dissemination(shape: &Shape) -> Schedule {
    let mut s = Schedule::new();
    let ranks: Vec<usize> = (0..shape.size).collect();
    disseminate(&mut s, &ranks, shape.rank);
    s
}

/// Appends a dissemination barrier among `group` (communicator ranks by
/// index) for the member with index `me`. Messages are one byte (empty
/// messages are not sent at all), sent from one scratch byte and received
/// into another so that no round reads what it overwrites.
pub(super) fn disseminate(s: &mut Schedule, group: &[usize], me: usize) {
    let n = group.len();
    if n < 2 {
        return;
    }
    let token = s.scratch(2);
    for k in 0..ceil_log2(n) {
        let step = 1 << k;
        let (to, from) = (group[(me + step) % n], group[(me + n - step) % n]);
        s.round()
            .send(to, token, 0..1)
            .recv(from, token, 1..2, Combine::Replace);
    }
}
