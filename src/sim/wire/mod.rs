//! The wire formats the simulator speaks, one file per API, each written from the APIs'
//! documentation and the servers' bytes (vLLM's for chat and completions, OpenAI's and
//! llama.cpp's for Responses, Anthropic's and llama.cpp's for Messages) — never from llmload's
//! own client ([`crate::api`]), so that the two cannot agree on the same mistake. Each file's
//! tests hold its answers against llama.cpp's captured bytes (`tests/fixtures/wire/`), the
//! same files the client's dialect tests read (`captured`).
//!
//! [`Wire`] says which API a route speaks; [`Encoder`] writes one answer's stream as that API's
//! events; [`whole`] writes an answer that is not streamed.
//!
//! What this is not: reading a request (`stream`), or when each token is due (`streaming`).

mod blocks;
#[cfg(test)]
mod captured;
mod chat;
mod completions;
mod embeddings;
mod messages;
mod openai;
mod rerank;
mod responses;

use serde_json::Value;

use super::stream::SimRequest;
pub(super) use openai::usage;

/// An API the simulator serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wire {
    /// `/v1/chat/completions`
    Chat,
    /// `/v1/completions`
    Completions,
    /// `/v1/responses`
    Responses,
    /// `/v1/messages`
    Messages,
    /// `/v1/embeddings`
    Embeddings,
    /// `/v1/rerank`
    Rerank,
}

impl Wire {
    /// The API a POST to `path` speaks.
    pub fn from_path(path: &str) -> Option<Wire> {
        Some(match path {
            "/v1/chat/completions" => Wire::Chat,
            "/v1/completions" => Wire::Completions,
            "/v1/responses" => Wire::Responses,
            "/v1/messages" => Wire::Messages,
            "/v1/embeddings" => Wire::Embeddings,
            "/v1/rerank" | "/v1/reranking" => Wire::Rerank,
            _ => return None,
        })
    }

    /// The prefix of its answers' ids.
    pub fn id_prefix(self) -> &'static str {
        match self {
            Wire::Chat => "chatcmpl",
            Wire::Completions => "cmpl",
            Wire::Responses => "resp",
            Wire::Messages => "msg",
            Wire::Embeddings => "embd",
            Wire::Rerank => "rerank",
        }
    }

    /// Whether it answers a batch of inputs (embeddings, rerank) rather than generating.
    pub fn batches(self) -> bool {
        matches!(self, Wire::Embeddings | Wire::Rerank)
    }

    /// Whether a reasoning model's thinking comes in its answers (a completion has no place
    /// for it).
    pub fn reasons(self) -> bool {
        matches!(self, Wire::Chat | Wire::Responses | Wire::Messages)
    }

    /// An error body as this API writes one; `kind` is OpenAI's type name.
    pub fn error_body(self, message: &str, kind: &str) -> Value {
        match self {
            Wire::Messages => messages::error_body(message, kind),
            Wire::Chat | Wire::Completions | Wire::Responses | Wire::Embeddings | Wire::Rerank => {
                openai::error_body(message, kind)
            }
        }
    }
}

/// One server-sent event: a data line (OpenAI's chunks), a named event (Responses',
/// Anthropic's), or a fixed line (`[DONE]`).
pub enum Frame {
    Data(Value),
    Named(&'static str, Value),
    Raw(&'static str),
}

impl Frame {
    /// Its bytes on the wire.
    pub fn to_sse(&self) -> String {
        match self {
            Frame::Data(value) => format!("data: {value}\n\n"),
            Frame::Named(name, value) => format!("event: {name}\ndata: {value}\n\n"),
            Frame::Raw(line) => format!("data: {line}\n\n"),
        }
    }
}

/// Why an answer ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finish {
    /// It reached its length cap.
    Length,
    /// It called a tool.
    ToolCalls,
}

/// Token counts at the end of an answer.
#[derive(Debug, Clone, Copy)]
pub struct Counts {
    pub completion: usize,
    /// Reasoning tokens among them, when the simulator is set to say so.
    pub reasoning: Option<usize>,
}

/// What a whole (not streamed) answer holds.
#[derive(Debug, Clone, Copy)]
pub struct Whole<'a> {
    /// The generated words (a tool call's argument or a JSON answer is made of them).
    pub text: &'a str,
    /// A reasoning model's thinking, and the field chat says it in.
    pub thought: Option<(&'a str, &'a str)>,
    pub counts: Counts,
}

