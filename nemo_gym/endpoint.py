"""The loopback model endpoint: any in-process `Model` served over HTTP on 127.0.0.1.

An agent program that only speaks HTTP (a CLI coding agent, a remote agent service, an
SDK-based framework) reaches the policy through this endpoint, and every call it makes
lands on the rollout that opened the route, with the exact token ids the in-process
model returned:

```python
endpoint = ModelEndpoint()                     # nothing starts until a route is opened
async with await endpoint.route(model) as route:   # `model`: the harness's recording model
    client = openai.AsyncOpenAI(base_url=route.base_url, api_key=route.api_key)
    await client.chat.completions.create(model="policy", messages=[...])
await endpoint.aclose()
```

Dialects, each parsed and written by `nemo_gym.wire` (no second copy of any shape):

| path (under the route's base) | dialect |
|---|---|
| `POST /v1/chat/completions` | OpenAI chat completions (`stream=True`: SSE chunks) |
| `POST /v1/responses` | OpenAI Responses (`stream=True`: SSE events; `previous_response_id`) |
| `POST /v1/messages` | Anthropic Messages (`stream=True`: SSE events) |
| `POST /v1beta/models/{model}:generateContent` | Gemini API (`:streamGenerateContent?alt=sse`) |
| `GET /v1/models` | the served model name (OpenAI's list shape, or Anthropic's) |

A route is a per-rollout token. It is found in the path (`/r/<token>/v1/...`: what
`route.base_url` and `route.anthropic_base_url` hold) or, for a client that cannot
change its path, as the API key (`Authorization: Bearer <token>`, `x-api-key`, Gemini's
`x-goog-api-key` or `key=` query) on the plain `/v1/...` and `/v1beta/...` paths. An
unknown token answers 401. The query string is never logged (a `key=` is a token).

Streaming is synthesized: the model's whole reply is written as the dialect's SSE
events. The model name a client sends is a label: it is not forwarded (the in-process
model serves whatever it serves).

Failures: a request the wire module cannot read answers 400 and a model error 500
(with `x-should-retry: false`, which the openai and anthropic SDKs honour); both are
also kept on the route (`route.failure`, `route.failed`), so the harness ends the
rollout with that failure instead of letting the agent carry on without its model.

Hostile clients: whatever runs the agent (the policy's own code, in a CLI agent) may
talk to the endpoint. Every request is held to `EndpointLimits`: the request line and
headers, the body after decompression, the time to send headers and the idle time
between bytes, the connections open, the requests queued on one connection. A request
without a valid route token is never buffered: its body is discarded (and its
connection closed past `max_header_bytes` of it). When the connection cap is reached,
the oldest connection that has not presented a valid token makes room, so a flood of
unauthenticated connections cannot lock a rollout out. Reading pauses while answers are
not being read, so pipelined requests cannot grow the server's memory.

The server runs in the event loop that first opens a route (or, with `thread=True`, in
a thread of its own whose loop does the HTTP work while each model call runs in the
loop of the route that asked for it). It is created lazily and `aclose()` stops it; the
endpoint stays usable (the next route starts it again), per `nemo_gym.lifecycle`.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import itertools
import logging
import secrets
import threading
import time
import urllib.parse
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from nemo_gym.errors import ConfigError, HarnessError, ModelError, require
from nemo_gym.lifecycle import is_interrupt
from nemo_gym.protocols import Model
from nemo_gym.records import Message, ModelRequest, ModelResponse, replace
from nemo_gym.wire import anthropic, gemini, openai_chat, openai_responses
from nemo_gym.wire.common import ServerRequest, WireError, dumps, loads

__all__ = ["Dialect", "EndpointLimits", "ModelEndpoint", "Route"]

log = logging.getLogger(__name__)

Dialect = Literal["chat", "responses", "messages", "gemini"]

_REASONS = {
    100: "Continue",
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    404: "Not Found",
    405: "Method Not Allowed",
    408: "Request Timeout",
    413: "Payload Too Large",
    415: "Unsupported Media Type",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
}
_KEPT_HEADERS = frozenset(
    {
        b"authorization",
        b"x-api-key",
        b"x-goog-api-key",
        b"expect",
        b"content-encoding",
        b"anthropic-version",
    }
)
_DIALECT_PATHS: dict[str, Dialect] = {
    "/chat/completions": "chat",
    "/responses": "responses",
    "/messages": "messages",
}
_ROUTE_PREFIX = "/r/"
_Answer = tuple[int, dict[str, str], bytes]


def _error_body(
    dialect: Dialect | None, message: str, kind: str, status: int = 500
) -> dict[str, Any]:
    if dialect == "gemini":
        return gemini.error_body(message, code=status)
    if dialect == "messages":
        return anthropic.error_body(message, type=kind)
    return openai_chat.error_body(message, type=kind)


@dataclass(frozen=True, slots=True)
class EndpointLimits:
    """What one client of a `ModelEndpoint` may cost.

    Args:
        max_header_bytes: the request line and headers together (431 past it); also
            the most body a request without a valid route may send (discarded) before
            its connection is closed.
        max_headers: header fields in one request (431 past it).
        max_body_bytes: a request body, after gzip/deflate decompression (413 past it).
        max_connections: connections open at once; at the cap, the oldest connection
            that has not presented a valid route token is closed to make room, and a
            new one is refused only when every open one has.
        header_timeout_s: from a request's first byte to the end of its headers (408).
        idle_timeout_s: the longest silence from a client while its request is
            incomplete, while its connection waits for the next request, or while it
            does not read its answers.
        max_pipelined: requests read ahead on one connection; reading pauses there
            (and while the client is not reading its answers) until they are answered.
    """

    max_header_bytes: int = 64 << 10
    max_headers: int = 100
    max_body_bytes: int = 64 << 20
    max_connections: int = 1024
    header_timeout_s: float = 10.0
    idle_timeout_s: float = 60.0
    max_pipelined: int = 8

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
                raise ConfigError(
                    f"EndpointLimits.{field.name} must be a positive number, got {value!r}"
                )


@dataclass(slots=True)
class _Request:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    keep_alive: bool
    # What the headers were found to ask for (`answer_head`), so it is looked up once.
    target: tuple[Route, Dialect] | None = None


class Route:
    """One rollout's way in: a token, and the model its calls go to.

    `base_url` is the OpenAI base URL (`.../r/<token>/v1`), `anthropic_base_url` the
    Anthropic one (the SDK adds `/v1/messages` itself), `api_key` the token again (for
    clients configured with a key on the plain `/v1` paths). `calls` counts the model
    calls served; `last` is the last (request, response) pair, what a harness turns
    into the trajectory's final conversation. The first failure is kept in `failure`
    and sets `failed`. Closing the route (`aclose`, or leaving `async with`) makes its
    token unknown to the endpoint.
    """

    def __init__(self, endpoint: ModelEndpoint, model: Model, token: str) -> None:
        self.endpoint = endpoint
        self.model = model
        self.token = token
        self.loop = asyncio.get_running_loop()
        self.calls = 0
        self.last: tuple[ModelRequest, ModelResponse] | None = None
        self.failure: BaseException | None = None
        self.failed = asyncio.Event()
        self.closed = False
        self._responses: dict[str, tuple[Message, ...]] = {}

    @property
    def base_url(self) -> str:
        return f"{self.endpoint.url}{_ROUTE_PREFIX}{self.token}/v1"

    @property
    def anthropic_base_url(self) -> str:
        return f"{self.endpoint.url}{_ROUTE_PREFIX}{self.token}"

    @property
    def api_key(self) -> str:
        return self.token

    def fail(self, exc: BaseException) -> None:
        """Keep the first failure and wake whoever waits on `failed` (the harness)."""
        if self.failure is None:
            self.failure = exc
        if self.loop.is_closed():
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self.loop:
            self.failed.set()
        else:
            self.loop.call_soon_threadsafe(self.failed.set)

    def raise_failure(self) -> None:
        """Raise the kept failure, if any (a `NemoGymError` keeps its kind)."""
        if self.failure is not None:
            raise self.failure

    async def generate(self, request: ModelRequest) -> ModelResponse:
        """One model call on this route's model (in the route's loop); kept in `last`."""
        response = await self.model.generate(request)
        self.calls += 1
        self.last = (request, response)
        return response

    def conversation(self, response_id: str) -> tuple[Message, ...] | None:
        return self._responses.get(response_id)

    def remember(self, response_id: str, messages: tuple[Message, ...]) -> None:
        self._responses[response_id] = messages

    async def aclose(self) -> None:
        self.closed = True
        self.endpoint._routes.pop(self.token, None)

    async def __aenter__(self) -> Route:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return f"Route({self.token[:6]}…, calls={self.calls})"


class _Server:
    """The listening socket and its connections, in one loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop, server: asyncio.Server) -> None:
        self.loop = loop
        self.server = server
        self.connections: set[_Connection] = set()
        # Connections that have not yet shown a valid route token, oldest first: the
        # ones closed to make room at the connection cap.
        self.unproven: dict[_Connection, None] = {}
        self.evicted = 0
        self.port: int = server.sockets[0].getsockname()[1]

    def admit(self, connection: _Connection, cap: int) -> bool:
        """Count a new connection in; False when it was refused (every other is proven)."""
        self.connections.add(connection)
        self.unproven[connection] = None
        if len(self.connections) <= cap:
            return True
        victim = next(iter(self.unproven))
        self.evicted += 1
        if self.evicted in (1, 10, 100) or self.evicted % 1000 == 0:  # a flood: log, not flood
            log.warning(
                "endpoint: %d connections open (max_connections); closed the oldest "
                "unauthenticated one (%d so far)",
                cap,
                self.evicted,
            )
        self.drop(victim)
        victim.abort()
        return victim is not connection

    def drop(self, connection: _Connection) -> None:
        self.connections.discard(connection)
        self.unproven.pop(connection, None)


