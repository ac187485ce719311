//! One request: its body, the HTTP exchange, and what arrived when.
//!
//! On the read path every read is timestamped before it is parsed, so parsing cost never shows
//! up as latency. Token counting is not done here: the raw text of each token-bearing chunk is
//! kept (in one buffer, not one allocation per token) and counted later by the recorder, off the
//! I/O tasks.

use bytes::Bytes;
use reqwest::header::HeaderValue;
use tokio::time::Instant;

pub use super::template::RequestTemplate;
use super::transport::{BrokenBody, Outgoing, Response, ResponseBody, SendFailure, Transport};
use crate::api::sse::SseParser;
use crate::api::{Dialect, Generated, ServerError, Usage};
use crate::error::shorten;
use crate::records::{ChunkKind, ErrorClass};

/// What one request produced, before token counting.
#[derive(Debug, Default)]
pub struct Exchange {
    /// How it failed, and a sentence saying so (never a header or a credential).
    pub error: Option<(ErrorClass, String)>,
    /// The W3C trace it was sent in.
    pub trace: Option<crate::records::TraceContext>,
    /// The response's HTTP status.
    pub http_status: Option<u16>,
    /// What the response's headers said of the server's rate limits.
    pub rate_limit: Option<Box<crate::records::RateLimit>>,
    /// The server's own id of the request, from its response's headers.
    pub server_request_id: Option<String>,
    /// How long the key's budgets (`limits`) held it before its send, µs.
    pub paced_us: u64,
    /// Which of the run's keys it went with, when it has several.
    pub key: Option<usize>,
    /// The attempts the server throttled before this one (`on-throttle "retry"`).
    pub throttled_attempts: Vec<crate::records::ThrottledAttempt>,
    /// Arrival of each token-bearing chunk, µs after the send.
    pub chunk_times: Vec<u64>,
    /// Tokens in each chunk from per-chunk usage; 0 where the server did not say.
    pub chunk_usage_tokens: Vec<u32>,
    /// The generated text of all chunks, back to back; `chunk_ends[i]` is where chunk i ends.
    pub text: String,
    /// Where each chunk's text ends in `text`.
    pub chunk_ends: Vec<u32>,
    /// What the chunks were, in runs of one kind (empty until a reasoning chunk arrives: a
    /// request that does not reason pays nothing for it).
    pub chunk_kinds: Vec<(ChunkKind, u32)>,
    /// How many bytes of `text` were reasoning (in a whole body, they come first).
    pub reasoning_bytes: usize,
    /// How many tool calls the answer made.
    pub tool_calls: u32,
    /// How many inputs the answer covers (embeddings, ranked documents), for an API that
    /// generates no text.
    pub inputs: Option<u64>,
    /// The calls put together (id, name, arguments), for an agent loop to send back.
    pub calls: Vec<crate::planner::ToolCall>,
    /// How many bytes of `text` were tool calls' names and arguments.
    pub tool_call_bytes: usize,
    /// The server's last usage.
    pub usage: Option<Usage>,
    /// The answer's finish_reason.
    pub finish_reason: Option<String>,
    /// The model the answer says it came from (its `model` field), read from the events
    /// up to the first token's and from the last (where every dialect's servers put it).
    pub model: Option<String>,
    /// µs after the send when the response ended (success or failure).
    pub end_us: u64,
    /// The stream said `[DONE]` (or a non-streamed body was read whole).
    pub done: bool,
    /// Re-sends after the server closed a pooled connection before answering.
    pub connection_retries: u32,
    /// Bytes of the request's body.
    pub request_bytes: u64,
    /// The images the request carried (width and height each).
    pub images: Vec<[u32; 2]>,
    /// The length of the audio clip it carried, ms (0 for none).
    pub audio_ms: u32,
    /// Of its images sent as URLs (its own, not a dataset's files), how many the server
    /// fetched; `None` when it sent none so.
    pub images_fetched: Option<u32>,
    /// How long opening a new connection for it took, µs; `None` when it reused one.
    pub connect_us: Option<u64>,
    /// Of it, the TLS handshake, µs, where told apart.
    pub tls_us: Option<u64>,
    /// Of it, resolving the host's name, µs, where told apart.
    pub dns_us: Option<u64>,
    /// How long its body took to hand to the socket, µs after the send (less a new
    /// connection's opening); `None` where the transport cannot tell.
    pub upload_us: Option<u64>,
    /// The run's live count of chunks, bumped as each arrives (for a progress line).
    pub live_chunks: Option<std::sync::Arc<std::sync::atomic::AtomicU64>>,
}

