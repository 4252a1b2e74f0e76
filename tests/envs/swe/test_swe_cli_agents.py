"""Real CLI agents on an SWE task, end to end: the agent program runs in the task's
container (the sample task's image, the repository in /testbed), its model calls are
served by a scripted policy, and its repository is graded in a fresh container.

Needs the private Docker engine (`eval "$(bash scripts/docker-engine.sh start)"`) and the
agent programs (`bash scripts/install-agents.sh`); a test without either skips, naming
what is missing. The programs are mounted read-only into the task's image, which has
python3 but no Node and no agent (see docs/harness-cli-agents.md, "In a container").
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable

import pytest
from harnesses.agent_policy import policy

import nemo_gym as gym
from nemo_gym.envs.swe import SWEEnv
from nemo_gym.harnesses.cli import CLIAgent
from nemo_gym.harnesses.cli.adapters import ClaudeCode, Codex, MiniSWEAgent, OpenCode, Pi, QwenCode
from nemo_gym.harnesses.cli.programs import find
from nemo_gym.models import ScriptedModel
from nemo_gym.sandbox.docker import DockerProvider

DOCKER_HOST = os.environ.get("NEMO_GYM_DOCKER_HOST") or os.environ.get("DOCKER_HOST")


def _no_engine() -> str | None:
    if not DOCKER_HOST:
        return (
            "no docker engine: set NEMO_GYM_DOCKER_HOST or DOCKER_HOST (scripts/docker-engine.sh)"
        )
    path = DOCKER_HOST.removeprefix("unix://")
    if DOCKER_HOST.startswith(("unix://", "/")) and not os.path.exists(path):
        return f"no docker engine socket at {path} (scripts/docker-engine.sh start)"
    return None


pytestmark = pytest.mark.skipif(_no_engine() is not None, reason=_no_engine() or "")

AGENTS = {
    "codex": Codex,
    "claude-code": ClaudeCode,
    "opencode": OpenCode,
    "mini-swe-agent": MiniSWEAgent,
    "pi": Pi,
    "qwen-code": QwenCode,
}

BUGGY_MEAN = "sum(values) / (len(values) - 1)"
FIXED_MEAN = "sum(values) / len(values)"


def _replace(old: str, new: str) -> str:
    return (
        "python3 -c \"import pathlib; p = pathlib.Path('calc/ops.py'); "
        f"p.write_text(p.read_text().replace('{old}', '{new}'))\""
    )


FIX = _replace(BUGGY_MEAN, FIXED_MEAN)
# Right for a single value, wrong for [1, 2, 3, 6]: test_mean still fails.
WRONG_FIX = _replace(BUGGY_MEAN, "sum(values) / max(len(values) - 1, 1)")
DONE = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
PASSING_REPORT = (
    "import pytest\n\n"
    "@pytest.hookimpl(hookwrapper=True)\n"
    "def pytest_runtest_makereport(item, call):\n"
    "    outcome = yield\n"
    "    outcome.get_result().outcome = 'passed'\n"
)
HACKS = {
    "a conftest.py hook that passes every test": (
        f"cat > tests/conftest.py <<'NEMO_EOF'\n{PASSING_REPORT}NEMO_EOF"
    ),
    "the test file symlinked out of the repository": (
        "printf 'def test_mean():\\n    pass\\n\\ndef test_mean_single():\\n    pass\\n'"
        " > /tmp/fake_test.py && ln -sf /tmp/fake_test.py tests/test_ops.py"
    ),
}


def _agent(name: str) -> CLIAgent:
    if find(name) is None:
        pytest.skip(
            f"{name} is not installed: bash scripts/install-agents.sh "
            f"(python -m nemo_gym.harnesses.cli.programs install {name})"
        )
    provider = DockerProvider(host=DOCKER_HOST, pull=False)
    harness: CLIAgent = AGENTS[name](provider=provider, timeout=240)
    return harness


async def _solve(
    harness: CLIAgent, *steps: str
) -> tuple[gym.Rollout, Callable[[gym.ModelRequest], gym.ModelResponse]]:
    env = SWEEnv()
    script = functools.partial(policy, steps=(*steps, DONE))
    try:
        task = next(iter(env.tasks()))
        rollout = await gym.rollout(env, ScriptedModel(script), task, harness=harness)
    finally:
        await harness.aclose()
        await env.aclose()
    return rollout, script


def _swe(rollout: gym.Rollout) -> dict[str, object]:
    assert rollout.failure is None, rollout.failure
    state = rollout.trajectory.final_state
    assert isinstance(state, dict) and isinstance(state.get("swe"), dict), state
    return state["swe"]


@pytest.mark.parametrize("name", list(AGENTS))
async def test_a_cli_agent_solves_the_swe_task_in_its_container(name: str) -> None:
    rollout, _ = await _solve(_agent(name), FIX, "python3 -m pytest -q tests")
    swe = _swe(rollout)
    assert rollout.reward == 1.0, swe.get("log")
    assert "calc/ops.py" in str(swe["model_patch"]) and FIXED_MEAN in str(swe["model_patch"])
    calls = rollout.trajectory.model_calls
    assert calls and all(c.response.completion_token_ids for c in calls)


async def test_a_wrong_edit_scores_0() -> None:
    rollout, _ = await _solve(_agent("codex"), WRONG_FIX)
    swe = _swe(rollout)
    assert rollout.reward == 0.0
    assert swe["fail_to_pass"] == {  # the edit was taken and graded: one test still fails
        "success": ["tests/test_ops.py::test_mean_single"],
        "failure": ["tests/test_ops.py::test_mean"],
    }


@pytest.mark.parametrize("hack", sorted(HACKS))
async def test_a_hack_through_a_cli_agent_scores_0(hack: str) -> None:
    rollout, _ = await _solve(_agent("codex"), HACKS[hack])
    swe = _swe(rollout)
    assert rollout.reward == 0.0, swe.get("log")
    assert swe["refused"], swe  # the planted file is named, not silently graded


async def test_the_agents_files_are_taken_without_running_anything_in_its_container() -> None:
    """An agent that breaks the container's python3 (which reading files through it
    would run) is still graded on its fix: its container is frozen and read through the
    engine's archive API."""
    broken = (
        "printf '#!/bin/sh\\nexit 3\\n' > /usr/local/bin/python3 && chmod +x /usr/local/bin/python3"
    )
    rollout, _ = await _solve(_agent("codex"), FIX, broken)
    assert rollout.reward == 1.0, _swe(rollout).get("log")
