//! Writing a records file, plain (`records.jsonl`) or compressed (`records.jsonl.zst`).
//!
//! This is not where records are made (the executor's recorder) nor when they are flushed (the
//! recorder decides); it is how the bytes reach the file so that every reader can read them back
//! after any flush, even if the process is then killed.
//!
//! A compressed file is a sequence of zstd frames, each ending after [`FRAME_BYTES`] of lines.
//! A flush inside a frame ends a zstd *block* (`ZSTD_e_flush`): everything written before it can
//! be decompressed, though the frame is not finished, so a kill -9 loses no flushed record (the
//! reader takes a frame cut short as the end of the file). Flushing a block keeps the
//! compression's window, unlike ending a frame, so flushing every second costs little.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use super::LogLine;
use crate::error::{Error, Result};

/// The plain records file's name in a run directory.
pub const PLAIN_FILE: &str = "records.jsonl";
/// The compressed records file's name in a run directory.
pub const ZSTD_FILE: &str = "records.jsonl.zst";

/// How a records file is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    /// JSON lines, as they are (`records.jsonl`).
    Plain,
    /// zstd frames of JSON lines (`records.jsonl.zst`).
    Zstd,
}

impl Compression {
    /// The file name a run directory keeps its records under, written this way.
    pub fn file_name(self) -> &'static str {
        match self {
            Compression::Plain => PLAIN_FILE,
            Compression::Zstd => ZSTD_FILE,
        }
    }

    /// How the file at `path` is written, by its name.
    pub fn of(path: &Path) -> Compression {
        match path.extension() {
            Some(ext) if ext == "zst" => Compression::Zstd,
            _ => Compression::Plain,
        }
    }
}

/// zstd's level: 3 (its default) compresses a run's records some 4× at a few hundred MB/s on
/// one core, a hundredth of that core at 3,000 requests a second; higher levels cost several
/// times the CPU for a few percent.
const LEVEL: i32 = 3;

/// A frame ends after this many bytes of lines (before compression): each frame carries its own
/// checksum, and a byte damaged on disk takes out one frame, not the rest of the run.
const FRAME_BYTES: u64 = 8 << 20;

/// The records file of the run directory `dir`: the compressed one or the plain one, whichever
/// it holds. An error that says what to do when it holds neither, or both.
pub fn find(dir: &Path) -> Result<PathBuf> {
    let plain = dir.join(PLAIN_FILE);
    let zstd = dir.join(ZSTD_FILE);
    match (plain.is_file(), zstd.is_file()) {
        (true, false) => Ok(plain),
        (false, true) => Ok(zstd),
        (true, true) => Err(Error::usage(format!(
            "{} holds both {PLAIN_FILE} and {ZSTD_FILE}: a run leaves one; remove the one that \
             is not this run's",
            dir.display()
        ))),
        (false, false) => Err(Error::usage(format!(
            "{} has no {PLAIN_FILE} (nor {ZSTD_FILE}): is it an llmload run directory?",
            dir.display()
        ))),
    }
}

/// A records file being written.
pub struct RecordsWriter {
    path: PathBuf,
    sink: Sink,
}

enum Sink {
    Plain(BufWriter<File>),
    Zstd {
        /// `None` only while a frame is being ended.
        frame: Option<zstd::stream::write::Encoder<'static, BufWriter<File>>>,
        /// Bytes of lines in the current frame.
        in_frame: u64,
    },
}

impl RecordsWriter {
    /// Creates (or empties) the file at `path`, compressed when its name ends in `.zst`.
    pub fn create(path: &Path) -> Result<RecordsWriter> {
        let file = File::create(path).map_err(|e| Error::io("create", path, e))?;
        let out = BufWriter::with_capacity(1 << 16, file);
        let sink = match Compression::of(path) {
            Compression::Plain => Sink::Plain(out),
            Compression::Zstd => Sink::Zstd {
                frame: Some(new_frame(out).map_err(|e| Error::io("create", path, e))?),
                in_frame: 0,
            },
        };
        Ok(RecordsWriter {
            path: path.to_path_buf(),
            sink,
        })
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether the file is compressed.
    pub fn compression(&self) -> Compression {
        match self.sink {
            Sink::Plain(_) => Compression::Plain,
            Sink::Zstd { .. } => Compression::Zstd,
        }
    }

    /// Appends one line (not yet flushed).
    pub fn write_line(&mut self, line: &LogLine) -> std::io::Result<()> {
        match &mut self.sink {
            Sink::Plain(out) => write_json_line(out, line).map(|_| ()),
            Sink::Zstd { frame, in_frame } => {
                let encoder = frame.as_mut().ok_or_else(broken)?;
                let mut counted = Counted {
                    inner: encoder,
                    bytes: 0,
                };
                write_json_line(&mut counted, line)?;
                *in_frame += counted.bytes;
                if *in_frame >= FRAME_BYTES {
                    let out = frame.take().ok_or_else(broken)?.finish()?;
                    *frame = Some(new_frame(out)?);
                    *in_frame = 0;
                }
                Ok(())
            }
        }
    }

    /// Makes everything written so far readable by any reader, and durable against the
    /// process being killed (not against the machine losing power: nothing is synced).
    pub fn flush(&mut self) -> std::io::Result<()> {
        match &mut self.sink {
            Sink::Plain(out) => out.flush(),
            // The encoder's flush ends a block and flushes the file beneath it.
            Sink::Zstd { frame, .. } => frame.as_mut().ok_or_else(broken)?.flush(),
        }
    }

    /// Ends the file: the last frame finished and everything flushed.
    pub fn finish(self) -> std::io::Result<()> {
        match self.sink {
            Sink::Plain(mut out) => out.flush(),
            Sink::Zstd { frame, .. } => frame.ok_or_else(broken)?.finish()?.flush(),
        }
    }
}

fn new_frame(
    out: BufWriter<File>,
) -> std::io::Result<zstd::stream::write::Encoder<'static, BufWriter<File>>> {
    let mut encoder = zstd::stream::write::Encoder::new(out, LEVEL)?;
    encoder.include_checksum(true)?;
    Ok(encoder)
}

