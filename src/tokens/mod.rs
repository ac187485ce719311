//! Tokenizers and synthetic prompts.
//!
//! Counts tokens the way the plan's tokenizer does (a built-in tiktoken encoding, or a Hugging
//! Face `tokenizer.json` on disk) and builds prompts of an exact token length from a seed, with no
//! network. It is a support module: the executor uses it to build prompts and the recorder to
//! count tokens where a server sends no usage; it knows nothing of plans or schedules.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::error::{Error, Result};

mod compose;
mod plain;

#[derive(Debug, Clone, PartialEq, Eq)]
/// The tokenizer a plan names (`tokenizer` in its workload).
pub enum TokenizerSpec {
    /// A tokenizer built into the binary (`cl100k_base`, `o200k_base`).
    Builtin(String),
    /// A Hugging Face `tokenizer.json` on disk.
    File(std::path::PathBuf),
}

impl std::fmt::Display for TokenizerSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TokenizerSpec::Builtin(name) => f.write_str(name),
            TokenizerSpec::File(path) => write!(f, "{}", path.display()),
        }
    }
}

/// A tokenizer that counts tokens and knows which words are exactly one token.
pub struct Tokenizer {
    name: String,
    backend: Backend,
    /// Words (with a leading space) that are one token each under this tokenizer; prompts and the
    /// simulator's output are built from them so that lengths come out exact.
    single_token_words: Vec<String>,
    /// A run of these words is exactly one token per word, without counting (see `prompt`):
    /// proved for the built-in encodings ([`plain`]), checked for a `tokenizer.json`
    /// ([`compose`]).
    words_never_merge: bool,
    /// Those words with their ids: under a built-in encoding the ones it counts without its
    /// regex ([`plain`]), under a `tokenizer.json` the ones a run of which it counts without
    /// encoding it ([`compose`]).
    known_words: plain::Known,
    /// Prompts built by construction so far, which picks the ones counted again (see `prompt`).
    built: AtomicU64,
    /// A prompt built by construction was counted and found off: every prompt is counted since.
    construction_off: AtomicBool,
}

enum Backend {
    Tiktoken(&'static tiktoken_rs::CoreBPE),
    HuggingFace(Box<tokenizers::Tokenizer>),
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Tokenizer({})", self.name)
    }
}

/// One in this many prompts of a `tokenizer.json` built by construction is counted again
/// (`Tokenizer::recount`). A BPE file counts 2,048 tokens in 2.45 ms, 85 prompts' building: at
/// one in 256 the counts were a third of the cost of a 2,048-token prompt (and 256 streams of
/// them delivered 0.55× the ideal client's tokens per CPU-second); at one in 1,024, a tenth.
const RECOUNT_EVERY: u64 = 1024;

/// The longest piece of text counted at once (see [`Tokenizer::count`]).
pub const COUNT_PIECE_BYTES: usize = 16 * 1024;

/// The period, in characters, of the tokens of a long run of one character under the built-in
/// encodings (see `Tokenizer::count_run`).
const RUN_PERIOD: usize = 768;

/// Where to cut `text` so the first piece is at most `max` bytes: just before a white-space
/// character in the last eighth of that, else at the last character boundary.
fn piece_end(text: &str, max: usize) -> usize {
    if text.len() <= max {
        return text.len();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let window = &text[end - (max / 8).min(end)..end];
    match window.rfind(char::is_whitespace) {
        Some(at) if at > 0 => end - window.len() + at,
        _ => end,
    }
}

/// `text` in pieces of at most [`COUNT_PIECE_BYTES`], cut where [`piece_end`] says.
fn pieces(mut rest: &str) -> impl Iterator<Item = &str> {
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let (piece, tail) = rest.split_at(piece_end(rest, COUNT_PIECE_BYTES));
        rest = tail;
        Some(piece)
    })
}

