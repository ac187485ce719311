//! The inference server a plan's `server` block starts: spawned before the run on a port of its
//! own, waited for until its readiness path answers, watched while the run goes (an exit ends
//! the run as not carried out, never as a slow server), stopped after it (SIGTERM to its
//! process group, SIGKILL after the grace), its output kept in `server.log` and what happened
//! in `server.json` ([`ServerRun`]).
//!
//! It is not a process supervisor: a server that dies is not restarted (the run it served is
//! over), and nothing here decides a verdict — a death mid-run reaches the one verdict through
//! the executor's [`Stop::refuse`], recorded in the records' `run_end`.

mod group;
mod log;
mod pidfile;
pub mod watchdog;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub use crate::records::server_run::{read as read_record, ServerRun, SERVER_JSON, SERVER_LOG};
use group::{group_alive, signal, Signal};
pub use pidfile::{stop_orphans, SERVER_PID};

use crate::error::{Error, Result};
use crate::executor::{LiveCounters, Stop};
use crate::plan::{ServerCommand, ServerSettings, MODEL_PLACEHOLDER, PORT_PLACEHOLDER};
use crate::secrets::Secrets;

/// How often a starting server is asked whether it is ready, and a running one whether it
/// is still there.
const POLL: Duration = Duration::from_millis(100);
/// The lines of its log a failure quotes.
const TAIL_QUOTED: usize = 12;

/// The port a server listens on: the plan's, checked free, or a free loopback port.
pub fn choose_port(settings: &ServerSettings) -> Result<u16> {
    match settings.port {
        Some(port) => match std::net::TcpListener::bind(("127.0.0.1", port)) {
            Ok(_) => Ok(port),
            Err(e) => Err(Error::run(format!(
                "cannot start the server: port {port} is in use on this machine ({e}); stop what \
                 listens there, or leave `port` out of the server block for a free one"
            ))),
        },
        // Bound and let go: another process could take it in between, and then the server
        // fails to listen, exits, and says so (its log's last lines).
        None => std::net::TcpListener::bind(("127.0.0.1", 0))
            .and_then(|listener| listener.local_addr())
            .map(|addr| addr.port())
            .map_err(|e| Error::run(format!("cannot find a free port for the server: {e}"))),
    }
}

/// `text` with the plan's placeholders filled in.
pub fn fill(text: &str, port: u16, model: &str) -> String {
    text.replace(PORT_PLACEHOLDER, &port.to_string())
        .replace(MODEL_PLACEHOLDER, model)
}

/// A server llmload started, running until [`StartedServer::stop`] (or dropped: then killed).
pub struct StartedServer {
    /// The command line with `{port}` left as is, for the run's header.
    as_written: String,
    child: Arc<Mutex<Child>>,
    /// Its process group (its pid: it leads the group), which outlives it while a process it
    /// started lives (an engine a launcher put in the background).
    group: i32,
    /// Stops the group if llmload dies without stopping it.
    watchdog: Option<watchdog::Watchdog>,
    /// Its pid files, removed once it is stopped.
    pid_files: Option<pidfile::Kept>,
    /// Set when llmload stops it: its exit is then no failure.
    stopping: Arc<AtomicBool>,
    /// How it ended, if it exited while the run went.
    died: Arc<Mutex<Option<String>>>,
    /// Why it was taken as hung, if it stopped answering while the run went.
    hung: Arc<Mutex<Option<String>>>,
    hang_after: Duration,
    watcher: Option<std::thread::JoinHandle<()>>,
    log: log::ServerLog,
    record: ServerRun,
    started: Instant,
    stop_grace: Duration,
    stopped: bool,
}

