//! Running a group of phases: each phase's driver (open-loop pacer, closed-loop workers,
//! burst), its offset within the group, its drain, and its early end. Each driver is a file of
//! its own: [`open_loop`] (rates, trace replays, bursts) and [`closed_loop`] (users).

mod closed_loop;
mod open_loop;
mod sessions;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use super::context::{Context, InFlight, PhaseState};
use super::observe::stopped;
use super::{resources, Event, PhaseRun, BODIES_AHEAD};
use crate::planner::{PhaseSchedule, ScheduledRequest};
use crate::records::{LogLine, PhaseEnd, PhaseStart};

/// What a phase's driver is handed: the phase, its state and bodies, its clock, and the signals
/// that end it.
struct Drive<'a> {
    context: &'a Arc<Context>,
    state: &'a Arc<PhaseState>,
    phase: &'a PhaseSchedule,
    /// Request bodies, built ahead.
    bodies: Bodies,
    phase_start: Instant,
    /// When the phase's duration ends, if it has one.
    deadline: Option<Instant>,
    /// Sending stops (the run is stopped).
    cancel: watch::Receiver<bool>,
    /// The phase is ended early.
    ended: watch::Receiver<Option<String>>,
}

/// Runs the phases of one group together, each from its offset, and returns when every one
/// has ended (and drained, where it asks). Whether every phase of it ran its course: `false`
/// when the run's stop came before a phase had sent what it planned.
pub(super) async fn run_group(
    context: &Arc<Context>,
    group: Vec<PhaseRun>,
    sending: watch::Receiver<bool>,
) -> bool {
    // A cold cache first, when a phase of the group asks for one (before the connections'
    // warm-up, which sends no prompt).
    let cache_reset = match group.iter().find(|run| run.phase.reset_cache) {
        Some(run) => {
            // The requests still in flight would fill the cache again as they finish: the
            // reset waits for them (a closed loop's phase ends with its last requests out).
            let mut cancel_wait = sending.clone();
            tokio::select! {
                _ = context.in_flight.wait_empty() => {}
                _ = stopped(&mut cancel_wait) => return false,
            }
            let outcome =
                super::reset::reset(context.template(run.phase.index), &context.tls).await;
            let reset = match outcome {
                Ok(how) => crate::records::CacheReset {
                    done: true,
                    detail: how,
                },
                Err(why) => crate::records::CacheReset {
                    done: false,
                    detail: context.secrets.redact(&why).into_owned(),
                },
            };
            if !reset.done {
                let note = format!(
                    "the server's cache was not reset before phase \"{}\": {}",
                    run.phase.name, reset.detail
                );
                context.observer.on_event(Event::Note(&note));
            }
            Some(reset)
        }
        None => None,
    };
    // Connections first, so that the phases' clocks measure the server, not the handshakes.
    let mut warming = tokio::task::JoinSet::new();
    if context.warm_connections {
        for (position, run) in group.iter().enumerate() {
            let context = context.clone();
            let need = super::connections::needed(&run.phase);
            let index = run.phase.index;
            warming.spawn(async move {
                let template = context.template(index).clone();
                let (ok, error) =
                    super::connections::warm(&context.transport, &template, need).await;
                (position, ok, error)
            });
        }
    }
    let mut warmed = vec![0u64; group.len()];
    let mut cancel_warming = sending.clone();
    loop {
        tokio::select! {
            done = warming.join_next() => match done {
                Some(Ok((position, ok, error))) => {
                    warmed[position] = ok;
                    if let Some(error) = error {
                        let note = format!("could not open every connection before phase \"{}\": {error}", group[position].phase.name);
                        context.observer.on_event(Event::Note(&note));
                    }
                }
                Some(Err(_)) => {}
                None => break,
            },
            _ = stopped(&mut cancel_warming) => return false,
        }
    }
    let group_start = Instant::now();
    let mut phases = tokio::task::JoinSet::new();
    for (run, warmed) in group.into_iter().zip(warmed) {
        let context = context.clone();
        let mut cancel = sending.clone();
        let cache_reset = cache_reset.clone().filter(|_| run.phase.reset_cache);
        phases.spawn(async move {
            let starts = group_start + run.phase.offset;
            tokio::select! {
                _ = tokio::time::sleep_until(starts) => {}
                _ = stopped(&mut cancel) => return false,
            }
            run_phase(&context, run, cancel, warmed, cache_reset).await
        });
    }
    let mut ran = true;
    while let Some(phase_ran) = phases.join_next().await {
        ran &= phase_ran.unwrap_or(false);
    }
    ran
}

