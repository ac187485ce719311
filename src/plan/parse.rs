//! The KDL walker: turns a parsed KDL document into a [`Plan`], collecting every mistake.
//!
//! Each node handler names the arguments, properties and children it allows, so that anything
//! else is reported with the span it stands at and a help line listing what is allowed.

use std::sync::Arc;
use std::time::Duration;

use kdl::{KdlDocument, KdlEntry, KdlNode, KdlValue};
use miette::{NamedSource, SourceSpan};

use super::units::{parse_duration, parse_percent, seconds_in_unit};
use super::*;

const TOP_LEVEL: &str = "plan, target, workload, phase, sla, slo, regression, sim";
const BUILTIN_TOKENIZERS: [&str; 2] = ["cl100k_base", "o200k_base"];

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

fn parse_with(file_name: &str, text: String, check_files: bool) -> Result<Plan, PlanErrors> {
    let text = Arc::new(text);
    let mut cx = Cx {
        file_name: file_name.to_string(),
        text: text.clone(),
        diagnostics: Vec::new(),
        check_files,
    };
    let document = cx.document(&text)?;
    let plan = cx.plan(&document, file_name);
    if cx.diagnostics.is_empty() {
        plan.ok_or_else(|| cx.finish())
    } else {
        Err(cx.finish())
    }
}

struct Cx {
    file_name: String,
    text: Arc<String>,
    diagnostics: Vec<PlanDiagnostic>,
    check_files: bool,
}

fn positional(node: &KdlNode) -> impl Iterator<Item = &KdlEntry> {
    node.entries().iter().filter(|entry| entry.name().is_none())
}

fn property<'a>(node: &'a KdlNode, name: &str) -> Option<&'a KdlEntry> {
    // KDL lets a property repeat; the last one wins, as the spec says.
    node.entries()
        .iter()
        .rev()
        .find(|entry| entry.name().map(|n| n.value()) == Some(name))
}

fn children(node: &KdlNode) -> &[KdlNode] {
    node.children().map(|doc| doc.nodes()).unwrap_or(&[])
}

fn type_name(value: &KdlValue) -> &'static str {
    match value {
        KdlValue::String(_) => "a string",
        KdlValue::Integer(_) => "an integer",
        KdlValue::Float(_) => "a number",
        KdlValue::Bool(_) => "a boolean",
        KdlValue::Null => "#null",
    }
}

impl Cx {
    /// The KDL document, or every syntax error in it as a diagnostic.
    fn document(&mut self, text: &str) -> Result<KdlDocument, PlanErrors> {
        KdlDocument::parse_v2(text).map_err(|err| {
            for diagnostic in err.diagnostics {
                let message = diagnostic
                    .message
                    .unwrap_or_else(|| "this is not valid KDL".to_string());
                let help = diagnostic.help.unwrap_or_else(|| {
                    "plans are KDL 2.0; values with units are strings (timeout \"60s\"), \
                     booleans are #true and #false"
                        .to_string()
                });
                self.error(
                    diagnostic.span,
                    message,
                    diagnostic.label.unwrap_or_else(|| "here".into()),
                    help,
                );
            }
            self.finish()
        })
    }

    fn error(
        &mut self,
        span: SourceSpan,
        message: impl Into<String>,
        label: impl Into<String>,
        help: impl Into<String>,
    ) {
        self.diagnostics.push(PlanDiagnostic {
            message: message.into(),
            source_code: NamedSource::new(&self.file_name, self.text.clone()),
            span,
            label: label.into(),
            help: Some(help.into()),
        });
    }

    fn finish(&mut self) -> PlanErrors {
        // Diagnostics in file order read best.
        self.diagnostics.sort_by_key(|d| d.span.offset());
        PlanErrors {
            diagnostics: std::mem::take(&mut self.diagnostics),
            message: None,
        }
    }

    /// Reports positional arguments beyond `max_args` and properties not in `props`.
    fn check_entries(&mut self, node: &KdlNode, max_args: usize, props: &[&str], usage: &str) {
        let name = node.name().value().to_string();
        for (index, entry) in positional(node).enumerate() {
            if index >= max_args {
                self.error(
                    entry.span(),
                    format!("`{name}` takes {} here", plural(max_args, "argument")),
                    "unexpected argument",
                    format!("write it as: {usage}"),
                );
            }
        }
        for entry in node.entries() {
            if let Some(key) = entry.name() {
                if !props.contains(&key.value()) {
                    let allowed = if props.is_empty() {
                        "none".to_string()
                    } else {
                        props.join(", ")
                    };
                    self.error(
                        entry.span(),
                        format!("unknown property `{}` on `{name}`", key.value()),
                        "unknown property",
                        format!("properties allowed on `{name}`: {allowed}; write it as: {usage}"),
                    );
                }
            }
        }
    }

    fn no_children(&mut self, node: &KdlNode) {
        if let Some(doc) = node.children() {
            if !doc.nodes().is_empty() {
                let name = node.name().value();
                self.error(
                    doc.span(),
                    format!("`{name}` takes no children block"),
                    "unexpected block",
                    format!("remove the braces after `{name}`"),
                );
            }
        }
    }

    fn unknown_node(&mut self, node: &KdlNode, context: &str, allowed: &str) {
        self.error(
            node.name().span(),
            format!("unknown node `{}` {context}", node.name().value()),
            "unknown node",
            format!("allowed here: {allowed}"),
        );
    }

