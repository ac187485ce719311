//! The run's own metrics as Prometheus holds them: an [`Observer`] that counts each request as
//! it is sent and as it finishes, by phase and outcome, with TTFT, ITL, E2E and schedule lag as
//! histograms, and renders them as OpenMetrics text for a scrape.
//!
//! The histograms' buckets are fixed (Prometheus' own way: a scrape's buckets add up across
//! shards and over time), so they say less than the run's HDR distributions: the report's
//! percentiles stay the run's numbers; these are for watching it go.
//!
//! Not for: serving them (`serve.rs`), or anything the records do not say (the server's own
//! telemetry is scraped from the server).

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;

use crate::executor::{Event, Observer};
use crate::metrics::table::Metric;
use crate::records::{ErrorClass, RequestRecord};

/// Upper bounds of the latency histograms' buckets, seconds (and `+Inf`): 1 ms to 2 min, as
/// an LLM's token gaps and whole answers span.
const BUCKETS_S: [f64; 16] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0,
];

/// The histograms kept, each from its metric table entry: (exported name, metric, help).
const HISTOGRAMS: [(&str, Metric, &str); 4] = [
    (
        "llmload_ttft_seconds",
        Metric::Ttft,
        "Time to first token of finished requests.",
    ),
    (
        "llmload_itl_seconds",
        Metric::Itl,
        "Every gap between tokens of finished requests.",
    ),
    (
        "llmload_e2e_seconds",
        Metric::E2e,
        "Send to last byte of finished requests.",
    ),
    (
        "llmload_schedule_lag_seconds",
        Metric::ScheduleLag,
        "How late the client sent requests after their intended time (open loop).",
    ),
];

/// How a finished request ended, as the `outcome` label says it.
const OUTCOMES: [&str; 5] = ["ok", "failed", "throttled", "cancelled", "client_failed"];

/// A histogram with [`BUCKETS_S`]: counts per bucket (not cumulative), their sum and count.
#[derive(Debug, Clone, Default)]
struct Histogram {
    buckets: [u64; BUCKETS_S.len() + 1],
    sum: f64,
    count: u64,
}

impl Histogram {
    fn observe(&mut self, seconds: f64, times: u64) {
        let bucket = BUCKETS_S
            .iter()
            .position(|&bound| seconds <= bound)
            .unwrap_or(BUCKETS_S.len());
        self.buckets[bucket] += times;
        self.sum += seconds * times as f64;
        self.count += times;
    }
}

/// One phase's series.
#[derive(Debug, Clone, Default)]
struct PhaseSeries {
    name: String,
    open_loop: bool,
    sent: u64,
    finished: [u64; OUTCOMES.len()],
    output_tokens: u64,
    histograms: [Histogram; HISTOGRAMS.len()],
}

