//! Pushes the registry's samples to a Prometheus remote-write receiver (`run --remote-write
//! URL`): for runs shorter than a scrape interval, and shards on many machines that no
//! Prometheus can reach, each pushing its own series (labelled with its shard).
//!
//! Every interval, and once more when the run is over, the registry's samples as they stand go
//! out as one remote-write 1.0 request: a protobuf `WriteRequest`, snappy-compressed. The
//! samples are cumulative, so nothing is queued: a push that fails, times out, or is still
//! going when the next falls due is dropped (its samples counted as dropped), and the next
//! carries the counts it would have. A receiver that is down or slow costs the run nothing but
//! the pusher's own thread; the counts of what went and what was dropped are said when it stops.
//!
//! The four protobuf messages are written by hand (`protobuf.rs`; tested against the wire
//! format below).
//!
//! Not for: what is counted (`registry.rs`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::background::{post_protobuf, Background};
use super::protobuf::{bytes_field, double_field, varint_field};
use super::registry::{Registry, Series};

/// The longest one push may take before it is given up (and its samples dropped).
const PUSH_TIMEOUT: Duration = Duration::from_secs(2);

/// What the pusher did, for the line said when it stops.
#[derive(Debug, Default)]
pub struct Pushed {
    /// Pushes the receiver accepted (2xx).
    pub accepted: AtomicU64,
    /// Samples in them.
    pub samples: AtomicU64,
    /// Pushes that failed, timed out or were refused.
    pub failed: AtomicU64,
    /// Samples in those.
    pub dropped: AtomicU64,
}

/// Pushes until it is stopped, then once more.
pub struct RemoteWriter {
    pushed: Arc<Pushed>,
    pushing: Background,
    /// The first failure, in a sentence (never the URL's credentials).
    first_failure: Arc<std::sync::Mutex<Option<String>>>,
}

impl RemoteWriter {
    /// Starts pushing `registry`'s samples to `url` every `interval`.
    pub fn start(
        url: reqwest::Url,
        registry: Arc<Registry>,
        interval: Duration,
    ) -> std::io::Result<RemoteWriter> {
        let pushed = Arc::new(Pushed::default());
        let first_failure = Arc::new(std::sync::Mutex::new(None));
        let (counts, failures) = (pushed.clone(), first_failure.clone());
        let pushing = Background::start("llmload-remote-write", move |mut stopped| async move {
            let client = reqwest::Client::builder()
                .timeout(PUSH_TIMEOUT)
                .build()
                .unwrap_or_default();
            let pusher = Pusher {
                client,
                url,
                registry,
                pushed: counts,
                first_failure: failures,
            };
            let mut ticks = tokio::time::interval(interval);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
            ticks.tick().await;
            loop {
                // The stop first: after a slow push the next tick is due at once, and a
                // fair choice between them could push (and wait out a timeout) again and
                // again.
                tokio::select! {
                    biased;
                    _ = &mut stopped => break,
                    _ = ticks.tick() => pusher.push().await,
                }
            }
            // The final counts, which a short run's receiver would otherwise never see.
            pusher.push().await;
        })?;
        Ok(RemoteWriter {
            pushed,
            pushing,
            first_failure,
        })
    }

    /// Pushes the final counts and stops; what went and what was dropped, in a sentence.
    pub fn finish(mut self) -> String {
        self.pushing.stop();
        let p = &self.pushed;
        let load = |n: &AtomicU64| n.load(Ordering::Relaxed);
        let mut said = format!(
            "remote-write: {} push(es) accepted ({} samples)",
            load(&p.accepted),
            load(&p.samples)
        );
        if load(&p.failed) > 0 {
            let why = self
                .first_failure
                .lock()
                .ok()
                .and_then(|f| f.clone())
                .unwrap_or_default();
            said.push_str(&format!(
                ", {} failed: {} samples dropped (first: {why})",
                load(&p.failed),
                load(&p.dropped)
            ));
        }
        said
    }
}

