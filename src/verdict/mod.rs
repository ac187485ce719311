//! Verdicts: the plan's SLA assertions judged against a run's aggregates; the steps of its
//! sweeps and the probes of its search judged on its objectives ([`steps`]), and the capacity
//! the search found.
//!
//! An assertion with no data to judge (no successful request in its scope) fails: an SLA that
//! cannot be shown to hold does not pass. This module only judges; exit codes are the session's
//! and the CLI's.

use serde::Serialize;

mod status;
mod steps;

use crate::metrics::{Aggregates, PhaseMetrics, Severity, Warning};
use crate::plan::{Assertion, LoadUnit, Metric, MetricKind, Plan, Stat};
pub use status::{Failure, NotCarriedOut, RunVerdict, Status, VerdictStatus};
pub use steps::{judge_step, objectives, CapacityResult, SeriesResult, StepResult};

#[derive(Debug, Clone, Serialize)]
/// One assertion, judged.
pub struct VerdictResult {
    /// The assertion as written, e.g. `ttft p99 < 500ms`.
    pub assertion: String,
    /// The phase it was judged on, or `all` for all recorded phases.
    pub phase: String,
    /// The threshold, in `unit`.
    pub threshold: f64,
    /// The observed value, in `unit`; `None` without data (which fails).
    pub observed: Option<f64>,
    /// The unit of threshold and observed: `ms`, `fraction`, `per_s`, `tokens_per_s`.
    pub unit: &'static str,
    /// The threshold as people read it (`< 500.00ms`).
    pub threshold_display: String,
    /// The observed value as people read it.
    pub observed_display: String,
    /// Whether the assertion held.
    pub passed: bool,
    /// How many values the observed statistic rests on (distributions only).
    pub samples: Option<u64>,
}

#[derive(Debug, Clone, Serialize)]
/// Every assertion of a plan, judged.
pub struct Verdicts {
    /// Every assertion held.
    pub passed: bool,
    /// One per assertion, in the plan's order.
    pub results: Vec<VerdictResult>,
    /// Assertions whose statistic rests on too few values to mean what it says.
    pub notes: Vec<Warning>,
    /// Each measured step of a sweep and probe of a search, judged on the objectives.
    pub steps: Vec<StepResult>,
    /// Each sweep (and the search) as a whole: where its objectives stop holding.
    pub series: Vec<SeriesResult>,
    /// What the plan's search found.
    pub capacity: Option<CapacityResult>,
}

/// The fewest values a percentile `p` needs to be more than the largest value (nearest rank).
pub fn samples_needed(p: f64) -> u64 {
    if p >= 100.0 {
        return 1;
    }
    (100.0 / (100.0 - p) - 1e-9).ceil() as u64
}

fn scope<'a>(aggregates: &'a Aggregates, phase: Option<&str>) -> Option<&'a PhaseMetrics> {
    match phase {
        None => Some(&aggregates.overall),
        Some(name) => aggregates.phases.iter().find(|p| p.name == name),
    }
}

/// Formats a value in an assertion's unit.
pub fn display(kind: MetricKind, value: f64) -> String {
    match kind {
        MetricKind::Latency => {
            if value >= 1000.0 {
                format!("{:.3}s", value / 1000.0)
            } else {
                format!("{value:.2}ms")
            }
        }
        MetricKind::Fraction => format!("{:.2}%", value * 100.0),
        MetricKind::Throughput => format!("{value:.2}/s"),
        MetricKind::TokenRate => format!("{value:.2} tok/s"),
        MetricKind::Capacity | MetricKind::Count => format!("{value:.2}"),
        MetricKind::Tokens => format!("{value:.1} tokens"),
    }
}

/// Judges each assertion against the aggregates of its scope.
pub fn evaluate(assertions: &[Assertion], aggregates: &Aggregates) -> Verdicts {
    let mut notes = Vec::new();
    let results: Vec<VerdictResult> = assertions
        .iter()
        .map(|assertion| {
            let metrics = scope(aggregates, assertion.phase.as_deref());
            judge_assertion(assertion, metrics, Some(&mut notes))
        })
        .collect();
    Verdicts {
        passed: results.iter().all(|r| r.passed),
        results,
        notes,
        steps: Vec::new(),
        series: Vec::new(),
        capacity: None,
    }
}

