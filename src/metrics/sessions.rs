//! Agent sessions judged as sessions: what each session of a `sessions` phase came to, from its
//! calls' records (how many, whether each met the objectives, the prompt tokens the cache
//! served) and its `session` line (when it ran, the calls it was to make, its waits).
//!
//! Records and session lines may come in any order (a merged run writes the lines after every
//! request), so each is kept until the aggregation ends: a few numbers per session, never a
//! request. A session the phase's end cut short (calls left unsent, none failed) says nothing
//! about the server and is counted apart, in no metric.
//!
//! What this is not: the metrics' definitions (the metric table's `Source::Sessions` entries)
//! or their distributions (the accumulators').

use std::collections::{BTreeSet, HashMap};

use serde::Serialize;

use crate::records::{RequestRecord, SessionEnd};

/// One judged session, as the metric table reads it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SessionOutcome {
    /// From its start to its last call's end, ms.
    pub e2e_ms: f64,
    /// Calls answered.
    pub calls: f64,
    /// Time its calls waited for their turn (tool runs, think times), summed, ms.
    pub waited_ms: f64,
    /// Prompt tokens its calls' answers said the cache served, of their prompt tokens (`None`
    /// when no answer said).
    pub cache_hit: Option<f64>,
    /// Every call it was to make was answered and met the `slo` (answered, without one).
    pub good: bool,
}

/// The sessions of one scope.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct SessionStats {
    /// Sessions judged: every call sent, or one failed.
    pub judged: u64,
    /// Of those, sessions whose every call was answered and met the objectives.
    pub good: u64,
    /// `good / judged`: session-level goodput.
    pub goodput: f64,
    /// Sessions the phase's end cut short (judged on nothing).
    pub cut_short: u64,
}

impl SessionStats {
    /// Counts one judged session.
    pub(super) fn add(&mut self, outcome: &SessionOutcome) {
        self.judged += 1;
        self.good += u64::from(outcome.good);
        self.goodput = self.good as f64 / self.judged as f64;
    }
}

/// What a session's records said.
#[derive(Debug, Default, Clone, Copy)]
struct Facts {
    /// Calls recorded, and of those, the good ones.
    calls: u32,
    good: u32,
    prompt_tokens: u64,
    cached_tokens: u64,
    /// Calls whose answer said how many tokens were cached.
    cache_said: u32,
}

/// Every session of the run's `sessions` phases, as its records and line come.
#[derive(Debug, Default)]
pub(super) struct SessionBook {
    /// The phases that run sessions.
    phases: BTreeSet<usize>,
    facts: HashMap<(usize, u64), Facts>,
    ends: Vec<SessionEnd>,
}

impl SessionBook {
    /// Phase `index` runs sessions.
    pub(super) fn phase(&mut self, index: usize) {
        self.phases.insert(index);
    }

    /// One request; `good` when it met the objectives.
    pub(super) fn record(&mut self, record: &RequestRecord, good: bool) {
        let Some(session) = record
            .conversation
            .filter(|_| self.phases.contains(&record.phase))
        else {
            return;
        };
        let facts = self.facts.entry((record.phase, session)).or_default();
        facts.calls += 1;
        facts.good += u32::from(good);
        if let (Some(cached), Some(prompt)) = (record.cached_tokens, record.prompt_tokens) {
            facts.cache_said += 1;
            facts.cached_tokens += cached;
            facts.prompt_tokens += prompt;
        }
    }

    /// A session's line.
    pub(super) fn end(&mut self, end: SessionEnd) {
        self.ends.push(end);
    }

    /// Each session's phase and outcome (`None`: cut short), in the order they ended.
    pub(super) fn outcomes(self) -> Vec<(usize, Option<SessionOutcome>)> {
        let SessionBook {
            facts, mut ends, ..
        } = self;
        ends.sort_by_key(|end| (end.end_us, end.phase, end.session));
        ends.into_iter()
            .map(|end| {
                let facts = facts
                    .get(&(end.phase, end.session))
                    .copied()
                    .unwrap_or_default();
                (end.phase, outcome(&end, facts))
            })
            .collect()
    }
}

