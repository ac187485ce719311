//! What a judged run leaves behind, written from its outcome: the report directory's files, the
//! comparison with a baseline, JUnit, GitHub's job summary, and the terminal summary. `run` and
//! `report` both end here, so a re-rendered report is the report a run wrote.

use std::path::{Path, PathBuf};

use super::say;
use crate::error::{Error, Result};
use crate::report::{self, UserTemplate};
use crate::session::{self, outdir, Gate, NotCarriedOut, RunOutcome, Status};

/// What decides the exit code besides the SLA, and where else results go.
#[derive(clap::Args, Debug, Clone, Default)]
pub(super) struct GateArgs {
    /// Also render this minijinja template into the report directory (repeatable); it sees the
    /// same context as summary.json.
    #[arg(long = "template", value_name = "FILE")]
    templates: Vec<PathBuf>,
    /// Compare with this earlier run's report directory; a regression fails the gate.
    #[arg(long, value_name = "DIR")]
    pub baseline: Option<PathBuf>,
    /// Write a JUnit XML file: one test case per assertion (and per compared metric).
    #[arg(long, value_name = "FILE")]
    junit: Option<PathBuf>,
    /// Fail the gate (exit 1) when the run is not trustworthy: schedule lag, finish_reason
    /// "stop" under exact lengths, token counts off the plan.
    #[arg(long)]
    fail_on_warning: bool,
    /// Also write the run's headline numbers for a continuous-benchmarking tool (repeatable):
    /// FORMAT is bmf (Bencher), github-action-benchmark (smaller is better: latencies, errors),
    /// github-action-benchmark-bigger (throughput, capacity), gitlab-metrics (GitLab's metrics
    /// report) or vllm-bench (the result JSON of `vllm bench serve --save-result
    /// --save-detailed`); see docs/ci.md
    #[arg(long, num_args = 2, value_names = ["FORMAT", "FILE"], action = clap::ArgAction::Append)]
    export: Vec<String>,
}

/// A format `--export` writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ExportFormat {
    Bmf,
    GithubActionBenchmark,
    GithubActionBenchmarkBigger,
    VllmBench,
    GitlabMetrics,
}

impl ExportFormat {
    const NAMES: [(&'static str, ExportFormat); 5] = [
        ("bmf", ExportFormat::Bmf),
        (
            "github-action-benchmark",
            ExportFormat::GithubActionBenchmark,
        ),
        (
            "github-action-benchmark-bigger",
            ExportFormat::GithubActionBenchmarkBigger,
        ),
        ("vllm-bench", ExportFormat::VllmBench),
        ("gitlab-metrics", ExportFormat::GitlabMetrics),
    ];

    /// Writes a judged run in this format.
    fn write(self, context: &report::ReportContext, out: &mut dyn std::io::Write) -> Result<()> {
        use crate::metrics::table::Better;
        use report::benchmarks::{bmf, github_action_benchmark};
        let summary = &context.summary;
        let text = match self {
            ExportFormat::VllmBench => return report::vllm_bench::write(context, out),
            ExportFormat::GitlabMetrics => report::benchmarks::gitlab_metrics(summary, None),
            ExportFormat::Bmf => bmf(summary),
            ExportFormat::GithubActionBenchmark => github_action_benchmark(summary, Better::Lower),
            ExportFormat::GithubActionBenchmarkBigger => {
                github_action_benchmark(summary, Better::Higher)
            }
        };
        out.write_all(text.as_bytes())
            .map_err(|e| Error::run(format!("cannot write the export: {e}")))
    }

    /// Writes a server sweep's configurations in this format: one document whose entries are
    /// named after each configuration; for vllm-bench, one result per line (as vLLM's
    /// `--append-result` keeps several runs), and for gitlab-metrics one line per measure, each
    /// labelled with its configuration.
    fn write_configurations(
        self,
        each: &[(String, &report::ReportContext)],
        out: &mut dyn std::io::Write,
    ) -> Result<()> {
        if self == ExportFormat::VllmBench {
            for (name, context) in each {
                let mut line = Vec::new();
                report::vllm_bench::write(context, &mut line)?;
                let labelled = relabel(&line, name)?;
                out.write_all(labelled.as_bytes())
                    .map_err(|e| Error::run(format!("cannot write the export: {e}")))?;
            }
            return Ok(());
        }
        if self == ExportFormat::GitlabMetrics {
            let lines: String = each
                .iter()
                .map(|(name, c)| report::benchmarks::gitlab_metrics(&c.summary, Some(name)))
                .collect();
            return out
                .write_all(lines.as_bytes())
                .map_err(|e| Error::run(format!("cannot write the export: {e}")));
        }
        let mut rendered = Vec::new();
        for (name, context) in each {
            let mut text = Vec::new();
            self.write(context, &mut text)?;
            rendered.push((name.clone(), String::from_utf8_lossy(&text).into_owned()));
        }
        out.write_all(report::benchmarks::merge_configurations(&rendered).as_bytes())
            .map_err(|e| Error::run(format!("cannot write the export: {e}")))
    }
}

/// A vllm-bench result line with its `label` set to a sweep's configuration.
fn relabel(line: &[u8], name: &str) -> Result<String> {
    let mut value: serde_json::Value = serde_json::from_slice(line)
        .map_err(|e| Error::run(format!("cannot read back the export: {e}")))?;
    value["label"] = serde_json::Value::String(name.to_string());
    Ok(value.to_string() + "\n")
}

impl GateArgs {
    /// These flags, with what a run kept (`kept`) where they say nothing: its baseline unless
    /// `drop_baseline`, and failing on warnings if it did.
    pub fn or_kept(&self, kept: Option<crate::session::Gate>, drop_baseline: bool) -> GateArgs {
        let mut merged = self.clone();
        if let Some(kept) = kept {
            if merged.baseline.is_none() && !drop_baseline {
                merged.baseline = kept.baseline;
            }
            merged.fail_on_warning |= kept.fail_on_warning;
        }
        if drop_baseline {
            merged.baseline = None;
        }
        merged
    }

