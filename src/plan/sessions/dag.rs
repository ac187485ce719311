//! aiperf's DAG files (`dag_jsonl`): a conversation a line, each with its `turns` of written
//! messages; a turn may fork conversations that go on from its whole context (FORK) or spawn
//! conversations that start fresh (SPAWN), joined again at a later turn. A tree of
//! conversations from a root (a conversation no other names) is one session.
//!
//! Read: each conversation's `session_id`, `turns` and `pre_session_spawns` (conversations
//! started with it, never joined); each turn's `messages` (their `role` and text `content`),
//! `max_tokens` (256 when absent), `delay` (ms before it is sent, after what it waits for),
//! `forks` (a name, or `{"child", "background"}`) and `spawns` (a name, joined at the next turn,
//! or `{"children", "join_at"}`). A turn goes on from the turn before it: its context is that
//! turn's messages, the server's answer, then its own messages (aiperf's default context,
//! `deltas_without_responses`); a forked conversation's first turn goes on from the forking
//! turn, a spawned one's from nothing.
//!
//! Not read (accepted and ignored): a turn's `model` (the plan's model is asked), `tools`,
//! `extra` (sampling parameters: the plan's are sent). Refused, with a diagnostic:
//! `orchestrator` conversations and their `rounds`, a `context_mode` other than the default,
//! message content other than text.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use serde::Deserialize;

use super::document::{self, DocumentError};
use super::{Call, Session};

pub(super) const HELP: &str = "an aiperf DAG file is one conversation a line: {\"session_id\": \
     \"root\", \"turns\": [{\"messages\": [{\"role\": \"user\", \"content\": \"…\"}], \
     \"max_tokens\": 128, \"spawns\": [\"helper\"]}]}; each name a fork or spawn gives is a \
     conversation of its own line";

/// Output tokens a turn asks for when it names none.
const DEFAULT_MAX_TOKENS: u64 = 256;

#[derive(Deserialize)]
struct Conversation {
    session_id: String,
    #[serde(default)]
    turns: Vec<Turn>,
    #[serde(default)]
    pre_session_spawns: Vec<String>,
    #[serde(default)]
    orchestrator: bool,
    #[serde(default)]
    context_mode: Option<String>,
}

#[derive(Deserialize)]
struct Turn {
    messages: Vec<Written>,
    #[serde(default)]
    max_tokens: Option<u64>,
    #[serde(default)]
    delay: Option<f64>,
    #[serde(default)]
    forks: Vec<Fork>,
    #[serde(default)]
    spawns: Vec<Spawn>,
}

