//! The simulator's HTTP server (hyper, HTTP/1.1, loopback).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{combinators::BoxBody, BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use super::engine::{Engine, EngineEvent};
use super::limits::{Limiter, Style};
use super::metrics::SimMetrics;
use super::stream::{error_body, full_response, generate, json_fragment, SimRequest};
use super::wire::{batch_answer, full_answer, Counts, Encoder, Finish, Frame as SseFrame, Wire};
use super::writes::{RequestWriter, RequestWrites, WriteLog};
use crate::plan::SimSettings;
use crate::timer::PreciseTimer;
use crate::tokens::Tokenizer;

type Body = BoxBody<Bytes, std::io::Error>;

/// Request bodies up to this size are parsed on the runtime's thread; larger ones on the
/// blocking pool.
const INLINE_PARSE_BYTES: usize = 2048;

struct Shared {
    settings: SimSettings,
    /// The key it requires on `/v1/*` (from `api-key env=`), if any: as a bearer token, or in
    /// `x-api-key` (Anthropic's way).
    required_key: Option<String>,
    tokenizer: Arc<Tokenizer>,
    requests: AtomicU64,
    /// Delays are the truth tests check the client against: they must land on time.
    timer: PreciseTimer,
    engine: Option<Engine>,
    metrics: Arc<SimMetrics>,
    writes: Option<Arc<WriteLog>>,
    /// The hosted API's rate limits it enforces, if any.
    limiter: Option<Limiter>,
}

/// How the server runs, beside what it simulates.
#[derive(Debug, Clone, Copy, Default)]
pub struct ServeOptions {
    /// Keep the write time of every token of every streamed request (see [`super::writes`]).
    pub record_writes: bool,
}

/// A running simulator; dropping it (or calling [`SimServer::shutdown`]) stops accepting.
pub struct SimServer {
    /// The address it listens on.
    pub addr: SocketAddr,
    stop: watch::Sender<bool>,
    metrics: Arc<SimMetrics>,
    writes: Option<Arc<WriteLog>>,
}

impl SimServer {
    /// The base URL clients use, e.g. `http://127.0.0.1:40123/v1`.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// Stops accepting connections.
    pub fn shutdown(&self) {
        let _ = self.stop.send(true);
    }

    /// Preemptions so far (engine mode).
    pub fn preemptions(&self) -> u64 {
        self.metrics.preemptions()
    }

    /// The write times recorded so far; `None` unless the server records them.
    pub fn writes(&self) -> Option<Vec<RequestWrites>> {
        self.writes.as_ref().map(|log| log.snapshot())
    }
}

impl Drop for SimServer {
    fn drop(&mut self) {
        self.shutdown();
    }
}

pub use crate::threads::SIM_THREAD_PREFIX;
const SIM_THREAD_NAME: &str = "llmload-sim";
const SIM_THREAD_NAME_TIMER: &str = "llmload-sim-tm";

