//! How a request reaches the server: an HTTP/1.1 connection of its own, taken from a pool or
//! opened for it, and timed.
//!
//! Two transports speak for the executor. Plain `http://` targets (every self-hosted engine,
//! and every test and benchmark) go through [`Direct`]: hyper's HTTP/1.1 client connection API
//! driven directly, one pooled connection per request in flight, IP literals connected without
//! a resolver, each connection's setup timed for the request that opened it. It exists because
//! the general-purpose client cost about 2.5× a bare hyper connection per request (request
//! building, pool bookkeeping and a dispatch channel sized for its request type: measured in
//! docs/performance.md), and that cost lands on the first wave's TTFT when hundreds of streams
//! start at once. `https://` targets, and any target while an HTTP proxy is configured in the
//! environment, go through reqwest, which brings TLS and proxies; its connector is wrapped to
//! time the connections it opens, and a task-local slot gives each request the setup time of
//! the connection it opened.
//!
//! It is not for reading responses (see [`super::request`]) nor for deciding how many
//! connections a phase needs (see [`super::connections`]).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures_util::{Stream, StreamExt};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use reqwest::header::{HeaderName, HeaderValue};
use reqwest::Url;
use tokio::time::Instant;

use super::connections::ConnectLog;
use super::request::{root_cause, RequestTemplate};

/// What a request asks of the transport.
pub struct Outgoing<'a> {
    /// Where it goes.
    pub url: &'a Url,
    /// The body to POST; `None` for a GET.
    pub body: Option<Bytes>,
    /// Headers besides the run's credentials and extra headers (which the template adds).
    pub headers: &'a [(HeaderName, HeaderValue)],
    /// The run's credentials and extra headers.
    pub template: &'a RequestTemplate,
}

impl Outgoing<'_> {
    /// Its headers, then the run's credentials and extra headers.
    fn header_map(&self) -> reqwest::header::HeaderMap {
        let mut headers = reqwest::header::HeaderMap::with_capacity(self.headers.len() + 2);
        for (name, value) in self.headers {
            headers.insert(name.clone(), value.clone());
        }
        self.template.add_credentials(&mut headers);
        headers
    }
}

/// The head of a response, and its body to read.
pub struct Response {
    /// The HTTP status.
    pub status: u16,
    /// The `content-type` header, if any.
    pub content_type: Option<String>,
    /// The body, read frame by frame as it arrives.
    pub body: ResponseBody,
    /// How long opening a new connection for this request took (TCP connect, and the TLS
    /// handshake over HTTPS); `None` when it reused an open one.
    pub connect: Option<Duration>,
}

/// Why a request got no response.
#[derive(Debug)]
pub struct SendError {
    /// What kind of failure.
    pub kind: SendFailure,
    /// What happened, in a sentence (never a header).
    pub detail: String,
    /// How long opening the connection took, if one was opened.
    pub connect: Option<Duration>,
}

/// The kinds of [`SendError`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendFailure {
    /// The client ran out of something (file descriptors, ports): the client's failure.
    ClientLimit,
    /// No connection could be made.
    Connect,
    /// The connection attempt timed out.
    Timeout,
    /// A reused keep-alive connection was closed by the server before any of the response: a
    /// transport race, worth one re-send on another connection.
    ClosedBeforeResponse,
    /// The connection failed before a response.
    Broken,
}

/// A response body, read frame by frame.
pub enum ResponseBody {
    /// From [`Direct`]: the connection goes back to the pool once the body has been read to
    /// its end.
    Direct(DirectBody),
    /// From reqwest.
    Reqwest(Pin<Box<dyn Stream<Item = reqwest::Result<Bytes>> + Send>>),
}

impl ResponseBody {
    /// The next piece of the body; `None` at its end; an error (as people read it) when it
    /// broke off.
    pub async fn next(&mut self) -> Option<Result<Bytes, String>> {
        match self {
            ResponseBody::Direct(body) => body.next().await,
            ResponseBody::Reqwest(stream) => stream
                .next()
                .await
                .map(|read| read.map_err(|e| root_cause(&e))),
        }
    }
}

