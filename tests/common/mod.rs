//! Helpers for the integration tests: they drive the real `llmload` binary, over loopback HTTP,
//! against the embedded simulator or a hand-written raw TCP server.
#![allow(dead_code)]

pub mod bpe;
pub mod certs;

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

pub fn llmload() -> Command {
    Command::new(env!("CARGO_BIN_EXE_llmload"))
}

pub struct Run {
    pub dir: tempfile::TempDir,
    pub output: Output,
}

impl Run {
    pub fn code(&self) -> i32 {
        self.output.status.code().unwrap_or(-1)
    }
    pub fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.output.stdout).into_owned()
    }
    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.output.stderr).into_owned()
    }
    pub fn out(&self) -> PathBuf {
        self.dir.path().join("out")
    }
    pub fn summary(&self) -> serde_json::Value {
        let text = std::fs::read_to_string(self.out().join("summary.json")).expect("summary.json");
        serde_json::from_str(&text).expect("summary.json is JSON")
    }
    pub fn records(&self) -> Vec<serde_json::Value> {
        read_records(&self.out())
    }
}

pub fn read_records(dir: &Path) -> Vec<serde_json::Value> {
    read_log(dir)
        .into_iter()
        .filter(|v| v["event"] == "request")
        .collect()
}

/// Every line of a run directory's records (`records.jsonl`, or `records.jsonl.zst` decoded
/// by the zstd crate, not by llmload's reader).
pub fn read_log(dir: &Path) -> Vec<serde_json::Value> {
    let text = if dir.join("records.jsonl.zst").exists() {
        let file = std::fs::File::open(dir.join("records.jsonl.zst")).unwrap();
        let mut text = String::new();
        std::io::Read::read_to_string(
            &mut zstd::stream::read::Decoder::new(file).unwrap(),
            &mut text,
        )
        .expect("records.jsonl.zst decodes whole");
        text
    } else {
        std::fs::read_to_string(dir.join("records.jsonl")).expect("records.jsonl")
    };
    text.lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).expect("a JSON line"))
        .collect()
}

/// A `/proc/PID/status` figure in kB (`VmRSS:`, `VmHWM:`), in MB; Linux only.
pub fn proc_status_mb(pid: u32, key: &str) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kib: f64 = status
        .lines()
        .find(|l| l.starts_with(key))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()?;
    Some(kib / 1024.0)
}

/// What [`run_measured`] saw.
pub struct Measured {
    pub status: std::process::ExitStatus,
    pub seconds: f64,
    /// The peak resident memory (VmHWM), read every 2 ms until the process ended.
    pub peak_mb: f64,
    pub stdout: String,
}

/// Runs `command` to its end (its stdout captured, its stderr dropped), watching its peak
/// resident memory.
pub fn run_measured(command: &mut Command) -> Measured {
    let started = std::time::Instant::now();
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut pipe = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        pipe.read_to_string(&mut text).ok();
        text
    });
    let mut peak_mb = 0.0f64;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if let Some(mb) = proc_status_mb(child.id(), "VmHWM:") {
            peak_mb = peak_mb.max(mb);
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
    };
    Measured {
        status,
        seconds: started.elapsed().as_secs_f64(),
        peak_mb,
        stdout: reader.join().unwrap_or_default(),
    }
}

pub fn write_plan(dir: &Path, text: &str) -> PathBuf {
    let path = dir.join("plan.kdl");
    std::fs::write(&path, text).unwrap();
    path
}

