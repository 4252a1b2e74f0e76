"""A lean HTTP/1.1 client for JSON POSTs: asyncio protocols, the httptools parser, a pool.

This is the fast transport's wire layer (`nemo_gym.models.http.FastTransport`). It does
one thing: POST a body to an endpoint and return the reply (whole, or chunk by chunk to
a callback for server-sent events), over keep-alive connections, with connect / read /
total timeouts. Responses are parsed by httptools (llhttp, the parser of Node.js and
uvicorn): Content-Length, chunked and close-delimited bodies, gzip/deflate.

Why not aiohttp or httpx: per call, this costs ~25 µs of CPU where aiohttp costs ~90 µs
and httpx2 ~650 µs, and it keeps ~2 garbage-collected objects alive per call in flight
where aiohttp keeps ~43 and httpx2 ~81. The latter is what made the others slow down as
calls in flight grew: CPython's full collections walk every live object, so their cost
per call grows with the number in flight (httpx2 also scans its whole pool per request).
See docs/models-http.md for the measurements.

Per call: one future and one timer; a free connection is taken from a LIFO stack and a
waiter (when the pool is full) from a FIFO queue, both O(1). Nothing is scanned.

A server is not trusted: the status line and headers are bounded (`max_header_bytes`,
`max_headers`), and so is the body after gzip/deflate (`max_body_bytes`, streamed or
not). Header names and values with CR, LF or NUL are refused before anything is sent,
and the request target is percent-encoded, so nothing can be smuggled into a request.
"""

from __future__ import annotations

import asyncio
import collections
import re
import ssl as ssl_module
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urlsplit

import httptools

__all__ = [
    "Client",
    "ConnectError",
    "ConnectionLost",
    "Endpoint",
    "H1Error",
    "ProtocolError",
    "Response",
    "Timeout",
    "TooLarge",
    "TruncatedBody",
]

MAX_HEADER_BYTES = 64 << 10
"""Default bound on a response's status line and headers together."""
MAX_HEADERS = 100
"""Default bound on a response's header fields."""
MAX_BODY_BYTES = 256 << 20
"""Default bound on a response body after decompression (streamed bodies too)."""

# The only response headers anything downstream reads; the rest are not kept.
_KEPT = frozenset(
    {b"retry-after", b"retry-after-ms", b"content-type", b"content-encoding", b"content-length"}
)


class H1Error(Exception):
    """A request failed below HTTP (no usable response)."""


class ConnectError(H1Error):
    """The connection could not be opened (refused, unreachable, DNS, TLS)."""


class ConnectionLost(H1Error):
    """The connection closed before any byte of the response came."""

    def __init__(self, message: str, *, reused: bool) -> None:
        super().__init__(message)
        self.reused = reused


class TruncatedBody(H1Error):
    """The connection closed in the middle of the response."""


class ProtocolError(H1Error):
    """The server's bytes are not a valid HTTP/1.1 response."""


class TooLarge(ProtocolError):
    """The response's headers or (decompressed) body are over the client's limits."""


class Timeout(H1Error):
    """A timeout expired; `phase` is "connect", "read" or "total"."""

    def __init__(self, message: str, *, phase: str) -> None:
        super().__init__(message)
        self.phase = phase


@dataclass(frozen=True, slots=True)
class Response:
    """A whole response. `headers` holds the few that matter (lower-case names)."""

    status: int
    headers: dict[str, str]
    body: bytes


