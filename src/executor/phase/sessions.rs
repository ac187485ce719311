//! The sessions driver: agent sessions replayed from a file, so many at once. Each slot runs
//! the file's next session when its last has ended; within a session every call waits for the
//! answers it comes after (its parent's, or every sub-agent's it joins), then its recorded wait
//! (scaled, capped), then goes. A call whose parent failed is not sent (there is no answer to go
//! on from): the session ends without it, and counts as failed.
//!
//! The file is streamed on a thread of its own, a few sessions ahead of the slots, so that a
//! trace of any length holds only the sessions running and those next in line. A prompt (an
//! agent's context is tens of thousands of tokens) is built on a blocking thread while its call
//! waits for its time, never on the thread sending the others.
//!
//! With `live=#true` an agent's call goes on from its previous call as the server answered it:
//! that call's messages, the server's answer, then new text for what the recording added
//! (tool results, the user's next message). A recorded context that shrank (the agent
//! compacted it) starts afresh from its blocks, as the agent did.
//!
//! What this is not: reading a session format (`plan::sessions`), or judging sessions (the
//! metric table, from the records' session lines).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use rand::{Rng, SeedableRng};
use tokio::sync::{mpsc, watch, Mutex};
use tokio::time::Instant;

use super::Drive;
use crate::executor::context::{ended_early, Context, PhaseState};
use crate::executor::observe::stopped;
use crate::executor::send::execute;
use crate::executor::Event;
use crate::plan::sessions::{Call, Session, SessionReader, Sessions};
use crate::planner::{Blocks, Message, PhaseSchedule, Prompt, ScheduledRequest};
use crate::records::{LogLine, SessionEnd};

/// Sequence numbers a session's calls take: call `i` of session `u` is request `u × this + i`,
/// unique across slots, rounds and shards.
const SEQ_PER_SESSION: u64 = crate::plan::sessions::MAX_SESSION_CALLS as u64;

/// Runs the phase's sessions until the file is spent (once, without a duration) or its
/// duration ends, it is stopped, or it is ended early: so many at once (slots), or started at
/// a rate.
pub(super) async fn drive(drive: Drive<'_>, sessions: &Sessions) {
    let Drive {
        context,
        state,
        phase,
        phase_start,
        deadline,
        mut cancel,
        mut ended,
        ..
    } = drive;
    let ahead = sessions
        .rate
        .map_or(sessions.concurrent, |rate| rate.ceil() as u32);
    let queue = Arc::new(Mutex::new(spawn_reader(context, phase, sessions, ahead)));
    let run = Arc::new(SessionRun {
        context: context.clone(),
        state: state.clone(),
        sessions: Arc::new(sessions.clone()),
        phase_index: phase.index,
        deadline,
        cancel: cancel.clone(),
        builder: spawn_builder(context, phase.index),
        room: sessions
            .max_in_flight
            .map(|most| Arc::new(tokio::sync::Semaphore::new(most as usize))),
    });
    let mut tasks = tokio::task::JoinSet::new();
    match sessions.rate {
        None => {
            for _ in 0..sessions.concurrent {
                tasks.spawn(slot(run.clone(), queue.clone()));
            }
        }
        Some(rate) => {
            let seed = crate::seed::arrival_seed(context.schedule.seed, phase.index);
            let arrivals = arrive(run.clone(), queue.clone(), rate, seed, phase_start);
            tasks.spawn(arrivals);
        }
    }
    // Sessions still going finish their calls in flight in the background, sending no more.
    super::until_done(tasks, deadline, &mut cancel, &mut ended).await;
}

type Queue = Arc<Mutex<mpsc::Receiver<(u64, Session)>>>;

/// The file's next session, or `None` once it is spent, the run stopped or the phase ended
/// (its deadline passed: a session taken then would only be cut short).
async fn next_session(run: &SessionRun, queue: &Queue) -> Option<(u64, Session)> {
    let mut cancel = run.cancel.clone();
    let mut ended = run.state.ended.clone();
    let past = || run.deadline.is_some_and(|d| Instant::now() >= d);
    if *cancel.borrow() || ended.borrow().is_some() || past() {
        return None;
    }
    let next = tokio::select! {
        next = async { queue.lock().await.recv().await } => next,
        _ = stopped(&mut cancel) => None,
        _ = ended_early(&mut ended) => None,
    };
    next.filter(|_| !past())
}

