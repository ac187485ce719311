//! The direct HTTP/1.1 transport: one pooled connection per request in flight, written and
//! read by the request's own task ([`super::http1`] frames the bytes), over TCP or TLS
//! ([`super::socket`]); see the module above for why it exists.

use std::collections::HashMap;
use std::io::IoSlice;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures_util::StreamExt;
use reqwest::header::HeaderValue;
use reqwest::Url;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::Instant;

use super::http1::{self, BodyReader, Head};
use super::socket::{self, Dial, Idle, Socket};
use super::{
    certificate_hint, too_slow, BrokenBody, Client, ConnectLog, Opened, Outgoing, Response,
    ResponseBody, SendError, SendFailure, WARM_AT_ONCE, WARM_TIMEOUT,
};
use crate::executor::template::RequestTemplate;

/// The direct HTTP/1.1 transport.
pub(super) struct Direct {
    /// Its idle connections, and the log where every connection it opens or drops is kept.
    pool: Arc<Pool>,
    connect_timeout: Duration,
    /// The run's TLS client, for `https://` servers.
    tls: tokio_rustls::TlsConnector,
}

/// Idle connections, per server (`host:port`), the most recently used first out.
struct Pool {
    idle: Mutex<HashMap<String, Vec<Connection>>>,
    max_idle: usize,
    /// Every connection opened, and every one dropped for bytes nobody asked for: the one log
    /// of the direct transport.
    log: Arc<ConnectLog>,
}

