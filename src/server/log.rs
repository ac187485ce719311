//! `server.log`: the server's stdout and stderr as it writes them, bounded. The first half of
//! the bound is written to the file as it comes (a run killed meanwhile keeps it); past that,
//! only the latest half is kept in memory and written after a marker saying how much was left
//! out when the server stops. Its last lines are also kept apart, for messages that quote them.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::error::{Error, Result};

/// The last lines kept for quoting.
const TAIL_LINES: usize = 40;
/// The longest line kept for quoting (a server may print a whole prompt).
const TAIL_LINE_CHARS: usize = 500;

/// The last lines the server wrote.
pub type Tail = Arc<Mutex<VecDeque<String>>>;

struct Sink {
    file: std::fs::File,
    /// Bytes written to the file so far.
    written: u64,
    /// The file's part of the bound: half of it.
    head_max: u64,
    /// Past the head: the latest bytes, at most `head_max` of them.
    ring: VecDeque<u8>,
    /// Bytes dropped from the ring.
    left_out: u64,
}

/// What the log held when the server stopped.
pub struct LogSummary {
    /// Bytes the server wrote.
    pub bytes: u64,
    /// Bytes of them not kept (between the head and the end).
    pub left_out: u64,
    /// Its last lines.
    pub tail: Vec<String>,
}

/// The server's log, written by one thread per output stream.
pub struct ServerLog {
    path: PathBuf,
    /// Kept out of the file and the tail: a server prints its arguments (an API key, a token)
    /// as often as not.
    secrets: Arc<crate::secrets::Secrets>,
    sink: Arc<Mutex<Sink>>,
    tail: Tail,
    pumps: Vec<std::thread::JoinHandle<u64>>,
}

impl ServerLog {
    /// Creates `path`, to keep at most `max` bytes of the server's output, `secrets` redacted.
    pub fn create(
        path: &Path,
        max: u64,
        secrets: Arc<crate::secrets::Secrets>,
    ) -> Result<ServerLog> {
        let file = std::fs::File::create(path).map_err(|e| Error::io("create", path, e))?;
        Ok(ServerLog {
            path: path.to_path_buf(),
            secrets,
            sink: Arc::new(Mutex::new(Sink {
                file,
                written: 0,
                head_max: max / 2,
                ring: VecDeque::new(),
                left_out: 0,
            })),
            tail: Arc::new(Mutex::new(VecDeque::new())),
            pumps: Vec::new(),
        })
    }

    /// Copies `stream` into the log on a thread of its own, line by line (stdout and stderr
    /// interleave by whole lines).
    pub fn pump(&mut self, stream: impl Read + Send + 'static) {
        let sink = self.sink.clone();
        let tail = self.tail.clone();
        let secrets = self.secrets.clone();
        self.pumps.push(std::thread::spawn(move || {
            let mut reader = BufReader::new(stream);
            let mut line = Vec::new();
            let mut total = 0u64;
            loop {
                line.clear();
                match reader.read_until(b'\n', &mut line) {
                    Ok(0) | Err(_) => return total,
                    Ok(n) => total += n as u64,
                }
                // A line with no secret is kept byte for byte (a server's output need not be
                // UTF-8); one with a secret, as text with the secret redacted.
                if let std::borrow::Cow::Owned(clean) =
                    secrets.redact(&String::from_utf8_lossy(&line))
                {
                    line = clean.into_bytes();
                }
                if let Ok(mut sink) = sink.lock() {
                    sink.keep(&line);
                }
                let text = String::from_utf8_lossy(&line);
                let text = text.trim_end();
                if !text.trim().is_empty() {
                    if let Ok(mut tail) = tail.lock() {
                        if tail.len() == TAIL_LINES {
                            tail.pop_front();
                        }
                        tail.push_back(text.chars().take(TAIL_LINE_CHARS).collect());
                    }
                }
            }
        }));
    }

    /// The last lines, as they grow.
    pub fn tail_handle(&self) -> Tail {
        self.tail.clone()
    }

    /// Waits for the server's output to end (it has exited), and writes what the bound kept.
    pub fn finish(&mut self) -> Result<LogSummary> {
        let mut bytes = 0;
        for pump in self.pumps.drain(..) {
            bytes += pump.join().unwrap_or(0);
        }
        let mut sink = self
            .sink
            .lock()
            .map_err(|_| Error::run("the server log's writer failed"))?;
        let left_out = sink.left_out;
        if !sink.ring.is_empty() || left_out > 0 {
            let ring: Vec<u8> = sink.ring.drain(..).collect();
            let marker = format!("\n[llmload: {left_out} bytes of the server's output left out here: server.log keeps its first and last part]\n");
            sink.file
                .write_all(marker.as_bytes())
                .and_then(|_| sink.file.write_all(&ring))
                .map_err(|e| Error::io("write", &self.path, e))?;
        }
        sink.file
            .flush()
            .map_err(|e| Error::io("write", &self.path, e))?;
        Ok(LogSummary {
            bytes,
            left_out,
            tail: tail_lines(&self.tail, TAIL_LINES),
        })
    }
}

impl Sink {
    fn keep(&mut self, bytes: &[u8]) {
        let room = self.head_max.saturating_sub(self.written) as usize;
        let (head, rest) = bytes.split_at(room.min(bytes.len()));
        if !head.is_empty() && self.file.write_all(head).is_ok() {
            self.written += head.len() as u64;
        }
        if rest.is_empty() {
            return;
        }
        self.ring.extend(rest);
        let over = self.ring.len().saturating_sub(self.head_max as usize);
        if over > 0 {
            self.ring.drain(..over);
            self.left_out += over as u64;
        }
    }
}

/// The last `n` lines of `tail`.
pub fn tail_lines(tail: &Tail, n: usize) -> Vec<String> {
    tail.lock()
        .map(|t| t.iter().rev().take(n).rev().cloned().collect())
        .unwrap_or_default()
}

/// The last line, one line and bounded, for a one-line reason.
pub fn last_line(tail: &Tail) -> Option<String> {
    tail_lines(tail, 1)
        .pop()
        .map(|line| crate::error::shorten(&line))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_log_keeps_its_start_and_its_end_within_the_bound() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("server.log");
        let mut log = ServerLog::create(&path, 2_000, Default::default()).unwrap();
        let text: String = (0..500).map(|i| format!("line {i:04}\n")).collect();
        log.pump(std::io::Cursor::new(text.clone().into_bytes()));
        let summary = log.finish().unwrap();
        assert_eq!(summary.bytes, text.len() as u64);
        let kept = std::fs::read_to_string(&path).unwrap();
        assert!(kept.starts_with("line 0000\n"), "{kept}");
        assert!(kept.ends_with("line 0499\n"), "{kept}");
        assert!(kept.contains("left out here"));
        assert!(kept.len() < 2_200, "{}", kept.len());
        assert_eq!(summary.left_out, text.len() as u64 - 2_000);
        assert_eq!(summary.tail.last().unwrap(), "line 0499");
        assert_eq!(summary.tail.len(), TAIL_LINES);
    }

    #[test]
    fn a_short_log_is_kept_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("server.log");
        let mut log = ServerLog::create(&path, 1 << 20, Default::default()).unwrap();
        log.pump(std::io::Cursor::new(b"starting\n\nready\n".to_vec()));
        log.pump(std::io::Cursor::new(b"warning: x".to_vec()));
        let summary = log.finish().unwrap();
        let kept = std::fs::read_to_string(&path).unwrap();
        assert_eq!(kept.len(), 26);
        assert_eq!(summary.left_out, 0);
        assert_eq!(summary.tail.len(), 3, "blank lines are not quoted");
    }
}
