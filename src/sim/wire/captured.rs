//! The simulator's answers held against a real server's: llama.cpp's answers in
//! `tests/fixtures/wire/` (captured by its `capture.sh`; the client's dialect tests read the
//! same files, with their own code). For each API, the simulator answers the request that was
//! captured, and every event the server sent must have its like among the simulator's, in the
//! same order, with every field the server's has (values aside: the words are a random
//! model's). What the simulator leaves out on purpose is listed, with why.
//!
//! Read with this file's own SSE splitter and JSON shapes: nothing here comes from the client.

use serde_json::Value;

use super::{whole, Counts, Encoder, Finish, Frame, Whole, Wire};
use crate::sim::stream::SimRequest;
use crate::tokens::Tokenizer;

/// Fields of llama.cpp's answers the simulator leaves out, and why.
const LEFT_OUT: &[(&str, &str)] = &[
    // llama.cpp's own timing report, which no other server sends and no client needs.
    ("timings", "llama.cpp's own"),
];

fn left_out(field: &str) -> bool {
    LEFT_OUT.iter().any(|(name, _)| *name == field)
}

/// The events of an SSE body: each one's name and data (`[DONE]` as a JSON string).
fn events(body: &str) -> Vec<(Option<String>, Value)> {
    let mut out = Vec::new();
    for block in body.split("\n\n").filter(|b| !b.trim().is_empty()) {
        let (mut name, mut data) = (None, None);
        for line in block.lines() {
            if let Some(rest) = line.strip_prefix("event: ") {
                name = Some(rest.to_string());
            } else if let Some(rest) = line.strip_prefix("data: ") {
                data = Some(match rest {
                    "[DONE]" => Value::String(rest.into()),
                    json => serde_json::from_str(json)
                        .unwrap_or_else(|e| panic!("not JSON ({e}): {json}")),
                });
            }
        }
        if let Some(data) = data {
            out.push((name, data));
        }
    }
    out
}

/// What an event is, for lining the two streams up: its name, with the kind of block or
/// delta it carries; an unnamed (OpenAI) chunk by what it carries.
fn kind(name: Option<&str>, data: &Value) -> String {
    let Some(name) = name else {
        let choice = &data["choices"][0];
        return match () {
            _ if data == "[DONE]" => "done",
            _ if data["choices"].as_array().is_some_and(Vec::is_empty) => "usage",
            _ if !choice["finish_reason"].is_null() => "finish",
            _ if choice["delta"].get("role").is_some() => "role",
            _ => "token",
        }
        .into();
    };
    match name {
        // llama.cpp says `completed` of an answer its cap cut; OpenAI (and the simulator),
        // `incomplete`: either ends the response.
        "response.completed" | "response.incomplete" => "response.end".into(),
        "content_block_start" => format!("{name}/{}", type_of(&data["content_block"])),
        "content_block_delta" => format!("{name}/{}", type_of(&data["delta"])),
        "response.output_item.added" | "response.output_item.done" => {
            format!("{name}/{}", type_of(&data["item"]))
        }
        _ => name.into(),
    }
}

fn type_of(value: &Value) -> &str {
    value["type"].as_str().unwrap_or("")
}

/// Where `ours` lacks a field `theirs` has (or has it as another kind of value), by path.
fn missing(theirs: &Value, ours: &Value, path: &str, out: &mut Vec<String>) {
    match (theirs, ours) {
        (Value::Object(theirs), Value::Object(ours)) => {
            for (key, value) in theirs {
                if left_out(key) {
                    continue;
                }
                match ours.get(key) {
                    Some(mine) => missing(value, mine, &format!("{path}/{key}"), out),
                    None => out.push(format!("{path}/{key}")),
                }
            }
        }
        (Value::Array(theirs), Value::Array(ours)) => {
            if let Some(first) = theirs.first() {
                match ours.first() {
                    Some(mine) => missing(first, mine, &format!("{path}/0"), out),
                    None => out.push(format!("{path}/0")),
                }
            }
        }
        // A null on either side is a value not known yet (a finish reason mid-stream).
        (Value::Null, _) | (_, Value::Null) => {}
        (Value::String(_), Value::String(_))
        | (Value::Number(_), Value::Number(_))
        | (Value::Bool(_), Value::Bool(_)) => {}
        _ => out.push(format!("{path} (a {theirs} where ours is {ours})")),
    }
}

