//! The client's stalls (its hiccup meter's `stall` lines) set against the requests: which
//! requests were in flight while the client was stopped, per phase, and each phase's stalls.
//!
//! One streaming pass: the meter writes a stall when it wakes, so a request that overlapped it
//! may have been written just before its line. Requests are checked against the stalls known
//! when they are read, and the most recent [`RECENT`] requests are checked again when a stall
//! arrives; a request written more than that many requests before the stall's line ended long
//! before the stall (the meter writes within milliseconds of waking).
//!
//! Not for: judging (the verdict decides what a stall makes of an assertion), nor the server's
//! stalls.

use std::collections::VecDeque;

use serde::Serialize;

use super::table::Needs;
use super::warnings::STALLED_SHARE;
use crate::plan::{Metric, MetricKind, Stat};
use crate::records::Stall;

/// Requests held to be checked against a stall whose line comes after theirs.
const RECENT: usize = 8192;
/// A stall is looked for this far before a request's send (none is longer).
const LONGEST_STALL_US: u64 = 600_000_000;

/// The client's stalls over a scope, and the requests in flight during them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct ClientStalls {
    /// Stalls of 5 ms or more in the scope's window.
    pub count: u64,
    /// The longest, ms.
    pub worst_ms: f64,
    /// When the longest began, seconds from the run's start.
    pub worst_at_s: f64,
    /// All of them together, ms.
    pub total_ms: f64,
    /// The scope's requests that were in flight during a stall.
    pub requests_during: u64,
    /// The scope's requests.
    pub requests: u64,
}

impl ClientStalls {
    /// The share of the scope's requests in flight during a stall.
    pub fn share_during(&self) -> f64 {
        self.requests_during as f64 / self.requests.max(1) as f64
    }

    /// The stalls as a sentence's parenthesis: "3 stall(s) of 5 ms or more, the worst 130 ms at
    /// 4.2 s, with 12 of 600 requests in flight".
    pub fn describe(&self) -> String {
        format!(
            "{} stall(s) of {} ms or more, the worst {:.0} ms at {:.1} s, with {} of {} requests \
             in flight",
            self.count,
            crate::records::STALL_RECORDED.as_millis(),
            self.worst_ms,
            self.worst_at_s,
            self.requests_during,
            self.requests
        )
    }

    /// Whether these stalls could by themselves have lengthened a latency statistic of the
    /// scope by `distance` ms: enough stalled requests to move the statistic (a p99 of 600
    /// requests: 6; a max: one) and a stall as long as the distance.
    fn could_lengthen(&self, stat: Option<Stat>, distance: f64) -> bool {
        let n = self.requests.max(1) as f64;
        let needed = match stat {
            Some(Stat::Percentile(p)) => ((1.0 - p / 100.0) * n).ceil().max(1.0),
            Some(Stat::Max) | None => 1.0,
            Some(Stat::Min) => n,
            Some(Stat::Mean) => (distance * n / self.worst_ms.max(1e-9)).ceil(),
        };
        self.worst_ms >= distance && self.requests_during as f64 >= needed
    }

    /// The factor by which the stalls could at most have scaled a value over the scope's wall
    /// time (`wall_s`): its requests in flight during a stall might have counted in full had
    /// the client not stopped — among the requests that count at all (`counted`, the share of
    /// them that are good for a goodput, 1 otherwise) — and the wall time might have been
    /// shorter by all of the stalls together.
    fn factor(&self, wall_s: f64, counted: f64) -> f64 {
        let lost_time = self.total_ms / (wall_s * 1e3);
        if lost_time >= 1.0 || counted <= 0.0 {
            return f64::INFINITY;
        }
        (1.0 + self.share_during() / counted) / (1.0 - lost_time)
    }

    /// How many of the scope's requests fell due while the client stood still (its rate over
    /// the wall time `wall_s`, times the stalls' time), whole: the most a stall could have held
    /// back and sent together. A request already in flight is not moved by a stall.
    fn due_during(&self, wall_s: f64) -> f64 {
        if wall_s <= 0.0 {
            return f64::INFINITY;
        }
        (self.requests as f64 * self.total_ms / (wall_s * 1e3)).ceil()
    }
}

