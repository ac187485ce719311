//! The planner: compiles a [`Plan`] into a deterministic [`Schedule`].
//!
//! For every request the schedule fixes its phase, its intended send offset (open-loop and burst
//! phases), its input and output lengths and its prompt seed. The same plan and seed always give
//! the same schedule, byte for byte. The planner does not send anything and does not build
//! prompt text (the executor does, from the prompt seed).
//!
//! A closed-loop phase that ends by duration alone cannot know how many requests it will send;
//! its requests are drawn on demand from the same deterministic function ([`Schedule::request`]).

mod arrivals;
pub mod catalogue;
pub mod media;
mod prompts;
#[cfg(test)]
mod proptests;
pub mod search;
mod shard;

use std::sync::Arc;
use std::time::Duration;

use rand::distr::weighted::WeightedIndex;
use rand::distr::Distribution;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;

use crate::plan::{Load, Phase, Plan, Search};
use crate::seed;

pub use crate::records::StepInfo;
pub use arrivals::{arrival_offsets, ArrivalError};
pub use prompts::{
    as_messages, block_text, Answer, Blocks, MediaCarried, Message, Prompt, PromptSource,
    SyntheticPrompts, ToolCall, WorkloadPrompts,
};
pub use shard::{Shard, MAX_SHARDS};

use crate::error::{Error, Result};
use crate::plan::limits::MAX_REQUESTS;

/// Materializing more requests than this is refused. The plan checker already refuses plans
/// whose *expected* count is above [`MAX_REQUESTS`]; the margin is for random arrivals that
/// come out above their mean.
pub const MAX_SCHEDULED_REQUESTS: usize = (MAX_REQUESTS + MAX_REQUESTS / 10) as usize;

#[derive(Debug, Clone, Serialize)]
/// A plan compiled with a seed: every request of every phase, deterministically.
pub struct Schedule {
    /// The plan's name.
    pub plan: String,
    /// The seed it was compiled with.
    pub seed: u64,
    /// One per plan phase (sweeps expanded into their steps), in order.
    pub phases: Vec<Arc<PhaseSchedule>>,
    /// The capacity search, run after the group `search.after_group`, if the plan has one.
    pub search: Option<SearchSchedule>,
    /// The shard this is a part of the whole schedule for, if it is one.
    pub shard: Option<Shard>,
    #[serde(skip)]
    mix: RequestMix,
}

/// A plan's search, as the schedule holds it: its probes are compiled as it goes.
#[derive(Debug, Clone, Serialize)]
pub struct SearchSchedule {
    #[serde(skip)]
    /// The search as the plan writes it.
    pub spec: Search,
    /// Its name.
    pub name: String,
    /// The range, the unit and the stopping rules, as people read them.
    pub description: String,
    /// It runs once the groups before this one have ended.
    pub after_group: usize,
    /// The loads of its first probes, before any result is known (the doubling that brackets
    /// the capacity); the rest depend on the results.
    pub first_probes: Vec<f64>,
}

#[derive(Debug, Clone, Serialize)]
/// One phase's requests and how they are sent.
pub struct PhaseSchedule {
    /// Its position in the plan, from 0.
    pub index: usize,
    /// Its name.
    pub name: String,
    /// Whether it counts in metrics and verdicts.
    pub record: bool,
    /// A human description of the load model, e.g. `rate 1→16/s poisson`.
    pub load: String,
    #[serde(skip)]
    /// Its load model.
    pub load_model: Load,
    #[serde(skip_serializing_if = "Option::is_none")]
    /// The model its requests ask for, when not the target's.
    pub model: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    /// The server its requests go to, when not the target's.
    pub endpoint: Option<String>,
    #[serde(serialize_with = "serialize_secs")]
    /// When it stops sending.
    pub duration: Option<Duration>,
    /// After how many requests it stops.
    pub max_requests: Option<u64>,
    /// The mean request rate the plan asks for (open loop only).
    pub planned_rate: Option<f64>,
    /// True when the number of requests is decided at run time (a closed loop ended by duration).
    pub open_ended: bool,
    /// Its requests, materialized (empty when open-ended).
    pub requests: Vec<ScheduledRequest>,
    /// Phases of one group run together: a phase `with` another joins that phase's group.
    pub group: usize,
    /// When it starts, from its group's start.
    #[serde(serialize_with = "serialize_secs_plain")]
    pub offset: Duration,
    /// The next group waits for its requests in flight to finish.
    pub drain: bool,
    /// The server's caches are reset before it starts.
    pub reset_cache: bool,
    /// The step of a sweep (or the probe of a search) it is.
    pub step: Option<StepInfo>,
    /// An open-ended phase draws request `seq_offset + i × seq_stride` as its i-th (a shard's
    /// part of a closed loop: distinct from the other shards').
    #[serde(skip)]
    pub seq_offset: u64,
    /// See `seq_offset`.
    #[serde(skip)]
    pub seq_stride: u64,
}

