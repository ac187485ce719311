//! Server telemetry summarised per phase: gauges as their mean and max over the phase, counters
//! as their delta and rate, histograms as percentiles of the phase's delta (as Prometheus'
//! `histogram_quantile` reads them: linear within a bucket). Beside the client's own numbers,
//! so that a report can say what the server measured and what the network and client added.
//!
//! The samples come from `telemetry.jsonl` ([`crate::telemetry`]); phases are set against them
//! by the run's wall-clock start. It is not a time series store: a chart's series are the
//! samples themselves.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::telemetry::{HistogramSample, Kind, Signal, Telemetry, TelemetrySample};

/// One signal over one phase.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct SignalSummary {
    /// A gauge's mean over the phase's samples.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mean: Option<f64>,
    /// A gauge's largest sample.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max: Option<f64>,
    /// A counter's increase over the phase (a histogram's: observations).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delta: Option<f64>,
    /// A counter's increase per second.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub per_s: Option<f64>,
    /// How many times a counter's value changed from one scrape to the next over the phase:
    /// an exporter that refreshes less often than it is scraped (dcgm-exporter collects every
    /// 30 s unless told otherwise) moves in steps, and a rate over few steps is not one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub changes: Option<usize>,
    /// A counter's increase over the phase's own window (its start to its last response),
    /// read off the counter's line between scrapes at both ends: what the delta over the
    /// bracketing scrapes would be had they been taken at its start and end.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub window_delta: Option<f64>,
    /// A histogram's mean over the phase's observations, ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mean_ms: Option<f64>,
    /// A histogram's median, ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub p50_ms: Option<f64>,
    /// A histogram's p90, ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub p90_ms: Option<f64>,
    /// A histogram's p99, ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub p99_ms: Option<f64>,
    /// A histogram's first bucket bound, ms: a percentile equal to it means "at most this".
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_bucket_ms: Option<f64>,
    /// The bucket the median falls in, ms (lower and upper bound; the upper is `None` in
    /// `+Inf`): all the histogram knows of it. `p50_ms` is a guess inside it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub p50_bucket_ms: Option<(f64, Option<f64>)>,
    /// The bucket the p99 falls in, ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub p99_bucket_ms: Option<(f64, Option<f64>)>,
}

/// What the server said over one phase.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct PhaseServer {
    /// Scrapes inside the phase.
    pub samples: usize,
    /// By signal name (`running`, `kv_cache`, `ttft`...).
    pub signals: BTreeMap<String, SignalSummary>,
    /// Each histogram's observations in the phase, for any percentile.
    #[serde(skip)]
    pub histograms: BTreeMap<Signal, HistogramSample>,
}

impl PhaseServer {
    /// One signal's summary, if the server reported it.
    pub fn signal(&self, signal: Signal) -> Option<&SignalSummary> {
        self.signals.get(signal.name())
    }

    /// A histogram's percentile `p` (0..100) over the phase, ms.
    pub fn percentile_ms(&self, signal: Signal, p: f64) -> Option<f64> {
        self.histograms
            .get(&signal)
            .and_then(|h| quantile(h, p / 100.0))
            .map(|s| s * 1000.0)
    }
}

/// The whole run's telemetry: where it came from, and its samples as series for charts.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ServerTelemetry {
    /// The metrics URL.
    pub url: Option<String>,
    /// The engine whose metric names it used.
    pub engine: Option<String>,
    /// What the server said it is.
    pub server_version: Option<String>,
    /// Scrapes that answered.
    pub samples: usize,
    /// What went wrong, if anything did.
    pub problems: Vec<String>,
    /// Each gauge's samples: seconds from the run's start, and value.
    pub series: BTreeMap<String, Vec<(f64, f64)>>,
    /// Each metrics URL apart, when the plan named several (replicas summed above), or when
    /// shards scraped it (who did).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub targets: Vec<TargetServer>,
    /// The GPUs a GPU exporter described (model, memory, driver, host).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub gpus: Vec<crate::telemetry::gpus::Gpu>,
    /// Those GPUs in a line: "2 × NVIDIA H100 80GB HBM3 (79 GiB each), driver 550.127.05".
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpus_described: Option<String>,
}

