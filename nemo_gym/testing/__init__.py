"""The testing kit: score a response with a verifier in one line, plus fakes and strategies.

```python
result = await gym.testing.verify(exact, task=gym.Task(prompt="2+2?", answer="4"), response="4")
assert result.reward == 1.0
```

`nemo_gym.testing.fakes` (a fake OpenAI server on a mock transport),
`nemo_gym.testing.httpserver` (a loopback HTTP server with injectable failures),
`nemo_gym.testing.strategies` (hypothesis), `nemo_gym.testing.faults` (fault injection),
`nemo_gym.testing.invariants` (the invariant suite), `nemo_gym.testing.hacks` (the
reward-hacking suite) and `nemo_gym.testing.synthetic`
(an environment and a model of any size) are imported on first use, and the pytest
plugin (`scripted_model`, `fake_openai`, `gym_task` fixtures) is loaded by pytest itself.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from nemo_gym.protocols import Verifier, VerifyFunction, as_verifier
from nemo_gym.records import Message, Rewards, Task, Trajectory

if TYPE_CHECKING:
    from nemo_gym.testing import fakes as fakes
    from nemo_gym.testing import faults as faults
    from nemo_gym.testing import hacks as hacks
    from nemo_gym.testing import httpserver as httpserver
    from nemo_gym.testing import invariants as invariants
    from nemo_gym.testing import strategies as strategies
    from nemo_gym.testing import synthetic as synthetic
    from nemo_gym.testing.oracle import OracleModel

__all__ = ["OracleModel", "make_task", "trajectory", "verify"]

_LAZY_MODULES = {
    "fakes",
    "faults",
    "hacks",
    "httpserver",
    "invariants",
    "oracle",
    "strategies",
    "synthetic",
}


def make_task(
    prompt: str | None = None,
    *,
    answer: Any = None,
    messages: Sequence[Message] | None = None,
    id: str = "",
    metadata: dict[str, Any] | None = None,
) -> Task:
    """A `Task` from a prompt or opening messages (the `gym_task` fixture's factory)."""
    if prompt is None and not messages:
        raise ValueError("a task needs a prompt or messages")
    if prompt is not None and messages:
        raise ValueError("give a task either a prompt or messages, not both")
    return Task(
        id=id,
        prompt=prompt,
        messages=tuple(messages or ()),
        answer=answer,
        metadata=dict(metadata or {}),
    )


def _assistant(response: str | Message) -> Message:
    if isinstance(response, str):
        return Message.assistant(response)
    if isinstance(response, Message):
        if response.role != "assistant":
            raise ValueError(f"the response must be an assistant message, not {response.role!r}")
        return response
    raise TypeError(f"response must be a str or a Message, got {type(response).__name__}")


def trajectory(
    response: str | Message | Sequence[Message] | None = None,
    *,
    task: Task | None = None,
    prompt: str | None = None,
    messages: Sequence[Message] | None = None,
    final_state: Any = None,
) -> Trajectory:
    """A `Trajectory`: the task's opening messages followed by the response.

    `response` is the assistant's reply (a str or a `Message`), or a sequence of the
    messages the rollout added (assistant turns, tool messages), in order. The opening
    messages come from `task`, or from `prompt` / `messages` when no task is given.
    """
    if task is not None:
        if prompt is not None or messages:
            raise ValueError("give either task= or prompt=/messages=, not both")
        opening: list[Message] = list(task.messages)
    elif prompt is not None:
        opening = [Message.user(prompt)]
    else:
        opening = list(messages or ())
    if response is None:
        added: list[Message] = []
    elif isinstance(response, str | Message):
        added = [_assistant(response)]
    else:
        added = list(response)
        for message in added:
            if not isinstance(message, Message):
                raise TypeError(f"response messages must be Message, got {type(message).__name__}")
    return Trajectory(messages=opening + added, final_state=final_state)


async def verify(
    verifier: Verifier | VerifyFunction,
    *,
    response: str | Message | Sequence[Message],
    task: Task | None = None,
    prompt: str | None = None,
    answer: Any = None,
    messages: Sequence[Message] | None = None,
    metadata: dict[str, Any] | None = None,
    final_state: Any = None,
) -> Rewards:
    """Score `response` to a task with `verifier` (a Verifier or an async function).

    Give the task whole (`task=`) or build it from `prompt` / `messages`, `answer` and
    `metadata`. A float (or bool) returned by the verifier is coerced to `Rewards`.
    """
    if task is None:
        task = make_task(prompt, answer=answer, messages=messages, metadata=metadata)
    elif prompt is not None or messages or answer is not None or metadata:
        raise ValueError("give either task= or prompt=/messages=/answer=/metadata=, not both")
    built = trajectory(response, task=task, final_state=final_state)
    return Rewards.of(await as_verifier(verifier).verify(task, built))


def __getattr__(name: str) -> Any:
    if name == "OracleModel":
        from nemo_gym.testing.oracle import OracleModel

        return OracleModel
    if name in _LAZY_MODULES:
        return importlib.import_module(f"nemo_gym.testing.{name}")
    raise AttributeError(f"module 'nemo_gym.testing' has no attribute {name!r}")
