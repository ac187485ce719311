//! A phase's load: its shape (closed loop, constant or ramped rate, burst, trace replay), how
//! its arrivals are spread, and what it declares about itself — open or closed loop, the
//! requests it holds in flight, its peak rate, whether it drains, how people read it — so that
//! the planner, the executor's bounds and the client self-check ask the load instead of
//! matching on its variants. A new load shape is one variant here (with its answers), its
//! reader in `parse/phase.rs`, its draws in `planner/arrivals.rs` and its driver in
//! `executor/phase/`.

use std::time::Duration;

use super::data;

/// The load model of a phase: exactly one per phase.
#[derive(Debug, Clone, PartialEq)]
pub enum Load {
    /// Closed loop: this many workers, each sending its next request when the previous finishes.
    Concurrency(u32),
    /// Open loop: requests arrive on a schedule, whatever the server does.
    Rate {
        /// Requests per second, constant or ramped.
        rate: RateShape,
        /// How arrivals are spread.
        arrivals: Arrivals,
    },
    /// A burst: this many requests released together.
    AtOnce(u32),
    /// An open loop whose arrivals (and request lengths) replay a trace file.
    Trace(data::Trace),
    /// Agent sessions replayed from a file, so many at once: each call waits for the answers
    /// it depends on and its recorded wait.
    Sessions(super::sessions::Sessions),
}

#[derive(Debug, Clone, Copy, PartialEq)]
/// How an open loop's rate moves over its phase.
pub enum RateShape {
    /// Requests per second, constant over the phase.
    Constant(f64),
    /// Requests per second rising (or falling) linearly from `from` to `to` over the phase.
    Ramp {
        /// The rate at the phase's start.
        from: f64,
        /// The rate at the phase's end.
        to: f64,
    },
}

impl RateShape {
    /// The mean rate over the phase.
    pub fn mean(self) -> f64 {
        match self {
            RateShape::Constant(rate) => rate,
            RateShape::Ramp { from, to } => (from + to) / 2.0,
        }
    }

    /// The highest rate over the phase.
    pub fn peak(self) -> f64 {
        match self {
            RateShape::Constant(rate) => rate,
            RateShape::Ramp { from, to } => from.max(to),
        }
    }
}

impl Load {
    /// Whether requests go out on a schedule of their own (rates, traces, bursts), whatever the
    /// server does; a closed loop's users each wait for their previous answer.
    pub fn is_open_loop(&self) -> bool {
        !matches!(self, Load::Concurrency(_) | Load::Sessions(_))
    }

    /// Whether its requests' bodies can be built ahead of their sends, in schedule order; a
    /// session's call is made when its turn comes (what it carries is the session's).
    pub fn bodies_ahead(&self) -> bool {
        match self {
            Load::Concurrency(_) | Load::Rate { .. } | Load::AtOnce(_) | Load::Trace(_) => true,
            Load::Sessions(_) => false,
        }
    }

    /// Whether the phase waits for its requests to finish before the next starts (a burst's
    /// latency is its own only then).
    pub fn drains(&self) -> bool {
        matches!(self, Load::AtOnce(_))
    }

    /// An open loop's (or a replay's) highest arrival rate, per second; `None` for a closed
    /// loop or a burst, whose load is a number of requests in flight.
    pub fn peak_rate(&self) -> Option<f64> {
        match self {
            Load::Rate { rate, .. } => Some(rate.peak()),
            Load::Trace(trace) => Some(trace.peak_rate()),
            Load::Concurrency(_) | Load::AtOnce(_) | Load::Sessions(_) => None,
        }
    }

    /// The requests the load holds in flight whatever the server does: a closed loop's users, a
    /// burst's requests; `None` for an open loop, whose count depends on the server's latency.
    pub fn fixed_in_flight(&self) -> Option<u32> {
        match self {
            Load::Concurrency(n) | Load::AtOnce(n) => Some(*n),
            Load::Rate { .. } | Load::Trace(_) => None,
            // Each session's agents may each have a call out, within the cap; sessions arriving
            // at a rate are as many as the server's latency makes them.
            Load::Sessions(sessions) => match (sessions.rate, sessions.max_in_flight) {
                (_, Some(most)) => Some(most),
                (None, None) => Some(sessions.concurrent.saturating_mul(sessions.widest())),
                (Some(_), None) => None,
            },
        }
    }

