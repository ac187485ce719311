//! A streamed answer: its tokens written as server-sent events in its API's shape, with the
//! faults drawn for it that act mid-stream (a stall, a dropped connection, a malformed chunk),
//! and each token's write time kept when the simulator records writes.
//!
//! What this is not: what comes before the first frame (`answer`), or the events' shapes
//! (`wire::Encoder`).

use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use hyper::Response;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::answer::{FaultPlan, Reasoning, Tokens};
use super::metrics::{Serving, SimMetrics};
use super::server::{Body, Shared};
use super::stream::{json_fragment, SimRequest};
use super::wire::{Counts, Encoder, Finish, Frame as SseFrame};
use super::writes::{RequestWriter, WriteLog};
use crate::timer::PreciseTimer;

/// A frame of the body, and whether it carries tokens (its write time is then recorded).
type Sent = (Result<Bytes, std::io::Error>, bool);

/// Everything a streamed answer needs, as the stages before it left it.
pub(super) struct Answer {
    pub(super) shared: Arc<Shared>,
    pub(super) request: SimRequest,
    pub(super) id: String,
    pub(super) tokens: Tokens,
    pub(super) reasoning: Reasoning,
    pub(super) faults: FaultPlan,
    pub(super) arrived: Instant,
    pub(super) request_ids: (Option<String>, Option<String>),
}

impl Answer {
    /// The response whose body the answer's task writes; `serving` (without an engine) says
    /// the request runs until the task ends.
    pub(super) fn stream(self, serving: Option<Serving>) -> Response<Body> {
        let (tx, rx) = mpsc::channel::<Sent>(16);
        let source = FrameSource {
            writer: self.shared.writes.as_ref().map(|log| {
                let ids = self.request_ids;
                (log.begin(ids, self.arrived.into_std()), log.clone())
            }),
            rx,
        };
        let writer = Writer {
            tx,
            metrics: self.shared.metrics.clone(),
            fixed: self.shared.engine.is_none(),
            timer: self.shared.timer.clone(),
            arrived: self.arrived,
            faults: self.faults,
            reasoning: self.reasoning,
        };
        let (request, id, tokens) = (self.request, self.id, self.tokens);
        tokio::spawn(async move {
            let _serving = serving;
            writer.write(&request, &id, tokens).await;
        });
        let frames = futures_util::stream::unfold(source, |mut source| async move {
            let (item, tokens) = source.rx.recv().await?;
            if tokens {
                if let Some((writer, _)) = &mut source.writer {
                    // Hyper pulls a frame when it is about to write it to the socket.
                    writer.token_written(std::time::Instant::now());
                }
            }
            Some((item.map(Frame::data), source))
        });
        let mut response = Response::new(BodyExt::boxed(StreamBody::new(frames)));
        let headers = response.headers_mut();
        headers.insert(
            "content-type",
            hyper::header::HeaderValue::from_static("text/event-stream"),
        );
        headers.insert(
            "cache-control",
            hyper::header::HeaderValue::from_static("no-cache"),
        );
        response
    }
}

/// The task that writes one streamed answer's frames.
struct Writer {
    tx: mpsc::Sender<Sent>,
    metrics: Arc<SimMetrics>,
    /// No engine: the fixed schedule, whose token times the simulator's own metrics count.
    fixed: bool,
    timer: PreciseTimer,
    arrived: Instant,
    faults: FaultPlan,
    reasoning: Reasoning,
}

/// Where an answer is, token by token.
#[derive(Default)]
struct Progress {
    completion: usize,
    thinking: usize,
    /// Its tokens have started a tool call.
    calling: bool,
    /// Its tokens have started a JSON answer.
    answering: bool,
    /// When the last token went (fixed schedule only).
    last: Option<Instant>,
}

/// Whether a chunk of `n` tokens starting at token `first` (1-based) holds token `at`.
fn holds(at: usize, first: usize, n: usize) -> bool {
    (first..first + n).contains(&at)
}

impl Writer {
    /// Writes the answer: its opening frames, a keep-alive comment, a frame per chunk of tokens
    /// (with the faults drawn for them), and its closing frames. Ends early, quietly, when the
    /// client goes away.
    async fn write(self, request: &SimRequest, id: &str, mut tokens: Tokens) {
        // Embeddings and rankings are answered whole (`SimRequest::parse` never streams them).
        let Some(mut encoder) = Encoder::new(request, id) else {
            return;
        };
        if !self.send(encoder.start(), false).await {
            return;
        }
        // Real servers send keep-alive comments; a client must skip them.
        if self
            .tx
            .send((Ok(Bytes::from_static(b": ping\n\n")), false))
            .await
            .is_err()
        {
            return;
        }
        let mut at = Progress::default();
        while let Some((text, n)) = tokens.next().await {
            if !self.token(request, &mut encoder, &mut at, &text, n).await {
                return;
            }
        }
        if self.fixed {
            self.metrics.on_finished(self.arrived.elapsed());
        }
        let finish = if at.calling {
            Finish::ToolCalls
        } else {
            Finish::Length
        };
        let counts = Counts {
            completion: at.completion,
            reasoning: self.said(at.thinking),
        };
        let _ = self.send(encoder.finish(finish, counts), false).await;
    }

