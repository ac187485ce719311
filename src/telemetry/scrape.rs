//! Scraping a server's metrics during a run: a thread of its own with its own runtime and
//! connection, so that it never competes with the requests being measured for a connection,
//! a worker thread or the pacer's timer. Each scrape's known signals go to `telemetry.jsonl`
//! as they come.
//!
//! A server that does not answer the first scrape, or answers with no metric llmload knows, is
//! scraped no more (a `problem` line says why, and the report notes it); a later failed scrape
//! is noted and the next one tried.

use std::io::Write;
use std::path::Path;
use std::time::Duration;

use tokio::sync::mpsc::UnboundedReceiver;
use tokio::sync::watch;

use super::command::CommandSource;
use super::{gather, prom, TelemetryLine};
use crate::error::{Error, Result};

/// A scraper running beside a run.
pub struct Scraper {
    stop: watch::Sender<bool>,
    thread: std::thread::JoinHandle<()>,
}

/// The longest a scrape may take: a server too busy to answer in this time is noted.
const SCRAPE_TIMEOUT: Duration = Duration::from_secs(5);

/// One metrics endpoint to scrape: a server, or one replica of several.
pub struct ScrapeTarget {
    /// Its URL.
    pub url: reqwest::Url,
    /// The URL as the file and reports write it (without credentials).
    pub shown: String,
    /// Headers sent with each scrape (the run's credentials, for its own server only).
    pub headers: Vec<(reqwest::header::HeaderName, reqwest::header::HeaderValue)>,
    /// The run's TLS configuration (its roots, its client certificate).
    pub tls: crate::tls::Trust,
}

impl Scraper {
    /// Starts scraping each of `targets` every `interval` (together, so that one round's
    /// samples can be summed) into `dir/telemetry.jsonl`.
    /// What a server says (its version, an error) is kept with `secrets` redacted.
    /// Commands that print GPU readings (`commands`) are read beside them, as targets after
    /// the URLs.
    pub(crate) fn start(
        targets: Vec<ScrapeTarget>,
        commands: Vec<CommandSource>,
        interval: Duration,
        dir: &Path,
        secrets: std::sync::Arc<crate::secrets::Secrets>,
    ) -> Result<Scraper> {
        let path = dir.join(super::FILE);
        let file = std::fs::File::create(&path).map_err(|e| Error::io("create", &path, e))?;
        let (stop, stopped) = watch::channel(false);
        let thread = crate::threads::spawn_with_runtime("llmload-telemetry", move || async move {
            let mut out = std::io::BufWriter::new(file);
            let sources = Sources { targets, commands };
            scrape_until(sources, interval, &mut out, stopped, &secrets).await;
        })
        .map_err(|e| Error::run(format!("cannot start the telemetry thread: {e}")))?;
        Ok(Scraper { stop, thread })
    }

    /// Takes one last scrape and stops.
    pub fn finish(self) {
        let _ = self.stop.send(true);
        let _ = self.thread.join();
    }
}

pub(crate) fn now_unix_ms() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64() * 1000.0)
        .unwrap_or(0.0)
}

/// Appends `lines` to the telemetry file in `out_dir` (after the scraper, if any, has
/// finished): what a source read after the run adds.
pub(crate) fn append(out_dir: &std::path::Path, lines: &[TelemetryLine]) -> std::io::Result<()> {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(out_dir.join(super::FILE))?;
    let mut out = std::io::BufWriter::new(file);
    for line in lines {
        if !write_line(&mut out, line) {
            return Err(std::io::Error::other("cannot write the telemetry file"));
        }
    }
    Ok(())
}

fn write_line(out: &mut impl Write, line: &TelemetryLine) -> bool {
    serde_json::to_writer(&mut *out, line).is_ok()
        && out.write_all(b"\n").is_ok()
        && out.flush().is_ok()
}

/// A target being scraped, and how it has answered so far.
struct Scraped {
    index: u32,
    shown: String,
    client: reqwest::Client,
    url: reqwest::Url,
    /// It has answered with known metrics at least once.
    answered: bool,
    /// It never answered (or with nothing llmload knows): scraped no more.
    given_up: bool,
    /// It has described its GPUs (a GPU exporter does at its first scrape).
    gpus_said: bool,
}

