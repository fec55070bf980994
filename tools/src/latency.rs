//! Latency recording with HDR histograms, and its summaries.

use hdrhistogram::Histogram;
use std::io::{self, Write};

/// Round-trip times of one message size, in nanoseconds.
pub struct LatencyRecorder {
    hist: Histogram<u64>,
}

/// Percentiles of a recorder, in nanoseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct LatencySummary {
    /// Samples recorded.
    pub count: u64,
    /// Median.
    pub p50_ns: u64,
    /// 90th percentile.
    pub p90_ns: u64,
    /// 99th percentile.
    pub p99_ns: u64,
    /// 99.9th percentile.
    pub p999_ns: u64,
    /// Largest sample.
    pub max_ns: u64,
    /// Mean.
    pub mean_ns: u64,
}

impl LatencyRecorder {
    /// An empty recorder covering 1 ns to 100 s with 3 significant digits.
    pub fn new() -> Self {
        LatencyRecorder {
            hist: Histogram::new_with_bounds(1, 100_000_000_000, 3)
                .expect("valid histogram bounds"),
        }
    }

    /// Records one sample (clamped into the recorder's range).
    pub fn record(&mut self, nanos: u64) {
        self.hist.saturating_record(nanos.max(1));
    }

    /// The percentiles.
    pub fn summary(&self) -> LatencySummary {
        let h = &self.hist;
        LatencySummary {
            count: h.len(),
            p50_ns: h.value_at_quantile(0.50),
            p90_ns: h.value_at_quantile(0.90),
            p99_ns: h.value_at_quantile(0.99),
            p999_ns: h.value_at_quantile(0.999),
            max_ns: h.max(),
            mean_ns: h.mean().round() as u64,
        }
    }

    /// The percentile distribution as (quantile, ns) points, by ascending
    /// quantile: the rows of the `.hgrm` file (five steps per halving of
    /// the distance to 100 %, so the tail is as finely drawn as the body),
    /// for charts and the JSON report.
    pub fn distribution(&self) -> Vec<(f64, u64)> {
        self.hist
            .iter_quantiles(5)
            .map(|v| (v.quantile_iterated_to(), v.value_iterated_to()))
            .collect()
    }

    /// Writes the percentile distribution in HdrHistogram's `.hgrm` text
    /// format (values in microseconds), loadable by the HdrHistogram plotter.
    pub fn write_hgrm(&self, out: &mut impl Write) -> io::Result<()> {
        let h = &self.hist;
        let scale = 1000.0;
        writeln!(
            out,
            "{:>12} {:>14} {:>10} {:>14}\n",
            "Value", "Percentile", "TotalCount", "1/(1-Percentile)"
        )?;
        let mut total = 0u64;
        for v in h.iter_quantiles(5) {
            total += v.count_since_last_iteration();
            let q = v.quantile_iterated_to();
            let inverse = if q < 1.0 {
                format!("{:>14.2}", 1.0 / (1.0 - q))
            } else {
                String::new()
            };
            writeln!(
                out,
                "{:>12.3} {:>2.12} {:>10} {}",
                v.value_iterated_to() as f64 / scale,
                q,
                total,
                inverse
            )?;
        }
        writeln!(
            out,
            "#[Mean    = {:>12.3}, StdDeviation   = {:>12.3}]",
            h.mean() / scale,
            h.stdev() / scale
        )?;
        writeln!(
            out,
            "#[Max     = {:>12.3}, Total count    = {:>12}]",
            h.max() as f64 / scale,
            h.len()
        )?;
        writeln!(
            out,
            "#[Buckets = {:>12}, SubBuckets     = {:>12}]",
            h.buckets(),
            h.distinct_values()
        )
    }
}

impl Default for LatencyRecorder {
    fn default() -> Self {
        Self::new()
    }
}

/// Formats nanoseconds as microseconds with two decimals.
pub fn micros(nanos: u64) -> String {
    format!("{:.2}", nanos as f64 / 1000.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_percentiles_follow_the_samples() {
        let mut r = LatencyRecorder::new();
        for v in 1..=1000u64 {
            r.record(v * 1000);
        }
        let s = r.summary();
        assert_eq!(s.count, 1000);
        assert!((499_000..=501_000).contains(&s.p50_ns), "{s:?}");
        assert!((989_000..=991_000).contains(&s.p99_ns), "{s:?}");
        assert!(s.max_ns >= 999_000 && s.max_ns <= 1_001_000);
    }

    #[test]
    fn the_distribution_rises_to_the_largest_sample() {
        let mut r = LatencyRecorder::new();
        for v in 1..=1000u64 {
            r.record(v * 1000);
        }
        let d = r.distribution();
        assert!(d.len() > 10, "{d:?}");
        assert!(d.windows(2).all(|w| w[0].0 <= w[1].0 && w[0].1 <= w[1].1));
        assert_eq!(d.last().map(|p| p.0), Some(1.0));
        assert!(d.last().unwrap().1 >= 999_000);
        assert!(LatencyRecorder::new().distribution().is_empty());
    }

    #[test]
    fn hgrm_output_ends_at_total_count() {
        let mut r = LatencyRecorder::new();
        for v in [1000, 2000, 3000, 50_000] {
            r.record(v);
        }
        let mut out = Vec::new();
        r.write_hgrm(&mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.starts_with("       Value"));
        assert!(text.contains("Total count    =            4"), "{text}");
        let last_row = text
            .lines()
            .rfind(|l| !l.starts_with('#') && !l.trim().is_empty())
            .unwrap();
        assert!(last_row.contains(" 4"), "{last_row}");
    }
}
