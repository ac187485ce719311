//! The image and audio files a dataset's entries name: each read once, checked as a server
//! would read it (an image's format and size from its header, a WAV clip's length), and made
//! into the [`Attachment`]s its entries carry (base64 shared by every entry naming the file).
//!
//! Read at plan time, so that a missing or broken file is a diagnostic pointing at the entry
//! that names it, before anything is sent. What this module is not: the synthetic media of a
//! workload's `images` and `audio` (the planner makes those), or where a dialect puts media in
//! a body.

use std::collections::HashMap;
use std::io::Cursor;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use base64::Engine;

use super::data::{DataEntry, DataError, DatasetMedia, MAX_DATA_BYTES};
use super::limits::{MAX_AUDIO, MAX_IMAGES_PER_REQUEST, MAX_MEDIA_FILE_BYTES};
use super::{Attachment, AttachmentKind, MediaPosition};

/// The most mistakes collected from one dataset's files (the first few tell what is wrong).
const MAX_ERRORS: usize = 5;

/// Reads every media file `entries` name (paths relative to `dir`, the dataset's folder) into
/// their `media`, in the order each entry names them. Returns what they hold, or the mistakes.
pub fn read_media(entries: &mut [DataEntry], dir: &Path) -> Result<DatasetMedia, Vec<DataError>> {
    let mut read: HashMap<PathBuf, Result<Attachment, MediaFileError>> = HashMap::new();
    let mut files = 0u32;
    let mut tally = DatasetMedia::default();
    let mut errors = Vec::new();
    for entry in entries.iter_mut() {
        if entry.media_files.is_empty() {
            continue;
        }
        let images = entry.media_files.iter().filter(|f| !f.audio).count();
        if images as u64 > MAX_IMAGES_PER_REQUEST {
            errors.push(DataError {
                span: entry.media_files[0].span,
                message: format!(
                    "entry {} names {images} images, more than the {MAX_IMAGES_PER_REQUEST} a request may carry",
                    entry.line
                ),
                label: "too many images".into(),
                help: "split the entry, or name fewer images".into(),
            });
        }
        let mut media = Vec::with_capacity(entry.media_files.len());
        for file in &entry.media_files {
            let path = dir.join(&file.path);
            let attachment = read.entry(path.clone()).or_insert_with(|| {
                let mut made = attachment_of(&path, file.audio, tally.bytes);
                if let Ok(attachment) = &mut made {
                    attachment.file = Some(files);
                    files += 1;
                    tally.files += 1;
                    tally.bytes += attachment.bytes;
                }
                made
            });
            match attachment {
                Ok(attachment) if kind_matches(attachment, file.audio) => {
                    media.push(attachment.clone())
                }
                Ok(_) => errors.push(DataError {
                    span: file.span,
                    message: format!(
                        "entry {} names {} both as an image and as audio",
                        entry.line, file.path
                    ),
                    label: "image or audio?".into(),
                    help: "name images under \"images\" and WAV clips under \"audio\"".into(),
                }),
                Err(why) => errors.push(DataError {
                    span: file.span,
                    message: format!("entry {}: {}: {why}", entry.line, file.path),
                    label: if file.audio { "bad audio" } else { "bad image" }.into(),
                    help: if file.audio {
                        "name a WAV file (16-bit PCM, any rate), relative to the dataset's folder"
                    } else {
                        "name a PNG or JPEG file, relative to the dataset's folder"
                    }
                    .into(),
                }),
            }
            if errors.len() >= MAX_ERRORS {
                return Err(errors);
            }
        }
        tally.entries_with_images += usize::from(images > 0);
        tally.entries_with_audio += usize::from(images < entry.media_files.len());
        entry.media = media;
    }
    if errors.is_empty() {
        Ok(tally)
    } else {
        Err(errors)
    }
}

/// Why a dataset's media file cannot be sent: said after its entry's line and its path.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum MediaFileError {
    #[error("not a file")]
    NotAFile,
    #[error("cannot read it: {0}")]
    Unreadable(String),
    #[error("{size} bytes, more than the {} MiB a media file may hold", MAX_MEDIA_FILE_BYTES >> 20)]
    FileTooLarge { size: u64 },
    #[error("the dataset's files come to more than the {} MiB a plan may read", MAX_DATA_BYTES >> 20)]
    DatasetTooLarge,
    /// The image reader could not even guess (its own words).
    #[error("{0}")]
    Unguessable(String),
    #[error("a {0} image: llmload sends PNG and JPEG")]
    OtherImageFormat(&'static str),
    #[error("not a PNG or JPEG image")]
    NotPngOrJpeg,
    #[error("not a readable image: {0}")]
    UnreadableImage(String),
    #[error("not a WAV file: {0}")]
    NotWav(String),
    #[error("a clip of {seconds} s, longer than the {} s a request may carry", MAX_AUDIO.as_secs())]
    ClipTooLong { seconds: u64 },
}

