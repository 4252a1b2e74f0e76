"""verifiers tasksets through `VerifiersEnv`, against the real verifiers (v1 stack).

verifiers pins openai<3, so it cannot share the main venv: `bash scripts/test-interop.sh`
runs this file in a venv of its own.
"""

from __future__ import annotations

import json

import pytest

import nemo_gym as gym
from nemo_gym.records import Message, ModelRequest, ToolCall

vf = pytest.importorskip("verifiers.v1")

from nemo_gym.interop.verifiers import VerifiersEnv  # noqa: E402


class SumData(vf.TaskData):
    a: int
    b: int


class Calculator(vf.Toolset):
    @vf.tool
    async def add(self, a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    @vf.tool
    async def divide(self, a: int, b: int) -> float:
        """Divide a by b."""
        return a / b


class SumTask(vf.Task[SumData, vf.State]):
    @classmethod
    def toolsets(cls, config):
        return [Calculator(vf.ToolsetConfig())]

    @vf.reward
    async def correct(self, task, trace) -> float:
        return float(trace.last_reply == str(task.a + task.b))

    @vf.reward(weight=0.5)
    async def used_tool(self, trace) -> float:
        return float(bool(trace.tool_messages))

    @vf.metric
    async def turns(self, trace) -> float:
        return float(trace.num_turns)


class SumTaskset(vf.Taskset[SumTask]):
    def load(self):
        for a, b in [(2, 3), (10, 4)]:
            yield SumTask(
                SumData(prompt=f"What is {a} + {b}?", system_prompt="Use tools.", a=a, b=b),
                self.config.task,
            )


def script(request: ModelRequest) -> Message:
    last = request.messages[-1]
    if last.role == "tool":
        return Message.assistant(last.content)
    a, b = [int(x) for x in last.content.removeprefix("What is ").rstrip("?").split(" + ")]
    call = ToolCall(id="c1", name="calculator_add", arguments=json.dumps({"a": a, "b": b}))
    return Message.assistant(None, tool_calls=(call,))


async def test_a_taskset_runs_with_its_toolsets_and_is_scored_by_its_rewards() -> None:
    env = VerifiersEnv(SumTaskset(vf.TasksetConfig()))
    tasks = list(env.tasks())
    assert [t.messages[0] for t in tasks] == [Message.system("Use tools.")] * 2
    assert tasks[0].metadata["verifiers"]["a"] == 2
    rollouts = [r async for r in gym.rollouts(env, gym.models.ScriptedModel(script))]
    assert [r.reward for r in rollouts] == [1.5, 1.5]
    rollout = rollouts[0]
    assert rollout.rewards.components == {"correct": 1.0, "used_tool": 1.0}
    assert rollout.rewards.metadata["metrics"] == {"turns": 2.0}
    tools = rollout.trajectory.model_calls[0].request.tools
    assert sorted(t.name for t in tools) == ["calculator_add", "calculator_divide"]
    add = next(t for t in tools if t.name == "calculator_add")
    assert add.description == "Add two integers."
    assert add.parameters["required"] == ["a", "b"]
    assert rollout.trajectory.tool_results[0].output in ("5", "14")


async def test_a_wrong_answer_and_a_tool_error() -> None:
    def wrong(request: ModelRequest) -> Message:
        if request.messages[-1].role == "tool":
            return Message.assistant("no idea")
        call = ToolCall(id="d", name="calculator_divide", arguments='{"a": 1, "b": 0}')
        return Message.assistant(None, tool_calls=(call,))

    env = VerifiersEnv(SumTaskset(vf.TasksetConfig()))
    task = next(iter(env.tasks()))
    rollout = await gym.rollout(env, gym.models.ScriptedModel(wrong), task)
    assert rollout.ok
    assert rollout.trajectory.tool_results[0].error  # ZeroDivisionError went to the model
    assert rollout.reward == 0.5  # wrong answer, but a tool was used


async def test_a_reward_needing_a_runtime_is_a_verifier_failure_not_a_zero() -> None:
    class BoxTask(SumTask):
        @vf.reward
        async def in_box(self, trace, runtime) -> float:
            return 1.0

    class BoxTaskset(vf.Taskset[BoxTask]):
        def load(self):
            yield BoxTask(SumData(prompt="1 + 1?", a=1, b=1), self.config.task)

    env = VerifiersEnv(BoxTaskset(vf.TasksetConfig()))
    rollout = await gym.rollout(env, gym.models.ScriptedModel(["2"]), next(iter(env.tasks())))
    assert rollout.failure.kind == "verifier"
    assert "in_box" in rollout.failure.message and "runtime" in rollout.failure.message


def test_a_factory_import_path_and_a_bad_source() -> None:
    env = VerifiersEnv(lambda: SumTaskset(vf.TasksetConfig()))
    assert len(list(env.tasks())) == 2
    with pytest.raises(gym.errors.EpisodeError, match="Taskset"):
        list(VerifiersEnv(lambda: 42).tasks())
