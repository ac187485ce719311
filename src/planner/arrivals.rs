//! Arrival processes for open-loop phases.
//!
//! Every process is a renewal process in "work" units: unit-mean increments (exponential for
//! Poisson, gamma with the plan's coefficient of variation, or exactly 1 for constant) are summed
//! into cumulative work W, and each arrival is sent at the time t where the integrated rate
//! Λ(t) = ∫ rate reaches W. For a constant rate Λ(t) = R·t; for a linear ramp from A to B over a
//! phase of length D, Λ(t) = A·t + (B − A)·t²/(2D), which is solved exactly. This time-rescaling
//! keeps a ramp's arrivals Poisson (or gamma) at every instant.

use std::time::Duration;

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Exp1, Gamma};

use crate::plan::{Arrivals, RateShape};

/// Why arrivals could not be drawn (the plan checker refuses both cases first).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArrivalError {
    /// More than `limit` arrivals.
    TooMany,
    /// A gamma process with no valid shape.
    Gamma,
}

/// Intended send offsets (µs from the phase start) until the phase's duration or request limit,
/// at most `limit` of them.
pub fn arrival_offsets(
    rate: RateShape,
    arrivals: Arrivals,
    duration: Option<Duration>,
    max_requests: Option<u64>,
    seed: u64,
    limit: usize,
) -> Result<Vec<u64>, ArrivalError> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let gamma = match arrivals {
        Arrivals::Gamma { cv } => {
            let shape = 1.0 / (cv * cv);
            Some(Gamma::new(shape, 1.0 / shape).map_err(|_| ArrivalError::Gamma)?)
        }
        _ => None,
    };
    let horizon = duration.map(|d| d.as_secs_f64());
    let mut offsets = Vec::new();
    let mut work = 0.0f64;
    loop {
        if max_requests.is_some_and(|max| offsets.len() as u64 >= max) {
            break;
        }
        // Constant arrivals send the first request at once; random processes start at the
        // first increment, as a renewal process does.
        let increment = match (arrivals, &gamma) {
            (Arrivals::Constant, _) => {
                if offsets.is_empty() {
                    0.0
                } else {
                    1.0
                }
            }
            (_, Some(gamma)) => gamma.sample(&mut rng),
            _ => Exp1.sample(&mut rng),
        };
        work += increment;
        let Some(t) = time_for_work(rate, horizon, work) else {
            break;
        };
        if horizon.is_some_and(|h| t >= h) {
            break;
        }
        if offsets.len() >= limit {
            return Err(ArrivalError::TooMany);
        }
        offsets.push((t * 1e6).round() as u64);
    }
    Ok(offsets)
}

