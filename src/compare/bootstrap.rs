//! Seeded resampling with replacement.

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resampling_is_seeded() {
        let (mut a, mut b) = (Vec::new(), Vec::new());
        Resampler::new(4).resample(50, &mut a);
        Resampler::new(4).resample(50, &mut b);
        assert_eq!(a, b);
        assert!(a.iter().all(|&i| i < 50));
    }
}
