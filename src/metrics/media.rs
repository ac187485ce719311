//! The recorded requests by the media they carried (a multimodal workload): TTFT by image
//! count and size, the bytes each request sent, and the prompt tokens the server counted for
//! its images and audio beyond the text's.

use std::collections::BTreeMap;

use serde::Serialize;

use super::aggregator::BucketAccumulator;
use super::distribution::Summary;
use crate::records::{RequestRecord, TokenSource};

/// Distinct media groups listed; a run's records (a crafted file) never size our memory.
const MAX_GROUPS: usize = 256;

/// The recorded requests that carried one kind of media: the same number of images, all of one
/// size (or of several, "mixed"), and the same audio.
#[derive(Debug, Clone, Serialize)]
pub struct MediaBucket {
    /// What its requests carried, as the report says it: `2 × 1280x720 + 5 s audio`.
    pub media: String,
    /// Images per request.
    pub images: u32,
    /// Audio per request, ms.
    pub audio_ms: u32,
    /// Requests sent.
    pub sent: u64,
    /// Requests that succeeded.
    pub ok: u64,
    /// Requests that failed.
    pub failed: u64,
    /// Bytes of each request's body, on average.
    pub request_bytes_mean: f64,
    /// The text's prompt tokens as planned, on average.
    pub text_tokens_mean: f64,
    /// The prompt tokens the server counted (usage), on average over the requests it said it
    /// for.
    pub prompt_tokens_mean: Option<f64>,
    /// What the media cost in prompt tokens: the server's count less the text's, on average.
    pub media_tokens_mean: Option<f64>,
    /// Images its requests sent as URLs (`image-urls`), and how many of them the server fetched.
    pub images_by_url: u64,
    /// Of `images_by_url`, those fetched.
    pub images_fetched: u64,
    /// The bodies' upload (send → last byte taken by the socket), within TTFT; empty where the
    /// bodies were small or the transport could not tell.
    pub upload_ms: Summary,
    /// TTFT of its requests.
    pub ttft_ms: Summary,
    /// E2E of its successful requests.
    pub e2e_ms: Summary,
}

/// The key a request is grouped by: images, each image's pixels (the most when mixed), audio,
/// label.
type Key = (u32, u64, u32, String);

struct Group {
    by_url: u64,
    fetched: u64,
    requests: BucketAccumulator,
    upload: super::distribution::Distribution,
    bytes: f64,
    text_tokens: f64,
    observed: f64,
    observed_n: u64,
}

/// Gathers [`MediaBucket`]s from records.
#[derive(Default)]
pub(super) struct MediaAccumulator {
    groups: BTreeMap<Key, Group>,
    any_media: bool,
}

fn key(record: &RequestRecord) -> Key {
    let images = record.images.as_deref().unwrap_or(&[]);
    let audio_ms = record.audio_ms.unwrap_or(0);
    let (pixels, size) = match images {
        [] => (0, String::new()),
        [first, rest @ ..] if rest.iter().all(|size| size == first) => (
            u64::from(first[0]) * u64::from(first[1]),
            format!("{}x{}", first[0], first[1]),
        ),
        // Listed after the count's single sizes.
        _ => (u64::MAX, "mixed sizes".to_string()),
    };
    let mut label = Vec::new();
    if !images.is_empty() {
        label.push(format!("{} × {size}", images.len()));
    }
    if audio_ms > 0 {
        let seconds = format!("{:.3}", f64::from(audio_ms) / 1000.0);
        let seconds = seconds.trim_end_matches('0').trim_end_matches('.');
        label.push(format!("{seconds} s audio"));
    }
    if label.is_empty() {
        label.push("no media".to_string());
    }
    (images.len() as u32, pixels, audio_ms, label.join(" + "))
}

