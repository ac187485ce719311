//! The plan's `server` block: llmload starts the server itself, waits until it is ready, runs
//! the plan against it, and stops it — here with `llmload sim` as the server (a real process on
//! a loopback port; tests/real_engine.rs does the same with llama.cpp's server). Each way it can
//! go wrong is a row: a server that dies mid-run, a command that does not exist, a readiness
//! timeout, a port in use; and nothing is ever left running.

mod common;

use std::time::{Duration, Instant};

use common::*;

const SIM: &str = env!("CARGO_BIN_EXE_llmload");

/// A plan whose server block is `server`, sending 10 req/s for `duration`.
fn plan(server: &str, duration: &str) -> String {
    format!(
        "plan \"managed\" {{ seed 4 }}\n\
         server {{ {server} }}\n\
         target \"http://127.0.0.1:{{port}}\" {{ model \"llmload-sim\"; timeout \"5s\" }}\n\
         workload {{ input 32; output 8 }}\n\
         phase \"steady\" {{ rate 10; duration \"{duration}\" }}\n\
         sla {{ ttft max < \"2s\" }}\n"
    )
}

fn server_json(run: &Run) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(run.out().join("server.json")).unwrap()).unwrap()
}

/// Nothing of the server's process group is still running.
fn assert_left_nothing(server: &serde_json::Value) {
    let pid = server["pid"].as_u64().expect("the server's pid") as u32;
    assert_eq!(processes_in_group(pid), Vec::<u32>::new(), "left running");
}

#[test]
fn a_plan_starts_its_server_runs_against_it_and_stops_it() {
    let _serial = common::serial();
    let run = run_plan(
        &plan(
            &format!(
                "command \"{SIM}\" \"sim\" \"--port\" \"{{port}}\" \"--ttft\" \"20ms\" \"--api-key-env\" \"X\" \"--api-key\" \"sk-never-shown-123456\"; \
                 ready \"/v1/models\" timeout=\"30s\"; stop-grace \"5s\""
            ),
            "1s",
        ),
        &["--allow-server"],
    );
    // `llmload sim` has no --api-key: it refuses to start. That is the secret-masking case;
    // the run itself is the next one.
    assert_eq!(run.code(), 3, "{}", run.stderr());
    assert!(!run.stderr().contains("sk-never-shown"), "{}", run.stderr());
    let failed = server_json(&run);
    assert!(
        failed["command"]
            .as_str()
            .unwrap()
            .contains("--api-key [redacted]"),
        "{failed}"
    );
    assert!(!std::fs::read_to_string(run.out().join("server.json"))
        .unwrap()
        .contains("sk-never-shown"));
    assert_left_nothing(&failed);

    let run = run_plan(
        &plan(
            &format!(
                "command \"{SIM}\" \"sim\" \"--port\" \"{{port}}\" \"--ttft\" \"20ms\"; \
                 ready \"/v1/models\" timeout=\"30s\"; stop-grace \"5s\""
            ),
            "2s",
        ),
        &["--allow-server"],
    );
    assert_eq!(run.code(), 0, "{}", run.stderr());
    let summary = run.summary();
    let server = &summary["launched_server"];
    assert!(server["ready_seconds"].as_f64().unwrap() > 0.0, "{server}");
    assert!(
        server["exit"]
            .as_str()
            .unwrap()
            .starts_with("stopped with SIGTERM"),
        "{server}"
    );
    assert!(server["cpu_seconds"].as_f64().is_some(), "{server}");
    assert_eq!(server["died"], serde_json::Value::Null);
    assert!(
        server["version"]
            .as_str()
            .unwrap()
            .starts_with("llmload-sim"),
        "{server}"
    );
    // The header keeps the command line as written: two runs compare by it, whatever port.
    let header = &summary["context"]["server"];
    assert!(
        header["command"]
            .as_str()
            .unwrap()
            .contains("--port {port}"),
        "{header}"
    );
    assert!(summary["context"]["target"]
        .as_str()
        .unwrap()
        .contains(&format!(":{}", server["port"])));
    assert!(summary["overall"]["requests"]["ok"].as_u64().unwrap() > 5);
    let report = std::fs::read_to_string(run.out().join("report.md")).unwrap();
    assert!(report.contains("| Server started by llmload |"), "{report}");
    assert!(report.contains("Server load (this machine, not the client's)"));
    assert!(run.out().join("server.log").is_file());
    assert_left_nothing(server);
    // `llmload report DIR` rebuilds the same server section from server.json.
    let again = llmload().arg("report").arg(run.out()).output().unwrap();
    assert!(again.status.success());
    let rebuilt: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run.out().join("summary.json")).unwrap())
            .unwrap();
    assert_eq!(rebuilt["launched_server"], *server);
}

