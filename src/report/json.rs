//! `summary.json`: the whole summary, described by schemas/summary.schema.json.

use super::{Exporter, ReportContext};
use crate::error::{Error, Result};

pub struct Json;

impl Exporter for Json {
    fn file_name(&self) -> String {
        "summary.json".into()
    }

    fn render(&self, context: &ReportContext) -> Result<Vec<u8>> {
        let mut bytes = serde_json::to_vec_pretty(&context.summary)
            .map_err(|e| Error::run(format!("cannot encode summary.json: {e}")))?;
        bytes.push(b'\n');
        Ok(bytes)
    }
}
