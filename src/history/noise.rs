//! What "beyond run-to-run noise" means in a history, for one measure of one run.
//!
//! The run is set against the band of the [`WINDOW`] trusted runs before it (at least
//! [`MIN_REFERENCE`]): their median, ± the noise (never below zero: no measure is), which is
//! the larger of a prediction interval's half-width and [`FLOOR`] of the median (so that a history of near-identical runs does not
//! call a 1% move a change). The prediction interval is the one a next run of the same code
//! falls in 99.73% of the time (what "3 σ" means for a known σ): Student's t at n − 1 degrees
//! of freedom × √(1 + 1/n) × a robust standard deviation (1.4826 × the median absolute
//! deviation: a run that stood out before moves it little). Three sigmas alone trusted three
//! runs as if they were thirty: the MAD of three values is the gap between the two closest, and
//! CI flagged a normal run as "better" against runs of 207, 206 and 191 ms (a band of 202–211);
//! t at 2 degrees of freedom widens that band 7× and at 9 (a full window) 1.4×. The run stands
//! out when its whole 95% interval (its own sampling error: order statistics for a percentile,
//! open on a side the sample cannot bound; the bracket for a capacity) lies beyond the band — `compare`'s reading of a regression (the whole interval of the change past
//! the tolerance) with the tolerance measured from the history instead of written in the plan.
//! Which side is worse is the measure's direction.

use serde::Serialize;

use super::{MeasureHistory, RunPoint, StandOut};
use crate::metrics::table::Better;
use crate::report::benchmarks::Open;

/// How many runs before a run set its band.
pub const WINDOW: usize = 10;
/// The fewest runs a band is made of: fewer say nothing of the noise.
pub const MIN_REFERENCE: usize = 3;
/// The least noise, as a share of the median.
pub const FLOOR: f64 = 0.02;
/// Student's t quantile at 0.99865 (a two-sided 99.73% interval, "3 σ"), × √(1 + 1/n) for the
/// new run's own draw, by the n runs of the band (n − 1 degrees of freedom), for 3 ≤ n ≤ 10.
/// A table rather than a t-distribution crate: eight numbers, checked by the test below against
/// a numerical integral of the t density.
const PREDICTION_SIGMAS: [(usize, f64); 8] = [
    (3, 22.178),
    (4, 10.307),
    (5, 7.2521),
    (6, 5.9483),
    (7, 5.2427),
    (8, 4.8048),
    (9, 4.5080),
    (10, 4.2941),
];
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
    let noise = (prediction_sigmas(values.len()) * MAD_TO_SIGMA * mad).max(FLOOR * middle.abs());
    // Every measure is a latency, a rate, a share or a load: none is below zero, and a band
    // reaching below it (three runs' t is 22 σ) would draw and say a value no run can have.
    Some(Band {
        median: middle,
        low: (middle - noise).max(0.0),
        high: middle + noise,
        runs: values.len(),
    })
}

