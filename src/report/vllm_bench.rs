//! `--export vllm-bench FILE`: the run as `vllm bench serve --save-result --save-detailed`
//! writes its result JSON, so that what reads vLLM's results (its performance dashboards,
//! InferenceX's processing, a team's notebooks) reads llmload runs too.
//!
//! The numbers mean what vLLM's mean, computed the way it computes them, over the recorded
//! phases' requests (warmups left out, as `--num-warmups` leaves its own out):
//! - `completed`/`failed`, the token totals and the per-request arrays (`input_lens`,
//!   `output_lens`, `ttfts`, `itls`, `latencies`, `start_times`, `errors`, in seconds) cover
//!   every request, a failed one with `0.0`s and its error as vLLM leaves them;
//! - `mean_/median_/std_/pNN_{ttft,tpot,itl,e2el}_ms` are numpy's (population standard
//!   deviation, linearly interpolated percentiles) over the successful requests; ITL is every
//!   gap between two chunks that carried tokens, as vLLM's client sees a stream (llmload's own
//!   ITL spreads a gap over a chunk's tokens; the two agree where a server sends one token per
//!   chunk). Its percentiles come from an HDR histogram at three significant digits, so that a
//!   long run's every gap is counted without holding them all;
//! - the throughputs and the duration are llmload's own over the same requests (successful
//!   requests and their tokens per second of the recorded phases' wall time), which is how
//!   vLLM defines them.
//!
//! What llmload does not keep is left out rather than made up: `generated_texts` (answers are
//! not stored) and `queue_times` (llmload's sends are never queued behind a concurrency limit:
//! late sends are its schedule lag, in its own report).
//!
//! Not for judging: the verdict is llmload's, in summary.json; this file only carries numbers.

use std::io::Write;

use serde_json::{json, Map, Value};

use super::ReportContext;
use crate::metrics::table::{e2e_ms, tpot_ms, ttft_ms};
use crate::records::RequestRecord;

/// The resolution of the peak-second count: a second's start is the first send rounded down
/// to it.
const TOKEN_BIN_US: u64 = 10_000;

/// The percentiles written for each latency (vLLM's `--metric-percentiles 50,90,95,99`).
const PERCENTILES: [f64; 4] = [50.0, 90.0, 95.0, 99.0];

/// One request's scalars, in the order the records come.
struct Row {
    input_len: u64,
    output_len: u64,
    ttft_s: f64,
    latency_s: f64,
    start_s: f64,
    error: String,
}

/// What one pass over the recorded requests gathers.
#[derive(Default)]
struct Gathered {
    rows: Vec<Row>,
    ttft_ms: Vec<f64>,
    tpot_ms: Vec<f64>,
    e2e_ms: Vec<f64>,
    itl: ItlStats,
    total_input: u64,
    total_output: u64,
    /// Output tokens of successful requests by [`TOKEN_BIN_US`] of the run, for the peak
    /// second (a day's run is 8.6 M bins; every chunk's time would be gigabytes).
    tokens_by_bin: Vec<u64>,
    /// Each successful request's [send, end) in µs from the run's start.
    spans: Vec<(u64, u64)>,
}

/// Every chunk gap of the successful requests, µs: exact mean and deviation, percentiles from
/// a histogram.
struct ItlStats {
    histogram: hdrhistogram::Histogram<u64>,
    sum: f64,
    sum_squares: f64,
}

impl Default for ItlStats {
    fn default() -> Self {
        ItlStats {
            // Three significant digits, auto-resizing: any gap a run can hold.
            histogram: hdrhistogram::Histogram::new(3).expect("3 significant digits is valid"),
            sum: 0.0,
            sum_squares: 0.0,
        }
    }
}

impl ItlStats {
    fn add(&mut self, gap_us: u64) {
        // Saturating: an auto-resizing histogram takes any u64 but a pathological one.
        let _ = self.histogram.record(gap_us);
        let ms = gap_us as f64 / 1e3;
        self.sum += ms;
        self.sum_squares += ms * ms;
    }

    /// Mean, median, standard deviation and [`PERCENTILES`], ms.
    fn stats(&self) -> Stats {
        let n = self.histogram.len();
        if n == 0 {
            return Stats::empty();
        }
        let mean = self.sum / n as f64;
        let at = |q: f64| self.histogram.value_at_quantile(q / 100.0) as f64 / 1e3;
        Stats {
            mean,
            median: at(50.0),
            std: (self.sum_squares / n as f64 - mean * mean).max(0.0).sqrt(),
            percentiles: PERCENTILES.map(at),
        }
    }
}

