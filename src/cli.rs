//! The command line: `run`, `check`, `plan`, `report` and `sim`, and the exit codes CI gates on.
//!
//! This module wires the pipeline stages together and talks to the user; it holds no metric or
//! scheduling logic of its own.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};
use sha2::Digest;

use crate::executor::record::{ErrorClass, RunHeader, RunLog};
use crate::executor::{self, RequestTemplate, RunConfig};
use crate::plan::{self, Endpoint, Plan, SimSettings};
use crate::tokens::Tokenizer;
use crate::{capacity, compare, fidelity, metrics, planner, report, sim, verdict};

/// Prints a line to stdout. A closed pipe (`llmload plan ... | head`) is not an error worth a
/// panic: the output is simply not wanted any more.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout().lock(), $($arg)*);
    }};
}

/// Like `say!`, without the newline.
macro_rules! say_raw {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = write!(std::io::stdout().lock(), $($arg)*);
    }};
}

/// Every assertion passed.
pub const EXIT_PASS: u8 = 0;
/// An assertion failed.
pub const EXIT_FAIL: u8 = 1;
/// The plan or the command line is wrong.
pub const EXIT_USAGE: u8 = 2;
/// The run could not be carried out: target unreachable, every request failed, or interrupted.
pub const EXIT_RUN: u8 = 3;

#[derive(Parser, Debug)]
#[command(
    name = "llmload",
    version,
    about = "Load-test LLM serving endpoints from KDL benchmark plans"
)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run a plan against its target and write a report with verdicts.
    Run(RunArgs),
    /// Check a plan and print every mistake in it; with --capacity, also whether this machine
    /// can generate its load faithfully.
    Check(CheckArgs),
    /// Print the schedule a plan compiles to.
    Plan {
        plan: PathBuf,
        #[arg(long)]
        seed: Option<u64>,
        #[arg(long, value_enum, default_value = "table")]
        format: PlanFormat,
    },
    /// Re-render a report directory's reports from its records.jsonl, without running anything.
    Report {
        dir: PathBuf,
        #[command(flatten)]
        gate: GateArgs,
    },
    /// Compare two report directories: a Markdown table fit for a pull request; exit 1 on a
    /// regression beyond the run-to-run noise.
    Compare {
        baseline: PathBuf,
        current: PathBuf,
        /// Compare runs of different plans, seeds or models anyway.
        #[arg(long)]
        force: bool,
        /// Also write the Markdown table to this file.
        #[arg(long)]
        out: Option<PathBuf>,
        /// Write a JUnit XML file with one test case per compared metric.
        #[arg(long)]
        junit: Option<PathBuf>,
    },
    /// Serve the embedded OpenAI-compatible simulator until Ctrl-C.
    Sim {
        /// The port to listen on; 0 picks a free one (the first line printed says which).
        #[arg(long, default_value_t = 8000)]
        port: u16,
        /// An engine model: a built-in profile name (llama-3.1-8b-h100, llama-3.1-70b-4xh100,
        /// qwen2.5-7b-l4, tiny) or a KDL file holding a `sim { ... }` block. Without it, every
        /// request is served alone with the fixed delays below.
        #[arg(long)]
        profile: Option<String>,
        #[arg(long, default_value = "127.0.0.1")]
        host: String,
        /// Time to first token.
        #[arg(long, default_value = "50ms", value_parser = parse_duration_arg)]
        ttft: Duration,
        /// Time between tokens.
        #[arg(long, default_value = "10ms", value_parser = parse_duration_arg)]
        itl: Duration,
        /// Each delay is stretched by a uniform random amount up to this.
        #[arg(long, default_value = "0ms", value_parser = parse_duration_arg)]
        jitter: Duration,
        #[arg(long, default_value_t = 1)]
        tokens_per_chunk: u32,
        #[arg(long, default_value = "cl100k_base")]
        tokenizer: String,
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Record when every token of every streamed request is written, and serve the record
        /// at GET /llmload/writes (one JSON object per request). For measuring a client's
        /// timing error; memory grows with every request.
        #[arg(long)]
        record_writes: bool,
        /// Runtime worker threads [default: one per core].
        #[arg(long)]
        threads: Option<usize>,
    },
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum PlanFormat {
    Table,
    Json,
    Csv,
}

fn parse_duration_arg(text: &str) -> Result<Duration, String> {
    plan::units::parse_duration(text)
}

pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let code = match cli.command {
        Command::Check(args) => check(&args),
        Command::Plan { plan, seed, format } => show_plan(&plan, seed, format),
        Command::Run(args) => run(args),
        Command::Report { dir, gate } => rerender(&dir, &gate),
        Command::Compare {
            baseline,
            current,
            force,
            out,
            junit,
        } => compare_dirs(&baseline, &current, force, out.as_deref(), junit.as_deref()),
        Command::Sim {
            port,
            profile,
            host,
            ttft,
            itl,
            jitter,
            tokens_per_chunk,
            tokenizer,
            seed,
            record_writes,
            threads,
        } => serve_sim(
            &host,
            port,
            SimSettings {
                ttft,
                itl,
                jitter,
                tokens_per_chunk: tokens_per_chunk.max(1),
                seed,
                ..SimSettings::default()
            },
            profile.as_deref(),
            &tokenizer,
            sim::ServeOptions { record_writes },
            threads,
        ),
    };
    ExitCode::from(code)
}

fn error(message: impl std::fmt::Display) -> u8 {
    eprintln!("error: {message}");
    EXIT_USAGE
}

fn load_plan(path: &Path) -> Result<Plan, u8> {
    plan::load(path).map_err(|errors| {
        eprint!("{}", errors.render());
        EXIT_USAGE
    })
}

#[derive(clap::Args, Debug)]
struct CheckArgs {
    /// The plan file (KDL).
    plan: PathBuf,
    /// Drive each of the plan's loads at its peak against the simulator in this process, and
    /// say whether this machine generates it faithfully (schedule lag, timing error, client CPU).
    #[arg(long)]
    capacity: bool,
    /// How long each capacity trial sends.
    #[arg(long, default_value = "5s", value_parser = parse_duration_arg, requires = "capacity")]
    duration: Duration,
    /// The trial simulator's time to first token.
    #[arg(long, default_value = "20ms", value_parser = parse_duration_arg, requires = "capacity")]
    sim_ttft: Duration,
    /// The trial simulator's time between tokens (shorter is more work for the client).
    #[arg(long, default_value = "5ms", value_parser = parse_duration_arg, requires = "capacity")]
    sim_itl: Duration,
    /// Runtime worker threads, as `run --threads` would use.
    #[arg(long, requires = "capacity")]
    threads: Option<usize>,
}

/// `check --capacity`: one short trial per distinct peak load of the plan; exit 1 when this
/// machine cannot generate one of them faithfully.
fn check_capacity(args: &CheckArgs, plan: &Plan) -> u8 {
    let server = capacity::TrialServer {
        ttft: args.sim_ttft,
        itl: args.sim_itl,
    };
    let trials = capacity::trials(plan, args.duration, server);
    let tokenizer = match Tokenizer::load(&plan.workload.tokenizer) {
        Ok(tokenizer) => Arc::new(tokenizer),
        Err(message) => return error(message),
    };
    let runtime = match runtime(args.threads) {
        Ok(runtime) => runtime,
        Err(code) => return code,
    };
    let cores = executor::resources::client_cores(args.threads);
    say!(
        "capacity: {} trial(s), {} s each, against the simulator in this process (TTFT {} ms, ITL {} ms) on {cores} core(s)",
        trials.len(),
        args.duration.as_secs_f64(),
        args.sim_ttft.as_secs_f64() * 1000.0,
        args.sim_itl.as_secs_f64() * 1000.0,
    );
    say!("the simulator shares these cores: a load that passes here passes against a remote server\n");
    let mut results = Vec::new();
    for (number, trial) in trials.into_iter().enumerate() {
        let dir =
            std::env::temp_dir().join(format!("llmload-capacity-{}-{number}", std::process::id()));
        let result = capacity_trial(&trial, &dir, &runtime, tokenizer.clone(), args.threads);
        let _ = std::fs::remove_dir_all(&dir);
        match result {
            Ok(result) => {
                say!("{}", capacity_line(&result));
                results.push(result);
            }
            Err(message) => {
                eprintln!("error: {message}");
                return EXIT_RUN;
            }
        }
    }
    if results.iter().all(capacity::TrialResult::faithful) {
        say!("\nPASS: this machine generates every load of the plan faithfully");
        EXIT_PASS
    } else {
        say!("\nFAIL: this machine cannot generate every load of the plan faithfully: run the client with more \
              cores (--threads, another machine) or split the load across several clients");
        EXIT_FAIL
    }
}

