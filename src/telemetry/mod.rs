//! Server telemetry: what the target says about itself while it is loaded, scraped from its
//! Prometheus endpoint, kept in the run directory (`telemetry.jsonl`), beside the records.
//!
//! [`scrape`] collects during a run, on a thread and a connection of its own, off the hot path;
//! this module defines the file and reads it back. It knows the metric names of vLLM, SGLang, TGI
//! and llama.cpp ([`names`]) and keeps only those. It judges and summarises nothing: a phase's
//! summary is [`crate::metrics::server`]'s. A server that does not answer, or answers with names
//! llmload does not know, is a note in the report, never a failed run.

pub mod names;
pub mod prom;
pub mod scrape;

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
pub use names::{Engine, Kind, Signal};

/// The file a run's telemetry goes to, in its directory.
pub const FILE: &str = "telemetry.jsonl";

/// One line of `telemetry.jsonl`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum TelemetryLine {
    /// The first line: where it was scraped from, and what the server said it is.
    Source {
        /// The metrics URL (without credentials).
        url: String,
        /// How often it was scraped, in seconds.
        interval_s: f64,
        /// The server's version, where it tells (vLLM's /version, llama.cpp's /props, TGI's
        /// /info, SGLang's /get_server_info).
        server_version: Option<String>,
    },
    /// One scrape: the known signals' values at that moment.
    Sample(TelemetrySample),
    /// A scrape that failed, or a server with no known metric: why.
    Problem {
        /// When, in ms since the Unix epoch.
        at_unix_ms: f64,
        /// What happened.
        message: String,
    },
}

/// One scrape of the server's metrics.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TelemetrySample {
    /// When the answer came, in ms since the Unix epoch.
    pub at_unix_ms: f64,
    /// The engine whose names it used.
    pub engine: Option<Engine>,
    /// Gauges and counters.
    #[serde(default)]
    pub values: BTreeMap<Signal, f64>,
    /// Histograms (cumulative since the server started).
    #[serde(default)]
    pub histograms: BTreeMap<Signal, HistogramSample>,
}

/// A Prometheus histogram at one moment.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HistogramSample {
    /// Finite upper bounds (seconds), ascending; `count` is the `+Inf` bucket.
    pub le: Vec<f64>,
    /// Cumulative counts at each bound.
    pub counts: Vec<f64>,
    /// Sum of the observations (seconds).
    pub sum: f64,
    /// Count of the observations.
    pub count: f64,
}

/// A run's telemetry, read back.
#[derive(Debug, Clone, Default)]
pub struct Telemetry {
    /// The metrics URL.
    pub url: Option<String>,
    /// The scrape interval, seconds.
    pub interval_s: Option<f64>,
    /// What the server said it is.
    pub server_version: Option<String>,
    /// Every scrape that answered, in order.
    pub samples: Vec<TelemetrySample>,
    /// What went wrong, if anything did.
    pub problems: Vec<String>,
}

impl Telemetry {
    /// The engine whose names the server used.
    pub fn engine(&self) -> Option<Engine> {
        self.samples.iter().find_map(|s| s.engine)
    }
}

/// Reads `telemetry.jsonl` in `dir`; `None` when the run kept none.
pub fn read(dir: &Path) -> Result<Option<Telemetry>> {
    let path = dir.join(FILE);
    // A day of scrapes every second is some 100 MB.
    let text = match crate::files::read_text_bounded(&path, 1 << 30) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io("read", &path, e)),
    };
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let mut telemetry = Telemetry::default();
    for (number, line) in lines.iter().enumerate() {
        let parsed = match serde_json::from_str::<TelemetryLine>(line) {
            Ok(parsed) => parsed,
            // A run killed mid-write leaves its last line cut short: that one is passed over.
            Err(_) if number + 1 == lines.len() => break,
            Err(e) => {
                return Err(Error::Records {
                    path,
                    line: Some(number + 1),
                    message: format!("not a telemetry line: {e}"),
                })
            }
        };
        match parsed {
            TelemetryLine::Source {
                url,
                interval_s,
                server_version,
            } => {
                telemetry.url = Some(url);
                telemetry.interval_s = Some(interval_s);
                telemetry.server_version = server_version;
            }
            TelemetryLine::Sample(sample) => telemetry.samples.push(sample),
            TelemetryLine::Problem { message, .. } => telemetry.problems.push(message),
        }
    }
    Ok(Some(telemetry))
}

