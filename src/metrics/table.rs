//! The metric table: every metric llmload measures or judges, each defined once.
//!
//! One [`MetricDef`] per [`Metric`] says everything about it: its keyword in plans, its label
//! and unit in reports, which way is better, how it is computed (from one request's record, or
//! from a scope's aggregates, or from the server's telemetry), which statistics it takes, and
//! what it may be used for (asserted in `sla`, compared with a baseline, watched by `abort`,
//! used to end a search's probe early). Every other stage reads this table instead of naming
//! metrics: the plan parser (names, thresholds, allowed statistics, examples in diagnostics),
//! the aggregator (which distributions to fill, from which requests), the verdict
//! ([`crate::metrics::PhaseMetrics::value`]), abort conditions, the search's early end, the
//! comparison's resampling, and the reports' metric rows.
//!
//! Adding a metric is one entry of the `metric_table!` list below (which declares both its
//! [`Metric`] variant and its [`METRICS`] entry, so the two cannot drift apart), plus the formula
//! it needs (a function of a [`RequestRecord`] for a per-request distribution) — nothing else. What this module is not: the streaming aggregator
//! ([`crate::metrics::Aggregator`]) or a renderer; it only says what each metric is.

use crate::records::{ChunkKind, ErrorClass, RequestRecord};
use crate::telemetry::Signal;

use super::PhaseMetrics;

/// What kind of value a metric is, which decides its unit and threshold syntax.
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
    /// A load (requests per second, or concurrent requests); thresholds are numbers.
    Capacity,
    /// A number of things (requests, preemptions); thresholds are numbers.
    Count,
    /// A number of tokens per request; thresholds are numbers.
    Tokens,
    /// Power, W; thresholds are quantities ("350W").
    Power,
    /// Energy, J; thresholds are quantities ("0.4J", "400mJ").
    Energy,
    /// Money, US dollars; thresholds are prices ("$0.50").
    Cost,
}

impl MetricKind {
    /// The unit's name in machine-readable outputs (summary.json, comparisons).
    pub fn unit(self) -> &'static str {
        match self {
            MetricKind::Latency => "ms",
            MetricKind::Fraction => "fraction",
            MetricKind::Throughput => "per_s",
            MetricKind::TokenRate => "tokens_per_s",
            MetricKind::Capacity => "load",
            MetricKind::Count => "count",
            MetricKind::Tokens => "tokens",
            MetricKind::Power => "W",
            MetricKind::Energy => "J",
            MetricKind::Cost => "usd",
        }
    }

    /// The unit as a person reads it beside a number (report.md's metric rows).
    pub fn short_unit(self) -> &'static str {
        match self {
            MetricKind::Latency => "ms",
            MetricKind::TokenRate => "tok/s",
            MetricKind::Throughput => "/s",
            MetricKind::Tokens => "tokens",
            MetricKind::Power => "W",
            MetricKind::Energy => "J",
            MetricKind::Cost => "$",
            MetricKind::Fraction | MetricKind::Capacity | MetricKind::Count => "",
        }
    }

    /// The unit in summary.csv's `unit` column.
    pub fn csv_unit(self) -> &'static str {
        match self {
            MetricKind::Latency => "ms",
            MetricKind::TokenRate => "tokens/s",
            MetricKind::Throughput => "per_s",
            MetricKind::Fraction => "fraction",
            MetricKind::Capacity => "load",
            MetricKind::Count => "count",
            MetricKind::Tokens => "tokens",
            MetricKind::Power => "W",
            MetricKind::Energy => "J",
            MetricKind::Cost => "usd",
        }
    }
}

/// Which way a metric gets better (written `lower` or `higher` in summary.json's measures).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Better {
    /// Latencies, error rates.
    Lower,
    /// Throughputs, token rates, capacity.
    Higher,
}

/// Which statistics an assertion on the metric names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stats {
    /// None: the metric is one number (a rate, a throughput, a counter's increase).
    None,
    /// Any: mean, min, max, a percentile (a per-request distribution).
    Any,
    /// A gauge sampled now and then: its mean or its largest value.
    Gauge,
    /// A server histogram: percentiles, mean and max (its buckets have no minimum).
    Histogram,
}

/// Which requests feed a per-request distribution.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Population {
    /// Every request sent, whatever became of it (cancelled ones included).
    Every,
    /// Every request of an open-loop phase (closed loops have no intended send time).
    OpenLoop,
    /// Requests that completed, successfully or not (not cancelled, not the client's own
    /// failures).
    Completed,
    /// Successful requests only.
    Succeeded,
}

impl Population {
    /// Whether `record`, of a phase that is `open_loop` or not, belongs.
    pub fn includes(self, record: &RequestRecord, open_loop: bool) -> bool {
        match self {
            Population::Every => true,
            Population::OpenLoop => open_loop,
            Population::Completed => record.completed(),
            Population::Succeeded => record.ok(),
        }
    }
}

/// What one request gives a distribution.
#[derive(Clone, Copy)]
pub enum Sample {
    /// One value, or none.
    One(fn(&RequestRecord) -> Option<f64>),
    /// Several values with weights: the gaps between consecutive chunks (a chunk of k tokens
    /// is k samples of gap/k) of the given kind.
    Gaps(Gaps),
}

/// Which gaps between chunks an ITL takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gaps {
    /// Every gap, pooled.
    All,
    /// Between two reasoning chunks.
    Reasoning,
    /// Between two chunks of output proper (answer text or tool calls).
    Output,
}

/// How a metric's value is obtained.
#[derive(Clone, Copy)]
pub enum Source {
    /// A distribution over requests, kept as an HDR histogram per scope; reports name its
    /// summary `key` (`ttft_ms`).
    Distribution {
        /// Its key in summaries (summary.json's `metrics`, templates' `scope.metrics[key]`).
        key: &'static str,
        /// Which requests it takes values from.
        population: Population,
        /// The value(s) one request gives.
        sample: Sample,
    },
    /// A share of completed requests: of those `among` takes, those for which
    /// `counts(record, good)` holds, where `good` says the request met the plan's `slo`.
    Share {
        /// Whether a completed request is in the share's denominator.
        among: fn(&RequestRecord) -> bool,
        /// Whether a completed request counts.
        counts: fn(&RequestRecord, bool) -> bool,
        /// The scope's value, as the aggregates hold it.
        read: fn(&PhaseMetrics) -> Option<f64>,
    },
    /// Per second of a scope's wall time: each completed request adds `amount(record, good)`.
    PerSecond {
        /// What it counts per second, as summary.csv's unit says it (`requests/s`).
        unit: &'static str,
        /// What one completed request adds.
        amount: fn(&RequestRecord, bool) -> f64,
        /// The scope's value, as the aggregates hold it.
        read: fn(&PhaseMetrics) -> Option<f64>,
    },
    /// Computed from a scope's aggregates alone.
    Aggregate(fn(&PhaseMetrics) -> Option<f64>),
    /// A distribution over agent sessions (a `sessions` phase's), kept as an HDR histogram per
    /// scope like a request's; reports name its summary `key`.
    Sessions {
        /// Its key in summaries.
        key: &'static str,
        /// The value one judged session gives.
        sample: fn(&super::sessions::SessionOutcome) -> Option<f64>,
    },
    /// What the server says of itself: one signal of its telemetry.
    Server(Signal),
    /// What a capacity search found (judged from the search's bracket, not a scope).
    Search,
}

