//! `/v1/rerank`: one relevance score per document, and the prompt tokens read.

use rand::{Rng, SeedableRng};
use serde_json::{json, Value};

use crate::sim::stream::SimRequest;

/// A seeded score per document, in the documents' order.
pub(super) fn whole(request: &SimRequest, id: &str, seed: u64) -> Value {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let results: Vec<Value> = (0..request.inputs)
        .map(|index| json!({"index": index, "relevance_score": rng.random_range(-10.0..10.0f64)}))
        .collect();
    json!({"id": id, "model": request.model, "object": "list", "results": results,
           "usage": super::embeddings::usage(request)})
}
