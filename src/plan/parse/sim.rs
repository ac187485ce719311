//! `sim`: the embedded simulator's delays, engine model and faults (in a plan, or a profile
//! file given to `llmload sim --profile`).

use kdl::KdlNode;

use super::cx::{children, positional, property, Cx, Handler};
use super::values::{Count, Flag, Kind, Percent, Seed, Text, DURATION, DURATION_OR_ZERO};
use crate::plan::profiles;
use crate::plan::{
    EngineSettings, Faults, Reasoning, ReasoningField, SimSettings, SlowHeaders, Stall,
};

struct Fields {
    sim: SimSettings,
    /// The block sets its own seed (else it takes the plan's).
    seeded: bool,
}

const CHILDREN: &[(&str, Handler<Fields>)] = &[
    // Read first, wherever it is written: the other knobs adjust it.
    ("profile", |_, _, _| {}),
    ("engine", |cx, node, s| {
        cx.no_args(node, "engine { max-seqs 64 }");
        let mut engine = s
            .sim
            .engine
            .clone()
            .unwrap_or_else(profiles::default_engine);
        cx.walk(node, "in `engine`", ENGINE, &mut engine);
        if engine.max_batched_tokens < engine.max_seqs {
            cx.error(
                node.name().span(),
                "max-batched-tokens is below max-seqs: running sequences could not all decode in one step",
                "budget too small",
                "raise max-batched-tokens to at least max-seqs",
            );
        }
        s.sim.engine = Some(engine);
    }),
    ("faults", |cx, node, s| {
        cx.no_args(node, "faults { http-5xx \"1%\" }");
        cx.walk(node, "in `faults`", FAULTS, &mut s.sim.faults);
    }),
    ("ttft", |cx, node, s| {
        if let Some(d) = cx.single(node, "ttft \"10ms\"", DURATION_OR_ZERO) {
            s.sim.ttft = d;
        }
    }),
    ("itl", |cx, node, s| {
        if let Some(d) = cx.single(node, "itl \"10ms\"", DURATION_OR_ZERO) {
            s.sim.itl = d;
        }
    }),
    ("jitter", |cx, node, s| {
        if let Some(d) = cx.single(node, "jitter \"10ms\"", DURATION_OR_ZERO) {
            s.sim.jitter = d;
        }
    }),
    ("tokens-per-chunk", |cx, node, s| {
        if let Some(n) = cx.single(node, "tokens-per-chunk 1", Count::positive(4096)) {
            s.sim.tokens_per_chunk = n as u32;
        }
    }),
    ("reasoning", |cx, node, s| {
        let usage = "reasoning 200 field=\"reasoning_content\" (or \"reasoning\") in-usage=#true";
        cx.no_children(node);
        cx.check_entries(node, 1, &["field", "in-usage"], usage);
        let tokens = cx.arg(node, usage, Count::positive(1_000_000));
        let field = match cx.prop(node, "field", usage, Text) {
            Ok(None) => Some(ReasoningField::ReasoningContent),
            Ok(Some(name)) if name == "reasoning_content" => Some(ReasoningField::ReasoningContent),
            Ok(Some(name)) if name == "reasoning" => Some(ReasoningField::Reasoning),
            Ok(Some(name)) => {
                cx.error(
                    property(node, "field").map_or(node.span(), |e| e.span()),
                    format!("unknown reasoning field \"{name}\""),
                    "unknown field",
                    "servers stream reasoning as \"reasoning_content\" or \"reasoning\"",
                );
                None
            }
            Err(_) => None,
        };
        let in_usage = cx.prop_or(node, "in-usage", true, usage, Flag);
        if let (Some(tokens), Some(field), Some(in_usage)) = (tokens, field, in_usage) {
            s.sim.reasoning = Some(Reasoning {
                tokens: tokens as u32,
                field,
                in_usage,
            });
        }
    }),
    ("vision", |cx, node, s| {
        use super::values::{Number, DURATION_OR_ZERO};
        use std::time::Duration;
        let usage = "vision patch=28 encode=\"20ms\" per-token=\"50us\" audio-tokens=25";
        cx.no_children(node);
        cx.check_entries(
            node,
            0,
            &["patch", "encode", "per-token", "audio-tokens"],
            usage,
        );
        let patch = cx.prop_or(node, "patch", 28, usage, Count { min: 1, max: 4096 });
        let encode = cx.prop_or(
            node,
            "encode",
            Duration::from_millis(20),
            usage,
            DURATION_OR_ZERO,
        );
        let per_token = cx.prop_or(
            node,
            "per-token",
            Duration::from_micros(50),
            usage,
            DURATION_OR_ZERO,
        );
        let audio = cx.prop_or(
            node,
            "audio-tokens",
            25.0,
            usage,
            Number {
                positive: true,
                max: 10_000.0,
            },
        );
        if let (Some(patch), Some(encode), Some(per_token), Some(audio)) =
            (patch, encode, per_token, audio)
        {
            s.sim.vision = Some(crate::plan::Vision {
                patch: patch as u32,
                encode,
                per_token,
                audio_tokens_per_second: audio,
            });
        }
    }),
    ("gpu", |cx, node, s| {
        use super::values::{ByteSize, Quantity};
        let usage = "gpu count=1 idle=\"70W\" prefill=\"0.2mJ\" decode=\"0.3J\" memory=\"80GiB\"";
        cx.no_children(node);
        cx.check_entries(
            node,
            0,
            &["count", "idle", "prefill", "decode", "memory"],
            usage,
        );
        let count = cx.prop_or(node, "count", 1, usage, Count { min: 1, max: 64 });
        let watts = Quantity { symbol: "W" };
        let joules = Quantity { symbol: "J" };
        let idle = cx.prop_or(node, "idle", 70.0, usage, watts);
        let prefill = cx.prop_or(node, "prefill", 0.0002, usage, Quantity { symbol: "J" });
        let decode = cx.prop_or(node, "decode", 0.3, usage, joules);
        let memory = cx.prop_or(
            node,
            "memory",
            80 << 30,
            usage,
            ByteSize {
                min: 1 << 30,
                max: 1 << 40,
            },
        );
        if let (Some(count), Some(idle_w), Some(prefill_j), Some(decode_j), Some(memory)) =
            (count, idle, prefill, decode, memory)
        {
            s.sim.gpu = Some(crate::plan::Gpu {
                count: count as u32,
                idle_w,
                prefill_j,
                decode_j,
                memory_mib: memory >> 20,
            });
        }
    }),
    ("rate-limit", |cx, node, s| {
        let usage =
            "rate-limit rpm=500 tpm=200000 burst=\"60s\" (a hosted API's limits per minute)";
        cx.no_children(node);
        cx.check_entries(node, 0, &["rpm", "tpm", "burst"], usage);
        let minute = std::time::Duration::from_secs(60);
        let burst = cx.prop_or(node, "burst", minute, usage, DURATION);
        if burst.is_some_and(|burst| burst > minute) {
            cx.error(
                property(node, "burst").map_or(node.span(), |e| e.span()),
                "a bucket holds at most a minute's budget",
                "over a minute",
                "write burst=\"60s\" or less",
            );
        }
        let (rpm, tpm) = super::target::budgets_per_minute(cx, node, usage);
        s.sim.rate_limit = Some(crate::plan::RateLimits {
            rpm,
            tpm,
            burst: burst.unwrap_or(minute).min(minute),
        });
    }),
    ("models", |cx, node, s| {
        let usage =
            "models \"meta-llama/Llama-3.1-8B-Instruct\" \"qwen3-8b\" (the models it serves)";
        s.sim.models = model_names(cx, node, usage);
    }),
    ("answer-as", |cx, node, s| {
        let usage = "answer-as \"gpt-4o-2024-08-06\" (the models its answers name, in turn)";
        s.sim.answer_as = model_names(cx, node, usage);
    }),
    ("api-key", |cx, node, s| {
        let usage = "api-key env=\"SIM_API_KEY\"";
        s.sim.api_key_env = super::target::key_variable(cx, node, usage);
    }),
    ("tool-rounds", |cx, node, s| {
        let usage = "tool-rounds 2 (tool calls in a row before an answer in words; 0 never calls)";
        if let Some(n) = cx.single(node, usage, Count { min: 0, max: 1000 }) {
            s.sim.tool_rounds = n as u32;
        }
    }),
    ("seed", |cx, node, s| {
        if let Some(seed) = cx.single(node, "seed 7", Seed) {
            s.sim.seed = seed;
            s.seeded = true;
        }
    }),
];

