//! Seeing what happened: server telemetry scraped during a run (the simulator's vLLM names, and
//! SGLang, TGI and llama.cpp names from a hand-written server), assertions on it, the time
//! series, the per-input table, error samples, labels, and report.html (parsed; rendered to a
//! screenshot where Chromium is installed).

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};

use common::{run_plan, sim_plan};

fn engine_sim() -> &'static str {
    "engine { max-seqs 4; step-base \"2ms\"; decode-per-seq \"1ms\" }"
}

#[test]
fn the_simulators_metrics_are_scraped_summarised_and_asserted() {
    let plan = sim_plan(
        engine_sim(),
        "input { bucket 32 weight=1; bucket 256 weight=1 }; output 16 ignore-eos=#true",
        "phase \"steady\" { rate 40; duration \"2500ms\" }",
        "server-kv-cache max < \"95%\" phase=\"steady\"\nserver-preemptions < 1 phase=\"steady\"\nserver-running max <= 4 phase=\"steady\"\nserver-ttft p99 < \"10s\"",
    )
    .replace("target \"sim\" {", "target \"sim\" { metrics interval=\"200ms\";");
    let run = run_plan(&plan, &["--label", "commit=abc123", "--label", "gpu=none"]);
    assert_eq!(run.code(), 0, "{}", run.stderr());
    let summary = run.summary();
    let server = &summary["server"];
    assert_eq!(server["engine"], "vLLM", "{server}");
    assert!(server["samples"].as_u64().unwrap() >= 8, "{server}");
    assert!(server["server_version"]
        .as_str()
        .unwrap()
        .contains("llmload-sim"));
    let steady = summary["phases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "steady")
        .unwrap();
    let signals = &steady["server"]["signals"];
    assert!(
        signals["running"]["max"].as_f64().unwrap() <= 4.0,
        "{signals}"
    );
    assert!(
        signals["running"]["mean"].as_f64().unwrap() > 0.0,
        "{signals}"
    );
    assert!(
        signals["generation_tokens"]["delta"].as_f64().unwrap() > 0.0,
        "{signals}"
    );
    // The server's TTFT histogram counted the phase's requests.
    let observations = signals["ttft"]["delta"].as_f64().unwrap();
    let ok = steady["requests"]["ok"].as_f64().unwrap();
    assert!(observations >= ok * 0.8, "{observations} against {ok}");
    // Every server assertion was judged on numbers, not "no data".
    for v in summary["verdicts"].as_array().unwrap() {
        assert!(v["observed"].is_number(), "{v}");
    }
    // The run over time covers it, and every request sent is in one window.
    let series = &summary["timeseries"];
    let sent: u64 = series["points"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["sent"].as_u64().unwrap())
        .sum();
    assert_eq!(
        sent,
        summary["overall"]["requests"]["sent"].as_u64().unwrap()
    );
    let csv = std::fs::read_to_string(run.out().join("timeseries.csv")).unwrap();
    assert!(csv.starts_with(
        "t_s,phase,sent,completed,failed,throttled,in_flight,output_tokens_per_s,ttft_p50_ms"
    ));
    assert!(csv.lines().count() >= 3, "{csv}");
    // By input length, and the labels, in every report.
    assert_eq!(summary["by_input"].as_array().unwrap().len(), 2);
    assert_eq!(summary["context"]["labels"]["commit"], "abc123");
    let report = std::fs::read_to_string(run.out().join("report.md")).unwrap();
    for expected in [
        "## By input length",
        "## The server's own numbers",
        "## Over time",
        "xychart-beta",
        "| Label `commit` | abc123 |",
        "| Server version | `llmload-sim",
    ] {
        assert!(
            report.contains(expected),
            "{expected} missing from\n{report}"
        );
    }
    let html = std::fs::read_to_string(run.out().join("report.html")).unwrap();
    assert!(html.contains("commit=abc123"));

    // A server assertion that cannot hold fails the run like any other.
    let strict = plan.replace("server-running max <= 4", "server-running max < 1");
    let run = run_plan(&strict, &[]);
    assert_eq!(run.code(), 1, "{}", run.stderr());
    assert!(run.summary()["verdict"]["reasons"][0]
        .as_str()
        .unwrap()
        .contains("server-running max < 1"));
}

#[test]
fn a_server_without_metrics_is_a_note_and_an_assertion_on_it_is_not_decided() {
    let plan = sim_plan(
        "ttft \"5ms\"; itl \"1ms\"",
        "input 16; output 4",
        "phase \"p\" { rate 20; duration \"500ms\" }",
        "error-rate < \"1%\"",
    )
    .replace(
        "target \"sim\" {",
        "target \"sim\" { metrics \"http://127.0.0.1:1/metrics\";",
    );
    let run = run_plan(&plan, &[]);
    assert_eq!(run.code(), 0, "{}", run.stderr());
    let warnings = run.summary()["warnings"].to_string();
    assert!(warnings.contains("no-telemetry"), "{warnings}");
    assert!(warnings.contains("cannot connect"), "{warnings}");
    let asserted = plan.replace("error-rate < \"1%\"", "server-waiting max < 10");
    let run = run_plan(&asserted, &[]);
    assert_eq!(run.code(), 3);
    assert_eq!(run.summary()["verdict"]["status"], "not_decided");
    assert_eq!(
        run.summary()["verdicts"][0]["observed_display"],
        "no server telemetry"
    );
    // `metrics #false`: not even tried.
    let off = plan.replace("metrics \"http://127.0.0.1:1/metrics\"", "metrics #false");
    let run = run_plan(&off, &[]);
    assert!(!run.out().join("telemetry.jsonl").exists());
}

/// A server that speaks `engine`'s metric names, answers chat completions with a short stream,
/// and fails one request in five with a 503 and a message.
fn serve(metrics: &'static str) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for (count, stream) in listener.incoming().enumerate() {
            let Ok(stream) = stream else { return };
            let n = count as u64 + 1;
            std::thread::spawn(move || answer(stream, metrics, n));
        }
    });
    format!("http://127.0.0.1:{port}")
}

