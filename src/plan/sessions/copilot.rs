//! GitHub Copilot coding-agent sessions (the Azure Public Dataset's GitHub Copilot Coding Agent
//! Dataset 2026): one JSON object a session, a line each (its shards are gzip-compressed JSONL:
//! decompress them first). Each of a session's `turns` holds the LLM calls the agent made for one
//! user message and the tool batches it ran between them.
//!
//! Read: the session's `session_id`; each call's `message_id`, `timestamp` (its start),
//! `duration_ms`, and `tokens`' `prompt`, `completion` and `cached`; each tool batch's
//! `request_id` (the call whose answer asked for it: its next call is a tool turn). The calls
//! are one agent's chain in time order; a call's wait is the gap from the previous call's end
//! (its `timestamp` plus `duration_ms`) to its own `timestamp` (tool runs, the user's next
//! message). The dataset names no blocks: a call's first `cached` tokens are taken to be its
//! previous call's prompt (the cache hit the service recorded), 64 tokens a block, the rest new.
//!
//! Not read (accepted and ignored): `date`; a turn's `turn_id`; a call's `initiator_type`,
//! `model` (the plan's model is asked), `result`, `status_code`, `tokens.total`,
//! `tokens.cached_pct`, `message_metadata`; a tool batch's `timestamp`, `duration_ms`,
//! `auto_continue`, `result`, `function_calls`.

use serde::Deserialize;
use std::collections::HashSet;

use super::document::{self, DocumentError, Link};
use super::Session;

pub(super) const HELP: &str = "a GitHub Copilot coding-agent session is one JSON object a line: \
     {\"session_id\": \"…\", \"turns\": [{\"llm_calls\": [{\"message_id\": \"…\", \"timestamp\": \
     \"2026-06-01T05:40:20.151Z\", \"duration_ms\": 2150.0, \"tokens\": {\"prompt\": 18000, \
     \"completion\": 240, \"cached\": 17000}}], \"tool_batches\": [{\"request_id\": \"…\"}]}]}";

#[derive(Deserialize)]
struct Record {
    session_id: String,
    turns: Vec<Turn>,
}

#[derive(Deserialize)]
struct Turn {
    #[serde(default)]
    llm_calls: Vec<LlmCall>,
    #[serde(default)]
    tool_batches: Vec<ToolBatch>,
}

#[derive(Deserialize)]
struct LlmCall {
    #[serde(default)]
    message_id: String,
    timestamp: String,
    duration_ms: f64,
    tokens: Tokens,
}

#[derive(Deserialize)]
struct Tokens {
    prompt: u64,
    completion: u64,
    #[serde(default)]
    cached: u64,
}

#[derive(Deserialize)]
struct ToolBatch {
    #[serde(default)]
    request_id: String,
}

