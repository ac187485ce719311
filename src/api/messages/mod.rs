//! Anthropic's Messages API (`/v1/messages`): the key in `x-api-key` with an
//! `anthropic-version`, a system prompt in its own `system` field, `max_tokens` always sent.
//! Its stream is named events: `message_start` (the input usage, prefix-cache reads among
//! it), `content_block_start` / `content_block_delta` (`text_delta`, `thinking_delta`,
//! `input_json_delta`) / `content_block_stop`, `message_delta` (the output usage and the
//! `stop_reason`), `message_stop`, `ping`, and `error` (`overloaded_error` counted apart).
//!
//! Usage comes in two pieces (input tokens at the start, output tokens at the end), merged by
//! [`crate::api::Usage::merge`]. `input_tokens` leaves out the tokens read from or written to
//! the prompt cache: the prompt's tokens are the three added up.
//!
//! What this is not: a way to ask for an exact number of output tokens. The API has none, and
//! the servers that speak it do not pass `ignore_eos` on (llama.cpp's drops it), so a plan that
//! asks is refused; `max_tokens` as a stop reason says an answer reached its cap.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::{
    BodyOptions, Capabilities, DecodeError, Decoded, Dialect, Envelope, Generated, Part,
    ServerError, Usage,
};
use crate::api::{Message, Prompt};

/// The Messages dialect.
#[derive(Debug)]
pub struct Messages;

/// The API version every request names (the one Anthropic's SDKs send).
pub const ANTHROPIC_VERSION: &str = "2023-06-01";

static ENVELOPE: Envelope = Envelope {
    capabilities: Capabilities {
        kind: super::ApiKind::Generate,
        streaming: true,
        // Usage comes at the message's start and end, not per chunk.
        usage_in_stream: false,
        exact_lengths: false,
        tool_calls: true,
        // Anthropic's structured outputs are a beta of their own shape; servers that speak
        // the API locally (llama.cpp's) drop it.
        structured_output: false,
        // Images as base64 `image` blocks; the API takes no audio.
        images: true,
        audio: false,
    },
    reserved_fields: &[
        ("model", "set it with `model` in the target"),
        ("messages", "prompts come from the workload"),
        (
            "system",
            "a system prompt comes from the workload (`system`)",
        ),
        (
            "max_tokens",
            "set output lengths with `output` in the workload",
        ),
        ("stream", "set it with `stream` in the target"),
    ],
    credentials: |key| {
        vec![(
            reqwest::header::HeaderName::from_static("x-api-key"),
            key.to_string(),
        )]
    },
    credential_headers: &["x-api-key"],
    fixed_headers: &[("anthropic-version", ANTHROPIC_VERSION)],
    stream_end: "a message_stop or a stop_reason",
};

/// Anthropic's stop reasons in OpenAI's words.
const STOP_REASONS: &[(&str, &str)] = &[
    ("end_turn", "stop"),
    ("stop_sequence", "stop"),
    ("max_tokens", "length"),
    ("tool_use", "tool_calls"),
    ("refusal", "content_filter"),
];

#[derive(Deserialize)]
struct Event<'a> {
    #[serde(rename = "type", borrow, default)]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    message: Option<Whole<'a>>,
    #[serde(borrow, default)]
    content_block: Option<Block<'a>>,
    #[serde(borrow, default)]
    delta: Option<Delta<'a>>,
    #[serde(default)]
    usage: Option<WireUsage>,
    #[serde(default)]
    error: Option<Value>,
}

/// A message, whole (a non-streamed body, or the one `message_start` carries).
#[derive(Deserialize)]
struct Whole<'a> {
    #[serde(rename = "type", borrow, default)]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    content: Vec<Block<'a>>,
    #[serde(borrow, default)]
    stop_reason: Option<Cow<'a, str>>,
    #[serde(default)]
    usage: Option<WireUsage>,
    #[serde(default)]
    error: Option<Value>,
}

/// A content block: text, thinking, or a tool use.
#[derive(Deserialize)]
struct Block<'a> {
    #[serde(rename = "type", borrow, default)]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    text: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    thinking: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    id: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    name: Option<Cow<'a, str>>,
    #[serde(default)]
    input: Option<Value>,
}

#[derive(Deserialize)]
struct Delta<'a> {
    #[serde(rename = "type", borrow, default)]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    text: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    thinking: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    partial_json: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    stop_reason: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct WireUsage {
    input_tokens: Option<crate::api::WireCount>,
    output_tokens: Option<crate::api::WireCount>,
    cache_read_input_tokens: Option<crate::api::WireCount>,
    cache_creation_input_tokens: Option<crate::api::WireCount>,
}

