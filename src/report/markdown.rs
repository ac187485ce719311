//! `report.md`: the verdict first, then assertions, warnings, per-phase tables and context.

use super::{template, Exporter, ReportContext};
use crate::error::Result;

const TEMPLATE: &str = include_str!("templates/report.md.j2");

pub struct Markdown;

impl Exporter for Markdown {
    fn file_name(&self) -> String {
        "report.md".into()
    }

    fn render(&self, context: &ReportContext) -> Result<Vec<u8>> {
        template::render("report.md.j2", TEMPLATE, context)
    }
}
