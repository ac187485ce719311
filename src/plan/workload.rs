//! `workload`: what each request asks for (the tokenizer, input-length buckets, output lengths,
//! a dataset, shared prefixes, conversations, request options).

use std::time::Duration;

use super::data;

/// What each request asks for.
#[derive(Debug, Clone)]
pub struct Workload {
    /// Builds prompts of exact lengths, and counts tokens where the server sends no usage.
    pub tokenizer: TokenizerSpec,
    /// `tokenizer "auto"` (the default): the target model's own from the local Hugging Face
    /// cache, where the model is named by its id; resolved once the target is known.
    pub tokenizer_auto: bool,
    /// How `auto` chose (the model's own from the cache, or the built-in one and how to get the
    /// model's): a note for the run's reports.
    pub tokenizer_note: Option<String>,
    /// Input-length buckets, sampled by weight. A fixed length is one bucket.
    pub buckets: Vec<Bucket>,
    /// Output tokens asked for (`max_tokens`), unless a bucket says otherwise.
    pub output_tokens: u32,
    /// Ask the server for exactly the output length (`ignore_eos` and `min_tokens`).
    pub ignore_eos: bool,
    /// Output lengths drawn per request from a distribution, instead of `output_tokens`.
    pub output_spread: Option<OutputSpread>,
    /// A system message sent first in every chat.
    pub system: Option<String>,
    /// Shared prefixes: each request starts with one group's prefix (by weight).
    pub prefix: Vec<PrefixGroup>,
    /// Prompts taken from a dataset file instead of synthetic text.
    pub dataset: Option<data::Dataset>,
    /// Multi-turn conversations: each scheduled request starts one.
    pub conversation: Option<Conversation>,
    /// Inputs per request, for the embeddings and rerank APIs (documents, for rerank): each
    /// input as long as the request's drawn input length.
    pub batch: Option<Batch>,
    /// The query's length in tokens, for the rerank API.
    pub query_tokens: Option<u32>,
    /// Images each request carries (vision models).
    pub images: Option<super::Images>,
    /// An audio clip each request carries (audio models).
    pub audio: Option<super::Audio>,
    /// Images go out as URLs llmload serves on loopback, not inline.
    pub image_urls: Option<super::ImageUrls>,
}

impl Workload {
    /// Its prompts share text a server's prefix cache can hold: shared prefixes, a system
    /// message, conversations (each turn resends the history), or a dataset (whose entries
    /// may share blocks).
    pub fn shares_prompts(&self) -> bool {
        !self.prefix.is_empty()
            || self.system.is_some()
            || self.conversation.is_some()
            || self.dataset.is_some()
    }

    /// What makes requests carry images, as a message names it: the workload's `images`, or
    /// the image files its dataset's entries name.
    pub fn image_source(&self) -> Option<&'static str> {
        if self.images.is_some() {
            Some("the workload's `images`")
        } else if self
            .dataset
            .as_ref()
            .is_some_and(|d| d.media.entries_with_images > 0)
        {
            Some("the image files the dataset's entries name")
        } else {
            None
        }
    }

    /// What makes requests carry audio: the workload's `audio`, or its dataset's clips.
    pub fn audio_source(&self) -> Option<&'static str> {
        if self.audio.is_some() {
            Some("the workload's `audio`")
        } else if self
            .dataset
            .as_ref()
            .is_some_and(|d| d.media.entries_with_audio > 0)
        {
            Some("the audio files the dataset's entries name")
        } else {
            None
        }
    }
}

/// `batch 16`, or `batch min=1 max=32`: how many inputs a request of the embeddings or rerank
/// API carries, drawn uniformly in `min..=max` per request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Batch {
    /// The fewest.
    pub min: u32,
    /// The most (`min` for a fixed size).
    pub max: u32,
}

/// Multi-turn conversations: every turn sends the history so far (earlier user turns and the
/// assistant's actual answers) and a new user message, one turn at a time.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Conversation {
    /// Turns per conversation.
    pub turns: u32,
    /// The user's think time between an answer and the next turn (the least, with `think_max`).
    pub think: Duration,
    /// Think times drawn uniformly from `think..=think_max`.
    pub think_max: Option<Duration>,
    /// Agent loops: an answer that calls tools is followed by their results and another
    /// assistant turn, instead of the user's next message.
    pub tool_results: Option<ToolResults>,
}

/// `tool-result tokens=400 latency="300ms"`: how the tools of an agent loop answer. A turn whose
/// answer calls tools is followed, after the tools' latency, by one `tool` message per call (of
/// a drawn length) and the next assistant turn: the traffic of coding and research agents.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ToolResults {
    /// Tokens of each tool message (the least, with `tokens_max`).
    pub tokens: u32,
    /// Lengths drawn uniformly from `tokens..=tokens_max`.
    pub tokens_max: Option<u32>,
    /// How long the tools take to answer (the least, with `latency_max`).
    pub latency: Duration,
    /// Latencies drawn uniformly from `latency..=latency_max`.
    pub latency_max: Option<Duration>,
}

/// Output lengths drawn per request (as peers' `--random-output-len` with a range ratio, or a
/// normal distribution), always within `min..=max`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum OutputSpread {
    /// Every length in `min..=max` equally likely.
    Uniform {
        /// The shortest.
        min: u32,
        /// The longest.
        max: u32,
    },
    /// Normal around `mean`, cut to `min..=max`.
    Normal {
        /// Its mean.
        mean: f64,
        /// Its standard deviation.
        stddev: f64,
        /// The shortest.
        min: u32,
        /// The longest.
        max: u32,
    },
}

/// One shared prefix: requests of its group start with the same text of `tokens` tokens.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PrefixGroup {
    /// The prefix's length in tokens.
    pub tokens: u32,
    /// The group's share of requests, relative to the other groups'.
    pub weight: f64,
}

pub use crate::tokens::TokenizerSpec;

#[derive(Debug, Clone, PartialEq)]
/// One input length of the workload's mix.
pub struct Bucket {
    /// Prompt tokens.
    pub input_tokens: u32,
    /// Relative weight in the mix (> 0).
    pub weight: f64,
    /// Output length for requests of this bucket; the workload's `output` when absent.
    pub output_tokens: Option<u32>,
}
