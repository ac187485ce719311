//! `server`: the inference server llmload starts before the run and stops after it.
//!
//! ```kdl
//! server {
//!     command "llama-server" "--port" "{port}" "--model" "tiny.gguf" "--parallel" 4
//!     env LLAMA_ARG_THREADS="2"
//!     ready "/health" timeout="120s"
//!     stop-grace "10s"
//!     hang-after "60s"
//! }
//! ```

use kdl::{KdlEntry, KdlNode, KdlValue};

use super::cx::{children, positional, type_name, Cx, Handler};
use super::values::{ByteSize, Count, Flag, Kind, Text, DURATION};
use crate::plan::{
    Endpoint, MetricsSource, Readiness, ServerCommand, ServerSetting, ServerSettings, ServerSweep,
    SweepDimension, Target, DEFAULT_HANG_AFTER, DEFAULT_LOG_MAX, DEFAULT_STOP_GRACE,
    MAX_SERVER_CONFIGURATIONS, PORT_PLACEHOLDER,
};

struct Fields {
    command: Option<ServerCommand>,
    settings: ServerSettings,
}

/// One word of a command line: text, or a number written bare (`--parallel 4`).
fn word(cx: &mut Cx, entry: &KdlEntry, usage: &str, secrets: &mut Vec<String>) -> Option<String> {
    match entry.value() {
        KdlValue::String(spec) => {
            let text = Text.read(cx, entry, usage)?;
            let variable = spec.split(":-").next().unwrap_or_default();
            if entry.ty().is_some_and(|t| t.value() == "env")
                && crate::secrets::looks_secret(variable)
            {
                keep_secret(cx, &text, secrets);
            }
            Some(text)
        }
        KdlValue::Integer(n) => Some(n.to_string()),
        KdlValue::Float(x) => Some(super::values::trim_float(*x)),
        other => {
            cx.error(
                entry.span(),
                format!(
                    "expected a word of the command line, found {}",
                    type_name(other)
                ),
                "not a word",
                format!("write it as: {usage}"),
            );
            None
        }
    }
}

/// A value the plan read for the server from a variable whose name says it is a credential
/// (`(env)"ENGINE_API_KEY"`, `(env)"HF_TOKEN"`): masked wherever the command line is shown, and
/// kept out of the run's header, which lists the other `(env)` values with what they were (a
/// model path from `(env)"MODEL"` is shown as any other).
fn keep_secret(cx: &mut Cx, value: &str, secrets: &mut Vec<String>) {
    if !value.is_empty() {
        secrets.push(value.to_string());
    }
    for (_, used) in cx.env_used.iter_mut().filter(|(_, used)| used == value) {
        *used = crate::secrets::REDACTED.to_string();
    }
}

