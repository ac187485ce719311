//! Reports: a run's aggregates and verdicts rendered to files, one format per exporter.
//!
//! Like hyperfine's `export/`, each output format is one small file behind the [`Exporter`]
//! trait: Markdown and the summary CSV come from minijinja templates built into the binary,
//! `summary.json` from serde, `requests.csv` from the csv crate, and a user's own template
//! (`--template FILE`) renders with the same context as the built-in ones. This module only
//! presents: it computes no metric and judges no assertion.

pub mod benchmarks;
mod charts;
mod csv;
mod html;
mod json;
pub mod junit;
mod markdown;
pub mod schedule;
pub mod server_sweep;
pub mod steps;
pub(crate) mod svg;
pub(crate) mod template;
mod terminal;
pub mod vllm_bench;

use std::io::Write;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::error::{Error, Result};
use crate::metrics::{Aggregates, PhaseMetrics, Warning};
use crate::records::{LogLine, RequestRecord, RunHeader, RunLog};
pub use crate::verdict::{RunVerdict, VerdictStatus};
use crate::verdict::{VerdictResult, Verdicts};

/// The version of summary.json's layout (schemas/summary.schema.json).
pub const SCHEMA_VERSION: u32 = 3;

pub use template::UserTemplate;
pub use terminal::terminal_summary;

/// The document behind every report; `summary.json` is exactly this (see
/// schemas/summary.schema.json), and templates see it as their context.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    /// The version of this document's layout.
    pub schema_version: u32,
    /// The run passed its gate: what its exit code says (0). Same as `verdict.status == "pass"`.
    pub passed: bool,
    /// The one verdict, with its reasons: what every output of the run states.
    pub verdict: RunVerdict,
    /// The run was stopped before its plan finished.
    pub interrupted: bool,
    /// Why the plan's abort conditions stopped the run, if they did.
    pub aborted: Option<String>,
    /// The comparison with a baseline, when one was asked for.
    pub comparison: Option<crate::compare::Comparison>,
    /// Each SLA assertion, judged.
    pub verdicts: Vec<VerdictResult>,
    /// Each phase's metrics.
    pub phases: Vec<PhaseMetrics>,
    /// All recorded phases together.
    pub overall: PhaseMetrics,
    /// Each recorded phase's steady window (its warm-up transient cut) and its numbers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub steady: Option<crate::metrics::steady::Steady>,
    /// What the plan's search found (its headline and bracket), if it had one.
    pub capacity: Option<crate::verdict::CapacityResult>,
    /// Each sweep and the search as a whole: where the objectives stop holding.
    pub series: Vec<crate::verdict::SeriesResult>,
    /// Each measured step of a sweep and probe of a search, judged on the objectives.
    pub steps: Vec<steps::StepRow>,
    /// The saturation curve of each sweep and search (latency against achieved throughput).
    pub curves: Vec<steps::Curve>,
    /// The run over time, window by window.
    pub timeseries: crate::metrics::timeseries::TimeSeries,
    /// The recorded requests by input length.
    pub by_input: Vec<crate::metrics::InputBucket>,
    /// The recorded requests by batch size, for an API that answers batches.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub by_batch: Vec<crate::metrics::BatchBucket>,
    /// The recorded requests by turn, in a multi-turn workload.
    pub by_turn: Vec<crate::metrics::TurnBucket>,
    /// The recorded turns by what they answer (user messages, tool results), in an agent loop.
    pub by_turn_kind: Vec<crate::metrics::TurnKindBucket>,
    /// The recorded requests by the media they carried.
    pub by_media: Vec<crate::metrics::MediaBucket>,
    /// Each error class: how many, when, and what the first said.
    pub error_samples: Vec<crate::metrics::ErrorSample>,
    /// The server's telemetry over the run, when it was scraped.
    pub server: Option<crate::metrics::server::ServerTelemetry>,
    /// The server llmload started for the run (the plan's `server` block): its command line,
    /// time to ready, how it ended, its CPU and memory (not the client's), its log's last lines.
    pub launched_server: Option<crate::server::ServerRun>,
    /// A short series for a chart in Markdown (Mermaid): TTFT p99 over time.
    pub over_time: Option<OverTime>,
    /// Warnings and notes.
    pub warnings: Vec<Warning>,
    /// The run's header and duration.
    pub context: RunContext,
    /// Its headline numbers with their 95% confidence intervals, as `--export` writes them and
    /// `llmload history` reads them.
    pub measures: Vec<benchmarks::Measure>,
}

/// TTFT p99 and E2E p99 over time, at most [`OverTime::POINTS`] points (windows merged by taking
/// the largest), for a Mermaid chart in report.md: what a pull request shows.
#[derive(Debug, Clone, Serialize)]
pub struct OverTime {
    /// Each point's start, seconds, as the chart's labels.
    pub labels: Vec<String>,
    /// TTFT p99 per point, ms (0 where no first token arrived).
    pub ttft_p99_ms: Vec<f64>,
    /// E2E p99 per point, ms.
    pub e2e_p99_ms: Vec<f64>,
    /// The chart's top.
    pub max_ms: f64,
}

