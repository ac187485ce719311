//! `target`: where requests go and how they are spoken.

use std::time::Duration;

use kdl::KdlNode;

use super::cx::{children, positional, property, Cx, Handler};
use super::values::{ByteSize, Count, Flag, Kind, Text, DURATION, DURATION_OR_ZERO};
use crate::api::Need;
use crate::plan::{
    Api, Endpoint, Header, HeaderValue, MetricsSource, ResponseFormat, Target, DEFAULT_MAX_BODY,
    DEFAULT_MAX_LINE, DEFAULT_UNREACHABLE_AFTER,
};

struct Fields {
    api: Api,
    model: Option<String>,
    api_keys: Vec<crate::plan::ApiKeySource>,
    stream: bool,
    timeout: Duration,
    unreachable_after: Option<Duration>,
    on_throttle: crate::plan::OnThrottle,
    limits: Option<crate::plan::ClientLimits>,
    continuous_usage: bool,
    max_line: u64,
    max_body: u64,
    metrics: MetricsSource,
    metrics_interval: Duration,
    gpus: Vec<crate::plan::GpuSource>,
    body: serde_json::Map<String, serde_json::Value>,
    headers: Vec<Header>,
    warm_connections: bool,
    tools_file: Option<(String, String)>,
    response_format: Option<ResponseFormat>,
    ca_file: Option<(String, std::sync::Arc<String>)>,
    client_cert: Option<crate::plan::ClientCertificate>,
    tls_verify: bool,
    http: crate::plan::HttpVersion,
}

/// A node's `rpm=` and `tpm=`, requests and tokens per minute, at least one of them: a key's
/// budgets (`target { limits }`) or a hosted API's (`sim { rate-limit }`).
pub(super) fn budgets_per_minute(
    cx: &mut Cx,
    node: &KdlNode,
    usage: &str,
) -> (Option<u64>, Option<u64>) {
    let per_minute = || Count::positive(1 << 40);
    let rpm = cx.prop(node, "rpm", usage, per_minute()).ok().flatten();
    let tpm = cx.prop(node, "tpm", usage, per_minute()).ok().flatten();
    if property(node, "rpm").is_none() && property(node, "tpm").is_none() {
        cx.error(
            node.name().span(),
            format!("`{}` sets no limit", node.name().value()),
            "no limit",
            usage,
        );
    }
    (rpm, tpm)
}

/// The most metrics URLs a target may name (replicas scraped beside the run, each a
/// connection and a line of the report).
const MAX_METRICS_URLS: usize = 64;

/// Headers llmload (or HTTP) sets itself, whatever the API (its dialect's credential headers
/// are reserved too).
const OWN_HEADERS: &[&str] = &[
    "content-type",
    "content-length",
    "host",
    "x-request-id",
    "traceparent",
    "transfer-encoding",
    "connection",
    "accept",
];

