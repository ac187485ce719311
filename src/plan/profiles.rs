//! Built-in simulator profiles: engine figures approximating real models on real hardware.
//!
//! They are approximations for trying plans and gates, not measurements, derived by arithmetic
//! from each model's published configuration and each GPU's data sheet:
//! - KV capacity: (GPU memory × vLLM's default 0.9 utilisation − weights) / KV bytes per token,
//!   where KV bytes per token = layers × KV heads × head size × 2 (K and V) × 2 bytes (bf16);
//! - step base: a decode step is memory-bound, so it costs about the weights' bytes over the
//!   memory bandwidth (H100 ≈ 3.3 TB/s, L4 ≈ 0.3 TB/s);
//! - attention per context token: that token's KV bytes over the memory bandwidth;
//! - prefill per token: compute-bound, a round figure of the prefill rates public vLLM
//!   benchmarks report (tens of thousands of tokens/s for 8B on H100).
//!
//! docs/simulator.md explains how to fit a profile to your own server from an llmload run.

use std::time::Duration;

use super::EngineSettings;

/// The built-in profiles' names.
pub const NAMES: [&str; 4] = [
    "llama-3.1-8b-h100",
    "llama-3.1-70b-4xh100",
    "qwen2.5-7b-l4",
    "tiny",
];

const fn us(n: u64) -> Duration {
    Duration::from_micros(n)
}

/// The engine of a built-in profile.
pub fn builtin(name: &str) -> Option<EngineSettings> {
    Some(match name {
        // Llama 3.1 8B, bf16, one H100 80GB: 32 layers × 8 KV heads × 128 × 2 × 2 B = 128 KiB per
        // token; (80 × 0.9 − 16) GB of KV ≈ 430k tokens.
        "llama-3.1-8b-h100" => EngineSettings {
            max_seqs: 256,
            max_batched_tokens: 8192,
            kv_cache_tokens: 430_000,
            block_size: 16,
            prefix_cache: true,
            max_model_len: 32_768,
            max_waiting: 4096,
            queue_full_status: 429,
            step_base: us(6_000),
            // 16 GB of weights / 3.3 TB/s ≈ 5 ms.
            prefill_per_token: us(25), // ~40k prefill tokens/s
            decode_per_seq: us(30),
            attention_per_token: Duration::from_nanos(40), // 128 KiB / 3.3 TB/s
        },
        // Llama 3.1 70B, bf16, tensor parallel over 4 × H100 80GB: 80 layers × 8 × 128 × 2 × 2 B =
        // 320 KiB per token; (320 × 0.9 − 141) GB ≈ 470k tokens.
        "llama-3.1-70b-4xh100" => EngineSettings {
            max_seqs: 256,
            max_batched_tokens: 8192,
            kv_cache_tokens: 470_000,
            block_size: 16,
            prefix_cache: true,
            max_model_len: 32_768,
            max_waiting: 4096,
            queue_full_status: 429,
            // 141 GB of weights / (4 × 3.3 TB/s) ≈ 11 ms, plus all-reduce.
            step_base: us(14_000),
            prefill_per_token: us(100), // ~10k prefill tokens/s
            decode_per_seq: us(60),
            attention_per_token: Duration::from_nanos(25), // 320 KiB / 13 TB/s
        },
        // Qwen2.5 7B, bf16, one L4 24GB: 28 layers × 4 KV heads × 128 × 2 × 2 B = 56 KiB per token;
        // (24 × 0.9 − 15.2) GB ≈ 110k tokens.
        "qwen2.5-7b-l4" => EngineSettings {
            max_seqs: 128,
            max_batched_tokens: 2048,
            kv_cache_tokens: 110_000,
            block_size: 16,
            prefix_cache: true,
            max_model_len: 16_384,
            max_waiting: 1024,
            queue_full_status: 429,
            // 15.2 GB of weights / 0.3 TB/s ≈ 50 ms.
            step_base: us(50_000),
            prefill_per_token: us(200), // ~5k prefill tokens/s
            decode_per_seq: us(120),
            attention_per_token: Duration::from_nanos(190), // 56 KiB / 0.3 TB/s
        },
        // A deliberately small engine that saturates at a few requests per second, for trying
        // plans and gates in seconds on any machine (the quickstart uses it).
        "tiny" => EngineSettings {
            max_seqs: 16,
            max_batched_tokens: 1024,
            kv_cache_tokens: 16_384,
            block_size: 16,
            prefix_cache: true,
            max_model_len: 4096,
            max_waiting: 256,
            queue_full_status: 429,
            step_base: us(4_000),
            prefill_per_token: us(10),
            decode_per_seq: us(1_500),
            attention_per_token: Duration::from_nanos(100),
        },
        _ => return None,
    })
}

/// The starting point of an `engine` block given without a profile.
pub fn default_engine() -> EngineSettings {
    builtin("llama-3.1-8b-h100").expect("a built-in profile")
}