@dataclass(frozen=True, slots=True)
class Endpoint:
    """A parsed URL, with the request line and Host header prepared once."""

    url: str
    scheme: str
    host: str
    port: int
    head: bytes = field(repr=False)

    @classmethod
    def parse(cls, url: str, headers: Mapping[str, str]) -> Endpoint:
        """`url` prepared for POSTs; `ValueError` for a URL or header that could smuggle
        bytes into the request (CR, LF or NUL in a header; a name that is no token)."""
        check_headers(headers)
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {url!r}")
        port = parts.port or (443 if parts.scheme == "https" else 80)
        default_port = port == (443 if parts.scheme == "https" else 80)
        host = parts.hostname
        if not _HOST.fullmatch(host):
            host = host.encode("idna").decode("ascii")  # a name in Unicode; ValueError if bad
        host_header = f"[{host}]" if ":" in host else host
        if not default_port:
            host_header += f":{port}"
        # Percent-encoded: a space or a CR/LF in the URL stays inside the target.
        target = quote(parts.path or "/", safe=_PATH_SAFE) + (
            f"?{quote(parts.query, safe=_QUERY_SAFE)}" if parts.query else ""
        )
        lines = [f"POST {target} HTTP/1.1", f"Host: {host_header}"]
        lines.extend(f"{name}: {value}" for name, value in headers.items())
        head = ("\r\n".join(lines) + "\r\nContent-Length: ").encode("latin-1")
        return cls(url=url, scheme=parts.scheme, host=host, port=port, head=head)


_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_BAD_VALUE = re.compile(r"[\r\n\x00]")
_HOST = re.compile(r"[A-Za-z0-9.\-:\[\]]+")
_PATH_SAFE = "/%:@!$&'()*+,;=-._~"
_QUERY_SAFE = "/%:@!$&'()*+,;=-._~?"


def check_headers(headers: Mapping[str, str]) -> None:
    """`ValueError` naming the header when a name is not an HTTP token or a value holds
    CR, LF or NUL (what would let a value end the header block and start a request)."""
    for name, value in headers.items():
        if not isinstance(name, str) or not _TOKEN.fullmatch(name):
            raise ValueError(f"header name {name!r} is not an HTTP token")
        if not isinstance(value, str) or _BAD_VALUE.search(value):
            raise ValueError(f"header {name!r}: the value holds CR, LF or NUL (or is not text)")
        try:
            value.encode("latin-1")
        except UnicodeEncodeError:
            raise ValueError(f"header {name!r}: the value is not Latin-1 text") from None


