//! When a result is not trustworthy, say so.
//!
//! A warning means a number in the report may not mean what it seems (the client lagged, the
//! server ignored the asked lengths, token counts are off); a note is context a reader should
//! have (the prompt gained a chat template, counts came from the tokenizer). `--fail-on-warning`
//! style gates act on warnings only.

mod client;
mod code;
mod context;
mod outcomes;
mod sending;
mod tokens;
mod transport;

use serde::Serialize;

pub use code::Code;

use super::{Aggregates, Metric, PhaseMetrics};
use crate::records::{RunHeader, RunLog};

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
    /// What it is about: a stable identifier, e.g. `schedule-lag`.
    pub code: Code,
    /// What it says, with the numbers.
    pub message: String,
}

/// The warnings that say the client, not the server, limited the run: its numbers are about
/// the runner (a history sets such a run apart from its bands).
pub const CLIENT_LIMITS: [Code; 7] = [
    Code::ScheduleLag,
    Code::ClientCpu,
    Code::ClientLimit,
    Code::ClientStall,
    Code::BodyBuilder,
    Code::MachineCpu,
    Code::RecorderBacklog,
];

/// A stall at least this long is said even when few requests waited on it.
const STALL_NOTED_MS: f64 = 20.0;
/// The share of a phase's requests in flight during stalls beyond which they are a warning
/// (and the verdict does not blame the server for what those requests broke).
pub const STALLED_SHARE: f64 = 0.01;

/// The phase's schedule lag p99 (ms), when it is beyond [`LAG_P99_LIMIT_MS`]: its requests
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

fn warning(code: Code, message: String) -> Warning {
    debug_assert_ne!(code.said(), code::Said::Note, "{code}");
    Warning {
        severity: Severity::Warning,
        code,
        message,
    }
}

fn note(code: Code, message: String) -> Warning {
    debug_assert_ne!(code.said(), code::Said::Warning, "{code}");
    Warning {
        severity: Severity::Note,
        code,
        message,
    }
}

/// What every family of warnings reads of the run.
#[derive(Clone, Copy)]
struct Run<'a> {
    log: &'a RunLog,
    aggregates: &'a Aggregates,
    overall: &'a PhaseMetrics,
    header: Option<&'a RunHeader>,
    /// The plan asked for exact output lengths.
    exact: bool,
    /// Its answers are streamed (or its API answers whole, with no tokens to time).
    stream: bool,
}

/// Every warning and note a run's log and aggregates call for, family by family, in the order
/// reports list them.
pub fn assess(log: &RunLog, aggregates: &Aggregates) -> Vec<Warning> {
    let header = log.header.as_ref();
    let run = Run {
        log,
        aggregates,
        overall: &aggregates.overall,
        header,
        exact: header.is_some_and(|h| h.exact_output),
        // An API that answers whole (embeddings, rerank) has no tokens to time: not a lack.
        stream: header.is_none_or(|h| {
            h.stream
                || crate::api::Api::from_name(&h.api)
                    .is_some_and(|api| !api.dialect().capabilities().streaming)
        }),
    };
    let mut out = Vec::new();
    context::context(&run, &mut out);
    sending::sending(&run, &mut out);
    client::client(&run, &mut out);
    outcomes::outcomes(&run, &mut out);
    tokens::tokens(&run, &mut out);
    transport::transport(&run, &mut out);
    out
}

#[cfg(test)]
mod tests {
    /// A message's line that ends without `\` keeps the next line's indentation inside the
    /// words (two messages said "1 MiB of text                  (the first MiB…"): no string
    /// of a family's file may hold a run of spaces.
    #[test]
    fn no_message_carries_a_run_of_spaces() {
        let families = [
            ("context.rs", include_str!("context.rs")),
            ("sending.rs", include_str!("sending.rs")),
            ("client.rs", include_str!("client.rs")),
            ("outcomes.rs", include_str!("outcomes.rs")),
            ("tokens.rs", include_str!("tokens.rs")),
            ("transport.rs", include_str!("transport.rs")),
        ];
        for (file, text) in families {
            for (n, line) in text.lines().enumerate() {
                let words = line.trim_start();
                if words.starts_with('"') {
                    assert!(!words.contains("   "), "{file}:{}: {words}", n + 1);
                }
            }
        }
    }
}
