"""OpenAI-compatible HTTP adapters: chat completions, Responses, and plain completions.

All three use the real `openai` SDK (`openai.AsyncOpenAI`) with the SDK's own retries
off (`max_retries=0`): `ModelAdapter.generate` does the retrying, on retryable errors
only, and caps concurrency. They work against api.openai.com and against
OpenAI-compatible servers (vLLM, SGLang, ...); where vLLM returns exact token ids and
logprobs, the response carries them.

Wire-format decisions (see docs/models-http.md):

- `Message.reasoning` of earlier assistant turns is sent back as the `reasoning` field
  of the assistant message, which vLLM's chat endpoint accepts (and hands to the chat
  template as `reasoning_content` too). `reasoning_field="reasoning_content"` sends it
  under that name for older servers; `reasoning_field=None` drops it.
- Reasoning in a reply is read from `message.reasoning_content` or `message.reasoning`
  (vLLM's older and newer names; other servers use one or the other).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from typing import Any, Literal

from nemo_gym.errors import ConfigError, ModelError, require
from nemo_gym.models.base import RetryPolicy
from nemo_gym.models.http import DEFAULT_TIMEOUT_S, ClientCache, HTTPAdapter
from nemo_gym.records import Message, ModelRequest, ModelResponse, Sampling, ToolCall, Usage

log = logging.getLogger(__name__)

PromptTemplate = Callable[[Sequence[Message]], str]


def _openai_client(
    *,
    client: Any,
    base_url: str | None,
    api_key: str | None,
    timeout: float | None,
    adapter: str,
) -> ClientCache:
    openai = require("openai", "openai")
    if client is not None:
        if base_url is not None or api_key is not None:
            raise ConfigError(f"{adapter}: pass either client= or base_url=/api_key=, not both")
        return ClientCache(client, owned=False)
    key = api_key or os.environ.get("OPENAI_API_KEY")
    if key is None:
        if base_url is None and not os.environ.get("OPENAI_BASE_URL"):
            raise ConfigError(
                f"{adapter}: no api_key given and OPENAI_API_KEY is not set "
                "(needed for api.openai.com; pass base_url= for a local server)"
            )
        key = "EMPTY"  # local OpenAI-compatible servers (vLLM) accept any key
    sdk_client = openai.AsyncOpenAI(api_key=key, base_url=base_url, timeout=timeout, max_retries=0)
    return ClientCache(sdk_client, owned=True)


def _field(obj: Any, name: str) -> Any:
    """A field the SDK may not declare (vLLM extensions): attribute or `model_extra`."""
    if obj is None:
        return None
    value = getattr(obj, name, None)
    if value is None:
        extra = getattr(obj, "model_extra", None)
        if isinstance(extra, dict):
            value = extra.get(name)
    return value


def _token_ids(value: Any, what: str) -> list[int] | None:
    if value is None:
        return None
    if isinstance(value, list) and all(type(t) is int for t in value):
        return value
    log.warning("ignoring %s: expected a list of ints, got %r", what, type(value).__name__)
    return None


def _logprobs(values: list[Any] | None, n_tokens: int | None) -> list[float] | None:
    if values is None:
        return None
    if any(v is None for v in values):
        # A hole would shift every later logprob against its token: drop them all.
        log.warning("server returned logprobs with missing values; dropping them")
        return None
    out = [float(v) for v in values]
    if n_tokens is not None and len(out) != n_tokens:
        # The trainer lines logprobs up with token ids one to one; say so when it can't.
        log.warning("server returned %d logprobs for %d completion tokens", len(out), n_tokens)
    return out


def _usage(prompt: Any, completion: Any) -> Usage:
    return Usage(prompt_tokens=int(prompt or 0), completion_tokens=int(completion or 0))


def _no_choices(response: Any) -> ModelError:
    return ModelError(
        f"server returned no choices (response id {getattr(response, 'id', None)!r})",
        retryable=False,
        code="bad_response",
    )


def _tool_call_id(message: Message, index: int) -> str:
    if not message.tool_call_id:
        raise ModelError(
            f"message {index} (role 'tool') has no tool_call_id; it must name the call it answers",
            retryable=False,
            code="bad_request",
        )
    return message.tool_call_id


# --------------------------------------------------------------------------- chat


ReasoningField = Literal["reasoning", "reasoning_content"]


def _chat_messages(
    messages: Sequence[Message], reasoning_field: ReasoningField | None
) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for index, message in enumerate(messages):
        item: dict[str, Any] = {"role": message.role}
        if message.role == "assistant":
            item["content"] = message.content
            if message.tool_calls:
                item["tool_calls"] = [
                    {
                        "id": call.id,
                        "type": "function",
                        "function": {"name": call.name, "arguments": call.arguments},
                    }
                    for call in message.tool_calls
                ]
            elif message.content is None:
                item["content"] = ""
            if message.reasoning and reasoning_field is not None:
                item[reasoning_field] = message.reasoning
        elif message.role == "tool":
            item["tool_call_id"] = _tool_call_id(message, index)
            item["content"] = message.content or ""
        else:
            item["content"] = message.content or ""
        if message.name and message.role in ("system", "user", "assistant"):
            item["name"] = message.name
        out.append(item)
    return out


def _chat_tool_calls(message: Any) -> tuple[ToolCall, ...]:
    calls: list[ToolCall] = []
    for index, call in enumerate(getattr(message, "tool_calls", None) or ()):
        function = getattr(call, "function", None)
        if function is None:
            log.warning("skipping non-function tool call of type %r", getattr(call, "type", None))
            continue
        calls.append(
            ToolCall(
                id=call.id or f"call_{index}",
                name=function.name,
                # Verbatim: a malformed argument string is the model's output, and the
                # harness decides what to do with it.
                arguments=function.arguments if function.arguments is not None else "",
            )
        )
    return tuple(calls)


def _reasoning_of(message: Any) -> str | None:
    for name in ("reasoning_content", "reasoning"):
        value = _field(message, name)
        if isinstance(value, str) and value:
            return value
    return None


class OpenAIChat(HTTPAdapter):
    """Chat completions (`/v1/chat/completions`) through the `openai` SDK.

    Works with api.openai.com and OpenAI-compatible servers. With vLLM,
    `return_token_ids=True` asks for the exact prompt and completion token ids and
    `logprobs=True` for the sampled tokens' logprobs, so a trainer gets the tokens the
    policy really produced.

    Args:
        model: the model name sent on each request (overridden by `request.model`).
        base_url: the server, e.g. "http://127.0.0.1:8000/v1"; None: the SDK's default.
        api_key: None reads OPENAI_API_KEY; with a `base_url` and no key, "EMPTY".
        client: a ready `openai.AsyncOpenAI` to use instead (not closed by `aclose`).
        timeout: per-request HTTP timeout in seconds.
        max_concurrency: at most this many requests in flight (None: no cap).
        retry: backoff for retryable errors (rate limits, 5xx, connection, timeouts).
        default_sampling: sampling used where the request leaves a field unset.
        extra_body: extra JSON fields sent on every request (e.g. `{"top_k": 20}`).
        logprobs: request the sampled tokens' logprobs.
        return_token_ids: ask vLLM for `prompt_token_ids` / `token_ids`.
        reasoning_field: the assistant-message field earlier reasoning is sent back in
            (None: dropped).
        max_tokens_field: "max_completion_tokens" for OpenAI reasoning models, which
            reject `max_tokens`.
    """

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        client: Any = None,
        timeout: float | None = DEFAULT_TIMEOUT_S,
        max_concurrency: int | None = None,
        retry: RetryPolicy | None = None,
        default_sampling: Sampling | None = None,
        extra_body: dict[str, Any] | None = None,
        logprobs: bool = False,
        return_token_ids: bool = False,
        reasoning_field: ReasoningField | None = "reasoning",
        max_tokens_field: Literal["max_tokens", "max_completion_tokens"] = "max_tokens",
    ) -> None:
        super().__init__(
            model,
            max_concurrency=max_concurrency,
            retry=retry,
            default_sampling=default_sampling,
            extra_body=extra_body,
        )
        if reasoning_field not in ("reasoning", "reasoning_content", None):
            raise ConfigError(
                f"reasoning_field must be 'reasoning', 'reasoning_content' or None, "
                f"got {reasoning_field!r}"
            )
        if max_tokens_field not in ("max_tokens", "max_completion_tokens"):
            raise ConfigError(
                f"max_tokens_field must be 'max_tokens' or 'max_completion_tokens', "
                f"got {max_tokens_field!r}"
            )
        self._sdk = require("openai", "openai")
        self._clients = _openai_client(
            client=client, base_url=base_url, api_key=api_key, timeout=timeout, adapter="OpenAIChat"
        )
        self.logprobs = logprobs
        self.return_token_ids = return_token_ids
        self.reasoning_field: ReasoningField | None = reasoning_field
        self.max_tokens_field = max_tokens_field

    def request_kwargs(self, request: ModelRequest) -> dict[str, Any]:
        """The keyword arguments of `client.chat.completions.create` for `request`."""
        sampling = self._sampling(request)
        kwargs: dict[str, Any] = {
            "model": request.model or self.model,
            "messages": _chat_messages(request.messages, self.reasoning_field),
        }
        if request.tools:
            kwargs["tools"] = [spec.to_openai() for spec in request.tools]
        if sampling.temperature is not None:
            kwargs["temperature"] = sampling.temperature
        if sampling.top_p is not None:
            kwargs["top_p"] = sampling.top_p
        if sampling.max_tokens is not None:
            kwargs[self.max_tokens_field] = sampling.max_tokens
        if sampling.seed is not None:
            kwargs["seed"] = sampling.seed
        if sampling.stop:
            kwargs["stop"] = list(sampling.stop)
        if self.logprobs:
            kwargs["logprobs"] = True
        extra_body = self._extra_body(sampling)
        if self.return_token_ids:
            extra_body.setdefault("return_token_ids", True)
        if extra_body:
            kwargs["extra_body"] = extra_body
        return kwargs

    async def _generate(self, request: ModelRequest) -> ModelResponse:
        client = self._clients.get(request.base_url)
        completion = await self._call(
            client.chat.completions.create, **self.request_kwargs(request)
        )
        if not completion.choices:
            raise _no_choices(completion)
        choice = completion.choices[0]
        reply = choice.message
        completion_ids = _token_ids(_field(choice, "token_ids"), "choice.token_ids")
        # vLLM puts prompt_token_ids on the response (newer) or on the choice (older).
        prompt_ids = _token_ids(
            _field(completion, "prompt_token_ids") or _field(choice, "prompt_token_ids"),
            "prompt_token_ids",
        )
        content = getattr(choice.logprobs, "content", None) if choice.logprobs else None
        logprobs = _logprobs(
            [item.logprob for item in content] if content is not None else None,
            len(completion_ids) if completion_ids is not None else None,
        )
        usage = completion.usage
        return ModelResponse(
            message=Message(
                role="assistant",
                content=reply.content,
                reasoning=_reasoning_of(reply),
                tool_calls=_chat_tool_calls(reply),
            ),
            finish_reason=choice.finish_reason,
            usage=_usage(
                getattr(usage, "prompt_tokens", 0), getattr(usage, "completion_tokens", 0)
            ),
            model=completion.model,
            prompt_token_ids=prompt_ids,
            completion_token_ids=completion_ids,
            completion_logprobs=logprobs,
        )


# --------------------------------------------------------------------------- responses


def _responses_input(messages: Sequence[Message]) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    for index, message in enumerate(messages):
        if message.role == "tool":
            items.append(
                {
                    "type": "function_call_output",
                    "call_id": _tool_call_id(message, index),
                    "output": message.content or "",
                }
            )
        elif message.role == "assistant":
            # Earlier reasoning is not sent back: the Responses API only takes reasoning
            # items it produced itself (with their ids / encrypted content).
            if message.content:
                items.append({"role": "assistant", "content": message.content})
            for call in message.tool_calls:
                items.append(
                    {
                        "type": "function_call",
                        "call_id": call.id,
                        "name": call.name,
                        "arguments": call.arguments,
                    }
                )
        else:
            items.append({"role": message.role, "content": message.content or ""})
    return items


def _responses_finish_reason(response: Any, has_calls: bool) -> str | None:
    status = getattr(response, "status", None)
    if status == "incomplete":
        reason = getattr(getattr(response, "incomplete_details", None), "reason", None)
        return "length" if reason == "max_output_tokens" else (reason or "incomplete")
    if status in ("completed", None):
        return "tool_calls" if has_calls else "stop"
    return str(status)


class OpenAIResponses(HTTPAdapter):
    """The Responses API (`/v1/responses`) through the `openai` SDK.

    Tool turns go out as `function_call` / `function_call_output` input items; the
    reply's reasoning summary (or, from servers such as vLLM, its reasoning text)
    becomes `Message.reasoning`. Requests are sent with `store=False` by default, so
    the server keeps nothing between calls (this adapter always sends the whole
    conversation). The API has no `stop` (a request with one is refused with a clear
    error) and no `seed` (dropped; set `Sampling.extra={"seed": ...}` for a server that
    takes one). Exact token ids are not available through this API.

    Arguments as for `OpenAIChat`; `logprobs=True` asks for the output text's logprobs.
    """

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        client: Any = None,
        timeout: float | None = DEFAULT_TIMEOUT_S,
        max_concurrency: int | None = None,
        retry: RetryPolicy | None = None,
        default_sampling: Sampling | None = None,
        extra_body: dict[str, Any] | None = None,
        logprobs: bool = False,
        store: bool = False,
    ) -> None:
        super().__init__(
            model,
            max_concurrency=max_concurrency,
            retry=retry,
            default_sampling=default_sampling,
            extra_body=extra_body,
        )
        self._sdk = require("openai", "openai")
        self._clients = _openai_client(
            client=client,
            base_url=base_url,
            api_key=api_key,
            timeout=timeout,
            adapter="OpenAIResponses",
        )
        self.logprobs = logprobs
        self.store = store

    def request_kwargs(self, request: ModelRequest) -> dict[str, Any]:
        """The keyword arguments of `client.responses.create` for `request`."""
        sampling = self._sampling(request)
        if sampling.stop:
            raise ModelError(
                "the Responses API has no stop sequences; use OpenAIChat for a request "
                f"with stop={list(sampling.stop)!r}",
                retryable=False,
                code="unsupported",
            )
        kwargs: dict[str, Any] = {
            "model": request.model or self.model,
            "input": _responses_input(request.messages),
            "store": self.store,
        }
        if request.tools:
            kwargs["tools"] = [
                {
                    "type": "function",
                    "name": spec.name,
                    "description": spec.description,
                    "parameters": spec.parameters,
                    # Strict mode needs additionalProperties=false and every property
                    # required; arbitrary tool schemas do not satisfy that.
                    "strict": False,
                }
                for spec in request.tools
            ]
        if sampling.temperature is not None:
            kwargs["temperature"] = sampling.temperature
        if sampling.top_p is not None:
            kwargs["top_p"] = sampling.top_p
        if sampling.max_tokens is not None:
            kwargs["max_output_tokens"] = sampling.max_tokens
        if sampling.seed is not None:
            log.debug("the Responses API has no seed; dropping seed=%s", sampling.seed)
        if self.logprobs:
            kwargs["include"] = ["message.output_text.logprobs"]
        extra_body = self._extra_body(sampling)
        if extra_body:
            kwargs["extra_body"] = extra_body
        return kwargs

    async def _generate(self, request: ModelRequest) -> ModelResponse:
        client = self._clients.get(request.base_url)
        response = await self._call(client.responses.create, **self.request_kwargs(request))
        if getattr(response, "status", None) == "failed":
            error = getattr(response, "error", None)
            code = getattr(error, "code", None)
            raise ModelError(
                f"response failed: {getattr(error, 'message', None) or code or 'no detail'}",
                retryable=code in ("server_error", "rate_limit_exceeded"),
                code=str(code) if code else "response_failed",
            )
        texts: list[str] = []
        reasoning: list[str] = []
        calls: list[ToolCall] = []
        logprobs: list[float] | None = [] if self.logprobs else None
        for item in response.output or ():
            kind = getattr(item, "type", None)
            if kind == "message":
                for part in item.content or ():
                    part_type = getattr(part, "type", None)
                    if part_type == "output_text":
                        texts.append(part.text)
                        if logprobs is not None:
                            logprobs.extend(lp.logprob for lp in (part.logprobs or ()))
                    elif part_type == "refusal":
                        texts.append(part.refusal)
            elif kind == "reasoning":
                summary = [s.text for s in (item.summary or ()) if getattr(s, "text", None)]
                if not summary:
                    # vLLM (gpt-oss and others) returns the raw reasoning as content.
                    summary = [c.text for c in (item.content or ()) if getattr(c, "text", None)]
                reasoning.extend(summary)
            elif kind == "function_call":
                calls.append(ToolCall(id=item.call_id, name=item.name, arguments=item.arguments))
            else:
                log.debug("ignoring Responses output item of type %r", kind)
        usage = response.usage
        return ModelResponse(
            message=Message(
                role="assistant",
                content="".join(texts) if texts else None,
                reasoning="\n\n".join(reasoning) if reasoning else None,
                tool_calls=tuple(calls),
            ),
            finish_reason=_responses_finish_reason(response, bool(calls)),
            usage=_usage(getattr(usage, "input_tokens", 0), getattr(usage, "output_tokens", 0)),
            model=response.model,
            completion_logprobs=logprobs or None,
        )


# --------------------------------------------------------------------------- completions


def plain_prompt(messages: Sequence[Message]) -> str:
    """The default prompt for base checkpoints: labelled turns, ending in "Assistant:".

    A system message comes first as a bare paragraph, then one "User: ..." or
    "Assistant: ..." paragraph per turn (separated by a blank line); the prompt ends
    with "Assistant:" for the model to continue. Pair it with
    `Sampling(stop=("\\nUser:",))` so the model stops before writing the next user turn.
    Tool messages and tool calls have no plain-text form: they raise `ModelError`.
    """
    parts: list[str] = []
    for index, message in enumerate(messages):
        if message.role == "tool" or message.tool_calls:
            raise ModelError(
                f"message {index}: the plain completions prompt has no form for tool "
                "calls or tool results; use OpenAIChat, or pass a prompt_template that "
                "renders them",
                retryable=False,
                code="unsupported",
            )
        text = message.content or ""
        if message.role == "system":
            parts.append(text)
        elif message.role == "user":
            parts.append(f"User: {text}")
        else:
            parts.append(f"Assistant: {text}")
    parts.append("Assistant:")
    return "\n\n".join(parts)


class OpenAICompletions(HTTPAdapter):
    """Plain completions (`/v1/completions`), for base checkpoints without a chat template.

    The messages are rendered to one prompt string by `prompt_template` (default:
    `plain_prompt`); the reply is the generated text. Tool specs are refused with a
    clear error (a base model has no tool-call format). With vLLM,
    `return_token_ids=True` and `logprobs=True` give exact token ids and logprobs.

    Arguments as for `OpenAIChat`, plus `prompt_template`.
    """

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        client: Any = None,
        timeout: float | None = DEFAULT_TIMEOUT_S,
        max_concurrency: int | None = None,
        retry: RetryPolicy | None = None,
        default_sampling: Sampling | None = None,
        extra_body: dict[str, Any] | None = None,
        logprobs: bool = False,
        return_token_ids: bool = False,
        prompt_template: PromptTemplate = plain_prompt,
    ) -> None:
        super().__init__(
            model,
            max_concurrency=max_concurrency,
            retry=retry,
            default_sampling=default_sampling,
            extra_body=extra_body,
        )
        if not callable(prompt_template):
            raise ConfigError(f"prompt_template must be callable, got {prompt_template!r}")
        self._sdk = require("openai", "openai")
        self._clients = _openai_client(
            client=client,
            base_url=base_url,
            api_key=api_key,
            timeout=timeout,
            adapter="OpenAICompletions",
        )
        self.logprobs = logprobs
        self.return_token_ids = return_token_ids
        self.prompt_template = prompt_template

    def request_kwargs(self, request: ModelRequest) -> dict[str, Any]:
        """The keyword arguments of `client.completions.create` for `request`."""
        if request.tools:
            raise ModelError(
                "OpenAICompletions does not support tools (a base checkpoint has no "
                f"tool-call format); got {len(request.tools)} tool spec(s)",
                retryable=False,
                code="unsupported",
            )
        prompt = self.prompt_template(request.messages)
        if not isinstance(prompt, str):
            raise ConfigError(f"prompt_template must return a str, got {type(prompt).__name__}")
        sampling = self._sampling(request)
        kwargs: dict[str, Any] = {"model": request.model or self.model, "prompt": prompt}
        if sampling.temperature is not None:
            kwargs["temperature"] = sampling.temperature
        if sampling.top_p is not None:
            kwargs["top_p"] = sampling.top_p
        if sampling.max_tokens is not None:
            kwargs["max_tokens"] = sampling.max_tokens
        if sampling.seed is not None:
            kwargs["seed"] = sampling.seed
        if sampling.stop:
            kwargs["stop"] = list(sampling.stop)
        if self.logprobs:
            # 1, not 0: some servers read 0 as "no logprobs"; one alternative is cheap.
            kwargs["logprobs"] = 1
        extra_body = self._extra_body(sampling)
        if self.return_token_ids:
            extra_body.setdefault("return_token_ids", True)
        if extra_body:
            kwargs["extra_body"] = extra_body
        return kwargs

    async def _generate(self, request: ModelRequest) -> ModelResponse:
        client = self._clients.get(request.base_url)
        completion = await self._call(client.completions.create, **self.request_kwargs(request))
        if not completion.choices:
            raise _no_choices(completion)
        choice = completion.choices[0]
        completion_ids = _token_ids(_field(choice, "token_ids"), "choice.token_ids")
        prompt_ids = _token_ids(
            _field(choice, "prompt_token_ids") or _field(completion, "prompt_token_ids"),
            "prompt_token_ids",
        )
        token_logprobs = getattr(choice.logprobs, "token_logprobs", None)
        usage = completion.usage
        return ModelResponse(
            message=Message(role="assistant", content=choice.text),
            finish_reason=choice.finish_reason,
            usage=_usage(
                getattr(usage, "prompt_tokens", 0), getattr(usage, "completion_tokens", 0)
            ),
            model=completion.model,
            prompt_token_ids=prompt_ids,
            completion_token_ids=completion_ids,
            completion_logprobs=_logprobs(
                token_logprobs, len(completion_ids) if completion_ids is not None else None
            ),
        )
