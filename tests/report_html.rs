//! report.html as a reviewer sees it: rendered by headless Chromium for a plain run, a sweep and
//! a search, against the embedded simulator. A probe script (added to a copy of the page, never
//! to the report itself, which has no script) measures what a browser lays out: every chart is
//! there and has a size and marks, no two labels of a chart overlap (their boxes as the browser
//! measured them), and a run with `--baseline` shows the comparison table.
//!
//! Chromium is Debian's package (`apt-get install chromium`, which `.ci/run` does); without it
//! these tests say SKIPPED, unless LLMLOAD_REQUIRE_CHROMIUM is set (CI sets it). With
//! LLMLOAD_SCREENSHOTS set to a directory, each page's screenshot is kept there (how
//! docs/images/ is made).

mod common;

use common::{assert_readable, chromium, run_in, serial, Run};
use serde_json::Value;

const ENGINE: &str = "engine { max-seqs 8; step-base \"2ms\"; decode-per-seq \"500us\"; prefill-per-token \"10us\" }";

/// What the browser measured in the run's report.html; a screenshot is kept when asked.
fn measure(chromium: &str, run: &Run, name: &str) -> Value {
    common::measure_page(
        chromium,
        &run.out().join("report.html"),
        run.dir.path(),
        name,
    )
}

fn plan(body: &str, sla: &str) -> String {
    format!(
        "plan \"report\" {{ seed 5 }}\ntarget \"sim\" {{ timeout \"10s\" }}\nsim {{ {ENGINE} }}\n\
         workload {{ input {{ bucket 32 weight=3; bucket 256 weight=1 }}; output 16 ignore-eos=#true }}\n\
         {body}\nsla {{ {sla} }}\n"
    )
}

#[test]
fn a_plain_run_and_its_comparison_render_readably() {
    let Some(chromium) = chromium() else {
        return;
    };
    let _serial = serial();
    let text = plan(
        "phase \"warmup\" { duration \"500ms\"; rate 20; record #false }\n\
         phase \"comfortable\" { duration \"1500ms\"; rate 20 }\n\
         phase \"busy\" { duration \"1500ms\"; rate 60; arrivals \"poisson\" }",
        // Some 120 requests: enough to decide a p90, not a p99 (that takes 299).
        "ttft p90 < \"200ms\"\nitl p99 < \"50ms\"",
    );
    let first = run_in(tempfile::tempdir().unwrap(), &text, &[]);
    assert!(first.code() <= 1, "{}", first.stderr());
    let measured = measure(chromium, &first, "report-plain");
    assert_readable(
        &measured,
        &[
            "latency-over-time",
            "load-over-time",
            "throughput-over-time",
            "latency-cdf",
            "by-input",
        ],
    );
    assert_eq!(measured["baseline_table"], false);
    // The same plan against the first run: the comparison table is on the page.
    let baseline = first.out();
    let second = run_in(
        tempfile::tempdir().unwrap(),
        &text,
        &["--baseline", baseline.to_str().unwrap()],
    );
    // Some 120 requests of each run cannot hold every default tolerance: not decided (exit 3).
    assert!(matches!(second.code(), 0 | 1 | 3), "{}", second.stderr());
    let measured = measure(chromium, &second, "report-baseline");
    assert_eq!(measured["baseline_table"], true, "{measured}");
    let html = std::fs::read_to_string(second.out().join("report.html")).unwrap();
    assert!(html.contains("<h2 id=\"baseline\">Against the baseline</h2>"));
    // Each change beside its values: baseline → current, in the metric's unit.
    assert!(html.contains("<th>Baseline → current</th>"), "{html}");
    let summary = second.summary();
    let ttft = summary["comparison"]["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| {
            r["metric"]
                .as_str()
                .is_some_and(|m| m.starts_with("ttft p50"))
        })
        .unwrap()
        .clone();
    let shown = format!(
        "<td style=\"white-space: nowrap\">{:.2} ms → {:.2} ms</td>",
        ttft["baseline"].as_f64().unwrap(),
        ttft["current"].as_f64().unwrap()
    );
    assert!(html.contains(&shown), "{shown} not in the page");
    // A row the runs cannot decide says why under its verdict, on the page.
    let summary = second.summary();
    let rows = summary["comparison"]["rows"].as_array().unwrap();
    if let Some(row) = rows.iter().find(|r| r["verdict"] == "not_decided") {
        let why = row["undecided"].as_str().unwrap();
        assert!(
            html.contains("<td class=\"undecided\">not decided<div class=\"why\">"),
            "{html}"
        );
        assert!(why.contains("95% interval"), "{why}");
    }
}

#[test]
fn a_sweep_renders_its_steps_readably() {
    let Some(chromium) = chromium() else {
        return;
    };
    let _serial = serial();
    let run = run_in(
        tempfile::tempdir().unwrap(),
        &plan(
            "sweep \"users\" { concurrency 1 2 4 8 16 32; warmup \"200ms\"; duration \"800ms\" }",
            "ttft p99 < \"40ms\"",
        ),
        &[],
    );
    assert_eq!(run.code(), 0, "{}", run.stderr());
    let measured = measure(chromium, &run, "report-sweep");
    assert_readable(
        &measured,
        &[
            "steps",
            "latency-over-time",
            "load-over-time",
            "throughput-over-time",
        ],
    );
    // Steps each have their load: nothing over all of them together.
    let ids: Vec<&str> = measured["charts"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["id"].as_str())
        .collect();
    assert_eq!(ids[0], "steps", "the result comes first: {ids:?}");
    assert!(!ids.contains(&"latency-cdf") && !ids.contains(&"by-input"));
}

#[test]
fn a_search_renders_its_probes_readably() {
    let Some(chromium) = chromium() else {
        return;
    };
    let _serial = serial();
    let run = run_in(
        tempfile::tempdir().unwrap(),
        &plan(
            // Loads a debug build's client sends on time on a busy machine; the engine's
            // TTFT objective fails within them.
            "search \"capacity\" { rate from=3 to=30; arrivals \"constant\"; warmup \"300ms\"; \
             duration \"1200ms\"; precision \"15%\"; max-probes 8 }",
            "ttft p99 < \"12ms\"\ncapacity >= 1",
        ),
        &[],
    );
    assert_eq!(run.code(), 0, "{}", run.stderr());
    let html = std::fs::read_to_string(run.out().join("report.html")).unwrap();
    // The objective is drawn where it is judged, and every probe is on the curve with its load.
    assert!(
        html.contains("objective: ttft p99 &lt; 12ms"),
        "no objective line"
    );
    let probes = run.summary()["steps"].as_array().unwrap().len();
    assert!(probes >= 4, "{probes} probes");
    let measured = measure(chromium, &run, "report-search");
    assert_readable(&measured, &["steps", "latency-over-time", "load-over-time"]);
}
