//! `phase`: one load model (closed loop, open loop, burst), how it ends, and whether it counts.

use std::time::Duration;

use kdl::KdlNode;
use miette::SourceSpan;

use super::cx::{children, positional, property, Cx, Handler};
use super::values::{
    trim_float, Count, Flag, Kind, Name, Number, Text, DURATION, DURATION_OR_ZERO,
};
use crate::plan::limits::{
    GAMMA_CV_RANGE, MAX_BURST, MAX_CONCURRENCY, MAX_DURATION, MAX_RATE, MAX_REQUESTS,
};
use crate::plan::units::format_duration;
use crate::plan::{Arrivals, Load, Phase, RateShape, StartWith};

/// The least a phase that ends once decided runs, unless its `min=` says otherwise: a steady
/// state's first seconds are not yet the server's steady state.
pub(super) const DEFAULT_DECIDED_MIN: Duration = Duration::from_secs(10);

const RATE: Number = Number {
    positive: true,
    max: MAX_RATE,
};
const RATE_OR_ZERO: Number = Number {
    positive: false,
    max: MAX_RATE,
};

struct Fields {
    model: Option<String>,
    endpoint: Option<String>,
    api: Option<(crate::api::Api, SourceSpan)>,
    with: Option<(StartWith, SourceSpan)>,
    loads: Vec<(Load, SourceSpan)>,
    arrivals: Option<(Arrivals, SourceSpan)>,
    duration: Option<Duration>,
    /// `until="decided"` on `duration`, with its `min=`, and where it is written.
    until_decided: Option<(Duration, SourceSpan)>,
    max_requests: Option<u64>,
    record: bool,
    reset_cache: bool,
    /// A child was present but wrong (already reported): no follow-on errors about it.
    broken: bool,
}

impl Fields {
    fn load(&mut self, load: Option<Load>, node: &KdlNode) {
        match load {
            Some(load) => self.loads.push((load, node.name().span())),
            None => self.broken = true,
        }
    }
}

