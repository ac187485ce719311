//! API dialects: how a request is spoken to one kind of endpoint, and how its answer is read.
//!
//! Each dialect is one folder ([`chat`], [`completions`], [`responses`], [`messages`]; the
//! OpenAI envelope the first two share is [`openai`]) implementing [`Dialect`]: its name in plans, its path under the API root, the body
//! for a prompt and the body fields it reserves, how credentials are sent, and its streaming
//! grammar — each SSE event (its `event:` name included) decoded into typed parts: answer text,
//! reasoning text, usage, a finish reason, a server error, the end of the stream. The executor,
//! the recorder and the metrics see only those; pacing, timing, SSE framing ([`sse`]), token
//! counting and metrics are the same for every dialect.
//!
//! Adding a dialect is one folder here, one variant of [`Api`] and its arm in [`Api::dialect`].
//!
//! What this module is not: a transport (that is [`crate::executor::transport`]), or the
//! simulator's encoder of the same wire formats ([`crate::sim`] keeps its own, independent one,
//! so that the client and the simulator cannot agree on the same bug).

mod answered_model;
#[cfg(test)]
mod captured;
pub mod chat;
pub mod completions;
pub mod embeddings;
pub mod messages;
mod needs;
pub mod openai;
mod prompt;
pub mod rerank;
pub mod responses;
pub mod sse;

use std::sync::Arc;

pub(crate) use answered_model::answered_model;
pub use needs::Need;
pub use prompt::{Attachment, AttachmentKind, MediaPosition, Message, Prompt, ToolCall};

/// The API a plan speaks: one dialect each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Api {
    /// `/v1/chat/completions`: the prompt as messages ([`chat`]).
    Chat,
    /// `/v1/completions`: the prompt as `prompt` ([`completions`]).
    Completions,
    /// `/v1/responses`: OpenAI's Responses API, the prompt as `input` ([`responses`]).
    Responses,
    /// `/v1/messages`: Anthropic's Messages API ([`messages`]).
    Messages,
    /// `/v1/embeddings`: a batch of inputs embedded ([`embeddings`]).
    Embeddings,
    /// `/v1/rerank`: documents ranked against a query ([`rerank`]).
    Rerank,
}

impl Api {
    /// Every API, in the order help lists them.
    pub const ALL: [Api; 6] = [
        Api::Chat,
        Api::Completions,
        Api::Responses,
        Api::Messages,
        Api::Embeddings,
        Api::Rerank,
    ];

    /// Its dialect.
    pub fn dialect(self) -> &'static dyn Dialect {
        match self {
            Api::Chat => &chat::Chat,
            Api::Completions => &completions::Completions,
            Api::Responses => &responses::Responses,
            Api::Messages => &messages::Messages,
            Api::Embeddings => &embeddings::Embeddings,
            Api::Rerank => &rerank::Rerank,
        }
    }

    /// The API a plan names (`"chat"`, `"completions"`).
    pub fn from_name(name: &str) -> Option<Api> {
        Api::ALL.into_iter().find(|api| api.as_str() == name)
    }

    /// The name plans and reports use.
    pub fn as_str(self) -> &'static str {
        self.dialect().name()
    }
}

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
    /// Of the generated tokens, those a reasoning model spent thinking
    /// (`completion_tokens_details.reasoning_tokens`).
    pub reasoning: Option<u64>,
    /// A field that held no count of tokens (negative, fractional): its name and value.
    pub invalid: Option<(&'static str, f64)>,
}

/// Reads the token counts of a usage object, sent as any JSON number so that a negative or
/// fractional one is reported as what it is (the first such field is kept) rather than as "not
/// valid JSON". Every dialect's usage is read through it.
#[derive(Debug, Default)]
pub(crate) struct CountReader {
    invalid: Option<(&'static str, f64)>,
}

/// A usage field as sent: any JSON value, so that a count sent as a string (`"12"`) or an
/// object is reported as no count of tokens instead of failing the whole answer as malformed.
#[derive(Debug, Clone)]
pub(crate) enum WireCount {
    Number(serde_json::Number),
    /// Not a number (a string, a bool, an array, an object).
    Other,
}

impl<'de> serde::Deserialize<'de> for WireCount {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Ok(match serde_json::Value::deserialize(deserializer)? {
            serde_json::Value::Number(n) => WireCount::Number(n),
            _ => WireCount::Other,
        })
    }
}

