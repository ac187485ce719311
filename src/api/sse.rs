//! A Server-Sent Events parser for streamed completions.
//!
//! Written by hand rather than taken from a crate because it sits on the hot path and must hand
//! back, for every event, the arrival time of the read that completed it: the caller timestamps
//! each read before parsing, and events split across reads or packed several to a read are
//! handled here. It follows the SSE spec's line rules: `\n`, `\r\n` or `\r` line ends, `data:`
//! lines joined by `\n`, comment lines (`: ping`) ignored, a blank line dispatching the event.

/// An event's data and its `event:` name, if any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` name, if any.
    pub name: Option<String>,
    /// The `data:` lines, joined by newlines.
    pub data: String,
}

/// An event as [`SseParser::feed`] hands it over: borrowed from the parser's buffers, which are
/// reused from one event to the next, so that parsing allocates nothing per token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SseEventRef<'a> {
    /// The `event:` name, if any.
    pub name: Option<&'a str>,
    /// The `data:` lines, joined by newlines.
    pub data: &'a str,
}

impl SseEventRef<'_> {
    /// An owned copy.
    pub fn to_owned(self) -> SseEvent {
        SseEvent {
            name: self.name.map(str::to_string),
            data: self.data.to_string(),
        }
    }
}

/// Parses an SSE stream read by read, keeping what an unfinished line or event holds.
#[derive(Debug)]
pub struct SseParser {
    /// Bytes of an unfinished line.
    pending: Vec<u8>,
    data: String,
    has_data: bool,
    name: Option<String>,
    /// The previous read ended in `\r`, so a `\n` at the start of the next is the same line end.
    skip_lf: bool,
    /// The longest line, and the most data one event may hold.
    max_line: usize,
    /// A line or an event grew past `max_line`: nothing more is parsed.
    overflowed: bool,
}

impl Default for SseParser {
    fn default() -> Self {
        SseParser::with_max_line(usize::MAX)
    }
}

/// A line or an event longer than the parser allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TooLong {
    /// The limit it went past, in bytes.
    pub max_line: usize,
}

impl SseParser {
    /// A parser at the start of a stream, with no limit on a line.
    pub fn new() -> Self {
        Self::default()
    }

    /// A parser that refuses lines (and events) longer than `max_line` bytes: a server that
    /// never sends a newline must not grow the client without bound.
    pub fn with_max_line(max_line: usize) -> Self {
        SseParser {
            pending: Vec::new(),
            data: String::new(),
            has_data: false,
            name: None,
            skip_lf: false,
            max_line,
            overflowed: false,
        }
    }

    /// Feeds one read's bytes; calls `on_event` for every event completed by them. After a
    /// line or an event longer than the limit, it parses nothing more and says so.
    pub fn feed(
        &mut self,
        mut bytes: &[u8],
        mut on_event: impl FnMut(SseEventRef),
    ) -> Result<(), TooLong> {
        if self.overflowed {
            return Err(TooLong {
                max_line: self.max_line,
            });
        }
        // An empty read (a transport may hand one over) says nothing of the next byte: the
        // `\r` that ended the last read is still waiting for its possible `\n`.
        if self.skip_lf && !bytes.is_empty() {
            if bytes[0] == b'\n' {
                bytes = &bytes[1..];
            }
            self.skip_lf = false;
        }
        while let Some(end) = memchr::memchr2(b'\n', b'\r', bytes) {
            let line_end_is_cr = bytes[end] == b'\r';
            let mut rest = &bytes[end + 1..];
            if line_end_is_cr {
                match rest.first() {
                    Some(b'\n') => rest = &rest[1..],
                    None => self.skip_lf = true,
                    _ => {}
                }
            }
            if self.pending.is_empty() {
                self.line(&bytes[..end], &mut on_event);
            } else {
                self.pending.extend_from_slice(&bytes[..end]);
                // Taken out and put back, so that its capacity is reused.
                let mut line = std::mem::take(&mut self.pending);
                self.line(&line, &mut on_event);
                line.clear();
                self.pending = line;
            }
            bytes = rest;
            if self.overflowed {
                return Err(TooLong {
                    max_line: self.max_line,
                });
            }
        }
        if self.pending.len() + bytes.len() > self.max_line {
            self.overflowed = true;
            self.pending.clear();
            return Err(TooLong {
                max_line: self.max_line,
            });
        }
        self.pending.extend_from_slice(bytes);
        Ok(())
    }

