//! `sweep` (a phase repeated over a list of loads, one measured step each) and `search` (the
//! highest load at which the objectives hold, found by probing).

use std::time::Duration;

use kdl::{KdlEntry, KdlNode};
use miette::SourceSpan;

use super::cx::{positional, property, Cx, Handler};
use super::values::{Count, Flag, Kind, Name, Number, Percent, Text, DURATION};
use crate::plan::limits::{MAX_CONCURRENCY, MAX_RATE, MAX_REQUESTS};
use crate::plan::{Arrivals, Load, LoadUnit, Objective, Phase, Search, Step};

/// The most steps one sweep may have.
pub(super) const MAX_STEPS: usize = 100;

/// A sweep's loads, as written: a list, or a series from `from` to `to`.
struct Axis {
    unit: LoadUnit,
    values: Vec<f64>,
    span: SourceSpan,
}

/// `rate 2 4 8 16`, `concurrency 1 2 4`, or `rate from=1 to=32 steps=6 scale="geometric"`.
fn axis(cx: &mut Cx, node: &KdlNode, unit: LoadUnit, series_allowed: bool) -> Option<Axis> {
    let name = node.name().value();
    let usage = format!("{name} 1 2 4 8, or {name} from=1 to=32 steps=6 scale=\"geometric\"");
    let props: &[&str] = if series_allowed {
        &["from", "to", "steps", "scale"]
    } else {
        &["from", "to"]
    };
    cx.no_children(node);
    cx.check_entries(node, usize::MAX, props, &usage);
    let (max, positive_kind) = match unit {
        LoadUnit::RequestsPerSecond => (MAX_RATE, true),
        LoadUnit::Concurrency | LoadUnit::Sessions => (MAX_CONCURRENCY as f64, true),
    };
    let number = Number {
        positive: positive_kind,
        max,
    };
    let read = |cx: &mut Cx, e: &KdlEntry| -> Option<f64> {
        let v = number.read(cx, e, &usage)?;
        if unit == LoadUnit::Concurrency && v.fract() != 0.0 {
            cx.error(
                e.span(),
                format!("{v} is not a whole number of concurrent requests"),
                "not whole",
                format!("write it as: {usage}"),
            );
            return None;
        }
        Some(v)
    };
    let listed: Vec<&KdlEntry> = positional(node).collect();
    let from = property(node, "from");
    let to = property(node, "to");
    let values = match (listed.is_empty(), from, to) {
        (false, None, None) => {
            let values: Vec<Option<f64>> = listed.iter().map(|e| read(cx, e)).collect();
            values.into_iter().collect::<Option<Vec<f64>>>()?
        }
        (true, Some(from), Some(to)) => {
            let (from, to) = (read(cx, from)?, read(cx, to)?);
            if to <= from {
                cx.error(
                    node.name().span(),
                    "to= must be above from=",
                    "empty range",
                    format!("write it as: {usage}"),
                );
                return None;
            }
            if !series_allowed {
                vec![from, to]
            } else {
                let steps = cx.prop_or(
                    node,
                    "steps",
                    0,
                    &usage,
                    Count {
                        min: 2,
                        max: MAX_STEPS as u64,
                    },
                )? as usize;
                if steps == 0 {
                    cx.error(
                        node.name().span(),
                        "a series needs steps=",
                        "steps missing",
                        format!("write it as: {usage}"),
                    );
                    return None;
                }
                let scale = cx.prop_or(node, "scale", "linear".to_string(), &usage, Text)?;
                let series: Vec<f64> = (0..steps)
                    .map(|i| {
                        let t = i as f64 / (steps - 1) as f64;
                        match scale.as_str() {
                            "geometric" => from * (to / from).powf(t),
                            _ => from + (to - from) * t,
                        }
                    })
                    .collect();
                if !matches!(scale.as_str(), "linear" | "geometric") {
                    let span = property(node, "scale").map_or(node.span(), |e| e.span());
                    cx.error(
                        span,
                        format!("unknown scale \"{scale}\""),
                        "unknown scale",
                        "scale=\"linear\" (equal steps) or scale=\"geometric\" (equal ratios)",
                    );
                    return None;
                }
                series
                    .into_iter()
                    .map(|v| match unit {
                        LoadUnit::Concurrency | LoadUnit::Sessions => v.round(),
                        LoadUnit::RequestsPerSecond => (v * 1000.0).round() / 1000.0,
                    })
                    .collect()
            }
        }
        (true, None, None) => {
            cx.error(
                node.name().span(),
                format!("`{name}` needs the loads"),
                "loads missing",
                format!("write it as: {usage}"),
            );
            return None;
        }
        _ => {
            cx.error(
                node.name().span(),
                format!("`{name}` takes a list of loads, or from= and to="),
                "list and range",
                format!("write it as: {usage}"),
            );
            return None;
        }
    };
    let mut values = values;
    values.dedup();
    if values.len() > MAX_STEPS {
        cx.error(
            node.name().span(),
            format!(
                "{} steps: more than a sweep may have ({MAX_STEPS})",
                values.len()
            ),
            "too many steps",
            "use fewer loads, or several sweeps",
        );
        return None;
    }
    Some(Axis {
        unit,
        values,
        span: node.name().span(),
    })
}