impl PhaseSchedule {
    /// Whether an open loop's schedule stops at its request count before its duration.
    pub fn ended_by_count(&self) -> bool {
        self.max_requests
            .is_some_and(|n| self.requests.len() as u64 >= n)
    }
}

/// One request as planned.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ScheduledRequest {
    /// Position within the phase, from 0.
    pub seq: u64,
    /// When to send it, from the start of its phase, in microseconds (open loop and bursts).
    pub intended_offset_us: Option<u64>,
    /// Prompt tokens.
    pub input_tokens: u32,
    /// Output tokens asked for.
    pub output_tokens: u32,
    /// The seed its prompt is built from.
    pub prompt_seed: u64,
    /// The shared prefix its prompt starts with: the workload's `prefix` group.
    pub prefix_group: Option<u32>,
    /// Where its prompt comes from besides synthetic text.
    pub origin: Origin,
    /// Its turn in its conversation (from 1), in a multi-turn workload.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub turn: Option<u32>,
    /// The conversation it belongs to (its position among the phase's conversations).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub conversation: Option<u64>,
    /// What its turn answers: the user's message, unless the executor finds the answer before
    /// it called tools in an agent loop.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub turn_kind: Option<crate::records::TurnKind>,
    /// The inputs it carries (embeddings), or documents (rerank); 0 for an API that generates.
    /// Its `input_tokens` are every input's (and, for rerank, the query's once per document).
    #[serde(skip_serializing_if = "is_zero")]
    pub batch: u32,
    /// The images and audio it carries (drawn by the planner; made by the prompt source).
    #[serde(skip_serializing_if = "media::MediaDraw::is_empty")]
    pub media: media::MediaDraw,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl ScheduledRequest {
    /// Each input's tokens in a batch request: the planner made its input tokens
    /// `batch × (query + input)` (`query_tokens` is 0 for embeddings).
    pub fn tokens_per_input(&self, query_tokens: u32) -> u32 {
        (self.input_tokens / self.batch.max(1)).saturating_sub(query_tokens)
    }
}

/// Where a request's prompt comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Origin {
    /// Synthetic text of the planned length.
    #[default]
    Synthetic,
    /// An entry of the dataset (its index in the [`Catalogue`](catalogue::Catalogue)).
    Dataset(u32),
    /// A row of the trace a phase replays.
    Trace {
        /// The phase (whose load is the trace).
        phase: u32,
        /// The trace's row.
        row: u32,
    },
}

#[derive(Debug, Clone)]
struct RequestMix {
    seed: u64,
    inputs: Vec<u32>,
    outputs: Vec<Option<u32>>,
    output: u32,
    weights: Vec<f64>,
    spread: Option<crate::plan::OutputSpread>,
    /// Tokens of the system message, part of every request's input.
    system_tokens: u32,
    prefix_tokens: Vec<u32>,
    prefix_weights: Vec<f64>,
    catalogue: Option<Arc<catalogue::Catalogue>>,
    /// Where each phase starts in the dataset's order: the requests scheduled before it.
    phase_starts: Vec<u64>,
    /// Turns per conversation (1 without conversations).
    turns: u32,
    conversation: Option<crate::plan::Conversation>,
    /// Inputs per request (embeddings, rerank), and the rerank query's tokens.
    batch: Option<crate::plan::Batch>,
    query_tokens: u32,
    /// The workload's images and audio.
    media: Option<Arc<media::MediaPlan>>,
}

