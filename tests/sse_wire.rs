//! Streaming edge cases and error classes over a real socket: a hand-written HTTP server on
//! loopback writes exactly the bytes a scenario calls for (split events, CRLF, comments, a
//! usage-only chunk, broken streams), and the real binary is run against it.

mod common;
use common::*;

use common::wire::{read_request, respond, send, serve, SSE_HEAD};
use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::thread::sleep;
use std::time::Duration;

fn plan(requests: u32, timeout: &str) -> String {
    format!(
        "plan \"wire\" {{ seed 1 }}\ntarget \"http://127.0.0.1:9\" {{ model \"m\"; timeout \"{timeout}\"; metrics #false; connections \"cold\" }}\nworkload {{ input 8; output 3 }}\nphase \"p\" {{ concurrency 1; requests {requests} }}\nsla {{ error-rate < \"100%\" }}\n"
    )
}

#[test]
fn split_events_crlf_comments_multi_token_chunks_and_usage_only_chunk() {
    let port = serve(vec![|s| {
        send(s, SSE_HEAD);
        // A role-only first chunk (llama.cpp sends content null) and a keep-alive comment.
        send(s, "data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":null}}]}\r\n\r\n: ping\r\n\r\n");
        sleep(Duration::from_millis(40));
        send(
            s,
            "data: {\"choices\":[{\"delta\":{\"content\":\" the\"}}]}\r\n\r\n",
        );
        sleep(Duration::from_millis(20));
        // One event split across two reads; it counts when its second half arrives.
        send(s, "data: {\"choices\":[{\"delta\":{\"con");
        sleep(Duration::from_millis(20));
        send(s, "tent\":\" cat sat\"}}]}\r\n\r\n");
        sleep(Duration::from_millis(10));
        // Several events in one read: finish, usage-only (empty choices), [DONE].
        send(
            s,
            "data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"length\"}]}\n\ndata: {\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":3}}\n\ndata: [DONE]\n\n",
        );
    }]);
    let run = run_plan(
        &plan(1, "5s"),
        &["--target", &format!("http://127.0.0.1:{port}")],
    );
    let records = run.records();
    assert_eq!(records.len(), 1, "{}", run.stderr());
    let r = &records[0];
    assert!(r["error"].is_null(), "{r}");
    let ttft = r["ttft_us"].as_u64().unwrap();
    assert!(
        (40_000..60_000).contains(&ttft),
        "ttft {ttft} µs: the role-only chunk must not count"
    );
    let chunks = r["chunks"].as_array().unwrap();
    assert_eq!(chunks.len(), 2);
    let second = chunks[1][0].as_u64().unwrap();
    assert!(
        second - ttft >= 38_000,
        "the split event is timed by its completing read: {}",
        second - ttft
    );
    // " cat sat" is two tokens: usage says 3 in all, spread over the chunks by the tokenizer.
    assert_eq!(chunks[0][1], 1);
    assert_eq!(chunks[1][1], 2);
    assert_eq!(r["chunk_tokens"], "usage_by_tokenizer");
    assert_eq!(r["completion_tokens"], 3);
    assert_eq!(r["prompt_tokens"], 9);
    assert_eq!(r["token_source"], "usage");
    assert_eq!(r["finish_reason"], "length");
    let s = run.summary();
    assert_eq!(
        s["overall"]["metrics"]["itl_ms"]["count"], 2,
        "a 2-token chunk gives 2 ITL samples"
    );
}

#[test]
fn every_failure_is_classified_and_recorded() {
    let scenarios: Vec<fn(&mut TcpStream)> = vec![
        |s| {
            respond(
                s,
                "429 Too Many Requests",
                "{\"error\":{\"message\":\"slow down\",\"type\":\"x\"}}",
            )
        },
        |s| {
            respond(
                s,
                "400 Bad Request",
                "{\"error\":{\"message\":\"exceed_context_size_error\",\"code\":400}}",
            )
        },
        |s| respond(s, "503 Service Unavailable", "busy"),
        |s| {
            send(s, SSE_HEAD);
            send(
                s,
                "data: {\"choices\":[{\"delta\":{\"content\":\" a\"}}]}\n\n",
            );
            // The connection drops mid-stream: no finish_reason, no [DONE].
        },
        |s| {
            send(s, SSE_HEAD);
            send(
                s,
                "data: {\"choices\":[{\"delta\":{\"content\":\" a\"}}]}\n\ndata: {not json\n\n",
            );
        },
        |s| {
            send(s, SSE_HEAD);
            send(s, "data: {\"choices\":[{\"delta\":{\"content\":\" a\"}}]}\n\ndata: {\"error\":{\"message\":\"engine died\"}}\n\n");
        },
        |s| {
            send(s, SSE_HEAD);
            send(
                s,
                "data: {\"choices\":[{\"delta\":{\"content\":\" a\"}}]}\n\n",
            );
            sleep(Duration::from_millis(900));
        },
        |s| {
            send(s, SSE_HEAD);
            send(s, "data: {\"choices\":[{\"delta\":{\"content\":\" a b c\"},\"finish_reason\":\"length\"}],\"usage\":{\"prompt_tokens\":8,\"completion_tokens\":3}}\n\ndata: [DONE]\n\n");
        },
    ];
    let port = serve(scenarios);
    let run = run_plan(
        &plan(8, "400ms"),
        &["--target", &format!("http://127.0.0.1:{port}/v1")],
    );
    let mut records = run.records();
    assert_eq!(run.code(), 0, "{}\n{records:#?}", run.stderr());
    records.sort_by_key(|r| r["seq"].as_u64());
    let classes: Vec<&str> = records
        .iter()
        .map(|r| r["error"].as_str().unwrap_or("ok"))
        .collect();
    assert_eq!(
        classes,
        [
            "http_429",
            "http_4xx",
            "http_5xx",
            "stream_broken",
            "malformed",
            "stream_error",
            "timeout",
            "ok"
        ]
    );
    assert_eq!(records[0]["http_status"], 429);
    assert!(records[0]["error_detail"]
        .as_str()
        .unwrap()
        .contains("slow down"));
    assert!(records[1]["error_detail"]
        .as_str()
        .unwrap()
        .contains("exceed_context_size_error"));
    let s = run.summary();
    // The 429 is throttled: counted apart from the six that failed.
    assert_eq!(s["overall"]["requests"]["failed"], 6);
    assert_eq!(s["overall"]["requests"]["throttled"], 1);
    assert_eq!(s["overall"]["requests"]["ok"], 1);
    assert!((s["overall"]["rates"]["error_rate"].as_f64().unwrap() - 6.0 / 8.0).abs() < 1e-9);
    assert!((s["overall"]["rates"]["throttled_rate"].as_f64().unwrap() - 1.0 / 8.0).abs() < 1e-9);
    assert!((s["overall"]["rates"]["timeout_rate"].as_f64().unwrap() - 1.0 / 8.0).abs() < 1e-9);
    // Failed requests enter no latency but TTFT, and TTFT only when they got a first token:
    // the four that broke, went bad or timed out after " a" (docs/metrics.md).
    assert_eq!(s["overall"]["metrics"]["ttft_ms"]["count"], 5);
    assert_eq!(s["overall"]["requests"]["failed_after_first_token"], 4);
    assert_eq!(s["overall"]["metrics"]["e2e_ms"]["count"], 1);
}

