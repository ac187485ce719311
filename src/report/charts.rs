//! The charts of `report.html`, drawn as inline SVG with [`super::svg`]: no script, no font
//! file and no network, so the page reads the same from a CI artifact as from disk.
//!
//! Each chart is a function of the report's [`Summary`]; a chart without data is left out. What
//! a chart shows is its caption; what its numbers mean is docs/metrics.md. Colours mean the
//! same in every chart (red is failure, green success; TTFT blue, ITL purple, E2E orange), and
//! the plan's objectives on a drawn metric are red dashed lines.

use super::svg::{Axis, Band, Bars, Line, Marker, Plot, Rule, Scale, Unit};
use super::Summary;
use crate::metrics::server::ServerTelemetry;
use crate::metrics::timeseries::{PhaseBand, SeriesPoint};
use crate::metrics::Metric;
use crate::plan::Stat;

/// One chart: its title, what it shows, and its SVG.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Chart {
    /// A stable identifier (`latency-over-time`), for anchors and tests.
    pub id: &'static str,
    /// Its title.
    pub title: String,
    /// What it shows, in a sentence.
    pub caption: String,
    /// The SVG element.
    pub svg: String,
}

/// What each colour means, in every chart.
mod colour {
    pub const TTFT: &str = "#1f77b4";
    pub const ITL: &str = "#9467bd";
    pub const E2E: &str = "#e8710a";
    pub const SENT: &str = "#5f6b7a";
    pub const SUCCESS: &str = "#2ca02c";
    pub const FAILURE: &str = "#d62728";
    pub const THROTTLED: &str = "#bcbd22";
    pub const SESSIONS: &str = "#e377c2";
    pub const IN_FLIGHT: &str = "#8c564b";
    pub const TOKENS: &str = "#1f77b4";
    pub const RUNNING: &str = "#17a2b8";
    pub const WAITING: &str = "#e8710a";
    pub const KV_CACHE: &str = "#9467bd";
    pub const GPU_UTILIZATION: &str = "#2ca02c";
    pub const GPU_MEMORY: &str = "#9467bd";
    pub const GPU_POWER: &str = "#d62728";
    pub const OBJECTIVE: &str = "#d62728";
}

