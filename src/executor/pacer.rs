//! The client's own pacing to a provider's limits (`target { limits rpm=… tpm=… }`), and the
//! keys requests are sent with in turn (`api-key` once per key): each request goes out with a
//! key and no sooner than that key's budgets allow, as an application's rate limiter holds it,
//! so that a run measures the server at the limit instead of collecting its refusals.
//!
//! The budgets are spent evenly (a generic cell rate: one request every `60 / rpm` seconds, and
//! `60 / tpm` seconds per token of its prompt and answer), never in bursts, from the run's
//! start, across every phase: a provider's limit is the key's, not a phase's. A request asks
//! for its slot when it is due (its intended time, or when its user is free); the slots are
//! handed out in that order, each after the one before, so the requests the budgets hold back
//! queue at the client and the open loop slows to the limit. Each record says how long it was
//! held (`paced_us`), and its intended time moves to its slot: the schedule lag stays the
//! client's own lateness, not the budget's.
//!
//! With several keys, a request takes the key whose budgets free first, the keys taken in turn
//! among those free alike (all of them, when none has budgets): so their budgets add up, as a
//! gateway's key rotation spends them, and keys of different tiers each carry their share.
//!
//! With `on-throttle "pace"`, a key's budgets the plan leaves out are learned from its answers
//! (`x-ratelimit-limit-requests` and `-tokens`, per minute), and a throttled answer's wait holds
//! the key until then: requests sent before the first answer go unheld.
//!
//! What this is not: the server's limits (the simulator's `limits.rs`), or what becomes of a
//! request the server throttles anyway (`on-throttle`, in `send.rs`).

use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use crate::plan::ClientLimits;

/// The keys' budgets and their next free slots.
pub(super) struct Pacer {
    /// Budgets are learned from the server's answers where the plan set none
    /// (`on-throttle "pace"`).
    learns: bool,
    state: Mutex<State>,
}

/// One key's budgets.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Budget {
    /// The gap between two requests (`60 s / rpm`).
    request_gap: Option<Duration>,
    /// The time one token takes of the token budget (`60 s / tpm`).
    token_time: Option<Duration>,
}

impl Budget {
    fn of(limits: Option<ClientLimits>) -> Budget {
        Budget {
            request_gap: limits.and_then(|l| per_minute(l.rpm)),
            token_time: limits.and_then(|l| per_minute(l.tpm)),
        }
    }

    fn is_some(&self) -> bool {
        self.request_gap.is_some() || self.token_time.is_some()
    }
}

/// The time one of `n` a minute takes.
fn per_minute(n: Option<u64>) -> Option<Duration> {
    n.filter(|&n| n > 0)
        .map(|n| Duration::from_secs_f64(60.0 / n as f64))
}

struct State {
    /// Each key's budgets.
    budgets: Vec<Budget>,
    /// Which keys' budgets the plan set (they are not learned).
    planned: Vec<bool>,
    /// When each key's next request may go by each of its budgets.
    next: Vec<[Option<Instant>; 2]>,
    /// The key first in turn.
    turn: usize,
}

/// The key a request goes with, and when.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Turn {
    /// The key's place among the run's.
    pub key: usize,
    /// When its budgets let it go; `None` when the key has none (it goes when due).
    pub slot: Option<Instant>,
}

