//! Whole runs of the real binary against the embedded simulator over loopback HTTP.

mod common;
use common::*;
use serde_json::Value;

/// A chunk carrying k tokens gives k ITL samples of gap/k, whether k comes from per-chunk usage
/// or from the tokenizer.
#[test]
fn multi_token_chunks_spread_their_gap() {
    for continuous in ["#true", "#false"] {
        let plan = sim_plan(
            "ttft \"20ms\"; itl \"5ms\"; tokens-per-chunk 4",
            "input 32; output 20",
            "phase \"c\" { concurrency 2; requests 6 }",
            "itl p50 < \"1s\"",
        )
        .replace(
            "timeout \"10s\"",
            &format!("timeout \"10s\"; continuous-usage {continuous}"),
        );
        let run = run_plan(&plan, &[]);
        assert_eq!(run.code(), 0, "{}", run.stderr());
        let s = run.summary();
        // Five chunks of 4 tokens: 4 gaps × 4 tokens = 16 samples per request.
        assert_eq!(
            s["overall"]["metrics"]["itl_ms"]["count"],
            6 * 16,
            "continuous {continuous}"
        );
        let itl = stat(&s, "overall", "itl_ms", "p50");
        assert!((itl - 5.0).abs() <= 1.0, "itl p50 {itl}");
        let records = run.records();
        let source = &records[0]["chunk_tokens"];
        // Without per-chunk usage, the final usage total is spread by the tokenizer's counts.
        let expected = if continuous == "#true" {
            "usage"
        } else {
            "usage_by_tokenizer"
        };
        assert_eq!(source, expected);
        assert!(records
            .iter()
            .all(|r| r["chunks"].as_array().unwrap().iter().all(|c| c[1] == 4)));
    }
}

#[test]
fn exit_code_1_when_an_assertion_fails() {
    let run = run_plan(
        &sim_plan(
            "ttft \"20ms\"; itl \"2ms\"",
            "input 16; output 4",
            "phase \"c\" { concurrency 1; requests 3 }",
            "ttft p99 < \"1ms\"\nerror-rate < \"1%\"",
        ),
        &[],
    );
    assert_eq!(run.code(), 1, "{}", run.stderr());
    let s = run.summary();
    assert_eq!(s["passed"], false);
    assert_eq!(s["verdicts"][0]["passed"], false);
    assert_eq!(s["verdicts"][1]["passed"], true);
    assert!(run.stdout().contains("FAIL: 1 of 2 assertions failed"));
    let report = std::fs::read_to_string(run.out().join("report.md")).unwrap();
    assert!(
        report.starts_with("# llmload: t\n\n**Verdict: FAIL**"),
        "{report}"
    );
}

#[test]
fn exit_code_3_when_the_target_is_unreachable() {
    // Port 1 on loopback: nothing listens there, the connection is refused at once.
    let run = run_plan(
        &sim_plan(
            "",
            "input 16; output 4",
            "phase \"c\" { concurrency 1; requests 2 }",
            "error-rate < \"1%\"",
        ),
        &["--target", "http://127.0.0.1:1"],
    );
    // Found before the clock starts (the connection warm-up asks GET /models first): nothing
    // is sent, and the report says why, as every output does.
    assert_eq!(run.code(), 3, "{}", run.stderr());
    assert!(run.stderr().contains("does not answer"), "{}", run.stderr());
    assert!(run.records().is_empty());
    let summary = run.summary();
    assert_eq!(summary["verdict"]["status"], "not_carried_out");
    assert!(summary["verdict"]["reasons"]
        .to_string()
        .contains("does not answer"));
    let report = std::fs::read_to_string(run.out().join("report.md")).unwrap();
    assert!(report.contains("**Verdict: NOT CARRIED OUT**"), "{report}");
    assert!(
        run.stderr().contains("Connection refused"),
        "{}",
        run.stderr()
    );
    // Measuring cold connections, the requests themselves meet it: classed, and reported.
    let run = run_plan(
        &sim_plan(
            "",
            "input 16; output 4",
            "phase \"c\" { concurrency 1; requests 2 }",
            "error-rate < \"1%\"",
        )
        .replace("target \"sim\" {", "target \"sim\" { connections \"cold\";"),
        &["--target", "http://127.0.0.1:1"],
    );
    assert_eq!(run.code(), 3, "{}", run.stderr());
    assert!(run.stderr().contains("unreachable"), "{}", run.stderr());
    let records = run.records();
    assert_eq!(records.len(), 2);
    assert!(records.iter().all(|r| r["error"] == "connect"));
    assert!(run.out().join("report.md").exists());
}

