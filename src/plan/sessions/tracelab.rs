//! TraceLab's agentic coding traces (SyFI TraceLab: Claude Code and Codex sessions): one JSON
//! object a line, each an LLM round, a session's rounds on consecutive lines.
//!
//! Read: each round's `session_id`, `round_index` (the order within its session),
//! `input_tokens_total`, `prefix_tokens` (what it shared with the round before: the cache's
//! read), `output_tokens`, `timing_events` (`event_type`, `timestamp`) and `tools` (a round that
//! called any: its next round is a tool turn). A session is one agent's chain of rounds; a
//! round's wait is the gap from the round before's last model event (`reasoning`, `text`,
//! `tool_call`, `usage_report`) to its own last input event (`user_message`, `tool_result`): the
//! tools' run, or the user's pause. The trace names no blocks: a round's first `prefix_tokens`
//! are taken to be the round before's prompt, 64 tokens a block, the rest new.
//!
//! Not read (accepted and ignored): `provider`, `project`, `user`, `round_id`, `model` (the
//! plan's model is asked), `newly_append_tokens` (the input less the prefix), the `claude_*`
//! token splits, `reasoning_output_tokens`, each event's `source` and counts, each tool's
//! fields, the `current_*` counts, `first_input_event_type`, `store`, `trace_key`. Sub-agents
//! are their own sessions in TraceLab (no link to a parent is recorded) and are replayed so.

use serde::Deserialize;

use super::document::{self, DocumentError, Link};
use super::Session;

pub(super) const HELP: &str = "a TraceLab trace is one JSON object a round, a session's rounds \
     together: {\"session_id\": \"claude:…\", \"round_index\": 0, \"input_tokens_total\": 32272, \
     \"prefix_tokens\": 27217, \"output_tokens\": 931, \"timing_events\": [{\"event_type\": \
     \"user_message\", \"timestamp\": \"2026-06-01T05:40:20.151Z\"}], \"tools\": []}";

#[derive(Deserialize)]
struct Row {
    session_id: String,
    #[serde(default)]
    round_index: u64,
    input_tokens_total: u64,
    #[serde(default)]
    prefix_tokens: Option<u64>,
    #[serde(default)]
    output_tokens: Option<u64>,
    #[serde(default)]
    timing_events: Vec<Event>,
    #[serde(default)]
    tools: Vec<serde::de::IgnoredAny>,
}

#[derive(Deserialize)]
struct Event {
    event_type: String,
    timestamp: String,
}

/// One round, read and checked.
pub(super) struct Round {
    pub(super) session_id: String,
    index: u64,
    input_tokens: u32,
    prefix_tokens: u32,
    output_tokens: u32,
    /// When its last input (a user message, a tool's result) was there, seconds.
    ready: Option<f64>,
    /// When its answer's last event came, seconds.
    answered: Option<f64>,
    tool_use: bool,
}

/// The round on one line.
pub(super) fn round(text: &str) -> Result<Round, DocumentError> {
    let row: Row = document::parse(text)?;
    let input_tokens = document::prompt_tokens(row.input_tokens_total, "input_tokens_total")?;
    let output_tokens = document::output_tokens(row.output_tokens.unwrap_or(0), "output_tokens")?;
    let (mut ready, mut answered, mut any) = (None::<f64>, None::<f64>, None::<f64>);
    for (index, event) in row.timing_events.iter().enumerate() {
        let field = format!("timing_events[{index}].timestamp");
        let at = document::timestamp(&event.timestamp, &field)?;
        let latest = |kept: &mut Option<f64>| *kept = Some(kept.map_or(at, |k| k.max(at)));
        match event.event_type.as_str() {
            "user_message" | "tool_result" => latest(&mut ready),
            _ => latest(&mut answered),
        }
        latest(&mut any);
    }
    Ok(Round {
        session_id: row.session_id,
        index: row.round_index,
        input_tokens,
        prefix_tokens: row.prefix_tokens.unwrap_or(0).min(u64::from(input_tokens)) as u32,
        output_tokens,
        ready,
        answered: answered.or(any),
        tool_use: !row.tools.is_empty(),
    })
}

