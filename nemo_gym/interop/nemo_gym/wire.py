"""NeMo Gym's wire shapes: Responses-API `input` and `tools` in, Responses objects out.

`messages_from_input` reads a row's `responses_create_params.input` (a string, or items
with `role` and `content` as text or content parts, `function_call` and
`function_call_output` items); `developer` messages become system messages.
`response_from_trajectory` writes what a rollout added after its opening messages as
a Responses object (`reasoning`, `message`, `function_call` and `function_call_output`
items), the shape NeMo Gym's verifiers read.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from nemo_gym.errors import ConfigError
from nemo_gym.records import Message, ToolCall, Trajectory

if TYPE_CHECKING:
    from nemo_gym.envs.rows import Row

__all__ = ["messages_from_input", "prompt_of", "response_from_trajectory", "tools_from_params"]

_ROLES = {"user": "user", "system": "system", "developer": "system", "assistant": "assistant"}


def _text(content: Any, where: str) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        parts = []
        for part in content:
            if isinstance(part, Mapping) and isinstance(part.get("text"), str):
                parts.append(part["text"])
            elif isinstance(part, Mapping) and part.get("type") in (
                "input_image",
                "input_file",
                "input_audio",
            ):
                raise ConfigError(f"{where}: {part['type']} content is not supported (text only)")
        return "".join(parts)
    raise ConfigError(f"{where}: message content must be text or content parts")


def messages_from_input(
    value: Any, where: str = "responses_create_params.input"
) -> tuple[Message, ...]:
    """Our messages for a Responses-API `input` (see the module doc)."""
    if isinstance(value, str):
        return (Message.user(value),)
    if not isinstance(value, Sequence) or not value:
        raise ConfigError(f"{where}: must be a string or a non-empty list of input items")
    messages: list[Message] = []
    for index, item in enumerate(value):
        at = f"{where}[{index}]"
        if not isinstance(item, Mapping):
            raise ConfigError(f"{at}: an input item must be an object")
        kind = item.get("type", "message")
        if kind == "function_call":
            call = ToolCall(
                id=str(item.get("call_id") or item.get("id") or f"call_{index}"),
                name=str(item["name"]),
                arguments=str(item.get("arguments") or "{}"),
            )
            if messages and messages[-1].role == "assistant" and not messages[-1].content:
                last = messages.pop()
                messages.append(last.model_copy(update={"tool_calls": (*last.tool_calls, call)}))
            else:
                messages.append(Message.assistant(tool_calls=(call,)))
        elif kind == "function_call_output":
            output = item.get("output")
            messages.append(
                Message.tool(
                    output if isinstance(output, str) else _text(output, at),
                    tool_call_id=str(item.get("call_id", "")),
                )
            )
        elif kind == "reasoning":
            continue  # a previous turn's reasoning is not part of the conversation sent again
        elif kind == "message":
            role = _ROLES.get(str(item.get("role")))
            if role is None:
                raise ConfigError(f"{at}: unknown role {item.get('role')!r}")
            messages.append(Message(role=role, content=_text(item.get("content", ""), at)))  # type: ignore[arg-type]
        else:
            raise ConfigError(f"{at}: input items of type {kind!r} are not supported")
    return tuple(messages)


def tools_from_params(params: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The function tools of `responses_create_params` as {name, description, parameters}."""
    tools = []
    for tool in params.get("tools") or ():
        inner = tool.get("function", tool) if isinstance(tool, Mapping) else None
        if not isinstance(inner, Mapping) or (tool.get("type", "function") != "function"):
            raise ConfigError(f"only function tools are supported, got {tool!r}"[:200])
        tools.append(
            {
                "name": inner["name"],
                "description": inner.get("description") or "",
                "parameters": inner.get("parameters") or {"type": "object", "properties": {}},
            }
        )
    return tools


def prompt_of(row: Row) -> tuple[tuple[Message, ...], list[dict[str, Any]]]:
    """The messages and function tools of a NeMo Gym row's `responses_create_params`."""
    params = row.require("responses_create_params", dict)
    where = f"{row.where}: responses_create_params.input"
    return messages_from_input(params.get("input"), where), tools_from_params(params)


def _output_items(messages: Sequence[Message]) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    for index, message in enumerate(messages):
        if message.role == "assistant":
            if message.reasoning:
                items.append(
                    {
                        "type": "reasoning",
                        "id": f"rs_{index}",
                        "summary": [{"type": "summary_text", "text": message.reasoning}],
                    }
                )
            if message.content:
                items.append(
                    {
                        "type": "message",
                        "id": f"msg_{index}",
                        "role": "assistant",
                        "status": "completed",
                        "content": [
                            {"type": "output_text", "text": message.content, "annotations": []}
                        ],
                    }
                )
            for call in message.tool_calls:
                items.append(
                    {
                        "type": "function_call",
                        "id": f"fc_{call.id}",
                        "call_id": call.id,
                        "name": call.name,
                        "arguments": call.arguments,
                        "status": "completed",
                    }
                )
        elif message.role == "tool":
            items.append(
                {
                    "type": "function_call_output",
                    "call_id": message.tool_call_id or "",
                    "output": message.content or "",
                }
            )
    return items


def response_from_trajectory(
    trajectory: Trajectory,
    opening: int,
    *,
    model: str = "nemo_gym",
    tools: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """A Responses object for what the rollout added after its first `opening` messages."""
    added = [m for m in trajectory.messages[opening:] if m.role != "system"]
    return {
        "id": "resp_nemo_gym",
        "object": "response",
        "created_at": float(int(time.time())),
        "model": model,
        "status": "completed",
        "output": _output_items(added),
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [{"type": "function", "strict": False, **dict(t)} for t in tools],
    }