#[test]
fn a_server_that_dies_mid_run_ends_it_as_not_carried_out_with_its_last_lines() {
    let _serial = common::serial();
    // The server dies a second into a four-second run, saying why first.
    let run = run_plan(
        &plan(
            &format!(
                "shell \"'{SIM}' sim --port {{port}} --ttft 20ms & sleep 1; echo 'fatal: CUDA error: out of memory'; kill -9 $!; exit 9\"; \
                 ready \"/v1/models\" timeout=\"30s\"; stop-grace \"2s\""
            ),
            "4s",
        ),
        &["--allow-server"],
    );
    assert_eq!(run.code(), 3, "{}", run.stderr());
    let summary = run.summary();
    assert_eq!(summary["verdict"]["status"], "not_carried_out");
    let reason = summary["verdict"]["reasons"][0].as_str().unwrap();
    assert!(
        reason.contains("exited during the run (exit status 9)")
            && reason.contains("fatal: CUDA error: out of memory"),
        "{reason}"
    );
    assert!(
        run.stderr().contains("exited during the run"),
        "{}",
        run.stderr()
    );
    // Every output says the same; the report quotes the log.
    let report = std::fs::read_to_string(run.out().join("report.md")).unwrap();
    assert!(
        report.contains("## The server exited during the run"),
        "{report}"
    );
    assert!(
        report.contains("- `fatal: CUDA error: out of memory`"),
        "{report}"
    );
    let html = std::fs::read_to_string(run.out().join("report.html")).unwrap();
    assert!(html.contains("NOT CARRIED OUT"));
    assert!(html.contains("fatal: CUDA error: out of memory"));
    // It ended early: the records stop about when the server died, not after four seconds.
    let sent = summary["overall"]["requests"]["sent"].as_u64().unwrap();
    assert!(sent < 30, "{sent} requests sent after the server died");
    assert_left_nothing(&summary["launched_server"]);
}

