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
    #[command(flatten)]
    gate: GateArgs,
}

pub(super) fn rerender(args: &ReportArgs) -> Result<u8> {
    let templates = output::load_templates(&args.gate)?;
    output::check_paths(&args.gate, Some(&args.dir))?;
    let plan = session::archived_plan(&args.dir)?;
    let outcome = session::judge(&plan, &args.dir, &args.gate.gate())?;
    output::conclude(&outcome, &args.gate, &templates)
}
