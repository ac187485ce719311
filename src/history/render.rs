//! `llmload history`'s files: `history.md` (for a pull request: the runs that stand out, the
//! latest runs, the band the next run meets), `history.html` (the same with a chart per measure
//! and every run) and `history.json` (the whole [`History`], for tools), and the lines the
//! terminal prints.
//!
//! It renders a history; what stands out is decided in [`super::noise`]. The charts are drawn
//! with report.html's kit and look like its charts.

use minijinja::Value;
use serde::Serialize;

use super::{Change, History, PlanHistory};
use crate::error::{Error, Result};
use crate::escape::one_line;
use crate::report::benchmarks::Open;
use crate::report::svg::{number, Axis, Line, Marker, Plot, Scale, Unit};
use crate::report::template;

/// The most runs history.md's table shows (the latest); history.html shows them all.
pub const MARKDOWN_RUNS: usize = 30;

const MARKDOWN: &str = include_str!("templates/history.md.j2");
const HTML: &str = include_str!("templates/history.html.j2");

/// The three files, rendered.
pub struct HistoryFiles {
    /// history.md.
    pub markdown: String,
    /// history.html.
    pub html: String,
    /// history.json.
    pub json: String,
}

/// Renders every file of `history`.
pub fn render(history: &History) -> Result<HistoryFiles> {
    let plans: Vec<PlanView> = history.plans.iter().map(PlanView::of).collect();
    let context = minijinja::context! {
        plans => Value::from_serialize(&plans),
        label => history.label.clone(),
        window => history.window,
        skipped => Value::from_serialize(&history.skipped),
        markdown_runs => MARKDOWN_RUNS,
    };
    let markdown = template::render_value("history.md.j2", MARKDOWN, context.clone())?;
    let html = template::render_value("history.html.j2", HTML, context)?;
    let json = serde_json::to_string_pretty(history)
        .map_err(|e| Error::run(format!("cannot encode history.json: {e}")))?
        + "\n";
    Ok(HistoryFiles {
        markdown,
        html,
        json,
    })
}

/// What the terminal shows: per plan, its runs and every run that stands out.
pub fn terminal(history: &History) -> String {
    let mut out = String::new();
    for plan in &history.plans {
        let passed = plan.runs.iter().filter(|r| r.status == "pass").count();
        let apart = plan.runs.iter().filter(|r| r.set_apart.is_some()).count();
        out.push_str(&format!(
            "{} ({}{}): {} runs, {} passed{}, from {} to {}\n",
            one_line(&plan.plan),
            one_line(if plan.model.is_empty() {
                "-"
            } else {
                &plan.model
            }),
            plan.server
                .as_deref()
                .map(|s| format!("; server `{}`", one_line(s)))
                .unwrap_or_default(),
            plan.runs.len(),
            passed,
            if apart > 0 {
                format!(", {apart} set apart from the bands")
            } else {
                String::new()
            },
            plan.runs.first().map_or("", |r| r.started_at.as_str()),
            plan.runs.last().map_or("", |r| r.started_at.as_str()),
        ));
        if plan.stand_outs.is_empty() {
            out.push_str("  no run stands out from the runs before it\n");
        }
        // One line per run and direction: what moved, and the band it left.
        let mut lines: Vec<(usize, Change, Vec<String>)> = Vec::new();
        for s in &plan.stand_outs {
            let what = format!(
                "{} {} {} (band {})",
                s.measure,
                number(s.value),
                s.unit,
                band_text(s.band.low, s.band.high)
            );
            match lines.last_mut() {
                Some((run, change, whats)) if *run == s.run && *change == s.change => {
                    whats.push(what)
                }
                _ => lines.push((s.run, s.change, vec![what])),
            }
        }
        for (run, change, whats) in lines {
            out.push_str(&format!(
                "  {} run {} ({}): {}\n",
                if change == Change::Worse {
                    "WORSE "
                } else {
                    "better"
                },
                run + 1,
                one_line(plan.runs[run].name()),
                whats.join(", "),
            ));
        }
    }
    for skipped in &history.skipped {
        out.push_str(&format!(
            "note: {} was left out: {}\n",
            one_line(&skipped.dir),
            one_line(&skipped.why)
        ));
    }
    out
}

