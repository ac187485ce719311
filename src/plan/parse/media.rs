//! `images` and `audio` in the workload: the media each request carries (see
//! [`crate::plan::Images`], [`crate::plan::Audio`]).

use kdl::{KdlNode, KdlValue};

use super::cx::{positional, Cx, Handler};
use super::values::{Count, Dur, Flag, Text, WEIGHT};
use crate::plan::limits::{
    IMAGE_SIDE_RANGE, MAX_AUDIO, MAX_IMAGES_PER_REQUEST, MAX_IMAGE_SIZES, MAX_PIXELS_PER_REQUEST,
    SAMPLE_RATE_RANGE,
};
use crate::plan::{Audio, ImageFormat, ImageSize, ImageUrls, Images, MediaPosition, Signal};

const IMAGES_USAGE: &str = "images count=1 format=\"jpeg\" quality=85 position=\"before\" { size \"512x512\" weight=3; size \"1280x720\" weight=1 } (min=0 max=4 draws the count per request)";
const AUDIO_USAGE: &str =
    "audio \"5s\" sample-rate=16000 signal=\"tone\" position=\"before\" (signal \"noise\" for white noise)";

/// `position="before"` or `"after"`.
fn position(cx: &mut Cx, node: &KdlNode, usage: &str) -> Option<MediaPosition> {
    let name = cx.prop_or(node, "position", "before".to_string(), usage, Text)?;
    match name.as_str() {
        "before" => Some(MediaPosition::Before),
        "after" => Some(MediaPosition::After),
        other => {
            let span =
                super::cx::property(node, "position").map_or(node.name().span(), |e| e.span());
            cx.error(
                span,
                format!("position \"{other}\" is neither before nor after the text"),
                "unknown position",
                "write position=\"before\" (the media, then the text) or position=\"after\"",
            );
            None
        }
    }
}

/// `"1280x720"`: an image's width and height.
fn parse_size(text: &str) -> Result<(u32, u32), String> {
    let (low, high) = IMAGE_SIDE_RANGE;
    let (width, height) = text
        .split_once(['x', 'X', '×'])
        .ok_or_else(|| format!("\"{text}\" is not a size: write it as \"WIDTHxHEIGHT\""))?;
    let side = |s: &str| -> Result<u32, String> {
        let n: u32 = s
            .trim()
            .parse()
            .map_err(|_| format!("\"{s}\" is not a whole number of pixels"))?;
        if !(low..=high).contains(&n) {
            return Err(format!(
                "{n} pixels is out of range: a side is {low} to {high}"
            ));
        }
        Ok(n)
    };
    Ok((side(width)?, side(height)?))
}

/// What the `images` block's children give.
struct Sizes {
    sizes: Vec<ImageSize>,
    broken: bool,
}

const SIZES: &[(&str, Handler<Sizes>)] = &[("size", |cx, node, sizes| {
    let usage = "size \"1280x720\" weight=1";
    cx.no_children(node);
    cx.check_entries(node, 1, &["weight"], usage);
    let weight = cx.prop_or(node, "weight", 1.0, usage, WEIGHT);
    let Some(entry) = cx.required_arg(node, usage) else {
        sizes.broken = true;
        return;
    };
    let parsed = match entry.value() {
        KdlValue::String(text) => parse_size(text),
        _ => Err("a size is a string: \"1280x720\"".to_string()),
    };
    match (parsed, weight) {
        (Ok((width, height)), Some(weight)) => {
            if sizes.sizes.len() >= MAX_IMAGE_SIZES {
                cx.error(
                    node.name().span(),
                    format!("more than {MAX_IMAGE_SIZES} image sizes"),
                    "too many",
                    "merge sizes that cost the model about the same",
                );
                sizes.broken = true;
                return;
            }
            sizes.sizes.push(ImageSize {
                width,
                height,
                weight,
            })
        }
        (Err(why), _) => {
            cx.error(
                entry.span(),
                why,
                "not a size",
                format!("write it as: {usage}"),
            );
            sizes.broken = true;
        }
        (_, None) => sizes.broken = true,
    }
})];