impl RequestMix {
    /// The `position`-th request of a phase: in a multi-turn workload, the first turn of its
    /// `position`-th conversation (whose turns take the sequence numbers after it).
    fn request(&self, phase_index: usize, position: u64) -> ScheduledRequest {
        match self.conversation {
            Some(_) => ScheduledRequest {
                turn: Some(1),
                conversation: Some(position),
                turn_kind: Some(crate::records::TurnKind::User),
                ..self.request_at_seq(phase_index, position * self.turns as u64)
            },
            None => self.request_at_seq(phase_index, position),
        }
    }

    /// Turn `turn` (from 2) of the conversation `first` opens: a new user message of its own
    /// length, after the history (the executor adds the history's tokens to its input).
    fn turn(&self, phase_index: usize, first: &ScheduledRequest, turn: u32) -> ScheduledRequest {
        let seq = first.seq + (turn as u64).saturating_sub(1);
        ScheduledRequest {
            turn: Some(turn),
            conversation: first.conversation,
            turn_kind: Some(crate::records::TurnKind::User),
            // The prefix opens the conversation's first message only.
            prefix_group: None,
            ..self.request_at_seq(phase_index, seq)
        }
    }

    fn request_at_seq(&self, phase_index: usize, seq: u64) -> ScheduledRequest {
        let request_seed = seed::request_seed(self.seed, phase_index, seq);
        let bucket = if self.inputs.len() == 1 {
            0
        } else {
            let mut rng = ChaCha8Rng::seed_from_u64(request_seed);
            // The weights were validated positive by the plan stage.
            WeightedIndex::new(&self.weights)
                .map(|dist| dist.sample(&mut rng))
                .unwrap_or(0)
        };
        // Draws added since the first version come from a stream of their own, so that plans
        // without them keep their schedules.
        let mut more = ChaCha8Rng::seed_from_u64(seed::mix64(request_seed ^ 0x6d6f_7265));
        let mut input_tokens = self.inputs[bucket];
        let mut output_tokens = self.outputs[bucket].unwrap_or_else(|| self.draw_output(&mut more));
        let mut origin = Origin::Synthetic;
        if let Some(catalogue) = &self.catalogue {
            let n = catalogue.entries.len() as u64;
            let start = self.phase_starts.get(phase_index).copied().unwrap_or(0);
            let at = match catalogue.order {
                crate::plan::data::DatasetOrder::Random => more.random_range(0..n),
                _ => (start + seq) % n,
            };
            let entry = catalogue.entries[at as usize];
            input_tokens = entry.input_tokens;
            if let Some(answer) = entry.output_tokens {
                output_tokens = answer;
            }
            origin = Origin::Dataset(at as u32);
        }
        let prefix_group = match self.prefix_tokens.len() {
            0 => None,
            1 => Some(0),
            _ => WeightedIndex::new(&self.prefix_weights)
                .map(|dist| dist.sample(&mut more) as u32)
                .ok(),
        };
        if let Some(group) = prefix_group {
            input_tokens = input_tokens.saturating_add(self.prefix_tokens[group as usize]);
        }
        // A batch: that many inputs of the drawn length (documents, each read with the query).
        let mut batch = 0;
        if let Some(size) = self.batch {
            batch = if size.min == size.max {
                size.min
            } else {
                more.random_range(size.min..=size.max)
            };
            input_tokens = input_tokens
                .saturating_add(self.query_tokens)
                .saturating_mul(batch);
            output_tokens = 0;
        }
        ScheduledRequest {
            seq,
            intended_offset_us: None,
            input_tokens: input_tokens.saturating_add(self.system_tokens),
            output_tokens,
            prompt_seed: seed::prompt_seed(request_seed),
            prefix_group,
            origin,
            turn: None,
            conversation: None,
            turn_kind: None,
            batch,
            media: self.draw_media(request_seed),
        }
    }

