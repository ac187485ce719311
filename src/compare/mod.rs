//! Comparing a run with a baseline: is the current run slower beyond the run-to-run noise?
//!
//! Each compared metric gets the baseline and current values, the change (relative for
//! latencies, token rates and throughputs; in rate points for error, timeout and goodput rates),
//! and a 95% confidence interval for that change from a seeded bootstrap over the per-request
//! records of both runs. A regression is declared only when the whole interval lies beyond the
//! plan's tolerance, so a gate neither flakes on noise nor lets a clear slowdown through. A
//! change is "unchanged" only when the whole interval lies within the tolerance: an interval
//! that reaches past it (runs too short or too noisy to gate at that tolerance) is *not
//! decided*, with the run length that would decide it, and so is a row whose run's client
//! stalled or was limited (its numbers are not evidence about the server).
//!
//! This stage reads two runs' records and the current plan's tolerances; it renders nothing
//! (that is [`crate::report`]).

mod bootstrap;

use serde::Serialize;

use crate::metrics;
use crate::metrics::percentile;
use crate::metrics::table::{self, Source};
use crate::plan::{Metric, MetricKind, Slo, Stat, Tolerance, Undecided};
use crate::planner::search::Bracket;
use crate::records::{RequestRecord, RunHeader, RunLog};
use bootstrap::Resampler;

/// Bootstrap resamples for per-request metrics, and for ITL (whose gaps are resampled by
/// request, which costs as many gaps as a run has).
const RESAMPLES: usize = 1000;
const ITL_RESAMPLES: usize = 200;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
/// How a metric changed against the baseline.
pub enum Change {
    /// Worse than the tolerance allows, beyond the noise: fails the gate.
    Regression,
    /// The interval of the change reaches past the tolerance without lying wholly beyond it,
    /// or the client stalled or was limited in one of the runs: the runs cannot say whether
    /// the metric regressed ([`Row::undecided`] says why, and what would decide it).
    NotDecided,
    /// Better, beyond the noise.
    Improvement,
    /// Within the tolerance, beyond the noise.
    Unchanged,
    /// One of the runs has no data for it.
    NoData,
}

#[derive(Debug, Clone, Serialize)]
/// One compared metric.
pub struct Row {
    /// The tolerance as written, e.g. `ttft p99 +10%`.
    pub metric: String,
    /// The phase compared, or `all`.
    pub phase: String,
    /// The unit of `baseline` and `current`.
    pub unit: &'static str,
    /// The baseline run's value.
    pub baseline: Option<f64>,
    /// The current run's value.
    pub current: Option<f64>,
    /// current − baseline, relative to the baseline (0.12 = +12%), or in rate points for rates.
    pub change: Option<f64>,
    /// Low end of the 95% confidence interval of `change`.
    pub ci_low: Option<f64>,
    /// High end of the 95% confidence interval of `change`.
    pub ci_high: Option<f64>,
    /// Whether `change` is relative (true) or in rate points (false).
    pub relative: bool,
    /// The allowed worsening, in the same terms as `change` (signed: + for latencies).
    pub allowed: f64,
    /// What the change means.
    pub verdict: Change,
    /// Why the runs cannot decide it, and what would (a not-decided row only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub undecided: Option<String>,
    /// Whether this row lets the run pass: a regression never does; a row not decided does
    /// only under the plan's `sla { undecided "pass" }`.
    pub passes: bool,
}

#[derive(Debug, Clone, Serialize)]
/// A run compared with a baseline.
pub struct Comparison {
    /// The baseline run's header.
    pub baseline: RunHeader,
    /// The current run's header.
    pub current: RunHeader,
    /// One row per tolerance.
    pub rows: Vec<Row>,
    /// Whether any row is a regression (which fails the gate).
    pub regressed: bool,
    /// What the plan makes of a row the runs cannot decide (`sla { undecided }`).
    #[serde(skip)]
    pub undecided_policy: Undecided,
    /// What a reader should know (a forced comparison, an edited plan).
    pub notes: Vec<String>,
}