#[derive(Default)]
struct SweepFields {
    axis: Option<Axis>,
    arrivals: Option<(Arrivals, SourceSpan)>,
    warmup: Option<Duration>,
    duration: Option<Duration>,
    requests: Option<u64>,
    reset_cache: bool,
    broken: bool,
    loads_seen: usize,
}

const SWEEP: &[(&str, Handler<SweepFields>)] = &[
    ("concurrency", |cx, node, f| {
        f.loads_seen += 1;
        f.axis = axis(cx, node, LoadUnit::Concurrency, true);
        f.broken |= f.axis.is_none();
    }),
    ("rate", |cx, node, f| {
        f.loads_seen += 1;
        f.axis = axis(cx, node, LoadUnit::RequestsPerSecond, true);
        f.broken |= f.axis.is_none();
    }),
    ("arrivals", |cx, node, f| {
        match super::phase::arrivals(cx, node) {
            Some(a) => f.arrivals = Some((a, node.name().span())),
            None => f.broken = true,
        }
    }),
    ("warmup", |cx, node, f| {
        f.warmup = cx.single(node, "warmup \"10s\"", DURATION);
        f.broken |= f.warmup.is_none();
    }),
    ("duration", |cx, node, f| {
        f.duration = cx.single(node, "duration \"30s\"", DURATION);
        f.broken |= f.duration.is_none();
    }),
    ("requests", |cx, node, f| {
        f.requests = cx.single(node, "requests 500", Count::positive(MAX_REQUESTS));
        f.broken |= f.requests.is_none();
    }),
    ("reset-cache", |cx, node, f| {
        match cx.single(node, "reset-cache #true (before each step)", Flag) {
            Some(b) => f.reset_cache = b,
            None => f.broken = true,
        }
    }),
];

