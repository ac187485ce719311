//! The records format: one line of `records.jsonl` per event, appended as a run goes.
//!
//! This module is the contract between the stage that writes records (the executor) and every
//! stage and tool that reads them (metrics, compare, fidelity, report, `llmload report DIR`): the
//! line types, the run header, the request ids, the reader, and the format version that the
//! reader checks. It holds data and reads it; it computes nothing and sends nothing.
//!
//! The log is self-describing, so that `llmload report DIR` can rebuild every report from it
//! alone (with the plan copied beside it): a `run` header, `phase_start` and `phase_end` for each
//! phase, one `request` line per finished request, and `run_end` unless the process was killed.
//! Times are microseconds on one monotonic clock, from the start of the run (`*_us`) or, inside a
//! request, from its actual send.

mod facts;
mod ids;
mod rate_limit;
mod read;
pub mod server_run;
mod write;

use serde::{Deserialize, Serialize};

pub use facts::{differences as fact_differences, ClientMachine, ServedModel};
pub use ids::{
    is_server_request_id_header, new_request_id_prefix, request_id_text, server_request_id,
    TraceContext, SERVER_REQUEST_ID_HEADERS,
};
pub use rate_limit::{is_rate_limit_header, Budget, RateLimit, ThrottledAttempt};
pub use read::{read_header, read_lines, LogReader, RunLog, Sampled};
pub use write::{find, Compression, RecordsWriter, PLAIN_FILE, ZSTD_FILE};

/// The records format this llmload writes. A reader refuses a newer one with a message saying
/// to upgrade; logs written before the version was recorded are format 1. Format 2 added the
/// `too_large` and `client` error classes, `usage_problem`, and `aborted` on `run_end`. Format 4
/// added the `stall` line (the client's hiccup meter). Format 5 added the `rate_limited` error
/// class and a request's `rate_limit` headers. Format 6 added the `session` line (an agent
/// session of a `sessions` phase ended).
pub const RECORDS_FORMAT: u32 = 6;
/// The oldest records format this llmload reads.
pub const OLDEST_RECORDS_FORMAT: u32 = 1;

/// One line of `records.jsonl`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum LogLine {
    /// The first line: the run's context.
    Run(RunLine),
    /// A phase began sending.
    PhaseStart(PhaseStart),
    /// A request finished (successfully or not).
    Request(RequestRecord),
    /// A phase stopped sending.
    PhaseEnd(PhaseEnd),
    /// A capacity search ended (before the run's end).
    SearchEnd(SearchEnd),
    /// The client process stalled (its hiccup meter woke late).
    Stall(Stall),
    /// An agent session of a `sessions` phase ended.
    Session(SessionEnd),
    /// The run ended; absent when the process was killed.
    RunEnd(RunEnd),
}

/// The `run` line: the records format it is written in, and the run's header.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunLine {
    /// See [`RECORDS_FORMAT`]; 1 in logs written before it was recorded.
    #[serde(default = "first_format")]
    pub records_format: u32,
    /// The run's context.
    #[serde(flatten)]
    pub header: RunHeader,
}

fn first_format() -> u32 {
    1
}

impl RunLine {
    /// A header as this llmload writes it.
    pub fn current(header: RunHeader) -> RunLine {
        RunLine {
            records_format: RECORDS_FORMAT,
            header,
        }
    }
}

