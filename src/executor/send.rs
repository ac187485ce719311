//! Sending one request: its exchange, its timeout, its cancellation, and the hand-over of its
//! record to the recorder (never lost, even if its task dies).

use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use tokio::time::Instant;

use super::context::{ended_early, Context, InFlightTicket};
use super::observe::stopped;
use super::recorder::{Finished, Message};
use super::request::{self, Exchange};
use super::template::RequestTemplate;
use super::Event;
use crate::plan::OnThrottle;
use crate::planner::{Answer, ScheduledRequest};
use crate::records::{ErrorClass, ThrottledAttempt, TurnKind};

/// Sends a request, or (for the first turn of a conversation) the whole conversation, one turn
/// after another. `ticket` counts the request in flight until its record is handed over.
pub(super) async fn dispatch(
    ticket: InFlightTicket,
    request: ScheduledRequest,
    body: Bytes,
    intended: Option<Instant>,
    deadline: Option<Instant>,
) {
    match (request.turn, ticket.context.schedule.conversation()) {
        // Boxed, so that single requests do not carry a conversation's state.
        (Some(1), Some(conversation)) if conversation.turns > 1 => {
            Box::pin(converse(ticket, request, body, intended, deadline)).await
        }
        _ => {
            execute(ticket, request, body, intended, deadline, false).await;
        }
    }
}

