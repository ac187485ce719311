//! Metrics: per-request records in, per-phase and overall aggregates out.
//!
//! Every definition here is documented in docs/metrics.md; in short: latencies come only from
//! successful requests (failures are counted in the error rates, never folded into latency or
//! throughput), ITL pools every gap of every request (a chunk of k tokens gives k samples of
//! gap/k), and throughput divides by the phase's wall time. This module also decides when a
//! result is not trustworthy (see [`warnings`]). It knows nothing of SLAs: that is
//! [`crate::verdict`].

mod distribution;
pub mod profile;
pub mod server;
pub mod table;
pub mod timeseries;
pub mod warnings;

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;

pub use distribution::{Distribution, Summary};
pub use table::{connect_ms, itl_gaps, ttft_ms, Metric, MetricKind};
pub use warnings::{Severity, Warning};

use crate::plan::{Slo, Stat};
use crate::records::{
    ClientLoad, ErrorClass, LogLine, RequestRecord, RunLog, StepInfo, TokenSource,
};
use profile::{ProfileBuilder, ProfileWindow};

/// Everything computed from one run.
#[derive(Debug, Clone, Serialize)]
pub struct Aggregates {
    /// Each phase, recorded or not, in order.
    pub phases: Vec<PhaseMetrics>,
    /// All recorded phases together.
    pub overall: PhaseMetrics,
    /// What makes numbers untrustworthy, and context a reader should have.
    pub warnings: Vec<Warning>,
    /// The run was stopped before its plan finished.
    pub interrupted: bool,
    /// When the last response ended, µs from the start of the run.
    #[serde(skip)]
    pub last_response_us: Option<u64>,
    /// What the first failed request of a recorded phase said.
    #[serde(skip)]
    pub first_error: Option<String>,
    /// What the first usage that could not be believed was, in a recorded phase.
    #[serde(skip)]
    pub first_usage_problem: Option<String>,
    /// What the first of the client's own failures said, in a recorded phase.
    #[serde(skip)]
    pub first_client_error: Option<String>,
    /// Why the plan's abort conditions stopped the run, if they did.
    pub aborted: Option<String>,
    /// The client process's peak resident memory over the run.
    #[serde(skip)]
    pub client_peak_rss_bytes: Option<u64>,
    /// How the run's capacity search ended, if it had one that ended.
    #[serde(skip)]
    pub search_end: Option<crate::records::SearchEnd>,
    /// The server's telemetry over the run, when it was scraped.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server: Option<server::ServerTelemetry>,
    /// The run over time.
    pub timeseries: timeseries::TimeSeries,
    /// The recorded requests by input length (the plan's buckets).
    pub by_input: Vec<InputBucket>,
    /// The recorded requests by turn, in a multi-turn workload (empty otherwise).
    pub by_turn: Vec<TurnBucket>,
    /// Each error class of the recorded phases: how many, when, and what the first said.
    pub error_samples: Vec<ErrorSample>,
}

/// The recorded requests of one input length.
#[derive(Debug, Clone, Serialize)]
pub struct InputBucket {
    /// Prompt tokens planned (the range's lowest, when lengths are grouped into ranges).
    pub input_tokens: u32,
    /// The range's highest: equal to `input_tokens` unless a run has so many distinct lengths
    /// (a dataset, a trace) that they are grouped, in ranges that double.
    pub input_tokens_max: u32,
    /// Requests sent.
    pub sent: u64,
    /// Requests that succeeded.
    pub ok: u64,
    /// Requests that failed.
    pub failed: u64,
    /// TTFT of the bucket's requests.
    pub ttft_ms: Summary,
    /// E2E of its successful requests.
    pub e2e_ms: Summary,
    /// TPOT of its successful requests.
    pub tpot_ms: Summary,
}

/// One error class of a run: how many, when, and a sample of what the server said.
#[derive(Debug, Clone, Serialize)]
pub struct ErrorSample {
    /// The class (`http_5xx`, `timeout`...).
    pub class: String,
    /// Requests that failed so.
    pub count: u64,
    /// When the first of them ended, seconds from the run's start.
    pub first_s: f64,
    /// When the last of them ended.
    pub last_s: f64,
    /// What the first of them said (the error's detail, the server's message).
    pub sample: String,
    /// Its HTTP status, if it had one.
    pub http_status: Option<u16>,
}

#[derive(Debug, Clone, Default, Serialize)]
/// Requests of a scope, by outcome.
pub struct RequestCounts {
    /// Requests sent (cancelled ones included).
    pub sent: u64,
    /// Succeeded.
    pub ok: u64,
    /// Failed requests, cancelled ones and the client's own failures excluded.
    pub failed: u64,
    /// Of the failed, those that had received their first token (they count in TTFT).
    pub failed_after_first_token: u64,
    /// In flight when an interrupted run gave up on them; in no rate.
    pub cancelled: u64,
    /// Failed in the client itself (out of file descriptors or ports, an internal error): the
    /// client's failures, in no rate and no latency, and a warning.
    pub client_failed: u64,
    /// Re-sends after the server closed a pooled keep-alive connection before answering.
    pub connection_retries: u64,
    /// Requests that opened a new connection (the others reused an open one).
    pub new_connections: u64,
}

