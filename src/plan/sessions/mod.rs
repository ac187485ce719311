//! Agent sessions a `sessions` phase replays: one model for every agent-trace format.
//!
//! A [`Session`] is a DAG of calls. Each [`Call`] waits for the answers of the calls it comes
//! `after` (none for the session's first), then for its `wait` (a tool's run, the user's or the
//! agent's think time), then is sent; its prompt is its shared context blocks (`hash_ids`, each
//! `block_tokens` long) followed by new tokens up to its input length, and it asks for its
//! recorded output length. Sub-agents are calls of another `agent` whose first call comes after
//! the parent's, and a join is a call `after` several. Each importer (one file per format:
//! [`weka`], [`otel`], [`copilot`], [`tracelab`], [`dag`]) turns its format into this model; the reader
//! tells them apart by the file's start.
//!
//! A session file is never held whole: [`SessionReader`] streams it one session at a time (a
//! line of a JSONL file, or a whole JSON file), both when the plan is checked (every mistake, its
//! file, line and field) and while the phase runs (as many sessions ahead as run at once). The
//! exception is OpenTelemetry's spans, whose traces may be spread over the file: it is read
//! whole and its sessions built first.
//!
//! What this is not: running a session (the executor's `phase::sessions`), its prompts' text
//! (`planner::prompts::block_text`), or judging sessions (the metric table).

mod copilot;
mod dag;
mod document;
pub(crate) mod otel;
mod tracelab;
pub(crate) mod weka;

use std::io::{BufRead, Read};
use std::path::{Path, PathBuf};
use std::time::Duration;

use sha2::Digest;

/// A `sessions` phase's load: a file of agent sessions, replayed so many at once.
#[derive(Debug, Clone, PartialEq)]
pub struct Sessions {
    /// The path as the plan wrote it.
    pub shown: String,
    /// The file, resolved from the plan's directory.
    pub path: PathBuf,
    /// Sessions running at once: each slot starts the file's next session when its last ends.
    pub concurrent: u32,
    /// Sessions started per second instead (Poisson arrivals, seeded), however many run.
    pub rate: Option<f64>,
    /// The most calls in flight at once across the phase's sessions and their sub-agents: a
    /// call whose time has come waits for room (its delay is its schedule lag).
    pub max_in_flight: Option<u32>,
    /// Every recorded wait (tool runs, think times) multiplied by this.
    pub wait_scale: f64,
    /// No wait longer than this (an agent idle for an hour is not load).
    pub idle_cap: Option<Duration>,
    /// Each session starts at a point drawn within this share of its calls (`0.25..0.75`: a
    /// quarter to three quarters in), so that a run begins in steady state; `None`: at its start.
    pub start_window: Option<(f64, f64)>,
    /// The server's answers go into the context of the agent's next call (live substitution),
    /// instead of the recorded output's blocks.
    pub live: bool,
    /// What the file held when the plan was checked (zero when read without its files).
    pub summary: SessionsSummary,
}

impl Sessions {
    /// The most requests one session may have in flight at once (its agents, each a chain).
    pub fn widest(&self) -> u32 {
        self.summary.most_agents.max(1)
    }

    /// Describes the load: `sessions agents.jsonl ×8`, or `sessions agents.jsonl 2/s`.
    pub fn describe(&self) -> String {
        let mut text = match self.rate {
            Some(rate) => format!(
                "sessions {} {}/s",
                self.shown,
                super::units::format_load(rate)
            ),
            None => format!("sessions {} ×{}", self.shown, self.concurrent),
        };
        if let Some(most) = self.max_in_flight {
            text.push_str(&format!(" ≤{most} in flight"));
        }
        if self.wait_scale != 1.0 {
            text.push_str(&format!(
                " waits ×{}",
                super::units::format_load(self.wait_scale)
            ));
        }
        if let Some((from, to)) = self.start_window {
            text.push_str(&format!(" from {:.0}–{:.0}%", from * 100.0, to * 100.0));
        }
        if self.live {
            text.push_str(" live");
        }
        text
    }

