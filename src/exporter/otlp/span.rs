//! One request as an OpenTelemetry span, and a batch of them as an OTLP
//! `ExportTraceServiceRequest` (opentelemetry-proto's `trace/v1/trace.proto` and
//! `collector/trace/v1/trace_service.proto`, written with `protobuf.rs`).
//!
//! The span is the client's: its trace and span ids are the ones the request's `traceparent`
//! carried, so the spans an engine exports for the request (vLLM, SGLang) are its children. It
//! is named and attributed after the GenAI semantic conventions (`chat <model>`, kind CLIENT,
//! `gen_ai.operation.name`, `gen_ai.request.model`, `gen_ai.response.model`,
//! `gen_ai.usage.input_tokens`/`output_tokens`, `gen_ai.response.finish_reasons`,
//! `server.address`/`server.port`, `error.type` and an ERROR status when it failed), with
//! llmload's own under `llmload.*` (request id, phase, schedule lag, cached tokens). The first
//! token is an event, `llmload.first_token`: the conventions name no such event yet.
//!
//! What it never holds: a header's value, a key, the target URL's path or query (only its host
//! and port), the prompt or the answer.
//!
//! Not for: queueing and sending batches (`mod.rs`).

use std::collections::BTreeMap;

use crate::exporter::protobuf::{bytes_field, double_field, fixed64_field, varint_field};
use crate::records::{request_id_text, ErrorClass, RequestRecord, RunHeader, TraceContext};

/// OTLP's `SpanKind` CLIENT.
const KIND_CLIENT: u64 = 3;
/// OTLP's `Status.StatusCode` ERROR.
const STATUS_ERROR: u64 = 2;
/// The longest status message kept, characters: the error's detail is a sentence, but a server
/// chose some of its words.
const STATUS_MESSAGE_CHARS: usize = 256;

/// What a span takes of a request's record: copied on the recorder's thread (a few fields),
/// encoded later on the exporter's own.
#[derive(Debug, Clone, Default)]
pub(super) struct Finished {
    phase: usize,
    seq: u64,
    intended_send_us: u64,
    actual_send_us: u64,
    /// Send to the end of the response (or the last thing heard), µs.
    lasted_us: u64,
    ttft_us: Option<u64>,
    model: Option<String>,
    error: Option<ErrorClass>,
    error_detail: Option<String>,
    http_status: Option<u16>,
    server_request_id: Option<String>,
    prompt_tokens: Option<u64>,
    completion_tokens: Option<u64>,
    output_tokens_planned: u32,
    cached_tokens: Option<u64>,
    finish_reason: Option<String>,
}

impl Finished {
    pub(super) fn of(record: &RequestRecord) -> Finished {
        Finished {
            phase: record.phase,
            seq: record.seq,
            intended_send_us: record.intended_send_us,
            actual_send_us: record.actual_send_us,
            lasted_us: record
                .e2e_us
                .or_else(|| record.chunks.last().map(|c| c.0))
                .or(record.ttft_us)
                .unwrap_or(0),
            ttft_us: record.ttft_us,
            model: record.model.clone(),
            error: record.error,
            error_detail: record.error_detail.clone(),
            http_status: record.http_status,
            server_request_id: record.server_request_id.clone(),
            prompt_tokens: record.prompt_tokens,
            completion_tokens: record.completion_tokens,
            output_tokens_planned: record.output_tokens_planned,
            cached_tokens: record.cached_tokens,
            finish_reason: record.finish_reason.clone(),
        }
    }
}

/// What every span of a run shares, learned when it starts.
#[derive(Debug, Clone)]
pub(super) struct RunContext {
    /// The request-id prefix the traces were drawn from.
    prefix: String,
    /// The wall clock at the run's start, ns since the Unix epoch (records count µs from it).
    started_unix_ns: u64,
    operation: &'static str,
    request_model: String,
    server: Option<(String, u16)>,
    /// The `Resource` message every batch is sent under.
    resource: Vec<u8>,
    phases: BTreeMap<usize, String>,
}