/// The run's context. Holds no secret: the target URL is stored without credentials.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RunHeader {
    /// The llmload that ran it.
    pub tool_version: String,
    /// The plan's name.
    pub plan: String,
    /// The plan file as given on the command line.
    pub plan_file: String,
    /// SHA-256 of the plan's text: an edited plan is a different plan.
    pub plan_sha256: String,
    /// The seed the schedule was compiled with.
    pub seed: u64,
    /// Where requests went, without credentials.
    pub target: String,
    /// The `model` of every request.
    pub model: String,
    /// The API dialect (`chat`, `completions`).
    pub api: String,
    /// Whether answers were streamed.
    pub stream: bool,
    /// The run asked the server for exact output lengths (`ignore_eos`).
    pub exact_output: bool,
    /// The tokenizer that built prompts and counted tokens.
    pub tokenizer: String,
    /// How `tokenizer "auto"` chose it (the model's own from the local cache, or the built-in
    /// one and how to get the model's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokenizer_note: Option<String>,
    /// What the checks before the clock learned of the target that a report must say (it
    /// answers for a model its `/models` list does not name).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub target_notes: Vec<String>,
    /// The workload's prompts share text a prefix cache can hold (shared prefixes, a system
    /// message, conversations, a dataset): a cache that never hits is then worth saying.
    #[serde(default)]
    pub shares_prompts: bool,
    /// The plan turned TLS verification off (`tls-verify #false`): which server answered at
    /// the target's address is unproven, and every output says so.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub tls_unverified: bool,
    /// The HTTP version the plan asked for, when not HTTP/1.1 (`http "2"`, `"auto"`), said as
    /// reports say it: "2, up to 100 streams a connection".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http: Option<String>,
    /// The variables of the API keys requests went with in turn, when there were several (a
    /// record's `key` is its place here). Never the keys.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub keys: Vec<String>,
    /// The client paced to the limits the server's answers said (`on-throttle "pace"`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub paces_to_answers: bool,
    /// UTC, RFC 3339.
    pub started_at: String,
    /// The machine the client ran on.
    pub client_host: String,
    /// CLOCK_MONOTONIC in ns at the run's start (where the `*_us` times count from), so that a
    /// record's times can be set against another process's on the same machine (Linux).
    #[serde(default)]
    pub clock_origin_ns: Option<u64>,
    /// What the run's `x-request-id`s start with; absent in logs of earlier versions, which sent
    /// `llmload-<phase>-<seq>`.
    #[serde(default)]
    pub request_id_prefix: Option<String>,
    /// The files the plan includes, with their SHA-256 (the plan's own is `plan_sha256`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub plan_files: Vec<PlanFile>,
    /// The plan's values that came from the environment (`(env)"NAME"`): none is secret.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub env: std::collections::BTreeMap<String, String>,
    /// The plan's values set on the command line (`--set`, `--header` without its value,
    /// `--api-key-env`), as a report shows them; the kept plan holds them already.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub overrides: Vec<String>,
    /// The wall clock at the run's start (where the `*_us` times count from), in ns since the
    /// Unix epoch: merged shards are set on one time line by it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_unix_ns: Option<u64>,
    /// The part of the schedule this run sent, when it is one shard of several.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<ShardRun>,
    /// The shards this run was merged from (`llmload merge`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub merged: Vec<MergedShard>,
    /// `--label KEY=VALUE`s: what the people who read the report later need (commit, PR, GPU,
    /// engine flags).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub labels: std::collections::BTreeMap<String, String>,
    /// The measures the plan's `report { export … }` chose for `--export` (empty: all).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exports: Vec<String>,
    /// The server llmload started for the run (the plan's `server` block), if it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<Box<LaunchedServer>>,
    /// What the deployment under test costs (the plan's `cost` block): kept with the records,
    /// so that a report made again later prices the run as it was priced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<CostRate>,
    /// Each GPU type's price an hour, when the plan prices the deployment by the GPUs its
    /// telemetry describes (`cost { gpu-hour "$2.49" gpu="H100" }`) rather than at one price.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpu_prices: Vec<GpuTypePrice>,
    /// The machine the client ran on; absent in logs of earlier versions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_machine: Option<ClientMachine>,
    /// What the servers said of the models they serve, one per server and model checked
    /// before the run (their `/models`), when they said more than the id.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub served_models: Vec<ServedModel>,
}

/// What a deployment costs an hour, and what the price is made of.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CostRate {
    /// Dollars an hour, the whole deployment.
    pub dollars_per_hour: f64,
    /// How the plan put it: "8 GPUs at $2.49 a GPU-hour", "$98.32 an instance-hour".
    pub basis: String,
    /// One GPU's price an hour, when the plan priced the deployment by its GPUs (a server
    /// sweep prices each configuration by its own count of them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_gpu_hour: Option<f64>,
}

/// One GPU type's price an hour (`gpu-hour "$2.49" gpu="H100"`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuTypePrice {
    /// What its model's name holds (`H100`), matched without regard to case.
    pub model: String,
    /// Dollars an hour, one GPU.
    pub dollars_per_hour: f64,
}

/// The server a run started itself: what `compare` holds two runs' servers apart by.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LaunchedServer {
    /// Its program's name (`llama-server`).
    pub program: String,
    /// Its command line as the plan writes it (`{port}` left as is: two runs compare by it),
    /// secrets masked.
    pub command: String,
    /// What it says it is (its build, its model), when it says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
}

/// A run that is one shard of several (`--shard K/N`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ShardRun {
    /// From 1 to `count`.
    pub index: u32,
    /// How many shards the plan was split into.
    pub count: u32,
    /// The agreed start (`--start-at`), RFC 3339.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_at: Option<String>,
    /// How late after the agreed start this shard started its schedule, by its own clock (ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_late_ms: Option<f64>,
}