    fn line(&mut self, line: &[u8], on_event: &mut impl FnMut(SseEventRef)) {
        if line.is_empty() {
            if self.has_data {
                on_event(SseEventRef {
                    name: self.name.as_deref(),
                    data: &self.data,
                });
            }
            self.data.clear();
            self.has_data = false;
            self.name = None;
            return;
        }
        if line[0] == b':' {
            return;
        }
        let (field, value) = match memchr::memchr(b':', line) {
            Some(colon) => {
                let value = &line[colon + 1..];
                (&line[..colon], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (line, &b""[..]),
        };
        match field {
            b"data" => {
                if self.data.len() + value.len() >= self.max_line {
                    self.overflowed = true;
                    self.data.clear();
                    return;
                }
                if self.has_data {
                    self.data.push('\n');
                }
                // `from_utf8` checks ASCII a word at a time; the lossy conversion walks its
                // chunks byte by byte (4% of a short-answer run's CPU). Invalid UTF-8 is rare.
                match std::str::from_utf8(value) {
                    Ok(text) => self.data.push_str(text),
                    Err(_) => self.data.push_str(&String::from_utf8_lossy(value)),
                }
                self.has_data = true;
            }
            b"event" => self.name = Some(String::from_utf8_lossy(value).into_owned()),
            _ => {}
        }
    }

    /// Data of an event the stream ended without a blank line after (some servers do this).
    pub fn finish(&mut self) -> Option<SseEvent> {
        if self.overflowed {
            return None;
        }
        if !self.pending.is_empty() {
            let line = std::mem::take(&mut self.pending);
            let mut last = None;
            self.line(&line, &mut |e: SseEventRef| last = Some(e.to_owned()));
            if last.is_some() {
                return last;
            }
        }
        if self.has_data {
            self.has_data = false;
            return Some(SseEvent {
                name: self.name.take(),
                data: std::mem::take(&mut self.data),
            });
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_reads(reads: &[&[u8]]) -> Vec<(usize, String)> {
        let mut parser = SseParser::new();
        let mut out = Vec::new();
        for (i, read) in reads.iter().enumerate() {
            let _ = parser.feed(read, |e| out.push((i, e.data.to_string())));
        }
        out
    }

    #[test]
    fn a_crlf_split_by_an_empty_read_is_one_line_end() {
        // Found by the property test below: `\r`, an empty read, then `\n` was read as two
        // line ends, which dispatched the event early and joined the next lines wrongly.
        let events = parse_reads(&[b"event: e\r", b"", b"\ndata: x\r", b"", b"\n\r\n"]);
        assert_eq!(events, vec![(4, "x".to_string())]);
        let mut parser = SseParser::new();
        let mut names = Vec::new();
        for read in [&b"event: e\r"[..], b"", b"\ndata: x\r\n\r\n"] {
            let _ = parser.feed(read, |e| names.push(e.name.map(str::to_string)));
        }
        assert_eq!(names, vec![Some("e".to_string())]);
    }

    #[test]
    fn several_events_in_one_read() {
        let events = parse_reads(&[b"data: {\"a\":1}\n\ndata: {\"a\":2}\n\ndata: [DONE]\n\n"]);
        let data: Vec<_> = events.iter().map(|e| e.1.as_str()).collect();
        assert_eq!(data, ["{\"a\":1}", "{\"a\":2}", "[DONE]"]);
    }

    #[test]
    fn an_event_split_across_reads_is_timed_by_the_read_that_completes_it() {
        let events = parse_reads(&[b"da", b"ta: {\"a\"", b":1}\n", b"\ndata: x\n\n"]);
        assert_eq!(
            events,
            vec![(3, "{\"a\":1}".to_string()), (3, "x".to_string())]
        );
    }

    #[test]
    fn crlf_and_cr_line_ends() {
        assert_eq!(parse_reads(&[b"data: a\r\n\r\ndata: b\r\r"]).len(), 2);
        // A CRLF split between two reads is one line end, not two.
        let events = parse_reads(&[b"data: a\r", b"\n\r\n"]);
        assert_eq!(events, vec![(1, "a".to_string())]);
    }

    #[test]
    fn comments_and_keepalives_are_skipped() {
        let events = parse_reads(&[b": ping\n\n:keep-alive\n\ndata: a\n\n"]);
        assert_eq!(events, vec![(0, "a".to_string())]);
    }

    #[test]
    fn multi_line_data_and_event_names() {
        let mut parser = SseParser::new();
        let mut out = Vec::new();
        let _ = parser.feed(b"event: error\ndata: one\ndata:two\n\n", |e| {
            out.push(e.to_owned())
        });
        assert_eq!(
            out,
            vec![SseEvent {
                name: Some("error".into()),
                data: "one\ntwo".into()
            }]
        );
    }

    #[test]
    fn a_stream_ending_without_a_blank_line() {
        let mut parser = SseParser::new();
        let mut out = Vec::new();
        let _ = parser.feed(b"data: [DONE]", |e| out.push(e.to_owned()));
        assert!(out.is_empty());
        assert_eq!(parser.finish().map(|e| e.data), Some("[DONE]".to_string()));
    }

    #[test]
    fn lines_and_events_past_the_limit_stop_the_parser() {
        let mut parser = SseParser::with_max_line(64);
        let mut events = 0;
        assert!(parser.feed(b"data: short\n\n", |_| events += 1).is_ok());
        assert_eq!(events, 1);
        // A line that never ends, read 10 bytes at a time: refused once past the limit.
        let mut result = Ok(());
        for _ in 0..10 {
            result = parser.feed(b"data: aaaa", |_| events += 1);
            if result.is_err() {
                break;
            }
        }
        assert_eq!(result, Err(TooLong { max_line: 64 }));
        assert!(parser.feed(b"\n\n", |_| events += 1).is_err());
        assert_eq!(parser.finish(), None);
        // An event of many short data lines is bounded too.
        let mut parser = SseParser::with_max_line(64);
        let many = b"data: 0123456789\n".repeat(10);
        assert!(parser.feed(&many, |_| {}).is_err());
        assert_eq!(events, 1);
    }

    #[test]
    fn byte_by_byte_gives_the_same_events() {
        let text = b"data: {\"x\":\"\xc3\xa9\"}\r\n\r\n: c\n\ndata: [DONE]\n\n";
        let reads: Vec<&[u8]> = text.chunks(1).collect();
        let data: Vec<_> = parse_reads(&reads).into_iter().map(|e| e.1).collect();
        assert_eq!(data, ["{\"x\":\"é\"}", "[DONE]"]);
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;

        /// Every event of `reads` fed one after another, and what `finish` holds back.
        fn events(reads: &[&[u8]]) -> Vec<SseEvent> {
            let mut parser = SseParser::new();
            let mut out = Vec::new();
            for read in reads {
                let _ = parser.feed(read, |e| out.push(e.to_owned()));
            }
            out.extend(parser.finish());
            out
        }

        /// Bytes shaped like SSE: fields, line ends of every kind, comments, stray bytes.
        fn sse_bytes() -> impl Strategy<Value = Vec<u8>> {
            let pieces: Vec<&'static [u8]> = vec![
                b"data: ",
                b"data:",
                b"event: error",
                b"id: 1",
                b": ping",
                b"\n",
                b"\r\n",
                b"\r",
                b"\n\n",
                b"{\"a\":1}",
                b"[DONE]",
                b" ",
                b":",
                b"\xc3\xa9",
                b"\xff",
                b"x",
            ];
            proptest::collection::vec(
                prop_oneof![
                    4 => proptest::sample::select(pieces).prop_map(|p| p.to_vec()),
                    1 => proptest::collection::vec(any::<u8>(), 0..8),
                ],
                0..80,
            )
            .prop_map(|parts| parts.concat())
        }

        proptest! {
            #[test]
            fn any_split_gives_the_events_of_the_whole(
                bytes in sse_bytes(),
                cuts in proptest::collection::vec(any::<usize>(), 0..12),
            ) {
                let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (bytes.len() + 1)).collect();
                cuts.sort_unstable();
                let mut reads = Vec::new();
                let mut start = 0;
                for cut in cuts {
                    reads.push(&bytes[start..cut]);
                    start = cut;
                }
                reads.push(&bytes[start..]);
                prop_assert_eq!(events(&reads), events(&[&bytes]));
            }
        }
    }
}
