//! The client's self-check: can this machine generate a plan's load faithfully? (Not the
//! server's capacity, which a plan's `search` finds.)
//!
//! `llmload check --capacity PLAN` runs, for each distinct load of the plan, a short trial at
//! that load's peak (a ramp's top rate, a closed loop's concurrency, a burst) with the plan's own
//! request mix, against the simulator started in this process with fixed delays and recording
//! its write times. Each trial is then judged on what only the client is answerable for:
//! schedule lag, how late it read each token after the simulator wrote it (the read delay), its
//! ITL error, its CPU, and whether every request succeeded at the asked rate
//! ([`fidelity`]).
//!
//! The TTFT error is shown but not judged: it also holds the send delay, which includes any wait
//! before the simulator's handler ran, and here the simulator shares the client's cores (a burst
//! of requests queues in it). For the same reason the answer errs on the safe side: a load that
//! passes here passes against a remote server. This module builds the trials, runs each through
//! [`crate::session`] and judges it; printing is the caller's.

pub mod fidelity;

use std::path::Path;
use std::time::Duration;

use serde::Serialize;

use crate::error::{Error, Result};
use crate::metrics::{self, PhaseMetrics};
use crate::plan::{Endpoint, Load, Phase, Plan, SimSettings};
use crate::records::{self, LogLine};
use crate::session::{self, RunOptions};
use fidelity::TimingErrors;

/// Schedule lag p99 above this is not faithful pacing: the one limit, the run's `schedule-lag`
/// warning's, so that a load `check --capacity` passes is one `run` does not warn about.
pub use crate::metrics::warnings::LAG_P99_LIMIT_MS;
/// Tokens read later than this after the server wrote them (p99) distort TTFT and ITL.
pub const READ_DELAY_P99_LIMIT_MS: f64 = 1.0;
/// Client-added ITL error p99 above this distorts inter-token latency.
pub const ITL_ERROR_P99_LIMIT_MS: f64 = 0.5;
/// A trial that sent less than this share of its planned rate fell behind.
pub const MIN_RATE_SHARE: f64 = 0.95;
/// Seconds with the client's cores saturated above this share mean the client is the limit.
pub const SATURATED_SHARE_LIMIT: f64 = 0.10;

/// How long each trial warms up (unrecorded) before it measures.
const WARMUP: Duration = Duration::from_secs(1);

/// The delays of the simulator trials run against.
#[derive(Debug, Clone, Copy)]
pub struct TrialServer {
    /// Time to first token.
    pub ttft: Duration,
    /// Time between tokens.
    pub itl: Duration,
}

/// One trial: a plan at the peak of one of the plan's loads: an unrecorded warmup, then the
/// measured phase.
#[derive(Debug, Clone)]
pub struct Trial {
    /// The plan phases whose load this is.
    pub phases: Vec<String>,
    /// The trial's own plan: a warmup, then the measured phase, against the simulator.
    pub plan: Plan,
}

