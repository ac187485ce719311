//! Weka's agentic coding traces (KV-cache tester), as SemiAnalysis' InferenceX AgentX and
//! aiperf's `weka_trace` replay them: one session a JSON document, its `requests` interleaving
//! API calls (`type` `"n"` or streaming `"s"`) and `"subagent"` entries with calls of their own.
//!
//! Read: the session's `id` and `block_size`; each call's `t` (seconds from the session's
//! start), `in`, `out`, `hash_ids`, `stop` (`tool_use`: its next call is a tool turn),
//! `think_time` (the client's delay before it) and `api_time` (the server's time on it); each
//! sub-agent's `t`, `status` and `requests`. A call's wait is its `think_time` when recorded,
//! otherwise the gap its timestamps leave (`t` minus the previous call's `t` and `api_time`).
//! The main agent's calls form a chain; a sub-agent's first call comes after the parent's call
//! before it (its wait the gap from that call's end to the sub-agent's `t`), its calls a chain
//! of their own, and the parent's next call waits for its last answer (the join), unless the
//! sub-agent was `async_launched` (the parent went on without it).
//!
//! Not read (accepted and ignored): `models`, `hash_id_scope` (ids are the session's own:
//! `local`), `tool_tokens`, `system_tokens` (their blocks lead `hash_ids` already), `totals`,
//! each call's `model` (the plan's model is asked), `input_types`, `output_types`, `ttft`, and a
//! sub-agent's `agent_id`, `subagent_type`, `duration_ms`, `total_tokens`, `tool_use_count`,
//! `models`.

use std::time::Duration;

use serde::Deserialize;

use super::document::{self, field_error, DocumentError};
use super::{Call, Session};

pub(super) const HELP: &str = "a Weka trace is one JSON object a session: {\"id\": \"…\", \
     \"block_size\": 64, \"requests\": [{\"t\": 0.0, \"type\": \"n\", \"in\": 180, \"out\": 25, \
     \"hash_ids\": [1, 2], \"think_time\": 0.0, \"api_time\": 0.8}, {\"type\": \"subagent\", \"t\": 1.0, \
     \"status\": \"completed\", \"requests\": […]}]}";

#[derive(Deserialize)]
struct Trace {
    id: String,
    block_size: u32,
    requests: Vec<Entry>,
}

#[derive(Deserialize)]
#[serde(tag = "type")]
enum Entry {
    #[serde(rename = "n", alias = "s")]
    Call(Request),
    #[serde(rename = "subagent")]
    Subagent(Subagent),
}

#[derive(Deserialize)]
struct Request {
    t: f64,
    #[serde(rename = "in")]
    input: u64,
    out: u64,
    #[serde(default)]
    hash_ids: Vec<u64>,
    #[serde(default)]
    stop: String,
    think_time: Option<f64>,
    api_time: Option<f64>,
}

#[derive(Deserialize)]
struct Subagent {
    t: f64,
    #[serde(default)]
    status: String,
    requests: Vec<Entry>,
}

/// The session in `text` (one document), the `ordinal`-th of its file.
pub(super) fn session(text: &str, ordinal: u64) -> Result<Session, DocumentError> {
    let trace: Trace = document::parse(text)?;
    if trace.block_size == 0 {
        return Err(field_error(
            "block_size",
            "is 0: a block holds at least one token",
        ));
    }
    let mut builder = Builder::default();
    builder.agent(&trace.requests, "requests", 0, None)?;
    Ok(Session {
        id: trace.id,
        ordinal,
        block_tokens: trace.block_size,
        first: 0,
        calls: builder.calls,
    })
}

#[derive(Default)]
struct Builder {
    calls: Vec<Call>,
    agents: u32,
}

/// A call an agent's next call comes after, and when it ended on the recorded time line (its
/// `t` plus its `api_time`, or just its `t`).
#[derive(Clone, Copy)]
struct Previous {
    call: u32,
    ended: f64,
}

impl Builder {
    /// Adds the calls of one agent (`entries`, at `path`), its first call after `parent`;
    /// returns the agent's last call.
    fn agent(
        &mut self,
        entries: &[Entry],
        path: &str,
        agent: u32,
        parent: Option<Previous>,
    ) -> Result<Option<Previous>, DocumentError> {
        let mut previous = parent;
        let mut last = None;
        // Sub-agents the next call of this agent waits for.
        let mut joins: Vec<Previous> = Vec::new();
        for (index, entry) in entries.iter().enumerate() {
            let at = format!("{path}[{index}]");
            match entry {
                Entry::Call(request) => {
                    let first_of_subagent = last.is_none() && parent.is_some();
                    let call =
                        self.call(request, &at, agent, previous, &joins, first_of_subagent)?;
                    joins.clear();
                    previous = Some(Previous {
                        call,
                        ended: request.t + request.api_time.unwrap_or(0.0).max(0.0),
                    });
                    last = previous;
                }
                Entry::Subagent(sub) => {
                    check_time(sub.t, &format!("{at}.t"))?;
                    self.agents += 1;
                    let id = self.agents;
                    let path = format!("{at}.requests");
                    let its_last = self.agent(&sub.requests, &path, id, previous)?;
                    if sub.status != "async_launched" {
                        joins.extend(its_last);
                    }
                }
            }
        }
        Ok(last)
    }

