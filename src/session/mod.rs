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
mod archive;
mod baseline;
mod decided;
mod execute;
mod live;
mod outcome;
pub mod outdir;
mod search;
mod server;
mod server_sweep;
mod shard;
mod standing;
mod target;
mod unreachable;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use sha2::Digest;

/// The run's one verdict is the verdict stage's; the session hands it out.
pub use crate::verdict::{Failure, NotCarriedOut, RunVerdict, Status, VerdictStatus};
pub use archive::{archived_plan, read_run_dir};
pub use baseline::{aggregates_of, check_baseline, compare_with, gpus_of};
pub use baseline::{MAX_COMPARED_REQUESTS, MIN_COMPARED_REQUESTS};
pub use execute::execute;
pub use outcome::{Execution, RunOutcome};
pub use server::permitted;
pub use server_sweep::{run_server_sweep, ConfigRun, ServerSweepOutcome};
pub use shard::{merge, refuse_shard, run_shard, ShardOutcome};
pub use target::{redact_url, TargetUrl};

use crate::compare::{self, Comparison};
use crate::error::{Error, Result};
use crate::executor::{self, Observer, RequestTemplate, RunConfig, Stop};
use crate::metrics::{self, Aggregates};
use crate::plan::{self, Endpoint, Plan};
use crate::planner::{self, WorkloadPrompts};
use crate::records::{self, RunHeader, RunLog};
use crate::report::{Judged, Records, ReportContext};
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
    /// Tell the observer how the plan's objectives stand while the run goes
    /// ([`executor::Event::Objectives`]): for a caller that shows them (the terminal's progress),
    /// as the judging costs the recorder's thread a few µs a request.
    pub objectives_live: bool,
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
    /// The plan's `server` block may start its command on this machine (`--allow-server`):
    /// without it a plan that would start one is refused, its command shown.
    pub allow_server: bool,
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
            objectives_live: false,
            stop: Stop::new(),
            gate: Gate::default(),
            shard: None,
            start_at: None,
            labels: Default::default(),
            allow_server: false,
        }
    }
}

/// What fails a run besides its SLA.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct Gate {
    /// Compare with this earlier run's directory; a regression fails the run.
    pub baseline: Option<PathBuf>,
    /// A warning (the run is not trustworthy) fails the run.
    pub fail_on_warning: bool,
}

/// Where a run keeps the gate it was judged by: re-rendering its reports judges it the same
/// way unless told otherwise (a regression found against a baseline is part of the run).
pub const GATE_FILE: &str = "gate.json";

impl Gate {
    /// The gate `dir`'s run was judged by, if it kept one.
    pub fn kept(dir: &Path) -> Result<Option<Gate>> {
        crate::files::read_json_if_present(&dir.join(GATE_FILE), 1 << 20, "a gate file")
    }

    /// Keeps this gate in `dir`, its baseline as an absolute path (a re-render may run from
    /// elsewhere).
    pub fn keep(&self, dir: &Path) -> Result<()> {
        let kept = Gate {
            baseline: self
                .baseline
                .as_ref()
                .map(|b| std::fs::canonicalize(b).unwrap_or_else(|_| b.clone())),
            fail_on_warning: self.fail_on_warning,
        };
        let path = dir.join(GATE_FILE);
        let json = serde_json::to_string_pretty(&kept)
            .map_err(|e| Error::run(format!("cannot encode the gate: {e}")))?;
        std::fs::write(&path, json + "\n").map_err(|e| Error::io("write", &path, e))
    }
}

/// Runs `plan` and judges it: [`execute`], then [`judge`].
pub fn run(plan: &Plan, options: &RunOptions) -> Result<RunOutcome> {
    let execution = execute(plan, options)?;
    let mut outcome = judge(plan, &options.out_dir, &options.gate)?;
    outcome.sim_writes = execution.sim_writes;
    Ok(outcome)
}

/// Judges the run whose records are in `dir`: aggregates in one streaming pass, the plan's SLA,
/// the comparison with a baseline, and the status.
pub fn judge(plan: &Plan, dir: &Path, gate: &Gate) -> Result<RunOutcome> {
    let records_path = records::find(dir)?;
    // One streaming pass: memory does not grow with the length of the run.
    let (log, mut aggregates) =
        metrics::compute_file_with(&records_path, plan.slo.as_ref(), plan.report.interval)?;
    refuse_shard(&log, dir)?;
    let telemetry = crate::telemetry::read(dir)?;
    if let Some(telemetry) = &telemetry {
        metrics::server::attach(&mut aggregates, &log, telemetry);
    }
    let gpus = telemetry.as_ref().map_or(&[][..], |t| t.gpus.as_slice());
    // A plan that prices GPUs by type is priced by the GPUs its telemetry described.
    if let Some(header) = log.header.as_ref().filter(|h| !h.gpu_prices.is_empty()) {
        metrics::cost::price_by_gpu_type(&mut aggregates, &header.gpu_prices, gpus);
    }
    aggregates.launched_server = crate::server::read_record(dir)?;
    let verdicts = verdict::evaluate_plan(plan, &aggregates);
    let mut status = Status::decide(&aggregates, &verdicts, None, gate.fail_on_warning);
    let comparison = match &gate.baseline {
        // A run that was not carried out is compared with nothing: it never compares clean.
        Some(_) if matches!(status, Status::NotCarriedOut(_)) => None,
        // Resampling needs every request's values: only a comparison reads them all in.
        Some(baseline) => {
            let current = RunLog::read_sampled(&records_path, MAX_COMPARED_REQUESTS)?;
            match compare_with(baseline, (gpus, &current), plan, false) {
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
        status = Status::decide(
            &aggregates,
            &verdicts,
            comparison.as_ref(),
            gate.fail_on_warning,
        );
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
