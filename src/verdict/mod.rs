//! Verdicts: the plan's SLA assertions judged against a run's aggregates; the steps of its
//! sweeps and the probes of its search judged on its objectives ([`steps`]), and the capacity
//! the search found.
//!
//! Every assertion has one of three outcomes ([`Outcome`]): it passes, it fails, or the run's data
//! cannot decide it, with the reason and what would decide it. A percentile is judged by its
//! distribution-free confidence bounds ([`confidence`]): it passes when the bound on its side
//! holds at the plan's `confidence`, fails when the other bound breaks it, and is otherwise not
//! decided (40 requests cannot show a p99.9). An assertion with no data to judge is not decided
//! either: an SLA that cannot be shown to hold does not pass, and one that cannot be shown to
//! break does not fail. This module only judges; exit codes are the session's and the CLI's.

use serde::Serialize;

pub(crate) mod confidence;
mod sizing;
mod status;
mod steps;

use crate::metrics::{Aggregates, PhaseMetrics, Severity, Warning};
use crate::plan::{
    Assertion, JudgedWindow, Judging, LoadUnit, Metric, MetricKind, Op, Plan, Stat, Undecided,
};
use confidence::Lean;
pub use sizing::undecidable;
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
    /// Whether it lets the run pass: its outcome is a pass, or not decided in a plan that says
    /// `undecided "pass"`.
    pub passed: bool,
    /// Pass, fail, or not decided.
    pub outcome: Outcome,
    /// Why it is not decided, and what would decide it (absent unless not decided).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub undecided: Option<String>,
    /// A percentile's confidence interval (each end a one-sided bound at the plan's
    /// confidence), in `unit`; absent for other statistics.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interval: Option<Interval>,
    /// How many values the observed statistic rests on (distributions only).
    pub samples: Option<u64>,
}

/// The three outcomes of a judgement.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// It holds (for a percentile: its bound at the plan's confidence holds).
    Pass,
    /// It is broken (for a percentile: beyond doubt at the plan's confidence).
    Fail,
    /// The run's data cannot say: too few values, no data, or a client that limited the run.
    NotDecided,
}

impl Outcome {
    /// As the reports write it.
    pub fn word(self) -> &'static str {
        match self {
            Outcome::Pass => "pass",
            Outcome::Fail => "fail",
            Outcome::NotDecided => "not decided",
        }
    }
}

/// A percentile's confidence interval from order statistics: the true value is at least `low`,
/// and at most `high`, each with the plan's confidence; an end the sample is too small to
/// bound is absent.
#[derive(Debug, Clone, Serialize)]
pub struct Interval {
    /// The lower bound, if the sample has one.
    pub low: Option<f64>,
    /// The upper bound, if the sample has one.
    pub high: Option<f64>,
    /// The confidence of each bound (0.95).
    pub confidence: f64,
    /// As people read it: `95%: 12.10ms … 15.30ms`, `95%: 12.10ms … unbounded`.
    pub display: String,
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

impl Verdicts {
    /// The judgements that fail the run.
    pub fn failing(&self) -> impl Iterator<Item = &VerdictResult> {
        self.results.iter().filter(|r| r.outcome == Outcome::Fail)
    }

    /// The judgements that leave the run not decided (none when the plan says `undecided
    /// "pass"`: those are shown, and pass).
    pub fn deciding_nothing(&self) -> impl Iterator<Item = &VerdictResult> {
        self.results
            .iter()
            .filter(|r| r.outcome == Outcome::NotDecided && !r.passed)
    }
}

/// What the plan says a judgement its data cannot decide makes of the run: with `undecided
/// "fail"` it fails (its reason kept), with `"pass"` it passes the gate and stays marked not
/// decided.
fn apply_undecided(results: &mut [VerdictResult], policy: Undecided) {
    for result in results
        .iter_mut()
        .filter(|r| r.outcome == Outcome::NotDecided)
    {
        match policy {
            Undecided::NotDecided => result.passed = false,
            Undecided::Fail => {
                result.outcome = Outcome::Fail;
                result.passed = false;
            }
            Undecided::Pass => result.passed = true,
        }
    }
}

/// The fewest values a percentile `p` needs to be more than the largest value (nearest rank).
pub fn samples_needed(p: f64) -> u64 {
    if p >= 100.0 {
        return 1;
    }
    (100.0 / (100.0 - p) - 1e-9).ceil() as u64
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
        MetricKind::Power => format!("{value:.1} W"),
        MetricKind::Energy if value < 1.0 => format!("{:.2} mJ", value * 1000.0),
        MetricKind::Energy => format!("{value:.3} J"),
        MetricKind::Cost => format!("${value:.4}"),
    }
}