/// The trials for `plan`: one per distinct peak load (every step of a sweep, and a search's
/// highest load), each `duration` long (a burst sends its requests once), against the
/// in-process simulator.
pub fn trials(plan: &Plan, duration: Duration, server: TrialServer) -> Vec<Trial> {
    let mut trials: Vec<Trial> = Vec::new();
    let mut loads: Vec<(String, Load)> = plan
        .phases
        .iter()
        .map(|phase| (phase.name.clone(), phase.load.at_peak()))
        .collect();
    if let Some(search) = &plan.search {
        // The highest load the search may probe, whatever it finds.
        loads.extend(
            search
                .load_at(search.high)
                .map(|load| (format!("search \"{}\" at its top", search.name), load)),
        );
    }
    for (name, load) in loads {
        if let Some(trial) = trials.iter_mut().find(|t| t.plan.phases[1].load == load) {
            trial.phases.push(name);
            continue;
        }
        let mut trial_plan = plan.clone();
        trial_plan.target.endpoint = Endpoint::Simulator;
        trial_plan.sim = SimSettings {
            ttft: server.ttft,
            itl: server.itl,
            jitter: Duration::ZERO,
            tokens_per_chunk: plan.sim.tokens_per_chunk,
            seed: plan.seed,
            engine: None,
            faults: Default::default(),
            reasoning: None,
            tool_rounds: plan.sim.tool_rounds,
            models: plan.sim.models.clone(),
            answer_as: Vec::new(),
            api_key_env: plan.sim.api_key_env.clone(),
            // The client's own cost is measured: the server adds no media time, and its /metrics
            // no GPUs; it throttles nothing.
            vision: None,
            gpu: None,
            rate_limit: None,
        };
        let burst = load.drains();
        // The same load, unrecorded, first: connections are open and the runtime warm when the
        // measured phase starts, as after a plan's own warmup.
        // A closed loop's warmup ends by count, so that it drains before the measured phase
        // (one ended by time would leave its last requests in flight, and the measured phase
        // would open new connections beside them).
        let (warmup_duration, warmup_requests) = match load {
            Load::Concurrency(n) => (None, Some(2 * n as u64)),
            Load::Rate { .. } | Load::AtOnce(_) | Load::Trace(_) | Load::Sessions(_) => {
                ((!burst).then_some(WARMUP.min(duration)), None)
            }
        };
        let warmup = Phase {
            duration: warmup_duration,
            max_requests: warmup_requests,
            record: false,
            ..Phase::new(format!("warmup: {name}"), load.clone())
        };
        trial_plan.phases = vec![
            warmup,
            Phase {
                duration: (!burst).then_some(duration),
                ..Phase::new(format!("capacity: {name}"), load)
            },
        ];
        trial_plan.search = None;
        trial_plan.sla.clear();
        trial_plan.regression.clear();
        trial_plan.abort.clear();
        trial_plan.slo = None;
        trials.push(Trial {
            phases: vec![name],
            plan: trial_plan,
        });
    }
    trials
}

/// Runs one trial in `dir` (a scratch directory the caller removes) with `threads` runtime
/// workers, and judges it.
pub fn run_trial(trial: &Trial, dir: &Path, threads: Option<usize>) -> Result<TrialResult> {
    let mut options = RunOptions::new(dir);
    options.threads = threads;
    options.record_writes = true;
    let execution = session::execute(&trial.plan, &options)?;
    // One pass over the records: the aggregates, and the measured phase's streams.
    let mut aggregator = metrics::Aggregator::new(None);
    let mut header = None;
    let mut measured_phase = None;
    let mut measured = Vec::new();
    records::read_lines(&execution.records_path, |line| {
        match &line {
            LogLine::Run(run) => header = Some(run.header.clone()),
            LogLine::PhaseStart(phase) if phase.record && measured_phase.is_none() => {
                measured_phase = Some(phase.index)
            }
            LogLine::Request(record) if Some(record.phase) == measured_phase => {
                measured.extend(fidelity::MeasuredStream::of_record(record, header.as_ref()))
            }
            _ => {}
        }
        aggregator.push(line);
    })?;
    let (log, aggregates) = aggregator.finish();
    let errors = fidelity::timing_errors(measured, &execution.sim_writes.unwrap_or_default());
    // The measured phase follows the warmup.
    let phase = aggregates
        .phases
        .iter()
        .find(|p| p.recorded)
        .ok_or_else(|| Error::run("the capacity trial ran no measured phase"))?;
    let open_loop = log.phases.iter().any(|p| p.record && p.open_loop);
    Ok(judge_trial(trial.phases.clone(), phase, open_loop, &errors))
}

/// What a trial measured and what it says.
#[derive(Debug, Clone, Serialize)]
pub struct TrialResult {
    /// The plan phases whose load this trial is.
    pub phases: Vec<String>,
    /// The load, as people read it.
    pub load: String,
    /// The request rate asked for (open loop).
    pub planned_per_s: Option<f64>,
    /// The request rate sent.
    pub sent_per_s: f64,
    /// Schedule lag p99 (open loop).
    pub schedule_lag_p99_ms: Option<f64>,
    /// TTFT error p99 against the simulator's write times.
    pub ttft_error_p99_ms: Option<f64>,
    /// How late tokens were read after their write, p99.
    pub read_delay_p99_ms: Option<f64>,
    /// ITL error p99 against the simulator's write times.
    pub itl_error_p99_ms: Option<f64>,
    /// The client's CPU use, as a share of its cores.
    pub client_utilization: Option<f64>,
    /// The cores the client could use.
    pub client_cores: Option<f64>,
    /// Requests that failed or were cancelled.
    pub failed: u64,
    /// Why the load is not generated faithfully; empty when it is.
    pub limits: Vec<String>,
}

