//! The minijinja environment shared by the built-in templates and users' own.

use std::path::{Path, PathBuf};

use minijinja::{Environment, Value};

use super::{Exporter, ReportContext};
use crate::error::{Error, Result};

/// Formats a number with `digits` decimals, or `-` for none.
fn num(value: Value, digits: Option<usize>) -> String {
    if value.is_none() || value.is_undefined() {
        return "-".into();
    }
    match f64::try_from(value.clone()) {
        Ok(v) => format!("{v:.*}", digits.unwrap_or(2)),
        Err(_) => value.to_string(),
    }
}

/// A fraction as a percentage.
fn pct(value: Value) -> String {
    match f64::try_from(value) {
        Ok(v) => format!("{:.2}%", v * 100.0),
        Err(_) => "-".into(),
    }
}

/// A CSV field, quoted when it must be.
fn csv_field(value: Value) -> String {
    let text = if value.is_none() || value.is_undefined() {
        String::new()
    } else {
        value
            .as_str()
            .map(str::to_string)
            .unwrap_or_else(|| value.to_string())
    };
    // Text a spreadsheet would run as a formula is neutralised; numbers are left alone.
    let text = match value.as_str() {
        Some(_) => crate::escape::csv_cell(&text).into_owned(),
        None => text,
    };
    if text.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", text.replace('"', "\"\""))
    } else {
        text
    }
}

/// At most `chars` characters, with an ellipsis when cut.
fn truncate_text(value: Value, chars: usize) -> String {
    let text = value
        .as_str()
        .map(str::to_string)
        .unwrap_or_else(|| value.to_string());
    if text.chars().count() <= chars {
        text
    } else {
        let cut: String = text.chars().take(chars.saturating_sub(1)).collect();
        format!("{cut}…")
    }
}

/// Text as Markdown that renders as itself (a server's words, a label): see
/// [`crate::escape::markdown_text`].
fn markdown_text(value: Value) -> String {
    crate::escape::markdown_text(&plain(&value))
}

/// Text a server controls as a Markdown code span, literal and safe in a table cell.
fn markdown_code(value: Value) -> String {
    crate::escape::markdown_code(&plain(&value))
}

fn plain(value: &Value) -> String {
    if value.is_none() || value.is_undefined() {
        return String::new();
    }
    value
        .as_str()
        .map(str::to_string)
        .unwrap_or_else(|| value.to_string())
}

/// A Markdown table cell: pipes escaped, lines joined.
fn cell(value: Value) -> String {
    let text = value
        .as_str()
        .map(str::to_string)
        .unwrap_or_else(|| value.to_string());
    text.replace('|', "\\|").replace('\n', " ")
}

/// A header's fact (a served model, the client machine) in a sentence, by its own `describe`:
/// one wording for reports and comparisons.
fn described<T: serde::de::DeserializeOwned>(value: &Value, describe: fn(&T) -> String) -> String {
    serde_json::to_value(value)
        .ok()
        .and_then(|json| serde_json::from_value::<T>(json).ok())
        .map(|fact| describe(&fact))
        .unwrap_or_default()
}

pub fn environment() -> Environment<'static> {
    let mut env = Environment::new();
    env.set_trim_blocks(true);
    env.set_lstrip_blocks(true);
    env.add_filter("num", num);
    env.add_filter("pct", pct);
    env.add_filter("truncate_text", truncate_text);
    env.add_filter("csv", csv_field);
    env.add_filter("cell", cell);
    env.add_filter("md", markdown_text);
    env.add_filter("code", markdown_code);
    env.add_filter("served_model", |value: Value| {
        described(&value, crate::records::ServedModel::describe)
    });
    env.add_filter("machine", |value: Value| {
        described(&value, crate::records::ClientMachine::describe)
    });
    env.add_global("metric_rows", Value::from_serialize(metric_rows()));
    env
}