/// One slot: the file's next session as soon as its last has ended.
async fn slot(run: Arc<SessionRun>, queue: Queue) {
    while let Some((uid, session)) = next_session(&run, &queue).await {
        run.session(uid, session).await;
    }
}

/// Sessions started at Poisson arrivals of `rate` a second (drawn from `seed`), however many
/// are running; returns when the last has ended.
async fn arrive(run: Arc<SessionRun>, queue: Queue, rate: f64, seed: u64, start: Instant) {
    use rand_distr::Distribution;
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let Ok(gaps) = rand_distr::Exp::new(rate) else {
        return;
    };
    let mut at = start;
    let mut running = tokio::task::JoinSet::new();
    loop {
        at += Duration::from_secs_f64(gaps.sample(&mut rng));
        if run.deadline.is_some_and(|d| at >= d) {
            break;
        }
        let (mut cancel, mut ended) = (run.cancel.clone(), run.state.ended.clone());
        tokio::select! {
            _ = run.context.timer.sleep_until(at) => {}
            _ = stopped(&mut cancel) => break,
            _ = ended_early(&mut ended) => break,
        }
        let Some((uid, session)) = next_session(&run, &queue).await else {
            break;
        };
        let run = run.clone();
        running.spawn(async move { run.session(uid, session).await });
    }
    while running.join_next().await.is_some() {}
}

/// Streams the file's sessions (this shard's: every `seq_stride`-th from `seq_offset`), each
/// started at its drawn point of the start window, over and over while the phase has a
/// duration; a session's id in the phase is `round × sessions in the file + its position`.
fn spawn_reader(
    context: &Arc<Context>,
    phase: &PhaseSchedule,
    sessions: &Sessions,
    slots: u32,
) -> mpsc::Receiver<(u64, Session)> {
    let (tx, rx) = mpsc::channel(slots.clamp(1, 64) as usize);
    let context = context.clone();
    let sessions = sessions.clone();
    let (offset, stride) = (phase.seq_offset, phase.seq_stride.max(1));
    let rounds = if phase.duration.is_some() {
        u64::MAX
    } else {
        1
    };
    let seed = crate::seed::derived(context.schedule.seed, 0x7365_7373 ^ phase.index as u64);
    std::thread::spawn(move || {
        let per_round = sessions.summary.sessions.max(1);
        for round in 0..rounds {
            let reader = match SessionReader::open(&sessions.path, &sessions.shown) {
                Ok(reader) => reader,
                Err(e) => return note(&context, &format!("cannot read {}: {e}", sessions.shown)),
            };
            // A round that hands out nothing (a shard dealt none of the file's sessions) would
            // be read again and again, at full speed, for nothing.
            let mut any = false;
            for session in reader {
                let session = match session {
                    Ok(session) => session,
                    Err(e) => return note(&context, &format!("stopped reading sessions: {e}")),
                };
                if session.ordinal % stride != offset % stride {
                    continue;
                }
                any = true;
                let uid = round * per_round + session.ordinal;
                let session = start_in_window(session, sessions.start_window, seed ^ uid);
                if tx.blocking_send((uid, session)).is_err() {
                    return;
                }
            }
            if !any {
                return;
            }
        }
    });
    rx
}

fn note(context: &Context, text: &str) {
    context.observer.on_event(Event::Note(text));
}

/// `session` from a point drawn (from `seed`) within `window`, a share of its calls.
fn start_in_window(session: Session, window: Option<(f64, f64)>, seed: u64) -> Session {
    let Some((from, to)) = window else {
        return session;
    };
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(crate::seed::mix64(seed));
    let share = if to > from {
        rng.random_range(from..to)
    } else {
        from
    };
    // At least its last call is left: a session of none would be judged on nothing.
    let calls = session.calls.len();
    let first = (share * calls as f64).floor() as usize;
    session.starting_at(first.min(calls.saturating_sub(1)))
}

/// What every session of one slot shares.
struct SessionRun {
    context: Arc<Context>,
    state: Arc<PhaseState>,
    sessions: Arc<Sessions>,
    phase_index: usize,
    deadline: Option<Instant>,
    cancel: watch::Receiver<bool>,
    /// The phase's body builder.
    builder: std::sync::mpsc::Sender<BodyJob>,
    /// Room for calls in flight across the phase's sessions (`max-in-flight`).
    room: Option<Arc<tokio::sync::Semaphore>>,
}

