//! Where a run's requests go and who sends them: the target's URL as shown in reports, the API
//! key from the environment, and the client's host name.

use reqwest::header::HeaderValue;

use crate::error::{Error, Result};
use crate::executor::{Event, Observer};
use crate::plan::Plan;
use crate::secrets::Secrets;

/// A target's URL taken apart, so that every connection of a run treats it alike: the API root
/// (scheme, host, port, the path ending in `/v1`, or an Azure OpenAI deployment's
/// `/openai/deployments/NAME`), the query it carried (kept on every request,
/// after each endpoint's path), and the `user:password@` it carried, sent as HTTP Basic
/// authentication on every connection (requests, the connection warm-up, `/metrics`,
/// `/version`) and shown nowhere.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetUrl {
    /// The API root without credentials, its query kept.
    root: reqwest::Url,
    /// `user` and `password` from the URL, if it had them.
    basic: Option<(String, Option<String>)>,
}

/// Query parameters whose names say they carry a credential: their values are redacted
/// wherever the URL is shown, and from every text a server sends back.
fn is_secret_parameter(name: &str) -> bool {
    crate::secrets::looks_secret(name)
}

impl TargetUrl {
    /// `http://host:8000`, `http://host:8000/v1/`, `http://u:p@host/v1?api-version=1`, or
    /// Azure's `https://NAME.openai.azure.com/openai/deployments/DEPLOYMENT?api-version=…`.
    pub fn parse(text: &str) -> Result<TargetUrl> {
        let mut url = reqwest::Url::parse(text.trim())
            .map_err(|e| Error::usage(format!("{} is not a URL: {e}", redact_url(text))))?;
        if !matches!(url.scheme(), "http" | "https") || url.host().is_none() {
            return Err(Error::usage(format!(
                "{} is not an http:// or https:// URL",
                redact_url(text)
            )));
        }
        let user = percent_decoded(url.username());
        let password = url.password().map(percent_decoded);
        let basic = (!user.is_empty() || password.is_some()).then_some((user, password));
        let _ = url.set_username("");
        let _ = url.set_password(None);
        url.set_fragment(None);
        let path = url.path().trim_end_matches('/').to_string();
        if !path.ends_with("/v1") && !is_azure_deployment(&path) {
            url.set_path(&format!("{path}/v1"));
        } else {
            url.set_path(&path);
        }
        Ok(TargetUrl { root: url, basic })
    }

    /// The URL of `path` under the API root (`/chat/completions`, `/models`), with the target's
    /// query after it.
    pub fn endpoint(&self, path: &str) -> reqwest::Url {
        let mut url = self.root.clone();
        url.set_path(&format!("{}{path}", self.root.path()));
        url
    }

    /// `path` from the server's root (its scheme, host and port; no credentials, no query):
    /// where a server llmload starts is asked whether it is ready.
    pub fn origin_url(&self, path: &str) -> reqwest::Url {
        let mut url = self.root.clone();
        url.set_path(path);
        url.set_query(None);
        url
    }

    /// The root as reports and logs show it: no credentials, secret query values redacted.
    pub fn shown(&self) -> String {
        shown_url(&self.root)
    }

    /// The values to keep out of everything: the password, and secret query values.
    pub fn secrets(&self) -> Vec<String> {
        let mut values: Vec<String> = self
            .root
            .query_pairs()
            .filter(|(name, _)| is_secret_parameter(name))
            .map(|(_, value)| value.into_owned())
            .collect();
        if let Some((_, Some(password))) = &self.basic {
            values.push(password.clone());
        }
        values
    }

    /// The `Authorization: Basic …` header the URL's credentials make, marked sensitive.
    pub fn basic_auth(&self) -> Option<(reqwest::header::HeaderName, HeaderValue)> {
        use base64::Engine;
        let (user, password) = self.basic.as_ref()?;
        let pair = format!("{user}:{}", password.as_deref().unwrap_or(""));
        let encoded = base64::engine::general_purpose::STANDARD.encode(pair);
        let mut value = HeaderValue::from_str(&format!("Basic {encoded}")).ok()?;
        value.set_sensitive(true);
        Some((reqwest::header::AUTHORIZATION, value))
    }
}

