"""Token continuation: later turns continue from the exact ids of the earlier ones.

A token-level adapter (`Local`, `LivePolicy`, `VLLM`) asks `Continuations.prompt(request)`
for the prompt ids of each request, and tells it what came back with `remember(...)`.
When a request's messages extend a conversation the adapter produced (its earlier
messages plus the assistant message returned, unchanged, with the same tools), the
prompt is **the cached ids of that conversation (prompt + completion) plus the
tokenization of only what was added** (tool results, the next user turn, the
generation prompt). The history is never re-rendered, because templates rewrite it
(dropping reasoning, re-spacing tool calls) and a trainer would then train on tokens
the policy never produced.

Every prompt says how it was built (`Prompt.history`, which adapters put in
`ModelResponse.metadata["history"]`): "fresh" (no earlier assistant turn), "continued"
(cached exact ids reused) or "retokenized" (an assistant turn this cache does not know
or that was edited: rendered again; `Trajectory.token_trace()` refuses such a call).
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from nemo_gym.models.chat import ChatTemplate
from nemo_gym.records import Message, ModelRequest, ToolSpec

__all__ = ["Continuations", "History", "Prompt"]

log = logging.getLogger(__name__)

History = Literal["fresh", "continued", "retokenized"]
"""How a prompt's earlier turns were tokenized."""


@dataclass(frozen=True, slots=True)
class Prompt:
    """The prompt ids of one request and how its history was tokenized."""

    ids: list[int]
    history: History


@dataclass(frozen=True, slots=True)
class _Conversation:
    ids: tuple[int, ...]  # prompt + completion, exactly as generated
    eos_text: str | None  # the final stop token's text, when the completion ended on one


def _message_key(message: Message) -> bytes:
    return json.dumps(message.model_dump(mode="json"), sort_keys=True).encode()


def _prefix_keys(tools: Sequence[ToolSpec], messages: Sequence[Message]) -> list[str]:
    """`keys[k]` identifies (tools, messages[:k]); one sha256 chain over the messages."""
    digest = hashlib.sha256(
        json.dumps([t.model_dump(mode="json") for t in tools], sort_keys=True).encode()
    ).digest()
    keys = [digest.hex()]
    for message in messages:
        digest = hashlib.sha256(digest + _message_key(message)).digest()
        keys.append(digest.hex())
    return keys


class Continuations:
    """An LRU of the exact ids of conversations an adapter produced, and the prompts
    that continue them. Thread-safe (a lock around the cache; rendering runs outside it).

    `max_conversations=0` turns continuation off: every prompt is rendered from scratch
    (and is "retokenized" whenever it carries an assistant turn).
    """

    def __init__(self, template: ChatTemplate, *, max_conversations: int = 4096) -> None:
        if max_conversations < 0:
            raise ValueError("max_conversations must be >= 0")
        self.template = template
        self.max_conversations = max_conversations
        self._cache: OrderedDict[str, _Conversation] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._cache)

    def clear(self) -> None:
        """Forget every conversation (later turns of them are then retokenized)."""
        with self._lock:
            self._cache.clear()

    def prompt(self, request: ModelRequest) -> Prompt:
        """The prompt ids of `request`: continued from cached ids where it can be."""
        messages, tools = request.messages, request.tools
        template = self.template
        full = template.render(messages, tools, generation_prompt=True)
        keys = _prefix_keys(tools, messages)
        for end in range(len(messages), 0, -1):
            if messages[end - 1].role != "assistant":
                continue
            with self._lock:
                cached = self._cache.get(keys[end])
                if cached is not None:
                    self._cache.move_to_end(keys[end])
            if cached is None:
                continue
            prefix = template.render(messages[:end], tools, generation_prompt=False)
            if not full.startswith(prefix):
                log.debug("the template rewrites the history after turn %d; retokenizing", end)
                break
            # The template closes an assistant turn (`<|im_end|>\n`); the generated ids
            # hold as much of that as the model wrote (its EOS), the rest is added here.
            missing = template.after_assistant(messages[:end], tools)
            if cached.eos_text is not None and missing.startswith(cached.eos_text):
                missing = missing[len(cached.eos_text) :]
            added = template.encode(missing + full[len(prefix) :])
            return Prompt([*cached.ids, *added], "continued")
        if any(m.role == "assistant" for m in messages):
            log.debug("no cached conversation matches this history; retokenizing it")
            return Prompt(template.encode(full), "retokenized")
        return Prompt(template.encode(full), "fresh")

    def remember(
        self,
        request: ModelRequest,
        reply: Message,
        prompt_ids: Sequence[int],
        completion_ids: Sequence[int],
        *,
        ended_on_stop_token: bool,
    ) -> None:
        """Record the exact ids behind `reply`, so a request that extends it continues them.

        `ended_on_stop_token`: the last completion id is the EOS (or another stop token)
        that closed the turn, so it is not written again when the turn is closed.
        """
        if not self.max_conversations:
            return
        key = _prefix_keys(request.tools, [*request.messages, reply])[-1]
        eos_text = (
            self.template.decode(completion_ids[-1:])
            if ended_on_stop_token and completion_ids
            else None
        )
        entry = _Conversation(ids=(*prompt_ids, *completion_ids), eos_text=eos_text)
        with self._lock:
            self._cache[key] = entry
            self._cache.move_to_end(key)
            while len(self._cache) > self.max_conversations:
                self._cache.popitem(last=False)