/// Common English words; the ones that are a single token under the chosen tokenizer are kept.
const WORDS: &str = "the of and to in is was for that with as on by at from his her an are be this which \
or had it not but were have their one all they has been would new more other first its after when who \
two also into time only some than these can may most over made such years many under about there out then \
would them between state world city during while later where people both called area since year through being \
back known same each just well used including life however both three part because war first high during \
group name work school end following around early found long last second against before what government \
music against small team history house local water light river river family play year great left game \
side line place four even north south east west old big good set number book power story field open road \
began public march june july april march body point country half night order three hand five days week \
best free form head hold human land love mind move music office paper party plan press price real room \
round rule sea shot sound space star stone street system table term test town tree true turn voice wall \
way white wind window word young green blue red black gold silver train ship plane car horse bird fish \
dog cat king queen army force sun moon rain snow fire earth air food bread milk tea wine glass door floor \
garden field farm market bank church club court camp post fort port bay lake hill mountain valley island";

/// Where the Hugging Face cache keeps models, as the `huggingface_hub` library looks for it:
/// `$HF_HUB_CACHE`, else `$HF_HOME/hub`, else `$XDG_CACHE_HOME/huggingface/hub`, else
/// `~/.cache/huggingface/hub`.
pub fn hf_hub_cache() -> Option<std::path::PathBuf> {
    let var = |name: &str| {
        std::env::var_os(name)
            .filter(|v| !v.is_empty())
            .map(std::path::PathBuf::from)
    };
    var("HF_HUB_CACHE")
        .or_else(|| var("HF_HOME").map(|home| home.join("hub")))
        .or_else(|| var("XDG_CACHE_HOME").map(|cache| cache.join("huggingface").join("hub")))
        .or_else(|| var("HOME").map(|home| home.join(".cache").join("huggingface").join("hub")))
}

/// The `tokenizer.json` of model `id` (`org/name`) in the Hugging Face cache under `hub`: the
/// snapshot `refs/main` names, else the newest snapshot that has one. Never downloads; `Err`
/// holds where it looked.
pub fn hf_cached_tokenizer(
    hub: &Path,
    id: &str,
) -> std::result::Result<std::path::PathBuf, Vec<std::path::PathBuf>> {
    let model = hub.join(format!("models--{}", id.replace('/', "--")));
    let snapshots = model.join("snapshots");
    let main = crate::files::read_text_bounded(&model.join("refs").join("main"), 4096)
        .ok()
        .map(|rev| snapshots.join(rev.trim()).join("tokenizer.json"));
    if let Some(path) = main.as_ref().filter(|p| p.is_file()) {
        return Ok(path.clone());
    }
    let newest = std::fs::read_dir(&snapshots).ok().and_then(|entries| {
        entries
            .flatten()
            .map(|entry| entry.path().join("tokenizer.json"))
            .filter(|path| path.is_file())
            .max_by_key(|path| std::fs::metadata(path).and_then(|m| m.modified()).ok())
    });
    newest.ok_or_else(|| {
        let mut looked = Vec::new();
        looked.extend(main);
        looked.push(snapshots.join("*").join("tokenizer.json"));
        looked
    })
}

impl Tokenizer {
    /// A built-in encoding (`cl100k_base`, `o200k_base`).
    pub fn builtin(name: &str) -> Result<Tokenizer> {
        let bpe = match name {
            "cl100k_base" => tiktoken_rs::cl100k_base_singleton(),
            "o200k_base" => tiktoken_rs::o200k_base_singleton(),
            other => {
                return Err(Error::usage(format!(
                    "unknown built-in tokenizer \"{other}\" (built in: cl100k_base, o200k_base)"
                )))
            }
        };
        Ok(Tokenizer::with_backend(
            name.to_string(),
            Backend::Tiktoken(bpe),
        ))
    }

