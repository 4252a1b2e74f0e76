"""`CharPolicy`: a scripted model with exact token ids (one id per character), for tests;
`Counter`, a small tool world, and `adder`, a script that plays it.

It continues a conversation from the exact ids of its previous turn, as the token-level
adapters do, so traces built from its rollouts are exact; `retokenize=True` re-renders
the history with a changed rendering instead, the failure the trainer must refuse.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import nemo_gym as gym

EOS = 3


def encode(text: str) -> list[int]:
    return [ord(c) + 10 for c in text]


def decode(ids: Sequence[int]) -> str:
    return "".join(chr(i - 10) for i in ids if i >= 10)


def render(message: gym.Message) -> str:
    body = message.content or ""
    for call in message.tool_calls:
        body += f"[{call.name}:{call.arguments}]"
    return f"<{message.role}>{body}"


class CharPolicy:
    """Replies come from `reply(request)`; ids are characters, every logprob -0.5."""

    def __init__(
        self,
        reply: Callable[[gym.ModelRequest], str | gym.Message],
        *,
        retokenize: bool = False,
        logprobs: bool = True,
    ) -> None:
        self.reply = reply
        self.retokenize = retokenize
        self.logprobs = logprobs
        self.seen: list[list[int]] = []  # the prompt ids of every call, in order
        self._cache: dict[tuple[gym.Message, ...], list[int]] = {}

    async def generate(self, request: gym.ModelRequest) -> gym.ModelResponse:
        messages = tuple(request.messages)
        prompt: list[int] | None = None
        for end in range(len(messages), 0, -1):
            cached = self._cache.get(messages[:end])
            if cached is not None and not self.retokenize:
                prompt = [*cached, *encode("".join(render(m) for m in messages[end:]))]
                break
        if prompt is None:
            # A re-render that spaces earlier turns differently, as chat templates do.
            sep = " " if self.retokenize else ""
            prompt = encode(sep.join(render(m) for m in messages))
        prompt += encode("<assistant>")
        reply = self.reply(request)
        message = gym.Message.assistant(reply) if isinstance(reply, str) else reply
        completion = [*encode(render(message).removeprefix("<assistant>")), EOS]
        self._cache[(*messages, message)] = prompt + completion
        self.seen.append(prompt)
        return gym.ModelResponse(
            message=message,
            finish_reason="tool_calls" if message.tool_calls else "stop",
            prompt_token_ids=prompt,
            completion_token_ids=completion,
            completion_logprobs=[-0.5] * len(completion) if self.logprobs else None,
        )


class Counter(gym.Env):
    """A tool world: `add(n)` adds to a counter; the reward is 1 when it ends at the target."""

    name = "counter"

    def __init__(self, target: int = 3, tasks: int = 2) -> None:
        super().__init__(self.check, harness=gym.harnesses.ToolLoop(max_turns=5))
        self.target = target
        self.n_tasks = tasks

    def tasks(self, split: str = "test", limit: int | None = None) -> list[gym.Task]:
        return [
            gym.Task(id=f"c{i}", prompt=f"reach {self.target} (task {i})", answer=self.target)
            for i in range(self.n_tasks)
        ]

    async def open(self, task: gym.Task) -> gym.BasicEpisode:
        state = {"value": 0}

        @gym.tool
        async def add(n: int) -> int:
            """Add n to the counter."""
            state["value"] += n
            return state["value"]

        return gym.BasicEpisode([add], state=state)

    @staticmethod
    async def check(task: gym.Task, trajectory: gym.Trajectory) -> gym.Rewards:
        value = trajectory.final_state["value"]
        return gym.Rewards(reward=float(value == task.answer), components={"value": value})


def adder(steps: list[int]):
    """Replies: one `add` call per entry of `steps`, then a final text."""

    def reply(request: gym.ModelRequest) -> gym.Message:
        turn = sum(m.role == "assistant" for m in request.messages)
        if turn < len(steps):
            call = gym.ToolCall(id=f"k{turn}", name="add", arguments=f'{{"n": {steps[turn]}}}')
            return gym.Message.assistant(None, tool_calls=(call,))
        return gym.Message.assistant("done")

    return reply
