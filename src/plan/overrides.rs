//! Values set from the command line (`--set PATH=VALUE`, `--header`, `--api-key-env`): edits
//! of the plan's own text, made before it is parsed, so that every value set this way is
//! checked by the same diagnostics as the plan's (and a run keeps the plan it ran, the
//! values set in it, and says which were set).
//!
//! A path names nodes as the plan writes them, from the top: `workload.output`,
//! `target.timeout`, `phase:steady.rate` (`name:ARG` picks the node whose first argument is
//! ARG), `workload.output.ignore-eos` (a last name that is no child is a property of the node
//! before it). A node that is missing is added at the end of its block. The value is read as a
//! KDL value (`8`, `"30s"`, `#true`); one that is not KDL (`30s`) is a string.
//!
//! What this is not: a second grammar. It knows no node's meaning; the parser judges the
//! result.

use kdl::{KdlDocument, KdlEntry, KdlNode, KdlValue};

/// What is wrong with a value given on the command line, or with where it goes in the plan.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OverrideError {
    /// `--set` without `=`.
    #[error("--set {0}: write it as PATH=VALUE, e.g. --set phase:steady.rate=8")]
    NotPathValue(String),
    /// `--set` with an empty path, or an empty name between its dots.
    #[error(
        "--set {0}: the path names nodes from the top, separated by dots, e.g. workload.output"
    )]
    EmptySegment(String),
    /// `--header` without `:`.
    #[error("--header {0}: write it as \"Name: value\"")]
    NotHeader(String),
    /// `--header` or `--api-key-env` on a plan without a `target`.
    #[error("{flag}: the plan has no target")]
    NoTarget {
        /// The command line's option.
        flag: &'static str,
    },
    /// The path leads nowhere in the plan: the node named is not there (with the nearest that
    /// is), or a node on the way holds no such child.
    #[error("--set {shown}: {why}")]
    NotInPlan {
        /// The value set, as reports show it.
        shown: String,
        /// Where the path stops, and what the plan has there.
        why: String,
    },
}

/// One edit of the plan.
#[derive(Debug, Clone, PartialEq)]
pub enum Override {
    /// `--set PATH=VALUE`.
    Set {
        /// The nodes, as written on the command line.
        path: String,
        /// The value, as written.
        value: String,
    },
    /// `--header "Name: value"`: one more `header` in the target (`"Name: $VAR"` for a secret
    /// read from the environment at run time, as the plan's `env=`).
    Header {
        /// The header's name.
        name: String,
        /// Its value.
        value: String,
    },
    /// `--api-key-env VAR`: the target's key comes from this variable.
    ApiKeyEnv(String),
}

impl Override {
    /// Reads `PATH=VALUE`.
    pub fn set(text: &str) -> Result<Override, OverrideError> {
        let (path, value) = text
            .split_once('=')
            .ok_or_else(|| OverrideError::NotPathValue(text.to_string()))?;
        let path = path.trim();
        if path.is_empty() || path.split('.').any(|segment| segment.trim().is_empty()) {
            return Err(OverrideError::EmptySegment(text.to_string()));
        }
        Ok(Override::Set {
            path: path.to_string(),
            value: value.to_string(),
        })
    }

    /// Reads `Name: value`.
    pub fn header(text: &str) -> Result<Override, OverrideError> {
        let (name, value) = text
            .split_once(':')
            .ok_or_else(|| OverrideError::NotHeader(text.to_string()))?;
        Ok(Override::Header {
            name: name.trim().to_string(),
            value: value.trim().to_string(),
        })
    }

    /// How a report shows it: the value of a header left out (it may be a credential).
    pub fn shown(&self) -> String {
        match self {
            Override::Set { path, value } => format!("{path}={value}"),
            Override::Header { name, .. } => format!("target.header \"{name}\" (value not shown)"),
            Override::ApiKeyEnv(var) => format!("target.api-key env=\"{var}\""),
        }
    }
}

