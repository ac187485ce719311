//! Secrets (the API key, secret headers) kept out of everything llmload writes or prints.
//!
//! A server may echo a key back: OpenAI-style 401s say "Incorrect API key provided: sk-…", and
//! that text becomes a request's error detail, which goes to `records.jsonl`, `requests.csv`,
//! the reports and the terminal. Every such text passes through [`Secrets::redact`] before it is
//! kept. Besides each whole value, any stretch of 12 or more of its characters is redacted,
//! because servers often echo a key cut short or with its middle starred out.

use std::borrow::Cow;

/// What replaces a secret.
pub const REDACTED: &str = "[redacted]";

/// Whether a name (a query parameter, a command-line flag, an environment variable) says its
/// value is a credential: `api_key`, `--hf-token`, `HF_TOKEN`, `DB_PASSWORD`, `--admin-pass`,
/// `PGPWD`. Generous on purpose: masking a value that was no secret costs a report nothing.
pub fn looks_secret(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    [
        "key",
        "token",
        "secret",
        "sig",
        "pass",
        "pwd",
        "auth",
        "credential",
        "cookie",
        "session",
    ]
    .iter()
    .any(|word| name.contains(word))
}

/// Shorter fragments than this are left alone: they match ordinary text too often.
const FRAGMENT: usize = 12;

/// The run's secret values.
#[derive(Debug, Clone, Default)]
pub struct Secrets {
    values: Vec<String>,
    /// What is looked for, lower-cased, by fragments: each value, and what it looks like
    /// base64-encoded (as a server echoing a Basic credential, or a key it encoded, shows
    /// them) at each of the three alignments. Kept ready: every line a started server prints
    /// is redacted.
    lowered: Vec<String>,
    /// Each value's ASCII letters and digits alone, lower-cased, where they are at least a
    /// fragment long: matched with anything between them.
    squeezed: Vec<Vec<u8>>,
}

impl Secrets {
    /// No secrets.
    pub fn new() -> Secrets {
        Secrets::default()
    }

    /// Keeps `value` out of everything from now on (values shorter than 4 bytes are ignored:
    /// they are no secret, and redacting them would garble every message).
    pub fn add(&mut self, value: &str) {
        if value.len() >= 4 && !self.values.iter().any(|v| v == value) {
            self.values.push(value.to_string());
            let lowered = value.to_ascii_lowercase();
            let (squeezed, _) = squeeze(&lowered);
            if squeezed.len() >= FRAGMENT {
                self.squeezed.push(squeezed);
            }
            self.lowered.push(lowered);
            self.lowered.extend(
                base64_forms(value.as_bytes())
                    .into_iter()
                    .map(|form| form.to_ascii_lowercase()),
            );
        }
    }

    /// [`Secrets::redact`] of `text`, in place (untouched when it holds no secret).
    pub fn redact_in_place(&self, text: &mut String) {
        if let Cow::Owned(clean) = self.redact(text) {
            *text = clean;
        }
    }

    /// Whether there are no secrets to redact.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// `text` with every secret, and every stretch of one at least 12 bytes long, replaced by
    /// `[redacted]`, whatever its case (a server may echo a key upper-cased), and the same for
    /// their base64 forms; and any 12 letters and digits of one in a row with anything else
    /// between them (a key echoed character-spaced, or with dashes or dots put in).
    pub fn redact<'a>(&self, text: &'a str) -> Cow<'a, str> {
        if self.values.is_empty() {
            return Cow::Borrowed(text);
        }
        // ASCII lower-casing keeps every byte where it was, so offsets found in it hold in `text`.
        let lowered = text.to_ascii_lowercase();
        let mut ranges: Vec<(usize, usize)> = Vec::new();
        for secret in &self.lowered {
            for needle in fragments(secret) {
                for start in memchr::memmem::find_iter(lowered.as_bytes(), needle) {
                    if text.is_char_boundary(start) && text.is_char_boundary(start + needle.len()) {
                        ranges.push((start, start + needle.len()));
                    }
                }
            }
        }
        let (squeezed, offsets) = if self.squeezed.is_empty() {
            (Vec::new(), Vec::new())
        } else {
            squeeze(&lowered)
        };
        for secret in &self.squeezed {
            for needle in secret.windows(FRAGMENT) {
                for start in memchr::memmem::find_iter(&squeezed, needle) {
                    ranges.push((offsets[start], offsets[start + FRAGMENT - 1] + 1));
                }
            }
        }
        if ranges.is_empty() {
            return Cow::Borrowed(text);
        }
        Cow::Owned(replace_ranges(text, ranges))
    }
}

/// What of `secret` is looked for: the whole value when it is a fragment long or shorter, else
/// every stretch of [`FRAGMENT`] bytes of it (that starts and ends on a character boundary).
fn fragments(secret: &str) -> Vec<&[u8]> {
    if secret.len() <= FRAGMENT {
        return vec![secret.as_bytes()];
    }
    (0..=secret.len() - FRAGMENT)
        .filter(|&i| secret.is_char_boundary(i) && secret.is_char_boundary(i + FRAGMENT))
        .map(|i| &secret.as_bytes()[i..i + FRAGMENT])
        .collect()
}

/// `text`'s ASCII letters and digits alone, in order, and where each was in `text`.
fn squeeze(text: &str) -> (Vec<u8>, Vec<usize>) {
    text.bytes()
        .enumerate()
        .filter(|(_, b)| b.is_ascii_alphanumeric())
        .map(|(at, b)| (b, at))
        .unzip()
}

