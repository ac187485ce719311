//! The executor: runs a [`Schedule`] against an OpenAI-compatible endpoint and records every
//! request.
//!
//! Open-loop phases (a `rate`) send each request at its intended time whatever the server does,
//! so a slow server never slows the offered load (no coordinated omission); closed-loop phases
//! (`concurrency N`) keep exactly N requests in flight; a burst (`at-once N`) releases N requests
//! together and waits for them. Phases run in groups: the phases of a group run together, each
//! from its offset, and a group starts when the one before has ended (and drained, where its
//! phases ask). The groups come from a [`PhaseSource`]: a fixed schedule's, or a search that
//! decides its next probe from the records of the last. Prompt bodies are built ahead of time
//! on a blocking thread so the pacer only sleeps and sends. Records go to the [`recorder`]
//! thread, which appends them to `records.jsonl` as requests finish.
//!
//! It does not aggregate or judge anything: that is [`crate::metrics`] and [`crate::verdict`];
//! nor does it choose loads: a search's policy is [`crate::planner::search`].

pub mod answers;
mod connections;
mod context;
pub mod hiccups;
mod media_host;
mod observe;
mod pacer;
mod phase;
pub mod recorder;
pub mod request;
mod reset;
pub mod resources;
mod send;
mod source;
pub mod template;
pub mod transport;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::error::{Error, Result};
use crate::planner::{PromptSource, Schedule};
use crate::records::{LogLine, RunEnd, RunHeader, RunLine};
use crate::timer::PreciseTimer;
use crate::tokens::Tokenizer;
use context::{Context, InFlight};
use observe::stopped;
pub use observe::{Event, Fanout, LiveCounters, Objective, Observer, Quiet, Standing, Stop};
use recorder::{Message, Recorder};
pub use source::{Between, PhaseControl, PhaseRun, PhaseSource, ScheduleSource};
pub use template::{KeyCredentials, RequestTemplate};

/// How many prompt bodies are built ahead of the pacer.
const BODIES_AHEAD: usize = 512;

/// Everything a run needs besides its schedule.
pub struct RunConfig {
    /// How each request is spoken.
    pub template: RequestTemplate,
    /// The HTTP version requests are spoken in.
    pub http: crate::plan::HttpVersion,
    /// How the requests of phases with a model or endpoint of their own are spoken, by phase.
    pub phase_templates: std::collections::BTreeMap<usize, RequestTemplate>,
    /// Open the connections each group of phases needs before its clock starts.
    pub warm_connections: bool,
    /// Where each request's prompt comes from.
    pub prompts: Arc<dyn PromptSource>,
    /// Counts tokens where the server gives no usage.
    pub tokenizer: Arc<Tokenizer>,
    /// What every answer must be (the plan's `response-format`), checked by the recorder.
    pub answers: Option<Arc<answers::AnswerCheck>>,
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
    /// Start the schedule at this wall-clock instant (shards that start together), not at once.
    pub start_at: Option<std::time::SystemTime>,
    /// What the run counts as it goes (given to observers, and read by a started server's
    /// watcher to know whether the server is still heard from).
    pub live: Arc<LiveCounters>,
    /// Images go out as URLs served on loopback (`image-urls`), with the dataset's image
    /// files (each once) served from the start.
    pub image_urls: Option<(crate::plan::ImageUrls, Vec<crate::plan::Attachment>)>,
    /// Whom `https://` targets are trusted as, and the client certificate shown them.
    pub tls: crate::tls::Trust,
}

/// Runs every phase of `schedule`, group by group, writing the run's log to
/// `config.records_path`. Returns once every record is written; an error when the run could
/// not be carried out (the records could not be written, the HTTP client or a thread could not
/// start).
pub async fn run(schedule: Arc<Schedule>, config: RunConfig) -> Result<()> {
    let source = ScheduleSource::new(schedule.clone());
    run_from(schedule, Box::new(source), config).await
}

