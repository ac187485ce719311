//! A model of a continuous-batching serving engine, after vLLM's scheduler, running in real time.
//!
//! One task runs engine steps back to back. Each step: running sequences past prefill get one
//! token each (decodes first, as vLLM V1 schedules them); sequences in prefill get chunks of the
//! per-step token budget (`max_batched_tokens`); waiting requests are admitted first-come
//! first-served while fewer than `max_seqs` run and the KV cache has blocks for their prompt. A
//! decode that needs a new KV block when none is free preempts the most recently admitted
//! sequence: its blocks are freed and it returns to the head of the queue, to be recomputed
//! (prompt and generated tokens prefilled again) — the ITL spikes real servers show near their KV
//! limit. The step lasts
//! `step_base + prefill tokens × prefill_per_token + decodes × decode_per_seq + context tokens ×
//! attention_per_token`, and tokens are released at its end, so ITL rises with batch size and
//! TTFT with queueing.

use std::collections::HashMap;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;

use super::metrics::SimMetrics;
use crate::plan::EngineSettings;
use crate::timer::PreciseTimer;

/// What a request's stream receives from the engine.
#[derive(Debug, PartialEq, Eq)]
pub enum EngineEvent {
    /// One generated token.
    Token,
    /// The request finished.
    Finished,
}

/// Why the engine refused a request.
#[derive(Debug, PartialEq, Eq)]
pub struct Rejection {
    /// The HTTP status to answer with.
    pub status: u16,
    /// Why.
    pub message: String,
    /// The OpenAI error type.
    pub kind: &'static str,
}

struct Submission {
    prompt: u32,
    /// The prompt's full KV blocks, as chained hashes (each names its block and all before it).
    blocks: Vec<u64>,
    /// Where the engine writes how many prompt tokens its prefix cache served.
    cached: Arc<AtomicU32>,
    max_tokens: u32,
    arrived: Instant,
    events: mpsc::UnboundedSender<EngineEvent>,
}

#[derive(Clone)]
/// The engine model: its scheduler runs on a thread of its own.
pub struct Engine {
    settings: EngineSettings,
    submissions: mpsc::UnboundedSender<Submission>,
    waiting: Arc<AtomicUsize>,
    /// Resets asked of the prefix cache (`POST /reset_prefix_cache`): the scheduler empties it
    /// before its next lookup when this moved.
    resets: Arc<std::sync::atomic::AtomicU64>,
}

struct Sequence {
    prompt: u32,
    prefix_blocks: Vec<u64>,
    cached: Arc<AtomicU32>,
    max_tokens: u32,
    generated: u32,
    /// Tokens whose KV is computed.
    computed: u32,
    /// Tokens still to prefill (prompt, plus generated ones after a preemption).
    prefill_remaining: u32,
    blocks: u64,
    admitted_order: u64,
    arrived: Instant,
    first_admitted: Option<Instant>,
    last_token: Option<Instant>,
    events: mpsc::UnboundedSender<EngineEvent>,
}

impl Engine {
    /// Starts the scheduler.
    pub fn start(
        settings: EngineSettings,
        timer: PreciseTimer,
        metrics: Arc<SimMetrics>,
    ) -> Engine {
        let (submissions, inbox) = mpsc::unbounded_channel();
        let waiting = Arc::new(AtomicUsize::new(0));
        let resets = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let engine = Engine {
            settings: settings.clone(),
            submissions,
            waiting: waiting.clone(),
            resets: resets.clone(),
        };
        tokio::spawn(run(settings, inbox, timer, metrics, waiting, resets));
        engine
    }

    /// Empties the prefix cache (as vLLM's `POST /reset_prefix_cache`); false when the engine
    /// keeps none.
    pub fn reset_prefix_cache(&self) -> bool {
        if !self.settings.prefix_cache {
            return false;
        }
        self.resets
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        true
    }

