//! How a request reaches the server: an HTTP/1.1 connection of its own, taken from a pool or
//! opened for it, and timed.
//!
//! Two transports speak for the executor. `http://` and `https://` targets (every self-hosted
//! engine, hosted APIs, every test and benchmark) go through [`Direct`]: HTTP/1.1 written and
//! read by the request's own task over a pooled socket ([`http1`] frames it; [`socket`] is TCP
//! or rustls over it), one connection per request in flight, IP literals connected without a
//! resolver, each connection's setup timed for the request that opened it (DNS, TCP and the
//! TLS handshake apart). It exists because the general-purpose client cost about 2.5× a bare
//! hyper connection per request (request building, pool bookkeeping and a dispatch channel
//! sized for its request type: measured in docs/performance.md), a cost that lands on the
//! first wave's TTFT when hundreds of streams start at once; and because hyper's own
//! connection hands a chunked body over one chunk at a time, a token at a time from a
//! streaming server, where a read's chunks can be one piece (see [`http1`] for the numbers).
//! A target whose scheme has a proxy configured in the environment goes through reqwest,
//! which speaks to proxies; its connector is wrapped to time the connections it opens (in all:
//! the proxy's tunnel hides the parts), and a task-local slot gives each request the setup
//! time of the connection it opened. Both use the run's one TLS configuration (`crate::tls`).
//!
//! With `http "2"`, [`http2`] carries them instead: hyper's HTTP/2 client over connections
//! opened as the direct transport's are, requests multiplexed as streams.
//!
//! Each transport is a file of its own behind one trait, [`Client`]: [`direct`], [`http2`] and
//! [`via_reqwest`]; [`Transport`] picks one per URL. Every connection either opens is logged in
//! a [`ConnectLog`].
//!
//! It is not for reading responses (see [`super::request`]) nor for deciding how many
//! connections a phase needs (see [`super::connections`]).

mod direct;
mod http1;
mod http2;
mod socket;
mod via_reqwest;

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures_util::{Stream, StreamExt};
use reqwest::header::{HeaderName, HeaderValue};
use reqwest::Url;
use tokio::time::Instant;

use super::template::RequestTemplate;
use crate::error::root_cause;
use crate::records::Connections;
use direct::{Direct, DirectBody};
use http2::{Http2, Http2Body};
use via_reqwest::ViaReqwest;

/// What a request asks of the transport.
#[derive(Clone)]
pub struct Outgoing<'a> {
    /// Where it goes.
    pub url: &'a Url,
    /// The body to POST; `None` for a GET.
    pub body: Option<Bytes>,
    /// Headers besides the run's credentials and extra headers (which the template adds).
    pub headers: &'a [(HeaderName, HeaderValue)],
    /// The run's credentials and extra headers.
    pub template: &'a RequestTemplate,
    /// Which of the run's keys it carries.
    pub key: usize,
}

impl Outgoing<'_> {
    /// Its headers, then the run's credentials and extra headers.
    fn header_map(&self) -> reqwest::header::HeaderMap {
        let mut headers = reqwest::header::HeaderMap::with_capacity(self.headers.len() + 2);
        for (name, value) in self.headers {
            headers.insert(name.clone(), value.clone());
        }
        self.template.add_credentials(self.key, &mut headers);
        headers
    }
}

/// The head of a response, and its body to read.
pub struct Response {
    /// The HTTP status.
    pub status: u16,
    /// The `content-type` header, if any.
    pub content_type: Option<String>,
    /// What its headers said of the server's rate limits, if anything.
    pub rate_limit: Option<Box<crate::records::RateLimit>>,
    /// The server's own id of the request, from its headers.
    pub server_request_id: Option<String>,
    /// The body, read frame by frame as it arrives.
    pub body: ResponseBody,
    /// How long opening a new connection for this request took; `None` when it reused an
    /// open one.
    pub connect: Option<Opened>,
    /// When the request's last byte was handed to the connection's socket (the direct
    /// transport; `None` where it cannot tell).
    pub written: Option<tokio::time::Instant>,
}

/// Why a request got no response.
#[derive(Debug)]
pub struct SendError {
    /// What kind of failure.
    pub kind: SendFailure,
    /// What happened, in a sentence (never a header).
    pub detail: String,
    /// How long opening the connection took, if one was opened.
    pub connect: Option<Opened>,
}

