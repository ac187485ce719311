//! The steps table of a run with sweeps or a search: one row per measured step and probe, with
//! the numbers the saturation curve is read from, and the curve itself as a chart.
//!
//! It only arranges what [`crate::metrics`] measured and [`crate::verdict`] judged; every format
//! (report.md, steps.csv, summary.json, the terminal) renders these rows.

use serde::Serialize;

use crate::metrics::PhaseMetrics;
use crate::plan::LoadUnit;
use crate::verdict::StepResult;

/// One measured step of a sweep, or probe of a search.
#[derive(Debug, Clone, Serialize)]
pub struct StepRow {
    /// Its phase's name.
    pub phase: String,
    /// The sweep's or search's name.
    pub series: String,
    /// A probe of a search.
    pub probe: bool,
    /// The load asked for, in `unit`.
    pub load: f64,
    /// Requests per second, or concurrent requests.
    pub unit: LoadUnit,
    /// `req/s` or `concurrent`.
    pub unit_symbol: &'static str,
    /// The load as people read it: `12.5 req/s`, `8 concurrent`.
    pub load_display: String,
    /// Successful requests per second over its window.
    pub achieved_rps: f64,
    /// Output tokens per second.
    pub output_tps: f64,
    /// TTFT p50, ms.
    pub ttft_p50_ms: Option<f64>,
    /// TTFT p99, ms.
    pub ttft_p99_ms: Option<f64>,
    /// ITL p99, ms.
    pub itl_p99_ms: Option<f64>,
    /// TPOT p50, ms.
    pub tpot_p50_ms: Option<f64>,
    /// E2E p99, ms.
    pub e2e_p99_ms: Option<f64>,
    /// Failed over completed requests.
    pub error_rate: f64,
    /// Requests per second meeting the plan's slo (with one).
    pub goodput_rps: Option<f64>,
    /// Successful requests.
    pub ok: u64,
    /// Whether it was judged on any objective.
    pub judged: bool,
    /// Every objective held, no saturation, its whole window ran.
    pub passed: bool,
    /// Close to a threshold.
    pub marginal: bool,
    /// Each objective: the assertion, what was observed, whether it held.
    pub objectives: Vec<ObjectiveCell>,
    /// Why its window shows saturation, if it does.
    pub saturation: Option<String>,
    /// Why its load is above the server's rate limits, when that failed it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub over_limits: Option<String>,
    /// Why it was ended early, if it was.
    pub ended_early: Option<String>,
    /// "pass", "fail", "fail (saturated)", "fail (over rate limits)", "fail (ended early)",
    /// "pass (not decided)" or "fail
    /// (not decided)" when its window's requests cannot decide an objective at 95% (judged on
    /// the observed values), or "-" without objectives.
    pub result: String,
    /// Why it failed or was not judged, in a sentence (what the terminal says of it too).
    pub why: Option<String>,
}

/// One objective of a step.
#[derive(Debug, Clone, Serialize)]
pub struct ObjectiveCell {
    /// As written.
    pub assertion: String,
    /// As people read it.
    pub observed: String,
    /// Whether it held.
    pub passed: bool,
    /// The threshold, in `unit`.
    pub threshold: f64,
    /// The unit of the threshold (`ms`, `fraction`, …).
    pub unit: &'static str,
}

/// The saturation curve of one sweep or search: latency against achieved throughput, in the
/// order of load.
#[derive(Debug, Clone, Serialize)]
pub struct Curve {
    /// The sweep's or search's name.
    pub series: String,
    /// The achieved request rate of each step, as the chart's labels.
    pub labels: Vec<String>,
    /// TTFT p99 of each step, ms (0 where no request succeeded).
    pub ttft_p99_ms: Vec<f64>,
    /// E2E p99 of each step, ms.
    pub e2e_p99_ms: Vec<f64>,
    /// The highest value, for the chart's axis.
    pub max_ms: f64,
}