/// How many robust standard deviations a band of `runs` runs spans (more runs than the table:
/// its last, a slight overstatement).
fn prediction_sigmas(runs: usize) -> f64 {
    PREDICTION_SIGMAS
        .iter()
        .rev()
        .find(|(n, _)| *n <= runs)
        .map_or(PREDICTION_SIGMAS[0].1, |(_, sigmas)| *sigmas)
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

/// How a value with its interval (`bounds`, or the value alone; an `open` end reaches
/// without limit) stands against `band`.
pub fn judge(
    value: f64,
    bounds: Option<(f64, f64)>,
    open: Open,
    band: &Band,
    direction: Better,
) -> Change {
    let (low, high) = bounds.unwrap_or((value, value));
    let low = if open.below() { f64::NEG_INFINITY } else { low };
    let high = if open.above() { f64::INFINITY } else { high };
    let side = if low > band.high {
        Some(Better::Higher)
    } else if high < band.low {
        Some(Better::Lower)
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
    let mut kinds: Vec<(String, String, String, Better)> = Vec::new();
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
                        Some(judge(m.value, m.bounds, m.open, &b, direction))
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
                open: m.open,
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
    fn the_band_is_the_median_and_a_prediction_interval_or_the_floor() {
        assert!(band(&[1.0, 2.0]).is_none());
        let b = band(&[10.0, 11.0, 9.0, 10.0, 30.0]).unwrap();
        // The outlier moves neither the median nor the MAD much: MAD of |0,1,1,0,20| is 1.
        assert_eq!(b.median, 10.0);
        assert!((b.high - (10.0 + 7.2521 * 1.4826)).abs() < 1e-9, "{b:?}");
        // What CI met: 207, 206 and 191 ms before a run of 192 (95% interval 190–192). The MAD
        // is 1; three sigmas made a band of 201.6–210.4 and called the run better.
        let three = band(&[207.0, 206.0, 191.0]).unwrap();
        assert!(three.low < 175.0, "{three:?}");
        assert_eq!(
            judge(
                192.0,
                Some((190.0, 192.0)),
                Open::Neither,
                &three,
                Better::Lower
            ),
            Change::Within
        );
        // A full window narrows it towards 3 σ, and never below.
        let window: Vec<f64> = (0..10).map(|i| 100.0 + f64::from(i % 3)).collect();
        let full = band(&window).unwrap();
        let sigma = 1.4826 * 1.0;
        assert!(
            (full.high - full.median - 4.2941 * sigma).abs() < 1e-9,
            "{full:?}"
        );
        assert_eq!(prediction_sigmas(40), 4.2941);
        // Identical runs: the floor, 2% of the median.
        let flat = band(&[100.0; 5]).unwrap();
        assert_eq!((flat.low, flat.high), (98.0, 102.0));
        // Three runs far apart: t at 2 degrees of freedom reaches below zero; the band stops
        // there (what history once drew as -618–773 ms).
        let spread = band(&[80.0, 150.0, 400.0]).unwrap();
        assert_eq!(spread.low, 0.0, "{spread:?}");
        assert!(spread.high > 400.0, "{spread:?}");
        // A median of zero (no errors): no floor, any error stands out.
        let zero = band(&[0.0; 4]).unwrap();
        assert_eq!((zero.low, zero.high), (0.0, 0.0));
    }

    /// The table's numbers: the t density's upper tail beyond each, integrated numerically
    /// (Simpson's rule after x = t/u, which maps the infinite tail onto 0..1), is 0.135%.
    #[test]
    fn the_prediction_table_is_students_t() {
        fn ln_gamma(x: f64) -> f64 {
            // Degrees of freedom are whole, so Γ of a whole or half-whole number suffices.
            let mut value = if (x.fract() - 0.5).abs() < 1e-9 {
                std::f64::consts::PI.sqrt().ln()
            } else {
                0.0
            };
            let mut k = if value == 0.0 { 1.0 } else { 0.5 };
            while k < x - 1e-9 {
                value += k.ln();
                k += 1.0;
            }
            value
        }
        for (runs, sigmas) in PREDICTION_SIGMAS {
            let n = runs as f64;
            let dof = n - 1.0;
            let t = sigmas / (1.0 + 1.0 / n).sqrt();
            let scale = (ln_gamma((dof + 1.0) / 2.0) - ln_gamma(dof / 2.0)).exp()
                / (dof * std::f64::consts::PI).sqrt();
            let density = |x: f64| scale * (1.0 + x * x / dof).powf(-(dof + 1.0) / 2.0);
            let steps = 20_000;
            let h = 1.0 / f64::from(steps);
            let mut tail = 0.0;
            for i in 1..=steps {
                let u = f64::from(i) * h;
                let weight = if i == steps {
                    1.0
                } else if i % 2 == 1 {
                    4.0
                } else {
                    2.0
                };
                tail += weight * density(t / u) * t / (u * u);
            }
            tail *= h / 3.0;
            assert!(
                (tail - 0.00135).abs() < 0.00001,
                "{runs} runs: tail beyond {t} is {tail}"
            );
        }
    }

    #[test]
    fn a_run_stands_out_only_when_its_whole_interval_is_beyond_the_band() {
        let b = Band {
            median: 20.0,
            low: 18.0,
            high: 22.0,
            runs: 5,
        };
        use crate::metrics::table::Better::{Higher, Lower};
        use Change::*;
        let shut = Open::Neither;
        assert_eq!(judge(25.0, None, shut, &b, Lower), Worse);
        assert_eq!(judge(25.0, Some((21.0, 28.0)), shut, &b, Lower), Within);
        assert_eq!(judge(25.0, Some((22.5, 28.0)), shut, &b, Lower), Worse);
        assert_eq!(judge(25.0, Some((22.5, 28.0)), shut, &b, Higher), Better);
        assert_eq!(judge(15.0, Some((14.0, 17.0)), shut, &b, Lower), Better);
        assert_eq!(judge(15.0, Some((14.0, 17.0)), shut, &b, Higher), Worse);
        assert_eq!(judge(20.0, None, shut, &b, Higher), Within);
        // An end the sample cannot bound says nothing on its side: p99 of few requests, its
        // upper end open, is never better, but can still be worse.
        assert_eq!(
            judge(15.0, Some((14.0, 17.0)), Open::Above, &b, Lower),
            Within
        );
        assert_eq!(
            judge(25.0, Some((22.5, 28.0)), Open::Above, &b, Lower),
            Worse
        );
        assert_eq!(
            judge(15.0, Some((14.0, 17.0)), Open::Below, &b, Lower),
            Better
        );
        assert_eq!(
            judge(25.0, Some((22.5, 28.0)), Open::Both, &b, Lower),
            Within
        );
    }

    /// A hundred runs of a server that never changes, each some 60 requests whose TTFT is
    /// 100 ms stretched by up to 20 ms (the simulator's jitter), sent at a steady 20 req/s for
    /// 3 s (a fixed count; the wall time wobbling by up to ±3%, as a runner's start-up does):
    /// no run stands out. Without the throughput's interval, that wobble stood out (what CI
    /// once met: a 2.2% move of an unchanged run called WORSE).
    #[test]
    fn unchanged_runs_do_not_stand_out() {
        use crate::metrics::{Distribution, Metric, PhaseMetrics};
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(42);
        let mut runs: Vec<RunPoint> = (0..100u64)
            .map(|i| {
                let mut phase = PhaseMetrics::default();
                let mut ttft = Distribution::milliseconds();
                for _ in 0..60 {
                    ttft.record(100.0 + rng.random_range(0.0..20.0));
                }
                *phase.distributions.get_mut(Metric::Ttft).unwrap() = ttft;
                let mut measures = Vec::new();
                for (slug, q) in [("ttft-p50-ms", 50.0), ("ttft-p99-ms", 99.0)] {
                    let (value, bounds, open) =
                        crate::report::benchmarks::percentile_with_bounds(&phase, Metric::Ttft, q)
                            .unwrap();
                    measures.push(measured(slug, value, bounds, open, Better::Lower));
                }
                let rate = 60.0 / (3.0 * (1.0 + rng.random_range(-0.03..0.03)));
                let (value, bounds) = crate::report::benchmarks::per_completion(rate, 60);
                let throughput = "requests-per-second";
                measures.push(measured(
                    throughput,
                    value,
                    bounds,
                    Open::Neither,
                    Better::Higher,
                ));
                point(i, measures)
            })
            .collect();
        let flagged = |runs: &[RunPoint]| stand_outs(runs, &measure_histories(runs));
        let found = flagged(&runs);
        assert!(found.is_empty(), "{found:#?}");
        // The same runs with bare throughputs: the wobble stands out.
        for run in &mut runs {
            run.measures[2].bounds = None;
        }
        let bare = flagged(&runs);
        assert!(
            bare.iter().any(|s| s.slug == "requests-per-second"),
            "a ±3% wobble against a 2% floor: {bare:#?}"
        );
    }

    fn measured(
        slug: &str,
        value: f64,
        bounds: Option<(f64, f64)>,
        open: Open,
        direction: Better,
    ) -> crate::history::Measured {
        crate::history::Measured {
            slug: slug.into(),
            name: slug.into(),
            unit: "x".into(),
            value,
            bounds,
            open,
            direction,
        }
    }

    fn point(i: u64, measures: Vec<crate::history::Measured>) -> RunPoint {
        RunPoint {
            dir: format!("run-{i}"),
            started_at: format!("run {i}"),
            started_unix_ns: Some(i),
            plan: "p".into(),
            model: "m".into(),
            label: None,
            labels: Default::default(),
            status: "pass".into(),
            reasons: Vec::new(),
            tool_version: String::new(),
            plan_sha256: String::new(),
            plan_changed: false,
            target: String::new(),
            measures,
            objectives: Vec::new(),
            trusted: true,
            set_apart: None,
            server: None,
        }
    }
}
