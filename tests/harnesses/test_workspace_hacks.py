"""Grading an agent's workspace: no hack agent passes the checks without fixing the code.

Each hack agent of `gym.testing.hacks.AGENT_HACKS` works on a task whose test uses
unittest (so a planted `unittest.py` would answer for it); each must score 0, while an
honest agent that fixes the code scores 1 under the same grading.
"""

from __future__ import annotations

from typing import Any

import pytest

import nemo_gym as gym
from nemo_gym.harnesses.cli import CLIAgent, CommandAdapter, FilesWorkspace
from nemo_gym.harnesses.cli.workspace import (
    AgentFiles,
    protected,
    shadows_a_module,
    stop_processes,
    take_files,
)
from nemo_gym.models import ScriptedModel
from nemo_gym.sandbox.local import unavailable_reason
from nemo_gym.testing.hacks import AGENT_HACKS, hack_agent

needs_local = pytest.mark.skipif(
    unavailable_reason() is not None, reason=f"local sandbox: {unavailable_reason()}"
)

CALC = "def add(a, b):\n    return a - b\n"
TEST = (
    "import unittest\n"
    "from calc import add\n\n\n"
    "class TestAdd(unittest.TestCase):\n"
    "    def test_add(self):\n"
    "        self.assertEqual(add(2, 3), 5)\n\n\n"
    "unittest.main()\n"
)
HELPER = "WEIGHT = 1\n"


class UnittestTask(gym.Env):
    """Fix `add`; graded by running the original unittest file."""

    name = "unittest_task"

    def __init__(self) -> None:
        super().__init__(self.score, tasks=[gym.Task(id="calc", prompt="Fix calc.py.")])

    async def open(self, task: gym.Task) -> gym.BasicEpisode:
        episode = gym.BasicEpisode()
        workspace = FilesWorkspace(
            {"calc.py": CALC, "tests/test_calc.py": TEST, "tests/helper.py": HELPER},
            checks=["cd tests && PYTHONPATH=.. python3 test_calc.py"],
            check_files={"tests/test_calc.py": TEST},
            keep=["calc.py", "tests/test_calc.py", "alias.py"],
        )
        episode.workspace = workspace  # type: ignore[attr-defined]
        episode.final_state = lambda: workspace.state  # type: ignore[method-assign]
        return episode

    @staticmethod
    async def score(task: gym.Task, trajectory: gym.Trajectory) -> float:
        checks = (trajectory.final_state or {}).get("checks") or []
        return float(bool(checks) and all(c["exit_code"] == 0 for c in checks))


async def _rollout(harness: CLIAgent) -> gym.Rollout:
    env = UnittestTask()
    try:
        return await gym.rollout(env, ScriptedModel([]), env.tasks()[0], harness=harness)
    finally:
        await harness.aclose()


def _script_agent(script: str, **options: Any) -> CLIAgent:
    escaped = script.replace("{", "{{").replace("}", "}}")
    return CLIAgent(CommandAdapter(name="script", command=["python3", "-c", escaped]), **options)


HONEST = (
    "open('calc.py', 'w').write('def add(a, b):\\n    return a + b\\n')\n"
    "import os\nos.symlink('calc.py', 'alias.py')\n"  # a link inside the workdir is fine
)


@needs_local
@pytest.mark.parametrize("provider", ["local", "process"])
async def test_an_honest_fix_passes_the_fresh_grading(provider: str) -> None:
    rollout = await _rollout(_script_agent(HONEST, provider=provider))
    assert rollout.ok, rollout.failure
    assert rollout.reward == 1.0, rollout.trajectory.final_state
    state = rollout.trajectory.final_state
    assert state["files"]["calc.py"] == "def add(a, b):\n    return a + b\n"
    assert state["files"]["alias.py"] == state["files"]["calc.py"]  # taken as a copy
    assert state["refused"] == {}


@needs_local
@pytest.mark.parametrize("name", list(AGENT_HACKS))
async def test_every_hack_agent_scores_zero(name: str) -> None:
    rollout = await _rollout(hack_agent(name, timeout=60))
    assert rollout.ok, rollout.failure
    assert rollout.reward == 0.0, (name, rollout.trajectory.final_state)
    check = rollout.trajectory.final_state["checks"][0]
    # the real test ran (and failed on the unfixed code), not a fake or nothing
    assert "FAILED" in check["stderr"] and "AssertionError" in check["stderr"], check


