//! The engine model of the simulator, through the real client over loopback: queueing, batching,
//! KV-cache preemption, capacity, limits and faults.

mod common;
use common::*;

/// An engine with round figures, so the analytical step time is easy to state.
const ENGINE: &str = "engine { max-seqs 16; max-batched-tokens 2048; kv-cache-tokens 100000; max-model-len 4096; \
                      step-base \"4ms\"; prefill-per-token \"0ns\"; decode-per-seq \"1500us\"; attention-per-token \"0ns\" }";

/// The engine's timings are the subject of these tests: run them one at a time, so that they do
/// not compete with each other for the 2 cores.
fn engine_plan(engine: &str, workload: &str, phases: &str, sla: &str) -> String {
    format!(
        "plan \"engine\" {{ seed 5 }}\ntarget \"sim\" {{ timeout \"30s\" }}\nsim {{ {engine} }}\nworkload {{ {workload} }}\n{phases}\nsla {{ {sla} }}\n"
    )
}

fn phase_stat(s: &serde_json::Value, phase: &str, metric: &str, stat_name: &str) -> f64 {
    stat(s, phase, metric, stat_name)
}

#[test]
fn ttft_grows_with_arrival_rate_once_the_engine_saturates() {
    let _serial = serial();
    // Capacity: 16 sequences × 48 tokens, each step 4 + 16 × 1.5 = 28 ms → ≈ 11 requests/s.
    let run = run_plan(
        &engine_plan(
            ENGINE,
            "input 64; output 48 ignore-eos=#true",
            "phase \"light\" { rate 2; duration \"3s\" }\nphase \"overload\" { rate 25; duration \"4s\" }",
            "error-rate < \"1%\"",
        ),
        &[],
    );
    assert_eq!(run.code(), 0, "{}", run.stderr());
    let s = run.summary();
    let light = phase_stat(&s, "light", "ttft_ms", "p50");
    let overload = phase_stat(&s, "overload", "ttft_ms", "p50");
    assert!(light < 40.0, "light TTFT p50 {light}");
    assert!(
        overload > 10.0 * light,
        "TTFT did not climb: {light} → {overload}"
    );
}

#[test]
fn itl_grows_with_batch_size() {
    let _serial = serial();
    let run = run_plan(
        &engine_plan(
            ENGINE,
            "input 32; output 40 ignore-eos=#true",
            "phase \"one\" { concurrency 1; requests 3 }\nphase \"twelve\" { concurrency 12; requests 24 }",
            "error-rate < \"1%\"",
        ),
        &[],
    );
    assert_eq!(run.code(), 0, "{}", run.stderr());
    let s = run.summary();
    // Step time = 4 ms + decoding sequences × 1.5 ms.
    let one = phase_stat(&s, "one", "itl_ms", "p50");
    let twelve = phase_stat(&s, "twelve", "itl_ms", "p50");
    assert!(
        (one - 5.5).abs() < 1.0,
        "batch 1 ITL p50 {one} (expected 5.5 ms)"
    );
    assert!(
        (twelve - 22.0).abs() < 22.0 * 0.15,
        "batch 12 ITL p50 {twelve} (expected 22 ms)"
    );
}

/// Steady-state output throughput of a closed loop matches the model's analytical capacity.
#[test]
fn steady_state_throughput_matches_the_analytical_capacity() {
    let _serial = serial();
    let (n, output) = (8.0f64, 64.0f64);
    let run = run_plan(
        &engine_plan(
            ENGINE,
            "input 32; output 64 ignore-eos=#true",
            "phase \"closed\" { concurrency 8; duration \"6s\" }",
            "error-rate < \"1%\"",
        ),
        &[],
    );
    assert_eq!(run.code(), 0, "{}", run.stderr());
    let s = run.summary();
    // Each slot produces `output` tokens in `output` steps, then stays empty for one step while
    // its client sends the next request; a step decodes the slots that are not prefilling.
    let tokens_per_step = n * output / (output + 1.0);
    let decodes_per_step = n * (output - 1.0) / (output + 1.0);
    let step_s = (4.0 + 1.5 * decodes_per_step) / 1000.0;
    let expected = tokens_per_step / step_s;
    let measured = s["overall"]["throughput"]["output_tokens_per_s"]
        .as_f64()
        .unwrap();
    assert!(
        (measured - expected).abs() <= expected * 0.10,
        "output throughput {measured:.0} tok/s vs analytical {expected:.0}"
    );
}

