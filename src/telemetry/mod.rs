//! Server telemetry: what the target says about itself while it is loaded, scraped from its
//! Prometheus endpoint, kept in the run directory (`telemetry.jsonl`), beside the records.
//!
//! [`scrape`] collects during a run, on a thread and a connection of its own, off the hot path;
//! this module defines the file and reads it back. It knows the metric names of vLLM, SGLang, TGI
//! and llama.cpp ([`names`]) and keeps only those. It judges and summarises nothing: a phase's
//! summary is [`crate::metrics::server`]'s. A server that does not answer, or answers with names
//! llmload does not know, is a note in the report, never a failed run.

pub(crate) mod command;
pub mod gpus;
pub mod names;
pub mod prom;
pub(crate) mod promql;
pub mod scrape;
pub(crate) mod smi;

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
        /// Which of the plan's metrics URLs this is (0 for the first, or the only one).
        #[serde(default, skip_serializing_if = "is_zero")]
        target: u32,
        /// In a merged run: the shards that scraped it (their samples de-duplicated by time).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        scraped_by: Vec<u32>,
    },
    /// One scrape: the known signals' values at that moment.
    Sample(TelemetrySample),
    /// The GPUs a GPU exporter described, once, at its first scrape that did.
    Gpus {
        /// Each GPU, by host and index.
        gpus: Vec<gpus::Gpu>,
        /// The target it concerns.
        #[serde(default, skip_serializing_if = "is_zero")]
        target: u32,
    },
    /// A source that stopped before the run did (a `gpus` command that ended): when, and why.
    Ended {
        /// When, in ms since the Unix epoch.
        at_unix_ms: f64,
        /// What happened (its exit status, its last words).
        message: String,
        /// The target it concerns.
        #[serde(default, skip_serializing_if = "is_zero")]
        target: u32,
    },
    /// A scrape that failed, or a server with no known metric: why.
    Problem {
        /// When, in ms since the Unix epoch.
        at_unix_ms: f64,
        /// What happened.
        message: String,
        /// The target it concerns.
        #[serde(default, skip_serializing_if = "is_zero")]
        target: u32,
    },
}