#[test]
fn exit_code_2_for_a_bad_plan() {
    let run = run_plan("target \"sim\"\n", &[]);
    assert_eq!(run.code(), 2);
    assert!(run.stderr().contains("the plan has no `workload`"));
}

/// Closed loop keeps exactly N in flight; a burst goes out together; open loop follows its clock.
#[test]
fn each_load_model_has_its_shape() {
    let run = run_plan(
        &sim_plan(
            "ttft \"30ms\"; itl \"3ms\"",
            "input 16; output 10",
            "phase \"closed\" { concurrency 3; requests 15 }\nphase \"burst\" { at-once 12 }\nphase \"open\" { rate 40; arrivals \"constant\"; duration \"500ms\" }",
            // The shapes are under test: a noisy runner's late burst is not decided, not a failure.
            "error-rate < \"1%\"; undecided \"pass\"",
        ),
        &[],
    );
    assert_eq!(run.code(), 0, "{}", run.stderr());
    let records = run.records();
    let phase = |i: u64| {
        records
            .iter()
            .filter(move |r| r["phase"] == i)
            .collect::<Vec<&Value>>()
    };
    let span = |r: &Value| {
        let start = r["actual_send_us"].as_u64().unwrap();
        (start, start + r["e2e_us"].as_u64().unwrap())
    };
    // Closed loop: never more than 3 in flight, and 3 at the midpoint of every request.
    let closed: Vec<(u64, u64)> = phase(0).iter().map(|r| span(r)).collect();
    assert_eq!(closed.len(), 15);
    for &(start, _) in &closed {
        let at = start + 1;
        let in_flight = closed.iter().filter(|(s, e)| *s <= at && at < *e).count();
        assert!(in_flight <= 3, "{in_flight} in flight");
    }
    let mid = closed[4].0 + 15_000;
    assert_eq!(
        closed.iter().filter(|(s, e)| *s <= mid && mid < *e).count(),
        3
    );
    // Burst: all 12 released within a few milliseconds of each other.
    let burst: Vec<u64> = phase(1).iter().map(|r| span(r).0).collect();
    assert_eq!(burst.len(), 12);
    assert!(burst.iter().max().unwrap() - burst.iter().min().unwrap() < 20_000);
    // Open loop, constant 40/s for 0.5 s: 20 requests, 25 ms apart, each sent on time.
    let open = phase(2);
    assert_eq!(open.len(), 20);
    let mut intended: Vec<u64> = open
        .iter()
        .map(|r| r["intended_send_us"].as_u64().unwrap())
        .collect();
    intended.sort();
    assert!(intended
        .windows(2)
        .all(|w| (w[1] - w[0]).abs_diff(25_000) <= 1));
    for r in &open {
        let lag = r["actual_send_us"].as_u64().unwrap() - r["intended_send_us"].as_u64().unwrap();
        assert!(lag < 10_000, "lag {lag} µs");
    }
}

