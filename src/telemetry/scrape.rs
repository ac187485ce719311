//! Scraping a server's metrics during a run: a thread of its own with its own runtime and
//! connection, so that it never competes with the requests being measured for a connection,
//! a worker thread or the pacer's timer. Each scrape's known signals go to `telemetry.jsonl`
//! as they come.
//!
//! A server that does not answer the first scrape, or answers with no metric llmload knows, is
//! scraped no more (a `problem` line says why, and the report notes it); a later failed scrape
//! is noted and the next one tried.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::sync::watch;

use super::{gather, prom, TelemetryLine};
use crate::error::{Error, Result};

/// A scraper running beside a run.
pub struct Scraper {
    stop: watch::Sender<bool>,
    thread: std::thread::JoinHandle<()>,
}

/// The longest a scrape may take: a server too busy to answer in this time is noted.
const SCRAPE_TIMEOUT: Duration = Duration::from_secs(5);

impl Scraper {
    /// Starts scraping `url` every `interval` into `dir/telemetry.jsonl`. `shown` is the URL as
    /// the file and reports write it (without credentials).
    pub fn start(
        url: reqwest::Url,
        shown: String,
        headers: Vec<(reqwest::header::HeaderName, reqwest::header::HeaderValue)>,
        interval: Duration,
        dir: &Path,
    ) -> Result<Scraper> {
        let path = dir.join(super::FILE);
        let file = std::fs::File::create(&path).map_err(|e| Error::io("create", &path, e))?;
        let (stop, stopped) = watch::channel(false);
        let thread = std::thread::Builder::new()
            .name("llmload-telemetry".into())
            .spawn(move || {
                let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                else {
                    return;
                };
                let mut out = std::io::BufWriter::new(file);
                runtime.block_on(scrape_until(
                    url, shown, headers, interval, &mut out, stopped, path,
                ));
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

fn now_unix_ms() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64() * 1000.0)
        .unwrap_or(0.0)
}

fn write_line(out: &mut impl Write, line: &TelemetryLine) -> bool {
    serde_json::to_writer(&mut *out, line).is_ok()
        && out.write_all(b"\n").is_ok()
        && out.flush().is_ok()
}

#[allow(clippy::too_many_arguments)]
async fn scrape_until(
    url: reqwest::Url,
    shown: String,
    headers: Vec<(reqwest::header::HeaderName, reqwest::header::HeaderValue)>,
    interval: Duration,
    out: &mut std::io::BufWriter<std::fs::File>,
    mut stopped: watch::Receiver<bool>,
    _path: PathBuf,
) {
    // The run's credentials (and headers) when the metrics are its server's own: a server
    // started with an API key asks for it on /metrics too.
    let Ok(client) = reqwest::Client::builder()
        .default_headers(headers.into_iter().collect())
        .timeout(SCRAPE_TIMEOUT.min(interval.max(Duration::from_secs(1))))
        .pool_max_idle_per_host(1)
        .build()
    else {
        return;
    };
    let server_version = server_version(&client, &url).await;
    let source = TelemetryLine::Source {
        url: shown.clone(),
        interval_s: interval.as_secs_f64(),
        server_version,
    };
    if !write_line(out, &source) {
        return;
    }
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut answered = false;
    loop {
        let last = tokio::select! {
            _ = ticker.tick() => false,
            _ = stopped.wait_for(|s| *s) => true,
        };
        let problem = match scrape(&client, &url).await {
            Ok(text) => {
                let sample = gather(&prom::parse(&text), now_unix_ms());
                if sample.engine.is_none() && !answered {
                    Some(format!(
                        "{shown} answered, but with no metric of vLLM, SGLang, TGI or llama.cpp that llmload knows"
                    ))
                } else {
                    answered = true;
                    if !write_line(out, &TelemetryLine::Sample(sample)) {
                        return;
                    }
                    None
                }
            }
            Err(why) => Some(format!("{shown}: {why}")),
        };
        if let Some(message) = problem {
            let line = TelemetryLine::Problem {
                at_unix_ms: now_unix_ms(),
                message,
            };
            if !write_line(out, &line) || !answered {
                // Never answered: scraping more would only repeat it.
                return;
            }
        }
        if last {
            return;
        }
    }
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
