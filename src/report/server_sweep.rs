//! A server sweep's own report: each configuration side by side (its verdict, its headline
//! numbers, its capacity bracket when the plan searches, its server's start and CPU), a chart
//! of capacity (or output throughput) per configuration, and the best one named —
//! `server-sweep.md`, `server-sweep.html` and `server-sweep.json` in the sweep's directory,
//! beside each configuration's own full report in its subdirectory.
//!
//! It judges nothing: the sweep's verdict and its best configuration come from the session.
//! It names the cheapest of the configurations that passed, by the lowest price per token in
//! their columns (per good token where every one of them has that), as it would sort a table.

use minijinja::Value;
use serde::Serialize;

use super::benchmarks::Measure;
use super::svg::{Axis, Bars, Plot, Scale, Unit, Whisker};
use super::{template, RunVerdict, Summary};
use crate::error::Result;
use crate::plan::ServerConfig;

const MARKDOWN: &str = include_str!("templates/server-sweep.md.j2");
const HTML: &str = include_str!("templates/server-sweep.html.j2");

/// The files a sweep's report is.
pub const FILES: [&str; 3] = ["server-sweep.md", "server-sweep.html", "server-sweep.json"];

/// `server-sweep.json`, and what the templates see.
#[derive(Debug, Clone, Serialize)]
pub struct SweepSummary {
    /// The plan's name.
    pub plan: String,
    /// The sweep's one verdict.
    pub verdict: RunVerdict,
    /// Whether it passed (exit 0).
    pub passed: bool,
    /// The best configuration under the objectives, if one passed.
    pub best: Option<String>,
    /// What `best` was chosen by: `capacity`, `headroom` (under the assertions) or `output
    /// throughput`.
    pub best_by: &'static str,
    /// Whether the plan searches for capacity (the table and chart show it).
    pub searched: bool,
    /// Why the capacities the best was chosen by are uncertain, when they are: searches that
    /// stopped before their precision (each named with its bracket's width).
    pub best_caveat: Option<String>,
    /// Each configuration, in the order run.
    pub configurations: Vec<ConfigRow>,
    /// The configurations not run (the sweep was stopped).
    pub skipped: Vec<String>,
    /// The measures the table shows, in order (slug, name, unit).
    pub columns: Vec<(String, String, String)>,
    /// The configuration that passed at the lowest price per token, when the plan prices them.
    pub cheapest: Option<Cheapest>,
}

/// The configuration that passed at the lowest price per token.
#[derive(Debug, Clone, Serialize)]
pub struct Cheapest {
    /// Its name.
    pub name: String,
    /// The price it is cheapest by: `cost per million goodput tokens` (every configuration
    /// that passed has it: the plan has an `slo`), else `cost per million output tokens`.
    pub by: String,
    /// Its price, dollars.
    pub dollars: f64,
}

/// The prices a cheapest configuration is chosen by, in order of preference.
const PRICES: [&str; 2] = [
    "cost-per-million-goodput-tokens-usd",
    "cost-per-million-output-tokens-usd",
];

/// Of the configurations that passed, the one at the lowest price per token: by the first of
/// [`PRICES`] every one of them has.
fn cheapest(
    configurations: &[ConfigRow],
    columns: &[(String, String, String)],
) -> Option<Cheapest> {
    let passed: Vec<&ConfigRow> = configurations
        .iter()
        .filter(|c| c.status == "pass")
        .collect();
    for slug in PRICES {
        let Some(column) = columns.iter().position(|c| c.0 == slug) else {
            continue;
        };
        let prices: Option<Vec<(&ConfigRow, f64)>> = passed
            .iter()
            .map(|c| c.values[column].map(|v| (*c, v)))
            .collect();
        let Some((row, dollars)) = prices
            .unwrap_or_default()
            .into_iter()
            .min_by(|a, b| a.1.total_cmp(&b.1))
        else {
            continue;
        };
        return Some(Cheapest {
            name: row.name.clone(),
            by: columns[column].1.clone(),
            dollars,
        });
    }
    None
}

