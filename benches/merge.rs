//! The merge benchmark (not a test): `llmload merge` and `llmload report` over shards holding
//! millions of records, their time and peak memory. `cargo bench --bench merge`
//! (`LLMLOAD_MERGE_RECORDS`, default 10,000,000, over `LLMLOAD_MERGE_SHARDS`, default 4).
//!
//! The shards are generated, not sent (ten million requests would take hours to send on this
//! machine): each is a real shard run of a short plan against the embedded simulator, whose
//! records are then grown to its share of the total: its header and phases as they are, its
//! first request copied with this shard's sequence numbers and send times 100 µs apart,
//! compressed (records.jsonl.zst) as a run that long writes them. Then the merge runs at a
//! quarter of the total and at the total, to show time linear and memory flat in the records.

#[path = "../tests/common/mod.rs"]
mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

const LLMLOAD: &str = env!("CARGO_BIN_EXE_llmload");

fn main() {
    let total: u64 = env_number("LLMLOAD_MERGE_RECORDS", 10_000_000);
    let shards: u64 = env_number("LLMLOAD_MERGE_SHARDS", 4);
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("merge-bench");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a directory");
    let plan = dir.join("plan.kdl");
    std::fs::write(
        &plan,
        "plan \"merge\" { seed 5 }\ntarget \"sim\" { api \"chat\" }\n\
         sim { ttft \"5ms\"; itl \"1ms\" }\n\
         workload { input 128; output 64 ignore-eos=#true }\n\
         phase \"steady\" { rate 20; duration \"1s\" }\nsla { ttft p99 < \"1s\" }\n",
    )
    .expect("plan.kdl");
    let dirs: Vec<PathBuf> = (1..=shards)
        .map(|k| {
            let out = dir.join(format!("shard-{k}"));
            let status = Command::new(LLMLOAD)
                .arg("run")
                .arg(&plan)
                .args(["--shard", &format!("{k}/{shards}"), "--quiet", "--out"])
                .arg(&out)
                .stdout(Stdio::null())
                .status()
                .expect("llmload run");
            assert_eq!(status.code(), Some(0));
            out
        })
        .collect();
    let templates: Vec<Vec<serde_json::Value>> = dirs.iter().map(|d| read_lines(d)).collect();
    println!("# llmload merge benchmark\n");
    for records in [total / 4, total] {
        let generated = Instant::now();
        let mut bytes = 0;
        for (k, (shard, lines)) in dirs.iter().zip(&templates).enumerate() {
            bytes += grow(shard, lines, k as u64 + 1, shards, records / shards);
        }
        let generated_s = generated.elapsed().as_secs_f64();
        let out = dir.join(format!("merged-{records}"));
        let (merge_s, merge_mb) = measured(
            Command::new(LLMLOAD)
                .arg("merge")
                .args(&dirs)
                .arg("--out")
                .arg(&out),
        );
        let (report_s, report_mb) = measured(Command::new(LLMLOAD).arg("report").arg(&out));
        println!(
            "- {records} records in {shards} shards ({:.0} MB of zstd, generated in {:.0} s): \
             merge {merge_s:.1} s ({:.0} records/s), peak RSS {merge_mb:.0} MB; report {report_s:.1} s, \
             peak RSS {report_mb:.0} MB",
            bytes as f64 / 1e6,
            generated_s,
            records as f64 / merge_s,
        );
        let _ = std::fs::remove_dir_all(&out);
    }
}

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

fn read_lines(dir: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(dir.join("records.jsonl"))
        .expect("records.jsonl")
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON"))
        .collect()
}

/// Writes the shard's records.jsonl.zst with `requests` requests; returns its size.
fn grow(dir: &Path, lines: &[serde_json::Value], shard: u64, count: u64, requests: u64) -> u64 {
    let _ = std::fs::remove_file(dir.join("records.jsonl"));
    let path = dir.join("records.jsonl.zst");
    let file = std::fs::File::create(&path).expect("records.jsonl.zst");
    let mut out = zstd::stream::write::Encoder::new(std::io::BufWriter::new(file), 3)
        .expect("an encoder")
        .auto_finish();
    common::write_grown_shard(&mut out, lines, shard, count, requests, 100);
    drop(out);
    std::fs::metadata(&path).map_or(0, |m| m.len())
}

/// Runs `command` to its end: seconds, and peak resident memory in MB.
fn measured(command: &mut Command) -> (f64, f64) {
    let run = common::run_measured(command);
    assert!(matches!(run.status.code(), Some(0 | 1)), "{}", run.status);
    (run.seconds, run.peak_mb)
}
