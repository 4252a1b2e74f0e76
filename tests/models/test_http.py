"""The HTTP transports against a real loopback server: failures, Retry-After, sessions.

Every test that takes `client_for` runs with the fast (nemo_gym.models.h1) and the SDK transport,
streaming off and on (see conftest.py). Failures are what real servers and networks
do: resets, bodies cut short, garbage, 429/503 with Retry-After, servers that hang.
"""

from __future__ import annotations

import asyncio
import email.utils
import subprocess
import sys
import time
from typing import Any

import pytest

pytest.importorskip("httptools")
pytest.importorskip("openai")
pytest.importorskip("anthropic")


from nemo_gym.errors import ModelError
from nemo_gym.models import Anthropic, OpenAIChat, OpenAICompletions, OpenAIResponses
from nemo_gym.models.base import RetryPolicy
from nemo_gym.models.http import Timeouts, default_max_connections
from nemo_gym.records import Message, ModelRequest, ModelResponse, Sampling
from nemo_gym.testing.httpserver import (
    HTTPRequest,
    LoopbackHTTPServer,
    RawReply,
    Reply,
    Reset,
    StreamReply,
    Truncated,
)
from nemo_gym.wire import anthropic as anthropic_wire
from nemo_gym.wire import (
    dumps,
    openai_chat,
    openai_completions,
    openai_responses,
)

ONCE = RetryPolicy(max_attempts=1)
FAST = RetryPolicy(max_attempts=3, initial_backoff_s=0.001, max_backoff_s=0.002)


def ask(**fields: Any) -> ModelRequest:
    return ModelRequest(messages=(Message.user("2+2?"),), **fields)


OK = ModelResponse(
    message=Message.assistant("4"), usage={"prompt_tokens": 3, "completion_tokens": 1}
)


class Script:
    """Answers from a list (the last one repeats); records requests and their bodies."""

    def __init__(self, *replies: Any) -> None:
        self.replies = list(replies)
        self.requests: list[HTTPRequest] = []

    async def __call__(self, request: HTTPRequest) -> Any:
        self.requests.append(request)
        reply = self.replies.pop(0) if len(self.replies) > 1 else self.replies[0]
        return reply() if callable(reply) else reply

    @property
    def bodies(self) -> list[dict[str, Any]]:
        return [r.json() for r in self.requests]


def chat_ok() -> Reply:
    return Reply(200, openai_chat.build_response(OK, model="m"))


# --------------------------------------------------------------------------- failures


@pytest.mark.parametrize(
    "bad",
    [
        Truncated(dumps(openai_chat.build_response(OK, model="m")), cut=30),
        Reply(200, b'{"choices": [{"message": {"content": "4"'),  # not JSON
        Reply(200, [1, 2, 3]),  # JSON, not a completion
        Reply(200, {"choices": [{"message": {"content": 4}}]}),  # a field of the wrong type
    ],
    ids=["truncated", "not-json", "not-an-object", "wrong-field-type"],
)
async def test_unreadable_replies_are_retryable_bad_responses(client_for: Any, bad: Any) -> None:
    server = Script(bad, chat_ok())
    model = OpenAIChat("m", **(await client_for(server)), retry=FAST)
    response = await model.generate(ask())
    assert (response.message.content, response.attempts) == ("4", 2)

    server = Script(bad)
    model = OpenAIChat("m", **(await client_for(server)), retry=ONCE)
    with pytest.raises(ModelError) as info:
        await model.generate(ask())
    assert (info.value.code, info.value.retryable) == ("bad_response", True)


async def test_a_stream_cut_short_is_a_retryable_bad_response(client_for: Any) -> None:
    events = openai_chat.stream_events(OK, model="m")[:-1]  # no [DONE]
    server = Script(StreamReply(events, complete=False))
    model = OpenAIChat("m", **(await client_for(server)), retry=ONCE)
    model.stream = True
    with pytest.raises(ModelError) as info:
        await model.generate(ask())
    assert (info.value.code, info.value.retryable) == ("bad_response", True)


@pytest.mark.parametrize(
    "garbage",
    [RawReply(b"NOT HTTP AT ALL\r\n\r\n"), Reset(sent=b"HTTP/1.1 200 OK\r\nContent-Le")],
    ids=["garbage", "reset-mid-headers"],
)
async def test_malformed_http_is_retryable(client_for: Any, garbage: Any) -> None:
    server = Script(garbage)
    model = OpenAIChat("m", **(await client_for(server)), retry=ONCE)
    with pytest.raises(ModelError) as info:
        await model.generate(ask())
    assert info.value.retryable is True
    assert info.value.code in ("bad_response", "connection_error")