impl Pacer {
    /// A pacer for keys with these budgets, learning those the plan leaves out from the
    /// server's answers when `learns`; none when there is one key, without budgets, and
    /// nothing to learn.
    pub(super) fn new(keys: &[Option<ClientLimits>], learns: bool) -> Option<Pacer> {
        let budgets: Vec<Budget> = keys.iter().map(|&limits| Budget::of(limits)).collect();
        (learns || budgets.len() > 1 || budgets.iter().any(Budget::is_some)).then(|| Pacer {
            learns,
            state: Mutex::new(State {
                next: vec![[None, None]; budgets.len()],
                planned: budgets.iter().map(Budget::is_some).collect(),
                budgets,
                turn: 0,
            }),
        })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        match self.state.lock() {
            Ok(state) => state,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// The key and time a request costing `tokens` (its prompt and its answer) goes with,
    /// asked when it is due (`due`): the key whose budgets free first (the next in turn among
    /// those alike), at the latest of then and its budgets' next free slots. The slot is taken:
    /// that key's next request comes after it.
    pub(super) fn take(&self, due: Instant, tokens: u64) -> Turn {
        let mut state = self.state();
        let keys = state.budgets.len();
        let (key, slot) = (0..keys)
            .map(|step| (state.turn + step) % keys)
            .map(|key| {
                let free = state.next[key].iter().flatten();
                (key, free.fold(due, |slot, &free| slot.max(free)))
            })
            // The earliest; the first in turn of those alike.
            .min_by_key(|&(_, slot)| slot)
            .unwrap_or((0, due));
        state.turn = (key + 1) % keys.max(1);
        let Some(&budget) = state.budgets.get(key) else {
            return Turn { key, slot: None };
        };
        if let Some(gap) = budget.request_gap {
            state.next[key][0] = Some(slot + gap);
        }
        if let Some(per_token) = budget.token_time {
            let spent = per_token.saturating_mul(u32::try_from(tokens).unwrap_or(u32::MAX));
            state.next[key][1] = Some(slot + spent);
        }
        let held = state.next[key].iter().flatten().any(|&free| free > due);
        Turn {
            key,
            slot: (budget.is_some() || held).then_some(slot),
        }
    }

    /// What an answer to a request sent with `key` said of the server's limits, heard at
    /// `now`: where the pacer learns, the key's budgets become those it said (read as per
    /// minute, as OpenAI's, Azure's and Anthropic's are) unless the plan set them, and a wait
    /// it asked for (`retry-after`) holds the key until then.
    pub(super) fn heard(&self, key: usize, said: &crate::records::RateLimit, now: Instant) {
        if !self.learns {
            return;
        }
        let mut state = self.state();
        if key >= state.budgets.len() {
            return;
        }
        if !state.planned[key] {
            let learned = Budget {
                request_gap: per_minute(said.requests.limit),
                token_time: per_minute(said.tokens.limit),
            };
            if learned.is_some() {
                state.budgets[key] = learned;
            }
        }
        if let Some(wait) = said.retry_after_ms {
            let until = now + Duration::from_millis(wait);
            for free in state.next[key].iter_mut() {
                *free = Some(free.map_or(until, |free| free.max(until)));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(rpm: Option<u64>, tpm: Option<u64>) -> [Option<ClientLimits>; 1] {
        [Some(ClientLimits { rpm, tpm })]
    }

    fn slots(pacer: &Pacer, due: Instant, n: usize, tokens: u64) -> Vec<(usize, Duration)> {
        (0..n)
            .map(|_| {
                let turn = pacer.take(due, tokens);
                let slot = turn.slot.expect("a budget");
                (turn.key, slot - due)
            })
            .collect()
    }

    #[test]
    fn requests_due_together_are_spread_at_the_budgets_pace() {
        let pacer = Pacer::new(&limits(Some(600), None), false).expect("a budget");
        let start = Instant::now();
        let ms = |n| Duration::from_millis(n);
        let slots = slots(&pacer, start, 4, 100);
        assert_eq!(
            slots,
            [(0, ms(0)), (0, ms(100)), (0, ms(200)), (0, ms(300))]
        );
        // One due after the queue has drained goes at once.
        let later = pacer.take(start + ms(1000), 100);
        assert_eq!(later.slot, Some(start + ms(1000)));
    }

    #[test]
    fn the_token_budget_spaces_requests_by_their_size() {
        // 6,000 tokens a minute: 10 ms a token.
        let pacer = Pacer::new(&limits(None, Some(6000)), false).expect("a budget");
        let start = Instant::now();
        assert_eq!(pacer.take(start, 50).slot, Some(start));
        let ms = |n| Some(start + Duration::from_millis(n));
        assert_eq!(pacer.take(start, 10).slot, ms(500));
        assert_eq!(pacer.take(start, 10).slot, ms(600));
    }

    #[test]
    fn the_tighter_budget_holds_and_no_budget_is_no_pacer() {
        let pacer = Pacer::new(&limits(Some(60), Some(600_000)), false).expect("budgets");
        let start = Instant::now();
        pacer.take(start, 10);
        // A second a request beats 0.1 ms a token.
        let second = pacer.take(start, 10).slot;
        assert_eq!(second, Some(start + Duration::from_secs(1)));
        assert!(Pacer::new(&limits(None, None), false).is_none());
        assert!(Pacer::new(&[None], false).is_none());
    }

    #[test]
    fn keys_alike_take_turns_and_add_their_budgets_up() {
        // Two keys of 600 requests a minute: together one request every 50 ms.
        let each = Some(ClientLimits {
            rpm: Some(600),
            tpm: None,
        });
        let pacer = Pacer::new(&[each, each], false).expect("budgets");
        let start = Instant::now();
        let ms = |n| Duration::from_millis(n);
        let taken = slots(&pacer, start, 6, 1);
        assert_eq!(
            taken,
            [
                (0, ms(0)),
                (1, ms(0)),
                (0, ms(100)),
                (1, ms(100)),
                (0, ms(200)),
                (1, ms(200))
            ]
        );
    }

    #[test]
    fn a_key_of_a_bigger_tier_carries_more_of_the_requests() {
        let key = |rpm| {
            Some(ClientLimits {
                rpm: Some(rpm),
                tpm: None,
            })
        };
        // 300 and 600 requests a minute: 200 ms and 100 ms apart.
        let pacer = Pacer::new(&[key(300), key(600)], false).expect("budgets");
        let start = Instant::now();
        let taken = slots(&pacer, start, 30, 1);
        let big = taken.iter().filter(|(key, _)| *key == 1).count();
        assert_eq!(big, 20, "{taken:?}");
        // Together 900 a minute: 30 requests in 2 s (the last starts before it ends).
        let last = taken.iter().map(|(_, at)| *at).max().expect("slots");
        assert!(last < Duration::from_secs(2), "{last:?}");
    }

    #[test]
    fn keys_without_budgets_only_take_turns() {
        let pacer = Pacer::new(&[None, None, None], false).expect("several keys");
        let start = Instant::now();
        let keys: Vec<Turn> = (0..4).map(|_| pacer.take(start, 1)).collect();
        let at: Vec<usize> = keys.iter().map(|t| t.key).collect();
        assert_eq!(at, [0, 1, 2, 0]);
        assert!(keys.iter().all(|t| t.slot.is_none()));
    }

    #[test]
    fn pacing_learns_each_keys_budget_from_the_answers_and_honours_their_waits() {
        use crate::records::{Budget as Said, RateLimit};
        let said = |rpm: u64, retry_after_ms: Option<u64>| RateLimit {
            retry_after_ms,
            requests: Said {
                limit: Some(rpm),
                remaining: Some(0),
                reset_ms: None,
            },
            ..Default::default()
        };
        let pacer = Pacer::new(&[None, None], true).expect("learns");
        let start = Instant::now();
        // Nothing heard yet: the keys take turns, unheld.
        assert_eq!(pacer.take(start, 1), Turn { key: 0, slot: None });
        assert_eq!(pacer.take(start, 1), Turn { key: 1, slot: None });
        // Key 0 says 600 a minute, key 1 120: 100 ms and 500 ms apart.
        pacer.heard(0, &said(600, None), start);
        pacer.heard(1, &said(120, None), start);
        let ms = |n| Duration::from_millis(n);
        let taken = slots(&pacer, start, 7, 1);
        assert_eq!(
            taken,
            [
                (0, ms(0)),
                (1, ms(0)),
                (0, ms(100)),
                (0, ms(200)),
                (0, ms(300)),
                (0, ms(400)),
                (1, ms(500))
            ]
        );
        // A throttled answer's wait holds its key until then, whatever its budget.
        pacer.heard(1, &said(120, Some(5_000)), start);
        let next = pacer.take(start + ms(4_000), 1);
        assert_eq!(next.key, 0);
        // A plan's own budgets are not replaced.
        let planned = Pacer::new(&limits(Some(60), None), true).expect("budgets");
        planned.heard(0, &said(6_000, None), start);
        planned.take(start, 1);
        assert_eq!(
            planned.take(start, 1).slot,
            Some(start + Duration::from_secs(1))
        );
        // Without `pace`, nothing is learned.
        let counting = Pacer::new(&[None, None], false).expect("keys");
        counting.heard(0, &said(60, Some(1_000)), start);
        assert_eq!(counting.take(start, 1).slot, None);
    }
}