#[test]
fn a_server_that_stops_answering_mid_run_ends_it_as_not_carried_out() {
    let _serial = common::serial();
    // A second in, the server and its shell are stopped (SIGSTOP): they exist, and answer
    // nothing. Silence for `hang-after` ends the run; the timeouts its requests would reach
    // (5 s) never come.
    let started = Instant::now();
    let run = run_plan(
        &plan(
            &format!(
                "shell \"'{SIM}' sim --port {{port}} --ttft 20ms & sleep 1; echo 'watchdog: scheduler deadlocked'; kill -STOP $! $$\"; \
                 ready \"/v1/models\" timeout=\"30s\"; stop-grace \"5s\"; hang-after \"2s\""
            ),
            "30s",
        ),
        &["--allow-server"],
    );
    assert_eq!(run.code(), 3, "{}", run.stderr());
    // Ready, a second of load, two of silence, the stop (SIGCONT lets the SIGTERM in at once):
    // about 4 s, far from the phase's 30 s (the margin is for a loaded machine: the bound was
    // once 8 s against an 8 s phase, and a busy CI machine took 8.2 s).
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "{:?}",
        started.elapsed()
    );
    let summary = run.summary();
    assert_eq!(summary["verdict"]["status"], "not_carried_out");
    let reason = summary["verdict"]["reasons"][0].as_str().unwrap();
    assert!(
        reason.contains("stopped answering during the run (it answered nothing for 2s")
            && reason.contains("its process is stopped by a signal (state T)")
            && reason.contains("watchdog: scheduler deadlocked"),
        "{reason}"
    );
    let launched = &summary["launched_server"];
    assert!(
        launched["hung"].as_str().unwrap().contains("state T"),
        "{launched}"
    );
    assert!(launched["died"].is_null(), "{launched}");
    assert!(
        launched["exit"]
            .as_str()
            .unwrap()
            .starts_with("stopped with SIGTERM"),
        "{launched}"
    );
    assert!(
        run.stdout().contains("STOPPED ANSWERING DURING THE RUN"),
        "{}",
        run.stdout()
    );
    assert!(
        run.stderr().contains("starting llmload on port"),
        "{}",
        run.stderr()
    );
    let report = std::fs::read_to_string(run.out().join("report.md")).unwrap();
    assert!(
        report.contains("## The server stopped answering during the run"),
        "{report}"
    );
    assert!(
        report.contains("- `watchdog: scheduler deadlocked`"),
        "{report}"
    );
    // Its requests were cancelled when it was taken as hung, none timed out.
    let records = read_records(&run.out());
    assert!(records.iter().all(|r| r["error"] != "timeout"));
    assert!(records.iter().any(|r| r["error"] == "cancelled"));
    assert_left_nothing(launched);
}

#[test]
fn a_slow_server_is_slow_not_hung() {
    let _serial = common::serial();
    // Three seconds to the first token, one of allowed silence: the run hears nothing from the
    // requests for three seconds, but the server answers its probes, so it is judged (and
    // fails its SLA) as the slow server it is.
    let run = run_plan(
        &plan(
            &format!(
                "command \"{SIM}\" \"sim\" \"--port\" \"{{port}}\" \"--ttft\" \"3s\"; \
                 ready \"/v1/models\" timeout=\"30s\"; hang-after \"1s\""
            ),
            "1s",
        ),
        &["--allow-server"],
    );
    assert_eq!(run.code(), 1, "{}", run.stderr());
    let summary = run.summary();
    assert_eq!(summary["verdict"]["status"], "fail");
    assert!(summary["launched_server"]["hung"].is_null());
    assert_left_nothing(&summary["launched_server"]);
}

#[test]
fn a_server_that_takes_every_core_is_named_when_the_client_waits_for_them() {
    let _serial = common::serial();
    // The server's shell keeps every core of the machine busy beside it: the client's own CPU
    // is idle, the machine's is not.
    let run = run_plan(
        &plan(
            &format!(
                "shell \"for i in $(seq $(nproc)); do (while :; do :; done) & done; exec '{SIM}' sim --port {{port}} --ttft 20ms\"; \
                 ready \"/v1/models\" timeout=\"30s\"; stop-grace \"2s\""
            ),
            "3s",
        ),
        &["--allow-server"],
    );
    let summary = run.summary();
    // Carried out: judged, or not decided because the client waited for its cores.
    assert_ne!(
        summary["verdict"]["status"],
        "not_carried_out",
        "{}",
        run.stderr()
    );
    let warning = warning_of(&summary, "machine-cpu")
        .and_then(|w| w["message"].as_str())
        .unwrap_or_else(|| panic!("no machine-cpu warning: {}", summary["warnings"]));
    assert!(
        warning.contains("with the server llmload started running beside the client"),
        "{warning}"
    );
    assert!(warning_of(&summary, "client-cpu").is_none());
    let machine = &phase(&summary, "steady")["client"]["machine"];
    assert!(machine["utilization"].as_f64().unwrap() > 0.9, "{machine}");
    assert_left_nothing(&summary["launched_server"]);
}