fn is_zero(n: &u32) -> bool {
    *n == 0
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
    /// Which of the plan's metrics URLs answered (0 for the first, or the only one).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub target: u32,
    /// In a merged run: the shard whose scrape this was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<u32>,
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

/// A run's telemetry, read back: one series, the only target's or every target's summed, and
/// each target's apart.
#[derive(Debug, Clone, Default)]
pub struct Telemetry {
    /// The metrics URL (several, joined, when replicas are summed).
    pub url: Option<String>,
    /// The scrape interval, seconds.
    pub interval_s: Option<f64>,
    /// What the server said it is.
    pub server_version: Option<String>,
    /// Every scrape that answered, in order.
    pub samples: Vec<TelemetrySample>,
    /// What went wrong, if anything did.
    pub problems: Vec<String>,
    /// Each metrics URL's own series, in the plan's order (one for a single server).
    pub targets: Vec<TargetTelemetry>,
    /// The GPUs the GPU exporters among them described.
    pub gpus: Vec<gpus::Gpu>,
}

/// One metrics URL's telemetry.
#[derive(Debug, Clone, Default)]
pub struct TargetTelemetry {
    /// Its URL.
    pub url: String,
    /// The scrape interval, seconds.
    pub interval_s: f64,
    /// What the server said it is.
    pub server_version: Option<String>,
    /// Every scrape that answered, in order.
    pub samples: Vec<TelemetrySample>,
    /// What went wrong, if anything did.
    pub problems: Vec<String>,
    /// In a merged run: the shards that scraped it.
    pub scraped_by: Vec<u32>,
    /// The GPUs it described, when it is a GPU exporter.
    pub gpus: Vec<gpus::Gpu>,
    /// When it stopped before the run did (ms since the Unix epoch), and why.
    pub ended: Option<(f64, String)>,
}

impl Telemetry {
    /// The engine whose names the server used (the serving engine's, where a GPU exporter
    /// was scraped beside it).
    pub fn engine(&self) -> Option<Engine> {
        self.samples
            .iter()
            .filter_map(|s| s.engine)
            .reduce(|a, b| the_engine(Some(a), b))
    }
}

/// The engine a series is named by, of the one it has so far and `another` whose names it
/// also holds: the first serving engine, else the exporter.
fn the_engine(so_far: Option<Engine>, another: Engine) -> Engine {
    match so_far {
        Some(engine) if engine.serves() || !another.serves() => engine,
        Some(_) | None => another,
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
    let mut targets: Vec<TargetTelemetry> = Vec::new();
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
        let slot = |targets: &mut Vec<TargetTelemetry>, index: u32| {
            let index = index as usize;
            if targets.len() <= index {
                targets.resize_with(index + 1, TargetTelemetry::default);
            }
            index
        };
        match parsed {
            TelemetryLine::Source {
                url,
                interval_s,
                server_version,
                target,
                scraped_by,
            } if (target as usize) < MAX_TARGETS => {
                let at = slot(&mut targets, target);
                targets[at] = TargetTelemetry {
                    url,
                    interval_s,
                    server_version,
                    scraped_by,
                    ..std::mem::take(&mut targets[at])
                };
            }
            TelemetryLine::Sample(sample) if (sample.target as usize) < MAX_TARGETS => {
                let at = slot(&mut targets, sample.target);
                targets[at].samples.push(sample);
            }
            TelemetryLine::Gpus { gpus, target } if (target as usize) < MAX_TARGETS => {
                let at = slot(&mut targets, target);
                targets[at].gpus = gpus;
            }
            TelemetryLine::Ended {
                at_unix_ms,
                message,
                target,
            } if (target as usize) < MAX_TARGETS => {
                let at = slot(&mut targets, target);
                targets[at].ended = Some((at_unix_ms, message));
            }
            TelemetryLine::Problem {
                message, target, ..
            } if (target as usize) < MAX_TARGETS => {
                let at = slot(&mut targets, target);
                targets[at].problems.push(message);
            }
            _ => {}
        }
    }
    Ok(Some(Telemetry::of_targets(targets)))
}

/// The most metrics URLs a run's telemetry is read for (a plan names at most 64).
const MAX_TARGETS: usize = 256;

impl Telemetry {
    /// The run's telemetry from each target's: the only one's as it is, several summed.
    pub fn of_targets(targets: Vec<TargetTelemetry>) -> Telemetry {
        let gpus = targets.iter().flat_map(|t| t.gpus.clone()).collect();
        Telemetry {
            gpus,
            ..Telemetry::of_series(targets)
        }
    }

    /// [`Telemetry::of_targets`]' series and sources.
    fn of_series(targets: Vec<TargetTelemetry>) -> Telemetry {
        match targets.as_slice() {
            [] => Telemetry::default(),
            [only] => Telemetry {
                url: Some(only.url.clone()),
                interval_s: Some(only.interval_s),
                server_version: only.server_version.clone(),
                samples: only.samples.clone(),
                problems: only.problems.clone(),
                targets,
                gpus: Vec::new(),
            },
            several => {
                let versions: Vec<&str> = several
                    .iter()
                    .filter_map(|t| t.server_version.as_deref())
                    .collect();
                Telemetry {
                    url: Some(
                        several
                            .iter()
                            .map(|t| t.url.as_str())
                            .collect::<Vec<_>>()
                            .join(" + "),
                    ),
                    interval_s: several.iter().map(|t| t.interval_s).reduce(f64::max),
                    // One version when every replica says the same.
                    server_version: versions
                        .first()
                        .filter(|v| {
                            versions.len() == several.len() && versions.iter().all(|w| w == *v)
                        })
                        .map(|v| v.to_string()),
                    samples: sum_targets(several),
                    problems: several.iter().flat_map(|t| t.problems.clone()).collect(),
                    targets,
                    gpus: Vec::new(),
                }
            }
        }
    }
}

/// Several targets' series as one: at each scrape of the first target that has samples, every
/// target's sample of that round (or its latest before), summed (a signal that `sums()` adds up across replicas, the
/// others take the largest: the fullest KV cache). Counters and histograms are cumulative, so
/// a target's latest sample is its value then; a gauge older than two intervals is left out
/// (that replica stopped answering). Rounds before every target has answered once are left
/// out, so a counter's sum never jumps when a late replica joins.
fn sum_targets(targets: &[TargetTelemetry]) -> Vec<TelemetrySample> {
    // A target that never answered has nothing to add (its problems say why).
    let targets: Vec<&TargetTelemetry> = targets.iter().filter(|t| !t.samples.is_empty()).collect();
    let Some(clock) = targets.first() else {
        return Vec::new();
    };
    let mut next = vec![0usize; targets.len()];
    let mut out = Vec::with_capacity(clock.samples.len());
    for tick in &clock.samples {
        let at = tick.at_unix_ms;
        let mut latest: Vec<&TelemetrySample> = Vec::with_capacity(targets.len());
        for (target, index) in targets.iter().zip(next.iter_mut()) {
            while *index < target.samples.len() && target.samples[*index].at_unix_ms <= at {
                *index += 1;
            }
            // The sample of the same round: the nearest, a later one only within half an
            // interval (a round's scrapes answer a little apart); else the latest before.
            let before = index.checked_sub(1).map(|i| &target.samples[i]);
            let after = target
                .samples
                .get(*index)
                .filter(|s| s.at_unix_ms - at <= target.interval_s.max(0.1) * 500.0);
            let nearest = match (before, after) {
                (Some(b), Some(a)) if a.at_unix_ms - at < at - b.at_unix_ms => Some(a),
                (Some(b), _) => Some(b),
                (None, a) => a,
            };
            latest.extend(nearest);
        }
        if latest.len() < targets.len() {
            continue;
        }
        let mut sum = TelemetrySample {
            at_unix_ms: at,
            engine: latest
                .iter()
                .filter_map(|s| s.engine)
                .reduce(|a, b| the_engine(Some(a), b)),
            ..TelemetrySample::default()
        };
        for (sample, target) in latest.iter().zip(&targets) {
            let fresh = at - sample.at_unix_ms <= target.interval_s.max(0.1) * 2000.0;
            for (signal, value) in &sample.values {
                if signal.kind() == Kind::Gauge && !fresh {
                    continue;
                }
                add_value(&mut sum.values, *signal, *value);
            }
            for (signal, histogram) in &sample.histograms {
                match sum.histograms.get_mut(signal) {
                    None => {
                        sum.histograms.insert(*signal, histogram.clone());
                    }
                    // Replicas of one engine share its bounds; other bounds cannot be added.
                    Some(total) if total.le == histogram.le => {
                        for (into, count) in total.counts.iter_mut().zip(&histogram.counts) {
                            *into += count;
                        }
                        total.sum += histogram.sum;
                        total.count += histogram.count;
                    }
                    Some(_) => {}
                }
            }
        }
        out.push(sum);
    }
    out
}

/// The shards' telemetry as one run's (`(shard, directory)`, into `out`): each metrics URL one
/// series, every shard's scrapes of it together in time order, a scrape within half an
/// interval of the last one kept left out (the same moment, scraped twice), each kept sample
/// naming its shard. Nothing is written when no shard kept telemetry.
pub fn merge_shards(shards: &[(u32, &Path)], out: &Path) -> Result<()> {
    let mut targets: Vec<TargetTelemetry> = Vec::new();
    for &(shard, dir) in shards {
        let Some(telemetry) = read(dir)? else {
            continue;
        };
        for target in telemetry.targets {
            let at = match targets.iter().position(|t| t.url == target.url) {
                Some(at) => at,
                None => {
                    targets.push(TargetTelemetry {
                        url: target.url.clone(),
                        interval_s: target.interval_s,
                        ..TargetTelemetry::default()
                    });
                    targets.len() - 1
                }
            };
            let into = &mut targets[at];
            if !target.samples.is_empty() && !into.scraped_by.contains(&shard) {
                into.scraped_by.push(shard);
            }
            into.server_version = into.server_version.take().or(target.server_version);
            if into.gpus.is_empty() {
                into.gpus = target.gpus;
            }
            into.samples
                .extend(target.samples.into_iter().map(|sample| TelemetrySample {
                    shard: Some(shard),
                    ..sample
                }));
            into.problems.extend(
                target
                    .problems
                    .into_iter()
                    .map(|problem| format!("shard {shard}: {problem}")),
            );
            // One series at a time: memory holds one target's series and one shard's, however
            // many shards scraped it.
            one_per_round(&mut into.samples, into.interval_s);
        }
    }
    if targets.is_empty() {
        return Ok(());
    }
    let path = out.join(FILE);
    crate::files::write_whole(&path, |file| {
        let mut line = |line: &TelemetryLine| -> std::io::Result<()> {
            serde_json::to_writer(&mut *file, line)?;
            std::io::Write::write_all(file, b"\n")
        };
        for (index, target) in (0u32..).zip(targets.iter_mut()) {
            target.scraped_by.sort_unstable();
            line(&TelemetryLine::Source {
                url: target.url.clone(),
                interval_s: target.interval_s,
                server_version: target.server_version.clone(),
                target: index,
                scraped_by: target.scraped_by.clone(),
            })?;
            if !target.gpus.is_empty() {
                line(&TelemetryLine::Gpus {
                    gpus: target.gpus.clone(),
                    target: index,
                })?;
            }
            for sample in &target.samples {
                line(&TelemetryLine::Sample(TelemetrySample {
                    target: index,
                    ..sample.clone()
                }))?;
            }
            if let Some((at_unix_ms, message)) = &target.ended {
                line(&TelemetryLine::Ended {
                    at_unix_ms: *at_unix_ms,
                    message: message.clone(),
                    target: index,
                })?;
            }
            for problem in &target.problems {
                line(&TelemetryLine::Problem {
                    // When it happened is in the shard's own file; the merged run keeps what.
                    at_unix_ms: 0.0,
                    message: problem.clone(),
                    target: index,
                })?;
            }
        }
        Ok(())
    })
    .map_err(|e| Error::io("write", &path, e))
}

/// Scrapes in time order, one per moment: a scrape within half an interval of the last one
/// kept is the same moment scraped again (by another shard), and is left out.
fn one_per_round(samples: &mut Vec<TelemetrySample>, interval_s: f64) {
    samples.sort_by(|a, b| a.at_unix_ms.total_cmp(&b.at_unix_ms));
    let same_round_ms = interval_s * 500.0;
    let mut last_kept = f64::NEG_INFINITY;
    samples.retain(|sample| {
        let keep = sample.at_unix_ms - last_kept >= same_round_ms;
        if keep {
            last_kept = sample.at_unix_ms;
        }
        keep
    });
}

/// One more value of `signal` into `values`: added where the signal sums (running requests,
/// counters: over a server's series and over replicas alike), the largest kept where it does
/// not (shares such as the KV cache's).
fn add_value(values: &mut BTreeMap<Signal, f64>, signal: Signal, value: f64) {
    let slot = values.entry(signal).or_insert(if signal.sums() {
        0.0
    } else {
        f64::NEG_INFINITY
    });
    *slot = if signal.sums() {
        *slot + value
    } else {
        slot.max(value)
    };
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
        if !signal.is_reading(engine, sample.value) {
            continue;
        }
        out.engine = Some(the_engine(out.engine, engine));
        match part {
            names::Part::Value => {
                add_value(&mut out.values, signal, sample.value * signal.scale(engine));
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

    fn scrape(target: u32, at: f64, running: f64, tokens: f64) -> TelemetrySample {
        TelemetrySample {
            at_unix_ms: at,
            engine: Some(Engine::Vllm),
            values: [
                (Signal::Running, running),
                (Signal::GenerationTokens, tokens),
            ]
            .into(),
            target,
            ..TelemetrySample::default()
        }
    }

    fn target(url: &str, samples: Vec<TelemetrySample>) -> TargetTelemetry {
        TargetTelemetry {
            url: url.into(),
            interval_s: 1.0,
            samples,
            ..TargetTelemetry::default()
        }
    }

    #[test]
    fn replicas_are_summed_round_by_round() {
        let a = target(
            "a",
            vec![
                scrape(0, 1000.0, 3.0, 10.0),
                scrape(0, 2000.0, 5.0, 20.0),
                scrape(0, 3000.0, 4.0, 30.0),
                // The last scrape, at the stop: sooner than an interval.
                scrape(0, 3100.0, 0.0, 31.0),
            ],
        );
        let b = target(
            "b",
            vec![
                // It answers from the second round, a little after the first replica.
                scrape(1, 2004.0, 1.0, 100.0),
                scrape(1, 3003.0, 2.0, 110.0),
                scrape(1, 3101.0, 0.0, 111.0),
            ],
        );
        let telemetry = Telemetry::of_targets(vec![a, b]);
        assert_eq!(telemetry.url.as_deref(), Some("a + b"));
        let summed: Vec<(f64, f64, f64)> = telemetry
            .samples
            .iter()
            .map(|s| {
                (
                    s.at_unix_ms,
                    s.values[&Signal::Running],
                    s.values[&Signal::GenerationTokens],
                )
            })
            .collect();
        // The first round is left out: b had not answered, and its counter would jump in.
        assert_eq!(
            summed,
            vec![
                (2000.0, 6.0, 120.0),
                (3000.0, 6.0, 140.0),
                (3100.0, 0.0, 142.0)
            ]
        );
        assert_eq!(telemetry.targets.len(), 2);
        // A replica that stops answering: its counter stays, its gauge is left out when stale.
        let a = target(
            "a",
            (1..=5)
                .map(|i| scrape(0, i as f64 * 1000.0, 1.0, i as f64))
                .collect(),
        );
        let b = target("b", vec![scrape(1, 1001.0, 7.0, 50.0)]);
        let never = target("never", Vec::new());
        let telemetry = Telemetry::of_targets(vec![a, b, never]);
        assert_eq!(telemetry.samples.len(), 5);
        let last = telemetry.samples.last().unwrap();
        assert_eq!(last.values[&Signal::Running], 1.0);
        assert_eq!(last.values[&Signal::GenerationTokens], 55.0);
    }

    #[test]
    fn shards_scrapes_of_one_target_merge_into_one_series() {
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, lines: &[TelemetryLine]| {
            let shard = dir.path().join(name);
            std::fs::create_dir_all(&shard).unwrap();
            let text: String = lines
                .iter()
                .map(|l| serde_json::to_string(l).unwrap() + "\n")
                .collect();
            std::fs::write(shard.join(FILE), text).unwrap();
            shard
        };
        let source = |url: &str, target: u32| TelemetryLine::Source {
            url: url.into(),
            interval_s: 1.0,
            server_version: None,
            target,
            scraped_by: Vec::new(),
        };
        let one = write(
            "one",
            &[
                source("http://s/metrics", 0),
                TelemetryLine::Sample(scrape(0, 1000.0, 1.0, 1.0)),
                TelemetryLine::Sample(scrape(0, 2000.0, 2.0, 2.0)),
            ],
        );
        // The second shard names the same server second, and scraped it 30 ms after the first.
        let two = write(
            "two",
            &[
                source("http://other/metrics", 0),
                source("http://s/metrics", 1),
                TelemetryLine::Sample(scrape(1, 1030.0, 9.0, 9.0)),
                TelemetryLine::Sample(scrape(1, 2500.0, 3.0, 3.0)),
                TelemetryLine::Problem {
                    at_unix_ms: 1.0,
                    message: "http://other/metrics: cannot connect".into(),
                    target: 0,
                },
            ],
        );
        let out = dir.path().join("merged");
        std::fs::create_dir_all(&out).unwrap();
        merge_shards(&[(1, &one), (2, &two)], &out).unwrap();
        let merged = read(&out).unwrap().unwrap();
        assert_eq!(merged.targets.len(), 2);
        let s = &merged.targets[0];
        assert_eq!(
            (s.url.as_str(), s.scraped_by.clone()),
            ("http://s/metrics", vec![1, 2])
        );
        let kept: Vec<(f64, Option<u32>)> =
            s.samples.iter().map(|x| (x.at_unix_ms, x.shard)).collect();
        assert_eq!(
            kept,
            vec![(1000.0, Some(1)), (2000.0, Some(1)), (2500.0, Some(2))]
        );
        let other = &merged.targets[1];
        assert!(other.samples.is_empty() && other.scraped_by.is_empty());
        assert_eq!(
            other.problems,
            vec!["shard 2: http://other/metrics: cannot connect"]
        );
    }

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

    /// Two GPUs as dcgm-exporter prints them (its default counters, every label it adds, and a
    /// field the GPU does not support written as DCGM's blank).
    #[test]
    fn a_dcgm_exporters_gpus_gathered_in_llmloads_units() {
        let text = include_str!("../../tests/fixtures/telemetry/dcgm-exporter.txt");
        let sample = gather(&prom::parse(text), 1.0);
        assert_eq!(sample.engine, Some(Engine::Dcgm));
        let value = |signal| sample.values.get(&signal).copied();
        // Watts, MiB and joules add up over the GPUs; utilization, clock and temperature are
        // the largest (the busiest, fastest, hottest GPU).
        assert_eq!(value(Signal::GpuPower), Some(412.337 + 389.105));
        assert_eq!(value(Signal::GpuMemoryUsed), Some(76238.0 + 76240.0));
        assert_eq!(value(Signal::GpuMemoryFree), Some(4821.0 + 4819.0));
        assert_eq!(
            value(Signal::GpuEnergy),
            Some(8816423519.0 * 0.001 + 8790112004.0 * 0.001)
        );
        assert_eq!(value(Signal::GpuUtilization), Some(0.97));
        assert_eq!(value(Signal::GpuSmClock), Some(1980.0));
        assert_eq!(value(Signal::GpuTemperature), Some(67.0));
        assert_eq!(sample.values.len(), 7, "{:?}", sample.values);
    }

    #[test]
    fn dcgm_blanks_are_no_readings_and_the_engine_names_a_mixed_scrape() {
        let text = "DCGM_FI_DEV_GPU_TEMP{gpu=\"0\"} 2147483632\n\
            DCGM_FI_DEV_POWER_USAGE{gpu=\"0\"} 140737488355328\n\
            DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{gpu=\"0\"} 9223372036854775792\n\
            DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{gpu=\"1\"} 21474836480\n\
            vllm:num_requests_running 2\n";
        let sample = gather(&prom::parse(text), 1.0);
        // A simulator (or an engine) that also exports its GPUs is named as the engine.
        assert_eq!(sample.engine, Some(Engine::Vllm));
        assert_eq!(sample.values.get(&Signal::GpuTemperature), None);
        assert_eq!(sample.values.get(&Signal::GpuPower), None);
        // Past 2^31 millijoules is a real reading (six hours at 100 W), not a blank.
        assert_eq!(sample.values.get(&Signal::GpuEnergy), Some(&21474836.48));
    }
}