/// `text` with `overrides` applied, in order. A plan whose text is not KDL is returned as it is:
/// the parser says what is wrong with it first.
pub fn apply(text: &str, overrides: &[Override]) -> Result<String, OverrideError> {
    if overrides.is_empty() {
        return Ok(text.to_string());
    }
    let Ok(mut document) = KdlDocument::parse(text) else {
        return Ok(text.to_string());
    };
    for o in overrides {
        match o {
            Override::Set { path, value } => {
                set(&mut document, path, value).map_err(|why| OverrideError::NotInPlan {
                    shown: o.shown(),
                    why,
                })?
            }
            Override::Header { name, value } => {
                let target = top(&mut document, "target", None)
                    .ok_or(OverrideError::NoTarget { flag: "--header" })?;
                let mut node = KdlNode::new("header");
                node.push(KdlEntry::new(name.as_str()));
                // `$VAR` names a secret: read at run time, never kept (the plan's `env=`).
                match value.strip_prefix('$').filter(|var| {
                    !var.is_empty() && var.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                }) {
                    Some(var) => node.push(KdlEntry::new_prop("env", var)),
                    None => node.push(KdlEntry::new(value.as_str())),
                }
                add_child(target, node);
            }
            Override::ApiKeyEnv(var) => {
                let target = top(&mut document, "target", None).ok_or(OverrideError::NoTarget {
                    flag: "--api-key-env",
                })?;
                let children = target.ensure_children();
                children
                    .nodes_mut()
                    .retain(|n| n.name().value() != "api-key");
                let mut node = KdlNode::new("api-key");
                node.push(KdlEntry::new_prop("env", var.as_str()));
                add_child(target, node);
            }
        }
    }
    Ok(document.to_string())
}

/// A value as the command line wrote it: KDL if it reads as one value, else a string.
fn value_of(text: &str) -> KdlValue {
    match KdlDocument::parse(&format!("v {text}")) {
        Ok(doc) => match doc.nodes() {
            [node] if node.entries().len() == 1 && node.entries()[0].name().is_none() => {
                node.entries()[0].value().clone()
            }
            _ => KdlValue::String(text.to_string()),
        },
        Err(_) => KdlValue::String(text.to_string()),
    }
}

/// A segment of a path: a node's name, and the first argument that picks it among its kind.
fn segment(text: &str) -> (&str, Option<&str>) {
    match text.split_once(':') {
        Some((name, arg)) => (name.trim(), Some(arg.trim())),
        None => (text.trim(), None),
    }
}

/// The node named `name` (with `arg` as its first argument, if given) among `nodes`.
fn find<'a>(nodes: &'a mut [KdlNode], name: &str, arg: Option<&str>) -> Option<&'a mut KdlNode> {
    nodes.iter_mut().find(|node| {
        node.name().value() == name
            && arg.is_none_or(|arg| {
                node.entries()
                    .iter()
                    .find(|e| e.name().is_none())
                    .is_some_and(|e| match e.value() {
                        KdlValue::String(s) => s == arg,
                        other => other.to_string() == arg,
                    })
            })
    })
}

/// The top-level node `name` (`arg`).
fn top<'a>(
    document: &'a mut KdlDocument,
    name: &str,
    arg: Option<&str>,
) -> Option<&'a mut KdlNode> {
    find(document.nodes_mut(), name, arg)
}

/// Adds `node` at the end of `parent`'s block, laid out like its last sibling (on a line of
/// its own with the same indent, or after a `;` in a one-line block).
fn add_child(parent: &mut KdlNode, mut node: KdlNode) {
    let had_block = parent.children().is_some();
    let children = parent.ensure_children();
    match children.nodes_mut().last_mut() {
        Some(last) => {
            let mut format = last.format().cloned().unwrap_or_default();
            if let Some(last_format) = last.format_mut() {
                if last_format.terminator.is_empty() {
                    last_format.terminator = ";".into();
                    last_format.before_terminator.clear();
                }
            }
            format.leading = format.leading.replace(['\n', '\r'], "");
            if format.terminator.is_empty() {
                format.terminator = String::new();
            }
            node.set_format(format);
        }
        None => {
            node.autoformat();
            if !had_block {
                if let Some(format) = parent.format_mut() {
                    format.before_children = " ".into();
                }
            }
        }
    }
    parent.ensure_children().nodes_mut().push(node);
}

