//! The executor: runs a [`Schedule`] against an OpenAI-compatible endpoint and records every
//! request.
//!
//! Open-loop phases (a `rate`) send each request at its intended time whatever the server does,
//! so a slow server never slows the offered load (no coordinated omission); closed-loop phases
//! (`concurrency N`) keep exactly N requests in flight; a burst (`at-once N`) releases N requests
//! together and waits for them. Prompt bodies are built ahead of time on a blocking thread so the
//! pacer only sleeps and sends. Records go to the [`recorder`] thread, which appends them to
//! `records.jsonl` as requests finish.
//!
//! It does not aggregate or judge anything: that is [`crate::metrics`] and [`crate::verdict`].

pub mod api;
mod observe;
pub mod recorder;
pub mod request;
pub mod resources;
pub mod sse;

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::{mpsc, watch, Notify};
use tokio::time::Instant;

use crate::error::{Error, Result};
use crate::plan::Load;
use crate::planner::{PhaseSchedule, PromptSource, Schedule, ScheduledRequest};
use crate::records::{ErrorClass, LogLine, PhaseEnd, PhaseStart, RunEnd, RunHeader, RunLine};
use crate::timer::PreciseTimer;
use crate::tokens::Tokenizer;
use observe::stopped;
pub use observe::{Event, Observer, Quiet, Stop};
use recorder::{Finished, Message, Recorder};
use request::Exchange;
pub use request::RequestTemplate;

/// How many prompt bodies are built ahead of the pacer.
const BODIES_AHEAD: usize = 512;

/// Everything a run needs besides its schedule.
pub struct RunConfig {
    /// How each request is spoken.
    pub template: RequestTemplate,
    /// Where each request's prompt comes from.
    pub prompts: Arc<dyn PromptSource>,
    /// Counts tokens where the server gives no usage.
    pub tokenizer: Arc<Tokenizer>,
    /// The run's context, written as the first line of the records.
    pub header: RunHeader,
    /// Where the records go.
    pub records_path: PathBuf,
    /// How long in-flight requests may finish after sending stops early, before they are
    /// cancelled.
    pub grace: Duration,
    /// The async runtime's worker threads, if set (for how many cores the client may use).
    pub worker_threads: Option<usize>,
    /// Kept out of every record (the API key, secret headers).
    pub secrets: Arc<crate::secrets::Secrets>,
    /// Told what happens as it happens.
    pub observer: Arc<dyn Observer>,
    /// Stops the run early.
    pub stop: Stop,
}

/// Requests in flight, and a way to wait until there are none.
#[derive(Default)]
struct InFlight {
    count: AtomicUsize,
    drained: Notify,
}

impl InFlight {
    fn enter(&self) {
        self.count.fetch_add(1, Ordering::SeqCst);
    }
    fn leave(&self) {
        if self.count.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.drained.notify_waiters();
        }
    }
    async fn wait_empty(&self) {
        loop {
            let notified = self.drained.notified();
            if self.count.load(Ordering::SeqCst) == 0 {
                return;
            }
            notified.await;
        }
    }
}

struct Context {
    client: reqwest::Client,
    template: RequestTemplate,
    prompts: Arc<dyn PromptSource>,
    run_start: Instant,
    records: std::sync::mpsc::Sender<Message>,
    observer: Arc<dyn Observer>,
    /// Requests sent, per phase.
    sent: Vec<AtomicU64>,
    abort: watch::Receiver<bool>,
    in_flight: InFlight,
    /// Open-loop sends are paced on it: tokio's 1 ms timer would add up to 1 ms of lag.
    timer: PreciseTimer,
    cpu: Option<resources::CpuMonitor>,
}

impl Context {
    fn micros(&self, at: Instant) -> u64 {
        at.saturating_duration_since(self.run_start).as_micros() as u64
    }

    fn log(&self, line: LogLine) {
        let _ = self.records.send(Message::Line(Box::new(line)));
    }
}

