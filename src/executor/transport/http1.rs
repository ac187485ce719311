//! HTTP/1.1 as the direct transport writes and reads it: a request's head, a response's head
//! (httparse), and a response body's framing (a length, chunks, or the connection's end)
//! taken off a read buffer a read at a time.
//!
//! Why by hand, under a client library's transport: hyper hands a chunked body over one HTTP
//! chunk at a time, each a frame through a channel between its connection and the body, with
//! its own wake-up and reference-counted buffer; a streaming server puts each token in a chunk
//! of its own, so that was a frame per token (a server writing whole answers at once, 256
//! streams on one core: hyper's decoder, body channel and buffers were 17% of the client's
//! CPU). Here a read's chunks are joined in place into one piece of the body, which is timed
//! once, as it arrived (same shape: 741-759k to 1.13-1.16M tokens per client CPU-s). It is not
//! a general HTTP client: no pipelining, no upgrades, no request bodies but whole ones; the
//! reqwest transport is the reference for everything else.

use crate::records::{is_rate_limit_header, is_server_request_id_header, RateLimit};
use bytes::{Buf, Bytes, BytesMut};

/// The longest response head read: a server that sends more is not answering HTTP.
pub(super) const MAX_HEAD: usize = 256 * 1024;

/// The most header lines a response head may have.
const MAX_HEADERS: usize = 128;

/// The longest chunk-size line (its extensions included), and the most trailer bytes.
const MAX_CHUNK_LINE: usize = 4096;
const MAX_TRAILERS: usize = 64 * 1024;

/// A request's head: its request line, `headers` (a `content-length` among them is replaced by
/// the body's own), and the body's length when it has one.
pub(super) fn request_head(
    method: &str,
    target: &str,
    headers: &reqwest::header::HeaderMap,
    body_length: Option<usize>,
) -> Vec<u8> {
    let mut head = Vec::with_capacity(256);
    head.extend_from_slice(method.as_bytes());
    head.push(b' ');
    head.extend_from_slice(target.as_bytes());
    head.extend_from_slice(b" HTTP/1.1\r\n");
    for (name, value) in headers {
        if name == reqwest::header::CONTENT_LENGTH {
            continue;
        }
        head.extend_from_slice(name.as_str().as_bytes());
        head.extend_from_slice(b": ");
        // A header value cannot hold CR or LF (HeaderValue refuses them).
        head.extend_from_slice(value.as_bytes());
        head.extend_from_slice(b"\r\n");
    }
    if let Some(length) = body_length {
        head.extend_from_slice(b"content-length: ");
        head.extend_from_slice(length.to_string().as_bytes());
        head.extend_from_slice(b"\r\n");
    }
    head.extend_from_slice(b"\r\n");
    head
}

/// A response's head, as the body reader needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Head {
    pub status: u16,
    pub content_type: Option<String>,
    pub rate_limit: Option<Box<RateLimit>>,
    pub server_request_id: Option<String>,
    pub framing: Framing,
    /// Whether the connection may carry another request after this body.
    pub keep_alive: bool,
}

/// How a response body ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Framing {
    /// It has none (`204`, `304`).
    Empty,
    /// After this many bytes.
    Length(u64),
    /// With its last chunk.
    Chunked,
    /// When the server closes the connection.
    UntilClose,
}

/// How a response is not the HTTP/1.1 a request here can read: the words go into the record's
/// error detail.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(super) enum NotHttp {
    #[error("the response's head is longer than {} KiB", MAX_HEAD / 1024)]
    HeadTooLong,
    #[error("the response is not HTTP/1.1 ({0})")]
    Malformed(httparse::Error),
    #[error("the server switched protocols (101), which a request here never asks")]
    SwitchedProtocols,
    #[error("the response has two different content-lengths")]
    TwoLengths,
    #[error("the response's content-length is not a number")]
    LengthNotNumber,
    #[error("a chunk's size line is too long")]
    ChunkSizeLineTooLong,
    #[error("a chunk has no size")]
    ChunkWithoutSize,
    #[error("a chunk's size is not hexadecimal")]
    ChunkSizeNotHex,
    #[error("a chunk's size is too large")]
    ChunkSizeTooLarge,
    #[error("a chunk's size line does not end in CRLF")]
    ChunkSizeLineNotCrlf,
    #[error("a chunk's data is longer than its size")]
    ChunkTooLong,
    #[error("a chunk's data does not end in CRLF")]
    ChunkDataNotCrlf,
    #[error("the body's trailers are too long")]
    TrailersTooLong,
    #[error("the body's last chunk does not end in CRLF")]
    LastChunkNotCrlf,
}

