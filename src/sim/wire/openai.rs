//! What OpenAI's chat and completions wires share, as vLLM's OpenAI server writes them: a
//! chunk's envelope, the usage object, an error body, and how a stream ends.

use serde_json::{json, Value};

use super::{cached_tokens, Counts, Finish, Frame};
use crate::sim::stream::SimRequest;

/// A chunk or body around `choice`, null fields included (vLLM's), so that a client's cost of
/// reading the simulator's chunks is its cost of reading vLLM's.
pub(super) fn envelope(request: &SimRequest, id: &str, object: &str, choice: Value) -> Value {
    json!({"id": id, "object": object, "created": request.created, "model": request.model,
           "system_fingerprint": null, "choices": [choice], "usage": null})
}

/// A whole answer's body around `choice`, with its usage.
pub(super) fn body(
    request: &SimRequest,
    id: &str,
    object: &str,
    choice: Value,
    counts: Counts,
) -> Value {
    json!({"id": id, "object": object, "created": request.created, "model": request.model,
           "system_fingerprint": null, "choices": [choice],
           "usage": usage(request, counts.completion, counts.reasoning)})
}

/// Usage after `completion` tokens, of which `reasoning` were reasoning (said in
/// `completion_tokens_details` when it is `Some`, as OpenAI's and DeepSeek's APIs say it).
pub(in crate::sim) fn usage(
    request: &SimRequest,
    completion: usize,
    reasoning: Option<usize>,
) -> Value {
    let prompt = request.prompt_tokens;
    let mut usage = json!({"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion});
    if request.cached.is_some() {
        usage["prompt_tokens_details"] = json!({"cached_tokens": cached_tokens(request)});
    }
    if let Some(reasoning) = reasoning {
        usage["completion_tokens_details"] = json!({"reasoning_tokens": reasoning});
    }
    usage
}

/// An error body: `kind` is its type.
pub(super) fn error_body(message: &str, kind: &str) -> Value {
    json!({"error": {"message": message, "type": kind, "code": null}})
}

/// The finish reason of an answer.
pub(super) fn finish_reason(finish: Finish) -> &'static str {
    match finish {
        Finish::Length => "length",
        Finish::ToolCalls => "tool_calls",
    }
}

/// What ends a stream: the chunk with the finish reason (with usage, when every chunk carries
/// it), a usage chunk with no choices when usage was asked, and `[DONE]`. `chunk` writes an
/// empty chunk with the finish reason given.
pub(super) fn end(
    request: &SimRequest,
    finish: Finish,
    counts: Counts,
    chunk: impl Fn(Option<&str>) -> Value,
) -> Vec<Frame> {
    let mut frames = Vec::new();
    let mut last = chunk(Some(finish_reason(finish)));
    if request.continuous_usage {
        last["usage"] = usage(request, counts.completion, counts.reasoning);
    }
    frames.push(Frame::Data(last));
    if request.include_usage {
        let mut value = chunk(None);
        value["choices"] = json!([]);
        value["usage"] = usage(request, counts.completion, counts.reasoning);
        frames.push(Frame::Data(value));
    }
    frames.push(Frame::Raw("[DONE]"));
    frames
}