impl OverTime {
    /// The most points a Markdown chart gets: more is unreadable in a pull request.
    pub const POINTS: usize = 40;

    fn of(series: &crate::metrics::timeseries::TimeSeries) -> Option<OverTime> {
        if series.points.len() < 3 {
            return None;
        }
        let per = series.points.len().div_ceil(Self::POINTS);
        let round = |v: f64| (v * 10.0).round() / 10.0;
        let mut labels = Vec::new();
        let (mut ttft, mut e2e) = (Vec::new(), Vec::new());
        // Mermaid draws no gap: a point without a value repeats the one before it.
        let (mut last_ttft, mut last_e2e) = (None::<f64>, None::<f64>);
        for chunk in series.points.chunks(per) {
            let worst = |f: &dyn Fn(&crate::metrics::timeseries::SeriesPoint) -> Option<f64>| {
                chunk.iter().filter_map(f).reduce(f64::max).map(round)
            };
            let (t, e) = (worst(&|p| p.ttft_p99_ms), worst(&|p| p.e2e_p99_ms));
            if t.is_none() && e.is_none() && last_ttft.is_none() && last_e2e.is_none() {
                continue;
            }
            last_ttft = t.or(last_ttft);
            last_e2e = e.or(last_e2e);
            labels.push(format!("{:.0}s", chunk[0].t_s));
            ttft.push(last_ttft.unwrap_or(0.0));
            e2e.push(last_e2e.unwrap_or(0.0));
        }
        if labels.len() < 3 {
            return None;
        }
        let max_ms = ttft.iter().chain(&e2e).copied().fold(1.0, f64::max);
        Some(OverTime {
            labels,
            ttft_p99_ms: ttft,
            e2e_p99_ms: e2e,
            max_ms: (max_ms * 1.1).ceil(),
        })
    }
}

/// What a run was judged to be, beside its aggregates.
pub struct Judged {
    /// Every aggregate.
    pub aggregates: Aggregates,
    /// The plan's assertions, judged.
    pub verdicts: Verdicts,
    /// The comparison with a baseline, when one was asked for.
    pub comparison: Option<crate::compare::Comparison>,
    /// The one verdict.
    pub verdict: RunVerdict,
}

/// The run's header (tool version, plan, seed, target without credentials, model...) and its
/// duration.
#[derive(Debug, Clone, Serialize)]
pub struct RunContext {
    #[serde(flatten)]
    /// The run's header.
    pub header: RunHeader,
    /// From the run's start to its end (or its last response).
    pub duration_s: f64,
    /// The client process's peak resident memory, where measured.
    pub client_peak_rss_mb: Option<f64>,
    /// The run's API answers batches whole (embeddings, rerank): its tables show E2E, E2E
    /// per input and inputs per second, by batch size, rather than token timings.
    pub answers_batches: bool,
}

/// Where per-request exporters find the records.
pub enum Records<'a> {
    /// Held in memory.
    InMemory(&'a [RequestRecord]),
    /// Streamed from `records.jsonl`, one at a time: a long run's records never all sit in
    /// memory.
    File(&'a Path),
}

impl Records<'_> {
    /// Calls `each` with every record, in order.
    pub fn for_each(&self, mut each: impl FnMut(&RequestRecord)) -> Result<()> {
        match self {
            Records::InMemory(records) => {
                records.iter().for_each(each);
                Ok(())
            }
            Records::File(path) => crate::records::read_lines(path, |line| {
                if let LogLine::Request(record) = line {
                    each(&record);
                }
            }),
        }
    }
}

/// What exporters render from.
pub struct ReportContext<'a> {
    /// The document every exporter renders.
    pub summary: Summary,
    /// The records, for per-request files.
    pub records: Records<'a>,
    /// Phase names by index, for per-request files.
    pub phase_names: Vec<String>,
}