const CHILDREN: &[(&str, Handler<Fields>)] = &[
    ("api", |cx, node, t| {
        let names: Vec<String> = Api::ALL
            .iter()
            .map(|a| format!("\"{}\"", a.as_str()))
            .collect();
        let usage = format!("api {} (or {})", names[0], names[1..].join(", "));
        let Some(name) = cx.single(node, &usage, Text) else {
            return;
        };
        match Api::from_name(&name) {
            Some(api) => t.api = api,
            None => {
                let choices: Vec<String> = Api::ALL
                    .iter()
                    .map(|a| format!("\"{}\" for {}", a.as_str(), a.dialect().summary()))
                    .collect();
                cx.error(
                    positional(node).next().map_or(node.span(), |e| e.span()),
                    format!("unknown api \"{name}\""),
                    "unknown api",
                    format!("use {}", choices.join(", or ")),
                )
            }
        }
    }),
    ("model", |cx, node, t| {
        t.model = cx.single(node, "model \"meta-llama/Llama-3.1-8B-Instruct\"", Text);
    }),
    ("api-key", api_key),
    ("ca-file", ca_file),
    ("client-cert", client_cert),
    ("http", http_version),
    ("tls-verify", |cx, node, t| {
        let usage =
            "tls-verify #false (a test rig's certificate goes unchecked; said in every output)";
        if let Some(verify) = cx.single(node, usage, Flag) {
            t.tls_verify = verify;
        }
    }),
    ("stream", |cx, node, t| {
        if let Some(b) = cx.single(node, "stream #true", Flag) {
            t.stream = b;
            refuse_beyond(cx, node, t.api, b.then_some(Need::Streaming));
        }
    }),
    ("timeout", |cx, node, t| {
        if let Some(d) = cx.single(node, "timeout \"60s\"", DURATION) {
            t.timeout = d;
        }
    }),
    ("unreachable-after", |cx, node, t| {
        let usage = "unreachable-after \"5s\" (or #false to wait out the schedule)";
        cx.no_children(node);
        let Some(entry) = cx.required_arg(node, usage) else {
            return;
        };
        match entry.value() {
            kdl::KdlValue::Bool(false) => t.unreachable_after = None,
            _ => {
                if let Some(d) = DURATION.read(cx, entry, usage) {
                    t.unreachable_after = Some(d);
                }
            }
        }
    }),
    ("on-throttle", |cx, node, t| {
        use crate::plan::OnThrottle;
        let usage = "on-throttle \"retry\" attempts=3 max-wait=\"30s\" (or \"pace\", or \"count\", the default)";
        cx.no_children(node);
        cx.check_entries(node, 1, &["attempts", "max-wait"], usage);
        let Some(entry) = cx.required_arg(node, usage) else {
            return;
        };
        let Some(choice) = Text.read(cx, entry, usage) else {
            return;
        };
        let attempts = cx.prop_or(node, "attempts", 3, usage, Count { min: 2, max: 20 });
        let max_wait = cx.prop_or(node, "max-wait", Duration::from_secs(30), usage, DURATION);
        match choice.as_str() {
            "count" | "pace" => {
                for name in ["attempts", "max-wait"] {
                    if let Some(extra) = property(node, name) {
                        cx.error(
                            extra.span(),
                            format!("`{name}` is for retries; \"{choice}\" sends nothing again"),
                            "not for retries",
                            "write on-throttle \"retry\" to retry, or leave it out",
                        );
                    }
                }
                t.on_throttle = if choice == "pace" {
                    OnThrottle::Pace
                } else {
                    OnThrottle::Count
                };
            }
            "retry" => {
                if let (Some(attempts), Some(max_wait)) = (attempts, max_wait) {
                    t.on_throttle = OnThrottle::Retry {
                        attempts: attempts as u32,
                        max_wait,
                    };
                }
            }
            other => cx.error(
                entry.span(),
                format!("unknown on-throttle \"{other}\""),
                "not count, retry or pace",
                format!(
                    "{}\"count\" records a throttled request as it came; \"retry\" sends it again after the wait the server asks; \"pace\" slows to the limits the server's headers say",
                    crate::plan::suggest::did_you_mean(other, ["count", "retry", "pace"])
                ),
            ),
        }
    }),
    ("limits", |cx, node, t| {
        let usage =
            "limits rpm=500 tpm=200000 (the key's budgets per minute; the client paces to them)";
        cx.no_children(node);
        cx.check_entries(node, 0, &["rpm", "tpm"], usage);
        let (rpm, tpm) = budgets_per_minute(cx, node, usage);
        t.limits = Some(crate::plan::ClientLimits { rpm, tpm });
    }),
    ("continuous-usage", |cx, node, t| {
        if let Some(b) = cx.single(node, "continuous-usage #true", Flag) {
            t.continuous_usage = b;
            refuse_beyond(cx, node, t.api, b.then_some(Need::UsageInStream));
        }
    }),
    ("max-line", |cx, node, t| {
        let size = ByteSize {
            min: 1024,
            max: 1 << 30,
        };
        if let Some(n) = cx.single(node, "max-line \"1MiB\"", size) {
            t.max_line = n;
        }
    }),
    ("max-body", |cx, node, t| {
        let size = ByteSize {
            min: 1024,
            max: 16 << 30,
        };
        if let Some(n) = cx.single(node, "max-body \"256MiB\"", size) {
            t.max_body = n;
        }
    }),
    ("metrics", metrics),
    ("gpus", gpus),
    ("sampling", sampling),
    ("body", body),
    ("header", header),
    ("tools", tools),
    ("reasoning-effort", |cx, node, t| {
        let usage = "reasoning-effort \"low\" (or \"minimal\", \"medium\", \"high\")";
        let Some(effort) = cx.single(node, usage, Text) else {
            return;
        };
        let span = positional(node).next().map_or(node.span(), |e| e.span());
        if !["minimal", "low", "medium", "high"].contains(&effort.as_str()) {
            cx.error(
                span,
                format!("unknown reasoning effort \"{effort}\""),
                "unknown effort",
                usage,
            );
            return;
        }
        add_field(cx, span, t, "reasoning_effort".into(), effort.into());
    }),
    ("thinking", |cx, node, t| {
        let usage = "thinking #false (Qwen3's enable_thinking, through chat_template_kwargs)";
        let Some(on) = cx.single(node, usage, Flag) else {
            return;
        };
        let span = positional(node).next().map_or(node.span(), |e| e.span());
        let kwargs = t
            .body
            .entry("chat_template_kwargs")
            .or_insert_with(|| serde_json::json!({}));
        match kwargs.as_object_mut() {
            Some(kwargs) => {
                kwargs.insert("enable_thinking".into(), on.into());
            }
            None => cx.error(
                span,
                "the body's chat_template_kwargs is not an object",
                "not an object",
                "write chat_template_kwargs as an object in `body`, or leave it to `thinking`",
            ),
        }
    }),
    ("tool-choice", tool_choice),
    ("response-format", response_format),
    ("connections", |cx, node, t| {
        let usage = "connections \"warm\" (opened before each phase's clock) or \"cold\" (opened by the requests, and measured)";
        match cx.single(node, usage, Text).as_deref() {
            Some("warm") => t.warm_connections = true,
            Some("cold") => t.warm_connections = false,
            Some(other) => cx.error(
                positional(node).next().map_or(node.span(), |e| e.span()),
                format!("unknown connections \"{other}\""),
                "warm or cold",
                usage,
            ),
            None => {}
        }
    }),
];

