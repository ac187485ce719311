//! The run over time: per window (a second by default), requests sent, completed and failed,
//! requests in flight, output tokens per second, and TTFT, ITL and E2E percentiles, with the
//! phases' bands. What a chart of "when did it break, and what was the load then" is drawn
//! from; `timeseries.csv` and summary.json carry it.
//!
//! Each event counts in the window it happened in: a send when it was sent, a completion or a
//! failure when it ended, a token when its chunk arrived, a TTFT when the first token arrived,
//! an ITL gap when it closed. Percentiles per window come from DDSketch (sketches-ddsketch,
//! within 1% of the exact value), which keeps each window's memory small however many requests
//! it holds; requests in flight are the exact time integral over the window
//! ([`super::profile::ProfileBuilder`]). A long run gets wider windows, so that a run holds at
//! most [`crate::plan::MAX_SERIES_WINDOWS`].

use serde::Serialize;
use sketches_ddsketch::{Config, DDSketch};

use super::profile::ProfileBuilder;
use super::ttft_ms;
use crate::records::{ErrorClass, PhaseEnd, PhaseStart, RequestRecord, SessionEnd};

/// One window of the run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SeriesPoint {
    /// Its start, seconds from the run's start.
    pub t_s: f64,
    /// Requests sent in it.
    pub sent: u64,
    /// Requests that succeeded in it.
    pub completed: u64,
    /// Requests that failed in it (throttled and cancelled ones and the client's own failures
    /// aside).
    pub failed: u64,
    /// Requests the server throttled in it.
    #[serde(default)]
    pub throttled: u64,
    /// The least share of the server's request budget its responses in it said was left
    /// (`remaining / limit` of the rate-limit headers), when they said both.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests_budget_left: Option<f64>,
    /// The same of its token budget.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens_budget_left: Option<f64>,
    /// Requests in flight, on average over the window.
    pub in_flight: f64,
    /// Output tokens that arrived in it, per second.
    pub output_tokens_per_s: f64,
    /// TTFT p50 of the first tokens that arrived in it, ms.
    pub ttft_p50_ms: Option<f64>,
    /// TTFT p99, ms.
    pub ttft_p99_ms: Option<f64>,
    /// ITL p50 of the gaps that closed in it, ms.
    pub itl_p50_ms: Option<f64>,
    /// ITL p99, ms.
    pub itl_p99_ms: Option<f64>,
    /// E2E p50 of the requests that ended in it, ms.
    pub e2e_p50_ms: Option<f64>,
    /// E2E p99, ms.
    pub e2e_p99_ms: Option<f64>,
    /// Agent sessions running (from their start to their last answer), on average over the
    /// window; `None` in a run without sessions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sessions: Option<f64>,
}

/// A phase's time on the run's time line.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PhaseBand {
    /// Its name.
    pub name: String,
    /// Whether it counts in metrics.
    pub recorded: bool,
    /// When it started, seconds from the run's start.
    pub from_s: f64,
    /// When it stopped sending.
    pub to_s: f64,
}

/// The run over time.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct TimeSeries {
    /// Each window's width, seconds.
    pub interval_s: f64,
    /// The windows, in order.
    pub points: Vec<SeriesPoint>,
    /// The phases' bands.
    pub phases: Vec<PhaseBand>,
}

#[derive(Clone)]
struct Window {
    sent: u64,
    completed: u64,
    failed: u64,
    throttled: u64,
    requests_left: Option<f64>,
    tokens_left: Option<f64>,
    output_tokens: u64,
    ttft: DDSketch,
    itl: DDSketch,
    e2e: DDSketch,
}

impl Window {
    fn new() -> Window {
        Window {
            sent: 0,
            completed: 0,
            failed: 0,
            throttled: 0,
            requests_left: None,
            tokens_left: None,
            output_tokens: 0,
            ttft: DDSketch::new(Config::defaults()),
            itl: DDSketch::new(Config::defaults()),
            e2e: DDSketch::new(Config::defaults()),
        }
    }

