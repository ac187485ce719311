//! Steps and probes: each measured step of a sweep, and each probe of a search, judged on the
//! plan's objectives; each sweep's knee; the search's capacity and its bracket.
//!
//! A step passes when every objective holds over its own window, and its window shows no
//! saturation (a queue still growing at its end is no steady state, whatever the percentiles
//! say), its load is within the server's rate limits (a load a hosted API throttles, or whose
//! budget it spends faster than it refills, is not sustained: `metrics::budget`; objectives on
//! `throttled-rate` judge the refusals themselves), and it was not ended early. A probe is judged exactly so, by the same function, both
//! while the search runs (to choose the next load) and when the report is made (to state the
//! bracket): the two cannot disagree.

use serde::Serialize;

use super::{judge_assertion, VerdictResult};
use crate::metrics::PhaseMetrics;
use crate::plan::{Assertion, LoadUnit, Metric, MetricKind, Objective, Op, Plan};
use crate::planner::search::{self, Bracket, ProbeResult};
use crate::records::{SearchEnd, Stopped};

/// How close to its threshold an objective's value must be to make its step marginal:
/// within this share of the threshold.
const MARGIN: f64 = 0.10;
/// For an attainment (a share of requests), within this many points instead.
const ATTAINMENT_MARGIN: f64 = 0.02;

/// One measured step of a sweep, or probe of a search, judged on the objectives.
#[derive(Debug, Clone, Serialize)]
pub struct StepResult {
    /// The phase's name (`sweep @ 8`, `capacity probe 3 @ 12.5`).
    pub phase: String,
    /// The sweep's or the search's name.
    pub series: String,
    /// Its load, in `unit`.
    pub load: f64,
    /// Requests per second, or concurrent requests.
    pub unit: LoadUnit,
    /// A probe of a search (rather than a step of a sweep).
    pub probe: bool,
    /// Every objective held, the window showed no saturation, and it ran its whole window.
    pub passed: bool,
    /// An objective within 10% of its threshold (an attainment within 2 points): a probe so
    /// close is repeated before it decides.
    pub marginal: bool,
    /// Each objective, judged on this step alone.
    pub objectives: Vec<VerdictResult>,
    /// Why its window shows saturation, if it does.
    pub saturation: Option<String>,
    /// Why its load is above the server's rate limits, if it is (refusals are left to
    /// objectives that judge `throttled-rate` themselves).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub over_limits: Option<String>,
    /// Why it was ended before its planned end, if it was.
    pub ended_early: Option<String>,
    /// Why the client, not the server, limited it, if it did (its requests went out late, or
    /// the client's CPU was saturated): a search does not take such a probe as evidence, and
    /// repeats it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_limited: Option<String>,
    /// The objectives its window's requests cannot decide at 95% confidence (each with why):
    /// the step was judged on their observed values, as a search must be to choose its next
    /// load, and says that they rest on that alone.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub undecided: Vec<String>,
}

/// A sweep, or the search, as a whole.
#[derive(Debug, Clone, Serialize)]
pub struct SeriesResult {
    /// Its name.
    pub name: String,
    /// A search (rather than a sweep).
    pub search: bool,
    /// Where its objectives stop holding: the highest load at which they held below the lowest
    /// at which they failed (for a sweep, its knee), with the reason it stopped.
    pub bracket: Bracket,
    /// As people read it.
    pub headline: String,
}

/// What the plan's search found.
#[derive(Debug, Clone, Serialize)]
pub struct CapacityResult {
    /// The search's name.
    pub name: String,
    /// The highest load that held, the lowest that failed, and why the search stopped.
    pub bracket: Bracket,
    /// "sustains 11.8 req/s; fails at 12.6 req/s".
    pub headline: String,
    /// Why it stopped, in a sentence.
    pub stopped: String,
}

/// The objectives each step and probe is judged on: the plan's `sla` lines that name no phase
/// (`capacity` aside), or the attainment of its `slo`.
pub fn objectives(plan: &Plan) -> Vec<Assertion> {
    match plan.objective {
        Objective::Attainment(share) => vec![Assertion {
            metric: Metric::GoodputRatio,
            stat: None,
            op: Op::Ge,
            threshold: share,
            phase: None,
            text: format!(
                "goodput-ratio >= {}% (attainment of the slo)",
                crate::plan::units::format_load(share * 100.0)
            ),
        }],
        Objective::Sla => plan
            .sla
            .iter()
            .filter(|a| a.phase.is_none() && a.metric != Metric::Capacity)
            .cloned()
            .collect(),
    }
}

