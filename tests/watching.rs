//! Watching a run where people already look: `run --metrics-listen` serves the run's own
//! metrics as Prometheus scrapes them, while it goes and (with `--metrics-linger`) after it, and
//! what it serves agrees with the records.

mod common;
use common::*;

use std::collections::BTreeMap;
use std::io::{Read, Write};

/// `GET /metrics`, as a scraper asks: the status line and headers, and the body.
fn scrape(port: u16) -> Option<(String, String)> {
    get(port, "/metrics")
}

/// `llmload run PLAN --out OUT --quiet` serving its metrics on `port`, lingering `linger`.
fn spawn_exported(
    plan: &std::path::Path,
    out: &std::path::Path,
    port: u16,
    linger: &str,
) -> std::process::Child {
    llmload()
        .arg("run")
        .arg(plan)
        .arg("--out")
        .arg(out)
        .arg("--quiet")
        .args(["--metrics-listen", &format!("127.0.0.1:{port}")])
        .args(["--metrics-linger", linger])
        .spawn()
        .unwrap()
}

/// Each sample line's value, by its name and labels as written.
fn samples(body: &str) -> BTreeMap<String, f64> {
    body.lines()
        .filter(|line| !line.starts_with('#') && !line.is_empty())
        .filter_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            Some((series.to_string(), value.parse().ok()?))
        })
        .collect()
}

/// The one sample whose series starts with `name{` and holds every one of `labels`.
fn value(samples: &BTreeMap<String, f64>, name: &str, labels: &[&str]) -> f64 {
    let found: Vec<f64> = samples
        .iter()
        .filter(|(series, _)| series.starts_with(&format!("{name}{{")))
        .filter(|(series, _)| labels.iter().all(|l| series.contains(l)))
        .map(|(_, v)| *v)
        .collect();
    assert_eq!(found.len(), 1, "{name} {labels:?}: {found:?}");
    found[0]
}

fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