impl RunContext {
    /// The context of the run `header` starts; `None` for a header without a request-id prefix
    /// (there is then no trace to join).
    pub(super) fn of(header: &RunHeader) -> Option<RunContext> {
        let prefix = header.request_id_prefix.clone()?;
        let started_unix_ns = header.started_unix_ns.unwrap_or_else(now_unix_ns);
        let operation =
            crate::api::Api::from_name(&header.api).map_or("chat", |api| api.dialect().operation());
        let server = reqwest::Url::parse(&header.target)
            .ok()
            .and_then(|url| Some((url.host_str()?.to_string(), url.port_or_known_default()?)));
        let mut resource = Vec::new();
        let version = env!("CARGO_PKG_VERSION");
        attribute(&mut resource, 1, "service.name", Value::Str("llmload"));
        attribute(&mut resource, 1, "service.version", Value::Str(version));
        attribute(&mut resource, 1, "llmload.run", Value::Str(&prefix));
        attribute(&mut resource, 1, "llmload.plan", Value::Str(&header.plan));
        if let Some(shard) = &header.shard {
            let shard = i64::from(shard.index);
            attribute(&mut resource, 1, "llmload.shard", Value::Int(shard));
        }
        for (name, value) in &header.labels {
            let key = format!("llmload.label.{name}");
            attribute(&mut resource, 1, &key, Value::Str(value));
        }
        Some(RunContext {
            prefix,
            started_unix_ns,
            operation,
            request_model: header.model.clone(),
            server,
            resource,
            phases: BTreeMap::new(),
        })
    }

    /// Phase `index` is called `name` in its spans.
    pub(super) fn name_phase(&mut self, index: usize, name: &str) {
        self.phases.insert(index, name.to_string());
    }

    /// The `Span` message of `record`.
    pub(super) fn span(&self, record: &Finished) -> Vec<u8> {
        let trace = TraceContext::of(&self.prefix, record.phase, record.seq);
        let start = self.started_unix_ns + record.actual_send_us * 1000;
        let lasted_us = record.lasted_us;
        let model = record.model.as_deref().unwrap_or(&self.request_model);
        let mut span = Vec::new();
        bytes_field(&mut span, 1, &trace.trace_id.to_be_bytes());
        bytes_field(&mut span, 2, &trace.span_id.to_be_bytes());
        let name = format!("{} {}", self.operation, self.request_model);
        bytes_field(&mut span, 5, name.as_bytes());
        varint_field(&mut span, 6, KIND_CLIENT);
        fixed64_field(&mut span, 7, start);
        fixed64_field(&mut span, 8, start + lasted_us * 1000);
        self.attributes(&mut span, record, model);
        if let Some(ttft_us) = record.ttft_us {
            let mut event = Vec::new();
            fixed64_field(&mut event, 1, start + ttft_us * 1000);
            bytes_field(&mut event, 2, b"llmload.first_token");
            let ms = ttft_us as f64 / 1000.0;
            attribute(&mut event, 3, "llmload.ttft_ms", Value::Double(ms));
            bytes_field(&mut span, 11, &event);
        }
        if let Some(class) = record.error {
            let mut status = Vec::new();
            let detail = record.error_detail.as_deref().unwrap_or("");
            let message: String = format!("{}: {detail}", class.as_str())
                .chars()
                .take(STATUS_MESSAGE_CHARS)
                .collect();
            bytes_field(&mut status, 2, message.trim_end_matches(": ").as_bytes());
            varint_field(&mut status, 3, STATUS_ERROR);
            bytes_field(&mut span, 15, &status);
        }
        span
    }

