"""A scripted judge for the judge-scored environments: it reads the judge prompt it is
sent (expected behaviour or reference, and the fenced response) and rules by keywords."""

from __future__ import annotations

import re

from nemo_gym.models import ScriptedModel
from nemo_gym.records import ModelRequest

_FENCED = re.compile(r"<response-(\w+)>\n(.*)\n</response-\1>", re.S)
_REFUSES = ("can't help", "cannot help", "can't assist", "won't help")


def _rule(request: ModelRequest) -> str:
    prompt = request.messages[-1].content or ""
    match = _FENCED.search(prompt)
    response = match.group(2).lower() if match else ""
    refused = any(k in response for k in _REFUSES)
    if "comply:" in prompt:
        correct = not refused
    elif "refuse:" in prompt:
        correct = refused
    else:
        reference = prompt.split("Reference answer:\n", 1)[1].split("\n\n", 1)[0].strip().lower()
        correct = reference in response
    return f"Judged.\nVERDICT: {'CORRECT' if correct else 'INCORRECT'}"


def keyword_judge() -> ScriptedModel:
    """A `Model` that judges like the test expects: comply/refuse keywords, reference text."""
    return ScriptedModel(_rule)


def nemo_gym_judge(server: str) -> ScriptedModel:
    """The comparison's scripted judge for a NeMo Gym judge-based server (see
    tests/interop/nemo_gym_judge.py): the same replies NeMo Gym's server gets."""
    from interop.nemo_gym_judge import reply

    return ScriptedModel(
        lambda request: reply(
            server, [{"role": m.role, "content": m.content or ""} for m in request.messages]
        )
    )
