//! What every session format's importer shares: reading one JSON document with the path of the
//! field a mistake is in, token counts and times checked the same way, and blocks minted for
//! formats that record how much of a prompt was shared rather than which blocks.
//!
//! What this is not: any one format's fields (each has its file beside this one).

use std::time::Duration;

use serde::de::DeserializeOwned;

use super::{Call, Session};

use crate::plan::limits::MAX_TOKENS;

/// A mistake in one document: its line within the document, the field.
pub(super) struct DocumentError {
    pub line: usize,
    pub field: Option<String>,
    pub message: String,
}

/// `text` as a `T`, or the mistake with the path of its field (`turns[2].llm_calls[0].tokens`).
pub(super) fn parse<T: DeserializeOwned>(text: &str) -> Result<T, DocumentError> {
    let mut deserializer = serde_json::Deserializer::from_str(text);
    serde_path_to_error::deserialize(&mut deserializer).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        DocumentError {
            line: inner.line().max(1),
            field: (path != ".").then_some(path),
            message: without_position(&inner),
        }
    })
}

/// serde_json's message without its " at line L column C" (the diagnostic says where).
fn without_position(error: &serde_json::Error) -> String {
    let text = error.to_string();
    match text.rfind(" at line ") {
        Some(at) => text[..at].to_string(),
        None => text,
    }
}

/// A mistake in `field`, on the document's first line.
pub(super) fn field_error(field: &str, message: &str) -> DocumentError {
    DocumentError {
        line: 1,
        field: Some(field.to_string()),
        message: message.to_string(),
    }
}

/// A call's prompt tokens: at least one, at most the plan's bound.
pub(super) fn prompt_tokens(value: u64, field: &str) -> Result<u32, DocumentError> {
    if value == 0 || value > MAX_TOKENS {
        return Err(field_error(
            field,
            &format!("{value} prompt tokens is out of range (1 to {MAX_TOKENS})"),
        ));
    }
    Ok(value as u32)
}

/// A call's output tokens: at most the plan's bound; none recorded asks for one.
pub(super) fn output_tokens(value: u64, field: &str) -> Result<u32, DocumentError> {
    if value > MAX_TOKENS {
        return Err(field_error(
            field,
            &format!("{value} output tokens is more than {MAX_TOKENS}"),
        ));
    }
    Ok(value.max(1) as u32)
}

/// An ISO-8601 time (`2026-06-01T05:40:20.151Z`, an offset, or none: UTC) as seconds since the
/// Unix epoch.
pub(super) fn timestamp(text: &str, field: &str) -> Result<f64, DocumentError> {
    let micros = chrono::DateTime::parse_from_rfc3339(text)
        .map(|at| at.timestamp_micros())
        .or_else(|_| {
            ["%Y-%m-%dT%H:%M:%S%.f", "%Y-%m-%d %H:%M:%S%.f"]
                .iter()
                .find_map(|format| chrono::NaiveDateTime::parse_from_str(text, format).ok())
                .map(|at| at.and_utc().timestamp_micros())
                .ok_or(())
        })
        .map_err(|()| {
            field_error(
                field,
                &format!("`{text}` is not an ISO-8601 time (2026-06-01T05:40:20.151Z)"),
            )
        })?;
    Ok(micros as f64 / 1e6)
}

/// Blocks for a format that records how much of each prompt its agent's previous one shared
/// (a cached or prefix length), not block ids: a call keeps the previous call's blocks its
/// shared prefix covers whole, and new ids for the rest. A context that shrank (an agent that
/// compacted it) keeps only what it shares, as the engine's cache would.
struct PrefixChain {
    block_tokens: u32,
    blocks: Vec<u64>,
    next: u64,
}

/// Tokens a block, where a format names none (TraceLab, Copilot, OpenTelemetry spans).
pub(super) const PREFIX_BLOCK_TOKENS: u32 = 64;

impl PrefixChain {
    fn new(block_tokens: u32) -> PrefixChain {
        PrefixChain {
            block_tokens: block_tokens.max(1),
            blocks: Vec::new(),
            next: 1,
        }
    }

    /// The blocks of a call of `input` tokens whose first `shared` are its previous call's.
    fn call(&mut self, shared: u32, input: u32) -> Vec<u64> {
        let kept = ((shared.min(input) / self.block_tokens) as usize).min(self.blocks.len());
        self.blocks.truncate(kept);
        let needed = input.div_ceil(self.block_tokens) as usize;
        while self.blocks.len() < needed {
            self.blocks.push(self.next);
            self.next += 1;
        }
        self.blocks.clone()
    }
}

/// One call of a chain, as a format that records one agent's calls in order says it.
pub(super) struct Link {
    /// Seconds after the answer before it (after the session's start, for the first).
    pub wait_s: f64,
    pub input_tokens: u32,
    /// Its first tokens that were the call before's (a prefix or cached length).
    pub shared: u32,
    pub output_tokens: u32,
    pub tool_use: bool,
}

/// A session of one agent's chain of calls (TraceLab's rounds, Copilot's calls), each after the
/// one before, its blocks minted from the shared lengths.
pub(super) fn chain(id: String, ordinal: u64, links: Vec<Link>) -> Session {
    let mut blocks = PrefixChain::new(PREFIX_BLOCK_TOKENS);
    let calls = links
        .into_iter()
        .enumerate()
        .map(|(index, link)| Call {
            after: index.checked_sub(1).map(|p| p as u32).into_iter().collect(),
            wait: Duration::from_secs_f64(link.wait_s.max(0.0)),
            input_tokens: link.input_tokens,
            output_tokens: link.output_tokens,
            hash_ids: blocks.call(link.shared, link.input_tokens),
            agent: 0,
            tool_use: link.tool_use,
            text: None,
            continues: None,
        })
        .collect();
    Session {
        id,
        ordinal,
        block_tokens: PREFIX_BLOCK_TOKENS,
        first: 0,
        calls,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shared_prefix_keeps_the_blocks_it_covers_whole() {
        let mut chain = PrefixChain::new(10);
        assert_eq!(chain.call(0, 25), vec![1, 2, 3]);
        // 22 tokens shared: blocks 1 and 2 whole; the third (cut at 25 before) is new.
        assert_eq!(chain.call(22, 40), vec![1, 2, 4, 5]);
        // Compacted: 12 shared of a shorter prompt keeps block 1 only.
        assert_eq!(chain.call(12, 18), vec![1, 6]);
    }

    #[test]
    fn times_are_read_with_or_without_their_zone() {
        let zulu = timestamp("2026-06-01T05:40:20.151Z", "t").ok();
        let naive = timestamp("2026-06-01T05:40:20.151", "t").ok();
        let offset = timestamp("2026-06-01T07:40:20.151+02:00", "t").ok();
        assert!(zulu.is_some());
        assert_eq!(zulu, naive);
        assert_eq!(zulu, offset);
        let bad = timestamp("yesterday", "turns[0].timestamp")
            .err()
            .map(|e| e.field);
        assert_eq!(bad, Some(Some("turns[0].timestamp".to_string())));
    }
}