    fn merge(&mut self, other: &Window) {
        self.sent += other.sent;
        self.completed += other.completed;
        self.failed += other.failed;
        self.throttled += other.throttled;
        self.requests_left = least(self.requests_left, other.requests_left);
        self.tokens_left = least(self.tokens_left, other.tokens_left);
        self.output_tokens += other.output_tokens;
        // Sketches with one configuration always merge.
        let _ = self.ttft.merge(&other.ttft);
        let _ = self.itl.merge(&other.itl);
        let _ = self.e2e.merge(&other.e2e);
    }
}

/// Builds a run's time series as its records stream by.
pub struct SeriesBuilder {
    interval_us: u64,
    max_windows: usize,
    windows: Vec<Window>,
    in_flight: ProfileBuilder,
    /// Agent sessions running, once a session has ended.
    sessions: Option<ProfileBuilder>,
    bands: Vec<PhaseBand>,
    last_us: u64,
}

impl SeriesBuilder {
    /// Windows of `interval_us`, widened to keep at most `max_windows`.
    pub fn new(interval_us: u64, max_windows: usize) -> SeriesBuilder {
        SeriesBuilder {
            interval_us: interval_us.max(1),
            max_windows: max_windows.max(2),
            windows: Vec::new(),
            in_flight: ProfileBuilder::new(0),
            sessions: None,
            bands: Vec::new(),
            last_us: 0,
        }
    }

    /// The window of `at_us`, made (and the windows widened) as needed.
    fn window(&mut self, at_us: u64) -> &mut Window {
        let mut index = (at_us / self.interval_us) as usize;
        while index >= self.max_windows {
            // Twice as wide: neighbours merged.
            let merged: Vec<Window> = self
                .windows
                .chunks(2)
                .map(|pair| {
                    let mut w = pair[0].clone();
                    if let Some(second) = pair.get(1) {
                        w.merge(second);
                    }
                    w
                })
                .collect();
            self.windows = merged;
            self.interval_us *= 2;
            index = (at_us / self.interval_us) as usize;
        }
        if self.windows.len() <= index {
            self.windows.resize_with(index + 1, Window::new);
        }
        &mut self.windows[index]
    }

    /// A phase started.
    pub fn phase_start(&mut self, start: &PhaseStart) {
        self.bands.push(PhaseBand {
            name: start.name.clone(),
            recorded: start.record,
            from_s: start.at_us as f64 / 1e6,
            to_s: start.at_us as f64 / 1e6,
        });
        self.last_us = self.last_us.max(start.at_us);
    }

    /// A phase stopped sending.
    pub fn phase_end(&mut self, end: &PhaseEnd, name: &str) {
        if let Some(band) = self.bands.iter_mut().rev().find(|b| b.name == name) {
            band.to_s = end.at_us as f64 / 1e6;
        }
        self.last_us = self.last_us.max(end.at_us);
    }

    /// Adds one agent session, running from its start to its end.
    pub fn session(&mut self, session: &SessionEnd) {
        let end = session.end_us.max(session.start_us);
        self.last_us = self.last_us.max(end);
        self.sessions
            .get_or_insert_with(|| ProfileBuilder::new(0))
            .add_in_flight(session.start_us, end, 1.0);
    }

    /// Adds one request.
    pub fn record(&mut self, record: &RequestRecord) {
        let send = record.actual_send_us;
        let end = record.end_us().unwrap_or(send);
        self.last_us = self.last_us.max(end);
        self.window(send).sent += 1;
        self.in_flight.add_in_flight(send, end, 1.0);
        match record.error {
            Some(ErrorClass::Cancelled | ErrorClass::Client) => {}
            Some(class) if class.throttled() => self.window(end).throttled += 1,
            Some(_) => self.window(end).failed += 1,
            None => {
                let w = self.window(end);
                w.completed += 1;
                w.e2e.add((end - send) as f64 / 1000.0);
            }
        }
        if let Some(limit) = &record.rate_limit {
            let w = self.window(end);
            w.requests_left = least(w.requests_left, budget_left(&limit.requests));
            w.tokens_left = least(w.tokens_left, budget_left(&limit.tokens));
        }
        if let (Some(ttft), Some(first)) = (ttft_ms(record), record.ttft_us) {
            self.window(send + first).ttft.add(ttft);
        }
        // Tokens when they arrived; each gap when it closed, a chunk of k tokens as k gaps of
        // gap/k (as the ITL distribution counts them).
        let mut previous: Option<u64> = None;
        for &(at, tokens) in &record.chunks {
            let w = self.window(send + at);
            w.output_tokens += tokens as u64;
            if let Some(before) = previous {
                if tokens > 0 && record.ok() {
                    let gap = (at.saturating_sub(before)) as f64 / 1000.0 / tokens as f64;
                    for _ in 0..tokens {
                        w.itl.add(gap);
                    }
                }
            }
            previous = Some(at);
        }
    }