#[derive(Debug, Clone, Default, Serialize)]
/// Per second of the scope's wall time (its start to its last response).
pub struct Throughput {
    /// Successful requests.
    pub requests_per_s: f64,
    /// Output tokens of successful requests.
    pub output_tokens_per_s: f64,
    /// Input and output tokens of successful requests.
    pub total_tokens_per_s: f64,
}

#[derive(Debug, Clone, Default, Serialize)]
/// Rates of a scope.
pub struct Rates {
    /// The mean request rate the plan asked for (open loop only).
    pub planned_per_s: Option<f64>,
    /// Requests actually sent per second over the phase's sending window.
    pub sent_per_s: f64,
    /// Succeeded / completed (ok + failed).
    pub success_rate: f64,
    /// Failed / completed.
    pub error_rate: f64,
    /// Timed out / completed.
    pub timeout_rate: f64,
}

/// The distributions every report shows, summarized: one per distribution of the metric
/// table ([`Metric::distributions`]), in its order, written as a map from each one's summary
/// key (`ttft_ms`) to its [`Summary`].
#[derive(Debug, Clone)]
pub struct MetricSummaries(Vec<(Metric, Summary)>);

impl Default for MetricSummaries {
    fn default() -> Self {
        MetricSummaries(
            Metric::distributions()
                .map(|m| (m, Summary::default()))
                .collect(),
        )
    }
}

impl MetricSummaries {
    /// The summary of a distribution metric; `None` for any other.
    pub fn get(&self, metric: Metric) -> Option<&Summary> {
        self.0.iter().find(|(m, _)| *m == metric).map(|(_, s)| s)
    }

    /// Every distribution's summary, in the table's order.
    pub fn iter(&self) -> impl Iterator<Item = (Metric, &Summary)> {
        self.0.iter().map(|(m, s)| (*m, s))
    }
}

/// `summaries[Metric::Ttft]`: the summary of a distribution metric. Naming any other metric is
/// a mistake in llmload's own code (the table says which metrics are distributions).
impl std::ops::Index<Metric> for MetricSummaries {
    type Output = Summary;
    fn index(&self, metric: Metric) -> &Summary {
        match self.get(metric) {
            Some(summary) => summary,
            None => panic!("{metric} is not a distribution of the metric table"),
        }
    }
}

impl std::ops::IndexMut<Metric> for MetricSummaries {
    fn index_mut(&mut self, metric: Metric) -> &mut Summary {
        match self.0.iter_mut().find(|(m, _)| *m == metric) {
            Some((_, summary)) => summary,
            None => panic!("{metric} is not a distribution of the metric table"),
        }
    }
}

impl Serialize for MetricSummaries {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = serializer.serialize_map(Some(self.0.len()))?;
        for (metric, summary) in &self.0 {
            map.serialize_entry(metric.summary_key().unwrap_or(metric.name()), summary)?;
        }
        map.end()
    }
}

#[derive(Debug, Clone, Default, Serialize)]
/// Token counts against the plan.
pub struct TokenStats {
    /// Mean prompt tokens planned.
    pub input_planned_mean: Option<f64>,
    /// Mean prompt tokens the server counted.
    pub input_observed_mean: Option<f64>,
    /// The constant the server adds to every prompt (a chat template), estimated as the smallest
    /// observed − planned difference.
    pub input_overhead: Option<f64>,
    /// Median of |observed − planned − overhead| / planned: how far the server's tokenizer
    /// disagrees with the plan's, once the constant overhead is taken out.
    pub input_mismatch: Option<f64>,
    /// Mean output tokens planned.
    pub output_planned_mean: Option<f64>,
    /// Mean output tokens received.
    pub output_observed_mean: Option<f64>,
    /// Successful requests whose output length differs from the planned one.
    pub output_off_plan: u64,
    /// Successful requests whose completion tokens came from the server's usage / the tokenizer.
    pub counted_by_usage: u64,
    /// Successful requests whose counts came from the plan's tokenizer.
    pub counted_by_tokenizer: u64,
    /// Median of |usage − tokenizer| / usage over requests that have both.
    pub usage_vs_tokenizer: Option<f64>,
    /// Prompt tokens the server served from its prefix cache.
    pub cached_prompt_tokens: u64,
    /// Successful requests that ended with finish_reason "stop" before the planned length.
    pub stopped_short: u64,
    /// Successful requests whose usage could not be believed (counted by the tokenizer).
    pub usage_problems: u64,
}

#[derive(Debug, Clone, Default, Serialize)]
/// The server's prefix cache as its answers report it (`usage.prompt_tokens_details.cached_tokens`):
/// only requests whose usage carries the field count.
pub struct PrefixCache {
    /// Successful requests whose usage said how many prompt tokens were cached.
    pub requests: u64,
    /// Of those, requests with at least one cached token.
    pub hits: u64,
    /// Their prompt tokens.
    pub prompt_tokens: u64,
    /// Of those, tokens served from the cache.
    pub cached_tokens: u64,
    /// `cached_tokens / prompt_tokens`: the prefix-cache hit rate.
    pub hit_rate: f64,
    /// TTFT of requests that hit the cache, ms.
    pub ttft_hit_ms: Summary,
    /// TTFT of requests that did not, ms.
    pub ttft_miss_ms: Summary,
}

#[derive(Debug, Clone, Default, Serialize)]
/// Requests meeting every objective of the plan's `slo`.
pub struct Goodput {
    /// Successful requests that met every objective.
    pub good: u64,
    /// Good requests per second of wall time.
    pub requests_per_s: f64,
    /// Good requests / completed (ok + failed) requests.
    pub ratio: f64,
}

