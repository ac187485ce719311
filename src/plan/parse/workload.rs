//! `workload`: what each request asks for (tokenizer, input lengths, output length).

use kdl::KdlNode;

use std::sync::Arc;

use super::cx::{children, positional, property, Cx, Handler};
use super::datafile;
use super::values::{Count, Flag, Kind, Number, Text, WEIGHT};
use crate::plan::data::{self, Dataset, DatasetFormat, DatasetOrder};
use crate::plan::limits::MAX_TOKENS;
use crate::plan::{Bucket, OutputSpread, PrefixGroup, TokenizerSpec, Workload};

/// Shared-prefix groups a plan may have.
const MAX_PREFIX_GROUPS: u64 = 10_000;

const BUILTIN_TOKENIZERS: [&str; 2] = ["cl100k_base", "o200k_base"];

/// The tokenizer `auto` falls back to when the model's own is not at hand.
const DEFAULT_TOKENIZER: &str = "cl100k_base";

/// Whether a model's name is a Hugging Face id (`org/name`), which `auto` looks up.
fn hugging_face_id(model: &str) -> bool {
    let mut parts = model.split('/');
    matches!((parts.next(), parts.next(), parts.next()), (Some(org), Some(name), None)
        if !org.is_empty() && !name.is_empty()
            && model.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'))
            && !org.starts_with('.'))
}

/// `tokenizer "auto"`: the target model's own `tokenizer.json` from the local Hugging Face
/// cache when the model is named by its id and the cache holds it, else the built-in one, with
/// a note saying which and, for a model whose tokenizer is missing, how to get it. Never a
/// network call. A kept plan, judged again without its files, looks nothing up.
pub(super) fn resolve_auto(check_files: bool, model: &str, workload: &mut Workload) {
    if !workload.tokenizer_auto || !check_files || !hugging_face_id(model) {
        return;
    }
    let found = crate::tokens::hf_hub_cache()
        .ok_or_else(Vec::new)
        .and_then(|hub| crate::tokens::hf_cached_tokenizer(&hub, model));
    workload.tokenizer_note = Some(match found {
        Ok(path) => {
            let note = format!(
                "tokenizer \"auto\": {model}'s own, from the local Hugging Face cache ({})",
                path.display()
            );
            workload.tokenizer = TokenizerSpec::File(path);
            note
        }
        Err(_) => format!(
            "tokenizer \"auto\": {model}'s tokenizer is not in the local Hugging Face cache, so \
             prompts are built and answers counted with the built-in {DEFAULT_TOKENIZER} (lengths \
             are exact under it, approximate under the model's); for exact lengths fetch it once \
             with `huggingface-cli download {model} tokenizer.json` (llmload never downloads)"
        ),
    });
}
const TOKENS: Count = Count::positive(MAX_TOKENS);

struct Fields {
    tokenizer: TokenizerSpec,
    /// No `tokenizer`, or `tokenizer "auto"`: chosen from the target's model later.
    tokenizer_auto: bool,
    buckets: Option<Vec<Bucket>>,
    output: Option<(u32, bool, Option<OutputSpread>)>,
    system: Option<String>,
    prefix: Vec<PrefixGroup>,
    dataset: Option<Dataset>,
    conversation: Option<crate::plan::Conversation>,
    batch: Option<crate::plan::Batch>,
    query_tokens: Option<u32>,
    images: Option<crate::plan::Images>,
    audio: Option<crate::plan::Audio>,
    image_urls: Option<crate::plan::ImageUrls>,
    /// A child was present but wrong (already reported).
    broken: bool,
}

