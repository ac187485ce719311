//! `summary.csv` (from a template: one row per phase, metric and statistic) and `requests.csv`
//! (one row per request, written with the csv crate).

use std::io::Write;

use serde::Serialize;

use super::{template, Exporter, ReportContext};
use crate::error::{Error, Result};

const SUMMARY_TEMPLATE: &str = include_str!("templates/summary.csv.j2");

/// A text cell no spreadsheet runs as a formula (a plan's names, a server's finish_reason and
/// error text alike).
fn text<S: serde::Serializer, T: AsRef<str>>(
    value: &T,
    s: S,
) -> std::result::Result<S::Ok, S::Error> {
    s.serialize_str(&crate::escape::csv_cell(value.as_ref()))
}

fn optional_text<S: serde::Serializer>(
    value: &Option<&str>,
    s: S,
) -> std::result::Result<S::Ok, S::Error> {
    match value {
        Some(value) => text(value, s),
        None => s.serialize_none(),
    }
}

pub struct SummaryCsv;

impl Exporter for SummaryCsv {
    fn file_name(&self) -> String {
        "summary.csv".into()
    }

    fn render(&self, context: &ReportContext) -> Result<Vec<u8>> {
        let summary = &context.summary;
        let values = minijinja::context! {
            overall => scope_values(&summary.overall),
            phases => summary.phases.iter().map(scope_values).collect::<Vec<_>>(),
        };
        let context = minijinja::context! {
            scope_values => values,
            ..minijinja::Value::from_serialize(summary)
        };
        template::render_value("summary.csv.j2", SUMMARY_TEMPLATE, context).map(String::into_bytes)
    }
}

/// One scope's value of a metric that is not a distribution (a share, a rate per second, an
/// aggregate), as the metric table reads it: summary.csv's `value` rows, so that a metric
/// added to the table is a row without a line in the template.
#[derive(Serialize)]
struct ScopeValue {
    metric: &'static str,
    value: f64,
    unit: &'static str,
}

fn scope_values(scope: &crate::metrics::PhaseMetrics) -> Vec<ScopeValue> {
    crate::metrics::Metric::all()
        .filter_map(|metric| {
            let unit = metric.scope_value_unit()?;
            Some(ScopeValue {
                metric: metric.name(),
                value: scope.value(metric, None)?,
                unit,
            })
        })
        .collect()
}

/// `steps.csv`: one row per measured step of a sweep and probe of a search (only for runs
/// that have them).
pub struct StepsCsv;

#[derive(Serialize)]
struct StepCsvRow<'a> {
    #[serde(serialize_with = "text")]
    series: &'a str,
    #[serde(serialize_with = "text")]
    phase: &'a str,
    probe: bool,
    load: f64,
    unit: &'static str,
    achieved_rps: f64,
    output_tps: f64,
    ttft_p50_ms: Option<f64>,
    ttft_p99_ms: Option<f64>,
    itl_p99_ms: Option<f64>,
    tpot_p50_ms: Option<f64>,
    e2e_p99_ms: Option<f64>,
    error_rate: f64,
    goodput_rps: Option<f64>,
    ok: u64,
    result: &'a str,
    marginal: bool,
    #[serde(serialize_with = "text")]
    objectives: String,
    #[serde(serialize_with = "text")]
    why: &'a str,
}

impl Exporter for StepsCsv {
    fn file_name(&self) -> String {
        "steps.csv".into()
    }

    fn applies(&self, context: &ReportContext) -> bool {
        !context.summary.steps.is_empty()
    }