/// The `sweep` node: its steps, each an unrecorded warmup (when asked) and a measured phase.
pub(super) fn sweep(cx: &mut Cx, node: &KdlNode) -> Option<Vec<Phase>> {
    let usage = "sweep \"concurrency\" { concurrency 1 2 4 8; duration \"30s\" }";
    cx.check_entries(node, 1, &[], usage);
    let name = cx.arg(node, usage, Name);
    let mut f = SweepFields::default();
    cx.walk(node, "in `sweep`", SWEEP, &mut f);
    let name = name?;
    if f.loads_seen == 0 && !f.broken {
        cx.error(
            node.name().span(),
            format!("sweep \"{name}\" has no loads"),
            "no loads",
            "give the loads of its steps: concurrency 1 2 4 8, or rate 2 4 8 16",
        );
        return None;
    }
    if f.loads_seen > 1 {
        cx.error(
            node.name().span(),
            format!("sweep \"{name}\" has more than one axis"),
            "two axes",
            "a sweep varies one load: concurrency, or rate",
        );
        return None;
    }
    if f.broken {
        return None;
    }
    let axis = f.axis?;
    if let (LoadUnit::Concurrency, Some((_, span))) = (axis.unit, f.arrivals) {
        cx.error(
            span,
            "`arrivals` applies only to a rate sweep",
            "no rate here",
            "remove it, or sweep rates: rate 2 4 8 16",
        );
        return None;
    }
    if f.duration.is_none() && f.requests.is_none() {
        cx.error(
            node.name().span(),
            format!("sweep \"{name}\"'s steps never end"),
            "no end",
            "give each step a measured window: duration \"30s\", requests N, or both",
        );
        return None;
    }
    let arrivals = f.arrivals.map_or(Arrivals::Poisson, |(a, _)| a);
    let mut phases = Vec::new();
    for value in axis.values {
        // A sweep varies a rate or users, never sessions (which a search finds).
        let Some(load) = Load::in_unit(axis.unit, value, arrivals, None) else {
            continue;
        };
        let step = |warmup: bool| Step {
            series: name.clone(),
            load_value: value,
            unit: axis.unit,
            warmup,
        };
        if let Some(warmup) = f.warmup {
            phases.push(Phase {
                duration: Some(warmup),
                record: false,
                step: Some(step(true)),
                reset_cache: f.reset_cache,
                // An open loop's window continues its warmup's arrivals, the server as busy as
                // the load makes it. A closed loop's users finish their warmup requests first:
                // else the window would start with twice its concurrency in flight.
                drain: axis.unit == LoadUnit::Concurrency,
                ..Phase::new(
                    format!("{name} warmup @ {}", crate::plan::units::format_load(value)),
                    load.clone(),
                )
            });
        }
        phases.push(Phase {
            duration: f.duration,
            max_requests: f.requests,
            step: Some(step(false)),
            drain: true,
            // Reset before the step: before its warmup when it has one.
            reset_cache: f.reset_cache && f.warmup.is_none(),
            ..Phase::new(
                format!("{name} @ {}", crate::plan::units::format_load(value)),
                load,
            )
        });
    }
    Some(phases)
}

struct SearchFields {
    axis: Option<Axis>,
    arrivals: Option<(Arrivals, SourceSpan)>,
    objective: Option<(Objective, SourceSpan)>,
    precision: f64,
    max_probes: u32,
    max_duration: Duration,
    /// Where `max-duration` was written, when it was.
    max_duration_span: Option<miette::SourceSpan>,
    warmup: Option<Duration>,
    duration: Option<Duration>,
    reset_cache: bool,
    broken: bool,
    loads_seen: usize,
    /// A search of concurrent agent sessions: the sessions it replays.
    sessions: Option<crate::plan::sessions::Sessions>,
}

