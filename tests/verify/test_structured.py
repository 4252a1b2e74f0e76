"""Tests for JSON, JSON Schema and tool-call verifiers."""

from __future__ import annotations

import json
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nemo_gym.errors import ConfigError, VerifierError
from nemo_gym.records import (
    Message,
    ModelCall,
    ModelRequest,
    ModelResponse,
    Task,
    ToolCall,
    Trajectory,
)
from nemo_gym.verify.structured import (
    JSONMatch,
    JSONSchemaVerifier,
    ToolCallMatch,
    json_equal,
    parse_json_reply,
)


def reply(text: str) -> Trajectory:
    return Trajectory(messages=[Message.user("q"), Message.assistant(text)])


def test_parse_json_reply_sources() -> None:
    assert parse_json_reply('{"a": 1}').source == "text"
    fenced = parse_json_reply('Here:\n```json\n{"a": 1}\n```\nDone.')
    assert fenced.ok and fenced.value == {"a": 1} and fenced.source == "fence"
    last = parse_json_reply('```json\n{"a": 1}\n```\nfixed:\n```json\n{"a": 2}\n```')
    assert last.value == {"a": 2}
    span = parse_json_reply('The result is {"b": [1, 2]} as requested.')
    assert span.value == {"b": [1, 2]} and span.source == "span"
    assert parse_json_reply("[1, 2] ok").value == [1, 2]
    bad = parse_json_reply("no json {here")
    assert not bad.ok and bad.error and bad.error.startswith("no JSON value found")
    assert parse_json_reply("").error == "empty reply"


def test_json_equal() -> None:
    assert json_equal({"a": 1, "b": [1, 2]}, {"b": [1, 2.0], "a": 1})
    assert not json_equal([1, 2], [2, 1])
    assert not json_equal(True, 1) and not json_equal(1, True)
    assert not json_equal({"a": 1, "x": 2}, {"a": 1})
    assert json_equal({"a": 1, "x": 2}, {"a": 1}, allow_extra_keys=True)
    assert not json_equal({"a": 1}, {"a": 1, "x": 2}, allow_extra_keys=True)
    assert not json_equal("1", 1) and not json_equal(None, 0)


async def test_json_match() -> None:
    task = Task(prompt="q", answer='{"name": "Ada", "tags": ["x"]}')
    ok = await JSONMatch().verify(task, reply('```json\n{"tags": ["x"], "name": "Ada"}\n```'))
    assert ok.reward == 1.0 and ok.components == {"accuracy": 1.0, "format": 1.0}
    wrong = await JSONMatch().verify(task, reply('{"name": "Bob", "tags": ["x"]}'))
    assert wrong.reward == 0.0 and wrong.components["format"] == 1.0
    none = await JSONMatch().verify(task, reply("sorry"))
    assert none.reward == 0.0 and none.components["format"] == 0.0 and none.metadata["reason"]
    as_object = Task(prompt="q", answer={"k": [1, {"z": None}]})
    assert (await JSONMatch().verify(as_object, reply('{"k": [1, {"z": null}]}'))).reward == 1.0
    with pytest.raises(VerifierError):
        await JSONMatch().verify(Task(prompt="q", answer="{not json"), reply("{}"))


SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "items": {"type": "array", "items": {"type": "integer"}},
    },
    "required": ["name"],
    "additionalProperties": False,
}


async def test_json_schema_verifier() -> None:
    verifier = JSONSchemaVerifier(SCHEMA)
    task = Task(prompt="q")
    good = await verifier.verify(task, reply('{"name": "a", "items": [1, 2]}'))
    assert good.reward == 1.0 and "errors" not in good.metadata
    bad = await verifier.verify(task, reply('{"name": "a", "items": [1, "two"], "x": 0}'))
    assert bad.reward == 0.0
    paths = {e["path"] for e in bad.metadata["errors"]}
    assert paths == {"/", "/items/1"}
    assert any("two" in e["message"] for e in bad.metadata["errors"])
    missing = await verifier.verify(task, reply("[]"))
    assert missing.metadata["errors"][0]["schema_path"] == "/type"


async def test_json_schema_from_task_and_invalid_schemas() -> None:
    verifier = JSONSchemaVerifier()
    task = Task(prompt="q", metadata={"schema": {"type": "integer", "minimum": 3}})
    assert (await verifier.verify(task, reply("5"))).reward == 1.0
    assert (await verifier.verify(task, reply("2"))).reward == 0.0
    with pytest.raises(VerifierError):
        await verifier.verify(Task(prompt="q"), reply("5"))
    with pytest.raises(VerifierError):
        await verifier.verify(Task(prompt="q", metadata={"schema": {"type": 7}}), reply("5"))
    with pytest.raises(ConfigError):
        JSONSchemaVerifier({"type": "no-such-type"})


async def test_json_schema_formats() -> None:
    schema = {"type": "string", "format": "email"}
    task = Task(prompt="q")
    assert (await JSONSchemaVerifier(schema).verify(task, reply('"nope"'))).reward == 1.0
    strict = JSONSchemaVerifier(schema, check_formats=True)
    assert (await strict.verify(task, reply('"nope"'))).reward == 0.0
    assert (await strict.verify(task, reply('"a@b.org"'))).reward == 1.0


