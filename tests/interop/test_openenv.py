"""OpenEnv environments through `OpenEnv`, against the real openenv-core: in process,
through its WebSocket server and client on 127.0.0.1, and an MCP tool environment.

The openenv extra cannot share the main venv (it pins pillow below the one installed
there): `bash scripts/test-interop.sh` runs this file in a venv of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from typing import Any, ClassVar

import pytest
from pydantic import field_validator

import nemo_gym as gym
from nemo_gym.records import Message, ModelRequest, ToolCall

pytest.importorskip("openenv.core")

from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import Action, Observation, State

from nemo_gym.interop.openenv import OpenEnv


class GuessAction(Action):
    guess: str

    @field_validator("guess")
    @classmethod
    def _digits(cls, value: str) -> str:
        if not value.strip().isdigit():
            raise ValueError("a guess is a whole number")
        return value


class GuessObservation(Observation):
    feedback: str


class GuessEnvironment(Environment):
    """Guess a number in 1..9 picked from the reset seed; reward 1 for the hit."""

    SUPPORTS_CONCURRENT_SESSIONS = True
    threads: ClassVar[set[str]] = set()

    def __init__(self) -> None:
        super().__init__()
        self._state = State()
        self.secret = 0

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any):
        self._state = State(episode_id=episode_id, step_count=0)
        self.secret = (seed or 0) % 9 + 1
        return GuessObservation(feedback="Guess a number from 1 to 9.")

    def step(self, action: GuessAction, timeout_s: float | None = None, **kwargs: Any):
        GuessEnvironment.threads.add(threading.current_thread().name)
        self._state.step_count += 1
        value = int(action.guess.strip())
        if value == self.secret:
            return GuessObservation(feedback="correct", reward=1.0, done=True)
        hint = "higher" if value < self.secret else "lower"
        return GuessObservation(feedback=hint, reward=0.0, done=self._state.step_count >= 6)

    @property
    def state(self) -> State:
        return self._state


def bisect(request: ModelRequest) -> str:
    """A scripted player: binary search over the feedback so far."""
    low, high = 1, 9
    guess = 5
    for message in request.messages:
        if message.role == "assistant":
            guess = int(message.content)
        elif message.content == "higher":
            low = guess + 1
        elif message.content == "lower":
            high = guess - 1
    if request.messages[-1].role == "user" and request.messages[-1].content in ("higher", "lower"):
        return str((low + high) // 2)
    return "5"


async def test_an_in_process_openenv_environment_off_the_event_loop() -> None:
    GuessEnvironment.threads.clear()
    env = OpenEnv(GuessEnvironment, prompt="Play.", seeds=range(9))
    model = gym.models.ScriptedModel(bisect)
    rollouts = [r async for r in gym.rollouts(env, model, concurrency=4)]
    assert [r.reward for r in rollouts] == [1.0] * 9
    rollout = min(rollouts, key=lambda r: r.task_id)
    assert rollout.task.metadata == {"reset": {"seed": 0}}
    messages = rollout.trajectory.messages
    assert messages[0].content == "Play."
    assert messages[1] == Message.user("Guess a number from 1 to 9.")  # the reset observation
    assert rollout.trajectory.observations[-1].terminated
    assert rollout.trajectory.step_rewards[-1] == 1.0
    state = rollout.trajectory.final_state
    assert state["done"] and state["rewards"][-1] == 1.0 and state["state"]["step_count"] >= 1
    assert all(name.startswith("openenv") for name in GuessEnvironment.threads)


async def test_an_invalid_action_is_shown_to_the_model() -> None:
    env = OpenEnv(GuessEnvironment, seeds=[4], max_steps=2)
    model = gym.models.ScriptedModel(["five", "5"])
    rollout = await gym.rollout(env, model, env.tasks()[0])
    assert rollout.ok, rollout.failure
    first = rollout.trajectory.observations[0]
    assert first.info == {"invalid_action": True}
    assert "Invalid action" in first.observation and "whole number" in first.observation
    assert rollout.reward == 1.0


@contextlib.asynccontextmanager
async def openenv_server():
    import uvicorn
    from openenv.core.env_server.http_server import create_fastapi_app

    app = create_fastapi_app(GuessEnvironment, GuessAction, GuessObservation, max_concurrent_envs=4)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]

    class Quiet(uvicorn.Server):
        def capture_signals(self):
            return contextlib.nullcontext()

    server = Quiet(uvicorn.Config(app, log_level="warning"))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        while not server.started:
            assert not task.done(), task
            await asyncio.sleep(0.02)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task
        sock.close()


async def test_an_openenv_server_through_its_client_a_session_per_episode() -> None:
    async with openenv_server() as url:
        env = OpenEnv(base_url=url, seeds=[2, 7], action=lambda text: {"guess": text})
        model = gym.models.ScriptedModel(bisect)
        rollouts = [r async for r in gym.rollouts(env, model, concurrency=2)]
        assert sorted(r.reward for r in rollouts) == [1.0, 1.0]
        for rollout in rollouts:
            assert rollout.trajectory.messages[1].content == "Guess a number from 1 to 9."
            assert rollout.trajectory.final_state["state"]["step_count"] >= 1


async def test_an_openenv_mcp_environment_in_tools_mode() -> None:
    from fastmcp import FastMCP
    from openenv.core.env_server.mcp_environment import MCPEnvironment

    class Counter(MCPEnvironment):
        def __init__(self) -> None:
            mcp = FastMCP("counter")
            self.total = 0

            @mcp.tool()
            def add(amount: int) -> int:
                """Add to the counter."""
                self.total += amount
                return self.total

            super().__init__(mcp)
            self._state = State()

        def reset(self, seed: int | None = None, episode_id: str | None = None, **kw: Any):
            self.total = 0
            return Observation(metadata={"note": "ready"})

        def _step_impl(self, action: Action, timeout_s: float | None = None, **kw: Any):
            return Observation()

        @property
        def state(self) -> State:
            return self._state

    def script(request: ModelRequest) -> Message:
        if request.messages[-1].role == "tool":
            return Message.assistant(f"total {request.messages[-1].content}")
        return Message.assistant(
            None, tool_calls=(ToolCall(id="1", name="add", arguments='{"amount": 4}'),)
        )

    env = OpenEnv(Counter, mode="tools", seeds=[0])
    rollout = await gym.rollout(env, gym.models.ScriptedModel(script), env.tasks()[0])
    assert rollout.ok, rollout.failure
    assert [t.name for t in rollout.trajectory.model_calls[0].request.tools] == ["add"]
    assert rollout.trajectory.tool_results[0].output == "4"
    assert rollout.trajectory.final_text == "total 4"
    assert [m.role for m in rollout.trajectory.messages][:2] == ["user", "assistant"]
