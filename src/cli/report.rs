//! `llmload report DIR`: every report of a run rebuilt from its `records.jsonl` and `plan.kdl`,
//! without running anything.

use std::path::PathBuf;

use super::output::{self, GateArgs};
use crate::error::Result;
use crate::session;

#[derive(clap::Args, Debug)]
pub(super) struct ReportArgs {
    /// A report directory left by `llmload run` (it holds records.jsonl and plan.kdl).
    dir: PathBuf,
    /// Re-render without the baseline the run was judged against (by default it is compared
    /// with it again: a regression is part of the run).
    #[arg(long, conflicts_with = "baseline")]
    no_baseline: bool,
    /// Remove the files an earlier run or report wrote into DIR that this one does not write
    /// again (JUnit, exports, templates' outputs); without it they are kept, and said.
    #[arg(long)]
    clean: bool,
    #[command(flatten)]
    gate: GateArgs,
}

pub(super) fn rerender(args: &ReportArgs) -> Result<u8> {
    let templates = output::load_templates(&args.gate)?;
    output::check_paths(&args.gate, Some(&args.dir))?;
    let plan = session::archived_plan(&args.dir)?;
    let gate = args
        .gate
        .or_kept(session::Gate::kept(&args.dir)?, args.no_baseline);
    if let Some(baseline) = gate.baseline.as_ref().filter(|b| !b.exists()) {
        return Err(crate::error::Error::usage(format!(
            "this run was judged against the baseline {}, which is gone: pass --baseline DIR to \
             compare it with another, or --no-baseline to re-render it without one",
            baseline.display()
        )));
    }
    let outcome = session::judge(&plan, &args.dir, &gate.gate())?;
    let earlier = if args.clean {
        output::Earlier::Remove
    } else {
        output::Earlier::Keep
    };
    output::conclude_with(&outcome, &gate, &templates, earlier)
}
