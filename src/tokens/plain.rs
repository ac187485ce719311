//! Long text counted by the built-in encodings at the cost of reading it: the pieces that are a
//! space and lowercase ASCII letters are cut out without tiktoken's regex, and each distinct one
//! is encoded once.
//!
//! Why: a 131,072-token prompt (700 KB of JSON) took 78 ms to count through tiktoken-rs, nearly
//! all of it in its pre-tokenizer regex; the simulator counts every prompt it is sent before it
//! answers, so at long contexts its TTFT was its own counting, not its configuration (`ttft
//! "50ms"` answered at 72–127 ms). Counted here the same prompt takes about a millisecond.
//!
//! Exact, because the cuts are where the regex cuts. Under both built-in patterns (cl100k_base,
//! o200k_base) every alternative that matches a letter matches no white space after its first
//! character, so a piece holding a letter ends before a following space; and a space followed by
//! lowercase letters, at the start of the text or after a letter, begins a piece that runs
//! through the letters and stops at an ASCII character that is neither a letter nor an
//! apostrophe (no contraction follows). The patterns look ahead only at white space and never
//! behind, so the text between such pieces is cut and encoded as it is within the whole.
//!
//! Not for: `tokenizer.json` files, whose pre-tokenizers (byte-level, metaspace, per model)
//! promise none of this; they are counted whole.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// A run of `text`: a piece of one space and lowercase ASCII letters, or the text between.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Cut<'a> {
    Word(&'a str),
    Other(&'a str),
}

/// `text` cut into [`Cut`]s, in order, together the whole text: `each` is called on every one.
///
/// A plain loop over the bytes: the suite's builds compile this crate at opt-level 1, where an
/// iterator over `from_fn` and `take_while` took 13 ms for a 700 KB prompt.
pub(super) fn cut<'a>(text: &'a str, mut each: impl FnMut(Cut<'a>)) {
    let bytes = text.as_bytes();
    let (mut other, mut at) = (0, 0);
    while at < bytes.len() {
        if bytes[at] != b' ' || (at > 0 && !bytes[at - 1].is_ascii_alphabetic()) {
            at += 1;
            continue;
        }
        let mut end = at + 1;
        while end < bytes.len() && bytes[end].is_ascii_lowercase() {
            end += 1;
        }
        // The regex ends the piece here: no letter (any script) and no contraction follows.
        let ends_here = end == bytes.len()
            || (bytes[end].is_ascii() && !bytes[end].is_ascii_alphabetic() && bytes[end] != b'\'');
        if end == at + 1 || !ends_here {
            at = end.max(at + 1);
            continue;
        }
        if other < at {
            each(Cut::Other(&text[other..at]));
        }
        each(Cut::Word(&text[at..end]));
        (other, at) = (end, end);
    }
    if other < bytes.len() {
        each(Cut::Other(&text[other..]));
    }
}

/// Whether `word` is a plain word: one space, then one or more lowercase ASCII letters.
pub(super) fn is_plain_word(word: &str) -> bool {
    word.strip_prefix(' ')
        .is_some_and(|rest| !rest.is_empty() && rest.bytes().all(|b| b.is_ascii_lowercase()))
}

/// FNV-1a: the words are a few bytes long, where SipHash's setup is most of a lookup.
#[derive(Default)]
struct Fnv(u64);

impl Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        let mut hash = if self.0 == 0 {
            0xcbf2_9ce4_8422_2325
        } else {
            self.0
        };
        for &b in bytes {
            hash = (hash ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
        self.0 = hash;
    }
}

type Memo<'a, T> = HashMap<&'a str, T, BuildHasherDefault<Fnv>>;

/// The words that are one token each (a space and lowercase letters, at most 16 bytes), with
/// their ids: the ones prompts are built of, known without encoding them again.
///
/// An open-addressed table keyed by the word's bytes packed into a `u128`, so that a word in a
/// long text is looked up with one 16-byte load and no copy (`id_at`). The table alone did not
/// speed counting (a 131,072-token prompt took 2.2 ms with a `HashMap` of strings and with it);
/// reading the words by one `memchr` iterator and that load did (1.1 ms; `compose::each_word`,
/// docs/performance.md, "Tokenizers").
#[derive(Default)]
pub(super) struct Known {
    /// Packed word and id; a packed word is never 0 (it has a byte that is not NUL).
    slots: Vec<(u128, u32)>,
    /// 64 less the table's size in bits: a hash's top bits pick the first slot.
    shift: u32,
}

/// The longest word [`Known`] holds.
const KNOWN_BYTES: usize = 16;

/// `word`'s bytes as a `u128` (NUL-padded), when it is short enough.
fn pack(word: &[u8]) -> Option<u128> {
    let mut bytes = [0u8; KNOWN_BYTES];
    bytes.get_mut(..word.len())?.copy_from_slice(word);
    Some(u128::from_le_bytes(bytes))
}

impl Known {
    /// `words` (one token each) that are plain words of at most 16 bytes, by `id`.
    pub(super) fn of<'a>(
        words: impl IntoIterator<Item = &'a str>,
        id: impl Fn(&str) -> u32,
    ) -> Known {
        let entries: Vec<(u128, u32)> = words
            .into_iter()
            .filter(|w| is_plain_word(w))
            .filter_map(|w| Some((pack(w.as_bytes())?, id(w))))
            .collect();
        let size = (entries.len() * 4).next_power_of_two().max(16);
        let mut known = Known {
            slots: vec![(0, 0); size],
            shift: 64 - size.trailing_zeros(),
        };
        for (key, id) in entries {
            let mut at = known.first_slot(key);
            while known.slots[at].0 != 0 && known.slots[at].0 != key {
                at = (at + 1) & (size - 1);
            }
            known.slots[at] = (key, id);
        }
        known
    }

    fn first_slot(&self, key: u128) -> usize {
        let folded = key as u64 ^ ((key >> 64) as u64).rotate_left(29);
        (folded.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> self.shift) as usize
    }

    /// `word`'s id, when it is one of them.
    pub(super) fn id(&self, word: &str) -> Option<u32> {
        self.find(pack(word.as_bytes())?)
    }

    fn find(&self, key: u128) -> Option<u32> {
        if self.slots.is_empty() {
            return None;
        }
        let mask = self.slots.len() - 1;
        let mut at = self.first_slot(key);
        loop {
            match self.slots[at] {
                (k, id) if k == key => return Some(id),
                (0, _) => return None,
                _ => at = (at + 1) & mask,
            }
        }
    }

    /// Whether `word` is one of them.
    pub(super) fn contains(&self, word: &str) -> bool {
        self.id(word).is_some()
    }

    /// The id of the word `text[start..end]`, when it is one of them: read as one 16-byte load
    /// where the text has 16 bytes from `start` (no copy of a word's length).
    pub(super) fn id_at(&self, text: &[u8], start: usize, end: usize) -> Option<u32> {
        let len = end - start;
        if len > KNOWN_BYTES {
            return None;
        }
        let key = match text.get(start..start + KNOWN_BYTES) {
            Some(window) => {
                let mut bytes = [0u8; KNOWN_BYTES];
                bytes.copy_from_slice(window);
                let mask = u128::MAX >> (8 * (KNOWN_BYTES - len));
                u128::from_le_bytes(bytes) & mask
            }
            None => pack(&text[start..end])?,
        };
        self.find(key)
    }
}

