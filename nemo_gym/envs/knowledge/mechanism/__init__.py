"""NeMo Gym's FukuyamaBench scoring: a predicted mechanism's steps against the gold
pathway's checkpoints by canonical-SMILES product sets (RDKit).

`metrics.py` beside this module is NeMo Gym's own (`resources_servers/fukuyamabench`,
itself a port of the upstream scorer, Apache-2.0), and `extract_pathway` here is its
app's reading of the reply, both as written. NeMo Gym pins `rdkit==2025.9.6` because
canonical SMILES change across RDKit releases: the `chemistry` extra pins the same.
"""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = ["extract_pathway"]

_FENCED_ARRAY_RE = re.compile(r"```(?:json)?\s*(\[.*?\])\s*```", re.DOTALL)
_STEP_OBJECT_RE = re.compile(r'\{[^{}]*"step_id"[^{}]*\}', re.DOTALL)
_RESULT_HEADER_RE = re.compile(r"##\s*Result\s*\n")


def _is_pathway(value: Any) -> bool:
    return (
        isinstance(value, list)
        and len(value) > 0
        and any(isinstance(s, dict) and ("product_smiles" in s or "products" in s) for s in value)
    )


def extract_pathway(text: str) -> list[dict] | None:
    """Recover the predicted step array from the model's output.

    Tried in upstream's order: fenced JSON arrays (last first, so a model that
    revises its answer is read at its conclusion), then any balanced array after
    the ``## Result`` header, then loose per-step objects.
    """
    for block in reversed(_FENCED_ARRAY_RE.findall(text)):
        try:
            parsed = json.loads(block)
        except json.JSONDecodeError:
            continue
        if _is_pathway(parsed):
            return parsed

    header = _RESULT_HEADER_RE.search(text)
    search_text = text[header.end() :] if header else text
    for start in (m.start() for m in re.finditer(r"\[", search_text)):
        depth = 0
        for i in range(start, len(search_text)):
            if search_text[i] == "[":
                depth += 1
            elif search_text[i] == "]":
                depth -= 1
                if depth == 0:
                    try:
                        parsed = json.loads(search_text[start : i + 1])
                    except json.JSONDecodeError:
                        break
                    if _is_pathway(parsed):
                        return parsed
                    break

    steps = []
    for match in _STEP_OBJECT_RE.finditer(text):
        try:
            step = json.loads(match.group())
        except json.JSONDecodeError:
            continue
        if "product_smiles" in step or "products" in step:
            steps.append(step)
    return steps or None
