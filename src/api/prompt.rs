//! What a dialect puts into a body: a request's prompt (text, a conversation's messages, or a
//! batch), the tool calls an answer made, and the images and audio a message carries. The plan
//! reads them from datasets and the planner makes them; they live here, with the dialects that
//! speak them, so that the wire formats depend on no stage of the pipeline.
//!
//! What this is not: where prompts come from (`planner::prompts`), or how a dialect writes
//! them (each dialect's `body`).

/// A request's prompt, before an API dialect puts it into a body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Prompt {
    /// One piece of text: a completions prompt, or the one user message of a chat.
    Text(String),
    /// A chat conversation: system, user and assistant turns, in order.
    Messages(Vec<Message>),
    /// A batch of texts: inputs to embed, or (with a query) documents to rank against it.
    Batch {
        /// The query the documents are ranked against (rerank).
        query: Option<String>,
        /// The inputs, or the documents.
        inputs: Vec<String>,
    },
}

impl Prompt {
    /// The prompt as one text (a batch's texts, and a conversation's turns, joined by lines):
    /// for an API that takes one text.
    pub fn joined(&self) -> String {
        match self {
            Prompt::Text(text) => text.clone(),
            Prompt::Messages(messages) => messages
                .iter()
                .map(|m| m.content.as_str())
                .collect::<Vec<_>>()
                .join("\n"),
            Prompt::Batch { query, inputs } => query
                .iter()
                .chain(inputs)
                .map(String::as_str)
                .collect::<Vec<_>>()
                .join("\n"),
        }
    }
}

/// One turn of a chat conversation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// `system`, `user`, `assistant` or `tool`.
    pub role: String,
    /// What the turn says.
    pub content: String,
    /// The tools an assistant's turn called (an agent loop's).
    pub tool_calls: Vec<ToolCall>,
    /// The call a `tool` message answers.
    pub tool_call_id: Option<String>,
    /// Images and audio the turn carries beside its text (a user's, in a multimodal workload).
    pub media: Vec<Attachment>,
}

impl Message {
    /// A message of plain text.
    pub fn text(role: &str, content: String) -> Message {
        Message {
            role: role.to_string(),
            content,
            tool_calls: Vec::new(),
            tool_call_id: None,
            media: Vec::new(),
        }
    }
}

/// A tool call an answer made, as the next turn sends it back.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ToolCall {
    /// The id the server gave it (a `tool` message names it).
    pub id: String,
    /// The function called.
    pub name: String,
    /// Its arguments, as streamed (JSON text).
    pub arguments: String,
}

/// Where a request's media go in its user message: before the text (as most vision
/// benchmarks put the image first) or after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MediaPosition {
    /// Before the text.
    #[default]
    Before,
    /// After the text.
    After,
}

/// An image or audio clip made for one request, ready for a dialect to put in its body: its
/// bytes in base64 (shared, so that a conversation's history or a re-sent body copies none),
/// or the URL it is served at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attachment {
    /// What it is.
    pub kind: AttachmentKind,
    /// The file's bytes, in standard base64 (empty once it is served at `url`).
    pub base64: std::sync::Arc<str>,
    /// The file's size, in bytes (before base64).
    pub bytes: u64,
    /// Where it goes in its message, against the text.
    pub position: MediaPosition,
    /// The dataset file it is (its number among the dataset's files), for one read from disk.
    pub file: Option<u32>,
    /// Where llmload serves it, when it is sent as a URL (`image-urls`).
    pub url: Option<std::sync::Arc<str>>,
}

/// What an attachment is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttachmentKind {
    /// An image.
    Image {
        /// `image/png` or `image/jpeg`.
        mime: &'static str,
        /// Pixels across.
        width: u32,
        /// Pixels down.
        height: u32,
    },
    /// A WAV clip.
    Audio {
        /// Its length, in milliseconds.
        millis: u32,
    },
}

impl Attachment {
    /// What an image part's URL says: where it is served, or a `data:` URL of its bytes.
    pub fn image_url(&self) -> String {
        match &self.url {
            Some(url) => url.to_string(),
            None => self.data_url(),
        }
    }

    /// A `data:` URL of it (`data:image/jpeg;base64,…`).
    pub fn data_url(&self) -> String {
        let mime = match self.kind {
            AttachmentKind::Image { mime, .. } => mime,
            AttachmentKind::Audio { .. } => "audio/wav",
        };
        format!("data:{mime};base64,{}", self.base64)
    }
}