impl Exchange {
    /// The connection opened for it, if one was: how long that took, in all and in parts.
    fn opened(&mut self, opened: Option<super::transport::Opened>) {
        let micros = |d: std::time::Duration| d.as_micros() as u64;
        self.connect_us = opened.map(|o| micros(o.total));
        self.tls_us = opened.and_then(|o| o.tls).map(micros);
        self.dns_us = opened.and_then(|o| o.dns).map(micros);
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

impl Exchange {
    /// The answer's own text: its answer chunks (reasoning and tool calls left out), or a
    /// whole body's text after its reasoning.
    pub fn answer_text(&self) -> String {
        if self.chunk_kinds.is_empty() {
            // A whole body's parts come in order: reasoning, answer, tool calls.
            let end = self.text.len().saturating_sub(self.tool_call_bytes);
            return self
                .text
                .get(self.reasoning_bytes.min(end)..end)
                .unwrap_or("")
                .to_string();
        }
        let kinds = ChunkKind::each(&self.chunk_kinds, self.chunk_ends.len());
        let mut start = 0usize;
        let mut answer = String::new();
        for (&end, kind) in self.chunk_ends.iter().zip(kinds) {
            let end = end as usize;
            if kind == ChunkKind::Answer {
                answer.push_str(self.text.get(start..end).unwrap_or(""));
            }
            start = end;
        }
        answer
    }

    /// Counts the chunk just added as `kind`, in runs; nothing is kept until a reasoning chunk
    /// comes (then the answer chunks before it are counted too).
    fn note_kind(&mut self, kind: ChunkKind) {
        if self.chunk_kinds.is_empty() && kind == ChunkKind::Answer {
            return;
        }
        let listed: u32 = self.chunk_kinds.iter().map(|&(_, n)| n).sum();
        let earlier = self.chunk_ends.len() as u32 - 1 - listed;
        if earlier > 0 {
            self.chunk_kinds.push((ChunkKind::Answer, earlier));
        }
        match self.chunk_kinds.last_mut() {
            Some((last, n)) if *last == kind => *n += 1,
            _ => self.chunk_kinds.push((kind, 1)),
        }
    }

    pub(super) fn fail(&mut self, class: ErrorClass, detail: impl Into<String>) {
        if self.error.is_none() {
            self.error = Some((class, detail.into()));
        }
    }

    /// Handles one streamed event's data (with its `event:` name, if any) that arrived `at_us`
    /// after the send. `last_usage_completion` carries the previous chunk's usage total between
    /// calls.
    pub fn on_event(
        &mut self,
        dialect: &dyn Dialect,
        data: &str,
        name: Option<&str>,
        at_us: u64,
        last_usage_completion: &mut u64,
    ) {
        if self.done {
            // After the end-of-stream event nothing is part of the answer (text after
            // Responses' `response.completed`, a second `[DONE]`).
            return;
        }
        let before = self.text.len();
        let mut generated = Generated::with_calls(&mut self.text, &mut self.calls, self.tool_calls);
        let decoded = dialect.decode_event(name, data, &mut generated);
        let (reasoning_bytes, tool_call_bytes) =
            (generated.reasoning_bytes(), generated.tool_call_bytes());
        self.tool_calls = self.tool_calls.max(generated.tool_calls());
        let decoded = match decoded {
            Ok(decoded) => decoded,
            Err(err) => {
                self.text.truncate(before);
                self.fail(
                    ErrorClass::Malformed,
                    format!("a streamed chunk is not valid JSON: {err}"),
                );
                return;
            }
        };
        if decoded.end {
            self.done = true;
        }
        // Only the events before the first token and the last (llama.cpp names the model of
        // a Responses stream in `response.completed` alone) are scanned: not one per token.
        if self.model.is_none() && (self.chunk_times.is_empty() || decoded.end) {
            self.model = crate::api::answered_model(data);
        }
        if let Some(error) = decoded.error {
            self.text.truncate(before);
            let (class, detail) = match error {
                ServerError::Object(message) => (
                    ErrorClass::StreamError,
                    format!("the server sent an error mid-stream: {}", shorten(&message)),
                ),
                ServerError::Event(data) => (
                    ErrorClass::StreamError,
                    format!("the server sent an error event: {}", shorten(&data)),
                ),
                ServerError::Overloaded(message) => (
                    ErrorClass::Overloaded,
                    format!("the server said it is overloaded: {}", shorten(&message)),
                ),
                ServerError::RateLimited(message) => (
                    ErrorClass::RateLimited,
                    format!(
                        "the server said the rate limit is reached: {}",
                        shorten(&message)
                    ),
                ),
            };
            self.fail(class, detail);
            return;
        }
        if decoded.finish_reason.is_some() {
            self.finish_reason = decoded.finish_reason;
        }
        if self.text.len() > before {
            let tokens = match decoded.usage.and_then(|u| u.completion) {
                Some(total) if total > *last_usage_completion => {
                    (total - *last_usage_completion) as u32
                }
                _ => 0,
            };
            self.chunk_times.push(at_us);
            if let Some(live) = &self.live_chunks {
                live.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            self.chunk_usage_tokens.push(tokens);
            self.chunk_ends.push(self.text.len() as u32);
            // A chunk with any answer text is an answer chunk: the answer has begun in it.
            let appended = self.text.len() - before;
            let kind = if reasoning_bytes == appended {
                ChunkKind::Reasoning
            } else if tool_call_bytes == appended {
                ChunkKind::ToolCall
            } else {
                ChunkKind::Answer
            };
            self.reasoning_bytes += reasoning_bytes;
            self.tool_call_bytes += tool_call_bytes;
            self.note_kind(kind);
        }
        if let Some(usage) = decoded.usage {
            if let Some(completion) = usage.completion {
                *last_usage_completion = completion;
            }
            self.usage.get_or_insert_with(Usage::default).merge(usage);
        }
    }
}

const X_REQUEST_ID: reqwest::header::HeaderName =
    reqwest::header::HeaderName::from_static("x-request-id");
const TRACEPARENT: reqwest::header::HeaderName =
    reqwest::header::HeaderName::from_static("traceparent");

/// Sends `body` and reads the whole response into `exchange`. `sent_at` is the actual send time.
/// Returns when the response is complete or has failed; the caller applies the timeout and can
/// drop this future at any point, keeping what `exchange` holds so far.
///
/// The body is handed to the connection and not kept: `body_again` builds it once more for the
/// rare re-send. (Kept until the response's head, 10,000 streams held 16 MB of request bodies
/// through every wave's time to first token.)
pub async fn exchange(
    transport: &Transport,
    template: &RequestTemplate,
    body: Bytes,
    body_again: &(dyn Fn() -> Bytes + Sync),
    request_id: HeaderValue,
    sent_at: &mut Instant,
    exchange: &mut Exchange,
) {
    let ours = request_id.clone();
    let Some(mut response) = send(
        transport, template, body, body_again, request_id, sent_at, exchange,
    )
    .await
    else {
        return;
    };
    exchange.opened(response.connect);
    let sent_at = *sent_at;
    // The body's upload: from the send (after a new connection's opening) to its last byte
    // taken by the socket.
    exchange.upload_us = response.written.map(|written| {
        micros_since(sent_at, written).saturating_sub(exchange.connect_us.unwrap_or(0))
    });
    let status = response.status;
    exchange.http_status = Some(status);
    exchange.rate_limit = response.rate_limit.take();
    // A server that echoes the id llmload sent (vLLM's `--enable-request-id-headers`) says
    // nothing new: only an id of its own is kept.
    exchange.server_request_id = response
        .server_request_id
        .take()
        .filter(|id| id.as_bytes() != ours.as_bytes());
    if !(200..300).contains(&status) {
        read_error(&mut response.body, status, sent_at, exchange).await;
    } else if template.stream() {
        read_stream(&mut response, template, sent_at, exchange).await;
    } else {
        read_whole(&mut response.body, template, sent_at, exchange).await;
    }
}

/// Sends the request (once more, on another connection, when a pooled keep-alive connection
/// turns out closed) and returns the response's head; `None` once a failure is in `exchange`.
async fn send(
    transport: &Transport,
    template: &RequestTemplate,
    body: Bytes,
    body_again: &(dyn Fn() -> Bytes + Sync),
    request_id: HeaderValue,
    sent_at: &mut Instant,
    exchange: &mut Exchange,
) -> Option<Response> {
    let mut headers = [
        (
            reqwest::header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        ),
        (X_REQUEST_ID, request_id),
        (TRACEPARENT, HeaderValue::from_static("")),
    ];
    // The trace context, when the request is in one (it always is in a run).
    let traced = match exchange.trace.map(|trace| trace.traceparent()) {
        Some(traceparent) => {
            headers[2].1 = HeaderValue::from_str(&traceparent).unwrap_or(headers[2].1.clone());
            3
        }
        None => 2,
    };
    let headers = &headers[..traced];
    let mut body = Some(body);
    loop {
        let outgoing = Outgoing {
            url: &template.url,
            body: Some(body.take().unwrap_or_else(body_again)),
            headers,
            template,
            key: exchange.key.unwrap_or(0),
        };
        // Boxed: sending's state (request building, the pool, hyper's dispatch) lives only
        // until the response's head, not for the whole stream.
        let sent = if exchange.connection_retries == 0 {
            Box::pin(transport.send(outgoing)).await
        } else {
            Box::pin(transport.send_fresh(outgoing)).await
        };
        match sent {
            Ok(response) => return Some(response),
            // A server may close a keep-alive connection it advertised as open (llama.cpp's
            // server does when a request lands on one of its short-lived threads). The request
            // then dies on the pooled connection before any byte of a response: a transport
            // race, not a server failure. Send it once more, on a new connection (the pool's
            // other idle ones may be closed too), and count it; the send time becomes the
            // re-send's, so the lost time shows as schedule lag.
            Err(err)
                if exchange.connection_retries < MAX_CONNECTION_RETRIES
                    && err.kind == SendFailure::ClosedBeforeResponse =>
            {
                exchange.connection_retries += 1;
                *sent_at = Instant::now();
            }
            Err(err) => {
                exchange.end_us = micros_since(*sent_at, Instant::now());
                exchange.opened(err.connect);
                let class = match err.kind {
                    SendFailure::ClientLimit => ErrorClass::Client,
                    SendFailure::Connect => ErrorClass::Connect,
                    SendFailure::Timeout => ErrorClass::Timeout,
                    SendFailure::ClosedBeforeResponse | SendFailure::Broken => {
                        ErrorClass::StreamBroken
                    }
                };
                exchange.fail(class, err.detail);
                return None;
            }
        }
    }
}

/// Reads an error response's message (its first bytes only: the rest of a huge body is not
/// read) into `exchange`'s failure, classed by its status.
async fn read_error(
    body: &mut ResponseBody,
    status: u16,
    sent_at: Instant,
    exchange: &mut Exchange,
) {
    let body = read_capped(body, ERROR_BODY_BYTES)
        .await
        .unwrap_or_default();
    exchange.end_us = micros_since(sent_at, Instant::now());
    let class = match status {
        429 => ErrorClass::Http429,
        // Anthropic's "overloaded": not a fault, a server out of room, counted as such.
        529 => ErrorClass::Overloaded,
        400..=499 => ErrorClass::Http4xx,
        500..=599 => ErrorClass::Http5xx,
        _ => ErrorClass::HttpOther,
    };
    let detail = match status {
        // Not Modified, and the other 3xx that lead nowhere: no redirect to follow.
        304 | 300 | 305 | 306 => format!(
            "HTTP {status}: not an answer to a POST (nothing to follow, nothing to read): {}",
            error_message(&body)
        ),
        300..=399 => format!(
            "HTTP {status}: a redirect, which llmload does not follow; point the target at where it leads"
        ),
        _ => format!("HTTP {status}: {}", error_message(&body)),
    };
    exchange.fail(class, detail);
}

/// Reads a whole non-streamed answer into `exchange`.
async fn read_whole(
    body: &mut ResponseBody,
    template: &RequestTemplate,
    sent_at: Instant,
    exchange: &mut Exchange,
) {
    match read_capped(body, template.max_body).await {
        Ok(body) if body.len() as u64 > template.max_body => {
            exchange.end_us = micros_since(sent_at, Instant::now());
            exchange.fail(
                ErrorClass::TooLarge,
                format!(
                    "the response is larger than max-body ({} bytes)",
                    template.max_body
                ),
            );
        }
        Ok(body) => {
            exchange.end_us = micros_since(sent_at, Instant::now());
            let text = String::from_utf8_lossy(&body);
            let mut generated =
                Generated::with_calls(&mut exchange.text, &mut exchange.calls, exchange.tool_calls);
            let decoded = template.dialect.decode_body(&text, &mut generated);
            exchange.reasoning_bytes = generated.reasoning_bytes();
            exchange.tool_call_bytes = generated.tool_call_bytes();
            exchange.tool_calls = generated.tool_calls();
            match decoded {
                Ok(decoded) => {
                    if let Some(error) = decoded.error {
                        let class = match error {
                            ServerError::Overloaded(_) => ErrorClass::Overloaded,
                            ServerError::RateLimited(_) => ErrorClass::RateLimited,
                            ServerError::Object(_) | ServerError::Event(_) => {
                                ErrorClass::StreamError
                            }
                        };
                        exchange.fail(
                            class,
                            format!(
                                "the server answered with an error: {}",
                                shorten(error.message())
                            ),
                        );
                    } else if decoded.finish_reason.is_none()
                        && exchange.text.is_empty()
                        && decoded.inputs.is_none()
                    {
                        exchange.fail(ErrorClass::Malformed, "the response has no choices");
                    }
                    exchange.inputs = decoded.inputs;
                    exchange.finish_reason = decoded.finish_reason;
                    exchange.model = crate::api::answered_model(&text);
                    exchange.usage = decoded.usage;
                }
                Err(err) => exchange.fail(
                    ErrorClass::Malformed,
                    format!("the response is not valid JSON: {err}"),
                ),
            }
            // A non-streamed response has no first-token time.
            exchange.done = true;
        }
        Err(err) => {
            exchange.end_us = micros_since(sent_at, Instant::now());
            exchange.fail(
                ErrorClass::StreamBroken,
                format!("the response body broke off: {err}"),
            );
        }
    }
}

/// Reads a streamed answer event by event into `exchange`, each read timestamped before it is
/// parsed.
async fn read_stream(
    response: &mut Response,
    template: &RequestTemplate,
    sent_at: Instant,
    exchange: &mut Exchange,
) {
    let content_type = response
        .content_type
        .take()
        .unwrap_or_else(|| "none".to_string());
    let mut parser = SseParser::with_max_line(template.max_line);
    let stream = &mut response.body;
    let mut last_usage_completion = 0u64;
    let mut received = 0u64;
    let mut events = 0u64;
    // The first bytes, to say what came instead of an event stream.
    let mut head: Vec<u8> = Vec::new();
    while let Some(read) = stream.next().await {
        // The arrival time is taken before any parsing.
        let at_us = micros_since(sent_at, Instant::now());
        match read {
            Ok(bytes) => {
                received += bytes.len() as u64;
                if head.len() < HEAD_BYTES {
                    head.extend_from_slice(&bytes[..bytes.len().min(HEAD_BYTES - head.len())]);
                }
                let dialect = template.dialect;
                let parsed = parser.feed(&bytes, |event| {
                    events += 1;
                    exchange.on_event(
                        dialect,
                        event.data,
                        event.name,
                        at_us,
                        &mut last_usage_completion,
                    );
                });
                if let Err(too_long) = parsed {
                    exchange.fail(
                        ErrorClass::TooLarge,
                        format!(
                            "a line of the stream is longer than max-line ({} bytes)",
                            too_long.max_line
                        ),
                    );
                } else if received > template.max_body {
                    exchange.fail(
                        ErrorClass::TooLarge,
                        format!(
                            "the stream is larger than max-body ({} bytes)",
                            template.max_body
                        ),
                    );
                }
                if exchange.error.is_some() {
                    exchange.end_us = at_us;
                    return;
                }
                if exchange.done {
                    // The end-of-stream event arrived: the answer is complete, whatever the
                    // transport does next (a body's final chunk missing, a connection kept
                    // open). The body is left unread, so its connection is not reused.
                    exchange.end_us = at_us;
                    return;
                }
            }
            Err(err) => {
                exchange.end_us = at_us;
                exchange.fail(
                    ErrorClass::StreamBroken,
                    format!("the stream broke off: {err}"),
                );
                return;
            }
        }
    }
    let end = micros_since(sent_at, Instant::now());
    if let Some(event) = parser.finish() {
        events += 1;
        exchange.on_event(
            template.dialect,
            &event.data,
            event.name.as_deref(),
            end,
            &mut last_usage_completion,
        );
    }
    exchange.end_us = end;
    if exchange.error.is_none() && events == 0 {
        // A 200 that is not an event stream: an HTML page from a proxy, a JSON answer from a
        // server that ignored `stream`. Say what came.
        let shown = if head.is_empty() {
            "an empty body".to_string()
        } else {
            format!("\"{}\"", shorten(&String::from_utf8_lossy(&head)))
        };
        exchange.fail(
            ErrorClass::Malformed,
            format!(
                "the server answered {} with content-type {content_type}, not an event stream: {shown}",
                exchange.http_status.unwrap_or(200)
            ),
        );
    } else if exchange.error.is_none() && !exchange.done && exchange.finish_reason.is_none() {
        exchange.fail(
            ErrorClass::StreamBroken,
            format!("the stream ended without {}", template.dialect.stream_end()),
        );
    }
}

/// How much of an error response is read for its message.
const ERROR_BODY_BYTES: u64 = 64 * 1024;
/// How much of a body is kept to say what it was.
const HEAD_BYTES: usize = 160;

/// The body, read until it ends or passes `cap` bytes (then a little past `cap`, which the
/// caller sees as too large).
pub(super) async fn read_capped(body: &mut ResponseBody, cap: u64) -> Result<Vec<u8>, BrokenBody> {
    let mut whole = Vec::new();
    while let Some(read) = body.next().await {
        whole.extend_from_slice(&read?);
        if whole.len() as u64 > cap {
            break;
        }
    }
    Ok(whole)
}

/// How many times a request is re-sent after a pooled connection was found closed.
const MAX_CONNECTION_RETRIES: u32 = 1;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::Api;

    fn events(api: Api, events: &[&str]) -> Exchange {
        let dialect = api.dialect();
        let mut ex = Exchange::default();
        let mut last = 0;
        for (at, data) in events.iter().enumerate() {
            ex.on_event(dialect, data, None, at as u64 + 1, &mut last);
        }
        ex
    }

    /// Calls beyond those kept are still counted, in a dialect that numbers none (it adds each
    /// new call after those made): 500 calls are 500, not 129.
    #[test]
    fn every_tool_call_is_counted_beyond_those_kept() {
        let start = r#"{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"t","name":"f","input":{}}}"#;
        let ex = events(Api::Messages, &vec![start; 500]);
        assert_eq!(ex.tool_calls, 500);
        assert_eq!(ex.calls.len(), crate::api::MAX_KEPT_TOOL_CALLS as usize);
    }

    /// A count sent as a string is no count (the usage says which field), not a malformed
    /// answer: the answer and its other counts stand.
    #[test]
    fn a_usage_count_that_is_no_number_fails_only_itself() {
        let ex = events(
            Api::Chat,
            &[
                r#"{"choices":[{"delta":{"content":"ab"}}]}"#,
                r#"{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":"12"}}"#,
                "[DONE]",
            ],
        );
        assert!(ex.error.is_none(), "{:?}", ex.error);
        let usage = ex.usage.unwrap();
        assert_eq!(usage.prompt, Some(5));
        assert_eq!(usage.completion, None);
        assert_eq!(
            usage.invalid.map(|(field, _)| field),
            Some("completion_tokens")
        );
    }

    /// A late (or repeated) `message_start` does not undo the output count `message_delta`
    /// gave: its own output count is where the answer started.
    #[test]
    fn a_late_message_start_keeps_the_output_usage() {
        let ex = events(
            Api::Messages,
            &[
                r#"{"type":"message_start","message":{"usage":{"input_tokens":7,"output_tokens":1}}}"#,
                r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"hi"}}"#,
                r#"{"type":"message_delta","delta":{"stop_reason":"max_tokens"},"usage":{"output_tokens":50}}"#,
                r#"{"type":"message_start","message":{"usage":{"input_tokens":7,"output_tokens":0}}}"#,
            ],
        );
        let usage = ex.usage.unwrap();
        assert_eq!((usage.prompt, usage.completion), (Some(7), Some(50)));
    }