/// A node's model names (`models`, `answer-as`): at least one.
fn model_names(cx: &mut Cx, node: &KdlNode, usage: &str) -> Vec<String> {
    cx.no_children(node);
    cx.check_entries(node, usize::MAX, &[], usage);
    let names: Vec<String> = positional(node)
        .filter_map(|entry| Text.read(cx, entry, usage))
        .collect();
    if names.is_empty() {
        cx.error(
            node.name().span(),
            format!("`{}` names no model", node.name().value()),
            "no model",
            usage,
        );
    }
    names
}

/// A whole-number engine knob: `count_knob!(field, min, max)`.
macro_rules! count_knob {
    ($field:ident, $min:expr, $max:expr) => {
        |cx: &mut Cx, node: &KdlNode, engine: &mut EngineSettings| {
            let usage = format!("{} 64 (see docs/simulator.md)", node.name().value());
            let kind = Count {
                min: $min,
                max: $max,
            };
            if let Some(n) = cx.single(node, &usage, kind) {
                engine.$field = n.try_into().unwrap_or(engine.$field);
            }
        }
    };
}

/// A duration engine knob (may be zero).
macro_rules! cost_knob {
    ($field:ident) => {
        |cx: &mut Cx, node: &KdlNode, engine: &mut EngineSettings| {
            let usage = format!("{} \"50us\" (see docs/simulator.md)", node.name().value());
            if let Some(d) = cx.single(node, &usage, DURATION_OR_ZERO) {
                engine.$field = d;
            }
        }
    };
}

