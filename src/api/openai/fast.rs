//! A fast path for the streamed chunks of OpenAI-style servers: one pass over the chunk that
//! takes its one choice's text and finish_reason, for the common shape, and gives up on
//! anything else.
//!
//! Written by hand because decoding each chunk with serde was the largest cost of llmload's own
//! on the read path: about 14% of the client's CPU on 64-token answers, most of it walking
//! fields nobody reads (`id`, `created`, `model`, `logprobs`...). It is not a JSON parser for
//! anything else, and it never decides that a chunk is bad: whenever the chunk is not the plain
//! shape (an escape in a string it keeps, usage or an error present, several choices, a key
//! seen twice, reasoning text, anything malformed), it returns `None` and the serde decoder,
//! which is the reference, reads the chunk instead. A property test holds the two to the same
//! answers.

use crate::api::{Decoded, Generated, Part};

/// Which dialect's choice to read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::api) enum Shape {
    /// `choices[0].text`.
    Completions,
    /// `choices[0].delta.content`.
    Chat,
}

/// Deeper nesting than this is left to serde.
const MAX_DEPTH: usize = 32;

/// Of the eight bytes of `word` (little-endian), the high bit of each one that ends a string's
/// run ([`STRING_STOPS`]); only the lowest set bit is exact (a borrow can mark bytes above a
/// stop), which is the one read.
#[inline]
fn string_stops(word: u64) -> u64 {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    let zero_byte = |x: u64| x.wrapping_sub(ONES) & !x & HIGHS;
    let quote = zero_byte(word ^ (ONES * b'"' as u64));
    let escape = zero_byte(word ^ (ONES * b'\\' as u64));
    let control = word.wrapping_sub(ONES * 0x20) & !word & HIGHS;
    quote | escape | control
}

/// The bytes that end a string's run of plain characters: its closing quote, an escape, and
/// the control characters JSON does not allow raw.
const STRING_STOPS: [bool; 256] = {
    let mut stops = [false; 256];
    let mut byte = 0;
    while byte < 0x20 {
        stops[byte] = true;
        byte += 1;
    }
    stops[b'"' as usize] = true;
    stops[b'\\' as usize] = true;
    stops
};

/// The chunk's generated text (appended to `text`) and finish_reason, or `None` to say that
/// serde must read it.
pub(in crate::api) fn decode(data: &str, out: &mut Generated, shape: Shape) -> Option<Decoded> {
    let mut scanner = Scanner {
        bytes: data.as_bytes(),
        data,
        at: 0,
    };
    let chunk = scanner.chunk(shape)?;
    scanner.whitespace();
    if scanner.at != scanner.bytes.len() {
        return None;
    }
    if let Some(piece) = chunk.text {
        out.push(Part::Answer, piece);
    }
    Some(Decoded {
        finish_reason: chunk.finish_reason.map(str::to_string),
        ..Decoded::default()
    })
}

struct Chunk<'a> {
    text: Option<&'a str>,
    finish_reason: Option<&'a str>,
}

struct Scanner<'a> {
    bytes: &'a [u8],
    data: &'a str,
    at: usize,
}

impl<'a> Scanner<'a> {
    fn whitespace(&mut self) {
        while let Some(b' ' | b'\n' | b'\r' | b'\t') = self.bytes.get(self.at) {
            self.at += 1;
        }
    }

    /// The next byte after whitespace, not consumed.
    fn peek(&mut self) -> Option<u8> {
        self.whitespace();
        self.bytes.get(self.at).copied()
    }

    fn eat(&mut self, byte: u8) -> Option<()> {
        (self.peek()? == byte).then(|| self.at += 1)
    }

