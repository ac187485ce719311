//! What the simulator generates for one request: token text, timings and the JSON of each chunk.

use std::sync::atomic::AtomicU32;
use std::sync::Arc;
use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::Value;

use super::wire::Wire;
use crate::plan::SimSettings;
use crate::tokens::Tokenizer;

/// A parsed request, with only what the simulator needs.
#[derive(Debug)]
pub struct SimRequest {
    /// The API it speaks.
    pub wire: Wire,
    pub model: String,
    pub stream: bool,
    pub include_usage: bool,
    pub continuous_usage: bool,
    pub prompt_tokens: usize,
    pub max_tokens: usize,
    /// The prompt's full blocks as chained hashes (with a prefix cache).
    pub blocks: Vec<u64>,
    /// Prompt tokens the prefix cache served, once the engine has admitted the request (with a
    /// prefix cache; usage then reports `prompt_tokens_details.cached_tokens`, as vLLM does).
    pub cached: Option<Arc<AtomicU32>>,
    /// When it arrived, Unix seconds (the chunks' `created`).
    pub created: u64,
    /// The function the answer calls, when a chat request offers tools (and does not say
    /// `tool_choice: "none"`): the first tool's, or the one `tool_choice` names.
    pub tool: Option<String>,
    /// Rounds of tool calls since the conversation's last user message (assistant turns that
    /// called tools): the simulator answers in words once they reach its `tool-rounds`.
    pub tool_rounds: u32,
    /// The request asks for a JSON answer (`response_format` `json_object` or `json_schema`):
    /// the answer is `{"answer": "<the generated words>"}`.
    pub json_answer: bool,
    /// The inputs an embeddings request carries, or the documents of a rerank request.
    pub inputs: usize,
    /// Each input's tokens (a rerank document's with its query): each is its own sequence.
    pub input_sizes: Vec<u32>,
    /// The images it carries: each one's width and height, read from its file's header.
    pub images: Vec<(u32, u32)>,
    /// Seconds of audio it carries.
    pub audio_seconds: f64,
}

/// Chained hashes of the full `size`-token blocks of `ids`: each names its block's tokens and
/// every block before it, so equal hashes mean equal prefixes (as vLLM's block hashes do).
pub fn block_hashes(ids: &[u32], size: usize) -> Vec<u64> {
    let mut previous = 0xcbf2_9ce4_8422_2325u64;
    ids.chunks_exact(size.max(1))
        .map(|block| {
            let mut hash = previous;
            for &id in block {
                hash = crate::seed::mix64(hash ^ id as u64);
            }
            previous = hash;
            hash
        })
        .collect()
}

