//! Comparison math on hand-made runs.

use super::*;
use crate::plan::Undecided;
use crate::records::{ErrorClass, PhaseEnd, PhaseStart, RequestRecord, RunEnd, TokenSource};

fn header(seed: u64, plan: &str) -> RunHeader {
    RunHeader {
        plan: plan.into(),
        seed,
        model: "m".into(),
        api: "chat".into(),
        stream: true,
        plan_sha256: "x".into(),
        ..RunHeader::default()
    }
}

/// A run of `n` requests whose TTFT is drawn around `ttft_ms` (a fixed spread, seeded).
fn run(n: usize, ttft_ms: f64, seed: u64, failures: usize) -> RunLog {
    use rand::{Rng, SeedableRng};
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let records = (0..n)
        .map(|i| {
            let ttft = ((ttft_ms + rng.random_range(-0.3..0.3) * ttft_ms) * 1000.0) as u64;
            let gap = 10_000 + rng.random_range(0..2_000);
            RequestRecord {
                seq: i as u64,
                intended_send_us: i as u64 * 10_000,
                actual_send_us: i as u64 * 10_000,
                input_tokens_planned: 10,
                output_tokens_planned: 4,
                // Failures spread evenly over the run, as a steady fault rate spreads them.
                error: (failures > 0 && i % (n / failures) == 0).then_some(ErrorClass::Http5xx),
                http_status: Some(200),
                ttft_us: Some(ttft),
                e2e_us: Some(ttft + 3 * gap),
                chunks: (0..4).map(|k| (ttft + k * gap, 1)).collect(),
                chunk_tokens: Some(TokenSource::Usage),
                prompt_tokens: Some(10),
                completion_tokens: Some(4),
                token_source: Some(TokenSource::Usage),
                completion_tokens_tokenizer: Some(4),
                finish_reason: Some("length".into()),
                ..RequestRecord::default()
            }
        })
        .collect();
    RunLog {
        header: Some(header(1, "p")),
        phases: vec![PhaseStart {
            index: 0,
            name: "s".into(),
            record: true,
            load: "x".into(),
            open_loop: false,
            planned_rate: None,
            planned_requests: None,
            planned_duration_s: None,
            at_us: 0,
            group: None,
            step: None,
            api: None,
            model: None,
            cache_reset: None,
            sessions: false,
        }],
        phase_ends: vec![PhaseEnd {
            index: 0,
            at_us: n as u64 * 10_000,
            sent: n as u64,
            client: None,
            ended_early: None,
            connections: None,
            body_wait: None,
            hiccups: None,
        }],
        records,
        search_end: None,
        stalls: Vec::new(),
        sessions: Vec::new(),
        end: Some(RunEnd {
            at_us: n as u64 * 10_000 + 1_000_000,
            interrupted: false,
            aborted: None,
            client_peak_rss_bytes: None,
            recorder_backlog: None,
            refused: None,
        }),
        sampled: None,
    }
}

/// `current` against `baseline` under the default tolerances, bootstrap seed 7, what is not
/// decided left not decided.
fn compared(baseline: &RunLog, current: &RunLog) -> Comparison {
    compared_with(baseline, current, 7, Undecided::NotDecided)
}

fn compared_with(
    baseline: &RunLog,
    current: &RunLog,
    seed: u64,
    undecided: Undecided,
) -> Comparison {
    compare(
        baseline,
        current,
        &default_tolerances(),
        None,
        None,
        vec![],
        seed,
        undecided,
    )
}

fn verdict(comparison: &Comparison, metric: &str) -> Change {
    comparison
        .rows
        .iter()
        .find(|r| r.metric == metric)
        .unwrap()
        .verdict
}

#[test]
fn a_clear_slowdown_is_a_regression_and_noise_is_not() {
    let base = run(300, 100.0, 1, 0);
    let slow = run(300, 140.0, 2, 0);
    let same = run(300, 100.0, 3, 0);
    let c = compared(&base, &slow);
    assert_eq!(verdict(&c, "ttft p50 +10%"), Change::Regression);
    assert!(c.regressed);
    let row = c.rows.iter().find(|r| r.metric == "ttft p50 +10%").unwrap();
    assert!(row.ci_low.unwrap() > 0.1 && row.ci_low.unwrap() < row.change.unwrap());
    let c = compared(&base, &same);
    assert!(!c.regressed, "{:#?}", c.rows);
    // The other way round the slowdown is an improvement.
    let c = compared(&slow, &base);
    assert_eq!(verdict(&c, "ttft p50 +10%"), Change::Improvement);
}

