//! `server.pid`: which process group a run's started server leads, kept in the run directory
//! and in a registry of this user's (under the temporary directory) while it runs, and removed
//! once llmload has stopped it. The next run that starts a server stops any group a dead
//! llmload left behind — the last line of defence, for when its watchdog was killed too (a
//! `kill -9` of every process of a CI job but the server's own group).
//!
//! A group is only ever stopped when the llmload that started it is gone (its pid dead, or
//! reused by a process that started at another time) and the group is still the one recorded
//! (its leader started when recorded, or exited while other members live: the kernel does not
//! reuse a live group's id).

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The run directory's pid file.
pub const SERVER_PID: &str = "server.pid";

/// What a pid file holds.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
struct Entry {
    /// The server's process group (its leader's pid).
    group: u32,
    /// When its leader started, in clock ticks since boot (`/proc/PID/stat`).
    group_started: Option<u64>,
    /// The llmload that started it, and when that started.
    llmload_pid: u32,
    llmload_started: Option<u64>,
    /// The command as shown (secrets masked), for the note that stops it.
    command: String,
    /// The run directory.
    run_dir: PathBuf,
}

/// A server's pid files while it runs; [`Kept::remove`] once it is stopped.
pub struct Kept {
    paths: Vec<PathBuf>,
}

impl Kept {
    /// Removes the pid files: the server was stopped.
    pub fn remove(self) {
        for path in self.paths {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// This user's registry of started servers.
fn registry() -> PathBuf {
    #[cfg(unix)]
    // SAFETY: getuid(2) cannot fail and touches no memory.
    let user = unsafe { libc::getuid() };
    #[cfg(not(unix))]
    let user = 0;
    std::env::temp_dir()
        .join(format!("llmload-{user}"))
        .join("servers")
}

/// When process `pid` started, in clock ticks since boot: field 22 of `/proc/PID/stat`.
fn started(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after_name = &stat[stat.rfind(')')? + 1..];
    // After the name, the state is field 3: the start time (22) is the 20th.
    after_name.split_whitespace().nth(19)?.parse().ok()
}

/// Keeps `group`'s pid file in `run_dir` and in the registry. Best effort: a file that cannot
/// be written costs only the clean-up of a server a dead llmload left.
pub fn keep(run_dir: &Path, group: u32, command: &str) -> Kept {
    let entry = Entry {
        group,
        group_started: started(group),
        llmload_pid: std::process::id(),
        llmload_started: started(std::process::id()),
        command: command.to_string(),
        run_dir: run_dir.to_path_buf(),
    };
    let mut paths = Vec::new();
    let Ok(json) = serde_json::to_string_pretty(&entry) else {
        return Kept { paths };
    };
    let registry = registry();
    let _ = std::fs::create_dir_all(&registry);
    for path in [
        run_dir.join(SERVER_PID),
        registry.join(format!("{group}.json")),
    ] {
        if std::fs::write(&path, &json).is_ok() {
            paths.push(path);
        }
    }
    Kept { paths }
}

/// Stops every server in the registry whose llmload is gone and whose group still runs (see
/// the module's doc), and forgets entries whose group is gone; what it stopped, one note each.
pub fn stop_orphans(grace: Duration) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(registry()) else {
        return Vec::new();
    };
    let mut notes = Vec::new();
    for path in entries.flatten().map(|e| e.path()) {
        let Some(entry) = crate::files::read_text_bounded(&path, 64 << 10)
            .ok()
            .and_then(|text| serde_json::from_str::<Entry>(&text).ok())
        else {
            continue;
        };
        let llmload_alive = started(entry.llmload_pid)
            .is_some_and(|at| entry.llmload_started.is_none_or(|recorded| recorded == at));
        if llmload_alive {
            continue;
        }
        let group = entry.group as i32;
        let same_group = match started(entry.group) {
            Some(at) => entry.group_started.is_none_or(|recorded| recorded == at),
            None => super::group::group_alive(group),
        };
        if same_group && super::group::stop_group(group, grace) {
            notes.push(format!(
                "stopped a server an earlier llmload (pid {}, gone) left running: process group \
                 {}, {} (run directory {})",
                entry.llmload_pid,
                entry.group,
                entry.command,
                entry.run_dir.display()
            ));
        }
        let _ = std::fs::remove_file(&path);
        let _ = std::fs::remove_file(entry.run_dir.join(SERVER_PID));
    }
    notes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_start_time_is_read_past_a_name_with_spaces() {
        let mine = started(std::process::id()).expect("this process's start");
        assert!(mine > 0);
        assert_eq!(started(std::process::id()), Some(mine));
        assert_eq!(started(u32::MAX), None);
    }
}
