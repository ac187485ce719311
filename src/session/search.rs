//! Running a plan's capacity search: the executor's [`PhaseSource`] that probes one load at a
//! time, and the [`Observer`] that ends a probe early once it has failed for certain.
//!
//! Between probes, the source reads the run's records back (every record of the probe is
//! written by then), computes the probe's metrics exactly as the report does, judges it with
//! [`verdict::judge_step`], and asks [`search::next`] for the next load. The report replays the
//! same judgement from the same records, so the bracket it states is the one the search saw.
//!
//! While a probe runs, [`ProbeWatch`] ends it early (its requests in flight cancelled) when it
//! cannot pass any more: more requests already missed an objective than the objective allows
//! of all the probe's planned requests, or its window shows saturation (requests in flight
//! still growing). Either is recorded as the probe's `ended_early` reason, which fails it.
//!
//! It chooses no load itself ([`search`] does) and judges nothing itself ([`verdict`] does).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::executor::{Between, Event, Observer, PhaseControl, PhaseRun, PhaseSource};
use crate::metrics::table::{Better, Source};
use crate::metrics::{self, profile};
use crate::plan::{Assertion, Op, Search, Slo, Stat};
use crate::planner::search::{self, ProbeResult};
use crate::planner::Schedule;
use crate::records::{LogLine, RequestRecord, SearchEnd, Stopped};
use crate::verdict;

/// The search's phases: the plan's groups written before it, its probes, then the groups
/// written after it.
pub(super) struct SearchSource {
    schedule: Arc<Schedule>,
    before: VecDeque<Vec<usize>>,
    after: VecDeque<Vec<usize>>,
    spec: Search,
    objectives: Vec<Assertion>,
    slo: Option<Slo>,
    watch: Arc<ProbeWatch>,
    results: Vec<ProbeResult>,
    started: Option<Instant>,
    /// The phase index of the next phase compiled.
    next_index: usize,
    /// The measured phase of the probe that ran last, and its load, until it is judged.
    pending: Option<(usize, f64)>,
    /// A probe's measured group, after its warmup's (a closed loop's warmup drains first).
    queued: Option<Vec<PhaseRun>>,
    /// How long the server's rate-limit budgets take to be whole again, after a probe that
    /// went over them: waited out before the next probe, so that it does not start with a
    /// budget the last one spent.
    refill: Option<std::time::Duration>,
    done: bool,
}

impl SearchSource {
    pub fn new(
        schedule: Arc<Schedule>,
        objectives: Vec<Assertion>,
        slo: Option<Slo>,
        watch: Arc<ProbeWatch>,
    ) -> Option<SearchSource> {
        let search = schedule.search.as_ref()?;
        let spec = search.spec.clone();
        let mut before: VecDeque<Vec<usize>> = schedule.groups().into();
        let after = before.split_off(search.after_group.min(before.len()));
        Some(SearchSource {
            next_index: schedule.phases.len(),
            schedule,
            before,
            after,
            spec,
            objectives,
            slo,
            watch,
            results: Vec::new(),
            started: None,
            pending: None,
            queued: None,
            refill: None,
            done: false,
        })
    }

    fn plan_group(&self, group: Vec<usize>) -> Vec<PhaseRun> {
        group
            .into_iter()
            .filter_map(|index| self.schedule.phases.get(index))
            .map(|phase| PhaseRun::new(phase.clone()))
            .collect()
    }

    /// Judges the probe that ran last, from the records.
    fn judge_pending(&mut self, between: &Between) -> crate::error::Result<()> {
        let Some((index, load)) = self.pending.take() else {
            return Ok(());
        };
        let (log, aggregates) = metrics::compute_file(between.records_path(), self.slo.as_ref())?;
        // The aggregates' phases are in the order the log's phases started.
        let phase = log
            .phases
            .iter()
            .position(|p| p.index == index)
            .and_then(|position| aggregates.phases.get(position))
            .ok_or_else(|| {
                crate::error::Error::run(format!("the records of probe phase {index} are missing"))
            })?;
        let judged = verdict::judge_step(&self.objectives, phase)
            .ok_or_else(|| crate::error::Error::run(format!("phase {index} is not a probe")))?;
        self.refill = phase
            .over_limits
            .as_ref()
            .and(phase.budget_refill_s)
            .filter(|s| s.is_finite() && *s > 0.0)
            .map(|s| std::time::Duration::from_secs_f64(s.min(MAX_REFILL_WAIT.as_secs_f64())));
        self.results.push(ProbeResult {
            load,
            passed: judged.passed,
            marginal: judged.marginal,
            client_limited: judged.client_limited.is_some(),
        });
        self.watch
            .note(&format!("{}: {}", judged.phase, judged.outcome()));
        Ok(())
    }

