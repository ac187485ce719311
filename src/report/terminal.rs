//! What the terminal shows at the end of a run: the verdict table, the key numbers and warnings.

use super::Summary;
use crate::metrics::Severity;

/// What the failed requests met, a line per error class with its count, when it was first and
/// last seen and what the first said: a run that failed on its error rate says why.
fn error_lines(summary: &Summary) -> String {
    let mut out = String::new();
    for e in &summary.error_samples {
        let status = e
            .http_status
            .map(|s| format!(" HTTP {s},"))
            .unwrap_or_default();
        out.push_str(&format!(
            "errors: {} {} ({:.1}-{:.1} s),{status} the first said: {}\n",
            e.class,
            e.count,
            e.first_s,
            e.last_s,
            crate::escape::one_line(&crate::error::shorten(&e.sample))
        ));
    }
    out
}

/// The phase table's head and one scope's row.
struct Columns {
    head: String,
    row: fn(&str, &crate::metrics::PhaseMetrics, bool) -> String,
}

fn ms(v: Option<f64>) -> String {
    v.map(|v| format!("{v:.1}")).unwrap_or_else(|| "-".into())
}

/// Batches: E2E, E2E per input, inputs and requests per second.
fn batch_columns() -> Columns {
    Columns {
        head: format!(
            "{:<24} {:>8} {:>8} {:>10} {:>10} {:>13} {:>10} {:>9}\n",
            "phase", "ok", "failed", "E2E p50", "E2E p99", "E2E/input p50", "inputs/s", "req/s"
        ),
        row: |name, scope, _| {
            format!(
                "{:<24} {:>8} {:>8} {:>10} {:>10} {:>13} {:>10.1} {:>9.2}\n",
                truncate(name, 24),
                scope.requests.ok,
                scope.requests.failed,
                ms(scope.metrics[crate::dist!(E2e)].p50),
                ms(scope.metrics[crate::dist!(E2e)].p99),
                ms(scope.metrics[crate::dist!(E2ePerInput)].p50),
                scope.throughput.inputs_per_s,
                scope.throughput.requests_per_s
            )
        },
    }
}

/// Generation: TTFT, (TTFO for a model that reasons,) ITL, E2E and requests per second.
fn generation_columns(reasoned: bool) -> Columns {
    let ttfo_head = if reasoned {
        format!(" {:>10}", "TTFO p99")
    } else {
        String::new()
    };
    Columns {
        head: format!(
            "{:<24} {:>8} {:>8} {:>10} {:>10}{ttfo_head} {:>10} {:>10} {:>9}\n",
            "phase", "ok", "failed", "TTFT p50", "TTFT p99", "ITL p99", "E2E p99", "req/s"
        ),
        row: |name, scope, reasoned| {
            let ttfo = if reasoned {
                format!(" {:>10}", ms(scope.metrics[crate::dist!(Ttfo)].p99))
            } else {
                String::new()
            };
            format!(
                "{:<24} {:>8} {:>8} {:>10} {:>10}{ttfo} {:>10} {:>10} {:>9.2}\n",
                truncate(name, 24),
                scope.requests.ok,
                scope.requests.failed,
                ms(scope.metrics[crate::dist!(Ttft)].p50),
                ms(scope.metrics[crate::dist!(Ttft)].p99),
                ms(scope.metrics[crate::dist!(Itl)].p99),
                ms(scope.metrics[crate::dist!(E2e)].p99),
                scope.throughput.requests_per_s
            )
        },
    }
}

