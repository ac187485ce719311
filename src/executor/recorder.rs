//! The recorder: a thread of its own that turns finished exchanges into records, counts tokens
//! where the server did not, and appends every record to `records.jsonl` as it arrives.
//!
//! Running on its own thread keeps tokenizing, JSON encoding and file writes off the I/O tasks.
//! What a killed run can lose is bounded three ways: the file is flushed at least every
//! [`FLUSH_EVERY`] and every [`FLUSH_RECORDS`] records whatever the queue holds (and whenever it
//! runs dry); counting one record's tokens costs at most [`COUNT_BUDGET`] (a megabyte of text,
//! a quarter of a second: beyond, the count is estimated, and the record says so); and the
//! queue holds at most [`QUEUE_KIB`] KiB of answers (a request whose answer does not fit waits
//! for room, and the run says how long). After a second Ctrl-C ([`Stop::finish_now`]) nothing
//! is tokenized any more: what is queued is written at once.

use std::path::Path;
use std::sync::mpsc;
use std::sync::Arc;

use super::answers::AnswerCheck;
use super::observe::{Event, Observer, Stop};
use super::request::Exchange;
use crate::error::{Error, Result};
use crate::planner::ScheduledRequest;
use crate::records::{ChunkKind, Compression, ErrorClass, LogLine, RecordsWriter};
use crate::records::{RequestRecord, TokenSource};
use crate::secrets::Secrets;
use crate::tokens::Tokenizer;

/// A request as it finished, before its tokens are counted.
pub struct Finished {
    /// Its phase's index.
    pub phase: usize,
    /// The request as planned.
    pub request: ScheduledRequest,
    /// When it was meant to go out, µs from the run's start.
    pub intended_send_us: u64,
    /// When it went out, µs from the run's start.
    pub actual_send_us: u64,
    /// What came back.
    pub exchange: Exchange,
    /// Its room in the recorder's queue, given back once its record is written.
    pub room: Option<tokio::sync::OwnedSemaphorePermit>,
}

/// The most the recorder's queue holds: KiB of answers' text (a request takes its answer's
/// size, at least 1 KiB). 256 MiB: hundreds of thousands of ordinary answers, or 85 of 3 MB.
pub const QUEUE_KIB: usize = 256 * 1024;

/// The records file is flushed at least this often while records come.
pub const FLUSH_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// ... and at least every this many records.
pub const FLUSH_RECORDS: usize = 256;

/// What counting one answer's tokens may spend: the tokenizer counts at most `bytes` of its
/// text, and starts no piece of it after `time`; the rest is estimated in proportion, and the
/// record says its count was estimated.
#[derive(Debug, Clone, Copy)]
pub struct CountBudget {
    /// The most of the answer's text tokenized (its first part).
    pub bytes: usize,
    /// The longest counting may go on (passed by one piece of text at most).
    pub time: std::time::Duration,
}

/// A record's budget: a megabyte of text (some 250,000 tokens), a quarter of a second. Bytes
/// alone did not bound the time: text the tokenizers merge slowly (a megabyte of one repeated
/// character took 8.3 s before `Tokenizer::count` learnt runs) held every record behind it, on
/// disk and in the queue, while the network side waited for room.
pub const COUNT_BUDGET: CountBudget = CountBudget {
    bytes: 1 << 20,
    time: std::time::Duration::from_millis(250),
};

/// Nothing may be counted (after a second Ctrl-C): every count is estimated.
pub const NO_COUNTING: CountBudget = CountBudget {
    bytes: 0,
    time: std::time::Duration::ZERO,
};

/// A budget being spent: the bytes it allows, and when its time is up.
struct Meter {
    bytes: usize,
    until: std::time::Instant,
}

impl CountBudget {
    fn start(self) -> Meter {
        Meter {
            bytes: self.bytes,
            until: std::time::Instant::now() + self.time,
        }
    }
}

/// Room in the recorder's queue, and how long requests waited for it.
#[derive(Debug)]
pub struct QueueRoom {
    room: Arc<tokio::sync::Semaphore>,
    waited: std::sync::Mutex<crate::records::RecorderBacklog>,
}