impl<'a> ReportContext<'a> {
    /// `log` needs its header, phases and end, not its records: those come from `records`.
    pub fn new(log: &RunLog, records: Records<'a>, judged: Judged) -> ReportContext<'a> {
        let Judged {
            aggregates,
            verdicts,
            comparison,
            verdict,
        } = judged;
        let header = log.header.clone();
        let duration_s = log
            .end
            .as_ref()
            .map(|e| e.at_us)
            .or(aggregates.last_response_us)
            .unwrap_or(0) as f64
            / 1e6;
        let header = header.unwrap_or_default();
        let answers_batches = crate::api::Api::from_name(&header.api)
            .is_some_and(|api| api.dialect().capabilities().kind.answers_batches());
        let context = RunContext {
            answers_batches,
            header,
            duration_s,
            client_peak_rss_mb: aggregates
                .client_peak_rss_bytes
                .map(|bytes| bytes as f64 / (1024.0 * 1024.0)),
        };
        let mut phase_names = Vec::new();
        for phase in &log.phases {
            if phase_names.len() <= phase.index {
                phase_names.resize(phase.index + 1, String::new());
            }
            phase_names[phase.index] = phase.name.clone();
        }
        let step_rows = steps::rows(&verdicts.steps, &aggregates.phases);
        let mut summary = Summary {
            schema_version: SCHEMA_VERSION,
            capacity: verdicts.capacity,
            series: verdicts.series,
            curves: steps::curves(&step_rows),
            steps: step_rows,
            over_time: OverTime::of(&aggregates.timeseries),
            timeseries: aggregates.timeseries,
            by_input: aggregates.by_input,
            by_batch: aggregates.by_batch,
            by_turn: aggregates.by_turn,
            by_turn_kind: aggregates.by_turn_kind,
            by_media: aggregates.by_media,
            error_samples: aggregates.error_samples,
            server: aggregates.server,
            launched_server: aggregates.launched_server,
            passed: verdict.status == VerdictStatus::Pass,
            verdict,
            interrupted: aggregates.interrupted,
            aborted: aggregates.aborted,
            comparison,
            verdicts: verdicts.results,
            phases: aggregates.phases,
            overall: aggregates.overall,
            steady: aggregates.steady,
            warnings: aggregates.warnings,
            context,
            measures: Vec::new(),
        };
        summary.measures = benchmarks::all_measures(&summary);
        ReportContext {
            summary,
            records,
            phase_names,
        }
    }
}

/// One output format.
pub trait Exporter {
    /// The file it writes in the report directory.
    fn file_name(&self) -> String;

    /// The whole file.
    fn render(&self, context: &ReportContext) -> Result<Vec<u8>>;

    /// Whether the run has anything for this file (steps.csv needs steps).
    fn applies(&self, _context: &ReportContext) -> bool {
        true
    }

    /// Writes the rendering to `out`; exporters of per-request files stream instead. An I/O
    /// error is reported on [`Exporter::file_name`]; [`write_all`] names the whole path.
    fn write_to(&self, context: &ReportContext, out: &mut dyn Write) -> Result<()> {
        let bytes = self.render(context)?;
        out.write_all(&bytes)
            .map_err(|e| Error::io("write", self.file_name(), e))
    }
}

/// The built-in exporters, plus one per user template.
pub fn exporters(user_templates: &[UserTemplate]) -> Vec<&dyn Exporter> {
    let mut all: Vec<&dyn Exporter> = vec![
        &markdown::Markdown,
        &csv::SummaryCsv,
        &csv::RequestsCsv,
        &csv::StepsCsv,
        &csv::TimeseriesCsv,
        &json::Json,
        &html::Html,
    ];
    all.extend(user_templates.iter().map(|t| t as &dyn Exporter));
    all
}

/// Renders every exporter into `dir`; returns the files written.
pub fn write_all(
    dir: &Path,
    context: &ReportContext,
    user_templates: &[UserTemplate],
) -> Result<Vec<PathBuf>> {
    let mut written = Vec::new();
    for exporter in exporters(user_templates) {
        if !exporter.applies(context) {
            continue;
        }
        let path = dir.join(exporter.file_name());
        let at_path = |e: Error| match e {
            Error::Io { action, source, .. } => Error::io(action, &path, source),
            other => other,
        };
        // Whole or not at all: a full disk never leaves a truncated report.
        let mut failure = None;
        crate::files::write_whole(&path, |out| {
            exporter.write_to(context, out).map_err(|e| {
                let message = e.to_string();
                failure = Some(e);
                std::io::Error::other(message)
            })
        })
        .map_err(|e| match failure.take() {
            Some(error) => at_path(error),
            None => Error::io("write", &path, e),
        })?;
        written.push(path);
    }
    Ok(written)
}

const COMPARISON_TEMPLATE: &str = include_str!("templates/comparison.md.j2");
const STEP_SUMMARY_TEMPLATE: &str = include_str!("templates/step-summary.md.j2");

/// The Markdown table of a baseline comparison, fit to paste into a pull request.
pub fn comparison_markdown(comparison: &crate::compare::Comparison) -> Result<String> {
    template::render_value(
        "comparison.md.j2",
        COMPARISON_TEMPLATE,
        minijinja::Value::from_serialize(comparison),
    )
}

/// The Markdown appended to GitHub Actions' job summary (`$GITHUB_STEP_SUMMARY`).
pub fn step_summary(
    summary: &Summary,
    comparison: Option<&crate::compare::Comparison>,
) -> Result<String> {
    let mut text = template::render_value(
        "step-summary.md.j2",
        STEP_SUMMARY_TEMPLATE,
        minijinja::Value::from_serialize(summary),
    )?;
    if let Some(comparison) = comparison {
        text.push_str(&comparison_markdown(comparison)?);
        text.push('\n');
    }
    Ok(text)
}
