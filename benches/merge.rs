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

use std::io::Write;
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
            generated.elapsed().as_secs_f64(),
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
    let template = lines
        .iter()
        .find(|l| l["event"] == "request")
        .expect("a request")
        .clone();
    for line in lines
        .iter()
        .filter(|l| l["event"] == "run" || l["event"] == "phase_start")
    {
        writeln!(out, "{line}").expect("a write");
    }
    let mut record = template;
    for i in 0..requests {
        record["seq"] = (shard - 1 + i * count).into();
        record["intended_send_us"] = (i * 100).into();
        record["actual_send_us"] = (i * 100 + 20).into();
        writeln!(out, "{record}").expect("a write");
    }
    for line in lines
        .iter()
        .filter(|l| l["event"] == "phase_end" || l["event"] == "run_end")
    {
        let mut line = line.clone();
        line["at_us"] = (requests * 100 + 1_000_000).into();
        if line["event"] == "phase_end" {
            line["sent"] = requests.into();
        }
        writeln!(out, "{line}").expect("a write");
    }
    drop(out);
    std::fs::metadata(&path).map_or(0, |m| m.len())
}

/// Runs `command` to its end: seconds, and peak resident memory in MB (VmHWM, read every 5 ms).
fn measured(command: &mut Command) -> (f64, f64) {
    let started = Instant::now();
    let mut child = command
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("a child");
    let mut peak_kib = 0.0f64;
    let status = loop {
        if let Some(status) = child.try_wait().expect("a child") {
            break status;
        }
        if let Ok(text) = std::fs::read_to_string(format!("/proc/{}/status", child.id())) {
            if let Some(kib) = text
                .lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse::<f64>().ok())
            {
                peak_kib = peak_kib.max(kib);
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    };
    assert!(matches!(status.code(), Some(0 | 1)), "{status}");
    (started.elapsed().as_secs_f64(), peak_kib / 1024.0)
}