impl CountReader {
    /// `field`'s count, if it was sent and is one (a value that is not a number is kept as
    /// NaN: "not a number").
    pub(crate) fn read(&mut self, field: &'static str, n: Option<WireCount>) -> Option<u64> {
        let (count, value) = match n? {
            WireCount::Number(n) => (n.as_u64(), n.as_f64().unwrap_or(f64::NAN)),
            WireCount::Other => (None, f64::NAN),
        };
        if count.is_none() && self.invalid.is_none() {
            self.invalid = Some((field, value));
        }
        count
    }

    /// The first field that held no count: its name and value.
    pub(crate) fn invalid(self) -> Option<(&'static str, f64)> {
        self.invalid
    }
}

impl Usage {
    /// `later`'s counts over these, field by field: a dialect that says its counts in pieces
    /// (Anthropic's input tokens when the message starts, output tokens at its end) leaves the
    /// whole.
    pub fn merge(&mut self, later: Usage) {
        fn over(kept: &mut Option<u64>, later: Option<u64>) {
            if later.is_some() {
                *kept = later;
            }
        }
        over(&mut self.prompt, later.prompt);
        over(&mut self.completion, later.completion);
        over(&mut self.cached, later.cached);
        over(&mut self.reasoning, later.reasoning);
        if self.invalid.is_none() {
            self.invalid = later.invalid;
        }
    }
}

/// An error the server sent instead of an answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerError {
    /// An error object in a chunk or a body (`{"error": {"message": …}}`): its message.
    Object(String),
    /// An SSE event named as an error (`event: error`): its data, as sent.
    Event(String),
    /// The server said it is overloaded (Anthropic's `overloaded_error`): its message. Counted
    /// apart from other errors, as HTTP 529 is.
    Overloaded(String),
    /// The client is over its rate limit (Anthropic's `rate_limit_error`): its message.
    /// Throttled, as HTTP 429 is.
    RateLimited(String),
}

impl ServerError {
    /// What the server said.
    pub fn message(&self) -> &str {
        match self {
            ServerError::Object(m)
            | ServerError::Event(m)
            | ServerError::Overloaded(m)
            | ServerError::RateLimited(m) => m,
        }
    }
}

/// What one event (or one non-streamed body) said, besides the text it appended.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Decoded {
    /// The finish reason of its choice, where it ends the answer, in OpenAI's words whatever
    /// the dialect (`stop`, `length`, `tool_calls`, `content_filter`), so that one plan's
    /// checks read every dialect alike; a reason with no OpenAI word is kept as the server
    /// said it.
    pub finish_reason: Option<String>,
    /// Its usage, where it carries one.
    pub usage: Option<Usage>,
    /// The error it carries instead of an answer.
    pub error: Option<ServerError>,
    /// It ends the stream (`[DONE]`, `message_stop`, `response.completed`): nothing after it
    /// belongs to the answer. What else the event carries (a finish, usage) still counts.
    pub end: bool,
    /// How many inputs the answer covers (embeddings returned, documents ranked): an answer
    /// of an API that generates no text.
    pub inputs: Option<u64>,
}

/// What kind of generated text a part is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// The answer itself (`content`, `text`).
    Answer,
    /// A reasoning model's thinking before its answer (`reasoning_content`, `reasoning`).
    Reasoning,
    /// A tool call's name and argument fragments (`tool_calls`).
    ToolCall,
}

/// Where a dialect writes the generated text of an event: appended to the exchange's one
/// buffer (no allocation per token), with how much of it was reasoning.
#[derive(Debug)]
pub struct Generated<'a> {
    text: &'a mut String,
    reasoning_bytes: usize,
    tool_call_bytes: usize,
    tool_calls: u32,
    /// Where the calls are put together, when the caller keeps them (an agent loop sends
    /// them back).
    calls: Option<&'a mut Vec<ToolCall>>,
}

