"""What the HTTP adapters (OpenAI-compatible, Anthropic) share: transports, timeouts, errors.

An `HTTPAdapter` builds a JSON body with its wire module (`nemo_gym.wire`), sends it
through a transport and parses the reply with the same module. Two transports:

- `FastTransport` ("fast"): our lean HTTP/1.1 client (`nemo_gym.models.h1`: asyncio,
  the httptools parser, a bounded keep-alive pool) and orjson, one client per event
  loop. Its CPU per call is a fraction of aiohttp's and httpx2's, and it keeps so few
  objects alive per call that its cost barely grows with the number of calls in flight
  (docs/models-http.md has the figures that chose it).
- `SDKTransport` ("sdk"): the vendor SDK's client (`openai.AsyncOpenAI`,
  `anthropic.AsyncAnthropic`, or one the caller passes: Azure, Bedrock, Vertex, ...),
  called through its generic `post`, so its authentication, headers and endpoint quirks
  apply while the body and the reply are still ours.

Both raise the same `ModelError`s: 429 `rate_limited`, 5xx `server_error`, 400
`bad_request`, other 4xx `http_<status>` (408/409/429/5xx retryable, with `Retry-After`
read into `retry_after_s`), `timeout`, `connection_error`, and `bad_response`
(retryable) for a body that is not valid JSON, is cut short, or is not the expected
shape.

Connection pools and SDK clients are made lazily inside the running event loop, one per loop,
and closed when that loop shuts down (`asyncio.run` closes them through an async
generator's finalizer), or by `aclose()`; an adapter stays usable after `aclose()`.
An SDK client the caller passed in (`client=`) is never closed by the adapter.
"""

from __future__ import annotations

import asyncio
import dataclasses
import difflib
import logging
import math
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import Any, ClassVar, Generic, Literal, Protocol, TypedDict, TypeVar

from nemo_gym.errors import ConfigError, ModelError, require
from nemo_gym.models.base import ModelAdapter, RetryPolicy
from nemo_gym.records import ModelRequest, ModelResponse, Sampling, replace
from nemo_gym.registry import Spec
from nemo_gym.urls import basic_auth, split_credentials, without_credentials
from nemo_gym.wire.common import SSEDecoder, WireError, dumps, error_message, loads, retry_after_s

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S = 600.0
"""Per-request total timeout: long, because a reasoning model's reply can take minutes."""

KEEPALIVE_S = 4.0
"""Idle keep-alive connections are dropped after this: under uvicorn's 5 s (vLLM, SGLang),
so a request is not written to a connection the server is closing."""

TransportName = Literal["fast", "sdk"]


@dataclass(frozen=True, slots=True)
class Timeouts:
    """Per-request timeouts in seconds. None of them can be turned off.

    `total` bounds the whole call (connecting, sending, the whole reply); `connect` the
    TCP/TLS connect; `read` the wait for the next bytes of the reply (None: `total`).
    A streamed reply may take longer than `read` in all, as long as bytes keep coming.
    """

    total: float = DEFAULT_TIMEOUT_S
    connect: float = 30.0
    read: float | None = None

    def __post_init__(self) -> None:
        for name in ("total", "connect", "read"):
            value = getattr(self, name)
            if name == "read" and value is None:
                continue
            if not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
                raise ConfigError(f"Timeouts.{name} must be a positive number, got {value!r}")

    @property
    def read_s(self) -> float:
        return self.read if self.read is not None else self.total


def as_timeouts(value: float | Timeouts | Mapping[str, Any] | None) -> Timeouts:
    """`timeout=` as `Timeouts`: a number is the total, a mapping the fields (how a spec
    stores them); None is refused (never unbounded)."""
    if isinstance(value, Timeouts):
        return value
    if isinstance(value, Mapping):  # how a spec stores them
        return Timeouts(**value)
    if value is None:
        raise ConfigError(
            "timeout=None would wait forever on a stuck server; pass a total in seconds "
            "(e.g. timeout=3600) or Timeouts(total=..., connect=..., read=...)"
        )
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"timeout must be seconds or Timeouts, got {value!r}")
    return Timeouts(total=float(value))


class HTTPKwargs(TypedDict, total=False):
    """`HTTPOptions`' fields as keyword arguments of an adapter (`**options`)."""

    transport: TransportName | None
    timeout: float | Timeouts
    max_connections: int | None
    stream: bool
    max_concurrency: int | None
    retry: RetryPolicy | None
    default_sampling: Sampling | None
    extra_body: Mapping[str, Any] | None
    max_response_bytes: int | None


