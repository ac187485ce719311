//! `llmload fmt`: one canonical layout for plan files, so that a repository of plans reads alike
//! and diffs show changes of meaning, not of taste.
//!
//! The layout: four spaces per level; one node per line at the top level and in a block that
//! spans lines; a block written on one line stays on one line (`phase "x" { rate 4; duration
//! "1m" }`) while it fits in 100 columns and holds no comment; single spaces between a node's
//! values; at most one blank line between nodes and none at the start or end of a block;
//! comments kept where they are (a comment at the end of a line keeps the spaces before it, so
//! aligned comments stay aligned). Values are written exactly as they were (quotes, raw strings,
//! numbers): formatting never changes what a plan says. After formatting, the result is parsed
//! and compared with the original node by node and value by value; a file whose meaning would
//! change is left alone with an error, never rewritten.
//!
//! It works on the text's tokens (the same lexical rules as the parser's pre-scan), not on a
//! parsed document, so that every comment survives.

use kdl::{KdlDocument, KdlNode};

/// The widest a one-line block may be.
const MAX_WIDTH: usize = 100;
const INDENT: &str = "    ";

#[derive(Debug, Clone, PartialEq)]
enum Tok<'a> {
    /// A value, a name, a property, a type annotation, a slashdash: anything between spaces.
    Word(&'a str),
    /// `/* ... */`.
    BlockComment(&'a str),
    /// `// ...` to the end of the line, with the spaces before it on its line.
    LineComment {
        text: &'a str,
        spaces: usize,
    },
    Open,
    Close,
    Semi,
    Newline,
}

/// Why a file is not formatted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct FmtError(pub String);

fn tokens(text: &str) -> Result<Vec<Tok<'_>>, FmtError> {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    let mut spaces = 0;
    while i < bytes.len() {
        let b = bytes[i];
        let rest = &bytes[i..];
        if b == b'\n' {
            out.push(Tok::Newline);
            i += 1;
        } else if b == b'\r' && rest.get(1) == Some(&b'\n') {
            i += 1;
        } else if b == b' '
            || b == b'\t'
            || b == b'\r'
            || b == 0xEF && rest.starts_with("\u{FEFF}".as_bytes())
        {
            spaces += 1;
            i += if b == 0xEF { 3 } else { 1 };
            continue;
        } else if rest.starts_with(b"//") {
            let end = memchr::memchr(b'\n', rest).map_or(bytes.len(), |n| i + n);
            out.push(Tok::LineComment {
                text: text[i..end].trim_end(),
                spaces,
            });
            i = end;
        } else if rest.starts_with(b"/*") {
            let end = block_comment_end(bytes, i)
                .ok_or_else(|| FmtError("a block comment is not closed".into()))?;
            out.push(Tok::BlockComment(&text[i..end]));
            i = end;
        } else if b == b'\\' {
            // A line continuation: the node goes on on the next line. Joined into one line;
            // a comment after it is kept only in a layout fmt does not rewrite.
            let mut j = i + 1;
            while j < bytes.len() && (bytes[j] == b' ' || bytes[j] == b'\t' || bytes[j] == b'\r') {
                j += 1;
            }
            if j < bytes.len() && bytes[j] != b'\n' {
                return Err(FmtError(
                    "a line continuation (\\) followed by a comment: fmt leaves such a file as it is"
                        .into(),
                ));
            }
            i = j + 1;
        } else if b == b'{' {
            out.push(Tok::Open);
            i += 1;
        } else if b == b'}' {
            out.push(Tok::Close);
            i += 1;
        } else if b == b';' {
            out.push(Tok::Semi);
            i += 1;
        } else {
            let end = word_end(bytes, i)?;
            out.push(Tok::Word(&text[i..end]));
            i = end;
        }
        spaces = 0;
    }
    Ok(out)
}

fn block_comment_end(bytes: &[u8], start: usize) -> Option<usize> {
    let mut depth = 0usize;
    let mut i = start;
    while i + 1 < bytes.len() {
        if bytes[i] == b'/' && bytes[i + 1] == b'*' {
            depth += 1;
            i += 2;
        } else if bytes[i] == b'*' && bytes[i + 1] == b'/' {
            depth -= 1;
            i += 2;
            if depth == 0 {
                return Some(i);
            }
        } else {
            i += 1;
        }
    }
    None
}