/// The full distributions behind [`MetricSummaries`], for any statistic: one HDR histogram per
/// distribution of the metric table.
#[derive(Debug, Clone)]
pub struct Distributions(Vec<(Metric, Distribution)>);

impl Default for Distributions {
    fn default() -> Self {
        Distributions(
            Metric::distributions()
                .map(|m| (m, Distribution::for_kind(m.kind())))
                .collect(),
        )
    }
}

impl Distributions {
    /// The distribution of a per-request metric; `None` for any other.
    pub fn get(&self, metric: Metric) -> Option<&Distribution> {
        self.0.iter().find(|(m, _)| *m == metric).map(|(_, d)| d)
    }

    /// Its distribution, to record into or merge.
    pub fn get_mut(&mut self, metric: Metric) -> Option<&mut Distribution> {
        self.0
            .iter_mut()
            .find(|(m, _)| *m == metric)
            .map(|(_, d)| d)
    }

    /// Adds what one request (of an open-loop phase or not) gives each distribution.
    fn add(&mut self, record: &RequestRecord, open_loop: bool) {
        for (metric, distribution) in &mut self.0 {
            metric.samples(record, open_loop, |value, weight| {
                distribution.record_n(value, weight)
            });
        }
    }

    /// Their summaries.
    fn summaries(&self) -> MetricSummaries {
        MetricSummaries(self.0.iter().map(|(m, d)| (*m, d.summary())).collect())
    }
}

#[derive(Debug, Clone, Default, Serialize)]
/// Everything measured in one scope: a phase, or all recorded phases.
pub struct PhaseMetrics {
    /// The phase's name (or "all recorded phases").
    pub name: String,
    /// Whether it counts in verdicts.
    pub recorded: bool,
    /// Its load model, as people read it.
    pub load: String,
    /// Requests by outcome.
    pub requests: RequestCounts,
    /// Throughputs.
    pub throughput: Throughput,
    /// Rates.
    pub rates: Rates,
    /// Latency and token-rate summaries.
    pub metrics: MetricSummaries,
    /// Failed requests by error class.
    pub errors: BTreeMap<String, u64>,
    /// Successful requests by finish_reason.
    pub finish_reasons: BTreeMap<String, u64>,
    /// Token counts against the plan.
    pub tokens: TokenStats,
    /// Requests meeting every objective of the plan's `slo`; absent without one.
    pub goodput: Option<Goodput>,
    /// The prefix cache, where the server reports cached tokens.
    pub prefix_cache: Option<PrefixCache>,
    /// From the phase's start to its last response, in seconds.
    pub wall_s: f64,
    /// How busy the client process was while the phase sent (absent where not measured).
    pub client: Option<ClientLoad>,
    /// The step of a sweep (or probe of a search) it is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub step: Option<StepInfo>,
    /// Why it was ended before its planned end, if it was (a probe that had already failed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ended_early: Option<String>,
    /// The connections opened before the phase's clock started, and while it ran.
    pub connections: Option<crate::records::Connections>,
    /// Why its window shows a server that was not keeping up, if it does (see
    /// [`profile::saturation`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub saturation: Option<String>,
    /// Requests in flight and TTFT through its sending window, in ten windows (a phase only).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub load_profile: Vec<ProfileWindow>,
    /// What the server said of itself over the scope (its telemetry), when it was scraped.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server: Option<server::PhaseServer>,
    #[serde(skip)]
    /// The distributions, for statistics beyond the summaries.
    pub distributions: Distributions,
}

impl PhaseMetrics {
    /// The distribution of a per-request metric; `None` for rates and throughputs.
    pub fn distribution(&self, metric: Metric) -> Option<&Distribution> {
        self.distributions.get(metric)
    }

    /// Whether any request completed (succeeded or failed): rates are shares of those.
    pub fn completed(&self) -> bool {
        self.requests.ok + self.requests.failed > 0
    }

    /// A metric's value over the scope, as the metric table says to read it (`stat` for
    /// distributions, server gauges and histograms); `None` when the scope has no data for it
    /// (no request, no telemetry) or the metric is not a scope's (a search's capacity).
    pub fn value(&self, metric: Metric, stat: Option<Stat>) -> Option<f64> {
        use table::Source;
        match metric.def().source {
            Source::Distribution { .. } => self.distribution(metric)?.stat(stat?),
            Source::Share { read, .. }
            | Source::PerSecond { read, .. }
            | Source::Aggregate(read) => read(self),
            Source::Server(signal) => self.server_value(signal, stat),
            Source::Search => None,
        }
    }

    /// One signal of the server's telemetry over the scope (`stat` for gauges and
    /// histograms); `None` without telemetry.
    fn server_value(&self, signal: crate::telemetry::Signal, stat: Option<Stat>) -> Option<f64> {
        use crate::telemetry::Kind;
        let server = self.server.as_ref()?;
        let summary = server.signal(signal)?;
        match (signal.kind(), stat) {
            (Kind::Gauge, Some(Stat::Max)) => summary.max,
            (Kind::Gauge, _) => summary.mean,
            (Kind::Counter, _) => summary.delta,
            (Kind::Histogram, Some(Stat::Percentile(p))) => server.percentile_ms(signal, p),
            (Kind::Histogram, Some(Stat::Max)) => server.percentile_ms(signal, 100.0),
            (Kind::Histogram, _) => summary.mean_ms,
        }
    }
}