fn answer(mut stream: TcpStream, metrics: &str, n: u64) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut request_line = String::new();
    if reader.read_line(&mut request_line).is_err() {
        return;
    }
    let mut length = 0usize;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
            break;
        }
        if let Some(v) = line.to_lowercase().strip_prefix("content-length:") {
            length = v.trim().parse().unwrap_or(0);
        }
    }
    let mut body = vec![0; length];
    let _ = reader.read_exact(&mut body);
    let respond = |stream: &mut TcpStream, status: &str, kind: &str, body: &str| {
        let _ = write!(
            stream,
            "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
    };
    if request_line.starts_with("GET /metrics") {
        respond(&mut stream, "200 OK", "text/plain", metrics);
    } else if request_line.starts_with("GET") {
        respond(&mut stream, "404 Not Found", "text/plain", "not found");
    } else if n % 5 == 0 {
        respond(
            &mut stream,
            "503 Service Unavailable",
            "application/json",
            "{\"error\":{\"message\":\"the engine is overloaded, retry later\"}}",
        );
    } else {
        let chunk = |text: &str| {
            format!(
                "data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{text}\"}}}}]}}\n\n"
            )
        };
        let events = format!(
            "{}{}data: {{\"choices\":[{{\"index\":0,\"delta\":{{}},\"finish_reason\":\"length\"}}],\"usage\":{{\"prompt_tokens\":16,\"completion_tokens\":2}}}}\n\ndata: [DONE]\n\n",
            chunk("hello"),
            chunk(" world")
        );
        respond(&mut stream, "200 OK", "text/event-stream", &events);
    }
    let _ = stream.flush();
}

#[test]
fn sglang_tgi_and_llama_cpp_names_are_known_and_errors_are_sampled() {
    let engines = [
        (
            "SGLang",
            "sglang:num_running_reqs{model_name=\"m\"} 3\nsglang:num_queue_reqs{model_name=\"m\"} 1\nsglang:token_usage{model_name=\"m\"} 0.42\nsglang:time_to_first_token_seconds_bucket{le=\"0.1\"} 10\nsglang:time_to_first_token_seconds_bucket{le=\"+Inf\"} 12\nsglang:time_to_first_token_seconds_sum 1.0\nsglang:time_to_first_token_seconds_count 12\n",
        ),
        (
            "TGI",
            "tgi_batch_current_size 3\ntgi_queue_size 1\ntgi_request_queue_duration_bucket{le=\"0.01\"} 5\ntgi_request_queue_duration_bucket{le=\"+Inf\"} 6\ntgi_request_queue_duration_sum 0.05\ntgi_request_queue_duration_count 6\n",
        ),
        (
            "llama.cpp",
            "# HELP llamacpp:requests_processing Number of requests processing.\n# TYPE llamacpp:requests_processing gauge\nllamacpp:requests_processing 3\nllamacpp:requests_deferred 1\nllamacpp:tokens_predicted_total 100\n",
        ),
    ];
    for (engine, metrics) in engines {
        let url = serve(metrics);
        let plan = format!(
            "plan \"t\" {{ seed 1 }}\ntarget \"{url}\" {{ model \"m\"; timeout \"5s\"; metrics interval=\"200ms\" }}\nworkload {{ input 16; output 2 }}\nphase \"p\" {{ rate 20; duration \"1s\" }}\nsla {{ server-running max < 10 }}\n"
        );
        let run = run_plan(&plan, &[]);
        // One request in five failed, so the run is judged and the error rate shows; the gate
        // is only the server assertion.
        assert_eq!(run.code(), 0, "{engine}: {}", run.stderr());
        let summary = run.summary();
        assert_eq!(summary["server"]["engine"], engine);
        assert_eq!(
            summary["phases"][0]["server"]["signals"]["running"]["max"], 3.0,
            "{engine}"
        );
        assert_eq!(
            summary["phases"][0]["server"]["signals"]["waiting"]["mean"], 1.0,
            "{engine}"
        );
        let errors = summary["error_samples"].as_array().unwrap();
        assert_eq!(errors[0]["class"], "http_5xx", "{errors:?}");
        assert_eq!(errors[0]["http_status"], 503);
        assert!(errors[0]["sample"]
            .as_str()
            .unwrap()
            .contains("the engine is overloaded"));
        let report = std::fs::read_to_string(run.out().join("report.md")).unwrap();
        assert!(
            report.contains("## Errors") && report.contains("the engine is overloaded"),
            "{report}"
        );
    }
}

