"""Anthropic Messages API adapter, through the real `anthropic` SDK.

Wire-format decisions (see docs/models-http.md):

- system messages are joined (blank line between) into `system=`;
- an assistant's tool calls become `tool_use` blocks; their `input` is the parsed JSON
  arguments, and arguments that are not a JSON object are sent as `{"_raw": "<text>"}`
  so the conversation still goes through (the API only takes an object);
- tool messages become `tool_result` blocks in a user turn; consecutive tool results
  (and a user message right after them) merge into one user turn, as the API wants
  alternating roles;
- earlier reasoning is not sent back: the API only accepts thinking blocks with the
  signature it issued, which `Message` does not keep;
- `Sampling.seed` is dropped (the API has none); temperature and top_p go in the body.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence
from typing import Any

from nemo_gym.errors import ConfigError, ModelError, require
from nemo_gym.models.base import RetryPolicy
from nemo_gym.models.http import DEFAULT_TIMEOUT_S, ClientCache, HTTPAdapter
from nemo_gym.records import Message, ModelRequest, ModelResponse, Sampling, ToolCall, Usage

log = logging.getLogger(__name__)

DEFAULT_MAX_TOKENS = 4096
"""`max_tokens` when neither the request nor `default_sampling` sets one (the API needs it)."""

_STOP_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "tool_use": "tool_calls",
}


def _tool_input(call: ToolCall) -> dict[str, Any]:
    try:
        value = json.loads(call.arguments or "{}")
    except json.JSONDecodeError:
        value = None
    if isinstance(value, dict):
        return value
    return {"_raw": call.arguments}


def _anthropic_messages(messages: Sequence[Message]) -> tuple[str | None, list[dict[str, Any]]]:
    """(system prompt, Messages API `messages`) for a chat-shaped conversation."""
    system: list[str] = []
    turns: list[dict[str, Any]] = []

    def add(role: str, blocks: list[dict[str, Any]]) -> None:
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": blocks})

    for index, message in enumerate(messages):
        if message.role == "system":
            if message.content:
                system.append(message.content)
        elif message.role == "user":
            add("user", [{"type": "text", "text": message.content or ""}])
        elif message.role == "tool":
            if not message.tool_call_id:
                raise ModelError(
                    f"message {index} (role 'tool') has no tool_call_id; it must name the "
                    "tool_use it answers",
                    retryable=False,
                    code="bad_request",
                )
            add(
                "user",
                [
                    {
                        "type": "tool_result",
                        "tool_use_id": message.tool_call_id,
                        "content": message.content or "",
                    }
                ],
            )
        else:
            blocks: list[dict[str, Any]] = []
            if message.content:
                blocks.append({"type": "text", "text": message.content})
            blocks.extend(
                {"type": "tool_use", "id": call.id, "name": call.name, "input": _tool_input(call)}
                for call in message.tool_calls
            )
            if not blocks:
                # The API rejects an empty assistant turn; it carried nothing to send.
                log.debug("skipping empty assistant message %d", index)
                continue
            add("assistant", blocks)
    for turn in turns:
        content = turn["content"]
        if len(content) == 1 and content[0]["type"] == "text":
            turn["content"] = content[0]["text"]
    return ("\n\n".join(system) if system else None), turns


class Anthropic(HTTPAdapter):
    """Claude through the Messages API (`anthropic.AsyncAnthropic().messages.create`).

    Args:
        model: the model name sent on each request (overridden by `request.model`).
        api_key: None reads ANTHROPIC_API_KEY (or the SDK's own credential sources).
        base_url: the server; None: the SDK's default (api.anthropic.com).
        client: a ready `anthropic.AsyncAnthropic` (not closed by `aclose`).
        max_tokens: used when the request sets none (the API requires a value).
        thinking_budget: enables extended thinking with this many budget tokens.
        timeout, max_concurrency, retry, default_sampling, extra_body: as for
            `OpenAIChat`; `Sampling.extra` (e.g. `{"top_k": 40}`) goes in the body.
    """

    def __init__(
        self,
        model: str,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        client: Any = None,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        thinking_budget: int | None = None,
        timeout: float | None = DEFAULT_TIMEOUT_S,
        max_concurrency: int | None = None,
        retry: RetryPolicy | None = None,
        default_sampling: Sampling | None = None,
        extra_body: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(
            model,
            max_concurrency=max_concurrency,
            retry=retry,
            default_sampling=default_sampling,
            extra_body=extra_body,
        )
        if max_tokens < 1:
            raise ConfigError(f"max_tokens must be >= 1, got {max_tokens}")
        if thinking_budget is not None and thinking_budget < 1:
            raise ConfigError(f"thinking_budget must be >= 1 or None, got {thinking_budget}")
        self._sdk = require("anthropic", "anthropic")
        if client is not None:
            if base_url is not None or api_key is not None:
                raise ConfigError("Anthropic: pass either client= or base_url=/api_key=, not both")
            self._clients = ClientCache(client, owned=False)
        else:
            sdk_client = self._sdk.AsyncAnthropic(
                api_key=api_key or os.environ.get("ANTHROPIC_API_KEY"),
                base_url=base_url,
                timeout=timeout,
                max_retries=0,
            )
            self._clients = ClientCache(sdk_client, owned=True)
        self.max_tokens = max_tokens
        self.thinking_budget = thinking_budget

    def request_kwargs(self, request: ModelRequest) -> dict[str, Any]:
        """The keyword arguments of `client.messages.create` for `request`."""
        sampling = self._sampling(request)
        system, messages = _anthropic_messages(request.messages)
        kwargs: dict[str, Any] = {
            "model": request.model or self.model,
            "max_tokens": sampling.max_tokens or self.max_tokens,
            "messages": messages,
        }
        if system is not None:
            kwargs["system"] = system
        if request.tools:
            kwargs["tools"] = [
                {
                    "name": spec.name,
                    "description": spec.description,
                    "input_schema": spec.parameters,
                }
                for spec in request.tools
            ]
        if sampling.stop:
            kwargs["stop_sequences"] = list(sampling.stop)
        if self.thinking_budget is not None:
            kwargs["thinking"] = {"type": "enabled", "budget_tokens": self.thinking_budget}
        if sampling.seed is not None:
            log.debug("the Messages API has no seed; dropping seed=%s", sampling.seed)
        # This SDK version has no temperature/top_p arguments; the API reads them from
        # the body all the same.
        body: dict[str, Any] = {}
        if sampling.temperature is not None:
            body["temperature"] = sampling.temperature
        if sampling.top_p is not None:
            body["top_p"] = sampling.top_p
        body.update(self._extra_body(sampling))
        if body:
            kwargs["extra_body"] = body
        return kwargs

    async def _generate(self, request: ModelRequest) -> ModelResponse:
        client = self._clients.get(request.base_url)
        reply = await self._call(client.messages.create, **self.request_kwargs(request))
        texts: list[str] = []
        thinking: list[str] = []
        calls: list[ToolCall] = []
        for block in reply.content or ():
            kind = getattr(block, "type", None)
            if kind == "text":
                texts.append(block.text)
            elif kind == "thinking":
                thinking.append(block.thinking)
            elif kind == "tool_use":
                calls.append(
                    ToolCall(
                        id=block.id,
                        name=block.name,
                        arguments=json.dumps(block.input, ensure_ascii=False),
                    )
                )
            else:
                # redacted_thinking and server-tool blocks carry nothing a harness reads.
                log.debug("ignoring Anthropic content block of type %r", kind)
        usage = reply.usage
        # input_tokens excludes prompt-cache reads and writes; the prompt is all three.
        prompt_tokens = sum(
            getattr(usage, name, None) or 0
            for name in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
        )
        return ModelResponse(
            message=Message(
                role="assistant",
                content="".join(texts) if texts else None,
                reasoning="\n\n".join(thinking) if thinking else None,
                tool_calls=tuple(calls),
            ),
            finish_reason=_STOP_REASONS.get(reply.stop_reason, reply.stop_reason),
            usage=Usage(
                prompt_tokens=prompt_tokens,
                completion_tokens=getattr(usage, "output_tokens", None) or 0,
            ),
            model=reply.model,
        )
