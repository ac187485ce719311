//! Timing fidelity: the one test whose numbers are timings. It has a test binary of its own so
//! that no other test of this crate runs beside it and competes for the 2 cores.

mod common;
use common::*;

/// Its tests measure time: they run one at a time.
/// TTFT and ITL come back within 2 ms of the simulator's known delays.
#[test]
fn ttft_and_itl_are_recovered_within_2ms() {
    let _serial = serial();
    let run = run_plan(
        &sim_plan(
            "ttft \"60ms\"; itl \"8ms\"",
            "input 64; output 24 ignore-eos=#true",
            "phase \"c\" { concurrency 2; requests 12 }",
            "ttft p50 < \"62ms\"",
        ),
        &[],
    );
    assert_eq!(run.code(), 0, "{}{}", run.stdout(), run.stderr());
    let s = run.summary();
    for stat_name in ["p50", "mean"] {
        let ttft = stat(&s, "c", "ttft_ms", stat_name);
        assert!((60.0..=62.0).contains(&ttft), "ttft {stat_name} {ttft}");
        let itl = stat(&s, "c", "itl_ms", stat_name);
        assert!((itl - 8.0).abs() <= 2.0, "itl {stat_name} {itl}");
    }
    // 12 requests × 23 gaps of one token each.
    assert_eq!(s["overall"]["metrics"]["itl_ms"]["count"], 12 * 23);
    let tpot = stat(&s, "c", "tpot_ms", "mean");
    assert!((tpot - 8.0).abs() <= 2.0, "tpot {tpot}");
    assert_eq!(s["overall"]["requests"]["ok"], 12);
    assert_eq!(s["overall"]["finish_reasons"]["length"], 12);
}

/// Against the simulator's own write times, llmload's TTFT and every inter-token gap come back
/// with sub-millisecond error at low load, and every request is matched by its x-request-id.
#[test]
fn measured_times_match_the_servers_write_times() {
    use llmload::selfcheck::fidelity::{timing_errors, MeasuredStream};
    let _serial = serial();
    let (log, truth) = run_recorded(
        &["--ttft", "30ms", "--itl", "5ms"],
        "plan \"t\" { seed 3 }\ntarget \"sim\" { timeout \"10s\" }\n\
         workload { input 32; output 16 ignore-eos=#true }\n\
         phase \"c\" { concurrency 4; requests 24 }\n",
    );
    assert_eq!(truth.len(), 24);
    for writes in &truth {
        assert_eq!(writes.token_writes_ns.len(), 16);
        let first_ms = writes.token_writes_ns[0] as f64 / 1e6;
        assert!((30.0..35.0).contains(&first_ms), "true ttft {first_ms} ms");
    }
    let header = log.header.as_ref();
    let errors = timing_errors(
        log.records
            .iter()
            .filter_map(|record| MeasuredStream::of_record(record, header)),
        &truth,
    );
    // The ids are the run's own.
    let prefix = header.and_then(|h| h.request_id_prefix.clone()).unwrap();
    assert!(
        prefix.starts_with("llmload-") && prefix.len() == 16,
        "{prefix}"
    );
    assert!(truth.iter().all(|w| w
        .request_id
        .as_deref()
        .unwrap()
        .starts_with(&format!("{prefix}-0-"))));
    assert_eq!(errors.matched, 24, "{errors:?}");
    assert_eq!((errors.unmatched, errors.chunk_count_mismatch), (0, 0));
    assert_eq!(errors.itl.count, 24 * 15);
    // The client can only add time before the first token.
    assert!(errors.ttft.min_ms >= 0.0, "{errors:?}");
    assert!(errors.ttft.p50_ms < 2.0, "{errors:?}");
    assert!(errors.itl.p50_ms.abs() < 0.5, "{errors:?}");
    if cfg!(target_os = "linux") {
        // Client and server share the machine's monotonic clock: the error splits, and every
        // token is read after it was written.
        assert_eq!(errors.read_delay.count, 24 * 16, "{errors:?}");
        assert!(errors.read_delay.min_ms >= 0.0, "{errors:?}");
        assert!(errors.read_delay.p50_ms < 1.0, "{errors:?}");
        assert!(errors.send_delay.min_ms >= 0.0, "{errors:?}");
    }
    eprintln!("{errors:?}");
}

/// The simulator's timing is its configuration at any prompt length: it counts a
/// 131,072-token prompt (700 KB of JSON) well within `ttft "50ms"`, so its first token is
/// written 50 ms after the request arrived, not after its own counting (which took 72–127 ms
/// through tiktoken's regex alone). And the count is exact: its usage says 131,072.
#[test]
fn a_long_prompt_is_answered_on_the_configured_ttft() {
    let _serial = serial();
    let (log, writes) = run_recorded(
        &["--ttft", "50ms", "--itl", "5ms"],
        "plan \"t\" { seed 3 }\ntarget \"sim\" { timeout \"10s\" }\n\
         workload { input 131072; output 4 ignore-eos=#true }\n\
         phase \"c\" { concurrency 1; requests 6 }\n",
    );
    let mut first_ms: Vec<f64> = writes
        .iter()
        .map(|writes| writes.token_writes_ns[0] as f64 / 1e6)
        .collect();
    first_ms.sort_by(f64::total_cmp);
    assert_eq!(first_ms.len(), 6);
    assert!(first_ms[0] >= 50.0, "{first_ms:?}");
    // The median on the configuration; none as late as counting through the regex made them.
    assert!(first_ms[3] < 53.0, "{first_ms:?}");
    assert!(first_ms[5] < 65.0, "{first_ms:?}");
    assert_eq!(log.records.len(), 6);
    for record in &log.records {
        assert_eq!(record.prompt_tokens, Some(131_072), "{record:?}");
    }
}