/// Runs `plan` against a simulator process started with `--record-writes` and `sim_args`, and
/// expects it to pass: its records, and the simulator's own record of every request (when each
/// token was written, the ids it came with).
#[allow(dead_code)] // not every test binary uses every helper
pub fn run_recorded(
    sim_args: &[&str],
    plan: &str,
) -> (
    llmload::records::RunLog,
    Vec<llmload::sim::writes::RequestWrites>,
) {
    let args: Vec<&str> = std::iter::once("--record-writes")
        .chain(sim_args.iter().copied())
        .collect();
    let sim = SimProcess::start_with(&args);
    let dir = tempfile::tempdir().unwrap();
    let plan = write_plan(dir.path(), plan);
    let out = dir.path().join("out");
    let run = run_file(&plan, &out, &["--target", &sim.url], &[]);
    assert_eq!(
        run.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let log = llmload::records::RunLog::read(&out.join("records.jsonl")).unwrap();
    let writes = sim
        .get("/llmload/writes")
        .lines()
        .map(|line| serde_json::from_str(line).expect("a JSON line"))
        .collect();
    (log, writes)
}

/// Runs `llmload run PLAN --out OUT --quiet ARGS`, with extra environment variables.
pub fn run_file(
    plan: &Path,
    out: &Path,
    args: &[&str],
    env: &[(&str, &std::ffi::OsStr)],
) -> Output {
    let mut command = llmload();
    command
        .arg("run")
        .arg(plan)
        .arg("--out")
        .arg(out)
        .arg("--quiet")
        .args(args);
    for (name, value) in env {
        command.env(name, value);
    }
    command.output().unwrap()
}

/// Writes `plan` in a fresh directory and runs `llmload run` on it with `args`.
pub fn run_plan(plan: &str, args: &[&str]) -> Run {
    run_in(tempfile::tempdir().unwrap(), plan, args)
}

/// Writes `plan` in `dir` (beside the files a test put there: a dataset, a trace, a tokenizer)
/// and runs `llmload run` on it with `args`; the report goes to `dir/out`.
pub fn run_in(dir: tempfile::TempDir, plan: &str, args: &[&str]) -> Run {
    let path = write_plan(dir.path(), plan);
    let output = run_file(&path, &dir.path().join("out"), args, &[]);
    Run { dir, output }
}

/// A plan against the embedded simulator.
pub fn sim_plan(sim: &str, workload: &str, phases: &str, sla: &str) -> String {
    format!(
        "plan \"t\" {{ seed 3 }}\ntarget \"sim\" {{ timeout \"10s\" }}\nsim {{ {sim} }}\nworkload {{ {workload} }}\n{phases}\nsla {{ {sla} }}\n"
    )
}

/// The phase called `name` in a summary.
pub fn phase(summary: &serde_json::Value, name: &str) -> serde_json::Value {
    summary["phases"]
        .as_array()
        .expect("phases")
        .iter()
        .find(|p| p["name"] == name)
        .unwrap_or_else(|| panic!("no phase {name}"))
        .clone()
}

pub fn stat(summary: &serde_json::Value, scope: &str, metric: &str, stat: &str) -> f64 {
    let node = if scope == "overall" {
        &summary["overall"]
    } else {
        summary["phases"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == scope)
            .unwrap_or_else(|| panic!("no phase {scope}"))
    };
    node["metrics"][metric][stat]
        .as_f64()
        .unwrap_or_else(|| panic!("{scope}.{metric}.{stat} missing in {node}"))
}

/// `llmload sim --port 0 ARGS`, started as its own process.
pub struct SimProcess {
    child: Child,
    pub url: String,
    /// Where [`SimProcess::get`] asks: the URL, or the plain port a TLS server keeps beside
    /// it (the fidelity benchmark's calibrated server names it second).
    plain_url: String,
}

impl SimProcess {
    /// With the engine profile `profile` (the text of a KDL file).
    pub fn start(profile: &str) -> SimProcess {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("profile.kdl");
        std::fs::write(&path, profile).unwrap();
        let sim = SimProcess::start_with(&["--profile", path.to_str().unwrap()]);
        std::mem::forget(dir); // the profile file must outlive the process
        sim
    }

    pub fn start_with(args: &[&str]) -> SimProcess {
        SimProcess::start_with_env(args, &[])
    }

    /// [`SimProcess::start_with`], with `env` set for the simulator alone (the key a `sim {
    /// api-key env= }` profile requires).
    pub fn start_with_env(args: &[&str], env: &[(&str, &str)]) -> SimProcess {
        let child = llmload()
            .args(["sim", "--port", "0"])
            .args(args)
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        SimProcess::from_child(child)
    }

    /// A server already started with its stdout piped, whose first line names its URL.
    #[allow(dead_code)] // the fidelity benchmark's calibrated server
    pub fn from_child(mut child: Child) -> SimProcess {
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let mut urls = line
            .split_whitespace()
            .filter(|w| w.starts_with("http://") || w.starts_with("https://"));
        let url = urls
            .next()
            .unwrap_or_else(|| panic!("no URL in {line:?}"))
            .to_string();
        let plain_url = urls.next().unwrap_or(&url).to_string();
        SimProcess {
            child,
            url,
            plain_url,
        }
    }

    /// The body of GET `path`, over a plain socket.
    pub fn get(&self, path: &str) -> String {
        let authority = self
            .plain_url
            .trim_start_matches("http://")
            .trim_end_matches("/v1");
        let mut stream = std::net::TcpStream::connect(authority).unwrap();
        write!(
            stream,
            "GET {path} HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut text = String::new();
        stream.read_to_string(&mut text).unwrap();
        match text.split_once("\r\n\r\n") {
            Some((_, body)) => body.to_string(),
            None => text,
        }
    }

    pub fn metrics(&self) -> String {
        self.get("/metrics")
    }

    pub fn metric(&self, name: &str) -> f64 {
        let text = self.metrics();
        text.lines()
            .find(|l| l.starts_with(&format!("{name}{{")))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {name} in\n{text}"))
    }
}

impl Drop for SimProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A hand-written HTTP/1.1 server on loopback that writes exactly the bytes a scenario calls
/// for: the tests' hostile server.
pub mod wire {
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::sync::{Arc, Mutex};

    /// Reads one HTTP request (headers and a Content-Length body); returns its body, or `None`
    /// when the connection ended first.
    pub fn read_request(stream: &mut TcpStream) -> Option<Vec<u8>> {
        let mut buffer = Vec::new();
        let mut chunk = [0u8; 4096];
        loop {
            let n = stream.read(&mut chunk).unwrap_or(0);
            if n == 0 {
                return None;
            }
            buffer.extend_from_slice(&chunk[..n]);
            if let Some(end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&buffer[..end]).to_lowercase();
                let length: usize = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .and_then(|v| v.trim().parse().ok())
                    .unwrap_or(0);
                if buffer.len() >= end + 4 + length {
                    return Some(buffer.split_off(end + 4));
                }
            }
        }
    }

    /// Serves `scenarios` in order, one connection each, on a loopback port.
    pub fn serve(scenarios: Vec<fn(&mut TcpStream)>) -> u16 {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        std::thread::spawn(move || {
            for scenario in scenarios {
                let Ok((mut stream, _)) = listener.accept() else {
                    return;
                };
                // Each connection on its own thread, so a stalling scenario holds up no other.
                std::thread::spawn(move || {
                    stream.set_nodelay(true).unwrap();
                    read_request(&mut stream);
                    scenario(&mut stream);
                    let _ = stream.flush();
                });
            }
        });
        port
    }

    pub fn send(stream: &mut TcpStream, bytes: &str) {
        let _ = stream.write_all(bytes.as_bytes());
        let _ = stream.flush();
    }

    /// A whole non-streamed response with this status line and body.
    pub fn respond(stream: &mut TcpStream, status: &str, body: &str) {
        send(
            stream,
            &format!("HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len()),
        );
    }

    /// One request as a capturing server saw it.
    #[derive(Debug, Clone)]
    pub struct Seen {
        /// Its request line (`POST /v1/chat/completions HTTP/1.1`).
        pub line: String,
        /// Its head: the request line and the headers, as sent.
        pub head: String,
        /// Its headers, names lower-cased.
        pub headers: Vec<(String, String)>,
        /// Its body.
        pub body: Vec<u8>,
    }

    impl Seen {
        /// The body as JSON (`Null` when it is none).
        pub fn json(&self) -> serde_json::Value {
            serde_json::from_slice(&self.body).unwrap_or_default()
        }

        /// A header's value.
        pub fn header(&self, name: &str) -> Option<&str> {
            self.headers
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.as_str())
        }
    }

    /// Serves every connection on its own thread, keeping every request it reads (in the order
    /// they came) and answering each as `answer` writes: the tests' capturing server.
    pub fn capture(answer: fn(&Seen, &mut TcpStream)) -> (u16, Arc<Mutex<Vec<Seen>>>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let kept = seen.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                let kept = kept.clone();
                std::thread::spawn(move || {
                    let mut buffer = Vec::new();
                    let mut chunk = [0u8; 8192];
                    let (head, body) = loop {
                        let n = stream.read(&mut chunk).unwrap_or(0);
                        if n == 0 {
                            return;
                        }
                        buffer.extend_from_slice(&chunk[..n]);
                        if let Some(end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
                            let head = String::from_utf8_lossy(&buffer[..end]).to_string();
                            let length: usize = head
                                .to_lowercase()
                                .lines()
                                .find_map(|l| l.strip_prefix("content-length:"))
                                .and_then(|v| v.trim().parse().ok())
                                .unwrap_or(0);
                            if buffer.len() >= end + 4 + length {
                                break (head, buffer[end + 4..end + 4 + length].to_vec());
                            }
                        }
                    };
                    let line = head.lines().next().unwrap_or("").to_string();
                    let headers = head
                        .lines()
                        .skip(1)
                        .filter_map(|l| l.split_once(':'))
                        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
                        .collect();
                    let request = Seen {
                        line,
                        head,
                        headers,
                        body,
                    };
                    kept.lock().unwrap().push(request.clone());
                    answer(&request, &mut stream);
                    let _ = stream.flush();
                });
            }
        });
        (port, seen)
    }

    pub const SSE_HEAD: &str =
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n";
}

