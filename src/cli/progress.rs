//! What `llmload run` prints while a run goes: the run's target, notes and warnings, and a live
//! progress line: the current phase, its elapsed and planned time (then how long it has been
//! draining), requests sent, done, failed and in flight, the last interval's TTFT p50 and p99,
//! and output tokens per second as they arrive. Redrawn every second on a terminal; on anything
//! else (a CI log) a plain line every ten seconds instead.
//!
//! It is an [`Observer`] of the run: it learns everything from the run's events and never
//! reaches into the executor.

use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

use crate::executor::{Event, Observer};

/// The printing observer and the thread that redraws its line.
pub(super) struct Live {
    progress: Arc<Progress>,
    ticker: Option<std::thread::JoinHandle<()>>,
}

impl Live {
    /// Starts printing; `show` false prints only the run's notes and warnings.
    pub fn start(show: bool) -> Live {
        let progress = Arc::new(Progress {
            show,
            phases: RwLock::new(Vec::new()),
            current: AtomicUsize::new(0),
            last: Mutex::new((0, Instant::now())),
            done: AtomicBool::new(false),
            counters: Mutex::new(None),
            tokens_per_chunk: Mutex::new((0, 0)),
            batches: AtomicBool::new(false),
            inputs: AtomicU64::new(0),
            inputs_last: AtomicU64::new(0),
        });
        let ticker = show.then(|| {
            let progress = progress.clone();
            std::thread::Builder::new()
                .name("llmload-progress".into())
                .spawn(move || progress.tick())
                .ok()
        });
        Live {
            progress,
            ticker: ticker.flatten(),
        }
    }

    /// The observer to give the run.
    pub fn observer(&self) -> Arc<dyn Observer> {
        self.progress.clone()
    }

    /// Stops the line and clears it from the terminal.
    pub fn finish(self) {
        self.progress.done.store(true, Ordering::Relaxed);
        if let Some(ticker) = self.ticker {
            ticker.thread().unpark();
            let _ = ticker.join();
        }
    }
}

struct Progress {
    show: bool,
    phases: RwLock<Vec<Arc<PhaseProgress>>>,
    current: AtomicUsize,
    /// Chunks and time at the previous line, for the tokens/s of the last interval.
    last: Mutex<(u64, Instant)>,
    done: AtomicBool,
    /// The run's live counters (chunks as they arrive).
    counters: Mutex<Option<Arc<crate::executor::LiveCounters>>>,
    /// (tokens, chunks) of the finished requests: tokens per chunk, to turn chunks into tokens.
    tokens_per_chunk: Mutex<(u64, u64)>,
    /// The API answers batches whole (embeddings, rerank): the line shows E2E and inputs/s,
    /// not TTFT and tokens/s.
    batches: AtomicBool,
    /// Inputs of the finished batch requests, and their count at the previous line.
    inputs: AtomicU64,
    inputs_last: AtomicU64,
}

struct PhaseProgress {
    name: String,
    planned: Option<Duration>,
    started: Instant,
    sent: AtomicU64,
    done: AtomicU64,
    errors: AtomicU64,
    throttled: AtomicU64,
    /// TTFTs (E2Es, for an API that answers batches) since the previous line.
    ttft_us: Mutex<Option<Histogram<u64>>>,
}

impl PhaseProgress {
    fn new(name: String, planned: Option<Duration>) -> PhaseProgress {
        PhaseProgress {
            name,
            planned,
            started: Instant::now(),
            sent: AtomicU64::new(0),
            done: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            throttled: AtomicU64::new(0),
            ttft_us: Mutex::new(Histogram::new(3).ok()),
        }
    }
}

impl Progress {
    fn phase(&self, index: usize) -> Option<Arc<PhaseProgress>> {
        self.phases.read().ok()?.get(index).cloned()
    }

    fn tick(&self) {
        let tty = std::io::stderr().is_terminal();
        let every = if tty {
            Duration::from_secs(1)
        } else {
            Duration::from_secs(10)
        };
        let mut next = Instant::now() + every;
        loop {
            std::thread::park_timeout(next.saturating_duration_since(Instant::now()));
            if self.done.load(Ordering::Relaxed) {
                break;
            }
            if Instant::now() < next {
                continue;
            }
            next += every;
            if tty {
                eprint!("\r\x1b[K{}", self.line());
            } else {
                eprintln!("{}", self.line());
            }
        }
        if tty {
            eprint!("\r\x1b[K");
        }
    }