/// How long opening a connection took: in all, and the parts a transport can tell apart.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Opened {
    /// From the start to a connection ready for the request: resolving the name, TCP's
    /// handshake, and TLS's over `https://`.
    pub total: Duration,
    /// Resolving the host's name; `None` for an IP address, or where not told apart (reqwest).
    pub dns: Option<Duration>,
    /// The TLS handshake; `None` over plain TCP, or where not told apart (reqwest).
    pub tls: Option<Duration>,
}

impl Opened {
    /// A connection whose opening is known only in all.
    pub(super) fn took(total: Duration) -> Opened {
        Opened {
            total,
            dns: None,
            tls: None,
        }
    }
}

/// What a response's head says that a record keeps, read from its parsed headers (reqwest's
/// and HTTP/2's; the direct HTTP/1.1 transport reads the same from its own parse).
pub(super) struct HeadFacts {
    pub content_type: Option<String>,
    pub rate_limit: Option<Box<crate::records::RateLimit>>,
    pub server_request_id: Option<String>,
}

/// The [`HeadFacts`] of `headers`: the server's request id is the first header, in the
/// response's order, that holds an id (as the direct transport takes it).
pub(super) fn head_facts(headers: &reqwest::header::HeaderMap) -> HeadFacts {
    let arrived = chrono::Utc::now();
    let mut limit = crate::records::RateLimit::default();
    let mut server_request_id = None;
    for (name, value) in headers {
        if crate::records::is_rate_limit_header(name.as_str()) {
            if let Ok(value) = value.to_str() {
                limit.note(name.as_str(), value, arrived);
            }
        } else if server_request_id.is_none()
            && crate::records::is_server_request_id_header(name.as_str())
        {
            server_request_id = crate::records::server_request_id(value.as_bytes());
        }
    }
    HeadFacts {
        content_type: headers
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string),
        rate_limit: (!limit.is_empty()).then(|| Box::new(limit)),
        server_request_id,
    }
}

/// What to do about a certificate the TLS handshake refused: the target's, signed by a CA of
/// its own (an internal endpoint) that the public and platform roots do not hold; or the
/// client's, which a mutual-TLS server asked for and did not get or did not accept.
pub(super) fn certificate_hint(cause: &str) -> &'static str {
    if cause.contains("UnknownIssuer") || cause.contains("invalid peer certificate") {
        " (its certificate is signed by a CA llmload does not trust: name that CA's PEM file with \
         `ca-file` in the target, or in SSL_CERT_FILE)"
    } else if cause.contains("CertificateRequired") {
        " (the server asks for a client certificate: give one with `client-cert` in the target)"
    } else if cause.contains("alert: BadCertificate") || cause.contains("alert: UnknownCA") {
        " (the server did not accept the client certificate: check `client-cert`)"
    } else {
        ""
    }
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

/// A response body that broke off while it was read: its innermost cause, as people read it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct BrokenBody(String);

impl BrokenBody {
    /// The body broke off because of `err`.
    pub(super) fn from_error(err: &(dyn std::error::Error + 'static)) -> BrokenBody {
        BrokenBody(root_cause(err))
    }
}

/// A response body, read frame by frame.
pub enum ResponseBody {
    /// From [`Direct`]: the connection goes back to the pool once the body has been read to
    /// its end.
    Direct(DirectBody),
    /// From [`Http2`]: the stream's hold on its connection ends with the body.
    Http2(Http2Body),
    /// From reqwest.
    Reqwest(Pin<Box<dyn Stream<Item = reqwest::Result<Bytes>> + Send>>),
}

impl ResponseBody {
    /// The next piece of the body; `None` at its end; an error (as people read it) when it
    /// broke off.
    pub async fn next(&mut self) -> Option<Result<Bytes, BrokenBody>> {
        match self {
            ResponseBody::Direct(body) => body.next().await,
            ResponseBody::Http2(body) => body.next().await,
            ResponseBody::Reqwest(stream) => stream
                .next()
                .await
                .map(|read| read.map_err(|e| BrokenBody::from_error(&e))),
        }
    }
}

/// Every connection the client opened: when it was ready, how long it took, whether it worked.
#[derive(Default)]
pub struct ConnectLog {
    opened: Mutex<Vec<(Instant, Opened, bool)>>,
    /// When a connection was dropped because the server sent bytes no request asked for.
    stray: Mutex<Vec<Instant>>,
}

impl ConnectLog {
    pub(crate) fn record(&self, took: Opened, ok: bool) {
        if let Ok(mut opened) = self.opened.lock() {
            opened.push((Instant::now(), took, ok));
        }
    }

