//! What `llmload run` prints while a run goes: the run's target, notes and warnings, and a live
//! progress line (per phase: requests sent, done and failed, TTFT p50 so far, output tokens per
//! second), redrawn every second on a terminal and printed every ten seconds in a CI log.
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
    /// Output tokens and time at the previous line, for the tokens/s of the last interval.
    last: Mutex<(u64, Instant)>,
    done: AtomicBool,
}

struct PhaseProgress {
    name: String,
    planned: Option<Duration>,
    started: Instant,
    sent: AtomicU64,
    done: AtomicU64,
    errors: AtomicU64,
    output_tokens: AtomicU64,
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
            output_tokens: AtomicU64::new(0),
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
            .read()
            .map(|phases| {
                phases
                    .iter()
                    .map(|p| p.output_tokens.load(Ordering::Relaxed))
                    .sum()
            })
            .unwrap_or(0);
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

impl Observer for Progress {
    fn on_event(&self, event: Event<'_>) {
        match event {
            Event::RunStarted(header) if self.show => {
                eprintln!(
                    "llmload: running plan \"{}\" against {}",
                    header.plan, header.target
                );
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
                if !record.ok() {
                    phase.errors.fetch_add(1, Ordering::Relaxed);
                }
                phase
                    .output_tokens
                    .fetch_add(record.completion_tokens.unwrap_or(0), Ordering::Relaxed);
                if let Some(ttft) = record.ttft_us {
                    if let Ok(mut hist) = phase.ttft_us.lock() {
                        if let Some(hist) = hist.as_mut() {
                            let _ = hist.record(ttft.max(1));
                        }
                    }
                }
            }
            Event::Warning(text) => eprintln!("warning: {text}"),
            Event::Note(text) => eprintln!("note: {text}"),
            _ => {}
        }
    }
}
