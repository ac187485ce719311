//! The calibrated server: the cheapest server that still streams what vLLM streams, so that a
//! client's ceiling is the client's and not the server's (`llmload sim` renders every chunk
//! through serde and hyper, and one core of it tops out near 150,000 tokens/s, below what one
//! client core can read).
//!
//! It answers `POST …/completions` with vLLM's completions chunks byte for byte in shape
//! (`{"id":…,"object":"text_completion","created":…,"model":…,"choices":[{"index":0,"text":…,
//! "logprobs":null,"finish_reason":null,"stop_reason":null}]}`, the last token's chunk with
//! `"finish_reason":"length"`, a usage chunk with `"choices":[]`, then `data: [DONE]`), one
//! token per chunk and one `write` per chunk, as an engine flushes each step's token; between
//! two tokens of a stream it lets every other stream write one (an engine's step over its
//! batch). Delays: `SERVER_TTFT_US` after the request's last byte, then `SERVER_ITL_US` between
//! tokens (0 and 0: as fast as the socket takes them). It keeps the truth as `llmload sim
//! --record-writes` does (the request's arrival, each token's write), served at
//! `GET /llmload/writes`, so `llmload::selfcheck::fidelity` reads either server.
//!
//! With `SERVER_TLS_CERT` and `SERVER_TLS_KEY` (PEM files) it serves `https://` (rustls, as
//! `llmload sim --tls-cert` does) and keeps a plain port beside it for `GET /llmload/writes`,
//! named after the https URL on its first line, so the truth is read without TLS.
//!
//! Hand-written HTTP/1.1 on purpose: it is the benchmark's instrument, not llmload's code, and
//! its cost per token (a `format!` of one chunk and one `write`) is the floor a real server has.
//! Not for anything but loopback benchmarks: it trusts its client.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use llmload::sim::writes::WriteLog;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;

/// Words a BPE tokenizer keeps as one token each, so a chunk is a token for every client.
const WORDS: [&str; 8] = [" the", " of", " and", " to", " in", " is", " that", " for"];

/// Numbers each streamed response's id.
static RESPONSES: AtomicU64 = AtomicU64::new(0);

pub fn main() {
    let micros = |name: &str| {
        Duration::from_micros(
            std::env::var(name)
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(0),
        )
    };
    let (ttft, itl) = (micros("SERVER_TTFT_US"), micros("SERVER_ITL_US"));
    let tokens_per_write: u64 = std::env::var("SERVER_TOKENS_PER_WRITE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1)
        .max(1);
    // Up to the hard limit: 4,000 streams are 4,000 sockets.
    llmload::executor::resources::raise_open_file_limit();
    // One thread: the server is pinned to one core, and its cost is what it is on one core.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let tls = tls_acceptor();
    runtime.block_on(async move {
        let listener = listen();
        let port = listener.local_addr().expect("an address").port();
        let truth = Arc::new(WriteLog::new());
        let delays = (ttft, itl, tokens_per_write);
        match tls {
            None => println!("calibrated server on http://127.0.0.1:{port}/v1"),
            Some(_) => {
                // The truth's own plain port.
                let plain = listen();
                let plain_port = plain.local_addr().expect("an address").port();
                println!(
                    "calibrated server on https://127.0.0.1:{port}/v1 truth on http://127.0.0.1:{plain_port}/v1"
                );
                tokio::spawn(serve(plain, None, truth.clone(), delays));
            }
        }
        serve(listener, tls, truth, delays).await;
    });
}

/// A listening socket on a free loopback port, with a backlog like uvicorn's and llmload sim's:
/// 4,000 cold connections at once.
fn listen() -> TcpListener {
    let socket = tokio::net::TcpSocket::new_v4().expect("a socket");
    socket.set_reuseaddr(true).expect("SO_REUSEADDR");
    socket
        .bind("127.0.0.1:0".parse().expect("an address"))
        .expect("bind");
    socket.listen(4096).expect("listen")
}

/// The TLS acceptor `SERVER_TLS_CERT` and `SERVER_TLS_KEY` ask for, if they do.
fn tls_acceptor() -> Option<tokio_rustls::TlsAcceptor> {
    let cert = std::fs::read(std::env::var("SERVER_TLS_CERT").ok()?).expect("the certificate");
    let key = std::fs::read(std::env::var("SERVER_TLS_KEY").ok()?).expect("the key");
    let files = llmload::sim::TlsFiles {
        cert: &cert,
        key: &key,
        client_ca: None,
    };
    let config = llmload::sim::tls_server_config(files).expect("a TLS configuration");
    Some(tokio_rustls::TlsAcceptor::from(config))
}

/// Serves every connection `listener` accepts (over TLS with `tls`).
async fn serve(
    listener: TcpListener,
    tls: Option<tokio_rustls::TlsAcceptor>,
    truth: Arc<WriteLog>,
    (ttft, itl, tokens_per_write): (Duration, Duration, u64),
) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let _ = stream.set_nodelay(true);
        let (truth, tls) = (truth.clone(), tls.clone());
        tokio::spawn(async move {
            match tls {
                None => connection(stream, truth, ttft, itl, tokens_per_write).await,
                Some(tls) => {
                    if let Ok(stream) = tls.accept(stream).await {
                        connection(stream, truth, ttft, itl, tokens_per_write).await
                    }
                }
            }
        });
    }
}