const CHILDREN: &[(&str, Handler<Fields>)] = &[
    ("command", |cx, node, f| {
        let usage = "command \"llama-server\" \"--port\" \"{port}\" \"--model\" \"model.gguf\"";
        cx.no_children(node);
        cx.check_entries(node, usize::MAX, &[], usage);
        let mut secrets = Vec::new();
        let argv: Vec<String> = positional(node)
            .filter_map(|entry| word(cx, entry, usage, &mut secrets))
            .collect();
        f.settings.secrets.extend(secrets);
        if argv.first().is_none_or(|program| program.trim().is_empty()) {
            cx.error(
                node.name().span(),
                "`command` names no program",
                "no program",
                format!("write it as: {usage}"),
            );
            return;
        }
        set_command(cx, node, f, ServerCommand::Argv(argv));
    }),
    ("shell", |cx, node, f| {
        let usage = "shell \"exec llama-server --port {port} --model model.gguf\" (run by sh -c)";
        cx.no_children(node);
        cx.check_entries(node, 1, &[], usage);
        let Some(entry) = cx.required_arg(node, usage) else {
            return;
        };
        let mut secrets = Vec::new();
        let Some(line) = word(cx, entry, usage, &mut secrets) else {
            return;
        };
        f.settings.secrets.extend(secrets);
        if line.trim().is_empty() {
            cx.error(
                entry.span(),
                "the shell line is empty",
                "empty",
                format!("write it as: {usage}"),
            );
            return;
        }
        set_command(cx, node, f, ServerCommand::Shell(line));
    }),
    ("env", |cx, node, f| {
        let usage = "env LLAMA_ARG_THREADS=\"2\" CUDA_VISIBLE_DEVICES=\"0\"";
        cx.no_children(node);
        for entry in node.entries() {
            let Some(name) = entry.name().map(|n| n.value().to_string()) else {
                cx.error(
                    entry.span(),
                    "`env` takes NAME=\"value\" pairs",
                    "not a pair",
                    format!("write it as: {usage}"),
                );
                continue;
            };
            let mut secrets = Vec::new();
            if let Some(value) = word(cx, entry, usage, &mut secrets) {
                f.settings.secrets.extend(secrets);
                if crate::secrets::looks_secret(&name) {
                    f.settings.secrets.push(value.clone());
                }
                f.settings.env.retain(|(n, _)| *n != name);
                f.settings.env.push((name, value));
            }
        }
    }),
    ("dir", |cx, node, f| {
        let usage = "dir \"engines\" (relative to the plan file)";
        if let Some(dir) = cx.single(node, usage, Text) {
            f.settings.dir = super::datafile::resolve(cx, &dir);
        }
    }),
    ("port", |cx, node, f| {
        let usage = "port 8080 (leave it out for a free port, written where {port} is)";
        if let Some(port) = cx.single(node, usage, Count { min: 1, max: 65535 }) {
            f.settings.port = Some(port as u16);
        }
    }),
    ("ready", |cx, node, f| {
        let usage = "ready \"/health\" timeout=\"120s\"";
        cx.no_children(node);
        cx.check_entries(node, 1, &["timeout"], usage);
        if let Some(path) = cx.arg(node, usage, Text) {
            if path.starts_with('/') {
                f.settings.ready.path = path;
            } else {
                let span = positional(node).next().map_or(node.span(), |e| e.span());
                cx.error(
                    span,
                    format!("\"{path}\" is not a path on the server"),
                    "not a path",
                    "write the path the server answers with 200 once ready, from its root: \"/health\" or \"/v1/models\"",
                );
            }
        }
        if let Some(timeout) =
            cx.prop_or(node, "timeout", f.settings.ready.timeout, usage, DURATION)
        {
            f.settings.ready.timeout = timeout;
        }
    }),
    ("stop-grace", |cx, node, f| {
        let usage = "stop-grace \"10s\" (SIGTERM, then SIGKILL after this)";
        if let Some(grace) = cx.single(node, usage, DURATION) {
            f.settings.stop_grace = grace;
        }
    }),
    ("hang-after", |cx, node, f| {
        let usage = "hang-after \"60s\" (nothing answered for this long during the run: the server is hung)";
        if let Some(after) = cx.single(node, usage, DURATION) {
            if after < std::time::Duration::from_secs(1) {
                let span = positional(node).next().map_or(node.span(), |e| e.span());
                cx.error(
                    span,
                    "a server is not hung after less than a second of silence",
                    "too short",
                    "give it at least \"1s\"; a busy server may take seconds to answer a probe",
                );
            } else {
                f.settings.hang_after = after;
            }
        }
    }),
    ("log-max", |cx, node, f| {
        let usage = "log-max \"16MiB\" (server.log keeps its start and its last lines)";
        if let Some(max) = cx.single(
            node,
            usage,
            ByteSize {
                min: 64 << 10,
                max: 1 << 30,
            },
        ) {
            f.settings.log_max = max;
        }
    }),
];

fn set_command(cx: &mut Cx, node: &KdlNode, f: &mut Fields, command: ServerCommand) {
    if f.command.is_some() {
        cx.error(
            node.name().span(),
            "the server has two commands",
            "second command",
            "give the server one `command` (a program and its arguments) or one `shell` line",
        );
        return;
    }
    f.command = Some(command);
}

/// The `server` block; `None` after a diagnostic.
pub(super) fn server(cx: &mut Cx, node: &KdlNode) -> Option<ServerSettings> {
    cx.no_args(
        node,
        "server { command \"llama-server\" \"--port\" \"{port}\" ... }",
    );
    let mut fields = Fields {
        command: None,
        settings: ServerSettings {
            command: ServerCommand::Argv(Vec::new()),
            env: Vec::new(),
            dir: super::datafile::resolve(cx, "."),
            port: None,
            ready: Readiness::default(),
            stop_grace: DEFAULT_STOP_GRACE,
            hang_after: DEFAULT_HANG_AFTER,
            log_max: DEFAULT_LOG_MAX,
            secrets: Vec::new(),
        },
    };
    cx.walk(node, "in `server`", CHILDREN, &mut fields);
    let has_command = children(node)
        .iter()
        .any(|c| matches!(c.name().value(), "command" | "shell"));
    if !has_command {
        cx.error(
            node.name().span(),
            "the server has no `command`",
            "command missing",
            "add the command that starts it: command \"llama-server\" \"--port\" \"{port}\" \"--model\" \"model.gguf\"",
        );
    }
    let mut settings = fields.settings;
    let command = fields.command?;
    settings.secrets.extend(flagged_secrets(&command));
    settings.command = command;
    Some(settings)
}