/// Judges `phase` on `objectives`, if it is a measured step or probe (warmups are not).
pub fn judge_step(objectives: &[Assertion], phase: &PhaseMetrics) -> Option<StepResult> {
    let step = phase.step.as_ref().filter(|s| !s.warmup)?;
    let results: Vec<VerdictResult> = objectives
        .iter()
        .map(|objective| {
            let mut result = judge_assertion(objective, Some(phase), super::Judge::Point);
            result.phase = phase.name.clone();
            result
        })
        .collect();
    // The same objectives by their confidence bounds: what the window alone cannot decide.
    let judging = crate::plan::Judging::default();
    let undecided = objectives
        .iter()
        .filter_map(|objective| {
            let bounded =
                judge_assertion(objective, Some(phase), super::Judge::Confidence(&judging));
            (bounded.outcome == super::Outcome::NotDecided).then(|| {
                format!(
                    "`{}`: {}",
                    objective.text,
                    bounded.undecided.unwrap_or_default()
                )
            })
        })
        .collect();
    // Objectives that judge throttling themselves decide how much of it a load may meet; a
    // budget falling through the window is throttling still to come, judged whatever they say.
    let own_throttling = objectives.iter().any(|o| o.metric == Metric::ThrottledRate);
    let over_limits = phase
        .over_limits
        .as_ref()
        .filter(|over| !(over.refused && own_throttling))
        .map(|over| over.why.clone());
    let trouble =
        phase.saturation.is_some() || phase.ended_early.is_some() || over_limits.is_some();
    let marginal = !trouble
        && objectives
            .iter()
            .zip(&results)
            .any(|(objective, result)| result.observed.is_some_and(|v| near(objective, v)));
    Some(StepResult {
        phase: phase.name.clone(),
        series: step.series.clone(),
        load: step.load_value,
        unit: step.unit,
        probe: step.probe,
        passed: !trouble && results.iter().all(|r| r.passed),
        marginal,
        objectives: results,
        saturation: phase.saturation.clone(),
        over_limits,
        ended_early: phase.ended_early.clone(),
        client_limited: crate::metrics::warnings::client_limited(phase),
        undecided,
    })
}

impl StepResult {
    /// Its result in a line, with why: `pass`, `fail: ttft p99 < 500ms (observed 612 ms)`,
    /// `fail: requests in flight grew …`, or why the client limited it (no evidence either
    /// way).
    pub fn outcome(&self) -> String {
        if let Some(why) = &self.client_limited {
            return format!("not judged, the client limited it: {why}");
        }
        let point = self.point_outcome();
        if self.undecided.is_empty() {
            return point;
        }
        format!(
            "{point}; on its observed values only, not decided at 95%: {}",
            self.undecided.join("; ")
        )
    }

    /// [`StepResult::outcome`] on the observed values.
    fn point_outcome(&self) -> String {
        let why = if let Some(why) = &self.ended_early {
            why.clone()
        } else if let Some(why) = &self.saturation {
            why.clone()
        } else if let Some(why) = &self.over_limits {
            why.clone()
        } else {
            let missed: Vec<String> = self
                .objectives
                .iter()
                .filter(|o| !o.passed)
                .map(|o| format!("`{}` (observed {})", o.assertion, o.observed_display))
                .collect();
            if missed.is_empty() {
                let marginal = if self.marginal {
                    " (marginal: within 10% of a threshold, repeated)"
                } else {
                    ""
                };
                return format!("pass{marginal}");
            }
            format!("missed {}", missed.join(", "))
        };
        format!("fail: {why}")
    }
}

/// Whether `observed` is close enough to the objective's threshold to be noise either way.
fn near(objective: &Assertion, observed: f64) -> bool {
    let threshold = objective.threshold;
    let distance = (observed - threshold).abs();
    match objective.metric.kind() {
        _ if objective.metric == Metric::GoodputRatio => distance <= ATTAINMENT_MARGIN,
        // A small rate (errors under 1%) would otherwise have no margin at all.
        MetricKind::Fraction => distance <= (MARGIN * threshold).max(0.002),
        MetricKind::Latency
        | MetricKind::TokenRate
        | MetricKind::Throughput
        | MetricKind::Capacity
        | MetricKind::Count
        | MetricKind::Tokens
        | MetricKind::Power
        | MetricKind::Energy
        | MetricKind::Cost => distance <= MARGIN * threshold.abs(),
    }
}