    /// A recorded wait as this replay waits it: scaled, then capped.
    pub fn wait(&self, recorded: Duration) -> Duration {
        let scaled = recorded.mul_f64(self.wait_scale);
        self.idle_cap.map_or(scaled, |cap| scaled.min(cap))
    }
}

/// What a session file holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SessionsSummary {
    /// Its format.
    pub format: Option<SessionFormat>,
    /// Sessions in it.
    pub sessions: u64,
    /// Calls in all.
    pub calls: u64,
    /// Sub-agents in all.
    pub subagents: u64,
    /// The most calls of one session.
    pub most_calls: u64,
    /// The most agents (the main one and its sub-agents) of one session.
    pub most_agents: u32,
    /// The file's SHA-256, kept in the run's header.
    pub sha256: String,
}

/// The formats a session file comes in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionFormat {
    /// Weka's (and SemiAnalysis') agentic coding traces: `requests` with nested `subagent`s.
    Weka,
    /// OpenTelemetry GenAI spans (OTLP/JSON trace exports): a trace a session.
    Otel,
    /// GitHub Copilot coding-agent sessions (Azure Public Dataset 2026): `turns` of `llm_calls`.
    Copilot,
    /// TraceLab's Claude Code and Codex rounds: a round a line, grouped by `session_id`.
    TraceLab,
    /// aiperf's DAG files: a conversation a line, turns of written messages, forks and spawns.
    Dag,
}

impl SessionFormat {
    /// Its name, as `llmload plan` says it.
    pub fn name(self) -> &'static str {
        match self {
            SessionFormat::Weka => "Weka agentic trace",
            SessionFormat::Otel => "OpenTelemetry GenAI spans",
            SessionFormat::Copilot => "GitHub Copilot coding-agent sessions",
            SessionFormat::TraceLab => "TraceLab agentic coding rounds",
            SessionFormat::Dag => "aiperf DAG conversations",
        }
    }

    /// The format a file's first 64 KiB show: a key each format has and the others do not.
    fn of_head(head: &str) -> SessionFormat {
        [
            ("\"resourceSpans\"", SessionFormat::Otel),
            ("\"llm_calls\"", SessionFormat::Copilot),
            ("\"input_tokens_total\"", SessionFormat::TraceLab),
            ("\"messages\"", SessionFormat::Dag),
        ]
        .into_iter()
        .find(|(key, _)| head.contains(key))
        .map_or(SessionFormat::Weka, |(_, format)| format)
    }

    /// What to do about a mistake in a file of this format.
    fn help(self) -> &'static str {
        match self {
            SessionFormat::Weka => weka::HELP,
            SessionFormat::Otel => otel::HELP,
            SessionFormat::Copilot => copilot::HELP,
            SessionFormat::TraceLab => tracelab::HELP,
            SessionFormat::Dag => dag::HELP,
        }
    }
}

/// One agent session: its calls, in the order they were recorded.
#[derive(Debug, Clone, PartialEq)]
pub struct Session {
    /// Its id in the file.
    pub id: String,
    /// Its position in the file, from 0.
    pub ordinal: u64,
    /// Tokens per `hash_ids` block.
    pub block_tokens: u32,
    /// The recorded position of its first call (calls before a start window's point are left
    /// out): call `i` here is the session's call `first + i`.
    pub first: u32,
    /// Its calls; a call comes only after calls before it in this list.
    pub calls: Vec<Call>,
}

