//! Fidelity: how far a client's timings are from the truth.
//!
//! The truth is the simulator's record of when it wrote each token ([`crate::sim::writes`]);
//! the measurement is what a client saw: for each request, when each token-bearing chunk
//! arrived, counted from the moment the client sent it. Requests are matched by their
//! `x-request-id`. For every matched request:
//!
//! - TTFT error = measured TTFT − true TTFT, where the true TTFT runs from the server having read
//!   the request's headers to its writing the first token. The difference is everything the
//!   client and the loopback add: building and writing the request, the kernel both ways, and the
//!   client's reaction to a readable socket. It is never negative in principle.
//! - ITL error = each measured gap between consecutive chunks − the true gap between the same two
//!   writes. A chunk read late shows as one positive and one negative error.
//!
//! Where both sides' times are on the machine's shared monotonic clock (Linux), the TTFT error
//! splits in two: the send delay (the client's send → the server having read the headers: the
//! client's sending, the kernel, and any wait before the server's handler ran) and the read delay
//! (the server's write → the client's read, for every token: the part only the client adds).
//!
//! Used by `llmload check --capacity` and by the fidelity benchmark (benches/fidelity.rs), which
//! runs the same comparison for llmload and for a bare baseline client. This module measures;
//! it does not decide what is good enough.

use std::collections::HashMap;

use serde::Serialize;

use crate::metrics::percentile;
use crate::records::request_id_text;
use crate::records::{RequestRecord, RunHeader};
use crate::sim::writes::RequestWrites;

/// What a client saw of one streamed request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MeasuredStream {
    /// The request's `x-request-id`.
    pub request_id: String,
    /// Arrival of each token-bearing chunk, µs after the send.
    pub arrivals_us: Vec<u64>,
    /// The send on CLOCK_MONOTONIC, where known.
    pub sent_monotonic_ns: Option<u64>,
}

impl MeasuredStream {
    /// The stream of a successful llmload record of the run with `header`, named as that run
    /// named its requests.
    pub fn of_record(record: &RequestRecord, header: Option<&RunHeader>) -> Option<MeasuredStream> {
        let prefix = header
            .and_then(|h| h.request_id_prefix.as_deref())
            .unwrap_or("llmload");
        let clock_origin_ns = header.and_then(|h| h.clock_origin_ns);
        (record.ok() && !record.chunks.is_empty()).then(|| MeasuredStream {
            request_id: request_id_text(prefix, record.phase, record.seq),
            arrivals_us: record.chunks.iter().map(|chunk| chunk.0).collect(),
            sent_monotonic_ns: clock_origin_ns.map(|o| o + record.actual_send_us * 1000),
        })
    }
}

/// p50, p99 and the extremes of a set of errors, in milliseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct ErrorSummary {
    /// How many errors.
    pub count: usize,
    /// The median.
    pub p50_ms: f64,
    /// The 99th percentile.
    pub p99_ms: f64,
    /// The largest.
    pub max_ms: f64,
    /// The smallest.
    pub min_ms: f64,
}

impl ErrorSummary {
    /// Nearest-rank percentiles of `values` (reordered here).
    pub fn of(values: &mut [f64]) -> ErrorSummary {
        if values.is_empty() {
            return ErrorSummary::default();
        }
        ErrorSummary {
            count: values.len(),
            p50_ms: percentile(values, 50.0),
            p99_ms: percentile(values, 99.0),
            max_ms: percentile(values, 100.0),
            min_ms: values.iter().copied().fold(f64::INFINITY, f64::min),
        }
    }
}

/// The errors of a whole run.
#[derive(Debug, Clone, Default, Serialize)]
pub struct TimingErrors {
    /// TTFT error per request.
    pub ttft: ErrorSummary,
    /// ITL error per gap.
    pub itl: ErrorSummary,
    /// The client's send → the server's reading of the headers (shared clock only).
    pub send_delay: ErrorSummary,
    /// The server's write of a token → the client's read of it, every token (shared clock only).
    pub read_delay: ErrorSummary,
    /// Requests found on both sides.
    pub matched: usize,
    /// Measured requests the server has no record of.
    pub unmatched: usize,
    /// Matched requests whose chunk count differs from the server's token writes (left out of
    /// the ITL errors: the chunks cannot be paired with writes).
    pub chunk_count_mismatch: usize,
}