/// Runs the groups `source` gives, in order, with `schedule`'s request mix (and its limits:
/// the open-file check and the connection pool cover every load of `schedule`, a search's
/// highest included).
pub async fn run_from(
    schedule: Arc<Schedule>,
    source: Box<dyn PhaseSource>,
    config: RunConfig,
) -> Result<()> {
    let pool = pool_size(&schedule, config.template.timeout);
    if let Some(notice) = check_open_files(&schedule, pool)? {
        config.observer.on_event(Event::Warning(&notice));
    }
    let connects = Arc::new(transport::ConnectLog::default());
    let transport = transport::Transport::new(
        connects.clone(),
        pool,
        config.template.timeout.min(Duration::from_secs(10)),
        &config.tls,
        config.http,
    )
    .map_err(|e| Error::run(e.to_string()))?;
    let checked = check_target(&config, &transport).await;
    let recorder = Recorder::start(
        &config.records_path,
        config.tokenizer.clone(),
        config.answers.clone(),
        config.secrets.clone(),
        config.observer.clone(),
        config.stop.clone(),
    )?;
    let stop = config.stop.clone();
    let timer = PreciseTimer::start()
        .map_err(|e| Error::run(format!("cannot start the pacing timer: {e}")))?;
    let mut header = config.header.clone();
    if let Some(start_at) = config.start_at {
        start_together(start_at, &stop, &mut header).await;
    }
    let media_host = serve_images(&config)?;
    let context = start_context(
        &config, schedule, transport, connects, &recorder, timer, media_host,
    );
    header.target_notes = checked.notes;
    header.served_models = checked.served;
    header.clock_origin_ns = crate::clock::monotonic_ns(context.run_start.into_std());
    header.started_unix_ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .ok()
        .map(|d| d.as_nanos() as u64);
    context.observer.on_event(Event::RunStarted(&header));
    context.observer.on_event(Event::Counters(&context.live));
    context.log(LogLine::Run(RunLine::current(header)));
    if let Some(why) = checked.refused {
        // Nothing was sent: the run ends here, its records saying why (a report is written
        // from them, NOT CARRIED OUT, as for any run).
        let end = RunEnd {
            at_us: context.micros(Instant::now()),
            interrupted: false,
            aborted: None,
            client_peak_rss_bytes: resources::peak_rss_bytes(),
            recorder_backlog: None,
            refused: Some(why),
        };
        context.observer.on_event(Event::RunEnded(&end));
        context.log(LogLine::RunEnd(end));
        drop(context);
        return recorder.finish();
    }
    let sending = stop.sending();
    let exhausted = send_groups(&context, source, &sending).await?;
    let cut_short = drain(&context, &stop, sending.clone(), config.grace).await;
    let aborted = stop.abort_reason();
    let refused = stop.refused_reason();
    let end = RunEnd {
        at_us: context.micros(Instant::now()),
        // A stop that came once every phase was sent, and whose grace let every answer finish,
        // interrupted nothing (a CI job's timeout while the last answers came in).
        interrupted: *sending.borrow()
            && (!exhausted || cut_short)
            && aborted.is_none()
            && refused.is_none(),
        aborted,
        client_peak_rss_bytes: resources::peak_rss_bytes(),
        recorder_backlog: context.record_room.backlog(),
        refused,
    };
    context.observer.on_event(Event::RunEnded(&end));
    context.log(LogLine::RunEnd(end));
    drop(context);
    // The report is built from the file, exactly as `llmload report DIR` rebuilds it.
    recorder.finish()
}

/// What the checks of the target before anything is recorded found.
#[derive(Default)]
struct TargetChecked {
    /// Why the run is refused (a wrong URL, key or model), if it is.
    refused: Option<String>,
    /// What the reports must say too (a model served but not listed).
    notes: Vec<String>,
    /// The models the target serves.
    served: Vec<crate::records::ServedModel>,
}