/// A phase's time window in µs from the start of the run.
#[derive(Debug, Clone, Copy)]
struct Window {
    start: u64,
    sending_end: u64,
    end: u64,
}

/// The nearest-rank percentile p (0–100) of raw `values` (reordered in place); `values` must
/// not be empty. For exact percentiles where no histogram is kept (resampling, timing errors).
pub fn percentile(values: &mut [f64], p: f64) -> f64 {
    let n = values.len();
    let rank = (((p / 100.0) * n as f64 - 1e-9).ceil() as usize).clamp(1, n);
    let (_, value, _) = values.select_nth_unstable_by(rank - 1, |a, b| a.total_cmp(b));
    *value
}

/// Whether a successful request met every objective (`None`: no objective applies).
pub fn meets(slo: &Slo, record: &RequestRecord) -> bool {
    let within = |limit: Option<std::time::Duration>, value_ms: Option<f64>| match limit {
        None => true,
        Some(limit) => value_ms.is_some_and(|v| v <= limit.as_secs_f64() * 1000.0),
    };
    let ms = |us: u64| us as f64 / 1000.0;
    // One output token has no time per output token: nothing to miss.
    let tpot = table::tpot_ms(record).or_else(|| {
        (record.ttft_us.is_some() && record.e2e_us.is_some() && record.completion_tokens.is_some())
            .then_some(0.0)
    });
    record.ok()
        && within(slo.ttft, record.ttft_us.map(ms))
        && within(slo.tpot, tpot)
        && within(slo.e2e, record.e2e_us.map(ms))
}

/// Computes every aggregate of a run held in memory; `slo` (the plan's) defines goodput.
pub fn compute(log: &RunLog, slo: Option<&Slo>) -> Aggregates {
    let mut aggregator = Aggregator::new(slo);
    if let Some(header) = &log.header {
        aggregator.push(LogLine::Run(crate::records::RunLine::current(
            header.clone(),
        )));
    }
    for phase in &log.phases {
        aggregator.push(LogLine::PhaseStart(phase.clone()));
    }
    for record in &log.records {
        aggregator.record(record);
    }
    for end in &log.phase_ends {
        aggregator.push(LogLine::PhaseEnd(end.clone()));
    }
    if let Some(end) = &log.end {
        aggregator.push(LogLine::RunEnd(end.clone()));
    }
    aggregator.finish().1
}

/// Computes every aggregate of the run in `records.jsonl` in one pass over the file, holding no
/// record longer than it takes to add it: memory does not grow with the length of the run.
/// Returns the run's log without its records (header, phases, end) beside the aggregates.
pub fn compute_file(path: &Path, slo: Option<&Slo>) -> crate::error::Result<(RunLog, Aggregates)> {
    compute_file_with(path, slo, std::time::Duration::from_secs(1))
}

/// [`compute_file`], with time-series windows of `interval`.
pub fn compute_file_with(
    path: &Path,
    slo: Option<&Slo>,
    interval: std::time::Duration,
) -> crate::error::Result<(RunLog, Aggregates)> {
    let mut aggregator = Aggregator::new(slo).with_interval(interval);
    crate::records::read_lines(path, |line| aggregator.push(line))?;
    RunLog::check_header(&aggregator.log, path)?;
    Ok(aggregator.finish())
}

/// Aggregates a run as its log lines stream by. A phase's records must come after its
/// `phase_start` line, as the executor writes them.
pub struct Aggregator<'s> {
    slo: Option<&'s Slo>,
    /// The log without records.
    log: RunLog,
    /// One per phase, in the order of `log.phases`.
    phases: Vec<Accumulator<'s>>,
    overall: Accumulator<'s>,
    last_response_us: Option<u64>,
    first_error: Option<String>,
    first_usage_problem: Option<String>,
    first_client_error: Option<String>,
    series: timeseries::SeriesBuilder,
    by_input: BTreeMap<u32, BucketAccumulator>,
    /// `by_input` holds ranges of lengths (keyed by their top), not lengths.
    by_input_ranged: bool,
    by_turn: BTreeMap<u32, TurnAccumulator>,
    error_samples: BTreeMap<String, ErrorSample>,
}

/// What one input length gathers.
/// Distinct input lengths listed one by one; beyond, they are grouped in ranges.
const MAX_EXACT_INPUT_LENGTHS: usize = 16;

/// The range of input lengths `tokens` falls in, when lengths are grouped: (2^(k-1), 2^k].
fn input_range(tokens: u32) -> (u32, u32) {
    let high = tokens
        .max(1)
        .checked_next_power_of_two()
        .unwrap_or(u32::MAX);
    (high / 2 + 1, high)
}

struct BucketAccumulator {
    sent: u64,
    ok: u64,
    failed: u64,
    ttft: Distribution,
    e2e: Distribution,
    tpot: Distribution,
}

impl BucketAccumulator {
    fn new() -> BucketAccumulator {
        BucketAccumulator {
            sent: 0,
            ok: 0,
            failed: 0,
            ttft: Distribution::milliseconds(),
            e2e: Distribution::milliseconds(),
            tpot: Distribution::milliseconds(),
        }
    }

