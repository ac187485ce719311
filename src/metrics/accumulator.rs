//! One scope's accumulator (a phase, or all recorded phases together): what it gathers from
//! each record as it streams by, and the [`PhaseMetrics`] it finishes into over its windows of
//! wall time.

use super::aggregates::*;
use super::profile::ProfileBuilder;
use super::table::{ttft_ms, Metric};
use super::tally::Tally;
use super::{meets, Distribution};
use crate::plan::Slo;
use crate::records::{ClientLoad, ErrorClass, MachineLoad, RequestRecord, TokenSource};
use crate::reservoir::Reservoir;

/// A phase's time window in µs from the start of the run.
#[derive(Debug, Clone, Copy)]
pub(super) struct Window {
    pub(super) start: u64,
    pub(super) sending_end: u64,
    pub(super) end: u64,
}

/// The client's load over several phases: CPU and seconds add up; utilization is over their
/// combined sending time. The machine's, likewise, when every phase has it.
pub(super) fn combined_client_load<'a>(
    phases: impl Iterator<Item = &'a PhaseMetrics> + Clone,
) -> Option<ClientLoad> {
    let loads = phases.filter_map(|p| p.client);
    let machines: Option<Vec<MachineLoad>> = loads.clone().map(|l| l.machine).collect();
    let mut total: Option<(ClientLoad, f64)> = None;
    for load in loads {
        let capacity_s = if load.utilization > 0.0 {
            load.cpu_s / load.utilization
        } else {
            0.0
        };
        let (sum, capacity) = total.get_or_insert((
            ClientLoad {
                cores: load.cores,
                cpu_s: 0.0,
                utilization: 0.0,
                seconds: 0,
                saturated_seconds: 0,
                machine: None,
            },
            0.0,
        ));
        sum.cpu_s += load.cpu_s;
        sum.seconds += load.seconds;
        sum.saturated_seconds += load.saturated_seconds;
        *capacity += capacity_s;
    }
    total.map(|(mut sum, capacity)| {
        sum.utilization = if capacity > 0.0 {
            sum.cpu_s / capacity
        } else {
            0.0
        };
        sum.machine = machines.and_then(|m| combined_machine_load(&m));
        sum
    })
}

/// The machine's load over several phases, as [`combined_client_load`] adds the client's.
fn combined_machine_load(loads: &[MachineLoad]) -> Option<MachineLoad> {
    let first = loads.first()?;
    let capacity: f64 = loads
        .iter()
        .filter(|l| l.utilization > 0.0)
        .map(|l| l.busy_s / l.utilization)
        .sum();
    let busy_s: f64 = loads.iter().map(|l| l.busy_s).sum();
    Some(MachineLoad {
        cores: first.cores,
        busy_s,
        utilization: if capacity > 0.0 {
            busy_s / capacity
        } else {
            0.0
        },
        seconds: loads.iter().map(|l| l.seconds).sum(),
        saturated_seconds: loads.iter().map(|l| l.saturated_seconds).sum(),
    })
}

/// Total length of the union of windows (they may overlap where in-flight requests of one phase
/// finish during the next).
fn union_seconds(windows: &[Window], end: impl Fn(&Window) -> u64) -> f64 {
    let mut spans: Vec<(u64, u64)> = windows
        .iter()
        .map(|w| (w.start, end(w).max(w.start)))
        .collect();
    spans.sort();
    let mut total = 0u64;
    let mut current: Option<(u64, u64)> = None;
    for (start, stop) in spans {
        current = match current {
            Some((a, b)) if start <= b => Some((a, b.max(stop))),
            Some((a, b)) => {
                total += b - a;
                Some((start, stop))
            }
            None => Some((start, stop)),
        };
    }
    if let Some((a, b)) = current {
        total += b - a;
    }
    total as f64 / 1e6
}

fn median(values: &mut [f64]) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    Some(values[values.len() / 2])
}

pub(super) fn mean(sum: f64, count: u64) -> Option<f64> {
    (count > 0).then(|| sum / count as f64)
}

