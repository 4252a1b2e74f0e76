"""`counter`: verified on the counter the tools kept, never on what the reply claims."""

from __future__ import annotations

import json

import pytest

import nemo_gym as gym
from nemo_gym.interop import nemo_gym as ng
from nemo_gym.records import Message, ToolCall


def _add(count: object, i: int = 0) -> Message:
    call = ToolCall(id=f"c{i}", name="increment_counter", arguments=json.dumps({"count": count}))
    return Message.assistant(tool_calls=(call,))


async def test_the_final_count_decides_and_a_claim_does_not() -> None:
    env = gym.make("counter")
    task = env.tasks()[0]  # from 1, add 2 then 5: 8
    assert (task.metadata["initial_count"], task.metadata["expected_count"]) == (1, 8)
    done = await gym.rollout(env, gym.models.ScriptedModel([_add(2), _add(5, 1), "8"]), task)
    assert done.reward == 1.0 and done.trajectory.final_state == {"count": 8}
    claimed = await gym.rollout(env, gym.models.ScriptedModel(["The count is 8."]), task)
    assert claimed.reward == 0.0 and claimed.trajectory.final_state == {"count": 1}
    # Episodes do not share a counter: the same task again starts from 1.
    again = await gym.rollout(env, gym.models.ScriptedModel([_add(7), "8"]), task)
    assert again.reward == 1.0


async def test_a_count_that_is_not_an_integer_is_refused_and_changes_nothing() -> None:
    env = gym.make("counter")
    task = env.tasks()[0]
    done = await gym.rollout(env, gym.models.ScriptedModel([_add(0.5), _add("x", 1), "?"]), task)
    assert done.trajectory.final_state == {"count": 1}
    outputs = [m.content or "" for m in done.trajectory.messages if m.role == "tool"]
    assert all("an integer is required" in o for o in outputs), outputs


def test_rows_missing_a_count_are_clear_errors() -> None:
    row = {"responses_create_params": {"input": "add 1"}, "initial_count": 0}
    with pytest.raises(gym.errors.ConfigError, match="row 0: missing field 'expected_count'"):
        ng.load([row], server="example_session_state_mgmt")
