//! OpenAI's Responses API (`/v1/responses`): the prompt as `input` (a text, or a list of
//! items: messages, the function calls an answer made and their outputs), a system message as
//! `instructions`, the length cap as `max_output_tokens`. Its stream is typed events
//! (`response.output_text.delta`, `response.reasoning_text.delta`, ...) ending with
//! `response.completed` (or `.incomplete`, `.failed`), which carries the usage
//! (`input_tokens`, `output_tokens`, cached and reasoning details) and the status that says why
//! the answer ended.
//!
//! What this is not: the Responses API's server-side state (`previous_response_id`, `store`):
//! every request carries its whole conversation, so that a run measures the same work on any
//! server.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::{
    BodyOptions, Capabilities, DecodeError, Decoded, Dialect, Envelope, Generated, Part,
    ServerError, Usage,
};
use crate::api::{Message, Prompt};

/// The Responses dialect.
#[derive(Debug)]
pub struct Responses;

static ENVELOPE: Envelope = Envelope {
    capabilities: Capabilities {
        kind: super::ApiKind::Generate,
        streaming: true,
        // The completed event carries the usage; there is no per-chunk usage.
        usage_in_stream: false,
        // llama.cpp's server passes ignore_eos on; OpenAI's own API has no way to ask (a
        // `finish-stop` warning says when a server did not honour it).
        exact_lengths: true,
        tool_calls: true,
        // `response_format` goes as `text.format`.
        structured_output: true,
        // Images as `input_image` parts; the Responses API takes no audio input.
        images: true,
        audio: false,
    },
    reserved_fields: &[
        ("model", "set it with `model` in the target"),
        ("input", "prompts come from the workload"),
        (
            "instructions",
            "a system prompt comes from the workload (`system`)",
        ),
        (
            "max_output_tokens",
            "set output lengths with `output` in the workload",
        ),
        (
            "ignore_eos",
            "ask for exact lengths with output N ignore-eos=#true",
        ),
        (
            "min_tokens",
            "ask for exact lengths with output N ignore-eos=#true",
        ),
        ("stream", "set it with `stream` in the target"),
        (
            "previous_response_id",
            "every request carries its whole conversation",
        ),
    ],
    credentials: |key| vec![(reqwest::header::AUTHORIZATION, format!("Bearer {key}"))],
    credential_headers: &["authorization"],
    fixed_headers: &[],
    stream_end: "response.completed (or .incomplete, .failed)",
};

/// Why an answer ended, from the response's status: `completed` is a stop (or tool calls, when
/// it called tools), `incomplete` says why in `incomplete_details.reason`.
const INCOMPLETE_REASONS: &[(&str, &str)] = &[
    ("max_output_tokens", "length"),
    ("content_filter", "content_filter"),
];

#[derive(Deserialize)]
struct Event<'a> {
    #[serde(rename = "type", borrow, default)]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    delta: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    item: Option<Item<'a>>,
    #[serde(borrow, default)]
    response: Option<Body<'a>>,
    #[serde(borrow, default)]
    message: Option<Cow<'a, str>>,
    #[serde(default)]
    error: Option<Value>,
}

/// A response, whole (a non-streamed body, or the one a final event carries).
#[derive(Deserialize)]
struct Body<'a> {
    #[serde(borrow, default)]
    status: Option<Cow<'a, str>>,
    #[serde(default)]
    incomplete_details: Option<Value>,
    #[serde(borrow, default)]
    output: Vec<Item<'a>>,
    #[serde(default)]
    usage: Option<WireUsage>,
    #[serde(default)]
    error: Option<Value>,
}

/// One output item: a message, a reasoning item or a function call.
#[derive(Deserialize)]
struct Item<'a> {
    #[serde(rename = "type", borrow, default)]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    content: Vec<ContentPart<'a>>,
    #[serde(borrow, default)]
    call_id: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    name: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    arguments: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct ContentPart<'a> {
    #[serde(borrow, default)]
    text: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct WireUsage {
    input_tokens: Option<crate::api::WireCount>,
    output_tokens: Option<crate::api::WireCount>,
    input_tokens_details: Option<InputDetails>,
    output_tokens_details: Option<OutputDetails>,
}

