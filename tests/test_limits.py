"""Bounded parsing of hostile documents: expanded size, depth, and JSON lines."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nemo_gym.errors import ConfigError
from nemo_gym.limits import (
    DocumentLimits,
    LimitExceeded,
    check_document,
    json_line,
    loads_json,
)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=3), inner, max_size=4)
    ),
    max_leaves=30,
)


def _depth(value: object) -> int:
    if isinstance(value, dict):
        return 1 + max((_depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((_depth(v) for v in value), default=0)
    return 0


@given(json_values)
def test_loads_json_agrees_with_json_within_limits(value: object) -> None:
    text = json.dumps(value)
    assert loads_json(text) == value
    limits = DocumentLimits(max_depth=max(1, _depth(value) - 1))
    if _depth(value) > 1:
        with pytest.raises(LimitExceeded, match="max_depth"):
            loads_json(text, limits)


def test_shared_references_count_every_time_they_are_reached() -> None:
    # What YAML aliases build: nine levels of nine references to the level below.
    value: object = 0
    for _ in range(9):
        value = [value] * 9
    with pytest.raises(LimitExceeded, match="max_nodes"):
        check_document(value)
    with pytest.raises(LimitExceeded, match="max_chars"):
        check_document(["x" * 1000] * 2000)


def test_a_cycle_stops_at_the_depth_limit() -> None:
    cycle: list[object] = []
    cycle.append(cycle)
    with pytest.raises(LimitExceeded, match="max_depth"):
        check_document(cycle)


def test_json_too_deep_for_the_json_module_is_a_limit_not_a_recursion_error() -> None:
    with pytest.raises(LimitExceeded, match="max_depth"):
        loads_json("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ConfigError, match=r"f\.jsonl:3: the document is nested"):
        json_line("[" * 100_000 + "]" * 100_000, "f.jsonl:3")


def test_json_line_errors_name_the_place() -> None:
    with pytest.raises(
        ConfigError, match=r"f\.jsonl:2: not valid JSON \(.* column 13, after field 'a'\)"
    ):
        json_line('{"a": 1, "b"', "f.jsonl:2")
    with pytest.raises(ConfigError, match=r"f\.jsonl:4: expected a JSON object"):
        json_line("[1]", "f.jsonl:4")
    assert json_line('{"a": [1]}', "x") == {"a": [1]}