/// One metrics URL's telemetry, apart from the others'.
#[derive(Debug, Clone, Default, Serialize)]
pub struct TargetServer {
    /// Its URL.
    pub url: String,
    /// The engine whose metric names it used.
    pub engine: Option<String>,
    /// What it said it is.
    pub server_version: Option<String>,
    /// Scrapes that answered.
    pub samples: usize,
    /// Scrapes that failed.
    pub problems: usize,
    /// In a merged run: the shards that scraped it (one series, de-duplicated by time).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub scraped_by: Vec<u32>,
    /// What it said over the recorded phases.
    pub recorded: Option<PhaseServer>,
}

/// A phase's time span, in ms since the Unix epoch.
#[derive(Debug, Clone, Copy)]
pub struct Span {
    /// Its start.
    pub from_unix_ms: f64,
    /// Its end (its last response).
    pub to_unix_ms: f64,
}

impl Span {
    /// The span from the earlier start to the later end of this one and `other`.
    fn joined(self, other: Option<Span>) -> Span {
        match other {
            Some(other) => Span {
                from_unix_ms: self.from_unix_ms.min(other.from_unix_ms),
                to_unix_ms: self.to_unix_ms.max(other.to_unix_ms),
            },
            None => self,
        }
    }
}

/// Each steady window's server summary and energy over the window itself, its cut to its last
/// response: energy per token there sets the GPUs' joules after the warm-up against the tokens
/// of the requests sent after it, the window whose tokens `sla { window "steady" }` counts.
fn attach_steady(steady: &mut super::steady::Steady, telemetry: &Telemetry, run_start_ms: f64) {
    let mut all: Option<Span> = None;
    for window in &mut steady.phases {
        let from_unix_ms = run_start_ms + window.from_s * 1000.0;
        let span = Span {
            from_unix_ms,
            to_unix_ms: from_unix_ms + window.metrics.wall_s * 1000.0,
        };
        window.metrics.server = summarize(telemetry, span);
        window.metrics.energy = super::energy::Energy::of(&window.metrics);
        all = Some(span.joined(all));
    }
    if let Some(span) = all {
        steady.overall.server = summarize(telemetry, span);
        let windows: Vec<&super::PhaseMetrics> = steady.phases.iter().map(|w| &w.metrics).collect();
        steady.overall.energy = super::energy::Energy::of_parts(&steady.overall, &windows);
    }
}

/// The run-wide view of `telemetry`, with the run's start (ms since the epoch) as time zero.
pub fn overview(telemetry: &Telemetry, run_start_unix_ms: f64) -> ServerTelemetry {
    let mut series: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    for sample in &telemetry.samples {
        let t = (sample.at_unix_ms - run_start_unix_ms) / 1000.0;
        for (signal, value) in &sample.values {
            if signal.kind() == Kind::Gauge {
                series
                    .entry(signal.name().to_string())
                    .or_default()
                    .push((t, *value));
            }
        }
    }
    ServerTelemetry {
        url: telemetry.url.clone(),
        engine: telemetry.engine().map(|e| e.as_str().to_string()),
        server_version: telemetry.server_version.clone(),
        samples: telemetry.samples.len(),
        problems: telemetry.problems.clone(),
        series,
        targets: Vec::new(),
        gpus: telemetry.gpus.clone(),
        gpus_described: (!telemetry.gpus.is_empty())
            .then(|| crate::telemetry::gpus::describe(&telemetry.gpus)),
    }
}

/// What the server said over `span`.
pub fn summarize(telemetry: &Telemetry, span: Span) -> Option<PhaseServer> {
    summarize_samples(&telemetry.samples, span)
}