/// One configuration in the sweep's table.
#[derive(Debug, Clone, Serialize)]
pub struct ConfigRow {
    /// `--parallel 2`.
    pub name: String,
    /// Its run's directory, under the sweep's.
    pub dir: String,
    /// `pass`, `fail`, `interrupted`, `not_carried_out`.
    pub status: String,
    /// Why it did not pass.
    pub reasons: Vec<String>,
    /// Its capacity headline, when the plan searches.
    pub capacity: Option<String>,
    /// Why its capacity is known only to a wide bracket, when its search stopped before its
    /// precision.
    pub capacity_caveat: Option<String>,
    /// Its search's bracket (the load that held, the load that failed, their unit), when the
    /// plan searches: the chart's whisker.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bracket: Option<crate::planner::search::Bracket>,
    /// Its headline numbers, by the columns' slugs (absent where the run has none).
    pub values: Vec<Option<f64>>,
    /// Its server's time to ready, seconds.
    pub ready_seconds: Option<f64>,
    /// Its server's CPU seconds on this machine.
    pub server_cpu_seconds: Option<f64>,
    /// Whether it is the best.
    pub best: bool,
}

/// The sweep's summary from each configuration's judged run (its report's summary) or why it
/// could not run.
pub fn summary(
    plan: &str,
    runs: &[(ServerConfig, std::result::Result<Summary, String>)],
    skipped: &[ServerConfig],
    verdict: RunVerdict,
    best: Option<usize>,
    best_by: &'static str,
) -> SweepSummary {
    let mut columns: Vec<(String, String, String)> = Vec::new();
    for (_, run) in runs {
        for m in run.iter().flat_map(|s| &s.measures) {
            if !columns.iter().any(|c| c.0 == m.slug) {
                columns.push((m.slug.clone(), m.name.clone(), m.unit.to_string()));
            }
        }
    }
    let configurations: Vec<ConfigRow> = runs
        .iter()
        .enumerate()
        .map(|(index, (config, run))| {
            let dir = config.slug.clone();
            match run {
                Err(why) => ConfigRow {
                    name: config.name.clone(),
                    dir,
                    status: "not_carried_out".into(),
                    reasons: vec![why.clone()],
                    capacity: None,
                    capacity_caveat: None,
                    bracket: None,
                    values: vec![None; columns.len()],
                    ready_seconds: None,
                    server_cpu_seconds: None,
                    best: false,
                },
                Ok(s) => ConfigRow {
                    name: config.name.clone(),
                    dir,
                    status: status_name(&s.verdict),
                    reasons: s.verdict.reasons.clone(),
                    capacity: s.capacity.as_ref().map(|c| c.headline.clone()),
                    capacity_caveat: s.capacity.as_ref().and_then(|c| caveat(&c.bracket)),
                    bracket: s.capacity.as_ref().map(|c| c.bracket.clone()),
                    values: columns
                        .iter()
                        .map(|(slug, _, _)| value_of(&s.measures, slug))
                        .collect(),
                    ready_seconds: s.launched_server.as_ref().and_then(|l| l.ready_seconds),
                    server_cpu_seconds: s.launched_server.as_ref().and_then(|l| l.cpu_seconds),
                    best: best == Some(index),
                },
            }
        })
        .collect();
    let best_caveat = best_caveat(&configurations, best_by);
    SweepSummary {
        cheapest: cheapest(&configurations, &columns),
        best_caveat,
        plan: plan.to_string(),
        passed: verdict.exit_code == crate::error::EXIT_PASS,
        verdict,
        best: best.map(|i| runs[i].0.name.clone()),
        best_by,
        searched: configurations
            .iter()
            .any(|c: &ConfigRow| c.capacity.is_some()),
        configurations,
        skipped: skipped.iter().map(|c| c.name.clone()).collect(),
        columns,
    }
}

