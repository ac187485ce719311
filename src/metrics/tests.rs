//! Metric math on hand-made records.

use super::*;
use crate::records::{
    ClientLoad, ErrorClass, PhaseEnd, PhaseStart, RunEnd, RunHeader, TokenSource,
};

fn header(exact: bool) -> RunHeader {
    RunHeader {
        tool_version: "test".into(),
        plan: "p".into(),
        plan_file: "p.kdl".into(),
        plan_sha256: "0".into(),
        seed: 1,
        target: "http://127.0.0.1:1".into(),
        model: "m".into(),
        api: "chat".into(),
        stream: true,
        exact_output: exact,
        tokenizer: "cl100k_base".into(),
        tokenizer_note: None,
        target_notes: Vec::new(),
        shares_prompts: false,
        tls_unverified: false,
        http: None,
        keys: Vec::new(),
        paces_to_answers: false,
        started_at: "2026-01-01T00:00:00Z".into(),
        client_host: "h".into(),
        client_machine: None,
        served_models: Vec::new(),
        clock_origin_ns: None,
        request_id_prefix: None,
        plan_files: Vec::new(),
        env: Default::default(),
        overrides: Vec::new(),
        started_unix_ns: None,
        shard: None,
        merged: Vec::new(),
        labels: Default::default(),
        exports: Vec::new(),
        server: None,
        cost: None,
        gpu_prices: Vec::new(),
    }
}

fn phase(index: usize, name: &str, record: bool, at_us: u64) -> PhaseStart {
    PhaseStart {
        index,
        name: name.into(),
        record,
        load: "rate 1/s poisson".into(),
        open_loop: true,
        planned_rate: Some(1.0),
        planned_requests: None,
        planned_duration_s: None,
        at_us,
        group: None,
        step: None,
        api: None,
        model: None,
        cache_reset: None,
        sessions: false,
    }
}

/// A successful request sent at `send_us` whose chunks arrive at the given µs after send.
fn ok(phase: usize, send_us: u64, chunks: &[(u64, u32)], e2e_us: u64) -> RequestRecord {
    let completion: u64 = chunks.iter().map(|c| c.1 as u64).sum();
    RequestRecord {
        phase,
        intended_send_us: send_us,
        actual_send_us: send_us,
        input_tokens_planned: 100,
        output_tokens_planned: completion as u32,
        http_status: Some(200),
        ttft_us: chunks.first().map(|c| c.0),
        e2e_us: Some(e2e_us),
        chunks: chunks.to_vec(),
        chunk_tokens: Some(TokenSource::Usage),
        prompt_tokens: Some(100),
        completion_tokens: Some(completion),
        token_source: Some(TokenSource::Usage),
        completion_tokens_tokenizer: Some(completion),
        finish_reason: Some("length".into()),
        ..RequestRecord::default()
    }
}

fn failed(phase: usize, class: ErrorClass) -> RequestRecord {
    RequestRecord {
        error: Some(class),
        ttft_us: Some(1),
        e2e_us: Some(1_000_000_000),
        chunks: vec![(1, 1), (1_000_000_000, 1)],
        ..ok(phase, 0, &[], 0)
    }
}

fn log(mut records: Vec<RequestRecord>) -> RunLog {
    // Each request its own number within its phase, as the executor gives them.
    let mut next = [0u64; 2];
    for record in &mut records {
        record.seq = next[record.phase];
        next[record.phase] += 1;
    }
    RunLog {
        header: Some(header(true)),
        phases: vec![
            phase(0, "warmup", false, 0),
            phase(1, "steady", true, 1_000_000),
        ],
        phase_ends: vec![
            PhaseEnd {
                index: 0,
                at_us: 1_000_000,
                sent: 1,
                client: None,
                ended_early: None,
                connections: None,
                body_wait: None,
                hiccups: None,
            },
            PhaseEnd {
                index: 1,
                at_us: 3_000_000,
                sent: 3,
                client: None,
                ended_early: None,
                connections: None,
                body_wait: None,
                hiccups: None,
            },
        ],
        records,
        search_end: None,
        stalls: Vec::new(),
        sessions: Vec::new(),
        end: Some(RunEnd {
            at_us: 5_000_000,
            interrupted: false,
            aborted: None,
            client_peak_rss_bytes: None,
            recorder_backlog: None,
            refused: None,
        }),
        sampled: None,
    }
}

