"""swemer_oml rows (NeMo Gym's `swemer_oml`) in the `swe` env: they load unchanged, and a
small task built here in that layout is graded by the row's own verifier, as NeMo Gym
grades it: `test.sh`, `config.json`, `grade.py` and `test.patch` in `/tests` of the fresh
grading container, `bash /tests/test.sh`, the reward what `grade.py` wrote to
`/logs/verifier/reward.txt`.

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
from nemo_gym.envs.swe.rows import read_row
from nemo_gym.errors import ConfigError
from nemo_gym.records import Message, Rollout, ToolCall

DATA = Path(__file__).resolve().parents[2] / "data" / "swe"
DOCKER_HOST = os.environ.get("NEMO_GYM_DOCKER_HOST") or os.environ.get("DOCKER_HOST")
needs_docker = pytest.mark.skipif(
    not DOCKER_HOST or not os.path.exists(DOCKER_HOST.removeprefix("unix://")),
    reason='no docker engine: eval "$(bash scripts/docker-engine.sh start)"',
)

# The delivery's contract: restore the graded test surface (here from the image's
# /opt/pristine: the sample image has no git or patch to apply test.patch with), run the
# suite, hand stdout and exit code to grade.py, fail closed.
TEST_SH = """#!/bin/bash
set -uo pipefail
SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
mkdir -p /logs/verifier /workspace/test-results
cd /testbed || { echo 0 > /logs/verifier/reward.txt; exit 1; }
HIDDEN=/opt/pristine/tests/test_ops.py
if ! test -s "$SCRIPT_DIR/test.patch" || ! cp "$HIDDEN" tests/test_ops.py; then
  echo "ERROR: test.patch failed to apply -- hidden tests not installed" >&2
  echo 0 > /logs/verifier/reward.txt
  exit 1
fi
python3 -m pytest -rA -p no:cacheprovider tests > /workspace/test-results/stdout.txt 2>&1
test_exit_code=$?
cat /workspace/test-results/stdout.txt
python3 "$SCRIPT_DIR/grade.py" --stdout /workspace/test-results/stdout.txt \\
  --config "$SCRIPT_DIR/config.json" --exit-code "$test_exit_code" \\
  --reward-out /logs/verifier/reward.txt || true
if [ ! -s /logs/verifier/reward.txt ]; then
  echo "VERIFIER: grader produced no reward; failing closed" >&2
  echo 0 > /logs/verifier/reward.txt
fi
exit "$test_exit_code"
"""

# NeMo Gym's swemer_oml example row's grade.py.
GRADE_PY = """#!/usr/bin/env python3
import argparse, json, re

LINE = re.compile(r"^(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)\\s+(\\S+)", re.M)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--stdout", required=True)
    p.add_argument("--config", required=True)
    p.add_argument("--exit-code", type=int, required=True)
    p.add_argument("--reward-out", required=True)
    args = p.parse_args()
    with open(args.config) as f:
        cfg = json.load(f)
    with open(args.stdout, errors="replace") as f:
        out = f.read()
    statuses = {}
    for status, node in LINE.findall(out):
        statuses.setdefault(node, status)
    required = list(cfg.get("FAIL_TO_PASS") or []) + list(cfg.get("PASS_TO_PASS") or [])
    reward = 1 if required and all(statuses.get(n) == "PASSED" for n in required) else 0
    with open(args.reward_out, "w") as f:
        f.write(f"{reward}\\n")


if __name__ == "__main__":
    main()
