//! Measure the measurer: llmload's timing error, schedule fidelity, cost, memory, ceiling and
//! long-context behaviour, each beside a bare baseline client, against `llmload sim` running as
//! its own process on this machine.
//!
//! `cargo bench --bench fidelity` runs every scenario (about half an hour on 2 cores);
//! `cargo bench --bench fidelity -- timing schedule` runs some. `LLMLOAD_BENCH_SECONDS` sets the
//! measured seconds per run (default 10); `LLMLOAD_BENCH_RECORDS=zstd` (or `jsonl`) how llmload
//! writes its records. Results print as Markdown tables and are written to
//! target/tmp/fidelity/results.md; docs/performance.md holds a copy with the machine's
//! description.
//!
//! The truth is the simulator's record of when it wrote each token (`--record-writes`); see
//! `llmload::selfcheck::fidelity`. The baseline client is this same executable run as a child process with
//! `LLMLOAD_BENCH_ROLE=baseline`: a bare hyper HTTP/1.1 client, one connection per stream, that
//! sends the very requests llmload sends (the same plan, compiled by llmload's planner), reads
//! each body frame, timestamps it and counts its token chunks with a byte search: no SSE or JSON
//! parsing, no recording beyond the timestamps, no report. It is the practical limit a client
//! can reach on this machine, and llmload is judged against it.
//!
//! The `streams` scenario runs against the calibrated server instead (`LLMLOAD_BENCH_ROLE=server`,
//! [`server`]: `llmload sim` cannot keep one client core busy), with the server and the clients
//! pinned to cores of their own, and puts vLLM's Rust client beside the two when
//! `LLMLOAD_VLLM_BENCH` names its binary (docs/performance.md says how to build it).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use llmload::records::RunLog;
use llmload::selfcheck::fidelity::{timing_errors, ErrorSummary, MeasuredStream, TimingErrors};
use llmload::sim::writes::RequestWrites;
use serde::{Deserialize, Serialize};

#[path = "../tests/common/mod.rs"]
mod common;
use common::SimProcess;

const LLMLOAD: &str = env!("CARGO_BIN_EXE_llmload");

#[path = "fidelity/server.rs"]
mod server;

#[path = "fidelity/tls.rs"]
mod tls;

fn main() {
    match std::env::var("LLMLOAD_BENCH_ROLE").as_deref() {
        Ok("baseline") => return baseline::main(),
        Ok("server") => return server::main(),
        _ => {}
    }
    let wanted: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let seconds: u64 = std::env::var("LLMLOAD_BENCH_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10);
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("fidelity");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a results directory");
    let mut bench = Bench {
        dir: dir.clone(),
        seconds,
        out: String::new(),
        runs: 0,
        calibrated: false,
        tokens_per_write: 1,
        tls: None,
        client_args: Vec::new(),
    };
    bench.say(&format!("# llmload fidelity benchmark\n\n{}\n", machine()));
    let all = [
        "wave",
        "timing",
        "schedule",
        "cost",
        "memory",
        "ceiling",
        "long",
        "streams",
        "tls",
        "exporters",
    ];
    for scenario in all {
        if !wanted.is_empty() && !wanted.iter().any(|w| scenario.contains(w.as_str())) {
            continue;
        }
        match scenario {
            "wave" => bench.first_wave(),
            "timing" => bench.timing(),
            "schedule" => bench.schedule(),
            "cost" => bench.cost(),
            "memory" => bench.memory(),
            "ceiling" => bench.ceiling(),
            "long" => bench.long_context(),
            "streams" => bench.streams(),
            "tls" => bench.tls(),
            "exporters" => bench.exporters(),
            _ => {}
        }
    }
    std::fs::write(dir.join("results.md"), &bench.out).expect("results.md");
    println!("\nwritten to {}", dir.join("results.md").display());
}

/// What this machine is.
fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|text| {
            text.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|s| s.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let memory = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|text| {
            text.lines()
                .next()
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<f64>().ok())
        })
        .map_or("?".into(), |kb| format!("{:.1} GiB", kb / 1024.0 / 1024.0));
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    format!(
        "Machine: {cpu}, {cores} cores, {memory} RAM, Linux {kernel}. Client, baseline and simulator \
         on this one machine, over loopback."
    )
}

struct Bench {
    dir: PathBuf,
    seconds: u64,
    out: String,
    runs: usize,
    /// Runs go against the calibrated server pinned to the last core, each client pinned to
    /// the first (`taskset`), instead of against `llmload sim`.
    calibrated: bool,
    /// The calibrated server's tokens per write.
    tokens_per_write: u64,
    /// Over `https://`: the calibrated server's certificate and the CA every client trusts.
    tls: Option<common::certs::Certs>,
    /// More arguments for `llmload run` (the exporters scenario's).
    client_args: Vec<String>,
}

/// What one client run measured.
#[derive(Debug, Clone, Default)]
struct Outcome {
    errors: TimingErrors,
    /// The first wave's errors (requests with seq below the wave's size), when asked.
    first_wave: Option<TimingErrors>,
    lag: Option<ErrorSummary>,
    /// Coefficient of variation of the arrival gaps the server saw.
    arrival_cv: Option<f64>,
    requests: u64,
    failed: u64,
    tokens: u64,
    seconds: f64,
    cpu_s: f64,
    peak_rss_mb: f64,
    record_bytes_per_request: Option<f64>,
    /// The client's TTFT p99 over the measured requests, and the server's over the same
    /// requests (its first token's write after the request's arrival), ms: a whole-run
    /// comparison any client can be put to, ids or not.
    ttft_p99_ms: f64,
    true_ttft_p99_ms: f64,
    /// llmload's connect and TLS-handshake p50 over the requests that opened a connection, ms.
    connect_p50_ms: Option<f64>,
    tls_p50_ms: Option<f64>,
    /// llmload's connections opened before the measured phase's clock.
    connections: Option<u64>,
}

/// A zero-delay run's cells beside `base`'s (the ideal client's): requests, tokens/s, client
/// CPU %, tokens per client CPU-s, × the ideal, peak RSS MB.
fn throughput_cells(o: &Outcome, base: &Outcome) -> String {
    let per_cpu = |o: &Outcome| o.tokens as f64 / o.cpu_s.max(1e-9);
    format!(
        "{} | {:.0} | {:.0} | {:.0} | {:.2} | {:.0}",
        o.requests,
        o.tokens as f64 / o.seconds.max(1e-9),
        100.0 * o.cpu_s / o.seconds.max(1e-9),
        per_cpu(o),
        per_cpu(o) / per_cpu(base),
        o.peak_rss_mb,
    )
}

/// The runs of [`Bench::cold_runs`].
struct ColdRuns {
    ours: Outcome,
    ours_cold: Outcome,
    base: Outcome,
    vllm: Option<Outcome>,
}

/// The baseline's report of itself, one JSON line on stdout.
#[derive(Debug, Serialize, Deserialize)]
struct BaselineReport {
    requests: u64,
    failed: u64,
    tokens: u64,
    seconds: f64,
    cpu_s: f64,
    peak_rss_bytes: u64,
    /// Actual − intended send time of each measured open-loop request, ms.
    lags_ms: Vec<f64>,
}

/// One baseline stream, as written to its streams file.
#[derive(Debug, Serialize, Deserialize)]
struct BaselineStream {
    request_id: String,
    arrivals_us: Vec<u64>,
    sent_monotonic_ns: Option<u64>,
}

/// Settings of one run: the simulator's delays and the plan both clients run.
struct Setup {
    ttft: &'static str,
    itl: &'static str,
    plan: String,
    /// Runtime worker threads of the client (both clients), and of the simulator.
    client_threads: Option<usize>,
    /// The first wave's size (a closed loop's streams, with no warmup): its requests' timing
    /// errors are kept apart.
    first_wave: Option<u64>,
}

/// A plan: an unrecorded warmup of the same load, then the measured phase.
fn plan(input: u32, output: u32, load: &str, warmup_end: &str, measured_end: &str) -> String {
    format!(
        "plan \"bench\" {{ seed 11 }}\ntarget \"sim\" {{ api \"completions\"; timeout \"300s\" }}\n\
         workload {{ input {input}; output {output} ignore-eos=#true }}\n\
         phase \"warmup\" {{ {load}; {warmup_end}; record #false }}\n\
         phase \"measure\" {{ {load}; {measured_end} }}\n"
    )
}

fn closed_plan(input: u32, output: u32, streams: u32, seconds: u64) -> String {
    plan(
        input,
        output,
        &format!("concurrency {streams}"),
        &format!("requests {}", streams * 2),
        &format!("duration \"{seconds}s\""),
    )
}

/// The tests' word-level tokenizer.json.
fn fixture_tokenizer() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/word-level-tokenizer.json")
}

/// `plan` with its prompts built and counted under the tokenizer.json at `file`.
fn with_tokenizer(plan: &str, file: &Path) -> String {
    plan.replace(
        "workload {",
        &format!("workload {{ tokenizer \"{}\";", file.display()),
    )
}

fn open_plan(output: u32, rate: u32, seconds: u64) -> String {
    plan(
        16,
        output,
        &format!("rate {rate}"),
        "duration \"2s\"",
        &format!("duration \"{seconds}s\""),
    )
}