@pytest.mark.parametrize("status", [429, 503])
async def test_retry_after_seconds_is_read_and_honoured(client_for: Any, status: int) -> None:
    error = Reply(status, openai_chat.error_body("busy"), headers={"Retry-After": "2"})
    server = Script(error)
    model = OpenAIChat("m", **(await client_for(server)), retry=ONCE)
    with pytest.raises(ModelError) as info:
        await model.generate(ask())
    assert (info.value.status_code, info.value.retry_after_s) == (status, 2.0)
    assert info.value.code == ("rate_limited" if status == 429 else "server_error")

    # The retry sleeps what the server asked, bounded by the policy.
    server = Script(error, chat_ok())
    bounded = RetryPolicy(max_attempts=2, max_retry_after_s=0.3)
    model = OpenAIChat("m", **(await client_for(server)), retry=bounded)
    started = time.monotonic()
    assert (await model.generate(ask())).attempts == 2
    assert 0.28 <= time.monotonic() - started < 1.5


async def test_retry_after_as_an_http_date_and_in_milliseconds(client_for: Any) -> None:
    when = email.utils.formatdate(time.time() + 30, usegmt=True)
    server = Script(Reply(429, {}, headers={"Retry-After": when}))
    model = OpenAIChat("m", **(await client_for(server)), retry=ONCE)
    with pytest.raises(ModelError) as info:
        await model.generate(ask())
    assert 25 <= (info.value.retry_after_s or 0) <= 31

    server = Script(Reply(429, {}, headers={"retry-after-ms": "250", "Retry-After": "9"}))
    model = OpenAIChat("m", **(await client_for(server)), retry=ONCE)
    with pytest.raises(ModelError) as info:
        await model.generate(ask())
    assert info.value.retry_after_s == 0.25


async def test_a_4xx_is_not_retried_and_keeps_the_servers_message(client_for: Any) -> None:
    server = Script(Reply(422, openai_chat.error_body("bad schema"), headers={"Retry-After": "1"}))
    model = OpenAIChat("m", **(await client_for(server)), retry=FAST)
    with pytest.raises(ModelError, match="bad schema") as info:
        await model.generate(ask())
    assert (info.value.code, info.value.retryable, info.value.retry_after_s) == (
        "http_422",
        False,
        None,
    )
    assert len(server.requests) == 1


async def test_connect_and_read_timeouts(client_for: Any) -> None:
    server = Script(Reply(200, openai_chat.build_response(OK, model="m"), delay_s=5))
    timeouts = Timeouts(total=30, connect=5, read=0.2)
    model = OpenAIChat("m", **(await client_for(server)), retry=ONCE, timeout=timeouts)
    started = time.monotonic()
    with pytest.raises(ModelError) as info:
        await model.generate(ask())
    assert (info.value.code, info.value.retryable) == ("timeout", True)
    assert time.monotonic() - started < 3


async def test_a_slow_stream_within_the_read_timeout_is_not_cut(client_for: Any) -> None:
    if not client_for.stream:
        pytest.skip("a streaming behaviour")
    events = openai_chat.stream_events(OK, model="m")
    server = Script(StreamReply(events, delay_s=0.05))
    timeouts = Timeouts(total=30, read=0.2)  # the whole reply takes ~0.3 s
    model = OpenAIChat("m", **(await client_for(server)), retry=ONCE, timeout=timeouts)
    assert (await model.generate(ask())).message.content == "4"


# --------------------------------------------------------------------------- sampling sent


def _reply_for(path: str, request: HTTPRequest) -> Any:
    body = request.json()
    stream = body.get("stream")
    if path.endswith("/chat/completions"):
        return (
            StreamReply(openai_chat.stream_events(OK, model="m"))
            if stream
            else Reply(200, openai_chat.build_response(OK, model="m"))
        )
    if path.endswith("/completions"):
        return (
            StreamReply(openai_completions.stream_events(OK, model="m"))
            if stream
            else Reply(200, openai_completions.build_response(OK, model="m"))
        )
    if path.endswith("/responses"):
        return (
            StreamReply(openai_responses.stream_events(OK, model="m"))
            if stream
            else Reply(200, openai_responses.build_response(OK, model="m"))
        )
    return (
        StreamReply(anthropic_wire.stream_events(OK, model="m"))
        if stream
        else Reply(200, anthropic_wire.build_response(OK, model="m"))
    )


@pytest.mark.parametrize("adapter", [OpenAIChat, OpenAICompletions, OpenAIResponses, Anthropic])
async def test_the_seed_on_the_wire_is_the_seed_reported(client_for: Any, adapter: Any) -> None:
    server = Script(lambda: None)
    server.replies = [lambda: _reply_for(server.requests[-1].path, server.requests[-1])]
    prefix = "" if adapter is Anthropic else "/v1"
    model = adapter(
        "m",
        **(await client_for(server, prefix=prefix)),
        default_sampling=Sampling(seed=11, temperature=0.7, extra={"top_k": 5}),
    )
    for request in (ask(sampling=Sampling(seed=42, max_tokens=9)), ask()):
        response = await model.generate(request)
        body = server.bodies[-1]
        assert response.sampling is not None
        assert body.get("seed") == response.sampling.seed
        assert body.get("temperature") == response.sampling.temperature == 0.7
        assert body["top_k"] == response.sampling.extra["top_k"] == 5
    if adapter in (OpenAIChat, OpenAICompletions):
        assert [b["seed"] for b in server.bodies] == [42, 11]
    else:  # the API takes no seed: none sent, none reported
        assert response.sampling.seed is None
    await model.aclose()


