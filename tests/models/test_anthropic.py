"""The Anthropic adapter over a real loopback server, for each transport and mode."""

from __future__ import annotations

import asyncio
import itertools
import json
from typing import Any

import pytest

anthropic = pytest.importorskip("anthropic")
httpx2 = pytest.importorskip("httpx2")
pytest.importorskip("httptools")

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from nemo_gym.errors import ConfigError, ModelError  # noqa: E402
from nemo_gym.models import RetryPolicy  # noqa: E402
from nemo_gym.models.anthropic import DEFAULT_MAX_TOKENS, Anthropic  # noqa: E402
from nemo_gym.records import Message, ModelRequest, Sampling, ToolCall, ToolSpec  # noqa: E402
from nemo_gym.testing.httpserver import HTTPRequest, Reply  # noqa: E402
from nemo_gym.wire.anthropic import messages_out, tool_input  # noqa: E402

BASE_URL = "http://127.0.0.1:9"
FAST = RetryPolicy(max_attempts=3, initial_backoff_s=0.001, max_backoff_s=0.002)


class FakeServer:
    """A scripted handler: records requests, answers from a queue, counts in-flight.

    Recorded bodies leave out `stream`, which only the streaming mode adds.
    """

    def __init__(self, *replies: tuple[int, dict[str, Any]], delay_s: float = 0.0) -> None:
        self.replies = list(replies)
        self.delay_s = delay_s
        self.requests: list[HTTPRequest] = []
        self.bodies: list[dict[str, Any]] = []
        self.in_flight = 0
        self.max_in_flight = 0

    async def __call__(self, request: HTTPRequest) -> Reply:
        self.requests.append(request)
        self.bodies.append({k: v for k, v in request.json().items() if k != "stream"})
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if self.delay_s:
                await asyncio.sleep(self.delay_s)
            status, body = self.replies.pop(0) if len(self.replies) > 1 else self.replies[0]
            return Reply(status, body)
        finally:
            self.in_flight -= 1

    @property
    def body(self) -> dict[str, Any]:
        return self.bodies[-1]


def message_body(
    content: list[dict[str, Any]], *, stop_reason: str = "end_turn", **usage: int
) -> tuple[int, dict[str, Any]]:
    """A Messages API reply as api.anthropic.com returns it."""
    return 200, {
        "id": "msg_01",
        "type": "message",
        "role": "assistant",
        "model": "claude-test",
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {"input_tokens": 25, "output_tokens": 7, **usage},
    }


def error_body(status: int, kind: str, message: str) -> tuple[int, dict[str, Any]]:
    return status, {"type": "error", "error": {"type": kind, "message": message}}


def ask(text: str = "Hi", **fields: Any) -> ModelRequest:
    return ModelRequest(messages=(Message.user(text),), **fields)


WEATHER = ToolSpec(
    name="get_weather",
    description="Weather for a city.",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}},
)


async def test_plain_reply(client_for: Any) -> None:
    server = FakeServer(message_body([{"type": "text", "text": "Hello!"}]))
    model = Anthropic("claude-test", **(await client_for(server, prefix="")))
    response = await model.generate(ask())

    assert server.requests[0].path == "/v1/messages"
    assert server.body == {
        "model": "claude-test",
        "max_tokens": DEFAULT_MAX_TOKENS,
        "messages": [{"role": "user", "content": "Hi"}],
    }
    assert response.message.content == "Hello!"
    assert response.message.tool_calls == () and response.message.reasoning is None
    assert response.finish_reason == "stop"
    assert (response.usage.prompt_tokens, response.usage.completion_tokens) == (25, 7)
    assert response.model == "claude-test"
    assert response.latency_s > 0


async def test_thinking_and_tool_use_parsed(client_for: Any) -> None:
    server = FakeServer(
        message_body(
            [
                {"type": "thinking", "thinking": "The user wants weather.", "signature": "sig=="},
                {"type": "redacted_thinking", "data": "opaque"},
                {"type": "text", "text": "Let me check."},
                {
                    "type": "tool_use",
                    "id": "toolu_01",
                    "name": "get_weather",
                    "input": {"city": "Zürich", "days": 2},
                },
            ],
            stop_reason="tool_use",
            cache_read_input_tokens=100,
            cache_creation_input_tokens=5,
        )
    )
    model = Anthropic("claude-test", **(await client_for(server, prefix="")))
    response = await model.generate(ask(tools=(WEATHER,)))

    assert server.body["tools"] == [
        {
            "name": "get_weather",
            "description": "Weather for a city.",
            "input_schema": WEATHER.parameters,
        }
    ]
    assert response.message.reasoning == "The user wants weather."
    assert response.message.content == "Let me check."
    (call,) = response.message.tool_calls
    assert (call.id, call.name) == ("toolu_01", "get_weather")
    assert call.parsed_arguments() == {"city": "Zürich", "days": 2}
    assert response.finish_reason == "tool_calls"
    assert response.usage.prompt_tokens == 25 + 100 + 5