/// What one series of scrapes said over `span`.
fn summarize_samples(samples: &[TelemetrySample], span: Span) -> Option<PhaseServer> {
    if samples.is_empty() {
        return None;
    }
    let inside: Vec<&TelemetrySample> = samples
        .iter()
        .filter(|s| s.at_unix_ms >= span.from_unix_ms && s.at_unix_ms <= span.to_unix_ms)
        .collect();
    // The scrapes that bracket the span: the last at or before its start, the first at or
    // after its end (the nearest ones where the run has none outside).
    let before = samples
        .iter()
        .rev()
        .find(|s| s.at_unix_ms <= span.from_unix_ms)
        .or_else(|| samples.first())?;
    let after = samples
        .iter()
        .find(|s| s.at_unix_ms >= span.to_unix_ms)
        .or_else(|| samples.last())?;
    // A phase shorter than the scrape interval still gets its nearest gauge readings.
    let gauges: Vec<&TelemetrySample> = if inside.is_empty() {
        vec![after]
    } else {
        inside.clone()
    };
    let mut summary = PhaseServer {
        samples: inside.len(),
        signals: BTreeMap::new(),
        histograms: BTreeMap::new(),
    };
    for signal in Signal::ALL {
        let entry = match signal.kind() {
            Kind::Gauge => {
                let values: Vec<f64> = gauges
                    .iter()
                    .filter_map(|s| s.values.get(&signal).copied())
                    .collect();
                if values.is_empty() {
                    continue;
                }
                SignalSummary {
                    mean: Some(values.iter().sum::<f64>() / values.len() as f64),
                    max: values.iter().copied().reduce(f64::max),
                    ..SignalSummary::default()
                }
            }
            Kind::Counter => {
                let (Some(a), Some(b)) = (before.values.get(&signal), after.values.get(&signal))
                else {
                    continue;
                };
                let seconds = (after.at_unix_ms - before.at_unix_ms) / 1000.0;
                // A counter that went down was reset (a restarted server): its later value is
                // the increase since.
                let delta = if b >= a { b - a } else { *b };
                SignalSummary {
                    delta: Some(delta),
                    per_s: (seconds > 0.0).then(|| delta / seconds),
                    changes: Some(changes(samples, before, after, signal)),
                    window_delta: window_delta(samples, span, signal),
                    ..SignalSummary::default()
                }
            }
            Kind::Histogram => {
                let (Some(a), Some(b)) = (
                    before.histograms.get(&signal),
                    after.histograms.get(&signal),
                ) else {
                    continue;
                };
                let Some(delta) = difference(a, b) else {
                    continue;
                };
                let q = |p: f64| quantile(&delta, p).map(|s| s * 1000.0);
                let entry = SignalSummary {
                    delta: Some(delta.count),
                    mean_ms: (delta.count > 0.0).then(|| delta.sum / delta.count * 1000.0),
                    p50_ms: q(0.5),
                    p90_ms: q(0.9),
                    p99_ms: q(0.99),
                    first_bucket_ms: delta.le.first().map(|le| le * 1000.0),
                    p50_bucket_ms: bucket_ms(&delta, 0.5),
                    p99_bucket_ms: bucket_ms(&delta, 0.99),
                    ..SignalSummary::default()
                };
                summary.histograms.insert(signal, delta);
                entry
            }
        };
        summary.signals.insert(signal.name().to_string(), entry);
    }
    Some(summary)
}

/// `signal`'s increase from `span`'s start to its end, each end read off the straight line
/// between the scrapes around it; `None` where the counter was reset in between, or where an
/// end has no scrape on one side of it.
fn window_delta(samples: &[TelemetrySample], span: Span, signal: Signal) -> Option<f64> {
    let at = |t: f64| -> Option<f64> {
        let after = samples
            .iter()
            .position(|s| s.at_unix_ms >= t && s.values.contains_key(&signal))?;
        let b = &samples[after];
        let vb = b.values[&signal];
        if b.at_unix_ms == t {
            return Some(vb);
        }
        let a = samples[..after]
            .iter()
            .rev()
            .find(|s| s.values.contains_key(&signal))?;
        let va = a.values[&signal];
        let share = (t - a.at_unix_ms) / (b.at_unix_ms - a.at_unix_ms);
        Some(va + (vb - va) * share)
    };
    let delta = at(span.to_unix_ms)? - at(span.from_unix_ms)?;
    (delta >= 0.0).then_some(delta)
}

