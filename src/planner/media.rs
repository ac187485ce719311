//! The images and audio a request carries: drawn per request by the planner (how many images,
//! and whether a clip), made from the request's seed by the prompt source (which sizes, and the
//! bytes themselves), the same bytes for the same plan and seed.
//!
//! Each image is synthetic and unique to its request, so that no server cache (vLLM's
//! multimodal processor cache keys images by their pixels) serves one image twice and flatters
//! the run: a seeded gradient, a few seeded blocks and seeded grain — grain that makes a JPEG
//! about as large as a photograph of the same size (a 1280×720 one at quality 85 is about
//! 155 KiB), where a flat synthetic image would be a few kilobytes. Made on the body builder's
//! thread, ahead of its send.
//!
//! What this module is not: the place an API puts the media in a body (each dialect does,
//! from [`Attachment`]s), or what the server makes of them (the simulator's vision cost is
//! in `sim`).

use std::io::Cursor;
use std::sync::Arc;

use base64::Engine;
use rand::distr::weighted::WeightedIndex;
use rand::distr::Distribution;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::plan::{
    Attachment, AttachmentKind, Audio, ImageFormat, ImageSize, Images, Signal, Workload,
};

/// The workload's media, as the planner draws them and the prompt source makes them.
#[derive(Debug, Clone)]
pub struct MediaPlan {
    images: Option<(Images, WeightedIndex<f64>)>,
    audio: Option<Audio>,
}

/// What the planner drew for one request: its image count and whether it carries the clip.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct MediaDraw {
    /// Images it carries.
    pub images: u8,
    /// It carries the workload's audio clip.
    pub audio: bool,
}

impl MediaDraw {
    /// It carries nothing.
    pub fn is_empty(&self) -> bool {
        self.images == 0 && !self.audio
    }
}

impl MediaPlan {
    /// The workload's media, if it has any.
    pub fn of(workload: &Workload) -> Option<MediaPlan> {
        let images = match &workload.images {
            Some(images) => {
                let weights = images.sizes.iter().map(|s| s.weight);
                // The parser allows only positive weights and at least one size.
                Some((images.clone(), WeightedIndex::new(weights).ok()?))
            }
            None => None,
        };
        (images.is_some() || workload.audio.is_some()).then_some(MediaPlan {
            images,
            audio: workload.audio,
        })
    }

    /// One request's draw, from its own random stream.
    pub fn draw(&self, request_seed: u64) -> MediaDraw {
        let images = self.images.as_ref().map_or(0, |(images, _)| {
            if images.count_min == images.count_max {
                images.count_min
            } else {
                let mut rng = ChaCha8Rng::seed_from_u64(crate::seed::mix64(request_seed ^ 0x696d));
                rng.random_range(images.count_min..=images.count_max)
            }
        });
        MediaDraw {
            images: images.min(u8::MAX as u32) as u8,
            audio: self.audio.is_some(),
        }
    }

    /// The sizes of a request's images, drawn from its prompt seed: the same for the prompt
    /// source that makes them and the recorder that records them.
    pub fn image_sizes(&self, prompt_seed: u64, draw: MediaDraw) -> Vec<ImageSize> {
        let Some((images, weights)) = &self.images else {
            return Vec::new();
        };
        let mut rng = ChaCha8Rng::seed_from_u64(crate::seed::mix64(prompt_seed ^ 0x7369_7a65));
        (0..draw.images)
            .map(|_| images.sizes[weights.sample(&mut rng)])
            .collect()
    }

    /// The plan's images, if it has any.
    pub fn images(&self) -> Option<&Images> {
        self.images.as_ref().map(|(images, _)| images)
    }

    /// The plan's audio clip, if it has one.
    pub fn audio(&self) -> Option<&Audio> {
        self.audio.as_ref()
    }

