//! Where a request's prompt comes from: the prompt-source seam.
//!
//! The schedule fixes, for every request, its input length and a prompt seed; a [`PromptSource`]
//! turns that into the prompt itself when the executor builds the request's body (ahead of the
//! pacer, on a blocking thread). Today's source is [`SyntheticPrompts`]: text of an exact token
//! length under the plan's tokenizer, different for every seed from its first word on. Dataset
//! files, shared prefixes and conversations plug in here beside it, as other sources. A source
//! only makes text; it never decides when a request is sent or how it is spoken (that is the
//! executor's API dialect).

use std::sync::Arc;

use super::ScheduledRequest;
use crate::tokens::Tokenizer;

/// A request's prompt, before an API dialect puts it into a body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Prompt {
    /// One piece of text: a completions prompt, or the one user message of a chat.
    Text(String),
    /// A chat conversation: system, user and assistant turns, in order.
    Messages(Vec<Message>),
}

/// One turn of a chat conversation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// `system`, `user` or `assistant`.
    pub role: String,
    /// What the turn says.
    pub content: String,
}

/// Makes the prompt of each scheduled request. Called once per request, off the I/O path, and
/// must be deterministic: the same request always gets the same prompt.
pub trait PromptSource: Send + Sync {
    /// The prompt of `request`.
    fn prompt(&self, request: &ScheduledRequest) -> Prompt;
}

/// Synthetic text of exactly the planned input length under the plan's tokenizer.
pub struct SyntheticPrompts {
    tokenizer: Arc<Tokenizer>,
}

impl SyntheticPrompts {
    /// Prompts built from `tokenizer`'s single-token words.
    pub fn new(tokenizer: Arc<Tokenizer>) -> SyntheticPrompts {
        SyntheticPrompts { tokenizer }
    }
}

impl PromptSource for SyntheticPrompts {
    fn prompt(&self, request: &ScheduledRequest) -> Prompt {
        Prompt::Text(
            self.tokenizer
                .prompt(request.input_tokens, request.prompt_seed),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn synthetic_prompts_have_the_planned_length_and_differ_by_seed() {
        let tokenizer = Arc::new(Tokenizer::builtin("cl100k_base").unwrap());
        let source = SyntheticPrompts::new(tokenizer.clone());
        let request = |prompt_seed| ScheduledRequest {
            seq: 0,
            intended_offset_us: None,
            input_tokens: 50,
            output_tokens: 8,
            prompt_seed,
        };
        let (Prompt::Text(a), Prompt::Text(b)) =
            (source.prompt(&request(1)), source.prompt(&request(2)))
        else {
            panic!("synthetic prompts are text");
        };
        assert_eq!(tokenizer.count(&a), 50);
        assert_ne!(a, b);
        assert_eq!(source.prompt(&request(1)), Prompt::Text(a));
    }
}