/// A call's body to build: the session's blocks (`scope`) for call `index`, or (answers live)
/// its agent's previous call and answer, `prior`.
struct BodyJob {
    session: Arc<Session>,
    index: usize,
    scope: u64,
    request: ScheduledRequest,
    prior: Option<Arc<LiveContext>>,
    live: bool,
    made: tokio::sync::oneshot::Sender<Built>,
}

/// A call's body as built: its prompt tokens, and (answers live) its messages, which its
/// agent's next call goes on from.
struct Built {
    body: Bytes,
    input_tokens: u32,
    messages: Option<Vec<Message>>,
}

/// What an agent's next call goes on from when answers are live.
struct LiveContext {
    /// The call's prompt, as messages.
    messages: Vec<Message>,
    /// Its prompt tokens.
    tokens: u32,
    /// The server's answer to it.
    answer: String,
    /// The recorded call's input and output tokens: what the recording's next call held of it.
    recorded: u32,
}

impl LiveContext {
    /// The context a call that goes on from this one starts with: its messages, then the
    /// server's answer as the assistant's; and their tokens.
    fn continued(&self, tokenizer: &crate::tokens::Tokenizer) -> (Vec<Message>, usize) {
        let mut messages = self.messages.clone();
        messages.push(Message::text("assistant", self.answer.clone()));
        (
            messages,
            self.tokens as usize + tokenizer.count(&self.answer),
        )
    }
}

/// Builds the phase's bodies, one after another, on a thread of its own: a body per call from
/// a thread pool instead (`spawn_blocking`) spread its allocations over as many malloc arenas
/// as threads, and a search over 16 sessions held 253 MB at its peak against 86 MB for the same
/// search over users (136 MB with one arena). It ends when the phase's sessions have all gone.
fn spawn_builder(context: &Arc<Context>, phase_index: usize) -> std::sync::mpsc::Sender<BodyJob> {
    let (jobs, queue) = std::sync::mpsc::channel::<BodyJob>();
    let context = context.clone();
    std::thread::spawn(move || {
        for job in queue {
            let call = &job.session.calls[job.index];
            let (prompt, input_tokens) = call_prompt(
                &context,
                call,
                job.scope,
                job.session.block_tokens,
                &job.request,
                job.prior.as_deref(),
            );
            let body = context
                .template(phase_index)
                .body(&prompt, job.request.output_tokens);
            let messages = job.live.then(|| crate::planner::as_messages(prompt));
            let _ = job.made.send(Built {
                body,
                input_tokens,
                messages,
            });
        }
    });
    jobs
}

/// How one call ended, as its session needs it.
struct CallDone {
    index: usize,
    /// It was answered: the calls after it may go.
    answered: bool,
    /// It was sent (not left out by the phase's end while it waited).
    sent: bool,
    waited: Duration,
    /// What its agent's next call goes on from (answers live).
    live: Option<LiveContext>,
}

impl SessionRun {
    /// Runs one session to its end: its calls as their dependencies allow, and its record.
    async fn session(&self, uid: u64, session: Session) {
        // The session counts as in flight while its calls wait, so that a phase that drains
        // waits for its last call.
        let _hold = self.context.enter(&self.state);
        let started = Instant::now();
        let calls = Arc::new(session);
        let mut blocked: Vec<usize> = calls.calls.iter().map(|c| c.after.len()).collect();
        let mut children: Vec<Vec<usize>> = vec![Vec::new(); calls.calls.len()];
        for (index, call) in calls.calls.iter().enumerate() {
            for &parent in &call.after {
                children[parent as usize].push(index);
            }
        }
        // Answers live: each answered call's context, kept until its agent's next call has it.
        let mut contexts = Contexts::new(&calls);
        let mut tasks = tokio::task::JoinSet::new();
        for (index, _) in blocked.iter().enumerate().filter(|(_, n)| **n == 0) {
            tasks.spawn(self.call(uid, calls.clone(), index, started, None));
        }
        let mut end = SessionEnd {
            phase: self.phase_index,
            session: uid,
            id: calls.id.clone(),
            start_us: self.context.micros(started),
            end_us: 0,
            calls: calls.calls.len() as u32,
            sent: 0,
            answered: 0,
            waited_ms: 0.0,
            shard: None,
        };
        while let Some(done) = tasks.join_next().await {
            // A call's task that died recorded its request already (as the client's failure).
            let Ok(done) = done else { continue };
            end.sent += u32::from(done.sent);
            end.waited_ms += done.waited.as_secs_f64() * 1e3;
            if !done.answered {
                continue;
            }
            end.answered += 1;
            contexts.answered(done.index, done.live);
            let now = Instant::now();
            for &child in &children[done.index] {
                blocked[child] -= 1;
                if blocked[child] == 0 {
                    let prior = contexts.take_for(child);
                    tasks.spawn(self.call(uid, calls.clone(), child, now, prior));
                }
            }
        }
        end.end_us = self.context.micros(Instant::now());
        self.context.log(LogLine::Session(end));
    }