    /// Queues a request, or refuses it as a real server would (too long, queue full).
    pub fn submit(
        &self,
        prompt: u32,
        blocks: Vec<u64>,
        cached: Arc<AtomicU32>,
        max_tokens: u32,
    ) -> Result<mpsc::UnboundedReceiver<EngineEvent>, Rejection> {
        let total = prompt as u64 + max_tokens as u64;
        if total > self.settings.max_model_len as u64 {
            return Err(Rejection {
                status: 400,
                message: format!(
                    "This model's maximum context length is {} tokens. However, you requested {total} tokens \
                     ({prompt} in the messages, {max_tokens} in the completion).",
                    self.settings.max_model_len
                ),
                kind: "BadRequestError",
            });
        }
        // A request that could never fit in the KV cache would wait forever: refuse it now.
        if total > self.settings.kv_cache_tokens {
            return Err(Rejection {
                status: 400,
                message: format!(
                    "the request needs {total} tokens of KV cache, more than the {} the engine has",
                    self.settings.kv_cache_tokens
                ),
                kind: "BadRequestError",
            });
        }
        if self.waiting.load(Ordering::SeqCst) >= self.settings.max_waiting as usize {
            return Err(Rejection {
                status: self.settings.queue_full_status,
                message: "the server's request queue is full; try again later".into(),
                kind: if self.settings.queue_full_status == 429 {
                    "RateLimitError"
                } else {
                    "ServiceUnavailableError"
                },
            });
        }
        let (events, receiver) = mpsc::unbounded_channel();
        self.waiting.fetch_add(1, Ordering::SeqCst);
        let submitted = self.submissions.send(Submission {
            prompt,
            blocks,
            cached,
            max_tokens: max_tokens.max(1),
            arrived: Instant::now(),
            events,
        });
        if submitted.is_err() {
            self.waiting.fetch_sub(1, Ordering::SeqCst);
            return Err(Rejection {
                status: 503,
                message: "the engine has stopped".into(),
                kind: "ServiceUnavailableError",
            });
        }
        Ok(receiver)
    }
}

/// The prompt blocks whose KV the engine keeps after their requests end, least recently used
/// first out: vLLM's automatic prefix caching, as a cache of its own size (the KV cache's) beside
/// the blocks running sequences hold.
struct PrefixCache {
    capacity: usize,
    last_used: HashMap<u64, u64>,
    clock: u64,
}

impl PrefixCache {
    /// How many of `blocks` lead the prompt from the cache; all of them are then kept (used now).
    fn lookup_and_keep(&mut self, blocks: &[u64]) -> usize {
        let hits = blocks
            .iter()
            .take_while(|hash| self.last_used.contains_key(hash))
            .count();
        for hash in blocks {
            self.clock += 1;
            self.last_used.insert(*hash, self.clock);
        }
        if self.last_used.len() > self.capacity {
            // Evict the oldest blocks, a tenth of the cache at a time so that eviction stays
            // rare (sorting the cache is the cost here, not the eviction itself).
            let mut by_age: Vec<(u64, u64)> =
                self.last_used.iter().map(|(h, t)| (*t, *h)).collect();
            by_age.sort_unstable();
            let excess = self.last_used.len() - self.capacity + self.capacity / 10;
            for (_, hash) in by_age.into_iter().take(excess) {
                self.last_used.remove(&hash);
            }
        }
        hits
    }
}

fn blocks_for(tokens: u64, block_size: u32) -> u64 {
    tokens.div_ceil(block_size as u64)
}

/// The engine's loop: take what was submitted, drop what its client left, run one step
/// (decodes, prefill chunks, admissions), sleep its modelled time, release its tokens.
async fn run(
    settings: EngineSettings,
    mut inbox: mpsc::UnboundedReceiver<Submission>,
    timer: PreciseTimer,
    metrics: Arc<SimMetrics>,
    waiting_count: Arc<AtomicUsize>,
    resets: Arc<std::sync::atomic::AtomicU64>,
) {
    let mut engine = Scheduler::new(settings, metrics, waiting_count, resets);
    loop {
        if engine.running.is_empty() && engine.waiting.is_empty() {
            match inbox.recv().await {
                Some(submission) => engine.waiting.push_back(Sequence::from(submission)),
                None => return,
            }
        }
        while let Ok(submission) = inbox.try_recv() {
            engine.waiting.push_back(Sequence::from(submission));
        }
        engine.drop_gone();
        let step_start = Instant::now();
        let mut step = Step {
            budget: engine.settings.max_batched_tokens as u64,
            prefill_tokens: 0,
            decodes: 0,
            preemptions: 0,
            // Which running sequences sample a token at the end of this step.
            sampled: vec![false; engine.running.len()],
        };
        engine.decode(&mut step);
        engine.continue_prefills(&mut step);
        engine.admit(&mut step, step_start);
        let duration = engine.duration(&step);
        engine.say_step(step.preemptions);
        timer.sleep_until(step_start + duration).await;
        engine.release(&step);
        engine.say_step(0);
    }
}

