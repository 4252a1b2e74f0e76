"""The sampling knobs trainers set beyond `Sampling`'s own fields, and who honours them.

A trainer's config carries more than temperature and top_p: TRL's `GRPOConfig` has
`top_k`, `min_p` and `repetition_penalty` (and `generation_kwargs`, which commonly
holds `presence_penalty` and `frequency_penalty`); vLLM's `SamplingParams` and its
OpenAI-compatible servers take all five. They travel in `Sampling.extra` under those
names. An adapter either honours a knob (applies it, or sends it in the field its
backend reads) or refuses it with a `ModelError(code="unsupported")` naming the knob
and the adapter: a knob silently dropped would train on samples from another
distribution than the one configured.

- `LivePolicy`, `Local`: all five, in their own sampler (`policy.Knobs`); any other
  key of `Sampling.extra` is refused too (there is no request body to put it in).
- `VLLM`: all five, in `SamplingParams`.
- `OpenAIChat`, `OpenAICompletions`, `OpenAIResponses`: all five, as body fields
  (vLLM's and SGLang's servers read them; OpenAI's own API answers a 400 for those it
  lacks, never ignores them).
- `Anthropic`: `top_k` (the Messages API has no other; vLLM's Messages endpoint
  neither, and it would drop them silently).
- `ScriptedModel`: all five: its reply function receives them in
  `request.sampling.extra` (a list of replies ignores sampling, as it does temperature).

A knob at its neutral value (`top_k` 0 or -1, `min_p` 0, `repetition_penalty` 1,
penalties 0) changes nothing, so every adapter accepts it.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from nemo_gym.errors import ModelError

__all__ = ["KNOBS", "NEUTRAL", "active_knobs", "refuse_knobs"]

NEUTRAL: Mapping[str, tuple[Any, ...]] = {
    "top_k": (None, 0, -1),
    "min_p": (None, 0, 0.0),
    "repetition_penalty": (None, 1, 1.0),
    "presence_penalty": (None, 0, 0.0),
    "frequency_penalty": (None, 0, 0.0),
}
"""Each knob's values that leave sampling unchanged."""

KNOBS: frozenset[str] = frozenset(NEUTRAL)
"""The sampling knobs `Sampling.extra` may carry for any adapter."""


def active_knobs(extra: Mapping[str, Any]) -> dict[str, Any]:
    """The knobs of `extra` set to something other than their neutral value."""
    return {
        name: value
        for name, value in extra.items()
        if name in NEUTRAL and (isinstance(value, bool) or value not in NEUTRAL[name])
    }


def refuse_knobs(
    extra: Mapping[str, Any],
    adapter: str,
    honoured: Collection[str],
    *,
    other_fields: bool = True,
) -> None:
    """Raise `ModelError(code="unsupported")` for each knob in `extra` that `adapter`
    does not honour. `other_fields=False`: every other key of `extra` is refused too
    (an adapter with no request body to put it in)."""
    refused = sorted(k for k in active_knobs(extra) if k not in honoured)
    if not other_fields:
        refused += sorted(k for k in extra if k not in KNOBS)
    if refused:
        names = ", ".join(f"{k}={extra[k]!r}" for k in refused)
        can = ", ".join(sorted(honoured)) or "none of them"
        raise ModelError(
            f"{adapter} cannot honour the sampling option(s) {names} (of Sampling.extra); "
            f"it honours {can}. Remove them, or use an adapter that applies them "
            "(see nemo_gym.knobs)",
            code="unsupported",
        )