impl From<WireUsage> for Usage {
    fn from(u: WireUsage) -> Usage {
        let mut counts = super::CountReader::default();
        let input = counts.read("input_tokens", u.input_tokens);
        let cached = counts.read("cache_read_input_tokens", u.cache_read_input_tokens);
        let written = counts.read("cache_creation_input_tokens", u.cache_creation_input_tokens);
        let completion = counts.read("output_tokens", u.output_tokens);
        // The prompt is what was read fresh, read from the cache and written to it.
        let prompt = input.map(|input| {
            input
                .saturating_add(cached.unwrap_or(0))
                .saturating_add(written.unwrap_or(0))
        });
        Usage {
            prompt,
            completion,
            cached,
            reasoning: None,
            invalid: counts.invalid(),
        }
    }
}

/// The error an `error` event or body carries: `overloaded_error` and `rate_limit_error` apart.
fn server_error(error: &Value) -> ServerError {
    let message = error
        .get("message")
        .and_then(Value::as_str)
        .map_or_else(|| error.to_string(), str::to_string);
    match error.get("type").and_then(Value::as_str) {
        Some("overloaded_error") => ServerError::Overloaded(message),
        Some("rate_limit_error") => ServerError::RateLimited(message),
        _ => ServerError::Object(message),
    }
}

/// The conversation as Anthropic takes it: the system prompt apart; an assistant's tool calls
/// as `tool_use` blocks (their arguments as JSON); tool results as `tool_result` blocks of
/// one user message (the API wants roles to alternate).
fn conversation(messages: &[Message]) -> (Option<String>, Vec<Value>) {
    let mut system = None;
    let mut out: Vec<Value> = Vec::with_capacity(messages.len());
    for m in messages {
        if m.role == "system" {
            system = Some(m.content.clone());
            continue;
        }
        if let Some(id) = &m.tool_call_id {
            let result = json!({"type": "tool_result", "tool_use_id": id, "content": m.content});
            let previous_results = out.last_mut().filter(|last| {
                last["role"] == "user"
                    && last["content"]
                        .as_array()
                        .is_some_and(|c| c.iter().all(|b| b["type"] == "tool_result"))
            });
            match previous_results.and_then(|last| last["content"].as_array_mut()) {
                Some(blocks) => blocks.push(result),
                None => out.push(json!({"role": "user", "content": [result]})),
            }
            continue;
        }
        if !m.media.is_empty() {
            let content = super::content_parts(
                m,
                json!({"type": "text", "text": m.content}),
                // Images as `image` blocks (base64, or a URL source); the API takes no audio.
                |a| match (a.kind, &a.url) {
                    (crate::api::AttachmentKind::Image { .. }, Some(url)) => {
                        Some(json!({"type": "image", "source": {"type": "url", "url": &**url}}))
                    }
                    (crate::api::AttachmentKind::Image { mime, .. }, None) => {
                        Some(json!({"type": "image",
                        "source": {"type": "base64", "media_type": mime, "data": &*a.base64}}))
                    }
                    (crate::api::AttachmentKind::Audio { .. }, _) => None,
                },
            );
            out.push(json!({"role": m.role, "content": content}));
            continue;
        }
        if m.tool_calls.is_empty() {
            out.push(json!({"role": m.role, "content": m.content}));
            continue;
        }
        let mut blocks = Vec::new();
        if !m.content.is_empty() {
            blocks.push(json!({"type": "text", "text": m.content}));
        }
        for call in &m.tool_calls {
            // Arguments that are not JSON (a call cut off at its cap) go as a string.
            let input = serde_json::from_str::<Value>(&call.arguments)
                .ok()
                .filter(Value::is_object)
                .unwrap_or_else(|| json!({"arguments": call.arguments}));
            blocks.push(
                json!({"type": "tool_use", "id": call.id, "name": call.name, "input": input}),
            );
        }
        out.push(json!({"role": m.role, "content": blocks}));
    }
    (system, out)
}

/// The plan's tools (chat's shape) in Anthropic's: name, description, `input_schema`.
fn tools(chat_tools: &Value) -> Value {
    let Some(list) = chat_tools.as_array() else {
        return chat_tools.clone();
    };
    list.iter()
        .map(|tool| match tool.get("function") {
            Some(function) => {
                let mut ours = Map::new();
                for (from, to) in [
                    ("name", "name"),
                    ("description", "description"),
                    ("parameters", "input_schema"),
                ] {
                    if let Some(value) = function.get(from) {
                        ours.insert(to.into(), value.clone());
                    }
                }
                ours.entry("input_schema")
                    .or_insert_with(|| json!({"type": "object"}));
                Value::Object(ours)
            }
            None => tool.clone(),
        })
        .collect()
}

