//! One metric gathered from a run's requests as they finish, with the report's definitions (a
//! share over the requests it is taken among; a distribution of every sample): what the plan's
//! `abort` conditions and a phase that ends once decided read while the run goes.
//!
//! Not for: the run's aggregates (the records are read again at the end, by `metrics`).

use crate::metrics::table::Source;
use crate::metrics::Distribution;
use crate::plan::{Metric, Stat};
use crate::records::RequestRecord;

/// What one metric has gathered so far.
pub(super) enum Live {
    /// The completed requests a share counts, of those it is taken among.
    Share { counted: u64, among: u64 },
    /// A per-request distribution.
    Distribution(Distribution),
    /// Nothing the run can gather while it goes (throughputs, the server's telemetry).
    Nothing,
}

impl Live {
    /// An empty gathering of `metric`, as the metric table defines it.
    pub fn of(metric: Metric) -> Live {
        match metric.def().source {
            Source::Share { .. } => Live::Share {
                counted: 0,
                among: 0,
            },
            Source::Distribution { .. } => {
                Live::Distribution(Distribution::for_kind(metric.kind()))
            }
            Source::PerSecond { .. }
            | Source::Aggregate(_)
            | Source::Sessions { .. }
            | Source::Server(_)
            | Source::Search => Live::Nothing,
        }
    }

    /// Takes one finished request of the scope (`good`: it met the plan's `slo`).
    pub fn add(&mut self, metric: Metric, record: &RequestRecord, good: bool) {
        match (self, metric.def().source) {
            (
                Live::Share { counted, among },
                Source::Share {
                    among: takes,
                    counts,
                    ..
                },
            ) if takes(record) => {
                *among += 1;
                *counted += u64::from(counts(record, good));
            }
            (Live::Distribution(distribution), _) => {
                metric.samples(record, false, |value, weight| {
                    distribution.record_n(value, weight)
                });
            }
            _ => {}
        }
    }

    /// Its value now: a share's, or a distribution's `stat` (`None` before anything counted).
    pub fn observed(&self, stat: Option<Stat>) -> Option<f64> {
        match self {
            Live::Share { counted, among } if *among > 0 => Some(*counted as f64 / *among as f64),
            Live::Distribution(d) => d.stat(stat?),
            _ => None,
        }
    }
}
