//! `llmload fmt PATH...`: plans in one canonical layout; `--check` exits 1 with a diff for each
//! file that is not, so that CI can hold a repository's plans to one style.

use std::path::{Path, PathBuf};

use super::{plan_files, say};
use crate::error::{Error, Result, EXIT_FAIL, EXIT_PASS};
use crate::plan::fmt::format;

#[derive(clap::Args, Debug)]
pub(super) struct FmtArgs {
    /// Plan files, or directories searched for *.kdl files.
    #[arg(required = true)]
    paths: Vec<PathBuf>,
    /// Change nothing: print a diff for each file not in the canonical layout and exit 1.
    #[arg(long)]
    check: bool,
}

pub(super) fn fmt(args: &FmtArgs) -> Result<u8> {
    let files = plan_files(&args.paths)?;
    let mut changed = 0;
    let mut broken = Vec::new();
    for file in &files {
        let text = read(file)?;
        let formatted = match format(&text) {
            Ok(formatted) => formatted,
            Err(why) => {
                broken.push(format!("{}: not formatted: {why}", file.display()));
                continue;
            }
        };
        if formatted == text {
            continue;
        }
        changed += 1;
        if args.check {
            say!("{}", diff(file, &text, &formatted))?;
        } else {
            std::fs::write(file, &formatted).map_err(|e| Error::io("write", file, e))?;
            say!("formatted {}", file.display())?;
        }
    }
    for line in &broken {
        eprintln!("error: {line}");
    }
    let verb = if args.check {
        "would be reformatted"
    } else {
        "reformatted"
    };
    say!(
        "{} file(s) checked: {changed} {verb}, {} left alone (not valid KDL)",
        files.len(),
        broken.len()
    )?;
    if !broken.is_empty() {
        return Err(Error::usage(format!(
            "{} file(s) could not be formatted (`llmload check` says why)",
            broken.len()
        )));
    }
    Ok(if args.check && changed > 0 {
        EXIT_FAIL
    } else {
        EXIT_PASS
    })
}

fn read(file: &Path) -> Result<String> {
    // Past a plan's own bound, fmt refuses it anyway: read no more than that.
    crate::files::read_text_bounded(file, crate::plan::limits::MAX_PLAN_BYTES + 1)
        .map_err(|e| Error::io("read", file, e))
}

/// A unified diff of a file against its formatted text.
fn diff(file: &Path, old: &str, new: &str) -> String {
    let name = file.display().to_string();
    similar::TextDiff::from_lines(old, new)
        .unified_diff()
        .context_radius(2)
        .header(&name, &format!("{name} (formatted)"))
        .to_string()
}