/// One call of a session.
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    /// The calls (positions in the session) whose answers it waits for.
    pub after: Vec<u32>,
    /// What it waits after the last of those answers (after the session's start, without any).
    pub wait: Duration,
    /// Prompt tokens.
    pub input_tokens: u32,
    /// Output tokens asked for.
    pub output_tokens: u32,
    /// The prompt's blocks: calls naming one block share its text.
    pub hash_ids: Vec<u64>,
    /// Its agent: 0 for the session's own, then one per sub-agent.
    pub agent: u32,
    /// The recorded answer stopped to call tools (its next call is a tool turn).
    pub tool_use: bool,
    /// The messages the trace wrote for it (role, text), appended to the context it goes on
    /// from, instead of text made to its length (aiperf's DAG files).
    pub text: Option<Vec<(String, String)>>,
    /// The call whose context (its messages and the server's answer) it goes on from, when that
    /// is not its own agent's previous call (a fork's first call goes on from its parent's).
    pub continues: Option<u32>,
}

/// The most calls one session may make (a session's calls are numbered within it).
pub const MAX_SESSION_CALLS: usize = 1 << 20;

impl Session {
    /// Checks the DAG the importer built: every `after` names an earlier call.
    fn check(&self) -> Result<(), String> {
        if self.calls.len() > MAX_SESSION_CALLS {
            return Err(format!(
                "session {} makes {} calls, more than the {MAX_SESSION_CALLS} a session may",
                self.id,
                self.calls.len()
            ));
        }
        for (index, call) in self.calls.iter().enumerate() {
            if let Some(bad) = call.after.iter().find(|&&a| a as usize >= index) {
                return Err(format!(
                    "call {index} comes after call {bad}, not before it"
                ));
            }
        }
        Ok(())
    }

    /// The call `index` goes on from: its own agent's call it comes after (the one whose answer
    /// its context holds), if any. A sub-agent's first call has none: it starts fresh.
    pub fn own_parent(&self, index: usize) -> Option<usize> {
        let call = self.calls.get(index)?;
        if let Some(continues) = call.continues {
            return Some(continues as usize);
        }
        call.after
            .iter()
            .map(|&a| a as usize)
            .find(|&a| self.calls.get(a).is_some_and(|p| p.agent == call.agent))
    }

    /// The session from `first` of its calls on (a start window): calls before it are left out,
    /// a dependency on one of them is met, and the first calls left wait nothing.
    pub fn starting_at(mut self, first: usize) -> Session {
        let first = first.min(self.calls.len());
        if first == 0 {
            return self;
        }
        let calls = self.calls.split_off(first);
        self.first += first as u32;
        self.calls = calls
            .into_iter()
            .map(|mut call| {
                call.after = call
                    .after
                    .iter()
                    .filter(|&&a| a as usize >= first)
                    .map(|&a| a - first as u32)
                    .collect();
                if call.after.is_empty() {
                    call.wait = Duration::ZERO;
                }
                call
            })
            .collect();
        self
    }
}

/// A mistake in a session file: where (file, line, field) and what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionError {
    /// The file.
    pub file: String,
    /// The line, from 1.
    pub line: usize,
    /// The field (`requests[2].in`), when the mistake is in one.
    pub field: Option<String>,
    /// What is wrong.
    pub message: String,
    /// What to do about it.
    pub help: String,
}

impl std::fmt::Display for SessionError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.file, self.line)?;
        if let Some(field) = &self.field {
            write!(f, ": {field}")?;
        }
        write!(f, ": {}", self.message)
    }
}

/// How much of a file's start tells its format.
const HEAD_BYTES: u64 = 64 << 10;

/// Whether a file starting with `head` is one JSON document over many lines (pretty-printed)
/// rather than a document a line: its first line is not a whole document. A first line longer
/// than the head is a line of JSONL (a pretty-printed document's first line is its brace).
fn one_document(head: &str) -> bool {
    head.split_once('\n').is_some_and(|(first, _)| {
        let first = first.trim();
        !first.is_empty() && serde_json::from_str::<serde::de::IgnoredAny>(first).is_err()
    })
}

/// The longest line (one session) a session file may hold.
const MAX_SESSION_BYTES: usize = 256 << 20;

