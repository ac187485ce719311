//! The metric table's shares and per-second metrics, summed request by request with the
//! table's own formulas (its `counts` and `amount`), so that a scope's error rate or throughput
//! has one definition: the one `compare` resamples and the live abort watches.
//!
//! What this is not: the distributions (kept as histograms by [`super::grouped`]), or the
//! aggregates made of several of these (cost, energy), which read the totals from here.

use super::table::{Metric, Population, Source, METRICS};
use crate::records::RequestRecord;

/// One share's or per-second metric's sums over a scope's completed requests.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(super) struct Part {
    /// What the counted requests add: a share's count, a per-second metric's amount.
    pub(super) amount: f64,
    /// How many requests a share is of (its denominator); for a per-second metric, how many
    /// completed requests were taken.
    pub(super) among: u64,
}

/// Every share and per-second metric of the table, with its sums so far.
#[derive(Debug, Clone)]
pub(super) struct Tally {
    parts: Vec<(Metric, Part)>,
}

impl Default for Tally {
    fn default() -> Tally {
        let parts = METRICS
            .iter()
            .filter(|def| matches!(def.source, Source::Share { .. } | Source::PerSecond { .. }))
            .map(|def| (def.metric, Part::default()))
            .collect();
        Tally { parts }
    }
}

impl Tally {
    /// Takes one request of the scope; `good`: it met the plan's `slo`. Like the table's
    /// resampling, only completed requests count: a cancelled request or the client's own
    /// failure says nothing of the server.
    pub(super) fn add(&mut self, record: &RequestRecord, good: bool) {
        // Whether the phase is an open loop does not matter to `Completed`.
        if !Population::Completed.includes(record, false) {
            return;
        }
        for (metric, part) in &mut self.parts {
            match metric.def().source {
                Source::Share { among, counts, .. } => {
                    if among(record) {
                        part.among += 1;
                        part.amount += f64::from(u8::from(counts(record, good)));
                    }
                }
                Source::PerSecond { amount, .. } => {
                    part.among += 1;
                    part.amount += amount(record, good);
                }
                // Not kept here (see `Default`).
                Source::Distribution { .. }
                | Source::Aggregate(_)
                | Source::Sessions { .. }
                | Source::Server(_)
                | Source::Search => {}
            }
        }
    }

    /// The sums of `metric`; `None` when it is not a share or a per-second metric.
    pub(super) fn part(&self, metric: Metric) -> Option<Part> {
        self.parts
            .iter()
            .find(|(m, _)| *m == metric)
            .map(|(_, part)| *part)
    }

    /// What the counted requests added up to (a count, tokens).
    pub(super) fn total(&self, metric: Metric) -> f64 {
        self.part(metric).map_or(0.0, |part| part.amount)
    }

    /// A share's value: 0 when no request is among those it is of.
    pub(super) fn share(&self, metric: Metric) -> f64 {
        match self.part(metric) {
            Some(part) if part.among > 0 => part.amount / part.among as f64,
            _ => 0.0,
        }
    }

    /// A per-second metric's value over `wall_s` seconds: 0 for no time.
    pub(super) fn per_second(&self, metric: Metric, wall_s: f64) -> f64 {
        if wall_s > 0.0 {
            self.total(metric) / wall_s
        } else {
            0.0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::ErrorClass;

    fn record(error: Option<ErrorClass>, completion: u64) -> RequestRecord {
        RequestRecord {
            error,
            http_status: Some(200),
            completion_tokens: Some(completion),
            prompt_tokens: Some(100),
            ..RequestRecord::default()
        }
    }

    #[test]
    fn holds_every_share_and_per_second_metric_of_the_table_and_nothing_else() {
        let tally = Tally::default();
        for def in METRICS {
            let kept = matches!(def.source, Source::Share { .. } | Source::PerSecond { .. });
            assert_eq!(tally.part(def.metric).is_some(), kept, "{}", def.metric);
        }
    }

    #[test]
    fn sums_completed_requests_by_the_tables_formulas() {
        let mut tally = Tally::default();
        tally.add(&record(None, 10), true);
        tally.add(&record(None, 20), false);
        tally.add(&record(Some(ErrorClass::Http5xx), 0), false);
        tally.add(&record(Some(ErrorClass::Http429), 0), false);
        // Neither says anything of the server.
        tally.add(&record(Some(ErrorClass::Cancelled), 5), false);
        tally.add(&record(Some(ErrorClass::Client), 5), false);
        assert_eq!(tally.total(Metric::RequestThroughput), 2.0);
        assert_eq!(tally.total(Metric::OutputThroughput), 30.0);
        assert_eq!(tally.total(Metric::TotalThroughput), 230.0);
        assert_eq!(tally.per_second(Metric::OutputThroughput, 2.0), 15.0);
        assert_eq!(tally.per_second(Metric::OutputThroughput, 0.0), 0.0);
        assert_eq!(tally.share(Metric::ErrorRate), 0.25);
        assert_eq!(tally.share(Metric::ThrottledRate), 0.25);
        assert_eq!(tally.share(Metric::GoodputRatio), 0.25);
        assert_eq!(tally.total(Metric::Goodput), 1.0);
        // No answer was checked: a share of nothing is 0, and says so by its `among`.
        assert_eq!(tally.share(Metric::InvalidJsonRate), 0.0);
        assert_eq!(
            tally.part(Metric::InvalidJsonRate).map(|p| p.among),
            Some(0)
        );
    }
}
