//! Runs on several machines: one shard's run, and merging the shards' directories into one
//! ordinary run directory.
//!
//! A shard sends its part of the schedule ([`crate::planner::Shard`]) and is not judged alone:
//! its SLA means nothing over a third of the load. [`merge`] checks that the directories are
//! the shards of one run (same plan, seed and shard count; every shard present), sets their
//! records on one time line by the wall clock each shard started at, and writes a run directory
//! that `judge`, `llmload report`, `compare` and templates read like any other. What the merged
//! numbers mean, and what they assume of the machines' clocks: docs/distributed.md.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::{execute, outdir, RunOptions, Status};
use crate::error::{Error, Result};
use crate::metrics;
use crate::plan::Plan;
use crate::records;
use crate::records::{
    ClientLoad, LogLine, MergedShard, PhaseEnd, PhaseStart, RequestRecord, RunEnd, RunHeader,
    RunLine, RunLog,
};
use crate::verdict::Verdicts;

/// What one shard's run left.
pub struct ShardOutcome {
    /// Its records.
    pub records_path: PathBuf,
    /// Requests it sent.
    pub sent: u64,
    /// Requests that succeeded.
    pub ok: u64,
    /// Requests that failed.
    pub failed: u64,
    /// How late after the agreed start it started, by its clock (with `--start-at`).
    pub start_late_ms: Option<f64>,
    /// Carried out (passed, as far as a shard can), aborted, or not carried out: a shard's SLA
    /// is judged only when the shards are merged.
    pub status: Status,
}

/// Runs `options.shard`'s part of `plan`: its records, its copy of the plan, no report.
pub fn run_shard(plan: &Plan, options: &RunOptions) -> Result<ShardOutcome> {
    if options.shard.is_none() {
        return Err(Error::usage("run_shard needs a shard"));
    }
    let execution = execute(plan, options)?;
    let (log, aggregates) = metrics::compute_file(&execution.records_path, plan.slo.as_ref())?;
    let nothing = Verdicts {
        passed: true,
        results: Vec::new(),
        notes: Vec::new(),
        steps: Vec::new(),
        series: Vec::new(),
        capacity: None,
    };
    let status = Status::decide(&aggregates, &nothing, None, false);
    outdir::write_manifest(&options.out_dir, &[])?;
    let requests = &aggregates.overall.requests;
    Ok(ShardOutcome {
        records_path: execution.records_path,
        sent: requests.sent,
        ok: requests.ok,
        failed: requests.failed,
        start_late_ms: log
            .header
            .as_ref()
            .and_then(|h| h.shard.as_ref())
            .and_then(|s| s.start_late_ms),
        status,
    })
}

/// An error unless `log` (read from `dir`) is a whole run: a shard is judged only merged.
pub fn refuse_shard(log: &RunLog, dir: &Path) -> Result<()> {
    match log.header.as_ref().and_then(|h| h.shard.as_ref()) {
        Some(shard) => Err(Error::usage(format!(
            "{} holds shard {}/{} of a run, which is judged only with the others: merge them first \
             (llmload merge SHARD_DIR... --out DIR)",
            dir.display(),
            shard.index,
            shard.count
        ))),
        None => Ok(()),
    }
}

