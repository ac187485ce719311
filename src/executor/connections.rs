//! Connections are the client's business, not the measurement's: they are opened before a
//! phase's clock starts, and every one opened while a phase runs is counted and timed.
//!
//! Under HTTP/1.1 a request in flight holds a connection of its own, and opening one (TCP, TLS)
//! takes from a fraction of a millisecond on loopback to tens of milliseconds across a network,
//! queued behind the others when hundreds open at once. A first wave that opens its connections
//! reports TTFT tails that are the client's. So before each group of phases the executor opens
//! (and checks) as many connections as the phases will hold at once, unless the plan asks to
//! measure cold starts. It is not for choosing or limiting connections (the pool does that), nor
//! for how they are opened and checked (the transport's `warm`).

use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use super::request::RequestTemplate;
use super::transport::Transport;
use crate::plan::Load;
use crate::planner::PhaseSchedule;
use crate::records::Connections;

/// Every connection the client opened: when it was ready, how long it took, whether it worked.
#[derive(Default)]
pub struct ConnectLog {
    opened: Mutex<Vec<(Instant, Duration, bool)>>,
}

impl ConnectLog {
    pub(super) fn record(&self, took: Duration, ok: bool) {
        if let Ok(mut opened) = self.opened.lock() {
            opened.push((Instant::now(), took, ok));
        }
    }

    /// The connections that were ready between `from` and `to`, and how long they took.
    pub fn between(&self, from: Instant, to: Instant, warmed: u64) -> Connections {
        let mut took: Vec<f64> = Vec::new();
        let mut failed = 0;
        if let Ok(opened) = self.opened.lock() {
            for &(at, duration, ok) in opened.iter() {
                if at >= from && at <= to {
                    if ok {
                        took.push(duration.as_secs_f64() * 1000.0);
                    } else {
                        failed += 1;
                    }
                }
            }
        }
        took.sort_by(f64::total_cmp);
        Connections {
            warmed,
            opened: took.len() as u64,
            failed,
            connect_ms_p50: took.get(took.len() / 2).copied(),
            connect_ms_max: took.last().copied(),
        }
    }
}

/// How many connections a phase holds at once: a closed loop's users, a burst's requests, an
/// open loop's arrivals in its busiest second (it needs more when its answers take longer, and
/// opens them as it goes: those are counted).
pub fn needed(phase: &PhaseSchedule) -> u64 {
    match &phase.load_model {
        Load::Concurrency(n) | Load::AtOnce(n) => *n as u64,
        open => open.peak_rate().unwrap_or(1.0).ceil() as u64,
    }
}

/// Leaves `count` connections to `template`'s server open and idle in the pool, each having
/// answered a `GET /models` (every OpenAI-compatible server answers it; any answer proves the
/// connection) with the run's credentials. Returns how many, and the first failure.
pub async fn warm(
    transport: &Transport,
    template: &RequestTemplate,
    count: u64,
) -> (u64, Option<String>) {
    let root = template
        .url
        .as_str()
        .strip_suffix(template.dialect.path())
        .unwrap_or(template.url.as_str());
    match reqwest::Url::parse(&format!("{root}/models")) {
        Ok(models) => transport.warm(&models, template, count).await,
        Err(_) => (0, Some(format!("{root}/models is not a URL"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connections_are_counted_in_their_window() {
        let log = ConnectLog::default();
        let before = Instant::now();
        log.record(Duration::from_millis(3), true);
        log.record(Duration::from_millis(9), true);
        log.record(Duration::from_millis(1), false);
        let after = Instant::now();
        let c = log.between(before, after, 4);
        assert_eq!((c.warmed, c.opened, c.failed), (4, 2, 1));
        assert_eq!(c.connect_ms_max, Some(9.0));
        assert_eq!(c.connect_ms_p50, Some(9.0));
        let none = log.between(
            after + Duration::from_secs(1),
            after + Duration::from_secs(2),
            0,
        );
        assert_eq!(none.opened, 0);
        assert_eq!(none.connect_ms_max, None);
    }
}
