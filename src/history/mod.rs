//! `llmload history`: many runs of one plan, in the order they ran, and the runs that stand out.
//!
//! Each run is read from its `summary.json` (its verdict, header and `measures`: the headline
//! numbers with their 95% intervals, as `--export` writes them); a run whose summary is missing
//! or older than the measures is judged again from its records and plan. Nothing else of a run
//! is held, so a history of a thousand runs costs the parse of their summaries.
//!
//! What stands out ([`noise`]): a run whose whole interval lies beyond the band of the runs before
//! it, the same reading of "beyond noise" as `compare`'s (the whole 95% interval of a change,
//! past a tolerance), with the tolerance taken from the history itself.
//!
//! It is not `compare` (two runs, resampled request by request, a gate) and judges no run: a
//! history informs, the run's own verdict gates.

pub mod noise;
pub mod render;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::metrics::table::Better;
use crate::report::benchmarks::Open;

pub use noise::{Band, Change, WINDOW};

/// The largest `summary.json` read: a run's summary is some hundreds of KB.
const MAX_SUMMARY_BYTES: u64 = 256 << 20;

/// How deep a folder is searched for run directories.
const MAX_DEPTH: usize = 4;

/// What `llmload history` is asked.
#[derive(Debug, Clone, Default)]
pub struct HistoryOptions {
    /// `--label KEY`: runs are named by this label's value (`commit`), shown beside their time.
    pub label: Option<String>,
}

/// One headline number of one run.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Measured {
    /// `ttft-p99-ms`.
    pub slug: String,
    /// `ttft p99`.
    pub name: String,
    /// `ms`.
    pub unit: String,
    /// Its value.
    pub value: f64,
    /// Its 95% interval, where known.
    pub bounds: Option<(f64, f64)>,
    /// The ends of `bounds` its sample cannot reach.
    #[serde(default, skip_serializing_if = "Open::is_neither")]
    pub open: Open,
    /// Which way is better.
    pub direction: Better,
}

/// One objective of one run, as judged.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Objective {
    /// The assertion as the plan writes it.
    pub assertion: String,
    /// Whether it held.
    pub passed: bool,
    #[serde(default)]
    /// What was observed, as the report shows it.
    pub observed_display: String,
}

/// One run, as a history holds it.
#[derive(Debug, Clone, Serialize)]
pub struct RunPoint {
    /// Its directory, as found.
    pub dir: String,
    /// UTC, RFC 3339.
    pub started_at: String,
    #[serde(skip)]
    started_unix_ns: Option<u64>,
    /// Its plan's name and model: the history it belongs to.
    #[serde(skip)]
    plan: String,
    #[serde(skip)]
    model: String,
    /// The value of the `--label` key asked for, if the run has it.
    pub label: Option<String>,
    /// Every label of the run.
    pub labels: BTreeMap<String, String>,
    /// `pass`, `fail`, `interrupted`, `not_carried_out`, `not_decided` (which, like the last
    /// two, is no part of any band).
    pub status: String,
    /// Why, when it did not pass.
    pub reasons: Vec<String>,
    /// The llmload that ran it.
    pub tool_version: String,
    /// SHA-256 of its plan's text.
    pub plan_sha256: String,
    /// Its plan differs from the run before it (its SHA-256).
    pub plan_changed: bool,
    /// Where its requests went (no credentials).
    pub target: String,
    /// Its headline numbers.
    pub measures: Vec<Measured>,
    /// The plan's assertions, as judged.
    pub objectives: Vec<Objective>,
    /// Whether its numbers can be set against others': carried out to its end, decided, and
    /// not limited by its client.
    pub trusted: bool,
    /// Why it is no part of any band, when it is not (not carried out, not decided, its client
    /// limited it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub set_apart: Option<String>,
    /// The command line of the server it started (`{port}` as written), if it started one: runs
    /// of other server configurations are other histories.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
}

impl RunPoint {
    /// The run's measure `slug`.
    pub fn measure(&self, slug: &str) -> Option<&Measured> {
        self.measures.iter().find(|m| m.slug == slug)
    }

    /// How the run is named: its label, else its start time.
    pub fn name(&self) -> &str {
        self.label.as_deref().unwrap_or(&self.started_at)
    }
}

/// One measure across a plan's runs.
#[derive(Debug, Clone, Serialize)]
pub struct MeasureHistory {
    /// The measure (`ttft-p99-ms`).
    pub slug: String,
    /// Its name in reports (`ttft p99`).
    pub name: String,
    /// Its unit.
    pub unit: String,
    /// Which way is better.
    pub direction: Better,
    /// Per run (in the runs' order): the band of the runs before it, when there were enough.
    pub bands: Vec<Option<Band>>,
    /// Per run: how it stands against its band.
    pub changes: Vec<Option<Change>>,
    /// The band the next run will be set against (the latest trusted runs').
    pub band_now: Option<Band>,
}

