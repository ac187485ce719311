//! The one open thing of a Responses or Messages stream: an output item (Responses) or a
//! content block (Messages) is opened, written to and closed before the next one opens.

/// What kind of item or block is open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Block {
    Reasoning,
    Text,
    Call,
}

/// Which item or block is open, its index, and its text so far (a Responses `.done` event
/// repeats it, as servers do).
#[derive(Debug, Default)]
pub(super) struct Blocks {
    pub(super) open: Option<Block>,
    /// The index of the open item or block.
    pub(super) index: usize,
    /// The index the next one opened gets.
    next_index: usize,
    pub(super) text: String,
}

/// An item or block taken to be closed.
pub(super) struct Closed {
    pub(super) kind: Block,
    pub(super) index: usize,
    pub(super) text: String,
}

impl Blocks {
    /// Whether a piece of `kind` goes in a new item or block: when another kind is open, or
    /// always for a call (each call is its own).
    pub(super) fn needs(&self, kind: Block) -> bool {
        self.open != Some(kind) || kind == Block::Call
    }

    /// Opens the next item or block as `kind`.
    pub(super) fn begin(&mut self, kind: Block) {
        self.index = self.next_index;
        self.next_index += 1;
        self.open = Some(kind);
    }

    /// Takes the open item or block, to close it.
    pub(super) fn end(&mut self) -> Option<Closed> {
        let kind = self.open.take()?;
        Some(Closed {
            kind,
            index: self.index,
            text: std::mem::take(&mut self.text),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_continues_its_block_and_every_call_opens_its_own() {
        let mut blocks = Blocks::default();
        assert!(blocks.needs(Block::Text));
        blocks.begin(Block::Text);
        blocks.text.push_str("hi");
        assert!(!blocks.needs(Block::Text));
        assert!(blocks.needs(Block::Call));
        let closed = blocks.end().unwrap();
        assert_eq!(
            (closed.kind, closed.index, closed.text.as_str()),
            (Block::Text, 0, "hi")
        );
        blocks.begin(Block::Call);
        assert!(blocks.needs(Block::Call));
        assert_eq!(blocks.end().map(|c| c.index), Some(1));
        assert!(blocks.end().is_none());
    }
}
