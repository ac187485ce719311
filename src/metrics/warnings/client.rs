//! What the client machine's load says, phase by phase: the process stalled, its CPU or the
//! whole machine's was saturated. What any of these means for a verdict is `client_limited`'s
//! and the verdict's; this only says it.

use super::{
    note, saturated_client, saturated_machine, warning, Code, Run, Warning, STALLED_SHARE,
    STALL_NOTED_MS,
};

/// The run's warnings and notes of this family, phase by phase.
pub(super) fn client(run: &Run, out: &mut Vec<Warning>) {
    let Run {
        aggregates, header, ..
    } = *run;
    for phase in aggregates.phases.iter().filter(|p| p.recorded) {
        // A scheduler's few-millisecond hiccups are every busy machine's: said when they matter.
        let matters = |s: &crate::metrics::stalls::ClientStalls| {
            s.count > 0 && (s.worst_ms >= STALL_NOTED_MS || s.share_during() >= STALLED_SHARE)
        };
        if let Some(stalls) = phase.client_stalls.filter(matters) {
            let effect = if stalls.requests_during > 0 {
                format!(
                    "{} of its {} requests were in flight then, and their latencies include the stall: \
                     an assertion they break is not decided",
                    stalls.requests_during, stalls.requests
                )
            } else {
                "no request was in flight then".to_string()
            };
            let message = format!(
                "phase \"{}\": the client process stalled {} time(s) for {} ms or more (its hiccup meter \
                 woke late), the worst {:.1} ms at {:.1} s, {:.0} ms in all; {effect}",
                phase.name,
                stalls.count,
                crate::records::STALL_RECORDED.as_millis(),
                stalls.worst_ms,
                stalls.worst_at_s,
                stalls.total_ms,
            );
            // A warning (which `--fail-on-warning` fails) when the stalls are long and touched a
            // share of the requests; a short stall over a few requests of a short run is a note.
            let warn = stalls.share_during() >= STALLED_SHARE && stalls.worst_ms >= STALL_NOTED_MS;
            out.push(if warn {
                warning(Code::ClientStall, message)
            } else {
                note(Code::ClientStall, message)
            });
        }
        if let Some((client, _)) = saturated_client(phase) {
            out.push(warning(
                Code::ClientCpu,
                format!(
                    "phase \"{}\": the client's CPU was saturated ({} of {} s at ≥95% of its {} core(s), {:.0}% \
                     on average): the client, not the server, may have limited the run and added latency; give \
                     it more cores (--threads), run it on another machine, or lower the load",
                    phase.name,
                    client.saturated_seconds,
                    client.seconds,
                    client.cores,
                    client.utilization * 100.0
                ),
            ));
        }
    }
    // A server llmload started shares this machine: when the machine, not the client, was
    // saturated, the client waited for cores without being busy, and no `client-cpu` says so.
    let local_server = header.is_some_and(|h| h.server.is_some());
    for phase in aggregates
        .phases
        .iter()
        .filter(|p| p.recorded && local_server)
    {
        let Some(machine) = saturated_machine(phase).filter(|_| saturated_client(phase).is_none())
        else {
            continue;
        };
        out.push(warning(
            Code::MachineCpu,
            format!(
                "phase \"{}\": this machine's {} CPU(s) were saturated ({} of {} s at ≥95%, {:.0}% on \
                 average) with the server llmload started running beside the client: the client waited \
                 for cores it did not get, and its send times and latencies include that wait (it used \
                 {:.0}% of its own); give the server fewer threads than the machine has cores, or run the \
                 client on another machine",
                phase.name,
                machine.cores,
                machine.saturated_seconds,
                machine.seconds,
                machine.utilization * 100.0,
                phase.client.map_or(0.0, |c| c.utilization * 100.0)
            ),
        ));
    }
}