#[derive(Deserialize)]
struct Written {
    role: String,
    #[serde(default)]
    content: serde_json::Value,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Fork {
    Name(String),
    Child {
        child: String,
        #[serde(default)]
        background: bool,
    },
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Spawn {
    Name(String),
    Children {
        children: Vec<String>,
        join_at: Option<usize>,
    },
}

/// A mistake on one line of the file.
pub(super) type LineError = (usize, DocumentError);

/// Every conversation of the file, by name, with its line.
#[derive(Default)]
pub(super) struct Conversations {
    by_name: HashMap<String, (Conversation, usize)>,
    order: Vec<String>,
}

impl Conversations {
    /// Adds the conversation on `line`.
    pub(super) fn add(&mut self, text: &str, line: usize) -> Result<(), LineError> {
        let conversation: Conversation = document::parse(text).map_err(|e| (line, e))?;
        let refuse = |field: &str, message: &str| (line, document::field_error(field, message));
        if conversation.orchestrator {
            return Err(refuse(
                "orchestrator",
                "orchestrator conversations (request-less spines of rounds) are not replayed: write the rounds' branches as spawns of a conversation's turns",
            ));
        }
        if let Some(mode) = conversation
            .context_mode
            .as_deref()
            .filter(|m| *m != "deltas_without_responses")
        {
            return Err(refuse(
                "context_mode",
                &format!("`{mode}` is not replayed: each turn goes on from the turn before and its answer (deltas_without_responses)"),
            ));
        }
        let name = conversation.session_id.clone();
        if self.by_name.contains_key(&name) {
            return Err(refuse("session_id", &format!("`{name}` is named twice")));
        }
        self.order.push(name.clone());
        self.by_name.insert(name, (conversation, line));
        Ok(())
    }

    /// The sessions: a tree of conversations from each root, in the file's order.
    pub(super) fn sessions(self) -> Result<Vec<Session>, LineError> {
        let targets = self.targets()?;
        let mut sessions = Vec::new();
        let mut reached = HashSet::new();
        for root in self.order.iter().filter(|name| !targets.contains(*name)) {
            let mut builder = Builder {
                all: &self.by_name,
                calls: Vec::new(),
                agents: 0,
                reached: &mut reached,
            };
            builder.conversation(root, None, false)?;
            sessions.push(Session {
                id: root.clone(),
                ordinal: sessions.len() as u64,
                block_tokens: document::PREFIX_BLOCK_TOKENS,
                first: 0,
                calls: builder.calls,
            });
        }
        if let Some(lost) = self.order.iter().find(|name| !reached.contains(*name)) {
            let line = self.by_name[lost].1;
            let message = format!(
                "`{lost}` is in no tree of a root conversation (they name each other in a cycle)"
            );
            return Err((line, document::field_error("session_id", &message)));
        }
        Ok(sessions)
    }

    /// The conversations some turn forks or spawns: each named once, each in the file.
    fn targets(&self) -> Result<HashSet<String>, LineError> {
        let mut targets = HashSet::new();
        for name in &self.order {
            let (conversation, line) = &self.by_name[name];
            for (field, child) in children(conversation) {
                if !self.by_name.contains_key(&child) {
                    let message = format!("`{child}` is no conversation of this file");
                    return Err((*line, document::field_error(&field, &message)));
                }
                if !targets.insert(child.clone()) {
                    let message = format!(
                        "`{child}` is forked or spawned twice: a conversation has one parent"
                    );
                    return Err((*line, document::field_error(&field, &message)));
                }
            }
        }
        Ok(targets)
    }
}

/// Every conversation `conversation` names, with the field that names it.
fn children(conversation: &Conversation) -> Vec<(String, String)> {
    let mut named: Vec<(String, String)> = conversation
        .pre_session_spawns
        .iter()
        .enumerate()
        .map(|(i, c)| (format!("pre_session_spawns[{i}]"), c.clone()))
        .collect();
    for (t, turn) in conversation.turns.iter().enumerate() {
        for (i, fork) in turn.forks.iter().enumerate() {
            let (Fork::Name(child) | Fork::Child { child, .. }) = fork;
            named.push((format!("turns[{t}].forks[{i}]"), child.clone()));
        }
        for (i, spawn) in turn.spawns.iter().enumerate() {
            match spawn {
                Spawn::Name(child) => {
                    named.push((format!("turns[{t}].spawns[{i}]"), child.clone()))
                }
                Spawn::Children { children, .. } => named.extend(
                    children
                        .iter()
                        .map(|c| (format!("turns[{t}].spawns[{i}].children"), c.clone())),
                ),
            }
        }
    }
    named
}

/// Where a turn is: its conversation's line, its position and the last one's, its call.
#[derive(Clone, Copy)]
struct Place {
    line: usize,
    t: usize,
    last_turn: usize,
    call: u32,
}

struct Builder<'a> {
    all: &'a HashMap<String, (Conversation, usize)>,
    calls: Vec<Call>,
    agents: u32,
    reached: &'a mut HashSet<String>,
}

impl Builder<'_> {
    /// Adds conversation `name`'s turns, its first after `parent` (going on from it when
    /// `forked`); returns its last call.
    fn conversation(
        &mut self,
        name: &str,
        parent: Option<u32>,
        forked: bool,
    ) -> Result<Option<u32>, LineError> {
        self.reached.insert(name.to_string());
        let (conversation, line) = &self.all[name];
        let line = *line;
        let agent = self.agents;
        self.agents += 1;
        // Started with the conversation (after what its first turn waits for), never joined.
        for child in &conversation.pre_session_spawns {
            self.conversation(child, parent, false)?;
        }
        let mut previous = parent;
        // Children's last calls each later turn waits for, by the turn.
        let mut joins: HashMap<usize, Vec<u32>> = HashMap::new();
        let last_turn = conversation.turns.len().saturating_sub(1);
        for (t, turn) in conversation.turns.iter().enumerate() {
            let at = format!("turns[{t}]");
            let mut after: Vec<u32> = previous.into_iter().collect();
            after.extend(joins.remove(&t).unwrap_or_default());
            after.sort_unstable();
            after.dedup();
            let call = self
                .turn(
                    turn,
                    &at,
                    after,
                    agent,
                    previous.filter(|_| t > 0 || forked),
                )
                .map_err(|e| (line, e))?;
            let place = Place {
                line,
                t,
                last_turn,
                call,
            };
            self.spawns(turn, place, &mut joins)?;
            self.forks(turn, place)?;
            previous = Some(call);
        }
        Ok(previous.filter(|_| !conversation.turns.is_empty()))
    }