impl MediaAccumulator {
    pub(super) fn add(&mut self, record: &RequestRecord) {
        self.any_media |= record.carries_media();
        let mut key = key(record);
        if !self.groups.contains_key(&key) && self.groups.len() >= MAX_GROUPS {
            key = (u32::MAX, 0, 0, "other media".to_string());
        }
        let group = self.groups.entry(key).or_insert_with(|| Group {
            by_url: 0,
            fetched: 0,
            requests: BucketAccumulator::new(),
            upload: super::distribution::Distribution::milliseconds(),
            bytes: 0.0,
            text_tokens: 0.0,
            observed: 0.0,
            observed_n: 0,
        });
        group.requests.add(record);
        if let Some(fetched) = record.images_fetched {
            let sent = record.images.as_ref().map_or(0, Vec::len) as u64;
            group.by_url += sent;
            group.fetched += u64::from(fetched).min(sent);
        }
        if let Some(upload) = super::table::upload_ms(record) {
            group.upload.record(upload);
        }
        group.bytes += record.request_bytes.unwrap_or(0) as f64;
        group.text_tokens += f64::from(record.input_tokens_planned);
        if let (None, Some(prompt), Some(TokenSource::Usage)) =
            (record.error, record.prompt_tokens, record.token_source)
        {
            group.observed += prompt as f64;
            group.observed_n += 1;
        }
    }

    /// The groups, fewest images and smallest first; none when no request carried media.
    pub(super) fn finish(self) -> Vec<MediaBucket> {
        if !self.any_media {
            return Vec::new();
        }
        self.groups
            .into_iter()
            .map(|((images, _, audio_ms, media), g)| {
                let sent = g.requests.sent.max(1) as f64;
                let text_tokens_mean = g.text_tokens / sent;
                let prompt_tokens_mean =
                    (g.observed_n > 0).then(|| g.observed / g.observed_n as f64);
                MediaBucket {
                    media,
                    images,
                    audio_ms,
                    sent: g.requests.sent,
                    ok: g.requests.ok,
                    failed: g.requests.failed,
                    request_bytes_mean: g.bytes / sent,
                    text_tokens_mean,
                    prompt_tokens_mean,
                    media_tokens_mean: prompt_tokens_mean.map(|p| (p - text_tokens_mean).max(0.0)),
                    images_by_url: g.by_url,
                    images_fetched: g.fetched,
                    upload_ms: g.upload.summary(),
                    ttft_ms: g.requests.ttft.summary(),
                    e2e_ms: g.requests.e2e.summary(),
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(images: &[[u32; 2]], ttft_us: u64, prompt: u64) -> RequestRecord {
        RequestRecord {
            images: (!images.is_empty()).then(|| images.to_vec()),
            request_bytes: Some(1000),
            input_tokens_planned: 64,
            prompt_tokens: Some(prompt),
            token_source: Some(crate::records::TokenSource::Usage),
            ttft_us: Some(ttft_us),
            e2e_us: Some(ttft_us + 1000),
            ..RequestRecord::default()
        }
    }

    #[test]
    fn requests_are_grouped_by_image_count_and_size_with_their_media_tokens() {
        let mut media = MediaAccumulator::default();
        media.add(&record(&[[448, 448]], 40_000, 320));
        media.add(&record(&[[448, 448]], 42_000, 320));
        media.add(&record(&[[896, 896]], 80_000, 1088));
        media.add(&record(&[[448, 448], [896, 896]], 120_000, 1344));
        let buckets = media.finish();
        let labels: Vec<&str> = buckets.iter().map(|b| b.media.as_str()).collect();
        assert_eq!(labels, ["1 × 448x448", "1 × 896x896", "2 × mixed sizes"]);
        assert_eq!(buckets[0].sent, 2);
        assert_eq!(buckets[0].media_tokens_mean, Some(256.0));
        assert_eq!(buckets[1].media_tokens_mean, Some(1024.0));
        assert_eq!(buckets[0].request_bytes_mean, 1000.0);
    }

    #[test]
    fn a_run_without_media_has_no_table() {
        let mut media = MediaAccumulator::default();
        media.add(&record(&[], 1000, 64));
        assert!(media.finish().is_empty());
    }
}
