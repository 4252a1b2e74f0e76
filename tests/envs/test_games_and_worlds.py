"""Game and world rules the oracle checks do not pin down by themselves."""

from __future__ import annotations

import asyncio
import json

from hypothesis import given, settings
from hypothesis import strategies as st

import nemo_gym as gym
from nemo_gym.envs.agents.calendar import check_calendar, minutes, schedule
from nemo_gym.envs.games.blackjack import value
from nemo_gym.envs.games.sokoban import push, solve
from nemo_gym.envs.games.tetris import Game
from nemo_gym.envs.games.wordle import feedback, nemo_gym_penalties, words
from nemo_gym.records import Message, ToolCall


def test_wordle_feedback_counts_repeated_letters_once() -> None:
    assert feedback("apple", "apple") == "GGGGG"
    assert feedback("allee", "apple") == "GY__G"  # one l in the target: one mark
    assert feedback("eerie", "apple") == "____G"
    assert "chump" in words() and len(words()) > 4000


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(words()), st.sampled_from(words()))
def test_wordle_feedback_marks_every_letter(guess: str, target: str) -> None:
    marks = feedback(guess, target)
    assert len(marks) == 5 and (marks == "GGGGG") == (guess == target)


def test_nemo_gym_wordle_penalties() -> None:
    assert nemo_gym_penalties([], []) == 0.0
    # a repeated guess, then a guess that drops a known green and uses eliminated letters
    # crane (G____) eliminates r, a, n, e. crane again: repeated (-0.2) and four eliminated
    # letters (-0.08). stale: drops the green c (-0.05), uses a and e (-0.04).
    total = nemo_gym_penalties(["crane", "crane", "stale"], ["G____", "G____", "_____"])
    assert round(total, 4) == -0.37


async def test_wordle_through_tools_scores_like_nemo_gym() -> None:
    env = gym.make("wordle", interface="tools", scoring="nemo_gym")
    task = next(iter(env.tasks(limit=1)))
    guess = next(w for w in words() if w != task.answer)

    def call(word: str) -> Message:
        return Message.assistant(
            tool_calls=(
                ToolCall(id=word, name="submit_guess", arguments=json.dumps({"guess": word})),
            )
        )

    done = await gym.rollout(
        env,
        gym.models.ScriptedModel([call(guess), call(task.answer), Message.assistant("won")]),
        task,
    )
    assert (
        done.reward is not None and 0.1 <= done.reward <= 1.8
    )  # a win in two: 1.8 minus penalties


def test_blackjack_aces_count_one_or_eleven() -> None:
    assert value(["A", "K"]) == 21 and value(["A", "A", "9"]) == 21 and value(["K", "Q", "5"]) == 25


def test_sokoban_pushes_and_solves() -> None:
    walls = {(r, c) for r in range(5) for c in range(5) if r in (0, 4) or c in (0, 4)}
    boxes = frozenset({(2, 2)})
    assert push(walls, boxes, (2, 1), "right") == ((2, 2), frozenset({(2, 3)}))
    assert push(walls, frozenset({(2, 3)}), (2, 2), "right") == (
        (2, 2),
        frozenset({(2, 3)}),
    )  # wall
    assert solve(walls, frozenset({(2, 3)}), boxes, (2, 1)) == ["right"]


def test_tetris_clears_a_row() -> None:
    game = Game(2, 3, [("-", 1), ("-", 1)])  # a piece two wide fills a row of a 2-wide board
    state, cleared, over = game.act(game.start(), "down")
    assert cleared == 0
    state, cleared, over = game.act(state, "down")  # it reaches the floor and settles
    assert cleared == 1 and not over


@settings(max_examples=80, deadline=None)
@given(st.integers(0, 23), st.integers(0, 59))
def test_clock_times_parse(hour: int, minute: int) -> None:
    assert minutes(f"{hour:02d}:{minute:02d}") == hour * 60 + minute
    twelve = f"{(hour - 1) % 12 + 1}:{minute:02d}{'am' if hour < 12 else 'pm'}"
    assert minutes(twelve) == hour * 60 + minute


def test_calendars_are_checked_like_nemo_gyms() -> None:
    want = {
        "0": {
            "event_id": 0,
            "duration": 60,
            "constraint": "before 11am",
            "min_time": "10:00",
            "max_time": "16:00",
        },
        "1": {
            "event_id": 1,
            "duration": 30,
            "constraint": "between 1pm and 2pm",
            "min_time": "10:00",
            "max_time": "16:00",
        },
    }
    plan = schedule(want)
    assert plan is not None
    good = json.dumps(
        [
            {
                "event_id": i,
                "event_name": "x",
                "start_time": f"{s // 60}:{s % 60:02d}",
                "duration": d,
            }
            for i, s, d in plan
        ]
    )
    assert check_calendar(good, want) == (True, "ok")
    overlap = json.dumps(
        [
            {"event_id": 0, "start_time": "10:00", "duration": 60},
            {"event_id": 1, "start_time": "10:30", "duration": 30},
        ]
    )
    assert check_calendar(overlap, want) == (False, "events overlap")
    assert check_calendar("no calendar", want)[0] is False


async def test_retail_refusal_keeps_the_orders() -> None:
    env = gym.make("retail")
    tasks = [t for t in env.tasks(limit=30) if t.metadata["call"] is None]
    assert tasks  # some requests break the policy
    done = await gym.rollout(env, gym.models.ScriptedModel(env.oracle(tasks[0])), tasks[0])
    assert done.reward == 1.0 and done.trajectory.final_state == tasks[0].metadata["orders"]


def test_reasoning_gym_broken_scorers_are_fixed() -> None:
    from nemo_gym.envs.reasoning.reasoning_gym import _module, score

    halting = _module().create_dataset("game_of_life_halting", size=1, seed=3)
    entry = halting[0]
    assert halting.score_answer("anything", entry) == 1.0  # the upstream scorer's bug
    assert score(halting, "game_of_life_halting", "anything", entry) == 0.0
    assert score(halting, "game_of_life_halting", str(entry["answer"]), entry) == 1.0
    primes = _module().create_dataset("prime_factorization", size=1, seed=3)
    assert score(primes, "prime_factorization", "not a number", primes[0]) == 0.0
    assert asyncio.run(_one("reasoning_gym/prime_factorization", "<answer>x</answer>")) == 0.0


async def _one(name: str, reply: str) -> float | None:
    env = gym.make(name)
    task = next(iter(env.tasks(limit=1)))
    return (await gym.rollout(env, gym.models.ScriptedModel([reply]), task)).reward