/// The request that was captured, as the simulator reads it (with a prefix cache, as
/// llama.cpp has one).
fn request(wire: Wire, body: &str) -> SimRequest {
    let tokenizer = Tokenizer::builtin("cl100k_base").unwrap();
    SimRequest::parse(body.as_bytes(), wire, &tokenizer, Some(16)).unwrap()
}

/// The simulator's stream of `pieces` of text, as bytes and back to events.
fn stream(request: &SimRequest, pieces: &[String]) -> Vec<(Option<String>, Value)> {
    let mut encoder = Encoder::new(request, "sim-1").unwrap();
    let mut frames: Vec<Frame> = encoder.start();
    for piece in pieces {
        frames.extend(encoder.text(piece));
    }
    let counts = Counts {
        completion: pieces.len(),
        reasoning: None,
    };
    frames.extend(encoder.finish(Finish::Length, counts));
    let bytes: String = frames.iter().map(Frame::to_sse).collect();
    events(&bytes)
}

/// The words the server streamed (each event's delta), for the simulator to stream alike.
fn pieces(events: &[(Option<String>, Value)]) -> Vec<String> {
    let piece = |data: &Value| {
        let choice = &data["choices"][0];
        [
            &choice["delta"]["content"],
            &choice["text"],
            &data["delta"]["text"],
            &data["delta"],
        ]
        .into_iter()
        .find_map(|v| v.as_str().filter(|s| !s.is_empty()).map(str::to_string))
    };
    events
        .iter()
        .filter(|(name, data)| {
            matches!(
                kind(name.as_deref(), data).as_str(),
                "token" | "response.output_text.delta" | "content_block_delta/text_delta"
            )
        })
        .filter_map(|(_, data)| piece(data))
        .collect()
}

/// Every way `ours` falls short of `theirs`: an event missing or out of order (each of the
/// server's events is met by one of ours, in order), or an event without a field the server's
/// has.
fn shortfalls(theirs: &[(Option<String>, Value)], ours: &[(Option<String>, Value)]) -> Vec<String> {
    let mut out = Vec::new();
    let our_kinds: Vec<String> = ours.iter().map(|(n, d)| kind(n.as_deref(), d)).collect();
    let mut at = 0;
    for (name, data) in theirs {
        let wanted = kind(name.as_deref(), data);
        match our_kinds[at..].iter().position(|k| *k == wanted) {
            Some(offset) => {
                missing(data, &ours[at + offset].1, &wanted, &mut out);
                at += offset + 1;
            }
            None => out.push(format!("no {wanted} event where the server sent one")),
        }
    }
    out
}

const CHAT: &str =
    r#"{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":4,"ignore_eos":true"#;

/// Each API's captured stream, and the request that asked for it (capture.sh's).
const STREAMS: &[(Wire, &str, &str)] = &[
    (
        Wire::Chat,
        include_str!("../../../tests/fixtures/wire/chat-stream.sse"),
        r#","stream":true,"stream_options":{"include_usage":true}}"#,
    ),
    (
        Wire::Completions,
        include_str!("../../../tests/fixtures/wire/completions-stream.sse"),
        r#"{"model":"m","prompt":"hi there","max_tokens":4,"ignore_eos":true,"stream":true,"stream_options":{"include_usage":true}}"#,
    ),
    (
        Wire::Responses,
        include_str!("../../../tests/fixtures/wire/responses-stream.sse"),
        r#"{"model":"m","input":"hi","max_output_tokens":4,"stream":true}"#,
    ),
    (
        Wire::Messages,
        include_str!("../../../tests/fixtures/wire/messages-stream.sse"),
        r#"{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":4,"stream":true}"#,
    ),
];

