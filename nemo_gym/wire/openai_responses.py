"""The OpenAI Responses API (`POST /v1/responses`), both directions.

Tool turns go out as `function_call` / `function_call_output` input items; earlier
reasoning is not sent back (the API only takes reasoning items it issued). The reply's
`message` items give the text (and, with `include=["message.output_text.logprobs"]`,
logprobs), `reasoning` items the reasoning (summary, or vLLM's raw reasoning text),
`function_call` items the tool calls. A streamed reply is read from its final
`response.completed` / `response.incomplete` / `response.failed` event, which carries
the whole response.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from nemo_gym.errors import ModelError
from nemo_gym.records import Message, ModelRequest, ModelResponse, Sampling, ToolCall, ToolSpec
from nemo_gym.wire.common import (
    ServerRequest,
    WireError,
    as_list,
    as_object,
    as_str,
    loads,
    logprobs,
    sse,
    usage,
)
from nemo_gym.wire.openai_chat import error_body, tool_call_id

__all__ = [
    "PATH",
    "ResponsesStream",
    "build_request",
    "build_response",
    "error_body",
    "parse_request",
    "parse_response",
    "stream_events",
]

log = logging.getLogger(__name__)

PATH = "/responses"

_TERMINAL = ("response.completed", "response.incomplete", "response.failed")


def input_items(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """The Responses `input` array for a conversation."""
    items: list[dict[str, Any]] = []
    for index, message in enumerate(messages):
        if message.role == "tool":
            items.append(
                {
                    "type": "function_call_output",
                    "call_id": tool_call_id(message, index),
                    "output": message.content or "",
                }
            )
        elif message.role == "assistant":
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


def build_request(
    request: ModelRequest,
    *,
    model: str,
    logprobs: bool = False,
    store: bool = False,
    extra_body: dict[str, Any] | None = None,
    stream: bool = False,
) -> tuple[dict[str, Any], Sampling]:
    """(JSON body, the sampling it sends). The API has no `stop` (refused) and no `seed`."""
    sampling = request.sampling
    if sampling.stop:
        raise ModelError(
            "the Responses API has no stop sequences; use OpenAIChat for a request "
            f"with stop={list(sampling.stop)!r}",
            retryable=False,
            code="unsupported",
        )
    body: dict[str, Any] = {
        "model": request.model or model,
        "input": input_items(request.messages),
        "store": store,
    }
    if request.tools:
        body["tools"] = [
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
        body["temperature"] = sampling.temperature
    if sampling.top_p is not None:
        body["top_p"] = sampling.top_p
    if sampling.max_tokens is not None:
        body["max_output_tokens"] = sampling.max_tokens
    if sampling.seed is not None:
        log.debug("the Responses API has no seed; dropping seed=%s", sampling.seed)
    if logprobs:
        body["include"] = ["message.output_text.logprobs"]
    if stream:
        body["stream"] = True
    extra = {**extra_body, **sampling.extra} if extra_body else sampling.extra
    if extra:
        body.update(extra)
    sent = Sampling.model_construct(
        temperature=body.get("temperature"),
        top_p=body.get("top_p"),
        max_tokens=body.get("max_output_tokens"),
        seed=None,
        stop=None,
        extra=dict(extra),
    )
    return body, sent


def _finish_reason(body: dict[str, Any], has_calls: bool) -> str | None:
    status = body.get("status")
    if status == "incomplete":
        details = body.get("incomplete_details")
        reason = details.get("reason") if isinstance(details, dict) else None
        return "length" if reason == "max_output_tokens" else (reason or "incomplete")
    if status in ("completed", None):
        return "tool_calls" if has_calls else "stop"
    return str(status)


def failure(body: dict[str, Any]) -> ModelError:
    """The `ModelError` for a response with `status="failed"`."""
    error = body.get("error")
    code = error.get("code") if isinstance(error, dict) else None
    message = error.get("message") if isinstance(error, dict) else None
    return ModelError(
        f"response failed: {message or code or 'no detail'}",
        retryable=code in ("server_error", "rate_limit_exceeded"),
        code=str(code) if code else "response_failed",
    )


def parse_response(body: Any, *, want_logprobs: bool = False) -> ModelResponse:
    """A response object as a `ModelResponse`; `ModelError` if it failed, `WireError` if bad."""
    body = as_object(body, "response")
    if body.get("status") == "failed":
        raise failure(body)
    texts: list[str] = []
    reasoning: list[str] = []
    calls: list[ToolCall] = []
    lps: list[Any] | None = [] if want_logprobs else None
    for index, raw in enumerate(as_list(body.get("output"), "output")):
        item = as_object(raw, f"output[{index}]")
        kind = item.get("type")
        if kind == "message":
            for part in as_list(item.get("content"), f"output[{index}].content"):
                if not isinstance(part, dict):
                    continue
                part_type = part.get("type")
                if part_type == "output_text":
                    texts.append(as_str(part.get("text"), f"output[{index}].text") or "")
                    if lps is not None:
                        lps.extend(
                            lp.get("logprob") if isinstance(lp, dict) else None
                            for lp in as_list(part.get("logprobs"), "logprobs")
                        )
                elif part_type == "refusal":
                    texts.append(as_str(part.get("refusal"), f"output[{index}].refusal") or "")
        elif kind == "reasoning":
            summary = [
                s["text"]
                for s in as_list(item.get("summary"), "summary")
                if isinstance(s, dict) and isinstance(s.get("text"), str) and s["text"]
            ]
            if not summary:
                # vLLM (gpt-oss and others) returns the raw reasoning as content.
                summary = [
                    c["text"]
                    for c in as_list(item.get("content"), "content")
                    if isinstance(c, dict) and isinstance(c.get("text"), str) and c["text"]
                ]
            reasoning.extend(summary)
        elif kind == "function_call":
            where = f"output[{index}]"
            arguments = item.get("arguments")
            calls.append(
                ToolCall(
                    id=as_str(item.get("call_id"), f"{where}.call_id", optional=False),
                    name=as_str(item.get("name"), f"{where}.name", optional=False),
                    arguments=arguments if isinstance(arguments, str) else "",
                )
            )
        else:
            log.debug("ignoring Responses output item of type %r", kind)
    raw_usage = body.get("usage") or {}
    if not isinstance(raw_usage, dict):
        raise WireError("usage: expected a JSON object")
    return ModelResponse(
        message=Message(
            role="assistant",
            content="".join(texts) if texts else None,
            reasoning="\n\n".join(reasoning) if reasoning else None,
            tool_calls=tuple(calls),
        ),
        finish_reason=_finish_reason(body, bool(calls)),
        usage=usage(raw_usage.get("input_tokens"), raw_usage.get("output_tokens"), "usage"),
        model=as_str(body.get("model"), "model"),
        completion_logprobs=logprobs(lps, None) if lps else None,
    )


class ResponsesStream:
    """Reads a streamed response: the final event carries the whole response object."""

    def __init__(self, *, want_logprobs: bool = False) -> None:
        self.done = False
        self._final: dict[str, Any] | None = None
        self._want_logprobs = want_logprobs
        self._events = 0

    def feed_event(self, event: str | None, data: str) -> None:
        self._events += 1
        payload = as_object(loads(data), f"event {event!r}")
        kind = event or payload.get("type")
        if kind == "error":
            message = payload.get("message") or payload.get("error") or payload
            raise WireError(f"stream error: {message!r}")
        if kind in _TERMINAL:
            self._final = as_object(payload.get("response"), f"{kind}.response")
            self.done = True

    def response(self) -> ModelResponse:
        if self._final is None:
            raise WireError(
                f"stream ended after {self._events} event(s) without response.completed"
            )
        return parse_response(self._final, want_logprobs=self._want_logprobs)


# --------------------------------------------------------------------------- server side


def _text_of(content: Any, where: str) -> str:
    if isinstance(content, str):
        return content
    parts = as_list(content, where)
    return "".join(
        part.get("text") or ""
        for part in parts
        if isinstance(part, dict) and part.get("type") in ("input_text", "output_text", "text")
    )


def parse_request(body: Any) -> ServerRequest:
    """A Responses request body as the `ModelRequest` it asks for.

    `instructions` becomes a leading system message; a string `input` one user message.
    """
    body = as_object(body, "request")
    messages: list[Message] = []
    if isinstance(body.get("instructions"), str) and body["instructions"]:
        messages.append(Message.system(body["instructions"]))
    raw_input = body.get("input")
    if isinstance(raw_input, str):
        messages.append(Message.user(raw_input))
    else:
        for index, raw in enumerate(as_list(raw_input, "input")):
            item = as_object(raw, f"input[{index}]")
            kind = item.get("type", "message")
            where = f"input[{index}]"
            if kind == "function_call":
                call = ToolCall(
                    id=as_str(item.get("call_id"), f"{where}.call_id", optional=False),
                    name=as_str(item.get("name"), f"{where}.name", optional=False),
                    arguments=as_str(item.get("arguments"), f"{where}.arguments") or "",
                )
                if messages and messages[-1].role == "assistant":
                    last = messages[-1]
                    messages[-1] = last.model_copy(update={"tool_calls": (*last.tool_calls, call)})
                else:
                    messages.append(Message.assistant(None, tool_calls=(call,)))
            elif kind == "function_call_output":
                output = item.get("output")
                messages.append(
                    Message.tool(
                        output if isinstance(output, str) else _text_of(output, where),
                        tool_call_id=as_str(item.get("call_id"), f"{where}.call_id", optional=False)
                        or "",
                    )
                )
            elif kind == "message":
                role = item.get("role")
                if role == "developer":
                    role = "system"
                if role not in ("system", "user", "assistant"):
                    raise WireError(f"{where}.role: unknown role {role!r}")
                messages.append(Message(role=role, content=_text_of(item.get("content"), where)))
            else:
                log.debug("ignoring Responses input item of type %r", kind)
    if not messages:
        raise WireError("input: at least one input item is required")
    tools = []
    for index, raw in enumerate(as_list(body.get("tools"), "tools")):
        tool = as_object(raw, f"tools[{index}]")
        if tool.get("type") != "function":
            raise WireError(f"tools[{index}].type: only function tools are served")
        spec: dict[str, Any] = {
            "name": as_str(tool.get("name"), f"tools[{index}].name", optional=False)
        }
        if tool.get("description") is not None:
            spec["description"] = tool["description"]
        if tool.get("parameters") is not None:
            spec["parameters"] = as_object(tool["parameters"], f"tools[{index}].parameters")
        tools.append(ToolSpec(**spec))
    try:
        request = ModelRequest(
            messages=tuple(messages),
            tools=tuple(tools),
            sampling=Sampling(
                temperature=body.get("temperature"),
                top_p=body.get("top_p"),
                max_tokens=body.get("max_output_tokens"),
            ),
            model=as_str(body.get("model"), "model"),
        )
    except ValueError as exc:
        if isinstance(exc, WireError):
            raise
        raise WireError(f"request: {exc}") from None
    known = {
        "model",
        "input",
        "instructions",
        "tools",
        "temperature",
        "top_p",
        "max_output_tokens",
        "stream",
    }
    options = {k: v for k, v in body.items() if k not in known}
    return ServerRequest(request=request, stream=bool(body.get("stream")), options=options)


def build_response(
    response: ModelResponse, *, model: str, id: str = "resp_0", created: int = 0
) -> dict[str, Any]:
    """The response object a server sends for `response`."""
    message = response.message
    output: list[dict[str, Any]] = []
    if message.reasoning:
        output.append(
            {
                "type": "reasoning",
                "id": f"rs_{id}",
                "summary": [{"type": "summary_text", "text": message.reasoning}],
            }
        )
    if message.content is not None:
        part: dict[str, Any] = {"type": "output_text", "text": message.content, "annotations": []}
        if response.completion_logprobs is not None:
            part["logprobs"] = [
                {"token": "", "logprob": lp, "bytes": [], "top_logprobs": []}
                for lp in response.completion_logprobs
            ]
        output.append(
            {
                "type": "message",
                "id": f"msg_{id}",
                "role": "assistant",
                "status": "completed",
                "content": [part],
            }
        )
    for position, call in enumerate(message.tool_calls):
        output.append(
            {
                "type": "function_call",
                "id": f"fc_{id}_{position}",
                "call_id": call.id,
                "name": call.name,
                "arguments": call.arguments,
                "status": "completed",
            }
        )
    incomplete = response.finish_reason == "length"
    u = response.usage
    return {
        "id": id,
        "object": "response",
        "created_at": created,
        "model": response.model or model,
        "status": "incomplete" if incomplete else "completed",
        "incomplete_details": {"reason": "max_output_tokens"} if incomplete else None,
        "output": output,
        "usage": {
            "input_tokens": u.prompt_tokens,
            "output_tokens": u.completion_tokens,
            "total_tokens": u.total_tokens,
        },
        "error": None,
    }


def stream_events(
    response: ModelResponse, *, model: str, id: str = "resp_0", created: int = 0
) -> list[bytes]:
    """The SSE events of a streamed response, ending in the terminal event."""
    whole = build_response(response, model=model, id=id, created=created)
    started = {**whole, "status": "in_progress", "output": [], "incomplete_details": None}
    events = [sse({"type": "response.created", "response": started}, "response.created")]
    for index, item in enumerate(whole["output"]):
        added = {"type": "response.output_item.added", "output_index": index, "item": item}
        events.append(sse(added, "response.output_item.added"))
        if item["type"] == "message":
            delta = {
                "type": "response.output_text.delta",
                "item_id": item["id"],
                "output_index": index,
                "content_index": 0,
                "delta": item["content"][0]["text"],
            }
            events.append(sse(delta, "response.output_text.delta"))
        done = {"type": "response.output_item.done", "output_index": index, "item": item}
        events.append(sse(done, "response.output_item.done"))
    terminal = "response.incomplete" if whole["status"] == "incomplete" else "response.completed"
    events.append(sse({"type": terminal, "response": whole}, terminal))
    return events