    /// A Hugging Face `tokenizer.json`.
    pub fn from_file(path: &Path) -> Result<Tokenizer> {
        let cannot = |err: &dyn std::fmt::Display| {
            Error::usage(format!("cannot load tokenizer {}: {err}", path.display()))
        };
        // The largest tokenizer.json files (vocabularies of 250,000 tokens) are some 30 MB.
        let bytes = crate::files::read_bounded(path, 512 << 20).map_err(|e| cannot(&e))?;
        let inner = tokenizers::Tokenizer::from_bytes(bytes).map_err(|e| cannot(&e))?;
        Ok(Tokenizer::with_backend(
            path.display().to_string(),
            Backend::HuggingFace(Box::new(inner)),
        ))
    }

    /// Loads what a plan names.
    pub fn load(spec: &TokenizerSpec) -> Result<Tokenizer> {
        match spec {
            TokenizerSpec::Builtin(name) => Tokenizer::builtin(name),
            TokenizerSpec::File(path) => Tokenizer::from_file(path),
        }
    }

    fn with_backend(name: String, backend: Backend) -> Tokenizer {
        let mut tokenizer = Tokenizer {
            name,
            backend,
            single_token_words: Vec::new(),
            words_never_merge: false,
            known_words: plain::Known::default(),
            built: AtomicU64::new(0),
            construction_off: AtomicBool::new(false),
        };
        let mut words: Vec<String> = Vec::new();
        for word in WORDS.split_whitespace() {
            let spaced = format!(" {word}");
            if !words.contains(&spaced) && tokenizer.count(&spaced) == 1 {
                words.push(spaced);
            }
        }
        if words.is_empty() {
            // A tokenizer with no single-token English words (unlikely): fall back to letters,
            // and let the length correction in `prompt` do the rest.
            words = ('a'..='z').map(|c| format!(" {c}")).collect();
        }
        // tiktoken splits text into pieces with its pre-tokenizer pattern before any BPE merge,
        // and under every built-in encoding a space followed by lowercase ASCII letters is one
        // piece. So a run of single-token " word"s never merges: it is one token per word.
        tokenizer.words_never_merge = matches!(tokenizer.backend, Backend::Tiktoken(_))
            && words.iter().all(|w| plain::is_plain_word(w));
        match &tokenizer.backend {
            Backend::Tiktoken(bpe) => {
                let id = |word: &str| bpe.encode_ordinary(word).first().copied().unwrap_or(0);
                tokenizer.known_words = plain::Known::of(words.iter().map(String::as_str), id);
            }
            Backend::HuggingFace(inner) => {
                let encode = |text: &str| {
                    inner
                        .encode(text, false)
                        .ok()
                        .map(|encoding| encoding.get_ids().to_vec())
                };
                if let Some(stable) = compose::stable_words(&words, encode) {
                    let ids: HashMap<&str, u32> = stable
                        .words
                        .iter()
                        .map(String::as_str)
                        .zip(stable.ids)
                        .collect();
                    let known =
                        plain::Known::of(stable.words.iter().map(String::as_str), |w| ids[w]);
                    // Only words a run of which is counted from the words themselves.
                    words = stable
                        .words
                        .iter()
                        .filter(|w| known.contains(w))
                        .cloned()
                        .collect();
                    tokenizer.known_words = known;
                    tokenizer.words_never_merge = true;
                }
            }
        }
        tokenizer.single_token_words = words;
        tokenizer
    }

