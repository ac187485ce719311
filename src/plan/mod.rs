//! The plan stage: a KDL benchmark plan in, a typed and validated [`Plan`] out.
//!
//! This module owns the plan language: what each node means, its defaults, and the diagnostics a
//! user sees when a plan is wrong. It does not decide *when* requests are sent (that is
//! [`crate::planner`]) and it never touches the network.
//!
//! Every mistake found is reported, not only the first: [`load`] returns all diagnostics so that
//! `llmload check` can print them together.

pub mod data;
mod diagnostic;
pub mod fmt;
pub mod limits;
mod load;
mod parse;
pub mod profiles;
pub mod units;

/// The API a plan speaks is one of the dialects of [`crate::api`].
pub use crate::api::Api;
/// Metrics are named from the metric table, which every stage shares.
pub use crate::metrics::table::{Metric, MetricKind};
pub use load::{Arrivals, Load, LoadUnit, RateShape};

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

pub use diagnostic::{PlanDiagnostic, PlanErrors};
pub use parse::{
    check_file, parse_archived_plan, parse_plan, parse_plan_with, parse_sim_profile, Checked,
    EnvSource, ParseOptions, Sources,
};

/// A whole benchmark plan, validated.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The plan's name (its `plan` node, or the file name): in reports and report directory names.
    pub name: String,
    /// Free text from `description`, shown nowhere but the plan.
    pub description: Option<String>,
    /// Seeds arrivals, the input mix, prompts and the simulator.
    pub seed: u64,
    /// Where requests go.
    pub target: Target,
    /// What each request asks for.
    pub workload: Workload,
    /// The phases, in the order they run.
    pub phases: Vec<Phase>,
    /// The SLA assertions, judged on the run's aggregates.
    pub sla: Vec<Assertion>,
    /// Per-request objectives that define goodput.
    pub slo: Option<Slo>,
    /// Tolerances for comparing a run with a baseline (`llmload compare`, `run --baseline`).
    pub regression: Vec<Tolerance>,
    /// Conditions that stop a clearly failing run early (k6's abortOnFail), as a failed run.
    pub abort: Vec<AbortRule>,
    /// The capacity search, if the plan has one.
    pub search: Option<Search>,
    /// What each sweep step and search probe is judged on.
    pub objective: Objective,
    /// Settings of the embedded simulator, used when the target is `"sim"`.
    pub sim: SimSettings,
    /// How the reports are made.
    pub report: ReportSettings,
    /// The plan's file name and text, kept for diagnostics and for the report's provenance.
    pub source: PlanSource,
}

#[derive(Debug, Clone)]
/// Where the plan came from, for diagnostics and the report's provenance.
pub struct PlanSource {
    /// The file name as given (what diagnostics show; relative paths resolve from it).
    pub file_name: String,
    /// The plan's text, as read.
    pub text: Arc<String>,
    /// Every file it includes, at any depth: its path relative to the plan's directory, and
    /// its text.
    pub includes: Vec<(String, Arc<String>)>,
    /// Every `(env)"NAME"` value it read: the variable's name and the value used.
    pub env: Vec<(String, String)>,
}

/// Where requests go and how they are spoken.
#[derive(Debug, Clone)]
pub struct Target {
    /// The server, or the embedded simulator.
    pub endpoint: Endpoint,
    /// The API dialect requests speak.
    pub api: Api,
    /// The `model` field of every request.
    pub model: String,
    /// Name of the environment variable that holds the API key. The key itself never enters the plan.
    pub api_key_env: Option<String>,
    /// Stream responses (SSE); without it only E2E latency can be measured.
    pub stream: bool,
    /// Per request, from the send to the end of the response.
    pub timeout: Duration,
    /// Ask the server for usage on every streamed chunk (vLLM's `continuous_usage_stats`), which
    /// gives exact tokens per chunk.
    pub continuous_usage: bool,
    /// The longest line (one SSE event) a response may hold, in bytes.
    pub max_line: u64,
    /// The most bytes a response may hold.
    pub max_body: u64,
    /// Where the server's Prometheus metrics are scraped from during the run.
    pub metrics: MetricsSource,
    /// How often they are scraped.
    pub metrics_interval: Duration,
    /// Fields merged into every request's body: sampling parameters and server-specific knobs.
    pub body: serde_json::Map<String, serde_json::Value>,
    /// Extra HTTP headers on every request.
    pub headers: Vec<Header>,
    /// Open the connections each group of phases needs before its clock starts (`connections
    /// "warm"`, the default), or let requests open them and measure that (`"cold"`).
    pub warm_connections: bool,
}

/// An extra HTTP header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    /// Its name.
    pub name: String,
    /// Its value.
    pub value: HeaderValue,
}

/// Where a header's value comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeaderValue {
    /// Written in the plan: shown in reports.
    Text(String),
    /// A secret, read from this environment variable at run time and never written anywhere.
    Secret(String),
}

/// The longest SSE line (or event) a response may hold unless the plan says otherwise.
pub const DEFAULT_MAX_LINE: u64 = 1 << 20;
/// The most bytes a response may hold unless the plan says otherwise.
pub const DEFAULT_MAX_BODY: u64 = 256 << 20;

#[derive(Debug, Clone, PartialEq, Eq)]
/// Where a run's requests go.
pub enum Endpoint {
    /// An OpenAI-compatible server at this base URL.
    Url(String),
    /// The embedded simulator, started in-process on a loopback port.
    Simulator,
}

impl Endpoint {
    /// `"sim"`, or an http:// or https:// base URL; `None` for anything else.
    pub fn parse(text: &str) -> Option<Endpoint> {
        if text == "sim" {
            Some(Endpoint::Simulator)
        } else if text.starts_with("http://") || text.starts_with("https://") {
            Some(Endpoint::Url(text.to_string()))
        } else {
            None
        }
    }
}