/// Tests that measure time take turns: one at a time, so that none is measured on a machine
/// the others keep busy. Held for the test's length; a test that panicked does not block the
/// rest.
pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Validates `xml` against tests/fixtures/junit.xsd with xmllint. `.ci/run` installs xmllint and
/// sets LLMLOAD_REQUIRE_XMLLINT, so CI never skips this; elsewhere, without xmllint, it says so.
pub fn validate_junit(xml: &std::path::Path) {
    let output = std::process::Command::new("xmllint")
        .args(["--noout", "--schema", "tests/fixtures/junit.xsd"])
        .arg(xml)
        .output();
    match output {
        Ok(output) => assert!(
            output.status.success(),
            "JUnit XML is not valid:\n{}\n{}",
            String::from_utf8_lossy(&output.stderr),
            std::fs::read_to_string(xml).unwrap()
        ),
        Err(_) if std::env::var_os("LLMLOAD_REQUIRE_XMLLINT").is_none() => {
            // Written to stderr itself, not through eprintln!, which the test harness captures
            // and shows only for failing tests: a skipped check must be seen.
            use std::io::Write;
            let _ = writeln!(
                std::io::stderr(),
                "\nSKIPPED: xmllint not found, so the JUnit schema check did not run \
                 (apt-get install libxml2-utils; .ci/run installs it and requires it)\n"
            );
        }
        Err(e) => panic!("xmllint is required here: {e}"),
    }
}

