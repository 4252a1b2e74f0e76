"""OpenEnv (`openenv-core`) environments as nemo_gym environments.

```python
from nemo_gym.interop.openenv import OpenEnv

env = OpenEnv("my_envs.echo:EchoEnvironment", prompt="Say something.", seeds=range(100))
env = OpenEnv(base_url="http://127.0.0.1:8000", prompt=...)   # a running OpenEnv server
```

- `env` is a factory (or its import path) returning an OpenEnv `Environment` (run in
  process: a fresh instance per episode, its sync `reset`/`step` on a thread of the
  episode's own, so the event loop never blocks and single-thread environments stay on
  one thread) or an `EnvClient` (a session per episode: connected on open, closed on
  exit). `base_url=` connects a `GenericEnvClient` to a running server.
- Each episode is reset with the task's `metadata["reset"]` (e.g. `{"seed": 3}`); the
  reset observation is the model's first user turn (`Episode.opening`).
- `mode="text"` (default, `MultiStep`): each reply becomes an action through `action`
  (default: the action class the environment's `step` is annotated with, its single
  required text field set to the reply, or the reply parsed as JSON for several fields;
  a dict for a client) and each observation goes back as the next user turn (`observe`,
  default: its one text field, else its fields as JSON). An action that does not
  validate is shown to the model as the observation, reward 0.
- `mode="tools"` (`ToolLoop`, for OpenEnv's MCP environments): the environment's tools
  (`ListToolsAction`) are the episode's tools; each call is a `CallToolAction` step.
- Rewards: every step's reward is kept (`trajectory.step_rewards` in text mode and
  `final_state["rewards"]` in both); the verifier scores their sum (`reward="sum"`) or
  the last (`"last"`). `final_state` is `{"rewards", "done", "state"}`.

Needs the `openenv` extra (`pip install 'nemo-gym[openenv]'`).
"""

from __future__ import annotations

import asyncio
import json
import typing
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Literal

from nemo_gym.envs.base import BasicEpisode, Env
from nemo_gym.errors import EpisodeError, MissingDependency
from nemo_gym.harnesses import MultiStep, ToolLoop
from nemo_gym.records import Message, Observation, Rewards, Task, ToolSpec, Trajectory
from nemo_gym.tools import Tool

try:
    from openenv.core.env_client import EnvClient
    from openenv.core.env_server.interfaces import Environment as OpenEnvEnvironment
    from openenv.core.env_server.mcp_types import CallToolAction, ListToolsAction
    from pydantic import BaseModel, ValidationError
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise MissingDependency("openenv-core", "openenv") from exc

__all__ = ["OpenEnv", "OpenEnvEpisode"]

DEFAULT_PROMPT = (
    "You are acting in an environment. Each of your replies is your next action; the "
    "environment answers with what happened."
)
DEFAULT_TOOLS_PROMPT = "You are acting in an environment: use its tools to do the task."
_BASE_FIELDS = frozenset({"done", "reward", "metadata"})


def _default_observe(observation: Any) -> str:
    if isinstance(observation, str):
        return observation
    data = observation.model_dump() if isinstance(observation, BaseModel) else dict(observation)
    shown = {k: v for k, v in data.items() if k not in _BASE_FIELDS}
    texts = [v for v in shown.values() if isinstance(v, str)]
    if len(shown) == 1 and len(texts) == 1:
        return texts[0]
    return json.dumps(shown, default=str, ensure_ascii=False)


def _action_builder(action_cls: type[BaseModel] | None) -> Callable[[str], Any]:
    """Reply text -> action: one required text field set, else JSON into the class."""
    if action_cls is None:

        def as_dict(text: str) -> Any:
            value = json.loads(text)
            if not isinstance(value, dict):
                raise ValueError("the action must be a JSON object")
            return value

        return as_dict
    required = [
        name
        for name, info in action_cls.model_fields.items()
        if name != "metadata" and info.is_required()
    ]
    if len(required) == 1 and action_cls.model_fields[required[0]].annotation is str:
        field = required[0]
        return lambda text: action_cls(**{field: text})
    return lambda text: action_cls.model_validate_json(text)


def _step_action_class(env: Any) -> type[BaseModel] | None:
    step = getattr(type(env), "step", None)
    try:
        hints = typing.get_type_hints(step) if step is not None else {}
    except Exception:
        return None
    found = hints.get("action")
    return found if isinstance(found, type) and issubclass(found, BaseModel) else None


