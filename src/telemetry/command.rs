//! GPU readings from a command that prints them as it goes: nvidia-smi on this machine
//! (`gpus "nvidia-smi"`, looping at the scrape interval), or a command of the user's printing
//! nvidia-smi's CSV (`gpus command="…"`). Each runs in a process group of its own, its output
//! read on a thread of its own into telemetry lines, which the scraper writes beside its
//! scrapes' (one file, one writer).
//!
//! A command that cannot start or prints what cannot be read is a `problem` line (a note in the
//! report); one that ends before the run does an `ended` line (a warning: the GPU figures after
//! it leave its GPUs out); never a failed run.
//!
//! Not for: what the lines mean ([`super::smi`]).

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::mpsc::UnboundedSender;

use super::smi::{Layout, Loops};
use super::TelemetryLine;

/// A command to read GPU readings from.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct CommandSource {
    /// How reports name it (`nvidia-smi`, or `command: …`).
    pub shown: String,
    program: String,
    args: Vec<String>,
    /// Its first line is a header naming its columns (a user's command); else the columns are
    /// llmload's own query's.
    header: bool,
}

/// The most unreadable lines a source reports; the rest are counted in the last.
const MAX_PROBLEMS: usize = 5;

impl CommandSource {
    /// nvidia-smi on this machine, asked for llmload's fields every `interval`.
    pub(crate) fn nvidia_smi(interval: Duration) -> CommandSource {
        CommandSource {
            shown: "nvidia-smi".into(),
            program: "nvidia-smi".into(),
            args: vec![
                format!("--query-gpu={}", super::smi::QUERY.join(",")),
                "--format=csv,noheader,nounits".into(),
                format!("--loop-ms={}", interval.as_millis().max(100)),
            ],
            header: false,
        }
    }

    /// A command of the user's, run by `sh -c`, printing nvidia-smi's CSV, header first.
    pub(crate) fn shell(command: &str) -> CommandSource {
        CommandSource {
            shown: format!("command: {}", crate::error::shorten(command)),
            program: "sh".into(),
            args: vec!["-c".into(), command.into()],
            header: true,
        }
    }

    /// Starts it; its lines go to `out` as telemetry lines of target `target`.
    pub(crate) fn start(
        &self,
        target: u32,
        out: UnboundedSender<TelemetryLine>,
    ) -> Result<Running, String> {
        let mut command = Command::new(&self.program);
        command
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        std::os::unix::process::CommandExt::process_group(&mut command, 0);
        let mut child = command
            .spawn()
            .map_err(|e| format!("{} cannot start: {e}", self.shown))?;
        let stopping = Arc::new(AtomicBool::new(false));
        let last_error = Arc::new(Mutex::new(None::<String>));
        let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
            let _ = child.kill();
            return Err(format!("{} gave no output to read", self.shown));
        };
        let errors = last_error.clone();
        let (stderr_done, stderr_ended) = std::sync::mpsc::channel::<()>();
        let _ = std::thread::Builder::new()
            .name("llmload-gpus-err".into())
            .spawn(move || {
                for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                    if !line.trim().is_empty() {
                        *errors.lock().unwrap_or_else(|e| e.into_inner()) = Some(line);
                    }
                }
                drop(stderr_done);
            });
        let child = Arc::new(Mutex::new(child));
        let reader = Reader {
            shown: self.shown.clone(),
            layout: (!self.header).then(Layout::of_query),
            target,
            out,
            problems: 0,
            described: false,
        };
        let (waited, stopped) = (child.clone(), stopping.clone());
        std::thread::Builder::new()
            .name("llmload-gpus".into())
            .spawn(move || {
                let said = Said {
                    last_error,
                    ended: stderr_ended,
                };
                reader.read(stdout, &waited, &stopped, said)
            })
            .map_err(|e| format!("{} cannot be read: {e}", self.shown))?;
        Ok(Running { child, stopping })
    }
}

/// A command being read.
pub(crate) struct Running {
    child: Arc<Mutex<Child>>,
    stopping: Arc<AtomicBool>,
}

impl Running {
    /// Stops it (and whatever it started: its whole process group); its reader then sends
    /// its last loop and ends.
    pub(crate) fn stop(&self) {
        self.stopping.store(true, Ordering::SeqCst);
        let mut child = self.child.lock().unwrap_or_else(|e| e.into_inner());
        if let Ok(group) = i32::try_from(child.id()) {
            // SAFETY: kill only sends a signal; the group is the one the child leads.
            unsafe { libc::kill(-group, libc::SIGTERM) };
        }
        let _ = child.kill();
    }
}

/// What a command said on stderr: its last non-empty line, and when it has all been read.
struct Said {
    last_error: Arc<Mutex<Option<String>>>,
    ended: std::sync::mpsc::Receiver<()>,
}

/// A command's output, read into telemetry lines.
struct Reader {
    shown: String,
    /// The columns: llmload's query's, or the header's once read.
    layout: Option<Layout>,
    target: u32,
    out: UnboundedSender<TelemetryLine>,
    problems: usize,
    /// Its GPUs have been described (at its first loop).
    described: bool,
}

