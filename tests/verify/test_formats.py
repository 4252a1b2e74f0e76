"""Structured documents: parsing the five formats, finding a document in a reply, key paths,
strict schemas, and scoring through `DocumentVerifier`."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import nemo_gym as gym
from nemo_gym.records import Message, ToolCall
from nemo_gym.verify.formats import (
    DocumentVerifier,
    document_from_paths,
    dump_document,
    extract_document,
    parse_document,
    path_exists,
    strict_schema,
)

_keys = st.from_regex(r"[a-z][a-z_]{0,8}", fullmatch=True)
_scalars = st.one_of(
    st.integers(-(10**6), 10**6),
    st.text(alphabet="abcdefghij klm", min_size=1, max_size=12).map(str.strip).filter(bool),
    st.booleans(),
)
_tables = st.dictionaries(
    _keys,
    st.one_of(_scalars, st.dictionaries(_keys, _scalars, min_size=1, max_size=3)),
    min_size=1,
    max_size=4,
)


@settings(max_examples=60, deadline=None)
@given(_tables, st.sampled_from(["json", "yaml", "toml"]))
def test_documents_round_trip(value: dict, fmt: str) -> None:
    assert parse_document(dump_document(value, fmt), fmt) == value


@settings(max_examples=40, deadline=None)
@given(_tables, st.text(alphabet="Here is the answer .", max_size=30))
def test_a_fenced_document_is_found_in_prose(value: dict, prose: str) -> None:
    reply = f"{prose}\n```json\n{json.dumps(value)}\n```\nHope it helps."
    found = extract_document(reply, "json")
    assert found.ok and found.value == value


def test_xml_becomes_the_dicts_xmltodict_would_build() -> None:
    text = '<book id="7"><title>Dune</title><tag>a</tag><tag>b</tag><note>x<b>y</b></note></book>'
    assert parse_document(text, "xml") == {
        "book": {"@id": "7", "title": "Dune", "tag": ["a", "b"], "note": {"b": "y", "#text": "x"}}
    }
    with pytest.raises(ValueError):
        parse_document("<a><b></a>", "xml")


def test_csv_needs_a_row_after_the_header() -> None:
    assert parse_document("a,b\n1,2\n", "csv") == [{"a": "1", "b": "2"}]
    with pytest.raises(ValueError, match="no CSV rows"):
        parse_document("one line of prose", "csv")


def test_key_paths() -> None:
    doc = {"r": {"items": [{"n": 1}, {"n": 2}], "@id": "x", "tags": ["a"]}}
    assert path_exists(doc, "r.items[1].n") and path_exists(doc, "r.items.*.n")
    assert path_exists(doc, "r.id") and path_exists(doc, "r.@id") and path_exists(doc, "r.tags")
    assert not path_exists(doc, "r.items[2]") and not path_exists(doc, "r.items.*.m")
    assert path_exists([{"city": "x"}], "csv::city") and not path_exists(
        [{"city": "x"}], "csv::town"
    )
    assert path_exists({"a.b": {"c": 1}}, "`a.b`.c")


@pytest.mark.parametrize("fmt", ["json", "yaml", "toml", "xml"])
def test_documents_built_from_paths_have_them(fmt: str) -> None:
    paths = ["a.b", "a.list.*.x", "a.list[2].y", "a.@attr"]
    document = parse_document(dump_document(document_from_paths(paths, fmt), fmt), fmt)
    assert all(path_exists(document, p) for p in paths)


def test_strict_schemas_require_every_property_at_every_depth() -> None:
    schema = {
        "type": "object",
        "properties": {"a": {"type": "object", "properties": {"b": {"type": "integer"}}}},
    }
    strict = strict_schema(schema)
    assert strict["required"] == ["a"] and strict["additionalProperties"] is False
    assert strict["properties"]["a"]["required"] == ["b"]
    assert "required" not in schema  # a copy


async def test_the_verifier_scores_schema_paths_and_format() -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    verifier = DocumentVerifier()
    ok = await gym.testing.verify(
        verifier,
        prompt="q",
        metadata={"format": "yaml", "schema": schema},
        response="```yaml\nn: 3\n```",
    )
    bad = await gym.testing.verify(
        verifier, prompt="q", metadata={"format": "yaml", "schema": schema}, response="n: three"
    )
    assert (ok.reward, bad.reward) == (1.0, 0.0) and bad.metadata["errors"]
    xml = await gym.testing.verify(
        verifier,
        prompt="q",
        metadata={
            "format": "xml",
            "schema": {
                "type": "object",
                "properties": {"r": {"type": "object", "properties": {"n": {"type": "integer"}}}},
            },
        },
        response="<r><n>4</n></r>",
    )
    assert xml.reward == 1.0  # XML text coerced to the schema's integer
    paths = await gym.testing.verify(
        verifier, prompt="q", metadata={"format": "json", "paths": ["a", "b"]}, response='{"a": 1}'
    )
    assert paths.reward == pytest.approx(0.6) and paths.components["paths"] == 0.5
    none = await gym.testing.verify(
        verifier, prompt="q", metadata={"format": "toml"}, response="= broken"
    )
    assert none.reward == 0.0 and none.metadata["extracted_answer"] is None


async def test_a_document_can_be_a_tool_calls_arguments() -> None:
    verifier = DocumentVerifier()
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    md = {
        "response_mode": "tool_call",
        "tool_name": "save",
        "payload_key": "data",
        "schema": schema,
    }

    def call(name: str, arguments: dict) -> Message:
        return Message.assistant(
            tool_calls=(ToolCall(id="c", name=name, arguments=json.dumps(arguments)),)
        )

    good = await gym.testing.verify(
        verifier, prompt="q", metadata=md, response=[call("save", {"data": {"n": 1}})]
    )
    other = await gym.testing.verify(
        verifier, prompt="q", metadata=md, response=[call("load", {"data": {"n": 1}})]
    )
    missing = await gym.testing.verify(
        verifier, prompt="q", metadata=md, response=[call("save", {"n": 1})]
    )
    assert (good.reward, other.reward, missing.reward) == (1.0, 0.0, 0.0)


# Nine levels of nine aliases: 386 bytes that expand to 9**9 strings.
_YAML_BOMB = 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n' + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{','.join(['*' + chr(97 + i)] * 9)}]\n" for i in range(8)
)


def test_a_yaml_alias_bomb_is_no_document() -> None:
    # Before, this parsed, and writing the row's extracted answer cost 288 MB and 4.7 GB.
    assert len(_YAML_BOMB) < 400
    with pytest.raises(ValueError, match="max_nodes"):
        parse_document(_YAML_BOMB, "yaml")
    parsed = extract_document(f"```yaml\n{_YAML_BOMB}```", "yaml")
    assert not parsed.ok and "max_nodes" in (parsed.error or "")


@pytest.mark.parametrize(
    ("fmt", "text"),
    [
        ("json", "[" * 150 + "]" * 150),
        ("json", "[" * 100_000 + "]" * 100_000),
        ("yaml", "[" * 150 + "]" * 150),
        ("xml", "<a>" * 150 + "</a>" * 150),
        ("xml", "<a>" * 5_000 + "</a>" * 5_000),
        ("toml", "x = " + "[" * 150 + "]" * 150),
    ],
)
def test_documents_nested_too_deep_are_refused(fmt: str, text: str) -> None:
    with pytest.raises(ValueError, match=r"max_depth|nested"):
        parse_document(text, fmt)


async def test_document_verifier_scores_a_bomb_zero_and_keeps_the_row_small() -> None:
    task = gym.Task(prompt="YAML please", metadata={"format": "yaml"})
    result = await gym.testing.verify(
        DocumentVerifier(), task=task, response=f"```yaml\n{_YAML_BOMB}```"
    )
    assert result.reward == 0.0 and result.metadata["extracted_answer"] is None
    assert len(json.dumps(result.metadata)) < 2_000
    big = "x: [" + ", ".join(["'" + "y" * 100 + "'"] * 20_000) + "]"
    result = await gym.testing.verify(DocumentVerifier(), task=task, response=big)
    assert result.reward == 0.0 and "max_chars" in result.metadata["reason"]


async def test_tool_call_arguments_nested_too_deep_are_no_document() -> None:
    deep = "[" * 100_000 + "]" * 100_000
    task = gym.Task(prompt="p", metadata={"response_mode": "tool_call"})
    call = ToolCall(id="c", name="emit", arguments=f'{{"doc": {deep}}}')
    trajectory = gym.Trajectory(
        messages=(Message(role="assistant", content=None, tool_calls=(call,)),)
    )
    result = await DocumentVerifier().verify(task, trajectory)
    assert result.reward == 0.0 and "max_depth" in result.metadata["reason"]


async def test_document_limits_can_be_tightened_or_loosened() -> None:
    from nemo_gym.limits import DocumentLimits

    task = gym.Task(prompt="JSON please", metadata={"format": "json"})
    deep = '{"a": [[[1]]]}'
    assert (await gym.testing.verify(DocumentVerifier(), task=task, response=deep)).reward == 1.0
    tight = DocumentVerifier(limits=DocumentLimits(max_depth=3))
    result = await gym.testing.verify(tight, task=task, response=deep)
    assert result.reward == 0.0 and "max_depth" in result.metadata["reason"]
    from nemo_gym.verify.structured import parse_json_reply

    assert not parse_json_reply('{"a": [[[[1]]]]}', DocumentLimits(max_depth=3)).ok