const CHILDREN: &[(&str, Handler<Fields>)] = &[
    ("tokenizer", tokenizer),
    ("input", |cx, node, w| {
        w.buckets = input(cx, node);
        w.broken |= w.buckets.is_none();
    }),
    ("output", output),
    ("system", |cx, node, w| {
        w.system = cx.single(node, "system \"You are a helpful assistant.\"", Text);
        w.broken |= w.system.is_none();
    }),
    ("prefix", prefix),
    ("dataset", dataset),
    ("conversation", conversation),
    ("batch", batch),
    ("query", |cx, node, w| {
        w.query_tokens = cx
            .single(node, "query 32 (the rerank query's tokens)", TOKENS)
            .map(|n| n as u32);
        w.broken |= w.query_tokens.is_none();
    }),
    ("images", |cx, node, w| {
        w.images = super::media::images(cx, node);
        w.broken |= w.images.is_none();
    }),
    ("audio", |cx, node, w| {
        w.audio = super::media::audio(cx, node);
        w.broken |= w.audio.is_none();
    }),
    ("image-urls", |cx, node, w| {
        match super::media::image_urls(cx, node) {
            Some(urls) => w.image_urls = urls,
            None => w.broken = true,
        }
    }),
];

/// The most inputs one request may carry.
const MAX_BATCH: u64 = 100_000;

/// `batch 16` or `batch min=1 max=32`: inputs per request (embeddings), documents (rerank).
fn batch(cx: &mut Cx, node: &KdlNode, w: &mut Fields) {
    let usage = "batch 16 (inputs per request), or batch min=1 max=32 (drawn per request)";
    cx.no_children(node);
    let size = || Count::positive(MAX_BATCH);
    let fixed = positional(node).next().is_some();
    if fixed {
        cx.check_entries(node, 1, &[], usage);
        if let Some(n) = cx.arg(node, usage, size()) {
            w.batch = Some(crate::plan::Batch {
                min: n as u32,
                max: n as u32,
            });
        } else {
            w.broken = true;
        }
        return;
    }
    cx.check_entries(node, 0, &["min", "max"], usage);
    match (
        cx.prop(node, "min", usage, size()),
        cx.prop(node, "max", usage, size()),
    ) {
        (Ok(Some(min)), Ok(Some(max))) if min <= max => {
            w.batch = Some(crate::plan::Batch {
                min: min as u32,
                max: max as u32,
            })
        }
        (Ok(Some(_)), Ok(Some(_))) => {
            cx.error(
                node.name().span(),
                "`batch` has min above max",
                "min > max",
                usage,
            );
            w.broken = true;
        }
        (Ok(None), _) | (_, Ok(None)) => {
            cx.error(
                node.name().span(),
                "`batch` needs a size, or both min and max",
                "size missing",
                usage,
            );
            w.broken = true;
        }
        _ => w.broken = true,
    }
}

/// `conversation turns=5 think="2s" think-max="8s"`, with `{ tool-result ... }` for agent loops.
fn conversation(cx: &mut Cx, node: &KdlNode, w: &mut Fields) {
    use super::values::DURATION_OR_ZERO;
    let usage = "conversation turns=5 think=\"2s\" (think-max=\"8s\" draws think times up to it; \
                 { tool-result tokens=400 latency=\"300ms\" } makes it an agent loop)";
    cx.check_entries(node, 0, &["turns", "think", "think-max"], usage);
    let turns = cx.prop(node, "turns", usage, Count { min: 1, max: 1000 });
    let think = cx.prop_or(
        node,
        "think",
        std::time::Duration::ZERO,
        usage,
        DURATION_OR_ZERO,
    );
    let think_max = cx.prop(node, "think-max", usage, DURATION_OR_ZERO);
    let mut tools = ToolsField::Absent;
    cx.walk(node, "in `conversation`", CONVERSATION, &mut tools);
    let tool_results = match tools {
        ToolsField::Absent => None,
        ToolsField::Given(results) => Some(results),
        ToolsField::Broken => {
            w.broken = true;
            return;
        }
    };
    match (turns, think, think_max) {
        (Ok(Some(turns)), Some(think), Ok(think_max)) => {
            if think_max.is_some_and(|max| max < think) {
                cx.error(
                    node.name().span(),
                    "think-max is below think",
                    "think times",
                    usage,
                );
                w.broken = true;
                return;
            }
            w.conversation = Some(crate::plan::Conversation {
                turns: turns as u32,
                think,
                think_max,
                tool_results,
            });
        }
        (Ok(None), ..) => {
            cx.error(
                node.name().span(),
                "`conversation` needs turns=N",
                "turns missing",
                usage,
            );
            w.broken = true;
        }
        _ => w.broken = true,
    }
}