async def test_multi_turn_wire_format(client_for: Any) -> None:
    server = FakeServer(message_body([{"type": "text", "text": "Done."}]))
    model = Anthropic("claude-test", **(await client_for(server, prefix="")))
    request = ModelRequest(
        messages=(
            Message.system("Be brief."),
            Message.system("Use tools."),
            Message.user("Weather in Paris and Oslo?"),
            Message.assistant(
                "Checking both.",
                reasoning="not sent back",
                tool_calls=(
                    ToolCall(id="toolu_a", name="get_weather", arguments='{"city": "Paris"}'),
                    ToolCall(id="toolu_b", name="get_weather", arguments='{"city": "Os'),
                ),
            ),
            Message.tool("sunny", tool_call_id="toolu_a"),
            Message.tool("error: bad arguments", tool_call_id="toolu_b"),
            Message.user("Thanks, and summarise."),
        ),
        tools=(WEATHER,),
    )
    await model.generate(request)

    assert server.body["system"] == "Be brief.\n\nUse tools."
    assert server.body["messages"] == [
        {"role": "user", "content": "Weather in Paris and Oslo?"},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Checking both."},
                {
                    "type": "tool_use",
                    "id": "toolu_a",
                    "name": "get_weather",
                    "input": {"city": "Paris"},
                },
                # Unparseable arguments travel as {"_raw": ...}.
                {
                    "type": "tool_use",
                    "id": "toolu_b",
                    "name": "get_weather",
                    "input": {"_raw": '{"city": "Os'},
                },
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_a", "content": "sunny"},
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_b",
                    "content": "error: bad arguments",
                },
                {"type": "text", "text": "Thanks, and summarise."},
            ],
        },
    ]


async def test_sampling_mapping(client_for: Any) -> None:
    server = FakeServer(message_body([{"type": "text", "text": "x"}]))
    model = Anthropic(
        "claude-test",
        **(await client_for(server, prefix="")),
        max_tokens=1000,
        thinking_budget=2048,
        default_sampling=Sampling(temperature=0.3, extra={"top_k": 40}),
        extra_body={"metadata": {"user_id": "u1"}},
    )
    await model.generate(ask(sampling=Sampling(top_p=0.9, max_tokens=300, seed=5, stop=("END",))))
    body = server.body
    assert body["max_tokens"] == 300
    assert body["stop_sequences"] == ["END"]
    assert (body["temperature"], body["top_p"], body["top_k"]) == (0.3, 0.9, 40)
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert body["metadata"] == {"user_id": "u1"}
    assert "seed" not in body


async def test_per_request_model_and_base_url(client_for: Any) -> None:
    server = FakeServer(message_body([{"type": "text", "text": "x"}]))
    replica = FakeServer(message_body([{"type": "text", "text": "x"}]))
    model = Anthropic("claude-test", **(await client_for(server, prefix="")))
    other = (await client_for(replica, prefix="", host="127.0.0.3"))["base_url"]
    await model.generate(ask(model="claude-other", base_url=other))
    await model.generate(ask())
    assert [r.path for r in replica.requests] == ["/v1/messages"]
    assert [r.path for r in server.requests] == ["/v1/messages"]
    assert [b["model"] for b in replica.bodies + server.bodies] == ["claude-other", "claude-test"]


@pytest.mark.parametrize(
    "first",
    [error_body(429, "rate_limit_error", "slow"), error_body(529, "overloaded_error", "busy")],
)
async def test_transient_errors_retried(client_for: Any, first: tuple[int, dict[str, Any]]) -> None:
    server = FakeServer(first, message_body([{"type": "text", "text": "ok"}]))
    model = Anthropic("claude-test", **(await client_for(server, prefix="")), retry=FAST)
    assert (await model.generate(ask())).message.content == "ok"
    assert len(server.requests) == 2


async def test_bad_request_not_retried(client_for: Any) -> None:
    server = FakeServer(error_body(400, "invalid_request_error", "max_tokens too large"))
    model = Anthropic("claude-test", **(await client_for(server, prefix="")), retry=FAST)
    with pytest.raises(ModelError, match="max_tokens too large") as info:
        await model.generate(ask())
    assert (info.value.retryable, info.value.status_code) == (False, 400)
    assert len(server.requests) == 1


async def test_server_errors_exhaust_retries(client_for: Any) -> None:
    server = FakeServer(error_body(500, "api_error", "internal"))
    model = Anthropic("claude-test", **(await client_for(server, prefix="")), retry=FAST)
    with pytest.raises(ModelError) as info:
        await model.generate(ask())
    assert (info.value.retryable, info.value.status_code) == (True, 500)
    assert len(server.requests) == FAST.max_attempts


