//! One request: its body, the HTTP exchange, and what arrived when.
//!
//! On the read path every read is timestamped before it is parsed, so parsing cost never shows
//! up as latency. Token counting is not done here: the raw text of each token-bearing chunk is
//! kept (in one buffer, not one allocation per token) and counted later by the recorder, off the
//! I/O tasks.

use std::borrow::Cow;
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use reqwest::header::HeaderValue;
use serde::Deserialize;
use tokio::time::Instant;

use super::record::ErrorClass;
use super::sse::SseParser;
use crate::plan::Api;

/// Everything about requests that does not change from one to the next.
#[derive(Clone)]
pub struct RequestTemplate {
    /// Parsed once: every request would otherwise parse it again.
    pub url: reqwest::Url,
    pub api: Api,
    pub model: String,
    pub stream: bool,
    pub continuous_usage: bool,
    pub ignore_eos: bool,
    /// `Authorization: Bearer …`, marked sensitive so it never prints.
    pub auth: Option<HeaderValue>,
    pub timeout: Duration,
    /// What every `x-request-id` of the run starts with (see [`RequestTemplate::request_id`]).
    pub request_id_prefix: String,
}

impl std::fmt::Debug for RequestTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The auth header is deliberately left out.
        f.debug_struct("RequestTemplate")
            .field("url", &self.url)
            .field("api", &self.api)
            .field("model", &self.model)
            .finish_non_exhaustive()
    }
}

impl RequestTemplate {
    /// The JSON body of a request with this prompt and output length.
    pub fn body(&self, prompt: &str, max_tokens: u32) -> Bytes {
        let mut body = serde_json::Map::new();
        body.insert("model".into(), self.model.clone().into());
        match self.api {
            Api::Chat => {
                body.insert(
                    "messages".into(),
                    serde_json::json!([{"role": "user", "content": prompt}]),
                );
            }
            Api::Completions => {
                body.insert("prompt".into(), prompt.into());
            }
        }
        body.insert("max_tokens".into(), max_tokens.into());
        body.insert("stream".into(), self.stream.into());
        if self.stream {
            let mut options = serde_json::json!({"include_usage": true});
            if self.continuous_usage {
                options["continuous_usage_stats"] = true.into();
            }
            body.insert("stream_options".into(), options);
        }
        if self.ignore_eos {
            // vLLM, SGLang and llama.cpp's server honour ignore_eos; vLLM and SGLang min_tokens too.
            body.insert("ignore_eos".into(), true.into());
            body.insert("min_tokens".into(), max_tokens.into());
        }
        Bytes::from(serde_json::Value::Object(body).to_string())
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub prompt: Option<u64>,
    pub completion: Option<u64>,
    pub cached: Option<u64>,
}

/// What one request produced, before token counting.
#[derive(Debug, Default)]
pub struct Exchange {
    pub error: Option<(ErrorClass, String)>,
    pub http_status: Option<u16>,
    /// Arrival of each token-bearing chunk, µs after the send.
    pub chunk_times: Vec<u64>,
    /// Tokens in each chunk from per-chunk usage; 0 where the server did not say.
    pub chunk_usage_tokens: Vec<u32>,
    /// The generated text of all chunks, back to back; `chunk_ends[i]` is where chunk i ends.
    pub text: String,
    pub chunk_ends: Vec<u32>,
    pub usage: Option<Usage>,
    pub finish_reason: Option<String>,
    /// µs after the send when the response ended (success or failure).
    pub end_us: u64,
    pub done: bool,
    /// Re-sends after the server closed a pooled connection before answering.
    pub connection_retries: u32,
}

#[derive(Deserialize)]
struct WireUsage {
    prompt_tokens: Option<u64>,
    completion_tokens: Option<u64>,
    prompt_tokens_details: Option<WireDetails>,
}

#[derive(Deserialize)]
struct WireDetails {
    cached_tokens: Option<u64>,
}

impl From<WireUsage> for Usage {
    fn from(u: WireUsage) -> Usage {
        Usage {
            prompt: u.prompt_tokens,
            completion: u.completion_tokens,
            cached: u.prompt_tokens_details.and_then(|d| d.cached_tokens),
        }
    }
}

#[derive(Deserialize)]
struct WireText<'a> {
    #[serde(borrow, default)]
    content: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    reasoning_content: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    reasoning: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct WireChoice<'a> {
    #[serde(borrow, default)]
    delta: Option<WireText<'a>>,
    #[serde(borrow, default)]
    message: Option<WireText<'a>>,
    #[serde(borrow, default)]
    text: Option<Cow<'a, str>>,
    #[serde(default)]
    finish_reason: Option<String>,
}