/// Merges the shard directories `dirs` into the run directory `out` (records, plan, sources).
/// Refuses directories that are not the shards of one run, and a run with a shard missing.
pub fn merge(dirs: &[PathBuf], out: &Path) -> Result<()> {
    if dirs.is_empty() {
        return Err(Error::usage("llmload merge needs the shards' directories"));
    }
    let (shards, files, compressed) = read_shards(dirs, out)?;
    let headers = check_shards(&shards)?;
    let origin = headers
        .iter()
        .map(|(_, h)| h.started_unix_ns.unwrap_or(0))
        .min()
        .unwrap_or(0);
    let mut merged_header = merged_header(&headers, origin);
    let mut phases: BTreeMap<usize, PhaseStart> = BTreeMap::new();
    let mut ends: BTreeMap<usize, PhaseEnd> = BTreeMap::new();
    let mut lanes = Vec::new();
    let mut stalls: Vec<crate::records::Stall> = Vec::new();
    let mut sessions: Vec<crate::records::SessionEnd> = Vec::new();
    let mut run_end: Option<RunEnd> = None;
    let mut every_end = true;
    for (((_, log), (_, header)), (path, requests)) in shards.iter().zip(&headers).zip(&files) {
        let shard = header.shard.clone().unwrap_or_default();
        let offset_us = header
            .started_unix_ns
            .unwrap_or(origin)
            .saturating_sub(origin)
            / 1000;
        merged_header.merged.push(MergedShard {
            index: shard.index,
            client_host: header.client_host.clone(),
            started_at: header.started_at.clone(),
            offset_ms: offset_us as f64 / 1000.0,
            start_late_ms: shard.start_late_ms,
            requests: *requests,
            interrupted: log.interrupted(),
        });
        for start in &log.phases {
            merge_phase_start(&mut phases, start, offset_us);
        }
        for end in &log.phase_ends {
            let at_us = end.at_us + offset_us;
            ends.entry(end.index)
                .and_modify(|merged| merge_phase_end(merged, end, at_us))
                .or_insert_with(|| PhaseEnd {
                    at_us,
                    ..end.clone()
                });
        }
        stalls.extend(log.stalls.iter().map(|stall| crate::records::Stall {
            at_us: stall.at_us + offset_us,
            shard: Some(shard.index),
            ..*stall
        }));
        // Each shard runs whole sessions of its own (session-affine): their lines join as they are.
        sessions.extend(
            log.sessions
                .iter()
                .map(|session| crate::records::SessionEnd {
                    start_us: session.start_us + offset_us,
                    end_us: session.end_us + offset_us,
                    shard: Some(shard.index),
                    ..session.clone()
                }),
        );
        lanes.push(Lane {
            reader: records::LogReader::open(path)?,
            offset_us,
            shard: shard.index,
            buffered: 0,
        });
        match &log.end {
            Some(end) => merge_run_end(&mut run_end, end, offset_us),
            None => every_end = false,
        }
    }
    // A shard killed before its end leaves the merged run interrupted: never a silent partial.
    if let (false, Some(end)) = (every_end, run_end.as_mut()) {
        end.interrupted = true;
    }
    // What the merge writes is all or nothing: a failure from here on (a shard's telemetry
    // that does not read, a full disk) leaves no half-written run directory behind.
    let existed = out.exists();
    outdir::prepare(out, None)?;
    let written = write_merged(
        out,
        &shards,
        &headers,
        compressed,
        Merged {
            header: merged_header,
            phases,
            ends,
            lanes,
            stalls,
            sessions,
            run_end,
        },
    );
    if written.is_err() {
        undo_merge(out, existed);
    }
    written
}

/// A shard's directory and its log without its requests.
type ShardLog = (PathBuf, RunLog);

/// A shard's records file and how many requests it holds.
type ShardRecords = (PathBuf, u64);

/// Each shard's directory and log without its requests, which are only counted (they are read
/// again, streamed, when the merged file is written: memory does not grow with them); its
/// records file and count; whether any is compressed.
fn read_shards(dirs: &[PathBuf], out: &Path) -> Result<(Vec<ShardLog>, Vec<ShardRecords>, bool)> {
    let mut shards: Vec<(PathBuf, RunLog)> = Vec::new();
    let mut files: Vec<(PathBuf, u64)> = Vec::new();
    let mut compressed = false;
    for dir in dirs {
        if same_dir(dir, out) {
            return Err(Error::usage(format!(
                "--out {} is one of the shards: merge into a directory of its own",
                out.display()
            )));
        }
        let records = records::find(dir)?;
        compressed |= records::Compression::of(&records) == records::Compression::Zstd;
        let mut log = RunLog::default();
        let mut requests = 0u64;
        records::read_lines(&records, |line| match line {
            LogLine::Request(_) => requests += 1,
            other => log.push(other),
        })?;
        RunLog::check_header(&log, &records)?;
        shards.push((dir.clone(), log));
        files.push((records, requests));
    }
    Ok((shards, files, compressed))
}

