//! `llmload plan`'s renderings of a compiled schedule: a table for people, CSV and JSON for
//! tools. They show the schedule exactly as the executor would send it, before anything is sent.

use crate::error::{Error, Result};
use crate::plan::Plan;
use crate::planner::Schedule;

/// The whole schedule as JSON (every phase and every materialized request).
pub fn json(schedule: &Schedule) -> Result<String> {
    serde_json::to_string_pretty(schedule)
        .map(|json| json + "\n")
        .map_err(|e| Error::run(format!("cannot encode the schedule: {e}")))
}

/// One row per materialized request: `phase,seq,intended_offset_ms,input_tokens,output_tokens,prompt_seed`.
pub fn csv(schedule: &Schedule) -> String {
    let mut out =
        String::from("phase,seq,intended_offset_ms,input_tokens,output_tokens,prompt_seed\n");
    for phase in &schedule.phases {
        for r in &phase.requests {
            let offset = r
                .intended_offset_us
                .map(|us| format!("{:.3}", us as f64 / 1000.0))
                .unwrap_or_default();
            let name = if phase.name.contains([',', '"']) {
                format!("\"{}\"", phase.name.replace('"', "\"\""))
            } else {
                phase.name.clone()
            };
            out.push_str(&format!(
                "{name},{},{offset},{},{},{}\n",
                r.seq, r.input_tokens, r.output_tokens, r.prompt_seed
            ));
        }
    }
    out
}

/// The server the plan starts (its command, secrets masked; how it is waited for and stopped)
/// and the configurations its sweep runs.
fn server_lines(plan: &Plan) -> String {
    let Some(server) = &plan.server else {
        return String::new();
    };
    let mut out = format!(
        "server (started by llmload, in {}): {}\n  ready when {} answers 2xx, within {}; hung if it answers nothing for {}; stopped with SIGTERM, SIGKILL after {}\n",
        server.dir.display(),
        server.shown_command(),
        server.ready.path,
        crate::plan::units::format_duration(server.ready.timeout),
        crate::plan::units::format_duration(server.hang_after),
        crate::plan::units::format_duration(server.stop_grace),
    );
    if let Some(sweep) = &plan.server_sweep {
        let names: Vec<String> = sweep.configurations().into_iter().map(|c| c.name).collect();
        out.push_str(&format!(
            "server sweep: the phases below run against each of {} configuration(s), each server started fresh: {}\n",
            names.len(),
            crate::escape::one_line(&names.join("; "))
        ));
    }
    out.push('\n');
    out
}