/// The executor's HTTP client: [`Direct`] or reqwest, chosen per target URL.
pub struct Transport {
    direct: Direct,
    reqwest: reqwest::Client,
    /// reqwest for `http://` too: an HTTP proxy is configured in the environment.
    proxied: bool,
}

impl Transport {
    /// A transport whose every connection is logged in `log`, keeping up to `max_idle` idle
    /// connections per server.
    pub fn new(
        log: Arc<ConnectLog>,
        max_idle: usize,
        connect_timeout: Duration,
    ) -> Result<Self, String> {
        let reqwest = reqwest::Client::builder()
            .connector_layer(Timed { log: log.clone() })
            .tcp_nodelay(true)
            .pool_max_idle_per_host(max_idle)
            .connect_timeout(connect_timeout)
            .build()
            .map_err(|e| format!("cannot build the HTTP client: {e}"))?;
        Ok(Transport {
            direct: Direct {
                pool: Arc::new(Pool {
                    idle: Mutex::new(HashMap::new()),
                    max_idle,
                }),
                log,
                connect_timeout,
            },
            reqwest,
            proxied: http_proxy_configured(),
        })
    }

    /// Sends `outgoing` and returns the response's head once it arrives.
    pub async fn send(&self, outgoing: Outgoing<'_>) -> Result<Response, SendError> {
        if outgoing.url.scheme() == "http" && !self.proxied {
            self.direct.send(outgoing).await
        } else {
            send_reqwest(&self.reqwest, outgoing).await
        }
    }

    /// Leaves `count` connections to the server of `models` (its `GET /models` URL) open,
    /// checked and idle in the pool, each having answered a `GET` of `models` with the run's
    /// credentials (any answer proves the connection; the `GET` also restarts the server's
    /// keep-alive timer). Returns how many, and the first failure.
    pub async fn warm(
        &self,
        models: &Url,
        template: &RequestTemplate,
        count: u64,
    ) -> (u64, Option<String>) {
        if count == 0 {
            return (0, None);
        }
        if models.scheme() == "http" && !self.proxied {
            self.direct.warm(models, template, count).await
        } else {
            self.warm_together(models, template, count).await
        }
    }

