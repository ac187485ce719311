//! What serving engines call the numbers llmload reads from them: vLLM (its V1 names and the
//! legacy ones), SGLang, TGI and llama.cpp's server, each mapped to one [`Signal`]; and what
//! NVIDIA's DCGM exporter calls a GPU's (`DCGM_FI_DEV_*`), which a plan scrapes beside the
//! engine (its own URL, usually port 9400).

use serde::{Deserialize, Serialize};

/// An engine whose metric names llmload knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Engine {
    /// vLLM (and llmload's simulator, which speaks its names).
    Vllm,
    /// SGLang.
    Sglang,
    /// Hugging Face Text Generation Inference.
    Tgi,
    /// llama.cpp's `llama-server`.
    LlamaCpp,
    /// NVIDIA's DCGM exporter (dcgm-exporter): the GPUs', not an engine's.
    Dcgm,
    /// nvidia-smi's CSV, from a command llmload runs: the GPUs', not an engine's.
    NvidiaSmi,
}

impl Engine {
    /// As reports name it.
    pub fn as_str(self) -> &'static str {
        match self {
            Engine::Vllm => "vLLM",
            Engine::Sglang => "SGLang",
            Engine::Tgi => "TGI",
            Engine::LlamaCpp => "llama.cpp",
            Engine::Dcgm => "DCGM exporter",
            Engine::NvidiaSmi => "nvidia-smi",
        }
    }

    /// Whether it serves the model (an engine), rather than exporting the hardware's numbers:
    /// a run names the engine it loaded, whichever URL the plan lists first.
    pub fn serves(self) -> bool {
        match self {
            Engine::Vllm | Engine::Sglang | Engine::Tgi | Engine::LlamaCpp => true,
            Engine::Dcgm | Engine::NvidiaSmi => false,
        }
    }
}

/// How a metric's samples add up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A level (requests running): a phase's mean and max.
    Gauge,
    /// A running total (tokens generated): a phase's delta and rate.
    Counter,
    /// A Prometheus histogram in seconds: percentiles of a phase's delta.
    Histogram,
}

/// One thing a server says about itself, whatever the engine calls it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Signal {
    /// Requests in the running batch.
    Running,
    /// Requests waiting to be scheduled.
    Waiting,
    /// The KV cache's used share (0 to 1).
    KvCache,
    /// Preemptions so far.
    Preemptions,
    /// Prompt tokens processed so far.
    PromptTokens,
    /// Tokens generated so far.
    GenerationTokens,
    /// Prompt tokens found in the prefix cache so far.
    PrefixCacheHits,
    /// Prompt tokens looked up in the prefix cache so far.
    PrefixCacheQueries,
    /// The prefix cache's hit rate, as the engine reports it (0 to 1).
    PrefixCacheHitRate,
    /// The server's time to first token.
    Ttft,
    /// The server's inter-token latency (or time per output token).
    Itl,
    /// The server's end-to-end request latency.
    E2e,
    /// Time requests spent waiting before being scheduled.
    QueueTime,
    /// The GPUs' utilization (0 to 1): the busiest GPU's share of time with a kernel running.
    GpuUtilization,
    /// GPU memory in use, MiB, all GPUs summed.
    GpuMemoryUsed,
    /// GPU memory free, MiB, all GPUs summed.
    GpuMemoryFree,
    /// Power drawn, W, all GPUs summed.
    GpuPower,
    /// Energy consumed since the driver loaded, J, all GPUs summed.
    GpuEnergy,
    /// The SM clock, MHz (the fastest GPU's; a throttled GPU shows in its max falling).
    GpuSmClock,
    /// The hottest GPU's temperature, °C.
    GpuTemperature,
}

impl Signal {
    /// Every signal, in the order reports list them.
    pub const ALL: [Signal; 20] = [
        Signal::Running,
        Signal::Waiting,
        Signal::KvCache,
        Signal::Preemptions,
        Signal::PromptTokens,
        Signal::GenerationTokens,
        Signal::PrefixCacheHits,
        Signal::PrefixCacheQueries,
        Signal::PrefixCacheHitRate,
        Signal::Ttft,
        Signal::Itl,
        Signal::E2e,
        Signal::QueueTime,
        Signal::GpuUtilization,
        Signal::GpuMemoryUsed,
        Signal::GpuMemoryFree,
        Signal::GpuPower,
        Signal::GpuEnergy,
        Signal::GpuSmClock,
        Signal::GpuTemperature,
    ];