    /// What `llmload plan` says of the media: the mix, and the bytes a request carries (one
    /// image of each size made and measured; base64 adds a third on the wire).
    pub fn describe(&self) -> Vec<String> {
        let mut lines = Vec::new();
        let mut mean_bytes = 0.0;
        // What making a request's media costs the one thread that builds bodies (this
        // machine, this build: measured on one image of each size).
        let mut making_s = 0.0;
        if let Some((images, _)) = &self.images {
            let total: f64 = images.sizes.iter().map(|s| s.weight).sum();
            let mut per_image = 0.0;
            let sizes: Vec<String> = images
                .sizes
                .iter()
                .map(|size| {
                    let started = std::time::Instant::now();
                    let bytes = encode_image(size.width, size.height, images.format, 1).len();
                    making_s +=
                        started.elapsed().as_secs_f64() * size.weight / total * images.mean_count();
                    per_image += bytes as f64 * size.weight / total;
                    format!(
                        "{} {:.0}% (about {} KiB)",
                        size.label(),
                        size.weight * 100.0 / total,
                        bytes.div_ceil(1024)
                    )
                })
                .collect();
            let count = if images.count_min == images.count_max {
                format!("{}", images.count_min)
            } else {
                format!("{}–{} (uniform)", images.count_min, images.count_max)
            };
            let format = match images.format {
                ImageFormat::Png => "PNG".to_string(),
                ImageFormat::Jpeg { quality } => format!("JPEG quality {quality}"),
            };
            lines.push(format!(
                "images: {count} per request, {format}, {} the text: {}",
                position_word(images.position),
                sizes.join(", ")
            ));
            mean_bytes += per_image * images.mean_count();
        }
        if let Some(audio) = &self.audio {
            lines.push(format!(
                "audio: one WAV clip of {} per request, {} Hz 16-bit mono, {}, {} the text ({} KiB)",
                crate::plan::units::format_duration(audio.length),
                audio.sample_rate,
                match audio.signal {
                    Signal::Tone => "a tone",
                    Signal::Noise => "white noise",
                },
                position_word(audio.position),
                audio.wav_bytes().div_ceil(1024)
            ));
            mean_bytes += audio.wav_bytes() as f64;
        }
        lines.push(format!(
            "media per request: about {:.0} KiB on average ({:.0} KiB as base64 in the body); each request's own, made from its seed ahead of its send",
            mean_bytes / 1024.0,
            mean_bytes * 4.0 / 3.0 / 1024.0
        ));
        if making_s > 0.0 {
            lines.push(format!(
                "making a request's images takes about {:.1} ms of one core here: the body builder makes at most about {:.0} requests/s (a higher rate lags its schedule)",
                making_s * 1e3,
                1.0 / making_s
            ));
        }
        lines
    }

    /// Stand-ins for a request's attachments in an example body: what each is, not its bytes.
    pub fn placeholders(&self, prompt_seed: u64, draw: MediaDraw) -> Vec<Attachment> {
        let mut out: Vec<Attachment> = Vec::new();
        if let Some((images, _)) = &self.images {
            for size in self.image_sizes(prompt_seed, draw) {
                out.push(Attachment {
                    kind: AttachmentKind::Image {
                        mime: images.format.mime(),
                        width: size.width,
                        height: size.height,
                    },
                    base64: Arc::from(format!(
                        "<a {} {} image>",
                        size.label(),
                        images.format.name()
                    )),
                    bytes: 0,
                    position: images.position,
                    file: None,
                    url: None,
                });
            }
        }
        if let (Some(audio), true) = (&self.audio, draw.audio) {
            out.push(Attachment {
                kind: AttachmentKind::Audio {
                    millis: audio.length.as_millis().min(u32::MAX as u128) as u32,
                },
                base64: Arc::from(format!(
                    "<a WAV clip of {}>",
                    crate::plan::units::format_duration(audio.length)
                )),
                bytes: 0,
                position: audio.position,
                file: None,
                url: None,
            });
        }
        out
    }

    /// A request's attachments, made from its prompt seed: its images, then its clip.
    pub fn attachments(&self, prompt_seed: u64, draw: MediaDraw) -> Vec<Attachment> {
        let mut out = Vec::with_capacity(draw.images as usize + 1);
        if let Some((images, _)) = &self.images {
            for (index, size) in self.image_sizes(prompt_seed, draw).into_iter().enumerate() {
                let seed = crate::seed::mix64(prompt_seed ^ ((index as u64 + 1) << 32));
                let bytes = encode_image(size.width, size.height, images.format, seed);
                out.push(attachment(
                    AttachmentKind::Image {
                        mime: images.format.mime(),
                        width: size.width,
                        height: size.height,
                    },
                    &bytes,
                    images.position,
                ));
            }
        }
        if let (Some(audio), true) = (&self.audio, draw.audio) {
            let bytes = encode_wav(audio, crate::seed::mix64(prompt_seed ^ 0x0061_7564_696f));
            out.push(attachment(
                AttachmentKind::Audio {
                    millis: audio.length.as_millis().min(u32::MAX as u128) as u32,
                },
                &bytes,
                audio.position,
            ));
        }
        out
    }
}

