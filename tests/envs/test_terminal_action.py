"""`terminal_action`: a coding agent's next step against the teacher's, by NeMo Gym's rules."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import nemo_gym as gym
from nemo_gym.interop import nemo_gym as ng
from nemo_gym.records import Message, ToolCall

ROWS = Path(__file__).parents[1] / "data" / "nemo_gym" / "terminal_multi_harness.jsonl"


def _reply(name: str, arguments: str) -> Message:
    return Message.assistant(tool_calls=(ToolCall(id="c", name=name, arguments=arguments),))


@pytest.mark.parametrize(
    ("reply", "reward", "category"),
    [
        (_reply("exec_command", '{"cmd": "ls -la /workspace"}'), 1.0, "EXPECTED_TOOL_CALL"),
        (_reply("exec_command", "{oops"), 0.0, "ARGUMENTS_DECODE_ERROR"),
        (_reply("exec_command", "[1]"), 0.0, "ARGUMENTS_NOT_OBJECT"),
        (_reply("rm_rf", "{}"), 0.0, "TOOL_SCHEMA_NOT_FOUND"),
        (Message.assistant("ls -la /workspace"), 0.0, "ACTION_TYPE_MISMATCH"),
    ],
)
async def test_the_category_says_why(reply: Message, reward: float, category: str) -> None:
    env = gym.make("terminal_action")
    task = env.tasks()[1]  # codex: exec_command {"cmd": "ls -la /workspace"}
    done = await gym.rollout(env, gym.models.ScriptedModel([reply]), task)
    assert done.reward == reward and done.rewards is not None
    if category is not None:
        assert done.rewards.metadata["category"] == category, done.rewards.metadata


async def test_a_rows_threshold_overrides_the_servers() -> None:
    row = json.loads(ROWS.read_text().splitlines()[1])  # exec_command "ls -la /workspace"
    near = _reply("exec_command", '{"cmd": "ls -la /workspac"}')
    rewards = []
    for given in ({}, {"threshold": 1.0}):
        env = ng.load([{**row, **given}], server="terminal_multi_harness")
        done = await gym.rollout(env, gym.models.ScriptedModel([near]), env.tasks()[0])
        rewards.append(done.reward)
    assert rewards == [1.0, 0.0]


async def test_any_message_matches_an_expected_message() -> None:
    """NeMo Gym's rule: a completion message is not compared, only required."""
    env = gym.make("terminal_action")
    task = env.tasks()[0]
    done = await gym.rollout(env, gym.models.ScriptedModel(["Something else."]), task)
    assert done.reward == 1.0


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"expected_action": {"type": "function_call", "name": "x"}}, "expected_action"),
        ({"expected_action": {"type": "shell", "content": "ls"}}, "expected_action"),
        ({"harness": 3}, "harness"),
        ({"threshold": "high"}, "threshold"),
        ({"declared_tools": {"name": "x"}}, "declared_tools"),
    ],
)
def test_bad_rows_name_the_field(tmp_path: Path, change: dict[str, Any], field: str) -> None:
    row = {**json.loads(ROWS.read_text().splitlines()[1]), **change}
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps(row) + "\n")
    with pytest.raises(gym.errors.ConfigError, match=rf"rows.jsonl:1: field .{field}"):
        ng.load(path, server="terminal_multi_harness").tasks()