/// What each request asks for.
#[derive(Debug, Clone)]
pub struct Workload {
    /// Builds prompts of exact lengths, and counts tokens where the server sends no usage.
    pub tokenizer: TokenizerSpec,
    /// Input-length buckets, sampled by weight. A fixed length is one bucket.
    pub buckets: Vec<Bucket>,
    /// Output tokens asked for (`max_tokens`), unless a bucket says otherwise.
    pub output_tokens: u32,
    /// Ask the server for exactly the output length (`ignore_eos` and `min_tokens`).
    pub ignore_eos: bool,
    /// Output lengths drawn per request from a distribution, instead of `output_tokens`.
    pub output_spread: Option<OutputSpread>,
    /// A system message sent first in every chat.
    pub system: Option<String>,
    /// Shared prefixes: each request starts with one group's prefix (by weight).
    pub prefix: Vec<PrefixGroup>,
    /// Prompts taken from a dataset file instead of synthetic text.
    pub dataset: Option<data::Dataset>,
    /// Multi-turn conversations: each scheduled request starts one.
    pub conversation: Option<Conversation>,
}

/// Multi-turn conversations: every turn sends the history so far (earlier user turns and the
/// assistant's actual answers) and a new user message, one turn at a time.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Conversation {
    /// Turns per conversation.
    pub turns: u32,
    /// The user's think time between an answer and the next turn (the least, with `think_max`).
    pub think: Duration,
    /// Think times drawn uniformly from `think..=think_max`.
    pub think_max: Option<Duration>,
}

/// Output lengths drawn per request (as peers' `--random-output-len` with a range ratio, or a
/// normal distribution), always within `min..=max`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum OutputSpread {
    /// Every length in `min..=max` equally likely.
    Uniform {
        /// The shortest.
        min: u32,
        /// The longest.
        max: u32,
    },
    /// Normal around `mean`, cut to `min..=max`.
    Normal {
        /// Its mean.
        mean: f64,
        /// Its standard deviation.
        stddev: f64,
        /// The shortest.
        min: u32,
        /// The longest.
        max: u32,
    },
}

/// One shared prefix: requests of its group start with the same text of `tokens` tokens.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PrefixGroup {
    /// The prefix's length in tokens.
    pub tokens: u32,
    /// The group's share of requests, relative to the other groups'.
    pub weight: f64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
/// The plan's tokenizer.
pub enum TokenizerSpec {
    /// A tokenizer built into the binary (`cl100k_base`, `o200k_base`).
    Builtin(String),
    /// A Hugging Face `tokenizer.json` on disk.
    File(std::path::PathBuf),
}

impl std::fmt::Display for TokenizerSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TokenizerSpec::Builtin(name) => f.write_str(name),
            TokenizerSpec::File(path) => write!(f, "{}", path.display()),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
/// One input length of the workload's mix.
pub struct Bucket {
    /// Prompt tokens.
    pub input_tokens: u32,
    /// Relative weight in the mix (> 0).
    pub weight: f64,
    /// Output length for requests of this bucket; the workload's `output` when absent.
    pub output_tokens: Option<u32>,
}

/// One phase of the run. Phases run in order.
#[derive(Debug, Clone)]
pub struct Phase {
    /// Unique in the plan; assertions name phases by it.
    pub name: String,
    /// Closed loop, open loop or burst.
    pub load: Load,
    /// The phase stops sending at this time.
    pub duration: Option<Duration>,
    /// The phase stops after this many requests.
    pub max_requests: Option<u64>,
    /// `record #false` keeps a phase (a warmup) out of metrics and verdicts.
    pub record: bool,
    /// Starts alongside an earlier phase (at an offset from its start), instead of after the
    /// phases before it.
    pub with: Option<StartWith>,
    /// The step of a sweep this phase is, if it is one.
    pub step: Option<Step>,
    /// The next phase waits until this phase's requests in flight have finished (a burst, a
    /// sweep's step): its latency is its own, and the next one's is not shifted by it.
    pub drain: bool,
    /// The model its requests ask for, instead of the target's.
    pub model: Option<String>,
    /// The server its requests go to (a base URL), instead of the target's.
    pub endpoint: Option<String>,
}

impl Plan {
    /// The data files the plan reads (a dataset, traces): the path as written, and its SHA-256.
    pub fn data_files(&self) -> Vec<(String, String)> {
        let mut files: Vec<(String, String)> = Vec::new();
        if let Some(dataset) = &self.workload.dataset {
            files.push((dataset.shown.clone(), dataset.sha256.clone()));
        }
        for phase in &self.phases {
            if let Load::Trace(trace) = &phase.load {
                if !files.iter().any(|(path, _)| *path == trace.shown) {
                    files.push((trace.shown.clone(), trace.sha256.clone()));
                }
            }
        }
        files
    }
}

impl Phase {
    /// A phase of `load` that starts after the ones before it and does not wait for its
    /// requests to drain (bursts do).
    pub fn new(name: impl Into<String>, load: Load) -> Phase {
        let drain = load.drains();
        Phase {
            name: name.into(),
            load,
            duration: None,
            max_requests: None,
            record: true,
            with: None,
            step: None,
            drain,
            model: None,
            endpoint: None,
        }
    }
}

/// `report { interval "1s" }`: how the reports are made.
#[derive(Debug, Clone, PartialEq)]
pub struct ReportSettings {
    /// The time series' window (it grows for long runs, to at most [`MAX_SERIES_WINDOWS`]
    /// windows).
    pub interval: Duration,
}