@dataclass(frozen=True, slots=True)
class HTTPOptions:
    """How an HTTP adapter talks to its server: the options every HTTP adapter shares.

    Pass one as `http=` (to share it between adapters), or its fields as keywords of
    the adapter (`OpenAIChat(..., stream=True)`); keywords override `http=`'s fields.

    Args:
        transport: "fast" (our HTTP/1.1 client), "sdk" (the vendor SDK) or None: fast
            for a loopback or private-network base URL with no proxy, else sdk.
        timeout: seconds for the whole call, or `Timeouts(total=, connect=, read=)`.
        max_connections: the fast transport's pool bound per host (None: 4,096, or
            half the open-file limit where lower).
        stream: receive replies as server-sent events (the same `ModelResponse`).
        max_concurrency: at most this many requests in flight (None: no cap).
        retry: backoff for retryable errors (None: `RetryPolicy()`).
        default_sampling: sampling used where a request leaves a field unset.
        extra_body: extra JSON fields sent on every request (e.g. `{"top_k": 20}`).
        max_response_bytes: the fast transport's bound on a reply after
            decompression (None: `h1.MAX_BODY_BYTES`, 256 MiB).
    """

    transport: TransportName | None = None
    timeout: float | Timeouts = DEFAULT_TIMEOUT_S
    max_connections: int | None = None
    stream: bool = False
    max_concurrency: int | None = None
    retry: RetryPolicy | None = None
    default_sampling: Sampling | None = None
    extra_body: Mapping[str, Any] | None = None
    max_response_bytes: int | None = None

    def __post_init__(self) -> None:
        set_ = object.__setattr__  # frozen: normalise once, here
        set_(self, "timeout", as_timeouts(self.timeout))
        if isinstance(self.retry, Mapping):  # as a spec stores it
            set_(self, "retry", RetryPolicy(**self.retry))
        if isinstance(self.default_sampling, Mapping):
            set_(self, "default_sampling", Sampling.model_validate(self.default_sampling))
        if self.transport not in (None, "fast", "sdk"):
            raise ConfigError(
                f"transport must be 'fast', 'sdk' or None (auto), got {self.transport!r}"
            )
        for name in ("max_concurrency", "max_connections", "max_response_bytes"):
            value = getattr(self, name)
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or value < 1
            ):
                raise ConfigError(f"{name} must be >= 1 or None, got {value!r}")

    @classmethod
    def of(
        cls, http: HTTPOptions | Mapping[str, Any] | None, options: Mapping[str, Any]
    ) -> HTTPOptions:
        """`http` (an `HTTPOptions`, or its fields as a spec stores them) with `options`
        (an adapter's keywords) over it; an unknown keyword is a `ConfigError`."""
        fields = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(options) - fields)
        if unknown:
            hints = []
            for name in unknown:
                close = difflib.get_close_matches(name, fields, n=1)
                hints.append(f"{name!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
            raise ConfigError(f"unknown HTTP option(s): {', '.join(hints)}")
        if http is None:
            return cls(**options) if options else _DEFAULT_HTTP
        if isinstance(http, Mapping):
            http = cls(**{k: v for k, v in http.items() if k in fields})
        return dataclasses.replace(http, **options) if options else http


_DEFAULT_HTTP = HTTPOptions()


def default_max_connections() -> int:
    """4,096, or half the process's open-file limit where that is lower (one fd each)."""
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (ImportError, OSError, ValueError):  # pragma: no cover - no such limit here
        return 4096
    if soft == resource.RLIM_INFINITY:
        return 4096
    return max(16, min(4096, soft // 2))


def status_error(status: int, message: str, *, retry_after: float | None = None) -> ModelError:
    """The `ModelError` for an HTTP error status (see the module docstring for the codes)."""
    retryable = status in (408, 409, 429) or status >= 500
    if status == 429:
        code = "rate_limited"
    elif status >= 500:
        code = "server_error"
    else:
        code = "bad_request" if status == 400 else f"http_{status}"
    return ModelError(
        f"HTTP {status}: {message}",
        retryable=retryable,
        status_code=status,
        code=code,
        retry_after_s=retry_after if retryable else None,
    )


def header_retry_after(headers: Any) -> float | None:
    """`retry-after-ms` (OpenAI's) or `Retry-After` (seconds or an HTTP date), in seconds."""
    if headers is None:
        return None
    millis = headers.get("retry-after-ms")
    if millis is not None:
        value = retry_after_s(millis)
        if value is not None:
            return value / 1000.0
    return retry_after_s(headers.get("retry-after"))


def _error_text(data: bytes) -> str:
    try:
        message = error_message(loads(data)) if data else None
    except WireError:
        message = None
    if message is None:
        text = data[:500].decode("utf-8", errors="replace").strip()
        message = text or "no detail"
    return message


def bad_response(detail: str, where: str) -> ModelError:
    return ModelError(f"bad response from {where}: {detail}", retryable=True, code="bad_response")


# --------------------------------------------------------------------------- one per loop

T = TypeVar("T")


class LoopLocal(Generic[T]):
    """One resource per running event loop, closed when that loop shuts down.

    `get()` makes the resource on first use in a loop and parks an async generator in
    that loop whose `finally` closes it: `asyncio.run` (and any loop that runs
    `shutdown_asyncgens`) closes those generators before the loop closes, so nothing is
    left for "Event loop is closed" at exit. `aclose()` closes the current loop's one now.
    """

    def __init__(self, factory: Callable[[], T], closer: Callable[[T], Awaitable[None]]) -> None:
        self._factory = factory
        self._closer = closer
        self._loop: asyncio.AbstractEventLoop | None = None
        self._value: T | None = None
        self._others: dict[asyncio.AbstractEventLoop, tuple[T, AsyncIterator[None]]] = {}
        self._keeper: AsyncIterator[None] | None = None

    @property
    def current(self) -> T | None:
        """The resource of the running loop, if one was made (no loop: None)."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return None
        if loop is self._loop:
            return self._value
        entry = self._others.get(loop)
        return entry[0] if entry else None

    async def get(self) -> T:
        loop = asyncio.get_running_loop()
        if loop is self._loop:
            return self._value  # type: ignore[return-value]
        entry = self._others.get(loop)
        if entry is not None:
            return entry[0]
        value = self._factory()
        keeper = self._keep(loop, value)
        await keeper.__anext__()
        if self._loop is None or self._loop.is_closed():
            self._loop, self._value, self._keeper = loop, value, keeper
        else:  # another loop is alive (another thread): keep both
            self._others[loop] = (value, keeper)
        return value

    async def _keep(self, loop: asyncio.AbstractEventLoop, value: T) -> AsyncIterator[None]:
        try:
            yield
        finally:
            self._forget(loop)
            await self._closer(value)

    def _forget(self, loop: asyncio.AbstractEventLoop) -> tuple[T, AsyncIterator[None]] | None:
        if loop is self._loop:
            entry = (self._value, self._keeper)
            self._loop = self._value = self._keeper = None
            return entry  # type: ignore[return-value]
        return self._others.pop(loop, None)

    async def aclose(self) -> None:
        """Close the running loop's resource (idempotent); a later `get()` makes a new one."""
        entry = self._forget(asyncio.get_running_loop())
        if entry is not None:
            await entry[1].aclose()  # type: ignore[attr-defined]


# --------------------------------------------------------------------------- transports


Feed = Callable[[str | None, str], bool]
"""Called with each SSE event (name, data) of a streamed reply; True: the reply is complete."""


class Transport(Protocol):
    """Sends one JSON request; the reply as decoded JSON, or its SSE events to `feed`."""

    name: TransportName

    async def post_json(self, base_url: str | None, path: str, body: dict[str, Any]) -> Any: ...

    async def post_stream(
        self, base_url: str | None, path: str, body: dict[str, Any], feed: Feed
    ) -> None: ...

    async def aclose(self) -> None: ...

    def describe(self) -> str: ...


class FastTransport:
    """Our HTTP/1.1 client (`nemo_gym.models.h1`) + orjson: keep-alive, a bounded pool.

    One `h1.Client` per event loop. Requests go straight to the server: HTTP(S)_PROXY
    is not used (an adapter left to choose its transport takes the SDK's where a proxy
    applies; see `proxy_for`).
    """

    name: TransportName = "fast"

    def __init__(
        self,
        *,
        base_url: str,
        headers: dict[str, str],
        timeouts: Timeouts,
        max_connections: int | None = None,
        max_response_bytes: int | None = None,
    ) -> None:
        require("httptools", "http")
        from nemo_gym.models import h1

        self._h1 = h1
        self.base_url = base_url.rstrip("/")
        self.headers = {
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            "User-Agent": "nemo-gym",
            **headers,
        }
        try:
            h1.check_headers(self.headers)
        except ValueError as exc:
            raise ConfigError(f"headers: {exc}") from None
        self.timeouts = timeouts
        self.max_connections = max_connections or default_max_connections()
        self.max_response_bytes = max_response_bytes or h1.MAX_BODY_BYTES
        self._clients: LoopLocal[Any] = LoopLocal(self._new_client, self._close_client)
        self._urls: dict[tuple[str | None, str], str] = {}

    def _new_client(self) -> Any:
        return self._h1.Client(
            headers=self.headers,
            connect_s=self.timeouts.connect,
            read_s=self.timeouts.read_s,
            total_s=self.timeouts.total,
            max_connections=self.max_connections,
            keepalive_s=KEEPALIVE_S,
            max_body_bytes=self.max_response_bytes,
        )

    @staticmethod
    async def _close_client(client: Any) -> None:
        await client.aclose()

    def _url(self, base_url: str | None, path: str) -> str:
        key = (base_url, path)
        url = self._urls.get(key)
        if url is None:
            url = (base_url or self.base_url).rstrip("/") + path
            if len(self._urls) < 1024:
                self._urls[key] = url
        return url

    async def _post(self, url: str, body: dict[str, Any], on_chunk: Any = None) -> Any:
        client = await self._clients.get()
        try:
            reply = await client.post(url, dumps(body), on_chunk=on_chunk)
        except (self._h1.H1Error, OSError) as exc:
            raise self._error(exc, url) from exc
        except ValueError as exc:  # a URL that cannot be sent (a per-request base_url)
            if isinstance(exc, WireError):
                raise
            raise ModelError(
                f"cannot send to {url}: {exc}", retryable=False, code="bad_request"
            ) from None
        if reply.status >= 400:
            raise status_error(
                reply.status,
                _error_text(reply.body),
                retry_after=header_retry_after(reply.headers),
            )
        return reply

    async def post_json(self, base_url: str | None, path: str, body: dict[str, Any]) -> Any:
        url = self._url(base_url, path)
        reply = await self._post(url, body)
        try:
            return loads(reply.body)
        except WireError as exc:
            raise bad_response(str(exc), url) from None

    async def post_stream(
        self, base_url: str | None, path: str, body: dict[str, Any], feed: Feed
    ) -> None:
        url = self._url(base_url, path)
        decoder = SSEDecoder()

        def on_chunk(chunk: bytes) -> None:
            for event, data in decoder.feed(chunk):
                feed(event, data)

        await self._post(url, body, on_chunk)
        for event, data in decoder.close():
            feed(event, data)

    def _error(self, exc: BaseException, url: str) -> BaseException:
        h1 = self._h1
        if isinstance(exc, h1.TooLarge):  # asking again would get the same reply
            return ModelError(f"response from {url}: {exc}", retryable=False, code="too_large")
        if isinstance(exc, h1.Timeout):
            return ModelError(f"request to {url} timed out: {exc}", retryable=True, code="timeout")
        if isinstance(exc, h1.TruncatedBody | h1.ProtocolError):
            return bad_response(str(exc), url)
        if isinstance(exc, WireError):
            return exc
        return ModelError(
            f"connection error to {url}: {exc}", retryable=True, code="connection_error"
        )

    async def aclose(self) -> None:
        await self._clients.aclose()

    def describe(self) -> str:
        return self.base_url


_PRIVATE_SUFFIXES = (".local", ".internal", ".localdomain", ".lan", ".home.arpa", ".svc")


def is_private_url(url: str) -> bool:
    """Whether `url`'s host is loopback or on a private network, judged without DNS.

    True for loopback, private (RFC 1918, unique-local IPv6) and link-local addresses,
    `localhost`, single-label names (`vllm`, a cluster service) and names under
    `.local`, `.internal`, `.localdomain`, `.lan`, `.home.arpa` or `.svc`. Anything
    else is public: the adapters send to it through the vendor SDK unless told
    `transport="fast"`.
    """
    import ipaddress
    from urllib.parse import urlsplit

    try:
        host = (urlsplit(url).hostname or "").rstrip(".").lower()
    except ValueError:
        return False
    if not host:
        return False
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return host == "localhost" or "." not in host or host.endswith(_PRIVATE_SUFFIXES)
    return address.is_loopback or address.is_private or address.is_link_local


def proxy_for(url: str) -> str | None:
    """The proxy HTTP(S)_PROXY / NO_PROXY give for `url` (as httpx reads them), or None."""
    import urllib.request
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    proxies = urllib.request.getproxies()
    proxy = proxies.get(parts.scheme) or proxies.get("all")
    if not proxy or not parts.hostname:
        return None
    if urllib.request.proxy_bypass(parts.hostname if parts.port is None else parts.netloc):
        return None
    return proxy


# The SDKs (Stainless-generated, openai and anthropic alike) hand back the unread
# response for this header, as their `with_streaming_response` does; we read it.
_RAW_STREAM = {"X-Stainless-Raw-Response": "stream"}


class SDKTransport:
    """The vendor SDK's client through its generic `post`: one per loop, or the caller's."""

    name: TransportName = "sdk"

    def __init__(
        self,
        *,
        sdk: ModuleType,
        timeouts: Timeouts,
        make_client: Callable[[], Any] | None = None,
        client: Any = None,
        base_url: str | None = None,
    ) -> None:
        if (make_client is None) == (client is None):
            raise ValueError("SDKTransport needs exactly one of make_client and client")
        self.sdk = sdk
        self._httpx = require("httpx2", sdk.__name__)
        self.timeouts = timeouts
        self._http_timeout = self._httpx.Timeout(timeouts.read_s, connect=timeouts.connect)
        self._given = client
        self._base_url = base_url
        self._clients: LoopLocal[Any] | None = (
            LoopLocal(make_client, self._close_client) if make_client is not None else None
        )

    @staticmethod
    async def _close_client(client: Any) -> None:
        await client.close()

    @property
    def client(self) -> Any:
        """The caller's client, or this loop's (None before the first call in this loop)."""
        if self._given is not None:
            return self._given
        return self._clients.current if self._clients is not None else None

    async def _client(self) -> Any:
        if self._given is not None:
            return self._given
        return await self._clients.get()  # type: ignore[union-attr]

    async def _open(self, base_url: str | None, path: str, body: dict[str, Any]) -> Any:
        client = await self._client()
        # An absolute URL is sent as is; a path is joined to the client's base URL (and
        # rewritten by clients that need it, e.g. Bedrock's).
        url = base_url.rstrip("/") + path if base_url else path
        try:
            return await client.post(
                url,
                body=body,
                cast_to=self._httpx.Response,
                options={"timeout": self._http_timeout, "headers": dict(_RAW_STREAM)},
            )
        except Exception as exc:
            raise self._error(exc, url) from exc

    async def post_json(self, base_url: str | None, path: str, body: dict[str, Any]) -> Any:
        try:
            async with asyncio.timeout(self.timeouts.total):
                response = await self._open(base_url, path, body)
                try:
                    data = await response.aread()
                except Exception as exc:
                    raise self._error(exc, str(response.request.url)) from exc
                finally:
                    await response.aclose()
        except TimeoutError:
            raise self._total_timeout(base_url, path) from None
        try:
            return loads(data)
        except WireError as exc:
            raise bad_response(str(exc), str(response.request.url)) from None

    async def post_stream(
        self, base_url: str | None, path: str, body: dict[str, Any], feed: Feed
    ) -> None:
        try:
            async with asyncio.timeout(self.timeouts.total):
                response = await self._open(base_url, path, body)
                try:
                    decoder = SSEDecoder()
                    async for chunk in response.aiter_bytes():
                        for event, data in decoder.feed(chunk):
                            if feed(event, data):
                                return
                    for event, data in decoder.close():
                        if feed(event, data):
                            return
                except WireError:
                    raise
                except Exception as exc:
                    raise self._error(exc, str(response.request.url)) from exc
                finally:
                    await response.aclose()
        except TimeoutError:
            raise self._total_timeout(base_url, path) from None

    def _total_timeout(self, base_url: str | None, path: str) -> ModelError:
        where = (base_url.rstrip("/") if base_url else self.describe().rstrip("/")) + path
        return ModelError(
            f"request to {where} timed out (total {self.timeouts.total:g} s)",
            retryable=True,
            code="timeout",
        )

    def _error(self, exc: BaseException, url: str) -> BaseException:
        sdk, httpx = self.sdk, self._httpx
        if isinstance(exc, sdk.APIStatusError):
            message = getattr(exc, "message", None) or str(exc)
            return status_error(
                int(exc.status_code),
                f"{type(exc).__name__}: {message}",
                retry_after=header_retry_after(getattr(exc.response, "headers", None)),
            )
        if isinstance(exc, sdk.APITimeoutError | httpx.TimeoutException | TimeoutError):
            return ModelError(f"request to {url} timed out: {exc}", retryable=True, code="timeout")
        if isinstance(exc, httpx.RemoteProtocolError | httpx.DecodingError):
            return bad_response(f"body cut short or malformed ({exc})", url)
        if isinstance(exc, sdk.APIConnectionError | httpx.TransportError):
            return ModelError(
                f"connection error to {url}: {exc}", retryable=True, code="connection_error"
            )
        if isinstance(exc, sdk.APIError):
            return bad_response(f"{type(exc).__name__}: {exc}", url)
        return exc

    async def aclose(self) -> None:
        if self._clients is not None:
            await self._clients.aclose()

    def describe(self) -> str:
        if self._given is not None:
            return without_credentials(str(self._given.base_url))
        return self._base_url or "(the SDK's default)"


# --------------------------------------------------------------------------- the adapter base


class StreamParser(Protocol):
    done: bool

    def feed_event(self, event: str | None, data: str) -> None: ...

    def response(self) -> ModelResponse: ...


def is_sdk_client(client: Any, sdk_name: str) -> bool:
    """True when `client` comes from the `sdk_name` package (openai, anthropic)."""
    return type(client).__module__.split(".")[0] == sdk_name


class HTTPAdapter(ModelAdapter):
    """Base of the HTTP adapters: model name, transport, body building and reply parsing.

    Subclasses set `sdk_name`, `path`, `env_base_url`, `default_base_url`; implement
    `build(request) -> (body, sampling sent)`, `parse(body)`, `stream_parser()`,
    `auth_headers(api_key)` and `make_sdk_client(...)`.
    """

    # Never recorded in a run's model spec: credentials, and a live client object.
    spec_exclude: ClassVar[frozenset[str]] = frozenset({"api_key", "headers", "client"})
    sdk_name: ClassVar[str]
    path: ClassVar[str]
    env_base_url: ClassVar[str]
    env_api_key: ClassVar[str]
    default_base_url: ClassVar[str]

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None,
        api_key: str | None,
        client: Any,
        headers: dict[str, str] | None,
        http: HTTPOptions,
    ) -> None:
        if not isinstance(model, str) or not model:
            raise ConfigError(f"model must be a non-empty string, got {model!r}")
        super().__init__(
            max_concurrency=http.max_concurrency,
            retry=http.retry,
            default_sampling=http.default_sampling,
        )
        self.http = http
        self.model = model
        self.extra_body = dict(http.extra_body or {})
        self.stream = http.stream
        self.timeouts = as_timeouts(http.timeout)
        transport = http.transport
        max_connections = http.max_connections
        name = type(self).__name__
        if client is not None:
            if not is_sdk_client(client, self.sdk_name):
                raise ConfigError(
                    f"{name}: client= must be a {self.sdk_name} SDK client, "
                    f"got {type(client).__name__}"
                )
            if base_url is not None or api_key is not None:
                raise ConfigError(f"{name}: pass either client= or base_url=/api_key=, not both")
            if transport == "fast":
                raise ConfigError(
                    f"{name}(transport='fast'): client= is an SDK client, which only the "
                    "'sdk' transport uses; pass base_url= instead"
                )
            transport = "sdk"
        resolved_url = base_url or os.environ.get(self.env_base_url) or None
        if resolved_url is not None:
            # user:password in the URL is sent as basic auth, never recorded or shown.
            resolved_url, user, password = split_credentials(resolved_url)
            extra_headers = {**basic_auth(user, password), **(headers or {})}
        else:
            extra_headers = dict(headers or {})
        base_url = resolved_url
        if transport is None:
            # The fast path for a server of one's own (loopback, a private network); the
            # SDK for anything public (the vendor's API, a hosted endpoint), and where a
            # proxy applies (the fast transport connects directly).
            fast = (
                resolved_url is not None
                and is_private_url(resolved_url)
                and proxy_for(resolved_url) is None
            )
            transport = "fast" if fast else "sdk"
        key = api_key or os.environ.get(self.env_api_key) or None
        self._transport: Transport
        if transport == "sdk":
            sdk = require(self.sdk_name, self.sdk_name)
            if client is not None:
                self._transport = SDKTransport(sdk=sdk, timeouts=self.timeouts, client=client)
            else:
                key = self.check_key(key, resolved_url, "sdk")

                def make() -> Any:
                    return self.make_sdk_client(sdk, base_url, key, extra_headers)

                self._transport = SDKTransport(
                    sdk=sdk,
                    timeouts=self.timeouts,
                    make_client=make,
                    base_url=resolved_url or self.default_base_url,
                )
        else:
            key = self.check_key(key, resolved_url, "fast")
            target = resolved_url or self.default_base_url
            if proxy_for(target) is not None:
                log.warning(
                    "%s: a proxy is configured for %s, but the fast transport connects "
                    "directly; use transport='sdk' to go through the proxy",
                    name,
                    target,
                )
            self._transport = FastTransport(
                base_url=resolved_url or self.default_base_url,
                headers={**self.auth_headers(key), **extra_headers},
                timeouts=self.timeouts,
                max_connections=max_connections,
                max_response_bytes=http.max_response_bytes,
            )

    # ---- per-vendor hooks

    def check_key(
        self, key: str | None, base_url: str | None, transport: TransportName
    ) -> str | None:
        """The API key to send (None: send none); `ConfigError` where the endpoint needs one."""
        return key

    def auth_headers(self, key: str | None) -> dict[str, str]:
        raise NotImplementedError

    def make_sdk_client(
        self, sdk: ModuleType, base_url: str | None, key: str | None, headers: dict[str, str]
    ) -> Any:
        raise NotImplementedError

    def build(self, request: ModelRequest) -> tuple[dict[str, Any], Sampling]:
        raise NotImplementedError

    def parse(self, body: Any) -> ModelResponse:
        raise NotImplementedError

    def stream_parser(self) -> StreamParser:
        raise NotImplementedError

    # ---- the call

    @property
    def transport(self) -> TransportName:
        """Which transport this adapter sends through: "fast" (`h1`) or "sdk"."""
        return self._transport.name

    @property
    def client(self) -> Any:
        """The SDK client in use (sdk transport; None before the first call), else None."""
        return getattr(self._transport, "client", None)

    async def _generate(self, request: ModelRequest) -> ModelResponse:
        if request.base_url is not None and "@" in request.base_url:
            bare, user, password = split_credentials(request.base_url)
            if user is not None or password is not None:
                # They would be recorded with the request; the adapter's base_url is
                # where credentials go (sent as basic auth, recorded nowhere).
                raise ModelError(
                    f"request.base_url {bare} carries credentials; give them in the "
                    "adapter's base_url instead",
                    retryable=False,
                    code="bad_request",
                )
        body, sent = self.build(request)
        try:
            if self.stream:
                parser = self.stream_parser()

                def feed(event: str | None, data: str) -> bool:
                    parser.feed_event(event, data)
                    return parser.done

                await self._transport.post_stream(request.base_url, self.path, body, feed)
                response = parser.response()
            else:
                response = self.parse(
                    await self._transport.post_json(request.base_url, self.path, body)
                )
        except WireError as exc:
            where = (request.base_url or self._transport.describe()).rstrip("/") + self.path
            raise bad_response(str(exc), where) from None
        return replace(response, sampling=sent)

    async def aclose(self) -> None:
        """Close the connections this adapter opened in this loop (never a client passed in).

        Idempotent; the adapter stays usable (a later call opens new connections).
        """
        await self._transport.aclose()

    async def __aenter__(self) -> HTTPAdapter:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def to_spec(self) -> Spec:
        """The adapter's spec; `base_url` is the endpoint it calls, also when it came
        from `client=` or the environment (never a key, headers, or the URL's
        `user:password`)."""
        spec = super().to_spec()
        if spec.options.get("base_url") is not None:
            return spec  # recorded without credentials (`nemo_gym.urls`)
        options = {**spec.options, "base_url": self._transport.describe()}
        return spec.model_copy(update={"options": options})

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(model={self.model!r}, "
            f"base_url={self._transport.describe()!r}, transport={self.transport!r})"
        )
