//! The open-loop driver, for rates, trace replays and bursts: each request goes out at its
//! intended time on the precise timer, whatever the server does (no coordinated omission); the
//! pacer never waits for an answer. A burst's phase then waits for its requests to drain.

use std::time::Duration;

use super::Drive;
use crate::executor::context::ended_early;
use crate::executor::observe::stopped;
use crate::executor::send::dispatch;

/// Sends the phase's requests at their intended times until its bodies run out, it is
/// stopped, or it is ended early; then holds the phase to its end.
pub(super) async fn drive(drive: Drive<'_>) {
    let Drive {
        context,
        state,
        phase,
        mut bodies,
        phase_start,
        deadline,
        mut cancel,
        mut ended,
    } = drive;
    while let Some((request, body)) = bodies.recv().await {
        let intended = phase_start + Duration::from_micros(request.intended_offset_us.unwrap_or(0));
        tokio::select! {
            _ = context.timer.sleep_until(intended) => {}
            _ = stopped(&mut cancel) => break,
            _ = ended_early(&mut ended) => break,
        }
        let ticket = context.enter(state);
        tokio::spawn(async move {
            dispatch(ticket, request, body, Some(intended), deadline).await;
        });
    }
    if phase.load_model.drains() {
        // A burst ends when it has drained, so its latency is its own.
        tokio::select! {
            _ = state.in_flight.wait_empty() => {}
            _ = stopped(&mut cancel) => {}
            _ = ended_early(&mut ended) => {}
        }
    } else if let Some(deadline) = deadline.filter(|_| !phase.ended_by_count()) {
        // Ended by its duration: the phase lasts its whole duration (arrivals simply
        // fell short of its end). Ended by its request count first: it ends now, so
        // that idle time is not counted as the phase's.
        tokio::select! {
            _ = tokio::time::sleep_until(deadline) => {}
            _ = stopped(&mut cancel) => {}
            _ = ended_early(&mut ended) => {}
        }
    }
}
