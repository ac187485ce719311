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

/// The JSON bodies of the POSTs a capturing server saw, in order.
fn posted(seen: &std::sync::Mutex<Vec<Seen>>) -> Vec<serde_json::Value> {
    seen.lock()
        .unwrap()
        .iter()
        .filter(|s| s.line.starts_with("POST"))
        .map(Seen::json)
        .collect()
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
    posted(&seen)
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

fn png_of(width: u32, height: u32, shade: u8) -> Vec<u8> {
    let picture = image::RgbImage::from_pixel(width, height, image::Rgb([shade, 40, 200]));
    let mut bytes = Vec::new();
    picture
        .write_to(
            &mut std::io::Cursor::new(&mut bytes),
            image::ImageFormat::Png,
        )
        .unwrap();
    bytes
}

fn wav_of(millis: u32, rate: u32) -> Vec<u8> {
    let spec = hound::WavSpec {
        channels: 1,
        sample_rate: rate,
        bits_per_sample: 16,
        sample_format: hound::SampleFormat::Int,
    };
    let mut bytes = std::io::Cursor::new(Vec::new());
    let mut writer = hound::WavWriter::new(&mut bytes, spec).unwrap();
    for i in 0..rate * millis / 1000 {
        writer.write_sample((i % 200) as i16 * 50).unwrap();
    }
    writer.finalize().unwrap();
    bytes.into_inner()
}

/// A dataset's entries name their own image and audio files (LLaVA's `"image"`, a list under
/// `"images"`, a clip under `"audio"`): each request sends exactly those files' bytes, before
/// its text (the `<image>` marker taken out), and its record says what it carried.
#[test]
fn dataset_entries_send_the_files_they_name() {
    let _serial = serial();
    let (port, seen) = capture(chat_stream);
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("pics")).unwrap();
    let cat = png_of(30, 20, 10);
    let dog = png_of(50, 40, 90);
    let clip = wav_of(300, 8000);
    std::fs::write(dir.path().join("pics/cat.png"), &cat).unwrap();
    std::fs::write(dir.path().join("pics/dog.png"), &dog).unwrap();
    std::fs::write(dir.path().join("q.wav"), &clip).unwrap();
    std::fs::write(
        dir.path().join("vqa.jsonl"),
        "{\"prompt\": \"<image>\\nwhat animal is this\", \"image\": \"pics/cat.png\"}\n\
         {\"prompt\": \"which is bigger\", \"images\": [\"pics/dog.png\", \"pics/cat.png\"], \"audio\": \"q.wav\"}\n\
         {\"prompt\": \"no picture here\"}\n",
    )
    .unwrap();
    let plan = format!(
        r#"plan "vqa" {{ seed 2; }}
target "http://127.0.0.1:{port}" {{ model "vl"; api "chat"; stream #true; metrics #false; connections "cold"; }}
workload {{
    dataset "vqa.jsonl" order="sequential"
    output 1
}}
phase "p" {{ concurrency 1; requests 3; }}
"#
    );
    let run = common::run_in(dir, &plan, &[]);
    assert_eq!(run.code(), 0, "{}{}", run.stdout(), run.stderr());
    let bodies = posted(&seen);
    assert_eq!(bodies.len(), 3);
    let data_of = |part: &serde_json::Value| {
        let url = part["image_url"]["url"].as_str().unwrap();
        decode(url.strip_prefix("data:image/png;base64,").unwrap())
    };
    let first = bodies[0]["messages"][0]["content"].as_array().unwrap();
    assert_eq!(first.len(), 2, "{first:?}");
    assert_eq!(data_of(&first[0]), cat);
    assert_eq!(first[1]["text"], "what animal is this");
    let second = bodies[1]["messages"][0]["content"].as_array().unwrap();
    let kinds: Vec<&str> = second.iter().map(|p| p["type"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["image_url", "image_url", "input_audio", "text"]);
    assert_eq!(data_of(&second[0]), dog);
    assert_eq!(data_of(&second[1]), cat);
    assert_eq!(
        decode(second[2]["input_audio"]["data"].as_str().unwrap()),
        clip
    );
    assert_eq!(bodies[2]["messages"][0]["content"], "no picture here");

    let mut records = run.records();
    records.sort_by_key(|r| r["seq"].as_u64());
    assert_eq!(records[0]["images"], serde_json::json!([[30, 20]]));
    assert_eq!(
        records[1]["images"],
        serde_json::json!([[50, 40], [30, 20]])
    );
    assert_eq!(records[1]["audio_ms"], 300);
    assert!(records[2].get("images").is_none(), "{}", records[2]);

    let shown = common::llmload()
        .arg("plan")
        .arg(run.dir.path().join("plan.kdl"))
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&shown.stdout);
    assert!(
        shown.contains("dataset media: 2 entries name images, 1 audio; 3 files"),
        "{shown}"
    );
}

/// A file an entry names that is missing or not what it says is a plan error pointing at the
/// entry, and nothing is sent.
#[test]
fn dataset_media_mistakes_are_plan_errors_at_the_entry() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("not-a-picture.png"), "hello").unwrap();
    std::fs::write(
        dir.path().join("vqa.jsonl"),
        "{\"prompt\": \"a\", \"image\": \"gone.png\"}\n{\"prompt\": \"b\", \"image\": \"not-a-picture.png\"}\n",
    )
    .unwrap();
    let plan = r#"plan "vqa" { seed 2; }
target "sim" { api "chat"; }
workload { dataset "vqa.jsonl"; output 1; }
phase "p" { concurrency 1; requests 2; }
"#;
    let run = common::run_in(dir, plan, &[]);
    assert_eq!(run.code(), 2, "{}", run.stderr());
    let err = run.stderr();
    assert!(err.contains("entry 1: gone.png: cannot read it"), "{err}");
    assert!(
        err.contains("entry 2: not-a-picture.png: not a PNG or JPEG"),
        "{err}"
    );
    assert!(
        err.contains("vqa.jsonl:1"),
        "the caret is in the dataset: {err}"
    );
    assert!(!run.out().join("records.jsonl").exists());

    // An API that carries no images refuses a dataset that names some.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.png"), png_of(8, 8, 1)).unwrap();
    std::fs::write(
        dir.path().join("vqa.jsonl"),
        "{\"prompt\": \"a\", \"image\": \"a.png\"}\n",
    )
    .unwrap();
    let run = common::run_in(dir, &plan.replace("\"chat\"", "\"completions\""), &[]);
    assert_eq!(run.code(), 2);
    let err = run.stderr();
    assert!(
        err.contains("api \"completions\" carries no images (the image files the dataset's"),
        "{err}"
    );
}

