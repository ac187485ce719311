//! The walker's context: where diagnostics go, and the shapes every node handler shares.
//!
//! A node handler reads its node through these helpers, so that the same mistake gets the same
//! message everywhere: [`Cx::single`] for a node that holds one value (`timeout "60s"`),
//! [`Cx::prop_or`] for a property, and [`Cx::walk`] for a block of children, whose table of
//! handlers is also the list of names the "unknown node" help offers (so they cannot drift).

use std::sync::Arc;

use kdl::{KdlEntry, KdlNode, KdlValue};
use miette::{NamedSource, SourceSpan};

use super::values::Kind;
use crate::plan::PlanDiagnostic;

/// A child node's handler, with the state the block builds.
pub(super) type Handler<S> = fn(&mut Cx, &KdlNode, &mut S);

/// One file a plan is built from: the plan itself, or a file it includes.
pub(super) struct SourceFile {
    /// As diagnostics show it (and what its relative paths resolve from).
    pub name: String,
    pub text: Arc<String>,
    /// Where it holds a secret it should not (an API key written in it): masked in every
    /// diagnostic's quote of it.
    pub secret_spans: Vec<SourceSpan>,
}

/// Where `(env)"NAME"` values come from.
#[derive(Debug, Clone)]
pub enum EnvSource {
    /// This process's environment.
    Process,
    /// The values a run recorded (to judge its records again as it was run).
    Recorded(std::collections::BTreeMap<String, String>),
}

/// Where the walk is, and every mistake found so far.
pub(super) struct Cx {
    pub files: Vec<SourceFile>,
    /// The file whose nodes are being read: spans are in its text.
    pub current: usize,
    /// Every mistake, with the file it is in.
    pub diagnostics: Vec<(usize, PlanDiagnostic)>,
    /// Which of `diagnostics` are consequences of others ([`Cx::consequence`]).
    pub consequences: Vec<usize>,
    /// Look for files the plan names (a tokenizer); off when a kept plan is judged again.
    pub check_files: bool,
    /// Every phase replays a trace (which gives every request's lengths): the workload then
    /// needs no `input` or `output`.
    pub replay_only: bool,
    /// The target's API generates nothing (embeddings, rerank): the workload then needs a
    /// `batch`, not an `output`.
    pub batch_api: bool,
    pub env: EnvSource,
    /// Every `(env)` value read: name and value (none of them secret: keys are named, not read).
    pub env_used: Vec<(String, String)>,
}

pub(super) fn positional(node: &KdlNode) -> impl Iterator<Item = &KdlEntry> {
    node.entries().iter().filter(|entry| entry.name().is_none())
}

pub(super) fn property<'a>(node: &'a KdlNode, name: &str) -> Option<&'a KdlEntry> {
    // KDL lets a property repeat; the last one wins, as the spec says.
    node.entries()
        .iter()
        .rev()
        .find(|entry| entry.name().map(|n| n.value()) == Some(name))
}

pub(super) fn children(node: &KdlNode) -> &[KdlNode] {
    node.children().map(|doc| doc.nodes()).unwrap_or(&[])
}

pub(super) fn type_name(value: &KdlValue) -> &'static str {
    match value {
        KdlValue::String(_) => "a string",
        KdlValue::Integer(_) => "an integer",
        KdlValue::Float(_) => "a number",
        KdlValue::Bool(_) => "a boolean",
        KdlValue::Null => "#null",
    }
}

/// The span of a node's first argument (its name, for `phase "x"`), or of the node.
pub(super) fn first_arg_span(node: &KdlNode) -> SourceSpan {
    positional(node)
        .next()
        .map(|e| e.span())
        .unwrap_or(node.name().span())
}

fn plural(n: usize, word: &str) -> String {
    match n {
        0 => format!("no {word}s"),
        1 => format!("one {word}"),
        n => format!("{n} {word}s"),
    }
}

impl Cx {
    pub fn new(file_name: &str, text: Arc<String>, check_files: bool) -> Cx {
        Cx {
            files: vec![SourceFile {
                name: file_name.to_string(),
                text,
                secret_spans: Vec::new(),
            }],
            current: 0,
            diagnostics: Vec::new(),
            consequences: Vec::new(),
            check_files,
            replay_only: false,
            batch_api: false,
            env: EnvSource::Process,
            env_used: Vec::new(),
        }
    }

    /// The name of the file being read.
    pub fn file_name(&self) -> &str {
        &self.files[self.current].name
    }

    /// The text of the file being read.
    pub fn text(&self) -> Arc<String> {
        self.files[self.current].text.clone()
    }

    /// Notes a secret at `span` of the current file, to be masked in every quote of it.
    pub fn secret(&mut self, span: SourceSpan) {
        self.files[self.current].secret_spans.push(span);
    }

