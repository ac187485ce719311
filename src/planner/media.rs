//! The images and audio a request carries: drawn per request by the planner (how many images,
//! and whether a clip), made from the request's seed by the prompt source (which sizes, and the
//! bytes themselves), the same bytes for the same plan and seed.
//!
//! Each image is synthetic and unique to its request, so that no server cache (vLLM's
//! multimodal processor cache keys images by their pixels) serves one image twice and flatters
//! the run: a seeded gradient, a few seeded blocks and seeded grain — grain that makes a JPEG
//! about as large as a photograph of the same size (a 1280×720 one at quality 85 is about
//! 0.3 MB), where a flat synthetic image would be a few kilobytes. Made on the body builder's
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
            let bytes = encode_wav(audio, crate::seed::mix64(prompt_seed ^ 0x6175_6469_6f));
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
    }
}

/// A seeded image's pixels, encoded. Written by hand: an image crate draws no such picture,
/// and the grain's xorshift costs a few ns a pixel (a 1280×720 image: about 5 ms, most of it
/// the encoder's).
pub fn encode_image(width: u32, height: u32, format: ImageFormat, seed: u64) -> Vec<u8> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    // A diagonal gradient between two seeded colours, and a few seeded blocks over it.
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
    let mut pixels = vec![0u8; width as usize * height as usize * 3];
    for y in 0..height {
        for x in 0..width {
            let t = (x + y) as f32 / span;
            let mut colour: [u8; 3] =
                std::array::from_fn(|c| (from[c] + (to[c] - from[c]) * t) as u8);
            if let Some(block) = blocks
                .iter()
                .rev()
                .find(|(bx, by, bw, bh, _)| x >= *bx && x < bx + bw && y >= *by && y < by + bh)
            {
                colour = block.4;
            }
            // xorshift64: grain of ±16 per channel.
            grain ^= grain << 13;
            grain ^= grain >> 7;
            grain ^= grain << 17;
            let at = (y as usize * width as usize + x as usize) * 3;
            for (c, value) in colour.iter().enumerate() {
                let noise = ((grain >> (c * 8)) & 31) as i16 - 16;
                pixels[at + c] = (*value as i16 + noise).clamp(0, 255) as u8;
            }
        }
    }
    let mut out = Cursor::new(Vec::new());
    let result = match format {
        ImageFormat::Png => image::codecs::png::PngEncoder::new(&mut out).write_image(
            &pixels,
            width,
            height,
            image::ExtendedColorType::Rgb8,
        ),
        ImageFormat::Jpeg { quality } => image::codecs::jpeg::JpegEncoder::new_with_quality(
            &mut out, quality,
        )
        .write_image(&pixels, width, height, image::ExtendedColorType::Rgb8),
    };
    // Encoding pixels we made, of sizes the plan bounded, into memory cannot fail; were it
    // to, the request carries an empty file and the server's answer says so.
    if result.is_err() {
        return Vec::new();
    }
    out.into_inner()
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
