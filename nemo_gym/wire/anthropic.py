"""The Anthropic Messages API (`POST /v1/messages`), both directions.

Wire-format decisions:

- system messages are joined (blank line between) into `system`;
- an assistant's tool calls become `tool_use` blocks; their `input` is the parsed JSON
  arguments, and arguments that are not a JSON object are sent as `{"_raw": "<text>"}`
  so the conversation still goes through (the API only takes an object);
- tool messages become `tool_result` blocks in a user turn; consecutive tool results
  (and a user message right after them) merge into one user turn, as the API wants
  alternating roles;
- earlier reasoning is not sent back: the API only accepts thinking blocks with the
  signature it issued, which `Message` does not keep;
- `Sampling.seed` is dropped (the API has none).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any

from nemo_gym.errors import ModelError
from nemo_gym.knobs import refuse_knobs
from nemo_gym.records import (
    Message,
    ModelRequest,
    ModelResponse,
    Sampling,
    ToolCall,
    ToolSpec,
    Usage,
)
from nemo_gym.wire.common import (
    ServerRequest,
    WireError,
    as_int,
    as_list,
    as_object,
    as_str,
    loads,
    sse,
)

log = logging.getLogger(__name__)

PATH = "/v1/messages"
API_VERSION = "2023-06-01"
DEFAULT_MAX_TOKENS = 4096
"""`max_tokens` when neither the request nor the adapter sets one (the API needs it)."""

STOP_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "tool_use": "tool_calls",
}
_FINISH_TO_STOP = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}


def tool_input(call: ToolCall) -> dict[str, Any]:
    """A tool call's arguments as the object `tool_use.input` needs (`{"_raw": text}` if not)."""
    try:
        value = json.loads(call.arguments or "{}")
    except json.JSONDecodeError:
        value = None
    if isinstance(value, dict):
        return value
    return {"_raw": call.arguments}


def _arguments(value: Any) -> str:
    # The inverse of tool_input: a wrapped non-object goes back to its raw text.
    if isinstance(value, dict) and set(value) == {"_raw"} and isinstance(value["_raw"], str):
        return value["_raw"]
    return json.dumps(value, ensure_ascii=False)


def messages_out(messages: Sequence[Message]) -> tuple[str | None, list[dict[str, Any]]]:
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
                {"type": "tool_use", "id": call.id, "name": call.name, "input": tool_input(call)}
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


def build_request(
    request: ModelRequest,
    *,
    model: str,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    thinking_budget: int | None = None,
    extra_body: dict[str, Any] | None = None,
    stream: bool = False,
) -> tuple[dict[str, Any], Sampling]:
    """(JSON body, the sampling it sends): seed is dropped, `max_tokens` always sent;
    a sampling knob other than `top_k` is refused (`nemo_gym.knobs`)."""
    sampling = request.sampling
    refuse_knobs(sampling.extra, "Anthropic", ("top_k",))
    system, messages = messages_out(request.messages)
    body: dict[str, Any] = {
        "model": request.model or model,
        "max_tokens": sampling.max_tokens or max_tokens,
        "messages": messages,
    }
    if system is not None:
        body["system"] = system
    if request.tools:
        body["tools"] = [
            {"name": spec.name, "description": spec.description, "input_schema": spec.parameters}
            for spec in request.tools
        ]
    if sampling.stop:
        body["stop_sequences"] = list(sampling.stop)
    if thinking_budget is not None:
        body["thinking"] = {"type": "enabled", "budget_tokens": thinking_budget}
    if sampling.seed is not None:
        log.debug("the Messages API has no seed; dropping seed=%s", sampling.seed)
    if sampling.temperature is not None:
        body["temperature"] = sampling.temperature
    if sampling.top_p is not None:
        body["top_p"] = sampling.top_p
    if stream:
        body["stream"] = True
    extra = {**extra_body, **sampling.extra} if extra_body else sampling.extra
    if extra:
        body.update(extra)
    stop = body.get("stop_sequences")
    sent = Sampling.model_construct(
        temperature=body.get("temperature"),
        top_p=body.get("top_p"),
        max_tokens=body.get("max_tokens"),
        seed=None,
        stop=tuple(stop) if stop else None,
        extra=dict(extra),
    )
    return body, sent