fn capacity_trial(
    trial: &capacity::Trial,
    dir: &Path,
    runtime: &tokio::runtime::Runtime,
    tokenizer: Arc<Tokenizer>,
    worker_threads: Option<usize>,
) -> Result<capacity::TrialResult, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let schedule = planner::compile(&trial.plan, trial.plan.seed)?;
    let records_path = dir.join("records.jsonl");
    let writes = runtime.block_on(execute(Execution {
        plan: &trial.plan,
        plan_file: Path::new(&trial.plan.source.file_name),
        schedule,
        seed: trial.plan.seed,
        target: None,
        auth: None,
        tokenizer,
        records_path: records_path.clone(),
        started: chrono::Utc::now(),
        grace: Duration::from_secs(5),
        quiet: true,
        worker_threads,
        record_writes: true,
    }))?;
    // One pass over the records: the aggregates, and the measured phase's streams.
    use executor::record::LogLine;
    let mut aggregator = metrics::Aggregator::new(None);
    let mut header = None;
    let mut measured_phase = None;
    let mut measured = Vec::new();
    executor::record::read_lines(&records_path, |line| {
        match &line {
            LogLine::Run(run) => header = Some(run.clone()),
            LogLine::PhaseStart(phase) if phase.record && measured_phase.is_none() => {
                measured_phase = Some(phase.index)
            }
            LogLine::Request(record) if Some(record.phase) == measured_phase => {
                measured.extend(fidelity::MeasuredStream::of_record(record, header.as_ref()))
            }
            _ => {}
        }
        aggregator.push(line);
    })?;
    let (log, aggregates) = aggregator.finish();
    let errors = fidelity::timing_errors(measured, &writes.unwrap_or_default());
    // The measured phase follows the warmup.
    let phase = aggregates
        .phases
        .iter()
        .find(|p| p.recorded)
        .ok_or("the capacity trial ran no measured phase")?;
    let open_loop = log.phases.iter().any(|p| p.record && p.open_loop);
    Ok(capacity::judge(
        trial.phases.clone(),
        phase,
        open_loop,
        &errors,
    ))
}

fn capacity_line(result: &capacity::TrialResult) -> String {
    let ms = |value: Option<f64>| value.map_or("-".to_string(), |v| format!("{v:.2} ms"));
    let rate = match result.planned_per_s {
        Some(planned) => format!("{:.1}/{planned} req/s sent", result.sent_per_s),
        None => format!("{:.1} req/s", result.sent_per_s),
    };
    let cpu = match (result.client_utilization, result.client_cores) {
        (Some(share), Some(cores)) => format!("CPU {:.0}% of {cores}", share * 100.0),
        _ => "CPU -".to_string(),
    };
    let verdict = if result.faithful() {
        "ok".to_string()
    } else {
        format!("LIMITED: {}", result.limits.join("; "))
    };
    format!(
        "{:<24} {:<24} {rate:<22} lag p99 {:<9} read delay p99 {:<9} ITL err p99 {:<9} (TTFT err p99 {:<9}) {cpu:<12} {verdict}",
        result.phases.join(", "),
        result.load,
        ms(result.schedule_lag_p99_ms),
        ms(result.read_delay_p99_ms),
        ms(result.itl_error_p99_ms),
        ms(result.ttft_error_p99_ms),
    )
}

fn check(args: &CheckArgs) -> u8 {
    let plan = match load_plan(&args.plan) {
        Ok(plan) => plan,
        Err(code) => return code,
    };
    say!(
        "{}: plan \"{}\" is valid: {} phase(s), {} assertion(s)",
        args.plan.display(),
        plan.name,
        plan.phases.len(),
        plan.sla.len()
    );
    if args.capacity {
        check_capacity(args, &plan)
    } else {
        EXIT_PASS
    }
}

fn show_plan(path: &Path, seed: Option<u64>, format: PlanFormat) -> u8 {
    let plan = match load_plan(path) {
        Ok(plan) => plan,
        Err(code) => return code,
    };
    let schedule = match planner::compile(&plan, seed.unwrap_or(plan.seed)) {
        Ok(schedule) => schedule,
        Err(message) => return error(message),
    };
    let output = match format {
        PlanFormat::Json => match serde_json::to_string_pretty(&schedule) {
            Ok(json) => json + "\n",
            Err(e) => return error(e),
        },
        PlanFormat::Csv => schedule_csv(&schedule),
        PlanFormat::Table => schedule_table(&plan, &schedule),
    };
    say_raw!("{output}");
    EXIT_PASS
}

