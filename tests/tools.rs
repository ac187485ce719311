//! Tool calls over loopback: a plan's `tools` file reaches the server (the simulator answers a
//! request that offers tools with a call), streamed `tool_calls` fragments are output (counted,
//! timed from the send to the first fragment), `finish_reason "tool_calls"` is no false warning,
//! and a tools file that is not a list of functions is a plan mistake.

mod common;

use std::net::TcpStream;
use std::thread::sleep;
use std::time::{Duration, Instant};

use common::wire::{send, serve, SSE_HEAD};
use common::{run_in, serial, stat};

const TOOLS: &str = r#"[{"type": "function", "function": {"name": "search", "parameters": {"type": "object", "properties": {"query": {"type": "string"}}}}}]"#;

fn dir_with_tools(tools: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("tools.json"), tools).unwrap();
    dir
}

#[test]
fn the_simulator_calls_the_offered_tool_and_the_call_is_output() {
    let _serial = serial();
    let plan = "plan \"tools\" { seed 3; }\n\
         target \"sim\" { api \"chat\"; stream #true; timeout \"10s\"; tools \"tools.json\"; tool-choice \"auto\"; }\n\
         sim { ttft \"20ms\"; itl \"5ms\"; }\n\
         workload { tokenizer \"cl100k_base\"; input 64; output 12 ignore-eos=#true; }\n\
         phase \"steady\" { concurrency 2; requests 6; }\n\
         sla { tool-call-ttft max < \"1s\"; tool-calls mean >= 1; }\n";
    let run = run_in(dir_with_tools(TOOLS), plan, &[]);
    assert_eq!(run.code(), 0, "{}{}", run.stdout(), run.stderr());
    for r in run.records() {
        assert_eq!(r["finish_reason"], "tool_calls", "{r}");
        assert_eq!(r["tool_calls"], 1, "{r}");
        assert_eq!(r["completion_tokens"], 12, "{r}");
        assert_eq!(
            r["chunk_kinds"],
            serde_json::json!([["tool_call", 12]]),
            "{r}"
        );
    }
    let summary = run.summary();
    assert_eq!(stat(&summary, "overall", "tool_call_ttft_ms", "count"), 6.0);
    assert_eq!(stat(&summary, "overall", "tool_calls", "mean"), 1.0);
    // A call is as long as it is: under exact lengths, "tool_calls" is no short answer.
    let codes: Vec<&str> = summary["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|w| w["code"].as_str())
        .collect();
    assert!(
        !codes.contains(&"output-tokens") && !codes.contains(&"usage-vs-tokenizer"),
        "{codes:?}"
    );
    // The tools file is part of what the run measured.
    let files = summary["context"]["plan_files"].to_string();
    assert!(files.contains("tools.json"), "{files}");
}

/// Says a few words at 30 ms, then calls two tools: the first named at 80 ms, its arguments at
/// 100 ms, the second whole at 120 ms.
fn answer_then_call_two(s: &mut TcpStream) {
    send(s, SSE_HEAD);
    let start = Instant::now();
    let at = |ms: u64| {
        if let Some(left) =
            (start + Duration::from_millis(ms)).checked_duration_since(Instant::now())
        {
            sleep(left);
        }
    };
    at(30);
    send(
        s,
        "data: {\"choices\":[{\"delta\":{\"content\":\"let me check\"}}]}\n\n",
    );
    at(80);
    send(s, "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"call_1\",\"type\":\"function\",\"function\":{\"name\":\"search\",\"arguments\":\"\"}}]}}]}\n\n");
    at(100);
    send(s, "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"{\\\"query\\\": \\\"rust\\\"}\"}}]}}]}\n\n");
    at(120);
    send(s, "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":1,\"id\":\"call_2\",\"type\":\"function\",\"function\":{\"name\":\"search\",\"arguments\":\"{\\\"query\\\": \\\"kdl\\\"}\"}}]}}]}\n\n");
    send(
        s,
        "data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\n\
         data: {\"choices\":[],\"usage\":{\"prompt_tokens\":8,\"completion_tokens\":20}}\n\n\
         data: [DONE]\n\n",
    );
}

#[test]
fn streamed_tool_call_fragments_are_counted_and_timed_exactly() {
    let _serial = serial();
    let port = serve(vec![answer_then_call_two]);
    let plan = format!(
        "plan \"calls\" {{ seed 1; }}\n\
         target \"http://127.0.0.1:{port}\" {{ model \"m\"; tools \"tools.json\"; tool-choice \"search\"; metrics #false; connections \"cold\"; }}\n\
         workload {{ tokenizer \"cl100k_base\"; input 8; output 20; }}\n\
         phase \"p\" {{ concurrency 1; requests 1; }}\n\
         sla {{ tool-calls max < 3; }}\n"
    );
    let run = run_in(dir_with_tools(TOOLS), &plan, &[]);
    assert_eq!(run.code(), 0, "{}{}", run.stdout(), run.stderr());
    let records = run.records();
    let r = &records[0];
    assert_eq!(r["tool_calls"], 2, "{r}");
    assert_eq!(r["finish_reason"], "tool_calls", "{r}");
    assert_eq!(
        r["chunk_kinds"],
        serde_json::json!([["answer", 1], ["tool_call", 3]]),
        "{r}"
    );
    let summary = run.summary();
    let near = |metric: &str, expected: f64| {
        let value = stat(&summary, "overall", metric, "p50");
        assert!((value - expected).abs() <= 5.0, "{metric} {value} ms");
    };
    near("ttft_ms", 30.0);
    // The answer's first words are output: TTFO is TTFT here.
    near("ttfo_ms", 30.0);
    near("tool_call_ttft_ms", 80.0);
}

#[test]
fn a_tools_file_that_is_not_a_list_of_functions_is_a_plan_mistake() {
    let plan = "target \"sim\" { tools \"tools.json\"; }\n\
         workload { input 8; output 4; }\n\
         phase \"p\" { concurrency 1; requests 1; }\n";
    for (tools, says) in [
        (r#"{"name": "search"}"#, "not a JSON list"),
        (r#"[{"type": "function"}]"#, "tool 0 is not"),
        ("[]", "lists no tool"),
    ] {
        let dir = dir_with_tools(tools);
        let path = dir.path().join("plan.kdl");
        std::fs::write(&path, plan).unwrap();
        let out = common::llmload().arg("check").arg(&path).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{tools}: {stderr}");
        assert!(stderr.contains(says), "{tools}: {stderr}");
    }
}

/// A plain answer in words, whole at once.
fn answer_in_words(s: &mut TcpStream) {
    send(s, SSE_HEAD);
    send(
        s,
        "data: {\"choices\":[{\"delta\":{\"content\":\"found it\"},\"finish_reason\":\"stop\"}]}\n\n\
         data: [DONE]\n\n",
    );
}

#[test]
fn an_agent_loop_sends_the_calls_back_with_their_results_after_the_tools_latency() {
    let _serial = serial();
    // Each request kept, in order: the second must carry the calls back. The turns come one at
    // a time, so the server answers them by how many it has seen.
    fn turns(_seen: &common::wire::Seen, stream: &mut TcpStream) {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static POSTS: AtomicUsize = AtomicUsize::new(0);
        match POSTS.fetch_add(1, Ordering::SeqCst) {
            0 => answer_then_call_two(stream),
            _ => answer_in_words(stream),
        }
    }
    let (port, bodies) = common::wire::capture(turns);
    let plan = format!(
        "plan \"agent\" {{ seed 5; }}\n\
         target \"http://127.0.0.1:{port}\" {{ model \"m\"; tools \"tools.json\"; metrics #false; connections \"cold\"; }}\n\
         workload {{ tokenizer \"cl100k_base\"; input 8; output 20;\n\
           conversation turns=3 think=\"100ms\" {{ tool-result tokens=50 latency=\"400ms\"; }} }}\n\
         phase \"p\" {{ concurrency 1; requests 1; }}\n"
    );
    let run = run_in(dir_with_tools(TOOLS), &plan, &[]);
    assert_eq!(run.code(), 0, "{}{}", run.stdout(), run.stderr());
    let records = run.records();
    assert_eq!(records.len(), 3, "{records:?}");
    let kinds: Vec<&str> = records
        .iter()
        .map(|r| r["turn_kind"].as_str().unwrap_or("-"))
        .collect();
    assert_eq!(kinds, ["user", "tool", "user"]);
    // The tools' latency before the tool turn, the user's think time before the next.
    let gap_ms = |before: &serde_json::Value, after: &serde_json::Value| {
        let ended = before["actual_send_us"].as_f64().unwrap() + before["e2e_us"].as_f64().unwrap();
        (after["actual_send_us"].as_f64().unwrap() - ended) / 1e3
    };
    let tool_gap = gap_ms(&records[0], &records[1]);
    assert!(
        (395.0..450.0).contains(&tool_gap),
        "tool latency {tool_gap} ms"
    );
    let think_gap = gap_ms(&records[1], &records[2]);
    assert!(
        (95.0..150.0).contains(&think_gap),
        "think time {think_gap} ms"
    );

    let bodies: Vec<serde_json::Value> = bodies.lock().unwrap().iter().map(|s| s.json()).collect();
    let messages = bodies[1]["messages"].as_array().unwrap();
    let roles: Vec<&str> = messages
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["user", "assistant", "tool", "tool"], "{messages:?}");
    let assistant = &messages[1];
    assert_eq!(assistant["content"], "let me check");
    assert_eq!(
        assistant["tool_calls"],
        serde_json::json!([
            {"id": "call_1", "type": "function", "function": {"name": "search", "arguments": "{\"query\": \"rust\"}"}},
            {"id": "call_2", "type": "function", "function": {"name": "search", "arguments": "{\"query\": \"kdl\"}"}}
        ])
    );
    assert_eq!(messages[2]["tool_call_id"], "call_1");
    assert_eq!(messages[3]["tool_call_id"], "call_2");
    // Each result is 50 tokens of its own text.
    let words = |m: &serde_json::Value| m["content"].as_str().unwrap().split_whitespace().count();
    assert!((45..=55).contains(&words(&messages[2])), "{}", messages[2]);
    assert_ne!(messages[2]["content"], messages[3]["content"]);
    // The turn after a tool turn answered in words is the user's: the calls stay in the
    // history, and the answer and a new message follow.
    let messages = bodies[2]["messages"].as_array().unwrap();
    let roles: Vec<&str> = messages
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(
        roles,
        ["user", "assistant", "tool", "tool", "assistant", "user"]
    );
    assert_eq!(messages[4]["content"], "found it");
    // The tool turn's planned prompt counts the history, the calls and both results.
    let planned = records[1]["input_tokens_planned"].as_u64().unwrap();
    assert!(planned >= 8 + 100, "{planned}");
    let summary = run.summary();
    let kinds: Vec<&str> = summary["by_turn_kind"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["user", "tool"]);
    assert_eq!(summary["by_turn_kind"][0]["calling_tools"], 1);
    let report = std::fs::read_to_string(run.out().join("report.md")).unwrap();
    assert!(report.contains("## By turn kind"), "{report}");
    // The run re-renders from its directory (its kept plan names the tools file unread).
    let again = common::llmload()
        .arg("report")
        .arg(run.out())
        .output()
        .unwrap();
    assert_eq!(
        again.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
}

#[test]
fn an_agent_loop_without_tools_to_call_is_a_plan_mistake() {
    let plan = "target \"sim\" { api \"chat\"; }\n\
         workload { input 8; output 4; conversation turns=3 { tool-result tokens=100 latency=\"1s\"; } }\n\
         phase \"p\" { concurrency 1; requests 1; }\n";
    let run = common::run_plan(plan, &[]);
    assert_eq!(run.code(), 2, "{}", run.stderr());
    assert!(
        run.stderr()
            .contains("add tools \"tools.json\" to the target"),
        "{}",
        run.stderr()
    );
    let plan = "target \"sim\" { api \"completions\"; tools \"tools.json\"; }\n\
         workload { input 8; output 4; }\n\
         phase \"p\" { concurrency 1; requests 1; }\n";
    let run = run_in(dir_with_tools(TOOLS), plan, &[]);
    assert_eq!(run.code(), 2, "{}", run.stderr());
    assert!(
        run.stderr().contains("cannot offer tools"),
        "{}",
        run.stderr()
    );
}
