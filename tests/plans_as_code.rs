//! Plans as code: shared fragments, values from the environment, `fmt`, `check` over a
//! repository, `init`, through the real binary.

mod common;
use common::*;

use std::path::Path;

fn write(dir: &Path, name: &str, text: &str) -> std::path::PathBuf {
    let path = dir.join(name);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, text).unwrap();
    path
}

const TARGET: &str = "// The team's target.\ntarget \"sim\" {\n    model (env)\"PAC_MODEL\"\n    timeout \"5s\"\n}\nsim { ttft \"2ms\"; itl \"1ms\" }\n";
const SLA: &str = "workload { input 16; output 4 }\nsla {\n    error-rate < \"1%\"\n}\n";

/// A plan built from two included fragments and environment values runs; its run directory
/// holds every file it was built from, with hashes and the values from the environment; its
/// report re-renders from the directory alone.
#[test]
fn a_plan_from_two_fragments_and_the_environment() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "shared/target.kdl", TARGET);
    write(dir.path(), "shared/sla.kdl", SLA);
    let plan = write(
        dir.path(),
        "plans/team.kdl",
        "plan \"team\" { seed 4 }\ninclude \"../shared/target.kdl\"\ninclude \"../shared/sla.kdl\"\nphase \"a\" { concurrency 2; requests (env)\"PAC_REQUESTS:-6\" }\nsla { ttft max < \"1s\" }\n",
    );
    // `requests` takes a count: (env) is for strings only, and the message says where.
    let out = dir.path().join("out");
    let output = run_file(&plan, &out, &[], &[("PAC_MODEL", "team-model".as_ref())]);
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("expected a whole number"));
    let plan = write(
        dir.path(),
        "plans/team.kdl",
        "plan \"team\" { seed 4 }\ninclude \"../shared/target.kdl\"\ninclude \"../shared/sla.kdl\"\nphase \"a\" { concurrency 2; requests 6 }\nsla { ttft max < \"1s\" }\n",
    );
    // Without the variable, the diagnostic names it, in the included file.
    let output = run_file(&plan, &out, &[], &[]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("$PAC_MODEL is not set"), "{stderr}");
    assert!(stderr.contains("shared/target.kdl:3:11"), "{stderr}");
    // With it, the plan runs.
    let output = run_file(&plan, &out, &[], &[("PAC_MODEL", "team-model".as_ref())]);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    let context = &summary["context"];
    assert_eq!(context["model"], "team-model");
    assert_eq!(context["env"]["PAC_MODEL"], "team-model");
    let files: Vec<&str> = context["plan_files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap())
        .collect();
    assert_eq!(files, ["../shared/target.kdl", "../shared/sla.kdl"]);
    // Both assertions: the included file's and the plan's.
    assert_eq!(summary["verdicts"].as_array().unwrap().len(), 2);
    let kept: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("plan-sources.json")).unwrap())
            .unwrap();
    assert_eq!(kept["files"][0]["text"], TARGET);
    assert_eq!(kept["env"]["PAC_MODEL"], "team-model");
    let report = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(report.contains("../shared/target.kdl"), "{report}");
    // The directory alone rebuilds the report: the shared files are gone, and the variable too.
    std::fs::remove_dir_all(dir.path().join("shared")).unwrap();
    let output = llmload().arg("report").arg(&out).output().unwrap();
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let again: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    assert_eq!(again["verdicts"].as_array().unwrap().len(), 2);
}

/// What an including plan may override, and what is a conflict.
#[test]
fn overrides_conflicts_cycles_and_misplaced_phases_are_diagnostics() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "a.kdl", "target \"sim\" { timeout \"5s\" }\n");
    write(dir.path(), "b.kdl", "target \"sim\" { timeout \"9s\" }\n");
    write(dir.path(), "loop1.kdl", "include \"loop2.kdl\"\n");
    write(dir.path(), "loop2.kdl", "include \"loop1.kdl\"\n");
    write(
        dir.path(),
        "phases.kdl",
        "phase \"x\" { rate 1; duration \"1s\" }\n",
    );
    let check = |text: &str| {
        let plan = write(dir.path(), "plan.kdl", text);
        let out = llmload()
            .arg("check")
            .arg(&plan)
            .env("NO_COLOR", "1")
            .output()
            .unwrap();
        (
            out.status.code().unwrap(),
            String::from_utf8_lossy(&out.stdout).into_owned()
                + &String::from_utf8_lossy(&out.stderr),
        )
    };
    let body = "workload { input 1; output 1 }\nphase \"p\" { concurrency 1; requests 1 }\n";
    // The plan's own target replaces the included one.
    let (code, text) = check(&format!(
        "include \"a.kdl\"\ntarget \"sim\" {{ timeout \"7s\" }}\n{body}"
    ));
    assert_eq!(code, 0, "{text}");
    // Two included targets conflict; the diagnostic is in the second file.
    let (code, text) = check(&format!("include \"a.kdl\"\ninclude \"b.kdl\"\n{body}"));
    assert_eq!(code, 2);
    assert!(
        text.contains("`target` comes from two included files"),
        "{text}"
    );
    assert!(text.contains("b.kdl:1:1"), "{text}");
    let (code, text) = check(&format!("include \"loop1.kdl\"\ntarget \"sim\"\n{body}"));
    assert_eq!(code, 2);
    assert!(text.contains("includes itself"), "{text}");
    let (code, text) = check(&format!("include \"phases.kdl\"\ntarget \"sim\"\n{body}"));
    assert_eq!(code, 2);
    assert!(
        text.contains("an included file cannot hold `phase`"),
        "{text}"
    );
    let (code, text) = check(&format!("include \"missing.kdl\"\ntarget \"sim\"\n{body}"));
    assert_eq!(code, 2);
    assert!(text.contains("cannot include missing.kdl"), "{text}");
}

