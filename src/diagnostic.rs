//! Plan diagnostics: one miette report per mistake, pointing at the exact span.
//!
//! Below the plan and the crate's [`crate::error::Error`] (which carries them), so that the
//! error type every module returns depends on no stage. What this is not: where mistakes are
//! found (`plan::parse`).

use std::sync::Arc;

use miette::{Diagnostic, NamedSource, SourceSpan};

/// One mistake in a plan, with the file, the span and a help line.
#[derive(Debug, thiserror::Error, Diagnostic)]
#[error("{message}")]
#[diagnostic(code(llmload::plan))]
pub struct PlanDiagnostic {
    /// What is wrong.
    pub message: String,
    #[source_code]
    /// The file and its text.
    pub source_code: NamedSource<Arc<String>>,
    #[label("{label}")]
    /// Where in the text.
    pub span: SourceSpan,
    /// The label under the caret.
    pub label: String,
    #[help]
    /// What to do about it.
    pub help: Option<String>,
}

/// Everything wrong with a plan. Empty `diagnostics` with a `message` means the file could not be read.
#[derive(Debug)]
pub struct PlanErrors {
    /// Every mistake, in file order.
    pub diagnostics: Vec<PlanDiagnostic>,
    /// A mistake with no place in a file (it could not be read).
    pub message: Option<String>,
}

impl PlanErrors {
    /// A plan that could not be read at all.
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
            out.push_str(&diagnostic.render());
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

/// Lines longer than this around a mistake are not quoted: the mistake is shown by its line and
/// column instead (miette cannot draw a caret past column 65,535, and a megabyte of one line
/// helps no one).
const LONGEST_QUOTED_LINE: usize = 1000;

impl PlanDiagnostic {
    /// This mistake as miette shows it (file, line, caret and help), or by line and column
    /// alone when the lines around it are too long to quote.
    pub fn render(&self) -> String {
        let text = self.source_code.inner().as_str();
        let offset = floor_char_boundary(text, self.span.offset());
        // The line of the mistake and its neighbours, which miette would quote.
        let before = text[..offset].rfind('\n').map_or(0, |i| i + 1);
        let from = text[..before.saturating_sub(1)]
            .rfind('\n')
            .map_or(0, |i| i + 1);
        let after = text[offset..].find('\n').map_or(text.len(), |i| offset + i);
        let to = text[(after + 1).min(text.len())..]
            .find('\n')
            .map_or(text.len(), |i| after + 1 + i);
        let too_long = text[from..to.max(from)]
            .split('\n')
            .any(|line| line.len() > LONGEST_QUOTED_LINE);
        if !too_long {
            return format!("{:?}\n", miette::Report::new(self.clone_for_report()));
        }
        let line = text[..offset].matches('\n').count() + 1;
        let column = text[before..offset].chars().count() + 1;
        let mut out = format!(
            "  × {}\n   at {}:{line}:{column} ({})\n",
            self.message,
            self.source_code.name(),
            self.label
        );
        if let Some(help) = &self.help {
            out.push_str(&format!("  help: {help}\n"));
        }
        out
    }

    /// The file it is in, and its line and column (counted from 1, columns in characters).
    pub fn location(&self) -> (String, usize, usize) {
        let text = self.source_code.inner().as_str();
        let offset = floor_char_boundary(text, self.span.offset());
        let line_start = text[..offset].rfind('\n').map_or(0, |i| i + 1);
        (
            self.source_code.name().to_string(),
            text[..offset].matches('\n').count() + 1,
            text[line_start..offset].chars().count() + 1,
        )
    }

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

/// The largest char boundary of `text` at or before `offset`.
fn floor_char_boundary(text: &str, offset: usize) -> usize {
    let mut offset = offset.min(text.len());
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    offset
}

#[cfg(test)]
mod tests {
    use super::*;

    fn diagnostic(text: &str, offset: usize) -> PlanDiagnostic {
        PlanDiagnostic {
            message: "a mistake".into(),
            source_code: NamedSource::new("p.kdl", Arc::new(text.to_string())),
            span: (offset, 1).into(),
            label: "here".into(),
            help: Some("fix it".into()),
        }
    }

    #[test]
    fn a_mistake_far_along_a_long_line_is_shown_by_line_and_column() {
        let long = format!("a 1\nsla {{{} x }}\nb 2\n", " ".repeat(70_000));
        let at = long.find('x').unwrap();
        let text = diagnostic(&long, at).render();
        assert!(text.contains("at p.kdl:2:70007 (here)"), "{text}");
        assert!(text.contains("help: fix it"));
        // A long line beside the mistake is not quoted either.
        let beside = format!("a {}\nb x\n", "\"y\" ".repeat(500));
        let at = beside.rfind('x').unwrap();
        assert!(diagnostic(&beside, at).render().contains("at p.kdl:2:3"));
        // Short lines get miette's caret.
        let short = "a 1\nb x\n";
        let text = diagnostic(short, 6).render();
        assert!(
            text.contains("p.kdl:2:3") && text.contains("fix it"),
            "{text}"
        );
        // An offset inside a character or past the end does not panic.
        diagnostic("é", 1).render();
        diagnostic("abc", 99).render();
    }
}
