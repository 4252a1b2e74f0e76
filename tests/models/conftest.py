"""The HTTP adapters' tests run over a real loopback server, once per transport and mode.

`client_for(fake)` starts a `LoopbackHTTPServer` answering with `fake` (a test's scripted
handler) and returns the adapter keyword arguments that reach it: `base_url`,
`transport` ("fast" or "sdk") and `stream`. In the streaming modes a JSON reply the
fake gives is re-sent as the server-sent events of the same reply (through the server
side of `nemo_gym.wire`), so every test checks streaming too.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from nemo_gym.testing.httpserver import HTTPRequest, LoopbackHTTPServer, Reply, StreamReply
from nemo_gym.wire import WireError, anthropic, openai_chat, openai_completions, sse

MODES = [("fast", False), ("sdk", False), ("fast", True), ("sdk", True)]


def as_stream(path: str, reply: Reply) -> Reply | StreamReply:
    """The SSE form of a JSON success reply for `path`; the reply itself if it has none."""
    if reply.status != 200 or not isinstance(reply.body, dict):
        return reply
    body = reply.body
    model = body.get("model") or "m"
    try:
        if path.endswith("/chat/completions"):
            events = openai_chat.stream_events(openai_chat.parse_response(body), model=model)
        elif path.endswith("/completions"):
            parsed = openai_completions.parse_response(body)
            events = openai_completions.stream_events(parsed, model=model)
        elif path.endswith("/responses"):
            # Re-sent whole in the terminal event, so nothing is lost in translation.
            whole = {**body, "status": body.get("status", "completed")}
            kind = {"incomplete": "response.incomplete", "failed": "response.failed"}.get(
                whole["status"], "response.completed"
            )
            events = [
                sse(
                    {"type": "response.created", "response": {**whole, "output": []}},
                    "response.created",
                ),
                sse({"type": kind, "response": whole}, kind),
            ]
        elif path.endswith("/messages"):
            events = anthropic.stream_events(anthropic.parse_response(body), model=model)
        else:
            return reply
    except (WireError, ValueError):
        return reply
    return StreamReply(events, headers=dict(reply.headers), delay_s=reply.delay_s)


Make = Callable[..., Awaitable[dict[str, Any]]]


@pytest.fixture(params=MODES, ids=[f"{t}{'-stream' if s else ''}" for t, s in MODES])
async def client_for(request: pytest.FixtureRequest) -> AsyncIterator[Make]:
    transport, stream = request.param
    servers: list[LoopbackHTTPServer] = []

    async def make(fake: Any, *, prefix: str = "/v1", host: str = "127.0.0.1") -> dict[str, Any]:
        async def handle(http_request: HTTPRequest) -> Any:
            reply = await fake(http_request)
            body = http_request.json() if http_request.body else None
            if (
                stream
                and isinstance(reply, Reply)
                and isinstance(body, dict)
                and body.get("stream")
            ):
                return as_stream(http_request.path, reply)
            return reply

        server = await LoopbackHTTPServer(handle, host=host).start()
        servers.append(server)
        return {"base_url": server.url + prefix, "transport": transport, "stream": stream}

    make.transport = transport  # type: ignore[attr-defined]
    make.stream = stream  # type: ignore[attr-defined]
    yield make
    for server in servers:
        await server.aclose()
