//! What the executor records: one line of `records.jsonl` per event, appended as it happens.
//!
//! The log is self-describing, so that `llmload report DIR` can rebuild every report from it
//! alone (with the plan copied beside it): a `run` header, `phase_start` and `phase_end` for each
//! phase, one `request` line per finished request, and `run_end` unless the process was killed.
//! Times are microseconds on one monotonic clock, from the start of the run (`*_us`) or, inside a
//! request, from its actual send.

use std::io::BufRead;
use std::path::Path;

use serde::{Deserialize, Serialize};

pub use super::resources::ClientLoad;

/// One line of `records.jsonl`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum LogLine {
    Run(RunHeader),
    PhaseStart(PhaseStart),
    Request(RequestRecord),
    PhaseEnd(PhaseEnd),
    RunEnd(RunEnd),
}

/// The run's context. Holds no secret: the target URL is stored without credentials.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RunHeader {
    pub tool_version: String,
    pub plan: String,
    pub plan_file: String,
    pub plan_sha256: String,
    pub seed: u64,
    pub target: String,
    pub model: String,
    pub api: String,
    pub stream: bool,
    /// The run asked the server for exact output lengths (`ignore_eos`).
    pub exact_output: bool,
    pub tokenizer: String,
    /// UTC, RFC 3339.
    pub started_at: String,
    pub client_host: String,
    /// CLOCK_MONOTONIC in ns at the run's start (where the `*_us` times count from), so that a
    /// record's times can be set against another process's on the same machine (Linux).
    #[serde(default)]
    pub clock_origin_ns: Option<u64>,
    /// What the run's `x-request-id`s start with; absent in logs of earlier versions, which sent
    /// `llmload-<phase>-<seq>`.
    #[serde(default)]
    pub request_id_prefix: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PhaseStart {
    pub index: usize,
    pub name: String,
    pub record: bool,
    pub load: String,
    /// Open loop or burst: requests have intended send times, and schedule lag is meaningful.
    pub open_loop: bool,
    pub planned_rate: Option<f64>,
    pub planned_requests: Option<u64>,
    pub planned_duration_s: Option<f64>,
    pub at_us: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PhaseEnd {
    pub index: usize,
    /// When the phase stopped sending (its in-flight requests may finish later).
    pub at_us: u64,
    pub sent: u64,
    /// How busy the client process was from the phase's start to here.
    #[serde(default)]
    pub client: Option<ClientLoad>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunEnd {
    pub at_us: u64,
    pub interrupted: bool,
    /// The client process's peak resident memory over the whole run.
    #[serde(default)]
    pub client_peak_rss_bytes: Option<u64>,
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
    Http4xx,
    #[serde(rename = "http_429")]
    Http429,
    #[serde(rename = "http_5xx")]
    Http5xx,
    /// The connection or stream ended before the response was complete.
    StreamBroken,
    /// The server sent an error event inside an otherwise successful stream.
    StreamError,
    /// The response could not be understood (invalid JSON, no choices).
    Malformed,
    /// Still in flight when the run was interrupted and its grace period ran out.
    Cancelled,
}

impl ErrorClass {
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorClass::Connect => "connect",
            ErrorClass::Timeout => "timeout",
            ErrorClass::Http4xx => "http_4xx",
            ErrorClass::Http429 => "http_429",
            ErrorClass::Http5xx => "http_5xx",
            ErrorClass::StreamBroken => "stream_broken",
            ErrorClass::StreamError => "stream_error",
            ErrorClass::Malformed => "malformed",
            ErrorClass::Cancelled => "cancelled",
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
}

/// One finished request (successful or not).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequestRecord {
    pub phase: usize,
    pub seq: u64,
    pub intended_send_us: u64,
    pub actual_send_us: u64,
    pub input_tokens_planned: u32,
    pub output_tokens_planned: u32,
    pub prompt_seed: u64,
    pub error: Option<ErrorClass>,
    /// What went wrong, in a sentence (never a header or a credential).
    pub error_detail: Option<String>,
    pub http_status: Option<u16>,
    /// Send → first chunk carrying a generated token (streaming only).
    pub ttft_us: Option<u64>,
    /// Send → end of the response.
    pub e2e_us: Option<u64>,
    /// Every token-bearing chunk: [arrival µs after send, tokens in it].
    pub chunks: Vec<(u64, u32)>,
    pub chunk_tokens: Option<TokenSource>,
    pub prompt_tokens: Option<u64>,
    pub completion_tokens: Option<u64>,
    pub token_source: Option<TokenSource>,
    /// The completion counted by the plan's tokenizer, to compare with the server's usage.
    pub completion_tokens_tokenizer: Option<u64>,
    pub cached_tokens: Option<u64>,
    pub finish_reason: Option<String>,
    /// Times the request was re-sent because the server closed a pooled keep-alive connection
    /// before answering; its send time is the last re-send's.
    #[serde(default)]
    pub connection_retries: u32,
}

impl RequestRecord {
    pub fn ok(&self) -> bool {
        self.error.is_none()
    }

    /// When the response ended, from the start of the run.
    pub fn end_us(&self) -> Option<u64> {
        self.e2e_us.map(|e2e| self.actual_send_us + e2e)
    }
}

/// Reads `records.jsonl` one line at a time, handing each to `on_line`. A torn last line (the
/// process was killed mid-write) is skipped; any other bad line is an error naming its number.
pub fn read_lines(path: &Path, mut on_line: impl FnMut(LogLine)) -> Result<(), String> {
    let file =
        std::fs::File::open(path).map_err(|e| format!("cannot open {}: {e}", path.display()))?;
    let mut reader = std::io::BufReader::with_capacity(1 << 16, file);
    let mut line = String::new();
    let mut number = 0usize;
    // A line that did not parse is an error only if another line follows it.
    let mut unparsed: Option<(usize, serde_json::Error)> = None;
    loop {
        line.clear();
        let read = reader
            .read_line(&mut line)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        if read == 0 {
            return Ok(());
        }
        number += 1;
        if line.trim().is_empty() {
            continue;
        }
        if let Some((bad, err)) = unparsed.take() {
            return Err(format!("{} line {bad}: {err}", path.display()));
        }
        match serde_json::from_str::<LogLine>(&line) {
            Ok(parsed) => on_line(parsed),
            Err(err) => unparsed = Some((number, err)),
        }
    }
}

/// A whole run read back from `records.jsonl`.
#[derive(Debug, Clone, Default)]
pub struct RunLog {
    pub header: Option<RunHeader>,
    pub phases: Vec<PhaseStart>,
    pub phase_ends: Vec<PhaseEnd>,
    pub records: Vec<RequestRecord>,
    pub end: Option<RunEnd>,
}

impl RunLog {
    pub fn push(&mut self, line: LogLine) {
        match line {
            LogLine::Run(header) => self.header = Some(header),
            LogLine::PhaseStart(phase) => self.phases.push(phase),
            LogLine::Request(record) => self.records.push(record),
            LogLine::PhaseEnd(end) => self.phase_ends.push(end),
            LogLine::RunEnd(end) => self.end = Some(end),
        }
    }

    /// Reads the whole of `records.jsonl` into memory. To aggregate a run, prefer
    /// [`crate::metrics::compute_file`], which streams it.
    pub fn read(path: &Path) -> Result<RunLog, String> {
        let mut log = RunLog::default();
        read_lines(path, |line| log.push(line))?;
        RunLog::check_header(&log, path)?;
        Ok(log)
    }

    /// An error unless the log (read from `path`) starts with a run header.
    pub fn check_header(log: &RunLog, path: &Path) -> Result<(), String> {
        if log.header.is_none() {
            return Err(format!(
                "{} has no run header: is it an llmload records file?",
                path.display()
            ));
        }
        Ok(())
    }

    pub fn interrupted(&self) -> bool {
        self.end.as_ref().is_none_or(|e| e.interrupted)
    }
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
            Cancelled,
        ] {
            assert_eq!(serde_json::to_value(class).unwrap(), class.as_str());
        }
    }
}