    /// The `--export` pairs, each format checked.
    fn exports(&self) -> Result<Vec<(ExportFormat, PathBuf)>> {
        self.export
            .chunks(2)
            .map(|pair| {
                let [name, file] = pair else {
                    return Err(Error::usage("--export takes a FORMAT and a FILE"));
                };
                let format = ExportFormat::NAMES
                    .iter()
                    .find(|(n, _)| n == name)
                    .map(|(_, f)| *f)
                    .ok_or_else(|| {
                        let names: Vec<&str> =
                            ExportFormat::NAMES.iter().map(|(n, _)| *n).collect();
                        Error::usage(format!(
                            "--export {name}: not a format; use one of {}",
                            names.join(", ")
                        ))
                    })?;
                Ok((format, PathBuf::from(file)))
            })
            .collect()
    }

    /// The library's gate.
    pub fn gate(&self) -> Gate {
        Gate {
            baseline: self.baseline.clone(),
            fail_on_warning: self.fail_on_warning,
        }
    }
}

/// The user's templates, read and checked before anything runs.
pub(super) fn load_templates(gate: &GateArgs) -> Result<Vec<UserTemplate>> {
    gate.templates
        .iter()
        .map(|path| UserTemplate::load(path))
        .collect()
}

/// Checks the paths a run will write or read at its end, before anything is sent: an hour's run
/// must not fail on a typo, nor on a directory it may not write. `out` is the run's report
/// directory (made before the run starts, so a `--junit` inside it is fine).
pub(super) fn check_paths(gate: &GateArgs, out: Option<&Path>) -> Result<()> {
    if let Some(out) = out.filter(|out| out.exists() && !out.is_dir()) {
        return Err(Error::usage(format!(
            "--out {}: a file, not a directory",
            out.display()
        )));
    }
    let exports = gate.exports()?;
    let files = gate
        .junit
        .iter()
        .map(|path| ("--junit", path))
        .chain(exports.iter().map(|(_, path)| ("--export", path)));
    for (flag, file) in files {
        let parent = file
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        if file.is_dir() {
            return Err(Error::usage(format!(
                "{flag} {}: a directory, not a file",
                file.display()
            )));
        }
        let inside_out = out.is_some_and(|out| parent.starts_with(out));
        if parent.is_dir() {
            writable(parent).map_err(|e| {
                Error::usage(format!(
                    "{flag} {}: cannot write in {}: {e}",
                    file.display(),
                    parent.display()
                ))
            })?;
        } else if !inside_out {
            return Err(Error::usage(format!(
                "{flag} {}: no directory {} to write it in (a path inside --out is made with it)",
                file.display(),
                parent.display()
            )));
        }
    }
    Ok(())
}

/// Whether a file can be made in `dir`: one is, and removed.
fn writable(dir: &Path) -> std::io::Result<()> {
    let probe = dir.join(format!(".llmload-write-check-{}", std::process::id()));
    std::fs::File::create(&probe)?;
    std::fs::remove_file(&probe)
}

/// Writes a judged run's reports (and its comparison's) into its directory; the report
/// context, what was written, and the comparison as Markdown.
fn write_reports<'a>(
    outcome: &'a RunOutcome,
    templates: &[UserTemplate],
) -> Result<(report::ReportContext<'a>, Vec<PathBuf>, Option<String>)> {
    let context = outcome.report();
    // What an earlier run or report derived from these records goes first: nothing stale
    // stays beside what this one writes.
    outdir::clear_derived(&outcome.dir)?;
    let mut written = report::write_all(&outcome.dir, &context, templates)?;
    let mut compared = None;
    if let Some(comparison) = &outcome.comparison {
        let markdown = report::comparison_markdown(comparison)?;
        let json = serde_json::to_string_pretty(comparison)
            .map_err(|e| Error::run(format!("cannot encode the comparison: {e}")))?;
        for (name, text) in [
            ("comparison.md", markdown.clone()),
            ("comparison.json", json + "\n"),
        ] {
            let path = outcome.dir.join(name);
            write(&path, text.as_bytes())?;
            written.push(path);
        }
        compared = Some(markdown);
    }
    Ok((context, written, compared))
}

