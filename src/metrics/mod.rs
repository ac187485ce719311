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
mod distribution;
mod media;
pub mod profile;
pub mod server;
pub mod stalls;
pub mod table;
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
    let mut aggregator = Aggregator::new(slo);
    if let Some(header) = &log.header {
        aggregator.push(LogLine::Run(crate::records::RunLine::current(
            header.clone(),
        )));
    }
    for phase in &log.phases {
        aggregator.push(LogLine::PhaseStart(phase.clone()));
    }
    // The client's stalls before the records: each request is then checked against every
    // stall as it is read (a file interleaves them; an in-memory log keeps them apart).
    for stall in &log.stalls {
        aggregator.push(LogLine::Stall(*stall));
    }
    for record in &log.records {
        aggregator.record(record);
    }
    for end in &log.phase_ends {
        aggregator.push(LogLine::PhaseEnd(end.clone()));
    }
    if let Some(end) = &log.search_end {
        aggregator.push(LogLine::SearchEnd(end.clone()));
    }
    if let Some(end) = &log.end {
        aggregator.push(LogLine::RunEnd(end.clone()));
    }
    aggregator.finish().1
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
    Ok(aggregator.finish())
}

#[cfg(test)]
mod tests;