/// The most windows a run's time series holds: a longer run gets wider windows.
pub const MAX_SERIES_WINDOWS: usize = 1200;

impl Default for ReportSettings {
    fn default() -> Self {
        ReportSettings {
            interval: Duration::from_secs(1),
        }
    }
}

/// Where the target's server telemetry comes from.
#[derive(Debug, Clone, PartialEq)]
pub enum MetricsSource {
    /// The target's own `/metrics` (its base URL's, `/v1` left out), if it answers.
    Auto,
    /// This URL.
    Url(String),
    /// Not scraped.
    Off,
}

/// `with "steady" offset="30s"`: a phase that runs alongside another.
#[derive(Debug, Clone, PartialEq)]
pub struct StartWith {
    /// The earlier phase it starts with.
    pub phase: String,
    /// How long after that phase's start it starts.
    pub offset: Duration,
}

/// A phase that is one step of a sweep (or one probe of a search).
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    /// The sweep's (or search's) name.
    pub series: String,
    /// The step's load, in `unit`.
    pub load_value: f64,
    /// What the load counts.
    pub unit: LoadUnit,
    /// The unrecorded warmup before the step's measured window.
    pub warmup: bool,
}

/// `search`: the highest load at which the objectives hold, found by probing.
#[derive(Debug, Clone, PartialEq)]
pub struct Search {
    /// Its name (probes are named after it).
    pub name: String,
    /// Rate or concurrency.
    pub unit: LoadUnit,
    /// How an open loop's arrivals are spread.
    pub arrivals: Arrivals,
    /// The lowest load probed.
    pub low: f64,
    /// The highest load probed.
    pub high: f64,
    /// The search stops when the bracket is this narrow: (fails − sustains) / sustains.
    pub precision: f64,
    /// The most probes it runs (repeats included).
    pub max_probes: u32,
    /// The longest it runs.
    pub max_duration: Duration,
    /// An unrecorded warmup at the probe's load before each probe.
    pub warmup: Option<Duration>,
    /// Each probe's measured window.
    pub duration: Duration,
    /// What a probe must meet to pass.
    pub objective: Objective,
    /// It runs after this many of the plan's phases (where it is written).
    pub position: usize,
}

/// What a sweep's step or a search's probe must meet.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Objective {
    /// The plan's `sla` assertions that name no phase.
    Sla,
    /// At least this share of requests meet the plan's `slo` (DistServe's goodput attainment).
    Attainment(f64),
}

/// One SLA assertion, such as `ttft p99 < "500ms" phase="steady"`.
#[derive(Debug, Clone, PartialEq)]
pub struct Assertion {
    /// What is judged.
    pub metric: Metric,
    /// The statistic of a distribution metric; `None` for rates and throughputs.
    pub stat: Option<Stat>,
    /// How the observed value compares with the threshold.
    pub op: Op,
    /// In the metric's unit: milliseconds for latencies, a fraction for rates, per second for throughputs.
    pub threshold: f64,
    /// The phase it applies to; all recorded phases together when `None`.
    pub phase: Option<String>,
    /// The assertion as a person reads it, e.g. `ttft p99 < 500ms`.
    pub text: String,
}

#[derive(Debug, Clone, Copy, PartialEq)]
/// A statistic of a distribution.
pub enum Stat {
    /// The mean.
    Mean,
    /// The smallest value.
    Min,
    /// The largest value.
    Max,
    /// A percentile in (0, 100].
    Percentile(f64),
}

impl Stat {
    /// Parses `mean`, `min`, `max`, `median`, `p99`, `p99.9`, `p999`...
    pub fn parse(text: &str) -> Option<Stat> {
        match text {
            "mean" | "avg" => Some(Stat::Mean),
            "min" => Some(Stat::Min),
            "max" => Some(Stat::Max),
            "median" => Some(Stat::Percentile(50.0)),
            _ => {
                let digits = text.strip_prefix('p')?;
                // `p999` is the common spelling of p99.9; `p9999` of p99.99.
                let value: f64 =
                    if !digits.contains('.') && digits.len() > 2 && digits.starts_with("99") {
                        format!("{}.{}", &digits[..2], &digits[2..]).parse().ok()?
                    } else {
                        digits.parse().ok()?
                    };
                (value > 0.0 && value <= 100.0 && value.is_finite())
                    .then_some(Stat::Percentile(value))
            }
        }
    }
}

impl std::fmt::Display for Stat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Stat::Mean => f.write_str("mean"),
            Stat::Min => f.write_str("min"),
            Stat::Max => f.write_str("max"),
            Stat::Percentile(p) => write!(f, "p{p}"),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
/// A comparison of an assertion.
pub enum Op {
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `>`
    Gt,
    /// `>=`
    Ge,
}

impl Op {
    /// How plans write it.
    pub fn symbol(self) -> &'static str {
        match self {
            Op::Lt => "<",
            Op::Le => "<=",
            Op::Gt => ">",
            Op::Ge => ">=",
        }
    }
    /// Whether `observed` compares with `threshold` as this says.
    pub fn holds(self, observed: f64, threshold: f64) -> bool {
        match self {
            Op::Lt => observed < threshold,
            Op::Le => observed <= threshold,
            Op::Gt => observed > threshold,
            Op::Ge => observed >= threshold,
        }
    }
}

/// Per-request objectives (as DistServe and vLLM define goodput): a request is good when it
/// succeeded and met every objective given.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Slo {
    /// TTFT at most this.
    pub ttft: Option<Duration>,
    /// TPOT at most this.
    pub tpot: Option<Duration>,
    /// E2E at most this.
    pub e2e: Option<Duration>,
}

