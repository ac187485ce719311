//! The KDL walker: turns plan text into a [`Plan`], collecting every mistake.
//!
//! One file per section of the language: [`values`] (one reader per kind of value, with its
//! bounds), [`target`], [`workload`], [`phase`], [`sla`] (`sla`, `slo`, `regression`) and
//! [`sim`]; [`cx`] holds the shapes every handler shares. Before the KDL parser runs, [`scan`]
//! refuses plans too large or nested too deep to parse safely, and when the KDL has a syntax
//! error, the top-level nodes that parse on their own are still checked for meaning, so that one
//! misplaced quote does not hide every other mistake.

mod cx;
mod phase;
#[cfg(test)]
mod proptests;
mod scan;
mod sim;
mod sla;
mod target;
mod values;
mod workload;

use std::collections::HashSet;
use std::sync::Arc;

use kdl::{KdlDocument, KdlNode, KdlValue};
use miette::SourceSpan;

use super::limits::{MAX_NESTING, MAX_PHASES, MAX_PLAN_BYTES, MAX_REQUESTS};
use super::{Plan, PlanErrors, PlanSource, SimSettings};
use cx::{first_arg_span, positional, Cx, Handler};
use values::{Seed, Text};

/// Parses and validates plan text. `file_name` is what diagnostics show, and what relative
/// paths in the plan are relative to.
pub fn parse_plan(file_name: &str, text: String) -> Result<Plan, PlanErrors> {
    parse_with(file_name, text, true)
}

/// Parses a plan kept in a report directory, to judge its records again: files it names (a
/// tokenizer) are not needed for that, so they are not looked for.
pub fn parse_archived_plan(file_name: &str, text: String) -> Result<Plan, PlanErrors> {
    parse_with(file_name, text, false)
}

/// Parses a simulator profile file: a `sim { ... }` block, as in a plan.
pub fn parse_sim_profile(file_name: &str, text: String) -> Result<SimSettings, PlanErrors> {
    let mut cx = Cx::new(file_name, Arc::new(text), true);
    let Some((document, _)) = read_document(&mut cx) else {
        return Err(finish(&mut cx));
    };
    let mut settings = None;
    for node in document.nodes() {
        if node.name().value() == "sim" && settings.is_none() {
            settings = Some(sim::sim(&mut cx, node).0);
        } else {
            cx.unknown_node(node, "in a simulator profile", "one sim { ... } block");
        }
    }
    if settings.is_none() && cx.diagnostics.is_empty() {
        cx.error(
            SourceSpan::from((0, 0)),
            "the profile has no `sim` block",
            "sim missing",
            "write sim { profile \"tiny\"; engine { max-seqs 32 } }",
        );
    }
    match settings {
        Some(settings) if cx.diagnostics.is_empty() => Ok(settings),
        _ => Err(finish(&mut cx)),
    }
}

fn parse_with(file_name: &str, text: String, check_files: bool) -> Result<Plan, PlanErrors> {
    let mut cx = Cx::new(file_name, Arc::new(text), check_files);
    let Some((document, unreadable)) = read_document(&mut cx) else {
        return Err(finish(&mut cx));
    };
    let plan = top_level(&mut cx, &document, &unreadable);
    match plan {
        Some(plan) if cx.diagnostics.is_empty() => Ok(plan),
        _ => Err(finish(&mut cx)),
    }
}

fn finish(cx: &mut Cx) -> PlanErrors {
    // Diagnostics in file order read best.
    cx.diagnostics.sort_by_key(|d| d.span.offset());
    // A secret written in the plan is never quoted back: every diagnostic shows the plan with
    // it starred out (byte for byte, so that every span still points where it did).
    if !cx.secret_spans.is_empty() {
        let mut masked = cx.text.as_bytes().to_vec();
        for span in &cx.secret_spans {
            let end = (span.offset() + span.len()).min(masked.len());
            for byte in &mut masked[span.offset().min(end)..end] {
                if !matches!(*byte, b'"' | b'\n') {
                    *byte = b'*';
                }
            }
        }
        let masked = Arc::new(String::from_utf8_lossy(&masked).into_owned());
        for diagnostic in &mut cx.diagnostics {
            diagnostic.source_code =
                miette::NamedSource::new(diagnostic.source_code.name(), masked.clone());
        }
    }
    PlanErrors {
        diagnostics: std::mem::take(&mut cx.diagnostics),
        message: None,
    }
}

