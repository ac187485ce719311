//! `llmload run PLAN`: run a plan, write its report, exit with its verdict.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::oneline::{self, OneLineArgs};
use super::output::{self, GateArgs};
use super::{parse_duration_arg, progress, signals};
use crate::error::{Error, Result};
use crate::executor::Observer;
use crate::plan::Endpoint;
use crate::planner;
use crate::session::{self, RunOptions, Status};

#[derive(clap::Args, Debug)]
pub(super) struct RunArgs {
    /// The plan file (KDL); without one, the flags under "Without a plan file" make the plan.
    plan: Option<PathBuf>,
    /// Send to this base URL instead of the plan's target (with or without /v1), or "sim" for
    /// the embedded simulator.
    #[arg(long, value_name = "URL")]
    target: Option<String>,
    /// Ask for this model instead of the plan's target's (phases that name their own keep it).
    #[arg(long, value_name = "NAME")]
    model: Option<String>,
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
    /// Send only shard K of N of the schedule (K from 1); merge the shards' directories with
    /// `llmload merge`, which judges them. Exit 0 when the shard ran, 3 when it could not.
    #[arg(long, value_name = "K/N", value_parser = parse_shard)]
    shard: Option<planner::Shard>,
    /// Start the schedule at this wall-clock time (RFC 3339, e.g. 2026-12-01T10:00:00Z, or
    /// Unix seconds as @1764583200): shards on several machines start together.
    #[arg(long, value_name = "TIME", value_parser = parse_start_at)]
    start_at: Option<std::time::SystemTime>,
    /// A label kept with the run and shown in every report (repeatable): commit=abc123,
    /// gpu=H100, engine-flags="--max-num-seqs 256".
    #[arg(long = "label", value_name = "KEY=VALUE", value_parser = parse_label)]
    labels: Vec<(String, String)>,
    /// Let the plan's `server` block start its command on this machine (also
    /// LLMLOAD_ALLOW_SERVER=1). Without it such a plan is refused and its whole command shown:
    /// a plan from a pull request would otherwise run its author's command.
    #[arg(long)]
    allow_server: bool,
    /// Serve the run's live metrics for Prometheus at http://ADDR/metrics while it goes
    /// (requests by phase and outcome, in flight, TTFT/ITL/E2E and schedule lag histograms;
    /// OpenMetrics text), e.g. 127.0.0.1:9464.
    #[arg(long, value_name = "ADDR")]
    metrics_listen: Option<std::net::SocketAddr>,
    /// With --metrics-listen: keep serving this long after the run, so that a last scrape
    /// sees its final counts.
    #[arg(long, value_name = "DURATION", default_value = "0s", value_parser = parse_duration_arg)]
    metrics_linger: std::time::Duration,
    /// Push the same metrics to a Prometheus remote-write receiver while the run goes, and
    /// once more at its end (e.g. http://127.0.0.1:9090/api/v1/write).
    #[arg(long, value_name = "URL", value_parser = parse_push_url)]
    remote_write: Option<reqwest::Url>,
    /// How often --remote-write pushes.
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = parse_duration_arg)]
    remote_write_interval: std::time::Duration,
    /// Export every request as an OpenTelemetry span over OTLP/HTTP (protobuf) to this
    /// collector (e.g. http://127.0.0.1:4318; `/v1/traces` is added to a bare address), with
    /// the trace ids the requests' `traceparent` carried, so an engine's own spans join them.
    /// Headers a collector asks for come from OTEL_EXPORTER_OTLP_HEADERS.
    #[arg(long, value_name = "URL", value_parser = parse_push_url)]
    otlp: Option<reqwest::Url>,
    #[command(flatten)]
    values: super::PlanValues,
    #[command(flatten)]
    one_line: OneLineArgs,
}

/// The run's exporters, when asked: its metrics served (`--metrics-listen`, until it is
/// finished, `--metrics-linger` after a concluded run) and pushed (`--remote-write`), its spans
/// exported (`--otlp`); each pusher's last push made and said when it is finished.
struct Exporter {
    registry: Option<Arc<crate::exporter::Registry>>,
    server: Option<crate::exporter::MetricsServer>,
    writer: Option<crate::exporter::RemoteWriter>,
    spans: Option<crate::exporter::SpanExporter>,
    linger: std::time::Duration,
}

