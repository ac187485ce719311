//! The library's entry point for running a plan: the one place where the stages meet.
//!
//! [`run`] takes a validated plan and [`RunOptions`] and returns a [`RunOutcome`]: the records
//! directory, the aggregates, the verdicts, the comparison with a baseline when asked, and the
//! run's [`Status`], which decides the exit code. It prints nothing: what happens while it runs
//! goes to the options' [`Observer`], and the caller stops it early through the options'
//! [`Stop`]. Writing report files, the terminal summary, JUnit and GitHub's step summary are
//! the caller's, from the outcome ([`RunOutcome::report`]). The command line, `check
//! --capacity` and any future sweep or shard runner are thin callers of this module.
//!
//! A run is two steps, also callable alone: [`execute`] sends the plan and writes
//! `records.jsonl` (and `plan.kdl`) into the output directory; [`judge`] turns a records
//! directory into an outcome (which is all `llmload report DIR` does).

mod abort;
pub mod outdir;
mod search;
mod shard;
mod target;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use sha2::Digest;

pub use shard::{merge, refuse_shard, run_shard, ShardOutcome};
pub use target::{api_root, redact_url};

use crate::compare::{self, Comparison};
use crate::error::{Error, Result, EXIT_FAIL, EXIT_PASS, EXIT_RUN};
use crate::executor::{self, Observer, RequestTemplate, RunConfig, Stop};
use crate::metrics::{self, Aggregates, Severity};
use crate::plan::{self, Endpoint, Plan};
use crate::planner::{self, WorkloadPrompts};
use crate::records::{self, ErrorClass, RunHeader, RunLog};
use crate::report::{Judged, Records, ReportContext, RunVerdict, VerdictStatus};
use crate::secrets::Secrets;
use crate::sim::{self, writes::RequestWrites};
use crate::tokens::Tokenizer;
use crate::verdict::{self, Verdicts};

/// How to run a plan, beside the plan itself.
pub struct RunOptions {
    /// Where `plan.kdl`, `records.jsonl` and the reports go (created if missing).
    pub out_dir: PathBuf,
    /// Use this seed instead of the plan's.
    pub seed: Option<u64>,
    /// Send to this endpoint instead of the plan's target.
    pub target: Option<Endpoint>,
    /// How long requests in flight may finish after an early stop.
    pub grace: Duration,
    /// The async runtime's worker threads (default: one per core).
    pub threads: Option<usize>,
    /// Have an in-process simulator record its write times, and return them.
    pub record_writes: bool,
    /// Told what happens while the plan runs.
    pub observer: Arc<dyn Observer>,
    /// Stops the run early (the caller keeps a clone).
    pub stop: Stop,
    /// What decides the status besides the SLA.
    pub gate: Gate,
    /// Send only this shard's part of the schedule.
    pub shard: Option<planner::Shard>,
    /// Start the schedule at this wall-clock instant (shards that start together).
    pub start_at: Option<std::time::SystemTime>,
    /// `--label KEY=VALUE`s, kept in the records' header and shown in every report.
    pub labels: std::collections::BTreeMap<String, String>,
}

impl RunOptions {
    /// Options that write to `out_dir` and tell no one anything.
    pub fn new(out_dir: impl Into<PathBuf>) -> RunOptions {
        RunOptions {
            out_dir: out_dir.into(),
            seed: None,
            target: None,
            grace: Duration::from_secs(5),
            threads: None,
            record_writes: false,
            observer: Arc::new(executor::Quiet),
            stop: Stop::new(),
            gate: Gate::default(),
            shard: None,
            start_at: None,
            labels: Default::default(),
        }
    }
}

/// What fails a run besides its SLA.
#[derive(Debug, Clone, Default)]
pub struct Gate {
    /// Compare with this earlier run's directory; a regression fails the run.
    pub baseline: Option<PathBuf>,
    /// A warning (the run is not trustworthy) fails the run.
    pub fail_on_warning: bool,
}

/// What [`execute`] leaves behind.
pub struct Execution {
    /// The run's `records.jsonl`.
    pub records_path: PathBuf,
    /// The in-process simulator's write times, when they were asked for.
    pub sim_writes: Option<Vec<RequestWrites>>,
}