/// What `llmload report` does with files an earlier run or report wrote and this one does not
/// write again (JUnit, exports, templates' outputs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Earlier {
    /// Kept, and said.
    Keep,
    /// Removed, and said (`report --clean`).
    Remove,
}

/// Writes everything a judged run leaves behind and prints its summary; returns the exit code.
pub(super) fn conclude(
    outcome: &RunOutcome,
    gate: &GateArgs,
    templates: &[UserTemplate],
) -> Result<u8> {
    conclude_with(outcome, gate, templates, Earlier::Keep)
}

/// [`conclude`], saying what becomes of the earlier files it does not write again.
pub(super) fn conclude_with(
    outcome: &RunOutcome,
    gate: &GateArgs,
    templates: &[UserTemplate],
    earlier: Earlier,
) -> Result<u8> {
    let before = outdir::extras(&outcome.dir);
    let (context, mut written, compared) = write_reports(outcome, templates)?;
    let summary = &context.summary;
    if let Some(markdown) = compared {
        say!("{markdown}")?;
    }
    if let Some(path) = &gate.junit {
        // A path inside --out may name a directory the run did not make.
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent).map_err(|e| Error::io("create", parent, e))?;
        }
        let xml = report::junit::render(summary, outcome.comparison.as_ref(), gate.fail_on_warning);
        write(path, xml.as_bytes())?;
        written.push(path.clone());
    }
    for (format, path) in gate.exports()? {
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent).map_err(|e| Error::io("create", parent, e))?;
        }
        crate::files::write_whole(&path, |out| {
            format
                .write(&context, out)
                .map_err(|e| std::io::Error::other(e.render()))
        })
        .map_err(|e| Error::io("write", &path, e))?;
        written.push(path);
    }
    gate.gate().keep(&outcome.dir)?;
    let not_rewritten: Vec<String> = before
        .into_iter()
        .filter(|name| {
            !written
                .iter()
                .any(|w| same_file(w, &outcome.dir.join(name)))
        })
        .collect();
    if !not_rewritten.is_empty() {
        let names = not_rewritten.join(", ");
        match earlier {
            Earlier::Keep => {
                eprintln!(
                    "note: kept {names} from an earlier run or report of {} (not written again: \
                     ask for it with --junit, --export or --template, or pass --clean to remove it)",
                    outcome.dir.display()
                );
                written.extend(not_rewritten.iter().map(|name| outcome.dir.join(name)));
            }
            Earlier::Remove => {
                outdir::remove_files(&outcome.dir, &not_rewritten)?;
                eprintln!("note: removed {names} (--clean: written by an earlier run or report, not by this one)");
            }
        }
    }
    outdir::write_manifest(&outcome.dir, &written)?;
    match report::step_summary(summary, outcome.comparison.as_ref()) {
        Ok(text) => append_step_summary(&text),
        Err(error) => eprintln!("warning: {error}"),
    }
    say!("{}", report::terminal_summary(summary))?;
    say!("report: {}", outcome.dir.join("report.md").display())?;
    // The terminal summary ends with the verdict; a run that could not be carried out also
    // says why on stderr, where CI logs look for errors.
    if let Status::NotCarriedOut(reason) = &outcome.status {
        if *reason != NotCarriedOut::Interrupted {
            eprintln!("error: {}", crate::escape::one_line(&reason.to_string()));
        }
    }
    Ok(outcome.status.exit_code())
}