impl Exporter {
    fn start(args: &RunArgs) -> Result<Exporter> {
        let wanted = args.metrics_listen.is_some() || args.remote_write.is_some();
        let registry = wanted.then(|| Arc::new(crate::exporter::Registry::new()));
        let server = match (args.metrics_listen, &registry) {
            (Some(addr), Some(registry)) => Some(
                crate::exporter::MetricsServer::start(addr, registry.clone())
                    .map_err(|e| Error::usage(format!("--metrics-listen {addr}: {e}")))?,
            ),
            _ => None,
        };
        let writer = match (&args.remote_write, &registry) {
            (Some(url), Some(registry)) => Some(
                crate::exporter::RemoteWriter::start(
                    url.clone(),
                    registry.clone(),
                    args.remote_write_interval
                        .max(std::time::Duration::from_millis(100)),
                )
                .map_err(|e| Error::run(format!("--remote-write: {e}")))?,
            ),
            _ => None,
        };
        let spans = match &args.otlp {
            Some(url) => Some(
                crate::exporter::SpanExporter::start(url.clone())
                    .map_err(|e| Error::usage(format!("--otlp: {e}")))?,
            ),
            None => None,
        };
        Ok(Exporter {
            registry,
            server,
            writer,
            spans,
            linger: args.metrics_linger,
        })
    }

    /// The run's observer: `terminal`, and the exporters' beside it.
    fn observing(&self, terminal: Arc<dyn Observer>) -> Arc<dyn Observer> {
        if let Some(server) = &self.server {
            let notice = format!("live metrics at http://{}/metrics", server.addr());
            terminal.on_event(crate::executor::Event::Note(&notice));
        }
        let mut observers = vec![terminal];
        if let Some(registry) = &self.registry {
            observers.push(registry.clone());
        }
        if let Some(spans) = &self.spans {
            observers.push(spans.observer());
        }
        match observers.len() {
            1 => observers.remove(0),
            _ => Arc::new(crate::executor::Fanout(observers)),
        }
    }
}

impl Exporter {
    /// After the run: the last pushes made and said, and, when the run `concluded` (its report
    /// written), the metrics served `--metrics-linger` longer for a last scrape.
    fn finish(mut self, concluded: bool) {
        self.push_last();
        if concluded && self.server.is_some() && !self.linger.is_zero() {
            std::thread::sleep(self.linger);
        }
    }

    /// The pushers' last pushes, and what went and was dropped, said whatever --quiet says:
    /// samples and spans dropped are the exporters' only failure.
    fn push_last(&mut self) {
        if let Some(writer) = self.writer.take() {
            eprintln!("{}", writer.finish());
        }
        if let Some(spans) = self.spans.take() {
            eprintln!("{}", spans.finish());
        }
    }
}

impl Drop for Exporter {
    /// A run that ended before `finish` (a usage error, a panic's unwinding) still pushes and
    /// says what it could; it does not linger.
    fn drop(&mut self) {
        self.push_last();
    }
}

/// `--remote-write URL`, `--otlp URL`: an http:// or https:// URL.
fn parse_push_url(text: &str) -> std::result::Result<reqwest::Url, String> {
    let url = reqwest::Url::parse(text).map_err(|e| format!("not a URL: {e}"))?;
    match url.scheme() {
        "http" | "https" => Ok(url),
        other => Err(format!(
            "a receiver or collector is http:// or https://, not {other}://"
        )),
    }
}

/// The setting a CI job sets deliberately, for plans it has reviewed: `LLMLOAD_ALLOW_SERVER`
/// of `1`, `true` or `yes`.
pub(super) fn server_allowed_by_env() -> bool {
    std::env::var("LLMLOAD_ALLOW_SERVER")
        .is_ok_and(|v| matches!(v.trim().to_ascii_lowercase().as_str(), "1" | "true" | "yes"))
}

