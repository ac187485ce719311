//! Reading a records file back (`records.jsonl`, or `records.jsonl.zst`, told apart by its first
//! bytes): one line at a time (streaming), or whole into a [`RunLog`].

use std::io::BufRead;
use std::path::Path;

use super::{LogLine, PhaseEnd, PhaseStart, RequestRecord, RunEnd, RunHeader, SearchEnd, Stall};
use super::{OLDEST_RECORDS_FORMAT, RECORDS_FORMAT};
use crate::error::{Error, Result};

/// The longest line a records file may hold: a request's line grows with its chunks (some 20
/// bytes each), so this is tens of millions of chunks.
const MAX_LINE_BYTES: u64 = 512 << 20;

/// zstd's frame magic number, as a file's first four bytes.
const ZSTD_MAGIC: [u8; 4] = [0x28, 0xB5, 0x2F, 0xFD];

/// The most a compressed records file may expand, as a multiple of its size (and at least
/// [`MIN_EXPANSION_BYTES`]): records compress about 4-fold, a simulator's near-identical ones
/// 15-fold (measured: 20,000 requests, 21.1 MB in 1.43 MB); a 92 KB "zstd bomb" expanded to
/// gigabytes and kept `report` busy for over a minute.
const MAX_EXPANSION: u64 = 1000;
const MIN_EXPANSION_BYTES: u64 = 64 << 20;

/// Blank lines a records file may hold: llmload writes none, and a bomb of newlines would
/// otherwise be read one empty line at a time.
const MAX_BLANK_LINES: usize = 1000;

/// A reader that counts the bytes it hands out.
struct Counted<R> {
    inner: R,
    count: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl<R: std::io::Read> std::io::Read for Counted<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.count
            .fetch_add(n as u64, std::sync::atomic::Ordering::Relaxed);
        Ok(n)
    }
}

/// How a records file is read: plain, or decompressed with the bytes it has expanded to and
/// the most it may.
enum Compressed {
    No,
    Zstd {
        expanded: std::sync::Arc<std::sync::atomic::AtomicU64>,
        limit: u64,
    },
}

/// Opens a records file for reading, decompressing it if it is zstd (whatever its name).
fn open(path: &Path) -> Result<(Box<dyn BufRead>, Compressed)> {
    let file = crate::files::open_regular(path).map_err(|e| Error::io("open", path, e))?;
    let size = file.metadata().map(|m| m.len()).unwrap_or(0);
    let mut reader = std::io::BufReader::with_capacity(1 << 16, file);
    let head = reader.fill_buf().map_err(|e| Error::io("read", path, e))?;
    if head.starts_with(&ZSTD_MAGIC) {
        let decoder = zstd::stream::read::Decoder::with_buffer(reader)
            .map_err(|e| Error::io("read", path, e))?;
        let expanded = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let counted = Counted {
            inner: decoder,
            count: expanded.clone(),
        };
        let limit = size.saturating_mul(MAX_EXPANSION).max(MIN_EXPANSION_BYTES);
        Ok((
            Box::new(std::io::BufReader::with_capacity(1 << 16, counted)),
            Compressed::Zstd { expanded, limit },
        ))
    } else {
        Ok((Box::new(reader), Compressed::No))
    }
}

/// Reads a records file one line at a time, handing each to `on_line`. A torn last line (the
/// process was killed mid-write), or a compressed file's last frame cut short, is skipped; any
/// other bad line is an error naming its number. A records file of a format this llmload does
/// not read is refused with what to do.
pub fn read_lines(path: &Path, mut on_line: impl FnMut(LogLine)) -> Result<()> {
    let mut reader = LogReader::open(path)?;
    while let Some(line) = reader.next_line()? {
        on_line(line);
    }
    Ok(())
}

/// A records file read one line at a time, on request: what [`read_lines`] hands out, pulled
/// (a merge of several files takes the next line of whichever it needs).
pub struct LogReader {
    path: std::path::PathBuf,
    reader: Box<dyn BufRead>,
    compressed: Compressed,
    line: Vec<u8>,
    number: usize,
    /// Blank lines so far.
    blank: usize,
    /// A line that did not parse: an error only if another line follows it.
    unparsed: Option<(usize, String)>,
    seen: SeenRequests,
    done: bool,
}

