//! `/v1/messages`: Anthropic's Messages API. A stream is named events: `message_start` (with
//! the input usage), content blocks (thinking, text, a tool use) each started, written as
//! deltas and stopped, then `message_delta` (the stop reason and output tokens) and
//! `message_stop`. Errors have Anthropic's own shape and type names.

use serde_json::{json, Value};

use super::blocks::{Block, Blocks};
use super::{cached_tokens, Counts, Finish, Frame, Whole};
use crate::sim::stream::{json_fragment, SimRequest};

/// One Messages answer's stream.
pub struct Stream<'a> {
    request: &'a SimRequest,
    id: &'a str,
    blocks: Blocks,
}

impl<'a> Stream<'a> {
    pub(super) fn new(request: &'a SimRequest, id: &'a str) -> Stream<'a> {
        Stream {
            request,
            id,
            blocks: Blocks::default(),
        }
    }

    pub(super) fn start(&self) -> Vec<Frame> {
        let request = self.request;
        vec![Frame::Named(
            "message_start",
            json!({"type": "message_start", "message": {
                "id": self.id, "type": "message", "role": "assistant", "content": [],
                "model": request.model, "stop_reason": null, "stop_sequence": null,
                "usage": usage(request, 1)}}),
        )]
    }

    pub(super) fn reasoning(&mut self, text: &str) -> Vec<Frame> {
        self.delta(
            Block::Reasoning,
            json!({"type": "thinking_delta", "thinking": text}),
        )
    }

    pub(super) fn text(&mut self, text: &str) -> Vec<Frame> {
        self.delta(Block::Text, json!({"type": "text_delta", "text": text}))
    }

    pub(super) fn tool_call(&mut self, fragment: &str, first: bool) -> Vec<Frame> {
        let mut frames = Vec::new();
        if first {
            frames = self.open_as(Block::Call);
        }
        frames
            .push(self.delta_frame(json!({"type": "input_json_delta", "partial_json": fragment})));
        frames
    }

    pub(super) fn finish(&mut self, finish: Finish, counts: Counts) -> Vec<Frame> {
        let mut frames = self.close();
        let stop_reason = match finish {
            Finish::Length => "max_tokens",
            Finish::ToolCalls => "tool_use",
        };
        frames.push(Frame::Named(
            "message_delta",
            json!({"type": "message_delta",
                   "delta": {"stop_reason": stop_reason, "stop_sequence": null},
                   "usage": {"output_tokens": counts.completion}}),
        ));
        frames.push(Frame::Named(
            "message_stop",
            json!({"type": "message_stop"}),
        ));
        frames
    }

    /// A delta in a block of `kind`, opening it first when another is open.
    fn delta(&mut self, kind: Block, delta: Value) -> Vec<Frame> {
        let mut frames = self.open_as(kind);
        frames.push(self.delta_frame(delta));
        frames
    }

    fn delta_frame(&self, delta: Value) -> Frame {
        Frame::Named(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": self.blocks.index, "delta": delta}),
        )
    }

    /// Opens a content block of `kind`, closing the one open before it.
    fn open_as(&mut self, kind: Block) -> Vec<Frame> {
        if !self.blocks.needs(kind) {
            return Vec::new();
        }
        let mut frames = self.close();
        self.blocks.begin(kind);
        let block = match kind {
            Block::Reasoning => json!({"type": "thinking", "thinking": ""}),
            Block::Text => json!({"type": "text", "text": ""}),
            Block::Call => json!({"type": "tool_use", "id": format!("toolu_{}", self.id),
                                  "name": self.request.tool.as_deref().unwrap_or("tool"),
                                  "input": {}}),
        };
        frames.push(Frame::Named(
            "content_block_start",
            json!({"type": "content_block_start", "index": self.blocks.index,
                   "content_block": block}),
        ));
        frames
    }

    /// Closes the open block.
    fn close(&mut self) -> Vec<Frame> {
        match self.blocks.end() {
            Some(closed) => vec![Frame::Named(
                "content_block_stop",
                json!({"type": "content_block_stop", "index": closed.index}),
            )],
            None => Vec::new(),
        }
    }
}

/// The usage: `input_tokens` leaves out what the prefix cache served.
fn usage(request: &SimRequest, output_tokens: usize) -> Value {
    let cached = cached_tokens(request);
    json!({"input_tokens": request.prompt_tokens.saturating_sub(cached),
           "cache_read_input_tokens": cached, "cache_creation_input_tokens": 0,
           "output_tokens": output_tokens})
}

/// A whole message: its content blocks (thinking, then text or a tool use).
pub(super) fn whole(request: &SimRequest, id: &str, answer: Whole<'_>) -> Value {
    let mut content = Vec::new();
    if let Some((_, thought)) = answer.thought {
        content.push(json!({"type": "thinking", "thinking": thought, "signature": ""}));
    }
    let stop_reason = match &request.tool {
        Some(tool) => {
            let arguments = format!("{{\"query\":\"{}\"}}", answer.text.trim());
            let input: Value = serde_json::from_str(&arguments).unwrap_or(json!({}));
            content.push(json!({"type": "tool_use", "id": format!("toolu_{id}"), "name": tool, "input": input}));
            "tool_use"
        }
        None => {
            let text = if request.json_answer {
                json_fragment(answer.text, true, true)
            } else {
                answer.text.to_string()
            };
            content.push(json!({"type": "text", "text": text}));
            "max_tokens"
        }
    };
    json!({"id": id, "type": "message", "role": "assistant", "model": request.model,
           "content": content, "stop_reason": stop_reason, "stop_sequence": null,
           "usage": usage(request, answer.counts.completion)})
}

/// An error as Anthropic writes one; `kind` is OpenAI's type name, turned into Anthropic's.
pub(super) fn error_body(message: &str, kind: &str) -> Value {
    let kind = match kind {
        "RateLimitError" => "rate_limit_error",
        "NotFoundError" | "not_found_error" => "not_found_error",
        "invalid_request_error" => "invalid_request_error",
        "overloaded_error" => "overloaded_error",
        _ => "api_error",
    };
    json!({"type": "error", "error": {"type": kind, "message": message}})
}
