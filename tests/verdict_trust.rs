//! A verdict that knows what it does not know (issue 42): a percentile too few requests cannot
//! decide, a target that stopped answering, a client that stalled: each is said as such, never
//! as a statement about the server.

mod common;

use std::time::{Duration, Instant};

use common::{run_plan, serial, sim_plan, SimProcess};

/// A run of 40 requests to a fast simulator judged on `sla`, with its JUnit file.
fn forty_requests(sla: &str) -> (common::Run, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let junit = dir.path().join("junit.xml");
    let plan = sim_plan(
        "ttft \"5ms\"; itl \"1ms\"",
        "input 32; output 4",
        "phase \"steady\" { rate 40; requests 40 }",
        sla,
    );
    let run = common::run_in(dir, &plan, &["--junit", junit.to_str().unwrap()]);
    (run, junit)
}

#[test]
fn a_percentile_too_few_requests_cannot_decide_is_not_decided_with_the_count_that_would() {
    let _serial = serial();
    // 40 requests: their p99.9 is their largest, and no 40 values bound it from above.
    let (run, junit) = forty_requests("ttft p99.9 < \"45ms\"\nerror-rate < \"1%\"");
    // JUnit fails as the exit code does: the undecided assertion is an error case.
    let xml = std::fs::read_to_string(&junit).unwrap();
    assert!(xml.contains("errors=\"1\""), "{xml}");
    assert!(
        xml.contains("<error message=\"not decided: its p99.9"),
        "{xml}"
    );
    common::validate_junit(&junit);
    assert_eq!(run.code(), 3, "{}\n{}", run.stdout(), run.stderr());
    let summary = run.summary();
    assert_eq!(summary["verdict"]["status"], "not_decided");
    assert_eq!(summary["verdict"]["exit_code"], 3);
    let ttft = &summary["verdicts"][0];
    assert_eq!(ttft["outcome"], "not_decided", "{ttft}");
    let why = ttft["undecided"].as_str().unwrap();
    assert!(
        why.contains("rests on 40 requests")
            && why.contains("about 2,995 requests would decide it"),
        "{why}"
    );
    assert!(ttft["interval"]["high"].is_null(), "{ttft}");
    assert_eq!(summary["verdicts"][1]["outcome"], "pass");
    let stdout = run.stdout();
    assert!(
        stdout.contains("NOT DECIDED: this run cannot decide 1 judgement: "),
        "{stdout}"
    );
    let report = std::fs::read_to_string(run.out().join("report.md")).unwrap();
    assert!(report.contains("**Verdict: NOT DECIDED**"), "{report}");
    assert!(report.contains("⚪ not decided"), "{report}");

    // The same plan, told that what its data cannot decide passes: shown, not gating; JUnit
    // skips it.
    let (run, junit) = forty_requests("undecided \"pass\"\nttft p99.9 < \"45ms\"");
    assert_eq!(run.code(), 0, "{}", run.stdout());
    let summary = run.summary();
    assert_eq!(summary["verdicts"][0]["outcome"], "not_decided");
    assert_eq!(summary["verdict"]["status"], "pass");
    let xml = std::fs::read_to_string(&junit).unwrap();
    assert!(
        xml.contains("<skipped message=\"not decided: its p99.9"),
        "{xml}"
    );
    common::validate_junit(&junit);
}

#[test]
fn enough_requests_decide_a_p99_either_way() {
    let _serial = serial();
    // 400 requests of a 5 ms TTFT: the p99's upper bound is far below 200 ms, its lower bound
    // far above 1 ms.
    let run = run_plan(
        &sim_plan(
            "ttft \"5ms\"; itl \"1ms\"",
            "input 32; output 4",
            "phase \"steady\" { rate 200; requests 400 }",
            "ttft p99 < \"200ms\"\nttft p99 < \"1ms\" phase=\"steady\"",
        ),
        &[],
    );
    assert_eq!(run.code(), 1, "{}", run.stdout());
    let summary = run.summary();
    assert_eq!(summary["verdicts"][0]["outcome"], "pass");
    assert_eq!(summary["verdicts"][1]["outcome"], "fail");
    let interval = &summary["verdicts"][0]["interval"];
    assert!(interval["low"].as_f64().unwrap() <= interval["high"].as_f64().unwrap());
    assert_eq!(interval["confidence"], 0.95);
}

