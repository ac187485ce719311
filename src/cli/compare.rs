//! `llmload compare BASELINE CURRENT`: is the current run worse than the baseline beyond the
//! noise? A Markdown table for the pull request; exit 1 on a regression.

use std::path::PathBuf;

use super::output::{append_step_summary, write};
use super::say_raw;
use crate::error::{Result, EXIT_FAIL, EXIT_PASS};
use crate::report::{self, Judged, Records, ReportContext};
use crate::session::{self, Failure, Status};
use crate::verdict;

#[derive(clap::Args, Debug)]
pub(super) struct CompareArgs {
    /// The earlier run's report directory (what "normal" looks like).
    baseline: PathBuf,
    /// The run to judge against it; its plan's `regression` block sets the tolerances.
    current: PathBuf,
    /// Compare runs of different plans, seeds or models anyway.
    #[arg(long)]
    force: bool,
    /// Also write the Markdown table to this file.
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
    /// Write a JUnit XML file with one test case per compared metric.
    #[arg(long, value_name = "FILE")]
    junit: Option<PathBuf>,
}

pub(super) fn compare(args: &CompareArgs) -> Result<u8> {
    let (log, plan) = session::read_run_dir(&args.current)?;
    let comparison = session::compare_with(&args.baseline, &log, &plan, args.force)?;
    let markdown = report::comparison_markdown(&comparison)?;
    say_raw!("{markdown}")?;
    if let Some(path) = &args.out {
        write(path, markdown.as_bytes())?;
    }
    if let Some(path) = &args.junit {
        let aggregates = session::aggregates_of(&log, plan.slo.as_ref())?;
        let verdicts = verdict::evaluate(&[], &aggregates);
        let status = if comparison.regressed {
            Status::Failed(vec![Failure::Regression])
        } else {
            Status::Passed
        };
        let verdict = session::RunVerdict::of(&status, &verdicts, Some(&comparison), &aggregates);
        let judged = Judged {
            aggregates,
            verdicts,
            comparison: Some(comparison.clone()),
            verdict,
        };
        let context = ReportContext::new(&log, Records::InMemory(&log.records), judged);
        let xml = report::junit::render(&context.summary, Some(&comparison), false);
        write(path, xml.as_bytes())?;
    }
    append_step_summary(&markdown);
    Ok(if comparison.regressed {
        EXIT_FAIL
    } else {
        EXIT_PASS
    })
}