/// One shard of a merged run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MergedShard {
    /// From 1 to the shard count.
    pub index: u32,
    /// The machine it ran on.
    pub client_host: String,
    /// When it started (RFC 3339).
    pub started_at: String,
    /// How far after the earliest shard's start it started, by the shards' wall clocks (ms).
    pub offset_ms: f64,
    /// How late after the agreed start it started (with `--start-at`), by its own clock (ms).
    pub start_late_ms: Option<f64>,
    /// Requests it recorded.
    pub requests: u64,
    /// Whether it was interrupted.
    pub interrupted: bool,
}

/// A file a plan was built from.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanFile {
    /// Its path relative to the plan's directory.
    pub path: String,
    /// SHA-256 of its text.
    pub sha256: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
/// The `phase_start` line: a phase began sending.
pub struct PhaseStart {
    /// The phase's position in the schedule, from 0.
    pub index: usize,
    /// Its name.
    pub name: String,
    /// Whether it counts in metrics and verdicts (`record #false` is a warmup).
    pub record: bool,
    /// Its load model, as people read it (`rate 16/s poisson`).
    pub load: String,
    /// Open loop or burst: requests have intended send times, and schedule lag is meaningful.
    pub open_loop: bool,
    /// The mean request rate asked for (open loop).
    pub planned_rate: Option<f64>,
    /// Requests planned, when known before it runs.
    pub planned_requests: Option<u64>,
    /// Its planned duration in seconds.
    pub planned_duration_s: Option<f64>,
    /// When it started, µs from the run's start.
    pub at_us: u64,
    /// The group of phases it ran with (phases of a group overlap); its own index before
    /// format 3.
    #[serde(default)]
    pub group: Option<usize>,
    /// The step of a sweep, or the probe of a search, it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<StepInfo>,
    /// The API it spoke, when it is not the run's (`api` in the phase).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api: Option<String>,
    /// The model it asked for, when it is not the run's (`model` in the phase).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The server's caches reset before it (`reset-cache`): how, or why not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_reset: Option<CacheReset>,
    /// It replays agent sessions: its requests are their calls, and `session` lines follow.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub sessions: bool,
}

/// A cache reset before a phase: done (how) or not (why).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CacheReset {
    /// Whether the server's caches were reset.
    pub done: bool,
    /// How (`POST /reset_prefix_cache (vLLM)`), or why not (the server's refusal).
    pub detail: String,
}

/// What a load is counted in: a sweep's or a search's axis.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LoadUnit {
    /// Requests per second (an open loop).
    RequestsPerSecond,
    /// Concurrent requests (a closed loop's users).
    Concurrency,
    /// Concurrent agent sessions (a `sessions` load's slots).
    Sessions,
}

impl LoadUnit {
    /// The unit as reports write it.
    pub fn symbol(self) -> &'static str {
        match self {
            LoadUnit::RequestsPerSecond => "req/s",
            LoadUnit::Concurrency => "concurrent",
            LoadUnit::Sessions => "sessions",
        }
    }
}

/// A step of a sweep, or a probe of a search, as the schedule and the records hold it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepInfo {
    /// The sweep's or the search's name.
    pub series: String,
    /// Its load, in `unit`.
    pub load_value: f64,
    /// Requests per second, or concurrent requests.
    pub unit: LoadUnit,
    /// The unrecorded warmup before a step (or probe).
    pub warmup: bool,
    /// A probe of a search (rather than a step of a sweep).
    #[serde(default)]
    pub probe: bool,
}

/// Why a capacity search stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stopped {
    /// The bracket is within the precision asked.
    Precise,
    /// Even the lowest load of the range failed.
    BelowRange,
    /// The highest load of the range passed.
    AboveRange,
    /// The probes ran out (`max-probes`).
    ProbeBudget,
    /// The time ran out (`max-duration`).
    TimeBudget,
    /// The run was interrupted or aborted.
    Interrupted,
    /// The client could not send a probe's load on time, twice in a row: beyond, the limit
    /// measured would be the client's. The run is not carried out.
    ClientLimited,
}

impl Stopped {
    /// Why, as reports say it.
    pub fn describe(self) -> &'static str {
        match self {
            Stopped::Precise => "the bracket is within the precision asked",
            Stopped::BelowRange => "even the lowest load of the range failed",
            Stopped::AboveRange => "the highest load of the range passed",
            Stopped::ProbeBudget => "its probes ran out (max-probes) before the precision asked",
            Stopped::TimeBudget => "its time ran out (max-duration) before the precision asked",
            Stopped::Interrupted => "the run was stopped before the search finished",
            Stopped::ClientLimited => {
                "the client could not send a probe's load on time, twice in a row (schedule lag or \
                 its CPU beyond the limits): beyond, the limit would be the client's, not the server's"
            }
        }
    }
}

