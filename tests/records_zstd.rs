//! Compressed records (`records.jsonl.zst`): written when the plan asks, read back by every
//! reader (report, compare, merge), and kept by a run killed with SIGKILL up to its last flush.

mod common;

use common::*;
use std::path::Path;
use std::time::{Duration, Instant};

fn plan(records: &str, rate: u32, duration: &str) -> String {
    format!(
        r#"plan "zstd" {{ seed 5; }}
target "sim" {{ api "chat"; stream #true; timeout "10s"; }}
sim {{ profile "llama-3.1-8b-h100"; }}
workload {{ tokenizer "cl100k_base"; input {{ bucket 128; }}; output 32 ignore-eos=#true; }}
phase "steady" {{ rate {rate}; duration "{duration}"; }}
report {{ records "{records}"; }}
"#
    )
}

fn size(path: &Path) -> u64 {
    std::fs::metadata(path).unwrap().len()
}

/// The same plan and seed written plain and compressed: the same requests, the same report
/// figures from either, a quarter of the bytes or less; `report` and `compare` read the
/// compressed one.
#[test]
fn compressed_records_read_back_like_plain_ones_at_a_fraction_of_the_size() {
    let _serial = serial();
    let plain = run_plan(&plan("jsonl", 40, "3s"), &[]);
    let zstd = run_plan(&plan("zstd", 40, "3s"), &[]);
    assert_eq!(plain.code(), 0, "{}", plain.stderr());
    assert_eq!(zstd.code(), 0, "{}", zstd.stderr());
    assert!(plain.out().join("records.jsonl").is_file());
    assert!(!plain.out().join("records.jsonl.zst").exists());
    assert!(zstd.out().join("records.jsonl.zst").is_file());
    assert!(!zstd.out().join("records.jsonl").exists());

    let (plain_records, zstd_records) = (plain.records(), zstd.records());
    assert_eq!(plain_records.len(), zstd_records.len());
    assert!(zstd_records.len() > 100, "{}", zstd_records.len());
    let plain_bytes = size(&plain.out().join("records.jsonl"));
    let zstd_bytes = size(&zstd.out().join("records.jsonl.zst"));
    assert!(
        zstd_bytes * 4 < plain_bytes,
        "{zstd_bytes} bytes compressed against {plain_bytes} plain"
    );
    let requests = |summary: &serde_json::Value| summary["overall"]["requests"].clone();
    assert_eq!(requests(&zstd.summary()), requests(&plain.summary()));

    // `report` rebuilds the same summary from the compressed records.
    let before = std::fs::read_to_string(zstd.out().join("summary.json")).unwrap();
    let report = llmload().arg("report").arg(zstd.out()).output().unwrap();
    assert_eq!(report.status.code(), Some(0), "{report:?}");
    let after = std::fs::read_to_string(zstd.out().join("summary.json")).unwrap();
    let strip = |text: &str| {
        let mut value: serde_json::Value = serde_json::from_str(text).unwrap();
        value["generated_at"] = serde_json::Value::Null;
        value
    };
    assert_eq!(strip(&before), strip(&after));

    // `compare` reads either side compressed.
    let compare = llmload()
        .arg("compare")
        .arg(zstd.out())
        .arg(plain.out())
        .output()
        .unwrap();
    assert!(
        matches!(compare.status.code(), Some(0 | 1 | 3)),
        "{}",
        String::from_utf8_lossy(&compare.stderr)
    );
    assert!(String::from_utf8_lossy(&compare.stdout).contains("ttft"));
}

/// The number of whole request lines decoded from the compressed file as it stands (the zstd
/// crate's own reader, up to where the file ends, mid-frame or not).
fn decoded_requests(path: &Path) -> usize {
    let Ok(file) = std::fs::File::open(path) else {
        return 0;
    };
    let Ok(decoder) = zstd::stream::read::Decoder::new(file) else {
        return 0;
    };
    let mut text = Vec::new();
    // A frame the writer has not ended yet stops the read with an error; what came before it
    // is whole.
    let _ = std::io::Read::read_to_end(&mut std::io::BufReader::new(decoder), &mut text);
    String::from_utf8_lossy(&text)
        .lines()
        .filter(|l| l.contains("\"event\":\"request\"") && l.ends_with('}'))
        .count()
}

/// A run killed with SIGKILL in the middle of a zstd frame: every record flushed before the
/// kill reads back, with llmload's reader (`report`) and with zstd's own; records reach the
/// file within a flush interval of their requests' end, not when the frame ends.
#[test]
fn a_killed_run_keeps_every_flushed_record_of_its_compressed_file() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let plan_path = write_plan(dir.path(), &plan("zstd", 40, "60s"));
    let out = dir.path().join("out");
    let mut child = llmload()
        .arg("run")
        .arg(&plan_path)
        .arg("--out")
        .arg(&out)
        .arg("--quiet")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let records = out.join("records.jsonl.zst");
    let started = Instant::now();
    while decoded_requests(&records) < 40 && started.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(100));
    }
    let seen_before_kill = decoded_requests(&records);
    let waited = started.elapsed();
    let _ = child.kill();
    let _ = child.wait();
    // 40 requests a second, flushed at least every second: 40 records within a few seconds
    // (a frame ends only every 8 MiB: these came out of flushed blocks).
    assert!(
        seen_before_kill >= 40 && waited < Duration::from_secs(10),
        "{seen_before_kill} records readable after {waited:?}"
    );
    let kept = decoded_requests(&records);
    assert!(kept >= seen_before_kill, "{kept} < {seen_before_kill}");

    // llmload reads it back: the run was cut short, and says so, with every kept record.
    let report = llmload().arg("report").arg(&out).output().unwrap();
    assert!(
        matches!(report.status.code(), Some(0 | 1 | 3)),
        "{}",
        String::from_utf8_lossy(&report.stderr)
    );
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    let requests = summary["overall"]["requests"]["sent"].as_u64().unwrap() as usize;
    assert_eq!(requests, kept, "{}", summary["overall"]);
    assert_eq!(summary["interrupted"], true, "{}", summary["verdict"]);
}

/// Shards that wrote compressed records merge into compressed records holding all of them.
#[test]
fn compressed_shards_merge_into_compressed_records() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let plan_path = write_plan(dir.path(), &plan("zstd", 20, "2s"));
    let mut shard_dirs = Vec::new();
    let mut total = 0;
    for k in 1..=2 {
        let out = dir.path().join(format!("shard{k}"));
        let ran = run_file(&plan_path, &out, &["--shard", &format!("{k}/2")], &[]);
        assert_eq!(ran.status.code(), Some(0), "{ran:?}");
        assert!(out.join("records.jsonl.zst").is_file());
        total += read_records(&out).len();
        shard_dirs.push(out);
    }
    let merged = dir.path().join("merged");
    let merge = llmload()
        .arg("merge")
        .args(&shard_dirs)
        .arg("--out")
        .arg(&merged)
        .output()
        .unwrap();
    assert_eq!(merge.status.code(), Some(0), "{merge:?}");
    assert!(merged.join("records.jsonl.zst").is_file());
    assert!(!merged.join("records.jsonl").exists());
    assert_eq!(read_records(&merged).len(), total);
}