/// Debian's Chromium, when installed; without it a test skips, unless
/// LLMLOAD_REQUIRE_CHROMIUM is set (CI sets it).
pub fn chromium() -> Option<&'static str> {
    let found = ["/usr/bin/chromium", "/usr/bin/chromium-browser"]
        .into_iter()
        .find(|p| Path::new(p).exists());
    if found.is_none() {
        assert!(
            std::env::var_os("LLMLOAD_REQUIRE_CHROMIUM").is_none(),
            "LLMLOAD_REQUIRE_CHROMIUM is set and no Chromium is installed (apt-get install chromium)"
        );
        eprintln!("SKIPPED: no Chromium (apt-get install chromium) to render report.html");
    }
    found
}

/// Runs headless Chromium with `args`, its profile under `scratch`.
pub fn browser(chromium: &str, scratch: &Path, args: &[String]) -> std::process::Output {
    std::process::Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
            "--window-size=1100,2400",
        ])
        .arg(format!(
            "--user-data-dir={}",
            scratch.join("chromium-profile").display()
        ))
        .args(args)
        .stderr(std::process::Stdio::null())
        .output()
        .expect("Chromium runs")
}

/// The measurements the probe makes in the page, as JSON in a `<pre>` it appends.
pub const PROBE: &str = r#"<script>
(() => {
  const box = (e) => { const r = e.getBoundingClientRect(); return { x: r.left, y: r.top, w: r.width, h: r.height }; };
  const overlap = (a, b) => a.x + 0.5 < b.x + b.w && b.x + 0.5 < a.x + a.w && a.y + 0.5 < b.y + b.h && b.y + 0.5 < a.y + a.h;
  const out = { charts: [], overlaps: [], baseline_table: !!document.querySelector('#baseline + p + table, h2#baseline ~ table') };
  for (const figure of document.querySelectorAll('figure')) {
    const svg = figure.querySelector('svg');
    const size = svg ? box(svg) : { w: 0, h: 0 };
    const marks = svg ? svg.querySelectorAll('path, circle, rect').length : 0;
    out.charts.push({ id: figure.id, width: size.w, height: size.h, marks: marks });
    if (!svg) continue;
    const labels = [...svg.querySelectorAll('text')]
      .filter((t) => t.textContent.trim() !== '')
      .map((t) => ({ text: t.firstChild ? t.firstChild.textContent : t.textContent, b: box(t) }));
    for (let i = 0; i < labels.length; i++) {
      for (let j = i + 1; j < labels.length; j++) {
        if (overlap(labels[i].b, labels[j].b)) {
          out.overlaps.push(figure.id + ': "' + labels[i].text + '" over "' + labels[j].text + '"');
        }
      }
    }
  }
  const pre = document.createElement('pre');
  pre.id = 'llmload-probe';
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
})();
</script>"#;

