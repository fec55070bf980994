//! Retransmission timeout from round-trip samples (RFC 6298).

use std::time::Duration;

/// Bounds and starting value of the retransmission timeout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RtoConfig {
    /// Timeout before the first round-trip sample.
    pub initial: Duration,
    /// Lower bound.
    pub min: Duration,
    /// Upper bound, also the cap of exponential backoff.
    pub max: Duration,
}

impl Default for RtoConfig {
    fn default() -> Self {
        RtoConfig {
            initial: Duration::from_millis(1),
            min: Duration::from_micros(200),
            max: Duration::from_millis(200),
        }
    }
}

/// Smoothed round-trip time, its variation, and the resulting timeout, with
/// exponential backoff. All in nanoseconds, to stay small and cheap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RttEstimator {
    srtt: u32,
    rttvar: u32,
    /// The least recent sample: a floor that drifts up by 1/256 of the
    /// difference per larger sample, so a path that became slower is
    /// followed within a few thousand samples.
    min_rtt: u32,
    backoff_shift: u8,
    has_sample: bool,
    /// A timeout since the last sample was shown spurious (what it resent
    /// had arrived): the estimate is below the path's round trip.
    too_low: bool,
}

/// Saturating conversion of a duration to nanoseconds in a `u32` (4.29 s).
pub(crate) fn nanos32(d: Duration) -> u32 {
    u32::try_from(d.as_nanos()).unwrap_or(u32::MAX)
}

impl RttEstimator {
    /// An estimator with no sample yet.
    pub const fn new() -> Self {
        RttEstimator {
            srtt: 0,
            rttvar: 0,
            min_rtt: 0,
            backoff_shift: 0,
            has_sample: false,
            too_low: false,
        }
    }

    /// Feeds one round-trip sample (taken only from frames sent once, per
    /// Karn's rule) and clears the backoff.
    pub fn sample(&mut self, rtt: Duration) {
        let r = nanos32(rtt);
        if !self.has_sample {
            self.srtt = r;
            self.rttvar = r / 2;
            self.min_rtt = r;
            self.has_sample = true;
        } else {
            self.min_rtt = if r <= self.min_rtt {
                r
            } else {
                self.min_rtt + (r - self.min_rtt) / 256
            };
            // RTTVAR = 3/4 RTTVAR + 1/4 |SRTT - R|; SRTT = 7/8 SRTT + 1/8 R.
            let delta = self.srtt.abs_diff(r);
            self.rttvar = ((u64::from(self.rttvar) * 3 + u64::from(delta)) / 4) as u32;
            self.srtt = ((u64::from(self.srtt) * 7 + u64::from(r)) / 8) as u32;
        }
        self.backoff_shift = 0;
        self.too_low = false;
    }

    /// Doubles the timeout after an expiry (capped by [`RtoConfig::max`]).
    pub fn back_off(&mut self) {
        self.backoff_shift = (self.backoff_shift + 1).min(16);
    }

    /// Forgets the backoff (progress was made).
    pub fn reset_backoff(&mut self) {
        self.backoff_shift = 0;
    }

    /// A timeout was spurious: what it resent had arrived, so the round trip
    /// outgrew the timeout (behind a queue that grew), and the estimate is
    /// too low until the next clean sample.
    pub fn timeout_was_spurious(&mut self) {
        self.too_low = true;
    }

    /// A timeout since the last clean sample was spurious: the estimate is
    /// below the path's round trip now.
    pub fn estimate_too_low(&self) -> bool {
        self.too_low
    }

    /// Number of doublings currently applied.
    pub fn backoff_shift(&self) -> u8 {
        self.backoff_shift
    }

    /// Smoothed round-trip time, if there has been a sample.
    pub fn srtt(&self) -> Option<Duration> {
        self.has_sample
            .then(|| Duration::from_nanos(u64::from(self.srtt)))
    }

    /// The least round-trip time seen lately, if there has been a sample
    /// (the floor that reordering and spurious resends are judged by).
    pub fn min_rtt(&self) -> Option<Duration> {
        self.has_sample
            .then(|| Duration::from_nanos(u64::from(self.min_rtt)))
    }

