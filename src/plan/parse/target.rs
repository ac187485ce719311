//! `target`: where requests go and how they are spoken.

use std::time::Duration;

use kdl::KdlNode;

use super::cx::{positional, property, Cx, Handler};
use super::values::{ByteSize, Flag, Text, DURATION};
use crate::plan::{Api, Endpoint, MetricsSource, Target, DEFAULT_MAX_BODY, DEFAULT_MAX_LINE};

struct Fields {
    api: Api,
    model: Option<String>,
    api_key_env: Option<String>,
    stream: bool,
    timeout: Duration,
    continuous_usage: bool,
    max_line: u64,
    max_body: u64,
    metrics: MetricsSource,
    metrics_interval: Duration,
}

const CHILDREN: &[(&str, Handler<Fields>)] = &[
    ("api", |cx, node, t| {
        let usage = "api \"chat\" (or \"completions\")";
        let Some(name) = cx.single(node, usage, Text) else {
            return;
        };
        match Api::from_name(&name) {
            Some(api) => t.api = api,
            None => cx.error(
                positional(node).next().map_or(node.span(), |e| e.span()),
                format!("unknown api \"{name}\""),
                "unknown api",
                "use \"chat\" for /v1/chat/completions or \"completions\" for /v1/completions",
            ),
        }
    }),
    ("model", |cx, node, t| {
        t.model = cx.single(node, "model \"meta-llama/Llama-3.1-8B-Instruct\"", Text);
    }),
    ("api-key", api_key),
    ("stream", |cx, node, t| {
        if let Some(b) = cx.single(node, "stream #true", Flag) {
            t.stream = b;
        }
    }),
    ("timeout", |cx, node, t| {
        if let Some(d) = cx.single(node, "timeout \"60s\"", DURATION) {
            t.timeout = d;
        }
    }),
    ("continuous-usage", |cx, node, t| {
        if let Some(b) = cx.single(node, "continuous-usage #true", Flag) {
            t.continuous_usage = b;
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
];

/// `metrics "http://host:8000/metrics" interval="1s"`, `metrics #false`: the server telemetry.
fn metrics(cx: &mut Cx, node: &KdlNode, t: &mut Fields) {
    let usage = "metrics \"http://host:8000/metrics\" interval=\"1s\" (or metrics #false)";
    cx.no_children(node);
    cx.check_entries(node, 1, &["interval"], usage);
    match positional(node).next().map(|e| e.value()) {
        Some(kdl::KdlValue::Bool(false)) => t.metrics = MetricsSource::Off,
        Some(kdl::KdlValue::Bool(true)) | None => t.metrics = MetricsSource::Auto,
        Some(kdl::KdlValue::String(url)) => {
            if url.starts_with("http://") || url.starts_with("https://") {
                t.metrics = MetricsSource::Url(url.clone());
            } else {
                cx.error(
                    positional(node).next().map_or(node.span(), |e| e.span()),
                    format!("\"{url}\" is not an http:// or https:// URL"),
                    "not a URL",
                    format!("write it as: {usage}"),
                );
            }
        }
        Some(_) => cx.error(
            node.name().span(),
            "`metrics` takes a URL or a flag",
            "not a URL",
            format!("write it as: {usage}"),
        ),
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

/// `api-key env="NAME"`: a key written in the plan itself is refused, and never echoed back.
fn api_key(cx: &mut Cx, node: &KdlNode, t: &mut Fields) {
    let usage = "api-key env=\"OPENAI_API_KEY\"";
    cx.no_children(node);
    for entry in positional(node) {
        cx.secret(entry.span());
        cx.error(
            entry.span(),
            "an API key is never written in a plan",
            "key in the plan",
            "name the environment variable that holds it: api-key env=\"OPENAI_API_KEY\"",
        );
    }
    cx.check_entries(node, usize::MAX, &["env"], usage);
    match property(node, "env") {
        Some(_) => t.api_key_env = cx.prop(node, "env", usage, Text).ok().flatten(),
        None if positional(node).next().is_none() => cx.error(
            node.name().span(),
            "`api-key` needs env=\"VARIABLE\"",
            "env missing",
            format!("write it as: {usage}"),
        ),
        None => {}
    }
}

/// The `target` node.
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
        api_key_env: None,
        stream: true,
        timeout: Duration::from_secs(60),
        continuous_usage: false,
        max_line: DEFAULT_MAX_LINE,
        max_body: DEFAULT_MAX_BODY,
        metrics: MetricsSource::Auto,
        metrics_interval: Duration::from_secs(1),
    };
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
        api_key_env: fields.api_key_env,
        stream: fields.stream,
        timeout: fields.timeout,
        continuous_usage: fields.continuous_usage,
        max_line: fields.max_line,
        max_body: fields.max_body,
        metrics: fields.metrics,
        metrics_interval: fields.metrics_interval,
    })
}