/// A run whose measure lies beyond the noise of the runs before it.
#[derive(Debug, Clone, Serialize)]
pub struct StandOut {
    /// The run's position in the history (from 0).
    pub run: usize,
    /// The run's name (its label, or its start time).
    pub run_name: String,
    /// The measure (`ttft-p99-ms`).
    pub slug: String,
    /// The measure's name (`ttft p99`).
    pub measure: String,
    /// Its unit.
    pub unit: String,
    /// Its value.
    pub value: f64,
    /// The run's 95% interval, where known.
    pub bounds: Option<(f64, f64)>,
    /// The ends of `bounds` its sample cannot reach.
    #[serde(default, skip_serializing_if = "Open::is_neither")]
    pub open: Open,
    /// The band of the runs before it.
    pub band: Band,
    /// Worse or better.
    pub change: Change,
    /// The change from the band's median, in percent of it (none when the median is 0).
    pub percent: Option<f64>,
}

/// The runs of one plan against one model and server configuration, in order.
#[derive(Debug, Clone, Serialize)]
pub struct PlanHistory {
    /// The plan's name.
    pub plan: String,
    /// The model its runs asked for.
    pub model: String,
    /// The command line of the server its runs started, if they started one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
    /// Its runs, in the order they started.
    pub runs: Vec<RunPoint>,
    /// Its headline numbers.
    pub measures: Vec<MeasureHistory>,
    /// Every run that stands out, and in what.
    pub stand_outs: Vec<StandOut>,
}

/// A directory that was given but could not be read as a run.
#[derive(Debug, Clone, Serialize)]
pub struct Skipped {
    /// The directory.
    pub dir: String,
    /// Why it was left out.
    pub why: String,
}

/// A history: one [`PlanHistory`] per plan and model found.
#[derive(Debug, Clone, Serialize)]
pub struct History {
    /// The `--label` key runs are named by.
    pub label: Option<String>,
    /// How many runs before each set its band.
    pub window: usize,
    /// One history per plan and model.
    pub plans: Vec<PlanHistory>,
    /// Directories given that could not be read as runs.
    pub skipped: Vec<Skipped>,
}

/// Builds the history of the runs under `paths` (run directories, or folders holding them).
/// An error when none is a run.
pub fn build(paths: &[PathBuf], options: &HistoryOptions) -> Result<History> {
    let mut dirs = Vec::new();
    for path in paths {
        if !path.is_dir() {
            return Err(Error::usage(format!(
                "{} is not a directory: give run directories, or folders holding them",
                path.display()
            )));
        }
        find_runs(path, 0, &mut dirs);
    }
    dirs.sort();
    dirs.dedup();
    let mut runs = Vec::new();
    let mut skipped = Vec::new();
    for dir in dirs {
        match read_run(&dir, options) {
            Ok(Some(run)) => runs.push(run),
            Ok(None) => {}
            Err(e) => skipped.push(Skipped {
                dir: dir.display().to_string(),
                why: crate::error::shorten(&e.to_string()),
            }),
        }
    }
    if runs.is_empty() {
        let given: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
        let why = skipped
            .first()
            .map(|s| format!(" ({}: {})", s.dir, s.why))
            .unwrap_or_default();
        return Err(Error::usage(format!(
            "no llmload run in {}{why}: give run directories (left by `llmload run --out`), or \
             folders holding them",
            given.join(", ")
        )));
    }
    Ok(History {
        label: options.label.clone(),
        window: WINDOW,
        plans: group(runs),
        skipped,
    })
}

/// Whether `dir` is a run directory: it holds a plan and records or a summary.
fn is_run(dir: &Path) -> bool {
    dir.join("plan.kdl").is_file()
        && (dir.join("summary.json").is_file()
            || dir.join(crate::records::PLAIN_FILE).is_file()
            || dir.join(crate::records::ZSTD_FILE).is_file())
}

fn find_runs(dir: &Path, depth: usize, found: &mut Vec<PathBuf>) {
    if is_run(dir) {
        found.push(dir.to_path_buf());
        return;
    }
    if depth >= MAX_DEPTH {
        return;
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        // Symbolic links are not followed: a link back up would loop.
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            find_runs(&entry.path(), depth + 1, found);
        }
    }
}

/// What a history reads of `summary.json`; the rest of the file is skipped.
#[derive(Deserialize)]
struct SummaryHead {
    verdict: VerdictHead,
    #[serde(default)]
    interrupted: bool,
    #[serde(default)]
    verdicts: Vec<Objective>,
    context: crate::records::RunHeader,
    /// Absent in summaries written before `llmload history` read them.
    measures: Option<Vec<Measured>>,
    #[serde(default)]
    warnings: Vec<WarningHead>,
}