fn position_word(position: crate::plan::MediaPosition) -> &'static str {
    match position {
        crate::plan::MediaPosition::Before => "before",
        crate::plan::MediaPosition::After => "after",
    }
}

fn attachment(
    kind: AttachmentKind,
    bytes: &[u8],
    position: crate::plan::MediaPosition,
) -> Attachment {
    Attachment {
        kind,
        base64: Arc::from(base64::engine::general_purpose::STANDARD.encode(bytes)),
        bytes: bytes.len() as u64,
        position,
        file: None,
        url: None,
    }
}

/// A seeded image, encoded: the same bytes for the same seed.
pub fn encode_image(width: u32, height: u32, format: ImageFormat, seed: u64) -> Vec<u8> {
    let pixels = pixels(width, height, seed);
    encode_pixels(&pixels, width, height, format)
}

/// A seeded picture's RGB bytes: a diagonal gradient between two seeded colours, a few seeded
/// blocks over it, and grain. Drawn by hand (no crate draws such a picture); row by row, each
/// row's block spans found once, so that a pixel costs a few additions and the grain's
/// xorshift (a 1280×720 picture: about 3 ms).
fn pixels(width: u32, height: u32, seed: u64) -> Vec<u8> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let from: [f32; 3] = std::array::from_fn(|_| rng.random_range(0.0..255.0));
    let to: [f32; 3] = std::array::from_fn(|_| rng.random_range(0.0..255.0));
    let blocks: Vec<(u32, u32, u32, u32, [u8; 3])> = (0..6)
        .map(|_| {
            let (x, y) = (rng.random_range(0..width), rng.random_range(0..height));
            let (w, h) = (
                rng.random_range(1..=width / 3 + 1),
                rng.random_range(1..=height / 3 + 1),
            );
            (x, y, w, h, std::array::from_fn(|_| rng.random()))
        })
        .collect();
    let mut grain = rng.random::<u64>() | 1;
    let span = (width + height).max(1) as f32;
    let step: [f32; 3] = std::array::from_fn(|c| (to[c] - from[c]) / span);
    let row_bytes = width as usize * 3;
    let mut pixels = vec![0u8; row_bytes * height as usize];
    for (y, row) in pixels.chunks_exact_mut(row_bytes).enumerate() {
        let y = y as u32;
        // The gradient along the row.
        for (x, pixel) in row.chunks_exact_mut(3).enumerate() {
            let t = (x as u32 + y) as f32;
            for c in 0..3 {
                pixel[c] = (from[c] + step[c] * t) as u8;
            }
        }
        // Blocks over it, later ones on top.
        for &(bx, by, bw, bh, colour) in &blocks {
            if y < by || y >= by.saturating_add(bh) {
                continue;
            }
            let (left, right) = (bx as usize, bx.saturating_add(bw).min(width) as usize);
            for pixel in row[left * 3..right * 3].chunks_exact_mut(3) {
                pixel.copy_from_slice(&colour);
            }
        }
        // Grain of -12..11 per channel (xorshift64: three channels from one draw).
        for pixel in row.chunks_exact_mut(3) {
            grain ^= grain << 13;
            grain ^= grain >> 7;
            grain ^= grain << 17;
            for (c, value) in pixel.iter_mut().enumerate() {
                let noise = ((grain >> (c * 8)) & 0xff) as i16 % 24 - 12;
                *value = (*value as i16 + noise).clamp(0, 255) as u8;
            }
        }
    }
    pixels
}

/// RGB bytes as PNG or JPEG. Encoding pixels we made, of sizes the plan bounded, into memory
/// cannot fail; were it to, the request carries an empty file and the server's answer says so.
fn encode_pixels(pixels: &[u8], width: u32, height: u32, format: ImageFormat) -> Vec<u8> {
    let mut out = Vec::new();
    let encoded = match format {
        ImageFormat::Png => image::codecs::png::PngEncoder::new(&mut out)
            .write_image(pixels, width, height, image::ExtendedColorType::Rgb8)
            .is_ok(),
        ImageFormat::Jpeg { quality } => {
            let (Ok(w), Ok(h)) = (u16::try_from(width), u16::try_from(height)) else {
                return Vec::new();
            };
            jpeg_encoder::Encoder::new(&mut out, quality)
                .encode(pixels, w, h, jpeg_encoder::ColorType::Rgb)
                .is_ok()
        }
    };
    if !encoded {
        return Vec::new();
    }
    out
}

