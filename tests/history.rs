//! `llmload history`: a history of real runs against the simulator, some made slower on purpose
//! (the server, not the plan: the plan is the same file every time), labelled with fake commits.
//! The page names exactly the slow ones; runs of another plan are kept apart; a run without its
//! summary is judged again from its records; a directory that is not a run is named as left out.
//! history.html is rendered in headless Chromium (as tests/report_html.rs does report.html) when
//! it is installed.

mod common;

use common::*;
use std::path::{Path, PathBuf};

const PLAN: &str = r#"plan "nightly" { seed 9; }
target "http://127.0.0.1:9" { api "chat"; stream #true; model "m"; timeout "10s"; }
workload { input 64; output 8 ignore-eos=#true; }
phase "steady" { rate 20; duration "2s"; }
sla { ttft p50 < "200ms"; }
"#;

/// The simulator as its own process: TTFT `ttft_ms` with a jitter drawn from its own `seed`,
/// so that normal runs differ as real ones do.
fn server(ttft_ms: u32, seed: u32) -> SimProcess {
    SimProcess::start(&format!(
        "sim {{ ttft \"{ttft_ms}ms\"; itl \"10ms\"; jitter \"20ms\"; seed {seed} }}\n"
    ))
}

fn run(plan: &Path, out: &Path, sim: &SimProcess, commit: &str) {
    let ran = llmload()
        .arg("run")
        .arg(plan)
        .arg("--out")
        .arg(out)
        .arg("--quiet")
        .args(["--target", &sim.url, "--label", &format!("commit={commit}")])
        .output()
        .unwrap();
    assert!(
        matches!(ran.status.code(), Some(0 | 1)),
        "{}",
        String::from_utf8_lossy(&ran.stderr)
    );
}

#[test]
fn a_history_of_runs_names_exactly_the_slow_ones() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let runs = dir.path().join("runs");
    let plan = write_plan(dir.path(), PLAN);
    // Runs 5 and 8 (of 11) meet a server three times slower to its first token.
    let slow = ["c05", "c08"];
    for n in 1..=11u32 {
        let commit = format!("c{n:02}");
        let ttft = if slow.contains(&commit.as_str()) {
            300
        } else {
            100
        };
        let sim = server(ttft, n);
        run(&plan, &runs.join(format!("run-{n:02}")), &sim, &commit);
    }
    // A run of another plan in the same folder, and a folder that is not a run.
    std::fs::create_dir_all(dir.path().join("other")).unwrap();
    let other = write_plan(
        &dir.path().join("other"),
        &PLAN.replace("\"nightly\"", "\"other\""),
    );
    run(&other, &runs.join("other-01"), &server(100, 99), "x01");
    std::fs::create_dir_all(runs.join("notes")).unwrap();
    std::fs::write(runs.join("notes").join("README"), "not a run").unwrap();
    // A run whose summary is gone is judged again from its records.
    std::fs::remove_file(runs.join("run-02").join("summary.json")).unwrap();
    // A run directory whose records are damaged is left out, and said so.
    let broken = runs.join("run-broken");
    std::fs::create_dir_all(&broken).unwrap();
    std::fs::copy(
        runs.join("run-01").join("plan.kdl"),
        broken.join("plan.kdl"),
    )
    .unwrap();
    std::fs::write(broken.join("records.jsonl"), "not json\n{}\n").unwrap();

    let out = dir.path().join("history");
    let history = llmload()
        .arg("history")
        .arg(&runs)
        .arg("--out")
        .arg(&out)
        .args(["--label", "commit"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&history.stdout).to_string();
    assert_eq!(
        history.status.code(),
        Some(0),
        "{stdout}{}",
        String::from_utf8_lossy(&history.stderr)
    );
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("history.json")).unwrap()).unwrap();
    let plans = json["plans"].as_array().unwrap();
    let names: Vec<&str> = plans.iter().map(|p| p["plan"].as_str().unwrap()).collect();
    assert_eq!(names, ["nightly", "other"], "runs of two plans kept apart");
    let nightly = &plans[0];
    let runs_seen: Vec<&str> = nightly["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["label"].as_str().unwrap())
        .collect();
    let expected: Vec<String> = (1..=11).map(|n| format!("c{n:02}")).collect();
    assert_eq!(
        runs_seen, expected,
        "in the order they ran, named by commit"
    );
    assert!(nightly["runs"][1]["measures"].as_array().unwrap().len() >= 5);

    // Exactly the slow runs stand out, each worse in TTFT. A run its client limited (a stall on
    // a loaded 2-core runner: schedule lag, a client stall) is set apart instead, as the history
    // should: listed, never standing out. At least one slow run must be judged.
    let page = std::fs::read_to_string(out.join("history.md")).unwrap();
    let set_apart: Vec<&str> = nightly["runs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["set_apart"].is_string())
        .map(|r| r["label"].as_str().unwrap())
        .collect();
    let slow: Vec<&str> = slow
        .into_iter()
        .filter(|commit| !set_apart.contains(commit))
        .collect();
    assert!(!slow.is_empty(), "every slow run was set apart: {page}");
    let stand_outs = nightly["stand_outs"].as_array().unwrap();
    let mut named: Vec<&str> = stand_outs
        .iter()
        .map(|s| s["run_name"].as_str().unwrap())
        .collect();
    named.dedup();
    assert_eq!(named, slow, "{page}");
    for &commit in &slow {
        assert!(
            stand_outs.iter().any(|s| s["run_name"] == commit
                && s["slug"] == "ttft-p50-ms"
                && s["change"] == "worse"),
            "{page}"
        );
    }
    assert!(stand_outs.iter().all(|s| s["change"] == "worse"), "{page}");

    // The pages say the same: history.md names the slow commits as worse, and no other.
    let worse_lines: Vec<&str> = page.lines().filter(|l| l.contains("**worse**")).collect();
    assert!(!worse_lines.is_empty());
    for line in &worse_lines {
        assert!(slow.iter().any(|c| line.contains(c)), "{line}");
    }
    for commit in &slow {
        assert!(worse_lines.iter().any(|l| l.contains(commit)), "{page}");
    }
    let html = std::fs::read_to_string(out.join("history.html")).unwrap();
    assert!(html.contains("<svg") && html.contains("c05") && html.contains("c08"));
    assert!(html.contains("id=\"chart-ttft-p50-ms\""));
    // The charts' axis names the runs by their commit, as `--label commit` asked.
    assert!(
        html.contains(">c01</text>") && html.contains(">c11</text>"),
        "{html}"
    );
    // As a reader's browser lays it out: every chart drawn with its marks, no label over another.
    if let Some(chromium) = chromium() {
        let measured = measure_page(chromium, &out.join("history.html"), dir.path(), "history");
        assert_readable(
            &measured,
            &[
                "chart-ttft-p50-ms",
                "chart-ttft-p99-ms",
                "chart-e2e-p99-ms",
                "chart-requests-per-second",
            ],
        );
    }
    // The slow runs failed their objective (TTFT p50 < 200 ms): the table says so.
    assert!(page.contains("❌ fail"), "{page}");
    // The terminal names them too, and what was left out.
    assert!(
        stdout.contains("WORSE") && slow.iter().all(|commit| stdout.contains(commit)),
        "{stdout}"
    );
    assert!(stdout.contains("run-broken"), "{stdout}");
    assert!(!stdout.contains("notes"), "{stdout}");
    let skipped: Vec<PathBuf> = json["skipped"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| PathBuf::from(s["dir"].as_str().unwrap()))
        .collect();
    assert_eq!(skipped, [broken]);

    // --format json prints history.json.
    let as_json = llmload()
        .arg("history")
        .arg(&runs)
        .arg("--out")
        .arg(dir.path().join("h2"))
        .args(["--format", "json"])
        .output()
        .unwrap();
    let printed: serde_json::Value = serde_json::from_slice(&as_json.stdout).unwrap();
    assert_eq!(printed["plans"].as_array().unwrap().len(), 2);
}

#[test]
fn a_history_of_nothing_says_what_to_give() {
    let dir = tempfile::tempdir().unwrap();
    let empty = llmload()
        .arg("history")
        .arg(dir.path())
        .arg("--out")
        .arg(dir.path().join("h"))
        .output()
        .unwrap();
    assert_eq!(empty.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&empty.stderr);
    assert!(stderr.contains("no llmload run in"), "{stderr}");
    let missing = llmload()
        .arg("history")
        .arg(dir.path().join("nope"))
        .output()
        .unwrap();
    assert_eq!(missing.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("is not a directory"));
}