/// The rows of every judged step, with their phases' numbers: each series' together (in the
/// order they ran), its steps by load (a search probes out of order; a reader compares loads),
/// a load probed twice in the order it ran.
pub fn rows(steps: &[StepResult], phases: &[PhaseMetrics]) -> Vec<StepRow> {
    let mut series: Vec<&str> = Vec::new();
    for step in steps {
        if !series.contains(&step.series.as_str()) {
            series.push(&step.series);
        }
    }
    let position = |name: &str| series.iter().position(|s| *s == name).unwrap_or(usize::MAX);
    let mut rows: Vec<StepRow> = steps
        .iter()
        .filter_map(|step| {
            let phase = phases.iter().find(|p| p.name == step.phase)?;
            let m = &phase.metrics;
            let judged = !step.objectives.is_empty();
            let result = if step.client_limited.is_some() {
                "not judged (client late)"
            } else if step.ended_early.is_some() {
                "fail (ended early)"
            } else if step.saturation.is_some() {
                "fail (saturated)"
            } else if step.over_limits.is_some() {
                "fail (over rate limits)"
            } else if !judged {
                "-"
            } else if step.passed && step.undecided.is_empty() {
                "pass"
            } else if step.passed {
                "pass (not decided)"
            } else if step.undecided.is_empty() {
                "fail"
            } else {
                "fail (not decided)"
            };
            Some(StepRow {
                phase: step.phase.clone(),
                series: step.series.clone(),
                probe: step.probe,
                load: step.load,
                unit: step.unit,
                unit_symbol: step.unit.symbol(),
                load_display: format!(
                    "{} {}",
                    crate::plan::units::format_load(step.load),
                    step.unit.symbol()
                ),
                achieved_rps: phase.throughput.requests_per_s,
                output_tps: phase.throughput.output_tokens_per_s,
                ttft_p50_ms: m[crate::dist!(Ttft)].p50,
                ttft_p99_ms: m[crate::dist!(Ttft)].p99,
                itl_p99_ms: m[crate::dist!(Itl)].p99,
                tpot_p50_ms: m[crate::dist!(Tpot)].p50,
                e2e_p99_ms: m[crate::dist!(E2e)].p99,
                error_rate: phase.rates.error_rate,
                goodput_rps: phase.goodput.as_ref().map(|g| g.requests_per_s),
                ok: phase.requests.ok,
                judged,
                passed: step.passed,
                marginal: step.marginal,
                objectives: step
                    .objectives
                    .iter()
                    .map(|o| ObjectiveCell {
                        threshold: o.threshold,
                        unit: o.unit,
                        assertion: o.assertion.clone(),
                        observed: o.observed_display.clone(),
                        passed: o.passed,
                    })
                    .collect(),
                saturation: step.saturation.clone(),
                over_limits: step.over_limits.clone(),
                ended_early: step.ended_early.clone(),
                why: (judged && !step.passed
                    || step.client_limited.is_some()
                    || !step.undecided.is_empty())
                .then(|| step.outcome()),
                result: result.to_string(),
            })
        })
        .collect();
    rows.sort_by(|a, b| {
        position(&a.series)
            .cmp(&position(&b.series))
            .then(a.load.total_cmp(&b.load))
    });
    rows
}

/// One curve per sweep or search with at least two steps that ran their whole window, in the
/// order of load.
pub fn curves(rows: &[StepRow]) -> Vec<Curve> {
    let mut names: Vec<&str> = Vec::new();
    for row in rows {
        if !names.contains(&row.series.as_str()) {
            names.push(&row.series);
        }
    }
    names
        .into_iter()
        .filter_map(|name| {
            // A step ended early measured only its start: it is no point of the curve.
            let mut of_series: Vec<&StepRow> = rows
                .iter()
                .filter(|r| r.series == name && r.ended_early.is_none())
                .collect();
            if of_series.len() < 2 {
                return None;
            }
            of_series.sort_by(|a, b| a.load.total_cmp(&b.load));
            let value = |v: Option<f64>| (v.unwrap_or(0.0) * 10.0).round() / 10.0;
            let ttft: Vec<f64> = of_series.iter().map(|r| value(r.ttft_p99_ms)).collect();
            let e2e: Vec<f64> = of_series.iter().map(|r| value(r.e2e_p99_ms)).collect();
            let max_ms = ttft.iter().chain(&e2e).copied().fold(1.0, f64::max);
            Some(Curve {
                series: name.to_string(),
                labels: of_series
                    .iter()
                    .map(|r| format!("{:.1}", r.achieved_rps))
                    .collect(),
                ttft_p99_ms: ttft,
                e2e_p99_ms: e2e,
                max_ms: (max_ms * 1.1).ceil(),
            })
        })
        .collect()
}