    /// How its samples add up.
    pub fn kind(self) -> Kind {
        match self {
            Signal::Running
            | Signal::Waiting
            | Signal::KvCache
            | Signal::PrefixCacheHitRate
            | Signal::GpuUtilization
            | Signal::GpuMemoryUsed
            | Signal::GpuMemoryFree
            | Signal::GpuPower
            | Signal::GpuSmClock
            | Signal::GpuTemperature => Kind::Gauge,
            Signal::Preemptions
            | Signal::PromptTokens
            | Signal::GenerationTokens
            | Signal::PrefixCacheHits
            | Signal::PrefixCacheQueries
            | Signal::GpuEnergy => Kind::Counter,
            Signal::Ttft | Signal::Itl | Signal::E2e | Signal::QueueTime => Kind::Histogram,
        }
    }

    /// Its name in telemetry files and reports.
    pub fn name(self) -> &'static str {
        match self {
            Signal::Running => "running",
            Signal::Waiting => "waiting",
            Signal::KvCache => "kv_cache",
            Signal::Preemptions => "preemptions",
            Signal::PromptTokens => "prompt_tokens",
            Signal::GenerationTokens => "generation_tokens",
            Signal::PrefixCacheHits => "prefix_cache_hits",
            Signal::PrefixCacheQueries => "prefix_cache_queries",
            Signal::PrefixCacheHitRate => "prefix_cache_hit_rate",
            Signal::Ttft => "ttft",
            Signal::Itl => "itl",
            Signal::E2e => "e2e",
            Signal::QueueTime => "queue_time",
            Signal::GpuUtilization => "gpu_utilization",
            Signal::GpuMemoryUsed => "gpu_memory_used_mib",
            Signal::GpuMemoryFree => "gpu_memory_free_mib",
            Signal::GpuPower => "gpu_power_w",
            Signal::GpuEnergy => "gpu_energy_j",
            Signal::GpuSmClock => "gpu_sm_clock_mhz",
            Signal::GpuTemperature => "gpu_temperature_c",
        }
    }

    /// Several series of one gauge (data-parallel engines, several GPUs) add up (requests,
    /// watts, memory), or the largest counts (a cache's usage, the busiest or hottest GPU).
    pub fn sums(self) -> bool {
        match self {
            Signal::KvCache
            | Signal::PrefixCacheHitRate
            | Signal::GpuUtilization
            | Signal::GpuSmClock
            | Signal::GpuTemperature => false,
            Signal::Running
            | Signal::Waiting
            | Signal::Preemptions
            | Signal::PromptTokens
            | Signal::GenerationTokens
            | Signal::PrefixCacheHits
            | Signal::PrefixCacheQueries
            | Signal::Ttft
            | Signal::Itl
            | Signal::E2e
            | Signal::QueueTime
            | Signal::GpuMemoryUsed
            | Signal::GpuMemoryFree
            | Signal::GpuPower
            | Signal::GpuEnergy => true,
        }
    }

    /// What one unit of the value `engine` exports is in llmload's unit for the signal: DCGM
    /// says utilization in percent and energy in millijoules.
    pub fn scale(self, engine: Engine) -> f64 {
        match (engine, self) {
            (Engine::Dcgm, Signal::GpuUtilization) => 0.01,
            (Engine::Dcgm, Signal::GpuEnergy) => 0.001,
            _ => 1.0,
        }
    }

    /// Whether `value`, as `engine` exports it, is a reading rather than DCGM's "blank" (a
    /// field the GPU or driver does not support, or not read yet): DCGM writes those as the
    /// largest values of the field's type (from 2^31 − 16 for 32-bit fields, 2^47 for
    /// floating-point ones, 2^63 − 16 for 64-bit ones), which dcgm-exporter prints as they are
    /// (`9223372036854775794` in its README's own example).
    pub fn is_reading(self, engine: Engine, value: f64) -> bool {
        const INT32_BLANK: f64 = 2_147_483_632.0;
        const FP64_BLANK: f64 = 140_737_488_355_328.0;
        match engine {
            Engine::Dcgm => {
                // The energy counter is the one 64-bit field that passes 2^31 in use (its
                // millijoules do after some six hours at 100 W).
                let limit = if self == Signal::GpuEnergy {
                    FP64_BLANK
                } else {
                    INT32_BLANK
                };
                value.is_finite() && value < limit
            }
            Engine::Vllm | Engine::Sglang | Engine::Tgi | Engine::LlamaCpp | Engine::NvidiaSmi => {
                value.is_finite()
            }
        }
    }
}