    pub fn error(
        &mut self,
        span: SourceSpan,
        message: impl Into<String>,
        label: impl Into<String>,
        help: impl Into<String>,
    ) {
        let file = &self.files[self.current];
        self.diagnostics.push((
            self.current,
            PlanDiagnostic {
                message: message.into(),
                source_code: NamedSource::new(&file.name, file.text.clone()),
                span,
                label: label.into(),
                help: Some(help.into()),
            },
        ));
    }

    /// A mistake in another file the plan reads (a dataset, a trace), quoted from that file.
    pub fn error_in_data(
        &mut self,
        file_name: &str,
        text: Arc<String>,
        error: crate::plan::data::DataError,
    ) {
        self.diagnostics.push((
            self.current,
            PlanDiagnostic {
                message: format!("{file_name}: {}", error.message),
                source_code: NamedSource::new(file_name, text),
                span: error.span.into(),
                label: error.label,
                help: Some(error.help),
            },
        ));
    }

    /// Reports positional arguments beyond `max_args` and properties not in `props`.
    pub fn check_entries(&mut self, node: &KdlNode, max_args: usize, props: &[&str], usage: &str) {
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
                    let suggestion =
                        crate::plan::suggest::did_you_mean(key.value(), props.iter().copied());
                    self.error(
                        entry.span(),
                        format!("unknown property `{}` on `{name}`", key.value()),
                        "unknown property",
                        format!(
                            "{suggestion}properties allowed on `{name}`: {allowed}; write it as: {usage}"
                        ),
                    );
                }
            }
        }
    }

    /// A node that takes no arguments or properties (a block such as `workload { ... }`).
    pub fn no_args(&mut self, node: &KdlNode, usage: &str) {
        self.check_entries(node, 0, &[], usage);
    }

    pub fn no_children(&mut self, node: &KdlNode) {
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

    pub fn unknown_node(&mut self, node: &KdlNode, context: &str, allowed: &str) {
        let name = node.name().value();
        let suggestion = crate::plan::suggest::did_you_mean(name, allowed.split(", "));
        self.error(
            node.name().span(),
            format!("unknown node `{name}` {context}"),
            "unknown node",
            format!("{suggestion}allowed here: {allowed}"),
        );
    }

    /// A mistake that follows from others in the same place (a phase with no load model when
    /// its `concurency` was unknown): reported after every other, so that the cause reads first.
    pub fn consequence(
        &mut self,
        span: SourceSpan,
        message: impl Into<String>,
        label: impl Into<String>,
        help: impl Into<String>,
    ) {
        self.error(span, message, label, help);
        self.consequences.push(self.diagnostics.len() - 1);
    }

    /// The first positional argument of `node`, which it requires.
    pub fn required_arg<'a>(&mut self, node: &'a KdlNode, usage: &str) -> Option<&'a KdlEntry> {
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

    /// The one value of a node such as `timeout "60s"`: no block, one argument, no property.
    pub fn single<K: Kind>(&mut self, node: &KdlNode, usage: &str, kind: K) -> Option<K::Out> {
        self.no_children(node);
        self.check_entries(node, 1, &[], usage);
        let entry = self.required_arg(node, usage)?;
        kind.read(self, entry, usage)
    }

    /// The first argument of a node that also takes properties (`output 256 ignore-eos=#true`).
    pub fn arg<K: Kind>(&mut self, node: &KdlNode, usage: &str, kind: K) -> Option<K::Out> {
        let entry = self.required_arg(node, usage)?;
        kind.read(self, entry, usage)
    }

    /// The property `name`, or `default` when it is absent; `None` when it is there but wrong.
    pub fn prop_or<K: Kind>(
        &mut self,
        node: &KdlNode,
        name: &str,
        default: K::Out,
        usage: &str,
        kind: K,
    ) -> Option<K::Out> {
        match property(node, name) {
            Some(entry) => kind.read(self, entry, usage),
            None => Some(default),
        }
    }

    /// The property `name`: `Ok(None)` when absent, `Err(())` when wrong (already reported).
    pub fn prop<K: Kind>(
        &mut self,
        node: &KdlNode,
        name: &str,
        usage: &str,
        kind: K,
    ) -> Result<Option<K::Out>, ()> {
        match property(node, name) {
            Some(entry) => kind.read(self, entry, usage).map(Some).ok_or(()),
            None => Ok(None),
        }
    }

    /// Hands each child of `node` to its handler in `table`; a child no handler takes is an
    /// unknown node, and the help lists the table's names.
    pub fn walk<S>(
        &mut self,
        node: &KdlNode,
        context: &str,
        table: &[(&str, Handler<S>)],
        state: &mut S,
    ) {
        for child in children(node) {
            let name = child.name().value();
            match table.iter().find(|(known, _)| *known == name) {
                Some((_, handle)) => handle(self, child, state),
                None => {
                    let allowed: Vec<&str> = table.iter().map(|(n, _)| *n).collect();
                    self.unknown_node(child, context, &allowed.join(", "));
                }
            }
        }
    }
}
