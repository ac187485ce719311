//! The soak benchmark (not a test): does llmload's memory stay flat over a long run, and does a
//! long run with faults of every kind keep every record?
//!
//! Two runs of the real binary against `llmload sim` in a separate process: an hour at 200
//! requests/s (`LLMLOAD_SOAK_SECONDS`, default 3600), then ten minutes at 200 requests/s with
//! about 5% of requests hit by faults of every kind the simulator injects
//! (`LLMLOAD_SOAK_FAULT_SECONDS`, default 600). The client's resident memory (VmRSS) is read
//! from /proc every 10 s. Then the records' cost: the steady plan twice more
//! (`LLMLOAD_SOAK_RECORDS_SECONDS`, default 120), its records plain and compressed, for the bytes
//! each request takes on disk and the client's CPU. The results go to stdout and to
//! `target/tmp/soak/`; docs/performance.md keeps the figures. `cargo bench --bench soak` (Linux:
//! it reads /proc).

#[path = "../tests/common/mod.rs"]
mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const LLMLOAD: &str = env!("CARGO_BIN_EXE_llmload");
const RATE: u32 = 200;
const SAMPLE_EVERY: Duration = Duration::from_secs(10);

fn main() {
    let seconds = env_seconds("LLMLOAD_SOAK_SECONDS", 3600);
    let fault_seconds = env_seconds("LLMLOAD_SOAK_FAULT_SECONDS", 600);
    let records_seconds = env_seconds("LLMLOAD_SOAK_RECORDS_SECONDS", 120);
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("soak");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a results directory");
    println!("# llmload soak benchmark\n");
    println!(
        "{RATE} req/s, 128 prompt tokens, 64 output tokens, simulator TTFT 20 ms, ITL 5 ms, \
         in a separate process; client RSS read every {} s\n",
        SAMPLE_EVERY.as_secs()
    );
    if seconds > 0 {
        soak(&dir, "steady", seconds, "", "auto");
    }
    if fault_seconds > 0 {
        // About 5% of requests hit, spread over every kind of fault.
        let faults = "faults { http-5xx \"1%\"; http-429 \"1%\"; drop-mid-stream \"1%\"; malformed-chunk \"1%\"; \
                      stall \"2s\" at-token=3 rate=\"0.5%\"; slow-headers \"300ms\" rate=\"0.5%\" }";
        soak(&dir, "faults", fault_seconds, faults, "auto");
    }
    if records_seconds > 0 {
        soak(&dir, "records-jsonl", records_seconds, "", "jsonl");
        soak(&dir, "records-zstd", records_seconds, "", "zstd");
    }
}