/// Every chart the summary has data for, in the order the page shows them: a sweep's or a
/// search's latency against throughput first (it is the result), then the run over time.
pub fn all(summary: &Summary) -> Vec<Chart> {
    let mut charts = Vec::new();
    for curve in &summary.curves {
        charts.extend(steps_chart(summary, &curve.series));
    }
    let series = &summary.timeseries;
    let points = &series.points;
    let bands = &series.phases;
    let t = |p: &SeriesPoint| p.t_s + series.interval_s / 2.0;
    let line = |name: &str, colour, dashed, f: &dyn Fn(&SeriesPoint) -> Option<f64>| {
        let at = points.iter().filter_map(|p| f(p).map(|v| (t(p), v)));
        Line::new(name, colour, dashed, at.collect())
    };
    // The run's own span, not a round number past it: the last phase ends at the right edge.
    let end_s = points
        .iter()
        .map(|p| p.t_s + series.interval_s)
        .chain(bands.iter().map(|b| b.to_s))
        .fold(0.0, f64::max);
    let time = || {
        Axis::new("time from the start", Scale::Linear, Unit::Seconds).range(0.0, end_s.max(1.0))
    };
    let mut latency = Plot::new(
        "Latency over time",
        time(),
        Axis::new("latency (log scale)", Scale::Log, Unit::Milliseconds),
    );
    latency.lines = vec![
        line("TTFT p50", colour::TTFT, true, &|p| p.ttft_p50_ms),
        line("TTFT p99", colour::TTFT, false, &|p| p.ttft_p99_ms),
        line("ITL p99", colour::ITL, false, &|p| p.itl_p99_ms),
        line("E2E p99", colour::E2E, false, &|p| p.e2e_p99_ms),
    ];
    latency.bands = phase_bands(bands);
    latency.rules = objective_rules(summary, &["ttft", "itl", "e2e"], false);
    charts.extend(chart(
        "latency-over-time",
        "TTFT, ITL and E2E percentiles of each window, with the phases shaded and the objectives as red dashed lines: when latency turned, and in which phase.",
        &latency,
    ));
    let per_s = |n: u64| n as f64 / series.interval_s;
    let mut load = Plot::new(
        "Request rate and requests in flight",
        time(),
        Axis::new(
            "requests/s; requests in flight",
            Scale::Linear,
            Unit::Number,
        ),
    );
    load.lines = vec![
        line("sent/s", colour::SENT, true, &|p| Some(per_s(p.sent))),
        line("completed/s", colour::SUCCESS, false, &|p| {
            Some(per_s(p.completed))
        }),
        line("failed/s", colour::FAILURE, false, &|p| {
            Some(per_s(p.failed))
        }),
        line("throttled/s", colour::THROTTLED, false, &|p| {
            Some(per_s(p.throttled))
        }),
        line("in flight", colour::IN_FLIGHT, false, &|p| {
            Some(p.in_flight)
        }),
    ];
    // A failure line flat at zero says nothing; it stays out of the legend too.
    load.lines.retain(|l| {
        ![colour::FAILURE, colour::THROTTLED].contains(&l.color)
            || l.points.iter().any(|p| p.1 > 0.0)
    });
    load.bands = phase_bands(bands);
    charts.extend(chart(
        "load-over-time",
        "Requests sent, completed, failed and throttled per second, and the mean number in flight, in each window: a queue that keeps growing is a server that does not keep up.",
        &load,
    ));
    // A run with agent sessions: their own charts.
    let sessions = points.iter().any(|p| p.sessions.is_some());
    if sessions {
        let mut agents = Plot::new(
            "Agent sessions and calls in flight",
            time(),
            Axis::new("sessions; calls in flight", Scale::Linear, Unit::Number),
        );
        agents.lines = vec![
            line("sessions running", colour::SESSIONS, false, &|p| p.sessions),
            line("calls in flight", colour::IN_FLIGHT, true, &|p| {
                Some(p.in_flight)
            }),
        ];
        agents.bands = phase_bands(bands);
        charts.extend(chart(
            "sessions-over-time",
            "Agent sessions running and their calls in flight, on average in each window: the gap between the two is the sessions' time in tool runs and think times, when no call of theirs is at the server.",
            &agents,
        ));
    }
    charts.extend(budget_chart(summary, &line, time()));
    let mut tokens = Plot::new(
        "Output tokens per second",
        time(),
        Axis::new("output tokens/s", Scale::Linear, Unit::Number),
    );
    tokens.lines = vec![line("output tokens/s", colour::TOKENS, false, &|p| {
        Some(p.output_tokens_per_s)
    })];
    tokens.bands = phase_bands(bands);
    charts.extend(chart(
        "throughput-over-time",
        "Output tokens that arrived in each window, per second.",
        &tokens,
    ));
    // Steps each have a load of their own: a distribution over all of them mixes loads.
    if summary.steps.is_empty() {
        charts.extend(cdf_chart(summary));
        charts.extend(by_input_chart(summary));
        if sessions {
            charts.extend(by_context_chart(summary));
        }
    }
    if let Some(server) = summary.server.as_ref().filter(|s| s.samples > 0) {
        charts.extend(server_chart(server, time(), bands));
        charts.extend(gpu_charts(server, time, bands));
    }
    charts
}

/// The server's batch, queue and KV cache at each scrape.
fn server_chart(server: &ServerTelemetry, time: Axis, bands: &[PhaseBand]) -> Option<Chart> {
    let gauge = |signal: &str, name: &str, colour, dashed, scale: f64| {
        let at = server
            .series
            .get(signal)
            .map(|v| v.iter().map(|(t, y)| (*t, y * scale)).collect())
            .unwrap_or_default();
        Line::new(name, colour, dashed, at)
    };
    let mut plot = Plot::new(
        "The server: batch, queue and KV cache",
        time,
        Axis::new("requests; KV cache %", Scale::Linear, Unit::Number),
    );
    plot.lines = vec![
        gauge("running", "running", colour::RUNNING, false, 1.0),
        gauge("waiting", "waiting", colour::WAITING, false, 1.0),
        gauge("kv_cache", "KV cache %", colour::KV_CACHE, true, 100.0),
    ];
    if plot.lines.iter().all(|l| l.points.is_empty()) {
        return None;
    }
    plot.bands = phase_bands(bands);
    chart(
        "server-over-time",
        "What the server said at each scrape: requests running and waiting, and its KV cache's use in percent.",
        &plot,
    )
}

