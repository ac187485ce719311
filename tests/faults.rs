//! The fault matrix: every way a server (or the client's own machine) can fail a request, run
//! through the real binary against a hostile hand-written server on loopback. For each: the
//! error class, the exit code, exactly one record per request sent, and a report that exists.
//! docs/reliability.md lists the same matrix.

mod common;
use common::wire::{send, serve, SSE_HEAD};
use common::*;

use std::net::TcpStream;
use std::thread::sleep;
use std::time::{Duration, Instant};

/// Requests each case sends.
const REQUESTS: usize = 3;

fn plan(timeout: &str, target_extra: &str, workload_extra: &str) -> String {
    format!(
        "plan \"faults\" {{ seed 1 }}\ntarget \"http://127.0.0.1:9\" {{ model \"m\"; timeout \"{timeout}\"; api-key env=\"FAULTS_KEY\"; metrics #false; connections \"cold\"; {target_extra} }}\nworkload {{ input 8; output 8 {workload_extra} }}\nphase \"p\" {{ concurrency 1; requests {REQUESTS} }}\nsla {{ error-rate < \"100%\" }}\n"
    )
}

const KEY: &str = "sk-test-0123456789abcdefghijklmnopqrstuvwxyz";

struct Case {
    name: &'static str,
    scenario: fn(&mut TcpStream),
    timeout: &'static str,
    target_extra: &'static str,
    /// The class every request gets ("ok" for none).
    class: &'static str,
    exit: i32,
    /// Text the first record's error detail holds.
    detail: &'static str,
}