/// Judges a plan's assertions against a run's aggregates. A plan with sweeps or a search
/// judges its objectives (its `sla` lines that name no phase, or its attainment) step by step
/// and probe by probe rather than over all recorded phases, which mix every load: they decide
/// the steps' pass or fail, the sweeps' knees and the search's capacity, not the run. The run
/// is failed by the assertions that name a phase and by `capacity`.
pub fn evaluate_plan(plan: &Plan, aggregates: &Aggregates) -> Verdicts {
    if !plan.is_stepped() {
        return evaluate(&plan.sla, aggregates);
    }
    let objectives = steps::objectives(plan);
    let steps: Vec<StepResult> = aggregates
        .phases
        .iter()
        .filter_map(|phase| steps::judge_step(&objectives, phase))
        .collect();
    let series = steps::series(&steps, aggregates.search_end.as_ref());
    let capacity = plan.search.as_ref().map(|search| {
        let bracket = series
            .iter()
            .find(|s| s.search && s.name == search.name)
            .map(|s| s.bracket.clone())
            .unwrap_or_else(|| {
                crate::planner::search::bracket(
                    search.unit,
                    &[],
                    crate::records::Stopped::Interrupted,
                )
            });
        CapacityResult {
            name: search.name.clone(),
            headline: bracket.headline(),
            stopped: bracket.stopped.describe().to_string(),
            bracket,
        }
    });
    let mut notes = few_samples_in_steps(&objectives, &steps);
    let results: Vec<VerdictResult> = plan
        .sla
        .iter()
        .filter(|a| a.phase.is_some() || a.metric == Metric::Capacity)
        .map(|assertion| {
            if assertion.metric == Metric::Capacity {
                return judge_capacity(assertion, capacity.as_ref());
            }
            let metrics = scope(aggregates, assertion.phase.as_deref());
            judge_assertion(assertion, metrics, Some(&mut notes))
        })
        .collect();
    Verdicts {
        passed: results.iter().all(|r| r.passed),
        results,
        notes,
        steps,
        series,
        capacity,
    }
}

/// One note per objective whose percentile rests, in some steps, on too few values to be more
/// than their largest.
fn few_samples_in_steps(objectives: &[Assertion], steps: &[StepResult]) -> Vec<Warning> {
    objectives
        .iter()
        .enumerate()
        .filter_map(|(i, objective)| {
            let Some(Stat::Percentile(p)) = objective.stat else {
                return None;
            };
            let needed = samples_needed(p);
            let short = steps
                .iter()
                .filter(|s| {
                    s.objectives
                        .get(i)
                        .and_then(|o| o.samples)
                        .is_some_and(|n| n > 0 && n < needed)
                })
                .count();
            (short > 0).then(|| Warning {
                severity: Severity::Note,
                code: "few-samples",
                message: format!(
                    "`{}`: in {short} of {} steps and probes its p{p} rests on fewer than {needed} values, \
                     so it is their largest: longer windows make it mean what it says",
                    objective.text,
                    steps.len()
                ),
            })
        })
        .collect()
}

/// `capacity >= 10`: judged on the highest load the search found the objectives to hold at
/// (a lower bound of the true capacity when the search stopped on a budget).
fn judge_capacity(assertion: &Assertion, capacity: Option<&CapacityResult>) -> VerdictResult {
    let unit = capacity.map(|c| c.bracket.unit);
    let observed = capacity.and_then(|c| c.bracket.sustains);
    let show = |v: f64| match unit {
        Some(unit) => format!("{} {}", crate::plan::units::format_load(v), unit.symbol()),
        None => crate::plan::units::format_load(v),
    };
    VerdictResult {
        assertion: assertion.text.clone(),
        phase: capacity.map_or_else(|| "search".into(), |c| c.name.clone()),
        threshold: assertion.threshold,
        observed,
        unit: match unit {
            Some(LoadUnit::RequestsPerSecond) => "requests_per_s",
            Some(LoadUnit::Concurrency) => "concurrent_requests",
            None => MetricKind::Capacity.unit(),
        },
        threshold_display: format!("{} {}", assertion.op.symbol(), show(assertion.threshold)),
        observed_display: match observed {
            Some(v) => show(v),
            None => "none: no load held".into(),
        },
        passed: observed.is_some_and(|v| assertion.op.holds(v, assertion.threshold)),
        samples: None,
    }
}

