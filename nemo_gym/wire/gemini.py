"""Google's Gemini API (`POST /v1beta/models/{model}:generateContent`), both directions.

Written from the REST shapes of the `@google/genai` SDK (the `mldev` converters that
Gemini CLI's bundle sends through). `:streamGenerateContent?alt=sse` streams the same
`GenerateContentResponse` objects as SSE `data:` events, without event names.

Wire-format decisions:

- system messages are joined (blank line between) into `systemInstruction`;
- the conversation is `contents` of `user` and `model` turns; an assistant's tool calls
  are `functionCall` parts, each tool result a `functionResponse` part in a user turn;
  consecutive turns of one role merge, as the API wants alternating roles;
- a `functionCall.args` is the parsed JSON arguments; arguments that are not a JSON
  object are sent as `{"_raw": "<text>"}` (the API only takes an object);
- a tool result is sent as `functionResponse.response = {"output": text}` and read back
  from `output` (or `error`, Gemini CLI's failed-tool shape); any other object is read as
  its JSON text;
- a `functionResponse` without an `id` (the API does not require one) answers the
  earliest unanswered call of that name, so tool results still join their calls;
- a tool's schema is `parametersJsonSchema` when sent, else `parameters` (OpenAPI
  `Schema`, whose upper-case `type` names are lower-cased to JSON Schema's);
- thought parts (`thought: true`) are the reply's reasoning; earlier reasoning is not
  sent back (the API wants its own `thoughtSignature`, which `Message` does not keep);
- `generationConfig.topK` and the other knobs ride in `ServerRequest.options`.
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

API_VERSION = "v1beta"
METHODS = ("generateContent", "streamGenerateContent")
"""The two methods a model serves (`/v1beta/models/{model}:{method}`)."""

FINISH_REASONS = {"STOP": "stop", "MAX_TOKENS": "length"}
_FINISH_TO_REASON = {"stop": "STOP", "length": "MAX_TOKENS", "tool_calls": "STOP"}


def path(model: str, *, stream: bool = False) -> str:
    """The request path of `model` (under the base URL); streaming adds `?alt=sse`."""
    if stream:
        return f"/{API_VERSION}/models/{model}:streamGenerateContent?alt=sse"
    return f"/{API_VERSION}/models/{model}:generateContent"


def split_path(path: str) -> tuple[str, str] | None:
    """(model, method) of a `/models/{model}:{method}` path below the version; else None."""
    prefix = "/models/"
    if not path.startswith(prefix):
        return None
    model, sep, method = path[len(prefix) :].rpartition(":")
    if not sep or not model or "/" in model or method not in METHODS:
        return None
    return model, method


def _args(call: ToolCall) -> dict[str, Any]:
    try:
        value = json.loads(call.arguments or "{}")
    except json.JSONDecodeError:
        value = None
    return value if isinstance(value, dict) else {"_raw": call.arguments}


def _arguments(value: Any, where: str) -> str:
    if value is None:
        return "{}"
    if not isinstance(value, dict):
        raise WireError(f"{where}: expected a JSON object")
    if set(value) == {"_raw"} and isinstance(value["_raw"], str):
        return value["_raw"]
    return json.dumps(value, ensure_ascii=False)


def _result_text(response: Any, where: str) -> str:
    if response is None:
        return ""
    value = as_object(response, where)
    for key in ("output", "error"):
        if set(value) == {key} and isinstance(value[key], str):
            return value[key]
    # Any other shape is kept whole: dropping keys would hide what the program sent.
    return json.dumps(value, ensure_ascii=False)


def _lower_types(schema: Any) -> Any:
    # OpenAPI Schema's `type` is an enum of upper-case names (`OBJECT`); JSON Schema's is not.
    if isinstance(schema, dict):
        return {
            key: value.lower() if key == "type" and isinstance(value, str) else _lower_types(value)
            for key, value in schema.items()
        }
    if isinstance(schema, list):
        return [_lower_types(item) for item in schema]
    return schema


# --------------------------------------------------------------------------- client side


def contents_out(messages: Sequence[Message]) -> tuple[str | None, list[dict[str, Any]]]:
    """(system instruction text, Gemini `contents`) for a chat-shaped conversation."""
    system: list[str] = []
    turns: list[dict[str, Any]] = []
    names: dict[str, str] = {}

    def add(role: str, parts: list[dict[str, Any]]) -> None:
        if turns and turns[-1]["role"] == role:
            turns[-1]["parts"].extend(parts)
        else:
            turns.append({"role": role, "parts": parts})

    for index, message in enumerate(messages):
        if message.role == "system":
            if message.content:
                system.append(message.content)
        elif message.role == "user":
            add("user", [{"text": message.content or ""}])
        elif message.role == "tool":
            call_id = message.tool_call_id
            if not call_id or call_id not in names:
                raise ModelError(
                    f"message {index} (role 'tool') has tool_call_id {call_id!r}, which no "
                    "earlier assistant tool call has; a functionResponse must name its call",
                    retryable=False,
                    code="bad_request",
                )
            response = {"output": message.content or ""}
            part = {
                "functionResponse": {"id": call_id, "name": names[call_id], "response": response}
            }
            add("user", [part])
        else:
            parts: list[dict[str, Any]] = []
            if message.content:
                parts.append({"text": message.content})
            for call in message.tool_calls:
                names[call.id] = call.name
                parts.append(
                    {"functionCall": {"id": call.id, "name": call.name, "args": _args(call)}}
                )
            if not parts:
                log.debug("skipping empty assistant message %d", index)
                continue
            add("model", parts)
    return ("\n\n".join(system) if system else None), turns


def build_request(
    request: ModelRequest, *, extra_body: dict[str, Any] | None = None
) -> tuple[dict[str, Any], Sampling]:
    """(JSON body, the sampling it sends); the model goes in the path (`path`). A sampling
    knob other than `top_k` is refused (`nemo_gym.knobs`)."""
    sampling = request.sampling
    refuse_knobs(sampling.extra, "Gemini", ("top_k",))
    system, contents = contents_out(request.messages)
    body: dict[str, Any] = {"contents": contents}
    if system is not None:
        body["systemInstruction"] = {"parts": [{"text": system}]}
    if request.tools:
        declarations = [
            {"name": s.name, "description": s.description, "parametersJsonSchema": s.parameters}
            for s in request.tools
        ]
        body["tools"] = [{"functionDeclarations": declarations}]
    config: dict[str, Any] = {}
    for field, value in (
        ("temperature", sampling.temperature),
        ("topP", sampling.top_p),
        ("maxOutputTokens", sampling.max_tokens),
        ("seed", sampling.seed),
        ("stopSequences", list(sampling.stop) if sampling.stop else None),
        ("topK", sampling.extra.get("top_k")),
    ):
        if value is not None:
            config[field] = value
    if config:
        body["generationConfig"] = config
    if extra_body:
        body.update(extra_body)
    stop = config.get("stopSequences")
    sent = Sampling.model_construct(
        temperature=config.get("temperature"),
        top_p=config.get("topP"),
        max_tokens=config.get("maxOutputTokens"),
        seed=config.get("seed"),
        stop=tuple(stop) if stop else None,
        extra=dict(sampling.extra),
    )
    return body, sent


def _response(parts: list[Any], finish: Any, raw_usage: Any, model: Any) -> ModelResponse:
    texts: list[str] = []
    thoughts: list[str] = []
    calls: list[ToolCall] = []
    for index, raw in enumerate(parts):
        where = f"candidates[0].content.parts[{index}]"
        part = as_object(raw, where)
        if "functionCall" in part:
            call = as_object(part["functionCall"], f"{where}.functionCall")
            name = as_str(call.get("name"), f"{where}.functionCall.name", optional=False)
            ident = as_str(call.get("id"), f"{where}.functionCall.id") or f"call_{index}_{name}"
            arguments = _arguments(call.get("args"), f"{where}.functionCall.args")
            calls.append(ToolCall(id=ident, name=name, arguments=arguments))
        elif "text" in part:
            text = as_str(part.get("text"), f"{where}.text") or ""
            (thoughts if part.get("thought") is True else texts).append(text)
        else:
            log.debug("ignoring Gemini part with keys %s", sorted(part))
    usage = as_object(raw_usage or {}, "usageMetadata")
    prompt = as_int(usage.get("promptTokenCount"), "usageMetadata.promptTokenCount")
    output = as_int(usage.get("candidatesTokenCount"), "usageMetadata.candidatesTokenCount")
    thought = as_int(usage.get("thoughtsTokenCount"), "usageMetadata.thoughtsTokenCount")
    reason = as_str(finish, "candidates[0].finishReason")
    if reason is not None:
        reason = "tool_calls" if calls and reason == "STOP" else FINISH_REASONS.get(reason, reason)
    return ModelResponse(
        message=Message(
            role="assistant",
            content="".join(texts) if texts else None,
            reasoning="".join(thoughts) if thoughts else None,
            tool_calls=tuple(calls),
        ),
        finish_reason=reason,
        usage=Usage(prompt_tokens=prompt, completion_tokens=output + thought),
        model=as_str(model, "modelVersion"),
    )


def _candidate(body: dict[str, Any]) -> dict[str, Any]:
    candidates = as_list(body.get("candidates"), "candidates")
    if not candidates:
        feedback = body.get("promptFeedback")
        raise WireError(f"candidates: none in the reply (promptFeedback {feedback!r})")
    return as_object(candidates[0], "candidates[0]")


def parse_response(body: Any) -> ModelResponse:
    """A `GenerateContentResponse` as a `ModelResponse`; `WireError` when it is not one."""
    body = as_object(body, "response")
    if "error" in body:
        raise WireError(f"error body on a success status: {body.get('error')!r}")
    candidate = _candidate(body)
    content = as_object(candidate.get("content") or {}, "candidates[0].content")
    return _response(
        as_list(content.get("parts"), "candidates[0].content.parts"),
        candidate.get("finishReason"),
        body.get("usageMetadata"),
        body.get("modelVersion"),
    )


class GenerateStream:
    """Gathers a streamed reply: each SSE event is a partial `GenerateContentResponse`;
    the parts concatenate, the last finishReason and usageMetadata stand."""

    def __init__(self) -> None:
        self._parts: list[Any] = []
        self._finish: Any = None
        self._usage: Any = None
        self._model: Any = None
        self._events = 0

    @property
    def done(self) -> bool:
        return self._finish is not None

    def feed_event(self, event: str | None, data: str) -> None:
        self._events += 1
        payload = as_object(loads(data), f"event {self._events}")
        if "error" in payload:
            raise WireError(f"stream error: {payload['error']!r}")
        self._usage = payload.get("usageMetadata", self._usage)
        self._model = payload.get("modelVersion", self._model)
        if not payload.get("candidates"):
            return
        candidate = _candidate(payload)
        content = as_object(candidate.get("content") or {}, "candidates[0].content")
        self._parts.extend(as_list(content.get("parts"), "candidates[0].content.parts"))
        if candidate.get("finishReason") is not None:
            self._finish = candidate["finishReason"]

    def response(self) -> ModelResponse:
        if not self.done:
            raise WireError(f"stream ended after {self._events} event(s) without a finishReason")
        # A text split over events is one text; a part of another kind stays whole.
        parts: list[Any] = []
        for part in self._parts:
            if (
                parts
                and set(part) <= {"text", "thought"}
                and set(parts[-1]) <= {"text", "thought"}
                and bool(part.get("thought")) == bool(parts[-1].get("thought"))
            ):
                parts[-1] = {**parts[-1], "text": parts[-1]["text"] + (part.get("text") or "")}
            else:
                parts.append(dict(part))
        return _response(parts, self._finish, self._usage, self._model)


# --------------------------------------------------------------------------- server side


def _texts(content: Any, where: str) -> str:
    if isinstance(content, str):
        return content
    content = as_object(content, where)
    return "".join(
        as_str(p.get("text"), f"{where}.parts[].text") or ""
        for p in (
            as_object(raw, f"{where}.parts[]")
            for raw in as_list(content.get("parts"), f"{where}.parts")
        )
        if not p.get("thought")
    )


def _tools(raw_tools: Any) -> list[ToolSpec]:
    specs: list[ToolSpec] = []
    for index, raw in enumerate(as_list(raw_tools, "tools")):
        tool = as_object(raw, f"tools[{index}]")
        declarations = tool.get("functionDeclarations")
        if declarations is None:
            # googleSearch, codeExecution, ...: server-side tools a policy cannot run.
            log.debug("ignoring Gemini tool with keys %s", sorted(tool))
            continue
        for number, item in enumerate(
            as_list(declarations, f"tools[{index}].functionDeclarations")
        ):
            where = f"tools[{index}].functionDeclarations[{number}]"
            declaration = as_object(item, where)
            spec: dict[str, Any] = {
                "name": as_str(declaration.get("name"), f"{where}.name", optional=False)
            }
            if declaration.get("description") is not None:
                spec["description"] = as_str(declaration["description"], f"{where}.description")
            if declaration.get("parametersJsonSchema") is not None:
                spec["parameters"] = as_object(
                    declaration["parametersJsonSchema"], f"{where}.parametersJsonSchema"
                )
            elif declaration.get("parameters") is not None:
                parameters = as_object(declaration["parameters"], f"{where}.parameters")
                spec["parameters"] = _lower_types(parameters)
            specs.append(ToolSpec(**spec))
    return specs


def parse_request(body: Any, *, model: str | None = None, stream: bool = False) -> ServerRequest:
    """A `GenerateContentRequest` body as the `ModelRequest` it asks for; `model` and
    `stream` come from the path (`split_path`)."""
    body = as_object(body, "request")
    messages: list[Message] = []
    system = body.get("systemInstruction")
    if system:
        messages.append(Message.system(_texts(system, "systemInstruction")))
    pending: list[tuple[str, str]] = []  # (call id, name) of calls not yet answered
    for index, raw in enumerate(as_list(body.get("contents"), "contents")):
        where = f"contents[{index}]"
        turn = as_object(raw, where)
        role = turn.get("role", "user")
        parts = [
            as_object(p, f"{where}.parts[{n}]")
            for n, p in enumerate(as_list(turn.get("parts"), f"{where}.parts"))
        ]
        if role == "model":
            texts: list[str] = []
            calls: list[ToolCall] = []
            for n, part in enumerate(parts):
                if "functionCall" in part:
                    call = as_object(part["functionCall"], f"{where}.parts[{n}].functionCall")
                    name = as_str(
                        call.get("name"), f"{where}.parts[{n}].functionCall.name", optional=False
                    )
                    ident = as_str(call.get("id"), f"{where}.parts[{n}].functionCall.id")
                    ident = ident or f"call_{index}_{n}"
                    args = _arguments(call.get("args"), f"{where}.parts[{n}].functionCall.args")
                    calls.append(ToolCall(id=ident, name=name, arguments=args))
                    pending.append((ident, name))
                elif "text" in part and not part.get("thought"):
                    texts.append(as_str(part.get("text"), f"{where}.parts[{n}].text") or "")
            messages.append(
                Message.assistant("".join(texts) if texts else None, tool_calls=tuple(calls))
            )
        elif role == "user":
            texts = []
            for n, part in enumerate(parts):
                if "functionResponse" in part:
                    answer = as_object(
                        part["functionResponse"], f"{where}.parts[{n}].functionResponse"
                    )
                    named = as_str(answer.get("name"), f"{where}.parts[{n}].functionResponse.name")
                    answers = as_str(answer.get("id"), f"{where}.parts[{n}].functionResponse.id")
                    match = next(
                        (
                            i
                            for i, (c, m) in enumerate(pending)
                            if c == answers or (not answers and m == named)
                        ),
                        None,
                    )
                    call_id = pending.pop(match)[0] if match is not None else answers
                    if not call_id:
                        raise WireError(
                            f"{where}.parts[{n}].functionResponse: no id, and no earlier "
                            f"functionCall named {named!r} is unanswered"
                        )
                    text = _result_text(
                        answer.get("response"), f"{where}.parts[{n}].functionResponse.response"
                    )
                    messages.append(Message.tool(text, tool_call_id=call_id))
                elif "text" in part and not part.get("thought"):
                    texts.append(as_str(part.get("text"), f"{where}.parts[{n}].text") or "")
            if texts:
                messages.append(Message.user("".join(texts)))
        else:
            raise WireError(f"{where}.role: expected 'user' or 'model', got {role!r}")
    if not messages:
        raise WireError("contents: at least one turn is required")
    config = as_object(body.get("generationConfig") or {}, "generationConfig")
    stop = config.get("stopSequences")
    try:
        request = ModelRequest(
            messages=tuple(messages),
            tools=tuple(_tools(body.get("tools"))),
            sampling=Sampling(
                temperature=config.get("temperature"),
                top_p=config.get("topP"),
                max_tokens=config.get("maxOutputTokens"),
                seed=config.get("seed"),
                stop=tuple(stop) if stop else None,
            ),
            model=model,
        )
    except ValueError as exc:
        if isinstance(exc, WireError):
            raise
        raise WireError(f"request: {exc}") from None
    known = {"contents", "systemInstruction", "tools"}
    options = {k: v for k, v in body.items() if k not in known}
    rest = {
        k: v
        for k, v in config.items()
        if k not in {"temperature", "topP", "maxOutputTokens", "seed", "stopSequences"}
    }
    if rest:
        options["generationConfig"] = rest
    return ServerRequest(request=request, stream=stream, options=options)


def _parts(message: Message) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = []
    if message.reasoning:
        parts.append({"text": message.reasoning, "thought": True})
    if message.content:
        parts.append({"text": message.content})
    parts.extend(
        {"functionCall": {"id": call.id, "name": call.name, "args": _args(call)}}
        for call in message.tool_calls
    )
    return parts


def _finish_reason(response: ModelResponse) -> str:
    reason = response.finish_reason or "stop"
    return _FINISH_TO_REASON.get(reason, reason.upper())


def _usage_metadata(response: ModelResponse) -> dict[str, int]:
    prompt, output = response.usage.prompt_tokens, response.usage.completion_tokens
    return {
        "promptTokenCount": prompt,
        "candidatesTokenCount": output,
        "totalTokenCount": prompt + output,
    }


def build_response(response: ModelResponse, *, model: str, id: str = "0") -> dict[str, Any]:
    """The `GenerateContentResponse` a server sends for `response`."""
    return {
        "candidates": [
            {
                "content": {"role": "model", "parts": _parts(response.message)},
                "finishReason": _finish_reason(response),
                "index": 0,
            }
        ],
        "usageMetadata": _usage_metadata(response),
        "modelVersion": response.model or model,
        "responseId": id,
    }


def stream_events(response: ModelResponse, *, model: str, id: str = "0") -> list[bytes]:
    """The SSE events of `:streamGenerateContent?alt=sse`: one per part, the last with
    the finishReason and usageMetadata (as the API ends its streams)."""
    whole = build_response(response, model=model, id=id)
    candidate = whole["candidates"][0]
    parts = candidate["content"]["parts"] or [{"text": ""}]
    events = []
    for part in parts[:-1]:
        chunk = {
            "candidates": [{"content": {"role": "model", "parts": [part]}, "index": 0}],
            "modelVersion": whole["modelVersion"],
            "responseId": id,
        }
        events.append(sse(chunk))
    last = {
        **whole,
        "candidates": [{**candidate, "content": {"role": "model", "parts": parts[-1:]}}],
    }
    events.append(sse(last))
    return events


_STATUS = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 404: "NOT_FOUND", 500: "INTERNAL"}


def error_body(message: str, *, code: int = 500) -> dict[str, Any]:
    """Google's error body (`{"error": {"code", "message", "status"}}`)."""
    return {"error": {"code": code, "message": message, "status": _STATUS.get(code, "UNKNOWN")}}
