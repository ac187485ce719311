//! OpenTelemetry GenAI spans as agent sessions: OTLP/JSON trace exports (an
//! `ExportTraceServiceRequest` a line, as the collector's file exporter writes them, or one
//! document), each trace a session, each span whose `gen_ai.operation.name` is `chat`,
//! `text_completion` or `generate_content` a call.
//!
//! Read: each span's `traceId`, `spanId`, `parentSpanId`, `startTimeUnixNano`,
//! `endTimeUnixNano` and, of its attributes, `gen_ai.operation.name`,
//! `gen_ai.usage.input_tokens` and `gen_ai.usage.output_tokens` (required on a call). A call's
//! agent is its nearest ancestor span whose operation is `invoke_agent` (none: the session's own
//! agent). Not read: resources, scopes, span names, kinds, events, links, status and every
//! other attribute (models, tools' names and arguments, `gen_ai.usage.cached_tokens`...).
//!
//! Spans say when calls ran, not what each waited for, so the DAG is inferred from the times: a
//! call comes after the call of its trace whose answer ended last before it started (and after
//! its own agent's previous call, when that is another), its wait the gap since that end; the
//! trace's first call waits nothing. Spans carry no prompt blocks either: each agent's context is
//! taken to grow by prefix (a call's blocks are its agent's blocks so far, extended to cover its
//! input), 64 tokens a block, each agent's own.
//!
//! Unlike Weka's files, a trace's spans may be anywhere in the file: it is read whole (within
//! the data-file bound) and its sessions built before the first is handed out.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use serde::Deserialize;

use super::document::DocumentError;
use super::{Call, Session};
use crate::plan::limits::MAX_TOKENS;

pub(super) const HELP: &str = "an OpenTelemetry trace export is OTLP/JSON: {\"resourceSpans\": \
     [{\"scopeSpans\": [{\"spans\": [{\"traceId\": \"…\", \"spanId\": \"…\", \"parentSpanId\": \"…\", \
     \"startTimeUnixNano\": \"…\", \"endTimeUnixNano\": \"…\", \"attributes\": [{\"key\": \
     \"gen_ai.operation.name\", \"value\": {\"stringValue\": \"chat\"}}, {\"key\": \
     \"gen_ai.usage.input_tokens\", \"value\": {\"intValue\": \"812\"}}, …]}]}]}]}";

/// Tokens per inferred block: the size every format that names no blocks takes.
const BLOCK_TOKENS: u32 = super::document::PREFIX_BLOCK_TOKENS;

