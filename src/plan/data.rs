//! Data files a plan reads: prompt datasets (JSONL, ShareGPT) and arrival traces (Mooncake).
//!
//! Read and checked while the plan is parsed, so that a missing file, a malformed line or a
//! file with nothing usable in it is a diagnostic pointing into that file before anything is
//! sent. This module only reads and validates: it does not count tokens (the planner does, under
//! the plan's tokenizer) and it never touches the network (a path on disk, relative to the plan).

use std::sync::Arc;

use serde_json::Value;

pub use crate::api::{Message, ToolCall};

/// The largest data file a plan may read (it is held in memory while the run goes).
pub const MAX_DATA_BYTES: u64 = 1 << 30;

/// How a dataset file is laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DatasetFormat {
    /// One JSON object per line, the prompt in a field (text, or chat messages).
    Jsonl,
    /// ShareGPT's JSON: a list of `{"conversations": [{"from": "human", "value": ...}, ...]}`.
    ShareGpt,
}

impl DatasetFormat {
    /// The name a plan writes.
    pub fn name(self) -> &'static str {
        match self {
            DatasetFormat::Jsonl => "jsonl",
            DatasetFormat::ShareGpt => "sharegpt",
        }
    }
}

/// In what order requests take the dataset's entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DatasetOrder {
    /// The file's order, from the first usable entry, continuing across phases.
    Sequential,
    /// One order shuffled with the run's seed, walked like `Sequential`.
    Shuffle,
    /// Each request draws an entry at random (with replacement), from its own seed.
    Random,
}

impl DatasetOrder {
    /// The name a plan writes.
    pub fn name(self) -> &'static str {
        match self {
            DatasetOrder::Sequential => "sequential",
            DatasetOrder::Shuffle => "shuffle",
            DatasetOrder::Random => "random",
        }
    }
}

/// A prompt as the dataset holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DataPrompt {
    /// Text: a completions prompt, or a chat's one user message.
    Text(String),
    /// Chat messages, in order.
    Messages(Vec<Message>),
}

/// One usable entry of a dataset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataEntry {
    /// Its line in the file (JSONL), or its position in the list (ShareGPT), from 1.
    pub line: usize,
    /// What is sent.
    pub prompt: DataPrompt,
    /// The dataset's own answer, when it has one.
    pub answer: Option<String>,
    /// The image and audio files the entry names, as written.
    pub media_files: Vec<MediaFile>,
    /// Those files, read and checked when the plan was (empty until then, and when the plan
    /// was read without its files).
    pub media: Vec<super::Attachment>,
}

impl DataEntry {
    /// An entry of text or messages, naming no media.
    pub fn new(line: usize, prompt: DataPrompt, answer: Option<String>) -> DataEntry {
        DataEntry {
            line,
            prompt,
            answer,
            media_files: Vec::new(),
            media: Vec::new(),
        }
    }
}

/// An image or audio file a dataset entry names (`"images": ["photos/cat.jpg"]`,
/// `"image": "cat.jpg"`, `"audio": "clips/q.wav"`), relative to the dataset's folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MediaFile {
    /// The path as the entry writes it.
    pub path: String,
    /// An audio clip (else an image).
    pub audio: bool,
    /// Where the entry names it in the dataset file (bytes), for a diagnostic.
    pub span: (usize, usize),
}

/// A dataset read from disk.
#[derive(Debug, Clone, PartialEq)]
pub struct Dataset {
    /// The path as the plan wrote it.
    pub shown: String,
    /// How it is laid out.
    pub format: DatasetFormat,
    /// The JSONL field holding the prompt.
    pub field: String,
    /// The JSONL field holding the answer.
    pub answer_field: String,
    /// In what order requests take entries.
    pub order: DatasetOrder,
    /// Entries shorter than this (prompt tokens) are skipped.
    pub min_input: Option<u32>,
    /// Entries longer than this are skipped, or cut to it with `truncate`.
    pub max_input: Option<u32>,
    /// Cut prompts longer than `max_input` instead of skipping them.
    pub truncate: bool,
    /// Ask for as many output tokens as the dataset's answer has.
    pub output_from_answer: bool,
    /// The file's entries (empty when the plan was read without its files, to judge a kept run).
    pub entries: Arc<Vec<DataEntry>>,
    /// Entries the file holds that have no prompt (skipped).
    pub skipped: usize,
    /// The file's SHA-256, kept in the run's header.
    pub sha256: String,
    /// The image and audio files its entries name, as read.
    pub media: DatasetMedia,
}