    fn call(
        &mut self,
        request: &Request,
        at: &str,
        agent: u32,
        previous: Option<Previous>,
        joins: &[Previous],
        first_of_subagent: bool,
    ) -> Result<u32, DocumentError> {
        check_time(request.t, &format!("{at}.t"))?;
        for (name, value) in [
            ("think_time", request.think_time),
            ("api_time", request.api_time),
        ] {
            if let Some(value) = value {
                check_time(value, &format!("{at}.{name}"))?;
            }
        }
        let input_tokens = document::prompt_tokens(request.input, &format!("{at}.in"))?;
        let output_tokens = document::output_tokens(request.out, &format!("{at}.out"))?;
        // The recorded gap: from the end of the last answer it waits for (the session's start
        // for its first call).
        let waited_for = previous.iter().chain(joins);
        let since = waited_for.clone().map(|p| p.ended).fold(0.0, f64::max);
        let gap = request.t - since;
        // A sub-agent's first call counts from its parent's call: the spawn is part of the gap
        // (its `think_time` counts within the sub-agent only).
        let wait = match request.think_time {
            Some(think) if !first_of_subagent => think,
            _ => gap,
        };
        let mut after: Vec<u32> = waited_for.map(|p| p.call).collect();
        after.sort_unstable();
        after.dedup();
        self.calls.push(Call {
            after,
            wait: Duration::from_secs_f64(wait.max(0.0)),
            input_tokens,
            output_tokens,
            hash_ids: request.hash_ids.clone(),
            agent,
            tool_use: request.stop == "tool_use",
            text: None,
            continues: None,
        });
        Ok(self.calls.len() as u32 - 1)
    }
}