    /// Call `index` of `session`, its dependencies met at `ready`: its prompt built (on
    /// `prior`, its agent's previous call, when answers are live), its wait waited, then sent.
    fn call(
        &self,
        uid: u64,
        session: Arc<Session>,
        index: usize,
        ready: Instant,
        prior: Option<Arc<LiveContext>>,
    ) -> impl std::future::Future<Output = CallDone> + Send + 'static {
        let context = self.context.clone();
        let state = self.state.clone();
        let wait = self.sessions.wait(session.calls[index].wait);
        let deadline = self.deadline;
        let mut cancel = self.cancel.clone();
        let phase_index = self.phase_index;
        let builder = self.builder.clone();
        let room = self.room.clone();
        let live = self.sessions.live;
        // Hash ids are the session's own (Weka's `local` scope): its id, the block size and the
        // round of the file seed them, so a session replayed again (the file's next round) is a
        // new session to the server's cache, not its first run's blocks again.
        let round = uid / self.sessions.summary.sessions.max(1);
        let scope = crate::seed::mix64(
            id_hash(&session.id) ^ u64::from(session.block_tokens) ^ round.rotate_left(40),
        );
        async move {
            let mut done = CallDone {
                index,
                answered: false,
                sent: false,
                waited: Duration::ZERO,
                live: None,
            };
            let seq = uid * SEQ_PER_SESSION + u64::from(session.first) + index as u64;
            let mut request = call_request(&context, phase_index, &session, uid, index, seq);
            let (made, built) = tokio::sync::oneshot::channel();
            let job = BodyJob {
                session: session.clone(),
                index,
                scope,
                request,
                prior,
                // A call whose messages the trace wrote goes on from the answers before it,
                // as the trace's own tool replays them.
                live: live || session.calls[index].text.is_some(),
                made,
            };
            if builder.send(job).is_err() {
                return done;
            }
            let send_at = ready + wait;
            if deadline.is_some_and(|d| send_at >= d) {
                return done;
            }
            let mut ended = state.ended.clone();
            tokio::select! {
                _ = context.timer.sleep_until(send_at) => {}
                _ = stopped(&mut cancel) => return done,
                _ = ended_early(&mut ended) => return done,
            }
            let Ok(built) = built.await else { return done };
            request.input_tokens = built.input_tokens;
            // The wait the session recorded; room under the cap, if it must wait for it, is
            // the client's delay and shows as the call's schedule lag.
            done.waited = Instant::now().saturating_duration_since(ready);
            let _room = match &room {
                Some(room) => tokio::select! {
                    permit = room.clone().acquire_owned() => permit.ok(),
                    _ = stopped(&mut cancel) => return done,
                    _ = ended_early(&mut ended) => return done,
                },
                None => None,
            };
            done.sent = true;
            let ticket = context.enter(&state);
            let answer = execute(ticket, request, built.body, Some(send_at), deadline, true).await;
            done.answered = answer.is_some();
            let call = &session.calls[index];
            done.live = answer
                .zip(built.messages)
                .map(|(answer, messages)| LiveContext {
                    messages,
                    tokens: built.input_tokens,
                    answer: answer.text,
                    recorded: call.input_tokens.saturating_add(call.output_tokens),
                });
            done
        }
    }
}

