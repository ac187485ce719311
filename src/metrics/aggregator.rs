//! The streaming aggregator: a run's log lines in, one pass, [`Aggregates`] out — each phase's
//! and the overall scope's accumulators, the time series, requests by input length and by
//! turn, and samples of each error class.

use std::collections::BTreeMap;

use super::accumulator::{combined_client_load, mean, Accumulator, Window};
use super::aggregates::*;
use super::cost::Cost;
use super::grouped::{Gathers, Grouped};
use super::profile::{self, ProfileBuilder};
use super::table::{self, ttft_ms, Metric};
use super::{timeseries, warnings, Distribution};
use crate::plan::Slo;
use crate::records::{ErrorClass, LogLine, RequestRecord, RunLog};

/// Aggregates a run as its log lines stream by. A phase's records must come after its
/// `phase_start` line, as the executor writes them.
pub struct Aggregator<'s> {
    slo: Option<&'s Slo>,
    /// The log without records.
    pub(super) log: RunLog,
    /// One per phase, in the order of `log.phases`.
    phases: Vec<Accumulator<'s>>,
    overall: Accumulator<'s>,
    last_response_us: Option<u64>,
    first_error: Option<String>,
    first_usage_problem: Option<String>,
    first_client_error: Option<String>,
    series: timeseries::SeriesBuilder,
    by_input: Grouped<BucketAccumulator>,
    /// By batch size, for an API that answers batches (embeddings, rerank).
    by_batch: Grouped<BatchAccumulator>,
    by_turn: BTreeMap<u32, TurnAccumulator>,
    by_turn_kind: BTreeMap<crate::records::TurnKind, TurnAccumulator>,
    by_media: super::media::MediaAccumulator,
    error_samples: BTreeMap<String, ErrorSample>,
    stall_marks: super::stalls::StallMarks,
    /// The agent sessions of `sessions` phases, judged at the end.
    sessions: super::sessions::SessionBook,
}

/// What one input length gathers.
pub(super) struct BucketAccumulator {
    pub(super) sent: u64,
    pub(super) ok: u64,
    pub(super) failed: u64,
    pub(super) ttft: Distribution,
    pub(super) e2e: Distribution,
    tpot: Distribution,
    /// Prompt and cached tokens the server reported, over the requests that reported both.
    prompt_tokens: u64,
    cached_tokens: u64,
}

impl BucketAccumulator {
    pub(super) fn new() -> BucketAccumulator {
        BucketAccumulator {
            sent: 0,
            ok: 0,
            failed: 0,
            ttft: Distribution::milliseconds(),
            e2e: Distribution::milliseconds(),
            tpot: Distribution::milliseconds(),
            prompt_tokens: 0,
            cached_tokens: 0,
        }
    }

    pub(super) fn add(&mut self, record: &RequestRecord) {
        self.sent += 1;
        if let (Some(prompt), Some(cached)) = (record.prompt_tokens, record.cached_tokens) {
            self.prompt_tokens += prompt;
            self.cached_tokens += cached;
        }
        if let Some(ttft) = ttft_ms(record) {
            self.ttft.record(ttft);
        }
        match record.error {
            None => {
                self.ok += 1;
                if let Some(e2e) = table::e2e_ms(record) {
                    self.e2e.record(e2e);
                }
                if let Some(tpot) = table::tpot_ms(record) {
                    self.tpot.record(tpot);
                }
            }
            Some(ErrorClass::Cancelled | ErrorClass::Client) => {}
            Some(_) => self.failed += 1,
        }
    }
}

impl Gathers for BucketAccumulator {
    fn merge(&mut self, other: BucketAccumulator) {
        self.sent += other.sent;
        self.ok += other.ok;
        self.failed += other.failed;
        self.ttft.merge(&other.ttft);
        self.e2e.merge(&other.e2e);
        self.tpot.merge(&other.tpot);
        self.prompt_tokens += other.prompt_tokens;
        self.cached_tokens += other.cached_tokens;
    }
}

/// What one batch size gathers (embeddings, rerank): what a batch cost, whole and per input.
struct BatchAccumulator {
    sent: u64,
    ok: u64,
    failed: u64,
    input_tokens: u64,
    e2e: Distribution,
    e2e_per_input: Distribution,
}

impl BatchAccumulator {
    fn new() -> BatchAccumulator {
        BatchAccumulator {
            sent: 0,
            ok: 0,
            failed: 0,
            input_tokens: 0,
            e2e: Distribution::milliseconds(),
            e2e_per_input: Distribution::milliseconds(),
        }
    }