def calls_trajectory(*calls: tuple[str, str], via_model_calls: bool = True) -> Trajectory:
    tool_calls = tuple(ToolCall(id=f"c{i}", name=n, arguments=a) for i, (n, a) in enumerate(calls))
    message = Message.assistant(None, tool_calls=tool_calls)
    if not via_model_calls:
        return Trajectory(messages=[Message.user("q"), message])
    request = ModelRequest(messages=(Message.user("q"),))
    return Trajectory(
        messages=[Message.user("q"), message],
        model_calls=[ModelCall(request=request, response=ModelResponse(message=message))],
    )


EXPECTED = [
    {"name": "get_weather", "arguments": {"city": "Paris", "unit": "C"}},
    {"name": "get_time", "arguments": {"tz": "CET"}},
]


async def test_tool_call_match_exact_any_order() -> None:
    task = Task(prompt="q", answer=EXPECTED)
    trajectory = calls_trajectory(
        ("get_time", '{"tz": "CET"}'), ("get_weather", '{"unit": "C", "city": "Paris"}')
    )
    result = await ToolCallMatch().verify(task, trajectory)
    assert result.reward == 1.0 and result.components == {"accuracy": 1.0, "partial": 1.0}
    ordered = await ToolCallMatch(ordered=True).verify(task, trajectory)
    assert ordered.reward == 0.0
    from_messages = calls_trajectory(
        ("get_weather", '{"city": "Paris", "unit": "C"}'),
        ("get_time", '{"tz": "CET"}'),
        via_model_calls=False,
    )
    assert (await ToolCallMatch(ordered=True).verify(task, from_messages)).reward == 1.0


async def test_tool_call_partial_credit() -> None:
    task = Task(prompt="q", answer=EXPECTED)
    trajectory = calls_trajectory(
        ("get_weather", '{"city": "Paris", "unit": "F"}'), ("get_time", '{"tz": "CET"}')
    )
    exact = await ToolCallMatch().verify(task, trajectory)
    assert exact.reward == 0.0 and exact.components["partial"] == pytest.approx(0.75)
    partial = await ToolCallMatch(partial_credit=True).verify(task, trajectory)
    assert partial.reward == pytest.approx(0.75)
    extra = calls_trajectory(
        ("get_weather", '{"city": "Paris", "unit": "C"}'),
        ("get_time", '{"tz": "CET"}'),
        ("get_time", '{"tz": "UTC"}'),
    )
    assert (await ToolCallMatch(partial_credit=True).verify(task, extra)).reward == pytest.approx(
        2 / 3
    )
    malformed = calls_trajectory(("get_weather", "{oops"), ("get_time", '{"tz": "CET"}'))
    result = await ToolCallMatch(partial_credit=True).verify(task, malformed)
    assert result.reward == pytest.approx(0.5)
    assert result.metadata["malformed_arguments"] == ["get_weather"]
    none = await ToolCallMatch(partial_credit=True).verify(task, reply("no calls"))
    assert none.reward == 0.0


async def test_tool_call_expected_shapes() -> None:
    one = Task(prompt="q", answer={"name": "f", "arguments": '{"x": 1}'})
    assert (await ToolCallMatch().verify(one, calls_trajectory(("f", '{"x": 1.0}')))).reward == 1.0
    empty = Task(prompt="q", answer=[])
    assert (await ToolCallMatch().verify(empty, reply("nothing to do"))).reward == 1.0
    for bad in ("f", [{"arguments": {}}], [{"name": "f", "arguments": "[1]"}]):
        with pytest.raises(VerifierError):
            await ToolCallMatch().verify(Task(prompt="q", answer=bad), reply("x"))


BIG = [
    "{" * 1_000_000,
    "[" * 500_000 + "]" * 500_000,
    '{"a":' * 200_000,
    "```json\n" * 125_000,
    "x" * 1_000_000,
    "[1," * 300_000,
]


@pytest.mark.parametrize("text", BIG, ids=lambda t: repr(t[:8]))
def test_megabyte_inputs_are_fast(text: str) -> None:
    start = time.perf_counter()
    parsed = parse_json_reply(text)
    assert not parsed.ok and parsed.error
    assert time.perf_counter() - start < 3.0


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=10),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=150, deadline=None)
@given(st.text(max_size=300))
def test_parse_json_reply_never_crashes(text: str) -> None:
    parsed = parse_json_reply(text)
    assert parsed.ok or parsed.error


@settings(max_examples=150, deadline=None)
@given(
    _JSON, st.text(max_size=40).filter(lambda t: "```" not in t and "{" not in t and "[" not in t)
)
def test_fenced_json_roundtrips(value: object, prose: str) -> None:
    text = f"{prose}\n```json\n{json.dumps(value)}\n```\n"
    parsed = parse_json_reply(text)
    assert parsed.ok and json_equal(parsed.value, value)


@pytest.mark.parametrize("depth", [150, 100_000])
def test_parse_json_reply_refuses_documents_nested_too_deep(depth: int) -> None:
    # 150 levels passed before and then recursed in json_equal / jsonschema / row writers.
    parsed = parse_json_reply("[" * depth + "]" * depth)
    assert not parsed.ok and "max_depth" in (parsed.error or "")
    assert parse_json_reply("[" * 50 + "]" * 50).ok