/// report.html: one file, every chart there, nothing fetched from anywhere.
#[test]
fn the_html_report_is_self_contained() {
    let plan = sim_plan(
        engine_sim(),
        "input { bucket 32 weight=1; bucket 128 weight=1 }; output 8 ignore-eos=#true",
        "phase \"warm\" { concurrency 2; requests 4; record #false }\nphase \"steady\" { rate 30; duration \"2s\" }",
        "ttft max < \"1s\"",
    );
    let run = run_plan(&plan, &[]);
    assert_eq!(run.code(), 0, "{}", run.stderr());
    let html = std::fs::read_to_string(run.out().join("report.html")).unwrap();
    assert!(html.starts_with("<!DOCTYPE html>"));
    // The verdict comes before any chart.
    assert!(html.find("id=\"verdict\"").unwrap() < html.find("<svg").unwrap());
    for id in [
        "latency-over-time",
        "load-over-time",
        "throughput-over-time",
        "latency-cdf",
        "by-input",
        "server-over-time",
    ] {
        let at = html
            .find(&format!("<figure id=\"{id}\">"))
            .unwrap_or_else(|| panic!("no chart {id}"));
        assert!(html[at..].contains("<svg"), "{id} has no SVG");
    }
    assert!(html.matches("<svg").count() >= 6);
    for forbidden in ["<script", "<link", "<img", "@import", "url("] {
        assert!(!html.contains(forbidden), "report.html holds {forbidden}");
    }
    // Nothing to fetch: every http(s) address is an XML namespace or text.
    for (at, _) in html.match_indices("http") {
        let before = &html[at.saturating_sub(8)..at];
        assert!(
            !before.contains("src=\"") && !before.contains("href=\""),
            "an external reference at {}",
            &html[at.saturating_sub(20)..(at + 40).min(html.len())]
        );
    }
    // Rendered by a browser, where one is installed.
    let Some(chromium) = common::chromium() else {
        return;
    };
    let shot = run.dir.path().join("report.png");
    let status = common::browser(
        chromium,
        run.dir.path(),
        &[
            format!("--screenshot={}", shot.display()),
            format!("file://{}", run.out().join("report.html").display()),
        ],
    )
    .status;
    assert!(status.success());
    let png = std::fs::read(&shot).unwrap();
    assert_eq!(&png[1..4], b"PNG");
    assert!(png.len() > 50_000, "a blank page? {} bytes", png.len());
}