/// The values of flags whose names say they are credentials (`--api-key X`, `--hf-token=X`):
/// masked wherever the command line is shown.
fn flagged_secrets(command: &ServerCommand) -> Vec<String> {
    let words: Vec<&str> = match command {
        ServerCommand::Argv(argv) => argv.iter().map(String::as_str).collect(),
        ServerCommand::Shell(line) => line.split_whitespace().collect(),
    };
    let mut secrets = Vec::new();
    for (index, word) in words.iter().enumerate() {
        if !word.starts_with('-') {
            continue;
        }
        match word.split_once('=') {
            Some((flag, value)) if crate::secrets::looks_secret(flag) => {
                secrets.push(unquoted(value))
            }
            Some(_) => {}
            None if crate::secrets::looks_secret(word) => {
                if let Some(value) = words.get(index + 1).filter(|v| !v.starts_with('-')) {
                    secrets.push(unquoted(value));
                }
            }
            None => {}
        }
    }
    secrets.retain(|s| !s.is_empty());
    secrets
}

/// A shell word without the quotes around it.
fn unquoted(value: &str) -> String {
    value.trim_matches(['"', '\'']).to_string()
}

/// A mistake in how the target and the server fit together.
pub(super) struct Misfit {
    pub message: String,
    pub label: &'static str,
    pub help: String,
    /// Shown at the target's URL (else at the `server` block).
    pub at_target: bool,
}

/// Where the target and the server do not fit: a server for the simulator, a `{port}` with no
/// server to give it, or a port chosen at start that the target does not name.
pub(super) fn target_misfits(target: &Target, server: Option<&ServerSettings>) -> Vec<Misfit> {
    let url = match &target.endpoint {
        Endpoint::Url(url) => Some(url.as_str()),
        Endpoint::Simulator => None,
    };
    let metrics_urls: &[String] = match &target.metrics {
        MetricsSource::Urls(urls) => urls,
        _ => &[],
    };
    let names_port = |text: Option<&str>| text.is_some_and(|t| t.contains(PORT_PLACEHOLDER));
    let metrics_url = metrics_urls
        .iter()
        .map(String::as_str)
        .find(|url| names_port(Some(url)));
    let mut misfits = Vec::new();
    match (server, url) {
        (Some(_), None) => misfits.push(Misfit {
            message: "the plan starts a server, and its target is the embedded simulator".into(),
            label: "server for the simulator",
            help: "send to the server it starts: target \"http://127.0.0.1:{port}\" { model \"...\" }, \
                   or remove the `server` block"
                .into(),
            at_target: false,
        }),
        (None, _) if names_port(url) || names_port(metrics_url) => misfits.push(Misfit {
            message: "the target's URL has a {port}, and the plan starts no server to give it one".into(),
            label: "no server",
            help: "write the server's port in the URL, or add a `server` block that starts it".into(),
            at_target: true,
        }),
        (Some(server), Some(url)) if server.port.is_none() && !url.contains(PORT_PLACEHOLDER) => {
            misfits.push(Misfit {
                message: "the server's port is chosen when it starts, and the target's URL does not name it".into(),
                label: "port not in the URL",
                help: "write {port} in the target's URL (target \"http://127.0.0.1:{port}\"), or give the server a fixed `port`".into(),
                at_target: true,
            })
        }
        _ => {}
    }
    misfits
}

/// `server-sweep { arg "--parallel" 1 2 4; env "LLAMA_ARG_FLASH_ATTN" "on" "off" }`.
pub(super) fn server_sweep(cx: &mut Cx, node: &KdlNode) -> Option<ServerSweep> {
    cx.no_args(node, "server-sweep { arg \"--parallel\" 1 2 4 }");
    let mut sweep = ServerSweep {
        dimensions: Vec::new(),
    };
    cx.walk(node, "in `server-sweep`", SWEEP_CHILDREN, &mut sweep);
    if sweep.dimensions.is_empty() && children(node).is_empty() {
        cx.error(
            node.name().span(),
            "the server sweep varies nothing",
            "nothing to sweep",
            "add what varies: arg \"--parallel\" 1 2 4, or env \"NAME\" \"a\" \"b\"",
        );
        return None;
    }
    if sweep.dimensions.is_empty() {
        return None;
    }
    let count = sweep.count();
    if count > MAX_SERVER_CONFIGURATIONS {
        cx.error(
            node.name().span(),
            format!(
                "the server sweep crosses into {count} configurations: more than a plan may ({MAX_SERVER_CONFIGURATIONS})"
            ),
            "too many configurations",
            "sweep fewer values, or fewer settings at once",
        );
        return None;
    }
    Some(sweep)
}