/// What a history reads of a run's warning.
#[derive(Deserialize)]
struct WarningHead {
    severity: String,
    code: String,
}

#[derive(Deserialize)]
struct VerdictHead {
    status: String,
    #[serde(default)]
    reasons: Vec<String>,
}

/// One run directory read; `None` for a shard's directory (its merge is the run).
fn read_run(dir: &Path, options: &HistoryOptions) -> Result<Option<RunPoint>> {
    let summary_path = dir.join("summary.json");
    let head = crate::files::read_text_bounded(&summary_path, MAX_SUMMARY_BYTES)
        .ok()
        .and_then(|text| serde_json::from_str::<SummaryHead>(&text).ok())
        .filter(|head| head.measures.is_some());
    let head = match head {
        Some(head) => head,
        None => judge_again(dir)?,
    };
    let header = head.context;
    if header.shard.is_some() {
        return Ok(None);
    }
    let status = head.verdict.status;
    let set_apart = set_apart(&status, head.interrupted, &head.warnings);
    Ok(Some(RunPoint {
        dir: dir.display().to_string(),
        started_at: header.started_at,
        started_unix_ns: header.started_unix_ns,
        plan: header.plan,
        model: header.model,
        label: options
            .label
            .as_ref()
            .and_then(|key| header.labels.get(key).cloned()),
        labels: header.labels,
        status,
        reasons: head.verdict.reasons,
        tool_version: header.tool_version,
        plan_sha256: header.plan_sha256,
        plan_changed: false,
        target: header.target,
        measures: head
            .measures
            .unwrap_or_default()
            .into_iter()
            .filter(|m| m.value.is_finite())
            .collect(),
        objectives: head.verdicts,
        trusted: set_apart.is_none(),
        set_apart,
        server: header.server.map(|server| server.command),
    }))
}

/// Why a run's numbers are no part of any band, if they are not: it was not carried out to its
/// end, its data could not decide its judgements, or its client limited it (a warning that the
/// client, not the server, set the numbers).
fn set_apart(status: &str, interrupted: bool, warnings: &[WarningHead]) -> Option<String> {
    if interrupted || !matches!(status, "pass" | "fail") {
        return Some(format!(
            "{}: not a measure of the server",
            status.replace('_', " ")
        ));
    }
    let limits: Vec<&str> = warnings
        .iter()
        .filter(|w| w.severity == "warning")
        .map(|w| w.code.as_str())
        .filter(|code| {
            crate::metrics::warnings::CLIENT_LIMITS
                .iter()
                .any(|limit| limit == code)
        })
        .collect();
    (!limits.is_empty()).then(|| format!("its client limited it ({})", limits.join(", ")))
}

/// A run without a readable summary (or one from before `measures`): judged again from its
/// records and plan, as `llmload report` would, without writing anything.
fn judge_again(dir: &Path) -> Result<SummaryHead> {
    let plan = crate::session::archived_plan(dir)?;
    let outcome = crate::session::judge(&plan, dir, &crate::session::Gate::default())?;
    let report = outcome.report();
    let summary = &report.summary;
    let value = serde_json::to_value(summary)
        .map_err(|e| Error::run(format!("cannot encode a summary: {e}")))?;
    serde_json::from_value(value)
        .map_err(|e| Error::run(format!("cannot read back a summary: {e}")))
}

/// Runs grouped by plan, model and server configuration, each group in the order its runs
/// started: a server sweep's configurations are one history each.
fn group(runs: Vec<RunPoint>) -> Vec<PlanHistory> {
    type Key = (String, String, Option<String>);
    let mut groups: BTreeMap<Key, Vec<RunPoint>> = BTreeMap::new();
    for run in runs {
        let key = (run.plan.clone(), run.model.clone(), run.server.clone());
        groups.entry(key).or_default().push(run);
    }
    groups
        .into_iter()
        .map(|((plan, model, server), mut runs)| {
            runs.sort_by(|a, b| {
                (a.started_unix_ns, &a.started_at, &a.dir).cmp(&(
                    b.started_unix_ns,
                    &b.started_at,
                    &b.dir,
                ))
            });
            for i in 1..runs.len() {
                runs[i].plan_changed = runs[i].plan_sha256 != runs[i - 1].plan_sha256;
            }
            let measures = noise::measure_histories(&runs);
            let stand_outs = noise::stand_outs(&runs, &measures);
            PlanHistory {
                plan,
                model,
                server,
                runs,
                measures,
                stand_outs,
            }
        })
        .collect()
}
