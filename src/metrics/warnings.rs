//! When a result is not trustworthy, say so.
//!
//! A warning means a number in the report may not mean what it seems (the client lagged, the
//! server ignored the asked lengths, token counts are off); a note is context a reader should
//! have (the prompt gained a chat template, counts came from the tokenizer). `--fail-on-warning`
//! style gates act on warnings only.

use std::collections::BTreeMap;

use serde::Serialize;

use super::{Aggregates, Metric, PhaseMetrics};
use crate::records::RunLog;

/// Schedule lag p99 above this means the client, not the server, limited the run.
pub const LAG_P99_LIMIT_MS: f64 = 10.0;
/// A phase in which the client had every core busy for at least this share of its seconds was
/// limited by the client.
pub const SATURATED_SECONDS_LIMIT: f64 = 0.10;
/// Failed requests above this share of the completed ones make latency figures partial.
pub const PARTIAL_LATENCY_SHARE: f64 = 0.05;
/// Token counts further off the plan than this are not trusted.
pub const TOKEN_MISMATCH_LIMIT: f64 = 0.02;
/// The share of a closed loop's user time spent waiting for request bodies beyond which the
/// client, not the server, set the load (`body-builder`).
pub const BODY_WAIT_SHARE_LIMIT: f64 = 0.02;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
/// How much a warning matters.
pub enum Severity {
    /// A number may not mean what it seems: `--fail-on-warning` fails the run.
    Warning,
    /// Context a reader should have.
    Note,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
/// Something a reader of the report must know.
pub struct Warning {
    /// Warning or note.
    pub severity: Severity,
    /// A stable identifier, e.g. `schedule-lag`.
    pub code: &'static str,
    /// What it says, with the numbers.
    pub message: String,
}

/// The phase's schedule lag p99 (ms), when it is beyond [`LAG_P99_LIMIT_MS`]: its requests
/// The warnings that say the client, not the server, limited the run: its numbers are about
/// the runner (a history sets such a run apart from its bands).
pub const CLIENT_LIMITS: [&str; 7] = [
    "schedule-lag",
    "client-cpu",
    "client-limit",
    "client-stall",
    "body-builder",
    "machine-cpu",
    "recorder-backlog",
];

/// A stall at least this long is said even when few requests waited on it.
const STALL_NOTED_MS: f64 = 20.0;
/// The share of a phase's requests in flight during stalls beyond which they are a warning
/// (and the verdict does not blame the server for what those requests broke).
pub const STALLED_SHARE: f64 = 0.01;

/// went out later than planned.
fn late_schedule(phase: &PhaseMetrics) -> Option<f64> {
    phase.metrics[crate::dist!(ScheduleLag)]
        .p99
        .filter(|&p99| p99 > LAG_P99_LIMIT_MS)
}

/// The client's load in the phase and the share of its seconds it had every core busy, when
/// that share reaches [`SATURATED_SECONDS_LIMIT`].
fn saturated_client(phase: &PhaseMetrics) -> Option<(crate::records::ClientLoad, f64)> {
    let client = phase.client.filter(|c| c.seconds > 0)?;
    let share = client.saturated_seconds as f64 / client.seconds as f64;
    (share >= SATURATED_SECONDS_LIMIT).then_some((client, share))
}

/// The machine's load in the phase, when its CPUs were all busy for as large a share of its
/// seconds as [`saturated_client`] asks of the client's.
fn saturated_machine(phase: &PhaseMetrics) -> Option<crate::records::MachineLoad> {
    let machine = phase.client?.machine.filter(|m| m.seconds > 0)?;
    let share = machine.saturated_seconds as f64 / machine.seconds as f64;
    (share >= SATURATED_SECONDS_LIMIT).then_some(machine)
}

/// Why the client, not the server, limited the phase, if it did: its requests went out late
/// (schedule lag p99 beyond the limit), its users waited for bodies, or its CPU was saturated.
/// The same limits as the `schedule-lag`, `body-builder` and `client-cpu` warnings: a search does not take such a probe as evidence
/// about the server.
///
/// A straggler is no evidence: a short window's p99 is its latest request (one that waited for
/// a connection to open), so the lag judged is the p99 or, below 200 requests, the third
/// latest.
pub fn client_limited(phase: &PhaseMetrics) -> Option<String> {
    let lag = phase
        .distributions
        .get(Metric::ScheduleLag)
        .filter(|d| d.count() > 0);
    if let Some(lag) = lag {
        let n = lag.count() as f64;
        let percentile = (100.0 * (n - 2.0) / n).clamp(0.0, 99.0);
        if let Some(late) = lag
            .stat(crate::plan::Stat::Percentile(percentile))
            .filter(|&ms| ms > LAG_P99_LIMIT_MS)
        {
            let which = if percentile >= 99.0 {
                "p99".to_string()
            } else {
                format!("third latest of {}", lag.count())
            };
            return Some(format!(
                "its requests went out late (schedule lag {which} {late:.1} ms, above {LAG_P99_LIMIT_MS} ms)"
            ));
        }
    }
    if let Some(wait) = phase
        .body_wait
        .filter(|w| w.share() >= BODY_WAIT_SHARE_LIMIT)
    {
        return Some(format!(
            "its users waited for request bodies ({:.1}% of their time)",
            wait.share() * 100.0
        ));
    }
    saturated_client(phase).map(|(client, share)| {
        format!(
            "the client's CPU was saturated ({:.0}% of its seconds at ≥95% of its {} core(s))",
            share * 100.0,
            client.cores
        )
    })
}

fn warning(code: &'static str, message: String) -> Warning {
    Warning {
        severity: Severity::Warning,
        code,
        message,
    }
}

fn note(code: &'static str, message: String) -> Warning {
    Warning {
        severity: Severity::Note,
        code,
        message,
    }
}

/// What the answers' `model` fields say against the model each recorded phase asked (its own,
/// or the run's `run_model`), phases asking the same model taken together.
fn answered_models(run_model: &str, phases: &[PhaseMetrics]) -> Vec<Warning> {
    let mut by_asked: BTreeMap<&str, BTreeMap<String, u64>> = BTreeMap::new();
    for phase in phases.iter().filter(|p| p.recorded) {
        let asked = by_asked
            .entry(phase.model.as_deref().unwrap_or(run_model))
            .or_default();
        for (model, n) in &phase.models {
            *asked.entry(model.clone()).or_default() += n;
        }
    }
    by_asked
        .iter()
        .filter_map(|(asked, models)| answered_model(asked, models))
        .collect()
}

/// What the answers' `model` fields say against the model asked: another model (a gateway's
/// routing, an alias resolved to a dated snapshot) is a note; several models are a warning,
/// since the numbers then mix them.
fn answered_model(asked: &str, models: &BTreeMap<String, u64>) -> Option<Warning> {
    let listed = || {
        models
            .iter()
            .map(|(model, n)| format!("`{model}` ({n})"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    match models.len() {
        0 => None,
        1 if models.contains_key(asked) => None,
        1 => Some(note(
            "model-answered",
            format!(
                "the plan asks for model `{asked}`; the answers named {}: the server answered with \
                 another name for it, or another model (an alias resolved, a gateway's routing)",
                listed()
            ),
        )),
        _ => Some(warning(
            "several-models",
            format!(
                "the answers named {} models ({}) for the plan's `{asked}`: the run's numbers mix them \
                 (a gateway routing the model's name to several)",
                models.len(),
                listed()
            ),
        )),
    }
}

/// What a merged run's shards say of its time line: a shard that started late (after the
/// agreed `--start-at`, by its own clock), shards that started apart without one, a shard
/// that did not finish.
fn shard_warnings(shards: &[crate::records::MergedShard]) -> Vec<Warning> {
    let mut out = vec![note(
        "merged",
        format!(
            "merged from {} shards (on {}); their records are set on one time line by each shard's \
             wall clock at its start: the machines' clocks must agree (NTP) to within the schedule lag \
             that matters",
            shards.len(),
            {
                let mut hosts: Vec<&str> = shards.iter().map(|s| s.client_host.as_str()).collect();
                hosts.sort();
                hosts.dedup();
                hosts.join(", ")
            }
        ),
    )];
    let late: Vec<String> = shards
        .iter()
        .filter_map(|s| {
            s.start_late_ms
                .filter(|&ms| ms > LAG_P99_LIMIT_MS)
                .map(|ms| format!("shard {} by {ms:.1} ms", s.index))
        })
        .collect();
    if !late.is_empty() {
        out.push(warning(
            "shard-start",
            format!(
                "shards started after the agreed --start-at ({}): their first requests went late, and the \
                 merged arrivals are not the plan's there",
                late.join(", ")
            ),
        ));
    }
    let spread = shards.iter().map(|s| s.offset_ms).fold(0.0, f64::max);
    if shards.iter().all(|s| s.start_late_ms.is_none()) && spread > LAG_P99_LIMIT_MS {
        out.push(warning(
            "shard-start",
            format!(
                "the shards started up to {spread:.1} ms apart (no --start-at): their loads were not \
                 the plan's together; start them with --start-at"
            ),
        ));
    }
    let interrupted: Vec<String> = shards
        .iter()
        .filter(|s| s.interrupted)
        .map(|s| s.index.to_string())
        .collect();
    if !interrupted.is_empty() {
        out.push(warning(
            "shard-interrupted",
            format!(
                "shard(s) {} did not finish their part: the merged run is partial",
                interrupted.join(", ")
            ),
        ));
    }
    out
}

/// Every warning and note a run's log and aggregates call for.
pub fn assess(log: &RunLog, aggregates: &Aggregates) -> Vec<Warning> {
    let mut out = Vec::new();
    let overall = &aggregates.overall;
    let header = log.header.as_ref();
    let exact = header.is_some_and(|h| h.exact_output);
    // An API that answers whole (embeddings, rerank) has no tokens to time: not a lack.
    let stream = header.is_none_or(|h| {
        h.stream
            || crate::api::Api::from_name(&h.api)
                .is_some_and(|api| !api.dialect().capabilities().streaming)
    });

    if let Some(header) = header.filter(|h| !h.merged.is_empty()) {
        out.extend(shard_warnings(&header.merged));
    }
    if let Some(chosen) = header.and_then(|h| h.tokenizer_note.clone()) {
        out.push(note("tokenizer-auto", chosen));
    }
    for said in header
        .map(|h| h.target_notes.as_slice())
        .unwrap_or_default()
    {
        out.push(note("model-not-listed", said.clone()));
    }
    if let Some(header) = header {
        out.extend(answered_models(&header.model, &aggregates.phases));
    }
    // A reset the plan asked for and the server did not do: the phase's cache was not cold.
    let not_reset: Vec<&PhaseMetrics> = aggregates
        .phases
        .iter()
        .filter(|p| p.cache_reset.as_ref().is_some_and(|r| !r.done))
        .collect();
    if let Some(first) = not_reset.first() {
        let why = first
            .cache_reset
            .as_ref()
            .map(|r| r.detail.clone())
            .unwrap_or_default();
        out.push(note(
            "cache-reset",
            format!(
                "the server's cache was not reset before {} of the {} phase(s) that asked for it (first \"{}\"): {why}; those phases may have met a warm cache",
                not_reset.len(),
                aggregates.phases.iter().filter(|p| p.cache_reset.is_some()).count(),
                first.name
            ),
        ));
    }
    if aggregates.interrupted {
        out.push(warning(
            "interrupted",
            "the run was interrupted before its plan finished: phases that did not run, or ran short, are missing"
                .into(),
        ));
    }
    // Reasoning tokens count against max_tokens on most servers: an exact output length then
    // holds the thinking and the answer together.
    let reasoning = &overall.metrics[crate::dist!(ReasoningTokens)];
    if let (true, Some(reasoning_mean), Some(planned)) = (
        exact && reasoning.count > 0,
        reasoning.mean,
        overall.tokens.output_planned_mean,
    ) {
        out.push(note(
            "reasoning-in-output",
            format!(
                "exact output lengths were asked of a model that reasons: of {planned:.1} output tokens asked \
                 (mean per request), {reasoning_mean:.1} were reasoning and {:.1} answer ({} request(s) reasoned); \
                 the thinking leaves the answer shorter than the length asked",
                overall.metrics[crate::dist!(AnswerTokens)].mean.unwrap_or(0.0),
                reasoning.count
            ),
        ));
    }
    for phase in aggregates.phases.iter().filter(|p| p.recorded) {
        // A sweep's step or a search's probe says its own early end in the steps' table.
        if let Some(why) = phase.ended_early.as_ref().filter(|_| phase.step.is_none()) {
            out.push(note(
                "ended-early",
                format!(
                    "phase \"{}\" ended before its duration: {why}; its requests in flight then \
                     were cancelled, and are in no metric",
                    phase.name
                ),
            ));
        }
        // On loopback a connection opens in a fraction of a millisecond: only slower ones can
        // show in TTFT.
        let connect = &phase.metrics[crate::dist!(Connect)];
        if phase.requests.new_connections > 0 && connect.max.unwrap_or(0.0) >= 1.0 {
            let warmed = phase.connections.map_or(0, |c| c.warmed);
            out.push(note(
                "connections-opened",
                format!(
                    "phase \"{}\": {} request(s) opened a new connection{} (connect p50 {:.2} ms, p99 {:.2} ms, \
                     max {:.2} ms); their TTFT includes it",
                    phase.name,
                    phase.requests.new_connections,
                    if warmed > 0 {
                        format!(", beyond the {warmed} opened before it")
                    } else {
                        String::new()
                    },
                    connect.p50.unwrap_or(0.0),
                    connect.p99.unwrap_or(0.0),
                    connect.max.unwrap_or(0.0)
                ),
            ));
        } else if let Some(c) = phase.connections.filter(|c| {
            // Logs written before connect times were per request.
            phase.requests.new_connections == 0
                && c.opened > 0
                && c.connect_ms_max.unwrap_or(0.0) >= 1.0
        }) {
            out.push(note(
                "connections-opened",
                format!(
                    "phase \"{}\": {} connection(s) opened while it ran (connect p50 {:.2} ms, max {:.2} ms); \
                     a request that waited for one counts that in its TTFT",
                    phase.name,
                    c.opened,
                    c.connect_ms_p50.unwrap_or(0.0),
                    c.connect_ms_max.unwrap_or(0.0)
                ),
            ));
        }
        if let Some(c) = phase.connections.filter(|c| c.stray > 0) {
            out.push(warning(
                "server-protocol",
                format!(
                    "phase \"{}\": the server sent {} response(s) no request asked for (bytes on an idle \
                     connection, after a response's end, or a 408 on a connection that had been \
                     idle); each such connection was dropped and a 408's request sent again, but a \
                     late response that arrived just as a request went out may have been taken for \
                     its answer: check the server (or its proxy) before trusting this phase",
                    phase.name, c.stray
                ),
            ));
        }
        if let Some(wait) = phase
            .body_wait
            .filter(|w| w.share() >= BODY_WAIT_SHARE_LIMIT)
        {
            out.push(warning(
                "body-builder",
                format!(
                    "phase \"{}\": its users waited {:.1} s for request bodies ({:.1}% of their time): the client \
                     made bodies (images, audio) more slowly than its users sent them, so it, not the server, \
                     held the load down; use smaller or fewer media, or fewer users",
                    phase.name,
                    wait.waited_s,
                    wait.share() * 100.0
                ),
            ));
        }
        if let Some(p99) = late_schedule(phase) {
            out.push(warning(
                "schedule-lag",
                format!(
                    "phase \"{}\": schedule lag p99 is {p99:.1} ms (above {LAG_P99_LIMIT_MS} ms): the client, \
                     not the server, limited the run; requests went out later than planned",
                    phase.name
                ),
            ));
        }
    }
    for phase in aggregates.phases.iter().filter(|p| p.recorded) {
        // A scheduler's few-millisecond hiccups are every busy machine's: said when they matter.
        let matters = |s: &crate::metrics::stalls::ClientStalls| {
            s.count > 0 && (s.worst_ms >= STALL_NOTED_MS || s.share_during() >= STALLED_SHARE)
        };
        if let Some(stalls) = phase.client_stalls.filter(matters) {
            let effect = if stalls.requests_during > 0 {
                format!(
                    "{} of its {} requests were in flight then, and their latencies include the stall: \
                     an assertion they break is not decided",
                    stalls.requests_during, stalls.requests
                )
            } else {
                "no request was in flight then".to_string()
            };
            let message = format!(
                "phase \"{}\": the client process stalled {} time(s) for {} ms or more (its hiccup meter \
                 woke late), the worst {:.1} ms at {:.1} s, {:.0} ms in all; {effect}",
                phase.name,
                stalls.count,
                crate::records::STALL_RECORDED.as_millis(),
                stalls.worst_ms,
                stalls.worst_at_s,
                stalls.total_ms,
            );
            // A warning (which `--fail-on-warning` fails) when the stalls are long and touched a
            // share of the requests; a short stall over a few requests of a short run is a note.
            let warn = stalls.share_during() >= STALLED_SHARE && stalls.worst_ms >= STALL_NOTED_MS;
            out.push(if warn {
                warning("client-stall", message)
            } else {
                note("client-stall", message)
            });
        }
        if let Some((client, _)) = saturated_client(phase) {
            out.push(warning(
                "client-cpu",
                format!(
                    "phase \"{}\": the client's CPU was saturated ({} of {} s at ≥95% of its {} core(s), {:.0}% \
                     on average): the client, not the server, may have limited the run and added latency; give \
                     it more cores (--threads), run it on another machine, or lower the load",
                    phase.name,
                    client.saturated_seconds,
                    client.seconds,
                    client.cores,
                    client.utilization * 100.0
                ),
            ));
        }
    }
    // A server llmload started shares this machine: when the machine, not the client, was
    // saturated, the client waited for cores without being busy, and no `client-cpu` says so.
    let local_server = header.is_some_and(|h| h.server.is_some());
    for phase in aggregates
        .phases
        .iter()
        .filter(|p| p.recorded && local_server)
    {
        let Some(machine) = saturated_machine(phase).filter(|_| saturated_client(phase).is_none())
        else {
            continue;
        };
        out.push(warning(
            "machine-cpu",
            format!(
                "phase \"{}\": this machine's {} CPU(s) were saturated ({} of {} s at ≥95%, {:.0}% on \
                 average) with the server llmload started running beside the client: the client waited \
                 for cores it did not get, and its send times and latencies include that wait (it used \
                 {:.0}% of its own); give the server fewer threads than the machine has cores, or run the \
                 client on another machine",
                phase.name,
                machine.cores,
                machine.saturated_seconds,
                machine.seconds,
                machine.utilization * 100.0,
                phase.client.map_or(0.0, |c| c.utilization * 100.0)
            ),
        ));
    }
    let by_url: u64 = aggregates.by_media.iter().map(|m| m.images_by_url).sum();
    let fetched: u64 = aggregates.by_media.iter().map(|m| m.images_fetched).sum();
    if fetched < by_url {
        out.push(warning(
            "images-unfetched",
            format!(
                "the server fetched {fetched} of the {by_url} images sent to it as URLs (image-urls): its answers \
                 to the others did not see their images, so their TTFT and media tokens are not a vision \
                 model's; check that the server fetches image URLs and can reach this machine's loopback \
                 (a server in a container needs the host's network)"
            ),
        ));
    }
    let requests = &overall.requests;
    if requests.client_failed > 0 {
        out.push(warning(
            "client-limit",
            format!(
                "{} request(s) failed in the client itself, not in the server ({}): they are in no rate or \
                 latency, and the load the plan asked for was not delivered",
                requests.client_failed,
                aggregates.first_client_error.as_deref().unwrap_or("no detail")
            ),
        ));
    }
    let completed = requests.completed();
    let unsuccessful = requests.failed + requests.throttled;
    if completed > 0 && unsuccessful as f64 / completed as f64 > PARTIAL_LATENCY_SHARE {
        out.push(warning(
            "partial-latency",
            format!(
                "{unsuccessful} of {completed} completed request(s) failed, timed out or were throttled: latency \
                 figures (E2E, ITL, TPOT) describe only the {} that succeeded; TTFT also counts the {} \
                 unsuccessful request(s) that had received their first token",
                requests.ok, requests.failed_after_first_token
            ),
        ));
    }
    if requests.paced > 0 {
        out.push(note(
            "paced",
            format!(
                "{} of {} request(s) were held by the plan's `limits` before their send ({:.2} s on \
                 average, {:.2} s at most): the client slowed to the key's budgets ({}), and their \
                 latencies count from their send; their schedule lag counts from their slot",
                requests.paced,
                requests.sent,
                requests.paced_s / requests.paced as f64,
                requests.paced_max_s,
                match (overall.rates.paced_per_s, overall.rates.planned_per_s) {
                    (Some(paced), Some(planned)) => format!("{paced:.2} requests/s of the {planned:.2} planned"),
                    (Some(paced), None) => format!("{paced:.2} requests/s"),
                    (None, _) => "one request".to_string(),
                }
            ),
        ));
    }
    if requests.retried > 0 {
        out.push(note(
            "throttle-retries",
            format!(
                "{} request(s) were sent again after the server throttled them ({} throttled \
                 attempt(s), {:.1} s of waits in all, as the server asked): their TTFT and E2E \
                 count from their first send, the waits included, as the application that \
                 retries sees them; each record keeps its throttled attempts",
                requests.retried, requests.throttled_attempts, requests.retry_wait_s
            ),
        ));
    }
    if requests.throttled > 0 {
        out.push(warning(
            "throttled",
            format!(
                "{} of {completed} completed request(s) were throttled by the server (HTTP 429 or 529, or a \
                 rate-limit error): they are counted apart from the failed (`throttled-rate`, not \
                 `error-rate`), in no latency, and as missed in goodput; their records keep any \
                 Retry-After and rate-limit headers",
                requests.throttled
            ),
        ));
    }
    if overall.tokens.usage_problems > 0 {
        out.push(warning(
            "implausible-usage",
            format!(
                "{} successful request(s) reported usage that cannot be right ({}): their token counts come \
                 from the plan's tokenizer, not from the server",
                overall.tokens.usage_problems,
                aggregates.first_usage_problem.as_deref().unwrap_or("no detail")
            ),
        ));
    }
    if exact {
        let stops = overall.finish_reasons.get("stop").copied().unwrap_or(0);
        let short = overall.tokens.stopped_short;
        if short > 0 {
            out.push(warning(
                "finish-stop",
                format!(
                    "{short} request(s) ended with finish_reason \"stop\" before the asked length although the \
                     plan asked for exact output lengths: the server does not honour ignore_eos/min_tokens, so \
                     output lengths, TPOT and throughput are not those of the plan"
                ),
            ));
        }
        if stops > short {
            out.push(note(
                "finish-stop-label",
                format!(
                    "{} request(s) returned exactly the asked number of tokens but were labelled finish_reason \
                     \"stop\": the server calls a length-capped answer \"stop\"; the lengths are as planned",
                    stops - short
                ),
            ));
        }
        if overall.tokens.output_off_plan > 0 {
            out.push(warning(
                "output-tokens",
                format!(
                    "{} of {} successful request(s) returned a different number of tokens than asked (mean {:.1} \
                     observed vs {:.1} planned)",
                    overall.tokens.output_off_plan,
                    overall.requests.ok,
                    overall.tokens.output_observed_mean.unwrap_or(0.0),
                    overall.tokens.output_planned_mean.unwrap_or(0.0)
                ),
            ));
        }
    }
    if let Some(mismatch) = overall.tokens.input_mismatch {
        if mismatch > TOKEN_MISMATCH_LIMIT {
            out.push(warning(
                "input-tokens",
                format!(
                    "the server counts prompts {:.1}% off the plan (median, after a constant overhead of {:.0} \
                     tokens): its tokenizer differs from the plan's `tokenizer`, so input lengths are not those \
                     planned; point `tokenizer` at the model's tokenizer.json",
                    mismatch * 100.0,
                    overall.tokens.input_overhead.unwrap_or(0.0)
                ),
            ));
        }
    }
    if let Some(overhead) = overall.tokens.input_overhead.filter(|o| o.abs() >= 1.0) {
        out.push(note(
            "prompt-overhead",
            format!(
                "the server adds {overhead:.0} token(s) to every prompt (a chat template or BOS token); \
                 prefill figures use the server's count"
            ),
        ));
    }
    if overall.tokens.counted_estimated > 0 {
        out.push(warning(
            "estimated-tokens",
            format!(
                "{} request(s) had their output tokens estimated, not counted: answers over 1 MiB of text                  (the first MiB counted, the rest in proportion), or records written after a second Ctrl-C;                  their token figures are approximate",
                overall.tokens.counted_estimated
            ),
        ));
    }
    if let Some(backlog) = log.end.as_ref().and_then(|e| e.recorder_backlog.as_ref()) {
        out.push(warning(
            "recorder-backlog",
            format!(
                "the recorder fell behind: {} request(s) waited for room in its queue (at most {} MiB of                  answers) before their records could be handed over, {:.0} ms at most and {:.1} s in all;                  the load was held back meanwhile (the client was a bottleneck)",
                backlog.requests,
                backlog.queue_mib,
                backlog.longest_ms,
                backlog.total_ms / 1000.0
            ),
        ));
    }
    if overall.tokens.counted_by_tokenizer > 0 {
        out.push(note(
            "tokenizer-counts",
            format!(
                "{} request(s) had no usage from the server: their token counts come from the plan's tokenizer",
                overall.tokens.counted_by_tokenizer
            ),
        ));
    }
    if let Some(diff) = overall
        .tokens
        .usage_vs_tokenizer
        .filter(|d| *d > TOKEN_MISMATCH_LIMIT)
    {
        out.push(note(
            "usage-vs-tokenizer",
            format!(
                "the server's usage and the plan's tokenizer disagree on output lengths by {:.1}% (median); \
                 counts use the server's usage",
                diff * 100.0
            ),
        ));
    }
    if overall.requests.connection_retries > 0 {
        out.push(note(
            "connection-retries",
            format!(
                "{} request(s) were sent again on a fresh connection: the server closed a keep-alive connection \
                 it had left open before answering on it; their send time is the re-send's",
                overall.requests.connection_retries
            ),
        ));
    }
    if !stream {
        out.push(note(
            "not-streaming",
            "the target is not streamed: TTFT, ITL, TPOT and decode rates cannot be measured, only E2E".into(),
        ));
    }
    out
}