/// A diagnostic on `node` when the plan's API cannot do what it asks.
fn refuse_beyond(cx: &mut Cx, node: &KdlNode, api: Api, need: Option<Need>) {
    let Some(why) = need.and_then(|need| api.dialect().capabilities().lacks(need)) else {
        return;
    };
    cx.error(
        node.span(),
        format!("api \"{}\" {why}", api.as_str()),
        "not with this api",
        format!("remove `{}` or choose another api", node.name().value()),
    );
}

/// Adds `key` to the body unless llmload writes it itself.
fn add_field(
    cx: &mut Cx,
    span: miette::SourceSpan,
    t: &mut Fields,
    key: String,
    value: serde_json::Value,
) {
    if let Some(why) = t.api.dialect().reserved(&key) {
        cx.error(
            span,
            format!("llmload sets `{key}` in every body itself"),
            "set by llmload",
            why.to_string(),
        );
        return;
    }
    t.body.insert(key, value);
}

/// `sampling temperature=0.7 top-p=0.95 seed=1 stop="\n\n"`: sampling parameters, each property
/// a body field (dashes become underscores).
fn sampling(cx: &mut Cx, node: &KdlNode, t: &mut Fields) {
    cx.no_children(node);
    for entry in node.entries() {
        let Some(key) = entry.name() else {
            cx.error(
                entry.span(),
                "`sampling` takes properties only",
                "argument",
                "write it as: sampling temperature=0.7 top-p=0.95 seed=1",
            );
            continue;
        };
        let value = match entry.value() {
            kdl::KdlValue::Integer(n) => serde_json::Value::from(*n as i64),
            kdl::KdlValue::Float(f) => match serde_json::Number::from_f64(*f) {
                Some(n) => serde_json::Value::Number(n),
                None => {
                    cx.error(
                        entry.span(),
                        "not a finite number",
                        "not finite",
                        "write a number",
                    );
                    continue;
                }
            },
            kdl::KdlValue::Bool(b) => serde_json::Value::Bool(*b),
            kdl::KdlValue::String(text) => serde_json::Value::String(text.clone()),
            kdl::KdlValue::Null => serde_json::Value::Null,
        };
        add_field(cx, entry.span(), t, key.value().replace('-', "_"), value);
    }
}

/// `body r#"{"chat_template_kwargs": {"enable_thinking": false}}"#`: a JSON object merged into
/// every body.
fn body(cx: &mut Cx, node: &KdlNode, t: &mut Fields) {
    let usage = "body #\"{\"chat_template_kwargs\": {\"enable_thinking\": false}}\"#";
    let Some(text) = cx.single(node, usage, Text) else {
        return;
    };
    let span = positional(node).next().map_or(node.span(), |e| e.span());
    match serde_json::from_str::<serde_json::Value>(&text) {
        Ok(serde_json::Value::Object(fields)) => {
            for (key, value) in fields {
                add_field(cx, span, t, key, value);
            }
        }
        Ok(_) => cx.error(
            span,
            "`body` must be a JSON object",
            "not an object",
            format!("write it as: {usage}"),
        ),
        Err(e) => cx.error(
            span,
            format!("`body` is not JSON: {e}"),
            "not JSON",
            format!("write it as: {usage}"),
        ),
    }
}

/// `tools "tools.json"`: the tools every request offers (a JSON list in OpenAI's function
/// schema, `[{"type": "function", "function": {"name": ...}}]`), read and checked now.
/// `ca-file "ca.pem"`: certificate authorities an `https://` target is trusted under besides
/// the public ones (an internal endpoint signed by a company CA). Read and checked here, so a
/// wrong file is a plan mistake; the file is not kept with the run.
fn ca_file(cx: &mut Cx, node: &KdlNode, t: &mut Fields) {
    let usage = "ca-file \"company-ca.pem\" (PEM certificates)";
    let Some(name) = cx.single(node, usage, Text) else {
        return;
    };
    if !cx.check_files {
        t.ca_file = Some((name, Default::default()));
        return;
    }
    let span = positional(node).next().map_or(node.span(), |e| e.span());
    let Some((path, text, _)) = super::datafile::read(cx, span, &name, "CA certificate") else {
        return;
    };
    match crate::tls::certificates(text.as_bytes()) {
        Ok(_) => t.ca_file = Some((name, text)),
        Err(why) => cx.error(
            span,
            format!("{} holds no CA certificate llmload can use: {why}", path.display()),
            "not PEM certificates",
            "give a PEM file of one or more `-----BEGIN CERTIFICATE-----` blocks (the CA that signed the server's certificate)",
        ),
    }
}

