//! Where a run's phases come from, one group at a time.
//!
//! A fixed schedule's groups are known before the run ([`ScheduleSource`]); a capacity search
//! decides its next probe from the records of the last, so the executor asks its
//! [`PhaseSource`] for the next group only once the previous one has ended, drained where its
//! phases ask, and every one of its records has been written and observed.
//!
//! It decides nothing about loads or verdicts: a source that searches lives with its caller
//! (`session`), and only hands the executor phases to run.

use std::collections::VecDeque;
use std::sync::Arc;

use tokio::sync::watch;

use super::Context;
use crate::planner::{PhaseSchedule, Schedule};
use crate::records::LogLine;

/// Gives the executor its phases, one group (phases that run together) at a time.
pub trait PhaseSource: Send {
    /// The next group, or `None` when the run has no more phases. Called once the group
    /// before has ended (drained where its phases ask) and its records are all written to the
    /// records file and handed to the observer. May block (it runs on a blocking thread).
    fn next_group(&mut self, run: &Between) -> Option<Vec<PhaseRun>>;
}

/// One phase of a group, and the handle that ends it early.
pub struct PhaseRun {
    /// The phase; it starts at its `offset` from the group's start.
    pub phase: Arc<PhaseSchedule>,
    /// Its source's way to end it before its planned end.
    pub control: PhaseControl,
}

impl PhaseRun {
    /// A phase its source never ends early.
    pub fn new(phase: Arc<PhaseSchedule>) -> PhaseRun {
        PhaseRun {
            phase,
            control: PhaseControl::new(),
        }
    }
}

/// Ends one phase before its planned end: it stops sending, and its requests in flight are
/// cancelled (recorded as `cancelled`, with the reason). Cheap to clone.
#[derive(Clone)]
pub struct PhaseControl {
    reason: Arc<watch::Sender<Option<String>>>,
}

impl Default for PhaseControl {
    fn default() -> Self {
        PhaseControl::new()
    }
}

impl PhaseControl {
    /// A handle no one has pulled.
    pub fn new() -> PhaseControl {
        PhaseControl {
            reason: Arc::new(watch::channel(None).0),
        }
    }

    /// Ends the phase now, for `reason` (the first reason given is kept).
    pub fn end_early(&self, reason: String) {
        self.reason.send_if_modified(|current| {
            if current.is_some() {
                return false;
            }
            *current = Some(reason);
            true
        });
    }

    /// Why the phase was ended early, if it was.
    pub fn reason(&self) -> Option<String> {
        self.reason.borrow().clone()
    }

    pub(super) fn subscribe(&self) -> watch::Receiver<Option<String>> {
        self.reason.subscribe()
    }
}

/// What a source may see and do between groups: the run's clock and its log.
pub struct Between {
    pub(super) context: Arc<Context>,
}

impl Between {
    /// Microseconds since the run started (the records' clock).
    pub fn now_us(&self) -> u64 {
        self.context.micros(tokio::time::Instant::now())
    }

    /// Appends a line to the run's records.
    pub fn log(&self, line: LogLine) {
        self.context.log(line);
    }

    /// Waits `wait` before the next group (on the source's blocking thread), unless the run is
    /// asked to stop meanwhile; whether it waited it out.
    pub fn pause(&self, wait: std::time::Duration) -> bool {
        let end = std::time::Instant::now() + wait;
        while !self.context.stop.is_stopping() {
            let left = end.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return true;
            }
            // A stop is noticed within 50 ms.
            std::thread::sleep(left.min(std::time::Duration::from_millis(50)));
        }
        false
    }

    /// The records file (complete up to this moment).
    pub fn records_path(&self) -> &std::path::Path {
        &self.context.records_path
    }
}

/// The groups of a fixed schedule, in order.
pub struct ScheduleSource {
    schedule: Arc<Schedule>,
    groups: VecDeque<Vec<usize>>,
    /// The controls of phases something else may end early (by phase index): a phase that
    /// ends once decided.
    controls: std::collections::HashMap<usize, PhaseControl>,
}

impl ScheduleSource {
    /// Every group of `schedule`.
    pub fn new(schedule: Arc<Schedule>) -> ScheduleSource {
        ScheduleSource::groups(schedule.clone(), schedule.groups())
    }

    /// The given groups of `schedule` (lists of phase indices), in order.
    pub fn groups(schedule: Arc<Schedule>, groups: Vec<Vec<usize>>) -> ScheduleSource {
        ScheduleSource {
            schedule,
            groups: groups.into(),
            controls: Default::default(),
        }
    }

    /// Runs each phase in `controls` (by index) under its control, for whoever holds its clone
    /// to end it early.
    pub fn with_controls(
        mut self,
        controls: std::collections::HashMap<usize, PhaseControl>,
    ) -> ScheduleSource {
        self.controls = controls;
        self
    }
}

impl PhaseSource for ScheduleSource {
    fn next_group(&mut self, _: &Between) -> Option<Vec<PhaseRun>> {
        let group = self.groups.pop_front()?;
        Some(
            group
                .into_iter()
                .filter_map(|index| self.schedule.phases.get(index))
                .map(|phase| PhaseRun {
                    phase: phase.clone(),
                    control: self.controls.get(&phase.index).cloned().unwrap_or_default(),
                })
                .collect(),
        )
    }
}
