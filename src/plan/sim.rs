//! `sim`: the embedded simulator's settings (fixed delays or an engine model, and faults).

use std::time::Duration;

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
    /// Behave like a reasoning model: each chat answer thinks first.
    pub reasoning: Option<Reasoning>,
    /// The models it serves, as `/v1/models` lists them; a request for another is answered 404
    /// (as vLLM does). Empty: it answers for any model and lists none.
    pub models: Vec<String>,
    /// The models its answers name (their `model` field), in turn, request by request, instead
    /// of the one asked: a gateway's routing or an alias resolved. Empty: the one asked.
    pub answer_as: Vec<String>,
    /// The environment variable holding the key it requires (`Authorization: Bearer …`) on
    /// `/v1/*`, as vLLM's `--api-key` does; a request without it is answered 401.
    pub api_key_env: Option<String>,
    /// Rounds of tool calls an answer makes in a row (when the request offers tools) before it
    /// answers in words: counted since the conversation's last user message.
    pub tool_rounds: u32,
    /// Behave like a vision and audio model: images and clips cost prompt tokens and time.
    pub vision: Option<Vision>,
    /// Export GPUs on `/metrics` as NVIDIA's dcgm-exporter does, drawing power for its work.
    pub gpu: Option<Gpu>,
    /// Enforce a hosted API's rate limits, answering 429 beyond them and saying them in every
    /// answer's headers.
    pub rate_limit: Option<RateLimits>,
}

/// `rate-limit rpm=500 tpm=200000 burst="60s"`: a hosted API's limits per minute, enforced as
/// its token buckets are (each full at the start, holding `burst`'s worth of the budget,
/// refilled evenly: `rpm / 60` requests a second). A
/// request costs one request and its prompt tokens plus its `max_tokens` (what OpenAI counts
/// against a token limit up front); one the buckets cannot pay is answered 429 with how long
/// to wait, and every `/v1` answer says what is left, in its API's headers (OpenAI's
/// `x-ratelimit-*`, Anthropic's `anthropic-ratelimit-*` for `/v1/messages`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimits {
    /// Requests per minute.
    pub rpm: Option<u64>,
    /// Tokens per minute.
    pub tpm: Option<u64>,
    /// How much of a minute's budget each bucket holds (`burst="1s"`: a second's, as OpenAI
    /// says it may enforce 60,000 a minute as 1,000 a second); a whole minute's by default.
    pub burst: Duration,
}

/// `gpu count=2 idle="70W" prefill="0.2mJ" decode="0.3J" memory="80GiB"`: the GPUs the
/// simulator says it runs on, in dcgm-exporter's names on its `/metrics`. Their energy is
/// exactly `count × idle` watts over time, plus `prefill` per prompt token computed and
/// `decode` per token generated, spread evenly over the GPUs; so a run's energy per output
/// token has a known answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Gpu {
    /// GPUs (one series each, labelled `gpu="0"`...).
    pub count: u32,
    /// Each GPU's power with nothing to do, W.
    pub idle_w: f64,
    /// Energy per prompt token computed (the prefix cache's hits cost nothing), J.
    pub prefill_j: f64,
    /// Energy per token generated, J.
    pub decode_j: f64,
    /// Each GPU's memory, MiB: 90% of it in use from the start, as vLLM's default
    /// `gpu-memory-utilization` takes it for the weights and the KV cache.
    pub memory_mib: u64,
}

/// `vision patch=28 encode="20ms" per-token="50us" audio-tokens=25`: what a request's media
/// cost the simulator. An image of w×h pixels is ⌈w/patch⌉·⌈h/patch⌉ prompt tokens (Qwen2-VL's
/// count, with 28-pixel patches after merging); a clip is ⌈seconds × audio-tokens⌉ (Qwen2-Audio
/// hears 25 tokens a second). Before its first token, a request waits `encode` per image
/// (the vision encoder's pass) and `per-token` per media token; the tokens are also prompt
/// tokens (usage says them; the engine prefills them).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Vision {
    /// Pixels per side of one image token.
    pub patch: u32,
    /// The encoder's time per image.
    pub encode: Duration,
    /// Time per media token, before the first token.
    pub per_token: Duration,
    /// Tokens per second of audio.
    pub audio_tokens_per_second: f64,
}

impl Vision {
    /// Prompt tokens of an image of `width`×`height` pixels.
    pub fn image_tokens(&self, width: u32, height: u32) -> u64 {
        let patch = self.patch.max(1);
        u64::from(width.div_ceil(patch)) * u64::from(height.div_ceil(patch))
    }

    /// Prompt tokens of `seconds` of audio.
    pub fn audio_tokens(&self, seconds: f64) -> u64 {
        (seconds * self.audio_tokens_per_second).ceil().max(0.0) as u64
    }
}

/// `reasoning 200 field="reasoning_content"`: the simulator's chat answers begin with this many
/// reasoning tokens (within the request's max_tokens, as servers count them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reasoning {
    /// Reasoning tokens before the answer.
    pub tokens: u32,
    /// The delta field they stream in.
    pub field: ReasoningField,
    /// Whether usage says how many (`completion_tokens_details.reasoning_tokens`).
    pub in_usage: bool,
}

/// The two spellings servers stream reasoning in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReasoningField {
    /// `reasoning_content` (vLLM up to 0.10, SGLang, DeepSeek's API).
    ReasoningContent,
    /// `reasoning` (newer vLLM, gpt-oss through vLLM, Ollama).
    Reasoning,
}

impl ReasoningField {
    /// The JSON field.
    pub fn as_str(self) -> &'static str {
        match self {
            ReasoningField::ReasoningContent => "reasoning_content",
            ReasoningField::Reasoning => "reasoning",
        }
    }
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
            reasoning: None,
            tool_rounds: 1,
            models: Vec::new(),
            answer_as: Vec::new(),
            api_key_env: None,
            vision: None,
            gpu: None,
            rate_limit: None,
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
    /// Share of requests answered with HTTP 529 "overloaded" (Anthropic's
    /// `overloaded_error`; in each API's error shape).
    pub overloaded: f64,
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
