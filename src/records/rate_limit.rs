//! What a response's headers said of the server's rate limits: how long to wait before trying
//! again, and each budget's limit, what remains of it and when it resets, in the conventions
//! hosted APIs send (OpenAI and Azure's `x-ratelimit-*`, Anthropic's `anthropic-ratelimit-*`,
//! `Retry-After` and `retry-after-ms`; ../shared notes §16).
//!
//! Beside them, the attempts a server throttled before a request was sent again.
//!
//! What this is not: the decision to wait or retry (the executor's), or a place for any other
//! header: only numbers are kept, never a header's text, so nothing a gateway echoes back
//! (a key, an organisation's name) can reach a record.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// The rate-limit facts of one response; absent from a record when it had none.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RateLimit {
    /// How long the server asked to be left alone, ms: `retry-after-ms`, else `Retry-After`
    /// (seconds, or a date).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after_ms: Option<u64>,
    /// Requests.
    #[serde(default, skip_serializing_if = "Budget::is_empty")]
    pub requests: Budget,
    /// Tokens (input and output together).
    #[serde(default, skip_serializing_if = "Budget::is_empty")]
    pub tokens: Budget,
    /// Input tokens (Anthropic's budget of its own).
    #[serde(default, skip_serializing_if = "Budget::is_empty")]
    pub input_tokens: Budget,
    /// Output tokens (Anthropic's budget of its own).
    #[serde(default, skip_serializing_if = "Budget::is_empty")]
    pub output_tokens: Budget,
}

/// An attempt the server throttled, after which the request was sent again (`on-throttle
/// "retry"`); the request's record is its last attempt's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThrottledAttempt {
    /// When it was sent, µs from the run's start.
    pub sent_us: u64,
    /// How long the server took to turn it away, µs.
    pub e2e_us: u64,
    /// The status it was turned away with (none for an error object in a 200's body).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http_status: Option<u16>,
    /// How it was turned away.
    pub error: super::ErrorClass,
    /// The wait the server asked for, ms, if it said one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after_ms: Option<u64>,
    /// The wait taken before the next attempt, µs.
    pub waited_us: u64,
}

/// One budget: its size, what is left of it, and when it is whole again.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Budget {
    /// Its size per window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u64>,
    /// What is left of it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remaining: Option<u64>,
    /// When it is whole again, ms after the response.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reset_ms: Option<u64>,
}

impl Budget {
    /// Nothing was said of it.
    pub fn is_empty(&self) -> bool {
        *self == Budget::default()
    }
}

/// Whether a header may say something of rate limits: a cheap test on its name, so that the
/// transport looks at no other header's value.
pub fn is_rate_limit_header(name: &str) -> bool {
    let starts = |prefix: &str| {
        name.len() >= prefix.len()
            && name.as_bytes()[..prefix.len()].eq_ignore_ascii_case(prefix.as_bytes())
    };
    starts("retry-after") || starts("x-ratelimit-") || starts("anthropic-ratelimit-")
}

impl RateLimit {
    /// Whether nothing was said.
    pub fn is_empty(&self) -> bool {
        *self == RateLimit::default()
    }

    /// Takes one header (its name tested by [`is_rate_limit_header`]); `now` is the response's
    /// arrival, for the headers that give a date. A value that does not parse is left out:
    /// it is the server's, and saying nothing is better than guessing.
    pub fn note(&mut self, name: &str, value: &str, now: DateTime<Utc>) {
        let name = name.to_ascii_lowercase();
        let value = value.trim();
        if name == "retry-after-ms" {
            if let Some(ms) = decimal(value) {
                self.retry_after_ms = Some(ms.round() as u64);
            }
            return;
        }
        if name == "retry-after" {
            // `retry-after-ms` is the finer of the two: it wins whichever came first.
            if self.retry_after_ms.is_none() {
                self.retry_after_ms = decimal(value)
                    .map(|seconds| (seconds * 1000.0).round() as u64)
                    .or_else(|| http_date(value).map(|at| ms_until(at, now)));
            }
            return;
        }
        let Some((budget, field)) = self.budget_and_field(&name) else {
            return;
        };
        match field {
            Field::Limit => budget.limit = count(value),
            Field::Remaining => budget.remaining = count(value),
            Field::Reset => budget.reset_ms = reset(value, now),
        }
    }