    /// The tokenizer's name (a built-in's name, or the file's path).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Tokens in `text`, without special tokens (no BOS), as a server counts generated text.
    ///
    /// Bounded in time and stack for any text: a server may send megabytes of one repeated
    /// character, on which the tokenizers' regex pre-splitting gives up (and panics). So long
    /// text is counted in pieces of at most [`COUNT_PIECE_BYTES`], cut at white space where
    /// there is some (where a server's tokenizer would cut a word too; a cut inside a word can
    /// add a token or two per piece), and a piece the tokenizer still cannot count is estimated
    /// at one token per four bytes rather than lose the record.
    ///
    /// The built-in encodings count the plain words of long text without their regex
    /// ([`plain`]): a 131,072-token prompt in about a millisecond instead of 78.
    pub fn count(&self, text: &str) -> usize {
        // A run of the words prompts are built of is one token per word (proved, or checked when
        // the tokenizer was loaded): the simulator's prompts and answers, counted at the speed of
        // reading them.
        let run = self
            .prompts_by_construction()
            .then(|| compose::count_known_run(text, &self.known_words));
        if let Some(Some(words)) = run {
            return words;
        }
        match self.backend {
            Backend::Tiktoken(_) => plain::count(
                text,
                &self.known_words,
                |word| self.count_unbounded(word),
                |rest| self.count_encoded(rest),
            ),
            Backend::HuggingFace(_) => self.count_encoded(text),
        }
    }

    /// Tokens in `text` as the tokenizer itself counts them, in pieces (see [`Tokenizer::count`])
    /// but never by the words it knows: what a prompt built by construction is checked against.
    fn count_encoded(&self, text: &str) -> usize {
        pieces(text).map(|piece| self.count_piece(piece)).sum()
    }

    /// Tokens in as much of `text` as can be counted before `until` (checked between pieces of
    /// at most [`COUNT_PIECE_BYTES`], so it is passed by one piece at most), and the bytes
    /// counted: a prefix of `text`, all of it when there was time.
    pub fn count_until(&self, text: &str, until: std::time::Instant) -> (usize, usize) {
        let (mut tokens, mut bytes) = (0, 0);
        for piece in pieces(text) {
            if bytes > 0 && std::time::Instant::now() >= until {
                break;
            }
            tokens += self.count_piece(piece);
            bytes += piece.len();
        }
        (tokens, bytes)
    }

