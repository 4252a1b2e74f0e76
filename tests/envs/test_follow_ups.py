"""`follow_ups`: scripted follow-up questions, the last reply scored by the contains rule."""

from __future__ import annotations

import pytest

import nemo_gym as gym
from nemo_gym.interop import nemo_gym as ng


async def test_follow_ups_are_asked_in_turn_and_only_the_last_reply_counts() -> None:
    env = gym.make("follow_ups")
    task = env.tasks()[1]  # 6 * 7, minus 2, halved: 20
    replies = ["42", "40", "20"]
    done = await gym.rollout(env, gym.models.ScriptedModel(replies), task)
    users = [m.content for m in done.trajectory.messages if m.role == "user"]
    assert users[1:] == task.metadata["follow_ups"]
    assert done.reward == 1.0
    early = await gym.rollout(env, gym.models.ScriptedModel(["20", "20", "no idea"]), task)
    assert early.reward == 0.0


async def test_a_list_of_every_candidate_does_not_name_the_answer() -> None:
    env = gym.make("follow_ups")
    task = env.tasks()[1]
    listing = " ".join(str(i) for i in range(101))
    done = await gym.rollout(env, gym.models.ScriptedModel(["a", "b", listing]), task)
    assert done.reward == 0.0
    in_word = await gym.rollout(env, gym.models.ScriptedModel(["a", "b", "120"]), task)
    assert in_word.reward == 0.0


def test_bad_follow_ups_are_a_clear_error() -> None:
    row = {
        "responses_create_params": {"input": "hi"},
        "follow_ups": "next?",
        "expected_answer": "x",
    }
    with pytest.raises(gym.errors.ConfigError, match="row 0: field 'follow_ups'"):
        ng.load([row], server="example_multi_turn_gymnasium")
