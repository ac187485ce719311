//! Where a request's prompt comes from: the prompt-source seam.
//!
//! The schedule fixes, for every request, its input length and a prompt seed; a [`PromptSource`]
//! turns that into the prompt itself when the executor builds the request's body (ahead of the
//! pacer, on a blocking thread). Today's source is [`SyntheticPrompts`]: text of an exact token
//! length under the plan's tokenizer, different for every seed from its first word on. Dataset
//! files, shared prefixes and conversations plug in here beside it, as other sources. A source
//! only makes text; it never decides when a request is sent or how it is spoken (that is the
//! executor's API dialect).

use std::sync::{Arc, OnceLock};

use super::catalogue::Catalogue;
use super::{Origin, ScheduledRequest};
use crate::plan::data::{DataPrompt, Dataset, Trace};
use crate::tokens::Tokenizer;

pub use crate::api::{Message, Prompt, ToolCall};
use crate::records::TurnKind;

/// Makes the prompt of each scheduled request. Called once per request, off the I/O path, and
/// must be deterministic: the same request always gets the same prompt.
pub trait PromptSource: Send + Sync {
    /// The prompt of `request`.
    fn prompt(&self, request: &ScheduledRequest) -> Prompt;

    /// The new user message of `request`, a later turn of a conversation.
    fn user_message(&self, request: &ScheduledRequest) -> String;

    /// The tokenizer the prompts are measured with.
    fn tokenizer(&self) -> &Tokenizer;

    /// What media `request`'s prompt carries, for its record (without making them).
    fn media_of(&self, _request: &ScheduledRequest) -> MediaCarried {
        MediaCarried::default()
    }

    /// The next turn of a conversation: `answer` (the assistant's to the turn before) appended
    /// to `history`, then `request`'s new user message, or (for a tool turn) one tool result
    /// per call the answer made; `history` then is the prompt. Returns the turn's prompt
    /// tokens: `input_before` (the turn before's) plus what was appended.
    fn next_turn(
        &self,
        history: &mut Vec<Message>,
        answer: Answer,
        request: &ScheduledRequest,
        input_before: u32,
    ) -> (Prompt, u32) {
        append_turn(
            self.tokenizer(),
            history,
            answer,
            request,
            || self.user_message(request),
            input_before,
        )
    }
}

/// The media a request carries, as its record keeps them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MediaCarried {
    /// Each image's width and height.
    pub images: Vec<[u32; 2]>,
    /// Its audio, in milliseconds (all its clips).
    pub audio_ms: u32,
}

impl MediaCarried {
    fn of(attachments: &[crate::plan::Attachment]) -> MediaCarried {
        let mut carried = MediaCarried::default();
        for attachment in attachments {
            match attachment.kind {
                crate::plan::AttachmentKind::Image { width, height, .. } => {
                    carried.images.push([width, height])
                }
                crate::plan::AttachmentKind::Audio { millis } => {
                    carried.audio_ms = carried.audio_ms.saturating_add(millis)
                }
            }
        }
        carried
    }
}

/// What the assistant answered to a turn: what the next turn sends back.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Answer {
    /// The answer's text (its reasoning left out, as servers expect it back).
    pub text: String,
    /// The tools it called.
    pub tool_calls: Vec<ToolCall>,
}

/// A prompt as chat messages (text is one user message).
pub fn as_messages(prompt: Prompt) -> Vec<Message> {
    match prompt {
        Prompt::Text(content) => vec![Message::text("user", content)],
        Prompt::Messages(messages) => messages,
        batch @ Prompt::Batch { .. } => vec![Message::text("user", batch.joined())],
    }
}