fn band_text(low: f64, high: f64) -> String {
    format!("{}–{}", number(low), number(high))
}

/// A run's own interval; an open end reads "below 3" or "above 9".
fn interval_text(low: f64, high: f64, open: Open) -> String {
    let below = if open.below() { "below " } else { "" };
    let above = if open.above() { "above " } else { "" };
    format!("{below}{}–{above}{}", number(low), number(high))
}

fn change_name(change: Option<Change>) -> &'static str {
    match change {
        Some(Change::Worse) => "worse",
        Some(Change::Better) => "better",
        Some(Change::Within) => "within",
        None => "",
    }
}

#[derive(Serialize)]
struct PlanView {
    plan: String,
    model: String,
    server: Option<String>,
    first: String,
    last: String,
    passed: usize,
    columns: Vec<Column>,
    rows: Vec<Row>,
    /// The runs that stand out, each with what moved (one entry per run and direction).
    stand_outs: Vec<StandOutRun>,
    /// How many of those are worse.
    worse: usize,
    bands: Vec<BandView>,
    charts: Vec<ChartView>,
}

#[derive(Serialize)]
struct Column {
    name: String,
    unit: String,
}

#[derive(Serialize)]
struct Row {
    number: usize,
    name: String,
    started_at: String,
    dir: String,
    status: String,
    reasons: Vec<String>,
    plan_changed: bool,
    set_apart: Option<String>,
    held: usize,
    objectives: usize,
    failed: Vec<FailedObjective>,
    cells: Vec<Cell>,
}

#[derive(Serialize)]
struct FailedObjective {
    assertion: String,
    observed: String,
}

#[derive(Serialize)]
struct Cell {
    text: String,
    change: &'static str,
}

#[derive(Serialize)]
struct StandOutRun {
    number: usize,
    run_name: String,
    change: &'static str,
    items: Vec<StandOutView>,
}

#[derive(Serialize)]
struct StandOutView {
    measure: String,
    unit: String,
    value: String,
    interval: Option<String>,
    band: String,
    median: String,
    percent: Option<String>,
}

#[derive(Serialize)]
struct BandView {
    measure: String,
    unit: String,
    median: String,
    band: String,
    runs: usize,
}

#[derive(Serialize)]
struct ChartView {
    id: String,
    title: String,
    svg: Value,
}