    /// The series, windows up to the run's last event.
    pub fn finish(mut self) -> TimeSeries {
        let count = (self.last_us / self.interval_us + 1) as usize;
        if self.windows.len() < count {
            self.windows.resize_with(count, Window::new);
        }
        let width_s = self.interval_us as f64 / 1e6;
        let q = |sketch: &DDSketch, q: f64| sketch.quantile(q).ok().flatten();
        let points = self
            .windows
            .iter()
            .enumerate()
            .map(|(i, w)| {
                let from = i as u64 * self.interval_us;
                SeriesPoint {
                    t_s: from as f64 / 1e6,
                    sent: w.sent,
                    completed: w.completed,
                    failed: w.failed,
                    throttled: w.throttled,
                    requests_budget_left: w.requests_left,
                    tokens_budget_left: w.tokens_left,
                    in_flight: self.in_flight.mean_in_flight(from, from + self.interval_us),
                    output_tokens_per_s: w.output_tokens as f64 / width_s,
                    ttft_p50_ms: q(&w.ttft, 0.5),
                    ttft_p99_ms: q(&w.ttft, 0.99),
                    itl_p50_ms: q(&w.itl, 0.5),
                    itl_p99_ms: q(&w.itl, 0.99),
                    e2e_p50_ms: q(&w.e2e, 0.5),
                    e2e_p99_ms: q(&w.e2e, 0.99),
                    sessions: self
                        .sessions
                        .as_ref()
                        .map(|running| running.mean_in_flight(from, from + self.interval_us)),
                }
            })
            .collect();
        TimeSeries {
            interval_s: width_s,
            points,
            phases: self.bands,
        }
    }
}

/// The share of a budget left, when its headers said both its size and what remains.
fn budget_left(budget: &crate::records::Budget) -> Option<f64> {
    match (budget.remaining, budget.limit) {
        (Some(remaining), Some(limit)) if limit > 0 => {
            Some((remaining as f64 / limit as f64).min(1.0))
        }
        _ => None,
    }
}

