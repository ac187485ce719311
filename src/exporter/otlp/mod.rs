//! Every request as an OpenTelemetry span, exported over OTLP/HTTP in protobuf (`run --otlp
//! URL`): the client's side of each request's trace, which the spans an engine exports for it
//! (keyed by the same `traceparent`) join.
//!
//! Off the hot path: the observer copies what a span needs of a finished request on the
//! recorder's thread and offers it to a bounded queue ([`QUEUE_SPANS`]); a thread of its own,
//! at the idle scheduling class (it never takes the core from the run's requests), encodes and
//! sends batches of up to [`BATCH_SPANS`] every [`BATCH_INTERVAL`] or when one is full. A queue that is full (the
//! collector is slower than the run) drops the span; a batch that fails, is refused or takes
//! longer than [`PUSH_TIMEOUT`] is dropped whole. Both are counted and said when the exporter
//! stops; neither touches the run, its records or its verdict. Spans are not retried: a
//! collector that refuses them now will not be asked again while the run goes on.
//!
//! Headers for a collector that asks for them (a hosted backend's key) come from the standard
//! `OTEL_EXPORTER_OTLP_TRACES_HEADERS` or `OTEL_EXPORTER_OTLP_HEADERS` (`name=value,…`); their
//! values are never said anywhere.
//!
//! Not for: what a span holds (`span.rs`).

mod span;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::mpsc;

use super::background::{post_protobuf, Background};
use crate::executor::{Event, Observer};
use span::{Finished, RunContext};

/// Spans waiting to be sent, at most: a few hundred bytes each, so a few MB at worst.
const QUEUE_SPANS: usize = 16_384;
/// Spans in one export request, at most (the OpenTelemetry SDKs' default batch).
const BATCH_SPANS: usize = 512;
/// How long a span waits for its batch to fill before the batch goes anyway.
const BATCH_INTERVAL: Duration = Duration::from_secs(1);
/// The longest one export may take before it is given up (and its spans dropped).
const PUSH_TIMEOUT: Duration = Duration::from_secs(2);
/// How long the spans still queued when the run ends may take to go, in all.
const FINAL_FLUSH: Duration = Duration::from_secs(5);

/// What became of the spans, for the line said when the exporter stops.
#[derive(Debug, Default)]
struct Counts {
    exported: AtomicU64,
    batches: AtomicU64,
    /// Dropped because the queue was full.
    overflowed: AtomicU64,
    /// Dropped with a batch that failed, or left when the final flush ran out of time.
    failed: AtomicU64,
}

/// The run's observer: queues what each finished request's span needs.
struct Spans {
    run: Mutex<Option<RunContext>>,
    queue: mpsc::Sender<Finished>,
    counts: Arc<Counts>,
}

impl Observer for Spans {
    fn on_event(&self, event: Event<'_>) {
        let Ok(mut run) = self.run.lock() else {
            return;
        };
        match event {
            Event::RunStarted(header) => *run = RunContext::of(header),
            Event::PhaseStarted(start) => {
                if let Some(run) = run.as_mut() {
                    run.name_phase(start.index, &start.name);
                }
            }
            Event::RequestFinished(record) => {
                if run.is_none() {
                    return;
                }
                if self.queue.try_send(Finished::of(record)).is_err() {
                    self.counts.overflowed.fetch_add(1, Ordering::Relaxed);
                }
            }
            Event::Counters(_)
            | Event::RequestSent { .. }
            | Event::PhaseEnded(_)
            | Event::RunEnded(_)
            | Event::Warning(_)
            | Event::Note(_)
            | Event::Objectives(_) => {}
        }
    }
}

/// Exports spans until it is stopped, then sends what is still queued.
pub struct SpanExporter {
    spans: Arc<Spans>,
    counts: Arc<Counts>,
    first_failure: Arc<Mutex<Option<String>>>,
    sending: Background,
}

