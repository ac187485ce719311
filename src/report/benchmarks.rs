//! A run's headline numbers in the formats continuous-benchmarking tools keep histories of:
//! Bencher's Metric Format (BMF) and github-action-benchmark's `customSmallerIsBetter` and
//! `customBiggerIsBetter` JSON. Written on request (`--export FORMAT FILE` of `run` and
//! `report`), never into the report directory by default.
//!
//! Each exported number is a [`Measure`] of [`MEASURES`]: a metric of all recorded phases (or
//! the search's capacity; for an amount per token in a search, of the probe at the capacity),
//! with a 95% confidence interval where one is known: for a percentile,
//! the distribution-free interval of order statistics (the values at the ranks
//! n·q ± 1.96·√(n·q·(1−q))), read from the run's own histogram; for the error rate, Wilson's
//! score interval over the completed requests; for the capacity, its bracket; for a throughput,
//! that of the count of completions it rests on; for an amount per token (joules, dollars), the
//! throughput's turned over.
//!
//! It is not `compare`: it judges nothing; the tools that read it keep the history and the
//! thresholds.

use serde_json::{json, Map, Value};

use super::Summary;
use crate::metrics::table::Better;
use crate::metrics::{Metric, PhaseMetrics};
use crate::plan::Stat;

/// One exported number (summary.json's `measures`).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Measure {
    /// `ttft p99`, `output throughput`, `capacity`.
    pub name: String,
    /// Bencher's measure slug: `ttft-p99-ms`.
    pub slug: String,
    /// `ms`, `req/s`, `tok/s`, `%`.
    pub unit: &'static str,
    /// The run's value.
    pub value: f64,
    /// The 95% confidence interval, when known.
    pub bounds: Option<(f64, f64)>,
    /// The ends of `bounds` the sample cannot reach (there `bounds` holds the sample's extreme).
    #[serde(default, skip_serializing_if = "Open::is_neither")]
    pub open: Open,
    /// Which way is better: its metric's.
    pub direction: Better,
}

/// The ends of a percentile's 95% interval its sample cannot bound: the interval of p99 over 40
/// requests needs the 42nd value, so its upper end is beyond the slowest request seen and the
/// sample's extreme stands there only as the least it could be. A history never calls a run
/// better (or worse) on a side whose end is open.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Open {
    /// Both ends are order statistics of the sample.
    #[default]
    Neither,
    /// The lower end lies below the smallest value seen.
    Below,
    /// The upper end lies above the largest value seen.
    Above,
    /// Both.
    Both,
}

impl Open {
    fn of(below: bool, above: bool) -> Open {
        match (below, above) {
            (false, false) => Open::Neither,
            (true, false) => Open::Below,
            (false, true) => Open::Above,
            (true, true) => Open::Both,
        }
    }

    /// Whether both ends are known (serde's skip test).
    pub fn is_neither(&self) -> bool {
        *self == Open::Neither
    }

    /// Whether the lower end is open.
    pub fn below(self) -> bool {
        matches!(self, Open::Below | Open::Both)
    }

    /// Whether the upper end is open.
    pub fn above(self) -> bool {
        matches!(self, Open::Above | Open::Both)
    }
}

/// A value, its 95% confidence interval when known, and the ends of it the sample cannot reach.
type OpenRead = Option<(f64, Option<(f64, f64)>, Open)>;

/// How a measure's 95% interval is known.
enum Interval {
    /// The percentile `q` of the metric's distribution over all recorded phases, with the
    /// interval of its order statistics.
    Percentile(f64),
    /// A share of the completed requests: Wilson's score interval.
    Share,
    /// A rate over completions: the interval of the count of them it rests on (the successful
    /// requests, or the good ones).
    Completions(fn(&PhaseMetrics) -> Option<u64>),
    /// An amount per token: the throughput's interval turned over (over the successful
    /// requests' count, or the good ones').
    PerToken(fn(&PhaseMetrics) -> Option<u64>),
    /// A search's capacity: its bracket, what held and what failed.
    Bracket,
}

/// One exported number: a metric of the metric table (its value and its direction are the
/// table's), named for the tools that keep histories of it.
struct MeasureDef {
    name: &'static str,
    slug: &'static str,
    unit: &'static str,
    metric: Metric,
    /// The value in `unit` per the table's value (100 for a share in %).
    scale: f64,
    interval: Interval,
}

