//! Wrap-safe 32-bit sequence numbers (serial-number arithmetic, RFC 1982).
//!
//! Sequence numbers count frames per ordered pair of processes. They wrap
//! from `u32::MAX` to 0; two numbers compare by the sign of their wrapping
//! difference, which is correct as long as they are less than 2^31 apart
//! (the window is a few hundred frames).

use std::cmp::Ordering;
use std::fmt;

/// A frame sequence number.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Seq(pub u32);

impl Seq {
    /// The number `n` steps after this one (wrapping).
    #[inline]
    pub fn plus(self, n: u32) -> Seq {
        Seq(self.0.wrapping_add(n))
    }

    /// The next number.
    #[inline]
    pub fn next(self) -> Seq {
        self.plus(1)
    }

    /// Signed distance from `other` to `self`: positive when `self` is later.
    #[inline]
    pub fn diff(self, other: Seq) -> i32 {
        self.0.wrapping_sub(other.0) as i32
    }

    /// Steps from `earlier` up to `self`, or `None` if `self` is before
    /// `earlier`.
    #[inline]
    pub fn since(self, earlier: Seq) -> Option<u32> {
        let d = self.diff(earlier);
        (d >= 0).then_some(d as u32)
    }

    /// Whether `self` comes before `other`.
    #[inline]
    pub fn before(self, other: Seq) -> bool {
        self.diff(other) < 0
    }

    /// Whether `self` lies in `[start, start + len)`.
    #[inline]
    pub fn in_window(self, start: Seq, len: u32) -> bool {
        self.since(start).is_some_and(|d| d < len)
    }
}

impl PartialOrd for Seq {
    fn partial_cmp(&self, other: &Seq) -> Option<Ordering> {
        Some(self.diff(*other).cmp(&0))
    }
}

impl fmt::Debug for Seq {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordering_survives_wrap_around() {
        let last = Seq(u32::MAX);
        let first = last.next();
        assert_eq!(first, Seq(0));
        assert!(last.before(first));
        assert!(last < first);
        assert_eq!(first.diff(last), 1);
        assert_eq!(last.diff(first), -1);
        assert_eq!(Seq(5).since(Seq(u32::MAX - 2)), Some(8));
        assert_eq!(Seq(u32::MAX - 2).since(Seq(5)), None);
    }

    #[test]
    fn window_membership_across_the_wrap() {
        let start = Seq(u32::MAX - 1);
        assert!(start.in_window(start, 4));
        assert!(Seq(0).in_window(start, 4));
        assert!(Seq(1).in_window(start, 4));
        assert!(!Seq(2).in_window(start, 4));
        assert!(!Seq(u32::MAX - 2).in_window(start, 4));
    }

    #[test]
    fn half_space_is_the_limit_of_comparison() {
        let a = Seq(0);
        assert!(a.before(Seq((1 << 31) - 1)));
        // Exactly half the space apart: the difference is i32::MIN, "before".
        assert!(Seq(1 << 31).before(a));
    }
}
