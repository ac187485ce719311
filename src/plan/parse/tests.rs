//! The parser's tests over whole plans: every section, every diagnostic, includes and sweeps.

use std::time::Duration;

use crate::plan::*;

const BASE: &str = "target \"sim\"\nworkload { input 64; output 8 }\nphase \"steady\" { rate 2; duration \"10s\" }\nphase \"warm\" { concurrency 1; requests 2; record #false }\n";

fn parse(extra: &str) -> Result<Plan, PlanErrors> {
    parse_plan("t.kdl", format!("{BASE}{extra}"))
}

fn messages(extra: &str) -> Vec<String> {
    parse(extra)
        .unwrap_err()
        .diagnostics
        .iter()
        .map(|d| d.message.clone())
        .collect()
}

fn plan_with(target: &str, workload: &str) -> Result<Plan, PlanErrors> {
    parse_plan(
        "t.kdl",
        format!("target \"sim\" {{ {target} }}\nworkload {{ {workload} }}\nphase \"a\" {{ concurrency 1; requests 2 }}\n"),
    )
}

fn errors_of(result: Result<Plan, PlanErrors>) -> Vec<String> {
    result
        .unwrap_err()
        .diagnostics
        .iter()
        .map(|d| d.message.clone())
        .collect()
}

#[test]
fn request_options_are_read_and_llmloads_own_fields_refused() {
    let plan = plan_with(
        "sampling temperature=0.5 top-k=40 stop=\"x\"; body #\"{\"chat_template_kwargs\": {\"a\": 1}}\"#; header \"X-Team\" \"a\"; header \"X-Key\" env=\"K\"",
        "input 8; output min=4 max=12; system \"hi\"; prefix 64 groups=3",
    )
    .unwrap();
    assert_eq!(plan.target.body["temperature"], 0.5);
    assert_eq!(plan.target.body["top_k"], 40);
    assert_eq!(plan.target.body["chat_template_kwargs"]["a"], 1);
    assert_eq!(
        plan.target.headers[1].value,
        HeaderValue::Secret("K".into())
    );
    assert_eq!(
        plan.workload.output_spread,
        Some(OutputSpread::Uniform { min: 4, max: 12 })
    );
    assert_eq!(plan.workload.prefix.len(), 3);
    assert_eq!(plan.workload.system.as_deref(), Some("hi"));

    let errors = errors_of(plan_with(
        "sampling max-tokens=5; body #\"{\"stream\": false}\"#; body \"[1]\"; header \"Authorization\" \"x\"; header \"X-A\"",
        "input 8; output min=9 max=3; prefix { group 0 }; conversation think=\"1s\"",
    ));
    let all = errors.join("\n");
    for expected in [
        "llmload sets `max_tokens`",
        "llmload sets `stream`",
        "`body` must be a JSON object",
        "llmload sets `Authorization` itself",
        "the header has no value",
        "`min` is above `max`",
        "out of range",
        "`conversation` needs turns=N",
    ] {
        assert!(all.contains(expected), "{expected} not in {all}");
    }
}

#[test]
fn an_agent_loop_s_tool_results_are_read_with_their_ranges_and_checked() {
    let plan = plan_with(
        "body #\"{\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\"}}]}\"#",
        "input 8; output 4; conversation turns=4 { tool-result tokens=300 tokens-max=900 latency=\"200ms\" latency-max=\"1s\"; }",
    )
    .unwrap();
    let tools = plan.workload.conversation.unwrap().tool_results.unwrap();
    assert_eq!((tools.tokens, tools.tokens_max), (300, Some(900)));
    assert_eq!(tools.latency, std::time::Duration::from_millis(200));
    assert_eq!(tools.latency_max, Some(std::time::Duration::from_secs(1)));

    let errors = errors_of(plan_with(
        "",
        "input 8; output 4; conversation turns=4 { tool-result tokens=300 tokens-max=9 latency=\"2s\" latency-max=\"1s\"; tool-result tokens=1; tool-call 1; }",
    ));
    let all = errors.join("\n");
    for expected in [
        "tokens-max is below tokens",
        "latency-max is below latency",
        "a conversation has one `tool-result`",
        "unknown node `tool-call`",
    ] {
        assert!(all.contains(expected), "{expected} not in {all}");
    }
    let errors = errors_of(plan_with(
        "",
        "input 8; output 4; conversation turns=2 { tool-result latency=\"1s\"; }",
    ));
    assert!(
        errors.join("\n").contains("`tool-result` needs tokens=N"),
        "{errors:?}"
    );
}