    /// Writes one chunk of `n` tokens; `false` when the answer ends here (a dropped
    /// connection, or the client went away).
    async fn token(
        &self,
        request: &SimRequest,
        encoder: &mut Encoder<'_>,
        at: &mut Progress,
        text: &str,
        n: usize,
    ) -> bool {
        let first = at.completion + 1;
        if let Some((_, stall)) = self.faults.stall.filter(|&(t, _)| holds(t, first, n)) {
            self.timer.sleep_until(Instant::now() + stall).await;
        }
        if self.faults.drop_at.is_some_and(|t| holds(t, first, n)) {
            // An error frame makes hyper abort the connection mid-body.
            let drop = std::io::Error::other("injected connection drop");
            let _ = self.tx.send((Err(drop), false)).await;
            return false;
        }
        at.completion += n;
        if self.fixed {
            self.metrics.on_gpu_work(0, n as u64);
            let now = Instant::now();
            match at.last {
                None => self
                    .metrics
                    .on_first_token(now.saturating_duration_since(self.arrived)),
                Some(previous) => self
                    .metrics
                    .on_token(now.saturating_duration_since(previous)),
            }
            at.last = Some(now);
        }
        if self.faults.malformed_at.is_some_and(|t| holds(t, first, n)) {
            let broken = Bytes::from_static(b"data: {\"choices\": [{\"delta\": \n\n");
            return self.tx.send((Ok(broken), false)).await.is_ok();
        }
        let mut frames = self.frames(request, encoder, at, text, n);
        if request.continuous_usage {
            if let Some(SseFrame::Data(value)) = frames.last_mut() {
                let said = self.said(at.thinking);
                value["usage"] = super::wire::usage(request, at.completion, said);
            }
        }
        self.send(frames, true).await
    }

    /// The frames of a chunk: reasoning while the model thinks, a tool call's arguments when
    /// the request offers tools (a JSON object around the words, in fragments), a JSON answer
    /// when one was asked, else text.
    fn frames(
        &self,
        request: &SimRequest,
        encoder: &mut Encoder<'_>,
        at: &mut Progress,
        text: &str,
        n: usize,
    ) -> Vec<SseFrame> {
        let last = at.completion == request.max_tokens;
        match self.reasoning {
            Some((planned, field, _)) if at.completion - n < planned => {
                at.thinking += n;
                encoder.reasoning(text, field)
            }
            _ if request.tool.is_some() => {
                let first = !at.calling;
                at.calling = true;
                let fragment = match (first, last) {
                    (true, true) => format!("{{\"query\":\"{}\"}}", text.trim()),
                    (true, false) => format!("{{\"query\":\"{}", text.trim_start()),
                    (false, true) => format!("{text}\"}}"),
                    (false, false) => text.to_string(),
                };
                encoder.tool_call(&fragment, first)
            }
            _ if request.json_answer => {
                let first = !at.answering;
                at.answering = true;
                encoder.text(&json_fragment(text, first, last))
            }
            _ => encoder.text(text),
        }
    }

    /// How many tokens were reasoning, when the simulator is set to say it in usage.
    fn said(&self, thinking: usize) -> Option<usize> {
        self.reasoning
            .filter(|&(_, _, in_usage)| in_usage)
            .map(|_| thinking)
    }

    /// Sends frames in order; only the last (the one with the token text) is the token's
    /// write. `false` when the client went away.
    async fn send(&self, frames: Vec<SseFrame>, tokens: bool) -> bool {
        let last = frames.len().saturating_sub(1);
        for (i, frame) in frames.into_iter().enumerate() {
            let carries = tokens && i == last;
            let bytes = Bytes::from(frame.to_sse());
            if self.tx.send((Ok(bytes), carries)).await.is_err() {
                return false;
            }
        }
        true
    }
}

/// The frames of one streamed response, and the record of when its tokens were written.
struct FrameSource {
    rx: mpsc::Receiver<Sent>,
    writer: Option<(RequestWriter, Arc<WriteLog>)>,
}

impl Drop for FrameSource {
    /// The stream ended, or the client went away: either way the request's writes are kept.
    fn drop(&mut self) {
        if let Some((writer, log)) = self.writer.take() {
            writer.finish(&log);
        }
    }
}