    /// The budget and the field a header names: `x-ratelimit-{field}-{budget}` or
    /// `anthropic-ratelimit-{budget}-{field}`.
    fn budget_and_field(&mut self, name: &str) -> Option<(&mut Budget, Field)> {
        let (budget, field) = if let Some(rest) = name.strip_prefix("x-ratelimit-") {
            let (field, budget) = rest.split_once('-')?;
            (budget, field)
        } else {
            let rest = name.strip_prefix("anthropic-ratelimit-")?;
            rest.rsplit_once('-')?
        };
        let field = match field {
            "limit" => Field::Limit,
            "remaining" => Field::Remaining,
            "reset" => Field::Reset,
            _ => return None,
        };
        let budget = match budget {
            "requests" => &mut self.requests,
            "tokens" => &mut self.tokens,
            "input-tokens" => &mut self.input_tokens,
            "output-tokens" => &mut self.output_tokens,
            _ => return None,
        };
        Some((budget, field))
    }
}

enum Field {
    Limit,
    Remaining,
    Reset,
}

fn count(value: &str) -> Option<u64> {
    value.parse().ok()
}

/// A non-negative decimal number.
fn decimal(value: &str) -> Option<f64> {
    value
        .parse::<f64>()
        .ok()
        .filter(|n| n.is_finite() && *n >= 0.0 && *n < 1e15)
}

/// A reset time: OpenAI's Go-style duration (`1s`, `6m0s`, `20ms`, `1h2m3.5s`), an RFC 3339
/// date (Anthropic), or a bare number: seconds from now, or a Unix time when it is one
/// (seconds, or milliseconds past the year 5138's worth of seconds).
fn reset(value: &str, now: DateTime<Utc>) -> Option<u64> {
    if let Some(n) = decimal(value) {
        const A_UNIX_TIME: f64 = 1e9;
        if n < A_UNIX_TIME {
            return Some((n * 1000.0).round() as u64);
        }
        let ms = if n < 1e11 { n * 1000.0 } else { n };
        let at = DateTime::<Utc>::from_timestamp_millis(ms as i64)?;
        return Some(ms_until(at, now));
    }
    if let Ok(at) = DateTime::parse_from_rfc3339(value) {
        return Some(ms_until(at.with_timezone(&Utc), now));
    }
    go_duration_ms(value)
}

/// An HTTP date (`Wed, 21 Oct 2015 07:28:00 GMT`).
fn http_date(value: &str) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc2822(value)
        .ok()
        .map(|at| at.with_timezone(&Utc))
}

fn ms_until(at: DateTime<Utc>, now: DateTime<Utc>) -> u64 {
    (at - now).num_milliseconds().max(0) as u64
}