/// Each sweep and the search, from their judged steps (in the order they ran), with where
/// their objectives stop holding; `search_end` is how the run's search ended.
pub fn series(steps: &[StepResult], search_end: Option<&SearchEnd>) -> Vec<SeriesResult> {
    let mut names: Vec<(&str, bool)> = Vec::new();
    for step in steps {
        if !names.contains(&(step.series.as_str(), step.probe)) {
            names.push((step.series.as_str(), step.probe));
        }
    }
    names
        .into_iter()
        .map(|(name, is_search)| {
            let of_series: Vec<&StepResult> = steps
                .iter()
                .filter(|s| s.series == name && s.probe == is_search)
                .collect();
            let unit = of_series[0].unit;
            let results: Vec<ProbeResult> = of_series
                .iter()
                .map(|s| ProbeResult {
                    load: s.load,
                    passed: s.passed,
                    // A sweep measures each step once: its steps decide as they are.
                    marginal: is_search && s.marginal,
                    client_limited: is_search && s.client_limited.is_some(),
                })
                .collect();
            let stopped = if is_search {
                search_end
                    .filter(|end| end.name == name)
                    .map_or(Stopped::Interrupted, |end| end.stopped)
            } else {
                Stopped::Precise
            };
            let bracket = search::bracket(unit, &results, stopped);
            let headline = if is_search {
                bracket.headline()
            } else {
                knee(&bracket)
            };
            SeriesResult {
                name: name.to_string(),
                search: is_search,
                bracket,
                headline,
            }
        })
        .collect()
}

