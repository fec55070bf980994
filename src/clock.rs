//! Clocks that give the core its notion of time.

use bcl_core::Time;
use std::time::Instant;

/// A source of [`Time`] for an [`Endpoint`](crate::Endpoint).
pub trait Clock: Send + Sync {
    /// The current instant.
    fn now(&self) -> Time;
}

/// The operating system's monotonic clock, counted from the clock's creation.
#[derive(Clone, Copy, Debug)]
pub struct MonotonicClock {
    origin: Instant,
}

impl MonotonicClock {
    /// A clock whose origin is now.
    pub fn new() -> Self {
        MonotonicClock {
            origin: Instant::now(),
        }
    }
}

impl Default for MonotonicClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for MonotonicClock {
    fn now(&self) -> Time {
        Time::from_nanos(self.origin.elapsed().as_nanos() as u64)
    }
}

impl Clock for bcl_sim::SimClock {
    fn now(&self) -> Time {
        bcl_sim::SimClock::now(self)
    }
}
