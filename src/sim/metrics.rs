//! The simulator's `/metrics`: Prometheus text with vLLM's metric names and meanings.

use std::fmt::Write;
use std::sync::Mutex;
use std::time::Duration;

/// Bucket bounds (seconds), as vLLM uses for its latency histograms.
const TTFT_BUCKETS: [f64; 16] = [
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
];
const ITL_BUCKETS: [f64; 15] = [
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
];
const REQUEST_BUCKETS: [f64; 14] = [
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 60.0,
];

struct Histogram {
    bounds: &'static [f64],
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    fn new(bounds: &'static [f64]) -> Histogram {
        Histogram {
            bounds,
            counts: vec![0; bounds.len()],
            sum: 0.0,
            count: 0,
        }
    }

    fn observe(&mut self, value: Duration) {
        let seconds = value.as_secs_f64();
        for (bound, count) in self.bounds.iter().zip(self.counts.iter_mut()) {
            if seconds <= *bound {
                *count += 1;
            }
        }
        self.sum += seconds;
        self.count += 1;
    }

    fn write(&self, out: &mut String, name: &str, help: &str, labels: &str) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        for (bound, count) in self.bounds.iter().zip(&self.counts) {
            let _ = writeln!(out, "{name}_bucket{{{labels},le=\"{bound}\"}} {count}");
        }
        let _ = writeln!(out, "{name}_bucket{{{labels},le=\"+Inf\"}} {}", self.count);
        let _ = writeln!(out, "{name}_sum{{{labels}}} {}", self.sum);
        let _ = writeln!(out, "{name}_count{{{labels}}} {}", self.count);
    }
}

struct State {
    running: usize,
    waiting: usize,
    kv_usage: f64,
    preemptions: u64,
    prompt_tokens: u64,
    generation_tokens: u64,
    prefix_queries: u64,
    prefix_hits: u64,
    ttft: Histogram,
    itl: Histogram,
    queue: Histogram,
    e2e: Histogram,
    /// The GPUs it says it runs on, if the settings give them.
    gpus: Option<super::gpus::Gpus>,
    /// Requests its batch holds (an engine's `max-seqs`; 1 without one): a GPU is as busy as
    /// its batch is full.
    batch: usize,
}

pub struct SimMetrics {
    model: String,
    state: Mutex<State>,
    /// Without an engine: requests being served now (the gauges then say what the fixed-delay
    /// simulator does, and nothing of a KV cache it does not model).
    serving: std::sync::atomic::AtomicUsize,
    fixed: std::sync::atomic::AtomicBool,
}

/// A request the fixed-delay simulator is serving: counted as running until dropped.
pub struct Serving(std::sync::Arc<SimMetrics>);