    fn add(&mut self, record: &RequestRecord) {
        self.sent += 1;
        if let Some(ttft) = ttft_ms(record) {
            self.ttft.record(ttft);
        }
        match record.error {
            None => {
                self.ok += 1;
                if let Some(e2e) = table::e2e_ms(record) {
                    self.e2e.record(e2e);
                }
                if let Some(tpot) = table::tpot_ms(record) {
                    self.tpot.record(tpot);
                }
            }
            Some(ErrorClass::Cancelled | ErrorClass::Client) => {}
            Some(_) => self.failed += 1,
        }
    }
}

/// One turn index of a multi-turn workload, over every conversation.
struct TurnAccumulator {
    input: BucketAccumulator,
    planned_in: u64,
    observed_in: u64,
    observed_n: u64,
    cached: u64,
}

/// The recorded requests of one turn of the conversations (turn 1 opens each).
#[derive(Debug, Clone, Serialize)]
pub struct TurnBucket {
    /// The turn, from 1.
    pub turn: u32,
    /// Requests sent.
    pub sent: u64,
    /// Requests that succeeded.
    pub ok: u64,
    /// Requests that failed.
    pub failed: u64,
    /// Mean prompt tokens planned (the history so far and the new message).
    pub input_tokens_planned_mean: f64,
    /// Mean prompt tokens the server counted (chat template included), where it said.
    pub prompt_tokens_mean: Option<f64>,
    /// Mean prompt tokens served from the server's prefix cache, where it said.
    pub cached_tokens_mean: Option<f64>,
    /// TTFT of the turn's requests.
    pub ttft_ms: Summary,
    /// E2E of its successful requests.
    pub e2e_ms: Summary,
}