/// What a metric needs from the plan before a line may name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Needs {
    /// Nothing.
    Nothing,
    /// Streamed answers (a first token, the gaps between tokens): an API that generates, with
    /// `stream #true`.
    Streaming,
    /// Generated tokens: an API that generates (not embeddings or rerank).
    Generation,
    /// Batches of inputs: an API that embeds or ranks.
    Batch,
    /// An `slo` (what a good request is).
    Slo,
    /// A `search` (what finds a capacity).
    Search,
    /// A `sessions` phase (agent sessions to judge).
    Sessions,
    /// A `cost` (what the deployment costs an hour), and an `slo` where `slo` says so.
    Cost {
        /// It also needs an `slo` (a price of goodput).
        slo: bool,
    },
}

/// What a metric may be used for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Uses {
    /// Named in `sla` (and as a sweep's or search's objective).
    pub assert: bool,
    /// Named in `regression`: compared with a baseline run.
    pub compare: bool,
    /// Named in `abort`: watched while the run goes.
    pub abort: bool,
    /// Counted request by request while a probe runs, so that a probe that has already failed
    /// (too many requests past the threshold) ends early.
    pub early_end: bool,
}

const JUDGED: Uses = Uses {
    assert: true,
    compare: true,
    abort: false,
    early_end: false,
};
const WATCHED: Uses = Uses {
    assert: true,
    compare: true,
    abort: true,
    early_end: true,
};
const SERVER: Uses = Uses {
    assert: true,
    compare: false,
    abort: false,
    early_end: false,
};
/// Judged at the end, from the sessions' lines: not request by request (no abort, no early
/// end); a comparison resamples them session by session.
const SESSIONS: Uses = Uses {
    assert: true,
    compare: true,
    abort: false,
    early_end: false,
};
const REPORTED: Uses = Uses {
    assert: false,
    compare: false,
    abort: false,
    early_end: false,
};

/// Everything about one metric.
pub struct MetricDef {
    /// The metric it defines.
    pub metric: Metric,
    /// Its keyword in plans and machine-readable outputs (`ttft`).
    pub name: &'static str,
    /// Its label in reports (`TTFT`).
    pub label: &'static str,
    /// One line saying what it is (for `llmload plan`, docs and help).
    pub doc: &'static str,
    /// Its kind: unit and threshold syntax.
    pub kind: MetricKind,
    /// Which way is better.
    pub better: Better,
    /// Which statistics a line names.
    pub stats: Stats,
    /// How its value is obtained.
    pub source: Source,
    /// What a plan must have for a line to name it.
    pub needs: Needs,
    /// What it may be used for.
    pub uses: Uses,
    /// An example line after its name (diagnostics' "write it as").
    pub example: &'static str,
    /// Reports show it only where this other metric has values (TTFO beside TTFT only when
    /// requests reasoned: without reasoning the two are the same); `None`: wherever it has any.
    pub report_with: Option<Metric>,
    /// What a scope without a value of it lacks, as a verdict says it (the server's telemetry
    /// is said for every server metric); `None`: "no data".
    pub absent: Option<&'static str>,
}

/// What an entry of the table leaves out: shown wherever it has values.
const UNSET: MetricDef = MetricDef {
    metric: Metric::Ttft,
    name: "",
    label: "",
    doc: "",
    kind: MetricKind::Count,
    better: Better::Lower,
    stats: Stats::None,
    source: Source::Search,
    needs: Needs::Nothing,
    uses: REPORTED,
    example: "",
    report_with: None,
    absent: None,
};

