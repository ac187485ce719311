//! `/v1/completions`: chunks with a choice's `text`, as vLLM streams them, and the whole answer.

use serde_json::{json, Value};

use super::{openai, Counts, Finish, Frame, Whole};
use crate::sim::stream::{json_fragment, SimRequest};

/// One completion's stream.
pub struct Stream<'a> {
    pub(super) request: &'a SimRequest,
    pub(super) id: &'a str,
}

impl Stream<'_> {
    pub(super) fn text(&self, text: &str) -> Vec<Frame> {
        vec![Frame::Data(self.chunk(text, None))]
    }

    pub(super) fn finish(&self, finish: Finish, counts: Counts) -> Vec<Frame> {
        openai::end(self.request, finish, counts, |reason| {
            self.chunk("", reason)
        })
    }

    fn chunk(&self, text: &str, finish: Option<&str>) -> Value {
        let choice = json!({"index": 0, "text": text, "logprobs": null, "finish_reason": finish,
                            "stop_reason": null});
        openai::envelope(self.request, self.id, "text_completion", choice)
    }
}

/// A whole completion.
pub(super) fn whole(request: &SimRequest, id: &str, answer: Whole<'_>) -> Value {
    let text = if request.json_answer {
        json_fragment(answer.text, true, true)
    } else {
        answer.text.to_string()
    };
    let choice = json!({"index": 0, "text": text, "logprobs": null, "finish_reason": "length"});
    openai::body(request, id, "text_completion", choice, answer.counts)
}