const SEARCH: &[(&str, Handler<SearchFields>)] = &[
    ("sessions", |cx, node, f| {
        f.loads_seen += 1;
        let usage = "sessions \"agents.jsonl\" from=4 to=64 wait-scale=1.0 idle-cap=\"300s\" start=\"25%..75%\"";
        let props = ["from", "to", "wait-scale", "idle-cap", "start", "live"];
        let sessions = super::phase::sessions_with(cx, node, &props, usage);
        let bound = || Count::positive(MAX_CONCURRENCY);
        let from = cx.prop(node, "from", usage, bound());
        let to = cx.prop(node, "to", usage, bound());
        match (sessions, from, to) {
            (Some(sessions), Ok(Some(low)), Ok(Some(high))) => {
                f.axis = Some(Axis {
                    unit: LoadUnit::Sessions,
                    values: vec![low as f64, high as f64],
                    span: node.name().span(),
                });
                f.sessions = Some(sessions);
            }
            (_, Ok(None), _) | (_, _, Ok(None)) => {
                cx.error(
                    node.name().span(),
                    "a search of sessions needs its range of concurrent sessions",
                    "no range",
                    format!("write it as: {usage}"),
                );
                f.broken = true;
            }
            _ => f.broken = true,
        }
    }),
    ("rate", |cx, node, f| {
        f.loads_seen += 1;
        f.axis = axis(cx, node, LoadUnit::RequestsPerSecond, false);
        f.broken |= f.axis.is_none();
    }),
    ("concurrency", |cx, node, f| {
        f.loads_seen += 1;
        f.axis = axis(cx, node, LoadUnit::Concurrency, false);
        f.broken |= f.axis.is_none();
    }),
    ("arrivals", |cx, node, f| {
        match super::phase::arrivals(cx, node) {
            Some(a) => f.arrivals = Some((a, node.name().span())),
            None => f.broken = true,
        }
    }),
    ("objective", |cx, node, f| {
        let usage = "objective \"sla\" (the plan's sla lines that name no phase)";
        let Some(text) = cx.single(node, usage, Text) else {
            f.broken = true;
            return;
        };
        if text == "sla" {
            f.objective = Some((Objective::Sla, node.name().span()));
        } else {
            cx.error(
                positional(node).next().map_or(node.span(), |e| e.span()),
                format!("unknown objective \"{text}\""),
                "unknown objective",
                "objective \"sla\" judges each probe by the plan's sla lines; or write attainment \"95%\"",
            );
            f.broken = true;
        }
    }),
    ("attainment", |cx, node, f| {
        match cx.single(
            node,
            "attainment \"95%\" (of requests meeting the plan's slo)",
            Percent,
        ) {
            Some(share) if share > 0.0 => {
                f.objective = Some((Objective::Attainment(share), node.name().span()))
            }
            Some(_) => {
                cx.error(
                    node.name().span(),
                    "an attainment of 0% holds at any load",
                    "zero",
                    "write the share of requests that must meet the slo, e.g. attainment \"95%\"",
                );
                f.broken = true;
            }
            None => f.broken = true,
        }
    }),
    ("precision", |cx, node, f| {
        match cx.single(node, "precision \"5%\"", Percent) {
            Some(p) if p >= 0.001 => f.precision = p,
            Some(_) => {
                cx.error(
                    node.name().span(),
                    "a precision below 0.1% cannot be reached through noise",
                    "too fine",
                    "write it as: precision \"5%\"",
                );
                f.broken = true;
            }
            None => f.broken = true,
        }
    }),
    ("max-probes", |cx, node, f| {
        match cx.single(node, "max-probes 12", Count { min: 2, max: 200 }) {
            Some(n) => f.max_probes = n as u32,
            None => f.broken = true,
        }
    }),
    ("max-duration", |cx, node, f| {
        match cx.single(node, "max-duration \"30m\"", DURATION) {
            Some(d) => {
                f.max_duration = d;
                f.max_duration_span = Some(node.span());
            }
            None => f.broken = true,
        }
    }),
    ("warmup", |cx, node, f| {
        f.warmup = cx.single(node, "warmup \"5s\"", DURATION);
        f.broken |= f.warmup.is_none();
    }),
    ("reset-cache", |cx, node, f| {
        match cx.single(node, "reset-cache #true (before each probe)", Flag) {
            Some(b) => f.reset_cache = b,
            None => f.broken = true,
        }
    }),
    ("duration", |cx, node, f| {
        f.duration = cx.single(node, "duration \"30s\"", DURATION);
        f.broken |= f.duration.is_none();
    }),
];

