//! The capacity search's policy: which load to probe next, given the probes so far, and when to
//! stop. Pure and deterministic: the session runs the probes and feeds their results back, and
//! the verdict stage replays the same results from the records to state the bracket.
//!
//! The method (docs/plan-reference.md#search): probe the range's low end, then double until a
//! probe fails or the range's top passes (bracketing); then bisect between the highest passing
//! and the lowest failing load (geometrically for rates, in whole requests for concurrency)
//! until the bracket is within the precision. A probe whose result is marginal (an objective
//! within 10% of its threshold) is repeated before it decides: two agreeing results decide, and
//! a third breaks a tie. The search stops at its probe and time budgets, stating the bracket it
//! has.

use std::time::Duration;

use serde::Serialize;

use crate::plan::{LoadUnit, Search};
pub use crate::records::Stopped;

/// A probe's result.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ProbeResult {
    /// The load probed.
    pub load: f64,
    /// The objectives held.
    pub passed: bool,
    /// Close to a threshold either way: repeated before it decides.
    pub marginal: bool,
    /// The client, not the server, limited it (its requests went out late, or the client's
    /// CPU was saturated): no evidence about the server either way, repeated; a second such
    /// probe at the same load in a row ends the search ([`Stopped::ClientLimited`]).
    pub client_limited: bool,
}

/// What a search found.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Bracket {
    /// The highest load at which the objectives held (none when the lowest failed).
    pub sustains: Option<f64>,
    /// The lowest load at which they failed (none when the highest held).
    pub fails_at: Option<f64>,
    /// (fails − sustains) / sustains, when both are known.
    pub width: Option<f64>,
    /// Requests per second, or concurrent requests.
    pub unit: LoadUnit,
    /// Probes run, repeats included.
    pub probes: usize,
    /// Why it stopped.
    pub stopped: Stopped,
}

impl Bracket {
    /// The headline: "sustains 11.8 req/s; fails at 12.6 req/s".
    pub fn headline(&self) -> String {
        let unit = self.unit.symbol();
        let value = |v: f64| crate::plan::units::format_load(v);
        match (self.sustains, self.fails_at) {
            (Some(s), Some(f)) => {
                format!("sustains {} {unit}; fails at {} {unit}", value(s), value(f))
            }
            (Some(s), None) => format!(
                "sustains {} {unit}, the top of the range searched",
                value(s)
            ),
            (None, Some(f)) => format!(
                "fails at {} {unit}, the bottom of the range searched",
                value(f)
            ),
            (None, None) => "no probe completed".to_string(),
        }
    }
}

/// The decision a load's results make: pass, fail, or not yet (a marginal result waits for
/// another). A probe the client limited is no evidence: it is left out.
fn decided(results: &[&ProbeResult]) -> Option<bool> {
    let results: Vec<&ProbeResult> = results
        .iter()
        .copied()
        .filter(|r| !r.client_limited)
        .collect();
    let passes = results.iter().filter(|r| r.passed).count();
    let fails = results.len() - passes;
    match results.as_slice() {
        [] => None,
        [only] if !only.marginal => Some(only.passed),
        [_] => None,
        _ if passes >= 2 || (passes > fails && results.len() >= 3) => Some(true),
        _ if fails >= 2 || (fails > passes && results.len() >= 3) => Some(false),
        _ => None,
    }
}

/// Each load probed, with its decision (loads still undecided left out).
fn decisions(results: &[ProbeResult]) -> Vec<(f64, bool)> {
    let mut loads: Vec<f64> = Vec::new();
    for r in results {
        if !loads.contains(&r.load) {
            loads.push(r.load);
        }
    }
    loads
        .into_iter()
        .filter_map(|load| {
            let of_load: Vec<&ProbeResult> = results.iter().filter(|r| r.load == load).collect();
            decided(&of_load).map(|passed| (load, passed))
        })
        .collect()
}

/// The bracket the results give: the highest passing load below the lowest failing one.
pub fn bracket(unit: LoadUnit, results: &[ProbeResult], stopped: Stopped) -> Bracket {
    let decided = decisions(results);
    let fails_at = decided
        .iter()
        .filter(|(_, passed)| !passed)
        .map(|(load, _)| *load)
        .fold(None, |min: Option<f64>, l| {
            Some(min.map_or(l, |m| m.min(l)))
        });
    let sustains = decided
        .iter()
        .filter(|(load, passed)| *passed && fails_at.is_none_or(|f| *load < f))
        .map(|(load, _)| *load)
        .fold(None, |max: Option<f64>, l| {
            Some(max.map_or(l, |m| m.max(l)))
        });
    Bracket {
        sustains,
        fails_at,
        width: sustains.zip(fails_at).map(|(s, f)| (f - s) / s),
        unit,
        probes: results.len(),
        stopped,
    }
}