const CHILDREN: &[(&str, Handler<Fields>)] = &[
    ("concurrency", |cx, node, p| {
        let n = cx.single(node, "concurrency 8", Count::positive(MAX_CONCURRENCY));
        p.load(n.map(|n| Load::Concurrency(n as u32)), node);
    }),
    ("rate", |cx, node, p| {
        let shape = rate(cx, node);
        p.load(
            shape.map(|rate| Load::Rate {
                rate,
                arrivals: Arrivals::Poisson,
            }),
            node,
        );
    }),
    ("at-once", |cx, node, p| {
        let n = cx.single(node, "at-once 64", Count::positive(MAX_BURST));
        p.load(n.map(|n| Load::AtOnce(n as u32)), node);
    }),
    ("model", |cx, node, p| {
        p.model = cx.single(node, "model \"meta-llama/Llama-3.1-70B-Instruct\"", Text);
        p.broken |= p.model.is_none();
    }),
    ("api", |cx, node, p| {
        let usage =
            "api \"messages\" (the API this phase's requests speak, instead of the target's)";
        let Some(name) = cx.single(node, usage, Text) else {
            p.broken = true;
            return;
        };
        let span = positional(node).next().map_or(node.span(), |e| e.span());
        match crate::api::Api::from_name(&name) {
            Some(api) => p.api = Some((api, span)),
            None => {
                let names: Vec<String> = crate::api::Api::ALL
                    .iter()
                    .map(|a| format!("\"{}\"", a.as_str()))
                    .collect();
                cx.error(
                    span,
                    format!("unknown api \"{name}\""),
                    "unknown api",
                    format!("use one of {}", names.join(", ")),
                );
                p.broken = true;
            }
        }
    }),
    ("target", |cx, node, p| {
        let usage = "target \"http://10.0.0.2:8000\" (a phase's own server; the plan's target says how to speak to it)";
        let Some(url) = cx.single(node, usage, Text) else {
            p.broken = true;
            return;
        };
        let span = positional(node).next().map_or(node.span(), |e| e.span());
        match reqwest::Url::parse(&url) {
            Ok(parsed) if matches!(parsed.scheme(), "http" | "https") => {
                if !parsed.username().is_empty() || parsed.password().is_some() {
                    cx.secret(span);
                    cx.error(
                        span,
                        "a phase's target holds credentials",
                        "credentials in the URL",
                        "name the credential instead: api-key env=\"VARIABLE\" in the target, or header \"...\" env=\"VARIABLE\"",
                    );
                    p.broken = true;
                } else {
                    p.endpoint = Some(url);
                }
            }
            _ => {
                cx.error(
                    span,
                    format!("\"{url}\" is not an http:// or https:// URL"),
                    "not a URL",
                    usage,
                );
                p.broken = true;
            }
        }
    }),
    ("trace", |cx, node, p| {
        let trace = trace(cx, node);
        p.load(trace.map(Load::Trace), node);
    }),
    ("sessions", |cx, node, p| {
        let sessions = sessions(cx, node);
        p.load(sessions.map(Load::Sessions), node);
    }),
    ("arrivals", |cx, node, p| match arrivals(cx, node) {
        Some(a) => p.arrivals = Some((a, node.name().span())),
        None => p.broken = true,
    }),
    ("duration", |cx, node, p| {
        let usage =
            "duration \"60s\", or duration \"10m\" until=\"decided\" min=\"30s\" (ends once \
                     every assertion on the phase is decided)";
        cx.no_children(node);
        cx.check_entries(node, 1, &["until", "min"], usage);
        p.duration = cx.arg(node, usage, DURATION);
        p.broken |= p.duration.is_none();
        let Some(until) = property(node, "until") else {
            if let Some(min) = property(node, "min") {
                cx.error(
                    min.span(),
                    "min= goes with until=\"decided\"",
                    "a minimum of what",
                    "add until=\"decided\" (the phase may end before its duration), or remove min=",
                );
                p.broken = true;
            }
            return;
        };
        match cx.prop(node, "until", usage, Text) {
            Ok(Some(word)) if word == "decided" => {}
            Ok(_) => {
                cx.error(
                    until.span(),
                    "until= takes \"decided\"",
                    "unknown condition",
                    "until=\"decided\": the phase ends once every assertion on it is decided",
                );
                p.broken = true;
                return;
            }
            Err(()) => {
                p.broken = true;
                return;
            }
        }
        let min = cx.prop_or(node, "min", DEFAULT_DECIDED_MIN, usage, DURATION_OR_ZERO);
        match (min, p.duration) {
            (Some(min), Some(max)) if min > max && property(node, "min").is_some() => {
                cx.error(
                    property(node, "min").map_or(until.span(), |e| e.span()),
                    format!(
                        "min= ({}) is longer than the duration ({})",
                        format_duration(min),
                        format_duration(max)
                    ),
                    "min beyond max",
                    "the duration is the most the phase runs: lower min= or lengthen the duration",
                );
                p.broken = true;
            }
            (Some(min), Some(max)) => p.until_decided = Some((min.min(max), until.span())),
            _ => p.broken = true,
        }
    }),
    ("requests", |cx, node, p| {
        p.max_requests = cx.single(node, "requests 500", Count::positive(MAX_REQUESTS));
        p.broken |= p.max_requests.is_none();
    }),
    ("record", |cx, node, p| {
        match cx.single(node, "record #false", Flag) {
            Some(b) => p.record = b,
            None => p.broken = true,
        }
    }),
    ("reset-cache", |cx, node, p| {
        match cx.single(
            node,
            "reset-cache #true (the server's prefix cache emptied before it)",
            Flag,
        ) {
            Some(b) => p.reset_cache = b,
            None => p.broken = true,
        }
    }),
    ("with", |cx, node, p| {
        let usage = "with \"steady\" offset=\"30s\" (start alongside an earlier phase)";
        cx.no_children(node);
        cx.check_entries(node, 1, &["offset"], usage);
        let phase = cx.arg(node, usage, Text);
        let offset = cx.prop_or(node, "offset", Duration::ZERO, usage, DURATION_OR_ZERO);
        match (phase, offset) {
            (Some(phase), Some(offset)) => {
                let span = super::cx::positional(node)
                    .next()
                    .map_or(node.name().span(), |e| e.span());
                p.with = Some((StartWith { phase, offset }, span));
            }
            _ => p.broken = true,
        }
    }),
];

