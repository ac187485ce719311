//! How a phase's load evolved through its window: requests in flight and time to first token,
//! window by window, and whether the server was keeping up (saturation).
//!
//! A queue that keeps growing through a measured window is saturation, not a result: the
//! phase's latencies then depend on how long it ran, not on its load. [`saturation`] says so
//! from the windows; the same rule judges a finished phase (from its records) and a probe that
//! is still running (from live counts), so that a search and its report agree.
//!
//! It is not a time series of every metric (that is the report's), only what saturation needs.

use serde::Serialize;

/// The width of a bin until a phase outgrows [`MAX_BINS`].
const FIRST_BIN_US: u64 = 10_000;
/// Bins held at most: a longer phase merges neighbouring bins (doubling their width), so memory
/// stays bounded however long it runs.
const MAX_BINS: usize = 8192;
/// Windows a phase is cut into.
pub const WINDOWS: usize = 10;

/// One window of a phase.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ProfileWindow {
    /// Its start, in seconds from the phase's start.
    pub from_s: f64,
    /// Its end.
    pub to_s: f64,
    /// Requests in flight, on average over the window.
    pub in_flight: f64,
    /// The mean time to first token of the requests sent in the window (those that had one).
    pub ttft_mean_ms: Option<f64>,
    /// Requests sent in the window.
    pub sent: u64,
    /// The mean time in flight (send to end) of the requests sent in the window that ended,
    /// in seconds: with `sent`, what Little's law says the window's load holds in flight.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub e2e_mean_s: Option<f64>,
    /// The mean share of the server's tightest rate-limit budget that the answers to the
    /// window's requests said was left (`x-ratelimit-remaining` ÷ limit, or Anthropic's), when
    /// they said it: falling through a window, the load spends the budget faster than it
    /// refills ([`super::budget`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget_left: Option<f64>,
}

/// Gathers a phase's load, bin by bin, as requests (or live counts) come.
#[derive(Debug, Clone)]
pub struct ProfileBuilder {
    start_us: u64,
    bin_us: u64,
    /// Time spent in flight in each bin (µs·requests), for what is not in `full`.
    partial: Vec<f64>,
    /// A difference array of requests in flight through whole bins: bin b holds
    /// `bin_us × prefix_sum(full)[b]` more. O(1) per request however long it lasted.
    full: Vec<i64>,
    ttft_sum: Vec<f64>,
    ttft_count: Vec<u32>,
    /// Time in flight of the requests sent in each bin that ended (µs), and how many ended.
    e2e_sum_us: Vec<f64>,
    e2e_count: Vec<u32>,
    sent: Vec<u32>,
    /// The share of the tightest rate-limit budget left, summed over the answers to each bin's
    /// requests, and how many said it.
    budget_sum: Vec<f64>,
    budget_count: Vec<u32>,
    /// What the latest-sent answer that spoke of rate limits said.
    last_budget: Option<LastBudget>,
}

/// The latest answer's rate-limit facts: what the budget trend is measured in, and how long
/// until every budget is whole again.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LastBudget {
    /// Its request's send time (the records' clock).
    pub send_us: u64,
    /// The size of its tightest budget (requests or tokens).
    pub limit: u64,
    /// The longest wait it said until a budget is whole again, seconds.
    pub refill_s: Option<f64>,
}

impl ProfileBuilder {
    /// A profile of a phase that started at `start_us` (the records' clock).
    pub fn new(start_us: u64) -> ProfileBuilder {
        ProfileBuilder {
            start_us,
            bin_us: FIRST_BIN_US,
            partial: Vec::new(),
            full: Vec::new(),
            ttft_sum: Vec::new(),
            ttft_count: Vec::new(),
            e2e_sum_us: Vec::new(),
            e2e_count: Vec::new(),
            sent: Vec::new(),
            budget_sum: Vec::new(),
            budget_count: Vec::new(),
            last_budget: None,
        }
    }

    /// The bin of `at_us`, growing (or coarsening) the bins to hold it.
    fn bin(&mut self, at_us: u64) -> usize {
        let mut index = (at_us.saturating_sub(self.start_us) / self.bin_us) as usize;
        while index >= MAX_BINS {
            self.coarsen();
            index = (at_us.saturating_sub(self.start_us) / self.bin_us) as usize;
        }
        if index >= self.partial.len() {
            let len = index + 1;
            self.partial.resize(len, 0.0);
            self.full.resize(len + 1, 0);
            self.ttft_sum.resize(len, 0.0);
            self.ttft_count.resize(len, 0);
            self.e2e_sum_us.resize(len, 0.0);
            self.e2e_count.resize(len, 0);
            self.sent.resize(len, 0);
            self.budget_sum.resize(len, 0.0);
            self.budget_count.resize(len, 0);
        }
        index
    }