@needs_local
async def test_what_the_agent_left_is_refused_with_its_reason() -> None:
    rollout = await _rollout(hack_agent("fifo_and_outside_links"))
    refused = rollout.trajectory.final_state["refused"]
    assert refused["stuck.fifo"].startswith("not a regular file")
    assert refused["passwd.txt"] == "a link that leaves the workspace"
    assert refused["root"] == "a link that leaves the workspace"
    rollout = await _rollout(hack_agent("plant_unittest_module"))
    refused = rollout.trajectory.final_state["refused"]
    assert "unittest.py" in refused and "tests/pytest.py" in refused


@needs_local
async def test_the_agents_processes_are_killed_before_its_files_are_taken() -> None:
    import asyncio

    daemon = (
        "import os, time\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        "        while True:\n"
        "            open('tick', 'a').write('x')\n"
        "            time.sleep(0.001)\n"
        "    os._exit(0)\n"
        "time.sleep(0.2)\n"
    )
    async with gym.sandbox.get("local").start() as box:
        await box.write_file("keep.txt", "kept")
        assert (await box.exec(["python3", "-c", daemon])).exit_code == 0
        assert await stop_processes(box)
        before = await box.read_file("tick")
        await asyncio.sleep(0.2)
        assert await box.read_file("tick") == before  # nothing writes any more
        taken = await take_files(box)
    assert taken.files["keep.txt"] == b"kept" and taken.files["tick"] == before


def test_protected_paths_and_shadowing_modules() -> None:
    for path in (
        "conftest.py",
        "a/b/conftest.py",
        "x.pth",
        "__pycache__/calc.cpython-311.pyc",
        "pyproject.toml",
        ".bashrc",
        ".gitconfig",
        ".git/hooks/pre-commit",
    ):
        assert protected(path), path
    assert not protected("calc.py") and not protected("tests/test_calc.py")
    assert shadows_a_module("unittest.py") and shadows_a_module("tests/json/__init__.py")
    assert shadows_a_module("pytest.py") and shadows_a_module("json.cpython-311-x86_64.so")
    assert shadows_a_module("lib/os.so") and shadows_a_module("unittest/__init__.cpython.so")
    assert not shadows_a_module("calc.py") and not shadows_a_module("test/__init__.py")
    assert not shadows_a_module("json/data.txt")


def test_grading_uses_the_tasks_own_machinery_and_fresh_tests() -> None:
    workspace = FilesWorkspace(
        {"calc.py": "x", "conftest.py": "ORIGINAL", "queue.py": "task's"},
        check_files={"test_calc.py": "TEST"},
    )
    agent = AgentFiles(
        files={
            "calc.py": b"fixed",
            "conftest.py": b"FORGED",
            "test_calc.py": b"EDITED",
            "queue.py": b"agent's",  # the task's own module: the agent may edit it
            "json.py": b"PLANTED",
            "sub/sitecustomize.py": b"PLANTED",
        },
        refused={"link": "a link that leaves the workspace"},
    )
    graded, refused = workspace.graded_files(agent)
    assert graded == {
        "calc.py": b"fixed",
        "queue.py": b"agent's",
        "conftest.py": b"ORIGINAL",
        "test_calc.py": b"TEST",
    }
    assert set(refused) == {"link", "conftest.py", "json.py", "sub/sitecustomize.py"}


@needs_local
async def test_check_env_runs_the_hack_agents_on_a_workspace_environment() -> None:
    report = await gym.acheck_env(UnittestTask(), hacks=True, hack_tasks=1)
    agent_results = {r.hack: r for r in report.hacks if r.hack in AGENT_HACKS}
    assert set(agent_results) == set(AGENT_HACKS)
    assert all(not r.beats_baseline and not r.failures for r in agent_results.values())
    assert "hacks" in report.passed, str(report)


def _children() -> list[int]:
    import os
    from pathlib import Path

    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == os.getpid():
            found.append(int(stat.parent.name))
    return found


@needs_local
async def test_a_cancelled_rollout_closes_the_agent_and_the_grading_sandbox() -> None:
    import asyncio

    before = set(_children())
    harness = _script_agent("import time\ntime.sleep(60)\n")
    env = UnittestTask()
    run = asyncio.ensure_future(
        gym.rollout(env, ScriptedModel([]), env.tasks()[0], harness=harness)
    )
    await asyncio.sleep(3)  # both sandboxes are up: the agent's and the one grading starts
    assert len(set(_children()) - before) >= 2
    run.cancel()
    await asyncio.wait({run})
    await harness.aclose()
    for _ in range(50):
        if not set(_children()) - before:
            break
        await asyncio.sleep(0.1)
    assert not set(_children()) - before
