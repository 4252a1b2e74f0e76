"""`counter`: a per-episode counter behind two tools, verified on its final value.

NeMo Gym's `example_session_state_mgmt` (its example of state kept per session): the
episode starts the counter at the row's `initial_count`; `increment_counter(count)` adds
`count` (an integer, as its request model coerces it) and `get_counter_value()` reads
it. The reward is 1 when the counter ends at `expected_count`, whatever the reply says.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import TypeAdapter, ValidationError

from nemo_gym.envs.base import BasicEpisode, Turns
from nemo_gym.envs.rows import DatasetEnv, Row
from nemo_gym.envs.tools.declared import tool_spec
from nemo_gym.errors import ConfigError
from nemo_gym.harnesses import ToolLoop
from nemo_gym.records import Message, Rewards, Task, ToolCall, Trajectory
from nemo_gym.tools import Tool, ToolArgumentsError

__all__ = ["Counter", "verify_count"]

_INT = TypeAdapter(int)
_DEFAULT_TOOLS = (
    {
        "name": "increment_counter",
        "description": "Add `count` to the counter.",
        "parameters": {
            "type": "object",
            "properties": {"count": {"type": "integer"}},
            "required": ["count"],
        },
    },
    {
        "name": "get_counter_value",
        "description": "The counter's value.",
        "parameters": {"type": "object", "properties": {}},
    },
)


async def verify_count(task: Task, trajectory: Trajectory) -> Rewards:
    """1.0 when the episode's counter ends at the task's `expected_count`."""
    final = trajectory.final_state
    value = final.get("count") if isinstance(final, Mapping) else None
    expected = task.metadata["expected_count"]
    return Rewards(reward=float(value == expected), metadata={"extracted_answer": value})


def _tools(specs: Sequence[Mapping[str, Any]], state: dict[str, int]) -> list[Tool]:
    async def increment_counter(**arguments: Any) -> str:
        try:
            count = _INT.validate_python(arguments.get("count"))
        except ValidationError:
            raise ToolArgumentsError("count: an integer is required") from None
        state["count"] += count
        return json.dumps({"success": True})

    async def get_counter_value(**arguments: Any) -> str:
        return json.dumps({"count": state["count"]})

    functions = {"increment_counter": increment_counter, "get_counter_value": get_counter_value}
    tools = []
    for spec in specs:
        parsed = tool_spec(spec)
        if parsed.name not in functions:
            raise ConfigError(f"counter: no tool named {parsed.name!r}; {', '.join(functions)}")
        tools.append(Tool(spec=parsed, fn=functions[parsed.name]))
    return tools


class Counter(DatasetEnv):
    """Count with tools: the counter starts at `initial_count` and must end at
    `expected_count` (`verify_count` reads the episode's final state).

    Rows are NeMo Gym's `example_session_state_mgmt` layout: `responses_create_params`
    (`input`, `tools`), `initial_count` and `expected_count`. Ships 4 requests written by us.
    """

    name = "counter"
    version = "1"
    domain = "tools"
    verification = "the counter's final value (episode state), not the reply"
    source = "4 requests written by us; NeMo Gym's example_session_state_mgmt layout"
    license = "Apache-2.0"
    sample = "tools/data/counter.jsonl"

    def __init__(
        self,
        *,
        max_turns: int = 10,
        path: str | None = None,
        tasks: Sequence[Task] | None = None,
    ) -> None:
        super().__init__(
            verify_count, path=path, tasks=tasks, harness=ToolLoop(max_turns=max_turns)
        )
        self.max_turns = max_turns

    def task_from_row(self, row: Row, split: str) -> Task:
        from nemo_gym.interop.nemo_gym.wire import prompt_of

        messages, tools = prompt_of(row)
        return Task(
            id=self.task_id(row, split, "id"),
            messages=messages,
            metadata={
                "tools": tools or list(_DEFAULT_TOOLS),
                "initial_count": row.require("initial_count", int),
                "expected_count": row.require("expected_count", int),
            },
        )

    async def open(self, task: Task) -> BasicEpisode:
        state = {"count": int(task.metadata["initial_count"])}
        return BasicEpisode(_tools(task.metadata["tools"], state), state=state)

    def oracle(self, task: Task) -> Turns:
        gap = int(task.metadata["expected_count"]) - int(task.metadata["initial_count"])
        call = ToolCall(id="call_0", name="increment_counter", arguments=json.dumps({"count": gap}))
        return [Message.assistant(tool_calls=(call,)), Message.assistant("Done.")]

    def wrong(self, task: Task) -> Turns:
        return [Message.assistant(f"The count is {task.metadata['expected_count']}.")]
