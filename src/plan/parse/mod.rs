//! The KDL walker: turns plan text into a [`Plan`], collecting every mistake.
//!
//! One file per section of the language: [`values`] (one reader per kind of value, with its
//! bounds), [`target`], [`workload`], [`phase`], [`sla`] (`sla`, `slo`, `regression`) and
//! [`sim`]; [`cx`] holds the shapes every handler shares. Before the KDL parser runs, [`scan`]
//! refuses plans too large or nested too deep to parse safely, and when the KDL has a syntax
//! error, the top-level nodes that parse on their own are still checked for meaning, so that one
//! misplaced quote does not hide every other mistake.

mod cx;
mod datafile;
mod media;
mod phase;
/// What the workload asks that `api`'s kind cannot give: a message, a label and a help each.
fn workload_misfits(
    api: crate::api::Api,
    workload: &crate::plan::Workload,
) -> Vec<(String, &'static str, String)> {
    use crate::api::ApiKind;
    let kind = api.dialect().capabilities().kind;
    let name = api.as_str();
    let mut out = Vec::new();
    if kind == ApiKind::Generate {
        if workload.batch.is_some() || workload.query_tokens.is_some() {
            out.push((
                format!("`batch` and `query` are for the embeddings and rerank APIs, not api \"{name}\""),
                "not with this api",
                "remove them, or set api \"embeddings\" (or \"rerank\") in the target".to_string(),
            ));
        }
        out.extend(media_misfits(api, workload));
        if workload.conversation.is_some()
            && (workload.image_source().is_some() || workload.audio_source().is_some())
        {
            out.push((
                "images and audio go with single requests; a conversation's turns carry text only"
                    .to_string(),
                "not with a conversation",
                "remove `conversation`, or run the media in a plan of their own".to_string(),
            ));
        }
        return out;
    }
    if workload.batch.is_none() {
        out.push((
            format!("api \"{name}\" sends a batch of inputs per request, and the workload has no `batch`"),
            "batch missing",
            "add batch 16 (inputs per request; each as long as `input` draws), or batch min=1 max=32".to_string(),
        ));
    }
    if workload.output_tokens > 0 {
        out.push((
            format!("api \"{name}\" generates no output"),
            "no output",
            "remove `output` from the workload".to_string(),
        ));
    }
    match (kind, workload.query_tokens) {
        (ApiKind::Rank, None) => out.push((
            "api \"rerank\" ranks documents against a query, and the workload has no `query`"
                .to_string(),
            "query missing",
            "add query 32 (the query's tokens); `batch` is the documents per request".to_string(),
        )),
        (ApiKind::Embed, Some(_)) => out.push((
            "api \"embeddings\" has no query".to_string(),
            "no query",
            "remove `query`, or set api \"rerank\"".to_string(),
        )),
        _ => {}
    }
    let unsupported = [
        (workload.conversation.is_some(), "`conversation`"),
        (!workload.prefix.is_empty(), "`prefix`"),
        (workload.dataset.is_some(), "`dataset`"),
        (workload.system.is_some(), "`system`"),
        (workload.output_spread.is_some(), "an output spread"),
        (workload.images.is_some(), "`images`"),
        (workload.audio.is_some(), "`audio`"),
    ];
    for (present, what) in unsupported {
        if present {
            out.push((
                format!("api \"{name}\" takes a batch of synthetic inputs; {what} is for the APIs that generate"),
                "not with this api",
                format!("remove {what} from the workload"),
            ));
        }
    }
    out
}

/// The workload's media that `api` cannot carry: a message, a label and a help each.
fn media_misfits(
    api: crate::api::Api,
    workload: &crate::plan::Workload,
) -> Vec<(String, &'static str, String)> {
    use crate::api::Need;
    let capabilities = api.dialect().capabilities();
    [
        (Need::Images, workload.image_source(), "no images"),
        (Need::Audio, workload.audio_source(), "no audio"),
    ]
    .into_iter()
    .filter_map(|(need, source, label)| {
        let lacking = capabilities.lacks(need)?;
        Some((
            format!("api \"{}\" {lacking} ({})", api.as_str(), source?),
            label,
            format!("set api {} in the target, or send {label}", need.givers()),
        ))
    })
    .collect()
}

/// What the target and workload ask of an API, each with what asks it.
fn needs_of(
    target: &crate::plan::Target,
    workload: &crate::plan::Workload,
) -> Vec<(crate::api::Need, String)> {
    use crate::api::Need;
    let offers_tools = target.body.contains_key("tools") || target.tools_file.is_some();
    [
        (target.stream, Need::Streaming, "the target streams"),
        (
            target.continuous_usage,
            Need::UsageInStream,
            "the target's continuous-usage",
        ),
        (
            workload.ignore_eos,
            Need::ExactLengths,
            "the workload's ignore-eos",
        ),
        (offers_tools, Need::ToolCalls, "the target's tools"),
        (
            target.response_format.is_some(),
            Need::StructuredOutput,
            "the target's response-format",
        ),
    ]
    .into_iter()
    .filter(|(asked, ..)| *asked)
    .map(|(_, need, by)| (need, by.to_string()))
    .chain(
        workload
            .image_source()
            .map(|s| (Need::Images, s.to_string())),
    )
    .chain(
        workload
            .audio_source()
            .map(|s| (Need::Audio, s.to_string())),
    )
    .collect()
}