    /// Walks `{ key: value, ... }`, handing each key to `field` (which reads its value).
    fn object(&mut self, mut field: impl FnMut(&mut Self, &'a str) -> Option<()>) -> Option<()> {
        self.eat(b'{')?;
        if self.peek()? == b'}' {
            self.at += 1;
            return Some(());
        }
        loop {
            let key = self.plain_string()?;
            self.eat(b':')?;
            field(self, key)?;
            if self.closes(b'}')? {
                return Some(());
            }
        }
    }

    /// After a member of an object or an array: a comma (false: more follow) or the closing
    /// bracket (true); `None` for anything else.
    fn closes(&mut self, close: u8) -> Option<bool> {
        match self.peek()? {
            b',' => {
                self.at += 1;
                Some(false)
            }
            byte if byte == close => {
                self.at += 1;
                Some(true)
            }
            _ => None,
        }
    }

    fn chunk(&mut self, shape: Shape) -> Option<Chunk<'a>> {
        let mut chunk = Chunk {
            text: None,
            finish_reason: None,
        };
        let (mut choices_seen, mut usage_seen, mut error_seen) = (false, false, false);
        self.object(|s, key| match key {
            "choices" => {
                once(&mut choices_seen)?;
                if s.null()? {
                    return Some(());
                }
                s.eat(b'[')?;
                if s.peek()? == b']' {
                    s.at += 1;
                    return Some(());
                }
                chunk = s.choice(shape)?;
                // Several choices are left to serde.
                s.eat(b']')
            }
            // Usage and errors are rare (the last chunk, a failure): serde reads them.
            "usage" => {
                once(&mut usage_seen)?;
                s.null()?.then_some(())
            }
            "error" => {
                once(&mut error_seen)?;
                s.null()?.then_some(())
            }
            _ => s.skip_value(1),
        })?;
        Some(chunk)
    }