impl<'s> Aggregator<'s> {
    /// An aggregator; `slo` (the plan's) defines goodput.
    pub fn new(slo: Option<&'s Slo>) -> Aggregator<'s> {
        Aggregator {
            slo,
            log: RunLog::default(),
            phases: Vec::new(),
            // Lag is merged from the open-loop phases at the end.
            overall: Accumulator::new(false, slo),
            last_response_us: None,
            first_error: None,
            first_usage_problem: None,
            first_client_error: None,
            series: timeseries::SeriesBuilder::new(1_000_000, crate::plan::MAX_SERIES_WINDOWS),
            by_input: BTreeMap::new(),
            by_input_ranged: false,
            by_turn: BTreeMap::new(),
            error_samples: BTreeMap::new(),
        }
    }

    /// Time-series windows of `interval` (the plan's `report { interval }`), not a second.
    pub fn with_interval(mut self, interval: std::time::Duration) -> Self {
        self.series = timeseries::SeriesBuilder::new(
            interval.as_micros() as u64,
            crate::plan::MAX_SERIES_WINDOWS,
        );
        self
    }

    /// Adds one line of the log.
    pub fn push(&mut self, line: LogLine) {
        match line {
            LogLine::Request(record) => self.record(&record),
            LogLine::PhaseStart(start) => {
                self.series.phase_start(&start);
                let mut accumulator = Accumulator::new(start.open_loop, self.slo);
                accumulator.profile = Some(ProfileBuilder::new(start.at_us));
                self.phases.push(accumulator);
                self.log.phases.push(start);
            }
            LogLine::PhaseEnd(end) => {
                if let Some(start) = self.log.phases.iter().find(|p| p.index == end.index) {
                    self.series.phase_end(&end, &start.name);
                }
                self.log.push(LogLine::PhaseEnd(end));
            }
            other => self.log.push(other),
        }
    }

    /// Adds one request.
    pub fn record(&mut self, record: &RequestRecord) {
        self.last_response_us = self.last_response_us.max(record.end_us());
        let Some(position) = self.log.phases.iter().position(|p| p.index == record.phase) else {
            return;
        };
        self.phases[position].add(record);
        self.series.record(record);
        if self.log.phases[position].record {
            self.overall.add(record);
            self.by_input_add(record);
            if let Some(turn) = record.turn {
                self.by_turn_add(turn, record);
            }
            let first = |slot: &mut Option<String>, value: &Option<String>| {
                if slot.is_none() {
                    slot.clone_from(value);
                }
            };
            match record.error {
                Some(ErrorClass::Client) => {
                    first(&mut self.first_client_error, &record.error_detail)
                }
                Some(_) => first(&mut self.first_error, &record.error_detail),
                None => first(&mut self.first_usage_problem, &record.usage_problem),
            }
        }
    }

    fn by_turn_add(&mut self, turn: u32, record: &RequestRecord) {
        let bucket = self.by_turn.entry(turn).or_insert_with(|| TurnAccumulator {
            input: BucketAccumulator::new(),
            planned_in: 0,
            observed_in: 0,
            observed_n: 0,
            cached: 0,
        });
        bucket.input.add(record);
        bucket.planned_in += record.input_tokens_planned as u64;
        if let Some(prompt) = record.prompt_tokens.filter(|_| record.ok()) {
            bucket.observed_in += prompt;
            bucket.observed_n += 1;
            bucket.cached += record.cached_tokens.unwrap_or(0);
        }
    }

    fn by_input_add(&mut self, record: &RequestRecord) {
        let exact = record.input_tokens_planned;
        if !self.by_input_ranged
            && !self.by_input.contains_key(&exact)
            && self.by_input.len() >= MAX_EXACT_INPUT_LENGTHS
        {
            // Too many lengths to list one by one (and to hold three histograms each): from
            // now on, ranges that double.
            self.by_input_ranged = true;
            let exact_buckets = std::mem::take(&mut self.by_input);
            for (length, bucket) in exact_buckets {
                match self.by_input.entry(input_range(length).1) {
                    std::collections::btree_map::Entry::Vacant(slot) => {
                        slot.insert(bucket);
                    }
                    std::collections::btree_map::Entry::Occupied(mut slot) => {
                        let into = slot.get_mut();
                        into.sent += bucket.sent;
                        into.ok += bucket.ok;
                        into.failed += bucket.failed;
                        into.ttft.merge(&bucket.ttft);
                        into.e2e.merge(&bucket.e2e);
                        into.tpot.merge(&bucket.tpot);
                    }
                }
            }
        }
        let key = if self.by_input_ranged {
            input_range(exact).1
        } else {
            exact
        };
        self.by_input
            .entry(key)
            .or_insert_with(BucketAccumulator::new)
            .add(record);
        if let Some(class) = record.error.filter(|c| *c != ErrorClass::Cancelled) {
            let at_s = record.end_us().unwrap_or(record.actual_send_us) as f64 / 1e6;
            let sample = self
                .error_samples
                .entry(class.as_str().to_string())
                .or_insert_with(|| ErrorSample {
                    class: class.as_str().to_string(),
                    count: 0,
                    first_s: at_s,
                    last_s: at_s,
                    sample: record.error_detail.clone().unwrap_or_default(),
                    http_status: record.http_status,
                });
            sample.count += 1;
            sample.first_s = sample.first_s.min(at_s);
            sample.last_s = sample.last_s.max(at_s);
        }
    }

    /// The aggregates, and the log without its records.
    pub fn finish(self) -> (RunLog, Aggregates) {
        let by_turn = self
            .by_turn
            .into_iter()
            .map(|(turn, t)| TurnBucket {
                turn,
                sent: t.input.sent,
                ok: t.input.ok,
                failed: t.input.failed,
                input_tokens_planned_mean: t.planned_in as f64 / t.input.sent.max(1) as f64,
                prompt_tokens_mean: mean(t.observed_in as f64, t.observed_n),
                cached_tokens_mean: mean(t.cached as f64, t.observed_n),
                ttft_ms: t.input.ttft.summary(),
                e2e_ms: t.input.e2e.summary(),
            })
            .collect();
        let ranged = self.by_input_ranged;
        let by_input = self.by_input;
        let log = self.log;
        let run_end = log.end.as_ref().map(|e| e.at_us);
        let mut phases = Vec::new();
        let mut windows = Vec::new();
        for (start, accumulator) in log.phases.iter().zip(self.phases) {
            let phase_end = log.phase_ends.iter().find(|e| e.index == start.index);
            let sending_end = phase_end
                .map(|e| e.at_us)
                .or(accumulator.last_send_us)
                .or(run_end)
                .unwrap_or(start.at_us);
            let last_response = accumulator.last_end_us.unwrap_or(sending_end);
            let window = Window {
                start: start.at_us,
                sending_end,
                end: last_response.max(sending_end),
            };
            let mut metrics = accumulator.finish(&[window]);
            metrics.name = start.name.clone();
            metrics.recorded = start.record;
            metrics.load = start.load.clone();
            metrics.rates.planned_per_s = start.planned_rate;
            metrics.client = phase_end.and_then(|e| e.client);
            metrics.step = start.step.clone();
            metrics.ended_early = phase_end.and_then(|e| e.ended_early.clone());
            metrics.connections = phase_end.and_then(|e| e.connections);
            metrics.saturation = profile::saturation(&metrics.load_profile, start.open_loop);
            phases.push(metrics);
            windows.push((start.record, start.open_loop, window));
        }
        let overall_windows: Vec<Window> = windows.iter().filter(|w| w.0).map(|w| w.2).collect();
        let mut overall = self.overall.finish(&overall_windows);
        overall.name = "all recorded phases".into();
        overall.recorded = true;
        overall.load = "-".into();
        // Lag is meaningful only for open-loop phases' records.
        let mut lag = Distribution::milliseconds();
        for (phase, window) in phases.iter().zip(&windows) {
            if let (true, true, Some(phase_lag)) = (
                window.0,
                window.1,
                phase.distributions.get(Metric::ScheduleLag),
            ) {
                lag.merge(phase_lag);
            }
        }
        if let Some(overall_lag) = overall.distributions.get_mut(Metric::ScheduleLag) {
            *overall_lag = lag;
        }
        overall.metrics = overall.distributions.summaries();
        overall.client = combined_client_load(phases.iter().filter(|p| p.recorded));

        let mut aggregates = Aggregates {
            phases,
            overall,
            warnings: Vec::new(),
            interrupted: log.interrupted(),
            last_response_us: self.last_response_us,
            first_error: self.first_error,
            first_usage_problem: self.first_usage_problem,
            first_client_error: self.first_client_error,
            aborted: log.end.as_ref().and_then(|e| e.aborted.clone()),
            client_peak_rss_bytes: log.end.as_ref().and_then(|e| e.client_peak_rss_bytes),
            search_end: log.search_end.clone(),
            server: None,
            timeseries: self.series.finish(),
            by_input: by_input
                .into_iter()
                .map(|(key, b)| InputBucket {
                    input_tokens: if ranged { input_range(key).0 } else { key },
                    input_tokens_max: key,
                    sent: b.sent,
                    ok: b.ok,
                    failed: b.failed,
                    ttft_ms: b.ttft.summary(),
                    e2e_ms: b.e2e.summary(),
                    tpot_ms: b.tpot.summary(),
                })
                .collect(),
            error_samples: self.error_samples.into_values().collect(),
            by_turn,
        };
        aggregates.warnings = warnings::assess(&log, &aggregates);
        (log, aggregates)
    }
}

/// The client's load over several phases: CPU and seconds add up; utilization is over their
/// combined sending time.
fn combined_client_load<'a>(phases: impl Iterator<Item = &'a PhaseMetrics>) -> Option<ClientLoad> {
    let mut total: Option<(ClientLoad, f64)> = None;
    for load in phases.filter_map(|p| p.client) {
        let capacity_s = if load.utilization > 0.0 {
            load.cpu_s / load.utilization
        } else {
            0.0
        };
        let (sum, capacity) = total.get_or_insert((
            ClientLoad {
                cores: load.cores,
                cpu_s: 0.0,
                utilization: 0.0,
                seconds: 0,
                saturated_seconds: 0,
            },
            0.0,
        ));
        sum.cpu_s += load.cpu_s;
        sum.seconds += load.seconds;
        sum.saturated_seconds += load.saturated_seconds;
        *capacity += capacity_s;
    }
    total.map(|(mut sum, capacity)| {
        sum.utilization = if capacity > 0.0 {
            sum.cpu_s / capacity
        } else {
            0.0
        };
        sum
    })
}