use image::ImageEncoder;

/// A seeded WAV clip: 16-bit mono at the plan's rate, a tone of a seeded pitch (120–400 Hz, a
/// voice's range) or white noise.
pub fn encode_wav(audio: &Audio, seed: u64) -> Vec<u8> {
    let spec = hound::WavSpec {
        channels: 1,
        sample_rate: audio.sample_rate,
        bits_per_sample: 16,
        sample_format: hound::SampleFormat::Int,
    };
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let pitch: f64 = rng.random_range(120.0..400.0);
    let mut out = Cursor::new(Vec::with_capacity(audio.wav_bytes() as usize));
    let written = (|| -> Result<(), hound::Error> {
        let mut writer = hound::WavWriter::new(&mut out, spec)?;
        for n in 0..audio.samples() {
            let sample = match audio.signal {
                Signal::Tone => {
                    let t = n as f64 / f64::from(audio.sample_rate);
                    0.3 * (std::f64::consts::TAU * pitch * t).sin()
                }
                Signal::Noise => rng.random_range(-0.3..0.3),
            };
            writer.write_sample((sample * f64::from(i16::MAX)) as i16)?;
        }
        writer.finalize()
    })();
    if written.is_err() {
        return Vec::new();
    }
    out.into_inner()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::MediaPosition;
    use std::time::Duration;

    fn plan() -> MediaPlan {
        MediaPlan {
            images: Some((
                Images {
                    count_min: 1,
                    count_max: 3,
                    sizes: vec![
                        ImageSize {
                            width: 64,
                            height: 48,
                            weight: 1.0,
                        },
                        ImageSize {
                            width: 32,
                            height: 32,
                            weight: 1.0,
                        },
                    ],
                    format: ImageFormat::Png,
                    position: MediaPosition::Before,
                },
                WeightedIndex::new([1.0, 1.0]).unwrap(),
            )),
            audio: Some(Audio {
                length: Duration::from_millis(250),
                sample_rate: 16_000,
                signal: Signal::Tone,
                position: MediaPosition::After,
            }),
        }
    }

    #[test]
    fn the_same_seed_makes_the_same_bytes_and_another_seed_others() {
        let media = plan();
        let draw = MediaDraw {
            images: 2,
            audio: true,
        };
        let a = media.attachments(7, draw);
        assert_eq!(a.len(), 3);
        assert_eq!(a, media.attachments(7, draw));
        assert_ne!(a[0].base64, media.attachments(8, draw)[0].base64);
        // The two images of one request differ too.
        assert_ne!(a[0].base64, a[1].base64);
    }

    #[test]
    fn images_decode_to_their_sizes_and_clips_to_their_length() {
        for format in [ImageFormat::Png, ImageFormat::Jpeg { quality: 80 }] {
            let bytes = encode_image(64, 48, format, 3);
            let decoded = image::load_from_memory(&bytes).unwrap();
            assert_eq!((decoded.width(), decoded.height()), (64, 48));
        }
        let audio = plan().audio.unwrap();
        let wav = encode_wav(&audio, 1);
        assert_eq!(wav.len() as u64, audio.wav_bytes());
        let reader = hound::WavReader::new(Cursor::new(wav)).unwrap();
        assert_eq!(reader.duration(), 4000);
        assert_eq!(reader.spec().sample_rate, 16_000);
    }

    #[test]
    fn counts_are_drawn_within_the_plan_and_sizes_from_the_seed() {
        let media = plan();
        let counts: Vec<u8> = (0..200).map(|seed| media.draw(seed).images).collect();
        assert!(counts.iter().all(|n| (1..=3).contains(n)));
        assert!((1..=3).all(|n| counts.contains(&n)));
        let draw = MediaDraw {
            images: 3,
            audio: false,
        };
        assert_eq!(media.image_sizes(5, draw), media.image_sizes(5, draw));
        assert_eq!(media.attachments(5, draw).len(), 3);
    }
}