/// A closed loop of `streams` from a cold start: no warmup, `requests` in all, so that the
/// first wave (the first `streams` requests) opens the run.
fn cold_plan(streams: u32, requests: u32) -> String {
    format!(
        "plan \"bench\" {{ seed 11 }}\ntarget \"sim\" {{ api \"completions\"; timeout \"300s\" }}\n\
         workload {{ input 128; output 64 ignore-eos=#true }}\n\
         phase \"measure\" {{ concurrency {streams}; requests {requests} }}\n"
    )
}

/// The streams whose request's position in its phase (the id's last part) is below `wave`.
fn in_first_wave(streams: &[MeasuredStream], wave: u64) -> Vec<MeasuredStream> {
    streams
        .iter()
        .filter(|s| {
            s.request_id
                .rsplit('-')
                .next()
                .and_then(|seq| seq.parse::<u64>().ok())
                .is_some_and(|seq| seq < wave)
        })
        .cloned()
        .collect()
}

/// `llmload sim` with write recording, as its own process.
fn start_sim(ttft: &str, itl: &str) -> SimProcess {
    SimProcess::start_with(&["--record-writes", "--ttft", ttft, "--itl", itl])
}

/// The p99 of the TTFTs `streams` measured, and of the server's over the same requests, ms.
fn whole_run_ttft_p99(streams: &[MeasuredStream], writes: &[RequestWrites]) -> (f64, f64) {
    let measured: std::collections::HashSet<&str> =
        streams.iter().map(|s| s.request_id.as_str()).collect();
    let mut client: Vec<f64> = streams
        .iter()
        .filter_map(|s| s.arrivals_us.first())
        .map(|us| *us as f64 / 1000.0)
        .collect();
    (
        ErrorSummary::of(&mut client).p99_ms,
        true_ttft_p99(writes, |id| measured.contains(id)),
    )
}

/// The server's TTFT p99 (its first token's write after the request's arrival), ms, over the
/// requests whose id `keep` accepts.
fn true_ttft_p99(writes: &[RequestWrites], keep: impl Fn(&str) -> bool) -> f64 {
    let mut server: Vec<f64> = writes
        .iter()
        .filter(|w| w.request_id.as_deref().is_some_and(&keep))
        .filter_map(|w| w.token_writes_ns.first())
        .map(|ns| *ns as f64 / 1e6)
        .collect();
    ErrorSummary::of(&mut server).p99_ms
}

/// The simulator's write times so far.
fn writes(sim: &SimProcess) -> Vec<RequestWrites> {
    sim.get("/llmload/writes")
        .lines()
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect()
}

/// Coefficient of variation of the gaps between the server's arrival times of requests whose
/// id starts with `prefix`.
fn arrival_cv(writes: &[RequestWrites], prefix: &str) -> Option<f64> {
    let mut arrivals: Vec<u64> = writes
        .iter()
        .filter(|w| {
            w.request_id
                .as_deref()
                .is_some_and(|id| id.starts_with(prefix))
        })
        .map(|w| w.received_ns)
        .collect();
    arrivals.sort_unstable();
    let gaps: Vec<f64> = arrivals.windows(2).map(|p| (p[1] - p[0]) as f64).collect();
    if gaps.len() < 10 {
        return None;
    }
    let mean = gaps.iter().sum::<f64>() / gaps.len() as f64;
    let variance = gaps.iter().map(|g| (g - mean).powi(2)).sum::<f64>() / gaps.len() as f64;
    Some(variance.sqrt() / mean)
}

/// A delay as the plans and `llmload sim` write it ("50ms", "500us", "0ms"), in µs.
fn micros(text: &str) -> u128 {
    llmload::plan::units::parse_duration(text)
        .unwrap_or_else(|_| panic!("not a delay: {text}"))
        .as_micros()
}

/// The core the calibrated server is pinned to (the last), and the clients' (the first).
fn cores() -> (usize, usize) {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    (cores - 1, 0)
}

impl Bench {
    /// The server of one run: `llmload sim`, or the calibrated server on its own core.
    fn start_server(&self, ttft: &str, itl: &str) -> SimProcess {
        if !self.calibrated {
            return start_sim(ttft, itl);
        }
        let (server_core, _) = cores();
        let child = Command::new("taskset")
            .args(["-c", &server_core.to_string()])
            .arg(std::env::current_exe().expect("this benchmark"))
            .env("LLMLOAD_BENCH_ROLE", "server")
            .env("SERVER_TTFT_US", micros(ttft).to_string())
            .env("SERVER_ITL_US", micros(itl).to_string())
            .env("SERVER_TOKENS_PER_WRITE", self.tokens_per_write.to_string())
            .envs(self.tls.iter().flat_map(|certs| {
                [
                    ("SERVER_TLS_CERT", certs.server_cert.clone()),
                    ("SERVER_TLS_KEY", certs.server_key.clone()),
                ]
            }))
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("taskset and the calibrated server");
        SimProcess::from_child(child)
    }

    /// A client's command: pinned to the first core against the calibrated server.
    fn client(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        if !self.calibrated {
            return Command::new(program);
        }
        let (_, client_core) = cores();
        let mut command = Command::new("taskset");
        command.args(["-c", &client_core.to_string()]).arg(program);
        command
    }