    /// The next probe's first group, or why the search is over. An open loop's warmup and
    /// measured window run in one group, the window from the warmup's end, its arrivals
    /// continuing the warmup's; a closed loop's warmup is a group of its own, drained before
    /// the window starts (else the window would start with twice its users in flight).
    fn next_probe(&mut self, between: &Between) -> Result<Vec<PhaseRun>, Stopped> {
        let started = *self.started.get_or_insert_with(Instant::now);
        let load = search::next(&self.spec, &self.results, started.elapsed())?;
        if !self.wait_for_refill(between) {
            return Err(Stopped::Interrupted);
        }
        let number = self.results.len() + 1;
        let mut group = Vec::new();
        let mut offset = std::time::Duration::ZERO;
        // Two group numbers per probe: its warmup's, and its window's when they run apart.
        let group_number = self.schedule.groups().len() + 2 * number;
        if self.spec.warmup.is_some_and(|w| !w.is_zero()) {
            let mut warmup = self
                .schedule
                .probe(self.next_index, number, load, true)
                .map_err(|_| Stopped::Interrupted)?;
            self.next_index += 1;
            warmup.group = group_number;
            offset = warmup.duration.unwrap_or_default();
            group.push(PhaseRun::new(Arc::new(warmup)));
        }
        let mut measured = self
            .schedule
            .probe(self.next_index, number, load, false)
            .map_err(|_| Stopped::Interrupted)?;
        let closed_loop = !measured.load_model.is_open_loop();
        measured.group = group_number + usize::from(closed_loop && !group.is_empty());
        measured.offset = if closed_loop {
            std::time::Duration::ZERO
        } else {
            offset
        };
        let control = PhaseControl::new();
        self.watch
            .arm(&measured, control.clone(), &self.objectives, self.slo);
        self.pending = Some((self.next_index, load));
        self.next_index += 1;
        let measured = PhaseRun {
            phase: Arc::new(measured),
            control,
        };
        if closed_loop && !group.is_empty() {
            self.queued = Some(vec![measured]);
        } else {
            group.push(measured);
        }
        Ok(group)
    }
}

/// The longest a search waits for a server's rate-limit budgets to refill between probes (a
/// provider's reset is at most a minute's; a day's budget is not waited for).
const MAX_REFILL_WAIT: std::time::Duration = std::time::Duration::from_secs(120);

impl SearchSource {
    /// Waits, after a probe that went over the server's rate limits, until its budgets are
    /// whole again (as its last answer said), within the search's time budget, saying so;
    /// whether the run goes on (not asked to stop meanwhile).
    fn wait_for_refill(&mut self, between: &Between) -> bool {
        let Some(refill) = self.refill.take() else {
            return true;
        };
        let elapsed = self.started.map(|s| s.elapsed()).unwrap_or_default();
        let wait = refill.min(self.spec.max_duration.saturating_sub(elapsed));
        if wait.is_zero() {
            return true;
        }
        self.watch.note(&format!(
            "waiting {:.1} s for the server's rate-limit budgets to refill (the last probe went \
             over them) before the next probe",
            wait.as_secs_f64()
        ));
        between.pause(wait)
    }
}

