//! Whether a phase's load stays within the server's rate limits: the question a sweep's step or
//! a search's probe must answer against a hosted API before its latencies mean anything, since
//! a load above a key's limits is not sustained, however well its window went.
//!
//! Two signs say a load is above the limits. The server throttled more than 1% of the phase's
//! requests (or sent them back to be retried). Or, before any refusal, the budget its answers
//! said was left fell through the window: a provider's bucket holds a minute's budget (OpenAI's,
//! Anthropic's), so a 30-second window at twice the limit can end without a single 429 while
//! spending half of it, and a search would take that load as sustained. The fall is measured as
//! the saturation rule measures a queue, from the second fifth of the window on (the first is
//! the warm-up's wake): a least-squares line through the windows' mean share left, whose fall
//! across them must reach 1.5% of the budget, and two of its units (a small budget's one
//! request is noise), with the last fifth below the second.
//!
//! What it can see: a load above the limit by about `1.5% × budget ÷ window` a second; with a
//! minute's bucket and a 30-second window, about 4% over the limit. A server that says nothing
//! of its budgets is judged by its refusals alone.
//!
//! It is not the verdict (`verdict::steps` decides what a step's result is), nor the wait
//! between a search's probes (the session's), which uses [`PhaseMetrics::budget_refill_s`].
//!
//! [`PhaseMetrics::budget_refill_s`]: super::PhaseMetrics

use super::aggregates::RequestCounts;
use super::profile::{LastBudget, ProfileWindow, WINDOWS};

/// The share of a phase's completed requests the server may throttle before its load counts
/// as above the limits.
pub const THROTTLED_SHARE: f64 = 0.01;
/// The least fall of the budget left through a window that counts as a drain, as a share of it.
const DRAIN_SHARE: f64 = 0.015;
/// ... and in the budget's own units (requests or tokens).
const DRAIN_UNITS: f64 = 2.0;
/// Windows with a budget said that the trend needs.
const MIN_POINTS: usize = 4;

/// Why a phase's load is above the server's rate limits.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(transparent)]
pub struct OverLimits {
    /// In a sentence.
    pub why: String,
    /// Told by the server's refusals (rather than its budget's fall): objectives that judge
    /// throttling themselves (`throttled-rate`) decide instead.
    #[serde(skip)]
    pub refused: bool,
}

/// Why a phase's load is above the server's rate limits, if it is: its budget falling through
/// its window, else its refusals.
pub fn over_limits(
    windows: &[ProfileWindow],
    last: Option<LastBudget>,
    requests: &RequestCounts,
) -> Option<OverLimits> {
    let drain = last.and_then(|last| drained(windows, last.limit));
    drain
        .map(|why| OverLimits {
            why,
            refused: false,
        })
        .or_else(|| throttled(requests).map(|why| OverLimits { why, refused: true }))
}

/// More than [`THROTTLED_SHARE`] of the completed requests throttled (their last attempt, or
/// one before a retry).
fn throttled(requests: &RequestCounts) -> Option<String> {
    let completed = requests.completed();
    let turned_away = requests.throttled + requests.retried;
    (completed > 0 && turned_away as f64 > THROTTLED_SHARE * completed as f64).then(|| {
        format!(
            "the server throttled {turned_away} of its {completed} requests ({:.1}%, {} sent back \
             to be retried): the load is above the key's rate limits",
            100.0 * turned_away as f64 / completed as f64,
            requests.retried
        )
    })
}

/// The budget left falling through the window (a budget of `limit` units).
fn drained(windows: &[ProfileWindow], limit: u64) -> Option<String> {
    let fifth = WINDOWS / 5;
    let points: Vec<(f64, f64)> = windows
        .iter()
        .skip(fifth)
        .filter_map(|w| Some(((w.from_s + w.to_s) / 2.0, w.budget_left?)))
        .collect();
    if points.len() < MIN_POINTS {
        return None;
    }
    let slope = least_squares_slope(&points)?;
    let span = points[points.len() - 1].0 - points[0].0;
    let fall = -slope * span;
    let needed = DRAIN_SHARE.max(DRAIN_UNITS / limit.max(1) as f64);
    let mean_of = |range: std::ops::Range<usize>| {
        let said: Vec<f64> = windows
            .get(range)?
            .iter()
            .filter_map(|w| w.budget_left)
            .collect();
        (!said.is_empty()).then(|| said.iter().sum::<f64>() / said.len() as f64)
    };
    let (second, last) = (
        mean_of(fifth..2 * fifth)?,
        mean_of(WINDOWS - fifth..WINDOWS)?,
    );
    if fall < needed || last >= second {
        return None;
    }
    let per_s = -slope;
    Some(format!(
        "the rate-limit budget its answers said was left fell from {:.1}% to {:.1}% through the \
         window ({:.2} points a second): at this load it runs out in about {:.0} s more, and \
         requests are throttled from then on",
        100.0 * second,
        100.0 * last,
        100.0 * per_s,
        last / per_s
    ))
}