/// A hiccup-meter wake-up this late is a stall worth a `stall` line: a scheduler's ordinary
/// jitter on a loaded 2-core runner stays below it (measured in docs/reliability.md). The
/// executor writes by it; every message about stalls names it.
pub const STALL_RECORDED: std::time::Duration = std::time::Duration::from_millis(5);

/// The `stall` line: the client process stalled, as its hiccup meter saw (a thread that sleeps
/// a 5 ms tick woke this late): whatever was in flight then waited on the client.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Stall {
    /// When the meter should have woken, µs from the run's start.
    pub at_us: u64,
    /// How late it woke, ms.
    pub ms: f64,
    /// The shard whose client stalled, in a merged run (its requests alone waited on it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<u32>,
}

/// The `session` line: an agent session of a `sessions` phase ended (its calls' requests are
/// `request` lines with its number as their `conversation`). What only the client knows of it:
/// when it ran, how many of its calls were sent and answered, and how long they waited for
/// their time (tool runs, think times).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionEnd {
    /// Its phase's index.
    pub phase: usize,
    /// Its number in the phase (its requests' `conversation`).
    pub session: u64,
    /// Its id in the session file.
    pub id: String,
    /// When it started, µs from the run's start.
    pub start_us: u64,
    /// When its last call ended, µs from the run's start.
    pub end_us: u64,
    /// Calls it was to make (from its start-window point on).
    pub calls: u32,
    /// Calls sent: fewer when a call failed (its dependants are not sent) or the phase ended.
    pub sent: u32,
    /// Calls answered successfully.
    pub answered: u32,
    /// The waits its calls waited before they were sent, summed, ms.
    pub waited_ms: f64,
    /// The shard that ran it, in a merged run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<u32>,
}

impl SessionEnd {
    /// Whether it ran its course: every call sent, or a call failed (which ends it); a session
    /// the phase's end cut short tells nothing about the server.
    pub fn judged(&self) -> bool {
        self.calls > 0 && (self.sent == self.calls || self.answered < self.sent)
    }

    /// Whether every call it was to make was answered.
    pub fn completed(&self) -> bool {
        self.answered == self.calls
    }
}

impl Stall {
    /// When it ended, µs from the run's start.
    pub fn end_us(&self) -> u64 {
        self.at_us + (self.ms * 1e3) as u64
    }
}

/// What the hiccup meter measured over a phase.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Hiccups {
    /// Its readings (a 5 ms tick each, plus its lateness).
    pub ticks: u64,
    /// Their 99th percentile lateness, ms.
    pub p99_ms: f64,
    /// The latest wake-up, ms.
    pub max_ms: f64,
    /// Wake-ups 5 ms or more late.
    pub stalls: u64,
}

/// The `search_end` line: a capacity search stopped probing.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SearchEnd {
    /// The search's name.
    pub name: String,
    /// Why it stopped.
    pub stopped: Stopped,
    /// When, µs from the run's start.
    pub at_us: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
/// The `phase_end` line: a phase stopped sending.
pub struct PhaseEnd {
    /// The phase's index.
    pub index: usize,
    /// When the phase stopped sending (its in-flight requests may finish later).
    pub at_us: u64,
    /// Requests it sent.
    pub sent: u64,
    /// How busy the client process was from the phase's start to here.
    #[serde(default)]
    pub client: Option<ClientLoad>,
    /// Why it was ended before its planned end (a probe that had already failed), if it was;
    /// its requests still in flight were cancelled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_early: Option<String>,
    /// The connections opened before it started and while it ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connections: Option<Connections>,
    /// How long a closed loop's users waited for their next request's body (absent for open
    /// loops, whose waits show as schedule lag).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body_wait: Option<BodyWait>,
    /// What the hiccup meter measured while the phase sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hiccups: Option<Hiccups>,
}

/// A closed loop's users waiting for bodies: time the client, not the server, held them idle
/// (the body builder making images, say, slower than the users sent).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct BodyWait {
    /// Seconds users spent waiting for a body, summed over users.
    pub waited_s: f64,
    /// Seconds users were in the phase, summed over users (users × sending time).
    pub users_s: f64,
}