/// A condition under which a run stops early, as a failure: `error-rate > "20%" after=50`.
#[derive(Debug, Clone, PartialEq)]
pub struct AbortRule {
    /// The condition, written like an assertion; the run stops when it *holds*.
    pub condition: Assertion,
    /// It is judged only once this many recorded requests have completed.
    pub after: u64,
}

/// How much worse than the baseline a metric may get, e.g. `ttft p99 "+10%"`.
#[derive(Debug, Clone, PartialEq)]
pub struct Tolerance {
    /// What is compared.
    pub metric: Metric,
    /// Its statistic, for distributions.
    pub stat: Option<Stat>,
    /// The allowed worsening: a fraction of the baseline (0.10 for 10%), or for rates
    /// (error-rate, timeout-rate, goodput-ratio) an absolute difference in the rate.
    pub allowed: f64,
    /// The phase it applies to; all recorded phases together when `None`.
    pub phase: Option<String>,
    /// As written, e.g. `ttft p99 +10%`.
    pub text: String,
}

/// The embedded simulator (target `"sim"`, or `llmload sim`): fixed delays, or a model of a
/// continuous-batching engine when `engine` is set; faults either way.
#[derive(Debug, Clone, PartialEq)]
pub struct SimSettings {
    /// Fixed-delay mode: time to first token.
    pub ttft: Duration,
    /// Fixed-delay mode: time between tokens.
    pub itl: Duration,
    /// Each delay is stretched by a uniform random amount in [0, jitter].
    pub jitter: Duration,
    /// Fixed-delay mode: tokens per streamed chunk.
    pub tokens_per_chunk: u32,
    /// Seeds jitter, faults and generated text; the plan's seed unless the `sim` block sets one.
    pub seed: u64,
    /// The engine model; `None` serves every request alone with fixed delays.
    pub engine: Option<EngineSettings>,
    /// Injected failures.
    pub faults: Faults,
}

impl Default for SimSettings {
    fn default() -> Self {
        SimSettings {
            ttft: Duration::from_millis(50),
            itl: Duration::from_millis(10),
            jitter: Duration::ZERO,
            tokens_per_chunk: 1,
            seed: 0,
            engine: None,
            faults: Faults::default(),
        }
    }
}

/// A continuous-batching engine, after vLLM's scheduler (see docs/simulator.md).
#[derive(Debug, Clone, PartialEq)]
pub struct EngineSettings {
    /// Most sequences running at once (vLLM's max_num_seqs).
    pub max_seqs: u32,
    /// Tokens one engine step may process (vLLM's max_num_batched_tokens): decodes first, then
    /// chunks of prefill.
    pub max_batched_tokens: u32,
    /// KV cache capacity in tokens, allocated in blocks of `block_size`.
    pub kv_cache_tokens: u64,
    /// KV cache block size in tokens.
    pub block_size: u32,
    /// Reuse the KV blocks of prompt prefixes seen before (vLLM's automatic prefix caching, on
    /// by default in vLLM V1): a request whose leading blocks are cached skips their prefill.
    pub prefix_cache: bool,
    /// prompt + max_tokens above this gets HTTP 400.
    pub max_model_len: u32,
    /// Requests waiting beyond this get `queue_full_status`.
    pub max_waiting: u32,
    /// The HTTP status a full queue answers (429 or 503).
    pub queue_full_status: u16,
    /// Step time = step_base + prefill tokens × prefill_per_token + decoding sequences ×
    /// decode_per_seq + context tokens × attention_per_token.
    pub step_base: Duration,
    /// Step time per prefill token.
    pub prefill_per_token: Duration,
    /// Step time per decoding sequence.
    pub decode_per_seq: Duration,
    /// Step time per context token attended.
    pub attention_per_token: Duration,
}

/// Faults the simulator injects, each at a rate (a fraction of requests).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Faults {
    /// Share of requests answered with HTTP 500.
    pub http_5xx: f64,
    /// Share of requests answered with HTTP 429.
    pub http_429: f64,
    /// The connection is cut after a random token.
    pub drop_mid_stream: f64,
    /// One chunk of the stream is not valid JSON.
    pub malformed_chunk: f64,
    /// The stream stalls this long before the given token.
    pub stall: Option<Stall>,
    /// Response headers come this late.
    pub slow_headers: Option<SlowHeaders>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
/// A stall injected into streams.
pub struct Stall {
    /// How long the stream stalls.
    pub duration: Duration,
    /// Before which token (from 1).
    pub at_token: u32,
    /// The share of requests it strikes.
    pub rate: f64,
}

#[derive(Debug, Clone, Copy, PartialEq)]
/// Response headers sent late.
pub struct SlowHeaders {
    /// How late.
    pub delay: Duration,
    /// The share of requests it strikes.
    pub rate: f64,
}

impl Plan {
    /// Whether the plan has sweeps or a search: its `sla` lines that name no phase are then
    /// judged per step (and per probe), not over all recorded phases, which mix every load.
    pub fn is_stepped(&self) -> bool {
        self.search.is_some() || self.phases.iter().any(|p| p.step.is_some())
    }
}

/// Reads and validates a plan file. On failure, returns every diagnostic found.
pub fn load(path: &Path) -> Result<Plan, PlanErrors> {
    parse_plan(&path.display().to_string(), read_plan_text(path)?)
}