/// Where a word starting at `start` ends: at white space, a brace, a semicolon or a comment
/// outside strings.
fn word_end(bytes: &[u8], start: usize) -> Result<usize, FmtError> {
    let unclosed = || FmtError("a string is not closed".into());
    let mut i = start;
    while i < bytes.len() {
        let b = bytes[i];
        match b {
            b' ' | b'\t' | b'\r' | b'\n' | b'{' | b'}' | b';' => break,
            b'/' if matches!(bytes.get(i + 1), Some(b'/') | Some(b'*')) => break,
            b'"' => {
                if bytes[i..].starts_with(b"\"\"\"") {
                    i += 3;
                    loop {
                        if i >= bytes.len() {
                            return Err(unclosed());
                        }
                        if bytes[i] == b'\\' {
                            i += 2;
                        } else if bytes[i..].starts_with(b"\"\"\"") {
                            i += 3;
                            break;
                        } else {
                            i += 1;
                        }
                    }
                } else {
                    i += 1;
                    loop {
                        match bytes.get(i) {
                            None => return Err(unclosed()),
                            Some(b'\\') => i += 2,
                            Some(b'"') => {
                                i += 1;
                                break;
                            }
                            Some(_) => i += 1,
                        }
                    }
                }
            }
            b'#' => {
                let hashes = bytes[i..].iter().take_while(|&&c| c == b'#').count();
                let after = i + hashes;
                if bytes.get(after) == Some(&b'"') {
                    let multi = bytes[after..].starts_with(b"\"\"\"");
                    let quote: &[u8] = if multi { b"\"\"\"" } else { b"\"" };
                    let mut j = after + quote.len();
                    loop {
                        if j >= bytes.len() {
                            return Err(unclosed());
                        }
                        if bytes[j..].starts_with(quote)
                            && bytes[j + quote.len()..]
                                .iter()
                                .take(hashes)
                                .all(|&c| c == b'#')
                            && bytes.len() >= j + quote.len() + hashes
                        {
                            j += quote.len() + hashes;
                            break;
                        }
                        j += 1;
                    }
                    i = j;
                } else {
                    i = after;
                }
            }
            _ => i += 1,
        }
    }
    Ok(i)
}

/// One node, or a comment on a line of its own, with whether a blank line came before it.
#[derive(Debug)]
enum Item<'a> {
    Node(Node<'a>),
    Comment(&'a str),
    Blank,
}

#[derive(Debug)]
struct Node<'a> {
    /// Words and inline block comments, in order.
    head: Vec<&'a str>,
    block: Option<Block<'a>>,
    /// A comment after the node on its line, and the spaces before it.
    trailing: Option<(&'a str, usize)>,
}

#[derive(Debug)]
struct Block<'a> {
    items: Vec<Item<'a>>,
    /// The braces were on different lines.
    multiline: bool,
    /// A comment right after `{`, on its line.
    open_comment: Option<(&'a str, usize)>,
}

struct Parser<'a> {
    toks: Vec<Tok<'a>>,
    at: usize,
}

impl<'a> Parser<'a> {
    fn peek(&self) -> Option<&Tok<'a>> {
        self.toks.get(self.at)
    }

    /// Items until `}` (inside a block) or the end.
    fn items(&mut self, inside: bool) -> Result<Vec<Item<'a>>, FmtError> {
        let mut items = Vec::new();
        let mut newlines = 0;
        loop {
            match self.peek() {
                None if inside => return Err(FmtError("a block is not closed".into())),
                None => break,
                Some(Tok::Close) if inside => break,
                Some(Tok::Close) => return Err(FmtError("a `}` closes no block".into())),
                Some(Tok::Newline) => {
                    newlines += 1;
                    self.at += 1;
                }
                Some(Tok::Semi) => self.at += 1,
                Some(Tok::LineComment { text, .. }) => {
                    if newlines >= 2 && !items.is_empty() {
                        items.push(Item::Blank);
                    }
                    items.push(Item::Comment(text));
                    newlines = 0;
                    self.at += 1;
                }
                Some(_) => {
                    if newlines >= 2 && !items.is_empty() {
                        items.push(Item::Blank);
                    }
                    newlines = 0;
                    items.push(Item::Node(self.node()?));
                }
            }
        }
        while matches!(items.last(), Some(Item::Blank)) {
            items.pop();
        }
        Ok(items)
    }

    fn node(&mut self) -> Result<Node<'a>, FmtError> {
        let mut head = Vec::new();
        let mut block = None;
        loop {
            match self.peek().cloned() {
                Some(Tok::Word(w)) | Some(Tok::BlockComment(w)) => {
                    if block.is_some() {
                        return Err(FmtError("a value after a node's block".into()));
                    }
                    head.push(w);
                    self.at += 1;
                }
                Some(Tok::Open) => {
                    if block.is_some() {
                        return Err(FmtError("a node with two blocks".into()));
                    }
                    self.at += 1;
                    let open_comment = match self.peek() {
                        Some(Tok::LineComment { text, spaces }) => {
                            let found = (*text, *spaces);
                            self.at += 1;
                            Some(found)
                        }
                        _ => None,
                    };
                    let start = self.at;
                    let items = self.items(true)?;
                    let multiline =
                        self.toks[start..self.at].contains(&Tok::Newline) || open_comment.is_some();
                    self.at += 1; // the `}`
                    block = Some(Block {
                        items,
                        multiline,
                        open_comment,
                    });
                }
                _ => break,
            }
        }
        let trailing = match self.peek() {
            Some(Tok::Semi) => {
                self.at += 1;
                match self.peek() {
                    Some(Tok::LineComment { text, spaces }) => {
                        let found = (*text, *spaces);
                        self.at += 1;
                        Some(found)
                    }
                    _ => None,
                }
            }
            Some(Tok::LineComment { text, spaces }) => {
                let found = (*text, *spaces);
                self.at += 1;
                Some(found)
            }
            _ => None,
        };
        Ok(Node {
            head,
            block,
            trailing,
        })
    }
}