/// The `search` node.
pub(super) fn search(cx: &mut Cx, node: &KdlNode, position: usize) -> Option<Search> {
    let usage = "search \"capacity\" { rate from=1 to=64; duration \"30s\" }";
    cx.check_entries(node, 1, &[], usage);
    let name = cx.arg(node, usage, Name);
    let mut f = SearchFields {
        axis: None,
        arrivals: None,
        objective: None,
        precision: 0.05,
        max_probes: 12,
        max_duration: Duration::from_secs(30 * 60),
        max_duration_span: None,
        warmup: None,
        duration: None,
        reset_cache: false,
        broken: false,
        loads_seen: 0,
        sessions: None,
    };
    cx.walk(node, "in `search`", SEARCH, &mut f);
    let name = name?;
    let problem = if f.loads_seen == 0 {
        Some("give the range to search: rate from=1 to=64, or concurrency from=1 to=256")
    } else if f.loads_seen > 1 {
        Some("a search varies one load: rate, or concurrency")
    } else if f.duration.is_none() {
        Some("give each probe a measured window: duration \"30s\"")
    } else {
        None
    };
    if let Some(help) = problem.filter(|_| !f.broken) {
        cx.error(
            node.name().span(),
            format!("search \"{name}\" is incomplete"),
            "incomplete",
            help,
        );
        return None;
    }
    if f.broken {
        return None;
    }
    let axis = f.axis?;
    let (&[low, high], true) = (axis.values.as_slice(), axis.values.len() == 2) else {
        cx.error(
            axis.span,
            "a search's range is from= and to=",
            "not a range",
            "write it as: rate from=1 to=64",
        );
        return None;
    };
    if let (LoadUnit::Concurrency | LoadUnit::Sessions, Some((_, span))) = (axis.unit, f.arrivals) {
        cx.error(
            span,
            "`arrivals` applies only to a rate search",
            "no rate here",
            "remove it, or search rates: rate from=1 to=64",
        );
        return None;
    }
    let duration = f.duration?;
    let probe = f.warmup.unwrap_or_default() + duration;
    if let Some(span) = f.max_duration_span.filter(|_| f.max_duration < probe) {
        let format = crate::plan::units::format_duration;
        cx.error(
            span,
            format!(
                "max-duration {} is shorter than one probe ({} of warmup and a {} window): the \
                 search could not probe even once",
                format(f.max_duration),
                format(f.warmup.unwrap_or_default()),
                format(duration)
            ),
            "shorter than a probe",
            format!(
                "give the search time for several probes, e.g. max-duration \"{}\"",
                format(probe * 8)
            ),
        );
        return None;
    }
    // The search's probes are bounded in count and in time, so its requests are too.
    let probe_requests = match axis.unit {
        LoadUnit::RequestsPerSecond => high * duration.as_secs_f64(),
        LoadUnit::Concurrency | LoadUnit::Sessions => 0.0,
    };
    if probe_requests * f.max_probes as f64 > MAX_REQUESTS as f64 {
        cx.error(
            axis.span,
            format!(
                "{} probes of up to {} requests: more requests than a plan may ({MAX_REQUESTS})",
                f.max_probes,
                probe_requests.round()
            ),
            "too many requests",
            "lower the range's top, the probes' duration, or max-probes",
        );
        return None;
    }
    Some(Search {
        name,
        unit: axis.unit,
        arrivals: f.arrivals.map_or(Arrivals::Poisson, |(a, _)| a),
        low,
        high,
        precision: f.precision,
        max_probes: f.max_probes,
        max_duration: f.max_duration,
        warmup: f.warmup,
        duration,
        objective: f.objective.map_or(Objective::Sla, |(o, _)| o),
        position,
        reset_cache: f.reset_cache,
        sessions: f.sessions,
    })
}

#[cfg(test)]
mod tests {
    use crate::plan::{parse_plan, Load, LoadUnit, Objective, Plan, PlanErrors};

    const BASE: &str = "target \"sim\"\nworkload { input 64; output 8 }\n";

    fn parse(body: &str) -> Result<Plan, PlanErrors> {
        parse_plan("t.kdl", format!("{BASE}{body}"))
    }

    fn messages(body: &str) -> Vec<String> {
        parse(body)
            .map(|_| Vec::new())
            .unwrap_or_else(|e| e.diagnostics.iter().map(|d| d.message.clone()).collect())
    }