    /// vLLM's Rust benchmark client (`LLMLOAD_VLLM_BENCH`: its binary, built from the archived
    /// github.com/vllm-project/vllm-bench with `cargo build --release`), pinned as llmload is, on
    /// the same load: `streams` at once, `requests` in all, random prompts of `input` tokens (a
    /// word-level tokenizer), 64 tokens with ignore_eos, against a fresh server. Its
    /// CPU and peak memory are the whole process's (GNU time), its own startup included.
    fn vllm_bench(
        &mut self,
        name: &str,
        (ttft, itl): (&str, &str),
        (streams, requests, input): (u32, u32, u32),
        tokenizer_json: &Path,
    ) -> Option<Outcome> {
        let program = std::env::var_os("LLMLOAD_VLLM_BENCH")?;
        let dir = self.run_dir(&format!("vllm-bench-{name}"));
        let sim = self.start_server(ttft, itl);
        let base_url = sim.url.trim_end_matches("/v1").to_string();
        let time_file = dir.join("time.txt");
        // Its built-in tiktoken tables panic on some of the random token ids it draws (seen at
        // 15,000 prompts); a local tokenizer.json (the tests' word-level one, or the plan's)
        // does not.
        let tokenizer = dir.join("tokenizer");
        std::fs::create_dir_all(&tokenizer).ok()?;
        std::fs::copy(tokenizer_json, tokenizer.join("tokenizer.json")).ok()?;
        let status = self
            .client("/usr/bin/time")
            .args(["-f", "%e %U %S %M", "-o"])
            .arg(&time_file)
            .arg(&program)
            .args([
                "--backend",
                "openai",
                "--base-url",
                &base_url,
                "--model",
                "m",
            ])
            .arg("--tokenizer")
            .arg(&tokenizer)
            .args(["--dataset-name", "random"])
            .args(["--random-input-len", &input.to_string()])
            .args(["--random-output-len", "64", "--ignore-eos"])
            .args(["--num-prompts", &requests.to_string()])
            .args(["--max-concurrency", &streams.to_string()])
            .args(["--request-id-prefix", "vllm-bench-", "--disable-tqdm"])
            .args(["--no-steady-state", "--save-result", "--save-detailed"])
            .args(["--metric-percentiles", "50,99", "--result-dir"])
            .arg(&dir)
            .args(["--result-filename", "result.json"])
            // Over TLS: it can be given no CA of one's own (its reqwest trusts the compiled-in
            // roots only), so its certificate check is off; the handshake costs the same.
            .args(self.tls.iter().map(|_| "--insecure"))
            .stdout(std::fs::File::create(dir.join("stdout.txt")).ok()?)
            .stderr(std::fs::File::create(dir.join("stderr.txt")).ok()?)
            .status()
            .ok()?;
        let writes = writes(&sim);
        drop(sim);
        if !status.success() {
            self.say(&format!(
                "(vllm-bench failed: {status}; see {})",
                dir.display()
            ));
            return None;
        }
        let time = std::fs::read_to_string(&time_file).ok()?;
        let fields: Vec<f64> = time
            .lines()
            .last()?
            .split_whitespace()
            .filter_map(|f| f.parse().ok())
            .collect();
        let result: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("result.json")).ok()?).ok()?;
        let mut ttfts: Vec<f64> = result["ttfts"]
            .as_array()?
            .iter()
            .filter_map(|t| t.as_f64())
            .filter(|t| *t > 0.0)
            .map(|t| t * 1000.0)
            .collect();
        Some(Outcome {
            requests: result["completed"].as_u64().unwrap_or(0),
            failed: result["failed"].as_u64().unwrap_or(0),
            tokens: result["total_output_tokens"].as_u64().unwrap_or(0),
            seconds: result["duration"].as_f64().unwrap_or(f64::NAN),
            cpu_s: fields.get(1)? + fields.get(2)?,
            peak_rss_mb: fields.get(3)? / 1024.0,
            ttft_p99_ms: ErrorSummary::of(&mut ttfts).p99_ms,
            true_ttft_p99_ms: true_ttft_p99(&writes, |id| id.starts_with("vllm-bench-")),
            ..Outcome::default()
        })
    }

    fn say(&mut self, text: &str) {
        println!("{text}");
        self.out.push_str(text);
        self.out.push('\n');
    }

    fn run_dir(&mut self, name: &str) -> PathBuf {
        self.runs += 1;
        let dir = self.dir.join(format!("{:02}-{name}", self.runs));
        std::fs::create_dir_all(&dir).expect("a run directory");
        dir
    }

    /// Runs llmload on `setup` against a fresh simulator.
    fn llmload(&mut self, name: &str, setup: &Setup) -> Outcome {
        let dir = self.run_dir(&format!("llmload-{name}"));
        let plan_path = dir.join("plan.kdl");
        // `LLMLOAD_BENCH_RECORDS=zstd` reruns a scenario with its records compressed.
        let plan = match std::env::var("LLMLOAD_BENCH_RECORDS") {
            Ok(records) => format!("{}report {{ records \"{records}\" }}\n", setup.plan),
            Err(_) => setup.plan.clone(),
        };
        // Over TLS the plan trusts the benchmark's CA, as a user's names theirs.
        let plan = match &self.tls {
            Some(certs) => plan.replace(
                "api \"completions\";",
                &format!("api \"completions\"; ca-file {:?};", certs.ca),
            ),
            None => plan,
        };
        std::fs::write(&plan_path, plan).expect("plan.kdl");
        let sim = self.start_server(setup.ttft, setup.itl);
        let mut command = self.client(LLMLOAD);
        command
            .arg("run")
            .arg(&plan_path)
            .args(["--target", &sim.url, "--quiet", "--out"])
            .arg(dir.join("out"));
        if let Some(threads) = setup.client_threads {
            command.args(["--threads", &threads.to_string()]);
        }
        command.args(&self.client_args);
        let output = command.stdout(Stdio::null()).output().expect("llmload run");
        let status = output.status;
        // (3: not decided, as a plan's assertions are when the client saturated its core.)
        assert!(
            matches!(status.code(), Some(0 | 1 | 3)),
            "llmload run failed: {status}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let writes = writes(&sim);
        drop(sim);
        let out = dir.join("out");
        let summary: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(out.join("summary.json")).expect("summary.json"),
        )
        .expect("JSON");
        let records_path = llmload::records::find(&out).expect("records");
        let log = RunLog::read(&records_path).expect("records");
        let measured_phase = log.phases.iter().find(|p| p.record).map(|p| p.index);
        let header = log.header.clone();
        let measured: Vec<_> = log
            .records
            .iter()
            .filter(|r| Some(r.phase) == measured_phase)
            .collect();
        let streams: Vec<MeasuredStream> = measured
            .iter()
            .filter_map(|r| MeasuredStream::of_record(r, header.as_ref()))
            .collect();
        let first_wave = setup
            .first_wave
            .map(|wave| timing_errors(in_first_wave(&streams, wave), &writes));
        let (ttft_p99_ms, true_ttft_p99_ms) = whole_run_ttft_p99(&streams, &writes);
        let errors = timing_errors(streams, &writes);
        let phase = summary["phases"]
            .as_array()
            .and_then(|phases| phases.iter().find(|p| p["name"] == "measure"))
            .unwrap_or(&serde_json::Value::Null);
        let mut lags: Vec<f64> = measured
            .iter()
            .map(|r| r.actual_send_us.saturating_sub(r.intended_send_us) as f64 / 1000.0)
            .collect();
        let open_loop = log.phases.iter().any(|p| p.record && p.open_loop);
        let measured_requests = measured.len();
        let records_bytes = std::fs::metadata(&records_path)
            .map(|m| m.len())
            .unwrap_or(0);
        Outcome {
            errors,
            first_wave,
            lag: open_loop.then(|| ErrorSummary::of(&mut lags)),
            arrival_cv: arrival_cv(
                &writes,
                &format!(
                    "{}-{}-",
                    header
                        .as_ref()
                        .and_then(|h| h.request_id_prefix.as_deref())
                        .unwrap_or("llmload"),
                    measured_phase.unwrap_or(1)
                ),
            ),
            requests: phase["requests"]["ok"].as_u64().unwrap_or(0),
            failed: phase["requests"]["failed"].as_u64().unwrap_or(0),
            tokens: (phase["throughput"]["output_tokens_per_s"]
                .as_f64()
                .unwrap_or(0.0)
                * phase["wall_s"].as_f64().unwrap_or(0.0))
            .round() as u64,
            seconds: phase["wall_s"].as_f64().unwrap_or(0.0),
            connect_p50_ms: phase["metrics"]["connect_ms"]["p50"].as_f64(),
            tls_p50_ms: phase["metrics"]["tls_ms"]["p50"].as_f64(),
            connections: phase["connections"]["warmed"].as_u64(),
            cpu_s: phase["client"]["cpu_s"].as_f64().unwrap_or(f64::NAN),
            peak_rss_mb: summary["context"]["client_peak_rss_mb"]
                .as_f64()
                .unwrap_or(f64::NAN),
            record_bytes_per_request: (!log.records.is_empty())
                .then(|| records_bytes as f64 / log.records.len() as f64)
                .filter(|_| measured_requests > 0),
            ttft_p99_ms,
            true_ttft_p99_ms,
        }
    }

    /// Runs the baseline client on `setup` against a fresh simulator.
    fn baseline(&mut self, name: &str, setup: &Setup) -> Outcome {
        let dir = self.run_dir(&format!("baseline-{name}"));
        let plan_path = dir.join("plan.kdl");
        std::fs::write(&plan_path, &setup.plan).expect("plan.kdl");
        let streams_path = dir.join("streams.jsonl");
        let sim = self.start_server(setup.ttft, setup.itl);
        let mut command = self.client(std::env::current_exe().expect("this benchmark"));
        command
            .env("LLMLOAD_BENCH_ROLE", "baseline")
            .env("BASELINE_URL", &sim.url)
            .env("BASELINE_PLAN", &plan_path)
            .env("BASELINE_STREAMS", &streams_path)
            .envs(self.tls.iter().map(|certs| ("BASELINE_TLS_CA", &certs.ca)));
        if let Some(threads) = setup.client_threads {
            command.env("BASELINE_THREADS", threads.to_string());
        }
        let output = command
            .stderr(Stdio::inherit())
            .output()
            .expect("the baseline client");
        assert!(output.status.success(), "the baseline client failed");
        let report: BaselineReport = serde_json::from_slice(&output.stdout).expect("its report");
        let writes = writes(&sim);
        drop(sim);
        let streams: Vec<MeasuredStream> = std::fs::read_to_string(&streams_path)
            .expect("streams")
            .lines()
            .filter_map(|l| serde_json::from_str::<BaselineStream>(l).ok())
            .map(|s| MeasuredStream {
                request_id: s.request_id,
                arrivals_us: s.arrivals_us,
                sent_monotonic_ns: s.sent_monotonic_ns,
            })
            .collect();
        let first_wave = setup
            .first_wave
            .map(|wave| timing_errors(in_first_wave(&streams, wave), &writes));
        let (ttft_p99_ms, true_ttft_p99_ms) = whole_run_ttft_p99(&streams, &writes);
        let errors = timing_errors(streams, &writes);
        let mut lags = report.lags_ms.clone();
        Outcome {
            errors,
            first_wave,
            lag: (!lags.is_empty()).then(|| ErrorSummary::of(&mut lags)),
            arrival_cv: arrival_cv(&writes, "baseline-1-"),
            requests: report.requests,
            failed: report.failed,
            tokens: report.tokens,
            seconds: report.seconds,
            cpu_s: report.cpu_s,
            peak_rss_mb: report.peak_rss_bytes as f64 / 1024.0 / 1024.0,
            record_bytes_per_request: None,
            ttft_p99_ms,
            true_ttft_p99_ms,
            ..Outcome::default()
        }
    }

    /// A cold start: the first wave of a closed loop (every stream's first request, the
    /// connections not open yet) measured apart from the rest of the run.
    fn first_wave(&mut self) {
        self.say("## The first wave (cold start)\n");
        self.say(
            "Closed loop of N streams from a cold start (no warmup; the client process just started), \
             128-token prompts, 64 output tokens, completions API, simulator TTFT 50 ms and ITL 10 ms, \
             chunks shaped like vLLM's. The first wave is the first N requests (every stream's first); the \
             whole run is every request. Error = measured − true TTFT, ms. llmload opens its connections \
             before the phase's clock starts (the default); `cold` is llmload with `connections \"cold\"`, \
             opening each connection inside its first request as the baseline does.\n",
        );
        self.say("| streams | client | requests | first wave TTFT err p50 | p99 | max | whole run TTFT err p50 | p99 | max | ITL err p99 | verdict |");
        self.say("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---|");
        for (streams, requests) in [(64u32, 1280u32), (256, 2000)] {
            let setup = Setup {
                ttft: "50ms",
                itl: "10ms",
                plan: cold_plan(streams, requests),
                client_threads: None,
                first_wave: Some(streams as u64),
            };
            let cold_setup = Setup {
                plan: setup
                    .plan
                    .replace("timeout \"300s\"", "timeout \"300s\"; connections \"cold\""),
                ttft: setup.ttft,
                itl: setup.itl,
                client_threads: None,
                first_wave: setup.first_wave,
            };
            let ours = self.llmload(&format!("wave-{streams}"), &setup);
            let cold = self.llmload(&format!("wave-cold-{streams}"), &cold_setup);
            let base = self.baseline(&format!("wave-{streams}"), &setup);
            let wave = |o: &Outcome| o.first_wave.clone().unwrap_or_default();
            let wave_limit = (1.5 * wave(&base).ttft.p99_ms).max(2.0);
            let whole_limit = (1.5 * base.errors.ttft.p99_ms).max(1.0);
            let verdict = |o: &Outcome| {
                if wave(o).ttft.p99_ms <= wave_limit && o.errors.ttft.p99_ms <= whole_limit {
                    "meets target".to_string()
                } else {
                    format!(
                        "misses (limits: first wave p99 {wave_limit:.2}, whole run p99 {whole_limit:.2})"
                    )
                }
            };
            let (ours_verdict, cold_verdict) = (verdict(&ours), verdict(&cold));
            for (client, o, verdict) in [
                ("llmload", &ours, ours_verdict.as_str()),
                ("llmload cold", &cold, cold_verdict.as_str()),
                ("baseline", &base, ""),
            ] {
                let w = wave(o);
                let e = &o.errors;
                self.say(&format!(
                    "| {streams} | {client} | {} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {verdict} |",
                    e.matched, w.ttft.p50_ms, w.ttft.p99_ms, w.ttft.max_ms, e.ttft.p50_ms, e.ttft.p99_ms,
                    e.ttft.max_ms, e.itl.p99_ms
                ));
            }
        }
        self.say("");
    }

    fn timing(&mut self) {
        self.say("## Timing fidelity\n");
        self.say(&format!(
            "Closed loop, N streams, 128-token prompts, 64 output tokens, simulator TTFT 20 ms and ITL 10 ms, \
             {} s measured after a warmup of 2 requests per stream. Error = measured − true, in ms \
             (truth: the simulator's write times).\n",
            self.seconds
        ));
        self.say("| streams | client | requests | TTFT err p50 | TTFT err p99 | TTFT err max | ITL err p50 | ITL err p99 | ITL err max | send delay p50 / p99 | read delay p50 / p99 / max | client CPU-s | verdict |");
        self.say("|---:|---|---:|---:|---:|---:|---:|---:|---:|---|---|---:|---|");
        for streams in [1u32, 64, 256, 1024] {
            let setup = Setup {
                ttft: "20ms",
                itl: "10ms",
                plan: closed_plan(128, 64, streams, self.seconds),
                client_threads: None,
                first_wave: None,
            };
            let ours = self.llmload(&format!("timing-{streams}"), &setup);
            let base = self.baseline(&format!("timing-{streams}"), &setup);
            let ttft_limit = (1.5 * base.errors.ttft.p99_ms).max(1.0);
            let itl_limit = (1.5 * base.errors.itl.p99_ms).max(0.5);
            let verdict = if ours.errors.ttft.p99_ms <= ttft_limit
                && ours.errors.itl.p99_ms <= itl_limit
                && ours.errors.ttft.p50_ms <= 0.5
            {
                "meets target".to_string()
            } else {
                format!(
                    "misses (limits: TTFT p99 {ttft_limit:.2}, ITL p99 {itl_limit:.2}, TTFT p50 0.5)"
                )
            };
            for (client, outcome, verdict) in [
                ("llmload", &ours, verdict.as_str()),
                ("baseline", &base, ""),
            ] {
                let e = &outcome.errors;
                self.say(&format!(
                    "| {streams} | {client} | {} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} / {:.3} | {:.3} / {:.3} / {:.3} | {:.2} | {verdict} |",
                    e.matched, e.ttft.p50_ms, e.ttft.p99_ms, e.ttft.max_ms, e.itl.p50_ms, e.itl.p99_ms,
                    e.itl.max_ms, e.send_delay.p50_ms, e.send_delay.p99_ms, e.read_delay.p50_ms,
                    e.read_delay.p99_ms, e.read_delay.max_ms, outcome.cpu_s
                ));
            }
        }
        self.say("");
    }

    fn schedule(&mut self) {
        self.say("## Schedule fidelity\n");
        self.say(&format!(
            "Open loop, Poisson arrivals, 16-token prompts, 4 output tokens, simulator TTFT and ITL 1 ms, \
             {} s measured after 2 s of warmup. Lag = actual − intended send time, ms. CV = coefficient of \
             variation of the inter-arrival gaps the simulator saw (Poisson: 1).\n",
            self.seconds
        ));
        self.say("| rate/s | client | sent | lag p50 | lag p99 | lag max | arrival CV | client CPU-s | verdict |");
        self.say("|---:|---|---:|---:|---:|---:|---:|---:|---|");
        for rate in [100u32, 1000, 5000] {
            let setup = Setup {
                ttft: "1ms",
                itl: "1ms",
                plan: open_plan(4, rate, self.seconds),
                client_threads: None,
                first_wave: None,
            };
            let ours = self.llmload(&format!("schedule-{rate}"), &setup);
            let base = self.baseline(&format!("schedule-{rate}"), &setup);
            let lag = ours.lag.unwrap_or_default();
            let cv = ours.arrival_cv.unwrap_or(f64::NAN);
            let verdict = if lag.p99_ms <= 1.0 && (0.95..=1.05).contains(&cv) {
                "meets target"
            } else {
                "misses (lag p99 ≤ 1 ms, CV 0.95–1.05)"
            };
            for (client, outcome, verdict) in [("llmload", &ours, verdict), ("baseline", &base, "")]
            {
                let lag = outcome.lag.unwrap_or_default();
                self.say(&format!(
                    "| {rate} | {client} | {} | {:.3} | {:.3} | {:.3} | {:.3} | {:.2} | {verdict} |",
                    lag.count,
                    lag.p50_ms,
                    lag.p99_ms,
                    lag.max_ms,
                    outcome.arrival_cv.unwrap_or(f64::NAN),
                    outcome.cpu_s
                ));
            }
        }
        self.say("");
    }

    fn cost(&mut self) {
        self.say("## Cost\n");
        self.say(&format!(
            "Streamed tokens: zero-delay simulator, closed loop 64 streams × 512 output tokens (one token per \
             chunk), {} s. Requests: open loop 1,000 req/s of 4-token responses. CPU is the client process's \
             user + system time over the measured phase.\n",
            self.seconds
        ));
        self.say("| workload | client | requests | output tokens | tokens/s | CPU-s | tokens per CPU-s | CPU-s per 1M tokens | CPU-s per 1k requests | records bytes/request | verdict |");
        self.say("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|");
        let zero_delay = |output: u32, streams: u32, threads: Option<usize>| Setup {
            ttft: "0ms",
            itl: "0ms",
            plan: closed_plan(128, output, streams, self.seconds),
            client_threads: threads,
            first_wave: None,
        };
        let requests_setup = Setup {
            ttft: "1ms",
            itl: "1ms",
            plan: open_plan(4, 1000, self.seconds),
            client_threads: None,
            first_wave: None,
        };
        // Short answers put the cost per request first: judged against the baseline, with one
        // runtime thread each (one client core).
        for (workload, setup, judged) in [
            (
                "64 × 512 tokens, zero delay",
                zero_delay(512, 64, None),
                false,
            ),
            (
                "64 × 64 tokens, zero delay, 1 thread",
                zero_delay(64, 64, Some(1)),
                true,
            ),
            (
                "256 × 64 tokens, zero delay, 1 thread",
                zero_delay(64, 256, Some(1)),
                true,
            ),
            ("1,000 req/s × 4 tokens", requests_setup, false),
        ] {
            let ours = self.llmload("cost", &setup);
            let base = self.baseline("cost", &setup);
            let per_cpu = |o: &Outcome| o.tokens as f64 / o.cpu_s;
            let ratio = per_cpu(&ours) / per_cpu(&base);
            let verdict = match judged {
                false => String::new(),
                true if ratio >= 0.6 => format!("meets ≥ 0.6× ({ratio:.2}×)"),
                true => format!("misses ≥ 0.6× ({ratio:.2}×)"),
            };
            for (client, o, verdict) in [
                ("llmload", &ours, verdict.as_str()),
                ("baseline", &base, ""),
            ] {
                let tokens_per_s = o.tokens as f64 / o.seconds.max(1e-9);
                self.say(&format!(
                    "| {workload} | {client} | {} | {} | {:.0} | {:.2} | {:.0} | {:.2} | {:.3} | {} | {verdict} |",
                    o.requests,
                    o.tokens,
                    tokens_per_s,
                    o.cpu_s,
                    per_cpu(o),
                    o.cpu_s / (o.tokens as f64 / 1e6),
                    o.cpu_s / (o.requests as f64 / 1e3),
                    o.record_bytes_per_request.map_or("-".into(), |b| format!("{b:.0}")),
                ));
            }
        }
        self.say("");
    }

    fn memory(&mut self) {
        self.say("## Memory\n");
        self.say(
            "Peak resident memory of the client process over the whole run (getrusage), with N streams open \
             at once. 256 and 1,024 streams: 64 tokens at ITL 10 ms; 10,000 streams: 16 tokens at TTFT and \
             ITL 500 ms (so that 10,000 stay open without the simulator, on the same 2 cores, falling behind).\n",
        );
        self.say("| streams | client | requests | failed | peak RSS MB | verdict |");
        self.say("|---:|---|---:|---:|---:|---|");
        for (streams, ttft, itl, output) in [
            (256u32, "20ms", "10ms", 64u32),
            (1024, "20ms", "10ms", 64),
            (10_000, "500ms", "500ms", 16),
        ] {
            let setup = Setup {
                ttft,
                itl,
                plan: closed_plan(128, output, streams, self.seconds.max(10)),
                client_threads: None,
                first_wave: None,
            };
            let ours = self.llmload(&format!("memory-{streams}"), &setup);
            let base = self.baseline(&format!("memory-{streams}"), &setup);
            let target = match streams {
                256 => Some(50.0),
                10_000 => Some(200.0),
                _ => None,
            };
            let mut verdict = match target {
                Some(t) if ours.peak_rss_mb <= t => format!("meets ≤ {t} MB"),
                Some(t) => format!("misses ≤ {t} MB"),
                None => String::new(),
            };
            if streams == 10_000 {
                let limit = 1.2 * base.peak_rss_mb;
                verdict.push_str(&if ours.peak_rss_mb <= limit {
                    format!("; meets ≤ 1.2× baseline ({limit:.0} MB)")
                } else {
                    format!("; misses ≤ 1.2× baseline ({limit:.0} MB)")
                });
            }
            for (client, o, v) in [
                ("llmload", &ours, verdict.as_str()),
                ("baseline", &base, ""),
            ] {
                self.say(&format!(
                    "| {streams} | {client} | {} | {} | {:.0} | {v} |",
                    o.requests, o.failed, o.peak_rss_mb
                ));
            }
        }
        self.say("");
    }

    fn ceiling(&mut self) {
        self.say("## Ceiling of one client core\n");
        self.say(&format!(
            "Both clients limited to one runtime worker thread (`--threads 1`); the simulator has the other \
             core. Chunk rate: 64 streams × 256 tokens at shrinking ITL. Request rate: open loop, 4-token \
             responses at growing rates. {} s per step. Fidelity targets: ITL error p99 ≤ max(0.5 ms, 1.5× \
             baseline), schedule lag p99 ≤ 1 ms with ≥ 95% of the rate sent.\n",
            self.seconds
        ));
        self.say("| step | client | chunks/s or sent/s | ITL err p99 | lag p99 | client CPU % of 1 core | within targets |");
        self.say("|---|---|---:|---:|---:|---:|---|");
        for itl in ["4ms", "2ms", "1ms", "500us"] {
            let setup = Setup {
                ttft: "5ms",
                itl,
                plan: closed_plan(128, 256, 64, self.seconds),
                client_threads: Some(1),
                first_wave: None,
            };
            let ours = self.llmload(&format!("ceiling-itl-{itl}"), &setup);
            let base = self.baseline(&format!("ceiling-itl-{itl}"), &setup);
            let limit = (1.5 * base.errors.itl.p99_ms).max(0.5);
            for (client, o) in [("llmload", &ours), ("baseline", &base)] {
                let ok = o.errors.itl.p99_ms <= limit;
                self.say(&format!(
                    "| 64 streams, ITL {itl} | {client} | {:.0} | {:.3} | - | {:.0} | {} |",
                    o.tokens as f64 / o.seconds.max(1e-9),
                    o.errors.itl.p99_ms,
                    100.0 * o.cpu_s / o.seconds.max(1e-9),
                    if client == "llmload" {
                        if ok {
                            "yes"
                        } else {
                            "no"
                        }
                    } else {
                        ""
                    }
                ));
            }
        }
        for rate in [1000u32, 2000, 4000, 8000] {
            let setup = Setup {
                ttft: "1ms",
                itl: "1ms",
                plan: open_plan(4, rate, self.seconds),
                client_threads: Some(1),
                first_wave: None,
            };
            let ours = self.llmload(&format!("ceiling-rate-{rate}"), &setup);
            let lag = ours.lag.unwrap_or_default();
            let sent_per_s = lag.count as f64 / self.seconds as f64;
            let ok = lag.p99_ms <= 1.0 && sent_per_s >= 0.95 * rate as f64;
            self.say(&format!(
                "| rate {rate}/s | llmload | {sent_per_s:.0} | - | {:.3} | {:.0} | {} |",
                lag.p99_ms,
                100.0 * ours.cpu_s / ours.seconds.max(1e-9),
                if ok { "yes" } else { "no" }
            ));
        }
        self.say("");
    }

    /// One client core against the calibrated server on the other (issue 31): tokens per client
    /// core by stream count, the whole-run TTFT error of a cold start, the send path of long
    /// prompts, and memory with thousands of streams open.
    fn streams(&mut self) {
        self.calibrated = true;
        let (server_core, client_core) = cores();
        self.say("## One client core, 64 to 4,000 streams, against the calibrated server\n");
        self.say(&format!(
            "The calibrated server (benches/fidelity/server.rs: vLLM's completions chunks, one token per \
             chunk and per write, each stream's token in turn) pinned to core {server_core}, each client to core \
             {client_core} (`taskset`), llmload with `--threads 1`. Completions, 128-token prompts, 64-token \
             answers. Zero delay: {} s closed loop after 2 requests per stream of warmup; tokens per client \
             CPU-second is the cost figure (a client not saturating its core is not limited by it). Cold: no \
             warmup, TTFT 50 ms and ITL 10 ms, the whole run; \"TTFT p99 − server's\" is the client's TTFT \
             p99 less the server's own (first token's write after the request's arrival) over the same \
             requests, the comparison any client can be put to; \"matched\" pairs each request with the \
             server's record of it.\n",
            self.seconds
        ));
        self.say("| writes | load | client | requests | tokens/s | client CPU % | tokens per client CPU-s | × ideal | peak RSS MB | verdict |");
        self.say("|---|---|---|---:|---:|---:|---:|---:|---:|---|");
        let per_cpu = |o: &Outcome| o.tokens as f64 / o.cpu_s.max(1e-9);
        // The tokenizer.json files of issue 45: prompts built for the tests' word-level file and
        // for a BPE file of 32,000 merges (tests/common/bpe.rs); vllm-bench uses the same file.
        let word_level = fixture_tokenizer();
        let bpe = common::bpe::tokenizer_json(Path::new(env!("CARGO_TARGET_TMPDIR")));
        let loads = [
            ("64 streams", 64u32, 128u32, None),
            ("256 streams", 256, 128, None),
            ("1,000 streams", 1000, 128, None),
            ("4,000 streams", 4000, 128, None),
            ("256 streams, 2,048-token prompts", 256, 2048, None),
            (
                "256 streams, word-level tokenizer.json",
                256,
                128,
                Some(&word_level),
            ),
            ("256 streams, BPE tokenizer.json", 256, 128, Some(&bpe)),
            (
                "256 streams, 2,048-token prompts, BPE tokenizer.json",
                256,
                2048,
                Some(&bpe),
            ),
        ];
        let shapes = [("a token per write", 1u64), ("an answer per write", 64)];
        // `LLMLOAD_BENCH_LOADS=BPE` runs only the loads whose name holds that.
        let only = std::env::var("LLMLOAD_BENCH_LOADS").unwrap_or_default();
        let loads: Vec<_> = loads
            .into_iter()
            .filter(|(load, ..)| load.contains(only.as_str()))
            .collect();
        for ((writes, tokens_per_write), (load, streams, input, tokenizer)) in shapes
            .into_iter()
            .flat_map(|shape| loads.iter().map(move |&load| (shape, load)))
        {
            self.tokens_per_write = tokens_per_write;
            let mut plan = closed_plan(input, 64, streams, self.seconds);
            if let Some(file) = tokenizer {
                plan = with_tokenizer(&plan, file);
            }
            let setup = Setup {
                ttft: "0ms",
                itl: "0ms",
                plan,
                client_threads: Some(1),
                first_wave: None,
            };
            let name = format!(
                "streams-{tokens_per_write}-{streams}-{input}{}",
                if tokenizer.is_some() { "-file" } else { "" }
            );
            let ours = self.llmload(&name, &setup);
            let base = self.baseline(&name, &setup);
            // As many requests as llmload's measured phase carried, at least 2,000.
            let requests = (ours.requests as u32).max(2000);
            let vllm = self.vllm_bench(
                &name,
                ("0ms", "0ms"),
                (streams, requests, input),
                tokenizer.unwrap_or(&word_level),
            );
            let ratio = per_cpu(&ours) / per_cpu(&base);
            let mut verdict = if ratio >= 0.8 {
                format!("meets ≥ 0.8× ({ratio:.2}×)")
            } else {
                format!("misses ≥ 0.8× ({ratio:.2}×)")
            };
            if streams >= 1000 {
                let limit = 1.2 * base.peak_rss_mb;
                verdict.push_str(&format!(
                    "; memory {} ≤ 1.2× ideal ({limit:.0} MB)",
                    if ours.peak_rss_mb <= limit {
                        "meets"
                    } else {
                        "misses"
                    }
                ));
            }
            let mut rows = vec![("llmload", &ours, verdict.as_str()), ("ideal", &base, "")];
            rows.extend(vllm.as_ref().map(|v| ("vllm-bench (whole process)", v, "")));
            for (client, o, verdict) in rows {
                let cells = throughput_cells(o, &base);
                self.say(&format!(
                    "| {writes} | {load} | {client} | {cells} | {verdict} |"
                ));
            }
        }
        self.tokens_per_write = 1;
        self.say("");
        self.say("| cold, TTFT 50 ms / ITL 10 ms | client | requests | TTFT p99 − server's | TTFT err p99 (matched) | ITL err p99 (matched) | CPU-s per 1k requests | verdict |");
        self.say("|---|---|---:|---:|---:|---:|---:|---|");
        for (streams, requests) in [(256u32, 2000u32), (1000, 4000)] {
            let ColdRuns {
                ours,
                ours_cold,
                base,
                vllm,
            } = self.cold_runs(&format!("cold-{streams}"), streams, requests);
            let excess = |o: &Outcome| o.ttft_p99_ms - o.true_ttft_p99_ms;
            let per_request = |o: &Outcome| 1000.0 * o.cpu_s / (o.requests.max(1) as f64);
            let ttft_limit = (1.5 * excess(&base)).max(2.0);
            let cpu_limit = 1.2 * per_request(&base);
            let verdict = format!(
                "TTFT {} ≤ {ttft_limit:.2}; CPU {} ≤ {cpu_limit:.2}",
                if excess(&ours) <= ttft_limit {
                    "meets"
                } else {
                    "misses"
                },
                if per_request(&ours) <= cpu_limit {
                    "meets"
                } else {
                    "misses"
                }
            );
            let cold_verdict = format!(
                "TTFT {} ≤ {ttft_limit:.2}",
                if excess(&ours_cold) <= ttft_limit {
                    "meets"
                } else {
                    "misses"
                }
            );
            let mut rows = vec![
                ("llmload", &ours, verdict.as_str()),
                (
                    "llmload, connections \"cold\"",
                    &ours_cold,
                    cold_verdict.as_str(),
                ),
                ("ideal", &base, ""),
            ];
            rows.extend(vllm.as_ref().map(|v| ("vllm-bench (whole process)", v, "")));
            for (client, o, verdict) in rows {
                // vllm-bench's records name no request: nothing to match.
                let matched = |value: f64, digits: usize| {
                    if o.errors.matched == 0 {
                        "-".to_string()
                    } else {
                        format!("{value:+.digits$}")
                    }
                };
                self.say(&format!(
                    "| {streams} streams, {requests} requests | {client} | {} | {:+.2} | {} | {} | {:.3} | {verdict} |",
                    o.requests,
                    excess(o),
                    matched(o.errors.ttft.p99_ms, 2),
                    matched(o.errors.itl.p99_ms, 3),
                    per_request(o),
                ));
            }
        }
        self.say("");
        self.calibrated = false;
    }

    /// A cold start of `streams` and `requests` in all, TTFT 50 ms and ITL 10 ms, one client
    /// core each: llmload as by default (connections opened before the clock) and with
    /// `connections "cold"`, the ideal client and vllm-bench (these open theirs with their first
    /// requests).
    fn cold_runs(&mut self, name: &str, streams: u32, requests: u32) -> ColdRuns {
        let setup = Setup {
            ttft: "50ms",
            itl: "10ms",
            plan: cold_plan(streams, requests),
            client_threads: Some(1),
            first_wave: None,
        };
        let ours = self.llmload(name, &setup);
        let cold_connections = Setup {
            plan: setup.plan.replace(
                "api \"completions\";",
                "api \"completions\"; connections \"cold\";",
            ),
            ..setup
        };
        let ours_cold = self.llmload(&format!("{name}-cold-connections"), &cold_connections);
        let base = self.baseline(name, &cold_connections);
        let vllm = self.vllm_bench(
            name,
            ("50ms", "10ms"),
            (streams, requests, 128),
            &fixture_tokenizer(),
        );
        ColdRuns {
            ours,
            ours_cold,
            base,
            vllm,
        }
    }

    /// Issue 49's must-hold: at 1,000 streams the exporters (`--metrics-listen` scraped every
    /// second, `--remote-write` every second, `--otlp`) move neither the TTFT error nor the CPU
    /// per request beyond noise. Five arms in turn, each run `rounds` times (`LLMLOAD_BENCH_ROUNDS`,
    /// 6): no `sla`, an `sla`, and the `sla` with Prometheus's exporters, OTLP's, and all of them,
    /// pushing to a sink that answers 200 to everything; each compared with the `sla` arm of its
    /// round.
    fn exporters(&mut self) {
        self.calibrated = true;
        // (4,000 requests and 3 rounds left the arms' ranges wider than any difference.)
        let (streams, requests) = (1000u32, 10_000u32);
        let rounds = std::env::var("LLMLOAD_BENCH_ROUNDS")
            .ok()
            .and_then(|r| r.parse().ok())
            .unwrap_or(6);
        self.say("## Exporters at 1,000 streams\n");
        self.say(&format!(
            "The calibrated server (TTFT 50 ms, ITL 10 ms, 64 tokens, a token per write) on its core, llmload \
             alone on the other with `--threads 1`, {streams} streams, {requests} requests, cold. Arms in turn, each round \
             starting with the next, {rounds} runs each: no `sla`; an `sla` of three assertions; the same with \
             `--metrics-listen` scraped every second, `--remote-write` every second and `--otlp`, both to a \
             loopback sink answering 200.\n"
        ));
        self.say("| arm | run | requests | TTFT p99 − server's | TTFT err p99 (matched) | ITL err p99 (matched) | CPU-s per 1k requests | peak RSS MB |");
        self.say("|---|---:|---:|---:|---:|---:|---:|---:|");
        let sink = Sink::start();
        let plain = cold_plan(streams, requests);
        let with_sla = format!(
            "{plain}sla {{ ttft p99 < \"500ms\"; itl p99 < \"50ms\"; error-rate < \"1%\" }}\n"
        );
        let arms = [
            "no sla",
            "sla",
            "sla + Prometheus",
            "sla + OTLP",
            "sla + every exporter",
        ];
        let mut sums: Vec<(&str, Vec<Outcome>)> = arms.iter().map(|a| (*a, vec![])).collect();
        for round in 1..=rounds {
            // Each round starts with the next arm: a fixed order left the first arm of every
            // round 5–6 ms ahead of the second (the same client and plan but for an `sla`).
            let count = sums.len();
            for turn in 0..count {
                let (arm, outcomes) = &mut sums[(turn + round - 1) % count];
                let port = free_port();
                let sink_url = format!("http://127.0.0.1:{}", sink.port);
                let prometheus = [
                    "--metrics-listen".to_string(),
                    format!("127.0.0.1:{port}"),
                    "--remote-write".into(),
                    format!("{sink_url}/api/v1/write"),
                    "--remote-write-interval".into(),
                    "1s".into(),
                ];
                let otlp = ["--otlp".to_string(), sink_url.clone()];
                self.client_args = match *arm {
                    "sla + Prometheus" => prometheus.to_vec(),
                    "sla + OTLP" => otlp.to_vec(),
                    "sla + every exporter" => [&prometheus[..], &otlp[..]].concat(),
                    _ => Vec::new(),
                };
                let scraper = self
                    .client_args
                    .iter()
                    .any(|a| a == "--metrics-listen")
                    .then(|| Scraper::start(port));
                let setup = Setup {
                    ttft: "50ms",
                    itl: "10ms",
                    plan: if *arm == "no sla" {
                        plain.clone()
                    } else {
                        with_sla.clone()
                    },
                    client_threads: Some(1),
                    first_wave: None,
                };
                let outcome = self.llmload(&format!("exporters-{round}"), &setup);
                let scrapes = scraper.map(Scraper::stop);
                self.client_args.clear();
                let o = &outcome;
                self.say(&format!(
                    "| {arm}{} | {round} | {} | {:+.2} | {:+.2} | {:+.3} | {:.3} | {:.0} |",
                    scrapes
                        .map(|n| format!(" ({n} scrapes)"))
                        .unwrap_or_default(),
                    o.requests,
                    o.ttft_p99_ms - o.true_ttft_p99_ms,
                    o.errors.ttft.p99_ms,
                    o.errors.itl.p99_ms,
                    1000.0 * o.cpu_s / (o.requests.max(1) as f64),
                    o.peak_rss_mb,
                ));
                outcomes.push(outcome);
            }
        }
        self.say("");
        // Each arm against the `sla` arm of the same round: paired, so that the machine's drift
        // from round to round (large on a shared 2-core box) falls out; ± is twice the standard
        // error of the mean difference (about a 95% interval).
        self.say("| arm | TTFT p99 − server's, mean (range) | vs `sla`, paired | TTFT err p99, mean (range) | vs `sla`, paired | CPU-s per 1k requests, mean (range) | vs `sla`, paired |");
        self.say("|---|---:|---:|---:|---:|---:|---:|");
        let excess = |o: &Outcome| o.ttft_p99_ms - o.true_ttft_p99_ms;
        let error = |o: &Outcome| o.errors.ttft.p99_ms;
        let cpu = |o: &Outcome| 1000.0 * o.cpu_s / (o.requests.max(1) as f64);
        let figures: [&dyn Fn(&Outcome) -> f64; 3] = [&excess, &error, &cpu];
        let reference = sums[1].1.clone();
        for (arm, outcomes) in &sums {
            let mut cells = Vec::new();
            for figure in figures {
                let values: Vec<f64> = outcomes.iter().map(figure).collect();
                let (low, high) = values
                    .iter()
                    .fold((f64::MAX, f64::MIN), |(l, h), v| (l.min(*v), h.max(*v)));
                cells.push(format!("{:.3} ({low:.3} – {high:.3})", mean(&values)));
                let differences: Vec<f64> = outcomes
                    .iter()
                    .zip(&reference)
                    .map(|(o, r)| figure(o) - figure(r))
                    .collect();
                cells.push(if *arm == "sla" {
                    "-".to_string()
                } else {
                    let (m, half) = paired(&differences);
                    format!("{m:+.3} ± {half:.3}")
                });
            }
            self.say(&format!("| {arm} | {} |", cells.join(" | ")));
        }
        self.say("");
        self.calibrated = false;
    }

    fn long_context(&mut self) {
        // The calibrated server, pinned as in `streams`: vllm-bench reads its chunks (not the
        // simulator's), and the server's own cost stays off the clients' core.
        self.calibrated = true;
        let seconds = self.seconds.max(15);
        self.say("## Long context\n");
        self.say(&format!(
            "Closed loop against the calibrated server (its core; each client alone on the other), TTFT \
             20 ms and ITL 10 ms, {seconds} s after 1 request per stream of warmup: 32,768- and 131,072-token prompts with 256-token outputs at 16 and 64 streams, beside \
             128-token prompts with 64-token outputs, llmload beside the ideal client and vllm-bench (when \
             `LLMLOAD_VLLM_BENCH` is set; its whole process, prompt generation included, on as many \
             requests). Long prompts must not slow the client or distort its timings: \"TTFT p99 − \
             server's\" is the client's TTFT p99 less the server's own (first write after the \
             request's arrival) over the same requests; the errors are matched per request against the \
             server's write times; send delay is the client's send to the server's reading of the \
             headers.\n"
        ));
        self.say("| prompt / output | streams | client | requests | TTFT p99 − server's | TTFT err p50 | TTFT err p99 | ITL err p99 | send delay p99 | client CPU-s | peak RSS MB |");
        self.say("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|");
        let loads = [
            (128u32, 64u32, 16u32),
            (32_768, 256, 16),
            (32_768, 256, 64),
            (131_072, 256, 16),
            (131_072, 256, 64),
        ];
        for (input, output, streams) in loads {
            let setup = Setup {
                ttft: "20ms",
                itl: "10ms",
                plan: plan(
                    input,
                    output,
                    &format!("concurrency {streams}"),
                    &format!("requests {streams}"),
                    &format!("duration \"{seconds}s\""),
                ),
                client_threads: None,
                first_wave: None,
            };
            let name = format!("long-{input}-{streams}");
            let ours = self.llmload(&name, &setup);
            let base = self.baseline(&name, &setup);
            let requests = (ours.requests as u32).max(streams * 2);
            let vllm = self.vllm_bench(
                &name,
                ("20ms", "10ms"),
                (streams, requests, input),
                &fixture_tokenizer(),
            );
            let excess = |o: &Outcome| o.ttft_p99_ms - o.true_ttft_p99_ms;
            for (client, o) in [("llmload", &ours), ("ideal", &base)] {
                let e = &o.errors;
                self.say(&format!(
                    "| {input} / {output} | {streams} | {client} | {} | {:.2} | {:.3} | {:.3} | {:.3} | {:.3} | {:.2} | {:.0} |",
                    e.matched, excess(o), e.ttft.p50_ms, e.ttft.p99_ms, e.itl.p99_ms,
                    e.send_delay.p99_ms, o.cpu_s, o.peak_rss_mb
                ));
            }
            if let Some(v) = &vllm {
                self.say(&format!(
                    "| {input} / {output} | {streams} | vllm-bench (whole process) | {} | {:.2} | — | — | — | — | {:.2} | {:.0} |",
                    v.requests, excess(v), v.cpu_s, v.peak_rss_mb
                ));
            }
        }
        self.calibrated = false;
        self.say("");
    }
}