    /// A connection dropped for bytes nobody asked for (on it while idle, after a response's
    /// end, or a 408 on a connection that had been idle).
    pub(crate) fn record_stray(&self) {
        if let Ok(mut stray) = self.stray.lock() {
            stray.push(Instant::now());
        }
    }

    /// The connections that were ready between `from` and `to`, and how long they took.
    pub fn between(&self, from: Instant, to: Instant, warmed: u64) -> Connections {
        let (mut took, mut tls): (Vec<f64>, Vec<f64>) = Default::default();
        let mut failed = 0;
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        if let Ok(opened) = self.opened.lock() {
            for &(at, opened, ok) in opened.iter() {
                if at >= from && at <= to {
                    if ok {
                        took.push(ms(opened.total));
                        tls.extend(opened.tls.map(ms));
                    } else {
                        failed += 1;
                    }
                }
            }
        }
        took.sort_by(f64::total_cmp);
        tls.sort_by(f64::total_cmp);
        let stray = self.stray.lock().map_or(0, |stray| {
            stray.iter().filter(|&&at| at >= from && at <= to).count() as u64
        });
        Connections {
            stray,
            warmed,
            opened: took.len() as u64,
            failed,
            connect_ms_p50: took.get(took.len() / 2).copied(),
            connect_ms_max: took.last().copied(),
            tls_ms_p50: tls.get(tls.len() / 2).copied(),
        }
    }
}

/// One way of carrying requests: how it sends one, and how it leaves connections open and
/// checked before a phase's clock starts.
pub(super) trait Client {
    /// Sends `outgoing` and returns the response's head once it arrives.
    async fn send(&self, outgoing: Outgoing<'_>) -> Result<Response, SendError>;

    /// Leaves `count` connections to the server of `models` open, checked and idle in its pool.
    /// Returns how many, and the first failure.
    async fn warm(
        &self,
        models: &Url,
        template: &RequestTemplate,
        count: u64,
    ) -> (u64, Option<String>);
}

/// The executor's HTTP client: [`Direct`] or reqwest, chosen per target URL.
pub struct Transport {
    direct: Direct,
    /// With `http "2"`: every request not through a proxy goes over HTTP/2.
    http2: Option<Http2>,
    reqwest: ViaReqwest,
    /// Whether a proxy is configured in the environment for `http://` and for `https://`
    /// targets: then reqwest carries them (it speaks to proxies, and honours `NO_PROXY`).
    proxied: [bool; 2],
}

impl Transport {
    /// A transport whose every connection is logged in `log`, keeping up to `max_idle` idle
    /// connections per server.
    pub fn new(
        log: Arc<ConnectLog>,
        max_idle: usize,
        connect_timeout: Duration,
        tls: &crate::tls::Trust,
        http: crate::plan::HttpVersion,
    ) -> Result<Self, via_reqwest::ClientBuildError> {
        use crate::plan::HttpVersion;
        let http2 = |streams: u32, offer_http1: bool| {
            let streams = streams as usize;
            Http2::new(log.clone(), streams, connect_timeout, tls, offer_http1)
        };
        let http2 = match http {
            HttpVersion::Http1 => None,
            HttpVersion::Http2 { streams } => Some(http2(streams, false)),
            HttpVersion::Auto { streams } => Some(http2(streams, true)),
        };
        Ok(Transport {
            http2,
            reqwest: ViaReqwest::new(log.clone(), max_idle, connect_timeout, tls)?,
            direct: Direct::new(log, max_idle, connect_timeout, tls),
            proxied: [Scheme::Http, Scheme::Https]
                .map(|scheme| proxy_configured(scheme, std::env::vars_os())),
        })
    }

