//! The GPUs' energy over a scope, set against the tokens of that scope: joules per output
//! token and output tokens per joule, from a GPU exporter's telemetry (DCGM's energy counters,
//! else its power gauge).
//!
//! Not a telemetry reader (that is [`crate::telemetry`]) and not a phase's server summary
//! ([`super::server`]): it only joins that summary with the client's own token counts, over
//! the same window.

use serde::Serialize;

use super::PhaseMetrics;
use crate::telemetry::Signal;

/// What the GPUs spent on a scope's tokens.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Energy {
    /// The GPUs' mean power over the scope's window, all GPUs summed, W.
    pub watts: f64,
    /// Where the power came from: `"energy counter"` (the counters' increase over the window,
    /// which misses no spike between scrapes) or `"power gauge"` (the mean of its scrapes).
    pub from: &'static str,
    /// Joules over the scope's wall time (its start to its last response).
    pub joules: f64,
    /// Joules per output token of its successful requests.
    pub per_output_token_j: Option<f64>,
    /// Output tokens per joule.
    pub output_tokens_per_j: Option<f64>,
    /// Requests in flight on average over the window, by Little's law: its successful
    /// requests' E2E together over its wall time.
    pub requests_in_flight: Option<f64>,
    /// The GPUs' watts per request in flight: what serving one more concurrent request (one
    /// more agent, one more user) draws at this load.
    pub watts_per_request_in_flight: Option<f64>,
}

impl Energy {
    /// The GPUs' energy over `scope`, when its telemetry says what they drew. Power over
    /// tokens per second is joules per token; both are over the scope's window.
    pub fn of(scope: &PhaseMetrics) -> Option<Energy> {
        let (watts, from) = mean_power(scope)?;
        Some(Energy::at(scope, watts, from))
    }

    /// The GPUs' energy over a scope made of the windows of `parts` (all recorded phases, or
    /// their steady windows): the parts' joules together over their wall time together, so that
    /// the time between them (a warm-up cut off, a phase not recorded) counts neither its
    /// joules nor its seconds. `None` when a part's telemetry says nothing of power.
    pub fn of_parts(scope: &PhaseMetrics, parts: &[&PhaseMetrics]) -> Option<Energy> {
        let mut joules = 0.0;
        let mut wall_s = 0.0;
        let mut from = COUNTER;
        for part in parts {
            let (watts, part_from) = mean_power(part)?;
            joules += watts * part.wall_s;
            wall_s += part.wall_s;
            if part_from == GAUGE {
                from = GAUGE;
            }
        }
        if parts.len() < 2 || wall_s <= 0.0 {
            return Energy::of(scope);
        }
        Some(Energy::at(scope, joules / wall_s, from))
    }

    /// The figures of `scope` at a mean power of `watts` over its window.
    fn at(scope: &PhaseMetrics, watts: f64, from: &'static str) -> Energy {
        let tokens_per_s = scope.throughput.output_tokens_per_s;
        let tokens = tokens_per_s > 0.0;
        let in_flight = scope
            .metrics
            .get(crate::metrics::Metric::E2e)
            .and_then(|e2e| Some(e2e.mean? / 1e3 * e2e.count as f64))
            .filter(|_| scope.wall_s > 0.0)
            .map(|busy_s| busy_s / scope.wall_s)
            .filter(|&n| n > 0.0);
        Energy {
            watts,
            from,
            joules: watts * scope.wall_s,
            per_output_token_j: tokens.then(|| watts / tokens_per_s),
            output_tokens_per_j: (tokens && watts > 0.0).then(|| tokens_per_s / watts),
            requests_in_flight: in_flight,
            watts_per_request_in_flight: in_flight.map(|n| watts / n),
        }
    }
}

const COUNTER: &str = "energy counter";
const GAUGE: &str = "power gauge";