/// The bare baseline client.
mod baseline {
    use std::sync::{Arc, Mutex};
    use std::time::{Duration, Instant};

    use bytes::Bytes;
    use http_body_util::{BodyExt, Full};
    use hyper::client::conn::http1::SendRequest;
    use hyper_util::rt::TokioIo;
    use llmload::executor::RequestTemplate;
    use llmload::plan::{Api, Load};
    use llmload::tokens::Tokenizer;
    use tokio::net::TcpStream;

    use super::{BaselineReport, BaselineStream};

    type Connection = SendRequest<Full<Bytes>>;

    struct Shared {
        authority: String,
        path: String,
        /// Over `https://`: the TLS client (trusting `BASELINE_TLS_CA`).
        tls: Option<tokio_rustls::TlsConnector>,
        streams: Mutex<Vec<BaselineStream>>,
        lags_ms: Mutex<Vec<f64>>,
        tokens: std::sync::atomic::AtomicU64,
        failed: std::sync::atomic::AtomicU64,
        requests: std::sync::atomic::AtomicU64,
        idle: Mutex<Vec<Connection>>,
    }

    fn env(name: &str) -> String {
        std::env::var(name).unwrap_or_else(|_| panic!("{name} is not set"))
    }

    pub fn main() {
        let url = env("BASELINE_URL");
        let plan_path = env("BASELINE_PLAN");
        let streams_path = env("BASELINE_STREAMS");
        let mut builder = tokio::runtime::Builder::new_multi_thread();
        if let Ok(threads) = std::env::var("BASELINE_THREADS") {
            builder.worker_threads(threads.parse().expect("a thread count"));
        }
        let runtime = builder.enable_all().build().expect("a runtime");
        let plan = llmload::plan::load(std::path::Path::new(&plan_path)).expect("the plan");
        let schedule = llmload::planner::compile(&plan, plan.seed).expect("a schedule");
        let tokenizer = Tokenizer::load(&plan.workload.tokenizer).expect("a tokenizer");
        let template = RequestTemplate {
            url: "http://127.0.0.1/v1/completions".parse().expect("a URL"),
            dialect: Api::Completions.dialect(),
            options: llmload::api::BodyOptions {
                model: plan.target.model.clone(),
                stream: true,
                continuous_usage: false,
                ignore_eos: plan.workload.ignore_eos,
                extra: Default::default(),
            },
            keys: std::sync::Arc::new(vec![llmload::executor::KeyCredentials {
                limits: plan.target.limits,
                ..Default::default()
            }]),
            headers: Default::default(),
            timeout: plan.target.timeout,
            on_throttle: plan.target.on_throttle,
            request_id_prefix: "baseline".into(),
            max_line: 1 << 20,
            max_body: 256 << 20,
            route_answered: Default::default(),
        };
        let authority = url
            .trim_start_matches("http://")
            .trim_start_matches("https://")
            .trim_end_matches("/v1")
            .to_string();
        let tls = url.starts_with("https://").then(|| {
            let ca = std::fs::read(env("BASELINE_TLS_CA")).expect("the CA file");
            let trust = llmload::tls::Trust::new(llmload::tls::TrustSettings {
                extra_roots: llmload::tls::certificates(&ca).expect("a CA"),
                ..Default::default()
            })
            .expect("a TLS configuration");
            tokio_rustls::TlsConnector::from(trust.client_config())
        });
        let shared = Arc::new(Shared {
            tls,
            authority,
            path: "/v1/completions".into(),
            streams: Mutex::new(Vec::new()),
            lags_ms: Mutex::new(Vec::new()),
            tokens: Default::default(),
            failed: Default::default(),
            requests: Default::default(),
            idle: Mutex::new(Vec::new()),
        });
        let mut measured_seconds = 0.0;
        for phase in &schedule.phases {
            let measured = phase.record;
            // Bodies first, as llmload builds them ahead of sending.
            let count = if phase.open_ended {
                None
            } else {
                Some(phase.requests.len() as u64)
            };
            let body = |seq: u64| {
                let request = schedule.request(phase.index, seq);
                let prompt = llmload::planner::Prompt::Text(
                    tokenizer.prompt(request.input_tokens, request.prompt_seed),
                );
                (request, template.body(&prompt, request.output_tokens))
            };
            let started = Instant::now();
            let cpu_start = llmload::executor::resources::cpu_seconds().unwrap_or_default();
            match phase.load_model {
                Load::Concurrency(n) => {
                    let deadline = phase.duration.map(|d| started + d);
                    let next = Arc::new(std::sync::atomic::AtomicU64::new(0));
                    let bodies: Arc<Vec<Bytes>> = Arc::new(
                        // Enough distinct bodies to cycle through, as few as a stream needs.
                        (0..count.unwrap_or(n as u64 * 4).clamp(1, 4096))
                            .map(|seq| body(seq).1)
                            .collect(),
                    );
                    runtime.block_on(async {
                        let mut tasks = Vec::new();
                        for _ in 0..n {
                            let (shared, next, bodies) =
                                (shared.clone(), next.clone(), bodies.clone());
                            let index = phase.index;
                            tasks.push(tokio::spawn(async move {
                                // Connections outlive phases, as llmload's pool keeps them.
                                let mut connection: Option<Connection> =
                                    shared.idle.lock().ok().and_then(|mut idle| idle.pop());
                                loop {
                                    if deadline.is_some_and(|d| Instant::now() >= d) {
                                        break;
                                    }
                                    let seq =
                                        next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                                    if count.is_some_and(|c| seq >= c) {
                                        break;
                                    }
                                    let body = bodies[(seq as usize) % bodies.len()].clone();
                                    connection =
                                        exchange(&shared, connection, index, seq, body, measured)
                                            .await;
                                }
                                if let (Some(connection), Ok(mut idle)) =
                                    (connection, shared.idle.lock())
                                {
                                    idle.push(connection);
                                }
                            }));
                        }
                        for task in tasks {
                            let _ = task.await;
                        }
                    });
                }
                // None of the benchmark's plans replays agent sessions.
                Load::Sessions(_) => eprintln!("the ideal client replays no sessions: skipped"),
                Load::Rate { .. } | Load::AtOnce(_) | Load::Trace(_) => {
                    let handle = runtime.handle().clone();
                    let index = phase.index;
                    let mut seq = 0u64;
                    let mut in_flight = Vec::new();
                    let duration = phase.duration.unwrap_or(Duration::from_secs(3600));
                    loop {
                        if count.is_some_and(|c| seq >= c) {
                            break;
                        }
                        let (request, body) = body(seq);
                        let offset = Duration::from_micros(request.intended_offset_us.unwrap_or(0));
                        if offset >= duration {
                            break;
                        }
                        let intended = started + offset;
                        // The practical best pacer: sleep to just before the deadline, then spin.
                        let now = Instant::now();
                        if intended > now + Duration::from_micros(200) {
                            std::thread::sleep(intended - now - Duration::from_micros(200));
                        }
                        while Instant::now() < intended {
                            std::hint::spin_loop();
                        }
                        let shared = shared.clone();
                        in_flight.push(handle.spawn(async move {
                            let lag_ms = Instant::now()
                                .saturating_duration_since(intended)
                                .as_secs_f64()
                                * 1000.0;
                            if measured {
                                if let Ok(mut lags) = shared.lags_ms.lock() {
                                    lags.push(lag_ms);
                                }
                            }
                            let connection =
                                shared.idle.lock().ok().and_then(|mut idle| idle.pop());
                            if let Some(connection) =
                                exchange(&shared, connection, index, seq, body, measured).await
                            {
                                if let Ok(mut idle) = shared.idle.lock() {
                                    idle.push(connection);
                                }
                            }
                        }));
                        seq += 1;
                    }
                    runtime.block_on(async {
                        for task in in_flight {
                            let _ = task.await;
                        }
                    });
                }
            }
            if measured {
                measured_seconds = started.elapsed().as_secs_f64();
                let cpu_end = llmload::executor::resources::cpu_seconds().unwrap_or_default();
                // CPU of the measured phase only, as llmload reports it.
                let report_cpu = cpu_end - cpu_start;
                finish(&shared, &streams_path, measured_seconds, report_cpu);
                return;
            }
            // Warmup results are not kept.
            if let Ok(mut streams) = shared.streams.lock() {
                streams.clear();
            }
        }
        finish(&shared, &streams_path, measured_seconds, 0.0);
    }

