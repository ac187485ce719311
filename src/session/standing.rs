//! How the plan's objectives stand while the run goes, for the people watching it: every
//! `sla` assertion judged on the requests finished so far in its scope, as the verdict judges
//! (a percentile by its confidence bounds at the plan's confidence, a share by its 95%
//! interval, a maximum, minimum or mean by its value), handed on up to four times a second as
//! an [`Event::Objectives`].
//!
//! An [`Observer`] between the executor and the caller's, like the abort conditions and the
//! phases that end once decided; it only watches.
//!
//! Not for: the verdict (the records are judged again at the run's end, on the plan's judged
//! window; a standing here counts every finished request of its scope), nor stopping the run.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::live::Live;
use crate::executor::{Event, Objective, Observer, Standing};
use crate::metrics::table::Source;
use crate::metrics::{self, PhaseMetrics};
use crate::plan::{Assertion, Judging, Plan, Slo, Stat};
use crate::records::RequestRecord;
use crate::verdict::{display, judge_assertion, Judge, Outcome};

/// How often the standings are handed on, at most: well within the terminal's second, so what
/// it shows is at most this much older than its counts.
const EVERY: Duration = Duration::from_millis(250);

/// One assertion and what its scope has gathered.
struct Watched {
    assertion: Assertion,
    /// A share's counts (a distribution's values go to `scope`).
    share: Live,
    /// Its scope so far as the verdict's judge reads one: its metric's distribution.
    scope: PhaseMetrics,
}

impl Watched {
    fn new(assertion: &Assertion) -> Watched {
        let share = match assertion.metric.def().source {
            Source::Share { .. } => Live::of(assertion.metric),
            Source::Distribution { .. }
            | Source::PerSecond { .. }
            | Source::Aggregate(_)
            | Source::Sessions { .. }
            | Source::Server(_)
            | Source::Search => Live::Nothing,
        };
        Watched {
            assertion: assertion.clone(),
            share,
            scope: PhaseMetrics::default(),
        }
    }

    fn add(&mut self, record: &RequestRecord, good: bool) {
        let metric = self.assertion.metric;
        self.share.add(metric, record, good);
        if let Some(distribution) = self.scope.distributions.get_mut(metric) {
            metric.samples(record, false, |value, weight| {
                distribution.record_n(value, weight)
            });
        }
    }

    /// How it stands now.
    fn objective(&self, judging: &Judging) -> Objective {
        let a = &self.assertion;
        let kind = a.metric.kind();
        let holds = |v: f64| a.op.holds(v, a.threshold);
        let point = |v: Option<f64>| match v {
            Some(v) if holds(v) => Standing::Holding,
            Some(_) => Standing::Breaking,
            None => Standing::Open,
        };
        let (standing, observed) = match a.metric.def().source {
            Source::Share { .. } => {
                let observed = self.share.observed(None);
                let standing = match (&self.share, observed) {
                    (Live::Share { among, .. }, Some(share)) => {
                        match crate::report::benchmarks::wilson(share, *among) {
                            Some((low, high)) if holds(low) == holds(high) => point(Some(share)),
                            _ => Standing::Open,
                        }
                    }
                    _ => Standing::Open,
                };
                (standing, observed)
            }
            Source::Distribution { .. } => {
                let observed = self.scope.value(a.metric, a.stat);
                let standing = match a.stat {
                    Some(Stat::Percentile(_)) => {
                        let judge = Judge::Confidence(judging);
                        match judge_assertion(a, Some(&self.scope), judge).outcome {
                            Outcome::Pass => Standing::Holding,
                            Outcome::Fail => Standing::Breaking,
                            Outcome::NotDecided => Standing::Open,
                        }
                    }
                    _ => point(observed),
                };
                (standing, observed)
            }
            Source::PerSecond { .. }
            | Source::Aggregate(_)
            | Source::Sessions { .. }
            | Source::Server(_)
            | Source::Search => (Standing::AtTheEnd, None),
        };
        Objective {
            text: a.text.clone(),
            observed: observed.map(|v| display(kind, v)),
            standing,
        }
    }
}