/// Reads a response head off the front of `buffer`: `Ok(None)` when more bytes are needed.
/// Informational answers (`100 Continue`, `103 Early Hints`) are skipped.
pub(super) fn parse_head(buffer: &mut BytesMut) -> Result<Option<Head>, NotHttp> {
    loop {
        let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut response = httparse::Response::new(&mut headers);
        let length = match response.parse(buffer) {
            Ok(httparse::Status::Complete(length)) => length,
            Ok(httparse::Status::Partial) => {
                if buffer.len() > MAX_HEAD {
                    return Err(NotHttp::HeadTooLong);
                }
                return Ok(None);
            }
            Err(err) => return Err(NotHttp::Malformed(err)),
        };
        let status = response.code.unwrap_or_default();
        if status == 101 {
            return Err(NotHttp::SwitchedProtocols);
        }
        if (100..200).contains(&status) {
            buffer.advance(length);
            continue;
        }
        let head = head_of(&response, status)?;
        buffer.advance(length);
        return Ok(Some(head));
    }
}

fn head_of(response: &httparse::Response<'_, '_>, status: u16) -> Result<Head, NotHttp> {
    let http_10 = response.version == Some(0);
    let (mut content_type, mut content_length) = (None, None);
    let (mut chunked, mut transfer_encoding) = (false, false);
    let (mut close, mut keep_alive_asked) = (false, false);
    let mut rate_limit: Option<Box<RateLimit>> = None;
    let mut server_request_id = None;
    for header in response.headers.iter() {
        let name = header.name;
        if is_rate_limit_header(name) {
            if let Some(value) = visible_text(header.value) {
                let arrived = chrono::Utc::now();
                rate_limit
                    .get_or_insert_with(Default::default)
                    .note(name, value, arrived);
            }
        } else if server_request_id.is_none() && is_server_request_id_header(name) {
            server_request_id = crate::records::server_request_id(header.value);
        } else if name.eq_ignore_ascii_case("content-type") {
            content_type = visible_text(header.value).map(str::to_string);
        } else if name.eq_ignore_ascii_case("content-length") {
            // Digits only (RFC 9110 §8.6): Rust's parse also takes "+5", which a proxy in front
            // may read otherwise (request smuggling's way in).
            let length = std::str::from_utf8(header.value)
                .ok()
                .map(str::trim)
                .filter(|text| !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|text| text.parse::<u64>().ok())
                .ok_or(NotHttp::LengthNotNumber)?;
            if content_length.is_some_and(|seen| seen != length) {
                return Err(NotHttp::TwoLengths);
            }
            content_length = Some(length);
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            transfer_encoding = true;
            // Chunked is the last coding applied, or the body ends with the connection.
            chunked = std::str::from_utf8(header.value).is_ok_and(|codings| {
                codings
                    .rsplit(',')
                    .next()
                    .is_some_and(|last| last.trim().eq_ignore_ascii_case("chunked"))
            });
        } else if name.eq_ignore_ascii_case("connection") {
            for token in String::from_utf8_lossy(header.value).split(',') {
                let token = token.trim();
                close |= token.eq_ignore_ascii_case("close");
                keep_alive_asked |= token.eq_ignore_ascii_case("keep-alive");
            }
        }
    }
    let framing = if status == 204 || status == 304 {
        Framing::Empty
    } else if transfer_encoding {
        if chunked {
            Framing::Chunked
        } else {
            Framing::UntilClose
        }
    } else {
        match content_length {
            Some(length) => Framing::Length(length),
            None => Framing::UntilClose,
        }
    };
    // A length beside a transfer-encoding is a message framed two ways: not reused after.
    let ambiguous = transfer_encoding && content_length.is_some();
    let keep_alive =
        !close && !ambiguous && framing != Framing::UntilClose && (!http_10 || keep_alive_asked);
    Ok(Head {
        status,
        content_type,
        rate_limit: rate_limit.filter(|limit| !limit.is_empty()),
        server_request_id,
        framing,
        keep_alive,
    })
}