/// Judges each assertion against the aggregates of its scope.
pub fn evaluate(assertions: &[Assertion], judging: &Judging, aggregates: &Aggregates) -> Verdicts {
    let mut results: Vec<VerdictResult> = assertions
        .iter()
        .map(|assertion| judge_in_run(assertion, judging, aggregates))
        .collect();
    apply_undecided(&mut results, judging.undecided);
    Verdicts {
        passed: results.iter().all(|r| r.passed),
        results,
        notes: Vec::new(),
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
        return evaluate(&plan.sla, &plan.judging, aggregates);
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
    let notes = few_samples_in_steps(&objectives, &steps);
    let mut results: Vec<VerdictResult> = plan
        .sla
        .iter()
        .filter(|a| a.phase.is_some() || a.metric == Metric::Capacity)
        .map(|assertion| {
            if assertion.metric == Metric::Capacity {
                return judge_capacity(assertion, capacity.as_ref());
            }
            judge_in_run(assertion, &plan.judging, aggregates)
        })
        .collect();
    apply_undecided(&mut results, plan.judging.undecided);
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
                code: crate::metrics::warnings::Code::FewSamples,
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
    let holds = observed.is_some_and(|v| assertion.op.holds(v, assertion.threshold));
    VerdictResult {
        assertion: assertion.text.clone(),
        phase: capacity.map_or_else(|| "search".into(), |c| c.name.clone()),
        threshold: assertion.threshold,
        observed,
        unit: match unit {
            Some(LoadUnit::RequestsPerSecond) => "requests_per_s",
            Some(LoadUnit::Concurrency) => "concurrent_requests",
            Some(LoadUnit::Sessions) => "concurrent_sessions",
            None => MetricKind::Capacity.unit(),
        },
        threshold_display: format!("{} {}", assertion.op.symbol(), show(assertion.threshold)),
        observed_display: match observed {
            Some(v) => show(v),
            None => "none: no load held".into(),
        },
        passed: holds,
        outcome: if holds { Outcome::Pass } else { Outcome::Fail },
        undecided: None,
        interval: None,
        samples: None,
    }
}

/// One of the run's assertions judged on its scope, by its confidence bounds, and a server
/// metric the scrapes answered without said as such.
fn judge_in_run(
    assertion: &Assertion,
    judging: &Judging,
    aggregates: &Aggregates,
) -> VerdictResult {
    let phase = assertion.phase.as_deref();
    let steady = match judging.window {
        // A steady window's telemetry (and energy) is summarised over the window itself.
        JudgedWindow::Steady => steady_scope(aggregates, phase),
        JudgedWindow::Whole => None,
    };
    let metrics = steady
        .as_ref()
        .map(|(m, _)| *m)
        .or_else(|| aggregates.scope(phase));
    let mut result = judge_assertion(assertion, metrics, Judge::Confidence(judging));
    if let Some((_, window)) = steady {
        result.phase = format!("{} ({window})", result.phase);
    }
    say_which_telemetry(&mut result, assertion, aggregates);
    result
}

/// A scope's steady window (`sla { window "steady" }`): its metrics, and how reports name it;
/// `None` for a phase with none (a sweep's step, a search's probe: judged whole).
fn steady_scope<'a>(
    aggregates: &'a Aggregates,
    phase: Option<&str>,
) -> Option<(&'a PhaseMetrics, String)> {
    let steady = aggregates.steady.as_ref()?;
    match phase {
        None => Some((&steady.overall, "steady windows".to_string())),
        Some(name) => {
            let window = steady.phases.iter().find(|w| w.phase == name)?;
            Some((&window.metrics, format!("from +{:.1} s", window.cut_s)))
        }
    }
}