/// `--label KEY=VALUE`: a key of letters, digits, `-`, `_` and `.`; any value.
fn parse_label(text: &str) -> std::result::Result<(String, String), String> {
    let (key, value) = text
        .split_once('=')
        .ok_or_else(|| format!("{text}: write a label as KEY=VALUE (commit=abc123)"))?;
    let key = key.trim();
    if key.is_empty()
        || key.len() > 64
        || !key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    {
        return Err(format!(
            "{key:?}: a label's key is 1 to 64 letters, digits, '-', '_' or '.'"
        ));
    }
    if value.len() > 1024 {
        return Err(format!("label {key}: its value is over 1024 bytes"));
    }
    Ok((key.to_string(), value.to_string()))
}

fn parse_shard(text: &str) -> std::result::Result<planner::Shard, String> {
    planner::Shard::parse(text).map_err(|e| e.to_string())
}

/// How far in the past `--start-at` may be: shards started by hand, or a Job's pods scheduled a
/// moment late, still start together (each says how late it was); more is a mistake.
const START_AT_PAST_LIMIT: Duration = Duration::from_secs(10);

/// `--start-at`: an RFC 3339 time, or `@` and Unix seconds; not more than
/// [`START_AT_PAST_LIMIT`] in the past.
pub(super) fn parse_start_at(text: &str) -> std::result::Result<std::time::SystemTime, String> {
    let at = parse_wall_clock(text)?;
    match std::time::SystemTime::now().duration_since(at) {
        Ok(past) if past > START_AT_PAST_LIMIT => Err(format!(
            "{text} is {:.0} s in the past: give every shard the same time a little ahead, e.g. \
             @$(( $(date +%s) + 30 ))",
            past.as_secs_f64()
        )),
        _ => Ok(at),
    }
}