impl Default for QueueRoom {
    fn default() -> Self {
        QueueRoom {
            room: Arc::new(tokio::sync::Semaphore::new(QUEUE_KIB)),
            waited: std::sync::Mutex::new(Default::default()),
        }
    }
}

impl QueueRoom {
    /// Room for an answer of `bytes` bytes, waiting while the queue is full (the request stays in
    /// flight meanwhile: the load is held back rather than memory grown without bound).
    pub async fn reserve(&self, bytes: usize) -> Option<tokio::sync::OwnedSemaphorePermit> {
        let kib = (bytes / 1024).clamp(1, QUEUE_KIB) as u32;
        if let Ok(permit) = self.room.clone().try_acquire_many_owned(kib) {
            return Some(permit);
        }
        let started = std::time::Instant::now();
        let permit = self.room.clone().acquire_many_owned(kib).await.ok();
        let waited_ms = started.elapsed().as_secs_f64() * 1000.0;
        if let Ok(mut backlog) = self.waited.lock() {
            backlog.queue_mib = (QUEUE_KIB / 1024) as u64;
            backlog.requests += 1;
            backlog.total_ms += waited_ms;
            backlog.longest_ms = backlog.longest_ms.max(waited_ms);
        }
        permit
    }

    /// How requests waited for room, if any did.
    pub fn backlog(&self) -> Option<crate::records::RecorderBacklog> {
        self.waited
            .lock()
            .ok()
            .map(|b| b.clone())
            .filter(|b| b.requests > 0)
    }
}

/// What the recorder is sent.
pub enum Message {
    /// A line to write as it is.
    Line(Box<LogLine>),
    /// A finished request to count and write.
    Finished(Box<Finished>),
    /// Answered once everything sent before it is written, flushed and observed: a run's
    /// source of phases reads the records of the group that just ended.
    Barrier(tokio::sync::oneshot::Sender<()>),
}

/// The recorder thread, and the way to send it work.
pub struct Recorder {
    sender: mpsc::Sender<Message>,
    thread: std::thread::JoinHandle<Result<()>>,
}

impl Recorder {
    /// Creates `path` and starts the thread that writes it. A write that fails (a full disk)
    /// stops the run through `stop`, and [`Recorder::finish`] returns that error.
    pub fn start(
        path: &Path,
        tokenizer: Arc<Tokenizer>,
        answers: Option<Arc<AnswerCheck>>,
        secrets: Arc<Secrets>,
        observer: Arc<dyn Observer>,
        stop: Stop,
    ) -> Result<Recorder> {
        let out = RecordsWriter::create(path)?;
        let (sender, receiver) = mpsc::channel::<Message>();
        let path = path.to_path_buf();
        let thread = std::thread::Builder::new()
            .name("llmload-recorder".into())
            .spawn(move || {
                let written = write_all(
                    &receiver,
                    out,
                    &tokenizer,
                    answers.as_deref(),
                    &secrets,
                    &*observer,
                    &stop,
                );
                if let Err(e) = written {
                    // Nothing more can be recorded: the run stops rather than send requests
                    // whose records would be lost.
                    stop.cancel_in_flight();
                    return Err(Error::io("write", &path, e));
                }
                Ok(())
            })
            .map_err(|e| Error::run(format!("cannot start the recorder thread: {e}")))?;
        Ok(Recorder { sender, thread })
    }

    /// A way to send the recorder lines and finished requests.
    pub fn sender(&self) -> mpsc::Sender<Message> {
        self.sender.clone()
    }

    /// Waits for every queued record to be written.
    pub fn finish(self) -> Result<()> {
        drop(self.sender);
        self.thread
            .join()
            .map_err(|_| Error::run("the recorder thread panicked"))?
    }
}

/// How long the recorder rests after draining its queue. A request's record waits at most this
/// long; in exchange, while records flow, a sender never has to wake the recorder (a blocked
/// receiver is woken by a futex call and a context switch per message: a tenth of a
/// short-answer run's CPU on one core), and the file is written in batches.
const REST: std::time::Duration = std::time::Duration::from_millis(2);