/// Total length of the union of windows (they may overlap where in-flight requests of one phase
/// finish during the next).
fn union_seconds(windows: &[Window], end: impl Fn(&Window) -> u64) -> f64 {
    let mut spans: Vec<(u64, u64)> = windows
        .iter()
        .map(|w| (w.start, end(w).max(w.start)))
        .collect();
    spans.sort();
    let mut total = 0u64;
    let mut current: Option<(u64, u64)> = None;
    for (start, stop) in spans {
        current = match current {
            Some((a, b)) if start <= b => Some((a, b.max(stop))),
            Some((a, b)) => {
                total += b - a;
                Some((start, stop))
            }
            None => Some((start, stop)),
        };
    }
    if let Some((a, b)) = current {
        total += b - a;
    }
    total as f64 / 1e6
}

fn median(values: &mut [f64]) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    Some(values[values.len() / 2])
}

fn mean(sum: f64, count: u64) -> Option<f64> {
    (count > 0).then(|| sum / count as f64)
}

/// What one scope (a phase, or all recorded phases) gathers from its records.
struct Accumulator<'s> {
    m: PhaseMetrics,
    open_loop: bool,
    slo: Option<&'s Slo>,
    good: u64,
    output_tokens: u64,
    total_tokens: u64,
    timeouts: u64,
    planned_in: f64,
    observed_in: f64,
    observed_in_n: u64,
    planned_out: f64,
    observed_out: f64,
    /// (planned, observed) prompt tokens of requests counted by the server's usage.
    input_pairs: Vec<(f64, f64)>,
    usage_vs_tokenizer: Vec<f64>,
    last_send_us: Option<u64>,
    last_end_us: Option<u64>,
    /// A phase's load through its window (not kept for all phases together).
    profile: Option<ProfileBuilder>,
    cache: PrefixCache,
    ttft_hit: Distribution,
    ttft_miss: Distribution,
}

