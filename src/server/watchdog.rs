//! The started server's watchdog: a small process of its own (`llmload __server-watchdog`) that
//! stops the server's whole process group if llmload dies without stopping it — a `kill -9`, an
//! out-of-memory kill, a crash — so that a GPU runner's next job does not find the last one's
//! engine holding its GPU.
//!
//! It learns of llmload's death from a pipe, not a signal: llmload holds the pipe's write end
//! (its only writer), and the kernel closes it however llmload ends, so the watchdog's read
//! returns end-of-file. (`PR_SET_PDEATHSIG` follows the parent *thread*, not the process, and
//! reaches only the direct child: a shell line's engine would be missed.) When llmload stops the
//! server itself, it writes one byte first, and the watchdog exits without a signal.
//!
//! It is not the stop llmload does after a run (SIGTERM, the grace, SIGKILL, `server.json`):
//! that is [`super::StartedServer::stop`]. This is only the stop for when llmload cannot.

use std::io::Read;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::Duration;

use super::group::stop_group;

/// The hidden subcommand that runs a watchdog.
pub const SUBCOMMAND: &str = "__server-watchdog";

/// What llmload writes to its watchdog when it stops the server itself.
const RELEASE: u8 = b'x';

/// A running watchdog, and the pipe that keeps it waiting.
pub struct Watchdog {
    child: Child,
    pipe: Option<ChildStdin>,
}

impl Watchdog {
    /// Starts a watchdog for the process group `group`, which gets `grace` between SIGTERM and
    /// SIGKILL. `None` when it cannot start (the run goes on: the stop after it still stops
    /// the server; only a killed llmload would leave it).
    pub fn start(group: u32, grace: Duration) -> Option<Watchdog> {
        let exe = std::env::current_exe().ok()?;
        // Only llmload's own binary knows the subcommand: a program that runs plans through
        // the library (a benchmark, a test harness) would run itself again with these words.
        let own = exe
            .file_stem()
            .and_then(|stem| stem.to_str())
            .is_some_and(|stem| stem == "llmload");
        if !own {
            return None;
        }
        let mut command = Command::new(exe);
        command
            .arg(SUBCOMMAND)
            .arg(group.to_string())
            .arg(grace.as_millis().to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        #[cfg(unix)]
        {
            // A group of its own: a Ctrl-C at the terminal, or a CI runner signalling llmload's
            // group, reaches llmload (which stops the server gently) and not the watchdog.
            use std::os::unix::process::CommandExt;
            command.process_group(0);
        }
        let mut child = command.spawn().ok()?;
        let pipe = child.stdin.take();
        Some(Watchdog { child, pipe })
    }

    /// llmload stops the server itself: the watchdog exits without a signal.
    pub fn release(mut self) {
        if let Some(mut pipe) = self.pipe.take() {
            let _ = std::io::Write::write_all(&mut pipe, &[RELEASE]);
        }
        let _ = self.child.wait();
    }
}

/// The watchdog's own life: waits for llmload to release it or to die; on its death, stops
/// the group `group` (SIGTERM and SIGCONT, then SIGKILL after `grace` if any member is left).
/// Returns the process's exit code.
pub fn watch(group: i32, grace: Duration) -> u8 {
    #[cfg(unix)]
    // SAFETY: setting signals' dispositions to "ignore" has no other effect; the watchdog must
    // outlive whatever signal ended llmload, to do its one job.
    unsafe {
        for signal in [libc::SIGINT, libc::SIGHUP, libc::SIGTERM, libc::SIGPIPE] {
            libc::signal(signal, libc::SIG_IGN);
        }
    }
    let mut byte = [0u8; 1];
    let released = matches!(std::io::stdin().read(&mut byte), Ok(1) if byte[0] == RELEASE);
    if released || group <= 1 {
        return 0;
    }
    stop_group(group, grace);
    0
}