/// Why a run failed its gate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// An abort condition held: the run was stopped early as clearly failing.
    Aborted(String),
    /// An SLA assertion failed.
    Assertions,
    /// A metric regressed against the baseline beyond the noise.
    Regression,
    /// The run is not trustworthy and `fail_on_warning` is set.
    Untrustworthy,
}

/// Why a run could not be judged at all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotCarriedOut {
    /// It was stopped before its plan finished.
    Interrupted,
    /// No connection could be made to the target.
    Unreachable,
    /// Every recorded request failed; what the first said.
    EveryRequestFailed(String),
    /// No recorded request was sent.
    NothingSent,
    /// The comparison with the baseline could not be made (why).
    NotComparable(String),
}

impl std::fmt::Display for NotCarriedOut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NotCarriedOut::Interrupted => f.write_str("the run was interrupted"),
            NotCarriedOut::Unreachable => f.write_str(
                "the target is unreachable: no connection could be made (is the server running? \
                 check the URL or --target)",
            ),
            NotCarriedOut::EveryRequestFailed(first) => {
                write!(f, "every request failed; the first said: {first}")
            }
            NotCarriedOut::NothingSent => f.write_str("no recorded request was sent"),
            NotCarriedOut::NotComparable(why) => write!(f, "{why}"),
        }
    }
}

/// The one verdict of a run: what its exit code says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Status {
    /// Every assertion held (and nothing else failed the gate).
    Passed,
    /// The run failed its gate, for these reasons (at least one).
    Failed(Vec<Failure>),
    /// The run could not be carried out or judged.
    NotCarriedOut(NotCarriedOut),
}

impl Status {
    /// The exit code: 0 passed, 1 failed, 3 not carried out.
    pub fn exit_code(&self) -> u8 {
        match self {
            Status::Passed => EXIT_PASS,
            Status::Failed(_) => EXIT_FAIL,
            Status::NotCarriedOut(_) => EXIT_RUN,
        }
    }
}

/// Everything a run produced.
pub struct RunOutcome {
    /// The run's directory.
    pub dir: PathBuf,
    /// The run's `records.jsonl`.
    pub records_path: PathBuf,
    /// The run's log without its records (header, phases, end).
    pub log: RunLog,
    /// Every aggregate, per phase and overall, with the warnings.
    pub aggregates: Aggregates,
    /// The plan's SLA assertions, judged.
    pub verdicts: Verdicts,
    /// The comparison with the baseline, when one was given.
    pub comparison: Option<Comparison>,
    /// The one verdict.
    pub status: Status,
    /// The in-process simulator's write times, when they were asked for.
    pub sim_writes: Option<Vec<RequestWrites>>,
}

impl RunOutcome {
    /// What the report exporters render (the records are streamed from the file).
    pub fn report(&self) -> ReportContext<'_> {
        ReportContext::new(
            &self.log,
            Records::File(&self.records_path),
            Judged {
                aggregates: self.aggregates.clone(),
                verdicts: self.verdicts.clone(),
                comparison: self.comparison.clone(),
                verdict: self.verdict(),
            },
        )
    }

    /// The one verdict, with its reasons in sentences: what every output says.
    pub fn verdict(&self) -> RunVerdict {
        verdict_of(
            &self.status,
            &self.verdicts,
            self.comparison.as_ref(),
            &self.aggregates,
        )
    }
}

