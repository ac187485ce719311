//! Text that llmload does not control (a server's error bodies, finish_reason and version, a
//! dataset's words, a `--label`), made safe for each output it reaches: a terminal or CI log,
//! Markdown attached to a pull request, a spreadsheet, XML.
//!
//! Each function is for one output and says what it guards against; a caller escapes at the
//! edge where text enters that output (a template filter, a CSV writer, the JUnit writer), or
//! once where server text enters the run ([`one_line`], through `error::shorten`). This module
//! is not for text llmload writes itself, nor for HTML: minijinja escapes every value of an
//! `.html` template.

use std::borrow::Cow;

/// One line, every control character shown as an escape (`\n`, `\u{1b}`): text a server sends
/// can then neither start a line of a CI log (GitHub's `::error::`, `::add-mask::`), nor move a
/// terminal's cursor, nor reorder what follows it (bidirectional overrides).
pub fn one_line(text: &str) -> Cow<'_, str> {
    if !text.chars().any(is_unsafe_in_a_line) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if is_unsafe_in_a_line(c) => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// Control characters (C0, DEL, C1), line and paragraph separators, and the bidirectional
/// embeddings, overrides and isolates.
fn is_unsafe_in_a_line(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{2028}' | '\u{2029}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// A Markdown code span holding `text` literally, safe in a table cell: inside a code span
/// nothing is a heading, an image, a link or a mention; the fence is longer than any run of
/// backticks in the text, pipes are escaped (a table would split on them) and lines joined.
pub fn markdown_code(text: &str) -> String {
    let text = one_line(text);
    if text.is_empty() {
        return "-".into();
    }
    let longest_run = text.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    let fence = "`".repeat(longest_run + 1);
    // A span that starts or ends with a backtick needs a space between it and the fence.
    let pad = if text.starts_with('`') || text.ends_with('`') {
        " "
    } else {
        ""
    };
    let inner = text.replace('|', "\\|");
    format!("{fence}{pad}{inner}{pad}{fence}")
}

/// `text` as Markdown that renders as itself, in running text or a table cell: every
/// punctuation mark Markdown gives a meaning to is backslash-escaped (no heading, emphasis,
/// image, link, HTML or table break), `@` and bare URLs are broken with a zero-width space (no
/// mention, no autolink), and lines are joined.
pub fn markdown_text(text: &str) -> String {
    let text = one_line(text);
    let mut out = String::with_capacity(text.len() + 8);
    let mut rest = text.as_ref();
    while let Some(c) = rest.chars().next() {
        let lower = rest.get(..8).map(str::to_ascii_lowercase);
        match c {
            '\\' | '`' | '*' | '_' | '[' | ']' | '(' | ')' | '#' | '!' | '|' | '<' | '>' | '~' => {
                out.push('\\');
                out.push(c);
            }
            '@' => out.push_str("@\u{200b}"),
            ':' if rest.starts_with("://") => out.push_str(":\u{200b}"),
            'w' | 'W' if lower.as_deref().is_some_and(|l| l.starts_with("www.")) => {
                out.push(c);
                out.push('\u{200b}');
            }
            c => out.push(c),
        }
        rest = &rest[c.len_utf8()..];
    }
    out
}

/// A CSV cell a spreadsheet will not run: one that begins with `=`, `+`, `-`, `@`, a tab or a
/// carriage return is a formula to Excel and LibreOffice, so it gets a leading `'` (OWASP's
/// advice for CSV injection). For text cells only: a number such as `-3` is left alone.
pub fn csv_cell(text: &str) -> Cow<'_, str> {
    match text.chars().next() {
        Some('=' | '+' | '-' | '@' | '\t' | '\r') => Cow::Owned(format!("'{text}")),
        _ => Cow::Borrowed(text),
    }
}

/// Text as XML 1.0 character data or an attribute value: markup escaped, and every character
/// XML 1.0 forbids (C0 controls but tab, newline and return; U+FFFE, U+FFFF) replaced by U+FFFD,
/// so that the document stays well-formed whatever a server sent.
pub fn xml_text(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\t' | '\n' | '\r' => out.push(c),
            c if (c as u32) < 0x20 || c == '\u{fffe}' || c == '\u{ffff}' => out.push('\u{fffd}'),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_shows_every_control_character_and_keeps_the_rest() {
        assert_eq!(one_line("plain text, é ✓"), "plain text, é ✓");
        assert_eq!(
            one_line("bad\n::error::x\r\n\u{1b}[2J\u{9b}\u{202e}"),
            "bad\\n::error::x\\r\\n\\u{1b}[2J\\u{9b}\\u{202e}"
        );
        assert!(!one_line("a\u{2028}b\u{7f}").contains(['\u{2028}', '\u{7f}']));
    }

    #[test]
    fn a_code_span_holds_anything_literally() {
        assert_eq!(markdown_code("stop"), "`stop`");
        assert_eq!(markdown_code("a`b"), "``a`b``");
        assert_eq!(markdown_code("`x"), "`` `x ``");
        assert_eq!(markdown_code("a|b\nc"), "`a\\|b\\nc`");
        assert_eq!(markdown_code(""), "-");
        assert_eq!(markdown_code("x``y"), "```x``y```");
    }

    #[test]
    fn markdown_text_renders_as_itself() {
        let hostile = "# Title ![img](http://evil.example/x.png) [link](https://a.b) @octocat <b>x</b> | www.evil.example";
        let safe = markdown_text(hostile);
        for forbidden in [
            "![", "](", "@octocat", "http://", "https://", "<b>", " | ", "www.evil",
        ] {
            assert!(!safe.contains(forbidden), "{forbidden} in {safe}");
        }
        assert!(safe.starts_with("\\# Title"), "{safe}");
        assert_eq!(markdown_text("plain words, 5.0 ms"), "plain words, 5.0 ms");
    }

    #[test]
    fn csv_cells_that_would_be_formulas_are_neutralised() {
        for formula in ["=HYPERLINK(\"x\")", "+1", "-1+2", "@SUM(A1)", "\tx", "\rx"] {
            assert_eq!(csv_cell(formula), format!("'{formula}"));
        }
        assert_eq!(csv_cell("stop"), "stop");
        assert_eq!(csv_cell(""), "");
    }

    #[test]
    fn xml_text_is_always_well_formed() {
        assert_eq!(
            xml_text("p99 < 5 & \"x\" > 'y'\u{1}\u{fffe}\u{ffff}\n"),
            "p99 &lt; 5 &amp; &quot;x&quot; &gt; &apos;y&apos;\u{fffd}\u{fffd}\u{fffd}\n"
        );
    }
}
