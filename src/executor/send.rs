//! Sending one request: its exchange, its timeout, its cancellation, and the hand-over of its
//! record to the recorder (never lost, even if its task dies).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::Bytes;
use tokio::time::Instant;

use super::observe::stopped;
use super::phase::{ended_early, PhaseState};
use super::recorder::{Finished, Message};
use super::request::{self, Exchange};
use super::{Context, Event};
use crate::planner::ScheduledRequest;
use crate::records::ErrorClass;

/// Sends one request, waits for its whole response (or its timeout, or an abort), and hands the
/// result to the recorder. The caller has already counted it in `in_flight`.
pub(super) async fn execute(
    context: &Arc<Context>,
    state: &Arc<PhaseState>,
    request: ScheduledRequest,
    body: Bytes,
    intended: Option<Instant>,
) {
    let phase = state.index;
    let request_id = context.template.request_id(phase, request.seq);
    let mut sent_at = Instant::now();
    let intended_send_us = context.micros(intended.unwrap_or(sent_at));
    // Until the record is handed over, a panic in this task still records the request (as the
    // client's failure) and leaves the in-flight count: a run never hangs on a dead task.
    let mut guard = InFlightGuard {
        context,
        state,
        pending: Some((phase, request, intended_send_us)),
    };
    state.sent.fetch_add(1, Ordering::Relaxed);
    context.observer.on_event(Event::RequestSent { phase });
    let mut exchange = Exchange {
        live_chunks: Some(context.live.chunks.clone()),
        ..Exchange::default()
    };
    let timeout = context.template.timeout;
    enum End {
        Complete,
        TimedOut,
        Aborted,
        PhaseEnded,
    }
    let mut abort = context.abort.clone();
    let mut ended = state.ended.clone();
    let end = {
        let work = tokio::time::timeout(
            timeout,
            request::exchange(
                &context.client,
                &context.template,
                body,
                request_id,
                &mut sent_at,
                &mut exchange,
            ),
        );
        tokio::select! {
            result = work => if result.is_ok() { End::Complete } else { End::TimedOut },
            _ = stopped(&mut abort) => End::Aborted,
            _ = ended_early(&mut ended) => End::PhaseEnded,
        }
    };
    match end {
        End::Complete => {}
        End::TimedOut => {
            exchange.end_us = sent_at.elapsed().as_micros() as u64;
            exchange.fail(
                ErrorClass::Timeout,
                format!(
                    "no complete response within the {}s timeout",
                    timeout.as_secs_f64()
                ),
            );
        }
        End::Aborted => {
            exchange.end_us = sent_at.elapsed().as_micros() as u64;
            exchange.fail(
                ErrorClass::Cancelled,
                "still in flight when the run was interrupted",
            );
        }
        End::PhaseEnded => {
            exchange.end_us = sent_at.elapsed().as_micros() as u64;
            let reason = state.ended.borrow().clone().unwrap_or_default();
            exchange.fail(
                ErrorClass::Cancelled,
                format!("still in flight when its phase was ended early: {reason}"),
            );
        }
    }
    let actual_send_us = context.micros(sent_at);
    guard.pending = None;
    let finished = Finished {
        phase,
        request,
        intended_send_us: if intended.is_some() {
            intended_send_us
        } else {
            actual_send_us
        },
        actual_send_us,
        exchange,
    };
    let _ = context.records.send(Message::Finished(Box::new(finished)));
}

/// A request in flight: leaves the count when dropped, and records the request as the
/// client's failure if its task died before handing the record over.
struct InFlightGuard<'a> {
    context: &'a Arc<Context>,
    state: &'a Arc<PhaseState>,
    /// (phase, request, intended send µs) until the record is handed over.
    pending: Option<(usize, ScheduledRequest, u64)>,
}

impl Drop for InFlightGuard<'_> {
    fn drop(&mut self) {
        if let Some((phase, request, intended_send_us)) = self.pending.take() {
            let mut exchange = Exchange::default();
            exchange.fail(
                ErrorClass::Client,
                "llmload failed while handling this request (an internal error)",
            );
            let finished = Finished {
                phase,
                request,
                intended_send_us,
                actual_send_us: intended_send_us,
                exchange,
            };
            let _ = self
                .context
                .records
                .send(Message::Finished(Box::new(finished)));
        }
        self.state.in_flight.leave();
        self.context.in_flight.leave();
    }
}