/// What a dataset's entries carry besides text: counted when its files are read.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct DatasetMedia {
    /// Entries naming at least one image.
    pub entries_with_images: usize,
    /// Entries naming an audio clip.
    pub entries_with_audio: usize,
    /// Distinct files read.
    pub files: usize,
    /// Their bytes, in all (each file once, however many entries name it).
    pub bytes: u64,
}

/// One row of an arrival trace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceRow {
    /// When it arrives, in ms from the trace's start.
    pub at_ms: u64,
    /// Prompt tokens.
    pub input_tokens: u32,
    /// Output tokens.
    pub output_tokens: u32,
    /// The prompt's blocks: rows naming one block share its tokens.
    pub hash_ids: Vec<u64>,
}

/// A mistake in a data file: where, and what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataError {
    /// Byte range in the file.
    pub span: (usize, usize),
    /// What is wrong.
    pub message: String,
    /// The label under the caret.
    pub label: String,
    /// What to do about it.
    pub help: String,
}

fn line_spans(text: &str) -> impl Iterator<Item = (usize, usize, &str)> {
    let mut start = 0;
    text.split_inclusive('\n').enumerate().map(move |(i, raw)| {
        let line = raw.trim_end_matches(['\n', '\r']);
        let at = start;
        start += raw.len();
        (i + 1, at, line)
    })
}

/// The non-blank lines of a JSONL file: their number (from 1), their span, and their JSON (or
/// the mistake, with `help`).
pub(super) fn json_lines<'a>(
    text: &'a str,
    help: &'a str,
) -> impl Iterator<Item = (usize, (usize, usize), Result<Value, DataError>)> + 'a {
    line_spans(text)
        .filter(|(_, _, line)| !line.trim().is_empty())
        .map(move |(number, at, line)| {
            let span = (at, line.len().max(1));
            let value = serde_json::from_str::<Value>(line).map_err(|e| {
                error_at(
                    span,
                    format!("line {number} is not JSON: {e}"),
                    "not JSON",
                    help,
                )
            });
            (number, span, value)
        })
}

pub(super) fn error_at(
    span: (usize, usize),
    message: String,
    label: &str,
    help: impl Into<String>,
) -> DataError {
    DataError {
        span,
        message,
        label: label.into(),
        help: help.into(),
    }
}

fn messages(value: &Value) -> Option<Vec<Message>> {
    let list = value.as_array()?;
    list.iter()
        .map(|m| {
            let role = m.get("role")?.as_str()?.to_string();
            let content = match m.get("content")? {
                Value::String(text) => text.clone(),
                // Content parts: the text ones, joined.
                Value::Array(parts) => parts
                    .iter()
                    .filter_map(|p| p.get("text").and_then(Value::as_str))
                    .collect::<Vec<_>>()
                    .join("\n"),
                _ => return None,
            };
            Some(Message::text(&role, content))
        })
        .collect()
}

/// Reads a JSONL dataset: the prompt in `field` (text, or a list of chat messages whose last
/// assistant turn, if it ends the list, is the answer), the answer in `answer_field`.
/// Returns the usable entries and how many lines had no prompt.
pub fn read_jsonl(
    text: &str,
    field: &str,
    answer_field: &str,
) -> Result<(Vec<DataEntry>, usize), Vec<DataError>> {
    let mut entries = Vec::new();
    let mut errors = Vec::new();
    let mut skipped = 0;
    let help = "each line of a JSONL dataset is one JSON object, e.g. {\"prompt\": \"...\"}";
    for (number, span, value) in json_lines(text, help) {
        let value = match value {
            Ok(value) => value,
            Err(error) => {
                errors.push(error);
                continue;
            }
        };
        if !value.is_object() {
            errors.push(error_at(
                span,
                format!("line {number} is not a JSON object"),
                "not an object",
                format!("each line is an object with a \"{field}\" field"),
            ));
            continue;
        }
        let mut answer = value
            .get(answer_field)
            .and_then(Value::as_str)
            .map(str::to_string);
        let prompt = match value.get(field) {
            Some(Value::String(text)) if !text.is_empty() => DataPrompt::Text(text.clone()),
            Some(list @ Value::Array(_)) => match messages(list) {
                Some(mut list) if !list.is_empty() => {
                    // A conversation that ends with the assistant's turn carries its answer.
                    if list.len() > 1 && list.last().is_some_and(|m| m.role == "assistant") {
                        let last = list.pop().map(|m| m.content);
                        answer = answer.or(last);
                    }
                    DataPrompt::Messages(list)
                }
                Some(_) => {
                    skipped += 1;
                    continue;
                }
                None => {
                    errors.push(error_at(
                        span,
                        format!("line {number}: \"{field}\" is a list but not of chat messages"),
                        "not messages",
                        "messages are objects with a \"role\" and a \"content\" string",
                    ));
                    continue;
                }
            },
            Some(Value::String(_)) | None => {
                skipped += 1;
                continue;
            }
            Some(_) => {
                errors.push(error_at(
                    span,
                    format!("line {number}: \"{field}\" is neither text nor chat messages"),
                    "wrong type",
                    format!("\"{field}\" holds the prompt as a string, or as a list of {{\"role\", \"content\"}} messages"),
                ));
                continue;
            }
        };
        let media_files = match media_files(&value, text, span) {
            Ok(files) => files,
            Err(error) => {
                errors.push(error);
                continue;
            }
        };
        let prompt = without_markers(prompt, &media_files);
        entries.push(DataEntry {
            media_files,
            ..DataEntry::new(number, prompt, answer)
        });
    }
    if errors.is_empty() {
        Ok((entries, skipped))
    } else {
        Err(errors)
    }
}

