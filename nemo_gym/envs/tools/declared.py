"""Tools known only by their schema: what the model may call when nothing needs to run.

Single-step function calling is scored on the calls the model makes, not on what they
return, so each declared tool answers with a fixed acknowledgement (or the result the
task gives for it). `declared_tools` builds them from OpenAI- or Responses-style specs.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from nemo_gym.errors import ConfigError
from nemo_gym.records import ToolSpec
from nemo_gym.tools import Tool

__all__ = ["declared_tools", "tool_spec"]

_EMPTY = {"type": "object", "properties": {}}


def tool_spec(spec: Mapping[str, Any]) -> ToolSpec:
    """A `ToolSpec` from {"name", "description", "parameters"} or OpenAI's {"function": ...}."""
    inner = spec.get("function", spec)
    if not isinstance(inner, Mapping) or not isinstance(inner.get("name"), str):
        raise ConfigError(f"a tool spec needs a 'name': {dict(spec)!r}"[:300])
    return ToolSpec(
        name=inner["name"],
        description=str(inner.get("description") or ""),
        parameters=dict(inner.get("parameters") or _EMPTY),
    )


def _answer(reply: Any) -> Any:
    text = reply if isinstance(reply, str) else json.dumps(reply)

    async def run(**arguments: Any) -> str:
        return text

    return run


def declared_tools(
    specs: Sequence[Mapping[str, Any]], results: Mapping[str, Any] | None = None
) -> list[Tool]:
    """Tools for `specs` that return `results[name]` (default: an acknowledgement)."""
    tools = []
    for spec in specs:
        parsed = tool_spec(spec)
        reply = (results or {}).get(parsed.name, {"status": "ok", "tool": parsed.name})
        tools.append(Tool(spec=parsed, fn=_answer(reply)))
    return tools
