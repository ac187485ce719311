//! `sla` (assertions), `slo` (per-request objectives) and `regression` (tolerances against a
//! baseline): the lines that judge a run.

use std::time::Duration;

use kdl::{KdlEntry, KdlNode, KdlValue};

use super::cx::{children, first_arg_span, positional, property, Cx};
use super::values::{trim_float, Count, Dollars, Kind, Number, Percent, Quantity, Text, DURATION};
use crate::metrics::table::{Needs, Stats};
use crate::plan::limits::MAX_REQUESTS;
use crate::plan::{
    AbortRule, Assertion, JudgedWindow, Judging, Metric, MetricKind, Op, Slo, Stat, Tolerance,
    Undecided,
};

/// What an assertion or a tolerance may refer to.
pub(super) struct Scope<'a> {
    /// Every phase name written, valid or not, so that one broken phase does not also make each
    /// line that names it an error.
    pub phases: &'a [String],
    /// Phases with `record #false`.
    pub unrecorded: &'a [String],
    /// The plan has an `slo` (goodput metrics need one).
    pub has_slo: bool,
    /// The plan has a `search` (the capacity metric needs one).
    pub has_search: bool,
    /// The plan has a `cost` (the cost metrics need one).
    pub has_cost: bool,
    /// A phase replays agent sessions (the session metrics need one).
    pub has_sessions: bool,
    /// Part of the plan could not be read (a syntax error): a phase it named may exist.
    pub phases_incomplete: bool,
    /// What the plan's APIs answer with, for the metrics that need it; `None` where it is not
    /// known (a shared file, a target that could not be read).
    pub answers: Option<Answers>,
}

/// What a plan's requests come back with.
#[derive(Debug, Clone, Copy)]
pub(super) struct Answers {
    /// Some API of the plan generates tokens.
    pub generated: bool,
    /// They are streamed (`stream #true`).
    pub streamed: bool,
    /// Some API of the plan answers batches of inputs (embeddings, rerank).
    pub batches: bool,
    /// The target's API, as plans write it.
    pub api: &'static str,
}

/// Comparisons as bare values (`<`, `>`) or strings (`"<="`).
fn comparison(value: &KdlValue) -> Option<Op> {
    match value {
        KdlValue::String(s) if s == "<" => Some(Op::Lt),
        KdlValue::String(s) if s == ">" => Some(Op::Gt),
        KdlValue::String(s) if s == "<=" => Some(Op::Le),
        KdlValue::String(s) if s == ">=" => Some(Op::Ge),
        _ => None,
    }
}

/// `<=` and `>=` followed by a value read as a property named `<` or `>`.
fn comparison_props(node: &KdlNode) -> Vec<&KdlEntry> {
    node.entries()
        .iter()
        .filter(|e| matches!(e.name().map(|n| n.value()), Some("<") | Some(">")))
        .collect()
}

/// What one `sla` block says: its assertions, and how they are judged where it says so.
#[derive(Default)]
pub(super) struct SlaBlock {
    pub assertions: Vec<Assertion>,
    /// `confidence "95%"`.
    pub confidence: Option<f64>,
    /// `undecided "not-decided"`.
    pub undecided: Option<Undecided>,
    /// `window "steady"`.
    pub window: Option<JudgedWindow>,
}

impl SlaBlock {
    /// Adds what another `sla` block (an included file's) says.
    pub fn extend(&mut self, other: SlaBlock) {
        self.assertions.extend(other.assertions);
        self.confidence = other.confidence.or(self.confidence);
        self.undecided = other.undecided.or(self.undecided);
        self.window = other.window.or(self.window);
    }

    /// How the plan's assertions are judged.
    pub fn judging(&self) -> Judging {
        let default = Judging::default();
        Judging {
            confidence: self.confidence.unwrap_or(default.confidence),
            undecided: self.undecided.unwrap_or(default.undecided),
            window: self.window.unwrap_or(default.window),
        }
    }
}

/// The lowest and highest confidence a plan may ask: below half, a bound is on the wrong side
/// of the estimate; above 99.99%, no run is long enough to show a p99.
const CONFIDENCE_RANGE: (f64, f64) = (0.5, 0.9999);

