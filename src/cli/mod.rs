//! The command line: one file per command, and the exit codes CI gates on.
//!
//! Each command parses its arguments, calls the library ([`crate::session`] to run or judge a
//! plan, [`crate::selfcheck`], [`crate::compare`], [`crate::sim`]) and prints what it returns.
//! Nothing here computes a metric, builds a schedule or decides a verdict; what a run prints
//! while it goes is an observer ([`progress`]), and what it leaves behind is written from the
//! outcome ([`output`]).

mod check;
mod compare;
mod fmt;
mod history;
mod init;
mod merge;
mod oneline;
mod output;
mod plan;
mod progress;
mod report;
mod run;
mod signals;
mod sim;

use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};

use crate::error::{Error, Result};
use crate::plan::Plan;

/// Prints a line to stdout; evaluates to a `Result`: output that cannot be written (a closed
/// pipe, a full disk behind a redirect) is a failure to report, never a silent exit 0.
macro_rules! say {
    ($($arg:tt)*) => {
        $crate::cli::stdout(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// Like `say!`, without the newline.
macro_rules! say_raw {
    ($($arg:tt)*) => {
        $crate::cli::stdout(format_args!($($arg)*))
    };
}

/// Writes to stdout and flushes it.
pub(crate) fn stdout(text: std::fmt::Arguments) -> Result<()> {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    out.write_fmt(text)
        .and_then(|_| out.flush())
        .map_err(|e| Error::io("write", "standard output", e))
}

pub(crate) use {say, say_raw};

/// Load-test LLM serving endpoints from KDL benchmark plans.
#[derive(Parser, Debug)]
#[command(
    name = "llmload",
    version,
    about = "Load-test LLM serving endpoints from KDL benchmark plans",
    after_help = "Exit codes: 0 every assertion held; 1 an assertion failed (or a regression, or a \
                  warning under --fail-on-warning); 2 the plan or the command line is wrong; 3 the \
                  run could not be carried out. See docs/ci.md."
)]
pub(crate) struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run a plan against its target and write a report with verdicts.
    Run(Box<run::RunArgs>),
    /// Check plans (files or directories) and print every mistake; with --capacity, also whether
    /// this machine can generate a plan's load faithfully.
    Check(check::CheckArgs),
    /// Rewrite plans in the canonical layout; with --check, exit 1 with a diff instead.
    Fmt(fmt::FmtArgs),
    /// Write a starter plan, and on request CI jobs that run it on every pull request.
    Init(init::InitArgs),
    /// Print the schedule a plan compiles to, without sending anything.
    Plan(Box<plan::PlanArgs>),
    /// Re-render a report directory's reports from its records, without running anything.
    Report(report::ReportArgs),
    /// Compare two report directories: a Markdown table fit for a pull request; exit 1 on a
    /// regression beyond the run-to-run noise.
    Compare(compare::CompareArgs),
    /// Many runs of a plan in the order they ran (history.md, history.html, history.json), and
    /// the runs that stand out from the runs before them.
    History(history::HistoryArgs),
    /// Merge the shards of one run (`run --shard K/N`) into one run directory, then judge and
    /// report it as a single run.
    Merge(merge::MergeArgs),
    /// Serve the embedded OpenAI-compatible simulator until Ctrl-C.
    Sim(sim::SimArgs),
    /// (Internal) Stop a started server's process group if the llmload that started it dies.
    #[command(name = "__server-watchdog", hide = true)]
    ServerWatchdog {
        /// The server's process group.
        group: i32,
        /// Milliseconds between SIGTERM and SIGKILL.
        grace_ms: u64,
    },
}

/// Runs the command line and returns the process's exit code.
pub fn main() -> ExitCode {
    // A file-size limit (ulimit -f) must make a write fail with a message, not kill the
    // process with SIGXFSZ before it can say anything or write what it can.
    #[cfg(unix)]
    // SAFETY: setting a signal's disposition to "ignore" has no other effect.
    unsafe {
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
    }
    // Diagnostics wrap their help lines between words only: a metric or node name such as
    // `e2e-per-input` is never cut at a hyphen. (Ignored if a hook is set already.)
    let _ = miette::set_hook(Box::new(|_| {
        Box::new(
            miette::MietteHandlerOpts::new()
                .word_splitter(textwrap::WordSplitter::NoHyphenation)
                .break_words(false)
                .build(),
        )
    }));
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Run(args) => run::run(*args),
        Command::Check(args) => check::check(&args),
        Command::Fmt(args) => fmt::fmt(&args),
        Command::Init(args) => init::init(&args),
        Command::Plan(args) => plan::show(&args),
        Command::Report(args) => report::rerender(&args),
        Command::Compare(args) => compare::compare(&args),
        Command::Merge(args) => merge::merge(&args),
        Command::History(args) => history::history(&args),
        Command::Sim(args) => sim::serve(&args),
        Command::ServerWatchdog { group, grace_ms } => Ok(crate::server::watchdog::watch(
            group,
            Duration::from_millis(grace_ms),
        )),
    };
    ExitCode::from(match result {
        Ok(code) => code,
        Err(error) => {
            eprint!("{}", error.render());
            error.exit_code()
        }
    })
}

