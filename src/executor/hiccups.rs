//! The hiccup meter (jHiccup's idea): a plain thread that sleeps a fixed short tick and
//! records how late it wakes. Whatever stops the whole process — a runner that takes the CPU
//! away, a page-fault storm, a SIGSTOP, a hypervisor's steal — stops it too, so its lateness
//! is the client's own stall, measured independently of any request. Each stall of
//! [`STALL_RECORDED`] or more goes into the records as a `stall` line (the metrics mark the
//! requests in flight during it and the verdict does not blame the server for them); every
//! tick's lateness goes into a histogram each phase summarises.
//!
//! Not for: the async runtime's own scheduling delays while the process runs (schedule lag and
//! the client's CPU say those), nor the server's stalls.
//!
//! Its cost: 200 wake-ups a second on a thread of its own, measured in docs/reliability.md.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

use super::recorder::Message;
use super::LiveCounters;
use crate::records::{Hiccups, LogLine, Stall, STALL_RECORDED};

/// How long the meter sleeps between readings.
///
/// 5 ms, not jHiccup's 1 ms: a 1 ms tick cost 1.4% of a core (0.35 CPU-s of the thread over a
/// 25 s run), 5 ms 0.4% (0.11 CPU-s; docs/reliability.md); a stall is what lasts 5 ms or more,
/// which either tick measures.
pub const TICK: Duration = Duration::from_millis(5);
/// The most `stall` lines a second: a machine stalling all the time says so within the first,
/// and its lines do not crowd out the requests' (the histogram still takes every tick).
const MOST_LINES_PER_SECOND: u32 = 100;

/// The meter's thread, until dropped.
pub struct HiccupMeter {
    lateness: Arc<Mutex<Histogram<u64>>>,
    stop: Arc<AtomicBool>,
}

/// The meter's readings up to a moment, to subtract from a later reading.
pub struct Reading(Histogram<u64>);

fn histogram() -> Option<Histogram<u64>> {
    // Lateness in µs up to an hour, 3 significant digits.
    Histogram::new_with_bounds(1, 3_600_000_000, 3).ok()
}

impl HiccupMeter {
    /// Starts the meter; its stalls are timed from `origin` (the run's start) and sent to the
    /// recorder through `records`. `None` where the thread cannot be started.
    pub fn start(
        origin: Instant,
        records: mpsc::Sender<Message>,
        live: Arc<LiveCounters>,
    ) -> Option<HiccupMeter> {
        let lateness = Arc::new(Mutex::new(histogram()?));
        let stop = Arc::new(AtomicBool::new(false));
        let (thread_lateness, thread_stop) = (lateness.clone(), stop.clone());
        std::thread::Builder::new()
            .name("llmload-hiccup".into())
            .spawn(move || measure(origin, &records, &live, &thread_lateness, &thread_stop))
            .ok()?;
        Some(HiccupMeter { lateness, stop })
    }

    /// Everything measured so far.
    pub fn reading(&self) -> Option<Reading> {
        self.lateness.lock().ok().map(|h| Reading(h.clone()))
    }

    /// What was measured since `earlier`.
    pub fn since(&self, earlier: &Reading) -> Option<Hiccups> {
        let mut now = self.reading()?.0;
        now.subtract(&earlier.0).ok()?;
        Some(summarise(&now))
    }
}

