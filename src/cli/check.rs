//! `llmload check PLAN`: every mistake in a plan; with `--capacity`, whether this machine can
//! generate its load faithfully.

use std::path::PathBuf;
use std::time::Duration;

use super::{load_plan, parse_duration_arg, plan_files, say};
use crate::error::{Error, Result, EXIT_FAIL, EXIT_PASS, EXIT_USAGE};
use crate::plan::{self, Checked, Plan};
use crate::selfcheck::{self, TrialResult};

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum Format {
    /// Every mistake with its file, line, caret and help.
    Text,
    /// Every mistake as JSON (file, line, column, message, help), for editors and review bots.
    Json,
}

#[derive(clap::Args, Debug)]
pub(super) struct CheckArgs {
    /// Plan files (or shared fragments), or directories searched for *.kdl files.
    #[arg(required = true)]
    plans: Vec<PathBuf>,
    /// How to print the mistakes.
    #[arg(long, value_enum, default_value = "text")]
    format: Format,
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
    if args.capacity {
        let [path] = args.plans.as_slice() else {
            return Err(Error::usage("--capacity checks one plan file at a time"));
        };
        let plan = load_plan(path)?;
        say!(
            "{}: plan \"{}\" is valid: {} phase(s), {} assertion(s)",
            path.display(),
            plan.name,
            plan.phases.len(),
            plan.sla.len()
        )?;
        return check_capacity(args, &plan);
    }
    // One file given by name is checked as a plan, as before; a directory or several files are
    // checked each as a plan or a shared fragment.
    let files = plan_files(&args.plans)?;
    let single_plan = args.plans.len() == 1 && args.plans[0].is_file();
    let mut problems = 0usize;
    let mut bad_files = 0usize;
    let mut diagnostics = Vec::new();
    let mut warnings = Vec::new();
    // Plans that start a process when run: what a reviewer of a plan change must read.
    let mut starts = Vec::new();
    let annotate = std::env::var("GITHUB_ACTIONS").as_deref() == Ok("true");
    for file in &files {
        let checked = plan::read_plan_text(file).and_then(|text| {
            let name = file.display().to_string();
            if single_plan {
                plan::parse_plan(&name, text).map(|p| Checked::Plan(Box::new(p)))
            } else {
                plan::check_file(&name, text)
            }
        });
        // What `plan` and `run` load and compile, check does too: a tokenizer file that is no
        // tokenizer, or a dataset with no usable entry, fails here, not an hour later in CI.
        // The compiled schedule also says which assertions its requests can never decide.
        let checked = checked.and_then(|checked| {
            let undecidable = match &checked {
                Checked::Plan(plan) => crate::tokens::Tokenizer::load(&plan.workload.tokenizer)
                    .and_then(|_| crate::planner::compile(plan, plan.seed))
                    .map(|schedule| crate::verdict::undecidable(plan, &schedule))
                    .map_err(|error| plan::PlanErrors::io(error.to_string()))?,
                Checked::Fragment => Vec::new(),
            };
            Ok((checked, undecidable))
        });
        match checked {
            Ok((Checked::Plan(plan), undecidable)) => {
                if matches!(args.format, Format::Text) {
                    say!(
                        "{}: plan \"{}\" is valid: {} phase(s), {} assertion(s)",
                        file.display(),
                        plan.name,
                        plan.phases.len(),
                        plan.sla.len()
                    )?;
                }
                if let Some(server) = &plan.server {
                    let command = server.shown_command();
                    let message = format!(
                        "this plan starts a process on this machine when it runs (run needs \
                         --allow-server): {command}"
                    );
                    if matches!(args.format, Format::Text) {
                        say!("{}: note: {message}", file.display())?;
                    }
                    if annotate {
                        let file = file.display().to_string();
                        say!("{}", annotation("notice", &file, 1, 1, &message))?;
                    }
                    starts.push(serde_json::json!({
                        "file": file.display().to_string(),
                        "command": command,
                    }));
                }
                for warning in undecidable {
                    if matches!(args.format, Format::Text) {
                        say!(
                            "{}: warning: {}",
                            file.display(),
                            crate::escape::one_line(&warning)
                        )?;
                    }
                    warnings.push(
                        serde_json::json!({"file": file.display().to_string(), "message": warning}),
                    );
                }
            }
            Ok((Checked::Fragment, _)) => {
                if matches!(args.format, Format::Text) {
                    say!("{}: shared file is valid", file.display())?;
                }
            }
            Err(errors) => {
                bad_files += 1;
                problems += errors.diagnostics.len().max(1);
                if matches!(args.format, Format::Text) {
                    eprint!("{}", errors.render());
                }
                let found = located(file, &errors);
                if annotate {
                    for d in &found {
                        say!("{}", github_annotation(d))?;
                    }
                }
                diagnostics.extend(found);
            }
        }
    }
    match args.format {
        Format::Json => {
            let json = serde_json::json!({
                "files": files.len(),
                "files_with_problems": bad_files,
                "diagnostics": diagnostics,
                "warnings": warnings,
                "starts_processes": starts,
            });
            say!(
                "{}",
                serde_json::to_string_pretty(&json).unwrap_or_default()
            )?;
        }
        Format::Text if files.len() > 1 => say!(
            "checked {} file(s): {} valid, {bad_files} with {problems} problem(s)",
            files.len(),
            files.len() - bad_files
        )?,
        Format::Text => {}
    }
    Ok(if bad_files > 0 { EXIT_USAGE } else { EXIT_PASS })
}