fn rate(cx: &mut Cx, node: &KdlNode) -> Option<RateShape> {
    let usage = "rate 16, or rate from=1 to=16";
    cx.no_children(node);
    cx.check_entries(node, 1, &["from", "to"], usage);
    let fixed = positional(node).next();
    match (fixed, property(node, "from"), property(node, "to")) {
        (Some(entry), None, None) => RATE.read(cx, entry, usage).map(RateShape::Constant),
        (None, Some(from), Some(to)) => {
            let from = RATE_OR_ZERO.read(cx, from, usage);
            let to = RATE.read(cx, to, usage);
            from.zip(to).map(|(from, to)| RateShape::Ramp { from, to })
        }
        (None, None, None) => {
            cx.error(
                node.name().span(),
                "`rate` needs a value",
                "rate missing",
                "requests per second: rate 16, or a linear ramp: rate from=1 to=16",
            );
            None
        }
        (Some(entry), _, _) => {
            cx.error(
                entry.span(),
                "`rate` has both a fixed value and from/to",
                "fixed rate",
                "use either rate 16, or rate from=1 to=16",
            );
            None
        }
        (None, Some(one), None) | (None, None, Some(one)) => {
            cx.error(
                one.span(),
                "a ramp needs both from= and to=",
                "half a ramp",
                "write it as: rate from=1 to=16",
            );
            None
        }
    }
}

pub(super) fn arrivals(cx: &mut Cx, node: &KdlNode) -> Option<Arrivals> {
    let usage = "arrivals \"poisson\" (or \"constant\", or \"gamma\" cv=2.0)";
    cx.no_children(node);
    cx.check_entries(node, 1, &["cv"], usage);
    let kind = cx.arg(node, usage, Text)?;
    let cv = property(node, "cv");
    match (kind.as_str(), cv) {
        ("poisson", None) => Some(Arrivals::Poisson),
        ("constant", None) => Some(Arrivals::Constant),
        ("gamma", Some(entry)) => {
            let cv_kind = Number {
                positive: true,
                max: GAMMA_CV_RANGE.1,
            };
            let cv = cv_kind.read(cx, entry, usage)?;
            if cv < GAMMA_CV_RANGE.0 {
                cx.error(
                    entry.span(),
                    format!(
                        "{cv} is out of range: it must be from {} to {}",
                        GAMMA_CV_RANGE.0, GAMMA_CV_RANGE.1
                    ),
                    "out of range",
                    "a coefficient of variation of 1.0 is Poisson; below 1 smoother, above 1 burstier",
                );
                return None;
            }
            Some(Arrivals::Gamma { cv })
        }
        ("gamma", None) => {
            cx.error(
                node.name().span(),
                "gamma arrivals need cv=",
                "cv missing",
                "give the coefficient of variation: arrivals \"gamma\" cv=2.0 (1.0 is Poisson)",
            );
            None
        }
        ("poisson" | "constant", Some(cv)) => {
            cx.error(
                cv.span(),
                "cv= applies only to gamma arrivals",
                "not for this kind",
                "remove cv=, or use arrivals \"gamma\" cv=2.0",
            );
            None
        }
        (other, _) => {
            cx.error(
                positional(node).next().map_or(node.span(), |e| e.span()),
                format!("unknown arrival process \"{other}\""),
                "unknown arrivals",
                "use \"poisson\", \"constant\" or \"gamma\" cv=X",
            );
            None
        }
    }
}