    /// Merges neighbouring bins: every bin twice as wide.
    fn coarsen(&mut self) {
        let integrals = self.integrals();
        let pairs = integrals.len().div_ceil(2);
        let merge_f = |v: &[f64]| -> Vec<f64> { v.chunks(2).map(|c| c.iter().sum()).collect() };
        let merge_u = |v: &[u32]| -> Vec<u32> { v.chunks(2).map(|c| c.iter().sum()).collect() };
        self.partial = merge_f(&integrals);
        self.full = vec![0; pairs + 1];
        self.ttft_sum = merge_f(&self.ttft_sum);
        self.ttft_count = merge_u(&self.ttft_count);
        self.e2e_sum_us = merge_f(&self.e2e_sum_us);
        self.e2e_count = merge_u(&self.e2e_count);
        self.sent = merge_u(&self.sent);
        self.budget_sum = merge_f(&self.budget_sum);
        self.budget_count = merge_u(&self.budget_count);
        self.bin_us *= 2;
    }

    /// Time in flight per bin (µs·requests).
    fn integrals(&self) -> Vec<f64> {
        let mut level = 0i64;
        self.partial
            .iter()
            .enumerate()
            .map(|(b, partial)| {
                level += self.full[b];
                partial + level as f64 * self.bin_us as f64
            })
            .collect()
    }

    /// Adds `level` requests in flight from `from_us` to `to_us`.
    pub fn add_in_flight(&mut self, from_us: u64, to_us: u64, level: f64) {
        if to_us <= from_us || level == 0.0 {
            return;
        }
        // Grow to the end first: coarsening may change the bins of both ends.
        let last = self.bin(to_us.saturating_sub(1));
        let first = self.bin(from_us);
        let last = last.max(first).min(self.partial.len() - 1);
        let bin_start = |b: usize| self.start_us + b as u64 * self.bin_us;
        if first == last {
            self.partial[first] += (to_us - from_us) as f64 * level;
            return;
        }
        self.partial[first] += (bin_start(first + 1) - from_us.max(self.start_us)) as f64 * level;
        self.partial[last] += (to_us - bin_start(last)) as f64 * level;
        if last > first + 1 {
            if level.fract() == 0.0 {
                self.full[first + 1] += level as i64;
                self.full[last] -= level as i64;
            } else {
                for b in first + 1..last {
                    self.partial[b] += self.bin_us as f64 * level;
                }
            }
        }
    }

    /// Adds a request sent at `send_us`, in flight until `end_us`, with its time to first
    /// token (when it had one).
    pub fn add_request(&mut self, send_us: u64, end_us: u64, ttft_ms: Option<f64>) {
        self.add_in_flight(send_us, end_us, 1.0);
        self.add_sent(send_us);
        self.add_outcome(send_us, ttft_ms, Some(end_us.saturating_sub(send_us)));
    }

    /// Counts a request sent at `send_us`, as it is sent (a live count adds the in-flight
    /// level with [`ProfileBuilder::add_in_flight`], and what came of it with
    /// [`ProfileBuilder::add_outcome`]).
    pub fn add_sent(&mut self, send_us: u64) {
        let b = self.bin(send_us);
        self.sent[b] += 1;
    }

    /// What came of a request sent at `send_us`: its time to first token and its time in
    /// flight, when it had them.
    pub fn add_outcome(&mut self, send_us: u64, ttft_ms: Option<f64>, in_flight_us: Option<u64>) {
        let b = self.bin(send_us);
        if let Some(ttft) = ttft_ms {
            self.ttft_sum[b] += ttft;
            self.ttft_count[b] += 1;
        }
        if let Some(e2e) = in_flight_us {
            self.e2e_sum_us[b] += e2e as f64;
            self.e2e_count[b] += 1;
        }
    }