/// The merged run's header: the first shard's, as one run's (no shard, no clock origin of its
/// own), started when the earliest shard started, on every shard's host.
fn merged_header(headers: &[(PathBuf, RunHeader)], origin: u64) -> RunHeader {
    let mut merged_header = headers[0].1.clone();
    merged_header.shard = None;
    merged_header.started_unix_ns = Some(origin);
    merged_header.clock_origin_ns = None;
    merged_header.request_id_prefix = None;
    let earliest = headers
        .iter()
        .min_by_key(|(_, h)| h.started_unix_ns)
        .map(|(_, h)| h.started_at.clone())
        .unwrap_or_default();
    merged_header.started_at = earliest;
    let mut hosts: Vec<String> = headers.iter().map(|(_, h)| h.client_host.clone()).collect();
    hosts.dedup();
    merged_header.client_host = hosts.join(", ");
    // One machine's description only when every shard ran on the like of it.
    let machines: Vec<_> = headers.iter().map(|(_, h)| &h.client_machine).collect();
    if machines.windows(2).any(|pair| pair[0] != pair[1]) {
        merged_header.client_machine = None;
    }
    merged_header
}

/// A shard's phase start, on the merged time line: the earliest start, the planned requests
/// and rates summed.
fn merge_phase_start(phases: &mut BTreeMap<usize, PhaseStart>, start: &PhaseStart, offset_us: u64) {
    let at_us = start.at_us + offset_us;
    phases
        .entry(start.index)
        .and_modify(|merged| {
            merged.at_us = merged.at_us.min(at_us);
            merged.planned_requests = merged
                .planned_requests
                .zip(start.planned_requests)
                .map(|(a, b)| a + b);
            merged.planned_rate = merged
                .planned_rate
                .zip(start.planned_rate)
                .map(|(a, b)| a + b);
        })
        .or_insert_with(|| PhaseStart {
            at_us,
            ..start.clone()
        });
}

/// Another shard's end of a phase, merged in (`at_us` on the merged time line).
fn merge_phase_end(merged: &mut PhaseEnd, end: &PhaseEnd, at_us: u64) {
    merged.at_us = merged.at_us.max(at_us);
    merged.sent += end.sent;
    merged.client = combine(merged.client, end.client);
    if merged.ended_early.is_none() {
        merged.ended_early.clone_from(&end.ended_early);
    }
    // Every shard opened its own: counts add up, the slowest is the slowest.
    merged.connections = match (merged.connections, end.connections) {
        (Some(a), Some(b)) => Some(crate::records::Connections {
            warmed: a.warmed + b.warmed,
            opened: a.opened + b.opened,
            failed: a.failed + b.failed,
            stray: a.stray + b.stray,
            connect_ms_p50: a.connect_ms_p50.or(b.connect_ms_p50),
            tls_ms_p50: a.tls_ms_p50.or(b.tls_ms_p50),
            connect_ms_max: match (a.connect_ms_max, b.connect_ms_max) {
                (Some(x), Some(y)) => Some(x.max(y)),
                (x, y) => x.or(y),
            },
        }),
        (a, b) => a.or(b),
    };
    // Each shard's meter measured its own process: the worst is the worst.
    merged.hiccups = match (merged.hiccups, end.hiccups) {
        (Some(a), Some(b)) => Some(crate::records::Hiccups {
            ticks: a.ticks + b.ticks,
            p99_ms: a.p99_ms.max(b.p99_ms),
            max_ms: a.max_ms.max(b.max_ms),
            stalls: a.stalls + b.stalls,
        }),
        (a, b) => a.or(b),
    };
    // Each shard's users waited apart: their waits and their time add up.
    merged.body_wait = match (merged.body_wait, end.body_wait) {
        (Some(a), Some(b)) => Some(crate::records::BodyWait {
            waited_s: a.waited_s + b.waited_s,
            users_s: a.users_s + b.users_s,
        }),
        (a, b) => a.or(b),
    };
}

