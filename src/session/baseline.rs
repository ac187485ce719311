//! A run compared with a baseline run directory: refused when the two do not measure the same
//! thing, or when either has too few requests to compare.

use std::path::Path;

use super::*;

/// Compares `current` with the run in `baseline_dir`, under `plan`'s tolerances (or the
/// defaults); runs of different plans, seeds or models are refused unless `force`.
pub fn compare_with(
    baseline_dir: &Path,
    (current_gpus, current): (&[crate::telemetry::gpus::Gpu], &RunLog),
    plan: &Plan,
    force: bool,
) -> Result<Comparison> {
    let (baseline, _) = read_run_dir(baseline_dir)?;
    comparable_data("baseline", &baseline)?;
    comparable_data("current", current)?;
    let mut notes = compare::comparable(
        &baseline.header.clone().unwrap_or_default(),
        &current.header.clone().unwrap_or_default(),
        force,
    )?;
    notes.extend(gpu_difference(&gpus_of(baseline_dir), current_gpus));
    for (which, log) in [("baseline", &baseline), ("current", current)] {
        if let Some(sampled) = &log.sampled {
            notes.push(format!(
                "the {which} run's {} requests were compared through a uniform sample of {} \
                 (seeded): its values and intervals are the sample's, within sampling error of \
                 the whole run's",
                sampled.total, sampled.kept
            ));
        }
    }
    let tolerances = match (plan.regression.is_empty(), &plan.search) {
        (true, Some(_)) => compare::default_search_tolerances(),
        (true, None) => compare::default_tolerances(),
        (false, _) => plan.regression.clone(),
    };
    // Each run's search judged on the current plan's objectives, replayed from its records
    // (all of them: a probe is judged on its counts, which a sample does not hold).
    let capacity = |log: &RunLog| -> Result<_> {
        if plan.search.is_none() {
            return Ok(None);
        }
        let aggregates = aggregates_of(log, plan.slo.as_ref())?;
        Ok(verdict::evaluate_plan(plan, &aggregates)
            .capacity
            .map(|c| c.bracket))
    };
    let (base_capacity, current_capacity) = (capacity(&baseline)?, capacity(current)?);
    Ok(compare::compare(
        &baseline,
        current,
        &tolerances,
        plan.slo.as_ref(),
        base_capacity.as_ref().zip(current_capacity.as_ref()),
        notes,
        plan.seed,
        plan.judging.undecided,
    ))
}

/// The GPUs a run's telemetry described (a GPU exporter's labels, a `gpus` source's rows);
/// none when it kept no telemetry or described none.
pub fn gpus_of(dir: &Path) -> Vec<crate::telemetry::gpus::Gpu> {
    crate::telemetry::read(dir)
        .ok()
        .flatten()
        .map(|t| t.gpus)
        .unwrap_or_default()
}

/// How the GPUs the runs were measured on differ; nothing when either run described none.
fn gpu_difference(
    baseline: &[crate::telemetry::gpus::Gpu],
    current: &[crate::telemetry::gpus::Gpu],
) -> Option<String> {
    if baseline.is_empty() || current.is_empty() {
        return None;
    }
    let (before, now) = (
        crate::telemetry::gpus::describe(baseline),
        crate::telemetry::gpus::describe(current),
    );
    (before != now).then(|| {
        format!(
            "the runs were measured on different GPUs: the baseline's {before}, this run's {now}"
        )
    })
}

/// The most requests of each run `compare` holds: a longer run is compared through a uniform
/// sample of this many (some 1 KB each in memory; the bootstrap's time grows with them too).
pub const MAX_COMPARED_REQUESTS: usize = 25_000;

/// A log's aggregates: from its records, or from its file when they are a sample.
pub fn aggregates_of(log: &RunLog, slo: Option<&crate::plan::Slo>) -> Result<metrics::Aggregates> {
    match &log.sampled {
        Some(sampled) => Ok(metrics::compute_file(&sampled.path, slo)?.1),
        None => Ok(metrics::compute(log, slo)),
    }
}

/// The fewest successful recorded requests a run needs to be compared.
pub const MIN_COMPARED_REQUESTS: usize = 10;

/// Refuses a run that cannot be compared: interrupted, aborted, or with too few successful
/// requests (an empty or broken run must never compare clean).
fn comparable_data(which: &str, log: &RunLog) -> Result<()> {
    let cannot = |why: String| Error::run(format!("cannot compare: the {which} run {why}"));
    if let Some(reason) = log.end.as_ref().and_then(|e| e.aborted.as_deref()) {
        return Err(cannot(format!("was aborted ({reason})")));
    }
    if log.interrupted() {
        return Err(cannot(
            "was interrupted before its plan finished, and a partial run never compares clean"
                .into(),
        ));
    }
    let recorded: Vec<usize> = log
        .phases
        .iter()
        .filter(|p| p.record)
        .map(|p| p.index)
        .collect();
    let ok = log
        .records
        .iter()
        .filter(|r| r.ok() && recorded.contains(&r.phase))
        .count();
    if ok < MIN_COMPARED_REQUESTS {
        return Err(cannot(format!(
            "has {ok} successful recorded request(s); a comparison needs at least {MIN_COMPARED_REQUESTS} on each side"
        )));
    }
    Ok(())
}

/// Checks, before anything is sent, that `dir` holds a run this plan can be compared with:
/// the same plan, seed, model, API and streaming, and data to compare.
pub fn check_baseline(dir: &Path, plan: &Plan, seed: Option<u64>) -> Result<()> {
    let (baseline, _) = read_run_dir(dir)?;
    comparable_data("baseline", &baseline)?;
    let header = baseline.header.unwrap_or_default();
    let planned = RunHeader {
        plan: plan.name.clone(),
        seed: seed.unwrap_or(plan.seed),
        model: plan.target.model.clone(),
        api: plan.target.api.as_str().to_string(),
        stream: plan.target.stream,
        plan_sha256: header.plan_sha256.clone(),
        ..RunHeader::default()
    };
    compare::comparable(&header, &planned, false)
        .map(|_| ())
        .map_err(|e| Error::usage(format!("--baseline {}: {e}", dir.display())))
}