fn status_name(verdict: &RunVerdict) -> String {
    serde_json::to_value(verdict.status)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

fn value_of(measures: &[Measure], slug: &str) -> Option<f64> {
    measures.iter().find(|m| m.slug == slug).map(|m| m.value)
}

/// The chart: capacity per configuration when the plan searches, else TTFT p99 and E2E p99.
fn chart(summary: &SweepSummary) -> Option<String> {
    let (title, slugs, unit): (&str, &[&str], Unit) = if summary.searched {
        (
            "Capacity per server configuration",
            &["capacity"],
            Unit::Number,
        )
    } else {
        (
            "Latency per server configuration",
            &["ttft-p99-ms", "e2e-p99-ms"],
            Unit::Milliseconds,
        )
    };
    let columns: Vec<usize> = slugs
        .iter()
        .filter_map(|slug| summary.columns.iter().position(|c| c.0 == *slug))
        .collect();
    if columns.is_empty() {
        return None;
    }
    let values: Vec<Vec<f64>> = summary
        .configurations
        .iter()
        .map(|c| {
            columns
                .iter()
                .map(|&k| c.values[k].unwrap_or(0.0))
                .collect()
        })
        .collect();
    if values.iter().flatten().all(|v| *v <= 0.0) {
        return None;
    }
    let unit_name = summary
        .configurations
        .iter()
        .find_map(|c| c.bracket.as_ref())
        .map_or("load", |b| match b.unit {
            crate::plan::LoadUnit::RequestsPerSecond => "req/s",
            crate::plan::LoadUnit::Concurrency => "concurrent requests",
            crate::plan::LoadUnit::Sessions => "concurrent sessions",
        });
    let y_title = if summary.searched {
        format!("capacity, {unit_name} (bar: held; whisker: to the load that failed)")
    } else {
        "latency".to_string()
    };
    let mut plot = Plot::new(
        title,
        Axis::new("server configuration", Scale::Linear, Unit::Number),
        Axis::new(&y_title, Scale::Linear, unit),
    );
    plot.x.categories = summary
        .configurations
        .iter()
        .map(|c| c.name.clone())
        .collect();
    const COLOURS: [&str; 2] = ["#1f77b4", "#ff7f0e"];
    plot.bars = Some(Bars {
        series: columns
            .iter()
            .zip(COLOURS)
            .map(|(&k, colour)| (summary.columns[k].1.clone(), colour))
            .collect(),
        values,
        whiskers: summary
            .configurations
            .iter()
            .map(|c| vec![whisker(c.bracket.as_ref(), unit_name)])
            .collect(),
    });
    plot.render()
}

/// A search's bracket as a whisker over its capacity's bar: from the load that held to the load
/// that failed (a search that never failed has no top, and no whisker).
fn whisker(bracket: Option<&crate::planner::search::Bracket>, unit: &str) -> Option<Whisker> {
    let bracket = bracket?;
    let (held, failed) = (bracket.sustains.unwrap_or(0.0), bracket.fails_at?);
    Some(Whisker {
        low: held,
        high: failed,
        title: format!(
            "held at {} {unit}, failed at {} {unit}{}",
            crate::report::svg::number(held),
            crate::report::svg::number(failed),
            bracket
                .width
                .map(|w| format!(" (a bracket {:.0}% wide)", w * 100.0))
                .unwrap_or_default()
        ),
    })
}

/// The sweep's Markdown, HTML and JSON, in the order of [`FILES`].
pub fn render(summary: &SweepSummary) -> Result<[String; 3]> {
    let chart = chart(summary);
    let context = Value::from_serialize(serde_json::json!({
        "sweep": summary,
        "chart": chart,
    }));
    let markdown = template::render_value("server-sweep.md.j2", MARKDOWN, context.clone())?;
    let html = template::render_value("server-sweep.html.j2", HTML, context)?;
    let json = serde_json::to_string_pretty(summary)
        .map_err(|e| crate::error::Error::run(format!("cannot encode the sweep: {e}")))?;
    Ok([markdown, html, json + "\n"])
}

/// Why a search's capacity is known only to a wide bracket: it stopped on a budget (time,
/// probes), the client, or an interruption, not on its precision.
fn caveat(bracket: &crate::planner::search::Bracket) -> Option<String> {
    use crate::records::Stopped;
    match bracket.stopped {
        Stopped::Precise | Stopped::BelowRange | Stopped::AboveRange => None,
        Stopped::ProbeBudget
        | Stopped::TimeBudget
        | Stopped::Interrupted
        | Stopped::ClientLimited => Some(match bracket.width {
            Some(width) => format!(
                "{}: its bracket is {:.0}% wide",
                bracket.stopped.describe(),
                width * 100.0
            ),
            None => format!("{}, with no bracket", bracket.stopped.describe()),
        }),
    }
}

/// When the best was chosen by capacity and some capacities compared are known only to wide
/// brackets, what a reader must know before trusting the choice.
fn best_caveat(rows: &[ConfigRow], best_by: &str) -> Option<String> {
    if best_by != "capacity" {
        return None;
    }
    let uncertain: Vec<String> = rows
        .iter()
        .filter(|r| r.status == "pass")
        .filter_map(|r| Some(format!("{}: {}", r.name, r.capacity_caveat.as_ref()?)))
        .collect();
    (!uncertain.is_empty()).then(|| {
        format!(
            "the capacities it was chosen by are uncertain: {}; a longer max-duration or more \
             max-probes would decide between them",
            uncertain.join("; ")
        )
    })
}

/// The terminal's table: one line per configuration, the best marked, then the verdict.
pub fn terminal(summary: &SweepSummary) -> String {
    let width = summary
        .configurations
        .iter()
        .map(|c| c.name.chars().count())
        .max()
        .unwrap_or(13)
        .max(13);
    let mut out = format!("{:<width$}  {:<15}  headline\n", "configuration", "verdict");
    for c in &summary.configurations {
        let headline = c.capacity.clone().unwrap_or_else(|| {
            summary
                .columns
                .iter()
                .zip(&c.values)
                .filter(|(col, _)| {
                    matches!(col.0.as_str(), "ttft-p99-ms" | "output-tokens-per-second")
                })
                .filter_map(|(col, v)| {
                    v.map(|v| format!("{} {} {}", col.1, super::svg::number(v), col.2))
                })
                .collect::<Vec<_>>()
                .join(", ")
        });
        out.push_str(&format!(
            "{:<width$}  {:<15}  {}{}\n",
            crate::escape::one_line(&c.name),
            c.status,
            crate::escape::one_line(&headline),
            if c.best { "  ← best" } else { "" }
        ));
    }
    match &summary.best {
        Some(best) => out.push_str(&format!(
            "best under the objectives (by {}): {}\n",
            summary.best_by,
            crate::escape::one_line(best)
        )),
        None => out.push_str("no configuration met the objectives\n"),
    }
    if let Some(caveat) = &summary.best_caveat {
        out.push_str(&format!("but {}\n", crate::escape::one_line(caveat)));
    }
    out.push_str(&headline(&summary.verdict));
    out.push('\n');
    out
}

/// The sweep's verdict in one line: what its exit code says.
pub fn headline(verdict: &RunVerdict) -> String {
    if verdict.exit_code == crate::error::EXIT_PASS {
        "PASS: every server configuration passed its gate".to_string()
    } else {
        verdict.headline(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::LoadUnit;
    use crate::planner::search::Bracket;
    use crate::records::Stopped;

    fn bracket(stopped: Stopped, sustains: f64, fails_at: f64) -> Bracket {
        Bracket {
            sustains: Some(sustains),
            fails_at: Some(fails_at),
            width: Some((fails_at - sustains) / sustains),
            unit: LoadUnit::RequestsPerSecond,
            probes: 5,
            stopped,
        }
    }

    fn row(name: &str, status: &str, caveat: Option<String>) -> ConfigRow {
        ConfigRow {
            name: name.into(),
            dir: name.into(),
            status: status.into(),
            reasons: Vec::new(),
            capacity: Some("sustains 8 req/s".into()),
            capacity_caveat: caveat,
            bracket: None,
            values: Vec::new(),
            ready_seconds: None,
            server_cpu_seconds: None,
            best: false,
        }
    }

    #[test]
    fn a_best_chosen_by_capacities_of_wide_brackets_says_so() {
        assert_eq!(caveat(&bracket(Stopped::Precise, 8.0, 8.5)), None);
        let wide = caveat(&bracket(Stopped::TimeBudget, 8.0, 11.28)).unwrap();
        assert!(
            wide.contains("max-duration") && wide.ends_with("its bracket is 41% wide"),
            "{wide}"
        );
        let rows = [
            row("--parallel 1", "pass", Some(wide.clone())),
            row("--parallel 4", "pass", None),
            row("--parallel 8", "fail", Some(wide)),
        ];
        let said = best_caveat(&rows, "capacity").unwrap();
        assert!(said.contains("--parallel 1: its time ran out"), "{said}");
        assert!(!said.contains("--parallel 8"), "{said}");
        // Chosen by anything else, capacities do not matter to the choice.
        assert_eq!(best_caveat(&rows, "headroom"), None);
        assert_eq!(best_caveat(&rows[1..2], "capacity"), None);
    }

    /// The cheapest is the lowest price per good token among the configurations that passed,
    /// per output token when one of them has no good-token price, none without prices.
    #[test]
    fn the_cheapest_passing_configuration_is_named_by_its_price_per_good_token() {
        let columns = vec![
            (
                "cost-per-million-output-tokens-usd".to_string(),
                "cost per million output tokens".to_string(),
                "$".to_string(),
            ),
            (
                "cost-per-million-goodput-tokens-usd".to_string(),
                "cost per million goodput tokens".to_string(),
                "$".to_string(),
            ),
        ];
        let priced = |name: &str, status: &str, output: f64, good: Option<f64>| {
            let mut row = row(name, status, None);
            row.values = vec![Some(output), good];
            row
        };
        let rows = vec![
            priced("--parallel 1", "pass", 4.0, Some(9.0)),
            priced("--parallel 4", "pass", 5.0, Some(6.0)),
            priced("--parallel 8", "fail", 1.0, Some(1.5)),
        ];
        let cheapest = cheapest(&rows, &columns).unwrap();
        assert_eq!(
            cheapest.name, "--parallel 4",
            "the one that failed is not a choice"
        );
        assert_eq!(
            (cheapest.by.as_str(), cheapest.dollars),
            ("cost per million goodput tokens", 6.0)
        );
        let mut no_good = rows.clone();
        no_good[0].values[1] = None;
        let cheapest = super::cheapest(&no_good, &columns).unwrap();
        assert_eq!(
            (cheapest.name.as_str(), cheapest.dollars),
            ("--parallel 1", 4.0)
        );
        assert!(super::cheapest(&rows, &columns[..0]).is_none());
    }

    /// The capacity chart draws each search's bracket as a whisker over its bar, in the
    /// bracket's unit; a search that never failed has none.
    #[test]
    fn the_capacity_chart_draws_brackets_as_whiskers_in_their_unit() {
        let mut held = row("--parallel 1", "pass", None);
        held.bracket = Some(bracket(Stopped::TimeBudget, 8.0, 11.28));
        held.values = vec![Some(8.0)];
        let mut top = row("--parallel 4", "pass", None);
        top.bracket = Some(Bracket {
            fails_at: None,
            width: None,
            ..bracket(Stopped::Precise, 20.0, 20.0)
        });
        top.values = vec![Some(20.0)];
        let summary = SweepSummary {
            plan: "p".into(),
            verdict: RunVerdict {
                status: crate::verdict::VerdictStatus::Pass,
                exit_code: 0,
                reasons: Vec::new(),
                found: Vec::new(),
            },
            passed: true,
            best: None,
            best_by: "capacity",
            searched: true,
            best_caveat: None,
            configurations: vec![held, top],
            skipped: Vec::new(),
            columns: vec![("capacity".into(), "capacity".into(), "load".into())],
            cheapest: None,
        };
        let svg = chart(&summary).unwrap();
        assert_eq!(svg.matches("class=\"whisker\"").count(), 1, "{svg}");
        assert!(
            svg.contains("held at 8 req/s, failed at 11.3 req/s (a bracket 41% wide)"),
            "{svg}"
        );
        assert!(
            svg.contains("capacity, req/s (bar: held; whisker: to the load that failed)"),
            "{svg}"
        );
    }
}