impl Drop for Serving {
    fn drop(&mut self) {
        self.0
            .serving
            .fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

impl SimMetrics {
    pub fn new(model: &str) -> SimMetrics {
        SimMetrics {
            model: model.to_string(),
            state: Mutex::new(State {
                running: 0,
                waiting: 0,
                kv_usage: 0.0,
                preemptions: 0,
                prompt_tokens: 0,
                generation_tokens: 0,
                prefix_queries: 0,
                prefix_hits: 0,
                ttft: Histogram::new(&TTFT_BUCKETS),
                itl: Histogram::new(&ITL_BUCKETS),
                queue: Histogram::new(&REQUEST_BUCKETS),
                e2e: Histogram::new(&REQUEST_BUCKETS),
                gpus: None,
                batch: 1,
            }),
            serving: std::sync::atomic::AtomicUsize::new(0),
            fixed: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Exports `gpu` in dcgm-exporter's names, busy as a batch of `batch` requests is full.
    pub fn with_gpus(self, gpu: Option<crate::plan::Gpu>, batch: usize) -> SimMetrics {
        self.with(|s| {
            s.gpus = gpu.map(super::gpus::Gpus::new);
            s.batch = batch.max(1);
        });
        self
    }

    /// Work for the GPUs: `prompt` tokens computed, `generated` tokens sampled.
    pub fn on_gpu_work(&self, prompt: u64, generated: u64) {
        self.with(|s| {
            if let Some(gpus) = s.gpus.as_mut() {
                gpus.work(prompt, generated);
            }
        });
    }

    /// Says that there is no engine: the gauges are then the fixed-delay simulator's own.
    pub fn without_engine(&self) {
        self.fixed.store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// A request the fixed-delay simulator serves, from now until the guard is dropped: it runs
    /// at once (it waited for nothing).
    pub fn serving(self: &std::sync::Arc<Self>) -> Serving {
        use std::sync::atomic::Ordering;
        self.fixed.store(true, Ordering::Relaxed);
        self.serving.fetch_add(1, Ordering::Relaxed);
        self.with(|s| s.queue.observe(Duration::ZERO));
        Serving(self.clone())
    }

    fn with(&self, f: impl FnOnce(&mut State)) {
        if let Ok(mut state) = self.state.lock() {
            f(&mut state);
        }
    }

    pub fn on_step(&self, running: usize, waiting: usize, kv_usage: f64, preemptions: u64) {
        self.with(|s| {
            s.running = running;
            s.waiting = waiting;
            s.kv_usage = kv_usage;
            s.preemptions += preemptions;
        });
    }

    pub fn on_admitted(&self, queued: Duration, prompt_tokens: u32) {
        self.with(|s| {
            s.queue.observe(queued);
            s.prompt_tokens += prompt_tokens as u64;
        });
    }

    /// A prefix-cache lookup: `prompt` tokens asked for, `hit` of them found (vLLM counts both
    /// in tokens).
    pub fn on_prefix_lookup(&self, prompt: u32, hit: u32) {
        self.with(|s| {
            s.prefix_queries += prompt as u64;
            s.prefix_hits += hit as u64;
        });
    }

    pub fn on_first_token(&self, ttft: Duration) {
        self.with(|s| {
            s.ttft.observe(ttft);
            s.generation_tokens += 1;
        });
    }

    pub fn on_token(&self, gap: Duration) {
        self.with(|s| {
            s.itl.observe(gap);
            s.generation_tokens += 1;
        });
    }

    pub fn on_finished(&self, e2e: Duration) {
        self.with(|s| s.e2e.observe(e2e));
    }

    pub fn preemptions(&self) -> u64 {
        self.state.lock().map(|s| s.preemptions).unwrap_or(0)
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        let Ok(mut s) = self.state.lock() else {
            return String::new();
        };
        let labels = format!("model_name=\"{}\"", self.model.replace('"', "'"));
        let mut out = String::new();
        let mut gauge = |name: &str, help: &str, kind: &str, value: String| {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name}{{{labels}}} {value}"
            );
        };
        let fixed = self.fixed.load(std::sync::atomic::Ordering::Relaxed);
        let running = if fixed {
            self.serving.load(std::sync::atomic::Ordering::Relaxed)
        } else {
            s.running
        };
        gauge(
            "vllm:num_requests_running",
            "Number of requests in model execution batches.",
            "gauge",
            running.to_string(),
        );
        gauge(
            "vllm:num_requests_waiting",
            "Number of requests waiting to be processed.",
            "gauge",
            s.waiting.to_string(),
        );
        // The fixed-delay simulator models no KV cache and preempts nothing: it says nothing
        // of them, rather than a 0% that would read as real.
        if !fixed {
            gauge(
                "vllm:kv_cache_usage_perc",
                "KV-cache usage. 1 means 100 percent usage.",
                "gauge",
                s.kv_usage.to_string(),
            );
            gauge(
                "vllm:num_preemptions_total",
                "Cumulative number of preemptions from the engine.",
                "counter",
                s.preemptions.to_string(),
            );
        }
        gauge(
            "vllm:prompt_tokens_total",
            "Number of prefill tokens processed.",
            "counter",
            s.prompt_tokens.to_string(),
        );
        gauge(
            "vllm:generation_tokens_total",
            "Number of generation tokens processed.",
            "counter",
            s.generation_tokens.to_string(),
        );
        gauge(
            "vllm:prefix_cache_queries_total",
            "Prefix cache queries, in terms of number of queried tokens.",
            "counter",
            s.prefix_queries.to_string(),
        );
        gauge(
            "vllm:prefix_cache_hits_total",
            "Prefix cache hits, in terms of number of cached tokens.",
            "counter",
            s.prefix_hits.to_string(),
        );
        s.ttft.write(
            &mut out,
            "vllm:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            &labels,
        );
        s.itl.write(
            &mut out,
            "vllm:inter_token_latency_seconds",
            "Histogram of inter-token latency in seconds.",
            &labels,
        );
        s.queue.write(
            &mut out,
            "vllm:request_queue_time_seconds",
            "Histogram of time spent in WAITING phase for request.",
            &labels,
        );
        s.e2e.write(
            &mut out,
            "vllm:e2e_request_latency_seconds",
            "Histogram of e2e request latency in seconds.",
            &labels,
        );
        let busy = running as f64 / s.batch as f64;
        if let Some(gpus) = s.gpus.as_mut() {
            gpus.render(&mut out, std::time::Instant::now(), busy);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_an_engine_the_gauges_say_what_the_fixed_delays_do() {
        let metrics = std::sync::Arc::new(SimMetrics::new("m"));
        metrics.without_engine();
        let first = metrics.serving();
        let second = metrics.serving();
        let text = metrics.render();
        assert!(
            text.contains("vllm:num_requests_running{model_name=\"m\"} 2"),
            "{text}"
        );
        assert!(
            text.contains("vllm:num_requests_waiting{model_name=\"m\"} 0"),
            "{text}"
        );
        // No KV cache is modelled: none is reported, rather than a 0% that reads as real.
        assert!(!text.contains("kv_cache_usage"), "{text}");
        drop((first, second));
        assert!(metrics
            .render()
            .contains("vllm:num_requests_running{model_name=\"m\"} 0"));
    }

    #[test]
    fn prometheus_text_has_vllm_names_and_cumulative_buckets() {
        let m = SimMetrics::new("m");
        m.on_step(3, 2, 0.5, 1);
        m.on_first_token(Duration::from_millis(30));
        m.on_token(Duration::from_millis(12));
        let text = m.render();
        assert!(text.contains("vllm:num_requests_running{model_name=\"m\"} 3"));
        assert!(text.contains("vllm:num_preemptions_total{model_name=\"m\"} 1"));
        assert!(text
            .contains("vllm:time_to_first_token_seconds_bucket{model_name=\"m\",le=\"0.02\"} 0"));
        assert!(text
            .contains("vllm:time_to_first_token_seconds_bucket{model_name=\"m\",le=\"0.04\"} 1"));
        assert!(text
            .contains("vllm:time_to_first_token_seconds_bucket{model_name=\"m\",le=\"+Inf\"} 1"));
        assert!(text.contains("vllm:generation_tokens_total{model_name=\"m\"} 2"));
    }
}