class _Connection(asyncio.Protocol):
    """One keep-alive connection; one request at a time, its state kept on the connection."""

    def __init__(self, pool: _Pool) -> None:
        self.pool = pool
        self.loop = pool.loop
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.closed = False
        self.uses = 0
        self.idle_since = 0.0
        self._reset()

    def _reset(self) -> None:
        self.future: asyncio.Future[Response] | None = None
        self.on_chunk: Callable[[bytes], None] | None = None
        self.chunks: list[bytes] = []
        self.headers: dict[str, str] = {}
        self.status = 0
        self.got_bytes = False
        self.headers_done = False
        self.framed = False
        self.complete = False
        self.keep_alive = False
        self.decoder: Any = None
        self.head_bytes = 0
        self.header_count = 0
        self.body_bytes = 0
        self.timer: asyncio.TimerHandle | None = None
        self.deadline = 0.0
        self.last_activity = 0.0
        self.read_s = 0.0

    # ---- asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        if self.future is None or self.future.done():
            # Nothing asked, or the answer is complete: a server talking on an idle
            # connection (a 408 before it closes it, say). Its state is unknown; drop it.
            self.close()
            return
        self.got_bytes = True
        self.last_activity = self.loop.time()
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            cause = exc.__context__
            if isinstance(cause, TooLarge):
                self._fail(cause)
            else:
                self._fail(ProtocolError(f"malformed HTTP response: {exc}"))
        except Exception as exc:
            self._fail(exc)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.pool.forget(self)
        if self.future is None or self.future.done():
            return
        if self.headers_done and not self.framed:
            try:
                self.on_message_complete()  # a body delimited by the close
            except TooLarge as error:
                self._fail(error)
        elif self.got_bytes:
            self._fail(TruncatedBody("connection closed in the middle of the response"))
        else:
            reason = f": {exc}" if exc else ""
            self._fail(
                ConnectionLost(f"connection closed before a response{reason}", reused=self.uses > 1)
            )

    # ---- httptools callbacks

    def on_status(self, status: bytes) -> None:
        self._count_head(len(status))

    def _count_head(self, size: int) -> None:
        self.head_bytes += size
        if self.head_bytes > self.pool.client.max_header_bytes:
            limit = self.pool.client.max_header_bytes
            raise TooLarge(f"response status line and headers over {limit} bytes")

    def on_header(self, name: bytes, value: bytes) -> None:
        self._count_head(len(name) + len(value) + 4)
        self.header_count += 1
        if self.header_count > self.pool.client.max_headers:
            raise TooLarge(f"response has over {self.pool.client.max_headers} header fields")
        name = name.lower()
        if name in _KEPT:
            self.headers[name.decode()] = value.decode("latin-1")
        if name == b"transfer-encoding" and b"chunked" in value.lower():
            self.framed = True

    def on_headers_complete(self) -> None:
        self.status = self.parser.get_status_code()
        if 100 <= self.status < 200:  # an interim response (100 Continue): wait for the real one
            self.headers = {}
            self.head_bytes = self.header_count = 0
            return
        self.headers_done = True
        if "content-length" in self.headers or self.status in (204, 304):
            self.framed = True
        encoding = self.headers.get("content-encoding", "identity").lower()
        if encoding in ("gzip", "x-gzip"):
            self.decoder = zlib.decompressobj(16 + zlib.MAX_WBITS)
        elif encoding == "deflate":
            self.decoder = zlib.decompressobj()
        elif encoding != "identity":
            self._fail(ProtocolError(f"unsupported content-encoding {encoding!r}"))
        if self.status >= 300:
            self.on_chunk = None  # an error's body is read whole, not streamed

    def on_body(self, body: bytes) -> None:
        if not self.headers_done:
            return
        limit = self.pool.client.max_body_bytes
        if self.decoder is not None:
            # max_length: a small gzip bomb stops at the limit instead of inflating whole.
            body = self.decoder.decompress(body, limit - self.body_bytes + 1)
            if self.decoder.unconsumed_tail:
                raise TooLarge(f"response body over {limit} bytes once decompressed")
        self.body_bytes += len(body)
        if self.body_bytes > limit:
            raise TooLarge(f"response body over {limit} bytes")
        if self.on_chunk is None:
            self.chunks.append(body)
            return
        try:
            self.on_chunk(body)
        except Exception as exc:  # the consumer's error (a bad event) ends the request
            self._fail(exc)

    def on_message_complete(self) -> None:
        if not self.headers_done:
            return
        if self.decoder is not None:
            tail = self.decoder.flush()
            self.decoder = None
            if tail:
                self.on_body(tail)
        self.complete = True
        # Asked here: after the callback returns the parser has moved on to the next message.
        self.keep_alive = self.parser.should_keep_alive()
        future = self.future
        if future is None or future.done():
            return
        body = b"".join(self.chunks) if self.chunks else b""
        future.set_result(Response(self.status, self.headers, body))

    # ---- the request

    def _fail(self, exc: BaseException) -> None:
        if self.future is not None and not self.future.done():
            self.future.set_exception(exc)
        self.close()

    def _on_timer(self) -> None:
        self.timer = None
        now = self.loop.time()
        if now >= self.deadline:
            self._fail(Timeout("no complete response within the total timeout", phase="total"))
            return
        read_deadline = self.last_activity + self.read_s
        if now >= read_deadline:
            self._fail(Timeout(f"no bytes from the server for {self.read_s:g} s", phase="read"))
            return
        # Re-armed only when it fires: a busy stream costs no timer per chunk.
        self.timer = self.loop.call_at(min(self.deadline, read_deadline), self._on_timer)

    async def request(
        self,
        data: bytes,
        *,
        deadline: float,
        read_s: float,
        on_chunk: Callable[[bytes], None] | None,
    ) -> Response:
        assert self.transport is not None
        self.uses += 1
        self.future = self.loop.create_future()
        self.on_chunk = on_chunk
        self.deadline, self.read_s = deadline, read_s
        self.last_activity = self.loop.time()
        self.timer = self.loop.call_at(min(deadline, self.last_activity + read_s), self._on_timer)
        self.transport.write(data)
        try:
            return await self.future
        finally:
            if self.timer is not None:
                self.timer.cancel()
            reusable = self.complete and self.keep_alive and not self.closed
            self._reset()
            if not reusable:
                self.close()

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            if self.transport is not None:
                self.transport.close()
            self.pool.forget(self)