/// Sets `entry`'s value, written as KDL writes it.
fn set_value(entry: &mut KdlEntry, value: KdlValue) {
    entry.set_value(value.clone());
    if let Some(format) = entry.format_mut() {
        format.value_repr = value.to_string();
    }
}

/// "the plan has no `phase "stedy"`", with the nearest node of the plan that is there.
fn no_top_node(document: &KdlDocument, name: &str, arg: Option<&str>) -> String {
    let shown = |name: &str, arg: Option<&str>| match arg {
        Some(arg) => format!("{name} \"{arg}\""),
        None => name.to_string(),
    };
    let present: Vec<(String, Option<String>)> = document
        .nodes()
        .iter()
        .map(|n| {
            let arg = n
                .entries()
                .iter()
                .find(|e| e.name().is_none())
                .map(|e| match e.value() {
                    KdlValue::String(s) => s.clone(),
                    other => other.to_string(),
                });
            (n.name().value().to_string(), arg)
        })
        .collect();
    let candidates: Vec<String> = match arg {
        // A phase (or sweep) by its name: the names of those the plan has.
        Some(_) => present
            .iter()
            .filter(|(n, _)| n == name)
            .filter_map(|(_, a)| a.clone())
            .collect(),
        None => present.iter().map(|(n, _)| n.clone()).collect(),
    };
    let wanted = arg.unwrap_or(name);
    let suggestion =
        match crate::plan::suggest::nearest(wanted, candidates.iter().map(String::as_str)) {
            Some(near) if arg.is_some() => format!("; did you mean `{}`?", shown(name, Some(near))),
            Some(near) => format!("; did you mean `{near}`?"),
            None if arg.is_some() && !candidates.is_empty() => {
                let each: Vec<String> = candidates.iter().map(|c| format!("\"{c}\"")).collect();
                format!("; its {name}s: {}", each.join(", "))
            }
            None => String::new(),
        };
    format!("the plan has no `{}`{suggestion}", shown(name, arg))
}

fn set(document: &mut KdlDocument, path: &str, value: &str) -> Result<(), String> {
    let value = value_of(value);
    let segments: Vec<&str> = path.split('.').collect();
    let (first_name, first_arg) = segment(segments[0]);
    if top(document, first_name, first_arg).is_none() {
        if first_arg.is_some() || segments.len() == 1 {
            return Err(no_top_node(document, first_name, first_arg));
        }
        // A block the plan does not write yet (`report.records="zstd"`): added, with the
        // value, for the parser to judge as it judges a written one.
        document.nodes_mut().push(KdlNode::new(first_name));
        set_in(document, &segments, value)?;
        let block = top(document, first_name, None).ok_or("no node")?;
        block.autoformat();
        if let Some(format) = block.format_mut() {
            format.leading = "\n".into();
        }
        return Ok(());
    }
    set_in(document, &segments, value)
}