/// The [`RunVerdict`] of a status: the exit code, and why in sentences.
pub fn verdict_of(
    status: &Status,
    verdicts: &Verdicts,
    comparison: Option<&Comparison>,
    aggregates: &Aggregates,
) -> RunVerdict {
    let (status_kind, reasons) = match status {
        Status::Passed => (VerdictStatus::Pass, Vec::new()),
        Status::NotCarriedOut(NotCarriedOut::Interrupted) => (
            VerdictStatus::Interrupted,
            vec![
                "the run was interrupted before its plan finished: no verdict on a partial run"
                    .into(),
            ],
        ),
        Status::NotCarriedOut(reason) => (VerdictStatus::NotCarriedOut, vec![reason.to_string()]),
        Status::Failed(failures) => {
            let reasons = failures
                .iter()
                .map(|failure| match failure {
                    Failure::Aborted(reason) => format!("aborted early: {reason}"),
                    Failure::Assertions => {
                        let failed: Vec<String> = verdicts
                            .results
                            .iter()
                            .filter(|v| !v.passed)
                            .map(|v| {
                                format!("{} ({}: {})", v.assertion, v.phase, v.observed_display)
                            })
                            .collect();
                        format!(
                            "{} of {} assertions failed: {}",
                            failed.len(),
                            verdicts.results.len(),
                            failed.join(", ")
                        )
                    }
                    Failure::Regression => {
                        let regressed: Vec<String> = comparison
                            .map(|c| {
                                c.rows
                                    .iter()
                                    .filter(|r| r.verdict == compare::Change::Regression)
                                    .map(|r| match r.change {
                                        Some(change) if r.relative => {
                                            format!("{} ({:+.1}%)", r.metric, change * 100.0)
                                        }
                                        Some(change) => {
                                            format!("{} ({:+.2} pts)", r.metric, change * 100.0)
                                        }
                                        None => r.metric.clone(),
                                    })
                                    .collect()
                            })
                            .unwrap_or_default();
                        format!(
                            "a regression against the baseline: {}",
                            regressed.join(", ")
                        )
                    }
                    Failure::Untrustworthy => {
                        let codes: Vec<&str> = aggregates
                            .warnings
                            .iter()
                            .filter(|w| w.severity == Severity::Warning)
                            .map(|w| w.code)
                            .collect();
                        format!(
                            "the run is not trustworthy and --fail-on-warning is set ({})",
                            codes.join(", ")
                        )
                    }
                })
                .collect();
            (VerdictStatus::Fail, reasons)
        }
    };
    RunVerdict {
        status: status_kind,
        exit_code: status.exit_code(),
        reasons,
    }
}

/// Runs `plan` and judges it: [`execute`], then [`judge`].
pub fn run(plan: &Plan, options: &RunOptions) -> Result<RunOutcome> {
    let execution = execute(plan, options)?;
    let mut outcome = judge(plan, &options.out_dir, &options.gate)?;
    outcome.sim_writes = execution.sim_writes;
    Ok(outcome)
}

