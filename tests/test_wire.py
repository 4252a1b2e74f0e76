"""The wire formats: each direction undoes the other, streams equal whole replies, parsers hold.

Property tests over arbitrary conversations and replies: what a client builds, a server
reads back as the same request; what a server sends (whole or as SSE), a client reads
back as the same `ModelResponse`. Shape errors are `WireError`s naming the field.
"""

from __future__ import annotations

import email.utils
import json
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from nemo_gym.records import Message, ModelRequest, ModelResponse, Sampling, ToolCall, ToolSpec
from nemo_gym.wire import (
    SSEDecoder,
    WireError,
    anthropic,
    iter_sse,
    loads,
    openai_chat,
    openai_completions,
    openai_responses,
    retry_after_s,
    sse,
)

_text = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=20)
_args = st.one_of(
    st.dictionaries(st.text(max_size=5), st.integers() | st.text(max_size=5), max_size=3).map(
        json.dumps
    ),
    _text,  # malformed arguments are the model's output and go through verbatim
)
_calls = st.lists(
    st.builds(ToolCall, id=_text, name=st.sampled_from(["f", "get_weather"]), arguments=_args),
    max_size=2,
    unique_by=lambda c: c.id,
)
_sampling = st.builds(
    Sampling,
    temperature=st.none() | st.floats(0, 2),
    top_p=st.none() | st.floats(0, 1),
    max_tokens=st.none() | st.integers(1, 10_000),
    seed=st.none() | st.integers(0, 2**31),
    stop=st.none() | st.lists(_text, min_size=1, max_size=2).map(tuple),
)
_tools = st.lists(
    st.builds(
        ToolSpec, name=st.sampled_from(["f", "g", "lookup"]), description=st.text(max_size=9)
    ),
    max_size=2,
    unique_by=lambda t: t.name,
)


def _chat_message() -> st.SearchStrategy[Message]:
    return st.one_of(
        st.builds(Message.system, _text),
        st.builds(Message.user, _text),
        st.builds(
            lambda content, calls, reasoning: Message.assistant(
                content, tool_calls=tuple(calls), reasoning=reasoning
            ),
            st.none() | _text,
            _calls,
            st.none() | _text,
        ),
        st.builds(lambda text, cid: Message.tool(text, tool_call_id=cid), _text, _text),
    )


def _replies(*, reasoning: bool = True, tokens: bool = True) -> st.SearchStrategy[ModelResponse]:
    def make(content, calls, thinking, ids, lps_seed, usage, finish) -> ModelResponse:  # type: ignore[no-untyped-def]
        ids = ids if tokens else None
        lps = [-(abs(hash((lps_seed, i))) % 1000) / 100 for i in range(len(ids))] if ids else None
        return ModelResponse(
            message=Message.assistant(
                content, tool_calls=tuple(calls), reasoning=thinking if reasoning else None
            ),
            finish_reason=finish,
            usage={"prompt_tokens": usage[0], "completion_tokens": usage[1]},
            model="policy",
            prompt_token_ids=[1, 2, 3] if ids else None,
            completion_token_ids=ids,
            completion_logprobs=lps,
        )

    return st.builds(
        make,
        _text,
        _calls,
        st.none() | _text,
        st.none() | st.lists(st.integers(0, 150_000), min_size=1, max_size=6),
        st.integers(),
        st.tuples(st.integers(0, 9999), st.integers(0, 9999)),
        st.sampled_from(["stop", "length", "tool_calls"]),
    )


# --------------------------------------------------------------------------- chat


@settings(max_examples=80, deadline=None)
@given(st.lists(_chat_message(), min_size=1, max_size=6), _sampling, _tools)
def test_chat_request_round_trips(messages: list[Message], sampling: Sampling, tools: list) -> None:
    request = ModelRequest(messages=tuple(messages), sampling=sampling, tools=tuple(tools))
    body, sent = openai_chat.build_request(request, model="policy", reasoning_field="reasoning")
    served = openai_chat.parse_request(loads(json.dumps(body)))
    assert served.request.sampling == sampling == sent.model_copy(update={"extra": {}})
    assert served.request.tools == request.tools
    assert served.request.model == "policy"
    for got, want in zip(served.request.messages, messages, strict=True):
        if want.role == "assistant" and want.content is None and not want.tool_calls:
            want = want.model_copy(update={"content": ""})  # the API wants a string there
        assert got == want.model_copy(update={"name": None} if want.role == "tool" else {})