fn cases() -> Vec<Case> {
    let case = |name, scenario, class, exit, detail| Case {
        name,
        scenario,
        timeout: "2s",
        target_extra: "",
        class,
        exit,
        detail,
    };
    vec![
        case(
            "http 500",
            |s| {
                common::wire::respond(
                    s,
                    "500 Internal Server Error",
                    "{\"error\":{\"message\":\"boom\"}}",
                )
            },
            "http_5xx",
            3,
            "boom",
        ),
        case(
            "http 429",
            |s| {
                common::wire::respond(
                    s,
                    "429 Too Many Requests",
                    "{\"error\":{\"message\":\"slow down\"}}",
                )
            },
            "http_429",
            3,
            "slow down",
        ),
        case(
            "http 400",
            |s| {
                common::wire::respond(
                    s,
                    "400 Bad Request",
                    "{\"error\":{\"message\":\"exceed_context_size_error\"}}",
                )
            },
            "http_4xx",
            3,
            "exceed_context_size_error",
        ),
        case(
            "401 echoing the API key",
            |s| {
                common::wire::respond(s, "401 Unauthorized", &format!("{{\"error\":{{\"message\":\"Incorrect API key provided: {KEY}. You can find your API key at …\"}}}}"))
            },
            "http_4xx",
            3,
            "Incorrect API key provided: [redacted]",
        ),
        case(
            "closed mid-stream",
            |s| {
                send(s, SSE_HEAD);
                send(
                    s,
                    "data: {\"choices\":[{\"delta\":{\"content\":\" a\"}}]}\n\n",
                );
            },
            "stream_broken",
            3,
            "without a finish_reason",
        ),
        case(
            "malformed chunk",
            |s| {
                send(s, SSE_HEAD);
                send(
                    s,
                    "data: {\"choices\":[{\"delta\":{\"content\":\" a\"}}]}\n\ndata: {not json\n\n",
                );
            },
            "malformed",
            3,
            "not valid JSON",
        ),
        case(
            "error event mid-stream",
            |s| {
                send(s, SSE_HEAD);
                send(s, "data: {\"choices\":[{\"delta\":{\"content\":\" a\"}}]}\n\ndata: {\"error\":{\"message\":\"engine died\"}}\n\n");
            },
            "stream_error",
            3,
            "engine died",
        ),
        Case {
            timeout: "300ms",
            ..case(
                "stall past the timeout",
                |s| {
                    send(s, SSE_HEAD);
                    send(
                        s,
                        "data: {\"choices\":[{\"delta\":{\"content\":\" a\"}}]}\n\n",
                    );
                    sleep(Duration::from_millis(800));
                },
                "timeout",
                3,
                "timeout",
            )
        },
        Case {
            timeout: "300ms",
            ..case(
                "silent accept",
                |_| sleep(Duration::from_millis(800)),
                "timeout",
                3,
                "timeout",
            )
        },
        Case {
            timeout: "300ms",
            ..case(
                "trickling body",
                |s| {
                    send(s, SSE_HEAD);
                    for _ in 0..40 {
                        send(s, ":");
                        sleep(Duration::from_millis(20));
                    }
                },
                "timeout",
                3,
                "timeout",
            )
        },
        case(
            "a 1 MB answer of one character",
            |s| {
                send(s, SSE_HEAD);
                let chunk = format!(
                    "data: {{\"choices\":[{{\"delta\":{{\"content\":\"{}\"}}}}]}}\n\n",
                    "a".repeat(256)
                );
                let burst = chunk.repeat(64);
                for _ in 0..64 {
                    send(s, &burst);
                }
                send(s, "data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"length\"}]}\n\ndata: [DONE]\n\n");
            },
            "ok",
            0,
            "",
        ),
        case(
            "a 10 MB line",
            |s| {
                send(s, SSE_HEAD);
                let line = format!(
                    "data: {{\"choices\":[{{\"delta\":{{\"content\":\"{}\"}}}}]}}\n\n",
                    "a".repeat(10 << 20)
                );
                send(s, &line);
            },
            "too_large",
            3,
            "longer than max-line",
        ),
        case(
            "a line that never ends",
            |s| {
                send(s, SSE_HEAD);
                send(s, "data: ");
                let block = "b".repeat(64 << 10);
                for _ in 0..64 {
                    send(s, &block);
                }
            },
            "too_large",
            3,
            "longer than max-line",
        ),
        Case {
            target_extra: "max-body \"64KiB\"",
            ..case(
                "a body past max-body",
                |s| {
                    send(s, SSE_HEAD);
                    let chunk =
                        "data: {\"choices\":[{\"delta\":{\"content\":\" a\"}}]}\n\n".repeat(1000);
                    for _ in 0..10 {
                        send(s, &chunk);
                    }
                },
                "too_large",
                3,
                "larger than max-body",
            )
        },
        case(
            "HTML instead of a stream",
            |s| {
                send(s, "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 37\r\nConnection: close\r\n\r\n<html><body>Bad gateway</body></html>");
            },
            "malformed",
            3,
            "content-type text/html, not an event stream: \"<html>",
        ),
        case(
            "JSON instead of a stream",
            |s| {
                let body =
                    "{\"choices\":[{\"message\":{\"content\":\"hi\"},\"finish_reason\":\"stop\"}]}";
                send(s, &format!("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len()));
            },
            "malformed",
            3,
            "content-type application/json",
        ),
    ]
}

/// Every fault, one run each: the class, the exit code, one record per request, a report.
#[test]
fn every_fault_has_its_class_its_exit_code_its_records_and_a_report() {
    for case in cases() {
        let port = serve(vec![case.scenario; REQUESTS]);
        let dir = tempfile::tempdir().unwrap();
        let path = write_plan(dir.path(), &plan(case.timeout, case.target_extra, ""));
        let out = dir.path().join("out");
        let target = format!("http://127.0.0.1:{port}");
        let output = run_file(
            &path,
            &out,
            &["--target", &target],
            &[("FAULTS_KEY", std::ffi::OsStr::new(KEY))],
        );
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        let name = case.name;
        assert_eq!(output.status.code(), Some(case.exit), "{name}: {stderr}");
        let records = read_records(&out);
        assert_eq!(records.len(), REQUESTS, "{name}: one record per request");
        for record in &records {
            assert_eq!(
                record["error"].as_str().unwrap_or("ok"),
                case.class,
                "{name}: {record}"
            );
        }
        let detail = records[0]["error_detail"].as_str().unwrap_or("");
        assert!(detail.contains(case.detail), "{name}: {detail}");
        assert!(out.join("report.md").exists(), "{name}: no report");
        // The key never reaches anything kept or printed.
        for file in ["records.jsonl", "requests.csv", "report.md", "summary.json"] {
            let text = std::fs::read_to_string(out.join(file)).unwrap();
            assert!(!text.contains(&KEY[..16]), "{name}: the key is in {file}");
        }
        assert!(!stderr.contains(&KEY[..16]), "{name}: the key is on stderr");
        assert!(!String::from_utf8_lossy(&output.stdout).contains(&KEY[..16]));
    }
}

/// Usage that cannot be right is a warning with the numbers, and feeds no throughput; usage
/// that is not a count is said to be so (not "not valid JSON").
#[test]
fn impossible_and_negative_usage_are_warned_and_not_believed() {
    let impossible: fn(&mut TcpStream) = |s| {
        send(s, SSE_HEAD);
        for _ in 0..8 {
            send(
                s,
                "data: {\"choices\":[{\"delta\":{\"content\":\" a\"}}]}\n\n",
            );
        }
        send(s, "data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"length\"}],\"usage\":{\"prompt_tokens\":8,\"completion_tokens\":1000000}}\n\ndata: [DONE]\n\n");
    };
    let negative: fn(&mut TcpStream) = |s| {
        send(s, SSE_HEAD);
        for _ in 0..8 {
            send(
                s,
                "data: {\"choices\":[{\"delta\":{\"content\":\" a\"}}]}\n\n",
            );
        }
        send(s, "data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"length\"}],\"usage\":{\"prompt_tokens\":8,\"completion_tokens\":-5}}\n\ndata: [DONE]\n\n");
    };
    for (scenario, problem) in [
        (
            impossible,
            "usage says 1000000 completion tokens, but 8 were asked",
        ),
        (
            negative,
            "usage.completion_tokens is -5: not a count of tokens",
        ),
    ] {
        let port = serve(vec![scenario; REQUESTS]);
        let run = run_plan(
            &plan("2s", "", ""),
            &["--target", &format!("http://127.0.0.1:{port}")],
        );
        assert_eq!(run.code(), 0, "{}", run.stderr());
        let records = run.records();
        assert_eq!(records.len(), REQUESTS);
        for r in &records {
            assert!(r["error"].is_null(), "{r}");
            assert!(
                r["usage_problem"].as_str().unwrap().contains(problem),
                "{r}"
            );
            assert_eq!(r["completion_tokens"], 8, "counted by the tokenizer: {r}");
            assert_eq!(r["token_source"], "tokenizer");
        }
        let s = run.summary();
        assert_eq!(s["overall"]["tokens"]["usage_problems"], REQUESTS);
        let warning = s["warnings"]
            .as_array()
            .unwrap()
            .iter()
            .find(|w| w["code"] == "implausible-usage")
            .expect("an implausible-usage warning");
        assert!(warning["message"].as_str().unwrap().contains(problem));
        // Throughput counts the 8 tokens each answer held, not a million.
        assert_eq!(s["overall"]["tokens"]["output_observed_mean"], 8.0);
        let throughput = s["overall"]["throughput"]["output_tokens_per_s"]
            .as_f64()
            .unwrap();
        let wall = s["overall"]["wall_s"].as_f64().unwrap();
        assert!(
            (throughput * wall - 24.0).abs() < 0.01,
            "{throughput} × {wall}"
        );
    }
}

/// A server that labels answers cut at max_tokens "stop" (GuideLLM's mock server does) with
/// exactly the planned count: a note about its labelling, not a warning that fails a gate.
#[test]
fn a_stop_with_the_planned_count_is_a_note_not_a_warning() {
    let labelled_stop: fn(&mut TcpStream) = |s| {
        send(s, SSE_HEAD);
        for _ in 0..8 {
            send(
                s,
                "data: {\"choices\":[{\"delta\":{\"content\":\" a\"}}]}\n\n",
            );
        }
        send(s, "data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":8,\"completion_tokens\":8}}\n\ndata: [DONE]\n\n");
    };
    let port = serve(vec![labelled_stop; REQUESTS]);
    let run = run_plan(
        &plan("2s", "", "ignore-eos=#true"),
        &[
            "--target",
            &format!("http://127.0.0.1:{port}"),
            "--fail-on-warning",
        ],
    );
    assert_eq!(run.code(), 0, "{}{}", run.stdout(), run.stderr());
    let warnings = run.summary()["warnings"].as_array().unwrap().clone();
    assert!(warnings
        .iter()
        .any(|w| w["code"] == "finish-stop-label" && w["severity"] == "note"));
    assert!(!warnings.iter().any(|w| w["code"] == "finish-stop"));
}

/// SIGTERM (a CI cancellation, `docker stop`, Kubernetes) stops sending, lets requests in flight
/// finish, and writes every report and the JUnit file; the run exits 3.
#[test]
fn sigterm_leaves_a_whole_report_and_exits_3() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_plan(
        dir.path(),
        "target \"sim\"\nsim { ttft \"5ms\"; itl \"5ms\" }\nworkload { input 8; output 20 }\nphase \"a\" { rate 20; duration \"60s\" }\n",
    );
    let out = dir.path().join("out");
    let junit = dir.path().join("junit.xml");
    let child = llmload()
        .arg("run")
        .arg(&path)
        .arg("--out")
        .arg(&out)
        .arg("--quiet")
        .arg("--junit")
        .arg(&junit)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    sleep(Duration::from_millis(1500));
    // SAFETY: kill sends a signal to our own child.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGTERM);
    }
    let output = child.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(3));
    for file in ["report.md", "summary.json", "requests.csv", "records.jsonl"] {
        assert!(out.join(file).exists(), "no {file}");
    }
    let last = std::fs::read_to_string(out.join("records.jsonl"))
        .unwrap()
        .lines()
        .last()
        .unwrap()
        .to_string();
    assert!(
        last.contains("\"run_end\"") && last.contains("\"interrupted\":true"),
        "{last}"
    );
    let sent = read_records(&out).len();
    assert!(sent >= 10, "{sent} records");
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary["verdict"]["status"], "interrupted");
    assert!(std::fs::read_to_string(&junit).unwrap().contains("<error"));
}

