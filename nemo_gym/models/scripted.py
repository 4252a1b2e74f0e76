"""`ScriptedModel`: replies from a list or a function. The test double for every layer."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Sequence
from typing import Union

from nemo_gym.errors import ModelError
from nemo_gym.records import Message, ModelRequest, ModelResponse, Usage

Reply = Union[str, Message, ModelResponse, BaseException]  # noqa: UP007 (a runtime alias)
ReplyFunction = Callable[[ModelRequest], Reply | Awaitable[Reply]]


def _as_response(reply: Reply) -> ModelResponse:
    if isinstance(reply, BaseException):
        raise reply
    if isinstance(reply, ModelResponse):
        return reply
    if isinstance(reply, str):
        reply = Message(role="assistant", content=reply)
    if not isinstance(reply, Message) or reply.role != "assistant":
        raise TypeError(
            "a scripted reply must be a str, an assistant Message or a ModelResponse, "
            f"got {reply!r}"
        )
    return ModelResponse(
        message=reply,
        finish_reason="tool_calls" if reply.tool_calls else "stop",
        usage=Usage(completion_tokens=len((reply.content or "").split())),
    )


def _prepare(reply: Reply) -> ModelResponse | BaseException:
    return reply if isinstance(reply, BaseException) else _as_response(reply)


class ScriptedModel:
    """A model whose replies are scripted.

    `replies` is a sequence (served in order; `cycle=True` starts again at the end) or a
    function of the request (sync or async). A reply may be a str, an assistant
    `Message`, a full `ModelResponse`, or an exception to raise. Every request received
    is kept in `requests`.
    """

    def __init__(
        self,
        replies: Sequence[Reply] | ReplyFunction,
        *,
        cycle: bool = False,
        keep_requests: bool = True,
    ) -> None:
        self._function = replies if callable(replies) else None
        # Converted once: a long script costs nothing per call.
        self._replies: Sequence[ModelResponse | BaseException] = (
            () if callable(replies) else tuple(_prepare(r) for r in replies)
        )
        self._cycle = cycle
        self._next = 0
        self._keep = keep_requests
        self.requests: list[ModelRequest] = []

    async def generate(self, request: ModelRequest) -> ModelResponse:
        if self._keep:
            self.requests.append(request)
        if self._function is not None:
            reply = self._function(request)
            if not isinstance(reply, ModelResponse | str | Message) and inspect.isawaitable(reply):
                reply = await reply
            return _as_response(reply)
        if self._next >= len(self._replies):
            if not self._cycle or not self._replies:
                raise ModelError(f"ScriptedModel ran out of replies after {self._next}")
            self._next = 0
        reply = self._replies[self._next]
        self._next += 1
        if isinstance(reply, BaseException):
            raise reply
        return reply

    def __repr__(self) -> str:
        return (
            "ScriptedModel(function)"
            if self._function
            else f"ScriptedModel({len(self._replies)} replies)"
        )
