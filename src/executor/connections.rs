//! Connections are the client's business, not the measurement's: they are opened before a
//! phase's clock starts, and every one opened while a phase runs is counted and timed.
//!
//! Under HTTP/1.1 a request in flight holds a connection of its own, and opening one (TCP, TLS)
//! takes from a fraction of a millisecond on loopback to tens of milliseconds across a network,
//! queued behind the others when hundreds open at once. A first wave that opens its connections
//! reports TTFT tails that are the client's. So before each group of phases the executor opens
//! (and checks) as many connections as the phases will hold at once, unless the plan asks to
//! measure cold starts. It is not for choosing or limiting connections (the pool does that), nor
//! for how they are opened and checked (the transport's `warm`).

use super::request::RequestTemplate;
use super::transport::Transport;
use crate::planner::PhaseSchedule;

/// How many connections a phase holds at once: a closed loop's users, a burst's requests, an
/// open loop's arrivals in its busiest second (it needs more when its answers take longer, and
/// opens them as it goes: those are counted).
pub fn needed(phase: &PhaseSchedule) -> u64 {
    phase
        .load_model
        .in_flight_within(std::time::Duration::from_secs(1))
        .ceil() as u64
}

/// Leaves `count` connections to `template`'s server open and idle in the pool, each having
/// answered a `GET /models` (every OpenAI-compatible server answers it; any answer proves the
/// connection) with the run's credentials. Returns how many, and the first failure.
pub async fn warm(
    transport: &Transport,
    template: &RequestTemplate,
    count: u64,
) -> (u64, Option<String>) {
    transport
        .warm(&template.models_url(), template, count)
        .await
}

/// What the check before a run learned: what the server said of its model, and what a report
/// must say.
#[derive(Debug, Default)]
pub struct Preflight {
    /// What the listing said of the model, when it said more than its id.
    pub served: Option<crate::records::ServedModel>,
    /// What a report must say (a model answered for but not listed).
    pub note: Option<String>,
}

/// The largest `GET /models` answer read: a gateway may list thousands of models.
const MODELS_BYTES: u64 = 4 << 20;

/// Checks, before a run's clock starts, that `template`'s server answers and serves its model:
/// a `GET /models` with the run's credentials. A target that does not answer, or refuses the
/// credentials, is refused at once; an hour's schedule of refused requests proves nothing. One
/// that lists models without this one is asked for it once (one token): some servers (llama.cpp's)
/// list their file's name and answer for any model, and then a note says so; a server that
/// refuses it (vLLM's 404) ends the run, saying what it serves. A server without `/models`, or
/// one that lists none, is let through. `Ok` holds what the listing said of the model (its
/// entry, or the only one), and a note, if there is one.
/// Why the preflight refuses a run, before anything is sent.
#[derive(Debug, thiserror::Error)]
pub enum Refusal {
    #[error("the target does not answer ({shown}): {detail}")]
    Unreachable { shown: String, detail: String },
    #[error("the target refused the run's credentials{}: HTTP {status} from {shown}: {said} ({})",
        key_var.as_ref().map(|var| format!(" (the key in ${var})")).unwrap_or_default(),
        credentials_hint(*key_sent))]
    Credentials {
        status: u16,
        shown: String,
        said: String,
        key_sent: bool,
        /// The refused key's variable, when the run has several.
        key_var: Option<String>,
    },
    #[error(
        "the target does not serve model \"{model}\" (HTTP {status}: {said}); it serves: \
             {served} (set `model` in the target, or --model)"
    )]
    Model {
        model: String,
        status: u16,
        said: String,
        served: String,
    },
}

/// What to do about refused credentials: whether a key went out decides it (give one, or check
/// the one given).
fn credentials_hint(key_sent: bool) -> &'static str {
    if key_sent {
        "a key was sent, and refused: check that the variable the plan names holds a key this \
         target accepts (for this model, not expired)"
    } else {
        "no key was sent: name the variable that holds it with `api-key env=\"VAR\"` in the \
         target (or --api-key-env VAR) and export VAR"
    }
}

/// With several keys, each after the first is shown the same `GET /models`: one the target
/// refuses would fail its share of the requests, so the run is refused, naming its variable.
async fn other_keys_accepted(
    transport: &Transport,
    template: &RequestTemplate,
) -> Result<(), Refusal> {
    let models = template.models_url();
    for (key, credentials) in template.keys.iter().enumerate().skip(1) {
        let outgoing = super::transport::Outgoing {
            url: &models,
            body: None,
            headers: &[],
            template,
            key,
        };
        let Ok(mut response) = transport.send(outgoing).await else {
            continue;
        };
        if matches!(response.status, 401 | 403) {
            let body = super::request::read_capped(&mut response.body, 4096)
                .await
                .unwrap_or_default();
            return Err(Refusal::Credentials {
                status: response.status,
                shown: format!("GET {}", models.path()),
                said: crate::error::shorten(&String::from_utf8_lossy(&body)),
                key_sent: true,
                key_var: credentials.var.clone(),
            });
        }
    }
    Ok(())
}

/// The most bytes of an engine's info read (llama.cpp's chat template is most of its /props).
const INFO_BYTES: u64 = 1 << 20;

