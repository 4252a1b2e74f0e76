"""Model adapters. Each is imported on first use, so `import nemo_gym` stays fast."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from nemo_gym.models.base import ModelAdapter, RetryPolicy

if TYPE_CHECKING:
    from nemo_gym.models.anthropic import Anthropic
    from nemo_gym.models.http import HTTPOptions, Timeouts
    from nemo_gym.models.local import Local
    from nemo_gym.models.openai import OpenAIChat, OpenAICompletions, OpenAIResponses
    from nemo_gym.models.policy import LivePolicy
    from nemo_gym.models.scripted import ScriptedModel
    from nemo_gym.models.vllm import VLLM

_LAZY = {
    "OpenAIChat": "nemo_gym.models.openai",
    "OpenAIResponses": "nemo_gym.models.openai",
    "OpenAICompletions": "nemo_gym.models.openai",
    "Anthropic": "nemo_gym.models.anthropic",
    "Local": "nemo_gym.models.local",
    "LivePolicy": "nemo_gym.models.policy",
    "ScriptedModel": "nemo_gym.models.scripted",
    "VLLM": "nemo_gym.models.vllm",
    "Timeouts": "nemo_gym.models.http",
    "HTTPOptions": "nemo_gym.models.http",
}

__all__ = [
    "VLLM",
    "Anthropic",
    "HTTPOptions",
    "LivePolicy",
    "Local",
    "ModelAdapter",
    "OpenAIChat",
    "OpenAICompletions",
    "OpenAIResponses",
    "RetryPolicy",
    "ScriptedModel",
    "Timeouts",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'nemo_gym.models' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