/// A shard is sized to keep its client at most this busy: past it, timing suffers first.
pub const SHARD_UTILIZATION: f64 = 0.5;

impl TrialResult {
    /// Whether the load was generated faithfully.
    pub fn faithful(&self) -> bool {
        self.limits.is_empty()
    }

    /// How many clients of this machine's size the load needs (`run --shard K/N`), each kept at
    /// most [`SHARD_UTILIZATION`] busy: the CPU the trial used, scaled up where it sent less
    /// than asked. It counts the in-process simulator's CPU too, so it errs on the safe side;
    /// an unfaithful load that CPU does not explain still needs more than one.
    pub fn shards_needed(&self) -> u32 {
        let shortfall = match self.planned_per_s {
            Some(planned) if self.sent_per_s > 0.0 => (planned / self.sent_per_s).max(1.0),
            _ => 1.0,
        };
        let demand = self.client_utilization.unwrap_or(0.0) * shortfall;
        let by_cpu = (demand / SHARD_UTILIZATION).ceil().max(1.0) as u32;
        if self.faithful() {
            by_cpu
        } else {
            by_cpu.max(2)
        }
    }
}

/// Judges one trial from its phase's metrics and its timing errors.
pub fn judge_trial(
    phases: Vec<String>,
    metrics: &PhaseMetrics,
    open_loop: bool,
    errors: &TimingErrors,
) -> TrialResult {
    let mut limits = Vec::new();
    let lag = metrics.metrics[crate::dist!(ScheduleLag)]
        .p99
        .filter(|_| open_loop);
    if let Some(lag) = lag.filter(|&l| l > LAG_P99_LIMIT_MS) {
        limits.push(format!(
            "schedule lag p99 {lag:.2} ms > {LAG_P99_LIMIT_MS} ms"
        ));
    }
    let ttft = (errors.ttft.count > 0).then_some(errors.ttft.p99_ms);
    let read = (errors.read_delay.count > 0).then_some(errors.read_delay.p99_ms);
    if let Some(read) = read.filter(|&e| e > READ_DELAY_P99_LIMIT_MS) {
        limits.push(format!(
            "tokens read {read:.2} ms after their write (p99) > {READ_DELAY_P99_LIMIT_MS} ms"
        ));
    }
    let itl = (errors.itl.count > 0).then_some(errors.itl.p99_ms);
    if let Some(itl) = itl.filter(|&e| e > ITL_ERROR_P99_LIMIT_MS) {
        limits.push(format!(
            "ITL error p99 {itl:.2} ms > {ITL_ERROR_P99_LIMIT_MS} ms"
        ));
    }
    if let Some(planned) = metrics.rates.planned_per_s {
        if metrics.rates.sent_per_s < planned * MIN_RATE_SHARE {
            limits.push(format!(
                "sent {:.1} req/s of the {planned} asked",
                metrics.rates.sent_per_s
            ));
        }
    }
    if let Some(client) = metrics.client.filter(|c| c.seconds > 0) {
        if client.saturated_seconds as f64 / client.seconds as f64 >= SATURATED_SHARE_LIMIT {
            limits.push(format!(
                "client CPU saturated {} of {} s",
                client.saturated_seconds, client.seconds
            ));
        }
    }
    let failed = metrics.requests.failed + metrics.requests.cancelled;
    if failed > 0 {
        limits.push(format!("{failed} request(s) failed against the simulator"));
    }
    if metrics.requests.ok == 0 {
        limits.push("no request completed".into());
    }
    TrialResult {
        phases,
        load: metrics.load.clone(),
        planned_per_s: metrics.rates.planned_per_s,
        sent_per_s: metrics.rates.sent_per_s,
        schedule_lag_p99_ms: lag,
        ttft_error_p99_ms: ttft,
        read_delay_p99_ms: read,
        itl_error_p99_ms: itl,
        client_utilization: metrics.client.map(|c| c.utilization),
        client_cores: metrics.client.map(|c| c.cores),
        failed,
        limits,
    }
}