impl PhaseSource for SearchSource {
    fn next_group(&mut self, between: &Between) -> Option<Vec<PhaseRun>> {
        if let Some(group) = self.before.pop_front() {
            return Some(self.plan_group(group));
        }
        if let Some(group) = self.queued.take() {
            return Some(group);
        }
        if !self.done {
            self.watch.disarm();
            let next = match self.judge_pending(between) {
                Ok(()) => self.next_probe(between),
                Err(problem) => {
                    self.watch.warn(&format!(
                        "the capacity search stopped: {problem}; its bracket is what it had found"
                    ));
                    Err(Stopped::Interrupted)
                }
            };
            match next {
                Ok(group) => return Some(group),
                Err(stopped) => {
                    self.done = true;
                    between.log(LogLine::SearchEnd(SearchEnd {
                        name: self.spec.name.clone(),
                        stopped,
                        at_us: between.now_us(),
                    }));
                }
            }
        }
        let group = self.after.pop_front()?;
        Some(self.plan_group(group))
    }
}

/// How often, at most, a running probe is checked for saturation (in µs of its window).
const CHECK_EVERY_US: u64 = 50_000;
/// A probe is checked for saturation only after this share of its window: earlier, a queue
/// filling up to its steady level looks like one that never stops growing.
const CHECK_AFTER: f64 = 0.4;

/// Watches the running probe, and ends it early once it has failed for certain. Sits between
/// the executor and the caller's observer, passing every event on.
pub(super) struct ProbeWatch {
    inner: Arc<dyn Observer>,
    armed: Mutex<Option<Armed>>,
}

/// The probe being watched.
struct Armed {
    index: usize,
    control: PhaseControl,
    window_us: Option<u64>,
    planned: Option<u64>,
    open_loop: bool,
    objectives: Vec<Tally>,
    slo: Option<Slo>,
    /// Set when the phase starts.
    started: Option<(Instant, u64)>,
    sent: u64,
    finished: u64,
    /// The last time the in-flight level changed (µs from the phase's start).
    level_since_us: u64,
    profile: profile::ProfileBuilder,
    checked_at_us: u64,
}

/// One objective's misses so far, for the certain-failure rule.
struct Tally {
    objective: Assertion,
    misses: u64,
}

impl ProbeWatch {
    pub fn new(inner: Arc<dyn Observer>) -> ProbeWatch {
        ProbeWatch {
            inner,
            armed: Mutex::new(None),
        }
    }

    fn arm(
        &self,
        phase: &crate::planner::PhaseSchedule,
        control: PhaseControl,
        objectives: &[Assertion],
        slo: Option<Slo>,
    ) {
        let armed = Armed {
            index: phase.index,
            control,
            window_us: phase.duration.map(|d| d.as_micros() as u64),
            planned: (!phase.open_ended).then_some(phase.requests.len() as u64),
            open_loop: phase.load_model.is_open_loop(),
            objectives: objectives
                .iter()
                .map(|o| Tally {
                    objective: o.clone(),
                    misses: 0,
                })
                .collect(),
            slo,
            started: None,
            sent: 0,
            finished: 0,
            level_since_us: 0,
            profile: profile::ProfileBuilder::new(0),
            checked_at_us: 0,
        };
        if let Ok(mut slot) = self.armed.lock() {
            *slot = Some(armed);
        }
    }

    fn disarm(&self) {
        if let Ok(mut slot) = self.armed.lock() {
            *slot = None;
        }
    }

    fn warn(&self, message: &str) {
        self.inner.on_event(Event::Warning(message));
    }

    fn note(&self, message: &str) {
        self.inner.on_event(Event::Note(message));
    }
}

impl Armed {
    fn now_us(&self) -> u64 {
        self.started
            .map_or(0, |(at, _)| at.elapsed().as_micros() as u64)
    }

    /// Moves the in-flight level's time forward to now.
    fn advance(&mut self) -> u64 {
        let now = self.now_us();
        let level = self.sent.saturating_sub(self.finished) as f64;
        self.profile.add_in_flight(self.level_since_us, now, level);
        self.level_since_us = now;
        now
    }

    /// Why the probe has already failed, if it has.
    fn failed(&mut self, now_us: u64) -> Option<String> {
        if let Some(planned) = self.planned {
            for tally in &self.objectives {
                if let Some(allowed) = allowed_misses(&tally.objective, planned) {
                    if tally.misses as f64 > allowed {
                        return Some(format!(
                            "`{}` cannot hold any more: {} of its {planned} planned requests already missed it",
                            tally.objective.text, tally.misses
                        ));
                    }
                }
            }
        }
        let window = self.window_us?;
        if now_us < (window as f64 * CHECK_AFTER) as u64
            || now_us < self.checked_at_us + CHECK_EVERY_US
        {
            return None;
        }
        self.checked_at_us = now_us;
        profile::runaway(&self.profile.windows(now_us), self.open_loop)
    }

