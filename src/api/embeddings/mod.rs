//! OpenAI's embeddings API (`/v1/embeddings`): a batch of inputs per request (`input` as a
//! list of texts), answered with one embedding per input (`data`) and the prompt tokens read
//! (`usage.prompt_tokens`). Nothing is generated and nothing streams: a request's latency is
//! its E2E, and what it did is how many inputs (and tokens) it embedded.
//!
//! What this is not: a reader of the vectors. Their numbers are skipped unread (serde's
//! `IgnoredAny`), counted only: a benchmark measures the server, not the embeddings.

use serde::de::IgnoredAny;
use serde::Deserialize;
use serde_json::{Map, Value};

use super::{
    ApiKind, BodyOptions, Capabilities, DecodeError, Decoded, Dialect, Envelope, Generated,
    ServerError, Usage,
};
use crate::api::Prompt;

/// The embeddings dialect.
#[derive(Debug)]
pub struct Embeddings;

/// What the embedding and rerank APIs share: no streaming, no generation, a bearer key.
pub(super) const NOT_GENERATING: Capabilities = Capabilities {
    kind: ApiKind::Embed,
    streaming: false,
    usage_in_stream: false,
    exact_lengths: false,
    tool_calls: false,
    structured_output: false,
    images: false,
    audio: false,
};

static ENVELOPE: Envelope = Envelope {
    capabilities: NOT_GENERATING,
    reserved_fields: &[
        ("model", "set it with `model` in the target"),
        ("input", "inputs come from the workload (`input`, `batch`)"),
    ],
    credentials: |key| vec![(reqwest::header::AUTHORIZATION, format!("Bearer {key}"))],
    credential_headers: &["authorization"],
    fixed_headers: &[],
    stream_end: "no stream (the API answers whole)",
};

#[derive(Deserialize)]
struct Body {
    #[serde(default)]
    data: Option<Vec<IgnoredAny>>,
    #[serde(default)]
    usage: Option<WireUsage>,
    #[serde(default)]
    error: Option<Value>,
}

/// Usage as embedding and rerank servers say it: `prompt_tokens` (OpenAI, vLLM, llama.cpp),
/// else `total_tokens` (Jina's, vLLM's rerank), all of it input.
#[derive(Deserialize)]
pub(super) struct WireUsage {
    prompt_tokens: Option<crate::api::WireCount>,
    total_tokens: Option<crate::api::WireCount>,
}

impl From<WireUsage> for Usage {
    fn from(u: WireUsage) -> Usage {
        let mut counts = super::CountReader::default();
        let prompt = match (u.prompt_tokens, u.total_tokens) {
            (Some(n), _) => counts.read("prompt_tokens", Some(n)),
            (None, Some(n)) => counts.read("total_tokens", Some(n)),
            (None, None) => return Usage::default(),
        };
        Usage {
            prompt,
            completion: Some(0),
            invalid: counts.invalid(),
            ..Usage::default()
        }
    }
}

/// An error body's message (`{"error": {"message": …}}`, or `{"error": "…"}`).
pub(super) fn error_message(error: &Value) -> String {
    error
        .get("message")
        .and_then(Value::as_str)
        .or_else(|| error.as_str())
        .map_or_else(|| error.to_string(), str::to_string)
}

impl Dialect for Embeddings {
    fn name(&self) -> &'static str {
        "embeddings"
    }

    fn operation(&self) -> &'static str {
        "embeddings"
    }

    fn summary(&self) -> &'static str {
        "/v1/embeddings (a batch of inputs embedded)"
    }

    fn path(&self) -> &'static str {
        "/embeddings"
    }

    fn envelope(&self) -> &'static Envelope {
        &ENVELOPE
    }

    fn body(&self, prompt: &Prompt, _max_tokens: u32, options: &BodyOptions) -> Vec<u8> {
        let inputs: Vec<Value> = match prompt {
            Prompt::Batch { inputs, .. } => inputs.iter().map(|t| t.as_str().into()).collect(),
            other => vec![other.joined().into()],
        };
        let mut own = Map::new();
        own.insert("model".into(), options.model.clone().into());
        own.insert("input".into(), inputs.into());
        super::body_with_plan_fields(own, options, super::same_names)
    }

    fn decode_event(
        &self,
        _name: Option<&str>,
        _data: &str,
        _out: &mut Generated,
    ) -> Result<Decoded, DecodeError> {
        Err(DecodeError("the embeddings API does not stream".into()))
    }

    fn decode_body(&self, body: &str, _out: &mut Generated) -> Result<Decoded, DecodeError> {
        let whole: Body = serde_json::from_str(body).map_err(|e| DecodeError(e.to_string()))?;
        if let Some(error) = whole.error.filter(|e| !e.is_null()) {
            return Ok(Decoded {
                error: Some(ServerError::Object(error_message(&error))),
                ..Decoded::default()
            });
        }
        Ok(Decoded {
            usage: whole.usage.map(Usage::from),
            inputs: whole.data.map(|data| data.len() as u64),
            ..Decoded::default()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_goes_as_a_list_and_the_answer_is_counted_not_read() {
        let options = BodyOptions {
            model: "e5".into(),
            stream: false,
            continuous_usage: false,
            ignore_eos: false,
            extra: std::sync::Arc::new(
                serde_json::from_str(r#"{"encoding_format": "base64", "input": "no"}"#).unwrap(),
            ),
        };
        let prompt = Prompt::Batch {
            query: None,
            inputs: vec!["a b".into(), "c".into()],
        };
        let body: Value = serde_json::from_slice(&Embeddings.body(&prompt, 0, &options)).unwrap();
        assert_eq!(body["input"], serde_json::json!(["a b", "c"]));
        assert_eq!(body["encoding_format"], "base64");
        assert!(body.get("max_tokens").is_none());
        // llama.cpp's server, as it answers.
        let answer = r#"{"model":"m","object":"list","usage":{"prompt_tokens":7,"total_tokens":7},"data":[{"embedding":[0.1,-0.2,3e-5],"index":0,"object":"embedding"},{"embedding":[0.5,0.5,0.5],"index":1,"object":"embedding"}]}"#;
        let mut text = String::new();
        let decoded = Embeddings
            .decode_body(answer, &mut Generated::new(&mut text))
            .unwrap();
        assert_eq!(decoded.inputs, Some(2));
        assert_eq!(decoded.usage.and_then(|u| u.prompt), Some(7));
        assert!(text.is_empty());
        let decoded = Embeddings
            .decode_body(
                r#"{"error":{"code":400,"message":"input is too large","type":"invalid_request_error"}}"#,
                &mut Generated::new(&mut text),
            )
            .unwrap();
        assert_eq!(
            decoded.error,
            Some(ServerError::Object("input is too large".into()))
        );
    }
}
