//! `run --otlp URL`: every request exported as an OpenTelemetry span over OTLP/HTTP, decoded
//! here by a receiver built on the official protobuf definitions (PyPI's opentelemetry-proto,
//! tests/otel/receiver.py), and checked against the records and the `traceparent` the server
//! saw; a collector that is down or never answers costs the run nothing.
//!
//! Without opentelemetry-proto the decoding test says SKIPPED, unless LLMLOAD_REQUIRE_OTEL_PROTO
//! is set (`.ci/run` installs it in target/ci-tools/otel and sets it).

mod common;
use common::*;

use std::collections::BTreeMap;
use std::io::BufRead;

/// The receiver's Python path: target/ci-tools/otel when `.ci/run` put it there.
fn otel_python_path() -> Option<std::path::PathBuf> {
    let tools = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/ci-tools/otel");
    let found = std::process::Command::new("python3")
        .args([
            "-c",
            "import opentelemetry.proto.collector.trace.v1.trace_service_pb2",
        ])
        .env("PYTHONPATH", &tools)
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        assert!(
            std::env::var_os("LLMLOAD_REQUIRE_OTEL_PROTO").is_none(),
            "LLMLOAD_REQUIRE_OTEL_PROTO is set and python3 cannot import opentelemetry-proto"
        );
        eprintln!("SKIPPED: no opentelemetry-proto (pip install --target target/ci-tools/otel opentelemetry-proto)");
    }
    found.then_some(tools)
}

/// tests/otel/receiver.py, writing the spans it decodes to `out`; killed when dropped.
struct Receiver {
    child: std::process::Child,
    port: u16,
}