#[derive(Deserialize)]
struct InputDetails {
    cached_tokens: Option<crate::api::WireCount>,
}

#[derive(Deserialize)]
struct OutputDetails {
    reasoning_tokens: Option<crate::api::WireCount>,
}

impl From<WireUsage> for Usage {
    fn from(u: WireUsage) -> Usage {
        let mut counts = super::CountReader::default();
        Usage {
            prompt: counts.read("input_tokens", u.input_tokens),
            completion: counts.read("output_tokens", u.output_tokens),
            cached: counts.read(
                "input_tokens_details.cached_tokens",
                u.input_tokens_details.and_then(|d| d.cached_tokens),
            ),
            reasoning: counts.read(
                "output_tokens_details.reasoning_tokens",
                u.output_tokens_details.and_then(|d| d.reasoning_tokens),
            ),
            invalid: counts.invalid(),
        }
    }
}

/// The message of an error object (`{"message": …}`), or the object as JSON.
fn error_message(error: &Value) -> String {
    error
        .get("message")
        .and_then(Value::as_str)
        .map_or_else(|| error.to_string(), str::to_string)
}

impl Body<'_> {
    /// What the whole response says: its usage, why it ended, its error.
    fn decoded(self, calls: bool) -> Decoded {
        let error = self
            .error
            .filter(|e| !e.is_null())
            .map(|e| ServerError::Object(error_message(&e)));
        let finish_reason = match self.status.as_deref() {
            Some("completed") if calls => Some("tool_calls".to_string()),
            Some("completed") => Some("stop".to_string()),
            Some("incomplete") => Some(
                self.incomplete_details
                    .as_ref()
                    .and_then(|d| d.get("reason"))
                    .and_then(Value::as_str)
                    .map_or_else(
                        || "incomplete".to_string(),
                        |reason| super::finish_reason(reason, INCOMPLETE_REASONS),
                    ),
            ),
            _ => None,
        };
        Decoded {
            finish_reason,
            usage: self.usage.map(Usage::from),
            error,
            ..Decoded::default()
        }
    }
}

/// One input item for a message of the conversation: an assistant's tool calls become
/// `function_call` items, a tool's result a `function_call_output`.
fn input_items(m: &Message, items: &mut Vec<Value>) {
    if let Some(id) = &m.tool_call_id {
        items.push(json!({"type": "function_call_output", "call_id": id, "output": m.content}));
        return;
    }
    if !m.media.is_empty() {
        let content = super::content_parts(
            m,
            json!({"type": "input_text", "text": m.content}),
            // The Responses API takes images as `input_image` parts; it takes no audio.
            |a| match a.kind {
                crate::api::AttachmentKind::Image { .. } => {
                    Some(json!({"type": "input_image", "image_url": a.image_url()}))
                }
                crate::api::AttachmentKind::Audio { .. } => None,
            },
        );
        items.push(json!({"role": m.role, "content": content}));
    } else if !m.content.is_empty() || m.tool_calls.is_empty() {
        items.push(json!({"role": m.role, "content": m.content}));
    }
    for call in &m.tool_calls {
        items.push(
            json!({"type": "function_call", "call_id": call.id, "name": call.name,
                          "arguments": call.arguments}),
        );
    }
}

/// The plan's tools (chat's shape: `{"type": "function", "function": {...}}`) in the
/// Responses shape, the function's fields at the top.
fn tools(chat_tools: &Value) -> Value {
    let Some(list) = chat_tools.as_array() else {
        return chat_tools.clone();
    };
    list.iter()
        .map(
            |tool| match tool.get("function").and_then(Value::as_object) {
                Some(function) => {
                    let mut flat = function.clone();
                    flat.insert("type".into(), "function".into());
                    Value::Object(flat)
                }
                None => tool.clone(),
            },
        )
        .collect()
}