    /// The most requests it holds in flight when each takes up to `latency`: its fixed count,
    /// or (Little's law) its peak rate × `latency` for an open loop. Every bound the executor
    /// sets from a load (connections warmed, the pool, the open-file check) comes from here.
    pub fn in_flight_within(&self, latency: Duration) -> f64 {
        match (self.fixed_in_flight(), self.peak_rate()) {
            (Some(n), _) => n as f64,
            (None, Some(rate)) => rate * latency.as_secs_f64(),
            (None, None) => latency.as_secs_f64(),
        }
    }

    /// The load at its peak: a ramp's highest rate held constant, other loads as they are.
    pub fn at_peak(&self) -> Load {
        match self {
            Load::Rate {
                rate: rate @ RateShape::Ramp { .. },
                arrivals,
            } => Load::Rate {
                rate: RateShape::Constant(rate.peak()),
                arrivals: *arrivals,
            },
            other @ (Load::Concurrency(_)
            | Load::Rate {
                rate: RateShape::Constant(_),
                ..
            }
            | Load::AtOnce(_)
            | Load::Trace(_)
            | Load::Sessions(_)) => other.clone(),
        }
    }

    /// The load as people read it, e.g. `rate 1→16/s poisson`.
    pub fn describe(&self) -> String {
        match self {
            Load::Concurrency(n) => format!("concurrency {n}"),
            Load::AtOnce(n) => format!("at-once {n}"),
            Load::Rate {
                rate: RateShape::Constant(r),
                arrivals,
            } => format!("rate {r}/s {arrivals}"),
            Load::Rate {
                rate: RateShape::Ramp { from, to },
                arrivals,
            } => {
                format!("rate {from}→{to}/s {arrivals}")
            }
            Load::Trace(trace) => format!(
                "trace {}{}",
                trace.shown,
                if trace.speed == 1.0 {
                    String::new()
                } else {
                    format!(" ×{}", super::units::format_load(trace.speed))
                }
            ),
            Load::Sessions(sessions) => sessions.describe(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
/// How an open loop's arrivals are spread in time.
pub enum Arrivals {
    /// Exponential gaps, as independent users produce.
    Poisson,
    /// Evenly spaced; the first at once.
    Constant,
    /// Gamma-distributed inter-arrival times with this coefficient of variation (1 = Poisson,
    /// above 1 burstier, below 1 smoother).
    Gamma {
        /// The coefficient of variation of the gaps.
        cv: f64,
    },
}

impl std::fmt::Display for Arrivals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Arrivals::Poisson => f.write_str("poisson"),
            Arrivals::Constant => f.write_str("constant"),
            Arrivals::Gamma { cv } => write!(f, "gamma cv={cv}"),
        }
    }
}

pub use crate::records::LoadUnit;

impl Load {
    /// The load of `value` in `unit`: a constant rate with `arrivals`, that many users, or that
    /// many of `sessions`' sessions at once; `None` for sessions without their file.
    pub fn in_unit(
        unit: LoadUnit,
        value: f64,
        arrivals: Arrivals,
        sessions: Option<&super::sessions::Sessions>,
    ) -> Option<Load> {
        let whole = value.round().max(1.0) as u32;
        Some(match unit {
            LoadUnit::RequestsPerSecond => Load::Rate {
                rate: RateShape::Constant(value),
                arrivals,
            },
            LoadUnit::Concurrency => Load::Concurrency(whole),
            LoadUnit::Sessions => Load::Sessions(super::sessions::Sessions {
                concurrent: whole,
                ..sessions?.clone()
            }),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_load_states_its_needs() {
        let ramp = Load::Rate {
            rate: RateShape::Ramp { from: 2.0, to: 8.0 },
            arrivals: Arrivals::Poisson,
        };
        assert!(ramp.is_open_loop() && !ramp.drains());
        assert_eq!(ramp.peak_rate(), Some(8.0));
        assert_eq!(ramp.fixed_in_flight(), None);
        // Little's law: 8 req/s, each taking up to 2.5 s, hold 20 in flight.
        assert_eq!(ramp.in_flight_within(Duration::from_millis(2500)), 20.0);
        assert_eq!(
            ramp.at_peak(),
            Load::Rate {
                rate: RateShape::Constant(8.0),
                arrivals: Arrivals::Poisson
            }
        );
        assert_eq!(ramp.describe(), "rate 2→8/s poisson");
        let users = Load::Concurrency(16);
        assert!(!users.is_open_loop());
        assert_eq!(users.in_flight_within(Duration::from_secs(60)), 16.0);
        let burst = Load::AtOnce(64);
        assert!(burst.is_open_loop() && burst.drains());
        assert_eq!(burst.fixed_in_flight(), Some(64));
        assert_eq!(burst.at_peak(), burst);
    }
}