impl From<Submission> for Sequence {
    fn from(s: Submission) -> Sequence {
        Sequence {
            prompt: s.prompt,
            prefix_blocks: s.blocks,
            cached: s.cached,
            max_tokens: s.max_tokens,
            generated: 0,
            computed: 0,
            prefill_remaining: s.prompt.max(1),
            blocks: 0,
            admitted_order: 0,
            arrived: s.arrived,
            first_admitted: None,
            last_token: None,
            events: s.events,
        }
    }
}

/// What one engine step does: its token budget left, what it computes, and which running
/// sequences sample a token at its end.
struct Step {
    budget: u64,
    prefill_tokens: u64,
    decodes: u64,
    preemptions: u64,
    sampled: Vec<bool>,
}

/// The engine's state between steps: its sequences, its KV blocks, its prefix cache.
struct Scheduler {
    settings: EngineSettings,
    metrics: Arc<SimMetrics>,
    /// Requests not yet admitted once (shared with `Engine::submit`'s queue check).
    waiting_count: Arc<AtomicUsize>,
    /// Prefix-cache resets asked, and how many this loop has done.
    resets: Arc<std::sync::atomic::AtomicU64>,
    resets_seen: u64,
    total_blocks: u64,
    free_blocks: u64,
    waiting: VecDeque<Sequence>,
    running: Vec<Sequence>,
    admissions: u64,
    prefix_cache: Option<PrefixCache>,
}

impl Scheduler {
    fn new(
        settings: EngineSettings,
        metrics: Arc<SimMetrics>,
        waiting_count: Arc<AtomicUsize>,
        resets: Arc<std::sync::atomic::AtomicU64>,
    ) -> Scheduler {
        let total_blocks = (settings.kv_cache_tokens / settings.block_size as u64).max(1);
        let prefix_cache = settings.prefix_cache.then(|| PrefixCache {
            capacity: total_blocks as usize,
            last_used: HashMap::new(),
            clock: 0,
        });
        Scheduler {
            settings,
            metrics,
            waiting_count,
            resets,
            resets_seen: 0,
            total_blocks,
            free_blocks: total_blocks,
            waiting: VecDeque::new(),
            running: Vec::new(),
            admissions: 0,
            prefix_cache,
        }
    }

    /// Streams whose client went away free their slot and blocks.
    fn drop_gone(&mut self) {
        let free_blocks = &mut self.free_blocks;
        self.running.retain(|seq| {
            let gone = seq.events.is_closed();
            if gone {
                *free_blocks += seq.blocks;
            }
            !gone
        });
        let waiting_count = &self.waiting_count;
        self.waiting.retain(|seq| {
            let gone = seq.events.is_closed();
            // A request that leaves before its first admission no longer counts as waiting.
            if gone && seq.first_admitted.is_none() {
                waiting_count.fetch_sub(1, Ordering::SeqCst);
            }
            !gone
        });
    }

    /// Decodes first: each needs one token of budget and room for one more KV entry, for
    /// which the most recently admitted sequences are preempted.
    fn decode(&mut self, step: &mut Step) {
        let running = &mut self.running;
        let mut index = 0;
        while index < running.len() {
            if running[index].prefill_remaining > 0 {
                index += 1;
                continue;
            }
            let needed = blocks_for(running[index].computed as u64 + 1, self.settings.block_size);
            let mut preempted_self = false;
            while running[index].blocks < needed && self.free_blocks == 0 {
                // Preempt the most recently admitted sequence (possibly this one).
                let victim = (0..running.len())
                    .max_by_key(|&i| running[i].admitted_order)
                    .unwrap_or(index);
                let mut seq = running.remove(victim);
                step.sampled.remove(victim);
                self.free_blocks += seq.blocks;
                seq.blocks = 0;
                seq.computed = 0;
                seq.prefill_remaining = seq.prompt + seq.generated;
                self.waiting.push_front(seq);
                step.preemptions += 1;
                if victim == index {
                    preempted_self = true;
                    break;
                }
                if victim < index {
                    index -= 1;
                }
            }
            if preempted_self {
                continue;
            }
            let seq = &mut running[index];
            if seq.blocks < needed {
                self.free_blocks -= 1;
                seq.blocks += 1;
            }
            seq.computed += 1;
            step.budget = step.budget.saturating_sub(1);
            step.decodes += 1;
            step.sampled[index] = true;
            index += 1;
        }
    }