#[test]
fn the_api_key_reaches_no_output() {
    let secret = "sk-llmload-test-7f3a9c1e5b2d";
    let plan = sim_plan(
        "ttft \"5ms\"; itl \"1ms\"",
        "input 16; output 4",
        "phase \"c\" { concurrency 1; requests 3 }",
        "e2e p99 < \"1ms\"",
    )
    .replace(
        "timeout \"10s\"",
        "timeout \"10s\"; api-key env=\"LLMLOAD_TEST_KEY\"",
    );
    let dir = tempfile::tempdir().unwrap();
    let path = write_plan(dir.path(), &plan);
    let out = dir.path().join("out");
    let output = run_file(&path, &out, &[], &[("LLMLOAD_TEST_KEY", secret.as_ref())]);
    assert_eq!(output.status.code(), Some(1));
    assert!(!String::from_utf8_lossy(&output.stdout).contains(secret));
    assert!(!String::from_utf8_lossy(&output.stderr).contains(secret));
    let files: Vec<_> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert!(files.len() >= 6);
    for file in files {
        let bytes = std::fs::read(&file).unwrap();
        assert!(
            !String::from_utf8_lossy(&bytes).contains(secret),
            "{} holds the key",
            file.display()
        );
    }
}

#[test]
fn report_rerenders_the_same_summary_from_records() {
    let run = run_plan(
        &sim_plan(
            "ttft \"10ms\"; itl \"2ms\"",
            "input 16; output 6",
            "phase \"c\" { concurrency 2; requests 8 }",
            "ttft max < \"1s\"",
        ),
        &[],
    );
    assert_eq!(run.code(), 0, "{}", run.stderr());
    let before = std::fs::read(run.out().join("summary.json")).unwrap();
    let md_before = std::fs::read(run.out().join("report.md")).unwrap();
    std::fs::remove_file(run.out().join("summary.json")).unwrap();
    let template = run.dir.path().join("pr-comment.md.j2");
    std::fs::write(&template, "{{ context.plan }}: {{ 'PASS' if passed else 'FAIL' }} ttft p50 {{ overall.metrics.ttft_ms.p50|num(1) }}ms\n").unwrap();
    let output = llmload()
        .arg("report")
        .arg(run.out())
        .arg("--template")
        .arg(&template)
        .output()
        .unwrap();
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(
        std::fs::read(run.out().join("summary.json")).unwrap(),
        before
    );
    assert_eq!(
        std::fs::read(run.out().join("report.md")).unwrap(),
        md_before
    );
    let custom = std::fs::read_to_string(run.out().join("pr-comment.md")).unwrap();
    assert!(custom.starts_with("t: PASS ttft p50 1"), "{custom}");
}

#[test]
fn non_streaming_and_completions() {
    let plan = sim_plan(
        "ttft \"10ms\"; itl \"1ms\"",
        "input 16; output 8",
        "phase \"c\" { concurrency 2; requests 4 }",
        "e2e max < \"5s\"",
    )
    .replace(
        "timeout \"10s\"",
        "timeout \"10s\"; stream #false; api \"completions\"",
    );
    let run = run_plan(&plan, &[]);
    assert_eq!(run.code(), 0, "{}", run.stderr());
    let s = run.summary();
    assert_eq!(s["overall"]["metrics"]["ttft_ms"]["count"], 0);
    assert_eq!(s["overall"]["metrics"]["e2e_ms"]["count"], 4);
    assert!(stat(&s, "overall", "e2e_ms", "min") >= 17.0);
    assert!(s["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .any(|w| w["code"] == "not-streaming"));
    assert_eq!(run.records()[0]["completion_tokens"], 8);
}

/// Ctrl-C stops sending, lets in-flight requests finish, and still writes a report.
#[test]
fn ctrl_c_leaves_a_report_marked_interrupted() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_plan(
        dir.path(),
        &sim_plan(
            "ttft \"20ms\"; itl \"5ms\"",
            "input 16; output 10",
            "phase \"long\" { rate 20; duration \"60s\" }",
            "error-rate < \"1%\"",
        ),
    );
    let out = dir.path().join("out");
    let child = llmload()
        .arg("run")
        .arg(&path)
        .arg("--out")
        .arg(&out)
        .arg("--quiet")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(2500));
    let status = std::process::Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let started = std::time::Instant::now();
    let output = child.wait_with_output().unwrap();
    assert!(started.elapsed() < std::time::Duration::from_secs(20));
    assert_eq!(
        output.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let summary: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary["interrupted"], true);
    assert_eq!(summary["passed"], false);
    let report = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(report.contains("INTERRUPTED"));
    let records = read_records(&out);
    assert!(records.len() >= 10, "{} records", records.len());
    // In-flight requests were given their grace period: they finished, none was cancelled.
    assert!(records.iter().all(|r| r["error"].is_null()), "{records:?}");
}

