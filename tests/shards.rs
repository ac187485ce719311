//! Shards: N processes on this machine, each sending its part of one plan to one simulator
//! process, merged into one run; and the Kubernetes recipe's manifests, checked field by field
//! (no cluster here).

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::{llmload, write_plan, SimProcess};
use serde_json::Value;

const PLAN: &str = "plan \"sharded\" { seed 5 }\n\
target \"http://127.0.0.1:1\" { api \"chat\"; model \"sim\"; timeout \"10s\" }\n\
workload { input { bucket 32 weight=1; bucket 64 weight=1 }; output 8 ignore-eos=#true }\n\
phase \"warm\" { concurrency 2; requests 6; record #false }\n\
phase \"steady\" { rate 40; duration \"3s\" }\n\
phase \"burst\" { at-once 12 }\n\
phase \"users\" { concurrency 5; duration \"500ms\" }\n\
sla { ttft max < \"500ms\"; error-rate < \"1%\" }\n";

fn wall_clock_in(seconds: f64) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    format!("@{:.3}", now + seconds)
}

/// Runs N shard processes at once against `url`; returns their directories.
fn run_shards(plan: &Path, dir: &Path, url: &str, count: u32) -> Vec<PathBuf> {
    let at = wall_clock_in(1.5);
    let children: Vec<(PathBuf, std::process::Child)> = (1..=count)
        .map(|k| {
            let out = dir.join(format!("shard-{k}"));
            let child = llmload()
                .arg("run")
                .arg(plan)
                .args([
                    "--target",
                    url,
                    "--shard",
                    &format!("{k}/{count}"),
                    "--start-at",
                    &at,
                    "--quiet",
                    "--out",
                ])
                .arg(&out)
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            (out, child)
        })
        .collect();
    children
        .into_iter()
        .map(|(out, child)| {
            let output = child.wait_with_output().unwrap();
            let said = String::from_utf8_lossy(&output.stdout);
            assert_eq!(
                output.status.code(),
                Some(0),
                "{said}{}",
                String::from_utf8_lossy(&output.stderr)
            );
            assert!(said.contains("is judged with the others"), "{said}");
            out
        })
        .collect()
}

