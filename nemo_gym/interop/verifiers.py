"""`verifiers` (the v1 stack, `verifiers>=0.4`) tasksets as nemo_gym environments.

```python
from nemo_gym.interop.verifiers import VerifiersEnv

env = VerifiersEnv(MyTaskset(vf.TasksetConfig()))        # a Taskset (or a vf.Env)
env = VerifiersEnv("my_pkg.tasks:load_taskset")          # or a factory / its import path
```

- Tasks: each verifiers task becomes a `Task` (its `prompt` and `system_prompt` as the
  messages; id: the task's `data.id`, else its content key) whose `metadata["verifiers"]`
  is the task's wire data.
- Tools: the task class's toolsets (`Task.toolsets(config)`) are served in process, one
  SDK `MCPServer` per toolset per episode, registered by the toolset's own `register`
  (so the model sees exactly the schemas verifiers advertises, named
  `<server>_<tool>` as verifiers names them), reached through `nemo_gym.interop.mcp`.
  Toolsets that keep typed state through verifiers' state channel are refused.
- Reward: the verifier rebuilds a verifiers `Trace` from the trajectory (messages as
  its message nodes, assistant turns marked sampled) and awaits `task.score(trace)`:
  the task's `@vf.reward` functions (weighted as declared) and plugged judges. The
  rollout's reward is `trace.reward` (the weighted sum); each reward's score is a
  component, the metrics are in `Rewards.metadata["metrics"]`. A reward that needs a
  runtime (a sandbox) is refused as a verifier error rather than silently skipped.
- The harness is `ToolLoop` (one call when the task has no tools). verifiers' own
  harnesses, user simulators and containerized tasks run in verifiers' runtime, not
  here.

Needs the `verifiers` extra (`pip install 'nemo-gym[verifiers]'`; `verifiers` pins
`openai<3`, so it lives beside the `openai` extra only in a venv of its own).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from typing import Any

from nemo_gym.envs.base import BasicEpisode, Env
from nemo_gym.errors import EpisodeError, MissingDependency, VerifierError
from nemo_gym.harnesses import ToolLoop
from nemo_gym.protocols import Harness
from nemo_gym.records import Message, Rewards, Task, Trajectory

try:
    import verifiers.v1 as vf
    from mcp.server import MCPServer
    from verifiers.v1.graph import MessageNode
    from verifiers.v1.state import State, state_cls
    from verifiers.v1.trace import AgentInfo, Trace, TraceTask
    from verifiers.v1.types import (
        AssistantMessage,
        SystemMessage,
        ToolMessage,
        UserMessage,
    )
    from verifiers.v1.types import ToolCall as VfToolCall
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise MissingDependency("verifiers", "verifiers") from exc

from nemo_gym.interop.mcp import InProcess, MCPSession

__all__ = ["VerifiersEnv", "to_trace"]


def _messages(data: Any) -> list[Message]:
    out: list[Message] = []
    if data.system_prompt:
        out.append(Message.system(data.system_prompt))
    prompt = data.prompt
    if isinstance(prompt, str):
        out.append(Message.user(prompt))
    elif prompt:
        for message in prompt:
            role = getattr(message, "role", None)
            content = getattr(message, "content", None)
            text = content if isinstance(content, str) else vf.types.content_text(content)
            if role not in ("system", "user", "assistant"):
                raise EpisodeError(f"verifiers task prompt: unsupported message role {role!r}")
            out.append(Message(role=role, content=text))
    if not any(m.role == "user" for m in out):
        raise EpisodeError(
            "a verifiers task without a prompt (a user-opened task) is not supported"
        )
    return out


def _vf_message(message: Message) -> Any:
    if message.role == "system":
        return SystemMessage(content=message.content or "")
    if message.role == "user":
        return UserMessage(content=message.content or "")
    if message.role == "tool":
        return ToolMessage(
            tool_call_id=message.tool_call_id or "",
            content=message.content or "",
            name=message.name,
        )
    calls = [VfToolCall(id=c.id, name=c.name, arguments=c.arguments) for c in message.tool_calls]
    return AssistantMessage(
        content=message.content,
        reasoning_content=message.reasoning,
        tool_calls=calls or None,
    )


def to_trace(task: Any, trajectory: Trajectory) -> Any:
    """A verifiers `Trace` of `task` holding the trajectory's messages (for scoring)."""
    trace = Trace(
        task=TraceTask(type=type(task).__name__, data=task.data, key=task.key, hash=task.hash),
        state=state_cls(type(task))(),
        agent=AgentInfo(config=vf.AgentConfig(), name="nemo_gym"),
    )
    nodes = []
    for index, message in enumerate(trajectory.messages):
        nodes.append(
            MessageNode(
                parent=index - 1 if index else None,
                message=_vf_message(message),
                sampled=message.role == "assistant",
            )
        )
    trace.nodes = nodes
    trace.is_completed = True
    trace.ok = True
    return trace