const SWEEP_CHILDREN: &[(&str, Handler<ServerSweep>)] = &[
    ("arg", |cx, node, sweep| {
        let usage = "arg \"--parallel\" 1 2 4 (a flag of the server's command, then its values)";
        if let Some((name, values)) = dimension(cx, node, usage) {
            if !name.starts_with('-') {
                let span = positional(node).next().map_or(node.span(), |e| e.span());
                cx.error(
                    span,
                    format!("\"{name}\" is not a flag"),
                    "not a flag",
                    "name the flag as the command takes it: \"--parallel\", \"-np\"",
                );
                return;
            }
            push_dimension(cx, node, sweep, ServerSetting::Arg(name), values);
        }
    }),
    ("env", |cx, node, sweep| {
        let usage = "env \"LLAMA_ARG_FLASH_ATTN\" \"on\" \"off\" (a variable, then its values)";
        if let Some((name, values)) = dimension(cx, node, usage) {
            push_dimension(cx, node, sweep, ServerSetting::Env(name), values);
        }
    }),
];

/// A dimension's name and values (at least one value).
fn dimension(cx: &mut Cx, node: &KdlNode, usage: &str) -> Option<(String, Vec<String>)> {
    cx.no_children(node);
    cx.check_entries(node, usize::MAX, &["gpus"], usage);
    let name = cx.arg(node, usage, Text)?;
    let mut secrets = Vec::new();
    let values: Vec<String> = positional(node)
        .skip(1)
        .filter_map(|entry| word(cx, entry, usage, &mut secrets))
        .collect();
    if values.is_empty() {
        cx.error(
            node.name().span(),
            format!("`{}` gives {name} no values", node.name().value()),
            "no values",
            format!("write it as: {usage}"),
        );
        return None;
    }
    Some((name, values))
}

fn push_dimension(
    cx: &mut Cx,
    node: &KdlNode,
    sweep: &mut ServerSweep,
    setting: ServerSetting,
    values: Vec<String>,
) {
    if sweep.dimensions.iter().any(|d| d.setting == setting) {
        cx.error(
            node.name().span(),
            "the server sweep varies this setting twice",
            "twice",
            "give it all its values in one line",
        );
        return;
    }
    let usage = "arg \"--tensor-parallel-size\" 1 2 4 gpus=#true (its values are each configuration's GPUs)";
    let gpus = cx
        .prop(node, "gpus", usage, Flag)
        .ok()
        .flatten()
        .unwrap_or(false);
    if gpus {
        if sweep.dimensions.iter().any(|d| d.gpus) {
            cx.error(
                node.name().span(),
                "two settings of the sweep say they are the GPUs",
                "twice",
                "mark the one whose values are the configuration's count of GPUs",
            );
            return;
        }
        let counts = values
            .iter()
            .all(|v| v.parse::<u64>().is_ok_and(|n| (1..=100_000).contains(&n)));
        if !counts {
            cx.error(
                node.name().span(),
                "a setting that is the GPUs takes counts of them",
                "not counts",
                "give whole numbers from 1 to 100,000: arg \"--tensor-parallel-size\" 1 2 4 gpus=#true",
            );
            return;
        }
    }
    sweep.dimensions.push(SweepDimension {
        setting,
        values,
        gpus,
    });
}

#[cfg(test)]
mod tests {
    use crate::plan::parse::{parse_plan, parse_plan_with, EnvSource, ParseOptions};
    use crate::plan::*;

    const REST: &str =
        "workload { input 8; output 4 }\nphase \"a\" { concurrency 1; requests 2 }\n";

    fn plan(server: &str, target: &str) -> Result<Plan, PlanErrors> {
        parse_plan(
            "plans/p.kdl",
            format!("server {{ {server} }}\ntarget \"{target}\" {{ model \"m\" }}\n{REST}"),
        )
    }

    fn errors(server: &str, target: &str) -> Vec<String> {
        plan(server, target)
            .unwrap_err()
            .diagnostics
            .iter()
            .map(|d| d.message.clone())
            .collect()
    }