/// The judged sessions of `phases` in a run's records, a request good when it met `slo`
/// (answered, without one): what a comparison resamples, session by session. `None` when the
/// log holds a sample of the run's requests (a session's calls are then not all there to judge
/// it by).
pub fn outcomes_of(
    log: &crate::records::RunLog,
    phases: &[usize],
    slo: Option<&crate::plan::Slo>,
) -> Option<Vec<SessionOutcome>> {
    if log.sampled.is_some() {
        return None;
    }
    let mut book = SessionBook::default();
    for start in log.phases.iter().filter(|p| p.sessions) {
        book.phase(start.index);
    }
    for record in &log.records {
        book.record(
            record,
            slo.map_or(record.ok(), |slo| super::meets(slo, record)),
        );
    }
    log.sessions.iter().for_each(|end| book.end(end.clone()));
    let outcomes = book.outcomes().into_iter();
    Some(
        outcomes
            .filter(|(phase, _)| phases.contains(phase))
            .filter_map(|(_, outcome)| outcome)
            .collect(),
    )
}

fn outcome(end: &SessionEnd, facts: Facts) -> Option<SessionOutcome> {
    if !end.judged() {
        return None;
    }
    Some(SessionOutcome {
        e2e_ms: end.end_us.saturating_sub(end.start_us) as f64 / 1e3,
        calls: f64::from(end.answered),
        waited_ms: end.waited_ms,
        cache_hit: (facts.cache_said > 0 && facts.prompt_tokens > 0)
            .then(|| facts.cached_tokens as f64 / facts.prompt_tokens as f64),
        // Every call made, each good (a record per call: none lost).
        good: end.completed() && facts.calls >= end.calls && facts.good >= end.calls,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn end(session: u64, calls: u32, sent: u32, answered: u32) -> SessionEnd {
        SessionEnd {
            phase: 1,
            session,
            id: format!("s{session}"),
            start_us: 1_000,
            end_us: 501_000,
            calls,
            sent,
            answered,
            waited_ms: 120.0,
            shard: None,
        }
    }

    fn call(session: u64, prompt: u64, cached: u64) -> RequestRecord {
        RequestRecord {
            phase: 1,
            conversation: Some(session),
            prompt_tokens: Some(prompt),
            cached_tokens: Some(cached),
            ..RequestRecord::default()
        }
    }

    #[test]
    fn a_session_is_good_when_every_call_was_answered_and_good() {
        let mut book = SessionBook::default();
        book.phase(1);
        // Lines may come before their records (a merged run).
        book.end(end(0, 2, 2, 2));
        book.end(end(1, 2, 2, 2));
        book.end(end(2, 3, 2, 1));
        book.end(end(3, 3, 1, 1));
        for (session, good) in [
            (0, true),
            (0, true),
            (1, true),
            (1, false),
            (2, true),
            (2, false),
        ] {
            book.record(&call(session, 100, 50), good);
        }
        // A request of a phase without sessions is not a session's.
        book.record(
            &RequestRecord {
                phase: 0,
                conversation: Some(0),
                ..call(0, 1, 1)
            },
            false,
        );
        let outcomes = book.outcomes();
        let judged: Vec<_> = outcomes.iter().filter_map(|(_, o)| *o).collect();
        // Session 3 was cut short by the phase's end: no failure, calls unsent.
        assert_eq!((outcomes.len(), judged.len()), (4, 3));
        assert!(judged[0].good);
        assert!(!judged[1].good, "a call missed the objectives");
        assert!(!judged[2].good, "a call failed");
        assert_eq!(judged[0].e2e_ms, 500.0);
        assert_eq!(judged[0].cache_hit, Some(0.5));
        let mut stats = SessionStats::default();
        judged.iter().for_each(|o| stats.add(o));
        assert_eq!((stats.judged, stats.good), (3, 1));
    }
}