/// A frame that failed to end leaves the writer without one; every later write says so.
fn broken() -> std::io::Error {
    std::io::Error::other("an earlier write to the records file failed")
}

fn write_json_line(out: &mut impl Write, line: &LogLine) -> std::io::Result<()> {
    serde_json::to_writer(&mut *out, line)?;
    out.write_all(b"\n")
}

/// Counts the bytes that go through it.
struct Counted<'a, W> {
    inner: &'a mut W,
    bytes: u64,
}

impl<W: Write> Write for Counted<'_, W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let written = self.inner.write(buf)?;
        self.bytes += written as u64;
        Ok(written)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::{read_lines, PhaseStart};

    fn phase(index: usize, name: String) -> LogLine {
        LogLine::PhaseStart(PhaseStart {
            index: index % 100,
            name,
            record: true,
            load: "concurrency 1".into(),
            open_loop: false,
            planned_rate: None,
            planned_requests: None,
            planned_duration_s: None,
            at_us: index as u64,
            group: None,
            step: None,
            api: None,
            model: None,
            cache_reset: None,
            sessions: false,
        })
    }

    fn names(path: &Path) -> Result<Vec<String>> {
        let mut names = Vec::new();
        read_lines(path, |line| {
            if let LogLine::PhaseStart(start) = line {
                names.push(start.name);
            }
        })?;
        Ok(names)
    }

    #[test]
    fn the_file_name_chooses_the_compression_and_find_says_what_a_directory_holds() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(
            Compression::of(&dir.path().join(ZSTD_FILE)),
            Compression::Zstd
        );
        assert_eq!(
            Compression::of(&dir.path().join(PLAIN_FILE)),
            Compression::Plain
        );
        let none = find(dir.path()).unwrap_err().to_string();
        assert!(none.contains("no records.jsonl"), "{none}");
        std::fs::write(dir.path().join(ZSTD_FILE), b"").unwrap();
        assert_eq!(find(dir.path()).unwrap(), dir.path().join(ZSTD_FILE));
        std::fs::write(dir.path().join(PLAIN_FILE), b"").unwrap();
        let both = find(dir.path()).unwrap_err().to_string();
        assert!(both.contains("holds both"), "{both}");
    }

    /// Lines cross several frames (8 MiB each) and read back in order; what is flushed reads
    /// back while the file is still open, its frame unfinished.
    #[test]
    fn compressed_lines_read_back_across_frames_and_while_the_file_is_open() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(ZSTD_FILE);
        let mut writer = RecordsWriter::create(&path).unwrap();
        assert_eq!(writer.compression(), Compression::Zstd);
        // Names long and varied enough not to compress away: ~20 MiB of lines, three frames.
        let name = |i: usize| format!("{i:08}-{}", "abcdefghij".repeat(1 + i % 90));
        let count = 40_000;
        for i in 0..count {
            writer.write_line(&phase(i, name(i))).unwrap();
        }
        writer.flush().unwrap();
        let open = names(&path).unwrap();
        assert_eq!(open.len(), count);
        writer.write_line(&phase(count, name(count))).unwrap();
        writer.finish().unwrap();
        let read = names(&path).unwrap();
        assert_eq!(read.len(), count + 1);
        assert!(read.iter().enumerate().all(|(i, n)| *n == name(i)));
        // Compressed, and still a valid zstd stream to any decoder.
        let bytes = std::fs::read(&path).unwrap();
        let whole = zstd::stream::decode_all(&bytes[..]).unwrap();
        assert_eq!(whole.iter().filter(|b| **b == b'\n').count(), count + 1);
        assert!(
            bytes.len() * 4 < whole.len(),
            "{} of {}",
            bytes.len(),
            whole.len()
        );
    }

    /// A file cut anywhere (a kill mid-write) reads up to its cut; a damaged byte is an error
    /// that says the compressed records are damaged, never a panic.
    #[test]
    fn a_cut_file_reads_to_its_cut_and_a_damaged_one_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(ZSTD_FILE);
        let mut writer = RecordsWriter::create(&path).unwrap();
        for i in 0..200 {
            writer.write_line(&phase(i, format!("p{i}"))).unwrap();
            if i % 50 == 49 {
                writer.flush().unwrap();
            }
        }
        writer.finish().unwrap();
        let bytes = std::fs::read(&path).unwrap();
        let cut_path = dir.path().join("cut.jsonl.zst");
        let mut previous = 0;
        for cut in (0..bytes.len()).step_by(7) {
            std::fs::write(&cut_path, &bytes[..cut]).unwrap();
            let read = names(&cut_path).unwrap();
            assert!(read.len() >= previous, "cut at {cut}");
            previous = read.len();
        }
        assert!(previous >= 150, "{previous}");
        let mut damaged = bytes.clone();
        let middle = damaged.len() / 2;
        damaged[middle] ^= 0x5a;
        std::fs::write(&cut_path, &damaged).unwrap();
        match names(&cut_path) {
            Err(e) => assert!(e.to_string().contains("damaged"), "{e}"),
            // A flip can land where zstd does not look (a literal its checksum then catches
            // at the frame's end, or a line that no longer parses): never silently whole.
            Ok(read) => assert!(read.len() < 200, "{}", read.len()),
        }
    }
}
