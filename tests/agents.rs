//! Agent sessions replayed from a Weka trace, against a capturing loopback server: every call
//! after the answers it depends on and its recorded wait, shared blocks as the same bytes for
//! exactly those blocks, the start window honoured.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;

/// How long the server takes over each answer: its first chunk at once, the rest after this.
const ANSWER_MS: u64 = 30;

/// One call as the server saw it.
#[derive(Debug, Clone)]
struct Arrival {
    /// Its session (the phase's number for it) and its call's recorded position.
    session: u64,
    call: u64,
    arrived: Instant,
    /// When the server had written the whole answer.
    answered: Instant,
    /// The prompt: its first message's text.
    content: String,
    /// Every message: its role and text.
    messages: Vec<(String, String)>,
}

/// The answer the server gives request `seq`: its own words, so that a live replay's next
/// prompt shows which answer it carries.
fn answer_text(seq: u64) -> String {
    format!("the answer for request {seq} is this sentence, longer than recorded")
}

/// A server that answers every chat request as a short stream after [`ANSWER_MS`], keeping
/// when each arrived and when its answer was done, by its `x-request-id`
/// (`prefix-phase-seq`, the seq being session × 2^20 + call).
fn serve() -> (u16, Arc<Mutex<Vec<Arrival>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let kept = seen.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            let kept = kept.clone();
            std::thread::spawn(move || answer_all(stream, &kept));
        }
    });
    (port, seen)
}

fn answer_all(mut stream: TcpStream, kept: &Mutex<Vec<Arrival>>) {
    stream.set_nodelay(true).unwrap();
    let mut buffer = Vec::new();
    loop {
        let Some((head, body, arrived)) = read_one(&mut stream, &mut buffer) else {
            return;
        };
        let lower = head.to_lowercase();
        if !head.starts_with("POST") {
            let _ = stream.write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 2\r\n\r\n{}");
            continue;
        }
        let id = lower
            .lines()
            .find_map(|l| l.strip_prefix("x-request-id:"))
            .map(str::trim)
            .unwrap_or("")
            .to_string();
        let seq: u64 = id
            .rsplit('-')
            .next()
            .and_then(|s| s.parse().ok())
            .unwrap_or(u64::MAX);
        let json: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
        let content = json["messages"][0]["content"]
            .as_str()
            .unwrap_or("")
            .to_string();
        let messages = json["messages"]
            .as_array()
            .map(|all| {
                all.iter()
                    .map(|m| {
                        let text = |key: &str| m[key].as_str().unwrap_or("").to_string();
                        (text("role"), text("content"))
                    })
                    .collect()
            })
            .unwrap_or_default();
        let chunk = |data: &str| format!("{:x}\r\ndata: {data}\n\n\r\n", data.len() + 8);
        let mut first = String::from(
            "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n",
        );
        let delta = json!({"choices": [{"delta": {"content": answer_text(seq)}}]});
        first.push_str(&chunk(&delta.to_string()));
        if stream.write_all(first.as_bytes()).is_err() {
            return;
        }
        std::thread::sleep(Duration::from_millis(ANSWER_MS));
        let mut rest = chunk("{\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}]}");
        rest.push_str(&chunk(
            "{\"choices\":[],\"usage\":{\"prompt_tokens\":10,\"completion_tokens\":2}}",
        ));
        rest.push_str(&chunk("[DONE]"));
        rest.push_str("0\r\n\r\n");
        // Taken before the answer's end is written: the client cannot read it earlier, so no
        // call after it can arrive before this plus its wait (taken after the write, a server
        // thread preempted on a busy machine dated it up to 3 ms late).
        let answered = Instant::now();
        if stream.write_all(rest.as_bytes()).is_err() {
            return;
        }
        let _ = stream.flush();
        kept.lock().unwrap().push(Arrival {
            session: seq >> 20,
            call: seq & ((1 << 20) - 1),
            arrived,
            answered,
            content,
            messages,
        });
    }
}

/// One request off a kept-alive connection: its head, its body, when its first byte came.
fn read_one(stream: &mut TcpStream, buffer: &mut Vec<u8>) -> Option<(String, Vec<u8>, Instant)> {
    let mut arrived = (!buffer.is_empty()).then(Instant::now);
    let mut chunk = [0u8; 16384];
    loop {
        if let Some(end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buffer[..end]).to_string();
            let length: usize = head
                .to_lowercase()
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
            if buffer.len() >= end + 4 + length {
                let body = buffer[end + 4..end + 4 + length].to_vec();
                buffer.drain(..end + 4 + length);
                return Some((head, body, arrived.unwrap_or_else(Instant::now)));
            }
        }
        let n = stream.read(&mut chunk).unwrap_or(0);
        if n == 0 {
            return None;
        }
        arrived.get_or_insert_with(Instant::now);
        buffer.extend_from_slice(&chunk[..n]);
    }
}

