//! Each phase's steady state: its warm-up transient found and cut, and the numbers of what is
//! left, beside the whole phase's (`sla { window "steady" }` judges on them).
//!
//! A load test's first seconds are not the server's steady state: connections open, batches
//! fill, queues build or drain, caches warm. The cut is MSER (White, 1997; the marginal
//! standard error rule warm-up truncation is judged by): over a phase's time-series windows,
//! the latency series y₁…yₙ (each window's TTFT p50, or E2E p50 without streaming), the cut d
//! that minimises Σᵢ₌d₊₁ⁿ (yᵢ − ȳ_d)² / (n − d)², with d at most n/2 — the start after which the
//! rest is the most precisely known. Each window is already an aggregate of many requests, so
//! the windows are MSER's batches. A phase of fewer than [`MIN_WINDOWS`] windows is too short
//! to tell a transient from noise: its steady window is the whole phase, and says so.
//!
//! The steady numbers are the phase's requests *sent* from the cut on, aggregated exactly as
//! the phase's are (one more pass over the records, only when some phase was cut).
//!
//! Not for: sweep steps and search probes (each is its own window with its own warmup), nor
//! judging (the verdict chooses which scope an assertion reads).

use serde::Serialize;

use super::timeseries::TimeSeries;
use super::{Aggregates, PhaseMetrics};

/// The fewest windows a phase needs for its warm-up to be looked for.
pub const MIN_WINDOWS: usize = 10;

/// The recorded phases' steady windows, and their numbers.
#[derive(Debug, Clone, Serialize)]
pub struct Steady {
    /// One per recorded phase (not a sweep's step or a search's probe), in order.
    pub phases: Vec<SteadyWindow>,
    /// All recorded phases' requests within their steady windows.
    pub overall: PhaseMetrics,
}

/// One phase's steady window.
#[derive(Debug, Clone, Serialize)]
pub struct SteadyWindow {
    /// The phase.
    pub phase: String,
    /// Seconds of its start cut as a warm-up transient (0 when none was found).
    pub cut_s: f64,
    /// Where the window starts, seconds from the run's start.
    pub from_s: f64,
    /// The series the cut was found on (`ttft p50` or `e2e p50` per window).
    pub series: &'static str,
    /// Why no cut was looked for, when none was (too few windows).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub not_looked: Option<String>,
    /// The phase's requests sent within the window, aggregated as the phase's are.
    pub metrics: PhaseMetrics,
}

/// Where each recorded plain phase's steady window starts (µs from the run's start), by phase
/// name, with why it was not looked for; the cut is 0 when none was found.
pub(super) fn cuts(aggregates: &Aggregates) -> Vec<Cut> {
    let series = &aggregates.timeseries;
    aggregates
        .phases
        .iter()
        .filter(|p| p.recorded && p.step.is_none())
        .filter_map(|phase| {
            let band = series.phases.iter().find(|b| b.name == phase.name)?;
            let (values, which) = latency_series(series, band.from_s, band.to_s);
            let (cut_windows, not_looked) = if values.len() < MIN_WINDOWS {
                (
                    0,
                    Some(format!(
                        "{} window(s) of {} s: too few to tell a warm-up from noise (it takes {MIN_WINDOWS})",
                        values.len(),
                        series.interval_s
                    )),
                )
            } else {
                (mser(&values), None)
            };
            let cut_s = cut_windows as f64 * series.interval_s;
            Some(Cut {
                phase: phase.name.clone(),
                from_us: ((band.from_s + cut_s) * 1e6) as u64,
                cut_s,
                series: which,
                not_looked,
            })
        })
        .collect()
}

/// One phase's cut.
#[derive(Debug, Clone)]
pub(super) struct Cut {
    pub phase: String,
    pub from_us: u64,
    pub cut_s: f64,
    pub series: &'static str,
    pub not_looked: Option<String>,
}

/// The phase's windows' latency, in order: TTFT p50 where the run streamed, else E2E p50
/// (windows with none left out).
fn latency_series(series: &TimeSeries, from_s: f64, to_s: f64) -> (Vec<f64>, &'static str) {
    let within = || {
        series
            .points
            .iter()
            .filter(move |p| p.t_s + 1e-9 >= from_s && p.t_s < to_s)
    };
    let ttft: Vec<f64> = within().filter_map(|p| p.ttft_p50_ms).collect();
    if !ttft.is_empty() {
        return (ttft, "ttft p50");
    }
    (within().filter_map(|p| p.e2e_p50_ms).collect(), "e2e p50")
}

/// MSER: the number of leading values to cut (at most half) that minimises the squared
/// standard error of the rest's mean.
pub(super) fn mser(values: &[f64]) -> usize {
    let n = values.len();
    let mut best = (f64::INFINITY, 0);
    for d in 0..=n / 2 {
        let rest = &values[d..];
        let m = rest.len() as f64;
        let mean = rest.iter().sum::<f64>() / m;
        let spread: f64 = rest.iter().map(|v| (v - mean).powi(2)).sum();
        let statistic = spread / (m * m);
        // Ties keep the smaller cut: no data is thrown away for nothing.
        if statistic < best.0 - 1e-12 {
            best = (statistic, d);
        }
    }
    best.1
}

/// The steady windows of `cuts`, given the aggregates of each phase's requests sent from its
/// cut on (`steady`; the whole run's when nothing was cut).
pub(super) fn assemble(cuts: Vec<Cut>, steady: &Aggregates) -> Steady {
    let phases = cuts
        .into_iter()
        .filter_map(|cut| {
            let metrics = steady.phases.iter().find(|p| p.name == cut.phase)?.clone();
            Some(SteadyWindow {
                phase: cut.phase,
                cut_s: cut.cut_s,
                from_s: cut.from_us as f64 / 1e6,
                series: cut.series,
                not_looked: cut.not_looked,
                metrics,
            })
        })
        .collect();
    Steady {
        phases,
        overall: steady.overall.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::mser;

    #[test]
    fn mser_cuts_a_warm_up_and_nothing_from_a_steady_series() {
        // Ten slow windows while a queue drains, then forty steady ones.
        let mut values: Vec<f64> = (0..10).map(|i| 200.0 - 15.0 * i as f64).collect();
        values.extend((0..40).map(|i| 40.0 + (i % 3) as f64));
        let cut = mser(&values);
        assert!((9..=11).contains(&cut), "cut {cut}");
        // A steady series (noise alone) loses nothing, or next to nothing.
        let steady: Vec<f64> = (0..50).map(|i| 40.0 + ((i * 7) % 5) as f64).collect();
        assert!(mser(&steady) <= 2, "cut {}", mser(&steady));
        // Never more than half.
        let rising: Vec<f64> = (0..20).map(|i| i as f64).collect();
        assert!(mser(&rising) <= 10);
    }
}
