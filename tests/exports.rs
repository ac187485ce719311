//! `--export FORMAT FILE`: a run's headline numbers for continuous-benchmarking tools, written by
//! `run` and by `report`, checked against the shapes those tools read (Bencher Metric Format;
//! github-action-benchmark's custom JSON).

mod common;

use common::{llmload, run_in, sim_plan};
use serde_json::Value;

fn read(path: &std::path::Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// BMF: `{benchmark: {measure: {value, lower_value?, upper_value?}}}`, bounds around the value
/// (an end the sample cannot bound is left out: both are optional in BMF).
fn assert_bmf(bmf: &Value) -> &serde_json::Map<String, Value> {
    let benchmarks = bmf.as_object().expect("an object of benchmarks");
    assert_eq!(benchmarks.len(), 1, "{bmf}");
    let measures = benchmarks.values().next().unwrap().as_object().unwrap();
    for (slug, m) in measures {
        assert!(slug
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'));
        let value = m["value"].as_f64().unwrap();
        let low = m.get("lower_value").map_or(value, |v| v.as_f64().unwrap());
        let high = m.get("upper_value").map_or(value, |v| v.as_f64().unwrap());
        assert!(low <= value && value <= high, "{slug}: {m}");
        assert!(
            m.get("lower_value").is_some() || m.get("upper_value").is_some(),
            "{m}"
        );
    }
    measures
}

/// github-action-benchmark: `[{name, unit, value, range?, extra?}]`.
fn assert_gab(gab: &Value, units: &[&str]) -> Vec<String> {
    gab.as_array()
        .expect("an array")
        .iter()
        .map(|entry| {
            assert!(entry["value"].as_f64().is_some(), "{entry}");
            let unit = entry["unit"].as_str().unwrap();
            assert!(units.contains(&unit), "{unit} in {entry}");
            entry["name"].as_str().unwrap().to_string()
        })
        .collect()
}

#[test]
fn a_run_exports_bmf_and_github_action_benchmark_and_report_does_too() {
    let dir = tempfile::tempdir().unwrap();
    let at = |name: &str| dir.path().join(name).display().to_string();
    let (bmf_path, smaller_path, bigger_path) = (
        at("bmf.json"),
        at("exports/smaller.json"),
        at("exports/bigger.json"),
    );
    // A file outside the run's --out goes in a directory that exists (as --junit's).
    std::fs::create_dir(dir.path().join("exports")).unwrap();
    let run = run_in(
        tempfile::tempdir().unwrap(),
        &sim_plan(
            "ttft \"20ms\"; itl \"5ms\"",
            "input 32; output 16",
            "phase \"steady\" { rate 20; duration \"2s\" }",
            "ttft max < \"1s\"",
        ),
        &[
            "--export",
            "gitlab-metrics",
            &at("metrics.txt"),
            "--export",
            "bmf",
            &bmf_path,
            "--export",
            "github-action-benchmark",
            &smaller_path,
            "--export",
            "github-action-benchmark-bigger",
            &bigger_path,
        ],
    );
    assert_eq!(run.code(), 0, "{}", run.stderr());
    let bmf = read(std::path::Path::new(&bmf_path));
    let measures = assert_bmf(&bmf);
    for slug in [
        "ttft-p99-ms",
        "itl-p99-ms",
        "e2e-p99-ms",
        "requests-per-second",
        "error-rate-percent",
    ] {
        assert!(measures.contains_key(slug), "no {slug}: {bmf}");
    }
    // The simulator's TTFT is 20 ms: its p99's interval holds it.
    let ttft = &measures["ttft-p99-ms"];
    assert!(ttft["lower_value"].as_f64().unwrap() >= 19.0, "{ttft}");
    // Of 40 requests, p99's interval needs a 42nd: its upper end is not claimed; p50's is.
    assert!(ttft.get("upper_value").is_none(), "{ttft}");
    assert!(
        measures["ttft-p50-ms"].get("upper_value").is_some(),
        "{bmf}"
    );
    // GitLab's metrics report: `name value` lines, OpenMetrics names, BMF's values.
    let metrics = std::fs::read_to_string(at("metrics.txt")).unwrap();
    for line in metrics.lines() {
        let (name, value) = line.split_once(' ').unwrap();
        assert!(
            name.starts_with("llmload_")
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
            "{line}"
        );
        let slug = name["llmload_".len()..].replace('_', "-");
        assert_eq!(
            value.parse::<f64>().unwrap(),
            measures[&slug]["value"].as_f64().unwrap(),
            "{line}"
        );
    }
    assert!(metrics.contains("llmload_ttft_p99_ms "), "{metrics}");
    let smaller = assert_gab(&read(std::path::Path::new(&smaller_path)), &["ms", "%"]);
    assert!(
        smaller.iter().any(|n| n.ends_with(": ttft p99")),
        "{smaller:?}"
    );
    let bigger = assert_gab(
        &read(std::path::Path::new(&bigger_path)),
        &["req/s", "tok/s", "load"],
    );
    assert!(
        bigger.iter().any(|n| n.ends_with(": output throughput")),
        "{bigger:?}"
    );
    // `report` re-renders the run and exports the same numbers.
    let again = dir.path().join("again.json");
    let status = llmload()
        .arg("report")
        .arg(run.out())
        .args(["--export", "bmf"])
        .arg(&again)
        .output()
        .unwrap();
    assert!(
        status.status.success(),
        "{}",
        String::from_utf8_lossy(&status.stderr)
    );
    assert_eq!(read(&again), bmf);
    // A format it does not know is a usage error before anything runs.
    let wrong = llmload()
        .arg("report")
        .arg(run.out())
        .args(["--export", "csv"])
        .arg(dir.path().join("x.json"))
        .output()
        .unwrap();
    assert_eq!(wrong.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&wrong.stderr).contains("use one of bmf"));
}

#[test]
fn the_plan_chooses_what_is_exported() {
    let dir = tempfile::tempdir().unwrap();
    let bmf_path = dir.path().join("bmf.json").display().to_string();
    let plan = sim_plan(
        "ttft \"20ms\"",
        "input 32; output 8",
        "phase \"steady\" { rate 20; duration \"1s\" }\nreport { export \"ttft-p99-ms\" \"requests-per-second\" }",
        "ttft max < \"1s\"",
    );
    let run = run_in(
        tempfile::tempdir().unwrap(),
        &plan,
        &["--export", "bmf", &bmf_path],
    );
    assert_eq!(run.code(), 0, "{}", run.stderr());
    let bmf = read(std::path::Path::new(&bmf_path));
    let chosen: Vec<&String> = assert_bmf(&bmf).keys().collect();
    assert_eq!(chosen, ["requests-per-second", "ttft-p99-ms"]);
    // A measure it does not know is a plan diagnostic, naming those it does.
    let wrong = run_in(
        tempfile::tempdir().unwrap(),
        &plan.replace("\"requests-per-second\"", "\"ttft-p95\""),
        &[],
    );
    assert_eq!(wrong.code(), 2);
    let stderr = wrong.stderr().replace('│', " ");
    let stderr = stderr.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        stderr.contains("`ttft-p95` is not a measure llmload exports")
            && stderr.contains("one of: ttft-p50-ms"),
        "{stderr}"
    );
}