impl Reader {
    fn read(
        mut self,
        stdout: impl std::io::Read,
        child: &Mutex<Child>,
        stopping: &AtomicBool,
        said: Said,
    ) {
        let mut loops = Loops::default();
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if line.trim().is_empty() {
                continue;
            }
            let arrived = super::scrape::now_unix_ms();
            let Some(layout) = &self.layout else {
                match Layout::of_header(&line) {
                    Ok(layout) => self.layout = Some(layout),
                    Err(why) => self.problem(format!("{}: {why}", self.shown)),
                }
                continue;
            };
            match layout.row(&line) {
                Ok(row) => {
                    if let Some((at, rows)) = loops.push(row, arrived) {
                        self.send(at, &rows);
                    }
                }
                Err(why) => {
                    let quoted = crate::error::shorten(line.trim());
                    self.problem(format!("{}: \"{quoted}\": {why}", self.shown));
                }
            }
        }
        if let Some((at, rows)) = loops.finish() {
            self.send(at, &rows);
        }
        if stopping.load(Ordering::SeqCst) {
            return;
        }
        let status = child.lock().unwrap_or_else(|e| e.into_inner()).wait();
        // Its last words on stderr, once read (a grandchild holding stderr open is not waited
        // for long).
        let _ = said
            .ended
            .recv_timeout(std::time::Duration::from_millis(500));
        let said = said
            .last_error
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .map(|l| format!(": {}", crate::error::shorten(&l)))
            .unwrap_or_default();
        let status = match status {
            Ok(status) => status.to_string(),
            Err(e) => e.to_string(),
        };
        let _ = self.out.send(TelemetryLine::Ended {
            at_unix_ms: super::scrape::now_unix_ms(),
            message: format!("{} ended before the run did ({status}){said}", self.shown),
            target: self.target,
        });
    }

    /// Sends one loop's sample (and its GPUs, the first time).
    fn send(&mut self, at: f64, rows: &[super::smi::Row]) {
        let gpus = if self.described {
            Vec::new()
        } else {
            super::smi::gpus(rows)
        };
        self.described = true;
        if !gpus.is_empty() {
            let _ = self.out.send(TelemetryLine::Gpus {
                gpus,
                target: self.target,
            });
        }
        let mut sample = super::smi::sample(rows, at);
        sample.target = self.target;
        let _ = self.out.send(TelemetryLine::Sample(sample));
    }

    fn problem(&mut self, message: String) {
        self.problems += 1;
        if self.problems > MAX_PROBLEMS {
            return;
        }
        let message = if self.problems == MAX_PROBLEMS {
            format!("{message} (and any further such lines, not reported)")
        } else {
            message
        };
        let _ = self.out.send(TelemetryLine::Problem {
            at_unix_ms: super::scrape::now_unix_ms(),
            message,
            target: self.target,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(source: CommandSource, stop_after: Option<Duration>) -> Vec<TelemetryLine> {
        let (sender, mut receiver) = tokio::sync::mpsc::unbounded_channel();
        match source.start(3, sender) {
            Ok(running) => {
                if let Some(after) = stop_after {
                    std::thread::sleep(after);
                    running.stop();
                }
            }
            Err(why) => panic!("{why}"),
        }
        let mut out = Vec::new();
        while let Some(line) = receiver.blocking_recv() {
            out.push(line);
        }
        out
    }

    #[test]
    fn a_commands_loops_become_samples_and_its_end_a_problem() {
        let fixture = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/telemetry/nvidia-smi-units.csv"
        );
        let lines = lines(
            CommandSource::shell(&format!("cat '{fixture}'; echo oops >&2; exit 4")),
            None,
        );
        let samples: Vec<&super::super::TelemetrySample> = lines
            .iter()
            .filter_map(|l| match l {
                TelemetryLine::Sample(s) => Some(s),
                _ => None,
            })
            .collect();
        assert_eq!(samples.len(), 2, "{lines:?}");
        assert!(samples.iter().all(|s| s.target == 3));
        assert_eq!(samples[1].values[&super::super::Signal::GpuPower], 301.02);
        let gpus = lines
            .iter()
            .filter(|l| matches!(l, TelemetryLine::Gpus { .. }))
            .count();
        assert_eq!(gpus, 1, "described once");
        let Some(TelemetryLine::Ended { message, .. }) = lines.last() else {
            panic!("{lines:?}")
        };
        assert!(message.contains("ended before the run did"), "{message}");
        assert!(
            message.contains("exit status: 4") && message.ends_with(": oops"),
            "{message}"
        );
    }

    #[test]
    fn stopping_ends_a_looping_command_and_its_children_quietly() {
        let command = "echo 'power.draw [W]'; while true; do echo 250; sleep 0.05; done";
        let lines = lines(
            CommandSource::shell(command),
            Some(Duration::from_millis(300)),
        );
        // Stopped by the run: no problem to report.
        assert!(
            lines
                .iter()
                .all(|l| !matches!(l, TelemetryLine::Problem { .. })),
            "{lines:?}"
        );
        assert!(
            lines.iter().any(|l| matches!(l, TelemetryLine::Sample(_))),
            "{lines:?}"
        );
    }

    #[test]
    fn a_command_that_cannot_start_or_be_read_says_why() {
        let missing = CommandSource {
            shown: "nvidia-smi".into(),
            program: "/nonexistent/nvidia-smi".into(),
            args: Vec::new(),
            header: false,
        };
        let (sender, _receiver) = tokio::sync::mpsc::unbounded_channel();
        let why = missing.start(0, sender).err().unwrap();
        assert!(why.starts_with("nvidia-smi cannot start: "), "{why}");
        let lines = lines(
            CommandSource::shell("echo 'NVIDIA-SMI has failed'; exit 9"),
            None,
        );
        let messages: Vec<String> = lines
            .iter()
            .filter_map(|l| match l {
                TelemetryLine::Problem { message, .. } | TelemetryLine::Ended { message, .. } => {
                    Some(message.clone())
                }
                _ => None,
            })
            .collect();
        assert_eq!(messages.len(), 2, "{messages:?}");
        assert!(
            messages[0].contains("names no column llmload reads"),
            "{messages:?}"
        );
        assert!(messages[1].contains("exit status: 9"), "{messages:?}");
    }
}