/// A valid phase, and how many requests it is expected to schedule (0 for a closed loop ended
/// by time alone, whose requests are drawn as it runs).
pub(super) struct CheckedPhase {
    pub phase: Phase,
    pub expected_requests: f64,
    /// Where its load model is written, for diagnostics about the plan as a whole.
    pub load_span: SourceSpan,
    /// Where its `with` names another phase.
    pub with_span: Option<SourceSpan>,
    /// Where it names an API of its own.
    pub api_span: Option<SourceSpan>,
    /// Where its `until="decided"` is written.
    pub until_span: Option<SourceSpan>,
}

/// `sessions "agents.jsonl" concurrent=8 wait-scale=1.0 idle-cap="300s" start="25%..75%"`:
/// agent sessions replayed so many at once; the file is checked here, streamed (every mistake
/// said with its file, line and field), and read again as the phase runs.
fn sessions(cx: &mut Cx, node: &KdlNode) -> Option<crate::plan::sessions::Sessions> {
    let usage = "sessions \"agents.jsonl\" concurrent=8 wait-scale=1.0 idle-cap=\"300s\" start=\"25%..75%\"";
    sessions_with(
        cx,
        node,
        &[
            "concurrent",
            "rate",
            "max-in-flight",
            "wait-scale",
            "idle-cap",
            "start",
            "live",
        ],
        usage,
    )
}

/// A `sessions` node with properties `props` (a phase's, or a search's, whose `from=` and
/// `to=` give its range).
pub(super) fn sessions_with(
    cx: &mut Cx,
    node: &KdlNode,
    props: &[&str],
    usage: &str,
) -> Option<crate::plan::sessions::Sessions> {
    cx.no_children(node);
    cx.check_entries(node, 1, props, usage);
    let name = cx.arg(node, usage, Text);
    let concurrent = cx.prop_or(
        node,
        "concurrent",
        1,
        usage,
        Count::positive(MAX_CONCURRENCY),
    );
    let wait_scale = cx.prop_or(
        node,
        "wait-scale",
        1.0,
        usage,
        Number {
            positive: false,
            max: 1000.0,
        },
    );
    let idle_cap = cx.prop(node, "idle-cap", usage, DURATION).ok();
    let rate = cx
        .prop(
            node,
            "rate",
            usage,
            Number {
                positive: true,
                max: MAX_RATE,
            },
        )
        .ok();
    let max_in_flight = cx
        .prop(
            node,
            "max-in-flight",
            usage,
            Count::positive(MAX_CONCURRENCY),
        )
        .ok();
    if let (Some(entry), Some(Some(_))) = (property(node, "concurrent"), rate) {
        cx.error(
            entry.span(),
            "sessions start either so many at once (`concurrent=`) or at a rate (`rate=`), not both",
            "one or the other",
            format!("write it as: {usage}, or with rate=2 (sessions per second) instead of concurrent="),
        );
        return None;
    }
    let start = start_window(cx, node, usage);
    let live = cx.prop_or(node, "live", false, usage, Flag);
    let (name, concurrent, wait_scale, idle_cap, start, rate, max_in_flight, live) = (
        name?,
        concurrent?,
        wait_scale?,
        idle_cap?,
        start?,
        rate?,
        max_in_flight?,
        live?,
    );
    let span = positional(node).next().map_or(node.span(), |e| e.span());
    let path = super::datafile::resolve(cx, &name);
    let mut sessions = crate::plan::sessions::Sessions {
        shown: name.clone(),
        path: path.clone(),
        concurrent: concurrent as u32,
        rate,
        max_in_flight: max_in_flight.map(|n| n as u32),
        wait_scale,
        idle_cap,
        start_window: start,
        live,
        summary: Default::default(),
    };
    if cx.check_files {
        match crate::plan::sessions::check_file(&path, &path.display().to_string(), 5) {
            Ok(summary) if summary.calls == 0 => {
                cx.error(
                    span,
                    format!("session file {} has no call", path.display()),
                    "empty",
                    usage,
                );
                return None;
            }
            Ok(summary) => sessions.summary = summary,
            Err(errors) => {
                for error in errors {
                    let label = error.field.clone().unwrap_or_else(|| "here".into());
                    cx.error(span, error.to_string(), label, error.help);
                }
                return None;
            }
        }
    }
    Some(sessions)
}

