//! One-line runs: `llmload run --target URL --model M --rate 4 --duration 2m --input 512
//! --output 128 --sla 'ttft p99 < 500ms'`, without a plan file.
//!
//! The flags are written out as a plan's text, which is then checked like any plan file (the
//! same diagnostics, the same defaults) and kept in the run directory as `plan.kdl`, so that
//! `llmload run DIR/plan.kdl` repeats the run exactly and a one-liner can become a versioned
//! plan. This module only writes text: it decides nothing a plan file could not say.

use std::path::Path;

use kdl::KdlValue;

use crate::error::{Error, Result};

/// The file name diagnostics of a one-line plan show.
pub(super) const FILE_NAME: &str = "(command line)";

/// The flags that make a plan without a plan file.
#[derive(clap::Args, Debug, Clone, Default)]
#[command(next_help_heading = "Without a plan file (one-line runs)")]
pub(super) struct OneLineArgs {
    /// Open loop: this many requests per second, Poisson arrivals (or --concurrency).
    #[arg(long, value_name = "R", conflicts_with = "concurrency")]
    rate: Option<f64>,
    /// Closed loop: this many users, each sending its next request when its answer ends.
    #[arg(long, value_name = "C")]
    concurrency: Option<u32>,
    /// How long the phase sends ("90s", "5m"; or --requests).
    #[arg(long, value_name = "D", conflicts_with = "requests")]
    duration: Option<String>,
    /// How many requests the phase sends (or --duration).
    #[arg(long, value_name = "N")]
    requests: Option<u64>,
    /// Prompt tokens; several (--input 128,2048 or repeated) are equally likely buckets.
    #[arg(long, value_name = "TOKENS", value_delimiter = ',')]
    input: Vec<u32>,
    /// Output tokens asked for, exactly (ignore_eos) where the API can ask for it.
    #[arg(long, value_name = "TOKENS")]
    output: Option<u32>,
    /// An assertion, as a plan's sla block writes it (repeatable): 'ttft p99 < 500ms',
    /// 'error-rate < 1%'.
    #[arg(long = "sla", value_name = "ASSERTION")]
    sla: Vec<String>,
    /// The API requests speak [default: chat]: chat, completions, responses or messages.
    #[arg(long, value_name = "API")]
    api: Option<String>,
    /// The tokenizer prompts are built with: cl100k_base, o200k_base, a Hugging Face model id
    /// (from the local cache) or a tokenizer.json [default: auto, --model's own from the local
    /// Hugging Face cache when it is an id there, else cl100k_base].
    #[arg(long, value_name = "NAME")]
    tokenizer: Option<String>,
    /// Unmeasured requests sent first, two at a time, to warm the server.
    #[arg(long, value_name = "N")]
    warmup: Option<u32>,
}

/// The APIs a one-line run speaks: those that generate. Embeddings and rerank need a batch
/// shape a plan file says better.
const APIS: [&str; 4] = ["chat", "completions", "responses", "messages"];

impl OneLineArgs {
    /// Whether any flag of a one-line run was given.
    pub(super) fn any(&self) -> bool {
        self.rate.is_some()
            || self.concurrency.is_some()
            || self.duration.is_some()
            || self.requests.is_some()
            || !self.input.is_empty()
            || self.output.is_some()
            || !self.sla.is_empty()
            || self.api.is_some()
            || self.tokenizer.is_some()
            || self.warmup.is_some()
    }

    /// The flags given beside a plan file, which has its own say on each: a mistake to name.
    pub(super) fn refuse_beside(&self, plan: &Path) -> Result<()> {
        if self.any() {
            return Err(Error::usage(format!(
                "{}: the load, lengths and assertions come from the plan file; drop --rate, \
                 --concurrency, --duration, --requests, --input, --output, --sla, --api, \
                 --tokenizer and --warmup, or change the plan with --set (phase:steady.rate=8)",
                plan.display()
            )));
        }
        Ok(())
    }

