//! What the token counts say: usage that cannot be right, exact lengths not kept, prompts
//! counted off the plan, estimated counts, the tokenizer counting where usage did not, and a
//! recorder that fell behind counting them.

use super::{note, warning, Code, Run, Warning, TOKEN_MISMATCH_LIMIT};

/// The run's warnings and notes of this family.
pub(super) fn tokens(run: &Run, out: &mut Vec<Warning>) {
    let Run {
        log,
        aggregates,
        overall,
        exact,
        ..
    } = *run;
    if overall.tokens.usage_problems > 0 {
        out.push(warning(
            Code::ImplausibleUsage,
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
                Code::FinishStop,
                format!(
                    "{short} request(s) ended with finish_reason \"stop\" before the asked length although the \
                     plan asked for exact output lengths: the server does not honour ignore_eos/min_tokens, so \
                     output lengths, TPOT and throughput are not those of the plan"
                ),
            ));
        }
        if stops > short {
            out.push(note(
                Code::FinishStopLabel,
                format!(
                    "{} request(s) returned exactly the asked number of tokens but were labelled finish_reason \
                     \"stop\": the server calls a length-capped answer \"stop\"; the lengths are as planned",
                    stops - short
                ),
            ));
        }
        if overall.tokens.output_off_plan > 0 {
            out.push(warning(
                Code::OutputTokens,
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
                Code::InputTokens,
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
            Code::PromptOverhead,
            format!(
                "the server adds {overhead:.0} token(s) to every prompt (a chat template or BOS token); \
                 prefill figures use the server's count"
            ),
        ));
    }
    if overall.tokens.counted_estimated > 0 {
        out.push(warning(
            Code::EstimatedTokens,
            format!(
                "{} request(s) had their output tokens estimated, not counted: answers over 1 MiB of text \
                 (the first MiB counted, the rest in proportion), or records written after a second \
                 Ctrl-C; their token figures are approximate",
                overall.tokens.counted_estimated
            ),
        ));
    }
    if let Some(backlog) = log.end.as_ref().and_then(|e| e.recorder_backlog.as_ref()) {
        out.push(warning(
            Code::RecorderBacklog,
            format!(
                "the recorder fell behind: {} request(s) waited for room in its queue (at most {} MiB of \
                 answers) before their records could be handed over, {:.0} ms at most and {:.1} s in \
                 all; the load was held back meanwhile (the client was a bottleneck)",
                backlog.requests,
                backlog.queue_mib,
                backlog.longest_ms,
                backlog.total_ms / 1000.0
            ),
        ));
    }
    if overall.tokens.counted_by_tokenizer > 0 {
        out.push(note(
            Code::TokenizerCounts,
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
            Code::UsageVsTokenizer,
            format!(
                "the server's usage and the plan's tokenizer disagree on output lengths by {:.1}% (median); \
                 counts use the server's usage",
                diff * 100.0
            ),
        ));
    }
}