/// Appends an answer and what follows it to a conversation, counting what they add: a tool
/// turn's results (synthetic text of the request's length, one per call), or `user_message`.
fn append_turn(
    tokenizer: &Tokenizer,
    history: &mut Vec<Message>,
    answer: Answer,
    request: &ScheduledRequest,
    user_message: impl FnOnce() -> String,
    input_before: u32,
) -> (Prompt, u32) {
    let tool_turn = request.turn_kind == Some(TurnKind::Tool) && !answer.tool_calls.is_empty();
    let mut added = tokenizer.count(&answer.text);
    let mut assistant = Message::text("assistant", answer.text);
    if tool_turn {
        let ids: Vec<String> = answer.tool_calls.iter().map(|c| c.id.clone()).collect();
        for call in &answer.tool_calls {
            added += tokenizer.count(&call.name) + tokenizer.count(&call.arguments);
        }
        assistant.tool_calls = answer.tool_calls;
        history.push(assistant);
        for (index, id) in ids.into_iter().enumerate() {
            // Each call's result differs from the others' from its first word on.
            let seed = crate::seed::mix64(request.prompt_seed ^ (index as u64 + 1));
            let result = tokenizer.prompt(request.input_tokens, seed);
            added += tokenizer.count(&result);
            let mut message = Message::text("tool", result);
            message.tool_call_id = Some(id);
            history.push(message);
        }
    } else {
        history.push(assistant);
        let message = user_message();
        added += tokenizer.count(&message);
        history.push(Message::text("user", message));
    }
    (
        Prompt::Messages(history.clone()),
        input_before.saturating_add(added as u32),
    )
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

    fn user_message(&self, request: &ScheduledRequest) -> String {
        self.tokenizer
            .prompt(request.input_tokens, request.prompt_seed)
    }

    fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }
}

/// The dataset, its catalogue, and each catalogue entry's prompt once cut to its length (by the
/// entry's position): cutting encodes the whole entry, which under a BPE `tokenizer.json` costs
/// about 1.2 µs per token (5 ms for a 4,096-token entry) on the client's core, so each entry is
/// cut once.
type DatasetSource = (Arc<Dataset>, Arc<Catalogue>, Vec<OnceLock<String>>);

/// The prompts a plan's workload describes: synthetic text, a dataset's entries, a trace's
/// shared blocks; each behind its shared prefix (if any) and after the system message (if any).
pub struct WorkloadPrompts {
    tokenizer: Arc<Tokenizer>,
    system: Option<String>,
    system_tokens: u32,
    /// Each prefix group's length, and its text once built (the same for every request of it).
    prefixes: Vec<(u32, OnceLock<String>)>,
    prefix_seed: u64,
    dataset: Option<DatasetSource>,
    /// The trace each phase replays, by phase index.
    traces: Vec<Option<Trace>>,
    trace_seed: u64,
    /// The rerank query's tokens.
    query_tokens: u32,
    /// The workload's images and audio, made per request.
    media: Option<Arc<super::media::MediaPlan>>,
}

impl WorkloadPrompts {
    /// The prompts of `plan`'s workload as `schedule` (compiled from it with `seed`) asks for them.
    pub fn new(
        tokenizer: Arc<Tokenizer>,
        plan: &crate::plan::Plan,
        schedule: &super::Schedule,
    ) -> WorkloadPrompts {
        let workload = &plan.workload;
        WorkloadPrompts {
            tokenizer: tokenizer.clone(),
            // Counted once, by the planner, which added it to every request's input.
            system_tokens: schedule.system_tokens(),
            system: workload.system.clone(),
            prefixes: workload
                .prefix
                .iter()
                .map(|group| (group.tokens, OnceLock::new()))
                .collect(),
            prefix_seed: crate::seed::derived(schedule.seed, 0x7072_6566),
            dataset: match (&workload.dataset, schedule.catalogue()) {
                (Some(dataset), Some(catalogue)) => {
                    let cuts = catalogue.entries.iter().map(|_| OnceLock::new()).collect();
                    Some((Arc::new(dataset.clone()), catalogue, cuts))
                }
                _ => None,
            },
            traces: plan
                .phases
                .iter()
                .map(|phase| match &phase.load {
                    crate::plan::Load::Trace(trace) => Some(trace.clone()),
                    crate::plan::Load::Concurrency(_)
                    | crate::plan::Load::Rate { .. }
                    | crate::plan::Load::AtOnce(_)
                    | crate::plan::Load::Sessions(_) => None,
                })
                .collect(),
            // Blocks are the trace's, not the run's: the same hash id is the same text in every
            // run of every plan replaying it, whatever the seed.
            trace_seed: 0x7472_6163_6562_6c6b,
            query_tokens: workload.query_tokens.unwrap_or(0),
            media: schedule.media(),
        }
    }