@settings(max_examples=80, deadline=None)
@given(_replies())
def test_chat_reply_round_trips_whole_and_streamed(reply: ModelResponse) -> None:
    body = openai_chat.build_response(reply, model="policy")
    assert openai_chat.parse_response(loads(json.dumps(body))) == reply
    stream = openai_chat.ChatStream()
    for event, data in iter_sse(b"".join(openai_chat.stream_events(reply, model="policy"))):
        stream.feed_event(event, data)
    assert stream.done
    assert stream.response() == reply


def test_chat_stream_fragments_join_and_missing_done_is_an_error() -> None:
    def fragment(delta: dict[str, Any], **choice: Any) -> dict[str, Any]:
        return {"choices": [{"index": 0, "delta": delta, **choice}]}

    chunks = [
        fragment({"role": "assistant", "content": ""}),
        fragment(
            {
                "tool_calls": [
                    {"index": 0, "id": "c1", "function": {"name": "get_", "arguments": '{"ci'}}
                ]
            }
        ),
        fragment(
            {"tool_calls": [{"index": 0, "function": {"name": "weather", "arguments": 'ty": 1}'}}]},
            token_ids=[5, 6],
        ),
        fragment({}, finish_reason="tool_calls", token_ids=[7]),
    ]
    stream = openai_chat.ChatStream()
    for chunk in chunks:
        stream.feed(chunk)
    with pytest.raises(WireError, match=r"without \[DONE\]"):
        stream.response()
    stream.feed_data("[DONE]")
    response = stream.response()
    assert response.message.tool_calls == (
        ToolCall(id="c1", name="get_weather", arguments='{"city": 1}'),
    )
    assert response.message.content is None
    assert response.completion_token_ids == [5, 6, 7]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ([], "chat completion"),
        ({"choices": "x"}, "choices"),
        ({"choices": []}, "no choices"),
        ({"choices": [{"message": None}]}, r"choices\[0\]\.message"),
        ({"choices": [{"message": {"content": 3}}]}, "content"),
        ({"choices": [{"message": {"tool_calls": [{"function": {"name": 1}}]}}]}, "name"),
        ({"choices": [{"message": {}}], "usage": {"prompt_tokens": "9"}}, "usage"),
    ],
)
def test_chat_bad_shapes_name_the_field(body: Any, field: str) -> None:
    with pytest.raises(WireError, match=field):
        openai_chat.parse_response(body)


def test_chat_vllm_token_fields_and_logprob_holes() -> None:
    body = openai_chat.build_response(
        ModelResponse(
            message=Message.assistant("ab"),
            prompt_token_ids=[1],
            completion_token_ids=[2, 3],
            completion_logprobs=[-0.5, -0.25],
        ),
        model="m",
    )
    parsed = openai_chat.parse_response(body)
    assert (parsed.prompt_token_ids, parsed.completion_token_ids) == ([1], [2, 3])
    assert parsed.completion_logprobs == [-0.5, -0.25]
    body["choices"][0]["logprobs"]["content"][1]["logprob"] = None
    body["choices"][0]["token_ids"] = ["x"]
    parsed = openai_chat.parse_response(body)
    assert parsed.completion_logprobs is None and parsed.completion_token_ids is None


# --------------------------------------------------------------------------- completions


@settings(max_examples=50, deadline=None)
@given(
    _replies(reasoning=False).map(
        lambda r: r.model_copy(update={"message": Message.assistant(r.message.content)})
    )
)
def test_completions_reply_round_trips_whole_and_streamed(reply: ModelResponse) -> None:
    if reply.finish_reason == "tool_calls":
        reply = reply.model_copy(update={"finish_reason": "stop"})
    body = openai_completions.build_response(reply, model="policy")
    assert openai_completions.parse_response(loads(json.dumps(body))) == reply
    stream = openai_completions.CompletionStream()
    events = openai_completions.stream_events(reply, model="policy")
    for event, data in iter_sse(b"".join(events)):
        stream.feed_event(event, data)
    assert stream.response() == reply