/// A header value as text, when it is visible ASCII (tabs allowed), as `HeaderValue::to_str`.
fn visible_text(value: &[u8]) -> Option<&str> {
    value
        .iter()
        .all(|&b| b == b'\t' || (0x20..0x7f).contains(&b))
        .then(|| std::str::from_utf8(value).ok())
        .flatten()
}

/// A response body's framing, taken off a read buffer as bytes arrive.
#[derive(Debug)]
pub(super) struct BodyReader {
    state: State,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// This many bytes left of a body with a length.
    Length(u64),
    /// Until the connection closes.
    UntilClose,
    /// A chunk's size line: the size so far and the line's length.
    Size {
        size: u64,
        line: usize,
        digits: bool,
    },
    /// The rest of a size line after the size (extensions, spaces), up to its line feed.
    SizeRest {
        size: u64,
        line: usize,
    },
    /// The line feed of a size line ending in a carriage return.
    SizeLf {
        size: u64,
    },
    /// This many bytes left of a chunk's data.
    Data(u64),
    /// The line end after a chunk's data.
    DataCr,
    DataLf,
    /// The trailer section: at the start of a line, within one, or at the last line feed.
    TrailerLine {
        at_start: bool,
        bytes: usize,
    },
    TrailerEndLf,
    Done,
}

impl BodyReader {
    pub(super) fn new(framing: Framing) -> BodyReader {
        BodyReader {
            state: match framing {
                Framing::Empty | Framing::Length(0) => State::Done,
                Framing::Length(length) => State::Length(length),
                Framing::Chunked => State::Size {
                    size: 0,
                    line: 0,
                    digits: false,
                },
                Framing::UntilClose => State::UntilClose,
            },
        }
    }

    /// Whether the body has ended.
    pub(super) fn done(&self) -> bool {
        self.state == State::Done
    }

    /// Whether the connection's end is the body's end.
    pub(super) fn ends_with_the_connection(&self) -> bool {
        self.state == State::UntilClose
    }

    /// The body's bytes at the front of `buffer`, taken off it (with the chunks' framing, which
    /// is dropped): empty when `buffer` holds none yet. A chunked body's pieces in `buffer` are
    /// moved together in place, so that a read of many chunks is one piece.
    pub(super) fn take(&mut self, buffer: &mut BytesMut) -> Result<Bytes, NotHttp> {
        match &mut self.state {
            State::Done => Ok(Bytes::new()),
            State::UntilClose => Ok(buffer.split().freeze()),
            State::Length(left) => {
                let taken = (*left).min(buffer.len() as u64);
                *left -= taken;
                if *left == 0 {
                    self.state = State::Done;
                }
                Ok(buffer.split_to(taken as usize).freeze())
            }
            _ => {
                let (read, written) = self.dechunk(&mut buffer[..])?;
                let body = buffer.split_to(written).freeze();
                buffer.advance(read - written);
                Ok(body)
            }
        }
    }

