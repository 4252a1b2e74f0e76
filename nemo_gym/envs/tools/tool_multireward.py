"""`tool_multireward`: one tool call, scored on three separate rewards (GDPO-style)."""

from __future__ import annotations

import json
from typing import Any

from nemo_gym.envs.base import BasicEpisode, Turns
from nemo_gym.envs.rows import DatasetEnv, Row
from nemo_gym.envs.tools.declared import declared_tools
from nemo_gym.harnesses import ToolLoop
from nemo_gym.limits import loads_json
from nemo_gym.records import Message, Rewards, Task, ToolCall, Trajectory

SYSTEM = "Answer with exactly one tool call and no other text."


async def verify_call(task: Task, trajectory: Trajectory) -> Rewards:
    """`correctness` (a call with the expected name and arguments), `schema_valid` (the
    first call's arguments are an object with every required parameter) and `format`
    (exactly one call, no text); the reward is their sum, 0 to 3 (a task with
    `metadata["reward"] == "correctness"` is rewarded on correctness alone)."""
    replies = [m for m in trajectory.messages if m.role == "assistant"]
    calls = [c for m in replies for c in m.tool_calls]
    expected = task.metadata["expected_call"]

    def parsed(call: ToolCall) -> dict[str, Any] | None:
        try:
            value = loads_json(call.arguments or "{}")
        except ValueError:  # not JSON, or over the document limits
            return None
        return value if isinstance(value, dict) else None

    required = {t["name"]: t["parameters"].get("required", []) for t in task.metadata["tools"]}
    first = parsed(calls[0]) if calls else None
    schema = float(first is not None and all(k in first for k in required.get(calls[0].name, [])))
    wanted = expected.get("arguments", {})
    correct = float(
        any(
            c.name == expected["name"]
            and (a := parsed(c)) is not None
            and all(a.get(k) == v for k, v in wanted.items())
            for c in calls
        )
    )
    text = any((m.content or "").strip() for m in replies)
    components = {
        "correctness": correct,
        "schema_valid": schema,
        "format": float(len(calls) == 1 and not text),
    }
    reward = (
        components["correctness"]
        if task.metadata.get("reward") == "correctness"
        else sum(components.values())
    )
    return Rewards(
        reward=reward, components=components, metadata={"extracted_answer": [c.name for c in calls]}
    )


class ToolMultiReward(DatasetEnv):
    """A request that takes one tool call; three rewards kept apart for multi-objective RL
    (correctness, schema validity, format), their sum the scalar reward (max 3).

    Rows: `query`, `tools` (JSON Schema specs) and `expected_call`. Ships 6 requests
    written by us.
    """

    name = "tool_multireward"
    version = "1"
    domain = "tools"
    verification = "correctness + schema validity + format of the one call (sum, max 3)"
    source = "6 requests written by us"
    license = "Apache-2.0"
    sample = "tools/data/tool_multireward.jsonl"
    max_reward = 3.0

    def oracle_reward(self, task: Task) -> float:
        return 1.0 if task.metadata.get("reward") == "correctness" else 3.0

    def __init__(self, **options: Any) -> None:
        super().__init__(
            verify_call, harness=ToolLoop(max_turns=1, system_prompt=SYSTEM), **options
        )

    def task_from_row(self, row: Row, split: str) -> Task:
        return Task(
            id=self.task_id(row, split, "id"),
            prompt=row.require("query", str),
            metadata={"tools": list(row.json("tools")), "expected_call": row.json("expected_call")},
        )

    async def open(self, task: Task) -> BasicEpisode:
        return BasicEpisode(declared_tools(task.metadata["tools"]))

    def oracle(self, task: Task) -> Turns:
        call = task.metadata["expected_call"]
        arguments = json.dumps(call.get("arguments", {}))
        return [
            Message.assistant(
                tool_calls=(ToolCall(id="call_0", name=call["name"], arguments=arguments),)
            )
        ]

    def wrong(self, task: Task) -> Turns:
        return [Message.assistant("Let me check that for you.")]
