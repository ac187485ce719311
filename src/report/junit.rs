//! JUnit XML (Ant's format, which Jenkins, GitLab and GitHub test reporters read): every SLA
//! assertion is a test case; so is every compared metric of a baseline comparison, and, with
//! `--fail-on-warning`, every warning. A run that was not carried out is an error case, and an
//! aborted run a failing one: the file fails exactly when the exit code does.

use std::fmt::Write;

use super::{Summary, VerdictStatus};
use crate::compare::{Change, Comparison};
use crate::metrics::Severity;
use crate::verdict::Outcome;

/// Escapes text for XML attributes and content.
fn xml(text: &str) -> String {
    crate::escape::xml_text(text)
}

struct Case {
    name: String,
    class: &'static str,
    /// (failure or error, message, body)
    outcome: Option<(&'static str, String, String)>,
}

/// The JUnit XML of a run (and of its comparison with a baseline).
pub fn render(summary: &Summary, comparison: Option<&Comparison>, fail_on_warning: bool) -> String {
    let mut cases = run_cases(summary);
    cases.extend(sla_cases(summary));
    if let Some(comparison) = comparison {
        cases.extend(regression_cases(comparison));
    }
    if fail_on_warning {
        cases.extend(warning_cases(summary));
    }
    suite(summary, &cases)
}

/// The run itself as test cases: an error when it could not be carried out (interrupted,
/// unreachable, every request failed), a failure when an abort condition stopped it. With the
/// other cases, the report fails exactly when the exit code does.
fn run_cases(summary: &Summary) -> Vec<Case> {
    let mut cases = Vec::new();
    match summary.verdict.status {
        // A run that is not decided fails through its undecided assertions' error cases.
        VerdictStatus::Pass | VerdictStatus::Fail | VerdictStatus::NotDecided => {}
        VerdictStatus::Interrupted | VerdictStatus::NotCarriedOut => cases.push(Case {
            name: "run completed".into(),
            class: "run",
            outcome: Some((
                "error",
                summary.verdict.reasons.join("; "),
                "No verdict is given on a run that was not carried out.".into(),
            )),
        }),
    }
    if let Some(reason) = &summary.aborted {
        cases.push(Case {
            name: "run not aborted".into(),
            class: "run",
            outcome: Some((
                "failure",
                format!("aborted early: {reason}"),
                "An abort condition of the plan held, and the run was stopped as failing.".into(),
            )),
        });
    }
    cases
}

/// Every SLA assertion as a test case: a failure when it failed, an error when it is not
/// decided and that gates, skipped when it is not decided and the plan lets it pass.
fn sla_cases(summary: &Summary) -> Vec<Case> {
    let mut cases = Vec::new();
    for v in &summary.verdicts {
        let message = format!(
            "observed {}, threshold {}, phase {}",
            v.observed_display, v.threshold_display, v.phase
        );
        let interval = v
            .interval
            .as_ref()
            .map(|i| format!(", interval {}", i.display))
            .unwrap_or_default();
        let message = format!("{message}{interval}");
        let outcome = match (v.outcome, v.passed) {
            (Outcome::Pass, _) => None,
            (Outcome::Fail, _) => Some((
                "failure",
                message.clone(),
                format!("{}: {message}", v.assertion),
            )),
            (Outcome::NotDecided, passes) => Some(not_decided(
                passes,
                v.undecided.as_deref(),
                format!(
                    "{}: {message}; this run's data cannot decide it",
                    v.assertion
                ),
            )),
        };
        cases.push(Case {
            name: format!("{} [{}]", v.assertion, v.phase),
            class: "sla",
            outcome,
        });
    }
    cases
}

/// A judgement the run could not decide: skipped when the plan lets it pass (shown, not
/// gating), else an error whose body is `detail`; either way its message says why.
fn not_decided(passes: bool, why: Option<&str>, detail: String) -> (&'static str, String, String) {
    let message = format!("not decided: {}", why.unwrap_or(""));
    if passes {
        ("skipped", message, String::new())
    } else {
        ("error", message, detail)
    }
}

/// Every compared metric of a baseline comparison as a test case.
fn regression_cases(comparison: &Comparison) -> Vec<Case> {
    let mut cases = Vec::new();
    for row in &comparison.rows {
        let pct = |v: Option<f64>| match v {
            Some(v) if row.relative => format!("{:+.1}%", v * 100.0),
            Some(v) => format!("{:+.2} pts", v * 100.0),
            None => "-".into(),
        };
        let message = format!(
            "change {} (95% CI {} to {}) against an allowed {}",
            pct(row.change),
            pct(row.ci_low),
            pct(row.ci_high),
            pct(Some(row.allowed))
        );
        let outcome = match (row.verdict, row.passes) {
            (Change::Regression, _) => Some(("failure", message.clone(), message)),
            (Change::NotDecided, passes) => {
                Some(not_decided(passes, row.undecided.as_deref(), message))
            }
            (Change::Improvement | Change::Unchanged | Change::NoData, _) => None,
        };
        cases.push(Case {
            name: format!("{} [{}]", row.metric, row.phase),
            class: "regression",
            outcome,
        });
    }
    cases
}

/// With `--fail-on-warning`, every warning as a failing test case.
fn warning_cases(summary: &Summary) -> Vec<Case> {
    let mut cases = Vec::new();
    for w in summary
        .warnings
        .iter()
        .filter(|w| w.severity == Severity::Warning)
    {
        cases.push(Case {
            name: format!("trustworthy: {}", w.code),
            class: "warnings",
            outcome: Some(("failure", w.message.clone(), w.message.clone())),
        });
    }
    cases
}

/// The test suite's XML around the cases: counts, time, the run's properties, every warning
/// and note as its standard output.
fn suite(summary: &Summary, cases: &[Case]) -> String {
    let plan = &summary.context.header.plan;
    let count = |kind: &str| {
        cases
            .iter()
            .filter(|c| c.outcome.as_ref().is_some_and(|o| o.0 == kind))
            .count()
    };
    let (failures, errors, skipped) = (count("failure"), count("error"), count("skipped"));
    let time = format!("{:.3}", summary.context.duration_s);
    // Ant's schema wants a timestamp without a zone; the run's start is UTC.
    let timestamp = summary
        .context
        .header
        .started_at
        .trim_end_matches('Z')
        .to_string();
    let mut system_out = String::new();
    for w in &summary.warnings {
        let _ = writeln!(
            system_out,
            "{}: {}",
            if w.severity == Severity::Warning {
                "warning"
            } else {
                "note"
            },
            w.message
        );
    }
    let mut out = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let _ = writeln!(
        out,
        "<testsuites name=\"llmload\" tests=\"{}\" failures=\"{failures}\" errors=\"{errors}\" time=\"{time}\">",
        cases.len()
    );
    let _ = writeln!(
        out,
        "  <testsuite name=\"llmload.{}\" package=\"llmload\" id=\"0\" hostname=\"{}\" timestamp=\"{}\" tests=\"{}\" failures=\"{failures}\" errors=\"{errors}\" skipped=\"{skipped}\" time=\"{time}\">",
        xml(plan),
        xml(&summary.context.header.client_host),
        xml(&timestamp),
        cases.len()
    );
    out.push_str("    <properties>\n");
    let header = &summary.context.header;
    for (name, value) in [
        ("plan_file", header.plan_file.clone()),
        ("plan_sha256", header.plan_sha256.clone()),
        ("seed", header.seed.to_string()),
        ("target", header.target.clone()),
        ("model", header.model.clone()),
        ("tool_version", header.tool_version.clone()),
    ] {
        let _ = writeln!(
            out,
            "      <property name=\"{name}\" value=\"{}\"/>",
            xml(&value)
        );
    }
    out.push_str("    </properties>\n");
    for case in cases {
        let _ = write!(
            out,
            "    <testcase name=\"{}\" classname=\"llmload.{}.{}\" time=\"0\"",
            xml(&case.name),
            xml(plan),
            case.class
        );
        match &case.outcome {
            None => out.push_str("/>\n"),
            Some(("skipped", message, _)) => {
                let _ = writeln!(
                    out,
                    ">\n      <skipped message=\"{}\"/>\n    </testcase>",
                    xml(message)
                );
            }
            Some((kind, message, body)) => {
                let _ = writeln!(
                    out,
                    ">\n      <{kind} message=\"{}\" type=\"{}\">{}</{kind}>\n    </testcase>",
                    xml(message),
                    case.class,
                    xml(body)
                );
            }
        }
    }
    let _ = writeln!(out, "    <system-out>{}</system-out>", xml(&system_out));
    out.push_str("    <system-err></system-err>\n  </testsuite>\n</testsuites>\n");
    out
}

/// A server sweep's JUnit: each configuration's run as its own test suite (named
/// `llmload.<plan>[<configuration>]`), and a configuration that could not run as a suite with
/// one error — so the report fails exactly when the sweep's exit code does.
pub fn merge_configurations(
    plan: &str,
    configurations: &[(String, std::result::Result<String, String>)],
) -> String {
    let mut suites = String::new();
    let (mut tests, mut failures, mut errors) = (0u64, 0u64, 0u64);
    let attribute = |line: &str, name: &str| -> u64 {
        line.split(&format!(" {name}=\""))
            .nth(1)
            .and_then(|rest| rest.split('"').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    };
    for (config, document) in configurations {
        match document {
            Ok(document) => {
                let own_name = format!("name=\"llmload.{}\"", xml(plan));
                let named = format!("name=\"llmload.{}[{}]\"", xml(plan), xml(config));
                for line in document.lines() {
                    let trimmed = line.trim_start();
                    if trimmed.starts_with("<?xml") || trimmed.starts_with("<testsuites") {
                        continue;
                    }
                    if trimmed.starts_with("</testsuites") {
                        continue;
                    }
                    if trimmed.starts_with("<testsuite ") {
                        tests += attribute(trimmed, "tests");
                        failures += attribute(trimmed, "failures");
                        errors += attribute(trimmed, "errors");
                        suites.push_str(&line.replacen(&own_name, &named, 1));
                    } else {
                        suites.push_str(line);
                    }
                    suites.push('\n');
                }
            }
            Err(why) => {
                tests += 1;
                errors += 1;
                let _ = writeln!(
                    suites,
                    "  <testsuite name=\"llmload.{}[{}]\" package=\"llmload\" tests=\"1\" failures=\"0\" errors=\"1\" skipped=\"0\" time=\"0\">\n    <testcase name=\"server started\" classname=\"llmload.{}.run\" time=\"0\">\n      <error message=\"{}\" type=\"run\">The server of this configuration could not serve the run.</error>\n    </testcase>\n  </testsuite>",
                    xml(plan),
                    xml(config),
                    xml(plan),
                    xml(why)
                );
            }
        }
    }
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"llmload\" tests=\"{tests}\" failures=\"{failures}\" errors=\"{errors}\" time=\"0\">\n{suites}</testsuites>\n"
    )
}

#[cfg(test)]
mod tests {
    use super::xml;

    #[test]
    fn escapes_markup_and_control_characters() {
        assert_eq!(
            xml("p99 < 5 & \"x\" > 'y'\u{1}"),
            "p99 &lt; 5 &amp; &quot;x&quot; &gt; &apos;y&apos;\u{fffd}"
        );
    }
}