/// What a conversation's `tool-result` child gave.
enum ToolsField {
    Absent,
    Given(crate::plan::ToolResults),
    /// Present but wrong (already reported).
    Broken,
}

const CONVERSATION: &[(&str, Handler<ToolsField>)] = &[("tool-result", tool_result)];

/// `tool-result tokens=400 tokens-max=2000 latency="300ms" latency-max="2s"`.
fn tool_result(cx: &mut Cx, node: &KdlNode, field: &mut ToolsField) {
    use super::values::DURATION_OR_ZERO;
    let usage = "tool-result tokens=400 latency=\"300ms\" (tokens-max=2000 and latency-max=\"2s\" \
                 draw each from a range)";
    cx.no_children(node);
    cx.check_entries(
        node,
        0,
        &["tokens", "tokens-max", "latency", "latency-max"],
        usage,
    );
    if !matches!(field, ToolsField::Absent) {
        cx.error(
            node.name().span(),
            "a conversation has one `tool-result`",
            "second one",
            "merge the two into one line",
        );
        *field = ToolsField::Broken;
        return;
    }
    let tokens = cx.prop(node, "tokens", usage, TOKENS);
    let tokens_max = cx.prop(node, "tokens-max", usage, TOKENS);
    let latency = cx.prop_or(
        node,
        "latency",
        std::time::Duration::ZERO,
        usage,
        DURATION_OR_ZERO,
    );
    let latency_max = cx.prop(node, "latency-max", usage, DURATION_OR_ZERO);
    *field = match (tokens, tokens_max, latency, latency_max) {
        (Ok(Some(tokens)), Ok(tokens_max), Some(latency), Ok(latency_max)) => {
            let mut ok = true;
            if tokens_max.is_some_and(|max| max < tokens) {
                cx.error(
                    node.name().span(),
                    "tokens-max is below tokens",
                    "tool-result lengths",
                    usage,
                );
                ok = false;
            }
            if latency_max.is_some_and(|max| max < latency) {
                cx.error(
                    node.name().span(),
                    "latency-max is below latency",
                    "tool latencies",
                    usage,
                );
                ok = false;
            }
            if ok {
                ToolsField::Given(crate::plan::ToolResults {
                    tokens: tokens as u32,
                    tokens_max: tokens_max.map(|max| max as u32),
                    latency,
                    latency_max,
                })
            } else {
                ToolsField::Broken
            }
        }
        (Ok(None), ..) => {
            cx.error(
                node.name().span(),
                "`tool-result` needs tokens=N: how long each tool's answer is",
                "tokens missing",
                usage,
            );
            ToolsField::Broken
        }
        _ => ToolsField::Broken,
    };
}

