//! How sure a percentile is: distribution-free confidence bounds from order statistics.
//!
//! Of `n` values, the true p-quantile lies above the `l`-th smallest with probability
//! P(Bin(n, p) ≥ l), and below the `u`-th with probability P(Bin(n, p) < u): whatever the
//! distribution, with no assumption of normality (the rule MLPerf LoadGen's early stopping and
//! every textbook's nonparametric quantile interval use). [`ranks`] finds the ranks that hold at
//! a confidence; an assertion then passes when the bound on its own side holds, fails when the
//! bound on the other side breaks it, and is otherwise not decided ([`requests_to_decide`]
//! says how many requests would decide it, were its values to keep their shape).
//!
//! Not for: means and rates (they are judged on the observed value), nor for comparing two runs
//! (`compare` resamples them).

/// The ranks (1-based, among `n` values in ascending order) of the one-sided `confidence`
/// bounds of the `p`-quantile (`p` in (0, 1)): the true quantile is at least the `lower`-th
/// value, and at most the `upper`-th, each with that confidence. `None` where no rank of the
/// sample is far enough out (too few values: p99.9 from 40 requests has no upper bound).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ranks {
    /// The lower bound's rank, if the sample has one.
    pub lower: Option<u64>,
    /// The upper bound's rank, if the sample has one.
    pub upper: Option<u64>,
}

/// The one-sided bounds' ranks for the `p`-quantile of `n` values at `confidence` (both in (0, 1)).
pub(crate) fn ranks(n: u64, p: f64, confidence: f64) -> Ranks {
    if n == 0 || !(p > 0.0 && p < 1.0) {
        return Ranks {
            lower: None,
            upper: None,
        };
    }
    let alpha = 1.0 - confidence;
    let (lo, hi) = window(n, p);
    let ln_p = p.ln();
    let ln_q = (1.0 - p).ln();
    let mut cdf = 0.0;
    // The largest k (from -1) with P(X ≤ k) ≤ α; the smallest k with P(X ≤ k) ≥ 1 − α.
    let mut below_alpha: i64 = if lo == 0 { -1 } else { lo as i64 - 1 };
    let mut above_confidence: Option<u64> = None;
    for k in lo..=hi {
        cdf += (ln_choose(n, k) + k as f64 * ln_p + (n - k) as f64 * ln_q).exp();
        if cdf <= alpha {
            below_alpha = k as i64;
        }
        if cdf >= confidence {
            above_confidence = Some(k);
            break;
        }
    }
    // X_(l) ≤ ξ with probability P(X ≥ l) = 1 − P(X ≤ l − 1) ≥ 1 − α.
    let lower = u64::try_from(below_alpha + 1).ok().filter(|&l| l >= 1);
    // X_(u) ≥ ξ with probability P(X ≤ u − 1) ≥ 1 − α.
    let upper = above_confidence.map(|k| k + 1).filter(|&u| u <= n);
    Ranks { lower, upper }
}

/// The ranks holding all of Bin(n, p)'s mass but a negligible part (beyond 15 standard
/// deviations and 40 ranks of its mean: below 1e-40), so that a long run costs a window of
/// ranks, not all `n`.
fn window(n: u64, p: f64) -> (u64, u64) {
    let mean = n as f64 * p;
    let spread = 15.0 * (mean * (1.0 - p)).sqrt() + 40.0;
    let lo = (mean - spread).floor().max(0.0) as u64;
    let hi = ((mean + spread).ceil() as u64).min(n);
    (lo, hi)
}

/// ln C(n, k).
fn ln_choose(n: u64, k: u64) -> f64 {
    ln_factorial(n) - ln_factorial(k) - ln_factorial(n - k)
}

/// ln k!: summed below 16, Stirling's series above (its error there is below 1e-12).
fn ln_factorial(k: u64) -> f64 {
    if k < 16 {
        return (2..=k).map(|i| (i as f64).ln()).sum();
    }
    let x = k as f64;
    let x2 = x * x;
    x * x.ln() - x + 0.5 * (2.0 * std::f64::consts::PI * x).ln() + 1.0 / (12.0 * x)
        - 1.0 / (360.0 * x * x2)
        + 1.0 / (1260.0 * x * x2 * x2)
}

/// Which way a sample leans, for [`requests_to_decide`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lean {
    /// Toward a quantile below the threshold: shown by the upper bound.
    Below,
    /// Toward a quantile above it: shown by the lower bound.
    Above,
}

/// The most requests [`requests_to_decide`] names: beyond, a sample that leans so little
/// cannot decide in any run people make.
const MOST_REQUESTS: u64 = 100_000_000;

