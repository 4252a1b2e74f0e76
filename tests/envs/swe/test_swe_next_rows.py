"""SWE-Next rows (NeMo Gym's `swe_next`) in the `swe` env: they load unchanged, their
grading artifacts are hidden from the agent, and a small SWE-Next-layout task built here is
graded as SWE-Next (R2E) grades it: its `r2e_tests` run with the image's `.venv` python and
every test the gold-patched snapshot (`expected_output_json`) has PASSED must pass again.

The Docker tests need the private engine (`eval "$(bash scripts/docker-engine.sh start)"`);
without one they skip.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import pytest

import nemo_gym as gym
from nemo_gym.envs.swe import SWEEnv, load_rows
from nemo_gym.envs.swe.grading import parse_r2e
from nemo_gym.envs.swe.rows import R2E_TEST_CMD, read_row
from nemo_gym.errors import ConfigError
from nemo_gym.records import Message, Rollout, ToolCall

DATA = Path(__file__).resolve().parents[2] / "data" / "swe"
DOCKER_HOST = os.environ.get("NEMO_GYM_DOCKER_HOST") or os.environ.get("DOCKER_HOST")
needs_docker = pytest.mark.skipif(
    not DOCKER_HOST or not os.path.exists(DOCKER_HOST.removeprefix("unix://")),
    reason='no docker engine: eval "$(bash scripts/docker-engine.sh start)"',
)

R2E_TESTS = """import pytest
from calc.ops import add, mean


def test_add():
    assert add(1, 2) == 3


def test_mean():
    assert mean([1.0, 2.0, 3.0, 6.0]) == 3.0


def test_mean_single():
    assert mean([4.0]) == 4.0


def test_mean_empty():
    with pytest.raises(ValueError):
        mean([])


def test_fails_with_the_gold_patch_too():
    assert mean([1.0]) == 2.0
"""

# The gold-patched suite's snapshot: a test FAILED there binds nothing (SWE-Next's rule).
EXPECTED = {
    "test_add": "PASSED",
    "test_mean": "PASSED",
    "test_mean_single": "PASSED",
    "test_mean_empty": "PASSED",
    "test_fails_with_the_gold_patch_too": "FAILED",
}


def _next_row(sample_row: dict[str, Any]) -> dict[str, Any]:
    """The sample task in SWE-Next's layout: the fields of NeMo Gym's swe_next example row."""
    return {
        "instance_id": "nemo-gym__calc-" + "b" * 40,
        "repo": sample_row["repo"],
        "language": "python",
        "workdir": "/testbed",
        "image_ref": "nemo-gym-swe/calc-next:swe-c",
        "base_commit": sample_row["base_commit"],
        "patch": sample_row["patch"],
        "test_patch": sample_row["test_patch"],
        "problem_statement": sample_row["problem_statement"],
        "FAIL_TO_PASS": ["test_mean", "test_mean_single"],
        "PASS_TO_PASS": ["test_add", "test_mean_empty"],
        "expected_output_json": json.dumps(EXPECTED),
        "responses_create_params": {
            "input": [{"role": "user", "content": sample_row["problem_statement"]}]
        },
    }


def _sample_row() -> dict[str, Any]:
    from nemo_gym.envs.swe.sample import sample

    return dict(sample()["rows"][0])


# ------------------------------------------------------------------ loading


def test_nemo_gym_swe_next_row_loads_with_r2e_grading_and_its_artifacts_hidden() -> None:
    (task,) = load_rows(DATA / "nemo_gym" / "swe_next.jsonl")
    assert task.test_cmd == R2E_TEST_CMD
    assert ("test_version", "PASSED") in task.expected_output
    assert "r2e_tests" in task.hidden and "expected_test_output.json" in task.hidden
    assert task.image.startswith("lllqaq/") and task.workdir == "/testbed"


@pytest.mark.parametrize("value", ["{}", "not json", '{"t": 1}', "[]"])
def test_a_bad_expected_output_json_names_file_line_and_field(value: str) -> None:
    row = {**_next_row(_sample_row()), "expected_output_json": value}
    with pytest.raises(ConfigError, match=r"next.jsonl, line 4 .*expected_output_json"):
        read_row(row, where="next.jsonl, line 4")


def test_parse_r2e_keys_tests_as_swe_next_snapshots_them() -> None:
    log = (
        "r2e_tests/test_a.py::test_x PASSED\n"
        "=========================== short test summary info ============================\n"
        "PASSED r2e_tests/test_a.py::test_x\n"
        "\x1b[31mFAILED\x1b[0m r2e_tests/test_a.py::TestK::test_y - assert 1 == 2\n"
        "PASSED r2e_tests/test_a.py::test_p[a::b]\n"
        "ERROR r2e_tests/test_b.py::test_z\n"
    )
    assert parse_r2e(log) == {
        "test_x": "PASSED",
        "TestK::test_y": "FAILED",
        "test_p[a::b]": "PASSED",
        "test_z": "ERROR",
    }


# ------------------------------------------------------------ on the engine


def _rows(tmp_path: Path) -> Path:
    """The sample repository with SWE-Next's `r2e_tests` and `.venv/bin/python`."""
    from nemo_gym.envs.swe.sample import write_sample

    write_sample(tmp_path / "next")
    image = tmp_path / "next" / "image"
    (image / "repo" / "r2e_tests").mkdir()
    (image / "repo" / "r2e_tests" / "test_calc.py").write_text(R2E_TESTS)
    (image / "repo" / "expected_test_output.json").write_text(json.dumps(EXPECTED))
    dockerfile = image / "Dockerfile"
    dockerfile.write_text(
        dockerfile.read_text() + 'RUN mkdir -p /testbed/.venv/bin && ln -s "$(command -v python3)" '
        "/testbed/.venv/bin/python\n"
    )
    rows = tmp_path / "next" / "next.jsonl"
    rows.write_text(json.dumps({**_next_row(_sample_row()), "build": "image"}) + "\n")
    return rows


