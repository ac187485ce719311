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

use super::request::RequestTemplate;
use super::transport::Transport;
use crate::planner::PhaseSchedule;

/// How many connections a phase holds at once: a closed loop's users, a burst's requests, an
/// open loop's arrivals in its busiest second (it needs more when its answers take longer, and
/// opens them as it goes: those are counted).
pub fn needed(phase: &PhaseSchedule) -> u64 {
    phase
        .load_model
        .in_flight_within(std::time::Duration::from_secs(1))
        .ceil() as u64
}

/// Leaves `count` connections to `template`'s server open and idle in the pool, each having
/// answered a `GET /models` (every OpenAI-compatible server answers it; any answer proves the
/// connection) with the run's credentials. Returns how many, and the first failure.
pub async fn warm(
    transport: &Transport,
    template: &RequestTemplate,
    count: u64,
) -> (u64, Option<String>) {
    // The endpoint's sibling under the API root, the target's query kept.
    let path = template.url.path();
    let root = path.strip_suffix(template.dialect.path()).unwrap_or(path);
    let mut models = template.url.clone();
    models.set_path(&format!("{root}/models"));
    transport.warm(&models, template, count).await
}