/// The top-level nodes that could not be read (a syntax error inside them), by what they start
/// with, so that the meaning checks do not call them missing.
#[derive(Default)]
struct Unreadable {
    /// Their node names (`phase`, `target`...).
    names: Vec<String>,
    /// The names of unreadable phases, where they could be read (`phase "steady" {`).
    phase_names: Vec<String>,
    /// An unreadable phase whose name could not be read either.
    unnamed_phase: bool,
}

/// The KDL document of the plan, after the size and nesting limits. On a syntax error, every
/// syntax error is a diagnostic, and the document holds the top-level nodes that parse on their
/// own; `None` when nothing can be checked for meaning.
fn read_document(cx: &mut Cx) -> Option<(KdlDocument, Unreadable)> {
    let text = cx.text.clone();
    if text.len() as u64 > MAX_PLAN_BYTES {
        cx.error(
            SourceSpan::from((0, 0)),
            format!(
                "the plan is {} bytes: more than the largest plan allowed ({} bytes)",
                text.len(),
                MAX_PLAN_BYTES
            ),
            "too large",
            "a plan describes a benchmark; put data (prompts, traces) in files it names",
        );
        return None;
    }
    let outline = scan::outline(&text, MAX_NESTING);
    if let Some(at) = outline.too_deep_at {
        cx.error(
            SourceSpan::from((at, 1)),
            format!("blocks nest deeper than {MAX_NESTING} levels here"),
            "too deep",
            "a plan needs a few levels of blocks (phase \"x\" { ... }); remove the extra braces",
        );
        return None;
    }
    let errors = match KdlDocument::parse_v2(&text) {
        Ok(document) => return Some((document, Unreadable::default())),
        Err(errors) => errors,
    };
    for diagnostic in errors.diagnostics {
        let message = diagnostic
            .message
            .unwrap_or_else(|| "this is not valid KDL".to_string());
        let help = unit_hint(&text, diagnostic.span.offset())
            .or(diagnostic.help)
            .unwrap_or_else(|| {
                "plans are KDL 2.0; values with units are strings (timeout \"60s\"), \
                 booleans are #true and #false"
                    .to_string()
            });
        cx.error(
            diagnostic.span,
            message,
            diagnostic.label.unwrap_or_else(|| "here".into()),
            help,
        );
    }
    // Blank out (keeping every byte offset) each top-level node that does not parse alone, and
    // check the rest for meaning.
    let mut kept = text.as_bytes().to_vec();
    let mut unreadable = Unreadable::default();
    for node in &outline.nodes {
        let piece = &text[node.clone()];
        if KdlDocument::parse_v2(piece).is_ok() {
            continue;
        }
        let name: String = piece
            .chars()
            .take_while(|c| !c.is_whitespace() && !matches!(c, '{' | ';' | '"'))
            .collect();
        if name == "phase" {
            match quoted_name(piece) {
                Some(phase) => unreadable.phase_names.push(phase),
                None => unreadable.unnamed_phase = true,
            }
        }
        unreadable.names.push(name);
        for byte in &mut kept[node.clone()] {
            if *byte != b'\n' {
                *byte = b' ';
            }
        }
    }
    let kept = String::from_utf8(kept).ok()?;
    let document = KdlDocument::parse_v2(&kept).ok()?;
    Some((document, unreadable))
}