fn kind_matches(attachment: &Attachment, audio: bool) -> bool {
    matches!(attachment.kind, AttachmentKind::Audio { .. }) == audio
}

/// One file, read and checked; `so_far` is the bytes of the dataset's files read before it.
fn attachment_of(path: &Path, audio: bool, so_far: u64) -> Result<Attachment, MediaFileError> {
    let size = match std::fs::metadata(path) {
        Ok(meta) if meta.is_file() => meta.len(),
        Ok(_) => return Err(MediaFileError::NotAFile),
        Err(e) => return Err(MediaFileError::Unreadable(e.to_string())),
    };
    if size > MAX_MEDIA_FILE_BYTES {
        return Err(MediaFileError::FileTooLarge { size });
    }
    if so_far + size > MAX_DATA_BYTES {
        return Err(MediaFileError::DatasetTooLarge);
    }
    let bytes = crate::files::read_bounded(path, MAX_MEDIA_FILE_BYTES)
        .map_err(|e| MediaFileError::Unreadable(e.to_string()))?;
    let kind = if audio {
        wav_kind(&bytes)?
    } else {
        image_kind(&bytes)?
    };
    Ok(Attachment {
        kind,
        base64: Arc::from(base64::engine::general_purpose::STANDARD.encode(&bytes)),
        bytes: bytes.len() as u64,
        position: MediaPosition::Before,
        file: None,
        url: None,
    })
}

/// A PNG or JPEG's type and size, from its header (the formats every vision API takes).
fn image_kind(bytes: &[u8]) -> Result<AttachmentKind, MediaFileError> {
    let reader = image::ImageReader::new(Cursor::new(bytes))
        .with_guessed_format()
        .map_err(|e| MediaFileError::Unguessable(e.to_string()))?;
    let mime = match reader.format() {
        Some(image::ImageFormat::Png) => "image/png",
        Some(image::ImageFormat::Jpeg) => "image/jpeg",
        Some(other) => {
            return Err(MediaFileError::OtherImageFormat(
                other.extensions_str().first().copied().unwrap_or("other"),
            ))
        }
        None => return Err(MediaFileError::NotPngOrJpeg),
    };
    let (width, height) = reader
        .into_dimensions()
        .map_err(|e| MediaFileError::UnreadableImage(e.to_string()))?;
    Ok(AttachmentKind::Image {
        mime,
        width,
        height,
    })
}