#[test]
fn replicas_are_scraped_apart_reported_apart_and_summed() {
    // Two replicas behind one target: the run sends to the first only, both are scraped.
    let loaded = common::SimProcess::start_with(&["--profile", "tiny"]);
    let idle = common::SimProcess::start_with(&["--profile", "tiny"]);
    let metrics = |sim: &common::SimProcess| format!("{}/metrics", sim.url.trim_end_matches("/v1"));
    let plan = format!(
        "plan \"replicas\" {{ seed 3 }}\n\
         target \"{}\" {{ model \"llmload-sim\"; timeout \"10s\"; metrics \"{}\" \"{}\" interval=\"200ms\" }}\n\
         workload {{ input 32; output 16 ignore-eos=#true }}\n\
         phase \"steady\" {{ rate 30; duration \"2s\" }}\n",
        loaded.url,
        metrics(&loaded),
        metrics(&idle)
    );
    let run = run_plan(&plan, &[]);
    assert_eq!(run.code(), 0, "{}", run.stderr());
    let summary = run.summary();
    let server = &summary["server"];
    let targets = server["targets"].as_array().expect("each target apart");
    assert_eq!(targets.len(), 2, "{server}");
    assert_eq!(targets[0]["url"], metrics(&loaded).as_str());
    let signals = |t: &serde_json::Value| t["recorded"]["signals"].clone();
    let running = |s: &serde_json::Value| s["running"]["mean"].as_f64().unwrap();
    let tokens = |s: &serde_json::Value| s["generation_tokens"]["delta"].as_f64().unwrap();
    assert!(running(&signals(&targets[0])) > 0.0, "{server}");
    assert_eq!(running(&signals(&targets[1])), 0.0, "{server}");
    assert_eq!(tokens(&signals(&targets[1])), 0.0, "{server}");
    // The run's own series is the sum: the loaded replica's tokens plus the idle one's none.
    let summed = &summary["overall"]["server"]["signals"];
    assert!(tokens(summed) > 0.0, "{summed}");
    assert!(
        (tokens(summed) - tokens(&signals(&targets[0]))).abs() < 1e-9,
        "{summed} against {}",
        signals(&targets[0])
    );
    let note = common::warning_of(&summary, "telemetry").unwrap()["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(note.contains("from 2 targets, summed"), "{note}");
    let report = std::fs::read_to_string(run.out().join("report.md")).unwrap();
    assert!(report.contains("| **all, summed** |"), "{report}");
    assert!(
        report.contains(&format!("| `{}` | this client |", metrics(&idle))),
        "{report}"
    );
    let html = std::fs::read_to_string(run.out().join("report.html")).unwrap();
    assert!(html.contains("<strong>all, summed</strong>"));
}

/// A GPU exporter on loopback, printing two GPUs the way dcgm-exporter does: GPU 0 draws
/// 300 W and GPU 1 200 W, steadily, and their energy counters (millijoules) grow at exactly
/// that rate from when it started.
fn serve_gpus() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let started = std::time::Instant::now();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut line = String::new();
            while reader.read_line(&mut line).unwrap_or(0) > 2 {
                line.clear();
            }
            let seconds = started.elapsed().as_secs_f64();
            let mut text = String::new();
            for (gpu, watts, util, base_mj) in [(0, 300.0, 80, 5.0e9), (1, 200.0, 60, 7.0e9)] {
                let labels = format!(
                    "gpu=\"{gpu}\",UUID=\"GPU-{gpu}\",device=\"nvidia{gpu}\",modelName=\"NVIDIA H100 80GB HBM3\",Hostname=\"node\""
                );
                text.push_str(&format!(
                    "DCGM_FI_DEV_GPU_UTIL{{{labels}}} {util}\n\
                     DCGM_FI_DEV_FB_USED{{{labels}}} 40960\n\
                     DCGM_FI_DEV_POWER_USAGE{{{labels}}} {watts:.3}\n\
                     DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{{{labels}}} {}\n\
                     DCGM_FI_DEV_MEMORY_TEMP{{{labels}}} 9223372036854775794\n",
                    (base_mj + watts * 1000.0 * seconds).round()
                ));
            }
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{text}",
                text.len()
            );
        }
    });
    format!("http://127.0.0.1:{port}/metrics")
}