/// An RFC 3339 time, or `@` and Unix seconds.
fn parse_wall_clock(text: &str) -> std::result::Result<std::time::SystemTime, String> {
    let bad = || {
        format!(
            "{text}: write a wall-clock time as RFC 3339 (2026-12-01T10:00:00Z) or Unix seconds (@1764583200)"
        )
    };
    if let Some(seconds) = text.strip_prefix('@') {
        let seconds: f64 = seconds.parse().map_err(|_| bad())?;
        if !(0.0..1e11).contains(&seconds) {
            return Err(bad());
        }
        return Ok(std::time::UNIX_EPOCH + Duration::from_secs_f64(seconds));
    }
    let at = chrono::DateTime::parse_from_rfc3339(text).map_err(|_| bad())?;
    let nanos = at
        .timestamp_nanos_opt()
        .filter(|n| *n >= 0)
        .ok_or_else(bad)?;
    Ok(std::time::UNIX_EPOCH + Duration::from_nanos(nanos as u64))
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

/// The plan a command runs or shows: its file with `--model` (and the values set) applied, or
/// the one written from a one-line run's flags. Also what `--target` then still overrides
/// (nothing for a one-line plan, whose text holds the target).
pub(super) fn plan_of(
    file: Option<&std::path::Path>,
    target: Option<&str>,
    model: Option<&str>,
    seed: Option<u64>,
    values: &super::PlanValues,
    one_line: &OneLineArgs,
) -> Result<(crate::plan::Plan, Option<Endpoint>)> {
    if let Some(model) = model.filter(|m| m.trim().is_empty()) {
        return Err(Error::usage(format!(
            "--model {model:?}: give the model's name"
        )));
    }
    let Some(file) = file else {
        if let Some(url) = target {
            parse_target(url)?;
        }
        let text = one_line.plan_text(target, model, seed)?;
        return Ok((values.parse(oneline::FILE_NAME, &text)?, None));
    };
    one_line.refuse_beside(file)?;
    let mut plan = values.load(file)?;
    if let Some(model) = model {
        plan.target.model = model.to_string();
    }
    Ok((plan, target.map(parse_target).transpose()?))
}

pub(super) fn run(args: RunArgs) -> Result<u8> {
    let (plan, target) = plan_of(
        args.plan.as_deref(),
        args.target.as_deref(),
        args.model.as_deref(),
        args.seed,
        &args.values,
        &args.one_line,
    )?;
    let templates = output::load_templates(&args.gate)?;
    let out = args.out.clone().unwrap_or_else(|| {
        PathBuf::from("reports").join(format!(
            "{}-{}",
            path_safe(&plan.name),
            chrono::Utc::now().format("%Y%m%dT%H%M%SZ")
        ))
    });
    output::check_paths(&args.gate, Some(&out))?;
    if let Some(baseline) = &args.gate.baseline {
        session::check_baseline(baseline, &plan, args.seed)?;
    }
    let mut options = RunOptions::new(&out);
    options.seed = args.seed;
    options.target = target;
    options.grace = args.grace;
    options.threads = args.threads.map(usize::from);
    options.gate = args.gate.gate();
    options.shard = args.shard;
    options.allow_server = args.allow_server || server_allowed_by_env();
    // Refused before the run starts anything (its progress, the output directory).
    session::permitted(&plan, &options)?;
    let live = progress::Live::start(!args.quiet);
    let exporter = Exporter::start(&args)?;
    options.observer = exporter.observing(live.observer());
    // The progress shows how the objectives stand; --quiet shows nothing and pays nothing.
    options.objectives_live = !args.quiet;
    signals::forward_to(options.stop.clone());
    options.shard = args.shard;
    options.start_at = args.start_at;
    options.labels = args.labels.iter().cloned().collect();
    let said = carry_out(&args, &plan, &options, live, &out, &templates);
    exporter.finish(said.is_ok());
    said
}

/// Runs the plan as `options` say (one shard, a server sweep, or the run) and says how it went.
fn carry_out(
    args: &RunArgs,
    plan: &crate::plan::Plan,
    options: &RunOptions,
    live: progress::Live,
    out: &std::path::Path,
    templates: &[crate::report::UserTemplate],
) -> Result<u8> {
    if let Some(shard) = args.shard {
        let outcome = session::run_shard(plan, options);
        live.finish();
        return shard_said(shard, out, &outcome?);
    }
    // (With --target the run goes elsewhere: the plan's server, and its sweep, are not
    // started; the session's note says so.)
    if plan.server_sweep.is_some() && options.target.is_none() {
        let sweep = session::run_server_sweep(plan, options);
        live.finish();
        return output::conclude_server_sweep(&sweep?, &plan.name, &args.gate, templates);
    }
    let outcome = session::run(plan, options);
    live.finish();
    let code = output::conclude(&outcome?, &args.gate, templates)?;
    if args.plan.is_none() {
        let kept = out.join("plan.kdl");
        super::say!(
            "plan: {} (`llmload run {}` repeats this run; copy it into your repository to keep it)",
            kept.display(),
            kept.display()
        )?;
    }
    Ok(code)
}

/// A shard's run is not judged: it says what it sent and how to merge it.
fn shard_said(
    shard: planner::Shard,
    out: &std::path::Path,
    outcome: &session::ShardOutcome,
) -> Result<u8> {
    let late = outcome
        .start_late_ms
        .map(|ms| format!(", started {ms:.1} ms after --start-at"))
        .unwrap_or_default();
    super::say!(
        "shard {shard}: {} requests sent, {} ok, {} failed{late}; records in {}",
        outcome.sent,
        outcome.ok,
        outcome.failed,
        out.display()
    )?;
    match &outcome.status {
        Status::NotCarriedOut(why) => {
            super::say!("shard {shard} NOT CARRIED OUT: {why}")?;
        }
        Status::Failed(_) => {
            super::say!("shard {shard} ABORTED: its plan's abort condition held")?;
        }
        // A shard judges no assertion: only the merged run decides.
        Status::NotDecided(_) => {}
        Status::Passed => {
            super::say!(
                "shard {shard} is judged with the others: llmload merge <every shard's directory> --out DIR"
            )?;
        }
    }
    Ok(outcome.status.exit_code())
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