fn schedule_csv(schedule: &planner::Schedule) -> String {
    let mut out =
        String::from("phase,seq,intended_offset_ms,input_tokens,output_tokens,prompt_seed\n");
    for phase in &schedule.phases {
        for r in &phase.requests {
            let offset = r
                .intended_offset_us
                .map(|us| format!("{:.3}", us as f64 / 1000.0))
                .unwrap_or_default();
            let name = if phase.name.contains([',', '"']) {
                format!("\"{}\"", phase.name.replace('"', "\"\""))
            } else {
                phase.name.clone()
            };
            out.push_str(&format!(
                "{name},{},{offset},{},{},{}\n",
                r.seq, r.input_tokens, r.output_tokens, r.prompt_seed
            ));
        }
    }
    out
}

fn schedule_table(plan: &Plan, schedule: &planner::Schedule) -> String {
    let mut out = format!("plan \"{}\" (seed {})\n\n", plan.name, schedule.seed);
    out.push_str(&format!(
        "{:<16} {:<28} {:>10} {:>10} {:>12}  {}\n",
        "phase", "load", "requests", "rate/s", "duration", "input mix (tokens: share)"
    ));
    for phase in &schedule.phases {
        let requests = if phase.open_ended {
            "open-ended".to_string()
        } else {
            phase.requests.len().to_string()
        };
        let rate = phase
            .planned_rate
            .map(|r| format!("{r:.2}"))
            .unwrap_or_else(|| "-".into());
        let duration = phase
            .duration
            .map(plan::units::format_duration)
            .unwrap_or_else(|| "-".into());
        let mut mix: std::collections::BTreeMap<(u32, u32), usize> = Default::default();
        for r in &phase.requests {
            *mix.entry((r.input_tokens, r.output_tokens)).or_default() += 1;
        }
        let mix_text = if phase.requests.is_empty() {
            plan.workload
                .buckets
                .iter()
                .map(|b| {
                    format!(
                        "{}→{}: weight {}",
                        b.input_tokens,
                        b.output_tokens.unwrap_or(plan.workload.output_tokens),
                        b.weight
                    )
                })
                .collect::<Vec<_>>()
                .join(", ")
        } else {
            mix.iter()
                .map(|((i, o), n)| {
                    format!(
                        "{i}→{o}: {:.0}%",
                        *n as f64 * 100.0 / phase.requests.len() as f64
                    )
                })
                .collect::<Vec<_>>()
                .join(", ")
        };
        out.push_str(&format!(
            "{:<16} {:<28} {:>10} {:>10} {:>12}  {}{}\n",
            phase.name,
            phase.load,
            requests,
            rate,
            duration,
            mix_text,
            if phase.record { "" } else { "  (not recorded)" }
        ));
    }
    out
}

/// `http://host:8000` or `http://host:8000/v1/` → `http://host:8000/v1`.
pub fn api_root(url: &str) -> String {
    let trimmed = url.trim_end_matches('/');
    if trimmed.ends_with("/v1") {
        trimmed.to_string()
    } else {
        format!("{trimmed}/v1")
    }
}

/// The URL without `user:password@`, for reports and logs.
pub fn redact_url(url: &str) -> String {
    let Some(scheme_end) = url.find("://") else {
        return url.to_string();
    };
    let rest = &url[scheme_end + 3..];
    let authority_end = rest.find('/').unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => format!("{}{}", &url[..scheme_end + 3], &rest[at + 1..]),
        None => url.to_string(),
    }
}

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown".into())
}

#[derive(clap::Args, Debug)]
struct RunArgs {
    /// The plan file (KDL).
    plan: PathBuf,
    /// Send to this base URL instead of the plan's target (with or without /v1).
    #[arg(long)]
    target: Option<String>,
    /// Report directory [default: reports/<plan>-<UTC timestamp>/].
    #[arg(long)]
    out: Option<PathBuf>,
    /// Use this seed instead of the plan's.
    #[arg(long)]
    seed: Option<u64>,
    #[command(flatten)]
    gate: GateArgs,
    /// After Ctrl-C, how long in-flight requests may finish before they are cancelled.
    #[arg(long, default_value = "5s", value_parser = parse_duration_arg)]
    grace: Duration,
    /// No live progress line.
    #[arg(long, short)]
    quiet: bool,
    /// Runtime worker threads for sending and reading [default: one per core].
    #[arg(long)]
    threads: Option<usize>,
}

/// The async runtime: `threads` worker threads, or one per core.
fn runtime(threads: Option<usize>) -> Result<tokio::runtime::Runtime, u8> {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if let Some(threads) = threads {
        if threads == 0 {
            return Err(error("--threads must be at least 1"));
        }
        builder.worker_threads(threads);
    }
    builder
        .enable_all()
        .build()
        .map_err(|e| error(format!("cannot start the async runtime: {e}")))
}