/// How many values would decide whether the `p`-quantile lies below or above a threshold at
/// `confidence`, if a share `below` of them keeps falling below it (the current sample's
/// shape): the fewest `n` whose bound on the `lean` side falls on that side of the threshold.
/// `None` when no number of requests up to 100 million would (the quantile sits on the
/// threshold).
pub(crate) fn requests_to_decide(p: f64, confidence: f64, below: f64, lean: Lean) -> Option<u64> {
    let decides = |n: u64| {
        let count_below = (below * n as f64).round() as u64;
        let r = ranks(n, p, confidence);
        match lean {
            // The u-th value is below the threshold when at least u values are.
            Lean::Below => r.upper.is_some_and(|u| count_below >= u),
            // The l-th value is above it when fewer than l values are below.
            Lean::Above => r.lower.is_some_and(|l| count_below < l),
        }
    };
    let mut high = 1u64;
    while !decides(high) {
        if high >= MOST_REQUESTS {
            return None;
        }
        high = (high * 2).min(MOST_REQUESTS);
    }
    let mut low = high / 2;
    // `decides(low)` is false (or low is 0); bisect to the first that decides.
    while high - low > 1 {
        let mid = low + (high - low) / 2;
        if decides(mid) {
            high = mid;
        } else {
            low = mid;
        }
    }
    Some(high)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// P(Bin(n, p) ≤ k), summed term by term in f64 (small n only).
    fn cdf_exact(n: u64, p: f64, k: u64) -> f64 {
        let mut total = 0.0;
        let mut choose = 1.0f64;
        for i in 0..=n {
            if i > 0 {
                choose = choose * (n - i + 1) as f64 / i as f64;
            }
            if i <= k {
                total += choose * p.powi(i as i32) * (1.0 - p).powi((n - i) as i32);
            }
        }
        total
    }

    #[test]
    fn the_ranks_are_the_binomial_rules_on_small_samples() {
        for n in [1u64, 5, 20, 40, 100, 150] {
            for p in [0.5, 0.9, 0.95, 0.99] {
                let r = ranks(n, p, 0.95);
                if let Some(u) = r.upper {
                    // u is the smallest rank with P(X ≤ u − 1) ≥ 0.95.
                    assert!(cdf_exact(n, p, u - 1) >= 0.95 - 1e-9, "n={n} p={p} u={u}");
                    assert!(u == 1 || cdf_exact(n, p, u - 2) < 0.95, "n={n} p={p} u={u}");
                } else {
                    assert!(
                        cdf_exact(n, p, n - 1) < 0.95,
                        "n={n} p={p}: an upper rank exists"
                    );
                }
                if let Some(l) = r.lower {
                    // l is the largest rank with P(X ≤ l − 1) ≤ 0.05.
                    assert!(cdf_exact(n, p, l - 1) <= 0.05 + 1e-9, "n={n} p={p} l={l}");
                    assert!(l == n || cdf_exact(n, p, l) > 0.05, "n={n} p={p} l={l}");
                } else {
                    assert!(
                        cdf_exact(n, p, 0) > 0.05,
                        "n={n} p={p}: a lower rank exists"
                    );
                }
            }
        }
    }

    #[test]
    fn a_percentile_needs_enough_values_for_an_upper_bound() {
        // The largest of n values bounds the p-quantile from above once p^n ≤ 1 − confidence.
        assert_eq!(ranks(298, 0.99, 0.95).upper, None);
        assert_eq!(ranks(299, 0.99, 0.95).upper, Some(299));
        assert_eq!(ranks(2994, 0.999, 0.95).upper, None);
        assert_eq!(ranks(2995, 0.999, 0.95).upper, Some(2995));
        // 99% confidence asks more.
        assert_eq!(ranks(459, 0.99, 0.99).upper, Some(459));
        assert_eq!(ranks(458, 0.99, 0.99).upper, None);
        assert_eq!(ranks(40, 0.999, 0.95).upper, None);
    }

    #[test]
    fn long_runs_cost_a_window_not_every_rank() {
        let r = ranks(10_000_000, 0.99, 0.95);
        let (l, u) = (r.lower.unwrap(), r.upper.unwrap());
        // Normal approximation: 9,900,000 ± 1.645 · 314.6.
        assert!((9_899_470..=9_899_490).contains(&l), "{l}");
        assert!((9_900_510..=9_900_530).contains(&u), "{u}");
    }

    #[test]
    fn the_requests_that_would_decide() {
        // Every value below: a p99.9 is shown below after 2,995 values at 95%.
        assert_eq!(
            requests_to_decide(0.999, 0.95, 1.0, Lean::Below),
            Some(2995)
        );
        assert_eq!(requests_to_decide(0.99, 0.95, 1.0, Lean::Below), Some(299));
        // Half the values above the threshold: a p99 above it is shown at once.
        assert_eq!(requests_to_decide(0.99, 0.95, 0.5, Lean::Above), Some(2));
        // 98% below: a p99 above the threshold takes a few hundred requests.
        let n = requests_to_decide(0.99, 0.95, 0.98, Lean::Above).unwrap();
        assert!((300..2000).contains(&n), "{n}");
        // On the threshold: no run decides it.
        assert_eq!(requests_to_decide(0.99, 0.95, 0.99, Lean::Below), None);
    }

    #[test]
    fn ln_factorial_is_continuous_across_its_two_methods() {
        let summed: f64 = (2..=16u64).map(|i| (i as f64).ln()).sum();
        assert!((ln_factorial(16) - summed).abs() < 1e-10);
        let summed: f64 = (2..=200u64).map(|i| (i as f64).ln()).sum();
        assert!((ln_factorial(200) - summed).abs() < 1e-9);
    }
}