    /// A request replaying `row` of a trace: its lengths are the trace's.
    fn trace_request(
        &self,
        phase_index: usize,
        seq: u64,
        row: usize,
        trace: &crate::plan::data::Trace,
    ) -> ScheduledRequest {
        let request_seed = seed::request_seed(self.seed, phase_index, seq);
        let (input, output) = trace
            .rows
            .get(row)
            .map_or((1, 1), |r| (r.input_tokens, r.output_tokens));
        ScheduledRequest {
            seq,
            intended_offset_us: None,
            input_tokens: input.saturating_add(self.system_tokens),
            output_tokens: output,
            prompt_seed: seed::prompt_seed(request_seed),
            prefix_group: None,
            origin: Origin::Trace {
                phase: phase_index as u32,
                row: row as u32,
            },
            turn: None,
            conversation: None,
            turn_kind: None,
            batch: 0,
            media: self.draw_media(request_seed),
        }
    }

    /// A request's media, from a random stream of their own (a plan without them keeps its
    /// schedule).
    fn draw_media(&self, request_seed: u64) -> media::MediaDraw {
        self.media
            .as_ref()
            .map_or_else(Default::default, |plan| plan.draw(request_seed))
    }

    fn draw_output(&self, rng: &mut ChaCha8Rng) -> u32 {
        use crate::plan::OutputSpread;
        match self.spread {
            None => self.output,
            Some(OutputSpread::Uniform { min, max }) => rng.random_range(min..=max),
            Some(OutputSpread::Normal {
                mean,
                stddev,
                min,
                max,
            }) => {
                let drawn = rand_distr::Normal::new(mean, stddev)
                    .map(|normal| normal.sample(rng))
                    .unwrap_or(mean);
                (drawn.round().max(0.0) as u64).clamp(min as u64, max as u64) as u32
            }
        }
    }
}

impl Schedule {
    /// Tokens of the workload's system message (part of every request's input).
    pub fn system_tokens(&self) -> u32 {
        self.mix.system_tokens
    }

    /// The plan's conversations, when its workload has them.
    pub fn conversation(&self) -> Option<crate::plan::Conversation> {
        self.mix.conversation
    }

    /// Turn `turn` (from 2) of the conversation that `first` (its first turn, in phase
    /// `phase_index`) opened.
    pub fn turn(
        &self,
        phase_index: usize,
        first: &ScheduledRequest,
        turn: u32,
    ) -> ScheduledRequest {
        self.mix.turn(phase_index, first, turn)
    }

    /// The user's think time before `request` (a turn after the first), drawn from its seed.
    pub fn think_time(&self, request: &ScheduledRequest) -> Duration {
        match self.mix.conversation {
            Some(c) => draw_duration(request, 0x7468_696e, c.think, c.think_max),
            None => Duration::ZERO,
        }
    }

    /// How long the tools take to answer before `request` (a tool turn of an agent loop),
    /// drawn from its seed.
    pub fn tool_latency(&self, request: &ScheduledRequest) -> Duration {
        match self.mix.conversation.and_then(|c| c.tool_results) {
            Some(t) => draw_duration(request, 0x746f_6f6c, t.latency, t.latency_max),
            None => Duration::ZERO,
        }
    }

    /// How long each tool result `request` (a tool turn) sends is, in tokens, drawn from its
    /// seed.
    pub fn tool_result_tokens(&self, request: &ScheduledRequest) -> u32 {
        let Some(tools) = self.mix.conversation.and_then(|c| c.tool_results) else {
            return 0;
        };
        let tokens = draw_between(
            request.prompt_seed ^ 0x7265_7375,
            tools.tokens as u64,
            tools.tokens_max.map(u64::from),
        );
        tokens as u32
    }

    /// The workload's images and audio, when it has them.
    pub fn media(&self) -> Option<Arc<media::MediaPlan>> {
        self.mix.media.clone()
    }

    /// The dataset's usable entries, measured, when the plan reads a dataset.
    pub fn catalogue(&self) -> Option<Arc<catalogue::Catalogue>> {
        self.mix.catalogue.clone()
    }