/// A whole answer in its API's shape; `seed` draws an embedding's or a ranking's numbers.
pub fn whole(request: &SimRequest, id: &str, answer: Whole<'_>, seed: u64) -> Value {
    match request.wire {
        Wire::Chat => chat::whole(request, id, answer),
        Wire::Completions => completions::whole(request, id, answer),
        Wire::Responses => responses::whole(request, id, answer),
        Wire::Messages => messages::whole(request, id, answer),
        Wire::Embeddings => embeddings::whole(request, seed),
        Wire::Rerank => rerank::whole(request, id, seed),
    }
}

/// Writes one streamed answer as its API's events.
pub enum Encoder<'a> {
    Chat(chat::Stream<'a>),
    Completions(completions::Stream<'a>),
    Responses(responses::Stream<'a>),
    Messages(messages::Stream<'a>),
}

impl<'a> Encoder<'a> {
    /// The encoder of `request`'s API; none for embeddings and rankings, which are answered
    /// whole.
    pub fn new(request: &'a SimRequest, id: &'a str) -> Option<Encoder<'a>> {
        Some(match request.wire {
            Wire::Chat => Encoder::Chat(chat::Stream { request, id }),
            Wire::Completions => Encoder::Completions(completions::Stream { request, id }),
            Wire::Responses => Encoder::Responses(responses::Stream::new(request, id)),
            Wire::Messages => Encoder::Messages(messages::Stream::new(request, id)),
            Wire::Embeddings | Wire::Rerank => return None,
        })
    }

    /// What opens the stream.
    pub fn start(&mut self) -> Vec<Frame> {
        match self {
            Encoder::Chat(stream) => stream.start(),
            Encoder::Completions(_) => Vec::new(),
            Encoder::Responses(stream) => stream.start(),
            Encoder::Messages(stream) => stream.start(),
        }
    }

    /// A piece of a reasoning model's thinking; `field` is chat's field for it. (A completion
    /// has no place for thinking: `Wire::reasons` keeps it from being asked.)
    pub fn reasoning(&mut self, text: &str, field: &str) -> Vec<Frame> {
        match self {
            Encoder::Chat(stream) => stream.reasoning(text, field),
            Encoder::Completions(stream) => stream.text(text),
            Encoder::Responses(stream) => stream.reasoning(text),
            Encoder::Messages(stream) => stream.reasoning(text),
        }
    }

    /// A piece of the answer's text.
    pub fn text(&mut self, text: &str) -> Vec<Frame> {
        match self {
            Encoder::Chat(stream) => stream.text(text),
            Encoder::Completions(stream) => stream.text(text),
            Encoder::Responses(stream) => stream.text(text),
            Encoder::Messages(stream) => stream.text(text),
        }
    }

    /// A fragment of a tool call's arguments; `first` opens the call. (A completion request
    /// offers no tools.)
    pub fn tool_call(&mut self, fragment: &str, first: bool) -> Vec<Frame> {
        match self {
            Encoder::Chat(stream) => stream.tool_call(fragment, first),
            Encoder::Completions(stream) => stream.text(fragment),
            Encoder::Responses(stream) => stream.tool_call(fragment, first),
            Encoder::Messages(stream) => stream.tool_call(fragment, first),
        }
    }

    /// What ends the stream: the finish, the usage when asked (always, for Responses and
    /// Messages), the end marker.
    pub fn finish(&mut self, finish: Finish, counts: Counts) -> Vec<Frame> {
        match self {
            Encoder::Chat(stream) => stream.finish(finish, counts),
            Encoder::Completions(stream) => stream.finish(finish, counts),
            Encoder::Responses(stream) => stream.finish(finish, counts),
            Encoder::Messages(stream) => stream.finish(finish, counts),
        }
    }
}

/// The prompt tokens the prefix cache served this request (none without a cache).
fn cached_tokens(request: &SimRequest) -> usize {
    request
        .cached
        .as_ref()
        .map_or(0, |c| c.load(std::sync::atomic::Ordering::Relaxed) as usize)
}