# --------------------------------------------------------------------------- sessions


async def test_keep_alive_reuses_one_connection_and_the_pool_is_bounded() -> None:
    server = Script(chat_ok())
    async with LoopbackHTTPServer(server) as http:
        model = OpenAIChat("m", base_url=http.url + "/v1", transport="fast")
        for _ in range(5):
            await model.generate(ask())
        assert http.connections == 1

        slow = Script(Reply(200, openai_chat.build_response(OK, model="m"), delay_s=0.05))
        http.handler = slow
        bounded = OpenAIChat("m", base_url=http.url + "/v1", transport="fast", max_connections=3)
        before = http.connections
        await asyncio.gather(*(bounded.generate(ask()) for _ in range(12)))
        assert http.connections - before == 3
        await model.aclose()
        await bounded.aclose()


async def test_a_server_closing_idle_connections_costs_at_most_a_retry() -> None:
    server = Script(chat_ok())
    async with LoopbackHTTPServer(server) as http:
        model = OpenAIChat("m", base_url=http.url + "/v1", transport="fast", retry=FAST)
        await model.generate(ask())
        http.drop_connections()
        await asyncio.sleep(0.05)
        assert (await model.generate(ask())).message.content == "4"
        await model.aclose()


async def test_aclose_is_idempotent_and_the_adapter_stays_usable() -> None:
    server = Script(chat_ok())
    async with LoopbackHTTPServer(server) as http:
        for transport in ("fast", "sdk"):
            model = OpenAIChat("m", base_url=http.url + "/v1", transport=transport)
            await model.aclose()  # nothing opened yet
            await model.generate(ask())
            await model.aclose()
            await model.aclose()
            assert (await model.generate(ask())).message.content == "4"
            await model.aclose()


def test_the_clis_openai_models_take_the_fast_path(monkeypatch: pytest.MonkeyPatch) -> None:
    from nemo_gym.cli.main import parse_model

    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    for kind in ("openai", "openai-responses", "openai-completions"):
        model = parse_model(f"{kind}:policy", base_url="http://127.0.0.1:8000/v1")
        assert model.transport == "fast"  # type: ignore[attr-defined]
    anthropic = parse_model("anthropic:claude", base_url="http://127.0.0.1:8001")
    assert anthropic.transport == "fast"  # type: ignore[attr-defined]


def test_the_default_pool_fits_the_open_file_limit() -> None:
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert 16 <= default_max_connections() <= 4096
    if soft != resource.RLIM_INFINITY:
        assert default_max_connections() <= max(16, soft // 2)


_TWO_LOOPS = """
import asyncio, gc
from nemo_gym.models import {adapter}
from nemo_gym.records import Message, ModelRequest, ModelResponse
from nemo_gym.testing.httpserver import LoopbackHTTPServer, Reply
from nemo_gym.wire import {wire} as wire

reply = Reply(200, wire.build_response(ModelResponse(message=Message.assistant("4")), model="m"))
# Built before any loop runs, as trainers do; then used from two loops in turn.
model = {adapter}("m", base_url="http://127.0.0.1:9{prefix}", transport="{transport}")

async def main():
    async with LoopbackHTTPServer(lambda request: reply) as server:
        request = ModelRequest(messages=(Message.user("hi"),), base_url=server.url + "{prefix}")
        assert (await model.generate(request)).message.content == "4"
        # no aclose(): the loop's shutdown must close what the adapter opened

asyncio.run(main())
asyncio.run(main())
del model
gc.collect()
print("ok")
"""


@pytest.mark.parametrize("transport", ["fast", "sdk"])
@pytest.mark.parametrize(
    ("adapter", "wire", "prefix"),
    [("OpenAIChat", "openai_chat", "/v1"), ("Anthropic", "anthropic", "")],
)
def test_two_event_loops_one_adapter_and_a_clean_exit(
    transport: str, adapter: str, wire: str, prefix: str
) -> None:
    code = _TWO_LOOPS.format(adapter=adapter, wire=wire, prefix=prefix, transport=transport)
    # ResourceWarnings shown (they are hidden by default); asyncio's "Unclosed client
    # session" and "Event loop is closed" reports reach stderr in any case.
    result = subprocess.run(
        [sys.executable, "-W", "always::ResourceWarning", "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"
    assert result.stderr == ""


def test_the_models_http_page_loopback_example_runs() -> None:
    import re
    from pathlib import Path

    page = (Path(__file__).parents[2] / "docs" / "models-http.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", page, re.S)
    (block,) = [b for b in blocks if "LoopbackHTTPServer" in b]
    exec(block, {})