/// A GPU exporter scraped beside the engine: the GPUs' numbers per phase, their energy over
/// the same window as the tokens, joules per output token asserted like any metric, and the
/// engine still named as the server (though the exporter is listed first).
#[test]
fn gpu_energy_per_output_token_is_measured_over_the_tokens_window_and_asserted() {
    let sim = common::SimProcess::start_with(&["--profile", "tiny"]);
    let gpus = serve_gpus();
    let plan = |assertion: &str| {
        format!(
            "plan \"gpus\" {{ seed 3 }}\n\
             target \"{}\" {{ model \"llmload-sim\"; timeout \"10s\"; metrics \"{gpus}\" \"{}/metrics\" interval=\"200ms\" }}\n\
             workload {{ input 32; output 32 ignore-eos=#true }}\n\
             phase \"steady\" {{ rate 20; duration \"2s\" }}\n\
             sla {{\n    {assertion}\n}}\n",
            sim.url,
            sim.url.trim_end_matches("/v1")
        )
    };
    let run = run_plan(
        &plan("energy-per-output-token < \"10J\"\nserver-gpu-utilization max > \"70%\"\nserver-gpu-power mean < \"600W\""),
        &[],
    );
    assert_eq!(run.code(), 0, "{}", run.stderr());
    let summary = run.summary();
    assert_eq!(summary["server"]["engine"], "vLLM", "{}", summary["server"]);
    let steady = &summary["phases"][0];
    let signals = &steady["server"]["signals"];
    // Watts summed over the GPUs; utilization the busiest GPU's; a DCGM blank is no reading.
    assert_eq!(signals["gpu_utilization"]["max"], 0.8, "{signals}");
    assert_eq!(signals["gpu_memory_used_mib"]["max"], 81920.0, "{signals}");
    assert!(signals.get("gpu_temperature_c").is_none(), "{signals}");
    let energy = &steady["energy"];
    assert_eq!(energy["from"], "energy counter", "{energy}");
    let watts = energy["watts"].as_f64().unwrap();
    assert!((watts - 500.0).abs() < 5.0, "{energy}");
    // Joules per token: the window's energy over the same window's output tokens.
    let tokens_per_s = steady["throughput"]["output_tokens_per_s"]
        .as_f64()
        .unwrap();
    let per_token = energy["per_output_token_j"].as_f64().unwrap();
    assert!(
        (per_token - 500.0 / tokens_per_s).abs() / per_token < 0.01,
        "{energy} at {tokens_per_s} tokens/s"
    );
    let wall = steady["wall_s"].as_f64().unwrap();
    assert!((energy["joules"].as_f64().unwrap() - watts * wall).abs() < 1e-6);
    let verdict = summary["verdicts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| {
            v["assertion"]
                .as_str()
                .unwrap()
                .starts_with("energy-per-output-token")
        })
        .unwrap()
        .clone();
    assert_eq!(verdict["passed"], true, "{verdict}");
    assert!((verdict["observed"].as_f64().unwrap() - per_token).abs() < 1e-9);
    assert!(
        verdict["observed_display"]
            .as_str()
            .unwrap()
            .ends_with(" J"),
        "{verdict}"
    );
    let report = std::fs::read_to_string(run.out().join("report.md")).unwrap();
    assert!(report.contains("## The GPUs"), "{report}");
    assert!(
        report.contains("| steady | 80.00% / 80.00% | 80.0 |"),
        "{report}"
    );
    let csv = std::fs::read_to_string(run.out().join("summary.csv")).unwrap();
    assert!(
        csv.lines()
            .any(|l| l.contains(",energy-per-output-token,value,") && l.ends_with(",J")),
        "{csv}"
    );

    // Less energy per token than this server spends fails the run, with the reason.
    let strict = run_plan(&plan("energy-per-output-token < \"1mJ\""), &[]);
    assert_eq!(strict.code(), 1, "{}", strict.stderr());
    assert!(strict.summary()["verdict"]["reasons"][0]
        .as_str()
        .unwrap()
        .contains("energy-per-output-token < 0.001J"));
}