#[test]
fn rates_compare_in_points_and_throughput_regresses_downward() {
    let base = run(200, 100.0, 1, 0);
    let failing = run(200, 100.0, 1, 40);
    let c = compared(&base, &failing);
    let row = c
        .rows
        .iter()
        .find(|r| r.metric == "error-rate +1%")
        .unwrap();
    assert!(!row.relative);
    assert!((row.change.unwrap() - 0.2).abs() < 1e-9);
    assert_eq!(row.verdict, Change::Regression);
    // 40 fewer successful requests over the same wall time: output throughput fell 20%.
    assert_eq!(verdict(&c, "output-throughput -5%"), Change::Regression);
}

#[test]
fn bootstrap_is_repeatable() {
    let base = run(100, 100.0, 1, 0);
    let cur = run(100, 105.0, 2, 0);
    let a = compared_with(&base, &cur, 9, Undecided::NotDecided);
    let b = compared_with(&base, &cur, 9, Undecided::NotDecided);
    assert_eq!(
        serde_json::to_string(&a.rows).unwrap(),
        serde_json::to_string(&b.rows).unwrap()
    );
}

#[test]
fn different_plans_seeds_or_models_are_refused_unless_forced() {
    assert!(comparable(&header(1, "p"), &header(1, "p"), false)
        .unwrap()
        .is_empty());
    let err = comparable(&header(1, "p"), &header(2, "q"), false)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("plan: baseline p, current q")
            && err.contains("seed")
            && err.contains("--force"),
        "{err}"
    );
    let notes = comparable(&header(1, "p"), &header(2, "p"), true).unwrap();
    assert!(notes[0].contains("--force"));
}

#[test]
fn throughput_has_an_honest_interval() {
    let base = run(300, 100.0, 1, 0);
    let same = run(300, 100.0, 3, 0);
    let c = compared(&base, &same);
    let row = c
        .rows
        .iter()
        .find(|r| r.metric.starts_with("output-throughput"))
        .unwrap();
    let (low, high) = (row.ci_low.unwrap(), row.ci_high.unwrap());
    assert!(low < high, "a zero-width interval: {low} {high}");
    assert!(
        low <= row.change.unwrap() && row.change.unwrap() <= high,
        "{row:?}"
    );
}

fn bracket(sustains: Option<f64>, fails_at: Option<f64>) -> Bracket {
    Bracket {
        sustains,
        fails_at,
        width: None,
        unit: crate::plan::LoadUnit::RequestsPerSecond,
        probes: 6,
        stopped: crate::records::Stopped::Precise,
    }
}

#[test]
fn capacities_compare_by_their_brackets() {
    let tolerance = &default_search_tolerances()[0];
    let verdict =
        |base: Bracket, cur: Bracket| capacity_row(tolerance, Some((&base, &cur))).verdict;
    let base = bracket(Some(20.0), Some(21.0));
    // Within the tolerance, even on the most pessimistic reading of both brackets (-7.1%).
    assert_eq!(
        verdict(base.clone(), bracket(Some(19.5), Some(20.4))),
        Change::Unchanged
    );
    // A drop beyond 10% even on the most optimistic reading of the current bracket.
    assert_eq!(
        verdict(base.clone(), bracket(Some(14.0), Some(15.0))),
        Change::Regression
    );
    // Beyond 10% on the point, but the current bracket is too wide to say.
    assert_eq!(
        verdict(base.clone(), bracket(Some(15.0), Some(30.0))),
        Change::NotDecided
    );
    // Within 10% on the point, but the baseline's bracket is too wide to say: its capacity may
    // be 40, which 19 is half of.
    let wide = capacity_row(
        tolerance,
        Some((
            &bracket(Some(20.0), Some(40.0)),
            &bracket(Some(19.0), Some(21.0)),
        )),
    );
    assert_eq!(wide.verdict, Change::NotDecided);
    assert!(wide.undecided.unwrap().contains("narrow them"));
    // Better beyond the baseline's bracket.
    assert_eq!(
        verdict(base.clone(), bracket(Some(25.0), Some(27.0))),
        Change::Improvement
    );
    // Nothing held now: a capacity below the range, a regression.
    assert_eq!(verdict(base, bracket(None, Some(5.0))), Change::Regression);
    assert_eq!(capacity_row(tolerance, None).verdict, Change::NoData);
}