    /// The request at `seq` of phase `phase_index`, materialized or not.
    pub fn request(&self, phase_index: usize, seq: u64) -> ScheduledRequest {
        match self.phases.get(phase_index) {
            Some(phase) => self.request_at(phase, seq),
            None => self.mix.request(phase_index, seq),
        }
    }

    /// The `position`-th request `phase` sends (of this schedule's phases, or a probe it
    /// compiled): its materialized list's, or drawn from the mix.
    pub fn request_at(&self, phase: &PhaseSchedule, position: u64) -> ScheduledRequest {
        match phase.requests.get(position as usize) {
            Some(request) => *request,
            None => self
                .mix
                .request(phase.index, phase.seq_offset + position * phase.seq_stride),
        }
    }

    /// Every load the run may put on the target: each phase's, and a search's highest.
    pub fn loads(&self) -> Vec<Load> {
        let mut loads: Vec<Load> = self.phases.iter().map(|p| p.load_model.clone()).collect();
        if let Some(search) = &self.search {
            loads.extend(search.spec.load_at(search.spec.high));
        }
        loads
    }
}

/// Compiles `plan` with `seed` (the plan's own unless overridden).
pub fn compile(plan: &Plan, seed: u64) -> Result<Schedule> {
    let workload = &plan.workload;
    // Datasets and system messages are measured under the plan's tokenizer.
    let tokenizer = if workload.dataset.is_some() || workload.system.is_some() {
        Some(crate::tokens::Tokenizer::load(&workload.tokenizer)?)
    } else {
        None
    };
    let catalogue = match (&workload.dataset, &tokenizer) {
        (Some(dataset), Some(tokenizer)) => Some(Arc::new(catalogue::Catalogue::build(
            dataset, tokenizer, seed,
        )?)),
        _ => None,
    };
    let system_tokens = match (&workload.system, &tokenizer) {
        (Some(system), Some(tokenizer)) => tokenizer.count(system) as u32,
        _ => 0,
    };
    let mut mix = RequestMix {
        seed,
        inputs: workload.buckets.iter().map(|b| b.input_tokens).collect(),
        outputs: workload.buckets.iter().map(|b| b.output_tokens).collect(),
        output: workload.output_tokens,
        weights: workload.buckets.iter().map(|b| b.weight).collect(),
        spread: workload.output_spread,
        system_tokens,
        prefix_tokens: workload.prefix.iter().map(|p| p.tokens).collect(),
        prefix_weights: workload.prefix.iter().map(|p| p.weight).collect(),
        catalogue,
        phase_starts: Vec::new(),
        turns: workload.conversation.map_or(1, |c| c.turns.max(1)),
        conversation: workload.conversation,
        batch: workload.batch,
        query_tokens: workload.query_tokens.unwrap_or(0),
        media: media::MediaPlan::of(workload).map(Arc::new),
    };
    let mut phases: Vec<Arc<PhaseSchedule>> = Vec::new();
    let mut total = 0usize;
    let mut groups = 0usize;
    for (index, phase) in plan.phases.iter().enumerate() {
        mix.phase_starts.push(total as u64 * mix.turns as u64);
        let mut compiled = compile_phase(&mix, seed, index, phase, MAX_SCHEDULED_REQUESTS - total)?;
        total += compiled.requests.len();
        // A phase `with` an earlier one joins its group, at an offset from that one's start.
        let joined = phase.with.as_ref().and_then(|with| {
            phases
                .iter()
                .find(|p| p.name == with.phase)
                .map(|p| (p.group, p.offset + with.offset))
        });
        (compiled.group, compiled.offset) = match joined {
            Some(joined) => joined,
            None => {
                groups += 1;
                (groups - 1, Duration::ZERO)
            }
        };
        phases.push(Arc::new(compiled));
    }
    let search = plan.search.as_ref().map(|spec| {
        // The search runs after the groups of the phases written before it.
        let after_group = phases
            .iter()
            .take(spec.position)
            .map(|p| p.group + 1)
            .max()
            .unwrap_or(0);
        SearchSchedule {
            name: spec.name.clone(),
            description: search::describe(spec),
            after_group,
            first_probes: search::first_probes(spec),
            spec: spec.clone(),
        }
    });
    Ok(Schedule {
        plan: plan.name.clone(),
        seed,
        phases,
        search,
        shard: None,
        mix,
    })
}