#[test]
fn an_external_target_killed_mid_run_ends_it_as_not_carried_out_within_the_window() {
    let _serial = serial();
    let sim = SimProcess::start_with(&["--ttft", "5ms", "--itl", "1ms"]);
    let url = sim.url.clone();
    // The server is killed 3 s into a 40 s phase; its port then refuses every request.
    let killer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(3));
        drop(sim);
    });
    let started = Instant::now();
    let run = run_plan(
        &format!(
            "plan \"t\" {{ seed 1 }}\ntarget \"{url}\" {{ model \"llmload-sim\"; unreachable-after \"2s\"; timeout \"5s\" }}\n\
             workload {{ input 32; output 4 }}\nphase \"steady\" {{ rate 20; duration \"40s\" }}\n\
             sla {{ error-rate < \"1%\" }}\n"
        ),
        &[],
    );
    killer.join().unwrap();
    assert_eq!(run.code(), 3, "{}\n{}", run.stdout(), run.stderr());
    // Killed at 3 s, two seconds of refusals: far from the phase's 40 s (the margin is for a
    // loaded machine).
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
    let summary = run.summary();
    assert_eq!(summary["verdict"]["status"], "not_carried_out");
    let reason = summary["verdict"]["reasons"][0].as_str().unwrap();
    assert!(
        reason.contains("the target stopped answering") && reason.contains("connect "),
        "{reason}"
    );
    // The terminal says what the requests met, with counts.
    let stdout = run.stdout();
    assert!(stdout.contains("errors: connect "), "{stdout}");
    // No request is lost: every one sent is recorded.
    let sent = summary["overall"]["requests"]["sent"].as_u64().unwrap();
    assert_eq!(run.records().len() as u64, sent);
}

/// A steady phase against a fast external server, with `llmload` itself stopped (SIGSTOP) for
/// 300 ms `stall_at` into it when given; its exit code and summary.
fn steady_run(stall_at: Option<Duration>) -> (i32, serde_json::Value, String) {
    // Answers of 8 tokens 20 ms apart keep ~15 requests in flight at 100/s, so the stop
    // always finds many in flight (at 1 ms apart one or two were, and CI once met none).
    let sim = SimProcess::start_with(&["--ttft", "5ms", "--itl", "20ms"]);
    let dir = tempfile::tempdir().unwrap();
    let plan = common::write_plan(
        dir.path(),
        &format!(
            "plan \"t\" {{ seed 1 }}\ntarget \"{}\" {{ model \"llmload-sim\"; timeout \"10s\" }}\n\
             workload {{ input 32; output 8 }}\nphase \"steady\" {{ rate 100; duration \"6s\" }}\n\
             sla {{ ttft p99 < \"100ms\" }}\n",
            sim.url
        ),
    );
    let out = dir.path().join("out");
    let child = common::llmload()
        .arg("run")
        .arg(&plan)
        .arg("--out")
        .arg(&out)
        .arg("--quiet")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    if let Some(at) = stall_at {
        let pid = child.id().to_string();
        std::thread::sleep(at);
        let signal = |name: &str| {
            let status = std::process::Command::new("kill")
                .args([name, &pid])
                .status()
                .unwrap();
            assert!(status.success());
        };
        signal("-STOP");
        std::thread::sleep(Duration::from_millis(300));
        signal("-CONT");
    }
    let output = child.wait_with_output().unwrap();
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    (
        output.status.code().unwrap_or(-1),
        summary,
        String::from_utf8_lossy(&output.stdout).into_owned(),
    )
}