/// One line per phase: its load, requests, rate, duration and input mix (after the server the
/// plan starts, if it starts one).
pub fn table(plan: &Plan, schedule: &Schedule) -> String {
    let mut out = format!("plan \"{}\" (seed {})\n\n", plan.name, schedule.seed);
    out.push_str(&server_lines(plan));
    let width = schedule
        .phases
        .iter()
        .map(|p| p.name.chars().count())
        .max()
        .unwrap_or(0)
        .max(16);
    let overlapping = schedule
        .phases
        .iter()
        .any(|p| p.offset > std::time::Duration::ZERO)
        || schedule.groups().len() < schedule.phases.len();
    if !schedule.phases.is_empty() {
        out.push_str(&format!(
            "{:<width$} {:<28} {:>10} {:>10} {:>12}  {}\n",
            "phase", "load", "requests", "rate/s", "duration", "input mix (tokens: share)"
        ));
    }
    for phase in &schedule.phases {
        let requests = if phase.open_ended {
            "open-ended".to_string()
        } else {
            phase.requests.len().to_string()
        };
        let rate = phase
            .planned_rate
            .map(|r| format!("{r:.2}"))
            .unwrap_or_else(|| "-".into());
        let duration = phase
            .duration
            .map(crate::plan::units::format_duration)
            .unwrap_or_else(|| "-".into());
        let mut mix: std::collections::BTreeMap<(u32, u32), usize> = Default::default();
        for r in &phase.requests {
            *mix.entry((r.input_tokens, r.output_tokens)).or_default() += 1;
        }
        let mix_text = if mix.len() > 6 {
            // Lengths from a dataset, a trace or a distribution: their ranges.
            let range = |values: Vec<u32>| {
                let min = values.iter().min().copied().unwrap_or(0);
                let max = values.iter().max().copied().unwrap_or(0);
                let mean =
                    values.iter().map(|&v| v as f64).sum::<f64>() / values.len().max(1) as f64;
                format!("{min}–{max} (mean {mean:.0})")
            };
            format!(
                "in {} → out {}",
                range(phase.requests.iter().map(|r| r.input_tokens).collect()),
                range(phase.requests.iter().map(|r| r.output_tokens).collect())
            )
        } else if phase.requests.is_empty() {
            plan.workload
                .buckets
                .iter()
                .map(|b| {
                    format!(
                        "{}→{}: weight {}",
                        b.input_tokens,
                        b.output_tokens.unwrap_or(plan.workload.output_tokens),
                        b.weight
                    )
                })
                .collect::<Vec<_>>()
                .join(", ")
        } else {
            mix.iter()
                .map(|((i, o), n)| {
                    format!(
                        "{i}→{o}: {:.0}%",
                        *n as f64 * 100.0 / phase.requests.len() as f64
                    )
                })
                .collect::<Vec<_>>()
                .join(", ")
        };
        // A phase that runs alongside others says with which, and when it starts.
        let alongside = overlapping
            .then(|| {
                let first = schedule.phases.iter().find(|p| p.group == phase.group)?;
                (first.index != phase.index).then(|| {
                    format!(
                        "  (with \"{}\", from +{})",
                        first.name,
                        crate::plan::units::format_duration(phase.offset)
                    )
                })
            })
            .flatten()
            .unwrap_or_default();
        // A phase that ends once decided: its requests and duration are its most.
        let decided = plan
            .phases
            .iter()
            .find(|p| p.name == phase.name)
            .and_then(|p| p.until_decided)
            .map(|min| {
                format!(
                    "  (ends once decided, from {}: requests and duration at most)",
                    crate::plan::units::format_duration(min)
                )
            })
            .unwrap_or_default();
        out.push_str(&format!(
            "{:<width$} {:<28} {:>10} {:>10} {:>12}  {}{}{}{}\n",
            phase.name,
            phase.load,
            requests,
            rate,
            duration,
            mix_text,
            if phase.record { "" } else { "  (not recorded)" },
            alongside,
            decided
        ));
    }
    out.push_str(&workload_lines(plan, schedule));
    out.push_str(&metric_lines(plan));
    if let Some(search) = &schedule.search {
        out.push_str(&search_lines(plan, search));
    }
    if plan.is_stepped() {
        let objectives: Vec<String> = crate::verdict::objectives(plan)
            .iter()
            .map(|o| o.text.clone())
            .collect();
        out.push_str(&format!(
            "\neach step and probe is judged on: {}\n",
            if objectives.is_empty() {
                "nothing (no sla line names no phase): the steps are measured, not judged"
                    .to_string()
            } else {
                objectives.join(", ")
            }
        ));
    }
    out
}

/// What each metric the plan names (in `sla`, `regression`, `abort`) is, from the metric table:
/// a reader of `llmload plan` sees what will be judged before anything is sent.
fn metric_lines(plan: &Plan) -> String {
    let named: Vec<crate::plan::Metric> = plan
        .sla
        .iter()
        .map(|a| a.metric)
        .chain(plan.regression.iter().map(|t| t.metric))
        .chain(plan.abort.iter().map(|r| r.condition.metric))
        .collect();
    let mut out = String::new();
    for metric in crate::plan::Metric::all().filter(|m| named.contains(m)) {
        if out.is_empty() {
            out.push_str(
                "
metrics judged:
",
            );
        }
        let def = metric.def();
        let unit = match def.kind.short_unit() {
            "" => String::new(),
            unit => format!(" ({unit})"),
        };
        out.push_str(&format!("  {}{unit}: {}\n", def.name, def.doc));
    }
    out
}

/// Where prompts come from and what every request asks for, beyond input and output lengths.
fn workload_lines(plan: &Plan, schedule: &Schedule) -> String {
    let workload = &plan.workload;
    let mut lines: Vec<String> = Vec::new();
    system_and_prefix_lines(workload, &mut lines);
    dataset_lines(workload, schedule, &mut lines);
    conversation_and_output_lines(workload, &mut lines);
    trace_lines(plan, &mut lines);
    sessions_lines(plan, &mut lines);
    if let Some(media) = schedule.media() {
        lines.extend(media.describe());
    }
    lines.extend(request_lines(plan, schedule));
    target_lines(plan, &mut lines);
    if lines.is_empty() {
        return String::new();
    }
    format!("\n{}\n", lines.join("\n"))
}