    /// A span's attributes (field 9 of `Span`).
    fn attributes(&self, span: &mut Vec<u8>, record: &Finished, model: &str) {
        let id = request_id_text(&self.prefix, record.phase, record.seq);
        let phase = self.phases.get(&record.phase).map_or("", String::as_str);
        let lag_ms = record
            .actual_send_us
            .saturating_sub(record.intended_send_us) as f64
            / 1000.0;
        let mut strings = vec![
            ("gen_ai.operation.name", self.operation),
            ("gen_ai.request.model", &self.request_model),
            ("llmload.request_id", &id),
            ("llmload.phase", phase),
        ];
        if record.error.is_none() {
            strings.push(("gen_ai.response.model", model));
        }
        if let Some(class) = record.error {
            strings.push(("error.type", class.as_str()));
        }
        if let Some(id) = &record.server_request_id {
            strings.push(("llmload.server_request_id", id));
        }
        if let Some((host, _)) = &self.server {
            strings.push(("server.address", host));
        }
        for (key, value) in strings {
            attribute(span, 9, key, Value::Str(value));
        }
        let ints = [
            ("server.port", self.server.as_ref().map(|s| u64::from(s.1))),
            ("gen_ai.usage.input_tokens", record.prompt_tokens),
            ("gen_ai.usage.output_tokens", record.completion_tokens),
            (
                "gen_ai.request.max_tokens",
                Some(record.output_tokens_planned.into()),
            ),
            (
                "http.response.status_code",
                record.http_status.map(u64::from),
            ),
            ("llmload.cached_tokens", record.cached_tokens),
            ("llmload.seq", Some(record.seq)),
        ];
        for (key, value) in ints {
            if let Some(value) = value {
                attribute(span, 9, key, Value::Int(value as i64));
            }
        }
        attribute(span, 9, "llmload.schedule_lag_ms", Value::Double(lag_ms));
        if let Some(reason) = &record.finish_reason {
            attribute(
                span,
                9,
                "gen_ai.response.finish_reasons",
                Value::Strs(&[reason]),
            );
        }
    }

    /// An `ExportTraceServiceRequest` of `finished`'s spans.
    pub(super) fn request(&self, finished: &[Finished]) -> Vec<u8> {
        let spans: Vec<Vec<u8>> = finished.iter().map(|f| self.span(f)).collect();
        self.request_of(&spans)
    }

    /// An `ExportTraceServiceRequest` of `spans` (each a `Span` message): one `ResourceSpans`
    /// under the run's resource, one `ScopeSpans` of scope `llmload`.
    fn request_of(&self, spans: &[Vec<u8>]) -> Vec<u8> {
        let mut scope = Vec::new();
        bytes_field(&mut scope, 1, b"llmload");
        bytes_field(&mut scope, 2, env!("CARGO_PKG_VERSION").as_bytes());
        let mut scope_spans = Vec::new();
        bytes_field(&mut scope_spans, 1, &scope);
        for span in spans {
            bytes_field(&mut scope_spans, 2, span);
        }
        let mut resource_spans = Vec::new();
        bytes_field(&mut resource_spans, 1, &self.resource);
        bytes_field(&mut resource_spans, 2, &scope_spans);
        let mut request = Vec::new();
        bytes_field(&mut request, 1, &resource_spans);
        request
    }
}

fn now_unix_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// An attribute's value: OTLP's `AnyValue`, as far as spans here need it.
enum Value<'a> {
    Str(&'a str),
    Int(i64),
    Double(f64),
    Strs(&'a [&'a str]),
}