/// `start="25%..75%"`: where in its calls each session starts, drawn per session.
fn start_window(cx: &mut Cx, node: &KdlNode, usage: &str) -> Option<Option<(f64, f64)>> {
    let Some(entry) = property(node, "start") else {
        return Some(None);
    };
    let bad = |cx: &mut Cx| {
        cx.error(
            entry.span(),
            "a start window is two shares of a session's calls, the first not above the second",
            "not a window",
            format!("write it as: {usage} (0% starts every session at its first call)"),
        );
        None
    };
    let Some(text) = entry.value().as_string() else {
        return bad(cx);
    };
    let Some((from, to)) = text.split_once("..") else {
        return bad(cx);
    };
    let share = |part: &str| {
        crate::plan::units::parse_percent(part.trim())
            .ok()
            .filter(|v| (0.0..=1.0).contains(v))
    };
    match (share(from), share(to)) {
        (Some(from), Some(to)) if from <= to => Some(Some((from, to))),
        _ => bad(cx),
    }
}

/// `trace "mooncake.jsonl" speed=2 from="10m" block=512`: an open loop replaying a trace.
fn trace(cx: &mut Cx, node: &KdlNode) -> Option<crate::plan::data::Trace> {
    let usage = "trace \"trace.jsonl\" speed=2.0 from=\"0s\" block=512";
    cx.no_children(node);
    cx.check_entries(node, 1, &["speed", "from", "block"], usage);
    let name = cx.arg(node, usage, Text);
    let speed = cx.prop_or(
        node,
        "speed",
        1.0,
        usage,
        Number {
            positive: true,
            max: 1000.0,
        },
    );
    let from = cx.prop_or(node, "from", Duration::ZERO, usage, DURATION_OR_ZERO);
    let block = cx.prop_or(node, "block", 512, usage, Count::positive(1 << 20));
    let (name, speed, from, block) = (name?, speed?, from?, block?);
    let span = positional(node).next().map_or(node.span(), |e| e.span());
    let mut trace = crate::plan::data::Trace {
        shown: name.clone(),
        speed,
        from,
        block_tokens: block as u32,
        rows: std::sync::Arc::new(Vec::new()),
        format: crate::plan::data::TraceFormat::Mooncake,
        left_out: 0,
        sha256: String::new(),
    };
    if cx.check_files {
        let (path, text, sha) = super::datafile::read(cx, span, &name, "trace")?;
        match crate::plan::data::read_trace(&text) {
            Ok(read) if read.rows.is_empty() => {
                let failed = match read.left_out {
                    0 => String::new(),
                    1 => " but 1 failed request, left out".to_string(),
                    n => format!(" but {n} failed requests, left out"),
                };
                cx.error(
                    span,
                    format!("trace {} has no rows{failed}", path.display()),
                    "empty",
                    usage,
                );
                return None;
            }
            Ok(read) => {
                trace.rows = std::sync::Arc::new(read.rows);
                trace.format = read.format;
                trace.left_out = read.left_out;
                trace.sha256 = sha;
            }
            Err(errors) => {
                let shown = path.display().to_string();
                for error in errors.into_iter().take(5) {
                    cx.error_in_data(&shown, text.clone(), error);
                }
                return None;
            }
        }
    }
    Some(trace)
}

