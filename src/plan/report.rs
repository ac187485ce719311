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
}

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
    "capacity",
];

/// The most windows a run's time series holds: a longer run gets wider windows.
pub const MAX_SERIES_WINDOWS: usize = 1200;

impl Default for ReportSettings {
    fn default() -> Self {
        ReportSettings {
            interval: Duration::from_secs(1),
            export: Vec::new(),
        }
    }
}