    /// reqwest's pool cannot be asked for a fresh connection: `count` requests are sent at
    /// once, and each answer's body is read only once every request has its answer, so that
    /// each holds a connection of its own meanwhile (`count` distinct connections, not a few
    /// reused).
    async fn warm_together(
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
                                read?;
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

/// How long a warm-up request may take.
const WARM_TIMEOUT: Duration = Duration::from_secs(10);

/// What a warm-up request that took longer than [`WARM_TIMEOUT`] says.
fn too_slow() -> String {
    format!(
        "no answer to GET /models within {} s",
        WARM_TIMEOUT.as_secs()
    )
}

/// How many connections the direct transport's warm-up opens or checks at once: 10,000 open in
/// well under a second on loopback, a server's accept queue (128 to 4,096 in common servers)
/// is not flooded, and the warm-up's own state stays small (10,000 requests at once raised the
/// client's peak memory by 10–15 MB).
const WARM_AT_ONCE: usize = 256;

/// Whether the environment configures a proxy for plain HTTP (reqwest honours it; the direct
/// transport does not speak to proxies).
fn http_proxy_configured() -> bool {
    ["http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"]
        .iter()
        .any(|name| std::env::var_os(name).is_some_and(|v| !v.is_empty()))
}

/// The direct HTTP/1.1 transport.
struct Direct {
    pool: Arc<Pool>,
    log: Arc<ConnectLog>,
    connect_timeout: Duration,
}

/// Idle connections, per server (`host:port`), the most recently used first out.
struct Pool {
    idle: Mutex<HashMap<String, Vec<SendRequest<Full<Bytes>>>>>,
    max_idle: usize,
}

impl Pool {
    fn take(&self, key: &str) -> Option<SendRequest<Full<Bytes>>> {
        let mut idle = self.idle.lock().ok()?;
        let connections = idle.get_mut(key)?;
        while let Some(connection) = connections.pop() {
            if !connection.is_closed() {
                return Some(connection);
            }
        }
        None
    }

    /// Every idle connection to `key` still open, taken out of the pool.
    fn take_all(&self, key: &str) -> Vec<SendRequest<Full<Bytes>>> {
        let Ok(mut idle) = self.idle.lock() else {
            return Vec::new();
        };
        let mut connections = idle.remove(key).unwrap_or_default();
        connections.retain(|connection| !connection.is_closed());
        connections
    }

    fn give_back(&self, key: &str, connection: SendRequest<Full<Bytes>>) {
        if connection.is_closed() {
            return;
        }
        if let Ok(mut idle) = self.idle.lock() {
            let connections = idle.entry(key.to_string()).or_default();
            if connections.len() < self.max_idle {
                connections.push(connection);
            }
        }
    }
}

/// A body from [`Direct`], holding its connection until the body ends.
pub struct DirectBody {
    body: hyper::body::Incoming,
    /// The connection and its pool key, returned to the pool at the body's clean end.
    connection: Option<(Arc<Pool>, String, SendRequest<Full<Bytes>>)>,
}

impl DirectBody {
    async fn next(&mut self) -> Option<Result<Bytes, String>> {
        loop {
            match self.body.frame().await {
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        return Some(Ok(data));
                    }
                    // Trailers carry nothing a reader wants.
                }
                Some(Err(err)) => {
                    self.connection = None;
                    return Some(Err(root_cause(&err)));
                }
                None => {
                    if let Some((pool, key, connection)) = self.connection.take() {
                        pool.give_back(&key, connection);
                    }
                    return None;
                }
            }
        }
    }
}

/// A server as the direct transport reaches it.
struct Server<'a> {
    /// Its pool key, and the `Host` header: `host:port`, or `host` for the scheme's port.
    key: String,
    host: &'a str,
    port: u16,
}

impl<'a> Server<'a> {
    fn of(url: &'a Url) -> Self {
        let host = url.host_str().unwrap_or_default();
        Server {
            key: match url.port() {
                Some(port) => format!("{host}:{port}"),
                None => host.to_string(),
            },
            host,
            port: url.port_or_known_default().unwrap_or(80),
        }
    }
}

