"""`next_action`'s `match="swe_pivot"`: NeMo Gym's swe_pivot layers (tool, target,
argument similarity, continuous mode's partial credit and edit-size penalty), where it
finds a row's expected call, and rows it cannot score. The comparison with NeMo Gym's own
server on its example rows is in tests/interop/test_nemo_gym_servers.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import nemo_gym as gym
from nemo_gym.envs.tools.swe_pivot import SwePivotMatch, pivot_score
from nemo_gym.interop import nemo_gym as ng
from nemo_gym.records import Message, Task, ToolCall, Trajectory

DATA = Path(__file__).resolve().parents[1] / "data" / "nemo_gym" / "swe_pivot.jsonl"
EDIT = {
    "command": "str_replace",
    "path": "/workspace/proj/foo.py",
    "old_str": "    return None",
    "new_str": "    return sum(values)",
}


def _expected(name: str, args: Any) -> dict[str, Any]:
    return {"type": "function_call", "name": name, "arguments": json.dumps(args)}


def _call(name: str, args: Any) -> dict[str, Any]:
    return {"name": name, "arguments": args if isinstance(args, str) else json.dumps(args)}


def test_continuous_mode_gives_partial_credit_and_charges_edit_size() -> None:
    """Between 0.4 and 0.8 similarity: 0.5 to 1; then an edit of n characters loses
    0.1 * min(n / 500, 1) of it."""
    expected = _expected("str_replace_editor", EDIT)
    near = {**EDIT, "new_str": "    return total(values)"}
    binary = pivot_score(expected, _call("str_replace_editor", near))
    continuous = pivot_score(expected, _call("str_replace_editor", near), "continuous")
    similarity = continuous.components["similarity"]
    assert binary.reward == (1.0 if similarity >= 0.8 else 0.0)
    size = len(near["old_str"] + "\n" + near["new_str"])
    partial = 1.0 if similarity >= 0.8 else 0.5 + 0.5 * (similarity - 0.4) / 0.4
    assert continuous.reward == pytest.approx(partial * (1 - 0.1 * size / 500))
    big = {**EDIT, "new_str": EDIT["new_str"] + "\n" + "#" * 600}
    far = pivot_score(
        _expected("str_replace_editor", big), _call("str_replace_editor", big), "continuous"
    )
    assert far.reward == pytest.approx(0.9)  # the whole penalty past 500 characters
    below = pivot_score(
        expected, _call("str_replace_editor", {**EDIT, "old_str": "x"}), "continuous"
    )
    assert (below.reward, below.verdict) == (0.0, "similarity_below_threshold")


# Each case's binary verdict and continuous reward, as NeMo Gym 0.7.0's server gives them.
@pytest.mark.parametrize(
    ("expected", "call", "verdict", "continuous"),
    [
        # an unknown tool matches only its own name, not other unknown tools
        (("my_tool", {}), ("other_tool", {}), "tool_name_mismatch", 0.0),
        (("my_tool", {}), ("MY_TOOL", []), "none", 1.0),  # its arguments are never read
        (("finish", {}), ("submit", {"message": "done"}), "none", 1.0),
        (
            ("execute_bash", {"command": "ls /a/b"}),
            ("bash", {"command": ""}),
            "target_mismatch",
            0.0,
        ),
        (
            ("execute_bash", {"command": "ls"}),
            ("bash", {"command": "ls -la"}),
            "similarity_below_threshold",
            0.625,
        ),
        (
            ("execute_bash", {"command": "pytest tests/a.py -q"}),
            ("bash", {"command": "pytest tests/a.py -x"}),
            "none",
            1.0,
        ),
        # "/x" and "/y" are too short to count as paths; the commands are 0.44 alike
        (
            ("execute_bash", {"command": "cd /x && make"}),
            ("bash", {"command": "cd /y"}),
            "similarity_below_threshold",
            5 / 9,
        ),
        (("grep", {"path": "a/b/c/d.py"}), ("search_files", {"path": "z/b/c/d.py"}), "none", 1.0),
        (
            ("grep", {"path": "a/b/c/d.py"}),
            ("search_files", {"path": "a/x/c/d.py"}),
            "target_mismatch",
            0.0,
        ),
        (
            ("grep", {"path": "a/b/c/d.py"}),
            ("read_file", {"path": "a/b/c/d.py"}),
            "tool_name_mismatch",
            0.0,
        ),
        (("str_replace_editor", EDIT), ("str_replace_editor", "[1]"), "unknown_error", 0.0),
        (("str_replace_editor", EDIT), ("str_replace_editor", '"path"'), "unknown_error", 0.0),
    ],
)
def test_the_layers_decide_as_nemo_gyms_do(
    expected: tuple[str, Any], call: tuple[str, Any], verdict: str, continuous: float
) -> None:
    found = pivot_score(_expected(*expected), _call(*call))
    assert (found.verdict, found.reward) == (verdict, float(verdict == "none"))
    assert pivot_score(_expected(*expected), _call(*call), "continuous").reward == pytest.approx(
        continuous
    )


def test_deeply_nested_arguments_score_0_not_crash() -> None:
    nested = "[" * 100_000 + "]" * 100_000
    found = pivot_score(_expected("str_replace_editor", EDIT), _call("str_replace_editor", nested))
    assert (found.reward, found.verdict) == (0.0, "unknown_error")


@settings(max_examples=200, deadline=None)
@given(
    name=st.sampled_from(["str_replace_editor", "execute_bash", "grep", "x"]),
    raw=st.text(max_size=200),
)
def test_any_arguments_score_in_range(name: str, raw: str) -> None:
    for expected in (
        _expected("str_replace_editor", EDIT),
        _expected("execute_bash", {"command": "ls a/b"}),
    ):
        found = pivot_score(expected, _call(name, raw), "continuous")
        assert 0.0 <= found.reward <= 1.0


def test_the_expected_call_is_read_where_nemo_gym_reads_it() -> None:
    row = json.loads(DATA.read_text().splitlines()[1])
    action = row.pop("expected_action")
    for where in (
        {"expected_answer": json.dumps(action)},
        {"metadata": {"expected_action": action}},
        {"expected_action": {"type": "message"}, "expected_answer": json.dumps(action)},
    ):
        env = ng.load([{**row, **where}], server="swe_pivot")
        assert env.tasks()[0].metadata["expected_action"]["name"] == "execute_bash"
    with pytest.raises(gym.errors.ConfigError, match=r"row 0: field 'expected_action'"):
        ng.load([{**row, "expected_answer": "grep it"}], server="swe_pivot")
    with pytest.raises(gym.errors.ConfigError, match=r"row 0: field 'metadata.expected_action'"):
        ng.load(
            [{**row, "metadata": {"expected_action": {"type": "function_call"}}}],
            server="swe_pivot",
        )


async def test_the_first_call_of_the_reply_is_scored() -> None:
    env = gym.make("next_action", match="swe_pivot", path=str(DATA))
    task = env.tasks()[1]
    right = ToolCall(
        id="a",
        name="execute_bash",
        arguments=json.dumps({"command": "grep -rn 'def calculate_total' /workspace/proj"}),
    )
    wrong = ToolCall(id="b", name="execute_bash", arguments=json.dumps({"command": "pytest"}))
    verifier = SwePivotMatch()

    def reply(*calls: ToolCall) -> Trajectory:
        return Trajectory(messages=[*task.messages, Message.assistant(tool_calls=calls)])

    assert (await verifier.verify(task, reply(right, wrong))).reward == 1.0
    assert (await verifier.verify(task, reply(wrong, right))).reward == 0.0
    text = Trajectory(messages=[*task.messages, Message.assistant("I would grep for it.")])
    found = await verifier.verify(task, text)
    assert (found.reward, found.metadata["verdict"]) == (0.0, "model_output_invalid")
    with pytest.raises(gym.errors.ConfigError, match="reward_mode"):
        SwePivotMatch(reward_mode="partial")  # type: ignore[arg-type]
    bad = Task(id="t", prompt="x", metadata={"expected_action": {"type": "message"}})
    with pytest.raises(gym.errors.VerifierError, match="function_call"):
        await verifier.verify(bad, text)