/// `output 256`, `output min=64 max=256` (uniform), `output mean=128 stddev=32` (normal); each
/// with `ignore-eos=#true`.
fn output(cx: &mut Cx, node: &KdlNode, w: &mut Fields) {
    let usage =
        "output 256 ignore-eos=#true (or output min=64 max=256, or output mean=128 stddev=32)";
    cx.no_children(node);
    cx.check_entries(
        node,
        1,
        &["ignore-eos", "min", "max", "mean", "stddev"],
        usage,
    );
    let ignore_eos = cx.prop_or(node, "ignore-eos", false, usage, Flag);
    let min = cx.prop(node, "min", usage, TOKENS);
    let max = cx.prop(node, "max", usage, TOKENS);
    let mean = cx.prop(
        node,
        "mean",
        usage,
        Number {
            positive: true,
            max: MAX_TOKENS as f64,
        },
    );
    let stddev = cx.prop(
        node,
        "stddev",
        usage,
        Number {
            positive: true,
            max: MAX_TOKENS as f64,
        },
    );
    let fixed = match positional(node).next() {
        Some(entry) => TOKENS.read(cx, entry, usage).map(Some),
        None => Some(None),
    };
    let (Some(ignore_eos), Ok(min), Ok(max), Ok(mean), Ok(stddev), Some(fixed)) =
        (ignore_eos, min, max, mean, stddev, fixed)
    else {
        w.broken = true;
        return;
    };
    let wrong = |cx: &mut Cx, message: &str| {
        cx.error(
            node.name().span(),
            message.to_string(),
            "output lengths",
            format!("write it as: {usage}"),
        );
    };
    let spread = match (fixed, min, max, mean, stddev) {
        (Some(tokens), None, None, None, None) => {
            w.output = Some((tokens as u32, ignore_eos, None));
            return;
        }
        (None, Some(min), Some(max), None, None) if min <= max => OutputSpread::Uniform {
            min: min as u32,
            max: max as u32,
        },
        (None, min, max, Some(mean), Some(stddev)) => {
            let min = min.unwrap_or(1);
            let max = max.unwrap_or(((mean + 4.0 * stddev).ceil() as u64).min(MAX_TOKENS));
            if min as f64 > mean || mean > max as f64 {
                wrong(cx, "the mean output length lies outside min..max");
                w.broken = true;
                return;
            }
            OutputSpread::Normal {
                mean,
                stddev,
                min: min as u32,
                max: max as u32,
            }
        }
        (None, Some(_), Some(_), None, None) => {
            wrong(cx, "`min` is above `max`");
            w.broken = true;
            return;
        }
        (None, None, None, None, None) => {
            wrong(cx, "`output` needs a length");
            w.broken = true;
            return;
        }
        _ => {
            wrong(
                cx,
                "`output` takes one length, a uniform range (min and max), or a normal distribution (mean and stddev, optionally min and max)",
            );
            w.broken = true;
            return;
        }
    };
    let nominal = match spread {
        OutputSpread::Uniform { min, max } => (min + max) / 2,
        OutputSpread::Normal { mean, .. } => mean.round() as u32,
    };
    w.output = Some((nominal.max(1), ignore_eos, Some(spread)));
}

/// `prefix 1024 groups=8`, or `prefix { group 2048 weight=3; group 512 }`.
fn prefix(cx: &mut Cx, node: &KdlNode, w: &mut Fields) {
    let usage = "prefix 1024 groups=8, or prefix { group 2048 weight=3; group 512 weight=1 }";
    cx.check_entries(node, 1, &["groups"], usage);
    let groups_kind = Count::positive(MAX_PREFIX_GROUPS);
    match (positional(node).next(), children(node).is_empty()) {
        (Some(entry), true) => {
            let tokens = TOKENS.read(cx, entry, usage);
            let groups = cx.prop_or(node, "groups", 1, usage, groups_kind);
            match (tokens, groups) {
                (Some(tokens), Some(groups)) => {
                    w.prefix = (0..groups)
                        .map(|_| PrefixGroup {
                            tokens: tokens as u32,
                            weight: 1.0,
                        })
                        .collect()
                }
                _ => w.broken = true,
            }
        }
        (None, false) => {
            if let Some(groups) = property(node, "groups") {
                cx.error(
                    groups.span(),
                    "`groups` is for a prefix of one length",
                    "groups",
                    usage,
                );
            }
            let mut groups = Some(Vec::new());
            cx.walk(node, "in `prefix`", PREFIX_GROUPS, &mut groups);
            match groups {
                Some(groups) if groups.len() as u64 <= MAX_PREFIX_GROUPS => w.prefix = groups,
                Some(_) => {
                    cx.error(
                        node.name().span(),
                        "too many prefix groups",
                        "too many",
                        format!("at most {MAX_PREFIX_GROUPS}"),
                    );
                    w.broken = true;
                }
                None => w.broken = true,
            }
        }
        (Some(entry), false) => {
            cx.error(
                entry.span(),
                "`prefix` has both a length and groups",
                "length",
                usage,
            );
            w.broken = true;
        }
        (None, true) => {
            cx.error(node.name().span(), "`prefix` is empty", "no length", usage);
            w.broken = true;
        }
    }
}