/// A chunk's `choices`. Streams carry one choice per chunk: it is held inline, and only further
/// choices go to a Vec, so that a chunk costs no heap allocation.
#[derive(Default)]
struct WireChoices<'a> {
    first: Option<WireChoice<'a>>,
    rest: Vec<WireChoice<'a>>,
}

impl<'a> WireChoices<'a> {
    fn iter(&self) -> impl Iterator<Item = &WireChoice<'a>> {
        self.first.iter().chain(self.rest.iter())
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for WireChoices<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> serde::de::Visitor<'de> for Visitor<'a> {
            type Value = WireChoices<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an array of choices")
            }
            fn visit_seq<S: serde::de::SeqAccess<'de>>(
                self,
                mut seq: S,
            ) -> Result<WireChoices<'a>, S::Error> {
                let mut choices = WireChoices {
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
struct WireChunk<'a> {
    #[serde(borrow, default)]
    choices: Option<WireChoices<'a>>,
    #[serde(default)]
    usage: Option<WireUsage>,
    #[serde(default)]
    error: Option<serde_json::Value>,
}

impl WireChoice<'_> {
    /// Generated text of the choice: content, reasoning content (reasoning models) or text.
    fn generated(&self, out: &mut String) {
        for part in [&self.delta, &self.message].into_iter().flatten() {
            for piece in [&part.reasoning_content, &part.reasoning, &part.content]
                .into_iter()
                .flatten()
            {
                out.push_str(piece);
            }
        }
        if let Some(text) = &self.text {
            out.push_str(text);
        }
    }
}

fn micros_since(start: Instant, now: Instant) -> u64 {
    now.saturating_duration_since(start).as_micros() as u64
}

/// Takes the message of an OpenAI-style error body, shortened; never the request.
fn error_message(body: &[u8]) -> String {
    let parsed: Option<serde_json::Value> = serde_json::from_slice(body).ok();
    let message = parsed
        .as_ref()
        .and_then(|v| v.get("error"))
        .and_then(|e| {
            e.get("message")
                .and_then(|m| m.as_str())
                .or_else(|| e.as_str())
        })
        .map(str::to_string)
        .unwrap_or_else(|| String::from_utf8_lossy(body).into_owned());
    shorten(&message)
}

pub fn shorten(text: &str) -> String {
    let text = text.trim();
    if text.chars().count() > 200 {
        let cut: String = text.chars().take(200).collect();
        format!("{cut}…")
    } else {
        text.to_string()
    }
}

impl Exchange {
    pub(super) fn fail(&mut self, class: ErrorClass, detail: impl Into<String>) {
        if self.error.is_none() {
            self.error = Some((class, detail.into()));
        }
    }

    /// Handles one streamed event (the data of an SSE event, or a whole non-streamed body)
    /// that arrived `at_us` after the send. `last_usage_completion` carries the previous
    /// chunk's usage total between calls.
    pub fn on_event(
        &mut self,
        data: &str,
        name: Option<&str>,
        at_us: u64,
        last_usage_completion: &mut u64,
    ) {
        if data == "[DONE]" {
            self.done = true;
            return;
        }
        let chunk: WireChunk = match serde_json::from_str(data) {
            Ok(chunk) => chunk,
            Err(err) => {
                self.fail(
                    ErrorClass::Malformed,
                    format!("a streamed chunk is not valid JSON: {err}"),
                );
                return;
            }
        };
        if let Some(error) = chunk.error.as_ref().filter(|e| !e.is_null()) {
            let message = error
                .get("message")
                .and_then(|m| m.as_str())
                .map(str::to_string)
                .unwrap_or_else(|| error.to_string());
            self.fail(
                ErrorClass::StreamError,
                format!("the server sent an error mid-stream: {}", shorten(&message)),
            );
            return;
        }
        if name == Some("error") {
            self.fail(
                ErrorClass::StreamError,
                format!("the server sent an error event: {}", shorten(data)),
            );
            return;
        }
        let before = self.text.len();
        for choice in chunk.choices.iter().flat_map(WireChoices::iter) {
            choice.generated(&mut self.text);
            if let Some(reason) = &choice.finish_reason {
                self.finish_reason = Some(reason.clone());
            }
        }
        let usage = chunk.usage.map(Usage::from);
        if self.text.len() > before {
            let tokens = match usage.and_then(|u| u.completion) {
                Some(total) if total > *last_usage_completion => {
                    (total - *last_usage_completion) as u32
                }
                _ => 0,
            };
            self.chunk_times.push(at_us);
            self.chunk_usage_tokens.push(tokens);
            self.chunk_ends.push(self.text.len() as u32);
        }
        if let Some(usage) = usage {
            if let Some(completion) = usage.completion {
                *last_usage_completion = completion;
            }
            self.usage = Some(usage);
        }
    }
}

