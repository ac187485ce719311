//! The wire formats the simulator speaks, each written here from the APIs' documentation and
//! the servers' bytes (vLLM's for chat and completions, OpenAI's and llama.cpp's for
//! Responses, Anthropic's and llama.cpp's for Messages) — never from llmload's own client
//! ([`crate::api`]), so that the two cannot agree on the same mistake.
//!
//! [`Wire`] says which API a route speaks and where its request keeps each thing;
//! [`Encoder`] writes one answer's stream as that API's events, keeping what a stream must
//! (which content block or output item is open).

use serde_json::{json, Value};

use super::stream::{chunk, json_fragment, reasoning_chunk, tool_call_chunk, usage, SimRequest};

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
            Wire::Messages => {
                let kind = match kind {
                    "RateLimitError" => "rate_limit_error",
                    "NotFoundError" | "not_found_error" => "not_found_error",
                    "invalid_request_error" => "invalid_request_error",
                    "overloaded_error" => "overloaded_error",
                    _ => "api_error",
                };
                json!({"type": "error", "error": {"type": kind, "message": message}})
            }
            _ => super::stream::error_body(message, kind),
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

/// What is open in a Responses or Messages stream: the kind of the current item or block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Open {
    Reasoning,
    Text,
    Call,
}

/// Writes one streamed answer as its API's events.
pub struct Encoder<'a> {
    request: &'a SimRequest,
    id: &'a str,
    open: Option<Open>,
    /// The index of the open output item (Responses) or content block (Messages).
    index: usize,
    /// The index the next item or block opened gets.
    next_index: usize,
    /// The open item's or block's text so far (a `.done` event repeats it, as servers do).
    text: String,
}