    #[test]
    fn a_server_block_is_read_with_its_defaults() {
        let plan = plan(
            "command \"bin/llama-server\" \"--port\" \"{port}\" \"--parallel\" 4 \"--api-key\" \"sk-local-123\"; \
             env LLAMA_ARG_THREADS=\"2\" HF_TOKEN=\"hf_abcdef\"; ready \"/health\" timeout=\"90s\"",
            "http://127.0.0.1:{port}",
        )
        .unwrap();
        let server = plan.server.unwrap();
        let ServerCommand::Argv(argv) = &server.command else {
            panic!("{:?}", server.command);
        };
        assert_eq!(argv[4], "4", "a bare number is a word of the command line");
        assert_eq!(server.dir, std::path::Path::new("plans/."));
        assert_eq!(server.port, None);
        assert_eq!(server.ready.path, "/health");
        assert_eq!(server.ready.timeout, std::time::Duration::from_secs(90));
        assert_eq!(server.stop_grace, DEFAULT_STOP_GRACE);
        assert_eq!(server.command.program_name(), "llama-server");
        assert_eq!(server.hang_after, DEFAULT_HANG_AFTER);
        let quoted = ServerCommand::Shell("A=1 exec '/opt/engine/vllm' serve".into());
        assert_eq!(quoted.program_name(), "vllm");
        let quoted = ServerCommand::Shell("exec \"/opt/bin/sglang\" --port 1".into());
        assert_eq!(quoted.program_name(), "sglang");
        let two = ServerCommand::Shell("touch /tmp/x; exec python3 -m vllm".into());
        assert_eq!(two.program_name(), "python3");
        assert_eq!(
            ServerCommand::Shell("LLAMA_ARG_THREADS=8 llama-server --port 1".into()).program_name(),
            "llama-server"
        );
        // The key after --api-key, and the token by its variable's name, are secrets.
        assert!(server.secrets.contains(&"sk-local-123".to_string()));
        assert!(server.secrets.contains(&"hf_abcdef".to_string()));
        assert!(!server.secrets.contains(&"2".to_string()));
    }

    #[test]
    fn an_environment_value_given_to_the_server_is_kept_out_of_the_header() {
        let env = [
            ("ENGINE_KEY".to_string(), "sk-from-env-999".to_string()),
            ("MODEL".to_string(), "models/m.gguf".to_string()),
        ];
        let plan = parse_plan_with(
            "p.kdl",
            format!(
                "server {{ command \"x\" \"--model\" (env)\"MODEL\" \"--k\" (env)\"ENGINE_KEY\" }}\ntarget \"http://127.0.0.1:{{port}}\" {{ model \"m\" }}\n{REST}"
            ),
            &ParseOptions {
                env: EnvSource::Recorded(env.into_iter().collect()),
                ..ParseOptions::default()
            },
        )
        .unwrap();
        assert_eq!(plan.server.unwrap().secrets, ["sk-from-env-999"]);
        assert!(plan.source.env.iter().all(|(_, v)| v != "sk-from-env-999"));
        // A model path from the environment is no secret: the header shows it.
        assert!(plan
            .source
            .env
            .contains(&("MODEL".into(), "models/m.gguf".into())));
    }

    #[test]
    fn mistakes_in_the_server_block_and_how_it_meets_the_target() {
        assert_eq!(
            errors("ready \"/health\"", "http://127.0.0.1:{port}"),
            ["the server has no `command`"]
        );
        assert_eq!(
            errors("command \"a\"; shell \"b\"", "http://127.0.0.1:{port}"),
            ["the server has two commands"]
        );
        assert_eq!(
            errors("command \"a\"; port 70000", "http://127.0.0.1:{port}")[0],
            "70000 is out of range: it must be at most 65535"
        );
        assert_eq!(
            errors(
                "command \"a\"; hang-after \"200ms\"",
                "http://127.0.0.1:{port}"
            ),
            vec!["a server is not hung after less than a second of silence"]
        );
        assert_eq!(
            errors("command \"a\"", "http://127.0.0.1:8000"),
            ["the server's port is chosen when it starts, and the target's URL does not name it"]
        );
        assert!(plan("command \"a\"; port 8000", "http://127.0.0.1:8000").is_ok());
        assert_eq!(
            errors("command \"a\"", "sim"),
            ["the plan starts a server, and its target is the embedded simulator"]
        );
        assert_eq!(
            errors(
                "command \"a\"; env \"x\"; log-max \"1KiB\"",
                "http://127.0.0.1:{port}"
            )
            .len(),
            2
        );
        let no_server = parse_plan(
            "p.kdl",
            format!("target \"http://127.0.0.1:{{port}}\" {{ model \"m\" }}\n{REST}"),
        )
        .unwrap_err();
        assert_eq!(
            no_server.diagnostics[0].message,
            "the target's URL has a {port}, and the plan starts no server to give it one"
        );
    }