const X_REQUEST_ID: reqwest::header::HeaderName =
    reqwest::header::HeaderName::from_static("x-request-id");

/// A run's request-id prefix, `llmload-` and 8 hex digits drawn from the clock and the process:
/// two runs against one server (two CI jobs) do not send the same ids.
pub fn new_request_id_prefix() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let tag = crate::planner::mix64(nanos ^ (std::process::id() as u64).rotate_left(32));
    format!("llmload-{:08x}", tag as u32)
}

/// The `x-request-id` of request `seq` of phase `phase` with a run's `prefix`.
pub fn request_id_text(prefix: &str, phase: usize, seq: u64) -> String {
    format!("{prefix}-{phase}-{seq}")
}

impl RequestTemplate {
    /// The `x-request-id` header of a request: unique to the run, so that the request can be
    /// found in the server's logs (vLLM and others take it as their request id) and matched with
    /// the simulator's write times.
    pub fn request_id(&self, phase: usize, seq: u64) -> HeaderValue {
        HeaderValue::from_str(&request_id_text(&self.request_id_prefix, phase, seq))
            .unwrap_or_else(|_| HeaderValue::from_static("llmload"))
    }
}

/// Sends `body` and reads the whole response into `exchange`. `sent_at` is the actual send time.
/// Returns when the response is complete or has failed; the caller applies the timeout and can
/// drop this future at any point, keeping what `exchange` holds so far.
pub async fn exchange(
    client: &reqwest::Client,
    template: &RequestTemplate,
    body: Bytes,
    request_id: HeaderValue,
    sent_at: &mut Instant,
    exchange: &mut Exchange,
) {
    let response = loop {
        let mut request = client
            .post(template.url.clone())
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header(X_REQUEST_ID, request_id.clone())
            .body(body.clone());
        if let Some(auth) = &template.auth {
            request = request.header(reqwest::header::AUTHORIZATION, auth.clone());
        }
        match request.send().await {
            Ok(response) => break response,
            // A server may close a keep-alive connection it advertised as open (llama.cpp's
            // server does when a request lands on one of its short-lived threads). The request
            // then dies on the pooled connection before any byte of a response: a transport
            // race, not a server failure. Send it once more, on another connection, and count
            // it; the send time becomes the re-send's, so the lost time shows as schedule lag.
            Err(err)
                if exchange.connection_retries < MAX_CONNECTION_RETRIES
                    && closed_before_response(&err) =>
            {
                exchange.connection_retries += 1;
                *sent_at = Instant::now();
            }
            Err(err) => {
                exchange.end_us = micros_since(*sent_at, Instant::now());
                if err.is_connect() {
                    exchange.fail(
                        ErrorClass::Connect,
                        format!("cannot connect to the target: {}", root_cause(&err)),
                    );
                } else if err.is_timeout() {
                    exchange.fail(ErrorClass::Timeout, "the request timed out");
                } else {
                    exchange.fail(
                        ErrorClass::StreamBroken,
                        format!(
                            "the connection failed before a response: {}",
                            root_cause(&err)
                        ),
                    );
                }
                return;
            }
        }
    };
    let sent_at = *sent_at;
    let status = response.status();
    exchange.http_status = Some(status.as_u16());
    if !status.is_success() {
        let body = response.bytes().await.unwrap_or_default();
        exchange.end_us = micros_since(sent_at, Instant::now());
        let class = match status.as_u16() {
            429 => ErrorClass::Http429,
            400..=499 => ErrorClass::Http4xx,
            _ => ErrorClass::Http5xx,
        };
        exchange.fail(
            class,
            format!("HTTP {}: {}", status.as_u16(), error_message(&body)),
        );
        return;
    }
    if !template.stream {
        match response.bytes().await {
            Ok(body) => {
                let now = Instant::now();
                exchange.end_us = micros_since(sent_at, now);
                let mut ignored = 0;
                let text = String::from_utf8_lossy(&body);
                exchange.on_event(&text, None, exchange.end_us, &mut ignored);
                if exchange.error.is_none()
                    && exchange.finish_reason.is_none()
                    && exchange.text.is_empty()
                {
                    exchange.fail(ErrorClass::Malformed, "the response has no choices");
                }
                // A non-streamed response has no first-token time: drop the one chunk's timing.
                exchange.chunk_times.clear();
                exchange.chunk_usage_tokens.clear();
                exchange.chunk_ends.clear();
                exchange.done = true;
            }
            Err(err) => {
                exchange.end_us = micros_since(sent_at, Instant::now());
                exchange.fail(
                    ErrorClass::StreamBroken,
                    format!("the response body broke off: {}", root_cause(&err)),
                );
            }
        }
        return;
    }
    let mut parser = SseParser::new();
    let mut stream = response.bytes_stream();
    let mut last_usage_completion = 0u64;
    while let Some(read) = stream.next().await {
        // The arrival time is taken before any parsing.
        let at_us = micros_since(sent_at, Instant::now());
        match read {
            Ok(bytes) => {
                parser.feed(&bytes, |event| {
                    exchange.on_event(event.data, event.name, at_us, &mut last_usage_completion);
                });
                if exchange.error.is_some() {
                    exchange.end_us = at_us;
                    return;
                }
            }
            Err(err) => {
                exchange.end_us = at_us;
                exchange.fail(
                    ErrorClass::StreamBroken,
                    format!("the stream broke off: {}", root_cause(&err)),
                );
                return;
            }
        }
    }
    let end = micros_since(sent_at, Instant::now());
    if let Some(event) = parser.finish() {
        exchange.on_event(
            &event.data,
            event.name.as_deref(),
            end,
            &mut last_usage_completion,
        );
    }
    exchange.end_us = end;
    if exchange.error.is_none() && !exchange.done && exchange.finish_reason.is_none() {
        exchange.fail(
            ErrorClass::StreamBroken,
            "the stream ended without a finish_reason or [DONE]",
        );
    }
}