impl<'s> Accumulator<'s> {
    fn new(open_loop: bool, slo: Option<&'s Slo>) -> Accumulator<'s> {
        Accumulator {
            m: PhaseMetrics::default(),
            open_loop,
            slo,
            good: 0,
            output_tokens: 0,
            total_tokens: 0,
            timeouts: 0,
            planned_in: 0.0,
            observed_in: 0.0,
            observed_in_n: 0,
            planned_out: 0.0,
            observed_out: 0.0,
            input_pairs: Vec::new(),
            usage_vs_tokenizer: Vec::new(),
            last_send_us: None,
            last_end_us: None,
            profile: None,
            cache: PrefixCache::default(),
            ttft_hit: Distribution::milliseconds(),
            ttft_miss: Distribution::milliseconds(),
        }
    }

    fn add(&mut self, record: &RequestRecord) {
        let m = &mut self.m;
        // Each distribution takes what the metric table says it takes from this request.
        m.distributions.add(record, self.open_loop);
        self.last_send_us = self.last_send_us.max(Some(record.actual_send_us));
        self.last_end_us = self.last_end_us.max(record.end_us());
        if let Some(profile) = &mut self.profile {
            let end = record.end_us().unwrap_or(record.actual_send_us);
            profile.add_request(record.actual_send_us, end, ttft_ms(record));
        }
        if self.slo.is_some_and(|slo| meets(slo, record)) {
            self.good += 1;
        }
        m.requests.sent += 1;
        m.requests.connection_retries += record.connection_retries as u64;
        if record.connect_us.is_some() {
            m.requests.new_connections += 1;
        }
        match record.error {
            Some(ErrorClass::Cancelled) => {
                m.requests.cancelled += 1;
                return;
            }
            Some(ErrorClass::Client) => {
                m.requests.client_failed += 1;
                *m.errors
                    .entry(ErrorClass::Client.as_str().to_string())
                    .or_default() += 1;
                return;
            }
            Some(class) => {
                m.requests.failed += 1;
                *m.errors.entry(class.as_str().to_string()).or_default() += 1;
                if class == ErrorClass::Timeout {
                    self.timeouts += 1;
                }
                // A request that failed after its first token still had a time to first token.
                if ttft_ms(record).is_some() {
                    m.requests.failed_after_first_token += 1;
                }
                return;
            }
            None => m.requests.ok += 1,
        }
        if record.usage_problem.is_some() {
            m.tokens.usage_problems += 1;
        }
        if let Some(reason) = &record.finish_reason {
            *m.finish_reasons.entry(reason.clone()).or_default() += 1;
        }
        let completion = record.completion_tokens.unwrap_or(0);
        let prompt = record
            .prompt_tokens
            .unwrap_or(record.input_tokens_planned as u64);
        self.output_tokens += completion;
        self.total_tokens += completion + prompt;
        self.planned_in += record.input_tokens_planned as f64;
        self.planned_out += record.output_tokens_planned as f64;
        self.observed_out += completion as f64;
        if completion != record.output_tokens_planned as u64 {
            m.tokens.output_off_plan += 1;
        }
        if record.finish_reason.as_deref() == Some("stop")
            && completion < record.output_tokens_planned as u64
        {
            m.tokens.stopped_short += 1;
        }
        match record.token_source {
            Some(TokenSource::Usage) => m.tokens.counted_by_usage += 1,
            Some(_) => m.tokens.counted_by_tokenizer += 1,
            None => {}
        }
        m.tokens.cached_prompt_tokens += record.cached_tokens.unwrap_or(0);
        if let Some(cached) = record.cached_tokens {
            self.cache.requests += 1;
            self.cache.prompt_tokens += prompt;
            self.cache.cached_tokens += cached;
            let ttft = ttft_ms(record);
            if cached > 0 {
                self.cache.hits += 1;
                if let Some(ttft) = ttft {
                    self.ttft_hit.record(ttft);
                }
            } else if let Some(ttft) = ttft {
                self.ttft_miss.record(ttft);
            }
        }
        if record.token_source == Some(TokenSource::Usage) {
            if let Some(observed) = record.prompt_tokens {
                self.observed_in += observed as f64;
                self.observed_in_n += 1;
                self.input_pairs
                    .push((record.input_tokens_planned as f64, observed as f64));
            }
            if let (Some(usage), Some(counted)) =
                (record.completion_tokens, record.completion_tokens_tokenizer)
            {
                if usage > 0 {
                    self.usage_vs_tokenizer
                        .push((usage as f64 - counted as f64).abs() / usage as f64);
                }
            }
        }
    }

    fn finish(self, windows: &[Window]) -> PhaseMetrics {
        let mut m = self.m;
        if let (Some(profile), [window]) = (&self.profile, windows) {
            m.load_profile = profile.windows(window.sending_end);
        }
        let wall = union_seconds(windows, |w| w.end);
        let sending = union_seconds(windows, |w| w.sending_end);
        m.wall_s = wall;
        if wall > 0.0 {
            m.throughput = Throughput {
                requests_per_s: m.requests.ok as f64 / wall,
                output_tokens_per_s: self.output_tokens as f64 / wall,
                total_tokens_per_s: self.total_tokens as f64 / wall,
            };
        }
        let attempted = m.requests.ok + m.requests.failed;
        let share = |n: u64| {
            if attempted > 0 {
                n as f64 / attempted as f64
            } else {
                0.0
            }
        };
        m.rates = Rates {
            planned_per_s: None,
            sent_per_s: if sending > 0.0 {
                m.requests.sent as f64 / sending
            } else {
                0.0
            },
            success_rate: share(m.requests.ok),
            error_rate: share(m.requests.failed),
            timeout_rate: share(self.timeouts),
        };
        if self.slo.is_some() {
            m.goodput = Some(Goodput {
                good: self.good,
                requests_per_s: if wall > 0.0 {
                    self.good as f64 / wall
                } else {
                    0.0
                },
                ratio: share(self.good),
            });
        }
        let ok = m.requests.ok;
        m.tokens.input_planned_mean = mean(self.planned_in, ok);
        m.tokens.input_observed_mean = mean(self.observed_in, self.observed_in_n);
        m.tokens.output_planned_mean = mean(self.planned_out, ok);
        m.tokens.output_observed_mean = mean(self.observed_out, ok);
        if !self.input_pairs.is_empty() {
            let overhead = self
                .input_pairs
                .iter()
                .map(|(p, o)| o - p)
                .fold(f64::INFINITY, f64::min);
            let mut off: Vec<f64> = self
                .input_pairs
                .iter()
                .filter(|(p, _)| *p > 0.0)
                .map(|(p, o)| (o - p - overhead).abs() / p)
                .collect();
            m.tokens.input_overhead = Some(overhead);
            m.tokens.input_mismatch = median(&mut off);
        }
        if self.cache.requests > 0 {
            let mut cache = self.cache;
            cache.hit_rate = cache.cached_tokens as f64 / cache.prompt_tokens.max(1) as f64;
            cache.ttft_hit_ms = self.ttft_hit.summary();
            cache.ttft_miss_ms = self.ttft_miss.summary();
            m.prefix_cache = Some(cache);
        }
        let mut usage_vs_tokenizer = self.usage_vs_tokenizer;
        m.tokens.usage_vs_tokenizer = median(&mut usage_vs_tokenizer);
        m.metrics = m.distributions.summaries();
        m
    }
}

#[cfg(test)]
mod tests;