/// A Go duration's milliseconds: numbers each followed by `h`, `m`, `s`, `ms`, `us`/`µs` or
/// `ns`, at least one.
fn go_duration_ms(value: &str) -> Option<u64> {
    let mut rest = value;
    let mut total = 0.0;
    while !rest.is_empty() {
        let number_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .filter(|&end| end > 0)?;
        let number: f64 = rest[..number_end].parse().ok()?;
        rest = &rest[number_end..];
        let unit_end = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let ms_per = match &rest[..unit_end] {
            "h" => 3_600_000.0,
            "m" => 60_000.0,
            "s" => 1_000.0,
            "ms" => 1.0,
            "us" | "µs" => 0.001,
            "ns" => 0.000_001,
            _ => return None,
        };
        total += number * ms_per;
        rest = &rest[unit_end..];
    }
    (!value.is_empty()).then(|| total.round() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2026-12-06T12:00:00Z")
            .map(|at| at.with_timezone(&Utc))
            .expect("a fixed date")
    }

    fn read(headers: &[(&str, &str)]) -> RateLimit {
        let mut limit = RateLimit::default();
        for (name, value) in headers {
            assert!(is_rate_limit_header(name), "{name}");
            limit.note(name, value, now());
        }
        limit
    }

    #[test]
    fn openai_headers_are_read_as_its_documentation_shows_them() {
        let limit = read(&[
            ("x-ratelimit-limit-requests", "60"),
            ("x-ratelimit-limit-tokens", "150000"),
            ("x-ratelimit-remaining-requests", "59"),
            ("x-ratelimit-remaining-tokens", "149984"),
            ("x-ratelimit-reset-requests", "1s"),
            ("x-ratelimit-reset-tokens", "6m0s"),
            ("retry-after-ms", "1500"),
            ("Retry-After", "2"),
        ]);
        assert_eq!(
            limit.requests,
            Budget {
                limit: Some(60),
                remaining: Some(59),
                reset_ms: Some(1000)
            }
        );
        assert_eq!(
            limit.tokens,
            Budget {
                limit: Some(150_000),
                remaining: Some(149_984),
                reset_ms: Some(360_000)
            }
        );
        // The finer header wins, in whichever order they came.
        assert_eq!(limit.retry_after_ms, Some(1500));
    }

    #[test]
    fn anthropic_headers_give_their_resets_as_dates() {
        let limit = read(&[
            ("anthropic-ratelimit-requests-limit", "50"),
            ("anthropic-ratelimit-requests-remaining", "0"),
            ("anthropic-ratelimit-requests-reset", "2026-12-06T12:00:07Z"),
            ("anthropic-ratelimit-input-tokens-limit", "40000"),
            ("anthropic-ratelimit-input-tokens-remaining", "12000"),
            (
                "anthropic-ratelimit-input-tokens-reset",
                "2026-12-06T12:00:01.500Z",
            ),
            ("anthropic-ratelimit-output-tokens-remaining", "8000"),
            ("anthropic-ratelimit-tokens-remaining", "20000"),
            ("retry-after", "7"),
        ]);
        assert_eq!(limit.requests.remaining, Some(0));
        assert_eq!(limit.requests.reset_ms, Some(7000));
        assert_eq!(limit.input_tokens.reset_ms, Some(1500));
        assert_eq!(limit.output_tokens.remaining, Some(8000));
        assert_eq!(limit.tokens.remaining, Some(20_000));
        assert_eq!(limit.retry_after_ms, Some(7000));
    }

    #[test]
    fn retry_after_may_be_a_date_and_a_date_passed_is_no_wait() {
        let at = read(&[("Retry-After", "Sun, 06 Dec 2026 12:00:30 GMT")]);
        assert_eq!(at.retry_after_ms, Some(30_000));
        let passed = read(&[("retry-after", "Sun, 06 Dec 2026 11:00:00 GMT")]);
        assert_eq!(passed.retry_after_ms, Some(0));
    }

    #[test]
    fn durations_in_go_form_and_bare_numbers() {
        for (text, ms) in [
            ("20ms", Some(20)),
            ("1h2m3.5s", Some(3_723_500)),
            ("0s", Some(0)),
            ("1.5", Some(1500)),
            // A Unix time, in seconds and in milliseconds.
            ("1796558410", Some(10_000)),
            ("1796558410000", Some(10_000)),
            ("", None),
            ("soon", None),
            ("5 s", None),
            ("1x", None),
            ("-3", None),
        ] {
            assert_eq!(reset(text, now()), ms, "{text:?}");
        }
    }

    #[test]
    fn what_does_not_parse_is_left_out_and_other_headers_are_not_taken() {
        let limit = read(&[
            ("x-ratelimit-remaining-requests", "many"),
            ("x-ratelimit-remaining-pizzas", "3"),
            ("anthropic-ratelimit-requests-soon", "3"),
            ("retry-after", "NaN"),
            ("retry-after-ms", "-5"),
        ]);
        assert!(limit.is_empty(), "{limit:?}");
        for name in [
            "authorization",
            "x-request-id",
            "retry",
            "x-ratelimit",
            "set-cookie",
        ] {
            assert!(!is_rate_limit_header(name), "{name}");
        }
    }

    #[test]
    fn a_record_without_any_keeps_no_field() {
        let limit = read(&[("x-ratelimit-remaining-tokens", "7")]);
        let json = serde_json::to_string(&limit).expect("serializes");
        assert_eq!(json, r#"{"tokens":{"remaining":7}}"#);
        let back: RateLimit = serde_json::from_str(&json).expect("reads back");
        assert_eq!(back, limit);
    }
}