/// The target answers and serves the plan's model(s), before anything is recorded: a wrong
/// URL, key or model ends the run in seconds. It rides on the connection warm-up (a plan
/// measuring cold connections opens none before its clock).
async fn check_target(config: &RunConfig, transport: &transport::Transport) -> TargetChecked {
    let mut found = TargetChecked::default();
    if !config.warm_connections {
        return found;
    }
    let mut checked: Vec<(String, String)> = Vec::new();
    for template in std::iter::once(&config.template).chain(config.phase_templates.values()) {
        // One check per server and model: phases that speak another API to the same
        // server share it (a second GET on a pooled connection llama.cpp closed would fail).
        let key = (
            template.models_url().to_string(),
            template.options.model.clone(),
        );
        if checked.contains(&key) || found.refused.is_some() {
            continue;
        }
        match connections::preflight(transport, template).await {
            Ok(checked) => {
                if let Some(note) = checked.note {
                    config.observer.on_event(Event::Note(&note));
                    found.notes.push(note);
                }
                found.served.extend(checked.served);
            }
            Err(why) => found.refused = Some(format!("{why}; nothing was sent")),
        }
        checked.push(key);
    }
    found
}

/// Everything is ready: the schedule's clock starts at the agreed instant (or at a stop), and
/// a shard's header says how late it started.
async fn start_together(start_at: std::time::SystemTime, stop: &Stop, header: &mut RunHeader) {
    let mut sending = stop.sending();
    tokio::select! {
        _ = wait_for_wall_clock(start_at) => {}
        _ = stopped(&mut sending) => {}
    }
    if let Some(shard) = header.shard.as_mut() {
        let late = std::time::SystemTime::now()
            .duration_since(start_at)
            .unwrap_or_default();
        shard.start_late_ms = Some(late.as_secs_f64() * 1000.0);
    }
}

/// The images' host when they go out as URLs (`image-urls`), serving the dataset's image
/// files from the start.
fn serve_images(config: &RunConfig) -> Result<Option<media_host::MediaHost>> {
    Ok(match &config.image_urls {
        Some((urls, files)) => {
            let files = files
                .iter()
                .filter_map(|file| {
                    let crate::plan::AttachmentKind::Image { mime, .. } = file.kind else {
                        return None;
                    };
                    let bytes = base64::Engine::decode(
                        &base64::engine::general_purpose::STANDARD,
                        &*file.base64,
                    )
                    .ok()?;
                    Some(media_host::ServedFile {
                        number: file.file?,
                        mime,
                        bytes,
                    })
                })
                .collect();
            let host = media_host::MediaHost::start(*urls, files).map_err(|e| {
                Error::run(format!(
                    "cannot serve the images (image-urls) on {}:{}: {e}",
                    urls.host, urls.port
                ))
            })?;
            let note = format!(
                "images go out as URLs served by llmload at {} (the server fetches them; TTFT includes the fetch)",
                host.base()
            );
            config.observer.on_event(Event::Note(&note));
            Some(host)
        }
        None => None,
    })
}

/// What every phase shares, from the run's start on.
fn start_context(
    config: &RunConfig,
    schedule: Arc<Schedule>,
    transport: transport::Transport,
    connects: Arc<transport::ConnectLog>,
    recorder: &Recorder,
    timer: PreciseTimer,
    media_host: Option<media_host::MediaHost>,
) -> Arc<Context> {
    let stop = &config.stop;
    let run_start = Instant::now();
    Arc::new(Context {
        media_host,
        transport: Arc::new(transport),
        template: config.template.clone(),
        phase_templates: config.phase_templates.clone(),
        connects,
        warm_connections: config.warm_connections,
        prompts: config.prompts.clone(),
        schedule,
        run_start,
        records: recorder.sender(),
        record_room: Arc::new(recorder::QueueRoom::default()),
        records_path: config.records_path.clone(),
        observer: config.observer.clone(),
        abort: stop.in_flight(),
        stop: stop.clone(),
        in_flight: InFlight::default(),
        live: config.live.clone(),
        timer,
        cpu: resources::CpuMonitor::start(resources::client_cores(config.worker_threads)),
        tls: config.tls.clone(),
        hiccups: hiccups::HiccupMeter::start(
            run_start.into_std(),
            recorder.sender(),
            config.live.clone(),
        ),
        secrets: config.secrets.clone(),
        pacer: pacer::Pacer::new(
            &config
                .template
                .keys
                .iter()
                .map(|k| k.limits)
                .collect::<Vec<_>>(),
            matches!(config.template.on_throttle, crate::plan::OnThrottle::Pace),
        ),
    })
}