/// A conversation: each turn after the first waits for the answer to the one before and the
/// user's think time, then sends the history with a new message; in an agent loop, an answer
/// that called tools is followed instead, after the tools' latency, by their results (a tool
/// turn). It ends early when a turn fails (there is no answer to go on from), when the phase's
/// sending ends, or on a stop.
async fn converse(
    ticket: InFlightTicket,
    first: ScheduledRequest,
    body: Bytes,
    intended: Option<Instant>,
    deadline: Option<Instant>,
) {
    // The conversation counts as in flight while it thinks, so that a burst (or a phase that
    // drains) waits for its last turn.
    let hold = ticket.context.enter(&ticket.state);
    let (context, state) = (&hold.context, &hold.state);
    let turns = context.schedule.conversation().map_or(1, |c| c.turns);
    let agent_loop = context
        .schedule
        .conversation()
        .is_some_and(|c| c.tool_results.is_some());
    let mut answer = execute(ticket, first, body, intended, deadline, true).await;
    // Rebuilt rather than kept from the body builder: it is cheap, and only conversations need it.
    let mut history = crate::planner::as_messages(context.prompts.prompt(&first));
    let mut input = first.input_tokens;
    let mut abort = context.abort.clone();
    let mut ended = state.ended.clone();
    for turn in 2..=turns {
        let Some(previous) = answer.take() else { break };
        let mut request = context.schedule.turn(state.index, &first, turn);
        let pause = if agent_loop && !previous.tool_calls.is_empty() {
            request.turn_kind = Some(TurnKind::Tool);
            // What the new message would have been, the tools' results are instead.
            request.input_tokens = context.schedule.tool_result_tokens(&request);
            context.schedule.tool_latency(&request)
        } else {
            context.schedule.think_time(&request)
        };
        let think_until = Instant::now() + pause;
        if deadline.is_some_and(|d| think_until >= d) {
            break;
        }
        let deadline_passed = async {
            match deadline {
                Some(d) => tokio::time::sleep_until(d).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = tokio::time::sleep_until(think_until) => {}
            _ = stopped(&mut abort) => break,
            _ = ended_early(&mut ended) => break,
            _ = deadline_passed => break,
        }
        let (prompt, input_tokens) =
            context
                .prompts
                .next_turn(&mut history, previous, &request, input);
        input = input_tokens;
        request.input_tokens = input_tokens;
        let body = context
            .template(state.index)
            .body(&prompt, request.output_tokens);
        answer = execute(context.enter(state), request, body, None, deadline, true).await;
    }
}

/// Sends one request, waits for its whole response (or its timeout, or an abort), and hands the
/// result to the recorder. The caller has already counted it in `in_flight`. Returns the
/// answer (its text and tool calls) when `keep_answer` asks and the request succeeded (a
/// conversation goes on from it).
pub(super) async fn execute(
    ticket: InFlightTicket,
    request: ScheduledRequest,
    body: Bytes,
    intended: Option<Instant>,
    deadline: Option<Instant>,
    keep_answer: bool,
) -> Option<Answer> {
    // Until the record is handed over, a panic in this task still records the request (as the
    // client's failure), and the ticket leaves the in-flight counts: a run never hangs on a
    // dead task.
    let mut guard = InFlightGuard {
        ticket,
        pending: None,
    };
    let (context, state) = (&guard.ticket.context, &guard.ticket.state);
    let phase = state.index;
    let template = context.template(phase);
    let request_id = template.request_id(phase, request.seq);
    let (intended, paced_us, key) = match &context.pacer {
        Some(pacer) => pace(pacer, context, state, &request, intended, deadline).await?,
        None => (intended, 0, 0),
    };
    let mut sent_at = Instant::now();
    let intended_send_us = context.micros(intended.unwrap_or(sent_at));
    guard.pending = Some((phase, request, intended_send_us));
    state.sent.fetch_add(1, Ordering::Relaxed);
    context.observer.on_event(Event::RequestSent { phase });
    // Sized for the answer the plan asks for, so that reading it does not reallocate as it grows.
    let expected_chunks = (request.output_tokens as usize).min(4096);
    let media = context.prompts.media_of(&request);
    let request_bytes = body.len() as u64;
    let new_exchange = || Exchange {
        live_chunks: Some(context.live.chunks.clone()),
        chunk_times: Vec::with_capacity(expected_chunks),
        chunk_usage_tokens: Vec::with_capacity(expected_chunks),
        chunk_ends: Vec::with_capacity(expected_chunks),
        text: String::with_capacity(expected_chunks * 4),
        trace: Some(template.trace(phase, request.seq)),
        request_bytes,
        images: media.images.clone(),
        audio_ms: media.audio_ms,
        key: (template.keys.len() > 1).then_some(key),
        ..Exchange::default()
    };
    let mut exchange = new_exchange();
    let timeout = template.timeout;
    let mut abort = context.abort.clone();
    let mut ended = state.ended.clone();
    // A re-send needs the body again: a request's own is built once more from its prompt, as
    // the body builder built it; a turn's comes from its conversation, and an agent session's
    // call (a turn too, from its first) from its blocks or its agent's answers, so those are
    // kept.
    let kept = request.turn.is_some().then(|| body.clone());
    let body_again = || match &kept {
        Some(body) => body.clone(),
        None => template.body(&context.prompt_of(phase, &request).0, request.output_tokens),
    };
    let mut body = Some(body);
    let mut throttled: Vec<ThrottledAttempt> = Vec::new();
    let mut first_sent: Option<Instant> = None;
    let end = loop {
        let work = tokio::time::timeout(
            timeout,
            request::exchange(
                &context.transport,
                template,
                body.take().unwrap_or_else(body_again),
                &body_again,
                request_id.clone(),
                &mut sent_at,
                &mut exchange,
            ),
        );
        let end = tokio::select! {
            result = work => if result.is_ok() { End::Complete } else { End::TimedOut },
            _ = stopped(&mut abort) => End::Aborted,
            _ = ended_early(&mut ended) => End::PhaseEnded,
        };
        first_sent.get_or_insert(sent_at);
        if let (Some(pacer), Some(said)) = (&context.pacer, &exchange.rate_limit) {
            pacer.heard(key, said, Instant::now());
        }
        let retry = matches!(end, End::Complete)
            .then(|| retry_wait(template.on_throttle, &exchange, throttled.len()))
            .flatten();
        let Some(wait) = retry else { break end };
        // The wait asked for, unless the run or the phase ends meanwhile: the request then
        // stays as the server last answered it, throttled.
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = stopped(&mut abort) => break End::Complete,
            _ = ended_early(&mut ended) => break End::Complete,
        }
        throttled.push(throttled_attempt(context, sent_at, &exchange, wait));
        exchange = new_exchange();
        sent_at = Instant::now();
    };
    finish_attempt(end, &mut exchange, sent_at, timeout, &state.ended, context);
    refuse_unserved_route(context, template, &exchange);
    if let Some(host) = &context.media_host {
        exchange.images_fetched = host.forget(phase, request.seq);
    }
    check_batch_answer(template, &request, &mut exchange);
    if let Some(first) = first_sent.filter(|_| !throttled.is_empty()) {
        count_from_first_send(&mut exchange, &mut sent_at, first, throttled);
    }
    exchange.paced_us = paced_us;
    let actual_send_us = context.micros(sent_at);
    // Room in the recorder's queue first (at once, unless it has fallen far behind): the
    // guard still records the request if this task dies while it waits.
    let room = context.record_room.reserve(exchange.text.len()).await;
    guard.pending = None;
    let answer = (keep_answer && exchange.error.is_none()).then(|| answer_of(&mut exchange));
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
        room,
    };
    let _ = context.records.send(Message::Finished(Box::new(finished)));
    answer
}

