"""A scripted model with exact token ids, so per-agent token traces can be checked.

Each message is encoded as a role marker and the UTF-8 bytes of its canonical JSON; the
prompt ends on the assistant marker, and a reply's completion ids are its encoding after
that marker. A request that extends a conversation with the reply unchanged therefore
has prompt ids extending the previous prompt + completion, as a token-level adapter's
continued prompts do; an edited history does not.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Awaitable, Callable

from nemo_gym.records import Message, ModelRequest, ModelResponse, Usage

_ROLE = {"system": 2, "user": 3, "tool": 4}
_ASSISTANT = 1


def _body(message: Message) -> list[int]:
    data = message.model_dump(mode="json", exclude={"role"})
    return [b + 10 for b in json.dumps(data, sort_keys=True).encode()]


def encode(message: Message) -> list[int]:
    marker = _ASSISTANT if message.role == "assistant" else _ROLE[message.role]
    return [marker, *_body(message)]


def prompt_ids(request: ModelRequest) -> list[int]:
    header = [5, *[b + 10 for b in json.dumps([t.name for t in request.tools]).encode()]]
    ids = list(header)
    for message in request.messages:
        ids.extend(encode(message))
    ids.append(_ASSISTANT)
    return ids


Reply = str | Message
ReplyFunction = Callable[[ModelRequest], Reply | Awaitable[Reply]]


class TokenModel:
    """Replies from `script(request)`, with prompt/completion ids as described above."""

    def __init__(self, script: ReplyFunction) -> None:
        self.script = script
        self.requests: list[ModelRequest] = []

    async def generate(self, request: ModelRequest) -> ModelResponse:
        self.requests.append(request)
        reply = self.script(request)
        if inspect.isawaitable(reply):
            reply = await reply
        message = reply if isinstance(reply, Message) else Message.assistant(reply)
        completion = _body(message)
        prompt = prompt_ids(request)
        return ModelResponse(
            message=message,
            finish_reason="tool_calls" if message.tool_calls else "stop",
            usage=Usage(prompt_tokens=len(prompt), completion_tokens=len(completion)),
            prompt_token_ids=prompt,
            completion_token_ids=completion,
            completion_logprobs=[-0.5] * len(completion),
        )


def last_user(request: ModelRequest) -> str:
    for message in reversed(request.messages):
        if message.role == "user":
            return message.content or ""
    return ""
