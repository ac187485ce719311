//! The OpenAI envelope that chat and completions share: the body's common fields and the ones
//! it reserves, the bearer key, the stream's grammar (`data:` chunks ending with `[DONE]`, an
//! `event: error`), and a chunk's `choices`, `usage` and `error`.
//!
//! Decoding borrows from the event's text and holds a chunk's one choice inline, so that reading
//! a token allocates nothing (the read path's cost per token is the client's ceiling).

pub(super) mod fast;

use serde::Deserialize;
use serde_json::{Map, Value};

use super::{BodyOptions, DecodeError, Decoded, Generated, ServerError, Usage};
use fast::Shape;

/// The envelope OpenAI's chat and completions share. Both prompt fields are reserved in both
/// dialects, so that a plan's fields mean the same whichever `api` it names; the key goes as a
/// bearer token; vLLM, SGLang and llama.cpp's server honour `ignore_eos`.
pub(super) static ENVELOPE: super::Envelope = super::Envelope {
    capabilities: super::Capabilities {
        kind: super::ApiKind::Generate,
        streaming: true,
        usage_in_stream: true,
        exact_lengths: true,
        // Chat's own: completions have no messages to carry calls and results in.
        tool_calls: false,
        structured_output: true,
        // Completions take text; chat says it carries media (`image_url`, `input_audio`).
        images: false,
        audio: false,
    },
    reserved_fields: &[
        ("model", "set it with `model` in the target"),
        ("messages", "prompts come from the workload"),
        ("prompt", "prompts come from the workload"),
        (
            "max_tokens",
            "set output lengths with `output` in the workload",
        ),
        (
            "max_completion_tokens",
            "set output lengths with `output` in the workload",
        ),
        (
            "min_tokens",
            "ask for exact lengths with output N ignore-eos=#true",
        ),
        (
            "ignore_eos",
            "ask for exact lengths with output N ignore-eos=#true",
        ),
        ("stream", "set it with `stream` in the target"),
        (
            "stream_options",
            "llmload asks for usage itself; see `continuous-usage`",
        ),
    ],
    credentials: |key| vec![(reqwest::header::AUTHORIZATION, format!("Bearer {key}"))],
    credential_headers: &["authorization"],
    fixed_headers: &[],
    stream_end: "a finish_reason or [DONE]",
};

/// The fields every OpenAI-style body has, around the dialect's own (`messages` or `prompt`).
pub(super) fn body(options: &BodyOptions, max_tokens: u32, prompt_field: (&str, Value)) -> Vec<u8> {
    let mut body = Map::new();
    body.insert("model".into(), options.model.clone().into());
    body.insert(prompt_field.0.into(), prompt_field.1);
    body.insert("max_tokens".into(), max_tokens.into());
    body.insert("stream".into(), options.stream.into());
    if options.stream {
        let mut stream_options = serde_json::json!({"include_usage": true});
        if options.continuous_usage {
            stream_options["continuous_usage_stats"] = true.into();
        }
        body.insert("stream_options".into(), stream_options);
    }
    if options.ignore_eos {
        // vLLM, SGLang and llama.cpp's server honour ignore_eos; vLLM and SGLang min_tokens too.
        body.insert("ignore_eos".into(), true.into());
        body.insert("min_tokens".into(), max_tokens.into());
    }
    super::body_with_plan_fields(body, options, super::same_names)
}

/// Counts are read as any JSON number, so that a negative or fractional one is reported as
/// what it is rather than as "not valid JSON".
#[derive(Deserialize)]
struct WireUsage {
    prompt_tokens: Option<crate::api::WireCount>,
    completion_tokens: Option<crate::api::WireCount>,
    prompt_tokens_details: Option<WireDetails>,
    completion_tokens_details: Option<WireCompletionDetails>,
}

#[derive(Deserialize)]
struct WireCompletionDetails {
    reasoning_tokens: Option<crate::api::WireCount>,
}

#[derive(Deserialize)]
struct WireDetails {
    cached_tokens: Option<crate::api::WireCount>,
}

impl From<WireUsage> for Usage {
    fn from(u: WireUsage) -> Usage {
        let mut counts = super::CountReader::default();
        Usage {
            prompt: counts.read("prompt_tokens", u.prompt_tokens),
            completion: counts.read("completion_tokens", u.completion_tokens),
            cached: counts.read(
                "prompt_tokens_details.cached_tokens",
                u.prompt_tokens_details.and_then(|d| d.cached_tokens),
            ),
            reasoning: counts.read(
                "completion_tokens_details.reasoning_tokens",
                u.completion_tokens_details.and_then(|d| d.reasoning_tokens),
            ),
            invalid: counts.invalid(),
        }
    }
}