/// A throttled attempt, as its record keeps it: when it went, how it ended, what the server
/// asked, and how long the client waited before sending again.
fn throttled_attempt(
    context: &Context,
    sent_at: Instant,
    exchange: &Exchange,
    wait: Duration,
) -> ThrottledAttempt {
    ThrottledAttempt {
        sent_us: context.micros(sent_at),
        e2e_us: exchange.end_us,
        http_status: exchange.http_status,
        error: exchange
            .error
            .as_ref()
            .map_or(ErrorClass::Http429, |(class, _)| *class),
        retry_after_ms: exchange.rate_limit.as_ref().and_then(|l| l.retry_after_ms),
        waited_us: wait.as_micros() as u64,
    }
}

/// A request sent again counts from its first send, as the application that retries sees it:
/// its times move by the waits and earlier attempts, and it keeps those attempts.
fn count_from_first_send(
    exchange: &mut Exchange,
    sent_at: &mut Instant,
    first: Instant,
    throttled: Vec<ThrottledAttempt>,
) {
    let offset = sent_at.saturating_duration_since(first).as_micros() as u64;
    exchange.end_us += offset;
    exchange.chunk_times.iter_mut().for_each(|at| *at += offset);
    *sent_at = first;
    exchange.throttled_attempts = throttled;
}

/// What a conversation goes on from: the answer's text and its tool calls (each named, as a
/// call must be for its result to answer it).
fn answer_of(exchange: &mut Exchange) -> Answer {
    Answer {
        text: exchange.answer_text(),
        tool_calls: std::mem::take(&mut exchange.calls)
            .into_iter()
            .enumerate()
            .map(|(index, mut call)| {
                if call.id.is_empty() {
                    call.id = format!("call_{index}");
                }
                call
            })
            .collect(),
    }
}

/// Holds a request until a key's budgets (`limits`) allow it: its slot (its intended time
/// from now on), how long it was held, µs, and the key it goes with. `None` when the run
/// stops, its phase ends, or the slot falls at or past the phase's end first: it is then not
/// sent, as a request the schedule had no time left for.
async fn pace(
    pacer: &super::pacer::Pacer,
    context: &Context,
    state: &super::context::PhaseState,
    request: &ScheduledRequest,
    intended: Option<Instant>,
    deadline: Option<Instant>,
) -> Option<(Option<Instant>, u64, usize)> {
    let due = intended.unwrap_or_else(Instant::now);
    let tokens = u64::from(request.input_tokens) + u64::from(request.output_tokens);
    let turn = pacer.take(due, tokens);
    let Some(slot) = turn.slot else {
        // A key without budgets: it goes when due.
        return Some((intended, 0, turn.key));
    };
    if deadline.is_some_and(|end| slot >= end) {
        return None;
    }
    if slot > Instant::now() {
        let (mut abort, mut ended) = (context.abort.clone(), state.ended.clone());
        tokio::select! {
            _ = tokio::time::sleep_until(slot) => {}
            _ = stopped(&mut abort) => return None,
            _ = ended_early(&mut ended) => return None,
        }
    }
    let held = slot.saturating_duration_since(due).as_micros() as u64;
    Some((Some(slot), held, turn.key))
}

/// How a request's last attempt ended.
enum End {
    Complete,
    TimedOut,
    Aborted,
    PhaseEnded,
}