/// The node on one line, if it can be (no comments inside, no line breaks in its values).
fn one_line(node: &Node) -> Option<String> {
    let mut text = node.head.join(" ");
    if let Some(block) = &node.block {
        if block.open_comment.is_some() {
            return None;
        }
        let mut children = Vec::new();
        for item in &block.items {
            match item {
                Item::Node(child) if child.trailing.is_none() => children.push(one_line(child)?),
                Item::Blank => {}
                _ => return None,
            }
        }
        if children.is_empty() {
            text.push_str(" {}");
        } else {
            text.push_str(&format!(" {{ {} }}", children.join("; ")));
        }
    }
    (!text.contains('\n')).then_some(text)
}

fn render_items(items: &[Item], depth: usize, out: &mut String) {
    let indent = INDENT.repeat(depth);
    for item in items {
        match item {
            Item::Blank => out.push('\n'),
            Item::Comment(text) => {
                out.push_str(&indent);
                out.push_str(text);
                out.push('\n');
            }
            Item::Node(node) => render_node(node, depth, out),
        }
    }
}

fn trailing(line: &mut String, comment: Option<(&str, usize)>) {
    if let Some((text, spaces)) = comment {
        line.push_str(&" ".repeat(spaces.max(1)));
        line.push_str(text);
    }
}

fn render_node(node: &Node, depth: usize, out: &mut String) {
    let indent = INDENT.repeat(depth);
    let inline = node
        .block
        .as_ref()
        .is_none_or(|block| !block.multiline)
        .then(|| one_line(node))
        .flatten()
        .filter(|line| indent.len() + line.chars().count() <= MAX_WIDTH || node.block.is_none());
    if let Some(mut line) = inline {
        line.insert_str(0, &indent);
        trailing(&mut line, node.trailing);
        out.push_str(&line);
        out.push('\n');
        return;
    }
    let mut line = format!("{indent}{}", node.head.join(" "));
    let Some(block) = &node.block else {
        // A value holding a line break (a multi-line string) keeps its own lines.
        trailing(&mut line, node.trailing);
        out.push_str(&line);
        out.push('\n');
        return;
    };
    line.push_str(" {");
    trailing(&mut line, block.open_comment);
    out.push_str(&line);
    out.push('\n');
    render_items(&block.items, depth + 1, out);
    let mut close = format!("{indent}}}");
    trailing(&mut close, node.trailing);
    out.push_str(&close);
    out.push('\n');
}

/// `text` in the canonical layout. An error says why a file is left as it is: not KDL, or a
/// layout fmt cannot rewrite without changing what it says.
pub fn format(text: &str) -> Result<String, FmtError> {
    // The limits `check` applies, before the parser (which recurses once per level) runs.
    if text.len() as u64 > super::limits::MAX_PLAN_BYTES {
        return Err(FmtError(format!(
            "it is {} bytes: more than a plan may be ({} bytes)",
            text.len(),
            super::limits::MAX_PLAN_BYTES
        )));
    }
    if let Some(at) = super::parse::too_deep_at(text) {
        let line = text[..at.min(text.len())].matches('\n').count() + 1;
        return Err(FmtError(format!(
            "its blocks nest deeper than {} levels (line {line}): `llmload check` says where",
            super::limits::MAX_NESTING
        )));
    }
    let original = KdlDocument::parse_v2(text)
        .map_err(|_| FmtError("it is not valid KDL: `llmload check` says where".into()))?;
    let mut parser = Parser {
        toks: tokens(text)?,
        at: 0,
    };
    let items = parser.items(false)?;
    let mut out = String::new();
    render_items(&items, 0, &mut out);
    let formatted = KdlDocument::parse_v2(&out).map_err(|_| {
        FmtError("formatting it would not give valid KDL (please report this file)".into())
    })?;
    if !same_document(&original, &formatted) {
        return Err(FmtError(
            "formatting it would change what it says (please report this file)".into(),
        ));
    }
    Ok(out)
}

