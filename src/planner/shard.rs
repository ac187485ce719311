//! Shards: one machine's part of a schedule, so that N machines together send exactly what one
//! would.
//!
//! Every shard compiles the same schedule from the same plan and seed, then keeps its part:
//! an open loop's arrivals and a burst's requests are dealt round-robin (arrival i to shard
//! i mod N), so that the union of the shards' arrivals is the planned arrival process, request
//! for request (same times, prompts and lengths); a closed loop's users are dealt the same way,
//! a planned request going with its user (request i is user i mod U's), and the requests an
//! open-ended closed loop draws are numbered k, k + N, k + 2N… in shard k, so that no two shards
//! send the same request. It knows nothing of clocks or of merging: shards start
//! together by `--start-at` (the session), and `llmload merge` joins their records.

use std::sync::Arc;

use serde::Serialize;

use super::{PhaseSchedule, Schedule};
use crate::error::{Error, Result};
use crate::plan::Load;

/// Shard `index` of `count` (1-based: `2/3` is the second of three).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Shard {
    /// From 1 to `count`.
    pub index: u32,
    /// How many shards the schedule is split into.
    pub count: u32,
}

/// The most shards a schedule may be split into.
pub const MAX_SHARDS: u32 = 10_000;

impl Shard {
    /// Reads `K/N` (1 ≤ K ≤ N).
    pub fn parse(text: &str) -> Result<Shard> {
        let bad = || {
            Error::usage(format!(
                "--shard {text}: write it as K/N, shard K of N counted from 1 (e.g. 2/3); in a \
                 Kubernetes Indexed Job, --shard $((JOB_COMPLETION_INDEX + 1))/N"
            ))
        };
        let (k, n) = text.split_once('/').ok_or_else(bad)?;
        let index: u32 = k.trim().parse().map_err(|_| bad())?;
        let count: u32 = n.trim().parse().map_err(|_| bad())?;
        if count == 0 || index == 0 || index > count || count > MAX_SHARDS {
            return Err(bad());
        }
        Ok(Shard { index, count })
    }

    /// This shard's share of `n` things dealt round-robin (the first ones get one more).
    pub fn share(self, n: u64) -> u64 {
        let (k, count) = (self.index as u64 - 1, self.count as u64);
        n / count + u64::from(k < n % count)
    }

    /// Whether position `i` of a dealt list is this shard's.
    fn holds(self, i: usize) -> bool {
        i as u64 % self.count as u64 == self.index as u64 - 1
    }
}

impl std::fmt::Display for Shard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

impl Schedule {
    /// This schedule's part for `shard`. A search cannot be split: it decides each probe from
    /// the results of the last, which no shard has alone.
    pub fn shard(&self, shard: Shard) -> Result<Schedule> {
        if let Some(search) = &self.search {
            return Err(Error::usage(format!(
                "search \"{}\" cannot be sharded: it chooses each probe from the results of the \
                 last, which no shard has alone; run it on one machine (check --capacity says \
                 whether one is enough)",
                search.name
            )));
        }
        let phases = self
            .phases
            .iter()
            .map(|phase| Arc::new(shard_phase(phase, shard)))
            .collect();
        Ok(Schedule {
            plan: self.plan.clone(),
            seed: self.seed,
            phases,
            search: None,
            shard: Some(shard),
            mix: self.mix.clone(),
        })
    }
}

