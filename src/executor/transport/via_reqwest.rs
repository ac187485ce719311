//! The general HTTP client for what the direct transport does not speak: `https://` (TLS),
//! and any URL while a proxy is configured. Its connector is wrapped to time the connections
//! it opens, and a task-local slot gives each request the setup time of the connection it
//! opened.

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use reqwest::Url;
use tokio::time::Instant;

use super::{
    certificate_hint, client_limit, head_facts, too_slow, Client, ConnectLog, Opened, Outgoing,
    Response, ResponseBody, SendError, SendFailure, WARM_TIMEOUT,
};
use crate::error::root_cause;
use crate::executor::template::RequestTemplate;

/// reqwest, with every connection it opens logged and timed.
pub(super) struct ViaReqwest {
    client: reqwest::Client,
}

/// reqwest could not make its client (its TLS backend could not start).
#[derive(Debug, thiserror::Error)]
#[error("cannot build the HTTP client: {0}")]
pub struct ClientBuildError(reqwest::Error);

impl ViaReqwest {
    pub(super) fn new(
        log: Arc<ConnectLog>,
        max_idle: usize,
        connect_timeout: Duration,
        tls: &crate::tls::Trust,
    ) -> Result<ViaReqwest, ClientBuildError> {
        // The run's one TLS configuration: the direct transport's too.
        let client = tls
            .reqwest_builder()
            .connector_layer(Timed { log })
            .tcp_nodelay(true)
            .pool_max_idle_per_host(max_idle)
            .connect_timeout(connect_timeout)
            .build()
            .map_err(ClientBuildError)?;
        Ok(ViaReqwest { client })
    }
}

impl Client for ViaReqwest {
    async fn send(&self, outgoing: Outgoing<'_>) -> Result<Response, SendError> {
        send_reqwest(&self.client, outgoing).await
    }

    /// reqwest's pool cannot be asked for a fresh connection: `count` requests are sent at
    /// once, and each answer's body is read only once every request has its answer, so that
    /// each holds a connection of its own meanwhile (`count` distinct connections, not a few
    /// reused).
    async fn warm(
        &self,
        models: &Url,
        template: &RequestTemplate,
        count: u64,
    ) -> (u64, Option<String>) {
        let all_answered = tokio::sync::Barrier::new(count as usize);
        let mut requests = futures_util::stream::FuturesUnordered::new();
        for _ in 0..count {
            let all_answered = &all_answered;
            requests.push(async move {
                let outgoing = Outgoing {
                    url: models,
                    body: None,
                    headers: &[],
                    template,
                    key: 0,
                };
                let answer =
                    tokio::time::timeout(WARM_TIMEOUT, Box::pin(self.send(outgoing))).await;
                // Every request reaches the barrier, answered or not, so none waits forever.
                all_answered.wait().await;
                match answer {
                    // Read to its end, so that the connection goes back to the pool.
                    Ok(Ok(mut response)) => {
                        let reading = async {
                            while let Some(read) = response.body.next().await {
                                read.map_err(|broken| broken.to_string())?;
                            }
                            Ok(())
                        };
                        tokio::time::timeout(WARM_TIMEOUT, reading)
                            .await
                            .unwrap_or_else(|_| Err(too_slow()))
                    }
                    Ok(Err(error)) => Err(error.detail),
                    Err(_) => Err(too_slow()),
                }
            });
        }
        let mut ok = 0;
        let mut first_error = None;
        while let Some(done) = requests.next().await {
            match done {
                Ok(()) => ok += 1,
                Err(error) => {
                    first_error.get_or_insert(error);
                }
            }
        }
        (ok, first_error)
    }
}

tokio::task_local! {
    /// The connection setup time (µs + 1; 0: none) of the request being sent through reqwest.
    static OPENED_FOR_REQUEST: Arc<AtomicU64>;
}