class _Pool:
    """Connections to one (scheme, host, port): a LIFO of idle ones, a FIFO of waiters."""

    def __init__(self, client: Client, endpoint: Endpoint) -> None:
        self.client = client
        self.loop = asyncio.get_running_loop()
        self.scheme, self.host, self.port = endpoint.scheme, endpoint.host, endpoint.port
        self.idle: list[_Connection] = []
        self.open: set[_Connection] = set()
        self.waiters: collections.deque[asyncio.Future[_Connection | None]] = collections.deque()

    async def acquire(self, deadline: float) -> _Connection:
        now = self.loop.time()
        while self.idle:
            connection = self.idle.pop()
            if connection.closed:
                continue
            if now - connection.idle_since > self.client.keepalive_s:
                connection.close()  # the server may be closing it as we write
                continue
            return connection
        while len(self.open) >= self.client.max_connections:
            waiter: asyncio.Future[_Connection | None] = self.loop.create_future()
            self.waiters.append(waiter)
            try:
                async with asyncio.timeout_at(deadline):
                    handed = await waiter
            except BaseException as exc:
                if not waiter.done():
                    waiter.cancel()
                elif not waiter.cancelled():
                    # Handed a connection (or a turn to open one) but cancelled, or timed
                    # out, before resuming: pass it on, or it is lost to the pool.
                    given = waiter.result()
                    if given is not None:
                        self.release(given)
                    else:
                        self._wake()
                if isinstance(exc, TimeoutError):
                    raise Timeout(
                        "no free connection within the total timeout", phase="total"
                    ) from None
                raise
            if handed is not None:
                return handed
        return await self._connect(deadline)

    async def _connect(self, deadline: float) -> _Connection:
        timeout = min(self.client.connect_s, max(0.0, deadline - self.loop.time()))
        connection = _Connection(self)
        self.open.add(connection)
        try:
            async with asyncio.timeout(timeout):
                await self.loop.create_connection(
                    lambda: connection,
                    self.host,
                    self.port,
                    ssl=self.client.ssl_context() if self.scheme == "https" else None,
                    server_hostname=self.host if self.scheme == "https" else None,
                )
        except TimeoutError:
            self.forget(connection)
            raise Timeout(
                f"could not connect to {self.host}:{self.port} within {timeout:g} s",
                phase="connect",
            ) from None
        except (OSError, ssl_module.SSLError) as exc:
            self.forget(connection)
            raise ConnectError(f"could not connect to {self.host}:{self.port}: {exc}") from exc
        except BaseException:
            self.forget(connection)
            connection.close()
            raise
        return connection

    def release(self, connection: _Connection) -> None:
        if connection.closed:
            return  # `forget` has already let a waiter take its place
        while self.waiters:
            waiter = self.waiters.popleft()
            if not waiter.done():
                waiter.set_result(connection)
                return
        connection.idle_since = self.loop.time()
        self.idle.append(connection)

    def forget(self, connection: _Connection) -> None:
        if connection in self.open:
            self.open.discard(connection)
            self._wake()

    def _wake(self) -> None:
        # A connection went away: a waiter may open a new one in its place.
        while self.waiters:
            waiter = self.waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    def close(self) -> None:
        for connection in list(self.open):
            connection.close()
        self.idle.clear()
        for waiter in self.waiters:
            if not waiter.done():
                waiter.set_exception(ConnectError("the client was closed"))
        self.waiters.clear()