    /// The plan these flags (and `--target`, `--model`, `--seed`) say, as a plan file's text.
    /// Every missing flag is named at once.
    pub(super) fn plan_text(
        &self,
        target: Option<&str>,
        model: Option<&str>,
        seed: Option<u64>,
    ) -> Result<String> {
        let mut missing = Vec::new();
        if target.is_none() {
            missing.push("--target URL (or sim)");
        }
        if self.rate.is_none() && self.concurrency.is_none() {
            missing.push("--rate R or --concurrency C");
        }
        if self.duration.is_none() && self.requests.is_none() {
            missing.push("--duration D or --requests N");
        }
        if self.input.is_empty() {
            missing.push("--input TOKENS");
        }
        if self.output.is_none() {
            missing.push("--output TOKENS");
        }
        if target.is_some_and(|t| t != "sim") && model.is_none() {
            missing.push("--model NAME (the server's /v1/models lists it)");
        }
        if !missing.is_empty() {
            return Err(Error::usage(format!(
                "a run without a plan file needs {}",
                missing.join(", ")
            )));
        }
        let target = target.unwrap_or_default();
        let api = self.api.as_deref().unwrap_or("chat");
        if !APIS.contains(&api) {
            return Err(Error::usage(format!(
                "--api {api}: a one-line run speaks {}; embeddings and rerank need a plan file \
                 (llmload init writes one)",
                APIS.join(", ")
            )));
        }
        if has_credentials(target) {
            return Err(Error::usage(
                "--target: a URL with a user or password would be kept in the run's plan.kdl; \
                 give the key with --api-key-env VAR instead",
            ));
        }
        Ok(self.render(target, model, seed.unwrap_or(DEFAULT_SEED), api))
    }

    fn render(&self, target: &str, model: Option<&str>, seed: u64, api: &str) -> String {
        let mut text = String::from(
            "// Written by `llmload run` from its command line; `llmload run` on this file repeats\n\
             // the run exactly. The language: docs/plan-reference.md.\n",
        );
        text += &format!("plan \"one-line\" {{ seed {seed} }}\n\n");
        text += &format!("target {} {{\n    api {}\n", kdl(target), kdl(api));
        if let Some(model) = model {
            text += &format!("    model {}\n", kdl(model));
        }
        text += "}\n\nworkload {\n";
        if let Some(tokenizer) = &self.tokenizer {
            text += &format!("    tokenizer {}\n", kdl(&absolute_if_file(tokenizer)));
        }
        text += &match self.input.as_slice() {
            [one] => format!("    input {one}\n"),
            many => {
                let buckets: Vec<String> = many.iter().map(|n| format!("bucket {n}")).collect();
                format!("    input {{ {} }}\n", buckets.join("; "))
            }
        };
        // Messages has no way to ask for an exact length (the plan language refuses it there).
        let exact = if api == "messages" {
            ""
        } else {
            " ignore-eos=#true"
        };
        text += &format!(
            "    output {}{exact}\n}}\n\n",
            self.output.unwrap_or_default()
        );
        if let Some(warmup) = self.warmup {
            text += &format!(
                "phase \"warmup\" {{ concurrency 2; requests {warmup}; record #false }}\n"
            );
        }
        text += &format!("phase \"steady\" {{ {} }}\n", self.phase_body());
        if !self.sla.is_empty() {
            text += "\nsla {\n";
            for line in &self.sla {
                text += &format!("    {}\n", assertion(line));
            }
            text += "}\n";
        }
        text
    }

    fn phase_body(&self) -> String {
        let load = match (self.rate, self.concurrency) {
            (Some(rate), _) => format!("rate {}", number(rate)),
            (None, users) => format!("concurrency {}", users.unwrap_or_default()),
        };
        let length = match (&self.duration, self.requests) {
            (Some(duration), _) => format!("duration {}", kdl(duration)),
            (None, requests) => format!("requests {}", requests.unwrap_or_default()),
        };
        format!("{load}; {length}")
    }
}

/// The seed of a one-line plan without `--seed` (the starter plan's).
const DEFAULT_SEED: u64 = 42;

/// A string as a KDL value, quoted and escaped.
fn kdl(text: &str) -> String {
    KdlValue::String(text.to_string()).to_string()
}

/// A rate as KDL writes a number: `4` or `2.5`, never `4.0e0`.
fn number(value: f64) -> String {
    let text = format!("{value}");
    if value.is_finite() {
        text
    } else {
        // Checked by the plan as written: a NaN or infinity is a quoted mistake it names.
        kdl(&text)
    }
}

/// `'ttft p99 < 500ms'` as a plan's line, `ttft p99 < "500ms"`: the threshold quoted unless it
/// is a plain number (`output-throughput >= 1000`). What is not an assertion is passed on as it
/// was written, for the plan's diagnostics to name.
fn assertion(text: &str) -> String {
    let text = text.trim();
    for op in ["<=", ">=", "==", "<", ">"] {
        if let Some((left, right)) = text.split_once(op) {
            let right = right.trim();
            let threshold = if right.parse::<f64>().is_ok() || right.starts_with('"') {
                right.to_string()
            } else {
                kdl(right)
            };
            return format!("{} {op} {threshold}", left.trim());
        }
    }
    text.to_string()
}

