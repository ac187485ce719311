//! Requests grouped by a count they carry (their input length, their batch's size): each count
//! a group of its own while there are few, then ranges that double, so that a dataset's
//! thousand lengths make a table of a dozen rows and hold a dozen sets of histograms.
//!
//! What this is not: what a group gathers (each grouping says, [`Gathers`]), or a time series.

use std::collections::BTreeMap;

/// Distinct counts listed one by one; beyond, they are grouped in ranges.
const MAX_EXACT: usize = 16;

/// The range a count falls in, when counts are grouped: (2^(k-1), 2^k].
fn range(count: u32) -> (u32, u32) {
    let high = count.max(1).checked_next_power_of_two().unwrap_or(u32::MAX);
    (high / 2 + 1, high)
}

/// What one group gathers of its requests, and how two groups become one range.
pub(super) trait Gathers {
    /// Takes `other`'s requests into these.
    fn merge(&mut self, other: Self);
}

/// Groups keyed by a count, exact or ranged.
pub(super) struct Grouped<A> {
    groups: BTreeMap<u32, A>,
    /// `groups` holds ranges (keyed by their top), not counts.
    ranged: bool,
}

impl<A: Gathers> Grouped<A> {
    pub(super) fn new() -> Grouped<A> {
        Grouped {
            groups: BTreeMap::new(),
            ranged: false,
        }
    }

    /// The group of `count`, made by `new` when it has none yet.
    pub(super) fn group(&mut self, count: u32, new: impl FnOnce() -> A) -> &mut A {
        if !self.ranged && !self.groups.contains_key(&count) && self.groups.len() >= MAX_EXACT {
            self.ranged = true;
            for (exact, group) in std::mem::take(&mut self.groups) {
                match self.groups.entry(range(exact).1) {
                    std::collections::btree_map::Entry::Vacant(slot) => {
                        slot.insert(group);
                    }
                    std::collections::btree_map::Entry::Occupied(mut slot) => {
                        slot.get_mut().merge(group)
                    }
                }
            }
        }
        let key = if self.ranged { range(count).1 } else { count };
        self.groups.entry(key).or_insert_with(new)
    }

    /// Each group with its lowest and highest count (equal unless ranged), in order.
    pub(super) fn finish(self) -> impl Iterator<Item = ((u32, u32), A)> {
        let ranged = self.ranged;
        self.groups
            .into_iter()
            .map(move |(key, group)| (if ranged { range(key) } else { (key, key) }, group))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl Gathers for u64 {
        fn merge(&mut self, other: u64) {
            *self += other;
        }
    }

    #[test]
    fn few_counts_stay_exact_and_many_become_ranges_that_double() {
        let mut few = Grouped::<u64>::new();
        for count in [3, 3, 5] {
            *few.group(count, || 0) += 1;
        }
        assert_eq!(few.finish().collect::<Vec<_>>(), [((3, 3), 2), ((5, 5), 1)]);
        let mut many = Grouped::<u64>::new();
        for count in 1..=40 {
            *many.group(count, || 0) += 1;
        }
        let groups: Vec<_> = many.finish().collect();
        assert_eq!(
            groups,
            [
                ((1, 1), 1),
                ((2, 2), 1),
                ((3, 4), 2),
                ((5, 8), 4),
                ((9, 16), 8),
                ((17, 32), 16),
                ((33, 64), 8)
            ]
        );
        // Every request is in one group.
        assert_eq!(groups.iter().map(|(_, n)| n).sum::<u64>(), 40);
    }
}