    /// Nothing after the end-of-stream event is part of the answer.
    #[test]
    fn events_after_the_end_are_no_part_of_the_answer() {
        let ex = events(
            Api::Chat,
            &[
                r#"{"choices":[{"delta":{"content":"ab"}}]}"#,
                "[DONE]",
                r#"{"choices":[{"delta":{"content":"cd"}}]}"#,
            ],
        );
        assert_eq!(ex.text, "ab");
        assert_eq!(ex.chunk_times.len(), 1);
    }

    #[test]
    fn role_only_and_empty_chunks_carry_no_token() {
        let ex = events(
            Api::Chat,
            &[
                r#"{"choices":[{"delta":{"role":"assistant","content":null}}]}"#,
                r#"{"choices":[{"delta":{"role":"assistant","content":""}}]}"#,
                r#"{"choices":[{"delta":{"content":" hi"}}]}"#,
            ],
        );
        assert_eq!(ex.chunk_times, vec![3]);
    }

    #[test]
    fn per_chunk_usage_gives_tokens_per_chunk_and_usage_only_chunk_is_kept() {
        let ex = events(
            Api::Chat,
            &[
                r#"{"choices":[{"delta":{"content":"ab"}}],"usage":{"prompt_tokens":5,"completion_tokens":3}}"#,
                r#"{"choices":[{"delta":{"content":"c"}}],"usage":{"prompt_tokens":5,"completion_tokens":4}}"#,
                r#"{"choices":[{"delta":{},"finish_reason":"length"}]}"#,
                r#"{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":4,"prompt_tokens_details":{"cached_tokens":2}}}"#,
                "[DONE]",
            ],
        );
        assert_eq!(ex.chunk_usage_tokens, vec![3, 1]);
        assert_eq!(ex.chunk_ends, vec![2, 3]);
        assert_eq!(ex.finish_reason.as_deref(), Some("length"));
        assert_eq!(
            ex.usage,
            Some(Usage {
                prompt: Some(5),
                completion: Some(4),
                cached: Some(2),
                reasoning: None,
                invalid: None
            })
        );
        assert!(ex.done);
    }

    #[test]
    fn mid_stream_errors_and_bad_json_are_classified() {
        let ex = events(Api::Chat, &[r#"{"error":{"message":"overloaded"}}"#]);
        assert_eq!(
            ex.error.as_ref().map(|e| e.0),
            Some(ErrorClass::StreamError)
        );
        let ex = events(Api::Completions, &["{not json"]);
        assert_eq!(ex.error.as_ref().map(|e| e.0), Some(ErrorClass::Malformed));
        assert!(ex.chunk_times.is_empty());
    }
}