/// The system message (its start) and the shared prefixes' groups.
fn system_and_prefix_lines(workload: &crate::plan::Workload, lines: &mut Vec<String>) {
    if let Some(system) = &workload.system {
        let shown: String = system.chars().take(60).collect();
        let more = if system.chars().count() > 60 {
            "..."
        } else {
            ""
        };
        lines.push(format!("system message: \"{shown}{more}\""));
    }
    if !workload.prefix.is_empty() {
        let total: f64 = workload.prefix.iter().map(|g| g.weight).sum();
        let groups: Vec<String> = workload
            .prefix
            .iter()
            .take(8)
            .enumerate()
            .map(|(i, g)| {
                format!(
                    "#{i} {} tokens ({:.0}%)",
                    g.tokens,
                    g.weight * 100.0 / total
                )
            })
            .collect();
        lines.push(format!(
            "shared prefixes: {} group(s): {}{}; each request's own text follows its group's prefix",
            workload.prefix.len(),
            groups.join(", "),
            if workload.prefix.len() > 8 { ", ..." } else { "" }
        ));
    }
}

/// The dataset: its file, format, order, usable entries and bounds, and its media.
fn dataset_lines(workload: &crate::plan::Workload, schedule: &Schedule, lines: &mut Vec<String>) {
    if let (Some(dataset), Some(catalogue)) = (&workload.dataset, schedule.catalogue()) {
        let bounds = match (dataset.min_input, dataset.max_input) {
            (None, None) => String::new(),
            (min, max) => format!(
                ", prompts of {}–{} tokens{}",
                min.unwrap_or(1),
                max.map_or("any".into(), |n| n.to_string()),
                if dataset.truncate {
                    " (longer ones cut)"
                } else {
                    ""
                }
            ),
        };
        lines.push(format!(
            "dataset: {} ({}), order {}: {} usable entr{} of {}{}{}{}",
            dataset.shown,
            dataset.format.name(),
            dataset.order.name(),
            catalogue.entries.len(),
            if catalogue.entries.len() == 1 {
                "y"
            } else {
                "ies"
            },
            catalogue.entries.len() + catalogue.left_out,
            bounds,
            if catalogue.truncated > 0 {
                format!(", {} cut", catalogue.truncated)
            } else {
                String::new()
            },
            if dataset.output_from_answer {
                "; output lengths from its answers"
            } else {
                ""
            },
        ));
        let media = dataset.media;
        if media.files > 0 {
            lines.push(format!(
                "dataset media: {} entr{} name images, {} audio; {} file{} ({} KiB, {} KiB as base64 in bodies), read once and sent before each entry's text{}",
                media.entries_with_images,
                if media.entries_with_images == 1 { "y" } else { "ies" },
                media.entries_with_audio,
                media.files,
                if media.files == 1 { "" } else { "s" },
                media.bytes.div_ceil(1024),
                (media.bytes * 4 / 3).div_ceil(1024),
                if workload.images.is_some() || workload.audio.is_some() {
                    "; an entry's files replace the workload's synthetic media for its requests"
                } else {
                    ""
                }
            ));
        }
    }
}

/// Conversations' turns and think times, and how output lengths spread.
fn conversation_and_output_lines(workload: &crate::plan::Workload, lines: &mut Vec<String>) {
    use crate::plan::OutputSpread;
    if let Some(conversation) = workload.conversation {
        let think = match conversation.think_max {
            Some(max) if max > conversation.think => format!(
                "{}–{}",
                crate::plan::units::format_duration(conversation.think),
                crate::plan::units::format_duration(max)
            ),
            _ => crate::plan::units::format_duration(conversation.think),
        };
        lines.push(format!(
            "conversations: {} turns each, think time {think}; a phase's requests (and an open loop's rate) count conversations, \
             and each later turn sends the history with the assistant's actual answers",
            conversation.turns
        ));
    }
    match workload.output_spread {
        Some(OutputSpread::Uniform { min, max }) => {
            lines.push(format!("output lengths: uniform in {min}–{max} tokens"))
        }
        Some(OutputSpread::Normal {
            mean,
            stddev,
            min,
            max,
        }) => lines.push(format!(
            "output lengths: normal, mean {mean} sd {stddev}, within {min}–{max} tokens"
        )),
        None => {}
    }
}