    /// Walks the chunks in `bytes`, moving their data to its front: how many bytes were read
    /// and how many of the body's were written.
    fn dechunk(&mut self, bytes: &mut [u8]) -> Result<(usize, usize), NotHttp> {
        let (mut read, mut written) = (0usize, 0usize);
        while read < bytes.len() {
            if let State::Data(left) = &mut self.state {
                let taken = (*left).min((bytes.len() - read) as u64) as usize;
                bytes.copy_within(read..read + taken, written);
                (read, written) = (read + taken, written + taken);
                *left -= taken as u64;
                if *left == 0 {
                    self.state = State::DataCr;
                }
                continue;
            }
            let byte = bytes[read];
            read += 1;
            self.state = match self.state {
                State::Size { size, line, digits } => {
                    let line = line + 1;
                    if line > MAX_CHUNK_LINE {
                        return Err(NotHttp::ChunkSizeLineTooLong);
                    }
                    match (byte as char).to_digit(16) {
                        Some(digit) => State::Size {
                            size: size
                                .checked_mul(16)
                                .map(|s| s + u64::from(digit))
                                .ok_or(NotHttp::ChunkSizeTooLarge)?,
                            line,
                            digits: true,
                        },
                        None if !digits => return Err(NotHttp::ChunkWithoutSize),
                        None => match byte {
                            b'\r' => State::SizeLf { size },
                            b'\n' => chunk_begins(size),
                            b';' | b' ' | b'\t' => State::SizeRest { size, line },
                            _ => return Err(NotHttp::ChunkSizeNotHex),
                        },
                    }
                }
                State::SizeRest { size, line } => {
                    if line + 1 > MAX_CHUNK_LINE {
                        return Err(NotHttp::ChunkSizeLineTooLong);
                    }
                    match byte {
                        b'\r' => State::SizeLf { size },
                        b'\n' => chunk_begins(size),
                        _ => State::SizeRest {
                            size,
                            line: line + 1,
                        },
                    }
                }
                State::SizeLf { size } => match byte {
                    b'\n' => chunk_begins(size),
                    _ => return Err(NotHttp::ChunkSizeLineNotCrlf),
                },
                State::DataCr => match byte {
                    b'\r' => State::DataLf,
                    b'\n' => new_size(),
                    _ => return Err(NotHttp::ChunkTooLong),
                },
                State::DataLf => match byte {
                    b'\n' => new_size(),
                    _ => return Err(NotHttp::ChunkDataNotCrlf),
                },
                State::TrailerLine { at_start, bytes } => {
                    if bytes + 1 > MAX_TRAILERS {
                        return Err(NotHttp::TrailersTooLong);
                    }
                    match (byte, at_start) {
                        (b'\n', true) => State::Done,
                        (b'\r', true) => State::TrailerEndLf,
                        (b'\n', false) => State::TrailerLine {
                            at_start: true,
                            bytes: bytes + 1,
                        },
                        _ => State::TrailerLine {
                            at_start: false,
                            bytes: bytes + 1,
                        },
                    }
                }
                State::TrailerEndLf => match byte {
                    b'\n' => State::Done,
                    _ => return Err(NotHttp::LastChunkNotCrlf),
                },
                State::Done => {
                    // Bytes after the body are left for the caller to see.
                    return Ok((read - 1, written));
                }
                State::Data(_) | State::Length(_) | State::UntilClose => {
                    unreachable!("handled above or never chunked")
                }
            };
            if self.state == State::Done {
                break;
            }
        }
        Ok((read, written))
    }
}

/// After a size line: the chunk's data, or the trailers after the last chunk.
fn chunk_begins(size: u64) -> State {
    if size == 0 {
        State::TrailerLine {
            at_start: true,
            bytes: 0,
        }
    } else {
        State::Data(size)
    }
}

