//! Seeded resampling with replacement, and nearest-rank percentiles of raw values.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

pub struct Resampler {
    rng: ChaCha8Rng,
}

impl Resampler {
    pub fn new(seed: u64) -> Resampler {
        Resampler {
            rng: ChaCha8Rng::seed_from_u64(seed),
        }
    }

    /// Fills `out` with `n` indices drawn uniformly from 0..n, with replacement.
    pub fn resample(&mut self, n: usize, out: &mut Vec<usize>) {
        out.clear();
        if n == 0 {
            return;
        }
        out.extend((0..n).map(|_| self.rng.random_range(0..n)));
    }
}

/// The nearest-rank percentile p of `values` (reordered in place); `values` must not be empty.
pub fn percentile(values: &mut [f64], p: f64) -> f64 {
    let n = values.len();
    let rank = (((p / 100.0) * n as f64 - 1e-9).ceil() as usize).clamp(1, n);
    let (_, value, _) = values.select_nth_unstable_by(rank - 1, |a, b| a.total_cmp(b));
    *value
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank() {
        let mut v: Vec<f64> = (1..=1000).rev().map(|x| x as f64).collect();
        assert_eq!(percentile(&mut v, 50.0), 500.0);
        assert_eq!(percentile(&mut v, 99.9), 999.0);
        assert_eq!(percentile(&mut v, 100.0), 1000.0);
        assert_eq!(percentile(&mut [3.0], 1.0), 3.0);
    }

    #[test]
    fn resampling_is_seeded() {
        let (mut a, mut b) = (Vec::new(), Vec::new());
        Resampler::new(4).resample(50, &mut a);
        Resampler::new(4).resample(50, &mut b);
        assert_eq!(a, b);
        assert!(a.iter().all(|&i| i < 50));
    }
}