/// One distribution of the metric table as templates see it (the global `metric_rows`, in the
/// table's order): templates loop over these instead of naming metrics.
#[derive(serde::Serialize)]
struct MetricRow {
    /// Its name in plans and summary.csv (`ttft`).
    name: &'static str,
    /// Its label in reports (`TTFT`).
    label: &'static str,
    /// Its key in a scope's `metrics` (`ttft_ms`).
    key: &'static str,
    /// Its unit beside a number (`ms`, `tok/s`).
    unit: &'static str,
    /// Its unit in summary.csv (`ms`, `tokens/s`).
    csv_unit: &'static str,
    /// Shown only where this other row (its key) has values: TTFO beside TTFT only when
    /// requests reasoned.
    report_with: Option<&'static str>,
}

fn metric_rows() -> Vec<MetricRow> {
    crate::metrics::Metric::distributions()
        .filter_map(|metric| {
            let def = metric.def();
            Some(MetricRow {
                name: def.name,
                label: def.label,
                key: metric.summary_key()?,
                unit: def.kind.short_unit(),
                csv_unit: def.kind.csv_unit(),
                report_with: def.report_with.and_then(|other| other.summary_key()),
            })
        })
        .collect()
}

/// Renders a built-in template with the report's context.
pub fn render(name: &str, source: &str, context: &ReportContext) -> Result<Vec<u8>> {
    render_value(name, source, Value::from_serialize(&context.summary)).map(String::into_bytes)
}

/// Renders a built-in template with any serialized context. A failure is llmload's own bug.
pub fn render_value(name: &str, source: &str, context: Value) -> Result<String> {
    render_source(name, source, context).map_err(|e| {
        Error::run(format!(
            "built-in template {name}: {}",
            describe(&e, source)
        ))
    })
}

fn render_source(
    name: &str,
    source: &str,
    context: Value,
) -> std::result::Result<String, minijinja::Error> {
    let mut env = environment();
    env.add_template(name, source)?;
    env.get_template(name)?.render(context)
}

/// What went wrong in a template, naming the expression and the line.
fn describe(error: &minijinja::Error, source: &str) -> String {
    let line = error
        .line()
        .map(|l| format!(" (line {l})"))
        .unwrap_or_default();
    // minijinja's range starts at the failing step (`.plann` in `context.plann.name`): widen it
    // back to the whole dotted name, which is what a reader looks for.
    let expression = error
        .range()
        .map(|range| {
            let bytes = source.as_bytes();
            let mut start = range.start.min(bytes.len());
            while start > 0
                && (bytes[start - 1].is_ascii_alphanumeric()
                    || matches!(bytes[start - 1], b'_' | b'.'))
            {
                start -= 1;
            }
            start..range.end
        })
        .and_then(|range| source.get(range))
        .map(str::trim)
        .filter(|e| !e.is_empty());
    match (error.kind(), expression) {
        (minijinja::ErrorKind::UndefinedError, Some(expression)) => format!(
            "`{expression}` is undefined{line}: the context holds schema_version, passed, interrupted, \
             verdicts, phases, overall, warnings and context (see schemas/summary.schema.json)"
        ),
        (_, Some(expression)) => format!(
            "{} at `{expression}`{line}",
            error.detail().unwrap_or(&error.kind().to_string())
        ),
        _ => format!(
            "{}{line}",
            error.detail().map_or(error.kind().to_string(), str::to_string)
        ),
    }
}

/// A user's template given with `--template FILE`; writes FILE's name without `.j2`/`.jinja`.
pub struct UserTemplate {
    path: PathBuf,
    source: String,
}

impl UserTemplate {
    /// Reads the template and checks its syntax, before anything is run.
    pub fn load(path: &Path) -> Result<UserTemplate> {
        let source = crate::files::read_text_bounded(path, 16 << 20).map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                Error::usage(format!("--template {}: no such file", path.display()))
            } else {
                Error::io("read", path, e)
            }
        })?;
        let name = path.display().to_string();
        let mut env = environment();
        env.add_template(&name, &source)
            .map_err(|e| Error::Template {
                name: name.clone(),
                message: describe(&e, &source),
            })?;
        Ok(UserTemplate {
            path: path.to_path_buf(),
            source,
        })
    }
}

