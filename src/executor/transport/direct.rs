//! The direct HTTP/1.1 transport: hyper's client connection API driven directly, one pooled
//! connection per request in flight, its I/O driven in the task of the request that holds it
//! ([`drive`]); see the module above for why it exists.

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use reqwest::header::HeaderValue;
use reqwest::Url;
use tokio::net::TcpStream;
use tokio::time::Instant;

use super::{
    client_limit, too_slow, BrokenBody, Client, ConnectLog, Outgoing, Response, ResponseBody,
    SendError, SendFailure, WARM_AT_ONCE, WARM_TIMEOUT,
};
use crate::error::root_cause;
use crate::executor::template::RequestTemplate;

/// The direct HTTP/1.1 transport.
pub(super) struct Direct {
    pool: Arc<Pool>,
    log: Arc<ConnectLog>,
    connect_timeout: Duration,
}

/// Idle connections, per server (`host:port`), the most recently used first out.
struct Pool {
    idle: Mutex<HashMap<String, Vec<Connection>>>,
    max_idle: usize,
}

impl Pool {
    fn take(&self, key: &str) -> Option<Connection> {
        let mut idle = self.idle.lock().ok()?;
        let connections = idle.get_mut(key)?;
        while let Some(connection) = connections.pop() {
            if !connection.sender.is_closed() {
                return Some(connection);
            }
        }
        None
    }

    /// Every idle connection to `key` still open, taken out of the pool.
    fn take_all(&self, key: &str) -> Vec<Connection> {
        let Ok(mut idle) = self.idle.lock() else {
            return Vec::new();
        };
        let mut connections = idle.remove(key).unwrap_or_default();
        connections.retain(|connection| !connection.sender.is_closed());
        connections
    }

