//! `target`: where requests go and how they are spoken (the endpoint, the API, credentials,
//! streaming, limits, extra body fields and headers, the server's telemetry).

use std::time::Duration;

use super::Api;

/// How long a target may refuse every request before the run ends as not carried out.
pub const DEFAULT_UNREACHABLE_AFTER: Duration = Duration::from_secs(5);

/// `on-throttle`: what becomes of a request the server throttles (HTTP 429 or 529, a rate-limit
/// or overloaded error object).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnThrottle {
    /// It is recorded as throttled, as it came (`"count"`, the default): the run measures how
    /// much the server turned away.
    #[default]
    Count,
    /// It is sent again, as an SDK does, after the wait the server asked for (`retry-after-ms`,
    /// `Retry-After`; else 0.5 s, doubling): the run measures what an application that retries
    /// sees. Each throttled attempt is kept in the record.
    Retry {
        /// Attempts in all, the first included (2 to 20).
        attempts: u32,
        /// The longest wait taken: a server asking for more is not retried.
        max_wait: Duration,
    },
    /// The client slows to the limits the server's answers say (`x-ratelimit-limit-*`, per
    /// minute, each key's own), where the plan sets none (`limits`), and holds a key a
    /// throttled answer asks to wait for (`retry-after`) as long as it asks (`"pace"`): the
    /// run measures the server at its limits, found as it goes. What is throttled still is
    /// counted.
    Pace,
}

/// `limits rpm=500 tpm=200000`: the budgets per minute of the key a run sends with (a hosted
/// API's limits, or a gateway's). The client holds each request until they allow it, spending
/// them evenly: the run measures the server at the limit, and says how long requests were held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientLimits {
    /// Requests per minute.
    pub rpm: Option<u64>,
    /// Tokens per minute: a request spends its prompt and its answer as planned.
    pub tpm: Option<u64>,
}

/// `api-key env="VAR" rpm=… tpm=…`: one API key, by the variable that holds it, and its own
/// budgets when they are not the target's `limits` (a key of another tier, say).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiKeySource {
    /// The environment variable holding the key (read at run time, never written anywhere).
    pub env: String,
    /// This key's budgets, where the node sets them.
    pub limits: Option<ClientLimits>,
}

/// The most API keys a target may use in turn.
pub const MAX_API_KEYS: usize = 64;

/// Where requests go and how they are spoken.
#[derive(Debug, Clone)]
pub struct Target {
    /// The server, or the embedded simulator.
    pub endpoint: Endpoint,
    /// The API dialect requests speak.
    pub api: Api,
    /// The `model` field of every request.
    pub model: String,
    /// The API keys requests are sent with (`api-key env="VAR"`, once per key), in turn: each
    /// named by the environment variable that holds it. The keys themselves never enter the plan.
    pub api_keys: Vec<ApiKeySource>,
    /// Stream responses (SSE); without it only E2E latency can be measured.
    pub stream: bool,
    /// Per request, from the send to the end of the response.
    pub timeout: Duration,
    /// `unreachable-after "5s"`: when every request for this long met a refused or reset
    /// connection (or no answer at all) and nothing was heard from the target, the run ends as
    /// not carried out; `None` (`#false`) waits out the schedule (a fail-over test).
    pub unreachable_after: Option<Duration>,
    /// What a throttled request (HTTP 429 or 529) becomes: counted as it is, or sent again.
    pub on_throttle: OnThrottle,
    /// The provider's limits the client paces its requests to, if any.
    pub limits: Option<ClientLimits>,
    /// Ask the server for usage on every streamed chunk (vLLM's `continuous_usage_stats`), which
    /// gives exact tokens per chunk.
    pub continuous_usage: bool,
    /// The longest line (one SSE event) a response may hold, in bytes.
    pub max_line: u64,
    /// The most bytes a response may hold.
    pub max_body: u64,
    /// Where the server's Prometheus metrics are scraped from during the run.
    pub metrics: MetricsSource,
    /// How often they are scraped.
    pub metrics_interval: Duration,
    /// GPU readings from commands beside the metrics URLs (`gpus`), read at the same interval.
    pub gpus: Vec<GpuSource>,
    /// Fields merged into every request's body: sampling parameters and server-specific knobs.
    pub body: serde_json::Map<String, serde_json::Value>,
    /// Extra HTTP headers on every request.
    pub headers: Vec<Header>,
    /// Open the connections each group of phases needs before its clock starts (`connections
    /// "warm"`, the default), or let requests open them and measure that (`"cold"`).
    pub warm_connections: bool,
    /// The `tools` file the body's tools came from (as written), and its SHA-256.
    pub tools_file: Option<(String, String)>,
    /// What every answer must be (`response-format`), checked answer by answer.
    pub response_format: Option<ResponseFormat>,
    /// Certificate authorities an `https://` target is also trusted under (`ca-file`): the file
    /// as written and its PEM text (empty when the plan was read without its files).
    pub ca_file: Option<(String, std::sync::Arc<String>)>,
    /// The certificate the client shows a server that asks for one (`client-cert`).
    pub client_cert: Option<ClientCertificate>,
    /// Whether the server's certificate is checked (`tls-verify #false`: not, for test rigs;
    /// every output says so).
    pub tls_verify: bool,
    /// The HTTP version requests are spoken in (`http`).
    pub http: HttpVersion,
}

impl Target {
    /// Each key's budgets: its own, else the target's `limits` (which are per key). One entry
    /// without a variable when the plan names no key (the keyless client's budgets, if any).
    pub fn key_budgets(&self) -> Vec<(Option<&str>, Option<ClientLimits>)> {
        if self.api_keys.is_empty() {
            return vec![(None, self.limits)];
        }
        self.api_keys
            .iter()
            .map(|key| (Some(key.env.as_str()), key.limits.or(self.limits)))
            .collect()
    }
}