async fn send_reqwest(
    client: &reqwest::Client,
    outgoing: Outgoing<'_>,
) -> Result<Response, SendError> {
    let headers = outgoing.header_map();
    let request = match outgoing.body {
        Some(body) => client.post(outgoing.url.clone()).body(body),
        None => client.get(outgoing.url.clone()),
    }
    .headers(headers);
    let opened = Arc::new(AtomicU64::new(0));
    let sent = OPENED_FOR_REQUEST
        .scope(opened.clone(), request.send())
        .await;
    let connect = match opened.load(Ordering::Relaxed) {
        0 => None,
        us => Some(Opened::took(Duration::from_micros(us - 1))),
    };
    match sent {
        Ok(response) => Ok({
            let facts = head_facts(response.headers());
            Response {
                status: response.status().as_u16(),
                content_type: facts.content_type,
                rate_limit: facts.rate_limit,
                server_request_id: facts.server_request_id,
                body: ResponseBody::Reqwest(Box::pin(response.bytes_stream())),
                connect,
                // reqwest owns its connections' sockets: no clock on their writes.
                written: None,
            }
        }),
        Err(err) => {
            let (kind, detail) = if let Some(limit) = reqwest_client_limit(&err) {
                (SendFailure::ClientLimit, limit)
            } else if err.is_connect() {
                (
                    SendFailure::Connect,
                    format!(
                        "cannot connect to the target: {}{}",
                        root_cause(&err),
                        certificate_hint(&root_cause(&err))
                    ),
                )
            } else if err.is_timeout() {
                (SendFailure::Timeout, "the request timed out".to_string())
            } else if connect.is_none() && closed_before_response(&err) {
                (
                    SendFailure::ClosedBeforeResponse,
                    format!(
                        "the connection failed before a response: {}",
                        root_cause(&err)
                    ),
                )
            } else {
                (
                    SendFailure::Broken,
                    format!(
                        "the connection failed before a response: {}",
                        root_cause(&err)
                    ),
                )
            };
            Err(SendError {
                kind,
                detail,
                connect,
            })
        }
    }
}

/// The server closed the connection before sending any of the response.
fn closed_before_response(err: &reqwest::Error) -> bool {
    let mut current: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = current {
        if let Some(hyper_error) = e.downcast_ref::<hyper::Error>() {
            return hyper_error.is_incomplete_message();
        }
        current = e.source();
    }
    false
}

/// A reqwest failure that was the client's own running out of something.
fn reqwest_client_limit(err: &reqwest::Error) -> Option<String> {
    let mut current: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = current {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            return client_limit(io);
        }
        current = e.source();
    }
    None
}

/// Wraps reqwest's connector so that each connection it opens is logged, and its setup time
/// given to the request that opened it.
#[derive(Clone)]
struct Timed {
    log: Arc<ConnectLog>,
}

impl<S> tower::Layer<S> for Timed {
    type Service = TimedConnector<S>;
    fn layer(&self, inner: S) -> TimedConnector<S> {
        TimedConnector {
            inner,
            log: self.log.clone(),
        }
    }
}

/// reqwest's connector, timing each connection it opens.
#[derive(Clone)]
struct TimedConnector<S> {
    inner: S,
    log: Arc<ConnectLog>,
}

impl<S, R> tower::Service<R> for TimedConnector<S>
where
    S: tower::Service<R>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn std::future::Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: R) -> Self::Future {
        let started = Instant::now();
        // The connector is called while the request that needs the connection is polled; a
        // connection finished in the background after another request freed one is logged
        // but given to no request.
        let for_request = OPENED_FOR_REQUEST.try_with(Arc::clone).ok();
        let connecting = self.inner.call(request);
        let log = self.log.clone();
        Box::pin(async move {
            let result = connecting.await;
            let took = started.elapsed();
            log.record(Opened::took(took), result.is_ok());
            if let (Some(slot), true) = (for_request, result.is_ok()) {
                slot.store(took.as_micros() as u64 + 1, Ordering::Relaxed);
            }
            result
        })
    }
}