/// The simulator's GPUs (dcgm-exporter's names on its own `/metrics`) draw a known energy: idle
/// watts over time plus joules per prompt token and per token generated. The run's energy per
/// output token, read through the whole path (scrape, phase window, counters), is that model's.
#[test]
fn energy_per_output_token_is_the_simulated_gpus_model() {
    let plan = sim_plan(
        "ttft \"20ms\"; itl \"5ms\"; gpu count=2 idle=\"50W\" prefill=\"1mJ\" decode=\"0.5J\" memory=\"80GiB\"",
        "input 64; output 32 ignore-eos=#true",
        "phase \"steady\" { rate 20; duration \"5s\" }",
        "energy-per-output-token < \"1J\" phase=\"steady\"",
    )
    .replace("target \"sim\" {", "target \"sim\" { metrics interval=\"100ms\";");
    let run = run_plan(&plan, &[]);
    assert_eq!(run.code(), 0, "{}", run.stderr());
    let summary = run.summary();
    assert_eq!(summary["server"]["engine"], "vLLM", "{}", summary["server"]);
    let steady = common::phase(&summary, "steady");
    let ok = steady["requests"]["ok"].as_f64().unwrap();
    let wall = steady["wall_s"].as_f64().unwrap();
    let prompt = steady["tokens"]["input_observed_mean"].as_f64().unwrap() * ok;
    let generated = 32.0 * ok;
    // The model's energy over the phase's window: 2 × 50 W idle, 1 mJ per prompt token,
    // 0.5 J per token generated.
    let expected = (2.0 * 50.0 * wall + 0.001 * prompt + 0.5 * generated) / generated;
    let energy = &steady["energy"];
    assert_eq!(energy["from"], "energy counter", "{energy}");
    let measured = energy["per_output_token_j"].as_f64().unwrap();
    let error = (measured - expected).abs() / expected;
    eprintln!("energy per output token: measured {measured:.5} J, the model's {expected:.5} J ({:.3}% off)", error * 100.0);
    assert!(error < 0.01, "{energy}: the model says {expected}");
    // Watts per request in flight: the requests in flight by Little's law (their E2E together
    // over the window) — about 20 req/s × 0.18 s here — and the GPUs' watts over them.
    let e2e_s = steady["metrics"]["e2e_ms"]["mean"].as_f64().unwrap() / 1e3;
    let in_flight = energy["requests_in_flight"].as_f64().unwrap();
    assert!((in_flight - ok * e2e_s / wall).abs() < 1e-9, "{energy}");
    assert!((2.0..6.0).contains(&in_flight), "{energy}");
    let watts = energy["watts"].as_f64().unwrap();
    let per_request = energy["watts_per_request_in_flight"].as_f64().unwrap();
    assert!((per_request - watts / in_flight).abs() < 1e-9, "{energy}");
    // Kept for histories (`--export`, `llmload history`) with the interval of the throughput
    // it divides by.
    let measure = summary["measures"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["slug"] == "energy-per-output-token-j")
        .expect("energy per output token among the measures")
        .clone();
    let overall = summary["overall"]["energy"]["per_output_token_j"]
        .as_f64()
        .unwrap();
    assert_eq!(measure["value"].as_f64().unwrap(), overall, "{measure}");
    let (low, high) = (
        measure["bounds"][0].as_f64().unwrap(),
        measure["bounds"][1].as_f64().unwrap(),
    );
    assert!(low < overall && overall < high, "{measure}");
    let signals = &steady["server"]["signals"];
    assert_eq!(
        signals["gpu_memory_used_mib"]["max"],
        2.0 * 73728.0,
        "{signals}"
    );
    assert!(
        signals["gpu_utilization"]["max"].as_f64().unwrap() > 0.0,
        "{signals}"
    );
    // What the GPUs are, from the exporter's labels and frame-buffer gauges, in summary.json
    // and above the report's GPU table.
    let gpus = &summary["server"]["gpus"];
    assert_eq!(gpus.as_array().unwrap().len(), 2, "{gpus}");
    assert_eq!(gpus[1]["model"], "llmload-sim GPU", "{gpus}");
    assert_eq!(gpus[1]["memory_mib"], 81920.0, "{gpus}");
    let described = "2 × llmload-sim GPU (80 GiB each)";
    assert_eq!(summary["server"]["gpus_described"], described);
    let report = std::fs::read_to_string(run.out().join("report.md")).unwrap();
    // The exporter's words, escaped for Markdown.
    assert!(
        report.contains("Measured on 2 × llmload-sim GPU \\(80 GiB each\\)"),
        "{report}"
    );
    // Charted over time in report.html: utilization and memory in use, and power.
    let html = std::fs::read_to_string(run.out().join("report.html")).unwrap();
    for id in ["gpus-over-time", "gpu-power-over-time"] {
        let at = html
            .find(&format!("<figure id=\"{id}\">"))
            .unwrap_or_else(|| panic!("no chart {id}"));
        assert!(html[at..].contains("<svg"), "{id} has no SVG");
    }
    let chart = &html[html.find("<figure id=\"gpus-over-time\">").unwrap()..];
    assert!(chart.contains("memory in use") && chart.contains("utilization (busiest GPU)"));
}

/// A phase whose first seconds meet a backlog (a burst beside it, not recorded) has its warm-up
/// cut: its steady window's energy is the GPUs' over that window alone, set against the tokens
/// of the requests sent in it, and `sla { window "steady" }` judges energy per token there.
#[test]
fn energy_per_output_token_is_measured_over_the_steady_window() {
    let _serial = common::serial();
    let plan = "plan \"steady-energy\" { seed 3 }\n\
        target \"sim\" { timeout \"10s\"; metrics interval=\"100ms\" }\n\
        sim { profile \"tiny\"; gpu count=2 idle=\"50W\" prefill=\"1mJ\" decode=\"0.5J\" memory=\"80GiB\" }\n\
        workload { input 64; output 32 ignore-eos=#true }\n\
        report { interval \"500ms\" }\n\
        phase \"steady\" { rate 10; duration \"8s\" }\n\
        phase \"spike\" { with \"steady\"; at-once 40; record #false }\n\
        sla { window \"steady\"; energy-per-output-token < \"100J\" phase=\"steady\"; energy-per-output-token < \"100J\" }\n";
    let run = run_plan(plan, &[]);
    assert_eq!(run.code(), 0, "{}\n{}", run.stdout(), run.stderr());
    let summary = run.summary();
    let whole = common::phase(&summary, "steady");
    let window = &summary["steady"]["phases"][0];
    assert!(window["cut_s"].as_f64().unwrap() > 0.0, "{window}");
    let (energy, whole_energy) = (&window["metrics"]["energy"], &whole["energy"]);
    let watts = energy["watts"].as_f64().unwrap();
    let wall = window["metrics"]["wall_s"].as_f64().unwrap();
    assert!(wall < whole["wall_s"].as_f64().unwrap(), "{window}");
    assert!(
        (energy["joules"].as_f64().unwrap() - watts * wall).abs() < 1e-6,
        "{energy}"
    );
    // The backlog's burst drew more than the steady load does: the window after it less.
    assert!(
        watts < whole_energy["watts"].as_f64().unwrap(),
        "{energy} against the whole phase's {whole_energy}"
    );
    // Per token: the window's joules over its own requests' tokens.
    let tokens_per_s = window["metrics"]["throughput"]["output_tokens_per_s"]
        .as_f64()
        .unwrap();
    let per_token = energy["per_output_token_j"].as_f64().unwrap();
    assert!((per_token - watts / tokens_per_s).abs() < 1e-9, "{energy}");
    // The phase's assertion and the run's read the steady windows' figures.
    let verdicts = summary["verdicts"].as_array().unwrap();
    assert!(verdicts[0]["phase"]
        .as_str()
        .unwrap()
        .starts_with("steady (from +"));
    assert_eq!(
        verdicts[0]["observed"].as_f64().unwrap(),
        per_token,
        "{verdicts:?}"
    );
    let overall = summary["steady"]["overall"]["energy"]["per_output_token_j"].as_f64();
    assert_eq!(verdicts[1]["observed"].as_f64(), overall, "{verdicts:?}");
    assert_eq!(
        overall,
        Some(per_token),
        "one recorded phase: its window is the run's"
    );
}

