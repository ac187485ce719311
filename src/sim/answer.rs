//! Answering one request the simulator took, as a pipeline of named stages: its media
//! encoded (`encode_media`), its number and id given (`number`), its injected faults
//! (`inject`), its tokens started by the fixed schedule or the engine (`start`), then its
//! answer written whole (`whole`) or streamed (`super::streaming`).
//!
//! What this is not: routing, authentication, reading the body and the hosted API's limits
//! (`server::handle`), or the APIs' shapes (`wire`, `stream`).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use hyper::{Response, StatusCode};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::engine::EngineEvent;
use super::server::{json_response, rejected, Body, Shared};
use super::stream::{generate, SimRequest};
use super::wire::{Counts, Whole, Wire};
use crate::plan::SimSettings;
use crate::timer::PreciseTimer;
use crate::tokens::Tokenizer;

/// A reasoning model's answer: how many of its first tokens are reasoning, the field that
/// streams them, and whether usage says how many.
pub(super) type Reasoning = Option<(usize, &'static str, bool)>;

/// Answers a request the simulator took: its media encoded, its faults drawn, its tokens
/// generated (by the fixed schedule or the engine) and written in its API's shape.
pub(super) async fn answer(
    shared: Arc<Shared>,
    wire: Wire,
    mut request: SimRequest,
    arrived: Instant,
    request_ids: (Option<String>, Option<String>),
) -> Response<Body> {
    let encoded = encode_media(&shared, &mut request, arrived).await;
    let (number, id) = number(&shared, wire, &mut request);
    let faults = plan_faults(&shared.settings, number, request.max_tokens);
    if let Some(refusal) = inject(&shared, wire, &faults, arrived).await {
        return refusal;
    }
    let request_seed = crate::seed::mix64(shared.settings.seed ^ number);
    // Without an engine every request is served at once: it is running until its answer ends
    // (or its client goes), and none waits.
    let serving = shared.engine.is_none().then(|| {
        shared.metrics.on_gpu_work(request.prompt_tokens as u64, 0);
        shared.metrics.serving()
    });
    let tokens = match start(&shared, wire, &mut request, request_seed, encoded) {
        Ok(tokens) => tokens,
        Err(refusal) => return *refusal,
    };
    // A reasoning model thinks first: its answers' first tokens are reasoning (a completion
    // has no place for them).
    let reasoning: Reasoning = shared
        .settings
        .reasoning
        .filter(|_| wire.reasons())
        .map(|r| (r.tokens as usize, r.field.as_str(), r.in_usage));
    if !request.stream {
        let id = id.as_str();
        return whole(
            &shared,
            &request,
            id,
            tokens,
            reasoning,
            arrived,
            request_seed,
        )
        .await;
    }
    let answer = super::streaming::Answer {
        shared,
        request,
        id,
        tokens,
        reasoning,
        faults,
        arrived,
        request_ids,
    };
    answer.stream(serving)
}

/// A vision model's media: prompt tokens by their size, and the encoder's time before the
/// first token (see `Vision`). Its answer's schedule starts once the encoder is done (the
/// instant returned); its TTFT, in the server's metrics and write log, still counts from its
/// arrival.
async fn encode_media(shared: &Shared, request: &mut SimRequest, arrived: Instant) -> Instant {
    let mut encoded = arrived;
    if let Some(vision) = &shared.settings.vision {
        let image_tokens: u64 = request
            .images
            .iter()
            .map(|&(w, h)| vision.image_tokens(w, h))
            .sum();
        let media_tokens = image_tokens + vision.audio_tokens(request.audio_seconds);
        request.prompt_tokens += media_tokens as usize;
        let delay = vision.encode * request.images.len() as u32
            + vision.per_token.mul_f64(media_tokens as f64);
        if !delay.is_zero() {
            encoded += delay;
            shared.timer.sleep_until(encoded).await;
        }
    }
    encoded
}

/// The request's number (which seeds its faults and words) and its answer's id; the model its
/// answer names, and whether it still calls a tool.
fn number(shared: &Shared, wire: Wire, request: &mut SimRequest) -> (u64, String) {
    if request.tool_rounds >= shared.settings.tool_rounds {
        // Enough tools called since the user spoke: this turn answers.
        request.tool = None;
    }
    let number = shared.requests.fetch_add(1, Ordering::Relaxed);
    // A gateway's routing, or an alias resolved: the answer names another model, in turn.
    let answer_as = &shared.settings.answer_as;
    if !answer_as.is_empty() {
        request.model = answer_as[(number % answer_as.len() as u64) as usize].clone();
    }
    // Shaped like vLLM's ids: a prefix and 32 hex digits.
    let id = format!(
        "{}-{:016x}{:016x}",
        wire.id_prefix(),
        crate::seed::mix64(number),
        number
    );
    (number, id)
}

/// The faults drawn for the request that act before its answer: headers held back, and a
/// refusal in place of the answer.
async fn inject(
    shared: &Shared,
    wire: Wire,
    faults: &FaultPlan,
    arrived: Instant,
) -> Option<Response<Body>> {
    if let Some(delay) = faults.header_delay {
        shared.timer.sleep_until(arrived + delay).await;
    }
    let status = faults.status?;
    let kind = match status.as_u16() {
        429 => "RateLimitError",
        529 => "overloaded_error",
        _ => "InternalServerError",
    };
    Some(json_response(
        status,
        wire.error_body("injected fault", kind),
    ))
}

/// Where the request's tokens will come from: the engine (refusing it when it cannot take it),
/// or the fixed schedule, which starts once its media are encoded.
fn start(
    shared: &Shared,
    wire: Wire,
    request: &mut SimRequest,
    request_seed: u64,
    encoded: Instant,
) -> Result<Tokens, Box<Response<Body>>> {
    Ok(match &shared.engine {
        // Each input of a batch is a sequence of its own, prefilled by the engine beside the
        // others (and refused alone when it is longer than the model's context).
        Some(engine) if wire.batches() => {
            let mut sequences = Vec::with_capacity(request.input_sizes.len());
            for &size in &request.input_sizes {
                match engine.submit(size, Vec::new(), Default::default(), 1) {
                    Ok(events) => sequences.push(events),
                    Err(rejection) => return Err(Box::new(rejected(wire, &rejection))),
                }
            }
            Tokens::Batch { sequences }
        }
        Some(engine) => {
            let blocks = std::mem::take(&mut request.blocks);
            let cached = request.cached.clone().unwrap_or_default();
            match engine.submit(
                request.prompt_tokens as u32,
                blocks,
                cached,
                request.max_tokens as u32,
            ) {
                Ok(events) => Tokens::Engine {
                    events,
                    words: shared.tokenizer.clone(),
                    rng: Box::new(ChaCha8Rng::seed_from_u64(request_seed)),
                },
                Err(rejection) => return Err(Box::new(rejected(wire, &rejection))),
            }
        }
        None => {
            let generation = generate(&shared.settings, &shared.tokenizer, request, request_seed);
            Tokens::Fixed {
                arrived: encoded,
                chunks: generation.chunks.into_iter(),
                timer: shared.timer.clone(),
            }
        }
    })
}

/// The answer of a request that did not ask to stream: every token generated, then one body.
async fn whole(
    shared: &Shared,
    request: &SimRequest,
    id: &str,
    mut tokens: Tokens,
    reasoning: Reasoning,
    arrived: Instant,
    request_seed: u64,
) -> Response<Body> {
    let (mut text, mut thought) = (String::new(), String::new());
    let (mut completion, mut thinking) = (0, 0);
    while let Some((piece, n)) = tokens.next().await {
        if shared.engine.is_none() {
            shared.metrics.on_gpu_work(0, n as u64);
        }
        match reasoning {
            Some((planned, _, _)) if completion < planned => {
                thought.push_str(&piece);
                thinking += n;
            }
            _ => text.push_str(&piece),
        }
        completion += n;
    }
    if shared.engine.is_none() {
        shared.metrics.on_finished(arrived.elapsed());
    }
    let answer = Whole {
        text: &text,
        thought: reasoning.map(|(_, field, _)| (field, thought.as_str())),
        counts: Counts {
            completion,
            reasoning: reasoning.filter(|r| r.2).map(|_| thinking),
        },
    };
    let body = super::wire::whole(request, id, answer, request_seed);
    json_response(StatusCode::OK, body)
}

/// The faults one request gets, drawn from the simulator's seed and the request's number.
pub(super) struct FaultPlan {
    status: Option<StatusCode>,
    header_delay: Option<Duration>,
    /// Cut the connection before this token (1-based).
    pub(super) drop_at: Option<usize>,
    /// Send a malformed chunk in place of this token.
    pub(super) malformed_at: Option<usize>,
    /// Stall this long before this token.
    pub(super) stall: Option<(usize, Duration)>,
}

pub(super) fn plan_faults(settings: &SimSettings, number: u64, max_tokens: usize) -> FaultPlan {
    let faults = &settings.faults;
    let mut rng = ChaCha8Rng::seed_from_u64(crate::seed::mix64(
        settings.seed ^ 0xFA17 ^ number.rotate_left(17),
    ));
    let mut hit = |rate: f64| rate > 0.0 && rng.random::<f64>() < rate;
    let status = if hit(faults.http_5xx) {
        Some(StatusCode::INTERNAL_SERVER_ERROR)
    } else if hit(faults.http_429) {
        Some(StatusCode::TOO_MANY_REQUESTS)
    } else if hit(faults.overloaded) {
        StatusCode::from_u16(529).ok()
    } else {
        None
    };
    let header_delay = faults.slow_headers.filter(|s| hit(s.rate)).map(|s| s.delay);
    let drop = hit(faults.drop_mid_stream);
    let malformed = hit(faults.malformed_chunk);
    let stall = faults
        .stall
        .filter(|s| hit(s.rate))
        .map(|s| ((s.at_token as usize).min(max_tokens), s.duration));
    let mut pick = |hit: bool| hit.then(|| rng.random_range(1..=max_tokens.max(1)));
    FaultPlan {
        status,
        header_delay,
        drop_at: pick(drop),
        malformed_at: pick(malformed),
        stall,
    }
}

/// Where a stream's tokens come from: a fixed schedule, or the engine.
pub(super) enum Tokens {
    Fixed {
        arrived: Instant,
        chunks: std::vec::IntoIter<(Duration, String, usize)>,
        timer: PreciseTimer,
    },
    Engine {
        events: mpsc::UnboundedReceiver<EngineEvent>,
        words: Arc<Tokenizer>,
        rng: Box<ChaCha8Rng>,
    },
    /// A batch's sequences (embeddings, rerank): no text, done when every one is.
    Batch {
        sequences: Vec<mpsc::UnboundedReceiver<EngineEvent>>,
    },
}

impl Tokens {
    /// The next chunk's text and token count; `None` at the end.
    pub(super) async fn next(&mut self) -> Option<(String, usize)> {
        match self {
            Tokens::Fixed {
                arrived,
                chunks,
                timer,
            } => {
                let (due, text, tokens) = chunks.next()?;
                timer.sleep_until(*arrived + due).await;
                Some((text, tokens))
            }
            Tokens::Batch { sequences } => {
                for sequence in sequences.iter_mut() {
                    while let Some(event) = sequence.recv().await {
                        if matches!(event, EngineEvent::Finished) {
                            break;
                        }
                    }
                }
                sequences.clear();
                None
            }
            Tokens::Engine { events, words, rng } => match events.recv().await? {
                EngineEvent::Token => {
                    let words = words.single_token_words();
                    Some((words[rng.random_range(0..words.len())].clone(), 1))
                }
                EngineEvent::Finished => None,
            },
        }
    }
}