/// Whether the scope's client stalls could by themselves have moved `metric`'s value (`stat`
/// of it) from `value` to `to` (a threshold, or the other run's value):
/// - a latency: enough stalled requests to move the statistic, and a stall as long as the
///   distance (a stall only lengthens a latency);
/// - a share of requests: [`STALLED_SHARE`] or more of them in flight during a stall, and the
///   distance no more than that share (each of them might have gone the other way);
/// - a throughput, a power, an energy or a price per token: that share, and `to` within the
///   factor the stalls could have scaled the value by ([`ClientStalls::factor`]): a price of
///   $50 a million tokens is not made of a 5 ms stall when the gate asks for $0.01;
/// - a count (a server's running or waiting batch, its preemptions, tool calls): that share, and
///   the distance no more than the requests that fell due during the stalls
///   ([`ClientStalls::due_during`]): held back and sent together, they could have added that
///   many to a batch, not a batch the server was already running;
/// - anything else (per-request token rates, capacities, token counts): that share alone.
pub fn could_move(
    scope: &super::PhaseMetrics,
    metric: Metric,
    stat: Option<Stat>,
    value: f64,
    to: f64,
) -> bool {
    let Some(stalls) = scope.client_stalls.filter(|s| s.count > 0) else {
        return false;
    };
    let distance = (value - to).abs();
    let shared = stalls.share_during() >= STALLED_SHARE;
    match metric.kind() {
        MetricKind::Latency => stalls.could_lengthen(stat, distance),
        MetricKind::Fraction => shared && distance <= stalls.share_during(),
        MetricKind::Throughput | MetricKind::Power | MetricKind::Energy | MetricKind::Cost => {
            let good = matches!(metric.def().needs, Needs::Slo | Needs::Cost { slo: true });
            let counted = if good {
                scope.goodput.as_ref().map_or(0.0, |g| g.ratio)
            } else {
                1.0
            };
            let factor = stalls.factor(scope.wall_s, counted);
            shared && (factor.is_infinite() || (to >= value / factor && to <= value * factor))
        }
        MetricKind::Count => shared && distance <= stalls.due_during(scope.wall_s),
        MetricKind::TokenRate | MetricKind::Capacity | MetricKind::Tokens => shared,
    }
}

struct Recent {
    phase: usize,
    shard: Option<u32>,
    send_us: u64,
    end_us: u64,
    marked: bool,
}

/// Stalls and requests as the log streams by.
#[derive(Default)]
pub(super) struct StallMarks {
    /// Every stall, by start.
    stalls: Vec<Stall>,
    recent: VecDeque<Recent>,
    /// Per phase position: requests, and those in flight during a stall.
    requests: Vec<(u64, u64)>,
}

fn overlaps(stall: &Stall, send_us: u64, end_us: u64) -> bool {
    stall.at_us < end_us && stall.end_us() > send_us
}

/// In a merged run, a shard's stall held up its own requests only.
fn same_client(stall: &Stall, shard: Option<u32>) -> bool {
    stall.shard.is_none() || shard.is_none() || stall.shard == shard
}

impl StallMarks {
    /// A request of the phase at `phase` (its position), sent (by `shard`, in a merged run)
    /// and ended at these times.
    pub fn request(&mut self, phase: usize, shard: Option<u32>, send_us: u64, end_us: u64) {
        let known = self.stalls.partition_point(|s| s.at_us < end_us);
        let marked = self.stalls[..known]
            .iter()
            .rev()
            .take_while(|s| s.at_us + LONGEST_STALL_US > send_us)
            .any(|s| overlaps(s, send_us, end_us) && same_client(s, shard));
        self.count(phase, marked);
        self.recent.push_back(Recent {
            phase,
            shard,
            send_us,
            end_us,
            marked,
        });
        if self.recent.len() > RECENT {
            self.recent.pop_front();
        }
    }

    /// A stall: the recent requests in flight during it are marked.
    pub fn stall(&mut self, stall: Stall) {
        let mut newly = Vec::new();
        for recent in self.recent.iter_mut().filter(|r| !r.marked) {
            if overlaps(&stall, recent.send_us, recent.end_us) && same_client(&stall, recent.shard)
            {
                recent.marked = true;
                newly.push(recent.phase);
            }
        }
        for phase in newly {
            if let Some(counts) = self.requests.get_mut(phase) {
                counts.1 += 1;
            }
        }
        let at = self.stalls.partition_point(|s| s.at_us <= stall.at_us);
        self.stalls.insert(at, stall);
    }

    fn count(&mut self, phase: usize, marked: bool) {
        if self.requests.len() <= phase {
            self.requests.resize(phase + 1, (0, 0));
        }
        self.requests[phase].0 += 1;
        self.requests[phase].1 += u64::from(marked);
    }

