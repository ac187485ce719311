//! Images and audio in requests, over loopback: what reaches a capturing server (valid PNG,
//! JPEG and WAV of the asked sizes, in the asked place, the same bytes for the same seed),
//! and the simulator's vision mode, whose TTFT grows with image size and count as its formula
//! says.

mod common;

use std::net::TcpStream;

use base64::Engine;
use common::wire::{capture, respond, send, Seen, SSE_HEAD};
use common::{run_plan, serial};

fn chat_stream(seen: &Seen, stream: &mut TcpStream) {
    if seen.line.starts_with("GET") {
        respond(stream, "404 Not Found", "{}");
        return;
    }
    send(
        stream,
        &format!(
            "{SSE_HEAD}data: {{\"choices\":[{{\"delta\":{{\"content\":\"ok\"}}}}]}}\n\n\
             data: {{\"choices\":[{{\"delta\":{{}},\"finish_reason\":\"length\"}}]}}\n\n\
             data: {{\"choices\":[],\"usage\":{{\"prompt_tokens\":900,\"completion_tokens\":1}}}}\n\n\
             data: [DONE]\n\n"
        ),
    );
}

fn decode(data: &str) -> Vec<u8> {
    base64::engine::general_purpose::STANDARD
        .decode(data)
        .expect("base64")
}