    fn choice(&mut self, shape: Shape) -> Option<Chunk<'a>> {
        let mut chunk = Chunk {
            text: None,
            finish_reason: None,
        };
        let (mut text_seen, mut finish_seen) = (false, false);
        self.object(|s, key| match (key, shape) {
            ("text", Shape::Completions) => {
                once(&mut text_seen)?;
                chunk.text = s.optional_plain_string()?;
                Some(())
            }
            ("delta", Shape::Chat) => {
                once(&mut text_seen)?;
                if s.null()? {
                    return Some(());
                }
                chunk.text = s.delta()?;
                Some(())
            }
            // A whole message, in a streamed chunk, is not the plain shape.
            ("message", Shape::Chat) => None,
            ("finish_reason", _) => {
                once(&mut finish_seen)?;
                chunk.finish_reason = s.optional_plain_string()?;
                Some(())
            }
            _ => s.skip_value(2),
        })?;
        Some(chunk)
    }

    /// A chat delta's `content`; reasoning text is left to serde.
    fn delta(&mut self) -> Option<Option<&'a str>> {
        let mut content = None;
        let mut content_seen = false;
        self.object(|s, key| match key {
            "content" => {
                once(&mut content_seen)?;
                content = s.optional_plain_string()?;
                Some(())
            }
            "reasoning_content" | "reasoning" | "tool_calls" => None,
            _ => s.skip_value(3),
        })?;
        Some(content)
    }

    /// Reads `null` if it comes: whether it did.
    fn null(&mut self) -> Option<bool> {
        if self.peek()? == b'n' {
            self.literal(b"null")?;
            Some(true)
        } else {
            Some(false)
        }
    }

    fn literal(&mut self, word: &[u8]) -> Option<()> {
        let end = self.at + word.len();
        (self.bytes.get(self.at..end)? == word).then(|| self.at = end)
    }

    /// A string or null; `None` (serde reads it) for anything else.
    fn optional_plain_string(&mut self) -> Option<Option<&'a str>> {
        if self.null()? {
            Some(None)
        } else {
            self.plain_string().map(Some)
        }
    }

    /// A string without escapes, borrowed; `None` for one with an escape (serde unescapes it).
    fn plain_string(&mut self) -> Option<&'a str> {
        self.eat(b'"')?;
        let start = self.at;
        let (end, escaped) = self.string_run(start)?;
        if escaped {
            return None;
        }
        self.at = end + 1;
        self.data.get(start..end)
    }

    /// From `from`, where the string's run of plain characters ends: at its closing quote
    /// (false) or at an escape (true); `None` at a control character or the end of the data.
    /// Eight bytes at a time (SWAR), then byte by byte for the last few. Keys and tokens are
    /// a few bytes long, shorter than a vectorised search takes to set up; a byte loop was
    /// cheap per byte, but its exit (a different length for each of a chunk's twenty-odd
    /// strings) was a mispredicted branch for most of them, the hottest instruction of the
    /// scanner. A word at a time, most strings end in their first or second word: the
    /// hot-paths benchmark's read_stream went from 446 to 373 ns per chunk (vLLM's chat
    /// chunks, 260 bytes).
    #[inline]
    fn string_run(&self, from: usize) -> Option<(usize, bool)> {
        let rest = self.bytes.get(from..)?;
        let mut words = rest.chunks_exact(8);
        let mut run = None;
        for (index, word) in words.by_ref().enumerate() {
            let mask = string_stops(u64::from_le_bytes(word.try_into().ok()?));
            if mask != 0 {
                run = Some(index * 8 + (mask.trailing_zeros() / 8) as usize);
                break;
            }
        }
        let run = match run {
            Some(run) => run,
            None => {
                let tail = words.remainder();
                let done = rest.len() - tail.len();
                done + tail.iter().position(|&byte| STRING_STOPS[byte as usize])?
            }
        };
        match rest[run] {
            b'"' => Some((from + run, false)),
            b'\\' => Some((from + run, true)),
            _ => None,
        }
    }

    /// Any string, escapes checked as JSON has them.
    fn skip_string(&mut self) -> Option<()> {
        self.eat(b'"')?;
        loop {
            let (end, escaped) = self.string_run(self.at)?;
            if !escaped {
                self.at = end + 1;
                return Some(());
            }
            // An escape: \" \\ \/ \b \f \n \r \t or \uXXXX.
            match self.bytes.get(end + 1)? {
                b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => self.at = end + 2,
                b'u' => {
                    let hex = std::str::from_utf8(self.bytes.get(end + 2..end + 6)?).ok()?;
                    let unit = u16::from_str_radix(hex, 16).ok()?;
                    // Surrogate pairs are left to serde, which checks that they pair.
                    if !hex.bytes().all(|b| b.is_ascii_hexdigit())
                        || (0xD800..=0xDFFF).contains(&unit)
                    {
                        return None;
                    }
                    self.at = end + 6;
                }
                _ => return None,
            }
        }
    }

    /// A number, as JSON writes them: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
    fn skip_number(&mut self) -> Option<()> {
        let digits = |s: &mut Self| {
            let start = s.at;
            while s.bytes.get(s.at).is_some_and(u8::is_ascii_digit) {
                s.at += 1;
            }
            (s.at > start).then_some(())
        };
        if self.bytes.get(self.at) == Some(&b'-') {
            self.at += 1;
        }
        match self.bytes.get(self.at)? {
            b'0' => self.at += 1,
            b'1'..=b'9' => digits(self)?,
            _ => return None,
        }
        if self.bytes.get(self.at) == Some(&b'.') {
            self.at += 1;
            digits(self)?;
        }
        if let Some(b'e' | b'E') = self.bytes.get(self.at) {
            self.at += 1;
            if let Some(b'+' | b'-') = self.bytes.get(self.at) {
                self.at += 1;
            }
            digits(self)?;
        }
        Some(())
    }

    /// Any value, read and dropped.
    fn skip_value(&mut self, depth: usize) -> Option<()> {
        if depth > MAX_DEPTH {
            return None;
        }
        match self.peek()? {
            b'"' => self.skip_string(),
            b'{' => self.object(|s, _| s.skip_value(depth + 1)),
            b'[' => {
                self.at += 1;
                if self.peek()? == b']' {
                    self.at += 1;
                    return Some(());
                }
                loop {
                    self.skip_value(depth + 1)?;
                    if self.closes(b']')? {
                        return Some(());
                    }
                }
            }
            b't' => self.literal(b"true"),
            b'f' => self.literal(b"false"),
            b'n' => self.literal(b"null"),
            _ => self.skip_number(),
        }
    }
}

