//! A uniform sample of at most a given number of values from a stream of any length (Vitter's
//! algorithm R), so that what needs per-request values keeps memory bounded whatever the number
//! of requests: the few aggregates that take a median of per-request values (how far prompt
//! token counts are off the plan, how far the server's output counts are off the tokenizer's:
//! [`CAP`] values, within a fraction of a percent in rank of the whole stream's median), and
//! `compare`'s bootstrap over a long run's requests. Up to its capacity it holds every value, so
//! a stream that short gets the exact figure.
//!
//! Seeded with a constant: the same records give the same sample, so a report rebuilt from them
//! says the same.

use rand::{Rng, SeedableRng};

/// The most values an aggregate's median is taken over.
pub const CAP: usize = 20_000;

/// A uniform sample of a stream.
#[derive(Debug, Clone)]
pub struct Reservoir<T> {
    items: Vec<T>,
    capacity: usize,
    seen: u64,
    rng: rand_chacha::ChaCha8Rng,
}

impl<T> Default for Reservoir<T> {
    fn default() -> Self {
        Reservoir::with_capacity(CAP)
    }
}

impl<T> Reservoir<T> {
    /// A reservoir of at most `capacity` values.
    pub fn with_capacity(capacity: usize) -> Reservoir<T> {
        Reservoir {
            items: Vec::new(),
            capacity: capacity.max(1),
            seen: 0,
            rng: rand_chacha::ChaCha8Rng::seed_from_u64(0x5eed_0f5a_3b1e),
        }
    }

    /// Offers one value: kept with probability capacity / (values offered so far).
    pub fn push(&mut self, item: T) {
        self.seen += 1;
        if self.items.len() < self.capacity {
            self.items.push(item);
            return;
        }
        let slot = self.rng.random_range(0..self.seen);
        if let Some(kept) = self.items.get_mut(slot as usize) {
            *kept = item;
        }
    }

    /// The values kept.
    pub fn items(&self) -> &[T] {
        &self.items
    }

    /// How many values were offered.
    pub fn seen(&self) -> u64 {
        self.seen
    }

    /// The values kept, and how many were offered.
    pub fn into_parts(self) -> (Vec<T>, u64) {
        (self.items, self.seen)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_streams_are_kept_whole_and_long_ones_sampled_evenly() {
        let mut small = Reservoir::default();
        (0..100u32).for_each(|v| small.push(v));
        assert_eq!(small.items(), (0..100).collect::<Vec<_>>().as_slice());
        let mut long = Reservoir::default();
        (0..1_000_000u32).for_each(|v| long.push(v));
        assert_eq!(long.items().len(), CAP);
        // Uniform: the sample's median is near the stream's, and each tenth holds about a tenth.
        let mut values: Vec<u32> = long.items().to_vec();
        values.sort_unstable();
        let median = values[CAP / 2] as f64;
        assert!((median - 500_000.0).abs() < 15_000.0, "{median}");
        let first_tenth = values.iter().filter(|v| **v < 100_000).count();
        assert!((1_700..2_300).contains(&first_tenth), "{first_tenth}");
    }
}
