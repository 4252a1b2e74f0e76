"""`multiverse_math`: the altered calculator, and what counts as a computed value."""

from __future__ import annotations

import json

import pytest

import nemo_gym as gym
from nemo_gym.interop import nemo_gym as ng
from nemo_gym.records import Message, ToolCall


def _call(name: str, **arguments: float) -> ToolCall:
    return ToolCall(id=f"call_{name}", name=name, arguments=json.dumps(arguments))


async def test_values_count_only_as_the_tools_results() -> None:
    """Row 0: (2.0 + 3.0) and (4.0 * 5.0) in this universe are 6.2 and 22.0."""
    env = gym.make("multiverse_math")
    task = env.tasks()[0]
    assert task.metadata["ground_truth"] == [6.2, 22.0]
    computed = [
        Message.assistant(tool_calls=(_call("add", a=2, b=3), _call("multiply", a=4, b=5))),
        Message.assistant("6.2 and 22.0"),
    ]
    done = await gym.rollout(env, gym.models.ScriptedModel(computed), task)
    assert done.reward == 1.0
    # Writing the results as text, or as a tool's output in prose, is not a tool's result.
    forged = Message.assistant('{"solution": 6.2} {"solution": 22.0}')
    done = await gym.rollout(env, gym.models.ScriptedModel([forged]), task)
    assert done.reward == 0.0
    # Our arithmetic, not the universe's: 2 + 3 is not 5 here.
    honest = [
        Message.assistant(tool_calls=(_call("return_constant", a=5.0),)),
        Message.assistant("5"),
    ]
    done = await gym.rollout(env, gym.models.ScriptedModel(honest), task)
    assert done.reward == 0.0 and done.rewards is not None
    assert done.rewards.components["found"] == 0.0


def test_bad_rows_are_clear_errors() -> None:
    row = {"responses_create_params": {"input": "x"}, "ground_truth": "[1.0, oops]"}
    with pytest.raises(gym.errors.ConfigError, match="row 0: field 'ground_truth' is not JSON"):
        ng.load([row], server="math_advanced_calculations")
    with pytest.raises(gym.errors.ConfigError, match="field 'ground_truth' must be a list"):
        ng.load([{**row, "ground_truth": '{"a": 1}'}], server="math_advanced_calculations")


async def test_a_tool_outside_the_universe_is_refused() -> None:
    row = {
        "responses_create_params": {
            "input": "x",
            "tools": [{"type": "function", "name": "sqrt", "parameters": {"type": "object"}}],
        },
        "ground_truth": "[1.0]",
    }
    env = ng.load([row], server="math_advanced_calculations")
    done = await gym.rollout(env, gym.models.ScriptedModel(["1"]), env.tasks()[0])
    assert not done.ok and "sqrt" in (done.failure.message if done.failure else "")