const PREFIX_GROUPS: &[(&str, Handler<Option<Vec<PrefixGroup>>>)] =
    &[("group", |cx, node, groups| {
        let usage = "group 2048 weight=3";
        cx.no_children(node);
        cx.check_entries(node, 1, &["weight"], usage);
        let tokens = cx.arg(node, usage, TOKENS);
        let weight = cx.prop_or(node, "weight", 1.0, usage, WEIGHT);
        match (tokens, weight, groups.as_mut()) {
            (Some(tokens), Some(weight), Some(list)) => list.push(PrefixGroup {
                tokens: tokens as u32,
                weight,
            }),
            _ => *groups = None,
        }
    })];

/// `dataset "prompts.jsonl" field="prompt" order="shuffle" ...`.
fn dataset(cx: &mut Cx, node: &KdlNode, w: &mut Fields) {
    let usage = "dataset \"prompts.jsonl\" order=\"shuffle\" min-input=16 max-input=2048 output-from-answer=#true";
    const PROPS: &[&str] = &[
        "format",
        "field",
        "answer-field",
        "order",
        "min-input",
        "max-input",
        "truncate",
        "output-from-answer",
    ];
    cx.no_children(node);
    cx.check_entries(node, 1, PROPS, usage);
    let name = cx.arg(node, usage, Text);
    let span = positional(node).next().map_or(node.span(), |e| e.span());
    let text_prop = |cx: &mut Cx, key: &str| cx.prop(node, key, usage, Text).ok().flatten();
    let format = match text_prop(cx, "format").as_deref() {
        None => {
            if name.as_deref().is_some_and(|n| n.ends_with(".jsonl")) {
                Some(DatasetFormat::Jsonl)
            } else {
                Some(DatasetFormat::ShareGpt)
            }
        }
        Some("jsonl") => Some(DatasetFormat::Jsonl),
        Some("sharegpt") => Some(DatasetFormat::ShareGpt),
        Some(other) => {
            let at = property(node, "format").map_or(span, |e| e.span());
            cx.error(
                at,
                format!("unknown dataset format \"{other}\""),
                "unknown format",
                "use format=\"jsonl\" or format=\"sharegpt\"",
            );
            None
        }
    };
    let order = match text_prop(cx, "order").as_deref() {
        None | Some("shuffle") => Some(DatasetOrder::Shuffle),
        Some("sequential") => Some(DatasetOrder::Sequential),
        Some("random") => Some(DatasetOrder::Random),
        Some(other) => {
            let at = property(node, "order").map_or(span, |e| e.span());
            cx.error(
                at,
                format!("unknown order \"{other}\""),
                "unknown order",
                "use order=\"sequential\" (the file's order), \"shuffle\" (shuffled with the seed) or \"random\" (with replacement)",
            );
            None
        }
    };
    let field = text_prop(cx, "field").unwrap_or_else(|| "prompt".into());
    let answer_field = text_prop(cx, "answer-field").unwrap_or_else(|| "completion".into());
    let min_input = cx.prop(node, "min-input", usage, TOKENS);
    let max_input = cx.prop(node, "max-input", usage, TOKENS);
    let truncate = cx.prop_or(node, "truncate", false, usage, Flag);
    let output_from_answer = cx.prop_or(node, "output-from-answer", false, usage, Flag);
    let (
        Some(name),
        Some(format),
        Some(order),
        Ok(min_input),
        Ok(max_input),
        Some(truncate),
        Some(output_from_answer),
    ) = (
        name,
        format,
        order,
        min_input,
        max_input,
        truncate,
        output_from_answer,
    )
    else {
        w.broken = true;
        return;
    };
    if let (Some(min), Some(max)) = (min_input, max_input) {
        if min > max {
            cx.error(span, "min-input is above max-input", "bounds", usage);
            w.broken = true;
            return;
        }
    }
    let mut dataset = Dataset {
        shown: name.clone(),
        format,
        field,
        answer_field,
        order,
        min_input: min_input.map(|n| n as u32),
        max_input: max_input.map(|n| n as u32),
        truncate,
        output_from_answer,
        entries: Arc::new(Vec::new()),
        skipped: 0,
        sha256: String::new(),
        media: Default::default(),
    };
    if cx.check_files {
        match read_dataset(cx, span, &name, &mut dataset) {
            // No file to read: no dataset either.
            None => {
                w.broken = true;
                return;
            }
            // Its mistakes are said; what was read is kept for the checks that follow.
            Some(read) => w.broken |= !read,
        }
    }
    w.dataset = Some(dataset);
}

