"""What the SDK-backed HTTP adapters (OpenAI-compatible, Anthropic) share.

`HTTPAdapter` holds the model name, the client cache (one client per base URL), the
sampling defaults and the mapping of SDK exceptions to `ModelError`; subclasses build
the request and parse the reply.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

from nemo_gym.errors import ConfigError, ModelError
from nemo_gym.models.base import ModelAdapter, RetryPolicy
from nemo_gym.records import ModelRequest, Sampling

DEFAULT_TIMEOUT_S = 600.0
"""Per-request HTTP timeout: long, because a reasoning model's reply can take minutes."""


def sdk_error_to_model_error(exc: BaseException, sdk: ModuleType) -> ModelError | None:
    """Map an `openai` / `anthropic` SDK exception to `ModelError`; None if it is not one.

    Rate limits (429), request timeouts (408), conflicts (409), 5xx, connection errors
    and timeouts are retryable; every other status (400, 401, 403, 404, 422, ...) is not.
    Both SDKs share these class names, so this serves both.
    """
    if isinstance(exc, sdk.APIStatusError):
        status = int(exc.status_code)
        retryable = status in (408, 409, 429) or status >= 500
        if status == 429:
            code = "rate_limited"
        elif status >= 500:
            code = "server_error"
        else:
            code = "bad_request" if status == 400 else f"http_{status}"
        message = getattr(exc, "message", None) or str(exc)
        return ModelError(
            f"{type(exc).__name__} (HTTP {status}): {message}",
            retryable=retryable,
            status_code=status,
            code=code,
        )
    if isinstance(exc, sdk.APITimeoutError):
        return ModelError(f"request timed out: {exc}", retryable=True, code="timeout")
    if isinstance(exc, sdk.APIConnectionError):
        return ModelError(f"connection error: {exc}", retryable=True, code="connection_error")
    if isinstance(exc, sdk.APIError):
        # A reply the SDK could not understand: retrying would get the same.
        return ModelError(f"{type(exc).__name__}: {exc}", retryable=False, code="bad_response")
    return None


class ClientCache:
    """One SDK client per base URL: the adapter's own, plus copies for per-request URLs.

    Copies come from `client.with_options(base_url=...)`, so they share the original's
    connection pool and settings (a caller's own `client=` included).
    """

    def __init__(self, client: Any, *, owned: bool) -> None:
        self.client = client
        self._owned = owned
        self._by_url: dict[str, Any] = {}

    def get(self, base_url: str | None) -> Any:
        """The client for `base_url` (None: the adapter's own)."""
        if base_url is None:
            return self.client
        url = base_url.rstrip("/")
        if url == str(self.client.base_url).rstrip("/"):
            return self.client
        client = self._by_url.get(url)
        if client is None:
            client = self.client.with_options(base_url=url)
            self._by_url[url] = client
        return client

    async def aclose(self) -> None:
        """Close the connection pool, unless the caller passed the client in."""
        self._by_url.clear()
        if self._owned:
            await self.client.close()


class HTTPAdapter(ModelAdapter):
    """What the HTTP adapters share: the model name, client cache, defaults, error mapping."""

    _sdk: ModuleType

    def __init__(
        self,
        model: str,
        *,
        max_concurrency: int | None,
        retry: RetryPolicy | None,
        default_sampling: Sampling | None,
        extra_body: dict[str, Any] | None,
    ) -> None:
        if not isinstance(model, str) or not model:
            raise ConfigError(f"model must be a non-empty string, got {model!r}")
        if max_concurrency is not None and max_concurrency < 1:
            raise ConfigError(f"max_concurrency must be >= 1 or None, got {max_concurrency}")
        super().__init__(max_concurrency=max_concurrency, retry=retry)
        self.model = model
        self.default_sampling = default_sampling or Sampling()
        self.extra_body = dict(extra_body or {})
        self._clients: ClientCache

    @property
    def client(self) -> Any:
        """The SDK client this adapter calls (for its own base URL)."""
        return self._clients.client

    async def aclose(self) -> None:
        """Close the HTTP connections this adapter opened (not a client passed in)."""
        await self._clients.aclose()

    async def __aenter__(self) -> HTTPAdapter:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def _sampling(self, request: ModelRequest) -> Sampling:
        return request.sampling.merged_over(self.default_sampling)

    def _extra_body(self, sampling: Sampling) -> dict[str, Any]:
        return {**self.extra_body, **sampling.extra}

    async def _call(self, fn: Callable[..., Any], **kwargs: Any) -> Any:
        """Await an SDK call, turning SDK exceptions into `ModelError`."""
        try:
            return await fn(**kwargs)
        except Exception as exc:
            error = sdk_error_to_model_error(exc, self._sdk)
            if error is None:
                raise
            raise error from exc

    def __repr__(self) -> str:
        base_url = str(self.client.base_url)
        return f"{type(self).__name__}(model={self.model!r}, base_url={base_url!r})"
