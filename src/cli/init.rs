//! `llmload init`: a starter plan with every block explained, and on request the CI jobs that
//! run it on every pull request: the shortest path from "heard of it" to "gating my PRs".

use std::path::{Path, PathBuf};

use super::say;
use crate::error::{Error, Result, EXIT_PASS};

const STARTER: &str = include_str!("init/llmload.kdl");
const GITHUB: &str = include_str!("init/github.yml");
const GITLAB: &str = include_str!("init/gitlab.yml");

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Ci {
    /// A GitHub Actions workflow (.github/workflows/llmload.yml).
    Github,
    /// A GitLab CI job to include (.gitlab/llmload.gitlab-ci.yml).
    Gitlab,
}

#[derive(clap::Args, Debug)]
pub(super) struct InitArgs {
    /// The directory to write into (a repository's root).
    #[arg(default_value = ".")]
    dir: PathBuf,
    /// Also write a CI job that runs the plan on every pull request (repeatable).
    #[arg(long, value_enum)]
    ci: Vec<Ci>,
    /// Overwrite files that already exist (without it, existing files are kept and only the
    /// missing ones written).
    #[arg(long)]
    force: bool,
}

pub(super) fn init(args: &InitArgs) -> Result<u8> {
    let mut files: Vec<(PathBuf, &str)> = vec![(args.dir.join("llmload.kdl"), STARTER)];
    if args.ci.contains(&Ci::Github) {
        files.push((args.dir.join(".github/workflows/llmload.yml"), GITHUB));
    }
    if args.ci.contains(&Ci::Gitlab) {
        files.push((args.dir.join(".gitlab/llmload.gitlab-ci.yml"), GITLAB));
    }
    // What exists is kept (an edited plan is never overwritten to add a CI job), unless
    // --force; when everything exists, nothing is to be done and that is said.
    let (kept, missing): (Vec<_>, Vec<_>) = files
        .iter()
        .partition(|(path, _)| path.exists() && !args.force);
    if missing.is_empty() {
        let names: Vec<String> = kept.iter().map(|(p, _)| p.display().to_string()).collect();
        return Err(Error::usage(format!(
            "{} exist already; pass --force to replace them",
            names.join(", ")
        )));
    }
    for (path, _) in &kept {
        say!("kept {}: it exists (--force replaces it)", path.display())?;
    }
    for (path, text) in &missing {
        write(path, text)?;
        say!("wrote {}", path.display())?;
    }
    say!(
        "\nnext: llmload run {} (against the built-in simulator), then --target http://your-server:8000",
        args.dir.join("llmload.kdl").display()
    )?;
    Ok(EXIT_PASS)
}

fn write(path: &Path, text: &str) -> Result<()> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(|e| Error::io("create", parent, e))?;
    }
    std::fs::write(path, text).map_err(|e| Error::io("write", path, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_starter_plan_is_valid_and_formatted() {
        let plan = crate::plan::parse_plan("llmload.kdl", STARTER.to_string()).unwrap();
        assert_eq!(plan.phases.len(), 2);
        assert_eq!(crate::plan::fmt::format(STARTER).unwrap(), STARTER);
        // GitHub's job runs the plan through llmload's action (action.yml); GitLab's builds
        // llmload once per version into its cache and runs it.
        assert!(GITHUB.contains("uses: llmload/llmload@") && GITHUB.contains("plan: llmload.kdl"));
        assert!(GITLAB.contains("llmload run llmload.kdl"));
        assert!(
            GITLAB.contains("cargo install --locked --git")
                && GITLAB.contains("key: llmload-$LLMLOAD_REV")
        );
    }
}