impl Drop for HiccupMeter {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// The meter's loop: sleep a tick, note how late the wake-up came.
fn measure(
    origin: Instant,
    records: &mpsc::Sender<Message>,
    live: &LiveCounters,
    lateness: &Mutex<Histogram<u64>>,
    stop: &AtomicBool,
) {
    let mut lines = LineBudget::default();
    while !stop.load(Ordering::Relaxed) {
        let expected = Instant::now() + TICK;
        std::thread::sleep(TICK);
        let woke = Instant::now();
        let late = woke.saturating_duration_since(expected);
        if late >= STALL_RECORDED {
            // Counted whether or not its line fits the second's budget.
            live.stalls.fetch_add(1, Ordering::Relaxed);
            live.stalled_us
                .fetch_add(late.as_micros() as u64, Ordering::Relaxed);
        }
        let Some(stall) = note(origin, expected, woke, lateness, &mut lines) else {
            continue;
        };
        if records
            .send(Message::Line(Box::new(LogLine::Stall(stall))))
            .is_err()
        {
            // The recorder is gone: the run is over.
            return;
        }
    }
}

/// The `stall` lines written in the current second of the run.
#[derive(Default)]
struct LineBudget {
    second: u64,
    written: u32,
}

/// One wake-up, `woke` for a tick that should have ended at `expected`: its lateness goes into
/// the histogram, and a stall worth a line (within the second's budget) is returned.
fn note(
    origin: Instant,
    expected: Instant,
    woke: Instant,
    lateness: &Mutex<Histogram<u64>>,
    lines: &mut LineBudget,
) -> Option<Stall> {
    let late = woke.saturating_duration_since(expected);
    if let Ok(mut histogram) = lateness.lock() {
        histogram.saturating_record(late.as_micros() as u64);
    }
    if late < STALL_RECORDED {
        return None;
    }
    let at_us = crate::clock::micros_since(origin, expected);
    let second = at_us / 1_000_000;
    if lines.second != second {
        *lines = LineBudget { second, written: 0 };
    }
    lines.written += 1;
    (lines.written <= MOST_LINES_PER_SECOND).then_some(Stall {
        at_us,
        ms: late.as_secs_f64() * 1e3,
        shard: None,
    })
}

/// A histogram of wake-up lateness (µs) as a phase's summary.
fn summarise(histogram: &Histogram<u64>) -> Hiccups {
    let ms = |us: u64| us as f64 / 1e3;
    Hiccups {
        ticks: histogram.len(),
        p99_ms: ms(histogram.value_at_quantile(0.99)),
        max_ms: ms(histogram.max()),
        stalls: histogram
            .iter_recorded()
            .filter(|v| v.value_iterated_to() >= STALL_RECORDED.as_micros() as u64)
            .map(|v| v.count_at_value())
            .sum(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_late_wake_up_is_a_stall_in_the_records_and_the_phase_summary() {
        let origin = Instant::now();
        let lateness = Mutex::new(histogram().unwrap());
        let mut lines = LineBudget::default();
        let at = |ms: u64| origin + Duration::from_millis(ms);
        // Ordinary wake-ups, then one 300 ms late (a SIGSTOP's).
        for i in 1..=10 {
            assert!(note(
                origin,
                at(i),
                at(i) + Duration::from_micros(80),
                &lateness,
                &mut lines
            )
            .is_none());
        }
        let stall = note(origin, at(11), at(311), &lateness, &mut lines).unwrap();
        assert_eq!(stall.at_us, 11_000);
        assert!((stall.ms - 300.0).abs() < 0.01, "{stall:?}");
        let hiccups = summarise(&lateness.lock().unwrap());
        assert_eq!(hiccups.ticks, 11);
        assert_eq!(hiccups.stalls, 1);
        assert!((hiccups.max_ms - 300.0).abs() < 0.5, "{hiccups:?}");
        // A machine that stalls all the time writes its second's budget of lines, no more.
        let written = (0..1000u64)
            .filter_map(|i| {
                note(
                    origin,
                    at(2000 + i),
                    at(2000 + i) + Duration::from_millis(6),
                    &lateness,
                    &mut lines,
                )
            })
            .count();
        assert_eq!(written, MOST_LINES_PER_SECOND as usize);
    }

    #[test]
    fn a_phase_summary_is_what_was_measured_since_its_reading() {
        let (sender, _receiver) = mpsc::channel();
        let meter = HiccupMeter::start(Instant::now(), sender, Arc::default()).unwrap();
        std::thread::sleep(Duration::from_millis(60));
        let before = meter.reading().unwrap();
        let earlier = before.0.len();
        std::thread::sleep(Duration::from_millis(60));
        let since = meter.since(&before).unwrap();
        let total = meter.reading().unwrap().0.len();
        assert!(since.ticks >= 5, "{since:?}");
        assert!(
            since.ticks + earlier <= total,
            "{since:?} {earlier} {total}"
        );
    }
}