    fn give_back(&self, key: &str, connection: Connection) {
        if connection.sender.is_closed() {
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
    connection: Option<(Arc<Pool>, String, Connection)>,
}

/// An open connection: hyper's sender, the connection's I/O, and when its socket last took
/// bytes.
struct Connection {
    sender: SendRequest<Full<Bytes>>,
    io: Driven,
    written: Arc<WriteClock>,
}

/// hyper's half of a connection that reads and writes its socket.
type ConnectionIo =
    hyper::client::conn::http1::Connection<TokioIo<ClockedIo<TcpStream>>, Full<Bytes>>;

/// A connection's I/O, as [`drive`] polls it.
struct Driven {
    /// `None` once it has ended (the server closed it, or it failed).
    connection: Option<Pin<Box<ConnectionIo>>>,
    /// What the connection is polled with (its socket and hyper's channels keep it).
    waker: Waker,
    wake: Arc<WakeUnlessDriving>,
}

impl Driven {
    fn new(connection: ConnectionIo) -> Driven {
        let wake = Arc::new(WakeUnlessDriving::default());
        Driven {
            connection: Some(Box::pin(connection)),
            waker: Waker::from(wake.clone()),
            wake,
        }
    }
}

/// The waker a connection is polled with: it wakes the task of the request that holds the
/// connection, except while that request is polling the connection itself ([`drive`]), when
/// it only notes the wake-up, and `drive` passes it on if it still waits when it returns.
///
/// Why: each chunk the request takes out of hyper's body channel lets the connection's sender
/// go on, which wakes the connection's waker; with the task's own waker, that woke the task
/// that was already running, and it was polled once more for nothing after every chunk.
#[derive(Default)]
struct WakeUnlessDriving {
    task: futures_util::task::AtomicWaker,
    /// [`DRIVING`] and [`MISSED`].
    state: AtomicU8,
}

/// The request is polling the connection.
const DRIVING: u8 = 1;
/// A wake-up came while it was.
const MISSED: u8 = 2;

impl std::task::Wake for WakeUnlessDriving {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        // Noted while driving; passed on at once otherwise. A compare-and-swap, so that a
        // wake-up racing the end of a drive is either seen by it or passed on here.
        let mut state = self.state.load(Ordering::Acquire);
        while state & DRIVING != 0 {
            match self.state.compare_exchange_weak(
                state,
                state | MISSED,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return,
                Err(now) => state = now,
            }
        }
        self.task.wake();
    }
}

/// Runs `step` (a connection's readiness, a request's send, a frame of its body) while driving
/// the connection's I/O in the same task, as the request awaits it.
///
/// Driven here rather than on a task of its own (hyper's usual way) because each chunk then
/// crossed two tasks: the connection's task read and decoded it and handed it over a channel,
/// the request's task woke to take it. On one client core at 256 streams that hand-over was
/// the largest cost left in the answer-per-write shape (a server that writes a whole answer at
/// once: 64 chunks meant 64 task switches each way), and it is one wake-up per read now, not
/// one per chunk (measured in docs/performance.md, "One client core against the calibrated
/// server"). An idle connection is polled by nobody: a server's close is noticed when it is
/// next taken (its readiness fails, and the next is tried), as before.
async fn drive<F: Future>(io: &mut Driven, step: F) -> F::Output {
    let mut step = std::pin::pin!(step);
    std::future::poll_fn(move |cx| {
        if io.connection.is_none() {
            // It has ended: hyper's channels are closed, and tell the step so.
            return step.as_mut().poll(cx);
        }
        // Each time: a wake-up passed on takes the registered waker out.
        io.wake.task.register(cx.waker());
        io.wake.state.store(DRIVING, Ordering::Release);
        let mut polled = drive_once(io, step.as_mut());
        if polled.is_pending() && io.connection.is_none() {
            // It ended in this poll: hyper's channels are closed, and wake the step.
            polled = step.as_mut().poll(cx);
        }
        let missed = io.wake.state.swap(0, Ordering::AcqRel) & MISSED != 0;
        // A wake-up noted while the step waits still is passed on. One noted when the step
        // is done is not needed: the connection is polled at the next step, the only time
        // anyone needs it to go on.
        if polled.is_pending() && missed {
            cx.waker().wake_by_ref();
        }
        polled
    })
    .await
}

/// One poll of [`drive`]: the step, the connection, the step again (`Pending` when the
/// connection ended in it, for `drive` to poll the step with the task's waker).
fn drive_once<F: Future>(io: &mut Driven, mut step: Pin<&mut F>) -> Poll<F::Output> {
    // Only the connection wakes the step (it alone feeds hyper's channels), and it is polled
    // right here, the step after it: the step needs no waker of its own, and one would wake
    // this task again for every chunk the connection hands over.
    let mut quiet = Context::from_waker(Waker::noop());
    if let Poll::Ready(output) = step.as_mut().poll(&mut quiet) {
        return Poll::Ready(output);
    }
    let Some(connection) = io.connection.as_mut() else {
        return Poll::Pending;
    };
    match connection
        .as_mut()
        .poll(&mut Context::from_waker(&io.waker))
    {
        // Its end (or error) reaches the step through hyper's channels; `drive` polls the
        // step again, with the task's waker.
        Poll::Ready(_) => {
            io.connection = None;
            Poll::Pending
        }
        // It may have handed the step what it waits for (a chunk, the response's head); if
        // not, it waits on what it registered (the socket, the step's demand), and its waker
        // wakes this task.
        Poll::Pending => step.as_mut().poll(&mut quiet),
    }
}

/// When a connection last handed bytes to the kernel, ns after [`WriteClock::EPOCH`] (0:
/// not since it was reset). Read once a response's head has arrived, it is when the request's
/// body was written: HTTP/1.1 carries one request at a time, so no other request's bytes
/// follow it. One atomic store per write (a request's head and body are a write or two).
#[derive(Default)]
struct WriteClock(AtomicU64);

impl WriteClock {
    fn epoch() -> Instant {
        static EPOCH: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
        Instant::from_std(*EPOCH.get_or_init(std::time::Instant::now))
    }

    fn tick(&self) {
        let nanos = Instant::now()
            .saturating_duration_since(Self::epoch())
            .as_nanos() as u64;
        // Never 0, which means "not written".
        self.0.store(nanos.max(1), Ordering::Relaxed);
    }

    fn reset(&self) {
        self.0.store(0, Ordering::Relaxed);
    }

    fn last(&self) -> Option<Instant> {
        match self.0.load(Ordering::Relaxed) {
            0 => None,
            nanos => Some(Self::epoch() + Duration::from_nanos(nanos)),
        }
    }
}

/// A socket that ticks its [`WriteClock`] as it takes bytes.
struct ClockedIo<T> {
    io: T,
    clock: Arc<WriteClock>,
}

impl<T: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for ClockedIo<T> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<T: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for ClockedIo<T> {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let polled = std::pin::Pin::new(&mut self.io).poll_write(cx, buf);
        if matches!(polled, std::task::Poll::Ready(Ok(n)) if n > 0) {
            self.clock.tick();
        }
        polled
    }