    /// Which client carries requests to `url`: reqwest when a proxy is configured for its
    /// scheme (it speaks to proxies), else HTTP/2 when the plan asks for it, else the direct
    /// HTTP/1.1 transport.
    fn carrier(&self, url: &Url) -> Carrier<'_> {
        let proxied = match url.scheme() {
            "http" => self.proxied[Scheme::Http as usize],
            "https" => self.proxied[Scheme::Https as usize],
            _ => true,
        };
        match (&self.http2, proxied) {
            (_, true) => Carrier::Reqwest,
            (Some(http2), false) if http2.carries(url) => Carrier::Http2(http2),
            (_, false) => Carrier::Direct,
        }
    }

    /// Sends `outgoing` and returns the response's head once it arrives.
    pub async fn send(&self, outgoing: Outgoing<'_>) -> Result<Response, SendError> {
        match self.carrier(outgoing.url) {
            Carrier::Direct => self.direct.send(outgoing).await,
            Carrier::Http2(http2) => {
                let again = outgoing.clone();
                match http2.send(outgoing).await {
                    // `http "auto"`: the server chose HTTP/1.1 in the handshake just made.
                    Err(_) if !http2.carries(again.url) => self.direct.send(again).await,
                    sent => sent,
                }
            }
            Carrier::Reqwest => self.reqwest.send(outgoing).await,
        }
    }

    /// [`Transport::send`] on a connection opened for it: the re-send after a pooled one was
    /// found closed (another idle connection of the same server may have been closed too).
    /// reqwest keeps its own pool, and its own re-send of such a request.
    pub async fn send_fresh(&self, outgoing: Outgoing<'_>) -> Result<Response, SendError> {
        match self.carrier(outgoing.url) {
            Carrier::Direct => self.direct.send_on(outgoing, false).await,
            Carrier::Http2(http2) => http2.send(outgoing).await,
            Carrier::Reqwest => self.reqwest.send(outgoing).await,
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
        match self.carrier(models) {
            Carrier::Direct => self.direct.warm(models, template, count).await,
            Carrier::Http2(http2) => match http2.warm(models, template, count).await {
                (0, Some(_)) if !http2.carries(models) => {
                    self.direct.warm(models, template, count).await
                }
                warmed => warmed,
            },
            Carrier::Reqwest => self.reqwest.warm(models, template, count).await,
        }
    }
}

/// The client a request goes through.
enum Carrier<'a> {
    Direct,
    Http2(&'a Http2),
    Reqwest,
}

/// How long a warm-up request may take.
pub(super) const WARM_TIMEOUT: Duration = Duration::from_secs(10);

/// What a warm-up request that took longer than [`WARM_TIMEOUT`] says.
pub(super) fn too_slow() -> String {
    format!(
        "no answer to GET /models within {} s",
        WARM_TIMEOUT.as_secs()
    )
}

/// How many connections the direct transport's warm-up opens or checks at once: 10,000 open in
/// well under a second on loopback, a server's accept queue (128 to 4,096 in common servers)
/// is not flooded, and the warm-up's own state stays small (10,000 requests at once raised the
/// client's peak memory by 10–15 MB).
pub(super) const WARM_AT_ONCE: usize = 256;

/// A target URL's scheme, as proxies are configured per scheme.
#[derive(Clone, Copy)]
enum Scheme {
    Http = 0,
    Https = 1,
}

/// Whether the environment `vars` configures a proxy for `scheme`, as reqwest reads them
/// (`http_proxy`, `https_proxy`, `all_proxy`, either case): reqwest then carries such targets,
/// as the direct transport does not speak to proxies. (`NO_PROXY` is left to reqwest: a target
/// it exempts still goes through reqwest, directly, at reqwest's cost.)
fn proxy_configured(
    scheme: Scheme,
    vars: impl Iterator<Item = (std::ffi::OsString, std::ffi::OsString)>,
) -> bool {
    let own = match scheme {
        Scheme::Http => "http_proxy",
        Scheme::Https => "https_proxy",
    };
    vars.into_iter().any(|(name, value)| {
        let name = name.to_string_lossy().to_ascii_lowercase();
        (name == own || name == "all_proxy") && !value.is_empty()
    })
}

/// When an I/O failure is the client itself running out of something (file descriptors,
/// ephemeral ports, buffers), what; such failures are the client's, never the server's.
pub(super) fn client_limit(io: &std::io::Error) -> Option<String> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{Api, SimSettings};

