"""SWE-bench Pro rows (NeMo Gym's `swebench_pro`) in the `swe` env: they load unchanged,
and a small Pro-layout task built here is graded by its own run_script and parser_script
in the fresh grading container, as Pro's evaluator grades it (every FAIL_TO_PASS and
PASS_TO_PASS test PASSED, or 0).

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
from nemo_gym.envs.swe import SWEEnv
from nemo_gym.envs.swe.rows import read_row
from nemo_gym.errors import ConfigError
from nemo_gym.records import Message, Rollout, ToolCall

DOCKER_HOST = os.environ.get("NEMO_GYM_DOCKER_HOST") or os.environ.get("DOCKER_HOST")
needs_docker = pytest.mark.skipif(
    not DOCKER_HOST or not os.path.exists(DOCKER_HOST.removeprefix("unix://")),
    reason='no docker engine: eval "$(bash scripts/docker-engine.sh start)"',
)

# Pro's python run_scripts: the selected files arrive comma-joined as one argument.
RUN_SCRIPT = """#!/bin/bash
### COMMON SETUP; DO NOT MODIFY ###
set -e
run_selected_tests() {
  local test_files=("$@")
  python3 -m pytest -v -p no:cacheprovider "${test_files[@]}" || true
}
IFS=',' read -r -a TEST_FILES <<< "$1"
run_selected_tests "${TEST_FILES[@]}"
"""

# Pro's parser contract: parser.py STDOUT STDERR OUTPUT -> {"tests": [{"name", "status"}]}.
PARSER_SCRIPT = """import json, re, sys
stdout = open(sys.argv[1]).read()
tests = [
    {"name": m.group(1), "status": m.group(2)}
    for m in re.finditer(r"^(\\S+::\\S+) (PASSED|FAILED|SKIPPED|ERROR)", stdout, re.M)
]
json.dump({"tests": tests}, open(sys.argv[3], "w"))
"""

FIXED_MEAN = "sum(values) / len(values)"
BUGGY_MEAN = "sum(values) / (len(values) - 1)"


def _pro_row(sample_row: dict[str, Any]) -> dict[str, Any]:
    """The sample task in Pro's layout: the fields of NeMo Gym's swebench_pro example row."""
    return {
        "repo": sample_row["repo"],
        "instance_id": "instance_nemo-gym__calc-" + "a" * 40 + "-vnan",
        "base_commit": sample_row["base_commit"],
        "patch": sample_row["patch"],
        "test_patch": sample_row["test_patch"],
        "problem_statement": sample_row["problem_statement"],
        "requirements": "- mean(values) returns the arithmetic mean.",
        "interface": "No new interfaces are introduced.",
        "repo_language": "python",
        "fail_to_pass": sample_row["FAIL_TO_PASS"],
        "pass_to_pass": sample_row["PASS_TO_PASS"],
        "issue_specificity": '["minor_bug"]',
        "issue_categories": '["back_end_knowledge"]',
        "before_repo_set_cmd": f"git reset --hard {sample_row['base_commit']}\ngit clean -fd",
        "selected_test_files_to_run": '["tests/test_ops.py"]',
        "dockerhub_tag": "nemo-gym.calc-pro",
        "run_script": RUN_SCRIPT,
        "parser_script": PARSER_SCRIPT,
        "base_dockerfile": "FROM python:3.12\nWORKDIR /app\n",
        "instance_dockerfile": "FROM base_calc\n",
        "responses_create_params": {
            "input": [{"role": "user", "content": sample_row["problem_statement"]}]
        },
        "subset": "pro",
        "split": "test",
    }


def _sample_row() -> dict[str, Any]:
    from nemo_gym.envs.swe.sample import sample

    return dict(sample()["rows"][0])


# ------------------------------------------------------------------ loading


def test_a_pro_row_loads_unchanged_with_pros_image_workdir_and_scripts() -> None:
    row = _pro_row(_sample_row())
    task = read_row(row, where="pro.jsonl, line 1")
    assert task.image == "jefzda/sweap-images:nemo-gym.calc-pro"
    assert task.workdir == "/app"
    assert task.run_script == RUN_SCRIPT and task.parser_script == PARSER_SCRIPT
    assert task.selected_test_files == ("tests/test_ops.py",)
    assert task.fail_to_pass == (
        "tests/test_ops.py::test_mean",
        "tests/test_ops.py::test_mean_single",
    )
    digest = "sha256:" + "e" * 64
    pinned = read_row({**row, "image_digest": digest}, where="pro.jsonl, line 1")
    assert pinned.image == f"jefzda/sweap-images@{digest}"


@pytest.mark.parametrize(
    ("field", "value"),
    [("selected_test_files_to_run", "[]"), ("parser_script", ""), ("dockerhub_tag", None)],
)
def test_a_pro_row_missing_a_grading_field_names_it(field: str, value: object) -> None:
    row = _pro_row(_sample_row())
    if value is None:
        del row[field]
    else:
        row[field] = value
    with pytest.raises(ConfigError, match=rf"pro.jsonl, line 3 .*{field}"):
        read_row(row, where="pro.jsonl, line 3")


# ------------------------------------------------------------ on the engine


def _rows(tmp_path: Path) -> Path:
    """The sample repository in an image with it in /app, as Pro's images hold it."""
    from nemo_gym.envs.swe.sample import write_sample

    write_sample(tmp_path / "pro")
    dockerfile = tmp_path / "pro" / "image" / "Dockerfile"
    dockerfile.write_text(dockerfile.read_text().replace("/testbed", "/app"))
    row = {**_pro_row(_sample_row()), "image": "nemo-gym-swe/calc-pro:swe-c", "build": "image"}
    rows = tmp_path / "pro" / "pro.jsonl"
    rows.write_text(json.dumps(row) + "\n")
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


