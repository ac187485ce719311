//! `llmload compare BASELINE CURRENT`: is the current run worse than the baseline beyond the
//! noise? A Markdown table for the pull request; exit 1 on a regression, 3 when the runs
//! cannot decide a metric (too short for its tolerance, or a client that stalled).

use std::path::{Path, PathBuf};

use super::output::{append_step_summary, write};
use super::say_raw;
use crate::error::{Error, Result, EXIT_FAIL, EXIT_PASS, EXIT_RUN};
use crate::report::{self, Judged, Records, ReportContext};
use crate::session::{self, Status};
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
    let sweep_of = |dir: &Path| dir.join(report::server_sweep::FILES[2]);
    if sweep_of(&args.current).is_file() || sweep_of(&args.baseline).is_file() {
        return compare_sweeps(args);
    }
    let compared = compare_runs(&args.baseline, &args.current, args)?;
    say_raw!("{}", compared.markdown)?;
    if let Some(path) = &args.out {
        write(path, compared.markdown.as_bytes())?;
    }
    if let (Some(path), Some(xml)) = (&args.junit, compared.junit) {
        write(path, xml.as_bytes())?;
    }
    append_step_summary(&compared.markdown);
    Ok(compared.status.exit_code())
}

/// One run compared with its baseline.
struct Compared {
    /// The Markdown table.
    markdown: String,
    /// Its one status: failed on a regression, not decided on a row the runs cannot decide
    /// (unless the plan lets it pass), passed otherwise.
    status: Status,
    /// Its JUnit, when asked.
    junit: Option<String>,
}

/// One run against its baseline.
fn compare_runs(baseline: &Path, current: &Path, args: &CompareArgs) -> Result<Compared> {
    let (log, plan) = session::read_run_dir(current)?;
    let gpus = session::gpus_of(current);
    let comparison = session::compare_with(baseline, (&gpus, &log), &plan, args.force)?;
    let markdown = report::comparison_markdown(&comparison)?;
    let aggregates = session::aggregates_of(&log, plan.slo.as_ref())?;
    // Only the comparison is judged here: the run's own assertions were its run's verdict.
    let verdicts = verdict::evaluate(&[], &Default::default(), &aggregates);
    let status = Status::decide(&aggregates, &verdicts, Some(&comparison), false);
    let junit = args.junit.as_ref().map(|_| {
        let verdict = session::RunVerdict::of(&status, &verdicts, Some(&comparison), &aggregates);
        let judged = Judged {
            aggregates,
            verdicts,
            comparison: Some(comparison.clone()),
            verdict,
        };
        let context = ReportContext::new(&log, Records::InMemory(&log.records), judged);
        report::junit::render(&context.summary, Some(&comparison), false)
    });
    Ok(Compared {
        markdown,
        status,
        junit,
    })
}

/// Two runs of a server sweep: each configuration against the same configuration's run in the
/// baseline; a regression in any is the comparison's.
fn compare_sweeps(args: &CompareArgs) -> Result<u8> {
    let configurations = |dir: &Path| -> Result<(String, Vec<(String, String)>)> {
        let path = dir.join(report::server_sweep::FILES[2]);
        let text = crate::files::read_text_bounded(&path, 16 << 20).map_err(|e| {
            Error::usage(format!(
                "{} is not a server sweep's directory (no {}: {e}); compare a sweep with a sweep",
                dir.display(),
                report::server_sweep::FILES[2]
            ))
        })?;
        let json: serde_json::Value = serde_json::from_str(&text)
            .map_err(|e| Error::usage(format!("{}: {e}", path.display())))?;
        let plan = json["plan"].as_str().unwrap_or("sweep").to_string();
        let configurations = json["configurations"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| {
                Some((
                    c["name"].as_str()?.to_string(),
                    c["dir"].as_str()?.to_string(),
                ))
            })
            .collect();
        Ok((plan, configurations))
    };
    let (plan, current) = configurations(&args.current)?;
    let (_, baseline) = configurations(&args.baseline)?;
    let mut markdown = String::from("# Server sweep compared with its baseline\n\n");
    let mut regressed = Vec::new();
    let mut undecided = Vec::new();
    let mut suites = Vec::new();
    for (name, dir) in &current {
        // (A directory name from the file is a plain name: never a path elsewhere.)
        let plain = !dir.contains('/') && !dir.contains('\\') && dir != ".." && dir != ".";
        if !plain || !baseline.iter().any(|(_, d)| d == dir) {
            markdown.push_str(&format!(
                "## `{}`\n\nNot in the baseline's sweep: not compared.\n\n",
                crate::escape::one_line(name)
            ));
            continue;
        }
        let compared = compare_runs(&args.baseline.join(dir), &args.current.join(dir), args)?;
        markdown.push_str(&format!(
            "## `{}`\n\n{}\n",
            crate::escape::one_line(name),
            compared.markdown
        ));
        match compared.status {
            Status::Failed(_) => regressed.push(name.clone()),
            Status::NotDecided(_) | Status::NotCarriedOut(_) => undecided.push(name.clone()),
            Status::Passed => {}
        }
        suites.push((name.clone(), compared.junit.ok_or_else(String::new)));
    }
    let names = |list: &[String]| {
        list.iter()
            .map(|n| format!("`{}`", crate::escape::one_line(n)))
            .collect::<Vec<_>>()
            .join(", ")
    };
    if regressed.is_empty() && undecided.is_empty() {
        markdown.push_str("**No configuration regressed against its baseline.**\n");
    }
    if !regressed.is_empty() {
        markdown.push_str(&format!(
            "**Regressed against the baseline: {}.**\n",
            names(&regressed)
        ));
    }
    if !undecided.is_empty() {
        markdown.push_str(&format!(
            "**Not decided against the baseline: {}** (their tables say why).\n",
            names(&undecided)
        ));
    }
    say_raw!("{markdown}")?;
    if let Some(path) = &args.out {
        write(path, markdown.as_bytes())?;
    }
    if let Some(path) = &args.junit {
        let xml = report::junit::merge_configurations(&plan, &suites);
        write(path, xml.as_bytes())?;
    }
    append_step_summary(&markdown);
    Ok(if !regressed.is_empty() {
        EXIT_FAIL
    } else if !undecided.is_empty() {
        EXIT_RUN
    } else {
        EXIT_PASS
    })
}
