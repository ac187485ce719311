//! `llmload plan PLAN`: the schedule a plan compiles to, before anything is sent.

use std::path::PathBuf;

use clap::ValueEnum;

use super::say_raw;
use crate::error::{Result, EXIT_PASS};
use crate::planner;
use crate::report::schedule;

#[derive(Clone, Copy, Debug, ValueEnum)]
enum Format {
    /// One line per phase, for people.
    Table,
    /// Every request, as JSON.
    Json,
    /// Every request, as CSV.
    Csv,
}

#[derive(clap::Args, Debug)]
pub(super) struct PlanArgs {
    /// The plan file (KDL).
    plan: PathBuf,
    /// Use this seed instead of the plan's.
    #[arg(long)]
    seed: Option<u64>,
    /// How to show the schedule.
    #[arg(long, value_enum, default_value = "table")]
    format: Format,
    /// Show only shard K of N's part (K from 1).
    #[arg(long, value_name = "K/N")]
    shard: Option<String>,
    #[command(flatten)]
    values: super::PlanValues,
}

pub(super) fn show(args: &PlanArgs) -> Result<u8> {
    let plan = args.values.load(&args.plan)?;
    let schedule = planner::compile(&plan, args.seed.unwrap_or(plan.seed))?;
    let schedule = match &args.shard {
        Some(text) => schedule.shard(planner::Shard::parse(text)?)?,
        None => schedule,
    };
    let output = match args.format {
        Format::Json => schedule::json(&schedule)?,
        Format::Csv => schedule::csv(&schedule),
        Format::Table => schedule::table(&plan, &schedule),
    };
    say_raw!("{output}")?;
    for warning in crate::verdict::undecidable(&plan, &schedule) {
        eprintln!("warning: {}", crate::escape::one_line(&warning));
    }
    Ok(EXIT_PASS)
}
