"""Anthropic Messages API adapter (`POST /v1/messages`).

The wire format (system prompt, tool_use / tool_result blocks, what is dropped) is
`nemo_gym.wire.anthropic`; the transports are those of `nemo_gym.models.http`. None
(the default transport) picks "fast" when a base URL is known (`base_url=` or
ANTHROPIC_BASE_URL) and no HTTP(S)_PROXY applies to it, and "sdk" (the `anthropic` SDK)
otherwise: api.anthropic.com, a proxy, or an SDK client passed as `client=` (Bedrock,
Vertex, ...).
"""

from __future__ import annotations

import os
from types import ModuleType
from typing import TYPE_CHECKING, Any

from nemo_gym.errors import ConfigError
from nemo_gym.models.http import (
    HTTPAdapter,
    HTTPKwargs,
    HTTPOptions,
    StreamParser,
    TransportName,
)
from nemo_gym.records import ModelRequest, ModelResponse, Sampling
from nemo_gym.wire import anthropic as wire
from nemo_gym.wire.anthropic import DEFAULT_MAX_TOKENS

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["DEFAULT_MAX_TOKENS", "Anthropic"]


class Anthropic(HTTPAdapter):
    """Claude (or any Messages-API server) through `POST /v1/messages`.

    Args:
        model: the model name sent on each request (overridden by `request.model`).
        api_key: None reads ANTHROPIC_API_KEY (the SDK transport also its other
            credential sources).
        base_url: the server, without `/v1`; None: ANTHROPIC_BASE_URL, else
            api.anthropic.com.
        client: a ready `anthropic.AsyncAnthropic` (or Bedrock / Vertex client) to send
            through (the sdk transport); never closed by the adapter.
        max_tokens: used when the request sets none (the API requires a value).
        thinking_budget: enables extended thinking with this many budget tokens.
        headers, http, **options: as for `OpenAIChat` (`HTTPOptions`);
            `Sampling.extra` (e.g. `{"top_k": 40}`) goes in the body.
    """

    sdk_name = "anthropic"
    path = wire.PATH
    env_base_url = "ANTHROPIC_BASE_URL"
    env_api_key = "ANTHROPIC_API_KEY"
    default_base_url = "https://api.anthropic.com"

    def __init__(
        self,
        model: str,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        client: Any = None,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        thinking_budget: int | None = None,
        headers: dict[str, str] | None = None,
        http: HTTPOptions | None = None,
        **options: Unpack[HTTPKwargs],
    ) -> None:
        if max_tokens < 1:
            raise ConfigError(f"max_tokens must be >= 1, got {max_tokens}")
        if thinking_budget is not None and thinking_budget < 1:
            raise ConfigError(f"thinking_budget must be >= 1 or None, got {thinking_budget}")
        super().__init__(
            model,
            base_url=base_url,
            api_key=api_key,
            client=client,
            headers=headers,
            http=HTTPOptions.of(http, options),
        )
        self.max_tokens = max_tokens
        self.thinking_budget = thinking_budget

    def check_key(
        self, key: str | None, base_url: str | None, transport: TransportName
    ) -> str | None:
        if key is not None:
            return key
        if base_url is None:
            # The SDK has other credential sources (auth tokens, cloud credentials).
            if transport == "fast":
                raise ConfigError(
                    "Anthropic: no api_key given and ANTHROPIC_API_KEY is not set "
                    "(needed for api.anthropic.com; pass base_url= for a local server)"
                )
            return None
        # A local server takes any key; the SDK insists on some credential.
        if transport == "sdk" and not os.environ.get("ANTHROPIC_AUTH_TOKEN"):
            return "EMPTY"
        return None

    def auth_headers(self, key: str | None) -> dict[str, str]:
        headers = {"anthropic-version": wire.API_VERSION}
        if key:
            headers["x-api-key"] = key
        return headers

    def make_sdk_client(
        self, sdk: ModuleType, base_url: str | None, key: str | None, headers: dict[str, str]
    ) -> Any:
        return sdk.AsyncAnthropic(
            api_key=key, base_url=base_url, max_retries=0, default_headers=headers or None
        )

    def build(self, request: ModelRequest) -> tuple[dict[str, Any], Sampling]:
        """(JSON body, sampling sent): seed dropped (None in the sampling), max_tokens set."""
        return wire.build_request(
            request,
            model=self.model,
            max_tokens=self.max_tokens,
            thinking_budget=self.thinking_budget,
            extra_body=self.extra_body,
            stream=self.stream,
        )

    def parse(self, body: Any) -> ModelResponse:
        return wire.parse_response(body)

    def stream_parser(self) -> StreamParser:
        return wire.MessagesStream()