    /// The single required positional argument of `node`.
    fn required_arg<'a>(&mut self, node: &'a KdlNode, usage: &str) -> Option<&'a KdlEntry> {
        let entry = positional(node).next();
        if entry.is_none() {
            self.error(
                node.name().span(),
                format!("`{}` needs a value", node.name().value()),
                "value missing",
                format!("write it as: {usage}"),
            );
        }
        entry
    }

    fn string(&mut self, entry: &KdlEntry, usage: &str) -> Option<String> {
        match entry.value() {
            KdlValue::String(s) => Some(s.clone()),
            other => {
                self.error(
                    entry.span(),
                    format!("expected a string, found {}", type_name(other)),
                    "not a string",
                    format!("write it as: {usage}"),
                );
                None
            }
        }
    }

    fn boolean(&mut self, entry: &KdlEntry, usage: &str) -> Option<bool> {
        match entry.value() {
            KdlValue::Bool(b) => Some(*b),
            other => {
                self.error(
                    entry.span(),
                    format!("expected #true or #false, found {}", type_name(other)),
                    "not a boolean",
                    format!("KDL 2.0 booleans are #true and #false; write it as: {usage}"),
                );
                None
            }
        }
    }

    /// A whole number of at least `min`.
    fn integer(&mut self, entry: &KdlEntry, min: i128, usage: &str) -> Option<u64> {
        match entry.value() {
            KdlValue::Integer(n) if *n >= min && *n <= u32::MAX as i128 => Some(*n as u64),
            KdlValue::Integer(n) => {
                self.error(
                    entry.span(),
                    format!("{n} is out of range: it must be at least {min}"),
                    "out of range",
                    format!("write it as: {usage}"),
                );
                None
            }
            other => {
                self.error(
                    entry.span(),
                    format!("expected a whole number, found {}", type_name(other)),
                    "not a whole number",
                    format!("write it as: {usage}"),
                );
                None
            }
        }
    }

    /// A finite number; `positive` demands > 0, else >= 0.
    fn number(&mut self, entry: &KdlEntry, positive: bool, usage: &str) -> Option<f64> {
        let value = match entry.value() {
            KdlValue::Integer(n) => *n as f64,
            KdlValue::Float(f) => *f,
            other => {
                self.error(
                    entry.span(),
                    format!("expected a number, found {}", type_name(other)),
                    "not a number",
                    format!("write it as: {usage}"),
                );
                return None;
            }
        };
        let ok = value.is_finite() && if positive { value > 0.0 } else { value >= 0.0 };
        if !ok {
            let bound = if positive {
                "greater than zero"
            } else {
                "zero or more"
            };
            self.error(
                entry.span(),
                format!("{value} is out of range: it must be {bound}"),
                "out of range",
                format!("write it as: {usage}"),
            );
            return None;
        }
        Some(value)
    }

    /// A duration: a string with a unit ("30s") or a type-annotated number ((ms)500).
    fn duration(&mut self, entry: &KdlEntry, usage: &str) -> Option<Duration> {
        let help = format!(
            "durations are strings with a unit: \"250ms\", \"30s\", \"2m\", \"1h\"; write it as: {usage}"
        );
        let parsed = match (entry.value(), entry.ty()) {
            (KdlValue::String(s), _) => parse_duration(s),
            (KdlValue::Integer(_) | KdlValue::Float(_), Some(unit)) => {
                let value = match entry.value() {
                    KdlValue::Integer(n) => *n as f64,
                    KdlValue::Float(f) => *f,
                    _ => 0.0,
                };
                match seconds_in_unit(unit.value()) {
                    Some(scale) if value >= 0.0 && value.is_finite() => {
                        Ok(Duration::from_secs_f64(value * scale))
                    }
                    Some(_) => Err(format!("{value} is not a valid duration")),
                    None => Err(format!("({}) is not a duration unit", unit.value())),
                }
            }
            (KdlValue::Integer(_) | KdlValue::Float(_), None) => {
                Err("a bare number has no unit".to_string())
            }
            (other, _) => Err(format!("expected a duration, found {}", type_name(other))),
        };
        match parsed {
            Ok(d) if d > Duration::ZERO => Some(d),
            Ok(_) => {
                self.error(
                    entry.span(),
                    "a duration must be longer than zero",
                    "zero",
                    help,
                );
                None
            }
            Err(message) => {
                self.error(entry.span(), message, "not a duration", help);
                None
            }
        }
    }

    fn plan(&mut self, document: &KdlDocument, file_name: &str) -> Option<Plan> {
        let mut header: Option<(String, Option<String>, u64)> = None;
        let mut target: Option<Target> = None;
        let mut workload: Option<Workload> = None;
        let mut phases: Vec<(Phase, SourceSpan)> = Vec::new();
        let mut sla_nodes: Vec<&KdlNode> = Vec::new();
        let mut sim: Option<(SimSettings, bool)> = None;
        let mut slo: Option<Slo> = None;
        let mut regression_nodes: Vec<&KdlNode> = Vec::new();
        let has_slo = document.nodes().iter().any(|n| n.name().value() == "slo");
        let mut seen: Vec<(&str, SourceSpan)> = Vec::new();

        for node in document.nodes() {
            let name = node.name().value();
            if matches!(
                name,
                "plan" | "target" | "workload" | "sim" | "slo" | "regression"
            ) {
                if let Some((_, _first)) = seen.iter().find(|(n, _)| *n == name) {
                    self.error(
                        node.name().span(),
                        format!("`{name}` appears twice"),
                        "second one",
                        format!("a plan has one `{name}` block; merge the two"),
                    );
                    continue;
                }
                seen.push((name, node.name().span()));
            }
            match name {
                "plan" => header = self.header(node),
                "target" => target = self.target(node),
                "workload" => workload = self.workload(node),
                "phase" => {
                    if let Some(phase) = self.phase(node) {
                        if phases.iter().any(|(p, _)| p.name == phase.name) {
                            let span = positional(node)
                                .next()
                                .map(|e| e.span())
                                .unwrap_or(node.span());
                            self.error(
                                span,
                                format!("phase \"{}\" is defined twice", phase.name),
                                "duplicate name",
                                "give every phase its own name; assertions refer to phases by name",
                            );
                        } else {
                            phases.push((phase, node.name().span()));
                        }
                    }
                }
                "sla" => sla_nodes.push(node),
                "slo" => slo = self.slo(node),
                "regression" => regression_nodes.push(node),
                "sim" => sim = self.sim(node),
                _ => self.unknown_node(node, "at the top level", TOP_LEVEL),
            }
        }

        let whole_file = SourceSpan::from((0, 0));
        if target.is_none() && !seen.iter().any(|(n, _)| *n == "target") {
            self.error(
                whole_file,
                "the plan has no `target`",
                "target missing",
                "add a target block, e.g. target \"http://127.0.0.1:8000\" { model \"my-model\" } or target \"sim\"",
            );
        }
        if workload.is_none() && !seen.iter().any(|(n, _)| *n == "workload") {
            self.error(
                whole_file,
                "the plan has no `workload`",
                "workload missing",
                "add a workload block, e.g. workload { input 512; output 128 }",
            );
        }
        if phases.is_empty() && !document.nodes().iter().any(|n| n.name().value() == "phase") {
            self.error(
                whole_file,
                "the plan has no `phase`",
                "phase missing",
                "add at least one phase, e.g. phase \"steady\" { rate 4; duration \"30s\" }",
            );
        }

        // Names of every phase node, valid or not, so that one broken phase does not also make
        // each assertion that names it an error.
        let phase_names: Vec<String> = document
            .nodes()
            .iter()
            .filter(|n| n.name().value() == "phase")
            .filter_map(|n| match positional(n).next().map(|e| e.value()) {
                Some(KdlValue::String(s)) => Some(s.clone()),
                _ => None,
            })
            .collect();
        let unrecorded: Vec<String> = phases
            .iter()
            .filter(|(p, _)| !p.record)
            .map(|(p, _)| p.name.clone())
            .collect();
        let mut sla = Vec::new();
        for node in sla_nodes {
            self.no_args(node, "sla { ttft p99 < \"500ms\" }");
            for child in children(node) {
                if let Some(assertion) = self.assertion(child, &phase_names, &unrecorded, has_slo) {
                    sla.push(assertion);
                }
            }
        }
        let mut regression = Vec::new();
        for node in regression_nodes {
            self.no_args(node, "regression { ttft p99 \"+10%\" }");
            for child in children(node) {
                if let Some(tolerance) = self.tolerance(child, &phase_names, &unrecorded, has_slo) {
                    regression.push(tolerance);
                }
            }
        }

        let (name, description, seed) = header.unwrap_or_else(|| {
            let stem = std::path::Path::new(file_name)
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_else(|| "plan".into());
            (stem, None, 0)
        });
        let sim = match sim {
            Some((sim, true)) => sim,
            Some((mut sim, false)) => {
                sim.seed = seed;
                sim
            }
            None => SimSettings {
                seed,
                ..SimSettings::default()
            },
        };
        Some(Plan {
            name,
            description,
            seed,
            target: target?,
            workload: workload?,
            phases: phases.into_iter().map(|(p, _)| p).collect(),
            sla,
            slo,
            regression,
            sim,
            source: PlanSource {
                file_name: file_name.to_string(),
                text: self.text.clone(),
            },
        })
    }

    fn no_args(&mut self, node: &KdlNode, usage: &str) {
        self.check_entries(node, 0, &[], usage);
    }

    fn header(&mut self, node: &KdlNode) -> Option<(String, Option<String>, u64)> {
        let usage = "plan \"name\" { description \"...\"; seed 42 }";
        self.check_entries(node, 1, &[], usage);
        let name = self
            .required_arg(node, usage)
            .and_then(|e| self.string(e, usage));
        let mut description = None;
        let mut seed = 0;
        for child in children(node) {
            match child.name().value() {
                "description" => {
                    let usage = "description \"what this plan measures\"";
                    self.check_entries(child, 1, &[], usage);
                    self.no_children(child);
                    description = self
                        .required_arg(child, usage)
                        .and_then(|e| self.string(e, usage));
                }
                "seed" => {
                    let usage = "seed 42";
                    self.check_entries(child, 1, &[], usage);
                    self.no_children(child);
                    if let Some(entry) = self.required_arg(child, usage) {
                        match entry.value() {
                            KdlValue::Integer(n) if *n >= 0 && *n <= u64::MAX as i128 => {
                                seed = *n as u64
                            }
                            _ => self.error(
                                entry.span(),
                                "a seed is a whole number from 0 to 2^64-1",
                                "not a seed",
                                format!("write it as: {usage}"),
                            ),
                        }
                    }
                }
                _ => self.unknown_node(child, "in `plan`", "description, seed"),
            }
        }
        Some((name?, description, seed))
    }

    fn target(&mut self, node: &KdlNode) -> Option<Target> {
        let usage = "target \"http://127.0.0.1:8000\" { ... } or target \"sim\"";
        self.check_entries(node, 1, &[], usage);
        let base = self.required_arg(node, usage).and_then(|e| {
            let text = self.string(e, usage)?;
            if text == "sim" {
                Some(Endpoint::Simulator)
            } else if text.starts_with("http://") || text.starts_with("https://") {
                Some(Endpoint::Url(text))
            } else {
                self.error(
                    e.span(),
                    format!("\"{text}\" is not an http:// or https:// URL"),
                    "not a URL",
                    "write the server's base URL (with or without /v1), or \"sim\" for the embedded simulator",
                );
                None
            }
        });
        let mut api = Api::Chat;
        let mut model = None;
        let mut api_key_env = None;
        let mut stream = true;
        let mut timeout = Duration::from_secs(60);
        let mut continuous_usage = false;
        for child in children(node) {
            self.no_children(child);
            match child.name().value() {
                "api" => {
                    let usage = "api \"chat\" (or \"completions\")";
                    self.check_entries(child, 1, &[], usage);
                    if let Some(entry) = self.required_arg(child, usage) {
                        match self.string(entry, usage).as_deref() {
                            Some("chat") => api = Api::Chat,
                            Some("completions") => api = Api::Completions,
                            Some(other) => self.error(
                                entry.span(),
                                format!("unknown api \"{other}\""),
                                "unknown api",
                                "use \"chat\" for /v1/chat/completions or \"completions\" for /v1/completions",
                            ),
                            None => {}
                        }
                    }
                }
                "model" => {
                    let usage = "model \"meta-llama/Llama-3.1-8B-Instruct\"";
                    self.check_entries(child, 1, &[], usage);
                    model = self
                        .required_arg(child, usage)
                        .and_then(|e| self.string(e, usage));
                }
                "api-key" => {
                    let usage = "api-key env=\"OPENAI_API_KEY\"";
                    for entry in positional(child) {
                        self.error(
                            entry.span(),
                            "an API key is never written in a plan",
                            "key in the plan",
                            "name the environment variable that holds it: api-key env=\"OPENAI_API_KEY\"",
                        );
                    }
                    self.check_entries(child, usize::MAX, &["env"], usage);
                    match property(child, "env") {
                        Some(entry) => api_key_env = self.string(entry, usage),
                        None if positional(child).next().is_none() => self.error(
                            child.name().span(),
                            "`api-key` needs env=\"VARIABLE\"",
                            "env missing",
                            format!("write it as: {usage}"),
                        ),
                        None => {}
                    }
                }
                "stream" => {
                    let usage = "stream #true";
                    self.check_entries(child, 1, &[], usage);
                    if let Some(b) = self
                        .required_arg(child, usage)
                        .and_then(|e| self.boolean(e, usage))
                    {
                        stream = b;
                    }
                }
                "timeout" => {
                    let usage = "timeout \"60s\"";
                    self.check_entries(child, 1, &[], usage);
                    if let Some(d) = self
                        .required_arg(child, usage)
                        .and_then(|e| self.duration(e, usage))
                    {
                        timeout = d;
                    }
                }
                "continuous-usage" => {
                    let usage = "continuous-usage #true";
                    self.check_entries(child, 1, &[], usage);
                    if let Some(b) = self
                        .required_arg(child, usage)
                        .and_then(|e| self.boolean(e, usage))
                    {
                        continuous_usage = b;
                    }
                }
                _ => self.unknown_node(
                    child,
                    "in `target`",
                    "api, model, api-key, stream, timeout, continuous-usage",
                ),
            }
        }
        let endpoint = base?;
        let model = match (model, &endpoint) {
            (Some(model), _) => model,
            (None, Endpoint::Simulator) => "llmload-sim".to_string(),
            (None, Endpoint::Url(_)) => {
                self.error(
                    node.name().span(),
                    "the target has no `model`",
                    "model missing",
                    "add the model name the server serves, e.g. model \"meta-llama/Llama-3.1-8B-Instruct\"",
                );
                return None;
            }
        };
        Some(Target {
            endpoint,
            api,
            model,
            api_key_env,
            stream,
            timeout,
            continuous_usage,
        })
    }

    fn workload(&mut self, node: &KdlNode) -> Option<Workload> {
        self.no_args(node, "workload { input 512; output 128 }");
        let mut tokenizer = TokenizerSpec::Builtin("cl100k_base".into());
        let mut buckets: Option<Vec<Bucket>> = None;
        let mut output: Option<(u32, bool)> = None;
        let mut ok = true;
        for child in children(node) {
            match child.name().value() {
                "tokenizer" => {
                    self.no_children(child);
                    let usage = "tokenizer \"cl100k_base\" (or \"o200k_base\", or a path to tokenizer.json)";
                    self.check_entries(child, 1, &[], usage);
                    if let Some(entry) = self.required_arg(child, usage) {
                        match self.string(entry, usage) {
                            Some(name) if BUILTIN_TOKENIZERS.contains(&name.as_str()) => {
                                tokenizer = TokenizerSpec::Builtin(name)
                            }
                            Some(name) if name.ends_with(".json") || name.contains('/') => {
                                // A relative path is relative to the plan file, so a plan and
                                // its tokenizer can live together in a repository.
                                let path = std::path::Path::new(&name);
                                let resolved = if path.is_relative() {
                                    std::path::Path::new(&self.file_name)
                                        .parent()
                                        .map(|dir| dir.join(path))
                                        .unwrap_or_else(|| path.to_path_buf())
                                } else {
                                    path.to_path_buf()
                                };
                                if resolved.is_file() || !self.check_files {
                                    tokenizer = TokenizerSpec::File(resolved);
                                } else {
                                    ok = false;
                                    self.error(
                                        entry.span(),
                                        format!("no tokenizer file at {}", resolved.display()),
                                        "file not found",
                                        "give the path of a Hugging Face tokenizer.json, relative to this plan file, or use \"cl100k_base\" / \"o200k_base\"",
                                    );
                                }
                            }
                            Some(name) => {
                                ok = false;
                                self.error(
                                    entry.span(),
                                    format!("unknown tokenizer \"{name}\""),
                                    "unknown tokenizer",
                                    "built in: \"cl100k_base\", \"o200k_base\"; or give the path of a Hugging Face tokenizer.json",
                                )
                            }
                            None => ok = false,
                        }
                    }
                }
                "input" => buckets = self.input(child),
                "output" => {
                    self.no_children(child);
                    let usage = "output 256 ignore-eos=#true";
                    self.check_entries(child, 1, &["ignore-eos"], usage);
                    let tokens = self
                        .required_arg(child, usage)
                        .and_then(|e| self.integer(e, 1, usage));
                    let ignore_eos = match property(child, "ignore-eos") {
                        Some(entry) => self.boolean(entry, usage),
                        None => Some(false),
                    };
                    if let (Some(tokens), Some(ignore_eos)) = (tokens, ignore_eos) {
                        output = Some((tokens as u32, ignore_eos));
                    } else {
                        ok = false;
                    }
                }
                _ => self.unknown_node(child, "in `workload`", "tokenizer, input, output"),
            }
        }
        if buckets.is_none() && !children(node).iter().any(|c| c.name().value() == "input") {
            self.error(
                node.name().span(),
                "the workload has no `input`",
                "input missing",
                "add input lengths: input 512, or input { bucket 128 weight=5; bucket 2048 weight=1 }",
            );
        }
        if output.is_none() && !children(node).iter().any(|c| c.name().value() == "output") {
            self.error(
                node.name().span(),
                "the workload has no `output`",
                "output missing",
                "add the output length in tokens: output 256 (ignore-eos=#true asks for exactly that many)",
            );
        }
        let (output_tokens, ignore_eos) = output?;
        if !ok {
            return None;
        }
        Some(Workload {
            tokenizer,
            buckets: buckets?,
            output_tokens,
            ignore_eos,
        })
    }

    fn input(&mut self, node: &KdlNode) -> Option<Vec<Bucket>> {
        let usage = "input 512, or input { bucket 128 weight=5; bucket 512 weight=3 }";
        self.check_entries(node, 1, &[], usage);
        let fixed = positional(node).next();
        let block = children(node);
        match (fixed, block.is_empty()) {
            (Some(entry), true) => {
                let tokens = self.integer(entry, 1, usage)?;
                Some(vec![Bucket {
                    input_tokens: tokens as u32,
                    weight: 1.0,
                    output_tokens: None,
                }])
            }
            (Some(entry), false) => {
                self.error(
                    entry.span(),
                    "`input` has both a fixed length and buckets",
                    "fixed length",
                    "use either input 512, or a block of buckets, not both",
                );
                None
            }
            (None, true) => {
                self.error(node.name().span(), "`input` is empty", "no length", usage);
                None
            }
            (None, false) => {
                let mut buckets = Vec::new();
                let mut ok = true;
                for child in block {
                    if child.name().value() != "bucket" {
                        self.unknown_node(child, "in `input`", "bucket");
                        ok = false;
                        continue;
                    }
                    self.no_children(child);
                    let usage = "bucket 512 weight=3 output=128";
                    self.check_entries(child, 1, &["weight", "output"], usage);
                    let tokens = self
                        .required_arg(child, usage)
                        .and_then(|e| self.integer(e, 1, usage));
                    let weight = match property(child, "weight") {
                        Some(entry) => self.number(entry, true, usage),
                        None => Some(1.0),
                    };
                    let output = match property(child, "output") {
                        Some(entry) => self.integer(entry, 1, usage).map(|n| Some(n as u32)),
                        None => Some(None),
                    };
                    match (tokens, weight, output) {
                        (Some(tokens), Some(weight), Some(output)) => buckets.push(Bucket {
                            input_tokens: tokens as u32,
                            weight,
                            output_tokens: output,
                        }),
                        _ => ok = false,
                    }
                }
                (ok && !buckets.is_empty()).then_some(buckets)
            }
        }
    }

    fn phase(&mut self, node: &KdlNode) -> Option<Phase> {
        let usage = "phase \"steady\" { rate 16; duration \"3m\" }";
        self.check_entries(node, 1, &[], usage);
        let name = self
            .required_arg(node, usage)
            .and_then(|e| self.string(e, usage));
        let mut loads: Vec<(Load, &KdlNode)> = Vec::new();
        let mut arrivals: Option<(Arrivals, &KdlNode)> = None;
        let mut duration = None;
        let mut max_requests = None;
        let mut record = true;
        let mut ok = true;
        for child in children(node) {
            self.no_children(child);
            match child.name().value() {
                "concurrency" => {
                    let usage = "concurrency 8";
                    self.check_entries(child, 1, &[], usage);
                    match self
                        .required_arg(child, usage)
                        .and_then(|e| self.integer(e, 1, usage))
                    {
                        Some(n) => loads.push((Load::Concurrency(n as u32), child)),
                        None => ok = false,
                    }
                }
                "at-once" => {
                    let usage = "at-once 64";
                    self.check_entries(child, 1, &[], usage);
                    match self
                        .required_arg(child, usage)
                        .and_then(|e| self.integer(e, 1, usage))
                    {
                        Some(n) => loads.push((Load::AtOnce(n as u32), child)),
                        None => ok = false,
                    }
                }
                "rate" => {
                    let usage = "rate 16, or rate from=1 to=16";
                    self.check_entries(child, 1, &["from", "to"], usage);
                    let fixed = positional(child).next();
                    let from = property(child, "from");
                    let to = property(child, "to");
                    let shape = match (fixed, from, to) {
                        (Some(entry), None, None) => {
                            self.number(entry, true, usage).map(RateShape::Constant)
                        }
                        (None, Some(from), Some(to)) => {
                            let from = self.number(from, false, usage);
                            let to = self.number(to, true, usage);
                            from.zip(to).map(|(from, to)| RateShape::Ramp { from, to })
                        }
                        (None, None, None) => {
                            self.error(
                                child.name().span(),
                                "`rate` needs a value",
                                "rate missing",
                                "requests per second: rate 16, or a linear ramp: rate from=1 to=16",
                            );
                            None
                        }
                        (Some(entry), _, _) => {
                            self.error(
                                entry.span(),
                                "`rate` has both a fixed value and from/to",
                                "fixed rate",
                                "use either rate 16, or rate from=1 to=16",
                            );
                            None
                        }
                        (None, Some(one), None) | (None, None, Some(one)) => {
                            self.error(
                                one.span(),
                                "a ramp needs both from= and to=",
                                "half a ramp",
                                "write it as: rate from=1 to=16",
                            );
                            None
                        }
                    };
                    match shape {
                        Some(shape) => loads.push((
                            Load::Rate {
                                rate: shape,
                                arrivals: Arrivals::Poisson,
                            },
                            child,
                        )),
                        None => ok = false,
                    }
                }
                "arrivals" => {
                    let usage = "arrivals \"poisson\" (or \"constant\", or \"gamma\" cv=2.0)";
                    self.check_entries(child, 1, &["cv"], usage);
                    let kind = self.required_arg(child, usage);
                    let kind_text = kind.and_then(|e| self.string(e, usage));
                    let cv = property(child, "cv");
                    let parsed = match (kind_text.as_deref(), cv) {
                        (Some("poisson"), None) => Some(Arrivals::Poisson),
                        (Some("constant"), None) => Some(Arrivals::Constant),
                        (Some("gamma"), Some(cv)) => self
                            .number(cv, true, usage)
                            .map(|cv| Arrivals::Gamma { cv }),
                        (Some("gamma"), None) => {
                            self.error(
                                child.name().span(),
                                "gamma arrivals need cv=",
                                "cv missing",
                                "give the coefficient of variation: arrivals \"gamma\" cv=2.0 (1.0 is Poisson)",
                            );
                            None
                        }
                        (Some("poisson" | "constant"), Some(cv)) => {
                            self.error(
                                cv.span(),
                                "cv= applies only to gamma arrivals",
                                "not for this kind",
                                "remove cv=, or use arrivals \"gamma\" cv=2.0",
                            );
                            None
                        }
                        (Some(other), _) => {
                            if let Some(e) = kind {
                                self.error(
                                    e.span(),
                                    format!("unknown arrival process \"{other}\""),
                                    "unknown arrivals",
                                    "use \"poisson\", \"constant\" or \"gamma\" cv=X",
                                );
                            }
                            None
                        }
                        (None, _) => None,
                    };
                    match parsed {
                        Some(a) => arrivals = Some((a, child)),
                        None => ok = false,
                    }
                }
                "duration" => {
                    let usage = "duration \"60s\"";
                    self.check_entries(child, 1, &[], usage);
                    duration = self
                        .required_arg(child, usage)
                        .and_then(|e| self.duration(e, usage));
                    ok &= duration.is_some();
                }
                "requests" => {
                    let usage = "requests 500";
                    self.check_entries(child, 1, &[], usage);
                    max_requests = self
                        .required_arg(child, usage)
                        .and_then(|e| self.integer(e, 1, usage));
                    ok &= max_requests.is_some();
                }
                "record" => {
                    let usage = "record #false";
                    self.check_entries(child, 1, &[], usage);
                    match self
                        .required_arg(child, usage)
                        .and_then(|e| self.boolean(e, usage))
                    {
                        Some(b) => record = b,
                        None => ok = false,
                    }
                }
                _ => self.unknown_node(
                    child,
                    "in `phase`",
                    "concurrency, rate, at-once, arrivals, duration, requests, record",
                ),
            }
        }
        let name = name?;
        let load_help = "give the phase exactly one load model: concurrency N (closed loop), \
                         rate R or rate from=A to=B (open loop), or at-once N (a burst)";
        let load = match loads.len() {
            0 => {
                if ok {
                    self.error(
                        node.name().span(),
                        format!("phase \"{name}\" has no load model"),
                        "no load",
                        load_help,
                    );
                }
                return None;
            }
            1 => loads.remove(0),
            _ => {
                self.error(
                    loads[1].1.name().span(),
                    format!("phase \"{name}\" has more than one load model"),
                    "second load model",
                    load_help,
                );
                return None;
            }
        };
        let (mut load, load_node) = load;
        if let Some((kind, arrivals_node)) = arrivals {
            match &mut load {
                Load::Rate { arrivals, .. } => *arrivals = kind,
                _ => {
                    self.error(
                        arrivals_node.name().span(),
                        "`arrivals` applies only to open-loop phases",
                        "no rate here",
                        "arrivals shape a `rate` phase; remove it, or use rate R",
                    );
                    ok = false;
                }
            }
        }
        match load {
            Load::AtOnce(_) => {
                if let Some(extra) = children(node)
                    .iter()
                    .find(|c| matches!(c.name().value(), "duration" | "requests"))
                {
                    self.error(
                        extra.name().span(),
                        "an at-once phase has no duration or request limit",
                        "not for a burst",
                        "a burst sends its N requests together and ends when they finish; remove this",
                    );
                    ok = false;
                }
            }
            Load::Rate {
                rate: RateShape::Ramp { .. },
                ..
            } if duration.is_none() && ok => {
                self.error(
                    load_node.name().span(),
                    "a ramp needs a `duration` to ramp over",
                    "ramp without duration",
                    "add duration \"60s\" to the phase",
                );
                ok = false;
            }
            _ if duration.is_none() && max_requests.is_none() && ok => {
                self.error(
                    node.name().span(),
                    format!("phase \"{name}\" never ends"),
                    "no end",
                    "add duration \"60s\", requests N, or both (the phase ends at whichever comes first)",
                );
                ok = false;
            }
            _ => {}
        }
        ok.then_some(Phase {
            name,
            load,
            duration,
            max_requests,
            record,
        })
    }

    /// The metric a line of `sla` or `regression` names.
    fn metric(&mut self, node: &KdlNode, has_slo: bool) -> Option<Metric> {
        let metric_name = node.name().value();
        let metrics: Vec<&str> = Metric::ALL.iter().map(|m| m.name()).collect();
        let Some(metric) = Metric::from_name(metric_name) else {
            self.error(
                node.name().span(),
                format!("unknown metric `{metric_name}`"),
                "unknown metric",
                format!("metrics: {}", metrics.join(", ")),
            );
            return None;
        };
        if matches!(metric, Metric::Goodput | Metric::GoodputRatio) && !has_slo {
            self.error(
                node.name().span(),
                format!("`{metric_name}` needs per-request objectives"),
                "no slo",
                "add an slo node saying what a good request is, e.g. slo ttft=\"300ms\" tpot=\"50ms\" e2e=\"10s\"",
            );
            return None;
        }
        Some(metric)
    }

    /// The statistic of a distribution metric, at the first positional argument.
    fn statistic(&mut self, node: &KdlNode, usage: &str) -> Option<Stat> {
        match positional(node).next() {
            Some(entry) => {
                let parsed = match entry.value() {
                    KdlValue::String(s) => Stat::parse(s),
                    _ => None,
                };
                if parsed.is_none() {
                    self.error(
                        entry.span(),
                        "unknown statistic",
                        "unknown statistic",
                        "statistics: mean, min, max, median, or a percentile such as p50, p90, p99, p99.9",
                    );
                }
                parsed
            }
            None => {
                self.error(
                    node.name().span(),
                    format!("`{}` needs a statistic", node.name().value()),
                    "statistic missing",
                    format!("write it as: {usage}"),
                );
                None
            }
        }
    }

    /// `phase="name"`: a recorded phase of the plan. `Err` when it names none.
    fn phase_ref(
        &mut self,
        node: &KdlNode,
        phases: &[String],
        unrecorded: &[String],
        usage: &str,
    ) -> Result<Option<String>, ()> {
        let Some(entry) = property(node, "phase") else {
            return Ok(None);
        };
        let name = self.string(entry, usage).ok_or(())?;
        if !phases.contains(&name) {
            let known = if phases.is_empty() {
                "none".to_string()
            } else {
                phases
                    .iter()
                    .map(|p| format!("\"{p}\""))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            self.error(
                entry.span(),
                format!("no phase is named \"{name}\""),
                "unknown phase",
                format!("phases in this plan: {known}"),
            );
            return Err(());
        }
        if unrecorded.contains(&name) {
            self.error(
                entry.span(),
                format!("phase \"{name}\" is not recorded (record #false)"),
                "unrecorded phase",
                "an unrecorded phase (a warmup) has no metrics to judge; name a recorded phase or remove record #false",
            );
            return Err(());
        }
        Ok(Some(name))
    }

    fn slo(&mut self, node: &KdlNode) -> Option<Slo> {
        let usage = "slo ttft=\"300ms\" tpot=\"50ms\" e2e=\"10s\"";
        self.check_entries(node, 0, &["ttft", "tpot", "e2e"], usage);
        self.no_children(node);
        let mut slo = Slo::default();
        let mut ok = true;
        for (key, slot) in [
            ("ttft", &mut slo.ttft),
            ("tpot", &mut slo.tpot),
            ("e2e", &mut slo.e2e),
        ] {
            if let Some(entry) = property(node, key) {
                *slot = self.duration(entry, usage);
                ok &= slot.is_some();
            }
        }
        if ok && slo == Slo::default() {
            self.error(
                node.name().span(),
                "`slo` sets no objective",
                "empty slo",
                format!("write it as: {usage}"),
            );
            return None;
        }
        ok.then_some(slo)
    }

    fn tolerance(
        &mut self,
        node: &KdlNode,
        phases: &[String],
        unrecorded: &[String],
        has_slo: bool,
    ) -> Option<Tolerance> {
        let metric = self.metric(node, has_slo)?;
        self.no_children(node);
        let name = metric.name();
        let sign = if metric.higher_is_better() { '-' } else { '+' };
        let usage = if metric.is_distribution() {
            format!("{name} p99 \"{sign}10%\"")
        } else {
            format!("{name} \"{sign}5%\"")
        };
        let stat = if metric.is_distribution() {
            Some(self.statistic(node, &usage)?)
        } else {
            None
        };
        let value_index = usize::from(stat.is_some());
        self.check_entries(node, value_index + 1, &["phase"], &usage);
        let Some(entry) = positional(node).nth(value_index) else {
            self.error(
                node.name().span(),
                format!("`{name}` needs a tolerance"),
                "tolerance missing",
                format!("write it as: {usage}"),
            );
            return None;
        };
        let text = self.string(entry, &usage)?;
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
                self.error(
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
            self.error(
                entry.span(),
                format!("`{name}` regresses when it {direction}, so its tolerance is {sign}N%"),
                "wrong direction",
                format!("write it as: {usage}"),
            );
            return None;
        }
        let phase = self.phase_ref(node, phases, unrecorded, &usage).ok()?;
        let stat_text = stat.map(|s| format!(" {s}")).unwrap_or_default();
        Some(Tolerance {
            metric,
            stat,
            allowed,
            phase,
            text: format!("{name}{stat_text} {sign}{}%", trim_float(allowed * 100.0)),
        })
    }

    fn assertion(
        &mut self,
        node: &KdlNode,
        phases: &[String],
        unrecorded: &[String],
        has_slo: bool,
    ) -> Option<Assertion> {
        let metric_name = node.name().value();
        let metric = self.metric(node, has_slo)?;
        self.no_children(node);
        let usage = if metric.is_distribution() {
            format!("{metric_name} p99 < \"500ms\" phase=\"steady\"")
        } else if metric.kind() == MetricKind::Fraction {
            format!("{metric_name} < \"1%\"")
        } else {
            format!("{metric_name} > 10")
        };
        let args: Vec<&KdlEntry> = positional(node).collect();
        let mut rest = &args[..];
        let mut stat = None;
        if metric.is_distribution() {
            stat = Some(self.statistic(node, &usage)?);
            rest = &rest[1..];
        }
        // `<` and `>` are bare identifiers in KDL 2.0, but `<=` and `>=` followed by a value read
        // as a property named `<` or `>`; both spellings are accepted here on purpose.
        let ops_as_props: Vec<&KdlEntry> = node
            .entries()
            .iter()
            .filter(|e| matches!(e.name().map(|n| n.value()), Some("<") | Some(">")))
            .collect();
        let (op, value_entry) = match (rest, ops_as_props.as_slice()) {
            ([op_entry, value], []) => {
                let op = match op_entry.value() {
                    KdlValue::String(s) if s == "<" => Op::Lt,
                    KdlValue::String(s) if s == ">" => Op::Gt,
                    KdlValue::String(s) if s == "<=" => Op::Le,
                    KdlValue::String(s) if s == ">=" => Op::Ge,
                    _ => {
                        self.error(
                            op_entry.span(),
                            "expected a comparison: <, <=, > or >=",
                            "not a comparison",
                            format!("write it as: {usage}"),
                        );
                        return None;
                    }
                };
                (op, *value)
            }
            ([], [prop]) => {
                let op = if prop.name().map(|n| n.value()) == Some("<") {
                    Op::Le
                } else {
                    Op::Ge
                };
                (op, *prop)
            }
            ([], []) | ([_], []) => {
                self.error(
                    node.span(),
                    format!("`{metric_name}` needs a comparison and a threshold"),
                    "incomplete assertion",
                    format!("write it as: {usage}"),
                );
                return None;
            }
            _ => {
                self.error(
                    node.span(),
                    "this assertion has extra values",
                    "too many values",
                    format!("one comparison and one threshold: {usage}"),
                );
                return None;
            }
        };
        let threshold = match metric.kind() {
            MetricKind::Latency => self
                .duration(value_entry, &usage)
                .map(|d| d.as_secs_f64() * 1000.0),
            MetricKind::Fraction => match value_entry.value() {
                KdlValue::String(s) => match parse_percent(s) {
                    Ok(v) => Some(v),
                    Err(message) => {
                        self.error(
                            value_entry.span(),
                            message,
                            "not a percentage",
                            format!("write it as: {usage}"),
                        );
                        None
                    }
                },
                other => {
                    self.error(
                        value_entry.span(),
                        format!("expected a percentage string, found {}", type_name(other)),
                        "not a percentage",
                        format!("write it as: {usage}"),
                    );
                    None
                }
            },
            MetricKind::Throughput | MetricKind::TokenRate => {
                self.number(value_entry, false, &usage)
            }
        }?;
        let allowed: Vec<&str> = node
            .entries()
            .iter()
            .filter_map(|e| e.name().map(|n| n.value()))
            .filter(|n| !matches!(*n, "phase" | "<" | ">"))
            .collect();
        if let Some(unknown) = allowed.first() {
            let entry = property(node, unknown)
                .map(|e| e.span())
                .unwrap_or(node.span());
            self.error(
                entry,
                format!("unknown property `{unknown}` on an assertion"),
                "unknown property",
                "the only property of an assertion is phase=\"name\"",
            );
            return None;
        }
        let phase = self.phase_ref(node, phases, unrecorded, &usage).ok()?;
        let threshold_text = match metric.kind() {
            MetricKind::Latency => {
                super::units::format_duration(Duration::from_secs_f64(threshold / 1000.0))
            }
            MetricKind::Fraction => format!("{}%", trim_float(threshold * 100.0)),
            _ => trim_float(threshold),
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

    /// A duration that may be zero (simulator costs).
    fn duration_or_zero(&mut self, entry: &KdlEntry, usage: &str) -> Option<Duration> {
        if let KdlValue::String(s) = entry.value() {
            if parse_duration(s) == Ok(Duration::ZERO) {
                return Some(Duration::ZERO);
            }
        }
        self.duration(entry, usage)
    }

    /// A rate such as "1%" (a fraction of requests).
    fn rate(&mut self, entry: &KdlEntry, usage: &str) -> Option<f64> {
        match entry.value() {
            KdlValue::String(s) => match parse_percent(s) {
                Ok(v) => Some(v),
                Err(message) => {
                    self.error(
                        entry.span(),
                        message,
                        "not a rate",
                        format!("write it as: {usage}"),
                    );
                    None
                }
            },
            other => {
                self.error(
                    entry.span(),
                    format!("expected a percentage string, found {}", type_name(other)),
                    "not a rate",
                    format!("write it as: {usage}"),
                );
                None
            }
        }
    }

    fn sim(&mut self, node: &KdlNode) -> Option<(SimSettings, bool)> {
        self.no_args(node, "sim { ttft \"50ms\"; itl \"10ms\" }");
        let mut sim = SimSettings::default();
        let mut seeded = false;
        // A profile is the base the other knobs adjust, wherever it is written.
        if let Some(child) = children(node)
            .iter()
            .find(|c| c.name().value() == "profile")
        {
            let usage = "profile \"llama-3.1-8b-h100\"";
            self.check_entries(child, 1, &[], usage);
            self.no_children(child);
            if let Some(entry) = self.required_arg(child, usage) {
                if let Some(name) = self.string(entry, usage) {
                    match super::profiles::builtin(&name) {
                        Some(engine) => sim.engine = Some(engine),
                        None => self.error(
                            entry.span(),
                            format!("no built-in profile is named \"{name}\""),
                            "unknown profile",
                            format!("built-in profiles: {}", super::profiles::NAMES.join(", ")),
                        ),
                    }
                }
            }
        }
        for child in children(node) {
            let key = child.name().value();
            match key {
                "profile" => {}
                "engine" => {
                    self.no_args(child, "engine { max-seqs 64 }");
                    let engine = sim
                        .engine
                        .get_or_insert_with(super::profiles::default_engine);
                    let mut engine = engine.clone();
                    self.engine(child, &mut engine);
                    sim.engine = Some(engine);
                }
                "faults" => {
                    self.no_args(child, "faults { http-5xx \"1%\" }");
                    self.faults(child, &mut sim.faults);
                }
                "ttft" | "itl" | "jitter" => {
                    self.no_children(child);
                    let usage = format!("{key} \"10ms\"");
                    self.check_entries(child, 1, &[], &usage);
                    let value = self
                        .required_arg(child, &usage)
                        .and_then(|e| self.duration_or_zero(e, &usage));
                    if let Some(value) = value {
                        match key {
                            "ttft" => sim.ttft = value,
                            "itl" => sim.itl = value,
                            _ => sim.jitter = value,
                        }
                    }
                }
                "seed" => {
                    self.no_children(child);
                    let usage = "seed 7";
                    self.check_entries(child, 1, &[], usage);
                    if let Some(entry) = self.required_arg(child, usage) {
                        match entry.value() {
                            KdlValue::Integer(n) if *n >= 0 && *n <= u64::MAX as i128 => {
                                sim.seed = *n as u64;
                                seeded = true;
                            }
                            _ => self.error(
                                entry.span(),
                                "a seed is a whole number from 0 to 2^64-1",
                                "not a seed",
                                format!("write it as: {usage}"),
                            ),
                        }
                    }
                }
                "tokens-per-chunk" => {
                    self.no_children(child);
                    let usage = "tokens-per-chunk 1";
                    self.check_entries(child, 1, &[], usage);
                    if let Some(n) = self
                        .required_arg(child, usage)
                        .and_then(|e| self.integer(e, 1, usage))
                    {
                        sim.tokens_per_chunk = n as u32;
                    }
                }
                _ => self.unknown_node(
                    child,
                    "in `sim`",
                    "profile, engine, faults, ttft, itl, jitter, tokens-per-chunk, seed",
                ),
            }
        }
        Some((sim, seeded))
    }

    fn engine(&mut self, node: &KdlNode, engine: &mut EngineSettings) {
        const KNOBS: &str = "max-seqs, max-batched-tokens, kv-cache-tokens, block-size, max-model-len, \
                             max-waiting, queue-full-status, step-base, prefill-per-token, decode-per-seq, \
                             attention-per-token";
        for child in children(node) {
            self.no_children(child);
            let key = child.name().value();
            let usage = format!("{key} VALUE (see docs/simulator.md)");
            self.check_entries(child, 1, &[], &usage);
            let Some(entry) = self.required_arg(child, &usage) else {
                continue;
            };
            match key {
                "max-seqs" | "max-batched-tokens" | "kv-cache-tokens" | "block-size"
                | "max-model-len" | "max-waiting" => {
                    let min = if key == "max-waiting" { 0 } else { 1 };
                    if let Some(n) = self.integer(entry, min, &format!("{key} 64")) {
                        match key {
                            "max-seqs" => engine.max_seqs = n as u32,
                            "max-batched-tokens" => engine.max_batched_tokens = n as u32,
                            "kv-cache-tokens" => engine.kv_cache_tokens = n,
                            "block-size" => engine.block_size = n as u32,
                            "max-model-len" => engine.max_model_len = n as u32,
                            _ => engine.max_waiting = n as u32,
                        }
                    }
                }
                "queue-full-status" => match entry.value() {
                    KdlValue::Integer(429) => engine.queue_full_status = 429,
                    KdlValue::Integer(503) => engine.queue_full_status = 503,
                    _ => self.error(
                        entry.span(),
                        "a full queue answers 429 or 503",
                        "not 429 or 503",
                        "write it as: queue-full-status 503",
                    ),
                },
                "step-base" | "prefill-per-token" | "decode-per-seq" | "attention-per-token" => {
                    if let Some(d) = self.duration_or_zero(entry, &format!("{key} \"50us\"")) {
                        match key {
                            "step-base" => engine.step_base = d,
                            "prefill-per-token" => engine.prefill_per_token = d,
                            "decode-per-seq" => engine.decode_per_seq = d,
                            _ => engine.attention_per_token = d,
                        }
                    }
                }
                _ => self.unknown_node(child, "in `engine`", KNOBS),
            }
        }
        if engine.max_batched_tokens < engine.max_seqs {
            self.error(
                node.name().span(),
                "max-batched-tokens is below max-seqs: running sequences could not all decode in one step",
                "budget too small",
                "raise max-batched-tokens to at least max-seqs",
            );
        }
    }

    fn faults(&mut self, node: &KdlNode, faults: &mut Faults) {
        for child in children(node) {
            self.no_children(child);
            let key = child.name().value();
            match key {
                "http-5xx" | "http-429" | "drop-mid-stream" | "malformed-chunk" => {
                    let usage = format!("{key} \"1%\"");
                    self.check_entries(child, 1, &[], &usage);
                    if let Some(rate) = self
                        .required_arg(child, &usage)
                        .and_then(|e| self.rate(e, &usage))
                    {
                        match key {
                            "http-5xx" => faults.http_5xx = rate,
                            "http-429" => faults.http_429 = rate,
                            "drop-mid-stream" => faults.drop_mid_stream = rate,
                            _ => faults.malformed_chunk = rate,
                        }
                    }
                }
                "stall" => {
                    let usage = "stall \"2s\" at-token=10 rate=\"5%\"";
                    self.check_entries(child, 1, &["at-token", "rate"], usage);
                    let duration = self
                        .required_arg(child, usage)
                        .and_then(|e| self.duration(e, usage));
                    let at_token = match property(child, "at-token") {
                        Some(e) => self.integer(e, 1, usage).map(|n| n as u32),
                        None => Some(1),
                    };
                    let rate = match property(child, "rate") {
                        Some(e) => self.rate(e, usage),
                        None => Some(1.0),
                    };
                    if let (Some(duration), Some(at_token), Some(rate)) = (duration, at_token, rate)
                    {
                        faults.stall = Some(Stall {
                            duration,
                            at_token,
                            rate,
                        });
                    }
                }
                "slow-headers" => {
                    let usage = "slow-headers \"500ms\" rate=\"10%\"";
                    self.check_entries(child, 1, &["rate"], usage);
                    let delay = self
                        .required_arg(child, usage)
                        .and_then(|e| self.duration(e, usage));
                    let rate = match property(child, "rate") {
                        Some(e) => self.rate(e, usage),
                        None => Some(1.0),
                    };
                    if let (Some(delay), Some(rate)) = (delay, rate) {
                        faults.slow_headers = Some(SlowHeaders { delay, rate });
                    }
                }
                _ => self.unknown_node(
                    child,
                    "in `faults`",
                    "http-5xx, http-429, drop-mid-stream, malformed-chunk, stall, slow-headers",
                ),
            }
        }
    }
}

/// Parses a simulator profile file: a `sim { ... }` block, as in a plan.
pub fn parse_sim_profile(file_name: &str, text: String) -> Result<SimSettings, PlanErrors> {
    let text = Arc::new(text);
    let mut cx = Cx {
        file_name: file_name.to_string(),
        text: text.clone(),
        diagnostics: Vec::new(),
        check_files: true,
    };
    let document = cx.document(&text)?;
    let mut settings = None;
    for node in document.nodes() {
        if node.name().value() == "sim" && settings.is_none() {
            settings = cx.sim(node).map(|(s, _)| s);
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
        _ => Err(cx.finish()),
    }
}

fn plural(n: usize, word: &str) -> String {
    match n {
        0 => format!("no {word}s"),
        1 => format!("one {word}"),
        n => format!("{n} {word}s"),
    }
}

/// `500.0` → `500`, `0.5` → `0.5`.
pub(crate) fn trim_float(value: f64) -> String {
    let text = format!("{:.3}", value);
    text.trim_end_matches('0').trim_end_matches('.').to_string()
}