    fn poll_write_vectored(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let polled = std::pin::Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        if matches!(polled, std::task::Poll::Ready(Ok(n)) if n > 0) {
            self.clock.tick();
        }
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

impl DirectBody {
    pub(super) async fn next(&mut self) -> Option<Result<Bytes, BrokenBody>> {
        loop {
            let frame = match &mut self.connection {
                Some((_, _, connection)) => drive(&mut connection.io, self.body.frame()).await,
                // It failed and was dropped: the body says so.
                None => self.body.frame().await,
            };
            match frame {
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        return Some(Ok(data));
                    }
                    // Trailers carry nothing a reader wants.
                }
                Some(Err(err)) => {
                    self.connection = None;
                    return Some(Err(BrokenBody::from_error(&err)));
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
    /// Sends on an idle connection when `reuse` allows and one is open, else on a new one.
    pub(super) async fn send_on(
        &self,
        outgoing: Outgoing<'_>,
        reuse: bool,
    ) -> Result<Response, SendError> {
        let server = Server::of(outgoing.url);
        let request = request(outgoing, &server.key)?;
        // An idle connection whose server has closed it since is dropped, and the next tried.
        // Without `reuse`, the pool is left as it is: its idle connections serve later requests.
        let (mut connection, connect) = loop {
            let idle = if reuse {
                self.pool.take(&server.key)
            } else {
                None
            };
            match idle {
                Some(mut connection) => {
                    if drive(&mut connection.io, connection.sender.ready())
                        .await
                        .is_ok()
                    {
                        break (connection, None);
                    }
                }
                None => {
                    let (connection, took) = self.open(&server).await?;
                    break (connection, Some(took));
                }
            }
        };
        connection.written.reset();
        let response = drive(&mut connection.io, connection.sender.send_request(request))
            .await
            .map_err(|err| SendError {
                kind: if connect.is_none() && closed_by_the_server(&err) {
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
            written: connection.written.last(),
            body: ResponseBody::Direct(DirectBody {
                body: response.into_body(),
                connection: Some((self.pool.clone(), server.key, connection)),
            }),
            connect,
        })
    }
}

impl Client for Direct {
    async fn send(&self, outgoing: Outgoing<'_>) -> Result<Response, SendError> {
        self.send_on(outgoing, true).await
    }

    /// [`super::Transport::warm`] over the direct pool: the idle connections to the server are each
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
}

impl Direct {
    /// The open idle connections to `url`'s server, taken out of the pool (for tests).
    #[cfg(test)]
    pub(super) fn idle_to(&self, url: &Url) -> usize {
        self.pool.take_all(&Server::of(url).key).len()
    }

    pub(super) fn new(log: Arc<ConnectLog>, max_idle: usize, connect_timeout: Duration) -> Direct {
        Direct {
            pool: Arc::new(Pool {
                idle: Mutex::new(HashMap::new()),
                max_idle,
            }),
            log,
            connect_timeout,
        }
    }

    /// Opens a connection to `server`, timed and logged.
    async fn open(&self, server: &Server<'_>) -> Result<(Connection, Duration), SendError> {
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

    /// Sends a `GET` of `models` on `idle` (or, when there is none or it fails, on a new
    /// connection), reads the answer to its end and leaves the connection idle in the pool.
    async fn check(
        &self,
        server: &Server<'_>,
        models: &Url,
        template: &RequestTemplate,
        mut idle: Option<Connection>,
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
                let io = &mut connection.io;
                drive(io, connection.sender.ready()).await?;
                let response = drive(io, connection.sender.send_request(request)).await?;
                let mut body = response.into_body();
                while let Some(frame) = drive(io, body.frame()).await {
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
    /// the HTTP/1.1 handshake (the connection's I/O is then driven by whoever holds it).
    async fn connect(&self, host: &str, port: u16) -> Result<Connection, (SendFailure, String)> {
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
        let written = Arc::new(WriteClock::default());
        let stream = ClockedIo {
            io: stream,
            clock: written.clone(),
        };
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
        // The connection's I/O is driven by the request that holds it (see `drive`); its
        // error, if any, reaches that request through hyper's channels. Boxed: it is 672 bytes,
        // moved in and out of the pool with each request.
        Ok(Connection {
            sender,
            io: Driven::new(connection),
            written,
        })
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

/// Whether a kept-alive connection failed because the server had closed it: it ended
/// (`incomplete message`), or our request met the closed socket (a reset, a broken pipe). A
/// server that closes each connection after its answer (without saying `Connection: close`)
/// does this to every request sent on a connection it answered once.
fn closed_by_the_server(err: &hyper::Error) -> bool {
    use std::io::ErrorKind;
    if err.is_incomplete_message() || err.is_canceled() || err.is_closed() {
        return true;
    }
    let mut source: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(err);
    while let Some(cause) = source {
        if let Some(io) = cause.downcast_ref::<std::io::Error>() {
            return matches!(
                io.kind(),
                ErrorKind::ConnectionReset
                    | ErrorKind::BrokenPipe
                    | ErrorKind::ConnectionAborted
                    | ErrorKind::UnexpectedEof
            );
        }
        source = cause.source();
    }
    false
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