/// Each API's captured whole answer, and the request that asked for it.
const WHOLES: &[(Wire, &str, &str)] = &[
    (
        Wire::Chat,
        include_str!("../../../tests/fixtures/wire/chat.json"),
        "}",
    ),
    (
        Wire::Completions,
        include_str!("../../../tests/fixtures/wire/completions.json"),
        r#"{"model":"m","prompt":"hi there","max_tokens":4,"ignore_eos":true}"#,
    ),
    (
        Wire::Responses,
        include_str!("../../../tests/fixtures/wire/responses.json"),
        r#"{"model":"m","input":"hi","max_output_tokens":4}"#,
    ),
    (
        Wire::Messages,
        include_str!("../../../tests/fixtures/wire/messages.json"),
        r#"{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":4}"#,
    ),
    (
        Wire::Embeddings,
        include_str!("../../../tests/fixtures/wire/embeddings.json"),
        r#"{"model":"m","input":["hi","there"]}"#,
    ),
    (
        Wire::Rerank,
        include_str!("../../../tests/fixtures/wire/rerank.json"),
        r#"{"model":"m","query":"hi","documents":["a","b c"]}"#,
    ),
];

/// A request's body: chat's captured bodies share their start.
fn body(wire: Wire, asked: &str) -> String {
    match wire {
        Wire::Chat => format!("{}{asked}", CHAT.trim_end_matches('}')),
        Wire::Completions | Wire::Responses | Wire::Messages | Wire::Embeddings | Wire::Rerank => {
            asked.to_string()
        }
    }
}

#[test]
fn every_stream_has_what_llama_cpp_streams() {
    for (wire, captured, asked) in STREAMS {
        let theirs = events(captured);
        let pieces = pieces(&theirs);
        assert_eq!(pieces.len(), 4, "{wire:?}: the captured stream's 4 tokens");
        let request = request(*wire, &body(*wire, asked));
        let ours = stream(&request, &pieces);
        let short = shortfalls(&theirs, &ours);
        assert!(
            short.is_empty(),
            "{wire:?} falls short of llama.cpp: {short:#?}"
        );
    }
}

#[test]
fn every_whole_answer_has_what_llama_cpp_answers() {
    for (wire, captured, asked) in WHOLES {
        let theirs: Value = serde_json::from_str(captured).unwrap();
        let request = request(*wire, &body(*wire, asked));
        let answer = Whole {
            text: " a b c",
            thought: None,
            counts: Counts {
                completion: 4,
                reasoning: None,
            },
        };
        let ours = whole(&request, "sim-1", answer, 7);
        let mut short = Vec::new();
        missing(&theirs, &ours, "", &mut short);
        assert!(
            short.is_empty(),
            "{wire:?} falls short of llama.cpp: {short:#?}"
        );
    }
}

#[test]
fn a_stream_that_lacks_a_field_or_an_event_falls_short() {
    let theirs = events(STREAMS[0].1);
    let request = request(Wire::Chat, &body(Wire::Chat, STREAMS[0].2));
    let mut ours = stream(&request, &pieces(&theirs));
    assert!(shortfalls(&theirs, &ours).is_empty());
    ours[1].1["choices"][0]["delta"]
        .as_object_mut()
        .unwrap()
        .remove("content");
    assert_eq!(
        shortfalls(&theirs, &ours),
        ["token/choices/0/delta/content"],
        "a token without its content"
    );
    ours.retain(|(_, data)| kind(None, data) != "usage");
    assert!(shortfalls(&theirs, &ours).contains(&"no usage event where the server sent one".into()));
}