/// Writes every message as it comes, flushing at least every [`FLUSH_EVERY`] and every
/// [`FLUSH_RECORDS`] records, and a plain file whenever the queue runs dry.
fn write_all(
    receiver: &mpsc::Receiver<Message>,
    mut out: RecordsWriter,
    tokenizer: &Tokenizer,
    answers: Option<&AnswerCheck>,
    secrets: &Secrets,
    observer: &dyn Observer,
    stop: &Stop,
) -> std::io::Result<()> {
    // A plain file is flushed each time the queue runs dry, so that a reader sees records as
    // they come. A compressed one only when a flush is due: each flush ends a zstd block, and
    // blocks of a few records each would compress half as well.
    let flush_when_dry = out.compression() == Compression::Plain;
    let mut flushed_at = std::time::Instant::now();
    let mut unflushed = 0usize;
    loop {
        let first = if unflushed == 0 {
            match receiver.recv() {
                Ok(message) => message,
                Err(mpsc::RecvError) => break,
            }
        } else {
            match receiver.recv_timeout(FLUSH_EVERY.saturating_sub(flushed_at.elapsed())) {
                Ok(message) => message,
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    out.flush()?;
                    (flushed_at, unflushed) = (std::time::Instant::now(), 0);
                    continue;
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            }
        };
        let mut next = Some(first);
        while let Some(message) = next {
            let mut room = None;
            let line = match message {
                Message::Barrier(reply) => {
                    out.flush()?;
                    (flushed_at, unflushed) = (std::time::Instant::now(), 0);
                    let _ = reply.send(());
                    next = receiver.try_recv().ok();
                    continue;
                }
                Message::Line(line) => *line,
                Message::Finished(mut finished) => {
                    room = finished.room.take();
                    // After a second Ctrl-C, what is queued is written at once, uncounted.
                    let budget = if stop.hurried() {
                        NO_COUNTING
                    } else {
                        COUNT_BUDGET
                    };
                    let valid = answers
                        .filter(|_| finished.exchange.error.is_none() && budget.bytes > 0)
                        .map(|check| check.holds(&finished.exchange.answer_text()));
                    let mut record = finalize_safely(*finished, tokenizer, budget);
                    record.answer_valid = valid;
                    // The server's words: what it echoes of a credential is kept of none.
                    for text in [
                        &mut record.error_detail,
                        &mut record.finish_reason,
                        &mut record.model,
                    ]
                    .into_iter()
                    .flatten()
                    {
                        secrets.redact_in_place(text);
                    }
                    observer.on_event(Event::RequestFinished(&record));
                    LogLine::Request(record)
                }
            };
            out.write_line(&line)?;
            // Its room is given back once its record is in the file's buffer.
            drop(room);
            unflushed += 1;
            if unflushed >= FLUSH_RECORDS || flushed_at.elapsed() >= FLUSH_EVERY {
                out.flush()?;
                (flushed_at, unflushed) = (std::time::Instant::now(), 0);
            }
            next = receiver.try_recv().ok();
        }
        if flush_when_dry || flushed_at.elapsed() >= FLUSH_EVERY {
            out.flush()?;
            (flushed_at, unflushed) = (std::time::Instant::now(), 0);
        }
        std::thread::sleep(REST);
    }
    out.finish()
}

/// [`finalize`], never losing the record: if counting panics (it must not; a tokenizer is
/// outside code), the request is kept with its timing and no counts, as the client's failure.
fn finalize_safely(
    finished: Finished,
    tokenizer: &Tokenizer,
    budget: CountBudget,
) -> RequestRecord {
    let (phase, request) = (finished.phase, finished.request);
    let (intended_send_us, actual_send_us) = (finished.intended_send_us, finished.actual_send_us);
    let (http_status, end_us) = (finished.exchange.http_status, finished.exchange.end_us);
    let trace_id = finished.exchange.trace.map(|trace| trace.trace_id_hex());
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        finalize(finished, tokenizer, budget)
    }))
    .unwrap_or_else(|_| RequestRecord {
        error: Some(ErrorClass::Client),
        error_detail: Some(
            "llmload could not count this response's tokens (an internal error)".into(),
        ),
        http_status,
        e2e_us: Some(end_us),
        trace_id,
        ..planned(phase, &request, intended_send_us, actual_send_us)
    })
}

