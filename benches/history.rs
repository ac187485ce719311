//! The history benchmark (not a test): `llmload history` over 1,000 runs, its time and peak
//! memory. One real run is made against the embedded simulator; 1,000 run directories are then
//! written from it, as a month of nightly CI would leave them: the same plan, each run later
//! than the one before, labelled with a commit, its headline numbers moved by a few percent (and
//! every 97th run made 40% slower in TTFT). `cargo bench --bench history`
//! (`LLMLOAD_HISTORY_RUNS`, default 1000); the figures go to docs/performance.md.

#[path = "../tests/common/mod.rs"]
mod common;

use std::path::Path;
use std::process::Command;

const LLMLOAD: &str = env!("CARGO_BIN_EXE_llmload");

fn main() {
    let count: usize = std::env::var("LLMLOAD_HISTORY_RUNS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1000);
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("history-bench");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a directory");
    // A run of 30 s in windows of 100 ms: its summary holds 300 windows of time series, more
    // than most CI runs'.
    let plan = dir.join("plan.kdl");
    std::fs::write(
        &plan,
        "plan \"nightly\" { seed 3; }\ntarget \"sim\" { api \"chat\"; stream #true; }\n\
         sim { ttft \"40ms\"; itl \"5ms\"; jitter \"10ms\"; }\n\
         workload { input 128; output 32 ignore-eos=#true; }\n\
         phase \"steady\" { rate 20; duration \"30s\"; }\nsla { ttft p99 < \"500ms\"; }\n\
         report { interval \"100ms\"; }\n",
    )
    .expect("plan.kdl");
    let base = dir.join("base");
    let ran = Command::new(LLMLOAD)
        .arg("run")
        .arg(&plan)
        .arg("--out")
        .arg(&base)
        .arg("--quiet")
        .status()
        .expect("llmload run");
    assert!(matches!(ran.code(), Some(0 | 1)), "{ran}");
    let summary_text = std::fs::read_to_string(base.join("summary.json")).expect("summary.json");
    let summary: serde_json::Value = serde_json::from_str(&summary_text).expect("JSON");
    let started_ns = summary["context"]["started_unix_ns"].as_u64().unwrap_or(0);

    let runs = dir.join("runs");
    let mut slow = 0;
    for i in 0..count {
        let run = runs.join(format!("run-{i:04}"));
        std::fs::create_dir_all(&run).expect("a run directory");
        std::fs::copy(base.join("plan.kdl"), run.join("plan.kdl")).expect("plan.kdl");
        let mut copy = summary.clone();
        // A day apart, a commit each.
        let at = started_ns + i as u64 * 86_400_000_000_000;
        copy["context"]["started_unix_ns"] = at.into();
        copy["context"]["started_at"] = format!("run {i:04}").into();
        copy["context"]["labels"] = serde_json::json!({ "commit": format!("{:07x}", i * 7919) });
        // A few percent of noise, the same for every run's measures, by a fixed sequence.
        let noise = 1.0 + (((i * 37) % 11) as f64 - 5.0) / 250.0;
        let slower = i % 97 == 96;
        slow += usize::from(slower);
        if let Some(measures) = copy["measures"].as_array_mut() {
            for m in measures {
                let factor = if slower && m["slug"].as_str().unwrap_or("").starts_with("ttft") {
                    noise * 1.4
                } else {
                    noise
                };
                for key in ["value"] {
                    if let Some(v) = m[key].as_f64() {
                        m[key] = (v * factor).into();
                    }
                }
                if let Some(bounds) = m["bounds"].as_array_mut() {
                    for b in bounds {
                        if let Some(v) = b.as_f64() {
                            *b = (v * factor).into();
                        }
                    }
                }
            }
        }
        std::fs::write(
            run.join("summary.json"),
            serde_json::to_string_pretty(&copy).expect("JSON"),
        )
        .expect("summary.json");
    }
    println!("# llmload history benchmark\n");
    println!(
        "{count} runs, each summary.json {:.0} KB (300 windows of time series); {slow} made slower",
        summary_text.len() as f64 / 1024.0
    );
    let run = common::run_measured(
        Command::new(LLMLOAD)
            .arg("history")
            .arg(&runs)
            .arg("--out")
            .arg(dir.join("out"))
            .args(["--label", "commit"]),
    );
    assert_eq!(run.status.code(), Some(0), "{}", run.stdout);
    let (took, peak_mb, stdout) = (run.seconds, run.peak_mb, run.stdout);
    let worse = stdout.lines().filter(|l| l.contains("WORSE")).count();
    let html = std::fs::metadata(dir.join("out").join("history.html")).map_or(0, |m| m.len());
    println!(
        "- llmload history: {:.2} s, peak RSS {peak_mb:.0} MB; history.html {:.0} KB; {worse} runs \
         named worse (of {slow} made slower)",
        took,
        html as f64 / 1024.0
    );
}
