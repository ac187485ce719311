//! `/v1/responses`: OpenAI's Responses API. A stream is named events: the response created and
//! in progress, then output items (reasoning, a message, a function call) each added, written
//! as deltas and done, then the response completed (or incomplete, when its cap cut it), always
//! with usage and no `[DONE]`.

use serde_json::{json, Value};

use super::blocks::{Block, Blocks, Closed};
use super::{cached_tokens, Counts, Finish, Frame, Whole};
use crate::sim::stream::{json_fragment, SimRequest};

/// One Responses answer's stream.
pub struct Stream<'a> {
    request: &'a SimRequest,
    id: &'a str,
    items: Blocks,
    /// The items done so far, whole: the final response's `output`.
    done: Vec<Value>,
}

impl<'a> Stream<'a> {
    pub(super) fn new(request: &'a SimRequest, id: &'a str) -> Stream<'a> {
        Stream {
            request,
            id,
            items: Blocks::default(),
            done: Vec::new(),
        }
    }

    pub(super) fn start(&self) -> Vec<Frame> {
        let response = self.response("in_progress", Value::Null);
        vec![
            Frame::Named(
                "response.created",
                json!({"type": "response.created", "response": response}),
            ),
            Frame::Named(
                "response.in_progress",
                json!({"type": "response.in_progress", "response": response}),
            ),
        ]
    }

    pub(super) fn reasoning(&mut self, text: &str) -> Vec<Frame> {
        let mut frames = self.open_as(Block::Reasoning);
        self.items.text.push_str(text);
        frames.push(Frame::Named(
            "response.reasoning_text.delta",
            json!({"type": "response.reasoning_text.delta", "item_id": self.item_id(),
                   "output_index": self.items.index, "content_index": 0, "delta": text}),
        ));
        frames
    }

    pub(super) fn text(&mut self, text: &str) -> Vec<Frame> {
        let mut frames = self.open_as(Block::Text);
        self.items.text.push_str(text);
        frames.push(Frame::Named(
            "response.output_text.delta",
            json!({"type": "response.output_text.delta", "item_id": self.item_id(),
                   "output_index": self.items.index, "content_index": 0, "delta": text,
                   "logprobs": []}),
        ));
        frames
    }

    pub(super) fn tool_call(&mut self, fragment: &str, first: bool) -> Vec<Frame> {
        let mut frames = Vec::new();
        if first {
            frames = self.open_as(Block::Call);
        }
        self.items.text.push_str(fragment);
        frames.push(Frame::Named(
            "response.function_call_arguments.delta",
            json!({"type": "response.function_call_arguments.delta",
                   "item_id": self.item_id(), "output_index": self.items.index,
                   "delta": fragment}),
        ));
        frames
    }

    pub(super) fn finish(&mut self, finish: Finish, counts: Counts) -> Vec<Frame> {
        let mut frames = self.close();
        // An answer cut at its cap is incomplete, as OpenAI's API says it.
        let (status, event) = match finish {
            Finish::Length => ("incomplete", "response.incomplete"),
            Finish::ToolCalls => ("completed", "response.completed"),
        };
        let mut response = self.response(status, usage(self.request, counts));
        response["output"] = Value::Array(std::mem::take(&mut self.done));
        if finish == Finish::Length {
            response["incomplete_details"] = json!({"reason": "max_output_tokens"});
        }
        frames.push(Frame::Named(
            event,
            json!({"type": event, "response": response}),
        ));
        frames
    }

    /// The id of the open output item.
    fn item_id(&self) -> String {
        item_id(self.items.open, self.id, self.items.index)
    }

    /// The response object, as the stream's first and last events carry it.
    fn response(&self, status: &str, usage: Value) -> Value {
        json!({"id": self.id, "object": "response", "created_at": self.request.created,
               "status": status, "model": self.request.model, "output": [], "usage": usage})
    }

    /// Opens an output item of `kind`, closing the one open before it.
    fn open_as(&mut self, kind: Block) -> Vec<Frame> {
        if !self.items.needs(kind) {
            return Vec::new();
        }
        let mut frames = self.close();
        self.items.begin(kind);
        let id = self.item_id();
        let item = match kind {
            Block::Reasoning => {
                json!({"id": id, "type": "reasoning", "summary": [], "content": []})
            }
            Block::Text => json!({"id": id, "type": "message", "role": "assistant",
                                  "status": "in_progress", "content": []}),
            Block::Call => json!({"id": id, "type": "function_call", "status": "in_progress",
                                  "call_id": format!("call_{}", self.id),
                                  "name": self.request.tool.as_deref().unwrap_or("tool"),
                                  "arguments": ""}),
        };
        let index = self.items.index;
        frames.push(Frame::Named(
            "response.output_item.added",
            json!({"type": "response.output_item.added", "output_index": index, "item": item}),
        ));
        if kind == Block::Text {
            frames.push(Frame::Named(
                "response.content_part.added",
                json!({"type": "response.content_part.added", "item_id": id,
                       "output_index": index, "content_index": 0,
                       "part": {"type": "output_text", "text": "", "annotations": []}}),
            ));
        }
        frames
    }

    /// Closes the open item: its `.done` events, the whole item last (kept for the final
    /// response's `output`).
    fn close(&mut self) -> Vec<Frame> {
        let Some(Closed { kind, index, text }) = self.items.end() else {
            return Vec::new();
        };
        let id = item_id(Some(kind), self.id, index);
        let mut frames = vec![match kind {
            Block::Reasoning => Frame::Named(
                "response.reasoning_text.done",
                json!({"type": "response.reasoning_text.done", "item_id": id,
                       "output_index": index, "content_index": 0, "text": text}),
            ),
            Block::Text => Frame::Named(
                "response.output_text.done",
                json!({"type": "response.output_text.done", "item_id": id,
                       "output_index": index, "content_index": 0, "text": text}),
            ),
            Block::Call => Frame::Named(
                "response.function_call_arguments.done",
                json!({"type": "response.function_call_arguments.done", "item_id": id,
                       "output_index": index, "arguments": text}),
            ),
        }];
        if kind == Block::Text {
            frames.push(Frame::Named(
                "response.content_part.done",
                json!({"type": "response.content_part.done", "item_id": id,
                       "output_index": index, "content_index": 0, "part": output_text(&text)}),
            ));
        }
        let item = done_item(kind, &id, &text, self.request, self.id);
        frames.push(Frame::Named(
            "response.output_item.done",
            json!({"type": "response.output_item.done", "output_index": index, "item": item}),
        ));
        self.done.push(item);
        frames
    }
}