    fn finish(shared: &Shared, streams_path: &str, seconds: f64, cpu_s: f64) {
        use std::sync::atomic::Ordering::Relaxed;
        let streams = std::mem::take(&mut *shared.streams.lock().expect("streams"));
        let mut text = String::new();
        for stream in &streams {
            text.push_str(&serde_json::to_string(stream).expect("JSON"));
            text.push('\n');
        }
        std::fs::write(streams_path, text).expect("the streams file");
        let report = BaselineReport {
            requests: shared.requests.load(Relaxed),
            failed: shared.failed.load(Relaxed),
            tokens: shared.tokens.load(Relaxed),
            seconds,
            cpu_s,
            peak_rss_bytes: llmload::executor::resources::peak_rss_bytes().unwrap_or(0),
            lags_ms: std::mem::take(&mut *shared.lags_ms.lock().expect("lags")),
        };
        println!("{}", serde_json::to_string(&report).expect("JSON"));
    }

    async fn connect(shared: &Shared) -> Option<Connection> {
        let stream = TcpStream::connect(&shared.authority).await.ok()?;
        stream.set_nodelay(true).ok()?;
        let Some(tls) = &shared.tls else {
            return handshake(stream).await;
        };
        let host = shared
            .authority
            .rsplit_once(':')
            .map_or("", |(host, _)| host);
        let name = rustls::pki_types::ServerName::try_from(host.to_string()).ok()?;
        handshake(tls.connect(name, stream).await.ok()?).await
    }