/// A server that keeps connections alive, but drops the second request it reads without
/// answering, as llama.cpp's server does when a request lands on a short-lived thread. The
/// request is sent again, with the same body.
#[test]
fn a_keep_alive_connection_closed_before_answering_is_retried_once_and_counted() {
    use std::sync::{Arc, Mutex};
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let bodies = Arc::new(Mutex::new(Vec::<Vec<u8>>::new()));
    let received = bodies.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let bodies = bodies.clone();
            std::thread::spawn(move || loop {
                let Some(body) = read_request(&mut stream) else {
                    return;
                };
                let served = {
                    let mut bodies = bodies.lock().unwrap();
                    bodies.push(body);
                    bodies.len() - 1
                };
                if served == 1 {
                    return; // drop the connection with the request unanswered
                }
                let body = "data: {\"choices\":[{\"delta\":{\"content\":\" a b c\"},\"finish_reason\":\"length\"}],\"usage\":{\"prompt_tokens\":8,\"completion_tokens\":3}}\n\ndata: [DONE]\n\n";
                let head = format!("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: {}\r\n\r\n", body.len());
                if stream.write_all(head.as_bytes()).is_err()
                    || stream.write_all(body.as_bytes()).is_err()
                {
                    return;
                }
            });
        }
    });
    let run = run_plan(
        &plan(3, "5s"),
        &["--target", &format!("http://127.0.0.1:{port}")],
    );
    let records = run.records();
    assert_eq!(run.code(), 0, "{}\n{records:#?}", run.stderr());
    assert!(records.iter().all(|r| r["error"].is_null()));
    let retries: u64 = records
        .iter()
        .map(|r| r["connection_retries"].as_u64().unwrap())
        .sum();
    assert_eq!(retries, 1);
    // The dropped request's body came again, byte for byte, and each request was answered once.
    let received = received.lock().unwrap().clone();
    assert_eq!(received.len(), 4);
    assert!(
        received[1].starts_with(b"{"),
        "{:?}",
        String::from_utf8_lossy(&received[1])
    );
    assert!(received[2..].contains(&received[1]));
    let mut answered = received.clone();
    answered.remove(1);
    answered.sort();
    answered.dedup();
    assert_eq!(answered.len(), 3, "three distinct requests answered");
    let s = run.summary();
    assert_eq!(s["overall"]["requests"]["connection_retries"], 1);
    assert!(s["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .any(|w| w["code"] == "connection-retries"));
}

/// A server that ignores ignore_eos (as hosted APIs do): it stops early with finish_reason
/// "stop". The run passes its SLA, but is not trustworthy: `--fail-on-warning` fails the gate.
#[test]
fn fail_on_warning_turns_an_untrustworthy_pass_into_a_failure() {
    let stop_early: fn(&mut TcpStream) = |s| {
        send(s, SSE_HEAD);
        send(s, "data: {\"choices\":[{\"delta\":{\"content\":\" a\"}}]}\n\ndata: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: {\"choices\":[],\"usage\":{\"prompt_tokens\":8,\"completion_tokens\":1}}\n\ndata: [DONE]\n\n");
    };
    let exact = plan(2, "5s").replace("output 3", "output 3 ignore-eos=#true");
    for (flag, expected) in [(None, 0), (Some("--fail-on-warning"), 1)] {
        let port = serve(vec![stop_early, stop_early]);
        let target = format!("http://127.0.0.1:{port}");
        let mut args = vec!["--target", target.as_str()];
        args.extend(flag);
        let run = run_plan(&exact, &args);
        assert_eq!(
            run.code(),
            expected,
            "{flag:?}: {}{}",
            run.stdout(),
            run.stderr()
        );
        assert!(
            run.stdout().contains("finish_reason \"stop\""),
            "{}",
            run.stdout()
        );
        let codes: Vec<String> = run.summary()["warnings"]
            .as_array()
            .unwrap()
            .iter()
            .map(|w| w["code"].as_str().unwrap().to_string())
            .collect();
        assert!(
            codes.contains(&"finish-stop".to_string())
                && codes.contains(&"output-tokens".to_string()),
            "{codes:?}"
        );
    }
}
