//! `/v1/embeddings`: a list of embeddings, one per input, and the prompt tokens read.

use rand::{Rng, SeedableRng};
use serde_json::{json, Value};

use crate::sim::stream::SimRequest;

/// The length of each embedding the simulator answers with (a small embedding model's).
const EMBEDDING_DIMENSIONS: usize = 384;

/// One seeded embedding per input, of unit length, so that a client decoding them pays what
/// it pays for a real model's.
pub(super) fn whole(request: &SimRequest, seed: u64) -> Value {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let data: Vec<Value> = (0..request.inputs)
        .map(|index| {
            let raw: Vec<f64> = (0..EMBEDDING_DIMENSIONS)
                .map(|_| rng.random_range(-1.0..1.0f64))
                .collect();
            let norm = raw
                .iter()
                .map(|x| x * x)
                .sum::<f64>()
                .sqrt()
                .max(f64::MIN_POSITIVE);
            let embedding: Vec<f64> = raw.iter().map(|x| x / norm).collect();
            json!({"object": "embedding", "index": index, "embedding": embedding})
        })
        .collect();
    json!({"object": "list", "model": request.model, "data": data, "usage": usage(request)})
}

/// What an embeddings or rerank request read: its prompt tokens, and no more.
pub(super) fn usage(request: &SimRequest) -> Value {
    json!({"prompt_tokens": request.prompt_tokens, "total_tokens": request.prompt_tokens})
}
