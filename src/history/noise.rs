//! What "beyond run-to-run noise" means in a history, for one measure of one run.
//!
//! The run is set against the band of the [`WINDOW`] trusted runs before it (at least
//! [`MIN_REFERENCE`]): their median, ± the noise, which is the larger of three robust standard
//! deviations of their values (1.4826 × the median absolute deviation: a run that stood out
//! before moves it little) and [`FLOOR`] of the median (so that a history of near-identical
//! runs does not call a 1% move a change). The run stands out when its whole 95% interval (its
//! own sampling error: order statistics for a percentile, the bracket for a capacity) lies
//! beyond the band — `compare`'s reading of a regression (the whole interval of the change past
//! the tolerance) with the tolerance measured from the history instead of written in the plan.
//! Which side is worse is the measure's direction.

use serde::Serialize;

use super::{MeasureHistory, RunPoint, StandOut};
use crate::report::benchmarks::Direction;

/// How many runs before a run set its band.
pub const WINDOW: usize = 10;
/// The fewest runs a band is made of: fewer say nothing of the noise.
pub const MIN_REFERENCE: usize = 3;
/// The least noise, as a share of the median.
pub const FLOOR: f64 = 0.02;
/// Robust standard deviations the noise spans.
const SIGMAS: f64 = 3.0;
/// The median absolute deviation of a normal sample, in standard deviations.
const MAD_TO_SIGMA: f64 = 1.4826;

/// The runs' usual spread of one measure.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Band {
    /// The runs' median.
    pub median: f64,
    /// The band's low edge: the median less the noise.
    pub low: f64,
    /// The band's high edge.
    pub high: f64,
    /// How many runs made it.
    pub runs: usize,
}

/// How a run's measure stands against its band.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Change {
    /// Within the band (its interval overlaps it).
    Within,
    /// Beyond the band on the worse side.
    Worse,
    /// Beyond the band on the better side.
    Better,
}

/// The band of `values` (the reference runs'), or `None` with too few.
pub fn band(values: &[f64]) -> Option<Band> {
    if values.len() < MIN_REFERENCE {
        return None;
    }
    let middle = median(values.to_vec());
    let mad = median(values.iter().map(|v| (v - middle).abs()).collect());
    let noise = (SIGMAS * MAD_TO_SIGMA * mad).max(FLOOR * middle.abs());
    Some(Band {
        median: middle,
        low: middle - noise,
        high: middle + noise,
        runs: values.len(),
    })
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    }
}

/// How a value with its interval (`bounds`, or the value alone) stands against `band`.
pub fn judge(value: f64, bounds: Option<(f64, f64)>, band: &Band, direction: Direction) -> Change {
    let (low, high) = bounds.unwrap_or((value, value));
    let side = if low > band.high {
        Some(Direction::Higher)
    } else if high < band.low {
        Some(Direction::Lower)
    } else {
        None
    };
    match side {
        None => Change::Within,
        // Above the band is worse for a measure where lower is better, and the other way.
        Some(side) if side == direction => Change::Better,
        Some(_) => Change::Worse,
    }
}

/// Each measure any run has, across the runs (in their order): each run's band and change.
pub fn measure_histories(runs: &[RunPoint]) -> Vec<MeasureHistory> {
    // The measures in the order the runs list them (the export table's), first seen first.
    let mut kinds: Vec<(String, String, String, Direction)> = Vec::new();
    for run in runs {
        for m in &run.measures {
            if !kinds.iter().any(|k| k.0 == m.slug) {
                kinds.push((m.slug.clone(), m.name.clone(), m.unit.clone(), m.direction));
            }
        }
    }
    kinds
        .into_iter()
        .map(|(slug, name, unit, direction)| {
            let mut bands = Vec::with_capacity(runs.len());
            let mut changes = Vec::with_capacity(runs.len());
            // The trusted runs' values so far, latest last.
            let mut reference: Vec<f64> = Vec::new();
            for run in runs {
                let recent = &reference[reference.len().saturating_sub(WINDOW)..];
                let run_band = band(recent);
                let measured = run.measure(&slug);
                let change = match (run_band, measured) {
                    (Some(b), Some(m)) if run.trusted => {
                        Some(judge(m.value, m.bounds, &b, direction))
                    }
                    _ => None,
                };
                bands.push(run_band);
                changes.push(change);
                if let Some(m) = measured.filter(|_| run.trusted) {
                    reference.push(m.value);
                }
            }
            let band_now = band(&reference[reference.len().saturating_sub(WINDOW)..]);
            MeasureHistory {
                slug,
                name,
                unit,
                direction,
                bands,
                changes,
                band_now,
            }
        })
        .collect()
}

/// Every run's measure beyond its band, in run order.
pub fn stand_outs(runs: &[RunPoint], measures: &[MeasureHistory]) -> Vec<StandOut> {
    let mut found = Vec::new();
    for (index, run) in runs.iter().enumerate() {
        for history in measures {
            let (Some(change), Some(band), Some(m)) = (
                history.changes[index],
                history.bands[index],
                run.measure(&history.slug),
            ) else {
                continue;
            };
            if change == Change::Within {
                continue;
            }
            found.push(StandOut {
                run: index,
                run_name: run.name().to_string(),
                slug: history.slug.clone(),
                measure: history.name.clone(),
                unit: history.unit.clone(),
                value: m.value,
                bounds: m.bounds,
                band,
                change,
                percent: (band.median != 0.0)
                    .then(|| (m.value - band.median) / band.median.abs() * 100.0),
            });
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_band_is_the_median_and_three_robust_sigmas_or_the_floor() {
        assert!(band(&[1.0, 2.0]).is_none());
        let b = band(&[10.0, 11.0, 9.0, 10.0, 30.0]).unwrap();
        // The outlier moves neither the median nor the MAD much: MAD of |0,1,1,0,20| is 1.
        assert_eq!(b.median, 10.0);
        assert!((b.high - (10.0 + 3.0 * 1.4826)).abs() < 1e-9, "{b:?}");
        // Identical runs: the floor, 2% of the median.
        let flat = band(&[100.0; 5]).unwrap();
        assert_eq!((flat.low, flat.high), (98.0, 102.0));
        // A median of zero (no errors): no floor, any error stands out.
        let zero = band(&[0.0; 4]).unwrap();
        assert_eq!((zero.low, zero.high), (0.0, 0.0));
    }

    #[test]
    fn a_run_stands_out_only_when_its_whole_interval_is_beyond_the_band() {
        let b = Band {
            median: 20.0,
            low: 18.0,
            high: 22.0,
            runs: 5,
        };
        use Change::*;
        use Direction::*;
        assert_eq!(judge(25.0, None, &b, Lower), Worse);
        assert_eq!(judge(25.0, Some((21.0, 28.0)), &b, Lower), Within);
        assert_eq!(judge(25.0, Some((22.5, 28.0)), &b, Lower), Worse);
        assert_eq!(judge(25.0, Some((22.5, 28.0)), &b, Higher), Better);
        assert_eq!(judge(15.0, Some((14.0, 17.0)), &b, Lower), Better);
        assert_eq!(judge(15.0, Some((14.0, 17.0)), &b, Higher), Worse);
        assert_eq!(judge(20.0, None, &b, Higher), Within);
    }
}