/// One assertion judged on one scope's metrics (`None`: the scope has no data). A percentile
/// of too few values adds a note to `notes`, when given.
pub fn judge_assertion(
    assertion: &Assertion,
    metrics: Option<&PhaseMetrics>,
    notes: Option<&mut Vec<Warning>>,
) -> VerdictResult {
    let kind = assertion.metric.kind();
    let distribution = metrics.and_then(|m| m.distribution(assertion.metric));
    let observed = metrics.and_then(|m| m.value(assertion.metric, assertion.stat));
    let samples = distribution.map(|d| d.count());
    if let (Some(Stat::Percentile(p)), Some(n), Some(notes)) = (assertion.stat, samples, notes) {
        let needed = samples_needed(p);
        if n > 0 && n < needed {
            notes.push(Warning {
                severity: Severity::Note,
                code: "few-samples",
                message: format!(
                    "`{}` ({}): its p{p} rests on {n} value(s), so it is simply the largest; a p{p} \
                     needs at least {needed} values to mean what it says",
                    assertion.text,
                    assertion.phase.as_deref().unwrap_or("all recorded phases")
                ),
            });
        }
    }
    let passed = observed.is_some_and(|value| assertion.op.holds(value, assertion.threshold));
    VerdictResult {
        assertion: assertion.text.clone(),
        phase: assertion.phase.clone().unwrap_or_else(|| "all".into()),
        threshold: assertion.threshold,
        observed,
        unit: kind.unit(),
        threshold_display: format!(
            "{} {}",
            assertion.op.symbol(),
            display(kind, assertion.threshold)
        ),
        observed_display: observed.map(|v| display(kind, v)).unwrap_or_else(|| {
            if assertion.metric.is_server() {
                "no server telemetry".into()
            } else if assertion.metric == crate::plan::Metric::PrefixCacheHitRate {
                "the server reported no cached tokens".into()
            } else {
                "no data".into()
            }
        }),
        passed,
        samples: samples.filter(|_| !assertion.metric.is_server()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::{Distribution, PhaseMetrics};
    use crate::plan::{Metric, Op, Stat};

    fn aggregates() -> Aggregates {
        let mut steady = PhaseMetrics {
            name: "steady".into(),
            recorded: true,
            ..PhaseMetrics::default()
        };
        *steady.distributions.get_mut(Metric::Ttft).unwrap() = Distribution::milliseconds();
        for v in 1..=100 {
            steady
                .distributions
                .get_mut(Metric::Ttft)
                .unwrap()
                .record(v as f64 * 10.0);
        }
        steady.requests.ok = 99;
        steady.requests.failed = 1;
        steady.rates.error_rate = 0.01;
        steady.throughput.requests_per_s = 12.5;
        Aggregates {
            overall: steady.clone(),
            phases: vec![steady],
            warnings: vec![],
            interrupted: false,
            last_response_us: None,
            first_error: None,
            first_usage_problem: None,
            first_client_error: None,
            aborted: None,
            refused: None,
            client_peak_rss_bytes: None,
            search_end: None,
            server: None,
            launched_server: None,
            timeseries: Default::default(),
            by_input: Vec::new(),
            by_turn: Vec::new(),
            by_turn_kind: Vec::new(),
            by_media: Vec::new(),
            error_samples: Vec::new(),
        }
    }

    fn assertion(
        metric: Metric,
        stat: Option<Stat>,
        op: Op,
        threshold: f64,
        phase: Option<&str>,
    ) -> Assertion {
        Assertion {
            metric,
            stat,
            op,
            threshold,
            phase: phase.map(str::to_string),
            text: "t".into(),
        }
    }

    #[test]
    fn each_comparison() {
        let agg = aggregates();
        let p99 = Some(Stat::Percentile(99.0));
        let check = |op, threshold| {
            evaluate(&[assertion(Metric::Ttft, p99, op, threshold, None)], &agg).passed
        };
        // p99 is 990 ms.
        assert!(check(Op::Lt, 1000.0));
        assert!(!check(Op::Lt, 990.0));
        assert!(check(Op::Le, 990.5));
        assert!(!check(Op::Le, 980.0));
        assert!(check(Op::Gt, 900.0));
        assert!(!check(Op::Gt, 995.0));
        assert!(check(Op::Ge, 989.0));
        assert!(!check(Op::Ge, 1000.0));
    }

    #[test]
    fn rates_throughputs_and_phase_scope() {
        let agg = aggregates();
        let v = evaluate(
            &[
                assertion(Metric::ErrorRate, None, Op::Lt, 0.02, Some("steady")),
                assertion(Metric::RequestThroughput, None, Op::Gt, 10.0, None),
            ],
            &agg,
        );
        assert!(v.passed, "{v:?}");
        assert_eq!(v.results[0].phase, "steady");
        assert_eq!(v.results[0].observed_display, "1.00%");
    }

    #[test]
    fn a_percentile_of_too_few_values_gets_a_note() {
        assert_eq!(samples_needed(99.0), 100);
        assert_eq!(samples_needed(99.9), 1000);
        assert_eq!(samples_needed(50.0), 2);
        assert_eq!(samples_needed(100.0), 1);
        let mut agg = aggregates();
        *agg.overall.distributions.get_mut(Metric::Ttft).unwrap() = Distribution::milliseconds();
        for v in 1..=7 {
            agg.overall
                .distributions
                .get_mut(Metric::Ttft)
                .unwrap()
                .record(v as f64);
        }
        let p99 = Some(Stat::Percentile(99.0));
        let v = evaluate(&[assertion(Metric::Ttft, p99, Op::Lt, 1e3, None)], &agg);
        assert_eq!(v.results[0].samples, Some(7));
        assert_eq!(v.notes.len(), 1);
        assert!(
            v.notes[0].message.contains("rests on 7 value(s)"),
            "{}",
            v.notes[0].message
        );
        let p50 = Some(Stat::Percentile(50.0));
        assert!(
            evaluate(&[assertion(Metric::Ttft, p50, Op::Lt, 1e3, None)], &agg)
                .notes
                .is_empty()
        );
    }

    #[test]
    fn no_data_fails() {
        let agg = aggregates();
        let v = evaluate(
            &[assertion(Metric::Itl, Some(Stat::Max), Op::Lt, 1e9, None)],
            &agg,
        );
        assert!(!v.passed);
        assert_eq!(v.results[0].observed_display, "no data");
    }
}