/// What the target and workload ask that `api` cannot carry, each said as a reason (for a
/// phase that speaks an API of its own).
fn api_misfits(
    api: crate::api::Api,
    target: &crate::plan::Target,
    workload: &crate::plan::Workload,
) -> Vec<String> {
    let dialect = api.dialect();
    let capabilities = dialect.capabilities();
    let mut why = Vec::new();
    let target_kind = target.api.dialect().capabilities().kind;
    if capabilities.kind != target_kind {
        why.push(format!(
            "does not do what the target's api \"{}\" does ({:?}, not {:?}): a plan's phases embed, rank or generate alike",
            target.api.as_str(),
            capabilities.kind,
            target_kind
        ));
    }
    for (need, by) in needs_of(target, workload) {
        if let Some(lacking) = capabilities.lacks(need) {
            // The dialect says why it cannot give exact lengths, and what comes closest.
            let by = if need == crate::api::Need::ExactLengths {
                format!("{by}: {}", dialect.no_exact_lengths())
            } else {
                by
            };
            why.push(format!("{lacking} ({by})"));
        }
    }
    for key in target.body.keys() {
        if let Some(instead) = dialect.reserved(key) {
            why.push(format!(
                "writes the target's body field `{key}` itself ({instead})"
            ));
        }
    }
    why
}

mod cost;
mod report;
mod scan;
mod server;
mod sim;
mod sla;
mod steps;
mod target;
#[cfg(test)]
mod tests;
mod values;
mod workload;

use std::collections::HashSet;
use std::sync::Arc;

use kdl::{KdlDocument, KdlNode, KdlValue};
use miette::SourceSpan;

use super::limits::{MAX_NESTING, MAX_PHASES, MAX_PLAN_BYTES, MAX_REQUESTS};
use super::{Load, Plan, PlanErrors, PlanSource, SimSettings};
pub use cx::EnvSource;
use cx::{first_arg_span, positional, Cx, Handler};
use values::{Seed, Text};

/// Where a plan's files and `(env)` values come from.
#[derive(Debug, Clone)]
pub struct ParseOptions {
    /// Look for files the plan names (a tokenizer); off when a kept plan is judged again.
    pub check_files: bool,
    /// Where `(env)"NAME"` values come from.
    pub env: EnvSource,
    /// Where included files come from.
    pub sources: Sources,
}

impl Default for ParseOptions {
    fn default() -> Self {
        ParseOptions {
            check_files: true,
            env: EnvSource::Process,
            sources: Sources::Disk,
        }
    }
}

/// Where included files are read from.
#[derive(Debug, Clone)]
pub enum Sources {
    /// The file system, relative to the including file.
    Disk,
    /// The files a run kept (`plan-sources.json`), by their path relative to the plan's
    /// directory.
    Kept(std::collections::BTreeMap<String, String>),
}

/// Parses and validates plan text. `file_name` is what diagnostics show, and what relative
/// paths in the plan (includes, a tokenizer) are relative to.
pub fn parse_plan(file_name: &str, text: String) -> Result<Plan, PlanErrors> {
    parse_plan_with(file_name, text, &ParseOptions::default())
}

/// Parses a plan kept in a report directory, to judge its records again: files it names (a
/// tokenizer) are not needed for that, so they are not looked for.
pub fn parse_archived_plan(file_name: &str, text: String) -> Result<Plan, PlanErrors> {
    let options = ParseOptions {
        check_files: false,
        env: EnvSource::Recorded(Default::default()),
        sources: Sources::Kept(Default::default()),
    };
    parse_plan_with(file_name, text, &options)
}

/// [`parse_plan`], with where its files and values come from.
pub fn parse_plan_with(
    file_name: &str,
    text: String,
    options: &ParseOptions,
) -> Result<Plan, PlanErrors> {
    let mut cx = Cx::new(file_name, Arc::new(text), options.check_files);
    cx.env = options.env.clone();
    let Some(tree) = load_tree(&mut cx, &options.sources) else {
        return Err(finish(&mut cx));
    };
    let placed = tree.gather(&mut cx, 0);
    let plan = top_level(&mut cx, &placed, &tree.unreadable());
    match plan {
        Some(mut plan) if cx.diagnostics.is_empty() => {
            plan.source.includes = tree.includes(&cx);
            plan.source.env = std::mem::take(&mut cx.env_used);
            Ok(plan)
        }
        _ => Err(finish(&mut cx)),
    }
}

/// What a file holds, when it is checked on its own.
#[derive(Debug)]
pub enum Checked {
    /// A whole plan.
    Plan(Box<Plan>),
    /// A fragment other plans include (blocks, no phase): checked block by block.
    Fragment,
}