    /// Ongoing prefills get chunks of what is left.
    fn continue_prefills(&mut self, step: &mut Step) {
        for (i, seq) in self.running.iter_mut().enumerate() {
            if seq.prefill_remaining == 0 || step.budget == 0 {
                continue;
            }
            let chunk = (seq.prefill_remaining as u64).min(step.budget) as u32;
            seq.prefill_remaining -= chunk;
            seq.computed += chunk;
            step.budget -= chunk as u64;
            step.prefill_tokens += chunk as u64;
            if seq.prefill_remaining == 0 {
                step.sampled[i] = true;
            }
        }
    }

    /// Admits waiting requests, first come first served, while there is a slot and KV room;
    /// each starts its prefill in this step.
    fn admit(&mut self, step: &mut Step, step_start: Instant) {
        while self.running.len() < self.settings.max_seqs as usize {
            let Some(front) = self.waiting.front() else {
                break;
            };
            let needed = blocks_for(
                (front.prompt + front.generated) as u64,
                self.settings.block_size,
            );
            if needed > self.free_blocks {
                break;
            }
            let Some(mut seq) = self.waiting.pop_front() else {
                break;
            };
            self.free_blocks -= needed;
            seq.blocks = needed;
            self.admissions += 1;
            seq.admitted_order = self.admissions;
            if seq.first_admitted.is_none() {
                self.first_admission(&mut seq, step_start);
            }
            let chunk = (seq.prefill_remaining as u64).min(step.budget) as u32;
            seq.prefill_remaining -= chunk;
            seq.computed += chunk;
            step.budget -= chunk as u64;
            step.prefill_tokens += chunk as u64;
            step.sampled.push(seq.prefill_remaining == 0);
            self.running.push(seq);
        }
    }

    /// A request admitted for the first time: what its prefix finds in the cache (after a
    /// reset asked meanwhile), and its time in the queue.
    fn first_admission(&mut self, seq: &mut Sequence, step_start: Instant) {
        seq.first_admitted = Some(step_start);
        if let Some(cache) = self.prefix_cache.as_mut() {
            let asked = self.resets.load(std::sync::atomic::Ordering::SeqCst);
            if asked != self.resets_seen {
                self.resets_seen = asked;
                cache.last_used.clear();
            }
            let hits = cache.lookup_and_keep(&seq.prefix_blocks) as u64;
            // The last prompt token is always computed: its logits give the first token.
            let cached = (hits * self.settings.block_size as u64)
                .min(seq.prompt.saturating_sub(1) as u64) as u32;
            seq.prefill_remaining -= cached.min(seq.prefill_remaining.saturating_sub(1));
            seq.computed += cached;
            seq.cached.store(cached, Ordering::Relaxed);
            self.metrics.on_prefix_lookup(seq.prompt, cached);
        }
        self.waiting_count.fetch_sub(1, Ordering::SeqCst);
        self.metrics.on_admitted(
            step_start.saturating_duration_since(seq.arrived),
            seq.prompt,
        );
    }

    /// The step's modelled time: a base, its prefill tokens, its decodes, and attention over
    /// every running sequence's context.
    fn duration(&self, step: &Step) -> Duration {
        let settings = &self.settings;
        let context: u64 = self.running.iter().map(|s| s.computed as u64).sum();
        settings.step_base
            + settings.prefill_per_token * step.prefill_tokens as u32
            + settings.decode_per_seq * step.decodes as u32
            + Duration::from_nanos(
                (settings.attention_per_token.as_nanos() as u64).saturating_mul(context),
            )
    }

    /// The engine's gauges now (and the step's preemptions).
    fn say_step(&self, preemptions: u64) {
        self.metrics.on_step(
            self.running.len(),
            self.waiting.len(),
            (self.total_blocks - self.free_blocks) as f64 / self.total_blocks as f64,
            preemptions,
        );
    }