/// Solves Λ(t) = work; `None` when the phase's whole rate integral is used up.
fn time_for_work(rate: RateShape, horizon: Option<f64>, work: f64) -> Option<f64> {
    match rate {
        RateShape::Constant(r) => Some(work / r),
        RateShape::Ramp { from, to } => {
            // The plan stage guarantees a ramp has a duration.
            let d = horizon?;
            let total = (from + to) / 2.0 * d;
            if work > total {
                return None;
            }
            let k = (to - from) / (2.0 * d);
            if k.abs() < 1e-12 {
                return Some(work / from);
            }
            let disc = from * from + 4.0 * k * work;
            if disc < 0.0 {
                return None;
            }
            // The root of k·t² + from·t − work = 0 in [0, d], written to avoid cancellation.
            Some(2.0 * work / (from + disc.sqrt()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(offsets: &[u64]) -> Vec<f64> {
        offsets.iter().map(|&o| o as f64 / 1e6).collect()
    }

    fn cv(gaps: &[f64]) -> f64 {
        let n = gaps.len() as f64;
        let mean = gaps.iter().sum::<f64>() / n;
        let var = gaps.iter().map(|g| (g - mean).powi(2)).sum::<f64>() / (n - 1.0);
        var.sqrt() / mean
    }

    fn gaps(times: &[f64]) -> Vec<f64> {
        times.windows(2).map(|w| w[1] - w[0]).collect()
    }

    #[test]
    fn poisson_has_the_mean_rate_and_exponential_gaps() {
        let offsets = arrival_offsets(
            RateShape::Constant(50.0),
            Arrivals::Poisson,
            Some(Duration::from_secs(400)),
            None,
            11,
            usize::MAX,
        )
        .unwrap();
        let n = offsets.len() as f64;
        assert!((n / 400.0 - 50.0).abs() < 1.0, "rate {}", n / 400.0);
        let g = gaps(&secs(&offsets));
        assert!((cv(&g) - 1.0).abs() < 0.03, "cv {}", cv(&g));
        // Exponential: P(gap > mean) = e^-1.
        let mean = g.iter().sum::<f64>() / g.len() as f64;
        let above = g.iter().filter(|&&x| x > mean).count() as f64 / g.len() as f64;
        assert!(
            (above - (-1.0f64).exp()).abs() < 0.01,
            "P(gap>mean) {above}"
        );
        // And P(gap > 2·mean) = e^-2.
        let above2 = g.iter().filter(|&&x| x > 2.0 * mean).count() as f64 / g.len() as f64;
        assert!(
            (above2 - (-2.0f64).exp()).abs() < 0.01,
            "P(gap>2mean) {above2}"
        );
    }

    #[test]
    fn constant_arrivals_are_evenly_spaced() {
        let offsets = arrival_offsets(
            RateShape::Constant(10.0),
            Arrivals::Constant,
            Some(Duration::from_secs(2)),
            None,
            1,
            usize::MAX,
        )
        .unwrap();
        assert_eq!(offsets.len(), 20);
        assert_eq!(offsets[0], 0);
        assert!(offsets.windows(2).all(|w| w[1] - w[0] == 100_000));
    }

    #[test]
    fn gamma_arrivals_have_the_asked_variation() {
        let offsets = arrival_offsets(
            RateShape::Constant(100.0),
            Arrivals::Gamma { cv: 2.0 },
            Some(Duration::from_secs(300)),
            None,
            5,
            usize::MAX,
        )
        .unwrap();
        let g = gaps(&secs(&offsets));
        assert!((cv(&g) - 2.0).abs() < 0.1, "cv {}", cv(&g));
        assert!((offsets.len() as f64 / 300.0 - 100.0).abs() < 5.0);
    }

    #[test]
    fn a_ramp_rises_linearly() {
        let offsets = arrival_offsets(
            RateShape::Ramp {
                from: 1.0,
                to: 41.0,
            },
            Arrivals::Poisson,
            Some(Duration::from_secs(200)),
            None,
            3,
            usize::MAX,
        )
        .unwrap();
        let t = secs(&offsets);
        // Expected count: mean rate 21/s over 200 s.
        assert!(
            (t.len() as f64 - 4200.0).abs() < 4.0 * 4200f64.sqrt(),
            "{}",
            t.len()
        );
        // Count in each fifth of the phase follows the integral of the ramp.
        for fifth in 0..5 {
            let (a, b) = (fifth as f64 * 40.0, (fifth + 1) as f64 * 40.0);
            let expected = (1.0 * (b - a)) + 40.0 / 400.0 * (b * b - a * a);
            let got = t.iter().filter(|&&x| x >= a && x < b).count() as f64;
            assert!(
                (got - expected).abs() < 4.0 * expected.sqrt(),
                "fifth {fifth}: {got} vs {expected}"
            );
        }
    }

    #[test]
    fn request_limit_ends_a_phase_first() {
        let offsets = arrival_offsets(
            RateShape::Constant(10.0),
            Arrivals::Poisson,
            Some(Duration::from_secs(100)),
            Some(7),
            1,
            usize::MAX,
        )
        .unwrap();
        assert_eq!(offsets.len(), 7);
    }
}