"""


def _sample_row() -> dict[str, Any]:
    from nemo_gym.envs.swe.sample import sample

    return dict(sample()["rows"][0])


def _oml_row(sample_row: dict[str, Any]) -> dict[str, Any]:
    """The sample task in swemer_oml's layout: the fields of NeMo Gym's example row."""
    f2p, p2p = json.loads(sample_row["FAIL_TO_PASS"]), json.loads(sample_row["PASS_TO_PASS"])
    return {
        "instance_id": "nemo-gym__calc-oml-1",
        "delivery": "public_fixture",
        "language": "python",
        "repo": "nemo-gym",
        "workdir": "/testbed",
        "image_ref": "nemo-gym-swe/calc-oml:swe-c",
        "base_commit": "",
        "patch": sample_row["patch"],
        "test_patch": sample_row["test_patch"],
        "problem_statement": sample_row["problem_statement"],
        "prompt_statement": sample_row["problem_statement"],
        "test_sh": TEST_SH,
        "config_json": json.dumps({"FAIL_TO_PASS": f2p, "PASS_TO_PASS": p2p}),
        "grade_py": GRADE_PY,
        "test_framework": "pytest",
        "FAIL_TO_PASS": f2p,
        "PASS_TO_PASS": p2p,
        "agent_timeout_sec": 3000.0,
        "verifier_timeout_sec": 3000.0,
        "toml_workdir": "/testbed",
        "responses_create_params": {
            "input": [{"role": "user", "content": sample_row["problem_statement"]}]
        },
    }


# ------------------------------------------------------------------ loading


def test_nemo_gym_swemer_oml_row_loads_with_its_own_verifier() -> None:
    (task,) = load_rows(DATA / "nemo_gym" / "swemer_oml.jsonl")
    names = dict(task.verifier)
    assert set(names) == {"test.sh", "config.json", "grade.py"}
    assert "reward.txt" in names["test.sh"] and task.test_cmd == ""
    assert task.image == "docker.io/xingyaoww/sweb.eval.x86_64.getmoto_s_moto-7365:latest"


@pytest.mark.parametrize(("field", "value"), [("grade_py", ""), ("config_json", "{not json")])
def test_a_bad_verifier_field_names_file_line_and_field(field: str, value: str) -> None:
    row = {**_oml_row(_sample_row()), field: value}
    with pytest.raises(ConfigError, match=rf"oml.jsonl, line 2 .*{field}"):
        read_row(row, where="oml.jsonl, line 2")


# ------------------------------------------------------------ on the engine


def _rows(tmp_path: Path, **changes: Any) -> Path:
    """The sample repository, its hidden test file in /opt/pristine."""
    from nemo_gym.envs.swe.patch import apply_patch
    from nemo_gym.envs.swe.sample import sample, write_sample

    write_sample(tmp_path / "oml")
    image = tmp_path / "oml" / "image"
    base = sample()["repo"]["tests/test_ops.py"].encode()
    hidden = apply_patch({"tests/test_ops.py": base}, _sample_row()["test_patch"])
    (image / "pristine").mkdir()
    (image / "pristine" / "test_ops.py").write_bytes(hidden["tests/test_ops.py"] or b"")
    dockerfile = image / "Dockerfile"
    dockerfile.write_text(
        dockerfile.read_text() + "COPY pristine/test_ops.py /opt/pristine/tests/test_ops.py\n"
    )
    rows = tmp_path / "oml" / "oml.jsonl"
    rows.write_text(json.dumps({**_oml_row(_sample_row()), "build": "image", **changes}) + "\n")
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


def _edit(new: str) -> str:
    old = "sum(values) / (len(values) - 1)"
    return (
        "python3 -c \"import pathlib; p = pathlib.Path('calc/ops.py'); "
        f"p.write_text(p.read_text().replace('{old}', '{new}'))\""
    )


@needs_docker
@pytest.mark.timeout(300)
def test_a_swemer_oml_task_solved_scores_1_by_its_own_grader(tmp_path: Path) -> None:
    rollout = _run(_rows(tmp_path), _bash(_edit("sum(values) / len(values)")))
    assert rollout.failure is None, rollout.failure
    assert rollout.rewards is not None and rollout.rewards.reward == 1.0
    swe = rollout.trajectory.final_state["swe"]
    assert swe["fail_to_pass"]["failure"] == [] and "== test.sh exit 0" in swe["log"]


@needs_docker
@pytest.mark.timeout(300)
def test_a_swemer_oml_task_failed_scores_0(tmp_path: Path) -> None:
    rollout = _run(_rows(tmp_path), _bash(_edit("sum(values) / (len(values) + 1)")))
    assert rollout.failure is None, rollout.failure
    assert rollout.rewards is not None and rollout.rewards.reward == 0.0


@needs_docker
@pytest.mark.timeout(300)
def test_a_test_sh_that_cannot_install_its_tests_is_a_grading_failure(tmp_path: Path) -> None:
    broken = TEST_SH.replace("HIDDEN=/opt/pristine/tests/test_ops.py", "HIDDEN=/opt/missing.py")
    rollout = _run(_rows(tmp_path, test_sh=broken), _bash(_edit("sum(values) / len(values)")))
    assert rollout.failure is not None and rollout.rewards is None
    assert (rollout.failure.kind, rollout.failure.code) == ("verifier", "swe_test_patch")
