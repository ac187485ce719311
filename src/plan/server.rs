//! The `server` block: the inference server llmload starts before the run, waits for, and
//! stops after it (its command line, environment, readiness check and stop). What to do with
//! it is [`crate::server`]'s; this is only what the plan says.

use std::path::PathBuf;
use std::time::Duration;

/// What the plan's `{port}` placeholder is replaced with in the command, the target URL and
/// the metrics URL.
pub const PORT_PLACEHOLDER: &str = "{port}";
/// What the plan's `{model}` placeholder is replaced with in the command: the target's model.
pub const MODEL_PLACEHOLDER: &str = "{model}";

/// How long a server may take to become ready unless the plan says otherwise: a large model
/// loads for minutes.
pub const DEFAULT_READY_TIMEOUT: Duration = Duration::from_secs(300);
/// How long a server has between SIGTERM and SIGKILL unless the plan says otherwise.
pub const DEFAULT_STOP_GRACE: Duration = Duration::from_secs(10);
/// The most of the server's output `server.log` keeps unless the plan says otherwise.
pub const DEFAULT_LOG_MAX: u64 = 16 << 20;
/// How long a started server may answer nothing at all (not a probe of its readiness path, not
/// a token, not a response) before the run ends as not carried out, unless the plan says
/// otherwise. Long enough that a saturated server whose HTTP threads are all busy streaming
/// still gets a probe answered or a token out within it.
pub const DEFAULT_HANG_AFTER: Duration = Duration::from_secs(60);

/// A server llmload starts itself.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerSettings {
    /// What to run.
    pub command: ServerCommand,
    /// Variables set for it (beside llmload's own environment).
    pub env: Vec<(String, String)>,
    /// Where it runs: the plan's directory unless the plan names another (relative to it).
    pub dir: PathBuf,
    /// The port it listens on; `None`: a free loopback port chosen when it starts.
    pub port: Option<u16>,
    /// How llmload knows it is ready.
    pub ready: Readiness,
    /// How long it has to exit after SIGTERM before SIGKILL.
    pub stop_grace: Duration,
    /// How long it may answer nothing during the run before it is taken as hung.
    pub hang_after: Duration,
    /// The most bytes of its output `server.log` keeps (the start, and the last lines).
    pub log_max: u64,
    /// Values the plan read from the environment for it (`(env)"NAME"`): masked wherever
    /// its command line is shown.
    pub secrets: Vec<String>,
}

/// A server's command.
#[derive(Debug, Clone, PartialEq)]
pub enum ServerCommand {
    /// A program and its arguments, run as they are (no shell).
    Argv(Vec<String>),
    /// A line for `sh -c` (pipes, `exec`, variables).
    Shell(String),
}

impl ServerSettings {
    /// Everything this server block runs, as one line with its secrets masked: its variables,
    /// then its command as written (`sh -c '…'` for a shell line). What `check`, `plan` and
    /// `run` show before anything is started, so that a reviewer reads all of it, not the first
    /// word.
    pub fn shown_command(&self) -> String {
        let mut secrets = crate::secrets::Secrets::new();
        for secret in &self.secrets {
            secrets.add(secret);
        }
        let env: Vec<String> = self
            .env
            .iter()
            .map(|(name, value)| shell_words(&[format!("{name}={value}")]))
            .collect();
        let command = match &self.command {
            ServerCommand::Argv(argv) => shell_words(argv),
            ServerCommand::Shell(line) => {
                format!("sh -c {}", shell_words(std::slice::from_ref(line)))
            }
        };
        let line = [env.join(" "), command]
            .into_iter()
            .filter(|part| !part.is_empty())
            .collect::<Vec<_>>()
            .join(" ");
        crate::escape::one_line(&secrets.redact(&line)).into_owned()
    }
}