/// The samples of one scrape that llmload knows, gathered by signal.
pub fn gather(samples: &[prom::Sample], at_unix_ms: f64) -> TelemetrySample {
    let mut out = TelemetrySample {
        at_unix_ms,
        ..TelemetrySample::default()
    };
    // Histogram buckets by signal, then by bound, summed over series (labels).
    let mut buckets: BTreeMap<Signal, BTreeMap<u64, (f64, f64)>> = BTreeMap::new();
    for sample in samples {
        let Some((engine, signal, part)) = names::identify(&sample.name) else {
            continue;
        };
        if !sample.value.is_finite() {
            continue;
        }
        out.engine.get_or_insert(engine);
        match part {
            names::Part::Value => {
                let slot = out.values.entry(signal).or_insert(if signal.sums() {
                    0.0
                } else {
                    f64::NEG_INFINITY
                });
                *slot = if signal.sums() {
                    *slot + sample.value
                } else {
                    slot.max(sample.value)
                };
            }
            names::Part::Bucket => {
                let le = match sample.label("le") {
                    Some("+Inf") | Some("Inf") => f64::INFINITY,
                    Some(v) => match v.parse::<f64>() {
                        Ok(v) => v,
                        Err(_) => continue,
                    },
                    None => continue,
                };
                let entry = buckets
                    .entry(signal)
                    .or_default()
                    .entry(le.to_bits())
                    .or_insert((le, 0.0));
                entry.1 += sample.value;
            }
            names::Part::Sum => out.histograms.entry(signal).or_default().sum += sample.value,
            names::Part::Count => out.histograms.entry(signal).or_default().count += sample.value,
        }
    }
    for (signal, by_bound) in buckets {
        let mut bounds: Vec<(f64, f64)> = by_bound
            .into_values()
            .filter(|(le, _)| le.is_finite())
            .collect();
        bounds.sort_by(|a, b| a.0.total_cmp(&b.0));
        let histogram = out.histograms.entry(signal).or_default();
        histogram.le = bounds.iter().map(|b| b.0).collect();
        histogram.counts = bounds.iter().map(|b| b.1).collect();
    }
    // A histogram without buckets (a lone _sum) says too little to keep.
    out.histograms.retain(|_, h| !h.le.is_empty());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scrape_gathered_by_signal() {
        let text = "vllm:num_requests_running{engine=\"0\"} 3\nvllm:num_requests_running{engine=\"1\"} 2\n\
            vllm:kv_cache_usage_perc{engine=\"0\"} 0.5\nvllm:kv_cache_usage_perc{engine=\"1\"} 0.75\n\
            vllm:time_to_first_token_seconds_bucket{le=\"0.1\"} 4\nvllm:time_to_first_token_seconds_bucket{le=\"+Inf\"} 5\n\
            vllm:time_to_first_token_seconds_sum 0.9\nvllm:time_to_first_token_seconds_count 5\n\
            process_cpu_seconds_total 12\n";
        let sample = gather(&prom::parse(text), 1.0);
        assert_eq!(sample.engine, Some(Engine::Vllm));
        assert_eq!(sample.values[&Signal::Running], 5.0);
        assert_eq!(sample.values[&Signal::KvCache], 0.75);
        let ttft = &sample.histograms[&Signal::Ttft];
        assert_eq!(ttft.le, vec![0.1]);
        assert_eq!(ttft.counts, vec![4.0]);
        assert_eq!((ttft.sum, ttft.count), (0.9, 5.0));
        assert_eq!(sample.values.len(), 2);
    }
}
