//! The plan's `abort` conditions, watched while the run goes (as k6's `abortOnFail`): when one
//! holds, the run stops at once, as a failure with its reason.
//!
//! It is an [`Observer`] that sits between the executor and the caller's observer: it counts the
//! recorded requests as they finish, with the same definitions as the report (error rate over
//! completed requests; TTFT of every request that got a first token; E2E and TPOT of the
//! successful), and pulls the run's [`Stop`] with the reason.

use std::sync::{Arc, Mutex};

use crate::executor::{Event, Observer, Stop};
use crate::metrics::{ttft_ms, Distribution, RequestValues};
use crate::plan::{AbortRule, Metric};
use crate::records::ErrorClass;
use crate::verdict::display;

/// Distributions are judged every this many requests (a percentile of a histogram costs more
/// than a counter); rates at every request.
const DISTRIBUTION_EVERY: u64 = 16;

/// Watches the run for the plan's abort conditions.
pub(super) struct AbortWatch {
    rules: Vec<AbortRule>,
    stop: Stop,
    inner: Arc<dyn Observer>,
    state: Mutex<State>,
}

struct State {
    /// Whether each phase (by index) is recorded.
    recorded: Vec<bool>,
    completed: u64,
    failed: u64,
    timeouts: u64,
    ttft: Distribution,
    e2e: Distribution,
    tpot: Distribution,
    fired: bool,
}

impl AbortWatch {
    pub fn new(rules: Vec<AbortRule>, stop: Stop, inner: Arc<dyn Observer>) -> AbortWatch {
        AbortWatch {
            rules,
            stop,
            inner,
            state: Mutex::new(State {
                recorded: Vec::new(),
                completed: 0,
                failed: 0,
                timeouts: 0,
                ttft: Distribution::milliseconds(),
                e2e: Distribution::milliseconds(),
                tpot: Distribution::milliseconds(),
                fired: false,
            }),
        }
    }

    /// The first rule that holds now, with what was observed.
    fn breached(&self, state: &State, distributions_too: bool) -> Option<String> {
        self.rules.iter().find_map(|rule| {
            if state.completed < rule.after {
                return None;
            }
            let condition = &rule.condition;
            let rate = |n: u64| n as f64 / state.completed as f64;
            let observed = match condition.metric {
                Metric::ErrorRate => Some(rate(state.failed)),
                Metric::TimeoutRate => Some(rate(state.timeouts)),
                Metric::Ttft if distributions_too => state.ttft.stat(condition.stat?),
                Metric::E2e if distributions_too => state.e2e.stat(condition.stat?),
                Metric::Tpot if distributions_too => state.tpot.stat(condition.stat?),
                _ => None,
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
                    if state.fired
                        || !recorded
                        || matches!(
                            record.error,
                            Some(ErrorClass::Cancelled | ErrorClass::Client)
                        )
                    {
                        return None;
                    }
                    state.completed += 1;
                    if record.error.is_some() {
                        state.failed += 1;
                    }
                    if record.error == Some(ErrorClass::Timeout) {
                        state.timeouts += 1;
                    }
                    if let Some(ttft) = ttft_ms(record) {
                        state.ttft.record(ttft);
                    }
                    if record.ok() {
                        let values = RequestValues::of(record);
                        if let Some(e2e) = values.e2e_ms {
                            state.e2e.record(e2e);
                        }
                        if let Some(tpot) = values.tpot_ms {
                            state.tpot.record(tpot);
                        }
                    }
                    let reason = self.breached(&state, state.completed % DISTRIBUTION_EVERY == 0);
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