/// `"steady"` in `phase "steady" {`.
fn quoted_name(piece: &str) -> Option<String> {
    let rest = piece
        .strip_prefix("phase")?
        .trim_start()
        .strip_prefix('"')?;
    let end = rest.find(['"', '\n'])?;
    Some(rest[..end].to_string())
}

/// A help line for a number with a unit written bare (`duration 2m`, `error-rate < 1%`), which
/// KDL reads as a broken number.
fn unit_hint(text: &str, offset: usize) -> Option<String> {
    let bytes = text.as_bytes();
    let is_token = |b: u8| b.is_ascii_alphanumeric() || b == b'.' || b == b'%';
    let mut start = offset.min(bytes.len());
    while start > 0 && is_token(bytes[start - 1]) {
        start -= 1;
    }
    let mut end = offset.min(bytes.len());
    while end < bytes.len() && (is_token(bytes[end]) || bytes[end] >= 0x80) {
        end += 1;
    }
    let token = text.get(start..end)?;
    let digits = token.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
    let unit = &token[digits..];
    let unit_like = !unit.is_empty() && unit.chars().all(|c| c.is_alphabetic() || c == '%');
    (digits > 0 && unit_like).then(|| {
        format!(
            "a number with a unit is a string in KDL: write \"{token}\" (durations such as \"250ms\", \
             \"30s\", \"2m\"; percentages such as \"1%\")"
        )
    })
}

/// What the `plan` node holds.
struct Header {
    name: Option<String>,
    description: Option<String>,
    seed: u64,
}

const HEADER: &[(&str, Handler<Header>)] = &[
    ("description", |cx, node, h| {
        h.description = cx.single(node, "description \"what this plan measures\"", Text);
    }),
    ("seed", |cx, node, h| {
        if let Some(seed) = cx.single(node, "seed 42", Seed) {
            h.seed = seed;
        }
    }),
];

const TOP_LEVEL: &str = "plan, target, workload, phase, sla, slo, regression, abort, sim";
/// Blocks a plan has at most one of.
const ONCE: [&str; 7] = [
    "plan",
    "target",
    "workload",
    "sim",
    "slo",
    "regression",
    "abort",
];

