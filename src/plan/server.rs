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

impl ServerCommand {
    /// The program's name as progress lines say it: `llama-server`, or `sh` for a shell line's
    /// first word.
    pub fn program_name(&self) -> String {
        let first = match self {
            ServerCommand::Argv(argv) => argv.first().map(String::as_str).unwrap_or(""),
            ServerCommand::Shell(line) => line
                .split_whitespace()
                .find(|word| *word != "exec" && !word.contains('='))
                .unwrap_or("sh"),
        };
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