    /// HTTP/1.1 over `stream`, its connection driven by a task of its own.
    async fn handshake<S>(stream: S) -> Option<Connection>
    where
        S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .ok()?;
        tokio::spawn(connection);
        Some(sender)
    }

    /// One request on `connection` (or a new one); returns the connection for reuse.
    async fn exchange(
        shared: &Shared,
        connection: Option<Connection>,
        phase: usize,
        seq: u64,
        body: Bytes,
        measured: bool,
    ) -> Option<Connection> {
        use std::sync::atomic::Ordering::Relaxed;
        let request_id = format!("baseline-{phase}-{seq}");
        let sent = Instant::now();
        let mut connection = match connection {
            Some(c) if !c.is_closed() => c,
            _ => match connect(shared).await {
                Some(c) => c,
                None => {
                    shared.failed.fetch_add(measured as u64, Relaxed);
                    return None;
                }
            },
        };
        let request = hyper::Request::post(&shared.path)
            .header("host", &shared.authority)
            .header("content-type", "application/json")
            .header("x-request-id", &request_id)
            .body(Full::new(body))
            .ok()?;
        let response = match connection.send_request(request).await {
            Ok(response) => response,
            Err(_) => {
                shared.failed.fetch_add(measured as u64, Relaxed);
                return None;
            }
        };
        let mut body = response.into_body();
        let mut arrivals_us = Vec::with_capacity(64);
        // A token's chunk has non-empty text (the simulator ends with an empty-text finish
        // chunk; vLLM and the calibrated server put the finish on the last token's chunk).
        const TOKEN_CHUNK: &[u8] = b"\"text\":\"";
        while let Some(frame) = body.frame().await {
            let at_us = sent.elapsed().as_micros() as u64;
            let Ok(frame) = frame else {
                shared.failed.fetch_add(measured as u64, Relaxed);
                return None;
            };
            if let Some(data) = frame.data_ref() {
                let chunks = data
                    .windows(TOKEN_CHUNK.len() + 1)
                    .filter(|w| w.starts_with(TOKEN_CHUNK) && w[TOKEN_CHUNK.len()] != b'"')
                    .count();
                arrivals_us.extend(std::iter::repeat_n(at_us, chunks));
            }
        }
        if measured {
            shared.requests.fetch_add(1, Relaxed);
            shared.tokens.fetch_add(arrivals_us.len() as u64, Relaxed);
            if let Ok(mut streams) = shared.streams.lock() {
                streams.push(BaselineStream {
                    request_id,
                    arrivals_us,
                    sent_monotonic_ns: llmload::clock::monotonic_ns(sent),
                });
            }
        }
        Some(connection)
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// A loopback HTTP sink for the exporters' pushes: reads each request whole (headers, then the
/// body by its length) and answers `200` with no body, on as many connections as come.
struct Sink {
    port: u16,
}

impl Sink {
    fn start() -> Sink {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a sink");
        let port = listener.local_addr().expect("its address").port();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                std::thread::spawn(move || Sink::serve(stream));
            }
        });
        Sink { port }
    }

    fn serve(mut stream: std::net::TcpStream) {
        use std::io::{Read, Write};
        let mut buffer = Vec::new();
        let mut chunk = [0u8; 65536];
        loop {
            let Some(end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") else {
                match stream.read(&mut chunk) {
                    Ok(0) | Err(_) => return,
                    Ok(n) => buffer.extend_from_slice(&chunk[..n]),
                }
                continue;
            };
            let head = String::from_utf8_lossy(&buffer[..end]).to_ascii_lowercase();
            let length: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
            while buffer.len() < end + 4 + length {
                match stream.read(&mut chunk) {
                    Ok(0) | Err(_) => return,
                    Ok(n) => buffer.extend_from_slice(&chunk[..n]),
                }
            }
            buffer.drain(..end + 4 + length);
            if stream
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
                .is_err()
            {
                return;
            }
        }
    }
}

