//! `report`: how a run's reports are made (the time series' interval).

use std::time::Duration;

use kdl::KdlNode;

use super::cx::{Cx, Handler};
use super::values::DURATION;
use crate::plan::ReportSettings;

/// The finest time-series interval: finer windows hold too few requests to say anything.
const MIN_INTERVAL: Duration = Duration::from_millis(100);

const CHILDREN: &[(&str, Handler<ReportSettings>)] = &[("interval", |cx, node, r| {
    if let Some(interval) = cx.single(node, "interval \"1s\"", DURATION) {
        if interval < MIN_INTERVAL {
            cx.error(
                node.name().span(),
                "a time-series interval under 100ms holds too few requests to say anything",
                "too fine",
                "write it as: interval \"1s\" (or \"500ms\")",
            );
        } else {
            r.interval = interval;
        }
    }
})];

/// The `report` node.
pub(super) fn report(cx: &mut Cx, node: &KdlNode) -> ReportSettings {
    cx.no_args(node, "report { interval \"1s\" }");
    let mut settings = ReportSettings::default();
    cx.walk(node, "in `report`", CHILDREN, &mut settings);
    settings
}