impl BodyWait {
    /// The share of the users' time spent waiting for bodies.
    pub fn share(&self) -> f64 {
        if self.users_s > 0.0 {
            self.waited_s / self.users_s
        } else {
            0.0
        }
    }
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// A phase's connections: opened before its clock started, and while it ran.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Connections {
    /// Connections opened (or found idle) and checked before the phase's clock started.
    pub warmed: u64,
    /// Connections opened while it ran (by its requests, or by phases running beside it).
    pub opened: u64,
    /// Connection attempts that failed while it ran.
    pub failed: u64,
    /// Median time to open one of them (TCP and TLS), ms.
    pub connect_ms_p50: Option<f64>,
    /// The longest, ms.
    pub connect_ms_max: Option<f64>,
    /// Median TLS handshake of them (a share of their connect time), ms; absent over plain
    /// TCP, and where the transport does not time it apart (through a proxy).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_ms_p50: Option<f64>,
    /// Connections dropped because the server sent bytes no request asked for (a late or
    /// second response, a 408 on an idle connection): a request may have taken such bytes
    /// for its answer before they could be told apart.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub stray: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
/// The `run_end` line.
pub struct RunEnd {
    /// When the run ended, µs from its start.
    pub at_us: u64,
    /// Whether it was stopped early from outside (and so is no basis for a verdict).
    pub interrupted: bool,
    /// Why the plan's `abort` conditions stopped it early, if they did (a failed run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aborted: Option<String>,
    /// The client process's peak resident memory over the whole run.
    #[serde(default)]
    pub client_peak_rss_bytes: Option<u64>,
    /// Requests that waited for room in the recorder's queue (it fell behind), if any did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recorder_backlog: Option<RecorderBacklog>,
    /// Why the target was refused, before the clock started or at its first answer (it did
    /// not answer, refused the key, does not serve the model or the API's route; the
    /// key, or does not serve the model): nothing was sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
}

/// How requests waited for room in the recorder's queue: their records were not written as
/// fast as they finished, and the load was held back meanwhile.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RecorderBacklog {
    /// Requests that waited.
    pub requests: u64,
    /// The longest wait, ms.
    pub longest_ms: f64,
    /// All their waits, ms.
    pub total_ms: f64,
    /// The queue's size, MiB of answers.
    #[serde(default)]
    pub queue_mib: u64,
}

/// How a request failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorClass {
    /// No connection could be made.
    Connect,
    /// The per-request timeout ran out.
    Timeout,
    #[serde(rename = "http_4xx")]
    /// An HTTP 4xx other than 429.
    Http4xx,
    #[serde(rename = "http_429")]
    /// HTTP 429 (rate limited).
    Http429,
    #[serde(rename = "http_5xx")]
    /// An HTTP 5xx.
    Http5xx,
    #[serde(rename = "http_other")]
    /// An HTTP status that is neither success nor an error: a redirect (llmload follows none:
    /// the target should be where it leads), or an informational or unknown status.
    HttpOther,
    /// The connection or stream ended before the response was complete.
    StreamBroken,
    /// The server sent an error event inside an otherwise successful stream.
    StreamError,
    /// The server said it is overloaded: HTTP 529, or Anthropic's `overloaded_error` (in a
    /// stream or a body). Apart from `http_5xx` because it means "out of room", not "broken".
    Overloaded,
    /// The server said the client is over its rate limit in an error object rather than a
    /// status (Anthropic's `rate_limit_error`, in a stream or a 200's body).
    RateLimited,
    /// The response could not be understood (invalid JSON, no choices).
    Malformed,
    /// A line or a body larger than the run allows (`max-line`, `max-body`).
    TooLarge,
    /// The client itself failed (out of file descriptors or ports, or an internal error): the
    /// client's failure, not the server's.
    Client,
    /// Still in flight when the run was interrupted and its grace period ran out.
    Cancelled,
}

impl ErrorClass {
    /// The class's name in records and reports.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorClass::Connect => "connect",
            ErrorClass::Timeout => "timeout",
            ErrorClass::Http4xx => "http_4xx",
            ErrorClass::Http429 => "http_429",
            ErrorClass::Http5xx => "http_5xx",
            ErrorClass::HttpOther => "http_other",
            ErrorClass::StreamBroken => "stream_broken",
            ErrorClass::StreamError => "stream_error",
            ErrorClass::Overloaded => "overloaded",
            ErrorClass::RateLimited => "rate_limited",
            ErrorClass::Malformed => "malformed",
            ErrorClass::TooLarge => "too_large",
            ErrorClass::Client => "client",
            ErrorClass::Cancelled => "cancelled",
        }
    }
}

impl ErrorClass {
    /// Whether the server turned the request away to protect itself or its limits (HTTP 429,
    /// 529, a rate-limit or overloaded error object) rather than failed it: *throttled*,
    /// counted apart from the failed in every output, as missed in goodput.
    pub fn throttled(self) -> bool {
        match self {
            ErrorClass::Http429 | ErrorClass::Overloaded | ErrorClass::RateLimited => true,
            ErrorClass::Connect
            | ErrorClass::Timeout
            | ErrorClass::Http4xx
            | ErrorClass::Http5xx
            | ErrorClass::HttpOther
            | ErrorClass::StreamBroken
            | ErrorClass::StreamError
            | ErrorClass::Malformed
            | ErrorClass::TooLarge
            | ErrorClass::Client
            | ErrorClass::Cancelled => false,
        }
    }
}