/// Streams a session file's sessions, one at a time: a JSONL file a line each, or a file that
/// is one JSON document (a session over many lines, as Weka's files are).
pub struct SessionReader {
    shown: String,
    input: std::io::BufReader<std::fs::File>,
    /// The whole file is one document (read once).
    whole: bool,
    line: usize,
    ordinal: u64,
    done: bool,
    hasher: sha2::Sha256,
    /// The file's format, told by its start.
    format: SessionFormat,
    /// Sessions built from the whole file (a format whose sessions may be spread over it).
    built: Option<std::vec::IntoIter<Session>>,
    /// A format of a session over lines: the next session's first line, read already.
    pending: Option<(tracelab::Round, usize)>,
    /// The sessions read so far (a session's lines must be together).
    seen: std::collections::HashSet<String>,
}

impl SessionReader {
    /// Opens `path`, named `shown` in errors.
    pub fn open(path: &Path, shown: &str) -> std::io::Result<SessionReader> {
        // The file's start, read once, tells its format and whether it is a document a line.
        let mut head = Vec::new();
        std::fs::File::open(path)?
            .take(HEAD_BYTES)
            .read_to_end(&mut head)?;
        let head = String::from_utf8_lossy(&head);
        let format = SessionFormat::of_head(&head);
        let whole = one_document(&head);
        let input = std::io::BufReader::new(std::fs::File::open(path)?);
        Ok(SessionReader {
            shown: shown.to_string(),
            input,
            whole,
            line: 0,
            ordinal: 0,
            done: false,
            hasher: sha2::Sha256::new(),
            format,
            built: None,
            pending: None,
            seen: Default::default(),
        })
    }

    /// The file's format.
    pub fn format(&self) -> SessionFormat {
        self.format
    }

    /// Reads every document of the file, then builds its sessions (a format whose sessions are
    /// spread over the file: OpenTelemetry's spans, aiperf's DAG conversations).
    fn build_all(&mut self) -> Result<std::vec::IntoIter<Session>, SessionError> {
        if self.format == SessionFormat::Dag {
            return self.build_dag();
        }
        let mut traces = otel::Traces::default();
        while let Some(document) = self.next_document() {
            let (text, first_line) = document?;
            traces
                .add(&text)
                .map_err(|e| self.document_error(first_line, e))?;
        }
        Ok(traces.sessions().into_iter())
    }

    fn build_dag(&mut self) -> Result<std::vec::IntoIter<Session>, SessionError> {
        let mut conversations = dag::Conversations::default();
        while let Some(document) = self.next_document() {
            let (text, first_line) = document?;
            conversations
                .add(&text, first_line)
                .map_err(|(line, e)| self.document_error(line, e))?;
        }
        let sessions = conversations
            .sessions()
            .map_err(|(line, e)| self.document_error(line, e))?;
        Ok(sessions.into_iter())
    }

    /// A mistake in the document starting on `first_line`, at its line within the document.
    fn document_error(&self, first_line: usize, e: document::DocumentError) -> SessionError {
        let line = first_line + e.line.saturating_sub(1);
        self.error(line, e.field, e.message, self.format.help())
    }

    /// The SHA-256 of what has been read (the whole file once the reader is spent).
    pub fn sha256(self) -> String {
        format!("{:x}", self.hasher.finalize())
    }

    fn error(
        &self,
        line: usize,
        field: Option<String>,
        message: String,
        help: &str,
    ) -> SessionError {
        SessionError {
            file: self.shown.clone(),
            line,
            field,
            message,
            help: help.to_string(),
        }
    }