/// Each way a server cannot serve the run: exit 3 within its time, saying why, nothing left.
#[test]
fn a_server_that_cannot_serve_the_run_is_named_within_its_time() {
    let _serial = common::serial();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let taken_port = taken.local_addr().unwrap().port();
    // (what, the server block, the target URL's port, what the error says, within seconds)
    let cases: [(&str, String, String, String, u64); 4] = [
        (
            "a command that does not exist",
            "command \"no-such-llama-server\" \"--port\" \"{port}\"".into(),
            "{port}".into(),
            "no-such-llama-server was not found on PATH".into(),
            5,
        ),
        (
            "a readiness timeout",
            "shell \"echo loading the weights; exec sleep 60\"; ready \"/health\" timeout=\"1s\"; stop-grace \"2s\""
                .into(),
            "{port}".into(),
            "was not ready within 1s (/health last said: connection refused)".into(),
            // The timeout, then SIGTERM (sleep stops at once).
            6,
        ),
        (
            "a server that exits before it is ready",
            "shell \"echo 'error: model file not found' >&2; exit 1\"".into(),
            "{port}".into(),
            "exited before it was ready (exit status 1)".into(),
            5,
        ),
        (
            "a port in use",
            format!("command \"{SIM}\" \"sim\" \"--port\" \"{{port}}\"; port {taken_port}"),
            taken_port.to_string(),
            format!("port {taken_port} is in use"),
            5,
        ),
    ];
    for (case, server, target_port, says, within_s) in cases {
        let started = Instant::now();
        let text = plan(&server, "1s").replace(
            "http://127.0.0.1:{port}",
            &format!("http://127.0.0.1:{target_port}"),
        );
        let run = run_plan(&text, &["--allow-server"]);
        let took = started.elapsed();
        assert_eq!(run.code(), 3, "{case}: {}", run.stderr());
        assert!(run.stderr().contains(&says), "{case}: {}", run.stderr());
        assert!(
            took < Duration::from_secs(within_s + 10),
            "{case}: took {took:?}"
        );
        if case == "a readiness timeout" || case == "a server that exits before it is ready" {
            let quoted = if case == "a readiness timeout" {
                "| loading the weights"
            } else {
                "| error: model file not found"
            };
            assert!(run.stderr().contains(quoted), "{case}: {}", run.stderr());
            let server = server_json(&run);
            assert!(server["failed"].as_str().is_some(), "{server}");
            assert_left_nothing(&server);
        }
        assert!(
            !run.out().join("records.jsonl").exists(),
            "{case}: nothing was sent"
        );
    }
    drop(taken);
}