/// The shipped plans are formatted and valid; `fmt` rewrites a messy plan, and `--check` shows
/// a diff and exits 1; a formatted plan compiles to the same schedule.
#[test]
fn fmt_and_check_hold_a_repository_of_plans_to_one_style() {
    let out = llmload()
        .args(["fmt", "--check", "plans/"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let out = llmload().args(["check", "plans/"]).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(stdout.contains("0 with 0 problem(s)"), "{stdout}");

    let dir = tempfile::tempdir().unwrap();
    let messy = "target \"sim\"\nworkload {input 8;output 4}\n\n\n\nphase \"a\" {\nrate 5\n  arrivals \"gamma\" cv=2.0\n      duration \"4s\"  // the steady part\n}\n";
    let path = write(dir.path(), "messy.kdl", messy);
    let schedule = |path: &Path| {
        llmload()
            .args(["plan", "--format", "csv"])
            .arg(path)
            .output()
            .unwrap()
            .stdout
    };
    let before = schedule(&path);
    let out = llmload()
        .args(["fmt", "--check"])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let diff = String::from_utf8_lossy(&out.stdout);
    assert!(
        diff.contains("-workload {input 8;output 4}")
            && diff.contains("+workload { input 8; output 4 }"),
        "{diff}"
    );
    let out = llmload().arg("fmt").arg(&path).output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let formatted = std::fs::read_to_string(&path).unwrap();
    assert_eq!(
        formatted,
        "target \"sim\"\nworkload { input 8; output 4 }\n\nphase \"a\" {\n    rate 5\n    arrivals \"gamma\" cv=2.0\n    duration \"4s\"  // the steady part\n}\n"
    );
    assert_eq!(schedule(&path), before, "formatting changed the schedule");
    let out = llmload()
        .args(["fmt", "--check"])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
}

/// `check` over a directory: every mistake of every file, a summary line, JSON for bots and
/// annotations under GitHub Actions.
#[test]
fn check_a_directory_as_text_json_and_annotations() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "good.kdl",
        "target \"sim\"\nworkload { input 8; output 4 }\nphase \"a\" { rate 1; duration \"2s\" }\n",
    );
    write(dir.path(), "bad.kdl", "target \"sim\"\nworkload { input 8; output 4 }\nphase \"a\" { rate 0; duration \"2s\" }\nphase \"b\" { rate 1; duration 2s }\n");
    write(
        dir.path(),
        "shared/sla.kdl",
        "sla { ttft p99 < \"1s\" phase=\"steady\" }\n",
    );
    write(
        dir.path(),
        "shared/broken.kdl",
        "target \"sim\" { timeout \"forever\" }\n",
    );
    let out = llmload().arg("check").arg(dir.path()).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stdout.contains("shared/sla.kdl: shared file is valid"),
        "{stdout}"
    );
    assert!(
        stdout.contains("checked 4 file(s): 2 valid, 2 with 3 problem(s)"),
        "{stdout}"
    );
    assert!(
        stderr.contains("\"forever\" has no unit") || stderr.contains("forever"),
        "{stderr}"
    );
    let out = llmload()
        .args(["check", "--format", "json"])
        .arg(dir.path())
        .output()
        .unwrap();
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["files"], 4);
    assert_eq!(json["files_with_problems"], 2);
    let first = &json["diagnostics"][0];
    assert!(
        first["file"].as_str().unwrap().ends_with("bad.kdl"),
        "{json}"
    );
    assert_eq!(
        (first["line"].as_u64(), first["column"].as_u64()),
        (Some(3), Some(18)),
        "{json}"
    );
    assert!(
        first["message"]
            .as_str()
            .unwrap()
            .contains("0 is out of range"),
        "{json}"
    );
    let second = &json["diagnostics"][1];
    assert_eq!(
        (second["line"].as_u64(), second["column"].as_u64()),
        (Some(4), Some(30)),
        "{json}"
    );
    assert!(
        second["help"].as_str().unwrap().contains("write \"2s\""),
        "{json}"
    );
    let out = llmload()
        .arg("check")
        .arg(dir.path())
        .env("GITHUB_ACTIONS", "true")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.lines().any(|l| l.starts_with("::error file=")
            && l.contains("bad.kdl,line=3,col=18,title=llmload::0 is out of range")),
        "{stdout}"
    );
}