    /// One line describing the current phase.
    fn line(&self) -> String {
        let Some(phase) = self.phase(self.current.load(Ordering::Relaxed)) else {
            return String::new();
        };
        let elapsed = phase.started.elapsed();
        // Past its planned end a phase is draining: its clock stops at the plan's.
        let clock = match phase.planned {
            Some(planned) if elapsed > planned => format!(
                "{:.0}s/{:.0}s, draining {:.0}s",
                planned.as_secs_f64(),
                planned.as_secs_f64(),
                (elapsed - planned).as_secs_f64()
            ),
            Some(planned) => format!(
                "{:.0}s/{:.0}s",
                elapsed.as_secs_f64(),
                planned.as_secs_f64()
            ),
            None => format!("{:.0}s", elapsed.as_secs_f64()),
        };
        let batches = self.batches.load(Ordering::Relaxed);
        let latency = if batches { "E2E" } else { "TTFT" };
        let ms = |us: u64| {
            if us >= 10_000_000 {
                format!("{:.1}s", us as f64 / 1e6)
            } else {
                format!("{:.0}ms", us as f64 / 1000.0)
            }
        };
        // The last interval's TTFTs, then a fresh interval.
        let ttft = phase
            .ttft_us
            .lock()
            .ok()
            .and_then(|mut h| {
                let h = h.as_mut()?;
                let text = (!h.is_empty()).then(|| {
                    format!(
                        "{latency} p50 {} p99 {}",
                        ms(h.value_at_quantile(0.5)),
                        ms(h.value_at_quantile(0.99))
                    )
                });
                h.reset();
                text
            })
            .unwrap_or_else(|| format!("{latency} -"));
        let chunks = self
            .counters
            .lock()
            .ok()
            .and_then(|c| c.as_ref().map(|c| c.chunks.load(Ordering::Relaxed)))
            .unwrap_or(0);
        let (tokens_done, chunks_done) = self.tokens_per_chunk.lock().map(|t| *t).unwrap_or((0, 0));
        let per_chunk = if chunks_done > 0 {
            tokens_done as f64 / chunks_done as f64
        } else {
            1.0
        };
        let (rate, interval) = match self.last.lock() {
            Ok(mut last) => {
                let seconds = last.1.elapsed().as_secs_f64();
                let rate = if seconds > 0.0 {
                    (chunks - last.0.min(chunks)) as f64 * per_chunk / seconds
                } else {
                    0.0
                };
                *last = (chunks, Instant::now());
                (rate, seconds)
            }
            Err(_) => (0.0, 0.0),
        };
        let throughput = if batches {
            let inputs = self.inputs.load(Ordering::Relaxed);
            let before = self.inputs_last.swap(inputs, Ordering::Relaxed);
            let per_s = if interval > 0.0 {
                inputs.saturating_sub(before) as f64 / interval
            } else {
                0.0
            };
            format!("{per_s:.0} inputs/s")
        } else {
            format!("{rate:.0} tok/s")
        };
        let sent = phase.sent.load(Ordering::Relaxed);
        let done = phase.done.load(Ordering::Relaxed);
        // Throttled requests are not failures: said apart, and only when there are any.
        let throttled = match phase.throttled.load(Ordering::Relaxed) {
            0 => String::new(),
            n => format!(" throttled {n}"),
        };
        format!(
            "[{} {clock}] sent {sent} done {done} failed {}{throttled} in flight {} | last {:.0}s: {ttft} | {throughput}",
            phase.name,
            phase.errors.load(Ordering::Relaxed),
            sent.saturating_sub(done),
            interval,
        )
    }
}

impl Observer for Progress {
    fn on_event(&self, event: Event<'_>) {
        match event {
            Event::RunStarted(header) => {
                let batches = crate::api::Api::from_name(&header.api)
                    .is_some_and(|api| api.dialect().capabilities().kind.answers_batches());
                self.batches.store(batches, Ordering::Relaxed);
                if self.show {
                    eprintln!(
                        "llmload: running plan \"{}\" against {}",
                        header.plan, header.target
                    );
                }
            }
            Event::Counters(counters) => {
                if let Ok(mut slot) = self.counters.lock() {
                    *slot = Some(counters.clone());
                }
            }
            Event::PhaseStarted(start) => {
                if let Ok(mut phases) = self.phases.write() {
                    let from = phases.len();
                    phases.extend(
                        (from..=start.index)
                            .map(|i| Arc::new(PhaseProgress::new(format!("phase {i}"), None))),
                    );
                    phases[start.index] = Arc::new(PhaseProgress::new(
                        start.name.clone(),
                        start.planned_duration_s.map(Duration::from_secs_f64),
                    ));
                }
                self.current.store(start.index, Ordering::Relaxed);
            }
            Event::RequestSent { phase } => {
                if let Some(phase) = self.phase(phase) {
                    phase.sent.fetch_add(1, Ordering::Relaxed);
                }
            }
            Event::RequestFinished(record) => {
                let Some(phase) = self.phase(record.phase) else {
                    return;
                };
                phase.done.fetch_add(1, Ordering::Relaxed);
                match record.error {
                    Some(class) if class.throttled() => {
                        phase.throttled.fetch_add(1, Ordering::Relaxed);
                    }
                    Some(_) => {
                        phase.errors.fetch_add(1, Ordering::Relaxed);
                    }
                    None => {}
                }
                if let (Some(tokens), Ok(mut ratio)) =
                    (record.completion_tokens, self.tokens_per_chunk.lock())
                {
                    if !record.chunks.is_empty() {
                        ratio.0 += tokens;
                        ratio.1 += record.chunks.len() as u64;
                    }
                }
                let latency = if self.batches.load(Ordering::Relaxed) {
                    self.inputs
                        .fetch_add(u64::from(record.inputs.unwrap_or(0)), Ordering::Relaxed);
                    record.e2e_us.filter(|_| record.ok())
                } else {
                    record.ttft_us
                };
                if let Some(ttft) = latency {
                    if let Ok(mut hist) = phase.ttft_us.lock() {
                        if let Some(hist) = hist.as_mut() {
                            let _ = hist.record(ttft.max(1));
                        }
                    }
                }
            }
            Event::Warning(text) => eprintln!("warning: {}", crate::escape::one_line(text)),
            Event::Note(text) => eprintln!("note: {text}"),
            _ => {}
        }
    }
}
