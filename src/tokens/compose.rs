//! Which single-token words stay one token each when run together under a `tokenizer.json`, so
//! that a prompt built of them is exact without counting it.
//!
//! A synthetic prompt is a run of words that are one token each alone (" the", " cat"). Under the
//! built-in encodings such a run is one token per word by construction ([`super::plain`]). A
//! `tokenizer.json` promises nothing of the kind: its normalizer, pre-tokenizer and merges are
//! its model's own, and a merge across two words (or a first word split differently) changes the
//! count. So each tokenizer is asked, once, when it is loaded: every ordered pair of its
//! single-token words is encoded, in runs of [`RUN_WORDS`] words, and a run whose ids are not its
//! words' own ids is looked at pair by pair; both words of a pair that does not stay two tokens
//! are dropped. A seeded run of the words left is encoded last, as prompts will be. When at least
//! [`MIN_WORDS`] words are left, prompts are runs of them; `Tokenizer::prompt` still counts a
//! seeded sample of them (and every one in debug builds) and goes back to counting every prompt
//! if one is ever off.
//!
//! Why: building a prompt by counting it took 90 µs for 128 tokens and 1 ms for 2,048 with the
//! tests' word-level `tokenizer.json` (965 requests/s per client core, against 9,059 with a
//! built-in encoding), and more with a real BPE file: prompts cost more than the rest of a
//! request together. Numbers for this check and for prompts are in docs/performance.md
//! ("Tokenizers").
//!
//! Not for: text that is not a run of these words (answers of real servers, datasets, chat
//! history); those are counted by the tokenizer itself.

use std::collections::HashMap;

use rand::{Rng, SeedableRng};

/// Words encoded at once while checking pairs: long enough that each encode call's fixed cost is
/// shared, short enough that a failing run is cheap to look at pair by pair.
const RUN_WORDS: usize = 512;

/// Fewer words than this left and prompts are counted instead (a prompt of few distinct words
/// would also repeat itself in a way no prefix cache should see).
pub(super) const MIN_WORDS: usize = 64;

/// The most words checked: 256 words already give 8 bits per token, and the pairs to encode grow
/// with the square of the words.
const MAX_WORDS: usize = 256;

/// The words that stay one token each in any run of them, and their ids.
#[derive(Debug, Default)]
pub(super) struct Stable {
    pub(super) words: Vec<String>,
    pub(super) ids: Vec<u32>,
}

/// The words of `words` (each one token alone, `ids` its id) whose every run is one token per
/// word under `encode` (a tokenizer's ids of a text, no special tokens; `None` when it cannot
/// encode it); `None` when fewer than [`MIN_WORDS`] are.
pub(super) fn stable_words(
    words: &[String],
    encode: impl Fn(&str) -> Option<Vec<u32>>,
) -> Option<Stable> {
    let words = &words[..words.len().min(MAX_WORDS)];
    let ids: Vec<u32> = words
        .iter()
        .map(|w| match encode(w)?.as_slice() {
            &[id] => Some(id),
            _ => None,
        })
        .collect::<Option<_>>()?;
    let mut dropped = vec![false; words.len()];
    let sequence = every_pair(words.len());
    for start in (0..sequence.len().saturating_sub(1)).step_by(RUN_WORDS) {
        let run = &sequence[start..(start + RUN_WORDS + 1).min(sequence.len())];
        if !one_token_each(run, words, &ids, &encode) {
            drop_merging_pairs(run, words, &ids, &encode, &mut dropped);
        }
    }
    let kept: Vec<usize> = (0..words.len()).filter(|&i| !dropped[i]).collect();
    if kept.len() < MIN_WORDS {
        return None;
    }
    // The pairs are what a merge or a split needs; a seeded run as long as a long prompt is the
    // last word, under the pre-tokenizers and normalizers that look further.
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(0x636f_6d70);
    let run: Vec<usize> = (0..4096)
        .map(|_| kept[rng.random_range(0..kept.len())])
        .collect();
    if !one_token_each(&run, words, &ids, &encode) {
        return None;
    }
    Some(Stable {
        words: kept.iter().map(|&i| words[i].clone()).collect(),
        ids: kept.iter().map(|&i| ids[i]).collect(),
    })
}

/// Word indices in which every ordered pair of `n` words is next to each other somewhere:
/// `i j` for every `j ≥ i` gives `(i, j)`, the next `i` after each `j` gives `(j, i)`, the row
/// after gives `(n - 1, i + 1)`, and a last `0` gives `(n - 1, 0)`.
fn every_pair(n: usize) -> Vec<usize> {
    let mut sequence = Vec::with_capacity(n * (n + 1) + 1);
    for i in 0..n {
        for j in i..n {
            sequence.push(i);
            sequence.push(j);
        }
    }
    if n > 0 {
        sequence.push(0);
    }
    sequence
}

/// Whether the words `run` names, run together, encode as their own ids, one each.
fn one_token_each(
    run: &[usize],
    words: &[String],
    ids: &[u32],
    encode: &impl Fn(&str) -> Option<Vec<u32>>,
) -> bool {
    let text: String = run.iter().map(|&i| words[i].as_str()).collect();
    encode(&text).is_some_and(|encoded| {
        encoded.len() == run.len() && encoded.iter().zip(run).all(|(&id, &i)| id == ids[i])
    })
}