fn close(a: Option<f64>, b: f64) -> bool {
    a.is_some_and(|a| (a - b).abs() <= b.abs() * 0.002 + 1e-6)
}

#[test]
fn ttft_tpot_e2e_and_pooled_itl() {
    // Request A: chunks at 100, 110, 130 ms (1 token each), ends at 140 ms.
    // Request B: chunks at 200, 260 ms, the second carrying 3 tokens; ends at 270 ms.
    let a = ok(
        1,
        1_000_000,
        &[(100_000, 1), (110_000, 1), (130_000, 1)],
        140_000,
    );
    let b = ok(1, 1_500_000, &[(200_000, 1), (260_000, 3)], 270_000);
    let agg = compute_plain(&log(vec![a, b]));
    let steady = &agg.phases[1];
    assert_eq!(steady.requests.ok, 2);
    // TTFT: 100 and 200 ms.
    assert!(close(steady.metrics[crate::dist!(Ttft)].mean, 150.0));
    assert!(close(steady.metrics[crate::dist!(Ttft)].max, 200.0));
    // ITL pools every gap: A gives 10 and 20; B gives 3 samples of 60/3 = 20.
    assert_eq!(steady.metrics[crate::dist!(Itl)].count, 5);
    assert!(close(steady.metrics[crate::dist!(Itl)].min, 10.0));
    assert!(close(
        steady.metrics[crate::dist!(Itl)].mean,
        (10.0 + 20.0 + 60.0) / 5.0
    ));
    // TPOT: A (140-100)/2 = 20; B (270-200)/3 = 23.33.
    assert!(close(steady.metrics[crate::dist!(Tpot)].min, 20.0));
    assert!(close(steady.metrics[crate::dist!(Tpot)].max, 70.0 / 3.0));
    // Prefill: 100 tokens / 0.1 s = 1000 tok/s for A, 500 for B.
    assert!(close(steady.metrics[crate::dist!(PrefillTps)].max, 1000.0));
    // Decode: A 2 tokens over 30 ms; B 3 tokens over 60 ms.
    assert!(close(
        steady.metrics[crate::dist!(DecodeTps)].max,
        2.0 / 0.030
    ));
    assert!(close(
        steady.metrics[crate::dist!(DecodeTps)].min,
        3.0 / 0.060
    ));
    // E2E.
    assert!(close(steady.metrics[crate::dist!(E2e)].min, 140.0));
}

#[test]
fn failures_count_in_rates_but_never_in_latency_or_throughput() {
    let a = ok(1, 1_000_000, &[(100_000, 1), (110_000, 1)], 120_000);
    let agg = compute_plain(&log(vec![
        a,
        failed(1, ErrorClass::Http5xx),
        failed(1, ErrorClass::Timeout),
        failed(1, ErrorClass::Cancelled),
    ]));
    let steady = &agg.phases[1];
    assert_eq!(steady.requests.sent, 4);
    assert_eq!(steady.requests.ok, 1);
    assert_eq!(steady.requests.failed, 2);
    assert_eq!(steady.requests.cancelled, 1);
    assert!(close(Some(steady.rates.error_rate), 2.0 / 3.0));
    assert!(close(Some(steady.rates.timeout_rate), 1.0 / 3.0));
    assert!(close(steady.metrics[crate::dist!(Ttft)].max, 100.0));
    assert!(close(steady.metrics[crate::dist!(E2e)].max, 120.0));
    assert_eq!(steady.errors.get("http_5xx"), Some(&1));
}

