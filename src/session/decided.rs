//! `duration "10m" until="decided" min="30s"`: a phase that ends as soon as every assertion on
//! it is decided, so that a CI gate stops paying for minutes that change nothing (MLPerf
//! LoadGen's early stopping, in the plan's own terms).
//!
//! An [`Observer`] between the executor and the caller's, like the abort conditions: it gathers
//! each watched phase's requests as they finish, with the report's definitions, and judges the
//! phase's assertions every [`JUDGE_EVERY`] requests once the phase has run its minimum — a
//! percentile by its confidence bounds at the plan's confidence (the verdict's own judge), a
//! share by its 95% interval, a maximum or minimum once more requests can no longer change its
//! outcome. When none is left undecided it ends the phase through its [`PhaseControl`], with the
//! reason the report shows. A mean, a throughput or the server's telemetry is not waited for: it
//! is judged on the phase as it ran.
//!
//! Not for: the verdict (the run's records are judged again at its end, as any run's), nor
//! stopping the run (that is `abort`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::live::Live;
use crate::executor::{Event, Observer, PhaseControl};
use crate::metrics::{self, PhaseMetrics};
use crate::plan::{Assertion, Judging, Op, Plan, Slo, Stat};
use crate::records::RequestRecord;
use crate::verdict::{judge_assertion, Judge, Outcome};

/// A phase's assertions are judged every this many of its requests (a percentile's bounds cost
/// a walk of its histogram).
const JUDGE_EVERY: u64 = 16;

/// One watched phase.
struct Watched {
    name: String,
    min_us: u64,
    control: PhaseControl,
    assertions: Vec<Assertion>,
    /// Each assertion's share, as it gathers (distributions go to `scope`).
    gathered: Vec<Live>,
    /// The distribution metrics its assertions read, each once.
    distributions: Vec<crate::plan::Metric>,
    /// The phase so far as the verdict's judge reads a scope: those distributions, and its
    /// successful requests. Judged in place, never copied.
    scope: PhaseMetrics,
    started_us: Option<u64>,
    completed: u64,
    ended: bool,
}

/// Watches the phases that end once decided.
pub(super) struct DecidedWatch {
    judging: Judging,
    slo: Option<Slo>,
    inner: Arc<dyn Observer>,
    /// By phase index.
    phases: Mutex<HashMap<usize, Watched>>,
}

impl DecidedWatch {
    /// A watch over `plan`'s phases with `until="decided"`, each ended through its control in
    /// `controls` (by phase index); `None` when the plan has none.
    pub fn new(
        plan: &Plan,
        controls: &HashMap<usize, PhaseControl>,
        phase_names: &[(usize, String)],
        inner: Arc<dyn Observer>,
    ) -> Option<DecidedWatch> {
        // (A search's probes are recorded too, and judged on the run-wide assertions.)
        let recorded =
            plan.phases.iter().filter(|p| p.record).count() + usize::from(plan.search.is_some());
        let mut phases = HashMap::new();
        for (index, name) in phase_names {
            let Some(phase) = plan.phases.iter().find(|p| &p.name == name) else {
                continue;
            };
            let (Some(min), Some(control)) = (phase.until_decided, controls.get(index)) else {
                continue;
            };
            let assertions: Vec<Assertion> =
                crate::plan::judging_phase(name, recorded == 1, &plan.sla)
                    .into_iter()
                    .cloned()
                    .collect();
            // Shares gather apart; distributions into the phase's one scope, a metric once.
            let distribution = |a: &Assertion| {
                matches!(
                    a.metric.def().source,
                    crate::metrics::table::Source::Distribution { .. }
                )
            };
            let gathered = assertions
                .iter()
                .map(|a| {
                    if distribution(a) {
                        Live::Nothing
                    } else {
                        Live::of(a.metric)
                    }
                })
                .collect();
            let mut distributions = Vec::new();
            for a in assertions.iter().filter(|a| distribution(a)) {
                if !distributions.contains(&a.metric) {
                    distributions.push(a.metric);
                }
            }
            phases.insert(
                *index,
                Watched {
                    name: name.clone(),
                    min_us: min.as_micros() as u64,
                    control: control.clone(),
                    assertions,
                    gathered,
                    distributions,
                    scope: PhaseMetrics::default(),
                    started_us: None,
                    completed: 0,
                    ended: false,
                },
            );
        }
        (!phases.is_empty()).then(|| DecidedWatch {
            judging: plan.judging,
            slo: plan.slo,
            inner,
            phases: Mutex::new(phases),
        })
    }
}