/// Probes in a row at one load that the client limited before the search ends, saying so.
const CLIENT_LIMITED_IN_A_ROW: usize = 2;

/// The next load to probe, or why the search is over. `elapsed` is the search's time so far.
pub fn next(spec: &Search, results: &[ProbeResult], elapsed: Duration) -> Result<f64, Stopped> {
    // A probe the client limited is repeated once; twice in a row, the client is the limit.
    if let Some(last) = results.last().filter(|r| r.client_limited) {
        let in_a_row = results
            .iter()
            .rev()
            .take_while(|r| r.client_limited && r.load == last.load)
            .count();
        if in_a_row >= CLIENT_LIMITED_IN_A_ROW {
            return Err(Stopped::ClientLimited);
        }
        return budget(spec, results, elapsed).map(|_| last.load);
    }
    // A marginal load waits for its repeat first.
    if let Some(last) = results.last() {
        let of_last: Vec<&ProbeResult> = results.iter().filter(|r| r.load == last.load).collect();
        if decided(&of_last).is_none() {
            return budget(spec, results, elapsed).map(|_| last.load);
        }
    }
    let found = bracket(spec.unit, results, Stopped::Precise);
    let load = match (found.sustains, found.fails_at) {
        (None, None) => spec.low,
        (None, Some(_)) => return Err(Stopped::BelowRange),
        (Some(s), None) if s >= spec.high => return Err(Stopped::AboveRange),
        (Some(s), None) => round(spec.unit, (s * 2.0).min(spec.high)),
        (Some(s), Some(f)) => {
            let mid = match spec.unit {
                LoadUnit::RequestsPerSecond => (s * f).sqrt(),
                LoadUnit::Concurrency | LoadUnit::Sessions => ((s + f) / 2.0).floor(),
            };
            let mid = round(spec.unit, mid);
            if found.width.is_some_and(|w| w <= spec.precision) || mid <= s || mid >= f {
                return Err(Stopped::Precise);
            }
            mid
        }
    };
    budget(spec, results, elapsed).map(|_| load)
}

/// An error when the search has no budget left for one more probe.
fn budget(spec: &Search, results: &[ProbeResult], elapsed: Duration) -> Result<(), Stopped> {
    if results.len() >= spec.max_probes as usize {
        return Err(Stopped::ProbeBudget);
    }
    if elapsed + probe_time(spec) > spec.max_duration {
        return Err(Stopped::TimeBudget);
    }
    Ok(())
}

/// How long one probe takes at most (its warmup and measured window).
pub fn probe_time(spec: &Search) -> Duration {
    spec.warmup.unwrap_or_default() + spec.duration
}

fn round(unit: LoadUnit, load: f64) -> f64 {
    match unit {
        LoadUnit::Concurrency | LoadUnit::Sessions => load.round().max(1.0),
        LoadUnit::RequestsPerSecond => (load * 1000.0).round() / 1000.0,
    }
}

/// The loads the search probes first, before any result is known: the range's low end, and the
/// doubling that brackets the capacity if every probe passes.
pub fn first_probes(spec: &Search) -> Vec<f64> {
    let mut loads = vec![spec.low];
    while let Some(&last) = loads.last() {
        let next = round(spec.unit, (last * 2.0).min(spec.high));
        if next <= last || loads.len() >= spec.max_probes as usize {
            break;
        }
        loads.push(next);
    }
    loads
}