/// A simulator served in this process on a thread (and runtime) of its own, so that the
/// client's CPU time, measured for the whole process, can leave its work out (threads named
/// [`SIM_THREAD_PREFIX`]…), and so that a busy client does not delay the simulator's writes,
/// which tests check the client against. Stops with its thread when dropped.
pub struct EmbeddedSim {
    server: SimServer,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl std::ops::Deref for EmbeddedSim {
    type Target = SimServer;
    fn deref(&self) -> &SimServer {
        &self.server
    }
}

impl Drop for EmbeddedSim {
    fn drop(&mut self) {
        self.server.shutdown();
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// [`serve_with`] on a thread and runtime of its own (see [`EmbeddedSim`]).
pub fn serve_embedded(
    addr: SocketAddr,
    settings: SimSettings,
    tokenizer: Arc<Tokenizer>,
    options: ServeOptions,
) -> std::io::Result<EmbeddedSim> {
    let (started, ready) = std::sync::mpsc::channel();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let thread = std::thread::Builder::new()
        .name(SIM_THREAD_NAME.into())
        .spawn(move || {
            let runtime = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(runtime) => runtime,
                Err(e) => {
                    let _ = started.send(Err(e));
                    return;
                }
            };
            runtime.block_on(async move {
                let served = serve_with(addr, settings, tokenizer, options).await;
                let serving = served.is_ok();
                let _ = started.send(served);
                if serving {
                    let _ = stopped.await;
                }
            });
        })?;
    let server = ready
        .recv()
        .map_err(|_| std::io::Error::other("the simulator's thread ended before it served"))??;
    Ok(EmbeddedSim {
        server,
        stop: Some(stop),
        thread: Some(thread),
    })
}

/// Binds `addr` (use port 0 for any free port) and serves until shut down.
pub async fn serve(
    addr: SocketAddr,
    settings: SimSettings,
    tokenizer: Arc<Tokenizer>,
) -> std::io::Result<SimServer> {
    serve_with(addr, settings, tokenizer, ServeOptions::default()).await
}

/// A listening socket with a backlog of 4,096 (the kernel caps it at `net.core.somaxconn`), as
/// vLLM's server (uvicorn: 2,048) has. The default, 128, overflows when a client opens hundreds
/// of connections at once: the kernel drops the SYNs past it and the client retries a second
/// later, a one-second TTFT that would be the simulator's, not the engine's it models.
fn listen(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(4096)
}

/// [`serve`], with options.
pub async fn serve_with(
    addr: SocketAddr,
    settings: SimSettings,
    tokenizer: Arc<Tokenizer>,
    options: ServeOptions,
) -> std::io::Result<SimServer> {
    let listener = listen(addr)?;
    let addr = listener.local_addr()?;
    let (stop, mut stopped) = watch::channel(false);
    let timer = PreciseTimer::start_named(SIM_THREAD_NAME_TIMER)?;
    let batch = settings.engine.as_ref().map_or(1, |e| e.max_seqs as usize);
    let metrics = Arc::new(SimMetrics::new("llmload-sim").with_gpus(settings.gpu.clone(), batch));
    if settings.engine.is_none() {
        metrics.without_engine();
    }
    let engine = settings
        .engine
        .clone()
        .map(|engine| Engine::start(engine, timer.clone(), metrics.clone()));
    let writes = options.record_writes.then(|| Arc::new(WriteLog::new()));
    let required_key = settings
        .api_key_env
        .as_ref()
        .map(|var| std::env::var(var).unwrap_or_default());
    let limiter = settings
        .rate_limit
        .map(|limits| Limiter::new(limits, Instant::now()));
    let shared = Arc::new(Shared {
        limiter,
        required_key,
        settings,
        tokenizer,
        requests: AtomicU64::new(0),
        timer,
        engine,
        metrics: metrics.clone(),
        writes: writes.clone(),
    });
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = stopped.changed() => break,
                accepted = listener.accept() => {
                    let Ok((socket, _)) = accepted else { continue };
                    let _ = socket.set_nodelay(true);
                    let shared = shared.clone();
                    tokio::spawn(async move {
                        let service = service_fn(move |req| handle(req, shared.clone()));
                        let _ = hyper::server::conn::http1::Builder::new()
                            .serve_connection(TokioIo::new(socket), service)
                            .await;
                    });
                }
            }
        }
    });
    Ok(SimServer {
        addr,
        stop,
        metrics,
        writes,
    })
}

fn full(status: StatusCode, content_type: &'static str, text: String) -> Response<Body> {
    let body = Full::new(Bytes::from(text))
        .map_err(|never: Infallible| match never {})
        .boxed();
    let mut response = Response::new(body);
    *response.status_mut() = status;
    response.headers_mut().insert(
        "content-type",
        hyper::header::HeaderValue::from_static(content_type),
    );
    response
}

/// The engine's refusal of a request (too long, cache full), in `wire`'s error shape.
fn rejected(wire: Wire, rejection: &super::engine::Rejection) -> Response<Body> {
    let status = StatusCode::from_u16(rejection.status).unwrap_or(StatusCode::SERVICE_UNAVAILABLE);
    json_response(status, wire.error_body(&rejection.message, rejection.kind))
}