    pub(super) fn template(url: &Url) -> RequestTemplate {
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
            keys: Arc::new(vec![Default::default()]),
            headers: Default::default(),
            timeout: Duration::from_secs(10),
            on_throttle: Default::default(),
            request_id_prefix: "t".into(),
            max_line: 1 << 20,
            max_body: 1 << 20,
            route_answered: Default::default(),
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
        let mut transport = Transport::new(
            log.clone(),
            max_idle,
            Duration::from_secs(5),
            &Default::default(),
            Default::default(),
        )
        .unwrap();
        transport.proxied = [proxied; 2];
        (log, transport)
    }

    /// A proxy for a scheme sends that scheme's targets through reqwest; `all_proxy` both.
    #[test]
    fn a_proxy_is_configured_per_scheme() {
        let vars = |pairs: &[(&str, &str)]| {
            pairs
                .iter()
                .map(|(n, v)| (n.into(), v.into()))
                .collect::<Vec<(std::ffi::OsString, std::ffi::OsString)>>()
        };
        type Env<'a> = &'a [(&'a str, &'a str)];
        let cases: &[(Env, [bool; 2])] = &[
            (&[], [false, false]),
            (&[("HTTPS_PROXY", "http://p:3128")], [false, true]),
            (&[("http_proxy", "http://p:3128")], [true, false]),
            (&[("ALL_PROXY", "socks5://p")], [true, true]),
            (&[("https_proxy", "")], [false, false]),
            (&[("NO_PROXY", "*")], [false, false]),
        ];
        for (env, expected) in cases {
            let got = [Scheme::Http, Scheme::Https]
                .map(|scheme| proxy_configured(scheme, vars(env).into_iter()));
            assert_eq!(got, *expected, "{env:?}");
        }
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
                        key: 0,
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
                    assert_eq!(transport.direct.idle_to(&url), 9);
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
                key: 0,
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

    /// The direct transport says when a body's last byte was taken by the socket: a server
    /// that reads a 32 MiB body (more than loopback's socket buffers hold) only after 300 ms
    /// makes the upload last at least that long, and its answer comes after it; a small body
    /// goes out at once.
    #[test]
    fn the_direct_transport_times_a_bodys_upload() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        on_a_runtime(async {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let port = listener.local_addr().unwrap().port();
            tokio::spawn(async move {
                let (mut socket, _) = listener.accept().await.unwrap();
                for delay_ms in [300, 0] {
                    // The head, then (after the delay) the body's length's worth of bytes.
                    let length = request_head(&mut socket).await;
                    tokio::time::sleep(Duration::from_millis(delay_ms)).await;
                    let mut body = vec![0u8; length];
                    socket.read_exact(&mut body).await.unwrap();
                    socket
                        .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}")
                        .await
                        .unwrap();
                }
            });
            let url: Url = format!("http://127.0.0.1:{port}/v1/chat/completions")
                .parse()
                .unwrap();
            let template = template(&url);
            let (_, transport) = logged_transport(4, false);
            for (bytes, at_least_ms, at_most_ms) in [(32usize << 20, 250, 10_000), (1024, 0, 100)] {
                let started = tokio::time::Instant::now();
                let outgoing = Outgoing {
                    url: &url,
                    body: Some(Bytes::from(vec![b'x'; bytes])),
                    headers: &[],
                    template: &template,
                    key: 0,
                };
                let mut response = transport.send(outgoing).await.unwrap();
                let answered = tokio::time::Instant::now();
                while response.body.next().await.is_some() {}
                let written = response.written.expect("the direct transport tells");
                let upload = written.duration_since(started).as_millis();
                assert!(
                    (at_least_ms..=at_most_ms).contains(&upload),
                    "{bytes} bytes: upload {upload} ms"
                );
                assert!(written <= answered);
            }
        });
    }