    /// A batch request's inputs (each different from its first word on), and its query: the
    /// planner made its input tokens `batch × (query + input)`.
    fn batch(&self, request: &ScheduledRequest) -> Prompt {
        let each = request.tokens_per_input(self.query_tokens);
        let query = (self.query_tokens > 0).then(|| {
            self.tokenizer.prompt(
                self.query_tokens,
                crate::seed::mix64(request.prompt_seed ^ 0x7175),
            )
        });
        let inputs = (0..request.batch.max(1))
            .map(|index| {
                let seed = crate::seed::mix64(request.prompt_seed ^ ((index as u64 + 1) << 20));
                self.tokenizer.prompt(each, seed)
            })
            .collect();
        Prompt::Batch { query, inputs }
    }

    fn prefix(&self, group: u32) -> Option<&str> {
        let (tokens, text) = self.prefixes.get(group as usize)?;
        Some(text.get_or_init(|| {
            let seed = crate::seed::mix64(self.prefix_seed ^ group as u64);
            self.tokenizer.prompt(*tokens, seed)
        }))
    }

    /// A trace row's prompt: its blocks (text shared by every row naming the same hash id), cut
    /// to its input length, then unique text for what its blocks do not cover.
    fn trace_prompt(&self, trace: &Trace, row: usize, request: &ScheduledRequest) -> String {
        let Some(row) = trace.rows.get(row) else {
            return self
                .tokenizer
                .prompt(request.input_tokens, request.prompt_seed);
        };
        let blocks = Blocks {
            hash_ids: &row.hash_ids,
            block_tokens: trace.block_tokens,
            seed_of: &|hash| crate::seed::mix64(self.trace_seed ^ hash),
        };
        block_text(
            &self.tokenizer,
            &blocks,
            row.input_tokens,
            request.prompt_seed,
        )
    }
}

/// A prompt's shared blocks: the text of each hash id comes from its seed alone, so every
/// prompt naming the id carries the same bytes for it.
pub struct Blocks<'a> {
    /// The blocks, in the prompt's order.
    pub hash_ids: &'a [u64],
    /// Tokens per block.
    pub block_tokens: u32,
    /// The seed of a block's text.
    pub seed_of: &'a dyn Fn(u64) -> u64,
}

/// A prompt of `input_tokens`: its blocks' text, the last cut where the input ends, then text
/// of its own (from `own_seed`) for what the blocks do not cover.
pub fn block_text(
    tokenizer: &Tokenizer,
    blocks: &Blocks,
    input_tokens: u32,
    own_seed: u64,
) -> String {
    let mut remaining = input_tokens;
    let mut text = String::new();
    for &hash in blocks.hash_ids {
        if remaining == 0 {
            break;
        }
        let tokens = remaining.min(blocks.block_tokens);
        // A block's first n tokens are the same text whatever n is (prompts grow by words), so
        // a prompt that ends inside a block still shares that block's start.
        text.push_str(&tokenizer.prompt(tokens, (blocks.seed_of)(hash)));
        remaining -= tokens;
    }
    if remaining > 0 {
        text.push_str(&tokenizer.prompt(remaining, own_seed));
    }
    text
}

impl WorkloadPrompts {
    /// The files a dataset entry names, when the request's prompt is one that names any: they
    /// go instead of the workload's synthetic media.
    fn entry_media(&self, request: &ScheduledRequest) -> Option<&[crate::plan::Attachment]> {
        let Origin::Dataset(at) = request.origin else {
            return None;
        };
        let (dataset, catalogue, _) = self.dataset.as_ref()?;
        let entry = catalogue.entries.get(at as usize)?;
        let data = dataset.entries.get(entry.source as usize)?;
        (!data.media.is_empty()).then_some(data.media.as_slice())
    }

