//! Every `llmload` command that README.md, docs/*.md, docs/examples/*.yml and the CI jobs
//! `llmload init` writes tell a user to run is run here, as written, against the embedded
//! simulator: a doc example cannot break again without this test failing.
//!
//! What the test changes, so that the commands run on loopback in seconds (and nothing else):
//! - a `--target URL` (a GPU box, a gateway, "your server") becomes `--target sim`;
//! - the plans are copies whose `duration`, `warmup` and `max-duration` are cut sixtyfold
//!   (to no less than a second, so that a slow phase still sends): the verdict of a shortened plan may differ, so a run may pass or fail
//!   its gate (exit 0 or 1), but a usage error (2) or a run not carried out (3) fails the test;
//! - shard commands of one block run at once, as the machines they stand for would, with the
//!   block's `--start-at` a few seconds ahead;
//! - `llmload sim` (it serves until Ctrl-C) is not run.
//!
//! Commands run in a fresh directory per block holding a copy of `plans/` and what the block
//! reads (`plan.kdl`; `reports/main-run` and `reports/pr-run` from a short run, for the blocks
//! that compare runs or show their history).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

/// One shell block (or CI script) of a document, with the `llmload` commands in it.
#[derive(Debug)]
struct Block {
    source: String,
    /// Variable assignments (`at=…`) and commands, in order.
    lines: Vec<String>,
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The commands of `text`'s shell lines: comments cut, `\` continuations joined.
fn commands(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut pending = String::new();
    for raw in text.lines() {
        let line = raw.trim();
        let line = line.strip_prefix("- run:").unwrap_or(line).trim();
        let line = line.strip_prefix("- ").unwrap_or(line);
        if let Some(continued) = line.strip_suffix('\\') {
            pending.push_str(continued.trim());
            pending.push(' ');
            continue;
        }
        let full = format!("{pending}{line}");
        pending.clear();
        // A trailing comment: "  # …" after the command.
        let command = full.split("  #").next().unwrap_or("").trim().to_string();
        // Commands, and the variables a block sets for them (`at=…`).
        if command.starts_with("llmload ")
            || command.contains("&& llmload ")
            || command.starts_with("at=")
        {
            out.push(command);
        }
    }
    out
}

/// Every shell block of the Markdown documents, and every CI file's script.
fn blocks() -> Vec<Block> {
    let mut blocks = Vec::new();
    let mut documents = vec![repo().join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(repo().join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    documents.extend(docs);
    for document in documents {
        let text = std::fs::read_to_string(&document).unwrap();
        let mut inside: Option<(usize, String)> = None;
        let mut body = String::new();
        for (number, line) in text.lines().enumerate() {
            if let Some(fence) = line.trim_start().strip_prefix("```") {
                match inside.take() {
                    None => {
                        inside = Some((number + 1, fence.trim().to_string()));
                        body.clear();
                    }
                    Some((start, lang)) => {
                        if matches!(lang.as_str(), "sh" | "bash" | "console" | "yaml" | "yml") {
                            let lines = commands(&body);
                            if lines.iter().any(|l| l.contains("llmload ")) {
                                blocks.push(Block {
                                    source: format!(
                                        "{}:{start}",
                                        document.strip_prefix(repo()).unwrap().display()
                                    ),
                                    lines,
                                });
                            }
                        }
                    }
                }
            } else if inside.is_some() {
                body.push_str(line);
                body.push('\n');
            }
        }
    }
    for example in [
        "docs/examples/github-actions.yml",
        "docs/examples/gitlab-ci.yml",
    ] {
        let text = std::fs::read_to_string(repo().join(example)).unwrap();
        blocks.push(Block {
            source: example.to_string(),
            lines: commands(&text),
        });
    }
    blocks
}

/// `text` with every `duration`, `warmup` and `max-duration` value cut twentyfold.
fn shorten(text: &str) -> String {
    // Cut to a sixtieth, a plan's percentiles rest on too few requests to be decided: what its
    // data cannot decide passes, shown as not decided (a smoke run of the plan).
    let smoke = format!("\n{text}").replace(
        "\nsla {\n",
        "\nsla {\n    undecided \"pass\" // cut short by the test\n",
    );
    let text = smoke.strip_prefix('\n').unwrap_or(&smoke);
    let mut out = String::new();
    let mut rest = text;
    loop {
        let found = ["max-duration \"", "duration \"", "warmup \""]
            .iter()
            .filter_map(|key| rest.find(key).map(|at| (at, key.len())))
            .min();
        let Some((at, len)) = found else {
            out.push_str(rest);
            return out;
        };
        let value_start = at + len;
        out.push_str(&rest[..value_start]);
        let value_end = rest[value_start..]
            .find('"')
            .map_or(rest.len(), |n| value_start + n);
        let value = &rest[value_start..value_end];
        let digits: String = value
            .chars()
            .take_while(|c| c.is_ascii_digit() || *c == '.')
            .collect();
        let unit = &value[digits.len()..];
        let ms = digits.parse::<f64>().ok().and_then(|n| match unit {
            "ms" => Some(n),
            "s" => Some(n * 1e3),
            "m" => Some(n * 60e3),
            "h" => Some(n * 3600e3),
            _ => None,
        });
        match ms {
            // Never above what the plan had, nor below a second: a short phase at a low rate
            // must still send a request.
            Some(ms) => out.push_str(&format!("{}ms", (ms / 60.0).max(1000.0).min(ms).round())),
            None => out.push_str(value),
        }
        rest = &rest[value_end..];
    }
}

/// Shortens every plan (`*.kdl`) under `dir` not shortened before (listed in `done`).
fn shorten_plans(dir: &Path, done: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            shorten_plans(&path, done);
        } else if path.extension().is_some_and(|e| e == "kdl") && !done.contains(&path) {
            let text = std::fs::read_to_string(&path).unwrap();
            std::fs::write(&path, shorten(&text)).unwrap();
            done.push(path);
        }
    }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let path = entry.unwrap().path();
        let target = to.join(path.file_name().unwrap());
        if path.is_dir() {
            copy_dir(&path, &target);
        } else {
            std::fs::copy(&path, &target).unwrap();
        }
    }
}