/// The fields an entry names media files in: `images` (a list, or one path), `image` (one
/// path, as LLaVA and ShareGPT4V write it), `audio` (one path, or a list).
const MEDIA_FIELDS: [(&str, bool); 3] = [("images", false), ("image", false), ("audio", true)];

/// The media files `entry` names, each with the span of its first mention within `within` of
/// `text` (the whole entry's span when the path is written with escapes).
fn media_files(
    entry: &Value,
    text: &str,
    within: (usize, usize),
) -> Result<Vec<MediaFile>, DataError> {
    let mut files = Vec::new();
    for (field, audio) in MEDIA_FIELDS {
        let paths: Vec<&Value> = match entry.get(field) {
            None | Some(Value::Null) => continue,
            Some(Value::Array(list)) => list.iter().collect(),
            Some(one) => vec![one],
        };
        for path in paths {
            let Some(path) = path.as_str().filter(|p| !p.trim().is_empty()) else {
                return Err(error_at(
                    within,
                    format!("\"{field}\" holds something other than file paths"),
                    "not a path",
                    format!("write \"{field}\": [\"photos/cat.jpg\"] (paths relative to the dataset's folder)"),
                ));
            };
            if path.contains("://") || path.starts_with("data:") {
                return Err(error_at(
                    within,
                    format!("\"{field}\" names {path}, which is not a file"),
                    "not a file",
                    "name files beside the dataset: llmload reads them once at plan time and sends their bytes (it never fetches from the network)",
                ));
            }
            files.push(MediaFile {
                path: path.to_string(),
                audio,
                span: span_of(text, within, path),
            });
        }
    }
    Ok(files)
}

/// The span of `needle`'s first mention as a JSON string at or after `within`'s start (all of
/// `within` when it is not found as written).
fn span_of(text: &str, within: (usize, usize), needle: &str) -> (usize, usize) {
    let quoted = format!("\"{needle}\"");
    text.get(within.0..)
        .and_then(|rest| rest.find(&quoted))
        .map_or(within, |at| (within.0 + at, quoted.len()))
}

/// The prompt without the `<image>` (and `<audio>`) markers LLaVA-style datasets put where a
/// model's own template places the media: sent as parts instead, the markers would be text.
fn without_markers(prompt: DataPrompt, files: &[MediaFile]) -> DataPrompt {
    if files.is_empty() {
        return prompt;
    }
    let strip = |text: String| {
        let mut text = text;
        for marker in ["<image>\n", "<image>", "<audio>\n", "<audio>"] {
            if text.contains(marker) {
                text = text.replace(marker, "");
            }
        }
        text
    };
    match prompt {
        DataPrompt::Text(text) => DataPrompt::Text(strip(text)),
        DataPrompt::Messages(messages) => DataPrompt::Messages(
            messages
                .into_iter()
                .map(|mut m| {
                    m.content = strip(m.content);
                    m
                })
                .collect(),
        ),
    }
}

/// The byte offset of a 1-based line and column.
fn offset_of(text: &str, line: usize, column: usize) -> usize {
    let start: usize = text
        .split_inclusive('\n')
        .take(line.saturating_sub(1))
        .map(str::len)
        .sum();
    (start + column.saturating_sub(1)).min(text.len())
}

