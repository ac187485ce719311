//! A distribution of per-request (or per-gap) values, held in an HDR histogram.
//!
//! Values are recorded as integers at a fixed resolution (nanoseconds for latencies,
//! milli-tokens per second for token rates) with 3 significant digits, so any percentile is
//! within 0.1% of the exact one whatever the number of samples. Count, sum, min and max are kept
//! exactly beside the histogram.

use hdrhistogram::Histogram;
use serde::Serialize;

use crate::plan::Stat;

#[derive(Debug, Clone)]
/// Values of one metric, with exact count, sum, min and max beside an HDR histogram.
pub struct Distribution {
    hist: Histogram<u64>,
    /// Recorded integers per reported unit (1e6 ns per ms; 1e3 milli-tokens per token/s).
    resolution: f64,
    count: u64,
    sum: f64,
    min: f64,
    max: f64,
}

/// The statistics every report shows, in the distribution's unit.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Summary {
    /// How many values.
    pub count: u64,
    /// Their mean.
    pub mean: Option<f64>,
    /// The smallest.
    pub min: Option<f64>,
    /// The median (nearest rank).
    pub p50: Option<f64>,
    /// The 90th percentile.
    pub p90: Option<f64>,
    /// The 95th percentile.
    pub p95: Option<f64>,
    /// The 99th percentile.
    pub p99: Option<f64>,
    /// The 99.9th percentile.
    pub p999: Option<f64>,
    /// The largest.
    pub max: Option<f64>,
}

impl Distribution {
    /// Latencies, reported in milliseconds and recorded in nanoseconds.
    pub fn milliseconds() -> Distribution {
        Distribution::with_resolution(1e6)
    }

    /// A distribution in the unit of a metric of `kind`: token rates per second, anything
    /// else (latencies) in milliseconds.
    pub fn for_kind(kind: super::MetricKind) -> Distribution {
        match kind {
            super::MetricKind::TokenRate => Distribution::per_second(),
            super::MetricKind::Latency
            | super::MetricKind::Fraction
            | super::MetricKind::Throughput
            | super::MetricKind::Capacity
            | super::MetricKind::Count
            | super::MetricKind::Tokens
            | super::MetricKind::Power
            | super::MetricKind::Energy
            | super::MetricKind::Cost => Distribution::milliseconds(),
        }
    }

    /// Token rates, reported in tokens per second and recorded in milli-tokens per second.
    pub fn per_second() -> Distribution {
        Distribution::with_resolution(1e3)
    }

    fn with_resolution(resolution: f64) -> Distribution {
        Distribution {
            // 3 significant digits; auto-resizing covers any range.
            hist: Histogram::new(3).unwrap_or_else(|_| unreachable_histogram()),
            resolution,
            count: 0,
            sum: 0.0,
            min: f64::INFINITY,
            max: f64::NEG_INFINITY,
        }
    }

    /// Records `value` (in the reported unit) `n` times.
    pub fn record_n(&mut self, value: f64, n: u64) {
        if !value.is_finite() || value < 0.0 || n == 0 {
            return;
        }
        let scaled = (value * self.resolution).round().max(0.0) as u64;
        if self.hist.record_n(scaled, n).is_err() {
            return;
        }
        self.count += n;
        self.sum += value * n as f64;
        self.min = self.min.min(value);
        self.max = self.max.max(value);
    }

    /// Records `value` once.
    pub fn record(&mut self, value: f64) {
        self.record_n(value, 1);
    }

    /// How many values were recorded.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// The value of a statistic; `None` when there are no samples.
    pub fn stat(&self, stat: Stat) -> Option<f64> {
        if self.count == 0 {
            return None;
        }
        Some(match stat {
            Stat::Mean => self.sum / self.count as f64,
            Stat::Min => self.min,
            Stat::Max => self.max,
            Stat::Percentile(p) => {
                // Nearest rank, ceil(p/100 · n), computed so that float error in p/100 (99.9/100
                // is 0.9990000000000001) cannot push it one rank up; then asked of the histogram
                // half a rank low, which it rounds back up to exactly that rank.
                let n = self.count as f64;
                let rank = ((p / 100.0) * n - 1e-9).ceil().clamp(1.0, n);
                let value = self.hist.value_at_quantile((rank - 0.5) / n) as f64 / self.resolution;
                // The histogram answers with its bucket's top (at most 0.1% above the exact
                // value, so an SLA is never judged on an under-estimate); the exact extremes
                // bound it.
                value.clamp(self.min, self.max)
            }
        })
    }

