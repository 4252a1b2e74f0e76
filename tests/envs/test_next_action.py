"""`next_action`: NeMo Gym's single-step action comparison, and where ours is stricter."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import nemo_gym as gym
from nemo_gym.envs.tools.next_action import NextActionMatch
from nemo_gym.records import Message, Task, ToolCall, Trajectory


def _task(action: dict[str, Any]) -> Task:
    return Task(id="t", prompt="Help me.", metadata={"tools": [], "expected_action": action})


def _call(name: str, arguments: Any) -> dict[str, Any]:
    return {"type": "function_call", "name": name, "arguments": json.dumps(arguments)}


def _reply(*calls: tuple[str, Any], text: str | None = None) -> Trajectory:
    tool_calls = tuple(
        ToolCall(id=f"c{i}", name=n, arguments=a if isinstance(a, str) else json.dumps(a))
        for i, (n, a) in enumerate(calls)
    )
    return Trajectory(
        messages=[Message.user("Help me."), Message.assistant(text, tool_calls=tool_calls)]
    )


async def _score(verifier: NextActionMatch, action: dict[str, Any], reply: Trajectory) -> float:
    return (await verifier.verify(_task(action), reply)).reward


@pytest.mark.parametrize(
    ("expected", "actual", "reward"),
    [
        ({"n": 1}, {"n": True}, 1.0),  # NeMo Gym's isinstance: a bool is an int
        ({"n": 1.0}, {"n": 1}, 0.0),  # an int is not a float
        ({"x": 0.1}, {"x": 0.1 + 1e-9}, 1.0),
        ({"x": 0.1}, {"x": 0.1 + 1e-5}, 0.0),
        ({"id": "B-7"}, {"id": "b-7"}, 0.0),  # one word: exactly equal
        ({"s": "user wants a refund now"}, {"s": "REFUND now please"}, 1.0),  # 2/8 >= 0.1
        ({"s": "user wants a refund now"}, {"s": "cancel the order today"}, 0.0),
        ({"a": [1, 2]}, {"a": [1, 2, 3]}, 0.0),
        ({"o": {"k": 1}}, {"o": {"k": 1, "j": 2}}, 0.0),
        ({"o": {"k": 1}}, "{not json", 0.0),
    ],
)
async def test_arguments_compare_as_nemo_gym_compares_them(
    expected: Any, actual: Any, reward: float
) -> None:
    found = await _score(NextActionMatch(), _call("f", expected), _reply(("f", actual)))
    assert found == reward


async def test_a_message_step_takes_any_text_and_a_call_beats_text() -> None:
    verifier = NextActionMatch()
    message = {"type": "message", "content": "What went wrong?"}
    assert await _score(verifier, message, _reply(text="OK.")) == 1.0
    assert await _score(verifier, message, _reply(("f", {}), text="OK.")) == 0.0
    assert await _score(verifier, message, _reply()) == 0.0  # nothing said, nothing called
    call = _call("f", {"n": 1})
    assert await _score(verifier, call, _reply(("f", {"n": 1}), text="Sure.")) == 1.0
    assert await _score(verifier, call, _reply(text="Sure.")) == 0.0


async def test_surplus_calls_cost_unless_allowed() -> None:
    """A guess added to the right call is not the right action (NeMo Gym's default: 1)."""
    call = _call("find", {"id": "A"})
    shotgun = _reply(("find", {"id": "B"}), ("find", {"id": "A"}), ("find", {"id": "C"}))
    assert await _score(NextActionMatch(), call, shotgun) == 0.0
    assert await _score(NextActionMatch(parallel_rewarding=False), call, shotgun) == 1.0
    assert await _score(NextActionMatch(allow_superset=True), call, shotgun) == 1.0
    assert await _score(
        NextActionMatch(allow_superset=True, parallel_mode="f1"), call, shotgun
    ) == (pytest.approx(0.5))


async def test_a_batch_matches_in_any_order_with_a_maximum_matching() -> None:
    """At a 0.35 threshold the first expected call matches both replies' calls, the second
    only the first: pairing in order would strand the second; the matching does not."""
    batch = {
        "type": "function_call_batch",
        "calls": [_call("f", {"s": "alpha beta"}), _call("f", {"s": "alpha beta gamma delta"})],
    }
    reply = _reply(("f", {"s": "alpha beta gamma"}), ("f", {"s": "alpha beta"}))
    assert await _score(NextActionMatch(word_similarity=0.35), batch, reply) == 1.0
    half = _reply(("f", {"s": "alpha beta"}), ("g", {}))
    assert await _score(NextActionMatch(), batch, half) == 0.0
    assert await _score(NextActionMatch(parallel_mode="fractional"), batch, half) == 0.5


@given(st.text(max_size=40), st.text(max_size=40))
def test_any_reply_scores_in_range_and_never_raises(name: str, arguments: str) -> None:
    import asyncio

    call = _call("f", {"s": "two words"})
    reward = asyncio.run(_score(NextActionMatch(), call, _reply((name or "f", arguments))))
    assert reward in (0.0, 1.0)


def test_a_row_without_a_known_action_type_is_a_clear_error() -> None:
    from nemo_gym.interop import nemo_gym as ng

    row = {"responses_create_params": {"input": "hi"}, "expected_action": {"type": "dance"}}
    with pytest.raises(gym.errors.ConfigError, match="row 0: field 'expected_action'"):
        ng.load([row], server="single_step_tool_use_with_argument_comparison")
