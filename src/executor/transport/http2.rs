//! The HTTP/2 transport (`target { http "2" }`): requests multiplexed as streams on few
//! connections, as SDKs and browsers speak to a gateway that offers HTTP/2: a new connection
//! only when each open one carries `streams` requests already. Over `https://` the TLS
//! handshake agrees on `h2` (ALPN); over `http://` it is spoken with prior knowledge (h2c).
//! With `http "auto"` it offers `h2` and `http/1.1` over `https://` and leaves to HTTP/1.1 a
//! server that chooses it ([`Http2::carries`]), and every `http://` target.
//! hyper's HTTP/2 client frames the streams; connections open as the direct transport's do
//! ([`super::socket`]: the name, TCP and TLS timed apart, the request that opened one given its
//! time).
//!
//! Timing: a request's send is when its stream is handed to the connection; each DATA frame is
//! a piece of the body when hyper hands it over, as each read is for HTTP/1.1. What it cannot
//! tell: when the request's last byte left (frames of many streams share one socket), so
//! `upload` is not measured.
//!
//! Not for HTTP/1.1 ([`super::direct`]) nor for choosing between them ([`super::Transport`]).

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http2::SendRequest;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use reqwest::Url;

use super::socket::{self, Dial};
use super::{
    head_facts, too_slow, BrokenBody, Client, ConnectLog, Opened, Outgoing, Response, ResponseBody,
    SendError, SendFailure, WARM_TIMEOUT,
};
use crate::executor::template::RequestTemplate;

/// One HTTP/2 connection, and how many of its streams are in use.
struct Connection {
    sender: SendRequest<Full<Bytes>>,
    in_flight: AtomicUsize,
}

/// A server's open connections; locked while one to it opens, so that a burst of requests
/// opens as few as it needs.
type Connections = Arc<tokio::sync::Mutex<Vec<Arc<Connection>>>>;

/// The HTTP/2 transport.
pub(super) struct Http2 {
    /// Open connections per server (scheme and authority).
    servers: std::sync::Mutex<HashMap<String, Connections>>,
    /// Streams per connection before another is opened.
    streams: usize,
    log: Arc<ConnectLog>,
    connect_timeout: Duration,
    /// The run's TLS client, offering `h2` (and `http/1.1` with `http "auto"`).
    tls: tokio_rustls::TlsConnector,
    /// `http "auto"`: a server may choose HTTP/1.1.
    offer_http1: bool,
    /// Servers that chose HTTP/1.1 in a handshake (`http "auto"`).
    declined: std::sync::Mutex<std::collections::HashSet<String>>,
}

/// A request's hold on a stream of its connection, given back when its body ends or is
/// dropped.
struct Stream(Arc<Connection>);

impl Drop for Stream {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A response body from [`Http2`]: its DATA frames, one piece each.
pub struct Http2Body {
    body: hyper::body::Incoming,
    _stream: Stream,
}

impl Http2Body {
    /// The body's next piece; `None` at its end.
    pub(super) async fn next(&mut self) -> Option<Result<Bytes, BrokenBody>> {
        loop {
            match self.body.frame().await? {
                Ok(frame) => match frame.into_data() {
                    Ok(data) if !data.is_empty() => return Some(Ok(data)),
                    // An empty DATA frame (the end of the stream), or trailers.
                    _ => continue,
                },
                Err(err) => return Some(Err(BrokenBody::from_error(&err))),
            }
        }
    }
}

impl Http2 {
    pub(super) fn new(
        log: Arc<ConnectLog>,
        streams: usize,
        connect_timeout: Duration,
        tls: &crate::tls::Trust,
        offer_http1: bool,
    ) -> Http2 {
        let alpn: &[&[u8]] = if offer_http1 {
            &[b"h2", b"http/1.1"]
        } else {
            &[b"h2"]
        };
        Http2 {
            servers: Default::default(),
            streams: streams.max(1),
            log,
            connect_timeout,
            tls: tokio_rustls::TlsConnector::from(tls.client_config_for(alpn)),
            offer_http1,
            declined: Default::default(),
        }
    }

