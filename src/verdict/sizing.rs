//! Before a run: which percentile assertions the plan's planned requests can never decide
//! (`llmload check` and `llmload plan` say so). A p99.9 of 300 requests is their largest, and no
//! 300 values bound it from above at 95%: the run could only end not decided.
//!
//! Not for: per-gap metrics (ITL has a value per token, not per request: their counts are not
//! known before the run), closed loops that run for a time (their count is not planned), or a
//! sweep's and a search's objectives (judged per step, by the search's own rules).

use super::confidence::{self, Lean};
use crate::metrics::table::{Sample, Source};
use crate::plan::{Assertion, Op, Plan, Stat};
use crate::planner::Schedule;

/// One sentence per assertion of `plan` that `schedule`'s planned requests can never decide.
pub fn undecidable(plan: &Plan, schedule: &Schedule) -> Vec<String> {
    plan.sla
        .iter()
        .filter_map(|assertion| {
            let Some(Stat::Percentile(p)) = assertion.stat else {
                return None;
            };
            let per_request = matches!(
                assertion.metric.def().source,
                Source::Distribution {
                    sample: Sample::One(_),
                    ..
                }
            );
            if !per_request || p >= 100.0 || (plan.is_stepped() && assertion.phase.is_none()) {
                return None;
            }
            let planned = planned_requests(assertion, schedule)?;
            never_decided(assertion, p, planned, plan.judging.confidence)
        })
        .collect()
}

/// The requests planned in the assertion's scope, when every phase of it plans a count.
fn planned_requests(assertion: &Assertion, schedule: &Schedule) -> Option<u64> {
    let mut total = 0u64;
    for phase in schedule.phases.iter().filter(|p| match &assertion.phase {
        Some(name) => &p.name == name,
        None => p.record,
    }) {
        if phase.open_ended {
            return None;
        }
        total += phase.requests.len() as u64;
    }
    Some(total)
}

/// Why `planned` requests can never decide the assertion's `p`-th percentile, if they cannot.
fn never_decided(assertion: &Assertion, p: f64, planned: u64, confidence: f64) -> Option<String> {
    let ranks = confidence::ranks(planned, p / 100.0, confidence);
    let (bound, lean, side) = match assertion.op {
        Op::Lt | Op::Le => (ranks.upper, Lean::Below, "below"),
        Op::Gt | Op::Ge => (ranks.lower, Lean::Above, "above"),
    };
    if bound.is_some() {
        return None;
    }
    let all_on_its_side = if lean == Lean::Below { 1.0 } else { 0.0 };
    let needed = confidence::requests_to_decide(p / 100.0, confidence, all_on_its_side, lean)?;
    let scope = assertion.phase.as_ref().map_or_else(
        || "all recorded phases".to_string(),
        |p| format!("phase \"{p}\""),
    );
    Some(format!(
        "`{}` ({scope}): its {planned} planned request(s) can never show its p{p} {side} the \
         threshold at {}% confidence, even if every one is (that takes {needed}): the run could \
         only end not decided; plan more requests, assert a lower percentile or max, or lower \
         `confidence`",
        assertion.text,
        crate::plan::units::format_load(confidence * 100.0)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn warnings(phases: &str, sla: &str) -> Vec<String> {
        let text = format!(
            "target \"sim\"\nworkload {{ input 8; output 4 }}\n{phases}\nsla {{ {sla} }}\n"
        );
        let plan = crate::plan::parse_plan("t.kdl", text).unwrap();
        let schedule = crate::planner::compile(&plan, 1).unwrap();
        undecidable(&plan, &schedule)
    }

    #[test]
    fn a_percentile_beyond_the_planned_requests_is_said_before_the_run() {
        let p999 = warnings(
            "phase \"steady\" { rate 10; requests 300 }",
            "ttft p99.9 < \"45ms\"",
        );
        assert_eq!(p999.len(), 1, "{p999:?}");
        assert!(p999[0].contains("300 planned request(s)"), "{}", p999[0]);
        assert!(p999[0].contains("that takes 2995"), "{}", p999[0]);
        // 300 requests can show a p99, and ITL's values are per token: nothing to say.
        assert!(warnings(
            "phase \"steady\" { rate 10; requests 300 }",
            "ttft p99 < \"45ms\"\nitl p99.9 < \"5ms\""
        )
        .is_empty());
        // A closed loop for a time plans no count.
        assert!(warnings(
            "phase \"steady\" { concurrency 2; duration \"5s\" }",
            "ttft p99.9 < \"45ms\""
        )
        .is_empty());
        // A named phase is counted alone; an unrecorded one is no part of "all".
        let named = warnings(
            "phase \"warm\" { rate 10; requests 5000; record #false }\nphase \"a\" { rate 10; requests 40 }",
            "ttft p99 < \"1s\" phase=\"a\"\ne2e p99 < \"1s\"",
        );
        assert_eq!(named.len(), 2, "{named:?}");
        assert!(named[1].contains("all recorded phases"), "{}", named[1]);
    }
}