def _prompt_tokens(raw_usage: dict[str, Any]) -> int:
    # input_tokens excludes prompt-cache reads and writes; the prompt is all three.
    return sum(
        as_int(raw_usage.get(name), f"usage.{name}")
        for name in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
    )


def _response(
    blocks: list[Any], stop_reason: Any, raw_usage: dict[str, Any], model: Any
) -> ModelResponse:
    texts: list[str] = []
    thinking: list[str] = []
    calls: list[ToolCall] = []
    for index, raw in enumerate(blocks):
        block = as_object(raw, f"content[{index}]")
        kind = block.get("type")
        if kind == "text":
            texts.append(as_str(block.get("text"), f"content[{index}].text") or "")
        elif kind == "thinking":
            thinking.append(as_str(block.get("thinking"), f"content[{index}].thinking") or "")
        elif kind == "tool_use":
            calls.append(
                ToolCall(
                    id=as_str(block.get("id"), f"content[{index}].id", optional=False),
                    name=as_str(block.get("name"), f"content[{index}].name", optional=False),
                    arguments=_arguments(block.get("input", {})),
                )
            )
        else:
            # redacted_thinking and server-tool blocks carry nothing a harness reads.
            log.debug("ignoring Anthropic content block of type %r", kind)
    stop = as_str(stop_reason, "stop_reason")
    return ModelResponse(
        message=Message(
            role="assistant",
            content="".join(texts) if texts else None,
            reasoning="\n\n".join(thinking) if thinking else None,
            tool_calls=tuple(calls),
        ),
        finish_reason=STOP_REASONS.get(stop, stop) if stop is not None else None,
        usage=Usage(
            prompt_tokens=_prompt_tokens(raw_usage),
            completion_tokens=as_int(raw_usage.get("output_tokens"), "usage.output_tokens"),
        ),
        model=as_str(model, "model"),
    )


def parse_response(body: Any) -> ModelResponse:
    """A Messages reply as a `ModelResponse`; `WireError` when it is not one."""
    body = as_object(body, "message")
    if body.get("type") == "error":
        raise WireError(f"error body on a success status: {body.get('error')!r}")
    raw_usage = body.get("usage") or {}
    if not isinstance(raw_usage, dict):
        raise WireError("usage: expected a JSON object")
    if "content" not in body:
        raise WireError("message: no content")
    return _response(
        as_list(body.get("content"), "content"),
        body.get("stop_reason"),
        raw_usage,
        body.get("model"),
    )