impl LogReader {
    /// Opens `path` (plain or zstd).
    pub fn open(path: &Path) -> Result<LogReader> {
        let (reader, compressed) = open(path)?;
        Ok(LogReader {
            path: path.to_path_buf(),
            reader,
            compressed,
            line: Vec::new(),
            number: 0,
            blank: 0,
            unparsed: None,
            seen: SeenRequests::default(),
            done: false,
        })
    }

    fn is_compressed(&self) -> bool {
        matches!(self.compressed, Compressed::Zstd { .. })
    }

    fn bad(&self, line: usize, message: String) -> Error {
        Error::Records {
            path: self.path.clone(),
            line: Some(line),
            message,
        }
    }

    /// The next line, or `None` at the end of the file (or its torn end).
    pub fn next_line(&mut self) -> Result<Option<LogLine>> {
        while !self.done {
            if let Some(line) = self.read_one()? {
                return Ok(Some(line));
            }
        }
        Ok(None)
    }

    /// Reads one line: `Ok(None)` for a line that gives nothing (blank, or not parsed yet).
    fn read_one(&mut self) -> Result<Option<LogLine>> {
        self.line.clear();
        let read = match std::io::Read::take(&mut self.reader, MAX_LINE_BYTES + 1)
            .read_until(b'\n', &mut self.line)
        {
            Ok(read) => read,
            // Frames are written one after another, so only the last can be cut short: by a
            // kill, or because the run is still writing it. Everything flushed before the cut
            // has been read; what follows it (a part of a line) is the torn end.
            Err(e) if self.is_compressed() && e.kind() == std::io::ErrorKind::UnexpectedEof => 0,
            Err(e) if self.is_compressed() => {
                return Err(self.bad(
                    self.number + 1,
                    format!("the compressed records are damaged from here on ({e})"),
                ))
            }
            Err(e) => return Err(Error::io("read", &self.path, e)),
        };
        if read == 0 {
            self.done = true;
            return Ok(None);
        }
        self.number += 1;
        let number = self.number;
        if let Compressed::Zstd { expanded, limit } = &self.compressed {
            if expanded.load(std::sync::atomic::Ordering::Relaxed) > *limit {
                return Err(self.bad(
                    number,
                    format!(
                        "the compressed records expand more than {MAX_EXPANSION}-fold (past {} MiB): \
                         no records llmload writes do; is this a records file?",
                        limit >> 20
                    ),
                ));
            }
        }
        if read as u64 > MAX_LINE_BYTES {
            return Err(self.bad(
                number,
                format!(
                    "the line is longer than {} MiB: no llmload record is; is this a records file?",
                    MAX_LINE_BYTES >> 20
                ),
            ));
        }
        if self.line.iter().all(u8::is_ascii_whitespace) {
            self.blank += 1;
            if self.blank > MAX_BLANK_LINES {
                return Err(self.bad(
                    number,
                    format!(
                        "more than {MAX_BLANK_LINES} blank lines: llmload writes none; is this a records file?"
                    ),
                ));
            }
            return Ok(None);
        }
        if let Some((at, message)) = self.unparsed.take() {
            return Err(self.bad(at, message));
        }
        let parsed = std::str::from_utf8(&self.line)
            .map_err(|_| "not text (invalid UTF-8): is this an llmload records file?".to_string())
            .and_then(|text| parse_line(text).map_err(|e| e.to_string()));
        match parsed {
            Ok(LogLine::Run(run)) => {
                check_format(run.records_format)
                    .map_err(|unknown| self.bad(number, unknown.to_string()))?;
                Ok(Some(LogLine::Run(run)))
            }
            Ok(LogLine::PhaseStart(start)) if start.index > MAX_PHASE_INDEX => Err(self.bad(
                number,
                format!(
                    "phase index {} is beyond any run's ({MAX_PHASE_INDEX}): is this a records file?",
                    start.index
                ),
            )),
            Ok(LogLine::PhaseStart(start)) => {
                self.seen.start(start.index);
                Ok(Some(LogLine::PhaseStart(start)))
            }
            Ok(LogLine::Request(record)) => {
                if !self.seen.started(record.phase) {
                    return Err(self.bad(
                        number,
                        format!(
                            "a request of phase {}, which no phase_start line before it began: the \
                             file was edited or cut",
                            record.phase
                        ),
                    ));
                }
                if let Some(why) = record.impossible_times() {
                    return Err(self.bad(number, why));
                }
                if !self.seen.insert(record.phase, record.seq) {
                    return Err(self.bad(
                        number,
                        format!(
                            "request {} of phase {} appears twice: the file holds two runs, or a \
                             line was copied (it is not counted twice)",
                            record.seq, record.phase
                        ),
                    ));
                }
                Ok(Some(LogLine::Request(record)))
            }
            Ok(parsed) => Ok(Some(parsed)),
            Err(message) => {
                self.unparsed = Some((number, message));
                Ok(None)
            }
        }
    }
}