    /// The next document's text and its first line, or `None` at the end.
    fn next_document(&mut self) -> Option<Result<(String, usize), SessionError>> {
        loop {
            if self.done {
                return None;
            }
            let mut text = String::new();
            let first_line = self.line + 1;
            let read = if self.whole {
                self.done = true;
                std::io::Read::read_to_string(
                    &mut (&mut self.input).take(MAX_SESSION_BYTES as u64 + 1),
                    &mut text,
                )
                .inspect(|_| self.line += text.lines().count())
            } else {
                let read = (&mut self.input)
                    .take(MAX_SESSION_BYTES as u64 + 1)
                    .read_line(&mut text);
                self.line += 1;
                read
            };
            match read {
                Ok(0) => {
                    self.done = true;
                    return None;
                }
                Ok(n) if n > MAX_SESSION_BYTES => {
                    self.done = true;
                    return Some(Err(self.error(
                        first_line,
                        None,
                        format!("a session is longer than {} MiB", MAX_SESSION_BYTES >> 20),
                        "split the session, or check that the file is JSONL (a session a line)",
                    )));
                }
                Ok(_) => {}
                Err(e) => {
                    self.done = true;
                    return Some(Err(self.error(
                        first_line,
                        None,
                        format!("cannot read it: {e}"),
                        "save the session file as UTF-8 JSON",
                    )));
                }
            }
            self.hasher.update(text.as_bytes());
            if text.trim().is_empty() {
                continue;
            }
            return Some(Ok((text, first_line)));
        }
    }
}

impl Iterator for SessionReader {
    type Item = Result<Session, SessionError>;

    fn next(&mut self) -> Option<Self::Item> {
        let found = match self.format {
            SessionFormat::Otel | SessionFormat::Dag => self.next_built(),
            SessionFormat::TraceLab => self.next_grouped(),
            SessionFormat::Weka | SessionFormat::Copilot => self.next_line_or_document(),
        };
        let (session, first_line) = match found? {
            Ok(found) => found,
            Err(error) => return Some(Err(error)),
        };
        let help = self.format.help();
        Some(
            session
                .check()
                .map_err(|why| self.error(first_line, None, why, help))
                .map(|()| session),
        )
    }
}

/// A session read, and the line it starts on.
type Found = Option<Result<(Session, usize), SessionError>>;

impl SessionReader {
    /// The next of the sessions built from the whole file (OpenTelemetry's spans).
    fn next_built(&mut self) -> Found {
        if self.built.is_none() {
            match self.build_all() {
                Ok(built) => self.built = Some(built),
                Err(error) => {
                    self.built = Some(Vec::new().into_iter());
                    return Some(Err(error));
                }
            }
        }
        Some(Ok((self.built.as_mut()?.next()?, 0)))
    }

    /// The next session of a format that writes one a document (Weka's, Copilot's).
    fn next_line_or_document(&mut self) -> Found {
        let (text, first_line) = match self.next_document()? {
            Ok(document) => document,
            Err(error) => return Some(Err(error)),
        };
        let ordinal = self.ordinal;
        self.ordinal += 1;
        let session = match self.format {
            SessionFormat::Copilot => copilot::session(&text, ordinal),
            _ => weka::session(&text, ordinal),
        };
        Some(
            session
                .map(|session| (session, first_line))
                .map_err(|e| self.document_error(first_line, e)),
        )
    }

    /// The next session of a format that writes one a line per call (TraceLab's rounds): the
    /// lines up to the first of another session.
    fn next_grouped(&mut self) -> Found {
        let mut rounds: Vec<tracelab::Round> = Vec::new();
        let mut first_line = 0;
        if let Some((round, line)) = self.pending.take() {
            (first_line, rounds) = (line, vec![round]);
        }
        while let Some(document) = self.next_document() {
            let (text, line) = match document {
                Ok(document) => document,
                Err(error) => return Some(Err(error)),
            };
            let round = match tracelab::round(&text) {
                Ok(round) => round,
                // The rounds before it are left out, not counted as seen: the session's
                // lines after it are not said to be apart from it.
                Err(e) => return Some(Err(self.document_error(line, e))),
            };
            if rounds
                .first()
                .is_some_and(|r| r.session_id != round.session_id)
            {
                self.pending = Some((round, line));
                break;
            }
            if rounds.is_empty() {
                first_line = line;
            }
            rounds.push(round);
        }
        let id = rounds.first()?.session_id.clone();
        if !self.seen.insert(id.clone()) {
            return Some(Err(self.error(
                first_line,
                Some("session_id".into()),
                format!(
                    "the rounds of session {id} are not together: it appeared before this line"
                ),
                "keep each session's rounds on consecutive lines: sort the file by session, \
                 e.g. jq -s -c 'sort_by(.session_id, .round_index)[]'",
            )));
        }
        let ordinal = self.ordinal;
        self.ordinal += 1;
        Some(Ok((tracelab::session(rounds, ordinal), first_line)))
    }
}

