//! Every dialect read against a real server's bytes: the answers llama.cpp's server gave, each
//! API streamed and whole, captured by `tests/fixtures/wire/capture.sh`. The simulator's wire
//! tests (`crate::sim::wire`) read the same files with their own code, so that the client and
//! the simulator are each checked against the server, never only against each other.
//!
//! What this is not: the dialects' own tests of shapes a tiny model cannot be made to send
//! (reasoning, tool calls, errors), which sit beside each dialect.

use super::sse::SseParser;
use super::{Api, Decoded, Generated, ServerError, Usage};

/// What a client reads of one captured answer.
#[derive(Debug, Default)]
struct Read {
    text: String,
    finish_reason: Option<String>,
    usage: Usage,
    inputs: Option<u64>,
    ended: bool,
    error: Option<ServerError>,
}

impl Read {
    fn take(&mut self, decoded: Decoded) {
        if decoded.finish_reason.is_some() {
            self.finish_reason = decoded.finish_reason;
        }
        if let Some(usage) = decoded.usage {
            self.usage.merge(usage);
        }
        self.inputs = decoded.inputs.or(self.inputs);
        self.ended |= decoded.end;
        self.error = decoded.error.or(self.error.take());
    }
}

/// A captured file's text, by name.
fn captured(name: &str) -> &'static str {
    match name {
        "chat-stream.sse" => include_str!("../../tests/fixtures/wire/chat-stream.sse"),
        "chat.json" => include_str!("../../tests/fixtures/wire/chat.json"),
        "completions-stream.sse" => {
            include_str!("../../tests/fixtures/wire/completions-stream.sse")
        }
        "completions.json" => include_str!("../../tests/fixtures/wire/completions.json"),
        "responses-stream.sse" => include_str!("../../tests/fixtures/wire/responses-stream.sse"),
        "responses.json" => include_str!("../../tests/fixtures/wire/responses.json"),
        "messages-stream.sse" => include_str!("../../tests/fixtures/wire/messages-stream.sse"),
        "messages.json" => include_str!("../../tests/fixtures/wire/messages.json"),
        "embeddings.json" => include_str!("../../tests/fixtures/wire/embeddings.json"),
        "rerank.json" => include_str!("../../tests/fixtures/wire/rerank.json"),
        other => panic!("no captured file {other}"),
    }
}

/// Reads a captured stream as the executor does: SSE events, each decoded by the dialect.
fn read_stream(api: Api, bytes: &str) -> Read {
    let mut read = Read::default();
    let mut events = Vec::new();
    let mut parser = SseParser::new();
    parser
        .feed(bytes.as_bytes(), |event| events.push(event.to_owned()))
        .expect("captured lines fit");
    for event in events {
        let mut out = Generated::new(&mut read.text);
        let decoded = api
            .dialect()
            .decode_event(event.name.as_deref(), &event.data, &mut out)
            .unwrap_or_else(|e| panic!("{api:?}: {} does not decode: {}", event.data, e.0));
        read.take(decoded);
    }
    read
}

/// Reads a captured whole answer.
fn read_body(api: Api, body: &str) -> Read {
    let mut read = Read::default();
    let decoded = api
        .dialect()
        .decode_body(body, &mut Generated::new(&mut read.text))
        .unwrap_or_else(|e| panic!("{api:?}: the body does not decode: {}", e.0));
    read.take(decoded);
    read
}

/// One captured answer and what a client must read of it.
struct Case {
    api: Api,
    file: &'static str,
    text: &'static str,
    finish_reason: Option<&'static str>,
    /// Prompt, completion and cached tokens, as the usage said them (an embedding or a
    /// ranking generates none).
    usage: (Option<u64>, Option<u64>, Option<u64>),
    inputs: Option<u64>,
}

const ANSWER: &str = " MutableLiveData envisohn الأمريكية";
const COMPLETION: &str = " Billboard franchises Bà svob";