/// Checks a file that is either a plan or a fragment meant to be included (a file with neither
/// a `plan` nor a `phase` node). Every mistake of either is reported.
pub fn check_file(file_name: &str, text: String) -> Result<Checked, PlanErrors> {
    let mut cx = Cx::new(file_name, Arc::new(text), true);
    let Some(tree) = load_tree(&mut cx, &Sources::Disk) else {
        return Err(finish(&mut cx));
    };
    let is_plan = tree.docs[0].as_ref().is_some_and(|(doc, unreadable)| {
        doc.nodes()
            .iter()
            .any(|n| matches!(n.name().value(), "plan" | "phase"))
            || unreadable.names.iter().any(|n| n == "plan" || n == "phase")
    });
    if is_plan {
        let text = cx.files[0].text.to_string();
        return parse_plan_with(file_name, text, &ParseOptions::default())
            .map(|p| Checked::Plan(Box::new(p)));
    }
    let placed = tree.gather(&mut cx, 0);
    fragment(&mut cx, &placed);
    if cx.diagnostics.is_empty() {
        Ok(Checked::Fragment)
    } else {
        Err(finish(&mut cx))
    }
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

fn finish(cx: &mut Cx) -> PlanErrors {
    // Diagnostics in file order read best: the plan's first, then each included file's; a
    // consequence after every cause.
    let consequences = std::mem::take(&mut cx.consequences);
    let mut keyed: Vec<(bool, usize, usize, (usize, crate::plan::PlanDiagnostic))> =
        std::mem::take(&mut cx.diagnostics)
            .into_iter()
            .enumerate()
            .map(|(i, (file, d))| (consequences.contains(&i), file, d.span.offset(), (file, d)))
            .collect();
    keyed.sort_by_key(|(consequence, file, offset, _)| (*consequence, *file, *offset));
    cx.diagnostics = keyed.into_iter().map(|(_, _, _, d)| d).collect();
    // A secret written in a file is never quoted back: every diagnostic shows the file with it
    // starred out (byte for byte, so that every span still points where it did).
    let masked: Vec<Option<Arc<String>>> = cx
        .files
        .iter()
        .map(|file| {
            (!file.secret_spans.is_empty()).then(|| {
                let mut bytes = file.text.as_bytes().to_vec();
                for span in &file.secret_spans {
                    let end = (span.offset() + span.len()).min(bytes.len());
                    for byte in &mut bytes[span.offset().min(end)..end] {
                        if !matches!(*byte, b'"' | b'\n') {
                            *byte = b'*';
                        }
                    }
                }
                Arc::new(String::from_utf8_lossy(&bytes).into_owned())
            })
        })
        .collect();
    let diagnostics = std::mem::take(&mut cx.diagnostics)
        .into_iter()
        .map(|(file, mut diagnostic)| {
            if let Some(text) = &masked[file] {
                diagnostic.source_code =
                    miette::NamedSource::new(diagnostic.source_code.name(), text.clone());
            }
            diagnostic
        })
        .collect();
    PlanErrors {
        diagnostics,
        message: None,
    }
}

/// How deeply includes may nest.
const MAX_INCLUDE_DEPTH: usize = 8;

/// The files of a plan: the plan (file 0) and every file it includes, each parsed.
struct Tree {
    /// Per file: its document (None when nothing could be read) and its unreadable nodes.
    docs: Vec<Option<(KdlDocument, Unreadable)>>,
    /// Per file: (index of the include node among its nodes, the included file).
    edges: Vec<Vec<(usize, usize)>>,
    /// Per file: its path relative to the plan's directory (the key it is kept under).
    keys: Vec<String>,
}

/// A node, and the file it was written in.
#[derive(Clone, Copy)]
struct Placed<'t> {
    node: &'t KdlNode,
    file: usize,
}

/// Reads the plan (file 0 of `cx`) and, recursively, every file it includes.
fn load_tree(cx: &mut Cx, sources: &Sources) -> Option<Tree> {
    let mut tree = Tree {
        docs: Vec::new(),
        edges: Vec::new(),
        keys: vec![String::new()],
    };
    let main_dir = parent_dir(&cx.files[0].name);
    load_file(cx, sources, &main_dir, 0, &mut Vec::new(), &mut tree);
    tree.docs[0].as_ref()?;
    Some(tree)
}

fn parent_dir(file_name: &str) -> std::path::PathBuf {
    std::path::Path::new(file_name)
        .parent()
        .map(|p| p.to_path_buf())
        .unwrap_or_default()
}

/// `path` without `.` and `x/..` components (no file system access).
fn normalize(path: &std::path::Path) -> std::path::PathBuf {
    use std::path::Component;
    let mut out: Vec<Component> = Vec::new();
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir if matches!(out.last(), Some(Component::Normal(_))) => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out.iter().collect()
}

/// `path` relative to `base` (both normalized the same way), as a `/`-separated key.
fn relative_key(base: &std::path::Path, path: &std::path::Path) -> String {
    let base: Vec<_> = base.components().collect();
    let path: Vec<_> = path.components().collect();
    let common = base.iter().zip(&path).take_while(|(a, b)| a == b).count();
    let mut parts: Vec<String> = vec!["..".to_string(); base.len() - common];
    parts.extend(
        path[common..]
            .iter()
            .map(|c| c.as_os_str().to_string_lossy().into_owned()),
    );
    parts.join("/")
}

