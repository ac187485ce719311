//! OpenAI's chat API (`/v1/chat/completions`): the prompt as messages; the answer in each
//! choice's `delta` (streamed) or `message` (not), as `content`, or `reasoning_content` /
//! `reasoning` for reasoning models.

use std::borrow::Cow;

use serde::Deserialize;

use super::openai::fast::Shape;
use super::openai::{self, Choice};
use super::{BodyOptions, DecodeError, Decoded, Dialect, Envelope, Generated, Part};
use crate::api::Prompt;

/// The chat dialect.
#[derive(Debug)]
pub struct Chat;

#[derive(Deserialize)]
struct Text<'a> {
    #[serde(borrow, default)]
    content: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    reasoning_content: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    reasoning: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    tool_calls: Option<Vec<ToolCall<'a>>>,
}

/// A fragment of a tool call: its index among the answer's calls, and (first) its function's
/// name, then pieces of its arguments.
#[derive(Deserialize)]
struct ToolCall<'a> {
    #[serde(default)]
    index: Option<u32>,
    #[serde(borrow, default)]
    id: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    function: Option<Function<'a>>,
}

#[derive(Deserialize)]
struct Function<'a> {
    #[serde(borrow, default)]
    name: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    arguments: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
pub(super) struct ChatChoice<'a> {
    #[serde(borrow, default)]
    delta: Option<Text<'a>>,
    #[serde(borrow, default)]
    message: Option<Text<'a>>,
    #[serde(default)]
    finish_reason: Option<String>,
}

impl Choice for ChatChoice<'_> {
    fn generated(&self, out: &mut Generated) {
        for part in [&self.delta, &self.message].into_iter().flatten() {
            // Reasoning comes before the answer, in both of its spellings.
            for (kind, piece) in [
                (Part::Reasoning, &part.reasoning_content),
                (Part::Reasoning, &part.reasoning),
                (Part::Answer, &part.content),
            ] {
                if let Some(piece) = piece {
                    out.push(kind, piece);
                }
            }
            for (position, call) in part.tool_calls.iter().flatten().enumerate() {
                let function = call.function.as_ref();
                out.tool_call(
                    call.index.unwrap_or(position as u32),
                    call.id.as_deref(),
                    function.and_then(|f| f.name.as_deref()),
                    function.and_then(|f| f.arguments.as_deref()),
                );
            }
        }
    }

    fn finish_reason(&mut self) -> Option<String> {
        self.finish_reason.take()
    }
}