/// numpy's mean, median, std (ddof 0) and percentiles of one latency.
struct Stats {
    mean: f64,
    median: f64,
    std: f64,
    percentiles: [f64; 4],
}

impl Stats {
    /// What numpy gives vLLM for no values (`np.mean(0)`): zeros.
    fn empty() -> Stats {
        Stats {
            mean: 0.0,
            median: 0.0,
            std: 0.0,
            percentiles: [0.0; 4],
        }
    }

    fn of(values: &mut [f64]) -> Stats {
        if values.is_empty() {
            return Stats::empty();
        }
        values.sort_by(f64::total_cmp);
        let n = values.len() as f64;
        let mean = values.iter().sum::<f64>() / n;
        let variance = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n;
        Stats {
            mean,
            median: percentile(values, 50.0),
            std: variance.sqrt(),
            percentiles: PERCENTILES.map(|p| percentile(values, p)),
        }
    }

    fn insert(&self, name: &str, result: &mut Map<String, Value>) {
        result.insert(format!("mean_{name}_ms"), json!(self.mean));
        result.insert(format!("median_{name}_ms"), json!(self.median));
        result.insert(format!("std_{name}_ms"), json!(self.std));
        for (p, value) in PERCENTILES.iter().zip(self.percentiles) {
            result.insert(format!("p{p}_{name}_ms"), json!(value));
        }
    }
}

/// numpy's default percentile of sorted values: linear between the two nearest ranks.
fn percentile(sorted: &[f64], p: f64) -> f64 {
    let rank = p / 100.0 * (sorted.len() - 1) as f64;
    let (low, high) = (rank.floor() as usize, rank.ceil() as usize);
    sorted[low] + (sorted[high] - sorted[low]) * (rank - low as f64)
}

/// Writes the run's result JSON to `out`. The per-request ITL lists are streamed from the
/// records in a second pass: a long run's gaps never sit in memory together.
pub fn write(context: &ReportContext, out: &mut dyn Write) -> crate::error::Result<()> {
    let recorded: Vec<bool> = context.summary.phases.iter().map(|p| p.recorded).collect();
    let is_recorded = |r: &RequestRecord| recorded.get(r.phase).copied().unwrap_or(false);
    let mut gathered = Gathered::default();
    context.records.for_each(|record| {
        if is_recorded(record) {
            gather(record, &mut gathered);
        }
    })?;
    let head = serde_json::to_string(&Value::Object(scalars(context, &mut gathered)))
        .map_err(|e| crate::error::Error::run(format!("cannot encode the result: {e}")))?;
    let io = |e: std::io::Error| crate::error::Error::run(format!("cannot write: {e}"));
    out.write_all(&head.as_bytes()[..head.len() - 1])
        .map_err(io)?;
    write_arrays(&gathered.rows, out).map_err(io)?;
    out.write_all(b",\"itls\":[").map_err(io)?;
    let mut first = true;
    let mut written = Ok(());
    context.records.for_each(|record| {
        if written.is_ok() && is_recorded(record) {
            written = write_itls(record, first, out);
            first = false;
        }
    })?;
    written.map_err(io)?;
    out.write_all(b"]}\n").map_err(io)
}

fn gather(record: &RequestRecord, into: &mut Gathered) {
    let ok = record.ok();
    let output_len = if ok {
        record.completion_tokens.unwrap_or(0)
    } else {
        0
    };
    let input_len = record
        .prompt_tokens
        .unwrap_or(record.input_tokens_planned as u64);
    into.rows.push(Row {
        input_len,
        output_len,
        ttft_s: if ok {
            record.ttft_us.unwrap_or(0) as f64 / 1e6
        } else {
            0.0
        },
        latency_s: if ok {
            record.e2e_us.unwrap_or(0) as f64 / 1e6
        } else {
            0.0
        },
        start_s: record.actual_send_us as f64 / 1e6,
        error: match (&record.error, &record.error_detail) {
            (None, _) => String::new(),
            (Some(class), Some(detail)) => format!("{}: {detail}", class.as_str()),
            (Some(class), None) => class.as_str().to_string(),
        },
    });
    if !ok {
        return;
    }
    into.total_input += input_len;
    into.total_output += output_len;
    into.ttft_ms.extend(ttft_ms(record));
    into.tpot_ms.extend(tpot_ms(record));
    into.e2e_ms.extend(e2e_ms(record));
    for pair in record.chunks.windows(2) {
        into.itl.add(pair[1].0.saturating_sub(pair[0].0));
    }
    for &(at, tokens) in &record.chunks {
        let bin = ((record.actual_send_us + at) / TOKEN_BIN_US) as usize;
        if into.tokens_by_bin.len() <= bin {
            into.tokens_by_bin.resize(bin + 1, 0);
        }
        into.tokens_by_bin[bin] += u64::from(tokens);
    }
    let end = record.actual_send_us + record.e2e_us.unwrap_or(0);
    into.spans.push((record.actual_send_us, end));
}

