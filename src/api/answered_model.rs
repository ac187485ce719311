//! The model an answer says it came from: the `model` field every dialect's answer carries
//! (OpenAI's chunks and bodies at the top, Anthropic's `message_start` in `message`, the
//! Responses API's `response.created` in `response`), read by one scan for every dialect.
//!
//! A gateway (LiteLLM, OpenRouter) or a hosted API resolving an alias (`gpt-4o` answered by
//! `gpt-4o-2024-08-06`) may answer with another model than the one asked: a report that names
//! only the asked one would say something the server did not.
//!
//! What this is not: a JSON parser. It walks the bytes once, keeping track of strings and
//! nesting, and takes the first `"model"` key at the top or one object below it as a string
//! value; a `model` key deeper (a tool call's arguments sent as an object) is not the answer's.
//! An event is scanned only until a model is found and only at the start of a stream (see the
//! executor), so a stream pays it on its first events, not per token.

/// The longest model name kept: a server's text must not size a record.
const MAX_MODEL_BYTES: usize = 200;

/// The `model` an event or body names, if it names one as a string at the top or one object
/// below it. An escaped name is unescaped; a name longer than [`MAX_MODEL_BYTES`] or over
/// several lines is not kept as sent (it is shortened to one line).
pub(crate) fn answered_model(data: &str) -> Option<String> {
    let bytes = data.as_bytes();
    let (mut depth, mut i) = (0usize, 0usize);
    while i < bytes.len() {
        match bytes[i] {
            b'{' | b'[' => depth += 1,
            b'}' | b']' => depth = depth.saturating_sub(1),
            b'"' => {
                let end = string_end(bytes, i)?;
                if depth <= 2 && &bytes[i..=end] == b"\"model\"" {
                    if let Some(model) = string_after_colon(data, end + 1) {
                        return Some(model);
                    }
                }
                i = end;
            }
            _ => {}
        }
        i += 1;
    }
    None
}

/// Where the string opened at `start` closes (its closing quote), if it does.
fn string_end(bytes: &[u8], start: usize) -> Option<usize> {
    let mut i = start + 1;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => i += 2,
            b'"' => return Some(i),
            _ => i += 1,
        }
    }
    None
}

/// The string value after a key that ends at `from` (`: "value"`), unescaped and kept short.
fn string_after_colon(data: &str, from: usize) -> Option<String> {
    let rest = data
        .get(from..)?
        .trim_start()
        .strip_prefix(':')?
        .trim_start();
    let offset = data.len() - rest.len();
    let end = string_end(data.as_bytes(), offset)?;
    let quoted = data.get(offset..=end)?;
    let value: String = if quoted.contains('\\') {
        serde_json::from_str(quoted).ok()?
    } else {
        quoted[1..quoted.len() - 1].to_string()
    };
    if value.is_empty() {
        return None;
    }
    let fits = value.len() <= MAX_MODEL_BYTES
        && matches!(
            crate::escape::one_line(&value),
            std::borrow::Cow::Borrowed(_)
        );
    Some(if fits {
        value
    } else {
        crate::error::shorten(&value)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each dialect's first event or body, shaped as its servers send it.
    #[test]
    fn every_dialect_names_its_model_where_its_servers_put_it() {
        let cases = [
            // vLLM's chat chunk.
            (
                r#"{"id":"chatcmpl-9","object":"chat.completion.chunk","created":1,"model":"meta-llama/Llama-3.1-8B-Instruct","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}"#,
                Some("meta-llama/Llama-3.1-8B-Instruct"),
            ),
            // Anthropic's message_start: the model one object down.
            (
                r#"{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[],"model":"claude-sonnet-4-5","stop_reason":null,"usage":{"input_tokens":4,"output_tokens":0}}}"#,
                Some("claude-sonnet-4-5"),
            ),
            // The Responses API's response.created.
            (
                r#"{"type":"response.created","sequence_number":0,"response":{"id":"resp_1","object":"response","created_at":1,"status":"in_progress","model":"gpt-4o-2024-08-06","output":[]}}"#,
                Some("gpt-4o-2024-08-06"),
            ),
            // OpenAI's embeddings: the model after the data; a Python server's spaces.
            (
                r#"{"object": "list", "data": [{"object": "embedding", "index": 0, "embedding": [0.1, -0.2]}], "model": "text-embedding-3-small", "usage": {"prompt_tokens": 3, "total_tokens": 3}}"#,
                Some("text-embedding-3-small"),
            ),
            // An escaped slash (PHP's and some gateways' encoders).
            (r#"{"model":"org\/name","choices":[]}"#, Some("org/name")),
            // Anthropic's deltas name none.
            (
                r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi"}}"#,
                None,
            ),
            // A tool call's arguments as an object: not the answer's model.
            (
                r#"{"type":"message","content":[{"type":"tool_use","id":"t","name":"pick","input":{"model":"not-this-one"}}]}"#,
                None,
            ),
            // The word inside an answer's text.
            (
                r#"{"choices":[{"delta":{"content":"the \"model\": \"x\" key"}}]}"#,
                None,
            ),
            // Not a string, empty, or cut off.
            (r#"{"model":null}"#, None),
            (r#"{"model":""}"#, None),
            (r#"{"model":"cut"#, None),
            ("[DONE]", None),
        ];
        for (data, want) in cases {
            assert_eq!(answered_model(data).as_deref(), want, "{data}");
        }
    }

    #[test]
    fn a_name_no_line_can_hold_is_kept_short_and_on_one_line() {
        let long = format!(r#"{{"model":"{}"}}"#, "m".repeat(10_000));
        let kept = answered_model(&long).unwrap();
        assert!(kept.len() <= MAX_MODEL_BYTES + 8, "{}", kept.len());
        let kept = answered_model(r#"{"model":"a\nb"}"#).unwrap();
        assert!(!kept.contains('\n'), "{kept:?}");
    }
}