/// A server metric the scrapes answered without: whether the engine exported it at all in this
/// run ("llama.cpp's /metrics has no KV cache": builds differ, so it is the scrapes that say),
/// rather than "no server telemetry".
fn say_which_telemetry(result: &mut VerdictResult, assertion: &Assertion, aggregates: &Aggregates) {
    use crate::metrics::table::Source;
    let Source::Server(signal) = assertion.metric.def().source else {
        return;
    };
    let Some(server) = aggregates.server.as_ref().filter(|s| s.samples > 0) else {
        return;
    };
    if result.observed.is_some() {
        return;
    }
    let engine = server.engine.as_deref().unwrap_or("the server");
    let label = assertion.metric.def().label;
    let what = label.strip_prefix("Server ").unwrap_or(label);
    let exported = aggregates
        .phases
        .iter()
        .chain(std::iter::once(&aggregates.overall))
        .any(|p| {
            p.server
                .as_ref()
                .is_some_and(|s| s.signal(signal).is_some())
        });
    result.observed_display = if exported {
        format!("{engine}'s /metrics did not report its {what} here")
    } else {
        format!("{engine}'s /metrics has no {what}")
    };
    result.undecided = Some(format!(
        "{} ({} scrape(s) answered): llmload cannot judge it on this server; assert a measure \
         the client takes, or scrape a server that exports it",
        result.observed_display, server.samples
    ));
}

/// How an assertion is judged.
#[derive(Debug, Clone, Copy)]
pub enum Judge<'a> {
    /// On the observed value alone, with no data a failure: a sweep's step or a search's
    /// probe, whose uncertainty the search handles itself (margins, repeats).
    Point,
    /// A percentile by its confidence bounds; no data is not decided: the run's assertions.
    Confidence(&'a Judging),
}

/// One assertion judged on one scope's metrics (`None`: the scope has no data).
pub fn judge_assertion(
    assertion: &Assertion,
    metrics: Option<&PhaseMetrics>,
    judge: Judge,
) -> VerdictResult {
    let kind = assertion.metric.kind();
    let distribution = metrics.and_then(|m| m.distribution(assertion.metric));
    let observed = metrics.and_then(|m| m.value(assertion.metric, assertion.stat));
    let samples = distribution.map(|d| d.count());
    let holds = observed.is_some_and(|value| assertion.op.holds(value, assertion.threshold));
    let observed_display = observed.map(|v| display(kind, v)).unwrap_or_else(|| {
        if assertion.metric.is_server() {
            "no server telemetry".into()
        } else {
            assertion.metric.def().absent.unwrap_or("no data").into()
        }
    });
    let mut result = VerdictResult {
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
        observed_display,
        passed: holds,
        outcome: if holds { Outcome::Pass } else { Outcome::Fail },
        undecided: None,
        interval: None,
        samples: samples.filter(|_| !assertion.metric.is_server()),
    };
    let Judge::Confidence(judging) = judge else {
        return result;
    };
    if observed.is_none() {
        result.outcome = Outcome::NotDecided;
        result.undecided = Some(format!(
            "{}: nothing in its scope to judge",
            result.observed_display
        ));
    } else if let (Some(Stat::Percentile(p)), Some(distribution)) = (assertion.stat, distribution) {
        let ok = metrics.map_or(0, |m| m.requests.ok);
        judge_percentile(&mut result, assertion, p, distribution, ok, judging);
    }
    if let Some(why) = metrics.and_then(|m| client_at_fault(m, assertion, &result)) {
        result.outcome = Outcome::NotDecided;
        result.undecided = Some(why);
    }
    result.passed = result.outcome == Outcome::Pass;
    result
}

/// Why the client, not the server, may have made this judgement what it is, if it may: the
/// client stalled while a share of the scope's requests were in flight (or a stall alone spans
/// the distance between a latency and its threshold) and the judgement did not pass — a stall
/// only makes latencies longer, so a pass still stands —, or the client could not deliver the
/// load (schedule lag, its CPU, its users waiting for bodies), which no outcome survives: the
/// server was not sent the plan.
fn client_at_fault(
    metrics: &PhaseMetrics,
    assertion: &Assertion,
    result: &VerdictResult,
) -> Option<String> {
    let stalls = metrics.client_stalls.filter(|s| s.count > 0);
    let stalled = stalls.map(|s| format!("the client stalled ({})", s.describe()));
    let blamed = match (stalled, crate::metrics::warnings::client_limited(metrics)) {
        // The load was not delivered: no outcome stands, whatever stalled.
        (Some(stalled), Some(why)) => format!("{stalled}, and {why}"),
        (None, Some(why)) => format!("the client, not the server, limited this scope: {why}"),
        (Some(stalled), None) if result.outcome != Outcome::Pass => {
            // Nothing observed: nothing rules the stalls out.
            let moved = result.observed.is_none_or(|value| {
                crate::metrics::stalls::could_move(
                    metrics,
                    assertion.metric,
                    assertion.stat,
                    value,
                    assertion.threshold,
                )
            });
            if !moved {
                return None;
            }
            stalled
        }
        _ => return None,
    };
    Some(format!(
        "{blamed}: not evidence about the server (observed {}); run it where the client is not starved",
        result.observed_display
    ))
}