/// Three requests of 0.8 × context prompt and 0.2 × context output each: a KV cache holding
/// 2.8 contexts must preempt one of them (and its ITL spikes); 3.2 contexts never preempts.
#[test]
fn preemptions_appear_past_the_kv_limit_and_not_before() {
    let _serial = serial();
    let mut max_itl = Vec::new();
    for (kv_tokens, expect_preemption) in [(3200, false), (2800, true)] {
        let sim = SimProcess::start(&format!(
            "sim {{ engine {{ max-seqs 8; max-batched-tokens 4096; kv-cache-tokens {kv_tokens}; block-size 16; \
             max-model-len 2048; step-base \"3ms\"; prefill-per-token \"5us\"; decode-per-seq \"200us\"; \
             attention-per-token \"0ns\" }} }}"
        ));
        let run = run_plan(
            "plan \"kv\" { seed 1 }\ntarget \"http://127.0.0.1:9\" { model \"m\"; timeout \"30s\" }\n\
             workload { input 800; output 200 ignore-eos=#true }\nphase \"p\" { at-once 3 }\nsla { error-rate < \"1%\"; undecided \"pass\" }\n",
            &["--target", &sim.url],
        );
        assert_eq!(run.code(), 0, "{}", run.stderr());
        let preemptions = sim.metric("vllm:num_preemptions_total");
        assert_eq!(
            preemptions > 0.0,
            expect_preemption,
            "kv {kv_tokens}: {preemptions} preemptions"
        );
        let s = run.summary();
        assert_eq!(s["overall"]["requests"]["ok"], 3);
        max_itl.push((
            stat(&s, "overall", "itl_ms", "max"),
            stat(&s, "overall", "itl_ms", "p50"),
        ));
        // The gauges and histograms are there with vLLM's names.
        let text = sim.metrics();
        for name in [
            "vllm:num_requests_running",
            "vllm:num_requests_waiting",
            "vllm:kv_cache_usage_perc",
            "vllm:prompt_tokens_total",
            "vllm:generation_tokens_total",
            "vllm:time_to_first_token_seconds_bucket",
            "vllm:inter_token_latency_seconds_bucket",
            "vllm:request_queue_time_seconds_bucket",
            "vllm:e2e_request_latency_seconds_count",
        ] {
            assert!(text.contains(name), "{name} missing");
        }
        assert_eq!(sim.metric("vllm:generation_tokens_total"), 600.0);
    }
    // Without preemption the worst gap is a decode step that also prefilled a newcomer's prompt
    // (about 3 + 1,600 × 0.005 ms); a preempted sequence waits for blocks to free, hundreds of ms.
    let (calm_max, calm_p50) = max_itl[0];
    let (spiky_max, spiky_p50) = max_itl[1];
    assert!(
        calm_max < 20.0,
        "no preemption, yet ITL max {calm_max} ms (p50 {calm_p50})"
    );
    assert!(
        spiky_max > 100.0 && spiky_max > 10.0 * calm_max,
        "preemption, yet ITL max {spiky_max} ms (p50 {spiky_p50})"
    );
    let spiky_p99 = max_itl[1].1;
    assert!(
        spiky_p99 < 10.0,
        "the spike is one gap, not the typical one: p50 {spiky_p99}"
    );
}