/// `--export vllm-bench`: vLLM's `--save-result --save-detailed` JSON, in its units and by its
/// definitions, over the recorded phases: per-request arrays aligned, failed requests kept as
/// vLLM keeps them, ITL per chunk (two tokens a chunk here: 10 ms gaps where llmload's own ITL
/// says 5 ms), and its statistics recomputed from its own arrays.
#[test]
fn a_run_exports_the_result_json_of_vllm_bench_serve() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("vllm.json");
    let run = run_in(
        tempfile::tempdir().unwrap(),
        &sim_plan(
            "ttft \"20ms\"; itl \"5ms\"; tokens-per-chunk 2; faults { http-5xx \"15%\" }",
            "input 32; output 16 ignore-eos=#true",
            "phase \"warmup\" { concurrency 2; requests 6; record #false }\nphase \"steady\" { concurrency 4; requests 60 }",
            "e2e max < \"10s\"",
        ),
        &["--export", "vllm-bench", path.to_str().unwrap()],
    );
    assert!(matches!(run.code(), 0 | 1), "{}", run.stderr());
    let result = read(&path);
    let number = |key: &str| {
        result[key]
            .as_f64()
            .unwrap_or_else(|| panic!("{key}: {result}"))
    };
    assert_eq!(result["num_prompts"], 60, "the warmup is left out");
    let (completed, failed) = (number("completed"), number("failed"));
    assert_eq!(completed + failed, 60.0);
    assert!(
        failed > 0.0 && completed > 30.0,
        "{completed} ok, {failed} failed"
    );
    for key in [
        "input_lens",
        "output_lens",
        "ttfts",
        "itls",
        "latencies",
        "start_times",
        "errors",
    ] {
        assert_eq!(result[key].as_array().map(Vec::len), Some(60), "{key}");
    }
    let errors = result["errors"].as_array().unwrap();
    let ok: Vec<usize> = (0..60).filter(|&i| errors[i] == "").collect();
    assert_eq!(ok.len() as f64, completed);
    for i in (0..60).filter(|i| !ok.contains(i)) {
        assert_eq!(result["ttfts"][i], 0.0);
        assert_eq!(result["output_lens"][i], 0);
        assert_eq!(result["itls"][i].as_array().map(Vec::len), Some(0));
        assert!(
            errors[i].as_str().unwrap().starts_with("http"),
            "{}",
            errors[i]
        );
    }
    assert_eq!(number("total_output_tokens"), completed * 16.0);
    assert_eq!(number("max_concurrency"), 4.0);
    assert!((1.0..=4.0).contains(&number("max_concurrent_requests")));
    assert_eq!(result["request_rate"], "inf");
    assert_eq!(result["backend"], "openai-chat");
    // The statistics are vLLM's over its own arrays: the mean TTFT of the successful requests.
    let ttfts: Vec<f64> = ok
        .iter()
        .map(|&i| result["ttfts"][i].as_f64().unwrap())
        .collect();
    let mean_ms = ttfts.iter().sum::<f64>() / ttfts.len() as f64 * 1e3;
    assert!((mean_ms - number("mean_ttft_ms")).abs() < 1e-6, "{mean_ms}");
    assert!((19.0..30.0).contains(&number("median_ttft_ms")));
    // ITL per chunk (2 tokens every 10 ms); TPOT per token, as vLLM has them.
    assert!((9.0..12.0).contains(&number("median_itl_ms")), "{result}");
    assert!((4.5..6.0).contains(&number("median_tpot_ms")), "{result}");
    let gaps = result["itls"][ok[0]].as_array().unwrap();
    assert_eq!(gaps.len(), 7, "16 tokens in 8 chunks: 7 gaps");
    assert!(number("p99_e2el_ms") >= number("median_e2el_ms"));
    assert!(result["request_goodput"].is_null(), "no slo, no goodput");
}

