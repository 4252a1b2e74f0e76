"""Synthetic pieces for scale and fault tests: an environment of any size, a model that
answers it, an in-memory sandbox provider. All rebuild from their spec, so the same run
works in a subprocess or on a Ray actor.

```python
from nemo_gym.testing.synthetic import Echo, EchoModel

env = Echo(n=100_000, tools=True)                 # "say 17" -> answer "17"
model = EchoModel(latency_s=0.05)                 # an I/O-bound policy: 50 ms per call
```
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import re
import time
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any

from nemo_gym.envs.base import BasicEpisode, Env
from nemo_gym.errors import SandboxError
from nemo_gym.harnesses import SingleTurn, ToolLoop
from nemo_gym.protocols import Sandbox, SandboxProvider
from nemo_gym.records import (
    ExecResult,
    Message,
    ModelRequest,
    ModelResponse,
    Rewards,
    SandboxSpec,
    Task,
    ToolCall,
    Trajectory,
    Usage,
)
from nemo_gym.registry import Described
from nemo_gym.tools import tool

__all__ = ["Echo", "EchoModel", "MemoryProvider", "MemorySandbox", "burn_cpu"]

_NUMBER = re.compile(r"-?\d+")


def burn_cpu(seconds: float) -> None:
    """Spend `seconds` of this thread's CPU time (a CPU-bound verifier's work)."""
    if seconds <= 0:
        return
    end = time.thread_time() + seconds
    block = b"x" * 64
    while time.thread_time() < end:
        for _ in range(200):
            block = hashlib.blake2b(block).digest()


class MemorySandbox:
    """A sandbox that runs nothing: `exec` echoes the command, files live in a dict."""

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.closed = False

    async def exec(self, cmd: str | Sequence[str], **options: Any) -> ExecResult:
        if self.closed:
            raise SandboxError("the sandbox is closed")
        text = cmd if isinstance(cmd, str) else " ".join(cmd)
        return ExecResult(exit_code=0, stdout=text)

    async def write_file(self, path: str, data: str | bytes) -> None:
        self.files[path] = data.encode() if isinstance(data, str) else bytes(data)

    async def read_file(self, path: str) -> bytes:
        try:
            return self.files[path]
        except KeyError:
            raise FileNotFoundError(f"no such file: {path!r}") from None

    async def aclose(self) -> None:
        self.closed = True


class MemoryProvider(Described):
    """Starts `MemorySandbox`es and counts them (`started`, `closed`)."""

    spec_kind = "sandbox"
    name = "memory"

    def __init__(self) -> None:
        self.started = 0
        self.closed = 0

    @asynccontextmanager
    async def start(self, spec: SandboxSpec | None = None) -> AsyncIterator[Sandbox]:
        sandbox = MemorySandbox()
        self.started += 1
        try:
            yield sandbox
        finally:
            await sandbox.aclose()
            self.closed += 1


class Echo(Env):
    """`n` tasks "say I" with answer "I" (ids `e0`, `e1`, ...), generated lazily.

    `tools=True` runs a `ToolLoop` and gives each episode an `echo(text)` tool;
    `provider` (a sandbox provider) gives each episode a sandbox, set up with one exec
    in `open`, and makes the verifier check the answer with one exec in a sandbox of
    its own; `verify_cpu_s` makes the verifier CPU-bound (that much CPU per rollout);
    `prompt_bytes` pads every prompt (rows of a realistic size).
    """

    name = "echo"
    version = "1"

    def __init__(
        self,
        *,
        n: int = 1000,
        tools: bool = False,
        provider: SandboxProvider | None = None,
        verify_cpu_s: float = 0.0,
        prompt_bytes: int = 0,
    ) -> None:
        async def verify(task: Task, trajectory: Trajectory) -> Rewards:
            burn_cpu(self.verify_cpu_s)
            text = trajectory.final_text.strip()
            if self.provider is not None:
                async with self.provider.start() as sandbox:
                    text = (await sandbox.exec(["printf", text])).stdout.removeprefix("printf ")
            correct = text == task.answer
            found = _NUMBER.findall(text)
            return Rewards(
                reward=float(correct),
                metadata={"extracted_answer": found[-1] if found else None},
            )

        super().__init__(verify, harness=ToolLoop(max_turns=4) if tools else SingleTurn())
        self.n = n
        self.tools = tools
        self.provider = provider
        self.verify_cpu_s = verify_cpu_s
        self.padding = " " * prompt_bytes

    def tasks(self, split: str = "test", limit: int | None = None) -> Iterator[Task]:
        count = self.n if limit is None else min(limit, self.n)
        for i in range(count):
            yield Task(id=f"e{i}", prompt=f"say {i}{self.padding}", answer=str(i))

    async def open(self, task: Task) -> BasicEpisode:
        tools = []
        if self.tools:

            @tool
            async def echo(text: str) -> str:
                """Repeat the text."""
                return text

            tools.append(echo)
        if self.provider is None:
            return BasicEpisode(tools)
        started = self.provider.start()
        sandbox = await started.__aenter__()
        try:
            await sandbox.exec(["setup", task.id])
        except BaseException as exc:
            await started.__aexit__(type(exc), exc, exc.__traceback__)
            raise
        episode = BasicEpisode(tools, sandbox=sandbox)

        async def release() -> None:
            await started.__aexit__(None, None, None)

        episode.on_close(release)
        return episode


def _argument(schema: Mapping[str, Any], number: str) -> Any:
    kind = schema.get("type")
    if kind == "string":
        return number
    if kind in ("integer", "number"):
        return 0
    if kind == "boolean":
        return False
    if kind == "array":
        return []
    if kind == "object":
        return {}
    return None


class EchoModel(Described):
    """Answers `Echo` (and probes any environment): the first number of the task's
    prompt, or "0".

    With tools offered it first calls each of them once (arguments filled from their
    JSON Schema: strings get the number, other types a zero value), then answers.
    Each call sleeps `latency_s` plus up to `jitter_s` more (an I/O-bound policy
    server; the jitter is a hash of the request, so it is the same every run).
    `exit_on` lists prompts on which the whole process exits at once (`os._exit`): a
    rollout that kills its worker (an OOM kill, a segfault), for Ray and crash tests.
    """

    spec_kind = "model"

    def __init__(
        self,
        *,
        latency_s: float = 0.0,
        jitter_s: float = 0.0,
        use_tools: bool = True,
        exit_on: Sequence[str] = (),
    ) -> None:
        self.latency_s = latency_s
        self.jitter_s = jitter_s
        self.use_tools = use_tools
        self.exit_on = frozenset(exit_on)

    def _delay(self, request: ModelRequest) -> float:
        if self.jitter_s <= 0:
            return self.latency_s
        text = f"{request.sampling.seed}|{len(request.messages)}|{request.messages[-1].content}"
        digest = hashlib.blake2b(text.encode(), digest_size=4).digest()
        return self.latency_s + self.jitter_s * int.from_bytes(digest, "big") / 2**32

    async def generate(self, request: ModelRequest) -> ModelResponse:
        delay = self._delay(request)
        if delay > 0:
            await asyncio.sleep(delay)
        first = next((m for m in request.messages if m.role == "user"), None)
        if first is not None and first.content in self.exit_on:
            os._exit(17)
        found = _NUMBER.search((first.content or "") if first else "")
        number = found.group(0) if found else "0"
        called = any(m.role == "tool" for m in request.messages)
        if request.tools and self.use_tools and not called:
            calls = []
            for position, spec in enumerate(request.tools):
                properties = spec.parameters.get("properties", {})
                required = spec.parameters.get("required", list(properties))
                arguments = {name: _argument(properties.get(name, {}), number) for name in required}
                calls.append(
                    ToolCall(id=f"c{position}", name=spec.name, arguments=json.dumps(arguments))
                )
            return ModelResponse(
                message=Message.assistant(tool_calls=tuple(calls)), finish_reason="tool_calls"
            )
        return ModelResponse(
            message=Message.assistant(number),
            finish_reason="stop",
            usage=Usage(prompt_tokens=len(request.messages), completion_tokens=1),
        )