/// A shard's end of the run, merged in: the latest end; interrupted, aborted or refused if any
/// shard was; the largest memory; the recorders' backlogs added up.
fn merge_run_end(run_end: &mut Option<RunEnd>, end: &RunEnd, offset_us: u64) {
    let at_us = end.at_us + offset_us;
    let merged = run_end.get_or_insert(RunEnd {
        at_us,
        interrupted: false,
        aborted: None,
        client_peak_rss_bytes: None,
        recorder_backlog: None,
        refused: None,
    });
    merged.at_us = merged.at_us.max(at_us);
    merged.interrupted |= end.interrupted;
    if merged.aborted.is_none() {
        merged.aborted.clone_from(&end.aborted);
    }
    if merged.refused.is_none() {
        merged.refused.clone_from(&end.refused);
    }
    merged.client_peak_rss_bytes = merged.client_peak_rss_bytes.max(end.client_peak_rss_bytes);
    if let Some(backlog) = &end.recorder_backlog {
        let into = merged.recorder_backlog.get_or_insert_with(Default::default);
        into.requests += backlog.requests;
        into.total_ms += backlog.total_ms;
        into.longest_ms = into.longest_ms.max(backlog.longest_ms);
    }
}

/// What a merge puts together before it writes anything.
struct Merged {
    header: RunHeader,
    phases: BTreeMap<usize, PhaseStart>,
    ends: BTreeMap<usize, PhaseEnd>,
    lanes: Vec<Lane>,
    stalls: Vec<crate::records::Stall>,
    sessions: Vec<crate::records::SessionEnd>,
    run_end: Option<RunEnd>,
}

/// Takes back what a failed merge wrote into `out`: the directory if the merge made it, else
/// the files it writes.
fn undo_merge(out: &Path, existed: bool) {
    if !existed {
        let _ = std::fs::remove_dir_all(out);
        return;
    }
    for name in [
        "plan.kdl",
        "plan-sources.json",
        crate::telemetry::FILE,
        records::Compression::Plain.file_name(),
        records::Compression::Zstd.file_name(),
    ] {
        let _ = std::fs::remove_file(out.join(name));
    }
}