/// The tolerances used when a plan has no `regression` block.
pub fn default_tolerances() -> Vec<Tolerance> {
    let t = |metric: Metric, stat: Option<Stat>, allowed: f64| {
        let sign = if metric.higher_is_better() { '-' } else { '+' };
        let stat_text = stat.map(|s| format!(" {s}")).unwrap_or_default();
        Tolerance {
            metric,
            stat,
            allowed,
            phase: None,
            text: format!("{}{stat_text} {sign}{}%", metric.name(), allowed * 100.0),
        }
    };
    let p = |q: f64| Some(Stat::Percentile(q));
    vec![
        t(Metric::Ttft, p(50.0), 0.10),
        t(Metric::Ttft, p(99.0), 0.10),
        t(Metric::Itl, p(50.0), 0.10),
        t(Metric::Itl, p(99.0), 0.10),
        t(Metric::Tpot, p(50.0), 0.10),
        t(Metric::E2e, p(99.0), 0.10),
        t(Metric::OutputThroughput, None, 0.05),
        t(Metric::ErrorRate, None, 0.01),
    ]
}

/// The tolerances used when a plan with a search has no `regression` block: its capacity. Its
/// probes' loads differ from run to run, so per-request metrics over them compare nothing.
pub fn default_search_tolerances() -> Vec<Tolerance> {
    vec![Tolerance {
        metric: Metric::Capacity,
        stat: None,
        allowed: 0.10,
        phase: None,
        text: "capacity -10%".into(),
    }]
}

/// Refuses runs that do not measure the same thing, unless `force`; returns notes otherwise.
pub fn comparable(
    baseline: &RunHeader,
    current: &RunHeader,
    force: bool,
) -> crate::error::Result<Vec<String>> {
    let mut differences = Vec::new();
    let mut check = |what: &str, a: &str, b: &str| {
        if a != b {
            differences.push(format!("{what}: baseline {a}, current {b}"));
        }
    };
    check("plan", &baseline.plan, &current.plan);
    check(
        "seed",
        &baseline.seed.to_string(),
        &current.seed.to_string(),
    );
    check("model", &baseline.model, &current.model);
    check("api", &baseline.api, &current.api);
    check(
        "streaming",
        &baseline.stream.to_string(),
        &current.stream.to_string(),
    );
    let mut notes = Vec::new();
    if !differences.is_empty() {
        if !force {
            return Err(crate::error::Error::usage(format!(
                "these runs do not measure the same thing ({}); compare runs of one plan, seed and model, \
                 or pass --force to compare anyway",
                differences.join("; ")
            )));
        }
        notes.push(format!(
            "compared with --force although {}",
            differences.join("; ")
        ));
    }
    if baseline.plan_sha256 != current.plan_sha256 {
        notes.push("the plan file changed between the runs (its SHA-256 differs)".into());
    } else if baseline.plan_files != current.plan_files {
        notes
            .push("a file the plan includes changed between the runs (its SHA-256 differs)".into());
    }
    notes.extend(server_notes(
        baseline.server.as_deref(),
        current.server.as_deref(),
    ));
    notes.extend(crate::records::fact_differences(baseline, current));
    Ok(notes)
}

/// How the servers the runs started differ: another build (its version) or other settings
/// (its command line, the port left out) is what a baseline from another engine build shows.
fn server_notes(
    baseline: Option<&crate::records::LaunchedServer>,
    current: Option<&crate::records::LaunchedServer>,
) -> Vec<String> {
    let mut notes = Vec::new();
    match (baseline, current) {
        (Some(b), Some(c)) => {
            if b.version != c.version {
                let said = |v: &Option<String>| v.clone().unwrap_or_else(|| "nothing".into());
                notes.push(format!(
                    "the runs' servers are different builds: the baseline's said {}, this run's {}",
                    said(&b.version),
                    said(&c.version)
                ));
            }
            if b.command != c.command {
                notes.push(format!(
                    "the runs' servers were started with different command lines: the baseline's \
                     `{}`, this run's `{}`",
                    b.command, c.command
                ));
            }
        }
        (Some(_), None) => notes.push(
            "the baseline started its server itself (the plan's `server`); this run did not".into(),
        ),
        (None, Some(_)) => notes.push(
            "this run started its server itself (the plan's `server`); the baseline did not".into(),
        ),
        (None, None) => {}
    }
    notes
}

/// What one completed (ok or failed, not cancelled) request contributes to the compared metric.
struct Sample {
    /// Its value, for a single-valued distribution (TTFT, TPOT...).
    value: Option<f64>,
    /// Its gaps and their weights, for ITL.
    gaps: Vec<(f64, u64)>,
    /// Whether a share (error rate, goodput ratio...) counts it.
    counted: bool,
    /// Whether it is in the share's denominator.
    among: bool,
}