class _Step:
    __slots__ = ("done", "observation", "reward")

    def __init__(self, observation: Any, reward: float | None, done: bool) -> None:
        self.observation = observation
        self.reward = reward
        self.done = done


class _Local:
    """An in-process OpenEnv Environment, its calls on one thread of its own."""

    def __init__(self, env: Any) -> None:
        self.env = env
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="openenv")

    async def _call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.executor, lambda: fn(*args, **kwargs))

    @staticmethod
    def _result(observation: Any) -> _Step:
        return _Step(observation, getattr(observation, "reward", None), bool(observation.done))

    async def reset(self, **options: Any) -> _Step:
        return self._result(await self._call(self.env.reset, **options))

    async def step(self, action: Any) -> _Step:
        return self._result(await self._call(self.env.step, action))

    async def state(self) -> Any:
        state = await self._call(lambda: self.env.state)
        return state.model_dump() if isinstance(state, BaseModel) else state

    async def close(self) -> None:
        try:
            await self._call(self.env.close)
        finally:
            self.executor.shutdown(wait=False)


class _Remote:
    """An OpenEnv `EnvClient`: one server session."""

    def __init__(self, client: Any) -> None:
        self.client = client

    @staticmethod
    def _result(result: Any) -> _Step:
        return _Step(result.observation, result.reward, bool(result.done))

    async def reset(self, **options: Any) -> _Step:
        await self.client.connect()
        return self._result(await self.client.reset(**options))

    async def step(self, action: Any) -> _Step:
        return self._result(await self.client.step(action))

    async def state(self) -> Any:
        state = await self.client.state()
        return state.model_dump() if isinstance(state, BaseModel) else state

    async def close(self) -> None:
        await self.client.close()


class OpenEnvEpisode(BasicEpisode):
    """One OpenEnv episode: `step(reply)` in text mode, tools in tools mode."""

    def __init__(
        self,
        backend: _Local | _Remote,
        *,
        action: Callable[[str], Any],
        observe: Callable[[Any], str],
        opening: list[Message],
        tools: list[Tool] | None = None,
    ) -> None:
        self.backend = backend
        self.action = action
        self.observe = observe
        self.rewards: list[float] = []
        self.done = False
        self.last_state: Any = None
        super().__init__(tools or (), state=None, opening=opening)
        self.on_close(self._close)

    async def _close(self) -> None:
        await self.backend.close()

    async def _record(self, step: _Step) -> float:
        reward = float(step.reward or 0.0)
        self.rewards.append(reward)
        self.done = step.done
        # The runner reads final_state() before the episode closes: keep it current.
        self.last_state = await self.backend.state()
        return reward

    async def step(self, action: str) -> Observation:
        if self.done:
            return Observation(action=action, observation="The episode is over.", terminated=True)
        try:
            built = self.action(action)
        except (ValueError, ValidationError, TypeError) as exc:
            return Observation(
                action=action,
                observation=f"Invalid action: {exc}",
                info={"invalid_action": True},
            )
        result = await self.backend.step(built)
        reward = await self._record(result)
        return Observation(
            action=action,
            observation=self.observe(result.observation),
            reward=reward,
            terminated=result.done,
        )

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> str:
        if self.done:
            raise RuntimeError("the episode is over")
        result = await self.backend.step(CallToolAction(tool_name=name, arguments=arguments))
        await self._record(result)
        observation = result.observation
        error = getattr(observation, "error", None)
        if error:
            message = getattr(error, "message", None) or str(error)
            raise RuntimeError(message)
        value = getattr(observation, "result", observation)
        value = getattr(value, "data", value) if not isinstance(value, str | dict) else value
        return value if isinstance(value, str) else json.dumps(value, default=str)

    def final_state(self) -> Any:
        return {"rewards": list(self.rewards), "done": self.done, "state": self.last_state}


async def _reward_sum(task: Task, trajectory: Trajectory) -> Rewards:
    rewards = (trajectory.final_state or {}).get("rewards", [])
    return Rewards(reward=float(sum(rewards)), components={"steps": float(len(rewards))})


async def _reward_last(task: Task, trajectory: Trajectory) -> Rewards:
    rewards = (trajectory.final_state or {}).get("rewards", [])
    return Rewards(reward=float(rewards[-1]) if rewards else 0.0)