/// Where a token count came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TokenSource {
    /// The server's `usage`.
    Usage,
    /// Counted by llmload with the plan's tokenizer.
    Tokenizer,
    /// Every chunk carried exactly one token: the usage total equals the number of chunks.
    OnePerChunk,
    /// The server's usage total, spread over the chunks by the plan's tokenizer's counts of
    /// each (at least one per chunk), so the chunks add up to the server's count.
    UsageByTokenizer,
    /// Estimated: an answer too long to tokenize whole (over 1 MiB) had its first MiB counted
    /// and the rest estimated in proportion, its chunks weighed by their bytes; or a record
    /// written uncounted after a second Ctrl-C (4 bytes a token).
    Estimated,
}

/// What a conversation's turn answers: the user's new message, or the results of the tools the
/// answer before it called (an agent loop's).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TurnKind {
    /// It sends the user's next message (a conversation's first turn is one).
    User,
    /// It sends the results of the tools the answer before it called.
    Tool,
}

impl TurnKind {
    /// The name reports and records use.
    pub fn as_str(self) -> &'static str {
        match self {
            TurnKind::User => "user",
            TurnKind::Tool => "tool",
        }
    }
}

/// Bodies of this size or more keep their upload time (`upload_us`): a text prompt's few
/// kilobytes go out in one write, in microseconds, while an image's hundreds of kilobytes
/// can take a visible share of TTFT.
pub const UPLOAD_RECORDED_BYTES: u64 = 64 * 1024;

/// The longest a run's records may reach from its start: a year (a plan's phases are each at
/// most 30 days). A time beyond it is a crafted or corrupted line.
pub const MAX_RUN_MICROS: u64 = 366 * 86_400_000_000;

/// What the generated tokens of a chunk are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChunkKind {
    /// A reasoning model's thinking (`reasoning_content`, `reasoning`).
    Reasoning,
    /// The answer itself (a chunk with any answer text is one).
    Answer,
    /// A tool call's name or argument fragments.
    ToolCall,
}

impl ChunkKind {
    /// The kind of each of `chunks` chunks from their runs (`[(kind, how many)]`); chunks
    /// past the runs are answer (runs are kept only from the first chunk that is not).
    pub fn each(runs: &[(ChunkKind, u32)], chunks: usize) -> impl Iterator<Item = ChunkKind> + '_ {
        let listed: usize = runs.iter().map(|&(_, n)| n as usize).sum();
        runs.iter()
            .flat_map(|&(kind, n)| std::iter::repeat_n(kind, n as usize))
            .chain(std::iter::repeat_n(
                ChunkKind::Answer,
                chunks.saturating_sub(listed),
            ))
            .take(chunks)
    }

    /// Whether it is output proper (answer text or a tool call), not thinking.
    pub fn is_output(self) -> bool {
        self != ChunkKind::Reasoning
    }
}

