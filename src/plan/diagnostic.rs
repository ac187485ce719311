//! Plan diagnostics: one miette report per mistake, pointing at the exact span.

use std::sync::Arc;

use miette::{Diagnostic, NamedSource, SourceSpan};

/// One mistake in a plan, with the file, the span and a help line.
#[derive(Debug, thiserror::Error, Diagnostic)]
#[error("{message}")]
#[diagnostic(code(llmload::plan))]
pub struct PlanDiagnostic {
    pub message: String,
    #[source_code]
    pub source_code: NamedSource<Arc<String>>,
    #[label("{label}")]
    pub span: SourceSpan,
    pub label: String,
    #[help]
    pub help: Option<String>,
}

/// Everything wrong with a plan. Empty `diagnostics` with a `message` means the file could not be read.
#[derive(Debug)]
pub struct PlanErrors {
    pub diagnostics: Vec<PlanDiagnostic>,
    pub message: Option<String>,
}

impl PlanErrors {
    pub fn io(message: String) -> Self {
        PlanErrors {
            diagnostics: Vec::new(),
            message: Some(message),
        }
    }

    /// Renders every diagnostic as miette shows it (with file, line, caret and help).
    pub fn render(&self) -> String {
        let mut out = String::new();
        if let Some(message) = &self.message {
            out.push_str("error: ");
            out.push_str(message);
            out.push('\n');
        }
        for diagnostic in &self.diagnostics {
            out.push_str(&format!(
                "{:?}\n",
                miette::Report::new(diagnostic.clone_for_report())
            ));
        }
        if !self.diagnostics.is_empty() {
            let count = self.diagnostics.len();
            out.push_str(&format!(
                "error: the plan has {count} problem{}\n",
                if count == 1 { "" } else { "s" }
            ));
        }
        out
    }
}

impl PlanDiagnostic {
    fn clone_for_report(&self) -> PlanDiagnostic {
        PlanDiagnostic {
            message: self.message.clone(),
            source_code: NamedSource::new(
                self.source_code.name(),
                self.source_code.inner().clone(),
            ),
            span: self.span,
            label: self.label.clone(),
            help: self.help.clone(),
        }
    }
}

impl std::fmt::Display for PlanErrors {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.render())
    }
}

impl std::error::Error for PlanErrors {}