/// GPU readings from a command of the user's printing nvidia-smi's CSV (header first, units
/// in it): each loop one sample, its GPUs described, energy per token from its power, and a
/// second command that dies mid-run a note, never a failed run.
#[test]
fn a_commands_gpu_readings_are_read_beside_the_run() {
    let meter =
        "echo 'timestamp, index, name, memory.total [MiB], power.draw [W], utilization.gpu [%]'; \
        while true; do now=$(date '+%Y/%m/%d %H:%M:%S.%3N'); \
        echo \"$now, 0, Test GPU, 24576 MiB, 150.00 W, 50 %\"; \
        echo \"$now, 1, Test GPU, 24576 MiB, 250.00 W, [N/A]\"; sleep 0.1; done";
    let dying = "echo 'power.draw [W]'; echo 100; sleep 0.3; echo oops >&2; exit 3";
    let plan = sim_plan(
        "ttft \"20ms\"; itl \"5ms\"",
        "input 64; output 32 ignore-eos=#true",
        "phase \"steady\" { rate 20; duration \"3s\" }",
        "energy-per-output-token < \"2J\"; server-gpu-utilization max < \"60%\"",
    )
    .replace(
        "target \"sim\" {",
        &format!(
            "target \"sim\" {{ metrics #false interval=\"200ms\"; gpus command={meter:?}; gpus command={dying:?};"
        ),
    );
    let run = run_plan(&plan, &[]);
    assert_eq!(run.code(), 0, "{}\n{}", run.stdout(), run.stderr());
    let summary = run.summary();
    assert_eq!(
        summary["server"]["gpus_described"],
        "2 × Test GPU (24 GiB each)"
    );
    let steady = common::phase(&summary, "steady");
    // The dying meter's 100 W left with it: a reading older than two intervals is not summed.
    let energy = &steady["energy"];
    assert_eq!(energy["from"], "power gauge", "{energy}");
    let watts = energy["watts"].as_f64().unwrap();
    assert!((400.0..=500.0).contains(&watts), "{energy}");
    let tokens_per_s = steady["throughput"]["output_tokens_per_s"]
        .as_f64()
        .unwrap();
    let per_token = energy["per_output_token_j"].as_f64().unwrap();
    assert!((per_token - watts / tokens_per_s).abs() < 1e-9, "{energy}");
    // Its end is a warning (the figures after it leave its GPUs out), never a failed run.
    let ended = summary["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["code"] == "gpu-source-ended")
        .unwrap_or_else(|| panic!("{}", summary["warnings"]))
        .clone();
    assert_eq!(ended["severity"], "warning", "{ended}");
    let said = ended["message"].as_str().unwrap();
    assert!(
        said.contains("ended before the run did (exit status: 3): oops, ")
            && said.contains(" s into the run"),
        "{said}"
    );
    let telemetry = std::fs::read_to_string(run.out().join("telemetry.jsonl")).unwrap();
    assert!(
        telemetry.contains("\"url\":\"command: echo 'power.draw [W]'"),
        "{telemetry}"
    );
}

/// Where nvidia-smi is installed, llmload's own query of it is read for real and what it saw is
/// said; elsewhere (CI has no GPU) the test says it had nothing to read.
#[test]
fn nvidia_smi_is_read_where_it_is_installed() {
    let found = std::process::Command::new("nvidia-smi")
        .arg("--list-gpus")
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        eprintln!("no nvidia-smi that answers on this machine: nothing to read");
        return;
    }
    let plan = sim_plan(
        "ttft \"20ms\"; itl \"5ms\"",
        "input 64; output 32",
        "phase \"steady\" { rate 5; duration \"3s\" }",
        "error-rate < \"1%\"",
    )
    .replace(
        "target \"sim\" {",
        "target \"sim\" { metrics #false; gpus \"nvidia-smi\";",
    );
    let run = run_plan(&plan, &[]);
    assert_eq!(run.code(), 0, "{}\n{}", run.stdout(), run.stderr());
    let summary = run.summary();
    let described = summary["server"]["gpus_described"]
        .as_str()
        .unwrap_or_default();
    eprintln!(
        "nvidia-smi described: {described}; the phase's GPU signals: {}",
        common::phase(&summary, "steady")["server"]["signals"]
    );
    assert!(!described.is_empty(), "{}", summary["server"]);
}