fn env_seconds(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

fn soak(dir: &Path, name: &str, seconds: u64, faults: &str, records: &str) {
    let profile = dir.join(format!("{name}-sim.kdl"));
    std::fs::write(
        &profile,
        format!("sim {{ ttft \"20ms\"; itl \"5ms\"; seed 11; {faults} }}\n"),
    )
    .expect("a profile");
    let sim = common::SimProcess::start_with(&["--profile", profile.to_str().expect("a path")]);
    let plan = dir.join(format!("{name}.kdl"));
    std::fs::write(
        &plan,
        format!(
            "plan \"soak-{name}\" {{ seed 5 }}\ntarget \"http://127.0.0.1:9\" {{ model \"m\"; timeout \"30s\" }}\n\
             workload {{ input 128; output 64 ignore-eos=#true }}\n\
             phase \"soak\" {{ rate {RATE}; duration \"{seconds}s\" }}\nsla {{ error-rate < \"100%\" }}\n\
             report {{ records \"{records}\" }}\n"
        ),
    )
    .expect("a plan");
    let out = dir.join(name);
    let started = Instant::now();
    let mut child = Command::new(LLMLOAD)
        .arg("run")
        .arg(&plan)
        .arg("--out")
        .arg(&out)
        .arg("--quiet")
        .arg("--target")
        .arg(&sim.url)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("llmload run");
    let mut samples: Vec<(f64, f64)> = Vec::new();
    loop {
        if let Some(status) = child.try_wait().expect("a child") {
            let code = status.code().unwrap_or(-1);
            report(name, seconds, &out, &samples, code, started.elapsed());
            return;
        }
        if let Some(rss) = common::proc_status_mb(child.id(), "VmRSS:") {
            samples.push((started.elapsed().as_secs_f64(), rss));
        }
        std::thread::sleep(SAMPLE_EVERY);
    }
}

fn report(name: &str, seconds: u64, out: &Path, samples: &[(f64, f64)], code: i32, took: Duration) {
    let records = common::read_records(out);
    let summary: serde_json::Value = std::fs::read_to_string(out.join("summary.json"))
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_default();
    let sent = summary["overall"]["requests"]["sent"].as_u64().unwrap_or(0);
    println!(
        "## {name}: {seconds} s, exit {code}, {:.0} s wall\n",
        took.as_secs_f64()
    );
    println!(
        "- records: {} request lines, {sent} requests sent: {}",
        records.len(),
        if records.len() as u64 == sent {
            "one record per request"
        } else {
            "MISMATCH"
        }
    );
    println!("- errors by class: {}", summary["overall"]["errors"]);
    println!(
        "- throughput {:.1} req/s, TTFT p99 {:.1} ms, client peak RSS {:.0} MB",
        summary["overall"]["throughput"]["requests_per_s"]
            .as_f64()
            .unwrap_or(0.0),
        summary["overall"]["metrics"]["ttft_ms"]["p99"]
            .as_f64()
            .unwrap_or(0.0),
        summary["context"]["client_peak_rss_mb"]
            .as_f64()
            .unwrap_or(0.0)
    );
    let log = common::read_log(out);
    let client_cpu_s: f64 = log
        .iter()
        .filter(|l| l["event"] == "phase_end")
        .filter_map(|l| l["client"]["cpu_s"].as_f64())
        .sum();
    if let Ok(path) = llmload::records::find(out) {
        let bytes = std::fs::metadata(&path).map_or(0, |m| m.len());
        println!(
            "- {}: {:.1} MB, {:.0} bytes per request; client CPU {:.1} s while sending ({:.2} ms \
             per request), schedule lag p99 {:.2} ms",
            path.file_name().unwrap_or_default().to_string_lossy(),
            bytes as f64 / 1e6,
            bytes as f64 / sent.max(1) as f64,
            client_cpu_s,
            client_cpu_s * 1000.0 / sent.max(1) as f64,
            summary["overall"]["metrics"]["schedule_lag_ms"]["p99"]
                .as_f64()
                .unwrap_or(f64::NAN),
        );
    }
    if samples.len() >= 4 {
        // Memory after the first minute (buffers and pools grown), against the end.
        let settled: Vec<&(f64, f64)> = samples.iter().filter(|(t, _)| *t >= 60.0).collect();
        let first = settled.first().map_or(0.0, |s| s.1);
        let last = settled.last().map_or(0.0, |s| s.1);
        let max = settled.iter().map(|s| s.1).fold(0.0, f64::max);
        let (slope, _) = fit(&settled);
        println!(
            "- RSS after 1 min {first:.1} MB, at the end {last:.1} MB, highest {max:.1} MB; \
             trend {:+.2} MB per hour (least squares over {} samples)",
            slope * 3600.0,
            settled.len()
        );
    }
    let csv: String = samples
        .iter()
        .map(|(t, m)| format!("{t:.0},{m:.1}\n"))
        .collect();
    let _ = std::fs::write(
        out.with_extension("rss.csv"),
        format!("seconds,rss_mb\n{csv}"),
    );
    println!();
}

/// Least-squares slope (MB per second) and intercept of the samples.
fn fit(samples: &[&(f64, f64)]) -> (f64, f64) {
    let n = samples.len() as f64;
    if n < 2.0 {
        return (0.0, 0.0);
    }
    let (sx, sy) = samples
        .iter()
        .fold((0.0, 0.0), |(a, b), (x, y)| (a + x, b + y));
    let (mx, my) = (sx / n, sy / n);
    let (sxy, sxx) = samples.iter().fold((0.0, 0.0), |(a, b), (x, y)| {
        (a + (x - mx) * (y - my), b + (x - mx) * (x - mx))
    });
    let slope = if sxx > 0.0 { sxy / sxx } else { 0.0 };
    (slope, my - slope * mx)
}