    /// The stalls within these windows (start, end µs) and the requests of these phase
    /// positions; `None` when the meter saw no stall there and no request waited on one.
    pub fn summary(&self, windows: &[(u64, u64)], phases: &[usize]) -> Option<ClientStalls> {
        let mut summary = ClientStalls::default();
        for stall in self
            .stalls
            .iter()
            .filter(|s| windows.iter().any(|&(start, end)| overlaps(s, start, end)))
        {
            summary.count += 1;
            summary.total_ms += stall.ms;
            if stall.ms > summary.worst_ms {
                summary.worst_ms = stall.ms;
                summary.worst_at_s = stall.at_us as f64 / 1e6;
            }
        }
        for &phase in phases {
            let (requests, during) = self.requests.get(phase).copied().unwrap_or((0, 0));
            summary.requests += requests;
            summary.requests_during += during;
        }
        (summary.count > 0 || summary.requests_during > 0).then_some(summary)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stall(at_ms: u64, ms: f64) -> Stall {
        Stall {
            at_us: at_ms * 1000,
            ms,
            shard: None,
        }
    }

    #[test]
    fn requests_in_flight_during_a_stall_are_marked_whichever_line_comes_first() {
        let mut marks = StallMarks::default();
        // Written before the stall's line: 900-1100 ms and 1000-1400 ms overlap 1000-1300.
        marks.request(0, None, 900_000, 1_100_000);
        marks.request(0, None, 100_000, 200_000);
        marks.stall(stall(1000, 300.0));
        // Written after: 1250-1500 overlaps, 1400-1600 does not.
        marks.request(0, None, 1_250_000, 1_500_000);
        marks.request(0, None, 1_400_000, 1_600_000);
        // Another phase's request during it.
        marks.request(1, None, 1_100_000, 1_200_000);
        let phase0 = marks.summary(&[(0, 2_000_000)], &[0]).unwrap();
        assert_eq!(phase0.requests, 4);
        assert_eq!(phase0.requests_during, 2);
        assert_eq!(phase0.count, 1);
        assert_eq!(phase0.worst_ms, 300.0);
        assert_eq!(phase0.worst_at_s, 1.0);
        let both = marks.summary(&[(0, 2_000_000)], &[0, 1]).unwrap();
        assert_eq!(both.requests_during, 3);
        // A window the stall is not in, with no request during it: nothing to say.
        assert!(marks.summary(&[(5_000_000, 6_000_000)], &[]).is_none());
        // Marked once, whatever the stalls.
        marks.stall(stall(1050, 10.0));
        assert_eq!(
            marks
                .summary(&[(0, 2_000_000)], &[0])
                .unwrap()
                .requests_during,
            2
        );
    }

    /// One 5 ms stall with 2 of 100 requests in flight, over a 2 s phase whose goodput is 10%.
    fn scope() -> crate::metrics::PhaseMetrics {
        crate::metrics::PhaseMetrics {
            client_stalls: Some(ClientStalls {
                count: 1,
                worst_ms: 5.0,
                total_ms: 5.0,
                requests_during: 2,
                requests: 100,
                ..ClientStalls::default()
            }),
            wall_s: 2.0,
            goodput: Some(crate::metrics::Goodput {
                ratio: 0.1,
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn a_stall_moves_what_it_can_reach_and_nothing_further() {
        use Metric::*;
        // (metric, stat, value, to, could move): the throughputs' factor is
        // (1 + 0.02) / (1 - 0.0025) ≈ 1.0226; a goodput's (1 + 0.02 / 0.1) / 0.9975 ≈ 1.203.
        let cases = [
            (Ttft, Some(Stat::Max), 100.0, 104.0, true),
            (Ttft, Some(Stat::Max), 100.0, 106.0, false),
            (Ttft, Some(Stat::Percentile(99.0)), 100.0, 104.0, true),
            (Ttft, Some(Stat::Percentile(90.0)), 100.0, 104.0, false),
            (ErrorRate, None, 0.03, 0.015, true),
            (ErrorRate, None, 0.03, 0.005, false),
            (OutputThroughput, None, 1000.0, 1020.0, true),
            (OutputThroughput, None, 1000.0, 1030.0, false),
            (OutputThroughput, None, 1000.0, 980.0, true),
            (Goodput, None, 10.0, 12.0, true),
            (Goodput, None, 10.0, 12.5, false),
            (CostPerMillionOutputTokens, None, 50.0, 49.0, true),
            (CostPerMillionOutputTokens, None, 50.0, 0.01, false),
            (CostPerMillionGoodputTokens, None, 50.0, 42.0, true),
            (CostPerMillionGoodputTokens, None, 50.0, 40.0, false),
            (EnergyPerOutputToken, None, 0.5, 0.4, false),
            (DecodeTps, Some(Stat::Percentile(50.0)), 30.0, 1000.0, true),
            // 100 requests over 2 s fall due at 50 a second: one in a 5 ms stall.
            (ServerRunning, Some(Stat::Max), 4.0, 3.0, true),
            (ServerRunning, Some(Stat::Max), 4.0, 0.5, false),
        ];
        let scope = scope();
        for (metric, stat, value, to, moves) in cases {
            assert_eq!(
                could_move(&scope, metric, stat, value, to),
                moves,
                "{metric:?} {stat:?} from {value} to {to}"
            );
        }
        // Fewer than 1% of the requests in flight: no value but a latency is moved.
        let mut few = scope.clone();
        few.client_stalls.as_mut().unwrap().requests = 1000;
        assert!(!could_move(&few, OutputThroughput, None, 1000.0, 1001.0));
        assert!(!could_move(&few, DecodeTps, None, 30.0, 1000.0));
        // No good request at all: any goodput might have been the stalls' doing.
        let mut none_good = scope.clone();
        none_good.goodput = Some(crate::metrics::Goodput::default());
        assert!(could_move(&none_good, Goodput, None, 0.0, 1e6));
        // No stall: nothing moved.
        let calm = crate::metrics::PhaseMetrics::default();
        assert!(!could_move(&calm, Ttft, Some(Stat::Max), 100.0, 100.0));
    }
}
