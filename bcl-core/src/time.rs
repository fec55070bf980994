//! Time as the core sees it: instants handed in by the caller.
//!
//! The core owns no clock. Every entry point that needs the time takes a
//! [`Time`], which may come from a monotonic clock (real runs) or from a
//! virtual clock (simulation), so runs over a simulated wire are
//! deterministic.

use std::ops::{Add, Sub};
use std::time::Duration;

/// An instant, in nanoseconds since an origin chosen by the caller.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Time(u64);

impl Time {
    /// The origin.
    pub const ZERO: Time = Time(0);
    /// Later than every instant a run reaches; used as "never".
    pub const NEVER: Time = Time(u64::MAX);

    /// The instant `nanos` nanoseconds after the origin.
    pub const fn from_nanos(nanos: u64) -> Self {
        Time(nanos)
    }

    /// Nanoseconds since the origin.
    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// Time elapsed from `earlier` to `self`, zero if `earlier` is later.
    pub fn saturating_since(self, earlier: Time) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }
}

impl Add<Duration> for Time {
    type Output = Time;

    fn add(self, d: Duration) -> Time {
        let nanos = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        Time(self.0.saturating_add(nanos))
    }
}

impl Sub<Time> for Time {
    type Output = Duration;

    fn sub(self, earlier: Time) -> Duration {
        self.saturating_since(earlier)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_saturates_instead_of_wrapping() {
        let t = Time::from_nanos(100);
        assert_eq!(t + Duration::from_nanos(5), Time::from_nanos(105));
        assert_eq!(Time::NEVER + Duration::from_secs(1), Time::NEVER);
        assert_eq!(Time::from_nanos(10) - Time::from_nanos(30), Duration::ZERO);
        assert_eq!(
            Time::from_nanos(30) - Time::from_nanos(10),
            Duration::from_nanos(20)
        );
    }
}