/// Reads ShareGPT's layout: each conversation's first human turn is the prompt, and the turn
/// after it (the model's) its answer. Returns the usable entries and how many conversations
/// had no human turn.
pub fn read_sharegpt(text: &str) -> Result<(Vec<DataEntry>, usize), Vec<DataError>> {
    let value: Value = serde_json::from_str(text).map_err(|e| {
        let at = offset_of(text, e.line(), e.column());
        vec![error_at(
            (at, 1),
            format!("the file is not JSON: {e}"),
            "here",
            "a ShareGPT file is one JSON list of {\"conversations\": [{\"from\": \"human\", \"value\": ...}, ...]}",
        )]
    })?;
    let Some(list) = value.as_array() else {
        return Err(vec![error_at(
            (0, 1),
            "a ShareGPT file is a JSON list".into(),
            "not a list",
            "write [ {\"conversations\": [...]}, ... ], or use format=\"jsonl\"",
        )]);
    };
    let mut entries = Vec::new();
    let mut skipped = 0;
    let mut media_errors = Vec::new();
    for (index, item) in list.iter().enumerate() {
        let turns = item
            .get("conversations")
            .or_else(|| item.get("conversation"))
            .and_then(Value::as_array);
        let Some(turns) = turns else {
            skipped += 1;
            continue;
        };
        let text_of = |turn: &Value| {
            turn.get("value")
                .and_then(Value::as_str)
                .map(str::to_string)
        };
        let from = |turn: &Value| {
            turn.get("from")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()
        };
        let first_human = turns
            .iter()
            .position(|t| matches!(from(t).as_str(), "human" | "user"));
        let Some(first) = first_human else {
            skipped += 1;
            continue;
        };
        let Some(prompt) = text_of(&turns[first]).filter(|t| !t.is_empty()) else {
            skipped += 1;
            continue;
        };
        let answer = turns
            .get(first + 1)
            .filter(|t| matches!(from(t).as_str(), "gpt" | "assistant" | "chatgpt" | "bard"))
            .and_then(text_of);
        // ShareGPT4V and LLaVA name the conversation's image beside it (`"image": "coco/1.jpg"`).
        let media_files = match media_files(item, text, (0, 1)) {
            Ok(files) => files,
            Err(error) => {
                media_errors.push(error);
                continue;
            }
        };
        let prompt = without_markers(DataPrompt::Text(prompt), &media_files);
        entries.push(DataEntry {
            media_files,
            ..DataEntry::new(index + 1, prompt, answer)
        });
    }
    if !media_errors.is_empty() {
        return Err(media_errors);
    }
    Ok((entries, skipped))
}

pub use super::trace_formats::{read_trace, TraceFormat, TraceRead};

/// A trace read from disk, and which part of it a phase replays.
#[derive(Debug, Clone, PartialEq)]
pub struct Trace {
    /// The path as the plan wrote it.
    pub shown: String,
    /// Replay speed: 2.0 sends the trace twice as fast.
    pub speed: f64,
    /// Where in the trace the replay starts (trace time).
    pub from: std::time::Duration,
    /// Tokens per `hash_ids` block (512 in Mooncake's traces).
    pub block_tokens: u32,
    /// The trace's rows, in time order (empty when the plan was read without its files).
    pub rows: Arc<Vec<TraceRow>>,
    /// The file's layout (Mooncake's when the plan was read without its files).
    pub format: TraceFormat,
    /// Rows of the file left out: requests that failed in production (BurstGPT's).
    pub left_out: usize,
    /// The file's SHA-256, kept in the run's header.
    pub sha256: String,
}

impl Trace {
    /// The most arrivals in any one second of the replay, per second.
    pub fn peak_rate(&self) -> f64 {
        let window_ms = (1000.0 * self.speed).max(1.0) as u64;
        let mut first = 0;
        let mut most = 0;
        for (last, row) in self.rows.iter().enumerate() {
            while row.at_ms - self.rows[first].at_ms >= window_ms {
                first += 1;
            }
            most = most.max(last + 1 - first);
        }
        most as f64
    }