/// Chat's `response_format` as the Responses API's `text.format`: a schema's name, schema and
/// strictness at the top.
fn text_format(response_format: &Value) -> Value {
    let mut format = response_format.clone();
    if let Some(schema) = format
        .as_object_mut()
        .and_then(|f| f.remove("json_schema"))
        .and_then(|s| s.as_object().cloned())
    {
        if let Some(format) = format.as_object_mut() {
            format.extend(schema);
        }
    }
    json!({ "format": format })
}

/// The plan's chat-named fields the Responses API names otherwise: `tools` flattened,
/// `response_format` as `text.format`.
fn responses_names(key: &str, value: &Value) -> Option<(String, Value)> {
    match key {
        "tools" => Some((key.to_string(), tools(value))),
        "response_format" => Some(("text".to_string(), text_format(value))),
        _ => None,
    }
}

impl Dialect for Responses {
    fn name(&self) -> &'static str {
        "responses"
    }

    fn operation(&self) -> &'static str {
        "chat"
    }

    fn summary(&self) -> &'static str {
        "/v1/responses (OpenAI's Responses API: `input`, typed events)"
    }

    fn path(&self) -> &'static str {
        "/responses"
    }

    fn envelope(&self) -> &'static Envelope {
        &ENVELOPE
    }

    fn body(&self, prompt: &Prompt, max_tokens: u32, options: &BodyOptions) -> Vec<u8> {
        let mut body = Map::new();
        body.insert("model".into(), options.model.clone().into());
        match prompt {
            Prompt::Text(_) | Prompt::Batch { .. } => {
                body.insert("input".into(), prompt.joined().into());
            }
            Prompt::Messages(messages) => {
                let mut rest = messages.as_slice();
                if let Some((first, after)) = messages.split_first() {
                    if first.role == "system" {
                        body.insert("instructions".into(), first.content.clone().into());
                        rest = after;
                    }
                }
                let mut items = Vec::with_capacity(rest.len());
                for m in rest {
                    input_items(m, &mut items);
                }
                body.insert("input".into(), items.into());
            }
        }
        body.insert("max_output_tokens".into(), max_tokens.into());
        body.insert("stream".into(), options.stream.into());
        // A benchmark keeps nothing on the server.
        body.insert("store".into(), false.into());
        if options.ignore_eos {
            body.insert("ignore_eos".into(), true.into());
            body.insert("min_tokens".into(), max_tokens.into());
        }
        super::body_with_plan_fields(body, options, responses_names)
    }

    fn decode_event(
        &self,
        name: Option<&str>,
        data: &str,
        out: &mut Generated,
    ) -> Result<Decoded, DecodeError> {
        let event: Event = serde_json::from_str(data).map_err(|e| DecodeError(e.to_string()))?;
        let kind = event.kind.as_deref().or(name).unwrap_or("");
        let decoded = match kind {
            "response.output_text.delta" | "response.refusal.delta" => {
                if let Some(delta) = &event.delta {
                    out.push(Part::Answer, delta);
                }
                Decoded::default()
            }
            "response.reasoning_text.delta" | "response.reasoning_summary_text.delta" => {
                if let Some(delta) = &event.delta {
                    out.push(Part::Reasoning, delta);
                }
                Decoded::default()
            }
            "response.output_item.added" => {
                // A function call starts: the next call, its name and id said now, its
                // arguments in the deltas that follow.
                if let Some(item) = event
                    .item
                    .as_ref()
                    .filter(|i| i.kind.as_deref() == Some("function_call"))
                {
                    out.tool_call(
                        out.tool_calls(),
                        item.call_id.as_deref(),
                        item.name.as_deref(),
                        item.arguments.as_deref().filter(|a| !a.is_empty()),
                    );
                }
                Decoded::default()
            }
            "response.function_call_arguments.delta" => {
                if let Some(delta) = &event.delta {
                    // Calls stream one after another: a fragment belongs to the latest.
                    out.tool_call(out.tool_calls().saturating_sub(1), None, None, Some(delta));
                }
                Decoded::default()
            }
            "response.completed" | "response.incomplete" | "response.failed" => {
                let calls = out.tool_calls() > 0;
                let mut decoded = event.response.map(|r| r.decoded(calls)).unwrap_or_default();
                if kind == "response.failed" && decoded.error.is_none() {
                    decoded.error = Some(ServerError::Event(data.to_string()));
                }
                decoded.end = true;
                decoded
            }
            "error" => {
                let message = event
                    .message
                    .map(Cow::into_owned)
                    .or_else(|| event.error.as_ref().map(error_message))
                    .unwrap_or_else(|| data.to_string());
                Decoded {
                    error: Some(ServerError::Event(message)),
                    ..Decoded::default()
                }
            }
            // created, in_progress, the `.done` events (which repeat the whole text), parts
            // added: nothing new.
            _ => Decoded::default(),
        };
        Ok(decoded)
    }

    fn decode_body(&self, body: &str, out: &mut Generated) -> Result<Decoded, DecodeError> {
        let mut whole: Body = serde_json::from_str(body).map_err(|e| DecodeError(e.to_string()))?;
        for item in std::mem::take(&mut whole.output) {
            match item.kind.as_deref() {
                Some("reasoning") => {
                    for part in &item.content {
                        if let Some(text) = &part.text {
                            out.push(Part::Reasoning, text);
                        }
                    }
                }
                Some("message") => {
                    for part in &item.content {
                        if let Some(text) = &part.text {
                            out.push(Part::Answer, text);
                        }
                    }
                }
                Some("function_call") => out.tool_call(
                    out.tool_calls(),
                    item.call_id.as_deref(),
                    item.name.as_deref(),
                    item.arguments.as_deref(),
                ),
                _ => {}
            }
        }
        let calls = out.tool_calls() > 0;
        Ok(whole.decoded(calls))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::ToolCall;

    fn options(stream: bool, ignore_eos: bool) -> BodyOptions {
        let mut extra = Map::new();
        extra.insert("temperature".into(), 0.0.into());
        extra.insert(
            "response_format".into(),
            json!({"type": "json_schema", "json_schema": {"name": "answer", "schema": {"type": "object"}, "strict": true}}),
        );
        extra.insert(
            "tools".into(),
            json!([{"type": "function", "function": {"name": "search", "parameters": {"type": "object"}}}]),
        );
        BodyOptions {
            model: "m".into(),
            stream,
            continuous_usage: false,
            ignore_eos,
            extra: std::sync::Arc::new(extra),
        }
    }

    fn decode_all(events: &[(&str, &str)]) -> (String, Vec<ToolCall>, Decoded, usize) {
        let (mut text, mut calls) = (String::new(), Vec::new());
        let mut last = Decoded::default();
        let mut reasoning = 0;
        for (name, data) in events {
            let mut out = Generated::with_calls(&mut text, &mut calls, 0);
            let decoded = Responses.decode_event(Some(name), data, &mut out).unwrap();
            reasoning += out.reasoning_bytes();
            if decoded != Decoded::default() {
                last = decoded;
            }
        }
        (text, calls, last, reasoning)
    }

    #[test]
    fn bodies_carry_input_instructions_and_the_cap() {
        let body: Value = serde_json::from_slice(&Responses.body(
            &Prompt::Text("hi".into()),
            32,
            &options(true, true),
        ))
        .unwrap();
        assert_eq!(body["input"], "hi");
        assert_eq!(body["max_output_tokens"], 32);
        assert_eq!(
            (body["ignore_eos"].clone(), body["min_tokens"].clone()),
            (json!(true), json!(32))
        );
        assert_eq!(body["stream"], true);
        assert_eq!(body["store"], false);
        assert_eq!(body["temperature"], 0.0);
        assert_eq!(
            body["tools"][0],
            json!({"type": "function", "name": "search", "parameters": {"type": "object"}})
        );
        assert!(body.get("max_tokens").is_none());
        assert_eq!(
            body["text"],
            json!({"format": {"type": "json_schema", "name": "answer", "schema": {"type": "object"}, "strict": true}})
        );
        let mut assistant = Message::text("assistant", String::new());
        assistant.tool_calls = vec![ToolCall {
            id: "call_1".into(),
            name: "search".into(),
            arguments: "{\"q\":1}".into(),
        }];
        let mut result = Message::text("tool", "42".into());
        result.tool_call_id = Some("call_1".into());
        let conversation = Prompt::Messages(vec![
            Message::text("system", "be brief".into()),
            Message::text("user", "hi".into()),
            assistant,
            result,
        ]);
        let body: Value =
            serde_json::from_slice(&Responses.body(&conversation, 8, &options(false, false)))
                .unwrap();
        assert_eq!(body["instructions"], "be brief");
        assert_eq!(body["input"][0], json!({"role": "user", "content": "hi"}));
        assert_eq!(
            body["input"][1],
            json!({"type": "function_call", "call_id": "call_1", "name": "search", "arguments": "{\"q\":1}"})
        );
        assert_eq!(
            body["input"][2],
            json!({"type": "function_call_output", "call_id": "call_1", "output": "42"})
        );
        assert!(body.get("ignore_eos").is_none());
    }

    /// A reasoning model's stream as llama.cpp's server sends it (abridged ids).
    #[test]
    fn a_stream_of_reasoning_then_text_ends_with_its_usage() {
        let (text, _, last, reasoning) = decode_all(&[
            (
                "response.created",
                r#"{"type":"response.created","response":{"id":"resp_1","object":"response","status":"in_progress"}}"#,
            ),
            (
                "response.in_progress",
                r#"{"type":"response.in_progress","response":{"id":"resp_1","object":"response","status":"in_progress"}}"#,
            ),
            (
                "response.output_item.added",
                r#"{"type":"response.output_item.added","item":{"id":"rs_1","summary":[],"type":"reasoning","content":[],"encrypted_content":"","status":"in_progress"}}"#,
            ),
            (
                "response.reasoning_text.delta",
                r#"{"type":"response.reasoning_text.delta","delta":"think","item_id":"rs_1"}"#,
            ),
            (
                "response.output_item.added",
                r#"{"type":"response.output_item.added","item":{"content":[],"id":"msg_1","role":"assistant","status":"in_progress","type":"message"}}"#,
            ),
            (
                "response.content_part.added",
                r#"{"type":"response.content_part.added","item_id":"msg_1","part":{"type":"output_text","text":""}}"#,
            ),
            (
                "response.output_text.delta",
                r#"{"type":"response.output_text.delta","item_id":"msg_1","delta":"Hello"}"#,
            ),
            (
                "response.output_text.delta",
                r#"{"type":"response.output_text.delta","item_id":"msg_1","delta":" world"}"#,
            ),
            (
                "response.output_text.done",
                r#"{"type":"response.output_text.done","item_id":"msg_1","text":"Hello world"}"#,
            ),
            (
                "response.output_item.done",
                r#"{"type":"response.output_item.done","item":{"type":"message","status":"completed","id":"msg_1","content":[{"type":"output_text","text":"Hello world"}],"role":"assistant"}}"#,
            ),
            (
                "response.completed",
                r#"{"type":"response.completed","response":{"id":"resp_1","object":"response","status":"completed","output":[],"usage":{"input_tokens":12,"output_tokens":3,"total_tokens":15,"input_tokens_details":{"cached_tokens":8}}}}"#,
            ),
        ]);
        assert_eq!(text, "thinkHello world");
        assert_eq!(reasoning, 5);
        assert!(last.end);
        assert_eq!(last.finish_reason.as_deref(), Some("stop"));
        let usage = last.usage.unwrap();
        assert_eq!(
            (usage.prompt, usage.completion, usage.cached),
            (Some(12), Some(3), Some(8))
        );
    }

    #[test]
    fn an_answer_cut_at_its_cap_is_length_and_calls_are_put_together() {
        let (_, _, last, _) = decode_all(&[(
            "response.incomplete",
            r#"{"type":"response.incomplete","response":{"status":"incomplete","incomplete_details":{"reason":"max_output_tokens"},"usage":{"input_tokens":5,"output_tokens":16,"output_tokens_details":{"reasoning_tokens":4}}}}"#,
        )]);
        assert_eq!(last.finish_reason.as_deref(), Some("length"));
        assert_eq!(last.usage.unwrap().reasoning, Some(4));
        let (text, calls, last, _) = decode_all(&[
            (
                "response.output_item.added",
                r#"{"type":"response.output_item.added","output_index":0,"item":{"type":"function_call","id":"fc_1","call_id":"call_1","name":"search","arguments":""}}"#,
            ),
            (
                "response.function_call_arguments.delta",
                r#"{"type":"response.function_call_arguments.delta","item_id":"fc_1","delta":"{\"q\":"}"#,
            ),
            (
                "response.function_call_arguments.delta",
                r#"{"type":"response.function_call_arguments.delta","item_id":"fc_1","delta":"1}"}"#,
            ),
            (
                "response.completed",
                r#"{"type":"response.completed","response":{"status":"completed","usage":{"input_tokens":5,"output_tokens":6}}}"#,
            ),
        ]);
        assert_eq!(text, "search{\"q\":1}");
        assert_eq!(calls.len(), 1);
        assert_eq!(
            (
                calls[0].id.as_str(),
                calls[0].name.as_str(),
                calls[0].arguments.as_str()
            ),
            ("call_1", "search", "{\"q\":1}")
        );
        assert_eq!(last.finish_reason.as_deref(), Some("tool_calls"));
    }

    #[test]
    fn errors_failures_and_bad_json() {
        let (_, _, last, _) = decode_all(&[(
            "error",
            r#"{"type":"error","code":"server_error","message":"the model crashed"}"#,
        )]);
        assert_eq!(
            last.error,
            Some(ServerError::Event("the model crashed".into()))
        );
        let (_, _, last, _) = decode_all(&[(
            "response.failed",
            r#"{"type":"response.failed","response":{"status":"failed","error":{"code":"server_error","message":"out of memory"}}}"#,
        )]);
        assert_eq!(
            last.error,
            Some(ServerError::Object("out of memory".into()))
        );
        assert!(last.end);
        let mut text = String::new();
        assert!(Responses
            .decode_event(None, "{not json", &mut Generated::new(&mut text))
            .is_err());
    }

    /// A whole response as llama.cpp's server answers one.
    #[test]
    fn a_whole_response_has_reasoning_answer_calls_and_usage() {
        let body = r#"{"completed_at":1,"created_at":1,"id":"resp_1","model":"m","object":"response","output":[
            {"id":"rs_1","summary":[],"type":"reasoning","content":[{"text":"hmm","type":"reasoning_text"}],"encrypted_content":"","status":"completed"},
            {"content":[{"type":"output_text","annotations":[],"logprobs":[],"text":"Hi there"}],"id":"msg_1","role":"assistant","status":"completed","type":"message"}],
            "status":"completed","usage":{"input_tokens":9,"output_tokens":4,"total_tokens":13,"input_tokens_details":{"cached_tokens":0}}}"#;
        let mut text = String::new();
        let mut out = Generated::new(&mut text);
        let decoded = Responses.decode_body(body, &mut out).unwrap();
        assert_eq!(out.reasoning_bytes(), 3);
        assert_eq!(text, "hmmHi there");
        assert_eq!(decoded.finish_reason.as_deref(), Some("stop"));
        assert_eq!(decoded.usage.and_then(|u| u.completion), Some(4));
    }
}
