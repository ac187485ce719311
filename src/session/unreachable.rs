//! A target that stops answering is not a slow target: when every request for the target's
//! `unreachable-after` window (5 s unless the plan says otherwise) met a refused or reset
//! connection, or no answer at all, and nothing was heard from the target meanwhile, the run
//! ends at once as not carried out, naming what the requests met and since when.
//!
//! It is an [`Observer`] between the executor and the caller's, like the abort conditions: it
//! sees each request as it finishes. Not for a server that answers with errors (a 500 is an
//! answer: the error rate judges it), nor for one llmload started (its own watch sees it exit
//! or hang, with its log), nor for a server that hangs without a word while requests wait for
//! their timeout (the started server's watch probes for that; an external one is not probed).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::executor::{Event, Observer, Stop};
use crate::records::{ErrorClass, RequestRecord};

/// Fewer failed requests than this in the window are no pattern: a single refused connection
/// after a long quiet is not a dead server.
const FEWEST_FAILURES: u64 = 3;

/// Watches the run for a target that has stopped answering.
pub(super) struct UnreachableWatch {
    window: Duration,
    stop: Stop,
    inner: Arc<dyn Observer>,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// When the run started.
    started: Option<Instant>,
    /// When the first request that heard nothing ended, since the target was last heard.
    silent_since: Option<Instant>,
    /// The requests that heard nothing since then, by class.
    classes: BTreeMap<&'static str, u64>,
    /// What the first of them said.
    first: Option<String>,
    fired: bool,
}

/// Whether a finished request heard anything at all from the target: a status, a token, a
/// success.
fn heard(record: &RequestRecord) -> bool {
    record.error.is_none() || record.http_status.is_some() || !record.chunks.is_empty()
}

/// The failures that say the target is gone rather than slow or erring: a connection refused
/// or reset before any answer, or no answer before the timeout.
fn gone(class: ErrorClass) -> bool {
    match class {
        ErrorClass::Connect | ErrorClass::StreamBroken | ErrorClass::Timeout => true,
        ErrorClass::Http4xx
        | ErrorClass::Http429
        | ErrorClass::Http5xx
        | ErrorClass::HttpOther
        | ErrorClass::StreamError
        | ErrorClass::Overloaded
        | ErrorClass::RateLimited
        | ErrorClass::Malformed
        | ErrorClass::TooLarge
        | ErrorClass::Client
        | ErrorClass::Cancelled => false,
    }
}

impl UnreachableWatch {
    pub fn new(window: Duration, stop: Stop, inner: Arc<dyn Observer>) -> UnreachableWatch {
        UnreachableWatch {
            window,
            stop,
            inner,
            state: Mutex::new(State::default()),
        }
    }

    /// Takes one finished request into account; the reason to stop the run, once.
    fn finished(&self, state: &mut State, record: &RequestRecord, now: Instant) -> Option<String> {
        if heard(record) {
            state.silent_since = None;
            state.classes.clear();
            state.first = None;
            return None;
        }
        let class = record.error.filter(|c| gone(*c))?;
        let since = *state.silent_since.get_or_insert(now);
        *state.classes.entry(class.as_str()).or_default() += 1;
        if state.first.is_none() {
            state.first = record.error_detail.clone();
        }
        let failures: u64 = state.classes.values().sum();
        let silent = now.saturating_duration_since(since);
        if state.fired || failures < FEWEST_FAILURES || silent < self.window {
            return None;
        }
        state.fired = true;
        let from = state
            .started
            .map(|start| since.saturating_duration_since(start).as_secs_f64())
            .unwrap_or(0.0);
        let classes: Vec<String> = state
            .classes
            .iter()
            .map(|(class, n)| format!("{class} {n}"))
            .collect();
        Some(format!(
            "the target stopped answering: from {from:.1} s every request met a refused, reset or \
             unanswered connection ({}) and nothing was heard from it for {:.1} s \
             (unreachable-after {}); the first said: {}",
            classes.join(", "),
            silent.as_secs_f64(),
            crate::plan::units::format_duration(self.window),
            crate::error::shorten(state.first.as_deref().unwrap_or("no detail"))
        ))
    }
}

impl Observer for UnreachableWatch {
    fn on_event(&self, event: Event<'_>) {
        let now = Instant::now();
        let reason = match (&event, self.state.lock()) {
            (Event::RunStarted(_), Ok(mut state)) => {
                state.started = Some(now);
                None
            }
            (Event::RequestFinished(record), Ok(mut state)) => {
                self.finished(&mut state, record, now)
            }
            _ => None,
        };
        self.inner.on_event(event);
        if let Some(reason) = reason {
            self.stop.refuse(reason);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::executor::Quiet;

    fn record(error: Option<ErrorClass>, status: Option<u16>) -> RequestRecord {
        let mut r = RequestRecord::planned(0, 0, None, None, (16, 16), 0, 0, 0);
        r.error = error;
        r.http_status = status;
        r.error_detail = error.map(|_| "connection refused".to_string());
        r
    }

    #[test]
    fn a_window_of_refused_connections_with_nothing_heard_ends_the_run() {
        let stop = Stop::new();
        let watch = UnreachableWatch::new(Duration::from_secs(5), stop.clone(), Arc::new(Quiet));
        let t0 = Instant::now();
        let mut state = State {
            started: Some(t0),
            ..State::default()
        };
        let at = |s: f64| t0 + Duration::from_secs_f64(s);
        let refused = record(Some(ErrorClass::Connect), None);
        // Heard at 4.9 s, refused from 5.1 s: nothing until 10.1 s.
        assert!(watch
            .finished(&mut state, &record(None, Some(200)), at(4.9))
            .is_none());
        for s in [5.1, 6.0, 8.0, 10.0] {
            assert!(watch.finished(&mut state, &refused, at(s)).is_none(), "{s}");
        }
        let why = watch.finished(&mut state, &refused, at(10.2)).unwrap();
        assert!(why.contains("from 5.1 s"), "{why}");
        assert!(why.contains("connect 5"), "{why}");
        assert!(why.contains("connection refused"), "{why}");
        // Once only.
        assert!(watch.finished(&mut state, &refused, at(11.0)).is_none());
    }

    #[test]
    fn an_answer_of_any_kind_restarts_the_window_and_errors_with_a_status_are_answers() {
        let watch = UnreachableWatch::new(Duration::from_secs(5), Stop::new(), Arc::new(Quiet));
        let t0 = Instant::now();
        let mut state = State::default();
        let at = |s: f64| t0 + Duration::from_secs_f64(s);
        let refused = record(Some(ErrorClass::Connect), None);
        let overloaded = record(Some(ErrorClass::Http5xx), Some(503));
        for s in [0.0, 1.0, 2.0, 4.0] {
            assert!(watch.finished(&mut state, &refused, at(s)).is_none());
        }
        // A 503 is the server speaking: the window starts again.
        assert!(watch.finished(&mut state, &overloaded, at(4.5)).is_none());
        for s in [5.0, 6.0, 9.0] {
            assert!(watch.finished(&mut state, &refused, at(s)).is_none());
        }
        assert!(watch.finished(&mut state, &refused, at(10.1)).is_some());
        // Two refusals a long time apart are no pattern.
        let mut state = State::default();
        assert!(watch.finished(&mut state, &refused, at(0.0)).is_none());
        assert!(watch.finished(&mut state, &refused, at(60.0)).is_none());
    }
}
