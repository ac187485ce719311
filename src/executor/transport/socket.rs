//! A direct connection's byte stream: a TCP socket, or TLS over one. One type, so that the
//! direct transport's writing, reading and pooling are the same code for `http://` and
//! `https://` targets; only opening one ([`super::direct`]) and telling whether an idle one is
//! still open differ.
//!
//! Not for framing HTTP (see [`super::http1`]) nor for what the TLS client trusts (see
//! `crate::tls`).

use std::io::IoSlice;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

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