    /// The conversations turn `t` spawns after its call, each to be joined (its last call added
    /// to `joins`) at the turn it says, the next one for a name; spawned on the last turn without
    /// saying, nothing joins it.
    fn spawns(
        &mut self,
        turn: &Turn,
        place: Place,
        joins: &mut HashMap<usize, Vec<u32>>,
    ) -> Result<(), LineError> {
        let Place {
            line,
            t,
            last_turn,
            call,
        } = place;
        for (i, spawn) in turn.spawns.iter().enumerate() {
            let (names, join_at, said) = match spawn {
                Spawn::Name(child) => (std::slice::from_ref(child), t + 1, false),
                Spawn::Children { children, join_at } => (
                    children.as_slice(),
                    join_at.unwrap_or(t + 1),
                    join_at.is_some(),
                ),
            };
            if said && !(t + 1..=last_turn).contains(&join_at) {
                let field = format!("turns[{t}].spawns[{i}].join_at");
                let message = format!(
                    "join_at {join_at} is not a later turn of this conversation (its turns are 0 to {last_turn})"
                );
                return Err((line, document::field_error(&field, &message)));
            }
            for child in names {
                let last = self.conversation(child, Some(call), false)?;
                joins.entry(join_at).or_default().extend(last);
            }
        }
        Ok(())
    }

    /// The conversations turn `t` forks after its call, each going on from it.
    fn forks(&mut self, turn: &Turn, place: Place) -> Result<(), LineError> {
        let Place {
            line,
            t,
            last_turn,
            call,
        } = place;
        for (i, fork) in turn.forks.iter().enumerate() {
            let (child, background) = match fork {
                Fork::Name(child) => (child, false),
                Fork::Child { child, background } => (child, *background),
            };
            if !background && t != last_turn {
                let message = "a fork that is not in the background ends its conversation: it belongs on the last turn (or write {\"child\": …, \"background\": true})";
                let field = format!("turns[{t}].forks[{i}]");
                return Err((line, document::field_error(&field, message)));
            }
            self.conversation(child, Some(call), true)?;
        }
        Ok(())
    }