fn load_file(
    cx: &mut Cx,
    sources: &Sources,
    main_dir: &std::path::Path,
    file: usize,
    chain: &mut Vec<String>,
    tree: &mut Tree,
) {
    cx.current = file;
    let document = read_document(cx);
    while tree.docs.len() <= file {
        tree.docs.push(None);
        tree.edges.push(Vec::new());
    }
    tree.docs[file] = document;
    let Some((doc, _)) = &tree.docs[file] else {
        return;
    };
    // (node index, path as written, span) of every include.
    let includes: Vec<(usize, Option<String>, SourceSpan)> = doc
        .nodes()
        .iter()
        .enumerate()
        .filter(|(_, n)| n.name().value() == "include")
        .map(|(i, n)| {
            let path = match positional(n).next().map(|e| e.value()) {
                Some(KdlValue::String(s)) => Some(s.clone()),
                _ => None,
            };
            (i, path, first_arg_span(n))
        })
        .collect();
    let own_name = cx.files[file].name.clone();
    chain.push(own_name.clone());
    for (index, path, span) in includes {
        cx.current = file;
        let usage = "include \"common/target.kdl\"";
        let Some(path) = path else {
            cx.error(
                span,
                "`include` needs the path of a KDL file",
                "path missing",
                format!("write it as: {usage} (relative to this file)"),
            );
            continue;
        };
        if chain.len() > MAX_INCLUDE_DEPTH {
            cx.error(
                span,
                format!("includes nest deeper than {MAX_INCLUDE_DEPTH} files"),
                "too deep",
                "include the shared files from the plan itself",
            );
            continue;
        }
        let resolved = normalize(&parent_dir(&own_name).join(&path));
        let name = resolved.display().to_string();
        if let Some(at) = chain.iter().position(|c| *c == name) {
            let cycle: Vec<&str> = chain[at..].iter().map(String::as_str).collect();
            cx.error(
                span,
                format!("{path} includes itself: {} → {name}", cycle.join(" → ")),
                "include cycle",
                "a shared file cannot include a file that includes it",
            );
            continue;
        }
        let key = relative_key(&normalize(main_dir), &resolved);
        let text = match sources {
            Sources::Disk => read_included(&resolved),
            Sources::Kept(files) => files
                .get(&key)
                .cloned()
                .ok_or_else(|| IncludeUnreadable::NotKept(key.clone())),
        };
        let text = match text {
            Ok(text) => text,
            Err(why) => {
                cx.error(
                    span,
                    format!("cannot include {path}: {why}"),
                    "cannot read",
                    format!(
                        "the path is relative to this file ({}): it resolves to {name}",
                        own_name
                    ),
                );
                continue;
            }
        };
        let child = cx.files.len();
        cx.files.push(cx::SourceFile {
            name,
            text: Arc::new(text),
            secret_spans: Vec::new(),
        });
        tree.keys.push(key);
        tree.edges[file].push((index, child));
        load_file(cx, sources, main_dir, child, chain, tree);
    }
    chain.pop();
}

/// Why an included file could not be read.
#[derive(Debug, thiserror::Error)]
enum IncludeUnreadable {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("it is {0} bytes, more than a plan file may be ({MAX_PLAN_BYTES})")]
    TooLarge(u64),
    #[error("it is not text (invalid UTF-8)")]
    NotText,
    #[error("the run kept no file {0}")]
    NotKept(String),
}

/// An included file's text, refusing one too large to be a plan fragment.
fn read_included(path: &std::path::Path) -> Result<String, IncludeUnreadable> {
    let size = std::fs::metadata(path)?.len();
    if size > MAX_PLAN_BYTES {
        return Err(IncludeUnreadable::TooLarge(size));
    }
    let bytes = crate::files::read_bounded(path, MAX_PLAN_BYTES)?;
    String::from_utf8(bytes).map_err(|_| IncludeUnreadable::NotText)
}

/// Blocks of which a plan holds one; an included file contributes them unless the including
/// file has its own.
const SHARED_ONCE: [&str; 7] = [
    "target",
    "workload",
    "sim",
    "slo",
    "regression",
    "abort",
    "server",
];