/// A closed loop larger than the open-file limit allows is refused before it starts, with what
/// to do about it.
#[cfg(unix)]
#[test]
fn a_plan_beyond_the_open_file_limit_is_refused_with_a_way_out() {
    let dir = tempfile::tempdir().unwrap();
    let plan = write_plan(
        dir.path(),
        &sim_plan(
            "ttft \"1ms\"",
            "input 8; output 2",
            "phase \"c\" { concurrency 500; requests 500 }",
            "ttft p99 < \"1s\"",
        ),
    );
    let output = std::process::Command::new("sh")
        .arg("-c")
        .arg("ulimit -n 256 && exec \"$0\" run \"$1\" --out \"$2\" --quiet")
        .arg(env!("CARGO_BIN_EXE_llmload"))
        .arg(&plan)
        .arg(dir.path().join("out"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(3), "{stderr}");
    assert!(
        stderr.contains("holds 500 requests in flight at once"),
        "{stderr}"
    );
    assert!(stderr.contains("ulimit -n 564"), "{stderr}");
}

/// summary.json follows schemas/summary.schema.json.
#[test]
fn summary_json_follows_its_schema() {
    let run = run_plan(
        &sim_plan("ttft \"5ms\"; itl \"1ms\"", "input 16; output 4", "phase \"w\" { concurrency 1; requests 2; record #false }\nphase \"c\" { rate 50; duration \"200ms\" }", "ttft max < \"1s\"\nerror-rate < \"1%\" phase=\"c\""),
        &[],
    );
    assert_eq!(run.code(), 0, "{}", run.stderr());
    let schema: Value =
        serde_json::from_str(&std::fs::read_to_string("schemas/summary.schema.json").unwrap())
            .unwrap();
    let mut errors = Vec::new();
    let summary = run.summary();
    validate(&schema, &schema, &summary, "$", &mut errors);
    assert!(errors.is_empty(), "{errors:#?}");
    // The client measured itself.
    if cfg!(unix) {
        assert!(summary["overall"]["client"]["cores"].as_f64().unwrap() >= 1.0);
        assert!(summary["phases"][1]["client"]["cpu_s"].as_f64().unwrap() >= 0.0);
        assert!(summary["context"]["client_peak_rss_mb"].as_f64().unwrap() > 1.0);
    }
    // The validator itself catches a missing key and a wrong type.
    let mut broken = run.summary();
    broken.as_object_mut().unwrap().remove("verdicts");
    broken["passed"] = Value::from("yes");
    let mut errors = Vec::new();
    validate(&schema, &schema, &broken, "$", &mut errors);
    assert_eq!(errors.len(), 2, "{errors:?}");
}

/// The subset of JSON Schema the summary schema uses: type, required, properties, items, enum,
/// const and local $ref.
fn validate(root: &Value, schema: &Value, value: &Value, at: &str, errors: &mut Vec<String>) {
    if let Some(reference) = schema["$ref"].as_str() {
        let name = reference.trim_start_matches("#/$defs/");
        return validate(root, &root["$defs"][name], value, at, errors);
    }
    if let Some(types) = schema.get("type") {
        let allowed: Vec<&str> = match types {
            Value::String(t) => vec![t.as_str()],
            Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
            _ => vec![],
        };
        let actual = match value {
            Value::Null => "null",
            Value::Bool(_) => "boolean",
            Value::Number(n) if n.is_u64() || n.is_i64() => "integer",
            Value::Number(_) => "number",
            Value::String(_) => "string",
            Value::Array(_) => "array",
            Value::Object(_) => "object",
        };
        let ok = allowed.contains(&actual) || (actual == "integer" && allowed.contains(&"number"));
        if !ok {
            errors.push(format!("{at}: {actual} is not {allowed:?}"));
            return;
        }
    }
    if let Some(options) = schema["enum"].as_array() {
        if !options.contains(value) {
            errors.push(format!("{at}: {value} not in enum"));
        }
    }
    if let Some(constant) = schema.get("const") {
        if constant != value {
            errors.push(format!("{at}: {value} is not {constant}"));
        }
    }
    // `required` constrains objects only (a nullable object may be null).
    for key in schema["required"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .filter(|_| value.is_object())
    {
        if value.get(key).is_none() {
            errors.push(format!("{at}: missing {key}"));
        }
    }
    if let Some(properties) = schema["properties"].as_object() {
        for (key, sub) in properties {
            if let Some(v) = value.get(key) {
                validate(root, sub, v, &format!("{at}.{key}"), errors);
            }
        }
    }
    if let (Some(items), Some(array)) = (schema.get("items"), value.as_array()) {
        for (i, v) in array.iter().enumerate() {
            validate(root, items, v, &format!("{at}[{i}]"), errors);
        }
    }
}

/// A Hugging Face tokenizer.json next to the plan: prompts have exact lengths under it.
#[test]
fn a_tokenizer_json_beside_the_plan() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(
        "tests/fixtures/word-level-tokenizer.json",
        dir.path().join("tokenizer.json"),
    )
    .unwrap();
    let plan = sim_plan(
        "ttft \"5ms\"; itl \"1ms\"",
        "tokenizer \"tokenizer.json\"; input 40; output 5",
        "phase \"c\" { concurrency 1; requests 3 }",
        "error-rate < \"1%\"",
    );
    let run = common::run_in(dir, &plan, &[]);
    assert_eq!(run.code(), 0, "{}", run.stderr());
    let out = run.out();
    let records = run.records();
    assert!(records
        .iter()
        .all(|r| r["prompt_tokens"] == 40 && r["completion_tokens"] == 5));
    // The report directory re-renders without the tokenizer beside it.
    let output = llmload().arg("report").arg(&out).output().unwrap();
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    // A missing file is a plan error pointing at the path.
    let bad = write_plan(
        run.dir.path(),
        &plan.replace("\"tokenizer.json\"", "\"missing/tokenizer.json\""),
    );
    let output = llmload().arg("check").arg(&bad).output().unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("no tokenizer file at"));
}

