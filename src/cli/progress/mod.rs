//! What `llmload run` prints while a run goes: the run's target, notes and warnings, and the
//! progress of the current phase. On a terminal, a block redrawn in place every second (its bar
//! with the time or requests left; sent, done, failed and in flight; the last second's TTFT, ITL
//! and E2E p50/p99 and throughput; each objective holding or breaking); on anything else (a CI
//! log) a plain line every ten seconds instead. `NO_COLOR` leaves the block uncolored; `--quiet`
//! prints only notes and warnings.
//!
//! It is an [`Observer`] of the run: it learns everything from the run's events and never
//! reaches into the executor. What it shows is drawn in `view.rs`.

mod view;

use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

use crate::executor::{Event, Objective, Observer};
use crate::metrics::table::Metric;
use view::Snapshot;

/// The printing observer and the thread that redraws its progress.
pub(super) struct Live {
    progress: Arc<Progress>,
    ticker: Option<std::thread::JoinHandle<()>>,
}

impl Live {
    /// Starts printing; `show` false prints only the run's notes and warnings.
    pub fn start(show: bool) -> Live {
        let tty = std::io::stderr().is_terminal();
        let progress = Arc::new(Progress {
            show,
            screen: Mutex::new(Screen {
                tty,
                color: tty && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty()),
                drawn: Vec::new(),
            }),
            phases: RwLock::new(Vec::new()),
            current: AtomicUsize::new(0),
            last: Mutex::new((0, Instant::now())),
            done: AtomicBool::new(false),
            counters: Mutex::new(None),
            tokens_per_chunk: Mutex::new((0, 0)),
            batches: AtomicBool::new(false),
            inputs: AtomicU64::new(0),
            inputs_last: AtomicU64::new(0),
            objectives: Mutex::new(Vec::new()),
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

    /// Stops the progress and clears it from the terminal.
    pub fn finish(self) {
        self.progress.done.store(true, Ordering::Relaxed);
        if let Some(ticker) = self.ticker {
            ticker.thread().unpark();
            let _ = ticker.join();
        }
    }
}

/// Standard error as the progress shares it with notes and warnings: on a terminal, the block
/// last drawn, erased before anything else is printed and drawn again after it.
struct Screen {
    tty: bool,
    color: bool,
    drawn: Vec<String>,
}

impl Screen {
    /// Erases the block drawn (the cursor is left at its first line's start).
    fn erase(&self, err: &mut impl Write) {
        if self.tty && !self.drawn.is_empty() {
            let _ = write!(err, "\r\x1b[{}A\x1b[J", self.drawn.len());
        }
    }

    fn draw(&self, err: &mut impl Write) {
        for line in &self.drawn {
            let _ = writeln!(err, "{line}");
        }
    }

    /// Replaces the block on a terminal, or prints `plain` to a log.
    fn show(&mut self, block: Vec<String>, plain: String) {
        let mut err = std::io::stderr().lock();
        if self.tty {
            self.erase(&mut err);
            self.drawn = block;
            self.draw(&mut err);
        } else {
            let _ = writeln!(err, "{plain}");
        }
        let _ = err.flush();
    }

    /// Prints `text` above the block.
    fn say(&self, text: &str) {
        let mut err = std::io::stderr().lock();
        self.erase(&mut err);
        let _ = writeln!(err, "{text}");
        self.draw(&mut err);
        let _ = err.flush();
    }

    /// Erases the block for good.
    fn clear(&mut self) {
        let mut err = std::io::stderr().lock();
        self.erase(&mut err);
        self.drawn.clear();
        let _ = err.flush();
    }
}

/// The terminal's width in columns (80 when it cannot be told).
fn terminal_width() -> usize {
    #[cfg(unix)]
    {
        // SAFETY: TIOCGWINSZ fills the winsize it is given and reads nothing else.
        let mut size: libc::winsize = unsafe { std::mem::zeroed() };
        let asked = unsafe { libc::ioctl(libc::STDERR_FILENO, libc::TIOCGWINSZ, &mut size) };
        if asked == 0 && size.ws_col > 0 {
            return usize::from(size.ws_col);
        }
    }
    80
}

struct Progress {
    show: bool,
    screen: Mutex<Screen>,
    phases: RwLock<Vec<Arc<PhaseProgress>>>,
    current: AtomicUsize,
    /// Chunks and time at the previous line, for the tokens/s of the last interval.
    last: Mutex<(u64, Instant)>,
    done: AtomicBool,
    /// The run's live counters (chunks as they arrive).
    counters: Mutex<Option<Arc<crate::executor::LiveCounters>>>,
    /// (tokens, chunks) of the finished requests: tokens per chunk, to turn chunks into tokens.
    tokens_per_chunk: Mutex<(u64, u64)>,
    /// The API answers batches whole (embeddings, rerank): the progress shows E2E and
    /// inputs/s, not TTFT and tokens/s.
    batches: AtomicBool,
    /// Inputs of the finished batch requests, and their count at the previous line.
    inputs: AtomicU64,
    inputs_last: AtomicU64,
    /// The plan's objectives as they last stood.
    objectives: Mutex<Vec<Objective>>,
}

/// The latencies shown for the last interval, each from its metric table entry.
const LATENCIES: [(&str, Metric); 3] = [
    ("TTFT", Metric::Ttft),
    ("ITL", Metric::Itl),
    ("E2E", Metric::E2e),
];

struct PhaseProgress {
    name: String,
    planned: Option<Duration>,
    planned_requests: Option<u64>,
    open_loop: bool,
    started: Instant,
    sent: AtomicU64,
    done: AtomicU64,
    errors: AtomicU64,
    throttled: AtomicU64,
    /// Each of [`LATENCIES`] since the previous line, µs.
    latencies: Mutex<Vec<Histogram<u64>>>,
}

impl PhaseProgress {
    fn new(start: Option<&crate::records::PhaseStart>, index: usize) -> PhaseProgress {
        let histogram = || Histogram::new(3).ok();
        PhaseProgress {
            name: start.map_or_else(|| format!("phase {index}"), |s| s.name.clone()),
            planned: start
                .and_then(|s| s.planned_duration_s)
                .map(Duration::from_secs_f64),
            planned_requests: start.and_then(|s| s.planned_requests),
            open_loop: start.is_some_and(|s| s.open_loop),
            started: Instant::now(),
            sent: AtomicU64::new(0),
            done: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            throttled: AtomicU64::new(0),
            latencies: Mutex::new(LATENCIES.iter().filter_map(|_| histogram()).collect()),
        }
    }

    /// Each latency's p50 and p99 since the previous call, and a fresh interval.
    fn take_latencies(&self, batches: bool) -> Vec<(&'static str, Option<(u64, u64)>)> {
        let Ok(mut histograms) = self.latencies.lock() else {
            return Vec::new();
        };
        LATENCIES
            .iter()
            .zip(histograms.iter_mut())
            // An API that answers batches has no first token nor gaps: its E2E only.
            .filter(|((_, metric), _)| !batches || *metric == Metric::E2e)
            .map(|((name, _), h)| {
                let p =
                    (!h.is_empty()).then(|| (h.value_at_quantile(0.5), h.value_at_quantile(0.99)));
                h.reset();
                (*name, p)
            })
            .collect()
    }
}

impl Progress {
    fn phase(&self, index: usize) -> Option<Arc<PhaseProgress>> {
        self.phases.read().ok()?.get(index).cloned()
    }

    fn tick(&self) {
        let tty = self.screen.lock().is_ok_and(|s| s.tty);
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
            let Some(snapshot) = self.snapshot() else {
                continue;
            };
            if let Ok(mut screen) = self.screen.lock() {
                let block = view::block(&snapshot, terminal_width(), screen.color);
                screen.show(block, view::line(&snapshot));
            }
        }
        if let Ok(mut screen) = self.screen.lock() {
            screen.clear();
        }
    }

    /// The current phase as it stands, and a fresh interval.
    fn snapshot(&self) -> Option<Snapshot> {
        let phase = self.phase(self.current.load(Ordering::Relaxed))?;
        let batches = self.batches.load(Ordering::Relaxed);
        let (rate, interval) = self.token_rate();
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
        let done = phase.done.load(Ordering::Relaxed);
        Some(Snapshot {
            phase: phase.name.clone(),
            elapsed: phase.started.elapsed(),
            planned: phase.planned,
            requests: phase.planned_requests.map(|planned| (done, planned)),
            sent: phase.sent.load(Ordering::Relaxed),
            done,
            failed: phase.errors.load(Ordering::Relaxed),
            throttled: phase.throttled.load(Ordering::Relaxed),
            interval_s: interval,
            latencies: phase.take_latencies(batches),
            throughput,
            objectives: self
                .objectives
                .lock()
                .map(|o| o.clone())
                .unwrap_or_default(),
        })
    }

    /// Output tokens a second since the previous call (from the chunks as they arrive), and
    /// the seconds since it.
    fn token_rate(&self) -> (f64, f64) {
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
        match self.last.lock() {
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
        }
    }

    /// Prints a line above the progress.
    fn say(&self, text: &str) {
        match self.screen.lock() {
            Ok(screen) => screen.say(text),
            Err(_) => eprintln!("{text}"),
        }
    }

    fn finished(&self, record: &crate::records::RequestRecord) {
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
        if self.batches.load(Ordering::Relaxed) {
            self.inputs
                .fetch_add(u64::from(record.inputs.unwrap_or(0)), Ordering::Relaxed);
        }
        let open_loop = phase.open_loop;
        if let Ok(mut histograms) = phase.latencies.lock() {
            for ((_, metric), histogram) in LATENCIES.iter().zip(histograms.iter_mut()) {
                metric.samples(record, open_loop, |ms, times| {
                    let _ = histogram.record_n(((ms * 1000.0) as u64).max(1), times);
                });
            }
        };
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
                    self.say(&format!(
                        "llmload: running plan \"{}\" against {}",
                        header.plan, header.target
                    ));
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
                        (from..=start.index).map(|i| Arc::new(PhaseProgress::new(None, i))),
                    );
                    phases[start.index] = Arc::new(PhaseProgress::new(Some(start), start.index));
                }
                self.current.store(start.index, Ordering::Relaxed);
            }
            Event::RequestSent { phase } => {
                if let Some(phase) = self.phase(phase) {
                    phase.sent.fetch_add(1, Ordering::Relaxed);
                }
            }
            Event::RequestFinished(record) => self.finished(record),
            Event::Objectives(standings) => {
                if let Ok(mut objectives) = self.objectives.lock() {
                    *objectives = standings.to_vec();
                }
            }
            Event::Warning(text) => {
                self.say(&format!("warning: {}", crate::escape::one_line(text)));
            }
            Event::Note(text) => self.say(&format!("note: {text}")),
            Event::PhaseEnded(_) | Event::RunEnded(_) => {}
        }
    }
}