const ENGINE: &[(&str, Handler<EngineSettings>)] = &[
    ("max-seqs", count_knob!(max_seqs, 1, 100_000)),
    (
        "max-batched-tokens",
        count_knob!(max_batched_tokens, 1, 1 << 24),
    ),
    ("kv-cache-tokens", count_knob!(kv_cache_tokens, 1, 1 << 40)),
    ("block-size", count_knob!(block_size, 1, 1 << 20)),
    ("prefix-cache", |cx, node, engine| {
        if let Some(on) = cx.single(node, "prefix-cache #false", super::values::Flag) {
            engine.prefix_cache = on;
        }
    }),
    ("max-model-len", count_knob!(max_model_len, 1, 1 << 24)),
    ("max-waiting", count_knob!(max_waiting, 0, 10_000_000)),
    ("queue-full-status", |cx, node, engine| {
        let usage = "queue-full-status 503";
        let status = cx.single(node, usage, Count { min: 0, max: 999 });
        match status {
            Some(status @ (429 | 503)) => engine.queue_full_status = status as u16,
            Some(_) => cx.error(
                node.entries().first().map_or(node.span(), |e| e.span()),
                "a full queue answers 429 or 503",
                "not 429 or 503",
                "write it as: queue-full-status 503",
            ),
            None => {}
        }
    }),
    ("step-base", cost_knob!(step_base)),
    ("prefill-per-token", cost_knob!(prefill_per_token)),
    ("decode-per-seq", cost_knob!(decode_per_seq)),
    ("attention-per-token", cost_knob!(attention_per_token)),
];

/// A fault that strikes a share of requests: `rate_fault!(field)`.
macro_rules! rate_fault {
    ($field:ident) => {
        |cx: &mut Cx, node: &KdlNode, faults: &mut Faults| {
            let usage = format!("{} \"1%\"", node.name().value());
            if let Some(rate) = cx.single(node, &usage, Percent) {
                faults.$field = rate;
            }
        }
    };
}

const FAULTS: &[(&str, Handler<Faults>)] = &[
    ("http-5xx", rate_fault!(http_5xx)),
    ("http-429", rate_fault!(http_429)),
    ("overloaded", rate_fault!(overloaded)),
    ("drop-mid-stream", rate_fault!(drop_mid_stream)),
    ("malformed-chunk", rate_fault!(malformed_chunk)),
    ("stall", |cx, node, faults| {
        let usage = "stall \"2s\" at-token=10 rate=\"5%\"";
        cx.no_children(node);
        cx.check_entries(node, 1, &["at-token", "rate"], usage);
        let duration = cx.arg(node, usage, DURATION);
        let at_token = cx.prop_or(node, "at-token", 1, usage, Count::positive(u32::MAX as u64));
        let rate = cx.prop_or(node, "rate", 1.0, usage, Percent);
        if let (Some(duration), Some(at_token), Some(rate)) = (duration, at_token, rate) {
            faults.stall = Some(Stall {
                duration,
                at_token: at_token as u32,
                rate,
            });
        }
    }),
    ("slow-headers", |cx, node, faults| {
        let usage = "slow-headers \"500ms\" rate=\"10%\"";
        cx.no_children(node);
        cx.check_entries(node, 1, &["rate"], usage);
        let delay = cx.arg(node, usage, DURATION);
        let rate = cx.prop_or(node, "rate", 1.0, usage, Percent);
        if let (Some(delay), Some(rate)) = (delay, rate) {
            faults.slow_headers = Some(SlowHeaders { delay, rate });
        }
    }),
];

/// The `sim` node: its settings, and whether it set its own seed.
pub(super) fn sim(cx: &mut Cx, node: &KdlNode) -> (SimSettings, bool) {
    cx.no_args(node, "sim { ttft \"50ms\"; itl \"10ms\" }");
    let mut fields = Fields {
        sim: SimSettings::default(),
        seeded: false,
    };
    if let Some(child) = children(node)
        .iter()
        .find(|c| c.name().value() == "profile")
    {
        let usage = "profile \"llama-3.1-8b-h100\"";
        if let Some(name) = cx.single(child, usage, Text) {
            match profiles::builtin(&name) {
                Some(engine) => fields.sim.engine = Some(engine),
                None => cx.error(
                    child.entries().first().map_or(child.span(), |e| e.span()),
                    format!("no built-in profile is named \"{name}\""),
                    "unknown profile",
                    format!("built-in profiles: {}", profiles::NAMES.join(", ")),
                ),
            }
        }
    }
    cx.walk(node, "in `sim`", CHILDREN, &mut fields);
    (fields.sim, fields.seeded)
}
