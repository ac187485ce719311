//! Files a plan names besides includes (a dataset, a trace): where they are, and reading them.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use miette::SourceSpan;
use sha2::Digest;

use super::cx::Cx;
use crate::plan::data::MAX_DATA_BYTES;

/// `name` resolved from the directory of the file being read, so that a plan and its data can
/// live together in a repository.
pub(super) fn resolve(cx: &Cx, name: &str) -> PathBuf {
    let path = Path::new(name);
    if path.is_relative() {
        Path::new(cx.file_name())
            .parent()
            .map(|dir| dir.join(path))
            .unwrap_or_else(|| path.to_path_buf())
    } else {
        path.to_path_buf()
    }
}

/// A data file's text and SHA-256; `None` after a diagnostic at `span` (missing, unreadable,
/// too large, not UTF-8). `what` names it in messages ("dataset", "trace").
pub(super) fn read(
    cx: &mut Cx,
    span: SourceSpan,
    name: &str,
    what: &str,
) -> Option<(PathBuf, Arc<String>, String)> {
    let path = resolve(cx, name);
    let help = format!("give the path of the {what} file, relative to this plan file");
    let size = match std::fs::metadata(&path) {
        Ok(meta) if meta.is_file() => meta.len(),
        Ok(_) => {
            cx.error(
                span,
                format!("{} is not a file", path.display()),
                "not a file",
                help,
            );
            return None;
        }
        Err(e) => {
            cx.error(
                span,
                format!("cannot read {what} {}: {e}", path.display()),
                "file not found",
                help,
            );
            return None;
        }
    };
    if size > MAX_DATA_BYTES {
        cx.error(
            span,
            format!(
                "{what} {} holds {size} bytes, more than the {} a plan may read",
                path.display(),
                MAX_DATA_BYTES
            ),
            "too large",
            format!("cut the {what} down (a sample of it measures the same thing)"),
        );
        return None;
    }
    match crate::files::read_bounded(&path, MAX_DATA_BYTES).map(String::from_utf8) {
        Ok(Ok(text)) => {
            let sha = format!("{:x}", sha2::Sha256::digest(text.as_bytes()));
            Some((path, Arc::new(text), sha))
        }
        Ok(Err(_)) => {
            cx.error(
                span,
                format!("{what} {} is not UTF-8 text", path.display()),
                "not text",
                format!("save the {what} as UTF-8 JSON"),
            );
            None
        }
        Err(e) => {
            cx.error(
                span,
                format!("cannot read {what} {}: {e}", path.display()),
                "unreadable",
                help,
            );
            None
        }
    }
}