    #[test]
    fn a_server_sweep_is_read_and_its_mistakes_named() {
        let sweep = |body: &str| {
            parse_plan(
                "p.kdl",
                format!(
                    "server {{ command \"srv\" \"--port\" \"{{port}}\" }}\nserver-sweep {{ {body} }}\ntarget \"http://127.0.0.1:{{port}}\" {{ model \"m\" }}\n{REST}"
                ),
            )
        };
        let plan = sweep("arg \"--parallel\" 1 2 4; env \"FLASH\" \"on\" \"off\"").unwrap();
        assert_eq!(plan.server_sweep.unwrap().count(), 6);
        let messages = |body: &str| -> Vec<String> {
            sweep(body)
                .unwrap_err()
                .diagnostics
                .iter()
                .map(|d| d.message.clone())
                .collect()
        };
        assert_eq!(messages(""), ["the server sweep varies nothing"]);
        assert_eq!(
            messages("arg \"--parallel\""),
            ["`arg` gives --parallel no values"]
        );
        assert_eq!(
            messages("arg \"parallel\" 1"),
            ["\"parallel\" is not a flag"]
        );
        assert_eq!(
            messages("arg \"-np\" 1 2; arg \"-np\" 4"),
            ["the server sweep varies this setting twice"]
        );
        let many: String = (0..65).map(|i| format!(" {i}")).collect();
        assert_eq!(
            messages(&format!("arg \"-np\"{many}")),
            ["the server sweep crosses into 65 configurations: more than a plan may (64)"]
        );
        // A setting that is the GPUs: counts of them, once, priced by a GPU's hour.
        let priced = |body: &str| {
            parse_plan(
                "p.kdl",
                format!(
                    "server {{ command \"srv\" \"--port\" \"{{port}}\" }}\nserver-sweep {{ {body} }}\ncost {{ gpu-hour \"$2\" }}\ntarget \"http://127.0.0.1:{{port}}\" {{ model \"m\" }}\n{REST}"
                ),
            )
        };
        let configurations = priced("arg \"-tp\" 1 2 gpus=#true; env \"F\" \"a\"")
            .unwrap()
            .server_sweep
            .unwrap()
            .configurations();
        let gpus: Vec<Option<u64>> = configurations.iter().map(|c| c.gpus).collect();
        assert_eq!(gpus, [Some(1), Some(2)]);
        let priced_messages = |body: &str| -> Vec<String> {
            priced(body)
                .unwrap_err()
                .diagnostics
                .iter()
                .map(|d| d.message.clone())
                .collect()
        };
        assert_eq!(
            priced_messages("arg \"-tp\" 1 two gpus=#true"),
            ["a setting that is the GPUs takes counts of them"]
        );
        assert_eq!(
            priced_messages("arg \"-tp\" 1 gpus=#true; env \"N\" \"2\" gpus=#true"),
            ["two settings of the sweep say they are the GPUs"]
        );
        assert_eq!(
            messages("arg \"-tp\" 1 2 gpus=#true"),
            ["the sweep prices each configuration by its GPUs, and the plan gives no price a GPU"]
        );
        let typed = parse_plan(
            "p.kdl",
            format!(
                "server {{ command \"srv\" \"--port\" \"{{port}}\" }}\nserver-sweep {{ arg \"-tp\" 1 2 gpus=#true }}\ncost {{ gpu-hour \"$2\" gpu=\"H100\" }}\ntarget \"http://127.0.0.1:{{port}}\" {{ model \"m\" }}\n{REST}"
            ),
        )
        .unwrap_err();
        assert!(
            typed.diagnostics[0]
                .message
                .contains("prices GPUs by type, counting them from the telemetry"),
            "{:?}",
            typed.diagnostics
        );
        let no_server = parse_plan(
            "p.kdl",
            format!("server-sweep {{ arg \"-np\" 1 }}\ntarget \"sim\"\n{REST}"),
        )
        .unwrap_err();
        assert_eq!(
            no_server.diagnostics[0].message,
            "the plan sweeps the server's settings, and starts no server"
        );
    }
}