fn run(args: RunArgs) -> u8 {
    let plan = match load_plan(&args.plan) {
        Ok(plan) => plan,
        Err(code) => return code,
    };
    if let Some(target) = &args.target {
        if !(target.starts_with("http://") || target.starts_with("https://")) {
            return error(format!(
                "--target {target} is not an http:// or https:// URL"
            ));
        }
    }
    for template in &args.gate.templates {
        if !template.is_file() {
            return error(format!("--template {}: no such file", template.display()));
        }
    }
    let seed = args.seed.unwrap_or(plan.seed);
    let schedule = match planner::compile(&plan, seed) {
        Ok(schedule) => schedule,
        Err(message) => return error(message),
    };
    let tokenizer = match Tokenizer::load(&plan.workload.tokenizer) {
        Ok(tokenizer) => Arc::new(tokenizer),
        Err(message) => return error(message),
    };
    let api_key = match &plan.target.api_key_env {
        Some(var) => match std::env::var(var) {
            Ok(key) if !key.is_empty() => Some(key),
            _ => {
                eprintln!("note: ${var} is not set; requests go without an API key");
                None
            }
        },
        None => None,
    };
    let auth = match api_key {
        Some(key) => match reqwest::header::HeaderValue::from_str(&format!("Bearer {key}")) {
            Ok(mut value) => {
                value.set_sensitive(true);
                Some(value)
            }
            Err(_) => {
                return error("the API key holds characters that cannot go in an HTTP header")
            }
        },
        None => None,
    };
    let started = chrono::Utc::now();
    let out = args.out.clone().unwrap_or_else(|| {
        PathBuf::from("reports").join(format!(
            "{}-{}",
            plan.name,
            started.format("%Y%m%dT%H%M%SZ")
        ))
    });
    if let Err(e) = std::fs::create_dir_all(&out) {
        return error(format!("cannot create {}: {e}", out.display()));
    }
    if let Err(e) = std::fs::write(out.join("plan.kdl"), plan.source.text.as_bytes()) {
        return error(format!(
            "cannot write {}: {e}",
            out.join("plan.kdl").display()
        ));
    }
    let runtime = match runtime(args.threads) {
        Ok(runtime) => runtime,
        Err(code) => return code,
    };

    let result = runtime.block_on(execute(Execution {
        plan: &plan,
        plan_file: &args.plan,
        schedule,
        seed,
        target: args.target.as_deref(),
        auth,
        tokenizer,
        records_path: out.join("records.jsonl"),
        started,
        grace: args.grace,
        quiet: args.quiet,
        worker_threads: args.threads,
        record_writes: false,
    }));
    if let Err(message) = result {
        eprintln!("error: {message}");
        return EXIT_RUN;
    }
    finish(&plan, &out, &args.gate)
}

/// Everything one execution of a compiled plan needs.
struct Execution<'a> {
    plan: &'a Plan,
    plan_file: &'a Path,
    schedule: planner::Schedule,
    seed: u64,
    /// Overrides the plan's target.
    target: Option<&'a str>,
    auth: Option<reqwest::header::HeaderValue>,
    tokenizer: Arc<Tokenizer>,
    records_path: PathBuf,
    started: chrono::DateTime<chrono::Utc>,
    grace: Duration,
    quiet: bool,
    worker_threads: Option<usize>,
    /// Have an in-process simulator record its write times, and return them.
    record_writes: bool,
}

