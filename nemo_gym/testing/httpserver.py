"""A loopback HTTP/1.1 server for testing HTTP clients, with the failures real servers have.

`LoopbackHTTPServer(handler)` listens on 127.0.0.1 (a free port) and answers each
request with what `handler(request)` returns (sync or async):

| reply | what the client sees |
|---|---|
| `Reply(status, body, headers)` | a response with Content-Length (a non-bytes body: JSON) |
| `StreamReply(events)` | a chunked `text/event-stream` response, one chunk per event |
| `Reset()` | the connection closed with no response (after `sent` bytes, if any) |
| `Truncated(body, cut)` | headers promising `len(body)` bytes, then `cut` of them, then close |
| `Hang()` | no answer at all, until the client gives up |
| `RawReply(data)` | `data` written verbatim (malformed responses), then close |

Keep-alive connections are served in order; `requests` records every request and
`connections` counts the connections accepted. Only loopback addresses are served.

```python
async with LoopbackHTTPServer(lambda request: Reply(200, {"ok": True})) as server:
    ...  # POST to f"{server.url}/anything"
```
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import ssl as ssl_module
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from nemo_gym.wire.common import dumps, loads

__all__ = [
    "HTTPRequest",
    "Hang",
    "LoopbackHTTPServer",
    "RawReply",
    "Reply",
    "Reset",
    "StreamReply",
    "Truncated",
]

_REASONS = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    408: "Request Timeout",
    409: "Conflict",
    422: "Unprocessable Entity",
    429: "Too Many Requests",
    500: "Internal Server Error",
    502: "Bad Gateway",
    503: "Service Unavailable",
    529: "Overloaded",
}


@dataclass(frozen=True, slots=True)
class HTTPRequest:
    """One request as received: header names are lower-cased."""

    method: str
    path: str
    headers: Mapping[str, str]
    body: bytes

    def json(self) -> Any:
        return loads(self.body) if self.body else None


@dataclass(frozen=True, slots=True)
class Reply:
    status: int = 200
    body: Any = b""
    headers: Mapping[str, str] = field(default_factory=dict)
    delay_s: float = 0.0


@dataclass(frozen=True, slots=True)
class StreamReply:
    events: Sequence[bytes]
    status: int = 200
    headers: Mapping[str, str] = field(default_factory=dict)
    delay_s: float = 0.0
    """Pause before each event."""
    complete: bool = True
    """False: close the connection after the events without the final empty chunk."""


@dataclass(frozen=True, slots=True)
class Reset:
    sent: bytes = b""


@dataclass(frozen=True, slots=True)
class Truncated:
    body: bytes
    cut: int
    status: int = 200
    headers: Mapping[str, str] = field(default_factory=lambda: {"content-type": "application/json"})


@dataclass(frozen=True, slots=True)
class Hang:
    pass


@dataclass(frozen=True, slots=True)
class RawReply:
    data: bytes


AnyReply = Reply | StreamReply | Reset | Truncated | Hang | RawReply
Handler = Callable[[HTTPRequest], AnyReply | Awaitable[AnyReply]]


def _head(status: int, headers: Mapping[str, str]) -> bytes:
    lines = [f"HTTP/1.1 {status} {_REASONS.get(status, 'Status')}"]
    lines.extend(f"{name}: {value}" for name, value in headers.items())
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


class _Connection(asyncio.Protocol):
    def __init__(self, server: LoopbackHTTPServer) -> None:
        self.server = server
        self.transport: asyncio.Transport | None = None
        self.buffer = b""
        self.busy = False
        self.task: asyncio.Task[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.server.connections += 1
        self.server._open.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.server._open.discard(self)
        if self.task is not None and not self.task.done():
            self.task.cancel()

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if not self.busy:
            self._next()

    def _next(self) -> None:
        while not self.busy and self.transport is not None and not self.transport.is_closing():
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buffer[:end].decode("latin-1").split("\r\n")
            method, path, _ = [*head[0].split(" ", 2), "", ""][:3]
            headers: dict[str, str] = {}
            for line in head[1:]:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
            size = int(headers.get("content-length", "0") or 0)
            if len(self.buffer) < end + 4 + size:
                return
            body = self.buffer[end + 4 : end + 4 + size]
            self.buffer = self.buffer[end + 4 + size :]
            request = HTTPRequest(method=method, path=path, headers=headers, body=body)
            self.server.requests.append(request)
            reply = self.server.handler(request)
            if not inspect.isawaitable(reply) and self._write_now(reply):
                continue
            self.busy = True
            self.task = asyncio.ensure_future(self._answer(reply))

    def _write_now(self, reply: Any) -> bool:
        # The common case (an immediate Reply) is written inline: no task per request.
        if type(reply) is not Reply or reply.delay_s:
            return False
        self._write_reply(reply)
        return True

    def _write_reply(self, reply: Reply) -> None:
        assert self.transport is not None
        body = reply.body
        headers = {k.lower(): v for k, v in reply.headers.items()}
        if not isinstance(body, bytes | bytearray):
            body = dumps(body)
            headers.setdefault("content-type", "application/json")
        headers["content-length"] = str(len(body))
        self.transport.write(_head(reply.status, headers) + bytes(body))

    async def _answer(self, pending: Any) -> None:
        transport = self.transport
        assert transport is not None
        try:
            reply = await pending if inspect.isawaitable(pending) else pending
            if isinstance(reply, Reply):
                if reply.delay_s:
                    await asyncio.sleep(reply.delay_s)
                self._write_reply(reply)
            elif isinstance(reply, StreamReply):
                headers = {
                    "content-type": "text/event-stream",
                    "transfer-encoding": "chunked",
                    **{k.lower(): v for k, v in reply.headers.items()},
                }
                transport.write(_head(reply.status, headers))
                for event in reply.events:
                    if reply.delay_s:
                        await asyncio.sleep(reply.delay_s)
                    transport.write(b"%x\r\n%s\r\n" % (len(event), event))
                if not reply.complete:
                    transport.close()
                    return
                transport.write(b"0\r\n\r\n")
            elif isinstance(reply, Reset):
                if reply.sent:
                    transport.write(reply.sent)
                transport.abort()
                return
            elif isinstance(reply, Truncated):
                headers = {**reply.headers, "content-length": str(len(reply.body))}
                transport.write(_head(reply.status, headers) + reply.body[: reply.cut])
                transport.close()
                return
            elif isinstance(reply, Hang):
                await asyncio.Event().wait()
            elif isinstance(reply, RawReply):
                transport.write(reply.data)
                transport.close()
                return
            else:
                raise TypeError(f"handler returned {reply!r}, not a reply")
        except asyncio.CancelledError:
            return
        except Exception as exc:  # the handler's bug: a 500 the test will see
            message = f"handler raised {type(exc).__name__}: {exc}"
            self._write_reply(Reply(500, {"error": {"message": message, "type": "server"}}))
        self.busy = False
        self.task = None
        if self.buffer:
            self._next()


class LoopbackHTTPServer:
    """An HTTP/1.1 server on 127.0.0.1 answering from `handler`. See the module docstring."""

    def __init__(
        self,
        handler: Handler,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        ssl: ssl_module.SSLContext | None = None,
    ) -> None:
        if not (host.startswith("127.") or host in ("localhost", "::1")):
            raise ValueError(f"LoopbackHTTPServer serves loopback addresses only, not {host!r}")
        self.handler = handler
        self.ssl = ssl
        self.host = host
        self.port = port
        self.requests: list[HTTPRequest] = []
        self.connections = 0
        self._open: set[_Connection] = set()
        self._server: asyncio.AbstractServer | None = None

    @property
    def url(self) -> str:
        """`http://127.0.0.1:PORT` (https with `ssl=`; no trailing slash)."""
        if self._server is None:
            raise RuntimeError("the server is not started")
        return f"{'https' if self.ssl else 'http'}://{self.host}:{self.port}"

    async def start(self) -> LoopbackHTTPServer:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: _Connection(self), self.host, self.port, backlog=4096, ssl=self.ssl
        )
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    def drop_connections(self) -> None:
        """Close every open connection (the server closing idle keep-alive connections)."""
        for connection in list(self._open):
            if connection.transport is not None:
                connection.transport.close()

    async def aclose(self) -> None:
        if self._server is None:
            return
        self._server.close()
        for connection in list(self._open):
            if connection.task is not None:
                connection.task.cancel()
            if connection.transport is not None:
                connection.transport.abort()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._server.wait_closed(), 5)
        self._server = None

    async def __aenter__(self) -> LoopbackHTTPServer:
        return await self.start()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()
