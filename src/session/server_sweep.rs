//! A server sweep (`server-sweep`): the plan's load — its phases, a sweep or a capacity search —
//! run against each configuration of its server in turn, each started fresh on its own port,
//! each a whole run in a directory of its own (`OUT/<configuration>/`), then judged together.
//!
//! The sweep's one verdict: every configuration must pass its gate (as every assertion of a
//! plan must hold); one that could not be carried out (its server did not start, died, or the
//! sweep was stopped) makes the sweep not carried out. Which configuration is best under the
//! objectives is named either way: of those that passed, the highest capacity (a search); else
//! the most headroom under the plan's assertions (the smallest, over its assertions, of how
//! far the observed value is inside its threshold, as a ratio); else the highest output
//! throughput.

use super::*;
use crate::executor::Event;
use crate::plan::ServerConfig;
use crate::verdict::VerdictStatus;

/// One configuration's run.
pub struct ConfigRun {
    /// The configuration.
    pub config: ServerConfig,
    /// Its judged run, or why it could not run (its server did not start or was not ready).
    pub outcome: std::result::Result<RunOutcome, String>,
}

/// A whole server sweep.
pub struct ServerSweepOutcome {
    /// The sweep's directory (each configuration's run in a subdirectory).
    pub dir: PathBuf,
    /// The configurations run, in order.
    pub runs: Vec<ConfigRun>,
    /// The configurations not run: the sweep was stopped first.
    pub skipped: Vec<ServerConfig>,
    /// The sweep's one verdict.
    pub verdict: RunVerdict,
    /// The best configuration under the objectives (an index into `runs`), if one passed.
    pub best: Option<usize>,
    /// What `best` was chosen by: `capacity`, `headroom`, `output throughput`.
    pub best_by: &'static str,
}

/// Runs `plan` against each configuration of its `server-sweep`, judged together.
pub fn run_server_sweep(plan: &Plan, options: &RunOptions) -> Result<ServerSweepOutcome> {
    let (Some(sweep), Some(server)) = (&plan.server_sweep, &plan.server) else {
        return Err(Error::usage("the plan has no server sweep"));
    };
    if options.shard.is_some() || options.target.is_some() {
        return Err(Error::usage(
            "a server sweep starts its own server for each configuration: run it without --shard and --target",
        ));
    }
    super::server::permitted(plan, options)?;
    outdir::prepare(&options.out_dir, Some(&plan.name))?;
    // Marked as llmload's at once: a sweep stopped before its report is still a run directory
    // the next one may reuse.
    outdir::write_manifest(&options.out_dir, &[])?;
    let configurations = sweep.configurations();
    let total = configurations.len();
    let mut runs = Vec::new();
    let mut skipped = Vec::new();
    for (index, config) in configurations.into_iter().enumerate() {
        if options.stop.is_stopping() {
            skipped.push(config);
            continue;
        }
        options.observer.on_event(Event::Note(&format!(
            "server configuration {} of {total}: {}",
            index + 1,
            config.name
        )));
        let mut one = plan.clone();
        one.server = Some(server.configured(&config));
        one.server_sweep = None;
        // A configuration of its own count of GPUs is priced by it.
        if let (Some(gpus), Some(per_gpu)) =
            (config.gpus, plan.cost.as_ref().and_then(|c| c.per_gpu_hour))
        {
            one.cost = Some(crate::plan::gpu_hour_price(per_gpu, gpus));
        }
        let mut labels = options.labels.clone();
        labels.insert("server-config".into(), config.name.clone());
        let config_options = RunOptions {
            out_dir: options.out_dir.join(&config.slug),
            seed: options.seed,
            target: None,
            grace: options.grace,
            threads: options.threads,
            record_writes: false,
            observer: options.observer.clone(),
            objectives_live: options.objectives_live,
            stop: options.stop.clone(),
            // A baseline sweep's run of the same configuration is this one's baseline.
            gate: Gate {
                baseline: options.gate.baseline.as_ref().map(|b| b.join(&config.slug)),
                fail_on_warning: options.gate.fail_on_warning,
            },
            shard: None,
            start_at: None,
            labels,
            allow_server: options.allow_server,
        };
        let outcome = match run(&one, &config_options) {
            Ok(outcome) => Ok(outcome),
            // A configuration whose server does not start or is not ready is the sweep's
            // finding, not the end of it; a mistake in the plan or the command line is.
            Err(error) if error.exit_code() == crate::error::EXIT_RUN => {
                options
                    .observer
                    .on_event(Event::Warning(&format!("{}: {error}", config.name)));
                Err(crate::escape::one_line(&error.to_string()).into_owned())
            }
            Err(error) => return Err(error),
        };
        runs.push(ConfigRun { config, outcome });
    }
    let verdict = verdict_of(&runs, &skipped, options.stop.is_stopping());
    let (best, best_by) = best_of(&runs);
    Ok(ServerSweepOutcome {
        dir: options.out_dir.clone(),
        runs,
        skipped,
        verdict,
        best,
        best_by,
    })
}