/// Reads an engine's info into the listed model's facts.
type InfoReader = fn(
    Option<crate::records::ServedModel>,
    &str,
    &serde_json::Value,
) -> Option<crate::records::ServedModel>;

/// An engine's own info endpoint (`path` on the target's origin, the run's credentials with
/// it), when it answers with JSON: what its listing leaves out.
async fn engine_info(
    transport: &Transport,
    template: &RequestTemplate,
    path: &str,
) -> Option<serde_json::Value> {
    let mut url = template.url.clone();
    url.set_path(path);
    url.set_query(None);
    let outgoing = super::transport::Outgoing {
        url: &url,
        body: None,
        headers: &[],
        template,
        key: 0,
    };
    let mut response = transport.send(outgoing).await.ok()?;
    let body = super::request::read_capped(&mut response.body, INFO_BYTES)
        .await
        .ok()?;
    (200..300)
        .contains(&response.status)
        .then(|| serde_json::from_slice(&body).ok())
        .flatten()
}

pub async fn preflight(
    transport: &Transport,
    template: &RequestTemplate,
) -> Result<Preflight, Refusal> {
    use super::transport::Outgoing;
    let models = template.models_url();
    // Its path only: the URL's query may hold a key.
    let shown = format!("GET {}", models.path());
    let outgoing = Outgoing {
        url: &models,
        body: None,
        headers: &[],
        template,
        key: 0,
    };
    let mut response = match transport.send(outgoing).await {
        Ok(response) => response,
        Err(error) => {
            return Err(Refusal::Unreachable {
                shown,
                detail: error.detail,
            })
        }
    };
    let body = super::request::read_capped(&mut response.body, MODELS_BYTES)
        .await
        .unwrap_or_default();
    let said = || {
        let text = String::from_utf8_lossy(&body);
        crate::error::shorten(&text)
    };
    match response.status {
        401 | 403 => {
            return Err(Refusal::Credentials {
                status: response.status,
                shown,
                said: said(),
                key_sent: template.sends_a_key(),
                // Which key, when there is a choice.
                key_var: template
                    .keys
                    .first()
                    .filter(|_| template.keys.len() > 1)
                    .and_then(|key| key.var.clone()),
            });
        }
        200..=299 => other_keys_accepted(transport, template).await?,
        // No model list here (not every server has one): the requests will tell.
        _ => return Ok(Preflight::default()),
    }
    let entries = serde_json::from_slice::<serde_json::Value>(&body)
        .ok()
        .and_then(|v| v.get("data").and_then(|d| d.as_array()).cloned())
        .unwrap_or_default();
    let listed: Vec<String> = entries
        .iter()
        .filter_map(|m| m.get("id").and_then(|id| id.as_str()).map(str::to_string))
        .collect();
    let model = &template.options.model;
    // Its entry; else the only one (llama.cpp lists its file and answers for any name).
    let entry = entries
        .iter()
        .find(|m| m.get("id").and_then(|id| id.as_str()) == Some(model.as_str()))
        .or_else(|| (entries.len() == 1).then(|| &entries[0]));
    let mut facts = entry.and_then(crate::records::ServedModel::of_listing);
    // What an engine's own endpoint adds to its listing: llama.cpp's /props, SGLang's
    // /get_model_info (asked only of the engine that owns the listing).
    let owner = entry.and_then(|m| m.get("owned_by")?.as_str());
    let info: Option<(&str, InfoReader)> = match owner {
        Some("llamacpp") => Some(("/props", crate::records::ServedModel::with_props)),
        Some("sglang") => Some((
            "/get_model_info",
            crate::records::ServedModel::with_sglang_info,
        )),
        _ => None,
    };
    if let (Some((path, read)), Some(id)) = (info, entry.and_then(|m| m.get("id")?.as_str())) {
        if let Some(said) = engine_info(transport, template, path).await {
            facts = read(facts, id, &said);
        }
    }
    if listed.is_empty() || listed.iter().any(|id| id == model) {
        return Ok(Preflight {
            served: facts,
            note: None,
        });
    }
    let mut named: Vec<String> = listed
        .iter()
        .take(20)
        .map(|id| crate::error::shorten(id))
        .collect();
    if listed.len() > 20 {
        named.push(format!("and {} more", listed.len() - 20));
    }
    let served = named.join(", ");
    // Not listed: asked once, for one token, whether it answers for it anyway.
    let body = template.body(&crate::planner::Prompt::Text("Hi".into()), 1);
    let outgoing = Outgoing {
        url: &template.url,
        body: Some(body),
        headers: &[],
        template,
        key: 0,
    };
    let answered = match transport.send(outgoing).await {
        Ok(mut response) => {
            let said = super::request::read_capped(&mut response.body, 4096)
                .await
                .unwrap_or_default();
            (
                response.status,
                crate::error::shorten(&String::from_utf8_lossy(&said)),
            )
        }
        Err(error) => (0, error.detail),
    };
    match answered {
        (200..=299, _) => Ok(Preflight {
            note: Some(format!(
                "the target lists {served} but not \"{model}\"; it answered a request for \
                 \"{model}\", so the run goes on (a server such as llama.cpp's answers for any \
                 model name)"
            )),
            served: facts,
        }),
        (status, said) => Err(Refusal::Model {
            model: model.clone(),
            status,
            said,
            served,
        }),
    }
}