/// How many times a request is re-sent after a pooled connection was found closed.
const MAX_CONNECTION_RETRIES: u32 = 1;

/// The server closed the connection before sending any of the response.
fn closed_before_response(err: &reqwest::Error) -> bool {
    let mut current: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = current {
        if let Some(hyper_error) = e.downcast_ref::<hyper::Error>() {
            return hyper_error.is_incomplete_message();
        }
        current = e.source();
    }
    false
}

/// The innermost error's text: reqwest's outer message repeats the URL, which says nothing new.
fn root_cause(err: &(dyn std::error::Error + 'static)) -> String {
    let mut current = err;
    while let Some(next) = current.source() {
        current = next;
    }
    shorten(&current.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn template(api: Api, ignore_eos: bool) -> RequestTemplate {
        RequestTemplate {
            url: "http://127.0.0.1:1/v1/chat/completions".parse().unwrap(),
            api,
            model: "m".into(),
            stream: true,
            continuous_usage: false,
            ignore_eos,
            auth: None,
            timeout: Duration::from_secs(1),
            request_id_prefix: "llmload-test".into(),
        }
    }

    #[test]
    fn bodies_ask_for_usage_and_exact_lengths() {
        let body: serde_json::Value =
            serde_json::from_slice(&template(Api::Chat, true).body("hi", 32)).unwrap();
        assert_eq!(body["messages"][0]["content"], "hi");
        assert_eq!(body["max_tokens"], 32);
        assert_eq!(body["min_tokens"], 32);
        assert_eq!(body["ignore_eos"], true);
        assert_eq!(body["stream_options"]["include_usage"], true);
        let body: serde_json::Value =
            serde_json::from_slice(&template(Api::Completions, false).body("hi", 8)).unwrap();
        assert_eq!(body["prompt"], "hi");
        assert!(body.get("ignore_eos").is_none());
    }

    #[test]
    fn role_only_and_empty_chunks_carry_no_token() {
        let mut ex = Exchange::default();
        let mut last = 0;
        ex.on_event(
            r#"{"choices":[{"delta":{"role":"assistant","content":null}}]}"#,
            None,
            5,
            &mut last,
        );
        ex.on_event(
            r#"{"choices":[{"delta":{"role":"assistant","content":""}}]}"#,
            None,
            6,
            &mut last,
        );
        assert!(ex.chunk_times.is_empty());
        ex.on_event(
            r#"{"choices":[{"delta":{"content":" hi"}}]}"#,
            None,
            9,
            &mut last,
        );
        assert_eq!(ex.chunk_times, vec![9]);
    }

    #[test]
    fn every_choice_of_a_chunk_counts_and_null_choices_are_none() {
        let mut ex = Exchange::default();
        let mut last = 0;
        ex.on_event(
            r#"{"choices":[{"delta":{"content":"a"}},{"delta":{"content":"b"}},{"text":"c","finish_reason":"length"}]}"#,
            None,
            3,
            &mut last,
        );
        ex.on_event(r#"{"choices":null}"#, None, 4, &mut last);
        assert_eq!(ex.text, "abc");
        assert_eq!(ex.chunk_times, vec![3]);
        assert_eq!(ex.finish_reason.as_deref(), Some("length"));
        assert!(ex.error.is_none());
    }

    #[test]
    fn reasoning_content_counts_as_generated() {
        let mut ex = Exchange::default();
        let mut last = 0;
        ex.on_event(
            r#"{"choices":[{"delta":{"reasoning_content":"think"}}]}"#,
            None,
            3,
            &mut last,
        );
        ex.on_event(
            r#"{"choices":[{"delta":{"reasoning":"more"}}]}"#,
            None,
            4,
            &mut last,
        );
        assert_eq!(ex.chunk_times, vec![3, 4]);
        assert_eq!(ex.text, "thinkmore");
    }

    #[test]
    fn per_chunk_usage_gives_tokens_per_chunk_and_usage_only_chunk_is_kept() {
        let mut ex = Exchange::default();
        let mut last = 0;
        ex.on_event(r#"{"choices":[{"delta":{"content":"ab"}}],"usage":{"prompt_tokens":5,"completion_tokens":3}}"#, None, 1, &mut last);
        ex.on_event(r#"{"choices":[{"delta":{"content":"c"}}],"usage":{"prompt_tokens":5,"completion_tokens":4}}"#, None, 2, &mut last);
        ex.on_event(
            r#"{"choices":[{"delta":{},"finish_reason":"length"}]}"#,
            None,
            3,
            &mut last,
        );
        ex.on_event(r#"{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":4,"prompt_tokens_details":{"cached_tokens":2}}}"#, None, 4, &mut last);
        ex.on_event("[DONE]", None, 5, &mut last);
        assert_eq!(ex.chunk_usage_tokens, vec![3, 1]);
        assert_eq!(ex.finish_reason.as_deref(), Some("length"));
        assert_eq!(
            ex.usage,
            Some(Usage {
                prompt: Some(5),
                completion: Some(4),
                cached: Some(2)
            })
        );
        assert!(ex.done);
    }

    #[test]
    fn mid_stream_errors_and_bad_json_are_classified() {
        let mut ex = Exchange::default();
        let mut last = 0;
        ex.on_event(r#"{"error":{"message":"overloaded"}}"#, None, 1, &mut last);
        assert_eq!(
            ex.error.as_ref().map(|e| e.0),
            Some(ErrorClass::StreamError)
        );
        let mut ex = Exchange::default();
        ex.on_event("{not json", None, 1, &mut last);
        assert_eq!(ex.error.as_ref().map(|e| e.0), Some(ErrorClass::Malformed));
    }
}
