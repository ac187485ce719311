//! The plan stage: a KDL benchmark plan in, a typed and validated [`Plan`] out.
//!
//! This module owns the plan language: what each node means, its defaults, and the diagnostics a
//! user sees when a plan is wrong. It does not decide *when* requests are sent (that is
//! [`crate::planner`]) and it never touches the network.
//!
//! Every mistake found is reported, not only the first: [`load`] returns all diagnostics so that
//! `llmload check` can print them together.

pub mod data;
mod data_media;
pub mod fmt;
pub mod limits;
mod load;
mod media;
pub mod overrides;
mod parse;
mod phase;
pub mod profiles;
mod report;
mod server;
pub mod sessions;
mod sim;
mod sla;
mod steps;
pub(crate) mod suggest;
mod target;
mod trace_formats;
pub mod units;
mod workload;

/// The API a plan speaks is one of the dialects of [`crate::api`].
pub use crate::api::Api;
/// Metrics are named from the metric table, which every stage shares.
pub use crate::metrics::table::{Metric, MetricKind};
pub use load::{Arrivals, Load, LoadUnit, RateShape};
pub use media::*;
pub use phase::*;
pub use report::*;
pub use server::*;
pub use sim::*;
pub use sla::*;
pub use steps::*;
pub use target::*;

/// The price of a deployment of `gpus` GPUs at `dollars` each an hour (`cost { gpu-hour }`).
pub fn gpu_hour_price(dollars: f64, gpus: u64) -> crate::records::CostRate {
    crate::records::CostRate {
        dollars_per_hour: dollars * gpus as f64,
        basis: format!(
            "{gpus} GPU{} at {} a GPU-hour",
            if gpus == 1 { "" } else { "s" },
            units::format_price(dollars)
        ),
        per_gpu_hour: Some(dollars),
    }
}
pub use workload::*;

use std::path::Path;
use std::sync::Arc;

pub use crate::diagnostic::{PlanDiagnostic, PlanErrors};
pub use parse::{
    check_file, parse_archived_plan, parse_plan, parse_plan_with, parse_sim_profile, Checked,
    EnvSource, ParseOptions, Sources,
};

/// A whole benchmark plan, validated.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The plan's name (its `plan` node, or the file name): in reports and report directory names.
    pub name: String,
    /// Free text from `description`, shown nowhere but the plan.
    pub description: Option<String>,
    /// Seeds arrivals, the input mix, prompts and the simulator.
    pub seed: u64,
    /// Where requests go.
    pub target: Target,
    /// What each request asks for.
    pub workload: Workload,
    /// The phases, in the order they run.
    pub phases: Vec<Phase>,
    /// The SLA assertions, judged on the run's aggregates.
    pub sla: Vec<Assertion>,
    /// How the `sla` is judged (`confidence`, `undecided`).
    pub judging: Judging,
    /// Per-request objectives that define goodput.
    pub slo: Option<Slo>,
    /// What the deployment under test costs an hour (the `cost` block), which prices its tokens.
    pub cost: Option<crate::records::CostRate>,
    /// Each GPU type's price an hour, when the `cost` block prices GPUs by type: the run is
    /// priced by the GPUs its telemetry describes (then `cost` is `None`).
    pub gpu_prices: Vec<crate::records::GpuTypePrice>,
    /// Tolerances for comparing a run with a baseline (`llmload compare`, `run --baseline`).
    pub regression: Vec<Tolerance>,
    /// Conditions that stop a clearly failing run early (k6's abortOnFail), as a failed run.
    pub abort: Vec<AbortRule>,
    /// The capacity search, if the plan has one.
    pub search: Option<Search>,
    /// What each sweep step and search probe is judged on.
    pub objective: Objective,
    /// Settings of the embedded simulator, used when the target is `"sim"`.
    pub sim: SimSettings,
    /// The server llmload starts before the run and stops after it, if the plan has one.
    pub server: Option<ServerSettings>,
    /// The server's configurations the plan's load is run against in turn, if it sweeps them.
    pub server_sweep: Option<ServerSweep>,
    /// How the reports are made.
    pub report: ReportSettings,
    /// The plan's file name and text, kept for diagnostics and for the report's provenance.
    pub source: PlanSource,
}