/// Whether two documents say the same thing: the same nodes, names, type annotations, values
/// and properties, in the same order, whatever their layout.
pub fn same_document(a: &KdlDocument, b: &KdlDocument) -> bool {
    a.nodes().len() == b.nodes().len()
        && a.nodes()
            .iter()
            .zip(b.nodes())
            .all(|(x, y)| same_node(x, y))
}

fn same_node(a: &KdlNode, b: &KdlNode) -> bool {
    let ty = |n: &KdlNode| n.ty().map(|t| t.value().to_string());
    let entries_equal = a.entries().len() == b.entries().len()
        && a.entries().iter().zip(b.entries()).all(|(x, y)| {
            x.name().map(|n| n.value()) == y.name().map(|n| n.value())
                && x.ty().map(|t| t.value()) == y.ty().map(|t| t.value())
                && x.value() == y.value()
        });
    fn children(n: &KdlNode) -> Option<&KdlDocument> {
        n.children().filter(|c| !c.nodes().is_empty())
    }
    let children_equal = match (children(a), children(b)) {
        (None, None) => true,
        (Some(x), Some(y)) => same_document(x, y),
        _ => false,
    };
    a.name().value() == b.name().value() && ty(a) == ty(b) && entries_equal && children_equal
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_canonical_layout() {
        let messy = "// top comment\n\n\n  plan   \"p\"   {seed 7}\ntarget \"sim\" {\n  api \"chat\"      // aligned\n  timeout (s)30\n\n\n  stream #true\n}\nphase \"a\" { rate 1;duration \"1s\" }   // one line\nphase \"b\" { rate 1; duration \"1s\"; requests 5 ; record #false }\n\nsla { ttft p99 <=\"1s\"\n  error-rate < \"1%\" }\n\n";
        let formatted = format(messy).unwrap();
        assert_eq!(
            formatted,
            "// top comment\n\nplan \"p\" { seed 7 }\ntarget \"sim\" {\n    api \"chat\"      // aligned\n    timeout (s)30\n\n    stream #true\n}\nphase \"a\" { rate 1; duration \"1s\" }   // one line\nphase \"b\" { rate 1; duration \"1s\"; requests 5; record #false }\n\nsla {\n    ttft p99 <=\"1s\"\n    error-rate < \"1%\"\n}\n"
        );
        assert_eq!(format(&formatted).unwrap(), formatted, "idempotent");
    }

    #[test]
    fn long_one_line_blocks_are_split_and_strings_are_kept_as_written() {
        let long = format!(
            "workload {{ input {{ bucket 128 weight=5; bucket 512 weight=3; bucket 2048 weight=2 output=512 }}; output 256 ignore-eos=#true; tokenizer #\"{}\"# }}\n",
            "x".repeat(40)
        );
        let formatted = format(&long).unwrap();
        assert!(
            formatted.starts_with("workload {\n    input { bucket 128"),
            "{formatted}"
        );
        assert!(formatted.contains(&format!("tokenizer #\"{}\"#", "x".repeat(40))));
        assert_eq!(format(&formatted).unwrap(), formatted);
        let multi = "description \"\"\"\n    two\n    lines\n    \"\"\"\n";
        assert_eq!(format(multi).unwrap(), multi);
        let slashdash = "phase \"a\" {\n    rate 1\n    /-duration \"1s\"\n    requests 2\n}\n";
        assert_eq!(format(slashdash).unwrap(), slashdash);
    }

    #[test]
    fn what_is_not_kdl_is_left_alone() {
        assert!(format("phase \"a\" { rate 1").is_err());
        assert!(format("a \\ // note\n b").is_err());
    }

    #[test]
    fn the_shipped_plans_are_formatted() {
        for (name, text) in [
            ("chat-sla", include_str!("../../plans/chat-sla.kdl")),
            ("quickstart", include_str!("../../plans/quickstart.kdl")),
            ("mixed-input", include_str!("../../plans/mixed-input.kdl")),
        ] {
            assert_eq!(
                format(text).unwrap(),
                text,
                "{name} is not in the canonical layout"
            );
        }
    }
}