    /// The current retransmission timeout: SRTT + 4·RTTVAR, clamped to
    /// `[min, max]`, doubled per backoff step and capped at `max`.
    pub fn rto(&self, cfg: &RtoConfig) -> Duration {
        let base = if self.has_sample {
            Duration::from_nanos(u64::from(self.srtt) + 4 * u64::from(self.rttvar))
        } else {
            cfg.initial
        };
        let base = base.clamp(cfg.min, cfg.max);
        base.saturating_mul(1 << self.backoff_shift).min(cfg.max)
    }
}

impl Default for RttEstimator {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> RtoConfig {
        RtoConfig {
            initial: Duration::from_millis(1),
            min: Duration::from_micros(100),
            max: Duration::from_millis(50),
        }
    }

    #[test]
    fn initial_timeout_before_any_sample() {
        let e = RttEstimator::new();
        assert_eq!(e.rto(&cfg()), Duration::from_millis(1));
        assert_eq!(e.srtt(), None);
    }

    #[test]
    fn first_sample_sets_srtt_and_half_variance() {
        let mut e = RttEstimator::new();
        e.sample(Duration::from_micros(100));
        assert_eq!(e.srtt(), Some(Duration::from_micros(100)));
        // RTO = 100 + 4 * 50 = 300 µs.
        assert_eq!(e.rto(&cfg()), Duration::from_micros(300));
    }

    #[test]
    fn later_samples_follow_rfc6298_weights() {
        let mut e = RttEstimator::new();
        e.sample(Duration::from_micros(100)); // srtt 100, var 50
        e.sample(Duration::from_micros(200)); // var = (150 + 100)/4 = 62.5; srtt = (700 + 200)/8 = 112.5
        assert_eq!(e.srtt(), Some(Duration::from_nanos(112_500)));
        assert_eq!(e.rto(&cfg()), Duration::from_nanos(112_500 + 4 * 62_500));
    }

    #[test]
    fn min_rtt_takes_smaller_samples_at_once_and_drifts_up_slowly() {
        let mut e = RttEstimator::new();
        assert_eq!(e.min_rtt(), None);
        e.sample(Duration::from_micros(100));
        e.sample(Duration::from_micros(60));
        assert_eq!(e.min_rtt(), Some(Duration::from_micros(60)));
        // One larger sample moves the floor by 1/256 of the difference.
        e.sample(Duration::from_nanos(60_000 + 25_600));
        assert_eq!(e.min_rtt(), Some(Duration::from_nanos(60_100)));
        // A path that became slower for good is followed.
        for _ in 0..3000 {
            e.sample(Duration::from_micros(200));
        }
        assert!(e.min_rtt().unwrap() > Duration::from_micros(190));
    }

    #[test]
    fn a_spurious_timeout_marks_the_estimate_too_low_until_a_clean_sample() {
        let mut e = RttEstimator::new();
        e.sample(Duration::from_micros(300));
        assert!(!e.estimate_too_low());
        e.back_off();
        e.timeout_was_spurious();
        assert!(e.estimate_too_low());
        e.reset_backoff();
        assert!(e.estimate_too_low());
        e.sample(Duration::from_micros(900));
        assert!(!e.estimate_too_low());
    }

    #[test]
    fn timeout_is_clamped_to_bounds() {
        let mut e = RttEstimator::new();
        e.sample(Duration::from_micros(1));
        assert_eq!(e.rto(&cfg()), Duration::from_micros(100));
        e.sample(Duration::from_secs(3));
        assert_eq!(e.rto(&cfg()), Duration::from_millis(50));
    }

    #[test]
    fn backoff_doubles_up_to_the_cap_and_a_sample_resets_it() {
        let mut e = RttEstimator::new();
        e.sample(Duration::from_micros(100)); // rto 300 µs
        e.back_off();
        assert_eq!(e.rto(&cfg()), Duration::from_micros(600));
        e.back_off();
        assert_eq!(e.rto(&cfg()), Duration::from_micros(1200));
        for _ in 0..40 {
            e.back_off();
        }
        assert_eq!(e.rto(&cfg()), Duration::from_millis(50));
        e.sample(Duration::from_micros(100));
        assert_eq!(e.backoff_shift(), 0);
    }
}