fn least(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(
        send_us: u64,
        ttft_us: u64,
        gaps_us: &[u64],
        error: Option<ErrorClass>,
    ) -> RequestRecord {
        let mut chunks = vec![(ttft_us, 1u32)];
        let mut at = ttft_us;
        for gap in gaps_us {
            at += gap;
            chunks.push((at, 1));
        }
        RequestRecord {
            intended_send_us: send_us,
            actual_send_us: send_us,
            input_tokens_planned: 10,
            output_tokens_planned: chunks.len() as u32,
            error,
            http_status: Some(200),
            ttft_us: Some(ttft_us),
            e2e_us: Some(at),
            chunks,
            ..RequestRecord::default()
        }
    }

    #[test]
    fn events_count_in_the_window_they_happened_in() {
        let mut series = SeriesBuilder::new(1_000_000, 100);
        // Sent at 0.9 s, first token at 1.1 s, ends at 2.3 s.
        series.record(&record(900_000, 200_000, &[600_000, 600_000], None));
        // Fails at 0.5 s.
        series.record(&record(
            100_000,
            100_000,
            &[300_000],
            Some(ErrorClass::Http5xx),
        ));
        let ts = series.finish();
        assert_eq!(ts.points.len(), 3);
        assert_eq!(ts.points[0].sent, 2);
        assert_eq!(ts.points[0].failed, 1);
        assert_eq!(ts.points[2].completed, 1);
        let ttft = ts.points[1].ttft_p50_ms.unwrap();
        assert!((ttft - 200.0).abs() < 2.0, "{ttft}");
        assert!(
            ts.points[0].ttft_p50_ms.is_some(),
            "the failed request's first token at 0.2 s"
        );
        // Tokens at 1.1 s, 1.7 s (window 1) and 2.3 s (window 2).
        assert_eq!(ts.points[1].output_tokens_per_s, 2.0);
        assert_eq!(ts.points[2].output_tokens_per_s, 1.0);
        // In flight: the first request from 0.9 s to 2.3 s, the second from 0.1 s to 0.5 s.
        assert!(
            (ts.points[0].in_flight - 0.5).abs() < 1e-9,
            "{:?}",
            ts.points[0]
        );
        assert!((ts.points[1].in_flight - 1.0).abs() < 1e-9);
    }

    #[test]
    fn sessions_running_are_the_mean_over_each_window() {
        let session = |start_us: u64, end_us: u64| SessionEnd {
            phase: 0,
            session: 0,
            id: "s".into(),
            start_us,
            end_us,
            calls: 1,
            sent: 1,
            answered: 1,
            waited_ms: 0.0,
            shard: None,
        };
        let mut series = SeriesBuilder::new(1_000_000, 100);
        assert_eq!(
            SeriesBuilder::new(1_000_000, 100).finish().points[0].sessions,
            None
        );
        // One session from 0.5 s to 2 s, another from 1 s to 1.5 s.
        series.session(&session(500_000, 2_000_000));
        series.session(&session(1_000_000, 1_500_000));
        let ts = series.finish();
        let running: Vec<Option<f64>> = ts.points.iter().map(|p| p.sessions).collect();
        assert_eq!(running, [Some(0.5), Some(1.5), Some(0.0)]);
    }

    #[test]
    fn long_runs_get_wider_windows() {
        let mut series = SeriesBuilder::new(1_000_000, 10);
        for s in 0..40u64 {
            series.record(&record(s * 1_000_000, 1_000, &[], None));
        }
        let ts = series.finish();
        assert!(ts.points.len() <= 10, "{}", ts.points.len());
        assert_eq!(ts.interval_s, 4.0);
        assert_eq!(ts.points.iter().map(|p| p.sent).sum::<u64>(), 40);
        assert_eq!(ts.points.iter().map(|p| p.completed).sum::<u64>(), 40);
    }

    #[test]
    fn throttled_requests_and_the_budget_left_are_kept_per_window() {
        use crate::records::{Budget, RateLimit};
        let mut series = SeriesBuilder::new(1_000_000, 100);
        let said = |remaining, limit| RateLimit {
            requests: Budget {
                limit: Some(limit),
                remaining: Some(remaining),
                reset_ms: None,
            },
            tokens: Budget {
                limit: None,
                remaining: Some(5),
                reset_ms: None,
            },
            ..RateLimit::default()
        };
        let mut ok = record(100_000, 1_000, &[], None);
        ok.rate_limit = Some(said(30, 60));
        let mut throttled = record(200_000, 1_000, &[], Some(ErrorClass::Http429));
        throttled.rate_limit = Some(said(0, 60));
        let overloaded = record(1_200_000, 1_000, &[], Some(ErrorClass::Overloaded));
        let broken = record(1_300_000, 1_000, &[], Some(ErrorClass::Http5xx));
        for r in [&ok, &throttled, &overloaded, &broken] {
            series.record(r);
        }
        let ts = series.finish();
        let (first, second) = (&ts.points[0], &ts.points[1]);
        assert_eq!((first.completed, first.failed, first.throttled), (1, 0, 1));
        assert_eq!((second.failed, second.throttled), (1, 1));
        // The least left in the window; a budget without its size says no share.
        assert_eq!(first.requests_budget_left, Some(0.0));
        assert_eq!(first.tokens_budget_left, None);
        assert_eq!(second.requests_budget_left, None);
    }
}
