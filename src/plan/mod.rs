//! The plan stage: a KDL benchmark plan in, a typed and validated [`Plan`] out.
//!
//! This module owns the plan language: what each node means, its defaults, and the diagnostics a
//! user sees when a plan is wrong. It does not decide *when* requests are sent (that is
//! [`crate::planner`]) and it never touches the network.
//!
//! Every mistake found is reported, not only the first: [`load`] returns all diagnostics so that
//! `llmload check` can print them together.

mod diagnostic;
mod parse;
pub mod units;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

pub use diagnostic::{PlanDiagnostic, PlanErrors};
pub use parse::parse_plan;

/// A whole benchmark plan, validated.
#[derive(Debug, Clone)]
pub struct Plan {
    pub name: String,
    pub description: Option<String>,
    pub seed: u64,
    pub target: Target,
    pub workload: Workload,
    pub phases: Vec<Phase>,
    pub sla: Vec<Assertion>,
    /// Settings of the embedded simulator, used when the target is `"sim"`.
    pub sim: SimSettings,
    /// The plan's file name and text, kept for diagnostics and for the report's provenance.
    pub source: PlanSource,
}

#[derive(Debug, Clone)]
pub struct PlanSource {
    pub file_name: String,
    pub text: Arc<String>,
}

/// Where requests go and how they are spoken.
#[derive(Debug, Clone)]
pub struct Target {
    pub endpoint: Endpoint,
    pub api: Api,
    pub model: String,
    /// Name of the environment variable that holds the API key. The key itself never enters the plan.
    pub api_key_env: Option<String>,
    pub stream: bool,
    pub timeout: Duration,
    /// Ask the server for usage on every streamed chunk (vLLM's `continuous_usage_stats`), which
    /// gives exact tokens per chunk.
    pub continuous_usage: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// An OpenAI-compatible server at this base URL.
    Url(String),
    /// The embedded simulator, started in-process on a loopback port.
    Simulator,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Api {
    Chat,
    Completions,
}

impl Api {
    pub fn path(self) -> &'static str {
        match self {
            Api::Chat => "/chat/completions",
            Api::Completions => "/completions",
        }
    }
    pub fn as_str(self) -> &'static str {
        match self {
            Api::Chat => "chat",
            Api::Completions => "completions",
        }
    }
}

/// What each request asks for.
#[derive(Debug, Clone)]
pub struct Workload {
    pub tokenizer: TokenizerSpec,
    /// Input-length buckets, sampled by weight. A fixed length is one bucket.
    pub buckets: Vec<Bucket>,
    pub output_tokens: u32,
    /// Ask the server for exactly the output length (`ignore_eos` and `min_tokens`).
    pub ignore_eos: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
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
pub struct Bucket {
    pub input_tokens: u32,
    pub weight: f64,
    /// Output length for requests of this bucket; the workload's `output` when absent.
    pub output_tokens: Option<u32>,
}

/// One phase of the run. Phases run in order.
#[derive(Debug, Clone)]
pub struct Phase {
    pub name: String,
    pub load: Load,
    pub duration: Option<Duration>,
    pub max_requests: Option<u64>,
    /// `record #false` keeps a phase (a warmup) out of metrics and verdicts.
    pub record: bool,
}

/// The load model of a phase: exactly one per phase.
#[derive(Debug, Clone, PartialEq)]
pub enum Load {
    /// Closed loop: this many workers, each sending its next request when the previous finishes.
    Concurrency(u32),
    /// Open loop: requests arrive on a schedule, whatever the server does.
    Rate { rate: RateShape, arrivals: Arrivals },
    /// A burst: this many requests released together.
    AtOnce(u32),
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RateShape {
    /// Requests per second, constant over the phase.
    Constant(f64),
    /// Requests per second rising (or falling) linearly from `from` to `to` over the phase.
    Ramp { from: f64, to: f64 },
}

impl RateShape {
    /// The mean rate over the phase.
    pub fn mean(self) -> f64 {
        match self {
            RateShape::Constant(rate) => rate,
            RateShape::Ramp { from, to } => (from + to) / 2.0,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Arrivals {
    Poisson,
    Constant,
    /// Gamma-distributed inter-arrival times with this coefficient of variation (1 = Poisson,
    /// above 1 burstier, below 1 smoother).
    Gamma { cv: f64 },
}

impl std::fmt::Display for Arrivals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Arrivals::Poisson => f.write_str("poisson"),
            Arrivals::Constant => f.write_str("constant"),
            Arrivals::Gamma { cv } => write!(f, "gamma cv={cv}"),
        }
    }
}

/// One SLA assertion, such as `ttft p99 < "500ms" phase="steady"`.
#[derive(Debug, Clone, PartialEq)]
pub struct Assertion {
    pub metric: Metric,
    /// The statistic of a distribution metric; `None` for rates and throughputs.
    pub stat: Option<Stat>,
    pub op: Op,
    /// In the metric's unit: milliseconds for latencies, a fraction for rates, per second for throughputs.
    pub threshold: f64,
    /// The phase it applies to; all recorded phases together when `None`.
    pub phase: Option<String>,
    /// The assertion as a person reads it, e.g. `ttft p99 < 500ms`.
    pub text: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Metric {
    Ttft,
    Itl,
    Tpot,
    E2e,
    PrefillTps,
    DecodeTps,
    ErrorRate,
    TimeoutRate,
    RequestThroughput,
    OutputThroughput,
    TotalThroughput,
}

impl Metric {
    pub const ALL: [Metric; 11] = [
        Metric::Ttft,
        Metric::Itl,
        Metric::Tpot,
        Metric::E2e,
        Metric::PrefillTps,
        Metric::DecodeTps,
        Metric::ErrorRate,
        Metric::TimeoutRate,
        Metric::RequestThroughput,
        Metric::OutputThroughput,
        Metric::TotalThroughput,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Metric::Ttft => "ttft",
            Metric::Itl => "itl",
            Metric::Tpot => "tpot",
            Metric::E2e => "e2e",
            Metric::PrefillTps => "prefill-tps",
            Metric::DecodeTps => "decode-tps",
            Metric::ErrorRate => "error-rate",
            Metric::TimeoutRate => "timeout-rate",
            Metric::RequestThroughput => "request-throughput",
            Metric::OutputThroughput => "output-throughput",
            Metric::TotalThroughput => "total-throughput",
        }
    }

