"""Both transports against uvicorn, the server vLLM, SGLang and TRT-LLM's OpenAI front ends run.

uvicorn is served in-process with each of its HTTP implementations (h11, httptools); an
ASGI app answers with bodies from `nemo_gym.wire`, whole or as server-sent events.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

uvicorn = pytest.importorskip("uvicorn")
pytest.importorskip("httptools")
pytest.importorskip("openai")
pytest.importorskip("anthropic")

from nemo_gym.models import Anthropic, OpenAIChat  # noqa: E402
from nemo_gym.records import Message, ModelRequest, ModelResponse, ToolCall  # noqa: E402
from nemo_gym.wire import anthropic, dumps, loads, openai_chat  # noqa: E402

REPLY = ModelResponse(
    message=Message.assistant(
        "The answer is 4.",
        reasoning="think",
        tool_calls=(ToolCall(id="c1", name="f", arguments='{"x": 1}'),),
    ),
    prompt_token_ids=[1, 2, 3],
    completion_token_ids=[7, 8],
    completion_logprobs=[-0.5, -0.25],
    usage={"prompt_tokens": 3, "completion_tokens": 2},
)


class App:
    """A two-route ASGI app: chat completions and Anthropic messages."""

    def __init__(self) -> None:
        self.connections: set[Any] = set()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        self.connections.add(scope.get("client"))
        chunks = []
        while True:
            message = await receive()
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        body = loads(b"".join(chunks))
        wire = anthropic if scope["path"] == "/v1/messages" else openai_chat
        if body.get("stream"):
            headers = [(b"content-type", b"text/event-stream")]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            for event in wire.stream_events(REPLY, model=body["model"]):
                await send({"type": "http.response.body", "body": event, "more_body": True})
            await send({"type": "http.response.body", "body": b""})
            return
        payload = dumps(wire.build_response(REPLY, model=body["model"]))
        headers = [(b"content-type", b"application/json")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": payload})


@pytest.fixture(params=["h11", "httptools"])
async def server(request: pytest.FixtureRequest) -> AsyncIterator[tuple[str, App]]:
    app = App()
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=0,
        http=request.param,
        log_level="warning",
        lifespan="off",
        timeout_keep_alive=1,  # shorter than our 4 s: idle connections die under us
    )
    served = uvicorn.Server(config)
    task = asyncio.ensure_future(served.serve())
    # uvicorn offers a flag, not an event, for "listening".
    for _ in range(1000):
        if served.started or task.done():
            break
        await asyncio.sleep(0.01)
    assert served.started, task.exception() if task.done() else "uvicorn did not start"
    port = served.servers[0].sockets[0].getsockname()[1]
    yield f"http://127.0.0.1:{port}", app
    served.should_exit = True
    await task


def ask() -> ModelRequest:
    return ModelRequest(messages=(Message.user("2+2?"),))


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("transport", ["fast", "sdk"])
async def test_replies_tokens_and_tool_calls(
    server: tuple[str, App], transport: str, stream: bool
) -> None:
    url, _ = server
    chat = OpenAIChat(
        "m", base_url=url + "/v1", transport=transport, stream=stream, return_token_ids=True
    )
    response = await chat.generate(ask())
    assert response.message == REPLY.message
    assert (response.prompt_token_ids, response.completion_token_ids) == ([1, 2, 3], [7, 8])
    assert response.completion_logprobs == [-0.5, -0.25]
    many = await asyncio.gather(*(chat.generate(ask()) for _ in range(50)))
    assert all(r.completion_token_ids == [7, 8] for r in many)
    claude = Anthropic("c", base_url=url, transport=transport, stream=stream)
    reply = await claude.generate(ask())
    assert (reply.message.content, reply.message.tool_calls) == (
        "The answer is 4.",
        REPLY.message.tool_calls,
    )
    await chat.aclose()
    await claude.aclose()


async def test_keep_alive_and_a_connection_the_server_closed_while_idle(
    server: tuple[str, App],
) -> None:
    url, app = server
    chat = OpenAIChat("m", base_url=url + "/v1", transport="fast")
    for _ in range(5):
        await chat.generate(ask())
    assert len(app.connections) == 1  # one keep-alive connection served all five
    await asyncio.sleep(1.5)  # uvicorn drops it (timeout_keep_alive=1)
    response = await chat.generate(ask())
    assert (response.message.content, response.attempts) == ("The answer is 4.", 1)
    await chat.aclose()