/// `check --capacity` runs one trial per distinct peak load against the in-process simulator
/// and says, per load, what limits it. (Whether this box passes is a measurement, not asserted.)
#[test]
fn check_capacity_runs_a_trial_per_distinct_peak_load() {
    let dir = tempfile::tempdir().unwrap();
    let plan = write_plan(
        dir.path(),
        "plan \"cap\" { seed 1 }\ntarget \"http://127.0.0.1:9/v1\" { model \"m\" }\n\
         workload { input 32; output 8 ignore-eos=#true }\n\
         phase \"warm\" { concurrency 2; duration \"1s\"; record #false }\n\
         phase \"ramp\" { rate from=1 to=20; duration \"5s\" }\n\
         phase \"steady\" { rate 20; duration \"5s\" }\n",
    );
    let output = llmload()
        .arg("check")
        .arg(&plan)
        .args([
            "--capacity",
            "--duration",
            "1s",
            "--sim-ttft",
            "5ms",
            "--sim-itl",
            "2ms",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        matches!(output.status.code(), Some(0 | 1)),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.contains("2 trial(s)"), "{stdout}");
    let trials: Vec<&str> = stdout
        .lines()
        .filter(|l| l.contains("read delay p99"))
        .collect();
    assert_eq!(trials.len(), 2, "{stdout}");
    assert!(trials[0].starts_with("warm "), "{stdout}");
    assert!(trials[1].starts_with("ramp, steady"), "{stdout}");
    assert!(trials[1].contains("rate 20/s poisson"), "{stdout}");
    if cfg!(target_os = "linux") {
        assert!(!trials[1].contains("read delay p99 - "), "{stdout}");
    }
    let verdict = if output.status.code() == Some(0) {
        "PASS"
    } else {
        "FAIL"
    };
    assert!(stdout.contains(verdict), "{stdout}");
}

/// Cold connections: every request of a burst opens its own and records how long that took;
/// warm ones are opened before the clock and no request does. `connect` gates like any
/// metric, and every output says the same.
#[test]
fn connect_time_is_per_request_and_gates_the_run() {
    let plan = |connections: &str| {
        sim_plan(
            "ttft \"5ms\"; itl \"1ms\"",
            "input 16; output 4",
            "phase \"burst\" { at-once 16 }",
            "connect max < \"1us\"",
        )
        .replace(
            "timeout \"10s\"",
            &format!("timeout \"10s\"; connections \"{connections}\""),
        )
    };
    let cold = run_plan(&plan("cold"), &[]);
    assert_eq!(cold.code(), 1, "{}", cold.stderr());
    let burst = phase(&cold.summary(), "burst");
    assert_eq!(burst["requests"]["new_connections"], 16);
    assert_eq!(burst["metrics"]["connect_ms"]["count"], 16);
    assert!(burst["metrics"]["connect_ms"]["max"].as_f64().unwrap() > 0.0);
    let connected: Vec<u64> = cold
        .records()
        .iter()
        .filter_map(|r| r["connect_us"].as_u64())
        .collect();
    assert_eq!(connected.len(), 16);
    assert!(cold.stdout().contains("FAIL: 1 of 1 assertions failed"));
    let report = std::fs::read_to_string(cold.out().join("report.md")).unwrap();
    assert!(report.contains("**Verdict: FAIL**"), "{report}");
    assert!(
        report.contains("16 requests opened a new connection"),
        "{report}"
    );
    let csv = std::fs::read_to_string(cold.out().join("requests.csv")).unwrap();
    assert!(csv.lines().next().unwrap().contains("connect_ms"));

    // Warm: the burst's connections exist before its clock; no request opens one, and an
    // assertion on a metric with no data is not decided, as any is.
    let warm = run_plan(&plan("warm"), &[]);
    let burst = phase(&warm.summary(), "burst");
    assert_eq!(burst["requests"]["new_connections"], 0, "{burst}");
    assert_eq!(burst["connections"]["warmed"], 16);
    assert!(warm.records().iter().all(|r| r["connect_us"].is_null()));
    assert_eq!(warm.code(), 3, "{}", warm.stdout());
    assert_eq!(warm.summary()["verdict"]["status"], "not_decided");
    assert!(warm.stdout().contains("no data"), "{}", warm.stdout());
}

/// A closed loop's users start one after another, each sending its first request before the
/// next starts: a user's new connection is not left waiting while the runtime starts the users
/// after it. On one worker thread, that wait was every later user's start: the first wave's
/// connects each took about as long as the whole wave took to start.
#[test]
fn each_user_sends_its_first_request_before_the_next_starts() {
    let plan = sim_plan(
        // Answers outlast the wave's start: every user sends one request, on a new connection.
        "ttft \"300ms\"; itl \"1ms\"",
        "input 16; output 2",
        "phase \"wave\" { concurrency 128; requests 128 }",
        "error-rate < \"1%\"",
    )
    .replace("timeout \"10s\"", "timeout \"10s\"; connections \"cold\"");
    let run = run_plan(&plan, &["--threads", "1"]);
    assert_eq!(run.code(), 0, "{}", run.stderr());
    let records = run.records();
    let mut connects: Vec<u64> = records
        .iter()
        .filter_map(|r| r["connect_us"].as_u64())
        .collect();
    assert_eq!(connects.len(), 128);
    connects.sort_unstable();
    let sends: Vec<u64> = records
        .iter()
        .filter_map(|r| r["actual_send_us"].as_u64())
        .collect();
    let spread = sends.iter().max().unwrap() - sends.iter().min().unwrap();
    // Measured: a median connect of 0.16 ms against a 27 ms spread; when each connect
    // waited for the later users' starts, the two were of one size (22 ms and 23 ms).
    let median = connects[connects.len() / 2];
    assert!(
        median * 4 < spread,
        "median connect {median} us, users' starts spread over {spread} us"
    );
}

/// `--set`, `--header` and `--api-key-env` edit the plan before it is checked: a value set is
/// run, kept in the run's plan (so `report` judges the same plan), and listed in the report;
/// a mistake gets the plan's own diagnostic; a header's `$VAR` value is a secret, in no file.
#[test]
fn values_set_on_the_command_line_are_checked_kept_and_listed() {
    let (port, seen) = common::wire::capture(|seen, stream| {
        if seen.line.starts_with("GET") {
            common::wire::respond(stream, "404 Not Found", "{}");
            return;
        }
        common::wire::respond(
            stream,
            "200 OK",
            r#"{"choices":[{"message":{"content":"hi"},"finish_reason":"length"}],"usage":{"prompt_tokens":8,"completion_tokens":2}}"#,
        );
    });
    let dir = tempfile::tempdir().unwrap();
    let plan = common::write_plan(
        dir.path(),
        r#"plan "cli" { seed 1 }
target "http://127.0.0.1:1" { model "m"; stream #false; metrics #false; connections "cold" }
workload { input 8; output 16 }
phase "steady" { concurrency 1; requests 2 }
"#,
    );
    let out = dir.path().join("out");
    let target = format!("http://127.0.0.1:{port}");
    let output = common::llmload()
        .args(["run", "--quiet", "--target", &target, "--out"])
        .arg(&out)
        .arg(&plan)
        .args([
            "--set",
            "phase:steady.requests=3",
            "--set",
            "workload.output=2",
        ])
        .args([
            "--header",
            "X-Team: search",
            "--header",
            "X-Token: $CLI_TEAM_TOKEN",
        ])
        .args(["--api-key-env", "CLI_API_KEY"])
        .env("CLI_TEAM_TOKEN", "tok-secret-123")
        .env("CLI_API_KEY", "key-secret-456")
        .output()
        .unwrap();
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 3);
    assert_eq!(seen[0].json()["max_tokens"], 2);
    assert_eq!(seen[0].header("x-team"), Some("search"));
    assert_eq!(seen[0].header("x-token"), Some("tok-secret-123"));
    assert_eq!(
        seen[0].header("authorization"),
        Some("Bearer key-secret-456")
    );
    let report = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(report.contains("Set on the command line"), "{report}");
    assert!(report.contains("`phase:steady.requests=3`"), "{report}");
    for entry in std::fs::read_dir(&out).unwrap() {
        let text = std::fs::read(entry.unwrap().path()).unwrap_or_default();
        let text = String::from_utf8_lossy(&text);
        assert!(!text.contains("tok-secret-123") && !text.contains("key-secret-456"));
    }
    // The kept plan is the plan that ran: re-judging it finds the same 3 requests.
    let kept = std::fs::read_to_string(out.join("plan.kdl")).unwrap();
    assert!(kept.contains("requests 3"), "{kept}");
    let again = common::llmload().arg("report").arg(&out).output().unwrap();
    assert_eq!(again.status.code(), Some(0));
    // A mistake is the plan's own diagnostic.
    let wrong = common::llmload()
        .args(["plan"])
        .arg(&plan)
        .args(["--set", "phase:steady.rat=5"])
        .output()
        .unwrap();
    assert_eq!(wrong.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&wrong.stderr);
    assert!(stderr.contains("unknown node `rat` in `phase`"), "{stderr}");
    let missing = common::llmload()
        .args(["plan"])
        .arg(&plan)
        .args(["--set", "phase:nope.rate=5"])
        .output()
        .unwrap();
    assert_eq!(missing.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("no `phase \"nope\"`"));
}

/// A report leaves out what has nothing to say: a prefix-cache section with no hit in a
/// workload that shares no text, a queue-time column when nothing waited, a "Warnings" heading
/// over notes alone; and says them when there is something to say. Times are in the column
/// heads, not in each cell.
#[test]
fn sections_with_nothing_to_say_are_left_out() {
    let report_of = |sim: &str, workload: &str| {
        let run = run_plan(
            &sim_plan(
                sim,
                workload,
                r#"phase "p" { concurrency 8; requests 40 }"#,
                "",
            ),
            &[],
        );
        assert_eq!(run.code(), 0, "{}", run.stderr());
        let report = std::fs::read_to_string(run.out().join("report.md")).unwrap();
        (run.summary(), report)
    };
    // Room for every request, no shared text: the cache never hits, nothing waits.
    let (quiet, report) = report_of(
        "engine { max-seqs 64 }",
        r#"tokenizer "cl100k_base"; input 64; output 8"#,
    );
    assert_eq!(
        quiet["overall"]["prefix_cache"]["hits"], 0,
        "{}",
        quiet["overall"]
    );
    assert!(!report.contains("## Prefix cache"), "{report}");
    assert!(!report.contains("Queue time"), "{report}");
    let warned = quiet["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .any(|w| w["severity"] == "warning");
    assert!(!warned, "{}", quiet["warnings"]);
    assert!(
        report.contains("\n## Note\n") || report.contains("\n## Notes\n"),
        "{report}"
    );
    assert!(!report.contains("## Warnings"), "{report}");
    // Two seats for eight users and a shared prefix: both are worth a word.
    let (_, busy) = report_of(
        "engine { max-seqs 2 }",
        r#"tokenizer "cl100k_base"; input 64; output 8; prefix 256"#,
    );
    assert!(busy.contains("## Prefix cache"), "{busy}");
    assert!(busy.contains("| Queue time p50 / p99 (ms) |"), "{busy}");
    // One unit per column: the head says it, the cells are numbers.
    let head = busy
        .lines()
        .find(|l| l.starts_with("| Phase | OK"))
        .unwrap();
    assert!(head.contains("| TTFT p50 (ms) |"), "{head}");
    let row = busy.lines().find(|l| l.starts_with("| p |")).unwrap();
    assert!(!row.contains(" ms"), "{row}");
}

/// Every request goes out in a W3C trace of its own, and its record keeps the trace id: the
/// server (here the simulator's write log, as an engine's spans would) receives exactly the
/// `traceparent` whose trace id the record of that `x-request-id` holds.
#[test]
fn every_request_is_sent_in_a_trace_its_record_keeps() {
    let (log, writes) = run_recorded(
        &["--ttft", "2ms", "--itl", "1ms"],
        "plan \"t\" { seed 3 }\ntarget \"sim\" { timeout \"10s\" }\n\
         workload { input 16; output 4 ignore-eos=#true }\n\
         phase \"a\" { concurrency 2; requests 6 }\nphase \"b\" { concurrency 2; requests 6 }\n",
    );
    let prefix = log
        .header
        .as_ref()
        .unwrap()
        .request_id_prefix
        .clone()
        .unwrap();
    let received: std::collections::HashMap<String, String> = writes
        .into_iter()
        .map(|w| (w.request_id.unwrap(), w.traceparent.expect("a traceparent")))
        .collect();
    assert_eq!(received.len(), 12);
    let mut traces = std::collections::HashSet::new();
    for record in &log.records {
        let id = llmload::records::request_id_text(&prefix, record.phase, record.seq);
        let traceparent = &received[&id];
        let trace_id = record.trace_id.as_deref().expect("a trace id");
        // version 00, the record's trace, a span id, sampled.
        assert_eq!(traceparent.len(), 55, "{traceparent}");
        assert!(
            traceparent.starts_with(&format!("00-{trace_id}-")),
            "{traceparent}"
        );
        assert!(traceparent.ends_with("-01"), "{traceparent}");
        assert!(traces.insert(trace_id.to_string()), "{trace_id} twice");
    }
    assert_eq!(traces.len(), 12);
}