    /// What the answer to a request sent at `send_us` said of the server's rate limits: the
    /// share left of its tightest budget, counted in the request's bin.
    pub fn add_budget(&mut self, send_us: u64, said: &crate::records::RateLimit) {
        let budgets = [
            &said.requests,
            &said.tokens,
            &said.input_tokens,
            &said.output_tokens,
        ];
        let tightest = budgets
            .iter()
            .filter_map(|budget| match (budget.remaining, budget.limit) {
                (Some(left), Some(limit)) if limit > 0 => {
                    Some(((left as f64 / limit as f64).min(1.0), limit))
                }
                _ => None,
            })
            .min_by(|a, b| a.0.total_cmp(&b.0));
        let Some((share, limit)) = tightest else {
            return;
        };
        let b = self.bin(send_us);
        self.budget_sum[b] += share;
        self.budget_count[b] += 1;
        if self.last_budget.is_none_or(|last| last.send_us <= send_us) {
            let refill_ms = budgets.iter().filter_map(|budget| budget.reset_ms).max();
            self.last_budget = Some(LastBudget {
                send_us,
                limit,
                refill_s: refill_ms.map(|ms| ms as f64 / 1000.0),
            });
        }
    }

    /// What the latest answer that spoke of rate limits said.
    pub fn last_budget(&self) -> Option<LastBudget> {
        self.last_budget
    }

    /// Requests in flight on average from `from_us` to `to_us` (the records' clock).
    pub fn mean_in_flight(&self, from_us: u64, to_us: u64) -> f64 {
        if to_us <= from_us {
            return 0.0;
        }
        let integrals = self.integrals();
        let bin = self.bin_us as f64;
        let (from, to) = (
            from_us.saturating_sub(self.start_us) as f64,
            to_us.saturating_sub(self.start_us) as f64,
        );
        let first = (from / bin) as usize;
        let last = ((to / bin).ceil() as usize).min(integrals.len());
        let mut total = 0.0;
        for (b, integral) in integrals.iter().enumerate().take(last).skip(first) {
            let (lo, hi) = (b as f64 * bin, (b + 1) as f64 * bin);
            total += integral * ((hi.min(to) - lo.max(from)) / bin).clamp(0.0, 1.0);
        }
        total / (to_us - from_us) as f64
    }

    /// The phase cut into [`WINDOWS`] windows from its start to `end_us`.
    pub fn windows(&self, end_us: u64) -> Vec<ProfileWindow> {
        let span = end_us.saturating_sub(self.start_us);
        if span == 0 {
            return Vec::new();
        }
        let integrals = self.integrals();
        let bin = self.bin_us as f64;
        let width = span as f64 / WINDOWS as f64;
        // Counts go to the window holding their bin's start, whole (they are not divisible);
        // time in flight is shared in proportion to each bin's overlap with the window.
        let mut sent = [0u64; WINDOWS];
        let mut ttft_sum = [0.0f64; WINDOWS];
        let mut ttft_n = [0u64; WINDOWS];
        let mut e2e_sum = [0.0f64; WINDOWS];
        let mut e2e_n = [0u64; WINDOWS];
        let mut budget_sum = [0.0f64; WINDOWS];
        let mut budget_n = [0u64; WINDOWS];
        for b in 0..self.sent.len() {
            let w = ((b as f64 * bin) / width) as usize;
            if w < WINDOWS {
                sent[w] += self.sent[b] as u64;
                ttft_sum[w] += self.ttft_sum[b];
                ttft_n[w] += self.ttft_count[b] as u64;
                e2e_sum[w] += self.e2e_sum_us[b];
                e2e_n[w] += self.e2e_count[b] as u64;
                budget_sum[w] += self.budget_sum[b];
                budget_n[w] += self.budget_count[b] as u64;
            }
        }
        (0..WINDOWS)
            .map(|w| {
                let from = width * w as f64;
                let to = width * (w + 1) as f64;
                let mut in_flight = 0.0;
                let first = (from / bin) as usize;
                let last = ((to / bin).ceil() as usize).min(integrals.len());
                for (b, integral) in integrals.iter().enumerate().take(last).skip(first) {
                    let (lo, hi) = (b as f64 * bin, (b + 1) as f64 * bin);
                    let share = ((hi.min(to) - lo.max(from)) / bin).clamp(0.0, 1.0);
                    in_flight += integral * share;
                }
                ProfileWindow {
                    from_s: from / 1e6,
                    to_s: to / 1e6,
                    in_flight: in_flight / (to - from),
                    ttft_mean_ms: (ttft_n[w] > 0).then(|| ttft_sum[w] / ttft_n[w] as f64),
                    sent: sent[w],
                    e2e_mean_s: (e2e_n[w] > 0).then(|| e2e_sum[w] / e2e_n[w] as f64 / 1e6),
                    budget_left: (budget_n[w] > 0).then(|| budget_sum[w] / budget_n[w] as f64),
                }
            })
            .collect()
    }
}