struct Side {
    samples: Vec<Sample>,
    wall_s: f64,
    /// The scope's time cut into equal windows: what each window's completed requests
    /// returned. Throughputs are resampled by window, so that their interval holds the run's
    /// variation over time, not only which requests succeeded.
    windows: Vec<f64>,
}

/// Throughputs' windows per scope.
const WINDOWS: usize = 20;

/// One scope of one run, as the compared `metric` reads it.
fn side(
    log: &RunLog,
    aggregates: &metrics::Aggregates,
    metric: Metric,
    phase: Option<&str>,
    slo: Option<&Slo>,
) -> Side {
    let (indices, wall_s): (Vec<usize>, f64) = match phase {
        Some(name) => (
            log.phases
                .iter()
                .filter(|p| p.name == name)
                .map(|p| p.index)
                .collect(),
            aggregates
                .phases
                .iter()
                .find(|p| p.name == name)
                .map_or(0.0, |p| p.wall_s),
        ),
        None => (
            log.phases
                .iter()
                .filter(|p| p.record)
                .map(|p| p.index)
                .collect(),
            aggregates.overall.wall_s,
        ),
    };
    let included = |r: &&RequestRecord| indices.contains(&r.phase) && r.completed();
    // Windows span the completions themselves (from the first to the last), so that a run's
    // start-up and drain do not pass for variation; a window's rate is scaled so that all
    // windows together give the report's throughput (total / wall time).
    let ends: Vec<u64> = log
        .records
        .iter()
        .filter(included)
        .map(|r| r.end_us().unwrap_or(r.actual_send_us))
        .collect();
    let first = ends.iter().copied().min().unwrap_or(0);
    let span_us = (ends.iter().copied().max().unwrap_or(0) - first) as f64 + 1.0;
    let good = |r: &RequestRecord| slo.is_some_and(|slo| metrics::meets(slo, r));
    let mut windows = vec![0.0; WINDOWS];
    if let Source::PerSecond { amount, .. } = metric.def().source {
        for r in log.records.iter().filter(included) {
            let at = (r.end_us().unwrap_or(r.actual_send_us) - first) as f64;
            windows[((at / span_us * WINDOWS as f64) as usize).min(WINDOWS - 1)] +=
                amount(r, good(r));
        }
    }
    // A sampled log holds a uniform share of the run's requests: its windows hold that share of
    // each window's amount.
    if let Some(sampled) = &log.sampled {
        let scale = sampled.total as f64 / sampled.kept.max(1) as f64;
        windows.iter_mut().for_each(|amount| *amount *= scale);
    }
    if metric.def().needs == table::Needs::Sessions {
        return Side {
            samples: session_samples(log, metric, &indices, slo),
            wall_s,
            windows,
        };
    }
    let samples = log
        .records
        .iter()
        .filter(included)
        .map(|r| {
            let mut gaps = Vec::new();
            let (mut value, mut counted, mut among_it) = (None, false, true);
            match metric.def().source {
                Source::Distribution {
                    sample: table::Sample::Gaps(_),
                    ..
                } => metric.samples(r, false, |gap, weight| gaps.push((gap, weight))),
                Source::Distribution { .. } => value = metric.sample(r, false),
                Source::Share { among, counts, .. } => {
                    among_it = among(r);
                    counted = among_it && counts(r, good(r));
                }
                // Not from one request each: compared from the summaries, not resampled.
                Source::PerSecond { .. }
                | Source::Aggregate(_)
                | Source::Sessions { .. }
                | Source::Server(_)
                | Source::Search => {}
            }
            Sample {
                value,
                gaps,
                counted,
                among: among_it,
            }
        })
        .collect();
    Side {
        samples,
        wall_s,
        windows,
    }
}