def _run(rows: Path, turns: list[Message], **options: Any) -> Rollout:
    async def go() -> Rollout:
        env = SWEEnv(rows, **options)
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


@needs_docker
@pytest.mark.timeout(300)
def test_a_pro_task_solved_scores_1_graded_by_its_own_scripts(tmp_path: Path) -> None:
    rollout = _run(_rows(tmp_path), _bash(_edit(BUGGY_MEAN, FIXED_MEAN)))
    assert rollout.failure is None, rollout.failure
    assert rollout.rewards is not None and rollout.rewards.reward == 1.0
    swe = rollout.trajectory.final_state["swe"]
    assert swe["tests"]["tests/test_ops.py::test_mean"] == "PASSED"
    assert swe["pass_to_pass"]["failure"] == []


@needs_docker
@pytest.mark.timeout(300)
def test_a_pro_task_failed_scores_0(tmp_path: Path) -> None:
    wrong = _edit(BUGGY_MEAN, "sum(values) / (len(values) + 1)")
    rollout = _run(_rows(tmp_path), _bash(wrong))
    assert rollout.failure is None, rollout.failure
    assert rollout.rewards is not None and rollout.rewards.reward == 0.0
    swe = rollout.trajectory.final_state["swe"]
    assert swe["tests"]["tests/test_ops.py::test_mean"] == "FAILED"
    assert "tests/test_ops.py::test_mean" in swe["fail_to_pass"]["failure"]


@needs_docker
@pytest.mark.timeout(300)
def test_a_planted_parser_output_in_the_agents_container_scores_0(tmp_path: Path) -> None:
    """The scripts and their output live only in the grading container: an agent that
    writes Pro's output.json (all PASSED) where the grading reads it gains nothing."""
    names = json.loads(_sample_row()["FAIL_TO_PASS"]) + json.loads(_sample_row()["PASS_TO_PASS"])
    fake = json.dumps({"tests": [{"name": n, "status": "PASSED"} for n in names]})
    plant = (
        "mkdir -p /nemo_gym_grading && "
        f"printf '%s' '{fake}' > /nemo_gym_grading/output.json && "
        "printf 'import sys\\n' > /nemo_gym_grading/parser.py"
    )
    rollout = _run(_rows(tmp_path), _bash(plant))
    assert rollout.failure is None, rollout.failure
    assert rollout.rewards is not None and rollout.rewards.reward == 0.0