impl Direct {
    async fn send(&self, outgoing: Outgoing<'_>) -> Result<Response, SendError> {
        let server = Server::of(outgoing.url);
        let request = request(outgoing, &server.key)?;
        // An idle connection whose server has closed it since is dropped, and the next tried.
        let (mut connection, connect) = loop {
            match self.pool.take(&server.key) {
                Some(mut connection) => {
                    if connection.ready().await.is_ok() {
                        break (connection, None);
                    }
                }
                None => {
                    let (connection, took) = self.open(&server).await?;
                    break (connection, Some(took));
                }
            }
        };
        let response = connection
            .send_request(request)
            .await
            .map_err(|err| SendError {
                kind: if connect.is_none()
                    && (err.is_incomplete_message() || err.is_canceled() || err.is_closed())
                {
                    SendFailure::ClosedBeforeResponse
                } else {
                    SendFailure::Broken
                },
                detail: failed_before_response(&err),
                connect,
            })?;
        let status = response.status().as_u16();
        let content_type = response
            .headers()
            .get(hyper::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        Ok(Response {
            status,
            content_type,
            body: ResponseBody::Direct(DirectBody {
                body: response.into_body(),
                connection: Some((self.pool.clone(), server.key, connection)),
            }),
            connect,
        })
    }

    /// Opens a connection to `server`, timed and logged.
    async fn open(
        &self,
        server: &Server<'_>,
    ) -> Result<(SendRequest<Full<Bytes>>, Duration), SendError> {
        let started = Instant::now();
        // Boxed: the connect's state would otherwise sit in every request's future for its
        // whole life (10,000 streams hold 10,000 of them).
        let opened = Box::pin(self.connect(server.host, server.port)).await;
        let took = started.elapsed();
        self.log.record(took, opened.is_ok());
        opened
            .map(|connection| (connection, took))
            .map_err(|(kind, detail)| SendError {
                kind,
                detail,
                connect: None,
            })
    }

    /// [`Transport::warm`] over the direct pool: the idle connections to the server are each
    /// checked with a `GET` of `models` (one that fails is replaced), and new ones opened and
    /// checked until there are `count`, [`WARM_AT_ONCE`] at a time. After the first failure no
    /// more are begun, so that a server that cannot be reached costs one round of attempts
    /// (at most [`WARM_TIMEOUT`]), not one round per [`WARM_AT_ONCE`] connections.
    async fn warm(
        &self,
        models: &Url,
        template: &RequestTemplate,
        count: u64,
    ) -> (u64, Option<String>) {
        let server = Server::of(models);
        let mut idle = self.pool.take_all(&server.key);
        let jobs: Vec<_> = (0..count).map(|_| idle.pop()).collect();
        for spare in idle {
            self.pool.give_back(&server.key, spare);
        }
        let (server, failed) = (&server, &std::sync::atomic::AtomicBool::new(false));
        let mut checks = futures_util::stream::iter(jobs)
            .map(|idle| async move {
                if failed.load(Ordering::Relaxed) {
                    if let Some(connection) = idle {
                        self.pool.give_back(&server.key, connection);
                    }
                    return None;
                }
                let checked = tokio::time::timeout(
                    WARM_TIMEOUT,
                    Box::pin(self.check(server, models, template, idle)),
                );
                let checked = checked.await.unwrap_or_else(|_| Err(too_slow()));
                if checked.is_err() {
                    failed.store(true, Ordering::Relaxed);
                }
                Some(checked)
            })
            .buffer_unordered(WARM_AT_ONCE);
        let mut ok = 0;
        let mut first_error = None;
        while let Some(checked) = checks.next().await {
            match checked {
                Some(Ok(())) => ok += 1,
                Some(Err(error)) => {
                    first_error.get_or_insert(error);
                }
                None => {}
            }
        }
        (ok, first_error)
    }

    /// Sends a `GET` of `models` on `idle` (or, when there is none or it fails, on a new
    /// connection), reads the answer to its end and leaves the connection idle in the pool.
    async fn check(
        &self,
        server: &Server<'_>,
        models: &Url,
        template: &RequestTemplate,
        mut idle: Option<SendRequest<Full<Bytes>>>,
    ) -> Result<(), String> {
        loop {
            let reused = idle.is_some();
            let mut connection = match idle.take() {
                Some(connection) => connection,
                None => self.open(server).await.map_err(|e| e.detail)?.0,
            };
            let outgoing = Outgoing {
                url: models,
                body: None,
                headers: &[],
                template,
            };
            let request = request(outgoing, &server.key).map_err(|e| e.detail)?;
            let answered = async {
                connection.ready().await?;
                let response = connection.send_request(request).await?;
                let mut body = response.into_body();
                while let Some(frame) = body.frame().await {
                    frame?;
                }
                Ok::<(), hyper::Error>(())
            };
            match answered.await {
                Ok(()) => {
                    self.pool.give_back(&server.key, connection);
                    return Ok(());
                }
                // The server closed it while it was idle: a new one takes its place.
                Err(_) if reused => {}
                Err(err) => return Err(failed_before_response(&err)),
            }
        }
    }

    /// Opens a connection: the address (an IP literal needs no resolver), TCP with Nagle off,
    /// the HTTP/1.1 handshake, and the connection's own task.
    async fn connect(
        &self,
        host: &str,
        port: u16,
    ) -> Result<SendRequest<Full<Bytes>>, (SendFailure, String)> {
        let literal = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<std::net::IpAddr>();
        let addresses: Vec<SocketAddr> = match literal {
            Ok(ip) => vec![SocketAddr::new(ip, port)],
            Err(_) => match tokio::net::lookup_host((host, port)).await {
                Ok(found) => found.collect(),
                Err(err) => {
                    return Err((
                        SendFailure::Connect,
                        format!("cannot connect to the target: cannot resolve {host}: {err}"),
                    ))
                }
            },
        };
        let attempt = async {
            let mut last_error = None;
            for address in &addresses {
                match tokio::net::TcpStream::connect(address).await {
                    Ok(stream) => return Ok(stream),
                    Err(err) => last_error = Some(err),
                }
            }
            Err(last_error.unwrap_or_else(|| {
                std::io::Error::new(std::io::ErrorKind::NotFound, "no address found")
            }))
        };
        let stream = match tokio::time::timeout(self.connect_timeout, attempt).await {
            Ok(Ok(stream)) => stream,
            Ok(Err(err)) => {
                return Err(match client_limit(&err) {
                    Some(limit) => (SendFailure::ClientLimit, limit),
                    None => (
                        SendFailure::Connect,
                        format!("cannot connect to the target: {err}"),
                    ),
                })
            }
            Err(_) => {
                return Err((
                    SendFailure::Connect,
                    format!(
                        "cannot connect to the target: no connection within {} s",
                        self.connect_timeout.as_secs_f64()
                    ),
                ))
            }
        };
        let _ = stream.set_nodelay(true);
        let (sender, connection) = hyper::client::conn::http1::Builder::new()
            .read_buf_exact_size(Some(READ_BUFFER))
            .handshake(TokioIo::new(stream))
            .await
            .map_err(|err| {
                (
                    SendFailure::Connect,
                    format!("cannot connect to the target: {}", root_cause(&err)),
                )
            })?;
        // The connection's I/O runs on its own task; it ends when the sender is dropped or the
        // server closes the connection. Its error, if any, reaches the request reading it.
        // Spawned as it is: an `async move` block around it would hold it twice (1,352 bytes
        // instead of 672 per connection).
        tokio::spawn(connection);
        Ok(sender)
    }
}

/// `outgoing` as a request to `key` (`host:port`) for the direct transport: a `POST` of its
/// body, or a `GET`.
fn request(outgoing: Outgoing<'_>, key: &str) -> Result<hyper::Request<Full<Bytes>>, SendError> {
    let url = outgoing.url;
    let mut headers = outgoing.header_map();
    // As reqwest does: a Host the plan sets itself is kept.
    if let Ok(host_value) = HeaderValue::from_str(key) {
        headers.entry(hyper::header::HOST).or_insert(host_value);
    }
    let mut request = hyper::Request::builder()
        .method(if outgoing.body.is_some() {
            hyper::Method::POST
        } else {
            hyper::Method::GET
        })
        .uri(match url.query() {
            Some(query) => format!("{}?{query}", url.path()),
            None => url.path().to_string(),
        })
        // The body is moved, not shared: hyper lets go of it once written.
        .body(Full::new(outgoing.body.unwrap_or_default()))
        .map_err(|e| SendError {
            kind: SendFailure::Broken,
            detail: format!("cannot build the request: {e}"),
            connect: None,
        })?;
    *request.headers_mut() = headers;
    Ok(request)
}

/// What a request that the connection failed before any response says.
fn failed_before_response(err: &hyper::Error) -> String {
    format!(
        "the connection failed before a response: {}",
        root_cause(err)
    )
}

/// Each connection's read buffer. A streamed chunk is a few hundred bytes, so 4 KiB holds
/// several per read, while hyper's adaptive default (8 KiB, growing to 400 KiB under bursts) is
/// most of a client's memory at 10,000 streams; a larger body simply takes more reads.
const READ_BUFFER: usize = 4096;

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
        us => Some(Duration::from_micros(us - 1)),
    };
    match sent {
        Ok(response) => Ok(Response {
            status: response.status().as_u16(),
            content_type: response
                .headers()
                .get(reqwest::header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string),
            body: ResponseBody::Reqwest(Box::pin(response.bytes_stream())),
            connect,
        }),
        Err(err) => {
            let (kind, detail) = if let Some(limit) = reqwest_client_limit(&err) {
                (SendFailure::ClientLimit, limit)
            } else if err.is_connect() {
                (
                    SendFailure::Connect,
                    format!("cannot connect to the target: {}", root_cause(&err)),
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

/// When an I/O failure is the client itself running out of something (file descriptors,
/// ephemeral ports, buffers), what; such failures are the client's, never the server's.
fn client_limit(io: &std::io::Error) -> Option<String> {
    #[cfg(unix)]
    {
        let what = match io.raw_os_error()? {
            libc::EMFILE => "the client ran out of file descriptors (EMFILE): raise `ulimit -n`",
            libc::ENFILE => "the system ran out of file descriptors (ENFILE)",
            libc::EADDRNOTAVAIL => {
                "the client ran out of local ports (EADDRNOTAVAIL): too many connections opened and closed"
            }
            libc::ENOBUFS | libc::ENOMEM => "the client ran out of memory for sockets",
            _ => return None,
        };
        Some(what.to_string())
    }
    #[cfg(not(unix))]
    {
        let _ = io;
        None
    }
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
            log.record(took, result.is_ok());
            if let (Some(slot), true) = (for_request, result.is_ok()) {
                slot.store(took.as_micros() as u64 + 1, Ordering::Relaxed);
            }
            result
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{Api, SimSettings};

    fn template(url: &Url) -> RequestTemplate {
        RequestTemplate {
            url: url.clone(),
            dialect: Api::Completions.dialect(),
            options: crate::api::BodyOptions {
                model: "m".into(),
                stream: true,
                continuous_usage: false,
                ignore_eos: false,
                extra: Default::default(),
            },
            credentials: Default::default(),
            headers: Default::default(),
            timeout: Duration::from_secs(10),
            request_id_prefix: "t".into(),
            max_line: 1 << 20,
            max_body: 1 << 20,
        }
    }

    /// Runs `test` to its end on a single-threaded runtime.
    fn on_a_runtime(test: impl std::future::Future<Output = ()>) {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(test)
    }

    /// The simulator on a loopback port (serving while the first is kept), and its `GET
    /// /models` URL.
    async fn simulator() -> (crate::sim::SimServer, Url) {
        let tokenizer = Arc::new(crate::tokens::Tokenizer::builtin("cl100k_base").unwrap());
        let sim = crate::sim::serve(
            "127.0.0.1:0".parse().unwrap(),
            SimSettings::default(),
            tokenizer,
        )
        .await
        .unwrap();
        let url = format!("http://{}/v1/models", sim.addr).parse().unwrap();
        (sim, url)
    }

    /// A transport keeping up to `max_idle` idle connections, its log, and whether it goes
    /// through reqwest for plain HTTP as it does when a proxy is configured.
    fn logged_transport(max_idle: usize, proxied: bool) -> (Arc<ConnectLog>, Transport) {
        let log = Arc::new(ConnectLog::default());
        let mut transport = Transport::new(log.clone(), max_idle, Duration::from_secs(5)).unwrap();
        transport.proxied = proxied;
        (log, transport)
    }

    /// Both transports, over loopback to the simulator: a first request opens a connection and
    /// says how long that took; the next reuses it and says none; the body is whole.
    #[test]
    fn each_transport_times_the_connections_its_requests_open() {
        on_a_runtime(async {
            let (_sim, url) = simulator().await;
            let template = template(&url);
            for proxied in [false, true] {
                // Proxied: as if a proxy were configured, reqwest carries plain HTTP too.
                let (log, transport) = logged_transport(4, proxied);
                for attempt in 0..2 {
                    let outgoing = Outgoing {
                        url: &url,
                        body: None,
                        headers: &[],
                        template: &template,
                    };
                    let mut response = transport.send(outgoing).await.unwrap();
                    assert_eq!(response.status, 200);
                    let mut body = Vec::new();
                    while let Some(read) = response.body.next().await {
                        body.extend_from_slice(&read.unwrap());
                    }
                    assert!(String::from_utf8_lossy(&body).contains("\"data\""));
                    assert_eq!(
                        response.connect.is_some(),
                        attempt == 0,
                        "proxied {proxied}, attempt {attempt}"
                    );
                }
                let from = tokio::time::Instant::now() - Duration::from_secs(60);
                let opened = log.between(from, tokio::time::Instant::now(), 0);
                assert_eq!(opened.opened, 1, "proxied {proxied}");
            }
        });
    }

    /// A warm-up opens what is missing and checks what is idle: 6 new connections, then none
    /// for 6 again (the idle ones are reused, each answering once), then 3 for 9; over the
    /// direct transport they are left idle in its pool.
    #[test]
    fn warming_opens_only_the_connections_missing_from_the_pool() {
        on_a_runtime(async {
            let (_sim, url) = simulator().await;
            let template = template(&url);
            for proxied in [false, true] {
                // Proxied: reqwest's warm-up, all requests at once.
                let (log, transport) = logged_transport(64, proxied);
                let since = tokio::time::Instant::now();
                let opened = || log.between(since, tokio::time::Instant::now(), 0).opened;
                assert_eq!(transport.warm(&url, &template, 6).await, (6, None));
                assert_eq!(opened(), 6, "proxied {proxied}");
                assert_eq!(transport.warm(&url, &template, 6).await, (6, None));
                assert_eq!(opened(), 6, "proxied {proxied}");
                assert_eq!(transport.warm(&url, &template, 9).await, (9, None));
                assert_eq!(opened(), 9, "proxied {proxied}");
                if !proxied {
                    let key = Server::of(&url).key;
                    assert_eq!(transport.direct.pool.take_all(&key).len(), 9);
                }
            }
        });
    }

    /// A server that cannot be reached costs the warm-up one round of attempts, not one per
    /// 256 connections asked for.
    #[test]
    fn warming_stops_beginning_connections_after_a_failure() {
        on_a_runtime(async {
            // Port 9 (discard) is closed on loopback.
            let url: Url = "http://127.0.0.1:9/v1/models".parse().unwrap();
            let template = template(&url);
            let (log, transport) = logged_transport(64, false);
            let since = tokio::time::Instant::now();
            let (ok, error) = transport.warm(&url, &template, 5_000).await;
            assert_eq!(ok, 0);
            assert!(error.unwrap().starts_with("cannot connect to the target"));
            let attempts = log.between(since, tokio::time::Instant::now(), 0).failed;
            assert!((1..=WARM_AT_ONCE as u64).contains(&attempts), "{attempts}");
        });
    }

    #[test]
    fn a_refused_connection_is_a_connect_failure() {
        on_a_runtime(async {
            // Port 9 (discard) is closed on loopback.
            let url: Url = "http://127.0.0.1:9/v1/models".parse().unwrap();
            let template = template(&url);
            let (_, transport) = logged_transport(4, false);
            let outgoing = Outgoing {
                url: &url,
                body: None,
                headers: &[],
                template: &template,
            };
            let error = transport.send(outgoing).await.err().unwrap();
            assert_eq!(error.kind, SendFailure::Connect);
            assert!(
                error.detail.starts_with("cannot connect to the target"),
                "{}",
                error.detail
            );
        });
    }
}