/// `report DIR` rewrites what it is asked to and never deletes silently what the run wrote by
/// request (JUnit, exports): it keeps them and says so, or removes them with --clean, saying so.
#[test]
fn report_keeps_the_runs_junit_and_exports_unless_told_to_clean() {
    let dir = tempfile::tempdir().unwrap();
    let (junit, bmf) = (
        dir.path().join("out/junit.xml"),
        dir.path().join("out/bmf.json"),
    );
    let run = run_in(
        dir,
        &sim_plan(
            "ttft \"5ms\"; itl \"1ms\"",
            "input 16; output 4",
            "phase \"a\" { concurrency 2; requests 10 }",
            "e2e max < \"10s\"",
        ),
        &[
            "--junit",
            junit.to_str().unwrap(),
            "--export",
            "bmf",
            bmf.to_str().unwrap(),
        ],
    );
    assert_eq!(run.code(), 0, "{}", run.stderr());
    let out = run.out();
    for name in ["junit.xml", "bmf.json"] {
        assert!(out.join(name).is_file(), "{name}");
    }
    let report = |args: &[&str]| {
        let output = llmload()
            .arg("report")
            .arg(&out)
            .args(args)
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stderr).into_owned()
    };
    // Asked for JUnit again: rewritten; the export not asked for: kept, and said.
    let said = report(&["--junit", out.join("junit.xml").to_str().unwrap()]);
    assert!(out.join("junit.xml").is_file() && out.join("bmf.json").is_file());
    assert!(
        said.contains("kept bmf.json") && !said.contains("junit.xml"),
        "{said}"
    );
    // Kept files stay in the manifest: a later --clean still finds them.
    let said = report(&["--clean"]);
    assert!(!out.join("junit.xml").exists() && !out.join("bmf.json").exists());
    assert!(
        said.contains("removed") && said.contains("bmf.json") && said.contains("junit.xml"),
        "{said}"
    );
    assert!(out.join("report.md").is_file() && out.join("records.jsonl").is_file());
}