/// One phase's schedule: its arrivals (open loop, burst) or its requests (closed loop with a
/// count), at most `budget` of them.
fn compile_phase(
    mix: &RequestMix,
    seed: u64,
    index: usize,
    phase: &Phase,
    budget: usize,
) -> Result<PhaseSchedule> {
    let offsets: Option<Vec<u64>> = match &phase.load {
        Load::Rate { rate, arrivals } => {
            let phase_seed = seed::arrival_seed(seed, index);
            Some(
                arrival_offsets(
                    *rate,
                    *arrivals,
                    phase.duration,
                    phase.max_requests,
                    phase_seed,
                    budget,
                )
                .map_err(|e| match e {
                    ArrivalError::TooMany => too_many(&phase.name),
                    ArrivalError::Gamma => Error::usage(format!(
                        "phase \"{}\": its gamma arrivals cannot be drawn",
                        phase.name
                    )),
                })?,
            )
        }
        Load::AtOnce(n) => Some(vec![0; *n as usize]),
        Load::Concurrency(_) => None,
        // Calls are made as the sessions run (each waits for the answers it depends on).
        Load::Sessions(_) => return Ok(phase_schedule(index, phase, Vec::new(), true)),
        Load::Trace(trace) => {
            let rows: Vec<(usize, u64)> = trace
                .window(phase.duration, phase.max_requests)
                .take(budget.saturating_add(1))
                .collect();
            if rows.len() > budget {
                return Err(too_many(&phase.name));
            }
            let requests = rows
                .iter()
                .enumerate()
                .map(|(seq, &(row, offset))| ScheduledRequest {
                    intended_offset_us: Some(offset),
                    ..mix.trace_request(index, seq as u64, row, trace)
                })
                .collect();
            return Ok(phase_schedule(index, phase, requests, false));
        }
    };
    let (requests, open_ended) = match offsets {
        Some(offsets) => (
            offsets
                .iter()
                .enumerate()
                .map(|(seq, offset)| ScheduledRequest {
                    intended_offset_us: Some(*offset),
                    ..mix.request(index, seq as u64)
                })
                .collect::<Vec<_>>(),
            false,
        ),
        None => match phase.max_requests {
            Some(n) if (n as usize) <= budget => {
                ((0..n).map(|seq| mix.request(index, seq)).collect(), false)
            }
            Some(_) => return Err(too_many(&phase.name)),
            None => (Vec::new(), true),
        },
    };
    Ok(phase_schedule(index, phase, requests, open_ended))
}

/// A phase's schedule around its requests.
fn phase_schedule(
    index: usize,
    phase: &Phase,
    requests: Vec<ScheduledRequest>,
    open_ended: bool,
) -> PhaseSchedule {
    let mut duration = phase.duration;
    let mut planned_rate = match &phase.load {
        Load::Rate { rate, .. } => Some(rate.mean()),
        Load::Concurrency(_) | Load::AtOnce(_) | Load::Trace(_) | Load::Sessions(_) => None,
    };
    if let Load::Trace(_) = &phase.load {
        // A replay without a duration lasts until its last arrival.
        let last_us = requests
            .last()
            .and_then(|r| r.intended_offset_us)
            .unwrap_or(0);
        let span = duration.unwrap_or(Duration::from_micros(last_us.div_ceil(1000) * 1000 + 1000));
        duration = Some(span);
        planned_rate = Some(requests.len() as f64 / span.as_secs_f64().max(1e-3));
    }
    // A phase with a model or server of its own says so wherever its load is shown.
    let mut load = phase.load.describe();
    if let Some(model) = &phase.model {
        load.push_str(&format!(" · model {model}"));
    }
    if let Some(endpoint) = &phase.endpoint {
        load.push_str(&format!(" · {endpoint}"));
    }
    PhaseSchedule {
        index,
        name: phase.name.clone(),
        record: phase.record,
        load,
        load_model: phase.load.clone(),
        model: phase.model.clone(),
        endpoint: phase.endpoint.clone(),
        duration,
        max_requests: phase.max_requests,
        planned_rate,
        open_ended,
        requests,
        group: 0,
        offset: Duration::ZERO,
        drain: phase.drain,
        reset_cache: phase.reset_cache,
        seq_offset: 0,
        seq_stride: 1,
        step: phase.step.as_ref().map(|step| StepInfo {
            series: step.series.clone(),
            load_value: step.load_value,
            unit: step.unit,
            warmup: step.warmup,
            probe: false,
        }),
    }
}