/// Marks a key as seen; `None` the second time (serde refuses duplicate fields).
fn once(seen: &mut bool) -> Option<()> {
    if *seen {
        return None;
    }
    *seen = true;
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const VLLM_COMPLETION: &str = r#"{"id":"cmpl-1f2e","object":"text_completion","created":1764560000,"model":"m","system_fingerprint":null,"choices":[{"index":0,"text":" the","logprobs":null,"finish_reason":null,"stop_reason":null}],"usage":null}"#;
    const VLLM_CHAT: &str = r#"{"id":"chatcmpl-9","object":"chat.completion.chunk","created":1,"model":"m","system_fingerprint":null,"choices":[{"index":0,"delta":{"content":" cat"},"logprobs":null,"finish_reason":null}],"usage":null}"#;

    #[test]
    fn the_plain_shapes_are_read() {
        let mut text = String::new();
        let d = decode(
            VLLM_COMPLETION,
            &mut Generated::new(&mut text),
            Shape::Completions,
        )
        .unwrap();
        assert_eq!((text.as_str(), d.finish_reason), (" the", None));
        let mut text = String::new();
        decode(VLLM_CHAT, &mut Generated::new(&mut text), Shape::Chat).unwrap();
        assert_eq!(text, " cat");
        let mut text = String::new();
        let d = decode(
            r#"{"choices":[{"index":0,"delta":{},"finish_reason":"length"}]}"#,
            &mut Generated::new(&mut text),
            Shape::Chat,
        )
        .unwrap();
        assert_eq!(d.finish_reason.as_deref(), Some("length"));
    }

    #[test]
    fn anything_else_is_left_to_serde() {
        for data in [
            r#"{"choices":[{"text":"a\nb"}]}"#,
            r#"{"choices":[],"usage":{"completion_tokens":3}}"#,
            r#"{"error":{"message":"x"}}"#,
            r#"{"choices":[{"text":"a"},{"text":"b"}]}"#,
            r#"{"choices":[{"text":"a","text":"b"}]}"#,
            r#"{"choices":[{"delta":{"reasoning_content":"hm"}}]}"#,
            r#"{"choices": [{"delta": "#,
            r#"{"choices":[{"text":"a"}]} x"#,
            r#"{"created":01,"choices":[]}"#,
        ] {
            let shape = if data.contains("delta") {
                Shape::Chat
            } else {
                Shape::Completions
            };
            assert!(
                decode(data, &mut Generated::new(&mut String::new()), shape).is_none(),
                "{data}"
            );
        }
    }

    /// JSON values of the kinds chunks hold, some of them not quite JSON.
    fn value() -> impl Strategy<Value = String> {
        let leaf = prop_oneof![
            Just("null".to_string()),
            Just("true".to_string()),
            Just("nul".to_string()),
            Just("-0.5e3".to_string()),
            Just("01".to_string()),
            Just("1.".to_string()),
            (0u64..2_000_000_000).prop_map(|n| n.to_string()),
            "[a-z \\\\\"\t]{0,6}".prop_map(|s| format!("\"{s}\"")),
            Just("\"\\u00e9\\n\"".to_string()),
            Just("\"\\x\"".to_string()),
        ];
        leaf.prop_recursive(3, 16, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..3)
                    .prop_map(|v| format!("[{}]", v.join(","))),
                prop::collection::vec(("[a-z_]{1,4}", inner), 0..3).prop_map(|v| {
                    let fields: Vec<String> =
                        v.into_iter().map(|(k, x)| format!("\"{k}\":{x}")).collect();
                    format!("{{{}}}", fields.join(","))
                }),
            ]
        })
    }

    /// Chunks near the real shapes: known keys with right and wrong values, unknown keys,
    /// duplicates, stray bytes.
    fn chunk() -> impl Strategy<Value = String> {
        let text = prop_oneof!["[a-z ]{0,5}".prop_map(|s| format!("\"{s}\"")), value(),];
        let choice_field = prop_oneof![
            text.clone().prop_map(|t| format!("\"text\":{t}")),
            text.clone()
                .prop_map(|t| format!("\"delta\":{{\"content\":{t}}}")),
            text.clone()
                .prop_map(|t| format!("\"delta\":{{\"role\":\"assistant\",\"content\":{t}}}")),
            value().prop_map(|v| format!("\"delta\":{v}")),
            prop_oneof![
                Just("null".to_string()),
                Just("\"length\"".to_string()),
                value()
            ]
            .prop_map(|f| format!("\"finish_reason\":{f}")),
            value().prop_map(|v| format!("\"logprobs\":{v}")),
            Just("\"index\":0".to_string()),
        ];
        let choice =
            prop::collection::vec(choice_field, 0..4).prop_map(|f| format!("{{{}}}", f.join(",")));
        let top_field = prop_oneof![
            prop::collection::vec(choice, 0..3)
                .prop_map(|c| format!("\"choices\":[{}]", c.join(","))),
            value().prop_map(|v| format!("\"choices\":{v}")),
            prop_oneof![Just("null".to_string()), value()].prop_map(|u| format!("\"usage\":{u}")),
            prop_oneof![Just("null".to_string()), value()].prop_map(|e| format!("\"error\":{e}")),
            value().prop_map(|v| format!("\"id\":{v}")),
        ];
        (
            prop::collection::vec(top_field, 0..5),
            prop_oneof![Just(""), Just(" "), Just("x"), Just("}")],
            any::<prop::sample::Index>(),
            any::<bool>(),
        )
            .prop_map(|(fields, tail, cut, truncate)| {
                let whole = format!("{{{}}}{tail}", fields.join(","));
                if truncate {
                    let mut at = cut.index(whole.len() + 1);
                    while !whole.is_char_boundary(at) {
                        at -= 1;
                    }
                    whole[..at].to_string()
                } else {
                    whole
                }
            })
    }

    proptest! {
        /// A word's lowest marked byte is its first byte that ends a string's run, and no
        /// byte is marked in a word without one (bytes drawn mostly from around the stops).
        #[test]
        fn prop_string_stops_marks_the_first_stop(bytes in prop::array::uniform8(prop_oneof![
            Just(b'"'), Just(b'\\'), 0u8..0x21, 0x5bu8..0x5e, 0x7eu8..=0xff, any::<u8>(),
        ])) {
            let first = bytes.iter().position(|&b| STRING_STOPS[b as usize]);
            let mask = string_stops(u64::from_le_bytes(bytes));
            let marked = (mask != 0).then(|| (mask.trailing_zeros() / 8) as usize);
            prop_assert_eq!(marked, first, "{:?}", bytes);
        }

        /// Whatever the fast path reads, it reads as serde does.
        #[test]
        fn prop_the_fast_path_agrees_with_serde(data in chunk(), chat in any::<bool>()) {
            let (shape, api) = if chat {
                (Shape::Chat, crate::api::Api::Chat)
            } else {
                (Shape::Completions, crate::api::Api::Completions)
            };
            let mut fast_text = String::new();
            if let Some(fast) = decode(&data, &mut Generated::new(&mut fast_text), shape) {
                let mut serde_text = String::new();
                let reference = match api {
                    crate::api::Api::Chat => crate::api::openai::decode_with_serde::<
                        crate::api::chat::ChatChoice,
                    >(&data, &mut Generated::new(&mut serde_text)),
                    _ => crate::api::openai::decode_with_serde::<
                        crate::api::completions::TextChoice,
                    >(&data, &mut Generated::new(&mut serde_text)),
                };
                prop_assert!(reference.is_ok(), "fast read {data:?}, serde refused: {reference:?}");
                let reference = reference.unwrap();
                prop_assert_eq!(fast_text, serde_text, "{}", data);
                prop_assert_eq!(fast.finish_reason, reference.finish_reason, "{}", data);
                prop_assert_eq!(reference.usage, None);
                prop_assert_eq!(reference.error, None);
            }
        }
    }
}