/// The GPUs at each reading (a GPU exporter's scrape, a `gpus` source's loop): the busiest
/// one's utilization and the memory in use, in percent; and the power all of them drew. None
/// when nothing said anything of GPUs.
fn gpu_charts(
    server: &ServerTelemetry,
    time: impl Fn() -> Axis,
    bands: &[PhaseBand],
) -> Vec<Chart> {
    let series = |name: &str| {
        server
            .series
            .get(name)
            .map(Vec::as_slice)
            .unwrap_or_default()
    };
    let utilization: Vec<(f64, f64)> = series("gpu_utilization")
        .iter()
        .map(|&(t, share)| (t, share * 100.0))
        .collect();
    // Memory in use over used and free at the same reading.
    let free = series("gpu_memory_free_mib");
    let memory: Vec<(f64, f64)> = series("gpu_memory_used_mib")
        .iter()
        .filter_map(|&(t, used)| {
            let (_, free) = free.iter().find(|(at, _)| *at == t)?;
            (used + free > 0.0).then(|| (t, used / (used + free) * 100.0))
        })
        .collect();
    let mut busy = Plot::new(
        "The GPUs: utilization and memory",
        time(),
        Axis::new("percent", Scale::Linear, Unit::Percent).range(0.0, 100.0),
    );
    busy.lines = vec![
        Line::new(
            "utilization (busiest GPU)",
            colour::GPU_UTILIZATION,
            false,
            utilization,
        ),
        Line::new("memory in use", colour::GPU_MEMORY, true, memory),
    ];
    busy.lines.retain(|l| !l.points.is_empty());
    let mut power = Plot::new(
        "The GPUs: power",
        time(),
        Axis::new("watts, all GPUs", Scale::Linear, Unit::Number),
    );
    power.lines = vec![Line::new(
        "power",
        colour::GPU_POWER,
        false,
        series("gpu_power_w").to_vec(),
    )];
    power.lines.retain(|l| !l.points.is_empty());
    let plots = [
        (
            busy,
            "gpus-over-time",
            "What the GPUs' telemetry said at each reading: the busiest GPU's utilization, and the share of their memory in use. Latency that grows while utilization stays low is a bottleneck elsewhere (the CPU, the network, the scheduler).",
        ),
        (
            power,
            "gpu-power-over-time",
            "The power all GPUs drew at each reading, in watts: energy per token is its mean over a window set against that window's output tokens per second.",
        ),
    ];
    let mut charts = Vec::new();
    for (mut plot, id, caption) in plots {
        if !plot.lines.is_empty() {
            plot.bands = phase_bands(bands);
            charts.extend(chart(id, caption, &plot));
        }
    }
    charts
}