    fn render(&self, context: &ReportContext) -> Result<Vec<u8>> {
        let mut out = ::csv::Writer::from_writer(Vec::new());
        for step in &context.summary.steps {
            let row = StepCsvRow {
                series: &step.series,
                phase: &step.phase,
                probe: step.probe,
                load: step.load,
                unit: step.unit_symbol,
                achieved_rps: step.achieved_rps,
                output_tps: step.output_tps,
                ttft_p50_ms: step.ttft_p50_ms,
                ttft_p99_ms: step.ttft_p99_ms,
                itl_p99_ms: step.itl_p99_ms,
                tpot_p50_ms: step.tpot_p50_ms,
                e2e_p99_ms: step.e2e_p99_ms,
                error_rate: step.error_rate,
                goodput_rps: step.goodput_rps,
                ok: step.ok,
                result: &step.result,
                marginal: step.marginal,
                objectives: step
                    .objectives
                    .iter()
                    .map(|o| {
                        format!(
                            "{}: {} {}",
                            o.assertion,
                            o.observed,
                            if o.passed { "pass" } else { "fail" }
                        )
                    })
                    .collect::<Vec<_>>()
                    .join("; "),
                why: step
                    .ended_early
                    .as_deref()
                    .or(step.saturation.as_deref())
                    .or(step.over_limits.as_deref())
                    .unwrap_or(""),
            };
            out.serialize(row)
                .map_err(|e| Error::run(format!("cannot write steps.csv: {e}")))?;
        }
        out.into_inner()
            .map_err(|e| Error::run(format!("cannot write steps.csv: {e}")))
    }
}

/// `timeseries.csv`: the run over time, one row per window.
pub struct TimeseriesCsv;

#[derive(Serialize)]
struct SeriesCsvRow<'a> {
    t_s: f64,
    #[serde(serialize_with = "text")]
    phase: &'a str,
    sent: u64,
    completed: u64,
    failed: u64,
    throttled: u64,
    in_flight: f64,
    output_tokens_per_s: f64,
    ttft_p50_ms: Option<f64>,
    ttft_p99_ms: Option<f64>,
    itl_p50_ms: Option<f64>,
    itl_p99_ms: Option<f64>,
    e2e_p50_ms: Option<f64>,
    e2e_p99_ms: Option<f64>,
    /// Agent sessions running (empty in a run without sessions).
    sessions: Option<f64>,
}

impl Exporter for TimeseriesCsv {
    fn file_name(&self) -> String {
        "timeseries.csv".into()
    }

    fn applies(&self, context: &ReportContext) -> bool {
        !context.summary.timeseries.points.is_empty()
    }

    fn render(&self, context: &ReportContext) -> Result<Vec<u8>> {
        let series = &context.summary.timeseries;
        let mut out = ::csv::Writer::from_writer(Vec::new());
        let round = |v: Option<f64>| v.map(|v| (v * 1000.0).round() / 1000.0);
        for point in &series.points {
            // The phase sending at the window's middle (the latest to have started).
            let middle = point.t_s + series.interval_s / 2.0;
            let phase = series
                .phases
                .iter()
                .rfind(|b| b.from_s <= middle && middle <= b.to_s.max(b.from_s))
                .map_or("", |b| b.name.as_str());
            out.serialize(SeriesCsvRow {
                t_s: point.t_s,
                phase,
                sent: point.sent,
                completed: point.completed,
                failed: point.failed,
                throttled: point.throttled,
                in_flight: (point.in_flight * 1000.0).round() / 1000.0,
                output_tokens_per_s: (point.output_tokens_per_s * 1000.0).round() / 1000.0,
                ttft_p50_ms: round(point.ttft_p50_ms),
                ttft_p99_ms: round(point.ttft_p99_ms),
                itl_p50_ms: round(point.itl_p50_ms),
                itl_p99_ms: round(point.itl_p99_ms),
                e2e_p50_ms: round(point.e2e_p50_ms),
                e2e_p99_ms: round(point.e2e_p99_ms),
                sessions: round(point.sessions),
            })
            .map_err(|e| Error::run(format!("cannot write timeseries.csv: {e}")))?;
        }
        out.into_inner()
            .map_err(|e| Error::run(format!("cannot write timeseries.csv: {e}")))
    }
}

pub struct RequestsCsv;