/// Scrapes `http://127.0.0.1:PORT/metrics` every second until stopped, as Prometheus would.
struct Scraper {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<u64>,
}

impl Scraper {
    fn start(port: u16) -> Scraper {
        use std::io::{Read, Write};
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stopping = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut scrapes = 0;
            while !stopping.load(std::sync::atomic::Ordering::Relaxed) {
                if let Ok(mut stream) = std::net::TcpStream::connect(("127.0.0.1", port)) {
                    let asked = stream.write_all(
                        b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                    );
                    let mut body = Vec::new();
                    if asked.is_ok()
                        && stream.read_to_end(&mut body).is_ok()
                        && body.starts_with(b"HTTP/1.1 200")
                    {
                        scrapes += 1;
                    }
                }
                std::thread::sleep(std::time::Duration::from_secs(1));
            }
            scrapes
        });
        Scraper { stop, thread }
    }

    /// Stops; how many scrapes were answered.
    fn stop(self) -> u64 {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.thread.join().unwrap_or(0)
    }
}

fn mean(values: &[f64]) -> f64 {
    values.iter().sum::<f64>() / values.len().max(1) as f64
}

/// The mean of paired differences and twice its standard error.
fn paired(differences: &[f64]) -> (f64, f64) {
    let n = differences.len().max(1) as f64;
    let m = mean(differences);
    let variance = differences.iter().map(|d| (d - m) * (d - m)).sum::<f64>() / (n - 1.0).max(1.0);
    (m, 2.0 * (variance / n).sqrt())
}