/// Everything but the per-request arrays, in vLLM's order.
fn scalars(context: &ReportContext, gathered: &mut Gathered) -> Map<String, Value> {
    let summary = &context.summary;
    let header = &summary.context.header;
    let overall = &summary.overall;
    let mut result = Map::new();
    result.insert("date".into(), json!(vllm_date(&header.started_at)));
    result.insert("endpoint_type".into(), json!(backend(&header.api)));
    result.insert("backend".into(), json!(backend(&header.api)));
    result.insert("label".into(), json!(header.plan));
    result.insert("model_id".into(), json!(header.model));
    result.insert("tokenizer_id".into(), json!(header.tokenizer));
    result.insert("num_prompts".into(), json!(gathered.rows.len()));
    let (rate, burstiness, concurrency) = traffic(summary);
    result.insert("request_rate".into(), rate);
    result.insert("burstiness".into(), burstiness);
    result.insert("max_concurrency".into(), concurrency);
    result.insert("duration".into(), json!(overall.wall_s));
    result.insert("completed".into(), json!(overall.requests.ok));
    result.insert("failed".into(), json!(overall.requests.failed));
    result.insert("total_input_tokens".into(), json!(gathered.total_input));
    result.insert("total_output_tokens".into(), json!(gathered.total_output));
    result.insert(
        "request_throughput".into(),
        json!(overall.throughput.requests_per_s),
    );
    result.insert(
        "request_goodput".into(),
        json!(overall.goodput.as_ref().map(|g| g.requests_per_s)),
    );
    result.insert(
        "output_throughput".into(),
        json!(overall.throughput.output_tokens_per_s),
    );
    result.insert(
        "total_token_throughput".into(),
        json!(overall.throughput.total_tokens_per_s),
    );
    let (peak, concurrent) = peak(gathered);
    result.insert("max_output_tokens_per_s".into(), json!(peak));
    result.insert("max_concurrent_requests".into(), json!(concurrent));
    Stats::of(&mut gathered.ttft_ms).insert("ttft", &mut result);
    Stats::of(&mut gathered.tpot_ms).insert("tpot", &mut result);
    gathered.itl.stats().insert("itl", &mut result);
    Stats::of(&mut gathered.e2e_ms).insert("e2el", &mut result);
    result.insert("llmload_verdict".into(), json!(summary.verdict.status));
    result
}

/// vLLM's backend names for the APIs it has one for; llmload's for the others.
fn backend(api: &str) -> String {
    match api {
        "chat" => "openai-chat".into(),
        "completions" => "openai".into(),
        "embeddings" => "openai-embeddings".into(),
        "rerank" => "vllm-rerank".into(),
        other => format!("llmload-{other}"),
    }
}

/// `20261205-131500`, as vLLM dates its results, from the run's RFC 3339 start.
fn vllm_date(started_at: &str) -> String {
    chrono::DateTime::parse_from_rfc3339(started_at)
        .map(|at| at.format("%Y%m%d-%H%M%S").to_string())
        .unwrap_or_default()
}

/// `request_rate`, `burstiness` and `max_concurrency`: the recorded phase's, when one phase
/// was recorded (vLLM runs one load); otherwise `"inf"`, 1 and `null`, as vLLM writes a load
/// it does not limit.
fn traffic(summary: &super::Summary) -> (Value, Value, Value) {
    let recorded: Vec<_> = summary.phases.iter().filter(|p| p.recorded).collect();
    let [phase] = recorded.as_slice() else {
        return (json!("inf"), json!(1.0), Value::Null);
    };
    let rate = phase.rates.planned_per_s.map_or(json!("inf"), |r| json!(r));
    let concurrency = phase
        .load
        .strip_prefix("concurrency ")
        .and_then(|n| n.split_whitespace().next()?.parse::<u64>().ok())
        .map_or(Value::Null, |n| json!(n));
    (rate, burstiness(&phase.load), concurrency)
}

/// vLLM's burstiness is the shape of its gamma gaps: 1 for Poisson, 1/cv² for llmload's
/// `gamma cv=X`; evenly spaced arrivals are its limit, infinite (`"inf"`, as it writes a rate).
fn burstiness(load: &str) -> Value {
    if load.ends_with(" constant") {
        return json!("inf");
    }
    load.split_once("gamma cv=")
        .and_then(|(_, cv)| cv.parse::<f64>().ok())
        .filter(|cv| *cv > 0.0)
        .map_or(json!(1.0), |cv| json!(1.0 / (cv * cv)))
}