/// The `phase` node.
pub(super) fn phase(cx: &mut Cx, node: &KdlNode) -> Option<CheckedPhase> {
    let usage = "phase \"steady\" { rate 16; duration \"3m\" }";
    cx.check_entries(node, 1, &[], usage);
    let name = cx.arg(node, usage, Name);
    let mut fields = Fields {
        model: None,
        endpoint: None,
        api: None,
        with: None,
        loads: Vec::new(),
        arrivals: None,
        duration: None,
        until_decided: None,
        max_requests: None,
        record: true,
        reset_cache: false,
        broken: false,
    };
    cx.walk(node, "in `phase`", CHILDREN, &mut fields);
    let name = name?;
    let (mut load, load_span) = one_load(cx, node, &name, &mut fields)?;
    let mut ok = !fields.broken;
    if let Some((kind, span)) = fields.arrivals {
        ok &= shape_arrivals(cx, &mut load, kind, span);
    }
    let (duration, max_requests) = (fields.duration, fields.max_requests);
    let end = End {
        duration,
        max_requests,
        load_span,
    };
    if !(ends(cx, node, &name, &load, &end, ok) && ok) {
        return None;
    }
    let expected_requests = expected_requests(cx, &name, &load, &end)?;
    let (with, with_span) = match fields.with {
        Some((with, span)) => (Some(with), Some(span)),
        None => (None, None),
    };
    Some(CheckedPhase {
        phase: Phase {
            duration,
            max_requests,
            record: fields.record,
            with,
            model: fields.model,
            endpoint: fields.endpoint,
            api: fields.api.map(|(api, _)| api),
            reset_cache: fields.reset_cache,
            until_decided: fields.until_decided.map(|(min, _)| min),
            ..Phase::new(name, load)
        },
        expected_requests,
        load_span,
        with_span,
        api_span: fields.api.map(|(_, span)| span),
        until_span: fields.until_decided.map(|(_, span)| span),
    })
}

/// The phase's one load model (and where it is written); `None`, said, when it has none or
/// several.
fn one_load(
    cx: &mut Cx,
    node: &KdlNode,
    name: &str,
    fields: &mut Fields,
) -> Option<(Load, SourceSpan)> {
    let load_help = "give the phase exactly one load model: concurrency N (closed loop), \
                     rate R or rate from=A to=B (open loop), or at-once N (a burst)";
    match fields.loads.len() {
        0 => {
            if !fields.broken {
                cx.consequence(
                    node.name().span(),
                    format!("phase \"{name}\" has no load model"),
                    "no load",
                    load_help,
                );
            }
            None
        }
        1 => Some(fields.loads.remove(0)),
        _ => {
            cx.error(
                fields.loads[1].1,
                format!("phase \"{name}\" has more than one load model"),
                "second load model",
                load_help,
            );
            None
        }
    }
}

/// An open loop's arrivals as `arrivals` shapes them; `false`, said, for a closed loop.
fn shape_arrivals(cx: &mut Cx, load: &mut Load, kind: Arrivals, span: SourceSpan) -> bool {
    match load {
        Load::Rate { arrivals, .. } => {
            *arrivals = kind;
            true
        }
        Load::Concurrency(_) | Load::AtOnce(_) | Load::Trace(_) | Load::Sessions(_) => {
            cx.error(
                span,
                "`arrivals` applies only to open-loop phases",
                "no rate here",
                "arrivals shape a `rate` phase; remove it, or use rate R",
            );
            false
        }
    }
}

/// How a phase ends, and where its load is written (for diagnostics).
struct End {
    duration: Option<Duration>,
    max_requests: Option<u64>,
    load_span: SourceSpan,
}