/// Whether two paths name one file (one may be relative, the other not).
fn same_file(a: &Path, b: &Path) -> bool {
    a == b
        || matches!(
            (std::fs::canonicalize(a), std::fs::canonicalize(b)),
            (Ok(a), Ok(b)) if a == b
        )
}

/// Writes a whole file.
pub(super) fn write(path: &Path, bytes: &[u8]) -> Result<()> {
    use std::io::Write;
    crate::files::write_whole(path, |out| out.write_all(bytes))
        .map_err(|e| Error::io("write", path, e))
}

/// Appends to GitHub Actions' job summary when running there.
pub(super) fn append_step_summary(text: &str) {
    let Some(path) = std::env::var_os("GITHUB_STEP_SUMMARY").filter(|p| !p.is_empty()) else {
        return;
    };
    let written = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .and_then(|mut file| std::io::Write::write_all(&mut file, text.as_bytes()));
    if let Err(e) = written {
        eprintln!("warning: cannot append to $GITHUB_STEP_SUMMARY: {e}");
    }
}

/// Writes each configuration's reports into its directory, then the sweep's own (its table,
/// chart and verdict; JUnit and exports with one suite or benchmark per configuration), and
/// prints the sweep's table; returns the exit code.
pub(super) fn conclude_server_sweep(
    sweep: &session::ServerSweepOutcome,
    plan: &str,
    gate: &GateArgs,
    templates: &[UserTemplate],
) -> Result<u8> {
    let mut judged: Vec<(
        crate::plan::ServerConfig,
        std::result::Result<report::Summary, String>,
    )> = Vec::new();
    // Each configuration's report context, for the exports that read its records.
    let mut contexts: Vec<(String, report::ReportContext)> = Vec::new();
    for run in &sweep.runs {
        let summary = match &run.outcome {
            Ok(outcome) => {
                let (context, written, _) = write_reports(outcome, templates)?;
                gate.gate().keep(&outcome.dir)?;
                outdir::write_manifest(&outcome.dir, &written)?;
                let summary = context.summary.clone();
                contexts.push((run.config.name.clone(), context));
                Ok(summary)
            }
            Err(why) => Err(why.clone()),
        };
        judged.push((run.config.clone(), summary));
    }
    let summary = report::server_sweep::summary(
        plan,
        &judged,
        &sweep.skipped,
        sweep.verdict.clone(),
        sweep.best,
        sweep.best_by,
    );
    let rendered = report::server_sweep::render(&summary)?;
    let mut written = Vec::new();
    for (name, text) in report::server_sweep::FILES.iter().zip(&rendered) {
        let path = sweep.dir.join(name);
        write(&path, text.as_bytes())?;
        written.push(path);
    }
    if let Some(path) = &gate.junit {
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent).map_err(|e| Error::io("create", parent, e))?;
        }
        let suites: Vec<(String, std::result::Result<String, String>)> = judged
            .iter()
            .zip(&sweep.runs)
            .map(|((config, summary), run)| {
                let comparison = run
                    .outcome
                    .as_ref()
                    .ok()
                    .and_then(|o| o.comparison.as_ref());
                let xml = summary
                    .as_ref()
                    .map(|s| report::junit::render(s, comparison, gate.fail_on_warning))
                    .map_err(String::clone);
                (config.name.clone(), xml)
            })
            .collect();
        let xml = report::junit::merge_configurations(plan, &suites);
        write(path, xml.as_bytes())?;
        written.push(path.clone());
    }
    for (format, path) in gate.exports()? {
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent).map_err(|e| Error::io("create", parent, e))?;
        }
        let each: Vec<(String, &report::ReportContext)> =
            contexts.iter().map(|(name, c)| (name.clone(), c)).collect();
        crate::files::write_whole(&path, |out| {
            format
                .write_configurations(&each, out)
                .map_err(|e| std::io::Error::other(e.render()))
        })
        .map_err(|e| Error::io("write", &path, e))?;
        written.push(path);
    }
    outdir::write_manifest(&sweep.dir, &written)?;
    append_step_summary(&rendered[0]);
    say!("{}", report::server_sweep::terminal(&summary))?;
    say!("report: {}", sweep.dir.join("server-sweep.md").display())?;
    if sweep.verdict.exit_code == crate::error::EXIT_RUN {
        eprintln!(
            "error: {}",
            crate::escape::one_line(&sweep.verdict.reasons.join("; "))
        );
    }
    Ok(sweep.verdict.exit_code)
}