@settings(max_examples=50, deadline=None)
@given(_text, _sampling)
def test_completions_request_round_trips(prompt: str, sampling: Sampling) -> None:
    request = ModelRequest(messages=(Message.user("ignored"),), sampling=sampling)
    body, sent = openai_completions.build_request(request, prompt=prompt, model="base")
    served = openai_completions.parse_request(body)
    assert served.options["prompt"] == prompt
    assert served.request.messages == (Message.user(prompt),)
    assert served.request.sampling == sampling == sent


# --------------------------------------------------------------------------- responses


@settings(max_examples=60, deadline=None)
@given(st.lists(_chat_message(), min_size=1, max_size=6), _sampling, _tools)
def test_responses_request_round_trips(
    messages: list[Message], sampling: Sampling, tools: list
) -> None:
    sampling = sampling.model_copy(update={"stop": None})
    request = ModelRequest(messages=tuple(messages), sampling=sampling, tools=tuple(tools))
    body, sent = openai_responses.build_request(request, model="policy")
    assert sent.seed is None and "seed" not in body  # the API has no seed
    assume(body["input"])  # a lone empty assistant turn sends nothing at all
    served = openai_responses.parse_request(body)
    assert served.request.sampling == sampling.model_copy(update={"seed": None})
    assert [t.name for t in served.request.tools] == [t.name for t in tools]

    # Reasoning is not sent back; an assistant turn's text and calls merge into one message.
    def expected(ms: list[Message]) -> list[Message]:
        out: list[Message] = []
        for m in ms:
            if m.role == "assistant":
                if m.content:
                    out.append(Message.assistant(m.content))
                for call in m.tool_calls:
                    if out and out[-1].role == "assistant":
                        last = out[-1]
                        out[-1] = last.model_copy(update={"tool_calls": (*last.tool_calls, call)})
                    else:
                        out.append(Message.assistant(None, tool_calls=(call,)))
            elif m.role == "tool":
                out.append(Message.tool(m.content or "", tool_call_id=m.tool_call_id or ""))
            else:
                out.append(Message(role=m.role, content=m.content))
        return out

    assert list(served.request.messages) == expected(messages)


@settings(max_examples=60, deadline=None)
@given(_replies(tokens=False))
def test_responses_reply_round_trips_whole_and_streamed(reply: ModelResponse) -> None:
    reply = reply.model_copy(
        update={"finish_reason": "length" if reply.finish_reason == "length" else None}
    )
    expected = reply.model_copy(
        update={
            "finish_reason": reply.finish_reason
            or ("tool_calls" if reply.message.tool_calls else "stop")
        }
    )
    body = openai_responses.build_response(reply, model="policy")
    assert openai_responses.parse_response(loads(json.dumps(body))) == expected
    stream = openai_responses.ResponsesStream()
    for event, data in iter_sse(b"".join(openai_responses.stream_events(reply, model="policy"))):
        stream.feed_event(event, data)
    assert stream.response() == expected


def test_responses_failed_status_is_a_model_error_not_a_shape_error() -> None:
    from nemo_gym.errors import ModelError

    with pytest.raises(ModelError) as info:
        openai_responses.parse_response(
            {"status": "failed", "error": {"code": "server_error", "message": "boom"}}
        )
    assert (info.value.code, info.value.retryable) == ("server_error", True)


# --------------------------------------------------------------------------- anthropic


@settings(max_examples=60, deadline=None)
@given(_replies(tokens=False))
def test_anthropic_reply_round_trips_whole_and_streamed(reply: ModelResponse) -> None:
    body = anthropic.build_response(reply, model="claude")
    parsed = anthropic.parse_response(loads(json.dumps(body)))

    # JSON objects come back re-serialized; anything else unchanged (the "_raw" wrapper).
    def norm(r: ModelResponse) -> list[tuple[str, Any]]:
        out = []
        for c in r.message.tool_calls:
            try:
                value = json.loads(c.arguments)
            except ValueError:
                value = None
            out.append((c.id, value if isinstance(value, dict) else c.arguments))
        return out

    assert norm(parsed) == norm(reply)
    assert parsed.message.content == reply.message.content
    assert parsed.message.reasoning == reply.message.reasoning
    assert (parsed.finish_reason, parsed.usage) == (reply.finish_reason, reply.usage)
    stream = anthropic.MessagesStream()
    for event, data in iter_sse(b"".join(anthropic.stream_events(reply, model="claude"))):
        stream.feed_event(event, data)
    assert stream.response() == parsed