/// What one scope (a phase, or all recorded phases) gathers from its records.
pub(super) struct Accumulator<'s> {
    pub(super) m: PhaseMetrics,
    pub(super) open_loop: bool,
    pub(super) slo: Option<&'s Slo>,
    /// The table's shares and per-second metrics, by its own formulas.
    tally: Tally,
    /// Output tokens of the good requests.
    good_output_tokens: u64,
    pub(super) planned_in: f64,
    pub(super) observed_in: f64,
    pub(super) observed_in_n: u64,
    pub(super) planned_out: f64,
    pub(super) observed_out: f64,
    /// (planned, observed) prompt tokens of requests counted by the server's usage: a uniform
    /// sample (exact up to 20,000 requests), and the smallest difference of them all.
    pub(super) input_pairs: Reservoir<(f64, f64)>,
    pub(super) input_overhead: Option<f64>,
    /// How far the server's output token counts are off the tokenizer's, a uniform sample.
    pub(super) usage_vs_tokenizer: Reservoir<f64>,
    pub(super) last_send_us: Option<u64>,
    /// The first request's send, µs from the run's start.
    first_send_us: Option<u64>,
    pub(super) last_end_us: Option<u64>,
    /// A phase's load through its window (not kept for all phases together).
    pub(super) profile: Option<ProfileBuilder>,
    pub(super) cache: PrefixCache,
    pub(super) ttft_hit: Distribution,
    pub(super) ttft_miss: Distribution,
}

