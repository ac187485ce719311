//! The simulator's own record of when it wrote each token: the truth llmload's measurements are
//! checked against (see docs/performance.md and [`crate::selfcheck::fidelity`]).
//!
//! Off unless asked for (`llmload sim --record-writes`, or [`super::ServeOptions`]), because it
//! keeps one entry per streamed request for the life of the server. A write time is taken when
//! hyper pulls the chunk's frame from the response body to put it on the socket, which is the
//! last point the server controls before the kernel.

use std::sync::Mutex;
use std::time::Instant;

use serde::{Deserialize, Serialize};

/// One streamed request as the server saw it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequestWrites {
    /// The client's `x-request-id` header (llmload sends `llmload-<run>-<phase>-<seq>`), if any.
    pub request_id: Option<String>,
    /// The client's W3C `traceparent` header, if any: the trace an engine's spans would join.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
    /// When the request's headers had been read, in ns since the server started.
    pub received_ns: u64,
    /// When each token-bearing chunk was written, in ns after `received_ns`.
    pub token_writes_ns: Vec<u64>,
    /// `received_ns` on CLOCK_MONOTONIC, which every process on the machine shares (Linux).
    #[serde(default)]
    pub received_monotonic_ns: Option<u64>,
}

/// Every recorded request so far.
pub struct WriteLog {
    started: Instant,
    started_monotonic_ns: Option<u64>,
    requests: Mutex<Vec<RequestWrites>>,
}

impl WriteLog {
    /// An empty log, starting now.
    pub fn new() -> WriteLog {
        let started = Instant::now();
        WriteLog {
            started,
            started_monotonic_ns: crate::clock::monotonic_ns(started),
            requests: Mutex::new(Vec::new()),
        }
    }

    /// Starts recording one request that arrived at `received`.
    pub fn begin(
        &self,
        (request_id, traceparent): (Option<String>, Option<String>),
        received: Instant,
    ) -> RequestWriter {
        let received_ns = received.saturating_duration_since(self.started).as_nanos() as u64;
        RequestWriter {
            writes: RequestWrites {
                request_id,
                traceparent,
                received_ns,
                token_writes_ns: Vec::new(),
                received_monotonic_ns: self.started_monotonic_ns.map(|o| o + received_ns),
            },
            received,
        }
    }

    fn push(&self, writes: RequestWrites) {
        if let Ok(mut requests) = self.requests.lock() {
            requests.push(writes);
        }
    }

    /// How many requests are recorded so far.
    pub fn len(&self) -> usize {
        self.requests.lock().map(|r| r.len()).unwrap_or(0)
    }

    /// Whether nothing is recorded yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A copy of everything recorded, in completion order.
    pub fn snapshot(&self) -> Vec<RequestWrites> {
        self.requests.lock().map(|r| r.clone()).unwrap_or_default()
    }

    /// Everything recorded, one JSON object per line.
    pub fn to_json_lines(&self) -> String {
        let mut out = String::new();
        for writes in self.snapshot() {
            if let Ok(line) = serde_json::to_string(&writes) {
                out.push_str(&line);
                out.push('\n');
            }
        }
        out
    }
}

impl Default for WriteLog {
    fn default() -> Self {
        WriteLog::new()
    }
}

/// The write times of one request in progress; handed to the log when the stream ends (or is
/// dropped because the client went away).
pub struct RequestWriter {
    writes: RequestWrites,
    received: Instant,
}

impl RequestWriter {
    /// Notes that a token-bearing frame was written at `at`.
    pub fn token_written(&mut self, at: Instant) {
        self.writes
            .token_writes_ns
            .push(at.saturating_duration_since(self.received).as_nanos() as u64);
    }

    /// Keeps this request's writes in `log`.
    pub fn finish(self, log: &WriteLog) {
        log.push(self.writes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn write_times_are_relative_to_the_request() {
        let log = WriteLog::new();
        let received = Instant::now() + Duration::from_millis(5);
        let mut writer = log.begin((Some("llmload-0-1".into()), None), received);
        writer.token_written(received + Duration::from_micros(1500));
        writer.token_written(received + Duration::from_micros(2500));
        writer.finish(&log);
        let all = log.snapshot();
        assert_eq!(all.len(), 1);
        assert_eq!(all[0].token_writes_ns, vec![1_500_000, 2_500_000]);
        assert!(all[0].received_ns >= 5_000_000);
        let line = log.to_json_lines();
        let back: RequestWrites = serde_json::from_str(line.trim()).unwrap();
        assert_eq!(back, all[0]);
    }
}