/// A call of the trace: `(t, in, hash_ids, think_time, api_time)`.
fn call(t: f64, input: u32, hash_ids: &[u64], think: f64, api: f64) -> serde_json::Value {
    json!({"t": t, "type": "n", "model": "claude-opus-4-5-20251101", "in": input, "out": 4,
           "hash_ids": hash_ids, "input_types": ["text"], "output_types": ["text"],
           "stop": "tool_use", "api_time": api, "think_time": think})
}

fn subagent(t: f64, status: &str, requests: Vec<serde_json::Value>) -> serde_json::Value {
    json!({"t": t, "type": "subagent", "agent_id": "agent_001", "subagent_type": "Explore",
           "duration_ms": 1000, "total_tokens": 100, "tool_use_count": 1, "status": status,
           "models": ["claude-opus-4-5-20251101"], "tool_tokens": 0, "system_tokens": 0,
           "requests": requests})
}

/// Sessions of six calls in the order they are recorded (block 16 tokens):
/// 0 `A` [1,2]; a sub-agent 1 `S1` [10,11] (spawned 0.30 s after A's answer), 2 `S2` [10,11,12]
/// (thinks 0.12 s); an async sub-agent 3 `X1` [20] (0.40 s after A's answer, never joined);
/// 4 `B` [1,2,3] after A and S2 (thinks 0.08 s); 5 `C` [1,5] after B (thinks 0.15 s).
fn trace(sessions: usize) -> String {
    (0..sessions)
        .map(|s| {
            json!({
                "id": format!("trace_{s:03}"),
                "models": ["claude-opus-4-5-20251101"],
                "block_size": 16,
                "hash_id_scope": "local",
                "tool_tokens": 0,
                "system_tokens": 16,
                "requests": [
                    call(0.0, 32, &[1, 2], 0.0, 0.05),
                    subagent(0.30, "completed", vec![
                        call(0.35, 32, &[10, 11], 0.0, 0.05),
                        call(0.60, 48, &[10, 11, 12], 0.12, 0.05),
                    ]),
                    subagent(0.40, "async_launched", vec![call(0.45, 16, &[20], 0.0, 0.05)]),
                    call(1.20, 48, &[1, 2, 3], 0.08, 0.05),
                    call(1.60, 32, &[1, 5], 0.15, 0.05),
                ],
            })
            .to_string()
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// What each call comes after, and its wait (ms).
fn edges() -> BTreeMap<u64, (Vec<u64>, u64)> {
    BTreeMap::from([
        (1, (vec![0], 300)),
        (2, (vec![1], 120)),
        (3, (vec![0], 400)),
        (4, (vec![0, 2], 80)),
        (5, (vec![4], 150)),
    ])
}

fn run(port: u16, load: &str) -> common::Run {
    run_file(port, &trace(4), load)
}

/// A run of the session file `sessions` against the server on `port`.
fn run_file(port: u16, sessions: &str, load: &str) -> common::Run {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("agents.jsonl"), sessions).unwrap();
    let plan = format!(
        "plan \"agents\" {{ seed 5 }}\n\
         target \"http://127.0.0.1:{port}/v1\" {{ api \"chat\"; model \"m\"; stream #true }}\n\
         workload {{ tokenizer \"cl100k_base\" }}\n\
         phase \"agents\" {{ sessions \"agents.jsonl\" {load} }}\n"
    );
    common::run_in(dir, &plan, &[])
}

fn by_call(seen: &Mutex<Vec<Arrival>>) -> BTreeMap<(u64, u64), Arrival> {
    seen.lock()
        .unwrap()
        .iter()
        .map(|a| ((a.session, a.call), a.clone()))
        .collect()
}

#[test]
fn calls_wait_for_their_parents_and_share_exactly_their_blocks() {
    let _serial = common::serial();
    let (port, seen) = serve();
    let run = run(port, "concurrent=2");
    assert_eq!(run.code(), 0, "{}", run.stderr());
    let calls = by_call(&seen);
    // Every call of every session, once.
    let expected: BTreeSet<(u64, u64)> = (0..4).flat_map(|s| (0..6).map(move |c| (s, c))).collect();
    assert_eq!(calls.keys().copied().collect::<BTreeSet<_>>(), expected);
    // Each call after the answers it waits for, then its wait; the async sub-agent is not
    // waited for (C comes 150 ms after B whatever X1 does).
    let mut late_ms: Vec<f64> = Vec::new();
    for session in 0..4 {
        for (call, (after, wait)) in edges() {
            let this = &calls[&(session, call)];
            let answered = after
                .iter()
                .map(|p| calls[&(session, *p)].answered)
                .max()
                .unwrap();
            let gap = this
                .arrived
                .saturating_duration_since(answered)
                .as_secs_f64()
                * 1e3;
            assert!(
                this.arrived >= answered,
                "session {session} call {call} arrived before its parents' answers"
            );
            late_ms.push(gap - wait as f64);
        }
    }
    late_ms.sort_by(f64::total_cmp);
    eprintln!(
        "waits: late by {:.2}..{:.2} ms",
        late_ms[0],
        late_ms[late_ms.len() - 1]
    );
    // The client sent each call its wait after the answer it read (the server's clock sees the
    // answer end a little before the client does); within a few ms.
    assert!(late_ms[0] >= 0.0, "a call went early: {late_ms:?}");
    assert!(
        late_ms[late_ms.len() - 1] <= 15.0,
        "a call went late: {late_ms:?}"
    );
    // Shared blocks are the same bytes, for exactly the blocks shared.
    for session in 0..4 {
        let text = |c: u64| calls[&(session, c)].content.clone();
        let (a, b, c, s1, s2) = (text(0), text(4), text(5), text(1), text(2));
        assert!(
            b.starts_with(&a) && b.len() > a.len(),
            "B carries A's blocks 1 and 2"
        );
        assert!(s2.starts_with(&s1), "S2 carries S1's blocks 10 and 11");
        let common = a.bytes().zip(c.bytes()).take_while(|(x, y)| x == y).count();
        assert!(
            common > 0 && common < a.len(),
            "C shares block 1 with A, not block 2"
        );
        assert!(
            !s1.starts_with(&a[..a.len() / 2]),
            "a sub-agent's blocks are its own"
        );
    }
    // Hash ids are each session's own: the same ids in another session are other bytes.
    let first = &calls[&(0, 0)].content;
    let other = &calls[&(1, 0)].content;
    let common = first
        .bytes()
        .zip(other.bytes())
        .take_while(|(x, y)| x == y)
        .count();
    assert!(
        common < first.len() / 4,
        "sessions 0 and 1 share {common} bytes of block 1"
    );
    // One session line each, every call answered.
    let sessions: Vec<_> = common::read_log(&run.out())
        .into_iter()
        .filter(|l| l["event"] == "session")
        .collect();
    assert_eq!(sessions.len(), 4);
    for line in &sessions {
        assert_eq!(
            (line["calls"].as_u64(), line["answered"].as_u64()),
            (Some(6), Some(6))
        );
    }
    // Judged as sessions: each waited its recorded 1,050 ms (0 + 300 + 120 + 400 + 80 + 150),
    // and took its critical path, A → S1 → S2 → B → C: five answers of 30 ms and 650 ms of
    // waits (X1's 400 ms runs beside it).
    let summary = run.summary();
    let phase = common::phase(&summary, "agents");
    assert_eq!(phase["sessions"]["judged"], 4);
    assert_eq!(phase["sessions"]["goodput"], 1.0);
    let metric = |key: &str, stat: &str| phase["metrics"][key][stat].as_f64().unwrap();
    assert_eq!(metric("session_calls", "min"), 6.0);
    let waited = metric("session_wait_ms", "mean");
    assert!((1050.0..1080.0).contains(&waited), "{waited}");
    let (fastest, slowest) = (
        metric("session_e2e_ms", "min"),
        metric("session_e2e_ms", "max"),
    );
    assert!(fastest >= 800.0 && slowest < 900.0, "{fastest}..{slowest}");
    // Sessions over time: two slots, so at most two running in any window, and two for most of
    // the run; report.html charts them, and TTFT by context length.
    let running: Vec<f64> = summary["timeseries"]["points"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["sessions"].as_f64())
        .collect();
    assert!(running.iter().all(|&n| n <= 2.0 + 1e-9), "{running:?}");
    assert!(running.iter().any(|&n| n > 1.9), "{running:?}");
    let html = std::fs::read_to_string(run.out().join("report.html")).unwrap();
    assert!(html.contains("id=\"sessions-over-time\""));
    assert!(html.contains("id=\"by-context\""));
    // Every call stopped for tools: the main agent's next calls are tool turns, a sub-agent's
    // first call (its task) a user turn.
    let kinds: BTreeSet<(u64, String)> = common::read_log(&run.out())
        .into_iter()
        .filter(|l| l["event"] == "request")
        .map(|l| {
            (
                l["turn"].as_u64().unwrap(),
                l["turn_kind"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let kind = |turn: u64| {
        let of: Vec<&str> = kinds
            .iter()
            .filter(|(t, _)| *t == turn)
            .map(|(_, k)| k.as_str())
            .collect();
        of
    };
    assert_eq!(kind(1), ["user"]);
    assert_eq!(kind(2), ["user"], "S1, the sub-agent's first call");
    assert_eq!(kind(3), ["tool"], "S2, after S1");
    assert_eq!(kind(5), ["tool"], "B, after A");
}

/// Answers live: an agent's call goes on from its previous call's messages and the server's
/// answer to it; a sub-agent's first call, and a call whose recorded context shrank, start
/// afresh from their blocks.
#[test]
fn live_answers_go_into_the_context_of_the_agents_next_call() {
    let _serial = common::serial();
    let (port, seen) = serve();
    let run = run(port, "concurrent=2 wait-scale=0.1 live=#true");
    assert_eq!(run.code(), 0, "{}", run.stderr());
    let calls = by_call(&seen);
    let user = |text: &str| ("user".to_string(), text.to_string());
    for session in 0..4 {
        let call = |c: u64| &calls[&(session, c)];
        let answer = |c: u64| ("assistant".to_string(), answer_text((session << 20) + c));
        // B (48 tokens) goes on from A (32 in, 4 out): A's prompt, its answer, 12 new tokens.
        let b = &call(4).messages;
        assert_eq!(b.len(), 3, "session {session}: {b:?}");
        assert_eq!(b[0], user(&call(0).content));
        assert_eq!(b[1], answer(0));
        assert!(b[2].0 == "user" && !b[2].1.is_empty() && b[2].1.len() < call(0).content.len());
        // S2 goes on from S1 the same way; S1, the sub-agent's first call, starts fresh.
        let s2 = &call(2).messages;
        assert_eq!((s2.len(), &s2[1]), (3, &answer(1)));
        assert_eq!(s2[0], user(&call(1).content));
        assert_eq!(call(1).messages.len(), 1);
        // C's recorded context (32) is less than B's input and output (52): the agent
        // compacted it, so C starts afresh from its blocks, A's block 1 first.
        assert_eq!(call(5).messages.len(), 1);
        let (a, c) = (&call(0).content, &call(5).content);
        let common = a.bytes().zip(c.bytes()).take_while(|(x, y)| x == y).count();
        assert!(common > 0 && common < a.len(), "C shares block 1 with A");
    }
    // Each live call's prompt is counted as sent: B's is A's 32 tokens, the answer (over ten
    // tokens, where the recording had 4) and 12 new ones, more than its recorded 48.
    let inputs: Vec<u64> = common::read_log(&run.out())
        .into_iter()
        .filter(|l| l["event"] == "request" && l["turn"] == 5)
        .filter_map(|l| l["input_tokens_planned"].as_u64())
        .collect();
    assert_eq!(inputs.len(), 4, "B's records");
    assert!(inputs.iter().all(|&n| (54..80).contains(&n)), "{inputs:?}");
}

/// TraceLab rounds of two sessions: 640 tokens; 800 sharing 700 (all of round 0's ten blocks)
/// after a 0.2 s tool run; 900 sharing 330 (five blocks: compacted) after the user's 0.3 s.
fn tracelab_rounds() -> String {
    let at = |s: f64| format!("2026-06-01T05:40:{:06.3}Z", 10.0 + s);
    let event = |kind: &str, s: f64| json!({"event_type": kind, "timestamp": at(s), "source": "x"});
    let mut lines = Vec::new();
    for session in ["claude:aa", "codex:bb"] {
        let rounds = [
            (
                640,
                0,
                vec![event("user_message", 0.0), event("tool_call", 0.1)],
                1,
            ),
            (
                800,
                700,
                vec![event("tool_result", 0.3), event("text", 0.35)],
                0,
            ),
            (
                900,
                330,
                vec![event("user_message", 0.65), event("text", 0.7)],
                0,
            ),
        ];
        for (index, (input, prefix, events, tools)) in rounds.into_iter().enumerate() {
            let tools: Vec<_> = (0..tools).map(|_| json!({"tool_name": "Bash"})).collect();
            lines.push(
                json!({"provider": "claude", "session_id": session, "round_index": index,
                "input_tokens_total": input, "prefix_tokens": prefix,
                "newly_append_tokens": input - prefix, "output_tokens": 4,
                "timing_events": events, "tools": tools})
                .to_string(),
            );
        }
    }
    lines.join("\n")
}

/// Copilot sessions of three calls: 640 tokens; 900 with 650 cached (all of call 0) 0.25 s
/// after call 0's end (a tool batch); 1,000 with none cached 0.15 s after call 1's.
fn copilot_sessions() -> String {
    let call = |id: &str, s: f64, prompt: u32, cached: u32| {
        json!({"message_id": id, "timestamp": format!("2026-06-01T05:40:{:06.3}Z", 10.0 + s),
               "duration_ms": 100.0, "initiator_type": "agent", "model": "Model A",
               "result": "Success", "status_code": "OK",
               "tokens": {"total": prompt + 4, "prompt": prompt, "completion": 4,
                          "cached": cached, "cached_pct": 0.0},
               "message_metadata": []})
    };
    ["s1", "s2"]
        .iter()
        .map(|session| {
            json!({"session_id": session, "date": "2026-06-01", "turns": [{"turn_id": "t",
                "llm_calls": [call("m0", 0.0, 640, 0), call("m1", 0.35, 900, 650),
                              call("m2", 0.6, 1000, 0)],
                "tool_batches": [{"request_id": "m0", "duration_ms": 250.0,
                                  "function_calls": [{"name": "read_file", "status": 1}]}]}]})
            .to_string()
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Each format's sessions: every call its recorded gap after the answer before it, and the
/// previous prompt's bytes for exactly the blocks its recorded prefix covers.
#[test]
fn tracelab_and_copilot_sessions_replay_their_gaps_and_shared_prefixes() {
    let _serial = common::serial();
    // Each format, its two waits (ms), and how much of call 0 call 2 shares: TraceLab's
    // compacted round five of its ten blocks, Copilot's call with nothing cached none.
    let formats = [
        (tracelab_rounds(), [200, 300], (0.4, 0.6)),
        (copilot_sessions(), [250, 150], (0.0, 0.05)),
    ];
    for (sessions, waits, (least, most)) in formats {
        let (port, seen) = serve();
        let run = run_file(port, &sessions, "concurrent=2");
        assert_eq!(run.code(), 0, "{}", run.stderr());
        let calls = by_call(&seen);
        assert_eq!(calls.len(), 6);
        for session in 0..2 {
            let call = |c: u64| &calls[&(session, c)];
            for (c, wait) in [(1, waits[0]), (2, waits[1])] {
                let gap = call(c)
                    .arrived
                    .saturating_duration_since(call(c - 1).answered);
                let late = gap.as_secs_f64() * 1e3 - wait as f64;
                assert!(
                    (0.0..15.0).contains(&late),
                    "call {c}: {late:.1} ms off its wait"
                );
            }
            let common =
                |a: &str, b: &str| a.bytes().zip(b.bytes()).take_while(|(x, y)| x == y).count();
            let (first, second, third) = (&call(0).content, &call(1).content, &call(2).content);
            assert!(
                second.starts_with(first.as_str()),
                "call 1 carries all of call 0"
            );
            let shared = common(first, third) as f64 / first.len() as f64;
            assert!(
                (least..most).contains(&shared),
                "call 2 shares {shared:.2} of call 0"
            );
        }
        assert_ne!(calls[&(0, 0)].content, calls[&(1, 0)].content);
    }
}

/// aiperf's DAG conversations: written messages, a spawn that starts fresh and is joined, a
/// fork that goes on from the forking turn, every context carrying the server's answers.
#[test]
fn dag_conversations_carry_their_messages_and_the_answers() {
    let _serial = common::serial();
    let file = [
        r#"{"session_id":"root","turns":[{"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Plan the fix."}],"max_tokens":8,"spawns":["helper"]},{"messages":[{"role":"user","content":"Merge the findings."}],"max_tokens":8,"delay":100,"forks":["review"]}]}"#,
        r#"{"session_id":"helper","turns":[{"messages":[{"role":"user","content":"Find the bug."}],"max_tokens":8}]}"#,
        r#"{"session_id":"review","turns":[{"messages":[{"role":"user","content":"Review the merge."}],"max_tokens":8}]}"#,
    ]
    .join("\n");
    let (port, seen) = serve();
    let run = run_file(port, &file, "concurrent=1");
    assert_eq!(run.code(), 0, "{}", run.stderr());
    let calls = by_call(&seen);
    let call = |c: u64| &calls[&(0, c)];
    let said = |role: &str, text: &str| (role.to_string(), text.to_string());
    let answer = |c: u64| said("assistant", &answer_text(c));
    // The root's first turn, then the helper, fresh.
    let first = vec![said("system", "Be brief."), said("user", "Plan the fix.")];
    assert_eq!(call(0).messages, first);
    assert_eq!(call(1).messages, [said("user", "Find the bug.")]);
    // The join: after the helper's answer and its delay, going on from the first turn.
    let mut merge = first.clone();
    merge.extend([answer(0), said("user", "Merge the findings.")]);
    assert_eq!(call(2).messages, merge);
    let late = call(2).arrived.saturating_duration_since(call(1).answered);
    assert!((100..115).contains(&late.as_millis()), "{late:?}");
    // The fork goes on from the merge and its answer.
    let mut review = merge.clone();
    review.extend([answer(2), said("user", "Review the merge.")]);
    assert_eq!(call(3).messages, review);
}

#[test]
fn each_session_starts_at_its_point_of_the_start_window() {
    let _serial = common::serial();
    let (port, seen) = serve();
    let run = run(port, "concurrent=2 start=\"50%..50%\"");
    assert_eq!(run.code(), 0, "{}", run.stderr());
    let calls = by_call(&seen);
    // Half of six calls are left out: each session starts at X1 (its parent A left out), and B
    // (whose parents are left out) goes with it; C waits for B as recorded.
    let expected: BTreeSet<(u64, u64)> = (0..4).flat_map(|s| (3..6).map(move |c| (s, c))).collect();
    assert_eq!(calls.keys().copied().collect::<BTreeSet<_>>(), expected);
    for session in 0..4 {
        let (x1, b, c) = (
            &calls[&(session, 3)],
            &calls[&(session, 4)],
            &calls[&(session, 5)],
        );
        let apart = if x1.arrived > b.arrived {
            x1.arrived - b.arrived
        } else {
            b.arrived - x1.arrived
        };
        assert!(
            apart < Duration::from_millis(20),
            "X1 and B start the session together"
        );
        let gap = c.arrived.saturating_duration_since(b.answered);
        assert!(
            gap >= Duration::from_millis(149) && gap < Duration::from_millis(170),
            "{gap:?}"
        );
    }
}

#[test]
fn shards_keep_each_session_whole_and_merge_into_one_run() {
    let _serial = common::serial();
    let (port, seen) = serve();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("agents.jsonl"), trace(4)).unwrap();
    let plan = common::write_plan(
        dir.path(),
        &format!(
            "plan \"agents\" {{ seed 5 }}\n\
             target \"http://127.0.0.1:{port}/v1\" {{ api \"chat\"; model \"m\"; stream #true }}\n\
             workload {{ tokenizer \"cl100k_base\" }}\n\
             phase \"agents\" {{ sessions \"agents.jsonl\" concurrent=2 }}\n"
        ),
    );
    let mut shards = Vec::new();
    for k in 1..=2 {
        let out = dir.path().join(format!("shard-{k}"));
        let output = common::llmload()
            .arg("run")
            .arg(&plan)
            .args(["--shard", &format!("{k}/2"), "--quiet", "--out"])
            .arg(&out)
            .output()
            .unwrap();
        assert_eq!(
            output.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        shards.push(out);
    }
    // Every call of every session was sent once, between the two shards.
    assert_eq!(by_call(&seen).len(), 4 * 6);
    let merged = dir.path().join("merged");
    let output = common::llmload()
        .arg("merge")
        .args(&shards)
        .arg("--out")
        .arg(&merged)
        .output()
        .unwrap();
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let log = common::read_log(&merged);
    // Each session's calls all came from the one shard that ran it.
    let mut shard_of: BTreeMap<u64, BTreeSet<u64>> = BTreeMap::new();
    for line in log.iter().filter(|l| l["event"] == "request") {
        let session = line["conversation"].as_u64().unwrap();
        shard_of
            .entry(session)
            .or_default()
            .insert(line["shard"].as_u64().unwrap());
    }
    assert_eq!(shard_of.len(), 4);
    assert!(
        shard_of.values().all(|shards| shards.len() == 1),
        "{shard_of:?}"
    );
    let sessions: Vec<_> = log.iter().filter(|l| l["event"] == "session").collect();
    assert_eq!(sessions.len(), 4);
    for line in sessions {
        let session = line["session"].as_u64().unwrap();
        let shard = line["shard"].as_u64().unwrap();
        assert_eq!(shard_of[&session], BTreeSet::from([shard]));
        // Shard k ran the file's sessions k − 1, k + 1…
        assert_eq!(session % 2, shard - 1);
    }
}

/// Chains of 8 calls with no wait between them: each session holds exactly one call in flight,
/// so concurrent sessions are concurrent requests.
fn chains(sessions: usize) -> String {
    (0..sessions)
        .map(|s| {
            let requests: Vec<_> = (0..8)
                .map(|i| {
                    let ids: Vec<u64> = (1..=2 + i).collect();
                    let mut call = call(i as f64 * 0.2, 64 + 32 * i as u32, &ids, 0.0, 0.1);
                    // Answers of 16 tokens (about 100 ms at 8 sequences): a call queued
                    // behind one waits that long for its first token.
                    call["out"] = json!(16);
                    call
                })
                .collect();
            json!({"id": format!("chain-{s:03}"), "block_size": 32, "requests": requests})
                .to_string()
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The search of concurrent sessions finds the simulator's engine limit (8 sequences at once):
/// at 9 sessions a call queues behind a whole answer, and TTFT p99 jumps past the objective.
#[test]
fn a_search_of_sessions_finds_how_many_agents_the_engine_holds() {
    let _serial = common::serial();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("chains.jsonl"), chains(48)).unwrap();
    let plan = "plan \"agents-capacity\" { seed 3 }\n\
        target \"sim\" { timeout \"10s\" }\n\
        sim { engine { max-seqs 8; step-base \"2ms\"; decode-per-seq \"500us\"; prefill-per-token \"10us\" } }\n\
        workload { tokenizer \"cl100k_base\"; output 16 ignore-eos=#true }\n\
        search \"agents\" { sessions \"chains.jsonl\" from=2 to=32; warmup \"300ms\"; duration \"2s\"; precision \"10%\"; max-probes 12 }\n\
        sla { ttft p99 < \"50ms\"; session-goodput > \"80%\" }\n";
    let run = common::run_in(dir, plan, &[]);
    assert_eq!(run.code(), 0, "{}{}", run.stdout(), run.stderr());
    let summary = run.summary();
    let bracket = &summary["capacity"]["bracket"];
    assert_eq!(
        (bracket["sustains"].as_f64(), bracket["fails_at"].as_f64()),
        (Some(8.0), Some(9.0)),
        "{bracket}"
    );
    assert_eq!(bracket["unit"], "sessions");
    let said = run.stdout();
    assert!(
        said.contains("sustains 8 sessions; fails at 9 sessions"),
        "{said}"
    );
}

/// The most requests the server had in flight at once (until each answer's end was written).
fn most_in_flight(calls: &BTreeMap<(u64, u64), Arrival>) -> usize {
    let spans: Vec<(Instant, Instant)> = calls.values().map(|a| (a.arrived, a.answered)).collect();
    spans
        .iter()
        .map(|(at, _)| spans.iter().filter(|(s, e)| s <= at && at < e).count())
        .max()
        .unwrap_or(0)
}

#[test]
fn a_cap_on_calls_in_flight_holds_across_sessions_and_subagents() {
    let _serial = common::serial();
    let (port, seen) = serve();
    // Four sessions at once, each with a sub-agent beside its main agent: up to 8 calls out.
    let run = run(port, "concurrent=4 wait-scale=0 max-in-flight=2");
    assert_eq!(run.code(), 0, "{}", run.stderr());
    let calls = by_call(&seen);
    assert_eq!(calls.len(), 24, "every call is still sent");
    assert!(most_in_flight(&calls) <= 2, "{}", most_in_flight(&calls));
    // Without the cap the same sessions have more out at once.
    seen.lock().unwrap().clear();
    let run = self::run(port, "concurrent=4 wait-scale=0");
    assert_eq!(run.code(), 0, "{}", run.stderr());
    assert!(most_in_flight(&by_call(&seen)) > 2);
}

#[test]
fn sessions_arrive_at_their_rate() {
    let _serial = common::serial();
    let (port, seen) = serve();
    // 8 sessions a second for 2 s (the file's 4 sessions, then again as new ones), with waits
    // cut to a tenth so that sessions end within the phase.
    let run = run(port, "rate=8 wait-scale=0.1; duration \"2s\"");
    assert_eq!(run.code(), 0, "{}", run.stderr());
    let calls = by_call(&seen);
    let mut starts: Vec<Instant> = calls
        .iter()
        .filter(|((_, call), _)| *call == 0)
        .map(|(_, a)| a.arrived)
        .collect();
    starts.sort();
    // Poisson arrivals at 8/s over 2 s: 16 expected (seeded: the same count every run).
    assert!(
        (8..=26).contains(&starts.len()),
        "{} sessions",
        starts.len()
    );
    let spread = starts[starts.len() - 1] - starts[0];
    assert!(spread > Duration::from_millis(1200), "{spread:?}");
    // Sessions beyond the file's 4 are new ones: their own numbers.
    let sessions: BTreeSet<u64> = calls.keys().map(|(s, _)| *s).collect();
    assert_eq!(sessions.len(), starts.len());
}

/// A span of an OTLP/JSON export: a `chat` call when it has tokens, else `op`.
fn otel_span(
    id: &str,
    parent: &str,
    op: &str,
    ms: (u64, u64),
    tokens: Option<u32>,
) -> serde_json::Value {
    let t0: u64 = 1_765_000_000_000_000_000;
    let mut attributes =
        vec![json!({"key": "gen_ai.operation.name", "value": {"stringValue": op}})];
    if let Some(input) = tokens {
        attributes.push(
            json!({"key": "gen_ai.usage.input_tokens", "value": {"intValue": input.to_string()}}),
        );
        attributes.push(json!({"key": "gen_ai.usage.output_tokens", "value": {"intValue": "4"}}));
    }
    json!({"traceId": "4bf92f3577b34da6a3ce929d0e0e4736", "spanId": id, "parentSpanId": parent,
           "name": op, "kind": 3, "startTimeUnixNano": (t0 + ms.0 * 1_000_000).to_string(),
           "endTimeUnixNano": (t0 + ms.1 * 1_000_000).to_string(), "attributes": attributes})
}

/// OpenTelemetry spans replay with the dependencies and waits their times imply: a tool's run
/// between two calls, a sub-agent's calls after its parent's, the join after the sub-agent.
#[test]
fn otel_spans_replay_with_the_waits_their_times_imply() {
    let _serial = common::serial();
    let (port, seen) = serve();
    let dir = tempfile::tempdir().unwrap();
    let spans = [
        otel_span("a1", "", "invoke_agent", (0, 10_000), None),
        otel_span("c1", "a1", "chat", (0, 1_000), Some(500)),
        otel_span("t1", "a1", "execute_tool", (1_000, 1_500), None),
        otel_span("c2", "a1", "chat", (1_600, 2_600), Some(900)),
        otel_span("a2", "a1", "invoke_agent", (2_700, 5_000), None),
        otel_span("c3", "a2", "chat", (2_800, 3_800), Some(300)),
        otel_span("c4", "a2", "chat", (4_000, 4_800), Some(400)),
        otel_span("c5", "a1", "chat", (5_200, 6_000), Some(1_300)),
    ];
    // Split over two export requests, the second first: a trace's spans may be anywhere.
    let export = |spans: &[serde_json::Value]| {
        json!({"resourceSpans": [{"resource": {"attributes": []},
               "scopeSpans": [{"scope": {"name": "agent"}, "spans": spans}]}]})
        .to_string()
    };
    let file = format!("{}\n{}\n", export(&spans[4..]), export(&spans[..4]));
    std::fs::write(dir.path().join("agents.jsonl"), file).unwrap();
    let plan = format!(
        "plan \"otel\" {{ seed 5 }}\n\
         target \"http://127.0.0.1:{port}/v1\" {{ api \"chat\"; model \"m\"; stream #true }}\n\
         workload {{ tokenizer \"cl100k_base\" }}\n\
         phase \"agents\" {{ sessions \"agents.jsonl\" wait-scale=0.25 }}\n"
    );
    let run = common::run_in(dir, &plan, &[]);
    assert_eq!(run.code(), 0, "{}", run.stderr());
    let calls = by_call(&seen);
    assert_eq!(calls.len(), 5);
    // Recorded gaps ÷ 4: c2 600 ms after c1, c3 200 after c2, c4 200 after c3, c5 400 after c4.
    for (call, after, wait_ms) in [
        (1, vec![0], 150.0),
        (2, vec![1], 50.0),
        (3, vec![2], 50.0),
        (4, vec![1, 3], 100.0),
    ] {
        let this = &calls[&(0, call)];
        let answered = after
            .iter()
            .map(|p| calls[&(0, *p)].answered)
            .max()
            .unwrap();
        let late = this
            .arrived
            .saturating_duration_since(answered)
            .as_secs_f64()
            * 1e3
            - wait_ms;
        assert!(
            (0.0..15.0).contains(&late),
            "call {call} late by {late:.2} ms"
        );
    }
    // The main agent's context grows by prefix; the sub-agent's is its own.
    let text = |c: u64| calls[&(0, c)].content.clone();
    assert!(text(1).starts_with(&text(0)) && text(4).starts_with(&text(1)));
    assert!(text(3).starts_with(&text(2)) && !text(2).starts_with(&text(0)[..20]));
}
