"""Instances built from a description: a value valid for a JSON Schema, a string matching a
regular expression. They are what the structured environments' oracles reply with."""

from __future__ import annotations

import re
from typing import Any

try:  # Python 3.11+: the regular-expression parser behind `re`
    import re._parser as _parser  # type: ignore[import-not-found]
except ImportError:  # pragma: no cover
    import sre_parse as _parser

__all__ = ["regex_example", "schema_example"]

_FORMATS = {
    "date": "2024-05-17",
    "date-time": "2024-05-17T09:30:00Z",
    "time": "09:30:00",
    "email": "ada@example.com",
    "uri": "https://example.com/a",
    "url": "https://example.com/a",
    "uuid": "123e4567-e89b-12d3-a456-426614174000",
    "ipv4": "192.0.2.1",
    "hostname": "example.com",
}
_CATEGORY = {
    "CATEGORY_DIGIT": "7",
    "CATEGORY_SPACE": " ",
    "CATEGORY_WORD": "w",
    "CATEGORY_NOT_DIGIT": "x",
    "CATEGORY_NOT_SPACE": "x",
    "CATEGORY_NOT_WORD": "-",
}


def _nodes(parsed: Any) -> str:
    return "".join(_node(op, arg) for op, arg in parsed)


def _node(op: Any, arg: Any) -> str:
    name = str(op)
    if name == "LITERAL":
        return chr(arg)
    if name in ("AT", "ASSERT_NOT", "ASSERT"):
        return ""
    if name == "ANY":
        return "x"
    if name == "IN":
        return _class(arg)
    if name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
        low, _high, body = arg
        return _nodes(body) * max(low, 1 if low == 0 and _high and _high > 0 else low)
    if name == "SUBPATTERN":
        return _nodes(arg[-1])
    if name == "BRANCH":
        return _nodes(arg[1][0])
    if name == "CATEGORY":
        return _CATEGORY.get(str(arg), "x")
    if name == "NOT_LITERAL":
        return "x" if chr(arg) != "x" else "y"
    raise ValueError(f"no example for the regex element {name}")


def _class(items: Any) -> str:
    negate = any(str(op) == "NEGATE" for op, _ in items)
    for op, arg in items:
        name = str(op)
        if negate:
            continue
        if name == "LITERAL":
            return chr(arg)
        if name == "RANGE":
            return chr(arg[0])
        if name == "CATEGORY":
            return _CATEGORY.get(str(arg), "x")
    banned = {chr(a) for op, a in items if str(op) == "LITERAL"}
    return next(c for c in "xyzab0" if c not in banned)


def regex_example(pattern: str) -> str:
    """A short string that `re.search(pattern, ...)` matches (checked before returning)."""
    example = _nodes(_parser.parse(pattern))
    if re.search(pattern, example) is None:
        raise ValueError(f"could not build an example for {pattern!r} (got {example!r})")
    return example


def _resolve(schema: Any, root: Any) -> Any:
    while isinstance(schema, dict) and "$ref" in schema:
        target: Any = root
        for part in schema["$ref"].lstrip("#/").split("/"):
            target = target[part]
        schema = {**target, **{k: v for k, v in schema.items() if k != "$ref"}}
    return schema


def schema_example(schema: Any, root: Any = None, depth: int = 0) -> Any:
    """A value valid for `schema` (objects carry every listed property)."""
    root = schema if root is None else root
    schema = _resolve(schema, root)
    if not isinstance(schema, dict) or depth > 32:
        return None
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return schema["enum"][0]
    for key in ("anyOf", "oneOf"):
        if schema.get(key):
            return schema_example(schema[key][0], root, depth + 1)
    if schema.get("allOf"):
        merged: dict[str, Any] = {}
        for part in schema["allOf"]:
            part = _resolve(part, root)
            merged = {
                **merged,
                **part,
                "properties": {**merged.get("properties", {}), **part.get("properties", {})},
            }
        return schema_example({**schema, **merged, "allOf": []}, root, depth + 1)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind is None:
        kind = "object" if "properties" in schema else "array" if "items" in schema else "string"
    if kind == "object":
        props = schema.get("properties", {})
        return {k: schema_example(v, root, depth + 1) for k, v in props.items()}
    if kind == "array":
        count = max(int(schema.get("minItems", 1)), 1)
        items = schema.get("items", {})
        if isinstance(items, list):  # tuple validation (older drafts)
            return [schema_example(i, root, depth + 1) for i in items]
        values = [schema_example(items, root, depth + 1) for _ in range(count)]
        if schema.get("uniqueItems") and len(values) > 1:
            values = [_variant(v, i) for i, v in enumerate(values)]
        return values
    if kind in ("integer", "number"):
        return _number(schema, kind)
    if kind == "boolean":
        return True
    if kind == "null":
        return None
    return _string(schema)


def _variant(value: Any, index: int) -> Any:
    if isinstance(value, str):
        return f"{value}{index}"
    if isinstance(value, int | float) and not isinstance(value, bool):
        return value + index
    return value


def _number(schema: dict[str, Any], kind: str) -> int | float:
    low = schema.get("minimum", schema.get("exclusiveMinimum"))
    high = schema.get("maximum", schema.get("exclusiveMaximum"))
    value: float = 1 if low is None else low + (1 if "exclusiveMinimum" in schema else 0)
    if high is not None and value > high:
        value = high - (1 if "exclusiveMaximum" in schema else 0)
    step = schema.get("multipleOf")
    if step:
        value = step * -(-value // step)
    return int(value) if kind == "integer" else float(value)


def _string(schema: dict[str, Any]) -> str:
    if schema.get("pattern"):
        value = regex_example(schema["pattern"])
    else:
        value = _FORMATS.get(str(schema.get("format")), "example")
    low, high = int(schema.get("minLength", 0)), schema.get("maxLength")
    if len(value) < low:
        value += "x" * (low - len(value))
    if high is not None and len(value) > high:
        value = value[: int(high)]
    return value