/// [`set`] in a top-level node that is there.
fn set_in(document: &mut KdlDocument, segments: &[&str], value: KdlValue) -> Result<(), String> {
    let (first_name, first_arg) = segment(segments[0]);
    let mut node = top(document, first_name, first_arg).ok_or("no node")?;
    for (position, text) in segments.iter().enumerate().skip(1) {
        let (name, arg) = segment(text);
        let last = position + 1 == segments.len();
        let exists = node
            .children_mut()
            .as_mut()
            .and_then(|c| find(c.nodes_mut(), name, arg))
            .is_some();
        if exists {
            let children = node.children_mut().as_mut().ok_or("no block")?;
            node = find(children.nodes_mut(), name, arg).ok_or("no node")?;
            continue;
        }
        if last && arg.is_none() && node.children().is_none_or(|c| c.nodes().is_empty()) {
            // A leaf's property (`workload.output.ignore-eos`).
            if !node.entries().is_empty() {
                match node.entry_mut(name) {
                    Some(entry) => set_value(entry, value.clone()),
                    None => node.push(KdlEntry::new_prop(name, value.clone())),
                }
                return Ok(());
            }
        }
        if !last {
            let children: Vec<String> = node
                .children()
                .map(|c| {
                    c.nodes()
                        .iter()
                        .map(|n| n.name().value().to_string())
                        .collect()
                })
                .unwrap_or_default();
            let suggestion =
                crate::plan::suggest::did_you_mean(name, children.iter().map(String::as_str));
            let message = format!(
                "there is no `{text}` in `{}`; {suggestion}",
                node.name().value()
            );
            return Err(message.trim_end().trim_end_matches(';').to_string());
        }
        // A child the plan does not write yet: added (the parser judges it).
        let mut child = KdlNode::new(name);
        if let Some(arg) = arg {
            child.push(KdlEntry::new(arg));
        }
        child.push(KdlEntry::new(value.clone()));
        add_child(node, child);
        return Ok(());
    }
    // The node named: its first argument is replaced (the one after the picking argument).
    let skip = usize::from(segments.last().is_some_and(|s| s.contains(':')));
    let position = node
        .entries()
        .iter()
        .enumerate()
        .filter(|(_, e)| e.name().is_none())
        .nth(skip)
        .map(|(i, _)| i);
    match position {
        Some(i) => set_value(&mut node.entries_mut()[i], value),
        None => node.push(KdlEntry::new(value)),
    }
    // A node that held a block (`input { bucket ... }`) set to one value loses its block.
    node.clear_children();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const PLAN: &str = r#"plan "p" { seed 1 }
target "sim" {
    api "chat"
    timeout "60s"
}
workload {
    input { bucket 128 weight=1; bucket 512 weight=1 }
    output 64 ignore-eos=#true // exact
}
phase "warm" { concurrency 2; requests 4 }
phase "steady" { rate 4; duration "30s" }
"#;

    fn applied(overrides: &[&str]) -> String {
        let overrides: Vec<Override> = overrides
            .iter()
            .map(|o| Override::set(o).unwrap())
            .collect();
        apply(PLAN, &overrides).unwrap()
    }

    #[test]
    fn values_are_set_where_the_plan_writes_them() {
        let text = applied(&[
            "phase:steady.rate=8",
            "target.timeout=\"5s\"",
            "workload.output=128",
            "phase:warm.duration=\"2s\"",
        ]);
        assert!(
            text.contains("phase \"steady\" { rate 8; duration \"30s\" }"),
            "{text}"
        );
        assert!(
            text.contains("phase \"warm\" { concurrency 2; requests 4; duration \"2s\" }"),
            "{text}"
        );
        assert!(text.contains("timeout \"5s\""), "{text}");
        assert!(
            text.contains("output 128 ignore-eos=#true // exact"),
            "{text}"
        );
        // Untouched nodes keep their layout and comments.
        assert!(text.contains("    api \"chat\"\n"), "{text}");
        let plan = crate::plan::parse_plan("p.kdl", text).unwrap();
        assert_eq!(plan.workload.output_tokens, 128);
    }

    #[test]
    fn properties_new_children_and_blocks() {
        let text = applied(&[
            "workload.output.ignore-eos=#false",
            "target.stream=#false",
            "workload.input=256",
            "target.timeout=30s",
        ]);
        let plan = crate::plan::parse_plan("p.kdl", text.clone()).unwrap();
        assert!(!plan.workload.ignore_eos, "{text}");
        assert!(!plan.target.stream, "{text}");
        assert_eq!(plan.workload.buckets.len(), 1, "{text}");
        assert_eq!(plan.target.timeout, std::time::Duration::from_secs(30));
    }

    #[test]
    fn mistakes_are_named() {
        let wrong = Override::set("phase:nope.rate=8").unwrap();
        let err = apply(PLAN, &[wrong]).unwrap_err().to_string();
        assert!(err.contains("no `phase \"nope\"`"), "{err}");
        assert!(Override::set("rate").is_err());
        assert!(Override::set("a..b=1").is_err());
        // A misspelt node is added, and the parser says it is unknown, as in a plan.
        let text = applied(&["target.timout=\"5s\""]);
        let errors = crate::plan::parse_plan("p.kdl", text).unwrap_err();
        assert!(format!("{errors:?}").contains("timout"));
        assert!(format!("{errors:?}").contains("did you mean `timeout`?"));
        // The nearest of what is there is offered.
        let err = apply(PLAN, &[Override::set("phase:stedy.rate=8").unwrap()])
            .unwrap_err()
            .to_string();
        assert!(err.ends_with("did you mean `phase \"steady\"`?"), "{err}");
        let err = apply(PLAN, &[Override::set("workload.inptu.bucket=8").unwrap()])
            .unwrap_err()
            .to_string();
        assert!(
            err.ends_with("there is no `inptu` in `workload`; did you mean `input`?"),
            "{err}"
        );
    }

    /// What the command line is told when a value cannot be set: one error per mistake, in
    /// the words `llmload run` prints after clap's "invalid value".
    #[test]
    fn a_value_that_cannot_be_set_says_why() {
        let said = |result: Result<Override, OverrideError>| result.unwrap_err().to_string();
        assert_eq!(
            said(Override::set("rate8")),
            "--set rate8: write it as PATH=VALUE, e.g. --set phase:steady.rate=8"
        );
        assert_eq!(
            said(Override::set("workload..output=8")),
            "--set workload..output=8: the path names nodes from the top, separated by dots, e.g. \
             workload.output"
        );
        assert_eq!(
            said(Override::header("Authorization")),
            "--header Authorization: write it as \"Name: value\""
        );
        let headless = "plan \"p\" { seed 1 }\n";
        let header = Override::header("X-Team: a").unwrap();
        assert_eq!(
            apply(headless, &[header]).unwrap_err(),
            OverrideError::NoTarget { flag: "--header" }
        );
        let key = Override::ApiKeyEnv("KEY".into());
        assert_eq!(
            apply(headless, &[key]).unwrap_err().to_string(),
            "--api-key-env: the plan has no target"
        );
    }

    #[test]
    fn a_block_the_plan_lacks_is_added() {
        let text = applied(&["report.records=\"zstd\""]);
        assert!(
            text.ends_with("\"30s\" }\n\nreport {\n    records zstd\n}\n"),
            "{text}"
        );
        let plan = crate::plan::parse_plan("p.kdl", applied(&["report.records=\"zstd\""])).unwrap();
        assert!(
            format!("{:?}", plan.report).contains("Zstd"),
            "{:?}",
            plan.report
        );
    }

    #[test]
    fn headers_and_the_key_variable_go_in_the_target() {
        let text = apply(
            PLAN,
            &[
                Override::header("X-Team: search").unwrap(),
                Override::header("X-Token: $TEAM_TOKEN").unwrap(),
                Override::ApiKeyEnv("MY_KEY".into()),
            ],
        )
        .unwrap();
        assert!(text.contains("env=TEAM_TOKEN"), "{text}");
        let plan = crate::plan::parse_plan("p.kdl", text).unwrap();
        assert_eq!(plan.target.headers[0].name, "X-Team");
        assert_eq!(
            plan.target.headers[1].value,
            crate::plan::HeaderValue::Secret("TEAM_TOKEN".into())
        );
        let vars: Vec<&str> = plan
            .target
            .api_keys
            .iter()
            .map(|k| k.env.as_str())
            .collect();
        assert_eq!(vars, ["MY_KEY"]);
        assert_eq!(
            Override::header("Authorization: Bearer x").unwrap().shown(),
            "target.header \"Authorization\" (value not shown)"
        );
    }
}