/// Whether `path` is an Azure OpenAI deployment's root (`…/openai/deployments/NAME`), under
/// which the endpoints' paths go as they are (`/chat/completions`), with no `/v1`.
fn is_azure_deployment(path: &str) -> bool {
    let Some((before, name)) = path.rsplit_once('/') else {
        return false;
    };
    !name.is_empty() && before.ends_with("/openai/deployments")
}

fn percent_decoded(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match (
            bytes[i],
            bytes.get(i + 1).and_then(|&b| hex(b)),
            bytes.get(i + 2).and_then(|&b| hex(b)),
        ) {
            (b'%', Some(high), Some(low)) => {
                out.push((high * 16 + low) as u8);
                i += 3;
            }
            (b, ..) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A URL as reports and logs show it: no `user:password@`, secret query values redacted.
fn shown_url(url: &reqwest::Url) -> String {
    let mut url = url.clone();
    let _ = url.set_username("");
    let _ = url.set_password(None);
    if url.query().is_some() {
        let pairs: Vec<(String, String)> = url
            .query_pairs()
            .map(|(name, value)| {
                let value = if is_secret_parameter(&name) {
                    crate::secrets::REDACTED.to_string()
                } else {
                    value.into_owned()
                };
                (name.into_owned(), value)
            })
            .collect();
        url.query_pairs_mut().clear().extend_pairs(pairs);
    }
    url.to_string()
}

/// Any URL as reports and logs show it: no `user:password@`, secret query values redacted;
/// text that is no URL loses whatever stands before an `@` in its authority.
pub fn redact_url(text: &str) -> String {
    if let Ok(url) = reqwest::Url::parse(text) {
        return shown_url(&url);
    }
    let Some(scheme_end) = text.find("://") else {
        return text.to_string();
    };
    let rest = &text[scheme_end + 3..];
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let cut = match rest[..authority_end].rfind('@') {
        Some(at) => format!("{}{}", &text[..scheme_end + 3], &rest[at + 1..]),
        None => text.to_string(),
    };
    // No URL, so its query cannot be read: whatever follows `?` goes.
    match cut.find('?') {
        Some(query) => format!("{}?{}", &cut[..query], crate::secrets::REDACTED),
        None => cut,
    }
}

/// The run's keys, from the variables the plan names (added to `secrets`), each with its
/// budgets; one entry without a key when the plan names none. A single key whose variable is
/// unset or empty leaves requests without a key (with a notice); one of several is a mistake,
/// since a share of the requests would go unauthenticated.
pub(super) fn api_keys(
    plan: &Plan,
    observer: &dyn Observer,
    secrets: &mut Secrets,
) -> Result<Vec<RunKey>> {
    let budgets = plan.target.key_budgets();
    let several = budgets.len() > 1;
    let mut keys = Vec::with_capacity(budgets.len());
    for (var, limits) in budgets {
        let key = match var {
            Some(var) => api_key(var, several, observer, secrets)?,
            None => None,
        };
        keys.push(RunKey { key, limits });
    }
    Ok(keys)
}

/// One key of the run (none: requests go without one) and the budgets it is paced to.
#[derive(Debug)]
pub(super) struct RunKey {
    pub key: Option<ApiKey>,
    pub limits: Option<crate::plan::ClientLimits>,
}

/// The key in `var`, added to `secrets`.
fn api_key(
    var: &str,
    several: bool,
    observer: &dyn Observer,
    secrets: &mut Secrets,
) -> Result<Option<ApiKey>> {
    let key = match std::env::var(var) {
        Ok(key) if !key.is_empty() => key,
        Ok(_) | Err(std::env::VarError::NotPresent) if several => {
            return Err(Error::usage(format!(
                "${var} (one of the plan's API keys) is not set: set it, or leave its api-key out"
            )))
        }
        Ok(_) | Err(std::env::VarError::NotPresent) => {
            let notice = format!("${var} is not set; requests go without an API key");
            observer.on_event(Event::Note(&notice));
            return Ok(None);
        }
        Err(std::env::VarError::NotUnicode(_)) => {
            return Err(Error::usage(format!(
                "${var} (the plan's api-key) is not valid UTF-8, so it cannot go in an HTTP header"
            )))
        }
    };
    secrets.add(&key);
    Ok(Some(ApiKey {
        var: var.to_string(),
        key,
    }))
}

/// The run's API key and the variable it came from. Its `Debug` shows the variable only.
pub(super) struct ApiKey {
    var: String,
    key: String,
}

impl ApiKey {
    /// The variable it came from.
    pub(super) fn var(&self) -> &str {
        &self.var
    }
}

impl std::fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(f, "ApiKey(${})", self.var)
    }
}

