//! The embedded simulator: an OpenAI-compatible server on a loopback port.
//!
//! It serves `/v1/chat/completions`, `/v1/completions`, `/v1/responses` and `/v1/messages`
//! (streaming and not, each in its own API's events: [`wire`]), `/v1/models` and
//! `/health` and `/metrics` (Prometheus text with vLLM's names), so that llmload runs end to end
//! on a machine with no model server and its tests exercise the whole HTTP path. Two timing
//! modes: fixed delays (every request served as if alone: a time to first token, an inter-token
//! latency, jitter), or, when the settings hold an `engine`, a real-time model of a
//! continuous-batching engine ([`engine`]) with a queue, chunked prefill, a KV cache and
//! preemption. Faults (5xx, 429, dropped connections, stalls, malformed chunks, slow headers)
//! are injected at seeded rates in either mode. On request it records when it wrote every token
//! ([`writes`]): the truth that llmload's own timing is measured against. See docs/simulator.md.
//!
//! Streams look like real servers' streams: a role-only first chunk with empty content, a
//! `: ping` comment line, content chunks of `tokens-per-chunk` tokens, a finish chunk, a usage
//! chunk with empty `choices` when `include_usage` is asked, and `data: [DONE]`.

mod answer;
pub(crate) mod engine;
mod gpus;
mod limits;
mod metrics;
mod server;
mod stream;
mod streaming;
mod tls;
mod wire;
pub mod writes;

pub use server::{
    serve, serve_embedded, serve_with, EmbeddedSim, ServeOptions, SimServer, SIM_THREAD_PREFIX,
};
pub use tls::{server_config as tls_server_config, TlsFiles, TlsSetupError};
