//! A light pass over plan text before the KDL parser sees it.
//!
//! It knows just enough of KDL's lexical rules (strings, raw strings, multi-line strings,
//! comments, line continuations) to find two things without parsing: how deeply blocks nest
//! (the KDL parser recurses once per level, so a plan nested thousands deep would overflow the
//! stack), and where each top-level node starts and ends, so that when one node has a syntax
//! error the others can still be checked for meaning. It never decides what is valid KDL.

use std::ops::Range;

/// What the scan found.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Outline {
    /// The byte offset of the first `{` nested deeper than the limit, if any.
    pub too_deep_at: Option<usize>,
    /// Each top-level node's bytes, in order.
    pub nodes: Vec<Range<usize>>,
}

enum State {
    Normal,
    LineComment,
    BlockComment(usize),
    Text,
    MultiLineText,
    RawText(usize),
    RawMultiLineText(usize),
}

/// Scans `text`, stopping at the first block nested deeper than `max_depth`.
pub(super) fn outline(text: &str, max_depth: usize) -> Outline {
    let bytes = text.as_bytes();
    let mut out = Outline::default();
    let mut state = State::Normal;
    let mut depth = 0usize;
    let mut node_start: Option<usize> = None;
    let mut continued = false;
    let mut i = 0;
    let starts = |at: usize, prefix: &[u8]| bytes[at..].starts_with(prefix);
    // `n` hashes after position `at`.
    let hashes_at =
        |at: usize, n: usize| bytes.len() >= at + n && bytes[at..at + n].iter().all(|&b| b == b'#');
    while i < bytes.len() {
        let b = bytes[i];
        match state {
            State::LineComment => {
                if b == b'\n' {
                    state = State::Normal;
                    continue; // the newline ends the node as in Normal
                }
            }
            State::BlockComment(level) => {
                if starts(i, b"/*") {
                    state = State::BlockComment(level + 1);
                    i += 1;
                } else if starts(i, b"*/") {
                    state = if level == 1 {
                        State::Normal
                    } else {
                        State::BlockComment(level - 1)
                    };
                    i += 1;
                }
            }
            State::Text => match b {
                b'\\' => i += 1,
                b'"' => state = State::Normal,
                // A single-line string cannot hold a newline: KDL reports it; the scan moves on.
                b'\n' => {
                    state = State::Normal;
                    continue;
                }
                _ => {}
            },
            State::MultiLineText => {
                if b == b'\\' {
                    i += 1;
                } else if starts(i, b"\"\"\"") {
                    state = State::Normal;
                    i += 2;
                }
            }
            State::RawText(n) => {
                if b == b'"' && hashes_at(i + 1, n) {
                    state = State::Normal;
                    i += n;
                } else if b == b'\n' {
                    state = State::Normal;
                    continue;
                }
            }
            State::RawMultiLineText(n) => {
                if starts(i, b"\"\"\"") && hashes_at(i + 3, n) {
                    state = State::Normal;
                    i += 2 + n;
                }
            }
            State::Normal => {
                let content = |node_start: &mut Option<usize>| {
                    node_start.get_or_insert(i);
                };
                match b {
                    b'/' if starts(i, b"//") => state = State::LineComment,
                    b'/' if starts(i, b"/*") => {
                        state = State::BlockComment(1);
                        i += 1;
                    }
                    b'"' => {
                        content(&mut node_start);
                        if starts(i, b"\"\"\"") {
                            state = State::MultiLineText;
                            i += 2;
                        } else {
                            state = State::Text;
                        }
                    }
                    b'#' => {
                        content(&mut node_start);
                        let n = bytes[i..].iter().take_while(|&&c| c == b'#').count();
                        if starts(i + n, b"\"\"\"") {
                            state = State::RawMultiLineText(n);
                            i += n + 2;
                        } else if starts(i + n, b"\"") {
                            state = State::RawText(n);
                            i += n;
                        } else {
                            i += n - 1;
                        }
                    }
                    b'\\' => continued = true,
                    b'{' => {
                        content(&mut node_start);
                        depth += 1;
                        if depth > max_depth {
                            out.too_deep_at = Some(i);
                            return out;
                        }
                    }
                    b'}' => {
                        content(&mut node_start);
                        depth = depth.saturating_sub(1);
                    }
                    b'\n' | b';' if depth == 0 => {
                        if b == b'\n' && continued {
                            continued = false;
                        } else if let Some(start) = node_start.take() {
                            out.nodes.push(start..i);
                        }
                    }
                    b'\n' => continued = false,
                    _ if b.is_ascii_whitespace() => {}
                    _ => content(&mut node_start),
                }
            }
        }
        i += 1;
    }
    if let Some(start) = node_start {
        out.nodes.push(start..bytes.len());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nodes(text: &str) -> Vec<&str> {
        outline(text, 8)
            .nodes
            .into_iter()
            .map(|r| &text[r])
            .collect()
    }

    #[test]
    fn top_level_nodes_with_blocks_strings_and_comments() {
        let text = "plan \"a;b\" { seed 1\n  description \"x}\" }\n// phase \"c\" {\n/* { */ target \"sim\"; workload { input 1 }\nphase #\"raw \" { \"# { x }\n";
        assert_eq!(
            nodes(text),
            [
                "plan \"a;b\" { seed 1\n  description \"x}\" }",
                "target \"sim\"",
                "workload { input 1 }",
                "phase #\"raw \" { \"# { x }",
            ]
        );
        let continued = "phase \"a\" \\\n  { rate 1 }\nsla { }";
        assert_eq!(
            nodes(continued),
            ["phase \"a\" \\\n  { rate 1 }", "sla { }"]
        );
        let multi = "a \"\"\"\n{ { {\n\"\"\"\nb";
        assert_eq!(nodes(multi), ["a \"\"\"\n{ { {\n\"\"\"", "b"]);
    }

    #[test]
    fn nesting_beyond_the_limit_is_found_where_it_starts() {
        let deep = "a {".repeat(20) + &"}".repeat(20);
        assert_eq!(outline(&deep, 8).too_deep_at, Some(8 * 3 + 2));
        assert_eq!(outline(&deep, 20).too_deep_at, None);
        // Braces in strings and comments do not nest.
        let quoted = format!("a \"{}\" /* {} */", "{".repeat(50), "{".repeat(50));
        assert_eq!(outline(&quoted, 8).too_deep_at, None);
    }
}