/// Reads the whole file once, without keeping it: its summary, or every mistake (at most
/// `limit` of them).
pub fn check_file(
    path: &Path,
    shown: &str,
    limit: usize,
) -> Result<SessionsSummary, Vec<SessionError>> {
    let mut reader = SessionReader::open(path, shown).map_err(|e| {
        vec![SessionError {
            file: shown.to_string(),
            line: 0,
            field: None,
            message: format!("cannot read it: {e}"),
            help: "give the path of the session file, relative to this plan file".into(),
        }]
    })?;
    let mut summary = SessionsSummary {
        format: Some(reader.format()),
        ..SessionsSummary::default()
    };
    let mut errors = Vec::new();
    for session in reader.by_ref() {
        match session {
            Ok(session) => {
                let calls = session.calls.len() as u64;
                let agents = session.calls.iter().map(|c| c.agent + 1).max().unwrap_or(1);
                summary.sessions += 1;
                summary.calls += calls;
                summary.subagents += u64::from(agents - 1);
                summary.most_calls = summary.most_calls.max(calls);
                summary.most_agents = summary.most_agents.max(agents);
            }
            Err(error) => {
                errors.push(error);
                if errors.len() >= limit {
                    break;
                }
            }
        }
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    summary.sha256 = reader.sha256();
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(after: &[u32], wait_ms: u64) -> Call {
        Call {
            after: after.to_vec(),
            wait: Duration::from_millis(wait_ms),
            input_tokens: 10,
            output_tokens: 2,
            hash_ids: vec![],
            agent: 0,
            tool_use: false,
            text: None,
            continues: None,
        }
    }

    #[test]
    fn a_start_window_drops_the_calls_before_it_and_their_edges() {
        let session = Session {
            id: "s".into(),
            ordinal: 0,
            block_tokens: 64,
            first: 0,
            calls: vec![
                call(&[], 0),
                call(&[0], 100),
                call(&[1], 200),
                call(&[1, 2], 300),
            ],
        };
        let started = session.starting_at(2);
        assert_eq!((started.calls.len(), started.first), (2, 2));
        // Its first call's parent was left out: it goes at once.
        assert_eq!(started.calls[0].after, Vec::<u32>::new());
        assert_eq!(started.calls[0].wait, Duration::ZERO);
        // The join keeps the edge to a call still there, renumbered.
        assert_eq!(started.calls[1].after, vec![0]);
        assert_eq!(started.calls[1].wait, Duration::from_millis(300));
    }

    #[test]
    fn waits_are_scaled_then_capped() {
        let sessions = Sessions {
            shown: "a.jsonl".into(),
            path: "a.jsonl".into(),
            concurrent: 2,
            rate: None,
            max_in_flight: None,
            wait_scale: 0.5,
            idle_cap: Some(Duration::from_secs(10)),
            start_window: None,
            live: false,
            summary: SessionsSummary::default(),
        };
        assert_eq!(
            sessions.wait(Duration::from_secs(4)),
            Duration::from_secs(2)
        );
        assert_eq!(
            sessions.wait(Duration::from_secs(600)),
            Duration::from_secs(10)
        );
    }

    #[test]
    fn a_call_goes_on_from_its_own_agents_call_not_a_sub_agents() {
        let mut spawned = call(&[0], 0);
        spawned.agent = 1;
        let session = Session {
            id: "s".into(),
            ordinal: 0,
            block_tokens: 64,
            first: 0,
            calls: vec![call(&[], 0), spawned, call(&[1, 0], 0)],
        };
        assert_eq!(session.own_parent(0), None);
        // The sub-agent's first call starts fresh; the join goes on from the main agent's.
        assert_eq!(session.own_parent(1), None);
        assert_eq!(session.own_parent(2), Some(0));
    }

    /// A TraceLab round of `session`, the `index`-th, `input` tokens, its answer at `at` s.
    fn round(session: &str, index: u32, input: u32, at: u32) -> String {
        format!(
            r#"{{"session_id":"{session}","round_index":{index},"input_tokens_total":{input},"prefix_tokens":{},"output_tokens":20,"timing_events":[{{"event_type":"tool_result","timestamp":"2026-06-01T05:40:{at:02}.000Z"}},{{"event_type":"text","timestamp":"2026-06-01T05:40:{:02}.500Z"}}],"tools":[]}}"#,
            input / 2,
            at
        )
    }

    fn read(text: &str) -> Result<SessionsSummary, Vec<SessionError>> {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("sessions.jsonl");
        std::fs::write(&path, text).expect("written");
        check_file(&path, "sessions.jsonl", 5)
    }

    #[test]
    fn tracelab_rounds_are_grouped_by_session_and_must_be_together() {
        let rows = [
            round("claude:a", 0, 1000, 1),
            round("claude:a", 1, 1200, 3),
            round("codex:b", 0, 800, 2),
            round("claude:a", 2, 1400, 5),
        ];
        let summary = read(&rows[..3].join("\n")).expect("read");
        assert_eq!(summary.format, Some(SessionFormat::TraceLab));
        assert_eq!(
            (summary.sessions, summary.calls, summary.most_calls),
            (2, 3, 2)
        );
        let errors = read(&rows.join("\n")).expect_err("refused");
        assert_eq!(
            (errors[0].line, errors[0].field.as_deref()),
            (4, Some("session_id"))
        );
        assert!(errors[0].message.contains("claude:a"), "{}", errors[0]);
    }

    #[test]
    fn copilot_sessions_are_told_apart_by_their_calls() {
        let call = |id: &str, at: &str| {
            format!(
                r#"{{"message_id":"{id}","timestamp":"2026-06-01T05:40:{at}Z","duration_ms":900.0,"tokens":{{"prompt":500,"completion":20,"cached":0}}}}"#
            )
        };
        let line = |s: &str| {
            format!(
                r#"{{"session_id":"{s}","date":"2026-06-01","turns":[{{"turn_id":"t","llm_calls":[{},{}],"tool_batches":[]}}]}}"#,
                call("m1", "01.000"),
                call("m2", "03.000")
            )
        };
        let summary = read(&format!("{}\n{}\n", line("s1"), line("s2"))).expect("read");
        assert_eq!(summary.format, Some(SessionFormat::Copilot));
        assert_eq!((summary.sessions, summary.calls), (2, 4));
        let bad = line("s3").replacen("\"prompt\":500", "\"prompt\":\"x\"", 1);
        let errors = read(&format!("{}\n{bad}\n", line("s1"))).expect_err("refused");
        assert_eq!(errors[0].line, 2);
        assert_eq!(
            errors[0].field.as_deref(),
            Some("turns[0].llm_calls[0].tokens.prompt")
        );
    }

    #[test]
    fn a_pretty_printed_document_is_told_from_a_document_a_line() {
        assert!(one_document("{\n  \"id\": \"s\",\n"));
        assert!(!one_document("{\"id\": \"a\"}\n{\"id\": \"b\"}\n"));
        // A first line longer than the head: a line of JSONL, cut short.
        assert!(!one_document("{\"id\": \"a\", \"requests\": [1, 2"));
        assert!(!one_document("\n{\"id\": \"a\"}\n"));
    }

    #[test]
    fn a_dependency_on_a_later_call_is_refused() {
        let session = Session {
            id: "s".into(),
            ordinal: 0,
            block_tokens: 64,
            first: 0,
            calls: vec![call(&[1], 0), call(&[], 0)],
        };
        assert!(session.check().is_err());
    }
}