/// `http "1.1"` or `http "2" streams=100`: the HTTP version requests are spoken in.
fn http_version(cx: &mut Cx, node: &KdlNode, t: &mut Fields) {
    use crate::plan::{HttpVersion, DEFAULT_HTTP2_STREAMS};
    let usage = "http \"1.1\" (the default), http \"2\" streams=100, or http \"auto\"";
    cx.no_children(node);
    cx.check_entries(node, 1, &["streams"], usage);
    let Some(version) = cx.arg(node, usage, Text) else {
        return;
    };
    let streams = cx.prop(node, "streams", usage, Count::positive(10_000));
    match (version.as_str(), streams) {
        ("1.1", Ok(None)) => t.http = HttpVersion::Http1,
        ("2", Ok(streams)) => {
            t.http = HttpVersion::Http2 {
                streams: streams.map_or(DEFAULT_HTTP2_STREAMS, |s| s as u32),
            }
        }
        ("auto", Ok(streams)) => {
            t.http = HttpVersion::Auto {
                streams: streams.map_or(DEFAULT_HTTP2_STREAMS, |s| s as u32),
            }
        }
        ("1.1", Ok(Some(_))) => cx.error(
            property(node, "streams").map_or(node.span(), |e| e.span()),
            "`streams` is for HTTP/2: HTTP/1.1 carries one request per connection",
            "not for 1.1",
            "drop it, or write http \"2\" streams=100",
        ),
        (_, Err(())) => {}
        (other, Ok(_)) => cx.error(
            positional(node).next().map_or(node.span(), |e| e.span()),
            format!("unknown HTTP version \"{other}\""),
            "unknown version",
            format!("write it as: {usage}"),
        ),
    }
}

/// `client-cert "client.pem" key="client-key.pem"`: the certificate chain a server asking for
/// one (mutual TLS) is shown, and its private key. Both read and checked here, so a wrong file
/// or a key that is not the certificate's is a plan mistake; neither text is ever shown.
fn client_cert(cx: &mut Cx, node: &KdlNode, t: &mut Fields) {
    let usage = "client-cert \"client.pem\" key=\"client-key.pem\" (PEM files)";
    cx.no_children(node);
    cx.check_entries(node, 1, &["key"], usage);
    let Some(cert) = cx.arg(node, usage, Text) else {
        return;
    };
    let Ok(Some(key)) = cx.prop(node, "key", usage, Text) else {
        if property(node, "key").is_none() {
            cx.error(
                node.name().span(),
                "`client-cert` needs the certificate's private key",
                "key missing",
                format!("write it as: {usage}"),
            );
        }
        return;
    };
    if !cx.check_files {
        t.client_cert = Some(crate::plan::ClientCertificate {
            cert: (cert, Default::default()),
            key: (key, Default::default()),
        });
        return;
    }
    let cert_span = positional(node).next().map_or(node.span(), |e| e.span());
    let key_span = property(node, "key").map_or(node.span(), |e| e.span());
    let cert_text = super::datafile::read(cx, cert_span, &cert, "client certificate");
    let key_text = super::datafile::read(cx, key_span, &key, "client key");
    let (Some((cert_path, cert_text, _)), Some((_, key_text, _))) = (cert_text, key_text) else {
        return;
    };
    use crate::tls::IdentityError;
    match crate::tls::client_identity(cert_text.as_bytes(), key_text.as_bytes()) {
        Ok(_) => {
            t.client_cert = Some(crate::plan::ClientCertificate {
                cert: (cert, cert_text),
                key: (key, key_text),
            })
        }
        Err(IdentityError::Certificate(why)) => cx.error(
            cert_span,
            format!("{} holds no certificate llmload can use: {why}", cert_path.display()),
            "not PEM certificates",
            "give the client's certificate (and its intermediates) as `-----BEGIN CERTIFICATE-----` blocks",
        ),
        Err(IdentityError::Key(why)) => cx.error(
            key_span,
            format!("`{key}` cannot be the client certificate's key: {why}"),
            "not the certificate's key",
            "give the PEM private key (PKCS#8 `BEGIN PRIVATE KEY`, or an RSA or EC key) made with the certificate",
        ),
    }
}

fn tools(cx: &mut Cx, node: &KdlNode, t: &mut Fields) {
    let usage = "tools \"tools.json\" (a JSON list of {\"type\": \"function\", \"function\": {\"name\": ...}})";
    let Some(name) = cx.single(node, usage, Text) else {
        return;
    };
    refuse_beyond(cx, node, t.api, Some(Need::ToolCalls));
    if !cx.check_files {
        // A kept plan is judged without its files: the tools were in the bodies sent.
        t.tools_file = Some((name, String::new()));
        return;
    }
    let span = positional(node).next().map_or(node.span(), |e| e.span());
    let Some((path, text, sha)) = super::datafile::read(cx, span, &name, "tools") else {
        return;
    };
    let problem = match serde_json::from_str::<serde_json::Value>(&text) {
        Ok(serde_json::Value::Array(tools)) if tools.is_empty() => Err("it lists no tool".to_string()),
        Ok(serde_json::Value::Array(tools)) => tools
            .iter()
            .enumerate()
            .find_map(|(i, tool)| {
                let named = tool.get("type").and_then(|v| v.as_str()) == Some("function")
                    && tool
                        .get("function")
                        .and_then(|f| f.get("name"))
                        .and_then(|n| n.as_str())
                        .is_some_and(|n| !n.is_empty());
                (!named).then(|| {
                    format!("tool {i} is not {{\"type\": \"function\", \"function\": {{\"name\": ...}}}}")
                })
            })
            .map_or(Ok(serde_json::Value::Array(tools)), Err),
        Ok(_) => Err("it is not a JSON list".to_string()),
        Err(e) => Err(format!("it is not JSON: {e}")),
    };
    match problem {
        Ok(tools) if !t.body.contains_key("tools") => {
            t.body.insert("tools".into(), tools);
            t.tools_file = Some((name, sha));
        }
        Ok(_) => cx.error(
            span,
            "the body already sets `tools`",
            "tools twice",
            "give the tools once: in a tools file, or in `body`",
        ),
        Err(why) => cx.error(
            span,
            format!("{}: {why}", path.display()),
            "not a tools list",
            format!("write it as: {usage}"),
        ),
    }
}

