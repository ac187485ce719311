//! `report`: how a run's reports are made.

use std::time::Duration;

/// `report { interval "1s" }`: how the reports are made.
#[derive(Debug, Clone, PartialEq)]
pub struct ReportSettings {
    /// The time series' window (it grows for long runs, to at most [`MAX_SERIES_WINDOWS`]
    /// windows).
    pub interval: Duration,
    /// `export "ttft-p99-ms" …`: the measures `--export` writes (by their slugs, of
    /// [`EXPORT_MEASURES`]); empty for all of them.
    pub export: Vec<String>,
    /// `records "auto"`: whether the records are compressed.
    pub records: RecordsChoice,
}

/// `records "auto" | "zstd" | "jsonl"`: how a run writes its records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RecordsChoice {
    /// Compressed when the run is planned long (see [`AUTO_ZSTD_REQUESTS`],
    /// [`AUTO_ZSTD_SENDING`]), plain otherwise.
    #[default]
    Auto,
    /// Always `records.jsonl.zst`.
    Zstd,
    /// Always `records.jsonl`.
    Jsonl,
}

/// `records "auto"` compresses a run that schedules more requests than this (plain records take
/// about 1 KB a request: 20 MB)...
pub const AUTO_ZSTD_REQUESTS: usize = 20_000;

/// ... or that sends for longer than this where its requests are not known ahead (closed loops
/// ended by time, a capacity search's probes).
pub const AUTO_ZSTD_SENDING: Duration = Duration::from_secs(600);

/// The measures `--export` can write, by slug (BMF's measure names): the report's table of
/// them (`report::benchmarks`) holds exactly these.
pub const EXPORT_MEASURES: &[&str] = &[
    "ttft-p50-ms",
    "ttft-p99-ms",
    "itl-p99-ms",
    "tpot-p50-ms",
    "e2e-p99-ms",
    "error-rate-percent",
    "requests-per-second",
    "output-tokens-per-second",
    "goodput-requests-per-second",
    "energy-per-output-token-j",
    "cost-per-million-output-tokens-usd",
    "cost-per-million-goodput-tokens-usd",
    "capacity",
];

/// The most windows a run's time series holds: a longer run gets wider windows.
pub const MAX_SERIES_WINDOWS: usize = 1200;

impl Default for ReportSettings {
    fn default() -> Self {
        ReportSettings {
            interval: Duration::from_secs(1),
            export: Vec::new(),
            records: RecordsChoice::Auto,
        }
    }
}