#[derive(Debug, Clone)]
/// Where the plan came from, for diagnostics and the report's provenance.
pub struct PlanSource {
    /// The file name as given (what diagnostics show; relative paths resolve from it).
    pub file_name: String,
    /// The plan's text, as read.
    pub text: Arc<String>,
    /// Every file it includes, at any depth: its path relative to the plan's directory, and
    /// its text.
    pub includes: Vec<(String, Arc<String>)>,
    /// Every `(env)"NAME"` value it read: the variable's name and the value used.
    pub env: Vec<(String, String)>,
    /// The values set on the command line, as reports show them (the text holds them).
    pub overrides: Vec<String>,
}

impl Plan {
    /// The data files the plan reads (a dataset, traces): the path as written, and its SHA-256.
    pub fn data_files(&self) -> Vec<(String, String)> {
        let mut files: Vec<(String, String)> = Vec::new();
        if let Some(dataset) = &self.workload.dataset {
            files.push((dataset.shown.clone(), dataset.sha256.clone()));
        }
        if let Some((shown, sha256)) = &self.target.tools_file {
            files.push((shown.clone(), sha256.clone()));
        }
        if let Some(ResponseFormat::JsonSchema { shown, sha256, .. }) = &self.target.response_format
        {
            files.push((shown.clone(), sha256.clone()));
        }
        for phase in &self.phases {
            if let Load::Trace(trace) = &phase.load {
                if !files.iter().any(|(path, _)| *path == trace.shown) {
                    files.push((trace.shown.clone(), trace.sha256.clone()));
                }
            }
        }
        files
    }
}

impl Plan {
    /// Whether the plan has sweeps or a search: its `sla` lines that name no phase are then
    /// judged per step (and per probe), not over all recorded phases, which mix every load.
    pub fn is_stepped(&self) -> bool {
        self.search.is_some() || self.phases.iter().any(|p| p.step.is_some())
    }

    /// What every request body asks for besides its prompt: the run's and `llmload plan`'s.
    pub fn body_options(&self) -> crate::api::BodyOptions {
        crate::api::BodyOptions {
            model: self.target.model.clone(),
            stream: self.target.stream,
            continuous_usage: self.target.continuous_usage,
            ignore_eos: self.workload.ignore_eos,
            extra: std::sync::Arc::new(self.target.body.clone()),
        }
    }
}

/// Reads and validates a plan file. On failure, returns every diagnostic found.
pub fn load(path: &Path) -> Result<Plan, PlanErrors> {
    load_with(path, &[])
}

/// [`load`], with values set from the command line ([`overrides`]): the plan's text is edited,
/// then checked as any plan is.
pub fn load_with(path: &Path, set: &[overrides::Override]) -> Result<Plan, PlanErrors> {
    parse_with(&path.display().to_string(), &read_plan_text(path)?, set)
}

/// A plan's text (a file's, or one written from a command line), with values set from the
/// command line, checked as any plan is.
pub fn parse_with(
    file_name: &str,
    text: &str,
    set: &[overrides::Override],
) -> Result<Plan, PlanErrors> {
    let text = overrides::apply(text, set).map_err(|e| PlanErrors::io(e.to_string()))?;
    let mut plan = parse_plan(file_name, text)?;
    plan.source.overrides = set.iter().map(overrides::Override::shown).collect();
    Ok(plan)
}

/// The text of a plan file, refusing one too large to be a plan before reading it.
pub fn read_plan_text(path: &Path) -> Result<String, PlanErrors> {
    let file_name = path.display().to_string();
    let cannot =
        |err: std::io::Error| PlanErrors::io(format!("cannot read plan file {file_name}: {err}"));
    let size = std::fs::metadata(path).map_err(cannot)?.len();
    if size > limits::MAX_PLAN_BYTES {
        return Err(PlanErrors::io(format!(
            "{file_name} is {size} bytes: more than the largest plan allowed ({} bytes); is it a plan?",
            limits::MAX_PLAN_BYTES
        )));
    }
    let bytes = crate::files::read_bounded(path, limits::MAX_PLAN_BYTES).map_err(cannot)?;
    String::from_utf8(bytes).map_err(|_| {
        PlanErrors::io(format!(
            "{file_name} is not text (invalid UTF-8): is it a plan?"
        ))
    })
}