async fn run_phase(
    context: &Arc<Context>,
    run: PhaseRun,
    mut cancel: watch::Receiver<bool>,
    warmed: u64,
    cache_reset: Option<crate::records::CacheReset>,
) -> bool {
    let phase = run.phase;
    let state = Arc::new(PhaseState {
        index: phase.index,
        sent: AtomicU64::new(0),
        in_flight: InFlight::default(),
        ended: run.control.subscribe(),
    });
    let (bodies, primed) = spawn_body_builder(context, &phase);
    let _ = primed.await;
    let phase_start = Instant::now();
    let phase_start_cpu = resources::cpu_reading();
    let phase_start_hiccups = context.hiccups.as_ref().and_then(|m| m.reading());
    let open_loop = phase.load_model.is_open_loop();
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
        group: Some(phase.group),
        step: phase.step.clone(),
        api: Some(context.template(phase.index).dialect.name())
            .filter(|name| *name != context.template.dialect.name())
            .map(str::to_string),
        model: phase.model.clone(),
        cache_reset,
        sessions: matches!(phase.load_model, crate::plan::Load::Sessions(_)),
    };
    context.observer.on_event(Event::PhaseStarted(&start));
    context.log(LogLine::PhaseStart(start));
    let drive = Drive {
        context,
        state: &state,
        phase: &phase,
        bodies,
        phase_start,
        deadline: phase.duration.map(|d| phase_start + d),
        cancel: cancel.clone(),
        ended: state.ended.clone(),
    };
    let body_wait = match (&phase.load_model, phase.load_model.fixed_in_flight()) {
        (crate::plan::Load::Sessions(sessions), _) => {
            sessions::drive(drive, sessions).await;
            None
        }
        (_, Some(workers)) if !phase.load_model.is_open_loop() => {
            Some(closed_loop::drive(drive, workers).await)
        }
        _ => {
            open_loop::drive(drive).await;
            None
        }
    };
    // Sending ended by the plan, not by the run's stop (which may come while it drains, or
    // while a closed loop's users wait for their last answers).
    let sent_all =
        !phase.open_ended && state.sent.load(Ordering::Relaxed) >= phase.requests.len() as u64;
    let ran = !*cancel.borrow() || sent_all;
    let client = match (&context.cpu, phase_start_cpu) {
        (Some(cpu), Some(start_cpu)) => cpu.load_since(phase_start.into_std(), start_cpu),
        _ => None,
    };
    let hiccups = context
        .hiccups
        .as_ref()
        .zip(phase_start_hiccups.as_ref())
        .and_then(|(meter, start)| meter.since(start));
    let end = PhaseEnd {
        hiccups,
        index: phase.index,
        at_us: context.micros(Instant::now()),
        sent: state.sent.load(Ordering::Relaxed),
        client,
        ended_early: run.control.reason(),
        connections: Some(
            context
                .connects
                .between(phase_start, Instant::now(), warmed),
        ),
        body_wait,
    };
    context.observer.on_event(Event::PhaseEnded(&end));
    context.log(LogLine::PhaseEnd(end));
    if phase.drain || end_was_early(&run.control) {
        // The next group waits for this phase's requests, so that its latency is its own and
        // the next one's is not shifted by it (an early end has cancelled them already).
        tokio::select! {
            _ = state.in_flight.wait_empty() => {}
            _ = stopped(&mut cancel) => {}
        }
    }
    ran
}

