//! `llmload merge SHARD_DIR... --out DIR`: the shards of one run merged into one run directory,
//! then judged and reported exactly as a single run.

use std::path::PathBuf;

use super::output::{self, GateArgs};
use crate::error::Result;
use crate::session;

#[derive(clap::Args, Debug)]
pub(super) struct MergeArgs {
    /// Every shard's run directory (left by `llmload run --shard K/N`).
    #[arg(required = true)]
    shards: Vec<PathBuf>,
    /// Where the merged run goes (created; an earlier run's files there are replaced).
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
    #[command(flatten)]
    gate: GateArgs,
}

pub(super) fn merge(args: &MergeArgs) -> Result<u8> {
    let templates = output::load_templates(&args.gate)?;
    output::check_paths(&args.gate, Some(&args.out))?;
    session::merge(&args.shards, &args.out)?;
    let plan = session::archived_plan(&args.out)?;
    let outcome = session::judge(&plan, &args.out, &args.gate.gate())?;
    output::conclude(&outcome, &args.gate, &templates)
}
