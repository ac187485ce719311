//! Live progress in the terminal while a run goes: per phase, requests sent, done and failed,
//! TTFT p50 so far and output tokens per second.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

use super::record::RequestRecord;

pub struct Progress {
    phases: Vec<PhaseProgress>,
    current: AtomicUsize,
    /// Output tokens and time at the previous line, for the tokens/s of the last interval.
    last: Mutex<(u64, Instant)>,
}

struct PhaseProgress {
    name: String,
    planned: Option<Duration>,
    started: Mutex<Option<Instant>>,
    sent: AtomicU64,
    done: AtomicU64,
    errors: AtomicU64,
    output_tokens: AtomicU64,
    ttft_us: Mutex<Option<Histogram<u64>>>,
}

impl Progress {
    pub fn new(phases: &[(String, Option<Duration>)]) -> Progress {
        Progress {
            phases: phases
                .iter()
                .map(|(name, planned)| PhaseProgress {
                    name: name.clone(),
                    planned: *planned,
                    started: Mutex::new(None),
                    sent: AtomicU64::new(0),
                    done: AtomicU64::new(0),
                    errors: AtomicU64::new(0),
                    output_tokens: AtomicU64::new(0),
                    ttft_us: Mutex::new(Histogram::new(3).ok()),
                })
                .collect(),
            current: AtomicUsize::new(0),
            last: Mutex::new((0, Instant::now())),
        }
    }

    pub fn start_phase(&self, index: usize) {
        self.current.store(index, Ordering::Relaxed);
        if let Some(phase) = self.phases.get(index) {
            if let Ok(mut started) = phase.started.lock() {
                *started = Some(Instant::now());
            }
        }
    }

    pub fn on_sent(&self, index: usize) {
        if let Some(phase) = self.phases.get(index) {
            phase.sent.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub fn sent(&self, index: usize) -> u64 {
        self.phases
            .get(index)
            .map(|p| p.sent.load(Ordering::Relaxed))
            .unwrap_or(0)
    }

    pub fn on_record(&self, record: &RequestRecord) {
        let Some(phase) = self.phases.get(record.phase) else {
            return;
        };
        phase.done.fetch_add(1, Ordering::Relaxed);
        if !record.ok() {
            phase.errors.fetch_add(1, Ordering::Relaxed);
        }
        phase
            .output_tokens
            .fetch_add(record.completion_tokens.unwrap_or(0), Ordering::Relaxed);
        if let (Some(ttft), Ok(mut hist)) = (record.ttft_us, phase.ttft_us.lock()) {
            if let Some(hist) = hist.as_mut() {
                let _ = hist.record(ttft.max(1));
            }
        }
    }

    /// One line describing the current phase.
    pub fn line(&self) -> String {
        let index = self.current.load(Ordering::Relaxed);
        let Some(phase) = self.phases.get(index) else {
            return String::new();
        };
        let elapsed = phase
            .started
            .lock()
            .ok()
            .and_then(|s| *s)
            .map(|s| s.elapsed())
            .unwrap_or_default();
        let clock = match phase.planned {
            Some(planned) => format!(
                "{:.0}s/{:.0}s",
                elapsed.as_secs_f64(),
                planned.as_secs_f64()
            ),
            None => format!("{:.0}s", elapsed.as_secs_f64()),
        };
        let ttft = phase
            .ttft_us
            .lock()
            .ok()
            .and_then(|h| {
                h.as_ref()
                    .filter(|h| !h.is_empty())
                    .map(|h| h.value_at_quantile(0.5))
            })
            .map(|us| format!("{:.0}ms", us as f64 / 1000.0))
            .unwrap_or_else(|| "-".into());
        let total_tokens: u64 = self
            .phases
            .iter()
            .map(|p| p.output_tokens.load(Ordering::Relaxed))
            .sum();
        let rate = match self.last.lock() {
            Ok(mut last) => {
                let seconds = last.1.elapsed().as_secs_f64();
                let rate = if seconds > 0.0 {
                    (total_tokens - last.0.min(total_tokens)) as f64 / seconds
                } else {
                    0.0
                };
                *last = (total_tokens, Instant::now());
                rate
            }
            Err(_) => 0.0,
        };
        format!(
            "[{} {clock}] sent {} done {} errors {} | TTFT p50 {ttft} | {:.0} tok/s",
            phase.name,
            phase.sent.load(Ordering::Relaxed),
            phase.done.load(Ordering::Relaxed),
            phase.errors.load(Ordering::Relaxed),
            rate
        )
    }
}
