//! The simulator's rate limits (`sim { rate-limit rpm=… tpm=… }`): a hosted API's token
//! buckets, the 429 it answers beyond them, and the headers every answer says them in, so that
//! llmload's reading of throttling is tested against a server that does it by the book.
//!
//! The limits are per key, as a provider's are per key (or organisation): each key a request
//! presents (`Authorization: Bearer`, `x-api-key`, `api-key`) has buckets of its own, full at
//! its first request; requests without a key share one set.
//!
//! What this is not: the engine's own queue limit (`max-waiting` answers 429 or 503 when the
//! queue is full, a self-hosted server's way), or the `http-429` fault (a share of requests
//! refused at random, with no headers).

use std::sync::Mutex;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::time::Instant;

use crate::plan::RateLimits;

/// The most keys given buckets of their own; the keys past it share one set (a test server
/// is not a key store, and a client making up keys must not grow it without end).
const MAX_KEYS: usize = 4096;

/// The buckets of each key, each full at the key's first request.
pub(super) struct Limiter {
    /// A full set, copied for each new key.
    full: [Option<Bucket>; 2],
    /// Each key's (by a hash of it; `0` for requests without one, and the keys past
    /// [`MAX_KEYS`]).
    buckets: Mutex<std::collections::HashMap<u64, [Option<Bucket>; 2]>>,
    /// Requests it has seen: each answer's own request id is drawn from it.
    seen: std::sync::atomic::AtomicU64,
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    /// The limit per minute (what the headers say).
    limit: f64,
    /// What it holds when full: `burst`'s worth of the limit.
    size: f64,
    /// What is in it.
    level: f64,
    /// When `level` was last brought up to date.
    at: Instant,
}

impl Bucket {
    fn per_second(&self) -> f64 {
        self.limit / 60.0
    }

    fn refill(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.level = (self.level + elapsed * self.per_second()).min(self.size);
        self.at = now;
    }

    /// How long until it holds `cost`.
    fn wait_for(&self, cost: f64) -> Duration {
        Duration::from_secs_f64(((cost - self.level) / self.per_second()).max(0.0))
    }

    fn said(&self) -> Said {
        Said {
            limit: self.limit as u64,
            remaining: self.level.floor() as u64,
            reset: self.wait_for(self.size),
        }
    }
}

/// One budget as an answer's headers say it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Said {
    limit: u64,
    remaining: u64,
    /// Until it is full again.
    reset: Duration,
}

/// What the limiter decided of one request, and what the answer says of the budgets.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Admission {
    /// The requests' budget and the tokens', after this request.
    budgets: [Option<Said>; 2],
    /// When refused: how long until it would be admitted (`None`: never, it costs more than a
    /// whole bucket).
    pub refused: Option<Option<Duration>>,
    /// The hosted API's own id of the request (`req_` and 24 hex digits), said in
    /// `x-request-id` (`request-id` for Anthropic).
    request_id: String,
}

/// How an API says its limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Style {
    /// `x-ratelimit-{limit,remaining,reset}-{requests,tokens}`, resets as Go durations, and
    /// `retry-after-ms` beside `retry-after` (OpenAI, Azure).
    OpenAi,
    /// `anthropic-ratelimit-{requests,tokens}-{limit,remaining,reset}`, resets as RFC 3339
    /// dates, and `retry-after` in whole seconds.
    Anthropic,
}

const REQUESTS: usize = 0;
const TOKENS: usize = 1;

impl Limiter {
    pub(super) fn new(limits: RateLimits, now: Instant) -> Limiter {
        let share = limits.burst.as_secs_f64() / 60.0;
        let bucket = |limit: Option<u64>| {
            limit.map(|limit| {
                // Never less than one request (or one token): something can always go.
                let size = (limit as f64 * share).max(1.0);
                Bucket {
                    limit: limit as f64,
                    size,
                    level: size,
                    at: now,
                }
            })
        };
        Limiter {
            full: [bucket(limits.rpm), bucket(limits.tpm)],
            buckets: Default::default(),
            seen: Default::default(),
        }
    }