fn top_level(cx: &mut Cx, document: &KdlDocument, unreadable: &Unreadable) -> Option<Plan> {
    let nodes = document.nodes();
    let mut header = Header {
        name: None,
        description: None,
        seed: 0,
    };
    let mut header_ok = true;
    let mut target = None;
    let mut workload = None;
    let mut sim = None;
    let mut slo = None;
    let mut phases = Vec::new();
    let mut judging: Vec<&KdlNode> = Vec::new();
    let mut seen: Vec<&str> = Vec::new();
    let has = |name: &str| {
        nodes.iter().any(|n| n.name().value() == name) || unreadable.names.iter().any(|n| n == name)
    };
    let has_slo = has("slo");

    // Every phase name written, valid or not: duplicates are found whatever else is wrong.
    let phase_nodes: Vec<&KdlNode> = nodes
        .iter()
        .filter(|n| n.name().value() == "phase")
        .collect();
    let mut phase_names: Vec<String> = unreadable.phase_names.clone();
    let mut duplicates = HashSet::new();
    for node in &phase_nodes {
        if let Some(KdlValue::String(name)) = positional(node).next().map(|e| e.value()) {
            if phase_names.contains(name) {
                duplicates.insert(first_arg_span(node).offset());
                cx.error(
                    first_arg_span(node),
                    format!("phase \"{name}\" is defined twice"),
                    "duplicate name",
                    "give every phase its own name; assertions refer to phases by name",
                );
            } else {
                phase_names.push(name.clone());
            }
        }
    }
    if let Some(extra) = phase_nodes.get(MAX_PHASES) {
        cx.error(
            extra.name().span(),
            format!("the plan has more than {MAX_PHASES} phases"),
            "too many phases",
            "merge phases, or split the plan into several plans",
        );
        return None;
    }

    let mut expected_requests = 0.0;
    for node in nodes {
        let name = node.name().value();
        if ONCE.contains(&name) {
            if seen.contains(&name) {
                cx.error(
                    node.name().span(),
                    format!("`{name}` appears twice"),
                    "second one",
                    format!("a plan has one `{name}` block; merge the two"),
                );
                continue;
            }
            seen.push(name);
        }
        match name {
            "plan" => {
                let usage = "plan \"name\" { description \"...\"; seed 42 }";
                cx.check_entries(node, 1, &[], usage);
                header.name = cx.arg(node, usage, Text);
                header_ok = header.name.is_some();
                cx.walk(node, "in `plan`", HEADER, &mut header);
            }
            "target" => target = target::target(cx, node),
            "workload" => workload = workload::workload(cx, node),
            "phase" => {
                let Some(checked) = phase::phase(cx, node) else {
                    continue;
                };
                if duplicates.contains(&first_arg_span(node).offset()) {
                    continue;
                }
                let before = expected_requests;
                expected_requests += checked.expected_requests;
                if expected_requests > MAX_REQUESTS as f64 && before <= MAX_REQUESTS as f64 {
                    cx.error(
                        checked.load_span,
                        format!(
                            "with this phase the plan schedules about {} requests: more than a plan may ({MAX_REQUESTS})",
                            expected_requests.round()
                        ),
                        "too many requests",
                        "lower this phase's rate, duration or requests (or those of the phases before it)",
                    );
                }
                phases.push(checked.phase);
            }
            "sla" | "regression" | "abort" => judging.push(node),
            "slo" => slo = sla::slo(cx, node),
            "sim" => sim = Some(sim::sim(cx, node)),
            _ => cx.unknown_node(node, "at the top level", TOP_LEVEL),
        }
    }

    let whole_file = SourceSpan::from((0, 0));
    if !has("target") {
        cx.error(
            whole_file,
            "the plan has no `target`",
            "target missing",
            "add a target block, e.g. target \"http://127.0.0.1:8000\" { model \"my-model\" } or target \"sim\"",
        );
    }
    if !has("workload") {
        cx.error(
            whole_file,
            "the plan has no `workload`",
            "workload missing",
            "add a workload block, e.g. workload { input 512; output 128 }",
        );
    }
    if !has("phase") {
        cx.error(
            whole_file,
            "the plan has no `phase`",
            "phase missing",
            "add at least one phase, e.g. phase \"steady\" { rate 4; duration \"30s\" }",
        );
    }

    let unrecorded: Vec<String> = phases
        .iter()
        .filter(|p| !p.record)
        .map(|p| p.name.clone())
        .collect();
    let scope = sla::Scope {
        phases: &phase_names,
        unrecorded: &unrecorded,
        has_slo,
        phases_incomplete: unreadable.unnamed_phase,
    };
    let mut assertions = Vec::new();
    let mut regression = Vec::new();
    let mut abort = Vec::new();
    for node in judging {
        match node.name().value() {
            "sla" => assertions.extend(sla::sla(cx, node, &scope)),
            "regression" => regression.extend(sla::regression(cx, node, &scope)),
            _ => abort.extend(sla::abort(cx, node, &scope)),
        }
    }

    let name = match header.name {
        Some(name) => name,
        None if header_ok => std::path::Path::new(&cx.file_name)
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "plan".into()),
        None => return None,
    };
    let seed = header.seed;
    let sim = match sim {
        Some((sim, true)) => sim,
        Some((sim, false)) => SimSettings { seed, ..sim },
        None => SimSettings {
            seed,
            ..SimSettings::default()
        },
    };
    Some(Plan {
        name,
        description: header.description,
        seed,
        target: target?,
        workload: workload?,
        phases,
        sla: assertions,
        slo,
        regression,
        abort,
        sim,
        source: PlanSource {
            file_name: cx.file_name.clone(),
            text: cx.text.clone(),
        },
    })
}