/// Ends the last attempt's exchange as its end says: answered, out of time, or cancelled.
fn finish_attempt(
    end: End,
    exchange: &mut Exchange,
    sent_at: Instant,
    timeout: Duration,
    phase_ended: &tokio::sync::watch::Receiver<Option<String>>,
    context: &Context,
) {
    match end {
        End::Complete => {
            context.live.answered.fetch_add(1, Ordering::Relaxed);
        }
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
            let reason = phase_ended.borrow().clone().unwrap_or_default();
            exchange.fail(
                ErrorClass::Cancelled,
                format!("still in flight when its phase was ended early: {reason}"),
            );
        }
    }
}

/// An embeddings or rerank answer covers every input the request carried (one embedding, or
/// one ranked document, per input; a rerank plan's `top_n` asks for that many at most), or it
/// is not whole.
fn check_batch_answer(
    template: &RequestTemplate,
    request: &ScheduledRequest,
    exchange: &mut Exchange,
) {
    if request.batch > 0 && exchange.error.is_none() {
        // One embedding (or one ranked document) per input, or the answer is not whole.
        // (A rerank plan's `top_n` asks for that many results at most.)
        let asked = template
            .options
            .extra
            .get("top_n")
            .and_then(serde_json::Value::as_u64)
            .map_or(request.batch as u64, |top| top.min(request.batch as u64));
        match exchange.inputs {
            Some(covered) if covered == asked => {}
            covered => exchange.fail(
                ErrorClass::Malformed,
                format!(
                    "the request carried {asked} inputs and the answer covers {}",
                    covered.map_or("none".to_string(), |n| n.to_string())
                ),
            ),
        }
    }
}

/// A request in flight: records the request as the client's failure if its task died before
/// handing the record over; its ticket then leaves the in-flight counts.
struct InFlightGuard {
    ticket: InFlightTicket,
    /// (phase, request, intended send µs) until the record is handed over.
    pending: Option<(usize, ScheduledRequest, u64)>,
}

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        if let Some((phase, request, intended_send_us)) = self.pending.take() {
            if let Some(host) = &self.ticket.context.media_host {
                host.forget(phase, request.seq);
            }
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
                room: None,
            };
            let _ = self
                .ticket
                .context
                .records
                .send(Message::Finished(Box::new(finished)));
        }
    }
}

/// A 404 or 405 before the route ever answered means the target does not serve it (an API it
/// does not speak, or a model it does not have): the run is refused at once, naming the path,
/// instead of the whole schedule running into the same wall. A 404 after answers is a server's
/// error like any other, counted.
fn refuse_unserved_route(context: &Context, template: &RequestTemplate, exchange: &Exchange) {
    use Ordering::Relaxed;
    let Some(status) = exchange.http_status else {
        return;
    };
    let answered = &template.route_answered;
    if (200..300).contains(&status) {
        if !answered.load(Relaxed) {
            answered.store(true, Relaxed);
        }
    } else if matches!(status, 404 | 405) && !answered.load(Relaxed) {
        let said = exchange
            .error
            .as_ref()
            .map_or_else(|| format!("HTTP {status}"), |(_, detail)| detail.clone());
        // The path only: the URL's query may hold a key.
        context.stop.refuse(format!(
            "the target answered the first request to POST {} with {said}: it does not serve the \
             {} API there (or not this model); set `api` to one it speaks (chat, completions, \
             responses, messages), or point the target at a server that speaks it",
            template.url.path(),
            template.dialect.name()
        ));
    }
}

/// How long to wait before sending a throttled request again, if it is to be: the plan retries
/// (and has attempts left), the server turned it away before any token, and it asked for no
/// longer than the plan waits. The wait is the server's (`retry-after-ms`, `Retry-After`), else
/// 0.5 s doubling with each attempt, as SDKs back off.
fn retry_wait(policy: OnThrottle, exchange: &Exchange, retried: usize) -> Option<Duration> {
    let OnThrottle::Retry { attempts, max_wait } = policy else {
        return None;
    };
    let (class, _) = exchange.error.as_ref()?;
    if !class.throttled() || !exchange.chunk_times.is_empty() || retried + 1 >= attempts as usize {
        return None;
    }
    let asked = exchange
        .rate_limit
        .as_ref()
        .and_then(|limit| limit.retry_after_ms)
        .map(Duration::from_millis);
    let backoff = || Duration::from_millis(500).saturating_mul(1 << retried.min(16));
    let wait = asked.unwrap_or_else(backoff);
    (wait <= max_wait).then_some(wait)
}