/// A session metric's samples: one per judged session of the scope (a distribution's value;
/// for session goodput, whether it was good), resampled session by session as a request
/// metric's are request by request. None from a log that holds a sample of the requests.
fn session_samples(
    log: &RunLog,
    metric: Metric,
    phases: &[usize],
    slo: Option<&Slo>,
) -> Vec<Sample> {
    let outcomes = metrics::sessions::outcomes_of(log, phases, slo).unwrap_or_default();
    let value_of = match metric.def().source {
        Source::Sessions { sample, .. } => Some(sample),
        // Session goodput: the share of good sessions.
        Source::Distribution { .. }
        | Source::Share { .. }
        | Source::PerSecond { .. }
        | Source::Aggregate(_)
        | Source::Server(_)
        | Source::Search => None,
    };
    outcomes
        .iter()
        .map(|outcome| Sample {
            value: value_of.and_then(|sample| sample(outcome)),
            gaps: Vec::new(),
            counted: outcome.good,
            among: true,
        })
        .collect()
}

/// Whether a metric is resampled by time window (throughputs) rather than by request.
fn by_window(metric: Metric) -> bool {
    matches!(metric.def().source, Source::PerSecond { .. })
}

/// The metric's value over the samples chosen by `pick` (indices into `side.samples`, or into
/// `side.windows` for throughputs), computed as the metric table defines it.
fn value(
    tolerance: &Tolerance,
    side: &Side,
    pick: &[usize],
    scratch: &mut Vec<f64>,
) -> Option<f64> {
    let chosen = pick.iter().map(|&i| &side.samples[i]);
    match tolerance.metric.def().source {
        Source::Distribution {
            sample: table::Sample::Gaps(_),
            ..
        } => {
            // A chunk of k tokens is k samples of gap/k, as in the report.
            scratch.clear();
            for sample in chosen {
                for &(gap, k) in &sample.gaps {
                    scratch.extend(std::iter::repeat_n(gap, k as usize));
                }
            }
            statistic(tolerance.stat?, scratch)
        }
        // A value per request, or per session.
        Source::Distribution { .. } | Source::Sessions { .. } => {
            scratch.clear();
            scratch.extend(chosen.filter_map(|s| s.value));
            statistic(tolerance.stat?, scratch)
        }
        Source::Share { .. } => share(chosen),
        // An aggregate over sessions (session goodput) is the share of good ones.
        Source::Aggregate(_) if tolerance.metric.def().needs == table::Needs::Sessions => {
            share(chosen)
        }
        Source::PerSecond { .. } => {
            // `pick` holds windows here: the mean of their rates (all windows: total / wall).
            if side.wall_s <= 0.0 || pick.is_empty() {
                return None;
            }
            let window_s = side.wall_s / side.windows.len() as f64;
            let total: f64 = pick.iter().map(|&i| side.windows[i]).sum();
            Some(total / (window_s * pick.len() as f64))
        }
        // Capacity is not a statistic of requests: it is compared from the two runs'
        // search brackets, not resampled. The server's own numbers are not compared.
        Source::Search | Source::Server(_) | Source::Aggregate(_) => None,
    }
}

/// The share of the samples in a share's denominator that it counts.
fn share<'a>(chosen: impl Iterator<Item = &'a Sample> + Clone) -> Option<f64> {
    let among = chosen.clone().filter(|s| s.among).count() as f64;
    (among > 0.0).then(|| chosen.filter(|s| s.counted).count() as f64 / among)
}

