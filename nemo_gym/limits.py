"""Parsing what the trainer does not control (task files, model-written documents), bounded.

A policy learns whatever makes its reward pipeline fall over, and a task file may come
from anyone: a 386-byte YAML reply with nested aliases expands to 288 MB the moment a
row is written, and `[` ten thousand times deep is a `RecursionError` in the json
module. Everything here is a leaf (the standard library and `nemo_gym.errors` only), so
any module that reads such input can call it:

- `check_document(value)`: the *expanded* size of a parsed document (containers and
  scalars counted every time an alias reaches them, string characters summed) and its
  depth, against `DocumentLimits`; an iterative walk that stops at the first excess, so
  a billion laughs costs as much as the limit, not the expansion.
- `loads_json(text)`: `json.loads` plus `check_document`; too deep is a `LimitExceeded`,
  never a `RecursionError`.
- `json_line(text, where)`: one line of a JSON-lines file as an object, or a
  `ConfigError` naming the file, the line, the column and the last field read.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from nemo_gym.errors import ConfigError

__all__ = [
    "DEFAULT_LIMITS",
    "TASK_FILE_LIMITS",
    "DocumentLimits",
    "LimitExceeded",
    "check_document",
    "json_error",
    "json_line",
    "loads_json",
]


class LimitExceeded(ValueError):
    """A document over one of its `DocumentLimits`; the message names the limit."""


@dataclass(frozen=True, slots=True)
class DocumentLimits:
    """How big a parsed document may be.

    `max_chars`: characters of the text, and of all strings (keys included) of the
    expanded document; `max_nodes`: values in the expanded document (an alias counts
    the whole subtree it points at, again); `max_depth`: nesting of arrays/objects.
    """

    max_chars: int = 1_000_000
    max_nodes: int = 200_000
    max_depth: int = 100


DEFAULT_LIMITS = DocumentLimits()
"""What a model-written document may cost (the structured-document verifiers)."""

TASK_FILE_LIMITS = DocumentLimits(max_chars=64 << 20, max_nodes=10_000_000, max_depth=200)
"""What one row of a task file may cost: large prompts are fine, pathological nesting is not."""


def check_document(value: Any, limits: DocumentLimits = DEFAULT_LIMITS) -> None:
    """Raise `LimitExceeded` when the expanded `value` is over `limits` (see the module doc)."""
    nodes = chars = 0
    # (value, depth); a list is the stack, so depth costs no recursion.
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        nodes += 1
        if nodes > limits.max_nodes:
            raise LimitExceeded(f"the document has over {limits.max_nodes} values (max_nodes)")
        if isinstance(item, str):
            chars += len(item)
        elif isinstance(item, dict | list | tuple):
            if depth > limits.max_depth:
                raise LimitExceeded(
                    f"the document is nested over {limits.max_depth} levels deep (max_depth)"
                )
            if isinstance(item, dict):
                for key, child in item.items():
                    if isinstance(key, str):
                        chars += len(key)
                    stack.append((child, depth + 1))
            else:
                stack.extend((child, depth + 1) for child in item)
        else:
            continue
        if chars > limits.max_chars:
            raise LimitExceeded(
                f"the document's strings total over {limits.max_chars} characters (max_chars)"
            )


def _nesting_possible(text: str | bytes, max_depth: int) -> bool:
    # Fewer openers in all than the limit: no walk needed (str.count runs at C speed).
    if isinstance(text, str):
        return text.count("[") + text.count("{") > max_depth
    return text.count(b"[") + text.count(b"{") > max_depth


def loads_json(text: str | bytes, limits: DocumentLimits = DEFAULT_LIMITS) -> Any:
    """`json.loads(text)` within `limits`: `LimitExceeded`, or `ValueError` for bad JSON."""
    if len(text) > limits.max_chars:
        raise LimitExceeded(f"the text is over {limits.max_chars} characters (max_chars)")
    try:
        value = json.loads(text)
    except RecursionError:
        raise LimitExceeded(
            f"the document is nested over {limits.max_depth} levels deep (max_depth)"
        ) from None
    if isinstance(value, dict | list) and (
        _nesting_possible(text, limits.max_depth) or len(text) > limits.max_nodes
    ):
        check_document(value, limits)
    return value


_LAST_KEY = re.compile(r'"((?:[^"\\]|\\.)*)"\s*:')


def json_error(text: str, exc: json.JSONDecodeError) -> str:
    """What is wrong with a line of JSON: the error, its column, and the last field read
    before it (the field being written when the line broke)."""
    keys = _LAST_KEY.findall(text[: exc.pos])
    after = f", after field {keys[-1]!r}" if keys else ""
    return f"{exc.msg} at column {exc.pos + 1}{after}"


def json_line(text: str, where: str, limits: DocumentLimits = TASK_FILE_LIMITS) -> dict[str, Any]:
    """One line of a JSON-lines file as an object; `ConfigError` naming `where` (file:line)
    when it is not JSON, not an object, or over `limits` (e.g. nested too deep)."""
    try:
        row = loads_json(text, limits)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{where}: not valid JSON ({json_error(text, exc)})") from None
    except LimitExceeded as exc:
        raise ConfigError(f"{where}: {exc}") from None
    except ValueError as exc:  # an integer past Python's digit limit, say
        raise ConfigError(f"{where}: not valid JSON ({exc})") from None
    if not isinstance(row, dict):
        raise ConfigError(f"{where}: expected a JSON object, got {row!r:.80}")
    return row