/// One message as the chat API takes it: an assistant's tool calls (with their arguments as
/// the JSON text they streamed as), a tool result naming the call it answers.
fn message(m: &crate::api::Message) -> serde_json::Value {
    let mut value = serde_json::json!({"role": m.role, "content": m.content});
    if !m.media.is_empty() {
        value["content"] = super::content_parts(
            m,
            serde_json::json!({"type": "text", "text": m.content}),
            media_part,
        );
    }
    if !m.tool_calls.is_empty() {
        value["tool_calls"] = m
            .tool_calls
            .iter()
            .map(|call| {
                serde_json::json!({"id": call.id, "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments}})
            })
            .collect();
    }
    if let Some(id) = &m.tool_call_id {
        value["tool_call_id"] = id.as_str().into();
    }
    value
}

/// An image as an `image_url` part (a data URL), a clip as an `input_audio` part.
fn media_part(attachment: &crate::api::Attachment) -> Option<serde_json::Value> {
    Some(match attachment.kind {
        crate::api::AttachmentKind::Image { .. } => serde_json::json!(
            {"type": "image_url", "image_url": {"url": attachment.image_url()}}
        ),
        crate::api::AttachmentKind::Audio { .. } => serde_json::json!(
            {"type": "input_audio", "input_audio": {"data": &*attachment.base64, "format": "wav"}}
        ),
    })
}

impl Dialect for Chat {
    fn name(&self) -> &'static str {
        "chat"
    }

    fn operation(&self) -> &'static str {
        "chat"
    }

    fn summary(&self) -> &'static str {
        "/v1/chat/completions (the prompt as messages)"
    }

    fn path(&self) -> &'static str {
        "/chat/completions"
    }

    fn envelope(&self) -> &'static Envelope {
        &openai::ENVELOPE
    }

    fn capabilities(&self) -> super::Capabilities {
        super::Capabilities {
            tool_calls: true,
            images: true,
            audio: true,
            ..openai::ENVELOPE.capabilities
        }
    }

    fn body(&self, prompt: &Prompt, max_tokens: u32, options: &BodyOptions) -> Vec<u8> {
        let messages = match prompt {
            Prompt::Text(text) => serde_json::json!([{"role": "user", "content": text}]),
            Prompt::Messages(messages) => messages.iter().map(message).collect(),
            Prompt::Batch { .. } => {
                serde_json::json!([{"role": "user", "content": prompt.joined()}])
            }
        };
        openai::body(options, max_tokens, ("messages", messages))
    }

    fn decode_event(
        &self,
        name: Option<&str>,
        data: &str,
        out: &mut Generated,
    ) -> Result<Decoded, DecodeError> {
        openai::decode_event::<ChatChoice>(name, data, out, Shape::Chat)
    }

    fn decode_body(&self, body: &str, out: &mut Generated) -> Result<Decoded, DecodeError> {
        openai::decode::<ChatChoice>(body, out, Shape::Chat)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::Message;

    fn options(ignore_eos: bool) -> BodyOptions {
        BodyOptions {
            model: "m".into(),
            stream: true,
            continuous_usage: false,
            ignore_eos,
            extra: Default::default(),
        }
    }

    #[test]
    fn bodies_ask_for_usage_and_exact_lengths() {
        let body: serde_json::Value =
            serde_json::from_slice(&Chat.body(&Prompt::Text("hi".into()), 32, &options(true)))
                .unwrap();
        assert_eq!(body["messages"][0]["content"], "hi");
        assert_eq!(body["messages"][0]["role"], "user");
        assert_eq!(body["max_tokens"], 32);
        assert_eq!(body["min_tokens"], 32);
        assert_eq!(body["ignore_eos"], true);
        assert_eq!(body["stream_options"]["include_usage"], true);
        let conversation = Prompt::Messages(vec![
            Message::text("system", "be brief".into()),
            Message::text("user", "hi".into()),
        ]);
        let body: serde_json::Value =
            serde_json::from_slice(&Chat.body(&conversation, 8, &options(false))).unwrap();
        assert_eq!(body["messages"][0]["role"], "system");
        assert_eq!(body["messages"][1]["content"], "hi");
        assert!(body.get("ignore_eos").is_none());
    }

    #[test]
    fn role_only_reasoning_and_several_choices() {
        let mut text = String::new();
        let decoded = Chat
            .decode_event(
                None,
                r#"{"choices":[{"delta":{"role":"assistant","content":null}}]}"#,
                &mut Generated::new(&mut text),
            )
            .unwrap();
        assert_eq!((text.as_str(), decoded), ("", Decoded::default()));
        Chat.decode_event(
            None,
            r#"{"choices":[{"delta":{"reasoning_content":"think"}}]}"#,
            &mut Generated::new(&mut text),
        )
        .unwrap();
        Chat.decode_event(
            None,
            r#"{"choices":[{"delta":{"reasoning":"more"}}]}"#,
            &mut Generated::new(&mut text),
        )
        .unwrap();
        let decoded = Chat
            .decode_event(None, r#"{"choices":[{"delta":{"content":"a"}},{"delta":{"content":"b"},"finish_reason":"length"}]}"#, &mut Generated::new(&mut text))
            .unwrap();
        assert_eq!(text, "thinkmoreab");
        assert_eq!(decoded.finish_reason.as_deref(), Some("length"));
        let body = r#"{"choices":[{"message":{"content":"whole"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1}}"#;
        let mut text = String::new();
        let decoded = Chat
            .decode_body(body, &mut Generated::new(&mut text))
            .unwrap();
        assert_eq!(text, "whole");
        assert_eq!(decoded.usage.and_then(|u| u.completion), Some(1));
    }

    #[test]
    fn tool_calls_are_put_together_from_their_fragments_and_sent_back() {
        let mut text = String::new();
        let mut calls = Vec::new();
        for event in [
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"search","arguments":""}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"q\":"}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":" 1}"}}]}}]}"#,
            // A server's index must not size our memory: counted, not kept.
            r#"{"choices":[{"delta":{"tool_calls":[{"index":4000000000,"id":"x","function":{"name":"f"}}]}}]}"#,
        ] {
            Chat.decode_event(
                None,
                event,
                &mut Generated::with_calls(&mut text, &mut calls, 0),
            )
            .unwrap();
        }
        assert_eq!(calls.len(), 1);
        assert_eq!(
            (
                calls[0].id.as_str(),
                calls[0].name.as_str(),
                calls[0].arguments.as_str()
            ),
            ("call_a", "search", "{\"q\": 1}")
        );
        let mut assistant = Message::text("assistant", String::new());
        assistant.tool_calls = calls;
        let mut result = Message::text("tool", "42".into());
        result.tool_call_id = Some("call_a".into());
        let options = BodyOptions {
            model: "m".into(),
            stream: true,
            continuous_usage: false,
            ignore_eos: false,
            extra: Default::default(),
        };
        let body: serde_json::Value = serde_json::from_slice(&Chat.body(
            &Prompt::Messages(vec![Message::text("user", "hi".into()), assistant, result]),
            8,
            &options,
        ))
        .unwrap();
        assert_eq!(
            body["messages"][1]["tool_calls"][0],
            serde_json::json!({"id": "call_a", "type": "function", "function": {"name": "search", "arguments": "{\"q\": 1}"}})
        );
        assert_eq!(body["messages"][2]["tool_call_id"], "call_a");
        assert!(body["messages"][0].get("tool_calls").is_none());
    }

    #[test]
    fn errors_and_bad_json() {
        let mut text = String::new();
        let decoded = Chat
            .decode_event(
                None,
                r#"{"error":{"message":"overloaded"}}"#,
                &mut Generated::new(&mut text),
            )
            .unwrap();
        assert_eq!(
            decoded.error,
            Some(crate::api::ServerError::Object("overloaded".into()))
        );
        assert!(Chat
            .decode_event(None, "{not json", &mut Generated::new(&mut text))
            .is_err());
        let decoded = Chat
            .decode_event(None, r#"{"choices":null}"#, &mut Generated::new(&mut text))
            .unwrap();
        assert_eq!(decoded, Decoded::default());
    }
}