/// A sweep's result as people read it: where its objectives stop holding.
fn knee(bracket: &Bracket) -> String {
    let unit = bracket.unit.symbol();
    let value = crate::plan::units::format_load;
    match (bracket.sustains, bracket.fails_at) {
        (Some(s), Some(f)) => format!(
            "the objectives hold up to {} {unit} and fail from {} {unit}",
            value(s),
            value(f)
        ),
        (Some(s), None) => format!(
            "the objectives hold at every step, up to {} {unit}",
            value(s)
        ),
        (None, Some(f)) => format!(
            "the objectives fail from the first step, {} {unit}",
            value(f)
        ),
        (None, None) => "no step completed".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::Distribution;
    use crate::plan::Stat;
    use crate::records::StepInfo;

    fn p99_under(ms: f64) -> Assertion {
        Assertion {
            metric: Metric::Ttft,
            stat: Some(Stat::Percentile(99.0)),
            op: Op::Lt,
            threshold: ms,
            phase: None,
            text: format!("ttft p99 < {ms}ms"),
        }
    }

    fn step(load: f64, ttft_ms: f64, probe: bool) -> PhaseMetrics {
        let mut m = PhaseMetrics {
            name: format!("s @ {load}"),
            recorded: true,
            step: Some(StepInfo {
                series: "s".into(),
                load_value: load,
                unit: LoadUnit::RequestsPerSecond,
                warmup: false,
                probe,
            }),
            ..PhaseMetrics::default()
        };
        *m.distributions.get_mut(Metric::Ttft).unwrap() = Distribution::milliseconds();
        for _ in 0..200 {
            m.distributions
                .get_mut(Metric::Ttft)
                .unwrap()
                .record(ttft_ms);
        }
        m
    }

    #[test]
    fn steps_pass_fail_and_margins() {
        let objectives = [p99_under(500.0)];
        let low = judge_step(&objectives, &step(2.0, 100.0, false)).unwrap();
        assert!(low.passed && !low.marginal);
        let near = judge_step(&objectives, &step(4.0, 480.0, false)).unwrap();
        assert!(near.passed && near.marginal);
        let high = judge_step(&objectives, &step(8.0, 900.0, false)).unwrap();
        assert!(!high.passed && !high.marginal);
        let mut saturated = step(8.0, 100.0, false);
        saturated.saturation = Some("queue".into());
        let saturated = judge_step(&objectives, &saturated).unwrap();
        assert!(
            !saturated.passed,
            "a saturated step fails whatever its percentiles"
        );
        // Warmups and ordinary phases are not steps.
        let mut warmup = step(2.0, 100.0, false);
        warmup.step.as_mut().unwrap().warmup = true;
        assert!(judge_step(&objectives, &warmup).is_none());
        assert!(judge_step(&objectives, &PhaseMetrics::default()).is_none());
    }

    #[test]
    fn a_load_over_the_rate_limits_fails_and_refusals_yield_to_own_objectives() {
        use crate::metrics::budget::OverLimits;
        let over = |refused| {
            let mut m = step(8.0, 100.0, true);
            m.requests.sent = 200;
            m.requests.ok = 200;
            m.over_limits = Some(OverLimits {
                why: "the budget fell".into(),
                refused,
            });
            m
        };
        let latency = [p99_under(500.0)];
        for refused in [false, true] {
            let judged = judge_step(&latency, &over(refused)).unwrap();
            assert!(!judged.passed && !judged.marginal);
            assert!(judged.outcome().starts_with("fail: the budget fell"));
        }
        // With an objective of its own on throttling, the plan decides how much a load may
        // meet; a falling budget (throttling still to come) fails it all the same.
        let throttling = [
            p99_under(500.0),
            Assertion {
                metric: Metric::ThrottledRate,
                stat: None,
                op: Op::Lt,
                threshold: 0.05,
                phase: None,
                text: "throttled-rate < 5%".into(),
            },
        ];
        assert!(judge_step(&throttling, &over(true)).unwrap().passed);
        assert!(!judge_step(&throttling, &over(false)).unwrap().passed);
    }

    #[test]
    fn a_sweep_states_its_knee() {
        let objectives = [p99_under(500.0)];
        let steps: Vec<StepResult> = [(1.0, 50.0), (2.0, 80.0), (4.0, 200.0), (8.0, 900.0)]
            .iter()
            .map(|&(load, ttft)| judge_step(&objectives, &step(load, ttft, false)).unwrap())
            .collect();
        let series = series(&steps, None);
        assert_eq!(series.len(), 1);
        assert_eq!(series[0].bracket.sustains, Some(4.0));
        assert_eq!(series[0].bracket.fails_at, Some(8.0));
        assert_eq!(
            series[0].headline,
            "the objectives hold up to 4 req/s and fail from 8 req/s"
        );
    }

    #[test]
    fn a_probe_whose_requests_went_out_late_is_no_evidence() {
        let objectives = [p99_under(500.0)];
        let lagged = |late: usize| {
            let mut phase = step(8.0, 900.0, true);
            let mut lag = Distribution::milliseconds();
            for k in 0..100 {
                lag.record(if k < late { 125.0 } else { 0.5 });
            }
            *phase.distributions.get_mut(Metric::ScheduleLag).unwrap() = lag;
            judge_step(&objectives, &phase).unwrap()
        };
        // One or two stragglers (a connection opened) are no evidence.
        assert!(lagged(2).client_limited.is_none());
        let judged = lagged(3);
        let why = judged.client_limited.clone().unwrap();
        assert!(
            why.contains("schedule lag third latest of 100 125"),
            "{why}"
        );
        assert!(judged
            .outcome()
            .starts_with("not judged, the client limited it"));
        // Twice in a row at one load: the search's bracket leaves both out.
        let on_time = judge_step(&objectives, &step(4.0, 100.0, true)).unwrap();
        let found = series(&[on_time.clone(), judged.clone(), judged], None);
        assert_eq!(found[0].bracket.sustains, Some(4.0));
        assert_eq!(found[0].bracket.fails_at, None);
        // What a failed probe says in the terminal names the objective and what it observed.
        let missed = judge_step(&objectives, &step(8.0, 900.0, true)).unwrap();
        assert!(
            missed
                .outcome()
                .starts_with("fail: missed `ttft p99 < 500ms` (observed "),
            "{}",
            missed.outcome()
        );
        // (200 requests show no p99 at 95%: the pass rests on the observed value, and says so.)
        assert!(
            on_time.outcome().starts_with("pass; "),
            "{}",
            on_time.outcome()
        );
    }

    #[test]
    fn a_search_without_its_end_was_interrupted() {
        let objectives = [p99_under(500.0)];
        let steps = vec![judge_step(&objectives, &step(4.0, 100.0, true)).unwrap()];
        let found = series(&steps, None);
        assert_eq!(found[0].bracket.stopped, Stopped::Interrupted);
        let end = SearchEnd {
            name: "s".into(),
            stopped: Stopped::AboveRange,
            at_us: 0,
        };
        assert_eq!(
            series(&steps, Some(&end))[0].bracket.stopped,
            Stopped::AboveRange
        );
    }

    /// A step's 200 requests cannot show a p99 below its threshold at 95% (that takes 299): it
    /// passes on the observed value, as the search needs, and says it is not decided; a p50
    /// objective on the same window is decided.
    #[test]
    fn a_step_says_which_objectives_its_window_cannot_decide() {
        let p99 = judge_step(&[p99_under(500.0)], &step(2.0, 100.0, false)).unwrap();
        assert!(p99.passed);
        assert_eq!(p99.undecided.len(), 1, "{:?}", p99.undecided);
        let said = p99.outcome();
        assert!(
            said.starts_with(
                "pass; on its observed values only, not decided at 95%: `ttft p99 < 500ms`: its p99 rests on 200"
            ),
            "{said}"
        );
        let p50 = Assertion {
            stat: Some(Stat::Percentile(50.0)),
            text: "ttft p50 < 500ms".into(),
            ..p99_under(500.0)
        };
        let decided = judge_step(&[p50], &step(2.0, 100.0, false)).unwrap();
        assert!(decided.undecided.is_empty(), "{:?}", decided.undecided);
        assert_eq!(decided.outcome(), "pass");
    }
}