/// `command` as the test runs it: any target is the simulator (a run that names none would
/// go to its plan's, which may be a server this machine does not have).
fn on_the_simulator(command: &str) -> String {
    let command = if command.starts_with("llmload run ") && !command.contains("--target") {
        format!("{command} --target sim")
    } else {
        command.to_string()
    };
    let words: Vec<&str> = command.split(' ').collect();
    let mut out = Vec::new();
    let mut skip_next = false;
    for (i, word) in words.iter().enumerate() {
        if skip_next {
            skip_next = false;
            continue;
        }
        if *word == "--target" && i + 1 < words.len() {
            out.push("--target sim".to_string());
            skip_next = true;
        } else if *word == "--duration" && i + 1 < words.len() {
            // A one-line run's phase, cut as a plan's is.
            let cut = shorten(&format!("duration \"{}\"", words[i + 1]));
            out.push(format!(
                "--duration {}",
                &cut["duration \"".len()..cut.len() - 1]
            ));
            skip_next = true;
        } else if word.starts_with("--target=") {
            out.push("--target=sim".to_string());
        } else {
            out.push(word.to_string());
        }
    }
    let mut command = out.join(" ");
    // A one-line run cut short may not decide its assertions: as a cut plan's, they then pass.
    if command.contains(" --sla ") {
        command.push_str(" --set 'sla.undecided=\"pass\"'");
    }
    command
}

/// The exit codes a command may end with: a run, a comparison or a capacity check may pass or
/// fail their gate; anything else must succeed.
fn allowed(command: &str) -> &'static [i32] {
    let gated = [
        " run ",
        " compare ",
        " merge ",
        "--capacity",
        "fmt --check",
        " report ",
    ];
    if gated.iter().any(|g| format!(" {command} ").contains(g)) {
        &[0, 1]
    } else {
        &[0]
    }
}

/// A directory with `llmload` on its PATH (the binary under test).
fn bin_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_llmload"), dir.path().join("llmload")).unwrap();
    dir
}

fn shell(dir: &Path, path: &str, script: &str) -> Command {
    let mut command = Command::new("bash");
    command
        .arg("-c")
        .arg(script)
        .current_dir(dir)
        .env("PATH", path)
        .env_remove("GITHUB_ACTIONS")
        .env_remove("GITHUB_STEP_SUMMARY");
    command
}

/// A short run of `plan` into `dir/reports/NAME`, for the blocks that compare runs.
fn short_run(dir: &Path, path: &str, plan: &str, name: &str) {
    let status = shell(
        dir,
        path,
        &format!("llmload run {plan} --target sim --quiet --out reports/{name}"),
    )
    .output()
    .unwrap();
    assert!(
        matches!(status.status.code(), Some(0 | 1)),
        "{}",
        String::from_utf8_lossy(&status.stderr)
    );
}