/// Out of file descriptors (an open loop under `ulimit -n 256` against a server that holds its
/// requests): the client's failures are classed apart, warned about, fail no server rate, and
/// leave the run not carried out (the server never saw the plan's load).
#[test]
fn running_out_of_file_descriptors_is_the_clients_failure() {
    let dir = tempfile::tempdir().unwrap();
    // The server holds every request for a second, so connections pile up past the limit.
    let sim = SimProcess::start_with(&["--ttft", "1s", "--itl", "1ms"]);
    let path = write_plan(
        dir.path(),
        "target \"http://127.0.0.1:9\" { model \"m\"; timeout \"10s\"; metrics #false; connections \"cold\" }\nworkload { input 8; output 2 }\nphase \"a\" { rate 400; arrivals \"constant\"; duration \"1s\" }\nsla { error-rate < \"1%\" }\n",
    );
    let out = dir.path().join("out");
    let output = {
        use std::os::unix::process::CommandExt;
        let mut command = llmload();
        command
            .arg("run")
            .arg(&path)
            .arg("--out")
            .arg(&out)
            .arg("--quiet")
            .arg("--target")
            .arg(&sim.url);
        // SAFETY: setrlimit is async-signal-safe.
        unsafe {
            command.pre_exec(|| {
                let limit = libc::rlimit {
                    rlim_cur: 256,
                    rlim_max: 256,
                };
                libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
                Ok(())
            });
        }
        command.output().unwrap()
    };
    let stderr = String::from_utf8_lossy(&output.stderr);
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    let requests = &summary["overall"]["requests"];
    assert!(
        requests["client_failed"].as_u64().unwrap() > 0,
        "{summary}\n{stderr}"
    );
    assert_eq!(
        requests["failed"], 0,
        "the client's failures are not the server's"
    );
    assert_eq!(
        summary["overall"]["errors"]["connect"],
        serde_json::Value::Null
    );
    let warning = summary["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["code"] == "client-limit")
        .expect("a client-limit warning");
    assert!(warning["message"]
        .as_str()
        .unwrap()
        .contains("file descriptors"));
    // The server passed every request it saw, but it did not see the plan's load: the run was
    // not carried out, however the SLA reads.
    assert_eq!(output.status.code(), Some(3), "{stderr}");
    assert_eq!(summary["verdict"]["status"], "not_carried_out");
    let reasons = summary["verdict"]["reasons"].to_string();
    assert!(reasons.contains("could not deliver the plan"), "{reasons}");
    assert!(stderr.contains("failed in llmload itself"), "{stderr}");
    assert_eq!(
        read_records(&out).len() as u64,
        requests["sent"].as_u64().unwrap()
    );
}

/// A target that is down, refuses the key or does not serve the plan's model ends the run
/// before its clock starts, in seconds, saying what it does serve: never a schedule of refused
/// requests. The simulator refuses unknown models and wants its key, as vLLM does.
#[test]
fn a_wrong_target_key_or_model_fails_fast_and_says_what_is_served() {
    let dir = tempfile::tempdir().unwrap();
    let run = |plan: &str, args: &[&str], env: &[(&str, &std::ffi::OsStr)]| {
        let path = write_plan(dir.path(), plan);
        let started = Instant::now();
        let output = run_file(&path, &dir.path().join("out"), args, env);
        (
            output.status.code(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
            started.elapsed(),
        )
    };
    let long = "workload { input 8; output 2 }\nphase \"p\" { rate 5; duration \"60s\" }\n";
    // Nothing listens there.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    let (code, stderr, took) = run(
        &format!("target \"http://127.0.0.1:{port}\" {{ model \"m\" }}\n{long}"),
        &[],
        &[],
    );
    assert_eq!(code, Some(3), "{stderr}");
    assert!(stderr.contains("does not answer"), "{stderr}");
    assert!(took < Duration::from_secs(10), "{took:?}");
    // The simulator serves two models; the plan asks for a third.
    let serving = "sim { models \"qwen3-8b\" \"llama-3.1-8b\"; api-key env=\"SIM_KEY\" }\n";
    let (code, stderr, took) = run(
        &format!("target \"sim\" {{ model \"gpt-9\"; api-key env=\"SIM_KEY\" }}\n{serving}{long}"),
        &[],
        &[("SIM_KEY", "k-123456".as_ref())],
    );
    assert_eq!(code, Some(3), "{stderr}");
    assert!(
        stderr.contains("does not serve model \"gpt-9\" (HTTP 404")
            && stderr.contains("it serves: qwen3-8b, llama-3.1-8b"),
        "{stderr}"
    );
    assert!(took < Duration::from_secs(10), "{took:?}");
    // No key, or the wrong one: refused.
    let (code, stderr, _) = run(
        &format!("target \"sim\" {{ model \"qwen3-8b\" }}\n{serving}{long}"),
        &[],
        &[("SIM_KEY", "k-123456".as_ref())],
    );
    assert_eq!(code, Some(3), "{stderr}");
    assert!(
        stderr.contains("refused the run's credentials: HTTP 401")
            && stderr.contains("no key was sent"),
        "{stderr}"
    );
    // The wrong key: refused, and the hint says one was sent (never what it was).
    let (code, stderr, _) = run(
        &format!(
            "target \"sim\" {{ model \"qwen3-8b\"; api-key env=\"WRONG_KEY\" }}\n{serving}{long}"
        ),
        &[],
        &[
            ("SIM_KEY", "k-123456".as_ref()),
            ("WRONG_KEY", "k-999999".as_ref()),
        ],
    );
    assert_eq!(code, Some(3), "{stderr}");
    assert!(
        stderr.contains("a key was sent, and refused") && !stderr.contains("k-999999"),
        "{stderr}"
    );
    // Both right: it runs (briefly).
    let (code, stderr, _) = run(
        &format!(
            "target \"sim\" {{ model \"qwen3-8b\"; api-key env=\"SIM_KEY\" }}\n{serving}\
             workload {{ input 8; output 2 }}\nphase \"p\" {{ concurrency 1; requests 2 }}\n"
        ),
        &[],
        &[("SIM_KEY", "k-123456".as_ref())],
    );
    assert_eq!(code, Some(0), "{stderr}");
    // With cold connections nothing is sent before the clock: the requests themselves fail,
    // classed (a model the simulator does not serve is its 404).
    let path = write_plan(
        dir.path(),
        "target \"sim\" { model \"gpt-9\"; connections \"cold\" }\nsim { models \"qwen3-8b\" }\n\
         workload { input 8; output 2 }\nphase \"p\" { concurrency 1; requests 2 }\n",
    );
    let out = dir.path().join("cold");
    let output = run_file(&path, &out, &[], &[]);
    assert_eq!(output.status.code(), Some(3));
    assert!(read_records(&out)
        .iter()
        .all(|r| r["error"] == "http_4xx" && r["http_status"] == 404));
}