/// The `sla` block.
pub(super) fn sla(cx: &mut Cx, node: &KdlNode, scope: &Scope) -> SlaBlock {
    cx.no_args(node, "sla { ttft p99 < \"500ms\" }");
    let mut block = SlaBlock::default();
    for child in children(node) {
        match child.name().value() {
            "confidence" => block.confidence = confidence(cx, child),
            "undecided" => block.undecided = undecided(cx, child),
            "window" => block.window = window(cx, child),
            _ => block.assertions.extend(assertion(cx, child, scope)),
        }
    }
    block
}

/// `confidence "95%"`: how sure a percentile's bound must be to decide it.
fn confidence(cx: &mut Cx, node: &KdlNode) -> Option<f64> {
    let usage = "confidence \"95%\"";
    let value = cx.single(node, usage, Percent)?;
    let (low, high) = CONFIDENCE_RANGE;
    if !(low..=high).contains(&value) {
        cx.error(
            first_arg_span(node),
            format!(
                "a confidence of {}% cannot judge an assertion",
                trim_float(value * 100.0)
            ),
            "out of range",
            "write one from \"50%\" to \"99.99%\"; 95% is the usual, 99% asks for about 1.5x the requests",
        );
        return None;
    }
    Some(value)
}

/// `undecided "not-decided"`: what a judgement the data cannot decide makes of the run.
fn undecided(cx: &mut Cx, node: &KdlNode) -> Option<Undecided> {
    choice(
        cx,
        node,
        "undecided \"not-decided\"",
        &Undecided::ALL,
        "not-decided: the run exits 3 naming what would decide it; fail: it fails (exit 1); \
         pass: the judgement is shown and does not gate",
    )
}

/// `window "steady"`: which of each phase's requests its assertions are judged on.
fn window(cx: &mut Cx, node: &KdlNode) -> Option<JudgedWindow> {
    choice(
        cx,
        node,
        "window \"steady\"",
        &JudgedWindow::ALL,
        "whole: every request of the phase; steady: those sent after its warm-up transient \
         (docs/metrics.md#steady-state)",
    )
}

