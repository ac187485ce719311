//! `workload`: what each request asks for (tokenizer, input lengths, output length).

use kdl::KdlNode;

use super::cx::{children, positional, Cx, Handler};
use super::values::{Count, Flag, Number, Text};
use crate::plan::limits::{MAX_TOKENS, MAX_WEIGHT};
use crate::plan::{Bucket, TokenizerSpec, Workload};

const BUILTIN_TOKENIZERS: [&str; 2] = ["cl100k_base", "o200k_base"];
const TOKENS: Count = Count::positive(MAX_TOKENS);

struct Fields {
    tokenizer: TokenizerSpec,
    buckets: Option<Vec<Bucket>>,
    output: Option<(u32, bool)>,
    /// A child was present but wrong (already reported).
    broken: bool,
}

const CHILDREN: &[(&str, Handler<Fields>)] = &[
    ("tokenizer", tokenizer),
    ("input", |cx, node, w| {
        w.buckets = input(cx, node);
        w.broken |= w.buckets.is_none();
    }),
    ("output", |cx, node, w| {
        let usage = "output 256 ignore-eos=#true";
        cx.no_children(node);
        cx.check_entries(node, 1, &["ignore-eos"], usage);
        let tokens = cx.arg(node, usage, TOKENS);
        let ignore_eos = cx.prop_or(node, "ignore-eos", false, usage, Flag);
        match (tokens, ignore_eos) {
            (Some(tokens), Some(ignore_eos)) => w.output = Some((tokens as u32, ignore_eos)),
            _ => w.broken = true,
        }
    }),
];

fn tokenizer(cx: &mut Cx, node: &KdlNode, w: &mut Fields) {
    let usage = "tokenizer \"cl100k_base\" (or \"o200k_base\", or a path to tokenizer.json)";
    let Some(name) = cx.single(node, usage, Text) else {
        w.broken = true;
        return;
    };
    let span = positional(node).next().map_or(node.span(), |e| e.span());
    if BUILTIN_TOKENIZERS.contains(&name.as_str()) {
        w.tokenizer = TokenizerSpec::Builtin(name);
    } else if name.ends_with(".json") || name.contains('/') {
        // A relative path is relative to the plan file, so a plan and its tokenizer can live
        // together in a repository.
        let path = std::path::Path::new(&name);
        let resolved = if path.is_relative() {
            std::path::Path::new(cx.file_name())
                .parent()
                .map(|dir| dir.join(path))
                .unwrap_or_else(|| path.to_path_buf())
        } else {
            path.to_path_buf()
        };
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
            "built in: \"cl100k_base\", \"o200k_base\"; or give the path of a Hugging Face tokenizer.json",
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
    let weight_kind = Number {
        positive: true,
        max: MAX_WEIGHT,
    };
    let weight = cx.prop_or(node, "weight", 1.0, usage, weight_kind);
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
        tokenizer: TokenizerSpec::Builtin("cl100k_base".into()),
        buckets: None,
        output: None,
        broken: false,
    };
    cx.walk(node, "in `workload`", CHILDREN, &mut fields);
    let has = |name: &str| children(node).iter().any(|c| c.name().value() == name);
    if !has("input") {
        cx.error(
            node.name().span(),
            "the workload has no `input`",
            "input missing",
            "add input lengths: input 512, or input { bucket 128 weight=5; bucket 2048 weight=1 }",
        );
    }
    if !has("output") {
        cx.error(
            node.name().span(),
            "the workload has no `output`",
            "output missing",
            "add the output length in tokens: output 256 (ignore-eos=#true asks for exactly that many)",
        );
    }
    let (output_tokens, ignore_eos) = fields.output?;
    if fields.broken {
        return None;
    }
    Some(Workload {
        tokenizer: fields.tokenizer,
        buckets: fields.buckets?,
        output_tokens,
        ignore_eos,
    })
}