/// Runs every phase of `schedule` in order, writing the run's log to `config.records_path`.
/// Returns once every record is written; an error when the run could not be carried out (the
/// records could not be written, the HTTP client or a thread could not start).
pub async fn run(schedule: Arc<Schedule>, config: RunConfig) -> Result<()> {
    let pool = pool_size(&schedule, config.template.timeout);
    if let Some(notice) = check_open_files(&schedule, pool)? {
        config.observer.on_event(Event::Warning(&notice));
    }
    let client = reqwest::Client::builder()
        .tcp_nodelay(true)
        .pool_max_idle_per_host(pool)
        .connect_timeout(config.template.timeout.min(Duration::from_secs(10)))
        .build()
        .map_err(|e| Error::run(format!("cannot build the HTTP client: {e}")))?;
    let recorder = Recorder::start(
        &config.records_path,
        config.tokenizer.clone(),
        config.secrets.clone(),
        config.observer.clone(),
        config.stop.clone(),
    )?;
    let stop = config.stop.clone();
    let context = Arc::new(Context {
        client,
        template: config.template.clone(),
        prompts: config.prompts.clone(),
        run_start: Instant::now(),
        records: recorder.sender(),
        observer: config.observer.clone(),
        sent: schedule.phases.iter().map(|_| AtomicU64::new(0)).collect(),
        abort: stop.in_flight(),
        in_flight: InFlight::default(),
        timer: PreciseTimer::start()
            .map_err(|e| Error::run(format!("cannot start the pacing timer: {e}")))?,
        cpu: resources::CpuMonitor::start(resources::client_cores(config.worker_threads)),
    });
    let mut header = config.header.clone();
    header.clock_origin_ns = crate::clock::monotonic_ns(context.run_start.into_std());
    context.observer.on_event(Event::RunStarted(&header));
    context.log(LogLine::Run(RunLine::current(header)));

    let sending = stop.sending();
    for phase in &schedule.phases {
        if *sending.borrow() {
            break;
        }
        run_phase(&context, &schedule, phase, sending.clone()).await;
    }

    // Let in-flight requests finish; after an early stop, only for the grace period.
    let mut stop_wait = sending.clone();
    tokio::select! {
        _ = context.in_flight.wait_empty() => {}
        _ = stopped(&mut stop_wait) => {
            tokio::select! {
                _ = context.in_flight.wait_empty() => {}
                _ = tokio::time::sleep(config.grace) => {}
                _ = async { let mut a = context.abort.clone(); stopped(&mut a).await } => {}
            }
            stop.cancel_in_flight();
            context.in_flight.wait_empty().await;
        }
    }
    let aborted = stop.abort_reason();
    let end = RunEnd {
        at_us: context.micros(Instant::now()),
        interrupted: *sending.borrow() && aborted.is_none(),
        aborted,
        client_peak_rss_bytes: resources::peak_rss_bytes(),
    };
    context.observer.on_event(Event::RunEnded(&end));
    context.log(LogLine::RunEnd(end));
    drop(context);
    // The report is built from the file, exactly as `llmload report DIR` rebuilds it.
    recorder.finish()
}

/// Raises the open-file limit, and refuses a plan that must hold more connections at once than
/// the system allows (a closed loop or a burst larger than the limit).
fn check_open_files(schedule: &Schedule, pool: usize) -> Result<Option<String>> {
    let Some(limit) = resources::raise_open_file_limit() else {
        return Ok(None);
    };
    // Besides connections: the records file, the tokenizer, stdio, the runtime's own.
    const SPARE: u64 = 64;
    let certain = schedule
        .phases
        .iter()
        .map(|p| match p.load_model {
            Load::Concurrency(n) | Load::AtOnce(n) => n as u64,
            Load::Rate { .. } => 0,
        })
        .max()
        .unwrap_or(0);
    if certain + SPARE > limit {
        return Err(Error::run(format!(
            "the plan holds {certain} requests in flight at once, but this process may open only {limit} files \
             (its hard limit): raise it, e.g. `ulimit -n {}` (or LimitNOFILE in a systemd unit, nofile in \
             /etc/security/limits.conf), then run again",
            certain + SPARE
        )));
    }
    if pool as u64 + SPARE > limit {
        return Ok(Some(format!(
            "at its peak rate the plan may hold up to {pool} requests in flight, but this process may \
             open only {limit} files; requests beyond that fail to connect (raise it with `ulimit -n`)"
        )));
    }
    Ok(None)
}

/// Idle connections to keep per host: the most requests the plan may have in flight, bounded.
fn pool_size(schedule: &Schedule, timeout: Duration) -> usize {
    let most = schedule
        .phases
        .iter()
        .map(|p| match &p.load_model {
            Load::Concurrency(n) | Load::AtOnce(n) => *n as f64,
            Load::Rate { rate, .. } => {
                let peak = match rate {
                    crate::plan::RateShape::Constant(r) => *r,
                    crate::plan::RateShape::Ramp { from, to } => from.max(*to),
                };
                peak * timeout.as_secs_f64().min(60.0)
            }
        })
        .fold(1.0, f64::max);
    (most.ceil() as usize).clamp(1, 4096)
}