/// A duration flag ("5s", "250ms"), within the bounds plans have.
fn parse_duration_arg(text: &str) -> std::result::Result<Duration, crate::plan::units::BadValue> {
    crate::plan::units::parse_duration(text)
}

/// The .kdl files `paths` name: each file as given, and every `*.kdl` under each directory (in
/// name order; hidden directories and `target/` skipped).
fn plan_files(paths: &[std::path::PathBuf]) -> Result<Vec<std::path::PathBuf>> {
    let mut files = Vec::new();
    for path in paths {
        if path.is_dir() {
            let before = files.len();
            collect_kdl(path, &mut files, &mut Vec::new())?;
            if files.len() == before {
                return Err(Error::usage(format!(
                    "{}: no .kdl file in it (hidden directories and target/ are skipped)",
                    path.display()
                )));
            }
        } else if path.exists() {
            files.push(path.clone());
        } else {
            return Err(Error::usage(format!(
                "{}: no such file or directory",
                path.display()
            )));
        }
    }
    Ok(files)
}

/// `visited` holds the directories walked so far, as their real paths: a link back to one of
/// them (a cycle) is not walked again.
fn collect_kdl(
    dir: &Path,
    files: &mut Vec<std::path::PathBuf>,
    visited: &mut Vec<std::path::PathBuf>,
) -> Result<()> {
    let real = std::fs::canonicalize(dir).map_err(|e| Error::io("read", dir, e))?;
    if visited.contains(&real) {
        return Ok(());
    }
    visited.push(real);
    let mut entries: Vec<std::path::PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| Error::io("read", dir, e))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    entries.sort();
    for path in entries {
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if path.is_dir() {
            if !name.starts_with('.') && name != "target" {
                collect_kdl(&path, files, visited)?;
            }
        } else if name.ends_with(".kdl") {
            files.push(path);
        }
    }
    Ok(())
}

/// Reads and checks a plan file; every mistake is in the error.
fn load_plan(path: &Path) -> Result<Plan> {
    crate::plan::load(path).map_err(Error::Plan)
}

/// The plan's values set on the command line, for `run` and `plan` alike.
#[derive(Debug, Clone, Default, clap::Args)]
pub(super) struct PlanValues {
    /// Set a value of the plan, addressed by its nodes (repeatable): phase:steady.rate=8,
    /// workload.output=256, target.timeout="30s", workload.output.ignore-eos=#true. Checked
    /// as the plan is; the report lists what was set.
    #[arg(long = "set", value_name = "PATH=VALUE", value_parser = crate::plan::overrides::Override::set)]
    set: Vec<crate::plan::overrides::Override>,
    /// An extra HTTP header on every request (repeatable): "Name: value", or "Name: $VAR" for
    /// a secret read from the environment (never written anywhere).
    #[arg(long = "header", value_name = "NAME: VALUE", value_parser = crate::plan::overrides::Override::header)]
    headers: Vec<crate::plan::overrides::Override>,
    /// Read the API key from this environment variable (the target's api-key env=).
    #[arg(long, value_name = "VAR")]
    api_key_env: Option<String>,
}

impl PlanValues {
    /// Reads and checks a plan file with these values set; every mistake is in the error.
    fn load(&self, path: &Path) -> Result<Plan> {
        crate::plan::load_with(path, &self.all()).map_err(Error::Plan)
    }

    /// Checks a plan's text written from the command line, with these values set.
    fn parse(&self, file_name: &str, text: &str) -> Result<Plan> {
        crate::plan::parse_with(file_name, text, &self.all()).map_err(Error::Plan)
    }

    /// Every value set, as the plan's overrides.
    fn all(&self) -> Vec<crate::plan::overrides::Override> {
        let mut all = self.set.clone();
        all.extend(self.headers.iter().cloned());
        all.extend(
            self.api_key_env
                .iter()
                .map(|var| crate::plan::overrides::Override::ApiKeyEnv(var.clone())),
        );
        all
    }
}