/// A sweep of the server's settings: each configuration started fresh with its own full
/// report, judged together, the best named; a configuration whose server cannot start is the
/// sweep's finding (not carried out), the others still run.
#[test]
fn a_server_sweep_runs_the_plan_against_each_configuration() {
    let _serial = common::serial();
    let dir = tempfile::tempdir().unwrap();
    let sweep = |values: &str| {
        plan(
            &format!(
                "command \"{SIM}\" \"sim\" \"--port\" \"{{port}}\" \"--ttft\" \"5ms\"; ready \"/v1/models\" timeout=\"30s\"; stop-grace \"5s\""
            ),
            "2s",
        )
        .replace("sla {", &format!("server-sweep {{ arg \"--ttft\" {values} }}\nsla {{"))
        .replace("ttft max < \"2s\"", "ttft max < \"100ms\"")
    };
    let path = write_plan(dir.path(), &sweep("\"20ms\" \"200ms\""));
    let out = dir.path().join("out");
    let junit = out.join("junit.xml");
    let bmf = dir.path().join("bmf.json");
    let vllm = dir.path().join("vllm.jsonl");
    let ran = run_file(
        &path,
        &out,
        &[
            "--allow-server",
            "--junit",
            junit.to_str().unwrap(),
            "--export",
            "bmf",
            bmf.to_str().unwrap(),
            "--export",
            "vllm-bench",
            vllm.to_str().unwrap(),
        ],
        &[],
    );
    let stderr = String::from_utf8_lossy(&ran.stderr);
    assert_eq!(ran.status.code(), Some(1), "{stderr}");
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("server-sweep.json")).unwrap())
            .unwrap();
    let configurations = summary["configurations"].as_array().unwrap();
    let names: Vec<&str> = configurations
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["--ttft 20ms", "--ttft 200ms"]);
    let statuses: Vec<&str> = configurations
        .iter()
        .map(|c| c["status"].as_str().unwrap())
        .collect();
    assert_eq!(statuses, ["pass", "fail"]);
    assert_eq!(summary["best"], "--ttft 20ms");
    assert_eq!(summary["best_by"], "headroom");
    assert_eq!(summary["verdict"]["status"], "fail");
    assert!(summary["verdict"]["reasons"][0]
        .as_str()
        .unwrap()
        .contains("\"--ttft 200ms\""));
    // Each configuration is a whole run: its report, and its server started with its value.
    for (slug, value) in [("ttft-20ms", "20ms"), ("ttft-200ms", "200ms")] {
        let run = out.join(slug);
        assert!(run.join("report.md").is_file(), "{slug}");
        let server: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(run.join("server.json")).unwrap())
                .unwrap();
        assert!(
            server["command"]
                .as_str()
                .unwrap()
                .ends_with(&format!("--ttft {value}")),
            "{server}"
        );
        assert_left_nothing(&server);
        let ttft_p99 = read_summary(&run)["overall"]["metrics"]["ttft_ms"]["p99"]
            .as_f64()
            .unwrap();
        let asked: f64 = value.trim_end_matches("ms").parse().unwrap();
        assert!(
            ttft_p99 >= asked && ttft_p99 < asked + 50.0,
            "{slug}: {ttft_p99}"
        );
    }
    // One verdict everywhere: JUnit fails as the exit code does, a suite per configuration.
    let xml = std::fs::read_to_string(&junit).unwrap();
    assert!(
        xml.contains("<testsuites name=\"llmload\" tests=\"2\" failures=\"1\" errors=\"0\""),
        "{xml}"
    );
    assert!(
        xml.contains("name=\"llmload.managed[--ttft 200ms]\""),
        "{xml}"
    );
    let md = std::fs::read_to_string(out.join("server-sweep.md")).unwrap();
    assert!(
        md.contains("**Verdict: FAIL**") && md.contains("`--ttft 20ms` ⭐"),
        "{md}"
    );
    let html = std::fs::read_to_string(out.join("server-sweep.html")).unwrap();
    assert!(html.contains("<svg") && html.contains("FAIL"));
    // vllm-bench: a result per configuration, one per line as vLLM's --append-result keeps them.
    let results: Vec<serde_json::Value> = std::fs::read_to_string(&vllm)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let labels: Vec<&str> = results
        .iter()
        .map(|r| r["label"].as_str().unwrap())
        .collect();
    assert_eq!(labels, ["--ttft 20ms", "--ttft 200ms"]);
    assert!(results[1]["median_ttft_ms"].as_f64().unwrap() >= 200.0);
    let bmf: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&bmf).unwrap()).unwrap();
    let benchmarks: Vec<&String> = bmf.as_object().unwrap().keys().collect();
    assert_eq!(
        benchmarks,
        [
            "managed (llmload-sim) [--ttft 200ms]",
            "managed (llmload-sim) [--ttft 20ms]"
        ]
    );

    // `compare` between two runs of the sweep: configuration by configuration.
    let again = dir.path().join("again");
    run_file(&path, &again, &["--allow-server"], &[]);
    let compare_junit = dir.path().join("compare.xml");
    let compared = llmload()
        .arg("compare")
        .arg(&out)
        .arg(&again)
        .arg("--junit")
        .arg(&compare_junit)
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&compared.stdout);
    assert!(
        matches!(compared.status.code(), Some(0 | 1 | 3)),
        "{table}{}",
        String::from_utf8_lossy(&compared.stderr)
    );
    assert!(
        table.contains("## `--ttft 20ms`") && table.contains("## `--ttft 200ms`"),
        "{table}"
    );
    let xml = std::fs::read_to_string(&compare_junit).unwrap();
    assert_eq!(xml.matches("<testsuite ").count(), 2, "{xml}");
    // A sweep is compared with a sweep only.
    let mixed = llmload()
        .arg("compare")
        .arg(out.join("ttft-20ms"))
        .arg(&again)
        .output()
        .unwrap();
    assert_eq!(mixed.status.code(), Some(2));

    // A configuration whose server cannot start: the others still run, the sweep is not
    // carried out, and says which and why. The directory of the sweep before is reused.
    std::fs::write(&path, sweep("\"20ms\" \"not-a-duration\"")).unwrap();
    let ran = run_file(&path, &out, &["--allow-server"], &[]);
    let stderr = String::from_utf8_lossy(&ran.stderr);
    assert_eq!(ran.status.code(), Some(3), "{stderr}");
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("server-sweep.json")).unwrap())
            .unwrap();
    assert_eq!(summary["configurations"][0]["status"], "pass");
    assert_eq!(summary["configurations"][1]["status"], "not_carried_out");
    let reason = summary["verdict"]["reasons"][0].as_str().unwrap();
    assert!(
        reason.contains("\"--ttft not-a-duration\"")
            && reason.contains("exited before it was ready"),
        "{reason}"
    );
    assert_eq!(summary["best"], "--ttft 20ms");
}

