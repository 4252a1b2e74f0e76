"""Real CLI agents on a Terminal-Bench/Harbor task directory, end to end: the agent
program runs in a container of the task's image (built from its `environment/`), its
model calls are served by a scripted policy, and the task's own `tests/test.sh` grades
the agent's workdir in a fresh container of that image (`HarborWorkspace`).

Needs the private Docker engine (`eval "$(bash scripts/docker-engine.sh start)"`) and the
agent programs (`bash scripts/install-agents.sh`); a test without either skips, naming
what is missing.
"""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
from envs.swe.test_swe_cli_agents import AGENTS, DOCKER_HOST, DONE, _agent, _no_engine
from harnesses.agent_policy import policy

import nemo_gym as gym
from nemo_gym.harnesses.cli import CLIAgent
from nemo_gym.interop.harbor import HarborEnv
from nemo_gym.models import ScriptedModel

pytestmark = pytest.mark.skipif(_no_engine() is not None, reason=_no_engine() or "")

TASK = Path(__file__).parents[2] / "interop" / "harbor_tasks" / "fix-add"
FIX = "sed -i 's/a - b/a + b/' /app/calc.py && python3 /app/check_calc.py"
# add(2, 3) == 6: check_calc.py and the tests' EXPECTED=5 both fail.
WRONG_FIX = "sed -i 's/a - b/a * b/' /app/calc.py"


async def _solve(harness: CLIAgent, *steps: str) -> gym.Rollout:
    env = HarborEnv(TASK, provider_options={"host": DOCKER_HOST, "pull": False})
    try:
        task = next(iter(env.tasks()))
        script = functools.partial(policy, steps=(*steps, DONE))
        return await gym.rollout(env, ScriptedModel(script), task, harness=harness)
    finally:
        await harness.aclose()
        await env.aclose()


def _verifier(rollout: gym.Rollout) -> dict[str, object]:
    assert rollout.failure is None, rollout.failure
    state = rollout.trajectory.final_state
    assert isinstance(state, dict) and isinstance(state.get("verifier"), dict), state
    return state["verifier"]


@pytest.mark.parametrize("name", list(AGENTS))
async def test_a_cli_agent_solves_the_harbor_task_in_its_container(name: str) -> None:
    rollout = await _solve(_agent(name), FIX)
    verifier = _verifier(rollout)
    assert rollout.reward == 1.0, verifier
    assert rollout.rewards is not None
    assert rollout.rewards.components == {"reward": 1.0, "tests_passed": 1.0}
    assert verifier["exit_code"] == 0 and verifier["agent"]["exit_code"] == 0  # type: ignore[index]
    calls = rollout.trajectory.model_calls
    assert calls and all(c.response and c.response.completion_token_ids for c in calls)


async def test_a_wrong_edit_through_a_cli_agent_scores_0() -> None:
    rollout = await _solve(_agent("codex"), WRONG_FIX)
    verifier = _verifier(rollout)
    assert rollout.reward == 0.0, verifier
    assert rollout.rewards is not None and rollout.rewards.components["tests_passed"] == 0.0
    assert "6" in str(verifier["stdout"])  # check_calc.py's assertion: the edit was graded


async def test_an_agent_that_does_nothing_scores_0_on_the_untouched_task() -> None:
    rollout = await _solve(_agent("codex"), "ls /app")
    assert rollout.reward == 0.0, _verifier(rollout)


async def test_a_reward_file_planted_in_the_agents_container_scores_0() -> None:
    """Harbor reads /logs/verifier/reward.json; an agent that writes one (and a tests/
    of its own) where it runs changes nothing: the tests run in a fresh container."""
    plant = (
        "mkdir -p /logs/verifier /tests && echo '{\"reward\": 1.0}' > /logs/verifier/reward.json"
        " && printf 'exit 0\\n' > /tests/test.sh"
    )
    rollout = await _solve(_agent("codex"), plant)
    assert rollout.reward == 0.0, _verifier(rollout)