    /// The step is over: its tokens released, what the GPUs did for them said, and the
    /// sequences that reached their length finished.
    fn release(&mut self, step: &Step) {
        let metrics = &self.metrics;
        metrics.on_gpu_work(
            step.prefill_tokens,
            step.sampled.iter().filter(|s| **s).count() as u64,
        );
        let now = Instant::now();
        let mut finished = Vec::new();
        for (i, seq) in self.running.iter_mut().enumerate() {
            if !step.sampled[i] {
                continue;
            }
            seq.generated += 1;
            match seq.last_token {
                None => metrics.on_first_token(now.saturating_duration_since(seq.arrived)),
                Some(previous) => metrics.on_token(now.saturating_duration_since(previous)),
            }
            seq.last_token = Some(now);
            let _ = seq.events.send(EngineEvent::Token);
            if seq.generated >= seq.max_tokens {
                finished.push(i);
            }
        }
        for i in finished.into_iter().rev() {
            let seq = self.running.remove(i);
            self.free_blocks += seq.blocks;
            metrics.on_finished(now.saturating_duration_since(seq.arrived));
            let _ = seq.events.send(EngineEvent::Finished);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> EngineSettings {
        EngineSettings {
            max_seqs: 2,
            max_batched_tokens: 64,
            kv_cache_tokens: 256,
            block_size: 16,
            prefix_cache: true,
            max_model_len: 1024,
            max_waiting: 1,
            queue_full_status: 503,
            step_base: Duration::from_millis(1),
            prefill_per_token: Duration::ZERO,
            decode_per_seq: Duration::ZERO,
            attention_per_token: Duration::ZERO,
        }
    }

    #[tokio::test]
    async fn refuses_what_could_never_run_and_serves_the_rest() {
        let engine = Engine::start(
            settings(),
            PreciseTimer::start().unwrap(),
            Arc::new(SimMetrics::new("m")),
        );
        let cell = || Arc::new(AtomicU32::new(0));
        let too_long = engine.submit(1000, vec![], cell(), 100).unwrap_err();
        assert_eq!(too_long.status, 400);
        let beyond_kv = engine.submit(200, vec![], cell(), 100).unwrap_err();
        assert_eq!(beyond_kv.status, 400);
        assert!(beyond_kv.message.contains("KV cache"));
        let mut events = engine.submit(20, vec![], cell(), 5).unwrap();
        let mut tokens = 0;
        while let Some(event) = events.recv().await {
            match event {
                EngineEvent::Token => tokens += 1,
                EngineEvent::Finished => break,
            }
        }
        assert_eq!(tokens, 5);
    }

    async fn run_to_end(mut events: mpsc::UnboundedReceiver<EngineEvent>) {
        while let Some(event) = events.recv().await {
            if event == EngineEvent::Finished {
                break;
            }
        }
    }

    #[tokio::test]
    async fn a_repeated_prefix_is_served_from_the_cache() {
        let engine = Engine::start(
            settings(),
            PreciseTimer::start().unwrap(),
            Arc::new(SimMetrics::new("m")),
        );
        // 40 tokens: two full blocks of 16 and a partial one.
        let first = Arc::new(AtomicU32::new(99));
        run_to_end(engine.submit(40, vec![1, 2], first.clone(), 2).unwrap()).await;
        assert_eq!(first.load(Ordering::Relaxed), 0);
        let second = Arc::new(AtomicU32::new(0));
        run_to_end(engine.submit(40, vec![1, 2], second.clone(), 2).unwrap()).await;
        assert_eq!(second.load(Ordering::Relaxed), 32);
        // Only the leading blocks count: a different first block misses everything.
        let third = Arc::new(AtomicU32::new(0));
        run_to_end(engine.submit(40, vec![3, 2], third.clone(), 2).unwrap()).await;
        assert_eq!(third.load(Ordering::Relaxed), 0);
        // A prompt that is all cached blocks still computes its last token.
        let whole = Arc::new(AtomicU32::new(0));
        run_to_end(engine.submit(32, vec![1, 2], whole.clone(), 2).unwrap()).await;
        assert_eq!(whole.load(Ordering::Relaxed), 31);
    }
}