@settings(max_examples=60, deadline=None)
@given(st.lists(_chat_message(), min_size=1, max_size=6), _sampling)
def test_anthropic_request_round_trips(messages: list[Message], sampling: Sampling) -> None:
    request = ModelRequest(messages=tuple(messages), sampling=sampling)
    body, sent = anthropic.build_request(request, model="claude", max_tokens=77)
    assert sent.seed is None and "seed" not in body
    assert sent.max_tokens == (sampling.max_tokens or 77)
    assume(body["messages"] or "system" in body)  # a lone empty assistant turn sends nothing
    served = anthropic.parse_request(body)
    assert served.request.sampling == sent.model_copy(update={"extra": {}})
    got_calls = [c for m in served.request.messages for c in m.tool_calls]
    want_calls = [c for m in messages if m.role == "assistant" for c in m.tool_calls]
    assert [(c.id, c.name) for c in got_calls] == [(c.id, c.name) for c in want_calls]
    for got, want in zip(got_calls, want_calls, strict=True):
        try:
            value = json.loads(want.arguments)
        except ValueError:
            value = None
        if isinstance(value, dict):  # an object travels as `input` and is re-serialized
            assert json.loads(got.arguments) == value
        else:  # anything else travels wrapped as {"_raw": text} and comes back verbatim
            assert got.arguments == want.arguments
    results = [m.tool_call_id for m in served.request.messages if m.role == "tool"]
    assert results == [m.tool_call_id for m in messages if m.role == "tool"]


# --------------------------------------------------------------------------- common


def test_retry_after_seconds_dates_and_nonsense() -> None:
    assert retry_after_s("7") == 7.0
    assert retry_after_s(" 1.5 ") == 1.5
    assert retry_after_s("-3") == 0.0
    now = 1_800_000_000.0
    date = email.utils.formatdate(now + 30, usegmt=True)
    assert retry_after_s(date, now=now) == pytest.approx(30.0)
    assert retry_after_s(email.utils.formatdate(now - 30, usegmt=True), now=now) == 0.0
    for bad in (None, "", "soon", "inf", "nan", "Mon, 99 Foo 2026"):
        assert retry_after_s(bad) is None


@given(st.text(max_size=40))
def test_retry_after_never_raises(value: str) -> None:
    result = retry_after_s(value)
    assert result is None or result >= 0.0


_event_data = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\r\n"), max_size=30
)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(st.none() | st.sampled_from(["message_start", "delta"]), _event_data), max_size=6
    ),
    st.lists(st.integers(1, 50), max_size=10),
    st.sampled_from([b"\n", b"\r\n"]),
)
def test_sse_decoder_is_indifferent_to_chunking(
    events: list[tuple[str | None, str]], cuts: list[int], newline: bytes
) -> None:
    payload = b"".join(sse(data, event) for event, data in events).replace(b"\n", newline)
    payload = b": a comment\n\n" + payload
    decoder = SSEDecoder()
    got: list[tuple[str | None, str]] = []
    position = 0
    for cut in cuts:
        got += decoder.feed(payload[position : position + cut])
        position += cut
    got += decoder.feed(payload[position:])
    got += decoder.close()
    assert got == [(e, d) for e, d in events]


def test_loads_names_truncation() -> None:
    with pytest.raises(WireError, match="not valid JSON"):
        loads(b'{"choices": [')


@pytest.mark.parametrize("codec", ["orjson", "stdlib"])
def test_loads_takes_every_body_type_it_declares(
    codec: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stdlib's json.loads takes no memoryview: without orjson one failed with a
    TypeError, not a WireError, where the orjson path decoded it."""
    from nemo_gym.wire import common

    if codec == "stdlib":
        monkeypatch.setattr(common, "_orjson", None)
    elif common._orjson is None:
        pytest.skip("orjson is not installed")
    for body in (b'{"a": [1]}', bytearray(b'{"a": [1]}'), memoryview(b'{"a": [1]}'), '{"a": [1]}'):
        assert loads(body) == {"a": [1]}
    with pytest.raises(WireError, match="not valid JSON"):
        loads(memoryview(b'{"a": ['))