#[derive(Serialize)]
struct Row<'a> {
    #[serde(serialize_with = "text")]
    phase: &'a str,
    seq: u64,
    intended_send_ms: f64,
    actual_send_ms: f64,
    schedule_lag_ms: f64,
    input_tokens_planned: u32,
    prompt_tokens: Option<u64>,
    output_tokens_planned: u32,
    completion_tokens: Option<u64>,
    token_source: Option<&'static str>,
    ttft_ms: Option<f64>,
    e2e_ms: Option<f64>,
    tpot_ms: Option<f64>,
    /// Opening its connection, inside its TTFT; empty when it reused one.
    connect_ms: Option<f64>,
    /// Its body's upload (bodies of 64 KiB or more), inside its TTFT.
    upload_ms: Option<f64>,
    chunks: usize,
    #[serde(serialize_with = "optional_text")]
    finish_reason: Option<&'a str>,
    /// The model its answer named.
    #[serde(serialize_with = "optional_text")]
    model: Option<&'a str>,
    http_status: Option<u16>,
    error: Option<&'static str>,
    #[serde(serialize_with = "optional_text")]
    error_detail: Option<&'a str>,
    /// The wait a throttling server asked for (`Retry-After`, `retry-after-ms`).
    retry_after_ms: Option<u64>,
}

impl Exporter for RequestsCsv {
    fn file_name(&self) -> String {
        "requests.csv".into()
    }

    fn render(&self, context: &ReportContext) -> Result<Vec<u8>> {
        let mut bytes = Vec::new();
        self.write_to(context, &mut bytes)?;
        Ok(bytes)
    }

    /// One row per record, streamed: the records are read one at a time.
    fn write_to(&self, context: &ReportContext, out: &mut dyn Write) -> Result<()> {
        use crate::records::TokenSource;
        let mut writer = ::csv::Writer::from_writer(out);
        let ms = |us: u64| us as f64 / 1000.0;
        let mut failure: Option<::csv::Error> = None;
        context.records.for_each(|record| {
            if failure.is_some() {
                return;
            }
            let ttft_ms = record.ttft_us.map(ms);
            let e2e_ms = record.e2e_us.map(ms);
            // As the metric table computes it, for the requests it takes it from.
            let tpot_ms = crate::metrics::Metric::Tpot.sample(record, false);
            let written = writer.serialize(Row {
                phase: context
                    .phase_names
                    .get(record.phase)
                    .map(String::as_str)
                    .unwrap_or(""),
                seq: record.seq,
                intended_send_ms: ms(record.intended_send_us),
                actual_send_ms: ms(record.actual_send_us),
                schedule_lag_ms: ms(record
                    .actual_send_us
                    .saturating_sub(record.intended_send_us)),
                input_tokens_planned: record.input_tokens_planned,
                prompt_tokens: record.prompt_tokens,
                output_tokens_planned: record.output_tokens_planned,
                completion_tokens: record.completion_tokens,
                token_source: record.token_source.map(|s| match s {
                    TokenSource::Usage => "usage",
                    TokenSource::Tokenizer => "tokenizer",
                    TokenSource::OnePerChunk => "one_per_chunk",
                    TokenSource::UsageByTokenizer => "usage_by_tokenizer",
                    TokenSource::Estimated => "estimated",
                }),
                ttft_ms,
                e2e_ms,
                tpot_ms,
                connect_ms: record.connect_us.map(ms),
                upload_ms: record.upload_us.map(ms),
                chunks: record.chunks.len(),
                finish_reason: record.finish_reason.as_deref(),
                model: record.model.as_deref(),
                http_status: record.http_status,
                error: record.error.map(|e| e.as_str()),
                error_detail: record.error_detail.as_deref(),
                retry_after_ms: record.rate_limit.as_ref().and_then(|l| l.retry_after_ms),
            });
            if let Err(e) = written {
                failure = Some(e);
            }
        })?;
        let io = |e: std::io::Error| Error::io("write", self.file_name(), e);
        if let Some(failure) = failure {
            return Err(match failure.into_kind() {
                ::csv::ErrorKind::Io(e) => io(e),
                other => Error::run(format!("cannot encode requests.csv: {other:?}")),
            });
        }
        writer.flush().map_err(io)
    }
}