/// Declares [`Metric`] and [`METRICS`] from one list, so that a metric's identity and its
/// definition cannot drift apart: each entry is a variant's doc, its name, and its [`MetricDef`]
/// fields (all but `metric`, which the macro fills).
macro_rules! metric_table {
    ($( $(#[$doc:meta])* $variant:ident { $($field:ident : $value:expr),* $(,)? } ),* $(,)?) => {
        /// A metric, by identity. Everything about it is in its [`MetricDef`] ([`Metric::def`]).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Metric {
            $( $(#[$doc])* $variant, )*
        }

        /// Every metric, in the order reports list them (and the order of [`Metric`]'s
        /// variants).
        // Entries that set every optional field leave nothing to `UNSET`.
        #[allow(clippy::needless_update)]
        pub static METRICS: &[MetricDef] = TABLE;

        /// [`METRICS`], for what is decided when llmload is compiled ([`DistMetric::of`]).
        #[allow(clippy::needless_update)]
        const TABLE: &[MetricDef] = &[
            $( MetricDef { metric: Metric::$variant, $($field: $value,)* ..UNSET }, )*
        ];
    };
}

metric_table! {
    /// Time to first token.
    Ttft {
        name: "ttft",
        label: "TTFT",
        doc: "time to first token: send to the first chunk carrying a generated token",
        kind: MetricKind::Latency,
        better: Better::Lower,
        stats: Stats::Any,
        source: Source::Distribution {
            key: "ttft_ms",
            // A request that failed after its first token still had a time to first token.
            population: Population::Completed,
            sample: Sample::One(ttft_ms),
        },
        needs: Needs::Streaming,
        uses: WATCHED,
        example: "p99 < \"500ms\" phase=\"steady\"",
    },
    /// Time to the first answer token: after a reasoning model's thinking.
    Ttfo {
        name: "ttfo",
        label: "TTFO",
        doc: "time to first output token: send to the first chunk of the answer (after any reasoning; TTFT without reasoning)",
        kind: MetricKind::Latency,
        better: Better::Lower,
        stats: Stats::Any,
        source: Source::Distribution {
            key: "ttfo_ms",
            population: Population::Completed,
            sample: Sample::One(ttfo_ms),
        },
        needs: Needs::Streaming,
        uses: WATCHED,
        example: "p99 < \"2s\" phase=\"steady\"",
        report_with: Some(Metric::ReasoningTokens),
    },
    /// Inter-token latency, every gap pooled.
    Itl {
        name: "itl",
        label: "ITL",
        doc: "inter-token latency: every gap between chunks, pooled (a chunk of k tokens is k gaps of gap/k)",
        kind: MetricKind::Latency,
        better: Better::Lower,
        stats: Stats::Any,
        source: Source::Distribution {
            key: "itl_ms",
            population: Population::Succeeded,
            sample: Sample::Gaps(Gaps::All),
        },
        needs: Needs::Streaming,
        uses: JUDGED,
        example: "p99 < \"500ms\" phase=\"steady\"",
    },
    /// Inter-token latency between reasoning chunks.
    ItlReasoning {
        name: "itl-reasoning",
        label: "ITL reasoning",
        doc: "inter-token latency between consecutive reasoning chunks, pooled",
        kind: MetricKind::Latency,
        better: Better::Lower,
        stats: Stats::Any,
        source: Source::Distribution {
            key: "itl_reasoning_ms",
            population: Population::Succeeded,
            sample: Sample::Gaps(Gaps::Reasoning),
        },
        needs: Needs::Streaming,
        uses: JUDGED,
        example: "p99 < \"100ms\" phase=\"steady\"",
    },
    /// Inter-token latency between answer chunks.
    ItlAnswer {
        name: "itl-answer",
        label: "ITL answer",
        doc: "inter-token latency between consecutive chunks of the answer or its tool calls, pooled (ITL without reasoning)",
        kind: MetricKind::Latency,
        better: Better::Lower,
        stats: Stats::Any,
        source: Source::Distribution {
            key: "itl_answer_ms",
            population: Population::Succeeded,
            sample: Sample::Gaps(Gaps::Output),
        },
        needs: Needs::Streaming,
        uses: JUDGED,
        example: "p99 < \"100ms\" phase=\"steady\"",
        report_with: Some(Metric::ReasoningTokens),
    },
    /// Time per output token, per request.
    Tpot {
        name: "tpot",
        label: "TPOT",
        doc: "time per output token of a request: (e2e − ttft) / (output tokens − 1)",
        kind: MetricKind::Latency,
        better: Better::Lower,
        stats: Stats::Any,
        source: Source::Distribution {
            key: "tpot_ms",
            population: Population::Succeeded,
            sample: Sample::One(tpot_ms),
        },
        needs: Needs::Streaming,
        uses: WATCHED,
        example: "p99 < \"500ms\" phase=\"steady\"",
    },
    /// End-to-end latency.
    E2e {
        name: "e2e",
        label: "E2E",
        doc: "end-to-end latency: send to the last byte of the answer",
        kind: MetricKind::Latency,
        better: Better::Lower,
        stats: Stats::Any,
        source: Source::Distribution {
            key: "e2e_ms",
            population: Population::Succeeded,
            sample: Sample::One(e2e_ms),
        },
        needs: Needs::Nothing,
        uses: WATCHED,
        example: "p99 < \"500ms\" phase=\"steady\"",
    },
    /// End-to-end latency per input of a batch request (embeddings, rerank).
    E2ePerInput {
        name: "e2e-per-input",
        label: "E2E per input",
        doc: "end-to-end latency divided by the inputs a request carried (embeddings, ranked documents), per batch request",
        kind: MetricKind::Latency,
        better: Better::Lower,
        stats: Stats::Any,
        source: Source::Distribution {
            key: "e2e_per_input_ms",
            population: Population::Succeeded,
            sample: Sample::One(e2e_per_input_ms),
        },
        needs: Needs::Batch,
        uses: WATCHED,
        example: "p99 < \"20ms\" phase=\"steady\"",
    },
    /// How long a reasoning model thought: first to last reasoning chunk.
    ReasoningTime {
        name: "reasoning-time",
        label: "Reasoning time",
        doc: "from the first reasoning chunk to the last, per request that reasoned",
        kind: MetricKind::Latency,
        better: Better::Lower,
        stats: Stats::Any,
        source: Source::Distribution {
            key: "reasoning_time_ms",
            population: Population::Succeeded,
            sample: Sample::One(reasoning_time_ms),
        },
        needs: Needs::Streaming,
        uses: JUDGED,
        example: "p99 < \"5s\" phase=\"steady\"",
    },
    /// Output tokens spent reasoning, per request that reasoned.
    ReasoningTokens {
        name: "reasoning-tokens",
        label: "Reasoning",
        doc: "output tokens spent reasoning, per request that reasoned (the server's usage, else the reasoning chunks counted)",
        kind: MetricKind::Tokens,
        better: Better::Lower,
        stats: Stats::Any,
        source: Source::Distribution {
            key: "reasoning_tokens",
            population: Population::Succeeded,
            sample: Sample::One(reasoning_tokens),
        },
        needs: Needs::Generation,
        uses: JUDGED,
        example: "mean < 2000",
    },
    /// Output tokens of the answer itself, per request.
    AnswerTokens {
        name: "answer-tokens",
        label: "Answer",
        doc: "output tokens of the answer itself (output tokens less reasoning tokens), per request",
        kind: MetricKind::Tokens,
        better: Better::Higher,
        stats: Stats::Any,
        source: Source::Distribution {
            key: "answer_tokens",
            population: Population::Succeeded,
            sample: Sample::One(answer_tokens),
        },
        needs: Needs::Generation,
        uses: JUDGED,
        example: "p50 > 100",
        report_with: Some(Metric::ReasoningTokens),
    },
    /// Time to the first token of a tool call.
    ToolCallTtft {
        name: "tool-call-ttft",
        label: "Tool-call TTFT",
        doc: "send to the first chunk of a tool call, per answer that called a tool",
        kind: MetricKind::Latency,
        better: Better::Lower,
        stats: Stats::Any,
        source: Source::Distribution {
            key: "tool_call_ttft_ms",
            population: Population::Completed,
            sample: Sample::One(tool_call_ttft_ms),
        },
        needs: Needs::Streaming,
        uses: JUDGED,
        example: "p99 < \"1s\" phase=\"steady\"",
    },
    /// Tool calls per answer that called one.
    ToolCalls {
        name: "tool-calls",
        label: "Tool calls",
        doc: "tool calls per answer that made any",
        kind: MetricKind::Count,
        better: Better::Higher,
        stats: Stats::Any,
        source: Source::Distribution {
            key: "tool_calls",
            population: Population::Succeeded,
            sample: Sample::One(tool_calls),
        },
        needs: Needs::Generation,
        uses: JUDGED,
        example: "mean > 0.9",
    },
    /// Prompt tokens per second of TTFT, per request.
    PrefillTps {
        name: "prefill-tps",
        label: "Prefill",
        doc: "prompt tokens per second of TTFT, per request",
        kind: MetricKind::TokenRate,
        better: Better::Higher,
        stats: Stats::Any,
        source: Source::Distribution {
            key: "prefill_tps",
            population: Population::Succeeded,
            sample: Sample::One(prefill_tps),
        },
        needs: Needs::Streaming,
        uses: JUDGED,
        example: "p50 > 100",
    },
    /// Decode tokens per second, per request.
    DecodeTps {
        name: "decode-tps",
        label: "Decode",
        doc: "tokens after the first per second from the first chunk to the last, per request",
        kind: MetricKind::TokenRate,
        better: Better::Higher,
        stats: Stats::Any,
        source: Source::Distribution {
            key: "decode_tps",
            population: Population::Succeeded,
            sample: Sample::One(decode_tps),
        },
        needs: Needs::Streaming,
        uses: JUDGED,
        example: "p50 > 100",
    },
    /// Failed / completed requests (the throttled apart).
    ErrorRate {
        name: "error-rate",
        label: "Error rate",
        doc: "failed / completed requests, the throttled apart (`throttled-rate`)",
        kind: MetricKind::Fraction,
        better: Better::Lower,
        stats: Stats::None,
        source: Source::Share {
            among: every,
            counts: |record, _| record.error.is_some_and(|class| !class.throttled()),
            read: |m| m.completed().then_some(m.rates.error_rate),
        },
        needs: Needs::Nothing,
        uses: WATCHED,
        example: "< \"1%\"",
    },
    /// Throttled / completed requests.
    ThrottledRate {
        name: "throttled-rate",
        label: "Throttled rate",
        doc: "completed requests the server throttled (HTTP 429 or 529, a rate-limit or \
              overloaded error) / completed requests",
        kind: MetricKind::Fraction,
        better: Better::Lower,
        stats: Stats::None,
        source: Source::Share {
            among: every,
            counts: |record, _| record.error.is_some_and(ErrorClass::throttled),
            read: |m| m.completed().then_some(m.rates.throttled_rate),
        },
        needs: Needs::Nothing,
        uses: WATCHED,
        example: "< \"5%\"",
    },
    /// Timed-out / completed requests.
    TimeoutRate {
        name: "timeout-rate",
        label: "Timeout rate",
        doc: "timed-out / completed requests",
        kind: MetricKind::Fraction,
        better: Better::Lower,
        stats: Stats::None,
        source: Source::Share {
            among: every,
            counts: |record, _| record.error == Some(ErrorClass::Timeout),
            read: |m| m.completed().then_some(m.rates.timeout_rate),
        },
        needs: Needs::Nothing,
        uses: WATCHED,
        example: "< \"1%\"",
    },
    /// Successful requests per second of wall time.
    RequestThroughput {
        name: "request-throughput",
        label: "Request throughput",
        doc: "successful requests per second of wall time",
        kind: MetricKind::Throughput,
        better: Better::Higher,
        stats: Stats::None,
        source: Source::PerSecond {
            unit: "requests/s",
            amount: |record, _| if record.ok() { 1.0 } else { 0.0 },
            read: |m| Some(m.throughput.requests_per_s),
        },
        needs: Needs::Nothing,
        uses: JUDGED,
        example: "> 10",
    },
    /// Output tokens per second of wall time.
    OutputThroughput {
        name: "output-throughput",
        label: "Output throughput",
        doc: "output tokens of successful requests per second of wall time",
        kind: MetricKind::Throughput,
        better: Better::Higher,
        stats: Stats::None,
        source: Source::PerSecond {
            unit: "tokens/s",
            amount: |record, _| {
                if record.ok() {
                    output_tokens(record) as f64
                } else {
                    0.0
                }
            },
            read: |m| Some(m.throughput.output_tokens_per_s),
        },
        needs: Needs::Generation,
        uses: JUDGED,
        example: "> 10",
    },
    /// Input and output tokens per second of wall time.
    TotalThroughput {
        name: "total-throughput",
        label: "Total throughput",
        doc: "input and output tokens of successful requests per second of wall time",
        kind: MetricKind::Throughput,
        better: Better::Higher,
        stats: Stats::None,
        source: Source::PerSecond {
            unit: "tokens/s",
            amount: |record, _| {
                if record.ok() {
                    // A records file is input: a hostile count saturates, never overflows.
                    output_tokens(record).saturating_add(prompt_tokens(record)) as f64
                } else {
                    0.0
                }
            },
            read: |m| Some(m.throughput.total_tokens_per_s),
        },
        needs: Needs::Nothing,
        uses: JUDGED,
        example: "> 10",
    },
    /// Inputs embedded (or documents ranked) per second of wall time.
    InputThroughput {
        name: "input-throughput",
        label: "Input throughput",
        doc: "inputs embedded, or documents ranked, by successful requests per second of wall time",
        kind: MetricKind::Throughput,
        better: Better::Higher,
        stats: Stats::None,
        source: Source::PerSecond {
            unit: "inputs/s",
            amount: |record, _| {
                if record.ok() {
                    record.inputs.unwrap_or(0) as f64
                } else {
                    0.0
                }
            },
            read: |m| Some(m.throughput.inputs_per_s),
        },
        needs: Needs::Batch,
        uses: JUDGED,
        example: "> 500",
    },
    /// Input (prompt) tokens per second of wall time.
    InputTokenThroughput {
        name: "input-token-throughput",
        label: "Input token throughput",
        doc: "input (prompt) tokens of successful requests per second of wall time",
        kind: MetricKind::Throughput,
        better: Better::Higher,
        stats: Stats::None,
        source: Source::PerSecond {
            unit: "tokens/s",
            amount: |record, _| {
                if record.ok() {
                    prompt_tokens(record) as f64
                } else {
                    0.0
                }
            },
            read: |m| Some(m.throughput.input_tokens_per_s),
        },
        needs: Needs::Nothing,
        uses: JUDGED,
        example: "> 10000",
    },
    /// Requests per second meeting every per-request objective of the plan's `slo`.
    Goodput {
        name: "goodput",
        label: "Goodput",
        doc: "requests per second meeting every objective of the plan's slo",
        kind: MetricKind::Throughput,
        better: Better::Higher,
        stats: Stats::None,
        source: Source::PerSecond {
            unit: "requests/s",
            amount: |_, good| if good { 1.0 } else { 0.0 },
            read: |m| m.goodput.as_ref().map(|g| g.requests_per_s),
        },
        needs: Needs::Slo,
        uses: JUDGED,
        example: "> 10",
    },
    /// How long an agent session took, start to its last answer.
    SessionE2e {
        name: "session-e2e",
        label: "Session E2E",
        doc: "an agent session's time, from its start to its last call's answer (sessions the phase's end cut short are not judged)",
        kind: MetricKind::Latency,
        better: Better::Lower,
        stats: Stats::Any,
        source: Source::Sessions {
            key: "session_e2e_ms",
            sample: |s| Some(s.e2e_ms),
        },
        needs: Needs::Sessions,
        uses: SESSIONS,
        example: "p95 < \"10m\"",
    },
    /// Calls an agent session made.
    SessionCalls {
        name: "session-calls",
        label: "Session calls",
        doc: "the calls an agent session had answered",
        kind: MetricKind::Count,
        better: Better::Higher,
        stats: Stats::Any,
        source: Source::Sessions {
            key: "session_calls",
            sample: |s| Some(s.calls),
        },
        needs: Needs::Sessions,
        uses: REPORTED,
        example: "mean > 10",
    },
    /// Time an agent session's calls waited for their turn.
    SessionWait {
        name: "session-wait",
        label: "Session waits",
        doc: "the time an agent session's calls waited before they were sent (tool runs, think times), summed",
        kind: MetricKind::Latency,
        better: Better::Lower,
        stats: Stats::Any,
        source: Source::Sessions {
            key: "session_wait_ms",
            sample: |s| Some(s.waited_ms),
        },
        needs: Needs::Sessions,
        uses: REPORTED,
        example: "p95 < \"5m\"",
    },
    /// The share of a session's prompt tokens the server's prefix cache served.
    SessionCacheHit {
        name: "session-cache-hit",
        label: "Session cache hit",
        doc: "the share of an agent session's prompt tokens its answers said the prefix cache served",
        kind: MetricKind::Fraction,
        better: Better::Higher,
        stats: Stats::Any,
        source: Source::Sessions {
            key: "session_cache_hit",
            sample: |s| s.cache_hit,
        },
        needs: Needs::Sessions,
        uses: SESSIONS,
        example: "p50 > 80%",
        absent: Some("no answer said how many prompt tokens were cached"),
    },
    /// The share of judged sessions whose every call met the objectives.
    SessionGoodput {
        name: "session-goodput",
        label: "Session goodput",
        doc: "the share of agent sessions whose every call was answered and met the plan's slo (answered, without one)",
        kind: MetricKind::Fraction,
        better: Better::Higher,
        stats: Stats::None,
        source: Source::Aggregate(|m| m.sessions.as_ref().filter(|s| s.judged > 0).map(|s| s.goodput)),
        needs: Needs::Sessions,
        uses: SESSIONS,
        example: "> 90%",
    },
    /// The fraction of completed requests meeting every objective of the plan's `slo`.
    GoodputRatio {
        name: "goodput-ratio",
        label: "Goodput ratio",
        doc: "the share of completed requests meeting every objective of the plan's slo",
        kind: MetricKind::Fraction,
        better: Better::Higher,
        stats: Stats::None,
        source: Source::Share {
            among: every,
            counts: |_, good| good,
            read: |m| m.goodput.as_ref().filter(|_| m.completed()).map(|g| g.ratio),
        },
        needs: Needs::Slo,
        uses: Uses {
            abort: false,
            ..WATCHED
        },
        example: "< \"1%\"",
    },
    /// The highest load the plan's search found the objectives to hold at.
    Capacity {
        name: "capacity",
        label: "Capacity",
        doc: "the highest load at which the search found the objectives to hold",
        kind: MetricKind::Capacity,
        better: Better::Higher,
        stats: Stats::None,
        source: Source::Search,
        needs: Needs::Search,
        uses: JUDGED,
        example: "> 10",
    },
    /// The server's running batch (its telemetry): a gauge, by mean or max.
    ServerRunning {
        name: "server-running",
        label: "Server running",
        doc: "the server's running batch (its telemetry gauge)",
        kind: MetricKind::Count,
        better: Better::Lower,
        stats: Stats::Gauge,
        source: Source::Server(Signal::Running),
        needs: Needs::Nothing,
        uses: SERVER,
        example: "max < 64 phase=\"steady\"",
    },
    /// The server's waiting queue: a gauge, by mean or max.
    ServerWaiting {
        name: "server-waiting",
        label: "Server waiting",
        doc: "requests waiting in the server's queue (its telemetry gauge)",
        kind: MetricKind::Count,
        better: Better::Lower,
        stats: Stats::Gauge,
        source: Source::Server(Signal::Waiting),
        needs: Needs::Nothing,
        uses: SERVER,
        example: "max < 64 phase=\"steady\"",
    },
    /// The server's KV-cache usage (a share): a gauge, by mean or max.
    ServerKvCache {
        name: "server-kv-cache",
        label: "Server KV cache",
        doc: "the server's KV-cache usage, a share (its telemetry gauge)",
        kind: MetricKind::Fraction,
        better: Better::Lower,
        stats: Stats::Gauge,
        source: Source::Server(Signal::KvCache),
        needs: Needs::Nothing,
        uses: SERVER,
        example: "max < \"95%\" phase=\"steady\"",
    },
    /// The server's preemptions during the scope.
    ServerPreemptions {
        name: "server-preemptions",
        label: "Server preemptions",
        doc: "the server's preemptions during the scope (its telemetry counter)",
        kind: MetricKind::Count,
        better: Better::Lower,
        stats: Stats::None,
        source: Source::Server(Signal::Preemptions),
        needs: Needs::Nothing,
        uses: SERVER,
        example: "< 1 phase=\"steady\"",
    },
    /// The server's own time to first token (its histogram), by percentile or mean.
    ServerTtft {
        name: "server-ttft",
        label: "Server TTFT",
        doc: "the server's own time to first token (its telemetry histogram)",
        kind: MetricKind::Latency,
        better: Better::Lower,
        stats: Stats::Histogram,
        source: Source::Server(Signal::Ttft),
        needs: Needs::Nothing,
        uses: SERVER,
        example: "p99 < \"500ms\" phase=\"steady\"",
    },
    /// Time requests waited in the server's queue (its histogram), by percentile or mean.
    ServerQueueTime {
        name: "server-queue-time",
        label: "Server queue time",
        doc: "time requests waited in the server's queue (its telemetry histogram)",
        kind: MetricKind::Latency,
        better: Better::Lower,
        stats: Stats::Histogram,
        source: Source::Server(Signal::QueueTime),
        needs: Needs::Nothing,
        uses: SERVER,
        example: "p99 < \"500ms\" phase=\"steady\"",
    },
    /// The busiest GPU's utilization (a GPU exporter's gauge), by mean or max.
    ServerGpuUtilization {
        name: "server-gpu-utilization",
        label: "GPU utilization",
        doc: "the busiest GPU's utilization, a share of time with a kernel running (DCGM's gauge)",
        kind: MetricKind::Fraction,
        better: Better::Higher,
        stats: Stats::Gauge,
        source: Source::Server(Signal::GpuUtilization),
        needs: Needs::Nothing,
        uses: SERVER,
        example: "mean > \"80%\" phase=\"steady\"",
    },
    /// The GPUs' power draw, summed (a GPU exporter's gauge), by mean or max.
    ServerGpuPower {
        name: "server-gpu-power",
        label: "GPU power",
        doc: "the GPUs' power draw, all GPUs summed (DCGM's gauge)",
        kind: MetricKind::Power,
        better: Better::Lower,
        stats: Stats::Gauge,
        source: Source::Server(Signal::GpuPower),
        needs: Needs::Nothing,
        uses: SERVER,
        example: "max < \"1400W\" phase=\"steady\"",
    },
    /// The GPUs' energy per output token of successful requests, over the scope's window.
    EnergyPerOutputToken {
        name: "energy-per-output-token",
        label: "Energy per output token",
        doc: "the GPUs' energy over the scope's window (their energy counters, else their mean power) / output tokens of successful requests in it",
        kind: MetricKind::Energy,
        better: Better::Lower,
        stats: Stats::None,
        source: Source::Aggregate(|m| m.energy.as_ref()?.per_output_token_j),
        needs: Needs::Generation,
        uses: JUDGED,
        example: "< \"0.4J\" phase=\"steady\"",
        absent: Some("no GPU telemetry (no energy or power readings), or no output tokens"),
    },
    /// Dollars per million output tokens, at the plan's price of the deployment.
    CostPerMillionOutputTokens {
        name: "cost-per-million-output-tokens",
        label: "Cost per million output tokens",
        doc: "the deployment's price over the scope's wall time / its successful requests' output tokens, per million (needs `cost`)",
        kind: MetricKind::Cost,
        better: Better::Lower,
        stats: Stats::None,
        source: Source::Aggregate(|m| m.cost.as_ref()?.per_million_output_tokens),
        needs: Needs::Cost { slo: false },
        uses: JUDGED,
        example: "< \"$0.50\" phase=\"steady\"",
    },
    /// Dollars per million input and output tokens, at the plan's price of the deployment.
    CostPerMillionTokens {
        name: "cost-per-million-tokens",
        label: "Cost per million tokens",
        doc: "the deployment's price over the scope's wall time / its successful requests' input and output tokens, per million (needs `cost`)",
        kind: MetricKind::Cost,
        better: Better::Lower,
        stats: Stats::None,
        source: Source::Aggregate(|m| m.cost.as_ref()?.per_million_total_tokens),
        needs: Needs::Cost { slo: false },
        uses: JUDGED,
        example: "< \"$0.10\"",
    },
    /// Dollars per million output tokens of requests that met every objective.
    CostPerMillionGoodputTokens {
        name: "cost-per-million-goodput-tokens",
        label: "Cost per million goodput tokens",
        doc: "the deployment's price over the scope's wall time / output tokens of the requests that met every `slo` objective, per million (needs `cost` and `slo`)",
        kind: MetricKind::Cost,
        better: Better::Lower,
        stats: Stats::None,
        source: Source::Aggregate(|m| m.cost.as_ref()?.per_million_goodput_tokens),
        needs: Needs::Cost { slo: true },
        uses: JUDGED,
        example: "< \"$1\" phase=\"steady\"",
    },
    /// Answers that are not what the plan's `response-format` asks (not JSON, or not valid
    /// under its schema) / answers checked.
    InvalidJsonRate {
        name: "invalid-json-rate",
        label: "Invalid JSON rate",
        doc: "answers that are not valid JSON (or not valid under the plan's schema) / answers checked",
        kind: MetricKind::Fraction,
        better: Better::Lower,
        stats: Stats::None,
        source: Source::Share {
            // Only a successful answer is checked.
            among: |record| record.ok() && record.answer_valid.is_some(),
            counts: |record, _| record.answer_valid == Some(false),
            read: |m| m.answers.as_ref().map(|a| a.invalid_rate),
        },
        needs: Needs::Generation,
        uses: JUDGED,
        example: "< \"1%\"",
    },
    /// Prompt tokens served from the server's prefix cache / prompt tokens, as its answers'
    /// usage reports them.
    PrefixCacheHitRate {
        name: "prefix-cache-hit-rate",
        label: "Prefix-cache hit rate",
        doc: "prompt tokens served from the server's prefix cache / prompt tokens, from usage",
        kind: MetricKind::Fraction,
        better: Better::Higher,
        stats: Stats::None,
        source: Source::Aggregate(|m| m.prefix_cache.as_ref().map(|c| c.hit_rate)),
        needs: Needs::Nothing,
        uses: SERVER,
        example: "< \"1%\"",
        absent: Some("the server reported no cached tokens"),
    },
    /// How late each open-loop request went out: actual − intended send time.
    ScheduleLag {
        name: "schedule-lag",
        label: "Schedule lag",
        doc: "actual − intended send time of open-loop requests: how late the client sent",
        kind: MetricKind::Latency,
        better: Better::Lower,
        stats: Stats::Any,
        source: Source::Distribution {
            key: "schedule_lag_ms",
            population: Population::OpenLoop,
            sample: Sample::One(schedule_lag_ms),
        },
        needs: Needs::Nothing,
        // The client's own fidelity, reported and warned about, not a property of the server.
        uses: REPORTED,
        example: "p99 < \"5ms\"",
    },
    /// Time to open a new connection (TCP connect, TLS handshake), over the requests that
    /// opened one.
    Connect {
        name: "connect",
        label: "Connect",
        doc: "time to open a new connection (TCP connect, TLS handshake), over the requests that opened one",
        kind: MetricKind::Latency,
        better: Better::Lower,
        stats: Stats::Any,
        source: Source::Distribution {
            key: "connect_ms",
            // Counted for every request that opened one, whatever became of it.
            population: Population::Every,
            sample: Sample::One(connect_ms),
        },
        needs: Needs::Nothing,
        uses: JUDGED,
        example: "p99 < \"500ms\" phase=\"steady\"",
    },
    /// The TLS handshake's share of opening a new connection, over the requests that opened
    /// one over TLS (where the transport times it apart: not through a proxy).
    Tls {
        name: "tls",
        label: "TLS handshake",
        doc: "the TLS handshake of a new connection (a share of connect), over the requests that opened one to an https:// target (not timed apart through a proxy)",
        kind: MetricKind::Latency,
        better: Better::Lower,
        stats: Stats::Any,
        source: Source::Distribution {
            key: "tls_ms",
            population: Population::Every,
            sample: Sample::One(tls_ms),
        },
        needs: Needs::Nothing,
        uses: JUDGED,
        example: "p99 < \"50ms\"",
    },
    /// How long a large body (an image's, audio's) took to go out, within TTFT.
    Upload {
        name: "upload",
        label: "Upload",
        doc: "send → the body's last byte taken by the socket (after a new connection's opening), over requests whose body is 64 KiB or more: the part of TTFT spent sending images and audio",
        kind: MetricKind::Latency,
        better: Better::Lower,
        stats: Stats::Any,
        source: Source::Distribution {
            key: "upload_ms",
            population: Population::Every,
            sample: Sample::One(upload_ms),
        },
        needs: Needs::Nothing,
        uses: JUDGED,
        example: "p99 < \"50ms\"",
    },
}

/// A metric that is a per-request distribution: what a scope's summaries and histograms are
/// indexed by, so that naming another kind of metric there is an error when llmload is
/// compiled, not a panic when it runs. Written `dist!(Ttft)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DistMetric {
    metric: Metric,
    /// Its place among the table's distributions, in the table's order.
    ordinal: usize,
}

impl DistMetric {
    /// `metric` as a distribution; evaluated in a `const` block (as `dist!` does), a metric that
    /// is not one fails the build.
    pub const fn of(metric: Metric) -> DistMetric {
        let mut i = 0;
        let mut ordinal = 0;
        while i < TABLE.len() {
            let is_distribution = matches!(
                TABLE[i].source,
                Source::Distribution { .. } | Source::Sessions { .. }
            );
            if TABLE[i].metric as usize == metric as usize {
                assert!(is_distribution, "not a distribution of the metric table");
                return DistMetric { metric, ordinal };
            }
            if is_distribution {
                ordinal += 1;
            }
            i += 1;
        }
        panic!("not in the metric table")
    }

    /// The metric.
    pub fn metric(self) -> Metric {
        self.metric
    }

    /// Its place among the distributions of [`Metric::distributions`].
    pub(crate) fn ordinal(self) -> usize {
        self.ordinal
    }
}

/// `dist!(Ttft)`: the [`DistMetric`] of a distribution of the metric table, checked when
/// llmload is compiled:
///
/// ```
/// let ttft = llmload::dist!(Ttft);
/// assert_eq!(ttft.metric(), llmload::metrics::Metric::Ttft);
/// ```
///
/// An error rate is one number per scope, not a distribution: naming it fails the build.
///
/// ```compile_fail
/// let error_rate = llmload::dist!(ErrorRate);
/// ```
#[macro_export]
macro_rules! dist {
    ($variant:ident) => {
        const { $crate::metrics::table::DistMetric::of($crate::metrics::Metric::$variant) }
    };
}

impl Metric {
    /// Its definition.
    pub fn def(self) -> &'static MetricDef {
        &METRICS[self as usize]
    }

    /// Every metric, in the order reports list them.
    pub fn all() -> impl Iterator<Item = Metric> {
        METRICS.iter().map(|d| d.metric)
    }

    /// The metrics a plan's `sla` may name, in order.
    pub fn assertable() -> impl Iterator<Item = Metric> {
        METRICS.iter().filter(|d| d.uses.assert).map(|d| d.metric)
    }

    /// The metrics kept as per-request distributions, in the order reports list them.
    pub fn distributions() -> impl Iterator<Item = Metric> {
        METRICS
            .iter()
            .filter(|d| {
                matches!(
                    d.source,
                    Source::Distribution { .. } | Source::Sessions { .. }
                )
            })
            .map(|d| d.metric)
    }

    /// The metric's name in plans and reports.
    pub fn name(self) -> &'static str {
        self.def().name
    }

    /// The metric a plan names (any metric of the table, asserted or not).
    pub fn from_name(name: &str) -> Option<Metric> {
        METRICS.iter().find(|d| d.name == name).map(|d| d.metric)
    }

    /// Whether the metric is a per-request distribution that takes a statistic (p99, mean...).
    pub fn is_distribution(self) -> bool {
        matches!(
            self.def().source,
            Source::Distribution { .. } | Source::Sessions { .. }
        )
    }

    /// Whether a line naming it names a statistic.
    pub fn takes_stat(self) -> bool {
        self.def().stats != Stats::None
    }

    /// Its unit in summary.csv, for a metric that is one value per scope (a share, a rate per
    /// second, an aggregate); `None` for distributions (a row per statistic, in their kind's
    /// unit), the server's signals and a search's capacity, which are not a scope's value.
    pub fn scope_value_unit(self) -> Option<&'static str> {
        match self.def().source {
            Source::PerSecond { unit, .. } => Some(unit),
            Source::Share { .. } | Source::Aggregate(_) => Some(self.kind().csv_unit()),
            Source::Distribution { .. }
            | Source::Sessions { .. }
            | Source::Server(_)
            | Source::Search => None,
        }
    }

    /// Whether it is what the server says of itself (its telemetry), not what llmload measured.
    pub fn is_server(self) -> bool {
        matches!(self.def().source, Source::Server(_))
    }

    /// What kind of value the metric is, which decides its unit and threshold syntax.
    pub fn kind(self) -> MetricKind {
        self.def().kind
    }

    /// Whether a larger value is better (throughputs, rates of tokens, capacity).
    pub fn higher_is_better(self) -> bool {
        self.def().better == Better::Higher
    }

    /// Its summary key in reports (`ttft_ms`), for a distribution.
    pub fn summary_key(self) -> Option<&'static str> {
        match self.def().source {
            Source::Distribution { key, .. } | Source::Sessions { key, .. } => Some(key),
            Source::Share { .. }
            | Source::PerSecond { .. }
            | Source::Aggregate(_)
            | Source::Server(_)
            | Source::Search => None,
        }
    }

    /// The values `record` (of an open-loop phase or not) gives this metric's distribution,
    /// each with its weight; nothing for a metric that is not one, or a request outside its
    /// population.
    pub fn samples(self, record: &RequestRecord, open_loop: bool, mut add: impl FnMut(f64, u64)) {
        let Source::Distribution {
            population, sample, ..
        } = self.def().source
        else {
            return;
        };
        if !population.includes(record, open_loop) {
            return;
        }
        match sample {
            Sample::One(value) => {
                if let Some(value) = value(record) {
                    add(value, 1);
                }
            }
            Sample::Gaps(kind) => {
                for (gap_ms, tokens) in itl_gaps_of(record, kind) {
                    add(gap_ms, tokens as u64);
                }
            }
        }
    }

    /// The one value `record` gives a single-valued distribution (TTFT, TPOT, E2E...), within
    /// its population; `None` for ITL (several values) and metrics that are not per request.
    pub fn sample(self, record: &RequestRecord, open_loop: bool) -> Option<f64> {
        match self.def().source {
            Source::Distribution {
                population,
                sample: Sample::One(value),
                ..
            } if population.includes(record, open_loop) => value(record),
            Source::Distribution { .. }
            | Source::Share { .. }
            | Source::PerSecond { .. }
            | Source::Aggregate(_)
            | Source::Sessions { .. }
            | Source::Server(_)
            | Source::Search => None,
        }
    }
}