    #[test]
    fn a_sweep_expands_into_a_warmup_and_a_window_per_step() {
        let plan = parse(
            "sweep \"users\" { concurrency 1 2 4; warmup \"5s\"; duration \"30s\" }\nsla { ttft p99 < \"1s\" }",
        )
        .unwrap();
        let names: Vec<&str> = plan.phases.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "users warmup @ 1",
                "users @ 1",
                "users warmup @ 2",
                "users @ 2",
                "users warmup @ 4",
                "users @ 4"
            ]
        );
        assert_eq!(plan.phases[3].load, Load::Concurrency(2));
        assert!(!plan.phases[2].record && plan.phases[3].record);
        // A closed loop's warmup drains before its window; every window drains.
        assert!(plan.phases.iter().all(|p| p.drain));
        assert!(plan.is_stepped());
        let step = plan.phases[3].step.as_ref().unwrap();
        assert_eq!(
            (step.load_value, step.unit, step.warmup),
            (2.0, LoadUnit::Concurrency, false)
        );
    }

    #[test]
    fn a_series_of_rates() {
        let plan =
            parse("sweep \"r\" { rate from=1 to=16 steps=5 scale=\"geometric\"; warmup \"1s\"; duration \"10s\" }")
                .unwrap();
        let loads: Vec<f64> = plan
            .phases
            .iter()
            .filter(|p| p.record)
            .map(|p| p.step.as_ref().unwrap().load_value)
            .collect();
        assert_eq!(loads, [1.0, 2.0, 4.0, 8.0, 16.0]);
        // An open loop's window continues its warmup's arrivals.
        assert!(!plan.phases[0].drain);
        let linear = parse("sweep \"r\" { rate from=2 to=8 steps=4; duration \"10s\" }").unwrap();
        let loads: Vec<f64> = linear
            .phases
            .iter()
            .map(|p| p.step.as_ref().unwrap().load_value)
            .collect();
        assert_eq!(loads, [2.0, 4.0, 6.0, 8.0]);
    }

    #[test]
    fn sweep_mistakes_are_named() {
        for (body, expected) in [
            ("sweep \"s\" { duration \"1s\" }", "has no loads"),
            ("sweep \"s\" { concurrency 1 2 }", "steps never end"),
            (
                "sweep \"s\" { concurrency 1 2; rate 3; duration \"1s\" }",
                "more than one axis",
            ),
            (
                "sweep \"s\" { concurrency 1.5; duration \"1s\" }",
                "not a whole number",
            ),
            (
                "sweep \"s\" { concurrency 1 2; arrivals \"constant\"; duration \"1s\" }",
                "only to a rate sweep",
            ),
            (
                "sweep \"s\" { rate from=4 to=2 steps=3; duration \"1s\" }",
                "to= must be above from=",
            ),
            (
                "sweep \"s\" { rate from=1 to=4 steps=3 scale=\"log\"; duration \"1s\" }",
                "unknown scale",
            ),
        ] {
            let found = messages(body);
            assert!(
                found.iter().any(|m| m.contains(expected)),
                "{body}: {found:?}"
            );
        }
    }

    #[test]
    fn a_search_and_its_objectives() {
        let plan = parse(
            "search \"cap\" { rate from=1 to=64; duration \"30s\"; warmup \"5s\"; precision \"5%\" }\nsla { ttft p99 < \"500ms\"\ncapacity >= 10 }",
        )
        .unwrap();
        let search = plan.search.as_ref().unwrap();
        assert_eq!(
            (search.low, search.high, search.unit),
            (1.0, 64.0, LoadUnit::RequestsPerSecond)
        );
        assert_eq!(search.precision, 0.05);
        assert_eq!(plan.objective, Objective::Sla);
        assert!(plan.phases.is_empty());
        let attained = parse(
            "search \"cap\" { concurrency from=1 to=64; duration \"30s\"; attainment \"95%\" }\nslo ttft=\"500ms\"",
        )
        .unwrap();
        assert_eq!(attained.objective, Objective::Attainment(0.95));
    }

    #[test]
    fn search_mistakes_are_named() {
        for (body, expected) in [
            (
                "search \"c\" { rate from=1 to=8; warmup \"2s\"; duration \"3s\"; max-duration \"4s\" }\nsla { ttft p99 < \"1s\" }",
                "max-duration 4s is shorter than one probe (2s of warmup and a 3s window)",
            ),
            (
                "search \"c\" { rate from=1 to=8; duration \"1s\" }",
                "no objective to judge its probes by",
            ),
            (
                "search \"c\" { rate from=1 to=8; duration \"1s\"; attainment \"95%\" }",
                "counts requests that meet the plan's slo",
            ),
            (
                "phase \"p\" { rate 1; duration \"1s\" }\nsla { capacity >= 3 }",
                "what a search finds",
            ),
            (
                "search \"c\" { duration \"1s\" }\nsla { ttft p99 < \"1s\" }",
                "is incomplete",
            ),
        ] {
            let found = messages(body);
            assert!(
                found.iter().any(|m| m.contains(expected)),
                "{body}: {found:?}"
            );
        }
    }

    #[test]
    fn a_phase_starts_with_an_earlier_one() {
        let plan = parse(
            "phase \"steady\" { rate 2; duration \"1m\" }\nphase \"spike\" { with \"steady\" offset=\"30s\"; at-once 10 }",
        )
        .unwrap();
        let with = plan.phases[1].with.as_ref().unwrap();
        assert_eq!((with.phase.as_str(), with.offset.as_secs()), ("steady", 30));
        let found = messages("phase \"spike\" { with \"later\"; at-once 10 }\nphase \"later\" { rate 2; duration \"1m\" }");
        assert!(
            found
                .iter()
                .any(|m| m.contains("not a phase written before it")),
            "{found:?}"
        );
    }
}
