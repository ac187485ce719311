//! Timing fidelity: the one test whose numbers are timings. It has a test binary of its own so
//! that no other test of this crate runs beside it and competes for the 2 cores.

mod common;
use common::*;

/// TTFT and ITL come back within 2 ms of the simulator's known delays.
#[test]
fn ttft_and_itl_are_recovered_within_2ms() {
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
