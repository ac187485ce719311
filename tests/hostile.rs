//! A hostile server, URL or label must not be able to write into llmload's outputs: server text
//! reaches the terminal on one line with its control characters shown, report.md as literal
//! text (never a heading, an image, a link or a mention), CSV as no formula, JUnit as
//! well-formed XML; a key in the target URL's query or user:password reaches no output and the
//! query stays after every endpoint's path.

mod common;

use std::io::Write;
use std::net::TcpStream;

use common::wire::Seen;
use common::{run_plan, serial};

/// Serves every connection on its own thread: `answer` writes the response for what it saw.
fn serve(answer: fn(&Seen, &mut TcpStream)) -> (u16, std::sync::Arc<std::sync::Mutex<Vec<Seen>>>) {
    common::wire::capture(answer)
}

fn respond(stream: &mut TcpStream, status: &str, kind: &str, body: &str) {
    let _ = write!(
        stream,
        "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
}

/// What a hostile server writes wherever it can: a GitHub Actions command after a newline, an
/// escape sequence that clears the screen, Markdown that would be a heading, an image, a link
/// and a mention, a pipe that would split a table, and a spreadsheet formula.
const HOSTILE: &str = "=HYPERLINK(\\\"http://evil.example/\\\")\\n::error::pwned\\n\\u001b[2J\\n# Heading ![img](http://evil.example/x.png) [click](http://evil.example/) @octocat | cell \\ufffe\\uffff";

fn hostile_server(seen: &Seen, stream: &mut TcpStream) {
    let line = &seen.line;
    if line.starts_with("GET /version") {
        respond(
            stream,
            "200 OK",
            "application/json",
            &format!("{{\"version\": \"{HOSTILE}\"}}"),
        );
    } else if line.starts_with("GET /metrics") {
        respond(
            stream,
            "200 OK",
            "text/plain",
            "vllm:num_requests_running 1\n",
        );
    } else if line.starts_with("GET") {
        respond(stream, "200 OK", "application/json", "{\"data\": []}");
    } else if every_other_post() {
        respond(
            stream,
            "500 Internal Server Error",
            "application/json",
            &format!("{{\"error\": {{\"message\": \"{HOSTILE}\"}}}}"),
        );
    } else {
        let events = format!(
            "data: {{\"model\":\"{HOSTILE}\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"hi\"}}}}]}}\n\n\
             data: {{\"choices\":[{{\"index\":0,\"delta\":{{}},\"finish_reason\":\"{HOSTILE}\"}}]}}\n\n\
             data: [DONE]\n\n"
        );
        respond(stream, "200 OK", "text/event-stream", &events);
    }
}

/// Every other chat request fails, by the request counter the server keeps.
fn every_other_post() -> bool {
    use std::sync::atomic::{AtomicU64, Ordering};
    static POSTS: AtomicU64 = AtomicU64::new(0);
    POSTS.fetch_add(1, Ordering::Relaxed) % 2 == 1
}

/// `markdown` with its code spans taken out (what GitHub renders as literal code).
fn outside_code_spans(markdown: &str) -> String {
    let mut out = String::new();
    let mut rest = markdown;
    while let Some(start) = rest.find('`') {
        out.push_str(&rest[..start]);
        let fence_len = rest[start..].chars().take_while(|&c| c == '`').count();
        let fence = "`".repeat(fence_len);
        let after = &rest[start + fence_len..];
        match after.find(&fence) {
            Some(end) => rest = &after[end + fence_len..],
            None => {
                out.push_str(&rest[start..]);
                return out;
            }
        }
    }
    out.push_str(rest);
    out
}

#[test]
fn server_text_cannot_write_into_the_terminal_the_report_a_spreadsheet_or_junit() {
    let _serial = serial();
    let (port, _) = serve(hostile_server);
    let dir = tempfile::tempdir().unwrap();
    let junit = dir.path().join("junit.xml");
    let plan = format!(
        "plan \"hostile\" {{ seed 1; }}\n\
         target \"http://127.0.0.1:{port}\" {{ model \"m\"; connections \"cold\"; }}\n\
         workload {{ tokenizer \"cl100k_base\"; input 8; output 4; }}\n\
         phase \"p\" {{ concurrency 2; requests 8; }}\n\
         sla {{ error-rate < \"90%\"; }}\n"
    );
    let run = run_plan(
        &plan,
        &[
            "--junit",
            junit.to_str().unwrap(),
            "--label",
            "note=![x](http://evil.example/y.png) @octocat",
        ],
    );
    let terminal = format!("{}{}", run.stdout(), run.stderr());
    assert!(
        terminal.contains("pwned"),
        "the server's text is shown: {terminal}"
    );
    for line in terminal.lines() {
        assert!(!line.starts_with("::"), "a workflow command: {line}");
        assert!(!line.contains('\u{1b}'), "an escape sequence: {line:?}");
    }

    let report = std::fs::read_to_string(run.out().join("report.md")).unwrap();
    assert!(report.contains("pwned"), "{report}");
    let rendered = outside_code_spans(&report);
    for forbidden in [
        "![img](",
        "](http://evil",
        "@octocat",
        "\n# Heading",
        "![x](",
        "\u{1b}",
    ] {
        assert!(
            !rendered.contains(forbidden),
            "{forbidden:?} renders in report.md:\n{rendered}"
        );
    }
    for line in report.lines().filter(|l| l.starts_with('|')) {
        // Every table row has as many cells as its header: no pipe of the server's split one.
        let cells = outside_code_spans(line)
            .replace("\\|", "")
            .matches('|')
            .count();
        assert!(cells >= 3, "{line}");
    }
    let errors = report
        .lines()
        .find(|l| l.starts_with("| http_5xx"))
        .expect("an error row");
    let header = report
        .lines()
        .take_while(|l| !l.starts_with("| http_5xx"))
        .filter(|l| l.starts_with("| Class") || l.starts_with("| Error"))
        .last()
        .unwrap_or("");
    if !header.is_empty() {
        assert_eq!(
            outside_code_spans(errors)
                .replace("\\|", "")
                .matches('|')
                .count(),
            header.matches('|').count(),
            "{errors}"
        );
    }

    let mut csv = csv::ReaderBuilder::new()
        .from_path(run.out().join("requests.csv"))
        .unwrap();
    let mut cells = 0;
    for row in csv.records() {
        for cell in row.unwrap().iter() {
            cells += 1;
            assert!(
                !cell.starts_with(['=', '+', '@', '\t', '\r']),
                "a formula in requests.csv: {cell}"
            );
        }
    }
    assert!(cells > 0);

    let xml = std::fs::read_to_string(&junit).unwrap();
    for forbidden in ['\u{fffe}', '\u{ffff}', '\u{1b}'] {
        assert!(!xml.contains(forbidden), "{forbidden:?} in junit.xml");
    }
    common::validate_junit(&junit);
}

#[test]
fn a_key_in_the_target_url_reaches_no_output_and_its_query_follows_every_path() {
    let _serial = serial();
    fn plain_server(seen: &Seen, stream: &mut TcpStream) {
        if seen.line.starts_with("GET /metrics") {
            respond(
                stream,
                "200 OK",
                "text/plain",
                "vllm:num_requests_running 1\n",
            );
        } else if seen.line.starts_with("GET") {
            respond(stream, "404 Not Found", "text/plain", "no");
        } else if seen.line.contains("/chat/completions") {
            // The server echoes the key back in an error, in upper case, as some do.
            respond(
                stream,
                "401 Unauthorized",
                "application/json",
                "{\"error\": {\"message\": \"bad key QUERY-SECRET-0123456789ABCDEF and pass USER-PASSWORD-SECRET-42\"}}",
            );
        } else {
            respond(stream, "404 Not Found", "text/plain", "no");
        }
    }
    let (port, seen) = serve(plain_server);
    let plan = "plan \"url\" { seed 1; }\n\
         target \"sim\" { model \"m\"; connections \"cold\"; }\n\
         workload { tokenizer \"cl100k_base\"; input 8; output 4; }\n\
         phase \"p\" { concurrency 1; requests 2; }\n";
    let target = format!(
        "http://alice:user-password-secret-42@127.0.0.1:{port}/v1?api_key=query-secret-0123456789abcdef&api-version=7"
    );
    let run = run_plan(plan, &["--target", &target]);
    let seen = seen.lock().unwrap().clone();
    let posts: Vec<&Seen> = seen.iter().filter(|s| s.line.starts_with("POST")).collect();
    assert!(!posts.is_empty(), "{seen:?}");
    for post in &posts {
        assert!(
            post.line.starts_with(
                "POST /v1/chat/completions?api_key=query-secret-0123456789abcdef&api-version=7 "
            ),
            "{}",
            post.line
        );
    }
    // user:password goes as Basic authentication on every connection: requests and /metrics.
    let basic = "Basic YWxpY2U6dXNlci1wYXNzd29yZC1zZWNyZXQtNDI=";
    for request in seen.iter().filter(|s| !s.line.starts_with("GET /version")) {
        let authorization = request.header("authorization");
        assert_eq!(authorization, Some(basic), "{request:?}");
    }
    assert!(
        seen.iter().any(|s| s.line.starts_with("GET /metrics")),
        "{seen:?}"
    );

    let everything = everything_of(&run);
    let lowered = everything.to_ascii_lowercase();
    for secret in [
        "query-secret-0123456789abcdef",
        "user-password-secret-42",
        basic,
    ] {
        assert!(
            !lowered.contains(&secret.to_ascii_lowercase()),
            "{secret} in the outputs"
        );
    }
    assert!(
        everything.contains("api-version=7"),
        "the query is shown, its key redacted"
    );
}

/// Answers every chat request at once with 2 MB of text in 100 chunks and no usage: tokens the
/// recorder must count itself, far more than it can count as fast as they come.
fn huge_answers(seen: &Seen, stream: &mut TcpStream) {
    if !seen.line.starts_with("POST") {
        respond(stream, "404 Not Found", "text/plain", "no");
        return;
    }
    let _ = write!(
        stream,
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
    );
    let words: String = (0..4_000).map(|i| format!("w{} ", i % 997)).collect();
    let piece = format!(
        "data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{}\"}}}}]}}\n\n",
        &words[..words.len().min(20_000)]
    );
    for _ in 0..100 {
        if stream.write_all(piece.as_bytes()).is_err() {
            return;
        }
    }
    let _ = stream.write_all(
        b"data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"length\"}]}\n\ndata: [DONE]\n\n",
    );
}

fn request_lines(path: &std::path::Path) -> usize {
    std::fs::read_to_string(path)
        .map(|text| {
            text.lines()
                .filter(|l| l.contains("\"event\":\"request\""))
                .count()
        })
        .unwrap_or(0)
}

fn start_huge_run(dir: &std::path::Path, port: u16, requests: u32) -> std::process::Child {
    let plan = common::write_plan(
        dir,
        &format!(
            "plan \"huge\" {{ seed 1; }}\n\
             target \"http://127.0.0.1:{port}\" {{ model \"m\"; metrics #false; connections \"cold\"; timeout \"120s\"; }}\n\
             workload {{ tokenizer \"cl100k_base\"; input 8; output 16; }}\n\
             phase \"p\" {{ concurrency 12; requests {requests}; }}\n"
        ),
    );
    spawn_run(dir, &plan)
}

/// Starts `llmload run PLAN --out DIR/out --quiet` without waiting: its stderr piped.
fn spawn_run(dir: &std::path::Path, plan: &std::path::Path) -> std::process::Child {
    common::llmload()
        .arg("run")
        .arg(plan)
        .arg("--out")
        .arg(dir.join("out"))
        .arg("--quiet")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

/// Answers every chat request with a megabyte of newlines in 64 chunks and no usage: text a
/// byte-pair tokenizer merges in time quadratic in its length (8.3 s a record, unbounded).
fn newline_answers(seen: &Seen, stream: &mut TcpStream) {
    if !seen.line.starts_with("POST") {
        respond(stream, "404 Not Found", "text/plain", "no");
        return;
    }
    let _ = write!(
        stream,
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
    );
    let piece = format!(
        "data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{}\"}}}}]}}\n\n",
        "\\n".repeat(16 * 1024)
    );
    for _ in 0..64 {
        if stream.write_all(piece.as_bytes()).is_err() {
            return;
        }
    }
    let _ = stream.write_all(
        b"data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"length\"}]}\n\ndata: [DONE]\n\n",
    );
}

/// One slow answer to count holds no record behind it: 30 answers of a megabyte of newlines
/// each are on disk in seconds (before, one every 8 s: the 10th after 80 s), every request ok.
#[test]
fn answers_slow_to_count_hold_no_record_back() {
    let _serial = serial();
    let (port, _) = serve(newline_answers);
    let dir = tempfile::tempdir().unwrap();
    let plan = common::write_plan(
        dir.path(),
        &format!(
            "plan \"newlines\" {{ seed 1; }}\n\
             target \"http://127.0.0.1:{port}\" {{ model \"m\"; metrics #false; timeout \"120s\"; }}\n\
             workload {{ tokenizer \"cl100k_base\"; input 8; output 16; }}\n\
             phase \"p\" {{ concurrency 10; requests 30; }}\n"
        ),
    );
    let child = spawn_run(dir.path(), &plan);
    let records = dir.path().join("out").join("records.jsonl");
    let started = std::time::Instant::now();
    while request_lines(&records) < 10 && started.elapsed() < std::time::Duration::from_secs(40) {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let (on_disk, waited) = (request_lines(&records), started.elapsed());
    let output = child.wait_with_output().unwrap();
    assert!(on_disk >= 10, "{on_disk} records on disk after {waited:?}");
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let lines = common::read_records(&dir.path().join("out"));
    assert_eq!(lines.len(), 30);
    for record in &lines {
        assert!(record["error"].is_null(), "{record:.300}");
        assert!(
            record["completion_tokens"].as_u64().unwrap() > 1_000,
            "{record:.300}"
        );
    }
}

/// Records reach the disk within a bounded time even while the recorder is far behind (huge
/// answers to count come faster than it counts them): a run killed with SIGKILL keeps them.
#[test]
fn records_reach_the_disk_while_the_recorder_is_behind_and_survive_a_kill() {
    let _serial = serial();
    let (port, _) = serve(huge_answers);
    let dir = tempfile::tempdir().unwrap();
    let mut child = start_huge_run(dir.path(), port, 60);
    let records = dir.path().join("out").join("records.jsonl");
    let started = std::time::Instant::now();
    while request_lines(&records) < 3 && started.elapsed() < std::time::Duration::from_secs(20) {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let on_disk = request_lines(&records);
    let waited = started.elapsed();
    let _ = child.kill();
    let _ = child.wait();
    assert!(on_disk >= 3, "{on_disk} records on disk after {waited:?}");
    // What was on disk stays, and reads back: its lines are whole (a torn last line is skipped).
    assert!(request_lines(&records) >= on_disk);
    for line in std::fs::read_to_string(&records).unwrap().lines() {
        if line.contains("\"event\":\"request\"") && line.ends_with('}') {
            let record: serde_json::Value = serde_json::from_str(line).unwrap();
            assert!(
                record["completion_tokens"].as_u64().unwrap() > 100_000,
                "{line:.300}"
            );
            assert_eq!(record["token_source"], "estimated", "{line:.300}");
        }
    }
}

/// A second Ctrl-C stops at once: requests in flight cancelled, what the recorder holds written
/// uncounted, the reports written from it.
#[test]
fn a_second_ctrl_c_stops_at_once_with_what_is_recorded_written() {
    let _serial = serial();
    let (port, _) = serve(huge_answers);
    let dir = tempfile::tempdir().unwrap();
    // More answers than the recorder's queue holds (400 MB, 256 MiB): requests wait in flight
    // for room, and the second Ctrl-C cuts them short.
    let child = start_huge_run(dir.path(), port, 200);
    let records = dir.path().join("out").join("records.jsonl");
    let started = std::time::Instant::now();
    while request_lines(&records) < 1 && started.elapsed() < std::time::Duration::from_secs(20) {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    // SAFETY: kill sends a signal to our own child.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGINT);
    }
    std::thread::sleep(std::time::Duration::from_millis(300));
    let second = std::time::Instant::now();
    unsafe {
        libc::kill(child.id() as i32, libc::SIGINT);
    }
    let output = child.wait_with_output().unwrap();
    let stopped_in = second.elapsed();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(3), "{stderr}");
    assert!(
        stopped_in < std::time::Duration::from_secs(10),
        "the second Ctrl-C took {stopped_in:?} to stop the run"
    );
    assert!(stderr.contains("stopping now"), "{stderr}");
    let summary: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("out").join("summary.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(summary["verdict"]["status"], "interrupted");
    assert!(request_lines(&records) >= 1);
}

/// Answers each chat request after 1.5 s.
fn slow_answer(seen: &Seen, stream: &mut TcpStream) {
    if !seen.line.starts_with("POST") {
        respond(stream, "404 Not Found", "text/plain", "no");
        return;
    }
    std::thread::sleep(std::time::Duration::from_millis(1500));
    respond(
        stream,
        "200 OK",
        "application/json",
        "{\"choices\":[{\"index\":0,\"message\":{\"content\":\"hi there\"},\"finish_reason\":\"length\"}],\"usage\":{\"prompt_tokens\":8,\"completion_tokens\":2}}",
    );
}

/// A stop (a CI job's timeout) that comes once every phase was sent, and whose grace lets the
/// last answers finish, interrupts nothing: the run is judged, not called INTERRUPTED.
#[test]
fn a_stop_after_the_last_request_went_out_interrupts_nothing() {
    let _serial = serial();
    let (port, _) = serve(slow_answer);
    let dir = tempfile::tempdir().unwrap();
    let plan = common::write_plan(
        dir.path(),
        &format!(
            "plan \"last\" {{ seed 1; }}\n\
             target \"http://127.0.0.1:{port}\" {{ model \"m\"; metrics #false; stream #false; }}\n\
             workload {{ tokenizer \"cl100k_base\"; input 8; output 2; }}\n\
             phase \"p\" {{ concurrency 2; requests 2; }}\n\
             sla {{ error-rate <= \"0%\"; undecided \"pass\"; }}\n"
        ),
    );
    let child = spawn_run(dir.path(), &plan);
    std::thread::sleep(std::time::Duration::from_millis(700));
    // SAFETY: kill sends a signal to our own child.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGTERM);
    }
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    let summary: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("out").join("summary.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(
        summary["verdict"]["status"], "pass",
        "{stderr}{}",
        summary["verdict"]
    );
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    assert_eq!(common::read_records(&dir.path().join("out")).len(), 2);
}

/// Answers one request per connection as if keeping it alive (no `Connection: close`), then
/// closes it: the next request sent on it meets a closed socket.
fn one_answer_per_connection(seen: &Seen, stream: &mut TcpStream) {
    if !seen.line.starts_with("POST") {
        let _ = write!(
            stream,
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{{\"data\":[]}}"
        );
        return;
    }
    let body = "{\"choices\":[{\"index\":0,\"message\":{\"content\":\"hi there\"},\"finish_reason\":\"length\"}],\"usage\":{\"prompt_tokens\":8,\"completion_tokens\":2}}";
    let _ = write!(
        stream,
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
}

/// A server that closes each connection after its answer fails no request: the one sent on a
/// connection it had closed is re-sent once on a fresh one, and counted.
#[test]
fn a_server_that_closes_every_connection_after_answering_fails_no_request() {
    let _serial = serial();
    let (port, _) = serve(one_answer_per_connection);
    let plan = format!(
        "plan \"closing\" {{ seed 1; }}\n\
         target \"http://127.0.0.1:{port}\" {{ model \"m\"; metrics #false; stream #false; }}\n\
         workload {{ tokenizer \"cl100k_base\"; input 8; output 2; }}\n\
         phase \"p\" {{ concurrency 2; requests 60; }}\n\
         sla {{ error-rate <= \"0%\"; }}\n"
    );
    let run = run_plan(&plan, &[]);
    assert_eq!(run.code(), 0, "{}{}", run.stdout(), run.stderr());
    let records = run.records();
    assert_eq!(records.len(), 60);
    assert!(records.iter().all(|r| r["error"].is_null()));
    // Each re-send is counted on its record: at most one per request.
    assert!(records
        .iter()
        .all(|r| r["connection_retries"].as_u64().unwrap_or(0) <= 1));
}

/// Echoes whatever credentials it is sent: whole in `/version`'s version, a 14-character
/// stretch of each in an error body, and each character-spaced in another error.
fn echoing_server(seen: &Seen, stream: &mut TcpStream) {
    let sent: Vec<String> = ["authorization", "x-api-key", "x-tenant-key"]
        .iter()
        .filter_map(|name| seen.header(name))
        .map(|value| value.trim_start_matches("Bearer ").to_string())
        .collect();
    let whole = sent.join(" ");
    if seen.line.starts_with("GET /version") {
        let body = format!("{{\"version\": \"0.9 key {whole}\", \"model_id\": \"{whole}\"}}");
        respond(stream, "200 OK", "application/json", &body);
    } else if seen.line.starts_with("GET /metrics") {
        respond(
            stream,
            "200 OK",
            "text/plain",
            "vllm:num_requests_running 1\n",
        );
    } else if seen.line.starts_with("POST") && every_other_post() {
        let stretch: Vec<String> = sent
            .iter()
            .map(|s| s.chars().skip(3).take(14).collect())
            .collect();
        let spaced: Vec<String> = sent
            .iter()
            .map(|s| s.chars().map(|c| format!("{c} ")).collect())
            .collect();
        let body = format!(
            "{{\"error\": {{\"message\": \"key ...{}... is not valid; as typed: {}\"}}}}",
            stretch.join(","),
            spaced.join("/")
        );
        respond(stream, "401 Unauthorized", "application/json", &body);
    } else if seen.line.starts_with("POST") {
        let events = format!(
            "data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"hi\"}}}}]}}\n\n\
             data: {{\"choices\":[{{\"index\":0,\"delta\":{{}},\"finish_reason\":\"stop {whole}\"}}]}}\n\n\
             data: [DONE]\n\n"
        );
        respond(stream, "200 OK", "text/event-stream", &events);
    } else {
        respond(stream, "404 Not Found", "text/plain", "no");
    }
}

/// Every file of a run directory, and what the run printed, as one text.
fn everything_of(run: &common::Run) -> String {
    let mut everything = format!("{}{}", run.stdout(), run.stderr());
    for entry in std::fs::read_dir(run.out()).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() {
            everything.push_str(&String::from_utf8_lossy(&std::fs::read(&path).unwrap()));
        }
    }
    everything
}

/// One rule for credentials, whatever the form they were given in (the plan's `api-key`,
/// `--api-key-env`, the plan's secret `header`, `--header "Name: $VAR"`): they go to every
/// request of the target's origin (requests, /metrics, /version), and what a server echoes of
/// them — whole, a 14-character stretch, character-spaced, in a version, an error, a
/// finish_reason — reaches no output.
#[test]
fn credentials_go_to_their_origin_whatever_their_form_and_their_echoes_nowhere() {
    let _serial = serial();
    let (port, seen) = serve(echoing_server);
    let secret = "sk-Fq83kLmZ0pQ7vX2cW9tR4yB6nH1";
    let forms: [(&str, &str, &[&str]); 4] = [
        ("api-key env=\"LLMLOAD_T_KEY\"", "authorization", &[]),
        ("", "authorization", &["--api-key-env", "LLMLOAD_T_KEY"]),
        (
            "header \"X-Tenant-Key\" env=\"LLMLOAD_T_KEY\"",
            "x-tenant-key",
            &[],
        ),
        (
            "",
            "x-tenant-key",
            &["--header", "X-Tenant-Key: $LLMLOAD_T_KEY"],
        ),
    ];
    for (in_plan, header, args) in forms {
        seen.lock().unwrap().clear();
        let plan = format!(
            "plan \"creds\" {{ seed 1; }}\n\
             target \"http://127.0.0.1:{port}\" {{ model \"m\"; {in_plan} }}\n\
             workload {{ tokenizer \"cl100k_base\"; input 8; output 4; }}\n\
             phase \"p\" {{ concurrency 1; requests 6; }}\n\
             sla {{ error-rate < \"1%\"; }}\n"
        );
        let dir = tempfile::tempdir().unwrap();
        let path = common::write_plan(dir.path(), &plan);
        let output = common::run_file(
            &path,
            &dir.path().join("out"),
            args,
            &[("LLMLOAD_T_KEY", std::ffi::OsStr::new(secret))],
        );
        let run = common::Run { dir, output };
        let form = format!("{in_plan}{}", args.join(" "));
        let seen = seen.lock().unwrap().clone();
        for path in ["POST /v1/chat/completions", "GET /metrics", "GET /version"] {
            let sent = seen.iter().filter(|s| s.line.starts_with(path));
            let sent: Vec<Option<&str>> = sent.map(|s| s.header(header)).collect();
            assert!(!sent.is_empty(), "{form}: no {path} in {seen:?}");
            assert!(
                sent.iter().all(|v| v.is_some_and(|v| v.contains(secret))),
                "{form}: {path} sent {sent:?}"
            );
        }
        let everything = everything_of(&run).to_ascii_lowercase();
        let spaced: String = secret.chars().map(|c| format!("{c} ")).collect();
        for echo in [secret, &secret[3..17], spaced.trim_end()] {
            assert!(
                !everything.contains(&echo.to_ascii_lowercase()),
                "{form}: {echo:?} in the outputs"
            );
        }
        assert!(
            everything.contains("0.9 key [redacted]"),
            "{form}: the version is shown"
        );
    }
}

/// Answers each chat request on a kept-alive connection, then 50 ms later sends a 408 no
/// request asked for (as a server closing an idle connection does) and closes.
fn late_408(seen: &Seen, stream: &mut TcpStream) {
    if !seen.line.starts_with("POST") {
        respond(stream, "404 Not Found", "text/plain", "no");
        return;
    }
    let body = "{\"choices\":[{\"index\":0,\"message\":{\"content\":\"hi there\"},\"finish_reason\":\"length\"}],\"usage\":{\"prompt_tokens\":8,\"completion_tokens\":2}}";
    let _ = write!(
        stream,
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    std::thread::sleep(std::time::Duration::from_millis(50));
    let _ = write!(
        stream,
        "HTTP/1.1 408 Request Timeout\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    );
}

/// A response belongs to the request that asked for it: a 408 sent on a connection as it went
/// idle is no request's answer (the request is sent again on a new connection), it is counted,
/// and the run warns `server-protocol`.
#[test]
fn a_late_response_on_a_reused_connection_is_no_requests_answer() {
    let _serial = serial();
    let (port, seen) = serve(late_408);
    let plan = format!(
        "plan \"late\" {{ seed 1; }}\n\
         target \"http://127.0.0.1:{port}\" {{ model \"m\"; metrics #false; stream #false; }}\n\
         workload {{ tokenizer \"cl100k_base\"; input 8; output 2; }}\n\
         phase \"p\" {{ concurrency 1; requests 16; }}\n"
    );
    let run = run_plan(&plan, &[]);
    let records = run.records();
    assert_eq!(records.len(), 16);
    for record in &records {
        assert!(record["error"].is_null(), "{record}");
        assert_eq!(record["http_status"], 200, "{record}");
    }
    let posts = seen
        .lock()
        .unwrap()
        .iter()
        .filter(|s| s.line.starts_with("POST"))
        .count();
    let retries: u64 = records
        .iter()
        .map(|r| r["connection_retries"].as_u64().unwrap_or(0))
        .sum();
    // This server reads one request per connection: what was sent on a reused connection
    // never reached it, was answered by the 408, and went again on a new connection.
    assert_eq!(posts, 16, "every answer is a request the server read");
    assert!(retries > 0, "no request met the 408");
    let summary = run.summary();
    let warning =
        common::warning_of(&summary, "server-protocol").expect("a server-protocol warning");
    assert!(
        warning["message"]
            .as_str()
            .unwrap()
            .contains("no request asked for"),
        "{warning}"
    );
}

/// An answer whose end-of-stream event came is complete, though its chunked body never ends
/// (no final chunk) and the server keeps the connection open.
#[test]
fn a_stream_is_complete_at_its_end_event_whatever_the_body_does_next() {
    fn unended(seen: &Seen, stream: &mut TcpStream) {
        if !seen.line.starts_with("POST") {
            respond(stream, "404 Not Found", "text/plain", "no");
            return;
        }
        let events = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\n\
                      data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"length\"}]}\n\n\
                      data: [DONE]\n\n";
        let _ = write!(
            stream,
            "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n{events}\r\n",
            events.len()
        );
        // No final chunk, and the connection held open past the request's timeout.
        std::thread::sleep(std::time::Duration::from_secs(6));
    }
    let (port, _) = serve(unended);
    let plan = format!(
        "plan \"unended\" {{ seed 1; }}\n\
         target \"http://127.0.0.1:{port}\" {{ model \"m\"; metrics #false; timeout \"3s\"; }}\n\
         workload {{ tokenizer \"cl100k_base\"; input 8; output 2; }}\n\
         phase \"p\" {{ concurrency 2; requests 4; }}\n"
    );
    let started = std::time::Instant::now();
    let run = run_plan(&plan, &[]);
    let records = run.records();
    assert_eq!(records.len(), 4);
    for record in &records {
        assert!(record["error"].is_null(), "{record}");
        assert_eq!(record["finish_reason"], "length", "{record}");
    }
    assert!(
        started.elapsed() < std::time::Duration::from_secs(3),
        "the run waited for a body that had said its end"
    );
}

/// Answers every chat request with the 3xx its URL's query names (`?status=307`).
fn three_hundreds(seen: &Seen, stream: &mut TcpStream) {
    let status = seen
        .line
        .split("status=")
        .nth(1)
        .and_then(|rest| rest.get(..3))
        .unwrap_or("500");
    if seen.line.starts_with("POST") {
        let _ = write!(
            stream,
            "HTTP/1.1 {status} Whatever\r\nLocation: https://elsewhere.example/v1/chat/completions\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        );
    } else {
        respond(stream, "404 Not Found", "text/plain", "no");
    }
}

/// A 3xx is its own class, never a server error: a redirect, which llmload does not follow,
/// says so; a 304 is no redirect and says what it is instead.
#[test]
fn each_3xx_is_classed_apart_and_says_what_it_is() {
    let (port, _) = serve(three_hundreds);
    for (status, says, never) in [
        (
            307,
            "a redirect, which llmload does not follow",
            "not an answer",
        ),
        (
            308,
            "a redirect, which llmload does not follow",
            "not an answer",
        ),
        (304, "HTTP 304: not an answer to a POST", "redirect"),
    ] {
        let plan = format!(
            "target \"http://127.0.0.1:{port}/v1?status={status}\" {{ model \"m\"; metrics #false; }}\n\
             workload {{ tokenizer \"cl100k_base\"; input 8; output 2; }}\n\
             phase \"p\" {{ concurrency 1; requests 2; }}\n"
        );
        let run = run_plan(&plan, &[]);
        let records = run.records();
        assert_eq!(records.len(), 2, "{status}");
        for r in &records {
            assert_eq!(r["error"], "http_other", "{status}: {r}");
            let detail = r["error_detail"].as_str().unwrap();
            assert!(detail.contains(says), "{status}: {detail}");
            assert!(!detail.contains(never), "{status}: {detail}");
        }
        assert_eq!(run.summary()["phases"][0]["rates"]["error_rate"], 1.0);
    }
}