    /// The request's own part: a dataset entry, a trace row's blocks, or synthetic text of its
    /// planned length less the system message and prefix.
    fn own(&self, request: &ScheduledRequest) -> DataPrompt {
        let prefix_tokens = request
            .prefix_group
            .and_then(|group| self.prefixes.get(group as usize))
            .map_or(0, |(tokens, _)| *tokens);
        let own_tokens = request
            .input_tokens
            .saturating_sub(self.system_tokens)
            .saturating_sub(prefix_tokens);
        let own = match request.origin {
            Origin::Dataset(at) => self
                .dataset
                .as_ref()
                .and_then(|(dataset, catalogue, cuts)| {
                    let entry = catalogue.entries.get(at as usize)?;
                    let data = dataset.entries.get(entry.source as usize)?;
                    Some(match (&data.prompt, entry.truncate_to) {
                        (DataPrompt::Text(text), Some(tokens)) => {
                            let cut = cuts.get(at as usize)?;
                            DataPrompt::Text(
                                cut.get_or_init(|| self.tokenizer.truncate(text, tokens))
                                    .clone(),
                            )
                        }
                        (prompt, _) => prompt.clone(),
                    })
                }),
            Origin::Trace { phase, row } => self
                .traces
                .get(phase as usize)
                .and_then(Option::as_ref)
                .map(|trace| DataPrompt::Text(self.trace_prompt(trace, row as usize, request))),
            Origin::Synthetic => None,
        };
        own.unwrap_or_else(|| {
            DataPrompt::Text(self.tokenizer.prompt(own_tokens, request.prompt_seed))
        })
    }
}

impl PromptSource for WorkloadPrompts {
    fn prompt(&self, request: &ScheduledRequest) -> Prompt {
        let prompt = self.text_prompt(request);
        let media = match (self.entry_media(request), &self.media) {
            (Some(files), _) => files.to_vec(),
            (None, Some(media)) if !request.media.is_empty() => {
                media.attachments(request.prompt_seed, request.media)
            }
            _ => return prompt,
        };
        // The media go with the user's last message (the only one, but in a dataset's
        // conversation): the turn the model answers.
        let mut messages = as_messages(prompt);
        if let Some(user) = messages.iter_mut().rev().find(|m| m.role == "user") {
            user.media = media;
        }
        Prompt::Messages(messages)
    }

    fn media_of(&self, request: &ScheduledRequest) -> MediaCarried {
        match (self.entry_media(request), &self.media) {
            (Some(files), _) => MediaCarried::of(files),
            (None, Some(media)) if !request.media.is_empty() => MediaCarried {
                images: media
                    .image_sizes(request.prompt_seed, request.media)
                    .iter()
                    .map(|size| [size.width, size.height])
                    .collect(),
                audio_ms: match (media.audio(), request.media.audio) {
                    (Some(audio), true) => audio.length.as_millis().min(u32::MAX as u128) as u32,
                    _ => 0,
                },
            },
            _ => MediaCarried::default(),
        }
    }

    fn user_message(&self, request: &ScheduledRequest) -> String {
        // A later turn says only its new message: a dataset entry's (its last user turn, for a
        // conversation), or synthetic text of its length.
        match self.own(request) {
            DataPrompt::Text(text) => text,
            DataPrompt::Messages(messages) => messages
                .into_iter()
                .rev()
                .find(|m| m.role == "user")
                .map(|m| m.content)
                .unwrap_or_default(),
        }
    }

    fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }
}

impl WorkloadPrompts {
    /// The prompt's text: a batch, text, or messages (with the system message and prefix).
    fn text_prompt(&self, request: &ScheduledRequest) -> Prompt {
        if request.batch > 0 {
            return self.batch(request);
        }
        let prefix = request.prefix_group.and_then(|group| self.prefix(group));
        let mut messages = match self.own(request) {
            DataPrompt::Text(text) if self.system.is_none() => {
                return Prompt::Text(match prefix {
                    Some(prefix) => format!("{prefix}{text}"),
                    None => text,
                });
            }
            DataPrompt::Text(text) => vec![Message::text("user", text)],
            DataPrompt::Messages(messages) => messages,
        };
        if let Some(prefix) = prefix {
            // The shared prefix opens the first user turn.
            if let Some(first) = messages.iter_mut().find(|m| m.role == "user") {
                first.content.insert_str(0, prefix);
            }
        }
        if let Some(system) = &self.system {
            messages.insert(0, Message::text("system", system.clone()));
        }
        Prompt::Messages(messages)
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
            prefix_group: None,
            origin: Default::default(),
            turn: None,
            conversation: None,
            turn_kind: None,
            batch: 0,
            media: Default::default(),
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
