//! A real byte-level BPE `tokenizer.json` of 32,000 merges, trained here (by the `tokenizers`
//! crate llmload loads them with) on text made here from a seed, so that tests and benchmarks
//! measure a BPE file like Llama 3's or Qwen's without downloading one: Llama 3's pre-tokenizer
//! pattern, byte-level alphabet and decoder, a vocabulary learned from English-like prose with
//! capitals, numbers, punctuation, code and made-up words.

use std::path::{Path, PathBuf};

use rand::{Rng, SeedableRng};
use tokenizers::models::bpe::{BpeTrainerBuilder, BPE};
use tokenizers::models::TrainerWrapper;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::{DecoderWrapper, ModelWrapper, PreTokenizerWrapper, SplitDelimiterBehavior};

/// Llama 3's pre-tokenizer pattern (tests/engines/tiny-model.py has the same).
const LLAMA3_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// Merges learned.
pub const MERGES: usize = 32_000;

/// English words the prose is mostly made of (the commonest first: drawn by a Zipf law).
const ENGLISH: &str = "the of and to a in is that it was for on are as with his they at be this from \
have or by one had not but what all were when we there can an your which their said if do will each \
about how up out them then she many some so these would other into has more her two like him see time \
could no make than first been its who now people my made over did down only way find use may water \
long little very after words called just where most know get through back much go good new write our \
me man too any day same right look think also around another came come work three word must because \
does part even place well such here take why things help put years different away again off went old \
number great tell men say small every found still between name should home big give air line set own \
under read last never us left end along while might next sound below saw something thought both few \
those always looked show large often together asked house world going want school important until form \
food keep children feet land side without boy once animals life enough took sometimes four head above \
kind began almost live page got earth need far hand high year mother light parts country father let \
night following picture being study second eyes soon times story boys since white days ever paper hard \
near sentence better best across during today others however sure means knew its try told young miles \
sun ways thing whole hear example heard several change answer room sea against top turned learn point \
city play toward five using himself usually money seen car morning body upon family later turn move \
face door cut done group true leave color red friends pulled stood run horse open fish game cold \
model server request token prompt latency memory cache queue batch stream client answer engine";

/// Code and markup the prose is sprinkled with.
const CODE: [&str; 12] = [
    "fn main() {\n    let x = 42;\n}\n",
    "for (int i = 0; i < n; i++) {",
    "def forward(self, x):\n        return x",
    "{\"role\": \"user\", \"content\": \"hi\"}",
    "SELECT id, name FROM users WHERE id = 7;",
    "<div class=\"row\">",
    "import numpy as np",
    "x += 1; y -= 2;",
    "// TODO: handle errors",
    "https://example.com/v1/chat",
    "#include <stdio.h>",
    "console.log(`value: ${v}`);",
];

/// The trained tokenizer.json, made once under `dir` and reused after.
pub fn tokenizer_json(dir: &Path) -> PathBuf {
    let path = dir.join(format!("bpe-{MERGES}-merges/tokenizer.json"));
    if path.is_file() {
        return path;
    }
    std::fs::create_dir_all(path.parent().expect("a folder")).expect("the tokenizer's folder");
    let mut tokenizer = tokenizers::Tokenizer::new(ModelWrapper::BPE(BPE::default()));
    let split = Split::new(
        SplitPattern::Regex(LLAMA3_SPLIT.to_string()),
        SplitDelimiterBehavior::Isolated,
        false,
    )
    .expect("Llama 3's pattern");
    tokenizer.with_pre_tokenizer(Some(PreTokenizerWrapper::Sequence(Sequence::new(vec![
        PreTokenizerWrapper::Split(split),
        PreTokenizerWrapper::ByteLevel(ByteLevel::new(false, true, false)),
    ]))));
    tokenizer.with_decoder(Some(DecoderWrapper::ByteLevel(ByteLevel::default())));
    let mut trainer = TrainerWrapper::BpeTrainer(
        BpeTrainerBuilder::new()
            .vocab_size(256 + MERGES)
            .min_frequency(2)
            .initial_alphabet(ByteLevel::alphabet().into_iter().collect())
            .show_progress(false)
            .build(),
    );
    tokenizer
        .train(&mut trainer, corpus(60_000).into_iter())
        .expect("training");
    // Written whole, then moved: tests running at once see the file complete or not at all.
    let part = path.with_extension(format!("part{}", std::process::id()));
    tokenizer.save(&part, false).expect("tokenizer.json");
    std::fs::rename(&part, &path).expect("tokenizer.json in place");
    path
}

/// `lines` lines of seeded text: sentences of English words (Zipf-distributed), made-up words,
/// numbers, punctuation, and lines of code.
fn corpus(lines: usize) -> Vec<String> {
    let english: Vec<&str> = ENGLISH.split_whitespace().collect();
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(0xb9e);
    let syllables = [
        "ka", "lo", "mi", "zu", "ter", "an", "vel", "or", "is", "qua", "dra", "ne", "sh", "ium",
        "pre", "con", "ed", "ing", "st", "ra", "bo", "ly", "tion", "ex",
    ];
    let made_up: Vec<String> = (0..80_000)
        .map(|_| {
            (0..rng.random_range(2..5))
                .map(|_| syllables[rng.random_range(0..syllables.len())])
                .collect()
        })
        .collect();
    let word = |rng: &mut rand_chacha::ChaCha8Rng| -> String {
        // Zipf-like: the commonest words most often; three in ten made up.
        if rng.random_bool(0.3) {
            return made_up[rng.random_range(0..made_up.len())].clone();
        }
        let rank = (english.len() as f64).powf(rng.random::<f64>()) as usize - 1;
        english[rank.min(english.len() - 1)].to_string()
    };
    (0..lines)
        .map(|_| {
            if rng.random_bool(0.1) {
                return CODE[rng.random_range(0..CODE.len())].to_string();
            }
            let mut line = String::new();
            for sentence in 0..rng.random_range(1..4) {
                if sentence > 0 {
                    line.push(' ');
                }
                let words = rng.random_range(4..20);
                for at in 0..words {
                    let mut w = word(&mut rng);
                    if at == 0 {
                        w = w[..1].to_uppercase() + &w[1..];
                    } else {
                        line.push(' ');
                    }
                    line.push_str(&w);
                    match rng.random_range(0..40) {
                        0 => line.push(','),
                        1 => line.push_str(&format!(" {}", rng.random_range(0..5000))),
                        2 => line.push_str("'s"),
                        _ => {}
                    }
                }
                line.push(['.', '?', '!', ':'][rng.random_range(0..4)]);
            }
            line
        })
        .collect()
}