/// Builds request bodies on a blocking thread, ahead of the sender. Sends `primed` once the first
/// batch is ready, so that the phase clock starts with bodies in hand.
fn spawn_body_builder(
    context: &Arc<Context>,
    schedule: &Arc<Schedule>,
    phase: &PhaseSchedule,
) -> (
    mpsc::Receiver<(ScheduledRequest, Bytes)>,
    tokio::sync::oneshot::Receiver<()>,
) {
    let (tx, rx) = mpsc::channel(BODIES_AHEAD);
    let (primed_tx, primed_rx) = tokio::sync::oneshot::channel();
    let prompts = context.prompts.clone();
    let template = context.template.clone();
    let index = phase.index;
    // A materialized phase ends with its list; an open-ended one goes on until its receiver goes.
    let limit = (!phase.open_ended).then_some(phase.requests.len() as u64);
    let schedule = schedule.clone();
    tokio::task::spawn_blocking(move || {
        let mut primed = Some(primed_tx);
        // The phase starts with the channel full, so that building bodies does not burst at its
        // start (competing with sending and reading for the cores) but keeps pace with the sends.
        let prime_after = limit.map_or(BODIES_AHEAD, |n| (n as usize).min(BODIES_AHEAD));
        let mut built = 0usize;
        let mut seq = 0u64;
        loop {
            if limit.is_some_and(|n| seq >= n) {
                break;
            }
            let request = schedule.request(index, seq);
            seq += 1;
            let prompt = prompts.prompt(&request);
            let body = template.body(&prompt, request.output_tokens);
            if tx.blocking_send((request, body)).is_err() {
                break;
            }
            built += 1;
            if built >= prime_after {
                if let Some(p) = primed.take() {
                    let _ = p.send(());
                }
            }
        }
        if let Some(p) = primed.take() {
            let _ = p.send(());
        }
    });
    (rx, primed_rx)
}

async fn run_phase(
    context: &Arc<Context>,
    schedule: &Arc<Schedule>,
    phase: &PhaseSchedule,
    mut cancel: watch::Receiver<bool>,
) {
    let (mut bodies, primed) = spawn_body_builder(context, schedule, phase);
    let _ = primed.await;
    let phase_start = Instant::now();
    let phase_start_cpu = resources::cpu_seconds();
    let open_loop = !matches!(phase.load_model, Load::Concurrency(_));
    let start = PhaseStart {
        index: phase.index,
        name: phase.name.clone(),
        record: phase.record,
        load: phase.load.clone(),
        open_loop,
        planned_rate: phase.planned_rate,
        planned_requests: (!phase.open_ended).then_some(phase.requests.len() as u64),
        planned_duration_s: phase.duration.map(|d| d.as_secs_f64()),
        at_us: context.micros(phase_start),
    };
    context.observer.on_event(Event::PhaseStarted(&start));
    context.log(LogLine::PhaseStart(start));
    let deadline = phase.duration.map(|d| phase_start + d);

    match phase.load_model {
        Load::Rate { .. } | Load::AtOnce(_) => {
            let burst = Arc::new(InFlight::default());
            let index = phase.index;
            while let Some((request, body)) = bodies.recv().await {
                let intended =
                    phase_start + Duration::from_micros(request.intended_offset_us.unwrap_or(0));
                tokio::select! {
                    _ = context.timer.sleep_until(intended) => {}
                    _ = stopped(&mut cancel) => break,
                }
                let context = context.clone();
                let burst = burst.clone();
                context.in_flight.enter();
                burst.enter();
                tokio::spawn(async move {
                    execute(&context, index, request, body, Some(intended)).await;
                    burst.leave();
                });
            }
            if matches!(phase.load_model, Load::AtOnce(_)) {
                // A burst ends when it has drained, so its latency is its own.
                tokio::select! {
                    _ = burst.wait_empty() => {}
                    _ = stopped(&mut cancel) => {}
                }
            } else if let Some(deadline) = deadline.filter(|_| !ended_by_count(phase)) {
                // Ended by its duration: the phase lasts its whole duration (arrivals simply
                // fell short of its end). Ended by its request count first: it ends now, so
                // that idle time is not counted as the phase's.
                tokio::select! {
                    _ = tokio::time::sleep_until(deadline) => {}
                    _ = stopped(&mut cancel) => {}
                }
            }
        }
        Load::Concurrency(workers) => {
            let queue = Arc::new(tokio::sync::Mutex::new(bodies));
            let mut tasks = tokio::task::JoinSet::new();
            for _ in 0..workers {
                let queue = queue.clone();
                let context = context.clone();
                let mut cancel = cancel.clone();
                let index = phase.index;
                tasks.spawn(async move {
                    loop {
                        if *cancel.borrow() || deadline.is_some_and(|d| Instant::now() >= d) {
                            break;
                        }
                        let next = tokio::select! {
                            next = async { queue.lock().await.recv().await } => next,
                            _ = stopped(&mut cancel) => None,
                        };
                        let Some((request, body)) = next else { break };
                        context.in_flight.enter();
                        execute(&context, index, request, body, None).await;
                    }
                });
            }
            let all_done = async { while tasks.join_next().await.is_some() {} };
            match deadline {
                Some(deadline) => tokio::select! {
                    _ = all_done => {}
                    _ = tokio::time::sleep_until(deadline) => {}
                    _ = stopped(&mut cancel) => {}
                },
                None => tokio::select! {
                    _ = all_done => {}
                    _ = stopped(&mut cancel) => {}
                },
            }
            // Workers still holding a request finish it in the background and then stop.
            tasks.detach_all();
        }
    }
    let client = match (&context.cpu, phase_start_cpu) {
        (Some(cpu), Some(start_cpu)) => cpu.load_since(phase_start.into_std(), start_cpu),
        _ => None,
    };
    let end = PhaseEnd {
        index: phase.index,
        at_us: context.micros(Instant::now()),
        sent: context.sent[phase.index].load(Ordering::Relaxed),
        client,
    };
    context.observer.on_event(Event::PhaseEnded(&end));
    context.log(LogLine::PhaseEnd(end));
}