#[test]
fn throughput_over_the_phase_wall_time_and_unrecorded_phases_left_out() {
    // Steady starts at 1 s; sending ends at 3 s; its last response ends at 3.5 s: wall 2.5 s.
    let a = ok(1, 1_000_000, &[(100_000, 10)], 200_000);
    let b = ok(1, 2_900_000, &[(100_000, 10)], 600_000);
    let warm = ok(0, 0, &[(100_000, 10)], 200_000);
    let agg = compute_plain(&log(vec![warm, a, b]));
    let steady = &agg.phases[1];
    assert!(close(Some(steady.wall_s), 2.5));
    assert!(close(Some(steady.throughput.requests_per_s), 2.0 / 2.5));
    assert!(close(
        Some(steady.throughput.output_tokens_per_s),
        20.0 / 2.5
    ));
    assert!(close(
        Some(steady.throughput.total_tokens_per_s),
        220.0 / 2.5
    ));
    assert_eq!(agg.overall.requests.sent, 2, "the warmup is not recorded");
    assert!(close(Some(agg.overall.wall_s), 2.5));
}

#[test]
fn nearest_rank_percentiles_of_raw_values() {
    let mut v: Vec<f64> = (1..=1000).rev().map(|x| x as f64).collect();
    assert_eq!(percentile(&mut v, 50.0), 500.0);
    assert_eq!(percentile(&mut v, 99.9), 999.0);
    assert_eq!(percentile(&mut v, 100.0), 1000.0);
    assert_eq!(percentile(&mut [3.0], 1.0), 3.0);
}

#[test]
fn schedule_lag_and_its_warning() {
    let mut late = ok(1, 1_000_000, &[(100_000, 1), (110_000, 1)], 120_000);
    late.actual_send_us = late.intended_send_us + 25_000;
    let agg = compute_plain(&log(vec![late]));
    assert!(close(
        agg.phases[1].metrics[crate::dist!(ScheduleLag)].max,
        25.0
    ));
    assert!(agg.warnings.iter().any(|w| w.code == "schedule-lag"));
}

#[test]
fn a_saturated_client_warns_and_phases_add_up_overall() {
    let load = |seconds, saturated_seconds, cpu_s| ClientLoad {
        cores: 2.0,
        cpu_s,
        utilization: cpu_s / (seconds as f64 * 2.0),
        seconds,
        saturated_seconds,
        machine: None,
    };
    let mut run = log(vec![ok(
        1,
        1_000_000,
        &[(100_000, 1), (110_000, 1)],
        120_000,
    )]);
    run.phase_ends[0].client = Some(load(10, 10, 20.0));
    run.phase_ends[1].client = Some(load(10, 0, 2.0));
    let agg = compute_plain(&run);
    assert!(
        !agg.warnings.iter().any(|w| w.code == "client-cpu"),
        "the saturated phase is not recorded"
    );
    let overall = agg.overall.client.unwrap();
    assert_eq!((overall.seconds, overall.saturated_seconds), (10, 0));

    run.phase_ends[1].client = Some(load(20, 3, 30.0));
    run.phases[0].record = true;
    let agg = compute_plain(&run);
    let warnings: Vec<_> = agg
        .warnings
        .iter()
        .filter(|w| w.code == "client-cpu")
        .map(|w| w.message.as_str())
        .collect();
    assert_eq!(warnings.len(), 2, "{warnings:?}");
    assert!(warnings[1].contains("\"steady\": the client's CPU was saturated (3 of 20 s"));
    let overall = agg.overall.client.unwrap();
    assert_eq!((overall.seconds, overall.saturated_seconds), (30, 13));
    assert!(close(Some(overall.utilization), 50.0 / 60.0));
}