const CASES: &[Case] = &[
    Case {
        api: Api::Chat,
        file: "chat-stream.sse",
        text: ANSWER,
        finish_reason: Some("length"),
        usage: (Some(24), Some(4), Some(0)),
        inputs: None,
    },
    Case {
        api: Api::Chat,
        file: "chat.json",
        text: ANSWER,
        finish_reason: Some("length"),
        usage: (Some(24), Some(4), Some(23)),
        inputs: None,
    },
    // llama.cpp puts a completion's usage in its finishing chunk, not a chunk of its own.
    Case {
        api: Api::Completions,
        file: "completions-stream.sse",
        text: COMPLETION,
        finish_reason: Some("length"),
        usage: (Some(3), Some(4), Some(1)),
        inputs: None,
    },
    Case {
        api: Api::Completions,
        file: "completions.json",
        text: COMPLETION,
        finish_reason: Some("length"),
        usage: (Some(3), Some(4), Some(2)),
        inputs: None,
    },
    // llama.cpp says `completed` of an answer its `max_output_tokens` cut (OpenAI says
    // `incomplete`): a client can only read it as a stop.
    Case {
        api: Api::Responses,
        file: "responses-stream.sse",
        text: ANSWER,
        finish_reason: Some("stop"),
        usage: (Some(24), Some(4), Some(23)),
        inputs: None,
    },
    Case {
        api: Api::Responses,
        file: "responses.json",
        text: ANSWER,
        finish_reason: Some("stop"),
        usage: (Some(24), Some(4), Some(23)),
        inputs: None,
    },
    // Anthropic's `input_tokens` leaves out the cached prompt: the prompt is their sum.
    Case {
        api: Api::Messages,
        file: "messages-stream.sse",
        text: ANSWER,
        finish_reason: Some("length"),
        usage: (Some(24), Some(4), Some(23)),
        inputs: None,
    },
    Case {
        api: Api::Messages,
        file: "messages.json",
        text: ANSWER,
        finish_reason: Some("length"),
        usage: (Some(24), Some(4), Some(23)),
        inputs: None,
    },
    Case {
        api: Api::Embeddings,
        file: "embeddings.json",
        text: "",
        finish_reason: None,
        usage: (Some(4), Some(0), None),
        inputs: Some(2),
    },
    Case {
        api: Api::Rerank,
        file: "rerank.json",
        text: "",
        finish_reason: None,
        usage: (Some(7), Some(0), None),
        inputs: Some(2),
    },
];

#[test]
fn every_dialect_reads_what_llama_cpp_sent() {
    for case in CASES {
        let bytes = captured(case.file);
        let stream = case.file.ends_with(".sse");
        let read = if stream {
            read_stream(case.api, bytes)
        } else {
            read_body(case.api, bytes)
        };
        let file = case.file;
        assert_eq!(read.text, case.text, "{file}: the text");
        assert_eq!(
            read.finish_reason.as_deref(),
            case.finish_reason,
            "{file}: the finish"
        );
        let usage = (read.usage.prompt, read.usage.completion, read.usage.cached);
        assert_eq!(usage, case.usage, "{file}: prompt, completion, cached");
        assert_eq!(read.usage.invalid, None, "{file}");
        assert_eq!(read.inputs, case.inputs, "{file}: inputs");
        assert_eq!(read.error, None, "{file}");
        if stream {
            assert!(read.ended, "{file}: the stream's end is seen");
        }
    }
}

#[test]
fn every_api_has_its_stream_or_its_body_captured() {
    for api in Api::ALL {
        assert!(
            CASES.iter().any(|case| case.api == api),
            "{api:?} has no captured answer"
        );
        let streams = !api.dialect().capabilities().kind.answers_batches();
        let has_stream = CASES
            .iter()
            .any(|case| case.api == api && case.file.ends_with(".sse"));
        assert_eq!(
            streams, has_stream,
            "{api:?}: a stream is captured iff it streams"
        );
    }
}