fn read_summary(dir: &std::path::Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join("summary.json")).unwrap()).unwrap()
}

/// A plan's command runs only when the caller says so: without `--allow-server` the run is
/// refused before anything is started or written, showing the whole command (not its first
/// word) with its secrets masked; `check` and `plan` show the same line; `--allow-server` or
/// `LLMLOAD_ALLOW_SERVER=1` runs it.
#[test]
fn a_plans_command_runs_only_when_allowed_and_is_shown_whole() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");
    let text = plan(
        &format!(
            "shell \"touch '{}'; echo token $HF_TOKEN key $API_KEY; exec '{SIM}' sim --port {{port}} --ttft 20ms\"; \
             env HF_TOKEN=\"hf-secret-token-67890\" API_KEY=\"sk-hidden-value-12345\"; ready \"/v1/models\" timeout=\"30s\"",
            marker.display()
        ),
        "1s",
    );
    let path = write_plan(dir.path(), &text);
    let whole = |said: &str| {
        assert!(said.contains("touch"), "{said}");
        assert!(said.contains("exec"), "{said}");
        assert!(said.contains("--port {port}"), "{said}");
        assert!(said.contains("HF_TOKEN="), "{said}");
        assert!(!said.contains("sk-hidden-value-12345"), "{said}");
        assert!(!said.contains("hf-secret-token-67890"), "{said}");
    };

    let out = dir.path().join("refused");
    let refused = run_file(&path, &out, &[], &[]);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--allow-server"), "{stderr}");
    assert!(stderr.contains("starts a process"), "{stderr}");
    whole(&stderr);
    assert!(!marker.exists(), "the command ran without --allow-server");
    assert!(!out.exists(), "a refused run wrote {}", out.display());

    let checked = llmload().arg("check").arg(&path).output().unwrap();
    let said = String::from_utf8_lossy(&checked.stdout);
    assert_eq!(checked.status.code(), Some(0), "{said}");
    assert!(said.contains("starts a process on this machine"), "{said}");
    whole(&said);
    let planned = llmload().arg("plan").arg(&path).output().unwrap();
    whole(&String::from_utf8_lossy(&planned.stdout));
    assert!(!marker.exists(), "check or plan ran the command");

    // The setting a CI job sets deliberately runs it, and the terminal shows it whole first.
    let allowed = run_file(
        &path,
        &dir.path().join("allowed"),
        &[],
        &[("LLMLOAD_ALLOW_SERVER", std::ffi::OsStr::new("1"))],
    );
    assert!(
        marker.exists(),
        "{}",
        String::from_utf8_lossy(&allowed.stderr)
    );
    let stderr = String::from_utf8_lossy(&allowed.stderr);
    // A shell line's program is what it execs, not its first word.
    assert!(stderr.contains("starting llmload on port"), "{stderr}");
    whole(&stderr);
    // What the server prints of its secrets is kept of none of the run's files.
    let out = dir.path().join("allowed");
    let log = std::fs::read_to_string(out.join("server.log")).unwrap();
    assert!(log.contains("token [redacted] key [redacted]"), "{log}");
    for file in ["server.log", "server.json", "summary.json", "report.md"] {
        let text = std::fs::read_to_string(out.join(file)).unwrap();
        assert!(!text.contains("hf-secret-token-67890"), "{file}: {text}");
        assert!(!text.contains("sk-hidden-value-12345"), "{file}: {text}");
    }
}