/// Draws a line of one value per window: its name, colour, whether dashed, and the value.
type SeriesLine<'a> =
    dyn Fn(&str, &'static str, bool, &dyn Fn(&SeriesPoint) -> Option<f64>) -> Line + 'a;

/// The server's rate-limit budgets over time, as its responses' headers said them: the least
/// share left in each window. Only when some response said both a budget's size and what
/// remained of it (a hosted API's headers; engines send none).
fn budget_chart(summary: &Summary, line: &SeriesLine<'_>, time: Axis) -> Option<Chart> {
    let mut budget = Plot::new(
        "Rate-limit budget left",
        time,
        Axis::new("share of the budget left", Scale::Linear, Unit::Percent).range(0.0, 100.0),
    );
    budget.lines = vec![
        line("requests left", colour::SENT, false, &|p| {
            p.requests_budget_left.map(|share| share * 100.0)
        }),
        line("tokens left", colour::TOKENS, false, &|p| {
            p.tokens_budget_left.map(|share| share * 100.0)
        }),
    ];
    budget.lines.retain(|l| !l.points.is_empty());
    if budget.lines.is_empty() {
        return None;
    }
    budget.bands = phase_bands(&summary.timeseries.phases);
    chart(
        "rate-limit-budget",
        "The least share of the server's request and token budgets its responses said was left (x-ratelimit-remaining ÷ limit, or Anthropic's), in each window: where it reaches 0, requests are throttled.",
        &budget,
    )
}

/// `plot` as the page's chart `id`: its title is the plot's label.
fn chart(id: &'static str, caption: &str, plot: &Plot) -> Option<Chart> {
    Some(Chart {
        id,
        title: plot.label.clone(),
        caption: caption.into(),
        svg: plot.render()?,
    })
}

fn phase_bands(bands: &[PhaseBand]) -> Vec<Band> {
    bands
        .iter()
        .map(|b| Band {
            from: b.from_s,
            to: b.to_s,
            label: b.name.clone(),
            muted: !b.recorded,
        })
        .collect()
}

/// The plan's objectives on the latencies `metrics` (the first word of an assertion), as
/// threshold lines: horizontal on a latency axis, vertical on a CDF's.
fn objective_rules(summary: &Summary, metrics: &[&str], vertical: bool) -> Vec<Rule> {
    // The plan's assertions, and the objectives each step was judged on (a sweep's lines
    // name no phase, so they are judged per step rather than as assertions).
    let assertions = summary.verdicts.iter().map(|v| {
        let scope = if v.phase == "all" {
            String::new()
        } else {
            format!(" ({})", v.phase)
        };
        (v.assertion.as_str(), v.threshold, v.unit, scope)
    });
    let objectives = summary
        .steps
        .iter()
        .flat_map(|s| &s.objectives)
        .map(|o| (o.assertion.as_str(), o.threshold, o.unit, String::new()));
    let mut rules: Vec<Rule> = Vec::new();
    for (assertion, threshold, unit, scope) in assertions.chain(objectives) {
        let metric = assertion.split_whitespace().next().unwrap_or("");
        if unit != "ms" || !metrics.contains(&metric) || rules.iter().any(|r| r.at == threshold) {
            continue;
        }
        rules.push(Rule {
            at: threshold,
            vertical,
            label: format!("objective: {assertion}{scope}"),
            color: colour::OBJECTIVE,
        });
    }
    rules
}

/// A sweep's or search's p99 latencies against the request rate each step achieved, each step
/// labelled with its load and coloured by its result.
fn steps_chart(summary: &Summary, series: &str) -> Option<Chart> {
    let mut rows: Vec<&super::steps::StepRow> = summary
        .steps
        .iter()
        .filter(|r| r.series == series)
        .collect();
    rows.sort_by(|a, b| a.load.total_cmp(&b.load));
    let mut plot = Plot::new(
        &format!("{series}: latency against throughput"),
        Axis::new("achieved requests/s", Scale::Linear, Unit::Number),
        Axis::new("p99 latency (log scale)", Scale::Log, Unit::Milliseconds),
    );
    type Value = fn(&super::steps::StepRow) -> Option<f64>;
    // (name, colour, value, whether its points carry the load: once, on the TTFT point)
    let curves: [(&str, &'static str, Value, bool); 2] = [
        ("TTFT p99", colour::TTFT, |r| r.ttft_p99_ms, true),
        ("E2E p99", colour::E2E, |r| r.e2e_p99_ms, false),
    ];
    for (name, curve_colour, value, labelled) in curves {
        // A step ended early measured only its start: a marker, not a point of the curve.
        let on_curve = rows
            .iter()
            .filter(|r| r.ended_early.is_none())
            .filter_map(|r| value(r).map(|v| (r.achieved_rps, v)));
        plot.lines
            .push(Line::new(name, curve_colour, false, on_curve.collect()));
        for row in &rows {
            let Some(v) = value(row) else {
                continue;
            };
            let failed = row.judged && !row.passed;
            plot.markers.push(Marker {
                at: (row.achieved_rps, v),
                color: if !row.judged {
                    colour::SENT
                } else if failed {
                    colour::FAILURE
                } else {
                    colour::SUCCESS
                },
                label: if labelled {
                    format!("@ {}", row.load_display)
                } else {
                    String::new()
                },
                title: format!(
                    "{}: {name} {} at {} req/s achieved; {}",
                    row.phase,
                    super::svg::value_text(v, Unit::Milliseconds),
                    super::svg::number(row.achieved_rps),
                    row.result
                ),
                hollow: row.ended_early.is_some(),
            });
        }
    }
    plot.rules = objective_rules(summary, &["ttft", "e2e"], false);
    chart(
        "steps",
        "Each step's p99 TTFT and E2E against the request rate it achieved, labelled with its load: green held the objectives, red failed them (hollow: ended early), the red dashed lines are the objectives. Where the curve turns up is the knee; where it turns back, saturation.",
        &plot,
    )
}

/// TTFT and ITL cumulative distributions over every recorded phase.
fn cdf_chart(summary: &Summary) -> Option<Chart> {
    let d = &summary.overall.distributions;
    let cdf = |metric: Metric| -> Vec<(f64, f64)> {
        let Some(dist) = d.get(metric) else {
            return Vec::new();
        };
        (1..=1000)
            .filter_map(|i| {
                let p = i as f64 / 10.0;
                dist.stat(Stat::Percentile(p)).map(|v| (v, p))
            })
            .collect()
    };
    let mut plot = Plot::new(
        "TTFT and ITL distributions",
        Axis::new("latency (log scale)", Scale::Log, Unit::Milliseconds),
        Axis::new("share of values at or below", Scale::Linear, Unit::Percent).range(0.0, 100.0),
    );
    plot.lines = vec![
        Line::new("TTFT", colour::TTFT, false, cdf(Metric::Ttft)),
        Line::new("ITL", colour::ITL, false, cdf(Metric::Itl)),
    ];
    plot.rules = objective_rules(summary, &["ttft", "itl"], true);
    chart(
        "latency-cdf",
        "The share of values at or below each latency (all recorded phases; ITL pools every gap), with the objectives as red dashed lines. The tail is the right end of each curve.",
        &plot,
    )
}

/// TTFT and E2E by input length, as grouped bars.
/// An agent's TTFT as its context grows: TTFT alone (an answer's length would hide it), each
/// range labelled with the share of it the server's prefix cache served.
fn by_context_chart(summary: &Summary) -> Option<Chart> {
    if summary.by_input.len() < 2 {
        return None;
    }
    let mut plot = Plot::new(
        "TTFT by context length",
        Axis::new(
            "prompt tokens (share served from the prefix cache)",
            Scale::Linear,
            Unit::Number,
        ),
        Axis::new("TTFT", Scale::Linear, Unit::Milliseconds),
    );
    plot.x.categories = summary
        .by_input
        .iter()
        .map(|b| {
            let cached = b.cache_hit.map_or(String::new(), |hit| {
                format!(" ({:.0}% cached)", hit * 100.0)
            });
            format!("{}–{}{cached}", b.input_tokens, b.input_tokens_max)
        })
        .collect();
    let values: Vec<Vec<f64>> = summary
        .by_input
        .iter()
        .map(|b| vec![b.ttft_ms.p50.unwrap_or(0.0), b.ttft_ms.p99.unwrap_or(0.0)])
        .collect();
    plot.bars = Some(bars(
        vec![
            ("TTFT p50".into(), "#7fb3e0"),
            ("TTFT p99".into(), colour::TTFT),
        ],
        values,
    )?);
    plot.rules = objective_rules(summary, &["ttft"], false);
    chart(
        "by-context",
        "TTFT p50 and p99 of the calls of each prompt length: how an agent's first token slows as its context grows, and how much of that context the cache spared the server.",
        &plot,
    )
}

/// Bars of `series`, a value each per group, without whiskers; `None` when all are zero (a
/// chart of nothing).
fn bars(series: Vec<(String, &'static str)>, values: Vec<Vec<f64>>) -> Option<Bars> {
    if values.iter().flatten().all(|v| *v <= 0.0) {
        return None;
    }
    Some(Bars {
        series,
        values,
        whiskers: Vec::new(),
    })
}

fn by_input_chart(summary: &Summary) -> Option<Chart> {
    if summary.by_input.len() < 2 {
        return None;
    }
    let mut plot = Plot::new(
        "Latency by input length",
        Axis::new("input length", Scale::Linear, Unit::Number),
        Axis::new("latency", Scale::Linear, Unit::Milliseconds),
    );
    plot.x.categories = summary
        .by_input
        .iter()
        .map(|b| {
            if b.input_tokens_max == b.input_tokens {
                format!("{} tokens", b.input_tokens)
            } else {
                format!("{}–{} tokens", b.input_tokens, b.input_tokens_max)
            }
        })
        .collect();
    let values: Vec<Vec<f64>> = summary
        .by_input
        .iter()
        .map(|b| {
            vec![
                b.ttft_ms.p50.unwrap_or(0.0),
                b.ttft_ms.p99.unwrap_or(0.0),
                b.e2e_ms.p50.unwrap_or(0.0),
            ]
        })
        .collect();
    plot.bars = Some(bars(
        vec![
            ("TTFT p50".into(), "#7fb3e0"),
            ("TTFT p99".into(), colour::TTFT),
            ("E2E p50".into(), colour::E2E),
        ],
        values,
    )?);
    chart(
        "by-input",
        "TTFT p50 and p99, and E2E p50, of each input length of the plan's mix: what a longer prompt costs.",
        &plot,
    )
}