/// `response-format "json-object"` or `response-format "json-schema" schema="schema.json"`: what
/// every answer must be, asked of the server (`response_format`) and checked answer by answer.
fn response_format(cx: &mut Cx, node: &KdlNode, t: &mut Fields) {
    let usage = "response-format \"json-object\" (or \"json-schema\" schema=\"schema.json\")";
    cx.no_children(node);
    cx.check_entries(node, 1, &["schema"], usage);
    let Some(kind) = cx.arg(node, usage, Text) else {
        return;
    };
    let span = positional(node).next().map_or(node.span(), |e| e.span());
    let schema_file = cx.prop(node, "schema", usage, Text).ok().flatten();
    let (format, body) = match (kind.as_str(), schema_file) {
        ("json-object", None) => (
            ResponseFormat::JsonObject,
            serde_json::json!({"type": "json_object"}),
        ),
        ("json-schema", Some(name)) if !cx.check_files => (
            ResponseFormat::JsonSchema {
                shown: name,
                sha256: String::new(),
                schema: std::sync::Arc::new(serde_json::Value::Null),
            },
            serde_json::Value::Null,
        ),
        ("json-schema", Some(name)) => {
            let at = property(node, "schema").map_or(span, |e| e.span());
            let Some((path, text, sha)) = super::datafile::read(cx, at, &name, "schema") else {
                return;
            };
            let schema = match serde_json::from_str::<serde_json::Value>(&text) {
                Ok(schema) => schema,
                Err(e) => {
                    cx.error(
                        at,
                        format!("{} is not JSON: {e}", path.display()),
                        "not JSON",
                        "give a JSON Schema file",
                    );
                    return;
                }
            };
            if let Err(e) = jsonschema::validator_for(&schema) {
                cx.error(
                    at,
                    format!("{} is not a usable JSON Schema: {e}", path.display()),
                    "not a schema",
                    "give a JSON Schema (draft 2020-12, 2019-09, 7, 6 or 4) with no remote references",
                );
                return;
            }
            let body = serde_json::json!({"type": "json_schema",
                "json_schema": {"name": "answer", "schema": schema.clone(), "strict": true}});
            (
                ResponseFormat::JsonSchema {
                    shown: name,
                    sha256: sha,
                    schema: std::sync::Arc::new(schema),
                },
                body,
            )
        }
        ("json-schema", None) => {
            cx.error(
                span,
                "`json-schema` needs its schema",
                "schema missing",
                format!("write it as: {usage}"),
            );
            return;
        }
        ("json-object", Some(_)) => {
            cx.error(
                span,
                "`json-object` takes no schema",
                "no schema",
                "write response-format \"json-schema\" schema=\"...\" to give one",
            );
            return;
        }
        (other, _) => {
            cx.error(
                span,
                format!("unknown response format \"{other}\""),
                "unknown format",
                usage,
            );
            return;
        }
    };
    if !body.is_null() {
        add_field(cx, span, t, "response_format".into(), body);
    }
    refuse_beyond(cx, node, t.api, Some(Need::StructuredOutput));
    t.response_format = Some(format);
}

/// `tool-choice "auto"` (or `"required"`, `"none"`, or a function's name): which tool the
/// model must call.
fn tool_choice(cx: &mut Cx, node: &KdlNode, t: &mut Fields) {
    let usage = "tool-choice \"auto\" (or \"required\", \"none\", or a function's name)";
    let Some(choice) = cx.single(node, usage, Text) else {
        return;
    };
    let value = match choice.as_str() {
        "auto" | "required" | "none" => serde_json::Value::String(choice),
        name => serde_json::json!({"type": "function", "function": {"name": name}}),
    };
    let span = positional(node).next().map_or(node.span(), |e| e.span());
    add_field(cx, span, t, "tool_choice".into(), value);
}

