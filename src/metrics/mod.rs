//! Metrics: per-request records in, per-phase and overall aggregates out.
//!
//! Every definition here is documented in docs/metrics.md; in short: latencies come only from
//! successful requests (failures are counted in the error rates, never folded into latency or
//! throughput), ITL pools every gap of every request (a chunk of k tokens gives k samples of
//! gap/k), and throughput divides by the phase's wall time. This module also decides when a
//! result is not trustworthy (see [`warnings`]). It knows nothing of SLAs: that is
//! [`crate::verdict`].
//!
//! Its parts: the metric table ([`table`]: what each metric is and its per-request formula),
//! the aggregates' types ([`aggregates`]), the streaming aggregator ([`aggregator`]) and each
//! scope's accumulator ([`accumulator`]); distributions, load profiles, the time series, the
//! server's telemetry and the warnings each have a file.

mod accumulator;
mod aggregates;
mod aggregator;
pub mod budget;
pub mod cost;
mod distribution;
pub mod energy;
mod grouped;
mod media;
pub mod profile;
pub mod server;
pub mod sessions;
pub mod stalls;
pub mod steady;
pub mod table;
mod tally;
pub mod timeseries;
pub mod warnings;

use std::path::Path;

pub use aggregates::*;
pub use aggregator::Aggregator;
pub use distribution::{Distribution, Summary};
pub use media::MediaBucket;
pub use table::{connect_ms, itl_gaps, ttft_ms, Metric, MetricKind};
pub use warnings::{Severity, Warning};

use crate::plan::Slo;
use crate::records::{LogLine, RequestRecord, RunLog};

/// The nearest-rank percentile p (0–100) of raw `values` (reordered in place); `values` must
/// not be empty. For exact percentiles where no histogram is kept (resampling, timing errors).
pub fn percentile(values: &mut [f64], p: f64) -> f64 {
    let n = values.len();
    let rank = (((p / 100.0) * n as f64 - 1e-9).ceil() as usize).clamp(1, n);
    let (_, value, _) = values.select_nth_unstable_by(rank - 1, |a, b| a.total_cmp(b));
    *value
}

/// Whether a successful request met every objective (`None`: no objective applies).
pub fn meets(slo: &Slo, record: &RequestRecord) -> bool {
    let within = |limit: Option<std::time::Duration>, value_ms: Option<f64>| match limit {
        None => true,
        Some(limit) => value_ms.is_some_and(|v| v <= limit.as_secs_f64() * 1000.0),
    };
    let ms = |us: u64| us as f64 / 1000.0;
    // One output token has no time per output token: nothing to miss.
    let tpot = table::tpot_ms(record).or_else(|| {
        (record.ttft_us.is_some() && record.e2e_us.is_some() && record.completion_tokens.is_some())
            .then_some(0.0)
    });
    record.ok()
        && within(slo.ttft, record.ttft_us.map(ms))
        && within(slo.tpot, tpot)
        && within(slo.e2e, record.e2e_us.map(ms))
}

/// Computes every aggregate of a run held in memory; `slo` (the plan's) defines goodput.
pub fn compute(log: &RunLog, slo: Option<&Slo>) -> Aggregates {
    let mut aggregates = replay(log, slo, &mut SteadyFilter::none());
    let steady = with_steady(&aggregates, |filter| Ok(replay(log, slo, filter)));
    aggregates.steady = steady.ok();
    aggregates
}

/// The steady windows of a run's `aggregates`: each phase's cut, and the aggregates of the
/// requests from the cuts on, from `again` — one more pass over the run's lines through the
/// filter, made only when some phase was cut.
fn with_steady(
    aggregates: &Aggregates,
    again: impl FnOnce(&mut SteadyFilter) -> crate::error::Result<Aggregates>,
) -> crate::error::Result<steady::Steady> {
    let cuts = steady::cuts(aggregates);
    if cuts.iter().all(|c| c.cut_s <= 0.0) {
        return Ok(steady::assemble(cuts, aggregates));
    }
    let steady = again(&mut SteadyFilter::of(&cuts))?;
    Ok(steady::assemble(cuts, &steady))
}

