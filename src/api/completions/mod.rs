//! OpenAI's completions API (`/v1/completions`): the prompt as `prompt`; the answer in each
//! choice's `text`.

use std::borrow::Cow;

use serde::Deserialize;

use super::openai::fast::Shape;
use super::openai::{self, Choice};
use super::{BodyOptions, DecodeError, Decoded, Dialect, Envelope, Generated, Part};
use crate::api::Prompt;

/// The completions dialect.
#[derive(Debug)]
pub struct Completions;

#[derive(Deserialize)]
pub(super) struct TextChoice<'a> {
    #[serde(borrow, default)]
    text: Option<Cow<'a, str>>,
    #[serde(default)]
    finish_reason: Option<String>,
}

impl Choice for TextChoice<'_> {
    fn generated(&self, out: &mut Generated) {
        if let Some(text) = &self.text {
            out.push(Part::Answer, text);
        }
    }

    fn finish_reason(&mut self) -> Option<String> {
        self.finish_reason.take()
    }
}

impl Dialect for Completions {
    fn name(&self) -> &'static str {
        "completions"
    }

    fn operation(&self) -> &'static str {
        "text_completion"
    }

    fn summary(&self) -> &'static str {
        "/v1/completions (the prompt as `prompt`)"
    }

    fn path(&self) -> &'static str {
        "/completions"
    }

    fn envelope(&self) -> &'static Envelope {
        &openai::ENVELOPE
    }

    fn body(&self, prompt: &Prompt, max_tokens: u32, options: &BodyOptions) -> Vec<u8> {
        // A conversation has no place in a completions body: its turns become one text.
        let text = prompt.joined();
        openai::body(options, max_tokens, ("prompt", text.into()))
    }

    fn decode_event(
        &self,
        name: Option<&str>,
        data: &str,
        out: &mut Generated,
    ) -> Result<Decoded, DecodeError> {
        openai::decode_event::<TextChoice>(name, data, out, Shape::Completions)
    }

    fn decode_body(&self, body: &str, out: &mut Generated) -> Result<Decoded, DecodeError> {
        openai::decode::<TextChoice>(body, out, Shape::Completions)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_prompt_goes_in_prompt_and_text_comes_back() {
        let options = BodyOptions {
            model: "m".into(),
            stream: false,
            continuous_usage: false,
            ignore_eos: false,
            extra: Default::default(),
        };
        let body: serde_json::Value =
            serde_json::from_slice(&Completions.body(&Prompt::Text("hi".into()), 8, &options))
                .unwrap();
        assert_eq!(body["prompt"], "hi");
        assert!(body.get("stream_options").is_none());
        let mut text = String::new();
        let decoded = Completions
            .decode_event(None, r#"{"choices":[{"text":" the","finish_reason":"length"}],"usage":{"prompt_tokens":5,"completion_tokens":4,"prompt_tokens_details":{"cached_tokens":2}}}"#, &mut Generated::new(&mut text))
            .unwrap();
        assert_eq!(text, " the");
        assert_eq!(
            decoded.usage,
            Some(super::super::Usage {
                prompt: Some(5),
                completion: Some(4),
                cached: Some(2),
                reasoning: None,
                invalid: None
            })
        );
    }
}
