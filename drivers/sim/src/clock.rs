//! Clocks of a simulated fabric: virtual (advanced by a test harness) or
//! real (a monotonic clock).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bcl_core::Time;

/// The clock of a fabric: it decides when a frame in flight becomes
/// deliverable.
///
/// Cloning shares the clock: every clone reads (and, for a virtual clock,
/// advances) the same time.
#[derive(Clone, Debug)]
pub enum SimClock {
    /// Time stands still until the harness moves it; runs are deterministic.
    Virtual(VirtualClock),
    /// Time runs by itself (nanoseconds since the clock's creation).
    Real(RealClock),
}

impl SimClock {
    /// The current time of this clock.
    pub fn now(&self) -> Time {
        match self {
            SimClock::Virtual(c) => c.now(),
            SimClock::Real(c) => c.now(),
        }
    }

    /// The virtual clock inside, if this is one.
    pub fn as_virtual(&self) -> Option<&VirtualClock> {
        match self {
            SimClock::Virtual(c) => Some(c),
            SimClock::Real(_) => None,
        }
    }
}

impl Default for SimClock {
    /// A new virtual clock at [`Time::ZERO`].
    fn default() -> Self {
        SimClock::Virtual(VirtualClock::new())
    }
}

impl From<VirtualClock> for SimClock {
    fn from(c: VirtualClock) -> Self {
        SimClock::Virtual(c)
    }
}

impl From<RealClock> for SimClock {
    fn from(c: RealClock) -> Self {
        SimClock::Real(c)
    }
}

/// A shared virtual clock, advanced only by whoever drives the simulation.
///
/// Clones share the same time. Time never moves backwards: [`set`](Self::set)
/// to an earlier instant is ignored.
#[derive(Clone, Debug, Default)]
pub struct VirtualClock {
    nanos: Arc<AtomicU64>,
}

impl VirtualClock {
    /// A new clock at [`Time::ZERO`].
    pub fn new() -> Self {
        Self::default()
    }

    /// The current virtual time.
    pub fn now(&self) -> Time {
        Time::from_nanos(self.nanos.load(Ordering::Acquire))
    }

    /// Moves the clock to `t`, or leaves it where it is if `t` is earlier
    /// (the clock never goes backwards).
    pub fn set(&self, t: Time) {
        self.nanos.fetch_max(t.as_nanos(), Ordering::AcqRel);
    }

    /// Moves the clock forward by `d` (saturating at [`Time::NEVER`]).
    pub fn advance(&self, d: Duration) {
        let step = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        // The closure always returns Some, so this cannot fail.
        let _ = self
            .nanos
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                Some(n.saturating_add(step))
            });
    }
}

/// A monotonic real clock: nanoseconds since the clock was created.
///
/// Clones share the same origin.
#[derive(Clone, Copy, Debug)]
pub struct RealClock {
    origin: Instant,
}

impl RealClock {
    /// A clock whose origin is now.
    pub fn new() -> Self {
        Self {
            origin: Instant::now(),
        }
    }

    /// Nanoseconds elapsed since the clock's creation.
    pub fn now(&self) -> Time {
        let nanos = u64::try_from(self.origin.elapsed().as_nanos()).unwrap_or(u64::MAX);
        Time::from_nanos(nanos)
    }
}

impl Default for RealClock {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn virtual_clock_is_shared_and_never_goes_backwards() {
        let c = VirtualClock::new();
        let d = c.clone();
        assert_eq!(c.now(), Time::ZERO);
        c.advance(Duration::from_micros(3));
        assert_eq!(d.now(), Time::from_nanos(3_000));
        d.set(Time::from_nanos(10_000));
        assert_eq!(c.now(), Time::from_nanos(10_000));
        c.set(Time::from_nanos(5));
        assert_eq!(c.now(), Time::from_nanos(10_000));
        c.advance(Duration::MAX);
        assert_eq!(c.now(), Time::NEVER);
    }

    #[test]
    fn real_clock_is_monotonic() {
        let c = SimClock::Real(RealClock::new());
        let a = c.now();
        let b = c.now();
        assert!(b >= a);
        assert!(c.as_virtual().is_none());
    }
}