/// `init` writes a plan that checks, formats and runs as it is, and CI jobs that run it.
#[test]
fn init_writes_a_plan_that_runs() {
    let dir = tempfile::tempdir().unwrap();
    let out = llmload()
        .args(["init", "--ci", "github", "--ci", "gitlab"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    for file in [
        "llmload.kdl",
        ".github/workflows/llmload.yml",
        ".gitlab/llmload.gitlab-ci.yml",
    ] {
        assert!(dir.path().join(file).exists(), "{file}");
    }
    // Not twice without --force.
    let again = llmload().arg("init").arg(dir.path()).output().unwrap();
    assert_eq!(again.status.code(), Some(2));
    let plan = dir.path().join("llmload.kdl");
    let out = llmload()
        .args(["fmt", "--check"])
        .arg(&plan)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    // A shorter steady phase, to keep the test short (some 45 requests: enough to decide its
    // p90, which takes 29); the rest as written.
    let text = std::fs::read_to_string(&plan)
        .unwrap()
        .replace("rate 3; duration \"20s\"", "rate 3; duration \"15s\"");
    std::fs::write(&plan, text).unwrap();
    let output = run_file(&plan, &dir.path().join("report"), &[], &[]);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stdout)
    );
    // Each job, as written (against the simulator: no target is set), works on its first run
    // in the repository. GitLab's llmload commands run through bash, as its runner runs them.
    let bin = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_llmload"), bin.path().join("llmload")).unwrap();
    let path = format!(
        "{}:{}",
        bin.path().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let yaml = std::fs::read_to_string(dir.path().join(".gitlab/llmload.gitlab-ci.yml")).unwrap();
    let commands: Vec<&str> = yaml
        .lines()
        .map(|l| l.trim().trim_start_matches("- "))
        .filter(|l| l.starts_with("llmload "))
        .collect();
    assert_eq!(commands.len(), 2, "{commands:?}");
    for command in &commands {
        let output = std::process::Command::new("bash")
            .args([
                "-c",
                &format!("set -e; baseline=(); code=0; {command}; exit $code"),
            ])
            .current_dir(dir.path())
            .env("PATH", &path)
            .env_remove("GITHUB_STEP_SUMMARY")
            .output()
            .unwrap();
        assert_eq!(
            output.status.code(),
            Some(0),
            "{command}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    for file in ["junit.xml", "metrics.txt"] {
        assert!(
            dir.path().join("llmload-report").join(file).is_file(),
            "{file}"
        );
    }
    // GitHub's job is llmload's action with the workflow's inputs: its run step, run here.
    let _ = std::fs::remove_dir_all(dir.path().join("llmload-report"));
    let yaml = std::fs::read_to_string(dir.path().join(".github/workflows/llmload.yml")).unwrap();
    let input = |name: &str| {
        yaml.lines()
            .find_map(|l| l.trim().strip_prefix(&format!("{name}: ")))
            .unwrap_or_else(|| panic!("no {name}: in {yaml}"))
            .to_string()
    };
    let step = std::process::Command::new("bash")
        .arg(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("deploy/github-action/llmload-action.sh"),
        )
        .arg("run")
        .current_dir(dir.path())
        .env("PATH", &path)
        .env("LLMLOAD_PLAN", input("plan"))
        .env("LLMLOAD_ARGS", input("args"))
        .env_remove("GITHUB_STEP_SUMMARY")
        .env_remove("GITHUB_OUTPUT")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&step.stdout);
    assert!(
        stdout.contains("exit-code=0"),
        "{stdout}{}",
        String::from_utf8_lossy(&step.stderr)
    );
    for file in ["junit.xml", "benchmark.json", "pr-comment.md"] {
        assert!(
            dir.path().join("llmload-report").join(file).is_file(),
            "{file}"
        );
    }
    // Adding a CI job to a repository whose plan was edited keeps the plan.
    std::fs::remove_file(dir.path().join(".gitlab/llmload.gitlab-ci.yml")).unwrap();
    let out = llmload()
        .args(["init", "--ci", "gitlab"])
        .arg(dir.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(
        stdout.contains("kept") && stdout.contains("llmload.kdl"),
        "{stdout}"
    );
    assert!(std::fs::read_to_string(&plan)
        .unwrap()
        .contains("duration \"15s\""));
    assert!(dir.path().join(".gitlab/llmload.gitlab-ci.yml").exists());
}

/// A run without a plan file: its flags become a plan, kept as the run directory's plan.kdl;
/// running that file sends the same schedule (the same hash of `llmload plan --format csv`),
/// and `llmload plan` shows the one-liner's schedule as `run` would send it.
#[test]
fn a_one_line_run_keeps_a_plan_that_repeats_it() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("one");
    let line = [
        "--target",
        "sim",
        "--concurrency",
        "2",
        "--requests",
        "12",
        "--input",
        "64,256",
        "--output",
        "8",
        "--sla",
        "error-rate < 1%",
        "--sla",
        "e2e max < 30s",
    ];
    let output = llmload()
        .args(["run", "-q", "--seed", "9", "--out"])
        .arg(&out)
        .args(line)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let kept = out.join("plan.kdl");
    assert!(
        stdout.contains(&format!("llmload run {}", kept.display())),
        "{stdout}"
    );
    let summary: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("summary.json")).unwrap()).unwrap();
    assert_eq!(
        summary["verdicts"].as_array().map(Vec::len),
        Some(2),
        "{summary}"
    );

    let schedule = |args: &[&str]| {
        let output = llmload()
            .args(["plan", "--format", "csv"])
            .args(args)
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        output.stdout
    };
    let from_line = schedule(&[&["--seed", "9"][..], &line[..]].concat());
    let from_file = schedule(&[kept.to_str().unwrap()]);
    assert!(from_line.len() > 100);
    assert_eq!(
        from_line, from_file,
        "the kept plan sends what the line sent"
    );

    let again = dir.path().join("again");
    let output = run_file(&kept, &again, &[], &[]);
    assert_eq!(output.status.code(), Some(0));
    assert_eq!(read_records(&again).len(), read_records(&out).len());
}