/// The headers that carry `key` as `dialect` sends it (`Authorization: Bearer $KEY` for
/// OpenAI's, `x-api-key` for Anthropic's), marked sensitive so that they never print.
pub(super) fn credentials(
    dialect: &dyn crate::api::Dialect,
    key: Option<&ApiKey>,
) -> Result<Vec<(reqwest::header::HeaderName, HeaderValue)>> {
    let Some(ApiKey { var, key }) = key else {
        return Ok(Vec::new());
    };
    dialect
        .credentials(key)
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
    fn the_api_root_with_or_without_v1_keeps_its_query_after_every_path() {
        let root = |text: &str| TargetUrl::parse(text).unwrap();
        assert_eq!(root("http://h:8000").shown(), "http://h:8000/v1");
        // Azure OpenAI: the deployment is the root, its api-version on every request.
        let azure =
            root("https://r.openai.azure.com/openai/deployments/gpt-4o/?api-version=2024-10-21");
        assert_eq!(
            azure.endpoint("/chat/completions").as_str(),
            "https://r.openai.azure.com/openai/deployments/gpt-4o/chat/completions?api-version=2024-10-21"
        );
        // Its v1 API is a /v1 root like any other; a deployments list is no deployment.
        assert_eq!(
            root("https://r.openai.azure.com/openai/v1").shown(),
            "https://r.openai.azure.com/openai/v1"
        );
        assert_eq!(
            root("http://h:1/openai/deployments").shown(),
            "http://h:1/openai/deployments/v1"
        );
        assert_eq!(root("http://h:8000/").shown(), "http://h:8000/v1");
        assert_eq!(root("http://h:8000/v1/").shown(), "http://h:8000/v1");
        assert_eq!(
            root("https://api.example.com/openai/v1").shown(),
            "https://api.example.com/openai/v1"
        );
        let target = root("http://h:1/v1?api-version=2024&api_key=SECRET-VALUE-1");
        assert_eq!(
            target.endpoint("/chat/completions").as_str(),
            "http://h:1/v1/chat/completions?api-version=2024&api_key=SECRET-VALUE-1"
        );
        assert_eq!(
            target.shown(),
            "http://h:1/v1?api-version=2024&api_key=%5Bredacted%5D"
        );
        assert_eq!(target.secrets(), ["SECRET-VALUE-1"]);
        assert!(TargetUrl::parse("ftp://h/x").is_err());
    }

    #[test]
    fn credentials_never_reach_a_report_and_go_as_basic_auth() {
        assert_eq!(redact_url("http://user:secret@h:1/v1"), "http://h:1/v1");
        assert_eq!(redact_url("http://h:1/v1"), "http://h:1/v1");
        assert_eq!(
            redact_url("http://h:1/v1?token=abc&x=1"),
            "http://h:1/v1?token=%5Bredacted%5D&x=1"
        );
        let target = TargetUrl::parse("http://al%40ce:p%3Ass@h:1").unwrap();
        assert_eq!(target.shown(), "http://h:1/v1");
        assert_eq!(target.secrets(), ["p:ss"]);
        let (name, value) = target.basic_auth().unwrap();
        assert_eq!(name, reqwest::header::AUTHORIZATION);
        // base64("al@ce:p:ss")
        assert_eq!(value.to_str().unwrap(), "Basic YWxAY2U6cDpzcw==");
        assert!(value.is_sensitive());
    }
}