impl Receiver {
    fn start(python_path: &std::path::Path, out: &std::path::Path) -> Receiver {
        let script =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/otel/receiver.py");
        let mut child = std::process::Command::new("python3")
            .arg(script)
            .arg(out)
            .env("PYTHONPATH", python_path)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port = line.trim().parse().expect("the receiver's port");
        Receiver { child, port }
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn spans(path: &std::path::Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

const PLAN: &str = "plan \"traced\" { seed 9 }\ntarget \"sim\" { model \"m-otel\"; timeout \"10s\" }\nworkload { input 32; output 6 }\nphase \"steady\" { rate 30; arrivals \"constant\"; duration \"2s\" }\n";

#[test]
fn every_request_is_a_span_that_joins_the_servers_trace() {
    let Some(python_path) = otel_python_path() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let received = dir.path().join("spans.jsonl");
    let receiver = Receiver::start(&python_path, &received);
    let profile = dir.path().join("sim.kdl");
    std::fs::write(
        &profile,
        "sim { ttft \"15ms\"; itl \"3ms\"; faults { http-5xx \"10%\" } }\n",
    )
    .unwrap();
    let profile = profile.to_str().unwrap();
    let sim = SimProcess::start_with(&["--record-writes", "--profile", profile]);
    let plan = write_plan(dir.path(), PLAN);
    let out = dir.path().join("out");
    let collector = format!("http://127.0.0.1:{}", receiver.port);
    let secret = std::ffi::OsStr::new("authorization=Bearer%20sk-otel-secret");
    let run = run_file(
        &plan,
        &out,
        &["--target", &sim.url, "--otlp", &collector],
        &[("OTEL_EXPORTER_OTLP_HEADERS", secret)],
    );
    let stderr = String::from_utf8_lossy(&run.stderr).into_owned();
    assert!(matches!(run.status.code(), Some(0 | 1)), "{stderr}");
    let log = llmload::records::RunLog::read(&out.join("records.jsonl")).unwrap();
    let header = log.header.clone().unwrap();
    let prefix = header.request_id_prefix.clone().unwrap();
    let started = header.started_unix_ns.unwrap();
    let records = &log.records;
    assert_eq!(records.len(), 60);
    assert!(stderr.contains("otlp: 60 span(s) exported"), "{stderr}");

    let spans = spans(&received);
    assert_eq!(spans.len(), records.len(), "one span a request");
    let by_trace: BTreeMap<String, &serde_json::Value> = spans
        .iter()
        .map(|s| (s["trace_id"].as_str().unwrap().to_string(), s))
        .collect();
    assert_eq!(by_trace.len(), spans.len(), "a trace each");
    // The span id the server was told its parent is (its traceparent's) is the span's own.
    let parents: BTreeMap<String, String> = sim
        .get("/llmload/writes")
        .lines()
        .map(|line| serde_json::from_str::<serde_json::Value>(line).unwrap())
        .filter_map(|w| {
            let header = w["traceparent"].as_str()?.to_string();
            let parts: Vec<&str> = header.split('-').collect();
            Some((parts[1].to_string(), parts[2].to_string()))
        })
        .collect();
    let mut failed = 0;
    for record in records {
        let trace_id = record.trace_id.clone().unwrap();
        let span = by_trace[&trace_id];
        // (The simulator keeps the writes of the requests it streamed, not those it failed.)
        if record.error.is_none() {
            assert_eq!(span["span_id"], parents[&trace_id], "{trace_id}");
        }
        assert_eq!(span["parent_span_id"], "", "a root span");
        assert_eq!(span["path"], "/v1/traces");
        assert_eq!(span["content_type"], "application/x-protobuf");
        assert_eq!(span["auth"], "Bearer sk-otel-secret");
        assert_eq!(span["name"], "chat m-otel");
        assert_eq!(span["kind"], 3, "SPAN_KIND_CLIENT");
        assert_eq!(span["scope"], "llmload");
        assert_eq!(span["resource"]["service.name"], "llmload");
        assert_eq!(span["resource"]["llmload.run"], prefix.as_str());
        assert_eq!(span["resource"]["llmload.plan"], "traced");
        let start = started + record.actual_send_us * 1000;
        assert_eq!(span["start"].as_u64(), Some(start));
        let e2e = record.e2e_us.unwrap();
        assert_eq!(span["end"].as_u64(), Some(start + e2e * 1000));
        let attributes = &span["attributes"];
        let id = format!("{prefix}-{}-{}", record.phase, record.seq);
        assert_eq!(attributes["llmload.request_id"], id.as_str());
        assert_eq!(attributes["llmload.phase"], "steady");
        assert_eq!(attributes["gen_ai.operation.name"], "chat");
        assert_eq!(attributes["gen_ai.request.model"], "m-otel");
        assert_eq!(attributes["server.address"], "127.0.0.1");
        assert_eq!(
            attributes["http.response.status_code"],
            record.http_status.unwrap()
        );
        match record.error {
            None => {
                let tokens = |key: &str| attributes[key].as_u64();
                assert_eq!(
                    tokens("gen_ai.usage.output_tokens"),
                    record.completion_tokens
                );
                assert_eq!(tokens("gen_ai.usage.input_tokens"), record.prompt_tokens);
                let reasons = serde_json::json!([record.finish_reason.clone().unwrap()]);
                assert_eq!(attributes["gen_ai.response.finish_reasons"], reasons);
                assert_eq!(
                    span["status"]["code"], 0,
                    "a success leaves the status unset"
                );
                let first = &span["events"][0];
                assert_eq!(first["name"], "llmload.first_token");
                let ttft = record.ttft_us.unwrap();
                assert_eq!(first["time"].as_u64(), Some(start + ttft * 1000));
            }
            Some(class) => {
                failed += 1;
                assert_eq!(span["status"]["code"], 2, "STATUS_CODE_ERROR");
                assert_eq!(attributes["error.type"], class.as_str());
                let message = span["status"]["message"].as_str().unwrap();
                assert!(message.starts_with(class.as_str()), "{message}");
            }
        }
    }
    assert!(
        failed > 0,
        "the simulator's faults give failed spans to check"
    );
    // The collector's header value reaches the collector and nothing else.
    assert!(
        !stderr.contains("sk-otel") && !String::from_utf8_lossy(&run.stdout).contains("sk-otel")
    );
    for entry in std::fs::read_dir(&out).unwrap() {
        let text = std::fs::read(entry.unwrap().path()).unwrap_or_default();
        assert!(!String::from_utf8_lossy(&text).contains("sk-otel"));
    }
}

#[test]
fn a_collector_that_is_down_or_never_answers_costs_the_run_nothing() {
    let plan = "plan \"untraced\" { seed 9 }\ntarget \"sim\" { timeout \"10s\" }\nsim { ttft \"5ms\"; itl \"1ms\" }\nworkload { input 16; output 4 }\nphase \"steady\" { rate 20; arrivals \"constant\"; duration \"2s\" }\n";
    let plain = run_plan(plan, &[]);
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let down_url = format!("http://127.0.0.1:{}", closed.local_addr().unwrap().port());
    drop(closed);
    let down = run_plan(plan, &["--otlp", &down_url]);
    assert_eq!(down.code(), plain.code(), "{}", down.stderr());
    assert_eq!(down.records().len(), plain.records().len());
    let said = down.stderr();
    assert!(
        said.contains("otlp: 0 span(s) exported in 0 batch(es), 40 dropped"),
        "{said}"
    );
    assert!(said.contains("(first failure: cannot connect)"), "{said}");

    // Takes the connection, reads nothing, answers nothing.
    let port = never_answering_port();
    let started = std::time::Instant::now();
    let slow = run_plan(plan, &["--otlp", &format!("http://127.0.0.1:{port}")]);
    let took = started.elapsed();
    assert_eq!(slow.code(), plain.code(), "{}", slow.stderr());
    let records = slow.records();
    assert_eq!(records.len(), 40);
    // Sent on time whatever the collector does: the exporter is off the requests' path.
    for record in &records {
        let lag = record["actual_send_us"].as_u64().unwrap()
            - record["intended_send_us"].as_u64().unwrap();
        assert!(lag < 20_000, "{record}");
    }
    // The 2 s schedule, then at most the last flush's bound (5 s), with room for a busy
    // machine: never a push timeout per batch queued.
    assert!(took.as_secs_f64() < 12.0, "{took:?}");
    let said = slow.stderr();
    assert!(
        said.contains("40 dropped") && said.contains("(first failure: timed out)"),
        "{said}"
    );
}

#[test]
fn a_collector_that_is_not_http_is_refused_before_the_run() {
    let run = run_plan(PLAN, &["--otlp", "grpc://127.0.0.1:4317"]);
    assert_eq!(run.code(), 2, "{}", run.stderr());
    assert!(
        run.stderr().contains("http:// or https://"),
        "{}",
        run.stderr()
    );
    assert!(!run.out().join("records.jsonl").exists());
}