/// Sends `plan` and writes its records (and a copy of the plan) into `options.out_dir`.
pub fn execute(plan: &Plan, options: &RunOptions) -> Result<Execution> {
    let seed = options.seed.unwrap_or(plan.seed);
    let schedule = planner::compile(plan, seed)?;
    let schedule = match options.shard {
        Some(shard) => schedule.shard(shard)?,
        None => schedule,
    };
    let tokenizer = Arc::new(Tokenizer::load(&plan.workload.tokenizer)?);
    let mut secrets = Secrets::new();
    let credentials = target::credentials(plan, &*options.observer, &mut secrets)?;
    let headers = target::extra_headers(plan, &*options.observer, &mut secrets)?;
    let out = &options.out_dir;
    outdir::prepare(out)?;
    keep_sources(plan, out)?;
    let runtime = runtime(options.threads)?;
    let records_path = out.join("records.jsonl");
    let sim_writes = runtime.block_on(async {
        // A "sim" target starts the simulator in-process, on a loopback port of its own.
        let endpoint = options.target.as_ref().unwrap_or(&plan.target.endpoint);
        let (base, simulator) = match endpoint {
            Endpoint::Url(url) => (api_root(url), None),
            Endpoint::Simulator => {
                let addr = ([127, 0, 0, 1], 0).into();
                let serve = sim::ServeOptions {
                    record_writes: options.record_writes,
                };
                let server = sim::serve_with(addr, plan.sim.clone(), tokenizer.clone(), serve)
                    .await
                    .map_err(|e| Error::run(format!("cannot start the simulator: {e}")))?;
                (server.base_url(), Some(server))
            }
        };
        let target_display = match endpoint {
            Endpoint::Simulator => format!("sim (embedded, {base})"),
            Endpoint::Url(_) => redact_url(&base),
        };
        let dialect = plan.target.api.dialect();
        let url = format!("{base}{}", dialect.path());
        let url = reqwest::Url::parse(&url)
            .map_err(|e| Error::usage(format!("{} is not a URL: {e}", redact_url(&url))))?;
        let request_id_prefix = records::new_request_id_prefix();
        let header = RunHeader {
            tool_version: env!("CARGO_PKG_VERSION").to_string(),
            plan: plan.name.clone(),
            plan_file: plan.source.file_name.clone(),
            plan_sha256: sha256(&plan.source.text),
            plan_files: plan
                .source
                .includes
                .iter()
                .map(|(path, text)| records::PlanFile {
                    path: path.clone(),
                    sha256: sha256(text),
                })
                .chain(
                    plan.data_files()
                        .into_iter()
                        .map(|(path, sha256)| records::PlanFile { path, sha256 }),
                )
                .collect(),
            env: plan.source.env.iter().cloned().collect(),
            seed,
            target: target_display,
            model: plan.target.model.clone(),
            api: plan.target.api.as_str().to_string(),
            stream: plan.target.stream,
            exact_output: plan.workload.ignore_eos,
            tokenizer: tokenizer.name().to_string(),
            started_at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            client_host: target::host_name(),
            clock_origin_ns: None,
            request_id_prefix: Some(request_id_prefix.clone()),
            started_unix_ns: None,
            shard: options.shard.map(|shard| records::ShardRun {
                index: shard.index,
                count: shard.count,
                start_at: options.start_at.map(|at| {
                    chrono::DateTime::<chrono::Utc>::from(at)
                        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
                }),
                start_late_ms: None,
            }),
            merged: Vec::new(),
            labels: options.labels.clone(),
        };
        let template = RequestTemplate {
            url,
            dialect,
            options: crate::api::BodyOptions {
                model: plan.target.model.clone(),
                stream: plan.target.stream,
                continuous_usage: plan.target.continuous_usage,
                ignore_eos: plan.workload.ignore_eos,
                extra: Arc::new(plan.target.body.clone()),
            },
            credentials: Arc::new(credentials),
            headers: Arc::new(headers),
            timeout: plan.target.timeout,
            request_id_prefix,
            max_line: usize::try_from(plan.target.max_line).unwrap_or(usize::MAX),
            max_body: plan.target.max_body,
        };
        // Phases with a model or a server of their own speak the same way, to them.
        let mut phase_templates = std::collections::BTreeMap::new();
        for (index, phase) in plan.phases.iter().enumerate() {
            if phase.model.is_none() && phase.endpoint.is_none() {
                continue;
            }
            let mut own = template.clone();
            if let Some(model) = &phase.model {
                own.options.model = model.clone();
            }
            if let Some(endpoint) = &phase.endpoint {
                let url = format!("{}{}", api_root(endpoint), own.dialect.path());
                own.url = reqwest::Url::parse(&url).map_err(|e| {
                    Error::usage(format!(
                        "phase \"{}\": {} is not a URL: {e}",
                        phase.name,
                        redact_url(&url)
                    ))
                })?;
            }
            phase_templates.insert(index, own);
        }
        // The plan's abort conditions watch the run between the executor and the caller.
        let observer: Arc<dyn Observer> = if plan.abort.is_empty() {
            options.observer.clone()
        } else {
            Arc::new(abort::AbortWatch::new(
                plan.abort.clone(),
                plan.slo,
                options.stop.clone(),
                options.observer.clone(),
            ))
        };
        // A search probes from what its earlier probes' records say, and watches each probe.
        let watch = schedule
            .search
            .as_ref()
            .map(|_| Arc::new(search::ProbeWatch::new(observer.clone())));
        let observer: Arc<dyn Observer> = match &watch {
            Some(watch) => watch.clone(),
            None => observer,
        };
        let config = RunConfig {
            template,
            phase_templates,
            warm_connections: plan.target.warm_connections,
            prompts: Arc::new(WorkloadPrompts::new(tokenizer.clone(), plan, &schedule)),
            tokenizer,
            header,
            secrets: Arc::new(secrets),
            records_path: records_path.clone(),
            grace: options.grace,
            worker_threads: options.threads,
            observer,
            stop: options.stop.clone(),
            start_at: options.start_at,
        };
        let schedule = Arc::new(schedule);
        let source: Box<dyn executor::PhaseSource> = match watch.and_then(|watch| {
            search::SearchSource::new(schedule.clone(), verdict::objectives(plan), plan.slo, watch)
        }) {
            Some(search) => Box::new(search),
            None => Box::new(executor::ScheduleSource::new(schedule.clone())),
        };
        // The server's own metrics, scraped beside the run on a thread and connection of its own.
        let scraper = match telemetry_url(&plan.target.metrics, &base) {
            Some(metrics) => {
                let shown = redact_url(metrics.as_str());
                Some(crate::telemetry::scrape::Scraper::start(
                    metrics,
                    shown,
                    plan.target.metrics_interval,
                    out,
                )?)
            }
            None => None,
        };
        let ran = executor::run_from(schedule, source, config).await;
        if let Some(scraper) = scraper {
            tokio::task::spawn_blocking(move || scraper.finish())
                .await
                .ok();
        }
        ran?;
        Ok::<_, Error>(simulator.and_then(|server| server.writes()))
    })?;
    Ok(Execution {
        records_path,
        sim_writes,
    })
}

