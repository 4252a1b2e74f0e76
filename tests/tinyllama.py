"""A random-weight two-layer Llama over a real tokenizer's vocabulary: a policy for
trainer tests that needs no download and runs in milliseconds on the CPU."""

from __future__ import annotations

from typing import Any


def tiny_llama(tokenizer: Any, *, seed: int = 0, **config: Any) -> Any:
    """The model, its weights drawn from `seed`; `config` overrides LlamaConfig fields
    (e.g. `attention_dropout=0.5`)."""
    import torch
    import transformers

    settings: dict[str, Any] = {
        "vocab_size": len(tokenizer),
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "max_position_embeddings": 1024,
        "tie_word_embeddings": True,
        "bos_token_id": tokenizer.bos_token_id,
        "eos_token_id": tokenizer.eos_token_id,
        "pad_token_id": tokenizer.pad_token_id,
        **config,
    }
    torch.manual_seed(seed)
    return transformers.LlamaForCausalLM(transformers.LlamaConfig(**settings))