/// The slope of the least-squares line through `points` (x, y); `None` when every x is the same.
fn least_squares_slope(points: &[(f64, f64)]) -> Option<f64> {
    let n = points.len() as f64;
    let mean_x = points.iter().map(|p| p.0).sum::<f64>() / n;
    let mean_y = points.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = points.iter().map(|p| (p.0 - mean_x).powi(2)).sum();
    let sxy: f64 = points.iter().map(|p| (p.0 - mean_x) * (p.1 - mean_y)).sum();
    (sxx > 0.0).then(|| sxy / sxx)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ten windows of a second, each with this share left.
    fn windows(left: impl Fn(usize) -> Option<f64>) -> Vec<ProfileWindow> {
        (0..WINDOWS)
            .map(|w| ProfileWindow {
                from_s: w as f64,
                to_s: (w + 1) as f64,
                in_flight: 1.0,
                ttft_mean_ms: Some(10.0),
                sent: 10,
                e2e_mean_s: Some(0.1),
                budget_left: left(w),
            })
            .collect()
    }

    fn budget(limit: u64) -> Option<LastBudget> {
        Some(LastBudget {
            send_us: 0,
            limit,
            refill_s: Some(1.0),
        })
    }

    fn counts(ok: u64, throttled: u64, retried: u64) -> RequestCounts {
        RequestCounts {
            sent: ok + throttled,
            ok,
            throttled,
            retried,
            ..Default::default()
        }
    }

    #[test]
    fn a_budget_spent_faster_than_it_refills_is_over_the_limits_before_any_refusal() {
        // A minute's bucket of 600 at twice its refill: a point a second.
        let falling = windows(|w| Some(1.0 - 0.01 * w as f64));
        let why = over_limits(&falling, budget(600), &counts(100, 0, 0))
            .expect("a drain")
            .why;
        assert!(why.contains("fell from 97.5% to 91.5%"), "{why}");
        assert!(why.contains("1.00 points a second"), "{why}");
        assert!(why.contains("runs out in about 9"), "{why}");
    }

    #[test]
    fn a_full_or_refilling_budget_and_noise_are_not() {
        let full = windows(|_| Some(1.0));
        assert_eq!(over_limits(&full, budget(600), &counts(100, 0, 0)), None);
        // Refilling after the probe before: rising, not falling.
        let rising = windows(|w| Some(0.5 + 0.05 * w as f64));
        assert_eq!(over_limits(&rising, budget(600), &counts(100, 0, 0)), None);
        // A dip of a request or two in a small budget is its granularity, not a drain.
        let dips = windows(|w| Some(if w % 3 == 0 { 0.9 } else { 1.0 }));
        assert_eq!(over_limits(&dips, budget(20), &counts(100, 0, 0)), None);
        // Less than 1.5% of a big budget through the window: within what it can tell.
        let slight = windows(|w| Some(1.0 - 0.001 * w as f64));
        assert_eq!(
            over_limits(&slight, budget(100_000), &counts(100, 0, 0)),
            None
        );
        // Too few answers spoke of it.
        let sparse = windows(|w| (w > 7).then_some(0.5));
        assert_eq!(over_limits(&sparse, budget(600), &counts(100, 0, 0)), None);
        // A server that says nothing of its budgets.
        let silent = windows(|_| None);
        assert_eq!(over_limits(&silent, None, &counts(100, 0, 0)), None);
    }

    #[test]
    fn refusals_past_one_percent_are_over_the_limits() {
        let full = windows(|_| Some(1.0));
        assert_eq!(over_limits(&full, budget(600), &counts(199, 1, 0)), None);
        let over = over_limits(&full, budget(600), &counts(195, 5, 0)).expect("throttled");
        assert!(over.refused);
        assert!(
            over.why.contains("throttled 5 of its 200 requests (2.5%"),
            "{}",
            over.why
        );
        // Retried and answered in the end, but turned away first.
        let over = over_limits(&full, None, &counts(200, 0, 4)).expect("retried");
        assert!(
            over.why.contains("4 sent back to be retried"),
            "{}",
            over.why
        );
        // A fall and refusals together: the fall is said (objectives on throttling do not
        // excuse it).
        let falling = windows(|w| Some(1.0 - 0.01 * w as f64));
        let over = over_limits(&falling, budget(600), &counts(195, 5, 0)).expect("both");
        assert!(
            !over.refused && over.why.contains("fell from"),
            "{}",
            over.why
        );
    }
}
