//! Images sent as URLs (`image-urls`): llmload serves each request's images itself, over
//! HTTP/1.1 on a loopback port, on a thread and runtime of its own (as the embedded simulator
//! does), so that a server that fetches its images (vLLM, SGLang) fetches them from here and
//! its TTFT includes the fetch, as it does for the users it serves.
//!
//! A request's images are put up by the body builder when it makes the body, and taken down
//! when the request ends; the record says how many of them the server fetched (a server that
//! ignored them is flagged). A dataset's image files are put up once, for the whole run.
//!
//! What this module is not: a general file server. It serves only what a request of this run
//! carries, under paths llmload made, and nothing else (404). Every path holds a token drawn
//! from the system's randomness for the run (128 bits), so another local user cannot fetch
//! other requests' images by counting; it holds at most [`MAX_CONNECTIONS`] connections (more
//! wait in the kernel's queue, not in llmload's descriptors), and closes one that has not sent
//! a request's head within [`HEADER_READ_TIMEOUT`].

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use base64::Engine;
use bytes::Bytes;
use http_body_util::Full;
use hyper_util::rt::TokioIo;

use crate::plan::{AttachmentKind, ImageUrls};
use crate::planner::Prompt;

/// An image put up: its bytes, type, and how many times it was fetched.
struct Served {
    bytes: Bytes,
    mime: &'static str,
    fetches: u32,
}

#[derive(Default)]
struct Store {
    /// By path.
    served: HashMap<String, Served>,
    /// Each request's paths, by (phase, sequence number), to take down when it ends.
    requests: HashMap<(usize, u64), Vec<String>>,
}

/// The image server of a run with `image-urls`.
pub(crate) struct MediaHost {
    /// `http://127.0.0.1:PORT` (or `http://[::1]:PORT`).
    base: String,
    /// The run's token, in every path it serves.
    token: String,
    store: Arc<Mutex<Store>>,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// What a dataset's image file is served as: its number, type and bytes.
pub(crate) struct ServedFile {
    pub number: u32,
    pub mime: &'static str,
    pub bytes: Vec<u8>,
}

fn extension(mime: &str) -> &'static str {
    match mime {
        "image/png" => "png",
        _ => "jpg",
    }
}

/// The most connections served at once: a flood of idle ones took llmload to 4,225 open
/// descriptors before there was a cap.
pub(crate) const MAX_CONNECTIONS: usize = 256;

/// How long a connection may take to send a request's head (and sit idle between requests).
pub(crate) const HEADER_READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// The run's secret part of every path: 128 random bits, as hex.
fn new_token() -> String {
    format!("{:032x}", rand::random::<u128>())
}

fn file_path(token: &str, number: u32, mime: &str) -> String {
    format!("/llmload/media/{token}/file/{number}.{}", extension(mime))
}

/// How many connections, and how long a head may take (tests use smaller ones).
#[derive(Clone, Copy)]
struct Limits {
    connections: usize,
    header_read: std::time::Duration,
}

impl MediaHost {
    /// Binds `urls`' address (a free port for port 0) and starts serving, with `files` (a
    /// dataset's images) up from the start.
    pub(crate) fn start(urls: ImageUrls, files: Vec<ServedFile>) -> std::io::Result<MediaHost> {
        let limits = Limits {
            connections: MAX_CONNECTIONS,
            header_read: HEADER_READ_TIMEOUT,
        };
        MediaHost::start_with(urls, files, limits)
    }

    fn start_with(
        urls: ImageUrls,
        files: Vec<ServedFile>,
        limits: Limits,
    ) -> std::io::Result<MediaHost> {
        let token = new_token();
        let listener = std::net::TcpListener::bind(SocketAddr::new(urls.host, urls.port))?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let mut store = Store::default();
        for file in files {
            store.served.insert(
                file_path(&token, file.number, file.mime),
                Served {
                    bytes: Bytes::from(file.bytes),
                    mime: file.mime,
                    fetches: 0,
                },
            );
        }
        let store = Arc::new(Mutex::new(store));
        let (shutdown, mut stopped) = tokio::sync::oneshot::channel::<()>();
        let serving = store.clone();
        let thread = crate::threads::spawn_with_runtime("llmload-media", move || async move {
            let Ok(listener) = tokio::net::TcpListener::from_std(listener) else {
                return;
            };
            let room = Arc::new(tokio::sync::Semaphore::new(limits.connections));
            loop {
                // A connection is accepted only when there is room for it.
                let permit = tokio::select! {
                    permit = room.clone().acquire_owned() => permit,
                    _ = &mut stopped => break,
                };
                let Ok(permit) = permit else { break };
                tokio::select! {
                    accepted = listener.accept() => {
                        let Ok((stream, _)) = accepted else { continue };
                        let _ = stream.set_nodelay(true);
                        let store = serving.clone();
                        tokio::spawn(async move {
                            let service = hyper::service::service_fn(move |request| {
                                let answer = answer(&store, &request);
                                async move { Ok::<_, std::convert::Infallible>(answer) }
                            });
                            let _ = hyper::server::conn::http1::Builder::new()
                                .timer(hyper_util::rt::TokioTimer::new())
                                .header_read_timeout(limits.header_read)
                                .serve_connection(TokioIo::new(stream), service)
                                .await;
                            drop(permit);
                        });
                    }
                    _ = &mut stopped => break,
                }
            }
        })?;
        let base = match addr {
            SocketAddr::V4(v4) => format!("http://{v4}"),
            SocketAddr::V6(v6) => format!("http://[{}]:{}", v6.ip(), v6.port()),
        };
        Ok(MediaHost {
            base,
            token,
            store,
            shutdown: Some(shutdown),
            thread: Some(thread),
        })
    }

