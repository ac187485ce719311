//! The run's one verdict: its [`Status`] (passed, failed and why, or not carried out and why),
//! decided from the judged assertions, the comparison with a baseline and the warnings, and its
//! wording ([`RunVerdict`]): the exit code, the reasons in sentences and the headline that every
//! output of a run (terminal, report.md, summary.json, JUnit, the step summary) states.

use serde::Serialize;

use super::Verdicts;
use crate::compare::{self, Comparison};
use crate::error::{EXIT_FAIL, EXIT_PASS, EXIT_RUN};
use crate::metrics::{Aggregates, Severity};
use crate::records::ErrorClass;

/// Why a run failed its gate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// An abort condition held: the run was stopped early as clearly failing.
    Aborted(String),
    /// An SLA assertion failed.
    Assertions,
    /// A metric regressed against the baseline beyond the noise.
    Regression,
    /// The run is not trustworthy and `fail_on_warning` is set.
    Untrustworthy,
}

/// Why a run could not be judged at all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotCarriedOut {
    /// It was stopped before its plan finished.
    Interrupted,
    /// No connection could be made to the target: what the first attempt said (empty in
    /// logs that kept none).
    Unreachable(String),
    /// Every recorded request failed; what the first said.
    EveryRequestFailed(String),
    /// No recorded request was sent.
    NothingSent,
    /// The target was refused: before the clock started (it did not answer, refused the key,
    /// or does not serve the model), or at its first answer (it does not serve the API's
    /// route): why.
    TargetRefused(String),
    /// The client could not deliver the plan: more than [`CLIENT_FAILURE_LIMIT`] of the
    /// recorded requests failed in llmload itself (out of file descriptors or ports), whatever
    /// the server did with the rest.
    ClientLimited {
        /// Requests that failed in the client.
        failed: u64,
        /// Recorded requests sent.
        sent: u64,
        /// What the first said.
        first: String,
    },
    /// The comparison with the baseline could not be made (why).
    NotComparable(String),
    /// The capacity search (named) stopped because the client could not send a probe's load
    /// on time, twice in a row: what it measured beyond would be the client's limit.
    SearchClientLimited(String),
}

impl std::fmt::Display for NotCarriedOut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NotCarriedOut::Interrupted => f.write_str("the run was interrupted"),
            NotCarriedOut::Unreachable(first) if first.contains("TLS handshake failed") => {
                write!(f, "the target is unreachable: {first}")
            }
            NotCarriedOut::Unreachable(first) => write!(
                f,
                "the target is unreachable: no connection could be made (is the server running? \
                 check the URL or --target){}",
                if first.is_empty() {
                    String::new()
                } else {
                    format!("; the first attempt said: {first}")
                }
            ),
            NotCarriedOut::EveryRequestFailed(first) => {
                write!(f, "every request failed; the first said: {first}")
            }
            NotCarriedOut::NothingSent => f.write_str("no recorded request was sent"),
            NotCarriedOut::TargetRefused(why) => f.write_str(why),
            NotCarriedOut::ClientLimited {
                failed,
                sent,
                first,
            } => write!(
                f,
                "the client could not deliver the plan: {failed} of {sent} requests ({:.1}%) failed in llmload \
                 itself, not at the server, so the load the server saw is not the plan's; the first said: {first}",
                *failed as f64 * 100.0 / (*sent).max(1) as f64
            ),
            NotCarriedOut::NotComparable(why) => write!(f, "{why}"),
            NotCarriedOut::SearchClientLimited(name) => write!(
                f,
                "the capacity search \"{name}\" stopped where the client, not the server, became the \
                 limit: it could not send a probe's load on time twice in a row (schedule lag or its CPU \
                 beyond the limits); give it more cores (--threads), run it on another machine, or \
                 lower the search's range"
            ),
        }
    }
}

/// The share of recorded requests that may fail in the client (a transient EMFILE) before the
/// run is not carried out: beyond it, the server was not sent the plan's load.
pub const CLIENT_FAILURE_LIMIT: f64 = 0.01;

/// The one verdict of a run: what its exit code says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Status {
    /// Every assertion held (and nothing else failed the gate).
    Passed,
    /// The run failed its gate, for these reasons (at least one).
    Failed(Vec<Failure>),
    /// The run could not be carried out or judged.
    NotCarriedOut(NotCarriedOut),
    /// The run was carried out, and its data cannot decide these judgements (each with why and
    /// what would decide it); nothing failed.
    NotDecided(Vec<String>),
}