    fn count_piece(&self, piece: &str) -> usize {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            self.count_run(piece)
                .unwrap_or_else(|| self.count_unbounded(piece))
        }))
        .unwrap_or_else(|_| piece.len().div_ceil(4))
    }

    /// A long run of one character, counted from two short runs: byte-pair merging is
    /// quadratic in a word's length, and the pre-tokenizers keep a run of one character in one
    /// word (16 KiB of newlines took 130 ms; 1 MiB of them 8.3 s, holding every record behind
    /// it). Under the built-in encodings a run's tokens repeat with a period that divides
    /// [`RUN_PERIOD`] characters (powers of two up to 256, digits in threes), and only the run's
    /// end differs, so a run of `q·P + r` characters is `q - 1` periods and one run of `P + r`:
    /// exact (tested for 22 characters up to 16,383 long). `None` for anything else, and for a
    /// `tokenizer.json`, whose merges promise no period.
    fn count_run(&self, piece: &str) -> Option<usize> {
        if !matches!(self.backend, Backend::Tiktoken(_)) {
            return None;
        }
        let c = piece.chars().next()?;
        let chars = piece.len() / c.len_utf8();
        if chars < 2 * RUN_PERIOD || piece.chars().any(|other| other != c) {
            return None;
        }
        let (periods, rest) = (chars / RUN_PERIOD, chars % RUN_PERIOD);
        let period = self.count_unbounded(&c.to_string().repeat(RUN_PERIOD));
        let last = self.count_unbounded(&c.to_string().repeat(RUN_PERIOD + rest));
        Some((periods - 1) * period + last)
    }

    fn count_unbounded(&self, text: &str) -> usize {
        if text.is_empty() {
            return 0;
        }
        match &self.backend {
            Backend::Tiktoken(bpe) => bpe.encode_ordinary(text).len(),
            // Without offsets, which nothing here reads: prose counted in 12% less time under a
            // BPE file, 4% under Llama 3's (hot_paths, `-- tokenizers`).
            Backend::HuggingFace(inner) => inner
                .encode_fast(text, false)
                .map(|encoding| encoding.len())
                .unwrap_or(0),
        }
    }

    /// The token ids of `text` (no special tokens), for as much of it as the tokenizer can
    /// encode in pieces (see [`Tokenizer::count`]): the simulator's prefix cache hashes them.
    pub fn ids(&self, text: &str) -> Vec<u32> {
        let run = self
            .prompts_by_construction()
            .then(|| compose::known_run_ids(text, &self.known_words));
        if let Some(Some(ids)) = run {
            return ids;
        }
        match self.backend {
            Backend::Tiktoken(bpe) => {
                let known = &self.known_words;
                plain::ids(
                    text,
                    known,
                    |word| bpe.encode_ordinary(word),
                    |rest| self.ids_whole(rest),
                )
            }
            Backend::HuggingFace(_) => self.ids_whole(text),
        }
    }

    /// [`Tokenizer::ids`] without cutting out plain words.
    fn ids_whole(&self, text: &str) -> Vec<u32> {
        let mut ids = Vec::new();
        for piece in pieces(text) {
            let encoded =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match &self.backend {
                    Backend::Tiktoken(bpe) => bpe.encode_ordinary(piece),
                    Backend::HuggingFace(inner) => inner
                        .encode_fast(piece, false)
                        .map(|e| e.get_ids().to_vec())
                        .unwrap_or_default(),
                }));
            ids.extend(encoded.unwrap_or_default());
        }
        ids
    }

    /// `text` cut to its first `tokens` tokens (the whole text when it is no longer).
    pub fn truncate(&self, text: &str, tokens: u32) -> String {
        let ids = self.ids(text);
        if ids.len() <= tokens as usize {
            return text.to_string();
        }
        // A cut inside a multi-byte character does not decode: give back up to three tokens.
        let mut keep = tokens as usize;
        loop {
            let kept = &ids[..keep];
            let decoded = match &self.backend {
                Backend::Tiktoken(bpe) => bpe.decode(kept.to_vec()).ok(),
                Backend::HuggingFace(inner) => inner.decode(kept, false).ok(),
            };
            match decoded {
                Some(text) => return text,
                None if keep > 0 && tokens as usize - keep < 3 => keep -= 1,
                None => return String::new(),
            }
        }
    }

    /// Whether a prompt built by construction, `text` of `target` tokens, was picked to be
    /// counted again and found off (then every later prompt is counted). The built-in encodings'
    /// prompts are exact by proof ([`plain`]) and never counted; a `tokenizer.json`'s were
    /// checked pair by pair ([`compose`]): one in [`RECOUNT_EVERY`] of them is counted in a
    /// release build, every one in a debug build (the tests').
    fn recount(&self, text: &str, target: usize) -> bool {
        if matches!(self.backend, Backend::Tiktoken(_)) {
            return false;
        }
        let built = self.built.fetch_add(1, Ordering::Relaxed);
        if !cfg!(debug_assertions) && built % RECOUNT_EVERY != 0 {
            return false;
        }
        self.found_off(text, target)
    }

    /// Whether the tokenizer itself counts `text` other than `target`; if so, construction is
    /// turned off for good.
    fn found_off(&self, text: &str, target: usize) -> bool {
        let off = self.count_encoded(text) != target;
        if off {
            self.construction_off.store(true, Ordering::Relaxed);
        }
        off
    }

    /// Whether prompts are exact by construction, without counting each, and a run of the known
    /// words is counted from the words: `false` when the tokenizer's words merge, or when a
    /// prompt built so was found off (then the tokenizer itself counts everything).
    pub fn prompts_by_construction(&self) -> bool {
        self.words_never_merge && !self.construction_off.load(Ordering::Relaxed)
    }

    /// Words that are one token each (with a leading space).
    pub fn single_token_words(&self) -> &[String] {
        &self.single_token_words
    }

    /// A prompt of exactly `tokens` tokens (where the tokenizer allows), different for every seed
    /// from its first word on, so that no prefix cache is hit by accident.
    pub fn prompt(&self, tokens: u32, seed: u64) -> String {
        let target = tokens as usize;
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let words = &self.single_token_words;
        let mut picked: Vec<usize> = (0..target)
            .map(|_| rng.random_range(0..words.len()))
            .collect();
        if self.prompts_by_construction() {
            // Exact by construction: no need to count (building prompts is the client's largest
            // cost per request, and counting is most of it).
            let mut text = String::with_capacity(target * 7);
            text.extend(picked.iter().map(|&i| words[i].as_str()));
            if !self.recount(&text, target) {
                return text;
            }
        }
        let mut best: Option<(usize, String)> = None;
        // Words are one token alone and almost always one token in a sequence; the loop corrects
        // the rare merges and split first words of some tokenizers.
        for _ in 0..32 {
            let text: String = picked.iter().map(|&i| words[i].as_str()).collect();
            let count = self.count(&text);
            if count == target {
                return text;
            }
            let distance = count.abs_diff(target);
            if best.as_ref().is_none_or(|(d, _)| distance < *d) {
                best = Some((distance, text));
            }
            if count > target {
                let remove = (count - target).min(picked.len());
                picked.truncate(picked.len() - remove.max(1).min(picked.len()));
            } else {
                for _ in 0..(target - count) {
                    picked.push(rng.random_range(0..words.len()));
                }
            }
        }
        best.map(|(_, text)| text).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prompts_have_exact_lengths_under_both_builtins() {
        for name in ["cl100k_base", "o200k_base"] {
            let tokenizer = Tokenizer::builtin(name).unwrap();
            assert!(tokenizer.single_token_words().len() > 100, "{name}");
            for (tokens, seed) in [(1, 1), (7, 2), (128, 3), (512, 4), (2048, 5)] {
                let prompt = tokenizer.prompt(tokens, seed);
                assert_eq!(tokenizer.count(&prompt), tokens as usize, "{name} {tokens}");
            }
        }
    }

    #[test]
    fn tiktoken_prompts_are_exact_without_counting() {
        let mut rng = ChaCha8Rng::seed_from_u64(5);
        for name in ["cl100k_base", "o200k_base"] {
            let tokenizer = Tokenizer::builtin(name).unwrap();
            assert!(tokenizer.words_never_merge, "{name}");
            for seed in 0..200 {
                let tokens = rng.random_range(1..1500);
                let prompt = tokenizer.prompt(tokens, seed);
                assert_eq!(
                    tokenizer.count(&prompt),
                    tokens as usize,
                    "{name} seed {seed}"
                );
            }
        }
    }

    #[test]
    fn prompts_differ_from_the_first_words_and_repeat_per_seed() {
        let tokenizer = Tokenizer::builtin("cl100k_base").unwrap();
        let a = tokenizer.prompt(64, 1);
        let b = tokenizer.prompt(64, 2);
        assert_eq!(a, tokenizer.prompt(64, 1));
        let prefix = |s: &str| s.split_whitespace().take(4).collect::<Vec<_>>().join(" ");
        assert_ne!(prefix(&a), prefix(&b));
    }

    #[test]
    fn counting_any_text_is_bounded_and_close() {
        let tokenizer = Tokenizer::builtin("cl100k_base").unwrap();
        // Megabytes of one character: the regex pre-split gives up on these whole.
        for text in ["a".repeat(1_100_000), "é".repeat(300_000)] {
            let started = std::time::Instant::now();
            assert!(tokenizer.count(&text) > 0);
            assert!(started.elapsed() < std::time::Duration::from_secs(20));
        }
        // Ordinary text long enough to be cut counts the same within a token per piece.
        let prose = tokenizer.prompt(20_000, 3);
        let pieces = prose.len().div_ceil(COUNT_PIECE_BYTES);
        let whole = tokenizer.count_unbounded(&prose);
        assert!(tokenizer.count(&prose).abs_diff(whole) <= pieces, "{whole}");
        let words = format!("{} {}", "a".repeat(15), "b".repeat(10));
        assert_eq!(piece_end(&words, 16), 15);
        assert_eq!(piece_end("éé", 3), 2);
    }

    #[test]
    fn unknown_builtin_is_an_error() {
        assert!(Tokenizer::builtin("gpt2-ish").is_err());
    }
}