/// Where the server's metrics are scraped: the plan's URL, or the target's own `/metrics` (its
/// base URL's host, the API's path left out); none when the plan turns it off.
fn telemetry_url(source: &plan::MetricsSource, base: &str) -> Option<reqwest::Url> {
    match source {
        plan::MetricsSource::Off => None,
        plan::MetricsSource::Url(url) => reqwest::Url::parse(url).ok(),
        plan::MetricsSource::Auto => {
            let mut url = reqwest::Url::parse(base).ok()?;
            url.set_path("/metrics");
            url.set_query(None);
            Some(url)
        }
    }
}

/// Judges the run whose records are in `dir`: aggregates in one streaming pass, the plan's SLA,
/// the comparison with a baseline, and the status.
pub fn judge(plan: &Plan, dir: &Path, gate: &Gate) -> Result<RunOutcome> {
    let records_path = dir.join("records.jsonl");
    // One streaming pass: memory does not grow with the length of the run.
    let (log, mut aggregates) =
        metrics::compute_file_with(&records_path, plan.slo.as_ref(), plan.report.interval)?;
    refuse_shard(&log, dir)?;
    if let Some(telemetry) = crate::telemetry::read(dir)? {
        metrics::server::attach(&mut aggregates, &log, &telemetry);
    }
    let verdicts = verdict::evaluate_plan(plan, &aggregates);
    let mut status = status(&aggregates, &verdicts, None, gate);
    let comparison = match &gate.baseline {
        // A run that was not carried out is compared with nothing: it never compares clean.
        Some(_) if matches!(status, Status::NotCarriedOut(_)) => None,
        // Resampling needs every request's values: only a comparison reads them all in.
        Some(baseline) => {
            let current = RunLog::read(&records_path)?;
            match compare_with(baseline, &current, plan, false) {
                Ok(comparison) => Some(comparison),
                Err(error) => {
                    status = Status::NotCarriedOut(NotCarriedOut::NotComparable(error.to_string()));
                    None
                }
            }
        }
        None => None,
    };
    if comparison.is_some() {
        status = self::status(&aggregates, &verdicts, comparison.as_ref(), gate);
    }
    Ok(RunOutcome {
        dir: dir.to_path_buf(),
        records_path,
        log,
        aggregates,
        verdicts,
        comparison,
        status,
        sim_writes: None,
    })
}

