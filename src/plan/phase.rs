//! `phase`: one stretch of load (its shape is [`super::Load`]), its length, whether it is
//! recorded, and what it runs alongside.

use std::time::Duration;

use super::{Load, Step};

/// One phase of the run. Phases run in order.
#[derive(Debug, Clone)]
pub struct Phase {
    /// Unique in the plan; assertions name phases by it.
    pub name: String,
    /// Closed loop, open loop or burst.
    pub load: Load,
    /// The phase stops sending at this time.
    pub duration: Option<Duration>,
    /// The phase stops after this many requests.
    pub max_requests: Option<u64>,
    /// `record #false` keeps a phase (a warmup) out of metrics and verdicts.
    pub record: bool,
    /// Starts alongside an earlier phase (at an offset from its start), instead of after the
    /// phases before it.
    pub with: Option<StartWith>,
    /// The step of a sweep this phase is, if it is one.
    pub step: Option<Step>,
    /// The next phase waits until this phase's requests in flight have finished (a burst, a
    /// sweep's step): its latency is its own, and the next one's is not shifted by it.
    pub drain: bool,
    /// The model its requests ask for, instead of the target's.
    pub model: Option<String>,
    /// The server its requests go to (a base URL), instead of the target's.
    pub endpoint: Option<String>,
    /// The API its requests speak, instead of the target's (two dialects compared in one run).
    pub api: Option<crate::api::Api>,
    /// The server's caches (its prefix cache) are reset before it starts: a cold cache.
    pub reset_cache: bool,
    /// `duration "10m" until="decided" min="30s"`: the phase ends as soon as every assertion on
    /// it is decided, never before this minimum; its `duration` is then its maximum.
    pub until_decided: Option<Duration>,
}

impl Phase {
    /// A phase of `load` that starts after the ones before it and does not wait for its
    /// requests to drain (bursts do).
    pub fn new(name: impl Into<String>, load: Load) -> Phase {
        let drain = load.drains();
        Phase {
            name: name.into(),
            load,
            duration: None,
            max_requests: None,
            record: true,
            with: None,
            step: None,
            drain,
            model: None,
            endpoint: None,
            api: None,
            reset_cache: false,
            until_decided: None,
        }
    }
}

/// `with "steady" offset="30s"`: a phase that runs alongside another.
#[derive(Debug, Clone, PartialEq)]
pub struct StartWith {
    /// The earlier phase it starts with.
    pub phase: String,
    /// How long after that phase's start it starts.
    pub offset: Duration,
}