/// Tool calls put together from their fragments, at most: an index beyond is counted but not
/// kept (a server's index must not size our memory).
pub const MAX_KEPT_TOOL_CALLS: u32 = 128;

impl<'a> Generated<'a> {
    /// Appends to `text`.
    pub fn new(text: &'a mut String) -> Generated<'a> {
        Generated {
            text,
            reasoning_bytes: 0,
            tool_call_bytes: 0,
            tool_calls: 0,
            calls: None,
        }
    }

    /// Appends to `text`, and puts the tool calls together in `calls`: the `made` calls so far
    /// (those kept in `calls`, and those beyond [`MAX_KEPT_TOOL_CALLS`] counted only) are the
    /// calls made before (dialects that number no calls, Responses' and Anthropic's, add the
    /// next call after them; counting from the kept ones alone stalled at 129).
    pub fn with_calls(
        text: &'a mut String,
        calls: &'a mut Vec<ToolCall>,
        made: u32,
    ) -> Generated<'a> {
        Generated {
            tool_calls: made.max(calls.len() as u32),
            calls: Some(calls),
            ..Generated::new(text)
        }
    }

    /// Appends one part of the generated text.
    pub fn push(&mut self, part: Part, piece: &str) {
        self.text.push_str(piece);
        match part {
            Part::Reasoning => self.reasoning_bytes += piece.len(),
            Part::ToolCall => self.tool_call_bytes += piece.len(),
            Part::Answer => {}
        }
    }

    /// A fragment of tool call number `index` (from 0) came, with its id, its function's name
    /// and a piece of its arguments where it carries them: the answer has at least `index + 1`
    /// calls, and the name and arguments are generated text.
    pub fn tool_call(
        &mut self,
        index: u32,
        id: Option<&str>,
        name: Option<&str>,
        arguments: Option<&str>,
    ) {
        self.tool_calls = self.tool_calls.max(index.saturating_add(1));
        for piece in [name, arguments].into_iter().flatten() {
            self.push(Part::ToolCall, piece);
        }
        let Some(calls) = self
            .calls
            .as_deref_mut()
            .filter(|_| index < MAX_KEPT_TOOL_CALLS)
        else {
            return;
        };
        if calls.len() <= index as usize {
            calls.resize_with(index as usize + 1, ToolCall::default);
        }
        let call = &mut calls[index as usize];
        if let Some(id) = id.filter(|id| !id.is_empty()) {
            call.id = id.to_string();
        }
        if let Some(name) = name {
            call.name.push_str(name);
        }
        if let Some(arguments) = arguments {
            call.arguments.push_str(arguments);
        }
    }

    /// Bytes of reasoning text appended so far.
    pub fn reasoning_bytes(&self) -> usize {
        self.reasoning_bytes
    }

    /// Bytes of tool calls (names, argument fragments) appended so far.
    pub fn tool_call_bytes(&self) -> usize {
        self.tool_call_bytes
    }

    /// How many tool calls the parts so far belong to.
    pub fn tool_calls(&self) -> u32 {
        self.tool_calls
    }
}

/// Why an event is not one a dialect understands (it is not the JSON the dialect expects).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct DecodeError(pub String);

/// What an API does with a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApiKind {
    /// Generates text after a prompt (chat, completions, Responses, Messages).
    Generate,
    /// Embeds a batch of inputs.
    Embed,
    /// Ranks a batch of documents against a query.
    Rank,
}

impl ApiKind {
    /// Answers a batch whole (embeddings, rerank): no tokens stream, so what a request cost is
    /// its E2E, per input, and inputs per second.
    pub fn answers_batches(self) -> bool {
        match self {
            ApiKind::Generate => false,
            ApiKind::Embed | ApiKind::Rank => true,
        }
    }
}

