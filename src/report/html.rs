//! `report.html`: one self-contained page (inline CSS and SVG, no script, no external
//! reference) with the verdict first, then the charts of [`super::charts`], then the tables.
//! It reads the same opened from a CI artifact as from disk.

use minijinja::Value;

use super::{charts, template, Exporter, ReportContext};
use crate::error::Result;

const TEMPLATE: &str = include_str!("templates/report.html.j2");

pub struct Html;

impl Exporter for Html {
    fn file_name(&self) -> String {
        "report.html".into()
    }

    fn render(&self, context: &ReportContext) -> Result<Vec<u8>> {
        let charts: Vec<Value> = charts::all(&context.summary)
            .into_iter()
            .map(|chart| {
                minijinja::context! {
                    id => chart.id,
                    title => chart.title,
                    caption => chart.caption,
                    // plotters' own SVG: trusted markup, not text to escape.
                    svg => Value::from_safe_string(chart.svg),
                }
            })
            .collect();
        let value = minijinja::context! {
            charts => charts,
            ..Value::from_serialize(&context.summary)
        };
        template::render_value("report.html.j2", TEMPLATE, value).map(String::into_bytes)
    }
}