/// How many times `signal`'s value changed between consecutive scrapes from `before` to
/// `after`.
fn changes(
    samples: &[TelemetrySample],
    before: &TelemetrySample,
    after: &TelemetrySample,
    signal: Signal,
) -> usize {
    let values: Vec<f64> = samples
        .iter()
        .filter(|s| s.at_unix_ms >= before.at_unix_ms && s.at_unix_ms <= after.at_unix_ms)
        .filter_map(|s| s.values.get(&signal).copied())
        .collect();
    values.windows(2).filter(|w| w[0] != w[1]).count()
}

/// The bounds of the bucket the `q` quantile (0..1) falls in, ms: the lower bound (0 for the
/// first), and the upper (`None` for `+Inf`).
fn bucket_ms(histogram: &HistogramSample, q: f64) -> Option<(f64, Option<f64>)> {
    if histogram.count <= 0.0 {
        return None;
    }
    let rank = q * histogram.count;
    let mut lower = 0.0;
    for (le, count) in histogram.le.iter().zip(&histogram.counts) {
        if *count >= rank {
            return Some((lower * 1000.0, le.is_finite().then_some(le * 1000.0)));
        }
        lower = *le;
    }
    Some((lower * 1000.0, None))
}

/// `b − a`, bucket by bucket, when both have the same bounds and `b` did not go back (a reset).
fn difference(a: &HistogramSample, b: &HistogramSample) -> Option<HistogramSample> {
    if a.le != b.le || b.count < a.count {
        return (b.count > 0.0 && !b.le.is_empty()).then(|| b.clone());
    }
    Some(HistogramSample {
        le: b.le.clone(),
        counts: b.counts.iter().zip(&a.counts).map(|(b, a)| b - a).collect(),
        sum: b.sum - a.sum,
        count: b.count - a.count,
    })
}

/// The `q` quantile (0..1) of a histogram, in its unit: linear within the bucket it falls in,
/// as Prometheus' `histogram_quantile` reads it, except in the first bucket, where it is the
/// bucket's bound (an upper bound: the first bucket starts at 0, and interpolating from 0
/// would invent a value, 150 ms for a queue that was empty under a 300 ms first bucket); in
/// the `+Inf` bucket, the largest finite bound (a lower bound).
pub fn quantile(histogram: &HistogramSample, q: f64) -> Option<f64> {
    if histogram.count <= 0.0 {
        return None;
    }
    let rank = q * histogram.count;
    let mut lower_bound = 0.0;
    let mut lower_count = 0.0;
    for (i, (le, count)) in histogram.le.iter().zip(&histogram.counts).enumerate() {
        if *count >= rank {
            let in_bucket = count - lower_count;
            if in_bucket <= 0.0 || i == 0 {
                return Some(*le);
            }
            return Some(lower_bound + (le - lower_bound) * (rank - lower_count) / in_bucket);
        }
        lower_bound = *le;
        lower_count = *count;
    }
    histogram.le.last().copied()
}