fn lines(dir: &Path) -> Vec<Value> {
    std::fs::read_to_string(dir.join("records.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn summary(dir: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join("summary.json")).unwrap()).unwrap()
}

fn phase<'a>(summary: &'a Value, name: &str) -> &'a Value {
    summary["phases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == name)
        .unwrap()
}

/// (phase name, seq) of every planned request of the materialized phases, from `llmload plan`.
fn planned(plan: &Path) -> BTreeSet<(String, u64)> {
    let csv = llmload()
        .arg("plan")
        .arg(plan)
        .args(["--format", "csv"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&csv.stdout)
        .lines()
        .skip(1)
        .map(|l| {
            let mut fields = l.split(',');
            (
                fields.next().unwrap().to_string(),
                fields.next().unwrap().parse().unwrap(),
            )
        })
        .collect()
}

#[test]
fn shards_send_exactly_the_plan_and_merge_into_one_run() {
    let _serial = common::serial();
    let sim = SimProcess::start_with(&["--ttft", "10ms", "--itl", "2ms", "--record-writes"]);
    let dir = tempfile::tempdir().unwrap();
    let plan = write_plan(dir.path(), PLAN);
    let planned = planned(&plan);
    let names = ["warm", "steady", "burst", "users"];

    // The same plan as one process: what the merged runs must agree with.
    let single = dir.path().join("single");
    let output = llmload()
        .arg("run")
        .arg(&plan)
        .args(["--target", &sim.url, "--quiet", "--out"])
        .arg(&single)
        .output()
        .unwrap();
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let single = summary(&single);

    for count in [2u32, 3, 8] {
        let run = dir.path().join(format!("n{count}"));
        let shards = run_shards(&plan, &run, &sim.url, count);
        let merged = run.join("merged");
        let output = llmload()
            .arg("merge")
            .args(&shards)
            .arg("--out")
            .arg(&merged)
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&output.stdout);
        assert_eq!(
            output.status.code(),
            Some(0),
            "{said}{}",
            String::from_utf8_lossy(&output.stderr)
        );

        // Exactly the plan's requests, each once, each keeping its shard.
        let lines = lines(&merged);
        let records: Vec<&Value> = lines.iter().filter(|l| l["event"] == "request").collect();
        let sent: BTreeSet<(String, u64)> = records
            .iter()
            .filter(|r| r["phase"].as_u64().unwrap() < 3)
            .map(|r| {
                (
                    names[r["phase"].as_u64().unwrap() as usize].to_string(),
                    r["seq"].as_u64().unwrap(),
                )
            })
            .collect();
        assert_eq!(sent, planned, "{count} shards");
        let materialized = records
            .iter()
            .filter(|r| r["phase"].as_u64().unwrap() < 3)
            .count();
        assert_eq!(
            materialized,
            planned.len(),
            "a request sent twice with {count} shards"
        );
        let shard_ids: BTreeSet<u64> = records
            .iter()
            .map(|r| r["shard"].as_u64().unwrap())
            .collect();
        assert_eq!(shard_ids, (1..=count as u64).collect());
        // The closed loop ran with its five users in all, none drawing another's requests.
        let users: BTreeSet<u64> = records
            .iter()
            .filter(|r| r["phase"] == 3)
            .map(|r| r["seq"].as_u64().unwrap())
            .collect();
        assert_eq!(
            users.len(),
            records.iter().filter(|r| r["phase"] == 3).count()
        );
        let header = &lines[0];
        assert_eq!(header["merged"].as_array().unwrap().len(), count as usize);

        // Every shard scraped the one server: the merged run keeps one series of it, says who
        // scraped, and keeps one scrape per moment (the scrape interval is 1 s).
        let telemetry = |dir: &Path| -> Vec<Value> {
            std::fs::read_to_string(dir.join("telemetry.jsonl"))
                .unwrap()
                .lines()
                .map(|l| serde_json::from_str(l).unwrap())
                .collect()
        };
        let kept = telemetry(&merged);
        let sources: Vec<&Value> = kept.iter().filter(|l| l["kind"] == "source").collect();
        assert_eq!(sources.len(), 1, "{sources:?}");
        let every_shard: Vec<u32> = (1..=count).collect();
        assert_eq!(sources[0]["scraped_by"], serde_json::json!(every_shard));
        let scrapes: Vec<&Value> = kept.iter().filter(|l| l["kind"] == "sample").collect();
        let times: Vec<f64> = scrapes
            .iter()
            .map(|s| s["at_unix_ms"].as_f64().unwrap())
            .collect();
        assert!(times.windows(2).all(|w| w[1] - w[0] >= 500.0), "{times:?}");
        assert!(scrapes
            .iter()
            .all(|s| (1..=count as u64).contains(&s["shard"].as_u64().unwrap())));
        let scraped: usize = shards
            .iter()
            .map(|s| {
                telemetry(s)
                    .iter()
                    .filter(|l| l["kind"] == "sample")
                    .count()
            })
            .sum();
        assert!(scrapes.len() < scraped, "{} of {scraped}", scrapes.len());
        let merged_summary = summary(&merged);
        let target = &merged_summary["server"]["targets"][0];
        assert_eq!(target["scraped_by"], serde_json::json!(every_shard));
        assert_eq!(target["samples"].as_u64(), Some(scrapes.len() as u64));
        for shard in header["merged"].as_array().unwrap() {
            assert!(shard["start_late_ms"].as_f64().unwrap() < 10.0, "{shard}");
        }

        // The server saw the planned arrival process: the steady phase's requests arrived at the
        // planned gaps, at 40/s, Poisson (CV near 1).
        let prefixes: Vec<String> = shards
            .iter()
            .map(|s| {
                lines_of(s)[0]["request_id_prefix"]
                    .as_str()
                    .unwrap()
                    .to_string()
            })
            .collect();
        let mut arrivals: Vec<(u64, u64)> = Vec::new(); // (seq, received ns)
        for line in sim.get("/llmload/writes").lines() {
            let write: Value = serde_json::from_str(line).unwrap();
            let id = write["request_id"].as_str().unwrap();
            let Some(rest) = prefixes
                .iter()
                .find_map(|p| id.strip_prefix(&format!("{p}-")))
            else {
                continue;
            };
            let (phase, seq) = rest.split_once('-').unwrap();
            if phase == "1" {
                arrivals.push((seq.parse().unwrap(), write["received_ns"].as_u64().unwrap()));
            }
        }
        arrivals.sort_by_key(|a| a.1);
        let intended: std::collections::BTreeMap<u64, u64> = records
            .iter()
            .filter(|r| r["phase"] == 1)
            .map(|r| {
                (
                    r["seq"].as_u64().unwrap(),
                    r["intended_send_us"].as_u64().unwrap(),
                )
            })
            .collect();
        assert_eq!(arrivals.len(), intended.len());
        // Each arrival's offset from its planned time (ms), on the server's clock against the
        // plan's. The two clocks differ by a constant (the time from the plan's zero to the
        // server's first read), so the offsets are taken about their median: measured against
        // the first arrival alone, one late first request (a cold connection, a shard started
        // late on a loaded machine) shifted every deviation by its own lateness.
        let (first_seq, first_ns) = arrivals[0];
        let offsets: Vec<f64> = arrivals
            .iter()
            .map(|&(seq, ns)| {
                let at_server = (ns - first_ns) as f64 / 1e3;
                let planned = intended[&seq] as f64 - intended[&first_seq] as f64;
                (at_server - planned) / 1e3
            })
            .collect();
        let middle = |values: &mut Vec<f64>| {
            values.sort_by(f64::total_cmp);
            values[values.len() / 2]
        };
        let clock_offset = middle(&mut offsets.clone());
        let mut deviations: Vec<f64> = offsets.iter().map(|o| (o - clock_offset).abs()).collect();
        let median = middle(&mut deviations);
        eprintln!(
            "{count} shards: median deviation {median:.3} ms, clocks' offset {clock_offset:.3} ms"
        );
        assert!(
            median < 3.0,
            "{count} shards: median deviation {median} ms from the planned arrival times \
             (the clocks' offset {clock_offset} ms)"
        );
        let gaps: Vec<f64> = arrivals
            .windows(2)
            .map(|w| (w[1].1 - w[0].1) as f64 / 1e9)
            .collect();
        let mean = gaps.iter().sum::<f64>() / gaps.len() as f64;
        let sd = (gaps.iter().map(|g| (g - mean).powi(2)).sum::<f64>() / gaps.len() as f64).sqrt();
        assert!(
            (1.0 / mean - 40.0).abs() < 8.0,
            "rate {} at the server",
            1.0 / mean
        );
        assert!(
            (0.7..1.3).contains(&(sd / mean)),
            "CV {} at the server",
            sd / mean
        );

        // The merged verdict is the single run's, and so are its numbers, within noise.
        let merged_summary = summary(&merged);
        assert_eq!(
            merged_summary["verdict"]["status"],
            single["verdict"]["status"]
        );
        for name in ["steady", "burst"] {
            assert_eq!(
                phase(&merged_summary, name)["requests"]["ok"],
                phase(&single, name)["requests"]["ok"],
                "{name}"
            );
        }
        let ttft = |s: &Value| {
            phase(s, "steady")["metrics"]["ttft_ms"]["p50"]
                .as_f64()
                .unwrap()
        };
        assert!((ttft(&merged_summary) - ttft(&single)).abs() < 3.0);
        let report = std::fs::read_to_string(merged.join("report.md")).unwrap();
        assert!(
            report.contains(&format!("merged from {count} shards")),
            "{report}"
        );
    }
}

fn lines_of(dir: &Path) -> Vec<Value> {
    lines(dir)
}

/// Shards are judged only together: a missing shard, a shard of another run, or a shard on its
/// own is refused with what to do.
#[test]
fn merging_refuses_what_is_not_one_whole_run() {
    let dir = tempfile::tempdir().unwrap();
    let text = "plan \"p\" { seed 1 }\ntarget \"sim\"\nworkload { input 16; output 2 }\nphase \"a\" { rate 50; duration \"200ms\" }\n";
    let plan = write_plan(dir.path(), text);
    let run = |args: &[&str]| -> std::process::Output {
        llmload()
            .arg("run")
            .arg(&plan)
            .arg("--quiet")
            .args(args)
            .current_dir(dir.path())
            .output()
            .unwrap()
    };
    assert_eq!(
        run(&["--shard", "1/2", "--out", "s1"]).status.code(),
        Some(0)
    );
    assert_eq!(
        run(&["--shard", "2/2", "--out", "s2", "--seed", "9"])
            .status
            .code(),
        Some(0)
    );
    assert_eq!(
        run(&["--shard", "1/2", "--out", "t1"]).status.code(),
        Some(0)
    );
    let merge = |dirs: &[&str]| -> (Option<i32>, String) {
        let output = llmload()
            .arg("merge")
            .args(dirs)
            .args(["--out", "m"])
            .current_dir(dir.path())
            .output()
            .unwrap();
        (
            output.status.code(),
            String::from_utf8_lossy(&output.stderr).into_owned()
                + &String::from_utf8_lossy(&output.stdout),
        )
    };
    let (code, said) = merge(&["s1"]);
    assert_eq!(code, Some(3), "{said}");
    assert!(said.contains("shard(s) 2 of 2 missing"), "{said}");
    let (code, said) = merge(&["s1", "s2"]);
    assert_eq!(code, Some(2), "{said}");
    assert!(said.contains("seeds differ"), "{said}");
    let (code, said) = merge(&["s1", "t1"]);
    assert_eq!(code, Some(2), "{said}");
    assert!(said.contains("are both shard 1/2"), "{said}");
    // A shard whose telemetry does not read: the error names that shard's file, and the
    // merge leaves no half-written run directory.
    assert_eq!(
        run(&["--shard", "2/2", "--out", "s2b"]).status.code(),
        Some(0)
    );
    std::fs::write(dir.path().join("s2b/telemetry.jsonl"), "\u{1}garbage\n{]\n").unwrap();
    let (code, said) = merge(&["s1", "s2b"]);
    assert_ne!(code, Some(0), "{said}");
    assert!(said.contains("s2b"), "{said}");
    assert!(
        !dir.path().join("m").exists(),
        "a half-written merge: {said}"
    );
    let report = llmload()
        .arg("report")
        .arg(dir.path().join("s1"))
        .output()
        .unwrap();
    assert_eq!(report.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&report.stderr).contains("merge them first"));
    // A search is never split.
    let search = write_plan(
        dir.path(),
        "target \"sim\"\nworkload { input 16; output 2 }\nsearch \"c\" { rate from=1 to=8; duration \"1s\" }\nsla { ttft p99 < \"1s\" }\n",
    );
    let output = llmload()
        .arg("plan")
        .arg(&search)
        .args(["--shard", "1/2"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("cannot be sharded"));
}

#[test]
fn plan_shows_a_shards_part() {
    let dir = tempfile::tempdir().unwrap();
    let plan = write_plan(dir.path(), PLAN);
    let part = |shard: &str| {
        let output = llmload()
            .arg("plan")
            .arg(&plan)
            .args(["--format", "csv", "--shard", shard])
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(0));
        String::from_utf8_lossy(&output.stdout).lines().count() - 1
    };
    let whole = planned(&plan).len();
    assert_eq!(part("1/3") + part("2/3") + part("3/3"), whole);
    let table = llmload()
        .arg("plan")
        .arg(&plan)
        .args(["--shard", "2/3"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&table.stdout).contains("concurrency 5"));
    let bad = llmload()
        .arg("plan")
        .arg(&plan)
        .args(["--shard", "4/3"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
}

/// The Kubernetes recipe: valid manifests, wired to each other and to llmload's own flags.
#[test]
fn the_kubernetes_manifests_hold_together() {
    let read = |name: &str| -> Value {
        let text = std::fs::read_to_string(Path::new("deploy/kubernetes").join(name)).unwrap();
        serde_yaml_ng::from_str(&text).unwrap_or_else(|e| panic!("{name}: {e}"))
    };
    let pvc = read("results-pvc.yaml");
    assert_eq!(
        (pvc["apiVersion"].as_str(), pvc["kind"].as_str()),
        (Some("v1"), Some("PersistentVolumeClaim"))
    );
    assert_eq!(pvc["spec"]["accessModes"][0], "ReadWriteMany");
    let claim = pvc["metadata"]["name"].as_str().unwrap();

    let shards = read("shards-job.yaml");
    assert_eq!(
        (shards["apiVersion"].as_str(), shards["kind"].as_str()),
        (Some("batch/v1"), Some("Job"))
    );
    let spec = &shards["spec"];
    assert_eq!(spec["completionMode"], "Indexed");
    assert_eq!(spec["completions"], spec["parallelism"]);
    assert_eq!(spec["backoffLimit"], 0);
    let pod = &spec["template"]["spec"];
    assert_eq!(pod["restartPolicy"], "Never");
    let container = &pod["containers"][0];
    let command = container["args"][0].as_str().unwrap();
    for needed in [
        "llmload run /plan/plan.kdl",
        "--shard \"$((JOB_COMPLETION_INDEX + 1))/${SHARDS}\"",
        "--start-at \"${START_AT}\"",
        "--out \"/results/${RUN_ID}/shard-$((JOB_COMPLETION_INDEX + 1))\"",
    ] {
        assert!(command.contains(needed), "{needed} in {command}");
    }
    assert_eq!(container["command"][0], "/bin/sh");
    let env: Vec<&str> = container["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    for name in ["SHARDS", "START_AT", "TARGET", "RUN_ID", "OPENAI_API_KEY"] {
        assert!(env.contains(&name), "{name}");
    }
    let volumes = pod["volumes"].as_array().unwrap();
    assert!(volumes
        .iter()
        .any(|v| v["persistentVolumeClaim"]["claimName"] == claim));
    assert!(volumes
        .iter()
        .any(|v| v["configMap"]["name"] == "llmload-plan"));
    let mounts: Vec<&str> = container["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["mountPath"].as_str().unwrap())
        .collect();
    assert!(mounts.contains(&"/plan") && mounts.contains(&"/results"));
    // run.sh sets N where the manifest marks it.
    let job_text = std::fs::read_to_string("deploy/kubernetes/shards-job.yaml").unwrap();
    assert_eq!(job_text.matches(": 3 # shards").count(), 2);
    let script = std::fs::read_to_string("deploy/kubernetes/run.sh").unwrap();
    assert!(script.contains("s/: 3 # shards/: $shards # shards/"));
    for key in ["shards", "start-at", "target", "run-id"] {
        assert!(script.contains(&format!("--from-literal={key}=")), "{key}");
    }

    let merge = read("merge-job.yaml");
    let container = &merge["spec"]["template"]["spec"]["containers"][0];
    let command = container["args"][0].as_str().unwrap();
    assert!(
        command.contains("llmload merge /results/${RUN_ID}/shard-*"),
        "{command}"
    );
    assert!(command.contains("exit $code"), "{command}");
    assert!(
        merge["spec"]["template"]["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"]
            == claim
    );
    let results = read("results-pod.yaml");
    assert_eq!(results["kind"], "Pod");

    let shell = Command::new("sh")
        .args(["-n", "deploy/kubernetes/run.sh"])
        .status()
        .unwrap();
    assert!(shell.success(), "run.sh is not valid sh");
    let dockerfile = std::fs::read_to_string("Dockerfile").unwrap();
    assert!(dockerfile.contains("alpine") && dockerfile.contains("ENTRYPOINT [\"llmload\"]"));
}

/// The engine's own load test: the engine's image runs llmload, copied in by an init container
/// from llmload's image, on the plan from the ConfigMap; the Job's exit code is the verdict.
#[test]
fn the_engine_job_runs_llmload_inside_the_engines_image() {
    let text = std::fs::read_to_string("deploy/kubernetes/engine-job.yaml").unwrap();
    let job: Value = serde_yaml_ng::from_str(&text).unwrap();
    assert_eq!(
        (job["apiVersion"].as_str(), job["kind"].as_str()),
        (Some("batch/v1"), Some("Job"))
    );
    assert_eq!(job["spec"]["backoffLimit"], 0);
    let pod = &job["spec"]["template"]["spec"];
    assert_eq!(pod["restartPolicy"], "Never");
    let init = &pod["initContainers"][0];
    let dockerfile = std::fs::read_to_string("Dockerfile").unwrap();
    // The binary it copies is where llmload's image puts it.
    let copied = init["command"][1].as_str().unwrap();
    assert!(
        dockerfile.contains(&format!("/llmload {copied}")),
        "{copied}"
    );
    let into = init["command"][2].as_str().unwrap();
    let shared = init["volumeMounts"][0]["name"].as_str().unwrap();
    let engine = &pod["containers"][0];
    let mounts = engine["volumeMounts"].as_array().unwrap();
    let mount_of = |name: &str| {
        mounts
            .iter()
            .find(|m| m["name"] == name)
            .and_then(|m| m["mountPath"].as_str())
            .unwrap_or_else(|| panic!("{name} not mounted"))
            .to_string()
    };
    let binary_dir = mount_of(shared);
    assert!(into.starts_with(&binary_dir), "{into} outside {binary_dir}");
    let command = engine["args"][0].as_str().unwrap();
    for needed in [
        format!("{into} run {}/plan.kdl", mount_of("plan")),
        format!("--out \"{}/${{RUN_ID}}\"", mount_of("results")),
        "exit $code".to_string(),
    ] {
        assert!(command.contains(&needed), "{needed} in {command}");
    }
    let volumes = pod["volumes"].as_array().unwrap();
    assert!(volumes
        .iter()
        .any(|v| v["persistentVolumeClaim"]["claimName"] == "llmload-results"));
    assert!(volumes
        .iter()
        .any(|v| v["configMap"]["name"] == "llmload-plan"));
    assert!(volumes
        .iter()
        .any(|v| v["name"] == shared && v["emptyDir"].is_object()));
}

/// A shard directory's records grown to `requests` requests, a millisecond apart.
fn inflate(dir: &Path, shard: u64, count: u64, requests: u64) {
    let lines = lines(dir);
    let mut text = Vec::new();
    common::write_grown_shard(&mut text, &lines, shard, count, requests, 1000);
    std::fs::write(dir.join("records.jsonl"), text).unwrap();
}

/// `llmload merge` of `shards`, and its peak resident memory.
fn merge_measured(shards: &[PathBuf], out: &Path) -> f64 {
    let merged = common::run_measured(llmload().arg("merge").args(shards).arg("--out").arg(out));
    assert!(
        matches!(merged.status.code(), Some(0 | 1)),
        "{}",
        merged.status
    );
    merged.peak_mb
}

/// Merging streams the shards' requests, and judging the merged run keeps nothing per request:
/// a run four times longer merges in the same memory (the merge held every record before: some
/// 1 KB each, 140 MB more here), and every request is there, in the order they finished; its
/// report and a comparison of it hold no more either.
#[cfg(target_os = "linux")]
#[test]
fn merging_holds_no_more_memory_for_more_records() {
    let _serial = common::serial();
    let sim = SimProcess::start_with(&["--ttft", "5ms", "--itl", "1ms"]);
    let dir = tempfile::tempdir().unwrap();
    let plan = write_plan(
        dir.path(),
        "plan \"long\" { seed 5 }\n\
         target \"http://127.0.0.1:1\" { api \"chat\"; model \"sim\"; timeout \"10s\" }\n\
         workload { input 32; output 8 ignore-eos=#true }\n\
         phase \"steady\" { rate 20; duration \"1s\" }\n",
    );
    let shards = run_shards(&plan, dir.path(), &sim.url, 2);
    let mut peaks = Vec::new();
    for (name, requests) in [("small", 20_000u64), ("large", 80_000)] {
        for (k, shard) in shards.iter().enumerate() {
            inflate(shard, k as u64 + 1, 2, requests);
        }
        let out = dir.path().join(name);
        peaks.push(merge_measured(&shards, &out));
        let merged = lines(&out);
        let requests_seen: Vec<&Value> =
            merged.iter().filter(|l| l["event"] == "request").collect();
        assert_eq!(requests_seen.len() as u64, 2 * requests);
        let ends: Vec<u64> = requests_seen
            .iter()
            .map(|r| r["actual_send_us"].as_u64().unwrap() + r["e2e_us"].as_u64().unwrap())
            .collect();
        assert!(
            ends.windows(2).all(|w| w[0] <= w[1]),
            "in the order they finished"
        );
    }
    let (small, large) = (peaks[0], peaks[1]);
    // Measured: 17.4 and 17.8 MB (before: 57 and 200 MB; 17.4 and 22.8 while the token-count
    // checks still kept a value per request).
    assert!(
        large < small + 6.0,
        "merging 160,000 requests peaked at {large:.1} MB, 40,000 at {small:.1} MB"
    );
    // Reading the merged run back holds no more either: its report, and a comparison of it
    // with itself (each side a uniform sample of at most 25,000 requests).
    let measured = |command: &str, run: &str| {
        let run = dir.path().join(run);
        let mut llmload = llmload();
        llmload.arg(command).arg(&run);
        if command == "compare" {
            llmload.arg(&run);
        }
        let output = common::run_measured(&mut llmload);
        // (A run compared with itself may not be decided: the same noise on both sides.)
        assert!(
            matches!(output.status.code(), Some(0 | 1 | 3)),
            "{command}: {}",
            output.status
        );
        output.peak_mb
    };
    // Measured: report 18.5 and 19.0 MB, compare 53.2 and 53.2 MB.
    for command in ["report", "compare"] {
        let (small, large) = (measured(command, "small"), measured(command, "large"));
        eprintln!("{command}: 40,000 requests {small:.1} MB, 160,000 {large:.1} MB");
        assert!(
            large < small + 6.0,
            "{command} of 160,000 requests peaked at {large:.1} MB, of 40,000 at {small:.1} MB"
        );
    }
}