/// Every configuration must pass; one not carried out makes the sweep not carried out.
fn verdict_of(runs: &[ConfigRun], skipped: &[ServerConfig], interrupted: bool) -> RunVerdict {
    // Each reason names its configuration the same way, whatever the outcome.
    let reason =
        |run: &ConfigRun, why: &str| format!("server configuration \"{}\": {why}", run.config.name);
    let mut not_carried_out = Vec::new();
    let mut failed = Vec::new();
    for run in runs {
        match &run.outcome {
            Err(why) => not_carried_out.push(reason(run, why)),
            Ok(outcome) => {
                let why = outcome.verdict().reasons.join("; ");
                match outcome.status {
                    Status::Passed => {}
                    Status::Failed(_) => failed.push(reason(run, &why)),
                    Status::NotCarriedOut(_) | Status::NotDecided(_) => {
                        not_carried_out.push(reason(run, &why))
                    }
                }
            }
        }
    }
    let (status, exit_code, reasons) = if interrupted {
        let mut reasons = vec![format!(
            "the sweep was interrupted: {} of {} configurations not run",
            skipped.len(),
            runs.len() + skipped.len()
        )];
        reasons.extend(not_carried_out);
        (VerdictStatus::Interrupted, crate::error::EXIT_RUN, reasons)
    } else if !not_carried_out.is_empty() {
        let mut reasons = not_carried_out;
        reasons.extend(failed);
        (
            VerdictStatus::NotCarriedOut,
            crate::error::EXIT_RUN,
            reasons,
        )
    } else if !failed.is_empty() {
        (VerdictStatus::Fail, crate::error::EXIT_FAIL, failed)
    } else {
        (VerdictStatus::Pass, crate::error::EXIT_PASS, Vec::new())
    };
    RunVerdict {
        status,
        exit_code,
        reasons,
        found: Vec::new(),
    }
}

/// A configuration's score under one criterion (higher is better), if it has one.
type Score<'a> = &'a dyn Fn(&RunOutcome) -> Option<f64>;

/// Of the configurations that passed, the best by the first measure all of them have: the
/// capacity (a search's), the headroom under the assertions, the output throughput of all
/// recorded phases; the first of equals.
fn best_of(runs: &[ConfigRun]) -> (Option<usize>, &'static str) {
    let passed: Vec<(usize, &RunOutcome)> = runs
        .iter()
        .enumerate()
        .filter_map(|(i, r)| r.outcome.as_ref().ok().map(|o| (i, o)))
        .filter(|(_, o)| o.status == Status::Passed)
        .collect();
    let capacity = |o: &RunOutcome| o.verdicts.capacity.as_ref()?.bracket.sustains;
    let throughput = |o: &RunOutcome| Some(o.aggregates.overall.throughput.output_tokens_per_s);
    let criteria: [(&'static str, Score); 3] = [
        ("capacity", &capacity),
        ("headroom", &|o: &RunOutcome| headroom(&o.verdicts)),
        ("output throughput", &throughput),
    ];
    for (name, score) in criteria {
        let scores: Option<Vec<(usize, f64)>> = passed
            .iter()
            .map(|(i, o)| score(o).map(|s| (*i, s)))
            .collect();
        let Some(scores) = scores.filter(|s| !s.is_empty()) else {
            continue;
        };
        let mut best = scores[0];
        for candidate in &scores[1..] {
            if candidate.1 > best.1 {
                best = *candidate;
            }
        }
        return (Some(best.0), name);
    }
    (None, "headroom")
}

/// How far inside its thresholds a run that passed is: over its assertions, the smallest ratio
/// of threshold to observed (`<`) or observed to threshold (`>`); `None` without an assertion
/// that measured something other than zero.
fn headroom(verdicts: &Verdicts) -> Option<f64> {
    verdicts
        .results
        .iter()
        .filter(|r| r.passed)
        .filter_map(|r| {
            let observed = r.observed?;
            let ratio = if observed <= r.threshold {
                r.threshold / observed
            } else {
                observed / r.threshold
            };
            ratio.is_finite().then_some(ratio)
        })
        .min_by(f64::total_cmp)
}
