//! What every request of a run has in common: where it goes, how it is spoken (the dialect and
//! the body's options), its credentials and extra headers, its limits, and its `x-request-id`.
//! Shared by the transport (which adds the headers) and the exchange (which builds the body).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use reqwest::header::HeaderValue;

use crate::api::{BodyOptions, Dialect};
use crate::planner::Prompt;
use crate::records::request_id_text;

/// One of the run's keys as requests carry it, and the budgets it is paced to.
#[derive(Clone, Default)]
pub struct KeyCredentials {
    /// The environment variable it came from (none: requests go without a key).
    pub var: Option<String>,
    /// Its headers, marked sensitive.
    pub headers: Vec<(reqwest::header::HeaderName, HeaderValue)>,
    /// Its budgets per minute, if any.
    pub limits: Option<crate::plan::ClientLimits>,
}

impl std::fmt::Debug for KeyCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Its headers are deliberately left out.
        f.debug_struct("KeyCredentials")
            .field("var", &self.var)
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

/// Everything about requests that does not change from one to the next.
#[derive(Clone)]
pub struct RequestTemplate {
    /// Parsed once: every request would otherwise parse it again.
    pub url: reqwest::Url,
    /// How requests are spoken and answers read.
    pub dialect: &'static dyn Dialect,
    /// What every body asks for besides its prompt.
    pub options: BodyOptions,
    /// The run's keys, used in turn (one without headers when it has none): each key's
    /// headers as the dialect sends it (`Authorization: Bearer …`, marked sensitive so they
    /// never print) and its budgets.
    pub keys: Arc<Vec<KeyCredentials>>,
    /// The plan's extra headers (secret ones marked sensitive).
    pub headers: Arc<Vec<(reqwest::header::HeaderName, HeaderValue)>>,
    /// Per request, from the send to the end of the response.
    pub timeout: Duration,
    /// What a throttled request becomes: counted, or sent again.
    pub on_throttle: crate::plan::OnThrottle,
    /// What every `x-request-id` of the run starts with (see [`RequestTemplate::request_id`]).
    pub request_id_prefix: String,
    /// The longest SSE line (or event) a response may hold, in bytes.
    pub max_line: usize,
    /// The most bytes a response may hold.
    pub max_body: u64,
    /// Some request to this template's route has been answered (2xx): until then, a 404 or
    /// 405 means the target does not serve the route, and the run is refused.
    pub route_answered: Arc<std::sync::atomic::AtomicBool>,
}

impl std::fmt::Debug for RequestTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The auth header is deliberately left out.
        f.debug_struct("RequestTemplate")
            .field("url", &self.url)
            .field("dialect", &self.dialect)
            .field("model", &self.options.model)
            .finish_non_exhaustive()
    }
}

impl RequestTemplate {
    /// The body of a request with this prompt and output length.
    pub fn body(&self, prompt: &Prompt, max_tokens: u32) -> Bytes {
        Bytes::from(self.dialect.body(prompt, max_tokens, &self.options))
    }

    /// Adds key `key`'s credentials (the first key's when there is no such key) and the run's
    /// extra headers to `headers`.
    pub fn add_credentials(&self, key: usize, headers: &mut reqwest::header::HeaderMap) {
        for (name, value) in self.credentials(key) {
            headers.insert(name.clone(), value.clone());
        }
        for (name, value) in self.headers.iter() {
            headers.append(name.clone(), value.clone());
        }
    }

    /// Key `key`'s headers (the first key's when there is no such key).
    pub fn credentials(&self, key: usize) -> &[(reqwest::header::HeaderName, HeaderValue)] {
        self.keys
            .get(key)
            .or(self.keys.first())
            .map_or(&[], |key| key.headers.as_slice())
    }

    /// Whether any request carries a key.
    pub fn sends_a_key(&self) -> bool {
        self.keys.iter().any(|key| !key.headers.is_empty())
    }

    /// Whether answers are streamed.
    pub fn stream(&self) -> bool {
        self.options.stream
    }

    /// The server's `/models`: the endpoint's sibling under the API root, the target's query
    /// kept (every API of one server shares it).
    pub fn models_url(&self) -> reqwest::Url {
        let path = self.url.path();
        let root = path.strip_suffix(self.dialect.path()).unwrap_or(path);
        let mut models = self.url.clone();
        models.set_path(&format!("{root}/models"));
        models
    }
}

impl RequestTemplate {
    /// The `x-request-id` header of a request: unique to the run, so that the request can be
    /// found in the server's logs (vLLM and others take it as their request id) and matched with
    /// the simulator's write times.
    pub fn request_id(&self, phase: usize, seq: u64) -> HeaderValue {
        HeaderValue::from_str(&request_id_text(&self.request_id_prefix, phase, seq))
            .unwrap_or_else(|_| HeaderValue::from_static("llmload"))
    }

    /// The W3C trace a request is sent in (its `traceparent`), drawn from the same run prefix
    /// and place as its `x-request-id`.
    pub fn trace(&self, phase: usize, seq: u64) -> crate::records::TraceContext {
        crate::records::TraceContext::of(&self.request_id_prefix, phase, seq)
    }
}
