//! What a run directory keeps of its plan (the plan, its includes and data files, with their
//! SHA-256), and how a run directory is read back.

use std::path::Path;

use super::*;

pub(super) fn sha256(text: &str) -> String {
    format!("{:x}", sha2::Sha256::digest(text.as_bytes()))
}

/// What a run directory keeps of the files its plan was built from, beside `plan.kdl`.
#[derive(serde::Serialize, serde::Deserialize, Default)]
struct KeptSources {
    /// The values the plan took from the environment.
    env: std::collections::BTreeMap<String, String>,
    /// Every included file: its path relative to the plan's directory, hash and text.
    files: Vec<KeptFile>,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct KeptFile {
    path: String,
    sha256: String,
    text: String,
}

/// Writes `plan.kdl` and, when the plan includes files or reads the environment,
/// `plan-sources.json`: the run directory holds everything its plan was built from.
pub(super) fn keep_sources(plan: &Plan, out: &Path) -> Result<()> {
    let plan_copy = out.join("plan.kdl");
    std::fs::write(&plan_copy, plan.source.text.as_bytes())
        .map_err(|e| Error::io("write", &plan_copy, e))?;
    if plan.source.includes.is_empty() && plan.source.env.is_empty() {
        return Ok(());
    }
    let kept = KeptSources {
        env: plan.source.env.iter().cloned().collect(),
        files: plan
            .source
            .includes
            .iter()
            .map(|(path, text)| KeptFile {
                path: path.clone(),
                sha256: sha256(text),
                text: text.to_string(),
            })
            .collect(),
    };
    let path = out.join("plan-sources.json");
    let json = serde_json::to_string_pretty(&kept)
        .map_err(|e| Error::run(format!("cannot encode {}: {e}", path.display())))?;
    std::fs::write(&path, json + "\n").map_err(|e| Error::io("write", &path, e))
}

/// The plan a run directory keeps beside its records (`plan.kdl`, and the files it includes and
/// the environment values it read, from `plan-sources.json`): the plan as it was run.
pub fn archived_plan(dir: &Path) -> Result<Plan> {
    let plan_path = dir.join("plan.kdl");
    let text =
        crate::files::read_text_bounded(&plan_path, plan::limits::MAX_PLAN_BYTES).map_err(|e| {
            Error::usage(format!(
                "cannot read {}: {e} (a report directory holds the plan.kdl its run left)",
                plan_path.display()
            ))
        })?;
    let sources_path = dir.join("plan-sources.json");
    let kept: KeptSources = match crate::files::read_text_bounded(&sources_path, 1 << 30) {
        Ok(json) => serde_json::from_str(&json).map_err(|e| Error::Records {
            path: sources_path.clone(),
            line: None,
            message: format!("not a plan-sources file: {e}"),
        })?,
        Err(_) => KeptSources::default(),
    };
    let options = plan::ParseOptions {
        check_files: false,
        env: plan::EnvSource::Recorded(kept.env),
        sources: plan::Sources::Kept(kept.files.into_iter().map(|f| (f.path, f.text)).collect()),
    };
    Ok(plan::parse_plan_with(
        &plan_path.display().to_string(),
        text,
        &options,
    )?)
}

/// A run directory's records in memory (a uniform sample of
/// [`super::MAX_COMPARED_REQUESTS`] for a longer run: this is what `compare` reads), and its plan.
pub fn read_run_dir(dir: &Path) -> Result<(RunLog, Plan)> {
    let records = crate::records::find(dir)?;
    let log = RunLog::read_sampled(&records, super::MAX_COMPARED_REQUESTS)?;
    refuse_shard(&log, dir)?;
    Ok((log, archived_plan(dir)?))
}