/// Whether `path` is compressed records whose first block ends before its first line does.
fn cut_before_first_line(path: &Path) -> bool {
    let Ok((reader, Compressed::Zstd { .. })) = open(path) else {
        return false;
    };
    let mut first = Vec::new();
    matches!(
        std::io::Read::take(reader, MAX_LINE_BYTES).read_until(b'\n', &mut first),
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof
    )
}

/// The run header of a records file (its first line), read without the rest; `None` when the
/// first line is not one (or the file is empty).
pub fn read_header(path: &Path) -> Result<Option<RunHeader>> {
    let (reader, _) = open(path)?;
    let mut first = Vec::new();
    std::io::Read::take(reader, MAX_LINE_BYTES)
        .read_until(b'\n', &mut first)
        .map_err(|e| Error::io("read", path, e))?;
    match serde_json::from_slice::<LogLine>(&first) {
        Ok(LogLine::Run(run)) => {
            check_format(run.records_format).map_err(|unknown| Error::Records {
                path: path.to_path_buf(),
                line: Some(1),
                message: unknown.to_string(),
            })?;
            Ok(Some(run.header))
        }
        _ => Ok(None),
    }
}

/// Which (phase, seq) pairs a log has held, one bit each: a phase's requests are numbered
/// from 0, so a bit set per phase costs an eighth of a byte per request. A crafted sequence
/// number must not size memory: far ones are kept in a set.
#[derive(Default)]
struct SeenRequests {
    /// By phase index (only phases a `phase_start` line began).
    phases: std::collections::HashMap<usize, SeenInPhase>,
}

#[derive(Default)]
struct SeenInPhase {
    /// Sequence numbers below [`DENSE_SEQS`], a bit each.
    dense: Vec<u64>,
    /// Any above it.
    sparse: std::collections::HashSet<u64>,
}

/// Sequence numbers held a bit each (8 MiB of bits per phase at most).
const DENSE_SEQS: u64 = 1 << 26;

/// The highest phase index a run can have (a plan's phases and a search's probes).
const MAX_PHASE_INDEX: usize = 1_000_000;

impl SeenRequests {
    fn start(&mut self, phase: usize) {
        self.phases.entry(phase).or_default();
    }

    fn started(&self, phase: usize) -> bool {
        self.phases.contains_key(&phase)
    }

    /// Notes a request of a started phase; false when it was seen before.
    fn insert(&mut self, phase: usize, seq: u64) -> bool {
        let seen = self.phases.entry(phase).or_default();
        if seq >= DENSE_SEQS {
            return seen.sparse.insert(seq);
        }
        let bits = &mut seen.dense;
        let (word, bit) = ((seq / 64) as usize, seq % 64);
        if bits.len() <= word {
            bits.resize(word + 1, 0);
        }
        let was = bits[word] & (1 << bit) != 0;
        bits[word] |= 1 << bit;
        !was
    }
}