/// What a run's telemetry is read from: metrics URLs, and commands printing GPU readings.
struct Sources {
    targets: Vec<ScrapeTarget>,
    commands: Vec<CommandSource>,
}

/// How long the commands' last lines are waited for once they are stopped.
const COMMANDS_DRAIN: Duration = Duration::from_secs(2);

async fn scrape_until(
    sources: Sources,
    interval: Duration,
    out: &mut std::io::BufWriter<std::fs::File>,
    mut stopped: watch::Receiver<bool>,
    secrets: &crate::secrets::Secrets,
) {
    let mut scraped = clients(sources.targets, interval);
    let versions =
        futures_util::future::join_all(scraped.iter().map(|t| server_version(&t.client, &t.url)))
            .await;
    for (target, server_version) in scraped.iter().zip(versions) {
        let source = TelemetryLine::Source {
            url: target.shown.clone(),
            interval_s: interval.as_secs_f64(),
            server_version: server_version.map(|v| secrets.redact(&v).into_owned()),
            target: target.index,
            scraped_by: Vec::new(),
        };
        if !write_line(out, &source) {
            return;
        }
    }
    let first_command = scraped.iter().map(|t| t.index + 1).max().unwrap_or(0);
    let Some((running, mut lines)) =
        start_commands(sources.commands, first_command, interval, out, secrets)
    else {
        return;
    };
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut commands_open = !running.is_empty();
    loop {
        let last = tokio::select! {
            _ = ticker.tick() => false,
            _ = stopped.wait_for(|s| *s) => true,
            line = lines.recv(), if commands_open => {
                match line {
                    Some(line) => if !write_line(out, &redacted(line, secrets)) { return },
                    None => commands_open = false,
                }
                continue;
            }
        };
        let live: Vec<&mut Scraped> = scraped.iter_mut().filter(|t| !t.given_up).collect();
        if live.is_empty() && !commands_open {
            return;
        }
        let answers =
            futures_util::future::join_all(live.iter().map(|t| scrape(&t.client, &t.url))).await;
        for (target, answer) in live.into_iter().zip(answers) {
            let answer = answer.map_err(|why| secrets.redact(&why).into_owned());
            if !record(out, target, answer) {
                return;
            }
        }
        if last {
            break;
        }
    }
    // The commands' last loops: they are stopped, and their readers send what they hold.
    running.iter().for_each(super::command::Running::stop);
    let drained = tokio::time::timeout(COMMANDS_DRAIN, async {
        while let Some(line) = lines.recv().await {
            if !write_line(out, &redacted(line, secrets)) {
                return;
            }
        }
    });
    let _ = drained.await;
}

/// A client for each metrics URL.
fn clients(targets: Vec<ScrapeTarget>, interval: Duration) -> Vec<Scraped> {
    let mut scraped = Vec::new();
    for (index, target) in (0u32..).zip(targets) {
        // The run's credentials (and headers) when the metrics are its server's own: a server
        // started with an API key asks for it on /metrics too.
        let Ok(client) = target
            .tls
            .reqwest_builder()
            .default_headers(target.headers.into_iter().collect())
            .timeout(SCRAPE_TIMEOUT.min(interval.max(Duration::from_secs(1))))
            .pool_max_idle_per_host(1)
            .build()
        else {
            continue;
        };
        scraped.push(Scraped {
            index,
            shown: target.shown,
            client,
            url: target.url,
            answered: false,
            given_up: false,
            gpus_said: false,
        });
    }
    scraped
}

/// Starts each command as a target from `first` on, its `source` line written (and a
/// `problem` when it cannot start); the commands running and the lines they send. `None` when
/// the file cannot be written.
fn start_commands(
    commands: Vec<CommandSource>,
    first: u32,
    interval: Duration,
    out: &mut impl Write,
    secrets: &crate::secrets::Secrets,
) -> Option<(
    Vec<super::command::Running>,
    UnboundedReceiver<TelemetryLine>,
)> {
    let (sender, lines) = tokio::sync::mpsc::unbounded_channel();
    let mut running = Vec::new();
    for (target, command) in (first..).zip(commands) {
        let source = TelemetryLine::Source {
            url: secrets.redact(&command.shown).into_owned(),
            interval_s: interval.as_secs_f64(),
            server_version: None,
            target,
            scraped_by: Vec::new(),
        };
        if !write_line(out, &source) {
            return None;
        }
        match command.start(target, sender.clone()) {
            Ok(started) => running.push(started),
            Err(why) => {
                let problem = TelemetryLine::Problem {
                    at_unix_ms: now_unix_ms(),
                    message: secrets.redact(&why).into_owned(),
                    target,
                };
                if !write_line(out, &problem) {
                    return None;
                }
            }
        }
    }
    Some((running, lines))
}