/// The measures exported, in order: what a history of runs is looked at for.
const MEASURES: &[MeasureDef] = &[
    percentile("ttft p50", "ttft-p50-ms", Metric::Ttft, 50.0),
    percentile("ttft p99", "ttft-p99-ms", Metric::Ttft, 99.0),
    percentile("itl p99", "itl-p99-ms", Metric::Itl, 99.0),
    percentile("tpot p50", "tpot-p50-ms", Metric::Tpot, 50.0),
    percentile("e2e p99", "e2e-p99-ms", Metric::E2e, 99.0),
    MeasureDef {
        name: "error rate",
        slug: "error-rate-percent",
        unit: "%",
        metric: Metric::ErrorRate,
        scale: 100.0,
        interval: Interval::Share,
    },
    MeasureDef {
        name: "request throughput",
        slug: "requests-per-second",
        unit: "req/s",
        metric: Metric::RequestThroughput,
        scale: 1.0,
        interval: Interval::Completions(successful),
    },
    MeasureDef {
        name: "output throughput",
        slug: "output-tokens-per-second",
        unit: "tok/s",
        metric: Metric::OutputThroughput,
        scale: 1.0,
        interval: Interval::Completions(successful),
    },
    MeasureDef {
        name: "goodput",
        slug: "goodput-requests-per-second",
        unit: "req/s",
        metric: Metric::Goodput,
        scale: 1.0,
        interval: Interval::Completions(good),
    },
    MeasureDef {
        name: "energy per output token",
        slug: "energy-per-output-token-j",
        unit: "J",
        metric: Metric::EnergyPerOutputToken,
        scale: 1.0,
        interval: Interval::PerToken(successful),
    },
    MeasureDef {
        name: "cost per million output tokens",
        slug: "cost-per-million-output-tokens-usd",
        unit: "$",
        metric: Metric::CostPerMillionOutputTokens,
        scale: 1.0,
        interval: Interval::PerToken(successful),
    },
    MeasureDef {
        name: "cost per million goodput tokens",
        slug: "cost-per-million-goodput-tokens-usd",
        unit: "$",
        metric: Metric::CostPerMillionGoodputTokens,
        scale: 1.0,
        interval: Interval::PerToken(good),
    },
    MeasureDef {
        name: "capacity",
        slug: "capacity",
        unit: "load",
        metric: Metric::Capacity,
        scale: 1.0,
        interval: Interval::Bracket,
    },
];

fn successful(scope: &PhaseMetrics) -> Option<u64> {
    Some(scope.requests.ok)
}

fn good(scope: &PhaseMetrics) -> Option<u64> {
    scope.goodput.as_ref().map(|g| g.good)
}

impl MeasureDef {
    /// The run's value and its interval, with the ends the sample cannot reach.
    fn read(&self, summary: &Summary) -> OpenRead {
        let scaled = |(value, bounds): (f64, Option<(f64, f64)>)| {
            let bounds = bounds.map(|(low, high)| (low * self.scale, high * self.scale));
            Some((value * self.scale, bounds, Open::Neither))
        };
        let value = |scope: &PhaseMetrics| scope.value(self.metric, None);
        match self.interval {
            Interval::Percentile(q) => percentile_with_bounds(recorded(summary)?, self.metric, q),
            Interval::Share => {
                let scope = recorded(summary)?;
                let share = value(scope)?;
                scaled((share, wilson(share, scope.requests.completed())))
            }
            Interval::Completions(count) => {
                let scope = recorded(summary)?;
                scaled(per_completion(value(scope)?, count(scope)?))
            }
            Interval::PerToken(count) => {
                let scope = priced(summary)?;
                scaled(per_token(value(scope)?, count(scope)?))
            }
            Interval::Bracket => {
                let bracket = &summary.capacity.as_ref()?.bracket;
                let sustains = bracket.sustains?;
                let fails_at = bracket.fails_at.unwrap_or(sustains);
                scaled((sustains, Some((sustains, fails_at))))
            }
        }
    }
}

/// All recorded phases together, for a plain run; none for sweeps and searches, whose steps
/// each have their own load (a total over them mixes loads).
fn recorded(summary: &Summary) -> Option<&PhaseMetrics> {
    (summary.steps.is_empty() && summary.overall.requests.ok > 0).then_some(&summary.overall)
}