/// The shortest window saturation is judged on: shorter phases are too noisy to tell.
const MIN_SPAN_S: f64 = 1.0;

/// Why the windows show a server that was not keeping up, if they do: requests in flight (an
/// open loop's queue) or the time to first token growing through the window, and still growing
/// at its end. The first fifth of the window is left out (a queue filling up to its steady
/// level); the rule compares the last fifth with the second and asks the growth to be large
/// (more than twice, plus a margin for small numbers) so that noise never trips it.
///
/// Growth alone is not enough for an open loop: a queue that fills up slowly (a batch that
/// grows, each step slower) is still filling at the second fifth. The last fifth must also
/// hold more requests than the window's load holds in a steady state, by Little's law: its
/// rate times its mean time in flight, with a margin for noise (three standard deviations of
/// a Poisson count's mean over the last fifth's independent stretches, or one and a half
/// times the spread of the windows before it, whichever is wider).
pub fn saturation(windows: &[ProfileWindow], open_loop: bool) -> Option<String> {
    judge(windows, open_loop, 1.0)
}

/// Saturation beyond doubt, for ending a running probe early: an open loop's queue at more
/// than twice what [`saturation`] allows, a closed loop's time to first token four times what
/// it was. A probe
/// still running knows only the requests that ended (its time in flight is biased short) and
/// a queue near capacity swings far wider than a Poisson count; ending it on a swing would
/// fail a load the server holds, so the full window decides everything short of a runaway.
pub fn runaway(windows: &[ProfileWindow], open_loop: bool) -> Option<String> {
    judge(windows, open_loop, 2.0)
}

/// The rule, with its bounds widened `factor` times.
fn judge(windows: &[ProfileWindow], open_loop: bool, factor: f64) -> Option<String> {
    if windows.len() != WINDOWS || windows.last().is_none_or(|w| w.to_s < MIN_SPAN_S) {
        return None;
    }
    let mean = |range: std::ops::Range<usize>, value: &dyn Fn(&ProfileWindow) -> Option<f64>| {
        let values: Vec<f64> = windows[range].iter().filter_map(value).collect();
        (!values.is_empty()).then(|| values.iter().sum::<f64>() / values.len() as f64)
    };
    if open_loop {
        let in_flight = |w: &ProfileWindow| Some(w.in_flight);
        if let (Some(early), Some(middle), Some(late)) = (
            mean(2..4, &in_flight),
            mean(5..7, &in_flight),
            mean(8..10, &in_flight),
        ) {
            if late >= 2.0 * factor * early + 2.0 && late > middle {
                match steady_level(windows) {
                    Some(held) if late <= held.bound * factor => {}
                    Some(held) => {
                        return Some(format!(
                            "requests in flight grew from {early:.1} to {late:.1} through the window and were \
                             still growing, beyond the {:.1} that {:.2} req/s × {:.2} s in flight holds \
                             (Little's law): the server was not keeping up (saturation)",
                            held.level, held.rate_per_s, held.in_flight_s
                        ));
                    }
                    None => {
                        return Some(format!(
                            "requests in flight grew from {early:.1} to {late:.1} through the window and were \
                             still growing, and none of them ended: the server was not keeping up (saturation)"
                        ));
                    }
                }
            }
        }
    }
    // An open loop's queue is what a runaway shows first; its time to first token swings
    // with every burst of a Poisson arrival near capacity, so alone it ends nothing early.
    if open_loop && factor > 1.0 {
        return None;
    }
    let ttft = |w: &ProfileWindow| w.ttft_mean_ms;
    if let (Some(early), Some(middle), Some(late)) =
        (mean(2..4, &ttft), mean(5..7, &ttft), mean(8..10, &ttft))
    {
        if late >= 2.0 * factor * early + 50.0 * factor && late > middle {
            return Some(format!(
                "time to first token grew from {early:.0}ms to {late:.0}ms through the window and was \
                 still growing: requests were queueing (saturation)"
            ));
        }
    }
    None
}

