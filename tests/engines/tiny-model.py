#!/usr/bin/env python3
"""Makes the tiny model llmload's real-engine tests serve: a llama-architecture GGUF with random
weights (seeded, so the same file every time) and a real tokenizer, plus that tokenizer as a
Hugging Face tokenizer.json, so that a plan can build prompts of exact lengths under it.

The tokenizer is Llama 3's (BPE, 128,256 tokens), taken from the vocab-only GGUF that llama.cpp
ships in its models/ folder; the weights are 2 layers of width 64, small enough that one core
serves hundreds of tokens per second per slot. Nothing is downloaded: the vocab file and the
gguf package both come from the llama.cpp tree tests/engines/llama-server.sh unpacks (numpy
from PyPI).

    python3 tests/engines/tiny-model.py LLAMA_CPP_DIR OUT_DIR
        -> OUT_DIR/tiny-llama.gguf, OUT_DIR/tokenizer.json
"""

import json
import os
import sys

SEED = 20261201
N_EMBD = 64
N_FF = 128
N_HEAD = 4
N_HEAD_KV = 2
N_LAYER = 2
CONTEXT = 4096

# Llama 3's pre-tokenizer pattern (what llama.cpp's "llama-bpe" pre-tokenizer applies).
LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def main() -> None:
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    llama_cpp, out = sys.argv[1], sys.argv[2]
    sys.path.insert(0, os.path.join(llama_cpp, "gguf-py"))
    import numpy as np
    import gguf

    vocab = gguf.GGUFReader(os.path.join(llama_cpp, "models", "ggml-vocab-llama-bpe.gguf"))

    def field(name):
        return vocab.fields[name].contents()

    tokens = field("tokenizer.ggml.tokens")
    token_types = field("tokenizer.ggml.token_type")
    merges = field("tokenizer.ggml.merges")
    bos, eos = field("tokenizer.ggml.bos_token_id"), field("tokenizer.ggml.eos_token_id")
    n_vocab = len(tokens)

    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, "tiny-llama.gguf")
    writer = gguf.GGUFWriter(path, "llama")
    writer.add_name("llmload tiny llama (random weights)")
    writer.add_block_count(N_LAYER)
    writer.add_context_length(CONTEXT)
    writer.add_embedding_length(N_EMBD)
    writer.add_feed_forward_length(N_FF)
    writer.add_head_count(N_HEAD)
    writer.add_head_count_kv(N_HEAD_KV)
    writer.add_rope_dimension_count(N_EMBD // N_HEAD)
    writer.add_rope_freq_base(500000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_vocab_size(n_vocab)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("llama-bpe")
    writer.add_token_list(tokens)
    writer.add_token_types(token_types)
    writer.add_token_merges(merges)
    writer.add_bos_token_id(bos)
    writer.add_eos_token_id(eos)

    rng = np.random.default_rng(SEED)

    def weights(rows, cols, dtype=np.float16):
        return (rng.standard_normal((rows, cols)) * 0.02).astype(dtype)

    head_dim = N_EMBD // N_HEAD
    # The output projection is tied to the embedding (no output.weight), as small Llamas do.
    writer.add_tensor("token_embd.weight", weights(n_vocab, N_EMBD))
    writer.add_tensor("output_norm.weight", np.ones(N_EMBD, dtype=np.float32))
    for layer in range(N_LAYER):
        block = f"blk.{layer}"
        writer.add_tensor(f"{block}.attn_norm.weight", np.ones(N_EMBD, dtype=np.float32))
        writer.add_tensor(f"{block}.attn_q.weight", weights(N_HEAD * head_dim, N_EMBD, np.float32))
        writer.add_tensor(f"{block}.attn_k.weight", weights(N_HEAD_KV * head_dim, N_EMBD, np.float32))
        writer.add_tensor(f"{block}.attn_v.weight", weights(N_HEAD_KV * head_dim, N_EMBD, np.float32))
        writer.add_tensor(f"{block}.attn_output.weight", weights(N_EMBD, N_HEAD * head_dim, np.float32))
        writer.add_tensor(f"{block}.ffn_norm.weight", np.ones(N_EMBD, dtype=np.float32))
        writer.add_tensor(f"{block}.ffn_gate.weight", weights(N_FF, N_EMBD, np.float32))
        writer.add_tensor(f"{block}.ffn_up.weight", weights(N_FF, N_EMBD, np.float32))
        writer.add_tensor(f"{block}.ffn_down.weight", weights(N_EMBD, N_FF, np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()

    # The same tokenizer for Hugging Face's tokenizers library (which llmload reads).
    control = [
        {"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
         "normalized": False, "special": True}
        for i, (t, kind) in enumerate(zip(tokens, token_types))
        if kind == gguf.TokenType.CONTROL
    ]
    tokenizer = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": control,
        "normalizer": None,
        "pre_tokenizer": {
            "type": "Sequence",
            "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": LLAMA3_SPLIT}, "behavior": "Isolated", "invert": False},
                {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False},
            ],
        },
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": True,
            "vocab": {t: i for i, t in enumerate(tokens)},
            "merges": list(merges),
        },
    }
    with open(os.path.join(out, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tokenizer, f, ensure_ascii=False)
    print(path)


if __name__ == "__main__":
    main()