/// The scope an amount per token (joules, dollars) is read over: all recorded phases of a plain
/// run; for a capacity search, the last probe at its capacity (the highest load whose
/// objectives held), so that a token's price is the one paid at the most the server sustains
/// under them; none for a sweep (its steps each have a load of their own).
fn priced(summary: &Summary) -> Option<&PhaseMetrics> {
    if let Some(scope) = recorded(summary) {
        return Some(scope);
    }
    let sustains = summary.capacity.as_ref()?.bracket.sustains?;
    summary.phases.iter().rev().find(|phase| {
        let at_capacity = phase
            .step
            .as_ref()
            .is_some_and(|step| step.probe && !step.warmup && step.load_value == sustains);
        at_capacity && phase.recorded && phase.requests.ok > 0
    })
}

const fn percentile(name: &'static str, slug: &'static str, metric: Metric, q: f64) -> MeasureDef {
    MeasureDef {
        name,
        slug,
        unit: "ms",
        metric,
        scale: 1.0,
        interval: Interval::Percentile(q),
    }
}

/// A rate over a run's completions, with the 95% interval of the count it rests on: `n`
/// completions in a window are a draw from a Poisson count, whose interval (√n ± 0.98)², the
/// variance-stabilised one, scales the rate. A closed loop's completions come more evenly
/// than Poisson's, so it is wide rather than narrow there. Without it a throughput was a bare
/// point, and a history flagged a 2.2% wobble of 48 requests (-26% to +30% by this interval) as worse.
pub(crate) fn per_completion(rate: f64, n: u64) -> (f64, Option<(f64, f64)>) {
    if n == 0 || !rate.is_finite() {
        return (rate, None);
    }
    let count = n as f64;
    let root = count.sqrt();
    let low = (root - 0.98).max(0.0).powi(2) / count;
    let high = (root + 0.98).powi(2) / count;
    (rate, Some((rate * low, rate * high)))
}

/// An amount per token (joules, dollars) that is a rate over a run's tokens per second: its
/// interval is the throughput's ([`per_completion`], over the `n` completions it rests on),
/// turned over.
fn per_token(value: f64, n: u64) -> (f64, Option<(f64, f64)>) {
    let (_, bounds) = per_completion(1.0, n);
    let bounds = bounds.filter(|(low, _)| *low > 0.0);
    (value, bounds.map(|(low, high)| (value / high, value / low)))
}

/// The 95% Wilson score interval of a share `p` observed over `n` trials: a share of errors
/// over the completed requests. Unlike the normal approximation it stays within 0..1 and is not
/// empty when no error was seen (0 of 200 errors: up to 1.9%).
pub(crate) fn wilson(p: f64, n: u64) -> Option<(f64, f64)> {
    if n == 0 || !p.is_finite() {
        return None;
    }
    let n = n as f64;
    let z2 = 1.96f64 * 1.96;
    let centre = (p + z2 / (2.0 * n)) / (1.0 + z2 / n);
    let half = 1.96 * (p * (1.0 - p) / n + z2 / (4.0 * n * n)).sqrt() / (1.0 + z2 / n);
    Some(((centre - half).max(0.0), (centre + half).min(1.0)))
}

/// The value of a percentile and its 95% confidence interval from order statistics, with the
/// ends whose rank falls outside the sample (there the sample's extreme, and [`Open`]).
pub(crate) fn percentile_with_bounds(phase: &PhaseMetrics, metric: Metric, q: f64) -> OpenRead {
    let distribution = phase.distributions.get(metric)?;
    let value = distribution.stat(Stat::Percentile(q))?;
    let n = distribution.count() as f64;
    let p = q / 100.0;
    let half = 1.96 * (n * p * (1.0 - p)).sqrt();
    let low_rank = (n * p - half).floor();
    let high_rank = (n * p + half).ceil() + 1.0;
    let rank = |r: f64| r.clamp(1.0, n) / n * 100.0;
    let low = distribution.stat(Stat::Percentile(rank(low_rank)))?;
    let high = distribution.stat(Stat::Percentile(rank(high_rank)))?;
    Some((
        value,
        Some((low.min(value), high.max(value))),
        Open::of(low_rank < 1.0, high_rank > n),
    ))
}

/// Every measure the run has a value for, of those its plan chose (all when it chose none).
pub fn measures(summary: &Summary) -> Vec<Measure> {
    let chosen = &summary.context.header.exports;
    summary
        .measures
        .iter()
        .filter(|m| chosen.is_empty() || chosen.contains(&m.slug))
        .cloned()
        .collect()
}