/// (metric name, engine, signal): histograms by their base name.
const NAMES: &[(&str, Engine, Signal)] = &[
    ("vllm:num_requests_running", Engine::Vllm, Signal::Running),
    ("vllm:num_requests_waiting", Engine::Vllm, Signal::Waiting),
    ("vllm:kv_cache_usage_perc", Engine::Vllm, Signal::KvCache),
    ("vllm:gpu_cache_usage_perc", Engine::Vllm, Signal::KvCache),
    (
        "vllm:num_preemptions_total",
        Engine::Vllm,
        Signal::Preemptions,
    ),
    ("vllm:num_preemptions", Engine::Vllm, Signal::Preemptions),
    (
        "vllm:prompt_tokens_total",
        Engine::Vllm,
        Signal::PromptTokens,
    ),
    (
        "vllm:generation_tokens_total",
        Engine::Vllm,
        Signal::GenerationTokens,
    ),
    (
        "vllm:prefix_cache_hits_total",
        Engine::Vllm,
        Signal::PrefixCacheHits,
    ),
    (
        "vllm:prefix_cache_queries_total",
        Engine::Vllm,
        Signal::PrefixCacheQueries,
    ),
    (
        "vllm:gpu_prefix_cache_hits_total",
        Engine::Vllm,
        Signal::PrefixCacheHits,
    ),
    (
        "vllm:gpu_prefix_cache_queries_total",
        Engine::Vllm,
        Signal::PrefixCacheQueries,
    ),
    (
        "vllm:gpu_prefix_cache_hit_rate",
        Engine::Vllm,
        Signal::PrefixCacheHitRate,
    ),
    (
        "vllm:time_to_first_token_seconds",
        Engine::Vllm,
        Signal::Ttft,
    ),
    (
        "vllm:inter_token_latency_seconds",
        Engine::Vllm,
        Signal::Itl,
    ),
    (
        "vllm:time_per_output_token_seconds",
        Engine::Vllm,
        Signal::Itl,
    ),
    (
        "vllm:e2e_request_latency_seconds",
        Engine::Vllm,
        Signal::E2e,
    ),
    (
        "vllm:request_queue_time_seconds",
        Engine::Vllm,
        Signal::QueueTime,
    ),
    ("sglang:num_running_reqs", Engine::Sglang, Signal::Running),
    ("sglang:num_queue_reqs", Engine::Sglang, Signal::Waiting),
    ("sglang:token_usage", Engine::Sglang, Signal::KvCache),
    (
        "sglang:cache_hit_rate",
        Engine::Sglang,
        Signal::PrefixCacheHitRate,
    ),
    (
        "sglang:prompt_tokens_total",
        Engine::Sglang,
        Signal::PromptTokens,
    ),
    (
        "sglang:generation_tokens_total",
        Engine::Sglang,
        Signal::GenerationTokens,
    ),
    (
        "sglang:time_to_first_token_seconds",
        Engine::Sglang,
        Signal::Ttft,
    ),
    (
        "sglang:inter_token_latency_seconds",
        Engine::Sglang,
        Signal::Itl,
    ),
    (
        "sglang:time_per_output_token_seconds",
        Engine::Sglang,
        Signal::Itl,
    ),
    (
        "sglang:e2e_request_latency_seconds",
        Engine::Sglang,
        Signal::E2e,
    ),
    (
        "sglang:queue_time_seconds",
        Engine::Sglang,
        Signal::QueueTime,
    ),
    ("tgi_batch_current_size", Engine::Tgi, Signal::Running),
    ("tgi_queue_size", Engine::Tgi, Signal::Waiting),
    (
        "tgi_request_input_length_sum",
        Engine::Tgi,
        Signal::PromptTokens,
    ),
    (
        "tgi_request_generated_tokens_sum",
        Engine::Tgi,
        Signal::GenerationTokens,
    ),
    (
        "tgi_request_mean_time_per_token_duration",
        Engine::Tgi,
        Signal::Itl,
    ),
    ("tgi_request_duration", Engine::Tgi, Signal::E2e),
    ("tgi_request_queue_duration", Engine::Tgi, Signal::QueueTime),
    (
        "llamacpp:requests_processing",
        Engine::LlamaCpp,
        Signal::Running,
    ),
    (
        "llamacpp:requests_deferred",
        Engine::LlamaCpp,
        Signal::Waiting,
    ),
    (
        "llamacpp:kv_cache_usage_ratio",
        Engine::LlamaCpp,
        Signal::KvCache,
    ),
    (
        "llamacpp:prompt_tokens_total",
        Engine::LlamaCpp,
        Signal::PromptTokens,
    ),
    (
        "llamacpp:tokens_predicted_total",
        Engine::LlamaCpp,
        Signal::GenerationTokens,
    ),
    // dcgm-exporter's default counters (its etc/default-counters.csv): one series per GPU,
    // labelled `gpu`, `UUID`, `modelName`, `Hostname` (and `pod` and the like on Kubernetes).
    ("DCGM_FI_DEV_GPU_UTIL", Engine::Dcgm, Signal::GpuUtilization),
    ("DCGM_FI_DEV_FB_USED", Engine::Dcgm, Signal::GpuMemoryUsed),
    ("DCGM_FI_DEV_FB_FREE", Engine::Dcgm, Signal::GpuMemoryFree),
    ("DCGM_FI_DEV_POWER_USAGE", Engine::Dcgm, Signal::GpuPower),
    (
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        Engine::Dcgm,
        Signal::GpuEnergy,
    ),
    ("DCGM_FI_DEV_SM_CLOCK", Engine::Dcgm, Signal::GpuSmClock),
    ("DCGM_FI_DEV_GPU_TEMP", Engine::Dcgm, Signal::GpuTemperature),
];