/// A launcher that starts the engine in the background and exits: the engine lives on in the
/// launcher's process group, and the stop after the run reaches it there.
#[test]
fn a_launchers_backgrounded_engine_is_stopped_with_the_run() {
    let _serial = common::serial();
    let run = run_plan(
        &plan(
            &format!(
                "shell \"'{SIM}' sim --port {{port}} --ttft 20ms & sleep 1; exit 0\"; \
                 ready \"/v1/models\" timeout=\"30s\"; stop-grace \"10s\""
            ),
            "3s",
        ),
        &["--allow-server"],
    );
    let summary = run.summary();
    let server = &summary["launched_server"];
    let exit = server["exit"].as_str().unwrap();
    assert!(
        exit.starts_with("it had exited: exit status 0; what it left running in its process group was stopped with SIGTERM"),
        "{exit}"
    );
    assert_left_nothing(server);
    assert!(!run.out().join(SERVER_PID).exists(), "the pid file stays");
}

const SERVER_PID: &str = "server.pid";

/// `kill -9` of llmload mid-run: its watchdog stops the server's whole group.
#[test]
fn a_killed_llmload_leaves_no_server_running() {
    let _serial = common::serial();
    let dir = tempfile::tempdir().unwrap();
    let text = plan(
        &format!(
            "shell \"'{SIM}' sim --port {{port}} --ttft 20ms & exec '{SIM}' sim --port 0 --ttft 20ms\"; \
             ready \"/v1/models\" timeout=\"30s\"; stop-grace \"2s\""
        ),
        "60s",
    );
    let path = write_plan(dir.path(), &text);
    let out = dir.path().join("out");
    let mut child = llmload()
        .args(["run", "--quiet", "--allow-server", "--out"])
        .arg(&out)
        .arg(&path)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let pid_file = out.join(SERVER_PID);
    let started = Instant::now();
    while !out.join("records.jsonl").exists() && started.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(50));
    }
    let kept: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&pid_file).unwrap()).unwrap();
    let group = kept["group"].as_u64().unwrap() as u32;
    assert_eq!(
        processes_in_group(group).len(),
        2,
        "the shell's two servers"
    );
    child.kill().unwrap();
    child.wait().unwrap();
    let killed = Instant::now();
    while !processes_in_group(group).is_empty() && killed.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(processes_in_group(group), Vec::<u32>::new(), "left running");
}