/// One session's rounds (all of them, in any order) as the `ordinal`-th session of its file.
pub(super) fn session(mut rounds: Vec<Round>, ordinal: u64) -> Session {
    rounds.sort_by_key(|r| r.index);
    let mut links = Vec::with_capacity(rounds.len());
    let mut previous_answered: Option<f64> = None;
    for round in &rounds {
        links.push(Link {
            wait_s: match (previous_answered, round.ready) {
                (Some(end), Some(ready)) => ready - end,
                _ => 0.0,
            },
            input_tokens: round.input_tokens,
            shared: round.prefix_tokens,
            output_tokens: round.output_tokens,
            tool_use: round.tool_use,
        });
        previous_answered = round.answered.or(previous_answered);
    }
    let id = rounds.first().map(|r| r.session_id.clone());
    document::chain(id.unwrap_or_default(), ordinal, links)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// Three rounds shaped exactly as TraceLab's sanitized example
    /// (example_sessions/sanitized/round_trace.jsonl), their values our own.
    const ROUNDS: [&str; 3] = [
        r#"{"provider":"claude","project":"project_1a","session_id":"claude:7e1d","round_index":0,"round_id":"msg_01","model":"claude-opus-4-8","input_tokens_total":20000,"prefix_tokens":0,"newly_append_tokens":20000,"claude_uncached_input_tokens":2,"claude_cache_creation_input_tokens":19998,"claude_cache_read_input_tokens":0,"output_tokens":300,"reasoning_output_tokens":null,"timing_events":[{"event_type":"user_message","timestamp":"2026-06-01T05:40:20.000Z","source":"user.message","content_chars":146},{"event_type":"text","timestamp":"2026-06-01T05:40:25.000Z","source":"assistant.content.text","content_chars":116},{"event_type":"tool_call","timestamp":"2026-06-01T05:40:26.000Z","source":"assistant.content.tool_use","tool_call_id":"toolu_1","tool_name":"Bash","tool_index":0}],"tools":[{"tool_index":0,"tool_name":"Bash","tool_call_id":"toolu_1","emitted_at":"2026-06-01T05:40:26.000Z","input_chars":168,"result_chars":231,"tool_wall_latency_ms":2500,"tool_internal_latency_ms":null,"is_error":false,"result_at":"2026-06-01T05:40:28.500Z"}],"current_input_event_count":1,"current_user_message_count":1,"current_tool_result_count":0,"current_user_message_chars":146,"current_tool_result_chars":0,"current_input_chars":146,"first_input_event_type":"user_message","store":".claude","trace_key":"claude:claude:7e1d:msg_01"}"#,
        r#"{"provider":"claude","project":"project_1a","session_id":"claude:7e1d","round_index":1,"round_id":"msg_02","model":"claude-opus-4-8","input_tokens_total":20700,"prefix_tokens":20298,"newly_append_tokens":402,"claude_uncached_input_tokens":2,"claude_cache_creation_input_tokens":400,"claude_cache_read_input_tokens":20298,"output_tokens":120,"reasoning_output_tokens":null,"timing_events":[{"event_type":"tool_result","timestamp":"2026-06-01T05:40:28.500Z","source":"user.content.tool_result","tool_call_id":"toolu_1","result_chars":231,"is_error":false},{"event_type":"text","timestamp":"2026-06-01T05:40:31.000Z","source":"assistant.content.text","content_chars":98}],"tools":[],"current_input_event_count":1,"current_user_message_count":0,"current_tool_result_count":1,"current_user_message_chars":0,"current_tool_result_chars":231,"current_input_chars":231,"first_input_event_type":"tool_result","store":".claude","trace_key":"claude:claude:7e1d:msg_02"}"#,
        r#"{"provider":"claude","project":"project_1a","session_id":"claude:7e1d","round_index":2,"round_id":"msg_03","model":"claude-opus-4-8","input_tokens_total":21000,"prefix_tokens":20818,"newly_append_tokens":182,"output_tokens":80,"reasoning_output_tokens":null,"timing_events":[{"event_type":"user_message","timestamp":"2026-06-01T05:41:16.000Z","source":"user.message","content_chars":27},{"event_type":"text","timestamp":"2026-06-01T05:41:18.000Z","source":"assistant.content.text","content_chars":57}],"tools":[],"first_input_event_type":"user_message","store":".claude","trace_key":"claude:claude:7e1d:msg_03"}"#,
    ];

    #[test]
    fn rounds_become_a_chain_waiting_for_tools_and_the_user() {
        let rounds: Vec<Round> = ROUNDS
            .iter()
            .rev()
            .map(|r| round(r).ok().expect("read"))
            .collect();
        let session = session(rounds, 0);
        assert_eq!(session.id, "claude:7e1d");
        let calls = &session.calls;
        // In round order, whatever the lines' order.
        assert_eq!(
            calls.iter().map(|c| c.input_tokens).collect::<Vec<_>>(),
            [20000, 20700, 21000]
        );
        // The Bash tool: from the tool call (05:40:26) to its result (05:40:28.5).
        assert_eq!(calls[1].wait, Duration::from_millis(2500));
        // The user: from the answer's last text (05:40:31) to the next message (05:41:16).
        assert_eq!(calls[2].wait, Duration::from_secs(45));
        assert!(calls[0].tool_use && !calls[1].tool_use);
        assert_eq!(calls[2].after, vec![1]);
        // 20,298 tokens of prefix cover all of round 0's 313 blocks (its 20,000 tokens and
        // most of its answer, which the replay's next prompt carries as other bytes).
        let shared = calls[0]
            .hash_ids
            .iter()
            .zip(&calls[1].hash_ids)
            .take_while(|(a, b)| a == b);
        assert_eq!(shared.count(), 20000_usize.div_ceil(64));
    }

    #[test]
    fn a_mistake_names_its_field() {
        let bad = ROUNDS[1].replacen(
            "\"input_tokens_total\":20700",
            "\"input_tokens_total\":-3",
            1,
        );
        let Err(error) = round(&bad) else {
            panic!("refused")
        };
        assert_eq!(error.field.as_deref(), Some("input_tokens_total"));
        let bad = ROUNDS[1].replacen("2026-06-01T05:40:31.000Z", "later", 1);
        let Err(error) = round(&bad) else {
            panic!("refused")
        };
        assert_eq!(error.field.as_deref(), Some("timing_events[1].timestamp"));
    }
}