    /// Takes a request costing `tokens` (its prompt and its `max_tokens`) at `now`, from the
    /// buckets of the key it presents (`key`): admitted when every bucket holds its cost (and
    /// each then pays it), else refused, paying nothing.
    pub(super) fn admit(&self, key: Option<&str>, tokens: u64, now: Instant) -> Admission {
        let mut keys = match self.buckets.lock() {
            Ok(keys) => keys,
            Err(poisoned) => poisoned.into_inner(),
        };
        let mut id = key.map_or(0, |key| {
            use std::hash::{Hash, Hasher};
            let mut hasher = std::hash::DefaultHasher::new();
            key.hash(&mut hasher);
            hasher.finish().max(1)
        });
        if !keys.contains_key(&id) && keys.len() >= MAX_KEYS {
            id = 0;
        }
        let buckets = keys.entry(id).or_insert_with(|| {
            self.full.map(|bucket| {
                bucket.map(|bucket| Bucket {
                    level: bucket.size,
                    at: now,
                    ..bucket
                })
            })
        });
        let costs = [1.0, tokens as f64];
        let mut refused: Option<Option<Duration>> = None;
        for (bucket, cost) in buckets.iter_mut().zip(costs) {
            let Some(bucket) = bucket else { continue };
            bucket.refill(now);
            if bucket.level < cost {
                let wait = (cost <= bucket.size).then(|| bucket.wait_for(cost));
                refused = Some(match refused {
                    // The longest wait of the buckets short; never, if any is never.
                    Some(earlier) => earlier.zip(wait).map(|(a, b)| a.max(b)),
                    None => wait,
                });
            }
        }
        if refused.is_none() {
            for (bucket, cost) in buckets.iter_mut().zip(costs) {
                if let Some(bucket) = bucket {
                    bucket.level -= cost;
                }
            }
        }
        let seen = self.seen.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Admission {
            request_id: format!(
                "req_{:08x}{:016x}",
                seen as u32,
                crate::seed::mix64(seen ^ 0x5EED)
            ),
            budgets: [
                buckets[REQUESTS].as_ref().map(Bucket::said),
                buckets[TOKENS].as_ref().map(Bucket::said),
            ],
            refused,
        }
    }
}

impl Admission {
    /// The headers an answer carries, in `style`; `now` is the wall clock, for dates.
    pub(super) fn headers(&self, style: Style, now: DateTime<Utc>) -> Vec<(String, String)> {
        let id_header = match style {
            Style::OpenAi => "x-request-id",
            Style::Anthropic => "request-id",
        };
        let mut headers = vec![(id_header.to_string(), self.request_id.clone())];
        for (budget, name) in self.budgets.iter().zip(["requests", "tokens"]) {
            let Some(said) = budget else { continue };
            let reset = match style {
                Style::OpenAi => go_duration(said.reset),
                Style::Anthropic => {
                    let at = now + chrono::Duration::milliseconds(said.reset.as_millis() as i64);
                    at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
                }
            };
            for (field, value) in [
                ("limit", said.limit.to_string()),
                ("remaining", said.remaining.to_string()),
                ("reset", reset),
            ] {
                let header = match style {
                    Style::OpenAi => format!("x-ratelimit-{field}-{name}"),
                    Style::Anthropic => format!("anthropic-ratelimit-{name}-{field}"),
                };
                headers.push((header, value));
            }
        }
        if let Some(Some(wait)) = self.refused {
            let seconds = wait.as_secs_f64().ceil().max(1.0) as u64;
            headers.push(("retry-after".into(), seconds.to_string()));
            if style == Style::OpenAi {
                // Rounded up: a client that waits what it is told is never a hair early.
                let ms = (wait.as_micros() as u64).div_ceil(1000);
                headers.push(("retry-after-ms".into(), ms.to_string()));
            }
        }
        headers
    }
}