/// A connection's stream: TCP, or TLS over it.
trait Socket: AsyncRead + AsyncWrite + Unpin {}
impl<S: AsyncRead + AsyncWrite + Unpin> Socket for S {}

/// One connection: requests one after the other until the client closes it.
async fn connection(
    mut stream: impl Socket,
    truth: Arc<WriteLog>,
    ttft: Duration,
    itl: Duration,
    tokens_per_write: u64,
) {
    let mut buffer: Vec<u8> = Vec::with_capacity(16 * 1024);
    loop {
        // Headers.
        let header_end = loop {
            if let Some(at) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
                break at + 4;
            }
            if !read_more(&mut stream, &mut buffer).await {
                return;
            }
        };
        let head = String::from_utf8_lossy(&buffer[..header_end]).into_owned();
        let header = |name: &str| {
            head.lines().find_map(|line| {
                let (key, value) = line.split_once(':')?;
                key.trim()
                    .eq_ignore_ascii_case(name)
                    .then(|| value.trim().to_string())
            })
        };
        let length: usize = header("content-length")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        while buffer.len() < header_end + length {
            if !read_more(&mut stream, &mut buffer).await {
                return;
            }
        }
        let received = Instant::now();
        let body = buffer[header_end..header_end + length].to_vec();
        buffer.drain(..header_end + length);
        let path = head.split_whitespace().nth(1).unwrap_or("/").to_string();
        let closing = header("connection").is_some_and(|v| v.eq_ignore_ascii_case("close"));
        let ok = if head.starts_with("POST") && path.ends_with("/completions") {
            let request_id = header("x-request-id");
            let delays = Delays {
                ttft,
                itl,
                tokens_per_write,
            };
            stream_completion(&mut stream, &truth, &body, request_id, received, delays).await
        } else if path == "/llmload/writes" {
            let text = truth.to_json_lines();
            respond(&mut stream, "200 OK", "application/x-ndjson", &text).await
        } else if path == "/metrics" {
            // Counters and gauges in vLLM's names, so that llmload's telemetry has something
            // to scrape and parse (its cost is measured on and off).
            let streamed = truth.len();
            let mut text = String::new();
            for (name, kind, value) in [
                ("vllm:num_requests_running", "gauge", 0),
                ("vllm:num_requests_waiting", "gauge", 0),
                ("vllm:kv_cache_usage_perc", "gauge", 0),
                ("vllm:prompt_tokens_total", "counter", streamed * 128),
                ("vllm:generation_tokens_total", "counter", streamed * 64),
                ("vllm:prefix_cache_hits_total", "counter", 0),
                ("vllm:prefix_cache_queries_total", "counter", streamed * 128),
                ("vllm:num_preemptions_total", "counter", 0),
            ] {
                text.push_str(&format!(
                    "# HELP {name} {name}\n# TYPE {name} {kind}\n{name}{{engine=\"0\",model_name=\"m\"}} {value}\n"
                ));
            }
            respond(&mut stream, "200 OK", "text/plain; version=0.0.4", &text).await
        } else if path.ends_with("/models") {
            let models =
                r#"{"object":"list","data":[{"id":"m","object":"model","owned_by":"vllm"}]}"#;
            respond(&mut stream, "200 OK", "application/json", models).await
        } else {
            respond(&mut stream, "404 Not Found", "text/plain", "not found").await
        };
        if !ok || closing {
            return;
        }
    }
}

async fn read_more(stream: &mut impl Socket, buffer: &mut Vec<u8>) -> bool {
    let mut chunk = [0u8; 16 * 1024];
    match stream.read(&mut chunk).await {
        Ok(0) | Err(_) => false,
        Ok(n) => {
            buffer.extend_from_slice(&chunk[..n]);
            true
        }
    }
}