impl StartedServer {
    /// Starts the plan's server on `port` in `out_dir` (its log there), the command's
    /// placeholders filled in; `secrets` are masked in the command line as shown.
    pub fn spawn(
        settings: &ServerSettings,
        port: u16,
        model: &str,
        out_dir: &Path,
        secrets: &Secrets,
    ) -> Result<StartedServer> {
        let mut masked = secrets.clone();
        for secret in &settings.secrets {
            masked.add(secret);
        }
        let as_written = shown_line(
            &masked.redact(
                &settings
                    .command
                    .as_written()
                    .replace(MODEL_PLACEHOLDER, model),
            ),
        );
        let (mut command, shown) = match &settings.command {
            ServerCommand::Argv(argv) => {
                let argv: Vec<String> = argv.iter().map(|a| fill(a, port, model)).collect();
                let mut command = Command::new(program_path(&argv[0], &settings.dir));
                command.args(&argv[1..]);
                (command, crate::plan::shell_words(&argv))
            }
            ServerCommand::Shell(line) => {
                let line = fill(line, port, model);
                let mut command = Command::new("sh");
                command.arg("-c").arg(&line);
                (command, line)
            }
        };
        let shown = shown_line(&masked.redact(&shown));
        command
            .current_dir(&settings.dir)
            .envs(settings.env.iter().map(|(k, v)| (k, fill(v, port, model))))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        #[cfg(unix)]
        {
            // Its own process group: a shell line's children are stopped with it.
            use std::os::unix::process::CommandExt;
            command.process_group(0);
        }
        let program = settings.command.program_name();
        let mut record = ServerRun::new(program.clone(), shown, port);
        let masked = Arc::new(masked);
        let mut log =
            log::ServerLog::create(&out_dir.join(SERVER_LOG), settings.log_max, masked.clone())?;
        let mut child = match command.spawn() {
            Ok(child) => child,
            Err(e) => {
                let why = match e.kind() {
                    std::io::ErrorKind::NotFound => match &settings.command {
                        ServerCommand::Argv(argv) if argv[0].contains('/') => format!(
                            "cannot start the server: there is no {} (the server's `command` \
                             names it from the plan's directory, or `dir`)",
                            program_path(&argv[0], &settings.dir).display()
                        ),
                        _ => format!(
                            "cannot start the server: {program} was not found on PATH; give its \
                             path in the server's `command`"
                        ),
                    },
                    std::io::ErrorKind::PermissionDenied => format!(
                        "cannot start the server: {program} is not executable (permission denied)"
                    ),
                    _ => format!("cannot start the server {program}: {e}"),
                };
                record.failed = Some(why.clone());
                record.write(out_dir)?;
                return Err(Error::run(why));
            }
        };
        record.pid = Some(child.id());
        let group = i32::try_from(child.id()).unwrap_or(0);
        let watchdog = watchdog::Watchdog::start(child.id(), settings.stop_grace);
        let pid_files = Some(pidfile::keep(out_dir, child.id(), &record.command));
        if let Some(out) = child.stdout.take() {
            log.pump(out);
        }
        if let Some(err) = child.stderr.take() {
            log.pump(err);
        }
        Ok(StartedServer {
            as_written,
            child: Arc::new(Mutex::new(child)),
            group,
            watchdog,
            pid_files,
            stopping: Arc::new(AtomicBool::new(false)),
            died: Arc::new(Mutex::new(None)),
            hung: Arc::new(Mutex::new(None)),
            hang_after: settings.hang_after,
            watcher: None,
            log,
            record,
            started: Instant::now(),
            stop_grace: settings.stop_grace,
            stopped: false,
        })
    }

    /// The program's name (`llama-server`).
    pub fn program(&self) -> &str {
        &self.record.program
    }

    /// What the run's header keeps of it.
    pub fn launched(&self) -> crate::records::LaunchedServer {
        crate::records::LaunchedServer {
            program: self.record.program.clone(),
            command: self.as_written.clone(),
            version: self.record.version.clone(),
        }
    }