/// One push's worth of what the pusher holds.
struct Pusher {
    client: reqwest::Client,
    url: reqwest::Url,
    registry: Arc<Registry>,
    pushed: Arc<Pushed>,
    first_failure: Arc<std::sync::Mutex<Option<String>>>,
}

impl Pusher {
    /// Pushes the samples as they stand; counts what came of it.
    async fn push(&self) {
        let samples = self.registry.samples();
        if samples.is_empty() {
            return;
        }
        let now_ms = chrono::Utc::now().timestamp_millis();
        let body = match snap::raw::Encoder::new().compress_vec(&write_request(&samples, now_ms)) {
            Ok(body) => body,
            Err(e) => return self.failed(samples.len(), format!("cannot compress: {e}")),
        };
        let headers = [
            ("Content-Encoding", "snappy"),
            ("X-Prometheus-Remote-Write-Version", "0.1.0"),
        ];
        match post_protobuf(&self.client, &self.url, &headers, body).await {
            Ok(()) => {
                self.pushed.accepted.fetch_add(1, Ordering::Relaxed);
                let count = samples.len() as u64;
                self.pushed.samples.fetch_add(count, Ordering::Relaxed);
            }
            Err(why) => self.failed(samples.len(), why),
        }
    }

    fn failed(&self, samples: usize, why: String) {
        self.pushed.failed.fetch_add(1, Ordering::Relaxed);
        self.pushed
            .dropped
            .fetch_add(samples as u64, Ordering::Relaxed);
        if let Ok(mut first) = self.first_failure.lock() {
            first.get_or_insert(why);
        }
    }
}

/// A remote-write 1.0 `WriteRequest` of `samples` at `timestamp_ms`: each a `TimeSeries`
/// (field 1) of its labels, `__name__` first and all sorted by name as the protocol asks
/// (field 1 each: `Label { name = 1; value = 2 }`), and one `Sample { double value = 1; int64
/// timestamp = 2 }` (field 2).
fn write_request(samples: &[Series], timestamp_ms: i64) -> Vec<u8> {
    let mut request = Vec::new();
    for series in samples {
        let mut labels: Vec<(&str, &str)> = series
            .labels
            .iter()
            .map(|(name, value)| (*name, value.as_str()))
            .collect();
        labels.push(("__name__", series.name.as_str()));
        labels.sort_by(|a, b| a.0.cmp(b.0));
        let mut time_series = Vec::new();
        for (name, value) in labels {
            let mut label = Vec::new();
            bytes_field(&mut label, 1, name.as_bytes());
            bytes_field(&mut label, 2, value.as_bytes());
            bytes_field(&mut time_series, 1, &label);
        }
        let mut sample = Vec::new();
        double_field(&mut sample, 1, series.value);
        varint_field(&mut sample, 2, timestamp_ms as u64);
        bytes_field(&mut time_series, 2, &sample);
        bytes_field(&mut request, 1, &time_series);
    }
    request
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_request_is_the_protobuf_wire_format() {
        let samples = [Series {
            name: "m_total".into(),
            labels: vec![("run", "r".into())],
            value: 2.0,
        }];
        let bytes = write_request(&samples, 300);
        let label = |name: &[u8], value: &[u8]| {
            let mut l = vec![0x0a, name.len() as u8];
            l.extend_from_slice(name);
            l.extend_from_slice(&[0x12, value.len() as u8]);
            l.extend_from_slice(value);
            let mut field = vec![0x0a, l.len() as u8];
            field.extend(l);
            field
        };
        let mut series = label(b"__name__", b"m_total");
        series.extend(label(b"run", b"r"));
        // Sample: 0x09 then the double's 8 bytes; 0x10 then 300 as a varint (0xac 0x02).
        let mut sample = vec![0x09];
        sample.extend_from_slice(&2.0f64.to_le_bytes());
        sample.extend_from_slice(&[0x10, 0xac, 0x02]);
        series.extend([0x12, sample.len() as u8]);
        series.extend(sample);
        let mut expected = vec![0x0a, series.len() as u8];
        expected.extend(series);
        assert_eq!(bytes, expected);
    }
}