async def test_max_concurrency_is_respected(client_for: Any) -> None:
    server = FakeServer(message_body([{"type": "text", "text": "ok"}]), delay_s=0.02)
    model = Anthropic("claude-test", **(await client_for(server, prefix="")), max_concurrency=2)
    await asyncio.gather(*(model.generate(ask()) for _ in range(7)))
    assert server.max_in_flight == 2


def test_constructor_errors() -> None:
    with pytest.raises(ConfigError, match="max_tokens"):
        Anthropic("claude-test", base_url=BASE_URL, max_tokens=0)
    with pytest.raises(ConfigError, match="thinking_budget"):
        Anthropic("claude-test", base_url=BASE_URL, thinking_budget=0)
    with pytest.raises(ConfigError, match="not both"):
        Anthropic(
            "claude-test",
            client=anthropic.AsyncAnthropic(api_key="x", base_url=BASE_URL),
            api_key="k",
        )
    with pytest.raises(ConfigError, match="SDK client, got object"):
        Anthropic("claude-test", client=object())


async def test_headers_and_transport_choice(
    client_for: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = FakeServer(message_body([{"type": "text", "text": "x"}]))
    async with Anthropic("claude-test", api_key="k", **(await client_for(server, prefix=""))) as m:
        await m.generate(ask())
    headers = server.requests[0].headers
    if client_for.transport == "fast":
        assert (headers["x-api-key"], headers["anthropic-version"]) == ("k", "2023-06-01")
    else:  # the SDK's own choice of header and API version
        assert "k" in (headers.get("x-api-key"), headers.get("authorization", "")[7:])
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    assert Anthropic("claude-test", api_key="k").transport == "sdk"  # api.anthropic.com
    assert Anthropic("claude-test", base_url=BASE_URL).transport == "fast"
    with pytest.raises(ConfigError, match="ANTHROPIC_API_KEY"):
        Anthropic("claude-test", transport="fast")


async def test_a_callers_sdk_client_is_used_and_never_closed() -> None:
    def handler(request: httpx2.Request) -> httpx2.Response:
        status, body = message_body([{"type": "text", "text": "hi"}])
        return httpx2.Response(status, json=body)

    client = anthropic.AsyncAnthropic(
        api_key="x",
        base_url=BASE_URL,
        max_retries=0,
        http_client=httpx2.AsyncClient(transport=httpx2.MockTransport(handler)),
    )
    async with Anthropic("claude-test", client=client) as model:
        assert (await model.generate(ask())).message.content == "hi"
        assert model.transport == "sdk"
    assert not client.is_closed()
    await client.close()


# --------------------------------------------------------------------------- properties

_text = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=12)
_call = st.builds(
    ToolCall, id=st.uuids().map(str), name=st.sampled_from(["f", "g"]), arguments=_text
)
_message = st.one_of(
    st.builds(Message.system, _text),
    st.builds(Message.user, _text),
    st.builds(
        lambda content, calls: Message.assistant(content, tool_calls=tuple(calls)),
        st.none() | _text,
        st.lists(_call, max_size=2),
    ),
    st.builds(lambda text, cid: Message.tool(text, tool_call_id=cid), _text, _text),
)


@settings(max_examples=60, deadline=None)
@given(st.lists(_message, max_size=8))
def test_conversion_alternates_roles_and_keeps_everything(messages: list[Message]) -> None:
    system, turns = messages_out(messages)
    roles = [turn["role"] for turn in turns]
    assert all(a != b for a, b in itertools.pairwise(roles))

    def blocks(turn: dict[str, Any]) -> list[dict[str, Any]]:
        content = turn["content"]
        return [{"type": "text", "text": content}] if isinstance(content, str) else content

    sent = [block for turn in turns for block in blocks(turn)]
    expected: list[tuple[str, str]] = []
    for message in messages:
        if message.role == "user":
            expected.append(("text", message.content or ""))
        elif message.role == "tool":
            expected.append(("tool_result", message.tool_call_id or ""))
        elif message.role == "assistant":
            if message.content:
                expected.append(("text", message.content))
            expected.extend(("tool_use", call.id) for call in message.tool_calls)
    keys = {"text": "text", "tool_result": "tool_use_id", "tool_use": "id"}
    assert [(b["type"], b[keys[b["type"]]]) for b in sent] == expected
    system_texts = [m.content for m in messages if m.role == "system"]
    assert system == ("\n\n".join(system_texts) if system_texts else None)  # type: ignore[arg-type]


@given(st.dictionaries(_text, st.integers() | _text, max_size=4))
def test_tool_input_round_trips_json_objects(arguments: dict[str, Any]) -> None:
    call = ToolCall(id="c", name="f", arguments=json.dumps(arguments))
    assert tool_input(call) == arguments


@given(_text)
def test_tool_input_wraps_anything_else(text: str) -> None:
    try:
        is_object = isinstance(json.loads(text), dict)
    except json.JSONDecodeError:
        is_object = False
    if not is_object:
        assert tool_input(ToolCall(id="c", name="f", arguments=text)) == {"_raw": text}
