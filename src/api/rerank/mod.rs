//! The rerank API (`/v1/rerank`), in the shape Cohere, Jina, vLLM and llama.cpp's server all
//! take: a `query` and a list of `documents`, answered with one `results` entry per document
//! (`index`, `relevance_score`) and the tokens read (`usage`). Servers score each document
//! with the query (a cross-encoder reads the pair), so the prompt tokens a server counts are
//! the query's once per document, plus each document's.
//!
//! What this is not: a judge of the ranking. Scores are skipped unread; a benchmark measures
//! how fast the server ranks, not how well.

use serde::de::IgnoredAny;
use serde::Deserialize;
use serde_json::{Map, Value};

use super::embeddings::{error_message, WireUsage, NOT_GENERATING};
use super::{
    ApiKind, BodyOptions, Capabilities, DecodeError, Decoded, Dialect, Envelope, Generated,
    ServerError, Usage,
};
use crate::api::Prompt;

/// The rerank dialect.
#[derive(Debug)]
pub struct Rerank;

static ENVELOPE: Envelope = Envelope {
    capabilities: Capabilities {
        kind: ApiKind::Rank,
        ..NOT_GENERATING
    },
    reserved_fields: &[
        ("model", "set it with `model` in the target"),
        ("query", "the query comes from the workload (`query`)"),
        (
            "documents",
            "documents come from the workload (`input`, `batch`)",
        ),
    ],
    credentials: |key| vec![(reqwest::header::AUTHORIZATION, format!("Bearer {key}"))],
    credential_headers: &["authorization"],
    fixed_headers: &[],
    stream_end: "no stream (the API answers whole)",
};

#[derive(Deserialize)]
struct Body {
    #[serde(default)]
    results: Option<Vec<IgnoredAny>>,
    #[serde(default)]
    usage: Option<WireUsage>,
    /// Cohere says its usage as billed units.
    #[serde(default)]
    meta: Option<Meta>,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Deserialize)]
struct Meta {
    #[serde(default)]
    billed_units: Option<BilledUnits>,
}

#[derive(Deserialize)]
struct BilledUnits {
    #[serde(default)]
    input_tokens: Option<u64>,
}

impl Dialect for Rerank {
    fn name(&self) -> &'static str {
        "rerank"
    }

    fn operation(&self) -> &'static str {
        "rerank"
    }

    fn summary(&self) -> &'static str {
        "/v1/rerank (documents ranked against a query)"
    }

    fn path(&self) -> &'static str {
        "/rerank"
    }

    fn envelope(&self) -> &'static Envelope {
        &ENVELOPE
    }

    fn body(&self, prompt: &Prompt, _max_tokens: u32, options: &BodyOptions) -> Vec<u8> {
        let (query, documents): (String, Vec<Value>) = match prompt {
            Prompt::Batch { query, inputs } => (
                query.clone().unwrap_or_default(),
                inputs.iter().map(|t| t.as_str().into()).collect(),
            ),
            other => (String::new(), vec![other.joined().into()]),
        };
        let mut own = Map::new();
        own.insert("model".into(), options.model.clone().into());
        own.insert("query".into(), query.into());
        own.insert("documents".into(), documents.into());
        super::body_with_plan_fields(own, options, super::same_names)
    }

    fn decode_event(
        &self,
        _name: Option<&str>,
        _data: &str,
        _out: &mut Generated,
    ) -> Result<Decoded, DecodeError> {
        Err(DecodeError("the rerank API does not stream".into()))
    }

    fn decode_body(&self, body: &str, _out: &mut Generated) -> Result<Decoded, DecodeError> {
        let whole: Body = serde_json::from_str(body).map_err(|e| DecodeError(e.to_string()))?;
        if let Some(error) = whole.error.filter(|e| !e.is_null()) {
            return Ok(Decoded {
                error: Some(ServerError::Object(error_message(&error))),
                ..Decoded::default()
            });
        }
        let billed = whole
            .meta
            .and_then(|m| m.billed_units)
            .and_then(|b| b.input_tokens)
            .map(|prompt| Usage {
                prompt: Some(prompt),
                completion: Some(0),
                ..Usage::default()
            });
        Ok(Decoded {
            usage: whole.usage.map(Usage::from).or(billed),
            inputs: whole.results.map(|results| results.len() as u64),
            ..Decoded::default()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_query_and_its_documents_and_every_usage_shape() {
        let options = BodyOptions {
            model: "bge-reranker".into(),
            stream: false,
            continuous_usage: false,
            ignore_eos: false,
            extra: std::sync::Arc::new(serde_json::from_str(r#"{"top_n": 3}"#).unwrap()),
        };
        let prompt = Prompt::Batch {
            query: Some("what".into()),
            inputs: vec!["one".into(), "two".into()],
        };
        let body: Value = serde_json::from_slice(&Rerank.body(&prompt, 0, &options)).unwrap();
        assert_eq!(body["query"], "what");
        assert_eq!(body["documents"], serde_json::json!(["one", "two"]));
        assert_eq!(body["top_n"], 3);
        let mut text = String::new();
        for (answer, tokens) in [
            // llama.cpp's server
            (
                r#"{"model":"m","object":"list","usage":{"prompt_tokens":20,"total_tokens":20},"results":[{"index":0,"relevance_score":0.9},{"index":1,"relevance_score":-2.1}]}"#,
                20,
            ),
            // vLLM's and Jina's
            (
                r#"{"id":"rerank-1","model":"m","usage":{"total_tokens":18},"results":[{"index":1,"document":{"text":"two"},"relevance_score":0.5},{"index":0,"relevance_score":0.1}]}"#,
                18,
            ),
            // Cohere's
            (
                r#"{"id":"x","results":[{"index":0,"relevance_score":0.9},{"index":1,"relevance_score":0.2}],"meta":{"billed_units":{"search_units":1,"input_tokens":16}}}"#,
                16,
            ),
        ] {
            let decoded = Rerank
                .decode_body(answer, &mut Generated::new(&mut text))
                .unwrap();
            assert_eq!(decoded.inputs, Some(2), "{answer}");
            assert_eq!(
                decoded.usage.and_then(|u| u.prompt),
                Some(tokens),
                "{answer}"
            );
        }
    }
}
