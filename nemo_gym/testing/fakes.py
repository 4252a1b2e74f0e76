"""A fake OpenAI-compatible server on an in-memory transport, driven by the real SDK.

The bodies it sends (and their streamed form) are built by `nemo_gym.wire.openai_chat`,
the module the adapters parse them with.

`FakeOpenAI` serves ``POST /v1/chat/completions`` from a list of canned replies or a
function of the request body, behind an `httpx2.MockTransport`, and `client` is a real
`openai.AsyncOpenAI` bound to it. Adapters are thus tested through the real SDK (request
building, response parsing, error mapping) with no network and no server process.

```python
fake = FakeOpenAI(["4"])
reply = await fake.client.chat.completions.create(model="m", messages=[...])
assert fake.requests[0]["model"] == "m"
```
"""

from __future__ import annotations

import inspect
import itertools
import json
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, Union

from nemo_gym.errors import require
from nemo_gym.records import Message, ModelResponse
from nemo_gym.wire import openai_chat

if TYPE_CHECKING:
    import httpx2
    import openai

__all__ = ["FakeOpenAI", "FakeReply", "FakeReplyFunction", "completion_body"]

# A str is the assistant's content; a Message may carry tool calls and reasoning; a
# ModelResponse adds finish reason, usage and token ids; a dict is sent as the JSON body
# verbatim; an httpx2.Response is returned as is (errors, rate limits); an exception is
# raised inside the transport (a connection failure as the SDK sees it).
FakeReply = Union[str, Message, ModelResponse, dict, "httpx2.Response", BaseException]
FakeReplyFunction = Callable[[dict[str, Any]], FakeReply | Awaitable[FakeReply]]

BASE_URL = "http://fake-openai.test/v1"


def completion_body(
    reply: str | Message | ModelResponse, *, model: str, index: int
) -> dict[str, Any]:
    """The chat-completion JSON body an OpenAI-compatible server would send for `reply`."""
    response = reply if isinstance(reply, ModelResponse) else None
    message = response.message if response else reply
    if isinstance(message, str):
        message = Message.assistant(message)
    if not isinstance(message, Message) or message.role != "assistant":
        raise TypeError(f"a fake reply must be an assistant message, got {message!r}")
    if response is None:
        response = ModelResponse(message=message)
    return openai_chat.build_response(
        response, model=model, id=f"chatcmpl-fake-{index}", created=int(time.time())
    )


class FakeOpenAI:
    """A fake chat-completions server with a real `openai.AsyncOpenAI` client in front.

    `replies` is a sequence (served in order; `cycle=True` restarts at the end) or a
    function of the parsed request body (sync or async). Each request's JSON body is
    appended to `requests`. Paths other than ``/chat/completions`` answer 404, and a
    request past the last reply answers 500 with a message saying so.
    """

    def __init__(
        self,
        replies: Sequence[FakeReply] | FakeReplyFunction,
        *,
        cycle: bool = False,
        model: str = "fake-model",
        max_retries: int = 0,
    ) -> None:
        httpx = require("httpx2", "openai")
        openai_module = require("openai", "openai")
        self._function = replies if callable(replies) else None
        self._replies: Sequence[FakeReply] = () if callable(replies) else tuple(replies)
        self._cycle = cycle
        self._next = 0
        self._counter = itertools.count()
        self.model = model
        self.base_url = BASE_URL
        self.requests: list[dict[str, Any]] = []
        self.http_requests: list[httpx2.Request] = []
        self._httpx2 = httpx
        self.transport = httpx.MockTransport(self._handle)
        self.http_client = httpx.AsyncClient(transport=self.transport)
        self.client: openai.AsyncOpenAI = openai_module.AsyncOpenAI(
            api_key="fake-key",
            base_url=BASE_URL,
            http_client=self.http_client,
            max_retries=max_retries,
        )

    def _error(self, status: int, message: str) -> httpx2.Response:
        body = openai_chat.error_body(message, type="fake_error")
        return self._httpx2.Response(status, json=body)

    async def _next_reply(self, body: dict[str, Any]) -> FakeReply | None:
        if self._function is not None:
            reply = self._function(body)
            if inspect.isawaitable(reply):
                reply = await reply
            return reply
        if self._next >= len(self._replies):
            if not self._cycle or not self._replies:
                return None
            self._next = 0
        reply = self._replies[self._next]
        self._next += 1
        return reply

    async def _handle(self, request: httpx2.Request) -> httpx2.Response:
        self.http_requests.append(request)
        if request.method != "POST" or not request.url.path.endswith("/chat/completions"):
            path = request.url.path
            return self._error(404, f"the fake serves POST /chat/completions, not {path}")
        try:
            body = json.loads(request.content or b"{}")
        except ValueError:
            return self._error(400, "the request body is not JSON")
        self.requests.append(body)
        reply = await self._next_reply(body)
        if reply is None:
            return self._error(500, f"FakeOpenAI ran out of replies after {len(self.requests) - 1}")
        if isinstance(reply, BaseException):
            raise reply
        if isinstance(reply, self._httpx2.Response):
            return reply
        if isinstance(reply, dict):
            return self._httpx2.Response(200, json=reply)
        completion = completion_body(
            reply, model=body.get("model") or self.model, index=next(self._counter)
        )
        if body.get("stream"):
            events = openai_chat.stream_events(
                openai_chat.parse_response(completion),
                model=completion["model"],
                id=completion["id"],
                created=completion["created"],
                include_usage=bool((body.get("stream_options") or {}).get("include_usage")),
            )
            headers = {"content-type": "text/event-stream"}
            return self._httpx2.Response(200, content=b"".join(events), headers=headers)
        return self._httpx2.Response(200, json=completion)

    async def aclose(self) -> None:
        """Close the client and its HTTP client."""
        await self.client.close()
        await self.http_client.aclose()

    async def __aenter__(self) -> FakeOpenAI:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        source = "function" if self._function else f"{len(self._replies)} replies"
        return f"FakeOpenAI({source}, {len(self.requests)} requests)"