    /// The `rank`-th smallest value (1-based; ranks beyond the count are the largest), as
    /// [`Distribution::stat`] reads a percentile: the histogram's bucket top, within the exact
    /// extremes. `None` without values.
    pub fn value_at_rank(&self, rank: u64) -> Option<f64> {
        if self.count == 0 {
            return None;
        }
        let n = self.count as f64;
        let rank = (rank as f64).clamp(1.0, n);
        let value = self.hist.value_at_quantile((rank - 0.5) / n) as f64 / self.resolution;
        Some(value.clamp(self.min, self.max))
    }

    /// The share of the values at or below `value` (in the reported unit), to the histogram's
    /// precision.
    pub fn share_at_or_below(&self, value: f64) -> f64 {
        if self.count == 0 || !value.is_finite() {
            return 0.0;
        }
        if value < self.min {
            return 0.0;
        }
        if value >= self.max {
            return 1.0;
        }
        let scaled = (value * self.resolution).max(0.0) as u64;
        self.hist.quantile_below(scaled)
    }

    /// Adds every value of `other`.
    pub fn merge(&mut self, other: &Distribution) {
        if other.count == 0 {
            return;
        }
        let _ = self.hist.add(&other.hist);
        self.count += other.count;
        self.sum += other.sum;
        self.min = self.min.min(other.min);
        self.max = self.max.max(other.max);
    }

    /// The statistics every report shows.
    pub fn summary(&self) -> Summary {
        let p = |q| self.stat(Stat::Percentile(q));
        Summary {
            count: self.count,
            mean: self.stat(Stat::Mean),
            min: self.stat(Stat::Min),
            p50: p(50.0),
            p90: p(90.0),
            p95: p(95.0),
            p99: p(99.0),
            p999: p(99.9),
            max: self.stat(Stat::Max),
        }
    }
}

fn unreachable_histogram() -> Histogram<u64> {
    // `Histogram::new(3)` only fails for sigfig > 5; this is never reached.
    Histogram::new_with_bounds(1, 2, 1).expect("a histogram with fixed valid bounds")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_within_a_tenth_of_a_percent() {
        let mut d = Distribution::milliseconds();
        for i in 1..=1000 {
            d.record(i as f64);
        }
        let close =
            |got: Option<f64>, want: f64| (got.unwrap() - want).abs() <= want * 0.001 + 1e-9;
        assert!(close(d.stat(Stat::Percentile(50.0)), 500.0));
        assert!(close(d.stat(Stat::Percentile(99.0)), 990.0));
        assert!(close(d.stat(Stat::Percentile(99.9)), 999.0));
        assert_eq!(d.stat(Stat::Max), Some(1000.0));
        assert_eq!(d.stat(Stat::Min), Some(1.0));
        assert_eq!(d.stat(Stat::Mean), Some(500.5));
    }

    #[test]
    fn empty_has_no_statistics() {
        let d = Distribution::milliseconds();
        assert_eq!(d.summary().p99, None);
        assert_eq!(d.summary().count, 0);
    }

    #[test]
    fn weighted_samples_and_merge() {
        let mut a = Distribution::milliseconds();
        a.record_n(2.0, 3);
        let mut b = Distribution::milliseconds();
        b.record(10.0);
        a.merge(&b);
        assert_eq!(a.count(), 4);
        assert_eq!(a.stat(Stat::Mean), Some(4.0));
        let median = a.stat(Stat::Percentile(50.0)).unwrap();
        assert!((2.0..=2.002).contains(&median), "{median}");
    }
}
