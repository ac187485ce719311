//! Micro-benchmarks of the client's hot paths: building a request's body (a 2,048-token prompt
//! and its JSON), reading a stream (SSE parsing and chunk handling), recording a finished
//! request (token attribution and its JSON line), counting prompts' tokens, and aggregating
//! records (in memory and streamed from a file).
//!
//! `cargo bench --bench hot_paths` (optionally followed by `-- NAME` to run the benchmarks whose
//! name contains NAME). A hand-written loop rather than a benchmark framework: each case runs
//! for about a second after a warm-up and reports the time per iteration and per token; the
//! numbers are recorded in docs/performance.md.

use std::hint::black_box;
use std::time::{Duration, Instant};

use llmload::api::sse::SseParser;
use llmload::executor::recorder::{finalize, Finished, COUNT_BUDGET};
use llmload::executor::request::Exchange;
use llmload::plan::TokenizerSpec;
use llmload::planner::ScheduledRequest;
use llmload::records::{LogLine, RequestRecord, RunLog, TokenSource};
use llmload::tokens::Tokenizer;

#[path = "../tests/common/mod.rs"]
mod common;

/// Prose as datasets hold it and real servers answer: capitals, punctuation, digits, newlines.
const PROSE: &str = "The 3 engines ran at 4,096 tokens; each one, as its log said, answered \
                     within 50 ms.\nThen the queue grew: requests waited (some 2.5 s) before the \
                     scheduler took them. ";

/// Tokens in the benchmark's stream.
const TOKENS: usize = 512;

/// Runs `body` repeatedly for about a second; returns the mean time per call.
fn measure(mut body: impl FnMut()) -> Duration {
    let warm_up = Instant::now();
    while warm_up.elapsed() < Duration::from_millis(200) {
        body();
    }
    let mut iterations = 0u64;
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(1) {
        body();
        iterations += 1;
    }
    start.elapsed() / iterations.max(1) as u32
}

fn report(name: &str, per_iteration: Duration, tokens: usize) {
    let per_token_ns = per_iteration.as_nanos() as f64 / tokens.max(1) as f64;
    println!(
        "{name:<44} {:>12.1} µs/iter {:>10.1} ns/token {:>12.0} tokens/s",
        per_iteration.as_nanos() as f64 / 1000.0,
        per_token_ns,
        1e9 / per_token_ns
    );
}

/// The bytes of a streamed chat completion as vLLM sends it (its fields, nulls included): a
/// role chunk, one chunk per token, a finish chunk, a usage chunk and [DONE].
fn stream_bytes() -> Vec<u8> {
    let mut out = String::new();
    let head = r#"{"id":"chatcmpl-5d0e6b1f9c2a4e8b8f3a7c1d2e4f6a8b","object":"chat.completion.chunk","created":1764560000,"model":"meta-llama/Llama-3.1-8B-Instruct","system_fingerprint":null,"choices":[{"index":0,"delta":"#;
    let tail =
        |finish: &str| format!(",\"logprobs\":null,\"finish_reason\":{finish}}}],\"usage\":null}}");
    out.push_str(&format!(
        "data: {head}{{\"role\":\"assistant\",\"content\":\"\"}}{}\n\n",
        tail("null")
    ));
    for i in 0..TOKENS {
        out.push_str(&format!(
            "data: {head}{{\"content\":\" word{}\"}}{}\n\n",
            i % 97,
            tail("null")
        ));
    }
    out.push_str(&format!("data: {head}{{}}{}\n\n", tail("\"length\"")));
    out.push_str(&format!(
        "data: {{\"id\":\"chatcmpl-1\",\"choices\":[],\"usage\":{{\"prompt_tokens\":128,\"completion_tokens\":{TOKENS}}}}}\n\n"
    ));
    out.push_str("data: [DONE]\n\n");
    out.into_bytes()
}

/// The same stream cut into reads the way a socket hands them over: one event per read.
fn reads(bytes: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    let mut start = 0;
    for end in 0..bytes.len().saturating_sub(1) {
        if bytes[end] == b'\n' && bytes[end + 1] == b'\n' {
            out.push(&bytes[start..end + 2]);
            start = end + 2;
        }
    }
    out
}