/// A request's record with its plan and send times, nothing of its answer yet.
fn planned(
    phase: usize,
    request: &ScheduledRequest,
    intended_send_us: u64,
    actual_send_us: u64,
) -> RequestRecord {
    RequestRecord {
        turn_kind: request.turn_kind,
        inputs: (request.batch > 0).then_some(request.batch),
        ..RequestRecord::planned(
            phase,
            request.seq,
            request.turn,
            request.conversation,
            (request.input_tokens, request.output_tokens),
            request.prompt_seed,
            intended_send_us,
            actual_send_us,
        )
    }
}

/// Of a request's output tokens, those spent reasoning, and where the count came from: the
/// server's `completion_tokens_details.reasoning_tokens` when it sent one; else the reasoning
/// chunks' token counts (as the chunks were counted); else, for a whole body, the reasoning
/// text by the tokenizer. `None` for a request that did not reason.
fn reasoning_tokens(
    exchange: &Exchange,
    usage: Option<crate::api::Usage>,
    chunk_tokens: &[u32],
    chunk_source: Option<TokenSource>,
    tokenizer: &Tokenizer,
    meter: &Meter,
) -> (Option<u64>, Option<TokenSource>) {
    if let Some(reasoning) = usage.and_then(|u| u.reasoning) {
        return (Some(reasoning), Some(TokenSource::Usage));
    }
    if exchange.reasoning_bytes == 0 {
        return (None, None);
    }
    if exchange.chunk_kinds.is_empty() {
        let text = exchange.text.get(..exchange.reasoning_bytes).unwrap_or("");
        let (count, exact) = count_within(tokenizer, text, meter);
        let source = if exact {
            TokenSource::Tokenizer
        } else {
            TokenSource::Estimated
        };
        return (Some(count), Some(source));
    }
    let counted = ChunkKind::each(&exchange.chunk_kinds, chunk_tokens.len())
        .zip(chunk_tokens)
        .filter(|(kind, _)| *kind == ChunkKind::Reasoning)
        .map(|(_, &n)| n as u64)
        .sum();
    (Some(counted), chunk_source)
}

/// When the server reports usage, one request in this many also has its completion counted by
/// the plan's tokenizer (`completion_tokens_tokenizer`).
pub const CROSS_CHECK_EVERY: u64 = 16;

/// Why a response's usage cannot be believed: a count that is no count, or more output tokens
/// than were asked for *and* than the answer had bytes (hidden reasoning tokens can exceed
/// the bytes, and a server that ignores max_tokens can exceed what was asked, but not both).
fn usage_problem(exchange: &Exchange, request: &ScheduledRequest) -> Option<String> {
    let usage = exchange.usage?;
    if let Some((field, value)) = usage.invalid {
        let value = if value.is_nan() {
            "not a number".to_string()
        } else {
            value.to_string()
        };
        return Some(format!("usage.{field} is {value}: not a count of tokens"));
    }
    let completion = usage.completion?;
    let asked = request.output_tokens as u64;
    let bytes = exchange.text.len() as u64;
    (completion > asked && completion > bytes).then(|| {
        format!(
            "usage says {completion} completion tokens, but {asked} were asked and the answer held \
             {bytes} bytes in {} chunk(s)",
            exchange.chunk_times.len()
        )
    })
}

/// `total` tokens over chunks the tokenizer counted as `counts`: one each, and the rest in
/// proportion to each chunk's count beyond one (largest remainders first; by count when the
/// tokenizer saw no chunk of more than one). Re-tokenizing a chunk's text alone can count it
/// differently from the server (a UTF-8 character split across tokens, a word cut in two), so
/// the counts are only weights; the sum is the server's.
fn spread_total(counts: &[u32], total: u64) -> Vec<u32> {
    let chunks = counts.len() as u64;
    let mut spread = vec![1u32; counts.len()];
    let extra = total.saturating_sub(chunks);
    if extra == 0 || counts.is_empty() {
        return spread;
    }
    let excess: Vec<u64> = counts.iter().map(|&c| c.saturating_sub(1) as u64).collect();
    let weights: Vec<u64> = if excess.iter().any(|&e| e > 0) {
        excess
    } else {
        counts.iter().map(|&c| c.max(1) as u64).collect()
    };
    let weight_sum: u64 = weights.iter().sum::<u64>().max(1);
    let mut given = 0u64;
    let mut remainders: Vec<(u64, usize)> = Vec::with_capacity(counts.len());
    for (i, &w) in weights.iter().enumerate() {
        let share = extra * w / weight_sum;
        spread[i] += share as u32;
        given += share;
        remainders.push((extra * w % weight_sum, i));
    }
    remainders.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    for &(_, i) in remainders.iter().take((extra - given) as usize) {
        spread[i] += 1;
    }
    spread
}