fn new_size() -> State {
    State::Size {
        size: 0,
        line: 0,
        digits: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The head, or the words a record would keep of why it is not one.
    fn head(text: &str) -> Result<Option<Head>, String> {
        parse_head(&mut BytesMut::from(text)).map_err(|e| e.to_string())
    }

    #[test]
    fn heads_say_how_their_body_ends_and_whether_the_connection_goes_on() {
        let cases: &[(&str, Framing, bool)] = &[
            (
                "HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\n",
                Framing::Length(5),
                true,
            ),
            (
                "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
                Framing::Chunked,
                true,
            ),
            (
                "HTTP/1.1 200 OK\r\ntransfer-encoding: gzip, chunked\r\n\r\n",
                Framing::Chunked,
                true,
            ),
            (
                "HTTP/1.1 200 OK\r\ntransfer-encoding: gzip\r\n\r\n",
                Framing::UntilClose,
                false,
            ),
            ("HTTP/1.1 200 OK\r\n\r\n", Framing::UntilClose, false),
            (
                "HTTP/1.1 200 OK\r\ncontent-length: 2\r\nConnection: close\r\n\r\n",
                Framing::Length(2),
                false,
            ),
            (
                "HTTP/1.0 200 OK\r\ncontent-length: 2\r\n\r\n",
                Framing::Length(2),
                false,
            ),
            (
                "HTTP/1.0 200 OK\r\ncontent-length: 2\r\nconnection: keep-alive\r\n\r\n",
                Framing::Length(2),
                true,
            ),
            (
                "HTTP/1.1 204 No Content\r\ncontent-length: 9\r\n\r\n",
                Framing::Empty,
                true,
            ),
            (
                "HTTP/1.1 200 OK\r\ncontent-length: 3\r\ntransfer-encoding: chunked\r\n\r\n",
                Framing::Chunked,
                false,
            ),
            (
                "HTTP/1.1 200 OK\r\ncontent-length: 3\r\ncontent-length: 3\r\n\r\n",
                Framing::Length(3),
                true,
            ),
        ];
        for (text, framing, keep_alive) in cases {
            let head = head(text).unwrap().unwrap();
            assert_eq!(
                (head.framing, head.keep_alive),
                (*framing, *keep_alive),
                "{text}"
            );
        }
    }

    #[test]
    fn a_heads_rate_limit_headers_are_read_and_no_other() {
        let mut buffer = BytesMut::from(
            "HTTP/1.1 429 Too Many Requests\r\nRetry-After: 3\r\nX-RateLimit-Remaining-Requests: 0\r\nx-ratelimit-reset-requests: 2.5s\r\nx-ratelimit-remaining-pizzas: 9\r\ncontent-length: 0\r\n\r\n",
        );
        let answer = parse_head(&mut buffer).unwrap().unwrap();
        let limit = answer.rate_limit.expect("the headers are read");
        assert_eq!(limit.retry_after_ms, Some(3000));
        assert_eq!(limit.requests.remaining, Some(0));
        assert_eq!(limit.requests.reset_ms, Some(2500));
        assert!(limit.tokens.is_empty());
        assert_eq!(answer.server_request_id, None);
        let mut buffer = BytesMut::from(
            "HTTP/1.1 200 OK\r\nrequest-id: req_011CSHoEeqs5\r\nx-request-id: other\r\ncontent-length: 0\r\n\r\n",
        );
        let answer = parse_head(&mut buffer).unwrap().unwrap();
        assert_eq!(
            answer.server_request_id.as_deref(),
            Some("req_011CSHoEeqs5")
        );
    }

    #[test]
    fn a_head_is_read_whole_past_informational_answers() {
        let mut buffer = BytesMut::from(
            "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 429 Too Many\r\nContent-Type: text/event-stream\r\ncontent-length: 2\r\n\r\n{}",
        );
        let answer = parse_head(&mut buffer).unwrap().unwrap();
        assert_eq!(answer.status, 429);
        assert_eq!(answer.content_type.as_deref(), Some("text/event-stream"));
        assert_eq!(answer.rate_limit, None);
        assert_eq!(&buffer[..], b"{}");
        assert_eq!(head("HTTP/1.1 200 OK\r\ncontent-le").unwrap(), None);
        assert_eq!(head("").unwrap(), None);
    }

    #[test]
    fn what_is_not_a_head_says_so() {
        for (text, says) in [
            ("SSH-2.0-OpenSSH\r\n\r\n", "not HTTP/1.1"),
            (
                "HTTP/1.1 200 OK\r\ncontent-length: x\r\n\r\n",
                "not a number",
            ),
            (
                "HTTP/1.1 200 OK\r\ncontent-length: +2\r\n\r\n",
                "not a number",
            ),
            (
                "HTTP/1.1 200 OK\r\ncontent-length: -0\r\n\r\n",
                "not a number",
            ),
            (
                "HTTP/1.1 200 OK\r\ncontent-length: 1\r\ncontent-length: 2\r\n\r\n",
                "two different",
            ),
            ("HTTP/1.1 101 Switching\r\n\r\n", "switched protocols"),
        ] {
            let err = head(text).unwrap_err();
            assert!(err.contains(says), "{text}: {err}");
        }
        let endless = format!("HTTP/1.1 200 OK\r\nx: {}", "a".repeat(MAX_HEAD + 1));
        assert!(head(&endless).unwrap_err().contains("longer than"));
        // A head without a body's framing that is not visible text has no content type.
        let odd = head("HTTP/1.1 200 OK\r\ncontent-type: caf\u{e9}\r\n\r\n")
            .unwrap()
            .unwrap();
        assert_eq!(odd.content_type, None);
    }

    #[test]
    fn a_request_head_carries_the_bodys_own_length() {
        let mut headers = reqwest::header::HeaderMap::new();
        headers.insert("host", "127.0.0.1:8000".parse().unwrap());
        headers.insert("content-length", "999".parse().unwrap());
        headers.insert("content-type", "application/json".parse().unwrap());
        let head = request_head("POST", "/v1/completions?a=1", &headers, Some(42));
        assert_eq!(
            String::from_utf8(head).unwrap(),
            "POST /v1/completions?a=1 HTTP/1.1\r\nhost: 127.0.0.1:8000\r\ncontent-type: application/json\r\ncontent-length: 42\r\n\r\n"
        );
        let get = request_head(
            "GET",
            "/v1/models",
            &reqwest::header::HeaderMap::new(),
            None,
        );
        assert_eq!(get, b"GET /v1/models HTTP/1.1\r\n\r\n");
    }

    /// Feeds `wire` to a reader in pieces of the given sizes: the body, and what follows it.
    fn read_in_pieces(
        framing: Framing,
        wire: &[u8],
        pieces: &[usize],
    ) -> Result<(Vec<u8>, Vec<u8>), String> {
        let mut reader = BodyReader::new(framing);
        let mut buffer = BytesMut::new();
        let mut body = Vec::new();
        let mut at = 0;
        let mut sizes = pieces.iter().cycle();
        while at < wire.len() && !reader.done() {
            let size = (*sizes.next().unwrap()).max(1).min(wire.len() - at);
            buffer.extend_from_slice(&wire[at..at + size]);
            at += size;
            body.extend_from_slice(&reader.take(&mut buffer).map_err(|e| e.to_string())?);
        }
        buffer.extend_from_slice(&wire[at..]);
        Ok((body, buffer.to_vec()))
    }

    #[test]
    fn chunked_bodies_are_read_whatever_the_reads() {
        let wire = b"4\r\nWiki\r\n5;ext=1\r\npedia\r\nE \r\n in\r\n\r\nchunks.\r\n0\r\nx-trailer: 1\r\n\r\nNEXT";
        for pieces in [&[1usize][..], &[2, 3], &[7], &[1000]] {
            let (body, rest) = read_in_pieces(Framing::Chunked, wire, pieces).unwrap();
            assert_eq!(body, b"Wikipedia in\r\n\r\nchunks.", "{pieces:?}");
            assert_eq!(rest, b"NEXT", "{pieces:?}");
        }
        // Bare line feeds, as some servers write them.
        let (body, _) = read_in_pieces(Framing::Chunked, b"2\na!\n0\n\n", &[3]).unwrap();
        assert_eq!(body, b"a!");
    }

    #[test]
    fn broken_chunks_say_what_is_wrong() {
        for (wire, says) in [
            (&b"zz\r\n"[..], "no size"),
            (b"4x\r\n", "not hexadecimal"),
            (b"2\r\nabc\r\n", "longer than its size"),
            (b"2\r\nab\rX", "CRLF"),
            (b"2\rX", "CRLF"),
            (b"fffffffffffffffff\r\n", "too large"),
        ] {
            let err = read_in_pieces(Framing::Chunked, wire, &[1]).unwrap_err();
            assert!(
                err.contains(says),
                "{:?}: {err}",
                String::from_utf8_lossy(wire)
            );
        }
        let long = format!("1;{}\r\n", "e".repeat(MAX_CHUNK_LINE));
        let err = read_in_pieces(Framing::Chunked, long.as_bytes(), &[64]).unwrap_err();
        assert!(err.contains("too long"), "{err}");
    }

    #[test]
    fn lengths_and_the_connections_end_frame_a_body_too() {
        let (body, rest) = read_in_pieces(Framing::Length(5), b"helloNEXT", &[2]).unwrap();
        assert_eq!(
            (body.as_slice(), rest.as_slice()),
            (&b"hello"[..], &b"NEXT"[..])
        );
        let (body, _) = read_in_pieces(Framing::UntilClose, b"all of it", &[4]).unwrap();
        assert_eq!(body, b"all of it");
        assert!(BodyReader::new(Framing::Empty).done());
        assert!(BodyReader::new(Framing::Length(0)).done());
        assert!(BodyReader::new(Framing::UntilClose).ends_with_the_connection());
    }

    proptest! {
        /// Any body, chunked any way and read in any pieces, comes out whole and in order.
        #[test]
        fn prop_chunked_bodies_come_out_whole(
            chunks in prop::collection::vec(prop::collection::vec(any::<u8>(), 1..40), 0..12),
            pieces in prop::collection::vec(1usize..50, 1..8),
            upper in any::<bool>(),
        ) {
            let mut wire = Vec::new();
            for chunk in &chunks {
                let size = if upper { format!("{:X}", chunk.len()) } else { format!("{:x}", chunk.len()) };
                wire.extend_from_slice(size.as_bytes());
                wire.extend_from_slice(b"\r\n");
                wire.extend_from_slice(chunk);
                wire.extend_from_slice(b"\r\n");
            }
            wire.extend_from_slice(b"0\r\n\r\n");
            let (body, rest) = read_in_pieces(Framing::Chunked, &wire, &pieces).unwrap();
            prop_assert_eq!(body, chunks.concat());
            prop_assert!(rest.is_empty());
        }
    }
}