class MessagesStream:
    """Gathers a streamed Messages reply (message_start ... message_stop)."""

    def __init__(self) -> None:
        self.done = False
        self._model: Any = None
        self._blocks: dict[int, dict[str, Any]] = {}
        self._partial_json: dict[int, list[str]] = {}
        self._stop: Any = None
        self._usage: dict[str, Any] = {}
        self._events = 0

    def feed_event(self, event: str | None, data: str) -> None:
        self._events += 1
        payload = as_object(loads(data), f"event {event!r}")
        kind = payload.get("type", event)
        if kind == "message_start":
            message = as_object(payload.get("message"), "message_start.message")
            self._model = message.get("model")
            self._usage.update(message.get("usage") or {})
        elif kind == "content_block_start":
            index = as_int(payload.get("index"), "content_block_start.index")
            block = dict(as_object(payload.get("content_block"), "content_block"))
            if block.get("type") == "tool_use":
                self._partial_json[index] = []
            self._blocks[index] = block
        elif kind == "content_block_delta":
            index = as_int(payload.get("index"), "content_block_delta.index")
            delta = as_object(payload.get("delta"), "content_block_delta.delta")
            target = self._blocks.get(index)
            if target is None:
                raise WireError(f"content_block_delta for unknown block {index}")
            kind = delta.get("type")
            if kind == "text_delta":
                target["text"] = (target.get("text") or "") + (delta.get("text") or "")
            elif kind == "thinking_delta":
                target["thinking"] = (target.get("thinking") or "") + (delta.get("thinking") or "")
            elif kind == "input_json_delta":
                self._partial_json.setdefault(index, []).append(delta.get("partial_json") or "")
        elif kind == "message_delta":
            delta = payload.get("delta") or {}
            if isinstance(delta, dict) and "stop_reason" in delta:
                self._stop = delta["stop_reason"]
            self._usage.update(payload.get("usage") or {})
        elif kind == "message_stop":
            self.done = True
        elif kind == "error":
            raise WireError(f"stream error: {payload.get('error')!r}")

    def response(self) -> ModelResponse:
        if not self.done:
            raise WireError(f"stream ended after {self._events} event(s) without message_stop")
        blocks = []
        for index, block in sorted(self._blocks.items()):
            if index in self._partial_json:
                text = "".join(self._partial_json[index])
                try:
                    block["input"] = loads(text) if text else {}
                except WireError:
                    raise WireError(f"tool_use block {index}: input is not JSON") from None
            blocks.append(block)
        return _response(blocks, self._stop, self._usage, self._model)


# --------------------------------------------------------------------------- server side


def _blocks_of(content: Any, where: str) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [as_object(b, f"{where}[]") for b in as_list(content, where)]


def _text(content: Any, where: str) -> str:
    if isinstance(content, str):
        return content
    return "".join(
        b.get("text") or "" for b in _blocks_of(content, where) if b.get("type") == "text"
    )


def parse_request(body: Any) -> ServerRequest:
    """A Messages request body as the `ModelRequest` it asks for."""
    body = as_object(body, "request")
    messages: list[Message] = []
    system = body.get("system")
    if system:
        messages.append(Message.system(_text(system, "system")))
    for index, raw in enumerate(as_list(body.get("messages"), "messages")):
        turn = as_object(raw, f"messages[{index}]")
        role = turn.get("role")
        where = f"messages[{index}]"
        blocks = _blocks_of(turn.get("content"), f"{where}.content")
        if role == "user":
            texts: list[str] = []
            for block in blocks:
                if block.get("type") == "tool_result":
                    messages.append(
                        Message.tool(
                            _text(block.get("content", ""), f"{where}.tool_result"),
                            tool_call_id=as_str(
                                block.get("tool_use_id"), f"{where}.tool_use_id", optional=False
                            )
                            or "",
                        )
                    )
                elif block.get("type") == "text":
                    texts.append(block.get("text") or "")
            if texts:
                messages.append(Message.user("".join(texts)))
        elif role == "assistant":
            text = [b.get("text") or "" for b in blocks if b.get("type") == "text"]
            calls = tuple(
                ToolCall(
                    id=as_str(b.get("id"), f"{where}.tool_use.id", optional=False) or "",
                    name=as_str(b.get("name"), f"{where}.tool_use.name", optional=False) or "",
                    arguments=_arguments(b.get("input", {})),
                )
                for b in blocks
                if b.get("type") == "tool_use"
            )
            messages.append(Message.assistant("".join(text) if text else None, tool_calls=calls))
        elif role == "system":
            # Claude Code puts system turns between the others (reminders, agent lists).
            messages.append(Message.system(_text(turn.get("content"), f"{where}.content")))
        else:
            raise WireError(f"{where}.role: expected 'user', 'assistant' or 'system', got {role!r}")
    if not messages:
        raise WireError("messages: at least one message is required")
    tools = []
    for index, raw in enumerate(as_list(body.get("tools"), "tools")):
        tool = as_object(raw, f"tools[{index}]")
        spec: dict[str, Any] = {
            "name": as_str(tool.get("name"), f"tools[{index}].name", optional=False)
        }
        if tool.get("description") is not None:
            spec["description"] = tool["description"]
        if tool.get("input_schema") is not None:
            spec["parameters"] = as_object(tool["input_schema"], f"tools[{index}].input_schema")
        tools.append(ToolSpec(**spec))
    stop = body.get("stop_sequences")
    try:
        request = ModelRequest(
            messages=tuple(messages),
            tools=tuple(tools),
            sampling=Sampling(
                temperature=body.get("temperature"),
                top_p=body.get("top_p"),
                max_tokens=body.get("max_tokens"),
                stop=tuple(stop) if stop else None,
            ),
            model=as_str(body.get("model"), "model"),
        )
    except ValueError as exc:
        if isinstance(exc, WireError):
            raise
        raise WireError(f"request: {exc}") from None
    known = {
        "model",
        "system",
        "messages",
        "tools",
        "temperature",
        "top_p",
        "max_tokens",
        "stop_sequences",
        "stream",
    }
    options = {k: v for k, v in body.items() if k not in known}
    return ServerRequest(request=request, stream=bool(body.get("stream")), options=options)