/// A records file this llmload cannot read: written in a format it does not know.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
enum UnknownFormat {
    #[error(
        "written in records format {0} by a newer llmload; this one reads formats \
         {OLDEST_RECORDS_FORMAT} to {RECORDS_FORMAT}: upgrade llmload to read it"
    )]
    Newer(u32),
    #[error(
        "written in records format {0} by an older llmload; this one reads formats \
         {OLDEST_RECORDS_FORMAT} to {RECORDS_FORMAT}: report it with the llmload that ran it"
    )]
    Older(u32),
}

/// One line, as [`LogLine`] reads it. A request line as llmload writes it (its tag first) is
/// read straight into a [`RequestRecord`](super::RequestRecord): serde reads an internally
/// tagged enum by first buffering the whole line into a tree of its own and then reading that,
/// which was most of the cost of reading records back (measured on 64,163 records of a
/// 4-token run: 0.62 s of `llmload report` before, see docs/performance.md). Any other line,
/// or a request line written otherwise, goes the tagged way, which is the reference.
fn parse_line(text: &str) -> serde_json::Result<LogLine> {
    const REQUEST_TAG: &str = "{\"event\":\"request\",";
    if text.starts_with(REQUEST_TAG) {
        if let Ok(record) = serde_json::from_str(text) {
            return Ok(LogLine::Request(record));
        }
    }
    serde_json::from_str::<LogLine>(text)
}

fn check_format(format: u32) -> std::result::Result<(), UnknownFormat> {
    if format > RECORDS_FORMAT {
        return Err(UnknownFormat::Newer(format));
    }
    if format < OLDEST_RECORDS_FORMAT {
        return Err(UnknownFormat::Older(format));
    }
    Ok(())
}

/// A whole run read back from `records.jsonl`.
#[derive(Debug, Clone, Default)]
pub struct RunLog {
    /// The run's header (its first line).
    pub header: Option<RunHeader>,
    /// Every phase that started, in order.
    pub phases: Vec<PhaseStart>,
    /// Every phase that ended, in order.
    pub phase_ends: Vec<PhaseEnd>,
    /// Every finished request, in the order they finished.
    pub records: Vec<RequestRecord>,
    /// A capacity search's end, if the run had one that ended.
    pub search_end: Option<SearchEnd>,
    /// The client's stalls, as its hiccup meter saw them, in order.
    pub stalls: Vec<Stall>,
    /// The agent sessions of `sessions` phases, as they ended.
    pub sessions: Vec<crate::records::SessionEnd>,
    /// The run's end; `None` when the process was killed.
    pub end: Option<RunEnd>,
    /// When `records` is a sample of the run's requests ([`RunLog::read_sampled`]), not all.
    pub sampled: Option<Sampled>,
}

/// A log whose requests were sampled: `kept` of the `total` the file holds, uniformly.
#[derive(Debug, Clone, PartialEq)]
pub struct Sampled {
    /// Requests kept.
    pub kept: u64,
    /// Requests the file holds.
    pub total: u64,
    /// The records file, for what must read every request (a search replayed, the counts).
    pub path: std::path::PathBuf,
}

impl RunLog {
    /// Adds one line to the log.
    pub fn push(&mut self, line: LogLine) {
        match line {
            LogLine::Run(run) => self.header = Some(run.header),
            LogLine::PhaseStart(phase) => self.phases.push(phase),
            LogLine::Request(record) => self.records.push(record),
            LogLine::PhaseEnd(end) => self.phase_ends.push(end),
            LogLine::SearchEnd(end) => self.search_end = Some(end),
            LogLine::Stall(stall) => self.stalls.push(stall),
            LogLine::Session(session) => self.sessions.push(session),
            LogLine::RunEnd(end) => self.end = Some(end),
        }
    }

    /// Reads the whole of `records.jsonl` into memory. To aggregate a run, prefer
    /// [`crate::metrics::compute_file`], which streams it.
    pub fn read(path: &Path) -> Result<RunLog> {
        let mut log = RunLog::default();
        read_lines(path, |line| log.push(line))?;
        RunLog::check_header(&log, path)?;
        Ok(log)
    }