/// Every series name llmload reads: each known metric's, a histogram's as its `_bucket`,
/// `_sum` and `_count` series (what a PromQL selector names).
pub fn series_names() -> Vec<String> {
    NAMES
        .iter()
        .flat_map(|(name, _, signal)| match signal.kind() {
            Kind::Histogram => ["_bucket", "_sum", "_count"]
                .iter()
                .map(|suffix| format!("{name}{suffix}"))
                .collect(),
            Kind::Gauge | Kind::Counter => vec![name.to_string()],
        })
        .collect()
}

/// The engine and signal a sample's metric name is, if llmload knows it. A histogram's
/// `_bucket`, `_sum` and `_count` lines are known by their base name, and come with which of
/// the three they are.
pub fn identify(name: &str) -> Option<(Engine, Signal, Part)> {
    if let Some((_, engine, signal)) = NAMES.iter().find(|(n, _, _)| *n == name) {
        if signal.kind() != Kind::Histogram {
            return Some((*engine, *signal, Part::Value));
        }
    }
    for (suffix, part) in [
        ("_bucket", Part::Bucket),
        ("_sum", Part::Sum),
        ("_count", Part::Count),
    ] {
        if let Some(base) = name.strip_suffix(suffix) {
            if let Some((_, engine, signal)) = NAMES
                .iter()
                .find(|(n, _, s)| *n == base && s.kind() == Kind::Histogram)
            {
                return Some((*engine, *signal, part));
            }
        }
    }
    None
}

/// Which line of a metric a sample is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// A gauge's or counter's value.
    Value,
    /// A histogram bucket (`le`).
    Bucket,
    /// A histogram's sum.
    Sum,
    /// A histogram's count.
    Count,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_of_every_engine() {
        assert_eq!(
            identify("vllm:num_requests_running"),
            Some((Engine::Vllm, Signal::Running, Part::Value))
        );
        assert_eq!(
            identify("vllm:gpu_cache_usage_perc"),
            Some((Engine::Vllm, Signal::KvCache, Part::Value))
        );
        assert_eq!(
            identify("vllm:time_to_first_token_seconds_bucket"),
            Some((Engine::Vllm, Signal::Ttft, Part::Bucket))
        );
        assert_eq!(
            identify("sglang:num_queue_reqs"),
            Some((Engine::Sglang, Signal::Waiting, Part::Value))
        );
        assert_eq!(
            identify("tgi_request_queue_duration_sum"),
            Some((Engine::Tgi, Signal::QueueTime, Part::Sum))
        );
        assert_eq!(
            identify("llamacpp:tokens_predicted_total"),
            Some((Engine::LlamaCpp, Signal::GenerationTokens, Part::Value))
        );
        // A histogram's base name alone is no sample, and unknown names are unknown.
        assert_eq!(identify("vllm:time_to_first_token_seconds"), None);
        assert_eq!(identify("process_cpu_seconds_total"), None);
    }
}