/// A command's line with any secret the run knows starred out (a command's words are its
/// own, and may echo what it was given).
fn redacted(mut line: TelemetryLine, secrets: &crate::secrets::Secrets) -> TelemetryLine {
    if let TelemetryLine::Ended { message, .. } | TelemetryLine::Problem { message, .. } = &mut line
    {
        *message = secrets.redact(message).into_owned();
    }
    line
}

/// Writes what one scrape of `target` gave; `false` when the file cannot be written.
fn record(
    out: &mut impl Write,
    target: &mut Scraped,
    answer: std::result::Result<String, String>,
) -> bool {
    let problem = match answer {
        Ok(text) => {
            let parsed = prom::parse(&text);
            if !target.gpus_said {
                let gpus = super::gpus::of(&parsed);
                if !gpus.is_empty() {
                    target.gpus_said = true;
                    let line = TelemetryLine::Gpus {
                        gpus,
                        target: target.index,
                    };
                    if !write_line(out, &line) {
                        return false;
                    }
                }
            }
            let mut sample = gather(&parsed, now_unix_ms());
            if sample.engine.is_none() && !target.answered {
                Some(format!(
                    "{} answered, but with no metric of vLLM, SGLang, TGI or llama.cpp that llmload knows",
                    target.shown
                ))
            } else {
                target.answered = true;
                sample.target = target.index;
                return write_line(out, &TelemetryLine::Sample(sample));
            }
        }
        Err(why) => Some(format!("{}: {why}", target.shown)),
    };
    if let Some(message) = problem {
        let line = TelemetryLine::Problem {
            at_unix_ms: now_unix_ms(),
            message,
            target: target.index,
        };
        if !write_line(out, &line) {
            return false;
        }
        // Never answered: scraping more would only repeat it.
        target.given_up |= !target.answered;
    }
    true
}

async fn scrape(
    client: &reqwest::Client,
    url: &reqwest::Url,
) -> std::result::Result<String, String> {
    let response = client.get(url.clone()).send().await.map_err(|e| {
        if e.is_connect() {
            format!("cannot connect: {}", crate::error::root_cause(&e))
        } else if e.is_timeout() {
            format!("no answer within {}s", SCRAPE_TIMEOUT.as_secs())
        } else {
            crate::error::root_cause(&e)
        }
    })?;
    let status = response.status();
    if !status.is_success() {
        return Err(format!("HTTP {}", status.as_u16()));
    }
    response.text().await.map_err(|e| e.to_string())
}

/// What the server says it is, from the first of the engines' info endpoints that answers:
/// vLLM's /version, TGI's /info, SGLang's /get_server_info, llama.cpp's /props.
pub(crate) async fn server_version(
    client: &reqwest::Client,
    metrics: &reqwest::Url,
) -> Option<String> {
    for (path, key) in [
        ("/version", "version"),
        ("/info", "version"),
        ("/get_server_info", "version"),
        ("/props", "build_info"),
    ] {
        let mut url = metrics.clone();
        url.set_path(path);
        url.set_query(None);
        let Ok(response) = client.get(url).timeout(Duration::from_secs(2)).send().await else {
            continue;
        };
        if !response.status().is_success() {
            continue;
        }
        let Ok(json) = response.json::<serde_json::Value>().await else {
            continue;
        };
        if let Some(version) = json.get(key).and_then(|v| v.as_str()) {
            let model = json
                .get("model_id")
                .or_else(|| json.get("model_path"))
                .and_then(|v| v.as_str())
                .map(|m| format!(", model {m}"))
                .unwrap_or_default();
            // A server's words: one line, bounded, before a terminal or a report shows them.
            return Some(crate::error::shorten(&format!(
                "{version}{model}, from {path}"
            )));
        }
    }
    None
}