/// The session in `text` (one line), the `ordinal`-th of its file.
pub(super) fn session(text: &str, ordinal: u64) -> Result<Session, DocumentError> {
    let record: Record = document::parse(text)?;
    let asked_tools: HashSet<&str> = record
        .turns
        .iter()
        .flat_map(|turn| &turn.tool_batches)
        .map(|batch| batch.request_id.as_str())
        .filter(|id| !id.is_empty())
        .collect();
    // Each call with where it is and when it started, in time order (stable: the file's order
    // breaks ties).
    let mut timed = Vec::new();
    for (t, turn) in record.turns.iter().enumerate() {
        for (c, call) in turn.llm_calls.iter().enumerate() {
            let at = format!("turns[{t}].llm_calls[{c}]");
            let start = document::timestamp(&call.timestamp, &format!("{at}.timestamp"))?;
            if !call.duration_ms.is_finite() || call.duration_ms < 0.0 {
                let message = format!("{} is not a duration in milliseconds", call.duration_ms);
                return Err(document::field_error(
                    &format!("{at}.duration_ms"),
                    &message,
                ));
            }
            timed.push((start, at, call));
        }
    }
    timed.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut links = Vec::with_capacity(timed.len());
    let mut previous_end: Option<f64> = None;
    for (start, at, call) in timed {
        let input_tokens =
            document::prompt_tokens(call.tokens.prompt, &format!("{at}.tokens.prompt"))?;
        let output_tokens =
            document::output_tokens(call.tokens.completion, &format!("{at}.tokens.completion"))?;
        links.push(Link {
            wait_s: previous_end.map_or(0.0, |end| start - end),
            input_tokens,
            shared: call.tokens.cached.min(u64::from(input_tokens)) as u32,
            output_tokens,
            tool_use: asked_tools.contains(call.message_id.as_str()),
        });
        previous_end = Some(start + call.duration_ms / 1e3);
    }
    Ok(document::chain(record.session_id, ordinal, links))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// Shaped as the dataset's `schema.json` describes a record (its fields, their types and
    /// nesting), with values of the kind its card reports.
    const SESSION: &str = r#"{"session_id": "5f0c2a9e7b", "date": "2026-06-01", "turns": [{"turn_id": "t1", "llm_calls": [{"message_id": "m1", "timestamp": "2026-06-01T05:40:20.000Z", "duration_ms": 2000.0, "initiator_type": "user", "model": "Model A", "result": "Success", "status_code": "OK", "tokens": {"total": 18240, "prompt": 18000, "completion": 240, "cached": 0, "cached_pct": 0.0}, "message_metadata": [{"type": "System", "role": "system", "sequenceId": 0, "token_len": 9000}, {"type": "UserMessage", "role": "user", "sequenceId": 1, "token_len": 9000}]}, {"message_id": "m2", "timestamp": "2026-06-01T05:40:25.500Z", "duration_ms": 1500.0, "initiator_type": "agent", "model": "Model A", "result": "Success", "status_code": "OK", "tokens": {"total": 19100, "prompt": 19000, "completion": 100, "cached": 18200, "cached_pct": 95.8}, "message_metadata": []}], "tool_batches": [{"timestamp": "2026-06-01T05:40:22.100Z", "duration_ms": 3300.0, "auto_continue": true, "result": "Success", "request_id": "m1", "function_calls": [{"name": "read_file", "status": 1, "duration_ms": 3200.0}]}]}, {"turn_id": "t2", "llm_calls": [{"message_id": "m3", "timestamp": "2026-06-01T05:41:07.000Z", "duration_ms": 900.0, "initiator_type": "user", "model": "Model A", "result": "Success", "status_code": "OK", "tokens": {"total": 19700, "prompt": 19650, "completion": 50, "cached": 19000, "cached_pct": 96.7}, "message_metadata": []}], "tool_batches": []}]}"#;

    #[test]
    fn a_session_becomes_a_chain_waiting_the_gaps_between_its_calls() {
        let session = session(SESSION, 0).ok().expect("read");
        assert_eq!(session.id, "5f0c2a9e7b");
        let calls = &session.calls;
        assert_eq!(calls.len(), 3);
        assert_eq!(calls[1].after, vec![0]);
        assert_eq!(calls[2].after, vec![1]);
        // m2 starts 3.5 s after m1's end (its tool batch); m3 40 s after m2's (the user).
        assert_eq!(calls[1].wait, Duration::from_millis(3500));
        assert_eq!(calls[2].wait, Duration::from_millis(40_000));
        assert!(calls[0].tool_use && !calls[1].tool_use);
        assert_eq!(
            (calls[0].input_tokens, calls[0].output_tokens),
            (18000, 240)
        );
        // m2's 18,200 cached tokens cover all of m1's 282 blocks (18,000 tokens): the rest of
        // the cache held m1's answer, which a replay's next prompt carries as other bytes.
        let shared = calls[0]
            .hash_ids
            .iter()
            .zip(&calls[1].hash_ids)
            .take_while(|(a, b)| a == b)
            .count();
        assert_eq!(shared, 18000_usize.div_ceil(64));
    }

    #[test]
    fn a_mistake_names_its_field() {
        let bad = SESSION.replacen("\"prompt\": 19000", "\"prompt\": 0", 1);
        let error = session(&bad, 0).expect_err("refused");
        assert_eq!(
            error.field.as_deref(),
            Some("turns[0].llm_calls[1].tokens.prompt")
        );
        let bad = SESSION.replacen("2026-06-01T05:41:07.000Z", "June 1st", 1);
        let error = session(&bad, 0).expect_err("refused");
        assert_eq!(
            error.field.as_deref(),
            Some("turns[1].llm_calls[0].timestamp")
        );
        let bad = SESSION.replacen("\"duration_ms\": 1500.0", "\"duration_ms\": -1.0", 1);
        let error = session(&bad, 0).expect_err("refused");
        assert_eq!(
            error.field.as_deref(),
            Some("turns[0].llm_calls[1].duration_ms")
        );
        let bad = SESSION.replacen("\"completion\": 240", "\"completion\": \"many\"", 1);
        let error = session(&bad, 0).expect_err("refused");
        assert_eq!(
            error.field.as_deref(),
            Some("turns[0].llm_calls[0].tokens.completion")
        );
    }
}