/// A percentile judged by its one-sided bounds at the plan's confidence: the bound on the
/// assertion's side decides a pass, the other a failure; between them, not decided, with the
/// requests that would decide it.
fn judge_percentile(
    result: &mut VerdictResult,
    assertion: &Assertion,
    p: f64,
    distribution: &crate::metrics::Distribution,
    ok_requests: u64,
    judging: &Judging,
) {
    let n = distribution.count();
    if p >= 100.0 || n == 0 {
        return;
    }
    let kind = assertion.metric.kind();
    let ranks = confidence::ranks(n, p / 100.0, judging.confidence);
    let low = ranks.lower.and_then(|r| distribution.value_at_rank(r));
    let high = ranks.upper.and_then(|r| distribution.value_at_rank(r));
    let end = |v: Option<f64>| v.map_or_else(|| "unbounded".to_string(), |v| display(kind, v));
    result.interval = Some(Interval {
        low,
        high,
        confidence: judging.confidence,
        display: format!(
            "{}%: {} … {}",
            crate::plan::units::format_load(judging.confidence * 100.0),
            end(low),
            end(high)
        ),
    });
    let (op, threshold) = (assertion.op, assertion.threshold);
    // The bound that shows the assertion holds, and the one that shows it broken.
    let (shows_pass, shows_fail) = match op {
        Op::Lt | Op::Le => (high, low),
        Op::Gt | Op::Ge => (low, high),
    };
    result.outcome = if shows_pass.is_some_and(|v| op.holds(v, threshold)) {
        Outcome::Pass
    } else if shows_fail.is_some_and(|v| !op.holds(v, threshold)) {
        Outcome::Fail
    } else {
        Outcome::NotDecided
    };
    if result.outcome != Outcome::NotDecided {
        return;
    }
    let leans_pass = result.observed.is_some_and(|v| op.holds(v, threshold));
    let lean = match (op, leans_pass) {
        (Op::Lt | Op::Le, true) | (Op::Gt | Op::Ge, false) => Lean::Below,
        _ => Lean::Above,
    };
    let below = distribution.share_at_or_below(threshold);
    let needed = confidence::requests_to_decide(p / 100.0, judging.confidence, below, lean);
    let confidence = crate::plan::units::format_load(judging.confidence * 100.0);
    let bounds = match (low, high) {
        (Some(low), Some(high)) => {
            format!("between {} and {}", display(kind, low), display(kind, high))
        }
        (Some(low), None) => format!(
            "at least {}, with no upper bound from so few values",
            display(kind, low)
        ),
        (None, Some(high)) => format!(
            "at most {}, with no lower bound from so few values",
            display(kind, high)
        ),
        (None, None) => "unbounded either way from so few values".to_string(),
    };
    let decide = match needed {
        Some(values) => format!(
            "about {} would decide it, if their values keep this run's shape",
            requests_for(values, n, ok_requests)
        ),
        None => "its values sit on the threshold: no run length decides it".to_string(),
    };
    result.undecided = Some(format!(
        "its p{p} rests on {}: at {confidence}% confidence it is {bounds}, which leaves {} open; {decide}",
        values_word(n, ok_requests),
        result.threshold_display
    ));
}

/// `40 requests`, or `1,200 values (40 requests)` for a per-gap metric.
fn values_word(values: u64, requests: u64) -> String {
    if requests == 0 || values == requests {
        format!("{} requests", crate::words::thousands(values))
    } else {
        format!(
            "{} values ({} requests)",
            crate::words::thousands(values),
            crate::words::thousands(requests)
        )
    }
}