class Client:
    """POSTs over pooled keep-alive HTTP/1.1 connections. Use within one event loop.

    Args:
        headers: sent on every request (Content-Type, auth, ...).
        connect_s, read_s, total_s: the timeouts (seconds; see `request`).
        max_connections: per host and port; further requests wait for a free one.
        keepalive_s: idle connections older than this are not reused.
        ssl_context: for https (default: the system's trusted certificates).
        max_header_bytes, max_headers: bounds on a response's status line and headers.
        max_body_bytes: bound on a response body after decompression (`TooLarge`).
    """

    def __init__(
        self,
        *,
        headers: dict[str, str],
        connect_s: float,
        read_s: float,
        total_s: float,
        max_connections: int,
        keepalive_s: float,
        ssl_context: ssl_module.SSLContext | None = None,
        max_header_bytes: int = MAX_HEADER_BYTES,
        max_headers: int = MAX_HEADERS,
        max_body_bytes: int = MAX_BODY_BYTES,
    ) -> None:
        check_headers(headers)
        self.headers = dict(headers)
        self.max_header_bytes, self.max_headers = max_header_bytes, max_headers
        self.max_body_bytes = max_body_bytes
        self.connect_s, self.read_s, self.total_s = connect_s, read_s, total_s
        self.max_connections = max_connections
        self.keepalive_s = keepalive_s
        self._ssl = ssl_context
        self._pools: dict[tuple[str, str, int], _Pool] = {}
        self._endpoints: dict[str, Endpoint] = {}
        self.closed = False

    def ssl_context(self) -> ssl_module.SSLContext:
        if self._ssl is None:
            self._ssl = ssl_module.create_default_context()
        return self._ssl

    def endpoint(self, url: str) -> Endpoint:
        """`url` parsed (cached: a handful of endpoints serve millions of calls)."""
        endpoint = self._endpoints.get(url)
        if endpoint is None:
            endpoint = Endpoint.parse(url, self.headers)
            if len(self._endpoints) < 1024:
                self._endpoints[url] = endpoint
        return endpoint

    async def post(
        self, url: str, body: bytes, *, on_chunk: Callable[[bytes], None] | None = None
    ) -> Response:
        """POST `body`; the whole response (with `on_chunk`: a 2xx body goes to it instead).

        The total timeout bounds everything (waiting for a connection, connecting,
        the whole reply); the connect timeout the TCP/TLS handshake; the read timeout
        each wait for the server's next bytes. A connection that was reused and closed
        before answering (the server dropped it while idle) is retried once at once.
        """
        if self.closed:
            raise ConnectError("the client was closed")
        endpoint = self.endpoint(url)
        key = (endpoint.scheme, endpoint.host, endpoint.port)
        pool = self._pools.get(key)
        if pool is None:
            pool = self._pools[key] = _Pool(self, endpoint)
        data = endpoint.head + b"%d\r\n\r\n" % len(body) + body
        deadline = pool.loop.time() + self.total_s
        retried = False
        while True:
            connection = await pool.acquire(deadline)
            try:
                return await connection.request(
                    data, deadline=deadline, read_s=self.read_s, on_chunk=on_chunk
                )
            except ConnectionLost as exc:
                if retried or not exc.reused:
                    raise
                retried = True
            finally:
                pool.release(connection)

    async def aclose(self) -> None:
        """Close every connection; later calls raise `ConnectError`."""
        self.closed = True
        for pool in self._pools.values():
            pool.close()
        self._pools.clear()
        await asyncio.sleep(0)  # let the transports run their close callbacks