    /// The rows a phase of `duration` (wall time, if any) and `max_requests` replays, with their
    /// send offsets from the phase's start in µs.
    pub fn window(
        &self,
        duration: Option<std::time::Duration>,
        max_requests: Option<u64>,
    ) -> impl Iterator<Item = (usize, u64)> + '_ {
        let from_ms = self.from.as_millis() as u64;
        let speed = self.speed;
        let limit_us = duration.map(|d| d.as_micros() as u64);
        self.rows
            .iter()
            .enumerate()
            .filter(move |(_, row)| row.at_ms >= from_ms)
            .map(move |(i, row)| {
                let offset_us = ((row.at_ms - from_ms) as f64 * 1000.0 / speed).round() as u64;
                (i, offset_us)
            })
            .take_while(move |(_, offset)| limit_us.is_none_or(|limit| *offset < limit))
            .take(max_requests.map_or(usize::MAX, |n| n as usize))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jsonl_reads_text_and_messages_and_points_at_bad_lines() {
        let text = "{\"prompt\": \"hello there\", \"completion\": \"hi\"}\n\n\
                    {\"prompt\": [{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"assistant\", \"content\": \"b\"}]}\n\
                    {\"other\": 1}\n";
        let (entries, skipped) = read_jsonl(text, "prompt", "completion").unwrap();
        assert_eq!(entries.len(), 2);
        assert_eq!(skipped, 1);
        assert_eq!(entries[0].prompt, DataPrompt::Text("hello there".into()));
        assert_eq!(entries[0].answer.as_deref(), Some("hi"));
        assert_eq!(entries[1].line, 3);
        assert_eq!(entries[1].answer.as_deref(), Some("b"));
        let DataPrompt::Messages(m) = &entries[1].prompt else {
            panic!("messages")
        };
        assert_eq!(m.len(), 1);

        let bad = "{\"prompt\": \"ok\"}\n{not json\n";
        let errors = read_jsonl(bad, "prompt", "completion").unwrap_err();
        assert_eq!(errors.len(), 1);
        assert!(errors[0].message.starts_with("line 2 is not JSON"));
        assert_eq!(errors[0].span.0, bad.find("{not").unwrap());
    }

    #[test]
    fn sharegpt_takes_the_first_human_turn_and_its_answer() {
        let text = r#"[
          {"id": "a", "conversations": [{"from": "human", "value": "q1"}, {"from": "gpt", "value": "a1"}, {"from": "human", "value": "q2"}]},
          {"id": "b", "conversations": [{"from": "gpt", "value": "only the model"}]},
          {"id": "c", "conversations": [{"from": "human", "value": "q3"}]}
        ]"#;
        let (entries, skipped) = read_sharegpt(text).unwrap();
        assert_eq!(skipped, 1);
        assert_eq!(entries[0].prompt, DataPrompt::Text("q1".into()));
        assert_eq!(entries[0].answer.as_deref(), Some("a1"));
        assert_eq!(entries[1].answer, None);
        let errors = read_sharegpt("[\n  {\"conversations\": ]").unwrap_err();
        assert!(errors[0].message.contains("not JSON"), "{errors:?}");
        assert_eq!(
            errors[0].span.0,
            text_offset("[\n  {\"conversations\": ]", "]")
        );
    }

    fn text_offset(text: &str, needle: &str) -> usize {
        text.rfind(needle).unwrap()
    }

    #[test]
    fn traces_sort_by_time_and_window_by_speed() {
        let text = "{\"timestamp\": 2000, \"input_length\": 600, \"output_length\": 10, \"hash_ids\": [1, 2]}\n\
                    {\"timestamp\": 0, \"input_length\": 100, \"output_length\": 5}\n\
                    {\"timestamp\": 5000, \"input_length\": 100, \"output_length\": 5}\n";
        let rows = read_trace(text).unwrap().rows;
        assert_eq!(rows[0].at_ms, 0);
        assert_eq!(rows[1].hash_ids, vec![1, 2]);
        let trace = Trace {
            shown: "t".into(),
            speed: 2.0,
            from: std::time::Duration::ZERO,
            block_tokens: 512,
            rows: Arc::new(rows),
            format: TraceFormat::Mooncake,
            left_out: 0,
            sha256: String::new(),
        };
        let all: Vec<_> = trace.window(None, None).collect();
        assert_eq!(all, vec![(0, 0), (1, 1_000_000), (2, 2_500_000)]);
        let first_two: Vec<_> = trace
            .window(Some(std::time::Duration::from_secs(2)), None)
            .collect();
        assert_eq!(first_two.len(), 2);
        let errors = read_trace("{\"timestamp\": -1, \"input_length\": 0}\n").unwrap_err();
        assert!(errors[0].message.contains("timestamp"));
        assert!(errors[0].message.contains("input_length"));
    }
}
