//! The simulator's HTTP server (hyper, HTTP/1.1, loopback).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{combinators::BoxBody, BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::time::Instant;

use super::engine::Engine;
use super::limits::{Limiter, Style};
use super::metrics::SimMetrics;
use super::stream::SimRequest;
use super::wire::Wire;
use super::writes::{RequestWrites, WriteLog};
use crate::plan::SimSettings;
use crate::timer::PreciseTimer;
use crate::tokens::Tokenizer;

pub(super) type Body = BoxBody<Bytes, std::io::Error>;

/// Request bodies up to this size are parsed on the runtime's thread; larger ones on the
/// blocking pool.
const INLINE_PARSE_BYTES: usize = 2048;

pub(super) struct Shared {
    pub(super) settings: SimSettings,
    /// The key it requires on `/v1/*` (from `api-key env=`), if any: as a bearer token, or in
    /// `x-api-key` (Anthropic's way).
    pub(super) required_key: Option<String>,
    pub(super) tokenizer: Arc<Tokenizer>,
    pub(super) requests: AtomicU64,
    /// Delays are the truth tests check the client against: they must land on time.
    pub(super) timer: PreciseTimer,
    pub(super) engine: Option<Engine>,
    pub(super) metrics: Arc<SimMetrics>,
    pub(super) writes: Option<Arc<WriteLog>>,
    /// The hosted API's rate limits it enforces, if any.
    pub(super) limiter: Option<Limiter>,
}

/// How the server runs, beside what it simulates.
#[derive(Debug, Clone, Default)]
pub struct ServeOptions {
    /// Keep the write time of every token of every streamed request (see [`super::writes`]).
    pub record_writes: bool,
    /// Serve `https://` with this configuration ([`super::tls_server_config`]).
    pub tls: Option<Arc<rustls::ServerConfig>>,
}

/// A running simulator; dropping it (or calling [`SimServer::shutdown`]) stops accepting.
pub struct SimServer {
    /// The address it listens on.
    pub addr: SocketAddr,
    /// Whether it serves `https://`.
    tls: bool,
    stop: watch::Sender<bool>,
    metrics: Arc<SimMetrics>,
    writes: Option<Arc<WriteLog>>,
}

