//! API dialects: how a request is spoken to one kind of endpoint, and how its answer is read.
//!
//! A [`Dialect`] knows the path under the API root, the request body for a prompt, and how one
//! streamed event (or a whole non-streamed body) yields generated text, a finish_reason and
//! usage. Everything else (pacing, timing, SSE framing, token counting, metrics) is the same for
//! every dialect, so adding one is one file here and one arm in [`dialect`]; the pacer, the
//! recorder and the metrics do not change. OpenAI's chat and completions APIs are the first two
//! ([`chat`], [`completions`]); they share the OpenAI envelope in [`openai`].

mod chat;
mod completions;
mod fast;
mod openai;

use std::sync::Arc;

use crate::plan::Api;
use crate::planner::Prompt;

/// What every request of a run asks for besides its prompt.
#[derive(Debug, Clone)]
pub struct BodyOptions {
    /// The `model` field.
    pub model: String,
    /// Stream the answer (SSE), asking for usage in the stream.
    pub stream: bool,
    /// Ask for usage on every streamed chunk (vLLM's `continuous_usage_stats`).
    pub continuous_usage: bool,
    /// Ask for exactly `max_tokens` (`ignore_eos`, `min_tokens`).
    pub ignore_eos: bool,
    /// The plan's own fields (sampling parameters, server knobs), merged into every body.
    pub extra: Arc<serde_json::Map<String, serde_json::Value>>,
}

/// Token counts a server reports.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Usage {
    /// Prompt tokens, as the server counted them (chat template included).
    pub prompt: Option<u64>,
    /// Generated tokens so far (or in all, in a final usage chunk).
    pub completion: Option<u64>,
    /// Prompt tokens served from the server's prefix cache.
    pub cached: Option<u64>,
    /// A field that held no count of tokens (negative, fractional): its name and value.
    pub invalid: Option<(&'static str, f64)>,
}

/// What one event (or one non-streamed body) said, besides the text it appended.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Decoded {
    /// The finish_reason of its choice, where it ends the answer.
    pub finish_reason: Option<String>,
    /// Its usage, where it carries one.
    pub usage: Option<Usage>,
    /// The error it carries instead of an answer (`{"error": {...}}`), as a message.
    pub error: Option<String>,
}

/// Why an event is not one a dialect understands (it is not the JSON the dialect expects).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct DecodeError(pub String);

/// One kind of endpoint: how to ask and how to read.
pub trait Dialect: Send + Sync + std::fmt::Debug {
    /// The path under the API root, e.g. `/chat/completions`.
    fn path(&self) -> &'static str;

    /// The JSON body asking for `max_tokens` tokens after `prompt`.
    fn body(&self, prompt: &Prompt, max_tokens: u32, options: &BodyOptions) -> Vec<u8>;

    /// Reads one streamed event's data (never `[DONE]`), appending its generated text to
    /// `text`. `Err` says why the event is not one this dialect understands.
    fn decode_event(&self, data: &str, text: &mut String) -> Result<Decoded, DecodeError>;

    /// Reads a whole non-streamed response body, appending the answer to `text`.
    fn decode_body(&self, body: &str, text: &mut String) -> Result<Decoded, DecodeError> {
        self.decode_event(body, text)
    }
}

/// The dialect of a plan's `api`.
pub fn dialect(api: Api) -> Arc<dyn Dialect> {
    match api {
        Api::Chat => Arc::new(chat::Chat),
        Api::Completions => Arc::new(completions::Completions),
    }
}