impl Schedule {
    /// The phases of each group, in order (a group's phases run together).
    pub fn groups(&self) -> Vec<Vec<usize>> {
        let mut groups: Vec<Vec<usize>> = Vec::new();
        for phase in &self.phases {
            if groups.len() <= phase.group {
                groups.resize(phase.group + 1, Vec::new());
            }
            groups[phase.group].push(phase.index);
        }
        groups
    }

    /// The phase of the search's probe number `number` at `load` (its warmup when `warmup`),
    /// with the schedule's seed and mix; `index` is its phase index in the run (after every
    /// phase of the plan).
    pub fn probe(
        &self,
        index: usize,
        number: usize,
        load: f64,
        warmup: bool,
    ) -> Result<PhaseSchedule> {
        let Some(search) = &self.search else {
            return Err(Error::run("the plan has no search"));
        };
        let spec = &search.spec;
        let value = crate::plan::units::format_load(load);
        let Some(load_model) = spec.load_at(load) else {
            return Err(Error::run("a search of sessions without its sessions"));
        };
        let name = if warmup {
            format!("{} probe {number} warmup @ {value}", spec.name)
        } else {
            format!("{} probe {number} @ {value}", spec.name)
        };
        let phase = Phase {
            duration: Some(if warmup {
                spec.warmup.unwrap_or_default()
            } else {
                spec.duration
            }),
            record: !warmup,
            drain: true,
            // Before the probe: before its warmup when it has one.
            reset_cache: spec.reset_cache && (warmup || spec.warmup.is_none()),
            step: Some(crate::plan::Step {
                series: spec.name.clone(),
                load_value: load,
                unit: spec.unit,
                warmup,
            }),
            ..Phase::new(name, load_model)
        };
        let mut compiled =
            compile_phase(&self.mix, self.seed, index, &phase, MAX_SCHEDULED_REQUESTS)?;
        if let Some(step) = compiled.step.as_mut() {
            step.probe = true;
        }
        Ok(compiled)
    }
}

fn too_many(phase: &str) -> Error {
    Error::usage(format!(
        "phase \"{phase}\" would schedule more than {MAX_SCHEDULED_REQUESTS} requests in all; \
         lower its rate, duration or requests"
    ))
}

/// A duration drawn uniformly from `least..=most` for `request` (its seed salted by `salt`).
fn draw_duration(
    request: &ScheduledRequest,
    salt: u64,
    least: Duration,
    most: Option<Duration>,
) -> Duration {
    Duration::from_micros(draw_between(
        request.prompt_seed ^ salt,
        least.as_micros() as u64,
        most.map(|max| max.as_micros() as u64),
    ))
}

/// A value drawn uniformly from `least..=most` (from `salted_seed`), or `least` without a range.
fn draw_between(salted_seed: u64, least: u64, most: Option<u64>) -> u64 {
    match most {
        Some(most) if most > least => {
            let mut rng = ChaCha8Rng::seed_from_u64(seed::mix64(salted_seed));
            rng.random_range(least..=most)
        }
        _ => least,
    }
}

fn serialize_secs_plain<S: serde::Serializer>(value: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(value.as_secs_f64())
}