    fn add(&mut self, record: &RequestRecord) {
        self.sent += 1;
        match record.error {
            None => {
                self.ok += 1;
                let prompt = record
                    .prompt_tokens
                    .unwrap_or(record.input_tokens_planned as u64);
                self.input_tokens = self.input_tokens.saturating_add(prompt);
                // As the metric table takes them, for the requests it takes them from.
                for (metric, into) in [
                    (Metric::E2e, &mut self.e2e),
                    (Metric::E2ePerInput, &mut self.e2e_per_input),
                ] {
                    if let Some(value) = metric.sample(record, false) {
                        into.record(value);
                    }
                }
            }
            Some(ErrorClass::Cancelled | ErrorClass::Client) => {}
            Some(_) => self.failed += 1,
        }
    }

    fn finish(self, (inputs, inputs_max): (u32, u32)) -> BatchBucket {
        BatchBucket {
            inputs,
            inputs_max,
            sent: self.sent,
            ok: self.ok,
            failed: self.failed,
            input_tokens_mean: (self.ok > 0).then(|| self.input_tokens as f64 / self.ok as f64),
            e2e_ms: self.e2e.summary(),
            e2e_per_input_ms: self.e2e_per_input.summary(),
        }
    }
}

impl Gathers for BatchAccumulator {
    fn merge(&mut self, other: BatchAccumulator) {
        self.sent += other.sent;
        self.ok += other.ok;
        self.failed += other.failed;
        self.input_tokens = self.input_tokens.saturating_add(other.input_tokens);
        self.e2e.merge(&other.e2e);
        self.e2e_per_input.merge(&other.e2e_per_input);
    }
}

/// One turn index of a multi-turn workload, over every conversation.
struct TurnAccumulator {
    input: BucketAccumulator,
    planned_in: u64,
    observed_in: u64,
    observed_n: u64,
    cached: u64,
    calling_tools: u64,
}

impl TurnAccumulator {
    fn new() -> TurnAccumulator {
        TurnAccumulator {
            input: BucketAccumulator::new(),
            planned_in: 0,
            observed_in: 0,
            observed_n: 0,
            cached: 0,
            calling_tools: 0,
        }
    }

    fn add(&mut self, record: &RequestRecord) {
        self.input.add(record);
        self.planned_in += record.input_tokens_planned as u64;
        if let Some(prompt) = record.prompt_tokens.filter(|_| record.ok()) {
            self.observed_in += prompt;
            self.observed_n += 1;
            self.cached += record.cached_tokens.unwrap_or(0);
        }
        if record.ok() && record.tool_calls.is_some_and(|n| n > 0) {
            self.calling_tools += 1;
        }
    }

    fn finish(self) -> TurnRequests {
        TurnRequests {
            sent: self.input.sent,
            ok: self.input.ok,
            failed: self.input.failed,
            input_tokens_planned_mean: self.planned_in as f64 / self.input.sent.max(1) as f64,
            prompt_tokens_mean: mean(self.observed_in as f64, self.observed_n),
            cached_tokens_mean: mean(self.cached as f64, self.observed_n),
            ttft_ms: self.input.ttft.summary(),
            e2e_ms: self.input.e2e.summary(),
            calling_tools: self.calling_tools,
        }
    }
}