/// Reads the dataset's file into `dataset`: its entries (in its format), its media, its
/// SHA-256. `Some(false)`, said with the file's lines, when its entries or media are wrong or it
/// has nothing to send; `None` when the file cannot be read at all.
fn read_dataset(
    cx: &mut Cx,
    span: miette::SourceSpan,
    name: &str,
    dataset: &mut Dataset,
) -> Option<bool> {
    let (path, text, sha) = datafile::read(cx, span, name, "dataset")?;
    let mut ok = true;
    let read = match dataset.format {
        DatasetFormat::Jsonl => data::read_jsonl(&text, &dataset.field, &dataset.answer_field),
        DatasetFormat::ShareGpt => data::read_sharegpt(&text),
    };
    let shown = path.display().to_string();
    match read {
        Ok((entries, _)) if entries.is_empty() => {
            cx.error(
                span,
                format!("dataset {shown} has no entry with a prompt"),
                "nothing to send",
                match dataset.format {
                    DatasetFormat::Jsonl => format!("each line needs a \"{}\" field holding text or chat messages (field= names another)", dataset.field),
                    DatasetFormat::ShareGpt => "each conversation needs a turn from \"human\"".to_string(),
                },
            );
            ok = false;
        }
        Ok((mut entries, skipped)) => {
            let folder = path.parent().unwrap_or(std::path::Path::new("."));
            match crate::plan::data_media::read_media(&mut entries, folder) {
                Ok(media) => dataset.media = media,
                Err(errors) => {
                    for error in errors {
                        cx.error_in_data(&shown, text.clone(), error);
                    }
                    ok = false;
                }
            }
            dataset.entries = Arc::new(entries);
            dataset.skipped = skipped;
            dataset.sha256 = sha;
        }
        Err(errors) => {
            // The first few mistakes are enough to see what is wrong with a file.
            for error in errors.into_iter().take(5) {
                cx.error_in_data(&shown, text.clone(), error);
            }
            ok = false;
        }
    }
    Some(ok)
}

