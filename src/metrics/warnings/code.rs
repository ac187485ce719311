//! Every warning and note llmload says, by code: the one list a report, a JUnit file, a
//! history and docs/metrics.md's table of them name. A code's words and numbers are said where
//! it is assessed; this file only says which codes there are and which kind each may be.

use serde::Serialize;

/// What severity a code is said at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Said {
    /// Always a warning: a number may not mean what it seems.
    Warning,
    /// Always a note: context.
    Note,
    /// A warning or a note, by how much it mattered.
    Either,
}

/// Declares [`Code`] and its names and kinds from one list.
macro_rules! codes {
    ($( $(#[$doc:meta])* $variant:ident = $name:literal, $said:ident; )*) => {
        /// A warning's or a note's code: what it is about (`schedule-lag`).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Code {
            $( $(#[$doc])* $variant, )*
        }

        impl Code {
            /// Every code, in the order docs/metrics.md lists them.
            pub const ALL: &[Code] = &[$( Code::$variant, )*];

            /// Its name in reports and summary.json.
            pub fn as_str(self) -> &'static str {
                match self {
                    $( Code::$variant => $name, )*
                }
            }

            /// The severity it is said at.
            pub fn said(self) -> Said {
                match self {
                    $( Code::$variant => Said::$said, )*
                }
            }
        }
    };
}

codes! {
    /// The client sent later than planned (schedule lag p99 above the limit).
    ScheduleLag = "schedule-lag", Warning;
    /// A closed loop's users waited for their request bodies.
    BodyBuilder = "body-builder", Warning;
    /// The server fetched fewer image URLs than it was sent.
    ImagesUnfetched = "images-unfetched", Warning;
    /// A phase's asked cache reset did not happen.
    CacheReset = "cache-reset", Note;
    /// A phase ended before its duration.
    EndedEarly = "ended-early", Note;
    /// Requests opened connections that took a millisecond or more.
    ConnectionsOpened = "connections-opened", Note;
    /// The server sent responses nobody asked for.
    ServerProtocol = "server-protocol", Warning;
    /// The client's CPU was saturated.
    ClientCpu = "client-cpu", Warning;
    /// The machine's CPUs were saturated by a server llmload started beside the client.
    MachineCpu = "machine-cpu", Warning;
    /// Answers ended "stop" before an exact length.
    FinishStop = "finish-stop", Warning;
    /// Answers of the exact length were labelled "stop".
    FinishStopLabel = "finish-stop-label", Note;
    /// The server's usage cannot be right.
    ImplausibleUsage = "implausible-usage", Warning;
    /// Requests failed in the client itself.
    ClientLimit = "client-limit", Warning;
    /// Latency figures describe only the successful requests.
    PartialLatency = "partial-latency", Warning;
    /// The plan's `limits` held requests before their send.
    Paced = "paced", Note;
    /// Requests went with several API keys in turn.
    Keys = "keys", Note;
    /// Throttled requests were sent again.
    ThrottleRetries = "throttle-retries", Note;
    /// The server throttled requests.
    Throttled = "throttled", Warning;
    /// The client process stalled.
    ClientStall = "client-stall", Either;
    /// The recorder's queue held requests back.
    RecorderBacklog = "recorder-backlog", Warning;
    /// An objective of a step or a probe rests on too few values.
    FewSamples = "few-samples", Note;
    /// Exact output lengths were not returned.
    OutputTokens = "output-tokens", Warning;
    /// The server counts prompts off the plan.
    InputTokens = "input-tokens", Warning;
    /// Output tokens were estimated, not counted.
    EstimatedTokens = "estimated-tokens", Warning;
    /// The run was interrupted.
    Interrupted = "interrupted", Warning;
    /// The server adds tokens to every prompt.
    PromptOverhead = "prompt-overhead", Note;
    /// Exact output lengths were asked of a model that reasons.
    ReasoningInOutput = "reasoning-in-output", Note;
    /// Requests had no usage: the tokenizer counted.
    TokenizerCounts = "tokenizer-counts", Note;
    /// The target's `/models` does not list the plan's model.
    ModelNotListed = "model-not-listed", Note;
    /// The answers name another model than asked.
    ModelAnswered = "model-answered", Note;
    /// The answers name several models for one asked.
    SeveralModels = "several-models", Warning;
    /// `tokenizer "auto"` chose a tokenizer.
    TokenizerAuto = "tokenizer-auto", Note;
    /// The server's usage and the tokenizer disagree on output lengths.
    UsageVsTokenizer = "usage-vs-tokenizer", Note;
    /// Requests were re-sent on a fresh connection.
    ConnectionRetries = "connection-retries", Note;
    /// The target is not streamed.
    NotStreaming = "not-streaming", Note;
    /// The target's TLS certificate went unchecked.
    TlsUnverified = "tls-unverified", Warning;
    /// The server's metrics were scraped.
    Telemetry = "telemetry", Note;
    /// Some scrapes failed.
    TelemetryGaps = "telemetry-gaps", Note;
    /// A GPU command ended before the run did.
    GpuSourceEnded = "gpu-source-ended", Warning;
    /// The plan priced GPUs by type, and the run's GPUs could not be priced.
    CostUnpriced = "cost-unpriced", Warning;
    /// The server fell behind while its GPUs were mostly idle.
    GpuIdle = "gpu-idle", Note;
    /// GPU memory neared its total.
    GpuMemory = "gpu-memory", Note;
    /// The server's metrics could not be scraped.
    NoTelemetry = "no-telemetry", Note;
    /// The run was merged from shards.
    Merged = "merged", Note;
    /// Shards started late or apart.
    ShardStart = "shard-start", Warning;
    /// A shard did not finish its part.
    ShardInterrupted = "shard-interrupted", Warning;
}

impl std::fmt::Display for Code {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for Code {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

/// `warning.code == "schedule-lag"`: a code is its name.
impl PartialEq<&str> for Code {
    fn eq(&self, name: &&str) -> bool {
        self.as_str() == *name
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// docs/metrics.md's table of warnings lists every code, each once, with the kind it is
    /// said at, and no other: a code added here is a row to write there, or this fails.
    #[test]
    fn the_docs_list_every_code_with_its_kind() {
        let docs = include_str!("../../../docs/metrics.md");
        let table = docs
            .split("| code | kind | when |")
            .nth(1)
            .expect("docs/metrics.md's table of warnings");
        let rows: Vec<(&str, &str)> = table
            .lines()
            .skip(2)
            .take_while(|line| line.starts_with("| `"))
            .filter_map(|line| {
                let mut cells = line.split('|').map(str::trim).skip(1);
                Some((cells.next()?.trim_matches('`'), cells.next()?))
            })
            .collect();
        let documented: Vec<&str> = rows.iter().map(|(code, _)| *code).collect();
        let defined: Vec<&str> = Code::ALL.iter().map(|c| c.as_str()).collect();
        assert_eq!(
            documented, defined,
            "docs/metrics.md's warnings, in Code's order"
        );
        for (code, kind) in rows {
            let said = Code::ALL
                .iter()
                .find(|c| c.as_str() == code)
                .map(|c| c.said());
            let expected = match said {
                Some(Said::Warning) => "warning",
                Some(Said::Note) => "note",
                Some(Said::Either) => "warning or note",
                None => unreachable!("checked above"),
            };
            assert_eq!(kind, expected, "{code}");
        }
    }
}