/// `header "X-Tenant" "team-a"`, or `header "X-Gateway-Key" env="GATEWAY_KEY"` for a secret
/// (read at run time, never written anywhere).
fn header(cx: &mut Cx, node: &KdlNode, t: &mut Fields) {
    let usage =
        "header \"X-Tenant\" \"team-a\" (or, for a secret, header \"X-Key\" env=\"VARIABLE\")";
    cx.no_children(node);
    cx.check_entries(node, 2, &["env"], usage);
    let name = cx.arg(node, usage, Text);
    let name_span = positional(node).next().map_or(node.span(), |e| e.span());
    let value = positional(node).nth(1);
    let env = cx.prop(node, "env", usage, Text).ok().flatten();
    let Some(name) = name else { return };
    let valid = reqwest::header::HeaderName::from_bytes(name.as_bytes()).is_ok();
    if !valid {
        cx.error(
            name_span,
            format!("\"{name}\" is not an HTTP header name"),
            "not a header",
            usage,
        );
        return;
    }
    let lower = name.to_ascii_lowercase();
    if OWN_HEADERS.contains(&lower.as_str())
        || t.api
            .dialect()
            .credential_headers()
            .contains(&lower.as_str())
    {
        cx.error(
            name_span,
            format!("llmload sets `{name}` itself"),
            "set by llmload",
            "the API key goes in api-key env=\"VARIABLE\"; other headers are yours to add",
        );
        return;
    }
    let value = match (value, env) {
        (Some(entry), None) => {
            let Some(text) = Text.read(cx, entry, usage) else {
                return;
            };
            if reqwest::header::HeaderValue::from_str(&text).is_err() {
                cx.error(
                    entry.span(),
                    "not a valid header value",
                    "invalid",
                    "header values are visible ASCII text",
                );
                return;
            }
            HeaderValue::Text(text)
        }
        (None, Some(variable)) => HeaderValue::Secret(variable),
        (Some(entry), Some(_)) => {
            cx.error(
                entry.span(),
                "a header takes a value or env=, not both",
                "both",
                usage,
            );
            return;
        }
        (None, None) => {
            cx.error(
                node.name().span(),
                "the header has no value",
                "no value",
                usage,
            );
            return;
        }
    };
    t.headers.push(Header { name, value });
}

/// `metrics "http://host:8000/metrics" interval="1s"`, `metrics #false`: the server telemetry;
/// several URLs for replicas behind one target (each scraped, reported apart and summed).
fn metrics(cx: &mut Cx, node: &KdlNode, t: &mut Fields) {
    let usage = "metrics \"http://host:8000/metrics\" interval=\"1s\" (several URLs for replicas; metrics prometheus=\"http://prom:9090\" match=\"{job=\\\"vllm\\\"}\" lag=\"15s\" to read them from Prometheus; or metrics #false)";
    cx.no_children(node);
    cx.check_entries(
        node,
        MAX_METRICS_URLS,
        &["interval", "prometheus", "match", "lag"],
        usage,
    );
    if property(node, "prometheus").is_some() {
        prometheus_metrics(cx, node, t, usage);
        return;
    }
    for name in ["match", "lag"] {
        if let Some(entry) = property(node, name) {
            cx.error(
                entry.span(),
                format!("`{name}=` belongs to a Prometheus source"),
                "without prometheus=",
                "add prometheus=\"http://prom:9090\" to read the replicas from a Prometheus server",
            );
        }
    }
    let entries: Vec<&kdl::KdlEntry> = positional(node).collect();
    match entries.first().map(|e| e.value()) {
        Some(kdl::KdlValue::Bool(false)) if entries.len() == 1 => t.metrics = MetricsSource::Off,
        Some(kdl::KdlValue::Bool(true)) | None => t.metrics = MetricsSource::Auto,
        _ => {
            let mut urls = Vec::new();
            for entry in entries {
                match entry.value() {
                    kdl::KdlValue::String(url)
                        if url.starts_with("http://") || url.starts_with("https://") =>
                    {
                        if urls.contains(url) {
                            cx.error(
                                entry.span(),
                                format!("\"{url}\" is named twice"),
                                "twice",
                                "name each replica's metrics URL once",
                            );
                        } else {
                            urls.push(url.clone());
                        }
                    }
                    kdl::KdlValue::String(url) => cx.error(
                        entry.span(),
                        format!("\"{url}\" is not an http:// or https:// URL"),
                        "not a URL",
                        format!("write it as: {usage}"),
                    ),
                    _ => cx.error(
                        entry.span(),
                        "`metrics` takes URLs or one flag",
                        "not a URL",
                        format!("write it as: {usage}"),
                    ),
                }
            }
            if !urls.is_empty() {
                t.metrics = MetricsSource::Urls(urls);
            }
        }
    }
    if let Ok(Some(interval)) = cx.prop(node, "interval", usage, DURATION) {
        if interval < Duration::from_millis(100) {
            cx.error(
                node.name().span(),
                "scraping more often than every 100ms loads the server being measured",
                "too often",
                format!("write it as: {usage}"),
            );
        } else {
            t.metrics_interval = interval;
        }
    }
}