/// A metric is written by its name (summary.json's verdicts, comparisons).
impl serde::Serialize for Metric {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.name())
    }
}

impl std::fmt::Display for Metric {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

// The per-request formulas: each metric's in one place (docs/metrics.md defines them).

/// Every completed request (a share's usual denominator).
fn every(_: &RequestRecord) -> bool {
    true
}

fn ms(us: u64) -> f64 {
    us as f64 / 1000.0
}

/// Output tokens of a request, as counted (usage, or the tokenizer).
fn output_tokens(record: &RequestRecord) -> u64 {
    record.completion_tokens.unwrap_or(0)
}

/// Prompt tokens of a request: the server's count, or the plan's where it gave none.
fn prompt_tokens(record: &RequestRecord) -> u64 {
    record
        .prompt_tokens
        .unwrap_or(record.input_tokens_planned as u64)
}

/// Send → first token of a streamed request, in ms, whatever became of the request after it
/// (see docs/metrics.md: a request that timed out after its first token had one).
pub fn ttft_ms(record: &RequestRecord) -> Option<f64> {
    record.ttft_us.filter(|_| record.e2e_us.is_some()).map(ms)
}

/// End-to-end latency, ms.
pub fn e2e_ms(record: &RequestRecord) -> Option<f64> {
    record.e2e_us.map(ms)
}

/// E2E per input of a batch request, ms (embeddings, ranked documents); none for a request
/// that carried no batch.
pub fn e2e_per_input_ms(record: &RequestRecord) -> Option<f64> {
    let inputs = record.inputs.filter(|&n| n > 0)?;
    e2e_ms(record).map(|e2e| e2e / inputs as f64)
}

/// Time per output token, ms: (e2e − ttft) / (output tokens − 1); none for one token or a
/// request that was not streamed. The only TPOT formula: the `slo`'s goodput uses it too.
pub fn tpot_ms(record: &RequestRecord) -> Option<f64> {
    let completion = output_tokens(record);
    match (e2e_ms(record), ttft_ms(record)) {
        (Some(e2e), Some(ttft)) if completion > 1 => {
            Some((e2e - ttft).max(0.0) / (completion - 1) as f64)
        }
        _ => None,
    }
}

/// Prompt tokens per second of TTFT.
pub fn prefill_tps(record: &RequestRecord) -> Option<f64> {
    ttft_ms(record)?;
    record
        .ttft_us
        .filter(|&t| t > 0)
        .map(|t| prompt_tokens(record) as f64 / (t as f64 / 1e6))
}

/// Tokens after the first chunk's per second from the first chunk to the last.
pub fn decode_tps(record: &RequestRecord) -> Option<f64> {
    ttft_ms(record)?;
    let (first, last) = (record.chunks.first()?, record.chunks.last()?);
    let span_s = last.0.saturating_sub(first.0) as f64 / 1e6;
    let decoded = output_tokens(record).saturating_sub(first.1 as u64);
    (span_s > 0.0 && decoded > 0).then(|| decoded as f64 / span_s)
}

/// How late the request went out, ms.
pub fn schedule_lag_ms(record: &RequestRecord) -> Option<f64> {
    Some(ms(record
        .actual_send_us
        .saturating_sub(record.intended_send_us)))
}

/// How long a request spent opening a new connection, ms; `None` when it reused one.
pub fn connect_ms(record: &RequestRecord) -> Option<f64> {
    record.connect_us.map(ms)
}

/// How long a request's new connection spent in its TLS handshake, ms; `None` when it opened
/// none, over plain TCP, or where not timed apart.
pub fn tls_ms(record: &RequestRecord) -> Option<f64> {
    record.tls_us.map(ms)
}

/// How long a large body took to go out, ms; `None` for small bodies and where not measured.
pub fn upload_ms(record: &RequestRecord) -> Option<f64> {
    record.upload_us.map(ms)
}

/// Every gap between consecutive token-bearing chunks of a streamed request, spread over the
/// later chunk's tokens: (gap / k in ms, k).
pub fn itl_gaps(record: &RequestRecord) -> impl Iterator<Item = (f64, u32)> + '_ {
    itl_gaps_of(record, Gaps::All)
}

