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
    /// The plan file (KDL); without one, the flags under "Without a plan file" make the plan,
    /// as `run` makes it.
    plan: Option<PathBuf>,
    /// Show the plan sent to this base URL instead of the plan's target, or "sim".
    #[arg(long, value_name = "URL")]
    target: Option<String>,
    /// Ask for this model instead of the plan's target's.
    #[arg(long, value_name = "NAME")]
    model: Option<String>,
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
    #[command(flatten)]
    one_line: super::oneline::OneLineArgs,
}

pub(super) fn show(args: &PlanArgs) -> Result<u8> {
    let (mut plan, target) = super::run::plan_of(
        args.plan.as_deref(),
        args.target.as_deref(),
        args.model.as_deref(),
        args.seed,
        &args.values,
        &args.one_line,
    )?;
    if let Some(target) = target {
        plan.target.endpoint = target;
    }
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