/// The `images` node.
pub(super) fn images(cx: &mut Cx, node: &KdlNode) -> Option<Images> {
    let usage = IMAGES_USAGE;
    cx.check_entries(
        node,
        0,
        &["count", "min", "max", "format", "quality", "position"],
        usage,
    );
    let count = || Count {
        min: 0,
        max: MAX_IMAGES_PER_REQUEST,
    };
    let fixed = cx.prop(node, "count", usage, count());
    let min = cx.prop(node, "min", usage, count());
    let max = cx.prop(node, "max", usage, count());
    let counts = match (fixed, min, max) {
        (Ok(Some(n)), Ok(None), Ok(None)) => Some((n, n)),
        (Ok(None), Ok(None), Ok(None)) => Some((1, 1)),
        (Ok(None), Ok(Some(min)), Ok(Some(max))) if min <= max && max > 0 => Some((min, max)),
        (Ok(None), Ok(Some(_)), Ok(Some(_))) => {
            cx.error(
                node.name().span(),
                "`images` has min above max, or at most none",
                "counts",
                usage,
            );
            None
        }
        (Ok(_), Ok(_), Ok(_)) => {
            cx.error(
                node.name().span(),
                "`images` takes count=N, or both min= and max=",
                "counts",
                usage,
            );
            None
        }
        _ => None,
    };
    let format = match cx.prop_or(node, "format", "jpeg".to_string(), usage, Text) {
        Some(name) if name == "png" || name == "jpeg" || name == "jpg" => Some(name),
        Some(other) => {
            let span = super::cx::property(node, "format").map_or(node.name().span(), |e| e.span());
            cx.error(
                span,
                format!("format \"{other}\" is not one llmload encodes"),
                "unknown format",
                "write format=\"jpeg\" (with quality=1..100) or format=\"png\"",
            );
            None
        }
        None => None,
    };
    let quality = cx.prop(node, "quality", usage, Count { min: 1, max: 100 });
    let format = match (format.as_deref(), quality) {
        (Some("png"), Ok(Some(_))) => {
            let span =
                super::cx::property(node, "quality").map_or(node.name().span(), |e| e.span());
            cx.error(
                span,
                "PNG is lossless: it has no quality",
                "not for png",
                "remove quality=, or write format=\"jpeg\"",
            );
            None
        }
        (Some("png"), Ok(None)) => Some(ImageFormat::Png),
        (Some(_), Ok(quality)) => Some(ImageFormat::Jpeg {
            quality: quality.unwrap_or(85) as u8,
        }),
        _ => None,
    };
    let position = position(cx, node, usage);
    let mut sizes = Sizes {
        sizes: Vec::new(),
        broken: false,
    };
    cx.walk(node, "in `images`", SIZES, &mut sizes);
    if sizes.sizes.is_empty() && !sizes.broken {
        cx.error(
            node.name().span(),
            "`images` has no size",
            "sizes missing",
            format!("add at least one size in its block: {usage}"),
        );
        return None;
    }
    let ((count_min, count_max), format, position) = (counts?, format?, position?);
    if sizes.broken {
        return None;
    }
    let largest = sizes
        .sizes
        .iter()
        .map(|s| u64::from(s.width) * u64::from(s.height))
        .max()
        .unwrap_or(0);
    if largest * count_max > MAX_PIXELS_PER_REQUEST {
        cx.error(
            node.name().span(),
            format!(
                "a request may carry {count_max} images of {:.1} megapixels: {:.1} in all, more than one request's images may be ({:.1})",
                largest as f64 / 1e6,
                (largest * count_max) as f64 / 1e6,
                MAX_PIXELS_PER_REQUEST as f64 / 1e6
            ),
            "too many pixels",
            "send fewer or smaller images per request; every image is made in memory and sent in one body",
        );
        return None;
    }
    Some(Images {
        count_min: count_min as u32,
        count_max: count_max as u32,
        sizes: sizes.sizes,
        format,
        position,
    })
}