/// Whether more requests could still change `assertion`'s outcome, from what it has gathered
/// (`live`: its share; `scope`: the phase so far).
fn decided(live: &Live, assertion: &Assertion, scope: &PhaseMetrics, judging: &Judging) -> bool {
    if !crate::plan::decides_while_running(assertion) {
        return true;
    }
    if let Live::Share { counted, among } = live {
        let share = *counted as f64 / (*among).max(1) as f64;
        return crate::report::benchmarks::wilson(share, *among).is_some_and(|(low, high)| {
            let holds = |v: f64| assertion.op.holds(v, assertion.threshold);
            holds(low) == holds(high)
        });
    }
    match assertion.stat {
        Some(Stat::Max | Stat::Min) => {
            let Some(observed) = scope.value(assertion.metric, assertion.stat) else {
                return false;
            };
            let holds = assertion.op.holds(observed, assertion.threshold);
            // A maximum only grows and a minimum only falls: the outcome is final once it is
            // the one more requests lead to.
            let bounds_from_above = matches!(assertion.op, Op::Lt | Op::Le);
            let grows = assertion.stat == Some(Stat::Max);
            holds != (bounds_from_above == grows)
        }
        _ => {
            let judged = judge_assertion(assertion, Some(scope), Judge::Confidence(judging));
            judged.outcome != Outcome::NotDecided
        }
    }
}

impl Watched {
    /// Takes a finished request; says why the phase ends now, if it does.
    fn finished(
        &mut self,
        record: &RequestRecord,
        slo: Option<&Slo>,
        judging: &Judging,
    ) -> Option<String> {
        if self.ended || !record.completed() {
            return None;
        }
        self.completed += 1;
        self.scope.requests.ok += u64::from(record.error.is_none());
        let good = slo.is_some_and(|slo| metrics::meets(slo, record));
        for (assertion, gathered) in self.assertions.iter().zip(&mut self.gathered) {
            gathered.add(assertion.metric, record, good);
        }
        for &metric in &self.distributions {
            if let Some(distribution) = self.scope.distributions.get_mut(metric) {
                metric.samples(record, false, |value, weight| {
                    distribution.record_n(value, weight)
                });
            }
        }
        let now_us = record.end_us().unwrap_or(record.actual_send_us);
        let ran_us = now_us.saturating_sub(self.started_us?);
        if self.completed % JUDGE_EVERY != 0 || ran_us < self.min_us {
            return None;
        }
        let all_decided = self
            .assertions
            .iter()
            .zip(&self.gathered)
            .all(|(assertion, gathered)| decided(gathered, assertion, &self.scope, judging));
        all_decided.then(|| {
            self.ended = true;
            format!(
                "decided: every assertion on phase \"{}\" was decided after {} requests ({:.1} s)",
                self.name,
                self.completed,
                ran_us as f64 / 1e6
            )
        })
    }
}

impl Observer for DecidedWatch {
    fn on_event(&self, event: Event<'_>) {
        match &event {
            Event::PhaseStarted(start) => {
                if let Ok(mut phases) = self.phases.lock() {
                    if let Some(watched) = phases.get_mut(&start.index) {
                        watched.started_us = Some(start.at_us);
                    }
                }
            }
            Event::RequestFinished(record) => {
                let ended = self.phases.lock().ok().and_then(|mut phases| {
                    let watched = phases.get_mut(&record.phase)?;
                    let reason = watched.finished(record, self.slo.as_ref(), &self.judging)?;
                    Some((watched.control.clone(), reason))
                });
                if let Some((control, reason)) = ended {
                    control.end_early(reason.clone());
                    self.inner.on_event(Event::Note(&reason));
                }
            }
            _ => {}
        }
        self.inner.on_event(event);
    }
}