    /// Reads a records file keeping at most `cap` of its requests, a uniform seeded sample (the
    /// same file gives the same sample), and every other line: a run of any length in bounded
    /// memory, for what resamples requests (`compare`). Below `cap` requests it is
    /// [`RunLog::read`].
    pub fn read_sampled(path: &Path, cap: usize) -> Result<RunLog> {
        let mut log = RunLog::default();
        let mut requests = crate::reservoir::Reservoir::with_capacity(cap);
        read_lines(path, |line| match line {
            LogLine::Request(record) => requests.push(record),
            other => log.push(other),
        })?;
        RunLog::check_header(&log, path)?;
        let (records, total) = requests.into_parts();
        if total > records.len() as u64 {
            log.sampled = Some(Sampled {
                kept: records.len() as u64,
                total,
                path: path.to_path_buf(),
            });
        }
        log.records = records;
        Ok(log)
    }

    /// An error unless the log (read from `path`) starts with a run header; one whose
    /// compressed first block was cut short says so, rather than doubt it is records at all.
    pub fn check_header(log: &RunLog, path: &Path) -> Result<()> {
        if log.header.is_none() {
            let message = if cut_before_first_line(path) {
                "the compressed records end before their first line is whole: the run was killed \
                 before it wrote its first records, or the file was cut short; there is nothing \
                 to read"
            } else {
                "no run header: is it an llmload records file?"
            };
            return Err(Error::Records {
                path: path.to_path_buf(),
                line: None,
                message: message.into(),
            });
        }
        Ok(())
    }

