//! Rate limits as hosted APIs enforce them: the simulator's token buckets (`sim { rate-limit }`)
//! answer 429 beyond them and say them in every answer's headers, and the real binary counts
//! the refusals as throttled (apart from the failed, in every output), keeps the headers per
//! request, and gates on `throttled-rate`.

mod common;
use common::*;

/// A burst of 20 against 6 requests a minute: the bucket is full at the start and refills by
/// a tenth of a request a second, so exactly 6 are answered and 14 throttled.
fn burst_plan(api: &str, sla: &str) -> String {
    format!(
        "plan \"limits\" {{ seed 5 }}\ntarget \"sim\" {{ api \"{api}\"; timeout \"10s\" }}\nsim {{ ttft \"5ms\"; itl \"1ms\"; rate-limit rpm=6 tpm=1000000 }}\nworkload {{ input 16; output 4 }}\nphase \"burst\" {{ at-once 20 }}\nsla {{ {sla} }}\n"
    )
}

#[test]
fn throttled_requests_are_counted_apart_from_failed_ones_everywhere() {
    let run = run_plan(
        &burst_plan("chat", "error-rate < \"1%\"\nthrottled-rate < \"50%\""),
        &[],
    );
    // The throttled share breaks its objective: the run fails, on that assertion alone.
    assert_eq!(run.code(), 1, "{}\n{}", run.stdout(), run.stderr());
    let summary = run.summary();
    let requests = &summary["overall"]["requests"];
    assert_eq!(requests["ok"], 6, "{requests}");
    assert_eq!(requests["throttled"], 14, "{requests}");
    assert_eq!(requests["failed"], 0, "{requests}");
    let rates = &summary["overall"]["rates"];
    assert_eq!(rates["error_rate"], 0.0);
    assert!(
        (rates["throttled_rate"].as_f64().unwrap() - 0.7).abs() < 1e-12,
        "{rates}"
    );
    let assertions = summary["verdicts"].as_array().expect("verdicts");
    let failed: Vec<&str> = assertions
        .iter()
        .filter(|a| a["outcome"] == "fail")
        .filter_map(|a| a["assertion"].as_str())
        .collect();
    assert_eq!(failed, ["throttled-rate < 50%"], "{assertions:?}");
    assert!(summary["warnings"]
        .as_array()
        .expect("warnings")
        .iter()
        .any(|w| w["code"] == "throttled"));

    let report = std::fs::read_to_string(run.out().join("report.md")).unwrap();
    assert!(report.contains("0 failed, 14 throttled"), "{report}");
    assert!(report.contains("throttled rate 70.00%"), "{report}");
    let csv = std::fs::read_to_string(run.out().join("summary.csv")).unwrap();
    assert!(csv.contains("all,requests,throttled,14,count"), "{csv}");
    assert!(csv.contains("all,throttled-rate,value,0.7,"), "{csv}");
}

#[test]
fn every_answer_says_the_budget_and_a_refusal_how_long_to_wait() {
    let run = run_plan(&burst_plan("chat", "error-rate < \"1%\""), &[]);
    assert_eq!(run.code(), 0, "{}\n{}", run.stdout(), run.stderr());
    let records = run.records();
    assert_eq!(records.len(), 20);
    let mut remaining: Vec<u64> = Vec::new();
    let mut server_ids = std::collections::BTreeSet::new();
    for record in &records {
        // The API's own id of each request, kept beside llmload's.
        let id = record["server_request_id"]
            .as_str()
            .expect("the server's id");
        assert!(id.starts_with("req_") && id.len() == 28, "{id}");
        server_ids.insert(id.to_string());
        let limit = &record["rate_limit"];
        assert_eq!(limit["requests"]["limit"], 6, "{record}");
        assert_eq!(limit["tokens"]["limit"], 1_000_000, "{record}");
        if record["error"].is_null() {
            remaining.push(limit["requests"]["remaining"].as_u64().unwrap());
            assert!(limit["retry_after_ms"].is_null(), "{record}");
        } else {
            assert_eq!(record["error"], "http_429", "{record}");
            assert_eq!(record["http_status"], 429);
            // One request a ten seconds: the seventh could go ten seconds after the burst,
            // less the little the bucket refilled while the burst arrived.
            let wait = limit["retry_after_ms"].as_u64().unwrap();
            assert!((9_900..=10_000).contains(&wait), "{wait}");
            assert_eq!(limit["requests"]["remaining"], 0);
        }
    }
    remaining.sort_unstable();
    assert_eq!(remaining, [0, 1, 2, 3, 4, 5]);
    assert_eq!(server_ids.len(), 20);
}