fn check_time(seconds: f64, field: &str) -> Result<(), DocumentError> {
    if seconds.is_finite() && (0.0..=1e9).contains(&seconds) {
        Ok(())
    } else {
        Err(field_error(
            field,
            &format!("{seconds} is not a time in seconds from 0"),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Shaped exactly as aiperf's own fixture of a Weka trace with a sub-agent
    /// (tests/unit/graph/fixtures/weka_subagent.json): a pretty-printed object.
    const WITH_SUBAGENT: &str = r#"{
  "id": "trace_sub_n2s1",
  "models": ["claude-opus-4-5-20251101"],
  "block_size": 64,
  "hash_id_scope": "local",
  "requests": [
    {"t": 0.0, "type": "n", "model": "claude-opus-4-5-20251101", "in": 180, "out": 25, "hash_ids": [1, 2], "input_types": ["text"], "output_types": ["text"], "stop": "tool_use", "api_time": 0.8, "think_time": 0.0},
    {
      "t": 1.0,
      "type": "subagent",
      "agent_id": "agent_001",
      "subagent_type": "Explore",
      "duration_ms": 4000,
      "total_tokens": 600,
      "tool_use_count": 1,
      "status": "completed",
      "models": ["claude-opus-4-5-20251101"],
      "tool_tokens": 0,
      "system_tokens": 0,
      "requests": [
        {"t": 1.2, "type": "n", "model": "claude-opus-4-5-20251101", "in": 200, "out": 30, "hash_ids": [10, 11], "input_types": ["text"], "output_types": ["text"], "stop": "end_turn", "api_time": 0.9, "think_time": 0.0},
        {"t": 2.4, "type": "n", "model": "claude-opus-4-5-20251101", "in": 260, "out": 40, "hash_ids": [10, 11, 12], "input_types": ["text"], "output_types": ["text"], "stop": "end_turn", "api_time": 1.1, "think_time": 0.2}
      ]
    },
    {"t": 6.0, "type": "n", "model": "claude-opus-4-5-20251101", "in": 280, "out": 45, "hash_ids": [1, 2, 3, 4], "input_types": ["text"], "output_types": ["text"], "stop": "end_turn", "api_time": 1.3, "think_time": 0.5}
  ]
}"#;

    fn ms(call: &Call) -> u128 {
        call.wait.as_millis()
    }

    #[test]
    fn a_subagent_forks_from_its_parent_and_the_parent_joins_it() {
        let Ok(session) = session(WITH_SUBAGENT, 3) else {
            panic!("the fixture reads");
        };
        assert_eq!(
            (session.id.as_str(), session.ordinal, session.block_tokens),
            ("trace_sub_n2s1", 3, 64)
        );
        let calls = &session.calls;
        assert_eq!(calls.len(), 4);
        assert_eq!(
            (calls[0].after.clone(), ms(&calls[0]), calls[0].agent),
            (vec![], 0, 0)
        );
        assert!(calls[0].tool_use);
        // The sub-agent's first call: after its parent's call, spawned at 1.0 after the parent's
        // answer ended at 0.8, sent at 1.2: it waited 0.4 s on the recorded time line.
        assert_eq!(
            (calls[1].after.clone(), ms(&calls[1]), calls[1].agent),
            (vec![0], 400, 1)
        );
        // Its next call: its recorded think time.
        assert_eq!(
            (calls[2].after.clone(), ms(&calls[2]), calls[2].agent),
            (vec![1], 200, 1)
        );
        // The parent's next call joins the sub-agent, then thinks 0.5 s.
        assert_eq!(
            (calls[3].after.clone(), ms(&calls[3]), calls[3].agent),
            (vec![0, 2], 500, 0)
        );
        assert_eq!(calls[3].hash_ids, vec![1, 2, 3, 4]);
        assert_eq!((calls[3].input_tokens, calls[3].output_tokens), (280, 45));
    }

    #[test]
    fn an_async_subagent_is_not_waited_for() {
        let text = WITH_SUBAGENT.replace("\"completed\"", "\"async_launched\"");
        let Ok(session) = session(&text, 0) else {
            panic!("reads");
        };
        assert_eq!(session.calls[3].after, vec![0]);
    }

    #[test]
    fn without_think_time_the_timestamps_give_the_wait() {
        let text = r#"{"id": "a", "block_size": 16, "requests": [
            {"t": 0.0, "type": "n", "in": 10, "out": 2, "api_time": 1.5},
            {"t": 4.0, "type": "n", "in": 20, "out": 2}]}"#;
        let Ok(session) = session(text, 0) else {
            panic!("reads");
        };
        assert_eq!(ms(&session.calls[1]), 2500);
    }

    #[test]
    fn each_mistake_names_its_line_and_field() {
        let cases: &[(&str, usize, &str, &str)] = &[
            // A missing length.
            (
                "{\"id\": \"a\", \"block_size\": 16, \"requests\": [{\"t\": 0, \"type\": \"n\", \"out\": 2}]}",
                1,
                "requests[0]",
                "missing field `in`",
            ),
            // A length of the wrong type.
            (
                "{\"id\": \"a\", \"block_size\": 16,\n\"requests\": [{\"t\": 0, \"type\": \"n\", \"in\": \"many\", \"out\": 2}]}",
                2,
                "requests[0]",
                "invalid type",
            ),
            // An unknown kind of entry.
            (
                "{\"id\": \"a\", \"block_size\": 16, \"requests\": [{\"t\": 0, \"type\": \"x\"}]}",
                1,
                "requests[0]",
                "unknown variant `x`",
            ),
            // No session id.
            ("{\"block_size\": 16, \"requests\": []}", 1, "", "missing field `id`"),
            // A mistake outside the calls, in a pretty-printed file: its own line.
            ("{\n\"id\": \"a\",\n\"block_size\": \"big\",\n\"requests\": []}", 3, "block_size", "invalid type"),
            // A block of no tokens.
            ("{\"id\": \"a\", \"block_size\": 0, \"requests\": []}", 1, "block_size", "is 0"),
            // A negative time.
            (
                "{\"id\": \"a\", \"block_size\": 16, \"requests\": [{\"t\": -1, \"type\": \"n\", \"in\": 5, \"out\": 2}]}",
                1,
                "requests[0].t",
                "not a time",
            ),
            // A prompt of no tokens, inside a sub-agent.
            (
                "{\"id\": \"a\", \"block_size\": 16, \"requests\": [{\"t\": 0, \"type\": \"subagent\", \"requests\": [{\"t\": 0, \"type\": \"n\", \"in\": 0, \"out\": 2}]}]}",
                1,
                "requests[0].requests[0].in",
                "out of range",
            ),
        ];
        for (text, line, field, message) in cases {
            let Err(error) = session(text, 0) else {
                panic!("{text} should be refused");
            };
            assert_eq!(error.line, *line, "{text}");
            assert!(
                error.field.as_deref().unwrap_or("").starts_with(field),
                "{text}: {:?}",
                error.field
            );
            assert!(error.message.contains(message), "{text}: {}", error.message);
        }
    }
}