/// Sets each phase's (and the run's) server summary from `telemetry`, and notes what the
/// telemetry is, or why there is none. Phases are set against the samples by the run's
/// wall-clock start.
pub fn attach(
    aggregates: &mut super::Aggregates,
    log: &crate::records::RunLog,
    telemetry: &Telemetry,
) {
    use super::warnings::{Code, Severity, Warning};
    let note = |code: Code, message: String| Warning {
        severity: Severity::Note,
        code,
        message,
    };
    let url = telemetry
        .url
        .clone()
        .unwrap_or_else(|| "the metrics URL".into());
    if telemetry.samples.is_empty() {
        let why = telemetry
            .problems
            .first()
            .cloned()
            .unwrap_or_else(|| format!("{url} was not scraped"));
        aggregates.warnings.push(note(
            Code::NoTelemetry,
            format!(
                "no server telemetry: {why} (set target {{ metrics \"URL\" }}, or metrics #false to not try)"
            ),
        ));
        return;
    }
    let Some(start_ns) = log.header.as_ref().and_then(|h| h.started_unix_ns) else {
        aggregates.warnings.push(note(
            Code::NoTelemetry,
            "server telemetry was kept, but the records do not say when the run started: it cannot be set against the phases".into(),
        ));
        return;
    };
    let run_start_ms = start_ns as f64 / 1e6;
    let mut recorded_span: Option<Span> = None;
    for (start, phase) in log.phases.iter().zip(aggregates.phases.iter_mut()) {
        let from_unix_ms = run_start_ms + start.at_us as f64 / 1000.0;
        let span = Span {
            from_unix_ms,
            to_unix_ms: from_unix_ms + phase.wall_s * 1000.0,
        };
        phase.server = summarize(telemetry, span);
        phase.energy = super::energy::Energy::of(phase);
        if phase.recorded {
            recorded_span = Some(span.joined(recorded_span));
        }
    }
    if let Some(span) = recorded_span {
        aggregates.overall.server = summarize(telemetry, span);
        let recorded: Vec<&super::PhaseMetrics> =
            aggregates.phases.iter().filter(|p| p.recorded).collect();
        aggregates.overall.energy = super::energy::Energy::of_parts(&aggregates.overall, &recorded);
    }
    if let Some(steady) = aggregates.steady.as_mut() {
        attach_steady(steady, telemetry, run_start_ms);
    }
    let mut view = overview(telemetry, run_start_ms);
    let apart =
        telemetry.targets.len() > 1 || telemetry.targets.iter().any(|t| !t.scraped_by.is_empty());
    if apart {
        view.targets = telemetry
            .targets
            .iter()
            .map(|target| TargetServer {
                url: target.url.clone(),
                engine: target
                    .samples
                    .iter()
                    .find_map(|s| s.engine)
                    .map(|e| e.as_str().to_string()),
                server_version: target.server_version.clone(),
                samples: target.samples.len(),
                problems: target.problems.len(),
                scraped_by: target.scraped_by.clone(),
                recorded: recorded_span.and_then(|span| summarize_samples(&target.samples, span)),
            })
            .collect();
    }
    let from = match telemetry.targets.len() {
        0 | 1 => url.clone(),
        n => format!("{n} targets, summed ({url})"),
    };
    let scraped_by: Vec<String> = telemetry
        .targets
        .iter()
        .filter(|t| !t.scraped_by.is_empty())
        .map(|t| {
            let shards: Vec<String> = t.scraped_by.iter().map(u32::to_string).collect();
            format!("{} by shard(s) {}", t.url, shards.join(", "))
        })
        .collect();
    aggregates.warnings.push(note(
        Code::Telemetry,
        format!(
            "server telemetry: {} scrape(s) of {} metrics from {from}{}{}",
            view.samples,
            view.engine.as_deref().unwrap_or("known"),
            view.server_version
                .as_deref()
                .map(|v| format!("; server version {v}"))
                .unwrap_or_default(),
            if scraped_by.is_empty() {
                String::new()
            } else {
                format!(
                    "; scraped {} (one series per target, de-duplicated by scrape time)",
                    scraped_by.join("; ")
                )
            }
        ),
    ));
    if !telemetry.problems.is_empty() {
        aggregates.warnings.push(note(
            Code::TelemetryGaps,
            format!(
                "{} scrape(s) of the server's metrics (or its GPUs' readings) failed; the first: {}",
                telemetry.problems.len(),
                telemetry.problems[0]
            ),
        ));
    }
    for (at_unix_ms, message) in telemetry.targets.iter().filter_map(|t| t.ended.as_ref()) {
        aggregates.warnings.push(Warning {
            severity: Severity::Warning,
            code: Code::GpuSourceEnded,
            message: format!(
                "{message}, {:.1} s into the run: from then on the GPU figures (power, energy per token, utilization) leave out the GPUs it read",
                (at_unix_ms - run_start_ms) / 1000.0
            ),
        });
    }
    let notes = gpu_notes(&aggregates.phases);
    aggregates.warnings.extend(notes);
    aggregates.server = Some(view);
}