impl Exporter for UserTemplate {
    fn file_name(&self) -> String {
        let name = self
            .path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "custom".into());
        for suffix in [".j2", ".jinja", ".jinja2"] {
            if let Some(stem) = name.strip_suffix(suffix) {
                return stem.to_string();
            }
        }
        format!("{name}.out")
    }

    fn render(&self, context: &ReportContext) -> Result<Vec<u8>> {
        let name = self.path.display().to_string();
        render_source(&name, &self.source, Value::from_serialize(&context.summary))
            .map(String::into_bytes)
            .map_err(|e| Error::Template {
                message: describe(&e, &self.source),
                name,
            })
    }
}

#[cfg(test)]
mod tests {
    use crate::metrics::Metric;

    /// Where report.md and report.html show each metric of the table: the template expressions
    /// that read it (a distribution is a row of the `metric_rows` loop). A metric added to the
    /// table must be placed here, and a template that loses one fails the test below.
    fn shown_by(metric: Metric) -> &'static [&'static str] {
        match metric {
            Metric::Ttft
            | Metric::Ttfo
            | Metric::Itl
            | Metric::ItlReasoning
            | Metric::ItlAnswer
            | Metric::Tpot
            | Metric::E2e
            | Metric::E2ePerInput
            | Metric::ReasoningTime
            | Metric::ReasoningTokens
            | Metric::AnswerTokens
            | Metric::ToolCallTtft
            | Metric::ToolCalls
            | Metric::PrefillTps
            | Metric::DecodeTps
            | Metric::ScheduleLag
            | Metric::Connect
            | Metric::Tls
            | Metric::Upload => &["metric_rows"],
            Metric::ErrorRate => &["rates.error_rate"],
            Metric::ThrottledRate => &["rates.throttled_rate"],
            Metric::TimeoutRate => &["rates.timeout_rate"],
            Metric::RequestThroughput => &["throughput.requests_per_s"],
            Metric::OutputThroughput => &["throughput.output_tokens_per_s"],
            Metric::TotalThroughput => &["throughput.total_tokens_per_s"],
            Metric::InputThroughput => &["throughput.inputs_per_s"],
            Metric::InputTokenThroughput => &["throughput.input_tokens_per_s"],
            Metric::Goodput => &["goodput.requests_per_s"],
            Metric::GoodputRatio => &["goodput.ratio"],
            Metric::SessionE2e
            | Metric::SessionCalls
            | Metric::SessionWait
            | Metric::SessionCacheHit => &["metric_rows"],
            Metric::SessionGoodput => &["sessions.goodput"],
            Metric::Capacity => &["capacity.headline"],
            Metric::ServerRunning => &["s.running.mean"],
            Metric::ServerWaiting => &["s.waiting.mean"],
            Metric::ServerKvCache => &["s.kv_cache.max"],
            Metric::ServerPreemptions => &["s.preemptions"],
            Metric::ServerTtft => &["s.ttft"],
            Metric::ServerQueueTime => &["s.queue_time"],
            Metric::ServerGpuUtilization => &["s.gpu_utilization.mean"],
            Metric::ServerGpuPower => &["s.gpu_power_w.mean"],
            Metric::EnergyPerOutputToken => &["per_output_token_j"],
            Metric::CostPerMillionOutputTokens => &["cost.per_million_output_tokens"],
            Metric::CostPerMillionTokens => &["cost.per_million_total_tokens"],
            Metric::CostPerMillionGoodputTokens => &["cost.per_million_goodput_tokens"],
            Metric::InvalidJsonRate => &["answers.invalid_rate"],
            Metric::PrefixCacheHitRate => &["c.hit_rate"],
        }
    }

    #[test]
    fn the_reports_show_every_metric_of_the_table() {
        let templates = [
            ("report.md.j2", include_str!("templates/report.md.j2")),
            ("report.html.j2", include_str!("templates/report.html.j2")),
        ];
        for metric in Metric::all() {
            let name = metric.def().name;
            let expressions = shown_by(metric);
            // A distribution is shown by the loop, which needs its key; anything else by name.
            assert_eq!(
                expressions == ["metric_rows"],
                metric.summary_key().is_some(),
                "{name}: a distribution is a row of the loop, and only a distribution"
            );
            for (template, source) in templates {
                for expression in expressions {
                    assert!(
                        source.contains(expression),
                        "{template} does not show {name} (`{expression}`)"
                    );
                }
            }
        }
    }
}