/// Sends the groups the source gives until it has none or sending stops; whether it ran out
/// (every phase was sent).
async fn send_groups(
    context: &Arc<Context>,
    mut source: Box<dyn PhaseSource>,
    sending: &tokio::sync::watch::Receiver<bool>,
) -> Result<bool> {
    let mut between = Between {
        context: context.clone(),
    };
    // Every phase was sent: a stop after this interrupts nothing unless it cuts an answer short.
    // A stop that comes after a group ran its course (while it drained, or while its records
    // were written) still asks the source whether more was planned.
    let mut exhausted = false;
    let mut last_group_ran = true;
    loop {
        if *sending.borrow() && !last_group_ran {
            break;
        }
        // The source may read the records of the group that just ended, and may take a while
        // to decide (a search reads them back): it runs off the runtime's worker threads.
        let asked = tokio::task::spawn_blocking(move || {
            let group = source.next_group(&between);
            (source, between, group)
        })
        .await;
        let Ok((returned, kept, group)) = asked else {
            return Err(Error::run(
                "the run's source of phases failed (an internal error)",
            ));
        };
        (source, between) = (returned, kept);
        let Some(group) = group else {
            exhausted = true;
            break;
        };
        if *sending.borrow() {
            break;
        }
        last_group_ran = phase::run_group(context, group, sending.clone()).await;
        // Every record of the group is written and observed before the source is asked again.
        let (reply, written) = tokio::sync::oneshot::channel();
        let _ = context.records.send(Message::Barrier(reply));
        let _ = written.await;
    }
    drop(between);
    Ok(exhausted)
}

/// Lets in-flight requests finish; after an early stop, only for the grace period (or until
/// an abort), then cancels the rest. Whether any answer was cut short.
async fn drain(
    context: &Context,
    stop: &Stop,
    mut stop_wait: tokio::sync::watch::Receiver<bool>,
    grace: Duration,
) -> bool {
    let mut cut_short = false;
    tokio::select! {
        _ = context.in_flight.wait_empty() => {}
        _ = stopped(&mut stop_wait) => {
            tokio::select! {
                _ = context.in_flight.wait_empty() => {}
                _ = tokio::time::sleep(grace) => {}
                _ = async { let mut a = context.abort.clone(); stopped(&mut a).await } => {}
            }
            cut_short = !context.in_flight.is_empty();
            stop.cancel_in_flight();
            context.in_flight.wait_empty().await;
        }
    }
    cut_short
}

/// Returns at the wall-clock instant `at` (at once when it has passed): asleep until the last
/// two milliseconds, then spinning, so that shards on different machines start within their
/// clocks' agreement rather than a timer's granularity.
async fn wait_for_wall_clock(at: std::time::SystemTime) {
    let left = || at.duration_since(std::time::SystemTime::now()).ok();
    if let Some(wait) = left().and_then(|w| w.checked_sub(Duration::from_millis(2))) {
        tokio::time::sleep(wait).await;
    }
    while left().is_some_and(|w| !w.is_zero()) {
        std::hint::spin_loop();
    }
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
        .loads()
        .iter()
        .map(|load| load.fixed_in_flight().unwrap_or(0) as u64)
        .max()
        .unwrap_or(0);
    if certain == 0 && SPARE > limit {
        // An open loop holds no fixed number in flight: the limit is too low for anything.
        return Err(Error::run(format!(
            "this process may open only {limit} files (its hard limit), and llmload needs {SPARE} \
             besides its connections: raise it, e.g. `ulimit -n 4096`, then run again"
        )));
    }
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

/// Idle connections to keep per host: the most requests the plan may have in flight, bounded
/// by the most a plan may hold at once. A smaller bound would close, at every request's end,
/// connections the next request must open again (a closed loop of 10,000 users churned 5,904
/// connections per wave with the former bound of 4,096).
fn pool_size(schedule: &Schedule, timeout: Duration) -> usize {
    let most = schedule
        .loads()
        .iter()
        .map(|load| load.in_flight_within(timeout.min(Duration::from_secs(60))))
        .fold(1.0, f64::max);
    (most.ceil() as usize).clamp(1, crate::plan::limits::MAX_CONCURRENCY as usize)
}