/// A closed loop whose users want bodies faster than the one body-building thread makes them
/// (two 1280x720 PNGs each, against a simulator that answers in milliseconds) is flagged: the
/// client, not the server, held the load down.
#[test]
fn a_closed_loop_starved_of_bodies_is_flagged() {
    let _serial = serial();
    let plan = r#"plan "starved" { seed 5; }
target "sim" { api "chat"; stream #true; }
sim { ttft "2ms"; itl "1ms"; }
workload {
    input 16
    output 2
    images count=2 format="png" { size "1280x720"; }
}
phase "p" { concurrency 8; duration "2s"; }
"#;
    let run = run_plan(plan, &[]);
    assert_eq!(run.code(), 0, "{}{}", run.stdout(), run.stderr());
    let summary = run.summary();
    let warning = common::warning_of(&summary, "body-builder").unwrap_or_else(|| {
        panic!(
            "no body-builder warning: {}",
            summary["phases"][0]["body_wait"]
        )
    });
    assert!(
        warning["message"].as_str().unwrap().contains("waited"),
        "{warning}"
    );
    let wait = &summary["phases"][0]["body_wait"];
    assert!(wait["waited_s"].as_f64().unwrap() > 0.5, "{wait}");
    assert!(
        (wait["users_s"].as_f64().unwrap() - 16.0).abs() < 2.0,
        "8 users for 2 s: {wait}"
    );
}

/// What the fetching server below fetched: each image's bytes, and the status of a fetch made
/// once its request had ended.
static FETCHED: std::sync::Mutex<Vec<Vec<u8>>> = std::sync::Mutex::new(Vec::new());

fn http_get(url: &str) -> (u16, Vec<u8>) {
    use std::io::{Read, Write};
    let rest = url.strip_prefix("http://").expect("an http URL");
    let (addr, path) = rest.split_at(rest.find('/').unwrap());
    assert!(addr.starts_with("127.0.0.1:"), "served on loopback: {url}");
    let mut stream = TcpStream::connect(addr).unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).unwrap();
    let split = answer.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
    let status = String::from_utf8_lossy(&answer[9..12]).parse().unwrap();
    (status, answer[split + 4..].to_vec())
}

