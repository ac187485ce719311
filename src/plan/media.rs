//! `images` and `audio` in the workload: what media each request carries beside its text, for
//! vision and audio models. The bytes themselves are made by the planner
//! ([`crate::planner::media`]); this is only what the plan asks.

use std::time::Duration;

pub use crate::api::{Attachment, AttachmentKind, MediaPosition};

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
