//! What a plan can ask of an API, and how a plan mistake says an API cannot: one table, so
//! that the target's check, a phase's own `api` and the workload's media are refused in the
//! same words, and a new capability is one variant the compiler walks every reader through.
//!
//! What this is not: where the checks are made (the plan's parser), or how a dialect does
//! what it can ([`super::Dialect`]).

use super::{Api, Capabilities};

/// One thing a plan can ask of an API: each is one of [`Capabilities`]' flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// Answers streamed as they are generated.
    Streaming,
    /// Usage on every streamed chunk.
    UsageInStream,
    /// An exact number of output tokens.
    ExactLengths,
    /// Tools offered, their calls carried.
    ToolCalls,
    /// Structured output (`response-format`).
    StructuredOutput,
    /// Images in a request.
    Images,
    /// Audio in a request.
    Audio,
}

impl Need {
    /// Every need, in the order diagnostics list them.
    pub const ALL: [Need; 7] = [
        Need::Streaming,
        Need::UsageInStream,
        Need::ExactLengths,
        Need::ToolCalls,
        Need::StructuredOutput,
        Need::Images,
        Need::Audio,
    ];

    /// Whether an API with `capabilities` gives it.
    pub fn given_by(self, capabilities: &Capabilities) -> bool {
        match self {
            Need::Streaming => capabilities.streaming,
            Need::UsageInStream => capabilities.usage_in_stream,
            Need::ExactLengths => capabilities.exact_lengths,
            Need::ToolCalls => capabilities.tool_calls,
            Need::StructuredOutput => capabilities.structured_output,
            Need::Images => capabilities.images,
            Need::Audio => capabilities.audio,
        }
    }

    /// What an API that cannot give it does not do, as a diagnostic says it after
    /// `api "NAME"`.
    pub fn lacking(self) -> &'static str {
        match self {
            Need::Streaming => "does not stream its answers",
            Need::UsageInStream => "does not send usage on every chunk",
            Need::ExactLengths => "cannot be asked for an exact number of output tokens",
            Need::ToolCalls => "cannot offer tools",
            Need::StructuredOutput => "cannot ask for structured output",
            Need::Images => "carries no images",
            Need::Audio => "carries no audio",
        }
    }

    /// The APIs that give it, quoted and listed for a help line: `"chat", "messages"`.
    pub fn givers(self) -> String {
        Api::ALL
            .into_iter()
            .filter(|api| self.given_by(&api.dialect().capabilities()))
            .map(|api| format!("\"{}\"", api.as_str()))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

impl Capabilities {
    /// Why an API with these capabilities cannot give `need`, if it cannot.
    pub fn lacks(&self, need: Need) -> Option<&'static str> {
        (!need.given_by(self)).then(|| need.lacking())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::ApiKind;

    /// Each need reads its own flag: an API lacking only it is refused for it alone.
    #[test]
    fn each_need_is_its_own_flag() {
        let every = Capabilities {
            kind: ApiKind::Generate,
            streaming: true,
            usage_in_stream: true,
            exact_lengths: true,
            tool_calls: true,
            structured_output: true,
            images: true,
            audio: true,
        };
        for need in Need::ALL {
            assert_eq!(every.lacks(need), None, "{need:?}");
            let mut without = every;
            match need {
                Need::Streaming => without.streaming = false,
                Need::UsageInStream => without.usage_in_stream = false,
                Need::ExactLengths => without.exact_lengths = false,
                Need::ToolCalls => without.tool_calls = false,
                Need::StructuredOutput => without.structured_output = false,
                Need::Images => without.images = false,
                Need::Audio => without.audio = false,
            }
            for other in Need::ALL {
                assert_eq!(
                    without.lacks(other),
                    (other == need).then(|| other.lacking()),
                    "{need:?} off, {other:?} asked"
                );
            }
        }
    }

    /// The dialects as they are: every one that generates streams; only OpenAI's chat and
    /// completions send usage per chunk; Anthropic's cannot ask for structured output;
    /// embeddings and rankings are answered whole.
    #[test]
    fn the_dialects_give_what_they_say() {
        for api in Api::ALL {
            let capabilities = api.dialect().capabilities();
            let generates = capabilities.kind == ApiKind::Generate;
            assert_eq!(capabilities.lacks(Need::Streaming).is_none(), generates);
            let openai = matches!(api, Api::Chat | Api::Completions);
            assert_eq!(capabilities.lacks(Need::UsageInStream).is_none(), openai);
            assert_eq!(
                capabilities.lacks(Need::StructuredOutput).is_none(),
                generates && api != Api::Messages
            );
        }
        assert!(Need::Streaming.givers().contains("\"chat\""));
        assert!(!Need::Streaming.givers().contains("\"embeddings\""));
    }
}