    pub fn from_name(name: &str) -> Option<Metric> {
        Metric::ALL.into_iter().find(|m| m.name() == name)
    }

    /// Whether the metric is a per-request distribution that takes a statistic (p99, mean...).
    pub fn is_distribution(self) -> bool {
        self.kind() != MetricKind::Fraction && self.kind() != MetricKind::Throughput
    }

    pub fn kind(self) -> MetricKind {
        match self {
            Metric::Ttft | Metric::Itl | Metric::Tpot | Metric::E2e => MetricKind::Latency,
            Metric::PrefillTps | Metric::DecodeTps => MetricKind::TokenRate,
            Metric::ErrorRate | Metric::TimeoutRate => MetricKind::Fraction,
            Metric::RequestThroughput | Metric::OutputThroughput | Metric::TotalThroughput => {
                MetricKind::Throughput
            }
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricKind {
    /// Milliseconds; thresholds are durations ("500ms").
    Latency,
    /// Tokens per second per request; thresholds are numbers.
    TokenRate,
    /// A fraction of requests; thresholds are percentages ("1%").
    Fraction,
    /// Per second over the phase's wall time; thresholds are numbers.
    Throughput,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Stat {
    Mean,
    Min,
    Max,
    /// A percentile in (0, 100].
    Percentile(f64),
}

impl Stat {
    pub fn parse(text: &str) -> Option<Stat> {
        match text {
            "mean" | "avg" => Some(Stat::Mean),
            "min" => Some(Stat::Min),
            "max" => Some(Stat::Max),
            "median" => Some(Stat::Percentile(50.0)),
            _ => {
                let digits = text.strip_prefix('p')?;
                // `p999` is the common spelling of p99.9; `p9999` of p99.99.
                let value: f64 = if !digits.contains('.') && digits.len() > 2 && digits.starts_with("99")
                {
                    format!("{}.{}", &digits[..2], &digits[2..]).parse().ok()?
                } else {
                    digits.parse().ok()?
                };
                (value > 0.0 && value <= 100.0 && value.is_finite()).then_some(Stat::Percentile(value))
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
pub enum Op {
    Lt,
    Le,
    Gt,
    Ge,
}

impl Op {
    pub fn symbol(self) -> &'static str {
        match self {
            Op::Lt => "<",
            Op::Le => "<=",
            Op::Gt => ">",
            Op::Ge => ">=",
        }
    }
    pub fn holds(self, observed: f64, threshold: f64) -> bool {
        match self {
            Op::Lt => observed < threshold,
            Op::Le => observed <= threshold,
            Op::Gt => observed > threshold,
            Op::Ge => observed >= threshold,
        }
    }
}

/// Timing model of the embedded simulator (target `"sim"`, or `llmload sim`).
#[derive(Debug, Clone, PartialEq)]
pub struct SimSettings {
    pub ttft: Duration,
    pub itl: Duration,
    /// Each delay is stretched by a uniform random amount in [0, jitter].
    pub jitter: Duration,
    pub tokens_per_chunk: u32,
    pub seed: u64,
}

impl Default for SimSettings {
    fn default() -> Self {
        SimSettings {
            ttft: Duration::from_millis(50),
            itl: Duration::from_millis(10),
            jitter: Duration::ZERO,
            tokens_per_chunk: 1,
            seed: 0,
        }
    }
}

/// Reads and validates a plan file. On failure, returns every diagnostic found.
pub fn load(path: &Path) -> Result<Plan, PlanErrors> {
    let file_name = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|err| {
        PlanErrors::io(format!("cannot read plan file {file_name}: {err}"))
    })?;
    parse_plan(&file_name, text)
}