impl Pool {
    fn take(&self, key: &str) -> Option<Connection> {
        let mut idle = self.idle.lock().ok()?;
        let connections = idle.get_mut(key)?;
        while let Some(mut connection) = connections.pop() {
            if self.usable(&mut connection) {
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
        connections.retain_mut(|connection| self.usable(connection));
        connections
    }

    /// Whether an idle connection can carry a request; one the server sent bytes on while it
    /// was idle (a late response, a 408 before closing) is counted as stray and dropped: a
    /// request sent on it would take those bytes for its answer.
    fn usable(&self, connection: &mut Connection) -> bool {
        match connection.idle_state() {
            IdleState::Open => true,
            IdleState::Closed => false,
            IdleState::Stray => {
                self.log.record_stray();
                false
            }
        }
    }

    fn give_back(&self, key: &str, connection: Connection) {
        if let Ok(mut idle) = self.idle.lock() {
            let connections = idle.entry(key.to_string()).or_default();
            if connections.len() < self.max_idle {
                connections.push(connection);
            }
        }
    }
}

/// An open connection: its socket, and the bytes read from it and not yet taken.
struct Connection {
    stream: Socket,
    buffer: BytesMut,
}

impl Connection {
    fn over(stream: Socket) -> Connection {
        Connection {
            stream,
            buffer: BytesMut::new(),
        }
    }

    /// What an idle connection is: open with nothing to read, closed by the server, or holding
    /// bytes nobody asked for (one read that does not wait tells).
    fn idle_state(&mut self) -> IdleState {
        if !self.buffer.is_empty() {
            return IdleState::Stray;
        }
        match self.stream.idle() {
            Idle::Open => IdleState::Open,
            Idle::Bytes => IdleState::Stray,
            Idle::Closed => IdleState::Closed,
        }
    }

    /// Writes a request (`head`, then `body`) and reads its response's head: the head, and
    /// when the request's last byte was taken by the socket.
    async fn exchange(&mut self, head: &[u8], body: &[u8]) -> Result<(Head, Instant), Failed> {
        let (mut head_at, mut body_at) = (0, 0);
        while head_at < head.len() || body_at < body.len() {
            let pieces = [
                IoSlice::new(&head[head_at..]),
                IoSlice::new(&body[body_at..]),
            ];
            let wrote = match self.stream.write_vectored(&pieces).await {
                Ok(0) => return Err(Failed::Io(std::io::ErrorKind::WriteZero.into())),
                Ok(wrote) => wrote,
                Err(err) => return Err(Failed::Io(err)),
            };
            let from_head = wrote.min(head.len() - head_at);
            (head_at, body_at) = (head_at + from_head, body_at + wrote - from_head);
        }
        // Over TLS, the last records rustls holds go out now (over TCP, nothing to do).
        self.stream.flush().await.map_err(Failed::Io)?;
        let written = Instant::now();
        let mut received = false;
        loop {
            if let Some(head) =
                http1::parse_head(&mut self.buffer).map_err(|e| Failed::NotHttp(e.to_string()))?
            {
                return Ok((head, written));
            }
            match self.read_more().await {
                Ok(0) if received => return Err(Failed::EndedInHead),
                Ok(0) => return Err(Failed::Closed),
                Ok(_) => received = true,
                Err(err) if received => return Err(Failed::NotHttp(err.to_string())),
                Err(err) => return Err(Failed::Io(err)),
            }
        }
    }

    /// Reads what the socket holds onto the end of the buffer, up to [`READ_BUFFER`] bytes:
    /// how many came (0: the server closed the connection).
    async fn read_more(&mut self) -> std::io::Result<usize> {
        self.buffer.reserve(READ_BUFFER);
        self.stream.read_buf(&mut self.buffer).await
    }
}

/// What an idle connection was found to be.
enum IdleState {
    Open,
    Closed,
    /// The server sent something while no request was waiting.
    Stray,
}

/// What a request whose connection failed before any response says, from its `cause`.
fn failed_before_response(cause: impl std::fmt::Display) -> String {
    let cause = cause.to_string();
    // With TLS 1.3 a server refuses the client's certificate after the client's handshake has
    // ended: the refusal arrives as the request's first read.
    let hint = certificate_hint(&cause);
    format!("the connection failed before a response: {cause}{hint}")
}

/// How a request got no response head.
#[derive(Debug)]
enum Failed {
    /// The server closed the connection before any of the response.
    Closed,
    /// The socket failed before any of the response.
    Io(std::io::Error),
    /// It closed within the head.
    EndedInHead,
    /// What came was not a response head, or broke off within one.
    NotHttp(String),
}

impl Failed {
    /// Whether a kept-alive connection failed because the server had closed it: it ended, or
    /// the request met the closed socket (a reset, a broken pipe). A server that closes each
    /// connection after its answer (without saying `Connection: close`) does this to every
    /// request sent on a connection it answered once.
    fn closed_by_the_server(&self) -> bool {
        use std::io::ErrorKind;
        match self {
            Failed::Closed => true,
            Failed::Io(err) => matches!(
                err.kind(),
                ErrorKind::ConnectionReset
                    | ErrorKind::BrokenPipe
                    | ErrorKind::ConnectionAborted
                    | ErrorKind::UnexpectedEof
            ),
            Failed::EndedInHead | Failed::NotHttp(_) => false,
        }
    }

    /// What a request that the connection failed before any response says.
    fn detail(&self) -> String {
        let cause = match self {
            Failed::Closed => "the server closed the connection".to_string(),
            Failed::Io(err) => err.to_string(),
            Failed::EndedInHead => {
                "the server closed the connection within the response's head".to_string()
            }
            Failed::NotHttp(what) => what.clone(),
        };
        failed_before_response(cause)
    }
}

/// A body from [`Direct`], holding its connection until the body ends.
pub struct DirectBody {
    reader: BodyReader,
    /// Whether the connection may serve another request once the body has ended.
    keep_alive: bool,
    /// The connection and its pool key, returned to the pool at the body's clean end; `None`
    /// once the body has ended or broken off.
    connection: Option<(Arc<Pool>, String, Connection)>,
}

impl DirectBody {
    /// The body that `head` begins on `connection`, given back to `pool` under `key` at its
    /// clean end.
    fn new(head: &Head, pool: Arc<Pool>, key: String, connection: Connection) -> DirectBody {
        DirectBody {
            reader: BodyReader::new(head.framing),
            keep_alive: head.keep_alive,
            connection: Some((pool, key, connection)),
        }
    }

    /// The body's next piece: what one read brought (a chunked body's chunks joined), `None`
    /// at its end.
    pub(super) async fn next(&mut self) -> Option<Result<Bytes, BrokenBody>> {
        loop {
            let (_, _, connection) = self.connection.as_mut()?;
            let piece = match self.reader.take(&mut connection.buffer) {
                Ok(piece) => piece,
                Err(err) => {
                    self.connection = None;
                    return Some(Err(BrokenBody(err.to_string())));
                }
            };
            if self.reader.done() {
                if let Some((pool, key, connection)) = self.connection.take() {
                    // Bytes after the body are an answer to nothing: counted, never reused.
                    if !connection.buffer.is_empty() {
                        pool.log.record_stray();
                    } else if self.keep_alive {
                        pool.give_back(&key, connection);
                    }
                }
                return (!piece.is_empty()).then_some(Ok(piece));
            }
            if !piece.is_empty() {
                return Some(Ok(piece));
            }
            match connection.read_more().await {
                Ok(0) => {
                    self.connection = None;
                    return if self.reader.ends_with_the_connection() {
                        None
                    } else {
                        Some(Err(BrokenBody(
                            "the server closed the connection before the body's end".into(),
                        )))
                    };
                }
                Ok(_) => {}
                Err(err) => {
                    self.connection = None;
                    return Some(Err(BrokenBody::from_error(&err)));
                }
            }
        }
    }
}

/// A server as the direct transport reaches it.
struct Server<'a> {
    /// The `Host` header: `host:port`, or `host` for the scheme's port.
    authority: String,
    /// Its pool key: the authority, and whether over TLS.
    key: String,
    host: &'a str,
    port: u16,
    tls: bool,
}

impl<'a> Server<'a> {
    fn of(url: &'a Url) -> Self {
        let host = url.host_str().unwrap_or_default();
        let authority = match url.port() {
            Some(port) => format!("{host}:{port}"),
            None => host.to_string(),
        };
        let tls = url.scheme() == "https";
        Server {
            key: if tls {
                format!("https://{authority}")
            } else {
                authority.clone()
            },
            authority,
            host,
            port: url.port_or_known_default().unwrap_or(80),
            tls,
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
        let (head, body) = request(outgoing, &server.authority);
        // An idle connection whose server has closed it since is dropped, and the next tried.
        // Without `reuse`, the pool is left as it is: its idle connections serve later requests.
        let idle = if reuse {
            self.pool.take(&server.key)
        } else {
            None
        };
        let (mut connection, connect) = match idle {
            Some(connection) => (connection, None),
            None => {
                let (connection, opened) = self.open(&server).await?;
                (connection, Some(opened))
            }
        };
        let (response, written) =
            connection
                .exchange(&head, &body)
                .await
                .map_err(|failed| SendError {
                    kind: if connect.is_none() && failed.closed_by_the_server() {
                        SendFailure::ClosedBeforeResponse
                    } else {
                        SendFailure::Broken
                    },
                    detail: failed.detail(),
                    connect,
                })?;
        if connect.is_none() && response.status == 408 {
            // A 408 on a connection that sat idle is the server closing it for idleness, sent
            // before it read this request: an answer to nothing. Counted, and the request is
            // sent again on a new connection, as for a connection found closed.
            self.pool.log.record_stray();
            return Err(SendError {
                kind: SendFailure::ClosedBeforeResponse,
                detail: failed_before_response(
                    "the server answered 408 Request Timeout on a connection that had been idle",
                ),
                connect: None,
            });
        }
        let body = DirectBody::new(&response, self.pool.clone(), server.key, connection);
        Ok(Response {
            status: response.status,
            content_type: response.content_type,
            rate_limit: response.rate_limit,
            server_request_id: response.server_request_id,
            written: Some(written),
            body: ResponseBody::Direct(body),
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

    pub(super) fn new(
        log: Arc<ConnectLog>,
        max_idle: usize,
        connect_timeout: Duration,
        tls: &crate::tls::Trust,
    ) -> Direct {
        Direct {
            tls: tokio_rustls::TlsConnector::from(tls.client_config()),
            pool: Arc::new(Pool {
                idle: Mutex::new(HashMap::new()),
                max_idle,
                log,
            }),
            connect_timeout,
        }
    }

    /// Opens a connection to `server`, timed (DNS, TCP, TLS apart) and logged.
    async fn open(&self, server: &Server<'_>) -> Result<(Connection, Opened), SendError> {
        let dial = Dial {
            host: server.host,
            port: server.port,
            tls: server.tls.then_some(&self.tls),
            timeout: self.connect_timeout,
        };
        // Boxed: the connect's state would otherwise sit in every request's future for its
        // whole life (10,000 streams hold 10,000 of them).
        let (socket, opened) = Box::pin(socket::open(dial, &self.pool.log)).await?;
        Ok((Connection::over(socket), opened))
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
        let outgoing = Outgoing {
            url: models,
            body: None,
            headers: &[],
            template,
            key: 0,
        };
        let (head, _) = request(outgoing, &server.authority);
        loop {
            let reused = idle.is_some();
            let mut connection = match idle.take() {
                Some(connection) => connection,
                None => self.open(server).await.map_err(|e| e.detail)?.0,
            };
            let (response, _) = match connection.exchange(&head, &[]).await {
                Ok(answered) => answered,
                // The server closed it while it was idle: a new one takes its place.
                Err(failed) if reused && failed.closed_by_the_server() => continue,
                Err(failed) => return Err(failed.detail()),
            };
            let mut body =
                DirectBody::new(&response, self.pool.clone(), server.key.clone(), connection);
            // At its end, the body leaves the connection in the pool.
            while let Some(piece) = body.next().await {
                piece.map_err(failed_before_response)?;
            }
            return Ok(());
        }
    }
}

/// `outgoing` as a request to `key` (`host:port`) for the direct transport: the head of a
/// `POST` of its body, or of a `GET`, and the body.
fn request(outgoing: Outgoing<'_>, key: &str) -> (Vec<u8>, Bytes) {
    let url = outgoing.url;
    let mut headers = outgoing.header_map();
    // As reqwest does: a Host the plan sets itself is kept.
    if let Ok(host_value) = HeaderValue::from_str(key) {
        headers.entry(reqwest::header::HOST).or_insert(host_value);
    }
    let target = match url.query() {
        Some(query) => format!("{}?{query}", url.path()),
        None => url.path().to_string(),
    };
    match outgoing.body {
        Some(body) => (
            http1::request_head("POST", &target, &headers, Some(body.len())),
            body,
        ),
        None => (
            http1::request_head("GET", &target, &headers, None),
            Bytes::new(),
        ),
    }
}

/// Each connection's reads: up to this many bytes. A streamed chunk is a few hundred bytes, so
/// 4 KiB holds several per read, and 10,000 streams hold 40 MB of buffers at most; a larger
/// body simply takes more reads.
const READ_BUFFER: usize = 4096;