/// What the window's load holds in flight in a steady state (Little's law), past its first
/// fifth, and the most the last fifth may hold before it is more than noise.
struct SteadyLevel {
    rate_per_s: f64,
    in_flight_s: f64,
    level: f64,
    bound: f64,
}

fn steady_level(windows: &[ProfileWindow]) -> Option<SteadyLevel> {
    let judged = &windows[2..];
    let span_s = judged.last()?.to_s - judged.first()?.from_s;
    let sent: u64 = judged.iter().map(|w| w.sent).sum();
    // Weighted by the requests sent in each window (those that ended are what it knows).
    let (sum, weight) = judged
        .iter()
        .filter_map(|w| w.e2e_mean_s.map(|e2e| (e2e * w.sent as f64, w.sent as f64)))
        .fold((0.0, 0.0), |(s, n), (e, w)| (s + e, n + w));
    if span_s <= 0.0 || weight == 0.0 {
        return None;
    }
    let rate_per_s = sent as f64 / span_s;
    let in_flight_s = sum / weight;
    let level = rate_per_s * in_flight_s;
    // The last fifth holds about (its length / time in flight) independent counts of a
    // Poisson-like level: the standard deviation of its mean is sqrt(level / that).
    let last_fifth_s = windows[9].to_s - windows[8].from_s;
    let stretches = (last_fifth_s / in_flight_s.max(1e-3)).max(1.0);
    // A queue near capacity swings wider than a Poisson count: the windows' own spread
    // before the last fifth counts too.
    let before: Vec<f64> = windows[2..8].iter().map(|w| w.in_flight).collect();
    let mean = before.iter().sum::<f64>() / before.len() as f64;
    let spread =
        (before.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / before.len() as f64).sqrt();
    let noise = (3.0 * (level / stretches).sqrt()).max(1.5 * spread);
    Some(SteadyLevel {
        rate_per_s,
        in_flight_s,
        level,
        bound: level + noise.max(0.25 * level) + 1.0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_flight_is_exact_across_bins() {
        let mut p = ProfileBuilder::new(1_000_000);
        // One request in flight through the whole first second, one through its second half.
        p.add_request(1_000_000, 2_000_000, Some(10.0));
        p.add_request(1_500_000, 2_000_000, None);
        let w = p.windows(2_000_000);
        assert_eq!(w.len(), WINDOWS);
        assert!((w[0].in_flight - 1.0).abs() < 1e-9, "{:?}", w[0]);
        assert!((w[9].in_flight - 2.0).abs() < 1e-9, "{:?}", w[9]);
        assert_eq!(w[0].sent, 1);
        assert_eq!(w[5].sent, 1);
        assert_eq!(w[0].ttft_mean_ms, Some(10.0));
    }

    #[test]
    fn long_phases_coarsen_and_keep_their_totals() {
        let mut p = ProfileBuilder::new(0);
        // Two hours at one request in flight, sent every 100 ms.
        let hour = 3_600_000_000u64;
        for k in 0..(2 * hour / 100_000) {
            p.add_request(k * 100_000, (k + 1) * 100_000, Some(5.0));
        }
        assert!(p.partial.len() <= MAX_BINS);
        let w = p.windows(2 * hour);
        for window in &w {
            assert!((window.in_flight - 1.0).abs() < 1e-6, "{window:?}");
        }
        assert_eq!(w.iter().map(|w| w.sent).sum::<u64>(), 72_000);
    }

    #[test]
    fn live_levels_match_requests() {
        let mut live = ProfileBuilder::new(0);
        live.add_in_flight(0, 500_000, 3.0);
        live.add_in_flight(500_000, 1_000_000, 1.5);
        let w = live.windows(1_000_000);
        assert!((w[0].in_flight - 3.0).abs() < 1e-9);
        assert!((w[9].in_flight - 1.5).abs() < 1e-9);
    }

    fn windows(
        in_flight: impl Fn(usize) -> f64,
        ttft: impl Fn(usize) -> f64,
    ) -> Vec<ProfileWindow> {
        (0..WINDOWS)
            .map(|w| ProfileWindow {
                from_s: w as f64 * 0.2,
                to_s: (w + 1) as f64 * 0.2,
                in_flight: in_flight(w),
                ttft_mean_ms: Some(ttft(w)),
                sent: 10,
                e2e_mean_s: Some(0.2),
                budget_left: None,
            })
            .collect()
    }

    #[test]
    fn a_queue_filling_up_to_what_its_load_holds_is_not_saturation() {
        // The search's misfire: 5.66 req/s with 1.37 s in flight holds 7.7 requests (Little's
        // law); a batch that slows as it grows takes most of the window to get there.
        let filling = [1.0, 2.5, 3.0, 3.4, 4.5, 5.5, 6.2, 7.0, 8.4, 9.0];
        let rate = 5.66;
        let windows: Vec<ProfileWindow> = (0..WINDOWS)
            .map(|w| ProfileWindow {
                from_s: w as f64 * 2.0,
                to_s: (w + 1) as f64 * 2.0,
                in_flight: filling[w],
                ttft_mean_ms: Some(30.0),
                sent: (rate * 2.0) as u64,
                e2e_mean_s: Some(1.37),
                budget_left: None,
            })
            .collect();
        assert!(saturation(&windows, true).is_none());
        // The same growth with requests that spent a tenth of that in flight is a queue the
        // server does not drain: far beyond the 0.8 its load holds.
        let draining: Vec<ProfileWindow> = windows
            .iter()
            .map(|w| ProfileWindow {
                e2e_mean_s: Some(0.137),
                ..*w
            })
            .collect();
        let why = saturation(&draining, true).unwrap();
        assert!(why.contains("Little's law"), "{why}");
        // And requests none of which ended tell nothing of what the load holds: growth decides.
        let stuck: Vec<ProfileWindow> = windows
            .iter()
            .map(|w| ProfileWindow {
                e2e_mean_s: None,
                ..*w
            })
            .collect();
        assert!(saturation(&stuck, true)
            .unwrap()
            .contains("none of them ended"));
    }

    #[test]
    fn a_running_probe_ends_early_only_on_a_runaway() {
        // 50 req/s × 0.2 s holds 10; the last fifth at 36 is saturation, at 60 a runaway.
        let grown = |late: f64| windows(|w| if w >= 8 { late } else { 10.0 + w as f64 }, |_| 50.0);
        assert!(saturation(&grown(36.0), true).is_some());
        assert!(runaway(&grown(36.0), true).is_none());
        assert!(runaway(&grown(60.0), true).is_some());
        // A Poisson burst's time to first token alone ends no open-loop probe early.
        let ttft = windows(|_| 10.0, |w| if w >= 8 { 400.0 } else { 25.0 });
        assert!(saturation(&ttft, true).is_some());
        assert!(runaway(&ttft, true).is_none());
        assert!(runaway(&ttft, false).is_some());
    }

    #[test]
    fn the_mean_time_in_flight_is_of_the_requests_sent_in_each_window() {
        let mut p = ProfileBuilder::new(0);
        p.add_request(0, 300_000, None);
        p.add_request(100_000, 200_000, None);
        p.add_sent(1_500_000);
        let w = p.windows(2_000_000);
        assert!((w[0].e2e_mean_s.unwrap() - 0.2).abs() < 1e-9, "{:?}", w[0]);
        assert_eq!(w[7].e2e_mean_s, None);
        assert_eq!(w[7].sent, 1);
    }

    #[test]
    fn a_growing_queue_is_saturation_and_a_steady_one_is_not() {
        let growing = windows(|w| 2.0 + 4.0 * w as f64, |_| 50.0);
        assert!(saturation(&growing, true).is_some());
        // Closed loops hold their in-flight count by design: only TTFT can tell.
        assert!(saturation(&growing, false).is_none());
        let steady = windows(|w| if w % 2 == 0 { 9.0 } else { 12.0 }, |_| 50.0);
        assert!(saturation(&steady, true).is_none());
        // A queue that grew and then levelled off reached its steady state.
        let levelled = windows(
            |w| if w < 5 { 2.0 + 4.0 * w as f64 } else { 20.0 },
            |_| 50.0,
        );
        assert!(saturation(&levelled, true).is_none());
        let ttft = windows(|_| 4.0, |w| 100.0 + 100.0 * w as f64);
        assert!(saturation(&ttft, false)
            .unwrap()
            .contains("time to first token"));
        // Too short to tell.
        let short: Vec<ProfileWindow> = growing
            .iter()
            .map(|w| ProfileWindow {
                to_s: w.to_s / 10.0,
                ..*w
            })
            .collect();
        assert!(saturation(&short, true).is_none());
    }
}
