"""Which conversation each model call of an agent program continues.

A program's calls are not one conversation: it sends side requests (a title, a
summary), sub-agents, and, once its context fills, a compacted history (a summary in
place of the turns it replaced). Trained as one token sequence, such a call would
teach the policy tokens that never followed each other. So every call is put in a
**segment**: the segment whose last call (its messages, then the reply) this call's
messages extend, else a new one. Each call names its segment as its agent
(`ModelRequest.agent = "<program>/<n>"`), which is how a trajectory says "these calls
are separate sequences": `Trajectory.token_trace()` refuses to join a trajectory of
several (a trainer's `training.sample` excludes it), `token_traces()` gives one
sequence per segment. A segment's first call is where it began.

Messages are compared by what a program can send back unchanged: role, text, the tool
calls' ids and names, and the tool result's call id. A program that rewrites its own
earlier turns (trims whitespace, drops reasoning, re-serialises tool arguments) still
continues its segment; one that replaces or drops turns starts a new one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from nemo_gym.protocols import Model
from nemo_gym.records import Message, ModelRequest, ModelResponse, ToolResult

__all__ = ["Segments", "message_key"]


def message_key(message: Message) -> tuple[Any, ...]:
    """What must match for a re-sent message to count as the same turn."""
    return (
        message.role,
        (message.content or "").strip(),
        tuple((call.id, call.name) for call in message.tool_calls),
        message.tool_call_id,
    )


def _extends(messages: Sequence[tuple[Any, ...]], tail: Sequence[tuple[Any, ...]]) -> bool:
    return len(messages) > len(tail) and list(messages[: len(tail)]) == list(tail)


class Segments:
    """A `Model` that tags each call with its segment before the wrapped model sees it.

    `name` prefixes the segment names (`"codex/0"`, `"codex/1"`, ...). A request that
    already names an agent keeps it.
    """

    def __init__(self, model: Model, name: str) -> None:
        self.model = model
        self.name = name
        self._tails: list[list[tuple[Any, ...]]] = []
        self._calls: list[tuple[ModelRequest, ModelResponse]] = []

    @property
    def count(self) -> int:
        """How many segments the calls so far formed."""
        return len(self._tails)

    def segment_of(self, request: ModelRequest) -> int:
        """The segment `request` continues, else a new one."""
        keys = [message_key(m) for m in request.messages]
        # the longest continued conversation wins (a side request may share its start)
        best, best_length = None, -1
        for index, tail in enumerate(self._tails):
            if tail and _extends(keys, tail) and len(tail) > best_length:
                best, best_length = index, len(tail)
        if best is not None:
            return best
        self._tails.append([])
        return len(self._tails) - 1

    async def generate(self, request: ModelRequest) -> ModelResponse:
        if request.agent is not None:
            return await self.model.generate(request)
        segment = self.segment_of(request)
        request = request.model_copy(update={"agent": f"{self.name}/{segment}"})
        response = await self.model.generate(request)
        # Concurrent calls of one program (sub-agents) each extend their own tail.
        self._tails[segment] = [message_key(m) for m in (*request.messages, response.message)]
        self._calls.append((request, response))
        return response

    def tool_results(self) -> list[ToolResult]:
        """The program's tool runs, as it reported them to the model: each tool call the
        policy made, joined with the first result a later request carried for its id.

        The program ran them where we cannot see; what it sent back is its observation.
        A call it never answered (it stopped first, or dropped it) is left out.
        """
        outputs: dict[str, str] = {}
        for request, _ in self._calls:
            for message in request.messages:
                if message.role == "tool" and message.tool_call_id:
                    outputs.setdefault(message.tool_call_id, message.content or "")
        results: list[ToolResult] = []
        seen: set[str] = set()
        for _, response in self._calls:
            for call in response.message.tool_calls:
                if call.id in outputs and call.id not in seen:
                    seen.add(call.id)
                    results.append(
                        ToolResult(
                            call_id=call.id,
                            name=call.name,
                            arguments=call.arguments,
                            output=outputs[call.id],
                        )
                    )
        return results
