//! What a run's aggregates are: the types every report renders (per phase and overall), their
//! per-metric summaries and distributions keyed by the metric table, and how one metric's value
//! is read from a scope ([`PhaseMetrics::value`]). Nothing here computes from records: that is
//! [`super::aggregator`] and [`super::accumulator`].

use std::collections::BTreeMap;

use serde::Serialize;

use super::profile::ProfileWindow;
use super::server;
use super::table::{self, DistMetric, Metric};
use super::timeseries;
use super::warnings::Warning;
use super::{Distribution, Summary};
use crate::plan::Stat;
use crate::records::{ClientLoad, RequestRecord, StepInfo};

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
    /// Why the target was refused before the clock started, if it was: nothing was sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
    /// The client process's peak resident memory over the run.
    #[serde(skip)]
    pub client_peak_rss_bytes: Option<u64>,
    /// How the run's capacity search ended, if it had one that ended.
    #[serde(skip)]
    pub search_end: Option<crate::records::SearchEnd>,
    /// The server's telemetry over the run, when it was scraped.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server: Option<server::ServerTelemetry>,
    /// The server llmload started for the run (`server.json`), if it did.
    #[serde(skip)]
    pub launched_server: Option<crate::records::server_run::ServerRun>,
    /// The run over time.
    pub timeseries: timeseries::TimeSeries,
    /// The recorded requests by input length (the plan's buckets); an API that answers
    /// batches has them by batch size instead.
    pub by_input: Vec<InputBucket>,
    /// The recorded requests by batch size, for an API that answers batches (embeddings,
    /// rerank); empty otherwise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub by_batch: Vec<BatchBucket>,
    /// The recorded requests by the media they carried, in a multimodal workload (empty
    /// otherwise).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub by_media: Vec<super::MediaBucket>,
    /// The recorded requests by turn, in a multi-turn workload (empty otherwise).
    pub by_turn: Vec<TurnBucket>,
    /// The recorded turns by what they answer, in an agent loop that made a tool turn (empty
    /// otherwise).
    pub by_turn_kind: Vec<TurnKindBucket>,
    /// Each error class of the recorded phases: how many, when, and what the first said.
    pub error_samples: Vec<ErrorSample>,
    /// Each recorded phase's steady window (its warm-up transient cut) and its numbers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub steady: Option<super::steady::Steady>,
}

impl Aggregates {
    /// A scope's metrics: the named phase's, or all recorded phases' together (`None`).
    pub fn scope(&self, phase: Option<&str>) -> Option<&PhaseMetrics> {
        match phase {
            None => Some(&self.overall),
            Some(name) => self.phases.iter().find(|p| p.name == name),
        }
    }
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
    /// The share of its prompt tokens the server served from its prefix cache (`cached_tokens`
    /// of usage), over the requests whose usage said both.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_hit: Option<f64>,
}

/// The recorded requests of one batch size (or range of sizes), for an API that answers
/// batches: what a batch cost, whole and per input.
#[derive(Debug, Clone, Serialize)]
pub struct BatchBucket {
    /// Inputs per request (the range's lowest, when sizes are grouped into ranges).
    pub inputs: u32,
    /// The range's highest: equal to `inputs` unless sizes are grouped.
    pub inputs_max: u32,
    /// Requests sent.
    pub sent: u64,
    /// Requests that succeeded.
    pub ok: u64,
    /// Requests that failed.
    pub failed: u64,
    /// Prompt tokens per successful request (all its inputs): the server's count, else the
    /// planned one.
    pub input_tokens_mean: Option<f64>,
    /// E2E of its successful requests.
    pub e2e_ms: Summary,
    /// E2E per input of its successful requests.
    pub e2e_per_input_ms: Summary,
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
    /// Failed requests: throttled and cancelled ones and the client's own failures excluded.
    pub failed: u64,
    /// Turned away by the server's limits (HTTP 429 or 529, a rate-limit or overloaded error
    /// object): counted apart from the failed, and as missed in goodput.
    #[serde(default)]
    pub throttled: u64,
    /// Requests sent again after the server throttled them (`on-throttle "retry"`), whatever
    /// became of them.
    #[serde(default)]
    pub retried: u64,
    /// Their attempts the server throttled before the last.
    #[serde(default)]
    pub throttled_attempts: u64,
    /// The time they waited between attempts, s.
    #[serde(default)]
    pub retry_wait_s: f64,
    /// Requests the key's budgets (`target { limits }`) held before their send.
    #[serde(default)]
    pub paced: u64,
    /// How long they were held, s, in all.
    #[serde(default)]
    pub paced_s: f64,
    /// The longest any was held, s.
    #[serde(default)]
    pub paced_max_s: f64,
    /// Of the failed and throttled, those that had received their first token (they count in
    /// TTFT).
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
    /// By API key, when the run went with several (in the order of the run line's `keys`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub by_key: Vec<KeyCounts>,
}

