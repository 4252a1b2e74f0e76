"""The examples in the docs run as written."""

from __future__ import annotations

import re
from pathlib import Path

import nemo_gym as gym
from nemo_gym.models import ScriptedModel

DOCS = Path(__file__).parents[1] / "docs"


def python_blocks(name: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", (DOCS / name).read_text(), re.S)


async def test_environments_page_example_runs() -> None:
    namespace: dict = {}
    exec(python_blocks("environments.md")[0], namespace)
    env = namespace["env"]
    call = gym.Message.assistant(
        tool_calls=(gym.ToolCall(id="1", name="lookup", arguments='{"city": "Paris"}'),)
    )
    (rollout,) = [r async for r in gym.rollouts(env, ScriptedModel([call, "It is in France."]))]
    assert rollout.ok and rollout.reward == 1.0
    assert rollout.trajectory.tool_results[0].output == "France"