/// What the exporter knows of the run.
#[derive(Debug, Default)]
struct State {
    /// The labels of every series: run, plan, and shard when there is one.
    labels: Vec<(&'static str, String)>,
    /// By phase index.
    phases: BTreeMap<usize, PhaseSeries>,
    /// The run's live counters (the client's stalls), once the run gives them.
    counters: Option<std::sync::Arc<crate::executor::LiveCounters>>,
}

/// The run's metrics, kept as its events come.
#[derive(Debug, Default)]
pub struct Registry {
    state: Mutex<State>,
}

impl Registry {
    /// An empty registry, to observe a run.
    pub fn new() -> Registry {
        Registry::default()
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        match self.state.lock() {
            Ok(state) => state,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// The metrics as OpenMetrics text (`application/openmetrics-text; version=1.0.0`).
    pub fn render(&self) -> String {
        let mut out = String::new();
        for family in self.families() {
            let (name, kind, help) = (family.name, family.kind, family.help);
            let _ = writeln!(out, "# TYPE {name} {kind}\n# HELP {name} {help}");
            for series in &family.series {
                let _ = writeln!(
                    out,
                    "{}{} {}",
                    series.name,
                    label_set(&series.labels),
                    series.value
                );
            }
        }
        out.push_str("# EOF\n");
        out
    }

    /// Every sample as it stands, each named as a scrape names it (a counter's `_total`, a
    /// histogram's `_bucket`, `_count` and `_sum`).
    pub(super) fn samples(&self) -> Vec<Series> {
        self.families()
            .into_iter()
            .flat_map(|family| family.series)
            .collect()
    }

    /// The families, each with its samples, in the order a scrape gives them.
    fn families(&self) -> Vec<Family> {
        let state = self.state();
        let scope = |phase: &PhaseSeries| {
            let mut labels = state.labels.clone();
            labels.push(("phase", phase.name.clone()));
            labels
        };
        let per_phase = |name: &str, value: &dyn Fn(&PhaseSeries) -> u64| -> Vec<Series> {
            state
                .phases
                .values()
                .map(|phase| Series::new(name, scope(phase), value(phase) as f64))
                .collect()
        };
        let mut families = vec![
            Family {
                name: "llmload_requests_sent",
                kind: "counter",
                help: "Requests sent.",
                series: per_phase("llmload_requests_sent_total", &|p| p.sent),
            },
            Family {
                name: "llmload_requests_finished",
                kind: "counter",
                help: "Requests finished, by outcome.",
                series: state
                    .phases
                    .values()
                    .flat_map(|phase| {
                        OUTCOMES.iter().zip(phase.finished).map(|(outcome, count)| {
                            let mut labels = scope(phase);
                            labels.push(("outcome", (*outcome).to_string()));
                            Series::new("llmload_requests_finished_total", labels, count as f64)
                        })
                    })
                    .collect(),
            },
            Family {
                name: "llmload_in_flight",
                kind: "gauge",
                help: "Requests in flight.",
                series: per_phase("llmload_in_flight", &|p| {
                    p.sent.saturating_sub(p.finished.iter().sum())
                }),
            },
            Family {
                name: "llmload_output_tokens",
                kind: "counter",
                help: "Output tokens of finished requests.",
                series: per_phase("llmload_output_tokens_total", &|p| p.output_tokens),
            },
        ];
        families.extend(client_families(&state));
        for (index, (name, _, help)) in HISTOGRAMS.iter().enumerate() {
            let series = state
                .phases
                .values()
                .flat_map(|phase| histogram(name, &scope(phase), &phase.histograms[index]))
                .collect();
            families.push(Family {
                name,
                kind: "histogram",
                help,
                series,
            });
        }
        families
    }

    fn started(&self, header: &crate::records::RunHeader) {
        let mut labels = vec![
            ("run", header.request_id_prefix.clone().unwrap_or_default()),
            ("plan", header.plan.clone()),
        ];
        if let Some(shard) = &header.shard {
            labels.push(("shard", format!("{}/{}", shard.index, shard.count)));
        }
        let mut state = self.state();
        state.labels = labels;
        state.phases.clear();
    }

    fn finished(&self, record: &RequestRecord) {
        let mut state = self.state();
        let phase = state.phases.entry(record.phase).or_default();
        let outcome = match record.error {
            None => 0,
            Some(ErrorClass::Cancelled) => 3,
            Some(ErrorClass::Client) => 4,
            Some(class) if class.throttled() => 2,
            Some(_) => 1,
        };
        phase.finished[outcome] += 1;
        if record.error.is_none() {
            phase.output_tokens += record.completion_tokens.unwrap_or(0);
        }
        let open_loop = phase.open_loop;
        for (index, (_, metric, _)) in HISTOGRAMS.iter().enumerate() {
            let histogram = &mut phase.histograms[index];
            metric.samples(record, open_loop, |ms, times| {
                histogram.observe(ms / 1000.0, times)
            });
        }
    }
}

impl Observer for Registry {
    fn on_event(&self, event: Event<'_>) {
        match event {
            Event::RunStarted(header) => self.started(header),
            Event::PhaseStarted(start) => {
                let mut state = self.state();
                let phase = state.phases.entry(start.index).or_default();
                phase.name.clone_from(&start.name);
                phase.open_loop = start.open_loop;
            }
            Event::RequestSent { phase } => {
                self.state().phases.entry(phase).or_default().sent += 1;
            }
            Event::RequestFinished(record) => self.finished(record),
            Event::Counters(counters) => self.state().counters = Some(counters.clone()),
            Event::PhaseEnded(_)
            | Event::RunEnded(_)
            | Event::Warning(_)
            | Event::Note(_)
            | Event::Objectives(_) => {}
        }
    }
}

/// One sample: its name as scraped, its labels (the run's, then its own), its value.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Series {
    pub name: String,
    pub labels: Vec<(&'static str, String)>,
    pub value: f64,
}

impl Series {
    fn new(name: &str, labels: Vec<(&'static str, String)>, value: f64) -> Series {
        Series {
            name: name.to_string(),
            labels,
            value,
        }
    }
}

/// A metric family: its metadata and samples.
struct Family {
    name: &'static str,
    kind: &'static str,
    help: &'static str,
    series: Vec<Series>,
}

/// The client's own health, run-wide: its CPU time (the embedded simulator's left out) and
/// its stalls, which every latency it measured then includes.
fn client_families(state: &State) -> Vec<Family> {
    use std::sync::atomic::Ordering::Relaxed;
    if state.labels.is_empty() {
        return Vec::new();
    }
    let one = |name: &str, value: f64| vec![Series::new(name, state.labels.clone(), value)];
    let mut families = Vec::new();
    if let Some(cpu) = crate::executor::resources::cpu_seconds() {
        families.push(Family {
            name: "llmload_client_cpu_seconds",
            kind: "counter",
            help: "CPU time the client has used (user and system).",
            series: one("llmload_client_cpu_seconds_total", cpu),
        });
    }
    if let Some(counters) = &state.counters {
        families.push(Family {
            name: "llmload_client_stalls",
            kind: "counter",
            help: "Times the client process stalled 5 ms or more.",
            series: one(
                "llmload_client_stalls_total",
                counters.stalls.load(Relaxed) as f64,
            ),
        });
        let stalled_s = counters.stalled_us.load(Relaxed) as f64 / 1e6;
        families.push(Family {
            name: "llmload_client_stall_seconds",
            kind: "counter",
            help: "How long the client's stalls lasted in all.",
            series: one("llmload_client_stall_seconds_total", stalled_s),
        });
    }
    families
}

/// A histogram's cumulative buckets, count and sum.
fn histogram(name: &str, labels: &[(&'static str, String)], h: &Histogram) -> Vec<Series> {
    let mut cumulative = 0;
    let mut series: Vec<Series> = h
        .buckets
        .iter()
        .enumerate()
        .map(|(index, count)| {
            cumulative += count;
            let bound = BUCKETS_S
                .get(index)
                .map_or_else(|| "+Inf".to_string(), |b| b.to_string());
            let mut with_le = labels.to_vec();
            with_le.push(("le", bound));
            Series::new(&format!("{name}_bucket"), with_le, cumulative as f64)
        })
        .collect();
    series.push(Series::new(
        &format!("{name}_count"),
        labels.to_vec(),
        h.count as f64,
    ));
    series.push(Series::new(&format!("{name}_sum"), labels.to_vec(), h.sum));
    series
}

/// `{name="value",…}`, each value escaped as OpenMetrics asks (a phase or plan name is the
/// user's text).
fn label_set(labels: &[(&'static str, String)]) -> String {
    let pairs: Vec<String> = labels
        .iter()
        .map(|(name, value)| {
            let escaped = value
                .replace('\\', "\\\\")
                .replace('"', "\\\"")
                .replace('\n', "\\n");
            format!("{name}=\"{escaped}\"")
        })
        .collect();
    format!("{{{}}}", pairs.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::PhaseStart;

    fn record(phase: usize, error: Option<ErrorClass>, ttft_ms: u64) -> RequestRecord {
        let mut r = RequestRecord::planned(phase, 1, None, None, (16, 4), 0, 1_000, 1_000);
        r.error = error;
        r.http_status = Some(if error.is_some() { 429 } else { 200 });
        if error.is_none() {
            r.ttft_us = Some(ttft_ms * 1000);
            r.e2e_us = Some(ttft_ms * 1000 + 5_000);
            r.completion_tokens = Some(4);
        }
        r
    }

    #[test]
    fn the_clients_cpu_and_stalls_are_run_wide_counters() {
        use std::sync::atomic::Ordering::Relaxed;
        let registry = Registry::new();
        assert!(
            !registry.render().contains("llmload_client"),
            "nothing before the run"
        );
        let header = crate::records::RunHeader {
            plan: "p".into(),
            request_id_prefix: Some("llmload-0000000a".into()),
            ..Default::default()
        };
        registry.on_event(Event::RunStarted(&header));
        let counters = std::sync::Arc::new(crate::executor::LiveCounters::default());
        registry.on_event(Event::Counters(&counters));
        counters.stalls.fetch_add(2, Relaxed);
        counters.stalled_us.fetch_add(15_000, Relaxed);
        let text = registry.render();
        let labels = "{run=\"llmload-0000000a\",plan=\"p\"}";
        assert!(
            text.contains(&format!("llmload_client_stalls_total{labels} 2\n")),
            "{text}"
        );
        assert!(
            text.contains(&format!(
                "llmload_client_stall_seconds_total{labels} 0.015\n"
            )),
            "{text}"
        );
        assert!(
            text.contains("# TYPE llmload_client_cpu_seconds counter"),
            "{text}"
        );
        let cpu = registry
            .samples()
            .into_iter()
            .find(|s| s.name == "llmload_client_cpu_seconds_total")
            .expect("the client's CPU");
        assert!(cpu.value > 0.0, "{cpu:?}");
    }

    #[test]
    fn requests_are_counted_by_phase_and_outcome_with_their_latencies() {
        let registry = Registry::new();
        let start: PhaseStart = serde_json::from_value(serde_json::json!({
            "index": 0, "name": "steady \"A\"", "record": true, "load": "rate 1/s",
            "open_loop": true, "at_us": 0
        }))
        .expect("a phase start");
        registry.on_event(Event::PhaseStarted(&start));
        for _ in 0..3 {
            registry.on_event(Event::RequestSent { phase: 0 });
        }
        registry.on_event(Event::RequestFinished(&record(0, None, 20)));
        registry.on_event(Event::RequestFinished(&record(
            0,
            Some(ErrorClass::Http429),
            0,
        )));
        let text = registry.render();
        let phase = "phase=\"steady \\\"A\\\"\"";
        assert!(
            text.contains(&format!("llmload_requests_sent_total{{{phase}}} 3")),
            "{text}"
        );
        for (outcome, n) in [("ok", 1), ("throttled", 1), ("failed", 0)] {
            let line =
                format!("llmload_requests_finished_total{{{phase},outcome=\"{outcome}\"}} {n}");
            assert!(text.contains(&line), "{line}\n{text}");
        }
        assert!(text.contains(&format!("llmload_in_flight{{{phase}}} 1")));
        assert!(text.contains(&format!("llmload_output_tokens_total{{{phase}}} 4")));
        // 20 ms is in the 25 ms bucket and every one above it, not the 10 ms one.
        let bucket = |le: &str| format!("llmload_ttft_seconds_bucket{{{phase},le=\"{le}\"}}");
        assert!(text.contains(&format!("{} 0", bucket("0.01"))), "{text}");
        assert!(text.contains(&format!("{} 1", bucket("0.025"))), "{text}");
        assert!(text.contains(&format!("{} 1", bucket("+Inf"))), "{text}");
        assert!(text.contains(&format!("llmload_ttft_seconds_count{{{phase}}} 1")));
        assert!(text.ends_with("# EOF\n"));
    }
}