/// The search as `llmload plan` describes it.
pub fn describe(spec: &Search) -> String {
    let unit = spec.unit.symbol();
    let value = crate::plan::units::format_load;
    format!(
        "{} {unit} to {} {unit}, to within {}%, at most {} probes of {}{} and {}",
        value(spec.low),
        value(spec.high),
        crate::plan::units::format_load(spec.precision * 100.0),
        spec.max_probes,
        crate::plan::units::format_duration(spec.duration),
        spec.warmup
            .map(|w| format!(
                " (after {} of warmup)",
                crate::plan::units::format_duration(w)
            ))
            .unwrap_or_default(),
        crate::plan::units::format_duration(spec.max_duration)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{Arrivals, Objective};

    fn spec(unit: LoadUnit, low: f64, high: f64) -> Search {
        Search {
            name: "capacity".into(),
            unit,
            arrivals: Arrivals::Poisson,
            low,
            high,
            precision: 0.05,
            max_probes: 20,
            max_duration: Duration::from_secs(3600),
            warmup: None,
            duration: Duration::from_secs(10),
            objective: Objective::Sla,
            position: 0,
            reset_cache: false,
            sessions: None,
        }
    }

    /// Runs the search against a server whose true capacity is `capacity`.
    fn run(spec: &Search, capacity: f64, marginal_within: f64) -> (Vec<ProbeResult>, Stopped) {
        let mut results = Vec::new();
        loop {
            match next(spec, &results, Duration::ZERO) {
                Ok(load) => results.push(ProbeResult {
                    load,
                    passed: load <= capacity,
                    marginal: (load / capacity - 1.0).abs() < marginal_within,
                    client_limited: false,
                }),
                Err(stopped) => return (results, stopped),
            }
        }
    }

    #[test]
    fn brackets_then_bisects_to_the_precision() {
        let spec = spec(LoadUnit::RequestsPerSecond, 1.0, 64.0);
        let (results, stopped) = run(&spec, 11.8, 0.0);
        assert_eq!(stopped, Stopped::Precise);
        let loads: Vec<f64> = results.iter().map(|r| r.load).collect();
        assert_eq!(&loads[..5], &[1.0, 2.0, 4.0, 8.0, 16.0]);
        let found = bracket(spec.unit, &results, stopped);
        let (s, f) = (found.sustains.unwrap(), found.fails_at.unwrap());
        assert!(s <= 11.8 && 11.8 < f, "{found:?}");
        assert!((f - s) / s <= 0.05, "{found:?}");
        assert!(
            found.headline().starts_with("sustains "),
            "{}",
            found.headline()
        );
    }

    #[test]
    fn marginal_probes_are_repeated_and_concurrency_is_whole() {
        let spec = spec(LoadUnit::Concurrency, 1.0, 256.0);
        let (results, stopped) = run(&spec, 37.0, 0.1);
        assert_eq!(stopped, Stopped::Precise);
        assert!(results.iter().all(|r| r.load.fract() == 0.0));
        // Loads near 37 were probed at least twice.
        let near: Vec<&ProbeResult> = results.iter().filter(|r| r.marginal).collect();
        assert!(!near.is_empty());
        for r in &near {
            assert!(
                results.iter().filter(|o| o.load == r.load).count() >= 2,
                "{results:?}"
            );
        }
        let found = bracket(spec.unit, &results, stopped);
        assert_eq!(found.sustains, Some(37.0));
        assert_eq!(found.fails_at, Some(38.0));
    }

    #[test]
    fn a_probe_the_client_limited_is_repeated_and_twice_ends_the_search() {
        let spec = spec(LoadUnit::RequestsPerSecond, 1.0, 64.0);
        let probe = |load: f64, passed: bool, client_limited: bool| ProbeResult {
            load,
            passed,
            marginal: false,
            client_limited,
        };
        // A late probe (failed or passed alike) is no evidence: the same load again.
        let mut results = vec![probe(1.0, true, false), probe(2.0, false, true)];
        assert_eq!(next(&spec, &results, Duration::ZERO), Ok(2.0));
        let found = bracket(spec.unit, &results, Stopped::Precise);
        assert_eq!((found.sustains, found.fails_at), (Some(1.0), None));
        // On time the second time: it decides, and the search goes on.
        results.push(probe(2.0, true, false));
        assert_eq!(next(&spec, &results, Duration::ZERO), Ok(4.0));
        // Late twice in a row: the client is the limit.
        results.push(probe(4.0, true, true));
        assert_eq!(next(&spec, &results, Duration::ZERO), Ok(4.0));
        results.push(probe(4.0, false, true));
        assert_eq!(
            next(&spec, &results, Duration::ZERO),
            Err(Stopped::ClientLimited)
        );
        let found = bracket(spec.unit, &results, Stopped::ClientLimited);
        assert_eq!((found.sustains, found.fails_at), (Some(2.0), None));
        assert_eq!(found.probes, 5);
    }

    #[test]
    fn ranges_and_budgets_end_the_search() {
        let s = spec(LoadUnit::RequestsPerSecond, 4.0, 64.0);
        assert_eq!(run(&s, 2.0, 0.0).1, Stopped::BelowRange);
        assert_eq!(run(&s, 100.0, 0.0).1, Stopped::AboveRange);
        let few = Search {
            max_probes: 3,
            ..s.clone()
        };
        assert_eq!(run(&few, 30.0, 0.0).1, Stopped::ProbeBudget);
        assert_eq!(
            next(&s, &[], Duration::from_secs(3600)),
            Err(Stopped::TimeBudget)
        );
        assert_eq!(first_probes(&s), vec![4.0, 8.0, 16.0, 32.0, 64.0]);
        let below = bracket(s.unit, &run(&s, 2.0, 0.0).0, Stopped::BelowRange);
        assert!(
            below.headline().contains("bottom of the range"),
            "{}",
            below.headline()
        );
    }
}