    /// Whether requests to `url` go over HTTP/2: always with `http "2"`; with `http "auto"`,
    /// over `https://` to a server not known to have chosen HTTP/1.1.
    pub(super) fn carries(&self, url: &Url) -> bool {
        if !self.offer_http1 {
            return true;
        }
        url.scheme() == "https"
            && self
                .declined
                .lock()
                .map_or(true, |declined| !declined.contains(&key(url)))
    }

    /// A stream on an open connection to `url`'s server with room, else on a new one (and how
    /// long opening it took).
    async fn stream(&self, url: &Url) -> Result<(Stream, Option<Opened>), SendError> {
        let server = self.server(url);
        let mut connections = server.lock().await;
        if !self.carries(url) {
            // Chosen while this request waited for the server's connections.
            return Err(http1_chosen(None));
        }
        connections.retain(|c| !c.sender.is_closed());
        let free = connections
            .iter()
            .find(|c| c.in_flight.load(Ordering::Relaxed) < self.streams);
        if let Some(connection) = free {
            connection.in_flight.fetch_add(1, Ordering::Relaxed);
            return Ok((Stream(connection.clone()), None));
        }
        let (connection, opened) = self.open(url).await?;
        connection.in_flight.fetch_add(1, Ordering::Relaxed);
        connections.push(connection.clone());
        Ok((Stream(connection), Some(opened)))
    }

    /// The open connections to `url`'s server (scheme and authority).
    fn server(&self, url: &Url) -> Connections {
        match self.servers.lock() {
            Ok(mut servers) => servers.entry(key(url)).or_default().clone(),
            // A panic elsewhere poisoned the map: this server's connections start afresh.
            Err(_) => Connections::default(),
        }
    }

    /// Opens a connection to `url`'s server and starts HTTP/2 on it.
    async fn open(&self, url: &Url) -> Result<(Arc<Connection>, Opened), SendError> {
        let tls = url.scheme() == "https";
        let dial = Dial {
            host: url.host_str().unwrap_or_default(),
            port: url.port_or_known_default().unwrap_or(80),
            tls: tls.then_some(&self.tls),
            timeout: self.connect_timeout,
        };
        let (socket, opened) = socket::open(dial, &self.log).await?;
        let refused = |why: String| {
            let (kind, detail) = socket::cannot(why);
            SendError {
                kind,
                detail,
                connect: Some(opened),
            }
        };
        if tls && socket.alpn() != Some(b"h2") {
            if self.offer_http1 {
                if let Ok(mut declined) = self.declined.lock() {
                    declined.insert(key(url));
                }
                return Err(http1_chosen(Some(opened)));
            }
            return Err(refused(
                "the server did not agree to HTTP/2 in the TLS handshake (ALPN): it speaks \
                 HTTP/1.1 only; use `http \"1.1\"`"
                    .into(),
            ));
        }
        let mut builder = hyper::client::conn::http2::Builder::new(TokioExecutor::new());
        builder.timer(TokioTimer::new());
        let (sender, connection) = builder.handshake(TokioIo::new(socket)).await.map_err(|e| {
            refused(format!(
                "HTTP/2 did not start: {}",
                crate::error::root_cause(&e)
            ))
        })?;
        tokio::spawn(connection);
        let connection = Arc::new(Connection {
            sender,
            in_flight: AtomicUsize::new(0),
        });
        Ok((connection, opened))
    }
}

/// A server's key: its scheme and authority.
fn key(url: &Url) -> String {
    format!("{}://{}", url.scheme(), url.authority())
}

/// What a request says when its server chose HTTP/1.1 (`http "auto"`): the transport sends it
/// over HTTP/1.1 instead, so no record keeps this.
fn http1_chosen(connect: Option<Opened>) -> SendError {
    SendError {
        kind: SendFailure::Connect,
        detail: "the server chose HTTP/1.1 in the TLS handshake".into(),
        connect,
    }
}

/// `outgoing` as an HTTP/2 request: the absolute URL (its scheme and authority become the
/// pseudo-headers), no connection-level headers (HTTP/2 forbids them).
fn request(outgoing: Outgoing<'_>) -> Result<hyper::Request<Full<Bytes>>, String> {
    let mut headers = outgoing.header_map();
    headers.remove(reqwest::header::HOST);
    headers.remove(reqwest::header::CONNECTION);
    let builder = match &outgoing.body {
        Some(_) => hyper::Request::post(outgoing.url.as_str()),
        None => hyper::Request::get(outgoing.url.as_str()),
    };
    let mut request = builder
        .body(Full::new(outgoing.body.unwrap_or_default()))
        .map_err(|e| format!("the request cannot be made: {e}"))?;
    *request.headers_mut() = headers;
    Ok(request)
}

impl Client for Http2 {
    async fn send(&self, outgoing: Outgoing<'_>) -> Result<Response, SendError> {
        let (stream, connect) = self.stream(outgoing.url).await?;
        let broken = |detail: String| SendError {
            kind: SendFailure::Broken,
            detail,
            connect,
        };
        let request = request(outgoing).map_err(broken)?;
        let mut sender = stream.0.sender.clone();
        let response = sender.send_request(request).await.map_err(|e| {
            broken(format!(
                "the stream failed before a response: {}",
                crate::error::root_cause(&e)
            ))
        })?;
        let facts = head_facts(response.headers());
        Ok(Response {
            status: response.status().as_u16(),
            content_type: facts.content_type,
            rate_limit: facts.rate_limit,
            server_request_id: facts.server_request_id,
            body: ResponseBody::Http2(Http2Body {
                body: response.into_body(),
                _stream: stream,
            }),
            connect,
            written: None,
        })
    }