/// `capacity -10%`: the two searches' brackets compared. A search's bracket is its noise: the
/// capacity lies between the load it sustained and the load it failed at. The change is that
/// of the sustained loads; its interval runs from the most pessimistic reading of both
/// brackets to the most optimistic; a regression is a drop beyond the tolerance even on the
/// most optimistic reading.
fn capacity_row(tolerance: &Tolerance, capacities: Option<(&Bracket, &Bracket)>) -> Row {
    let row = |baseline, current, change, ci_low, ci_high, verdict| Row {
        metric: tolerance.text.clone(),
        phase: "search".into(),
        unit: capacities.map_or(MetricKind::Capacity.unit(), |(b, _)| match b.unit {
            crate::plan::LoadUnit::RequestsPerSecond => "requests_per_s",
            crate::plan::LoadUnit::Concurrency => "concurrent_requests",
            crate::plan::LoadUnit::Sessions => "concurrent_sessions",
        }),
        baseline,
        current,
        change,
        ci_low,
        ci_high,
        relative: true,
        allowed: -tolerance.allowed,
        verdict,
        undecided: None,
        passes: true,
    };
    let Some((base, cur)) = capacities else {
        return row(None, None, None, None, None, Change::NoData);
    };
    if base.unit != cur.unit {
        return row(None, None, None, None, None, Change::NoData);
    }
    // Where nothing held, the capacity is below the range's bottom: 0 at worst.
    let (base_low, cur_low) = (base.sustains.unwrap_or(0.0), cur.sustains.unwrap_or(0.0));
    if base_low <= 0.0 {
        return row(
            base.sustains,
            cur.sustains,
            None,
            None,
            None,
            Change::NoData,
        );
    }
    let change = cur_low / base_low - 1.0;
    let ci_low = base.fails_at.map(|base_high| cur_low / base_high - 1.0);
    let ci_high = cur.fails_at.map(|cur_high| cur_high / base_low - 1.0);
    // A search that never failed bounds nothing above: the current one's optimistic reading is
    // unbounded; the baseline's pessimistic one is its sustained load (the plan's range is all
    // it asked about).
    let worse = Worse {
        point: -change,
        low: ci_high.map_or(f64::NEG_INFINITY, |high| -high),
        high: ci_low.map_or(-change, |low| -low),
    };
    let verdict = worse.verdict(tolerance.allowed);
    let mut row = row(
        base.sustains,
        cur.sustains,
        Some(change),
        ci_low,
        ci_high,
        verdict,
    );
    if verdict == Change::NotDecided {
        row.undecided = Some(format!(
            "the searches' brackets leave the change between {:+.1}% and {:+.1}%, past the \
             tolerance: narrow them (a finer search precision, more max-probes or a longer max-duration) to decide {}",
            -worse.high * 100.0,
            -worse.low.max(-10.0) * 100.0,
            tolerance.text
        ));
    }
    row
}

/// A statistic of raw values (reordered in place).
fn statistic(stat: Stat, values: &mut [f64]) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    Some(match stat {
        Stat::Min => values.iter().copied().fold(f64::INFINITY, f64::min),
        Stat::Max => values.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        Stat::Mean => values.iter().sum::<f64>() / values.len() as f64,
        Stat::Percentile(p) => percentile(values, p),
    })
}

/// Compares `current` with `baseline` under `tolerances`; `seed` makes the bootstrap
/// repeatable; `undecided` is what the plan makes of a row the runs cannot decide.
#[allow(clippy::too_many_arguments)]
pub fn compare(
    baseline: &RunLog,
    current: &RunLog,
    tolerances: &[Tolerance],
    slo: Option<&Slo>,
    capacities: Option<(&Bracket, &Bracket)>,
    notes: Vec<String>,
    seed: u64,
    undecided: Undecided,
) -> Comparison {
    // Wall times and the client's stalls come from the aggregates: computed once per run, not
    // once per tolerance.
    let runs = Runs {
        baseline,
        current,
        baseline_aggregates: metrics::compute(baseline, slo),
        current_aggregates: metrics::compute(current, slo),
        slo,
    };
    let rows: Vec<Row> = tolerances
        .iter()
        .enumerate()
        .map(|(index, tolerance)| {
            let mut row = if matches!(tolerance.metric.def().source, Source::Search) {
                capacity_row(tolerance, capacities)
            } else {
                let seed = seed ^ crate::seed::mix64(index as u64 + 1);
                let mut row = metric_row(&runs, tolerance, seed);
                if let Some(why) = runs.client_doubt(tolerance, &row) {
                    row.verdict = Change::NotDecided;
                    row.undecided = Some(why);
                }
                row
            };
            row.passes = match row.verdict {
                Change::Regression => false,
                Change::NotDecided => undecided == Undecided::Pass,
                Change::Improvement | Change::Unchanged | Change::NoData => true,
            };
            row
        })
        .collect();
    Comparison {
        baseline: baseline.header.clone().unwrap_or_default(),
        current: current.header.clone().unwrap_or_default(),
        regressed: rows.iter().any(|r| r.verdict == Change::Regression),
        rows,
        notes,
        undecided_policy: undecided,
    }
}

impl Comparison {
    /// The rows the runs cannot decide.
    pub fn not_decided(&self) -> impl Iterator<Item = &Row> {
        self.rows.iter().filter(|r| r.verdict == Change::NotDecided)
    }
}

/// The two runs compared, and their aggregates.
struct Runs<'a> {
    baseline: &'a RunLog,
    current: &'a RunLog,
    baseline_aggregates: metrics::Aggregates,
    current_aggregates: metrics::Aggregates,
    slo: Option<&'a Slo>,
}

