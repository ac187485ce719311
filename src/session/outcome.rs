//! What a run leaves: its execution (the records written) and its judged outcome.

use std::path::PathBuf;

use super::*;

/// What [`execute`] leaves behind.
pub struct Execution {
    /// The run's `records.jsonl`.
    pub records_path: PathBuf,
    /// The in-process simulator's write times, when they were asked for.
    pub sim_writes: Option<Vec<RequestWrites>>,
}

/// Everything a run produced.
pub struct RunOutcome {
    /// The run's directory.
    pub dir: PathBuf,
    /// The run's `records.jsonl`.
    pub records_path: PathBuf,
    /// The run's log without its records (header, phases, end).
    pub log: RunLog,
    /// Every aggregate, per phase and overall, with the warnings.
    pub aggregates: Aggregates,
    /// The plan's SLA assertions, judged.
    pub verdicts: Verdicts,
    /// The comparison with the baseline, when one was given.
    pub comparison: Option<Comparison>,
    /// The one verdict.
    pub status: Status,
    /// The in-process simulator's write times, when they were asked for.
    pub sim_writes: Option<Vec<RequestWrites>>,
}

impl RunOutcome {
    /// What the report exporters render (the records are streamed from the file).
    pub fn report(&self) -> ReportContext<'_> {
        ReportContext::new(
            &self.log,
            Records::File(&self.records_path),
            Judged {
                aggregates: self.aggregates.clone(),
                verdicts: self.verdicts.clone(),
                comparison: self.comparison.clone(),
                verdict: self.verdict(),
            },
        )
    }

    /// The one verdict, with its reasons in sentences: what every output says.
    pub fn verdict(&self) -> RunVerdict {
        RunVerdict::of(
            &self.status,
            &self.verdicts,
            self.comparison.as_ref(),
            &self.aggregates,
        )
    }
}