fn shard_phase(phase: &PhaseSchedule, shard: Shard) -> PhaseSchedule {
    // A closed loop's requests follow its users: request i is user (i mod U)'s, and users are
    // dealt like arrivals. A shard without a user then has no request of it either.
    let owner = |i: usize| match phase.load_model {
        Load::Concurrency(users) => i % users.max(1) as usize,
        Load::Rate { .. } | Load::AtOnce(_) | Load::Trace(_) | Load::Sessions(_) => i,
    };
    let requests: Vec<_> = phase
        .requests
        .iter()
        .enumerate()
        .filter(|(i, _)| shard.holds(owner(*i)))
        .map(|(_, r)| *r)
        .collect();
    let load_model = match phase.load_model {
        Load::Concurrency(users) => Load::Concurrency(shard.share(users as u64) as u32),
        Load::AtOnce(_) => Load::AtOnce(requests.len() as u32),
        // Arrivals are the schedule's: the shard holds its share of them already.
        ref open @ (Load::Rate { .. } | Load::Trace(_)) => open.clone(),
        // Whole sessions: the shard runs the file's sessions `seq_offset`, `+ seq_stride`...
        // (session-affine), its share of the slots.
        Load::Sessions(ref sessions) => Load::Sessions(crate::plan::sessions::Sessions {
            concurrent: shard.share(sessions.concurrent as u64) as u32,
            rate: sessions
                .rate
                .map(|rate| rate * shard.share(1_000_000) as f64 / 1e6),
            max_in_flight: sessions
                .max_in_flight
                .map(|most| (shard.share(most as u64) as u32).max(1)),
            ..sessions.clone()
        }),
    };
    let max_requests = if phase.ended_by_count() || !phase.requests.is_empty() {
        phase.max_requests.map(|_| requests.len() as u64)
    } else {
        phase.max_requests
    };
    PhaseSchedule {
        load_model,
        max_requests,
        planned_rate: phase
            .planned_rate
            .map(|r| r * shard.share(1_000_000) as f64 / 1e6),
        requests,
        // An open-ended closed loop draws request k, k + N, k + 2N… in shard k.
        seq_offset: phase.seq_offset + (shard.index as u64 - 1) * phase.seq_stride,
        seq_stride: phase.seq_stride * shard.count as u64,
        ..phase.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::parse_plan;

    fn schedule(phases: &str) -> Schedule {
        let text = format!("plan \"s\" {{ seed 9 }}\ntarget \"sim\"\nworkload {{ input {{ bucket 16 weight=1; bucket 64 weight=1 }}; output 4 }}\n{phases}");
        let plan = parse_plan("s.kdl", text).unwrap();
        super::super::compile(&plan, plan.seed).unwrap()
    }

    #[test]
    fn parsing() {
        assert_eq!(Shard::parse("2/3").unwrap(), Shard { index: 2, count: 3 });
        for bad in ["0/3", "4/3", "3", "a/b", "1/0", "-1/2"] {
            assert!(Shard::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn shares_add_up() {
        for n in [0u64, 1, 2, 7, 64, 1001] {
            for count in 1..=5 {
                let total: u64 = (1..=count)
                    .map(|index| Shard { index, count }.share(n))
                    .sum();
                assert_eq!(total, n, "{n} over {count}");
            }
        }
    }

    /// The shards' open-loop arrivals and bursts, together, are the whole schedule's.
    #[test]
    fn shards_deal_the_schedule_exactly() {
        let whole = schedule(
            "phase \"r\" { rate 50; duration \"10s\" }\nphase \"b\" { at-once 10 }\nphase \"c\" { concurrency 5; requests 23 }\nphase \"w\" { concurrency 2; requests 6 }",
        );
        for count in [1u32, 2, 3, 7] {
            let parts: Vec<Schedule> = (1..=count)
                .map(|index| whole.shard(Shard { index, count }).unwrap())
                .collect();
            for (p, phase) in whole.phases.iter().enumerate() {
                let mut union: Vec<_> = parts
                    .iter()
                    .flat_map(|s| s.phases[p].requests.iter().copied())
                    .collect();
                union.sort_by_key(|r| r.seq);
                assert_eq!(union, phase.requests, "phase {p}, {count} shards");
            }
            let users: u32 = parts
                .iter()
                .map(|s| match s.phases[2].load_model {
                    Load::Concurrency(n) => n,
                    _ => 0,
                })
                .sum();
            assert_eq!(users, 5);
            // Every request goes with a user: a shard without one sends none.
            for part in &parts {
                if let Load::Concurrency(0) = part.phases[3].load_model {
                    assert!(part.phases[3].requests.is_empty());
                }
            }
        }
    }

    /// Open-ended closed loops draw distinct requests in each shard.
    #[test]
    fn open_ended_closed_loops_draw_distinct_requests() {
        let whole = schedule("phase \"c\" { concurrency 4; duration \"1s\" }");
        let parts: Vec<Schedule> = (1..=3)
            .map(|index| whole.shard(Shard { index, count: 3 }).unwrap())
            .collect();
        let mut seen = std::collections::BTreeSet::new();
        for part in &parts {
            for position in 0..10 {
                let request = part.request_at(&part.phases[0], position);
                assert!(seen.insert(request.seq), "seq {} drawn twice", request.seq);
                // The same request the whole schedule would draw at that number.
                assert_eq!(request, whole.request_at(&whole.phases[0], request.seq));
            }
        }
    }

    #[test]
    fn a_search_is_not_sharded() {
        let text = "target \"sim\"\nworkload { input 16; output 4 }\nsearch \"c\" { rate from=1 to=8; duration \"1s\" }\nsla { ttft p99 < \"1s\" }";
        let plan = parse_plan("s.kdl", text.to_string()).unwrap();
        let whole = super::super::compile(&plan, 1).unwrap();
        assert!(whole.shard(Shard { index: 1, count: 2 }).is_err());
    }
}
