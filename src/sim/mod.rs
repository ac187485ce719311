//! The embedded simulator: an OpenAI-compatible server on a loopback port.
//!
//! It serves `/v1/chat/completions` and `/v1/completions` (streaming and not), `/v1/models` and
//! `/health`, with a configurable time to first token, inter-token latency and jitter, so that
//! llmload runs end to end on a machine with no model server and its tests exercise the whole
//! HTTP path. It is not a model of a serving engine's batching (no queue, no KV cache): every
//! request is served as if alone.
//!
//! Streams look like real servers' streams: a role-only first chunk with empty content, a
//! `: ping` comment line, content chunks of `tokens-per-chunk` tokens, a finish chunk, a usage
//! chunk with empty `choices` when `include_usage` is asked, and `data: [DONE]`.

mod server;
mod stream;

pub use server::{serve, SimServer};