class ModelEndpoint:
    """Serves in-process models on 127.0.0.1 as OpenAI chat, Responses and Anthropic Messages.

    Args:
        served_model: the model name `GET /v1/models` lists (any name is accepted on
            requests).
        host: a loopback address (only loopback is served).
        port: 0 picks a free port.
        thread: run the HTTP server in a thread of its own instead of the caller's loop
            (model calls still run in the loop of the route that asked for them).
        limits: what one client may cost (`EndpointLimits`: sizes, timeouts,
            connections; see docs/reliability.md).

    See the module docstring for paths, tokens, streaming and failures.
    """

    def __init__(
        self,
        *,
        served_model: str = "nemo-gym-policy",
        host: str = "127.0.0.1",
        port: int = 0,
        thread: bool = False,
        limits: EndpointLimits | None = None,
    ) -> None:
        if not (host.startswith("127.") or host in ("localhost", "::1")):
            raise ConfigError(f"ModelEndpoint serves loopback addresses only, not {host!r}")
        self.served_model = served_model
        self.host = host
        self.port = port
        self.thread = thread
        self.limits = limits or EndpointLimits()
        self._routes: dict[str, Route] = {}
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._ids = itertools.count(1)

    # ------------------------------------------------------------------ lifecycle

    @property
    def url(self) -> str:
        """`http://127.0.0.1:PORT` (no trailing slash); the endpoint must be started."""
        if self._server is None:
            raise RuntimeError("the endpoint is not started (open a route, or await start())")
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self._server.port}"

    @property
    def bound_port(self) -> int:
        """The port the endpoint listens on (started endpoints only)."""
        if self._server is None:
            raise RuntimeError("the endpoint is not started")
        return self._server.port

    @property
    def started(self) -> bool:
        return self._server is not None

    async def start(self) -> ModelEndpoint:
        """Start listening (idempotent; a server left by a closed loop is replaced)."""
        server = self._server
        if server is not None:
            if not server.loop.is_closed() and (self.thread or server.loop.is_running()):
                if self.thread or server.loop is asyncio.get_running_loop():
                    return self
            # A trainer that runs loops in turn: the old loop's server is gone with it.
            await self._stop()
        if self.thread:
            self._server = await asyncio.to_thread(self._start_thread)
        else:
            self._server = await self._listen()
        return self

    async def _listen(self) -> _Server:
        require("httptools", "http")  # the request parser; a clear error before listening
        loop = asyncio.get_running_loop()
        holder: list[_Server] = []
        server = await loop.create_server(
            lambda: _Connection(self, holder[0]), self.host, self.port, backlog=1024
        )
        holder.append(_Server(loop, server))
        return holder[0]

    def _start_thread(self) -> _Server:
        result: list[_Server | BaseException] = []
        started = threading.Event()

        def main() -> None:
            loop = asyncio.new_event_loop()
            asyncio.set_event_loop(loop)
            try:
                result.append(loop.run_until_complete(self._listen()))
            except BaseException as exc:
                result.append(exc)
                started.set()
                loop.close()
                return
            started.set()
            try:
                loop.run_forever()
            finally:
                loop.run_until_complete(loop.shutdown_asyncgens())
                loop.close()

        thread = threading.Thread(target=main, name="nemo_gym-endpoint", daemon=True)
        thread.start()
        started.wait()
        outcome = result[0]
        if isinstance(outcome, BaseException):
            raise outcome
        self._thread = thread
        return outcome

    async def aclose(self) -> None:
        """Stop the server and drop every route; idempotent, and the endpoint stays usable."""
        for route in list(self._routes.values()):
            route.closed = True
        self._routes.clear()
        await self._stop()

    async def _stop(self) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        if server.loop.is_closed():
            return

        async def shut() -> None:
            server.server.close()
            for connection in list(server.connections):
                connection.abort()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(server.server.wait_closed(), 5)

        if self._thread is not None:
            thread, self._thread = self._thread, None
            future = asyncio.run_coroutine_threadsafe(shut(), server.loop)
            await asyncio.wrap_future(future)
            server.loop.call_soon_threadsafe(server.loop.stop)
            await asyncio.to_thread(thread.join, 10)
        elif server.loop is asyncio.get_running_loop():
            await shut()
        else:
            server.server.close()

    async def __aenter__(self) -> ModelEndpoint:
        return await self.start()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    # ------------------------------------------------------------------ routes

    async def route(self, model: Model, *, token: str | None = None) -> Route:
        """A new route to `model` (the endpoint starts if it is not listening yet)."""
        await self.start()
        token = token or secrets.token_urlsafe(18)
        if token in self._routes:
            raise ConfigError(f"route token {token!r} is already open")
        route = Route(self, model, token)
        self._routes[token] = route
        return route

    def routes(self) -> list[Route]:
        return list(self._routes.values())

    def __repr__(self) -> str:
        where = self.url if self._server is not None else "not started"
        return f"ModelEndpoint({where}, {len(self._routes)} routes)"

    # ------------------------------------------------------------------ serving

    def _find(self, request: _Request) -> tuple[Route | None, str]:
        """(the route, the path below it), from the path's token or the API key."""
        path = request.path.split("?", 1)[0]
        if path.startswith(_ROUTE_PREFIX):
            token, _, rest = path[len(_ROUTE_PREFIX) :].partition("/")
            rest = "/" + rest
        else:
            rest = path
            token = request.headers.get("x-api-key", "")
            token = token or request.headers.get("x-goog-api-key", "") or _query_key(request.path)
            auth = request.headers.get("authorization", "")
            if not token and auth[:7].lower() == "bearer ":
                token = auth[7:].strip()
        if rest.startswith("/v1/") or rest == "/v1":
            rest = rest[3:]
        elif rest.startswith(_GEMINI_PREFIX):
            rest = rest[len(_GEMINI_PREFIX) - 1 :]
        return self._routes.get(token), rest.rstrip("/") or "/"

    def answer_head(self, request: _Request) -> tuple[tuple[Route, Dialect] | None, _Answer | None]:
        """What the request line and headers alone decide: ((the route whose model the
        body is for, its dialect), None), or (None, the answer): no body is kept then."""
        route, path = self._find(request)
        dialect = _DIALECT_PATHS.get(path) or ("gemini" if gemini.split_path(path) else None)
        if request.method == "GET":
            if path == "/models":
                body = dumps(self._models_body("anthropic-version" in request.headers))
                return None, (200, {}, body)
            if path == "/":
                return None, (200, {}, dumps({"status": "ok"}))
        if route is None or route.closed:
            if dialect is not None or path == "/messages/count_tokens":
                message = "unknown route token (the rollout it belonged to has ended?)"
                body = dumps(_error_body(dialect, message, "authentication_error", 401))
                return None, (401, {}, body)
            message = f"no such path: {_redacted(request.path)[:200]}"
            return None, (404, {}, dumps(_error_body(None, message, "not_found")))
        if dialect is None:
            served = f"{', '.join(_DIALECT_PATHS)}, /v1beta/models/{{model}}:{{method}}"
            message = f"this endpoint serves {served}; not {path[:200]}"
            return None, (404, {}, dumps(_error_body(None, message, "not_found")))
        if request.method != "POST":
            body = dumps(_error_body(dialect, f"{path} takes POST", "invalid_request", 405))
            return None, (405, {}, body)
        return (route, dialect), None

    async def handle(self, request: _Request) -> tuple[int, dict[str, str], bytes | list[bytes]]:
        """One HTTP request: (status, headers, body or SSE events)."""
        target = request.target
        if target is None or target[0].closed:
            target, answer = self.answer_head(request)
            if answer is not None:
                return answer
            assert target is not None
        route, dialect = target
        try:
            body = loads(_decoded(request, self.limits.max_body_bytes))
            if log.isEnabledFor(logging.DEBUG):
                log.debug("%s request on %s: %s", dialect, route, dumps(body))
            if dialect == "gemini":
                served = _parse_gemini(request.path, body)
            else:
                served = _PARSE[dialect](body)
            model_request = self._model_request(route, dialect, served)
        except _TooLarge as exc:
            route.fail(HarnessError(f"the agent sent a {dialect} request {exc}", code="too_large"))
            return 413, {}, dumps(_error_body(dialect, str(exc), "invalid_request_error", 413))
        except WireError as exc:
            error = HarnessError(
                f"the agent sent a {dialect} request the endpoint cannot read: {exc}",
                code="bad_agent_request",
            )
            route.fail(error)
            return 400, {}, dumps(_error_body(dialect, str(exc), "invalid_request_error", 400))
        try:
            if route.loop is asyncio.get_running_loop():
                response = await route.generate(model_request)
            else:
                future = asyncio.run_coroutine_threadsafe(route.generate(model_request), route.loop)
                response = await asyncio.wrap_future(future)
        except BaseException as exc:
            if is_interrupt(exc) and route.loop is asyncio.get_running_loop():
                raise
            route.fail(exc if isinstance(exc, Exception) else ModelError(repr(exc)))
            kind = "api_error" if dialect == "messages" else "server_error"
            message = f"{type(exc).__name__}: {exc}"
            return 500, {"x-should-retry": "false"}, dumps(_error_body(dialect, message, kind))
        return self._reply(route, dialect, served, model_request, response)

    def _model_request(self, route: Route, dialect: Dialect, served: ServerRequest) -> ModelRequest:
        request = served.request
        if dialect == "responses":
            previous = served.options.get("previous_response_id")
            if isinstance(previous, str) and previous:
                history = route.conversation(previous)
                if history is None:
                    raise WireError(
                        f"previous_response_id {previous!r} is not a response of this route"
                    )
                request = replace(request, messages=(*history, *request.messages))
        # The client's model name is a label of ours, not a model to switch to.
        return replace(request, model=None) if request.model is not None else request

    def _reply(
        self,
        route: Route,
        dialect: Dialect,
        served: ServerRequest,
        request: ModelRequest,
        response: ModelResponse,
    ) -> tuple[int, dict[str, str], bytes | list[bytes]]:
        name = served.request.model or self.served_model
        n = next(self._ids)
        created = int(time.time())
        if dialect == "chat":
            ident = f"chatcmpl-{n}"
            if served.stream:
                options = served.options.get("stream_options")
                usage = isinstance(options, dict) and bool(options.get("include_usage"))
                events = openai_chat.stream_events(
                    response, model=name, id=ident, created=created, include_usage=usage
                )
                return 200, {}, events
            body = openai_chat.build_response(response, model=name, id=ident, created=created)
            return 200, {}, dumps(body)
        if dialect == "responses":
            ident = f"resp_{route.token[:8]}{n}"
            route.remember(ident, (*request.messages, response.message))
            if served.stream:
                return (
                    200,
                    {},
                    openai_responses.stream_events(response, model=name, id=ident, created=created),
                )
            body = openai_responses.build_response(response, model=name, id=ident, created=created)
            return 200, {}, dumps(body)
        if dialect == "gemini":
            ident = f"{route.token[:8]}{n}"
            if served.stream:
                return 200, {}, gemini.stream_events(response, model=name, id=ident)
            return 200, {}, dumps(gemini.build_response(response, model=name, id=ident))
        ident = f"msg_{route.token[:8]}{n}"
        if served.stream:
            return 200, {}, anthropic.stream_events(response, model=name, id=ident)
        return 200, {}, dumps(anthropic.build_response(response, model=name, id=ident))

    def _models_body(self, anthropic_shape: bool) -> dict[str, Any]:
        item: dict[str, Any]
        if anthropic_shape:
            item = {
                "type": "model",
                "id": self.served_model,
                "display_name": self.served_model,
                "created_at": "1970-01-01T00:00:00Z",
            }
            return {
                "data": [item],
                "has_more": False,
                "first_id": self.served_model,
                "last_id": self.served_model,
            }
        item = {"id": self.served_model, "object": "model", "created": 0, "owned_by": "nemo-gym"}
        return {"object": "list", "data": [item]}