#[test]
fn a_saturated_machine_is_named_when_the_run_started_its_server_there() {
    use crate::records::{LaunchedServer, MachineLoad};
    let machine = |saturated_seconds| MachineLoad {
        cores: 2.0,
        busy_s: 19.0,
        utilization: 0.95,
        seconds: 10,
        saturated_seconds,
    };
    let client = |machine| ClientLoad {
        cores: 2.0,
        cpu_s: 2.0,
        utilization: 0.1,
        seconds: 10,
        saturated_seconds: 0,
        machine: Some(machine),
    };
    let mut run = log(vec![ok(1, 1_000_000, &[(100_000, 1)], 120_000)]);
    run.phase_ends[1].client = Some(client(machine(9)));
    let codes = |run: &RunLog| -> Vec<&'static str> {
        compute_plain(run)
            .warnings
            .iter()
            .map(|w| w.code.as_str())
            .collect()
    };
    // Another process's load is not the run's to judge: only a server the run started.
    assert!(!codes(&run).contains(&"machine-cpu"));
    if let Some(header) = run.header.as_mut() {
        header.server = Some(Box::new(LaunchedServer {
            program: "llama-server".into(),
            command: "llama-server --port {port}".into(),
            version: None,
        }));
    }
    let agg = compute_plain(&run);
    let warning = agg
        .warnings
        .iter()
        .find(|w| w.code == "machine-cpu")
        .unwrap();
    assert!(
        warning
            .message
            .contains("this machine's 2 CPU(s) were saturated (9 of 10 s at ≥95%, 95% on average)")
            && warning.message.contains("(it used 10% of its own)"),
        "{}",
        warning.message
    );
    assert_eq!(
        agg.overall
            .client
            .unwrap()
            .machine
            .unwrap()
            .saturated_seconds,
        9
    );
    // Under the client-cpu rule's share, or with the client itself saturated, it says nothing.
    run.phase_ends[1].client = Some(client(machine(0)));
    assert!(!codes(&run).contains(&"machine-cpu"));
}

#[test]
fn users_waiting_for_bodies_warn_and_make_a_probe_client_limited() {
    use crate::records::BodyWait;
    let mut run = log(vec![ok(1, 1_000_000, &[(100_000, 1)], 120_000)]);
    let wait = |waited_s| BodyWait {
        waited_s,
        users_s: 80.0,
    };
    run.phase_ends[1].body_wait = Some(wait(1.5));
    let agg = compute_plain(&run);
    assert!(
        !agg.warnings.iter().any(|w| w.code == "body-builder"),
        "1.9% of the users' time is under the limit"
    );
    assert_eq!(super::warnings::client_limited(&agg.phases[1]), None);
    run.phase_ends[1].body_wait = Some(wait(4.0));
    let agg = compute_plain(&run);
    let warning = agg
        .warnings
        .iter()
        .find(|w| w.code == "body-builder")
        .expect("5% of the users' time waiting warns");
    assert!(
        warning
            .message
            .contains("its users waited 4.0 s for request bodies (5.0% of their time)"),
        "{}",
        warning.message
    );
    assert!(super::warnings::client_limited(&agg.phases[1])
        .is_some_and(|why| why.contains("waited for request bodies (5.0%")));
}

#[test]
fn finish_stop_under_exact_lengths_warns_and_overhead_is_a_note() {
    let mut a = ok(1, 1_000_000, &[(100_000, 1), (110_000, 1)], 120_000);
    a.finish_reason = Some("stop".into());
    a.output_tokens_planned = 16;
    a.prompt_tokens = Some(125);
    let agg = compute_plain(&log(vec![a]));
    let codes: Vec<_> = agg
        .warnings
        .iter()
        .map(|w| (w.code.as_str(), w.severity))
        .collect();
    assert!(codes.contains(&("finish-stop", Severity::Warning)));
    assert!(codes.contains(&("output-tokens", Severity::Warning)));
    assert!(codes.contains(&("prompt-overhead", Severity::Note)));
    assert!(
        !codes.iter().any(|c| c.0 == "input-tokens"),
        "a constant overhead is not a mismatch"
    );
}

#[test]
fn proportional_prompt_mismatch_warns() {
    let mut records = Vec::new();
    for (i, planned) in [100u32, 200, 400, 800].into_iter().enumerate() {
        let mut r = ok(
            1,
            1_000_000 + i as u64,
            &[(100_000, 1), (110_000, 1)],
            120_000,
        );
        r.input_tokens_planned = planned;
        r.prompt_tokens = Some((planned as f64 * 1.15) as u64);
        records.push(r);
    }
    let agg = compute_plain(&log(records));
    assert!(agg.warnings.iter().any(|w| w.code == "input-tokens"));
}