/// Runs the schedule, starting the simulator in-process for a "sim" target; returns the
/// simulator's write times when asked to record them.
async fn execute(run: Execution<'_>) -> Result<Option<Vec<sim::writes::RequestWrites>>, String> {
    let plan = run.plan;
    // A "sim" target starts the simulator in-process, on a loopback port of its own.
    let (base, sim) = match (run.target, &plan.target.endpoint) {
        (Some(target), _) => (api_root(target), None),
        (None, Endpoint::Url(url)) => (api_root(url), None),
        (None, Endpoint::Simulator) => {
            let addr: SocketAddr = ([127, 0, 0, 1], 0).into();
            let options = sim::ServeOptions {
                record_writes: run.record_writes,
            };
            match sim::serve_with(addr, plan.sim.clone(), run.tokenizer.clone(), options).await {
                Ok(server) => (server.base_url(), Some(server)),
                Err(e) => return Err(format!("cannot start the simulator: {e}")),
            }
        }
    };
    let target_display = match plan.target.endpoint {
        Endpoint::Simulator if run.target.is_none() => format!("sim (embedded, {})", base),
        _ => redact_url(&base),
    };
    let request_id_prefix = executor::request::new_request_id_prefix();
    let header = RunHeader {
        tool_version: env!("CARGO_PKG_VERSION").to_string(),
        plan: plan.name.clone(),
        plan_file: run.plan_file.display().to_string(),
        plan_sha256: format!("{:x}", sha2::Sha256::digest(plan.source.text.as_bytes())),
        seed: run.seed,
        target: target_display.clone(),
        model: plan.target.model.clone(),
        api: plan.target.api.as_str().to_string(),
        stream: plan.target.stream,
        exact_output: plan.workload.ignore_eos,
        tokenizer: run.tokenizer.name().to_string(),
        started_at: run
            .started
            .to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        client_host: host_name(),
        clock_origin_ns: None,
        request_id_prefix: Some(request_id_prefix.clone()),
    };
    let url = format!("{base}{}", plan.target.api.path());
    let url =
        reqwest::Url::parse(&url).map_err(|e| format!("{} is not a URL: {e}", redact_url(&url)))?;
    let template = RequestTemplate {
        url,
        api: plan.target.api,
        model: plan.target.model.clone(),
        stream: plan.target.stream,
        continuous_usage: plan.target.continuous_usage,
        ignore_eos: plan.workload.ignore_eos,
        auth: run.auth,
        timeout: plan.target.timeout,
        request_id_prefix,
    };
    if !run.quiet {
        eprintln!(
            "llmload: running plan \"{}\" against {target_display}",
            plan.name
        );
    }
    executor::run(
        Arc::new(run.schedule),
        RunConfig {
            template,
            tokenizer: run.tokenizer,
            header,
            records_path: run.records_path,
            grace: run.grace,
            show_progress: !run.quiet,
            worker_threads: run.worker_threads,
        },
    )
    .await?;
    Ok(sim.and_then(|server| server.writes()))
}

/// What decides the exit code besides the SLA, and where else results go.
#[derive(clap::Args, Debug, Clone, Default)]
struct GateArgs {
    /// Also render this minijinja template into the report directory (repeatable).
    #[arg(long = "template")]
    templates: Vec<PathBuf>,
    /// Compare with this earlier run's report directory; a regression fails the gate.
    #[arg(long)]
    baseline: Option<PathBuf>,
    /// Write a JUnit XML file: one test case per assertion (and per compared metric).
    #[arg(long)]
    junit: Option<PathBuf>,
    /// Fail the gate (exit 1) when the run is not trustworthy: schedule lag, finish_reason
    /// "stop" under exact lengths, token counts off the plan.
    #[arg(long)]
    fail_on_warning: bool,
}

/// Loads a report directory's records and the plan kept with them.
fn load_report_dir(dir: &Path) -> Result<(RunLog, Plan), u8> {
    let log = RunLog::read(&dir.join("records.jsonl")).map_err(error)?;
    Ok((log, load_report_plan(dir)?))
}

/// The plan a report directory keeps beside its records.
fn load_report_plan(dir: &Path) -> Result<Plan, u8> {
    let plan_path = dir.join("plan.kdl");
    let text = std::fs::read_to_string(&plan_path).map_err(|e| {
        error(format!(
            "cannot read {}: {e} (a report directory holds the plan.kdl its run left)",
            plan_path.display()
        ))
    })?;
    let plan =
        plan::parse_archived_plan(&plan_path.display().to_string(), text).map_err(|errors| {
            eprint!("{}", errors.render());
            EXIT_USAGE
        })?;
    Ok(plan)
}

/// Compares `current` with the run in `baseline_dir`, under the current plan's tolerances.
fn compare_runs(
    baseline_dir: &Path,
    current: &RunLog,
    plan: &Plan,
    force: bool,
) -> Result<compare::Comparison, u8> {
    let (baseline, _) = load_report_dir(baseline_dir)?;
    let notes = compare::comparable(
        &baseline.header.clone().unwrap_or_default(),
        &current.header.clone().unwrap_or_default(),
        force,
    )
    .map_err(error)?;
    let tolerances = if plan.regression.is_empty() {
        compare::default_tolerances()
    } else {
        plan.regression.clone()
    };
    Ok(compare::compare(
        &baseline,
        current,
        &tolerances,
        plan.slo.as_ref(),
        notes,
        plan.seed,
    ))
}