#[test]
fn a_stalled_client_is_reported_and_is_not_a_failure_of_the_server() {
    let _serial = serial();
    // The run alone passes: 600 requests of a 5 ms TTFT show its p99 below 100 ms.
    let (code, summary, stdout) = steady_run(None);
    assert_eq!(code, 0, "{stdout}\n{summary}");
    assert_eq!(summary["verdicts"][0]["outcome"], "pass");
    // Stopped for 300 ms three seconds in (the phase starts after a second of preflight and
    // connections at most): the stall is said, and the assertion is not decided, not failed.
    let (code, summary, stdout) = steady_run(Some(Duration::from_millis(3000)));
    assert_eq!(code, 3, "{stdout}\n{summary}");
    assert_eq!(summary["verdict"]["status"], "not_decided", "{summary}");
    let verdict = &summary["verdicts"][0];
    assert_eq!(verdict["outcome"], "not_decided", "{verdict}");
    let why = verdict["undecided"].as_str().unwrap();
    assert!(why.contains("the client stalled"), "{why}");
    let stalls = &summary["phases"][0]["client_stalls"];
    assert!(stalls["worst_ms"].as_f64().unwrap() >= 250.0, "{stalls}");
    assert!(stalls["requests_during"].as_u64().unwrap() > 0, "{stalls}");
    let warned = summary["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .any(|w| w["code"] == "client-stall");
    assert!(warned, "{}", summary["warnings"]);
}

/// `duration "60s" until="decided"`: a phase whose assertions are decided after a few hundred
/// requests ends then, not at its duration; one whose assertion its duration cannot decide
/// runs to its end and says what would decide it.
#[test]
fn a_phase_ends_once_its_assertions_are_decided() {
    let _serial = serial();
    let plan = |duration: &str, sla: &str| {
        sim_plan(
            "ttft \"5ms\"; itl \"1ms\"",
            "input 32; output 4",
            &format!("phase \"steady\" {{ rate 100; duration {duration} }}"),
            sla,
        )
    };
    // p95 below 200 ms: 59 requests show it; 0 errors of 381 show the error rate below 1%.
    let started = Instant::now();
    let run = run_plan(
        &plan(
            "\"60s\" until=\"decided\" min=\"2s\"",
            "ttft p95 < \"200ms\"\nerror-rate < \"1%\"",
        ),
        &[],
    );
    let took = started.elapsed();
    assert_eq!(run.code(), 0, "{}\n{}", run.stdout(), run.stderr());
    let summary = run.summary();
    let phase = &summary["phases"][0];
    let why = phase["ended_early"].as_str().unwrap_or_default();
    assert!(
        why.starts_with("decided: every assertion on phase \"steady\" was decided after"),
        "{phase}"
    );
    let ok = phase["requests"]["ok"].as_u64().unwrap();
    assert!((381..2_000).contains(&ok), "{ok} requests");
    assert!(took < Duration::from_secs(30), "a 60 s phase took {took:?}");
    assert!(
        run.stderr().contains("note: decided: every assertion"),
        "{}",
        run.stderr()
    );
    // p99.9 takes 2,995 requests: 3 s at 100/s cannot decide it; the phase runs its 3 s.
    let run = run_plan(
        &plan(
            "\"3s\" until=\"decided\" min=\"1s\"",
            "ttft p99.9 < \"200ms\"",
        ),
        &[],
    );
    assert_eq!(run.code(), 3, "{}\n{}", run.stdout(), run.stderr());
    let summary = run.summary();
    assert!(summary["phases"][0]["ended_early"].is_null(), "{summary}");
    let why = summary["verdicts"][0]["undecided"].as_str().unwrap();
    assert!(
        why.contains("about 2,995 requests would decide it"),
        "{why}"
    );
}

/// A phase whose first seconds meet a backlog (a burst beside it, not recorded) has its warm-up
/// cut from its steady window: every output shows both, and `sla { window "steady" }` judges
/// on the steady one — the same TTFT objective fails on the whole phase and holds on it.
#[test]
fn a_warm_up_transient_is_cut_and_window_steady_judges_without_it() {
    let _serial = serial();
    let plan = |window: &str| {
        format!(
            "plan \"transient\" {{ seed 3 }}\ntarget \"sim\"\nsim {{ profile \"tiny\" }}\n\
             workload {{ input 64; output 32 }}\n\
             phase \"steady\" {{ rate 10; duration \"20s\" }}\n\
             phase \"spike\" {{ with \"steady\"; at-once 40; record #false }}\n\
             sla {{ {window} ttft p90 < \"300ms\" phase=\"steady\" }}\n"
        )
    };
    let whole = run_plan(&plan(""), &[]);
    assert_eq!(whole.code(), 1, "{}\n{}", whole.stdout(), whole.stderr());
    let summary = whole.summary();
    let window = &summary["steady"]["phases"][0];
    let cut = window["cut_s"].as_f64().unwrap();
    assert!((2.0..=10.0).contains(&cut), "{window}");
    // The window's p90 is the steady requests' (a straggler of the backlog may stay in its p99).
    let p90 = |m: &serde_json::Value| m["metrics"]["ttft_ms"]["p90"].as_f64().unwrap();
    assert!(
        p90(&window["metrics"]) < 100.0 && p90(&summary["phases"][0]) > 300.0,
        "{summary}"
    );
    assert!(
        whole.stdout().contains("  steady, from +"),
        "{}",
        whole.stdout()
    );
    let report = std::fs::read_to_string(whole.out().join("report.md")).unwrap();
    assert!(report.contains("| ↳ steady, from +"), "{report}");
    let steady = run_plan(&plan("window \"steady\";"), &[]);
    assert_eq!(steady.code(), 0, "{}\n{}", steady.stdout(), steady.stderr());
    let judged = &steady.summary()["verdicts"][0];
    assert!(
        judged["phase"]
            .as_str()
            .unwrap()
            .starts_with("steady (from +"),
        "{judged}"
    );
}
