//! A direct connection's byte stream: a TCP socket, or TLS over one, and how one is opened
//! (the name resolved, TCP, the TLS handshake, each timed). One type, so that the direct
//! transport's writing, reading and pooling are the same code for `http://` and `https://`
//! targets, and HTTP/2's connections open as HTTP/1.1's do; only telling whether an idle one
//! is still open differs.
//!
//! Not for framing HTTP (see [`super::http1`]) nor for what the TLS client trusts (see
//! `crate::tls`).

use std::io::IoSlice;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::Instant;
use tokio_rustls::client::TlsStream;

use super::{certificate_hint, client_limit, ConnectLog, Opened, SendError, SendFailure};
use crate::error::root_cause;

/// Where a connection goes, and how long it may take to open.
pub(super) struct Dial<'a> {
    /// The host as the URL names it (an IP literal needs no resolver; `[::1]` too).
    pub host: &'a str,
    pub port: u16,
    /// The TLS client, over `https://`.
    pub tls: Option<&'a tokio_rustls::TlsConnector>,
    /// For the name, TCP and TLS together.
    pub timeout: Duration,
}

/// Opens a connection as `dial` says, timed (the name's resolving, TCP, the TLS handshake
/// apart) and logged in `log`.
pub(super) async fn open(dial: Dial<'_>, log: &ConnectLog) -> Result<(Socket, Opened), SendError> {
    let started = Instant::now();
    let timeout = dial.timeout;
    let opened = tokio::time::timeout(timeout, connect(dial))
        .await
        .unwrap_or_else(|_| {
            Err(cannot(format!(
                "no connection within {} s",
                timeout.as_secs_f64()
            )))
        });
    let total = started.elapsed();
    match opened {
        Ok((socket, dns, tls)) => {
            let opened = Opened { total, dns, tls };
            log.record(opened, true);
            Ok((socket, opened))
        }
        Err((kind, detail)) => {
            log.record(Opened::took(total), false);
            Err(SendError {
                kind,
                detail,
                connect: None,
            })
        }
    }
}

/// A connection that could not be made, and why (HTTP/2's refusals after the handshake too).
pub(super) fn cannot(why: String) -> (SendFailure, String) {
    (
        SendFailure::Connect,
        format!("cannot connect to the target: {why}"),
    )
}

/// A socket just opened, how long resolving its server's name took and how long its TLS
/// handshake took (`None`: not done).
type Connected = (Socket, Option<Duration>, Option<Duration>);

/// The address (an IP literal needs no resolver), TCP with Nagle off, and the TLS handshake
/// when asked.
async fn connect(dial: Dial<'_>) -> Result<Connected, (SendFailure, String)> {
    let host = dial.host.trim_start_matches('[').trim_end_matches(']');
    let (addresses, dns): (Vec<SocketAddr>, _) = match host.parse::<std::net::IpAddr>() {
        Ok(ip) => (vec![SocketAddr::new(ip, dial.port)], None),
        Err(_) => {
            let started = Instant::now();
            match tokio::net::lookup_host((host, dial.port)).await {
                Ok(found) => (found.collect(), Some(started.elapsed())),
                Err(err) => return Err(cannot(format!("cannot resolve {host}: {err}"))),
            }
        }
    };
    let mut last_error = None;
    let mut stream = None;
    for address in &addresses {
        match TcpStream::connect(address).await {
            Ok(connected) => {
                stream = Some(connected);
                break;
            }
            Err(err) => last_error = Some(err),
        }
    }
    let Some(stream) = stream else {
        let err = last_error.unwrap_or_else(|| {
            std::io::Error::new(std::io::ErrorKind::NotFound, "no address found")
        });
        return Err(match client_limit(&err) {
            Some(limit) => (SendFailure::ClientLimit, limit),
            None => cannot(err.to_string()),
        });
    };
    let _ = stream.set_nodelay(true);
    let Some(tls) = dial.tls else {
        return Ok((Socket::Plain(stream), dns, None));
    };
    let name = rustls::pki_types::ServerName::try_from(host.to_string())
        .map_err(|_| cannot(format!("{host} is not a name TLS can check")))?;
    let started = Instant::now();
    match tls.connect(name, stream).await {
        Ok(tls) => Ok((Socket::Tls(Box::new(tls)), dns, Some(started.elapsed()))),
        Err(err) => {
            let cause = root_cause(&err);
            Err(cannot(format!(
                "TLS handshake failed: {cause}{}",
                certificate_hint(&cause)
            )))
        }
    }
}

/// A connection's stream.
pub(super) enum Socket {
    /// `http://`.
    Plain(TcpStream),
    /// `https://`: boxed, as a TLS session's state (~1 KiB besides its buffers) would
    /// otherwise size every plain connection too.
    Tls(Box<TlsStream<TcpStream>>),
}

/// What an idle connection's socket holds, asked without waiting.
pub(super) enum Idle {
    /// Nothing to read: open.
    Open,
    /// Ended (the server closed it, or it failed).
    Closed,
    /// Bytes that answer nothing.
    Bytes,
}

impl Socket {
    /// The protocol the TLS handshake agreed (ALPN), if any.
    pub(super) fn alpn(&self) -> Option<&[u8]> {
        match self {
            Socket::Plain(_) => None,
            Socket::Tls(stream) => stream.get_ref().1.alpn_protocol(),
        }
    }

    /// What an idle connection's socket holds now. Over TLS the probe reads through the
    /// session, so what a TLS 1.3 server sends after the handshake (session tickets, which
    /// carry no data) is taken by rustls and does not count as bytes: only data, or the
    /// session's end, do.
    pub(super) fn idle(&mut self) -> Idle {
        let mut probe = [0u8; 1];
        match self {
            Socket::Plain(stream) => match stream.try_read(&mut probe) {
                Err(err) if err.kind() == std::io::ErrorKind::WouldBlock => Idle::Open,
                Ok(n) if n > 0 => Idle::Bytes,
                _ => Idle::Closed,
            },
            Socket::Tls(stream) => {
                let mut context = Context::from_waker(futures_util::task::noop_waker_ref());
                let mut buf = ReadBuf::new(&mut probe);
                match Pin::new(stream.as_mut()).poll_read(&mut context, &mut buf) {
                    Poll::Pending => Idle::Open,
                    Poll::Ready(Ok(())) if !buf.filled().is_empty() => Idle::Bytes,
                    Poll::Ready(_) => Idle::Closed,
                }
            }
        }
    }
}

impl AsyncRead for Socket {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Socket::Plain(stream) => Pin::new(stream).poll_read(cx, buf),
            Socket::Tls(stream) => Pin::new(stream.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Socket {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Socket::Plain(stream) => Pin::new(stream).poll_write(cx, buf),
            Socket::Tls(stream) => Pin::new(stream.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Socket::Plain(stream) => Pin::new(stream).poll_write_vectored(cx, bufs),
            Socket::Tls(stream) => Pin::new(stream.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Socket::Plain(stream) => stream.is_write_vectored(),
            Socket::Tls(stream) => stream.is_write_vectored(),
        }
    }

    /// Over TLS, what rustls has encrypted and not yet written goes out: a request is sent
    /// only once flushed.
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Socket::Plain(stream) => Pin::new(stream).poll_flush(cx),
            Socket::Tls(stream) => Pin::new(stream.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Socket::Plain(stream) => Pin::new(stream).poll_shutdown(cx),
            Socket::Tls(stream) => Pin::new(stream.as_mut()).poll_shutdown(cx),
        }
    }
}
