//! Reading the files llmload is given (plans, includes, datasets, traces, tokenizers, tools and
//! schemas, templates, a run directory's records, plan and sidecars, a baseline's): each must be
//! a regular file, and is read within a size bound.
//!
//! A path can name `/dev/zero` (endless), a FIFO (opening it blocks until someone writes) or a
//! directory; a size from `metadata` says nothing for the first two. So the file's type is
//! checked before it is opened, and reading stops one byte past the bound. This module only
//! reads; what a file must hold is its caller's to check.

use std::io::Read;
use std::path::Path;

/// The error for a path that is not a regular file, or a file beyond `max` bytes.
fn refuse(message: String) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidInput, message)
}

/// Opens `path` if it is a regular file (or a link to one): a FIFO, a device or a directory is
/// refused before it is opened.
pub fn open_regular(path: &Path) -> std::io::Result<std::fs::File> {
    let kind = std::fs::metadata(path)?.file_type();
    if !kind.is_file() {
        let what = if kind.is_dir() {
            "a directory"
        } else {
            "not a regular file (a FIFO, a socket or a device)"
        };
        return Err(refuse(format!("it is {what}")));
    }
    std::fs::File::open(path)
}

/// The bytes of `path`, a regular file of at most `max` bytes.
pub fn read_bounded(path: &Path, max: u64) -> std::io::Result<Vec<u8>> {
    let file = open_regular(path)?;
    let mut bytes = Vec::new();
    file.take(max.saturating_add(1)).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > max {
        return Err(refuse(format!("it holds more than {max} bytes")));
    }
    Ok(bytes)
}

/// A JSON file a run directory may hold (`gate.json`, `server.json`): `None` when it is not
/// there, an error naming the file when it is not what it should be (`what`).
pub fn read_json_if_present<T: serde::de::DeserializeOwned>(
    path: &Path,
    max: u64,
    what: &str,
) -> crate::error::Result<Option<T>> {
    use crate::error::Error;
    match read_text_bounded(path, max) {
        Ok(text) => serde_json::from_str(&text)
            .map(Some)
            .map_err(|e| Error::Records {
                path: path.to_path_buf(),
                line: None,
                message: format!("not {what}: {e}"),
            }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::io("read", path, e)),
    }
}

/// The text of `path`, a regular file of at most `max` bytes of UTF-8.
pub fn read_text_bounded(path: &Path, max: u64) -> std::io::Result<String> {
    String::from_utf8(read_bounded(path, max)?).map_err(|_| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "it is not text (invalid UTF-8)",
        )
    })
}

/// Writes `path` whole or not at all: into a temporary file beside it, renamed over it once
/// `write` has written everything and it is on disk. A full disk, or a failure halfway, leaves
/// the earlier file (or none), never a truncated one a reader would take for complete.
pub fn write_whole(
    path: &Path,
    write: impl FnOnce(&mut std::io::BufWriter<std::fs::File>) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let temporary = path.with_file_name(format!(".{name}.{}.partial", std::process::id()));
    let written = (|| {
        let mut out = std::io::BufWriter::new(std::fs::File::create(&temporary)?);
        write(&mut out)?;
        let file = out.into_inner().map_err(|e| e.into_error())?;
        file.sync_all()?;
        std::fs::rename(&temporary, path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&temporary);
    }
    written
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn special_files_are_refused_before_they_are_read() {
        let dir = tempfile::tempdir().unwrap();
        assert!(read_bounded(dir.path(), 10)
            .unwrap_err()
            .to_string()
            .contains("a directory"));
        #[cfg(unix)]
        {
            let error = read_bounded(Path::new("/dev/zero"), 10).unwrap_err();
            assert!(error.to_string().contains("not a regular file"), "{error}");
            let fifo = dir.path().join("fifo");
            let made = std::process::Command::new("mkfifo").arg(&fifo).status();
            if made.is_ok_and(|s| s.success()) {
                // Would block forever if it were opened.
                assert!(read_bounded(&fifo, 10).is_err());
            }
        }
        let file = dir.path().join("f");
        std::fs::write(&file, "0123456789x").unwrap();
        assert!(read_bounded(&file, 10)
            .unwrap_err()
            .to_string()
            .contains("more than 10 bytes"));
        assert_eq!(read_text_bounded(&file, 11).unwrap(), "0123456789x");
    }

    #[test]
    fn a_write_that_fails_leaves_the_earlier_file_whole() {
        use std::io::Write;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("report.html");
        write_whole(&path, |out| out.write_all(b"first")).unwrap();
        let failed = write_whole(&path, |out| {
            out.write_all(b"half of the sec")?;
            Err(std::io::Error::other("disk full"))
        });
        assert!(failed.is_err());
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "first");
        // No temporary file is left behind.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }
}