impl Tree {
    /// The nodes a file contributes: its own, and those of its includes that it does not
    /// override (a block written in the including file replaces the same block from an
    /// included one; the same block from two included files is a conflict). `sla` lines add
    /// up.
    fn gather<'t>(&'t self, cx: &mut Cx, file: usize) -> Vec<Placed<'t>> {
        let Some((doc, _)) = &self.docs[file] else {
            return Vec::new();
        };
        let own: Vec<Placed> = doc
            .nodes()
            .iter()
            .filter(|n| n.name().value() != "include")
            .map(|node| Placed { node, file })
            .collect();
        let mut from_includes: Vec<Placed> = Vec::new();
        let mut provided: Vec<(&str, usize)> = Vec::new();
        for &(_, child) in &self.edges[file] {
            for placed in self.gather(cx, child) {
                let name = placed.node.name().value();
                if matches!(name, "plan" | "phase") {
                    cx.current = placed.file;
                    cx.error(
                        placed.node.name().span(),
                        format!("an included file cannot hold `{name}`"),
                        "not shared",
                        "an included file shares target, workload, sla, slo, regression, abort, sim or server blocks; \
                         the plan itself names itself and holds its phases",
                    );
                    continue;
                }
                if SHARED_ONCE.contains(&name) {
                    if own.iter().any(|p| p.node.name().value() == name) {
                        continue; // the including file's own block replaces it
                    }
                    if let Some((_, first)) = provided.iter().find(|(n, _)| *n == name) {
                        let first_name = cx.files[*first].name.clone();
                        cx.current = placed.file;
                        cx.error(
                            placed.node.name().span(),
                            format!("`{name}` comes from two included files: {first_name} and this one"),
                            "conflict",
                            format!("keep one `{name}` block, or write the `{name}` block in the including file, which replaces both"),
                        );
                        continue;
                    }
                    provided.push((name, placed.file));
                }
                from_includes.push(placed);
            }
        }
        from_includes.extend(own);
        from_includes
    }

    /// The nodes no file could read, over every file.
    fn unreadable(&self) -> Unreadable {
        let mut all = Unreadable::default();
        for (_, unreadable) in self.docs.iter().flatten() {
            all.names.extend(unreadable.names.iter().cloned());
            all.phase_names
                .extend(unreadable.phase_names.iter().cloned());
            all.unnamed_phase |= unreadable.unnamed_phase;
        }
        all
    }

    /// Every included file: its key (path relative to the plan's directory) and text.
    fn includes(&self, cx: &Cx) -> Vec<(String, Arc<String>)> {
        (1..cx.files.len())
            .map(|i| (self.keys[i].clone(), cx.files[i].text.clone()))
            .collect()
    }
}

