//! Where a run's requests go and who sends them: the target's URL as shown in reports, the API
//! key from the environment, and the client's host name.

use reqwest::header::HeaderValue;

use crate::error::{Error, Result};
use crate::executor::{Event, Observer};
use crate::plan::Plan;
use crate::secrets::Secrets;

/// `http://host:8000` or `http://host:8000/v1/` → `http://host:8000/v1`.
pub fn api_root(url: &str) -> String {
    let trimmed = url.trim_end_matches('/');
    if trimmed.ends_with("/v1") {
        trimmed.to_string()
    } else {
        format!("{trimmed}/v1")
    }
}

/// The URL without `user:password@`, for reports and logs.
pub fn redact_url(url: &str) -> String {
    let Some(scheme_end) = url.find("://") else {
        return url.to_string();
    };
    let rest = &url[scheme_end + 3..];
    let authority_end = rest.find('/').unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => format!("{}{}", &url[..scheme_end + 3], &rest[at + 1..]),
        None => url.to_string(),
    }
}

/// The headers that carry the key from the variable the plan names, as the plan's API sends it
/// (`Authorization: Bearer $KEY` for OpenAI's), marked sensitive so that they never print, and
/// the key added to `secrets`; none (with a notice) when the variable is unset or empty.
pub(super) fn credentials(
    plan: &Plan,
    observer: &dyn Observer,
    secrets: &mut Secrets,
) -> Result<Vec<(reqwest::header::HeaderName, HeaderValue)>> {
    let Some(var) = &plan.target.api_key_env else {
        return Ok(Vec::new());
    };
    let key = match std::env::var(var) {
        Ok(key) if !key.is_empty() => key,
        Ok(_) | Err(std::env::VarError::NotPresent) => {
            let notice = format!("${var} is not set; requests go without an API key");
            observer.on_event(Event::Note(&notice));
            return Ok(Vec::new());
        }
        Err(std::env::VarError::NotUnicode(_)) => {
            return Err(Error::usage(format!(
                "${var} (the plan's api-key) is not valid UTF-8, so it cannot go in an HTTP header"
            )))
        }
    };
    secrets.add(&key);
    plan.target
        .api
        .dialect()
        .credentials(&key)
        .into_iter()
        .map(|(name, text)| {
            let mut value = HeaderValue::from_str(&text).map_err(|_| {
                Error::usage(format!(
                    "${var} (the plan's api-key) holds characters that cannot go in an HTTP header"
                ))
            })?;
            value.set_sensitive(true);
            Ok((name, value))
        })
        .collect()
}

/// The plan's extra headers; a secret one's value read from its variable now, added to
/// `secrets` and marked sensitive. A secret header whose variable is unset is left out, with a
/// notice (as an unset API key is).
pub(super) fn extra_headers(
    plan: &Plan,
    observer: &dyn Observer,
    secrets: &mut Secrets,
) -> Result<Vec<(reqwest::header::HeaderName, HeaderValue)>> {
    use crate::plan::HeaderValue as Planned;
    let mut headers = Vec::new();
    for header in &plan.target.headers {
        let name = reqwest::header::HeaderName::from_bytes(header.name.as_bytes())
            .map_err(|_| Error::usage(format!("\"{}\" is not an HTTP header name", header.name)))?;
        let value = match &header.value {
            Planned::Text(text) => HeaderValue::from_str(text).map_err(|_| {
                Error::usage(format!(
                    "the value of header {} cannot go in an HTTP header",
                    header.name
                ))
            })?,
            Planned::Secret(var) => {
                let secret = match std::env::var(var) {
                    Ok(value) if !value.is_empty() => value,
                    _ => {
                        let notice = format!(
                            "${var} is not set (or not UTF-8); requests go without header {}",
                            header.name
                        );
                        observer.on_event(Event::Note(&notice));
                        continue;
                    }
                };
                secrets.add(&secret);
                let mut value = HeaderValue::from_str(&secret).map_err(|_| {
                    Error::usage(format!(
                        "${var} (header {}) holds characters that cannot go in an HTTP header",
                        header.name
                    ))
                })?;
                value.set_sensitive(true);
                value
            }
        };
        headers.push((name, value));
    }
    Ok(headers)
}

/// This machine's name, for the run header.
pub(super) fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_root_with_or_without_v1() {
        assert_eq!(api_root("http://h:8000"), "http://h:8000/v1");
        assert_eq!(api_root("http://h:8000/"), "http://h:8000/v1");
        assert_eq!(api_root("http://h:8000/v1/"), "http://h:8000/v1");
        assert_eq!(
            api_root("https://api.example.com/openai/v1"),
            "https://api.example.com/openai/v1"
        );
    }

    #[test]
    fn credentials_never_reach_a_report() {
        assert_eq!(redact_url("http://user:secret@h:1/v1"), "http://h:1/v1");
        assert_eq!(redact_url("http://h:1/v1"), "http://h:1/v1");
    }
}