#[test]
fn a_replay_only_plan_needs_no_lengths_but_others_do() {
    let dir = std::env::temp_dir().join(format!("llmload-trace-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("t.jsonl"),
        "{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 2}\n{\"timestamp\": 500, \"input_length\": 20, \"output_length\": 3}\n",
    )
    .unwrap();
    let file = dir.join("plan.kdl");
    let text = "target \"sim\"\nworkload { }\nphase \"r\" { trace \"t.jsonl\" speed=0.5 }\n";
    let plan = parse_plan(file.to_str().unwrap(), text.into()).unwrap();
    let Load::Trace(trace) = &plan.phases[0].load else {
        panic!("a trace")
    };
    assert_eq!(trace.rows.len(), 2);
    assert_eq!(trace.speed, 0.5);
    // Its schedule (the trace's offsets at half speed): planner::tests.
    let text = "target \"sim\"\nworkload { }\nphase \"r\" { trace \"t.jsonl\" }\nphase \"s\" { concurrency 1; requests 1 }\n";
    let errors = errors_of(parse_plan(file.to_str().unwrap(), text.into()));
    assert!(
        errors.iter().any(|e| e.contains("no `input`")),
        "{errors:?}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn the_shipped_chat_sla_plan_is_accepted() {
    let text = include_str!("../../../plans/chat-sla.kdl");
    let plan = parse_plan("chat-sla.kdl", text.to_string()).unwrap();
    assert_eq!(plan.phases.len(), 4);
    assert_eq!(plan.sla.len(), 4);
    assert_eq!(plan.seed, 42);
    assert_eq!(plan.workload.buckets.len(), 3);
    assert!(plan.workload.ignore_eos);
    assert_eq!(
        plan.phases[1].load,
        Load::Rate {
            rate: RateShape::Ramp {
                from: 1.0,
                to: 16.0
            },
            arrivals: Arrivals::Poisson
        }
    );
    assert_eq!(plan.phases[3].load, Load::AtOnce(64));
    assert!(!plan.phases[0].record);
    assert_eq!(plan.sla[0].phase.as_deref(), Some("steady"));
    assert_eq!(plan.sla[0].threshold, 500.0);
    assert_eq!(plan.sla[3].threshold, 0.01);
}

#[test]
fn all_four_comparisons_including_the_property_spellings() {
    for (text, op) in [
        ("ttft p99 < \"500ms\"", Op::Lt),
        ("ttft p99 <= \"500ms\"", Op::Le),
        ("ttft p99 <=\"500ms\"", Op::Le),
        ("ttft p99 > \"500ms\"", Op::Gt),
        ("ttft p99 >= \"500ms\"", Op::Ge),
        ("ttft p99 \"<=\" \"500ms\"", Op::Le),
    ] {
        let plan = parse(&format!("sla {{ {text} }}")).unwrap_or_else(|e| panic!("{text}: {e}"));
        assert_eq!(plan.sla[0].op, op, "{text}");
        assert_eq!(plan.sla[0].threshold, 500.0, "{text}");
    }
}

#[test]
fn statistics_and_scalar_metrics() {
    let plan = parse("sla { itl p99.9 < \"80ms\"; tpot mean < \"40ms\"; e2e max < \"2m\"; ttft p999 < \"1s\"; request-throughput > 1.5; output-throughput >= 100; error-rate < \"0.5%\"; timeout-rate <= \"0%\" }").unwrap();
    assert_eq!(plan.sla[0].stat, Some(Stat::Percentile(99.9)));
    assert_eq!(plan.sla[1].stat, Some(Stat::Mean));
    assert_eq!(plan.sla[2].threshold, 120_000.0);
    assert_eq!(plan.sla[3].stat, Some(Stat::Percentile(99.9)));
    assert_eq!(plan.sla[4].threshold, 1.5);
    assert_eq!(plan.sla[6].threshold, 0.005);
    assert_eq!(plan.sla[0].text, "itl p99.9 < 80ms");
}

#[test]
fn assertion_mistakes() {
    assert_eq!(messages("sla { ttft q99 < \"1s\" }"), ["unknown statistic"]);
    assert_eq!(
        messages("sla { latency p99 < \"1s\" }"),
        ["unknown metric `latency`"]
    );
    assert_eq!(
        messages("sla { ttft p99 < \"1s\" phase=\"nope\" }"),
        ["no phase is named \"nope\""]
    );
    assert_eq!(
        messages("sla { ttft p99 < \"1s\" phase=\"warm\" }"),
        ["phase \"warm\" is not recorded (record #false)"]
    );
    assert_eq!(
        messages("sla { ttft p99 < 500 }"),
        ["a bare number has no unit"]
    );
    assert_eq!(
        messages("sla { error-rate < 0.01 }"),
        ["expected a percentage string, found a number"]
    );
    assert_eq!(
        messages("sla { ttft p99 \"500ms\" }"),
        ["`ttft` needs a comparison and a threshold"]
    );
}

#[test]
fn how_the_sla_is_judged_and_how_long_a_dead_target_is_waited_for() {
    let plan = parse("sla { ttft p99 < \"1s\" }").unwrap();
    assert_eq!(plan.judging, Judging::default());
    assert_eq!(plan.judging.confidence, 0.95);
    assert_eq!(
        plan.target.unreachable_after,
        Some(DEFAULT_UNREACHABLE_AFTER)
    );
    let plan = parse("sla { confidence \"99%\"; undecided \"fail\"; ttft p99 < \"1s\" }").unwrap();
    assert_eq!(plan.judging.confidence, 0.99);
    assert_eq!(plan.judging.undecided, Undecided::Fail);
    assert_eq!(plan.sla.len(), 1);
    assert_eq!(
        messages("sla { confidence \"20%\" }"),
        ["a confidence of 20% cannot judge an assertion"]
    );
    assert_eq!(
        messages("sla { undecided \"maybe\" }"),
        ["`undecided` is one of not-decided, fail, pass"]
    );
    let plan = parse("sla { window \"steady\"; ttft p99 < \"1s\" }").unwrap();
    assert_eq!(plan.judging.window, JudgedWindow::Steady);
    assert_eq!(
        messages("sla { window \"warm\" }"),
        ["`window` is one of whole, steady"]
    );
    let plan = plan_with("unreachable-after #false", "input 8; output 2").unwrap();
    assert_eq!(plan.target.unreachable_after, None);
    let plan = plan_with("unreachable-after \"30s\"", "input 8; output 2").unwrap();
    assert_eq!(plan.target.unreachable_after, Some(Duration::from_secs(30)));
    assert_eq!(
        errors_of(plan_with("unreachable-after #true", "input 8; output 2")),
        ["expected a duration, found a boolean"]
    );
}

#[test]
fn an_assertion_the_requests_can_never_give_is_refused_before_the_run() {
    let embeddings = |sla: &str| {
        errors_of(parse_plan(
            "t.kdl",
            format!(
                "target \"sim\" {{ api \"embeddings\" }}\nworkload {{ input 16; batch 4 }}\n\
                 phase \"a\" {{ concurrency 1; requests 2 }}\nsla {{ {sla} }}\n"
            ),
        ))
    };
    assert_eq!(
        embeddings("ttft p99 < \"1s\""),
        ["`ttft` measures generated tokens, and api \"embeddings\" generates none"]
    );
    assert_eq!(
        embeddings("output-throughput > 10"),
        ["`output-throughput` measures generated tokens, and api \"embeddings\" generates none"]
    );
    // What a batch can give is accepted.
    assert!(parse_plan(
        "t.kdl",
        "target \"sim\" { api \"embeddings\" }\nworkload { input 16; batch 4 }\n\
         phase \"a\" { concurrency 1; requests 2 }\nsla { e2e-per-input max < \"1s\"; error-rate < \"1%\" }\n"
            .to_string()
    )
    .is_ok());
    // A whole answer has no first token; a generation has no inputs per batch.
    assert_eq!(
        errors_of(parse_plan(
            "t.kdl",
            "target \"sim\" { stream #false }\nworkload { input 16; output 4 }\n\
             phase \"a\" { concurrency 1; requests 2 }\nsla { itl p99 < \"1s\" }\n"
                .to_string()
        )),
        ["`itl` is measured on streamed answers, and the target is not streamed"]
    );
    assert_eq!(
        messages("sla { e2e-per-input p99 < \"1s\" }"),
        ["`e2e-per-input` is per input of a batch, and api \"chat\" sends none"]
    );
}

#[test]
fn every_mistake_is_reported_not_only_the_first() {
    let errors = parse_plan(
        "t.kdl",
        "target \"sim\" { frob 1 }\nworkload { input 0; output 8 }\nphase \"a\" { rate -1; duration \"1s\" }\nphase \"b\" { rate 1; concurrency 2; duration \"1s\" }\nphase \"c\" { duration \"1s\" }\n".into(),
    )
    .unwrap_err();
    let text: Vec<_> = errors
        .diagnostics
        .iter()
        .map(|d| d.message.as_str())
        .collect();
    assert_eq!(text.len(), 5, "{text:?}");
    assert!(text.contains(&"unknown node `frob` in `target`"));
    assert!(text.contains(&"0 is out of range: it must be at least 1"));
    assert!(text.contains(&"-1 is out of range: it must be greater than zero"));
    assert!(text.contains(&"phase \"b\" has more than one load model"));
    assert!(text.contains(&"phase \"c\" has no load model"));
    assert!(errors.diagnostics.iter().all(|d| d.help.is_some()));
}

#[test]
fn phase_rules() {
    assert_eq!(
        messages("phase \"r\" { rate from=1 to=5 ; requests 10 }"),
        ["a ramp needs a `duration` to ramp over"]
    );
    assert_eq!(
        messages("phase \"n\" { rate 1 }"),
        ["phase \"n\" never ends"]
    );
    assert_eq!(
        messages("phase \"b\" { at-once 4; duration \"1s\" }"),
        ["an at-once phase has no duration or request limit"]
    );
    assert_eq!(
        messages("phase \"g\" { rate 1; arrivals \"gamma\"; duration \"1s\" }"),
        ["gamma arrivals need cv="]
    );
    assert_eq!(
        messages("phase \"g\" { concurrency 1; arrivals \"poisson\"; duration \"1s\" }"),
        ["`arrivals` applies only to open-loop phases"]
    );
    assert_eq!(
        messages("phase \"steady\" { rate 1; duration \"1s\" }"),
        ["phase \"steady\" is defined twice"]
    );
    assert_eq!(
        messages("phase \"x\" { rate 0; duration \"1s\" }"),
        ["0 is out of range: it must be greater than zero"]
    );
    let plan = parse("phase \"g\" { rate 3; arrivals \"gamma\" cv=2.5; duration \"1s\" }").unwrap();
    assert_eq!(
        plan.phases[2].load,
        Load::Rate {
            rate: RateShape::Constant(3.0),
            arrivals: Arrivals::Gamma { cv: 2.5 }
        }
    );
}

/// `duration "2m" until="decided" min="20s"`: a phase that ends once its assertions are decided,
/// refused where nothing could decide it.
#[test]
fn a_phase_that_ends_once_decided() {
    let decided = |phase: &str, sla: &str| {
        parse_plan(
            "t.kdl",
            format!(
                "target \"sim\"\nworkload {{ input 64; output 8 }}\n{phase}\nsla {{ {sla} }}\n"
            ),
        )
    };
    let plan = decided(
        "phase \"s\" { rate 5; duration \"2m\" until=\"decided\" min=\"20s\" }",
        "ttft p95 < \"1s\"",
    )
    .unwrap();
    assert_eq!(plan.phases[0].duration, Some(Duration::from_secs(120)));
    assert_eq!(plan.phases[0].until_decided, Some(Duration::from_secs(20)));
    // The minimum defaults to 10 s, and never beyond the duration.
    let plan = decided(
        "phase \"s\" { rate 5; duration \"5s\" until=\"decided\" }",
        "error-rate < \"1%\" phase=\"s\"",
    )
    .unwrap();
    assert_eq!(plan.phases[0].until_decided, Some(Duration::from_secs(5)));
    let refused = |phase: &str, sla: &str| errors_of(decided(phase, sla));
    assert_eq!(
        refused(
            "phase \"s\" { rate 5; duration \"1m\" until=\"later\" }",
            "ttft p95 < \"1s\""
        ),
        ["until= takes \"decided\""]
    );
    assert_eq!(
        refused(
            "phase \"s\" { rate 5; duration \"1m\" min=\"5s\" }",
            "ttft p95 < \"1s\""
        ),
        ["min= goes with until=\"decided\""]
    );
    assert_eq!(
        refused(
            "phase \"s\" { rate 5; duration \"1m\" until=\"decided\" min=\"2m\" }",
            "ttft p95 < \"1s\""
        ),
        ["min= (2m) is longer than the duration (1m)"]
    );
    // Nothing its requests can decide: a throughput, or assertions on another phase.
    assert_eq!(
        refused(
            "phase \"s\" { rate 5; duration \"1m\" until=\"decided\" }",
            "output-throughput > 10"
        ),
        ["no assertion on phase \"s\" can be decided while it runs"]
    );
    assert_eq!(
        refused(
            "phase \"s\" { rate 5; duration \"1m\" until=\"decided\" }\nphase \"t\" { rate 5; duration \"1m\" }",
            "ttft p95 < \"1s\""
        ),
        ["no assertion on phase \"s\" can be decided while it runs"]
    );
    assert_eq!(
        refused(
            "phase \"w\" { rate 5; duration \"1m\" until=\"decided\"; record #false }\nphase \"s\" { rate 5; duration \"1m\" }",
            "ttft p95 < \"1s\""
        ),
        ["phase \"w\" is not recorded: no assertion judges it, so nothing decides it"]
    );
}

#[test]
fn target_and_workload_rules() {
    let bad = |text: &str| {
        parse_plan("t.kdl", text.to_string())
            .unwrap_err()
            .diagnostics
            .iter()
            .map(|d| d.message.clone())
            .collect::<Vec<_>>()
    };
    let phases = "phase \"a\" { rate 1; duration \"1s\" }";
    assert_eq!(
        bad(&format!("target \"http://h:1\" {{ api-key \"sk-123\" ; model \"m\" }}\nworkload {{ input 1; output 1 }}\n{phases}")),
        ["an API key is never written in a plan"]
    );
    assert_eq!(
        bad(&format!(
            "target \"http://h:1\"\nworkload {{ input 1; output 1 }}\n{phases}"
        )),
        ["the target has no `model`"]
    );
    assert_eq!(
        bad(&format!(
            "target \"ftp://h\" {{ model \"m\" }}\nworkload {{ input 1; output 1 }}\n{phases}"
        )),
        ["\"ftp://h\" is not an http:// or https:// URL"]
    );
    // Replicas' metrics: several URLs, each once.
    let replicas = |metrics: &str| {
        format!("target \"http://lb:8000\" {{ model \"m\"; {metrics} }}\nworkload {{ input 1; output 1 }}\n{phases}")
    };
    let plan = parse_plan(
        "p.kdl",
        replicas("metrics \"http://a:8000/metrics\" \"http://b:8000/metrics\" interval=\"2s\""),
    )
    .unwrap();
    assert_eq!(
        plan.target.metrics,
        MetricsSource::Urls(vec![
            "http://a:8000/metrics".into(),
            "http://b:8000/metrics".into()
        ])
    );
    // Read from a Prometheus that scrapes the replicas, after the run.
    let plan = parse_plan(
        "p.kdl",
        replicas("metrics prometheus=\"http://prom:9090\" match=\"{job=\\\"vllm\\\", ns=~\\\"prod.*\\\"}\" lag=\"30s\" interval=\"5s\""),
    )
    .unwrap();
    assert_eq!(
        plan.target.metrics,
        MetricsSource::Prometheus(crate::plan::PrometheusSource {
            url: "http://prom:9090".into(),
            matchers: Some("job=\"vllm\", ns=~\"prod.*\"".into()),
            lag: Duration::from_secs(30),
        })
    );
    assert_eq!(plan.target.metrics_interval, Duration::from_secs(5));
    let plan = parse_plan("p.kdl", replicas("metrics prometheus=\"http://prom:9090\"")).unwrap();
    assert!(matches!(
        plan.target.metrics,
        MetricsSource::Prometheus(ref p) if p.matchers.is_none() && p.lag == Duration::from_secs(15)
    ));
    for (metrics, says) in [
        (
            "metrics \"http://a/metrics\" prometheus=\"http://prom:9090\"",
            "two sources",
        ),
        (
            "metrics prometheus=\"prom:9090\"",
            "is not an http:// or https:// URL",
        ),
        (
            "metrics prometheus=\"http://prom:9090\" match=\"job=vllm\"",
            "label matchers",
        ),
        (
            "metrics \"http://a/metrics\" lag=\"5s\"",
            "belongs to a Prometheus source",
        ),
    ] {
        let wrong = parse_plan("p.kdl", replicas(metrics)).unwrap_err();
        let said: Vec<String> = wrong
            .diagnostics
            .iter()
            .map(|d| d.message.clone())
            .collect();
        assert!(said.iter().any(|m| m.contains(says)), "{metrics}: {said:?}");
    }
    // GPU readings from commands: nvidia-smi here, or the user's, each once.
    let plan = parse_plan(
        "p.kdl",
        replicas("gpus \"nvidia-smi\"; gpus command=\"ssh n nvidia-smi --format=csv\""),
    )
    .unwrap();
    assert_eq!(
        plan.target.gpus,
        [
            crate::plan::GpuSource::NvidiaSmi,
            crate::plan::GpuSource::Command("ssh n nvidia-smi --format=csv".into())
        ]
    );
    assert_eq!(
        bad(&replicas(
            "gpus \"rocm-smi\"; gpus; gpus \"nvidia-smi\" command=\"x\"; gpus \"nvidia-smi\"; gpus \"nvidia-smi\""
        )),
        [
            "unknown GPU source \"rocm-smi\"",
            "`gpus` names no source",
            "`gpus` takes a source or command=, not both",
            "this GPU source is named twice"
        ]
    );
    assert_eq!(
        bad(&replicas(
            "metrics \"http://a/metrics\" \"http://a/metrics\" \"b\" 3"
        )),
        [
            "\"http://a/metrics\" is named twice",
            "\"b\" is not an http:// or https:// URL",
            "`metrics` takes URLs or one flag"
        ]
    );
    assert_eq!(
        bad(&format!(
            "target \"sim\" {{ stream \"yes\" }}\nworkload {{ input 1; output 1 }}\n{phases}"
        )),
        ["expected #true or #false, found a string"]
    );
    assert_eq!(
        bad(&format!("target \"sim\"\nworkload {{ input 1 }}\n{phases}")),
        ["the workload has no `output`"]
    );
    assert_eq!(
        bad(&format!(
            "target \"sim\"\nworkload {{ tokenizer \"gpt9\"; input 1; output 1 }}\n{phases}"
        )),
        ["unknown tokenizer \"gpt9\""]
    );
    assert_eq!(
        bad(&format!(
            "target \"sim\"\nworkload {{ input 1; output 1 weight=2 }}\n{phases}"
        )),
        ["unknown property `weight` on `output`"]
    );
    assert_eq!(
        bad("workload { input 1; output 1 }"),
        ["the plan has no `target`", "the plan has no `phase`"]
    );
}

#[test]
fn simulator_profiles_engines_and_faults() {
    let plan = parse("sim { profile \"tiny\"; engine { max-seqs 8; step-base \"2ms\" }; faults { http-5xx \"2%\"; stall \"1s\" at-token=4 rate=\"10%\" } }").unwrap();
    let engine = plan.sim.engine.unwrap();
    assert_eq!(engine.max_seqs, 8);
    assert_eq!(engine.step_base, Duration::from_millis(2));
    assert_eq!(
        engine.kv_cache_tokens,
        profiles::builtin("tiny").unwrap().kv_cache_tokens
    );
    assert_eq!(plan.sim.faults.http_5xx, 0.02);
    assert_eq!(
        plan.sim.faults.stall,
        Some(Stall {
            duration: Duration::from_secs(1),
            at_token: 4,
            rate: 0.1
        })
    );
    assert_eq!(
        messages("sim { profile \"h200-magic\" }"),
        ["no built-in profile is named \"h200-magic\""]
    );
    assert_eq!(
        messages("sim { engine { warp-drive 9 } }"),
        ["unknown node `warp-drive` in `engine`"]
    );
    assert_eq!(
        messages("sim { engine { queue-full-status 500 } }"),
        ["a full queue answers 429 or 503"]
    );
    assert_eq!(
        messages("sim { faults { http-5xx 0.5 } }"),
        ["expected a percentage string, found a number"]
    );
    assert_eq!(
        messages("sim { engine { max-seqs 64; max-batched-tokens 32 } }"),
        ["max-batched-tokens is below max-seqs: running sequences could not all decode in one step"]
    );
    let profile = parse_sim_profile("p.kdl", "sim { profile \"qwen2.5-7b-l4\" }".into()).unwrap();
    assert_eq!(profile.engine.unwrap().max_seqs, 128);
    assert!(parse_sim_profile("p.kdl", "target \"sim\"".into()).is_err());
}

#[test]
fn kdl_syntax_errors_are_diagnostics_too() {
    let errors = parse_plan("t.kdl", "target \"sim\" {\n timeout 60s\n}\n".into()).unwrap_err();
    assert!(!errors.diagnostics.is_empty());
    assert!(errors.render().contains("t.kdl"));
}

#[test]
fn absurd_values_are_diagnostics_at_the_value() {
    let cases = [
        (
            "target \"sim\" { timeout \"99999999999999999999h\" }",
            "longest duration allowed",
        ),
        (
            "target \"sim\" { timeout (h)1e300 }",
            "longest duration allowed",
        ),
        ("target \"sim\" { timeout (s)-1 }", "is not a duration"),
        (
            "phase \"x\" { at-once 4000000000 }",
            "it must be at most 100000",
        ),
        (
            "phase \"x\" { concurrency 100001; duration \"1s\" }",
            "it must be at most 100000",
        ),
        (
            "phase \"x\" { rate 1e-300; duration \"1s\" }",
            "fewer than one",
        ),
        (
            "phase \"x\" { rate 1e-300; requests 5 }",
            "longer than the longest phase",
        ),
        (
            "phase \"x\" { rate 2e6; duration \"1s\" }",
            "it must be at most 1000000",
        ),
        (
            "phase \"x\" { rate 1e9; duration \"1h\" }",
            "it must be at most 1000000",
        ),
        (
            "phase \"x\" { rate 1000; duration \"10h\" }",
            "more than a plan may",
        ),
        (
            "phase \"x\" { rate 5; arrivals \"gamma\" cv=1e308; duration \"1s\" }",
            "at most 10",
        ),
        (
            "phase \"x\" { rate 5; arrivals \"gamma\" cv=0.001; duration \"1s\" }",
            "from 0.01 to 10",
        ),
        (
            "phase \"x\" { requests 30000000; concurrency 1 }",
            "at most 20000000",
        ),
        (
            "phase \"x\" { rate 5; duration \"31d\" }",
            "longest duration allowed",
        ),
        (
            "workload { input 999999999; output 1 }",
            "it must be at most 4194304",
        ),
        (
            "sim { engine { max-seqs 99999999999 } }",
            "it must be at most 100000",
        ),
    ];
    for (extra, expected) in cases {
        let text = if extra.starts_with("target") {
            format!("{extra}\nworkload {{ input 1; output 1 }}\nphase \"p\" {{ rate 1; duration \"1s\" }}")
        } else if extra.starts_with("workload") {
            format!("target \"sim\"\n{extra}\nphase \"p\" {{ rate 1; duration \"1s\" }}")
        } else {
            format!("{BASE}{extra}")
        };
        let errors = parse_plan("t.kdl", text.clone()).unwrap_err();
        let messages: Vec<_> = errors
            .diagnostics
            .iter()
            .map(|d| d.message.as_str())
            .collect();
        assert!(
            messages.iter().any(|m| m.contains(expected)),
            "{extra}: {messages:?}"
        );
        // Every diagnostic points into the plan, never at the whole file.
        assert!(
            errors.diagnostics.iter().all(|d| d.span.offset() > 0),
            "{extra}"
        );
    }
}

#[test]
fn plans_too_large_or_too_deep_are_refused_before_parsing() {
    let deep = format!("{BASE}{}{}", "a {".repeat(5000), "}".repeat(5000));
    let errors = parse_plan("t.kdl", deep).unwrap_err();
    assert_eq!(errors.diagnostics.len(), 1);
    assert!(errors.diagnostics[0]
        .message
        .contains("nest deeper than 32"));
    let large = format!("{BASE}// {}\n", "x".repeat(limits::MAX_PLAN_BYTES as usize));
    let errors = parse_plan("t.kdl", large).unwrap_err();
    assert!(errors.diagnostics[0]
        .message
        .contains("more than the largest plan"));
    let many: String = (0..1001)
        .map(|i| format!("phase \"p{i}\" {{ rate 1; duration \"1s\" }}\n"))
        .collect();
    let errors = parse_plan(
        "t.kdl",
        format!("target \"sim\"\nworkload {{ input 1; output 1 }}\n{many}"),
    )
    .unwrap_err();
    assert!(errors.diagnostics[0]
        .message
        .contains("more than 1000 phases"));
}

#[test]
fn new_users_mistakes_get_the_hint_they_need() {
    // A duration without quotes is a KDL syntax error: say durations are strings.
    let errors = parse("phase \"d\" { rate 1; duration 2m }").unwrap_err();
    let help = errors.diagnostics[0].help.clone().unwrap_or_default();
    assert!(help.contains("write \"2m\""), "{help}");
    let errors = parse("sla { error-rate < 1% }").unwrap_err();
    let help = errors.diagnostics[0].help.clone().unwrap_or_default();
    assert!(help.contains("write \"1%\""), "{help}");
    // A statistic left out.
    assert_eq!(
        messages("sla { itl < \"50ms\" }"),
        ["`itl` needs a statistic before the comparison"]
    );
    assert_eq!(
        messages("sla { ttft <= \"50ms\" }"),
        ["`ttft` needs a statistic"]
    );
    // A duplicate name is found whatever else is wrong with the phase.
    let found = messages("phase \"steady\" { rate -1; duration \"1s\" }");
    assert!(
        found.contains(&"phase \"steady\" is defined twice".to_string()),
        "{found:?}"
    );
    assert!(
        found.iter().any(|m| m.contains("out of range")),
        "{found:?}"
    );
}

#[test]
fn a_syntax_error_does_not_hide_the_mistakes_in_the_rest_of_the_plan() {
    let text = "target \"sim\" { frob 1 }\nworkload { input 1; output 1 }\nphase \"a\" { rate 1; duration 5s }\nphase \"b\" { rate 0; duration \"1s\" }\nsla { ttft p99 < \"1s\" phase=\"a\"; e2e p99 < \"1s\" phase=\"zzz\" }\n";
    let errors = parse_plan("t.kdl", text.into()).unwrap_err();
    let found: Vec<_> = errors
        .diagnostics
        .iter()
        .map(|d| d.message.clone())
        .collect();
    assert!(
        found.iter().any(|m| m.contains("unknown node `frob`")),
        "{found:?}"
    );
    assert!(
        found.iter().any(|m| m.contains("0 is out of range")),
        "{found:?}"
    );
    assert!(
        found
            .iter()
            .any(|m| m.contains("no phase is named \"zzz\"")),
        "{found:?}"
    );
    // Phase "a" could not be read, but it exists: naming it is not a mistake.
    assert!(!found.iter().any(|m| m.contains("\"a\"")), "{found:?}");
    assert!(
        !found.iter().any(|m| m.contains("has no `phase`")),
        "{found:?}"
    );
    // Diagnostics stay in file order, the syntax error among them.
    let offsets: Vec<_> = errors.diagnostics.iter().map(|d| d.span.offset()).collect();
    assert!(offsets.windows(2).all(|w| w[0] <= w[1]), "{offsets:?}");
    // A broken target block is not "missing".
    let errors = parse_plan("t.kdl", "target \"sim\" { timeout 60s }\nworkload { input 1; output 1 }\nphase \"a\" { rate 1; duration \"1s\" }\n".into()).unwrap_err();
    assert!(
        !errors.render().contains("has no `target`"),
        "{}",
        errors.render()
    );
}

#[test]
fn reasoning_options_become_body_fields() {
    let plan = plan_with(
        "reasoning-effort \"low\"; thinking #false; sampling temperature=0.6",
        "input 8; output 4",
    )
    .unwrap();
    assert_eq!(plan.target.body["reasoning_effort"], "low");
    assert_eq!(
        plan.target.body["chat_template_kwargs"]["enable_thinking"],
        false
    );
    assert_eq!(plan.target.body["temperature"], 0.6);
    let errors = plan_with("reasoning-effort \"extreme\"", "input 8; output 4").unwrap_err();
    assert!(
        errors.diagnostics[0]
            .message
            .contains("unknown reasoning effort \"extreme\""),
        "{:?}",
        errors.diagnostics
    );
}

#[test]
fn report_export_names_measures_once_each_and_its_mistakes() {
    let plan = parse("report { export \"ttft-p99-ms\" \"capacity\" \"ttft-p99-ms\" }").unwrap();
    assert_eq!(plan.report.export, ["ttft-p99-ms", "capacity"]);
    assert!(parse("report { interval \"1s\" }")
        .unwrap()
        .report
        .export
        .is_empty());
    assert_eq!(messages("report { export }"), ["`export` names no measure"]);
    assert_eq!(
        messages("report { export 99 }"),
        ["`export` takes measure names as strings"]
    );
    assert_eq!(
        messages("report { export \"ttft-p95\" }"),
        ["`ttft-p95` is not a measure llmload exports"]
    );
}

#[test]
fn report_records_chooses_plain_compressed_or_by_size_and_names_the_choices() {
    assert_eq!(parse("").unwrap().report.records, RecordsChoice::Auto);
    for (text, choice) in [
        ("auto", RecordsChoice::Auto),
        ("zstd", RecordsChoice::Zstd),
        ("jsonl", RecordsChoice::Jsonl),
    ] {
        let plan = parse(&format!("report {{ records \"{text}\" }}")).unwrap();
        assert_eq!(plan.report.records, choice);
    }
    let errors = parse("report { records \"gzip\" }").unwrap_err();
    assert_eq!(errors.diagnostics.len(), 1);
    let diagnostic = &errors.diagnostics[0];
    assert_eq!(diagnostic.message, "`gzip` is not a way to write records");
    let help = diagnostic.help.as_deref().unwrap_or("");
    assert!(
        help.contains("\"zstd\"") && help.contains("\"jsonl\""),
        "{help}"
    );
    assert_eq!(
        messages("report { records #true }").len(),
        1,
        "a non-string is one diagnostic"
    );
}

#[test]
fn reset_cache_is_read_in_a_phase_and_before_each_step_and_probe() {
    let plan = parse_plan(
        "t.kdl",
        "target \"sim\"\nworkload { input 8; output 4 }\n\
         phase \"cold\" { concurrency 1; requests 2; reset-cache #true }\n\
         sweep \"s\" { concurrency 1 2; requests 4; warmup \"1s\"; reset-cache #true }\n\
         search \"c\" { rate from=1 to=4; duration \"2s\"; reset-cache #true }\n\
         sla { ttft p99 < \"1s\" }\n"
            .into(),
    )
    .unwrap();
    let flags: Vec<(&str, bool)> = plan
        .phases
        .iter()
        .map(|p| (p.name.as_str(), p.reset_cache))
        .collect();
    assert_eq!(
        flags,
        [
            ("cold", true),
            ("s warmup @ 1", true),
            ("s @ 1", false),
            ("s warmup @ 2", true),
            ("s @ 2", false)
        ]
    );
    assert!(plan.search.as_ref().unwrap().reset_cache);
    // Its probes' schedules (each starts cold): planner::tests.
    assert_eq!(
        messages("phase \"x\" { concurrency 1; requests 1; reset-cache \"yes\" }\n"),
        ["expected #true or #false, found a string"]
    );
}

#[test]
fn images_and_audio_are_read_with_their_defaults_and_every_mistake_named() {
    let plan = plan_with(
        "api \"chat\"",
        "input 8; output 4; images min=0 max=3 format=\"png\" position=\"after\" { size \"1280x720\" weight=3; size \"512x512\"; }; audio \"2.5s\" signal=\"noise\"",
    )
    .unwrap();
    let images = plan.workload.images.unwrap();
    assert_eq!((images.count_min, images.count_max), (0, 3));
    assert_eq!(images.format, ImageFormat::Png);
    assert_eq!(images.position, MediaPosition::After);
    assert_eq!(
        images.sizes,
        [
            ImageSize {
                width: 1280,
                height: 720,
                weight: 3.0
            },
            ImageSize {
                width: 512,
                height: 512,
                weight: 1.0
            }
        ]
    );
    let audio = plan.workload.audio.unwrap();
    assert_eq!(audio.length, Duration::from_millis(2500));
    assert_eq!((audio.sample_rate, audio.signal), (16_000, Signal::Noise));
    assert_eq!(audio.position, MediaPosition::Before);
    // JPEG at quality 85, one image, before the text, unless the plan says otherwise.
    let plan = plan_with("", "input 8; output 4; images { size \"64x64\"; }").unwrap();
    let images = plan.workload.images.unwrap();
    assert_eq!(images.format, ImageFormat::Jpeg { quality: 85 });
    assert_eq!((images.count_min, images.count_max), (1, 1));

    let errors = errors_of(plan_with(
        "",
        "input 8; output 4; images count=2 min=1 format=\"gif\" quality=0 position=\"middle\" { size \"640\"; size \"4x4\"; size \"10x10\" weight=0; }; audio \"20m\" sample-rate=100 signal=\"chirp\"",
    ));
    let all = errors.join("\n");
    for expected in [
        "`images` takes count=N, or both min= and max=",
        "format \"gif\" is not one llmload encodes",
        "0 is out of range: it must be at least 1",
        "position \"middle\" is neither before nor after the text",
        "\"640\" is not a size",
        "4 pixels is out of range",
        "0 is out of range: it must be greater than zero",
        "a clip of 1200 s is longer than llmload sends",
        "100 is out of range",
        "signal \"chirp\" is neither a tone nor noise",
    ] {
        assert!(all.contains(expected), "{expected} not in {all}");
    }
    let errors = errors_of(plan_with(
        "",
        "input 8; output 4; images format=\"png\" quality=90 { size \"8x8\"; }; audio",
    ));
    let all = errors.join("\n");
    for expected in ["PNG is lossless", "`audio` needs the clip's length"] {
        assert!(all.contains(expected), "{expected} not in {all}");
    }
    assert!(errors_of(plan_with("", "input 8; output 4; images"))
        .join("\n")
        .contains("`images` has no size"));
    // Every image is made in memory and sent in one body: a request's pixels are bounded.
    let all = errors_of(plan_with(
        "",
        "input 8; output 4; images count=2 { size \"64x64\"; size \"8192x8192\"; }",
    ))
    .join("\n");
    assert!(all.contains("2 images of 67.1 megapixels"), "{all}");
    assert!(plan_with(
        "",
        "input 8; output 4; images count=1 { size \"8192x8192\"; }"
    )
    .is_ok());
}

#[test]
fn media_go_only_to_an_api_that_carries_them() {
    let images = "input 8; output 4; images { size \"64x64\"; }";
    let audio = "input 8; output 4; audio \"1s\"";
    for api in ["chat", "responses", "messages"] {
        assert!(
            plan_with(&format!("api \"{api}\""), images).is_ok(),
            "{api}"
        );
    }
    assert!(plan_with("api \"chat\"", audio).is_ok());
    let refused = plan_with("api \"completions\"", images).unwrap_err();
    let diagnostic = refused
        .diagnostics
        .iter()
        .find(|d| d.message.contains("api \"completions\" carries no images"))
        .expect("completions refuses images");
    assert!(
        diagnostic
            .help
            .as_deref()
            .is_some_and(|help| help.contains("set api \"chat\", \"responses\", \"messages\"")),
        "{diagnostic:?}"
    );
    let all = errors_of(plan_with("api \"messages\"", audio)).join("\n");
    assert!(all.contains("api \"messages\" carries no audio"), "{all}");
    let all = errors_of(plan_with(
        "",
        "input 8; output 4; images { size \"64x64\"; }; conversation turns=2",
    ))
    .join("\n");
    assert!(
        all.contains("images and audio go with single requests"),
        "{all}"
    );
    let all = errors_of(plan_with(
        "api \"embeddings\"",
        "input 8; batch 4; images { size \"64x64\"; }",
    ))
    .join("\n");
    assert!(
        all.contains("`images` is for the APIs that generate"),
        "{all}"
    );
}

#[test]
fn the_simulators_vision_mode_is_read() {
    let plan =
        parse("sim { vision patch=14 encode=\"5ms\" per-token=\"0us\" audio-tokens=50; }").unwrap();
    let vision = plan.sim.vision.unwrap();
    assert_eq!(vision.patch, 14);
    assert_eq!(vision.encode, Duration::from_millis(5));
    assert_eq!(vision.image_tokens(28, 29), 6);
    assert_eq!(vision.audio_tokens(1.01), 51);
    assert!(messages("sim { vision patch=0 tile=2; }")
        .join("\n")
        .contains("unknown property `tile` on `vision`"));
}

#[test]
fn image_urls_serve_on_loopback_only_and_need_images_and_a_real_server() {
    let real = |workload: &str| {
        parse_plan(
            "t.kdl",
            format!("target \"http://127.0.0.1:8000\" {{ api \"chat\"; model \"m\"; }}\nworkload {{ {workload} }}\nphase \"a\" {{ concurrency 1; requests 2 }}\n"),
        )
    };
    let plan = real("input 8; output 4; images { size \"64x64\"; }; image-urls port=8099").unwrap();
    assert_eq!(
        plan.workload.image_urls,
        Some(crate::plan::ImageUrls {
            host: std::net::IpAddr::from([127, 0, 0, 1]),
            port: 8099
        })
    );
    let plan =
        real("input 8; output 4; images { size \"64x64\"; }; image-urls host=\"::1\"").unwrap();
    assert!(plan.workload.image_urls.unwrap().host.is_loopback());
    let plan = real("input 8; output 4; images { size \"64x64\"; }; image-urls #false").unwrap();
    assert_eq!(plan.workload.image_urls, None);

    let all = errors_of(real(
        "input 8; output 4; images { size \"64x64\"; }; image-urls host=\"10.0.0.5\"",
    ))
    .join("\n");
    assert!(
        all.contains("image-urls host \"10.0.0.5\" is not a loopback address"),
        "{all}"
    );
    let all = errors_of(real("input 8; output 4; image-urls")).join("\n");
    assert!(
        all.contains("`image-urls` serves the requests' images, and the workload sends none"),
        "{all}"
    );
    let all = errors_of(plan_with(
        "api \"chat\"",
        "input 8; output 4; images { size \"64x64\"; }; image-urls",
    ))
    .join("\n");
    assert!(all.contains("the simulator reads images inline"), "{all}");
}

#[test]
fn a_misspelt_name_gets_the_nearest_and_its_consequence_comes_after_it() {
    let errors = parse(
        "phase \"typo\" { concurency 2; duraton \"1s\" }\nsla { ttfb p99 < \"1s\"; e2e p99 < \"1s\" phse=\"steady\" }\n",
    )
    .unwrap_err();
    let shown: Vec<(&str, &str)> = errors
        .diagnostics
        .iter()
        .map(|d| (d.message.as_str(), d.help.as_deref().unwrap_or("")))
        .collect();
    let messages: Vec<&str> = shown.iter().map(|(m, _)| *m).collect();
    assert_eq!(
        messages,
        [
            "unknown node `concurency` in `phase`",
            "unknown node `duraton` in `phase`",
            "unknown metric `ttfb`",
            "unknown property `phse` on `e2e`",
            // The consequence of the first, after every cause although its line is first.
            "phase \"typo\" has no load model",
        ]
    );
    for (help, meant) in
        shown
            .iter()
            .map(|(_, h)| *h)
            .zip(["concurrency", "duration", "ttft", "phase"])
    {
        assert!(
            help.starts_with(&format!("did you mean `{meant}`? ")),
            "{help}"
        );
    }
    // A name nothing is near gets no guess.
    let help = parse("phase \"x\" { rate 1; requests 2; frobnicate 3 }\n")
        .unwrap_err()
        .diagnostics[0]
        .help
        .clone()
        .unwrap_or_default();
    assert!(help.starts_with("allowed here:"), "{help}");
}

#[test]
fn a_sessions_phase_reads_its_file_and_says_each_mistake_where_it_is() {
    let dir = std::env::temp_dir().join(format!("llmload-sessions-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let good = "{\"id\": \"a\", \"block_size\": 16, \"requests\": [{\"t\": 0, \"type\": \"n\", \"in\": 32, \"out\": 4, \"hash_ids\": [1, 2]}, {\"t\": 1, \"type\": \"subagent\", \"status\": \"completed\", \"requests\": [{\"t\": 1.5, \"type\": \"n\", \"in\": 16, \"out\": 4}]}, {\"t\": 3, \"type\": \"n\", \"in\": 48, \"out\": 4, \"hash_ids\": [1, 2, 3]}]}";
    let bad = "{\"id\": \"b\", \"block_size\": 16, \"requests\": [{\"t\": 0, \"type\": \"subagent\", \"requests\": [{\"t\": 0, \"type\": \"n\", \"in\": 0, \"out\": 4}]}]}";
    std::fs::write(dir.join("good.jsonl"), format!("{good}\n{good}\n")).unwrap();
    std::fs::write(dir.join("bad.jsonl"), format!("{good}\n\n{bad}\n")).unwrap();
    std::fs::write(dir.join("empty.jsonl"), "\n").unwrap();
    // OpenTelemetry spans: a chat span of trace t1, then one without its token counts.
    let span = |trace: &str, id: &str, usage: &str| {
        format!(
            "{{\"resourceSpans\": [{{\"scopeSpans\": [{{\"spans\": [{{\"traceId\": \"{trace}\", \"spanId\": \"{id}\", \
             \"startTimeUnixNano\": \"1000\", \"endTimeUnixNano\": \"2000\", \"attributes\": [{{\"key\": \
             \"gen_ai.operation.name\", \"value\": {{\"stringValue\": \"chat\"}}}}{usage}]}}]}}]}}]}}"
        )
    };
    let usage = ", {\"key\": \"gen_ai.usage.input_tokens\", \"value\": {\"intValue\": \"30\"}}, \
                 {\"key\": \"gen_ai.usage.output_tokens\", \"value\": {\"intValue\": 5}}";
    std::fs::write(
        dir.join("otel.jsonl"),
        format!("{}\n{}\n", span("t1", "a", usage), span("t2", "b", usage)),
    )
    .unwrap();
    std::fs::write(
        dir.join("bad-otel.jsonl"),
        format!("{}\n{}\n", span("t1", "a", usage), span("t1", "b", "")),
    )
    .unwrap();
    let file = dir.join("plan.kdl");
    let parse_here = |phase: &str| {
        let text = format!("target \"sim\"\nworkload {{ }}\nphase \"a\" {{ {phase} }}\n");
        parse_plan(file.to_str().unwrap(), text)
    };
    let plan = parse_here(
        "sessions \"good.jsonl\" concurrent=4 wait-scale=0.5 idle-cap=\"30s\" start=\"25%..75%\"",
    )
    .unwrap();
    let Load::Sessions(sessions) = &plan.phases[0].load else {
        panic!("sessions")
    };
    assert_eq!((sessions.concurrent, sessions.wait_scale), (4, 0.5));
    assert_eq!(sessions.idle_cap, Some(Duration::from_secs(30)));
    assert_eq!(sessions.start_window, Some((0.25, 0.75)));
    let summary = &sessions.summary;
    assert_eq!(
        (
            summary.sessions,
            summary.calls,
            summary.subagents,
            summary.most_agents
        ),
        (2, 6, 2, 2)
    );
    assert_eq!(summary.sha256.len(), 64);
    let plan = parse_here("sessions \"otel.jsonl\"").unwrap();
    let Load::Sessions(sessions) = &plan.phases[0].load else {
        panic!("sessions")
    };
    assert_eq!(
        sessions.summary.format,
        Some(crate::plan::sessions::SessionFormat::Otel)
    );
    assert_eq!((sessions.summary.sessions, sessions.summary.calls), (2, 2));
    let cases: &[(&str, &str)] = &[
        // The file's line, the field and what is wrong with it.
        (
            "sessions \"bad.jsonl\"",
            "bad.jsonl:3: requests[0].requests[0].in: 0 prompt tokens is out of range",
        ),
        (
            "sessions \"missing.jsonl\"",
            "missing.jsonl:0: cannot read it",
        ),
        (
            "sessions \"bad-otel.jsonl\"",
            "bad-otel.jsonl:2: resourceSpans[0].scopeSpans[0].spans[0].attributes[\"gen_ai.usage.input_tokens\"]: a model call's span needs its token count",
        ),
        ("sessions \"empty.jsonl\"", "has no call"),
        (
            "sessions \"good.jsonl\"; requests 10",
            "a sessions phase has no request limit",
        ),
        (
            "sessions \"good.jsonl\" start=\"75%..25%\"",
            "a start window is two shares",
        ),
        (
            "sessions \"good.jsonl\" start=\"half\"",
            "a start window is two shares",
        ),
        ("sessions \"good.jsonl\" concurrent=0", "0 is out of range"),
        (
            "sessions \"good.jsonl\" concurrent=4 rate=2",
            "either so many at once (`concurrent=`) or at a rate",
        ),
        (
            "sessions \"good.jsonl\" max-in-flight=0",
            "0 is out of range",
        ),
        (
            "sessions \"good.jsonl\"; arrivals \"poisson\"",
            "`arrivals` applies only to open-loop phases",
        ),
    ];
    for (phase, expected) in cases {
        let errors = errors_of(parse_here(phase));
        assert!(
            errors.iter().any(|e| e.contains(expected)),
            "{phase}: {errors:?}"
        );
    }
    std::fs::remove_dir_all(&dir).ok();
}