/// The gaps `which` takes (the gap from the last reasoning chunk to the first of the output
/// belongs to neither reasoning nor output).
pub fn itl_gaps_of(record: &RequestRecord, which: Gaps) -> impl Iterator<Item = (f64, u32)> + '_ {
    let chunks: &[(u64, u32)] = if ttft_ms(record).is_some() {
        &record.chunks
    } else {
        &[]
    };
    let kinds = record
        .chunk_kind_iter()
        .zip(record.chunk_kind_iter().skip(1));
    chunks
        .windows(2)
        .zip(kinds)
        .filter(move |(_, (before, after))| match which {
            Gaps::All => true,
            Gaps::Reasoning => !before.is_output() && !after.is_output(),
            Gaps::Output => before.is_output() && after.is_output(),
        })
        .map(|(pair, _)| {
            let (previous, (at, tokens)) = (pair[0].0, pair[1]);
            let tokens = tokens.max(1);
            (
                at.saturating_sub(previous) as f64 / 1000.0 / tokens as f64,
                tokens,
            )
        })
}

/// Send → the first chunk of output proper (answer text or a tool call), ms: TTFT for a request
/// that did not reason; none for one whose stream held only reasoning.
pub fn ttfo_ms(record: &RequestRecord) -> Option<f64> {
    ttft_ms(record)?;
    if record.chunk_kinds.is_none() {
        return ttft_ms(record);
    }
    first_chunk_ms(record, ChunkKind::is_output)
}

