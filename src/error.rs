//! The library's one error type, and what each kind of error means for the exit code.
//!
//! Exit codes are a promise to CI (docs/ci.md): 2 only for a mistake in the plan or on the
//! command line, which the user fixes by editing; 3 for a run that could not be carried out
//! (a file that cannot be written, a runtime that cannot start, a records file that cannot be
//! read), which is the machine's or the environment's fault. Every message names the path and
//! the operating system's reason where there is one, and never holds a secret.

use std::path::{Path, PathBuf};

use crate::diagnostic::PlanErrors;

/// Exit code: every assertion passed.
pub const EXIT_PASS: u8 = 0;
/// Exit code: an assertion failed (or a regression, or a warning under `--fail-on-warning`).
pub const EXIT_FAIL: u8 = 1;
/// Exit code: the plan or the command line is wrong.
pub const EXIT_USAGE: u8 = 2;
/// Exit code: the run could not be carried out.
pub const EXIT_RUN: u8 = 3;

/// Everything that can go wrong in llmload, by what the user should do about it.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The plan has mistakes, each with its file, line, caret and help.
    #[error("{0}")]
    Plan(#[from] PlanErrors),
    /// The command line, or a value given on it, is wrong.
    #[error("{0}")]
    Usage(String),
    /// A user's template (`--template`) does not render.
    #[error("template {name}: {message}")]
    Template {
        /// The template's file name.
        name: String,
        /// What is wrong, naming the variable or the line.
        message: String,
    },
    /// A file or directory could not be read, created or written.
    #[error("cannot {action} {}: {source}", path.display())]
    Io {
        /// What was being done: "create", "write", "read"...
        action: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The operating system's reason.
        #[source]
        source: std::io::Error,
    },
    /// A records file that cannot be read as one.
    #[error("{}{}: {message}", path.display(), line.map(|l| format!(" line {l}")).unwrap_or_default())]
    Records {
        /// The records file.
        path: PathBuf,
        /// The line at fault, counted from 1, where one is.
        line: Option<usize>,
        /// What is wrong with it.
        message: String,
    },
    /// The run could not be carried out (the runtime, the HTTP client, a thread, the recorder).
    #[error("{0}")]
    Run(String),
}

impl Error {
    /// The exit code this error ends the process with.
    pub fn exit_code(&self) -> u8 {
        match self {
            Error::Plan(_) | Error::Usage(_) | Error::Template { .. } => EXIT_USAGE,
            Error::Io { .. } | Error::Records { .. } | Error::Run(_) => EXIT_RUN,
        }
    }

    /// An I/O error on `path` while doing `action`.
    pub fn io(action: &'static str, path: impl AsRef<Path>, source: std::io::Error) -> Error {
        Error::Io {
            action,
            path: path.as_ref().to_path_buf(),
            source,
        }
    }

    /// A command-line mistake.
    pub fn usage(message: impl Into<String>) -> Error {
        Error::Usage(message.into())
    }

    /// A run-time failure.
    pub fn run(message: impl Into<String>) -> Error {
        Error::Run(message.into())
    }

    /// The message as the terminal shows it: plan diagnostics rendered with their carets,
    /// anything else as `error: …`.
    pub fn render(&self) -> String {
        match self {
            Error::Plan(errors) => errors.render(),
            other => format!("error: {other}\n"),
        }
    }
}

/// The library's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// `text`, trimmed and cut to 200 characters, for error details.
pub fn shorten(text: &str) -> String {
    // Text from a server: one line, its control characters shown, before anything prints it.
    let text = crate::escape::one_line(text.trim());
    let text = text.as_ref();
    if text.chars().count() > 200 {
        let cut: String = text.chars().take(200).collect();
        format!("{cut}…")
    } else {
        text.to_string()
    }
}

/// The innermost cause of a transport error, as people read it (reqwest's outer message
/// repeats the URL, which says nothing new).
pub fn root_cause(err: &(dyn std::error::Error + 'static)) -> String {
    let mut current = err;
    while let Some(next) = current.source() {
        current = next;
    }
    shorten(&current.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_follow_docs_ci() {
        assert_eq!(Error::usage("x").exit_code(), 2);
        assert_eq!(
            Error::Template {
                name: "t".into(),
                message: "m".into()
            }
            .exit_code(),
            2
        );
        let disk_full = Error::io(
            "write",
            "/tmp/out/records.jsonl",
            std::io::Error::from_raw_os_error(28),
        );
        assert_eq!(disk_full.exit_code(), 3);
        let text = disk_full.to_string();
        assert!(
            text.starts_with("cannot write /tmp/out/records.jsonl: "),
            "{text}"
        );
        assert!(text.contains("space"), "{text}");
        assert_eq!(Error::run("x").exit_code(), 3);
        let records = Error::Records {
            path: "r.jsonl".into(),
            line: Some(4),
            message: "not JSON".into(),
        };
        assert_eq!(records.to_string(), "r.jsonl line 4: not JSON");
    }
}
