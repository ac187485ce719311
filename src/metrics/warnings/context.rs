//! What the run as a whole calls for: shards merged, the tokenizer and model chosen and
//! answered, caches not reset, an interrupted run, reasoning inside exact lengths. Not what a
//! phase's sending or the client's load says (see `sending` and `client`).

use std::collections::BTreeMap;

use super::{note, warning, Code, Run, Warning, LAG_P99_LIMIT_MS};
use crate::metrics::PhaseMetrics;

/// The run's warnings and notes of this family, in the order reports list them.
pub(super) fn context(run: &Run, out: &mut Vec<Warning>) {
    let Run {
        aggregates,
        overall,
        header,
        exact,
        ..
    } = *run;
    if let Some(header) = header.filter(|h| !h.merged.is_empty()) {
        out.extend(shard_warnings(&header.merged));
    }
    if let Some(chosen) = header.and_then(|h| h.tokenizer_note.clone()) {
        out.push(note(Code::TokenizerAuto, chosen));
    }
    for said in header
        .map(|h| h.target_notes.as_slice())
        .unwrap_or_default()
    {
        out.push(note(Code::ModelNotListed, said.clone()));
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
            Code::CacheReset,
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
            Code::Interrupted,
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
            Code::ReasoningInOutput,
            format!(
                "exact output lengths were asked of a model that reasons: of {planned:.1} output tokens asked \
                 (mean per request), {reasoning_mean:.1} were reasoning and {:.1} answer ({} request(s) reasoned); \
                 the thinking leaves the answer shorter than the length asked",
                overall.metrics[crate::dist!(AnswerTokens)].mean.unwrap_or(0.0),
                reasoning.count
            ),
        ));
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
            Code::ModelAnswered,
            format!(
                "the plan asks for model `{asked}`; the answers named {}: the server answered with \
                 another name for it, or another model (an alias resolved, a gateway's routing)",
                listed()
            ),
        )),
        _ => Some(warning(
            Code::SeveralModels,
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
        Code::Merged,
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
            Code::ShardStart,
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
            Code::ShardStart,
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
            Code::ShardInterrupted,
            format!(
                "shard(s) {} did not finish their part: the merged run is partial",
                interrupted.join(", ")
            ),
        ));
    }
    out
}