def _content_blocks(message: Message) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    if message.reasoning:
        blocks.append({"type": "thinking", "thinking": message.reasoning, "signature": ""})
    if message.content:
        blocks.append({"type": "text", "text": message.content})
    blocks.extend(
        {"type": "tool_use", "id": call.id, "name": call.name, "input": tool_input(call)}
        for call in message.tool_calls
    )
    return blocks


def _stop_reason(response: ModelResponse) -> str:
    if response.finish_reason in _FINISH_TO_STOP:
        return _FINISH_TO_STOP[response.finish_reason]
    if response.finish_reason:
        return response.finish_reason
    return "tool_use" if response.message.tool_calls else "end_turn"


def build_response(response: ModelResponse, *, model: str, id: str = "msg_0") -> dict[str, Any]:
    """The Messages reply a server sends for `response`."""
    return {
        "id": id,
        "type": "message",
        "role": "assistant",
        "model": response.model or model,
        "content": _content_blocks(response.message),
        "stop_reason": _stop_reason(response),
        "stop_sequence": None,
        "usage": {
            "input_tokens": response.usage.prompt_tokens,
            "output_tokens": response.usage.completion_tokens,
        },
    }


def stream_events(response: ModelResponse, *, model: str, id: str = "msg_0") -> list[bytes]:
    """The SSE events of a streamed reply (message_start ... message_stop)."""
    whole = build_response(response, model=model, id=id)
    start = {
        **whole,
        "content": [],
        "stop_reason": None,
        "usage": {"input_tokens": whole["usage"]["input_tokens"], "output_tokens": 0},
    }
    events = [sse({"type": "message_start", "message": start}, "message_start")]
    for index, block in enumerate(whole["content"]):
        kind = block["type"]
        if kind == "text":
            empty: dict[str, Any] = {"type": "text", "text": ""}
            delta: dict[str, Any] = {"type": "text_delta", "text": block["text"]}
        elif kind == "thinking":
            empty = {"type": "thinking", "thinking": "", "signature": ""}
            delta = {"type": "thinking_delta", "thinking": block["thinking"]}
        else:
            empty = {**block, "input": {}}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        events.append(
            sse(
                {"type": "content_block_start", "index": index, "content_block": empty},
                "content_block_start",
            )
        )
        events.append(
            sse(
                {"type": "content_block_delta", "index": index, "delta": delta},
                "content_block_delta",
            )
        )
        events.append(sse({"type": "content_block_stop", "index": index}, "content_block_stop"))
    message_delta = {
        "type": "message_delta",
        "delta": {"stop_reason": whole["stop_reason"], "stop_sequence": None},
        "usage": {"output_tokens": whole["usage"]["output_tokens"]},
    }
    events.append(sse(message_delta, "message_delta"))
    events.append(sse({"type": "message_stop"}, "message_stop"))
    return events


def error_body(message: str, *, type: str = "api_error") -> dict[str, Any]:
    """Anthropic's error body."""
    return {"type": "error", "error": {"type": type, "message": message}}