/// Tokens in `text`: a known word is one; every other distinct word is counted once by `word`,
/// the rest by `other`.
pub(super) fn count(
    text: &str,
    known: &Known,
    mut word: impl FnMut(&str) -> usize,
    mut other: impl FnMut(&str) -> usize,
) -> usize {
    let mut memo: Memo<usize> = Memo::default();
    let mut tokens = 0;
    cut(text, |piece| {
        tokens += match piece {
            Cut::Word(w) if known.contains(w) => 1,
            Cut::Word(w) => *memo.entry(w).or_insert_with(|| word(w)),
            Cut::Other(rest) => other(rest),
        }
    });
    tokens
}

/// The ids of `text`: a known word's from `known`; every other distinct word encoded once by
/// `word`, the rest by `other`.
pub(super) fn ids(
    text: &str,
    known: &Known,
    mut word: impl FnMut(&str) -> Vec<u32>,
    mut other: impl FnMut(&str) -> Vec<u32>,
) -> Vec<u32> {
    let mut memo: Memo<Vec<u32>> = Memo::default();
    let mut ids = Vec::with_capacity(text.len() / 5);
    cut(text, |piece| match piece {
        Cut::Word(w) => match known.id(w) {
            Some(id) => ids.push(id),
            None => ids.extend_from_slice(memo.entry(w).or_insert_with(|| word(w))),
        },
        Cut::Other(rest) => ids.extend(other(rest)),
    });
    ids
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_are_cut_where_the_pattern_cuts_them() {
        use Cut::{Other, Word};
        let cut = |text| {
            let mut cuts = Vec::new();
            super::cut(text, |c| cuts.push(c));
            cuts
        };
        assert_eq!(cut(" the of"), [Word(" the"), Word(" of")]);
        assert_eq!(
            cut("Hello world, it's"),
            [Other("Hello"), Word(" world"), Other(", it's")]
        );
        // After a space, a digit or punctuation a space is not a piece's start: left whole.
        assert_eq!(cut("a  b 1 c. d"), [Other("a  b 1 c. d")]);
        // A word the regex runs on past the ASCII letters (capitals, accents, contractions).
        assert_eq!(cut("x abC"), [Other("x abC")]);
        assert_eq!(cut("x café y"), [Other("x café y")]);
        assert_eq!(cut("x don't"), [Other("x don't")]);
        assert_eq!(cut("x won\n"), [Other("x"), Word(" won"), Other("\n")]);
        assert_eq!(cut(""), Vec::<Cut>::new());
        // Together, the whole text.
        let text = "Día 3: the cat sat, then\tran  off";
        let mut joined = String::new();
        super::cut(text, |c| match c {
            Word(w) | Other(w) => joined.push_str(w),
        });
        assert_eq!(joined, text);
    }

    /// Texts drawn from the shapes the cuts must get right, counted and encoded with and
    /// without them under both built-in encodings: the same, every one.
    #[test]
    fn counts_and_ids_are_the_regexs_own() {
        use rand::{Rng, SeedableRng};
        let parts = [
            " the",
            " of",
            " cat",
            "cat",
            "Cat",
            " Cat",
            " café",
            "é",
            "'s",
            "'S",
            " don't",
            ",",
            ".",
            " ",
            "  ",
            "\n",
            "\n\n",
            "\t",
            "\r\n",
            "1",
            "123",
            " 45",
            "日本",
            " 日本",
            "_",
            "-",
            " (",
            ")",
            " x",
            "x",
            " abcdefghijklmnopqrstuvwxyz",
            " zzzzqqq",
            "\u{301}",
            "'",
        ];
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(11);
        for name in ["cl100k_base", "o200k_base"] {
            let tokenizer = super::super::Tokenizer::builtin(name).unwrap();
            for _ in 0..3000 {
                let text: String = (0..rng.random_range(0..40))
                    .map(|_| parts[rng.random_range(0..parts.len())])
                    .collect();
                let whole: usize = super::super::pieces(&text)
                    .map(|piece| tokenizer.count_piece(piece))
                    .sum();
                assert_eq!(tokenizer.count(&text), whole, "{name}: {text:?}");
                assert_eq!(
                    tokenizer.ids(&text),
                    tokenizer.ids_whole(&text),
                    "{name}: {text:?}"
                );
            }
        }
    }
}
