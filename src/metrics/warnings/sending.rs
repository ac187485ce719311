//! What each recorded phase's sending says: an early end, connections opened on the way, a
//! server that broke the protocol, users waiting for bodies, requests sent late. Not the
//! client machine's load (see `client`).

use super::{
    late_schedule, note, warning, Code, Run, Warning, BODY_WAIT_SHARE_LIMIT, LAG_P99_LIMIT_MS,
};

/// The run's warnings and notes of this family, phase by phase.
pub(super) fn sending(run: &Run, out: &mut Vec<Warning>) {
    let aggregates = run.aggregates;
    for phase in aggregates.phases.iter().filter(|p| p.recorded) {
        // A sweep's step or a search's probe says its own early end in the steps' table.
        if let Some(why) = phase.ended_early.as_ref().filter(|_| phase.step.is_none()) {
            out.push(note(
                Code::EndedEarly,
                format!(
                    "phase \"{}\" ended before its duration: {why}; its requests in flight then \
                     were cancelled, and are in no metric",
                    phase.name
                ),
            ));
        }
        // On loopback a connection opens in a fraction of a millisecond: only slower ones can
        // show in TTFT.
        let connect = &phase.metrics[crate::dist!(Connect)];
        if phase.requests.new_connections > 0 && connect.max.unwrap_or(0.0) >= 1.0 {
            let warmed = phase.connections.map_or(0, |c| c.warmed);
            // Cold connections to an https:// target pay a handshake each: said apart.
            let tls = match phase.metrics[crate::dist!(Tls)].p50 {
                Some(p50) => format!(", of which the TLS handshake p50 {p50:.2} ms"),
                None => String::new(),
            };
            out.push(note(
                Code::ConnectionsOpened,
                format!(
                    "phase \"{}\": {} request(s) opened a new connection{} (connect p50 {:.2} ms, p99 {:.2} ms, \
                     max {:.2} ms{tls}); their TTFT includes it",
                    phase.name,
                    phase.requests.new_connections,
                    if warmed > 0 {
                        format!(", beyond the {warmed} opened before it")
                    } else {
                        String::new()
                    },
                    connect.p50.unwrap_or(0.0),
                    connect.p99.unwrap_or(0.0),
                    connect.max.unwrap_or(0.0)
                ),
            ));
        } else if let Some(c) = phase.connections.filter(|c| {
            // Logs written before connect times were per request.
            phase.requests.new_connections == 0
                && c.opened > 0
                && c.connect_ms_max.unwrap_or(0.0) >= 1.0
        }) {
            out.push(note(
                Code::ConnectionsOpened,
                format!(
                    "phase \"{}\": {} connection(s) opened while it ran (connect p50 {:.2} ms, max {:.2} ms); \
                     a request that waited for one counts that in its TTFT",
                    phase.name,
                    c.opened,
                    c.connect_ms_p50.unwrap_or(0.0),
                    c.connect_ms_max.unwrap_or(0.0)
                ),
            ));
        }
        if let Some(c) = phase.connections.filter(|c| c.stray > 0) {
            out.push(warning(
                Code::ServerProtocol,
                format!(
                    "phase \"{}\": the server sent {} response(s) no request asked for (bytes on an idle \
                     connection, after a response's end, or a 408 on a connection that had been \
                     idle); each such connection was dropped and a 408's request sent again, but a \
                     late response that arrived just as a request went out may have been taken for \
                     its answer: check the server (or its proxy) before trusting this phase",
                    phase.name, c.stray
                ),
            ));
        }
        if let Some(wait) = phase
            .body_wait
            .filter(|w| w.share() >= BODY_WAIT_SHARE_LIMIT)
        {
            out.push(warning(
                Code::BodyBuilder,
                format!(
                    "phase \"{}\": its users waited {:.1} s for request bodies ({:.1}% of their time): the client \
                     made bodies (images, audio) more slowly than its users sent them, so it, not the server, \
                     held the load down; use smaller or fewer media, or fewer users",
                    phase.name,
                    wait.waited_s,
                    wait.share() * 100.0
                ),
            ));
        }
        if let Some(p99) = late_schedule(phase) {
            out.push(warning(
                Code::ScheduleLag,
                format!(
                    "phase \"{}\": schedule lag p99 is {p99:.1} ms (above {LAG_P99_LIMIT_MS} ms): the client, \
                     not the server, limited the run; requests went out later than planned",
                    phase.name
                ),
            ));
        }
    }
}