/// The aggregates of an in-memory log's lines, as `filter` passes them.
fn replay(log: &RunLog, slo: Option<&Slo>, filter: &mut SteadyFilter) -> Aggregates {
    let mut aggregator = Aggregator::new(slo);
    let mut lines: Vec<LogLine> = Vec::new();
    if let Some(header) = &log.header {
        lines.push(LogLine::Run(crate::records::RunLine::current(
            header.clone(),
        )));
    }
    lines.extend(log.phases.iter().cloned().map(LogLine::PhaseStart));
    // The client's stalls before the records: each request is then checked against every
    // stall as it is read (a file interleaves them; an in-memory log keeps them apart).
    lines.extend(log.stalls.iter().copied().map(LogLine::Stall));
    for line in lines {
        filter.feed(&mut aggregator, line);
    }
    // Records are added as they are: no copy of a long run's requests.
    for record in log.records.iter().filter(|r| filter.keeps(r)) {
        aggregator.record(record);
    }
    let sessions = log.sessions.iter().cloned().map(LogLine::Session);
    let ends = log.phase_ends.iter().cloned().map(LogLine::PhaseEnd);
    let search = log.search_end.iter().cloned().map(LogLine::SearchEnd);
    let run = log.end.iter().cloned().map(LogLine::RunEnd);
    for line in sessions.chain(ends).chain(search).chain(run) {
        filter.feed(&mut aggregator, line);
    }
    aggregator.finish().1
}

/// Which lines a pass over a run's records keeps: all of them, or, for the steady windows, a
/// cut phase's requests sent from its cut on, with the phase starting there.
struct SteadyFilter {
    /// Each cut phase's window start, µs from the run's start, by name.
    cuts: std::collections::HashMap<String, u64>,
    /// The same by phase index, as the phases' starts name them.
    by_index: std::collections::HashMap<usize, u64>,
}

impl SteadyFilter {
    fn none() -> SteadyFilter {
        SteadyFilter {
            cuts: Default::default(),
            by_index: Default::default(),
        }
    }

    fn of(cuts: &[steady::Cut]) -> SteadyFilter {
        SteadyFilter {
            cuts: cuts
                .iter()
                .filter(|c| c.cut_s > 0.0)
                .map(|c| (c.phase.clone(), c.from_us))
                .collect(),
            by_index: Default::default(),
        }
    }

    fn pass(&mut self, line: LogLine) -> Option<LogLine> {
        match line {
            LogLine::PhaseStart(mut start) => {
                if let Some(&from) = self.cuts.get(&start.name) {
                    start.at_us = start.at_us.max(from);
                    self.by_index.insert(start.index, from);
                }
                Some(LogLine::PhaseStart(start))
            }
            LogLine::Request(record) if !self.keeps(&record) => None,
            other => Some(other),
        }
    }

    /// Hands `line` to `aggregator` if it passes.
    fn feed(&mut self, aggregator: &mut Aggregator, line: LogLine) {
        if let Some(line) = self.pass(line) {
            aggregator.push(line);
        }
    }

    /// Whether a request is in its phase's window: sent from the cut on.
    fn keeps(&self, record: &crate::records::RequestRecord) -> bool {
        self.by_index
            .get(&record.phase)
            .is_none_or(|&from| record.actual_send_us >= from)
    }
}

/// Computes every aggregate of the run in `records.jsonl` in one pass over the file, holding no
/// record longer than it takes to add it: memory does not grow with the length of the run.
/// Returns the run's log without its records (header, phases, end) beside the aggregates.
pub fn compute_file(path: &Path, slo: Option<&Slo>) -> crate::error::Result<(RunLog, Aggregates)> {
    compute_file_with(path, slo, std::time::Duration::from_secs(1))
}

/// [`compute_file`], with time-series windows of `interval`.
pub fn compute_file_with(
    path: &Path,
    slo: Option<&Slo>,
    interval: std::time::Duration,
) -> crate::error::Result<(RunLog, Aggregates)> {
    let mut aggregator = Aggregator::new(slo).with_interval(interval);
    crate::records::read_lines(path, |line| aggregator.push(line))?;
    RunLog::check_header(&aggregator.log, path)?;
    let (log, mut aggregates) = aggregator.finish();
    let steady = with_steady(&aggregates, |filter| {
        let mut again = Aggregator::new(slo).with_interval(interval);
        crate::records::read_lines(path, |line| filter.feed(&mut again, line))?;
        Ok(again.finish().1)
    })?;
    aggregates.steady = Some(steady);
    Ok((log, aggregates))
}

#[cfg(test)]
mod tests;