/// A choice of one dialect: the text it generated, and its finish_reason.
pub(super) trait Choice {
    /// Appends the choice's generated text to `out`, each part as what it is.
    fn generated(&self, out: &mut Generated);
    /// Takes its finish_reason, if it has one.
    fn finish_reason(&mut self) -> Option<String>;
}

/// A chunk's `choices`. Streams carry one choice per chunk: it is held inline, and only further
/// choices go to a Vec, so that a chunk costs no heap allocation.
struct Choices<C> {
    first: Option<C>,
    rest: Vec<C>,
}

impl<'de, C: Deserialize<'de>> Deserialize<'de> for Choices<C> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor<C>(std::marker::PhantomData<C>);
        impl<'de, C: Deserialize<'de>> serde::de::Visitor<'de> for Visitor<C> {
            type Value = Choices<C>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an array of choices")
            }
            fn visit_seq<S: serde::de::SeqAccess<'de>>(
                self,
                mut seq: S,
            ) -> Result<Choices<C>, S::Error> {
                let mut choices = Choices {
                    first: seq.next_element()?,
                    rest: Vec::new(),
                };
                while let Some(choice) = seq.next_element()? {
                    choices.rest.push(choice);
                }
                Ok(choices)
            }
        }
        deserializer.deserialize_seq(Visitor(std::marker::PhantomData))
    }
}

#[derive(Deserialize)]
#[serde(bound(deserialize = "C: Deserialize<'de>"))]
struct Chunk<C> {
    #[serde(default)]
    choices: Option<Choices<C>>,
    #[serde(default)]
    usage: Option<WireUsage>,
    #[serde(default)]
    error: Option<Value>,
}

/// Decodes one OpenAI-style streamed event whose choices are `C`, `shape` telling the fast path
/// which they are: `[DONE]` ends the stream; an event named `error` is the server's error, once
/// its data is read as JSON.
pub(super) fn decode_event<'a, C: Choice + Deserialize<'a>>(
    name: Option<&str>,
    data: &'a str,
    out: &mut Generated,
    shape: Shape,
) -> Result<Decoded, DecodeError> {
    if data == "[DONE]" {
        return Ok(Decoded {
            end: true,
            ..Decoded::default()
        });
    }
    let mut decoded = decode::<C>(data, out, shape)?;
    if decoded.error.is_none() && name == Some("error") {
        decoded.error = Some(ServerError::Event(data.to_string()));
    }
    Ok(decoded)
}

/// Decodes one OpenAI-style chunk (or body) whose choices are `C`, `shape` telling the fast
/// path which they are.
pub(super) fn decode<'a, C: Choice + Deserialize<'a>>(
    data: &'a str,
    out: &mut Generated,
    shape: Shape,
) -> Result<Decoded, DecodeError> {
    match fast::decode(data, out, shape) {
        Some(decoded) => Ok(decoded),
        None => decode_with_serde::<C>(data, out),
    }
}

/// [`decode`] without the fast path: the reference.
pub(super) fn decode_with_serde<'a, C: Choice + Deserialize<'a>>(
    data: &'a str,
    out: &mut Generated,
) -> Result<Decoded, DecodeError> {
    let chunk: Chunk<C> = serde_json::from_str(data).map_err(|e| DecodeError(e.to_string()))?;
    if let Some(error) = chunk.error.filter(|e| !e.is_null()) {
        let message = error
            .get("message")
            .and_then(|m| m.as_str())
            .map(str::to_string)
            .unwrap_or_else(|| error.to_string());
        return Ok(Decoded {
            error: Some(ServerError::Object(message)),
            ..Decoded::default()
        });
    }
    let mut decoded = Decoded {
        usage: chunk.usage.map(Usage::from),
        ..Decoded::default()
    };
    if let Some(choices) = chunk.choices {
        for mut choice in choices.first.into_iter().chain(choices.rest) {
            choice.generated(out);
            if let Some(reason) = choice.finish_reason() {
                decoded.finish_reason = Some(reason);
            }
        }
    }
    Ok(decoded)
}