/// Appends to GitHub Actions' job summary when running there.
fn append_step_summary(text: &str) {
    let Some(path) = std::env::var_os("GITHUB_STEP_SUMMARY").filter(|p| !p.is_empty()) else {
        return;
    };
    let written = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .and_then(|mut file| std::io::Write::write_all(&mut file, text.as_bytes()));
    if let Err(e) = written {
        eprintln!("warning: cannot append to $GITHUB_STEP_SUMMARY: {e}");
    }
}

/// Metrics, verdicts, comparison, report files and the terminal summary of the run whose
/// records are in `out`; returns the exit code.
fn finish(plan: &Plan, out: &Path, gate: &GateArgs) -> u8 {
    let records_path = out.join("records.jsonl");
    // One streaming pass: memory does not grow with the length of the run.
    let (log, aggregates) = match metrics::compute_file(&records_path, plan.slo.as_ref()) {
        Ok(computed) => computed,
        Err(message) => {
            eprintln!("error: {message}");
            return EXIT_RUN;
        }
    };
    let first_error = aggregates.first_error.clone();
    let verdicts = verdict::evaluate(&plan.sla, &aggregates);
    let context = report::ReportContext::new(
        &log,
        report::Records::File(&records_path),
        aggregates,
        verdicts,
    );
    if let Err(message) = report::write_all(out, &context, &gate.templates) {
        eprintln!("error: {message}");
        return EXIT_RUN;
    }
    let summary = &context.summary;
    let comparison = match &gate.baseline {
        // Resampling needs every request's values: only a comparison reads them all in.
        Some(dir) => match RunLog::read(&records_path)
            .map_err(error)
            .and_then(|current| compare_runs(dir, &current, plan, false))
        {
            Ok(comparison) => Some(comparison),
            Err(code) => return code,
        },
        None => None,
    };
    if let Some(comparison) = &comparison {
        let written = report::comparison_markdown(comparison).and_then(|markdown| {
            let json = serde_json::to_string_pretty(comparison).map_err(|e| e.to_string())?;
            std::fs::write(out.join("comparison.md"), &markdown)
                .and_then(|_| std::fs::write(out.join("comparison.json"), json + "\n"))
                .map_err(|e| format!("cannot write the comparison: {e}"))?;
            Ok(markdown)
        });
        match written {
            Ok(markdown) => say!("{markdown}"),
            Err(message) => {
                eprintln!("error: {message}");
                return EXIT_RUN;
            }
        }
    }
    if let Some(path) = &gate.junit {
        let xml = report::junit::render(summary, comparison.as_ref(), gate.fail_on_warning);
        if let Err(e) = std::fs::write(path, xml) {
            eprintln!("error: cannot write {}: {e}", path.display());
            return EXIT_RUN;
        }
    }
    match report::step_summary(summary, comparison.as_ref()) {
        Ok(text) => append_step_summary(&text),
        Err(message) => eprintln!("warning: {message}"),
    }
    say!("{}", report::terminal_summary(summary));
    say!("report: {}", out.join("report.md").display());

    let recorded = &summary.overall.requests;
    if summary.interrupted {
        return EXIT_RUN;
    }
    if recorded.sent > 0 && recorded.ok == 0 {
        let connect_failures = summary
            .overall
            .errors
            .get(ErrorClass::Connect.as_str())
            .copied()
            .unwrap_or(0);
        if connect_failures == recorded.sent {
            eprintln!("error: the target is unreachable: no connection could be made (is the server running? check the URL or --target)");
        } else {
            let detail = first_error.unwrap_or_default();
            eprintln!("error: every request failed; the first said: {detail}");
        }
        return EXIT_RUN;
    }
    if recorded.sent == 0 {
        eprintln!("error: no recorded request was sent");
        return EXIT_RUN;
    }
    let mut code = if summary.passed { EXIT_PASS } else { EXIT_FAIL };
    if comparison.as_ref().is_some_and(|c| c.regressed) {
        say!("FAIL: a regression against the baseline");
        code = EXIT_FAIL;
    }
    if gate.fail_on_warning
        && summary
            .warnings
            .iter()
            .any(|w| w.severity == metrics::Severity::Warning)
    {
        say!("FAIL: the run is not trustworthy (see the warnings) and --fail-on-warning is set");
        code = EXIT_FAIL;
    }
    code
}

fn rerender(dir: &Path, gate: &GateArgs) -> u8 {
    match load_report_plan(dir) {
        Ok(plan) => finish(&plan, dir, gate),
        Err(code) => code,
    }
}

