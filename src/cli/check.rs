//! `llmload check PLAN`: every mistake in a plan; with `--capacity`, whether this machine can
//! generate its load faithfully.

use std::path::PathBuf;
use std::time::Duration;

use super::{load_plan, parse_duration_arg, say};
use crate::capacity::{self, TrialResult};
use crate::error::{Result, EXIT_FAIL, EXIT_PASS};
use crate::plan::Plan;

#[derive(clap::Args, Debug)]
pub(super) struct CheckArgs {
    /// The plan file (KDL).
    plan: PathBuf,
    /// Drive each of the plan's loads at its peak against the simulator in this process, and
    /// say whether this machine generates it faithfully (schedule lag, timing error, client CPU).
    #[arg(long)]
    capacity: bool,
    /// How long each capacity trial sends.
    #[arg(long, default_value = "5s", value_parser = parse_duration_arg, requires = "capacity")]
    duration: Duration,
    /// The trial simulator's time to first token.
    #[arg(long, default_value = "20ms", value_parser = parse_duration_arg, requires = "capacity")]
    sim_ttft: Duration,
    /// The trial simulator's time between tokens (shorter is more work for the client).
    #[arg(long, default_value = "5ms", value_parser = parse_duration_arg, requires = "capacity")]
    sim_itl: Duration,
    /// Runtime worker threads, as `run --threads` would use.
    #[arg(long, requires = "capacity", value_parser = clap::value_parser!(u16).range(1..))]
    threads: Option<u16>,
}

pub(super) fn check(args: &CheckArgs) -> Result<u8> {
    let plan = load_plan(&args.plan)?;
    say!(
        "{}: plan \"{}\" is valid: {} phase(s), {} assertion(s)",
        args.plan.display(),
        plan.name,
        plan.phases.len(),
        plan.sla.len()
    )?;
    if args.capacity {
        check_capacity(args, &plan)
    } else {
        Ok(EXIT_PASS)
    }
}

/// One short trial per distinct peak load of the plan; exit 1 when this machine cannot generate
/// one of them faithfully.
fn check_capacity(args: &CheckArgs, plan: &Plan) -> Result<u8> {
    let server = capacity::TrialServer {
        ttft: args.sim_ttft,
        itl: args.sim_itl,
    };
    let trials = capacity::trials(plan, args.duration, server);
    let threads = args.threads.map(usize::from);
    let cores = crate::executor::resources::client_cores(threads);
    say!(
        "capacity: {} trial(s), {} s each, against the simulator in this process (TTFT {} ms, ITL {} ms) on {cores} core(s)",
        trials.len(),
        args.duration.as_secs_f64(),
        args.sim_ttft.as_secs_f64() * 1000.0,
        args.sim_itl.as_secs_f64() * 1000.0,
    )?;
    say!("the simulator shares these cores: a load that passes here passes against a remote server\n")?;
    let mut results = Vec::new();
    for (number, trial) in trials.iter().enumerate() {
        let dir =
            std::env::temp_dir().join(format!("llmload-capacity-{}-{number}", std::process::id()));
        let result = capacity::run_trial(trial, &dir, threads);
        let _ = std::fs::remove_dir_all(&dir);
        let result = result?;
        say!("{}", line(&result))?;
        results.push(result);
    }
    if results.iter().all(TrialResult::faithful) {
        say!("\nPASS: this machine generates every load of the plan faithfully")?;
        Ok(EXIT_PASS)
    } else {
        say!("\nFAIL: this machine cannot generate every load of the plan faithfully: run the client with more \
              cores (--threads, another machine) or split the load across several clients")?;
        Ok(EXIT_FAIL)
    }
}

fn line(result: &TrialResult) -> String {
    let ms = |value: Option<f64>| value.map_or("-".to_string(), |v| format!("{v:.2} ms"));
    let rate = match result.planned_per_s {
        Some(planned) => format!("{:.1}/{planned} req/s sent", result.sent_per_s),
        None => format!("{:.1} req/s", result.sent_per_s),
    };
    let cpu = match (result.client_utilization, result.client_cores) {
        (Some(share), Some(cores)) => format!("CPU {:.0}% of {cores}", share * 100.0),
        _ => "CPU -".to_string(),
    };
    let verdict = if result.faithful() {
        "ok".to_string()
    } else {
        format!("LIMITED: {}", result.limits.join("; "))
    };
    format!(
        "{:<24} {:<24} {rate:<22} lag p99 {:<9} read delay p99 {:<9} ITL err p99 {:<9} (TTFT err p99 {:<9}) {cpu:<12} {verdict}",
        result.phases.join(", "),
        result.load,
        ms(result.schedule_lag_p99_ms),
        ms(result.read_delay_p99_ms),
        ms(result.itl_error_p99_ms),
        ms(result.ttft_error_p99_ms),
    )
}