    /// One turn as a call after `after`, going on from `continues`.
    fn turn(
        &mut self,
        turn: &Turn,
        at: &str,
        after: Vec<u32>,
        agent: u32,
        continues: Option<u32>,
    ) -> Result<u32, DocumentError> {
        if turn.messages.is_empty() {
            return Err(document::field_error(
                &format!("{at}.messages"),
                "a turn writes at least one message",
            ));
        }
        let mut written = Vec::with_capacity(turn.messages.len());
        for (i, message) in turn.messages.iter().enumerate() {
            let text = match &message.content {
                serde_json::Value::String(text) => text.clone(),
                serde_json::Value::Null => String::new(),
                _ => {
                    let field = format!("{at}.messages[{i}].content");
                    return Err(document::field_error(
                        &field,
                        "only text content is replayed (not parts, images or audio)",
                    ));
                }
            };
            written.push((message.role.clone(), text));
        }
        let delay = turn.delay.unwrap_or(0.0);
        if !delay.is_finite() || !(0.0..=1e12).contains(&delay) {
            let message = format!("{delay} is not a delay in milliseconds");
            return Err(document::field_error(&format!("{at}.delay"), &message));
        }
        let max_tokens = turn.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS);
        let output_tokens = document::output_tokens(max_tokens, &format!("{at}.max_tokens"))?;
        // An estimate until the call is sent and its prompt counted with the plan's tokenizer.
        let chars: usize = written.iter().map(|(_, text)| text.len()).sum();
        self.calls.push(Call {
            after,
            wait: Duration::from_secs_f64(delay / 1e3),
            input_tokens: (chars / 4).clamp(1, u32::MAX as usize) as u32,
            output_tokens,
            hash_ids: Vec::new(),
            agent,
            tool_use: false,
            text: Some(written),
            continues,
        });
        Ok(self.calls.len() as u32 - 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sessions(lines: &[&str]) -> Result<Vec<Session>, LineError> {
        let mut conversations = Conversations::default();
        for (i, line) in lines.iter().enumerate() {
            conversations.add(line, i + 1)?;
        }
        conversations.sessions()
    }

    fn field(lines: &[&str]) -> (usize, Option<String>) {
        match sessions(lines) {
            Ok(_) => panic!("refused"),
            Err((line, e)) => (line, e.field),
        }
    }

    /// aiperf's own minimal FORK example (its DAG guide; tests/fixtures/dag/small.dag.jsonl).
    const FORKS: [&str; 3] = [
        r#"{"session_id":"root","turns":[{"model":"Qwen3-0.6B","messages":[{"role":"system","content":"You are a careful assistant."},{"role":"user","content":"Please summarize the attached document."}],"max_tokens":128,"forks":["branch-a","branch-b"]}]}"#,
        r#"{"session_id":"branch-a","turns":[{"model":"Qwen3-0.6B","messages":[{"role":"user","content":"Expand on the first section in more detail."},{"role":"user","content":"Add a brief counter-argument."}],"max_tokens":96},{"model":"Qwen3-0.6B","messages":[{"role":"user","content":"Now tighten the expansion."},{"role":"user","content":"Keep the counter-argument intact."}],"max_tokens":64}]}"#,
        r#"{"session_id":"branch-b","turns":[{"model":"Qwen3-0.6B","messages":[{"role":"user","content":"Point out weaknesses in the summary."}],"max_tokens":128},{"model":"Qwen3-0.6B","messages":[{"role":"user","content":"Fold the critique into a revised summary."}],"max_tokens":96}]}"#,
    ];

    #[test]
    fn forks_go_on_from_the_forking_turn() {
        let all = sessions(&FORKS).ok().expect("read");
        assert_eq!(all.len(), 1, "one root, one session");
        let calls = &all[0].calls;
        let edges: Vec<(Vec<u32>, Option<u32>, u32)> = calls
            .iter()
            .map(|c| (c.after.clone(), c.continues, c.agent))
            .collect();
        assert_eq!(
            edges,
            [
                (vec![], None, 0),
                (vec![0], Some(0), 1),
                (vec![1], Some(1), 1),
                (vec![0], Some(0), 2),
                (vec![3], Some(3), 2),
            ]
        );
        assert_eq!(calls[0].text.as_ref().map(Vec::len), Some(2));
        assert_eq!((calls[0].output_tokens, calls[2].output_tokens), (128, 64));
    }

    #[test]
    fn spawns_start_fresh_and_join_where_they_say() {
        let lines = [
            r#"{"session_id":"lead","turns":[{"messages":[{"role":"user","content":"plan"}],"spawns":[{"children":["scout"],"join_at":2}]},{"messages":[{"role":"user","content":"meanwhile"}],"delay":250},{"messages":[{"role":"user","content":"merge"}]}]}"#,
            r#"{"session_id":"scout","turns":[{"messages":[{"role":"user","content":"look"}]},{"messages":[{"role":"user","content":"report"}]}]}"#,
        ];
        let all = sessions(&lines).ok().expect("read");
        let calls = &all[0].calls;
        // lead 0, scout 1 and 2, lead 3 (not waiting for the scout), lead 4 (the join).
        assert_eq!(calls[1].after, vec![0]);
        assert_eq!(calls[1].continues, None, "a spawn starts fresh");
        assert_eq!(calls[3].after, vec![0]);
        assert_eq!(calls[3].wait, Duration::from_millis(250));
        assert_eq!(calls[4].after, vec![2, 3]);
        assert_eq!(calls[4].continues, Some(3));
    }

    #[test]
    fn each_mistake_names_its_line_and_field() {
        let turn = r#"{"messages":[{"role":"user","content":"x"}]}"#;
        let unknown = r#"{"session_id":"a","turns":[{"messages":[{"role":"user","content":"x"}],"spawns":["ghost"]}]}"#.to_string();
        assert_eq!(field(&[&unknown]), (1, Some("turns[0].spawns[0]".into())));
        let early_fork = format!(
            r#"{{"session_id":"a","turns":[{{"messages":[{{"role":"user","content":"x"}}],"forks":["b"]}},{turn}]}}"#
        );
        let b = format!(r#"{{"session_id":"b","turns":[{turn}]}}"#);
        assert_eq!(
            field(&[&early_fork, &b]),
            (1, Some("turns[0].forks[0]".into()))
        );
        let spine = r#"{"session_id":"start","orchestrator":true,"spawns":["a"]}"#;
        assert_eq!(field(&[spine]), (1, Some("orchestrator".into())));
        let image = r#"{"session_id":"a","turns":[{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]}]}"#;
        assert_eq!(
            field(&[image]),
            (1, Some("turns[0].messages[0].content".into()))
        );
        let cycle = [
            format!(r#"{{"session_id":"r","turns":[{turn}]}}"#),
            r#"{"session_id":"x","turns":[{"messages":[{"role":"user","content":"x"}],"spawns":["y"]}]}"#.to_string(),
            r#"{"session_id":"y","turns":[{"messages":[{"role":"user","content":"x"}],"spawns":["x"]}]}"#.to_string(),
        ];
        let cycle: Vec<&str> = cycle.iter().map(String::as_str).collect();
        assert_eq!(field(&cycle).0, 2);
        let join = r#"{"session_id":"a","turns":[{"messages":[{"role":"user","content":"x"}],"spawns":[{"children":["b"],"join_at":5}]}]}"#;
        assert_eq!(
            field(&[join, &b]),
            (1, Some("turns[0].spawns[0].join_at".into()))
        );
        let mode = r#"{"session_id":"a","context_mode":"message_array_with_responses","turns":[]}"#;
        assert_eq!(field(&[mode]), (1, Some("context_mode".into())));
        assert_eq!(field(&[&b, &b]), (2, Some("session_id".into())));
        let silent = r#"{"session_id":"a","turns":[{"messages":[]}]}"#;
        assert_eq!(field(&[silent]), (1, Some("turns[0].messages".into())));
        let late = r#"{"session_id":"a","turns":[{"messages":[{"role":"user","content":"x"}],"delay":-5}]}"#;
        assert_eq!(field(&[late]), (1, Some("turns[0].delay".into())));
    }
}