fn compare_dirs(
    baseline: &Path,
    current: &Path,
    force: bool,
    out: Option<&Path>,
    junit: Option<&Path>,
) -> u8 {
    let (log, plan) = match load_report_dir(current) {
        Ok(loaded) => loaded,
        Err(code) => return code,
    };
    let comparison = match compare_runs(baseline, &log, &plan, force) {
        Ok(comparison) => comparison,
        Err(code) => return code,
    };
    let markdown = match report::comparison_markdown(&comparison) {
        Ok(markdown) => markdown,
        Err(message) => return error(message),
    };
    say_raw!("{markdown}");
    if let Some(path) = out {
        if let Err(e) = std::fs::write(path, &markdown) {
            return error(format!("cannot write {}: {e}", path.display()));
        }
    }
    if let Some(path) = junit {
        let aggregates = metrics::compute(&log, plan.slo.as_ref());
        let verdicts = verdict::evaluate(&[], &aggregates);
        let context = report::ReportContext::new(
            &log,
            report::Records::InMemory(&log.records),
            aggregates,
            verdicts,
        );
        if let Err(e) = std::fs::write(
            path,
            report::junit::render(&context.summary, Some(&comparison), false),
        ) {
            return error(format!("cannot write {}: {e}", path.display()));
        }
    }
    append_step_summary(&markdown);
    if comparison.regressed {
        EXIT_FAIL
    } else {
        EXIT_PASS
    }
}

/// Settings from `--profile`: a built-in engine, or a profile file.
fn sim_profile(profile: &str, flags: SimSettings) -> Result<SimSettings, u8> {
    if let Some(engine) = plan::profiles::builtin(profile) {
        return Ok(SimSettings {
            engine: Some(engine),
            ..flags
        });
    }
    let path = Path::new(profile);
    if !path.is_file() {
        return Err(error(format!(
            "--profile {profile}: no such file, and no built-in profile of that name (built in: {})",
            plan::profiles::NAMES.join(", ")
        )));
    }
    let text =
        std::fs::read_to_string(path).map_err(|e| error(format!("cannot read {profile}: {e}")))?;
    plan::parse_sim_profile(profile, text).map_err(|errors| {
        eprint!("{}", errors.render());
        EXIT_USAGE
    })
}

fn serve_sim(
    host: &str,
    port: u16,
    settings: SimSettings,
    profile: Option<&str>,
    tokenizer: &str,
    options: sim::ServeOptions,
    threads: Option<usize>,
) -> u8 {
    let settings = match profile {
        Some(profile) => match sim_profile(profile, settings) {
            Ok(settings) => settings,
            Err(code) => return code,
        },
        None => settings,
    };
    let addr: SocketAddr = match format!("{host}:{port}").parse() {
        Ok(addr) => addr,
        Err(_) => {
            return error(format!(
                "{host}:{port} is not an address to listen on (write an IP, e.g. 127.0.0.1)"
            ))
        }
    };
    let spec = if tokenizer.ends_with(".json") {
        plan::TokenizerSpec::File(tokenizer.into())
    } else {
        plan::TokenizerSpec::Builtin(tokenizer.into())
    };
    let tokenizer = match Tokenizer::load(&spec) {
        Ok(t) => Arc::new(t),
        Err(message) => return error(message),
    };
    let runtime = match runtime(threads) {
        Ok(runtime) => runtime,
        Err(code) => return code,
    };
    runtime.block_on(async {
        let server = match sim::serve_with(addr, settings, tokenizer, options).await {
            Ok(server) => server,
            Err(e) => return error(format!("cannot listen on {addr}: {e}")),
        };
        say!(
            "llmload sim: serving {} (Ctrl-C to stop)",
            server.base_url()
        );
        let _ = tokio::signal::ctrl_c().await;
        server.shutdown();
        EXIT_PASS
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_root_with_or_without_v1() {
        assert_eq!(api_root("http://h:8000"), "http://h:8000/v1");
        assert_eq!(api_root("http://h:8000/"), "http://h:8000/v1");
        assert_eq!(api_root("http://h:8000/v1/"), "http://h:8000/v1");
        assert_eq!(
            api_root("https://api.example.com/openai/v1"),
            "https://api.example.com/openai/v1"
        );
    }

    #[test]
    fn credentials_never_reach_a_report() {
        assert_eq!(redact_url("http://user:secret@h:1/v1"), "http://h:1/v1");
        assert_eq!(redact_url("http://h:1/v1"), "http://h:1/v1");
    }
}