#[test]
fn the_metrics_endpoint_serves_the_run_as_it_goes_and_agrees_with_its_records() {
    let dir = tempfile::tempdir().unwrap();
    let plan = write_plan(
        dir.path(),
        "plan \"watch \\\"me\\\"\" { seed 5 }\ntarget \"sim\" { timeout \"10s\" }\nsim { ttft \"20ms\"; itl \"5ms\"; faults { http-429 \"10%\" } }\nworkload { input 16; output 8 }\nphase \"steady\" { rate 20; arrivals \"constant\"; duration \"3s\" }\nsla { throttled-rate < \"50%\" }\n",
    );
    let port = free_port();
    let out = dir.path().join("out");
    let mut child = spawn_exported(&plan, &out, port, "3s");
    // While it runs: every scrape answers, and the counters never go back.
    let mut during: Vec<BTreeMap<String, f64>> = Vec::new();
    while !out.join("report.md").exists() {
        if let Some(status) = child.try_wait().unwrap() {
            panic!("the run ended ({status}) without its report");
        }
        if let Some((head, body)) = scrape(port) {
            assert!(head.starts_with("HTTP/1.1 200"), "{head}");
            assert!(
                head.contains("application/openmetrics-text; version=1.0.0"),
                "{head}"
            );
            assert!(body.ends_with("# EOF\n"), "{body}");
            during.push(samples(&body));
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    // After it: what it served last is the run's whole count.
    let (_, last) = scrape(port).expect("served while lingering");
    assert!(child.wait().unwrap().code().is_some());
    let last = samples(&last);
    // (Before the phase starts, there is no series yet.)
    let sent = |s: &BTreeMap<String, f64>| -> f64 {
        s.iter()
            .filter(|(series, _)| series.starts_with("llmload_requests_sent_total{"))
            .map(|(_, v)| v)
            .sum()
    };
    assert!(during.len() >= 5, "{} scrapes during the run", during.len());
    assert!(during.windows(2).all(|w| sent(&w[0]) <= sent(&w[1])));
    assert!(during
        .iter()
        .any(|s| sent(s) > 0.0 && sent(s) < sent(&last)));

    let records = read_records(&out);
    let header = &read_log(&out)[0];
    let run = format!(
        "run=\"{}\"",
        header["request_id_prefix"].as_str().expect("a run id")
    );
    let labels = [
        run.as_str(),
        "plan=\"watch \\\"me\\\"\"",
        "phase=\"steady\"",
    ];
    assert_eq!(
        value(&last, "llmload_requests_sent_total", &labels),
        records.len() as f64
    );
    let ok: Vec<&serde_json::Value> = records.iter().filter(|r| r["error"].is_null()).collect();
    let throttled = records.len() - ok.len();
    assert!(throttled > 0, "the simulator throttles a tenth");
    let finished = |outcome: &str| {
        let outcome = format!("outcome=\"{outcome}\"");
        let mut with = labels.to_vec();
        with.push(&outcome);
        value(&last, "llmload_requests_finished_total", &with)
    };
    assert_eq!(finished("ok"), ok.len() as f64);
    assert_eq!(finished("throttled"), throttled as f64);
    assert_eq!(finished("failed"), 0.0);
    assert_eq!(value(&last, "llmload_in_flight", &labels), 0.0);
    let tokens: u64 = ok
        .iter()
        .map(|r| r["completion_tokens"].as_u64().unwrap())
        .sum();
    assert_eq!(
        value(&last, "llmload_output_tokens_total", &labels),
        tokens as f64
    );
    // Each histogram's +Inf bucket is its count: every answered request's TTFT and E2E, each
    // gap between its tokens.
    for (name, count) in [
        ("llmload_ttft_seconds", ok.len()),
        ("llmload_e2e_seconds", ok.len()),
        ("llmload_itl_seconds", ok.len() * 7),
    ] {
        let total = value(&last, &format!("{name}_count"), &labels);
        assert_eq!(total, count as f64, "{name}");
        let inf = value(
            &last,
            &format!("{name}_bucket"),
            &[labels[2], "le=\"+Inf\""],
        );
        assert_eq!(inf, total, "{name}");
    }
    // A TTFT of about 20 ms is in the 25 ms bucket, not the 10 ms one.
    let ttft_le = |le: &str| {
        value(
            &last,
            "llmload_ttft_seconds_bucket",
            &[labels[2], &format!("le=\"{le}\"")],
        )
    };
    assert_eq!(ttft_le("0.01"), 0.0);
    assert!(ttft_le("0.025") >= 0.9 * ok.len() as f64);
}

#[test]
fn an_address_that_cannot_be_listened_on_is_refused_before_the_run() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let run = run_plan(
        "plan \"t\"\ntarget \"sim\"\nworkload { input 8; output 4 }\nphase \"p\" { concurrency 1; requests 2 }\n",
        &["--metrics-listen", &format!("127.0.0.1:{port}")],
    );
    assert_eq!(run.code(), 2, "{}", run.stderr());
    assert!(
        run.stderr()
            .contains(&format!("--metrics-listen 127.0.0.1:{port}")),
        "{}",
        run.stderr()
    );
    assert!(!run.out().join("records.jsonl").exists());
    drop(taken);
}

/// Debian's Prometheus, when it is on this machine (`.ci/run` installs it and sets
/// `LLMLOAD_REQUIRE_PROMETHEUS=1`, so CI never skips this).
fn prometheus() -> Option<std::path::PathBuf> {
    let found = ["/usr/bin/prometheus", "/usr/local/bin/prometheus"]
        .iter()
        .map(std::path::PathBuf::from)
        .find(|path| path.exists());
    if found.is_none() {
        assert!(
            std::env::var_os("LLMLOAD_REQUIRE_PROMETHEUS").is_none_or(|v| v != "1"),
            "Prometheus is required (apt-get install prometheus)"
        );
        eprintln!("skipped: no prometheus on this machine (apt-get install prometheus)");
    }
    found
}

/// A Prometheus server of its own, scraping `target` every second; killed when dropped.
struct Prometheus {
    child: std::process::Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Prometheus {
    /// Scraping `targets` (job `llmload`), or (without any) receiving remote writes only.
    fn start(binary: &std::path::Path, targets: &[u16]) -> Prometheus {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("prometheus.yml");
        let listed: Vec<String> = targets.iter().map(|t| format!("'127.0.0.1:{t}'")).collect();
        let scrape = match targets {
            [] => String::new(),
            _ => format!(
                "scrape_configs:\n  - job_name: llmload\n    static_configs:\n      - targets: [{}]\n",
                listed.join(", ")
            ),
        };
        std::fs::write(
            &config,
            format!("global:\n  scrape_interval: 1s\n  scrape_timeout: 900ms\n{scrape}"),
        )
        .unwrap();
        let port = free_port();
        let child = std::process::Command::new(binary)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .arg("--web.enable-remote-write-receiver")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let prometheus = Prometheus {
            child,
            port,
            _dir: dir,
        };
        let ready = (0..300).any(|_| {
            std::thread::sleep(std::time::Duration::from_millis(100));
            get(port, "/-/ready").is_some_and(|(head, _)| head.starts_with("HTTP/1.1 200"))
        });
        assert!(ready, "Prometheus did not get ready on port {port}");
        // Its discovery hands targets to the scrapers at most every 5 s: until the target is
        // active, nothing is scraped.
        let active = (0..300).any(|_| {
            std::thread::sleep(std::time::Duration::from_millis(100));
            get(port, "/api/v1/targets")
                .is_some_and(|(_, body)| body.matches("\"scrapeUrl\"").count() == targets.len())
        });
        assert!(active, "Prometheus never took its target");
        prometheus
    }

    /// An instant query's one value.
    fn value(&self, query: &str) -> Option<f64> {
        let (_, body) = get(self.port, &format!("/api/v1/query?query={query}"))?;
        let said: serde_json::Value = serde_json::from_str(&body).ok()?;
        let result = said["data"]["result"].as_array()?;
        assert!(result.len() <= 1, "{query}: {said}");
        result.first()?["value"][1].as_str()?.parse().ok()
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A GET on loopback, read to its end (the body of a chunked answer kept as it came).
fn get(port: u16, path: &str) -> Option<(String, String)> {
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .ok()?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut text = String::new();
    stream.read_to_string(&mut text).ok()?;
    let (head, body) = text.split_once("\r\n\r\n")?;
    // A chunked body: the JSON between its first size line and the next.
    let body = match head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        true => body.split_once("\r\n").map_or(body, |(_, rest)| rest),
        false => body,
    };
    let body = body.rsplit_once("\r\n0\r\n").map_or(body, |(json, _)| json);
    Some((head.to_string(), body.to_string()))
}

/// A real Prometheus scrapes the run through its OpenMetrics parser, and what it holds after
/// the run is the records' count.
#[test]
fn a_real_prometheus_scrapes_the_run_and_holds_its_counts() {
    let Some(binary) = prometheus() else { return };
    let port = free_port();
    let server = Prometheus::start(&binary, &[port]);
    let dir = tempfile::tempdir().unwrap();
    let plan = write_plan(
        dir.path(),
        "plan \"scraped\" { seed 5 }\ntarget \"sim\" { timeout \"10s\" }\nsim { ttft \"20ms\"; itl \"5ms\"; faults { http-429 \"10%\" } }\nworkload { input 16; output 8 }\nphase \"steady\" { rate 20; arrivals \"constant\"; duration \"3s\" }\nsla { throttled-rate < \"50%\" }\n",
    );
    let out = dir.path().join("out");
    let mut child = spawn_exported(&plan, &out, port, "8s");
    // Asked while the exporter lingers, two scrapes after the report: once it is gone, a
    // failed scrape marks every series stale.
    while !out.join("report.md").exists() {
        if let Some(status) = child.try_wait().unwrap() {
            panic!("the run ended ({status}) without its report");
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    std::thread::sleep(std::time::Duration::from_millis(2500));
    let records = read_records(&out);
    let ok = records.iter().filter(|r| r["error"].is_null()).count();
    let query = |q: &str| {
        server
            .value(q)
            .unwrap_or_else(|| panic!("Prometheus has no {q}"))
    };
    assert_eq!(query("llmload_requests_sent_total"), records.len() as f64);
    assert_eq!(
        query("llmload_requests_finished_total%7Boutcome%3D%22ok%22%7D"),
        ok as f64
    );
    assert_eq!(
        query("llmload_requests_finished_total%7Boutcome%3D%22throttled%22%7D"),
        (records.len() - ok) as f64
    );
    assert_eq!(query("llmload_ttft_seconds_count"), ok as f64);
    // Its own view of the target: up, scraped as OpenMetrics without a parse error.
    assert_eq!(query("up%7Bjob%3D%22llmload%22%7D"), 1.0);
    // Every query of the Grafana dashboard parses and finds data, its variables at "All".
    for expr in dashboard_queries() {
        let expr = expr
            .replace("$__rate_interval", "10s")
            .replace("=~\"$run\"", "=~\".*\"")
            .replace("=~\"$plan\"", "=~\".*\"")
            .replace("=~\"$phase\"", "=~\".*\"");
        let encoded: String = expr
            .bytes()
            .map(|b| match b {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'_' | b'.' => (b as char).to_string(),
                other => format!("%{other:02X}"),
            })
            .collect();
        let (_, body) = get(server.port, &format!("/api/v1/query?query={encoded}"))
            .expect("Prometheus answers");
        let said: serde_json::Value = serde_json::from_str(&body).expect("JSON");
        assert_eq!(said["status"], "success", "{expr}: {said}");
        let found = said["data"]["result"].as_array().map_or(0, Vec::len);
        assert!(found > 0, "no data for {expr}: {body}");
    }
    assert!(child.wait().unwrap().code().is_some());
}

/// The PromQL of every panel of deploy/grafana/llmload.json.
fn dashboard_queries() -> Vec<String> {
    let text = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/grafana/llmload.json"),
    )
    .unwrap();
    let dashboard: serde_json::Value = serde_json::from_str(&text).unwrap();
    dashboard["panels"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|panel| panel["targets"].as_array().unwrap().clone())
        .map(|target| target["expr"].as_str().unwrap().to_string())
        .collect()
}

/// The dashboard asks only for series llmload serves (each `llmload_…` name in its queries
/// and variables is a family, or a histogram's `_bucket`, of a real scrape), and only by labels
/// they carry.
#[test]
fn the_grafana_dashboard_queries_only_what_the_exporter_serves() {
    let dir = tempfile::tempdir().unwrap();
    let plan = write_plan(
        dir.path(),
        "plan \"t\" { seed 5 }\ntarget \"sim\"\nsim { ttft \"5ms\"; itl \"1ms\" }\nworkload { input 8; output 4 }\nphase \"p\" { rate 20; arrivals \"constant\"; duration \"1s\" }\n",
    );
    let port = free_port();
    let out = dir.path().join("out");
    let mut child = spawn_exported(&plan, &out, port, "2s");
    while !out.join("report.md").exists() {
        if let Some(status) = child.try_wait().unwrap() {
            panic!("the run ended ({status}) without its report");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let (_, body) = scrape(port).expect("served while lingering");
    assert!(child.wait().unwrap().code().is_some());
    let served = samples(&body);
    let names: std::collections::BTreeSet<&str> = served
        .keys()
        .filter_map(|series| series.split_once('{').map(|(name, _)| name))
        .collect();
    let labels: std::collections::BTreeSet<String> = served
        .keys()
        .flat_map(|series| {
            series
                .split(['{', ','])
                .skip(1)
                .filter_map(|pair| pair.split_once('=').map(|(l, _)| l.to_string()))
                .collect::<Vec<_>>()
        })
        .collect();
    let text = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/grafana/llmload.json"),
    )
    .unwrap();
    let mut asked = 0;
    for (at, _) in text.match_indices("llmload_") {
        let name: String = text[at..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        if name == "llmload_" {
            continue;
        }
        asked += 1;
        assert!(
            names.contains(name.as_str()),
            "the dashboard asks for {name}; served: {names:?}"
        );
    }
    assert!(asked >= 10, "{asked}");
    for expr in dashboard_queries() {
        for (at, _) in expr.match_indices(['{', ',', '(']) {
            let rest = &expr[at + 1..];
            let label: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            let follows = rest[label.len()..].trim_start();
            if !label.is_empty() && (follows.starts_with("=~") || follows.starts_with("=\"")) {
                assert!(
                    labels.contains(&label),
                    "{expr}: label {label}; served {labels:?}"
                );
            }
        }
    }
}

/// `--remote-write` pushes the run to a real Prometheus' receiver, a last time at its end, and
/// what it holds is the records' count; a receiver that is down costs the run nothing but the
/// samples, which it says it dropped.
#[test]
fn remote_write_pushes_the_run_and_a_dead_receiver_never_fails_it() {
    let Some(binary) = prometheus() else { return };
    let server = Prometheus::start(&binary, &[]);
    let plan = "plan \"pushed\" { seed 5 }\ntarget \"sim\" { timeout \"10s\" }\nsim { ttft \"20ms\"; itl \"5ms\" }\nworkload { input 16; output 8 }\nphase \"steady\" { rate 20; arrivals \"constant\"; duration \"2s\" }\nsla { error-rate < \"1%\" }\n";
    let write = format!("http://127.0.0.1:{}/api/v1/write", server.port);
    let run = run_plan(
        plan,
        &["--remote-write", &write, "--remote-write-interval", "500ms"],
    );
    assert!(matches!(run.code(), 0 | 3), "{}", run.stderr());
    let said = run.stderr();
    assert!(
        said.contains("remote-write: ") && !said.contains("failed"),
        "{said}"
    );
    let records = run.records();
    assert_eq!(
        server.value("llmload_requests_sent_total").expect("pushed"),
        records.len() as f64
    );
    assert_eq!(
        server.value("llmload_requests_finished_total%7Boutcome%3D%22ok%22%7D"),
        Some(records.len() as f64)
    );
    assert_eq!(
        server.value("llmload_ttft_seconds_count"),
        Some(records.len() as f64)
    );

    // Nothing listens there: every push fails at once, the run does not.
    let closed = format!("http://127.0.0.1:{}/api/v1/write", free_port());
    let down = run_plan(
        plan,
        &[
            "--remote-write",
            &closed,
            "--remote-write-interval",
            "500ms",
        ],
    );
    assert_eq!(down.code(), run.code(), "{}", down.stderr());
    assert_eq!(down.records().len(), records.len());
    let said = down.stderr();
    assert!(said.contains("remote-write: 0 push(es) accepted"), "{said}");
    assert!(
        said.contains("samples dropped (first: cannot connect)"),
        "{said}"
    );
}

/// A receiver that takes the connection and never answers: each push gives up after its
/// timeout, off the run's threads, and the run's own timing is untouched by it.
#[test]
fn a_receiver_that_never_answers_does_not_hold_the_run() {
    let port = never_answering_port();
    let plan = "plan \"stalled\" { seed 5 }\ntarget \"sim\" { timeout \"10s\" }\nsim { ttft \"5ms\"; itl \"1ms\" }\nworkload { input 16; output 4 }\nphase \"steady\" { rate 20; arrivals \"constant\"; duration \"2s\" }\n";
    let write = format!("http://127.0.0.1:{port}/api/v1/write");
    let started = std::time::Instant::now();
    let run = run_plan(
        plan,
        &["--remote-write", &write, "--remote-write-interval", "200ms"],
    );
    let took = started.elapsed();
    assert!(matches!(run.code(), 0 | 3), "{}", run.stderr());
    let said = run.stderr();
    assert!(
        said.contains("samples dropped (first: timed out)"),
        "{said}"
    );
    // The schedule was kept: every request went out within a few ms of its time.
    for record in run.records() {
        let lag = record["actual_send_us"].as_i64().unwrap()
            - record["intended_send_us"].as_i64().unwrap();
        assert!(lag < 20_000, "{record}");
    }
    // 2 s of schedule, then at most the push under way and the last one (2 s timeout each),
    // with room for a loaded machine.
    assert!(took < std::time::Duration::from_secs(15), "{took:?}");
}

/// `llmload run` in a pseudo-terminal (util-linux's `script`), as a person at a terminal runs
/// it: what it wrote, escape sequences and all. `None` where `script` is missing.
fn run_in_terminal(
    plan: &std::path::Path,
    out: &std::path::Path,
    env: &[(&str, &str)],
) -> Option<String> {
    let script = ["/usr/bin/script", "/bin/script"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())?;
    let command = format!(
        "{} run {} --out {}",
        env!("CARGO_BIN_EXE_llmload"),
        plan.display(),
        out.display()
    );
    let mut script = std::process::Command::new(script);
    script
        .args(["-qfec", &command, "/dev/null"])
        .env("COLUMNS", "100");
    for (name, value) in env {
        script.env(name, value);
    }
    let output = script.output().unwrap();
    Some(String::from_utf8_lossy(&output.stdout).into_owned())
}

#[test]
fn a_terminal_sees_the_phase_its_latencies_and_each_objective_as_it_stands() {
    let dir = tempfile::tempdir().unwrap();
    let plan = write_plan(
        dir.path(),
        "plan \"live\" { seed 3 }\ntarget \"sim\" { timeout \"10s\" }\nsim { ttft \"20ms\"; itl \"5ms\"; faults { http-5xx \"20%\" } }\nworkload { input 16; output 8 }\nphase \"steady\" { rate 20; arrivals \"constant\"; duration \"4s\" }\nsla { itl max < \"1s\"; error-rate < \"1%\"; request-throughput > 1 }\n",
    );
    let Some(shown) = run_in_terminal(&plan, &dir.path().join("out"), &[]) else {
        eprintln!("SKIPPED: no `script` (util-linux) for a pseudo-terminal");
        return;
    };
    // The block is redrawn in place: erased (cursor up, clear to the end), then drawn again.
    assert!(shown.contains("\x1b[J"), "{shown:?}");
    assert!(shown.contains("steady \x1b[36m█"), "{shown:?}");
    assert!(shown.contains("s left, "), "{shown:?}");
    assert!(shown.contains("requests to go"), "{shown:?}");
    assert!(shown.contains(" tok/s · TTFT p50 "), "{shown:?}");
    assert!(
        shown.contains(" · ITL p50 ") && shown.contains(" · E2E p50 "),
        "{shown:?}"
    );
    // Each objective as the verdict will judge it, colored.
    assert!(shown.contains("\x1b[32m✓ holding"), "{shown:?}");
    assert!(shown.contains("itl max < 1s ("), "{shown:?}");
    assert!(shown.contains("\x1b[31;1m✗ breaking"), "{shown:?}");
    assert!(shown.contains("error-rate < 1% ("), "{shown:?}");
    assert!(shown.contains("judged at the end"), "{shown:?}");
    // The verdict agrees, and the block is gone before it is printed.
    let verdict = shown.rfind("FAIL: 1 of 3").expect("the verdict");
    let last_block = shown.rfind("judged at the end").unwrap();
    assert!(last_block < verdict);
    let no_color = run_in_terminal(&plan, &dir.path().join("out2"), &[("NO_COLOR", "1")]).unwrap();
    assert!(
        no_color.contains("✗ breaking") && no_color.contains("\x1b[J"),
        "{no_color:?}"
    );
    assert!(
        !no_color.contains("\x1b[31;1m") && !no_color.contains("\x1b[32m"),
        "{no_color:?}"
    );
}

/// `metrics prometheus=…`: a Prometheus scraping two replicas holds the server telemetry, read
/// after the run over its window, each step the replicas summed.
#[test]
fn server_telemetry_is_read_from_a_prometheus_scraping_the_replicas() {
    let Some(binary) = prometheus() else { return };
    let replica = || SimProcess::start_with(&["--profile", "tiny"]);
    let (a, b) = (replica(), replica());
    // Replica b answers once before: its counter is a constant in every sum.
    let warm = run_plan(
        &format!("plan \"warm\"\ntarget \"{}\" {{ api \"completions\"; model \"m\"; metrics #false }}\nworkload {{ input 16; output 7 ignore-eos=#true }}\nphase \"one\" {{ requests 1; concurrency 1 }}\n", b.url),
        &[],
    );
    assert_eq!(warm.code(), 0, "{}", warm.stderr());
    let b_tokens = b.metric("vllm:generation_tokens_total");
    assert!(b_tokens >= 7.0, "{b_tokens}");
    let port = |url: &str| -> u16 {
        url.rsplit(':')
            .next()
            .unwrap()
            .split('/')
            .next()
            .unwrap()
            .parse()
            .unwrap()
    };
    let server = Prometheus::start(&binary, &[port(&a.url), port(&b.url)]);
    // Both scraped once before the run starts, so its first step holds both.
    let scraped = (0..100).any(|_| {
        std::thread::sleep(std::time::Duration::from_millis(100));
        server.value("count(up%3D%3D1)") == Some(2.0)
    });
    assert!(scraped, "Prometheus never scraped both replicas");
    let plan = format!(
        "plan \"replicas\" {{ seed 4 }}\ntarget \"{}\" {{ api \"completions\"; model \"m\"; metrics prometheus=\"http://127.0.0.1:{}\" match=\"{{job=\\\"llmload\\\"}}\" lag=\"2s\" interval=\"1s\" }}\nworkload {{ input 64; output 16 ignore-eos=#true }}\nphase \"steady\" {{ rate 8; arrivals \"constant\"; duration \"4s\" }}\nsla {{ server-running max < 1000 }}\n",
        a.url, server.port
    );
    let run = run_plan(&plan, &[]);
    assert_eq!(run.code(), 0, "{}", run.stderr());
    let records = run.records();
    let tokens: f64 = records
        .iter()
        .map(|r| r["completion_tokens"].as_f64().unwrap())
        .sum();
    let lines: Vec<serde_json::Value> = std::fs::read_to_string(run.out().join("telemetry.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let source = &lines[0];
    assert_eq!(source["kind"], "source", "{lines:?}");
    let url = source["url"].as_str().unwrap();
    assert!(url.ends_with("(Prometheus, {job=\"llmload\"})"), "{url}");
    let generated: Vec<f64> = lines
        .iter()
        .filter(|l| l["kind"] == "sample")
        .map(|l| l["values"]["generation_tokens"].as_f64().unwrap())
        .collect();
    assert!(
        generated.len() >= 4,
        "one sample a second of the run: {lines:?}"
    );
    // Each step sums both replicas: b's constant, plus a's tokens so far (none at the start,
    // at most the run's at the end).
    assert_eq!(generated[0], b_tokens, "{generated:?}");
    let last = *generated.last().unwrap();
    assert!(
        last <= b_tokens + tokens && last >= b_tokens + tokens / 2.0,
        "{generated:?} {tokens}"
    );
    assert!(generated.windows(2).all(|w| w[0] <= w[1]), "{generated:?}");
    // The phase's server metrics come from them, and judge.
    let summary = run.summary();
    let text = summary.to_string();
    assert!(text.contains("Prometheus"), "{text}");
    assert!(
        run.stdout().contains("server-running max < 1000"),
        "{}",
        run.stdout()
    );
}
