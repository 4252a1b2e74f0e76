"""Structured outputs: JSON equal to a gold, JSON valid against a schema, tool calls.

`parse_json_reply` reads JSON from a reply: the whole text, else the last ```json
fenced block (then any fenced block), else the span from the first ``{`` to the last
``}`` (or ``[`` ... ``]``). Each is one `json.loads` attempt, so the cost is linear, and
each value is held to `nemo_gym.limits.DEFAULT_LIMITS` (size and depth).
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from nemo_gym.errors import ConfigError, VerifierError, require
from nemo_gym.limits import DEFAULT_LIMITS, DocumentLimits, check_document, loads_json
from nemo_gym.records import Rewards, Task, ToolCall, Trajectory
from nemo_gym.verify.common import GoldFn, get_gold, response_text
from nemo_gym.verify.extract import fenced_blocks

log = logging.getLogger(__name__)

__all__ = [
    "JSONMatch",
    "JSONSchemaVerifier",
    "ParsedJSON",
    "ToolCallMatch",
    "json_equal",
    "parse_json_reply",
]


@dataclass(frozen=True, slots=True)
class ParsedJSON:
    """The JSON value read from a reply (`ok` False: `error` says why none was)."""

    ok: bool
    value: Any = None
    source: str | None = None  # "text", "fence", "span"
    error: str | None = None


def _loads(text: str, limits: DocumentLimits = DEFAULT_LIMITS) -> tuple[bool, Any, str | None]:
    try:
        return True, loads_json(text, limits), None
    except ValueError as exc:  # not JSON, over the limits, int strings past the digit limit
        return False, None, str(exc)


def parse_json_reply(text: str, limits: DocumentLimits = DEFAULT_LIMITS) -> ParsedJSON:
    """The JSON value in a model reply, trying the places models put it (each value
    held to `limits`: over them, it is no value)."""
    stripped = text.strip()
    if not stripped:
        return ParsedJSON(False, error="empty reply")
    ok, value, first_error = _loads(stripped, limits)
    if ok:
        return ParsedJSON(True, value, "text")
    blocks = fenced_blocks(text)
    tagged = [b for b in blocks if b.lang in ("json", "jsonc", "json5")]
    for block in reversed(tagged or blocks):
        ok, value, _ = _loads(block.body, limits)
        if ok:
            return ParsedJSON(True, value, "fence")
    for opener, closer in (("{", "}"), ("[", "]")):
        start, end = text.find(opener), text.rfind(closer)
        if 0 <= start < end:
            ok, value, _ = _loads(text[start : end + 1], limits)
            if ok:
                return ParsedJSON(True, value, "span")
    return ParsedJSON(False, error=f"no JSON value found ({first_error})")


def json_equal(a: Any, b: Any, *, allow_extra_keys: bool = False) -> bool:
    """Deep JSON equality: object key order ignored, list order kept, 1 == 1.0.

    Unlike `==`, a bool never equals a number (`true` is not `1`). With
    `allow_extra_keys`, `a` may have object keys that `b` lacks.
    """
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
            return True
        return a == b
    if isinstance(a, dict) and isinstance(b, dict):
        if allow_extra_keys:
            if not b.keys() <= a.keys():
                return False
        elif a.keys() != b.keys():
            return False
        return all(json_equal(a[k], b[k], allow_extra_keys=allow_extra_keys) for k in b)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(
            json_equal(x, y, allow_extra_keys=allow_extra_keys) for x, y in zip(a, b, strict=True)
        )
    return type(a) is type(b) and a == b


def _answer(parsed: ParsedJSON) -> Any:
    # None means "no answer" in `metadata["extracted_answer"]`: a JSON null is written out.
    return "null" if parsed.value is None else parsed.value


def _no_json(parsed: ParsedJSON) -> Rewards:
    return Rewards(
        reward=0.0,
        components={"accuracy": 0.0, "format": 0.0},
        metadata={"extracted_answer": None, "reason": parsed.error},
    )


class JSONMatch:
    """1.0 when the JSON in the reply equals the gold (`json_equal`).

    The gold is a JSON-compatible value, or a string holding JSON text (a string gold
    that is not valid JSON raises `VerifierError`). Components: ``accuracy`` and
    ``format`` (1.0 when the reply held JSON at all).
    """

    def __init__(self, *, allow_extra_keys: bool = False, gold: GoldFn | None = None) -> None:
        self.allow_extra_keys = allow_extra_keys
        self.gold = gold

    def _gold(self, task: Task) -> Any:
        value = get_gold(task, self.gold)
        if isinstance(value, str):
            ok, parsed, error = _loads(value)
            if not ok:
                raise VerifierError(f"task {task.id}: the gold is not valid JSON: {error}")
            return parsed
        return value

    async def verify(self, task: Task, trajectory: Trajectory) -> Rewards:
        """Parse the reply as JSON and compare it with the gold."""
        gold = self._gold(task)
        parsed = parse_json_reply(response_text(trajectory))
        if not parsed.ok:
            return _no_json(parsed)
        score = float(json_equal(parsed.value, gold, allow_extra_keys=self.allow_extra_keys))
        return Rewards(
            reward=score,
            components={"accuracy": score, "format": 1.0},
            metadata={"extracted_answer": _answer(parsed), "source": parsed.source},
        )


def _json_path(parts: Sequence[Any]) -> str:
    """A JSON Pointer (RFC 6901) for a jsonschema error path."""
    return "/" + "/".join(str(p).replace("~", "~0").replace("/", "~1") for p in parts)


class JSONSchemaVerifier:
    """1.0 when the reply's JSON validates against a JSON Schema (needs `jsonschema`).

    `schema` is fixed, or None to read ``task.metadata["schema"]`` per task. The draft
    is taken from ``$schema`` (latest by default). A failing reply scores 0 with up to
    `max_errors` errors in ``metadata["errors"]`` as ``{"path", "schema_path",
    "message"}``, ``path`` being a JSON Pointer into the reply. An invalid schema raises
    `ConfigError` (given here) or `VerifierError` (from a task).
    """

    def __init__(
        self,
        schema: Mapping[str, Any] | bool | None = None,
        *,
        check_formats: bool = False,
        max_errors: int = 10,
    ) -> None:
        self._jsonschema = require("jsonschema", "schema")
        self.check_formats = check_formats
        self.max_errors = max_errors
        self._validator = None
        if schema is not None:
            try:
                self._validator = self._make(schema)
            except self._jsonschema.SchemaError as exc:
                raise ConfigError(f"JSONSchemaVerifier: invalid schema: {exc.message}") from exc

    def _make(self, schema: Any) -> Any:
        cls = self._jsonschema.validators.validator_for(schema)
        cls.check_schema(schema)
        checker = cls.FORMAT_CHECKER if self.check_formats else None
        return cls(schema, format_checker=checker)

    def _validator_for(self, task: Task) -> Any:
        if self._validator is not None:
            return self._validator
        schema = task.metadata.get("schema")
        if schema is None:
            raise VerifierError(f"task {task.id}: no schema given and no metadata['schema']")
        try:
            return self._make(schema)
        except self._jsonschema.SchemaError as exc:
            raise VerifierError(f"task {task.id}: invalid schema: {exc.message}") from exc

    async def verify(self, task: Task, trajectory: Trajectory) -> Rewards:
        """Parse the reply as JSON and validate it."""
        validator = self._validator_for(task)
        parsed = parse_json_reply(response_text(trajectory))
        if not parsed.ok:
            return _no_json(parsed)
        try:
            errors = sorted(
                validator.iter_errors(parsed.value), key=lambda e: (len(e.path), list(e.path))
            )
        except RecursionError as exc:
            raise VerifierError("schema validation recursed too deeply") from exc
        details = [
            {
                "path": _json_path(list(e.absolute_path)),
                "schema_path": _json_path(list(e.absolute_schema_path)),
                "message": e.message[:500],
            }
            for e in errors[: self.max_errors]
        ]
        score = float(not errors)
        metadata: dict[str, Any] = {"extracted_answer": _answer(parsed), "source": parsed.source}
        if errors:
            metadata["errors"] = details
            metadata["reason"] = f"{len(errors)} schema error(s); first at {details[0]['path']}"
        return Rewards(
            reward=score, components={"accuracy": score, "format": 1.0}, metadata=metadata
        )


@dataclass(frozen=True, slots=True)
class _Call:
    name: str
    arguments: dict[str, Any] | None  # None: the model wrote arguments that are not an object
    raw: str


def _actual_calls(trajectory: Trajectory) -> list[_Call]:
    """The tool calls the model made: from its model calls, else its assistant messages."""
    calls: list[ToolCall] = [
        tc
        for mc in trajectory.model_calls
        if mc.response is not None
        for tc in mc.response.message.tool_calls
    ]
    if not any(mc.response is not None for mc in trajectory.model_calls):
        calls = [tc for m in trajectory.messages if m.role == "assistant" for tc in m.tool_calls]
    out = []
    for tc in calls:
        try:
            args: dict[str, Any] | None = tc.parsed_arguments()
            check_document(args)
        except (ValueError, RecursionError):  # LimitExceeded is a ValueError
            args = None
        out.append(_Call(tc.name, args, tc.arguments))
    return out


def _expected_calls(task: Task, value: Any) -> list[_Call]:
    if isinstance(value, Mapping):
        value = [value]
    if not isinstance(value, Sequence) or isinstance(value, str):
        raise VerifierError(
            f"task {task.id}: expected tool calls must be a list of "
            f'{{"name", "arguments"}}, got {type(value).__name__}'
        )
    out = []
    for i, item in enumerate(value):
        if not isinstance(item, Mapping) or not isinstance(item.get("name"), str):
            raise VerifierError(f"task {task.id}: expected call {i} needs a string 'name'")
        args = item.get("arguments", {})
        if isinstance(args, str):
            ok, args, error = _loads(args)
            if not ok:
                raise VerifierError(f"task {task.id}: expected call {i} arguments: {error}")
        if not isinstance(args, dict):
            raise VerifierError(f"task {task.id}: expected call {i} arguments must be an object")
        out.append(_Call(item["name"], args, json.dumps(args)))
    return out


def _call_score(expected: _Call, actual: _Call) -> float:
    """1.0 for the same name and arguments; the share of matching arguments otherwise."""
    wanted, given = expected.arguments, actual.arguments
    # an expected call's arguments are always an object (`_expected_calls`); the model's
    # are None when it wrote something else, and then nothing matches
    if expected.name != actual.name or wanted is None or given is None:
        return 0.0
    keys = wanted.keys() | given.keys()
    if not keys:
        return 1.0
    same = sum(1 for k in keys if k in wanted and k in given and json_equal(given[k], wanted[k]))
    return same / len(keys)


class ToolCallMatch:
    """Compares the model's tool calls with the expected ``[{"name", "arguments"}]``.

    Calls are read from ``trajectory.model_calls[*].response.message.tool_calls`` (the
    assistant messages' ``tool_calls`` when no model call was recorded). A call matches
    an expected one when the name is the same and the arguments are equal as JSON
    (argument order ignored). By default calls may come in any order (`ordered=False`)
    and the reward is 1.0 only for exactly the expected calls.

    With `partial_credit`, a call with the right name scores the share of matching
    arguments (over the union of argument names), each expected call is paired with its
    best-scoring actual call (greedily, highest score first), and the reward is the sum
    of the pair scores over max(#expected, #actual), so missing and extra calls both
    cost. Components: ``accuracy`` (exact match, 0/1) and ``partial`` (that fraction).
    """

    def __init__(
        self,
        *,
        partial_credit: bool = False,
        ordered: bool = False,
        gold: GoldFn | None = None,
    ) -> None:
        self.partial_credit = partial_credit
        self.ordered = ordered
        self.gold = gold

    def _pairs(self, expected: list[_Call], actual: list[_Call]) -> list[tuple[int, int, float]]:
        if self.ordered:
            return [
                (i, i, _call_score(e, a))
                for i, (e, a) in enumerate(zip(expected, actual, strict=False))
            ]
        scored = sorted(
            (
                (_call_score(e, a), i, j)
                for i, e in enumerate(expected)
                for j, a in enumerate(actual)
            ),
            key=lambda t: (-t[0], t[1], t[2]),
        )
        used_e: set[int] = set()
        used_a: set[int] = set()
        pairs = []
        for score, i, j in scored:
            if score > 0 and i not in used_e and j not in used_a:
                used_e.add(i)
                used_a.add(j)
                pairs.append((i, j, score))
        return pairs

    async def verify(self, task: Task, trajectory: Trajectory) -> Rewards:
        """Pair actual calls with expected ones and score them."""
        expected = _expected_calls(task, get_gold(task, self.gold))
        actual = _actual_calls(trajectory)
        pairs = self._pairs(expected, actual)
        full = sum(1 for _, _, s in pairs if s == 1.0)
        exact = float(full == len(expected) == len(actual))
        denominator = max(len(expected), len(actual))
        partial = sum(s for _, _, s in pairs) / denominator if denominator else 1.0
        made = [
            {"name": c.name, "arguments": c.arguments if c.arguments is not None else c.raw}
            for c in actual
        ]
        metadata: dict[str, Any] = {
            # no call where calls were expected is no answer; none expected, none made is one
            "extracted_answer": made if made or not expected else None,
            "matched": full,
            "expected": len(expected),
        }
        malformed = [c.name for c in actual if c.arguments is None]
        if malformed:
            metadata["malformed_arguments"] = malformed
        return Rewards(
            reward=partial if self.partial_credit else exact,
            components={"accuracy": exact, "partial": partial},
            metadata=metadata,
        )