def _bash(*commands: str) -> list[Message]:
    calls = [
        Message.assistant(
            None,
            tool_calls=[ToolCall(id=f"c{i}", name="bash", arguments=json.dumps({"command": c}))],
        )
        for i, c in enumerate(commands)
    ]
    return [*calls, Message.assistant("Done.")]


def _run(rows: Path, turns: list[Message]) -> Rollout:
    async def go() -> Rollout:
        env = SWEEnv(rows)
        try:
            return await gym.rollout(env, gym.models.ScriptedModel(turns), next(iter(env.tasks())))
        finally:
            await env.aclose()

    return asyncio.run(go())


def _edit(old: str, new: str) -> str:
    return (
        "python3 -c \"import pathlib; p = pathlib.Path('calc/ops.py'); "
        f"p.write_text(p.read_text().replace('{old}', '{new}'))\""
    )


BUGGY_MEAN = "sum(values) / (len(values) - 1)"


def _reward(rollout: Rollout) -> float:
    assert rollout.failure is None, rollout.failure
    assert rollout.rewards is not None
    return rollout.rewards.reward


@needs_docker
@pytest.mark.timeout(300)
def test_a_swe_next_task_solved_scores_1_though_a_test_fails_as_with_the_gold(
    tmp_path: Path,
) -> None:
    rollout = _run(_rows(tmp_path), _bash(_edit(BUGGY_MEAN, "sum(values) / len(values)")))
    assert _reward(rollout) == 1.0
    tests = rollout.trajectory.final_state["swe"]["tests"]
    assert tests["test_mean"] == "PASSED"
    assert tests["test_fails_with_the_gold_patch_too"] == "FAILED"


@needs_docker
@pytest.mark.timeout(300)
def test_a_swe_next_task_failed_scores_0(tmp_path: Path) -> None:
    wrong = _edit(BUGGY_MEAN, "sum(values) / (len(values) + 1)")
    rollout = _run(_rows(tmp_path), _bash(wrong))
    assert _reward(rollout) == 0.0
    assert "test_mean" in rollout.trajectory.final_state["swe"]["fail_to_pass"]["failure"]


@needs_docker
@pytest.mark.timeout(300)
def test_the_agent_never_sees_r2e_tests_and_its_own_copy_is_not_graded(tmp_path: Path) -> None:
    """NeMo Gym removes SWE-Next's grading artifacts from the agent's sandbox; an agent
    that writes its own r2e_tests (every test passing) is graded with the image's."""
    fake = "\\n".join(f"def {name}():\\n    pass\\n" for name in EXPECTED)
    plant = (
        "test ! -e r2e_tests && test ! -e expected_test_output.json && "
        f"mkdir r2e_tests && printf '{fake}' > r2e_tests/test_calc.py"
    )
    rollout = _run(_rows(tmp_path), _bash(plant, "test -s r2e_tests/test_calc.py"))
    assert _reward(rollout) == 0.0
    swe = rollout.trajectory.final_state["swe"]
    assert "r2e_tests/test_calc.py" in swe["refused"]
    assert swe["tests"]["test_mean"] == "FAILED"