/// A duration as OpenAI's headers write one: `20ms`, `1.5s`, `6m0s`.
fn go_duration(duration: Duration) -> String {
    let ms = duration.as_millis() as u64;
    if ms < 1000 {
        return format!("{ms}ms");
    }
    let (minutes, ms) = (ms / 60_000, ms % 60_000);
    let seconds = format!("{}", ms as f64 / 1000.0);
    if minutes > 0 {
        format!("{minutes}m{seconds}s")
    } else {
        format!("{seconds}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::RateLimit;

    fn limits(rpm: Option<u64>, tpm: Option<u64>) -> RateLimits {
        RateLimits {
            rpm,
            tpm,
            burst: Duration::from_secs(60),
        }
    }

    #[test]
    fn each_key_has_buckets_of_its_own_full_at_its_first_request() {
        let start = Instant::now();
        let limiter = Limiter::new(limits(Some(2), None), start);
        for key in [Some("sk-a"), None] {
            assert_eq!(limiter.admit(key, 0, start).refused, None);
            assert_eq!(limiter.admit(key, 0, start).refused, None);
            assert!(limiter.admit(key, 0, start).refused.is_some(), "{key:?}");
        }
        // A key first seen a minute on starts full, whatever the others spent.
        let later = start + Duration::from_secs(60);
        assert_eq!(limiter.admit(Some("sk-b"), 0, later).refused, None);
        assert_eq!(limiter.admit(Some("sk-b"), 0, later).refused, None);
        assert!(limiter.admit(Some("sk-b"), 0, later).refused.is_some());
    }

    #[test]
    fn a_short_burst_holds_a_seconds_budget_and_refuses_beyond_it() {
        let start = Instant::now();
        let limits = RateLimits {
            burst: Duration::from_secs(1),
            ..limits(Some(600), None)
        };
        let limiter = Limiter::new(limits, start);
        for _ in 0..10 {
            assert_eq!(limiter.admit(None, 0, start).refused, None);
        }
        let refused = limiter.admit(None, 0, start);
        assert_eq!(refused.refused, Some(Some(Duration::from_millis(100))));
        // The headers still say the minute's limit.
        assert_eq!(refused.budgets[REQUESTS].map(|s| s.limit), Some(600));
    }

    /// What llmload's own reader makes of the headers.
    fn read_back(admission: &Admission, style: Style, now: DateTime<Utc>) -> RateLimit {
        let mut read = RateLimit::default();
        for (name, value) in admission.headers(style, now) {
            if crate::records::is_server_request_id_header(&name) {
                assert!(crate::records::server_request_id(value.as_bytes()).is_some());
                continue;
            }
            assert!(crate::records::is_rate_limit_header(&name), "{name}");
            read.note(&name, &value, now);
        }
        read
    }

    #[test]
    fn a_full_bucket_admits_its_limit_then_refuses_until_it_refills() {
        let start = Instant::now();
        let limiter = Limiter::new(limits(Some(6), None), start);
        for n in 0..6 {
            let admission = limiter.admit(None, 10, start);
            assert_eq!(admission.refused, None, "request {n}");
        }
        let refused = limiter.admit(None, 10, start);
        // Six a minute: one more after ten seconds.
        assert_eq!(refused.refused, Some(Some(Duration::from_secs(10))));
        let later = limiter.admit(None, 10, start + Duration::from_millis(9_990));
        assert!(later.refused.is_some());
        assert_eq!(
            limiter
                .admit(None, 10, start + Duration::from_secs(10))
                .refused,
            None
        );
    }

    #[test]
    fn a_refusal_pays_nothing_and_tokens_are_counted_up_front() {
        let start = Instant::now();
        let limiter = Limiter::new(limits(Some(100), Some(1000)), start);
        assert_eq!(limiter.admit(None, 900, start).refused, None);
        // 100 tokens left: a 200-token request waits for 100 more, 6 s at 1000 a minute.
        let refused = limiter.admit(None, 200, start);
        assert_eq!(refused.refused, Some(Some(Duration::from_secs(6))));
        assert_eq!(refused.budgets[REQUESTS].map(|s| s.remaining), Some(99));
        assert_eq!(limiter.admit(None, 100, start).refused, None);
        // More than a whole bucket: never.
        assert_eq!(limiter.admit(None, 1001, start).refused, Some(None));
    }

    #[test]
    fn openai_headers_read_back_as_they_were_meant() {
        let start = Instant::now();
        let now = Utc::now();
        let limiter = Limiter::new(limits(Some(60), Some(150_000)), start);
        limiter.admit(None, 16, start);
        let read = read_back(&limiter.admit(None, 0, start), Style::OpenAi, now);
        assert_eq!(read.requests.limit, Some(60));
        assert_eq!(read.requests.remaining, Some(58));
        // Two requests short of full at one a second.
        assert_eq!(read.requests.reset_ms, Some(2000));
        assert_eq!(read.tokens.remaining, Some(149_984));
        assert_eq!(read.tokens.reset_ms, Some(6));
        assert_eq!(read.retry_after_ms, None);
        let limiter = Limiter::new(limits(Some(1), None), start);
        limiter.admit(None, 0, start);
        let refused = read_back(
            &limiter.admit(None, 0, start + Duration::from_millis(500)),
            Style::OpenAi,
            now,
        );
        assert_eq!(refused.retry_after_ms, Some(59_500));
    }

    #[test]
    fn anthropic_headers_give_dates_and_whole_seconds() {
        let start = Instant::now();
        let now = Utc::now();
        let limiter = Limiter::new(limits(Some(2), None), start);
        limiter.admit(None, 0, start);
        limiter.admit(None, 0, start);
        let admission = limiter.admit(None, 0, start);
        let headers = admission.headers(Style::Anthropic, now);
        assert!(headers
            .iter()
            .any(|(name, _)| name == "anthropic-ratelimit-requests-remaining"));
        assert!(!headers.iter().any(|(name, _)| name == "retry-after-ms"));
        assert!(headers.iter().any(|(name, _)| name == "request-id"));
        let read = read_back(&admission, Style::Anthropic, now);
        assert_eq!(read.retry_after_ms, Some(30_000));
        // The reset date is written to the second.
        let reset = read.requests.reset_ms.expect("a reset");
        assert!((59_000..=60_000).contains(&reset), "{reset}");
    }

    #[test]
    fn durations_are_written_as_go_writes_them() {
        for (ms, text) in [
            (20, "20ms"),
            (1500, "1.5s"),
            (2000, "2s"),
            (360_000, "6m0s"),
            (61_250, "1m1.25s"),
        ] {
            assert_eq!(go_duration(Duration::from_millis(ms)), text);
        }
    }
}