def _needs_runtime(fn: Callable[..., Any]) -> bool:
    param = inspect.signature(fn).parameters.get("runtime")
    return param is not None and param.default is inspect.Parameter.empty


class VerifiersEnv(Env):
    """A verifiers taskset as an environment: its tasks, its toolsets, its rewards."""

    def __init__(
        self,
        taskset: Any,
        *,
        name: str = "verifiers",
        harness: Harness | None = None,
        call_timeout: float | None = 60.0,
    ) -> None:
        super().__init__(self._score, name=name, harness=harness or ToolLoop())
        self.taskset = taskset
        self.call_timeout = call_timeout
        self._loaded: Any = None
        self._by_id: dict[str, Any] = {}

    def _source(self) -> Any:
        if self._loaded is None:
            found = self.taskset
            if isinstance(found, str):
                from pkgutil import resolve_name

                found = resolve_name(found)
            if callable(found) and not isinstance(found, vf.Taskset):
                found = found()
            found = getattr(found, "taskset", found)
            if not isinstance(found, vf.Taskset):
                raise EpisodeError(
                    f"VerifiersEnv(taskset=...) gave a {type(found).__name__}: expected a "
                    "verifiers Taskset or Env"
                )
            self._loaded = found
        return self._loaded

    @staticmethod
    def task_id(task: Any) -> str:
        return str(task.data.id) if task.data.id is not None else task.key[:16]

    def tasks(self, split: str = "test", limit: int | None = None) -> Iterator[Task]:
        for index, vf_task in enumerate(self._source()):
            if limit is not None and index >= limit:
                return
            task_id = self.task_id(vf_task)
            self._by_id[task_id] = vf_task
            yield Task(
                id=task_id,
                messages=tuple(_messages(vf_task.data)),
                metadata={"verifiers": vf_task.data.model_dump(mode="json")},
            )

    def _task(self, task: Task) -> Any:
        found = self._by_id.get(task.id)
        if found is None:
            for _ in self.tasks():
                pass
            found = self._by_id.get(task.id)
        if found is None:
            raise EpisodeError(f"no verifiers task with id {task.id!r} in {self.taskset!r}")
        return found

    async def open(self, task: Task) -> BasicEpisode:
        vf_task = self._task(task)
        sessions: list[MCPSession] = []
        episode = BasicEpisode()

        async def close() -> None:
            for session in reversed(sessions):
                await session.aclose()

        episode.on_close(close)
        try:
            tools = []
            for toolset in type(vf_task).toolsets(vf_task.config):
                if state_cls(type(toolset)) is not State:
                    raise EpisodeError(
                        f"toolset {type(toolset).__name__} keeps typed state through "
                        "verifiers' state channel, which runs only in verifiers' runtime"
                    )
                await toolset.setup()
                await toolset.setup_task(vf_task)
                server = MCPServer(toolset.server_name or type(toolset).__name__)
                toolset.register(server)
                prefix = f"{toolset.server_name}_" if toolset.server_name else ""
                session = MCPSession(
                    InProcess(server, type(toolset).__name__),
                    prefix=prefix,
                    call_timeout=self.call_timeout,
                )
                sessions.append(session)
                await session.start()
                tools.extend(session.tools)
        except BaseException:
            await close()
            raise
        episode.tools = tuple(tools)
        return episode

    async def _score(self, task: Task, trajectory: Trajectory) -> Rewards:
        vf_task = self._task(task)
        needing = [
            fn.__name__
            for fn in (*vf_task.hooks("reward"), *vf_task.hooks("metric"))
            if _needs_runtime(fn)
        ]
        if needing:
            raise VerifierError(
                f"verifiers task {type(vf_task).__name__}: reward(s) {', '.join(needing)} "
                "need a verifiers runtime (a sandbox), which this adapter does not provide"
            )
        trace = to_trace(vf_task, trajectory)
        try:
            await vf_task.score(trace)
        except Exception as exc:
            raise VerifierError(f"verifiers scoring failed: {exc}") from exc
        components = {name: float(reward.score) for name, reward in trace.rewards.items() if reward}
        metrics = {k: v for k, v in trace.metrics.items() if v is not None}
        return Rewards(
            reward=float(trace.reward), components=components, metadata={"metrics": metrics}
        )
