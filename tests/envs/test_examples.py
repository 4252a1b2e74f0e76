"""Oracle building blocks: strings matching a regex, values valid for a JSON Schema."""

from __future__ import annotations

import re

import jsonschema
import pytest

from nemo_gym.envs.structured.examples import regex_example, schema_example

PATTERNS = [
    r"^\d+\.\s*\".+\":\s*.+",
    r"^.{2,30}\s*=\s*.+",
    r"^-- .+",
    r"^→ .+",
    r"^- .+",
    r"^[A-Z][\w+#]* \(\d{4}\)$",
    r"(foo|bar)+baz",
    r"[^aeiou]{3}",
    r"\bcitation_[a-z0-9]{4}\b",
]


@pytest.mark.parametrize("pattern", PATTERNS)
def test_regex_examples_match(pattern: str) -> None:
    assert re.search(pattern, regex_example(pattern))


SCHEMAS = [
    {
        "type": "object",
        "properties": {
            "a": {"type": "integer", "minimum": 3, "maximum": 9},
            "b": {"type": "string", "format": "email"},
        },
        "required": ["a", "b"],
    },
    {
        "type": "array",
        "minItems": 3,
        "uniqueItems": True,
        "items": {"type": "string", "minLength": 4},
    },
    {"anyOf": [{"type": "null"}, {"type": "number", "exclusiveMinimum": 0}]},
    {
        "type": "object",
        "properties": {
            "id": {"type": "string", "pattern": "^ORD-\\d{4}$"},
            "n": {"type": "integer", "multipleOf": 5, "minimum": 7},
        },
    },
    {
        "$defs": {"p": {"type": "object", "properties": {"x": {"enum": ["u", "v"]}}}},
        "type": "object",
        "properties": {"p": {"$ref": "#/$defs/p"}, "c": {"const": 4}},
    },
    {
        "allOf": [
            {"type": "object", "properties": {"a": {"type": "boolean"}}},
            {"properties": {"b": {"type": ["null", "integer"]}}},
        ]
    },
]


@pytest.mark.parametrize("schema", SCHEMAS)
def test_schema_examples_validate(schema: dict) -> None:
    jsonschema.validate(schema_example(schema), schema, format_checker=jsonschema.FormatChecker())