/// What a dialect can do, which decides what a plan may ask of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capabilities {
    /// What it does with a request: generate, embed or rank.
    pub kind: ApiKind,
    /// It streams its answers (SSE).
    pub streaming: bool,
    /// It can send usage on every streamed chunk (vLLM's `continuous_usage_stats`), which
    /// gives exact tokens per chunk. (Every dialect here sends usage at its stream's end.)
    pub usage_in_stream: bool,
    /// It can be asked for an exact number of output tokens (`ignore_eos`, `min_tokens`).
    pub exact_lengths: bool,
    /// It can offer tools, carry the calls an answer makes and send their results back.
    pub tool_calls: bool,
    /// It can ask for structured output (the plan's `response-format`).
    pub structured_output: bool,
    /// It can carry images in a request (the workload's `images`).
    pub images: bool,
    /// It can carry audio in a request (the workload's `audio`).
    pub audio: bool,
}

/// What a family of dialects shares beside their bodies and choices (OpenAI's chat and
/// completions share one, [`openai::ENVELOPE`]): what they can do, the body fields they write
/// themselves, how they send a key, and what ends their streams.
#[derive(Debug)]
pub struct Envelope {
    /// What its dialects can do.
    pub capabilities: Capabilities,
    /// Body fields its dialects write themselves, each with what a plan should do instead.
    pub reserved_fields: &'static [(&'static str, &'static str)],
    /// The headers that carry an API key, with their values for the key.
    pub credentials: fn(&str) -> Vec<(reqwest::header::HeaderName, String)>,
    /// The names of the headers `credentials` sets.
    pub credential_headers: &'static [&'static str],
    /// Headers every request carries, with or without a key (Anthropic's `anthropic-version`);
    /// a plan's own header of the same name replaces one.
    pub fixed_headers: &'static [(&'static str, &'static str)],
    /// What ends a stream, as an error message names it.
    pub stream_end: &'static str,
}

/// One kind of endpoint: how to ask and how to read.
pub trait Dialect: Send + Sync + std::fmt::Debug {
    /// Its name in plans and reports (`api "chat"`).
    fn name(&self) -> &'static str;

    /// What it does in OpenTelemetry's GenAI semantic conventions (`gen_ai.operation.name`:
    /// `chat`, `text_completion`, `embeddings`; `rerank`, which they do not name yet), for the
    /// spans `run --otlp` exports.
    fn operation(&self) -> &'static str;

    /// What a plan's `api` help says of it.
    fn summary(&self) -> &'static str;

    /// The path under the API root, e.g. `/chat/completions`.
    fn path(&self) -> &'static str;

    /// Its family's envelope: capabilities, reserved fields, credentials, end of stream.
    fn envelope(&self) -> &'static Envelope;

    /// What it can do.
    fn capabilities(&self) -> Capabilities {
        self.envelope().capabilities
    }

    /// The body fields it writes itself, each with what a plan should do instead: a plan may
    /// not set them through `sampling` or `body`.
    fn reserved_fields(&self) -> &'static [(&'static str, &'static str)] {
        self.envelope().reserved_fields
    }

    /// What a plan should do instead of setting `field`, when the dialect writes it itself.
    fn reserved(&self, field: &str) -> Option<&'static str> {
        self.reserved_fields()
            .iter()
            .find(|(own, _)| *own == field)
            .map(|(_, instead)| *instead)
    }

    /// The headers that carry an API key, with their values for `key`.
    fn credentials(&self, key: &str) -> Vec<(reqwest::header::HeaderName, String)> {
        (self.envelope().credentials)(key)
    }

    /// The names of the headers [`Dialect::credentials`] sets (a plan may not set them).
    fn credential_headers(&self) -> &'static [&'static str] {
        self.envelope().credential_headers
    }

    /// Headers every request carries (a plan's header of the same name replaces one).
    fn fixed_headers(&self) -> &'static [(&'static str, &'static str)] {
        self.envelope().fixed_headers
    }

    /// Why it cannot be asked for an exact number of output tokens, when it cannot: the help
    /// of the plan's diagnostic.
    fn no_exact_lengths(&self) -> &'static str {
        "remove ignore-eos=#true from `output`, and judge lengths by finish_reason"
    }

    /// The JSON body asking for `max_tokens` tokens after `prompt`.
    fn body(&self, prompt: &Prompt, max_tokens: u32, options: &BodyOptions) -> Vec<u8>;

    /// Reads one streamed event (its `event:` name, if any, and its data), appending its
    /// generated text to `out`. `Err` says why the event is not one this dialect understands.
    fn decode_event(
        &self,
        name: Option<&str>,
        data: &str,
        out: &mut Generated,
    ) -> Result<Decoded, DecodeError>;

    /// Reads a whole non-streamed response body, appending the answer to `out`.
    fn decode_body(&self, body: &str, out: &mut Generated) -> Result<Decoded, DecodeError>;

    /// What ends its stream, as an error message names it ("a finish_reason or [DONE]").
    fn stream_end(&self) -> &'static str {
        self.envelope().stream_end
    }
}

