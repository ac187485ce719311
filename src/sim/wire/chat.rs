//! `/v1/chat/completions`: chunks with a `delta` (the role first, then content, a reasoning
//! model's thinking, a tool call's fragments), as vLLM streams them, and the whole answer's
//! `message`.

use serde_json::{json, Value};

use super::{openai, Counts, Finish, Frame, Whole};
use crate::sim::stream::{json_fragment, SimRequest};

/// One chat answer's stream.
pub struct Stream<'a> {
    pub(super) request: &'a SimRequest,
    pub(super) id: &'a str,
}

impl Stream<'_> {
    /// The role-only first chunk.
    pub(super) fn start(&self) -> Vec<Frame> {
        let delta = json!({"role": "assistant", "content": ""});
        vec![Frame::Data(self.chunk(delta, None))]
    }

    /// Thinking in `field` (`reasoning_content` or `reasoning`), as vLLM streams it.
    pub(super) fn reasoning(&self, text: &str, field: &str) -> Vec<Frame> {
        vec![Frame::Data(self.chunk(json!({ field: text }), None))]
    }

    pub(super) fn text(&self, text: &str) -> Vec<Frame> {
        vec![Frame::Data(self.chunk(json!({ "content": text }), None))]
    }

    /// One fragment of a tool call, as vLLM streams one: the first fragment (`first`) names
    /// the call and its function, the rest add to its arguments.
    pub(super) fn tool_call(&self, arguments: &str, first: bool) -> Vec<Frame> {
        let call = if first {
            json!({"index": 0, "id": format!("call_{}", self.id), "type": "function",
                   "function": {"name": self.request.tool.as_deref().unwrap_or("tool"), "arguments": arguments}})
        } else {
            json!({"index": 0, "function": {"arguments": arguments}})
        };
        vec![Frame::Data(
            self.chunk(json!({ "tool_calls": [call] }), None),
        )]
    }

    pub(super) fn finish(&self, finish: Finish, counts: Counts) -> Vec<Frame> {
        openai::end(self.request, finish, counts, |reason| {
            self.chunk(json!({}), reason)
        })
    }

    fn chunk(&self, delta: Value, finish: Option<&str>) -> Value {
        let choice = json!({"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish});
        openai::envelope(self.request, self.id, "chat.completion.chunk", choice)
    }
}

/// A whole chat answer: its message (with a reasoning model's thinking beside the content, or
/// a tool call instead of it).
pub(super) fn whole(request: &SimRequest, id: &str, answer: Whole<'_>) -> Value {
    let content = if request.json_answer {
        json_fragment(answer.text, true, true)
    } else {
        answer.text.to_string()
    };
    let mut message = json!({"role": "assistant", "content": content});
    if let Some((field, thought)) = answer.thought {
        message[field] = json!(thought);
    }
    let mut finish = Finish::Length;
    if let Some(tool) = &request.tool {
        message["content"] = Value::Null;
        message["tool_calls"] = json!([{"index": 0, "id": format!("call_{id}"), "type": "function",
            "function": {"name": tool, "arguments": format!("{{\"query\":\"{}\"}}", answer.text.trim())}}]);
        finish = Finish::ToolCalls;
    }
    let choice =
        json!({"index": 0, "message": message, "finish_reason": openai::finish_reason(finish)});
    openai::body(request, id, "chat.completion", choice, answer.counts)
}