/// `tokenizer "auto"`, the default: a model named by its Hugging Face id gets its own
/// tokenizer.json from the local cache (never a download); where the cache lacks it, the
/// built-in one, and the report's note says how to get the model's.
#[test]
fn the_default_tokenizer_is_the_models_own_from_the_local_cache() {
    let dir = tempfile::tempdir().unwrap();
    let hub = dir.path().join("hub");
    let snapshot = hub.join("models--acme--tiny-chat/snapshots/0123abc");
    std::fs::create_dir_all(&snapshot).unwrap();
    std::fs::create_dir_all(hub.join("models--acme--tiny-chat/refs")).unwrap();
    std::fs::write(hub.join("models--acme--tiny-chat/refs/main"), "0123abc\n").unwrap();
    std::fs::copy(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/word-level-tokenizer.json"),
        snapshot.join("tokenizer.json"),
    )
    .unwrap();
    let plan = write(
        dir.path(),
        "auto.kdl",
        "plan \"auto\" { seed 1 }\ntarget \"sim\" { model \"acme/tiny-chat\" }\nsim { ttft \"2ms\"; itl \"1ms\" }\nworkload { input 16; output 4 }\nphase \"a\" { concurrency 2; requests 4 }\n",
    );
    let run = |out: &str, hub: &std::path::Path| {
        let out = dir.path().join(out);
        let output = run_file(&plan, &out, &[], &[("HF_HUB_CACHE", hub.as_os_str())]);
        assert_eq!(
            output.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        serde_json::from_slice::<serde_json::Value>(
            &std::fs::read(out.join("summary.json")).unwrap(),
        )
        .unwrap()
    };
    let cached = run("cached", &hub);
    assert_eq!(
        cached["context"]["tokenizer"].as_str().unwrap(),
        snapshot.join("tokenizer.json").display().to_string()
    );
    let note = warning_of(&cached, "tokenizer-auto").expect("a note says which tokenizer");
    assert!(
        note["message"]
            .as_str()
            .unwrap()
            .contains("acme/tiny-chat's own"),
        "{note}"
    );

    let missing = run("missing", &dir.path().join("empty"));
    assert_eq!(missing["context"]["tokenizer"], "cl100k_base");
    let note = warning_of(&missing, "tokenizer-auto").unwrap()["message"].to_string();
    assert!(
        note.contains("huggingface-cli download acme/tiny-chat tokenizer.json"),
        "{note}"
    );
    // A model that is not an id (the simulator's own name) has no note: nothing was looked up.
    let plain = write(
        dir.path(),
        "plain.kdl",
        &std::fs::read_to_string(&plan)
            .unwrap()
            .replace("acme/tiny-chat", "tiny"),
    );
    let out = dir.path().join("plain");
    assert_eq!(run_file(&plain, &out, &[], &[]).status.code(), Some(0));
    let summary: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("summary.json")).unwrap()).unwrap();
    assert!(warning_of(&summary, "tokenizer-auto").is_none());
}