/// summary.csv holds a `value` row for every metric of the table that is one value per scope
/// (shares, rates per second, aggregates) wherever summary.json has one: goodput and its
/// ratio, the prefix cache's hit rate and the throughputs alike, each in its unit.
#[test]
fn summary_csv_has_a_row_for_every_scope_metric_the_run_has() {
    let plan = format!(
        "{}slo ttft=\"1s\"\n",
        sim_plan(
            // An engine keeps a prefix cache and says what it served from it.
            "engine { max-seqs 4 }",
            "tokenizer \"cl100k_base\"; input 64; output 8; prefix 128",
            "phase \"p\" { concurrency 2; requests 20 }",
            "",
        )
    );
    let run = common::run_plan(&plan, &[]);
    assert_eq!(run.code(), 0, "{}", run.stderr());
    let csv = std::fs::read_to_string(run.out().join("summary.csv")).unwrap();
    let rows: Vec<Vec<&str>> = csv.lines().map(|l| l.split(',').collect()).collect();
    let value_of = |scope: &str, metric: &str| {
        rows.iter()
            .find(|r| r[0] == scope && r[1] == metric && r[2] == "value")
            .map(|r| (r[3].parse::<f64>().unwrap(), r[4].to_string()))
    };
    let summary = run.summary();
    let overall = &summary["overall"];
    for (metric, json, unit) in [
        (
            "goodput",
            &overall["goodput"]["requests_per_s"],
            "requests/s",
        ),
        ("goodput-ratio", &overall["goodput"]["ratio"], "fraction"),
        (
            "prefix-cache-hit-rate",
            &overall["prefix_cache"]["hit_rate"],
            "fraction",
        ),
        (
            "request-throughput",
            &overall["throughput"]["requests_per_s"],
            "requests/s",
        ),
        (
            "output-throughput",
            &overall["throughput"]["output_tokens_per_s"],
            "tokens/s",
        ),
        ("error-rate", &overall["rates"]["error_rate"], "fraction"),
    ] {
        let expected = json.as_f64().unwrap_or_else(|| panic!("{metric}: {json}"));
        for scope in ["all", "p"] {
            let (value, in_unit) = value_of(scope, metric)
                .unwrap_or_else(|| panic!("no {scope} {metric} row:\n{csv}"));
            assert_eq!(in_unit, unit, "{metric}");
            if scope == "all" {
                assert!(
                    (value - expected).abs() <= 1e-9 * expected.abs().max(1.0),
                    "{metric}"
                );
            }
        }
    }
    // Asked of no answer: no row rather than a zero.
    assert!(value_of("all", "invalid-json-rate").is_none(), "{csv}");
}
