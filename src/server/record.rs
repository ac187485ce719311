//! `server.json`: what happened to the server llmload started — its command line, how long it
//! took to be ready, how it ended, the CPU and memory it used, its log's last lines. Read back
//! by `llmload report DIR` like the records.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// The file in the run directory.
pub const SERVER_JSON: &str = "server.json";
/// The server's output, in the run directory.
pub const SERVER_LOG: &str = "server.log";
/// The largest `server.json` read back (its tail lines are bounded).
const MAX_BYTES: u64 = 1 << 20;

/// The server llmload started for a run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ServerRun {
    /// Its program's name (`llama-server`).
    pub program: String,
    /// Its command line, placeholders filled, secrets masked.
    pub command: String,
    /// The port it listened on.
    pub port: u16,
    /// Its process id (the leader of its process group).
    #[serde(default)]
    pub pid: Option<u32>,
    /// What it says it is (its version and model), when it says.
    #[serde(default)]
    pub version: Option<String>,
    /// Seconds from its start until its readiness path answered.
    #[serde(default)]
    pub ready_seconds: Option<f64>,
    /// Why it could not serve the run (it did not start, or was not ready in time).
    #[serde(default)]
    pub failed: Option<String>,
    /// How it ended, if it exited on its own while the run went (the run is then not carried
    /// out).
    #[serde(default)]
    pub died: Option<String>,
    /// How it ended: stopped with SIGTERM, killed after the grace, or exited before.
    #[serde(default)]
    pub exit: Option<String>,
    /// CPU seconds it (and the threads it ran) used, from its start until llmload stopped it:
    /// on the same machine, not the client's.
    #[serde(default)]
    pub cpu_seconds: Option<f64>,
    /// Its peak resident memory.
    #[serde(default)]
    pub peak_rss_bytes: Option<u64>,
    /// Bytes it wrote to stdout and stderr.
    #[serde(default)]
    pub log_bytes: u64,
    /// Bytes of them `server.log` did not keep (its bound).
    #[serde(default)]
    pub log_left_out_bytes: u64,
    /// Its log's last lines.
    #[serde(default)]
    pub log_tail: Vec<String>,
}

impl ServerRun {
    pub(super) fn new(program: String, command: String, port: u16) -> ServerRun {
        ServerRun {
            program,
            command,
            port,
            ..ServerRun::default()
        }
    }

    /// Writes `server.json` into `dir`.
    pub(super) fn write(&self, dir: &Path) -> Result<()> {
        let path = dir.join(SERVER_JSON);
        let json = serde_json::to_string_pretty(self)
            .map_err(|e| Error::run(format!("cannot encode the server's record: {e}")))?;
        std::fs::write(&path, json + "\n").map_err(|e| Error::io("write", &path, e))
    }
}

/// The server llmload started for the run in `dir`, if it started one.
pub fn read(dir: &Path) -> Result<Option<ServerRun>> {
    crate::files::read_json_if_present(&dir.join(SERVER_JSON), MAX_BYTES, "a server record")
}

/// A process's CPU time and peak memory, from /proc (Linux); its threads count, the children
/// it already waited for too.
pub(super) struct ProcessUsage {
    pub cpu_seconds: f64,
    pub peak_rss_bytes: Option<u64>,
}

impl ProcessUsage {
    pub fn of(pid: u32) -> Option<ProcessUsage> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // The command name (field 2) may hold spaces and parentheses: fields count from the
        // last ')'.
        let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
        // utime, stime, cutime, cstime are fields 14–17: 12–15 after the name and state.
        let ticks: f64 = fields
            .get(11..15)?
            .iter()
            .filter_map(|f| f.parse::<f64>().ok())
            .sum();
        #[cfg(unix)]
        // SAFETY: sysconf reads a constant of the system; no memory is passed.
        let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
        #[cfg(not(unix))]
        let per_second = 100.0;
        let peak_rss_bytes = std::fs::read_to_string(format!("/proc/{pid}/status"))
            .ok()
            .and_then(|status| {
                status
                    .lines()
                    .find(|l| l.starts_with("VmHWM:"))
                    .and_then(|l| l.split_whitespace().nth(1))
                    .and_then(|kb| kb.parse::<u64>().ok())
            })
            .map(|kb| kb * 1024);
        (per_second > 0.0).then(|| ProcessUsage {
            cpu_seconds: ticks / per_second,
            peak_rss_bytes,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_reads_back_and_a_missing_one_is_none() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(read(dir.path()).unwrap(), None);
        let mut run = ServerRun::new("llama-server".into(), "llama-server --port 1".into(), 1);
        run.ready_seconds = Some(1.5);
        run.log_tail = vec!["ready".into()];
        run.write(dir.path()).unwrap();
        assert_eq!(read(dir.path()).unwrap(), Some(run));
        std::fs::write(dir.path().join(SERVER_JSON), "[").unwrap();
        assert!(read(dir.path()).is_err());
    }

    #[test]
    fn this_process_has_cpu_time() {
        let usage = ProcessUsage::of(std::process::id()).unwrap();
        assert!(usage.cpu_seconds >= 0.0);
        assert!(usage.peak_rss_bytes.unwrap() > 0);
    }
}
