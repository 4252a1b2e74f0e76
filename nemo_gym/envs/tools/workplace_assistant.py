"""`workplace_assistant`: NeMo Gym's stateful workplace world (WorkBench), scored on its state.

The episode opens a fresh world (emails, calendar, analytics, project tasks, CRM, and a
company directory: NeMo Gym's own toolkits over its tables, `nemo_gym.envs.tools.
workplace`) and serves the row's tools from it; a tool's result is NeMo Gym's route's
body (`{"output": ...}`, a failing call's error as text). The reward is NeMo Gym's
`is_correct`: the calls the episode ran and the row's `ground_truth` calls are each
replayed on a fresh world, and the reward is 1 when every mutable table ends the same
(case-insensitive but for `status`, `list_name` and `board`), whatever the reply says.
Reading tools change nothing, so any route to the right edits scores 1.

Needs the `workplace` extra (pandas).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from nemo_gym.envs.base import BasicEpisode, Turns
from nemo_gym.envs.rows import DatasetEnv, Row
from nemo_gym.envs.tools.declared import tool_spec
from nemo_gym.errors import ConfigError
from nemo_gym.harnesses import ToolLoop
from nemo_gym.records import Message, Rewards, Task, ToolCall, Trajectory
from nemo_gym.tools import Tool

__all__ = ["WorkplaceAssistant", "ground_truth", "verify_workplace"]


def ground_truth(row: Row) -> list[dict[str, str]]:
    """The row's `ground_truth` calls, each {"name", "arguments": JSON text of an object}."""
    calls = row.require("ground_truth", list)
    for i, call in enumerate(calls):
        if not (isinstance(call, Mapping) and isinstance(call.get("name"), str)):
            raise row.bad(f"ground_truth[{i}]", "needs a 'name' string")
        try:
            arguments = json.loads(call.get("arguments", ""))
        except (TypeError, ValueError):
            arguments = None
        if not isinstance(arguments, dict):
            raise row.bad(f"ground_truth[{i}].arguments", "must be JSON text of an object")
    return [{"name": c["name"], "arguments": c["arguments"]} for c in calls]


async def verify_workplace(task: Task, trajectory: Trajectory) -> Rewards:
    """1.0 when the calls the episode ran leave the world as the ground-truth calls do."""
    from nemo_gym.envs.tools.workplace import World, same_state

    final = trajectory.final_state
    calls = list(final.get("calls", [])) if isinstance(final, Mapping) else []
    same = same_state(World().replay(calls), World().replay(task.metadata["ground_truth"]))
    return Rewards(reward=float(same), metadata={"extracted_answer": calls})


def _tools(specs: Sequence[Mapping[str, Any]], state: dict[str, Any]) -> list[Tool]:
    from nemo_gym.envs.tools.workplace import World

    world = World()

    def serve(name: str) -> Any:
        async def call(**arguments: Any) -> str:
            state["calls"].append({"name": name, "arguments": json.dumps(arguments)})
            output = world.call(name, arguments)
            return json.dumps({"output": output}, default=str, ensure_ascii=False)

        return call

    tools = []
    for spec in specs:
        parsed = tool_spec(spec)
        if parsed.name not in world.functions:
            raise ConfigError(
                f"workplace_assistant: no tool named {parsed.name!r}; {', '.join(world.functions)}"
            )
        tools.append(Tool(spec=parsed, fn=serve(parsed.name)))
    return tools


class WorkplaceAssistant(DatasetEnv):
    """Do office work with tools (email, calendar, analytics, project tasks, CRM); verified
    on the world's final tables against the ground-truth calls' (`verify_workplace`).

    Rows are NeMo Gym's `workplace_assistant` layout: `responses_create_params` (`input`,
    `tools`), `ground_truth` (the calls, each {"name", "arguments": JSON text}).
    """

    name = "workplace_assistant"
    version = "1"
    domain = "tools"
    verification = "the world's final tables (episode state) against the ground truth's"
    source = "NeMo Gym's workplace_assistant example rows, tools and tables (WorkBench)"
    license = "Apache-2.0"
    sample = "tools/data/workplace_assistant.jsonl"
    requires = ("extra:workplace",)

    def __init__(
        self,
        *,
        max_turns: int = 20,
        path: str | None = None,
        tasks: Sequence[Task] | None = None,
    ) -> None:
        super().__init__(
            verify_workplace, path=path, tasks=tasks, harness=ToolLoop(max_turns=max_turns)
        )
        self.max_turns = max_turns

    def task_from_row(self, row: Row, split: str) -> Task:
        from nemo_gym.interop.nemo_gym.wire import prompt_of

        messages, tools = prompt_of(row)
        if not tools:
            raise row.bad("responses_create_params.tools", "is empty: the world's tools")
        return Task(
            id=self.task_id(row, split, "id"),
            messages=messages,
            metadata={"tools": tools, "ground_truth": ground_truth(row)},
        )

    async def open(self, task: Task) -> BasicEpisode:
        state: dict[str, Any] = {"calls": []}
        return BasicEpisode(_tools(task.metadata["tools"], state), state=state)

    def oracle(self, task: Task) -> Turns:
        calls = tuple(
            ToolCall(id=f"call_{i}", name=c["name"], arguments=c["arguments"])
            for i, c in enumerate(task.metadata["ground_truth"])
        )
        return [Message.assistant(tool_calls=calls), Message.assistant("Done.")]

    def wrong(self, task: Task) -> Turns:
        return [Message.assistant("Done.")]