/// Every measure the run has a value for: summary.json keeps them all, for `llmload history`.
pub fn all_measures(summary: &Summary) -> Vec<Measure> {
    MEASURES
        .iter()
        .filter_map(|def| {
            let (value, bounds, open) = def.read(summary)?;
            value.is_finite().then(|| Measure {
                name: def.name.to_string(),
                slug: def.slug.to_string(),
                unit: def.unit,
                value,
                bounds,
                open,
                direction: def.metric.def().better,
            })
        })
        .collect()
}

/// The benchmark's name in both formats: the plan, and its model when the run names one.
fn benchmark(summary: &Summary) -> String {
    let header = &summary.context.header;
    if header.model.is_empty() {
        header.plan.clone()
    } else {
        format!("{} ({})", header.plan, header.model)
    }
}

/// Bencher Metric Format: `{benchmark: {measure slug: {value, lower_value, upper_value}}}`; an
/// open end of the interval is left out (both are optional in BMF) rather than understated.
pub fn bmf(summary: &Summary) -> String {
    let mut by_slug = Map::new();
    for m in measures(summary) {
        let (low, high) = m.bounds.unwrap_or((m.value, m.value));
        let mut entry = Map::new();
        entry.insert("value".into(), json!(m.value));
        if !m.open.below() {
            entry.insert("lower_value".into(), json!(low));
        }
        if !m.open.above() {
            entry.insert("upper_value".into(), json!(high));
        }
        by_slug.insert(m.slug, Value::Object(entry));
    }
    let mut root = Map::new();
    root.insert(benchmark(summary), Value::Object(by_slug));
    pretty(&Value::Object(root))
}

/// github-action-benchmark's custom JSON: `[{name, unit, value, range?, extra}]`, the measures
/// that are better `direction` (the action reads one direction per file).
pub fn github_action_benchmark(summary: &Summary, direction: Better) -> String {
    let bench = benchmark(summary);
    let verdict = summary.verdict.headline(summary.verdicts.len());
    let entries: Vec<Value> = measures(summary)
        .into_iter()
        .filter(|m| m.direction == direction)
        .map(|m| {
            let mut entry = json!({
                "name": format!("{bench}: {}", m.name),
                "unit": m.unit,
                "value": m.value,
                "extra": format!("{}\n{verdict}", summary.context.header.started_at),
            });
            if let Some((low, high)) = m.bounds {
                let below = if m.open.below() { "below " } else { "" };
                let above = if m.open.above() { "above " } else { "" };
                entry["range"] = json!(format!("{below}{low:.3}–{above}{high:.3}"));
            }
            entry
        })
        .collect();
    pretty(&Value::Array(entries))
}

/// GitLab's metrics report (`artifacts: reports: metrics:`): one `name value` line per measure,
/// named `llmload_<slug>` in OpenMetrics' alphabet (`llmload_ttft_p99_ms 51.2`); GitLab shows
/// each beside the target branch's value in the merge request. `configuration` labels a server
/// sweep's lines (`llmload_ttft_p99_ms{configuration="--parallel 2"} 51.2`).
pub fn gitlab_metrics(summary: &Summary, configuration: Option<&str>) -> String {
    let label = configuration
        .map(|c| {
            format!(
                "{{configuration=\"{}\"}}",
                c.replace('\\', "\\\\").replace('"', "\\\"")
            )
        })
        .unwrap_or_default();
    measures(summary)
        .into_iter()
        .map(|m| {
            let name: String = m
                .slug
                .chars()
                .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
                .collect();
            format!("llmload_{name}{label} {}\n", m.value)
        })
        .collect()
}

/// A server sweep's export: each configuration's (`(configuration, its export)`), one file —
/// BMF's benchmarks and github-action-benchmark's entries named with their configuration
/// (`plan (model) [--parallel 2]`), so that a history keeps each configuration apart.
pub fn merge_configurations(exports: &[(String, String)]) -> String {
    let mut objects = Map::new();
    let mut entries: Vec<Value> = Vec::new();
    let mut bmf = false;
    for (config, text) in exports {
        match serde_json::from_str::<Value>(text) {
            Ok(Value::Object(benchmarks)) => {
                bmf = true;
                for (name, measures) in benchmarks {
                    objects.insert(format!("{name} [{config}]"), measures);
                }
            }
            Ok(Value::Array(items)) => {
                for mut item in items {
                    if let Some(name) = item.get("name").and_then(Value::as_str) {
                        let named = match name.split_once(": ") {
                            Some((bench, measure)) => format!("{bench} [{config}]: {measure}"),
                            None => format!("{name} [{config}]"),
                        };
                        item["name"] = Value::String(named);
                    }
                    entries.push(item);
                }
            }
            _ => {}
        }
    }
    if bmf {
        pretty(&Value::Object(objects))
    } else {
        pretty(&Value::Array(entries))
    }
}