/// The plan's chat-named fields Anthropic names otherwise: `tools` in its shape, `stop` as
/// `stop_sequences` (a list).
fn anthropic_names(key: &str, value: &Value) -> Option<(String, Value)> {
    match (key, value) {
        ("tools", _) => Some((key.to_string(), tools(value))),
        ("stop", Value::String(one)) => Some(("stop_sequences".to_string(), json!([one]))),
        ("stop", _) => Some(("stop_sequences".to_string(), value.clone())),
        _ => None,
    }
}

/// Appends a block's text (or a tool use's name and input) as the part it is.
fn block_text(block: &Block, out: &mut Generated) {
    match block.kind.as_deref() {
        Some("thinking") => {
            if let Some(thinking) = &block.thinking {
                out.push(Part::Reasoning, thinking);
            }
        }
        Some("tool_use") => {
            let input = block
                .input
                .as_ref()
                .filter(|input| input.as_object().is_some_and(|o| !o.is_empty()))
                .map(Value::to_string);
            out.tool_call(
                out.tool_calls(),
                block.id.as_deref(),
                block.name.as_deref(),
                input.as_deref(),
            );
        }
        _ => {
            if let Some(text) = &block.text {
                out.push(Part::Answer, text);
            }
        }
    }
}

impl Dialect for Messages {
    fn name(&self) -> &'static str {
        "messages"
    }

    fn operation(&self) -> &'static str {
        "chat"
    }

    fn summary(&self) -> &'static str {
        "/v1/messages (Anthropic's Messages API: x-api-key, `system` apart, named events)"
    }

    fn path(&self) -> &'static str {
        "/messages"
    }

    fn envelope(&self) -> &'static Envelope {
        &ENVELOPE
    }

    fn no_exact_lengths(&self) -> &'static str {
        "the Messages API has no way to ask for an exact length (servers that speak it drop \
         ignore_eos): remove ignore-eos=#true, and read lengths from stop_reason max_tokens"
    }

    fn body(&self, prompt: &Prompt, max_tokens: u32, options: &BodyOptions) -> Vec<u8> {
        let mut body = Map::new();
        body.insert("model".into(), options.model.clone().into());
        match prompt {
            Prompt::Text(_) | Prompt::Batch { .. } => {
                body.insert(
                    "messages".into(),
                    json!([{"role": "user", "content": prompt.joined()}]),
                );
            }
            Prompt::Messages(messages) => {
                let (system, messages) = conversation(messages);
                if let Some(system) = system {
                    body.insert("system".into(), system.into());
                }
                body.insert("messages".into(), messages.into());
            }
        }
        body.insert("max_tokens".into(), max_tokens.into());
        body.insert("stream".into(), options.stream.into());
        super::body_with_plan_fields(body, options, anthropic_names)
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
            // Its output count is where the answer starts (0 or 1), never the answer's: only
            // its input counts are kept, so that a late or repeated message_start cannot undo
            // the output message_delta reported.
            "message_start" => Decoded {
                usage: event.message.and_then(|m| m.usage).map(|usage| Usage {
                    completion: None,
                    ..Usage::from(usage)
                }),
                ..Decoded::default()
            },
            "content_block_start" => {
                if let Some(block) = &event.content_block {
                    block_text(block, out);
                }
                Decoded::default()
            }
            "content_block_delta" => {
                if let Some(delta) = &event.delta {
                    match delta.kind.as_deref() {
                        Some("thinking_delta") => {
                            if let Some(thinking) = &delta.thinking {
                                out.push(Part::Reasoning, thinking);
                            }
                        }
                        Some("input_json_delta") => {
                            if let Some(json) = delta.partial_json.as_deref() {
                                // Blocks stream one after another: a fragment belongs to the
                                // latest call.
                                out.tool_call(
                                    out.tool_calls().saturating_sub(1),
                                    None,
                                    None,
                                    Some(json),
                                );
                            }
                        }
                        // A thinking block's signature is no generated text.
                        Some("signature_delta") => {}
                        _ => {
                            if let Some(text) = &delta.text {
                                out.push(Part::Answer, text);
                            }
                        }
                    }
                }
                Decoded::default()
            }
            "message_delta" => Decoded {
                finish_reason: event
                    .delta
                    .and_then(|d| d.stop_reason)
                    .map(|reason| super::finish_reason(&reason, STOP_REASONS)),
                usage: event.usage.map(Usage::from),
                ..Decoded::default()
            },
            "message_stop" => Decoded {
                end: true,
                ..Decoded::default()
            },
            "error" => Decoded {
                error: Some(
                    event
                        .error
                        .as_ref()
                        .map_or_else(|| ServerError::Event(data.to_string()), server_error),
                ),
                ..Decoded::default()
            },
            // ping, content_block_stop: nothing new.
            _ => Decoded::default(),
        };
        Ok(decoded)
    }

    fn decode_body(&self, body: &str, out: &mut Generated) -> Result<Decoded, DecodeError> {
        let whole: Whole = serde_json::from_str(body).map_err(|e| DecodeError(e.to_string()))?;
        if let Some(error) = whole.error.filter(|e| !e.is_null()) {
            return Ok(Decoded {
                error: Some(server_error(&error)),
                ..Decoded::default()
            });
        }
        if whole.kind.as_deref() == Some("error") {
            return Ok(Decoded {
                error: Some(ServerError::Object(body.to_string())),
                ..Decoded::default()
            });
        }
        for block in &whole.content {
            block_text(block, out);
        }
        Ok(Decoded {
            finish_reason: whole
                .stop_reason
                .map(|reason| super::finish_reason(&reason, STOP_REASONS)),
            usage: whole.usage.map(Usage::from),
            ..Decoded::default()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::ToolCall;

    fn options() -> BodyOptions {
        let mut extra = Map::new();
        extra.insert(
            "tools".into(),
            json!([{"type": "function", "function": {"name": "search", "description": "find", "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}}]),
        );
        extra.insert("stop".into(), "\n\n".into());
        extra.insert(
            "thinking".into(),
            json!({"type": "enabled", "budget_tokens": 1024}),
        );
        BodyOptions {
            model: "claude".into(),
            stream: true,
            continuous_usage: false,
            ignore_eos: false,
            extra: std::sync::Arc::new(extra),
        }
    }

    #[test]
    fn bodies_put_the_system_apart_and_results_in_one_user_turn() {
        let mut assistant = Message::text("assistant", "let me look".into());
        assistant.tool_calls = vec![
            ToolCall {
                id: "toolu_1".into(),
                name: "search".into(),
                arguments: "{\"q\":\"a\"}".into(),
            },
            ToolCall {
                id: "toolu_2".into(),
                name: "search".into(),
                arguments: "{\"q\":".into(),
            },
        ];
        let mut first = Message::text("tool", "one".into());
        first.tool_call_id = Some("toolu_1".into());
        let mut second = Message::text("tool", "two".into());
        second.tool_call_id = Some("toolu_2".into());
        let prompt = Prompt::Messages(vec![
            Message::text("system", "be brief".into()),
            Message::text("user", "hi".into()),
            assistant,
            first,
            second,
        ]);
        let body: Value = serde_json::from_slice(&Messages.body(&prompt, 64, &options())).unwrap();
        assert_eq!(body["system"], "be brief");
        assert_eq!(body["max_tokens"], 64);
        assert_eq!(body["messages"].as_array().unwrap().len(), 3);
        assert_eq!(
            body["messages"][0],
            json!({"role": "user", "content": "hi"})
        );
        let blocks = &body["messages"][1]["content"];
        assert_eq!(blocks[0], json!({"type": "text", "text": "let me look"}));
        assert_eq!(blocks[1]["input"], json!({"q": "a"}));
        assert_eq!(blocks[2]["input"], json!({"arguments": "{\"q\":"}));
        let results = &body["messages"][2];
        assert_eq!(results["role"], "user");
        assert_eq!(results["content"][1]["tool_use_id"], "toolu_2");
        assert_eq!(
            body["tools"][0]["input_schema"]["properties"]["q"]["type"],
            "string"
        );
        assert_eq!(body["thinking"]["budget_tokens"], 1024);
        assert_eq!(body["stop_sequences"], json!(["\n\n"]));
        assert!(body.get("ignore_eos").is_none());
        assert_eq!(
            Messages.credentials("sk-ant")[0],
            (
                reqwest::header::HeaderName::from_static("x-api-key"),
                "sk-ant".to_string()
            )
        );
        assert_eq!(
            Messages.fixed_headers(),
            &[("anthropic-version", ANTHROPIC_VERSION)]
        );
    }

    /// A stream with thinking, as Anthropic's API and llama.cpp's server send one.
    #[test]
    fn a_stream_of_thinking_then_text_adds_up_its_usage() {
        let events = [
            (
                "message_start",
                r#"{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[],"model":"m","stop_reason":null,"stop_sequence":null,"usage":{"cache_read_input_tokens":6,"input_tokens":4,"output_tokens":0}}}"#,
            ),
            (
                "content_block_start",
                r#"{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":""}}"#,
            ),
            ("ping", r#"{"type": "ping"}"#),
            (
                "content_block_delta",
                r#"{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"hmm"}}"#,
            ),
            (
                "content_block_delta",
                r#"{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"EqQB"}}"#,
            ),
            (
                "content_block_stop",
                r#"{"type":"content_block_stop","index":0}"#,
            ),
            (
                "content_block_start",
                r#"{"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}}"#,
            ),
            (
                "content_block_delta",
                r#"{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"Hi"}}"#,
            ),
            (
                "content_block_stop",
                r#"{"type":"content_block_stop","index":1}"#,
            ),
            (
                "message_delta",
                r#"{"type":"message_delta","delta":{"stop_reason":"max_tokens","stop_sequence":null},"usage":{"output_tokens":7}}"#,
            ),
            ("message_stop", r#"{"type":"message_stop"}"#),
        ];
        let mut text = String::new();
        let mut usage = Usage::default();
        let (mut finish, mut end, mut reasoning) = (None, false, 0);
        for (name, data) in events {
            let mut out = Generated::new(&mut text);
            let decoded = Messages.decode_event(Some(name), data, &mut out).unwrap();
            reasoning += out.reasoning_bytes();
            if let Some(u) = decoded.usage {
                usage.merge(u);
            }
            finish = finish.or(decoded.finish_reason);
            end |= decoded.end;
        }
        assert_eq!(text, "hmmHi");
        assert_eq!(reasoning, 3);
        assert_eq!(finish.as_deref(), Some("length"));
        assert!(end);
        assert_eq!(
            (usage.prompt, usage.cached, usage.completion),
            (Some(10), Some(6), Some(7))
        );
    }

    #[test]
    fn tool_use_is_put_together_and_overload_is_its_own_error() {
        let (mut text, mut calls) = (String::new(), Vec::new());
        for data in [
            r#"{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"toolu_1","name":"search","input":{}}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\"q\":"}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"1}"}}"#,
        ] {
            Messages
                .decode_event(
                    None,
                    data,
                    &mut Generated::with_calls(&mut text, &mut calls, 0),
                )
                .unwrap();
        }
        assert_eq!(
            (
                calls[0].id.as_str(),
                calls[0].name.as_str(),
                calls[0].arguments.as_str()
            ),
            ("toolu_1", "search", "{\"q\":1}")
        );
        let decoded = Messages
            .decode_event(
                Some("error"),
                r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
                &mut Generated::new(&mut text),
            )
            .unwrap();
        assert_eq!(
            decoded.error,
            Some(ServerError::Overloaded("Overloaded".into()))
        );
        let decoded = Messages
            .decode_body(
                r#"{"type":"error","error":{"type":"api_error","message":"boom"}}"#,
                &mut Generated::new(&mut text),
            )
            .unwrap();
        assert_eq!(decoded.error, Some(ServerError::Object("boom".into())));
        let decoded = Messages
            .decode_body(
                r#"{"type":"error","error":{"type":"rate_limit_error","message":"Number of request tokens has exceeded your per-minute rate limit"}}"#,
                &mut Generated::new(&mut text),
            )
            .unwrap();
        assert!(matches!(decoded.error, Some(ServerError::RateLimited(_))));
    }

    /// A whole message as llama.cpp's server answers one.
    #[test]
    fn a_whole_message() {
        let body = r#"{"id":"chatcmpl-1","type":"message","role":"assistant","content":[{"type":"thinking","thinking":"so","signature":""},{"type":"text","text":"Hello"}],"model":"m","stop_reason":"end_turn","stop_sequence":null,"usage":{"cache_read_input_tokens":0,"input_tokens":9,"output_tokens":3}}"#;
        let mut text = String::new();
        let mut out = Generated::new(&mut text);
        let decoded = Messages.decode_body(body, &mut out).unwrap();
        assert_eq!(out.reasoning_bytes(), 2);
        assert_eq!(text, "soHello");
        assert_eq!(decoded.finish_reason.as_deref(), Some("stop"));
        assert_eq!(decoded.usage.and_then(|u| u.prompt), Some(9));
    }
}