/// Each replayed trace: its file, rows, span, shared blocks, start and speed.
fn trace_lines(plan: &Plan, lines: &mut Vec<String>) {
    use crate::plan::Load;
    for phase in &plan.phases {
        if let Load::Trace(trace) = &phase.load {
            let span_s = trace.rows.last().map_or(0.0, |r| r.at_ms as f64 / 1000.0);
            let blocks = trace.rows.iter().filter(|r| !r.hash_ids.is_empty()).count();
            let left_out = match trace.left_out {
                0 => String::new(),
                1 => ", 1 failed request left out".to_string(),
                n => format!(", {n} failed requests left out"),
            };
            lines.push(format!(
                "trace of \"{}\": {} ({}: {} rows over {span_s:.1} s{left_out}; {} with shared blocks of {} tokens), from {} at {}× speed",
                phase.name,
                trace.shown,
                trace.format.name(),
                trace.rows.len(),
                blocks,
                trace.block_tokens,
                crate::plan::units::format_duration(trace.from),
                crate::plan::units::format_load(trace.speed)
            ));
        }
    }
}

/// Each phase's agent sessions: the file, what it holds, how they are replayed.
fn sessions_lines(plan: &Plan, lines: &mut Vec<String>) {
    use crate::plan::Load;
    for phase in &plan.phases {
        let Load::Sessions(sessions) = &phase.load else {
            continue;
        };
        let summary = &sessions.summary;
        let format = summary.format.map_or("sessions", |f| f.name());
        let cap = sessions.idle_cap.map_or(String::new(), |cap| {
            format!(", at most {}", crate::plan::units::format_duration(cap))
        });
        let start = sessions.start_window.map_or(String::new(), |(from, to)| {
            format!(
                "; each starting {:.0}–{:.0}% into its calls",
                from * 100.0,
                to * 100.0
            )
        });
        lines.push(format!(
            "sessions of \"{}\": {} ({format}: {} sessions, {} calls, {} sub-agents; at most {} calls and {} agents in one), {} at once; waits ×{}{cap}{start}",
            phase.name,
            sessions.shown,
            summary.sessions,
            summary.calls,
            summary.subagents,
            summary.most_calls,
            summary.most_agents,
            sessions.concurrent,
            crate::plan::units::format_load(sessions.wait_scale),
        ));
    }
}

/// The target's extra body fields and headers (a secret header shows its variable only).
fn target_lines(plan: &Plan, lines: &mut Vec<String>) {
    use crate::plan::HeaderValue;
    if !plan.target.body.is_empty() {
        lines.push(format!(
            "body fields: {}",
            serde_json::Value::Object(plan.target.body.clone())
        ));
    }
    if !plan.target.headers.is_empty() {
        let headers: Vec<String> = plan
            .target
            .headers
            .iter()
            .map(|h| match &h.value {
                HeaderValue::Text(value) => format!("{}: {value}", h.name),
                HeaderValue::Secret(var) => format!("{}: ${var} (secret)", h.name),
            })
            .collect();
        lines.push(format!("headers: {}", headers.join(", ")));
    }
}