/// One finished request (successful or not).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RequestRecord {
    /// The phase's index.
    pub phase: usize,
    /// The shard that sent it, in a merged run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<u32>,
    /// The request's position in its phase, from 0.
    pub seq: u64,
    /// Its turn in its conversation (from 1), in a multi-turn workload.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn: Option<u32>,
    /// The conversation it belongs to (its position among the phase's conversations).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversation: Option<u64>,
    /// What its turn answers (a user's message, or tool results), in a conversation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn_kind: Option<TurnKind>,
    /// When it was meant to go out (µs from the run's start); its actual send in a closed loop.
    pub intended_send_us: u64,
    /// When it went out (µs from the run's start).
    pub actual_send_us: u64,
    /// Prompt tokens the plan asked for.
    pub input_tokens_planned: u32,
    /// Output tokens the plan asked for.
    pub output_tokens_planned: u32,
    /// The seed its prompt was built from.
    pub prompt_seed: u64,
    /// How it failed; `None` when it succeeded.
    pub error: Option<ErrorClass>,
    /// What went wrong, in a sentence (never a header or a credential).
    pub error_detail: Option<String>,
    /// The response's HTTP status, if one came.
    pub http_status: Option<u16>,
    /// Send → first chunk carrying a generated token (streaming only).
    pub ttft_us: Option<u64>,
    /// Send → end of the response.
    pub e2e_us: Option<u64>,
    /// Every token-bearing chunk: [arrival µs after send, tokens in it].
    pub chunks: Vec<(u64, u32)>,
    /// Where `chunks`' token counts came from.
    pub chunk_tokens: Option<TokenSource>,
    /// Prompt tokens: the server's count, else the planned length.
    pub prompt_tokens: Option<u64>,
    /// Output tokens: the server's usage, else counted.
    pub completion_tokens: Option<u64>,
    /// Where `completion_tokens` came from.
    pub token_source: Option<TokenSource>,
    /// The completion counted by the plan's tokenizer, to compare with the server's usage.
    pub completion_tokens_tokenizer: Option<u64>,
    /// Prompt tokens the server served from its prefix cache.
    pub cached_tokens: Option<u64>,
    /// The answer's finish_reason.
    pub finish_reason: Option<String>,
    /// The model the answer said it came from (its `model` field), when it succeeded and
    /// named one: a gateway or an alias may answer with another model than the plan asks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Times the request was re-sent because the server closed a pooled keep-alive connection
    /// before answering; its send time is the last re-send's.
    #[serde(default)]
    pub connection_retries: u32,
    /// How long opening a new connection for this request took (resolving the name, TCP's
    /// handshake, TLS's over HTTPS), µs, within its TTFT; absent when it reused an open
    /// connection.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connect_us: Option<u64>,
    /// Of `connect_us`, the TLS handshake, µs; absent over plain TCP and where the transport
    /// does not time it apart (through a proxy).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_us: Option<u64>,
    /// Of `connect_us`, resolving the host's name, µs; absent for an IP address and where
    /// not timed apart.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dns_us: Option<u64>,
    /// The W3C trace id it was sent with (its `traceparent`), 32 hex digits: the spans an
    /// engine exports for it carry the same. Absent in logs of earlier versions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
    /// What its response's headers said of the server's rate limits (a wait asked for, each
    /// budget's limit, remainder and reset); absent when they said nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_limit: Option<RateLimit>,
    /// The server's own id of the request, from its response's `x-request-id`, `request-id`
    /// (Anthropic) or `apim-request-id` (Azure): what its logs and support know it by.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_request_id: Option<String>,
    /// How long the key's budgets (`target { limits }`) held it before its send, µs: its
    /// intended send time is then its slot, so its schedule lag is the client's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paced_us: Option<u64>,
    /// Which of the run's API keys it went with (its place in the run line's `keys`), when the
    /// run had several.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<u32>,
    /// The attempts the server throttled before this one, when the plan retries them
    /// (`on-throttle "retry"`); its send time is then the first attempt's, and its TTFT, E2E and
    /// chunk times count from it, the waits included, as the application that retries sees
    /// them. Absent when it went through at its first attempt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub throttled_attempts: Option<Vec<ThrottledAttempt>>,
    /// How long its body took to go out, µs: from the send (after a new connection's opening)
    /// to its last byte taken by the socket, within its TTFT. Kept for bodies of
    /// [`UPLOAD_RECORDED_BYTES`] or more (images, audio), by the direct HTTP/1.1 transport.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upload_us: Option<u64>,
    /// Of its images sent as URLs (`image-urls`; its own, not a dataset's files), how many the
    /// server fetched before the request ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub images_fetched: Option<u32>,
    /// Why the server's usage was not believed (a negative count, more tokens than the answer
    /// could hold): the counts then come from the tokenizer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage_problem: Option<String>,
    /// What the chunks were, in runs (`[["reasoning", 10], ["answer", 12]]`: the first 10 chunks
    /// reasoning, the next 12 answer); absent when every chunk was answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chunk_kinds: Option<Vec<(ChunkKind, u32)>>,
    /// Of the output tokens, those spent reasoning; absent when the request did not reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_tokens: Option<u64>,
    /// Where `reasoning_tokens` came from: the server's usage
    /// (`completion_tokens_details.reasoning_tokens`), or the reasoning chunks' counts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_token_source: Option<TokenSource>,
    /// How many tool calls the answer made; absent when it made none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<u32>,
    /// The inputs it carried (embeddings), or documents (rerank); absent for an API that
    /// generates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inputs: Option<u32>,
    /// Whether the answer is what the plan's `response-format` asks (JSON, valid under its
    /// schema); absent when it asks nothing, or the request failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer_valid: Option<bool>,
    /// The images it carried, each `[width, height]` in pixels; absent when it carried none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub images: Option<Vec<[u32; 2]>>,
    /// The audio it carried, in milliseconds; absent when it carried none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audio_ms: Option<u32>,
    /// Bytes of its request body, for a request that carried media (their upload is part of
    /// its TTFT); absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_bytes: Option<u64>,
}