fn status(
    aggregates: &Aggregates,
    verdicts: &Verdicts,
    comparison: Option<&Comparison>,
    gate: &Gate,
) -> Status {
    let recorded = &aggregates.overall.requests;
    let mut failures = Vec::new();
    if let Some(reason) = &aggregates.aborted {
        failures.push(Failure::Aborted(reason.clone()));
    } else if aggregates.interrupted {
        return Status::NotCarriedOut(NotCarriedOut::Interrupted);
    }
    if recorded.sent > 0 && recorded.ok == 0 {
        let connect_failures = aggregates
            .overall
            .errors
            .get(ErrorClass::Connect.as_str())
            .copied()
            .unwrap_or(0);
        return Status::NotCarriedOut(if connect_failures == recorded.sent {
            NotCarriedOut::Unreachable
        } else {
            NotCarriedOut::EveryRequestFailed(
                aggregates
                    .first_error
                    .clone()
                    .or_else(|| aggregates.first_client_error.clone())
                    .unwrap_or_default(),
            )
        });
    }
    if recorded.sent == 0 && failures.is_empty() {
        return Status::NotCarriedOut(NotCarriedOut::NothingSent);
    }
    if !verdicts.passed {
        failures.push(Failure::Assertions);
    }
    if comparison.is_some_and(|c| c.regressed) {
        failures.push(Failure::Regression);
    }
    if gate.fail_on_warning
        && aggregates
            .warnings
            .iter()
            .any(|w| w.severity == Severity::Warning)
    {
        failures.push(Failure::Untrustworthy);
    }
    if failures.is_empty() {
        Status::Passed
    } else {
        Status::Failed(failures)
    }
}

fn sha256(text: &str) -> String {
    format!("{:x}", sha2::Sha256::digest(text.as_bytes()))
}