/// `http "1.1"` (the default: a connection per request in flight), `http "2" streams=100`
/// (requests multiplexed on as few connections as hold them, `streams` each), or `http "auto"`
/// (HTTP/2 where the server agrees to it in the TLS handshake, else HTTP/1.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HttpVersion {
    /// HTTP/1.1.
    #[default]
    Http1,
    /// HTTP/2, with at most `streams` requests in flight on a connection.
    Http2 {
        /// Streams per connection before another is opened.
        streams: u32,
    },
    /// HTTP/2 over `https://` when the server's ALPN answer is `h2`, else HTTP/1.1 (and
    /// always over `http://`, where nothing is agreed).
    Auto {
        /// Streams per HTTP/2 connection before another is opened.
        streams: u32,
    },
}

impl HttpVersion {
    /// As a report says it, when not the default HTTP/1.1.
    pub fn described(self) -> Option<String> {
        match self {
            HttpVersion::Http1 => None,
            HttpVersion::Http2 { streams } => {
                Some(format!("2, up to {streams} streams a connection"))
            }
            HttpVersion::Auto { streams } => Some(format!(
                "2 where the server agrees to it over TLS, else 1.1 (auto; up to {streams} streams a connection)"
            )),
        }
    }
}

/// The streams an HTTP/2 connection carries before another opens: what servers commonly allow
/// at once (nginx, Envoy and Go's HTTP/2 servers default to 100 to 250).
pub const DEFAULT_HTTP2_STREAMS: u32 = 100;

/// `client-cert "client.pem" key="client-key.pem"`: a certificate chain and its private key,
/// read when the plan is read (empty texts when it was read without its files).
#[derive(Clone)]
pub struct ClientCertificate {
    /// The certificate file as written, and its PEM text.
    pub cert: (String, std::sync::Arc<String>),
    /// The key file as written, and its PEM text: never shown, not even in debug output.
    pub key: (String, std::sync::Arc<String>),
}

impl std::fmt::Debug for ClientCertificate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientCertificate")
            .field("cert", &self.cert.0)
            .field("key", &self.key.0)
            .finish()
    }
}

/// `response-format "json-object"`, or `"json-schema" schema="schema.json"`.
#[derive(Debug, Clone, PartialEq)]
pub enum ResponseFormat {
    /// Any JSON object.
    JsonObject,
    /// JSON valid under a schema.
    JsonSchema {
        /// The schema file as written.
        shown: String,
        /// Its SHA-256 (empty for a kept plan, which is judged without it).
        sha256: String,
        /// The schema (`null` for a kept plan).
        schema: std::sync::Arc<serde_json::Value>,
    },
}

/// An extra HTTP header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    /// Its name.
    pub name: String,
    /// Its value.
    pub value: HeaderValue,
}

/// Where a header's value comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeaderValue {
    /// Written in the plan: shown in reports.
    Text(String),
    /// A secret, read from this environment variable at run time and never written anywhere.
    Secret(String),
}

/// The longest SSE line (or event) a response may hold unless the plan says otherwise.
pub const DEFAULT_MAX_LINE: u64 = 1 << 20;
/// The most bytes a response may hold unless the plan says otherwise.
pub const DEFAULT_MAX_BODY: u64 = 256 << 20;

#[derive(Debug, Clone, PartialEq, Eq)]
/// Where a run's requests go.
pub enum Endpoint {
    /// An OpenAI-compatible server at this base URL.
    Url(String),
    /// The embedded simulator, started in-process on a loopback port.
    Simulator,
}

impl Endpoint {
    /// `"sim"`, or an http:// or https:// base URL; `None` for anything else.
    pub fn parse(text: &str) -> Option<Endpoint> {
        if text == "sim" {
            Some(Endpoint::Simulator)
        } else if text.starts_with("http://") || text.starts_with("https://") {
            Some(Endpoint::Url(text.to_string()))
        } else {
            None
        }
    }
}

/// A command GPU readings are read from as it prints them (`gpus`).
#[derive(Debug, Clone, PartialEq)]
pub enum GpuSource {
    /// `gpus "nvidia-smi"`: nvidia-smi on this machine, looping at the scrape interval.
    NvidiaSmi,
    /// `gpus command="…"`: a command of the user's (run by `sh -c`) printing nvidia-smi's CSV,
    /// header first.
    Command(String),
}

/// Where the target's server telemetry comes from.
#[derive(Debug, Clone, PartialEq)]
pub enum MetricsSource {
    /// The target's own `/metrics` (its base URL's, `/v1` left out), if it answers.
    Auto,
    /// These URLs: one server's, or each replica's behind a load balancer (scraped apart,
    /// reported apart and summed).
    Urls(Vec<String>),
    /// Read from a Prometheus server that scrapes the replicas (`metrics prometheus="URL"`):
    /// after the run, with PromQL range queries over its window, the replicas' series summed.
    Prometheus(PrometheusSource),
    /// Not scraped.
    Off,
}

/// `metrics prometheus="http://prom:9090" match="{job=\"vllm\"}" lag="15s"`: where the run's
/// server telemetry is read from when a Prometheus already scrapes every replica.
#[derive(Debug, Clone, PartialEq)]
pub struct PrometheusSource {
    /// The Prometheus server's base URL (its HTTP API is under `/api/v1/`).
    pub url: String,
    /// Label matchers every series must meet, PromQL's `{job="vllm"}` written without its
    /// braces' surroundings; none reads every replica Prometheus knows.
    pub matchers: Option<String>,
    /// How long after the run to wait before reading: Prometheus holds the run's last seconds
    /// only after its next scrape of each replica.
    pub lag: Duration,
}