/// Under sustained load near the KV limit, preemptions repeat, and each recomputed prefill also
/// stalls the step for every other sequence: ITL p99 rises with max, not max alone.
#[test]
fn sustained_load_past_the_kv_limit_spikes_itl_p99_and_max() {
    let _serial = serial();
    let mut results = Vec::new();
    for kv_tokens in [10_000, 2_800] {
        let sim = SimProcess::start(&format!(
            "sim {{ engine {{ max-seqs 16; max-batched-tokens 8192; kv-cache-tokens {kv_tokens}; block-size 16; \
             max-model-len 2048; step-base \"3ms\"; prefill-per-token \"40us\"; decode-per-seq \"200us\"; \
             attention-per-token \"0ns\" }} }}"
        ));
        let run = run_plan(
            "plan \"kv\" { seed 1 }\ntarget \"http://127.0.0.1:9\" { model \"m\"; timeout \"30s\" }\n\
             workload { input 300; output 150 ignore-eos=#true }\nphase \"p\" { concurrency 12; duration \"3s\" }\n\
             sla { error-rate < \"1%\" }\n",
            &["--target", &sim.url],
        );
        assert_eq!(run.code(), 0, "{}", run.stderr());
        let s = run.summary();
        results.push((
            sim.metric("vllm:num_preemptions_total"),
            stat(&s, "overall", "itl_ms", "p99"),
            stat(&s, "overall", "itl_ms", "max"),
        ));
    }
    let (roomy, tight) = (results[0], results[1]);
    assert_eq!(roomy.0, 0.0, "{results:?}");
    assert!(tight.0 >= 3.0, "{results:?}");
    // A step of 12 sequences takes 5.4 ms (3 ms + 12 × 200 µs); a recomputed prefill of 300+
    // tokens adds 12 ms or more to the step it lands in. Judged against both the nominal step
    // and the roomy run, which a busy machine (a parallel test run on 2 cores) inflates too.
    assert!(
        tight.1 > 2.0 * 5.4 && tight.1 > 1.5 * roomy.1,
        "ITL p99 did not spike: {results:?}"
    );
    assert!(
        tight.2 > 4.0 * roomy.2,
        "ITL max did not spike: {results:?}"
    );
}

#[test]
fn too_long_requests_get_400_and_a_full_queue_429_or_503() {
    // One at a time, as every test here: a run beside the timing tests' inflates their steps.
    let _serial = serial();
    let engine = "engine { max-seqs 2; max-batched-tokens 512; max-model-len 256; max-waiting 3; step-base \"5ms\"; decode-per-seq \"1ms\"; prefill-per-token \"0ns\"; attention-per-token \"0ns\" }";
    let run = run_plan(
        &engine_plan(
            engine,
            "input 200; output 100",
            "phase \"p\" { concurrency 1; requests 2 }",
            "error-rate < \"1%\"",
        ),
        &[],
    );
    assert_eq!(run.code(), 3, "every request refused: {}", run.stderr());
    let records = run.records();
    assert!(records
        .iter()
        .all(|r| r["error"] == "http_4xx" && r["http_status"] == 400));
    assert!(records[0]["error_detail"]
        .as_str()
        .unwrap()
        .contains("maximum context length is 256 tokens"));
    for (status, class) in [("429", "http_429"), ("503", "http_5xx")] {
        let engine = engine.replace(
            "max-waiting 3;",
            &format!("max-waiting 3; queue-full-status {status};"),
        );
        let run = run_plan(
            &engine_plan(
                &engine,
                "input 16; output 20",
                "phase \"p\" { at-once 20 }",
                "error-rate < \"100%\"; undecided \"pass\"",
            ),
            &[],
        );
        assert_eq!(run.code(), 0, "{}", run.stderr());
        let records = run.records();
        assert_eq!(records.len(), 20);
        let refused = records.iter().filter(|r| r["error"] == class).count();
        let ok = records.iter().filter(|r| r["error"].is_null()).count();
        // Two run and three wait; the rest are refused. (Whether the engine admitted its first
        // two before all twenty arrived decides whether three or five get in, as on a server.)
        assert!((3..=5).contains(&ok), "{status}: {ok} ok");
        assert_eq!(ok + refused, 20, "{status}");
    }
}