/// A long run compared through a uniform sample of its requests: latencies as the whole run's,
/// throughputs scaled back to the whole run's (a quarter of the requests is not a quarter of the
/// throughput).
#[test]
fn a_sampled_run_compares_like_the_whole_run() {
    let base = run(20_000, 100.0, 1, 0);
    let mut sampled = run(20_000, 100.0, 1, 0);
    let kept: Vec<RequestRecord> = sampled.records.iter().step_by(4).cloned().collect();
    sampled.sampled = Some(crate::records::Sampled {
        kept: kept.len() as u64,
        total: 20_000,
        path: "records.jsonl".into(),
    });
    sampled.records = kept;
    let c = compared(&base, &sampled);
    assert!(!c.regressed, "{:#?}", c.rows);
    for metric in ["output-throughput -5%", "ttft p50 +10%"] {
        let row = c.rows.iter().find(|r| r.metric == metric).unwrap();
        assert!(row.change.unwrap().abs() < 0.02, "{metric}: {row:?}");
    }
    // Unscaled, the sample would have lost three quarters of the throughput.
    sampled.sampled = None;
    let c = compared(&base, &sampled);
    assert_eq!(verdict(&c, "output-throughput -5%"), Change::Regression);
}

#[test]
fn a_baseline_from_another_server_build_or_command_line_is_named() {
    let server = |command: &str, version: Option<&str>| {
        Some(Box::new(crate::records::LaunchedServer {
            program: "llama-server".into(),
            command: command.into(),
            version: version.map(str::to_string),
        }))
    };
    let with = |s| RunHeader {
        server: s,
        ..header(1, "p")
    };
    let same = comparable(
        &with(server("llama-server --port {port}", Some("b100"))),
        &with(server("llama-server --port {port}", Some("b100"))),
        false,
    )
    .unwrap();
    assert!(same.is_empty(), "{same:?}");
    let notes = comparable(
        &with(server("llama-server --port {port} -np 2", Some("b100"))),
        &with(server("llama-server --port {port} -np 4", Some("b101"))),
        false,
    )
    .unwrap();
    assert_eq!(notes.len(), 2, "{notes:?}");
    assert!(notes[0].contains("different builds") && notes[0].contains("b101"));
    assert!(notes[1].contains("-np 4"));
    let one_sided = comparable(&with(server("x", None)), &header(1, "p"), false).unwrap();
    assert!(one_sided[0].contains("the baseline started its server itself"));
}

fn row<'a>(comparison: &'a Comparison, metric: &str) -> &'a Row {
    comparison.rows.iter().find(|r| r.metric == metric).unwrap()
}

