"""OpenAI plain completions (`POST /v1/completions`), both directions.

The prompt is one string (the adapter renders messages with its `prompt_template`);
the reply is `choices[0].text`. vLLM's extensions: `token_ids` and `prompt_token_ids`
on the choice (or `prompt_token_ids` on the body), `logprobs.token_logprobs`.
"""

from __future__ import annotations

from typing import Any

from nemo_gym.records import Message, ModelRequest, ModelResponse, Sampling, Usage
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
from nemo_gym.wire.openai_chat import error_body, sent_sampling

__all__ = [
    "PATH",
    "CompletionStream",
    "build_request",
    "build_response",
    "error_body",
    "parse_request",
    "parse_response",
    "stream_events",
]

PATH = "/completions"

_SAMPLING_FIELDS = ("temperature", "top_p", "max_tokens", "seed", "stop")


def build_request(
    request: ModelRequest,
    *,
    prompt: str,
    model: str,
    logprobs: bool = False,
    return_token_ids: bool = False,
    extra_body: dict[str, Any] | None = None,
    stream: bool = False,
) -> tuple[dict[str, Any], Sampling]:
    """(JSON body, the sampling it sends) for `prompt` with `request`'s sampling and model."""
    sampling = request.sampling
    body: dict[str, Any] = {"model": request.model or model, "prompt": prompt}
    if sampling.temperature is not None:
        body["temperature"] = sampling.temperature
    if sampling.top_p is not None:
        body["top_p"] = sampling.top_p
    if sampling.max_tokens is not None:
        body["max_tokens"] = sampling.max_tokens
    if sampling.seed is not None:
        body["seed"] = sampling.seed
    if sampling.stop:
        body["stop"] = list(sampling.stop)
    if logprobs:
        # 1, not 0: some servers read 0 as "no logprobs"; one alternative is cheap.
        body["logprobs"] = 1
    if return_token_ids:
        body["return_token_ids"] = True
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    extra = {**extra_body, **sampling.extra} if extra_body else sampling.extra
    if extra:
        body.update(extra)
    return body, sent_sampling(body, extra, "max_tokens")


def parse_response(body: Any) -> ModelResponse:
    """A completions body as a `ModelResponse`; `WireError` when it is not one."""
    body = as_object(body, "completion")
    choices = as_list(body.get("choices"), "choices")
    if not choices:
        raise WireError(f"server returned no choices (response id {body.get('id')!r})")
    choice = as_object(choices[0], "choices[0]")
    completion_ids = token_ids(choice.get("token_ids"), "choice.token_ids")
    prompt_ids = token_ids(
        choice.get("prompt_token_ids") or body.get("prompt_token_ids"), "prompt_token_ids"
    )
    lp = choice.get("logprobs")
    values = lp.get("token_logprobs") if isinstance(lp, dict) else None
    raw_usage = body.get("usage") or {}
    if not isinstance(raw_usage, dict):
        raise WireError("usage: expected a JSON object")
    return ModelResponse(
        message=Message(
            role="assistant", content=as_str(choice.get("text"), "choices[0].text") or ""
        ),
        finish_reason=as_str(choice.get("finish_reason"), "choices[0].finish_reason"),
        usage=usage(raw_usage.get("prompt_tokens"), raw_usage.get("completion_tokens"), "usage"),
        model=as_str(body.get("model"), "model"),
        prompt_token_ids=prompt_ids,
        completion_token_ids=completion_ids,
        completion_logprobs=logprobs(
            values if isinstance(values, list) else None,
            len(completion_ids) if completion_ids is not None else None,
        ),
    )