#[cfg(test)]
mod hugging_face_tests {
    use super::*;

    /// A word-level tokenizer.json (tests/fixtures): one token per word.
    #[test]
    fn a_local_tokenizer_json_builds_exact_prompts() {
        let path =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/word-level-tokenizer.json");
        let tokenizer = Tokenizer::from_file(&path).unwrap();
        assert_eq!(tokenizer.count(" the cat of"), 3);
        assert!(tokenizer.single_token_words().len() > 40);
        for tokens in [1, 10, 300] {
            assert_eq!(
                tokenizer.count(&tokenizer.prompt(tokens, 9)),
                tokens as usize
            );
        }
        assert!(Tokenizer::from_file(Path::new("/nonexistent/tokenizer.json")).is_err());
    }

    /// A prompt found off when counted again sends the tokenizer back to counting everything:
    /// prompts still exact (by the correcting loop), runs of words counted by the encoder.
    #[test]
    fn a_recount_found_off_turns_construction_off() {
        let path =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/word-level-tokenizer.json");
        let tokenizer = Tokenizer::from_file(&path).unwrap();
        assert!(tokenizer.prompts_by_construction());
        let prompt = tokenizer.prompt(40, 1);
        assert!(!tokenizer.found_off(&prompt, 40));
        assert!(tokenizer.prompts_by_construction());
        // As if the tokenizer had counted 41: off, for good.
        assert!(tokenizer.found_off(&prompt, 41));
        assert!(!tokenizer.prompts_by_construction());
        assert_eq!(tokenizer.prompt(40, 1), prompt);
        assert_eq!(tokenizer.count(&prompt), 40);
        assert_eq!(tokenizer.ids(&prompt).len(), 40);
    }
}