_PARSE: dict[Dialect, Callable[[Any], ServerRequest]] = {
    "chat": openai_chat.parse_request,
    "responses": openai_responses.parse_request,
    "messages": anthropic.parse_request,
}


_GEMINI_PREFIX = f"/{gemini.API_VERSION}/"


def _query_key(path: str) -> str:
    """The `key=` query parameter (how Google's clients may send their API key)."""
    _, _, query = path.partition("?")
    for pair in query.split("&"):
        name, _, value = pair.partition("=")
        if name == "key":
            return urllib.parse.unquote(value)
    return ""


def _redacted(path: str) -> str:
    """`path` without its query: a `key=` there is a route token, never echoed or logged."""
    return path.split("?", 1)[0]


def _parse_gemini(path: str, body: Any) -> ServerRequest:
    # answer_head found the route and a `/models/{model}:{method}` path below it.
    below = path.split("?", 1)[0].rpartition(_GEMINI_PREFIX)[2]
    found = gemini.split_path("/" + below)
    if found is None:
        raise WireError(f"not a Gemini model path: {_redacted(path)[:200]}")
    model, method = found
    return gemini.parse_request(body, model=model, stream=method == "streamGenerateContent")


class _TooLarge(WireError):
    """A body over `max_body_bytes` once decompressed."""


