//! Serves the registry's metrics over HTTP (`GET /metrics`, OpenMetrics text) from a thread and
//! runtime of its own: a scrape renders the counts under the registry's lock for a moment, and
//! nothing a scraper does (connect and stall, scrape in a loop) reaches the run's runtime.
//!
//! Not for: what is counted (`registry.rs`).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper_util::rt::TokioIo;

use super::background::Background;
use super::Registry;

/// The most scrapers served at once: Prometheus opens one connection per target.
const CONNECTIONS: usize = 16;
/// How long a scraper may take to send its request's head.
const HEADER_READ: Duration = Duration::from_secs(5);

/// The metrics endpoint, served until it is dropped.
pub struct MetricsServer {
    addr: SocketAddr,
    /// Served until it is dropped.
    _serving: Background,
}

impl MetricsServer {
    /// Listens on `addr` (port 0 takes a free one) and serves `registry`'s metrics.
    pub fn start(addr: SocketAddr, registry: Arc<Registry>) -> std::io::Result<MetricsServer> {
        let listener = std::net::TcpListener::bind(addr)?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let serving = Background::start("llmload-metrics", move |mut stopped| async move {
            let Ok(listener) = tokio::net::TcpListener::from_std(listener) else {
                return;
            };
            let room = Arc::new(tokio::sync::Semaphore::new(CONNECTIONS));
            loop {
                let permit = tokio::select! {
                    permit = room.clone().acquire_owned() => permit,
                    _ = &mut stopped => break,
                };
                let Ok(permit) = permit else { break };
                tokio::select! {
                    accepted = listener.accept() => {
                        let Ok((stream, _)) = accepted else { continue };
                        tokio::spawn(serve_one(stream, registry.clone(), permit));
                    }
                    _ = &mut stopped => break,
                }
            }
        })?;
        Ok(MetricsServer {
            addr,
            _serving: serving,
        })
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

/// One scraper's connection.
async fn serve_one(
    stream: tokio::net::TcpStream,
    registry: Arc<Registry>,
    permit: tokio::sync::OwnedSemaphorePermit,
) {
    let service = hyper::service::service_fn(move |request| {
        let answer = answer(&registry, &request);
        async move { Ok::<_, std::convert::Infallible>(answer) }
    });
    let _ = hyper::server::conn::http1::Builder::new()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(HEADER_READ)
        .serve_connection(TokioIo::new(stream), service)
        .await;
    drop(permit);
}

/// `GET /metrics` (or `/`): the metrics; anything else 404.
fn answer<B>(registry: &Registry, request: &hyper::Request<B>) -> hyper::Response<Full<Bytes>> {
    let served =
        request.method() == hyper::Method::GET && matches!(request.uri().path(), "/metrics" | "/");
    let (status, content_type, body) = if served {
        (
            hyper::StatusCode::OK,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
            Bytes::from(registry.render()),
        )
    } else {
        (
            hyper::StatusCode::NOT_FOUND,
            "text/plain; charset=utf-8",
            Bytes::from_static(b"llmload serves its metrics at /metrics\n"),
        )
    };
    let mut response = hyper::Response::new(Full::new(body));
    *response.status_mut() = status;
    if let Ok(value) = hyper::header::HeaderValue::from_str(content_type) {
        response
            .headers_mut()
            .insert(hyper::header::CONTENT_TYPE, value);
    }
    response
}