class CompletionStream(ChunkStream):
    """Gathers the chunks of a `stream=True` completion into one `ModelResponse`."""

    def __init__(self) -> None:
        self.done = False
        self._text: list[str] = []
        self._finish: str | None = None
        self._model: str | None = None
        self._usage = Usage()
        self._prompt_ids: Any = None
        self._ids: list[Any] | None = None
        self._logprobs: list[Any] | None = None
        self._chunks = 0

    def feed(self, chunk: Any) -> None:
        chunk = as_object(chunk, "completion chunk")
        if "error" in chunk and "choices" not in chunk:
            raise WireError(f"stream error: {chunk['error']!r}")
        self._chunks += 1
        if self._model is None and isinstance(chunk.get("model"), str):
            self._model = chunk["model"]
        if isinstance(chunk.get("usage"), dict):
            u = chunk["usage"]
            self._usage = usage(u.get("prompt_tokens"), u.get("completion_tokens"), "usage")
        if self._prompt_ids is None and chunk.get("prompt_token_ids") is not None:
            self._prompt_ids = chunk["prompt_token_ids"]
        for raw in as_list(chunk.get("choices"), "chunk.choices"):
            choice = as_object(raw, "chunk.choices[]")
            if choice.get("index", 0) != 0:
                continue
            if isinstance(choice.get("text"), str):
                self._text.append(choice["text"])
            if self._prompt_ids is None and choice.get("prompt_token_ids") is not None:
                self._prompt_ids = choice["prompt_token_ids"]
            if isinstance(choice.get("token_ids"), list):
                self._ids = (self._ids or []) + choice["token_ids"]
            lp = choice.get("logprobs")
            if isinstance(lp, dict) and isinstance(lp.get("token_logprobs"), list):
                self._logprobs = (self._logprobs or []) + lp["token_logprobs"]
            if choice.get("finish_reason") is not None:
                self._finish = choice["finish_reason"]

    def response(self) -> ModelResponse:
        if not self.done:
            raise WireError(f"stream ended after {self._chunks} chunk(s) without [DONE]")
        if not self._chunks:
            raise WireError("stream carried no chunks")
        ids = token_ids(self._ids, "choice.token_ids")
        return ModelResponse(
            message=Message(role="assistant", content="".join(self._text)),
            finish_reason=self._finish,
            usage=self._usage,
            model=self._model,
            prompt_token_ids=token_ids(self._prompt_ids, "prompt_token_ids"),
            completion_token_ids=ids,
            completion_logprobs=logprobs(self._logprobs, len(ids) if ids is not None else None),
        )


# --------------------------------------------------------------------------- server side


def parse_request(body: Any) -> ServerRequest:
    """A completions request as a `ModelRequest` of one user message holding the prompt.

    The prompt string itself is in `options["prompt"]` too (a server for base models
    uses it verbatim).
    """
    body = as_object(body, "request")
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    if not isinstance(prompt, str):
        raise WireError("prompt: expected a string (token-id and batched prompts are not read)")
    stop = body.get("stop")
    if isinstance(stop, str):
        stop = [stop]
    try:
        request = ModelRequest(
            messages=(Message.user(prompt),),
            sampling=Sampling(
                temperature=body.get("temperature"),
                top_p=body.get("top_p"),
                max_tokens=body.get("max_tokens"),
                seed=body.get("seed"),
                stop=tuple(stop) if stop else None,
            ),
            model=as_str(body.get("model"), "model"),
        )
    except ValueError as exc:
        if isinstance(exc, WireError):
            raise
        raise WireError(f"request: {exc}") from None
    known = {"model", "stream", "stream_options", *_SAMPLING_FIELDS}
    options = {k: v for k, v in body.items() if k not in known}
    return ServerRequest(request=request, stream=bool(body.get("stream")), options=options)


def _choice(response: ModelResponse, text: str, finish: str | None) -> dict[str, Any]:
    choice: dict[str, Any] = {"index": 0, "text": text, "finish_reason": finish, "logprobs": None}
    if response.completion_logprobs is not None:
        choice["logprobs"] = {
            "token_logprobs": response.completion_logprobs,
            "tokens": [f"token_id:{t}" for t in response.completion_token_ids or ()] or None,
            "top_logprobs": None,
            "text_offset": None,
        }
    if response.completion_token_ids is not None:
        choice["token_ids"] = response.completion_token_ids
    if response.prompt_token_ids is not None:
        choice["prompt_token_ids"] = response.prompt_token_ids
    return choice


def build_response(
    response: ModelResponse, *, model: str, id: str = "cmpl-0", created: int = 0
) -> dict[str, Any]:
    """The completions body a server sends for `response`."""
    u = response.usage
    return {
        "id": id,
        "object": "text_completion",
        "created": created,
        "model": response.model or model,
        "choices": [
            _choice(response, response.message.content or "", response.finish_reason or "stop")
        ],
        "usage": {
            "prompt_tokens": u.prompt_tokens,
            "completion_tokens": u.completion_tokens,
            "total_tokens": u.total_tokens,
        },
    }


def stream_events(
    response: ModelResponse,
    *,
    model: str,
    id: str = "cmpl-0",
    created: int = 0,
    include_usage: bool = True,
) -> list[bytes]:
    """The SSE events carrying `response` (one text chunk, a final chunk, usage, [DONE])."""
    whole = build_response(response, model=model, id=id, created=created)
    base = {k: whole[k] for k in ("id", "object", "created", "model")}
    choice = whole["choices"][0]
    events = [sse({**base, "choices": [{**choice, "finish_reason": None}]})]
    events.append(
        sse(
            {
                **base,
                "choices": [{"index": 0, "text": "", "finish_reason": choice["finish_reason"]}],
            }
        )
    )
    if include_usage:
        events.append(sse({**base, "choices": [], "usage": whole["usage"]}))
    events.append(sse("[DONE]"))
    return events