/// What a run directory keeps of the files its plan was built from, beside `plan.kdl`.
#[derive(serde::Serialize, serde::Deserialize, Default)]
struct KeptSources {
    /// The values the plan took from the environment.
    env: std::collections::BTreeMap<String, String>,
    /// Every included file: its path relative to the plan's directory, hash and text.
    files: Vec<KeptFile>,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct KeptFile {
    path: String,
    sha256: String,
    text: String,
}

/// Writes `plan.kdl` and, when the plan includes files or reads the environment,
/// `plan-sources.json`: the run directory holds everything its plan was built from.
fn keep_sources(plan: &Plan, out: &Path) -> Result<()> {
    let plan_copy = out.join("plan.kdl");
    std::fs::write(&plan_copy, plan.source.text.as_bytes())
        .map_err(|e| Error::io("write", &plan_copy, e))?;
    if plan.source.includes.is_empty() && plan.source.env.is_empty() {
        return Ok(());
    }
    let kept = KeptSources {
        env: plan.source.env.iter().cloned().collect(),
        files: plan
            .source
            .includes
            .iter()
            .map(|(path, text)| KeptFile {
                path: path.clone(),
                sha256: sha256(text),
                text: text.to_string(),
            })
            .collect(),
    };
    let path = out.join("plan-sources.json");
    let json = serde_json::to_string_pretty(&kept)
        .map_err(|e| Error::run(format!("cannot encode {}: {e}", path.display())))?;
    std::fs::write(&path, json + "\n").map_err(|e| Error::io("write", &path, e))
}

/// The plan a run directory keeps beside its records (`plan.kdl`, and the files it includes and
/// the environment values it read, from `plan-sources.json`): the plan as it was run.
pub fn archived_plan(dir: &Path) -> Result<Plan> {
    let plan_path = dir.join("plan.kdl");
    let text = std::fs::read_to_string(&plan_path).map_err(|e| {
        Error::usage(format!(
            "cannot read {}: {e} (a report directory holds the plan.kdl its run left)",
            plan_path.display()
        ))
    })?;
    let sources_path = dir.join("plan-sources.json");
    let kept: KeptSources = match std::fs::read_to_string(&sources_path) {
        Ok(json) => serde_json::from_str(&json).map_err(|e| Error::Records {
            path: sources_path.clone(),
            line: None,
            message: format!("not a plan-sources file: {e}"),
        })?,
        Err(_) => KeptSources::default(),
    };
    let options = plan::ParseOptions {
        check_files: false,
        env: plan::EnvSource::Recorded(kept.env),
        sources: plan::Sources::Kept(kept.files.into_iter().map(|f| (f.path, f.text)).collect()),
    };
    Ok(plan::parse_plan_with(
        &plan_path.display().to_string(),
        text,
        &options,
    )?)
}

/// A run directory's records, all in memory, and its plan.
pub fn read_run_dir(dir: &Path) -> Result<(RunLog, Plan)> {
    let records = dir.join("records.jsonl");
    if !records.is_file() {
        return Err(Error::usage(format!(
            "{} has no records.jsonl: is it an llmload report directory?",
            dir.display()
        )));
    }
    let log = RunLog::read(&records)?;
    refuse_shard(&log, dir)?;
    Ok((log, archived_plan(dir)?))
}

/// Compares `current` with the run in `baseline_dir`, under `plan`'s tolerances (or the
/// defaults); runs of different plans, seeds or models are refused unless `force`.
pub fn compare_with(
    baseline_dir: &Path,
    current: &RunLog,
    plan: &Plan,
    force: bool,
) -> Result<Comparison> {
    let (baseline, _) = read_run_dir(baseline_dir)?;
    comparable_data("baseline", &baseline)?;
    comparable_data("current", current)?;
    let notes = compare::comparable(
        &baseline.header.clone().unwrap_or_default(),
        &current.header.clone().unwrap_or_default(),
        force,
    )?;
    let tolerances = match (plan.regression.is_empty(), &plan.search) {
        (true, Some(_)) => compare::default_search_tolerances(),
        (true, None) => compare::default_tolerances(),
        (false, _) => plan.regression.clone(),
    };
    // Each run's search judged on the current plan's objectives, replayed from its records.
    let capacity = |log: &RunLog| {
        plan.search.as_ref()?;
        let aggregates = metrics::compute(log, plan.slo.as_ref());
        verdict::evaluate_plan(plan, &aggregates)
            .capacity
            .map(|c| c.bracket)
    };
    let (base_capacity, current_capacity) = (capacity(&baseline), capacity(current));
    Ok(compare::compare(
        &baseline,
        current,
        &tolerances,
        plan.slo.as_ref(),
        base_capacity.as_ref().zip(current_capacity.as_ref()),
        notes,
        plan.seed,
    ))
}

/// The fewest successful recorded requests a run needs to be compared.
pub const MIN_COMPARED_REQUESTS: usize = 10;

/// Refuses a run that cannot be compared: interrupted, aborted, or with too few successful
/// requests (an empty or broken run must never compare clean).
fn comparable_data(which: &str, log: &RunLog) -> Result<()> {
    let cannot = |why: String| Error::run(format!("cannot compare: the {which} run {why}"));
    if let Some(reason) = log.end.as_ref().and_then(|e| e.aborted.as_deref()) {
        return Err(cannot(format!("was aborted ({reason})")));
    }
    if log.interrupted() {
        return Err(cannot(
            "was interrupted before its plan finished, and a partial run never compares clean"
                .into(),
        ));
    }
    let recorded: Vec<usize> = log
        .phases
        .iter()
        .filter(|p| p.record)
        .map(|p| p.index)
        .collect();
    let ok = log
        .records
        .iter()
        .filter(|r| r.ok() && recorded.contains(&r.phase))
        .count();
    if ok < MIN_COMPARED_REQUESTS {
        return Err(cannot(format!(
            "has {ok} successful recorded request(s); a comparison needs at least {MIN_COMPARED_REQUESTS} on each side"
        )));
    }
    Ok(())
}

/// Checks, before anything is sent, that `dir` holds a run this plan can be compared with:
/// the same plan, seed, model, API and streaming, and data to compare.
pub fn check_baseline(dir: &Path, plan: &Plan, seed: Option<u64>) -> Result<()> {
    let (baseline, _) = read_run_dir(dir)?;
    comparable_data("baseline", &baseline)?;
    let header = baseline.header.unwrap_or_default();
    let planned = RunHeader {
        plan: plan.name.clone(),
        seed: seed.unwrap_or(plan.seed),
        model: plan.target.model.clone(),
        api: plan.target.api.as_str().to_string(),
        stream: plan.target.stream,
        plan_sha256: header.plan_sha256.clone(),
        ..RunHeader::default()
    };
    compare::comparable(&header, &planned, false)
        .map(|_| ())
        .map_err(|e| Error::usage(format!("--baseline {}: {e}", dir.display())))
}

/// The async runtime: `threads` worker threads, or one per core.
pub fn runtime(threads: Option<usize>) -> Result<tokio::runtime::Runtime> {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if let Some(threads) = threads {
        if threads == 0 {
            return Err(Error::usage("--threads must be at least 1"));
        }
        builder.worker_threads(threads);
    }
    builder
        .enable_all()
        .build()
        .map_err(|e| Error::run(format!("cannot start the async runtime: {e}")))
}
