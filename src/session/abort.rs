//! The plan's `abort` conditions, watched while the run goes (as k6's `abortOnFail`): when one
//! holds, the run stops at once, as a failure with its reason.
//!
//! It is an [`Observer`] that sits between the executor and the caller's observer: it counts the
//! recorded requests as they finish, with the same definitions as the report (error rate over
//! completed requests; TTFT of every request that got a first token; E2E and TPOT of the
//! successful), and pulls the run's [`Stop`] with the reason.

use std::sync::{Arc, Mutex};

use super::live::Live;
use crate::executor::{Event, Observer, Stop};
use crate::metrics;
use crate::plan::{AbortRule, Slo};
use crate::verdict::display;

/// Distributions are judged every this many requests (a percentile of a histogram costs more
/// than a counter); rates at every request.
const DISTRIBUTION_EVERY: u64 = 16;

/// Watches the run for the plan's abort conditions.
pub(super) struct AbortWatch {
    rules: Vec<AbortRule>,
    slo: Option<Slo>,
    stop: Stop,
    inner: Arc<dyn Observer>,
    state: Mutex<State>,
}

struct State {
    /// Whether each phase (by index) is recorded.
    recorded: Vec<bool>,
    completed: u64,
    /// What each rule's metric has gathered so far, in the order of the rules.
    watched: Vec<Live>,
    fired: bool,
}

impl AbortWatch {
    pub fn new(
        rules: Vec<AbortRule>,
        slo: Option<Slo>,
        stop: Stop,
        inner: Arc<dyn Observer>,
    ) -> AbortWatch {
        let watched = rules
            .iter()
            .map(|rule| Live::of(rule.condition.metric))
            .collect();
        AbortWatch {
            rules,
            slo,
            stop,
            inner,
            state: Mutex::new(State {
                recorded: Vec::new(),
                completed: 0,
                watched,
                fired: false,
            }),
        }
    }

    /// The first rule that holds now, with what was observed.
    fn breached(&self, state: &State, distributions_too: bool) -> Option<String> {
        self.rules
            .iter()
            .zip(&state.watched)
            .find_map(|(rule, watched)| {
                if state.completed < rule.after {
                    return None;
                }
                let condition = &rule.condition;
                let observed = match watched {
                    Live::Distribution(_) if !distributions_too => None,
                    _ => watched.observed(condition.stat),
                }?;
                condition.op.holds(observed, condition.threshold).then(|| {
                    format!(
                        "{} (observed {} after {} completed requests)",
                        condition.text,
                        display(condition.metric.kind(), observed),
                        state.completed
                    )
                })
            })
    }
}

impl Observer for AbortWatch {
    fn on_event(&self, event: Event<'_>) {
        match &event {
            Event::PhaseStarted(start) => {
                if let Ok(mut state) = self.state.lock() {
                    if state.recorded.len() <= start.index {
                        state.recorded.resize(start.index + 1, false);
                    }
                    state.recorded[start.index] = start.record;
                }
            }
            Event::RequestFinished(record) => {
                let reason = self.state.lock().ok().and_then(|mut state| {
                    let recorded = state.recorded.get(record.phase).copied().unwrap_or(false);
                    if state.fired || !recorded || !record.completed() {
                        return None;
                    }
                    state.completed += 1;
                    let good = self
                        .slo
                        .as_ref()
                        .is_some_and(|slo| metrics::meets(slo, record));
                    let state = &mut *state;
                    for (rule, watched) in self.rules.iter().zip(&mut state.watched) {
                        watched.add(rule.condition.metric, record, good);
                    }
                    let reason = self.breached(state, state.completed % DISTRIBUTION_EVERY == 0);
                    state.fired = reason.is_some();
                    reason
                });
                if let Some(reason) = reason {
                    self.stop.abort(reason.clone());
                    self.inner
                        .on_event(Event::Warning(&format!("aborting the run: {reason}")));
                }
            }
            _ => {}
        }
        self.inner.on_event(event);
    }
}
