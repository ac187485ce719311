//! `report`: how a run's reports are made (the time series' interval, the measures `--export`
//! writes).

use std::time::Duration;

use kdl::KdlNode;

use super::cx::{Cx, Handler};
use super::values::{Text, DURATION};
use crate::plan::EXPORT_MEASURES;
use crate::plan::{RecordsChoice, ReportSettings};

/// The finest time-series interval: finer windows hold too few requests to say anything.
const MIN_INTERVAL: Duration = Duration::from_millis(100);

const CHILDREN: &[(&str, Handler<ReportSettings>)] = &[
    ("interval", interval),
    ("export", export),
    ("records", records),
];

fn interval(cx: &mut Cx, node: &KdlNode, r: &mut ReportSettings) {
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
}

/// `export "ttft-p99-ms" "requests-per-second"`: the measures `--export` writes.
fn export(cx: &mut Cx, node: &KdlNode, r: &mut ReportSettings) {
    let usage = "export \"ttft-p99-ms\" \"requests-per-second\"";
    if node.entries().is_empty() {
        cx.error(
            node.name().span(),
            "`export` names no measure",
            "empty",
            format!(
                "name the measures to export: {}",
                EXPORT_MEASURES.join(", ")
            ),
        );
        return;
    }
    for entry in node.entries() {
        let slug = entry.value().as_string().filter(|_| entry.name().is_none());
        match slug {
            Some(slug) if EXPORT_MEASURES.contains(&slug) => {
                if !r.export.iter().any(|s| s == slug) {
                    r.export.push(slug.to_string());
                }
            }
            Some(slug) => cx.error(
                entry.span(),
                format!("`{slug}` is not a measure llmload exports"),
                "unknown measure",
                format!("one of: {}", EXPORT_MEASURES.join(", ")),
            ),
            None => cx.error(
                entry.span(),
                "`export` takes measure names as strings",
                "not a name",
                format!("write it as: {usage}"),
            ),
        }
    }
}

/// `records "auto"`: how the records are written.
fn records(cx: &mut Cx, node: &KdlNode, r: &mut ReportSettings) {
    let usage = "records \"auto\" (or \"zstd\", or \"jsonl\")";
    let Some(choice) = cx.single(node, usage, Text) else {
        return;
    };
    r.records = match choice.as_str() {
        "auto" => RecordsChoice::Auto,
        "zstd" => RecordsChoice::Zstd,
        "jsonl" => RecordsChoice::Jsonl,
        _ => {
            let span = node
                .entries()
                .first()
                .map_or(node.name().span(), |e| e.span());
            cx.error(
                span,
                format!("`{choice}` is not a way to write records"),
                "unknown",
                "one of: \"auto\" (compressed when the run is long), \"zstd\" (records.jsonl.zst), \"jsonl\" (records.jsonl)",
            );
            return;
        }
    };
}

/// The `report` node.
pub(super) fn report(cx: &mut Cx, node: &KdlNode) -> ReportSettings {
    cx.no_args(node, "report { interval \"1s\" }");
    let mut settings = ReportSettings::default();
    cx.walk(node, "in `report`", CHILDREN, &mut settings);
    settings
}