/// A request body: the dialect's own fields (`own`), then the plan's (`sampling`, `body`),
/// written in chat's names, each moved to the dialect's own name and shape by `rename` where it
/// has one (`None` keeps it as it is). A field the dialect wrote wins: the plan was checked to
/// set none of them.
pub(crate) fn body_with_plan_fields(
    mut own: serde_json::Map<String, serde_json::Value>,
    options: &BodyOptions,
    rename: fn(&str, &serde_json::Value) -> Option<(String, serde_json::Value)>,
) -> Vec<u8> {
    for (key, value) in options.extra.iter() {
        let (key, value) = rename(key, value).unwrap_or_else(|| (key.clone(), value.clone()));
        own.entry(key).or_insert(value);
    }
    serde_json::Value::Object(own).to_string().into_bytes()
}

/// A message's content as parts: its media placed before or after its text, as the plan
/// asks; `text` is the dialect's text part, `media` its part for an attachment (`None` for
/// one it cannot carry: the plan was checked to ask none).
pub(crate) fn content_parts(
    m: &crate::api::Message,
    text: serde_json::Value,
    media: fn(&crate::api::Attachment) -> Option<serde_json::Value>,
) -> serde_json::Value {
    use crate::api::MediaPosition;
    let placed = |position: MediaPosition| {
        m.media
            .iter()
            .filter(move |a| a.position == position)
            .filter_map(media)
    };
    let mut parts: Vec<serde_json::Value> = placed(MediaPosition::Before).collect();
    if !m.content.is_empty() {
        parts.push(text);
    }
    parts.extend(placed(MediaPosition::After));
    serde_json::Value::Array(parts)
}

/// Keeps every plan field as it is (chat's names are the dialect's).
pub(crate) fn same_names(_: &str, _: &serde_json::Value) -> Option<(String, serde_json::Value)> {
    None
}

/// Maps a dialect's finish reason to OpenAI's word for it ([`Decoded::finish_reason`]); one
/// it does not list is kept as said.
pub(crate) fn finish_reason(said: &str, words: &[(&str, &'static str)]) -> String {
    words
        .iter()
        .find(|(theirs, _)| *theirs == said)
        .map_or_else(|| said.to_string(), |(_, ours)| (*ours).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_said_in_pieces_adds_up() {
        let mut usage = Usage {
            prompt: Some(10),
            cached: Some(4),
            completion: Some(1),
            ..Usage::default()
        };
        usage.merge(Usage {
            completion: Some(32),
            ..Usage::default()
        });
        assert_eq!(
            (usage.prompt, usage.cached, usage.completion),
            (Some(10), Some(4), Some(32))
        );
    }

    #[test]
    fn every_api_is_found_by_its_name() {
        for api in Api::ALL {
            assert_eq!(Api::from_name(api.as_str()), Some(api));
            assert!(api.dialect().path().starts_with('/'));
        }
        assert_eq!(Api::from_name("anthropic"), None);
    }
}
