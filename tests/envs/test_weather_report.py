"""`weather_report`: the call is read from the episode's state, the report from the reply."""

from __future__ import annotations

import json

import pytest

import nemo_gym as gym
from nemo_gym.interop import nemo_gym as ng
from nemo_gym.records import Message, ToolCall


def _weather(city: object) -> Message:
    call = ToolCall(id="c0", name="get_weather", arguments=json.dumps({"city": city}))
    return Message.assistant(tool_calls=(call,))


async def test_both_the_call_and_the_report_are_needed() -> None:
    env = gym.make("weather_report")
    task = env.tasks()[0]  # Lisbon
    report = "The weather in Lisbon is sunny and 72 F."
    done = await gym.rollout(env, gym.models.ScriptedModel([_weather("lisbon"), report]), task)
    assert done.reward == 1.0 and done.trajectory.final_state == {"calls": ["lisbon"]}
    # The sentence is predictable; without the call it does not count.
    unseen = await gym.rollout(env, gym.models.ScriptedModel([report]), task)
    assert unseen.reward == 0.0
    bad = await gym.rollout(env, gym.models.ScriptedModel([_weather(7), report]), task)
    assert bad.reward == 0.0 and bad.trajectory.final_state == {"calls": []}


def test_rows_default_to_paris_and_refuse_a_bad_city() -> None:
    row = {"responses_create_params": {"input": "weather?"}}
    env = ng.load([row], server="example_mcp_weather")
    assert env.tasks()[0].metadata["expected_city"] == "Paris"
    with pytest.raises(gym.errors.ConfigError, match="row 0: field 'verifier_metadata'"):
        ng.load([{**row, "verifier_metadata": {"expected_city": ""}}], server="example_mcp_weather")
