"""The examples in the docs run as written."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import nemo_gym as gym
from nemo_gym.models import ScriptedModel

DOCS = Path(__file__).parents[1] / "docs"


def python_blocks(name: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", (DOCS / name).read_text(), re.S)


async def test_environments_page_example_runs() -> None:
    namespace: dict = {}
    exec(next(b for b in python_blocks("environments.md") if "class Cities" in b), namespace)
    env = namespace["env"]
    assert gym.check_env(env).ok
    call = gym.Message.assistant(
        tool_calls=(gym.ToolCall(id="1", name="lookup", arguments='{"city": "Paris"}'),)
    )
    (rollout,) = [r async for r in gym.rollouts(env, ScriptedModel([call, "It is in France."]))]
    assert rollout.ok and rollout.reward == 1.0
    assert rollout.trajectory.tool_results[0].output == "France"


async def test_runner_page_tool_state_example_runs() -> None:
    namespace: dict = {}
    block = next(b for b in python_blocks("runner.md") if "class Counter" in b)
    exec("import nemo_gym as gym\n" + textwrap.dedent(block), namespace)

    async def verify(task: gym.Task, trajectory: gym.Trajectory) -> float:
        return float(trajectory.final_state["total"] == task.answer)

    env = namespace["Counter"](verify)
    call = gym.Message.assistant(
        tool_calls=(gym.ToolCall(id="1", name="add", arguments='{"amount": 2}'),)
    )
    (rollout,) = [r async for r in gym.rollouts(env, ScriptedModel([call, call, "done"]))]
    assert rollout.ok and rollout.reward == 1.0


def test_runner_page_names_every_field_a_newcomer_meets() -> None:
    text = (DOCS / "runner.md").read_text()
    from nemo_gym.collect import RunResult

    names = [
        *gym.RunMetrics.model_fields,
        *gym.ToolResult.model_fields,
        *gym.TokenTrace.model_fields,
        *gym.Failure.model_fields,
        *gym.ModelCall.model_fields,
        *(n for n in vars(RunResult) if not n.startswith("_")),
    ]
    spans = re.findall(r"`([^`]*)`", text)
    missing = [n for n in names if not any(re.search(rf"\b{n}\b", span) for span in spans)]
    assert not missing, f"docs/runner.md does not name {missing}"


def test_registry_page_spec_example_is_true() -> None:
    env = gym.make("arithmetic", seed=3)
    spec = gym.registry.spec_of(env, "env")
    text = (DOCS / "registry.md").read_text()
    assert repr(spec).replace("Spec(", "").replace(")", "") in " ".join(text.split()).replace(
        "# ", ""
    ).replace("Spec(", "").replace(")", "")
    assert gym.make(spec).to_spec() == spec


async def test_writing_a_harness_page_example_runs() -> None:
    blocks = python_blocks("writing-a-harness.md")
    namespace: dict = {}
    exec(next(b for b in blocks if "class AskTwice" in b), namespace)
    test = next(b for b in blocks if "async def test_ask_twice" in b)
    exec(test, namespace)
    await namespace["test_ask_twice"]()