/// What Chromium measured in the page at `page` (charts' sizes and marks, labels that overlap),
/// with the probe added to a copy of it in `scratch`; a screenshot of the page is kept as
/// `name.png` in LLMLOAD_SCREENSHOTS when it is set.
pub fn measure_page(chromium: &str, page: &Path, scratch: &Path, name: &str) -> serde_json::Value {
    let html = std::fs::read_to_string(page).unwrap();
    assert!(!html.contains("<script"), "{} has a script", page.display());
    let probed = scratch.join("probed.html");
    std::fs::write(&probed, html.replace("</body>", &format!("{PROBE}</body>"))).unwrap();
    let dom = browser(
        chromium,
        scratch,
        &["--dump-dom".into(), format!("file://{}", probed.display())],
    );
    let dom = String::from_utf8_lossy(&dom.stdout);
    let json = dom
        .split("<pre id=\"llmload-probe\">")
        .nth(1)
        .and_then(|rest| rest.split("</pre>").next())
        .unwrap_or_else(|| panic!("the probe did not run: {}", &dom[..dom.len().min(400)]));
    let json = json
        .replace("&quot;", "\"")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&");
    if let Some(dir) = std::env::var_os("LLMLOAD_SCREENSHOTS") {
        let shot = PathBuf::from(dir).join(format!("{name}.png"));
        let taken = browser(
            chromium,
            scratch,
            &[
                format!("--screenshot={}", shot.display()),
                format!("file://{}", page.display()),
            ],
        );
        assert!(taken.status.success());
    }
    serde_json::from_str(&json).unwrap_or_else(|e| panic!("{e}: {json}"))
}