fn compute_plain(log: &RunLog) -> Aggregates {
    compute(log, None)
}

#[test]
fn goodput_counts_requests_meeting_every_objective() {
    use std::time::Duration;
    // A: ttft 100 ms, tpot (140-100)/2 = 20 ms, e2e 140 ms: good.
    let a = ok(
        1,
        1_000_000,
        &[(100_000, 1), (110_000, 1), (130_000, 1)],
        140_000,
    );
    // B: ttft 400 ms: misses the TTFT objective.
    let b = ok(1, 1_200_000, &[(400_000, 1), (410_000, 1)], 420_000);
    // C: tpot (1000-100)/1 = 900 ms: misses TPOT.
    let c = ok(1, 1_400_000, &[(100_000, 1), (1_000_000, 1)], 1_000_000);
    let slo = Slo {
        ttft: Some(Duration::from_millis(300)),
        tpot: Some(Duration::from_millis(50)),
        e2e: Some(Duration::from_secs(10)),
    };
    let mut refused = failed(1, ErrorClass::Http5xx);
    refused.actual_send_us = 1_500_000;
    refused.e2e_us = Some(10_000);
    let agg = compute(&log(vec![a, b, c, refused]), Some(&slo));
    let g = agg.phases[1].goodput.as_ref().unwrap();
    assert_eq!(g.good, 1);
    assert!(
        (g.ratio - 0.25).abs() < 1e-12,
        "failed requests count as not good"
    );
    // Wall: 1 s (phase start) to 3 s (sending end; responses end by 2.4 s).
    assert!(close(Some(g.requests_per_s), 1.0 / 2.0));
    assert_eq!(agg.phases[1].value(Metric::GoodputRatio, None), Some(0.25));
    assert!(compute_plain(&log(vec![])).overall.goodput.is_none());
}

#[test]
fn streaming_a_records_file_gives_the_same_aggregates_as_the_log_in_memory() {
    let mut in_memory = log(vec![
        ok(0, 10, &[(100, 1), (200, 1)], 300),
        ok(
            1,
            1_100_000,
            &[(50_000, 1), (60_000, 2), (90_000, 1)],
            100_000,
        ),
        failed(1, ErrorClass::Http5xx),
        ok(1, 2_000_000, &[(40_000, 1), (45_000, 1)], 50_000),
    ]);
    // The client stalled 30 ms during the second phase's first request.
    let stall = crate::records::Stall {
        at_us: 1_120_000,
        ms: 30.0,
        shard: None,
    };
    in_memory.stalls.push(stall);
    // The executor's order: a phase's start, its records (the meter's stall line after the
    // request it overlapped: it writes when it wakes), its end.
    let mut lines = vec![LogLine::Run(crate::records::RunLine::current(
        in_memory.header.clone().unwrap(),
    ))];
    for phase in &in_memory.phases {
        lines.push(LogLine::PhaseStart(phase.clone()));
        for record in in_memory.records.iter().filter(|r| r.phase == phase.index) {
            lines.push(LogLine::Request(record.clone()));
            if record.actual_send_us == 1_100_000 {
                lines.push(LogLine::Stall(stall));
            }
        }
        let end = in_memory.phase_ends.iter().find(|e| e.index == phase.index);
        lines.push(LogLine::PhaseEnd(end.unwrap().clone()));
    }
    lines.push(LogLine::RunEnd(in_memory.end.clone().unwrap()));
    let mut text: String = lines
        .iter()
        .map(|line| serde_json::to_string(line).unwrap() + "\n")
        .collect();
    // A torn last line, as a killed process leaves it, is skipped.
    text.push_str("{\"event\":\"request\",\"pha");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("records.jsonl");
    std::fs::write(&path, text).unwrap();

    let slo = Slo {
        ttft: Some(std::time::Duration::from_millis(45)),
        tpot: None,
        e2e: None,
    };
    let expected = compute(&in_memory, Some(&slo));
    let (skeleton, streamed) = compute_file(&path, Some(&slo)).unwrap();
    assert!(skeleton.records.is_empty());
    assert_eq!(skeleton.phases.len(), 2);
    assert_eq!(
        serde_json::to_value(&streamed).unwrap(),
        serde_json::to_value(&expected).unwrap()
    );
    assert_eq!(streamed.overall.goodput.as_ref().unwrap().good, 1);
    let stalls = expected.overall.client_stalls.unwrap();
    assert!(
        stalls.count == 1 && stalls.requests_during >= 1,
        "{stalls:?}"
    );
    assert_eq!(streamed.last_response_us, Some(1_000_000_000));
    assert_eq!(
        streamed.first_error.as_deref(),
        expected.first_error.as_deref()
    );

    // A bad line that is not the last is an error naming it.
    let text = std::fs::read_to_string(&path).unwrap() + "\n{}\n";
    std::fs::write(&path, text).unwrap();
    let error = compute_file(&path, None).unwrap_err().to_string();
    assert!(
        error.contains(&format!("line {}", lines.len() + 1)),
        "{error}"
    );
}