/// A `KeyValue` as field `field` of `out`.
fn attribute(out: &mut Vec<u8>, field: u32, key: &str, value: Value<'_>) {
    let mut any = Vec::new();
    match value {
        Value::Str(text) => bytes_field(&mut any, 1, text.as_bytes()),
        Value::Int(n) => varint_field(&mut any, 3, n as u64),
        Value::Double(x) => double_field(&mut any, 4, x),
        Value::Strs(texts) => {
            let mut array = Vec::new();
            for text in texts {
                let mut item = Vec::new();
                bytes_field(&mut item, 1, text.as_bytes());
                bytes_field(&mut array, 1, &item);
            }
            bytes_field(&mut any, 5, &array);
        }
    }
    let mut pair = Vec::new();
    bytes_field(&mut pair, 1, key.as_bytes());
    bytes_field(&mut pair, 2, &any);
    bytes_field(out, field, &pair);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Field `number`'s length-delimited values in `message`, in order (a reader just big
    /// enough for these tests; the integration test decodes with opentelemetry-proto).
    fn fields(message: &[u8], number: u32) -> Vec<Vec<u8>> {
        let mut found = Vec::new();
        let mut at = 0;
        let read_varint = |at: &mut usize| {
            let (mut value, mut shift) = (0u64, 0);
            loop {
                let byte = message[*at];
                *at += 1;
                value |= u64::from(byte & 0x7f) << shift;
                shift += 7;
                if byte < 0x80 {
                    return value;
                }
            }
        };
        while at < message.len() {
            let key = read_varint(&mut at);
            let (field, wire) = ((key >> 3) as u32, key & 7);
            match wire {
                0 => drop(read_varint(&mut at)),
                1 => at += 8,
                5 => at += 4,
                _ => {
                    let len = read_varint(&mut at) as usize;
                    if field == number {
                        found.push(message[at..at + len].to_vec());
                    }
                    at += len;
                }
            }
        }
        found
    }

    fn header() -> RunHeader {
        RunHeader {
            plan: "p".into(),
            model: "m".into(),
            api: "completions".into(),
            target: "http://127.0.0.1:8000/v1".into(),
            request_id_prefix: Some("llmload-0a1b2c3d".into()),
            started_unix_ns: Some(1_000_000_000),
            ..RunHeader::default()
        }
    }

    #[test]
    fn a_span_carries_the_requests_trace_and_times() {
        let run = RunContext::of(&header()).unwrap();
        let record = RequestRecord {
            phase: 1,
            seq: 7,
            actual_send_us: 2_000,
            ttft_us: Some(500),
            e2e_us: Some(1_500),
            ..RequestRecord::default()
        };
        let span = run.span(&Finished::of(&record));
        let trace = TraceContext::of("llmload-0a1b2c3d", 1, 7);
        assert_eq!(fields(&span, 1), [trace.trace_id.to_be_bytes().to_vec()]);
        assert_eq!(fields(&span, 2), [trace.span_id.to_be_bytes().to_vec()]);
        assert_eq!(fields(&span, 5), [b"text_completion m".to_vec()]);
        // Start 1 s + 2 ms, end 1.5 ms later, as fixed64 after keys 0x39 and 0x41.
        let at = |key: u8| {
            let i = span.iter().position(|&b| b == key).unwrap();
            u64::from_le_bytes(span[i + 1..i + 9].try_into().unwrap())
        };
        assert_eq!(at(0x39), 1_002_000_000);
        assert_eq!(at(0x41), 1_003_500_000);
        let event = &fields(&span, 11)[0];
        assert_eq!(fields(event, 2), [b"llmload.first_token".to_vec()]);
        assert!(fields(&span, 15).is_empty(), "a success has no status");
    }

    #[test]
    fn a_failure_is_an_error_status_and_keeps_no_secret() {
        let mut head = header();
        head.target = "http://user:hunter2@127.0.0.1:9/v1?key=sk-secret".into();
        let run = RunContext::of(&head).unwrap();
        let record = RequestRecord {
            error: Some(crate::records::ErrorClass::Http5xx),
            error_detail: Some("x".repeat(1000)),
            http_status: Some(503),
            e2e_us: Some(10),
            ..RequestRecord::default()
        };
        let span = run.span(&Finished::of(&record));
        let status = &fields(&span, 15)[0];
        let message = &fields(status, 2)[0];
        assert!(message.starts_with(b"http_5xx: xxx"));
        assert_eq!(message.len(), STATUS_MESSAGE_CHARS);
        let text = String::from_utf8_lossy(&span);
        assert!(text.contains("error.type") && text.contains("127.0.0.1"));
        let resource = String::from_utf8_lossy(&run.resource).into_owned();
        for secret in ["hunter2", "sk-secret", "user"] {
            assert!(
                !text.contains(secret) && !resource.contains(secret),
                "{secret}"
            );
        }
    }

    #[test]
    fn a_request_wraps_spans_in_one_resource_and_scope() {
        let run = RunContext::of(&header()).unwrap();
        let spans = vec![vec![1, 2], vec![3]];
        let request = run.request_of(&spans);
        let resource_spans = fields(&request, 1);
        assert_eq!(resource_spans.len(), 1);
        assert_eq!(
            fields(&resource_spans[0], 1),
            std::slice::from_ref(&run.resource)
        );
        let scope_spans = &fields(&resource_spans[0], 2)[0];
        assert_eq!(fields(scope_spans, 2), spans);
    }
}