/// The GPUs' mean power over `scope`'s window, and where it came from.
fn mean_power(scope: &PhaseMetrics) -> Option<(f64, &'static str)> {
    let server = scope.server.as_ref()?;
    // A counter that moved fewer than twice over the window was refreshed less often than
    // the window lasts: its increase is a step, not the window's energy. Its increase over
    // the window itself where scrapes stand on both sides of each end, else its rate
    // between the scrapes that bracket the window.
    let counter = server
        .signal(Signal::GpuEnergy)
        .filter(|energy| energy.changes.unwrap_or(0) >= 2)
        .and_then(|energy| match energy.window_delta {
            Some(joules) if scope.wall_s > 0.0 => Some(joules / scope.wall_s),
            Some(_) | None => energy.per_s,
        });
    let gauge = server.signal(Signal::GpuPower).and_then(|power| power.mean);
    match (counter, gauge) {
        (Some(watts), _) => Some((watts, COUNTER)),
        (None, Some(watts)) => Some((watts, GAUGE)),
        (None, None) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::server::{PhaseServer, SignalSummary};
    use crate::metrics::Throughput;

    fn scope(signals: &[(Signal, SignalSummary)], tokens_per_s: f64) -> PhaseMetrics {
        PhaseMetrics {
            wall_s: 10.0,
            throughput: Throughput {
                output_tokens_per_s: tokens_per_s,
                ..Throughput::default()
            },
            server: Some(PhaseServer {
                signals: signals
                    .iter()
                    .map(|(s, v)| (s.name().to_string(), v.clone()))
                    .collect(),
                ..PhaseServer::default()
            }),
            ..PhaseMetrics::default()
        }
    }

    #[test]
    fn the_energy_counter_is_preferred_to_the_power_gauge() {
        let counter = SignalSummary {
            delta: Some(4000.0),
            per_s: Some(400.0),
            changes: Some(10),
            ..SignalSummary::default()
        };
        let gauge = SignalSummary {
            mean: Some(350.0),
            max: Some(700.0),
            ..SignalSummary::default()
        };
        let both = Energy::of(&scope(
            &[
                (Signal::GpuEnergy, counter),
                (Signal::GpuPower, gauge.clone()),
            ],
            2000.0,
        ))
        .unwrap();
        assert_eq!(both.from, "energy counter");
        assert_eq!(both.watts, 400.0);
        assert_eq!(both.joules, 4000.0);
        assert_eq!(both.per_output_token_j, Some(0.2));
        assert_eq!(both.output_tokens_per_j, Some(5.0));
        let gauge_only = Energy::of(&scope(&[(Signal::GpuPower, gauge.clone())], 2000.0)).unwrap();
        assert_eq!(gauge_only.from, "power gauge");
        assert_eq!(gauge_only.per_output_token_j, Some(350.0 / 2000.0));
        // A counter refreshed once in the window (dcgm-exporter's default 30 s collection
        // against a short phase) is a step, not a rate: the gauge is used.
        let step = SignalSummary {
            delta: Some(12000.0),
            per_s: Some(1200.0),
            changes: Some(1),
            ..SignalSummary::default()
        };
        let stepped = Energy::of(&scope(
            &[(Signal::GpuEnergy, step), (Signal::GpuPower, gauge)],
            2000.0,
        ))
        .unwrap();
        assert_eq!(stepped.from, "power gauge");
        assert_eq!(stepped.watts, 350.0);
    }

    #[test]
    fn parts_add_their_joules_and_leave_out_the_time_between_them() {
        let gauge = |watts: f64| SignalSummary {
            mean: Some(watts),
            ..SignalSummary::default()
        };
        let mut first = scope(&[(Signal::GpuPower, gauge(100.0))], 1000.0);
        first.wall_s = 2.0;
        let mut second = scope(&[(Signal::GpuPower, gauge(400.0))], 1000.0);
        second.wall_s = 8.0;
        // The scope's own scrapes span the gap between the parts too (a warm-up's watts).
        let mut both = scope(&[(Signal::GpuPower, gauge(600.0))], 1000.0);
        both.wall_s = 10.0;
        let energy = Energy::of_parts(&both, &[&first, &second]).unwrap();
        assert_eq!(energy.watts, (100.0 * 2.0 + 400.0 * 8.0) / 10.0);
        assert_eq!(energy.joules, 3400.0);
        assert_eq!(energy.per_output_token_j, Some(0.34));
        assert_eq!(energy.from, "power gauge");
        // One part is the scope's own window.
        assert_eq!(Energy::of_parts(&both, &[&both]), Energy::of(&both));
        // A part without power says nothing of the whole.
        let dark = scope(&[], 1000.0);
        assert_eq!(Energy::of_parts(&both, &[&first, &dark]), None);
    }

    #[test]
    fn no_gpu_or_no_tokens_says_nothing_per_token() {
        assert_eq!(Energy::of(&scope(&[], 2000.0)), None);
        assert_eq!(Energy::of(&PhaseMetrics::default()), None);
        let idle = SignalSummary {
            mean: Some(60.0),
            ..SignalSummary::default()
        };
        let idle = Energy::of(&scope(&[(Signal::GpuPower, idle)], 0.0)).unwrap();
        assert_eq!(idle.joules, 600.0);
        assert_eq!(idle.per_output_token_j, None);
    }
}
