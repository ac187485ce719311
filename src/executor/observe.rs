//! What a run tells the world while it goes, and how the world stops it.
//!
//! The executor prints nothing. It hands [`Event`]s to an [`Observer`] (the command line's
//! progress line, a sweep's bookkeeping, nothing at all in a test), and it stops when its
//! [`Stop`] handle says so (Ctrl-C, a signal, a failing recorder, a caller's own reason).
//! Observers are called on the executor's own threads: they must be quick and must not block.

use std::sync::{Arc, Mutex};

use tokio::sync::watch;

use crate::records::{PhaseEnd, PhaseStart, RequestRecord, RunEnd, RunHeader};

/// Something that happened in a run.
#[derive(Debug, Clone, Copy)]
pub enum Event<'a> {
    /// The run started, with this header (its target as reports show it).
    RunStarted(&'a RunHeader),
    /// Counters the run keeps current while it goes, for observers that poll them (given once,
    /// right after `RunStarted`).
    Counters(&'a Arc<LiveCounters>),
    /// A phase started sending.
    PhaseStarted(&'a PhaseStart),
    /// A request of phase `phase` went out.
    RequestSent {
        /// The phase's index.
        phase: usize,
    },
    /// A request finished, successfully or not (called on the recorder's thread).
    RequestFinished(&'a RequestRecord),
    /// A phase stopped sending (its requests in flight may finish later).
    PhaseEnded(&'a PhaseEnd),
    /// The run ended.
    RunEnded(&'a RunEnd),
    /// Something that may spoil the run, and is not in the records (a limit of this machine).
    Warning(&'a str),
    /// Something the user should know, and is not in the records.
    Note(&'a str),
    /// How the plan's objectives stand on the requests finished so far (given up to four times
    /// a second while requests finish, by the session's watch: the executor judges nothing).
    Objectives(&'a [Objective]),
}

/// One of the plan's `sla` assertions as it stands while the run goes.
#[derive(Debug, Clone, PartialEq)]
pub struct Objective {
    /// As the plan wrote it (`ttft p99 < 500ms`).
    pub text: String,
    /// Its value so far, as the verdict would write it.
    pub observed: Option<String>,
    /// How it stands.
    pub standing: Standing,
}

/// How an objective stands on the requests so far, judged as the verdict judges.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Standing {
    /// It holds (a percentile: its bound at the plan's confidence holds).
    Holding,
    /// It is broken (a percentile: beyond doubt at the plan's confidence).
    Breaking,
    /// Too few requests yet to say either.
    Open,
    /// Judged only on the phase as it ran (a throughput, the server's telemetry).
    AtTheEnd,
}

impl Standing {
    /// As the terminal writes it.
    pub fn word(self) -> &'static str {
        match self {
            Standing::Holding => "holding",
            Standing::Breaking => "breaking",
            Standing::Open => "not decided yet",
            Standing::AtTheEnd => "judged at the end",
        }
    }
}

/// What a run counts as it goes, readable at any moment.
#[derive(Debug, Default)]
pub struct LiveCounters {
    /// Token-bearing chunks received so far, over the whole run.
    pub chunks: Arc<std::sync::atomic::AtomicU64>,
    /// Requests whose whole response came (any status), over the whole run.
    pub answered: std::sync::atomic::AtomicU64,
    /// Times the client process stalled (its hiccup meter woke 5 ms or more late), and how
    /// long those stalls were, µs: a client that stalls adds its stalls to every latency.
    pub stalls: std::sync::atomic::AtomicU64,
    /// See `stalls`.
    pub stalled_us: std::sync::atomic::AtomicU64,
}

impl LiveCounters {
    /// Grows whenever the server is heard from (a token, a whole response): a server that
    /// llmload started and that stops growing this is not answering anything.
    pub fn heard(&self) -> u64 {
        use std::sync::atomic::Ordering::Relaxed;
        self.chunks.load(Relaxed) + self.answered.load(Relaxed)
    }
}

/// Receives a run's events.
pub trait Observer: Send + Sync {
    /// Called for every event; must not block.
    fn on_event(&self, event: Event<'_>);
}

/// An observer that ignores everything.
pub struct Quiet;

impl Observer for Quiet {
    fn on_event(&self, _: Event<'_>) {}
}

/// Several observers, each given every event in turn (the terminal's, an exporter's).
pub struct Fanout(pub Vec<Arc<dyn Observer>>);

impl Observer for Fanout {
    fn on_event(&self, event: Event<'_>) {
        for observer in &self.0 {
            observer.on_event(event);
        }
    }
}

/// Stops a run: first no new requests (those in flight may finish within the grace period),
/// then, if asked again, every request in flight. Cheap to clone; every clone stops the same
/// run.
#[derive(Clone)]
pub struct Stop {
    sending: Arc<watch::Sender<bool>>,
    in_flight: Arc<watch::Sender<bool>>,
    /// Asked to finish now (a second Ctrl-C): records are written without counting tokens.
    hurry: Arc<std::sync::atomic::AtomicBool>,
    /// Why the plan's abort conditions stopped the run, if they did.
    aborted: Arc<Mutex<Option<String>>>,
    /// Why the target was refused once the run had begun, if it was.
    refused: Arc<Mutex<Option<String>>>,
}

impl Default for Stop {
    fn default() -> Self {
        Stop::new()
    }
}

impl Stop {
    /// A handle no one has pulled yet.
    pub fn new() -> Stop {
        Stop {
            sending: Arc::new(watch::channel(false).0),
            in_flight: Arc::new(watch::channel(false).0),
            hurry: Arc::new(std::sync::atomic::AtomicBool::new(false)),
            aborted: Arc::new(Mutex::new(None)),
            refused: Arc::new(Mutex::new(None)),
        }
    }

    /// No new requests; those in flight may finish within the run's grace period.
    pub fn stop_sending(&self) {
        self.sending.send_replace(true);
    }

    /// Cancel every request in flight now (and send no more).
    pub fn cancel_in_flight(&self) {
        self.sending.send_replace(true);
        self.in_flight.send_replace(true);
    }

    /// Finish now (a second Ctrl-C): every request in flight cancelled, and what the recorder
    /// still holds written at once, its tokens not counted (estimated from bytes instead).
    pub fn finish_now(&self) {
        self.hurry.store(true, std::sync::atomic::Ordering::Relaxed);
        self.cancel_in_flight();
    }

    /// Whether the run was asked to stop sending (by any means).
    pub fn is_stopping(&self) -> bool {
        *self.sending.borrow()
    }

    /// Whether [`Stop::finish_now`] was asked.
    pub fn hurried(&self) -> bool {
        self.hurry.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Stops the run because it is clearly failing (an abort condition held): no new requests,
    /// those in flight cancelled, and `reason` recorded. The run is a failure, not an
    /// interruption. The first reason given is kept.
    pub fn abort(&self, reason: String) {
        if let Ok(mut aborted) = self.aborted.lock() {
            aborted.get_or_insert(reason);
        }
        self.cancel_in_flight();
    }

    /// Stops the run because the target cannot be measured at all (it does not serve the
    /// API's route): no new requests, those in flight cancelled, the run not carried out. The
    /// first reason given is kept.
    pub fn refuse(&self, reason: String) {
        if let Ok(mut refused) = self.refused.lock() {
            refused.get_or_insert(reason);
        }
        self.cancel_in_flight();
    }

    /// Why the target was refused once the run had begun, if it was.
    pub fn refused_reason(&self) -> Option<String> {
        self.refused.lock().ok().and_then(|r| r.clone())
    }

    /// Why the run was aborted, if it was.
    pub fn abort_reason(&self) -> Option<String> {
        self.aborted.lock().ok().and_then(|a| a.clone())
    }

    pub(super) fn sending(&self) -> watch::Receiver<bool> {
        self.sending.subscribe()
    }

    pub(super) fn in_flight(&self) -> watch::Receiver<bool> {
        self.in_flight.subscribe()
    }
}

/// Waits until `rx` turns true.
pub(super) async fn stopped(rx: &mut watch::Receiver<bool>) {
    if rx.wait_for(|v| *v).await.is_err() {
        // The handle is gone: nothing can stop the run any more.
        std::future::pending::<()>().await;
    }
}