#[test]
fn anthropic_says_its_limits_its_own_way() {
    let run = run_plan(&burst_plan("messages", "error-rate < \"1%\""), &[]);
    assert_eq!(run.code(), 0, "{}\n{}", run.stdout(), run.stderr());
    let records = run.records();
    let throttled: Vec<&serde_json::Value> = records
        .iter()
        .filter(|r| r["error"] == "http_429")
        .collect();
    assert_eq!(throttled.len(), 14);
    for record in throttled {
        let limit = &record["rate_limit"];
        // Anthropic gives whole seconds, and its reset as a date.
        assert_eq!(limit["retry_after_ms"], 10_000, "{record}");
        let reset = limit["requests"]["reset_ms"].as_u64().unwrap();
        assert!((58_000..=60_000).contains(&reset), "{reset}");
    }
    assert_eq!(run.summary()["overall"]["requests"]["throttled"], 14);
}

#[test]
fn a_rate_limit_without_a_limit_is_a_plan_mistake() {
    let run = run_plan(
        &sim_plan(
            "rate-limit",
            "input 8; output 4",
            "phase \"p\" { requests 1 }",
            "error-rate < \"1%\"",
        ),
        &[],
    );
    assert_eq!(run.code(), 2, "{}", run.stderr());
    assert!(
        run.stderr().contains("`rate-limit` sets no limit"),
        "{}",
        run.stderr()
    );
}