#[cfg(test)]
mod run_tests {
    use super::*;

    /// A run of one character is counted from two short runs, and the count is the tokenizer's
    /// own, whatever the character and the run's length.
    #[test]
    fn a_run_of_one_character_counts_as_the_tokenizer_does() {
        let characters = [
            '\n', ' ', '\t', 'a', 'Z', '0', '1', '=', '-', '.', '*', '#', '_', 'é', '中', '😀',
        ];
        for name in ["cl100k_base", "o200k_base"] {
            let tokenizer = Tokenizer::builtin(name).unwrap();
            for c in characters {
                for chars in [
                    2 * RUN_PERIOD,
                    2 * RUN_PERIOD + 1,
                    3 * RUN_PERIOD - 1,
                    5_000,
                    16_000,
                ] {
                    let run = c.to_string().repeat(chars);
                    assert_eq!(
                        tokenizer.count_run(&run),
                        Some(tokenizer.count_unbounded(&run)),
                        "{name} {c:?} x{chars}"
                    );
                }
            }
            assert_eq!(tokenizer.count_run(&"ab".repeat(2_000)), None);
            assert_eq!(tokenizer.count_run(&"a".repeat(100)), None);
        }
    }

    /// Counting stops at its deadline (after at least one piece) and says how much it counted.
    #[test]
    fn counting_until_a_deadline_counts_a_prefix() {
        let tokenizer = Tokenizer::builtin("cl100k_base").unwrap();
        let text = "word ".repeat(20_000);
        let past = std::time::Instant::now();
        let (tokens, bytes) = tokenizer.count_until(&text, past);
        assert!(bytes > 0 && bytes <= COUNT_PIECE_BYTES, "{bytes}");
        assert_eq!(tokens, tokenizer.count(&text[..bytes]));
        let later = std::time::Instant::now() + std::time::Duration::from_secs(60);
        assert_eq!(
            tokenizer.count_until(&text, later),
            (tokenizer.count(&text), text.len())
        );
    }
}