/// The requests that went with one of a run's API keys, by outcome.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct KeyCounts {
    /// Requests sent with it.
    pub sent: u64,
    /// Succeeded.
    pub ok: u64,
    /// Failed (the throttled apart).
    pub failed: u64,
    /// Throttled by the server.
    pub throttled: u64,
    /// How long its budgets held its requests, s, in all.
    pub paced_s: f64,
}

impl RequestCounts {
    /// Requests that completed, successfully or not: the denominator of every rate.
    pub fn completed(&self) -> u64 {
        self.ok + self.failed + self.throttled
    }
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
    /// Inputs embedded (or documents ranked) by successful requests.
    #[serde(default)]
    pub inputs_per_s: f64,
    /// Input (prompt) tokens of successful requests.
    #[serde(default)]
    pub input_tokens_per_s: f64,
}

#[derive(Debug, Clone, Default, Serialize)]
/// Rates of a scope.
pub struct Rates {
    /// The mean request rate the plan asked for (open loop only).
    pub planned_per_s: Option<f64>,
    /// Requests actually sent per second over the phase's sending window.
    pub sent_per_s: f64,
    /// When the plan's `limits` held requests: those sent per second from the first send to
    /// the last (the rate the client slowed to).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paced_per_s: Option<f64>,
    /// Succeeded / completed (ok + failed + throttled).
    pub success_rate: f64,
    /// Failed / completed (the throttled apart).
    pub error_rate: f64,
    /// Throttled / completed.
    #[serde(default)]
    pub throttled_rate: f64,
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

/// `summaries[dist!(Ttft)]`: the summary of a distribution metric (only a distribution can be
/// named: see [`DistMetric`]). Every scope's summaries hold every distribution of the table, in
/// its order, as they are made only from [`Metric::distributions`].
impl std::ops::Index<DistMetric> for MetricSummaries {
    type Output = Summary;
    fn index(&self, metric: DistMetric) -> &Summary {
        let (held, summary) = &self.0[metric.ordinal()];
        debug_assert_eq!(*held, metric.metric());
        summary
    }
}

impl std::ops::IndexMut<DistMetric> for MetricSummaries {
    fn index_mut(&mut self, metric: DistMetric) -> &mut Summary {
        let (held, summary) = &mut self.0[metric.ordinal()];
        debug_assert_eq!(*held, metric.metric());
        summary
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
    /// Of those, requests whose counts were estimated (an answer over 1 MiB; a record written
    /// uncounted after a second Ctrl-C).
    #[serde(default)]
    pub counted_estimated: u64,
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
/// Successful answers checked against the plan's `response-format` (JSON, and its schema).
pub struct AnswerChecks {
    /// Answers checked.
    pub checked: u64,
    /// Of those, answers that were not what was asked.
    pub invalid: u64,
    /// `invalid / checked`.
    pub invalid_rate: f64,
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
    /// Output tokens of the good requests.
    pub output_tokens: u64,
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

    /// Adds what one judged agent session gives each session distribution.
    pub(super) fn add_session(&mut self, session: &super::sessions::SessionOutcome) {
        for (metric, distribution) in &mut self.0 {
            if let table::Source::Sessions { sample, .. } = metric.def().source {
                if let Some(value) = sample(session) {
                    distribution.record(value);
                }
            }
        }
    }

    /// Adds what one request (of an open-loop phase or not) gives each distribution.
    pub(super) fn add(&mut self, record: &RequestRecord, open_loop: bool) {
        for (metric, distribution) in &mut self.0 {
            metric.samples(record, open_loop, |value, weight| {
                distribution.record_n(value, weight)
            });
        }
    }

    /// Their summaries.
    pub(super) fn summaries(&self) -> MetricSummaries {
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
    /// The API it spoke, when it is not the run's (a plan comparing dialects).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api: Option<String>,
    /// The model it asked for, when it is not the run's (`model` in the phase).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
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
    /// Successful requests by the model their answers named (the answers' `model` field); a
    /// request whose answer named none is in no entry.
    pub models: BTreeMap<String, u64>,
    /// Token counts against the plan.
    pub tokens: TokenStats,
    /// Requests meeting every objective of the plan's `slo`; absent without one.
    pub goodput: Option<Goodput>,
    /// The prefix cache, where the server reports cached tokens.
    pub prefix_cache: Option<PrefixCache>,
    /// Agent sessions judged (a `sessions` phase's, or every recorded one's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sessions: Option<super::sessions::SessionStats>,
    /// Answers checked against the plan's `response-format`, when it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub answers: Option<AnswerChecks>,
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
    /// The server's caches reset before it (`reset-cache`): how, or why not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache_reset: Option<crate::records::CacheReset>,
    /// The connections opened before the phase's clock started, and while it ran.
    pub connections: Option<crate::records::Connections>,
    /// How long a closed loop's users waited for request bodies (the client's body builder).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub body_wait: Option<crate::records::BodyWait>,
    /// What the client's hiccup meter measured while the phase sent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hiccups: Option<crate::records::Hiccups>,
    /// The client's stalls in the phase's window, and its requests in flight during them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_stalls: Option<super::stalls::ClientStalls>,
    /// Why its window shows a server that was not keeping up, if it does (see
    /// [`profile::saturation`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub saturation: Option<String>,
    /// Why its load is above the server's rate limits, if it is: its refusals, or the budget
    /// its answers said was left falling through its window (see [`super::budget`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub over_limits: Option<super::budget::OverLimits>,
    /// How long until the server's budgets are whole again, as the answer to its last-sent
    /// request that spoke of them said (seconds): what a search waits before its next probe.
    #[serde(skip)]
    pub budget_refill_s: Option<f64>,
    /// Requests in flight and TTFT through its sending window, in ten windows (a phase only).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub load_profile: Vec<ProfileWindow>,
    /// What the server said of itself over the scope (its telemetry), when it was scraped.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server: Option<server::PhaseServer>,
    /// What the GPUs spent on its tokens, when a GPU exporter was scraped.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub energy: Option<super::energy::Energy>,
    /// What its tokens cost, when the plan prices the deployment (`cost`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost: Option<super::cost::Cost>,
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
        self.requests.completed() > 0
    }

    /// A metric's value over the scope, as the metric table says to read it (`stat` for
    /// distributions, server gauges and histograms); `None` when the scope has no data for it
    /// (no request, no telemetry) or the metric is not a scope's (a search's capacity).
    pub fn value(&self, metric: Metric, stat: Option<Stat>) -> Option<f64> {
        use table::Source;
        match metric.def().source {
            Source::Distribution { .. } | Source::Sessions { .. } => {
                self.distribution(metric)?.stat(stat?)
            }
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

/// The recorded requests of one turn of the conversations (turn 1 opens each).
#[derive(Debug, Clone, Serialize)]
pub struct TurnBucket {
    /// The turn, from 1.
    pub turn: u32,
    /// Its requests.
    #[serde(flatten)]
    pub requests: TurnRequests,
}

/// The recorded turns of one kind (what they answer: a user's message, or tool results).
#[derive(Debug, Clone, Serialize)]
pub struct TurnKindBucket {
    /// The kind.
    pub kind: crate::records::TurnKind,
    /// Its requests.
    #[serde(flatten)]
    pub requests: TurnRequests,
}

/// What a group of conversation turns did.
#[derive(Debug, Clone, Serialize)]
pub struct TurnRequests {
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
    /// Of its successful requests, those whose answer called tools.
    pub calling_tools: u64,
}