struct State {
    /// The recorded phases' indices, and each started phase's name, by index.
    recorded: HashSet<usize>,
    names: Vec<String>,
    watched: Vec<Watched>,
    last: Option<Instant>,
}

/// Judges the plan's objectives as requests finish and hands on how they stand.
pub(super) struct StandingWatch {
    judging: Judging,
    slo: Option<Slo>,
    inner: Arc<dyn Observer>,
    state: Mutex<State>,
}

impl StandingWatch {
    /// A watch over `plan`'s `sla`; `None` when it has none.
    pub fn new(plan: &Plan, inner: Arc<dyn Observer>) -> Option<StandingWatch> {
        (!plan.sla.is_empty()).then(|| StandingWatch {
            judging: plan.judging,
            slo: plan.slo,
            inner,
            state: Mutex::new(State {
                recorded: HashSet::new(),
                names: Vec::new(),
                watched: plan.sla.iter().map(Watched::new).collect(),
                last: None,
            }),
        })
    }

    /// Takes a finished request; the standings, when they are due.
    fn finished(&self, record: &RequestRecord) -> Option<Vec<Objective>> {
        let mut state = self.state.lock().ok()?;
        if !record.completed() {
            return None;
        }
        let good = self
            .slo
            .as_ref()
            .is_some_and(|slo| metrics::meets(slo, record));
        let recorded = state.recorded.contains(&record.phase);
        let name = state.names.get(record.phase).cloned().unwrap_or_default();
        for watched in &mut state.watched {
            let in_scope = match &watched.assertion.phase {
                Some(phase) => *phase == name,
                None => recorded,
            };
            if in_scope {
                watched.add(record, good);
            }
        }
        if state.last.is_some_and(|last| last.elapsed() < EVERY) {
            return None;
        }
        state.last = Some(Instant::now());
        Some(self.standings(&state))
    }

    fn standings(&self, state: &State) -> Vec<Objective> {
        state
            .watched
            .iter()
            .map(|w| w.objective(&self.judging))
            .collect()
    }
}