#[test]
fn a_search_the_client_limited_is_not_carried_out() {
    use crate::verdict::{RunVerdict, Status, Verdicts};
    let records = (0..20)
        .map(|k| ok(1, 1_000_000 + k * 50_000, &[(10_000, 1)], 20_000))
        .collect();
    let mut run = log(records);
    run.search_end = Some(crate::records::SearchEnd {
        name: "capacity".into(),
        stopped: crate::records::Stopped::ClientLimited,
        at_us: 3_000_000,
    });
    let agg = compute_plain(&run);
    let verdicts = Verdicts {
        passed: true,
        results: Vec::new(),
        notes: Vec::new(),
        steps: Vec::new(),
        series: Vec::new(),
        capacity: None,
    };
    let status = Status::decide(&agg, &verdicts, None, false);
    assert_eq!(status.exit_code(), 3, "{status:?}");
    // What every output states: the same outcome, and why.
    let verdict = RunVerdict::of(&status, &verdicts, None, &agg);
    let headline = verdict.headline(0);
    assert!(
        headline.starts_with(
            "NOT CARRIED OUT: the capacity search \"capacity\" stopped where the client"
        ),
        "{headline}"
    );
}

/// A phase whose first 10 s are a warm-up (TTFT 300 ms while a queue drains) and whose next
/// 50 s are steady (TTFT 30 ms): the cut finds the transient, the steady window's numbers are
/// the steady requests', in memory as from the file, and a short phase is not looked at.
#[test]
fn a_warm_up_transient_is_cut_from_the_steady_window() {
    let records: Vec<RequestRecord> = (0..600u64)
        .map(|i| {
            let send = 1_000_000 + i * 100_000;
            let ttft = if i < 100 {
                300_000
            } else {
                30_000 + (i % 7) * 500
            };
            ok(1, send, &[(ttft, 1), (ttft + 5_000, 1)], ttft + 10_000)
        })
        .collect();
    let mut run = log(records);
    run.phase_ends[1].at_us = 61_000_000;
    run.end.as_mut().unwrap().at_us = 62_000_000;
    let aggregates = compute(&run, None);
    let steady = aggregates.steady.as_ref().unwrap();
    let window = &steady.phases[0];
    assert_eq!(window.phase, "steady");
    assert!((9.0..=12.0).contains(&window.cut_s), "cut {}", window.cut_s);
    assert_eq!(window.series, "ttft p50");
    let kept = window.metrics.requests.ok;
    assert!((480..=510).contains(&kept), "{kept} requests kept");
    let p99 = |m: &PhaseMetrics| {
        m.distribution(Metric::Ttft)
            .unwrap()
            .stat(crate::plan::Stat::Percentile(99.0))
            .unwrap()
    };
    assert!(p99(&aggregates.phases[1]) > 290.0);
    assert!(p99(&window.metrics) < 40.0, "{}", p99(&window.metrics));
    assert_eq!(steady.overall.requests.ok, kept);
    // The steady window's throughput is over its own time.
    assert!(
        (window.metrics.wall_s - (61.0 - 1.0 - window.cut_s)).abs() < 1.0,
        "{}",
        window.metrics.wall_s
    );

    // The same from the records file, in one pass and one more for the cut phase.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("records.jsonl");
    let mut lines = vec![LogLine::Run(crate::records::RunLine::current(
        run.header.clone().unwrap(),
    ))];
    lines.extend(run.phases.iter().cloned().map(LogLine::PhaseStart));
    lines.extend(run.records.iter().cloned().map(LogLine::Request));
    lines.extend(run.phase_ends.iter().cloned().map(LogLine::PhaseEnd));
    lines.push(LogLine::RunEnd(run.end.clone().unwrap()));
    let text: String = lines
        .iter()
        .map(|l| serde_json::to_string(l).unwrap() + "\n")
        .collect();
    std::fs::write(&path, text).unwrap();
    let (_, streamed) = compute_file(&path, None).unwrap();
    assert_eq!(
        serde_json::to_value(&streamed.steady).unwrap(),
        serde_json::to_value(&aggregates.steady).unwrap()
    );

    // Three seconds of windows: too few to tell a warm-up from noise.
    let short = compute(&log(vec![ok(1, 1_000_000, &[(50_000, 1)], 60_000)]), None);
    let window = &short.steady.as_ref().unwrap().phases[0];
    assert_eq!(window.cut_s, 0.0);
    assert!(
        window.not_looked.as_deref().unwrap().contains("too few"),
        "{window:?}"
    );
}