/// Runs one block in a fresh directory; returns what failed.
fn run_block(block: &Block, path: &str, failures: &mut Vec<String>, ran: &mut usize) {
    let dir = tempfile::tempdir().unwrap();
    copy_dir(&repo().join("plans"), &dir.path().join("plans"));
    let mut shortened = Vec::new();
    shorten_plans(dir.path(), &mut shortened);
    std::fs::copy(
        dir.path().join("plans/quickstart.kdl"),
        dir.path().join("plan.kdl"),
    )
    .unwrap();
    if block
        .lines
        .iter()
        .any(|l| l.contains("reports/main-run") || l.contains("llmload history reports/"))
    {
        // Runs of the plan the block compares (or shows as a history).
        let plan = block
            .lines
            .iter()
            .flat_map(|l| l.split(' '))
            .find(|w| w.starts_with("plans/") && w.ends_with(".kdl"))
            .unwrap_or("plans/quickstart.kdl");
        short_run(dir.path(), path, plan, "main-run");
        short_run(dir.path(), path, plan, "pr-run");
    }
    let mut variables = String::new();
    let mut shards: Vec<(String, std::process::Child)> = Vec::new();
    let check = |command: &str, output: std::process::Output, failures: &mut Vec<String>| {
        let code = output.status.code().unwrap_or(-1);
        if !allowed(command).contains(&code) {
            failures.push(format!(
                "{}: `{command}` exited {code}:\n{}{}",
                block.source,
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            ));
        }
    };
    for line in &block.lines {
        if line.starts_with("at=") {
            // The block's instant, a few seconds ahead rather than a minute.
            variables.push_str("at=@$(( $(date +%s) + 4 )); ");
            continue;
        }
        if line.starts_with("llmload sim") {
            continue;
        }
        let command = on_the_simulator(line);
        // After `init`, the plan it wrote is shortened like the others.
        shorten_plans(dir.path(), &mut shortened);
        let script = format!("{variables}{command}");
        *ran += 1;
        if command.starts_with("llmload run") && command.contains("--shard ") {
            let child = shell(dir.path(), path, &script)
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            shards.push((command, child));
            continue;
        }
        for (shard, child) in shards.drain(..) {
            check(&shard, child.wait_with_output().unwrap(), failures);
        }
        let output = shell(dir.path(), path, &script).output().unwrap();
        check(&command, output, failures);
        if command.starts_with("llmload init") {
            // The CI jobs it wrote are commands a user runs too.
            for job in [
                ".github/workflows/llmload.yml",
                ".gitlab/llmload.gitlab-ci.yml",
            ] {
                let Ok(text) = std::fs::read_to_string(dir.path().join(job)) else {
                    continue;
                };
                shorten_plans(dir.path(), &mut shortened);
                for job_command in commands(&text) {
                    let job_command = on_the_simulator(&job_command);
                    *ran += 1;
                    let output = shell(dir.path(), path, &job_command).output().unwrap();
                    check(&format!("{job}: {job_command}"), output, failures);
                }
            }
        }
    }
    for (shard, child) in shards.drain(..) {
        check(&shard, child.wait_with_output().unwrap(), failures);
    }
}

