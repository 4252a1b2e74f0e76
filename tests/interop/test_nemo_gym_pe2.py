"""NeMo Gym's `math_with_code` (nemo_gym/envs/math/with_code.py) on its own example rows:
the replies of `math_with_code_variants` in test_nemo_gym_servers.py run through our
environment (the Python tool in a sandbox), score what we expect, and score what NeMo
Gym's own `verify` gives on the same responses (through the reference venv; without it
that test skips). The tool itself: globals kept across calls, NeMo Gym's reply shape,
and calls that hang or exit bounded and not replayed.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import nemo_gym as gym
from interop.test_nemo_gym_servers import DATA, PYTHON, Case, _cases, run_reference
from nemo_gym.envs.math.with_code import answers_match, last_boxed
from nemo_gym.interop import nemo_gym as ng
from nemo_gym.records import Message, ToolCall

# Our reward for each reply to every row (numeric rows add "near" and "far").
EXPECTED = {
    "oracle": 1.0,
    "wrong": 0.0,
    "boxed_reply": 1.0,
    "dollars": 1.0,
    "reply_over_tool": 0.0,
    "earlier_message": 1.0,
    "after_error": 1.0,
    "exits": 0.0,
    "echo_prompt": 0.0,
    "empty_last_box": 0.0,
    "unclosed": 0.0,
    "printed_guess": 0.0,
    "near": 1.0,
    "far": 0.0,
}


@pytest.fixture(scope="module")
def cases() -> list[Case]:
    return asyncio.run(_cases("math_with_code"))


def test_math_with_code_rows_score_as_nemo_gyms_rule_says(cases: list[Case]) -> None:
    rows = (DATA / "math_with_code.jsonl").read_text().splitlines()
    assert {c.task_id for c in cases} == {f"math_with_code-{i}" for i in range(len(rows))}
    seen = set()
    for case in cases:
        assert case.ours == EXPECTED[case.reply], (case.task_id, case.reply, case.response)
        seen.add(case.reply)
    assert seen == set(EXPECTED)


def test_math_with_code_rewards_equal_nemo_gyms_own(cases: list[Case]) -> None:
    from pathlib import Path

    if not Path(PYTHON).is_file():
        pytest.skip("no NeMo Gym reference venv (set NEMO_GYM_REFERENCE_PYTHON)")
    theirs = run_reference([(c.server, c.row, c.response) for c in cases])
    for case, found in zip(cases, theirs, strict=True):
        assert "error" not in found, (case.task_id, case.reply, found)
        assert case.ours == found["reward"], (case.task_id, case.reply, found)


def _call(i: int, code: str) -> Message:
    call = ToolCall(id=f"c{i}", name="execute_python", arguments=json.dumps({"code": code}))
    return Message.assistant(tool_calls=(call,))


async def _tool_outputs(turns: list[Message], provider: str = "process") -> list[dict[str, Any]]:
    env = ng.load(DATA / "math_with_code.jsonl", server="math_with_code", provider=provider)
    try:
        task = next(iter(env.tasks()))
        done = await gym.rollout(env, gym.models.ScriptedModel(turns), task)
    finally:
        await env.aclose()
    assert done.status == "ok", done.failure
    return [json.loads(m.content or "") for m in done.trajectory.messages if m.role == "tool"]


def test_the_python_tool_keeps_globals_and_answers_as_nemo_gym() -> None:
    outputs = asyncio.run(
        _tool_outputs(
            [
                _call(0, "import random\nx = np.arange(4)\nr = random.random()\ny = sorted(x)"),
                _call(1, "print(x.sum())\nx * 2"),
                _call(2, "r == random.random()"),
            ]
        )
    )
    # NeMo Gym's builtins have no `sorted`; what ran before the error stays defined.
    assert outputs[0] == {
        "success": False,
        "stdout": "",
        "stderr": "",
        "error_message": "name 'sorted' is not defined",
        "result": None,
    }
    assert outputs[1] == {
        "success": True,
        "stdout": "6\n",
        "stderr": "",
        "error_message": None,
        "result": "[0 2 4 6]",
    }
    # The replayed draw is the first draw's: a fresh draw after it differs.
    assert outputs[2]["success"] and outputs[2]["result"] == "False"


def test_a_call_that_hangs_or_exits_is_bounded_and_not_replayed() -> None:
    outputs = asyncio.run(
        _tool_outputs(
            [
                # Cancelling NeMo Gym's alarm leaves only the sandbox's deadline.
                _call(0, "a = 1\n__import__('signal').alarm(0)\nwhile True: pass"),
                _call(1, "b = 2\n__import__('os')._exit(0)"),
                _call(2, "c = 3\nprint(c)"),
            ]
        )
    )
    assert not outputs[0]["success"] and "timed-out" in outputs[0]["error_message"]
    assert not outputs[1]["success"] and "without a result" in outputs[1]["error_message"]
    # Neither is replayed: the third call runs at once, without their names.
    assert outputs[2]["success"] and outputs[2]["stdout"] == "3\n"


def test_a_call_runs_inside_the_sandbox_not_on_the_host(tmp_path: Any) -> None:
    from nemo_gym.sandbox.local import find_bwrap

    try:
        find_bwrap()
    except Exception as exc:  # no bubblewrap here: the conformance suite covers providers
        pytest.skip(f"no local sandbox: {exc}")
    target = tmp_path / "escaped"
    code = f"__import__('pathlib').Path({str(target)!r}).write_text('x')"
    outputs = asyncio.run(
        _tool_outputs([_call(0, code), Message.assistant("Done.")], provider="local")
    )
    assert not outputs[0]["success"]
    assert not target.exists()


@given(
    st.text(alphabet=st.characters(blacklist_characters="{}\\"), max_size=30),
    st.text(alphabet=st.characters(blacklist_characters="\\")),
)
def test_last_boxed_reads_the_last_balanced_box(inner: str, before: str) -> None:
    text = before + "\\boxed{" + inner + "}"
    found = last_boxed(text)
    assert found == (inner.strip() or None)
    if found is not None:
        assert answers_match(found, f"\\({inner}\\)")