impl Status {
    /// The status of a judged run: not carried out (interrupted, unreachable, every request
    /// failed, nothing sent), failed (aborted, an assertion, a regression, a warning when
    /// `fail_on_warning`), or passed.
    pub fn decide(
        aggregates: &Aggregates,
        verdicts: &Verdicts,
        comparison: Option<&Comparison>,
        fail_on_warning: bool,
    ) -> Status {
        let recorded = &aggregates.overall.requests;
        let mut failures = Vec::new();
        if let Some(reason) = &aggregates.aborted {
            failures.push(Failure::Aborted(reason.clone()));
        } else if aggregates.interrupted {
            return Status::NotCarriedOut(NotCarriedOut::Interrupted);
        }
        if let Some(why) = &aggregates.refused {
            return Status::NotCarriedOut(NotCarriedOut::TargetRefused(why.clone()));
        }
        if recorded.sent > 0 && recorded.ok == 0 {
            let connect_failures = aggregates
                .overall
                .errors
                .get(ErrorClass::Connect.as_str())
                .copied()
                .unwrap_or(0);
            return Status::NotCarriedOut(if connect_failures == recorded.sent {
                NotCarriedOut::Unreachable(aggregates.first_error.clone().unwrap_or_default())
            } else {
                NotCarriedOut::EveryRequestFailed(
                    aggregates
                        .first_error
                        .clone()
                        .or_else(|| aggregates.first_client_error.clone())
                        .unwrap_or_default(),
                )
            });
        }
        if recorded.sent == 0 && failures.is_empty() {
            return Status::NotCarriedOut(NotCarriedOut::NothingSent);
        }
        let client_failures = recorded.client_failed;
        if client_failures as f64 > CLIENT_FAILURE_LIMIT * recorded.sent as f64 {
            return Status::NotCarriedOut(NotCarriedOut::ClientLimited {
                failed: client_failures,
                sent: recorded.sent,
                first: aggregates.first_client_error.clone().unwrap_or_default(),
            });
        }
        if let Some(end) = aggregates
            .search_end
            .as_ref()
            .filter(|end| end.stopped == crate::records::Stopped::ClientLimited)
        {
            return Status::NotCarriedOut(NotCarriedOut::SearchClientLimited(end.name.clone()));
        }
        if verdicts.failing().next().is_some() {
            failures.push(Failure::Assertions);
        }
        let comparison_undecided =
            comparison.map_or(0, |c| c.not_decided().filter(|r| !r.passes).count());
        let fails_undecided =
            comparison.is_some_and(|c| c.undecided_policy == crate::plan::Undecided::Fail);
        if comparison.is_some_and(|c| c.regressed) || (fails_undecided && comparison_undecided > 0)
        {
            failures.push(Failure::Regression);
        }
        if fail_on_warning
            && aggregates
                .warnings
                .iter()
                .any(|w| w.severity == Severity::Warning)
        {
            failures.push(Failure::Untrustworthy);
        }
        let mut undecided: Vec<String> = verdicts
            .deciding_nothing()
            .map(|v| {
                format!(
                    "{} ({}): {}",
                    v.assertion,
                    v.phase,
                    v.undecided.as_deref().unwrap_or("not decided")
                )
            })
            .collect();
        undecided.extend(comparison.into_iter().flat_map(|c| {
            c.not_decided().filter(|r| !r.passes).map(|r| {
                format!(
                    "{} ({}) against the baseline: {}",
                    r.metric,
                    r.phase,
                    undecided_row(r)
                )
            })
        }));
        if !failures.is_empty() {
            Status::Failed(failures)
        } else if !undecided.is_empty() {
            Status::NotDecided(undecided)
        } else {
            Status::Passed
        }
    }

    /// The exit code: 0 passed, 1 failed, 3 not carried out or not decided.
    pub fn exit_code(&self) -> u8 {
        match self {
            Status::Passed => EXIT_PASS,
            Status::Failed(_) => EXIT_FAIL,
            Status::NotCarriedOut(_) | Status::NotDecided(_) => EXIT_RUN,
        }
    }
}

/// Where a run's verdict lands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum VerdictStatus {
    /// Every assertion held and nothing else failed the gate (exit 0).
    Pass,
    /// An assertion failed, a metric regressed, a warning under `--fail-on-warning`, or an
    /// abort condition held (exit 1).
    Fail,
    /// The run was stopped from outside before its plan finished (exit 3).
    Interrupted,
    /// The run could not be carried out: the target unreachable, every request failed (exit 3).
    NotCarriedOut,
    /// The run was carried out and its data cannot decide some judgement, and none failed
    /// (exit 3): too few requests for a percentile, no data, a client that limited the run.
    NotDecided,
}

/// The one verdict of a run, as its exit code says it.
#[derive(Debug, Clone, Serialize)]
pub struct RunVerdict {
    /// Pass, fail, or not carried out.
    pub status: VerdictStatus,
    /// The process's exit code for it.
    pub exit_code: u8,
    /// Why, in sentences (empty for a pass).
    pub reasons: Vec<String>,
    /// What the run found beside its gate, as its banner says it: each sweep's knee and the
    /// search's bracket ("sweep \"c\": the objectives hold up to 16 users and fail from 32
    /// users"), so that a pass no assertion gates does not read as a load that held throughout.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub found: Vec<String>,
}