/// Each fault knob gives the error class the executor should record; the run completes and
/// every record is there.
#[test]
fn each_fault_gives_its_error_class() {
    let _serial = serial();
    let cases = [
        ("http-5xx \"100%\"", "30s", Some("http_5xx")),
        ("http-429 \"100%\"", "30s", Some("http_429")),
        ("drop-mid-stream \"100%\"", "30s", Some("stream_broken")),
        ("malformed-chunk \"100%\"", "30s", Some("malformed")),
        (
            "stall \"2s\" at-token=3 rate=\"100%\"",
            "500ms",
            Some("timeout"),
        ),
        ("slow-headers \"300ms\" rate=\"100%\"", "30s", None),
    ];
    for (fault, timeout, class) in cases {
        let plan = format!(
            "plan \"f\" {{ seed 2 }}\ntarget \"sim\" {{ timeout \"{timeout}\" }}\nsim {{ ttft \"10ms\"; itl \"2ms\"; faults {{ {fault} }} }}\n\
             workload {{ input 16; output 8 }}\nphase \"p\" {{ concurrency 2; requests 6 }}\nsla {{ error-rate < \"100%\" }}\n"
        );
        let run = run_plan(&plan, &[]);
        let records = run.records();
        assert_eq!(records.len(), 6, "{fault}: records lost");
        match class {
            Some(class) => {
                assert!(
                    records.iter().all(|r| r["error"] == class),
                    "{fault}: {records:?}"
                );
                assert_eq!(run.code(), 3, "{fault}: every request failed");
            }
            None => {
                assert_eq!(run.code(), 0, "{fault}: {}", run.stderr());
                assert!(
                    stat(&run.summary(), "overall", "ttft_ms", "min") >= 300.0,
                    "{fault}"
                );
            }
        }
    }
    // At a partial rate, faults hit some requests, seeded: the same run gives the same victims.
    let plan = "plan \"f\" { seed 2 }\ntarget \"sim\" { timeout \"30s\" }\nsim { ttft \"5ms\"; itl \"1ms\"; faults { http-5xx \"30%\" } }\n\
                workload { input 16; output 4 }\nphase \"p\" { concurrency 1; requests 40 }\nsla { error-rate < \"100%\" }\n";
    let failed = |run: &Run| {
        let mut seqs: Vec<u64> = run
            .records()
            .iter()
            .filter(|r| !r["error"].is_null())
            .map(|r| r["seq"].as_u64().unwrap())
            .collect();
        seqs.sort();
        seqs
    };
    let (a, b) = (run_plan(plan, &[]), run_plan(plan, &[]));
    assert!((5..=20).contains(&failed(&a).len()), "{:?}", failed(&a));
    assert_eq!(failed(&a), failed(&b));
}

/// Write times are kept only when asked for, and the simulator says how to ask.
#[test]
fn write_times_are_served_only_when_recorded() {
    let _serial = serial();
    let sim = SimProcess::start_with(&["--ttft", "1ms"]);
    let body = sim.get("/llmload/writes");
    assert!(body.contains("--record-writes"), "{body}");
}

/// The simulator lists its models with their context, as vLLM does (`max_model_len`), and a
/// run keeps what the listing said: in summary.json's context and the report's "Model served".
#[test]
fn the_served_models_context_is_listed_and_reported() {
    let plan = format!(
        "plan \"m\" {{ seed 5 }}\ntarget \"sim\" {{ model \"m\"; timeout \"30s\" }}\n\
         sim {{ models \"m\"; {ENGINE} }}\nworkload {{ input 16; output 4 ignore-eos=#true }}\n\
         phase \"a\" {{ concurrency 1; requests 2 }}\n"
    );
    let run = run_plan(&plan, &[]);
    assert_eq!(run.code(), 0, "{}", run.stderr());
    let served = &run.summary()["context"]["served_models"];
    assert_eq!(served, &serde_json::json!([{"id": "m", "context": 4096}]));
    let report = std::fs::read_to_string(run.out().join("report.md")).unwrap();
    assert!(
        report.contains("| Model served | `m`: context 4096 (the server's /models) |"),
        "{report}"
    );
}