/// Writes the merged run into `out` (prepared): the telemetry, the plan, and the records.
fn write_merged(
    out: &Path,
    shards: &[(PathBuf, RunLog)],
    headers: &[(PathBuf, RunHeader)],
    compressed: bool,
    merged: Merged,
) -> Result<()> {
    let Merged {
        header: merged_header,
        phases,
        ends,
        mut lanes,
        mut stalls,
        mut sessions,
        run_end,
    } = merged;
    let first = &shards[0].0;
    // Every shard may have scraped the same servers: one series per target, with who scraped.
    let scrapes: Vec<(u32, &Path)> = headers
        .iter()
        .map(|(dir, h)| (h.shard.as_ref().map_or(1, |s| s.index), dir.as_path()))
        .collect();
    crate::telemetry::merge_shards(&scrapes, out)?;
    for name in ["plan.kdl", "plan-sources.json"] {
        let from = first.join(name);
        if from.is_file() {
            std::fs::copy(&from, out.join(name))
                .map_err(|e| Error::io("write", out.join(name), e))?;
        }
    }
    // Compressed if the shards' records are.
    let compression = match compressed {
        true => records::Compression::Zstd,
        false => records::Compression::Plain,
    };
    let path = out.join(compression.file_name());
    let mut writer = records::RecordsWriter::create(&path)?;
    let mut write = |line: LogLine| -> Result<()> {
        writer
            .write_line(&line)
            .map_err(|e| Error::io("write", &path, e))
    };
    write(LogLine::Run(RunLine::current(merged_header)))?;
    let mut starts: Vec<PhaseStart> = phases.into_values().collect();
    starts.sort_by_key(|p| (p.at_us, p.index));
    for start in starts {
        write(LogLine::PhaseStart(start))?;
    }
    // Before the requests: each is then checked against every stall of its own shard.
    stalls.sort_by_key(|s| s.at_us);
    for stall in stalls {
        write(LogLine::Stall(stall))?;
    }
    merge_requests(&mut lanes, |record| write(LogLine::Request(record)))?;
    sessions.sort_by_key(|s| (s.end_us, s.phase, s.session));
    for session in sessions {
        write(LogLine::Session(session))?;
    }
    for end in ends.into_values() {
        write(LogLine::PhaseEnd(end))?;
    }
    if let Some(end) = run_end {
        write(LogLine::RunEnd(end))?;
    }
    writer.finish().map_err(|e| Error::io("write", &path, e))
}

/// One shard's requests, read as they are merged.
struct Lane {
    reader: records::LogReader,
    /// Its start on the merged time line.
    offset_us: u64,
    shard: u32,
    /// How many of its requests wait in the merge's heap.
    buffered: usize,
}

impl Lane {
    /// Its next request, set on the merged time line.
    fn next_request(&mut self) -> Result<Option<RequestRecord>> {
        while let Some(line) = self.reader.next_line()? {
            if let LogLine::Request(mut record) = line {
                record.intended_send_us += self.offset_us;
                record.actual_send_us += self.offset_us;
                record.shard = Some(self.shard);
                return Ok(Some(record));
            }
        }
        Ok(None)
    }
}

/// How many requests of each shard the merge holds ahead. A shard's records are written in the
/// order its requests finished, give or take the recorder's queue; holding this many ahead puts
/// the merged file in the order they finished (unless a shard's own order is off by more), at
/// some 1 KB a request: a few MB per shard, whatever the length of the run.
const LOOKAHEAD: usize = 1024;

/// A request in the merge's heap, ordered by when it finished (then shard, then sequence).
struct Pending {
    key: (u64, u32, u64),
    lane: usize,
    record: RequestRecord,
}

impl PartialEq for Pending {
    fn eq(&self, other: &Self) -> bool {
        self.key == other.key
    }
}
impl Eq for Pending {}
impl PartialOrd for Pending {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Pending {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        // Reversed: the heap gives the earliest first.
        other.key.cmp(&self.key)
    }
}

/// The shards' requests, merged in the order they finished as one process would have written
/// them (a k-way merge, [`LOOKAHEAD`] requests of each shard ahead), handed to `write` one at a
/// time.
fn merge_requests(
    lanes: &mut [Lane],
    mut write: impl FnMut(RequestRecord) -> Result<()>,
) -> Result<()> {
    let mut heap = std::collections::BinaryHeap::new();
    for index in 0..lanes.len() {
        refill(&mut heap, lanes, index)?;
    }
    while let Some(pending) = heap.pop() {
        let lane = pending.lane;
        write(pending.record)?;
        lanes[lane].buffered -= 1;
        refill(&mut heap, lanes, lane)?;
    }
    Ok(())
}

/// Reads lane `index`'s requests into the heap until it holds [`LOOKAHEAD`] of them (or the
/// lane has no more).
fn refill(
    heap: &mut std::collections::BinaryHeap<Pending>,
    lanes: &mut [Lane],
    index: usize,
) -> Result<()> {
    let lane = &mut lanes[index];
    while lane.buffered < LOOKAHEAD {
        let Some(record) = lane.next_request()? else {
            break;
        };
        let finished = record.end_us().unwrap_or(record.actual_send_us);
        heap.push(Pending {
            key: (finished, lane.shard, record.seq),
            lane: index,
            record,
        });
        lane.buffered += 1;
    }
    Ok(())
}

