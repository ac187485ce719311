//! `report`: how a run's reports are made.

use std::time::Duration;

/// `report { interval "1s" }`: how the reports are made.
#[derive(Debug, Clone, PartialEq)]
pub struct ReportSettings {
    /// The time series' window (it grows for long runs, to at most [`MAX_SERIES_WINDOWS`]
    /// windows).
    pub interval: Duration,
}

/// The most windows a run's time series holds: a longer run gets wider windows.
pub const MAX_SERIES_WINDOWS: usize = 1200;

impl Default for ReportSettings {
    fn default() -> Self {
        ReportSettings {
            interval: Duration::from_secs(1),
        }
    }
}