/// Now, in Unix seconds (a response's `completed_at`).
fn unix_seconds() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// An output text part.
fn output_text(text: &str) -> Value {
    json!({"type": "output_text", "text": text, "annotations": [], "logprobs": []})
}

/// An output item once done, as its `.done` event and the final response carry it: `id` is
/// the item's, `response` the response's.
fn done_item(kind: Block, id: &str, text: &str, request: &SimRequest, response: &str) -> Value {
    match kind {
        Block::Reasoning => json!({"id": id, "type": "reasoning", "summary": [],
                                   "content": [{"type": "reasoning_text", "text": text}]}),
        Block::Text => json!({"id": id, "type": "message", "role": "assistant",
                              "status": "completed", "content": [output_text(text)]}),
        Block::Call => json!({"id": id, "type": "function_call", "status": "completed",
                              "call_id": format!("call_{response}"),
                              "name": request.tool.as_deref().unwrap_or("tool"),
                              "arguments": text}),
    }
}

/// An output item's id: its kind's prefix, the response's id and its index.
fn item_id(kind: Option<Block>, response: &str, index: usize) -> String {
    let prefix = match kind {
        Some(Block::Reasoning) => "rs",
        Some(Block::Call) => "fc",
        Some(Block::Text) | None => "msg",
    };
    format!("{prefix}_{response}_{index}")
}

/// The usage object.
fn usage(request: &SimRequest, counts: Counts) -> Value {
    let prompt = request.prompt_tokens;
    let mut usage = json!({"input_tokens": prompt, "output_tokens": counts.completion,
                           "total_tokens": prompt + counts.completion,
                           "input_tokens_details": {"cached_tokens": cached_tokens(request)}});
    if let Some(reasoning) = counts.reasoning {
        usage["output_tokens_details"] = json!({"reasoning_tokens": reasoning});
    }
    usage
}

/// A whole response: its output items (reasoning, then a message or a function call).
pub(super) fn whole(request: &SimRequest, id: &str, answer: Whole<'_>) -> Value {
    let mut output = Vec::new();
    if let Some((_, thought)) = answer.thought {
        output.push(done_item(
            Block::Reasoning,
            &format!("rs_{id}"),
            thought,
            request,
            id,
        ));
    }
    let status = if request.tool.is_some() {
        let arguments = format!("{{\"query\":\"{}\"}}", answer.text.trim());
        output.push(done_item(
            Block::Call,
            &format!("fc_{id}"),
            &arguments,
            request,
            id,
        ));
        "completed"
    } else {
        let text = if request.json_answer {
            json_fragment(answer.text, true, true)
        } else {
            answer.text.to_string()
        };
        output.push(done_item(
            Block::Text,
            &format!("msg_{id}"),
            &text,
            request,
            id,
        ));
        "incomplete"
    };
    let mut response = json!({"id": id, "object": "response", "created_at": request.created,
                              "completed_at": unix_seconds(), "status": status,
                              "model": request.model, "output": output,
                              "usage": usage(request, answer.counts)});
    if status == "incomplete" {
        response["incomplete_details"] = json!({"reason": "max_output_tokens"});
    }
    response
}