/// Checks the blocks of a fragment (an included file) on their own.
fn fragment(cx: &mut Cx, placed: &[Placed]) {
    let phases: Vec<String> = Vec::new();
    let scope = sla::Scope {
        phases: &phases,
        unrecorded: &[],
        has_slo: placed.iter().any(|p| p.node.name().value() == "slo"),
        has_search: true,
        // The plans that include it give the price, and the phases.
        has_cost: true,
        has_sessions: true,
        // A fragment's assertions may name the phases of the plans that include it.
        phases_incomplete: true,
        // Nor is its target known: the plans that include it check what they measure.
        answers: None,
    };
    for p in placed {
        cx.current = p.file;
        match p.node.name().value() {
            "target" => {
                target::target(cx, p.node);
            }
            "workload" => {
                workload::workload(cx, p.node);
            }
            "sim" => {
                sim::sim(cx, p.node);
            }
            "slo" => {
                sla::slo(cx, p.node);
            }
            "sla" => {
                sla::sla(cx, p.node, &scope);
            }
            "regression" => {
                sla::regression(cx, p.node, &scope);
            }
            "abort" => {
                sla::abort(cx, p.node, &scope);
            }
            "server" => {
                server::server(cx, p.node);
            }
            _ => cx.unknown_node(
                p.node,
                "in a shared file",
                "include, target, workload, sla, slo, regression, abort, sim, server",
            ),
        }
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

/// Where `text`'s blocks first nest deeper than [`MAX_NESTING`] levels, if they do: the KDL
/// parser (and any recursive walk of its document) would exhaust the stack on it.
pub(crate) fn too_deep_at(text: &str) -> Option<usize> {
    scan::outline(text, MAX_NESTING).too_deep_at
}

/// The KDL document of the plan, after the size and nesting limits. On a syntax error, every
/// syntax error is a diagnostic, and the document holds the top-level nodes that parse on their
/// own; `None` when nothing can be checked for meaning.
fn read_document(cx: &mut Cx) -> Option<(KdlDocument, Unreadable)> {
    let text = cx.text();
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

const TOP_LEVEL: &str =
    "plan, include, target, workload, phase, sweep, search, sla, slo, regression, abort, sim, server, server-sweep, report, cost";
/// Blocks a plan has at most one of.
const ONCE: [&str; 12] = [
    "cost",
    "server",
    "server-sweep",
    "report",
    "search",
    "plan",
    "target",
    "workload",
    "sim",
    "slo",
    "regression",
    "abort",
];

fn top_level(cx: &mut Cx, placed: &[Placed], unreadable: &Unreadable) -> Option<Plan> {
    let mut header = Header {
        name: None,
        description: None,
        seed: 0,
    };
    let mut header_ok = true;
    let mut target = None;
    let mut workload = None;
    let mut workload_at = None;
    let mut sim = None;
    let mut server = None;
    let mut server_at = None;
    let mut server_sweep = None;
    let mut server_sweep_at = None;
    let mut target_at = None;
    let mut slo = None;
    let mut cost = None;
    let mut gpu_prices = Vec::new();
    let mut phases: Vec<crate::plan::Phase> = Vec::new();
    // Phases that speak an API of their own, and where they name it.
    let mut phase_apis: Vec<(usize, SourceSpan, crate::api::Api)> = Vec::new();
    // Phases written with `duration … until="decided"`: where, and which.
    let mut decided_at: Vec<(usize, SourceSpan, String)> = Vec::new();
    let mut judging: Vec<Placed> = Vec::new();
    let mut search = None;
    let mut search_at = None;
    let mut report = crate::plan::ReportSettings::default();
    let mut seen: Vec<&str> = Vec::new();
    let has = |name: &str| {
        placed.iter().any(|p| p.node.name().value() == name)
            || unreadable.names.iter().any(|n| n == name)
    };
    let has_slo = has("slo");

    // Every phase name written, valid or not: duplicates are found whatever else is wrong.
    let phase_nodes: Vec<&Placed> = placed
        .iter()
        .filter(|p| p.node.name().value() == "phase")
        .collect();
    // Too many phases is said first: nothing below then walks tens of thousands of them.
    if let Some(extra) = phase_nodes.get(MAX_PHASES) {
        cx.current = extra.file;
        cx.error(
            extra.node.name().span(),
            format!("the plan has more than {MAX_PHASES} phases"),
            "too many phases",
            "merge phases, or split the plan into several plans",
        );
        return None;
    }
    let mut phase_names: Vec<String> = unreadable.phase_names.clone();
    // The names in a set as well, so that finding a duplicate costs one lookup.
    let mut named: HashSet<String> = phase_names.iter().cloned().collect();
    let mut duplicates = HashSet::new();
    for p in &phase_nodes {
        cx.current = p.file;
        if let Some(KdlValue::String(name)) = positional(p.node).next().map(|e| e.value()) {
            if !named.insert(name.clone()) {
                duplicates.insert((p.file, first_arg_span(p.node).offset()));
                cx.error(
                    first_arg_span(p.node),
                    format!("phase \"{name}\" is defined twice"),
                    "duplicate name",
                    "give every phase its own name; assertions refer to phases by name",
                );
            } else {
                phase_names.push(name.clone());
            }
        }
    }

    // Every load replays a file (traces, sessions: a search of sessions too), so the workload's
    // lengths are never used.
    let replays = |node: &kdl::KdlNode| {
        cx::children(node)
            .iter()
            .any(|c| matches!(c.name().value(), "trace" | "sessions"))
    };
    let loads: Vec<&kdl::KdlNode> = placed
        .iter()
        .filter(|p| matches!(p.node.name().value(), "phase" | "sweep" | "search"))
        .map(|p| p.node)
        .collect();
    cx.replay_only = !loads.is_empty() && loads.iter().all(|node| replays(node));
    cx.batch_api = placed
        .iter()
        .filter(|p| p.node.name().value() == "target")
        .filter_map(|p| target::declared_api(p.node))
        .any(|api| api.dialect().capabilities().kind != crate::api::ApiKind::Generate);
    let mut expected_requests = 0.0;
    for p in placed {
        let node = p.node;
        cx.current = p.file;
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
                header.name = cx.arg(node, usage, values::Name);
                header_ok = header.name.is_some();
                cx.walk(node, "in `plan`", HEADER, &mut header);
            }
            "target" => {
                target = target::target(cx, node);
                target_at = Some((p.file, first_arg_span(node)));
            }
            "workload" => {
                workload = workload::workload(cx, node);
                workload_at = Some((p.file, node.name().span()));
            }
            "phase" => {
                let Some(checked) = phase::phase(cx, node) else {
                    continue;
                };
                if duplicates.contains(&(p.file, first_arg_span(node).offset())) {
                    continue;
                }
                if let (Some(with), Some(span)) = (&checked.phase.with, checked.with_span) {
                    if !phases.iter().any(|earlier| earlier.name == with.phase) {
                        cx.error(
                            span,
                            format!(
                                "phase \"{}\" starts with \"{}\", which is not a phase written before it",
                                checked.phase.name, with.phase
                            ),
                            "unknown phase",
                            "name an earlier phase: with \"steady\" offset=\"30s\"",
                        );
                    }
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
                if let (Some(api), Some(span)) = (checked.phase.api, checked.api_span) {
                    phase_apis.push((p.file, span, api));
                }
                if let Some(span) = checked.until_span {
                    decided_at.push((p.file, span, checked.phase.name.clone()));
                }
                phases.push(checked.phase);
            }
            "sweep" => {
                let Some(steps) = steps::sweep(cx, node) else {
                    continue;
                };
                for step in steps {
                    if !named.insert(step.name.clone()) {
                        cx.error(
                            first_arg_span(node),
                            format!(
                                "the sweep's step \"{}\" has the name of another phase",
                                step.name
                            ),
                            "duplicate name",
                            "give the sweep (or the phase) another name",
                        );
                        break;
                    }
                    phase_names.push(step.name.clone());
                    if let Load::Rate { rate, .. } = &step.load {
                        expected_requests +=
                            rate.mean() * step.duration.map_or(0.0, |d| d.as_secs_f64());
                    }
                    phases.push(step);
                }
                if phases.len() > MAX_PHASES {
                    cx.error(
                        node.name().span(),
                        format!("with this sweep the plan has more than {MAX_PHASES} phases"),
                        "too many steps",
                        "use fewer steps, or split the plan",
                    );
                    return None;
                }
            }
            "search" => {
                search = steps::search(cx, node, phases.len());
                search_at = Some((p.file, node.name().span()));
            }
            "sla" | "regression" | "abort" => judging.push(*p),
            "slo" => slo = sla::slo(cx, node),
            "sim" => sim = Some(sim::sim(cx, node)),
            "server" => {
                server = server::server(cx, node);
                server_at = Some((p.file, node.name().span()));
            }
            "server-sweep" => {
                server_sweep = server::server_sweep(cx, node);
                server_sweep_at = Some((p.file, node.name().span()));
            }
            "report" => report = report::report(cx, node),
            "cost" => (cost, gpu_prices) = cost::cost(cx, node),
            _ => cx.unknown_node(node, "at the top level", TOP_LEVEL),
        }
    }
    cx.current = 0;

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
    if !has("phase") && !has("sweep") && !has("search") {
        cx.error(
            whole_file,
            "the plan has no `phase`",
            "phase missing",
            "add at least one phase, e.g. phase \"steady\" { rate 4; duration \"30s\" }",
        );
    }

    if let (Some(target), Some(workload)) = (&target, &mut workload) {
        let target: &crate::plan::Target = target;
        workload::resolve_auto(cx.check_files, &target.model, workload);
    }
    // Exact output lengths are asked of the API's dialect: one that cannot give them is refused.
    if let (Some(target), Some(workload), Some((file, span))) = (&target, &workload, workload_at) {
        let api: &crate::plan::Target = target;
        let exact = api
            .api
            .dialect()
            .capabilities()
            .lacks(crate::api::Need::ExactLengths);
        if let (true, Some(lacking)) = (workload.ignore_eos, exact) {
            cx.current = file;
            cx.error(
                span,
                format!("api \"{}\" {lacking}", api.api.as_str()),
                "no exact lengths",
                api.api.dialect().no_exact_lengths(),
            );
            cx.current = 0;
        }
        // What an API does decides what the workload may ask: a batch of inputs for the APIs
        // that embed or rank, text to generate after a prompt for the rest.
        cx.current = file;
        for (message, label, help) in workload_misfits(api.api, workload) {
            cx.error(span, message, label, help);
        }
        cx.current = 0;
        // A phase's own API must be able to do what the target and workload ask of requests.
        for &(file, span, phase_api) in &phase_apis {
            cx.current = file;
            for why in api_misfits(phase_api, api, workload) {
                cx.error(
                    span,
                    format!("api \"{}\" {why}", phase_api.as_str()),
                    "not with this api",
                    "give this phase's requests what its API can carry, or leave the phase on the target's api",
                );
            }
            cx.current = 0;
        }
        // An agent loop goes on from tool calls: the model must be offered tools to call.
        let agent_loop = workload
            .conversation
            .is_some_and(|c| c.tool_results.is_some());
        // (A kept plan, judged without its files, names its tools file without reading it.)
        let offers_tools = api.body.contains_key("tools") || api.tools_file.is_some();
        if agent_loop && !offers_tools {
            cx.current = file;
            cx.error(
                span,
                "the conversation's `tool-result` answers tool calls, and the target offers no tools",
                "no tools",
                "add tools \"tools.json\" to the target (a JSON list of functions the model may call)",
            );
            cx.current = 0;
        }
        if workload.image_urls.is_some() {
            cx.current = file;
            if workload.image_source().is_none() && cx.check_files {
                cx.error(
                    span,
                    "`image-urls` serves the requests' images, and the workload sends none",
                    "no images",
                    "add images { size \"512x512\"; } (or a dataset whose entries name image files), or remove `image-urls`",
                );
            }
            if api.endpoint == crate::plan::Endpoint::Simulator {
                cx.error(
                    span,
                    "the simulator reads images inline (data URLs), and `image-urls` sends them as URLs",
                    "not with the simulator",
                    "remove `image-urls` to measure against the simulator; keep it for a server that fetches its images (vLLM, SGLang)",
                );
            }
            cx.current = 0;
        }
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
        has_search: search.is_some(),
        has_cost: has("cost"),
        has_sessions: phases
            .iter()
            .any(|p| matches!(p.load, crate::plan::Load::Sessions(_)))
            || search.as_ref().is_some_and(|s| s.sessions.is_some()),
        phases_incomplete: unreadable.unnamed_phase,
        answers: target.as_ref().map(|t: &crate::plan::Target| {
            let apis: Vec<crate::api::Api> = std::iter::once(t.api)
                .chain(phases.iter().filter_map(|p| p.api))
                .collect();
            let kind = |api: &crate::api::Api| api.dialect().capabilities().kind;
            sla::Answers {
                generated: apis
                    .iter()
                    .any(|a| kind(a) == crate::api::ApiKind::Generate),
                streamed: t.stream,
                batches: apis
                    .iter()
                    .any(|a| kind(a) != crate::api::ApiKind::Generate),
                api: t.api.as_str(),
            }
        }),
    };
    let mut sla_block = sla::SlaBlock::default();
    let mut regression = Vec::new();
    let mut abort = Vec::new();
    for p in judging {
        cx.current = p.file;
        match p.node.name().value() {
            "sla" => sla_block.extend(sla::sla(cx, p.node, &scope)),
            "regression" => regression.extend(sla::regression(cx, p.node, &scope)),
            _ => abort.extend(sla::abort(cx, p.node, &scope)),
        }
    }
    cx.current = 0;
    let judging = sla_block.judging();
    let assertions = sla_block.assertions;
    for (file, span, name) in &decided_at {
        cx.current = *file;
        let recorded = phase_names.len() - unrecorded.len() + usize::from(search.is_some());
        decided_phase_checks(cx, *span, name, recorded, &phases, &assertions);
    }
    cx.current = 0;
    if let (Some(spec), Some((file, span))) = (&search, search_at) {
        cx.current = file;
        let objectives = assertions
            .iter()
            .filter(|a: &&crate::plan::Assertion| {
                a.phase.is_none() && a.metric != crate::plan::Metric::Capacity
            })
            .count();
        match spec.objective {
            crate::plan::Objective::Sla if objectives == 0 => cx.error(
                span,
                "the search has no objective to judge its probes by",
                "no objective",
                "add sla lines that name no phase (e.g. sla { ttft p99 < \"500ms\" }), or write \
                 attainment \"95%\" in the search with an slo line",
            ),
            crate::plan::Objective::Attainment(_) if !has_slo => cx.error(
                span,
                "the search's attainment counts requests that meet the plan's slo, and it has none",
                "no slo",
                "add an slo line, e.g. slo ttft=\"500ms\" tpot=\"50ms\"",
            ),
            _ => {}
        }
        cx.current = 0;
    }

    // (A server block written with mistakes has said so: it is not "no server".)
    let server_readable = server.is_some() || !has("server");
    if let Some(target) = target.as_ref().filter(|_| server_readable) {
        for misfit in server::target_misfits(target, server.as_ref()) {
            let at = if misfit.at_target {
                target_at
            } else {
                server_at
            };
            let (file, span) = at.unwrap_or((0, whole_file));
            cx.current = file;
            cx.error(span, misfit.message, misfit.label, misfit.help);
        }
        cx.current = 0;
    }

    if let (Some((file, span)), false) = (server_sweep_at, has("server")) {
        cx.current = file;
        cx.error(
            span,
            "the plan sweeps the server's settings, and starts no server",
            "no server",
            "add the server block whose command the sweep varies: server { command \"llama-server\" \"--port\" \"{port}\" ... }",
        );
        cx.current = 0;
    }

    let gpus_swept = server_sweep
        .as_ref()
        .is_some_and(|sweep: &crate::plan::ServerSweep| sweep.dimensions.iter().any(|d| d.gpus));
    let priced_by_gpus = cost
        .as_ref()
        .is_some_and(|c: &crate::records::CostRate| c.per_gpu_hour.is_some());
    if let (Some((file, span)), true, false) = (server_sweep_at, gpus_swept, priced_by_gpus) {
        cx.current = file;
        // Priced by GPU type, each configuration's GPUs are counted from its telemetry.
        let (message, help) = if gpu_prices.is_empty() {
            (
                "the sweep prices each configuration by its GPUs, and the plan gives no price a GPU",
                "add the price of one GPU an hour: cost { gpu-hour \"$2.49\" }",
            )
        } else {
            (
                "the sweep says which setting is the GPUs, and the plan prices GPUs by type, counting them from the telemetry",
                "leave out gpus=#true (each configuration is priced by the GPUs its telemetry describes), or give one price a GPU: cost { gpu-hour \"$2.49\" }",
            )
        };
        cx.error(span, message, "no GPU price", help);
        cx.current = 0;
    }

    let name = match header.name {
        Some(name) => name,
        None if header_ok => std::path::Path::new(&cx.files[0].name)
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
        judging,
        slo,
        cost,
        gpu_prices,
        regression,
        abort,
        objective: search
            .as_ref()
            .map_or(crate::plan::Objective::Sla, |s: &crate::plan::Search| {
                s.objective
            }),
        search,
        sim,
        server,
        server_sweep,
        report,
        source: PlanSource {
            file_name: cx.files[0].name.clone(),
            text: cx.files[0].text.clone(),
            includes: Vec::new(),
            env: Vec::new(),
            overrides: Vec::new(),
        },
    })
}

/// A phase that ends once decided: recorded, and with an assertion its running requests can
/// decide (else it would run to its maximum every time, and say nothing of why).
fn decided_phase_checks(
    cx: &mut Cx,
    span: SourceSpan,
    name: &str,
    recorded: usize,
    phases: &[crate::plan::Phase],
    assertions: &[crate::plan::Assertion],
) {
    if phases.iter().any(|p| p.name == name && !p.record) {
        cx.error(
            span,
            format!(
                "phase \"{name}\" is not recorded: no assertion judges it, so nothing decides it"
            ),
            "nothing to decide",
            "remove until=\"decided\" from a warmup, or record the phase",
        );
        return;
    }
    let judging = crate::plan::sla::judging_phase(name, recorded == 1, assertions);
    if !judging
        .iter()
        .any(|a| crate::plan::sla::decides_while_running(a))
    {
        cx.error(
            span,
            format!("no assertion on phase \"{name}\" can be decided while it runs"),
            "nothing to decide",
            format!(
                "add one that names it, e.g. sla {{ ttft p95 < \"500ms\" phase=\"{name}\" }} (a \
                 percentile, max, min or rate; a mean, a throughput or the server's telemetry is \
                 judged on the phase as it ran)"
            ),
        );
    }
}