/// A group left by an llmload that is gone (its watchdog killed too) is stopped by the next
/// run that starts a server, which says so; one whose llmload lives is left alone.
#[test]
fn the_next_run_stops_a_server_a_dead_llmload_left() {
    let _serial = common::serial();
    let spawn_group = || {
        use std::os::unix::process::CommandExt;
        std::process::Command::new("sleep")
            .arg("60")
            .process_group(0)
            .spawn()
            .unwrap()
    };
    let mut orphan = spawn_group();
    let mut kept = spawn_group();
    let mut gone = std::process::Command::new("true").spawn().unwrap();
    gone.wait().unwrap();
    // SAFETY: getuid(2) cannot fail.
    let registry = std::env::temp_dir()
        .join(format!("llmload-{}", unsafe { libc::getuid() }))
        .join("servers");
    std::fs::create_dir_all(&registry).unwrap();
    let entry = |group: u32, llmload: u32| {
        serde_json::json!({
            "group": group, "group_started": null, "llmload_pid": llmload,
            "llmload_started": null, "command": "sleep 60", "run_dir": "/nonexistent",
        })
        .to_string()
    };
    let orphan_entry = registry.join(format!("{}.json", orphan.id()));
    std::fs::write(&orphan_entry, entry(orphan.id(), gone.id())).unwrap();
    let kept_entry = registry.join(format!("{}.json", kept.id()));
    std::fs::write(&kept_entry, entry(kept.id(), std::process::id())).unwrap();

    let run = run_plan(
        &plan(
            &format!(
                "command \"{SIM}\" \"sim\" \"--port\" \"{{port}}\" \"--ttft\" \"20ms\"; \
                 ready \"/v1/models\" timeout=\"30s\"; stop-grace \"1s\""
            ),
            "1s",
        ),
        &["--allow-server"],
    );
    let stderr = run.stderr();
    let said = format!(
        "stopped a server an earlier llmload (pid {}, gone)",
        gone.id()
    );
    assert!(stderr.contains(&said), "{stderr}");
    assert!(
        orphan.try_wait().unwrap().is_some(),
        "the orphan still runs"
    );
    assert!(!orphan_entry.exists());
    assert!(
        kept.try_wait().unwrap().is_none(),
        "a live llmload's server was stopped"
    );
    let _ = kept.kill();
    let _ = kept.wait();
    let _ = std::fs::remove_file(kept_entry);
}

/// A sweep whose setting is the GPUs (`gpus=#true`, as tensor parallelism is) prices each
/// configuration by its own count of them, and names the cheapest that passed: at one load,
/// twice the GPUs is twice the price of a good token.
#[test]
fn a_server_sweep_prices_each_configuration_by_its_gpus_and_names_the_cheapest() {
    let _serial = common::serial();
    let dir = tempfile::tempdir().unwrap();
    let text = plan(
        &format!(
            "command \"{SIM}\" \"sim\" \"--port\" \"{{port}}\" \"--ttft\" \"5ms\"; ready \"/v1/models\" timeout=\"30s\"; stop-grace \"5s\""
        ),
        "2s",
    )
    .replace(
        "sla {",
        "server-sweep { arg \"--seed\" 2 1 gpus=#true }\ncost { gpu-hour \"$2.00\" }\nslo ttft=\"1s\"\nsla {",
    );
    let path = write_plan(dir.path(), &text);
    let out = dir.path().join("out");
    let ran = run_file(&path, &out, &["--allow-server"], &[]);
    let stderr = String::from_utf8_lossy(&ran.stderr);
    assert_eq!(ran.status.code(), Some(0), "{stderr}");
    let good_price = |slug: &str| {
        let summary = read_summary(&out.join(slug));
        let cost = summary["overall"]["cost"].clone();
        (
            cost["basis"].as_str().unwrap().to_string(),
            cost["per_million_goodput_tokens"].as_f64().unwrap(),
        )
    };
    let (two_basis, two) = good_price("seed-2");
    let (one_basis, one) = good_price("seed-1");
    assert_eq!(two_basis, "2 GPUs at $2 a GPU-hour");
    assert_eq!(one_basis, "1 GPU at $2 a GPU-hour");
    // The same load on both: the price of a good token follows the GPUs (within the runs'
    // wall times, which differ by their last responses).
    assert!((two / one - 2.0).abs() < 0.1, "{two} against {one}");
    let sweep: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("server-sweep.json")).unwrap())
            .unwrap();
    let cheapest = &sweep["cheapest"];
    assert_eq!(cheapest["name"], "--seed 1", "{sweep}");
    assert_eq!(cheapest["by"], "cost per million goodput tokens");
    assert_eq!(cheapest["dollars"].as_f64(), Some(one));
    let md = std::fs::read_to_string(out.join("server-sweep.md")).unwrap();
    assert!(
        md.contains("**Cheapest under the objectives: `--seed 1`**"),
        "{md}"
    );
}