    /// Where it serves (`http://127.0.0.1:PORT`).
    pub(crate) fn base(&self) -> &str {
        &self.base
    }

    /// Puts up the images of request `seq` of phase `phase` and points `prompt`'s image parts
    /// at them (their base64 dropped). Returns the bytes put up for the request (a dataset's
    /// files are up already and count nothing).
    pub(crate) fn publish(&self, phase: usize, seq: u64, prompt: &mut Prompt) -> u64 {
        let Prompt::Messages(messages) = prompt else {
            return 0;
        };
        let mut added = 0u64;
        let mut paths = Vec::new();
        let Ok(mut store) = self.store.lock() else {
            return 0;
        };
        let mut index = 0usize;
        for attachment in messages.iter_mut().flat_map(|m| m.media.iter_mut()) {
            let AttachmentKind::Image { mime, .. } = attachment.kind else {
                continue;
            };
            let path = match attachment.file {
                Some(number) => file_path(&self.token, number, mime),
                None => {
                    let Ok(bytes) =
                        base64::engine::general_purpose::STANDARD.decode(&*attachment.base64)
                    else {
                        continue;
                    };
                    let path = format!(
                        "/llmload/media/{}/{phase}/{seq}/{index}.{}",
                        self.token,
                        extension(mime)
                    );
                    index += 1;
                    added += bytes.len() as u64;
                    store.served.insert(
                        path.clone(),
                        Served {
                            bytes: Bytes::from(bytes),
                            mime,
                            fetches: 0,
                        },
                    );
                    paths.push(path.clone());
                    path
                }
            };
            attachment.url = Some(Arc::from(format!("{}{path}", self.base)));
            attachment.base64 = Arc::from("");
        }
        if !paths.is_empty() {
            store.requests.insert((phase, seq), paths);
        }
        added
    }

    /// Takes down the images of request `seq` of phase `phase`; returns how many of them the
    /// server fetched, or `None` when it had none of its own up.
    pub(crate) fn forget(&self, phase: usize, seq: u64) -> Option<u32> {
        let mut store = self.store.lock().ok()?;
        let paths = store.requests.remove(&(phase, seq))?;
        let fetched = paths
            .iter()
            .filter_map(|path| store.served.remove(path))
            .filter(|served| served.fetches > 0)
            .count();
        Some(fetched as u32)
    }
}

/// A `GET` (or `HEAD`) of an image that is up; 404 for anything else.
fn answer(
    store: &Mutex<Store>,
    request: &hyper::Request<hyper::body::Incoming>,
) -> hyper::Response<Full<Bytes>> {
    let found = match (request.method(), store.lock()) {
        (&hyper::Method::GET | &hyper::Method::HEAD, Ok(mut store)) => {
            store.served.get_mut(request.uri().path()).map(|served| {
                served.fetches += 1;
                (served.bytes.clone(), served.mime)
            })
        }
        _ => None,
    };
    let mut response = match found {
        Some((bytes, mime)) => {
            let length = bytes.len();
            let body = if request.method() == hyper::Method::HEAD {
                Bytes::new()
            } else {
                bytes
            };
            let mut response = hyper::Response::new(Full::new(body));
            if let Ok(value) = hyper::header::HeaderValue::from_str(mime) {
                response
                    .headers_mut()
                    .insert(hyper::header::CONTENT_TYPE, value);
            }
            response
                .headers_mut()
                .insert(hyper::header::CONTENT_LENGTH, length.into());
            response
        }
        None => {
            let mut response = hyper::Response::new(Full::new(Bytes::from_static(b"not found")));
            *response.status_mut() = hyper::StatusCode::NOT_FOUND;
            response
        }
    };
    response.headers_mut().insert(
        hyper::header::CACHE_CONTROL,
        hyper::header::HeaderValue::from_static("no-store"),
    );
    response
}