/// A vision server that fetches the first image of each request (and ignores the second).
fn fetching_chat_stream(seen: &Seen, stream: &mut TcpStream) {
    if seen.line.starts_with("POST") {
        let body = seen.json();
        let first = body["messages"][0]["content"]
            .as_array()
            .and_then(|parts| parts.iter().find(|p| p["type"] == "image_url"))
            .and_then(|p| p["image_url"]["url"].as_str())
            .map(str::to_string);
        if let Some(url) = first {
            let (status, bytes) = http_get(&url);
            assert_eq!(status, 200);
            FETCHED.lock().unwrap().push(bytes);
        }
    }
    chat_stream(seen, stream);
}

/// `image-urls`: images go out as URLs llmload serves on loopback; the server's fetch gets
/// valid images of the asked size, each request's own; records count what the server fetched,
/// and images it never fetched are flagged. (That an ended request's images are taken down is
/// the media host's unit test.)
#[test]
fn images_served_as_urls_are_fetched_and_counted() {
    let _serial = serial();
    FETCHED.lock().unwrap().clear();
    let (port, seen) = capture(fetching_chat_stream);
    let plan = format!(
        r#"plan "urls" {{ seed 4; }}
target "http://127.0.0.1:{port}" {{ model "vl"; api "chat"; stream #true; metrics #false; connections "cold"; }}
workload {{
    input 16
    output 1
    images count=2 format="jpeg" {{ size "96x64"; }}
    image-urls #true
}}
phase "p" {{ concurrency 1; requests 4; }}
"#
    );
    let run = run_plan(&plan, &[]);
    assert_eq!(run.code(), 0, "{}{}", run.stdout(), run.stderr());
    let bodies = posted(&seen);
    assert_eq!(bodies.len(), 4);
    let mut urls = std::collections::BTreeSet::new();
    for body in &bodies {
        let parts = body["messages"][0]["content"].as_array().unwrap();
        for part in parts.iter().filter(|p| p["type"] == "image_url") {
            let url = part["image_url"]["url"].as_str().unwrap();
            assert!(url.starts_with("http://127.0.0.1:"), "{url}");
            assert!(url.ends_with(".jpg"), "{url}");
            urls.insert(url.to_string());
        }
        // The body is small: no image rides in it.
        assert!(body.to_string().len() < 2000, "{body}");
    }
    assert_eq!(urls.len(), 8, "each image its own URL");
    let fetched = FETCHED.lock().unwrap().clone();
    assert_eq!(fetched.len(), 4);
    for bytes in &fetched {
        let picture = image::load_from_memory(bytes).expect("a valid JPEG");
        assert_eq!((picture.width(), picture.height()), (96, 64));
    }
    assert_ne!(fetched[0], fetched[1], "each request's images are its own");
    for record in run.records() {
        assert_eq!(record["images_fetched"], 1, "{record}");
        assert_eq!(record["images"].as_array().unwrap().len(), 2);
    }
    let summary = run.summary();
    let warning = common::warning_of(&summary, "images-unfetched").expect("half were not fetched");
    assert!(
        warning["message"]
            .as_str()
            .unwrap()
            .contains("fetched 4 of the 8 images"),
        "{warning}"
    );
    assert_eq!(summary["by_media"][0]["images_by_url"], 8);

    // The simulator reads images inline: a plan sending URLs to it is refused before anything.
    let refused = run_plan(
        &plan.replace(&format!("\"http://127.0.0.1:{port}\""), "\"sim\""),
        &[],
    );
    assert_eq!(refused.code(), 2, "{}", refused.stderr());
    assert!(refused
        .stderr()
        .contains("the simulator reads images inline"));
}
