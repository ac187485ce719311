//! A dataset's usable entries under the plan's tokenizer: what the planner draws requests from.
//!
//! The plan stage reads a dataset file and checks its layout; here each entry is measured in
//! tokens (the plan's tokenizer), filtered or cut to the plan's length bounds, and given its
//! output length (the dataset's own answer's, when the plan asks). The request mix then picks an
//! entry per request by the dataset's order. Nothing here builds prompt text or sends anything.

use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::Serialize;

use crate::error::{Error, Result};
use crate::plan::data::{DataPrompt, Dataset, DatasetOrder};
use crate::plan::limits::MAX_TOKENS;
use crate::tokens::Tokenizer;

/// One usable entry, measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct CatalogueEntry {
    /// Its index among the dataset's entries.
    pub source: u32,
    /// Its prompt tokens (after any cut).
    pub input_tokens: u32,
    /// Its answer's tokens, when the plan takes output lengths from the dataset.
    pub output_tokens: Option<u32>,
    /// The prompt is cut to this many tokens.
    pub truncate_to: Option<u32>,
}

/// A dataset's usable entries, in the order requests take them.
#[derive(Debug, Clone, Serialize)]
pub struct Catalogue {
    /// The entries, in the order requests take them (shuffled with the seed for `shuffle`).
    pub entries: Vec<CatalogueEntry>,
    /// How requests take them.
    #[serde(skip)]
    pub order: DatasetOrder,
    /// Entries of the file that were left out: no prompt, outside the length bounds, or no
    /// answer when output lengths come from the answers.
    pub left_out: usize,
    /// Of those, cut to the longest length allowed.
    pub truncated: usize,
}

/// Prompt tokens of a dataset prompt, content only (a server adds its chat template's).
pub fn prompt_tokens(tokenizer: &Tokenizer, prompt: &DataPrompt) -> usize {
    match prompt {
        DataPrompt::Text(text) => tokenizer.count(text),
        DataPrompt::Messages(messages) => {
            messages.iter().map(|m| tokenizer.count(&m.content)).sum()
        }
    }
}

impl Catalogue {
    /// Measures `dataset` under `tokenizer`, shuffling with `seed` when its order says so.
    pub fn build(dataset: &Dataset, tokenizer: &Tokenizer, seed: u64) -> Result<Catalogue> {
        let mut entries = Vec::new();
        let mut left_out = dataset.skipped;
        let mut truncated = 0;
        for (index, entry) in dataset.entries.iter().enumerate() {
            let tokens = prompt_tokens(tokenizer, &entry.prompt).min(MAX_TOKENS as usize) as u32;
            let output_tokens = match (&entry.answer, dataset.output_from_answer) {
                (_, false) => None,
                (Some(answer), true) => {
                    Some((tokenizer.count(answer).min(MAX_TOKENS as usize) as u32).max(1))
                }
                (None, true) => {
                    left_out += 1;
                    continue;
                }
            };
            if tokens == 0 || dataset.min_input.is_some_and(|min| tokens < min) {
                left_out += 1;
                continue;
            }
            let mut truncate_to = None;
            if let Some(max) = dataset.max_input.filter(|&max| tokens > max) {
                // Only text can be cut cleanly; a conversation longer than allowed is left out.
                if dataset.truncate && matches!(entry.prompt, DataPrompt::Text(_)) {
                    truncate_to = Some(max);
                    truncated += 1;
                } else {
                    left_out += 1;
                    continue;
                }
            }
            entries.push(CatalogueEntry {
                source: index as u32,
                input_tokens: truncate_to.unwrap_or(tokens),
                output_tokens,
                truncate_to,
            });
        }
        if entries.is_empty() {
            let bounds = match (dataset.min_input, dataset.max_input) {
                (None, None) => String::new(),
                (min, max) => format!(
                    " between {} and {} prompt tokens",
                    min.map_or("any".into(), |n| n.to_string()),
                    max.map_or("any".into(), |n| n.to_string())
                ),
            };
            return Err(Error::usage(format!(
                "dataset {}: none of its {} entries is usable{bounds}{}",
                dataset.shown,
                dataset.entries.len() + dataset.skipped,
                if dataset.output_from_answer {
                    " with an answer to take the output length from"
                } else {
                    ""
                }
            )));
        }
        if dataset.order == DatasetOrder::Shuffle {
            let mut rng = ChaCha8Rng::seed_from_u64(crate::seed::derived(seed, 0xda7a));
            entries.shuffle(&mut rng);
        }
        Ok(Catalogue {
            entries,
            order: dataset.order,
            left_out,
            truncated,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::plan::data::{DataEntry, DatasetFormat};

    fn dataset(texts: &[(&str, Option<&str>)]) -> Dataset {
        Dataset {
            shown: "d.jsonl".into(),
            format: DatasetFormat::Jsonl,
            field: "prompt".into(),
            answer_field: "completion".into(),
            order: DatasetOrder::Sequential,
            min_input: None,
            max_input: None,
            truncate: false,
            output_from_answer: false,
            entries: Arc::new(
                texts
                    .iter()
                    .enumerate()
                    .map(|(i, (p, a))| {
                        DataEntry::new(
                            i + 1,
                            DataPrompt::Text(p.to_string()),
                            a.map(str::to_string),
                        )
                    })
                    .collect(),
            ),
            skipped: 0,
            sha256: String::new(),
            media: Default::default(),
        }
    }

    #[test]
    fn entries_are_measured_filtered_and_cut() {
        let tokenizer = Tokenizer::builtin("cl100k_base").unwrap();
        let mut d = dataset(&[
            (" one two three four five", Some(" yes")),
            (" one", None),
            (
                " one two three four five six seven eight nine ten",
                Some(" a b"),
            ),
        ]);
        let c = Catalogue::build(&d, &tokenizer, 1).unwrap();
        assert_eq!(
            c.entries.iter().map(|e| e.input_tokens).collect::<Vec<_>>(),
            vec![5, 1, 10]
        );
        d.min_input = Some(2);
        d.max_input = Some(6);
        let c = Catalogue::build(&d, &tokenizer, 1).unwrap();
        assert_eq!(c.entries.len(), 1);
        assert_eq!(c.left_out, 2);
        d.truncate = true;
        d.output_from_answer = true;
        let c = Catalogue::build(&d, &tokenizer, 1).unwrap();
        assert_eq!(c.entries.len(), 2);
        assert_eq!(c.entries[1].truncate_to, Some(6));
        assert_eq!(c.entries[1].output_tokens, Some(2));
        assert_eq!(c.truncated, 1);
        d.min_input = Some(100);
        let err = Catalogue::build(&d, &tokenizer, 1).unwrap_err();
        assert!(err.to_string().contains("none of its 3 entries"), "{err}");
    }
}