/// Send → the first tool-call chunk, ms, of a streamed answer that called a tool.
pub fn tool_call_ttft_ms(record: &RequestRecord) -> Option<f64> {
    ttft_ms(record)?;
    first_chunk_ms(record, |kind| kind == ChunkKind::ToolCall)
}

/// When the first chunk whose kind `wanted` accepts arrived, ms after the send.
fn first_chunk_ms(record: &RequestRecord, wanted: impl Fn(ChunkKind) -> bool) -> Option<f64> {
    let first = record.chunk_kind_iter().position(wanted)?;
    record.chunks.get(first).map(|&(at, _)| ms(at))
}

/// Tool calls the answer made, for one that made any.
pub fn tool_calls(record: &RequestRecord) -> Option<f64> {
    record.tool_calls.map(f64::from)
}

/// First to last reasoning chunk, ms, of a streamed request that reasoned.
pub fn reasoning_time_ms(record: &RequestRecord) -> Option<f64> {
    ttft_ms(record)?;
    record.chunk_kinds.as_ref()?;
    let mut times = record
        .chunks
        .iter()
        .zip(record.chunk_kind_iter())
        .filter(|(_, kind)| !kind.is_output())
        .map(|(&(at, _), _)| at);
    let first = times.next()?;
    let last = times.last().unwrap_or(first);
    Some(ms(last.saturating_sub(first)))
}