fn tokenizer(cx: &mut Cx, node: &KdlNode, w: &mut Fields) {
    let usage = "tokenizer \"auto\" (or \"cl100k_base\", \"o200k_base\", a cached Hugging Face model id, or a path to tokenizer.json)";
    let Some(name) = cx.single(node, usage, Text) else {
        w.broken = true;
        return;
    };
    w.tokenizer_auto = name == "auto";
    if w.tokenizer_auto {
        return;
    }
    let span = positional(node).next().map_or(node.span(), |e| e.span());
    // A Hugging Face model id: `org/name`, not a path that exists and not a .json file.
    let looks_like_id = name.matches('/').count() == 1
        && !name.ends_with(".json")
        && !name.starts_with(['.', '/', '~'])
        && !name.contains(char::is_whitespace)
        && !datafile::resolve(cx, &name).exists();
    if BUILTIN_TOKENIZERS.contains(&name.as_str()) {
        w.tokenizer = TokenizerSpec::Builtin(name);
    } else if looks_like_id {
        if !cx.check_files {
            // A kept plan is judged without its files; the tokenizer is not needed for that.
            w.tokenizer = TokenizerSpec::File(name.into());
            return;
        }
        let Some(hub) = crate::tokens::hf_hub_cache() else {
            w.broken = true;
            cx.error(
                span,
                format!("cannot find the Hugging Face cache to look for {name}'s tokenizer"),
                "no cache",
                "set HF_HOME (or HF_HUB_CACHE), or give the path of a tokenizer.json",
            );
            return;
        };
        match crate::tokens::hf_cached_tokenizer(&hub, &name) {
            Ok(path) => w.tokenizer = TokenizerSpec::File(path),
            Err(looked) => {
                w.broken = true;
                let looked: Vec<String> = looked.iter().map(|p| p.display().to_string()).collect();
                cx.error(
                    span,
                    format!("{name}'s tokenizer is not in the Hugging Face cache (looked for {})", looked.join(" and ")),
                    "not cached",
                    format!(
                        "llmload never downloads: fetch it once with `huggingface-cli download {name} tokenizer.json` \
                         (or set HF_HOME to where it is), or give the path of a tokenizer.json"
                    ),
                );
            }
        }
    } else if name.ends_with(".json") || name.contains('/') {
        let resolved = datafile::resolve(cx, &name);
        if resolved.is_file() || !cx.check_files {
            w.tokenizer = TokenizerSpec::File(resolved);
        } else {
            w.broken = true;
            cx.error(
                span,
                format!("no tokenizer file at {}", resolved.display()),
                "file not found",
                "give the path of a Hugging Face tokenizer.json, relative to this plan file, or use \"cl100k_base\" / \"o200k_base\"",
            );
        }
    } else {
        w.broken = true;
        cx.error(
            span,
            format!("unknown tokenizer \"{name}\""),
            "unknown tokenizer",
            "built in: \"cl100k_base\", \"o200k_base\"; a Hugging Face model id in the local cache (\"org/name\"); or the path of a tokenizer.json",
        );
    }
}

fn input(cx: &mut Cx, node: &KdlNode) -> Option<Vec<Bucket>> {
    let usage = "input 512, or input { bucket 128 weight=5; bucket 512 weight=3 }";
    cx.check_entries(node, 1, &[], usage);
    let fixed = positional(node).next();
    let block = children(node);
    match (fixed, block.is_empty()) {
        (Some(entry), true) => {
            use super::values::Kind;
            let tokens = TOKENS.read(cx, entry, usage)?;
            Some(vec![Bucket {
                input_tokens: tokens as u32,
                weight: 1.0,
                output_tokens: None,
            }])
        }
        (Some(entry), false) => {
            cx.error(
                entry.span(),
                "`input` has both a fixed length and buckets",
                "fixed length",
                "use either input 512, or a block of buckets, not both",
            );
            None
        }
        (None, true) => {
            cx.error(node.name().span(), "`input` is empty", "no length", usage);
            None
        }
        (None, false) => {
            let mut buckets = Some(Vec::new());
            cx.walk(node, "in `input`", BUCKETS, &mut buckets);
            buckets.filter(|b| !b.is_empty())
        }
    }
}