/// A node whose one value is one of `all`'s names; otherwise a diagnostic listing them.
fn choice<T: Copy>(
    cx: &mut Cx,
    node: &KdlNode,
    usage: &str,
    all: &[(&'static str, T)],
    help: &str,
) -> Option<T> {
    let text = cx.single(node, usage, Text)?;
    let found = all.iter().find(|(name, _)| *name == text);
    if found.is_none() {
        let names: Vec<&str> = all.iter().map(|(n, _)| *n).collect();
        cx.error(
            first_arg_span(node),
            format!("`{}` is one of {}", node.name().value(), names.join(", ")),
            "unknown choice",
            help,
        );
    }
    found.map(|(_, value)| *value)
}

/// The `regression` block.
pub(super) fn regression(cx: &mut Cx, node: &KdlNode, scope: &Scope) -> Vec<Tolerance> {
    cx.no_args(node, "regression { ttft p99 \"+10%\" }");
    children(node)
        .iter()
        .filter_map(|child| tolerance(cx, child, scope))
        .collect()
}

/// The metric a line of `sla` or `regression` names.
fn metric(cx: &mut Cx, node: &KdlNode, scope: &Scope) -> Option<Metric> {
    let has_slo = scope.has_slo;
    let metric_name = node.name().value();
    let Some(metric) = Metric::from_name(metric_name).filter(|m| m.def().uses.assert) else {
        let metrics: Vec<&str> = Metric::assertable().map(Metric::name).collect();
        let suggestion = crate::plan::suggest::did_you_mean(metric_name, metrics.iter().copied());
        cx.error(
            node.name().span(),
            format!("unknown metric `{metric_name}`"),
            "unknown metric",
            format!("{suggestion}metrics: {}", metrics.join(", ")),
        );
        return None;
    };
    if let Some((message, label, help)) = scope.answers.and_then(|a| unmeasurable(metric, a)) {
        cx.error(node.name().span(), message, label, help);
        return None;
    }
    let missing = match metric.def().needs {
        Needs::Nothing | Needs::Streaming | Needs::Generation | Needs::Batch => None,
        Needs::Cost { .. } if !scope.has_cost => Some((
            "prices tokens, and the plan gives no price",
            "no cost",
            "add a cost block saying what the deployment costs: cost { gpu-hour \"$2.49\" gpus=8 } (or cost { instance-hour \"$98.32\" })",
        )),
        Needs::Slo | Needs::Cost { slo: true } if !has_slo => Some((
            "needs per-request objectives",
            "no slo",
            "add an slo node saying what a good request is, e.g. slo ttft=\"300ms\" tpot=\"50ms\" e2e=\"10s\"",
        )),
        Needs::Search if !scope.has_search => Some((
            "is what a search finds",
            "no search",
            "add a search block: search \"capacity\" { rate from=1 to=64; duration \"30s\" }",
        )),
        Needs::Sessions if !scope.has_sessions => Some((
            "judges agent sessions, and no phase replays any",
            "no sessions",
            "add a phase replaying agent sessions: phase \"agents\" { sessions \"agents.jsonl\" concurrent=8 }",
        )),
        Needs::Slo | Needs::Search | Needs::Cost { .. } | Needs::Sessions => None,
    };
    if let Some((what, label, help)) = missing {
        cx.error(
            node.name().span(),
            format!("`{metric_name}` {what}"),
            label,
            help,
        );
        return None;
    }
    Some(metric)
}

/// Why the plan's requests can never give `metric`, if they cannot: a diagnostic's message,
/// label and help.
fn unmeasurable(metric: Metric, answers: Answers) -> Option<(String, &'static str, String)> {
    let name = metric.name();
    let api = answers.api;
    let whole = "assert e2e, e2e-per-input, input-throughput or error-rate";
    match metric.def().needs {
        Needs::Streaming | Needs::Generation if !answers.generated => Some((
            format!("`{name}` measures generated tokens, and api \"{api}\" generates none"),
            "not measured",
            format!("api \"{api}\" answers a batch whole: {whole}"),
        )),
        Needs::Streaming if !answers.streamed => Some((
            format!("`{name}` is measured on streamed answers, and the target is not streamed"),
            "not measured",
            "set stream #true in the target, or assert e2e (all a whole answer can show)".to_string(),
        )),
        Needs::Batch if !answers.batches => Some((
            format!("`{name}` is per input of a batch, and api \"{api}\" sends none"),
            "not measured",
            "batches are sent by api \"embeddings\" or \"rerank\"; for generation assert e2e or output-throughput"
                .to_string(),
        )),
        Needs::Nothing
        | Needs::Streaming
        | Needs::Generation
        | Needs::Batch
        | Needs::Slo
        | Needs::Search
        | Needs::Sessions
        | Needs::Cost { .. } => None,
    }
}

/// The statistic of a distribution metric, at the first positional argument.
fn statistic(cx: &mut Cx, node: &KdlNode, usage: &str) -> Option<Stat> {
    let name = node.name().value();
    match positional(node).next() {
        // `itl < "50ms"`: the comparison came where the statistic belongs.
        Some(entry) if comparison(entry.value()).is_some() => {
            cx.error(
                entry.span(),
                format!("`{name}` needs a statistic before the comparison"),
                "statistic missing",
                format!("say which statistic is compared: {usage}"),
            );
            None
        }
        Some(entry) => {
            let parsed = match entry.value() {
                KdlValue::String(s) => Stat::parse(s),
                _ => None,
            };
            if parsed.is_none() {
                cx.error(
                    entry.span(),
                    "unknown statistic",
                    "unknown statistic",
                    "statistics: mean, min, max, median, or a percentile such as p50, p90, p99, p99.9",
                );
            }
            parsed
        }
        None => {
            let at = comparison_props(node)
                .first()
                .map_or(node.name().span(), |e| e.span());
            cx.error(
                at,
                format!("`{name}` needs a statistic"),
                "statistic missing",
                format!("write it as: {usage}"),
            );
            None
        }
    }
}

/// `phase="name"`: a recorded phase of the plan. `Err` when it names none.
fn phase_ref(
    cx: &mut Cx,
    node: &KdlNode,
    scope: &Scope,
    usage: &str,
) -> Result<Option<String>, ()> {
    let Some(name) = cx.prop(node, "phase", usage, super::values::Text)? else {
        return Ok(None);
    };
    let span = property(node, "phase").map_or(node.span(), |e| e.span());
    if !scope.phases.contains(&name) {
        if scope.phases_incomplete {
            return Err(());
        }
        let known = if scope.phases.is_empty() {
            "none".to_string()
        } else {
            scope
                .phases
                .iter()
                .map(|p| format!("\"{p}\""))
                .collect::<Vec<_>>()
                .join(", ")
        };
        cx.error(
            span,
            format!("no phase is named \"{name}\""),
            "unknown phase",
            format!("phases in this plan: {known}"),
        );
        return Err(());
    }
    if scope.unrecorded.contains(&name) {
        cx.error(
            span,
            format!("phase \"{name}\" is not recorded (record #false)"),
            "unrecorded phase",
            "an unrecorded phase (a warmup) has no metrics to judge; name a recorded phase or remove record #false",
        );
        return Err(());
    }
    Ok(Some(name))
}

/// The `slo` node.
pub(super) fn slo(cx: &mut Cx, node: &KdlNode) -> Option<Slo> {
    let usage = "slo ttft=\"300ms\" tpot=\"50ms\" e2e=\"10s\"";
    cx.check_entries(node, 0, &["ttft", "tpot", "e2e"], usage);
    cx.no_children(node);
    let mut read = |key: &str| cx.prop(node, key, usage, DURATION);
    let (ttft, tpot, e2e) = (read("ttft"), read("tpot"), read("e2e"));
    let (Ok(ttft), Ok(tpot), Ok(e2e)) = (ttft, tpot, e2e) else {
        return None;
    };
    let slo = Slo { ttft, tpot, e2e };
    if slo == Slo::default() {
        cx.error(
            node.name().span(),
            "`slo` sets no objective",
            "empty slo",
            format!("write it as: {usage}"),
        );
        return None;
    }
    Some(slo)
}

fn tolerance(cx: &mut Cx, node: &KdlNode, scope: &Scope) -> Option<Tolerance> {
    let metric = metric(cx, node, scope)?;
    cx.no_children(node);
    if !metric.def().uses.compare {
        cx.error(
            node.name().span(),
            format!("`{}` is not compared between runs", metric.name()),
            "server metric",
            "compare what the client measured (ttft, itl, e2e...); assert on the server's own numbers in `sla`",
        );
        return None;
    }
    let name = metric.name();
    let sign = if metric.higher_is_better() { '-' } else { '+' };
    let usage = if metric.is_distribution() {
        format!("{name} p99 \"{sign}10%\"")
    } else {
        format!("{name} \"{sign}5%\"")
    };
    let stat = if metric.is_distribution() {
        Some(statistic(cx, node, &usage)?)
    } else {
        None
    };
    let value_index = usize::from(stat.is_some());
    cx.check_entries(node, value_index + 1, &["phase"], &usage);
    let Some(entry) = positional(node).nth(value_index) else {
        cx.error(
            node.name().span(),
            format!("`{name}` needs a tolerance"),
            "tolerance missing",
            format!("write it as: {usage}"),
        );
        return None;
    };
    let text = super::values::Text.read(cx, entry, &usage)?;
    let (explicit, number) = match text.chars().next() {
        Some(c @ ('+' | '-')) => (Some(c), &text[1..]),
        _ => (None, text.as_str()),
    };
    // A latency may rise by more than 100%; nothing can fall by more than 100%.
    let ceiling = if metric.higher_is_better() || metric.kind() == MetricKind::Fraction {
        100.0
    } else {
        f64::INFINITY
    };
    let parsed = number
        .trim()
        .strip_suffix('%')
        .and_then(|n| n.trim().parse::<f64>().ok())
        .filter(|v| v.is_finite() && *v >= 0.0)
        .ok_or_else(|| format!("\"{text}\" is not a percentage"))
        .and_then(|v| {
            if v <= ceiling {
                Ok(v / 100.0)
            } else {
                Err(format!("\"{text}\" is more than `{name}` can fall"))
            }
        });
    let allowed = match parsed {
        Ok(v) => v,
        Err(message) => {
            cx.error(
                entry.span(),
                message,
                "not a tolerance",
                format!("a tolerance is a percentage of the baseline: {usage}"),
            );
            return None;
        }
    };
    if explicit.is_some_and(|c| c != sign) {
        let direction = if metric.higher_is_better() {
            "falls"
        } else {
            "rises"
        };
        cx.error(
            entry.span(),
            format!("`{name}` regresses when it {direction}, so its tolerance is {sign}N%"),
            "wrong direction",
            format!("write it as: {usage}"),
        );
        return None;
    }
    let phase = phase_ref(cx, node, scope, &usage).ok()?;
    let stat_text = stat.map(|s| format!(" {s}")).unwrap_or_default();
    Some(Tolerance {
        metric,
        stat,
        allowed,
        phase,
        text: format!("{name}{stat_text} {sign}{}%", trim_float(allowed * 100.0)),
    })
}

fn assertion(cx: &mut Cx, node: &KdlNode, scope: &Scope) -> Option<Assertion> {
    judged_line(cx, node, scope, &["phase"])
}

/// The `abort` block: conditions that stop a failing run early.
pub(super) fn abort(cx: &mut Cx, node: &KdlNode, scope: &Scope) -> Vec<AbortRule> {
    cx.no_args(node, "abort { error-rate > \"20%\" after=50 }");
    let mut rules = Vec::new();
    for child in children(node) {
        let Some(metric) = Metric::from_name(child.name().value()).filter(|m| m.def().uses.assert)
        else {
            metric(cx, child, scope);
            continue;
        };
        if !metric.def().uses.abort {
            let names: Vec<&str> = Metric::all()
                .filter(|m| m.def().uses.abort)
                .map(Metric::name)
                .collect();
            cx.error(
                child.name().span(),
                format!("`{}` cannot stop a run while it goes", metric.name()),
                "not watched live",
                format!("an abort condition watches one of: {}", names.join(", ")),
            );
            continue;
        }
        let Some(condition) = judged_line(cx, child, scope, &["after"]) else {
            continue;
        };
        let usage = format!("{} after=50", condition.text);
        let Ok(after) = cx.prop(child, "after", &usage, Count::positive(MAX_REQUESTS)) else {
            continue;
        };
        rules.push(AbortRule {
            condition,
            after: after.unwrap_or(DEFAULT_ABORT_AFTER),
        });
    }
    rules
}

/// Requests an abort condition waits for before it judges, unless it says `after=`.
const DEFAULT_ABORT_AFTER: u64 = 20;

/// A line that judges a metric (an assertion, an abort condition): METRIC [STAT] OP THRESHOLD,
/// with the properties `props`.
fn judged_line(cx: &mut Cx, node: &KdlNode, scope: &Scope, props: &[&str]) -> Option<Assertion> {
    let metric_name = node.name().value();
    let metric = metric(cx, node, scope)?;
    cx.no_children(node);
    let usage = format!("{metric_name} {}", metric.def().example);
    let args: Vec<&KdlEntry> = positional(node).collect();
    let mut rest = &args[..];
    let mut stat = None;
    if metric.takes_stat() {
        let read = statistic(cx, node, &usage)?;
        // A gauge sampled now and then has a mean and a largest value, not percentiles.
        let gauge = metric.def().stats == Stats::Gauge;
        let histogram = metric.def().stats == Stats::Histogram;
        let allowed = match read {
            Stat::Mean | Stat::Max => true,
            Stat::Percentile(_) => !gauge,
            Stat::Min => !gauge && !histogram,
        };
        if !allowed {
            cx.error(
                positional(node).next().map_or(node.span(), |e| e.span()),
                format!("`{metric_name}` has no {read}"),
                "no such statistic",
                if gauge {
                    format!("a server gauge is sampled: its mean or max, e.g. {usage}")
                } else {
                    format!("a server histogram has percentiles and a mean, e.g. {usage}")
                },
            );
            return None;
        }
        stat = Some(read);
        rest = &rest[1..];
    }
    // `<` and `>` are bare identifiers in KDL 2.0, but `<=` and `>=` followed by a value read
    // as a property named `<` or `>`; both spellings are accepted here on purpose.
    let (op, value_entry) = match (rest, comparison_props(node).as_slice()) {
        ([op_entry, value], []) => match comparison(op_entry.value()) {
            Some(op) => (op, *value),
            None => {
                cx.error(
                    op_entry.span(),
                    "expected a comparison: <, <=, > or >=",
                    "not a comparison",
                    format!("write it as: {usage}"),
                );
                return None;
            }
        },
        ([], [prop]) => {
            let op = if prop.name().map(|n| n.value()) == Some("<") {
                Op::Le
            } else {
                Op::Ge
            };
            (op, *prop)
        }
        ([], []) | ([_], []) => {
            cx.error(
                node.span(),
                format!("`{metric_name}` needs a comparison and a threshold"),
                "incomplete assertion",
                format!("write it as: {usage}"),
            );
            return None;
        }
        _ => {
            cx.error(
                node.span(),
                "this assertion has extra values",
                "too many values",
                format!("one comparison and one threshold: {usage}"),
            );
            return None;
        }
    };
    let threshold = match metric.kind() {
        MetricKind::Latency => DURATION
            .read(cx, value_entry, &usage)
            .map(|d| d.as_secs_f64() * 1000.0),
        MetricKind::Fraction => Percent.read(cx, value_entry, &usage),
        MetricKind::Power => Quantity { symbol: "W" }.read(cx, value_entry, &usage),
        MetricKind::Energy => Quantity { symbol: "J" }.read(cx, value_entry, &usage),
        MetricKind::Cost => Dollars.read(cx, value_entry, &usage),
        MetricKind::Throughput
        | MetricKind::TokenRate
        | MetricKind::Capacity
        | MetricKind::Count
        | MetricKind::Tokens => {
            let number = Number {
                positive: false,
                max: 1e12,
            };
            number.read(cx, value_entry, &usage)
        }
    }?;
    let unknown = node
        .entries()
        .iter()
        .filter_map(|e| e.name().map(|n| n.value()))
        .find(|n| !matches!(*n, "<" | ">") && !props.contains(n));
    if let Some(unknown) = unknown {
        let span = property(node, unknown).map_or(node.span(), |e| e.span());
        let allowed: Vec<String> = props.iter().map(|p| format!("{p}=")).collect();
        let suggestion = crate::plan::suggest::did_you_mean(unknown, props.iter().copied());
        cx.error(
            span,
            format!("unknown property `{unknown}` on `{metric_name}`"),
            "unknown property",
            format!(
                "{suggestion}properties allowed here: {}",
                allowed.join(", ")
            ),
        );
        return None;
    }
    let phase = phase_ref(cx, node, scope, &usage).ok()?;
    let threshold_text = match metric.kind() {
        MetricKind::Latency => {
            crate::plan::units::format_duration(Duration::from_secs_f64(threshold / 1000.0))
        }
        MetricKind::Fraction => format!("{}%", trim_float(threshold * 100.0)),
        MetricKind::Power => crate::plan::units::format_quantity(threshold, "W"),
        MetricKind::Energy => crate::plan::units::format_quantity(threshold, "J"),
        MetricKind::Cost => crate::plan::units::format_price(threshold),
        MetricKind::TokenRate
        | MetricKind::Throughput
        | MetricKind::Capacity
        | MetricKind::Count
        | MetricKind::Tokens => trim_float(threshold),
    };
    let text = match stat {
        Some(stat) => format!("{metric_name} {stat} {} {threshold_text}", op.symbol()),
        None => format!("{metric_name} {} {threshold_text}", op.symbol()),
    };
    Some(Assertion {
        metric,
        stat,
        op,
        threshold,
        phase,
        text,
    })
}