impl<'s> Aggregator<'s> {
    /// An aggregator; `slo` (the plan's) defines goodput.
    pub fn new(slo: Option<&'s Slo>) -> Aggregator<'s> {
        Aggregator {
            slo,
            log: RunLog::default(),
            phases: Vec::new(),
            // Lag is merged from the open-loop phases at the end.
            overall: Accumulator::new(false, slo),
            last_response_us: None,
            first_error: None,
            first_usage_problem: None,
            first_client_error: None,
            series: timeseries::SeriesBuilder::new(1_000_000, crate::plan::MAX_SERIES_WINDOWS),
            by_input: Grouped::new(),
            by_batch: Grouped::new(),
            by_turn: BTreeMap::new(),
            by_turn_kind: BTreeMap::new(),
            by_media: Default::default(),
            error_samples: BTreeMap::new(),
            stall_marks: Default::default(),
            sessions: Default::default(),
        }
    }

    /// Time-series windows of `interval` (the plan's `report { interval }`), not a second.
    pub fn with_interval(mut self, interval: std::time::Duration) -> Self {
        self.series = timeseries::SeriesBuilder::new(
            interval.as_micros() as u64,
            crate::plan::MAX_SERIES_WINDOWS,
        );
        self
    }

    /// Adds one line of the log.
    pub fn push(&mut self, line: LogLine) {
        match line {
            LogLine::Request(record) => self.record(&record),
            LogLine::PhaseStart(start) => {
                if start.sessions {
                    self.sessions.phase(start.index);
                }
                self.series.phase_start(&start);
                let mut accumulator = Accumulator::new(start.open_loop, self.slo);
                accumulator.profile = Some(ProfileBuilder::new(start.at_us));
                self.phases.push(accumulator);
                self.log.phases.push(start);
            }
            LogLine::PhaseEnd(end) => {
                if let Some(start) = self.log.phases.iter().find(|p| p.index == end.index) {
                    self.series.phase_end(&end, &start.name);
                }
                self.log.push(LogLine::PhaseEnd(end));
            }
            LogLine::Stall(stall) => {
                self.stall_marks.stall(stall);
                self.log.push(LogLine::Stall(stall));
            }
            LogLine::Session(session) => {
                self.series.session(&session);
                self.sessions.end(session.clone());
                self.log.push(LogLine::Session(session));
            }
            other => self.log.push(other),
        }
    }

    /// Adds one request.
    pub fn record(&mut self, record: &RequestRecord) {
        self.last_response_us = self.last_response_us.max(record.end_us());
        let Some(position) = self.log.phases.iter().position(|p| p.index == record.phase) else {
            return;
        };
        self.phases[position].add(record);
        let good = self
            .slo
            .map_or(record.ok(), |slo| super::meets(slo, record));
        self.sessions.record(record, good);
        self.series.record(record);
        let end_us = record.end_us().unwrap_or(record.actual_send_us);
        self.stall_marks
            .request(position, record.shard, record.actual_send_us, end_us);
        if self.log.phases[position].record {
            self.overall.add(record);
            self.by_input_add(record);
            self.by_media.add(record);
            if let Some(turn) = record.turn {
                self.by_turn
                    .entry(turn)
                    .or_insert_with(TurnAccumulator::new)
                    .add(record);
            }
            if let Some(kind) = record.turn_kind {
                self.by_turn_kind
                    .entry(kind)
                    .or_insert_with(TurnAccumulator::new)
                    .add(record);
            }
            let first = |slot: &mut Option<String>, value: &Option<String>| {
                if slot.is_none() {
                    slot.clone_from(value);
                }
            };
            match record.error {
                Some(ErrorClass::Client) => {
                    first(&mut self.first_client_error, &record.error_detail)
                }
                Some(_) => first(&mut self.first_error, &record.error_detail),
                None => first(&mut self.first_usage_problem, &record.usage_problem),
            }
        }
    }

    fn by_input_add(&mut self, record: &RequestRecord) {
        match record.inputs {
            // A batch's input tokens are its inputs' together: grouped by its size instead.
            Some(inputs) => self
                .by_batch
                .group(inputs, BatchAccumulator::new)
                .add(record),
            None => self
                .by_input
                .group(record.input_tokens_planned, BucketAccumulator::new)
                .add(record),
        }
        if let Some(class) = record.error.filter(|c| *c != ErrorClass::Cancelled) {
            let at_s = record.end_us().unwrap_or(record.actual_send_us) as f64 / 1e6;
            let sample = self
                .error_samples
                .entry(class.as_str().to_string())
                .or_insert_with(|| ErrorSample {
                    class: class.as_str().to_string(),
                    count: 0,
                    first_s: at_s,
                    last_s: at_s,
                    sample: record.error_detail.clone().unwrap_or_default(),
                    http_status: record.http_status,
                });
            sample.count += 1;
            sample.first_s = sample.first_s.min(at_s);
            sample.last_s = sample.last_s.max(at_s);
        }
    }

    /// The aggregates, and the log without its records.
    pub fn finish(self) -> (RunLog, Aggregates) {
        let by_turn = self
            .by_turn
            .into_iter()
            .map(|(turn, t)| TurnBucket {
                turn,
                requests: t.finish(),
            })
            .collect();
        // Kinds are worth a table only when a turn answered tools.
        let agent_loop = self
            .by_turn_kind
            .contains_key(&crate::records::TurnKind::Tool);
        let by_turn_kind = self
            .by_turn_kind
            .into_iter()
            .filter(|_| agent_loop)
            .map(|(kind, t)| TurnKindBucket {
                kind,
                requests: t.finish(),
            })
            .collect();
        let by_input = self.by_input;
        let by_batch = self.by_batch;
        let log = self.log;
        let (mut accumulators, mut overall) = (self.phases, self.overall);
        for (phase, outcome) in self.sessions.outcomes() {
            let Some(position) = log.phases.iter().position(|p| p.index == phase) else {
                continue;
            };
            accumulators[position].add_session(outcome.as_ref());
            if log.phases[position].record {
                overall.add_session(outcome.as_ref());
            }
        }
        let run_end = log.end.as_ref().map(|e| e.at_us);
        // The plan's price of the deployment, as the records keep it.
        let price = log.header.as_ref().and_then(|h| h.cost.clone());
        let mut phases = Vec::new();
        let mut windows = Vec::new();
        for (position, (start, accumulator)) in log.phases.iter().zip(accumulators).enumerate() {
            let phase_end = log.phase_ends.iter().find(|e| e.index == start.index);
            let sending_end = phase_end
                .map(|e| e.at_us)
                .or(accumulator.last_send_us)
                .or(run_end)
                .unwrap_or(start.at_us);
            let last_response = accumulator.last_end_us.unwrap_or(sending_end);
            let window = Window {
                start: start.at_us,
                sending_end,
                end: last_response.max(sending_end),
            };
            let mut metrics = accumulator.finish(&[window]);
            metrics.name = start.name.clone();
            metrics.recorded = start.record;
            metrics.load = start.load.clone();
            metrics.api.clone_from(&start.api);
            metrics.model.clone_from(&start.model);
            metrics.rates.planned_per_s = start.planned_rate;
            metrics.client = phase_end.and_then(|e| e.client);
            metrics.step = start.step.clone();
            metrics.cache_reset.clone_from(&start.cache_reset);
            metrics.ended_early = phase_end.and_then(|e| e.ended_early.clone());
            metrics.connections = phase_end.and_then(|e| e.connections);
            metrics.body_wait = phase_end.and_then(|e| e.body_wait);
            metrics.hiccups = phase_end.and_then(|e| e.hiccups);
            metrics.client_stalls = self
                .stall_marks
                .summary(&[(window.start, window.end)], &[position]);
            metrics.saturation = profile::saturation(&metrics.load_profile, start.open_loop);
            metrics.cost = price.as_ref().and_then(|rate| Cost::of(&metrics, rate));
            phases.push(metrics);
            windows.push((start.record, start.open_loop, window));
        }
        let overall_windows: Vec<Window> = windows.iter().filter(|w| w.0).map(|w| w.2).collect();
        let mut overall = overall.finish(&overall_windows);
        overall.name = "all recorded phases".into();
        overall.cost = price.as_ref().and_then(|rate| Cost::of(&overall, rate));
        overall.recorded = true;
        overall.load = "-".into();
        // Lag is meaningful only for open-loop phases' records.
        let mut lag = Distribution::milliseconds();
        for (phase, window) in phases.iter().zip(&windows) {
            if let (true, true, Some(phase_lag)) = (
                window.0,
                window.1,
                phase.distributions.get(Metric::ScheduleLag),
            ) {
                lag.merge(phase_lag);
            }
        }
        if let Some(overall_lag) = overall.distributions.get_mut(Metric::ScheduleLag) {
            *overall_lag = lag;
        }
        overall.metrics = overall.distributions.summaries();
        overall.client = combined_client_load(phases.iter().filter(|p| p.recorded));
        let recorded: Vec<usize> = (0..windows.len()).filter(|&i| windows[i].0).collect();
        let recorded_windows: Vec<(u64, u64)> = recorded
            .iter()
            .map(|&i| (windows[i].2.start, windows[i].2.end))
            .collect();
        overall.client_stalls = self.stall_marks.summary(&recorded_windows, &recorded);

        let mut aggregates = Aggregates {
            phases,
            overall,
            warnings: Vec::new(),
            interrupted: log.interrupted(),
            last_response_us: self.last_response_us,
            first_error: self.first_error,
            first_usage_problem: self.first_usage_problem,
            first_client_error: self.first_client_error,
            aborted: log.end.as_ref().and_then(|e| e.aborted.clone()),
            refused: log.end.as_ref().and_then(|e| e.refused.clone()),
            client_peak_rss_bytes: log.end.as_ref().and_then(|e| e.client_peak_rss_bytes),
            search_end: log.search_end.clone(),
            server: None,
            launched_server: None,
            timeseries: self.series.finish(),
            by_batch: by_batch
                .finish()
                .map(|(sizes, b)| b.finish(sizes))
                .collect(),
            by_input: by_input
                .finish()
                .map(|((input_tokens, input_tokens_max), b)| InputBucket {
                    input_tokens,
                    input_tokens_max,
                    sent: b.sent,
                    ok: b.ok,
                    failed: b.failed,
                    ttft_ms: b.ttft.summary(),
                    e2e_ms: b.e2e.summary(),
                    tpot_ms: b.tpot.summary(),
                    cache_hit: (b.prompt_tokens > 0)
                        .then(|| b.cached_tokens as f64 / b.prompt_tokens as f64),
                })
                .collect(),
            error_samples: self.error_samples.into_values().collect(),
            by_turn,
            by_turn_kind,
            steady: None,
            by_media: self.by_media.finish(),
        };
        aggregates.warnings = warnings::assess(&log, &aggregates);
        (log, aggregates)
    }
}