/// A mistake where an editor or a review bot can show it.
#[derive(serde::Serialize)]
struct Located {
    file: String,
    line: usize,
    column: usize,
    message: String,
    label: String,
    help: Option<String>,
}

fn located(file: &std::path::Path, errors: &plan::PlanErrors) -> Vec<Located> {
    let mut out: Vec<Located> = errors
        .diagnostics
        .iter()
        .map(|d| {
            let (file, line, column) = d.location();
            Located {
                file,
                line,
                column,
                message: d.message.clone(),
                label: d.label.clone(),
                help: d.help.clone(),
            }
        })
        .collect();
    if let Some(message) = &errors.message {
        out.push(Located {
            file: file.display().to_string(),
            line: 1,
            column: 1,
            message: message.clone(),
            label: String::new(),
            help: None,
        });
    }
    out
}

/// A GitHub Actions error annotation: it shows on the line in the pull request's diff.
fn github_annotation(d: &Located) -> String {
    let mut message = d.message.clone();
    if let Some(help) = &d.help {
        message.push_str("\nhelp: ");
        message.push_str(help);
    }
    annotation("error", &d.file, d.line, d.column, &message)
}

/// A GitHub Actions workflow command that marks `file` at `line`:`column` with `message`.
fn annotation(level: &str, file: &str, line: usize, column: usize, message: &str) -> String {
    let escape = |s: &str| {
        s.replace('%', "%25")
            .replace('\r', "%0D")
            .replace('\n', "%0A")
    };
    let property = |s: &str| escape(s).replace(':', "%3A").replace(',', "%2C");
    format!(
        "::{level} file={},line={line},col={column},title=llmload::{}",
        property(file),
        escape(message)
    )
}

/// One short trial per distinct peak load of the plan; exit 1 when this machine cannot generate
/// one of them faithfully.
fn check_capacity(args: &CheckArgs, plan: &Plan) -> Result<u8> {
    let server = selfcheck::TrialServer {
        ttft: args.sim_ttft,
        itl: args.sim_itl,
    };
    let trials = selfcheck::trials(plan, args.duration, server);
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
    if let Some(server) = &plan.server {
        say!(
            "note: this plan starts its server ({}) on this machine: what that server uses of these cores \
             is this machine's limit, not the client's — the trials measure the client alone, so give the \
             server cores of its own (taskset, --threads for both) or expect less; each run's report shows \
             the server's CPU-s beside the client's\n",
            crate::escape::one_line(&server.command.program_name())
        )?;
    }
    let mut results = Vec::new();
    for (number, trial) in trials.iter().enumerate() {
        let dir =
            std::env::temp_dir().join(format!("llmload-capacity-{}-{number}", std::process::id()));
        let result = selfcheck::run_trial(trial, &dir, threads);
        let _ = std::fs::remove_dir_all(&dir);
        let result = result?;
        say!("{}", line(&result))?;
        results.push(result);
    }
    let shards = results
        .iter()
        .map(TrialResult::shards_needed)
        .max()
        .unwrap_or(1);
    if results.iter().all(TrialResult::faithful) {
        say!("\nPASS: this machine generates every load of the plan faithfully")?;
        if shards > 1 {
            say!(
                "sizing: with the client over {:.0}% busy at its peak, {shards} shards of this machine's size \
                 (run --shard K/{shards}) keep each under it (docs/distributed.md)",
                selfcheck::SHARD_UTILIZATION * 100.0
            )?;
        }
        Ok(EXIT_PASS)
    } else {
        say!("\nFAIL: this machine cannot generate every load of the plan faithfully: run the client with more \
              cores (--threads, another machine) or split the load across several clients")?;
        say!(
            "sizing: about {shards} shards of this machine's size (run --shard K/{shards} on each, then llmload \
             merge; each kept under {:.0}% busy; docs/distributed.md)",
            selfcheck::SHARD_UTILIZATION * 100.0
        )?;
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