impl PlanView {
    fn of(plan: &PlanHistory) -> PlanView {
        let columns = plan
            .measures
            .iter()
            .map(|m| Column {
                name: m.name.clone(),
                unit: m.unit.clone(),
            })
            .collect();
        let rows = plan
            .runs
            .iter()
            .enumerate()
            .map(|(index, run)| Row {
                number: index + 1,
                name: run.name().to_string(),
                started_at: run.started_at.clone(),
                dir: run.dir.clone(),
                status: run.status.clone(),
                reasons: run.reasons.clone(),
                plan_changed: run.plan_changed,
                set_apart: run.set_apart.clone(),
                held: run.objectives.iter().filter(|o| o.passed).count(),
                objectives: run.objectives.len(),
                failed: run
                    .objectives
                    .iter()
                    .filter(|o| !o.passed)
                    .map(|o| FailedObjective {
                        assertion: o.assertion.clone(),
                        observed: o.observed_display.clone(),
                    })
                    .collect(),
                cells: plan
                    .measures
                    .iter()
                    .map(|history| Cell {
                        text: run
                            .measure(&history.slug)
                            .map_or_else(|| "-".to_string(), |m| cell_text(&history.slug, m)),
                        change: change_name(history.changes[index]),
                    })
                    .collect(),
            })
            .collect();
        let mut stand_outs: Vec<StandOutRun> = Vec::new();
        for s in &plan.stand_outs {
            let item = StandOutView {
                measure: s.measure.clone(),
                unit: s.unit.clone(),
                value: number(s.value),
                interval: s.bounds.map(|(low, high)| interval_text(low, high, s.open)),
                band: band_text(s.band.low, s.band.high),
                median: number(s.band.median),
                percent: s.percent.map(|p| format!("{p:+.1}%")),
            };
            let change = change_name(Some(s.change));
            match stand_outs.last_mut() {
                Some(last) if last.number == s.run + 1 && last.change == change => {
                    last.items.push(item)
                }
                _ => stand_outs.push(StandOutRun {
                    number: s.run + 1,
                    run_name: s.run_name.clone(),
                    change,
                    items: vec![item],
                }),
            }
        }
        PlanView {
            plan: plan.plan.clone(),
            model: plan.model.clone(),
            server: plan.server.clone(),
            first: plan
                .runs
                .first()
                .map(|r| r.started_at.clone())
                .unwrap_or_default(),
            last: plan
                .runs
                .last()
                .map(|r| r.started_at.clone())
                .unwrap_or_default(),
            passed: plan.runs.iter().filter(|r| r.status == "pass").count(),
            columns,
            rows,
            worse: stand_outs.iter().filter(|s| s.change == "worse").count(),
            stand_outs,
            bands: plan
                .measures
                .iter()
                .filter_map(|m| {
                    let band = m.band_now?;
                    Some(BandView {
                        measure: m.name.clone(),
                        unit: m.unit.clone(),
                        median: number(band.median),
                        band: band_text(band.low, band.high),
                        runs: band.runs,
                    })
                })
                .collect(),
            charts: charts(plan),
        }
    }
}

/// The most run names an axis shows: one in so many beyond it, so that names never overlap.
const AXIS_NAMES: usize = 12;
/// The longest run name on an axis (a commit's SHA is cut to its first characters; the point's
/// hover title has it whole).
const AXIS_NAME_CHARS: usize = 10;

/// The charts' x axis: runs by their `--label` value when they have one (every k-th, so that
/// at most [`AXIS_NAMES`] show), else numbered.
fn run_axis(plan: &PlanHistory, labelled: bool) -> Axis {
    if !labelled {
        return Axis::new("run", Scale::Linear, Unit::Number);
    }
    let n = plan.runs.len();
    let every = n.div_ceil(AXIS_NAMES).max(1);
    let mut axis = Axis::new(
        "run (by label; hover a point for the whole name)",
        Scale::Linear,
        Unit::Number,
    )
    .range(-0.5, n as f64 - 0.5);
    axis.categories = plan
        .runs
        .iter()
        .enumerate()
        .map(|(i, run)| {
            if i % every != 0 {
                return String::new();
            }
            let name = run.name();
            match name.char_indices().nth(AXIS_NAME_CHARS) {
                Some((cut, _)) => format!("{}…", &name[..cut]),
                None => name.to_string(),
            }
        })
        .collect();
    axis
}

/// A table cell: the value; a capacity with the load it failed at.
fn cell_text(slug: &str, m: &crate::history::Measured) -> String {
    match (slug, m.bounds) {
        ("capacity", Some((_, fails))) if fails > m.value => {
            format!("{} (fails {})", number(m.value), number(fails))
        }
        _ => number(m.value),
    }
}

mod colour {
    pub const VALUE: &str = "#1f77b4";
    pub const BAND: &str = "#7f7f7f";
    pub const WORSE: &str = "#d62728";
    pub const BETTER: &str = "#2ca02c";
    pub const UNTRUSTED: &str = "#e8710a";
}