/// 122 requests at once against 120 a minute: 120 are answered; the two left are told to wait
/// half a second (two a second refill), come back together, one is answered and the other told
/// to wait again. With retries, every request is answered: two sent again, three attempts
/// throttled, each retry sent when the server said.
#[test]
fn retries_wait_what_the_server_asks_and_keep_each_throttled_attempt() {
    let plan = "plan \"retry\" { seed 5 }\ntarget \"sim\" { timeout \"10s\"; on-throttle \"retry\" attempts=4 max-wait=\"5s\" }\nsim { ttft \"5ms\"; itl \"1ms\"; rate-limit rpm=120 }\nworkload { input 16; output 4 }\nphase \"burst\" { at-once 122 }\nsla { throttled-rate < \"1%\" }\n";
    let run = run_plan(plan, &[]);
    assert_eq!(run.code(), 0, "{}\n{}", run.stdout(), run.stderr());
    let summary = run.summary();
    let requests = &summary["overall"]["requests"];
    assert_eq!(requests["ok"], 122, "{requests}");
    assert_eq!(requests["throttled"], 0, "{requests}");
    assert_eq!(requests["retried"], 2, "{requests}");
    assert_eq!(requests["throttled_attempts"], 3, "{requests}");
    let records = run.records();
    let mut retried: Vec<&serde_json::Value> = records
        .iter()
        .filter(|r| r["throttled_attempts"].is_array())
        .collect();
    retried.sort_by_key(|r| r["throttled_attempts"].as_array().unwrap().len());
    assert_eq!(retried.len(), 2);
    for record in &retried {
        let attempts = record["throttled_attempts"].as_array().unwrap();
        assert_eq!(record["actual_send_us"], attempts[0]["sent_us"], "{record}");
        // Each next attempt went out when the server said: its send, less the previous
        // attempt's end, is the wait asked, within 10 ms.
        let mut previous_end = 0;
        for (i, attempt) in attempts.iter().enumerate() {
            assert_eq!(attempt["http_status"], 429);
            assert_eq!(attempt["error"], "http_429");
            let asked = attempt["retry_after_ms"].as_u64().unwrap();
            assert_eq!(attempt["waited_us"].as_u64().unwrap(), asked * 1000);
            let sent = attempt["sent_us"].as_u64().unwrap();
            if i > 0 {
                let gap_ms = (sent - previous_end) as f64 / 1000.0;
                let asked_before = attempts[i - 1]["retry_after_ms"].as_f64().unwrap();
                assert!(
                    (gap_ms - asked_before).abs() <= 10.0,
                    "{gap_ms} after asking {asked_before}"
                );
            }
            previous_end = sent + attempt["e2e_us"].as_u64().unwrap();
            assert!((400..=510).contains(&asked), "{asked}");
        }
        // The answer counts from the first send: the waits are in its TTFT.
        let ttft_ms = record["ttft_us"].as_f64().unwrap() / 1000.0;
        let waited_ms: f64 = attempts
            .iter()
            .map(|a| a["waited_us"].as_f64().unwrap() / 1000.0)
            .sum();
        assert!(ttft_ms > waited_ms, "{ttft_ms} {waited_ms}");
    }
    assert_eq!(
        retried[0]["throttled_attempts"].as_array().unwrap().len(),
        1
    );
    assert_eq!(
        retried[1]["throttled_attempts"].as_array().unwrap().len(),
        2
    );
    assert!(summary["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .any(|w| w["code"] == "throttle-retries"));
}

#[test]
fn a_wait_longer_than_the_plan_takes_is_not_retried() {
    let plan = "plan \"retry\" { seed 5 }\ntarget \"sim\" { timeout \"10s\"; on-throttle \"retry\" max-wait=\"2s\" }\nsim { ttft \"5ms\"; itl \"1ms\"; rate-limit rpm=6 }\nworkload { input 16; output 4 }\nphase \"burst\" { at-once 8 }\nsla { error-rate < \"1%\" }\n";
    let run = run_plan(plan, &[]);
    assert_eq!(run.code(), 0, "{}", run.stderr());
    let requests = &run.summary()["overall"]["requests"];
    // Ten seconds asked, two taken at most: the two beyond the bucket stay throttled.
    assert_eq!(
        (requests["ok"].as_u64(), requests["throttled"].as_u64()),
        (Some(6), Some(2))
    );
    assert_eq!(requests["retried"], 0);
}

#[test]
fn an_unknown_throttle_choice_is_a_plan_mistake_with_a_suggestion() {
    let run = run_plan(
        "plan \"t\"\ntarget \"sim\" { on-throttle \"retyr\" }\nworkload { input 8; output 4 }\nphase \"p\" { requests 1 }\n",
        &[],
    );
    assert_eq!(run.code(), 2, "{}", run.stderr());
    let stderr = run.stderr();
    assert!(stderr.contains("unknown on-throttle \"retyr\""), "{stderr}");
    assert!(stderr.contains("did you mean `retry`?"), "{stderr}");
}

/// The client paces itself to the key's budgets: 20 requests due at 40 a second against 600 a
/// minute go out 100 ms apart, each held as long as the budget asks, and none is late by the
/// client's own doing.
#[test]
fn limits_pace_the_open_loop_to_the_keys_budget() {
    let plan = "plan \"paced\" { seed 5 }\ntarget \"sim\" { timeout \"10s\"; limits rpm=600 }\nsim { ttft \"5ms\"; itl \"1ms\" }\nworkload { input 16; output 4 }\nphase \"p\" { rate 40; arrivals \"constant\"; requests 20 }\nsla { error-rate < \"1%\" }\n";
    let run = run_plan(plan, &[]);
    assert_eq!(run.code(), 0, "{}\n{}", run.stdout(), run.stderr());
    let mut records = run.records();
    assert_eq!(records.len(), 20);
    records.sort_by_key(|r| r["actual_send_us"].as_u64());
    let sends: Vec<f64> = records
        .iter()
        .map(|r| r["actual_send_us"].as_f64().unwrap() / 1000.0)
        .collect();
    for pair in sends.windows(2) {
        let gap = pair[1] - pair[0];
        assert!(
            (95.0..=115.0).contains(&gap),
            "sent {gap} ms apart: {sends:?}"
        );
    }
    for (i, record) in records.iter().enumerate() {
        // Due every 25 ms, sent every 100 ms: held 75 ms more for each one before it.
        let held_ms = record["paced_us"].as_f64().unwrap_or(0.0) / 1000.0;
        let expected = 75.0 * i as f64;
        assert!(
            (held_ms - expected).abs() < 3.0,
            "request {i} held {held_ms} ms"
        );
        // Its intended time is its slot: the lag is the client's own, small.
        let lag_ms = (record["actual_send_us"].as_f64().unwrap()
            - record["intended_send_us"].as_f64().unwrap())
            / 1000.0;
        assert!(lag_ms < 20.0, "request {i} lagged {lag_ms} ms");
    }
    let summary = run.summary();
    assert_eq!(summary["overall"]["requests"]["paced"], 19);
    let longest = summary["overall"]["requests"]["paced_max_s"]
        .as_f64()
        .unwrap();
    assert!((longest - 1.425).abs() < 0.01, "{longest}");
    // The rate the client slowed to, said beside the planned one.
    let paced = summary["overall"]["rates"]["paced_per_s"].as_f64().unwrap();
    assert!((9.8..=10.2).contains(&paced), "{paced}");
    assert!(summary["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .any(|w| w["code"] == "paced"));
}

/// A phase that ends by its duration sends what the budget allows within it, and no more.
#[test]
fn a_request_held_past_its_phases_end_is_not_sent() {
    let plan = "plan \"paced\" { seed 5 }\ntarget \"sim\" { timeout \"10s\"; limits rpm=600 }\nsim { ttft \"5ms\"; itl \"1ms\" }\nworkload { input 16; output 4 }\nphase \"p\" { rate 40; arrivals \"constant\"; duration \"1s\" }\nsla { error-rate < \"1%\" }\n";
    let run = run_plan(plan, &[]);
    assert_eq!(run.code(), 0, "{}\n{}", run.stdout(), run.stderr());
    let sent = run.records().len();
    // Slots at 0, 100, ... 900 ms fall within the second; the other 30 of 40 do not.
    assert!((9..=11).contains(&sent), "{sent}");
}

#[test]
fn limits_without_a_limit_are_a_plan_mistake() {
    let run = run_plan(
        "plan \"t\"\ntarget \"sim\" { limits }\nworkload { input 8; output 4 }\nphase \"p\" { requests 1 }\n",
        &[],
    );
    assert_eq!(run.code(), 2, "{}", run.stderr());
    assert!(
        run.stderr().contains("`limits` sets no limit"),
        "{}",
        run.stderr()
    );
}
