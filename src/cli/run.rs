//! `llmload run PLAN`: run a plan, write its report, exit with its verdict.

use std::path::PathBuf;
use std::time::Duration;

use super::output::{self, GateArgs};
use super::{load_plan, parse_duration_arg, progress, signals};
use crate::error::{Error, Result};
use crate::plan::Endpoint;
use crate::session::{self, RunOptions};

#[derive(clap::Args, Debug)]
pub(super) struct RunArgs {
    /// The plan file (KDL).
    plan: PathBuf,
    /// Send to this base URL instead of the plan's target (with or without /v1), or "sim" for
    /// the embedded simulator.
    #[arg(long, value_name = "URL")]
    target: Option<String>,
    /// Report directory [default: reports/<plan>-<UTC timestamp>/].
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Use this seed instead of the plan's (arrivals, lengths, prompts).
    #[arg(long)]
    seed: Option<u64>,
    #[command(flatten)]
    gate: GateArgs,
    /// After Ctrl-C (or SIGTERM), how long in-flight requests may finish before they are
    /// cancelled.
    #[arg(long, default_value = "5s", value_parser = parse_duration_arg)]
    grace: Duration,
    /// No live progress line.
    #[arg(long, short)]
    quiet: bool,
    /// Runtime worker threads for sending and reading [default: one per core].
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..))]
    threads: Option<u16>,
}

/// `--target`: a base URL, or `sim`.
pub(super) fn parse_target(text: &str) -> Result<Endpoint> {
    Endpoint::parse(text).ok_or_else(|| {
        Error::usage(format!(
            "--target {}: not an http:// or https:// URL, nor \"sim\"",
            session::redact_url(text)
        ))
    })
}

/// A name made safe to be one component of a path: `../../x` cannot write outside `reports/`.
pub(super) fn path_safe(name: &str) -> String {
    let safe: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '_'
            }
        })
        .collect();
    let safe = safe.trim_start_matches('.');
    if safe.is_empty() {
        "plan".to_string()
    } else {
        safe.chars().take(100).collect()
    }
}

pub(super) fn run(args: RunArgs) -> Result<u8> {
    let plan = load_plan(&args.plan)?;
    let target = args.target.as_deref().map(parse_target).transpose()?;
    let templates = output::load_templates(&args.gate)?;
    output::check_paths(&args.gate)?;
    if let Some(baseline) = &args.gate.baseline {
        session::check_baseline(baseline, &plan, args.seed)?;
    }
    let out = args.out.clone().unwrap_or_else(|| {
        PathBuf::from("reports").join(format!(
            "{}-{}",
            path_safe(&plan.name),
            chrono::Utc::now().format("%Y%m%dT%H%M%SZ")
        ))
    });
    let mut options = RunOptions::new(&out);
    options.seed = args.seed;
    options.target = target;
    options.grace = args.grace;
    options.threads = args.threads.map(usize::from);
    options.gate = args.gate.gate();
    let live = progress::Live::start(!args.quiet);
    options.observer = live.observer();
    signals::forward_to(options.stop.clone());
    let outcome = session::run(&plan, &options);
    live.finish();
    output::conclude(&outcome?, &args.gate, &templates)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_names_cannot_leave_the_reports_directory() {
        assert_eq!(path_safe("../../x"), "_.._x");
        assert_eq!(path_safe("chat-sla"), "chat-sla");
        assert_eq!(path_safe("a/b c"), "a_b_c");
        assert_eq!(path_safe(".."), "plan");
        assert_eq!(path_safe(""), "plan");
        assert!(!path_safe("../../etc/passwd").contains('/'));
    }
}