/// The children of `input { ... }`; `None` once one is wrong.
const BUCKETS: &[(&str, Handler<Option<Vec<Bucket>>>)] = &[("bucket", |cx, node, buckets| {
    let usage = "bucket 512 weight=3 output=128";
    cx.no_children(node);
    cx.check_entries(node, 1, &["weight", "output"], usage);
    let tokens = cx.arg(node, usage, TOKENS);
    let weight = cx.prop_or(node, "weight", 1.0, usage, WEIGHT);
    let output = cx.prop(node, "output", usage, TOKENS);
    match (tokens, weight, output, buckets.as_mut()) {
        (Some(tokens), Some(weight), Ok(output), Some(list)) => list.push(Bucket {
            input_tokens: tokens as u32,
            weight,
            output_tokens: output.map(|n| n as u32),
        }),
        _ => *buckets = None,
    }
})];

/// The `workload` node.
pub(super) fn workload(cx: &mut Cx, node: &KdlNode) -> Option<Workload> {
    cx.no_args(node, "workload { input 512; output 128 }");
    let mut fields = Fields {
        tokenizer: TokenizerSpec::Builtin(DEFAULT_TOKENIZER.into()),
        tokenizer_auto: true,
        buckets: None,
        output: None,
        system: None,
        prefix: Vec::new(),
        dataset: None,
        conversation: None,
        batch: None,
        query_tokens: None,
        images: None,
        audio: None,
        image_urls: None,
        broken: false,
    };
    cx.walk(node, "in `workload`", CHILDREN, &mut fields);
    let has = |name: &str| children(node).iter().any(|c| c.name().value() == name);
    let from_dataset = fields.dataset.is_some();
    if from_dataset && has("input") {
        let span = children(node)
            .iter()
            .find(|c| c.name().value() == "input")
            .map_or(node.name().span(), |c| c.name().span());
        cx.error(
            span,
            "the workload has both a dataset and `input` lengths",
            "input lengths",
            "a dataset's prompts have their own lengths: remove `input` (bound them with min-input= and max-input= on `dataset`)",
        );
        return None;
    }
    if !has("input") && !from_dataset && !cx.replay_only {
        cx.consequence(
            node.name().span(),
            "the workload has no `input`",
            "input missing",
            "add input lengths: input 512, or input { bucket 128 weight=5; bucket 2048 weight=1 }, or a dataset \"prompts.jsonl\"",
        );
    }
    let answers = fields
        .dataset
        .as_ref()
        .is_some_and(|d| d.output_from_answer);
    // A batch of inputs (embeddings, rerank) generates nothing: no output to ask for.
    let batched = fields.batch.is_some();
    if !has("output") && !answers && !cx.replay_only && !batched && !cx.batch_api {
        cx.consequence(
            node.name().span(),
            "the workload has no `output`",
            "output missing",
            "add the output length in tokens: output 256 (ignore-eos=#true asks for exactly that many)",
        );
    }
    let (output_tokens, ignore_eos, output_spread) = match fields.output {
        Some(output) => output,
        None if (answers || cx.replay_only) && !fields.broken => (256, false, None),
        None if (batched || cx.batch_api) && !fields.broken => (0, false, None),
        None => return None,
    };
    if fields.broken {
        return None;
    }
    let buckets = match fields.buckets {
        Some(buckets) => buckets,
        // A dataset's entries have their own lengths; the one bucket is not used.
        None if from_dataset || cx.replay_only => {
            vec![Bucket {
                input_tokens: 1,
                weight: 1.0,
                output_tokens: None,
            }]
        }
        None => return None,
    };
    Some(Workload {
        tokenizer: fields.tokenizer,
        tokenizer_auto: fields.tokenizer_auto,
        tokenizer_note: None,
        buckets,
        output_tokens,
        ignore_eos,
        output_spread,
        system: fields.system,
        prefix: fields.prefix,
        dataset: fields.dataset,
        conversation: fields.conversation,
        batch: fields.batch,
        query_tokens: fields.query_tokens,
        images: fields.images,
        audio: fields.audio,
        image_urls: fields.image_urls,
    })
}
