//! What became of the requests: images the server did not fetch, failures in the client, too
//! few successes for the latencies to be whole, pacing, retries and throttling.

use super::{note, warning, Code, Run, Warning, PARTIAL_LATENCY_SHARE};

/// The run's warnings and notes of this family.
pub(super) fn outcomes(run: &Run, out: &mut Vec<Warning>) {
    let Run {
        aggregates,
        overall,
        ..
    } = *run;
    let by_url: u64 = aggregates.by_media.iter().map(|m| m.images_by_url).sum();
    let fetched: u64 = aggregates.by_media.iter().map(|m| m.images_fetched).sum();
    if fetched < by_url {
        out.push(warning(
            Code::ImagesUnfetched,
            format!(
                "the server fetched {fetched} of the {by_url} images sent to it as URLs (image-urls): its answers \
                 to the others did not see their images, so their TTFT and media tokens are not a vision \
                 model's; check that the server fetches image URLs and can reach this machine's loopback \
                 (a server in a container needs the host's network)"
            ),
        ));
    }
    let requests = &overall.requests;
    if requests.client_failed > 0 {
        out.push(warning(
            Code::ClientLimit,
            format!(
                "{} request(s) failed in the client itself, not in the server ({}): they are in no rate or \
                 latency, and the load the plan asked for was not delivered",
                requests.client_failed,
                aggregates.first_client_error.as_deref().unwrap_or("no detail")
            ),
        ));
    }
    let completed = requests.completed();
    let unsuccessful = requests.failed + requests.throttled;
    if completed > 0 && unsuccessful as f64 / completed as f64 > PARTIAL_LATENCY_SHARE {
        out.push(warning(
            Code::PartialLatency,
            format!(
                "{unsuccessful} of {completed} completed request(s) failed, timed out or were throttled: latency \
                 figures (E2E, ITL, TPOT) describe only the {} that succeeded; TTFT also counts the {} \
                 unsuccessful request(s) that had received their first token",
                requests.ok, requests.failed_after_first_token
            ),
        ));
    }
    if requests.paced > 0 {
        out.push(note(
            Code::Paced,
            format!(
                "{} of {} request(s) were held by {} before their send ({:.2} s on average, {:.2} \
                 s at most): the client slowed to the key's budgets ({}), and their latencies count \
                 from their send; their schedule lag counts from their slot",
                requests.paced,
                requests.sent,
                if run.header.is_some_and(|h| h.paces_to_answers) {
                    "the limits the server's answers said (`on-throttle \"pace\"`) or the plan's `limits`"
                } else {
                    "the plan's `limits`"
                },
                requests.paced_s / requests.paced as f64,
                requests.paced_max_s,
                match (overall.rates.paced_per_s, overall.rates.planned_per_s) {
                    (Some(paced), Some(planned)) => format!("{paced:.2} requests/s of the {planned:.2} planned"),
                    (Some(paced), None) => format!("{paced:.2} requests/s"),
                    (None, _) => "one request".to_string(),
                }
            ),
        ));
    }
    if let Some(keys) = keys_note(run) {
        out.push(note(Code::Keys, keys));
    }
    if requests.retried > 0 {
        out.push(note(
            Code::ThrottleRetries,
            format!(
                "{} request(s) were sent again after the server throttled them ({} throttled \
                 attempt(s), {:.1} s of waits in all, as the server asked): their TTFT and E2E \
                 count from their first send, the waits included, as the application that \
                 retries sees them; each record keeps its throttled attempts",
                requests.retried, requests.throttled_attempts, requests.retry_wait_s
            ),
        ));
    }
    if requests.throttled > 0 {
        out.push(warning(
            Code::Throttled,
            format!(
                "{} of {completed} completed request(s) were throttled by the server (HTTP 429 or 529, or a \
                 rate-limit error): they are counted apart from the failed (`throttled-rate`, not \
                 `error-rate`), in no latency, and as missed in goodput; their records keep any \
                 Retry-After and rate-limit headers",
                requests.throttled
            ),
        ));
    }
}

/// With several keys: how the requests went with each, and what became of them, so that a key
/// of a lower tier (or a revoked one) shows as the one throttled or refused.
fn keys_note(run: &Run) -> Option<String> {
    let counts = &run.overall.requests.by_key;
    let names = run.header.map_or(&[][..], |h| h.keys.as_slice());
    if counts.is_empty() {
        return None;
    }
    let each: Vec<String> = counts
        .iter()
        .enumerate()
        .map(|(index, key)| {
            let name = names
                .get(index)
                .map_or_else(|| format!("key {}", index + 1), |var| format!("${var}"));
            let mut said = format!("{name} {} sent, {} ok", key.sent, key.ok);
            if key.throttled > 0 {
                said.push_str(&format!(", {} throttled", key.throttled));
            }
            if key.failed > 0 {
                said.push_str(&format!(", {} failed", key.failed));
            }
            if key.paced_s > 0.0 {
                said.push_str(&format!(", held {:.1} s by its budgets", key.paced_s));
            }
            said
        })
        .collect();
    Some(format!(
        "requests went with {} API keys in turn, each to its own budgets: {}",
        counts.len(),
        each.join("; ")
    ))
}
