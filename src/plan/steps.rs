//! `sweep` and `search`: phases that are steps of a series, and the capacity search.

use std::time::Duration;

use super::{Arrivals, Load, LoadUnit};

/// A phase that is one step of a sweep (or one probe of a search).
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    /// The sweep's (or search's) name.
    pub series: String,
    /// The step's load, in `unit`.
    pub load_value: f64,
    /// What the load counts.
    pub unit: LoadUnit,
    /// The unrecorded warmup before the step's measured window.
    pub warmup: bool,
}

/// `search`: the highest load at which the objectives hold, found by probing.
#[derive(Debug, Clone, PartialEq)]
pub struct Search {
    /// Its name (probes are named after it).
    pub name: String,
    /// Rate or concurrency.
    pub unit: LoadUnit,
    /// How an open loop's arrivals are spread.
    pub arrivals: Arrivals,
    /// The lowest load probed.
    pub low: f64,
    /// The highest load probed.
    pub high: f64,
    /// The search stops when the bracket is this narrow: (fails − sustains) / sustains.
    pub precision: f64,
    /// The most probes it runs (repeats included).
    pub max_probes: u32,
    /// The longest it runs.
    pub max_duration: Duration,
    /// An unrecorded warmup at the probe's load before each probe.
    pub warmup: Option<Duration>,
    /// Each probe's measured window.
    pub duration: Duration,
    /// What a probe must meet to pass.
    pub objective: Objective,
    /// It runs after this many of the plan's phases (where it is written).
    pub position: usize,
    /// The server's caches are reset before each probe (its warmup, if it has one).
    pub reset_cache: bool,
    /// The agent sessions a search of concurrent sessions replays (its `sessions` node).
    pub sessions: Option<super::sessions::Sessions>,
}

impl Search {
    /// Its load at `value` (a probe's): `None` only for a search of sessions without its file.
    pub fn load_at(&self, value: f64) -> Option<Load> {
        Load::in_unit(self.unit, value, self.arrivals, self.sessions.as_ref())
    }
}

/// What a sweep's step or a search's probe must meet.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Objective {
    /// The plan's `sla` assertions that name no phase.
    Sla,
    /// At least this share of requests meet the plan's `slo` (DistServe's goodput attainment).
    Attainment(f64),
}