impl Observer for StandingWatch {
    fn on_event(&self, event: Event<'_>) {
        match &event {
            Event::PhaseStarted(start) => {
                if let Ok(mut state) = self.state.lock() {
                    if state.names.len() <= start.index {
                        state.names.resize(start.index + 1, String::new());
                    }
                    state.names[start.index].clone_from(&start.name);
                    if start.record {
                        state.recorded.insert(start.index);
                    }
                }
            }
            Event::RequestFinished(record) => {
                self.inner.on_event(event);
                if let Some(standings) = self.finished(record) {
                    self.inner.on_event(Event::Objectives(&standings));
                }
                return;
            }
            Event::RunEnded(_) => {
                let standings = self.state.lock().ok().map(|s| self.standings(&s));
                if let Some(standings) = standings {
                    self.inner.on_event(Event::Objectives(&standings));
                }
            }
            _ => {}
        }
        self.inner.on_event(event);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::executor::Quiet;

    /// Collects the standings handed on.
    #[derive(Default)]
    struct Seen(Mutex<Vec<Vec<Objective>>>);

    impl Observer for Seen {
        fn on_event(&self, event: Event<'_>) {
            if let Event::Objectives(standings) = event {
                self.0.lock().unwrap().push(standings.to_vec());
            }
        }
    }

    fn plan(sla: &str) -> Plan {
        let text = format!("plan \"p\"\ntarget \"sim\"\nworkload {{ input 8; output 4 }}\nphase \"warm\" {{ requests 5; concurrency 1; record #false }}\nphase \"steady\" {{ requests 5; concurrency 1 }}\nsla {{ {sla} }}\n");
        crate::plan::parse_plan("p.kdl", text).unwrap()
    }

    fn record(phase: usize, ttft_ms: u64, failed: bool) -> RequestRecord {
        RequestRecord {
            phase,
            ttft_us: Some(ttft_ms * 1000),
            e2e_us: Some(ttft_ms * 1000 + 10),
            chunks: vec![(ttft_ms * 1000, 1)],
            completion_tokens: Some(1),
            error: failed.then_some(crate::records::ErrorClass::Http5xx),
            http_status: Some(if failed { 500 } else { 200 }),
            ..RequestRecord::default()
        }
    }

    fn start(index: usize, name: &str, record: bool) -> crate::records::PhaseStart {
        serde_json::from_value(serde_json::json!({
            "index": index, "name": name, "record": record, "load": "concurrency 1",
            "open_loop": false, "at_us": 0
        }))
        .expect("a phase start")
    }

    #[test]
    fn objectives_stand_as_the_verdict_judges_them_on_their_scope() {
        let seen = Arc::new(Seen::default());
        let plan = plan("ttft p99 < \"100ms\"; ttft max < \"100ms\"; error-rate < \"50%\"; request-throughput > 1");
        let watch = StandingWatch::new(&plan, seen.clone()).unwrap();
        watch.on_event(Event::PhaseStarted(&start(0, "warm", false)));
        watch.on_event(Event::PhaseStarted(&start(1, "steady", true)));
        // The warmup's slow request is out of scope.
        watch.on_event(Event::RequestFinished(&record(0, 900, false)));
        for _ in 0..400 {
            watch.on_event(Event::RequestFinished(&record(1, 10, false)));
        }
        let first = seen.0.lock().unwrap()[0].clone();
        assert_eq!(first.len(), 4);
        // Handed on at the first request, the warmup's: nothing in scope yet.
        assert_eq!(first[0].standing, Standing::Open, "{first:?}");
        assert_eq!(
            (first[1].standing, first[1].observed.clone()),
            (Standing::Open, None)
        );
        assert_eq!(first[3].standing, Standing::AtTheEnd);
        watch.on_event(Event::RunEnded(&end()));
        let last = seen.0.lock().unwrap().last().unwrap().clone();
        assert_eq!(last[0].standing, Standing::Holding, "{last:?}");
        // The warmup's 900 ms is not the steady phase's maximum.
        assert_eq!(last[1].standing, Standing::Holding);
        assert_eq!(last[1].observed.as_deref(), Some("10.00ms"));
        assert_eq!(last[2].standing, Standing::Holding, "{last:?}");
        assert_eq!(last[2].observed.as_deref(), Some("0.00%"));
    }

    #[test]
    fn a_broken_objective_is_said_breaking() {
        let seen = Arc::new(Seen::default());
        let plan = plan("error-rate < \"1%\"; ttft p50 < \"5ms\"");
        let watch = StandingWatch::new(&plan, seen.clone()).unwrap();
        watch.on_event(Event::PhaseStarted(&start(1, "steady", true)));
        for i in 0..200 {
            watch.on_event(Event::RequestFinished(&record(1, 50, i % 2 == 0)));
        }
        watch.on_event(Event::RunEnded(&end()));
        let last = seen.0.lock().unwrap().last().unwrap().clone();
        assert_eq!(last[0].standing, Standing::Breaking, "{last:?}");
        assert_eq!(last[1].standing, Standing::Breaking, "{last:?}");
        assert!(StandingWatch::new(&plan_without_sla(), Arc::new(Quiet)).is_none());
    }

    fn end() -> crate::records::RunEnd {
        serde_json::from_value(serde_json::json!({"at_us": 1, "interrupted": false}))
            .expect("a run end")
    }

    fn plan_without_sla() -> Plan {
        crate::plan::parse_plan(
            "p.kdl",
            "plan \"p\"\ntarget \"sim\"\nworkload { input 8; output 4 }\nphase \"steady\" { requests 5; concurrency 1 }\n"
                .to_string(),
        )
        .unwrap()
    }
}