fn read_stream(reads: &[&[u8]]) -> Exchange {
    let mut parser = SseParser::new();
    let mut exchange = Exchange::default();
    let mut last_usage = 0;
    let dialect = llmload::plan::Api::Chat.dialect();
    for (i, read) in reads.iter().enumerate() {
        let _ = parser.feed(read, |event| {
            exchange.on_event(
                dialect,
                event.data,
                event.name,
                i as u64 * 10,
                &mut last_usage,
            )
        });
    }
    exchange
}

fn record(tokens: usize, seq: u64) -> RequestRecord {
    RequestRecord {
        seq,
        intended_send_us: seq * 1000,
        actual_send_us: seq * 1000 + 150,
        input_tokens_planned: 128,
        output_tokens_planned: tokens as u32,
        prompt_seed: seq,
        http_status: Some(200),
        ttft_us: Some(50_000),
        e2e_us: Some(50_000 + 10_000 * tokens as u64),
        chunks: (0..tokens as u64)
            .map(|i| (50_000 + i * 10_000, 1))
            .collect(),
        chunk_tokens: Some(TokenSource::OnePerChunk),
        prompt_tokens: Some(128),
        completion_tokens: Some(tokens as u64),
        token_source: Some(TokenSource::Usage),
        completion_tokens_tokenizer: Some(tokens as u64),
        finish_reason: Some("length".into()),
        ..RequestRecord::default()
    }
}

fn run_log(requests: u64, tokens: usize) -> RunLog {
    let lines = [
        r#"{"event":"run","tool_version":"b","plan":"b","plan_file":"b.kdl","plan_sha256":"0","seed":1,"target":"t","model":"m","api":"chat","stream":true,"exact_output":true,"tokenizer":"cl100k_base","started_at":"x","client_host":"h"}"#,
        r#"{"event":"phase_start","index":0,"name":"steady","record":true,"load":"rate 10/s poisson","open_loop":true,"planned_rate":10.0,"planned_requests":null,"planned_duration_s":null,"at_us":0}"#,
    ];
    let mut log = RunLog::default();
    for line in lines {
        log.push(serde_json::from_str(line).expect("a log line"));
    }
    for seq in 0..requests {
        log.records.push(record(tokens, seq));
    }
    log
}