#[test]
fn every_documented_command_runs_against_the_simulator() {
    let _serial = common::serial();
    let blocks = blocks();
    // The documents this test reads do have commands: a parser that finds none fails here.
    assert!(blocks.len() >= 10, "{blocks:#?}");
    assert!(blocks.iter().any(|b| b
        .lines
        .iter()
        .any(|l| l.contains("--junit llmload-report/junit.xml")
            || l.contains("--junit sla-report/junit.xml"))));
    let bin = bin_dir();
    let path = format!(
        "{}:{}",
        bin.path().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    // Blocks run three at a time, each in its own directory: a run mostly waits on its
    // schedule's clock, so they share the machine's cores without delaying each other.
    let next = std::sync::atomic::AtomicUsize::new(0);
    let results = std::sync::Mutex::new((Vec::new(), 0usize));
    std::thread::scope(|scope| {
        for _ in 0..3 {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(block) = blocks.get(i) else {
                    return;
                };
                let started = std::time::Instant::now();
                let (mut failures, mut ran) = (Vec::new(), 0);
                run_block(block, &path, &mut failures, &mut ran);
                eprintln!("{}: {:.1} s", block.source, started.elapsed().as_secs_f64());
                let mut all = results.lock().unwrap();
                all.0.extend(failures);
                all.1 += ran;
            });
        }
    });
    let (failures, ran) = results.into_inner().unwrap();
    assert!(ran >= 30, "only {ran} commands ran");
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn durations_are_cut_and_targets_become_the_simulator() {
    assert_eq!(
        shorten("phase \"a\" { duration \"15s\"; rate 5 }\nsearch \"s\" { warmup \"3s\"; max-duration \"4m\" }\ntimeout \"60s\""),
        "phase \"a\" { duration \"1000ms\"; rate 5 }\nsearch \"s\" { warmup \"1000ms\"; max-duration \"4000ms\" }\ntimeout \"60s\""
    );
    assert_eq!(
        on_the_simulator("llmload run p.kdl --target http://gpu-box:8000 --out x"),
        "llmload run p.kdl --target sim --out x"
    );
    assert_eq!(
        on_the_simulator("llmload run --target http://h:1 --rate 4 --duration 5m --sla 'e2e max < 1s'"),
        "llmload run --target sim --rate 4 --duration 5000ms --sla 'e2e max < 1s' --set 'sla.undecided=\"pass\"'"
    );
    assert_eq!(
        commands("llmload run a.kdl \\\n  --out r \\\n  --junit r/j.xml   # comment\nls\n"),
        vec!["llmload run a.kdl --out r --junit r/j.xml".to_string()]
    );
}

/// README's table of flags lists every flag each command's `--help` lists (and no flag that
/// is gone): the table is where people look first.
#[test]
fn readme_lists_every_flag_of_every_command() {
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let flags_in = |text: &str| -> std::collections::BTreeSet<String> {
        let mut found = std::collections::BTreeSet::new();
        let mut rest = text;
        while let Some(at) = rest.find("--") {
            let flag: String = rest[at + 2..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                .collect();
            if flag.chars().next().is_some_and(|c| c.is_ascii_lowercase()) {
                found.insert(format!("--{flag}"));
            }
            rest = &rest[at + 2..];
        }
        found
    };
    let mut missing = Vec::new();
    let mut stale = Vec::new();
    for command in [
        "run", "check", "fmt", "init", "plan", "report", "compare", "history", "merge", "sim",
    ] {
        let help = common::llmload()
            .args([command, "--help"])
            .output()
            .unwrap();
        let help = String::from_utf8_lossy(&help.stdout);
        // The flags as --help introduces them: each option line's first words.
        let listed: std::collections::BTreeSet<String> = help
            .lines()
            .map(str::trim_start)
            .filter(|l| l.starts_with('-'))
            .flat_map(|l| flags_in(l.split("  ").next().unwrap_or(l)))
            .filter(|f| f != "--help" && f != "--version")
            .collect();
        let row = readme
            .lines()
            .find(|l| l.starts_with(&format!("| `{command}` |")))
            .unwrap_or_else(|| panic!("README has no flags row for `{command}`"));
        let documented = flags_in(row);
        missing.extend(
            listed
                .difference(&documented)
                .map(|f| format!("{command} {f}")),
        );
        stale.extend(
            documented
                .difference(&listed)
                .map(|f| format!("{command} {f}")),
        );
    }
    assert!(
        missing.is_empty(),
        "README's flags table lacks: {}",
        missing.join(", ")
    );
    assert!(
        stale.is_empty(),
        "README's flags table lists flags --help does not: {}",
        stale.join(", ")
    );
}

/// docs/plan-reference.md's metric table lists every metric of the metric table, and nothing
/// else: a metric added to `METRICS` is a row to write there, or this fails naming it.
#[test]
fn the_plan_reference_lists_every_metric() {
    let reference = std::fs::read_to_string(repo().join("docs/plan-reference.md")).unwrap();
    let start = reference
        .find("| metric | statistic | threshold |")
        .expect("the metric table");
    let table = &reference[start..];
    let table = &table[..table.find("\n\n").unwrap_or(table.len())];
    let documented: Vec<&str> = table
        .lines()
        .filter_map(|line| line.strip_prefix("| `")?.split('`').next())
        .collect();
    let defined: Vec<&str> = llmload::metrics::Metric::all().map(|m| m.name()).collect();
    let missing: Vec<_> = defined.iter().filter(|m| !documented.contains(m)).collect();
    let unknown: Vec<_> = documented.iter().filter(|m| !defined.contains(m)).collect();
    assert!(
        missing.is_empty() && unknown.is_empty(),
        "docs/plan-reference.md's metric table lacks {missing:?} and lists unknown {unknown:?}"
    );
}
