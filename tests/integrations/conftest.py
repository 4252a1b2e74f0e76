"""Fixtures shared by the trainer-integration tests."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def smollm2_tokenizer():
    """SmolLM2's tokenizer, from the embedded GGUF (converted once and cached; no download)."""
    transformers = pytest.importorskip("transformers")
    from nemo_gym.errors import ModelError
    from nemo_gym.models.local import converted_checkpoint, embedded_gguf_path

    try:
        directory, _ = converted_checkpoint(embedded_gguf_path())
    except ModelError as exc:
        pytest.skip(str(exc))
    return transformers.AutoTokenizer.from_pretrained(str(directory))
