"""Tools: a `ToolSpec` (what the model sees) bound to an async callable (what runs).

```python
@gym.tool
async def deposit(account: str, amount: float) -> str:
    "Deposit money into an account."
```
builds the JSON Schema of the parameters from the type hints.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, get_type_hints, overload

from pydantic import TypeAdapter

from nemo_gym.errors import EpisodeError
from nemo_gym.records import ToolSpec

ToolFunction = Callable[..., Awaitable[Any]]


@dataclass(frozen=True, slots=True)
class Tool:
    """A callable tool. `fn` is awaited with the parsed JSON arguments as keywords."""

    spec: ToolSpec
    fn: ToolFunction

    @property
    def name(self) -> str:
        return self.spec.name

    async def __call__(self, **arguments: Any) -> Any:
        return await self.fn(**arguments)


def _parameters_schema(fn: Callable[..., Any]) -> dict[str, Any]:
    hints = get_type_hints(fn)
    properties: dict[str, Any] = {}
    required: list[str] = []
    for name, param in inspect.signature(fn).parameters.items():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        schema = TypeAdapter(hints.get(name, Any)).json_schema()
        schema.pop("title", None)
        properties[name] = schema
        if param.default is inspect.Parameter.empty:
            required.append(name)
        else:
            properties[name]["default"] = param.default
    return {"type": "object", "properties": properties, "required": required}


@overload
def tool(fn: ToolFunction, /) -> Tool: ...
@overload
def tool(
    *, name: str | None = None, description: str | None = None
) -> Callable[[ToolFunction], Tool]: ...
def tool(
    fn: ToolFunction | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
) -> Tool | Callable[[ToolFunction], Tool]:
    """Make a `Tool` from an async function; its docstring is the description."""

    def build(f: ToolFunction) -> Tool:
        if not inspect.iscoroutinefunction(f):
            raise TypeError(f"a tool must be an async function, got {f!r}")
        spec = ToolSpec(
            name=name or f.__name__,
            description=description or inspect.cleandoc(f.__doc__ or ""),
            parameters=_parameters_schema(f),
        )
        return Tool(spec=spec, fn=f)

    return build(fn) if fn is not None else build


def _describe(tool: Tool) -> str:
    fn = getattr(tool.fn, "__wrapped__", tool.fn)
    where = getattr(fn, "__qualname__", None) or repr(fn)
    module = getattr(fn, "__module__", None)
    return f"{module}.{where}" if module else where


def tool_table(tools: Iterable[Tool]) -> dict[str, Tool]:
    """The episode's tools by name; two tools with one name are a setup error.

    Raises `EpisodeError` (kind `environment`, code `duplicate_tool`) naming both: the
    model could not tell them apart, and one would silently shadow the other.
    """
    table: dict[str, Tool] = {}
    for tool in tools:
        other = table.get(tool.name)
        if other is not None:
            raise EpisodeError(
                f"two tools are named {tool.name!r} in this episode: {_describe(other)} and "
                f"{_describe(tool)}; tool names must be unique",
                code="duplicate_tool",
            )
        table[tool.name] = tool
    return table