impl SpanExporter {
    /// Starts exporting to `url` (`/v1/traces` added when it names no path, as OTLP's
    /// endpoint variable has it), with the headers the environment names.
    pub fn start(url: reqwest::Url) -> Result<SpanExporter, String> {
        let url = traces_url(url);
        let headers = environment_headers()?;
        let counts = Arc::new(Counts::default());
        let (queue, queued) = mpsc::channel(QUEUE_SPANS);
        let spans = Arc::new(Spans {
            run: Mutex::new(None),
            queue,
            counts: counts.clone(),
        });
        let first_failure = Arc::new(Mutex::new(None));
        let sender = Sender {
            client: reqwest::Client::builder()
                .timeout(PUSH_TIMEOUT)
                .default_headers(headers)
                .build()
                .map_err(|_| "cannot build its HTTP client".to_string())?,
            url,
            spans: spans.clone(),
            counts: counts.clone(),
            first_failure: first_failure.clone(),
        };
        let sending = Background::start("llmload-otlp", move |stopped| sender.run(queued, stopped))
            .map_err(|e| e.to_string())?;
        Ok(SpanExporter {
            spans,
            counts,
            first_failure,
            sending,
        })
    }

    /// The run's observer.
    pub fn observer(&self) -> Arc<dyn Observer> {
        self.spans.clone()
    }

    /// Sends what is still queued and stops; what went and what was dropped, in a sentence.
    pub fn finish(mut self) -> String {
        self.sending.stop();
        let load = |n: &AtomicU64| n.load(Ordering::Relaxed);
        let c = &self.counts;
        let mut said = format!(
            "otlp: {} span(s) exported in {} batch(es)",
            load(&c.exported),
            load(&c.batches)
        );
        let (overflowed, failed) = (load(&c.overflowed), load(&c.failed));
        if overflowed + failed > 0 {
            said.push_str(&format!(", {} dropped", overflowed + failed));
            if overflowed > 0 {
                said.push_str(&format!(" ({overflowed} while its queue was full)"));
            }
            if let Some(why) = self.first_failure.lock().ok().and_then(|f| f.clone()) {
                said.push_str(&format!(" (first failure: {why})"));
            }
        }
        said
    }
}

/// The exporting thread's side.
struct Sender {
    client: reqwest::Client,
    url: reqwest::Url,
    spans: Arc<Spans>,
    counts: Arc<Counts>,
    first_failure: Arc<Mutex<Option<String>>>,
}

impl Sender {
    /// Sends batches as they fill or age until `stopped`, then what is left within
    /// [`FINAL_FLUSH`].
    async fn run(
        self,
        mut queued: mpsc::Receiver<Finished>,
        mut stopped: tokio::sync::oneshot::Receiver<()>,
    ) {
        let mut batch = Vec::with_capacity(BATCH_SPANS);
        let mut ticks = tokio::time::interval(BATCH_INTERVAL);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        loop {
            let room = BATCH_SPANS - batch.len();
            // The stop first: after a slow export the next tick is due at once.
            tokio::select! {
                biased;
                _ = &mut stopped => break,
                got = queued.recv_many(&mut batch, room) => {
                    if got == 0 {
                        break;
                    }
                    if batch.len() >= BATCH_SPANS {
                        self.export(std::mem::take(&mut batch)).await;
                    }
                }
                _ = ticks.tick() => {
                    if !batch.is_empty() {
                        self.export(std::mem::take(&mut batch)).await;
                    }
                }
            }
        }
        queued.close();
        let deadline = tokio::time::Instant::now() + FINAL_FLUSH;
        while let Ok(span) = queued.try_recv() {
            batch.push(span);
            if batch.len() >= BATCH_SPANS {
                self.export_by(std::mem::take(&mut batch), deadline).await;
            }
        }
        self.export_by(batch, deadline).await;
    }

    /// Exports `batch` if `deadline` leaves time for it; drops it otherwise.
    async fn export_by(&self, batch: Vec<Finished>, deadline: tokio::time::Instant) {
        if batch.is_empty() {
            return;
        }
        match tokio::time::timeout_at(deadline, self.export(batch.clone())).await {
            Ok(()) => {}
            Err(_) => self.failed(batch.len(), "the run's end left no time".into()),
        }
    }

    /// One export request of `batch`; counts what came of it.
    async fn export(&self, batch: Vec<Finished>) {
        // Encoded from a copy: the recorder's thread takes this lock for every record, and this
        // thread, at the idle class, may be preempted in the middle of a batch.
        let Some(run) = self.spans.run.lock().ok().and_then(|run| run.clone()) else {
            return;
        };
        let body = run.request(&batch);
        match post_protobuf(&self.client, &self.url, &[], body).await {
            Ok(()) => {
                self.counts.batches.fetch_add(1, Ordering::Relaxed);
                let count = batch.len() as u64;
                self.counts.exported.fetch_add(count, Ordering::Relaxed);
            }
            Err(why) => self.failed(batch.len(), why),
        }
    }