/// Compares measured streams with the server's write times.
pub fn timing_errors(
    measured: impl IntoIterator<Item = MeasuredStream>,
    truth: &[RequestWrites],
) -> TimingErrors {
    let by_id: HashMap<&str, &RequestWrites> = truth
        .iter()
        .filter_map(|w| w.request_id.as_deref().map(|id| (id, w)))
        .collect();
    let mut ttft = Vec::new();
    let mut itl = Vec::new();
    let mut send_delay = Vec::new();
    let mut read_delay = Vec::new();
    let mut errors = TimingErrors::default();
    for stream in measured {
        let Some(writes) = by_id.get(stream.request_id.as_str()) else {
            errors.unmatched += 1;
            continue;
        };
        let (Some(&first_arrival), Some(&first_write)) =
            (stream.arrivals_us.first(), writes.token_writes_ns.first())
        else {
            errors.unmatched += 1;
            continue;
        };
        errors.matched += 1;
        ttft.push(first_arrival as f64 / 1e3 - first_write as f64 / 1e6);
        if let (Some(sent), Some(received)) =
            (stream.sent_monotonic_ns, writes.received_monotonic_ns)
        {
            send_delay.push((received as f64 - sent as f64) / 1e6);
            for (arrival_us, write_ns) in stream.arrivals_us.iter().zip(&writes.token_writes_ns) {
                let arrival = sent as f64 + *arrival_us as f64 * 1e3;
                let written = (received + write_ns) as f64;
                read_delay.push((arrival - written) / 1e6);
            }
        }
        if stream.arrivals_us.len() != writes.token_writes_ns.len() {
            errors.chunk_count_mismatch += 1;
            continue;
        }
        for (arrivals, writes) in stream
            .arrivals_us
            .windows(2)
            .zip(writes.token_writes_ns.windows(2))
        {
            let measured_gap_ms = arrivals[1].saturating_sub(arrivals[0]) as f64 / 1e3;
            let true_gap_ms = writes[1].saturating_sub(writes[0]) as f64 / 1e6;
            itl.push(measured_gap_ms - true_gap_ms);
        }
    }
    errors.ttft = ErrorSummary::of(&mut ttft);
    errors.itl = ErrorSummary::of(&mut itl);
    errors.send_delay = ErrorSummary::of(&mut send_delay);
    errors.read_delay = ErrorSummary::of(&mut read_delay);
    errors
}

#[cfg(test)]
mod tests {
    use super::*;

    fn writes(id: &str, token_writes_ns: Vec<u64>) -> RequestWrites {
        RequestWrites {
            request_id: Some(id.into()),
            traceparent: None,
            received_ns: 0,
            token_writes_ns,
            received_monotonic_ns: None,
        }
    }

    fn stream(id: &str, arrivals_us: Vec<u64>) -> MeasuredStream {
        MeasuredStream {
            request_id: id.into(),
            arrivals_us,
            sent_monotonic_ns: None,
        }
    }

    #[test]
    fn on_a_shared_clock_the_ttft_error_splits_into_send_and_read_delays() {
        let mut truth = writes("a", vec![10_000_000, 20_000_000]);
        // Received 0.3 ms after the send at 1 s; tokens read 0.05 and 0.25 ms after their writes.
        truth.received_monotonic_ns = Some(1_000_300_000);
        let mut measured = stream("a", vec![10_350, 20_550]);
        measured.sent_monotonic_ns = Some(1_000_000_000);
        let errors = timing_errors(vec![measured], &[truth]);
        assert!((errors.ttft.max_ms - 0.35).abs() < 1e-9);
        assert!((errors.send_delay.max_ms - 0.3).abs() < 1e-9);
        assert_eq!(errors.read_delay.count, 2);
        assert!((errors.read_delay.min_ms - 0.05).abs() < 1e-9);
        assert!((errors.read_delay.max_ms - 0.25).abs() < 1e-9);
        // Without one side's clock, no split.
        let errors = timing_errors(
            vec![stream("a", vec![10_350, 20_550])],
            &[writes("a", vec![10_000_000, 20_000_000])],
        );
        assert_eq!((errors.send_delay.count, errors.read_delay.count), (0, 0));
    }

    #[test]
    fn errors_are_measured_minus_true() {
        let truth = vec![
            writes("a", vec![10_000_000, 20_000_000, 30_000_000]),
            writes("b", vec![5_000_000, 6_000_000]),
        ];
        let measured = vec![
            // 0.2 ms late on the first token, the second read 0.5 ms late.
            stream("a", vec![10_200, 20_700, 30_200]),
            stream("b", vec![5_100, 6_100]),
            stream("unknown", vec![1]),
        ];
        let errors = timing_errors(measured, &truth);
        assert_eq!(errors.matched, 2);
        assert_eq!(errors.unmatched, 1);
        assert_eq!(errors.ttft.count, 2);
        assert!((errors.ttft.max_ms - 0.2).abs() < 1e-9);
        assert!((errors.ttft.min_ms - 0.1).abs() < 1e-9);
        assert_eq!(errors.itl.count, 3);
        assert!((errors.itl.max_ms - 0.5).abs() < 1e-9);
        assert!((errors.itl.min_ms + 0.5).abs() < 1e-9);
        assert!(errors.itl.p50_ms.abs() < 1e-9);
    }

    #[test]
    fn streams_with_other_chunk_counts_give_ttft_only() {
        let truth = vec![writes("a", vec![1_000_000, 2_000_000])];
        let errors = timing_errors(vec![stream("a", vec![1_000])], &truth);
        assert_eq!(errors.chunk_count_mismatch, 1);
        assert_eq!(errors.ttft.count, 1);
        assert_eq!(errors.itl.count, 0);
    }

    #[test]
    fn percentiles_are_nearest_rank() {
        let mut values: Vec<f64> = (1..=200).map(f64::from).collect();
        let summary = ErrorSummary::of(&mut values);
        assert_eq!(summary.p50_ms, 100.0);
        assert_eq!(summary.p99_ms, 198.0);
        assert_eq!(summary.max_ms, 200.0);
        assert_eq!(ErrorSummary::of(&mut []).count, 0);
    }
}