/// Two short runs of the same server: a tolerance their interval cannot resolve is not decided,
/// not "ok", with the run length that would decide it; runs of that length do decide it.
#[test]
fn an_interval_wider_than_its_tolerance_is_not_decided_and_says_what_would_decide_it() {
    let c = compared(&run(40, 100.0, 1, 0), &run(40, 100.0, 3, 0));
    assert!(!c.regressed);
    let p50 = row(&c, "ttft p50 +10%");
    assert_eq!(p50.verdict, Change::NotDecided, "{p50:?}");
    assert!(!p50.passes);
    let why = p50.undecided.as_deref().unwrap();
    assert!(
        why.contains("reaches past the tolerance") && why.contains("(these: 40 and 40)"),
        "{why}"
    );
    let needed: usize = why
        .split("needs ≈ ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .map(|n| n.replace(',', "").parse().unwrap())
        .unwrap();
    assert!((41..2_000).contains(&needed), "{why}");
    let throughput = row(&c, "output-throughput -5%");
    assert!(
        throughput
            .undecided
            .as_deref()
            .is_some_and(|w| w.contains(" s each (these: ")),
        "{throughput:?}"
    );
    // Runs of the length it named decide it.
    let c = compared(&run(needed, 100.0, 1, 0), &run(needed, 100.0, 3, 0));
    assert_eq!(
        row(&c, "ttft p50 +10%").verdict,
        Change::Unchanged,
        "{:?}",
        row(&c, "ttft p50 +10%")
    );
    // The plan may let what is not decided pass: still marked, no longer gating.
    let c = compared_with(
        &run(40, 100.0, 1, 0),
        &run(40, 100.0, 3, 0),
        7,
        Undecided::Pass,
    );
    let p50 = row(&c, "ttft p50 +10%");
    assert!(p50.verdict == Change::NotDecided && p50.passes);
}

/// A slowdown the current run's client stalled through is no evidence about the server; the same
/// slowdown without the stall is a regression.
#[test]
fn a_slowdown_the_client_stalled_through_is_not_decided() {
    let base = run(300, 100.0, 1, 0);
    let mut slow = run(300, 140.0, 2, 0);
    let c = compared(&base, &slow);
    assert_eq!(verdict(&c, "ttft p50 +10%"), Change::Regression);
    // One 3.5 s stall with every request in flight.
    slow.stalls = vec![crate::records::Stall {
        at_us: 0,
        ms: 3_500.0,
        shard: None,
    }];
    let c = compared(&base, &slow);
    assert!(!c.regressed, "{:#?}", c.rows);
    let p50 = row(&c, "ttft p50 +10%");
    assert_eq!(p50.verdict, Change::NotDecided);
    assert!(
        p50.undecided
            .as_deref()
            .unwrap()
            .contains("the current run's client stalled"),
        "{p50:?}"
    );
    // A stall in the baseline does not excuse a regression: it only flatters the current run.
    let mut stalled_base = run(300, 100.0, 1, 0);
    stalled_base.stalls = slow.stalls.clone();
    slow.stalls.clear();
    let c = compared(&stalled_base, &slow);
    assert_eq!(verdict(&c, "ttft p50 +10%"), Change::Regression);
}

/// A run of `sessions` agent sessions of two calls each, lasting around `e2e_ms`; the calls of
/// the first `failed` sessions fail.
fn session_run(sessions: u64, e2e_ms: f64, seed: u64, failed: u64) -> RunLog {
    use rand::{Rng, SeedableRng};
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let mut log = run(0, 100.0, seed, 0);
    log.phases[0].sessions = true;
    for s in 0..sessions {
        let start_us = s * 1_000_000;
        let e2e_us = ((e2e_ms + rng.random_range(-0.2..0.2) * e2e_ms) * 1000.0) as u64;
        for call in 0..2 {
            log.records.push(RequestRecord {
                seq: s * (1 << 20) + call,
                conversation: Some(s),
                turn: Some(call as u32 + 1),
                actual_send_us: start_us + call * e2e_us / 2,
                error: (s < failed).then_some(ErrorClass::Http5xx),
                http_status: Some(if s < failed { 500 } else { 200 }),
                ttft_us: Some(10_000),
                e2e_us: Some(e2e_us / 2),
                ..RequestRecord::default()
            });
        }
        log.sessions.push(crate::records::SessionEnd {
            phase: 0,
            session: s,
            id: format!("s{s}"),
            start_us,
            end_us: start_us + e2e_us,
            calls: 2,
            sent: if s < failed { 1 } else { 2 },
            answered: if s < failed { 0 } else { 2 },
            waited_ms: 0.0,
            shard: None,
        });
    }
    log
}

#[test]
fn session_metrics_are_resampled_session_by_session() {
    let tolerance = |metric: Metric, stat: Option<Stat>, allowed: f64, text: &str| Tolerance {
        metric,
        stat,
        allowed,
        phase: None,
        text: text.into(),
    };
    let tolerances = [
        tolerance(
            Metric::SessionE2e,
            Some(Stat::Percentile(50.0)),
            0.10,
            "session-e2e p50 +10%",
        ),
        tolerance(Metric::SessionGoodput, None, 0.05, "session-goodput -5%"),
    ];
    let compare_runs = |base: &RunLog, cur: &RunLog| {
        compare(
            base,
            cur,
            &tolerances,
            None,
            None,
            vec![],
            7,
            Undecided::NotDecided,
        )
    };
    let base = session_run(200, 500.0, 1, 0);
    let row = |c: &Comparison, metric: &str| c.rows.iter().find(|r| r.metric == metric).cloned();
    // Slower sessions, a fifth of them failed: both regress.
    let worse = compare_runs(&base, &session_run(200, 700.0, 2, 40));
    let e2e = row(&worse, "session-e2e p50 +10%").expect("compared");
    assert_eq!(e2e.verdict, Change::Regression, "{e2e:?}");
    assert!((0.3..0.5).contains(&e2e.change.unwrap_or(0.0)), "{e2e:?}");
    let goodput = row(&worse, "session-goodput -5%").expect("compared");
    assert_eq!((goodput.baseline, goodput.current), (Some(1.0), Some(0.8)));
    assert_eq!(goodput.verdict, Change::Regression);
    // The same sessions again: no regression. Ten sessions each cannot decide 10%.
    let same = compare_runs(&base, &session_run(200, 500.0, 3, 0));
    assert!(!same.regressed, "{:#?}", same.rows);
    let short = compare_runs(&session_run(10, 500.0, 1, 0), &session_run(10, 520.0, 2, 0));
    let e2e = row(&short, "session-e2e p50 +10%").expect("compared");
    assert_eq!(e2e.verdict, Change::NotDecided);
    assert!(
        e2e.undecided
            .as_deref()
            .is_some_and(|why| why.contains("judged sessions")),
        "{e2e:?}"
    );
}