/// Marks both words of each pair of `run` that does not encode as their own two ids.
fn drop_merging_pairs(
    run: &[usize],
    words: &[String],
    ids: &[u32],
    encode: &impl Fn(&str) -> Option<Vec<u32>>,
    dropped: &mut [bool],
) {
    let mut seen: HashMap<(usize, usize), bool> = HashMap::new();
    for pair in run.windows(2) {
        let (a, b) = (pair[0], pair[1]);
        let merges = *seen
            .entry((a, b))
            .or_insert_with(|| !one_token_each(pair, words, ids, encode));
        if merges {
            dropped[a] = true;
            dropped[b] = true;
        }
    }
}

/// How many words `text` is when it is nothing but a run of `known` words (each a space and
/// lowercase ASCII letters); `None` when it is anything else.
pub(super) fn count_known_run(text: &str, known: &super::plain::Known) -> Option<usize> {
    let mut words = 0;
    each_word(text, |start, end| {
        known.id_at(text.as_bytes(), start, end)?;
        words += 1;
        Some(())
    })?;
    Some(words)
}

/// The ids of `text` when it is nothing but a run of `known` words; `None` otherwise.
pub(super) fn known_run_ids(text: &str, known: &super::plain::Known) -> Option<Vec<u32>> {
    let mut ids = Vec::with_capacity(text.len() / 5);
    each_word(text, |start, end| {
        ids.push(known.id_at(text.as_bytes(), start, end)?);
        Some(())
    })?;
    Some(ids)
}

/// Calls `each` with the bounds of every word of `text` (each from its space to the next space
/// or the end) while it says `Some`; `None` when `text` does not start with a space or `each`
/// said `None`.
///
/// One `memchr` iterator over the whole text: `str::split(' ')` took 14 ns a word (a search
/// started again for every few bytes), 1.9 ms for a 131,072-token prompt.
fn each_word(text: &str, mut each: impl FnMut(usize, usize) -> Option<()>) -> Option<()> {
    let bytes = text.as_bytes();
    if bytes.first() != Some(&b' ') {
        return None;
    }
    let mut start = 0;
    for at in memchr::memchr_iter(b' ', &bytes[1..]) {
        each(start, at + 1)?;
        start = at + 1;
    }
    each(start, bytes.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(n: usize) -> Vec<String> {
        (0..n).map(|i| format!(" w{i:03}")).collect()
    }

    #[test]
    fn every_ordered_pair_is_next_to_each_other() {
        for n in [1, 2, 5, 17] {
            let sequence = every_pair(n);
            for a in 0..n {
                for b in 0..n {
                    assert!(
                        sequence.windows(2).any(|w| w == [a, b]),
                        "{n} words: ({a}, {b})"
                    );
                }
            }
        }
    }

    /// A tokenizer of one token per word but for two pairs that merge into one token: exactly
    /// those four words are dropped.
    #[test]
    fn words_of_merging_pairs_are_dropped_and_the_rest_kept() {
        let words = words(100);
        let encode = |text: &str| -> Option<Vec<u32>> {
            let mut ids: Vec<u32> = Vec::new();
            for word in text.split(' ').filter(|w| !w.is_empty()) {
                let id: u32 = word[1..].parse().ok()?;
                let merged = matches!((ids.last(), id), (Some(7), 8) | (Some(50), 20));
                if merged {
                    *ids.last_mut()? = 1000;
                } else {
                    ids.push(id);
                }
            }
            Some(ids)
        };
        let stable = stable_words(&words, encode).expect("96 words left");
        assert_eq!(stable.words.len(), 96);
        for gone in [" w007", " w008", " w050", " w020"] {
            assert!(!stable.words.iter().any(|w| w == gone), "{gone}");
        }
        assert_eq!(stable.ids.len(), 96);
    }

    /// A tokenizer whose runs merge everywhere leaves too few words: prompts are counted.
    #[test]
    fn a_tokenizer_that_merges_every_pair_has_no_stable_words() {
        let encode = |text: &str| Some(vec![0; text.split(' ').count().div_ceil(2)]);
        assert!(stable_words(&words(100), encode).is_none());
    }

    #[test]
    fn a_run_of_known_words_is_counted_without_the_tokenizer() {
        let known = super::super::plain::Known::of([" the", " cat"], |w| w.len() as u32);
        assert_eq!(count_known_run(" the cat the", &known), Some(3));
        assert_eq!(known_run_ids(" the cat", &known), Some(vec![4, 4]));
        // Long enough that words are read 16 bytes at a time: a word is its own bytes only,
        // never a known word it begins with.
        let known = super::super::plain::Known::of(
            [" the", " cat", " them", " a", " abcdefghijklmno"],
            |w| w.len() as u32,
        );
        let long = " the cat them a abcdefghijklmno the".repeat(3);
        assert_eq!(count_known_run(&long, &known), Some(18));
        assert_eq!(count_known_run(&format!("{long} theme"), &known), None);
        assert_eq!(count_known_run(&format!(" they{long}"), &known), None);
        assert_eq!(
            count_known_run(&format!("{long} abcdefghijklmnop"), &known),
            None
        );
        let known = super::super::plain::Known::of([" the", " cat"], |w| w.len() as u32);
        for not in ["the cat", " the  cat", " the dog", " the cat ", "", " "] {
            assert_eq!(count_known_run(not, &known), None, "{not:?}");
            assert_eq!(known_run_ids(not, &known), None, "{not:?}");
        }
    }
}