impl<'s> Accumulator<'s> {
    pub(super) fn new(open_loop: bool, slo: Option<&'s Slo>) -> Accumulator<'s> {
        Accumulator {
            m: PhaseMetrics::default(),
            open_loop,
            slo,
            tally: Tally::default(),
            good_output_tokens: 0,
            planned_in: 0.0,
            observed_in: 0.0,
            observed_in_n: 0,
            planned_out: 0.0,
            observed_out: 0.0,
            input_pairs: Reservoir::default(),
            input_overhead: None,
            usage_vs_tokenizer: Reservoir::default(),
            last_send_us: None,
            first_send_us: None,
            last_end_us: None,
            profile: None,
            cache: PrefixCache::default(),
            ttft_hit: Distribution::milliseconds(),
            ttft_miss: Distribution::milliseconds(),
        }
    }

    /// One agent session of the scope: judged (`Some`), or cut short by its phase's end.
    pub(super) fn add_session(&mut self, outcome: Option<&super::sessions::SessionOutcome>) {
        let stats = self.m.sessions.get_or_insert_with(Default::default);
        match outcome {
            Some(outcome) => {
                stats.add(outcome);
                self.m.distributions.add_session(outcome);
            }
            None => stats.cut_short += 1,
        }
    }

    pub(super) fn add(&mut self, record: &RequestRecord) {
        let m = &mut self.m;
        // Each distribution takes what the metric table says it takes from this request.
        m.distributions.add(record, self.open_loop);
        self.last_send_us = self.last_send_us.max(Some(record.actual_send_us));
        self.first_send_us = Some(self.first_send_us.map_or(record.actual_send_us, |first| {
            first.min(record.actual_send_us)
        }));
        self.last_end_us = self.last_end_us.max(record.end_us());
        if let Some(profile) = &mut self.profile {
            let end = record.end_us().unwrap_or(record.actual_send_us);
            profile.add_request(record.actual_send_us, end, ttft_ms(record));
            if let Some(said) = &record.rate_limit {
                profile.add_budget(record.actual_send_us, said);
            }
        }
        let good = self.slo.is_some_and(|slo| meets(slo, record));
        self.tally.add(record, good);
        if good {
            let tokens = record.completion_tokens.unwrap_or(0);
            self.good_output_tokens = self.good_output_tokens.saturating_add(tokens);
        }
        m.requests.sent += 1;
        m.requests.connection_retries += record.connection_retries as u64;
        if record.connect_us.is_some() {
            m.requests.new_connections += 1;
        }
        count_by_key(&mut m.requests, record);
        if let Some(held) = record.paced_us {
            let held = held as f64 / 1e6;
            m.requests.paced += 1;
            m.requests.paced_s += held;
            m.requests.paced_max_s = m.requests.paced_max_s.max(held);
        }
        if let Some(attempts) = &record.throttled_attempts {
            m.requests.retried += 1;
            m.requests.throttled_attempts += attempts.len() as u64;
            let waited: u64 = attempts.iter().map(|a| a.waited_us).sum();
            m.requests.retry_wait_s += waited as f64 / 1e6;
        }
        match record.error {
            Some(ErrorClass::Cancelled) => {
                m.requests.cancelled += 1;
                return;
            }
            Some(ErrorClass::Client) => {
                m.requests.client_failed += 1;
                *m.errors
                    .entry(ErrorClass::Client.as_str().to_string())
                    .or_default() += 1;
                return;
            }
            Some(class) => {
                if class.throttled() {
                    m.requests.throttled += 1;
                } else {
                    m.requests.failed += 1;
                }
                *m.errors.entry(class.as_str().to_string()).or_default() += 1;
                // A request that failed after its first token still had a time to first token.
                if ttft_ms(record).is_some() {
                    m.requests.failed_after_first_token += 1;
                }
                return;
            }
            None => m.requests.ok += 1,
        }
        if record.usage_problem.is_some() {
            m.tokens.usage_problems += 1;
        }
        if let Some(reason) = &record.finish_reason {
            *m.finish_reasons.entry(reason.clone()).or_default() += 1;
        }
        if let Some(model) = &record.model {
            *m.models.entry(model.clone()).or_default() += 1;
        }
        let completion = record.completion_tokens.unwrap_or(0);
        let prompt = record
            .prompt_tokens
            .unwrap_or(record.input_tokens_planned as u64);
        self.planned_in += record.input_tokens_planned as f64;
        self.planned_out += record.output_tokens_planned as f64;
        self.observed_out += completion as f64;
        // An answer that ends by calling a tool is as long as its call: not off the plan.
        if completion != record.output_tokens_planned as u64
            && record.finish_reason.as_deref() != Some("tool_calls")
        {
            m.tokens.output_off_plan += 1;
        }
        if record.finish_reason.as_deref() == Some("stop")
            && completion < record.output_tokens_planned as u64
        {
            m.tokens.stopped_short += 1;
        }
        match record.token_source {
            Some(TokenSource::Usage) => m.tokens.counted_by_usage += 1,
            Some(source) => {
                m.tokens.counted_by_tokenizer += 1;
                if source == TokenSource::Estimated {
                    m.tokens.counted_estimated += 1;
                }
            }
            None => {}
        }
        m.tokens.cached_prompt_tokens += record.cached_tokens.unwrap_or(0);
        if let Some(cached) = record.cached_tokens {
            self.cache.requests += 1;
            self.cache.prompt_tokens += prompt;
            self.cache.cached_tokens += cached;
            let ttft = ttft_ms(record);
            if cached > 0 {
                self.cache.hits += 1;
                if let Some(ttft) = ttft {
                    self.ttft_hit.record(ttft);
                }
            } else if let Some(ttft) = ttft {
                self.ttft_miss.record(ttft);
            }
        }
        if record.token_source == Some(TokenSource::Usage) {
            if let Some(observed) = record.prompt_tokens {
                self.observed_in += observed as f64;
                self.observed_in_n += 1;
            }
            // A request's images and audio cost the model prompt tokens its text does not
            // count: only text is compared with the plan's lengths (the media's own cost is
            // the `media_tokens` of the report's media table).
            if let Some(observed) = record.prompt_tokens.filter(|_| !record.carries_media()) {
                let (planned, observed) = (record.input_tokens_planned as f64, observed as f64);
                self.input_pairs.push((planned, observed));
                let difference = observed - planned;
                self.input_overhead = Some(
                    self.input_overhead
                        .map_or(difference, |least| least.min(difference)),
                );
            }
            // A tool call's streamed text (names, JSON around the arguments) is not the tokens
            // the model generated for it: its counts are not compared.
            if let (Some(usage), Some(counted), None) = (
                record.completion_tokens,
                record.completion_tokens_tokenizer,
                record.tool_calls,
            ) {
                if usage > 0 {
                    self.usage_vs_tokenizer
                        .push((usage as f64 - counted as f64).abs() / usage as f64);
                }
            }
        }
    }

    pub(super) fn finish(self, windows: &[Window]) -> PhaseMetrics {
        let mut m = self.m;
        if let (Some(profile), [window]) = (&self.profile, windows) {
            m.load_profile = profile.windows(window.sending_end);
            let last = profile.last_budget();
            m.over_limits = super::budget::over_limits(&m.load_profile, last, &m.requests);
            m.budget_refill_s = last.and_then(|last| last.refill_s);
        }
        let wall = union_seconds(windows, |w| w.end);
        let sending = union_seconds(windows, |w| w.sending_end);
        m.wall_s = wall;
        let tally = &self.tally;
        let per_second = |metric| tally.per_second(metric, wall);
        m.throughput = Throughput {
            requests_per_s: per_second(Metric::RequestThroughput),
            output_tokens_per_s: per_second(Metric::OutputThroughput),
            total_tokens_per_s: per_second(Metric::TotalThroughput),
            inputs_per_s: per_second(Metric::InputThroughput),
            input_tokens_per_s: per_second(Metric::InputTokenThroughput),
        };
        let attempted = m.requests.completed();
        m.rates = Rates {
            planned_per_s: None,
            // Held by the plan's limits, requests went out after the sending window: their rate
            // is the one from the first send to the last.
            paced_per_s: match (self.first_send_us, self.last_send_us) {
                (Some(first), Some(last)) if m.requests.paced > 0 && last > first => {
                    Some((m.requests.sent - 1) as f64 / ((last - first) as f64 / 1e6))
                }
                _ => None,
            },
            sent_per_s: if sending > 0.0 {
                m.requests.sent as f64 / sending
            } else {
                0.0
            },
            // Not a metric of the table: what is left of the error rates.
            success_rate: if attempted > 0 {
                m.requests.ok as f64 / attempted as f64
            } else {
                0.0
            },
            error_rate: tally.share(Metric::ErrorRate),
            throttled_rate: tally.share(Metric::ThrottledRate),
            timeout_rate: tally.share(Metric::TimeoutRate),
        };
        if self.slo.is_some() {
            m.goodput = Some(Goodput {
                good: tally.total(Metric::Goodput) as u64,
                requests_per_s: per_second(Metric::Goodput),
                ratio: tally.share(Metric::GoodputRatio),
                output_tokens: self.good_output_tokens,
            });
        }
        m.answers = tally
            .part(Metric::InvalidJsonRate)
            .filter(|checks| checks.among > 0)
            .map(|checks| AnswerChecks {
                checked: checks.among,
                invalid: checks.amount as u64,
                invalid_rate: tally.share(Metric::InvalidJsonRate),
            });
        let ok = m.requests.ok;
        m.tokens.input_planned_mean = mean(self.planned_in, ok);
        m.tokens.input_observed_mean = mean(self.observed_in, self.observed_in_n);
        m.tokens.output_planned_mean = mean(self.planned_out, ok);
        m.tokens.output_observed_mean = mean(self.observed_out, ok);
        if let Some(overhead) = self.input_overhead {
            let mut off: Vec<f64> = self
                .input_pairs
                .items()
                .iter()
                .filter(|(p, _)| *p > 0.0)
                .map(|(p, o)| (o - p - overhead).abs() / p)
                .collect();
            m.tokens.input_overhead = Some(overhead);
            m.tokens.input_mismatch = median(&mut off);
        }
        if self.cache.requests > 0 {
            let mut cache = self.cache;
            cache.hit_rate = cache.cached_tokens as f64 / cache.prompt_tokens.max(1) as f64;
            cache.ttft_hit_ms = self.ttft_hit.summary();
            cache.ttft_miss_ms = self.ttft_miss.summary();
            m.prefix_cache = Some(cache);
        }
        let mut usage_vs_tokenizer = self.usage_vs_tokenizer.items().to_vec();
        m.tokens.usage_vs_tokenizer = median(&mut usage_vs_tokenizer);
        m.metrics = m.distributions.summaries();
        m
    }
}

/// A request of a run with several API keys, counted under its key (a place past the most a
/// plan may name is a record no run wrote, and is left out).
fn count_by_key(requests: &mut super::aggregates::RequestCounts, record: &RequestRecord) {
    let Some(key) = record
        .key
        .map(|key| key as usize)
        .filter(|&key| key < crate::plan::MAX_API_KEYS)
    else {
        return;
    };
    if requests.by_key.len() <= key {
        requests.by_key.resize_with(key + 1, Default::default);
    }
    let counts = &mut requests.by_key[key];
    counts.sent += 1;
    counts.paced_s += record.paced_us.unwrap_or(0) as f64 / 1e6;
    match record.error {
        None => counts.ok += 1,
        Some(ErrorClass::Cancelled | ErrorClass::Client) => {}
        Some(class) if class.throttled() => counts.throttled += 1,
        Some(_) => counts.failed += 1,
    }
}
