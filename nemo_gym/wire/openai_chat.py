"""OpenAI chat completions (`POST /v1/chat/completions`), both directions.

Client side (the adapters): `build_request` turns a `ModelRequest` into the JSON body
and the sampling it sends, `parse_response` reads a completion, `ChatStream` gathers a
`stream=True` reply chunk by chunk into the same `ModelResponse`.

Server side (fakes, a loopback endpoint): `parse_request`, `build_response`,
`stream_events`, `error_body`.

vLLM's extensions are read and written as vLLM does: `prompt_token_ids` on the body
(older versions: on the choice), `token_ids` on the choice, per-token `logprobs.content`;
reasoning as `reasoning_content` or `reasoning` on the message.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, Literal

from nemo_gym.errors import ModelError
from nemo_gym.records import (
    Message,
    ModelRequest,
    ModelResponse,
    Role,
    Sampling,
    ToolCall,
    ToolSpec,
    Usage,
)
from nemo_gym.wire.common import (
    ChunkStream,
    ServerRequest,
    WireError,
    as_list,
    as_object,
    as_str,
    logprobs,
    sse,
    token_ids,
    usage,
)

log = logging.getLogger(__name__)

PATH = "/chat/completions"

ReasoningField = Literal["reasoning", "reasoning_content"]
MaxTokensField = Literal["max_tokens", "max_completion_tokens"]

_SAMPLING_FIELDS = ("temperature", "top_p", "max_tokens", "max_completion_tokens", "seed", "stop")


def tool_call_id(message: Message, index: int) -> str:
    """The `tool_call_id` of a tool message; `ModelError` (never sent) when it has none."""
    if not message.tool_call_id:
        raise ModelError(
            f"message {index} (role 'tool') has no tool_call_id; it must name the call it answers",
            retryable=False,
            code="bad_request",
        )
    return message.tool_call_id


# --------------------------------------------------------------------------- client side


def messages_out(
    messages: Sequence[Message], reasoning_field: ReasoningField | None = "reasoning"
) -> list[dict[str, Any]]:
    """The chat `messages` array for a conversation."""
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
            item["tool_call_id"] = tool_call_id(message, index)
            item["content"] = message.content or ""
        else:
            item["content"] = message.content or ""
        if message.name and message.role in ("system", "user", "assistant"):
            item["name"] = message.name
        out.append(item)
    return out


def build_request(
    request: ModelRequest,
    *,
    model: str,
    reasoning_field: ReasoningField | None = "reasoning",
    max_tokens_field: MaxTokensField = "max_tokens",
    logprobs: bool = False,
    return_token_ids: bool = False,
    extra_body: dict[str, Any] | None = None,
    stream: bool = False,
) -> tuple[dict[str, Any], Sampling]:
    """(JSON body, the sampling it sends) for `request`; `model` unless the request names one.

    `extra_body` and then `request.sampling.extra` are merged into the body last (so
    they may set any field); `Sampling.extra` in the returned sampling is what they sent.
    """
    sampling = request.sampling
    body: dict[str, Any] = {
        "model": request.model or model,
        "messages": messages_out(request.messages, reasoning_field),
    }
    if request.tools:
        body["tools"] = [spec.to_openai() for spec in request.tools]
    if sampling.temperature is not None:
        body["temperature"] = sampling.temperature
    if sampling.top_p is not None:
        body["top_p"] = sampling.top_p
    if sampling.max_tokens is not None:
        body[max_tokens_field] = sampling.max_tokens
    if sampling.seed is not None:
        body["seed"] = sampling.seed
    if sampling.stop:
        body["stop"] = list(sampling.stop)
    if logprobs:
        body["logprobs"] = True
    if return_token_ids:
        body["return_token_ids"] = True
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    extra = {**extra_body, **sampling.extra} if extra_body else sampling.extra
    if extra:
        body.update(extra)
    return body, sent_sampling(body, extra, max_tokens_field)


def sent_sampling(body: dict[str, Any], extra: dict[str, Any], max_tokens_field: str) -> Sampling:
    """The `Sampling` a body carries (after `extra` may have overridden a field)."""
    stop = body.get("stop")
    if isinstance(stop, str):
        stop = (stop,)
    return Sampling.model_construct(
        temperature=body.get("temperature"),
        top_p=body.get("top_p"),
        max_tokens=body.get(max_tokens_field),
        seed=body.get("seed"),
        stop=tuple(stop) if stop else None,
        extra=dict(extra),
    )


def _content_text(value: Any, where: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    # Some servers send content as parts: [{"type": "text", "text": ...}].
    parts = as_list(value, where)
    return "".join(
        part.get("text") or "" for part in parts if isinstance(part, dict) and "text" in part
    )


def _reasoning(message: dict[str, Any]) -> str | None:
    for name in ("reasoning_content", "reasoning"):
        value = message.get(name)
        if isinstance(value, str) and value:
            return value
    return None


def _tool_calls(values: Any, where: str) -> tuple[ToolCall, ...]:
    calls: list[ToolCall] = []
    for index, raw in enumerate(as_list(values, where)):
        call = as_object(raw, f"{where}[{index}]")
        function = call.get("function")
        if not isinstance(function, dict):
            log.warning("skipping non-function tool call of type %r", call.get("type"))
            continue
        arguments = function.get("arguments")
        calls.append(
            ToolCall(
                id=as_str(call.get("id"), f"{where}[{index}].id") or f"call_{index}",
                name=as_str(
                    function.get("name"), f"{where}[{index}].function.name", optional=False
                ),
                # Verbatim: a malformed argument string is the model's output, and the
                # harness decides what to do with it.
                arguments=arguments if isinstance(arguments, str) else "",
            )
        )
    return tuple(calls)


def parse_response(body: Any) -> ModelResponse:
    """A chat completion body as a `ModelResponse`; `WireError` when it is not one."""
    body = as_object(body, "chat completion")
    choices = as_list(body.get("choices"), "choices")
    if not choices:
        raise WireError(f"server returned no choices (response id {body.get('id')!r})")
    choice = as_object(choices[0], "choices[0]")
    message = as_object(choice.get("message"), "choices[0].message")
    completion_ids = token_ids(choice.get("token_ids"), "choice.token_ids")
    # vLLM puts prompt_token_ids on the response (newer) or on the choice (older).
    prompt_ids = token_ids(
        body.get("prompt_token_ids") or choice.get("prompt_token_ids"), "prompt_token_ids"
    )
    content_lp = choice.get("logprobs")
    items = content_lp.get("content") if isinstance(content_lp, dict) else None
    lps = logprobs(
        [item.get("logprob") if isinstance(item, dict) else None for item in items]
        if isinstance(items, list)
        else None,
        len(completion_ids) if completion_ids is not None else None,
    )
    raw_usage = body.get("usage") or {}
    if not isinstance(raw_usage, dict):
        raise WireError("usage: expected a JSON object")
    return ModelResponse(
        message=Message(
            role="assistant",
            content=_content_text(message.get("content"), "choices[0].message.content"),
            reasoning=_reasoning(message),
            tool_calls=_tool_calls(message.get("tool_calls"), "choices[0].message.tool_calls"),
        ),
        finish_reason=as_str(choice.get("finish_reason"), "choices[0].finish_reason"),
        usage=usage(raw_usage.get("prompt_tokens"), raw_usage.get("completion_tokens"), "usage"),
        model=as_str(body.get("model"), "model"),
        prompt_token_ids=prompt_ids,
        completion_token_ids=completion_ids,
        completion_logprobs=lps,
    )


class ChatStream(ChunkStream):
    """Gathers the chunks of a `stream=True` chat completion into one `ModelResponse`.

    Feed each `data:` payload (decoded JSON) to `feed`; `done` turns true at `[DONE]`
    (see `feed_data`). Content, reasoning, tool-call fragments, token ids and logprobs
    are concatenated in order; usage comes from the final chunk.
    """

    def __init__(self) -> None:
        self.done = False
        self._content: list[str] = []
        self._reasoning: list[str] = []
        self._calls: dict[int, dict[str, Any]] = {}
        self._finish: str | None = None
        self._model: str | None = None
        self._usage: Usage = Usage()
        self._prompt_ids: list[int] | None = None
        self._ids: list[int] | None = None
        self._logprobs: list[Any] | None = None
        self._chunks = 0

    def feed(self, chunk: Any) -> None:
        chunk = as_object(chunk, "chat completion chunk")
        if "error" in chunk and "choices" not in chunk:
            raise WireError(f"stream error: {chunk['error']!r}")
        self._chunks += 1
        if self._model is None and isinstance(chunk.get("model"), str):
            self._model = chunk["model"]
        prompt_ids = chunk.get("prompt_token_ids")
        raw_usage = chunk.get("usage")
        if isinstance(raw_usage, dict):
            self._usage = usage(
                raw_usage.get("prompt_tokens"), raw_usage.get("completion_tokens"), "usage"
            )
        for raw in as_list(chunk.get("choices"), "chunk.choices"):
            choice = as_object(raw, "chunk.choices[]")
            if choice.get("index", 0) != 0:
                continue
            prompt_ids = prompt_ids or choice.get("prompt_token_ids")
            delta = choice.get("delta") or {}
            if not isinstance(delta, dict):
                raise WireError("chunk.choices[0].delta: expected a JSON object")
            text = delta.get("content")
            if isinstance(text, str):
                self._content.append(text)
            for name in ("reasoning_content", "reasoning"):
                value = delta.get(name)
                if isinstance(value, str):
                    self._reasoning.append(value)
                    break
            for fragment in as_list(delta.get("tool_calls"), "delta.tool_calls"):
                self._tool_fragment(as_object(fragment, "delta.tool_calls[]"))
            ids = choice.get("token_ids")
            if isinstance(ids, list):
                self._ids = (self._ids or []) + ids
            lp = choice.get("logprobs")
            if isinstance(lp, dict) and isinstance(lp.get("content"), list):
                values = [i.get("logprob") if isinstance(i, dict) else None for i in lp["content"]]
                self._logprobs = (self._logprobs or []) + values
            if choice.get("finish_reason") is not None:
                self._finish = choice["finish_reason"]
        if prompt_ids is not None and self._prompt_ids is None:
            self._prompt_ids = token_ids(prompt_ids, "prompt_token_ids")

    def _tool_fragment(self, fragment: dict[str, Any]) -> None:
        index = fragment.get("index", len(self._calls))
        call = self._calls.setdefault(index, {"id": None, "name": "", "arguments": []})
        if isinstance(fragment.get("id"), str):
            call["id"] = fragment["id"]
        function = fragment.get("function") or {}
        if isinstance(function.get("name"), str):
            call["name"] += function["name"]
        if isinstance(function.get("arguments"), str):
            call["arguments"].append(function["arguments"])

    def response(self) -> ModelResponse:
        """The whole reply; `WireError` when the stream ended before any chunk or `[DONE]`."""
        if not self.done:
            raise WireError(f"stream ended after {self._chunks} chunk(s) without [DONE]")
        if not self._chunks:
            raise WireError("stream carried no chunks")
        calls = tuple(
            ToolCall(
                id=call["id"] or f"call_{index}",
                name=call["name"],
                arguments="".join(call["arguments"]),
            )
            for index, call in sorted(self._calls.items())
        )
        ids = token_ids(self._ids, "choice.token_ids")
        return ModelResponse(
            message=Message(
                role="assistant",
                # The opening chunk's "" is no content when the reply is tool calls.
                content="".join(self._content) or (None if calls else ""),
                reasoning="".join(self._reasoning) or None,
                tool_calls=calls,
            ),
            finish_reason=self._finish,
            usage=self._usage,
            model=self._model,
            prompt_token_ids=self._prompt_ids,
            completion_token_ids=ids,
            completion_logprobs=logprobs(self._logprobs, len(ids) if ids is not None else None),
        )


# --------------------------------------------------------------------------- server side


# "developer" is OpenAI's newer name for the system role.
_ROLES: dict[str, Role] = {
    "system": "system",
    "developer": "system",
    "user": "user",
    "assistant": "assistant",
    "tool": "tool",
}


def _message_in(raw: Any, index: int) -> Message:
    item = as_object(raw, f"messages[{index}]")
    raw_role = item.get("role")
    where = f"messages[{index}]"
    role = _ROLES.get(raw_role) if isinstance(raw_role, str) else None
    if role is None:
        raise WireError(f"{where}.role: unknown role {raw_role!r}")
    content = _content_text(item.get("content"), f"{where}.content")
    if role == "assistant":
        return Message(
            role="assistant",
            content=content,
            reasoning=_reasoning(item),
            tool_calls=_tool_calls(item.get("tool_calls"), f"{where}.tool_calls"),
            name=as_str(item.get("name"), f"{where}.name"),
        )
    if role == "tool":
        return Message(
            role="tool",
            content=content,
            tool_call_id=as_str(item.get("tool_call_id"), f"{where}.tool_call_id"),
        )
    return Message(role=role, content=content, name=as_str(item.get("name"), f"{where}.name"))


def _tool_in(raw: Any, index: int) -> ToolSpec:
    item = as_object(raw, f"tools[{index}]")
    function = as_object(item.get("function"), f"tools[{index}].function")
    spec: dict[str, Any] = {
        "name": as_str(function.get("name"), f"tools[{index}].function.name", optional=False)
    }
    if function.get("description") is not None:
        spec["description"] = as_str(function["description"], f"tools[{index}].description")
    if function.get("parameters") is not None:
        spec["parameters"] = as_object(function["parameters"], f"tools[{index}].parameters")
    return ToolSpec(**spec)


def parse_request(body: Any) -> ServerRequest:
    """A chat-completions request body as the `ModelRequest` it asks for."""
    body = as_object(body, "request")
    raw_messages = as_list(body.get("messages"), "messages")
    if not raw_messages:
        raise WireError("messages: at least one message is required")
    stop = body.get("stop")
    if isinstance(stop, str):
        stop = [stop]
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    known = {"model", "messages", "tools", "stream", *_SAMPLING_FIELDS}
    try:
        sampling = Sampling(
            temperature=body.get("temperature"),
            top_p=body.get("top_p"),
            max_tokens=max_tokens,
            seed=body.get("seed"),
            stop=tuple(stop) if stop else None,
        )
        request = ModelRequest(
            messages=tuple(_message_in(m, i) for i, m in enumerate(raw_messages)),
            tools=tuple(_tool_in(t, i) for i, t in enumerate(as_list(body.get("tools"), "tools"))),
            sampling=sampling,
            model=as_str(body.get("model"), "model"),
        )
    except ValueError as exc:
        if isinstance(exc, WireError):
            raise
        raise WireError(f"request: {exc}") from None
    options = {k: v for k, v in body.items() if k not in known}
    return ServerRequest(request=request, stream=bool(body.get("stream")), options=options)


def _message_body(message: Message) -> dict[str, Any]:
    out: dict[str, Any] = {"role": "assistant", "content": message.content}
    if message.reasoning is not None:
        # vLLM and most open-weight servers name it so.
        out["reasoning_content"] = message.reasoning
    if message.tool_calls:
        out["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments},
            }
            for call in message.tool_calls
        ]
    return out


def _logprobs_body(response: ModelResponse) -> dict[str, Any] | None:
    if response.completion_logprobs is None:
        return None
    ids: Sequence[int | None] = response.completion_token_ids or [None] * len(
        response.completion_logprobs
    )
    return {
        "content": [
            {
                "token": f"token_id:{tid}" if tid is not None else "",
                "logprob": lp,
                "bytes": None,
                "top_logprobs": [],
            }
            for tid, lp in zip(ids, response.completion_logprobs, strict=False)
        ]
    }


def _usage_body(response: ModelResponse) -> dict[str, int]:
    u = response.usage
    return {
        "prompt_tokens": u.prompt_tokens,
        "completion_tokens": u.completion_tokens,
        "total_tokens": u.total_tokens,
    }


def default_finish_reason(response: ModelResponse) -> str:
    return response.finish_reason or ("tool_calls" if response.message.tool_calls else "stop")


def build_response(
    response: ModelResponse, *, model: str, id: str = "chatcmpl-0", created: int = 0
) -> dict[str, Any]:
    """The chat-completion body a server sends for `response` (vLLM's token fields too)."""
    choice: dict[str, Any] = {
        "index": 0,
        "message": _message_body(response.message),
        "finish_reason": default_finish_reason(response),
        "logprobs": _logprobs_body(response),
    }
    if response.completion_token_ids is not None:
        choice["token_ids"] = response.completion_token_ids
    body: dict[str, Any] = {
        "id": id,
        "object": "chat.completion",
        "created": created,
        "model": response.model or model,
        "choices": [choice],
        "usage": _usage_body(response),
    }
    if response.prompt_token_ids is not None:
        body["prompt_token_ids"] = response.prompt_token_ids
    return body


def stream_events(
    response: ModelResponse,
    *,
    model: str,
    id: str = "chatcmpl-0",
    created: int = 0,
    include_usage: bool = True,
) -> list[bytes]:
    """The SSE events (`data: {chunk}` ... `data: [DONE]`) carrying `response`."""
    message = response.message
    base = {
        "id": id,
        "object": "chat.completion.chunk",
        "created": created,
        "model": response.model or model,
    }

    def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> bytes:
        choice: dict[str, Any] = {"index": 0, "delta": delta, "finish_reason": finish, **extra}
        return sse({**base, "choices": [choice]})

    first: dict[str, Any] = {**base}
    first["choices"] = [
        {"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}
    ]
    if response.prompt_token_ids is not None:
        first["prompt_token_ids"] = response.prompt_token_ids
    events = [sse(first)]
    if message.reasoning:
        events.append(chunk({"reasoning_content": message.reasoning}))
    if message.content:
        extra: dict[str, Any] = {}
        if response.completion_token_ids is not None:
            extra["token_ids"] = response.completion_token_ids
        logprobs_body = _logprobs_body(response)
        if logprobs_body is not None:
            extra["logprobs"] = logprobs_body
        events.append(chunk({"content": message.content}, **extra))
    elif response.completion_token_ids is not None or response.completion_logprobs is not None:
        extra = {"token_ids": response.completion_token_ids, "logprobs": _logprobs_body(response)}
        events.append(chunk({}, **{k: v for k, v in extra.items() if v is not None}))
    for position, call in enumerate(message.tool_calls):
        fragment = {
            "index": position,
            "id": call.id,
            "type": "function",
            "function": {"name": call.name, "arguments": call.arguments},
        }
        events.append(chunk({"tool_calls": [fragment]}))
    events.append(chunk({}, default_finish_reason(response)))
    if include_usage:
        events.append(sse({**base, "choices": [], "usage": _usage_body(response)}))
    events.append(sse("[DONE]"))
    return events


def error_body(message: str, *, type: str = "error", code: Any = None) -> dict[str, Any]:
    """OpenAI's error body."""
    return {"error": {"message": message, "type": type, "code": code, "param": None}}