/// The text of a plan file, refusing one too large to be a plan before reading it.
pub fn read_plan_text(path: &Path) -> Result<String, PlanErrors> {
    let file_name = path.display().to_string();
    let cannot =
        |err: std::io::Error| PlanErrors::io(format!("cannot read plan file {file_name}: {err}"));
    let size = std::fs::metadata(path).map_err(cannot)?.len();
    if size > limits::MAX_PLAN_BYTES {
        return Err(PlanErrors::io(format!(
            "{file_name} is {size} bytes: more than the largest plan allowed ({} bytes); is it a plan?",
            limits::MAX_PLAN_BYTES
        )));
    }
    let bytes = std::fs::read(path).map_err(cannot)?;
    String::from_utf8(bytes).map_err(|_| {
        PlanErrors::io(format!(
            "{file_name} is not text (invalid UTF-8): is it a plan?"
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = "target \"sim\"\nworkload { input 64; output 8 }\nphase \"steady\" { rate 2; duration \"10s\" }\nphase \"warm\" { concurrency 1; requests 2; record #false }\n";

    fn parse(extra: &str) -> Result<Plan, PlanErrors> {
        parse_plan("t.kdl", format!("{BASE}{extra}"))
    }

    fn messages(extra: &str) -> Vec<String> {
        parse(extra)
            .unwrap_err()
            .diagnostics
            .iter()
            .map(|d| d.message.clone())
            .collect()
    }

    fn plan_with(target: &str, workload: &str) -> Result<Plan, PlanErrors> {
        parse_plan(
            "t.kdl",
            format!("target \"sim\" {{ {target} }}\nworkload {{ {workload} }}\nphase \"a\" {{ concurrency 1; requests 2 }}\n"),
        )
    }

    fn errors_of(result: Result<Plan, PlanErrors>) -> Vec<String> {
        result
            .unwrap_err()
            .diagnostics
            .iter()
            .map(|d| d.message.clone())
            .collect()
    }

    #[test]
    fn request_options_are_read_and_llmloads_own_fields_refused() {
        let plan = plan_with(
            "sampling temperature=0.5 top-k=40 stop=\"x\"; body #\"{\"chat_template_kwargs\": {\"a\": 1}}\"#; header \"X-Team\" \"a\"; header \"X-Key\" env=\"K\"",
            "input 8; output min=4 max=12; system \"hi\"; prefix 64 groups=3",
        )
        .unwrap();
        assert_eq!(plan.target.body["temperature"], 0.5);
        assert_eq!(plan.target.body["top_k"], 40);
        assert_eq!(plan.target.body["chat_template_kwargs"]["a"], 1);
        assert_eq!(
            plan.target.headers[1].value,
            HeaderValue::Secret("K".into())
        );
        assert_eq!(
            plan.workload.output_spread,
            Some(OutputSpread::Uniform { min: 4, max: 12 })
        );
        assert_eq!(plan.workload.prefix.len(), 3);
        assert_eq!(plan.workload.system.as_deref(), Some("hi"));

        let errors = errors_of(plan_with(
            "sampling max-tokens=5; body #\"{\"stream\": false}\"#; body \"[1]\"; header \"Authorization\" \"x\"; header \"X-A\"",
            "input 8; output min=9 max=3; prefix { group 0 }; conversation think=\"1s\"",
        ));
        let all = errors.join("\n");
        for expected in [
            "llmload sets `max_tokens`",
            "llmload sets `stream`",
            "`body` must be a JSON object",
            "llmload sets `Authorization` itself",
            "the header has no value",
            "`min` is above `max`",
            "out of range",
            "`conversation` needs turns=N",
        ] {
            assert!(all.contains(expected), "{expected} not in {all}");
        }
    }

    #[test]
    fn a_replay_only_plan_needs_no_lengths_but_others_do() {
        let dir = std::env::temp_dir().join(format!("llmload-trace-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("t.jsonl"),
            "{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 2}\n{\"timestamp\": 500, \"input_length\": 20, \"output_length\": 3}\n",
        )
        .unwrap();
        let file = dir.join("plan.kdl");
        let text = "target \"sim\"\nworkload { }\nphase \"r\" { trace \"t.jsonl\" speed=0.5 }\n";
        let plan = parse_plan(file.to_str().unwrap(), text.into()).unwrap();
        let Load::Trace(trace) = &plan.phases[0].load else {
            panic!("a trace")
        };
        assert_eq!(trace.rows.len(), 2);
        assert_eq!(trace.speed, 0.5);
        let schedule = crate::planner::compile(&plan, 1).unwrap();
        let offsets: Vec<_> = schedule.phases[0]
            .requests
            .iter()
            .map(|r| (r.intended_offset_us, r.input_tokens))
            .collect();
        assert_eq!(offsets, vec![(Some(0), 10), (Some(1_000_000), 20)]);
        let text = "target \"sim\"\nworkload { }\nphase \"r\" { trace \"t.jsonl\" }\nphase \"s\" { concurrency 1; requests 1 }\n";
        let errors = errors_of(parse_plan(file.to_str().unwrap(), text.into()));
        assert!(
            errors.iter().any(|e| e.contains("no `input`")),
            "{errors:?}"
        );
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn the_shipped_chat_sla_plan_is_accepted() {
        let text = include_str!("../../plans/chat-sla.kdl");
        let plan = parse_plan("chat-sla.kdl", text.to_string()).unwrap();
        assert_eq!(plan.phases.len(), 4);
        assert_eq!(plan.sla.len(), 4);
        assert_eq!(plan.seed, 42);
        assert_eq!(plan.workload.buckets.len(), 3);
        assert!(plan.workload.ignore_eos);
        assert_eq!(
            plan.phases[1].load,
            Load::Rate {
                rate: RateShape::Ramp {
                    from: 1.0,
                    to: 16.0
                },
                arrivals: Arrivals::Poisson
            }
        );
        assert_eq!(plan.phases[3].load, Load::AtOnce(64));
        assert!(!plan.phases[0].record);
        assert_eq!(plan.sla[0].phase.as_deref(), Some("steady"));
        assert_eq!(plan.sla[0].threshold, 500.0);
        assert_eq!(plan.sla[3].threshold, 0.01);
    }

    #[test]
    fn all_four_comparisons_including_the_property_spellings() {
        for (text, op) in [
            ("ttft p99 < \"500ms\"", Op::Lt),
            ("ttft p99 <= \"500ms\"", Op::Le),
            ("ttft p99 <=\"500ms\"", Op::Le),
            ("ttft p99 > \"500ms\"", Op::Gt),
            ("ttft p99 >= \"500ms\"", Op::Ge),
            ("ttft p99 \"<=\" \"500ms\"", Op::Le),
        ] {
            let plan =
                parse(&format!("sla {{ {text} }}")).unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!(plan.sla[0].op, op, "{text}");
            assert_eq!(plan.sla[0].threshold, 500.0, "{text}");
        }
    }

    #[test]
    fn statistics_and_scalar_metrics() {
        let plan = parse("sla { itl p99.9 < \"80ms\"; tpot mean < \"40ms\"; e2e max < \"2m\"; ttft p999 < \"1s\"; request-throughput > 1.5; output-throughput >= 100; error-rate < \"0.5%\"; timeout-rate <= \"0%\" }").unwrap();
        assert_eq!(plan.sla[0].stat, Some(Stat::Percentile(99.9)));
        assert_eq!(plan.sla[1].stat, Some(Stat::Mean));
        assert_eq!(plan.sla[2].threshold, 120_000.0);
        assert_eq!(plan.sla[3].stat, Some(Stat::Percentile(99.9)));
        assert_eq!(plan.sla[4].threshold, 1.5);
        assert_eq!(plan.sla[6].threshold, 0.005);
        assert_eq!(plan.sla[0].text, "itl p99.9 < 80ms");
    }

    #[test]
    fn assertion_mistakes() {
        assert_eq!(messages("sla { ttft q99 < \"1s\" }"), ["unknown statistic"]);
        assert_eq!(
            messages("sla { latency p99 < \"1s\" }"),
            ["unknown metric `latency`"]
        );
        assert_eq!(
            messages("sla { ttft p99 < \"1s\" phase=\"nope\" }"),
            ["no phase is named \"nope\""]
        );
        assert_eq!(
            messages("sla { ttft p99 < \"1s\" phase=\"warm\" }"),
            ["phase \"warm\" is not recorded (record #false)"]
        );
        assert_eq!(
            messages("sla { ttft p99 < 500 }"),
            ["a bare number has no unit"]
        );
        assert_eq!(
            messages("sla { error-rate < 0.01 }"),
            ["expected a percentage string, found a number"]
        );
        assert_eq!(
            messages("sla { ttft p99 \"500ms\" }"),
            ["`ttft` needs a comparison and a threshold"]
        );
    }

    #[test]
    fn every_mistake_is_reported_not_only_the_first() {
        let errors = parse_plan(
            "t.kdl",
            "target \"sim\" { frob 1 }\nworkload { input 0; output 8 }\nphase \"a\" { rate -1; duration \"1s\" }\nphase \"b\" { rate 1; concurrency 2; duration \"1s\" }\nphase \"c\" { duration \"1s\" }\n".into(),
        )
        .unwrap_err();
        let text: Vec<_> = errors
            .diagnostics
            .iter()
            .map(|d| d.message.as_str())
            .collect();
        assert_eq!(text.len(), 5, "{text:?}");
        assert!(text.contains(&"unknown node `frob` in `target`"));
        assert!(text.contains(&"0 is out of range: it must be at least 1"));
        assert!(text.contains(&"-1 is out of range: it must be greater than zero"));
        assert!(text.contains(&"phase \"b\" has more than one load model"));
        assert!(text.contains(&"phase \"c\" has no load model"));
        assert!(errors.diagnostics.iter().all(|d| d.help.is_some()));
    }

    #[test]
    fn phase_rules() {
        assert_eq!(
            messages("phase \"r\" { rate from=1 to=5 ; requests 10 }"),
            ["a ramp needs a `duration` to ramp over"]
        );
        assert_eq!(
            messages("phase \"n\" { rate 1 }"),
            ["phase \"n\" never ends"]
        );
        assert_eq!(
            messages("phase \"b\" { at-once 4; duration \"1s\" }"),
            ["an at-once phase has no duration or request limit"]
        );
        assert_eq!(
            messages("phase \"g\" { rate 1; arrivals \"gamma\"; duration \"1s\" }"),
            ["gamma arrivals need cv="]
        );
        assert_eq!(
            messages("phase \"g\" { concurrency 1; arrivals \"poisson\"; duration \"1s\" }"),
            ["`arrivals` applies only to open-loop phases"]
        );
        assert_eq!(
            messages("phase \"steady\" { rate 1; duration \"1s\" }"),
            ["phase \"steady\" is defined twice"]
        );
        assert_eq!(
            messages("phase \"x\" { rate 0; duration \"1s\" }"),
            ["0 is out of range: it must be greater than zero"]
        );
        let plan =
            parse("phase \"g\" { rate 3; arrivals \"gamma\" cv=2.5; duration \"1s\" }").unwrap();
        assert_eq!(
            plan.phases[2].load,
            Load::Rate {
                rate: RateShape::Constant(3.0),
                arrivals: Arrivals::Gamma { cv: 2.5 }
            }
        );
    }

    #[test]
    fn target_and_workload_rules() {
        let bad = |text: &str| {
            parse_plan("t.kdl", text.to_string())
                .unwrap_err()
                .diagnostics
                .iter()
                .map(|d| d.message.clone())
                .collect::<Vec<_>>()
        };
        let phases = "phase \"a\" { rate 1; duration \"1s\" }";
        assert_eq!(
            bad(&format!("target \"http://h:1\" {{ api-key \"sk-123\" ; model \"m\" }}\nworkload {{ input 1; output 1 }}\n{phases}")),
            ["an API key is never written in a plan"]
        );
        assert_eq!(
            bad(&format!(
                "target \"http://h:1\"\nworkload {{ input 1; output 1 }}\n{phases}"
            )),
            ["the target has no `model`"]
        );
        assert_eq!(
            bad(&format!(
                "target \"ftp://h\" {{ model \"m\" }}\nworkload {{ input 1; output 1 }}\n{phases}"
            )),
            ["\"ftp://h\" is not an http:// or https:// URL"]
        );
        assert_eq!(
            bad(&format!(
                "target \"sim\" {{ stream \"yes\" }}\nworkload {{ input 1; output 1 }}\n{phases}"
            )),
            ["expected #true or #false, found a string"]
        );
        assert_eq!(
            bad(&format!("target \"sim\"\nworkload {{ input 1 }}\n{phases}")),
            ["the workload has no `output`"]
        );
        assert_eq!(
            bad(&format!(
                "target \"sim\"\nworkload {{ tokenizer \"gpt9\"; input 1; output 1 }}\n{phases}"
            )),
            ["unknown tokenizer \"gpt9\""]
        );
        assert_eq!(
            bad(&format!(
                "target \"sim\"\nworkload {{ input 1; output 1 weight=2 }}\n{phases}"
            )),
            ["unknown property `weight` on `output`"]
        );
        assert_eq!(
            bad("workload { input 1; output 1 }"),
            ["the plan has no `target`", "the plan has no `phase`"]
        );
    }

    #[test]
    fn simulator_profiles_engines_and_faults() {
        let plan = parse("sim { profile \"tiny\"; engine { max-seqs 8; step-base \"2ms\" }; faults { http-5xx \"2%\"; stall \"1s\" at-token=4 rate=\"10%\" } }").unwrap();
        let engine = plan.sim.engine.unwrap();
        assert_eq!(engine.max_seqs, 8);
        assert_eq!(engine.step_base, Duration::from_millis(2));
        assert_eq!(
            engine.kv_cache_tokens,
            profiles::builtin("tiny").unwrap().kv_cache_tokens
        );
        assert_eq!(plan.sim.faults.http_5xx, 0.02);
        assert_eq!(
            plan.sim.faults.stall,
            Some(Stall {
                duration: Duration::from_secs(1),
                at_token: 4,
                rate: 0.1
            })
        );
        assert_eq!(
            messages("sim { profile \"h200-magic\" }"),
            ["no built-in profile is named \"h200-magic\""]
        );
        assert_eq!(
            messages("sim { engine { warp-drive 9 } }"),
            ["unknown node `warp-drive` in `engine`"]
        );
        assert_eq!(
            messages("sim { engine { queue-full-status 500 } }"),
            ["a full queue answers 429 or 503"]
        );
        assert_eq!(
            messages("sim { faults { http-5xx 0.5 } }"),
            ["expected a percentage string, found a number"]
        );
        assert_eq!(
            messages("sim { engine { max-seqs 64; max-batched-tokens 32 } }"),
            ["max-batched-tokens is below max-seqs: running sequences could not all decode in one step"]
        );
        let profile =
            parse_sim_profile("p.kdl", "sim { profile \"qwen2.5-7b-l4\" }".into()).unwrap();
        assert_eq!(profile.engine.unwrap().max_seqs, 128);
        assert!(parse_sim_profile("p.kdl", "target \"sim\"".into()).is_err());
    }

    #[test]
    fn kdl_syntax_errors_are_diagnostics_too() {
        let errors = parse_plan("t.kdl", "target \"sim\" {\n timeout 60s\n}\n".into()).unwrap_err();
        assert!(!errors.diagnostics.is_empty());
        assert!(errors.render().contains("t.kdl"));
    }

    #[test]
    fn absurd_values_are_diagnostics_at_the_value() {
        let cases = [
            (
                "target \"sim\" { timeout \"99999999999999999999h\" }",
                "longest duration allowed",
            ),
            (
                "target \"sim\" { timeout (h)1e300 }",
                "longest duration allowed",
            ),
            ("target \"sim\" { timeout (s)-1 }", "is not a duration"),
            (
                "phase \"x\" { at-once 4000000000 }",
                "it must be at most 100000",
            ),
            (
                "phase \"x\" { concurrency 100001; duration \"1s\" }",
                "it must be at most 100000",
            ),
            (
                "phase \"x\" { rate 1e-300; duration \"1s\" }",
                "fewer than one",
            ),
            (
                "phase \"x\" { rate 1e-300; requests 5 }",
                "longer than the longest phase",
            ),
            (
                "phase \"x\" { rate 2e6; duration \"1s\" }",
                "it must be at most 1000000",
            ),
            (
                "phase \"x\" { rate 1e9; duration \"1h\" }",
                "it must be at most 1000000",
            ),
            (
                "phase \"x\" { rate 1000; duration \"10h\" }",
                "more than a plan may",
            ),
            (
                "phase \"x\" { rate 5; arrivals \"gamma\" cv=1e308; duration \"1s\" }",
                "at most 10",
            ),
            (
                "phase \"x\" { rate 5; arrivals \"gamma\" cv=0.001; duration \"1s\" }",
                "from 0.01 to 10",
            ),
            (
                "phase \"x\" { requests 30000000; concurrency 1 }",
                "at most 20000000",
            ),
            (
                "phase \"x\" { rate 5; duration \"31d\" }",
                "longest duration allowed",
            ),
            (
                "workload { input 999999999; output 1 }",
                "it must be at most 4194304",
            ),
            (
                "sim { engine { max-seqs 99999999999 } }",
                "it must be at most 100000",
            ),
        ];
        for (extra, expected) in cases {
            let text = if extra.starts_with("target") {
                format!("{extra}\nworkload {{ input 1; output 1 }}\nphase \"p\" {{ rate 1; duration \"1s\" }}")
            } else if extra.starts_with("workload") {
                format!("target \"sim\"\n{extra}\nphase \"p\" {{ rate 1; duration \"1s\" }}")
            } else {
                format!("{BASE}{extra}")
            };
            let errors = parse_plan("t.kdl", text.clone()).unwrap_err();
            let messages: Vec<_> = errors
                .diagnostics
                .iter()
                .map(|d| d.message.as_str())
                .collect();
            assert!(
                messages.iter().any(|m| m.contains(expected)),
                "{extra}: {messages:?}"
            );
            // Every diagnostic points into the plan, never at the whole file.
            assert!(
                errors.diagnostics.iter().all(|d| d.span.offset() > 0),
                "{extra}"
            );
        }
    }

    #[test]
    fn plans_too_large_or_too_deep_are_refused_before_parsing() {
        let deep = format!("{BASE}{}{}", "a {".repeat(5000), "}".repeat(5000));
        let errors = parse_plan("t.kdl", deep).unwrap_err();
        assert_eq!(errors.diagnostics.len(), 1);
        assert!(errors.diagnostics[0]
            .message
            .contains("nest deeper than 32"));
        let large = format!("{BASE}// {}\n", "x".repeat(limits::MAX_PLAN_BYTES as usize));
        let errors = parse_plan("t.kdl", large).unwrap_err();
        assert!(errors.diagnostics[0]
            .message
            .contains("more than the largest plan"));
        let many: String = (0..1001)
            .map(|i| format!("phase \"p{i}\" {{ rate 1; duration \"1s\" }}\n"))
            .collect();
        let errors = parse_plan(
            "t.kdl",
            format!("target \"sim\"\nworkload {{ input 1; output 1 }}\n{many}"),
        )
        .unwrap_err();
        assert!(errors.diagnostics[0]
            .message
            .contains("more than 1000 phases"));
    }

    #[test]
    fn new_users_mistakes_get_the_hint_they_need() {
        // A duration without quotes is a KDL syntax error: say durations are strings.
        let errors = parse("phase \"d\" { rate 1; duration 2m }").unwrap_err();
        let help = errors.diagnostics[0].help.clone().unwrap_or_default();
        assert!(help.contains("write \"2m\""), "{help}");
        let errors = parse("sla { error-rate < 1% }").unwrap_err();
        let help = errors.diagnostics[0].help.clone().unwrap_or_default();
        assert!(help.contains("write \"1%\""), "{help}");
        // A statistic left out.
        assert_eq!(
            messages("sla { itl < \"50ms\" }"),
            ["`itl` needs a statistic before the comparison"]
        );
        assert_eq!(
            messages("sla { ttft <= \"50ms\" }"),
            ["`ttft` needs a statistic"]
        );
        // A duplicate name is found whatever else is wrong with the phase.
        let found = messages("phase \"steady\" { rate -1; duration \"1s\" }");
        assert!(
            found.contains(&"phase \"steady\" is defined twice".to_string()),
            "{found:?}"
        );
        assert!(
            found.iter().any(|m| m.contains("out of range")),
            "{found:?}"
        );
    }

    #[test]
    fn a_syntax_error_does_not_hide_the_mistakes_in_the_rest_of_the_plan() {
        let text = "target \"sim\" { frob 1 }\nworkload { input 1; output 1 }\nphase \"a\" { rate 1; duration 5s }\nphase \"b\" { rate 0; duration \"1s\" }\nsla { ttft p99 < \"1s\" phase=\"a\"; e2e p99 < \"1s\" phase=\"zzz\" }\n";
        let errors = parse_plan("t.kdl", text.into()).unwrap_err();
        let found: Vec<_> = errors
            .diagnostics
            .iter()
            .map(|d| d.message.clone())
            .collect();
        assert!(
            found.iter().any(|m| m.contains("unknown node `frob`")),
            "{found:?}"
        );
        assert!(
            found.iter().any(|m| m.contains("0 is out of range")),
            "{found:?}"
        );
        assert!(
            found
                .iter()
                .any(|m| m.contains("no phase is named \"zzz\"")),
            "{found:?}"
        );
        // Phase "a" could not be read, but it exists: naming it is not a mistake.
        assert!(!found.iter().any(|m| m.contains("\"a\"")), "{found:?}");
        assert!(
            !found.iter().any(|m| m.contains("has no `phase`")),
            "{found:?}"
        );
        // Diagnostics stay in file order, the syntax error among them.
        let offsets: Vec<_> = errors.diagnostics.iter().map(|d| d.span.offset()).collect();
        assert!(offsets.windows(2).all(|w| w[0] <= w[1]), "{offsets:?}");
        // A broken target block is not "missing".
        let errors = parse_plan("t.kdl", "target \"sim\" { timeout 60s }\nworkload { input 1; output 1 }\nphase \"a\" { rate 1; duration \"1s\" }\n".into()).unwrap_err();
        assert!(
            !errors.render().contains("has no `target`"),
            "{}",
            errors.render()
        );
    }
}