fn serialize_secs<S: serde::Serializer>(value: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
    match value {
        Some(d) => s.serialize_some(&d.as_secs_f64()),
        None => s.serialize_none(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::parse_plan;

    fn plan(body: &str) -> Plan {
        let text = format!("target \"sim\"\nworkload {{ input {{ bucket 128 weight=5; bucket 512 weight=3; bucket 2048 weight=2 }}; output 64 }}\n{body}");
        parse_plan("test.kdl", text).unwrap()
    }

    /// A replay's requests keep the trace's offsets, stretched by its speed, and its lengths.
    #[test]
    fn a_trace_is_replayed_at_its_speed() {
        let dir = std::env::temp_dir().join(format!("llmload-trace-plan-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("t.jsonl"),
            "{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 2}\n{\"timestamp\": 500, \"input_length\": 20, \"output_length\": 3}\n",
        )
        .unwrap();
        let file = dir.join("plan.kdl");
        let text = "target \"sim\"\nworkload { }\nphase \"r\" { trace \"t.jsonl\" speed=0.5 }\n";
        let plan = parse_plan(file.to_str().unwrap(), text.into()).unwrap();
        let schedule = compile(&plan, 1).unwrap();
        let offsets: Vec<_> = schedule.phases[0]
            .requests
            .iter()
            .map(|r| (r.intended_offset_us, r.input_tokens))
            .collect();
        assert_eq!(offsets, vec![(Some(0), 10), (Some(1_000_000), 20)]);
        std::fs::remove_dir_all(&dir).ok();
    }

    /// A search's `reset-cache` reaches its probes: with no probe warmup, the measured probe
    /// itself starts cold.
    #[test]
    fn a_search_probe_starts_cold_when_asked() {
        let plan = plan(
            "search \"c\" { rate from=1 to=4; duration \"2s\"; reset-cache #true }\n\
             sla { ttft p99 < \"1s\" }",
        );
        let schedule = compile(&plan, 1).unwrap();
        assert!(schedule.probe(9, 1, 2.0, false).unwrap().reset_cache);
    }

    #[test]
    fn same_plan_and_seed_give_identical_schedules() {
        let p = plan(
            "phase \"a\" { rate 20; duration \"30s\" }\nphase \"b\" { concurrency 3; requests 50 }",
        );
        let a = serde_json::to_string(&compile(&p, 7).unwrap()).unwrap();
        let b = serde_json::to_string(&compile(&p, 7).unwrap()).unwrap();
        let c = serde_json::to_string(&compile(&p, 8).unwrap()).unwrap();
        assert_eq!(a, b);
        assert_ne!(a, c);
    }

    #[test]
    fn bucket_mix_follows_weights() {
        let p = plan("phase \"a\" { concurrency 1; requests 10000 }");
        let s = compile(&p, 1).unwrap();
        let count = |n: u32| {
            s.phases[0]
                .requests
                .iter()
                .filter(|r| r.input_tokens == n)
                .count() as f64
        };
        assert!((count(128) / 10000.0 - 0.5).abs() < 0.02);
        assert!((count(512) / 10000.0 - 0.3).abs() < 0.02);
        assert!((count(2048) / 10000.0 - 0.2).abs() < 0.02);
    }

    #[test]
    fn open_ended_requests_come_from_the_same_function() {
        let p = plan("phase \"a\" { concurrency 2; duration \"5s\" }");
        let s = compile(&p, 3).unwrap();
        assert!(s.phases[0].open_ended);
        assert_eq!(s.request(0, 17), s.request(0, 17));
        assert_ne!(s.request(0, 17).prompt_seed, s.request(0, 18).prompt_seed);
    }

    #[test]
    fn bursts_release_everything_at_zero() {
        let p = plan("phase \"b\" { at-once 64 }");
        let s = compile(&p, 3).unwrap();
        assert_eq!(s.phases[0].requests.len(), 64);
        assert!(s.phases[0]
            .requests
            .iter()
            .all(|r| r.intended_offset_us == Some(0)));
    }

    #[test]
    fn absurd_schedules_are_refused_by_the_plan_checker_first() {
        let text = "target \"sim\"\nworkload { input 8; output 8 }\nphase \"a\" { rate 1000000; duration \"10h\" }";
        let errors = parse_plan("test.kdl", text.into()).unwrap_err();
        assert!(
            errors.diagnostics[0]
                .message
                .contains("more than a plan may"),
            "{}",
            errors.render()
        );
    }
}