/// Each API the plan speaks: its route, how the key goes, and one example body (the prompt
/// stood in for by its length; the key is never in a body, and its header shows the variable).
fn request_lines(plan: &Plan, schedule: &Schedule) -> Vec<String> {
    let mut apis = vec![plan.target.api];
    for phase in &plan.phases {
        if let Some(api) = phase.api.filter(|api| !apis.contains(api)) {
            apis.push(api);
        }
    }
    let first = schedule
        .phases
        .iter()
        .find_map(|phase| phase.requests.first());
    // A plan whose requests are made while it runs (a search's probes) has none scheduled:
    // its example is the workload's first length, as its first request will be.
    let bucket = plan.workload.buckets.first();
    let (input, output) = first.map_or_else(
        || {
            bucket.map_or((0, plan.workload.output_tokens), |b| {
                (
                    b.input_tokens,
                    b.output_tokens.unwrap_or(plan.workload.output_tokens),
                )
            })
        },
        |r| (r.input_tokens, r.output_tokens),
    );
    let options = plan.body_options();
    let prompt_text = format!("<a prompt of {input} tokens>");
    let batch = first.map_or_else(|| plan.workload.batch.map_or(0, |b| b.min), |r| r.batch);
    let query_tokens = plan.workload.query_tokens.unwrap_or(0);
    let each = first.map_or(input, |r| r.tokens_per_input(query_tokens));
    let prompt = match &plan.workload.system {
        _ if batch > 0 => crate::planner::Prompt::Batch {
            query: (query_tokens > 0).then(|| format!("<a query of {query_tokens} tokens>")),
            inputs: (1..=batch.min(3))
                .map(|n| {
                    if n == 3 && batch > 3 {
                        format!("<{} more inputs>", batch - 2)
                    } else {
                        format!("<an input of {each} tokens>")
                    }
                })
                .collect(),
        },
        Some(system) => crate::planner::Prompt::Messages(vec![
            crate::planner::Message::text("system", system.clone()),
            crate::planner::Message::text("user", prompt_text),
        ]),
        None => crate::planner::Prompt::Text(prompt_text),
    };
    // The first request's media, each stood in for by what it is.
    let prompt = match (schedule.media(), first) {
        (Some(media), Some(first)) if !first.media.is_empty() => {
            let mut messages = crate::planner::as_messages(prompt);
            if let Some(user) = messages.iter_mut().rev().find(|m| m.role == "user") {
                user.media = media.placeholders(first.prompt_seed, first.media);
                if let Some(urls) = plan.workload.image_urls {
                    // Where the run will serve them (a free port is chosen when it starts).
                    let port = match urls.port {
                        0 => "<port>".to_string(),
                        port => port.to_string(),
                    };
                    for image in user
                        .media
                        .iter_mut()
                        .filter(|a| matches!(a.kind, crate::plan::AttachmentKind::Image { .. }))
                    {
                        image.url = Some(std::sync::Arc::from(format!(
                            "http://{}:{port}/llmload/media/…",
                            match urls.host {
                                std::net::IpAddr::V6(ip) => format!("[{ip}]"),
                                ip => ip.to_string(),
                            }
                        )));
                    }
                }
            }
            crate::planner::Prompt::Messages(messages)
        }
        _ => prompt,
    };
    apis.iter()
        .map(|api| {
            let dialect = api.dialect();
            let vars: Vec<String> = plan
                .target
                .api_keys
                .iter()
                .map(|key| format!("${}", key.env))
                .collect();
            let key = match (vars.as_slice(), dialect.credential_headers().first()) {
                ([], _) | (_, None) => String::new(),
                ([var], Some(header)) => format!("; key: {header} from {var}"),
                (vars, Some(header)) => {
                    format!("; keys in turn: {header} from {}", vars.join(", "))
                }
            };
            let fixed: Vec<String> = dialect
                .fixed_headers()
                .iter()
                .map(|(name, value)| format!("; {name}: {value}"))
                .collect();
            let body = dialect.body(&prompt, output, &options);
            format!(
                "api {}: POST {}{key}{}\n  body: {}",
                api.as_str(),
                dialect.path(),
                fixed.join(""),
                String::from_utf8_lossy(&body)
            )
        })
        .collect()
}

/// What a search will do, before any result is known.
fn search_lines(plan: &Plan, search: &crate::planner::SearchSchedule) -> String {
    let spec = &search.spec;
    let unit = spec.unit.symbol();
    let loads: Vec<String> = search
        .first_probes
        .iter()
        .map(|&l| crate::plan::units::format_load(l))
        .collect();
    let probe_time = crate::planner::search::probe_time(spec);
    let position = match search.after_group {
        0 => "first".to_string(),
        _ => format!(
            "after \"{}\"",
            plan.phases
                .get(spec.position.saturating_sub(1))
                .map_or("the phases before it", |p| p.name.as_str())
        ),
    };
    format!(
        "\nsearch \"{}\" (runs {position}): {}\n  first probes, while each passes: {} {unit}; then bisection between the highest \
         passing and the lowest failing load ({})\n  at most {} probes of {} each ({} in all), up to {} {unit} at the range's top\n",
        search.name,
        search.description,
        loads.join(", "),
        match spec.unit {
            crate::plan::LoadUnit::RequestsPerSecond => "geometric midpoints",
            crate::plan::LoadUnit::Concurrency => "whole users",
            crate::plan::LoadUnit::Sessions => "whole sessions",
        },
        spec.max_probes,
        crate::plan::units::format_duration(probe_time),
        crate::plan::units::format_duration(
            (probe_time * spec.max_probes).min(spec.max_duration)
        ),
        crate::plan::units::format_load(spec.high),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// "Same plan and seed, same schedule" is a promise to users: a dependency update that
    /// changes random draws (rand, rand_distr, rand_chacha) must fail here first.
    #[test]
    fn the_schedule_of_chat_sla_is_pinned() {
        use sha2::Digest;
        let text = include_str!("../../plans/chat-sla.kdl");
        let plan = crate::plan::parse_plan("chat-sla.kdl", text.to_string()).unwrap();
        let schedule = crate::planner::compile(&plan, plan.seed).unwrap();
        let csv = csv(&schedule);
        assert_eq!(csv.lines().count(), 3499);
        let hash = format!("{:x}", sha2::Sha256::digest(csv.as_bytes()));
        assert_eq!(
            hash,
            "d793ac1a971338c9c4660541604bd0404665428700d172b2bdff1095f0cba6c5"
        );
    }
}