/// Output tokens spent reasoning, for a request that reasoned.
pub fn reasoning_tokens(record: &RequestRecord) -> Option<f64> {
    record.reasoning_tokens.map(|n| n as f64)
}

/// Output tokens of the answer: the output less any reasoning.
pub fn answer_tokens(record: &RequestRecord) -> Option<f64> {
    let output = record.completion_tokens?;
    Some(output.saturating_sub(record.reasoning_tokens.unwrap_or(0)) as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_is_in_the_order_of_the_enum_and_names_are_unique() {
        for (index, def) in METRICS.iter().enumerate() {
            assert_eq!(def.metric as usize, index, "{} out of place", def.name);
            assert_eq!(Metric::from_name(def.name), Some(def.metric));
            assert!(!def.label.is_empty() && !def.doc.is_empty() && !def.example.is_empty());
        }
    }

    #[test]
    fn capabilities_agree_with_sources() {
        for def in METRICS {
            let m = def.metric;
            // A distribution takes any statistic; one number takes none.
            match def.source {
                Source::Distribution { .. } | Source::Sessions { .. } => {
                    assert_eq!(def.stats, Stats::Any, "{m}")
                }
                Source::Share { .. } | Source::PerSecond { .. } | Source::Aggregate(_) => {
                    assert_eq!(def.stats, Stats::None, "{m}")
                }
                Source::Server(_) | Source::Search => {}
            }
            // Only what the client measures per request can be watched live or compared.
            if def.uses.abort || def.uses.early_end {
                assert!(
                    matches!(
                        def.source,
                        Source::Distribution { .. } | Source::Share { .. }
                    ),
                    "{m}"
                );
            }
            if def.uses.compare {
                assert!(!m.is_server(), "{m}");
            }
            if matches!(def.source, Source::Search) {
                assert_eq!(def.needs, Needs::Search);
            }
        }
    }

    fn record(ttft: u64, e2e: u64, tokens: u64, chunks: Vec<(u64, u32)>) -> RequestRecord {
        RequestRecord {
            ttft_us: Some(ttft),
            e2e_us: Some(e2e),
            completion_tokens: Some(tokens),
            chunks,
            input_tokens_planned: 100,
            intended_send_us: 1_000,
            actual_send_us: 1_250,
            ..RequestRecord::default()
        }
    }

    #[test]
    fn per_request_formulas() {
        let r = record(100_000, 1_090_000, 100, vec![(100_000, 1), (1_090_000, 99)]);
        assert_eq!(ttft_ms(&r), Some(100.0));
        assert_eq!(e2e_ms(&r), Some(1090.0));
        assert_eq!(tpot_ms(&r), Some(10.0));
        assert_eq!(prefill_tps(&r), Some(1000.0));
        assert_eq!(decode_tps(&r), Some(100.0));
        assert_eq!(schedule_lag_ms(&r), Some(0.25));
        let gaps: Vec<_> = itl_gaps(&r).collect();
        assert_eq!(gaps, vec![(10.0, 99)]);
        // One token has no TPOT; an unstreamed answer no TTFT, so no gaps either.
        assert_eq!(tpot_ms(&record(1, 2, 1, vec![])), None);
        let unstreamed = RequestRecord {
            ttft_us: None,
            ..r.clone()
        };
        assert_eq!(itl_gaps(&unstreamed).count(), 0);
        assert_eq!(Metric::Tpot.sample(&unstreamed, false), None);
    }

    #[test]
    fn populations_decide_which_requests_count() {
        let failed = RequestRecord {
            error: Some(ErrorClass::Timeout),
            ..record(100_000, 500_000, 3, vec![])
        };
        // A failed request keeps its TTFT, not its E2E; lag only in an open loop.
        assert_eq!(Metric::Ttft.sample(&failed, false), Some(100.0));
        assert_eq!(Metric::E2e.sample(&failed, false), None);
        assert_eq!(Metric::ScheduleLag.sample(&failed, false), None);
        assert_eq!(Metric::ScheduleLag.sample(&failed, true), Some(0.25));
        let cancelled = RequestRecord {
            error: Some(ErrorClass::Cancelled),
            connect_us: Some(2_000),
            ..failed
        };
        assert_eq!(Metric::Ttft.sample(&cancelled, false), None);
        assert_eq!(Metric::Connect.sample(&cancelled, false), Some(2.0));
    }
}
