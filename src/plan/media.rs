//! `images` and `audio` in the workload: what media each request carries beside its text, for
//! vision and audio models. The bytes themselves are made by the planner
//! ([`crate::planner::media`]); this is only what the plan asks.

use std::time::Duration;

/// `images count=1 format="jpeg" quality=85 position="before" { size "512x512" weight=3 }`:
/// synthetic images per request, each of a size drawn from the buckets by weight.
#[derive(Debug, Clone, PartialEq)]
pub struct Images {
    /// The fewest images per request.
    pub count_min: u32,
    /// The most (`count_min` for a fixed count); drawn uniformly per request.
    pub count_max: u32,
    /// The sizes an image is drawn from, by weight.
    pub sizes: Vec<ImageSize>,
    /// How each image is encoded.
    pub format: ImageFormat,
    /// Where in the user's message the images go.
    pub position: MediaPosition,
}

impl Images {
    /// The mean images per request.
    pub fn mean_count(&self) -> f64 {
        (f64::from(self.count_min) + f64::from(self.count_max)) / 2.0
    }
}

/// One size bucket of images.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ImageSize {
    /// Pixels across.
    pub width: u32,
    /// Pixels down.
    pub height: u32,
    /// Its share of images, relative to the other sizes'.
    pub weight: f64,
}

impl ImageSize {
    /// `1280x720`, as plans and reports write it.
    pub fn label(&self) -> String {
        format!("{}x{}", self.width, self.height)
    }
}

/// How an image is encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImageFormat {
    /// Lossless PNG.
    Png,
    /// JPEG of a quality from 1 to 100.
    Jpeg {
        /// The encoder's quality.
        quality: u8,
    },
}

impl ImageFormat {
    /// The media type a data URL names.
    pub fn mime(self) -> &'static str {
        match self {
            ImageFormat::Png => "image/png",
            ImageFormat::Jpeg { .. } => "image/jpeg",
        }
    }

    /// Its name in plans.
    pub fn name(self) -> &'static str {
        match self {
            ImageFormat::Png => "png",
            ImageFormat::Jpeg { .. } => "jpeg",
        }
    }
}

/// Where a request's media go in its user message: before the text (as most vision
/// benchmarks put the image first) or after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MediaPosition {
    /// Before the text.
    #[default]
    Before,
    /// After the text.
    After,
}

/// `audio "5s" sample-rate=16000 signal="tone" position="before"`: one WAV clip per request.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Audio {
    /// The clip's length.
    pub length: Duration,
    /// Samples per second (16-bit mono).
    pub sample_rate: u32,
    /// What it sounds like.
    pub signal: Signal,
    /// Where in the user's message it goes.
    pub position: MediaPosition,
}

impl Audio {
    /// Its size as a WAV file: a 44-byte header and 16-bit mono samples.
    pub fn wav_bytes(&self) -> u64 {
        44 + 2 * self.samples()
    }

    /// Samples in the clip.
    pub fn samples(&self) -> u64 {
        (self.length.as_secs_f64() * f64::from(self.sample_rate)).round() as u64
    }
}

/// What an audio clip holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// A tone of a seeded pitch (a speech model hears a steady voice-band sound).
    Tone,
    /// Seeded white noise.
    Noise,
}

/// `image-urls`: images go out as `http://` URLs that llmload serves itself on loopback, for
/// servers that fetch their images (vLLM, SGLang), instead of inline in the body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImageUrls {
    /// The loopback address served on.
    pub host: std::net::IpAddr,
    /// The port (0: a free one, chosen when the run starts).
    pub port: u16,
}

/// An image or audio clip made for one request, ready for a dialect to put in its body: its
/// bytes in base64 (shared, so that a conversation's history or a re-sent body copies none),
/// or the URL it is served at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attachment {
    /// What it is.
    pub kind: AttachmentKind,
    /// The file's bytes, in standard base64 (empty once it is served at `url`).
    pub base64: std::sync::Arc<str>,
    /// The file's size, in bytes (before base64).
    pub bytes: u64,
    /// Where it goes in its message, against the text.
    pub position: MediaPosition,
    /// The dataset file it is (its number among the dataset's files), for one read from disk.
    pub file: Option<u32>,
    /// Where llmload serves it, when it is sent as a URL (`image-urls`).
    pub url: Option<std::sync::Arc<str>>,
}

/// What an attachment is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttachmentKind {
    /// An image.
    Image {
        /// `image/png` or `image/jpeg`.
        mime: &'static str,
        /// Pixels across.
        width: u32,
        /// Pixels down.
        height: u32,
    },
    /// A WAV clip.
    Audio {
        /// Its length, in milliseconds.
        millis: u32,
    },
}

impl Attachment {
    /// What an image part's URL says: where it is served, or a `data:` URL of its bytes.
    pub fn image_url(&self) -> String {
        match &self.url {
            Some(url) => url.to_string(),
            None => self.data_url(),
        }
    }

    /// A `data:` URL of it (`data:image/jpeg;base64,…`).
    pub fn data_url(&self) -> String {
        let mime = match self.kind {
            AttachmentKind::Image { mime, .. } => mime,
            AttachmentKind::Audio { .. } => "audio/wav",
        };
        format!("data:{mime};base64,{}", self.base64)
    }
}