fn pretty(value: &Value) -> String {
    serde_json::to_string_pretty(value).unwrap_or_default() + "\n"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_amount_per_token_has_its_throughputs_interval_turned_over() {
        let (value, bounds) = per_token(0.5, 100);
        let (low, high) = bounds.unwrap();
        let (_, throughput) = per_completion(1.0, 100);
        let (slow, fast) = throughput.unwrap();
        assert_eq!(value, 0.5);
        assert!((low - 0.5 / fast).abs() < 1e-12 && (high - 0.5 / slow).abs() < 1e-12);
        assert!(low < 0.5 && 0.5 < high, "{low} {high}");
        assert_eq!(per_token(0.5, 0).1, None);
    }

    #[test]
    fn the_plan_names_exactly_these_measures() {
        let slugs: Vec<&str> = MEASURES.iter().map(|d| d.slug).collect();
        assert_eq!(slugs, crate::plan::EXPORT_MEASURES);
    }

    #[test]
    fn the_error_rates_interval_is_wilsons() {
        // 0 of 200: from 0 to 1.88%.
        let (low, high) = wilson(0.0, 200).unwrap();
        assert_eq!(low, 0.0);
        assert!((high - 0.01884).abs() < 1e-4, "{high}");
        // 10 of 100: 5.52% to 17.44% (the textbook values).
        let (low, high) = wilson(0.1, 100).unwrap();
        assert!(
            (low - 0.0552).abs() < 1e-3 && (high - 0.1744).abs() < 1e-3,
            "{low} {high}"
        );
        assert_eq!(wilson(0.5, 0), None);
    }

    #[test]
    fn a_throughputs_interval_is_its_counts() {
        // 48 completions: -26% to +30%; 10,000: about ±2%.
        let (_, Some((low, high))) = per_completion(100.0, 48) else {
            panic!("no interval");
        };
        assert!(
            (73.0..74.0).contains(&low) && (130.0..131.0).contains(&high),
            "{low} {high}"
        );
        let (_, Some((low, high))) = per_completion(100.0, 10_000) else {
            panic!("no interval");
        };
        assert!(
            (98.0..98.1).contains(&low) && (101.9..102.0).contains(&high),
            "{low} {high}"
        );
        assert_eq!(per_completion(5.0, 0), (5.0, None));
    }

    #[test]
    fn a_percentiles_interval_holds_it_and_narrows_with_samples() {
        let (value, Some((low, high)), open) = sampled(200, 50.0) else {
            panic!("no interval");
        };
        assert!(low <= value && value <= high, "{low} {value} {high}");
        assert_eq!(open, Open::Neither);
        let (_, Some((low_n, high_n)), _) = sampled(20_000, 50.0) else {
            panic!("no interval");
        };
        assert!(
            high_n - low_n < high - low,
            "{low_n}–{high_n} vs {low}–{high}"
        );
    }

    fn sampled(n: usize, q: f64) -> (f64, Option<(f64, f64)>, Open) {
        let mut phase = PhaseMetrics::default();
        let mut d = crate::metrics::Distribution::milliseconds();
        for k in 0..n {
            d.record(1.0 + (k % 100) as f64);
        }
        *phase.distributions.get_mut(Metric::Ttft).unwrap() = d;
        percentile_with_bounds(&phase, Metric::Ttft, q).unwrap()
    }

    /// p99 of 40 requests: the interval needs the 42nd value, so its upper end is open (what CI
    /// met: a history called such a run better because its "interval" stopped at its slowest
    /// request). From about 580 requests on, p99's interval is inside the sample.
    #[test]
    fn a_percentile_the_sample_cannot_bound_is_open_there() {
        assert_eq!(sampled(40, 99.0).2, Open::Above);
        assert_eq!(sampled(40, 50.0).2, Open::Neither);
        assert_eq!(sampled(1, 50.0).2, Open::Both);
        assert_eq!(sampled(600, 99.0).2, Open::Neither);
    }
}