fn main() {
    let filter: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let wanted = |name: &str| filter.is_empty() || filter.iter().any(|f| name.contains(f));
    let tokenizer = Tokenizer::load(&TokenizerSpec::Builtin("cl100k_base".into()))
        .expect("the cl100k_base tokenizer");

    let bytes = stream_bytes();
    let stream_reads = reads(&bytes);
    if wanted("sse_parse") {
        let time = measure(|| {
            let mut parser = SseParser::new();
            let mut events = 0usize;
            for read in &stream_reads {
                let _ = parser.feed(read, |event| events += event.data.len());
            }
            black_box(events);
        });
        report("sse_parse (events only)", time, TOKENS);
    }
    if wanted("read_stream") {
        let time = measure(|| {
            black_box(read_stream(&stream_reads));
        });
        report(
            "read_stream (SSE + chunk JSON, one read/event)",
            time,
            TOKENS,
        );
        let whole = [&bytes[..]];
        let time = measure(|| {
            black_box(read_stream(&whole));
        });
        report("read_stream (SSE + chunk JSON, one read)", time, TOKENS);
    }
    if wanted("record") {
        let exchange = read_stream(&stream_reads);
        // With the server's usage (one token per chunk), and without (the tokenizer counts).
        for (name, usage) in [
            ("record (usage given: JSON line)", exchange.usage),
            ("record (no usage: tokenize + JSON line)", None),
        ] {
            let request = ScheduledRequest {
                seq: 1,
                intended_offset_us: Some(0),
                input_tokens: 128,
                output_tokens: TOKENS as u32,
                prompt_seed: 7,
                prefix_group: None,
                origin: Default::default(),
                turn: None,
                conversation: None,
                turn_kind: None,
                batch: 0,
                media: Default::default(),
            };
            let time = measure(|| {
                let copy = Exchange {
                    chunk_times: exchange.chunk_times.clone(),
                    chunk_usage_tokens: vec![0; exchange.chunk_times.len()],
                    text: exchange.text.clone(),
                    chunk_ends: exchange.chunk_ends.clone(),
                    usage,
                    finish_reason: exchange.finish_reason.clone(),
                    done: true,
                    ..Exchange::default()
                };
                let record = finalize(
                    Finished {
                        phase: 0,
                        request,
                        intended_send_us: 0,
                        actual_send_us: 10,
                        exchange: copy,
                        room: None,
                    },
                    &tokenizer,
                    COUNT_BUDGET,
                );
                let mut line = Vec::with_capacity(16 * 1024);
                serde_json::to_writer(&mut line, &LogLine::Request(record)).expect("JSON");
                black_box(line);
            });
            report(name, time, TOKENS);
        }
    }
    if wanted("body") {
        // A closed loop of 2,048-token prompts builds one of each per request (issue 31's
        // send-path scenario): the prompt's words, then the completions body around it.
        let mut seed = 0u64;
        let time = measure(|| {
            seed += 1;
            black_box(tokenizer.prompt(2048, seed));
        });
        report("body: a 2,048-token prompt", time, 2048);
        // The dialect's own body, as a run's request template builds it.
        let completions = llmload::plan::Api::Completions.dialect();
        let options = llmload::api::BodyOptions {
            model: "model".into(),
            stream: true,
            continuous_usage: false,
            ignore_eos: true,
            extra: Default::default(),
        };
        let prompt = llmload::planner::Prompt::Text(tokenizer.prompt(2048, 1));
        let time = measure(|| {
            black_box(completions.body(&prompt, 64, &options));
        });
        report("body: its completions body (JSON)", time, 2048);
    }
    if wanted("count") {
        // What the simulator does to every prompt before it answers (and the recorder to an
        // answer without usage): count a long prompt, with the plain words cut out of the
        // regex's way, and through tiktoken-rs alone as before.
        let bpe = tiktoken_rs::cl100k_base_singleton();
        let prose = PROSE.repeat(400);
        for (name, text) in [
            (
                "count: a 131,072-token prompt",
                tokenizer.prompt(131_072, 3),
            ),
            ("count: 2,048-token prompt", tokenizer.prompt(2048, 3)),
            ("count: prose", prose),
        ] {
            let tokens = tokenizer.count(&text);
            assert_eq!(tokens, bpe.encode_ordinary(&text).len(), "{name}");
            let time = measure(|| {
                black_box(tokenizer.count(&text));
            });
            report(name, time, tokens);
            let time = measure(|| {
                black_box(bpe.encode_ordinary(&text).len());
            });
            report(&format!("{name} (regex)"), time, tokens);
        }
    }
    if wanted("tokenizers") {
        tokenizers();
    }
    if wanted("aggregate") {
        let log = run_log(1000, 64);
        let time = measure(|| {
            black_box(llmload::metrics::compute(&log, None));
        });
        report("aggregate in memory (1,000 × 64 tokens)", time, 64_000);
        let dir = std::env::temp_dir().join(format!("llmload-bench-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a temp dir");
        let path = dir.join("records.jsonl");
        let mut text = String::new();
        text.push_str(
            &serde_json::to_string(&LogLine::Run(llmload::records::RunLine::current(
                log.header.clone().unwrap(),
            )))
            .unwrap(),
        );
        text.push('\n');
        text.push_str(&serde_json::to_string(&LogLine::PhaseStart(log.phases[0].clone())).unwrap());
        text.push('\n');
        for record in &log.records {
            text.push_str(&serde_json::to_string(&LogLine::Request(record.clone())).unwrap());
            text.push('\n');
        }
        std::fs::write(&path, &text).expect("records.jsonl");
        let time = measure(|| {
            black_box(llmload::metrics::compute_file(&path, None).expect("aggregates"));
        });
        report("aggregate streamed from records.jsonl", time, 64_000);
        println!(
            "{:<44} {:>12} bytes/request (64 one-token chunks)",
            "records.jsonl size",
            text.len() / log.records.len()
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
    if wanted("media") {
        // What a multimodal request costs the body builder's thread before its send.
        use llmload::plan::ImageFormat;
        use llmload::planner::media::encode_image;
        for (width, height, format, name) in [
            (
                512,
                512,
                ImageFormat::Jpeg { quality: 85 },
                "image 512x512 JPEG q85",
            ),
            (
                1280,
                720,
                ImageFormat::Jpeg { quality: 85 },
                "image 1280x720 JPEG q85",
            ),
            (1280, 720, ImageFormat::Png, "image 1280x720 PNG"),
        ] {
            let mut seed = 0u64;
            let mut bytes = 0usize;
            let time = measure(|| {
                seed += 1;
                bytes = black_box(encode_image(width, height, format, seed)).len();
            });
            println!(
                "{:<44} {:>9.2} ms/image {:>9} KiB",
                name,
                time.as_secs_f64() * 1e3,
                bytes / 1024
            );
        }
    }
}

/// Prompts under each kind of tokenizer: the built-in encoding, the tests' word-level
/// tokenizer.json and a byte-level BPE of 32,000 merges (tests/common/bpe.rs): loading it (with
/// the check of which words never merge), building prompts of 128 and 2,048 tokens by
/// construction (one in 256 counted again), and what counting one costs (the tokenizer itself,
/// as every prompt cost before, and a run of known words).
fn tokenizers() {
    let tmp = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"));
    let specs = [
        ("cl100k_base", TokenizerSpec::Builtin("cl100k_base".into())),
        (
            "word-level file",
            TokenizerSpec::File(
                std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join("tests/fixtures/word-level-tokenizer.json"),
            ),
        ),
        (
            "BPE file (32k merges)",
            TokenizerSpec::File(common::bpe::tokenizer_json(tmp)),
        ),
    ];
    // `LLMLOAD_BENCH_TOKENIZER=path/to/tokenizer.json` adds a model's own (Llama 3's, say).
    let extra = std::env::var_os("LLMLOAD_BENCH_TOKENIZER")
        .map(|path| ("LLMLOAD_BENCH_TOKENIZER", TokenizerSpec::File(path.into())));
    for (name, spec) in specs.into_iter().chain(extra) {
        let started = Instant::now();
        let tokenizer = Tokenizer::load(&spec).expect("a tokenizer");
        println!(
            "{name}: loaded in {:.1} ms, {} words, by construction: {}",
            started.elapsed().as_secs_f64() * 1000.0,
            tokenizer.single_token_words().len(),
            tokenizer.prompts_by_construction()
        );
        let whole = match &spec {
            TokenizerSpec::File(path) => tokenizers::Tokenizer::from_file(path).ok(),
            TokenizerSpec::Builtin(_) => None,
        };
        if let Some(whole) = &whole {
            // Exact, as tests/workloads.rs checks the tests' files: 10,000 prompts encoded.
            for seed in 0..10_000u64 {
                let tokens = [1u32, 7, 128, 2048][seed as usize % 4];
                let prompt = tokenizer.prompt(tokens, seed);
                let encoded = whole.encode(prompt.as_str(), false).expect("encoded").len();
                assert_eq!(encoded, tokens as usize, "{name}: {prompt:?}");
            }
            println!("{name}: 10,000 prompts of 1 to 2,048 tokens, each exact");
        }
        // What the recorder counts where usage is missing or cross-checked.
        let prose = PROSE.repeat(20);
        let tokens = tokenizer.count(&prose);
        let time = measure(|| {
            black_box(tokenizer.count(&prose));
        });
        report(&format!("{name}: count prose"), time, tokens);
        if let TokenizerSpec::File(path) = &spec {
            let whole = tokenizers::Tokenizer::from_file(path).expect("the file");
            let time = measure(|| {
                black_box(whole.encode(prose.as_str(), false).map(|e| e.len()).ok());
            });
            report(&format!("{name}: count prose (with offsets)"), time, tokens);
        }
        for tokens in [128u32, 2048] {
            let mut seed = 0u64;
            let time = measure(|| {
                seed += 1;
                black_box(tokenizer.prompt(tokens, seed));
            });
            report(
                &format!("{name}: a {tokens}-token prompt"),
                time,
                tokens as usize,
            );
            let text = tokenizer.prompt(tokens, 7);
            let time = measure(|| {
                black_box(tokenizer.count(&text));
            });
            report(&format!("{name}: count it"), time, tokens as usize);
            if let Some(whole) = &whole {
                assert_eq!(
                    whole.encode(text.as_str(), false).unwrap().len(),
                    tokens as usize
                );
                let time = measure(|| {
                    black_box(whole.encode(text.as_str(), false).map(|e| e.len()).ok());
                });
                report(
                    &format!("{name}: count it (encoded)"),
                    time,
                    tokens as usize,
                );
            }
        }
    }
}