/// Every chart in `ids` is drawn with a size and marks, and no labels overlap.
pub fn assert_readable(measured: &serde_json::Value, ids: &[&str]) {
    let charts = measured["charts"].as_array().unwrap();
    for id in ids {
        let chart = charts
            .iter()
            .find(|c| c["id"] == *id)
            .unwrap_or_else(|| panic!("no chart {id} in {charts:?}"));
        assert!(
            chart["width"].as_f64().unwrap() > 300.0 && chart["height"].as_f64().unwrap() > 100.0,
            "{chart}"
        );
        assert!(chart["marks"].as_u64().unwrap() > 5, "{chart}");
    }
    let overlaps = measured["overlaps"].as_array().unwrap();
    assert!(overlaps.is_empty(), "labels overlap: {overlaps:#?}");
}

/// A shard's records grown to `requests` requests, written to `out`: its header and phase lines
/// (`lines`, read from a real shard run) as they are, its first request copied with this shard's
/// sequence numbers (`shard` of `count`) and send times `step_us` apart, its ends moved past the
/// last. How tests and benchmarks make runs longer than they could send.
pub fn write_grown_shard(
    out: &mut impl Write,
    lines: &[serde_json::Value],
    shard: u64,
    count: u64,
    requests: u64,
    step_us: u64,
) {
    let mut template = lines
        .iter()
        .find(|l| l["event"] == "request")
        .expect("a request")
        .clone();
    for line in lines
        .iter()
        .filter(|l| l["event"] == "run" || l["event"] == "phase_start")
    {
        writeln!(out, "{line}").unwrap();
    }
    // The request's line with markers where its numbers go, cut once: each line is then the
    // pieces and three numbers (serializing a JSON value per line took 70 µs a line).
    template["seq"] = 999_999_991u64.into();
    template["intended_send_us"] = 999_999_992u64.into();
    template["actual_send_us"] = 999_999_993u64.into();
    let text = template.to_string();
    // The markers in the order the line holds them, and the text between them.
    let mut at: Vec<(usize, usize)> = ["999999991", "999999992", "999999993"]
        .iter()
        .enumerate()
        .map(|(which, marker)| (text.find(marker).expect("a marker"), which))
        .collect();
    at.sort_unstable();
    let mut pieces = Vec::new();
    let mut from = 0;
    for (position, _) in &at {
        pieces.push(&text[from..*position]);
        from = position + "999999991".len();
    }
    let tail = &text[from..];
    for i in 0..requests {
        let numbers = [
            shard - 1 + i * count,
            i * step_us,
            i * step_us + step_us / 5,
        ];
        for (piece, (_, which)) in pieces.iter().zip(&at) {
            write!(out, "{piece}{}", numbers[*which]).unwrap();
        }
        writeln!(out, "{tail}").unwrap();
    }
    for line in lines
        .iter()
        .filter(|l| l["event"] == "phase_end" || l["event"] == "run_end")
    {
        let mut line = line.clone();
        line["at_us"] = (requests * step_us + 1_000_000).into();
        if line["event"] == "phase_end" {
            line["sent"] = requests.into();
        }
        writeln!(out, "{line}").unwrap();
    }
}

/// The live processes of process group `group` (Linux, from /proc): what a server llmload
/// started may have left behind. Zombies count as gone (nothing runs).
pub fn processes_in_group(group: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                return false;
            };
            // Fields after the command name: state, ppid, pgrp.
            let Some((_, rest)) = stat.rsplit_once(')') else {
                return false;
            };
            let fields: Vec<&str> = rest.split_whitespace().collect();
            fields.first() != Some(&"Z") && fields.get(2) == Some(&group.to_string().as_str())
        })
        .collect()
}

/// The warning or note of `code` in a summary, if there is one.
pub fn warning_of<'a>(summary: &'a serde_json::Value, code: &str) -> Option<&'a serde_json::Value> {
    summary["warnings"]
        .as_array()?
        .iter()
        .find(|w| w["code"] == code)
}

/// A loopback port that takes every connection and never reads from or answers it, for as
/// long as the test process lasts: a receiver or collector that hangs.
#[allow(dead_code)] // not every test binary uses every helper
pub fn never_answering_port() -> u16 {
    let stalled = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = stalled.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let mut kept = Vec::new();
        for stream in stalled.incoming().flatten() {
            kept.push(stream);
        }
    });
    port
}