/// The `audio` node.
/// `image-urls #true host="127.0.0.1" port=8090`: images served by llmload on loopback and
/// sent as URLs. `None` after a diagnostic; `Some(None)` for `image-urls #false`.
pub(super) fn image_urls(cx: &mut Cx, node: &KdlNode) -> Option<Option<ImageUrls>> {
    let usage = "image-urls #true host=\"127.0.0.1\" port=0 (images served by llmload on loopback, sent as URLs)";
    cx.no_children(node);
    cx.check_entries(node, 1, &["host", "port"], usage);
    let on = match positional(node).next() {
        Some(_) => cx.arg(node, usage, Flag)?,
        None => true,
    };
    let host_text = cx.prop_or(node, "host", "127.0.0.1".to_string(), usage, Text)?;
    let port = cx.prop_or(
        node,
        "port",
        0,
        usage,
        Count {
            min: 0,
            max: 65_535,
        },
    )?;
    let host = match host_text.as_str() {
        "localhost" => Some(std::net::IpAddr::from([127, 0, 0, 1])),
        text => text
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<std::net::IpAddr>()
            .ok()
            .filter(|ip| ip.is_loopback()),
    };
    let Some(host) = host else {
        let span = super::cx::property(node, "host").map_or(node.name().span(), |e| e.span());
        cx.error(
            span,
            format!("image-urls host \"{host_text}\" is not a loopback address"),
            "not loopback",
            "llmload serves images on loopback only: host=\"127.0.0.1\" or host=\"::1\" (the server under test must run on this machine)",
        );
        return None;
    };
    Some(on.then_some(ImageUrls {
        host,
        port: port as u16,
    }))
}

pub(super) fn audio(cx: &mut Cx, node: &KdlNode) -> Option<Audio> {
    let usage = AUDIO_USAGE;
    cx.no_children(node);
    cx.check_entries(node, 1, &["sample-rate", "signal", "position"], usage);
    let length = match positional(node).next() {
        Some(_) => cx.arg(node, usage, Dur { zero_ok: false }),
        None => {
            cx.error(
                node.name().span(),
                "`audio` needs the clip's length",
                "length missing",
                format!("write it as: {usage}"),
            );
            None
        }
    };
    let length = match length {
        Some(length) if length > MAX_AUDIO => {
            cx.error(
                super::cx::first_arg_span(node),
                format!(
                    "a clip of {} s is longer than llmload sends ({} s)",
                    length.as_secs_f64(),
                    MAX_AUDIO.as_secs()
                ),
                "too long",
                "send a shorter clip; a long recording is many requests",
            );
            None
        }
        other => other,
    };
    let (low, high) = SAMPLE_RATE_RANGE;
    let sample_rate = cx.prop_or(
        node,
        "sample-rate",
        16_000,
        usage,
        Count {
            min: low,
            max: high,
        },
    );
    let signal = match cx.prop_or(node, "signal", "tone".to_string(), usage, Text) {
        Some(name) if name == "tone" => Some(Signal::Tone),
        Some(name) if name == "noise" => Some(Signal::Noise),
        Some(other) => {
            let span = super::cx::property(node, "signal").map_or(node.name().span(), |e| e.span());
            cx.error(
                span,
                format!("signal \"{other}\" is neither a tone nor noise"),
                "unknown signal",
                "write signal=\"tone\" or signal=\"noise\"",
            );
            None
        }
        None => None,
    };
    let position = position(cx, node, usage);
    Some(Audio {
        length: length?,
        sample_rate: sample_rate? as u32,
        signal: signal?,
        position: position?,
    })
}

#[cfg(test)]
mod tests {
    use super::parse_size;

    #[test]
    fn sizes_are_width_by_height_within_bounds() {
        assert_eq!(parse_size("1280x720"), Ok((1280, 720)));
        assert_eq!(parse_size("64X48"), Ok((64, 48)));
        assert!(parse_size("1280").unwrap_err().contains("WIDTHxHEIGHT"));
        assert!(parse_size("4x720").unwrap_err().contains("out of range"));
        assert!(parse_size("axb")
            .unwrap_err()
            .contains("not a whole number"));
    }
}