/// A WAV clip's length, from its header.
fn wav_kind(bytes: &[u8]) -> Result<AttachmentKind, MediaFileError> {
    let reader = hound::WavReader::new(Cursor::new(bytes))
        .map_err(|e| MediaFileError::NotWav(e.to_string()))?;
    let rate = reader.spec().sample_rate.max(1);
    let millis = u64::from(reader.duration()) * 1000 / u64::from(rate);
    if millis > MAX_AUDIO.as_millis() as u64 {
        return Err(MediaFileError::ClipTooLong {
            seconds: millis / 1000,
        });
    }
    Ok(AttachmentKind::Audio {
        millis: millis as u32,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::data::{read_jsonl, DataPrompt};

    fn write(dir: &Path, name: &str, bytes: &[u8]) {
        std::fs::write(dir.join(name), bytes).unwrap();
    }

    /// A grey picture in `format`, made here: the plan's tests reach no later stage (the
    /// planner's seeded pictures are its own).
    fn picture(width: u32, height: u32, png: bool) -> Vec<u8> {
        use image::ImageEncoder;
        let pixels = vec![128u8; (width * height * 3) as usize];
        let mut out = Vec::new();
        if png {
            image::codecs::png::PngEncoder::new(&mut out)
                .write_image(&pixels, width, height, image::ExtendedColorType::Rgb8)
                .unwrap();
        } else {
            jpeg_encoder::Encoder::new(&mut out, 80)
                .encode(
                    &pixels,
                    width as u16,
                    height as u16,
                    jpeg_encoder::ColorType::Rgb,
                )
                .unwrap();
        }
        out
    }

    /// A silent 16-bit mono WAV clip of `audio`'s length and rate.
    fn clip(audio: &crate::plan::Audio) -> Vec<u8> {
        let spec = hound::WavSpec {
            channels: 1,
            sample_rate: audio.sample_rate,
            bits_per_sample: 16,
            sample_format: hound::SampleFormat::Int,
        };
        let mut out = Cursor::new(Vec::new());
        let mut writer = hound::WavWriter::new(&mut out, spec).unwrap();
        for _ in 0..audio.samples() {
            writer.write_sample(0i16).unwrap();
        }
        writer.finalize().unwrap();
        out.into_inner()
    }

    #[test]
    fn entries_carry_their_files_read_once_and_checked() {
        let dir = std::env::temp_dir().join(format!("llmload-data-media-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let png = picture(40, 30, true);
        let jpeg = picture(64, 48, false);
        write(&dir, "a.png", &png);
        write(&dir, "b.jpg", &jpeg);
        let audio = crate::plan::Audio {
            length: std::time::Duration::from_millis(500),
            sample_rate: 8000,
            signal: crate::plan::Signal::Tone,
            position: MediaPosition::Before,
        };
        write(&dir, "q.wav", &clip(&audio));
        write(&dir, "broken.png", b"\x89PNG\r\n\x1a\nnot really");
        let text = "{\"prompt\": \"<image>\\nwhat is this?\", \"image\": \"a.png\"}\n\
                    {\"prompt\": \"and these?\", \"images\": [\"a.png\", \"b.jpg\"], \"audio\": \"q.wav\"}\n\
                    {\"prompt\": \"plain\"}\n";
        let (mut entries, _) = read_jsonl(text, "prompt", "completion").unwrap();
        assert_eq!(entries[0].prompt, DataPrompt::Text("what is this?".into()));
        let tally = read_media(&mut entries, &dir).unwrap();
        assert_eq!(tally.files, 3, "a.png is read once");
        assert_eq!(tally.entries_with_images, 2);
        assert_eq!(tally.entries_with_audio, 1);
        assert_eq!(
            tally.bytes,
            (png.len() + jpeg.len()) as u64 + audio.wav_bytes()
        );
        assert_eq!(
            entries[0].media[0].kind,
            AttachmentKind::Image {
                mime: "image/png",
                width: 40,
                height: 30
            }
        );
        assert!(Arc::ptr_eq(
            &entries[0].media[0].base64,
            &entries[1].media[0].base64
        ));
        assert_eq!(
            entries[1].media[1].kind,
            AttachmentKind::Image {
                mime: "image/jpeg",
                width: 64,
                height: 48
            }
        );
        assert_eq!(
            entries[1].media[2].kind,
            AttachmentKind::Audio { millis: 500 }
        );
        assert!(entries[2].media.is_empty());

        // Each mistake points at the path in the file, and says what is wrong with it.
        let bad = "{\"prompt\": \"x\", \"images\": [\"missing.png\"]}\n\
                   {\"prompt\": \"y\", \"image\": \"broken.png\"}\n\
                   {\"prompt\": \"z\", \"audio\": \"a.png\"}\n";
        let (mut entries, _) = read_jsonl(bad, "prompt", "completion").unwrap();
        let errors = read_media(&mut entries, &dir).unwrap_err();
        assert_eq!(errors.len(), 3, "{errors:?}");
        assert!(
            errors[0]
                .message
                .starts_with("entry 1: missing.png: cannot read it"),
            "{}",
            errors[0].message
        );
        assert_eq!(errors[0].span.0, bad.find("\"missing.png\"").unwrap());
        assert!(
            errors[1]
                .message
                .contains("broken.png: not a readable image"),
            "{}",
            errors[1].message
        );
        assert!(
            errors[2].message.contains("not a WAV file"),
            "{}",
            errors[2].message
        );
        assert!(errors[2].help.contains("WAV"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn urls_and_non_paths_are_refused_where_they_are_written() {
        let text = "{\"prompt\": \"x\", \"images\": [\"https://example.com/cat.jpg\"]}\n\
                    {\"prompt\": \"y\", \"images\": [3]}\n";
        let errors = read_jsonl(text, "prompt", "completion").unwrap_err();
        assert_eq!(errors.len(), 2);
        assert!(
            errors[0].message.contains("not a file"),
            "{}",
            errors[0].message
        );
        assert!(errors[0].help.contains("never fetches"));
        assert!(errors[1].message.contains("other than file paths"));
    }
}
