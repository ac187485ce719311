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
    /// Why it was taken as hung, if it answered nothing for the plan's `hang-after` while the
    /// run went (the run is then not carried out).
    #[serde(default)]
    pub hung: Option<String>,
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
    pub(crate) fn new(program: String, command: String, port: u16) -> ServerRun {
        ServerRun {
            program,
            command,
            port,
            ..ServerRun::default()
        }
    }

    /// Writes `server.json` into `dir`.
    pub(crate) fn write(&self, dir: &Path) -> Result<()> {
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
}
