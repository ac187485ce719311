//! `llmload check` and `llmload plan` through the real binary.

mod common;
use common::*;

fn check(text: &str) -> (i32, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = write_plan(dir.path(), text);
    let out = llmload()
        .arg("check")
        .arg(&path)
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

const GOOD: &str = "target \"sim\"\nworkload { input 64; output 8 }\nphase \"steady\" { rate 2; duration \"10s\" }\n";

#[test]
fn shipped_plans_are_valid() {
    let mut plans: Vec<std::path::PathBuf> = std::fs::read_dir("plans")
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "kdl"))
        .collect();
    plans.sort();
    assert!(plans.len() >= 10, "{plans:?}");
    for plan in &plans {
        let plan = plan.display();
        let out = llmload()
            .arg("check")
            .arg(plan.to_string())
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{plan}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// Each mistake: the message, a caret at the file:line:col of the span, and a help line.
#[test]
fn each_plan_error_has_its_diagnostic() {
    let cases: &[(&str, &str, &str, &str)] = &[
        // (extra plan text, message, location, help fragment)
        (
            "frob 1\n",
            "unknown node `frob` at the top level",
            "plan.kdl:4:1",
            "allowed here: plan, include, target",
        ),
        (
            "phase \"p\" { rate 2; duration \"1s\"; colour \"red\" }\n",
            "unknown node `colour` in `phase`",
            "plan.kdl:4:36",
            "concurrency, rate, at-once",
        ),
        (
            "phase \"p\" { rate 2 speed=3; duration \"1s\" }\n",
            "unknown property `speed` on `rate`",
            "plan.kdl:4:20",
            "from, to",
        ),
        (
            "phase \"p\" { concurrency \"four\"; duration \"1s\" }\n",
            "expected a whole number, found a string",
            "plan.kdl:4:25",
            "concurrency 8",
        ),
        (
            "phase \"p\" { requests; rate 1 }\n",
            "`requests` needs a value",
            "plan.kdl:4:13",
            "requests 500",
        ),
        (
            "phase \"p\" { rate 0; duration \"1s\" }\n",
            "0 is out of range: it must be greater than zero",
            "plan.kdl:4:18",
            "rate 16",
        ),
        (
            "phase \"p\" { rate -4; duration \"1s\" }\n",
            "-4 is out of range: it must be greater than zero",
            "plan.kdl:4:18",
            "rate 16",
        ),
        (
            "phase \"p\" { rate 1; concurrency 2; duration \"1s\" }\n",
            "phase \"p\" has more than one load model",
            "plan.kdl:4:21",
            "exactly one load model",
        ),
        (
            "phase \"p\" { duration \"1s\" }\n",
            "phase \"p\" has no load model",
            "plan.kdl:4:1",
            "exactly one load model",
        ),
        (
            "sla { latency p99 < \"1s\" }\n",
            "unknown metric `latency`",
            "plan.kdl:4:7",
            "metrics: ttft, ttfo, itl",
        ),
        (
            "sla { ttft p42x < \"1s\" }\n",
            "unknown statistic",
            "plan.kdl:4:12",
            "p99.9",
        ),
        (
            "sla { ttft p99 < \"1s\" phase=\"stedy\" }\n",
            "no phase is named \"stedy\"",
            "plan.kdl:4:23",
            "phases in this plan: \"steady\"",
        ),
        (
            "phase \"p\" { rate 1; duration 30 }\n",
            "a bare number has no unit",
            "plan.kdl:4:30",
            "\"30s\"",
        ),
    ];
    for (extra, message, location, help) in cases {
        let (code, _, stderr) = check(&format!("{GOOD}{extra}"));
        assert_eq!(code, 2, "{extra}");
        assert!(
            stderr.contains(message),
            "{extra}: no `{message}` in\n{stderr}"
        );
        assert!(
            stderr.contains(location),
            "{extra}: no `{location}` in\n{stderr}"
        );
        assert!(
            stderr.contains(help),
            "{extra}: no help `{help}` in\n{stderr}"
        );
        assert!(stderr.contains("help:"), "{extra}");
    }
}

#[test]
fn check_prints_every_problem_and_exits_2() {
    let (code, _, stderr) = check(&format!(
        "{GOOD}phase \"a\" {{ rate 0; duration \"1s\" }}\nphase \"b\" {{ duration \"1s\" }}\nsla {{ ttft p99 < \"1s\" phase=\"zzz\" }}\n"
    ));
    assert_eq!(code, 2);
    assert!(stderr.contains("out of range"));
    assert!(stderr.contains("has no load model"));
    assert!(stderr.contains("no phase is named \"zzz\""));
    assert!(stderr.contains("the plan has 3 problems"));
}

#[test]
fn a_valid_plan_checks_clean() {
    let (code, stdout, _) = check(GOOD);
    assert_eq!(code, 0);
    assert!(stdout.contains("is valid"));
}

#[test]
fn missing_file_and_bad_usage_exit_2() {
    let out = llmload()
        .args(["check", "/nonexistent/plan.kdl"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let out = llmload().args(["run"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn schedules_are_byte_identical_for_a_plan_and_seed() {
    let dump = |seed: &str, format: &str| {
        let out = llmload()
            .args([
                "plan",
                "plans/chat-sla.kdl",
                "--seed",
                seed,
                "--format",
                format,
            ])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0));
        out.stdout
    };
    assert_eq!(dump("42", "json"), dump("42", "json"));
    assert_eq!(dump("42", "csv"), dump("42", "csv"));
    assert_ne!(dump("42", "csv"), dump("43", "csv"));
    let table = String::from_utf8(
        llmload()
            .args(["plan", "plans/chat-sla.kdl"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    assert!(
        table.contains("steady") && table.contains("open-ended") && table.contains("16.00"),
        "{table}"
    );
}

/// Poisson arrivals through the CLI: the mean rate and exponential inter-arrival times.
#[test]
fn poisson_schedule_has_the_rate_and_exponential_gaps() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_plan(
        dir.path(),
        "plan \"p\" { seed 9 }\ntarget \"sim\"\nworkload { input 8; output 4 }\nphase \"s\" { rate 40; duration \"200s\" }\n",
    );
    let out = llmload()
        .arg("plan")
        .arg(&path)
        .args(["--format", "csv"])
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let times: Vec<f64> = text
        .lines()
        .skip(1)
        .map(|l| l.split(',').nth(2).unwrap().parse::<f64>().unwrap() / 1000.0)
        .collect();
    let rate = times.len() as f64 / 200.0;
    assert!((rate - 40.0).abs() < 1.5, "rate {rate}");
    let gaps: Vec<f64> = times.windows(2).map(|w| w[1] - w[0]).collect();
    let mean = gaps.iter().sum::<f64>() / gaps.len() as f64;
    let sd = (gaps.iter().map(|g| (g - mean).powi(2)).sum::<f64>() / gaps.len() as f64).sqrt();
    assert!((sd / mean - 1.0).abs() < 0.05, "cv {}", sd / mean);
    for k in [0.5, 1.0, 2.0, 3.0] {
        let share = gaps.iter().filter(|&&g| g > k * mean).count() as f64 / gaps.len() as f64;
        assert!(
            (share - (-k).exp()).abs() < 0.015,
            "P(gap > {k} mean) = {share}"
        );
    }
}

/// Absurd values, through the real binary: exit 2 with the diagnostic at the value, never a
/// panic or an allocation without bound.
#[test]
fn absurd_values_exit_2_with_a_caret_at_the_value() {
    for (extra, location) in [
        ("phase \"x\" { at-once 4000000000 }\n", "plan.kdl:4:21"),
        (
            "phase \"x\" { rate 1e9; duration \"1h\" }\n",
            "plan.kdl:4:18",
        ),
        (
            "phase \"x\" { rate 1e-300; duration \"1h\" }\n",
            "plan.kdl:4:13",
        ),
        (
            "phase \"x\" { rate 1; arrivals \"gamma\" cv=1e308; duration \"1h\" }\n",
            "plan.kdl:4:38",
        ),
        (
            "phase \"x\" { rate 1; duration (h)1e300 }\n",
            "plan.kdl:4:30",
        ),
    ] {
        let (code, _, stderr) = check(&format!("{GOOD}{extra}"));
        assert_eq!(code, 2, "{extra}: {stderr}");
        assert!(
            stderr.contains(location),
            "{extra}: no {location} in\n{stderr}"
        );
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
    let text = format!("{GOOD}sla {{{} ttft p99 < \"1xs\" }}\n", " ".repeat(70_000));
    let (code, _, stderr) = check(&text);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("plan.kdl:4:70018"), "{stderr}");
    // `plan` refuses nothing that `check` accepts.
    let (code, _, _) = check(&format!(
        "{GOOD}phase \"x\" {{ rate 5000; duration \"1h\" }}\n"
    ));
    assert_eq!(code, 0);
    // Flags too.
    for args in [
        &[
            "run",
            "plans/quickstart.kdl",
            "--grace",
            "99999999999999999999h",
        ][..],
        &[
            "check",
            "plans/quickstart.kdl",
            "--capacity",
            "--duration",
            "1e300s",
        ],
        &["sim", "--ttft", "99999999999999h"],
        &["run", "plans/quickstart.kdl", "--threads", "0"],
    ] {
        let out = llmload().args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
    }
}

#[test]
fn a_syntax_error_and_the_other_mistakes_are_reported_together() {
    let (code, _, stderr) = check(&format!(
        "{GOOD}phase \"a\" {{ rate 1; duration 2m }}\nphase \"b\" {{ rate 0; duration \"1s\" }}\nsla {{ itl < \"50ms\" }}\n"
    ));
    assert_eq!(code, 2);
    assert!(stderr.contains("write \"2m\""), "{stderr}");
    assert!(stderr.contains("0 is out of range"), "{stderr}");
    assert!(
        stderr.contains("`itl` needs a statistic before the comparison"),
        "{stderr}"
    );
    assert!(stderr.contains("the plan has 3 problems"), "{stderr}");
}

/// `--target sim` runs any plan against the embedded simulator; anything but a URL or "sim" is a
/// usage error, before anything is sent.
#[test]
fn target_sim_runs_any_plan_against_the_simulator() {
    let plan = "plan \"p\" { seed 1 }\ntarget \"http://127.0.0.1:9\" { model \"m\" }\nworkload { input 8; output 4 }\nphase \"a\" { concurrency 2; requests 4 }\nsla { error-rate < \"1%\" }\n";
    let run = run_plan(plan, &["--target", "sim"]);
    assert_eq!(run.code(), 0, "{}", run.stderr());
    assert!(run.summary()["context"]["target"]
        .as_str()
        .unwrap()
        .starts_with("sim (embedded"));
    let run = run_plan(plan, &["--target", "ftp://h"]);
    assert_eq!(run.code(), 2);
    assert!(run
        .stderr()
        .contains("not an http:// or https:// URL, nor \"sim\""));
    assert!(!run.out().join("records.jsonl").exists());
}

/// Exit 3 for what the machine could not do, with the path and the OS's reason; exit 2 for a
/// bad template, before anything is sent.
#[test]
fn runtime_failures_exit_3_and_template_mistakes_exit_2() {
    let plan = "target \"sim\" { timeout \"5s\" }\nsim { ttft \"1ms\"; itl \"1ms\" }\nworkload { input 8; output 4 }\nphase \"a\" { rate 50; duration \"30s\" }\n";
    // The output directory cannot be created (its parent is a file).
    let dir = tempfile::tempdir().unwrap();
    let path = write_plan(dir.path(), plan);
    let out = run_file(&path, &path.join("out"), &[], &[]);
    assert_eq!(out.status.code(), Some(3));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("cannot create") && stderr.contains("plan.kdl/out"),
        "{stderr}"
    );
    // The records cannot be written (a file-size limit, as a full disk): the run stops at
    // once, with that error, instead of sending requests whose records would be lost.
    let out_dir = dir.path().join("full");
    let started = std::time::Instant::now();
    let out = {
        use std::os::unix::process::CommandExt;
        let mut command = llmload();
        command
            .arg("run")
            .arg(&path)
            .arg("--out")
            .arg(&out_dir)
            .arg("--quiet");
        // SAFETY: setrlimit is async-signal-safe; the closure touches nothing else.
        unsafe {
            command.pre_exec(|| {
                let limit = libc::rlimit {
                    rlim_cur: 8192,
                    rlim_max: 8192,
                };
                libc::setrlimit(libc::RLIMIT_FSIZE, &limit);
                Ok(())
            });
        }
        command.output().unwrap()
    };
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(
        stderr.contains("cannot write")
            && stderr.contains("records.jsonl")
            && stderr.contains("too large"),
        "{stderr}"
    );
    assert!(
        started.elapsed() < std::time::Duration::from_secs(15),
        "the run went on"
    );
    // A template that does not parse is refused before the run; one that names an undefined
    // value says which.
    let bad = dir.path().join("bad.md.j2");
    std::fs::write(&bad, "{% if passed %}unclosed").unwrap();
    let out = run_file(
        &path,
        &dir.path().join("t1"),
        &["--template", bad.to_str().unwrap()],
        &[],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(!dir.path().join("t1").exists(), "the run started");
    let short = "target \"sim\"\nsim { ttft \"1ms\"; itl \"1ms\" }\nworkload { input 8; output 4 }\nphase \"a\" { concurrency 1; requests 2 }\n";
    let path = write_plan(dir.path(), short);
    let undefined = dir.path().join("undefined.md.j2");
    std::fs::write(&undefined, "ok\n{{ context.plann.name }}\n").unwrap();
    let out = run_file(
        &path,
        &dir.path().join("t2"),
        &["--template", undefined.to_str().unwrap()],
        &[],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("`context.plann.name` is undefined (line 2)"),
        "{stderr}"
    );
    assert!(dir.path().join("t2/report.md").exists());
}

/// What a careless user does: output to a full device, a key written in the plan, a key that
/// is not text, a plan named like a path, a foreign --out directory.
#[test]
fn careless_use_gets_a_clear_refusal() {
    // stdout that cannot be written is a failure, not exit 0.
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap();
    let out = llmload()
        .args(["plan", "plans/chat-sla.kdl", "--format", "csv"])
        .stdout(full)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot write standard output"));
    // A key written in the plan is refused, and never quoted back.
    let (code, _, stderr) = check(
        "target \"http://h:1\" { api-key \"sk-supersecret-0123456789\"; model \"m\" }\nworkload { input 1; output 1 }\nphase \"a\" { rate 1; duration \"1s\" }\n",
    );
    assert_eq!(code, 2);
    assert!(stderr.contains("an API key is never written in a plan"));
    assert!(!stderr.contains("supersecret"), "{stderr}");
    // A key variable that is not UTF-8 is said to be so, not "not set".
    let dir = tempfile::tempdir().unwrap();
    let path = write_plan(
        dir.path(),
        "target \"sim\" { api-key env=\"WEIRD_KEY\" }\nworkload { input 1; output 1 }\nphase \"a\" { concurrency 1; requests 1 }\n",
    );
    use std::os::unix::ffi::OsStrExt;
    let output = run_file(
        &path,
        &dir.path().join("o"),
        &[],
        &[("WEIRD_KEY", std::ffi::OsStr::from_bytes(b"sk-\xff\xfe"))],
    );
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("not valid UTF-8"));
    // A directory of someone else's files is not a place to write a run.
    let foreign = dir.path().join("foreign");
    std::fs::create_dir(&foreign).unwrap();
    std::fs::write(foreign.join("thesis.tex"), "mine").unwrap();
    let output = run_file(&path, &foreign, &[], &[]);
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("holds no llmload run"));
    assert_eq!(std::fs::read_dir(&foreign).unwrap().count(), 1);
    // A plan named like a path writes its default report directory inside reports/.
    let named = write_plan(
        dir.path(),
        "plan \"../../escape\"\ntarget \"sim\"\nsim { ttft \"1ms\"; itl \"1ms\" }\nworkload { input 1; output 1 }\nphase \"a\" { concurrency 1; requests 1 }\n",
    );
    let output = llmload()
        .arg("run")
        .arg(&named)
        .arg("--quiet")
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let made: Vec<_> = std::fs::read_dir(dir.path().join("reports"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        made.len() == 1 && made[0].starts_with("_.._escape-"),
        "{made:?}"
    );
    assert!(!dir.path().join("escape").exists());
}

/// A phase with both `requests` and `duration` ends at whichever comes first: an open loop
/// that sends its last request early does not idle until its duration.
#[test]
fn an_open_loop_ended_by_count_does_not_idle_to_its_duration() {
    let run = run_plan(
        "target \"sim\"\nsim { ttft \"1ms\"; itl \"1ms\" }\nworkload { input 8; output 2 }\nphase \"a\" { rate 50; arrivals \"constant\"; requests 10; duration \"20s\" }\n",
        &[],
    );
    assert_eq!(run.code(), 0, "{}", run.stderr());
    let s = run.summary();
    let wall = s["phases"][0]["wall_s"].as_f64().unwrap();
    assert!(wall < 1.0, "the phase idled: {wall} s");
    assert!(s["context"]["duration_s"].as_f64().unwrap() < 2.0);
    let throughput = s["phases"][0]["throughput"]["requests_per_s"]
        .as_f64()
        .unwrap();
    assert!(throughput > 40.0, "{throughput}");
}

/// Hostile inputs to check, plan and fmt each get an answer and a clear error: never a crash, a
/// hang or memory without bound (the second hostile probe's cases).
#[test]
fn hostile_files_and_plans_get_an_error_never_a_crash_or_a_hang() {
    let dir = tempfile::tempdir().unwrap();
    let run = |args: &[&std::ffi::OsStr]| {
        let output = llmload().args(args).env("NO_COLOR", "1").output().unwrap();
        (
            output.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    };
    // A phase name 70,000 characters long: `plan` panicked formatting its table.
    let long = write_plan(
        dir.path(),
        &format!(
            "target \"sim\"\nworkload {{ input 8; output 2 }}\nphase \"{}\" {{ concurrency 1; requests 1 }}\n",
            "a".repeat(70_000)
        ),
    );
    let (code, stderr) = run(&["plan".as_ref(), long.as_os_str()]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("more than a name may be"), "{stderr}");

    // 2,000 nested blocks: fmt overflowed its stack.
    let deep = dir.path().join("deep.kdl");
    std::fs::write(
        &deep,
        format!("a {}{}\n", "{ b ".repeat(2000), "}".repeat(2000)),
    )
    .unwrap();
    let (code, stderr) = run(&["fmt".as_ref(), "--check".as_ref(), deep.as_os_str()]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("nest deeper"), "{stderr}");

    // Special files: endless, or blocking until someone writes.
    let (code, stderr) = run(&["check".as_ref(), "/dev/zero".as_ref()]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("not a regular file"), "{stderr}");
    let including = write_plan(
        dir.path(),
        "include \"/dev/zero\"\ntarget \"sim\"\nworkload { input 8; output 2 }\nphase \"p\" { concurrency 1; requests 1 }\n",
    );
    let (code, stderr) = run(&["check".as_ref(), including.as_os_str()]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("not a regular file"), "{stderr}");
    let fifo = dir.path().join("fifo.kdl");
    if std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .is_ok_and(|s| s.success())
    {
        let (code, stderr) = run(&["check".as_ref(), fifo.as_os_str()]);
        assert_eq!(code, 2, "{stderr}");
    }

    // A directory with links back to its ancestors is walked once; an empty one says so.
    let tree = dir.path().join("tree");
    std::fs::create_dir_all(tree.join("a")).unwrap();
    std::os::unix::fs::symlink(&tree, tree.join("a").join("up")).unwrap();
    std::os::unix::fs::symlink(tree.join("a"), tree.join("a").join("me")).unwrap();
    std::fs::write(
        tree.join("a").join("p.kdl"),
        "target \"sim\"\nworkload { input 8; output 2 }\nphase \"p\" { concurrency 1; requests 1 }\n",
    )
    .unwrap();
    let (code, stderr) = run(&["check".as_ref(), tree.as_os_str()]);
    assert_eq!(code, 0, "{stderr}");
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let (code, stderr) = run(&["check".as_ref(), empty.as_os_str()]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("no .kdl file"), "{stderr}");

    // 30,000 phases: one diagnostic, at once (the duplicate check was quadratic).
    let mut many = String::from("target \"sim\"\nworkload { input 8; output 2 }\n");
    for i in 0..30_000 {
        many.push_str(&format!("phase \"p{i}\" {{ rate 1 }}\n"));
    }
    let many = write_plan(dir.path(), &many);
    let (code, stderr) = run(&["check".as_ref(), many.as_os_str()]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("more than 1000 phases"), "{stderr}");
}

/// What `run` would refuse when it compiles the plan, `check` refuses too: a dataset none of
/// whose entries has the answer `output-from-answer` takes its output length from.
#[test]
fn check_compiles_what_run_would_refuse() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("prompts.jsonl"),
        "{\"prompt\": \"what is a cat\"}\n{\"prompt\": \"and a dog\"}\n",
    )
    .unwrap();
    let path = write_plan(
        dir.path(),
        "target \"sim\"\nworkload { dataset \"prompts.jsonl\" output-from-answer=#true; output 8 }\n\
         phase \"p\" { concurrency 1; requests 2 }\n",
    );
    let out = llmload().arg("check").arg(&path).output().unwrap();
    let said =
        String::from_utf8_lossy(&out.stderr).to_string() + &String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(2), "{said}");
    assert!(said.contains("none of its 2 entries is usable"), "{said}");
}

/// The schedule `check` compiles also says which assertions its requests can never decide.
#[test]
fn check_warns_of_an_assertion_its_requests_cannot_decide() {
    let (code, out, err) = check(
        "target \"sim\"\nworkload { input 16; output 2 }\nphase \"p\" { concurrency 1; requests 40 }\n\
         sla { ttft p99.9 < \"45ms\" }\n",
    );
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("warning: `ttft p99.9 < 45ms`"), "{out}");
    assert!(out.contains("can never show its p99.9"), "{out}");
}

/// A search-only plan schedules nothing before it runs (its probes are made as it goes): the
/// example body `llmload plan` shows is still its workload's first request, not an empty one.
#[test]
fn a_search_only_plans_example_body_is_its_workloads() {
    let output = common::llmload()
        .args(["plan", "plans/capacity-search.kdl"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let body = stdout
        .lines()
        .find(|l| l.trim_start().starts_with("body:"))
        .unwrap();
    assert!(
        body.contains("<a prompt of 128 tokens>") && body.contains("\"max_tokens\":64"),
        "{body}"
    );
}