/// Every share and per-second metric reads, from a scope's aggregates, what the metric table's
/// own formula gives over the scope's requests (the formula `compare` resamples and the live
/// abort counts): the field its `read` names is the one the accumulator filled from it.
#[test]
fn every_share_and_per_second_metric_reads_what_its_table_formula_gives() {
    use std::time::Duration;
    use table::Source;
    let slo = Slo {
        ttft: Some(Duration::from_millis(300)),
        tpot: None,
        e2e: None,
    };
    let mut records = vec![
        ok(1, 1_000_000, &[(100_000, 3), (120_000, 5)], 130_000),
        ok(1, 1_100_000, &[(400_000, 2), (410_000, 2)], 420_000),
        ok(1, 1_200_000, &[(50_000, 1), (60_000, 1)], 70_000),
        failed(1, ErrorClass::Http5xx),
        failed(1, ErrorClass::Timeout),
        failed(1, ErrorClass::Http429),
        failed(1, ErrorClass::Cancelled),
        failed(1, ErrorClass::Client),
    ];
    records[0].inputs = Some(4);
    records[0].answer_valid = Some(true);
    records[1].answer_valid = Some(false);
    records[2].prompt_tokens = None;
    let log = log(records);
    let scope = &compute(&log, Some(&slo)).phases[1];
    let completed = log
        .records
        .iter()
        .filter(|r| !matches!(r.error, Some(ErrorClass::Cancelled | ErrorClass::Client)));
    let mut checked = 0;
    for metric in Metric::all() {
        let good = |r: &RequestRecord| meets(&slo, r);
        let expected = match metric.def().source {
            Source::Share { among, counts, .. } => {
                let of: Vec<_> = completed.clone().filter(|r| among(r)).collect();
                let n = of.iter().filter(|r| counts(r, good(r))).count();
                n as f64 / of.len() as f64
            }
            Source::PerSecond { amount, .. } => {
                completed.clone().map(|r| amount(r, good(r))).sum::<f64>() / scope.wall_s
            }
            Source::Distribution { .. }
            | Source::Aggregate(_)
            | Source::Sessions { .. }
            | Source::Server(_)
            | Source::Search => continue,
        };
        let read = scope.value(metric, None);
        assert!(close(read, expected), "{metric}: {read:?} ≠ {expected}");
        assert!(
            expected > 0.0,
            "{metric}: the log should give it a value to check"
        );
        checked += 1;
    }
    // Error, throttled, timeout and goodput ratios, five throughputs, goodput, invalid JSON.
    assert!(checked >= 11, "{checked}");
}
