//! Every API dialect end to end: chat, completions, Responses and Anthropic Messages against the
//! embedded simulator (which speaks each in its own events), side by side in one run; the
//! bytes each dialect sends, read by a capturing server; a route the target does not serve.

mod common;

use std::net::TcpStream;

use common::wire::{capture, respond, send, Seen, SSE_HEAD};
use common::{phase, run_plan, stat};

/// Three dialects, one phase each, against one simulated reasoning model: each reads its own
/// events into the same measures, with the server's exact counts.
fn dialects_plan(stream: bool, tools: bool) -> String {
    let tools = if tools {
        r#"body "{\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"lookup\", \"parameters\": {\"type\": \"object\"}}}]}""#
    } else {
        ""
    };
    format!(
        r#"plan "dialects" {{ seed 5 }}
target "sim" {{ api "chat"; stream #{stream}; timeout "10s"; {tools} }}
sim {{ ttft "15ms"; itl "2ms"; reasoning 6 in-usage=#true; answer-as "served-as" }}
workload {{ tokenizer "cl100k_base"; input 48; output 24 }}
phase "chat" {{ concurrency 2; requests 6 }}
phase "responses" {{ api "responses"; concurrency 2; requests 6 }}
phase "messages" {{ api "messages"; concurrency 2; requests 6 }}
"#
    )
}

#[test]
fn three_dialects_in_three_phases_measure_alike_and_the_report_compares_them() {
    for stream in [true, false] {
        let run = run_plan(&dialects_plan(stream, false), &[]);
        assert_eq!(run.code(), 0, "stream {stream}: {}", run.stderr());
        let summary = run.summary();
        for name in ["chat", "responses", "messages"] {
            let scope = phase(&summary, name);
            assert_eq!(scope["requests"]["ok"], 6, "{name}: {scope}");
            // The server's own counts, read from each dialect's usage fields.
            assert_eq!(
                scope["tokens"]["counted_by_usage"], 6,
                "{name} (stream {stream})"
            );
            assert_eq!(scope["tokens"]["output_observed_mean"], 24.0, "{name}");
            assert_eq!(scope["tokens"]["input_observed_mean"], 48.0, "{name}");
            assert_eq!(scope["finish_reasons"]["length"], 6, "{name}: {scope}");
            // The model each answer named, read from where each dialect's events put it.
            assert_eq!(
                scope["models"],
                serde_json::json!({"served-as": 6}),
                "{name} (stream {stream})"
            );
            if stream {
                // Thinking first, then the answer: the first answer token is later than the
                // first token, in every dialect's events.
                let ttft = stat(&summary, name, "ttft_ms", "p50");
                let ttfo = stat(&summary, name, "ttfo_ms", "p50");
                assert!(ttfo > ttft + 5.0, "{name}: ttft {ttft} ttfo {ttfo}");
            }
        }
        let records = run.records();
        assert!(records
            .iter()
            .all(|r| r["reasoning_tokens"] == 6 && r["error"].is_null()));
        let report = std::fs::read_to_string(run.out().join("report.md")).unwrap();
        // Each phase says the API it spoke when it is not the run's.
        assert!(report.contains("## Phase `chat`: "), "{report}");
        for name in ["responses", "messages"] {
            assert!(
                report.contains(&format!("## Phase `{name}`: concurrency 2, api `{name}`")),
                "{report}"
            );
            assert_eq!(phase(&summary, name)["api"], name);
        }
        assert!(phase(&summary, "chat").get("api").is_none());
        // Answered under another name than the plan asked: said once, as a note.
        let notes: Vec<&serde_json::Value> = summary["warnings"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|w| w["code"] == "model-answered")
            .collect();
        assert_eq!(notes.len(), 1, "{}", summary["warnings"]);
        assert_eq!(notes[0]["severity"], "note");
        assert!(
            notes[0]["message"]
                .as_str()
                .unwrap()
                .contains("`served-as` (18)"),
            "{}",
            notes[0]
        );
        assert!(
            report.contains("asked; the answers named `served-as` (18) |"),
            "{report}"
        );
    }
}

#[test]
fn tool_calls_come_back_from_every_dialect() {
    let run = run_plan(&dialects_plan(true, true), &[]);
    assert_eq!(run.code(), 0, "{}", run.stderr());
    let summary = run.summary();
    for name in ["chat", "responses", "messages"] {
        let scope = phase(&summary, name);
        assert_eq!(scope["finish_reasons"]["tool_calls"], 6, "{name}: {scope}");
    }
    assert!(run
        .records()
        .iter()
        .all(|r| r["tool_calls"] == 1 && r["error"].is_null()));
}

#[test]
fn an_overloaded_server_is_counted_apart_from_its_faults() {
    let plan = r#"plan "busy" { seed 2 }
target "sim" { api "messages"; timeout "10s" }
sim { ttft "5ms"; itl "1ms"; faults { overloaded "40%" } }
workload { input 32; output 8 }
phase "p" { concurrency 4; requests 40 }
"#;
    let run = run_plan(plan, &[]);
    let summary = run.summary();
    let overloaded = summary["overall"]["errors"]["overloaded"]
        .as_u64()
        .unwrap_or(0);
    assert!(
        (5..=30).contains(&overloaded),
        "{overloaded} of 40: {}",
        summary["overall"]["errors"]
    );
    assert!(summary["overall"]["errors"].get("http_5xx").is_none());
    let detail = run
        .records()
        .iter()
        .find(|r| r["error"] == "overloaded")
        .map(|r| r["error_detail"].as_str().unwrap_or("").to_string())
        .unwrap();
    assert!(detail.contains("529"), "{detail}");
}

fn anthropic_stream(seen: &Seen, stream: &mut TcpStream) {
    if seen.line.starts_with("GET") {
        respond(stream, "404 Not Found", "{}");
        return;
    }
    send(
        stream,
        &format!(
            "{SSE_HEAD}event: message_start\ndata: {{\"type\":\"message_start\",\"message\":{{\"usage\":{{\"input_tokens\":3,\"cache_read_input_tokens\":5,\"output_tokens\":1}}}}}}\n\n\
             event: content_block_start\ndata: {{\"type\":\"content_block_start\",\"index\":0,\"content_block\":{{\"type\":\"text\",\"text\":\"\"}}}}\n\n\
             event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{{\"type\":\"text_delta\",\"text\":\"Hi\"}}}}\n\n\
             event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{{\"type\":\"text_delta\",\"text\":\" there\"}}}}\n\n\
             event: content_block_stop\ndata: {{\"type\":\"content_block_stop\",\"index\":0}}\n\n\
             event: message_delta\ndata: {{\"type\":\"message_delta\",\"delta\":{{\"stop_reason\":\"end_turn\"}},\"usage\":{{\"output_tokens\":2}}}}\n\n\
             event: message_stop\ndata: {{\"type\":\"message_stop\"}}\n\n"
        ),
    );
}

/// Anthropic's key goes in `x-api-key` with the API's version, never as a bearer token; the
/// system prompt in its own field; cache reads count as cached prompt tokens.
#[test]
fn anthropic_requests_carry_their_own_headers_and_fields() {
    let (port, seen) = capture(anthropic_stream);
    let plan = format!(
        r#"plan "anthropic" {{ seed 1 }}
target "http://127.0.0.1:{port}" {{ api "messages"; model "claude-x"; api-key env="LLMLOAD_TEST_ANTHROPIC"; metrics #false; connections "cold"; sampling temperature=0.5 stop="END" }}
workload {{ system "You are terse."; input 32; output 8 }}
phase "p" {{ concurrency 1; requests 2 }}
"#
    );
    let dir = tempfile::tempdir().unwrap();
    let path = common::write_plan(dir.path(), &plan);
    let out = dir.path().join("out");
    let output = common::run_file(
        &path,
        &out,
        &[],
        &[("LLMLOAD_TEST_ANTHROPIC", "sk-ant-secret".as_ref())],
    );
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let seen = seen.lock().unwrap().clone();
    let posts: Vec<&Seen> = seen.iter().filter(|s| s.line.starts_with("POST")).collect();
    assert_eq!(posts.len(), 2);
    let first = posts[0];
    assert!(
        first.line.starts_with("POST /v1/messages "),
        "{}",
        first.line
    );
    assert_eq!(first.header("x-api-key"), Some("sk-ant-secret"));
    assert_eq!(first.header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(first.header("authorization"), None);
    let body = first.json();
    assert_eq!(body["model"], "claude-x");
    assert_eq!(body["max_tokens"], 8);
    assert!(
        body["system"].as_str().is_some_and(|s| !s.is_empty()),
        "{body}"
    );
    assert_eq!(body["messages"][0]["role"], "user");
    assert_eq!(body["stop_sequences"], serde_json::json!(["END"]));
    assert_eq!(body["temperature"], 0.5);
    let records = common::read_records(&out);
    for record in &records {
        assert_eq!(record["prompt_tokens"], 8, "{record}");
        assert_eq!(record["cached_tokens"], 5, "{record}");
        assert_eq!(record["completion_tokens"], 2, "{record}");
        assert_eq!(record["finish_reason"], "stop", "{record}");
    }
    // The key is in no file of the run.
    for entry in std::fs::read_dir(&out).unwrap() {
        let text = std::fs::read(entry.unwrap().path()).unwrap_or_default();
        assert!(!String::from_utf8_lossy(&text).contains("sk-ant-secret"));
    }
}

fn not_found(_: &Seen, stream: &mut TcpStream) {
    respond(stream, "404 Not Found", r#"{"detail":"Not Found"}"#);
}

/// A target that does not serve the dialect's route is refused at its first answer, naming
/// the path: not after a schedule of the same 404.
#[test]
fn a_route_the_target_does_not_serve_refuses_the_run_at_the_first_answer() {
    let (port, seen) = capture(not_found);
    let plan = format!(
        r#"plan "unserved" {{ seed 1 }}
target "http://127.0.0.1:{port}" {{ api "responses"; model "m"; metrics #false; connections "cold" }}
workload {{ input 16; output 8 }}
phase "p" {{ rate 20; duration "30s" }}
"#
    );
    let started = std::time::Instant::now();
    let run = run_plan(&plan, &[]);
    assert_eq!(run.code(), 3, "{}", run.stderr());
    assert!(
        started.elapsed() < std::time::Duration::from_secs(15),
        "took {:?}",
        started.elapsed()
    );
    let sent = seen.lock().unwrap().len();
    assert!(sent < 100, "{sent} requests were sent");
    let report = std::fs::read_to_string(run.out().join("report.md")).unwrap();
    assert!(report.contains("NOT CARRIED OUT"), "{report}");
    assert!(report.contains("/v1/responses"), "{report}");
    assert!(report.contains("HTTP 404"), "{report}");
    let summary = run.summary();
    assert_eq!(summary["verdict"]["exit_code"], 3, "{}", summary["verdict"]);
}

/// A gateway that routes one model's name to two: the run's numbers mix them, and a warning
/// says so, with each model's share.
#[test]
fn answers_from_several_models_are_a_warning() {
    let plan = common::sim_plan(
        r#"ttft "2ms"; itl "1ms"; answer-as "big" "small""#,
        "input 8; output 4",
        r#"phase "p" { concurrency 2; requests 10 }"#,
        "",
    );
    let run = run_plan(&plan, &[]);
    assert_eq!(run.code(), 0, "{}", run.stderr());
    let summary = run.summary();
    assert_eq!(
        summary["overall"]["models"],
        serde_json::json!({"big": 5, "small": 5})
    );
    let warning = common::warning_of(&summary, "several-models").expect("several-models");
    assert_eq!(warning["severity"], "warning");
    let message = warning["message"].as_str().unwrap();
    assert!(message.contains("`big` (5), `small` (5)"), "{message}");
    assert!(common::warning_of(&summary, "model-answered").is_none());
}

/// A phase may not speak an API that cannot carry what the plan asks of its requests.
#[test]
fn a_phase_api_that_cannot_carry_the_plan_is_a_plan_mistake() {
    let plan = r#"plan "p" { seed 1 }
target "sim" { api "chat" }
workload { input 16; output 8 ignore-eos=#true }
phase "a" { concurrency 1; requests 1 }
phase "b" { api "messages"; concurrency 1; requests 1 }
"#;
    let run = run_plan(plan, &[]);
    assert_eq!(run.code(), 2);
    let stderr = run.stderr();
    assert!(
        stderr.contains("api \"messages\" cannot be asked for an exact number"),
        "{stderr}"
    );
    assert!(stderr.contains("plan.kdl:5"), "{stderr}");
}

/// Embeddings and rerank against the simulator: a batch per request, every input answered,
/// the server's prompt counts exactly the plan's, per-input latency and inputs per second.
#[test]
fn embeddings_and_rerank_batches_are_counted_per_input() {
    for (api, workload) in [
        (
            "embeddings",
            "input { bucket 32 weight=1; bucket 96 weight=1 }; batch min=2 max=9",
        ),
        ("rerank", "input 64; query 16; batch 6"),
    ] {
        let plan = format!(
            r#"plan "batches" {{ seed 4 }}
target "sim" {{ api "{api}"; timeout "10s" }}
sim {{ ttft "5ms"; itl "1ms" }}
workload {{ tokenizer "cl100k_base"; {workload} }}
phase "p" {{ concurrency 3; requests 30 }}
sla {{ e2e-per-input max < "1s"; input-throughput > 1 }}
"#
        );
        let run = run_plan(&plan, &[]);
        assert_eq!(run.code(), 0, "{api}: {}", run.stderr());
        let records = run.records();
        let mut sizes = std::collections::BTreeSet::new();
        for record in &records {
            assert!(record["error"].is_null(), "{api}: {record}");
            assert_eq!(
                record["prompt_tokens"], record["input_tokens_planned"],
                "{api}: {record}"
            );
            assert_eq!(record["output_tokens_planned"], 0, "{api}");
            sizes.insert(record["inputs"].as_u64().unwrap());
        }
        if api == "embeddings" {
            // Drawn per request within min..=max.
            assert!(
                sizes.len() > 2 && sizes.iter().all(|n| (2..=9).contains(n)),
                "{sizes:?}"
            );
        } else {
            assert_eq!(sizes.into_iter().collect::<Vec<_>>(), vec![6]);
            // Each document is read with the query.
            assert!(records
                .iter()
                .all(|r| r["input_tokens_planned"] == 6 * (64 + 16)));
        }
        let summary = run.summary();
        // The answers name the model asked (the simulator's default): read, and no note.
        let models = summary["overall"]["models"].as_object().unwrap();
        assert_eq!(
            models.values().collect::<Vec<_>>(),
            [30],
            "{api}: {models:?}"
        );
        assert!(records.iter().all(|r| r["model"].is_string()), "{api}");
        assert!(
            common::warning_of(&summary, "model-answered").is_none(),
            "{api}"
        );
        let inputs: u64 = records.iter().map(|r| r["inputs"].as_u64().unwrap()).sum();
        let wall = summary["overall"]["wall_s"].as_f64().unwrap();
        let per_s = summary["overall"]["throughput"]["inputs_per_s"]
            .as_f64()
            .unwrap();
        assert!(
            (per_s - inputs as f64 / wall).abs() < 1e-6 * per_s.max(1.0),
            "{api}"
        );
        let e2e = stat(&summary, "overall", "e2e_ms", "p50");
        let per_input = stat(&summary, "overall", "e2e_per_input_ms", "p50");
        assert!(
            per_input > 0.0 && per_input < e2e,
            "{api}: {per_input} vs {e2e}"
        );
        // Nothing to stream is no lack: no "not streamed" note.
        assert!(!run.stderr().contains("not streamed"), "{}", run.stderr());
        // Every report's first table and its by-size table are shaped for batches: no token
        // timings, no output tokens, no table keyed on a batch's total tokens.
        let report = std::fs::read_to_string(run.out().join("report.md")).unwrap();
        let html = std::fs::read_to_string(run.out().join("report.html")).unwrap();
        for (name, text) in [("report.md", &report), ("report.html", &html)] {
            let heads: Vec<&str> = text
                .lines()
                .filter(|l| l.starts_with("| ") || l.contains("<th>"))
                .collect();
            for absent in ["TTFT", "ITL", "output tok"] {
                assert!(
                    !heads.iter().any(|h| h.contains(absent)),
                    "{api}, {name}: a column of {absent:?}: {heads:#?}"
                );
            }
            assert!(!text.contains("By input length"), "{api}, {name}");
            for present in ["E2E/input p50 (ms)", "inputs/s"] {
                assert!(text.contains(present), "{api}, {name} lacks {present:?}");
            }
            // A table of one size would repeat the phase's row.
            assert_eq!(
                text.contains("By batch size"),
                api == "embeddings",
                "{api}, {name}"
            );
        }
        // One row per batch size sent, each counted.
        let by_batch = summary["by_batch"].as_array().unwrap();
        let sizes_sent: std::collections::BTreeSet<u64> = records
            .iter()
            .map(|r| r["inputs"].as_u64().unwrap())
            .collect();
        let rows: Vec<u64> = by_batch
            .iter()
            .map(|b| b["inputs"].as_u64().unwrap())
            .collect();
        assert_eq!(rows, sizes_sent.into_iter().collect::<Vec<_>>(), "{api}");
        let counted: u64 = by_batch.iter().map(|b| b["ok"].as_u64().unwrap()).sum();
        assert_eq!(counted, 30, "{api}");
        assert!(summary["by_input"].as_array().unwrap().is_empty(), "{api}");
        assert!(report.contains("E2E per input"), "{report}");
        // The terminal's table is shaped for batches: E2E, per input, inputs/s; no TTFT or
        // ITL columns of dashes.
        let terminal = run.stdout();
        let head = terminal.lines().find(|l| l.starts_with("phase ")).unwrap();
        assert!(
            head.contains("E2E/input p50")
                && head.contains("inputs/s")
                && !head.contains("TTFT")
                && !head.contains("ITL"),
            "{api}: {head}"
        );
    }
}

fn one_embedding_for_three(seen: &Seen, stream: &mut TcpStream) {
    let _ = seen;
    respond(
        stream,
        "200 OK",
        r#"{"object":"list","data":[{"object":"embedding","index":0,"embedding":[0.1,0.2]}],"usage":{"prompt_tokens":9,"total_tokens":9}}"#,
    );
}

/// An answer that covers fewer inputs than the request carried is not an answer.
#[test]
fn an_embeddings_answer_missing_inputs_is_malformed() {
    let (port, seen) = capture(one_embedding_for_three);
    let plan = format!(
        r#"plan "short" {{ seed 1 }}
target "http://127.0.0.1:{port}" {{ api "embeddings"; model "e"; metrics #false; connections "cold" }}
workload {{ input 8; batch 3 }}
phase "p" {{ concurrency 1; requests 2 }}
"#
    );
    let run = run_plan(&plan, &[]);
    let records = run.records();
    assert_eq!(records.len(), 2, "{}", run.stderr());
    for record in &records {
        assert_eq!(record["error"], "malformed", "{record}");
        assert!(
            record["error_detail"]
                .as_str()
                .unwrap()
                .contains("carried 3 inputs and the answer covers 1"),
            "{record}"
        );
    }
    let body = seen.lock().unwrap()[0].json();
    assert_eq!(body["input"].as_array().map(Vec::len), Some(3), "{body}");
}

/// What a batch API cannot do, and what a generating one cannot, are plan mistakes.
#[test]
fn batch_workloads_and_apis_must_agree() {
    for (target, workload, expected) in [
        ("api \"embeddings\"", "input 8", "has no `batch`"),
        (
            "api \"embeddings\"",
            "input 8; batch 4; output 16",
            "generates no output",
        ),
        ("api \"rerank\"", "input 8; batch 4", "has no `query`"),
        (
            "api \"chat\"",
            "input 8; output 8; batch 4",
            "are for the embeddings and rerank APIs",
        ),
        (
            "api \"embeddings\"; stream #true",
            "input 8; batch 4",
            "does not stream",
        ),
        (
            "api \"embeddings\"",
            "input 8; batch min=5 max=2",
            "min above max",
        ),
    ] {
        let plan = format!(
            "plan \"p\" {{ seed 1 }}\ntarget \"sim\" {{ {target} }}\nworkload {{ {workload} }}\nphase \"a\" {{ concurrency 1; requests 1 }}\n"
        );
        let run = run_plan(&plan, &[]);
        assert_eq!(run.code(), 2, "{target} / {workload}: {}", run.stderr());
        // Diagnostics wrap at the terminal's width: read them as one line.
        let said = run
            .stderr()
            .replace('│', " ")
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        assert!(said.contains(expected), "{expected}: {}", run.stderr());
    }
}
