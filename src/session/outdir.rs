//! The run directory: what a run may write into, and how a reused one is cleared, so that a CI
//! job never uploads a stale file (an old `comparison.md` saying "No regression", an old
//! template's output) as if the current run had written it.
//!
//! The rule: a directory that does not exist, or is empty, is used; a directory that holds an
//! earlier llmload run (its records, a `plan.kdl` or the manifest) has every file of that
//! run removed first; any other non-empty directory is refused, because its files are someone
//! else's. Every file a run (or `llmload report`) writes is listed in the manifest,
//! `.llmload-outputs`, so that the next run knows exactly what to remove.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// The manifest of the files the last run or report wrote into the directory.
pub const MANIFEST: &str = ".llmload-outputs";

/// What every run leaves, also removed from a reused directory without a manifest (written by
/// an llmload from before the manifest).
const KNOWN: [&str; 13] = [
    "plan.kdl",
    crate::records::PLAIN_FILE,
    crate::records::ZSTD_FILE,
    "plan-sources.json",
    super::GATE_FILE,
    "report.md",
    "summary.json",
    "summary.csv",
    "requests.csv",
    "comparison.md",
    "comparison.json",
    crate::server::SERVER_JSON,
    crate::server::SERVER_LOG,
];

/// The inputs of a report, which `llmload report DIR` keeps.
const INPUTS: [&str; 8] = [
    "plan.kdl",
    crate::records::PLAIN_FILE,
    crate::records::ZSTD_FILE,
    "plan-sources.json",
    super::GATE_FILE,
    crate::telemetry::FILE,
    crate::server::SERVER_JSON,
    crate::server::SERVER_LOG,
];

/// The plan an earlier run in `dir` ran, from its records' first line.
fn earlier_plan(dir: &Path) -> Option<String> {
    [crate::records::PLAIN_FILE, crate::records::ZSTD_FILE]
        .iter()
        .find_map(|name| crate::records::read_header(&dir.join(name)).ok().flatten())
        .map(|header| header.plan)
}

/// Makes `dir` ready for a new run of `plan` (by name, when it is one plan's): created, or
/// emptied of an earlier run's files; refused if it holds anything else, or a run of another
/// plan.
pub fn prepare(dir: &Path, plan: Option<&str>) -> Result<()> {
    match std::fs::read_dir(dir) {
        // Missing (or not a directory: creating it says why).
        Err(_) => std::fs::create_dir_all(dir).map_err(|e| Error::io("create", dir, e)),
        Ok(mut entries) => {
            if entries.next().is_none() {
                return Ok(());
            }
            let is_run = KNOWN[..3]
                .iter()
                .chain([&MANIFEST])
                .any(|name| dir.join(name).exists());
            if !is_run {
                return Err(Error::usage(format!(
                    "--out {}: the directory is not empty and holds no llmload run; give a new or \
                     empty directory (llmload replaces only an earlier run's own files)",
                    dir.display()
                )));
            }
            if let (Some(plan), Some(earlier)) = (plan, earlier_plan(dir)) {
                if earlier != plan {
                    return Err(Error::usage(format!(
                        "--out {}: it holds a run of plan \"{earlier}\", not of \"{plan}\"; give another \
                         directory (or remove that run first): llmload replaces only an earlier run of the \
                         same plan",
                        dir.display()
                    )));
                }
            }
            remove(dir, &outputs(dir), &[])
        }
    }
}

/// Removes the reports an earlier run or report left (not its plan and records, nor the
/// files only asked for by name: [`extras`]), before `llmload report` writes them again.
pub fn clear_derived(dir: &Path) -> Result<()> {
    let known: Vec<String> = KNOWN.iter().map(|n| n.to_string()).collect();
    remove(dir, &known, &INPUTS)
}

/// What an earlier run or report wrote into `dir` beyond its inputs and llmload's own reports:
/// JUnit, exports and templates' outputs, which only a flag asked for. `llmload report` keeps
/// those it does not write again (or removes them when told to), never silently.
pub fn extras(dir: &Path) -> Vec<String> {
    outputs(dir)
        .into_iter()
        .filter(|name| {
            !KNOWN.contains(&name.as_str()) && !INPUTS.contains(&name.as_str()) && name != MANIFEST
        })
        .filter(|name| dir.join(name).exists())
        .collect()
}

/// Removes `names` from `dir` (plain names, as [`extras`] gives them).
pub fn remove_files(dir: &Path, names: &[String]) -> Result<()> {
    remove(dir, names, &INPUTS)
}

/// Lists the files now in `dir` that llmload wrote: the run's inputs and `written`.
pub fn write_manifest(dir: &Path, written: &[PathBuf]) -> Result<()> {
    let mut names: Vec<String> = INPUTS
        .iter()
        .filter(|name| dir.join(name).exists())
        .map(|name| name.to_string())
        .collect();
    for path in written {
        if let Ok(relative) = path.strip_prefix(dir) {
            let name = relative.to_string_lossy().into_owned();
            if !names.contains(&name) {
                names.push(name);
            }
        }
    }
    let path = dir.join(MANIFEST);
    std::fs::write(&path, names.join("\n") + "\n").map_err(|e| Error::io("write", &path, e))
}

/// What the manifest lists, with the files every run leaves.
fn outputs(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = KNOWN.iter().map(|n| n.to_string()).collect();
    if let Ok(text) = crate::files::read_text_bounded(&dir.join(MANIFEST), 1 << 20) {
        for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
            // Only plain names inside the directory: a manifest never points outside it.
            let plain = !line.contains('/') && !line.contains('\\') && line != "..";
            if plain && !names.iter().any(|n| n == line) {
                names.push(line.to_string());
            }
        }
    }
    names.push(MANIFEST.to_string());
    names
}

fn remove(dir: &Path, names: &[String], keep: &[&str]) -> Result<()> {
    for name in names.iter().filter(|n| !keep.contains(&n.as_str())) {
        let path = dir.join(name);
        match std::fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(Error::io("remove", &path, e)),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reused_run_directory_loses_every_file_of_the_earlier_run_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        prepare(&out, None).unwrap();
        for name in [
            "plan.kdl",
            "records.jsonl",
            "report.md",
            "comparison.md",
            "pr.md",
        ] {
            std::fs::write(out.join(name), "old").unwrap();
        }
        write_manifest(
            &out,
            &[
                out.join("report.md"),
                out.join("comparison.md"),
                out.join("pr.md"),
            ],
        )
        .unwrap();
        std::fs::write(out.join("notes-of-mine.txt"), "keep").unwrap();
        // `report` keeps the inputs, removes llmload's own reports, and leaves the files only
        // a flag asked for (a template's pr.md) to the caller, which says what it does with them.
        assert_eq!(extras(&out), ["pr.md"]);
        clear_derived(&out).unwrap();
        assert!(out.join("records.jsonl").exists() && out.join("plan.kdl").exists());
        assert!(!out.join("comparison.md").exists() && out.join("pr.md").exists());
        remove_files(&out, &extras(&out)).unwrap();
        assert!(!out.join("pr.md").exists());
        // A new run removes the rest of the earlier run, and leaves what is not llmload's.
        prepare(&out, None).unwrap();
        assert!(!out.join("records.jsonl").exists());
        assert!(out.join("notes-of-mine.txt").exists());
        // A directory of someone else's files is refused.
        let other = dir.path().join("other");
        std::fs::create_dir(&other).unwrap();
        std::fs::write(other.join("thesis.tex"), "mine").unwrap();
        let err = prepare(&other, None).unwrap_err();
        assert_eq!(err.exit_code(), 2);
        assert!(other.join("thesis.tex").exists());
    }
}