/// What the terminal shows at the end of a run.
pub fn terminal_summary(summary: &Summary) -> String {
    let mut out = String::new();
    // A model that reasons: the answer users wait for starts at TTFO, not at the first thought.
    let reasoned = summary.overall.metrics[crate::dist!(ReasoningTime)].count > 0;
    let columns = if summary.context.answers_batches {
        batch_columns()
    } else {
        generation_columns(reasoned)
    };
    out.push_str(&columns.head);
    // Each recorded phase, then its steady window when a warm-up was cut from it.
    let mut scopes: Vec<(String, &crate::metrics::PhaseMetrics)> = Vec::new();
    for phase in summary.phases.iter().filter(|p| p.recorded) {
        scopes.push((phase.name.clone(), phase));
        if let Some(window) = steady_window(summary, &phase.name) {
            scopes.push((
                format!("  steady, from +{:.0} s", window.cut_s),
                &window.metrics,
            ));
        }
    }
    // Steps each have their own load: a total over them mixes loads.
    if summary.steps.is_empty() {
        scopes.push((summary.overall.name.clone(), &summary.overall));
    }
    for (name, scope) in scopes {
        out.push_str(&(columns.row)(&name, scope, reasoned));
    }
    out.push_str("(latencies in ms)\n");
    out.push_str(&error_lines(summary));
    if !summary.steps.is_empty() {
        out.push('\n');
        out.push_str(&steps_table(summary));
    }
    if let Some(client) = &summary.overall.client {
        out.push_str(&format!(
            "client: {:.1} CPU-s, {:.0}% of {} core(s), saturated {} of {} s",
            client.cpu_s,
            client.utilization * 100.0,
            client.cores,
            client.saturated_seconds,
            client.seconds
        ));
        if let Some(rss) = summary.context.client_peak_rss_mb {
            out.push_str(&format!("; peak memory {rss:.0} MB"));
        }
        out.push('\n');
    }
    if let Some(server) = &summary.launched_server {
        out.push_str(&launched_server_line(server));
    }
    out.push('\n');
    if !summary.verdicts.is_empty() {
        let width = summary
            .verdicts
            .iter()
            .map(|v| v.assertion.len())
            .max()
            .unwrap_or(9)
            .max(9);
        let phase_width = summary
            .verdicts
            .iter()
            .map(|v| v.phase.chars().count())
            .max()
            .unwrap_or(5)
            .clamp(5, 24);
        let interval_width = summary
            .verdicts
            .iter()
            .map(|v| v.interval.as_ref().map_or(1, |i| i.display.chars().count()))
            .max()
            .unwrap_or(8)
            .max(8);
        out.push_str(&format!(
            "{:<width$}  {:<phase_width$}  {:>14}  {:>14}  {:<interval_width$}  result\n",
            "assertion", "phase", "threshold", "observed", "interval"
        ));
        for v in &summary.verdicts {
            out.push_str(&format!(
                "{:<width$}  {:<phase_width$}  {:>14}  {:>14}  {:<interval_width$}  {}\n",
                v.assertion,
                truncate(&v.phase, phase_width),
                v.threshold_display,
                v.observed_display,
                v.interval.as_ref().map_or("-", |i| i.display.as_str()),
                v.outcome.word().to_uppercase()
            ));
            if let Some(why) = &v.undecided {
                out.push_str(&format!(
                    "  not decided: {}\n",
                    crate::escape::one_line(why)
                ));
            }
        }
        out.push('\n');
    }
    for w in &summary.warnings {
        let label = match w.severity {
            Severity::Warning => "warning",
            Severity::Note => "note",
        };
        // One line each, whatever a records file said (the line starts with our label).
        out.push_str(&format!(
            "{label}: {}\n",
            crate::escape::one_line(&w.message)
        ));
    }
    for series in summary.series.iter().filter(|s| !s.search) {
        out.push_str(&format!("sweep \"{}\": {}\n", series.name, series.headline));
    }
    if let Some(capacity) = &summary.capacity {
        out.push_str(&format!(
            "capacity ({}): {} ({} probes; {})\n",
            capacity.name, capacity.headline, capacity.bracket.probes, capacity.stopped
        ));
    }
    let verdict = summary.verdict.headline(summary.verdicts.len());
    out.push_str(&format!("\n{}\n", crate::escape::one_line(&verdict)));
    out
}

/// One line per measured step and probe: its load, what it achieved, and its result.
fn steps_table(summary: &Summary) -> String {
    let ms = |v: Option<f64>| v.map(|v| format!("{v:.1}")).unwrap_or_else(|| "-".into());
    let mut out = format!(
        "{:<28} {:>16} {:>9} {:>10} {:>10} {:>10} {:>7}  result\n",
        "step", "load", "req/s", "out tok/s", "TTFT p99", "E2E p99", "errors"
    );
    for row in &summary.steps {
        out.push_str(&format!(
            "{:<28} {:>16} {:>9.2} {:>10.1} {:>10} {:>10} {:>6.2}%  {}{}\n",
            truncate(&row.phase, 28),
            row.load_display,
            row.achieved_rps,
            row.output_tps,
            ms(row.ttft_p99_ms),
            ms(row.e2e_p99_ms),
            row.error_rate * 100.0,
            row.result,
            if row.marginal { " (marginal)" } else { "" }
        ));
    }
    for row in summary.steps.iter() {
        if let Some(why) = &row.why {
            out.push_str(&format!(
                "  {}: {}\n",
                row.phase,
                crate::escape::one_line(why)
            ));
        }
    }
    out
}

/// A phase's steady window, when a warm-up transient was cut from it.
fn steady_window<'a>(
    summary: &'a Summary,
    phase: &str,
) -> Option<&'a crate::metrics::steady::SteadyWindow> {
    summary
        .steady
        .as_ref()?
        .phases
        .iter()
        .find(|w| w.phase == phase && w.cut_s > 0.0)
}

fn truncate(text: &str, width: usize) -> String {
    if text.chars().count() <= width {
        text.to_string()
    } else {
        let cut: String = text.chars().take(width - 1).collect();
        format!("{cut}…")
    }
}

/// The server llmload started: how long it took, what it cost this machine (apart from the
/// client), how it ended.
fn launched_server_line(server: &crate::server::ServerRun) -> String {
    let mut parts = Vec::new();
    if let Some(ready) = server.ready_seconds {
        parts.push(format!("ready in {ready:.1} s"));
    }
    if let Some(cpu) = server.cpu_seconds {
        let memory = server
            .peak_rss_bytes
            .map(|b| format!(", peak memory {:.0} MB", b as f64 / (1024.0 * 1024.0)))
            .unwrap_or_default();
        parts.push(format!(
            "{cpu:.1} CPU-s on this machine (not the client's){memory}"
        ));
    }
    if let Some(died) = &server.died {
        parts.push(format!("EXITED DURING THE RUN: {died}"));
    } else if let Some(hung) = &server.hung {
        parts.push(format!("STOPPED ANSWERING DURING THE RUN: {hung}"));
    }
    if let Some(exit) = server.exit.as_ref().filter(|_| server.died.is_none()) {
        parts.push(exit.clone());
    }
    let mut line = format!(
        "server: {} started by llmload; {}\n",
        crate::escape::one_line(&server.program),
        parts.join("; ")
    );
    if server.died.is_some() || server.hung.is_some() {
        let from = server.log_tail.len().saturating_sub(8);
        for tail in &server.log_tail[from..] {
            line.push_str(&format!("  | {}\n", crate::escape::one_line(tail)));
        }
    }
    line
}