/// Call `index`'s request: its lengths, its place (session, call), its seeds.
fn call_request(
    context: &Context,
    phase_index: usize,
    session: &Session,
    uid: u64,
    index: usize,
    seq: u64,
) -> ScheduledRequest {
    let call = &session.calls[index];
    let request_seed = crate::seed::request_seed(context.schedule.seed, phase_index, seq);
    ScheduledRequest {
        seq,
        intended_offset_us: None,
        input_tokens: call.input_tokens,
        output_tokens: call.output_tokens,
        prompt_seed: crate::seed::prompt_seed(request_seed),
        prefix_group: None,
        origin: crate::planner::Origin::Synthetic,
        turn: Some(session.first + index as u32 + 1),
        conversation: Some(uid),
        // A tool turn goes on from its own agent's call that stopped for tools; a sub-agent's
        // first call is its task, a user turn, whatever its parent's call stopped for.
        turn_kind: Some(
            match session.own_parent(index).map(|p| session.calls[p].tool_use) {
                Some(true) => crate::records::TurnKind::Tool,
                Some(false) | None => crate::records::TurnKind::User,
            },
        ),
        batch: 0,
        media: Default::default(),
    }
}

/// Answered calls' contexts (answers live), each kept until the last call of its agent that
/// goes on from it has taken it.
struct Contexts {
    kept: Vec<Option<Arc<LiveContext>>>,
    /// Per call, its agent's calls still to go on from it.
    heirs: Vec<u32>,
    own_parent: Vec<Option<usize>>,
}

impl Contexts {
    fn new(session: &Session) -> Contexts {
        let own_parent: Vec<Option<usize>> = (0..session.calls.len())
            .map(|i| session.own_parent(i))
            .collect();
        let mut heirs = vec![0; session.calls.len()];
        for parent in own_parent.iter().flatten() {
            heirs[*parent] += 1;
        }
        Contexts {
            kept: vec![None; session.calls.len()],
            heirs,
            own_parent,
        }
    }

    fn answered(&mut self, index: usize, live: Option<LiveContext>) {
        if self.heirs[index] > 0 {
            self.kept[index] = live.map(Arc::new);
        }
    }

    /// What call `index` goes on from, if its agent's previous call was answered live.
    fn take_for(&mut self, index: usize) -> Option<Arc<LiveContext>> {
        let parent = self.own_parent[index]?;
        let prior = self.kept[parent].clone();
        self.heirs[parent] -= 1;
        if self.heirs[parent] == 0 {
            self.kept[parent] = None;
        }
        prior
    }
}

/// A call's prompt and its tokens: its agent's previous call, the server's answer to it, then
/// new text for what the recording added (answers live, `prior`); or, without those or when
/// the recorded context shrank, its blocks (the same bytes wherever the session, `scope`,
/// names the same block), then text of its own.
fn call_prompt(
    context: &Context,
    call: &Call,
    scope: u64,
    block_tokens: u32,
    request: &ScheduledRequest,
    prior: Option<&LiveContext>,
) -> (Prompt, u32) {
    let tokenizer = context.prompts.tokenizer();
    if let Some(written) = &call.text {
        return written_prompt(tokenizer, written, prior);
    }
    if let Some(prior) = prior.filter(|p| call.input_tokens >= p.recorded) {
        let added = (call.input_tokens - prior.recorded).max(1);
        let new = tokenizer.prompt(added, request.prompt_seed);
        let (mut messages, tokens) = prior.continued(tokenizer);
        let tokens = tokens + tokenizer.count(&new);
        messages.push(Message::text("user", new));
        return (
            Prompt::Messages(messages),
            tokens.min(u32::MAX as usize) as u32,
        );
    }
    let blocks = Blocks {
        hash_ids: &call.hash_ids,
        block_tokens,
        seed_of: &|hash| crate::seed::mix64(scope ^ crate::seed::mix64(hash)),
    };
    let text =
        crate::planner::block_text(tokenizer, &blocks, call.input_tokens, request.prompt_seed);
    (Prompt::Text(text), call.input_tokens)
}

/// A call whose messages the trace wrote: the context it goes on from (its messages and the
/// server's answer), then its own messages; or its own alone.
fn written_prompt(
    tokenizer: &crate::tokens::Tokenizer,
    written: &[(String, String)],
    prior: Option<&LiveContext>,
) -> (Prompt, u32) {
    let (mut messages, mut tokens) = prior.map_or((Vec::new(), 0), |p| p.continued(tokenizer));
    for (role, text) in written {
        tokens += tokenizer.count(text);
        messages.push(Message::text(role, text.clone()));
    }
    (
        Prompt::Messages(messages),
        tokens.min(u32::MAX as usize) as u32,
    )
}

/// A session id's hash (FNV-1a): the same id, the same blocks, in every run.
fn id_hash(id: &str) -> u64 {
    id.bytes().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    })
}
