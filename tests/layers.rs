//! The pipeline's order, kept by the build: every `crate::…` path in src/ must lead to a
//! module in a lower layer than its own (docs/ARCHITECTURE.md draws the same layers). A stage
//! that reaches back — the API dialects taking the planner's prompts, the metrics holding the
//! server lifecycle's types — fails this test and names the file and line.
//!
//! Test code (`#[cfg(test)]` to the end of a file, and `tests.rs`) keeps the same rule, except
//! where [`TEST_REACH`] says why it may reach further.

use std::path::{Path, PathBuf};

/// src/'s modules, lowest layer first; a module may use those of the layers below its own.
const LAYERS: &[&[&str]] = &[
    // Shared tools with no knowledge of the run.
    &[
        "clock",
        "diagnostic",
        "escape",
        "reservoir",
        "secrets",
        "seed",
        "threads",
        "timer",
        "tls",
        "words",
    ],
    &["error"],
    &["files"],
    &["tokens", "telemetry"],
    // The vocabularies every stage shares: the wire formats, the records of a run, and the
    // metric table (`metrics::table`, below).
    &["api"],
    &["records"],
    &["metric table"],
    // The pipeline, in order, with the simulator and the server lifecycle beside it.
    &["plan"],
    &["planner"],
    &["sim"],
    &["executor"],
    &["server"],
    &["metrics"],
    &["compare"],
    &["verdict"],
    &["report", "exporter"],
    &["session"],
    &["selfcheck", "history"],
    &["cli"],
];

/// Where test code may reach beyond its layer, and why.
const TEST_REACH: &[(&str, &str, &str)] = &[
    (
        "executor",
        "sim",
        "the transport's tests speak to a real loopback server, the simulator, not a mock",
    ),
    (
        "metrics",
        "verdict",
        "a search the client limited: aggregated, then the status every output states",
    ),
    (
        "records",
        "metrics",
        "a hostile records file is read and then aggregated, in one property",
    ),
];

/// The layer of `module` (a top-level name, or `metric table`).
fn layer(module: &str) -> Option<usize> {
    LAYERS.iter().position(|layer| layer.contains(&module))
}

/// The macros src/ exports (`#[macro_export]` puts them at the crate's root), each with the
/// module that defines it: `crate::dist!` is a use of the metric table.
const MACROS: &[(&str, &str)] = &[("dist", "metrics::table")];

/// The module a `crate::` path leads to: its first segment, except the metric table, which is
/// a vocabulary below the plan although it lives in `metrics`.
fn target(path: &str) -> &str {
    if path.starts_with("metrics::table") {
        return "metric table";
    }
    path.split("::").next().unwrap_or(path)
}

/// The module a file of src/ belongs to: `metrics::table` for src/metrics/table.rs.
fn owner(relative: &Path) -> String {
    let text = relative.to_string_lossy().replace('\\', "/");
    if text == "metrics/table.rs" {
        return "metric table".into();
    }
    let first = text.split('/').next().unwrap_or(&text);
    first.trim_end_matches(".rs").to_string()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Each `crate::…` path in code (not in comments) of `text`: its line, the path after
/// `crate::`, and whether it is test code.
fn crate_paths(text: &str, test_file: bool) -> Vec<(usize, String, bool)> {
    let mut out = Vec::new();
    let mut in_test = test_file;
    for (n, line) in text.lines().enumerate() {
        let code = line.split("//").next().unwrap_or("");
        if code.trim_start().starts_with("#[cfg(test)]") {
            in_test = true;
        }
        let mut rest = code;
        while let Some(at) = rest.find("crate::") {
            let before = rest[..at].chars().last();
            let after = &rest[at + "crate::".len()..];
            let path: String = after
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == ':')
                .collect();
            // A macro exported at the crate's root leads to the module that defines it.
            let path = match after[path.len()..].starts_with('!') {
                true => match MACROS.iter().find(|(name, _)| *name == path) {
                    Some((_, module)) => format!("{module}::{path}"),
                    None => path,
                },
                false => path,
            };
            // `$crate::` in a macro, or an identifier ending in "crate", is not a path.
            if !before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$') {
                out.push((n + 1, path, in_test));
            }
            rest = after;
        }
    }
    out
}

#[test]
fn no_module_reaches_a_later_layer() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    let mut reaching = Vec::new();
    let mut unplaced = Vec::new();
    for file in &files {
        let relative = file.strip_prefix(&src).unwrap();
        let from = owner(relative);
        if matches!(from.as_str(), "lib" | "main") {
            continue;
        }
        let Some(from_layer) = layer(&from) else {
            unplaced.push(from.clone());
            continue;
        };
        let text = std::fs::read_to_string(file).unwrap();
        let test_file = relative.ends_with("tests.rs");
        for (line, path, in_test) in crate_paths(&text, test_file) {
            let to = target(&path);
            if to == from || to.is_empty() {
                continue;
            }
            let Some(to_layer) = layer(to) else {
                unplaced.push(to.to_string());
                continue;
            };
            let allowed = to_layer < from_layer
                || (in_test && TEST_REACH.iter().any(|(f, t, _)| *f == from && *t == to));
            if !allowed {
                reaching.push(format!(
                    "src/{}:{line}: {from} uses crate::{path} ({to} is not below it)",
                    relative.display()
                ));
            }
        }
    }
    unplaced.sort();
    unplaced.dedup();
    assert!(
        unplaced.is_empty(),
        "modules in no layer of LAYERS (place them, and in docs/ARCHITECTURE.md): {unplaced:?}"
    );
    assert!(
        reaching.is_empty(),
        "{} path(s) reach a module that is not below their own (docs/ARCHITECTURE.md):\n{}",
        reaching.len(),
        reaching.join("\n")
    );
}

/// The check sees what it must: a path in code counts, one in a comment or a macro's
/// `$crate::` does not, and test code is told apart.
#[test]
fn the_check_reads_paths_in_code_only() {
    let text = "use crate::plan::Plan;\n\
                /// [`crate::report`] is not a use\n\
                let x = $crate::a::b; // crate::cli in a comment\n\
                #[cfg(test)]\n\
                mod tests { use crate::sim::serve; }\n";
    let paths = crate_paths(text, false);
    assert_eq!(
        paths,
        [
            (1, "plan::Plan".to_string(), false),
            (5, "sim::serve".to_string(), true)
        ]
    );
    assert_eq!(target("metrics::table::Metric"), "metric table");
    assert_eq!(target("metrics::Aggregates"), "metrics");
    assert_eq!(owner(Path::new("metrics/table.rs")), "metric table");
    assert_eq!(owner(Path::new("plan/parse/mod.rs")), "plan");
    assert!(layer("plan") < layer("planner") && layer("api") < layer("plan"));
}