impl<'a> Encoder<'a> {
    pub fn new(request: &'a SimRequest, id: &'a str) -> Encoder<'a> {
        Encoder {
            request,
            id,
            open: None,
            index: 0,
            next_index: 0,
            text: String::new(),
        }
    }

    /// What opens the stream.
    pub fn start(&mut self) -> Vec<Frame> {
        let request = self.request;
        match request.wire {
            Wire::Chat => vec![Frame::Data(chunk(request, self.id, None, true, None))],
            // Embeddings and rankings never stream.
            Wire::Completions | Wire::Embeddings | Wire::Rerank => Vec::new(),
            Wire::Responses => {
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
            Wire::Messages => vec![Frame::Named(
                "message_start",
                json!({"type": "message_start", "message": {
                    "id": self.id, "type": "message", "role": "assistant", "content": [],
                    "model": request.model, "stop_reason": null, "stop_sequence": null,
                    "usage": messages_usage(request, 1)}}),
            )],
        }
    }

    /// A piece of a reasoning model's thinking; `field` is chat's field for it.
    pub fn reasoning(&mut self, text: &str, field: &str) -> Vec<Frame> {
        match self.request.wire {
            Wire::Chat | Wire::Completions | Wire::Embeddings | Wire::Rerank => vec![Frame::Data(
                reasoning_chunk(self.request, self.id, text, field),
            )],
            Wire::Responses => {
                let mut frames = self.open_as(Open::Reasoning);
                self.text.push_str(text);
                frames.push(Frame::Named(
                    "response.reasoning_text.delta",
                    json!({"type": "response.reasoning_text.delta", "item_id": self.item_id(),
                           "output_index": self.index, "content_index": 0, "delta": text}),
                ));
                frames
            }
            Wire::Messages => {
                let mut frames = self.open_as(Open::Reasoning);
                frames.push(Frame::Named(
                    "content_block_delta",
                    json!({"type": "content_block_delta", "index": self.index,
                           "delta": {"type": "thinking_delta", "thinking": text}}),
                ));
                frames
            }
        }
    }

    /// A piece of the answer's text.
    pub fn text(&mut self, text: &str) -> Vec<Frame> {
        match self.request.wire {
            Wire::Chat | Wire::Completions | Wire::Embeddings | Wire::Rerank => {
                vec![Frame::Data(chunk(
                    self.request,
                    self.id,
                    Some(text),
                    false,
                    None,
                ))]
            }
            Wire::Responses => {
                let mut frames = self.open_as(Open::Text);
                self.text.push_str(text);
                frames.push(Frame::Named(
                    "response.output_text.delta",
                    json!({"type": "response.output_text.delta", "item_id": self.item_id(),
                           "output_index": self.index, "content_index": 0, "delta": text,
                           "logprobs": []}),
                ));
                frames
            }
            Wire::Messages => {
                let mut frames = self.open_as(Open::Text);
                frames.push(Frame::Named(
                    "content_block_delta",
                    json!({"type": "content_block_delta", "index": self.index,
                           "delta": {"type": "text_delta", "text": text}}),
                ));
                frames
            }
        }
    }

    /// A fragment of a tool call's arguments; `first` opens the call.
    pub fn tool_call(&mut self, fragment: &str, first: bool) -> Vec<Frame> {
        let request = self.request;
        match request.wire {
            Wire::Chat | Wire::Completions | Wire::Embeddings | Wire::Rerank => vec![Frame::Data(
                tool_call_chunk(request, self.id, fragment, first),
            )],
            Wire::Responses => {
                let mut frames = Vec::new();
                if first {
                    frames = self.open_as(Open::Call);
                }
                self.text.push_str(fragment);
                frames.push(Frame::Named(
                    "response.function_call_arguments.delta",
                    json!({"type": "response.function_call_arguments.delta",
                           "item_id": self.item_id(), "output_index": self.index,
                           "delta": fragment}),
                ));
                frames
            }
            Wire::Messages => {
                let mut frames = Vec::new();
                if first {
                    frames = self.open_as(Open::Call);
                }
                frames.push(Frame::Named(
                    "content_block_delta",
                    json!({"type": "content_block_delta", "index": self.index,
                           "delta": {"type": "input_json_delta", "partial_json": fragment}}),
                ));
                frames
            }
        }
    }

    /// What ends the stream: the finish, the usage when asked (always, for Responses and
    /// Messages), the end marker.
    pub fn finish(&mut self, finish: Finish, counts: Counts) -> Vec<Frame> {
        let request = self.request;
        let reason = match finish {
            Finish::Length => "length",
            Finish::ToolCalls => "tool_calls",
        };
        match request.wire {
            Wire::Chat | Wire::Completions | Wire::Embeddings | Wire::Rerank => {
                let mut frames = Vec::new();
                let mut last = chunk(request, self.id, None, false, Some(reason));
                if request.continuous_usage {
                    last["usage"] = usage(request, counts.completion, counts.reasoning);
                }
                frames.push(Frame::Data(last));
                if request.include_usage {
                    let mut value = chunk(request, self.id, None, false, None);
                    value["choices"] = json!([]);
                    value["usage"] = usage(request, counts.completion, counts.reasoning);
                    frames.push(Frame::Data(value));
                }
                frames.push(Frame::Raw("[DONE]"));
                frames
            }
            Wire::Responses => {
                let mut frames = self.close();
                // An answer cut at its cap is incomplete, as OpenAI's API says it.
                let (status, event) = match finish {
                    Finish::Length => ("incomplete", "response.incomplete"),
                    Finish::ToolCalls => ("completed", "response.completed"),
                };
                let mut response = self.response(status, responses_usage(request, counts));
                if finish == Finish::Length {
                    response["incomplete_details"] = json!({"reason": "max_output_tokens"});
                }
                frames.push(Frame::Named(
                    event,
                    json!({"type": event, "response": response}),
                ));
                frames
            }
            Wire::Messages => {
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
        }
    }

    /// The id of the open output item.
    fn item_id(&self) -> String {
        item_id(self.open, self.id, self.index)
    }

    /// A Responses response object, as the stream's first and last events carry it.
    fn response(&self, status: &str, usage: Value) -> Value {
        json!({"id": self.id, "object": "response", "created_at": self.request.created,
               "status": status, "model": self.request.model, "output": [], "usage": usage})
    }

    /// Opens an item or block of `kind`, closing the one open before it.
    fn open_as(&mut self, kind: Open) -> Vec<Frame> {
        if self.open == Some(kind) && kind != Open::Call {
            return Vec::new();
        }
        let mut frames = self.close();
        self.index = self.next_index;
        self.next_index += 1;
        self.open = Some(kind);
        let tool = self.request.tool.as_deref().unwrap_or("tool");
        let call_id = format!("call_{}", self.id);
        match self.request.wire {
            Wire::Responses => {
                let item = match kind {
                    Open::Reasoning => {
                        json!({"id": self.item_id(), "type": "reasoning", "summary": [], "content": []})
                    }
                    Open::Text => {
                        json!({"id": self.item_id(), "type": "message", "role": "assistant",
                               "status": "in_progress", "content": []})
                    }
                    Open::Call => {
                        json!({"id": self.item_id(), "type": "function_call", "status": "in_progress",
                               "call_id": call_id, "name": tool, "arguments": ""})
                    }
                };
                frames.push(Frame::Named(
                    "response.output_item.added",
                    json!({"type": "response.output_item.added", "output_index": self.index, "item": item}),
                ));
                if kind == Open::Text {
                    frames.push(Frame::Named(
                        "response.content_part.added",
                        json!({"type": "response.content_part.added", "item_id": self.item_id(),
                               "output_index": self.index, "content_index": 0,
                               "part": {"type": "output_text", "text": "", "annotations": []}}),
                    ));
                }
            }
            Wire::Messages => {
                let block = match kind {
                    Open::Reasoning => json!({"type": "thinking", "thinking": ""}),
                    Open::Text => json!({"type": "text", "text": ""}),
                    Open::Call => {
                        json!({"type": "tool_use", "id": format!("toolu_{}", self.id), "name": tool, "input": {}})
                    }
                };
                frames.push(Frame::Named(
                    "content_block_start",
                    json!({"type": "content_block_start", "index": self.index, "content_block": block}),
                ));
            }
            Wire::Chat | Wire::Completions | Wire::Embeddings | Wire::Rerank => {}
        }
        frames
    }

    /// Closes the open item or block (its `.done` or `content_block_stop`).
    fn close(&mut self) -> Vec<Frame> {
        let Some(kind) = self.open.take() else {
            return Vec::new();
        };
        let text = std::mem::take(&mut self.text);
        let id = item_id(Some(kind), self.id, self.index);
        match self.request.wire {
            Wire::Responses => {
                let done = match kind {
                    Open::Reasoning => Frame::Named(
                        "response.reasoning_text.done",
                        json!({"type": "response.reasoning_text.done", "item_id": id,
                               "output_index": self.index, "content_index": 0, "text": text}),
                    ),
                    Open::Text => Frame::Named(
                        "response.output_text.done",
                        json!({"type": "response.output_text.done", "item_id": id,
                               "output_index": self.index, "content_index": 0, "text": text}),
                    ),
                    Open::Call => Frame::Named(
                        "response.function_call_arguments.done",
                        json!({"type": "response.function_call_arguments.done", "item_id": id,
                               "output_index": self.index, "arguments": text}),
                    ),
                };
                vec![
                    done,
                    Frame::Named(
                        "response.output_item.done",
                        json!({"type": "response.output_item.done", "output_index": self.index,
                               "item": {"id": id, "status": "completed"}}),
                    ),
                ]
            }
            Wire::Messages => vec![Frame::Named(
                "content_block_stop",
                json!({"type": "content_block_stop", "index": self.index}),
            )],
            Wire::Chat | Wire::Completions | Wire::Embeddings | Wire::Rerank => Vec::new(),
        }
    }
}

/// An output item's id: its kind's prefix, the response's id and its index.
fn item_id(kind: Option<Open>, response: &str, index: usize) -> String {
    let prefix = match kind {
        Some(Open::Reasoning) => "rs",
        Some(Open::Call) => "fc",
        _ => "msg",
    };
    format!("{prefix}_{response}_{index}")
}

/// Anthropic's input usage: `input_tokens` leaves out what the prefix cache served.
fn messages_usage(request: &SimRequest, output_tokens: usize) -> Value {
    let cached = request
        .cached
        .as_ref()
        .map_or(0, |c| c.load(std::sync::atomic::Ordering::Relaxed) as usize);
    json!({"input_tokens": request.prompt_tokens.saturating_sub(cached),
           "cache_read_input_tokens": cached, "cache_creation_input_tokens": 0,
           "output_tokens": output_tokens})
}

/// The Responses usage object.
fn responses_usage(request: &SimRequest, counts: Counts) -> Value {
    let cached = request
        .cached
        .as_ref()
        .map_or(0, |c| c.load(std::sync::atomic::Ordering::Relaxed) as usize);
    let prompt = request.prompt_tokens;
    let mut usage = json!({"input_tokens": prompt, "output_tokens": counts.completion,
                           "total_tokens": prompt + counts.completion,
                           "input_tokens_details": {"cached_tokens": cached}});
    if let Some(reasoning) = counts.reasoning {
        usage["output_tokens_details"] = json!({"reasoning_tokens": reasoning});
    }
    usage
}

/// The length of each embedding the simulator answers with (a small embedding model's).
pub const EMBEDDING_DIMENSIONS: usize = 384;

/// A whole answer of an embeddings or rerank request: one seeded embedding per input (unit
/// length, so that a client decoding them pays what it pays for a real model's), or one score
/// per document, and the prompt tokens read.
pub fn batch_answer(request: &SimRequest, id: &str, seed: u64) -> Value {
    use rand::{Rng, SeedableRng};
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let usage =
        json!({"prompt_tokens": request.prompt_tokens, "total_tokens": request.prompt_tokens});
    match request.wire {
        Wire::Rerank => {
            let results: Vec<Value> = (0..request.inputs)
                .map(|index| json!({"index": index, "relevance_score": rng.random_range(-10.0..10.0f64)}))
                .collect();
            json!({"id": id, "model": request.model, "object": "list", "results": results, "usage": usage})
        }
        _ => {
            let data: Vec<Value> = (0..request.inputs)
                .map(|index| {
                    let raw: Vec<f64> = (0..EMBEDDING_DIMENSIONS)
                        .map(|_| rng.random_range(-1.0..1.0f64))
                        .collect();
                    let norm = raw
                        .iter()
                        .map(|x| x * x)
                        .sum::<f64>()
                        .sqrt()
                        .max(f64::MIN_POSITIVE);
                    let embedding: Vec<f64> = raw.iter().map(|x| x / norm).collect();
                    json!({"object": "embedding", "index": index, "embedding": embedding})
                })
                .collect();
            json!({"object": "list", "model": request.model, "data": data, "usage": usage})
        }
    }
}

/// A whole answer of a Responses or Messages request (chat's and completions' are
/// [`super::stream::full_response`]): `thought` is its reasoning, if any.
pub fn full_answer(
    request: &SimRequest,
    id: &str,
    text: &str,
    thought: Option<&str>,
    counts: Counts,
) -> Value {
    let answer = if request.json_answer {
        json_fragment(text, true, true)
    } else {
        text.to_string()
    };
    let arguments = format!("{{\"query\":\"{}\"}}", text.trim());
    match request.wire {
        Wire::Messages => {
            let mut content = Vec::new();
            if let Some(thought) = thought {
                content.push(json!({"type": "thinking", "thinking": thought, "signature": ""}));
            }
            let stop_reason = match &request.tool {
                Some(tool) => {
                    let input: Value = serde_json::from_str(&arguments).unwrap_or(json!({}));
                    content.push(json!({"type": "tool_use", "id": format!("toolu_{id}"), "name": tool, "input": input}));
                    "tool_use"
                }
                None => {
                    content.push(json!({"type": "text", "text": answer}));
                    "max_tokens"
                }
            };
            json!({"id": id, "type": "message", "role": "assistant", "model": request.model,
                   "content": content, "stop_reason": stop_reason, "stop_sequence": null,
                   "usage": messages_usage(request, counts.completion)})
        }
        _ => {
            let mut output = Vec::new();
            if let Some(thought) = thought {
                output.push(
                    json!({"id": format!("rs_{id}"), "type": "reasoning", "summary": [],
                                   "content": [{"type": "reasoning_text", "text": thought}]}),
                );
            }
            let status = match &request.tool {
                Some(tool) => {
                    output.push(json!({"id": format!("fc_{id}"), "type": "function_call", "status": "completed",
                                       "call_id": format!("call_{id}"), "name": tool, "arguments": arguments}));
                    "completed"
                }
                None => {
                    output.push(json!({"id": format!("msg_{id}"), "type": "message", "role": "assistant",
                                       "status": "completed",
                                       "content": [{"type": "output_text", "text": answer, "annotations": []}]}));
                    "incomplete"
                }
            };
            let mut response = json!({"id": id, "object": "response", "created_at": request.created,
                                      "status": status, "model": request.model, "output": output,
                                      "usage": responses_usage(request, counts)});
            if status == "incomplete" {
                response["incomplete_details"] = json!({"reason": "max_output_tokens"});
            }
            response
        }
    }
}