    /// Reads a request's head from `socket` byte by byte (so that none of its body is taken),
    /// and returns its `content-length` (0 without one).
    async fn request_head(socket: &mut tokio::net::TcpStream) -> usize {
        use tokio::io::AsyncReadExt;
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            socket.read_exact(&mut byte).await.unwrap();
            head.push(byte[0]);
        }
        String::from_utf8_lossy(&head)
            .to_ascii_lowercase()
            .lines()
            .find_map(|l| l.strip_prefix("content-length: "))
            .map_or(0, |l| l.trim().parse().unwrap())
    }

    /// POSTs `{}` to `url` and reads the whole answer: its body, and how it broke off if it did.
    async fn post_and_read(
        transport: &Transport,
        url: &Url,
        template: &RequestTemplate,
    ) -> (Vec<u8>, Option<String>) {
        let outgoing = Outgoing {
            url,
            body: Some(Bytes::from_static(b"{}")),
            headers: &[],
            template,
            key: 0,
        };
        let mut response = transport.send(outgoing).await.unwrap();
        let (mut text, mut broken) = (Vec::new(), None);
        while let Some(piece) = response.body.next().await {
            match piece {
                Ok(bytes) => text.extend_from_slice(&bytes),
                Err(err) => broken = Some(err.to_string()),
            }
        }
        (text, broken)
    }

    /// The direct transport reads each connection in the task of the request holding it: a
    /// chunked answer arrives whole and in order whether its chunks come one per read (each
    /// a wake-up from the socket, on another worker thread) or many per read, and a kept-alive
    /// connection serves the next request from another task just as well. A lost wake-up
    /// stalls a request, and the time limit fails it.
    #[test]
    fn the_direct_transport_hands_over_every_chunk_whatever_the_reads() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        const CHUNKS: usize = 120;
        let chunk = |i: usize| format!("data: {{\"n\":{i}}}\n\n");
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let port = listener.local_addr().unwrap().port();
            tokio::spawn(async move {
                let (mut socket, _) = listener.accept().await.unwrap();
                for _ in 0..3 {
                    let length = request_head(&mut socket).await;
                    let mut body = vec![0u8; length];
                    socket.read_exact(&mut body).await.unwrap();
                    socket
                        .write_all(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
                        .await
                        .unwrap();
                    let mut pending = String::new();
                    for i in 0..CHUNKS {
                        let data = chunk(i);
                        pending.push_str(&format!("{:x}\r\n{data}\r\n", data.len()));
                        // A third one per read, a little apart; the rest forty per write.
                        if i < CHUNKS / 3 || i % 40 == 39 {
                            socket.write_all(pending.as_bytes()).await.unwrap();
                            pending.clear();
                            if i < CHUNKS / 3 {
                                tokio::time::sleep(Duration::from_millis(2)).await;
                            }
                        }
                    }
                    pending.push_str("0\r\n\r\n");
                    socket.write_all(pending.as_bytes()).await.unwrap();
                }
            });
            let url: Url = format!("http://127.0.0.1:{port}/v1/completions")
                .parse()
                .unwrap();
            let template = Arc::new(template(&url));
            let (log, transport) = logged_transport(4, false);
            let transport = Arc::new(transport);
            let expected: String = (0..CHUNKS).map(chunk).collect();
            let began = Instant::now();
            for request in 0..3 {
                let (url, template, transport) = (url.clone(), template.clone(), transport.clone());
                // Each request on a task of its own, as the executor sends them.
                let read = tokio::spawn(async move {
                    let (text, broken) = post_and_read(&transport, &url, &template).await;
                    assert_eq!(broken, None);
                    String::from_utf8(text).unwrap()
                });
                let text = tokio::time::timeout(Duration::from_secs(20), read)
                    .await
                    .unwrap_or_else(|_| panic!("request {request} stalled"))
                    .unwrap();
                assert_eq!(text, expected, "request {request}");
            }
            let opened = log.between(began, Instant::now(), 0);
            assert_eq!(opened.opened, 1, "one connection, kept alive");
        });
    }

    /// Each way a server may frame its answer, read by the direct transport: the body (or how
    /// it broke off), and whether the connection served the next request. Only a connection
    /// left clean (its body read to the end, nothing after it, not closed or said to be) is
    /// reused; a server's close while it was idle is seen before a request is written on it.
    #[test]
    fn the_direct_transport_reads_each_framing_and_reuses_only_clean_connections() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        const HEAD: &str = "HTTP/1.1 200 OK\r\n";
        // (name, answer, server closes after it, body or error, connection reused)
        type Case = (
            &'static str,
            String,
            bool,
            Result<&'static str, &'static str>,
            bool,
        );
        let cases: Vec<Case> = vec![
            (
                "chunked",
                format!("{HEAD}transfer-encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"),
                false,
                Ok("abc"),
                true,
            ),
            (
                "length",
                format!("{HEAD}content-length: 3\r\n\r\nabc"),
                false,
                Ok("abc"),
                true,
            ),
            (
                "no body",
                "HTTP/1.1 204 No Content\r\n\r\n".into(),
                false,
                Ok(""),
                true,
            ),
            (
                "said close",
                format!("{HEAD}content-length: 3\r\nconnection: close\r\n\r\nabc"),
                true,
                Ok("abc"),
                false,
            ),
            (
                "until close",
                format!("{HEAD}\r\nabc"),
                true,
                Ok("abc"),
                false,
            ),
            (
                "closed when idle",
                format!("{HEAD}content-length: 3\r\n\r\nabc"),
                true,
                Ok("abc"),
                false,
            ),
            (
                "bytes after",
                format!("{HEAD}content-length: 3\r\n\r\nabcXYZ"),
                false,
                Ok("abc"),
                false,
            ),
            (
                "cut short",
                format!("{HEAD}content-length: 9\r\n\r\nabc"),
                true,
                Err("before the body's end"),
                false,
            ),
            (
                "bad chunk",
                format!("{HEAD}transfer-encoding: chunked\r\n\r\nzz\r\n"),
                false,
                Err("no size"),
                false,
            ),
        ];
        on_a_runtime(async move {
            for (name, answer, close, expected, reused) in cases {
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
                let port = listener.local_addr().unwrap().port();
                let answer = Arc::new(answer);
                tokio::spawn(async move {
                    while let Ok((mut socket, _)) = listener.accept().await {
                        let answer = answer.clone();
                        tokio::spawn(async move {
                            loop {
                                let length = request_head(&mut socket).await;
                                let mut body = vec![0u8; length];
                                socket.read_exact(&mut body).await.unwrap();
                                if socket.write_all(answer.as_bytes()).await.is_err() || close {
                                    return;
                                }
                            }
                        });
                    }
                });
                let url: Url = format!("http://127.0.0.1:{port}/v1/completions")
                    .parse()
                    .unwrap();
                let template = template(&url);
                let (log, transport) = logged_transport(4, false);
                let began = Instant::now();
                for request in 0..2 {
                    let (text, broken) = post_and_read(&transport, &url, &template).await;
                    match (expected, broken) {
                        (Ok(body), None) => assert_eq!(text, body.as_bytes(), "{name}"),
                        (Err(says), Some(err)) => assert!(err.contains(says), "{name}: {err}"),
                        (expected, broken) => {
                            panic!("{name} #{request}: {expected:?}, got {broken:?}")
                        }
                    }
                    // Time for a server's close to reach the client.
                    tokio::time::sleep(Duration::from_millis(30)).await;
                }
                let opened = log.between(began, Instant::now(), 0).opened;
                assert_eq!(opened, if reused { 1 } else { 2 }, "{name}");
            }
        });
    }

    #[test]
    fn connections_are_counted_in_their_window() {
        let log = ConnectLog::default();
        let before = Instant::now();
        let over_tls = |total, tls| Opened {
            tls: Some(Duration::from_millis(tls)),
            ..Opened::took(Duration::from_millis(total))
        };
        log.record(over_tls(3, 2), true);
        log.record(over_tls(9, 5), true);
        log.record(Opened::took(Duration::from_millis(1)), false);
        let after = Instant::now();
        let c = log.between(before, after, 4);
        assert_eq!((c.warmed, c.opened, c.failed), (4, 2, 1));
        assert_eq!(c.connect_ms_max, Some(9.0));
        assert_eq!(c.connect_ms_p50, Some(9.0));
        assert_eq!(c.tls_ms_p50, Some(5.0));
        let none = log.between(
            after + Duration::from_secs(1),
            after + Duration::from_secs(2),
            0,
        );
        assert_eq!(none.opened, 0);
        assert_eq!(none.connect_ms_max, None);
    }
}
