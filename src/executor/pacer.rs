//! The client's own pacing to a provider's limits (`target { limits rpm=… tpm=… }`): each
//! request goes out no sooner than the budgets allow, as an application's rate limiter holds
//! it, so that a run measures the server at the limit instead of collecting its refusals.
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
//! What this is not: the server's limits (the simulator's `limits.rs`), or what becomes of a
//! request the server throttles anyway (`on-throttle`, in `send.rs`).

use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use crate::plan::ClientLimits;

/// The budgets' next free slots.
pub(super) struct Pacer {
    /// The gap between two requests (`60 s / rpm`).
    request_gap: Option<Duration>,
    /// The time one token takes of the token budget (`60 s / tpm`).
    token_time: Option<Duration>,
    /// When the next request may go by each budget.
    next: Mutex<[Option<Instant>; 2]>,
}

impl Pacer {
    /// A pacer for the limits, or none when they set none.
    pub(super) fn new(limits: ClientLimits) -> Option<Pacer> {
        let per_minute = |n: Option<u64>| {
            n.filter(|&n| n > 0)
                .map(|n| Duration::from_secs_f64(60.0 / n as f64))
        };
        let (request_gap, token_time) = (per_minute(limits.rpm), per_minute(limits.tpm));
        (request_gap.is_some() || token_time.is_some()).then(|| Pacer {
            request_gap,
            token_time,
            next: Mutex::new([None, None]),
        })
    }

    /// The time a request costing `tokens` (its prompt and its answer) may go, asked when it is
    /// due (`due`): the latest of then and each budget's next free slot. The slot is taken:
    /// the next request's comes after it.
    pub(super) fn slot(&self, due: Instant, tokens: u64) -> Instant {
        let mut next = match self.next.lock() {
            Ok(next) => next,
            Err(poisoned) => poisoned.into_inner(),
        };
        let slot = next
            .iter()
            .flatten()
            .fold(due, |slot, &free| slot.max(free));
        if let Some(gap) = self.request_gap {
            next[0] = Some(slot + gap);
        }
        if let Some(per_token) = self.token_time {
            let spent = per_token.saturating_mul(u32::try_from(tokens).unwrap_or(u32::MAX));
            next[1] = Some(slot + spent);
        }
        slot
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(rpm: Option<u64>, tpm: Option<u64>) -> ClientLimits {
        ClientLimits { rpm, tpm }
    }

    #[test]
    fn requests_due_together_are_spread_at_the_budgets_pace() {
        let pacer = Pacer::new(limits(Some(600), None)).expect("a budget");
        let start = Instant::now();
        let slots: Vec<Duration> = (0..4).map(|_| pacer.slot(start, 100) - start).collect();
        let ms = |n| Duration::from_millis(n);
        assert_eq!(slots, [ms(0), ms(100), ms(200), ms(300)]);
        // One due after the queue has drained goes at once.
        assert_eq!(pacer.slot(start + ms(1000), 100), start + ms(1000));
    }

    #[test]
    fn the_token_budget_spaces_requests_by_their_size() {
        // 6,000 tokens a minute: 10 ms a token.
        let pacer = Pacer::new(limits(None, Some(6000))).expect("a budget");
        let start = Instant::now();
        assert_eq!(pacer.slot(start, 50), start);
        assert_eq!(pacer.slot(start, 10), start + Duration::from_millis(500));
        assert_eq!(pacer.slot(start, 10), start + Duration::from_millis(600));
    }

    #[test]
    fn the_tighter_budget_holds_and_no_budget_is_no_pacer() {
        let pacer = Pacer::new(limits(Some(60), Some(600_000))).expect("budgets");
        let start = Instant::now();
        pacer.slot(start, 10);
        // A second a request beats 0.1 ms a token.
        assert_eq!(pacer.slot(start, 10), start + Duration::from_secs(1));
        assert!(Pacer::new(limits(None, None)).is_none());
    }
}