/// One chart per measure: its value run by run, the band each run was set against (dashed),
/// the runs that stand out marked, runs not carried out to their end hollow.
fn charts(plan: &PlanHistory) -> Vec<ChartView> {
    plan.measures
        .iter()
        .filter_map(|history| {
            // Labelled runs are named on the axis (`--label commit`); others numbered from 1.
            let labelled = plan.runs.iter().any(|r| r.label.is_some());
            let at = |index: usize| index as f64 + if labelled { 0.0 } else { 1.0 };
            let values: Vec<(f64, f64)> = plan
                .runs
                .iter()
                .enumerate()
                .filter_map(|(i, run)| Some((at(i), run.measure(&history.slug)?.value)))
                .collect();
            if values.len() < 2 {
                return None;
            }
            let band = |pick: fn(&crate::history::Band) -> f64| -> Vec<(f64, f64)> {
                history
                    .bands
                    .iter()
                    .enumerate()
                    .filter_map(|(i, b)| Some((at(i), pick(b.as_ref()?))))
                    .collect()
            };
            let unit = match history.unit.as_str() {
                "ms" => Unit::Milliseconds,
                "%" => Unit::Percent,
                _ => Unit::Number,
            };
            let title = format!("{} ({})", history.name, history.unit);
            let mut plot = Plot::new(
                &title,
                run_axis(plan, labelled),
                Axis::new(&title, Scale::Linear, unit),
            );
            plot.lines
                .push(Line::new(&history.name, colour::VALUE, false, values));
            plot.lines.push(Line::new(
                "band (runs before)",
                colour::BAND,
                true,
                band(|b| b.high),
            ));
            plot.lines
                .push(Line::new("", colour::BAND, true, band(|b| b.low)));
            for (i, run) in plan.runs.iter().enumerate() {
                let Some(m) = run.measure(&history.slug) else {
                    continue;
                };
                let change = history.changes[i];
                let (color, hollow) = match (change, run.trusted) {
                    (Some(Change::Worse), _) => (colour::WORSE, false),
                    (Some(Change::Better), _) => (colour::BETTER, false),
                    (_, false) => (colour::UNTRUSTED, true),
                    _ => continue,
                };
                plot.markers.push(Marker {
                    at: (at(i), m.value),
                    color,
                    label: String::new(),
                    title: format!(
                        "run {} ({}): {} {}{}",
                        i + 1,
                        run.name(),
                        number(m.value),
                        history.unit,
                        match (change, &run.set_apart) {
                            (Some(Change::Worse), _) => ", worse than the runs before".to_string(),
                            (Some(Change::Better), _) => {
                                ", better than the runs before".to_string()
                            }
                            (_, Some(why)) => format!(", set apart from the bands: {why}"),
                            _ => String::new(),
                        }
                    ),
                    hollow,
                });
            }
            Some(ChartView {
                id: history.slug.clone(),
                title,
                svg: Value::from_safe_string(plot.render()?),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::{group, Measured, RunPoint};
    use super::*;
    use crate::metrics::table::Better;

    fn run(i: usize, label: &str, capacity: f64, status: &str) -> RunPoint {
        RunPoint {
            dir: format!("runs/{i}"),
            started_at: format!("2026-12-0{i}T00:00:00Z"),
            started_unix_ns: Some(i as u64),
            plan: "search".into(),
            model: "m".into(),
            label: Some(label.into()),
            labels: Default::default(),
            status: status.into(),
            reasons: Vec::new(),
            tool_version: "0.3.0".into(),
            plan_sha256: "a".into(),
            plan_changed: false,
            target: "t".into(),
            measures: vec![Measured {
                slug: "capacity".into(),
                name: "capacity".into(),
                unit: "load".into(),
                value: capacity,
                open: Open::Neither,
                bounds: Some((capacity, capacity * 1.1)),
                direction: Better::Higher,
            }],
            objectives: Vec::new(),
            trusted: status == "pass" || status == "fail",
            set_apart: (status != "pass" && status != "fail")
                .then(|| format!("{status}: not a measure of the server")),
            server: None,
        }
    }

    /// A search's history: its brackets in the table, a capacity that fell named worse, a run
    /// not carried out left out of the bands and drawn hollow, and labels (text llmload does
    /// not control) escaped for each page.
    #[test]
    fn a_search_history_shows_brackets_and_escapes_what_it_did_not_write() {
        let hostile = "<b>x|y</b>";
        let mut runs: Vec<RunPoint> = (1..=5)
            .map(|i| run(i, &format!("c{i}"), 8.0 + i as f64 * 0.01, "pass"))
            .collect();
        runs.push(run(6, "c6", 2.0, "not_carried_out"));
        runs.push(run(7, hostile, 5.0, "fail"));
        let history = History {
            label: Some("commit".into()),
            window: crate::history::WINDOW,
            plans: group(runs),
            skipped: Vec::new(),
        };
        let plan = &history.plans[0];
        // The run not carried out is not judged and not in the band.
        assert_eq!(plan.measures[0].changes[5], None);
        assert_eq!(plan.stand_outs.len(), 1);
        assert_eq!(plan.stand_outs[0].run, 6);
        assert_eq!(plan.stand_outs[0].change, Change::Worse);
        let files = render(&history).unwrap();
        assert!(
            files.markdown.contains("8.01 (fails 8.81)"),
            "{}",
            files.markdown
        );
        assert!(
            files.markdown.contains("`<b>x\\|y</b>`"),
            "{}",
            files.markdown
        );
        assert!(!files.html.contains(hostile));
        assert!(
            files.html.contains("&lt;b&gt;x|y&lt;&#x2f;b&gt;"),
            "{}",
            files.html
        );
        assert!(files.html.contains("<svg"));
        let json: serde_json::Value = serde_json::from_str(&files.json).unwrap();
        assert_eq!(json["plans"][0]["stand_outs"][0]["run_name"], hostile);
        let terminal = terminal(&history);
        assert!(terminal.contains("WORSE  run 7"), "{terminal}");
    }

    /// A server sweep's configurations are histories of their own, and a run whose client
    /// limited it is listed apart from the bands, as are runs not decided.
    #[test]
    fn server_configurations_are_kept_apart_and_limited_runs_set_apart() {
        let mut runs: Vec<RunPoint> = (1..=8)
            .map(|i| run(i, &format!("c{i}"), 8.0, "pass"))
            .collect();
        for (i, r) in runs.iter_mut().enumerate() {
            r.server = Some(format!(
                "llama-server --port {{port}} -np {}",
                1 + 3 * (i % 2)
            ));
        }
        let plans = group(runs);
        assert_eq!(plans.len(), 2);
        assert!(plans.iter().all(|p| p.runs.len() == 4));
        assert_eq!(
            plans[0].server.as_deref(),
            Some("llama-server --port {port} -np 1")
        );
        use super::super::{set_apart, WarningHead};
        let warned = |severity: &str, code: &str| {
            vec![WarningHead {
                severity: severity.into(),
                code: code.into(),
            }]
        };
        let why = set_apart("pass", false, &warned("warning", "client-stall")).unwrap();
        assert!(
            why.contains("its client limited it (client-stall)"),
            "{why}"
        );
        assert_eq!(
            set_apart("fail", false, &warned("note", "client-stall")),
            None
        );
        assert_eq!(
            set_apart("fail", false, &warned("warning", "finish-stop")),
            None
        );
        assert!(set_apart("not_decided", false, &[])
            .unwrap()
            .starts_with("not decided"));
        assert!(set_apart("pass", true, &[]).is_some());
    }

    /// Runs named by `--label` are named on the charts' axis, one in so many when they are many.
    #[test]
    fn labelled_runs_are_named_on_the_axis() {
        let svg = |n: usize| {
            let runs: Vec<RunPoint> = (1..=n)
                .map(|i| run(i, &format!("c{i}"), 8.0 + (i % 3) as f64, "pass"))
                .collect();
            let plans = group(runs);
            charts(&plans[0])[0].svg.to_string()
        };
        let few = svg(6);
        for i in 1..=6 {
            assert!(few.contains(&format!(">c{i}<")), "{few}");
        }
        let many = svg(30);
        assert!(many.contains(">c1<") && many.contains(">c4<"), "{many}");
        assert!(!many.contains(">c2<"), "at most {AXIS_NAMES} names: {many}");
        let long = run(1, "0123456789abcdef", 1.0, "pass");
        let axis = run_axis(&group(vec![long.clone(), long])[0], true);
        assert_eq!(axis.categories[0], "0123456789…");
    }
}
