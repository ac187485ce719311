//! `reset-cache #true`: the server's prefix cache emptied before a phase, on the simulator's
//! engine (vLLM's `POST /reset_prefix_cache`): the first request after the reset finds nothing
//! cached, the next phase finds the prefix again; a server without a reset is a note.

mod common;

use common::*;

const PHASES: &str = "phase \"warm\" { concurrency 1; requests 6 }\n\
     phase \"after-reset\" { concurrency 1; requests 1; reset-cache #true }\n\
     phase \"warm-again\" { concurrency 1; requests 1 }\n";

#[test]
fn a_reset_empties_the_prefix_cache_before_its_phase() {
    let plan = format!(
        "plan \"reset\" {{ seed 2 }}\ntarget \"sim\" {{ timeout \"10s\" }}\nsim {{ profile \"tiny\" }}\n\
         workload {{ input 256; prefix 192 groups=1; output 4 }}\n{PHASES}"
    );
    let run = run_plan(&plan, &[]);
    assert_eq!(run.code(), 0, "{}", run.stderr());
    let summary = run.summary();
    let hits = |name: &str| {
        phase(&summary, name)["prefix_cache"]["hits"]
            .as_u64()
            .unwrap()
    };
    assert_eq!(
        hits("warm"),
        5,
        "every request after the first finds the prefix"
    );
    assert_eq!(hits("after-reset"), 0, "the reset emptied the cache");
    assert_eq!(hits("warm-again"), 1);
    let reset = &phase(&summary, "after-reset")["cache_reset"];
    assert_eq!(reset["done"], true);
    assert_eq!(reset["detail"], "POST /reset_prefix_cache (vLLM)");
    assert!(phase(&summary, "warm")["cache_reset"].is_null());
    let report = std::fs::read_to_string(run.out().join("report.md")).unwrap();
    assert!(report.contains("- Cache: reset before it"), "{report}");
}

#[test]
fn a_server_without_a_reset_is_a_note_not_a_failure() {
    // Fixed delays: the simulator keeps no prefix cache, and answers the reset with 404.
    let plan = format!(
        "plan \"reset\" {{ seed 2 }}\ntarget \"sim\" {{ timeout \"10s\" }}\nsim {{ ttft \"5ms\" }}\n\
         workload {{ input 64; output 4 }}\n{PHASES}"
    );
    let run = run_plan(&plan, &[]);
    assert_eq!(run.code(), 0, "{}", run.stderr());
    let summary = run.summary();
    let note = warning_of(&summary, "cache-reset").expect("a cache-reset note");
    assert_eq!(note["severity"], "note");
    assert!(
        note["message"]
            .as_str()
            .unwrap()
            .contains("offers none of the cache resets llmload knows"),
        "{note}"
    );
    assert_eq!(phase(&summary, "after-reset")["cache_reset"]["done"], false);
}