impl Runs<'_> {
    /// Why a row is no evidence about the server, if it is not: the client was limited in
    /// either run (the load was not the plan's: no reading stands), or it stalled in the
    /// current run while the row reads worse — or in the baseline while it does not — long
    /// and often enough to have moved the metric by the change seen.
    fn client_doubt(&self, tolerance: &Tolerance, row: &Row) -> Option<String> {
        let phase = tolerance.phase.as_deref();
        let sides = [
            ("baseline", self.baseline_aggregates.scope(phase)),
            ("current", self.current_aggregates.scope(phase)),
        ];
        for (which, scope) in sides {
            if let Some(why) = scope.and_then(metrics::warnings::client_limited) {
                return Some(format!(
                    "the {which} run's client, not the server, limited it: {why}; run both where \
                     the client is not starved"
                ));
            }
        }
        let worse = matches!(row.verdict, Change::Regression | Change::NotDecided);
        let (which, scope) = sides[usize::from(worse)];
        let scope = scope?;
        let stalls = scope.client_stalls.filter(|s| s.count > 0)?;
        let (baseline, current) = row.baseline.zip(row.current)?;
        let (value, to) = if worse {
            (current, baseline)
        } else {
            (baseline, current)
        };
        if !metrics::stalls::could_move(scope, tolerance.metric, tolerance.stat, value, to) {
            return None;
        }
        Some(format!(
            "the {which} run's client stalled ({}), enough to make this change: not evidence \
             about the server; run both where the client is not starved",
            stalls.describe()
        ))
    }
}

/// One tolerance's row: both runs' values, the change, its bootstrap interval, and what it
/// means.
fn metric_row(runs: &Runs, tolerance: &Tolerance, seed: u64) -> Row {
    let (metric, phase) = (tolerance.metric, tolerance.phase.as_deref());
    let base = side(
        runs.baseline,
        &runs.baseline_aggregates,
        metric,
        phase,
        runs.slo,
    );
    let cur = side(
        runs.current,
        &runs.current_aggregates,
        metric,
        phase,
        runs.slo,
    );
    let relative = metric.kind() != MetricKind::Fraction;
    let sign = if metric.higher_is_better() { -1.0 } else { 1.0 };
    let mut scratch = Vec::new();
    let units = |side: &Side| {
        if by_window(metric) {
            side.windows.len()
        } else {
            side.samples.len()
        }
    };
    let all = |side: &Side| (0..units(side)).collect::<Vec<usize>>();
    let b = value(tolerance, &base, &all(&base), &mut scratch);
    let c = value(tolerance, &cur, &all(&cur), &mut scratch);
    let change_of = |b: f64, c: f64| -> Option<f64> {
        if relative {
            (b.abs() > 0.0).then(|| (c - b) / b)
        } else {
            Some(c - b)
        }
    };
    let change = b.zip(c).and_then(|(b, c)| change_of(b, c));
    let resamples = match metric.def().source {
        Source::Distribution {
            sample: table::Sample::Gaps(_),
            ..
        } => ITL_RESAMPLES,
        Source::Distribution { .. }
        | Source::Share { .. }
        | Source::PerSecond { .. }
        | Source::Aggregate(_)
        | Source::Sessions { .. }
        | Source::Server(_)
        | Source::Search => RESAMPLES,
    };
    let mut resampler = Resampler::new(seed);
    let mut changes = Vec::with_capacity(resamples);
    if change.is_some() {
        let (mut pick_base, mut pick_cur) = (Vec::new(), Vec::new());
        for _ in 0..resamples {
            resampler.resample(units(&base), &mut pick_base);
            resampler.resample(units(&cur), &mut pick_cur);
            let vb = value(tolerance, &base, &pick_base, &mut scratch);
            let vc = value(tolerance, &cur, &pick_cur, &mut scratch);
            if let Some(d) = vb.zip(vc).and_then(|(vb, vc)| change_of(vb, vc)) {
                changes.push(d);
            }
        }
    }
    let (ci_low, ci_high) = if changes.len() >= resamples / 2 {
        (
            Some(percentile(&mut changes.clone(), 2.5)),
            Some(percentile(&mut changes, 97.5)),
        )
    } else {
        (None, None)
    };
    let mut row = Row {
        metric: tolerance.text.clone(),
        phase: tolerance.phase.clone().unwrap_or_else(|| "all".into()),
        unit: metric.kind().unit(),
        baseline: b,
        current: c,
        change,
        ci_low,
        ci_high,
        relative,
        allowed: sign * tolerance.allowed,
        verdict: Change::NoData,
        undecided: None,
        passes: true,
    };
    if let (Some(change), Some(low), Some(high)) = (change, ci_low, ci_high) {
        // "Worse": the change in the direction that is bad for this metric.
        let worse = if sign > 0.0 {
            Worse {
                point: change,
                low,
                high,
            }
        } else {
            Worse {
                point: -change,
                low: -high,
                high: -low,
            }
        };
        row.verdict = worse.verdict(tolerance.allowed);
        if row.verdict == Change::NotDecided {
            let counts = (base.samples.len(), cur.samples.len());
            let length = match (by_window(metric), metric.def().needs) {
                (true, _) => RunLength::Seconds(base.wall_s.max(cur.wall_s)),
                (false, table::Needs::Sessions) => RunLength::Sessions(counts.0, counts.1),
                (false, _) => RunLength::Requests(counts.0, counts.1),
            };
            row.undecided = Some(too_short(&row, tolerance, &worse, length));
        }
    }
    row
}