/// Whether a URL names a user or password (`http://user:pass@host`), read as the plan's phase
/// targets read it.
fn has_credentials(url: &str) -> bool {
    reqwest::Url::parse(url).is_ok_and(|u| !u.username().is_empty() || u.password().is_some())
}

/// A tokenizer naming a file that exists here, made absolute: the kept plan lives in the run
/// directory, from where a relative path would name another file.
fn absolute_if_file(tokenizer: &str) -> String {
    let path = Path::new(tokenizer);
    if path.is_file() {
        if let Ok(absolute) = std::path::absolute(path) {
            return absolute.display().to_string();
        }
    }
    tokenizer.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(line: &[&str]) -> OneLineArgs {
        #[derive(clap::Parser)]
        struct Wrapper {
            #[command(flatten)]
            one: OneLineArgs,
        }
        let mut all = vec!["llmload"];
        all.extend_from_slice(line);
        <Wrapper as clap::Parser>::try_parse_from(all)
            .expect("flags parse")
            .one
    }

    #[test]
    fn the_flags_make_a_plan_the_language_accepts() {
        let one = args(&[
            "--rate",
            "2.5",
            "--duration",
            "30s",
            "--input",
            "128,2048",
            "--output",
            "64",
            "--sla",
            "ttft p99 < 500ms",
            "--sla",
            "error-rate<1%",
            "--sla",
            "output-throughput >= 100",
            "--warmup",
            "4",
        ]);
        let text = one.plan_text(Some("sim"), None, Some(7)).unwrap();
        let plan = crate::plan::parse_plan(FILE_NAME, text.clone()).unwrap();
        assert_eq!(plan.seed, 7);
        assert_eq!(plan.phases.len(), 2);
        assert_eq!(plan.sla.len(), 3, "{text}");
        assert!(text.contains("ttft p99 < \"500ms\""), "{text}");
        assert!(text.contains("error-rate < \"1%\""), "{text}");
        assert!(text.contains("output-throughput >= 100"), "{text}");
        assert!(text.contains("input { bucket 128; bucket 2048 }"), "{text}");
        assert!(text.contains("rate 2.5; duration \"30s\""), "{text}");
        assert_eq!(crate::plan::fmt::format(&text).unwrap(), text, "formatted");
    }

    #[test]
    fn what_is_missing_is_named_at_once() {
        let one = args(&["--rate", "1"]);
        let err = one
            .plan_text(Some("http://127.0.0.1:8000"), None, None)
            .unwrap_err()
            .render();
        for flag in ["--duration", "--input", "--output", "--model"] {
            assert!(err.contains(flag), "{err}");
        }
        assert!(!err.contains("--rate R"), "{err}");
    }

    #[test]
    fn credentials_and_apis_a_line_cannot_carry_are_refused() {
        let one = args(&[
            "--rate",
            "1",
            "--requests",
            "3",
            "--input",
            "8",
            "--output",
            "8",
        ]);
        let err = one
            .plan_text(Some("http://u:secret@127.0.0.1:1"), Some("m"), None)
            .unwrap_err()
            .render();
        assert!(
            err.contains("--api-key-env") && !err.contains("secret"),
            "{err}"
        );
        let embed = args(&["--api", "embeddings", "--rate", "1", "--requests", "3"]);
        let err = embed
            .plan_text(Some("sim"), None, None)
            .unwrap_err()
            .render();
        assert!(err.contains("--input") && err.contains("--output"), "{err}");
        let embed = args(&[
            "--api",
            "embeddings",
            "--rate",
            "1",
            "--requests",
            "3",
            "--input",
            "8",
            "--output",
            "8",
        ]);
        let err = embed
            .plan_text(Some("sim"), None, None)
            .unwrap_err()
            .render();
        assert!(err.contains("plan file"), "{err}");
    }

    #[test]
    fn messages_asks_for_no_exact_length() {
        let one = args(&[
            "--api",
            "messages",
            "--concurrency",
            "2",
            "--requests",
            "4",
            "--input",
            "16",
            "--output",
            "8",
        ]);
        let text = one.plan_text(Some("sim"), None, None).unwrap();
        assert!(text.contains("output 8\n"), "{text}");
        crate::plan::parse_plan(FILE_NAME, text).unwrap();
    }

    #[test]
    fn assertions_keep_what_they_cannot_read_for_the_plan_to_name() {
        assert_eq!(assertion("ttft p99<500ms"), "ttft p99 < \"500ms\"");
        assert_eq!(assertion("tpot mean <= \"40ms\""), "tpot mean <= \"40ms\"");
        assert_eq!(assertion("nonsense"), "nonsense");
    }
}