/// Holds a driver's phase until its tasks (users, session slots) have all ended, its deadline,
/// a stop, or its early end; tasks still going then go on in the background. A shard may have
/// none (a small closed loop's users dealt to the others): it still lasts the phase's duration,
/// so that its next phase starts when the other shards' do, and ends at once without one.
async fn until_done(
    mut tasks: tokio::task::JoinSet<()>,
    deadline: Option<Instant>,
    cancel: &mut watch::Receiver<bool>,
    ended: &mut watch::Receiver<Option<String>>,
) {
    let none = tasks.is_empty();
    let all_done = async {
        while tasks.join_next().await.is_some() {}
        if none {
            std::future::pending::<()>().await;
        }
    };
    let until_deadline = async {
        match deadline {
            Some(deadline) => tokio::time::sleep_until(deadline).await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = all_done => {}
        _ = until_deadline => {}
        _ = stopped(cancel) => {}
        _ = super::context::ended_early(ended) => {}
        _ = async {}, if none && deadline.is_none() => {}
    }
    tasks.detach_all();
}

fn end_was_early(control: &super::PhaseControl) -> bool {
    control.reason().is_some()
}

/// The most bytes of bodies built ahead of the sender, in KiB (besides the count,
/// [`BODIES_AHEAD`]): 512 text bodies are a few hundred KiB, but 512 bodies with a 1280×720
/// image each would be 105 MB held for nothing. 16 MiB keeps 80 such bodies ahead, far more
/// than one body-building core makes in the time the sender takes them.
const BODY_KIB_AHEAD: u32 = 16 * 1024;

/// A full body queue is refilled when this many bodies have left it (an eighth of
/// [`BODIES_AHEAD`]): the builder then wakes once per this many requests, not once per request.
const REFILL_BATCH: usize = BODIES_AHEAD / 8;

/// A phase's bodies, built ahead: each body's room in the byte budget is given back as it is
/// taken.
pub(super) struct Bodies {
    receiver: mpsc::Receiver<(ScheduledRequest, Bytes, tokio::sync::OwnedSemaphorePermit)>,
}

impl Bodies {
    /// The next request and its body; `None` once the phase has no more.
    pub(super) async fn recv(&mut self) -> Option<(ScheduledRequest, Bytes)> {
        let (request, body, _room) = self.receiver.recv().await?;
        Some((request, body))
    }

    /// No body is ready: the builder is behind (or the phase has no more).
    pub(super) fn is_empty(&self) -> bool {
        self.receiver.is_empty()
    }
}

/// Builds request bodies on a blocking thread, ahead of the sender, within [`BODIES_AHEAD`]
/// bodies and [`BODY_KIB_AHEAD`]. Sends `primed` once the first batch is ready (or the budget is
/// full), so that the phase clock starts with bodies in hand.
fn spawn_body_builder(
    context: &Arc<Context>,
    phase: &Arc<PhaseSchedule>,
) -> (Bodies, tokio::sync::oneshot::Receiver<()>) {
    let (tx, rx) = mpsc::channel(BODIES_AHEAD);
    let budget = Arc::new(tokio::sync::Semaphore::new(BODY_KIB_AHEAD as usize));
    let runtime = tokio::runtime::Handle::current();
    let (primed_tx, primed_rx) = tokio::sync::oneshot::channel();
    let context = context.clone();
    let template = context.template(phase.index).clone();
    // A materialized phase ends with its list; an open-ended one goes on until its receiver goes.
    // Sessions build each call's body when its turn comes (the sessions driver): none here.
    let limit = if !phase.load_model.bodies_ahead() {
        Some(0)
    } else if phase.open_ended {
        None
    } else {
        Some(phase.requests.len() as u64)
    };
    let schedule = context.schedule.clone();
    let phase = phase.clone();
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
            let request = schedule.request_at(&phase, seq);
            seq += 1;
            let (prompt, served) = context.prompt_of(phase.index, &request);
            let body = template.body(&prompt, request.output_tokens);
            // At least 1 KiB each, and never more than the whole budget (one huge body still
            // goes, alone); images served as URLs count as the body they would have been.
            let kib = ((body.len() as u64 + served).div_ceil(1024) as u32).clamp(1, BODY_KIB_AHEAD);
            let room = match budget.clone().try_acquire_many_owned(kib) {
                Ok(room) => room,
                Err(_) => {
                    // The budget is full: the phase may start with what is built.
                    if let Some(p) = primed.take() {
                        let _ = p.send(());
                    }
                    match runtime.block_on(budget.clone().acquire_many_owned(kib)) {
                        Ok(room) => room,
                        Err(_) => break,
                    }
                }
            };
            // A full queue is refilled a batch at a time: waiting for room for one body woke this
            // thread, and switched the sender's core to it and back, once per request (256
            // streams of short answers on one core: 39,000 switches each way in 5 s).
            if tx.capacity() == 0 {
                let batch =
                    limit.map_or(REFILL_BATCH, |n| REFILL_BATCH.min((n - seq + 1) as usize));
                match runtime.block_on(tx.reserve_many(batch)) {
                    // The room reserved is given back at once, and taken by the sends below.
                    Ok(permits) => drop(permits),
                    Err(_) => break,
                }
            }
            if tx.blocking_send((request, body, room)).is_err() {
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
    (Bodies { receiver: rx }, primed_rx)
}