    /// The connections `count` streams need (`count` / `streams`, rounded up, less those open),
    /// each opened and checked with a `GET` of `models` read to its end before the phase's
    /// clock. Returns how many connections are open for them.
    async fn warm(
        &self,
        models: &Url,
        template: &RequestTemplate,
        count: u64,
    ) -> (u64, Option<String>) {
        let needed = (count as usize).div_ceil(self.streams);
        let server = self.server(models);
        let mut connections = server.lock().await;
        connections.retain(|c| !c.sender.is_closed());
        while connections.len() < needed {
            let checked = tokio::time::timeout(WARM_TIMEOUT, self.check(models, template)).await;
            match checked.unwrap_or_else(|_| Err(too_slow())) {
                Ok(connection) => connections.push(connection),
                Err(error) => return (connections.len() as u64, Some(error)),
            }
        }
        (connections.len() as u64, None)
    }
}

impl Http2 {
    /// A new connection, proven by a `GET` of `models` read to its end.
    async fn check(
        &self,
        models: &Url,
        template: &RequestTemplate,
    ) -> Result<Arc<Connection>, String> {
        let (connection, _) = self.open(models).await.map_err(|e| e.detail)?;
        let outgoing = Outgoing {
            url: models,
            body: None,
            headers: &[],
            template,
            key: 0,
        };
        let mut sender = connection.sender.clone();
        let response = sender
            .send_request(request(outgoing)?)
            .await
            .map_err(|e| format!("GET /models failed: {}", crate::error::root_cause(&e)))?;
        let mut body = response.into_body();
        while let Some(frame) = body.frame().await {
            frame.map_err(|e| format!("GET /models broke off: {e}"))?;
        }
        Ok(connection)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::{HeaderName, HeaderValue};

    /// A request goes out in absolute form (its scheme and authority are HTTP/2's
    /// pseudo-headers) without the headers HTTP/2 forbids, its own kept.
    #[test]
    fn a_request_carries_no_connection_headers() {
        let url: Url = "https://h.example:8443/v1/chat/completions?api-version=1"
            .parse()
            .unwrap();
        let template = super::super::tests::template(&url);
        let headers = [
            (reqwest::header::HOST, HeaderValue::from_static("h.example")),
            (
                reqwest::header::CONNECTION,
                HeaderValue::from_static("keep-alive"),
            ),
            (
                HeaderName::from_static("x-request-id"),
                HeaderValue::from_static("r-1"),
            ),
        ];
        let outgoing = Outgoing {
            url: &url,
            body: Some(Bytes::from_static(b"{}")),
            headers: &headers,
            template: &template,
            key: 0,
        };
        let request = request(outgoing).unwrap();
        assert_eq!(request.method(), hyper::Method::POST);
        assert_eq!(request.uri().to_string(), url.as_str());
        assert!(request.headers().get("host").is_none());
        assert!(request.headers().get("connection").is_none());
        assert_eq!(request.headers()["x-request-id"], "r-1");
    }
}