/// Writes `bytes` and sees them onto the socket (over TLS, rustls may hold the last record
/// until flushed): one write, as an engine's step flushes its token. Whether it went.
async fn send(stream: &mut impl Socket, bytes: &[u8]) -> bool {
    stream.write_all(bytes).await.is_ok() && stream.flush().await.is_ok()
}

async fn respond(stream: &mut impl Socket, status: &str, kind: &str, body: &str) -> bool {
    let text = format!(
        "HTTP/1.1 {status}\r\ncontent-type: {kind}\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    send(stream, text.as_bytes()).await
}

/// The number after `"key":` in a JSON body, found by a byte search (the body is llmload's or
/// a benchmark client's, never hostile here).
fn number_after(body: &[u8], key: &str) -> Option<u64> {
    let needle = format!("\"{key}\":");
    let at = body
        .windows(needle.len())
        .position(|w| w == needle.as_bytes())?
        + needle.len();
    let digits: String = body[at..]
        .iter()
        .skip_while(|b| b.is_ascii_whitespace())
        .take_while(|b| b.is_ascii_digit())
        .map(|b| *b as char)
        .collect();
    digits.parse().ok()
}

/// Appends one chunked-encoding frame holding `data` (one SSE event).
fn frame(out: &mut String, data: &str) {
    use std::fmt::Write;
    let _ = write!(out, "{:x}\r\n{data}\r\n", data.len());
}

/// When a stream's tokens are written.
#[derive(Clone, Copy)]
struct Delays {
    ttft: Duration,
    itl: Duration,
    /// Tokens whose chunks go out in one write (1: each its own, as an engine flushes each
    /// step; the whole answer: the shape a client that fell behind reads, and the cheapest for
    /// the server, so the client's own ceiling shows).
    tokens_per_write: u64,
}

async fn stream_completion(
    stream: &mut impl Socket,
    truth: &WriteLog,
    body: &[u8],
    request_id: Option<String>,
    received: Instant,
    delays: Delays,
) -> bool {
    let Delays {
        ttft,
        itl,
        tokens_per_write,
    } = delays;
    let tokens = number_after(body, "max_tokens")
        .or_else(|| number_after(body, "max_completion_tokens"))
        .unwrap_or(16)
        .max(1);
    // A prompt's tokens, roughly (its words): the server's usage is not what is measured here.
    let prompt_tokens = body.iter().filter(|b| **b == b' ').count() as u64;
    let model = "m";
    let id = format!("cmpl-{:016x}", RESPONSES.fetch_add(1, Ordering::Relaxed));
    let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\n\
                cache-control: no-cache\r\ntransfer-encoding: chunked\r\n\r\n";
    let mut writes = truth.begin((request_id, None), received);
    if !send(stream, head.as_bytes()).await {
        return false;
    }
    let mut pending = String::new();
    let mut pending_tokens = 0;
    for token in 0..tokens {
        let due = received + ttft + itl * token as u32;
        if due > Instant::now() {
            tokio::time::sleep_until(due.into()).await;
        } else if pending_tokens == 0 {
            // Zero delay: every other stream writes first, as in one engine step.
            tokio::task::yield_now().await;
        }
        let finish = if token + 1 == tokens {
            "\"length\""
        } else {
            "null"
        };
        let chunk = format!(
            "data: {{\"id\":\"{id}\",\"object\":\"text_completion\",\"created\":1700000000,\
             \"model\":\"{model}\",\"choices\":[{{\"index\":0,\"text\":\"{}\",\"logprobs\":null,\
             \"finish_reason\":{finish},\"stop_reason\":null}}]}}\n\n",
            WORDS[token as usize % WORDS.len()]
        );
        frame(&mut pending, &chunk);
        pending_tokens += 1;
        if pending_tokens < tokens_per_write && token + 1 < tokens {
            continue;
        }
        if !send(stream, pending.as_bytes()).await {
            return false;
        }
        let written = Instant::now();
        for _ in 0..pending_tokens {
            writes.token_written(written);
        }
        pending.clear();
        pending_tokens = 0;
    }
    let usage = format!(
        "data: {{\"id\":\"{id}\",\"object\":\"text_completion\",\"created\":1700000000,\
         \"model\":\"{model}\",\"choices\":[],\"usage\":{{\"prompt_tokens\":{prompt_tokens},\
         \"total_tokens\":{},\"completion_tokens\":{tokens}}}}}\n\ndata: [DONE]\n\n",
        prompt_tokens + tokens
    );
    frame(&mut pending, &usage);
    pending.push_str("0\r\n\r\n");
    let ok = send(stream, pending.as_bytes()).await;
    writes.finish(truth);
    ok
}