fn json_response(status: StatusCode, value: serde_json::Value) -> Response<Body> {
    full(status, "application/json", value.to_string())
}

/// The faults one request gets, drawn from the simulator's seed and the request's number.
struct FaultPlan {
    status: Option<StatusCode>,
    header_delay: Option<Duration>,
    /// Cut the connection before this token (1-based).
    drop_at: Option<usize>,
    /// Send a malformed chunk in place of this token.
    malformed_at: Option<usize>,
    /// Stall this long before this token.
    stall: Option<(usize, Duration)>,
}

fn plan_faults(settings: &SimSettings, number: u64, max_tokens: usize) -> FaultPlan {
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
enum Tokens {
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
    async fn next(&mut self) -> Option<(String, usize)> {
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

async fn handle(req: Request<Incoming>, shared: Arc<Shared>) -> Result<Response<Body>, Infallible> {
    let arrived = Instant::now();
    let path = req.uri().path().to_string();
    // As vLLM's --api-key: every /v1 route wants the key; /health, /metrics, /version do not.
    if let Some(required) = &shared.required_key {
        let header = |name| req.headers().get(name).and_then(|v| v.to_str().ok());
        let bearer =
            header(hyper::header::AUTHORIZATION.as_str()).and_then(|v| v.strip_prefix("Bearer "));
        let given = bearer.or_else(|| header("x-api-key"));
        if path.starts_with("/v1/") && given != Some(required.as_str()) {
            return Ok(json_response(
                StatusCode::UNAUTHORIZED,
                serde_json::json!({"error": "Unauthorized"}),
            ));
        }
    }
    let wire = match (req.method(), path.as_str()) {
        (&Method::POST, route) if Wire::from_path(route).is_some() => {
            Wire::from_path(route).unwrap_or(Wire::Chat)
        }
        (&Method::GET, "/v1/models") => {
            // Those it serves; none when it answers for any model. With an engine model, its
            // context as vLLM lists it (`max_model_len`).
            let context = shared.settings.engine.as_ref().map(|e| e.max_model_len);
            let data: Vec<serde_json::Value> = shared
                .settings
                .models
                .iter()
                .map(|id| {
                    let mut model =
                        serde_json::json!({"id": id, "object": "model", "owned_by": "llmload-sim"});
                    if let Some(context) = context {
                        model["max_model_len"] = context.into();
                    }
                    model
                })
                .collect();
            return Ok(json_response(
                StatusCode::OK,
                serde_json::json!({"object": "list", "data": data}),
            ));
        }
        (&Method::GET, "/health") => {
            return Ok(json_response(
                StatusCode::OK,
                serde_json::json!({"status": "ok"}),
            ))
        }
        // As vLLM's (in its dev mode): the prefix cache emptied; 404 without an engine that
        // keeps one.
        (&Method::POST, "/reset_prefix_cache") => {
            let reset = shared
                .engine
                .as_ref()
                .is_some_and(|engine| engine.reset_prefix_cache());
            return Ok(if reset {
                full(StatusCode::OK, "text/plain", "OK".to_string())
            } else {
                json_response(
                    StatusCode::NOT_FOUND,
                    serde_json::json!({"detail": "Not Found"}),
                )
            });
        }
        // As vLLM's: what a report shows as the server's version.
        (&Method::GET, "/version") => {
            return Ok(json_response(
                StatusCode::OK,
                serde_json::json!({"version": format!("llmload-sim {}", env!("CARGO_PKG_VERSION"))}),
            ))
        }
        (&Method::GET, "/metrics") => {
            return Ok(full(
                StatusCode::OK,
                "text/plain; version=0.0.4",
                shared.metrics.render(),
            ))
        }
        (&Method::GET, "/llmload/writes") => {
            return Ok(match &shared.writes {
                Some(log) => full(StatusCode::OK, "application/x-ndjson", log.to_json_lines()),
                None => json_response(
                    StatusCode::NOT_FOUND,
                    error_body(
                        "write times are not recorded: start the simulator with --record-writes",
                        "not_found_error",
                    ),
                ),
            })
        }
        _ => {
            return Ok(json_response(
                StatusCode::NOT_FOUND,
                error_body(
                    &format!("no route for {} {path}", req.method()),
                    "not_found_error",
                ),
            ))
        }
    };
    let header = |name: &str| {
        req.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    let request_ids = (header("x-request-id"), header("traceparent"));
    let body = match req.into_body().collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(_) => {
            return Ok(json_response(
                StatusCode::BAD_REQUEST,
                wire.error_body("unreadable body", "invalid_request_error"),
            ))
        }
    };
    // Counting a long prompt's tokens takes a while: off the runtime's threads, so that other
    // connections are read (and their arrival times taken) meanwhile, as a real server's HTTP
    // front end does while its tokenizer works.
    // Only the engine model keeps a prefix cache.
    let prefix_block = shared
        .settings
        .engine
        .as_ref()
        .filter(|engine| engine.prefix_cache && shared.engine.is_some())
        .map(|engine| engine.block_size);
    let parsed = if body.len() > INLINE_PARSE_BYTES {
        let tokenizer = shared.tokenizer.clone();
        tokio::task::spawn_blocking(move || {
            SimRequest::parse(&body, wire, &tokenizer, prefix_block)
        })
        .await
        .unwrap_or_else(|_| Err("the request could not be read".into()))
    } else {
        SimRequest::parse(&body, wire, &shared.tokenizer, prefix_block)
    };
    let request = match parsed {
        Ok(request) => request,
        Err(message) => {
            return Ok(json_response(
                StatusCode::BAD_REQUEST,
                wire.error_body(&message, "invalid_request_error"),
            ))
        }
    };
    if !shared.settings.models.is_empty() && !shared.settings.models.contains(&request.model) {
        return Ok(json_response(
            StatusCode::NOT_FOUND,
            wire.error_body(
                &format!("The model `{}` does not exist.", request.model),
                "NotFoundError",
            ),
        ));
    }
    // A hosted API's limits are checked before any work: a refusal costs the server nothing.
    let Some(limiter) = &shared.limiter else {
        return Ok(answer(shared, wire, request, arrived, request_ids).await);
    };
    let cost = (request.prompt_tokens + request.max_tokens) as u64;
    let admission = limiter.admit(cost, Instant::now());
    let style = match wire {
        Wire::Messages => Style::Anthropic,
        Wire::Chat | Wire::Completions | Wire::Responses | Wire::Embeddings | Wire::Rerank => {
            Style::OpenAi
        }
    };
    let mut response = match admission.refused {
        None => answer(shared, wire, request, arrived, request_ids).await,
        Some(wait) => {
            let message = match wait {
                Some(_) => "Rate limit reached: please try again later.",
                None => "Request too large: it costs more than the whole rate limit.",
            };
            json_response(
                StatusCode::TOO_MANY_REQUESTS,
                wire.error_body(message, "RateLimitError"),
            )
        }
    };
    let headers = response.headers_mut();
    for (name, value) in admission.headers(style, chrono::Utc::now()) {
        if let (Ok(name), Ok(value)) = (
            hyper::header::HeaderName::from_bytes(name.as_bytes()),
            hyper::header::HeaderValue::from_str(&value),
        ) {
            headers.insert(name, value);
        }
    }
    Ok(response)
}

/// Answers a request the simulator took: its media encoded, its faults drawn, its tokens
/// generated (by the fixed schedule or the engine) and written in its API's shape.
async fn answer(
    shared: Arc<Shared>,
    wire: Wire,
    mut request: SimRequest,
    arrived: Instant,
    request_ids: (Option<String>, Option<String>),
) -> Response<Body> {
    // A vision model's media: prompt tokens by their size, and the encoder's time before the
    // first token (see `Vision`).
    // Its answer's schedule starts once the encoder is done; its TTFT, in the server's metrics
    // and write log, still counts from its arrival.
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
    let faults = plan_faults(&shared.settings, number, request.max_tokens);
    if let Some(delay) = faults.header_delay {
        shared.timer.sleep_until(arrived + delay).await;
    }
    if let Some(status) = faults.status {
        let kind = match status.as_u16() {
            429 => "RateLimitError",
            529 => "overloaded_error",
            _ => "InternalServerError",
        };
        return json_response(status, wire.error_body("injected fault", kind));
    }
    let request_seed = crate::seed::mix64(shared.settings.seed ^ number);
    // Without an engine every request is served at once: it is running until its answer ends
    // (or its client goes), and none waits.
    let serving = shared.engine.is_none().then(|| {
        shared.metrics.on_gpu_work(request.prompt_tokens as u64, 0);
        shared.metrics.serving()
    });
    let mut tokens = match &shared.engine {
        // Each input of a batch is a sequence of its own, prefilled by the engine beside the
        // others (and refused alone when it is longer than the model's context).
        Some(engine) if wire.batches() => {
            let mut sequences = Vec::with_capacity(request.input_sizes.len());
            for &size in &request.input_sizes {
                match engine.submit(size, Vec::new(), Default::default(), 1) {
                    Ok(events) => sequences.push(events),
                    Err(rejection) => return rejected(wire, &rejection),
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
                Err(rejection) => return rejected(wire, &rejection),
            }
        }
        None => {
            let generation = generate(&shared.settings, &shared.tokenizer, &request, request_seed);
            Tokens::Fixed {
                arrived: encoded,
                chunks: generation.chunks.into_iter(),
                timer: shared.timer.clone(),
            }
        }
    };
    // A reasoning model thinks first: its answers' first tokens are reasoning (a completion
    // has no place for them).
    let reasoning = shared
        .settings
        .reasoning
        .filter(|_| wire.reasons())
        .map(|r| (r.tokens as usize, r.field.as_str(), r.in_usage));
    if !request.stream {
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
        let said =
            reasoning.map(|(_, field, in_usage)| (field, thought.as_str(), thinking, in_usage));
        let body = match wire {
            Wire::Chat | Wire::Completions => full_response(&request, &id, &text, completion, said),
            Wire::Embeddings | Wire::Rerank => batch_answer(&request, &id, request_seed),
            Wire::Responses | Wire::Messages => full_answer(
                &request,
                &id,
                &text,
                reasoning.map(|_| thought.as_str()),
                Counts {
                    completion,
                    reasoning: reasoning.filter(|r| r.2).map(|_| thinking),
                },
            ),
        };
        return json_response(StatusCode::OK, body);
    }

    // Each frame says whether it carries tokens, so that its write time can be recorded.
    let (tx, rx) = mpsc::channel::<(Result<Bytes, std::io::Error>, bool)>(16);
    let metrics = shared.metrics.clone();
    let fixed = shared.engine.is_none();
    let timer = shared.timer.clone();
    tokio::spawn(async move {
        let _serving = serving;
        let mut encoder = Encoder::new(&request, &id);
        // Frames in order; each says whether it carries tokens. `false` when the client went.
        async fn send(
            tx: &mpsc::Sender<(Result<Bytes, std::io::Error>, bool)>,
            frames: Vec<SseFrame>,
            tokens: bool,
        ) -> bool {
            let last = frames.len().saturating_sub(1);
            for (i, frame) in frames.into_iter().enumerate() {
                // Only the frame with the token text is the token's write.
                let carries = tokens && i == last;
                if tx
                    .send((Ok(Bytes::from(frame.to_sse())), carries))
                    .await
                    .is_err()
                {
                    return false;
                }
            }
            true
        }
        if !send(&tx, encoder.start(), false).await {
            return;
        }
        // Real servers send keep-alive comments; a client must skip them.
        if tx
            .send((Ok(Bytes::from_static(b": ping\n\n")), false))
            .await
            .is_err()
        {
            return;
        }
        let mut completion = 0;
        let mut thinking = 0;
        let mut calling = false;
        let mut answering = false;
        // Usage says how many tokens were reasoning when the simulator is set to say it.
        let said = |thinking: usize| {
            reasoning
                .filter(|&(_, _, in_usage)| in_usage)
                .map(|_| thinking)
        };
        let mut last = None;
        while let Some((text, n)) = tokens.next().await {
            let token_number = completion + 1;
            if let Some((at, stall)) = faults.stall {
                if (token_number..token_number + n).contains(&at) {
                    timer.sleep_until(Instant::now() + stall).await;
                }
            }
            if faults
                .drop_at
                .is_some_and(|at| (token_number..token_number + n).contains(&at))
            {
                // An error frame makes hyper abort the connection mid-body.
                let _ = tx
                    .send((
                        Err(std::io::Error::other("injected connection drop")),
                        false,
                    ))
                    .await;
                return;
            }
            completion += n;
            if fixed {
                metrics.on_gpu_work(0, n as u64);
                let now = Instant::now();
                match last {
                    None => metrics.on_first_token(now.saturating_duration_since(arrived)),
                    Some(previous) => metrics.on_token(now.saturating_duration_since(previous)),
                }
                last = Some(now);
            }
            if faults
                .malformed_at
                .is_some_and(|at| (token_number..token_number + n).contains(&at))
            {
                if tx
                    .send((
                        Ok(Bytes::from_static(b"data: {\"choices\": [{\"delta\": \n\n")),
                        false,
                    ))
                    .await
                    .is_err()
                {
                    return;
                }
                continue;
            }
            let mut frames = match reasoning {
                Some((planned, field, _)) if completion - n < planned => {
                    thinking += n;
                    encoder.reasoning(&text, field)
                }
                // A request that offers tools is answered with a call, its arguments streamed
                // in fragments (a JSON object around the generated words).
                _ if request.tool.is_some() => {
                    let first = !calling;
                    calling = true;
                    let last = completion == request.max_tokens;
                    let fragment = match (first, last) {
                        (true, true) => format!("{{\"query\":\"{}\"}}", text.trim()),
                        (true, false) => format!("{{\"query\":\"{}", text.trim_start()),
                        (false, true) => format!("{text}\"}}"),
                        (false, false) => text.clone(),
                    };
                    encoder.tool_call(&fragment, first)
                }
                _ if request.json_answer => {
                    let first = !answering;
                    answering = true;
                    let last = completion == request.max_tokens;
                    encoder.text(&json_fragment(&text, first, last))
                }
                _ => encoder.text(&text),
            };
            if request.continuous_usage {
                if let Some(SseFrame::Data(value)) = frames.last_mut() {
                    value["usage"] = super::stream::usage(&request, completion, said(thinking));
                }
            }
            if !send(&tx, frames, true).await {
                return;
            }
        }
        if fixed {
            metrics.on_finished(arrived.elapsed());
        }
        let finish = if calling {
            Finish::ToolCalls
        } else {
            Finish::Length
        };
        let counts = Counts {
            completion,
            reasoning: said(thinking),
        };
        let _ = send(&tx, encoder.finish(finish, counts), false).await;
    });
    let source = FrameSource {
        writer: shared
            .writes
            .as_ref()
            .map(|log| (log.begin(request_ids, arrived.into_std()), log.clone())),
        rx,
    };
    let frames = futures_util::stream::unfold(source, |mut source| async move {
        let (item, tokens) = source.rx.recv().await?;
        if tokens {
            if let Some((writer, _)) = &mut source.writer {
                // Hyper pulls a frame when it is about to write it to the socket.
                writer.token_written(std::time::Instant::now());
            }
        }
        Some((item.map(Frame::data), source))
    });
    let mut response = Response::new(BodyExt::boxed(StreamBody::new(frames)));
    let headers = response.headers_mut();
    headers.insert(
        "content-type",
        hyper::header::HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(
        "cache-control",
        hyper::header::HeaderValue::from_static("no-cache"),
    );
    response
}

/// The frames of one streamed response, and the record of when its tokens were written.
struct FrameSource {
    rx: mpsc::Receiver<(Result<Bytes, std::io::Error>, bool)>,
    writer: Option<(RequestWriter, Arc<WriteLog>)>,
}

impl Drop for FrameSource {
    /// The stream ended, or the client went away: either way the request's writes are kept.
    fn drop(&mut self) {
        if let Some((writer, log)) = self.writer.take() {
            writer.finish(&log);
        }
    }
}