class OpenEnv(Env):
    """An OpenEnv environment (in process, or a server through its client) as an `Env`."""

    def __init__(
        self,
        env: str | Callable[[], Any] | None = None,
        *,
        base_url: str | None = None,
        name: str = "openenv",
        tasks: Iterable[Task] | None = None,
        seeds: Iterable[int] | None = None,
        prompt: str | None = None,
        mode: Literal["text", "tools"] = "text",
        action: Callable[[str], Any] | None = None,
        observe: Callable[[Any], str] | None = None,
        reward: Literal["sum", "last"] = "sum",
        max_steps: int = 20,
        system_prompt: str | None = None,
    ) -> None:
        if (env is None) == (base_url is None):
            raise EpisodeError("OpenEnv needs exactly one of env= (a factory) or base_url=")
        if reward not in ("sum", "last"):
            raise ValueError(f"reward must be 'sum' or 'last', got {reward!r}")
        harness = (
            ToolLoop(max_turns=max_steps, system_prompt=system_prompt)
            if mode == "tools"
            else MultiStep(max_steps=max_steps, system_prompt=system_prompt)
        )
        if prompt is None:
            prompt = DEFAULT_TOOLS_PROMPT if mode == "tools" else DEFAULT_PROMPT
        if tasks is None:
            tasks = [
                Task(id=f"seed-{seed}", prompt=prompt, metadata={"reset": {"seed": seed}})
                for seed in (seeds if seeds is not None else range(16))
            ]
        super().__init__(
            _reward_sum if reward == "sum" else _reward_last,
            name=name,
            tasks=tasks,
            harness=harness,
        )
        self.env = env
        self.base_url = base_url
        self.mode = mode
        self._action = action
        self.observe = observe or _default_observe
        self._factory: Callable[[], Any] | None = None

    def _make(self) -> Any:
        if self.base_url is not None:
            from openenv.core.generic_client import GenericEnvClient

            return GenericEnvClient(base_url=self.base_url)
        if self._factory is None:
            factory = self.env
            if isinstance(factory, str):
                from pkgutil import resolve_name

                factory = resolve_name(factory)
            if not callable(factory):
                raise EpisodeError(f"OpenEnv(env={self.env!r}) is not callable")
            self._factory = factory
        return self._factory()

    async def open(self, task: Task) -> OpenEnvEpisode:
        made = self._make()
        if isinstance(made, EnvClient):
            backend: _Local | _Remote = _Remote(made)
            action_cls = None
        elif isinstance(made, OpenEnvEnvironment) or hasattr(made, "step"):
            backend = _Local(made)
            action_cls = _step_action_class(made)
        else:
            raise EpisodeError(
                f"OpenEnv(env=...) made a {type(made).__name__}: expected an OpenEnv "
                "Environment or EnvClient"
            )
        try:
            options = dict(task.metadata.get("reset") or {})
            first = await backend.reset(**options)
            shown = self.observe(first.observation)
            episode = OpenEnvEpisode(
                backend,
                action=self._action or _action_builder(action_cls),
                observe=self.observe,
                # An observation with nothing to show (an MCP env's reset) adds no turn.
                opening=[Message.user(shown)] if shown.strip() not in ("", "{}") else [],
            )
            if self.mode == "tools":
                episode.tools = await _tools(episode)
        except BaseException:
            await backend.close()
            raise
        return episode


async def _tools(episode: OpenEnvEpisode) -> list[Tool]:
    listed = await episode.backend.step(ListToolsAction())
    described = getattr(listed.observation, "tools", None)
    if described is None and isinstance(listed.observation, Mapping):
        described = listed.observation.get("tools")
    if described is None:
        raise EpisodeError("mode='tools': the environment did not list tools (not an MCP env?)")
    tools: list[Tool] = []
    for item in described:
        data = item.model_dump() if isinstance(item, BaseModel) else dict(item)
        name = data["name"]

        async def call(__name: str = name, **arguments: Any) -> str:
            return await episode.call_tool(__name, arguments)

        spec = ToolSpec(
            name=name,
            description=data.get("description") or "",
            parameters=data.get("input_schema") or {"type": "object", "properties": {}},
        )
        tools.append(Tool(spec=spec, fn=call))
    return tools