    fn failed(&self, spans: usize, why: String) {
        self.counts
            .failed
            .fetch_add(spans as u64, Ordering::Relaxed);
        if let Ok(mut first) = self.first_failure.lock() {
            first.get_or_insert(why);
        }
    }
}

/// `url` as the traces endpoint: `/v1/traces` when it names no path (`http://collector:4318`),
/// as given otherwise.
fn traces_url(mut url: reqwest::Url) -> reqwest::Url {
    if url.path() == "/" || url.path().is_empty() {
        url.set_path("/v1/traces");
    }
    url
}

/// The headers OTLP's environment variables name for traces (`name=value,…`, values
/// percent-decoded): `OTEL_EXPORTER_OTLP_TRACES_HEADERS`, else `OTEL_EXPORTER_OTLP_HEADERS`.
fn environment_headers() -> Result<reqwest::header::HeaderMap, String> {
    let var = [
        "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
        "OTEL_EXPORTER_OTLP_HEADERS",
    ]
    .into_iter()
    .find_map(|name| Some((name, std::env::var(name).ok()?)));
    match var {
        Some((name, text)) => parse_headers(&text).map_err(|why| format!("{name}: {why}")),
        None => Ok(reqwest::header::HeaderMap::new()),
    }
}

/// `name=value,…`; an error names the header, never a value.
fn parse_headers(text: &str) -> Result<reqwest::header::HeaderMap, String> {
    use reqwest::header::{HeaderName, HeaderValue};
    let mut headers = reqwest::header::HeaderMap::new();
    for pair in text.split(',').filter(|p| !p.trim().is_empty()) {
        let Some((name, value)) = pair.split_once('=') else {
            return Err("each header is name=value, separated by commas".into());
        };
        let name = name.trim();
        let decoded = percent_decode(value.trim());
        let header = HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| format!("`{name}` is not a header name"))?;
        let mut value = HeaderValue::from_str(&decoded)
            .map_err(|_| format!("the value of `{name}` is not a header value"))?;
        value.set_sensitive(true);
        headers.insert(header, value);
    }
    Ok(headers)
}

/// `%XX` escapes decoded (the W3C baggage form OTLP's header variables take).
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bare_collector_address_gets_the_traces_path() {
        let url = |text: &str| traces_url(reqwest::Url::parse(text).unwrap()).to_string();
        assert_eq!(
            url("http://127.0.0.1:4318"),
            "http://127.0.0.1:4318/v1/traces"
        );
        assert_eq!(
            url("http://127.0.0.1:4318/"),
            "http://127.0.0.1:4318/v1/traces"
        );
        assert_eq!(
            url("http://h:1/otlp/v1/traces"),
            "http://h:1/otlp/v1/traces"
        );
    }

    #[test]
    fn header_variables_are_read_and_never_echoed() {
        let headers = parse_headers("x-honeycomb-team=abc%3D, authorization=Bearer%20t").unwrap();
        assert_eq!(headers["x-honeycomb-team"], "abc=");
        assert_eq!(headers["authorization"], "Bearer t");
        assert!(headers["authorization"].is_sensitive());
        let wrong = parse_headers("api-key").unwrap_err();
        assert!(
            !wrong.contains("api-key") || wrong.contains("name=value"),
            "{wrong}"
        );
        let wrong = parse_headers("bad name=sk-secret").unwrap_err();
        assert!(!wrong.contains("sk-secret"), "{wrong}");
        let wrong = parse_headers("k=sk-\u{1}secret").unwrap_err();
        assert!(!wrong.contains("secret"), "{wrong}");
    }

    #[test]
    fn a_full_queue_drops_and_counts() {
        let (queue, _queued) = mpsc::channel(1);
        let counts = Arc::new(Counts::default());
        let spans = Spans {
            run: Mutex::new(None),
            queue,
            counts: counts.clone(),
        };
        let header = crate::records::RunHeader {
            request_id_prefix: Some("llmload-00000001".into()),
            target: "http://127.0.0.1:1/v1".into(),
            ..Default::default()
        };
        spans.on_event(Event::RunStarted(&header));
        let record = crate::records::RequestRecord::default();
        for _ in 0..3 {
            spans.on_event(Event::RequestFinished(&record));
        }
        assert_eq!(counts.overflowed.load(Ordering::Relaxed), 2);
    }
}
