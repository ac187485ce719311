//! Resetting the server's caches before a phase (`reset-cache #true`): the endpoints the
//! engines offer, tried in turn until one answers — vLLM's `POST /reset_prefix_cache`,
//! SGLang's `POST /flush_cache`, llama.cpp's `POST /slots/{id}?action=erase` for each slot
//! `GET /slots` lists. The first that works is the server's; a server that refuses (llama.cpp
//! without `--slot-save-path`, vLLM outside its dev mode) or offers none is said so, in the
//! phase's record and a note — never a failure of the run: the phase is measured either way,
//! and its report says whether its cache was cold.
//!
//! Tried by what answers rather than by the engine the telemetry names: the reset runs before
//! the first phase, when no scrape may have happened yet, and a server behind a gateway may
//! expose no metrics at all.

use std::time::Duration;

use super::template::RequestTemplate;

/// How long one reset call may take (an engine flushes its cache synchronously).
const TIMEOUT: Duration = Duration::from_secs(30);

/// What a reset did: `Ok` with how (`POST /reset_prefix_cache`), or `Err` with why not.
pub type ResetOutcome = Result<String, String>;

/// Resets the caches of the server behind `template`, with the run's TLS configuration.
pub async fn reset(template: &RequestTemplate, tls: &crate::tls::Trust) -> ResetOutcome {
    let client = tls
        .reqwest_builder()
        .timeout(TIMEOUT)
        .build()
        .map_err(|e| format!("cannot make an HTTP client: {e}"))?;
    let root = |path: &str| {
        let mut url = template.url.clone();
        url.set_path(path);
        url.set_query(None);
        url
    };
    let send = |request: reqwest::RequestBuilder| {
        template
            .credentials(0)
            .iter()
            .chain(template.headers.iter())
            .fold(request, |r, (name, value)| r.header(name, value))
            .send()
    };
    let mut refusals = Vec::new();
    for (path, engine) in [("/reset_prefix_cache", "vLLM"), ("/flush_cache", "SGLang")] {
        match send(client.post(root(path))).await {
            Ok(response) if response.status().is_success() => {
                return Ok(format!("POST {path} ({engine})"));
            }
            Ok(response) if matches!(response.status().as_u16(), 404 | 405) => {}
            Ok(response) => refusals.push(format!(
                "POST {path} answered HTTP {}: {}",
                response.status().as_u16(),
                said(response).await
            )),
            Err(e) => return Err(format!("POST {path} failed: {}", without_url(&e))),
        }
    }
    // llama.cpp: each slot's cache erased.
    if let Ok(response) = send(client.get(root("/slots"))).await {
        if response.status().is_success() {
            let slots: Vec<u64> = response
                .json::<serde_json::Value>()
                .await
                .ok()
                .and_then(|v| {
                    v.as_array().map(|slots| {
                        slots
                            .iter()
                            .filter_map(|s| s.get("id").and_then(|id| id.as_u64()))
                            .collect()
                    })
                })
                .unwrap_or_default();
            if slots.is_empty() {
                refusals.push("GET /slots listed no slot".into());
            }
            let mut erased = 0;
            for id in &slots {
                let mut url = root(&format!("/slots/{id}"));
                url.set_query(Some("action=erase"));
                match send(client.post(url)).await {
                    Ok(r) if r.status().is_success() => erased += 1,
                    Ok(r) => {
                        refusals.push(format!(
                            "POST /slots/{id}?action=erase answered HTTP {}: {}",
                            r.status().as_u16(),
                            said(r).await
                        ));
                        break;
                    }
                    Err(e) => {
                        refusals.push(format!(
                            "POST /slots/{id}?action=erase failed: {}",
                            without_url(&e)
                        ));
                        break;
                    }
                }
            }
            if erased > 0 && erased == slots.len() {
                return Ok(format!(
                    "POST /slots/{{id}}?action=erase for its {erased} slot(s) (llama.cpp)"
                ));
            }
        }
    }
    if refusals.is_empty() {
        Err("the server offers none of the cache resets llmload knows (vLLM's POST /reset_prefix_cache, SGLang's POST /flush_cache, llama.cpp's POST /slots/{id}?action=erase)".into())
    } else {
        Err(format!("the server refused: {}", refusals.join("; ")))
    }
}

/// What a refusing server said: its error message, one line and bounded.
async fn said(response: reqwest::Response) -> String {
    let text = response.text().await.unwrap_or_default();
    let message = serde_json::from_str::<serde_json::Value>(&text)
        .ok()
        .and_then(|v| {
            v.pointer("/error/message")
                .or_else(|| v.get("detail"))
                .or_else(|| v.get("message"))
                .and_then(|m| m.as_str().map(str::to_string))
        })
        .unwrap_or(text);
    crate::error::shorten(&message)
}

/// A client error without its URL (which may carry a secret query parameter).
fn without_url(error: &reqwest::Error) -> String {
    let kind = if error.is_connect() {
        "cannot connect"
    } else if error.is_timeout() {
        "no answer in time"
    } else {
        "broken"
    };
    kind.to_string()
}