/// `metrics prometheus="URL" match="{…}" lag="15s" interval="1s"`: the replicas' telemetry
/// read from a Prometheus that scrapes them, after the run.
fn prometheus_metrics(cx: &mut Cx, node: &KdlNode, t: &mut Fields, usage: &str) {
    if let Some(entry) = positional(node).next() {
        cx.error(
            entry.span(),
            "metrics URLs and prometheus= are two sources; give one",
            "beside prometheus=",
            "drop the URLs: Prometheus already scrapes the replicas",
        );
    }
    let url = cx.prop(node, "prometheus", usage, Text).ok().flatten();
    let matchers = cx.prop(node, "match", usage, Text).ok().flatten();
    let lag = cx.prop(node, "lag", usage, DURATION_OR_ZERO).ok().flatten();
    if let Some(interval) = cx.prop(node, "interval", usage, DURATION).ok().flatten() {
        t.metrics_interval = interval.max(Duration::from_secs(1));
    }
    let span = property(node, "prometheus").map(|e| e.span());
    let Some(url) = url else { return };
    if !(url.starts_with("http://") || url.starts_with("https://")) {
        if let Some(span) = span {
            cx.error(
                span,
                format!("\"{url}\" is not an http:// or https:// URL"),
                "not a URL",
                format!("write it as: {usage}"),
            );
        }
        return;
    }
    let matchers = match matchers.map(|m| m.trim().to_string()) {
        Some(m) if m.starts_with('{') && m.ends_with('}') => {
            Some(m[1..m.len() - 1].trim().to_string()).filter(|m| !m.is_empty())
        }
        Some(m) => {
            if let Some(entry) = property(node, "match") {
                cx.error(
                    entry.span(),
                    format!("\"{m}\" is not a PromQL selector's label matchers"),
                    "not {…}",
                    "write them as PromQL does: match=\"{job=\\\"vllm\\\", namespace=\\\"prod\\\"}\"",
                );
            }
            return;
        }
        None => None,
    };
    t.metrics = MetricsSource::Prometheus(crate::plan::PrometheusSource {
        url,
        matchers,
        lag: lag.unwrap_or(Duration::from_secs(15)),
    });
}

/// The most `gpus` sources a target may name (each a process beside the run).
const MAX_GPU_SOURCES: usize = 16;

/// `gpus "nvidia-smi"` or `gpus command="ssh node nvidia-smi --query-gpu=… --format=csv -lms 1000"`:
/// GPU readings from a command, beside the metrics URLs; one node per source.
fn gpus(cx: &mut Cx, node: &KdlNode, t: &mut Fields) {
    use crate::plan::GpuSource;
    let usage = "gpus \"nvidia-smi\" (this machine's GPUs), or gpus command=\"…\" (a command printing nvidia-smi's CSV, header first)";
    cx.no_children(node);
    cx.check_entries(node, 1, &["command"], usage);
    let command = cx.prop(node, "command", usage, Text).ok().flatten();
    let source = match (positional(node).next(), command) {
        (Some(entry), None) => match Text.read(cx, entry, usage).as_deref() {
            None => return,
            Some("nvidia-smi") => GpuSource::NvidiaSmi,
            Some(other) => {
                cx.error(
                    entry.span(),
                    format!("unknown GPU source \"{other}\""),
                    "unknown source",
                    format!("write it as: {usage}; for another tool, a command printing nvidia-smi's columns (docs/metrics.md#gpus-and-energy)"),
                );
                return;
            }
        },
        (None, Some(command)) if !command.trim().is_empty() => GpuSource::Command(command),
        (Some(entry), Some(_)) => {
            cx.error(
                entry.span(),
                "`gpus` takes a source or command=, not both",
                "both",
                usage,
            );
            return;
        }
        (None, _) => {
            cx.error(
                node.name().span(),
                "`gpus` names no source",
                "no source",
                usage,
            );
            return;
        }
    };
    if t.gpus.contains(&source) {
        cx.error(
            node.name().span(),
            "this GPU source is named twice",
            "twice",
            "name each source once",
        );
    } else if t.gpus.len() == MAX_GPU_SOURCES {
        cx.error(
            node.name().span(),
            format!("more than {MAX_GPU_SOURCES} GPU sources"),
            "too many",
            "read a host's GPUs with one command",
        );
    } else {
        t.gpus.push(source);
    }
}

/// `api-key env="NAME"`, once per key (used in turn), with `rpm=` and `tpm=` where the key's
/// budgets are not the target's `limits`. A key written in the plan itself is refused, and
/// never echoed back.
fn api_key(cx: &mut Cx, node: &KdlNode, t: &mut Fields) {
    let usage = "api-key env=\"OPENAI_API_KEY\" (repeat for several keys, used in turn; rpm= tpm= for a key's own budgets)";
    let Some(env) = key_variable_with(cx, node, usage, &["env", "rpm", "tpm"]) else {
        return;
    };
    let limits = (property(node, "rpm").is_some() || property(node, "tpm").is_some()).then(|| {
        let (rpm, tpm) = budgets_per_minute(cx, node, usage);
        crate::plan::ClientLimits { rpm, tpm }
    });
    if t.api_keys.iter().any(|key| key.env == env) {
        cx.error(
            node.span(),
            format!("${env} is named twice"),
            "twice",
            "name each key's variable once: a key used twice as often is one key",
        );
    } else if t.api_keys.len() == crate::plan::MAX_API_KEYS {
        cx.error(
            node.name().span(),
            format!("more than {} API keys", crate::plan::MAX_API_KEYS),
            "too many",
            "use fewer keys",
        );
    } else {
        t.api_keys.push(crate::plan::ApiKeySource { env, limits });
    }
}