/// `text` with each of `ranges` (byte ranges on character boundaries, in any order, maybe
/// overlapping) replaced by one [`REDACTED`] per run of overlapping ones.
fn replace_ranges(text: &str, mut ranges: Vec<(usize, usize)>) -> String {
    ranges.sort_unstable();
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    let mut current: Option<(usize, usize)> = None;
    for (start, end) in ranges {
        current = match current {
            Some((a, b)) if start <= b => Some((a, b.max(end))),
            Some((a, b)) => {
                out.push_str(&text[at..a]);
                out.push_str(REDACTED);
                at = b;
                Some((start, end))
            }
            None => Some((start, end)),
        };
    }
    if let Some((a, b)) = current {
        out.push_str(&text[at..a]);
        out.push_str(REDACTED);
        at = b;
    }
    out.push_str(&text[at..]);
    out
}

/// `value` base64-encoded (standard and URL-safe alphabets) at each of the three alignments it
/// can have inside a longer encoded text, each cut to the characters that depend on `value`
/// alone; forms shorter than a fragment are left out (they would match too much).
fn base64_forms(value: &[u8]) -> Vec<String> {
    use base64::engine::general_purpose::{STANDARD_NO_PAD, URL_SAFE_NO_PAD};
    use base64::Engine;
    let mut forms = Vec::new();
    for shift in 0..3usize {
        let mut shifted = vec![0u8; shift];
        shifted.extend_from_slice(value);
        for engine in [&STANDARD_NO_PAD, &URL_SAFE_NO_PAD] {
            let encoded = engine.encode(&shifted);
            // The first characters also carry the padding bytes; the last may carry the bytes
            // after the value.
            let skip = (shift * 4).div_ceil(3);
            let keep = encoded.len().saturating_sub(skip + 2);
            if keep >= FRAGMENT {
                let form = encoded[skip..skip + keep].to_string();
                if !forms.contains(&form) {
                    forms.push(form);
                }
            }
        }
    }
    forms
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_values_and_long_fragments_are_redacted() {
        let mut secrets = Secrets::new();
        let key = "sk-proj-abcdefghijklmnopqrstuvwxyz0123456789";
        secrets.add(key);
        secrets.add("ab");
        let echoed = format!("Incorrect API key provided: {key}. You can find your API key at …");
        assert_eq!(
            secrets.redact(&echoed),
            "Incorrect API key provided: [redacted]. You can find your API key at …"
        );
        // Cut short, or with its middle starred out, as OpenAI echoes keys.
        let starred = "Incorrect API key provided: sk-proj-abcdef***************6789.";
        assert_eq!(
            secrets.redact(starred),
            "Incorrect API key provided: [redacted]***************6789."
        );
        assert_eq!(secrets.redact("nothing secret here"), "nothing secret here");
        // Any 12 bytes of a secret shorter than two fragments, too.
        let mut header = Secrets::new();
        header.add("tenant-9f8e7d6c5b4a39");
        assert_eq!(
            header.redact("bad key …9f8e7d6c5b4a3… given"),
            "bad key …[redacted]… given"
        );
        // Its letters and digits with anything between them: character-spaced, dashed.
        let spaced: String = "tenant-9f8e7d6c5b4a39"
            .chars()
            .map(|c| format!("{c} "))
            .collect();
        assert_eq!(
            header.redact(&format!("as typed: {spaced}!")),
            "as typed: [redacted] !"
        );
        assert_eq!(header.redact("id 9f8e-7d6c-5b4a-39 ok"), "id [redacted] ok");
        assert_eq!(header.redact("tenant 123 and 9f8e"), "tenant 123 and 9f8e");
        // Short secrets are matched whole only; values under 4 bytes are ignored.
        let mut short = Secrets::new();
        short.add("hunter22");
        assert_eq!(
            short.redact("pw hunter22 and hunter"),
            "pw [redacted] and hunter"
        );
        assert!(Secrets::new().is_empty());
    }

    #[test]
    fn names_that_say_they_hold_a_credential() {
        for name in [
            "api_key",
            "--hf-token",
            "DB_PASSWORD",
            "--admin-pass",
            "PGPWD",
            "X-Session-Id",
        ] {
            assert!(looks_secret(name), "{name}");
        }
        for name in ["--port", "--model", "--parallel", "LLAMA_ARG_THREADS"] {
            assert!(!looks_secret(name), "{name}");
        }
    }

    #[test]
    fn echoes_in_another_case_or_base64_encoded_are_redacted() {
        use base64::Engine;
        let mut secrets = Secrets::new();
        let key = "sk-Proj-abcdefghijklmnopqrstuvwxyz0";
        secrets.add(key);
        let upper = format!("invalid key {}", key.to_uppercase());
        assert_eq!(secrets.redact(&upper), "invalid key [redacted]");
        for prefix in ["", "a", "ab", "user:"] {
            for engine in [
                base64::engine::general_purpose::STANDARD,
                base64::engine::general_purpose::URL_SAFE,
            ] {
                let encoded = engine.encode(format!("{prefix}{key}"));
                let redacted = secrets.redact(&encoded);
                assert!(
                    redacted.contains(REDACTED),
                    "{prefix}: {encoded} -> {redacted}"
                );
                // What is left cannot be decoded back to 12 characters of the key.
                assert!(redacted.len() < encoded.len(), "{redacted}");
            }
        }
    }
}