/// The operations that are calls to a model.
const CALLS: [&str; 3] = ["chat", "text_completion", "generate_content"];

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Export {
    #[serde(default)]
    resource_spans: Vec<ResourceSpans>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ResourceSpans {
    #[serde(default)]
    scope_spans: Vec<ScopeSpans>,
}

#[derive(Deserialize)]
struct ScopeSpans {
    #[serde(default)]
    spans: Vec<OtlpSpan>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct OtlpSpan {
    trace_id: String,
    span_id: String,
    #[serde(default)]
    parent_span_id: String,
    start_time_unix_nano: Number,
    end_time_unix_nano: Number,
    #[serde(default)]
    attributes: Vec<KeyValue>,
}

#[derive(Deserialize)]
struct KeyValue {
    key: String,
    value: AnyValue,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct AnyValue {
    string_value: Option<String>,
    int_value: Option<Number>,
}

/// OTLP/JSON writes 64-bit integers as strings; some exporters as numbers.
#[derive(Deserialize, Clone)]
#[serde(untagged)]
enum Number {
    Text(String),
    Int(u64),
}

impl Number {
    fn value(&self) -> Option<u64> {
        match self {
            Number::Text(text) => text.parse().ok(),
            Number::Int(n) => Some(*n),
        }
    }
}

/// A call's span: its start and end (ns), its tokens in and out.
type CallSpan = (u64, u64, u32, u32);

/// One span as a session needs it.
struct Kept {
    parent: Option<String>,
    operation: Option<String>,
    call: Option<CallSpan>,
}

/// Every span read so far, by trace; traces in the order first seen.
#[derive(Default)]
pub(super) struct Traces {
    traces: BTreeMap<usize, (String, HashMap<String, Kept>)>,
    order: HashMap<String, usize>,
}

impl Traces {
    /// Adds the spans of one document (an export request).
    pub(super) fn add(&mut self, text: &str) -> Result<(), DocumentError> {
        let export: Export = super::document::parse(text)?;
        for (r, resource) in export.resource_spans.iter().enumerate() {
            for (s, scope) in resource.scope_spans.iter().enumerate() {
                for (i, span) in scope.spans.iter().enumerate() {
                    let at = format!("resourceSpans[{r}].scopeSpans[{s}].spans[{i}]");
                    self.span(span, &at)?;
                }
            }
        }
        Ok(())
    }

    fn span(&mut self, span: &OtlpSpan, at: &str) -> Result<(), DocumentError> {
        let attribute = |key: &str| span.attributes.iter().find(|a| a.key == key);
        let operation =
            attribute("gen_ai.operation.name").and_then(|a| a.value.string_value.clone());
        let call = match operation.as_deref() {
            Some(op) if CALLS.contains(&op) => {
                let tokens = |key: &str| -> Result<u32, DocumentError> {
                    let value = attribute(key).and_then(|a| a.value.int_value.as_ref()?.value());
                    match value {
                        Some(n) if n <= MAX_TOKENS => Ok(n as u32),
                        Some(n) => Err(error(
                            at,
                            key,
                            &format!("{n} tokens is more than {MAX_TOKENS}"),
                        )),
                        None => Err(error(
                            at,
                            key,
                            "a model call's span needs its token count (an intValue)",
                        )),
                    }
                };
                let times = (
                    span.start_time_unix_nano.value(),
                    span.end_time_unix_nano.value(),
                );
                let (Some(start), Some(end)) = times else {
                    return Err(error(at, "startTimeUnixNano", "is not a time in ns"));
                };
                Some((
                    start,
                    end.max(start),
                    tokens("gen_ai.usage.input_tokens")?.max(1),
                    tokens("gen_ai.usage.output_tokens")?.max(1),
                ))
            }
            _ => None,
        };
        let next = self.order.len();
        let position = *self.order.entry(span.trace_id.clone()).or_insert(next);
        let (_, spans) = self
            .traces
            .entry(position)
            .or_insert_with(|| (span.trace_id.clone(), HashMap::new()));
        spans.insert(
            span.span_id.clone(),
            Kept {
                parent: Some(span.parent_span_id.clone()).filter(|p| !p.is_empty()),
                operation,
                call,
            },
        );
        Ok(())
    }

    /// The sessions: a trace each (one with no call is none), in the order first seen.
    pub(super) fn sessions(self) -> Vec<Session> {
        let mut sessions = Vec::new();
        for (_, (id, spans)) in self.traces {
            if let Some(session) = session(id, &spans, sessions.len() as u64) {
                sessions.push(session);
            }
        }
        sessions
    }
}

fn error(at: &str, field: &str, message: &str) -> DocumentError {
    DocumentError {
        line: 1,
        field: Some(format!("{at}.attributes[\"{field}\"]")),
        message: message.to_string(),
    }
}

/// The agent a span runs in: its nearest `invoke_agent` ancestor (at most 64 up).
fn agent_of<'a>(spans: &'a HashMap<String, Kept>, mut id: &'a str) -> Option<String> {
    for _ in 0..64 {
        let parent = spans.get(id)?.parent.as_deref()?;
        if spans.get(parent)?.operation.as_deref() == Some("invoke_agent") {
            return Some(parent.to_string());
        }
        id = parent;
    }
    None
}

fn session(id: String, spans: &HashMap<String, Kept>, ordinal: u64) -> Option<Session> {
    let mut calls: Vec<(&str, CallSpan)> = spans
        .iter()
        .filter_map(|(span, kept)| Some((span.as_str(), kept.call?)))
        .collect();
    calls.sort_by_key(|(span, (start, ..))| (*start, *span));
    let first_start = calls.first()?.1 .0;
    let mut agents: HashMap<Option<String>, (u32, Vec<u64>)> = HashMap::new();
    let mut next_block = 1u64;
    let mut built: Vec<Call> = Vec::new();
    // Per call: its agent and its end, to infer the next ones' parents.
    let mut ends: Vec<(u32, u64)> = Vec::new();
    for (span, (start, end, input, output)) in calls {
        let key = agent_of(spans, span);
        let count = agents.len() as u32;
        let (agent, blocks) = agents.entry(key).or_insert((count, Vec::new()));
        let needed = input.div_ceil(BLOCK_TOKENS) as usize;
        while blocks.len() < needed {
            blocks.push(next_block);
            next_block += 1;
        }
        let ended_before = |(_, e): &&(u32, u64)| *e <= start;
        let last = ends
            .iter()
            .enumerate()
            .filter(|(_, c)| ended_before(c))
            .max_by_key(|(_, (_, e))| *e);
        let own = ends
            .iter()
            .enumerate()
            .filter(|(_, c)| c.0 == *agent && ended_before(c))
            .max_by_key(|(_, (_, e))| *e);
        let mut after: Vec<u32> = last
            .iter()
            .chain(own.iter())
            .map(|(i, _)| *i as u32)
            .collect();
        after.sort_unstable();
        after.dedup();
        let since = last.map_or(first_start, |(_, (_, e))| *e);
        built.push(Call {
            after,
            wait: Duration::from_nanos(start.saturating_sub(since)),
            input_tokens: input,
            output_tokens: output,
            hash_ids: blocks[..needed].to_vec(),
            agent: *agent,
            tool_use: false,
            text: None,
            continues: None,
        });
        ends.push((*agent, end));
    }
    Some(Session {
        id,
        ordinal,
        block_tokens: BLOCK_TOKENS,
        first: 0,
        calls: built,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: u64 = 1_700_000_000_000_000_000;

    /// A span as OTLP/JSON writes it (ids hex, times and integers as strings).
    fn span(
        id: &str,
        parent: &str,
        op: &str,
        from_ms: u64,
        to_ms: u64,
        tokens: Option<(u32, u32)>,
    ) -> String {
        let mut attributes = vec![format!(
            "{{\"key\": \"gen_ai.operation.name\", \"value\": {{\"stringValue\": \"{op}\"}}}}"
        )];
        if let Some((input, output)) = tokens {
            attributes.push(
                "{\"key\": \"gen_ai.request.model\", \"value\": {\"stringValue\": \"gpt-4.1\"}}"
                    .to_string(),
            );
            attributes.push(format!("{{\"key\": \"gen_ai.usage.input_tokens\", \"value\": {{\"intValue\": \"{input}\"}}}}"));
            attributes.push(format!("{{\"key\": \"gen_ai.usage.output_tokens\", \"value\": {{\"intValue\": {output}}}}}"));
        }
        format!(
            "{{\"traceId\": \"5b8efff798038103d269b633813fc60c\", \"spanId\": \"{id}\", \"parentSpanId\": \"{parent}\", \
             \"name\": \"{op}\", \"kind\": 3, \"startTimeUnixNano\": \"{}\", \"endTimeUnixNano\": \"{}\", \
             \"attributes\": [{}], \"status\": {{}}}}",
            T0 + from_ms * 1_000_000,
            T0 + to_ms * 1_000_000,
            attributes.join(", ")
        )
    }

    fn export(spans: &[String]) -> String {
        format!(
            "{{\"resourceSpans\": [{{\"resource\": {{\"attributes\": [{{\"key\": \"service.name\", \"value\": {{\"stringValue\": \"agent\"}}}}]}}, \
             \"scopeSpans\": [{{\"scope\": {{\"name\": \"openai-agents\"}}, \"spans\": [{}]}}]}}]}}",
            spans.join(", ")
        )
    }

    /// An agent's trace: three calls with a tool between the first two, and a sub-agent of two
    /// calls between the second and the third.
    fn agent_trace() -> Vec<String> {
        vec![
            span("aa00000000000001", "", "invoke_agent", 0, 10_000, None),
            span(
                "cc00000000000001",
                "aa00000000000001",
                "chat",
                0,
                1_000,
                Some((500, 40)),
            ),
            span(
                "ee00000000000001",
                "aa00000000000001",
                "execute_tool",
                1_000,
                1_500,
                None,
            ),
            span(
                "cc00000000000002",
                "aa00000000000001",
                "chat",
                1_600,
                2_600,
                Some((900, 50)),
            ),
            span(
                "aa00000000000002",
                "aa00000000000001",
                "invoke_agent",
                2_700,
                5_000,
                None,
            ),
            span(
                "cc00000000000003",
                "aa00000000000002",
                "chat",
                2_800,
                3_800,
                Some((300, 20)),
            ),
            span(
                "cc00000000000004",
                "aa00000000000002",
                "chat",
                4_000,
                4_800,
                Some((400, 30)),
            ),
            span(
                "cc00000000000005",
                "aa00000000000001",
                "chat",
                5_200,
                6_000,
                Some((1_300, 60)),
            ),
        ]
    }

    #[test]
    fn a_trace_becomes_a_session_its_dag_inferred_from_the_times() {
        let mut traces = Traces::default();
        // Spans of one trace may come in several exports, in any order.
        let spans = agent_trace();
        let (first, rest) = spans.split_at(4);
        assert!(traces.add(&export(rest)).is_ok());
        assert!(traces.add(&export(first)).is_ok());
        let sessions = traces.sessions();
        assert_eq!(sessions.len(), 1);
        let calls = &sessions[0].calls;
        let shape: Vec<(Vec<u32>, u128, u32)> = calls
            .iter()
            .map(|c| (c.after.clone(), c.wait.as_millis(), c.agent))
            .collect();
        assert_eq!(
            shape,
            vec![
                (vec![], 0, 0),
                // After the tool's run: 600 ms after the first answer.
                (vec![0], 600, 0),
                // The sub-agent's first call, after its parent's call.
                (vec![1], 200, 1),
                (vec![2], 200, 1),
                // The join: after the sub-agent's last answer and its own previous call.
                (vec![1, 3], 400, 0),
            ]
        );
        // Each agent's context grows by prefix, in blocks of its own.
        assert_eq!(calls[1].hash_ids, (1..=15).collect::<Vec<u64>>());
        assert_eq!(calls[3].hash_ids, (16..=22).collect::<Vec<u64>>());
        let mut main: Vec<u64> = (1..=15).collect();
        main.extend(23..=28);
        assert_eq!(calls[4].hash_ids, main);
        assert_eq!((calls[4].input_tokens, calls[4].output_tokens), (1_300, 60));
    }

    #[test]
    fn a_call_without_its_token_counts_is_a_mistake_naming_the_span() {
        let mut traces = Traces::default();
        let bad = span("cc00000000000009", "", "chat", 0, 10, None);
        let Err(error) = traces.add(&export(&[agent_trace()[0].clone(), bad])) else {
            panic!("refused");
        };
        assert_eq!(
            error.field.as_deref(),
            Some(
                "resourceSpans[0].scopeSpans[0].spans[1].attributes[\"gen_ai.usage.input_tokens\"]"
            )
        );
        let Err(error) = traces
            .add("{\"resourceSpans\": [{\"scopeSpans\": [{\"spans\": [{\"spanId\": \"x\"}]}]}]}")
        else {
            panic!("refused");
        };
        assert!(
            error.message.contains("missing field `traceId`"),
            "{}",
            error.message
        );
    }
}