/// Whether the phase ends as its load needs (a burst ends by itself, a ramp needs a duration,
/// anything else a duration or a count); said when not. `ok`: no mistake was found before, so
/// the later checks that assume a well-formed phase apply.
fn ends(cx: &mut Cx, node: &KdlNode, name: &str, load: &Load, end: &End, ok: bool) -> bool {
    let (duration, max_requests, load_span) = (end.duration, end.max_requests, end.load_span);
    match load {
        Load::AtOnce(_) => {
            if let Some(extra) = children(node)
                .iter()
                .find(|c| matches!(c.name().value(), "duration" | "requests"))
            {
                cx.error(
                    extra.name().span(),
                    "an at-once phase has no duration or request limit",
                    "not for a burst",
                    "a burst sends its N requests together and ends when they finish; remove this",
                );
                return false;
            }
        }
        Load::Rate {
            rate: RateShape::Ramp { .. },
            ..
        } if duration.is_none() && ok => {
            cx.error(
                load_span,
                "a ramp needs a `duration` to ramp over",
                "ramp without duration",
                "add duration \"60s\" to the phase",
            );
            return false;
        }
        // A replay ends with its trace.
        Load::Trace(_) => {}
        // Sessions end with their file (each run once), or with the duration (the file again
        // and again); a count of calls would cut a session anywhere.
        Load::Sessions(_) => {
            if let Some(extra) = children(node)
                .iter()
                .find(|c| c.name().value() == "requests")
            {
                cx.error(
                    extra.name().span(),
                    "a sessions phase has no request limit",
                    "not for sessions",
                    "it ends when every session of its file has run, or at its duration (starting the file's sessions again until then); remove this",
                );
                return false;
            }
        }
        Load::Concurrency(_) | Load::Rate { .. }
            if duration.is_none() && max_requests.is_none() && ok =>
        {
            cx.error(
                node.name().span(),
                format!("phase \"{name}\" never ends"),
                "no end",
                "add duration \"60s\", requests N, or both (the phase ends at whichever comes first)",
            );
            return false;
        }
        Load::Concurrency(_) | Load::Rate { .. } => {}
    }
    true
}

/// How many requests the phase sends, as planned; `None`, said, when it would send none (a
/// replay's empty window, a rate too slow for its duration) or could never end by its count.
fn expected_requests(cx: &mut Cx, name: &str, load: &Load, end: &End) -> Option<f64> {
    let (duration, max_requests, load_span) = (end.duration, end.max_requests, end.load_span);
    Some(match load {
        Load::AtOnce(n) => *n as f64,
        Load::Concurrency(_) => max_requests.map_or(0.0, |n| n as f64),
        Load::Trace(trace) => {
            let rows = trace.window(duration, max_requests).count();
            if rows == 0 && cx.check_files {
                cx.error(
                    load_span,
                    format!("phase \"{name}\" replays no row of its trace"),
                    "empty window",
                    "the trace has no row after `from` within the phase's duration; move `from` or lengthen the phase",
                );
                return None;
            }
            rows as f64
        }
        Load::Rate { rate, .. } => expected_at_rate(cx, rate.mean(), end)?,
        // Its calls, when it runs its file once; decided as it runs when it lasts a duration.
        Load::Sessions(sessions) => match duration {
            Some(_) => 0.0,
            None => sessions.summary.calls as f64,
        },
    })
}

/// How many requests an open loop at a mean `mean` per second sends before it ends.
fn expected_at_rate(cx: &mut Cx, mean: f64, end: &End) -> Option<f64> {
    let (duration, max_requests, load_span) = (end.duration, end.max_requests, end.load_span);
    Some(match duration {
        Some(duration) => {
            let expected = mean * duration.as_secs_f64();
            if expected < 1.0 && max_requests.is_none_or(|n| n as f64 > expected) {
                cx.error(
                    load_span,
                    format!(
                        "at a mean of {}/s for {}, this phase sends {} requests on average: fewer than one",
                        trim_float(mean),
                        format_duration(duration),
                        trim_float(expected)
                    ),
                    "too slow to send",
                    "raise the rate or lengthen the duration",
                );
                return None;
            }
            max_requests.map_or(expected, |n| expected.min(n as f64))
        }
        None => {
            // Ended by count alone (a ramp has a duration): that many requests at the
            // rate must fit in the longest phase allowed.
            let n = max_requests.unwrap_or(0) as f64;
            if n / mean > MAX_DURATION.as_secs_f64() {
                cx.error(
                    load_span,
                    format!(
                        "at {}/s, {} requests take longer than the longest phase allowed ({} days)",
                        trim_float(mean),
                        n,
                        MAX_DURATION.as_secs() / 86400
                    ),
                    "too slow to end",
                    "raise the rate, lower `requests`, or give the phase a `duration`",
                );
                return None;
            }
            n
        }
    })
}