    fn count(&mut self, record: &RequestRecord) {
        if !record.completed() {
            return;
        }
        let send_us = self
            .started
            .map_or(0, |(_, at_us)| record.actual_send_us.saturating_sub(at_us));
        let in_flight_us = record
            .end_us()
            .map(|end| end.saturating_sub(record.actual_send_us));
        self.profile
            .add_outcome(send_us, metrics::ttft_ms(record), in_flight_us);
        for tally in &mut self.objectives {
            if misses(&tally.objective, record, self.slo.as_ref()) {
                tally.misses += 1;
            }
        }
    }
}

/// How many of `planned` requests may miss `objective` before it cannot hold whatever the rest
/// do; `None` when misses alone cannot decide it (a mean, a bound on the good side, a metric
/// the table does not count request by request).
fn allowed_misses(objective: &Assertion, planned: u64) -> Option<f64> {
    let def = objective.metric.def();
    if !def.uses.early_end {
        return None;
    }
    let planned = planned as f64;
    let below = matches!(objective.op, Op::Lt | Op::Le);
    match (def.source, def.better, objective.stat) {
        (Source::Distribution { .. }, Better::Lower, Some(Stat::Percentile(p))) if below => {
            Some((1.0 - p / 100.0) * planned)
        }
        (Source::Distribution { .. }, Better::Lower, Some(Stat::Max)) if below => Some(0.0),
        (Source::Share { .. }, Better::Lower, None) if below => Some(objective.threshold * planned),
        (Source::Share { .. }, Better::Higher, None) if objective.op == Op::Ge => {
            Some((1.0 - objective.threshold) * planned)
        }
        _ => None,
    }
}

/// Whether `record` counts against `objective` (a value past its threshold, a failure, a
/// request that missed the slo). A small margin keeps the histogram's rounding out of it.
fn misses(objective: &Assertion, record: &RequestRecord, slo: Option<&Slo>) -> bool {
    let def = objective.metric.def();
    match def.source {
        Source::Distribution { .. } => objective
            .metric
            .sample(record, false)
            .is_some_and(|v| v > objective.threshold * 1.002),
        Source::Share { among, counts, .. } => {
            if !among(record) {
                return false;
            }
            let good = slo.is_some_and(|slo| metrics::meets(slo, record));
            // A share that should stay low is missed by the requests it counts; one that
            // should stay high, by those it does not.
            counts(record, good) == (def.better == Better::Lower)
        }
        // Not from one request: no request misses them alone.
        Source::PerSecond { .. }
        | Source::Aggregate(_)
        | Source::Sessions { .. }
        | Source::Server(_)
        | Source::Search => false,
    }
}

impl Observer for ProbeWatch {
    fn on_event(&self, event: Event<'_>) {
        let ended = self.armed.lock().ok().and_then(|mut slot| {
            let armed = slot.as_mut()?;
            match &event {
                Event::PhaseStarted(start) if start.index == armed.index => {
                    armed.started = Some((Instant::now(), start.at_us));
                    None
                }
                Event::RequestSent { phase } if *phase == armed.index => {
                    let now = armed.advance();
                    armed.sent += 1;
                    armed.profile.add_sent(now);
                    armed
                        .failed(now)
                        .map(|reason| (armed.control.clone(), reason))
                }
                Event::RequestFinished(record) if record.phase == armed.index => {
                    armed.advance();
                    armed.finished += 1;
                    armed.count(record);
                    let now = armed.now_us();
                    armed
                        .failed(now)
                        .map(|reason| (armed.control.clone(), reason))
                }
                _ => None,
            }
        });
        if let Some((control, reason)) = ended {
            if control.reason().is_none() {
                control.end_early(reason);
            }
        }
        self.inner.on_event(event);
    }
}