/// The bodies of one run of a plan that sends 2 images (PNG or JPEG, of two sizes) and a clip.
fn captured_bodies(format: &str, position: &str) -> Vec<serde_json::Value> {
    let (port, seen) = capture(chat_stream);
    let plan = format!(
        r#"plan "media" {{ seed 11; }}
target "http://127.0.0.1:{port}" {{ model "vl"; api "chat"; stream #true; metrics #false; connections "cold"; }}
workload {{
    input 24
    output 1
    images count=2 format="{format}" position="{position}" {{
        size "64x48" weight=1
        size "40x40" weight=1
    }}
    audio "250ms" sample-rate=8000 signal="noise" position="{position}"
}}
phase "p" {{ concurrency 1; requests 6; }}
"#
    );
    let run = run_plan(&plan, &[]);
    assert_eq!(run.code(), 0, "{}{}", run.stdout(), run.stderr());
    // Records say what each request carried.
    for record in run.records() {
        assert_eq!(
            record["images"].as_array().map(Vec::len),
            Some(2),
            "{record}"
        );
        assert_eq!(record["audio_ms"], 250, "{record}");
        assert!(record["request_bytes"].as_u64().unwrap() > 1000, "{record}");
    }
    let seen = seen.lock().unwrap().clone();
    seen.iter()
        .filter(|s| s.line.starts_with("POST"))
        .map(Seen::json)
        .collect()
}

#[test]
fn images_and_audio_reach_the_server_valid_sized_placed_and_the_same_for_the_same_seed() {
    let _serial = serial();
    for (format, mime, position) in [
        ("png", "image/png", "before"),
        ("jpeg", "image/jpeg", "after"),
    ] {
        let bodies = captured_bodies(format, position);
        assert_eq!(bodies.len(), 6);
        let mut sizes_seen = std::collections::BTreeSet::new();
        for body in &bodies {
            let parts = body["messages"][0]["content"]
                .as_array()
                .unwrap_or_else(|| panic!("content parts: {body}"));
            assert_eq!(parts.len(), 4, "{body}");
            let kinds: Vec<&str> = parts.iter().map(|p| p["type"].as_str().unwrap()).collect();
            let expected = match position {
                "before" => ["image_url", "image_url", "input_audio", "text"],
                _ => ["text", "image_url", "image_url", "input_audio"],
            };
            assert_eq!(kinds, expected);
            for part in parts.iter().filter(|p| p["type"] == "image_url") {
                let url = part["image_url"]["url"].as_str().unwrap();
                let data = url
                    .strip_prefix(&format!("data:{mime};base64,"))
                    .unwrap_or_else(|| panic!("a {mime} data URL: {}", &url[..40]));
                let bytes = decode(data);
                let guessed = image::guess_format(&bytes).unwrap();
                assert_eq!(guessed.to_mime_type(), mime);
                let picture = image::load_from_memory(&bytes).expect("a valid image");
                let size = (picture.width(), picture.height());
                assert!(size == (64, 48) || size == (40, 40), "{size:?}");
                sizes_seen.insert(size);
            }
            let audio = parts.iter().find(|p| p["type"] == "input_audio").unwrap();
            assert_eq!(audio["input_audio"]["format"], "wav");
            let wav = decode(audio["input_audio"]["data"].as_str().unwrap());
            let reader = hound::WavReader::new(std::io::Cursor::new(wav)).expect("a WAV file");
            assert_eq!(reader.spec().sample_rate, 8000);
            assert_eq!(reader.duration(), 2000, "250 ms at 8 kHz");
        }
        assert_eq!(sizes_seen.len(), 2, "both sizes are drawn: {sizes_seen:?}");
        // Each request's images are its own.
        let first_images: std::collections::BTreeSet<String> = bodies
            .iter()
            .map(|b| b["messages"][0]["content"].to_string())
            .collect();
        assert_eq!(first_images.len(), 6);
        // The same plan and seed send the same bytes.
        assert_eq!(bodies, captured_bodies(format, position), "{format}");
    }
}

/// Prompt tokens (Qwen2-VL's count): ⌈w/28⌉·⌈h/28⌉ per image.
fn image_tokens(w: u32, h: u32) -> f64 {
    f64::from(w.div_ceil(28) * h.div_ceil(28))
}

#[test]
fn the_simulators_ttft_grows_with_image_size_and_count_as_its_formula_says() {
    let _serial = serial();
    let plan = r#"plan "vision" { seed 5; }
target "sim" { api "chat"; stream #true; }
sim { ttft "10ms"; itl "1ms"; vision patch=28 encode="15ms" per-token="40us"; }
workload {
    input 32
    output 4
    images min=0 max=2 format="jpeg" quality=80 {
        size "448x448" weight=1
        size "896x672" weight=1
    }
}
phase "p" { concurrency 2; requests 120; }
"#;
    let run = run_plan(plan, &[]);
    assert_eq!(run.code(), 0, "{}{}", run.stdout(), run.stderr());
    let summary = run.summary();
    let groups = summary["by_media"].as_array().expect("by_media");
    let mut checked = 0;
    for group in groups {
        let label = group["media"].as_str().unwrap();
        let images = group["images"].as_u64().unwrap() as u32;
        let per_image = match label {
            "no media" => None,
            l if l.ends_with("448x448") => Some(image_tokens(448, 448)),
            l if l.ends_with("896x672") => Some(image_tokens(896, 672)),
            // Mixed sizes: one of each, in either order.
            _ => None,
        };
        let tokens = match (images, per_image, label) {
            (0, _, _) => 0.0,
            (_, Some(each), _) => each * f64::from(images),
            (2, None, l) if l.contains("mixed") => image_tokens(448, 448) + image_tokens(896, 672),
            other => panic!("unexpected group {other:?}"),
        };
        // TTFT = ttft + images × encode + media tokens × per-token.
        let expected = 10.0 + 15.0 * f64::from(images) + tokens * 0.040;
        let p50 = group["ttft_ms"]["p50"].as_f64().unwrap();
        assert!(
            (p50 - expected).abs() <= expected * 0.10,
            "{label}: TTFT p50 {p50:.1} ms, the formula says {expected:.1} ms"
        );
        // The server counts the images' tokens as prompt tokens: the table shows their cost.
        let media_tokens = group["media_tokens_mean"].as_f64().unwrap();
        assert!(
            (media_tokens - tokens).abs() < 0.5,
            "{label}: media tokens {media_tokens}, expected {tokens}"
        );
        checked += 1;
    }
    assert!(checked >= 5, "every count and size was drawn: {groups:?}");
    // Text tokens are still checked against the plan; the images' are not a miscount.
    assert!(
        common::warning_of(&summary, "input-tokens").is_none(),
        "{}",
        summary["warnings"]
    );
    let report = std::fs::read_to_string(run.out().join("report.md")).unwrap();
    assert!(report.contains("## By media"), "{report}");
    assert!(report.contains("| 2 × 896x672 |"), "{report}");
}