impl Drop for MediaHost {
    fn drop(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{Attachment, MediaPosition};
    use crate::planner::Message;

    fn get(base: &str, path: &str) -> (u16, Vec<u8>) {
        use std::io::{Read, Write};
        let addr = base.trim_start_matches("http://");
        let mut stream = std::net::TcpStream::connect(addr).unwrap();
        write!(
            stream,
            "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer).unwrap();
        let split = answer.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
        let head = String::from_utf8_lossy(&answer[..split]).to_string();
        let status = head[9..12].parse().unwrap();
        (status, answer[split + 4..].to_vec())
    }

    fn image(bytes: &[u8], file: Option<u32>) -> Attachment {
        Attachment {
            kind: AttachmentKind::Image {
                mime: "image/png",
                width: 2,
                height: 2,
            },
            base64: Arc::from(base64::engine::general_purpose::STANDARD.encode(bytes)),
            bytes: bytes.len() as u64,
            position: MediaPosition::Before,
            file,
            url: None,
        }
    }

    #[test]
    fn images_are_served_while_their_request_lasts_and_fetches_are_counted() {
        let urls = ImageUrls {
            host: std::net::IpAddr::from([127, 0, 0, 1]),
            port: 0,
        };
        let file = ServedFile {
            number: 0,
            mime: "image/png",
            bytes: b"file bytes".to_vec(),
        };
        let host = MediaHost::start(urls, vec![file]).unwrap();
        let mut message = Message::text("user", "what is this".into());
        message.media = vec![
            image(b"first", None),
            image(b"second", None),
            image(b"", Some(0)),
        ];
        let mut prompt = Prompt::Messages(vec![message]);
        assert_eq!(host.publish(1, 7, &mut prompt), 11);
        let Prompt::Messages(messages) = &prompt else {
            unreachable!()
        };
        let urls: Vec<String> = messages[0]
            .media
            .iter()
            .map(|a| a.url.as_deref().unwrap().to_string())
            .collect();
        assert!(messages[0].media.iter().all(|a| a.base64.is_empty()));
        let token = &host.token;
        assert_eq!(token.len(), 32);
        assert_eq!(
            urls[0],
            format!("{}/llmload/media/{token}/1/7/0.png", host.base())
        );
        assert_eq!(
            urls[2],
            format!("{}/llmload/media/{token}/file/0.png", host.base())
        );
        // Without the run's token, nothing: another user cannot count their way to images.
        assert_eq!(get(host.base(), "/llmload/media/1/7/0.png").0, 404);
        let other = MediaHost::start(urls_on_any_port(), Vec::new()).unwrap();
        assert_ne!(&other.token, token);
        let path = |url: &str| url[host.base().len()..].to_string();
        assert_eq!(get(host.base(), &path(&urls[0])), (200, b"first".to_vec()));
        assert_eq!(get(host.base(), &path(&urls[2])).1, b"file bytes");
        assert_eq!(get(host.base(), "/etc/passwd").0, 404);
        // One of its two images was fetched; once it ends they are gone (the file stays).
        assert_eq!(host.forget(1, 7), Some(1));
        assert_eq!(get(host.base(), &path(&urls[0])).0, 404);
        assert_eq!(get(host.base(), &path(&urls[2])).0, 200);
        assert_eq!(host.forget(1, 7), None);
    }

    fn urls_on_any_port() -> ImageUrls {
        ImageUrls {
            host: std::net::IpAddr::from([127, 0, 0, 1]),
            port: 0,
        }
    }

    /// A flood of connections that send nothing holds at most the cap, each for at most the
    /// head's timeout; a real fetch behind them is served once they are closed.
    #[test]
    fn idle_connections_are_capped_and_closed() {
        use std::io::Read;
        let limits = Limits {
            connections: 8,
            header_read: std::time::Duration::from_millis(300),
        };
        let host = MediaHost::start_with(urls_on_any_port(), Vec::new(), limits).unwrap();
        let addr = host.base().trim_start_matches("http://").to_string();
        let idle: Vec<std::net::TcpStream> = (0..24)
            .map(|_| std::net::TcpStream::connect(&addr).unwrap())
            .collect();
        let started = std::time::Instant::now();
        assert_eq!(get(host.base(), "/nothing").0, 404);
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
        for mut stream in idle {
            stream
                .set_read_timeout(Some(std::time::Duration::from_secs(5)))
                .unwrap();
            let mut byte = [0u8; 1];
            // Closed by the server (end of file, or a reset): never left open.
            match stream.read(&mut byte) {
                Ok(0) => {}
                Err(e)
                    if !matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) => {}
                other => panic!("an idle connection was left open: {other:?}"),
            }
        }
    }

    #[test]
    fn a_port_in_use_is_an_error() {
        let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let urls = ImageUrls {
            host: std::net::IpAddr::from([127, 0, 0, 1]),
            port: taken.local_addr().unwrap().port(),
        };
        assert!(MediaHost::start(urls, Vec::new()).is_err());
    }
}