/// vLLM's two peaks: the most output tokens that arrived in one second (seconds counted from
/// the first successful request's send, to [`TOKEN_BIN_US`]; tokens as the chunks carried them,
/// where vLLM counts a chunk as one), and the most successful requests in flight at once (half-open intervals: one
/// ending as another starts are not together).
fn peak(gathered: &Gathered) -> (u64, u64) {
    let Some(origin) = gathered.spans.iter().map(|s| s.0).min() else {
        return (0, 0);
    };
    // Seconds from the first send, each the sum of its bins (its start rounded down to one).
    let first_bin = (origin / TOKEN_BIN_US) as usize;
    let per_second = (1_000_000 / TOKEN_BIN_US) as usize;
    let by_second = gathered
        .tokens_by_bin
        .get(first_bin..)
        .unwrap_or_default()
        .chunks(per_second)
        .map(|second| second.iter().sum::<u64>());
    let mut events: Vec<(u64, i64)> = gathered
        .spans
        .iter()
        .flat_map(|&(start, end)| [(start, 1), (end, -1)])
        .collect();
    events.sort_unstable();
    let (mut now, mut most) = (0i64, 0i64);
    for (_, delta) in events {
        now += delta;
        most = most.max(now);
    }
    (by_second.max().unwrap_or(0), most as u64)
}

/// One per-request array's value of a row.
type Column = dyn Fn(&Row) -> Value;

fn write_arrays(rows: &[Row], out: &mut dyn Write) -> std::io::Result<()> {
    let columns: [(&str, &Column); 6] = [
        ("input_lens", &|r| json!(r.input_len)),
        ("output_lens", &|r| json!(r.output_len)),
        ("ttfts", &|r| json!(r.ttft_s)),
        ("latencies", &|r| json!(r.latency_s)),
        ("start_times", &|r| json!(r.start_s)),
        ("errors", &|r| json!(r.error)),
    ];
    for (name, value) in columns {
        write!(out, ",\"{name}\":[")?;
        for (i, row) in rows.iter().enumerate() {
            if i > 0 {
                out.write_all(b",")?;
            }
            write!(out, "{}", value(row))?;
        }
        out.write_all(b"]")?;
    }
    Ok(())
}

/// One request's chunk gaps, s (none for a failed request, as vLLM keeps none).
fn write_itls(record: &RequestRecord, first: bool, out: &mut dyn Write) -> std::io::Result<()> {
    if !first {
        out.write_all(b",")?;
    }
    out.write_all(b"[")?;
    if record.ok() {
        for (i, pair) in record.chunks.windows(2).enumerate() {
            if i > 0 {
                out.write_all(b",")?;
            }
            let gap_s = pair[1].0.saturating_sub(pair[0].0) as f64 / 1e6;
            write!(out, "{}", json!(gap_s))?;
        }
    }
    out.write_all(b"]")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_numpys() {
        // np.percentile([1, 2, 3, 4], [50, 90, 99]) == [2.5, 3.7, 3.97]
        let mut values = [4.0, 1.0, 3.0, 2.0];
        let stats = Stats::of(&mut values);
        assert_eq!(stats.median, 2.5);
        assert!((stats.percentiles[1] - 3.7).abs() < 1e-12);
        assert!((stats.percentiles[3] - 3.97).abs() < 1e-12);
        // np.std([1, 2, 3, 4]) == 1.118033988749895
        assert!((stats.std - 1.118_033_988_749_895).abs() < 1e-12);
        assert_eq!(Stats::of(&mut []).mean, 0.0);
    }

    #[test]
    fn itl_histogram_keeps_three_digits() {
        let mut itl = ItlStats::default();
        for gap in 1..=1000u64 {
            itl.add(gap * 100);
        }
        let stats = itl.stats();
        assert!((stats.mean - 50.05).abs() < 1e-9);
        assert!(
            (stats.percentiles[3] - 99.0).abs() / 99.0 < 1e-3,
            "{}",
            stats.percentiles[3]
        );
    }

    #[test]
    fn dates_and_backends_read_as_vllms() {
        assert_eq!(vllm_date("2026-12-05T13:15:00Z"), "20261205-131500");
        assert_eq!(backend("chat"), "openai-chat");
        assert_eq!(backend("messages"), "llmload-messages");
        assert_eq!(burstiness("rate 4/s gamma cv=2"), json!(0.25));
        assert_eq!(burstiness("rate 4/s poisson"), json!(1.0));
        assert_eq!(burstiness("rate 4/s constant"), json!("inf"));
    }
}