impl RequestRecord {
    /// It carried images or audio.
    pub fn carries_media(&self) -> bool {
        self.images.is_some() || self.audio_ms.is_some()
    }
}

impl RequestRecord {
    /// The record of a request before anything of its answer is known: its phase, its place
    /// and plan (sequence number, turn, conversation, lengths, prompt seed) and its send times;
    /// every measured field empty, for the caller to fill.
    #[allow(clippy::too_many_arguments)]
    pub fn planned(
        phase: usize,
        seq: u64,
        turn: Option<u32>,
        conversation: Option<u64>,
        (input_tokens_planned, output_tokens_planned): (u32, u32),
        prompt_seed: u64,
        intended_send_us: u64,
        actual_send_us: u64,
    ) -> RequestRecord {
        RequestRecord {
            phase,
            seq,
            turn,
            conversation,
            input_tokens_planned,
            output_tokens_planned,
            prompt_seed,
            intended_send_us,
            actual_send_us,
            ..RequestRecord::default()
        }
    }

    /// Each chunk's kind, in order (every chunk an answer when the request did not reason).
    pub fn chunk_kind_iter(&self) -> impl Iterator<Item = ChunkKind> + '_ {
        ChunkKind::each(
            self.chunk_kinds.as_deref().unwrap_or(&[]),
            self.chunks.len(),
        )
    }

    /// Whether it succeeded.
    pub fn ok(&self) -> bool {
        self.error.is_none()
    }

    /// Whether it counts as completed: it succeeded or the server failed it. A request the run
    /// cancelled (its phase ended) or the client failed to send says nothing of the server, so
    /// no rate, objective or abort counts it.
    pub fn completed(&self) -> bool {
        !matches!(self.error, Some(ErrorClass::Cancelled | ErrorClass::Client))
    }

    /// When the response ended, from the start of the run.
    pub fn end_us(&self) -> Option<u64> {
        self.e2e_us
            .map(|e2e| self.actual_send_us.saturating_add(e2e))
    }

    /// Why its times cannot be a run's (a crafted or corrupted line), if they cannot: every
    /// time is within [`MAX_RUN_MICROS`] of the run's start.
    pub fn impossible_times(&self) -> Option<String> {
        let times = [
            ("intended_send_us", Some(self.intended_send_us)),
            ("actual_send_us", Some(self.actual_send_us)),
            ("ttft_us", self.ttft_us),
            ("e2e_us", self.e2e_us),
            ("end", self.end_us()),
        ];
        let chunks = self
            .chunks
            .iter()
            .map(|&(at, _)| ("a chunk's time", Some(at)));
        times
            .into_iter()
            .chain(chunks)
            .find(|(_, at)| at.is_some_and(|at| at > MAX_RUN_MICROS))
            .map(|(name, at)| {
                format!(
                    "{name} is {} µs: beyond any run's length ({} days)",
                    at.unwrap_or(0),
                    MAX_RUN_MICROS / 86_400_000_000
                )
            })
    }
}

/// How much of the machine the client had and used during one phase.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ClientLoad {
    /// Cores the client could use: the runtime's worker threads, at most the cores available.
    pub cores: f64,
    /// CPU seconds the client process used during the phase.
    pub cpu_s: f64,
    /// `cpu_s` over the phase's wall time and `cores`: 1.0 is every core busy all the time.
    pub utilization: f64,
    /// Whole seconds of the phase.
    pub seconds: u32,
    /// Of those, the seconds in which the client used at least 95% of its cores.
    pub saturated_seconds: u32,
    /// The whole machine's CPUs over the same time (Linux): a server on the same machine, or
    /// anything else, takes the cores the client then waits for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine: Option<MachineLoad>,
}

/// How busy the whole machine was over a phase, every process together.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct MachineLoad {
    /// The CPUs the machine lists.
    pub cores: f64,
    /// Core-seconds they were busy.
    pub busy_s: f64,
    /// `busy_s` over the phase's wall time and `cores`.
    pub utilization: f64,
    /// Whole seconds of the phase.
    pub seconds: u32,
    /// Of those, the seconds in which the machine had at least 95% of its cores busy.
    pub saturated_seconds: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_classes_have_their_documented_names() {
        use ErrorClass::*;
        for class in [
            Connect,
            Timeout,
            Http4xx,
            Http429,
            Http5xx,
            StreamBroken,
            StreamError,
            Malformed,
            TooLarge,
            Client,
            Cancelled,
        ] {
            assert_eq!(serde_json::to_value(class).unwrap(), class.as_str());
        }
    }
}