/// `text`'s tokens, and whether they were all counted: the tokenizer counts as much of its
/// first `meter.bytes` as it can before `meter.until`, and the rest is estimated in proportion
/// (at 4 bytes a token when nothing could be counted). Tokenizing ordinary text costs about a
/// second per 10 MB on one core: a budget keeps one huge or slow answer from holding every
/// record behind it.
fn count_within(tokenizer: &Tokenizer, text: &str, meter: &Meter) -> (u64, bool) {
    let mut cut = meter.bytes.min(text.len());
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    let (counted, bytes) = if cut > 0 {
        tokenizer.count_until(&text[..cut], meter.until)
    } else {
        (0, 0)
    };
    if bytes == text.len() {
        return (counted as u64, true);
    }
    let estimate = if bytes > 0 {
        (counted as f64 * text.len() as f64 / bytes as f64).round()
    } else {
        (text.len() as f64 / 4.0).ceil()
    };
    (estimate as u64, false)
}

/// Each chunk's tokens by the tokenizer (at least one each), if the whole answer fits the
/// budget's bytes and its time allows: `None` once the time is up.
fn count_chunks(exchange: &Exchange, tokenizer: &Tokenizer, meter: &Meter) -> Option<Vec<u32>> {
    if exchange.text.len() > meter.bytes {
        return None;
    }
    let mut start = 0usize;
    let mut counts = Vec::with_capacity(exchange.chunk_ends.len());
    for &end in &exchange.chunk_ends {
        if std::time::Instant::now() >= meter.until {
            return None;
        }
        let end = end as usize;
        let text = exchange.text.get(start..end).unwrap_or("");
        start = end;
        let (tokens, counted) = tokenizer.count_until(text, meter.until);
        if counted < text.len() {
            return None;
        }
        counts.push(tokens.max(1) as u32);
    }
    Some(counts)
}

/// How many tokens each chunk held, and who said so: from per-chunk usage when every chunk had
/// it; else one each when the usage total equals the number of chunks (each chunk holds at
/// least one token, so they must hold exactly one); else by tokenizing each chunk's text.
fn chunk_tokens(
    exchange: &Exchange,
    tokenizer: &Tokenizer,
    meter: &Meter,
    usage_completion: Option<u64>,
    usage_per_chunk: bool,
    tokenizer_completion: Option<u64>,
) -> (Vec<u32>, Option<TokenSource>) {
    let chunk_count = exchange.chunk_times.len();
    if chunk_count == 0 {
        (Vec::new(), None)
    } else if usage_per_chunk {
        (
            exchange.chunk_usage_tokens.clone(),
            Some(TokenSource::Usage),
        )
    } else if usage_completion == Some(chunk_count as u64) {
        (vec![1; chunk_count], Some(TokenSource::OnePerChunk))
    } else if let Some(counts) = count_chunks(exchange, tokenizer, meter) {
        match usage_completion {
            // The server's total is the truth; the tokenizer only says where its tokens fell.
            Some(total) if total >= chunk_count as u64 => (
                spread_total(&counts, total),
                Some(TokenSource::UsageByTokenizer),
            ),
            _ => (counts, Some(TokenSource::Tokenizer)),
        }
    } else {
        // Too much text to tokenize chunk by chunk in the budget: the chunks' bytes say where
        // the tokens (the server's, or the estimate) fell.
        let mut start = 0u32;
        let bytes: Vec<u32> = exchange
            .chunk_ends
            .iter()
            .map(|&end| {
                let length = end.saturating_sub(start).max(1);
                start = end;
                length
            })
            .collect();
        let total = usage_completion
            .or(tokenizer_completion)
            .unwrap_or(chunk_count as u64)
            .max(chunk_count as u64);
        (spread_total(&bytes, total), Some(TokenSource::Estimated))
    }
}