    /// Waits until `ready_url` answers with a 2xx, the server exits, or `timeout` runs out;
    /// the time it took.
    pub async fn wait_ready(
        &mut self,
        ready_url: reqwest::Url,
        timeout: Duration,
        stop: &Stop,
    ) -> Result<Duration> {
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(2))
            .build()
            .map_err(|e| Error::run(format!("cannot make an HTTP client: {e}")))?;
        loop {
            if stop.is_stopping() {
                return Err(self.failed(format!(
                    "the run was stopped while the server ({}) was starting",
                    self.record.program
                )));
            }
            if let Some(status) = self.exit_status() {
                return Err(self.failed(format!(
                    "the server ({}) exited before it was ready ({})",
                    self.record.program,
                    describe_exit(&status)
                )));
            }
            let last_answer = match client.get(ready_url.clone()).send().await {
                Ok(response) if response.status().is_success() => {
                    let took = self.started.elapsed();
                    self.record.ready_seconds = Some(took.as_secs_f64());
                    return Ok(took);
                }
                Ok(response) => format!("HTTP {}", response.status().as_u16()),
                Err(e) if e.is_connect() => "connection refused".to_string(),
                Err(e) if e.is_timeout() => "no answer within 2 s".to_string(),
                Err(_) => "a broken answer".to_string(),
            };
            if self.started.elapsed() >= timeout {
                return Err(self.failed(format!(
                    "the server ({}) was not ready within {} ({} last said: {last_answer}); raise \
                     the server's `ready ... timeout=`, or see why in its log",
                    self.record.program,
                    crate::plan::units::format_duration(timeout),
                    ready_url.path(),
                )));
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Sets what the server says it is (its version), for the report and `compare`: server
    /// text, which the caller has passed through the run's redaction (it holds every secret of
    /// the run, the target URL's among them, which this server was not started with).
    pub fn set_version(&mut self, version: Option<String>) {
        self.record.version = version;
    }

    /// Watches the server while the run goes: if it exits before llmload stops it, or answers
    /// nothing for the plan's `hang-after` (not a probe of `ready_url`, not a token or a
    /// response of the run, counted in `live`), the run is stopped and ends as not carried out,
    /// saying so with its log's last line. A slow server is still heard from; a hung one (a
    /// deadlock, a SIGSTOP) is not, and its requests would otherwise be counted as its
    /// timeouts.
    pub fn watch(&mut self, stop: Stop, ready_url: reqwest::Url, live: Arc<LiveCounters>) {
        let watched = Watched {
            child: self.child.clone(),
            stopping: self.stopping.clone(),
            tail: self.log.tail_handle(),
            program: self.record.program.clone(),
            died: self.died.clone(),
            hung: self.hung.clone(),
            hang_after: self.hang_after,
            ready_url,
            live,
            stop,
        };
        // A runtime of its own: its probes never wait behind the run's requests for a worker
        // thread or a connection.
        self.watcher = crate::threads::spawn_with_runtime("llmload-server-watch", move || {
            watched.until_stopped()
        })
        .ok();
    }

    /// Stops the server (SIGTERM to its process group, SIGKILL after the grace), keeps its log
    /// and writes `server.json` into `out_dir`; what happened.
    pub fn stop(mut self, out_dir: &Path) -> Result<ServerRun> {
        self.stopping.store(true, Ordering::SeqCst);
        if let Some(watcher) = self.watcher.take() {
            let _ = watcher.join();
        }
        // Read before it exits: /proc forgets it once it is reaped.
        if let Ok(pid) = self.child.lock().map(|c| c.id()) {
            use crate::executor::resources;
            self.record.cpu_seconds = resources::process_cpu_seconds(pid);
            self.record.peak_rss_bytes = resources::process_peak_rss_bytes(&pid.to_string());
        }
        self.record.exit = Some(self.terminate());
        self.stopped = true;
        if let Some(watchdog) = self.watchdog.take() {
            watchdog.release();
        }
        if let Some(files) = self.pid_files.take() {
            files.remove();
        }
        self.finish(out_dir)
    }

    /// Ends the process and every process of its group, gently first; how it ended. A
    /// leader that had exited leaves its group to stop (a launcher whose engine runs on).
    fn terminate(&mut self) -> String {
        let exited = self.exit_status();
        let had_exited = exited.map(|status| format!("it had exited: {}", describe_exit(&status)));
        if !group_alive(self.group) {
            return had_exited.unwrap_or_else(|| self.kill_leader());
        }
        let left = had_exited
            .as_ref()
            .map(|said| format!("{said}; what it left running in its process group was "))
            .unwrap_or_default();
        signal(self.group, Signal::Terminate);
        // A stopped process (a SIGSTOP) would hold the SIGTERM until the grace ran out.
        signal(self.group, Signal::Continue);
        let deadline = Instant::now() + self.stop_grace;
        while Instant::now() < deadline {
            // Reaped as soon as it exits: an unreaped leader keeps its group alive.
            let status = self.exit_status();
            if !group_alive(self.group) {
                let how = status.filter(|_| exited.is_none());
                return format!(
                    "{left}stopped with SIGTERM{}",
                    how.map(|s| format!(": {}", describe_exit(&s)))
                        .unwrap_or_default()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        signal(self.group, Signal::Kill);
        let status = self.child.lock().ok().and_then(|mut c| c.wait().ok());
        format!(
            "{left}killed with SIGKILL: it had not exited {} after SIGTERM{}",
            crate::plan::units::format_duration(self.stop_grace),
            status
                .filter(|_| exited.is_none())
                .map(|s| format!(" ({})", describe_exit(&s)))
                .unwrap_or_default()
        )
    }

    /// Kills the process alone (no group to signal: not Unix); how it ended.
    fn kill_leader(&mut self) -> String {
        let Ok(mut child) = self.child.lock() else {
            return "it could not be stopped".into();
        };
        let _ = child.kill();
        match child.wait() {
            Ok(status) => format!("killed: {}", describe_exit(&status)),
            Err(e) => format!("it could not be stopped: {e}"),
        }
    }

    /// How the process ended, if it has.
    fn exit_status(&self) -> Option<std::process::ExitStatus> {
        self.child.lock().ok()?.try_wait().ok().flatten()
    }

    /// A failure before the run, kept in `server.json` ([`StartedServer::abandon`] writes it);
    /// the error quotes the log's last lines.
    fn failed(&mut self, why: String) -> Error {
        // The last words come a moment after it exits.
        std::thread::sleep(Duration::from_millis(200));
        let tail = log::tail_lines(&self.log.tail_handle(), TAIL_QUOTED);
        self.record.failed = Some(why.clone());
        let quoted = if tail.is_empty() {
            "it wrote nothing".to_string()
        } else {
            format!("its last lines:\n  | {}", tail.join("\n  | "))
        };
        Error::run(format!(
            "{why}; {quoted}\n(server.log in the run directory has all of it)"
        ))
    }

    /// Stops a server that failed to become ready, keeping its log and record in `out_dir`
    /// (the error that ends the run is the failure's, not a write's).
    pub fn abandon(self, out_dir: &Path) {
        let _ = self.stop(out_dir);
    }

    fn finish(&mut self, out_dir: &Path) -> Result<ServerRun> {
        let summary = self.log.finish()?;
        self.record.log_bytes = summary.bytes;
        self.record.log_left_out_bytes = summary.left_out;
        self.record.log_tail = summary.tail;
        if let Ok(died) = self.died.lock() {
            self.record.died = died.clone();
        }
        if let Ok(hung) = self.hung.lock() {
            self.record.hung = hung.clone();
        }
        self.record.write(out_dir)?;
        Ok(self.record.clone())
    }
}

/// What the watcher of a running server needs.
struct Watched {
    child: Arc<Mutex<Child>>,
    stopping: Arc<AtomicBool>,
    tail: log::Tail,
    program: String,
    died: Arc<Mutex<Option<String>>>,
    hung: Arc<Mutex<Option<String>>>,
    hang_after: Duration,
    ready_url: reqwest::Url,
    live: Arc<LiveCounters>,
    stop: Stop,
}

/// How often a running server's readiness path is asked whether it still answers (more
/// often when `hang-after` is short: four probes fit in it).
const PROBE_EVERY: Duration = Duration::from_secs(2);

impl Watched {
    async fn until_stopped(self) {
        let client = reqwest::Client::builder()
            .no_proxy()
            .pool_max_idle_per_host(0)
            .timeout(self.hang_after)
            .build()
            .ok();
        let mut heard = self.live.heard();
        let mut heard_at = Instant::now();
        let mut probe: Option<tokio::task::JoinHandle<bool>> = None;
        let mut probed_at: Option<Instant> = None;
        let probe_every = PROBE_EVERY.min(self.hang_after / 4);
        loop {
            if self.stopping.load(Ordering::SeqCst) {
                return;
            }
            let status = self
                .child
                .lock()
                .ok()
                .and_then(|mut c| c.try_wait().ok().flatten());
            if let Some(status) = status {
                return self.exited(status).await;
            }
            let now = Instant::now();
            let counted = self.live.heard();
            if counted != heard {
                (heard, heard_at) = (counted, now);
            }
            if let Some(finished) = probe.take_if(|p| p.is_finished()) {
                if let Ok(true) = finished.await {
                    heard_at = now;
                }
            }
            if let (None, Some(client)) = (&probe, &client) {
                if probed_at.is_none_or(|at| now.duration_since(at) >= probe_every) {
                    let (client, url) = (client.clone(), self.ready_url.clone());
                    // Any answer at all is the server alive (a busy llama.cpp says 503 on
                    // /health): only silence counts.
                    probe = Some(tokio::spawn(
                        async move { client.get(url).send().await.is_ok() },
                    ));
                    probed_at = Some(now);
                }
            }
            if now.duration_since(heard_at) >= self.hang_after {
                return self.hung();
            }
            tokio::time::sleep(POLL).await;
        }
    }

    async fn exited(&self, status: std::process::ExitStatus) {
        if self.stopping.load(Ordering::SeqCst) {
            return;
        }
        // Its last words come a moment after it exits: let the log pumps catch up.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let how = describe_exit(&status);
        if let Ok(mut died) = self.died.lock() {
            *died = Some(how.clone());
        }
        self.stop.refuse(format!(
            "the server that llmload started ({}) exited during the run ({how}), so the run is \
             not carried out; its last line: {} (server.log has the rest)",
            self.program,
            self.last_line()
        ));
    }

    fn hung(&self) {
        let process = self
            .child
            .lock()
            .ok()
            .map(|c| c.id())
            .and_then(crate::executor::resources::process_state)
            .map(|state| format!("its process is {state}"))
            .unwrap_or_else(|| "its process is still there".into());
        let how = format!(
            "it answered nothing for {}: not a probe of {}, not a token or a response of the run; \
             {process}",
            crate::plan::units::format_duration(self.hang_after),
            self.ready_url.path()
        );
        if let Ok(mut hung) = self.hung.lock() {
            *hung = Some(how.clone());
        }
        self.stop.refuse(format!(
            "the server that llmload started ({}) stopped answering during the run ({how}), so \
             the run is not carried out (its requests are not the server's timeouts); its last \
             line: {} (server.log has the rest; `hang-after` in the server block sets how long \
             a server may be silent)",
            self.program,
            self.last_line()
        ));
    }

    fn last_line(&self) -> String {
        log::last_line(&self.tail).unwrap_or_else(|| "(it wrote nothing)".into())
    }
}

impl Drop for StartedServer {
    /// A server is never left behind: whatever path the run took, it is killed.
    fn drop(&mut self) {
        if !self.stopped {
            self.stopping.store(true, Ordering::SeqCst);
            signal(self.group, Signal::Kill);
            if let Ok(mut child) = self.child.lock() {
                let _ = child.kill();
                let _ = child.wait();
            }
            if let Some(watchdog) = self.watchdog.take() {
                watchdog.release();
            }
            if let Some(files) = self.pid_files.take() {
                files.remove();
            }
        }
    }
}

/// The command line as shown: one line, control characters escaped, and bounded.
fn shown_line(text: &str) -> String {
    const MAX_CHARS: usize = 4000;
    let line = crate::escape::one_line(text.trim());
    if line.chars().count() > MAX_CHARS {
        let cut: String = line.chars().take(MAX_CHARS).collect();
        format!("{cut}…")
    } else {
        line.into_owned()
    }
}

/// A program named with a slash is a path from the server's directory; a bare name is looked
/// up on PATH.
fn program_path(program: &str, dir: &Path) -> std::path::PathBuf {
    let path = Path::new(program);
    if path.is_relative() && program.contains('/') {
        dir.join(path)
    } else {
        path.to_path_buf()
    }
}

/// "exit status 1", "killed by signal 9 (SIGKILL)".
fn describe_exit(status: &std::process::ExitStatus) -> String {
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(signal) = status.signal() {
            let name = match signal {
                libc::SIGKILL => " (SIGKILL)",
                libc::SIGTERM => " (SIGTERM)",
                libc::SIGSEGV => " (SIGSEGV)",
                libc::SIGABRT => " (SIGABRT)",
                libc::SIGINT => " (SIGINT)",
                _ => "",
            };
            return format!("killed by signal {signal}{name}");
        }
    }
    match status.code() {
        Some(code) => format!("exit status {code}"),
        None => status.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_are_filled_and_words_quoted_as_a_shell_would() {
        assert_eq!(
            fill("--port {port} --alias {model}", 8123, "tiny"),
            "--port 8123 --alias tiny"
        );
        let argv: Vec<String> = ["llama-server", "--chat-template", "a b", "it's"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(
            crate::plan::shell_words(&argv),
            "llama-server --chat-template 'a b' 'it'\\''s'"
        );
    }

    #[test]
    fn a_program_with_a_slash_is_a_path_from_the_servers_directory() {
        let dir = Path::new("/plans");
        assert_eq!(program_path("llama-server", dir), Path::new("llama-server"));
        assert_eq!(
            program_path("bin/llama-server", dir),
            Path::new("/plans/bin/llama-server")
        );
        assert_eq!(program_path("/usr/bin/x", dir), Path::new("/usr/bin/x"));
    }

    #[test]
    fn a_port_in_use_is_refused_with_what_to_do() {
        let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = taken.local_addr().unwrap().port();
        let settings = ServerSettings {
            command: ServerCommand::Argv(vec!["x".into()]),
            env: Vec::new(),
            dir: ".".into(),
            port: Some(port),
            ready: Default::default(),
            stop_grace: Duration::from_secs(1),
            hang_after: crate::plan::DEFAULT_HANG_AFTER,
            log_max: 1 << 20,
            secrets: Vec::new(),
        };
        let error = choose_port(&settings).unwrap_err().to_string();
        assert!(error.contains(&format!("port {port} is in use")), "{error}");
        assert_eq!(Error::run("x").exit_code(), 3);
        let free = choose_port(&ServerSettings {
            port: None,
            ..settings
        })
        .unwrap();
        assert_ne!(free, 0);
    }
}
