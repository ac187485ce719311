//! The upper bounds on everything a plan (or a flag) can ask for.
//!
//! A load tester is given absurd values by typo (`at-once 4000000000`, `timeout "99999h"`), and
//! such a value must be a diagnostic pointing at it, not a panic or an allocation that takes the
//! machine down. The bounds are generous for any real benchmark and small enough that the
//! largest plan allowed still fits in memory; docs/plan-reference.md lists them.

use std::time::Duration;

/// A plan file larger than this is refused before it is parsed (the KDL parser holds about 200
/// bytes of memory per byte of plan).
pub const MAX_PLAN_BYTES: u64 = 1 << 20;
/// Blocks nested deeper than this are refused before they are parsed (the KDL parser recurses
/// once per level).
pub const MAX_NESTING: usize = 32;
/// Characters of a name (the plan's, a phase's, a sweep's or a search's): names head tables
/// and files, and one a page long is a mistake.
pub const MAX_NAME_CHARS: usize = 200;
/// Phases written in one plan.
pub const MAX_PHASES: usize = 1_000;
/// The longest duration anything takes: a phase, a timeout, a simulated delay.
pub const MAX_DURATION: Duration = Duration::from_secs(30 * 24 * 3600);
/// Workers of a closed loop: every one holds a connection.
pub const MAX_CONCURRENCY: u64 = 100_000;
/// Requests of a burst: every one holds a connection at once.
pub const MAX_BURST: u64 = 100_000;
/// Requests a whole plan may schedule (about 40 bytes of memory each).
pub const MAX_REQUESTS: u64 = 20_000_000;
/// The highest request rate of an open loop, per second.
pub const MAX_RATE: f64 = 1_000_000.0;
/// Prompt or output tokens of one request.
pub const MAX_TOKENS: u64 = 4 << 20;
/// An input bucket's weight.
pub const MAX_WEIGHT: f64 = 1e9;
/// The coefficient of variation of gamma arrivals.
pub const GAMMA_CV_RANGE: (f64, f64) = (0.01, 10.0);
/// An image's sides, in pixels (a vision model's own limit is lower: Qwen2-VL's is 16,384 tokens).
pub const IMAGE_SIDE_RANGE: (u32, u32) = (8, 8192);
/// Images one request may carry.
pub const MAX_IMAGES_PER_REQUEST: u64 = 64;
/// Pixels of a request's images together, at most (its most images at its largest size): one
/// 8192×8192 image, or 32 of 1448×1448. Every image is drawn and encoded in memory, and its
/// base64 goes out in one body.
pub const MAX_PIXELS_PER_REQUEST: u64 = 8192 * 8192;
/// Image size buckets a workload may have.
pub const MAX_IMAGE_SIZES: usize = 64;
/// The largest image or audio file a dataset entry may name (held in memory, as base64, for
/// the whole run; a dataset's files together are bounded by [`super::data::MAX_DATA_BYTES`]).
pub const MAX_MEDIA_FILE_BYTES: u64 = 64 << 20;
/// The longest audio clip of a request.
pub const MAX_AUDIO: std::time::Duration = std::time::Duration::from_secs(600);
/// Audio sample rates, per second.
pub const SAMPLE_RATE_RANGE: (u64, u64) = (8_000, 48_000);