/// Whether an open loop's schedule stops at its request count before its duration.
fn ended_by_count(phase: &PhaseSchedule) -> bool {
    phase
        .max_requests
        .is_some_and(|n| phase.requests.len() as u64 >= n)
}

/// Sends one request, waits for its whole response (or its timeout, or an abort), and hands the
/// result to the recorder. The caller has already counted it in `in_flight`.
async fn execute(
    context: &Arc<Context>,
    phase: usize,
    request: ScheduledRequest,
    body: Bytes,
    intended: Option<Instant>,
) {
    let request_id = context.template.request_id(phase, request.seq);
    let mut sent_at = Instant::now();
    let intended_send_us = context.micros(intended.unwrap_or(sent_at));
    // Until the record is handed over, a panic in this task still records the request (as the
    // client's failure) and leaves the in-flight count: a run never hangs on a dead task.
    let mut guard = InFlightGuard {
        context,
        pending: Some((phase, request, intended_send_us)),
    };
    context.sent[phase].fetch_add(1, Ordering::Relaxed);
    context.observer.on_event(Event::RequestSent { phase });
    let mut exchange = Exchange::default();
    let timeout = context.template.timeout;
    enum End {
        Complete,
        TimedOut,
        Aborted,
    }
    let mut abort = context.abort.clone();
    let end = {
        let work = tokio::time::timeout(
            timeout,
            request::exchange(
                &context.client,
                &context.template,
                body,
                request_id,
                &mut sent_at,
                &mut exchange,
            ),
        );
        tokio::select! {
            result = work => if result.is_ok() { End::Complete } else { End::TimedOut },
            _ = stopped(&mut abort) => End::Aborted,
        }
    };
    match end {
        End::Complete => {}
        End::TimedOut => {
            exchange.end_us = sent_at.elapsed().as_micros() as u64;
            exchange.fail(
                ErrorClass::Timeout,
                format!(
                    "no complete response within the {}s timeout",
                    timeout.as_secs_f64()
                ),
            );
        }
        End::Aborted => {
            exchange.end_us = sent_at.elapsed().as_micros() as u64;
            exchange.fail(
                ErrorClass::Cancelled,
                "still in flight when the run was interrupted",
            );
        }
    }
    let actual_send_us = context.micros(sent_at);
    guard.pending = None;
    let finished = Finished {
        phase,
        request,
        intended_send_us: if intended.is_some() {
            intended_send_us
        } else {
            actual_send_us
        },
        actual_send_us,
        exchange,
    };
    let _ = context.records.send(Message::Finished(Box::new(finished)));
}

/// A request in flight: leaves the count when dropped, and records the request as the
/// client's failure if its task died before handing the record over.
struct InFlightGuard<'a> {
    context: &'a Arc<Context>,
    /// (phase, request, intended send µs) until the record is handed over.
    pending: Option<(usize, ScheduledRequest, u64)>,
}

impl Drop for InFlightGuard<'_> {
    fn drop(&mut self) {
        if let Some((phase, request, intended_send_us)) = self.pending.take() {
            let mut exchange = Exchange::default();
            exchange.fail(
                ErrorClass::Client,
                "llmload failed while handling this request (an internal error)",
            );
            let finished = Finished {
                phase,
                request,
                intended_send_us,
                actual_send_us: intended_send_us,
                exchange,
            };
            let _ = self
                .context
                .records
                .send(Message::Finished(Box::new(finished)));
        }
        self.context.in_flight.leave();
    }
}