    /// Whether the run was interrupted (or killed before it could say it ended).
    pub fn interrupted(&self) -> bool {
        self.end.as_ref().is_none_or(|e| e.interrupted)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &[u8]) -> Result<RunLog> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("records.jsonl");
        std::fs::write(&path, text).unwrap();
        RunLog::read(&path)
    }

    const HEADER: &str = r#"{"event":"run","tool_version":"0.1.0","plan":"p","plan_file":"p.kdl","plan_sha256":"x","seed":1,"target":"t","model":"m","api":"chat","stream":true,"exact_output":false,"tokenizer":"cl100k_base","started_at":"2026-01-01T00:00:00Z","client_host":"h"}"#;

    #[test]
    fn logs_without_a_format_are_format_1_and_newer_ones_are_refused() {
        let log = read(format!("{HEADER}\n").as_bytes()).unwrap();
        assert_eq!(log.header.unwrap().plan, "p");
        let newer = HEADER.replace(
            "\"event\":\"run\",",
            &format!(
                "\"event\":\"run\",\"records_format\":{},",
                RECORDS_FORMAT + 1
            ),
        );
        let err = read(format!("{newer}\n").as_bytes())
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("line 1") && err.contains("newer llmload"),
            "{err}"
        );
        assert!(err.contains("upgrade"), "{err}");
        let older = HEADER.replace(
            "\"event\":\"run\",",
            "\"event\":\"run\",\"records_format\":0,",
        );
        let err = read(format!("{older}\n").as_bytes())
            .unwrap_err()
            .to_string();
        assert!(err.contains("older llmload"), "{err}");
    }

    #[test]
    fn bad_lines_are_named_and_a_torn_last_line_is_skipped() {
        let torn = format!("{HEADER}\n{{\"event\":\"run_e");
        assert!(read(torn.as_bytes()).is_ok());
        let mut garbage = format!("{HEADER}\n").into_bytes();
        garbage.extend_from_slice(b"\xff\xfe\x00binary\n{}\n");
        let err = read(&garbage).unwrap_err().to_string();
        assert!(err.contains("line 2") && err.contains("UTF-8"), "{err}");
        let err = read(b"{}\n\n").unwrap_err().to_string();
        assert!(err.contains("no run header"), "{err}");
    }

    fn read_zstd(bytes: &[u8]) -> Result<RunLog> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("records.jsonl.zst");
        std::fs::write(&path, bytes).unwrap();
        RunLog::read(&path)
    }

    /// A compressed file that expands a thousandfold, or holds blank lines by the million, is
    /// refused at once, not read for minutes; one whose first block was cut short says so.
    #[test]
    fn a_zstd_bomb_is_refused_and_a_cut_first_block_says_what_it_is() {
        let mut newlines = Vec::new();
        {
            let mut encoder = zstd::stream::write::Encoder::new(&mut newlines, 3).unwrap();
            let block = vec![b'\n'; 1 << 20];
            for _ in 0..256 {
                std::io::Write::write_all(&mut encoder, &block).unwrap();
            }
            encoder.finish().unwrap();
        }
        assert!(newlines.len() < 300_000, "{}", newlines.len());
        let started = std::time::Instant::now();
        let err = read_zstd(&newlines).unwrap_err().to_string();
        assert!(err.contains("blank lines"), "{err}");
        assert!(started.elapsed() < std::time::Duration::from_secs(5));

        let mut lines = Vec::new();
        {
            let mut encoder = zstd::stream::write::Encoder::new(&mut lines, 3).unwrap();
            let phase = r#"{"event":"phase_start","index":0,"name":"p","record":true,"load":"concurrency 1","open_loop":false,"planned_rate":null,"planned_requests":null,"planned_duration_s":null,"at_us":0}"#;
            std::io::Write::write_all(&mut encoder, format!("{HEADER}\n{phase}\n").as_bytes())
                .unwrap();
            let line = |seq: usize| {
                format!(
                    r#"{{"event":"request","phase":0,"seq":{seq},"intended_send_us":0,"actual_send_us":1,"input_tokens_planned":1,"output_tokens_planned":1,"prompt_seed":0,"error":"client","error_detail":"{}","http_status":null,"ttft_us":null,"e2e_us":null,"chunks":[],"chunk_tokens":null,"prompt_tokens":null,"completion_tokens":null,"token_source":null,"completion_tokens_tokenizer":null,"cached_tokens":null,"finish_reason":null}}"#,
                    "a".repeat(1 << 20)
                ) + "\n"
            };
            for seq in 0..100 {
                std::io::Write::write_all(&mut encoder, line(seq).as_bytes()).unwrap();
            }
            encoder.finish().unwrap();
        }
        let err = read_zstd(&lines).unwrap_err().to_string();
        assert!(err.contains("expand more than 1000-fold"), "{err}");

        let mut whole = Vec::new();
        {
            let mut encoder = zstd::stream::write::Encoder::new(&mut whole, 3).unwrap();
            std::io::Write::write_all(&mut encoder, format!("{HEADER}\n").as_bytes()).unwrap();
            encoder.finish().unwrap();
        }
        let err = read_zstd(&whole[..whole.len() / 2])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("end before their first line is whole"),
            "{err}"
        );
    }

    /// A sampled read keeps at most its cap of requests, the same ones every time, and every
    /// other line; below the cap it is a whole read.
    #[test]
    fn a_sampled_read_is_uniform_repeatable_and_whole_below_its_cap() {
        let request = |seq: usize| {
            format!(
                r#"{{"event":"request","phase":0,"seq":{seq},"intended_send_us":0,"actual_send_us":{seq},"input_tokens_planned":1,"output_tokens_planned":1,"prompt_seed":0,"error":null,"error_detail":null,"http_status":200,"ttft_us":1,"e2e_us":2,"chunks":[],"chunk_tokens":null,"prompt_tokens":1,"completion_tokens":1,"token_source":"usage","completion_tokens_tokenizer":null,"cached_tokens":null,"finish_reason":"length"}}"#
            )
        };
        let mut text = format!("{HEADER}\n{PHASE}\n");
        for seq in 0..5_000 {
            text.push_str(&request(seq));
            text.push('\n');
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("records.jsonl");
        std::fs::write(&path, &text).unwrap();
        let whole = RunLog::read_sampled(&path, 10_000).unwrap();
        assert_eq!((whole.records.len(), whole.sampled.clone()), (5_000, None));
        let sample = RunLog::read_sampled(&path, 1_000).unwrap();
        let again = RunLog::read_sampled(&path, 1_000).unwrap();
        assert_eq!(sample.records.len(), 1_000);
        assert_eq!(sample.phases.len(), 1);
        let sampled = sample.sampled.clone().unwrap();
        assert_eq!((sampled.kept, sampled.total), (1_000, 5_000));
        let seqs = |log: &RunLog| log.records.iter().map(|r| r.seq).collect::<Vec<_>>();
        assert_eq!(seqs(&sample), seqs(&again));
        // Uniform: each fifth of the run holds about a fifth of the sample.
        let first_fifth = seqs(&sample).iter().filter(|s| **s < 1_000).count();
        assert!((140..260).contains(&first_fifth), "{first_fifth}");
    }

    /// A request line read the quick way (its tag first) is the record the tagged way reads;
    /// a request line with its tag elsewhere, and every other kind of line, go the tagged way.
    #[test]
    fn request_lines_read_straight_are_the_tagged_reading() {
        let fields = r#""phase":0,"seq":3,"intended_send_us":0,"actual_send_us":5,"input_tokens_planned":1,"output_tokens_planned":2,"prompt_seed":9,"error":null,"error_detail":null,"http_status":200,"ttft_us":7,"e2e_us":9,"chunks":[[7,1],[9,1]],"chunk_tokens":null,"prompt_tokens":1,"completion_tokens":2,"token_source":"usage","completion_tokens_tokenizer":null,"cached_tokens":null,"finish_reason":"length""#;
        let tag_first = format!(r#"{{"event":"request",{fields}}}"#);
        let tag_last = format!(r#"{{{fields},"event":"request"}}"#);
        let tagged = |text: &str| match serde_json::from_str::<LogLine>(text).unwrap() {
            LogLine::Request(record) => record,
            other => panic!("{other:?}"),
        };
        for text in [&tag_first, &tag_last] {
            match parse_line(text).unwrap() {
                LogLine::Request(record) => assert_eq!(record, tagged(text)),
                other => panic!("{other:?}"),
            }
        }
        assert!(matches!(parse_line(PHASE).unwrap(), LogLine::PhaseStart(_)));
        // A line that starts as a request and is not one is refused as the tagged way refuses it.
        let broken = r#"{"event":"request","phase":"zero"}"#;
        assert_eq!(
            parse_line(broken).unwrap_err().to_string(),
            serde_json::from_str::<LogLine>(broken)
                .unwrap_err()
                .to_string()
        );
    }

    #[test]
    fn a_request_line_twice_is_an_error_naming_the_line() {
        let request = r#"{"event":"request","phase":0,"seq":3,"intended_send_us":0,"actual_send_us":0,"input_tokens_planned":1,"output_tokens_planned":1,"prompt_seed":0,"error":null,"error_detail":null,"http_status":200,"ttft_us":1,"e2e_us":2,"chunks":[],"chunk_tokens":null,"prompt_tokens":1,"completion_tokens":1,"token_source":"usage","completion_tokens_tokenizer":null,"cached_tokens":null,"finish_reason":"length"}"#;
        let once = format!("{HEADER}\n{PHASE}\n{request}\n");
        assert_eq!(read(once.as_bytes()).unwrap().records.len(), 1);
        let twice = format!("{HEADER}\n{PHASE}\n{request}\n{request}\n");
        let err = read(twice.as_bytes()).unwrap_err().to_string();
        assert!(
            err.contains("line 4") && err.contains("appears twice"),
            "{err}"
        );
    }

    proptest::proptest! {
        /// Whatever a records file holds (a valid log cut, spliced, its numbers pushed to
        /// every bound), reading it gives a log or an error naming a line: never a panic, never
        /// memory sized by a number in it.
        #[test]
        fn any_records_file_reads_or_is_refused(
            edits in proptest::collection::vec((0usize..4096, 0usize..12), 0..8)
        ) {
            const NUMBERS: [&str; 12] = ["0", "-1", "4294967295", "18446744073709551615", "1e308",
                "null", "\"x\"", "[]", "{}", "99999999999999999999999", "3.5", "true"];
            let request = r#"{"event":"request","phase":0,"seq":3,"intended_send_us":0,"actual_send_us":0,"input_tokens_planned":1,"output_tokens_planned":1,"prompt_seed":0,"error":null,"error_detail":null,"http_status":200,"ttft_us":1,"e2e_us":2,"chunks":[[1,1]],"chunk_tokens":null,"prompt_tokens":1,"completion_tokens":1,"token_source":"usage","completion_tokens_tokenizer":null,"cached_tokens":null,"finish_reason":"length"}"#;
            let mut text = format!("{HEADER}\n{PHASE}\n{request}\n").into_bytes();
            for (at, number) in edits {
                // Replace a run of digits at `at` (or insert there) with a hostile number.
                let at = at % text.len();
                let end = text[at..].iter().position(|b| !b.is_ascii_digit()).map_or(text.len(), |n| at + n);
                text.splice(at..end, NUMBERS[number].bytes());
            }
            let _ = read(&text);
            // And aggregating what reads: the numbers it holds size no time series or table.
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("records.jsonl");
            std::fs::write(&path, &text).unwrap();
            let _ = crate::metrics::compute_file(&path, None);
        }
    }

    const PHASE: &str = r#"{"event":"phase_start","index":0,"name":"p","record":true,"load":"concurrency 1","open_loop":false,"planned_rate":null,"planned_requests":null,"planned_duration_s":null,"at_us":0}"#;

    #[test]
    fn crafted_indices_are_refused_or_cost_no_memory() {
        let request = |phase: &str, seq: &str| {
            format!(
                r#"{{"event":"request","phase":{phase},"seq":{seq},"intended_send_us":0,"actual_send_us":0,"input_tokens_planned":1,"output_tokens_planned":1,"prompt_seed":0,"error":null,"error_detail":null,"http_status":200,"ttft_us":1,"e2e_us":2,"chunks":[],"chunk_tokens":null,"prompt_tokens":1,"completion_tokens":1,"token_source":"usage","completion_tokens_tokenizer":null,"cached_tokens":null,"finish_reason":"length"}}"#
            )
        };
        for phase in ["4294967295", "50000000", "1"] {
            let text = format!("{HEADER}\n{PHASE}\n{}\n", request(phase, "0"));
            let err = read(text.as_bytes()).unwrap_err().to_string();
            assert!(
                err.contains("line 3") && err.contains("no phase_start"),
                "{err}"
            );
        }
        let huge_start = PHASE.replace("\"index\":0", "\"index\":4294967295");
        let err = read(format!("{HEADER}\n{huge_start}\n").as_bytes())
            .unwrap_err()
            .to_string();
        assert!(err.contains("beyond any run"), "{err}");
        // Times beyond any run's length are refused (their sum overflowed, their span sized
        // the time series).
        let late = request("0", "5").replace(
            "\"actual_send_us\":0",
            "\"actual_send_us\":18446744073709551615",
        );
        let err = read(format!("{HEADER}\n{PHASE}\n{late}\n").as_bytes())
            .unwrap_err()
            .to_string();
        assert!(err.contains("beyond any run"), "{err}");
        // A sequence number near the top of u64 is kept in a set, not a bit field of it.
        let text = format!(
            "{HEADER}\n{PHASE}\n{}\n{}\n",
            request("0", "18446744073709551615"),
            request("0", "1")
        );
        assert_eq!(read(text.as_bytes()).unwrap().records.len(), 2);
        // No line past the bound is read whole, and a special file is refused unopened.
        #[cfg(unix)]
        {
            let err = RunLog::read(std::path::Path::new("/dev/zero"))
                .unwrap_err()
                .to_string();
            assert!(err.contains("not a regular file"), "{err}");
        }
    }
}