/// A server that fell behind while its GPUs were mostly idle is held back elsewhere (its CPU
/// side, its scheduler, the network), and GPU memory near its total is one step from running
/// out: each a note, per recorded phase, where a GPU exporter says so.
fn gpu_notes(phases: &[super::PhaseMetrics]) -> Vec<super::warnings::Warning> {
    use super::warnings::{Code, Severity, Warning};
    let mut notes = Vec::new();
    for phase in phases.iter().filter(|p| p.recorded) {
        let Some(server) = &phase.server else {
            continue;
        };
        let busy = server.signal(Signal::GpuUtilization).and_then(|u| u.mean);
        if let (Some(behind), Some(busy)) = (&phase.saturation, busy) {
            if busy < 0.5 {
                notes.push(Warning {
                    severity: Severity::Note,
                    code: Code::GpuIdle,
                    message: format!(
                        "phase {}: the server fell behind ({behind}) while its busiest GPU was busy {:.0}% of the time on average: what held it back is likely not the GPU (the engine's CPU side, its scheduler, the network)",
                        phase.name,
                        busy * 100.0
                    ),
                });
            }
        }
        let used = server.signal(Signal::GpuMemoryUsed).and_then(|m| m.max);
        let free = server.signal(Signal::GpuMemoryFree).and_then(|m| m.mean);
        if let (Some(used), Some(free)) = (used, free) {
            let total = used + free;
            if total > 0.0 && used / total >= 0.98 {
                notes.push(Warning {
                    severity: Severity::Note,
                    code: Code::GpuMemory,
                    message: format!(
                        "phase {}: GPU memory reached {:.1}% of its total ({:.1} of {:.1} GiB): one step from running out",
                        phase.name,
                        used / total * 100.0,
                        used / 1024.0,
                        total / 1024.0
                    ),
                });
            }
        }
    }
    notes
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::telemetry::Engine;

    fn sample(at: f64, running: f64, preemptions: f64, ttft: (&[f64], f64)) -> TelemetrySample {
        let mut s = TelemetrySample {
            at_unix_ms: at,
            engine: Some(Engine::Vllm),
            ..TelemetrySample::default()
        };
        s.values.insert(Signal::Running, running);
        s.values.insert(Signal::Preemptions, preemptions);
        s.histograms.insert(
            Signal::Ttft,
            HistogramSample {
                le: vec![0.01, 0.1, 1.0],
                counts: ttft.0.to_vec(),
                sum: ttft.1,
                count: *ttft.0.last().unwrap(),
            },
        );
        s
    }

    #[test]
    fn gauges_counters_and_histograms_over_a_phase() {
        let telemetry = Telemetry {
            samples: vec![
                sample(0.0, 0.0, 1.0, (&[0.0, 0.0, 0.0], 0.0)),
                sample(1000.0, 4.0, 1.0, (&[5.0, 5.0, 5.0], 0.02)),
                sample(2000.0, 8.0, 3.0, (&[5.0, 95.0, 105.0], 6.0)),
                sample(3000.0, 2.0, 3.0, (&[5.0, 95.0, 105.0], 6.0)),
            ],
            ..Telemetry::default()
        };
        let phase = summarize(
            &telemetry,
            Span {
                from_unix_ms: 500.0,
                to_unix_ms: 2000.0,
            },
        )
        .unwrap();
        assert_eq!(phase.samples, 2);
        let running = phase.signal(Signal::Running).unwrap();
        assert_eq!((running.mean, running.max), (Some(6.0), Some(8.0)));
        let preemptions = phase.signal(Signal::Preemptions).unwrap();
        assert_eq!(preemptions.delta, Some(2.0));
        assert_eq!(preemptions.per_s, Some(1.0));
        // 105 observations in the phase: 5 under 10 ms, 90 in (10, 100] ms, 10 in (0.1, 1] s.
        let ttft = phase.signal(Signal::Ttft).unwrap();
        assert_eq!(ttft.delta, Some(105.0));
        // A rank in the first bucket is its bound: at most 10 ms, not an invented 5.
        assert_eq!(phase.percentile_ms(Signal::Ttft, 1.0), Some(10.0));
        let p50 = ttft.p50_ms.unwrap();
        assert!(
            (p50 - (10.0 + 90.0 * (52.5 - 5.0) / 90.0)).abs() < 1e-9,
            "{p50}"
        );
        assert!(ttft.p99_ms.unwrap() > 100.0);
    }

    #[test]
    fn quantiles_at_the_edges() {
        let h = HistogramSample {
            le: vec![1.0, 2.0],
            counts: vec![0.0, 0.0],
            sum: 30.0,
            count: 10.0,
        };
        // Every observation beyond the last finite bound: that bound, a lower bound.
        assert_eq!(quantile(&h, 0.5), Some(2.0));
        let empty = HistogramSample::default();
        assert_eq!(quantile(&empty, 0.5), None);
    }

    #[test]
    fn a_percentile_is_known_as_the_bucket_that_holds_it() {
        let h = HistogramSample {
            le: vec![0.01, 0.1, 0.25, f64::INFINITY],
            counts: vec![2.0, 50.0, 99.0, 100.0],
            sum: 10.0,
            count: 100.0,
        };
        assert_eq!(bucket_ms(&h, 0.01), Some((0.0, Some(10.0))));
        assert_eq!(bucket_ms(&h, 0.5), Some((10.0, Some(100.0))));
        assert_eq!(bucket_ms(&h, 0.99), Some((100.0, Some(250.0))));
        assert_eq!(bucket_ms(&h, 1.0), Some((250.0, None)));
        assert_eq!(bucket_ms(&HistogramSample::default(), 0.5), None);
    }

    #[test]
    fn gpus_idle_behind_a_saturated_server_and_memory_near_full_are_noted() {
        let phase = |saturated: bool, busy: f64, used: f64| crate::metrics::PhaseMetrics {
            name: "steady".into(),
            recorded: true,
            saturation: saturated.then(|| "its queue grew".to_string()),
            server: Some(PhaseServer {
                signals: [
                    (Signal::GpuUtilization, busy, busy),
                    (Signal::GpuMemoryUsed, used, used),
                    (Signal::GpuMemoryFree, 81920.0 - used, 81920.0 - used),
                ]
                .into_iter()
                .map(|(signal, mean, max)| {
                    let summary = SignalSummary {
                        mean: Some(mean),
                        max: Some(max),
                        ..SignalSummary::default()
                    };
                    (signal.name().to_string(), summary)
                })
                .collect(),
                ..PhaseServer::default()
            }),
            ..crate::metrics::PhaseMetrics::default()
        };
        let codes = |phases: &[crate::metrics::PhaseMetrics]| -> Vec<&'static str> {
            gpu_notes(phases).iter().map(|w| w.code.as_str()).collect()
        };
        assert_eq!(codes(&[phase(true, 0.3, 40000.0)]), vec!["gpu-idle"]);
        // A busy GPU behind a saturated server is the GPU's limit: nothing to say.
        assert!(codes(&[phase(true, 0.9, 40000.0)]).is_empty());
        assert!(codes(&[phase(false, 0.3, 40000.0)]).is_empty());
        assert_eq!(codes(&[phase(false, 0.9, 81000.0)]), vec!["gpu-memory"]);
        // vLLM's default 90% is by design, not a warning sign.
        assert!(codes(&[phase(false, 0.9, 73728.0)]).is_empty());
    }
}