/// A server's word (a finish reason): kept as sent when it is a short line (it always is from
/// a sane server), else made one and shortened.
fn kept_reason(reason: String) -> String {
    if reason.len() <= 200
        && matches!(
            crate::escape::one_line(&reason),
            std::borrow::Cow::Borrowed(_)
        )
    {
        reason
    } else {
        crate::error::shorten(&reason)
    }
}

/// Counts tokens and builds the record of one finished request, spending at most `budget` on
/// counting (see [`count_within`]).
pub fn finalize(finished: Finished, tokenizer: &Tokenizer, budget: CountBudget) -> RequestRecord {
    let meter = budget.start();
    let Finished {
        phase,
        request,
        intended_send_us,
        actual_send_us,
        exchange,
        room: _,
    } = finished;
    let usage_problem = usage_problem(&exchange, &request);
    // Usage that cannot be right is not used: the tokenizer counts instead.
    let usage = exchange.usage.filter(|_| usage_problem.is_none());
    let chunk_count = exchange.chunk_times.len();
    let usage_completion = usage.and_then(|u| u.completion);
    let usage_per_chunk =
        usage.is_some() && chunk_count > 0 && exchange.chunk_usage_tokens.iter().all(|&t| t > 0);
    // Tokenizing every completion is the client's largest cost per token. It is needed when the
    // server gives no usage, or when its usage cannot be spread over the chunks; otherwise one
    // request in CROSS_CHECK_EVERY is counted, to compare the plan's tokenizer with the server's.
    let needs_count = usage_completion.is_none()
        || (!usage_per_chunk && usage_completion != Some(chunk_count as u64))
        || request.seq % CROSS_CHECK_EVERY == 0;
    let counted = (needs_count && !exchange.text.is_empty())
        .then(|| count_within(tokenizer, &exchange.text, &meter));
    let tokenizer_completion = counted.map(|(n, _)| n);
    let counted_source = match counted {
        Some((_, false)) => TokenSource::Estimated,
        _ => TokenSource::Tokenizer,
    };

    let (chunk_tokens, chunk_source) = chunk_tokens(
        &exchange,
        tokenizer,
        &meter,
        usage_completion,
        usage_per_chunk,
        tokenizer_completion,
    );

    let (completion_tokens, token_source) = match usage_completion {
        Some(n) => (Some(n), Some(TokenSource::Usage)),
        None if exchange.error.is_none() => (
            Some(tokenizer_completion.unwrap_or(0)),
            Some(counted_source),
        ),
        None => (
            tokenizer_completion,
            tokenizer_completion.map(|_| counted_source),
        ),
    };
    let prompt_tokens = usage
        .and_then(|u| u.prompt)
        .or((exchange.error.is_none()).then_some(request.input_tokens as u64));

    let (reasoning_tokens, reasoning_token_source) = reasoning_tokens(
        &exchange,
        usage,
        &chunk_tokens,
        chunk_source,
        tokenizer,
        &meter,
    );

    let (error, error_detail) = match exchange.error {
        Some((class, detail)) => (Some(class), Some(detail)),
        None => (None, None),
    };
    let ttft_us = exchange.chunk_times.first().copied();
    let carries_media = !exchange.images.is_empty() || exchange.audio_ms > 0;
    let large_body = exchange.request_bytes >= crate::records::UPLOAD_RECORDED_BYTES;
    RequestRecord {
        images: (!exchange.images.is_empty()).then_some(exchange.images),
        audio_ms: (exchange.audio_ms > 0).then_some(exchange.audio_ms),
        request_bytes: (carries_media || large_body).then_some(exchange.request_bytes),
        upload_us: exchange.upload_us.filter(|_| large_body),
        images_fetched: exchange.images_fetched,
        e2e_us: (error != Some(ErrorClass::Connect)).then_some(exchange.end_us),
        error,
        error_detail,
        http_status: exchange.http_status,
        ttft_us,
        chunks: exchange
            .chunk_times
            .iter()
            .copied()
            .zip(chunk_tokens)
            .collect(),
        chunk_tokens: chunk_source,
        prompt_tokens,
        completion_tokens,
        token_source,
        completion_tokens_tokenizer: tokenizer_completion,
        cached_tokens: usage.and_then(|u| u.cached),
        // A server's word: kept as sent when it is a short line (it always is from a sane
        // server), else made one and shortened.
        finish_reason: exchange.finish_reason.map(kept_reason),
        model: exchange.model.filter(|_| error.is_none()),
        connection_retries: exchange.connection_retries,
        connect_us: exchange.connect_us,
        tls_us: exchange.tls_us,
        dns_us: exchange.dns_us,
        trace_id: exchange.trace.map(|trace| trace.trace_id_hex()),
        rate_limit: exchange.rate_limit.map(|limit| *limit),
        server_request_id: exchange.server_request_id,
        paced_us: (exchange.paced_us > 0).then_some(exchange.paced_us),
        key: exchange.key.and_then(|key| u32::try_from(key).ok()),
        throttled_attempts: (!exchange.throttled_attempts.is_empty())
            .then_some(exchange.throttled_attempts),
        usage_problem,
        chunk_kinds: (!exchange.chunk_kinds.is_empty()).then_some(exchange.chunk_kinds),
        reasoning_tokens,
        reasoning_token_source,
        tool_calls: (exchange.tool_calls > 0).then_some(exchange.tool_calls),
        ..planned(phase, &request, intended_send_us, actual_send_us)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::Usage;

    fn finished(exchange: Exchange) -> Finished {
        Finished {
            phase: 0,
            request: ScheduledRequest {
                seq: 0,
                intended_offset_us: None,
                input_tokens: 10,
                output_tokens: 4,
                prompt_seed: 1,
                prefix_group: None,
                origin: Default::default(),
                turn: None,
                conversation: None,
                turn_kind: None,
                batch: 0,
                media: Default::default(),
            },
            intended_send_us: 0,
            actual_send_us: 0,
            exchange,
            room: None,
        }
    }

    #[test]
    fn counting_is_bounded_and_says_when_it_estimated() {
        let tokenizer = Tokenizer::builtin("cl100k_base").unwrap();
        let text = "word ".repeat(1000);
        let exact = tokenizer.count(&text) as u64;
        let bytes = |bytes: usize| Meter {
            bytes,
            until: std::time::Instant::now() + std::time::Duration::from_secs(60),
        };
        assert_eq!(
            count_within(&tokenizer, &text, &bytes(text.len())),
            (exact, true)
        );
        // Half counted, the rest in proportion: close to the truth on even text.
        let (estimate, counted) = count_within(&tokenizer, &text, &bytes(text.len() / 2));
        assert!(!counted);
        assert!(
            estimate.abs_diff(exact) <= exact / 50,
            "{estimate} vs {exact}"
        );
        // Nothing counted (after a second Ctrl-C): 4 bytes a token.
        assert_eq!(count_within(&tokenizer, &text, &bytes(0)), (1250, false));
        // A cut inside a character moves back to its start.
        assert!(count_within(&tokenizer, "é".repeat(10).as_str(), &bytes(3)).0 > 0);
        // Time up: one piece counted, the rest in proportion.
        let long = "word ".repeat(100_000);
        let late = Meter {
            bytes: long.len(),
            until: std::time::Instant::now(),
        };
        let (estimate, counted) = count_within(&tokenizer, &long, &late);
        assert!(!counted);
        let exact = tokenizer.count(&long) as u64;
        assert!(
            estimate.abs_diff(exact) <= exact / 50,
            "{estimate} vs {exact}"
        );
    }

    #[test]
    fn tokens_per_chunk_by_tokenizer_when_usage_disagrees_with_chunk_count() {
        let tokenizer = Tokenizer::builtin("cl100k_base").unwrap();
        let exchange = Exchange {
            chunk_times: vec![100, 200],
            chunk_usage_tokens: vec![0, 0],
            text: " the cat sat".into(),
            chunk_ends: vec![8, 12],
            usage: Some(Usage {
                prompt: Some(10),
                completion: Some(3),
                ..Usage::default()
            }),
            finish_reason: Some("length".into()),
            end_us: 250,
            done: true,
            ..Exchange::default()
        };
        let record = finalize(finished(exchange), &tokenizer, COUNT_BUDGET);
        assert_eq!(record.chunks, vec![(100, 2), (200, 1)]);
        assert_eq!(record.chunk_tokens, Some(TokenSource::UsageByTokenizer));
        assert_eq!(record.completion_tokens, Some(3));
        assert_eq!(record.token_source, Some(TokenSource::Usage));
        assert_eq!(record.ttft_us, Some(100));
    }

    #[test]
    fn the_servers_total_is_spread_over_chunks_by_the_tokenizers_counts() {
        // llama.cpp holds back a split UTF-8 character: 24 tokens in 23 chunks, and the
        // tokenizer, counting each chunk's text alone, sees 3 where the server had 2.
        let mut counts = vec![1u32; 23];
        counts[14] = 3;
        let spread = spread_total(&counts, 24);
        assert_eq!(spread.iter().sum::<u32>(), 24);
        assert_eq!(spread[14], 2);
        // Weighted by the excess, remainders to the largest.
        assert_eq!(spread_total(&[1, 4, 2, 1], 7), vec![1, 3, 2, 1]);
        // No chunk looked like more than one: by count, first ones first.
        assert_eq!(spread_total(&[1, 1, 1], 5), vec![2, 2, 1]);
        assert_eq!(spread_total(&[5, 5], 2), vec![1, 1]);
    }

    #[test]
    fn usage_equal_to_chunk_count_means_one_token_each() {
        let tokenizer = Tokenizer::builtin("cl100k_base").unwrap();
        let exchange = Exchange {
            chunk_times: vec![1, 2, 3],
            chunk_usage_tokens: vec![0, 0, 0],
            text: "abc".into(),
            chunk_ends: vec![1, 2, 3],
            usage: Some(Usage {
                prompt: Some(10),
                completion: Some(3),
                ..Usage::default()
            }),
            end_us: 4,
            done: true,
            ..Exchange::default()
        };
        let mut request = finished(exchange);
        let exchange = Exchange {
            chunk_times: request.exchange.chunk_times.clone(),
            chunk_usage_tokens: request.exchange.chunk_usage_tokens.clone(),
            text: request.exchange.text.clone(),
            chunk_ends: request.exchange.chunk_ends.clone(),
            usage: request.exchange.usage,
            ..Exchange::default()
        };
        let record = finalize(request, &tokenizer, COUNT_BUDGET);
        assert_eq!(record.chunk_tokens, Some(TokenSource::OnePerChunk));
        assert!(record.chunks.iter().all(|c| c.1 == 1));
        // Request 0 is one of the one-in-16 whose completion the tokenizer also counts...
        assert_eq!(record.completion_tokens_tokenizer, Some(1));
        // ...request 1 is not: the usage says it all.
        request = finished(exchange);
        request.request.seq = 1;
        let record = finalize(request, &tokenizer, COUNT_BUDGET);
        assert_eq!(record.completion_tokens, Some(3));
        assert_eq!(record.completion_tokens_tokenizer, None);
    }

    #[test]
    fn without_usage_the_tokenizer_counts() {
        let tokenizer = Tokenizer::builtin("cl100k_base").unwrap();
        let exchange = Exchange {
            chunk_times: vec![1, 2],
            chunk_usage_tokens: vec![0, 0],
            text: " the cat".into(),
            chunk_ends: vec![4, 8],
            end_us: 3,
            done: true,
            ..Exchange::default()
        };
        let record = finalize(finished(exchange), &tokenizer, COUNT_BUDGET);
        assert_eq!(record.completion_tokens, Some(2));
        assert_eq!(record.token_source, Some(TokenSource::Tokenizer));
        assert_eq!(record.prompt_tokens, Some(10));
    }
}