/// `compare` says when two runs were measured on different GPUs, as their telemetry described
/// them (here the simulator's, 80 GiB against 40 GiB each).
#[test]
fn a_comparison_says_the_runs_gpus_differ() {
    let plan = |memory: &str| {
        sim_plan(
            &format!("ttft \"20ms\"; itl \"5ms\"; gpu count=2 idle=\"50W\" memory=\"{memory}\""),
            "input 64; output 16",
            "phase \"steady\" { rate 20; duration \"1s\" }",
            "error-rate < \"1%\"",
        )
        .replace(
            "target \"sim\" {",
            "target \"sim\" { metrics interval=\"100ms\";",
        )
    };
    let baseline = run_plan(&plan("80GiB"), &[]);
    assert_eq!(baseline.code(), 0, "{}", baseline.stderr());
    let current = run_plan(&plan("40GiB"), &[]);
    assert_eq!(current.code(), 0, "{}", current.stderr());
    let compared = common::llmload()
        .arg("compare")
        .arg(baseline.out())
        .arg(current.out())
        .arg("--force")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&compared.stdout);
    assert!(
        text.contains("measured on different GPUs: the baseline's 2 × llmload-sim GPU (80 GiB each), this run's 2 × llmload-sim GPU (40 GiB each)"),
        "{text}\n{}",
        String::from_utf8_lossy(&compared.stderr)
    );
}

/// A plan that prices GPUs by type is priced by the GPUs its telemetry described (here the
/// simulator's two), exactly; without GPU telemetry it has no cost, says why, and its cost
/// gate is not decided.
#[test]
fn a_price_per_gpu_type_is_paid_for_the_gpus_the_telemetry_described() {
    let plan = |gpu: &str| {
        sim_plan(
            &format!("ttft \"20ms\"; itl \"5ms\"{gpu}"),
            "input 64; output 16 ignore-eos=#true",
            "phase \"steady\" { rate 20; duration \"1s\" }",
            "cost-per-million-output-tokens < \"$100000\"",
        )
        .replace(
            "target \"sim\" {",
            "target \"sim\" { metrics interval=\"100ms\";",
        ) + "cost { gpu-hour \"$2.49\" gpu=\"sim GPU\"; gpu-hour \"$0.80\" gpu=\"L4\" }\n"
    };
    let run = run_plan(&plan("; gpu count=2 idle=\"50W\""), &[]);
    assert_eq!(run.code(), 0, "{}", run.stderr());
    let steady = common::phase(&run.summary(), "steady");
    let cost = &steady["cost"];
    assert_eq!(
        cost["basis"], "2 sim GPU at $2.49 a GPU-hour, as the telemetry described them",
        "{cost}"
    );
    let wall = steady["wall_s"].as_f64().unwrap();
    let tokens_per_s = steady["throughput"]["output_tokens_per_s"]
        .as_f64()
        .unwrap();
    let expected = 2.0 * 2.49 / 3600.0 / tokens_per_s * 1e6;
    let priced = cost["per_million_output_tokens"].as_f64().unwrap();
    assert!((priced - expected).abs() <= 1e-9 * expected, "{cost}");
    assert!((cost["dollars"].as_f64().unwrap() - 2.0 * 2.49 / 3600.0 * wall).abs() < 1e-12);

    let dark = run_plan(&plan(""), &[]);
    assert_eq!(dark.code(), 3, "{}\n{}", dark.stdout(), dark.stderr());
    let summary = dark.summary();
    let warning = summary["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["code"] == "cost-unpriced")
        .unwrap_or_else(|| panic!("{}", summary["warnings"]))
        .clone();
    assert!(
        warning["message"]
            .as_str()
            .unwrap()
            .contains("no telemetry described the GPUs"),
        "{warning}"
    );
    assert_eq!(
        summary["verdicts"][0]["outcome"], "not_decided",
        "{}",
        summary["verdicts"]
    );
}