impl RunVerdict {
    /// The verdict of a status: the exit code, and why in sentences.
    pub fn of(
        status: &Status,
        verdicts: &Verdicts,
        comparison: Option<&Comparison>,
        aggregates: &Aggregates,
    ) -> RunVerdict {
        let (status_kind, reasons) = match status {
            Status::Passed => (VerdictStatus::Pass, Vec::new()),
            Status::NotCarriedOut(NotCarriedOut::Interrupted) => (
                VerdictStatus::Interrupted,
                vec![
                    "the run was interrupted before its plan finished: no verdict on a partial run"
                        .into(),
                ],
            ),
            Status::NotCarriedOut(reason) => {
                (VerdictStatus::NotCarriedOut, vec![reason.to_string()])
            }
            Status::NotDecided(undecided) => (VerdictStatus::NotDecided, undecided.clone()),
            Status::Failed(failures) => {
                let reasons = failures
                    .iter()
                    .map(|failure| match failure {
                        Failure::Aborted(reason) => format!("aborted early: {reason}"),
                        Failure::Assertions => {
                            let failed: Vec<String> = verdicts
                                .failing()
                                .map(|v| {
                                    let undecided = match &v.undecided {
                                        Some(why) => format!(
                                            ", not decided, and the plan fails what is not: {why}"
                                        ),
                                        None => String::new(),
                                    };
                                    format!(
                                        "{} ({}: {}{undecided})",
                                        v.assertion, v.phase, v.observed_display
                                    )
                                })
                                .collect();
                            let undecided = verdicts.deciding_nothing().count();
                            let also = if undecided > 0 {
                                format!("; {undecided} not decided")
                            } else {
                                String::new()
                            };
                            format!(
                                "{} of {} assertions failed: {}{also}",
                                failed.len(),
                                verdicts.results.len(),
                                failed.join(", ")
                            )
                        }
                        Failure::Regression => regression_reason(comparison),
                        Failure::Untrustworthy => {
                            let codes: Vec<&str> = aggregates
                                .warnings
                                .iter()
                                .filter(|w| w.severity == Severity::Warning)
                                .map(|w| w.code.as_str())
                                .collect();
                            format!(
                                "the run is not trustworthy and --fail-on-warning is set ({})",
                                codes.join(", ")
                            )
                        }
                    })
                    .collect();
                (VerdictStatus::Fail, reasons)
            }
        };
        let found = verdicts
            .series
            .iter()
            .map(|s| {
                let kind = if s.search { "search" } else { "sweep" };
                format!("{kind} \"{}\": {}", s.name, s.headline)
            })
            .collect();
        RunVerdict {
            status: status_kind,
            exit_code: status.exit_code(),
            reasons,
            found,
        }
    }

    /// The verdict's headline, as the terminal's last line and the reports say it.
    pub fn headline(&self, assertions: usize) -> String {
        match self.status {
            VerdictStatus::Pass if assertions == 0 && !self.found.is_empty() => format!(
                "PASS: no assertion gates this run; {}",
                self.found.join("; ")
            ),
            VerdictStatus::Pass if assertions == 0 => {
                "PASS: no assertion gates this run".to_string()
            }
            VerdictStatus::Pass => format!("PASS: {assertions} of {assertions} assertions held"),
            VerdictStatus::Fail => format!("FAIL: {}", self.reasons.join("; ")),
            VerdictStatus::Interrupted => "INTERRUPTED: no verdict on a partial run".to_string(),
            VerdictStatus::NotCarriedOut => format!("NOT CARRIED OUT: {}", self.reasons.join("; ")),
            // Assertions and comparison rows alike: each reason names which it is.
            VerdictStatus::NotDecided => format!(
                "NOT DECIDED: this run cannot decide {} judgement{}: {}",
                self.reasons.len(),
                if self.reasons.len() == 1 { "" } else { "s" },
                self.reasons.join("; ")
            ),
        }
    }
}

/// Why a not-decided comparison row is not decided.
fn undecided_row(row: &compare::Row) -> &str {
    row.undecided.as_deref().unwrap_or("not decided")
}

/// The regressed rows of a comparison, each with its change, and the rows not decided that the
/// plan fails (`sla { undecided "fail" }`).
fn regression_reason(comparison: Option<&Comparison>) -> String {
    let Some(c) = comparison else {
        return "a regression against the baseline".into();
    };
    let regressed: Vec<String> = c
        .rows
        .iter()
        .filter(|r| r.verdict == compare::Change::Regression)
        .map(|r| match r.change {
            Some(change) if r.relative => format!("{} ({:+.1}%)", r.metric, change * 100.0),
            Some(change) => format!("{} ({:+.2} pts)", r.metric, change * 100.0),
            None => r.metric.clone(),
        })
        .collect();
    let failed_undecided: Vec<String> = c
        .not_decided()
        .filter(|r| !r.passes && c.undecided_policy == crate::plan::Undecided::Fail)
        .map(|r| format!("{} ({})", r.metric, undecided_row(r)))
        .collect();
    match (regressed.is_empty(), failed_undecided.is_empty()) {
        (false, true) => format!("a regression against the baseline: {}", regressed.join(", ")),
        (true, _) => format!(
            "not decided against the baseline, and the plan fails what is not: {}",
            failed_undecided.join(", ")
        ),
        (false, false) => format!(
            "a regression against the baseline: {}; not decided, and the plan fails what is not: {}",
            regressed.join(", "),
            failed_undecided.join(", ")
        ),
    }
}
