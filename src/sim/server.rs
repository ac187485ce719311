//! The simulator's HTTP server (hyper, HTTP/1.1, loopback).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{combinators::BoxBody, BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};

use super::stream::{chunk, error_body, full_response, generate, usage, SimRequest};
use crate::plan::SimSettings;
use crate::timer::PreciseTimer;
use crate::tokens::Tokenizer;

type Body = BoxBody<Bytes, Infallible>;

struct Shared {
    settings: SimSettings,
    tokenizer: Arc<Tokenizer>,
    requests: AtomicU64,
    /// Delays are the truth tests check the client against: they must land on time.
    timer: PreciseTimer,
}

/// A running simulator; dropping it (or calling [`SimServer::shutdown`]) stops accepting.
pub struct SimServer {
    pub addr: SocketAddr,
    stop: watch::Sender<bool>,
}

impl SimServer {
    /// The base URL clients use, e.g. `http://127.0.0.1:40123/v1`.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    pub fn shutdown(&self) {
        let _ = self.stop.send(true);
    }
}

impl Drop for SimServer {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Binds `addr` (use port 0 for any free port) and serves until shut down.
pub async fn serve(
    addr: SocketAddr,
    settings: SimSettings,
    tokenizer: Arc<Tokenizer>,
) -> std::io::Result<SimServer> {
    let listener = TcpListener::bind(addr).await?;
    let addr = listener.local_addr()?;
    let (stop, mut stopped) = watch::channel(false);
    let shared = Arc::new(Shared {
        settings,
        tokenizer,
        requests: AtomicU64::new(0),
        timer: PreciseTimer::start()?,
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
    Ok(SimServer { addr, stop })
}

fn json_response(status: StatusCode, value: serde_json::Value) -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::from(value.to_string())).boxed());
    *response.status_mut() = status;
    response.headers_mut().insert(
        "content-type",
        hyper::header::HeaderValue::from_static("application/json"),
    );
    response
}

async fn handle(req: Request<Incoming>, shared: Arc<Shared>) -> Result<Response<Body>, Infallible> {
    let arrived = tokio::time::Instant::now();
    let path = req.uri().path().to_string();
    let chat = match (req.method(), path.as_str()) {
        (&Method::POST, "/v1/chat/completions") => true,
        (&Method::POST, "/v1/completions") => false,
        (&Method::GET, "/v1/models") => {
            return Ok(json_response(
                StatusCode::OK,
                serde_json::json!({"object": "list", "data": [{"id": "llmload-sim", "object": "model"}]}),
            ))
        }
        (&Method::GET, "/health") => {
            return Ok(json_response(
                StatusCode::OK,
                serde_json::json!({"status": "ok"}),
            ))
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
    let body = match req.into_body().collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(_) => {
            return Ok(json_response(
                StatusCode::BAD_REQUEST,
                error_body("unreadable body", "invalid_request_error"),
            ))
        }
    };
    let request = match SimRequest::parse(&body, chat, &shared.tokenizer) {
        Ok(request) => request,
        Err(message) => {
            return Ok(json_response(
                StatusCode::BAD_REQUEST,
                error_body(&message, "invalid_request_error"),
            ))
        }
    };
    let number = shared.requests.fetch_add(1, Ordering::Relaxed);
    let id = format!("sim-{number}");
    let generation = generate(
        &shared.settings,
        &shared.tokenizer,
        &request,
        crate::planner::mix64(shared.settings.seed ^ number),
    );
    if !request.stream {
        let due = generation.chunks.last().map(|c| c.0).unwrap_or_default();
        shared.timer.sleep_until(arrived + due).await;
        let text: String = generation.chunks.iter().map(|c| c.1.as_str()).collect();
        return Ok(json_response(
            StatusCode::OK,
            full_response(&request, &id, &text, generation.completion_tokens),
        ));
    }

    let (tx, rx) = mpsc::channel::<Bytes>(16);
    let timer = shared.timer.clone();
    tokio::spawn(async move {
        let send = |value: serde_json::Value| Bytes::from(format!("data: {value}\n\n"));
        if request.chat
            && tx
                .send(send(chunk(&request, &id, None, true, None)))
                .await
                .is_err()
        {
            return;
        }
        // Real servers send keep-alive comments; a client must skip them.
        if tx.send(Bytes::from_static(b": ping\n\n")).await.is_err() {
            return;
        }
        let mut completion = 0;
        for (due, text, tokens) in &generation.chunks {
            timer.sleep_until(arrived + *due).await;
            completion += tokens;
            let mut value = chunk(&request, &id, Some(text), false, None);
            if request.continuous_usage {
                value["usage"] = usage(request.prompt_tokens, completion);
            }
            if tx.send(send(value)).await.is_err() {
                return;
            }
        }
        let mut finish = chunk(&request, &id, None, false, Some("length"));
        if request.continuous_usage {
            finish["usage"] = usage(request.prompt_tokens, completion);
        }
        let _ = tx.send(send(finish)).await;
        if request.include_usage {
            let value = serde_json::json!({"id": id, "object": "chat.completion.chunk", "created": 0,
                "model": request.model, "choices": [], "usage": usage(request.prompt_tokens, completion)});
            let _ = tx.send(send(value)).await;
        }
        let _ = tx.send(Bytes::from_static(b"data: [DONE]\n\n")).await;
    });
    let frames = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|bytes| (Ok::<_, Infallible>(Frame::data(bytes)), rx))
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
    Ok(response)
}