/// The shards' headers, each checked against the first: one plan, seed and shard count, and
/// every shard there once.
fn check_shards(shards: &[(PathBuf, RunLog)]) -> Result<Vec<(PathBuf, RunHeader)>> {
    let mut headers = Vec::new();
    for (dir, log) in shards {
        let header = log.header.clone().ok_or_else(|| {
            Error::usage(format!("{}: its records have no header", dir.display()))
        })?;
        if header.shard.is_none() {
            return Err(Error::usage(format!(
                "{} is a whole run, not a shard (run with --shard K/N)",
                dir.display()
            )));
        }
        if header.started_unix_ns.is_none() {
            return Err(Error::usage(format!(
                "{}: its records do not say when it started (written by an llmload before 0.2?)",
                dir.display()
            )));
        }
        headers.push((dir.clone(), header));
    }
    let (first_dir, first) = &headers[0];
    let first_shard = first.shard.clone().unwrap_or_default();
    let mut seen = vec![None::<&PathBuf>; first_shard.count as usize];
    for (dir, header) in &headers {
        let shard = header.shard.clone().unwrap_or_default();
        let differs = |what: &str, a: &str, b: &str| {
            Error::usage(format!(
                "{} and {} are not shards of one run: their {what} differ ({a} and {b})",
                first_dir.display(),
                dir.display()
            ))
        };
        if header.plan_sha256 != first.plan_sha256 {
            return Err(differs("plans", &first.plan, &header.plan));
        }
        if header.seed != first.seed {
            return Err(differs(
                "seeds",
                &first.seed.to_string(),
                &header.seed.to_string(),
            ));
        }
        if shard.count != first_shard.count {
            return Err(differs(
                "shard counts",
                &first_shard.count.to_string(),
                &shard.count.to_string(),
            ));
        }
        let slot = &mut seen[shard.index as usize - 1];
        if let Some(other) = slot {
            return Err(Error::usage(format!(
                "{} and {} are both shard {}/{}",
                other.display(),
                dir.display(),
                shard.index,
                shard.count
            )));
        }
        *slot = Some(dir);
    }
    let missing: Vec<String> = seen
        .iter()
        .enumerate()
        .filter(|(_, dir)| dir.is_none())
        .map(|(i, _)| (i + 1).to_string())
        .collect();
    if !missing.is_empty() {
        return Err(Error::run(format!(
            "shard(s) {} of {} missing: a run without all its shards sent only part of its plan, \
             and is not merged",
            missing.join(", "),
            first_shard.count
        )));
    }
    Ok(headers)
}

/// Two shards' client load over one phase: their cores and CPU add up; utilization is over
/// their combined capacity.
fn combine(a: Option<ClientLoad>, b: Option<ClientLoad>) -> Option<ClientLoad> {
    match (a, b) {
        (Some(a), Some(b)) => {
            let capacity = |l: &ClientLoad| {
                if l.utilization > 0.0 {
                    l.cpu_s / l.utilization
                } else {
                    0.0
                }
            };
            let total = capacity(&a) + capacity(&b);
            Some(ClientLoad {
                cores: a.cores + b.cores,
                cpu_s: a.cpu_s + b.cpu_s,
                utilization: if total > 0.0 {
                    (a.cpu_s + b.cpu_s) / total
                } else {
                    0.0
                },
                seconds: a.seconds.max(b.seconds),
                saturated_seconds: a.saturated_seconds.max(b.saturated_seconds),
                // Each shard's machine is its own: no one machine's load to keep.
                machine: None,
            })
        }
        (a, b) => a.or(b),
    }
}

fn same_dir(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}