impl SimServer {
    /// The base URL clients use, e.g. `http://127.0.0.1:40123/v1`.
    pub fn base_url(&self) -> String {
        let scheme = if self.tls { "https" } else { "http" };
        format!("{scheme}://{}/v1", self.addr)
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
    let tls = options.tls.map(tokio_rustls::TlsAcceptor::from);
    let serves_tls = tls.is_some();
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
                    let tls = tls.clone();
                    tokio::spawn(async move {
                        let service = service_fn(move |req| handle(req, shared.clone()));
                        // HTTP/1.1, or HTTP/2 when the client opens with its preface (h2c
                        // with prior knowledge) or agreed to it by ALPN.
                        let http = hyper_util::server::conn::auto::Builder::new(
                            hyper_util::rt::TokioExecutor::new(),
                        );
                        let _ = match tls {
                            None => http.serve_connection(TokioIo::new(socket), service).await,
                            // A handshake that fails (a client that does not trust the
                            // certificate) ends the connection, as any server's does.
                            Some(tls) => match tls.accept(socket).await {
                                Ok(socket) => {
                                    http.serve_connection(TokioIo::new(socket), service).await
                                }
                                Err(_) => Ok(()),
                            },
                        };
                    });
                }
            }
        }
    });
    Ok(SimServer {
        addr,
        tls: serves_tls,
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
pub(super) fn rejected(wire: Wire, rejection: &super::engine::Rejection) -> Response<Body> {
    let status = StatusCode::from_u16(rejection.status).unwrap_or(StatusCode::SERVICE_UNAVAILABLE);
    json_response(status, wire.error_body(&rejection.message, rejection.kind))
}

pub(super) fn json_response(status: StatusCode, value: serde_json::Value) -> Response<Body> {
    full(status, "application/json", value.to_string())
}

/// One request, through the stages every API's request passes: the key checked, the route
/// found (the few GET and maintenance routes answered here), the body read and parsed, the
/// model checked, the hosted API's limits applied, then the answer (`answer`).
async fn handle(req: Request<Incoming>, shared: Arc<Shared>) -> Result<Response<Body>, Infallible> {
    let arrived = Instant::now();
    if let Some(refusal) = unauthorized(&req, &shared) {
        return Ok(refusal);
    }
    // Kept for the hosted API's limits, which are per key.
    let key = shared
        .limiter
        .as_ref()
        .and_then(|_| presented_key(&req).map(str::to_string));
    let wire = match route(&req, &shared) {
        Ok(wire) => wire,
        Err(answered) => return Ok(*answered),
    };
    let (request, request_ids) = match read(req, wire, &shared).await {
        Ok(read) => read,
        Err(refusal) => return Ok(refusal),
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
    let key = key.as_deref();
    Ok(within_limits(shared, wire, request, arrived, request_ids, key).await)
}

/// As vLLM's --api-key: every /v1 route (and an Azure deployment's) wants the key, as
/// `Authorization: Bearer`, Anthropic's `x-api-key` or Azure's `api-key`; /health, /metrics,
/// /version do not.
fn unauthorized(req: &Request<Incoming>, shared: &Shared) -> Option<Response<Body>> {
    let required = shared.required_key.as_ref()?;
    let given = presented_key(req);
    let path = req.uri().path();
    let guarded = path.starts_with("/v1/") || path.starts_with(AZURE_DEPLOYMENTS);
    (guarded && given != Some(required.as_str())).then(|| {
        json_response(
            StatusCode::UNAUTHORIZED,
            serde_json::json!({"error": "Unauthorized"}),
        )
    })
}

/// The key a request presents: `Authorization: Bearer`, Anthropic's `x-api-key` or Azure's
/// `api-key`.
fn presented_key(req: &Request<Incoming>) -> Option<&str> {
    let header = |name| req.headers().get(name).and_then(|v| v.to_str().ok());
    let bearer =
        header(hyper::header::AUTHORIZATION.as_str()).and_then(|v| v.strip_prefix("Bearer "));
    bearer
        .or_else(|| header("x-api-key"))
        .or_else(|| header("api-key"))
}

/// Where Azure OpenAI serves a deployment's endpoints: `/openai/deployments/NAME/chat/completions`.
const AZURE_DEPLOYMENTS: &str = "/openai/deployments/";

/// An Azure deployment's endpoint as the `/v1` one it is (`/v1/chat/completions`), and whether
/// the request names the `api-version` Azure requires; `None` for any other path.
fn azure_endpoint(path: &str, query: Option<&str>) -> Option<(String, bool)> {
    let (_deployment, endpoint) = path.strip_prefix(AZURE_DEPLOYMENTS)?.split_once('/')?;
    let versioned = query.is_some_and(|q| {
        q.split('&').any(|pair| {
            pair.strip_prefix("api-version=")
                .is_some_and(|v| !v.is_empty())
        })
    });
    Some((format!("/v1/{endpoint}"), versioned))
}

/// The API a POST speaks, by its path; `Err` with the answer of any other route (the model
/// list, health, version, metrics, the prefix cache's reset, the write log, or 404).
fn route(req: &Request<Incoming>, shared: &Shared) -> Result<Wire, Box<Response<Body>>> {
    let path = req.uri().path();
    if req.method() == Method::POST {
        if let Some(wire) = Wire::from_path(path) {
            return Ok(wire);
        }
        // As Azure OpenAI: a deployment's endpoint, refused without its api-version.
        match azure_endpoint(path, req.uri().query()) {
            Some((_, false)) => {
                return Err(Box::new(json_response(
                    StatusCode::NOT_FOUND,
                    serde_json::json!({"error": {
                        "code": "404",
                        "message": "Resource not found (the api-version query parameter is required)",
                    }}),
                )))
            }
            Some((endpoint, true)) => {
                if let Some(wire) = Wire::from_path(&endpoint) {
                    return Ok(wire);
                }
            }
            None => {}
        }
    }
    Err(Box::new(match (req.method(), path) {
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
            json_response(
                StatusCode::OK,
                serde_json::json!({"object": "list", "data": data}),
            )
        }
        (&Method::GET, "/health") => {
            json_response(StatusCode::OK, serde_json::json!({"status": "ok"}))
        }
        // As vLLM's (in its dev mode): the prefix cache emptied; 404 without an engine that
        // keeps one.
        (&Method::POST, "/reset_prefix_cache") => {
            let reset = shared
                .engine
                .as_ref()
                .is_some_and(|engine| engine.reset_prefix_cache());
            if reset {
                full(StatusCode::OK, "text/plain", "OK".to_string())
            } else {
                json_response(
                    StatusCode::NOT_FOUND,
                    serde_json::json!({"detail": "Not Found"}),
                )
            }
        }
        // As vLLM's: what a report shows as the server's version.
        (&Method::GET, "/version") => json_response(
            StatusCode::OK,
            serde_json::json!({"version": format!("llmload-sim {}", env!("CARGO_PKG_VERSION"))}),
        ),
        (&Method::GET, "/metrics") => full(
            StatusCode::OK,
            "text/plain; version=0.0.4",
            shared.metrics.render(),
        ),
        (&Method::GET, "/llmload/writes") => match &shared.writes {
            Some(log) => full(StatusCode::OK, "application/x-ndjson", log.to_json_lines()),
            None => json_response(
                StatusCode::NOT_FOUND,
                Wire::Chat.error_body(
                    "write times are not recorded: start the simulator with --record-writes",
                    "not_found_error",
                ),
            ),
        },
        _ => json_response(
            StatusCode::NOT_FOUND,
            Wire::Chat.error_body(
                &format!("no route for {} {path}", req.method()),
                "not_found_error",
            ),
        ),
    }))
}

/// The request's body, read and parsed in its API's shape, and the ids it came with
/// (`x-request-id`, `traceparent`) for the write log; `Err` with a 400 when it cannot be.
async fn read(
    req: Request<Incoming>,
    wire: Wire,
    shared: &Shared,
) -> Result<(SimRequest, (Option<String>, Option<String>)), Response<Body>> {
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
            return Err(json_response(
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
        .unwrap_or(Err(super::stream::BadRequest::Unread))
    } else {
        SimRequest::parse(&body, wire, &shared.tokenizer, prefix_block)
    };
    match parsed {
        Ok(request) => Ok((request, request_ids)),
        Err(message) => Err(json_response(
            StatusCode::BAD_REQUEST,
            wire.error_body(&message.to_string(), "invalid_request_error"),
        )),
    }
}

/// The answer, when the hosted API's limits (if any) admit the request; else a 429. Either way
/// with the limits' headers, as hosted APIs send them.
async fn within_limits(
    shared: Arc<Shared>,
    wire: Wire,
    request: SimRequest,
    arrived: Instant,
    request_ids: (Option<String>, Option<String>),
    key: Option<&str>,
) -> Response<Body> {
    // A hosted API's limits are checked before any work: a refusal costs the server nothing.
    let Some(limiter) = &shared.limiter else {
        return super::answer::answer(shared, wire, request, arrived, request_ids).await;
    };
    let cost = (request.prompt_tokens + request.max_tokens) as u64;
    let admission = limiter.admit(key, cost, Instant::now());
    let style = match wire {
        Wire::Messages => Style::Anthropic,
        Wire::Chat | Wire::Completions | Wire::Responses | Wire::Embeddings | Wire::Rerank => {
            Style::OpenAi
        }
    };
    let mut response = match admission.refused {
        None => super::answer::answer(shared, wire, request, arrived, request_ids).await,
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
    response
}