/// A change and its interval, signed so that positive is worse for the metric.
struct Worse {
    point: f64,
    low: f64,
    high: f64,
}

impl Worse {
    /// A regression when the whole interval lies beyond the tolerance; unchanged or improved
    /// only when the whole interval lies within it; otherwise not decided.
    fn verdict(&self, allowed: f64) -> Change {
        if self.low > allowed {
            Change::Regression
        } else if self.high > allowed {
            Change::NotDecided
        } else if self.high < 0.0 {
            Change::Improvement
        } else {
            Change::Unchanged
        }
    }

    /// How many times longer both runs would have to be for the interval, which narrows as
    /// 1/√n, to clear the tolerance on the side of its point: `None` when the point sits on
    /// the tolerance itself, where no length decides.
    fn length_factor(&self, allowed: f64) -> Option<f64> {
        let (reach, room) = if self.point <= allowed {
            (self.high - self.point, allowed - self.point)
        } else {
            (self.point - self.low, self.point - allowed)
        };
        (room > 1e-12).then(|| (reach / room).powi(2))
    }
}

/// How long the compared runs were, in the units their interval was resampled by.
enum RunLength {
    /// Throughputs: seconds of each run.
    Seconds(f64),
    /// Per-request metrics: the baseline's and the current run's requests.
    Requests(usize, usize),
    /// Session metrics: the baseline's and the current run's judged sessions.
    Sessions(usize, usize),
}

/// Why a row whose interval reaches past its tolerance is not decided, and the run length that
/// would decide it.
fn too_short(row: &Row, tolerance: &Tolerance, worse: &Worse, length: RunLength) -> String {
    let show = |v: f64| match row.relative {
        true => format!("{:+.1}%", v * 100.0),
        false => format!("{:+.2} pts", v * 100.0),
    };
    let interval = format!(
        "the change's 95% interval ({} to {}) reaches past the tolerance",
        show(row.ci_low.unwrap_or(0.0)),
        show(row.ci_high.unwrap_or(0.0))
    );
    let Some(factor) = worse.length_factor(tolerance.allowed) else {
        return format!(
            "{interval}, and the change sits on the tolerance itself: no run length decides {}",
            tolerance.text
        );
    };
    let needs = match length {
        RunLength::Seconds(s) => format!(
            "runs of ≈ {} s each (these: {})",
            crate::words::thousands((s * factor).ceil() as u64),
            if s < 10.0 {
                format!("{s:.1} s")
            } else {
                format!("{s:.0} s")
            }
        ),
        RunLength::Requests(b, c) => format!(
            "≈ {} requests in each run (these: {b} and {c})",
            crate::words::thousands((b.max(c) as f64 * factor).ceil() as u64)
        ),
        RunLength::Sessions(b, c) => format!(
            "≈ {} judged sessions in each run (these: {b} and {c})",
            crate::words::thousands((b.max(c) as f64 * factor).ceil() as u64)
        ),
    };
    format!(
        "{interval}: these runs are too short to gate {}; it needs {needs}",
        tolerance.text
    )
}

#[cfg(test)]
mod tests;