/// Why the simulator refuses a request (a 400, in its API's error shape), as a server says it.
#[derive(Debug, thiserror::Error)]
pub(crate) enum BadRequest {
    /// The body does not parse.
    #[error("request body is not JSON: {0}")]
    NotJson(serde_json::Error),
    /// A field the API requires is missing, or not of its type (the server's words).
    #[error("{0}")]
    Required(&'static str),
    /// A batch's field (`input`, `documents`) is missing or holds something else than text.
    #[error("'{field}' {problem}")]
    Batch {
        field: String,
        problem: &'static str,
    },
    /// A media part the simulator cannot read: what it is not, and the reader's words.
    #[error("{what}: {detail}")]
    Media { what: &'static str, detail: String },
    /// The body was read on the blocking pool, and its task did not come back.
    #[error("the request could not be read")]
    Unread,
}

impl SimRequest {
    /// Reads a request body of `wire`'s API; the error is the message for a 400 response.
    pub(crate) fn parse(
        body: &[u8],
        wire: Wire,
        tokenizer: &Tokenizer,
        prefix_block: Option<u32>,
    ) -> Result<SimRequest, BadRequest> {
        let value: Value = serde_json::from_slice(body).map_err(BadRequest::NotJson)?;
        // With a prefix cache the prompt's token ids are needed (its blocks are hashed);
        // without one, a count is enough.
        let mut ids: Vec<u32> = Vec::new();
        let mut measure = |text: &str| -> usize {
            match prefix_block {
                Some(_) => {
                    let piece = tokenizer.ids(text);
                    let n = piece.len();
                    ids.extend(piece);
                    n
                }
                None => tokenizer.count(text),
            }
        };
        let chat = wire == Wire::Chat;
        let mut tool_rounds = 0;
        let mut input_sizes = Vec::new();
        let prompt_tokens = if wire.batches() {
            input_sizes = batch_prompt(&value, wire, &mut measure)?;
            input_sizes.iter().map(|&n| n as usize).sum()
        } else if wire == Wire::Responses {
            let (tokens, rounds) = responses_prompt(&value, &mut measure)?;
            tool_rounds = rounds;
            tokens
        } else if wire == Wire::Messages {
            let (tokens, rounds) = messages_prompt(&value, &mut measure)?;
            tool_rounds = rounds;
            tokens
        } else if chat {
            let (tokens, rounds) = chat_prompt(&value, &mut measure)?;
            tool_rounds = rounds;
            tokens
        } else {
            completion_prompt(&value, &mut measure)?
        };
        let blocks = match prefix_block {
            Some(size) => block_hashes(&ids, size as usize),
            None => Vec::new(),
        };
        let max_tokens = max_tokens(&value, wire)?;
        let options = value.get("stream_options");
        let flag = |name: &str| {
            options
                .and_then(|o| o.get(name))
                .and_then(Value::as_bool)
                .unwrap_or(false)
        };
        let tool = (wire != Wire::Completions)
            .then(|| tool_called(&value, wire))
            .flatten();
        let json_answer = asks_json(&value, wire);
        // Responses and Messages always end with their usage.
        let usage_always = matches!(wire, Wire::Responses | Wire::Messages);
        let mut media = Media::default();
        if !wire.batches() && wire != Wire::Completions {
            media.find(&value, 0)?;
        }
        Ok(SimRequest {
            images: media.images,
            audio_seconds: media.audio_seconds,
            tool,
            tool_rounds,
            json_answer,
            inputs: input_sizes.len(),
            input_sizes,
            created: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            wire,
            model: value
                .get("model")
                .and_then(Value::as_str)
                .unwrap_or("llmload-sim")
                .to_string(),
            // Embeddings and rankings are answered whole.
            stream: !wire.batches()
                && value
                    .get("stream")
                    .and_then(Value::as_bool)
                    .unwrap_or(false),
            include_usage: usage_always || flag("include_usage"),
            continuous_usage: flag("continuous_usage_stats"),
            prompt_tokens,
            max_tokens: max_tokens.max(1),
            blocks,
            cached: prefix_block.map(|_| Arc::new(AtomicU32::new(0))),
        })
    }
}

/// The images and audio of a request, each read (and refused when it is not what it says it
/// is) as a vision or audio model's server reads them: an `image_url` part's data URL (chat),
/// an `input_image` part's (Responses), an `image` block's base64 source (Messages), an
/// `input_audio` part's WAV (chat).
#[derive(Debug, Default)]
struct Media {
    images: Vec<(u32, u32)>,
    audio_seconds: f64,
}

/// How deep in a request's JSON media parts are looked for (messages, then their content).
const MEDIA_DEPTH: usize = 8;

impl Media {
    fn find(&mut self, value: &Value, depth: usize) -> Result<(), BadRequest> {
        if depth > MEDIA_DEPTH {
            return Ok(());
        }
        match value {
            Value::Array(items) => {
                for item in items {
                    self.find(item, depth + 1)?;
                }
            }
            Value::Object(fields) => {
                let data_url =
                    |url: Option<&Value>| url.and_then(Value::as_str).map(str::to_string);
                match fields.get("type").and_then(Value::as_str) {
                    Some("image_url") => {
                        let url = data_url(fields.get("image_url").and_then(|u| u.get("url")));
                        self.image(
                            &url.ok_or(BadRequest::Required("an image_url part has no url"))?,
                        )?;
                    }
                    Some("input_image") => {
                        let url = data_url(fields.get("image_url"));
                        self.image(&url.ok_or(BadRequest::Required(
                            "an input_image part has no image_url",
                        ))?)?;
                    }
                    Some("image") => {
                        let data = data_url(fields.get("source").and_then(|s| s.get("data")))
                            .ok_or(BadRequest::Required(
                                "an image block has no base64 source data",
                            ))?;
                        self.image_bytes(&decode_base64(&data)?)?;
                    }
                    Some("input_audio") => {
                        let data = data_url(fields.get("input_audio").and_then(|a| a.get("data")))
                            .ok_or(BadRequest::Required("an input_audio part has no data"))?;
                        let bytes = decode_base64(&data)?;
                        let reader =
                            hound::WavReader::new(std::io::Cursor::new(bytes)).map_err(|e| {
                                BadRequest::Media {
                                    what: "input_audio is not a WAV file",
                                    detail: e.to_string(),
                                }
                            })?;
                        let spec = reader.spec();
                        self.audio_seconds +=
                            f64::from(reader.duration()) / f64::from(spec.sample_rate.max(1));
                    }
                    _ => {
                        for field in fields.values() {
                            self.find(field, depth + 1)?;
                        }
                    }
                }
            }
            _ => {}
        }
        Ok(())
    }

    fn image(&mut self, url: &str) -> Result<(), BadRequest> {
        let data = url
            .strip_prefix("data:")
            .and_then(|rest| rest.split_once(";base64,"))
            .map(|(_, data)| data)
            .ok_or(BadRequest::Required(
                "the simulator reads images from base64 data URLs only",
            ))?;
        self.image_bytes(&decode_base64(data)?)
    }

    fn image_bytes(&mut self, bytes: &[u8]) -> Result<(), BadRequest> {
        let size = image::ImageReader::new(std::io::Cursor::new(bytes))
            .with_guessed_format()
            .map_err(|e| e.to_string())
            .and_then(|reader| reader.into_dimensions().map_err(|e| e.to_string()))
            .map_err(|detail| BadRequest::Media {
                what: "an image is not a PNG or JPEG the simulator can read",
                detail,
            })?;
        self.images.push(size);
        Ok(())
    }
}

fn decode_base64(data: &str) -> Result<Vec<u8>, BadRequest> {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD
        .decode(data)
        .map_err(|e| BadRequest::Media {
            what: "media data is not base64",
            detail: e.to_string(),
        })
}

/// The function a request's answer calls: `tool_choice`'s, else the first of its `tools`;
/// none without tools or with a choice of none. (Chat nests a tool's name in `function`;
/// Responses and Messages have it at the top.)
fn tool_called(body: &Value, wire: Wire) -> Option<String> {
    let tools = body.get("tools")?.as_array()?;
    let name_of = |tool: &Value| {
        let named = match wire {
            Wire::Chat => tool.get("function")?,
            _ => tool,
        };
        named
            .get("name")
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    match body.get("tool_choice") {
        Some(Value::String(choice)) if choice == "none" => None,
        Some(choice) if choice.get("type").and_then(Value::as_str) == Some("none") => None,
        Some(choice @ Value::Object(_)) if name_of(choice).is_some() => name_of(choice),
        _ => tools.first().and_then(name_of),
    }
}

/// The tokens of each input of an embeddings request, or of each (query, document) pair of a
/// rerank request (a cross-encoder reads the query once per document).
fn batch_prompt(
    value: &Value,
    wire: Wire,
    measure: &mut dyn FnMut(&str) -> usize,
) -> Result<Vec<u32>, BadRequest> {
    let texts = |field: &str| -> Result<Vec<String>, BadRequest> {
        match value.get(field) {
            Some(Value::String(text)) => Ok(vec![text.clone()]),
            Some(Value::Array(items)) => items
                .iter()
                .map(|item| match item {
                    Value::String(text) => Ok(text.clone()),
                    // Cohere's documents may be objects with a text.
                    other => other
                        .get("text")
                        .and_then(Value::as_str)
                        .map(str::to_string)
                        .ok_or_else(|| BadRequest::Batch {
                            field: field.to_string(),
                            problem: "holds an item that is not text",
                        }),
                })
                .collect(),
            _ => Err(BadRequest::Batch {
                field: field.to_string(),
                problem: "is required (a string or a list of strings)",
            }),
        }
    };
    if wire == Wire::Rerank {
        let query = value
            .get("query")
            .and_then(Value::as_str)
            .ok_or(BadRequest::Required("'query' is required"))?;
        let documents = texts("documents")?;
        let query_tokens = measure(query);
        return Ok(documents
            .iter()
            .map(|d| (query_tokens + measure(d)) as u32)
            .collect());
    }
    Ok(texts("input")?.iter().map(|t| measure(t) as u32).collect())
}

/// A chat request's prompt tokens (its messages' text, and an assistant's tool calls, which are
/// prompt too), and how many tool rounds followed the user's last message.
fn chat_prompt(
    value: &Value,
    measure: &mut dyn FnMut(&str) -> usize,
) -> Result<(usize, u32), BadRequest> {
    let messages = value
        .get("messages")
        .and_then(Value::as_array)
        .ok_or(BadRequest::Required(
            "`messages` is required and must be an array",
        ))?;
    let tool_rounds = messages
        .iter()
        .rev()
        .take_while(|m| m.get("role").and_then(Value::as_str) != Some("user"))
        .filter(|m| {
            m.get("tool_calls")
                .and_then(Value::as_array)
                .is_some_and(|c| !c.is_empty())
        })
        .count() as u32;
    let tokens = messages
        .iter()
        .map(|m| {
            let content = match m.get("content") {
                Some(Value::String(s)) => measure(s),
                Some(Value::Array(parts)) => parts
                    .iter()
                    .filter_map(|p| p.get("text").and_then(Value::as_str))
                    .map(&mut *measure)
                    .sum(),
                _ => 0,
            };
            // An assistant's tool calls are prompt too: their names and arguments.
            let calls: usize = m
                .get("tool_calls")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|call| call.get("function"))
                .flat_map(|f| [f.get("name"), f.get("arguments")])
                .flatten()
                .filter_map(Value::as_str)
                .map(&mut *measure)
                .sum();
            content + calls
        })
        .sum();
    Ok((tokens, tool_rounds))
}

/// A completion request's prompt tokens: its `prompt`, a string or several.
fn completion_prompt(
    value: &Value,
    measure: &mut dyn FnMut(&str) -> usize,
) -> Result<usize, BadRequest> {
    Ok(match value.get("prompt") {
        Some(Value::String(s)) => measure(s),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(Value::as_str)
            .map(&mut *measure)
            .sum(),
        _ => {
            return Err(BadRequest::Required(
                "`prompt` is required and must be a string",
            ))
        }
    })
}

/// How many tokens the request may generate, by its API's field (an embedding or a ranking
/// costs its prefill and one step: one "token").
fn max_tokens(value: &Value, wire: Wire) -> Result<usize, BadRequest> {
    Ok(match wire {
        // An embedding or a ranking costs its prefill and one step: one "token".
        Wire::Embeddings | Wire::Rerank => Some(&Value::Null),
        Wire::Responses => value.get("max_output_tokens"),
        Wire::Messages => Some(
            value
                .get("max_tokens")
                .ok_or(BadRequest::Required("max_tokens: Field required"))?,
        ),
        _ => value
            .get("max_completion_tokens")
            .or_else(|| value.get("max_tokens")),
    }
    .and_then(Value::as_u64)
    .unwrap_or(if wire.batches() { 1 } else { 16 }) as usize)
}

/// Whether the request asks for a JSON answer (`response_format`, or Responses' `text.format`).
fn asks_json(value: &Value, wire: Wire) -> bool {
    let format = match wire {
        Wire::Responses => value.get("text").and_then(|t| t.get("format")),
        _ => value.get("response_format"),
    };
    format
        .and_then(|f| f.get("type"))
        .and_then(Value::as_str)
        .is_some_and(|kind| kind == "json_object" || kind == "json_schema")
}

/// A Responses request's prompt tokens (`instructions`, then `input`: a text, or items whose
/// content, calls and call outputs all count), and the rounds of calls since the last user
/// item.
fn responses_prompt(
    value: &Value,
    measure: &mut dyn FnMut(&str) -> usize,
) -> Result<(usize, u32), BadRequest> {
    let mut tokens = value
        .get("instructions")
        .and_then(Value::as_str)
        .map_or(0, &mut *measure);
    let mut rounds = 0;
    match value.get("input") {
        Some(Value::String(text)) => tokens += measure(text),
        Some(Value::Array(items)) => {
            for item in items {
                match item.get("type").and_then(Value::as_str) {
                    Some("function_call") => {
                        rounds += 1;
                        for field in ["name", "arguments"] {
                            if let Some(text) = item.get(field).and_then(Value::as_str) {
                                tokens += measure(text);
                            }
                        }
                    }
                    Some("function_call_output") => {
                        if let Some(text) = item.get("output").and_then(Value::as_str) {
                            tokens += measure(text);
                        }
                    }
                    _ => {
                        if item.get("role").and_then(Value::as_str) == Some("user") {
                            rounds = 0;
                        }
                        tokens += content_tokens(item.get("content"), measure);
                    }
                }
            }
        }
        _ => {
            return Err(BadRequest::Required(
                "'input' is required (a string or a list of items)",
            ))
        }
    }
    Ok((tokens, rounds))
}

/// A Messages request's prompt tokens (`system`, then every message's blocks: text, tool uses
/// and results), and the assistant turns that used tools since the user last wrote.
fn messages_prompt(
    value: &Value,
    measure: &mut dyn FnMut(&str) -> usize,
) -> Result<(usize, u32), BadRequest> {
    let mut tokens = content_tokens(value.get("system"), measure);
    let messages = value
        .get("messages")
        .and_then(Value::as_array)
        .ok_or(BadRequest::Required("messages: Field required"))?;
    let mut rounds = 0;
    for m in messages {
        let blocks = m.get("content");
        let block_types: Vec<&str> = blocks
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|b| b.get("type").and_then(Value::as_str))
            .collect();
        match m.get("role").and_then(Value::as_str) {
            Some("user") if !block_types.contains(&"tool_result") => rounds = 0,
            Some("assistant") if block_types.contains(&"tool_use") => rounds += 1,
            _ => {}
        }
        tokens += content_tokens(blocks, measure);
    }
    Ok((tokens, rounds))
}

/// The tokens of a content: a string, or blocks (text, a tool use's name and input, a tool
/// result's content).
fn content_tokens(content: Option<&Value>, measure: &mut dyn FnMut(&str) -> usize) -> usize {
    match content {
        Some(Value::String(text)) => measure(text),
        Some(Value::Array(blocks)) => blocks
            .iter()
            .map(|block| {
                let mut tokens = 0;
                for field in ["text", "name", "output"] {
                    if let Some(text) = block.get(field).and_then(Value::as_str) {
                        tokens += measure(text);
                    }
                }
                if let Some(input) = block.get("input").filter(|i| !i.is_null()) {
                    tokens += measure(&input.to_string());
                }
                if block.get("type").and_then(Value::as_str) == Some("tool_result") {
                    tokens += content_tokens(block.get("content"), measure);
                }
                tokens
            })
            .sum(),
        _ => 0,
    }
}

/// A JSON answer's fragment around the generated `text`: the first opens the object, the last
/// closes it (the words escaped as a JSON string's inside).
pub fn json_fragment(text: &str, first: bool, last: bool) -> String {
    let escaped = serde_json::to_string(text).unwrap_or_default();
    let inner = escaped
        .strip_prefix('"')
        .and_then(|e| e.strip_suffix('"'))
        .unwrap_or("");
    format!(
        "{}{inner}{}",
        if first { "{\"answer\":\"" } else { "" },
        if last { "\"}" } else { "" }
    )
}

/// The planned output of one request: its chunks' text and when each is due.
pub struct Generation {
    /// (due after the request arrived, text of the chunk, tokens in it)
    pub chunks: Vec<(Duration, String, usize)>,
}

pub fn generate(
    settings: &SimSettings,
    tokenizer: &Tokenizer,
    request: &SimRequest,
    request_seed: u64,
) -> Generation {
    let mut rng = ChaCha8Rng::seed_from_u64(request_seed);
    let words = tokenizer.single_token_words();
    let per_chunk = settings.tokens_per_chunk.max(1) as usize;
    let jitter = |rng: &mut ChaCha8Rng| {
        if settings.jitter.is_zero() {
            Duration::ZERO
        } else {
            settings.jitter.mul_f64(rng.random::<f64>())
        }
    };
    let mut chunks = Vec::new();
    let mut produced = 0;
    while produced < request.max_tokens {
        let n = per_chunk.min(request.max_tokens - produced);
        let text: String = (0..n)
            .map(|_| words[rng.random_range(0..words.len())].as_str())
            .collect();
        // Deadlines are absolute from the request's arrival, so jitter never accumulates.
        let last_token = produced + n - 1;
        let due = settings.ttft + settings.itl * last_token as u32 + jitter(&mut rng);
        chunks.push((due, text, n));
        produced += n;
    }
    // Jitter must not reorder chunks.
    for i in 1..chunks.len() {
        if chunks[i].0 < chunks[i - 1].0 {
            chunks[i].0 = chunks[i - 1].0;
        }
    }
    Generation { chunks }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the simulator answers a body it cannot take: each refusal in the words a server
    /// uses, one per way a body can be wrong.
    #[test]
    fn a_body_it_cannot_take_is_refused_in_a_servers_words() {
        let tokenizer = Tokenizer::builtin("cl100k_base").unwrap();
        let png = "data:image/png;base64,aGVsbG8=";
        let cases: &[(Wire, &str, &str)] = &[
            (Wire::Chat, "{not json", "request body is not JSON: key must be a string at line 1 column 2"),
            (Wire::Chat, "{}", "`messages` is required and must be an array"),
            (Wire::Completions, "{}", "`prompt` is required and must be a string"),
            (Wire::Messages, r#"{"messages": []}"#, "max_tokens: Field required"),
            (Wire::Messages, r#"{"max_tokens": 4}"#, "messages: Field required"),
            (Wire::Responses, "{}", "'input' is required (a string or a list of items)"),
            (Wire::Rerank, r#"{"documents": ["a"]}"#, "'query' is required"),
            (Wire::Rerank, r#"{"query": "q"}"#, "'documents' is required (a string or a list of strings)"),
            (Wire::Embeddings, r#"{"input": [1]}"#, "'input' holds an item that is not text"),
            (
                Wire::Chat,
                r#"{"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]}"#,
                "an image_url part has no url",
            ),
            (
                Wire::Chat,
                r#"{"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "https://x/a.png"}}]}]}"#,
                "the simulator reads images from base64 data URLs only",
            ),
            (
                Wire::Chat,
                r#"{"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,@@"}}]}]}"#,
                "media data is not base64: Invalid symbol 64, offset 0.",
            ),
            (
                Wire::Chat,
                &format!(r#"{{"messages": [{{"role": "user", "content": [{{"type": "image_url", "image_url": {{"url": "{png}"}}}}]}}]}}"#),
                "an image is not a PNG or JPEG the simulator can read: The image format could not be determined",
            ),
            (
                Wire::Chat,
                r#"{"messages": [{"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": "aGVsbG8="}}]}]}"#,
                "input_audio is not a WAV file: ",
            ),
        ];
        for (wire, body, said) in cases {
            let refused = SimRequest::parse(body.as_bytes(), *wire, &tokenizer, None)
                .err()
                .map(|e| e.to_string());
            assert!(
                refused.as_deref().is_some_and(|r| r.starts_with(said)),
                "{wire:?} {body}: {refused:?}"
            );
        }
    }
}