def _decoded(request: _Request, limit: int) -> bytes:
    encoding = request.headers.get("content-encoding", "").strip().lower()
    if not encoding or encoding == "identity":
        return request.body
    if encoding in ("gzip", "x-gzip"):
        decoder = zlib.decompressobj(16 + zlib.MAX_WBITS)
    elif encoding == "deflate":
        decoder = zlib.decompressobj()
    else:
        raise WireError(f"unsupported content-encoding {encoding!r}")
    try:
        # max_length: a 2 MB gzip bomb stops at the limit instead of costing 4 GB.
        data = decoder.decompress(request.body, limit + 1)
    except zlib.error as exc:
        raise WireError(f"request body is not valid {encoding}: {exc}") from None
    if len(data) > limit or decoder.unconsumed_tail:
        raise _TooLarge(f"body is over {limit} bytes once decompressed (max_body_bytes)")
    return data


def _head(status: int, headers: dict[str, str]) -> bytes:
    lines = [f"HTTP/1.1 {status} {_REASONS.get(status, 'Status')}"]
    lines.extend(f"{name}: {value}" for name, value in headers.items())
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


class _Reject(Exception):
    """Raised from a parser callback: answer `status` and close the connection."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class _Connection(asyncio.Protocol):
    """One client connection: httptools parses, requests are answered one at a time.

    Limits (`EndpointLimits`) are checked as bytes arrive; one timer per connection,
    re-armed only when it fires, enforces the header and idle timeouts.
    """

    def __init__(self, endpoint: ModelEndpoint, server: _Server) -> None:
        import httptools

        self.endpoint = endpoint
        self.limits = endpoint.limits
        self.server = server
        self.loop = server.loop
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self.queue: collections.deque[_Request] = collections.deque()
        self.task: asyncio.Task[None] | None = None
        self.timer: asyncio.TimerHandle | None = None
        self.last_activity = self.loop.time()
        self.head_started: float | None = None
        self.in_message = False
        self.reading = True
        self.writable: asyncio.Future[None] | None = None
        self._url = b""
        self._headers: dict[str, str] = {}
        self._head_bytes = 0
        self._header_count = 0
        self._body: list[bytes] = []
        self._size = 0
        self._target: tuple[Route, Dialect] | None = None
        self._answer: _Answer | None = None

    # -- asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        if not self.server.admit(self, self.limits.max_connections):
            return
        self.timer = self.loop.call_at(self.last_activity + self.limits.idle_timeout_s, self._tick)

    def connection_lost(self, exc: Exception | None) -> None:
        self.server.drop(self)
        self.transport = None
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        if self.writable is not None and not self.writable.done():
            self.writable.set_result(None)
        if self.task is not None and not self.task.done():
            self.task.cancel()

    def pause_writing(self) -> None:
        # The client is not reading its answers: stop reading its requests too.
        if self.writable is None or self.writable.done():
            self.writable = self.loop.create_future()
        self.last_activity = self.loop.time()
        self._pause_reading()

    def resume_writing(self) -> None:
        if self.writable is not None and not self.writable.done():
            self.writable.set_result(None)
        self.writable = None
        if len(self.queue) < self.limits.max_pipelined:
            self._resume_reading()

    def data_received(self, data: bytes) -> None:
        import httptools

        self.last_activity = self.loop.time()
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._write_error(400, "upgrades are not served")
        except httptools.HttpParserError as exc:
            reject = exc.__context__
            if isinstance(reject, _Reject):
                self._write_error(reject.status, str(reject))
            else:
                self._write_error(400, f"malformed HTTP request: {exc}")

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()

    def _pause_reading(self) -> None:
        if self.reading and self.transport is not None and not self.transport.is_closing():
            self.reading = False
            self.transport.pause_reading()

    def _resume_reading(self) -> None:
        if not self.reading and self.transport is not None and not self.transport.is_closing():
            self.reading = True
            self.last_activity = self.loop.time()
            self.transport.resume_reading()

    def _tick(self) -> None:
        self.timer = None
        if self.transport is None:
            return
        limits = self.limits
        now = self.loop.time()
        unread = self.writable is not None and not self.writable.done()
        if not unread and ((self.task is not None and not self.in_message) or not self.reading):
            # Answering (a model call may take minutes): nothing is asked of the client
            # meanwhile. A client that does not read its answers gets the idle timeout.
            self.timer = self.loop.call_at(now + limits.idle_timeout_s, self._tick)
            return
        if self.head_started is not None and now >= self.head_started + limits.header_timeout_s:
            self._write_error(408, f"request headers not complete in {limits.header_timeout_s:g} s")
            return
        if now >= self.last_activity + limits.idle_timeout_s:
            self.transport.close()
            return
        deadline = self.last_activity + limits.idle_timeout_s
        if self.head_started is not None:
            deadline = min(deadline, self.head_started + limits.header_timeout_s)
        self.timer = self.loop.call_at(deadline, self._tick)

    # -- httptools callbacks

    def on_message_begin(self) -> None:
        self._url = b""
        self._headers = {}
        self._head_bytes = 0
        self._header_count = 0
        self._body = []
        self._size = 0
        self._target = None
        self._answer = None
        self.in_message = True
        self.head_started = now = self.loop.time()
        deadline = now + min(self.limits.header_timeout_s, self.limits.idle_timeout_s)
        if self.timer is None or self.timer.when() > deadline:
            # The header deadline is sooner than the idle one the timer is set for.
            if self.timer is not None:
                self.timer.cancel()
            self.timer = self.loop.call_at(deadline, self._tick)

    def _count_head(self, size: int) -> None:
        self._head_bytes += size
        if self._head_bytes > self.limits.max_header_bytes:
            limit = self.limits.max_header_bytes
            raise _Reject(431, f"request line and headers over {limit} bytes")

    def on_url(self, url: bytes) -> None:
        self._count_head(len(url))
        self._url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self._count_head(len(name) + len(value) + 4)
        self._header_count += 1
        if self._header_count > self.limits.max_headers:
            raise _Reject(431, f"over {self.limits.max_headers} header fields")
        key = name.lower()
        if key in _KEPT_HEADERS:
            self._headers[key.decode("latin-1")] = value.decode("latin-1")

    def on_headers_complete(self) -> None:
        self.head_started = None
        head = _Request(
            method=self.parser.get_method().decode("latin-1"),
            path=self._url.decode("latin-1"),
            headers=self._headers,
            body=b"",
            keep_alive=False,
        )
        self._target, self._answer = self.endpoint.answer_head(head)
        expects = self._headers.get("expect", "").lower() == "100-continue"
        if self._target is not None:
            self.server.unproven.pop(self, None)
            if expects and self.transport:
                self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        elif expects and self._answer is not None:
            # The client waits to be told to send its body: tell it the answer instead.
            status, headers, payload = self._answer
            self._write(status, headers, payload, keep_alive=False)
            raise _Reject(status, "answered already")

    def on_body(self, body: bytes) -> None:
        self._size += len(body)
        if self._target is None:
            # No valid route: nothing of the body is kept, and not much of it is read.
            if self._size > self.limits.max_header_bytes:
                status, _, payload = self._answer or (400, {}, b"")
                self._write(status, {}, payload, keep_alive=False)
                raise _Reject(status, "answered already")
            return
        if self._size > self.limits.max_body_bytes:
            raise _Reject(413, f"request body over {self.limits.max_body_bytes} bytes")
        self._body.append(body)

    def on_message_complete(self) -> None:
        self.in_message = False
        request = _Request(
            method=self.parser.get_method().decode("latin-1"),
            path=self._url.decode("latin-1"),
            headers=self._headers,
            body=b"".join(self._body),
            keep_alive=self.parser.should_keep_alive(),
            target=self._target,
        )
        self._body = []
        self.queue.append(request)
        if len(self.queue) >= self.limits.max_pipelined:
            self._pause_reading()
        if self.task is None:
            self.task = asyncio.ensure_future(self._serve())

    # -- answering

    async def _serve(self) -> None:
        try:
            while self.queue and self.transport is not None:
                request = self.queue.popleft()
                try:
                    status, headers, body = await self.endpoint.handle(request)
                except Exception as exc:  # our bug: the client sees it, the log keeps it
                    log.exception(
                        "endpoint failed on %s %s", request.method, _redacted(request.path)
                    )
                    status, headers = 500, {}
                    body = dumps(openai_chat.error_body(f"{type(exc).__name__}: {exc}"))
                self._write(status, headers, body, request.keep_alive)
                if self.writable is not None:
                    await self.writable  # the client reads its answers, or the connection ends
                if len(self.queue) < self.limits.max_pipelined:
                    self._resume_reading()
        finally:
            self.task = None
            self.last_activity = self.loop.time()

    def _write(
        self, status: int, headers: dict[str, str], body: bytes | list[bytes], keep_alive: bool
    ) -> None:
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        if not keep_alive:
            headers = {**headers, "connection": "close"}
        if isinstance(body, list):
            head = {
                "content-type": "text/event-stream",
                "cache-control": "no-cache",
                "transfer-encoding": "chunked",
                **headers,
            }
            chunks = [b"%x\r\n%s\r\n" % (len(event), event) for event in body]
            data = _head(status, head) + b"".join(chunks) + b"0\r\n\r\n"
        else:
            head = {"content-type": "application/json", "content-length": str(len(body)), **headers}
            data = _head(status, head) + body
        transport.write(data)
        if not keep_alive:
            transport.close()

    def _write_error(self, status: int, message: str) -> None:
        self._write(status, {}, dumps(openai_chat.error_body(message)), keep_alive=False)