/// The requests that give `needed` values, at this run's values per request.
fn requests_for(needed: u64, values: u64, requests: u64) -> String {
    if requests == 0 || values == requests {
        return format!("{} requests", crate::words::thousands(needed));
    }
    let per_request = values as f64 / requests as f64;
    let requests_needed = (needed as f64 / per_request).ceil() as u64;
    format!(
        "{} requests ({} values)",
        crate::words::thousands(requests_needed.max(1)),
        crate::words::thousands(needed)
    )
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
            by_batch: Vec::new(),
            by_turn: Vec::new(),
            by_turn_kind: Vec::new(),
            by_media: Vec::new(),
            error_samples: Vec::new(),
            steady: None,
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
            let a = assertion(Metric::Ttft, p99, op, threshold, None);
            judge_assertion(&a, Some(&agg.overall), Judge::Point).passed
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
            &Judging::default(),
            &agg,
        );
        assert!(v.passed, "{v:?}");
        assert_eq!(v.results[0].phase, "steady");
        assert_eq!(v.results[0].observed_display, "1.00%");
    }

    /// `n` values 1..=n ms in the overall scope.
    fn with_values(n: u64) -> Aggregates {
        let mut agg = aggregates();
        let mut d = Distribution::milliseconds();
        for v in 1..=n {
            d.record(v as f64);
        }
        *agg.overall.distributions.get_mut(Metric::Ttft).unwrap() = d;
        agg.overall.requests.ok = n;
        agg
    }

    fn judged(agg: &Aggregates, stat: Stat, op: Op, threshold: f64) -> VerdictResult {
        let a = assertion(Metric::Ttft, Some(stat), op, threshold, None);
        evaluate(&[a], &Judging::default(), agg).results.remove(0)
    }

    #[test]
    fn a_percentile_of_too_few_values_is_not_decided_and_says_what_would_decide_it() {
        assert_eq!(samples_needed(99.0), 100);
        assert_eq!(samples_needed(99.9), 1000);
        // 40 values all below the threshold: a p99.9 cannot be shown below it.
        let agg = with_values(40);
        let v = judged(&agg, Stat::Percentile(99.9), Op::Lt, 45.0);
        assert_eq!(v.outcome, Outcome::NotDecided);
        assert!(!v.passed);
        let why = v.undecided.as_deref().unwrap();
        assert!(why.contains("40 requests"), "{why}");
        assert!(
            why.contains("about 2,995 requests would decide it"),
            "{why}"
        );
        assert_eq!(v.interval.as_ref().unwrap().high, None);
        let verdicts = evaluate(
            &[assertion(
                Metric::Ttft,
                Some(Stat::Percentile(99.9)),
                Op::Lt,
                45.0,
                None,
            )],
            &Judging::default(),
            &agg,
        );
        assert_eq!(verdicts.deciding_nothing().count(), 1);
        assert_eq!(verdicts.failing().count(), 0);
    }

    #[test]
    fn a_percentile_passes_on_its_upper_bound_and_fails_on_its_lower_bound() {
        let agg = with_values(1000);
        // The p99's 95% bounds of 1..=1000 ms are near 985 and 995 ms.
        let v = judged(&agg, Stat::Percentile(99.0), Op::Lt, 1000.0);
        assert_eq!(v.outcome, Outcome::Pass, "{v:?}");
        let v = judged(&agg, Stat::Percentile(99.0), Op::Lt, 980.0);
        assert_eq!(v.outcome, Outcome::Fail, "{v:?}");
        // The observed p99 (990) holds, but the upper bound does not: not decided.
        let v = judged(&agg, Stat::Percentile(99.0), Op::Lt, 992.0);
        assert_eq!(v.outcome, Outcome::NotDecided, "{v:?}");
        let interval = v.interval.unwrap();
        let (low, high) = (interval.low.unwrap(), interval.high.unwrap());
        assert!(low < 990.0 && 990.0 < high, "{low} {high}");
        // The other direction: a p10 above 50 ms holds on its lower bound.
        let v = judged(&agg, Stat::Percentile(10.0), Op::Gt, 50.0);
        assert_eq!(v.outcome, Outcome::Pass, "{v:?}");
        let v = judged(&agg, Stat::Percentile(10.0), Op::Gt, 200.0);
        assert_eq!(v.outcome, Outcome::Fail, "{v:?}");
    }

    #[test]
    fn the_plan_chooses_what_an_undecided_judgement_makes_of_the_run() {
        let agg = with_values(40);
        let a = assertion(
            Metric::Ttft,
            Some(Stat::Percentile(99.9)),
            Op::Lt,
            45.0,
            None,
        );
        let judging = |undecided| Judging {
            undecided,
            ..Judging::default()
        };
        let v = evaluate(std::slice::from_ref(&a), &judging(Undecided::Fail), &agg);
        assert_eq!(v.failing().count(), 1);
        assert!(v.results[0].undecided.is_some());
        let v = evaluate(std::slice::from_ref(&a), &judging(Undecided::Pass), &agg);
        assert!(v.passed);
        assert_eq!(v.results[0].outcome, Outcome::NotDecided);
        assert_eq!(v.deciding_nothing().count(), 0);
        // A higher confidence asks for more: 99% cannot show a p99 from 300 values.
        let agg = with_values(300);
        let a = assertion(
            Metric::Ttft,
            Some(Stat::Percentile(99.0)),
            Op::Lt,
            1e3,
            None,
        );
        let at = |confidence| Judging {
            confidence,
            ..Judging::default()
        };
        assert!(evaluate(std::slice::from_ref(&a), &at(0.95), &agg).passed);
        assert!(!evaluate(std::slice::from_ref(&a), &at(0.99), &agg).passed);
    }

    #[test]
    fn a_server_metric_the_engine_does_not_export_says_so() {
        let mut agg = aggregates();
        agg.server = Some(crate::metrics::server::ServerTelemetry {
            engine: Some("llama.cpp".into()),
            samples: 7,
            ..Default::default()
        });
        let kv = assertion(Metric::ServerKvCache, Some(Stat::Max), Op::Lt, 0.95, None);
        let v = evaluate(&[kv], &Judging::default(), &agg);
        assert_eq!(v.results[0].outcome, Outcome::NotDecided);
        assert_eq!(
            v.results[0].observed_display,
            "llama.cpp's /metrics has no KV cache"
        );
        assert!(
            v.results[0]
                .undecided
                .as_deref()
                .unwrap()
                .contains("7 scrape(s) answered"),
            "{:?}",
            v.results[0]
        );
        // Reported in another phase than the one asserted on: this scope's gap.
        let mut other = PhaseMetrics {
            name: "other".into(),
            ..PhaseMetrics::default()
        };
        let mut server = crate::metrics::server::PhaseServer::default();
        server.signals.insert(
            crate::telemetry::Signal::Running.name().to_string(),
            Default::default(),
        );
        other.server = Some(server);
        agg.phases.push(other);
        let running = assertion(Metric::ServerRunning, Some(Stat::Max), Op::Lt, 10.0, None);
        let v = evaluate(&[running], &Judging::default(), &agg);
        assert!(
            v.results[0].observed_display.contains("did not report"),
            "{:?}",
            v.results[0]
        );
    }

    #[test]
    fn no_data_is_not_decided() {
        let agg = aggregates();
        let v = evaluate(
            &[assertion(Metric::Itl, Some(Stat::Max), Op::Lt, 1e9, None)],
            &Judging::default(),
            &agg,
        );
        assert!(!v.passed);
        assert_eq!(v.results[0].outcome, Outcome::NotDecided);
        assert_eq!(v.results[0].observed_display, "no data");
        // A step's objective is judged on the point value: no data fails the step.
        let a = assertion(Metric::Itl, Some(Stat::Max), Op::Lt, 1e9, None);
        assert_eq!(
            judge_assertion(&a, Some(&agg.overall), Judge::Point).outcome,
            Outcome::Fail
        );
    }

    /// What is missing is said as the metric table says it, not "no data".
    #[test]
    fn what_a_scope_lacks_is_said_as_the_table_says_it() {
        let agg = aggregates();
        for (metric, said) in [
            (
                Metric::EnergyPerOutputToken,
                "no GPU telemetry (no energy or power readings), or no output tokens",
            ),
            (
                Metric::PrefixCacheHitRate,
                "the server reported no cached tokens",
            ),
        ] {
            let v = evaluate(
                &[assertion(metric, None, Op::Lt, 1.0, None)],
                &Judging::default(),
                &agg,
            );
            assert_eq!(v.results[0].outcome, Outcome::NotDecided);
            assert_eq!(v.results[0].observed_display, said);
        }
    }
}