/// `api-key env="VAR"` (the target's, or the simulator's): the variable that holds a key. A key
/// written in the plan itself is refused, and starred out of the diagnostic.
pub(super) fn key_variable(cx: &mut Cx, node: &KdlNode, usage: &str) -> Option<String> {
    key_variable_with(cx, node, usage, &["env"])
}

/// [`key_variable`], the node allowed the properties `allowed` besides.
fn key_variable_with(cx: &mut Cx, node: &KdlNode, usage: &str, allowed: &[&str]) -> Option<String> {
    cx.no_children(node);
    for entry in positional(node) {
        cx.secret(entry.span());
        cx.error(
            entry.span(),
            "an API key is never written in a plan",
            "key in the plan",
            format!("name the environment variable that holds it: {usage}"),
        );
    }
    cx.check_entries(node, usize::MAX, allowed, usage);
    match property(node, "env") {
        Some(_) => cx.prop(node, "env", usage, Text).ok().flatten(),
        None if positional(node).next().is_none() => {
            cx.error(
                node.name().span(),
                "`api-key` needs env=\"VARIABLE\"",
                "env missing",
                format!("write it as: {usage}"),
            );
            None
        }
        None => None,
    }
}

/// The `target` node.
/// The API a `target` node names, if it names a known one: read before the rest of the plan,
/// since it decides what the block and the workload may hold.
pub(super) fn declared_api(node: &KdlNode) -> Option<Api> {
    children(node)
        .iter()
        .filter(|child| child.name().value() == "api")
        .find_map(|child| match positional(child).next().map(|e| e.value()) {
            Some(kdl::KdlValue::String(name)) => Api::from_name(name),
            _ => None,
        })
}

pub(super) fn target(cx: &mut Cx, node: &KdlNode) -> Option<Target> {
    let usage = "target \"http://127.0.0.1:8000\" { ... } or target \"sim\"";
    cx.check_entries(node, 1, &[], usage);
    let endpoint = cx.arg(node, usage, Text).and_then(|text| {
        let endpoint = Endpoint::parse(&text);
        if endpoint.is_none() {
            cx.error(
                positional(node).next().map_or(node.span(), |e| e.span()),
                format!("\"{text}\" is not an http:// or https:// URL"),
                "not a URL",
                "write the server's base URL (with or without /v1), or \"sim\" for the embedded simulator",
            );
        }
        endpoint
    });
    let mut fields = Fields {
        api: Api::Chat,
        model: None,
        api_keys: Vec::new(),
        stream: true,
        timeout: Duration::from_secs(60),
        unreachable_after: Some(DEFAULT_UNREACHABLE_AFTER),
        on_throttle: crate::plan::OnThrottle::Count,
        limits: None,
        continuous_usage: false,
        max_line: DEFAULT_MAX_LINE,
        max_body: DEFAULT_MAX_BODY,
        metrics: MetricsSource::Auto,
        metrics_interval: Duration::from_secs(1),
        gpus: Vec::new(),
        body: serde_json::Map::new(),
        headers: Vec::new(),
        warm_connections: true,
        tools_file: None,
        response_format: None,
        ca_file: None,
        client_cert: None,
        tls_verify: true,
        http: Default::default(),
    };
    // The API decides which body fields and headers are llmload's own: it is read first,
    // wherever the block writes it (its mistakes are reported in their place by the walk).
    if let Some(api) = declared_api(node) {
        fields.api = api;
        // An API that answers whole (embeddings, rerank) is not streamed unless asked (and
        // then refused, saying why).
        fields.stream = api.dialect().capabilities().streaming;
    }
    cx.walk(node, "in `target`", CHILDREN, &mut fields);
    let endpoint = endpoint?;
    let model = match (fields.model, &endpoint) {
        (Some(model), _) => model,
        (None, Endpoint::Simulator) => "llmload-sim".to_string(),
        (None, Endpoint::Url(_)) => {
            cx.error(
                node.name().span(),
                "the target has no `model`",
                "model missing",
                "add the model name the server serves, e.g. model \"meta-llama/Llama-3.1-8B-Instruct\"",
            );
            return None;
        }
    };
    Some(Target {
        endpoint,
        api: fields.api,
        model,
        api_keys: fields.api_keys,
        stream: fields.stream,
        timeout: fields.timeout,
        unreachable_after: fields.unreachable_after,
        on_throttle: fields.on_throttle,
        limits: fields.limits,
        continuous_usage: fields.continuous_usage,
        max_line: fields.max_line,
        max_body: fields.max_body,
        metrics: fields.metrics,
        metrics_interval: fields.metrics_interval,
        gpus: fields.gpus,
        body: fields.body,
        headers: fields.headers,
        warm_connections: fields.warm_connections,
        tools_file: fields.tools_file,
        response_format: fields.response_format,
        ca_file: fields.ca_file,
        client_cert: fields.client_cert,
        tls_verify: fields.tls_verify,
        http: fields.http,
    })
}