/// A command line as a shell would read it back: words with spaces or quotes quoted.
pub fn shell_words(argv: &[String]) -> String {
    argv.iter()
        .map(|word| {
            if !word.is_empty()
                && word
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_./:=,+@%{}".contains(c))
            {
                word.clone()
            } else {
                format!("'{}'", word.replace('\'', "'\\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

impl ServerCommand {
    /// The command as the plan wrote it: its words quoted as a shell would read them back, or
    /// the shell line itself.
    pub fn as_written(&self) -> String {
        match self {
            ServerCommand::Argv(argv) => shell_words(argv),
            ServerCommand::Shell(line) => line.clone(),
        }
    }

    /// The program's name as progress lines say it: `llama-server`; for a shell line, what it
    /// `exec`s, else its first program (`touch x; exec python3 …` is "python3"). Never the
    /// whole command: [`ServerSettings::shown_command`] is, and is shown before it starts.
    pub fn program_name(&self) -> String {
        let first = match self {
            ServerCommand::Argv(argv) => argv.first().map(String::as_str).unwrap_or(""),
            ServerCommand::Shell(line) => {
                let words: Vec<&str> = line.split_whitespace().collect();
                let exec = words.iter().rposition(|word| *word == "exec");
                match exec.and_then(|at| words.get(at + 1)) {
                    Some(program) => program,
                    None => words
                        .iter()
                        .find(|word| !word.contains('='))
                        .copied()
                        .unwrap_or("sh"),
                }
            }
        };
        let first = first.trim_matches(['\'', '"']);
        std::path::Path::new(first)
            .file_name()
            .map_or_else(|| first.to_string(), |n| n.to_string_lossy().into_owned())
    }
}

/// When a started server is ready for the run.
#[derive(Debug, Clone, PartialEq)]
pub struct Readiness {
    /// The path answered with a 2xx when ready (`/health`, `/v1/models`).
    pub path: String,
    /// How long it may take.
    pub timeout: Duration,
}

impl Default for Readiness {
    fn default() -> Readiness {
        Readiness {
            path: "/v1/models".to_string(),
            timeout: DEFAULT_READY_TIMEOUT,
        }
    }
}

/// The most configurations a `server-sweep` may cross into: each is a server started fresh
/// and a whole plan run against it.
pub const MAX_SERVER_CONFIGURATIONS: usize = 64;

/// `server-sweep`: the plan's load run against each configuration of the server in turn.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerSweep {
    /// What varies, in the order written; the configurations are their product (the first
    /// varies slowest).
    pub dimensions: Vec<SweepDimension>,
}

/// One setting a server sweep varies, and its values.
#[derive(Debug, Clone, PartialEq)]
pub struct SweepDimension {
    /// A command-line flag or an environment variable.
    pub setting: ServerSetting,
    /// The values it takes, in order.
    pub values: Vec<String>,
    /// Its values are each configuration's count of GPUs (`gpus=#true`: tensor parallelism),
    /// which prices it at the plan's `cost { gpu-hour }`.
    pub gpus: bool,
}

/// Where a swept value goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerSetting {
    /// A flag of the command line (`--parallel`): its value replaced where the command has
    /// it, else the flag and value added.
    Arg(String),
    /// An environment variable.
    Env(String),
}

/// One configuration of a server sweep: a value for each dimension.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ServerConfig {
    /// As people read it: `--parallel 2 LLAMA_ARG_FLASH_ATTN=on`.
    pub name: String,
    /// As a directory name: `parallel-2_LLAMA_ARG_FLASH_ATTN-on`.
    pub slug: String,
    /// Each dimension's setting and value.
    #[serde(skip)]
    pub values: Vec<(ServerSetting, String)>,
    /// Its count of GPUs, when a dimension says it (`gpus=#true`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpus: Option<u64>,
}

impl ServerSweep {
    /// Every configuration, the first dimension varying slowest.
    pub fn configurations(&self) -> Vec<ServerConfig> {
        let gpus_at = self.dimensions.iter().position(|d| d.gpus);
        let mut combos: Vec<Vec<(ServerSetting, String)>> = vec![Vec::new()];
        for dimension in &self.dimensions {
            combos = combos
                .into_iter()
                .flat_map(|combo| {
                    dimension.values.iter().map(move |value| {
                        let mut next = combo.clone();
                        next.push((dimension.setting.clone(), value.clone()));
                        next
                    })
                })
                .collect();
        }
        combos
            .into_iter()
            .map(|values| {
                let words: Vec<String> = values
                    .iter()
                    .map(|(setting, value)| match setting {
                        ServerSetting::Arg(flag) => format!("{flag} {value}"),
                        ServerSetting::Env(name) => format!("{name}={value}"),
                    })
                    .collect();
                let slug = values
                    .iter()
                    .map(|(setting, value)| {
                        let name = match setting {
                            ServerSetting::Arg(flag) => flag.trim_start_matches('-'),
                            ServerSetting::Env(name) => name,
                        };
                        slug_part(&format!("{name}-{value}"))
                    })
                    .collect::<Vec<_>>()
                    .join("_");
                ServerConfig {
                    name: words.join(" "),
                    slug,
                    gpus: gpus_at.and_then(|at| values.get(at)?.1.parse().ok()),
                    values,
                }
            })
            .collect()
    }

    /// How many configurations the product holds (without making them).
    pub fn count(&self) -> usize {
        self.dimensions
            .iter()
            .map(|d| d.values.len())
            .try_fold(1usize, |n, k| n.checked_mul(k))
            .unwrap_or(usize::MAX)
    }
}

/// A piece of a directory name: letters, digits, `-` and `.`; anything else becomes `_`.
fn slug_part(text: &str) -> String {
    let slug: String = text
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .take(60)
        .collect();
    slug.trim_matches('.').to_string()
}

/// Where a shell line takes the swept flags: written there, else at its end.
pub const ARGS_PLACEHOLDER: &str = "{args}";

impl ServerSettings {
    /// These settings with `config`'s values: each flag's value replaced where the command
    /// has it (`--parallel 4`, `--parallel=4`), else the flag and value added at its end (a
    /// shell line takes them where it writes `{args}`, else at its end); each variable set.
    pub fn configured(&self, config: &ServerConfig) -> ServerSettings {
        let mut settings = self.clone();
        let mut added: Vec<String> = Vec::new();
        for (setting, value) in &config.values {
            match setting {
                ServerSetting::Env(name) => {
                    settings.env.retain(|(n, _)| n != name);
                    settings.env.push((name.clone(), value.clone()));
                }
                ServerSetting::Arg(flag) => {
                    let replaced = match &mut settings.command {
                        ServerCommand::Argv(argv) => replace_flag(argv, flag, value),
                        ServerCommand::Shell(_) => false,
                    };
                    if !replaced {
                        added.push(flag.clone());
                        added.push(value.clone());
                    }
                }
            }
        }
        match &mut settings.command {
            ServerCommand::Argv(argv) => argv.extend(added),
            ServerCommand::Shell(line) => {
                let words = added
                    .iter()
                    .map(|w| format!("'{}'", w.replace('\'', "'\\''")))
                    .collect::<Vec<_>>()
                    .join(" ");
                *line = if line.contains(ARGS_PLACEHOLDER) {
                    line.replace(ARGS_PLACEHOLDER, &words)
                } else if words.is_empty() {
                    line.clone()
                } else {
                    format!("{line} {words}")
                };
            }
        }
        settings
    }
}

/// Sets `flag`'s value in `argv` where it is written; whether it was.
fn replace_flag(argv: &mut [String], flag: &str, value: &str) -> bool {
    let with_equals = format!("{flag}=");
    for index in 0..argv.len() {
        if argv[index] == flag && index + 1 < argv.len() {
            argv[index + 1] = value.to_string();
            return true;
        }
        if argv[index].starts_with(&with_equals) {
            argv[index] = format!("{flag}={value}");
            return true;
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sweep() -> ServerSweep {
        ServerSweep {
            dimensions: vec![
                SweepDimension {
                    setting: ServerSetting::Arg("--parallel".into()),
                    values: vec!["1".into(), "2".into()],
                    gpus: false,
                },
                SweepDimension {
                    setting: ServerSetting::Env("FLASH".into()),
                    values: vec!["on".into(), "off".into()],
                    gpus: false,
                },
            ],
        }
    }

    #[test]
    fn configurations_are_the_product_the_first_setting_slowest() {
        let names: Vec<String> = sweep()
            .configurations()
            .into_iter()
            .map(|c| c.name)
            .collect();
        assert_eq!(
            names,
            [
                "--parallel 1 FLASH=on",
                "--parallel 1 FLASH=off",
                "--parallel 2 FLASH=on",
                "--parallel 2 FLASH=off"
            ]
        );
        assert_eq!(sweep().configurations()[3].slug, "parallel-2_FLASH-off");
        assert_eq!(sweep().count(), 4);
    }

    #[test]
    fn a_configuration_replaces_or_adds_its_flags_and_sets_its_variables() {
        let base = ServerSettings {
            command: ServerCommand::Argv(
                ["srv", "--parallel", "8", "--ctx=4096"]
                    .map(String::from)
                    .to_vec(),
            ),
            env: vec![("FLASH".into(), "auto".into())],
            dir: ".".into(),
            port: None,
            ready: Readiness::default(),
            hang_after: crate::plan::DEFAULT_HANG_AFTER,
            stop_grace: DEFAULT_STOP_GRACE,
            log_max: DEFAULT_LOG_MAX,
            secrets: Vec::new(),
        };
        let config = &sweep().configurations()[1];
        let configured = base.configured(config);
        assert_eq!(
            configured.command,
            ServerCommand::Argv(
                ["srv", "--parallel", "1", "--ctx=4096"]
                    .map(String::from)
                    .to_vec()
            )
        );
        assert_eq!(configured.env, [("FLASH".to_string(), "off".to_string())]);
        let ctx = ServerSweep {
            dimensions: vec![SweepDimension {
                setting: ServerSetting::Arg("--ctx".into()),
                values: vec!["8192".into()],
                gpus: false,
            }],
        };
        let with_ctx = base.configured(&ctx.configurations()[0]);
        assert!(matches!(&with_ctx.command, ServerCommand::Argv(a) if a[3] == "--ctx=8192"));
        let batch = ServerSweep {
            dimensions: vec![SweepDimension {
                setting: ServerSetting::Arg("--batch".into()),
                values: vec!["512".into()],
                gpus: false,
            }],
        };
        let added = base.configured(&batch.configurations()[0]);
        assert!(matches!(&added.command, ServerCommand::Argv(a) if a[4..] == ["--batch", "512"]));
        let shell = ServerSettings {
            command: ServerCommand::Shell("exec srv {args} 2>&1".into()),
            ..base
        };
        assert_eq!(
            shell.configured(&batch.configurations()[0]).command,
            ServerCommand::Shell("exec srv '--batch' '512' 2>&1".into())
        );
    }
}