#[cfg(test)]
mod tests {
    use super::fidelity::ErrorSummary;
    use super::*;
    use crate::metrics::Summary;
    use crate::plan::{parse_plan, RateShape};

    const PLAN: &str = r#"
plan "p" { seed 9 }
target "http://127.0.0.1:9/v1" { model "m" }
workload { input { bucket 128 weight=3; bucket 512 weight=1 }; output 64 }
phase "warmup" { concurrency 4; duration "10s"; record #false }
phase "ramp" { rate from=5 to=50; duration "60s" }
phase "steady" { rate 50; duration "2m" }
phase "burst" { at-once 64 }
"#;

    fn server() -> TrialServer {
        TrialServer {
            ttft: Duration::from_millis(20),
            itl: Duration::from_millis(5),
        }
    }

    #[test]
    fn one_trial_per_distinct_peak_load_against_the_simulator() {
        let plan = parse_plan("p.kdl", PLAN.to_string()).unwrap();
        let trials = trials(&plan, Duration::from_secs(5), server());
        let names: Vec<_> = trials.iter().map(|t| t.phases.join("+")).collect();
        assert_eq!(names, ["warmup", "ramp+steady", "burst"]);
        let steady = &trials[1].plan;
        assert_eq!(steady.target.endpoint, Endpoint::Simulator);
        assert_eq!(steady.sim.ttft, Duration::from_millis(20));
        assert!(steady.sim.engine.is_none());
        assert_eq!(steady.workload.buckets, plan.workload.buckets);
        assert_eq!(steady.phases.len(), 2);
        assert!(!steady.phases[0].record);
        assert_eq!(steady.phases[0].load, steady.phases[1].load);
        assert_eq!(steady.phases[1].duration, Some(Duration::from_secs(5)));
        assert!(steady.phases[1].record, "a warmup's trial is recorded too");
        assert!(matches!(
            steady.phases[1].load,
            Load::Rate { rate: RateShape::Constant(r), .. } if r == 50.0
        ));
        assert_eq!(trials[2].plan.phases[1].duration, None);
        let closed = &trials[0].plan.phases[0];
        assert_eq!((closed.duration, closed.max_requests), (None, Some(8)));
        assert!(trials.iter().all(|t| t.plan.sla.is_empty()));
    }

    #[test]
    fn a_trial_is_judged_on_lag_errors_rate_cpu_and_failures() {
        let mut metrics = PhaseMetrics {
            load: "rate 50/s poisson".into(),
            ..PhaseMetrics::default()
        };
        metrics.requests.ok = 250;
        metrics.rates.planned_per_s = Some(50.0);
        metrics.rates.sent_per_s = 49.8;
        metrics.metrics[crate::dist!(ScheduleLag)] = Summary {
            p99: Some(0.4),
            ..Summary::default()
        };
        let mut errors = TimingErrors {
            // A large TTFT error alone (the co-located simulator queueing) is not judged.
            ttft: ErrorSummary {
                count: 250,
                p99_ms: 12.0,
                ..ErrorSummary::default()
            },
            read_delay: ErrorSummary {
                count: 16_000,
                p99_ms: 0.2,
                ..ErrorSummary::default()
            },
            ..TimingErrors::default()
        };
        let good = judge_trial(vec!["steady".into()], &metrics, true, &errors);
        assert!(good.faithful(), "{:?}", good.limits);

        metrics.metrics[crate::dist!(ScheduleLag)].p99 = Some(30.0);
        metrics.rates.sent_per_s = 40.0;
        metrics.requests.failed = 2;
        errors.itl = ErrorSummary {
            count: 100,
            p99_ms: 0.9,
            ..ErrorSummary::default()
        };
        errors.read_delay.p99_ms = 1.5;
        let bad = judge_trial(vec!["steady".into()], &metrics, true, &errors);
        assert_eq!(bad.limits.len(), 5, "{:?}", bad.limits);
        assert!(bad.limits[1].starts_with("tokens read 1.50 ms after their write"));
        assert!(bad.limits[0].starts_with("schedule lag p99 30.00 ms"));
        // A closed loop has no schedule to lag behind.
        let closed = judge_trial(vec!["c".into()], &metrics, false, &errors);
        assert!(closed.schedule_lag_p99_ms.is_none());
    }
}
