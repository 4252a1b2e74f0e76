"""`weather_report`: call `get_weather` for the asked city, then repeat what it said.

NeMo Gym's `example_mcp_weather` (its example of a tool served over MCP): the tool
answers "The weather in <city> is sunny and 72 F."; the reward is 1 when the episode
called it for the row's `expected_city` (case-insensitive) and the reply contains that
sentence (case-insensitive). Here the tool is an in-process tool: MCP is NeMo Gym's
transport to it, not part of what is scored.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from nemo_gym.envs.base import BasicEpisode, Turns
from nemo_gym.envs.rows import DatasetEnv, Row
from nemo_gym.harnesses import ToolLoop
from nemo_gym.records import Message, Rewards, Task, ToolCall, ToolSpec, Trajectory
from nemo_gym.tools import Tool, ToolArgumentsError

__all__ = ["WeatherReport", "verify_report"]

SPEC = ToolSpec(
    name="get_weather",
    description="Get a deterministic weather report for a city.",
    parameters={
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
)


def sentence(city: str) -> str:
    """The tool's report for `city`."""
    return f"The weather in {city} is sunny and 72 F."


async def verify_report(task: Task, trajectory: Trajectory) -> Rewards:
    """1.0 when `get_weather` ran for the expected city and the reply repeats its report."""
    city = str(task.metadata["expected_city"])
    calls = (trajectory.final_state or {}).get("calls", [])
    called = any(str(c).casefold() == city.casefold() for c in calls)
    added = trajectory.messages[len(task.messages) :]
    text = "\n".join(m.content for m in added if m.role == "assistant" and m.content)
    said = sentence(city).casefold() in text.strip().casefold()
    return Rewards(
        reward=float(called and said),
        components={"called": float(called), "said": float(said)},
        metadata={"extracted_answer": calls},
    )


def _tool(state: dict[str, list[str]]) -> Tool:
    async def get_weather(**arguments: Any) -> str:
        city = arguments.get("city")
        if not isinstance(city, str):
            raise ToolArgumentsError("city: a string is required")
        state["calls"].append(city)
        return json.dumps({"weather": sentence(city)})

    return Tool(spec=SPEC, fn=get_weather)


class WeatherReport(DatasetEnv):
    """Call `get_weather` for a city and report its answer (`verify_report`: the call, from
    the episode's state, and the sentence in the reply).

    Rows are NeMo Gym's `example_mcp_weather` layout: `responses_create_params` (`input`)
    and `verifier_metadata.expected_city` (default Paris, as NeMo Gym's). Ships 3 requests
    written by us.
    """

    name = "weather_report"
    version = "1"
    domain = "tools"
    verification = "the tool called for the city (episode state) and its report repeated"
    source = "3 requests written by us; NeMo Gym's example_mcp_weather layout"
    license = "Apache-2.0"
    sample = "tools/data/weather_report.jsonl"

    def __init__(self, *, path: str | None = None, tasks: Sequence[Task] | None = None) -> None:
        super().__init__(verify_report, path=path, tasks=tasks, harness=ToolLoop(max_turns=5))

    def task_from_row(self, row: Row, split: str) -> Task:
        from nemo_gym.interop.nemo_gym.wire import prompt_of

        messages, _ = prompt_of(row)
        return Task(
            id=self.task_id(row, split, "id"),
            messages=messages,
            metadata={"expected_city": expected_city(row)},
        )

    async def open(self, task: Task) -> BasicEpisode:
        state: dict[str, list[str]] = {"calls": []}
        return BasicEpisode([_tool(state)], state=state)

    def oracle(self, task: Task) -> Turns:
        city = str(task.metadata["expected_city"])
        call = ToolCall(id="call_0", name="get_weather", arguments=json.dumps({"city": city}))
        return [Message.assistant(tool_calls=(call,)), Message.assistant(sentence(city))]

    def wrong(self, task: Task) -> Turns:
        return [Message.assistant(sentence(str(task.metadata["expected_city"])))]


def expected_city(row: Row) -> str:
    """`verifier_metadata.expected_city` (NeMo Gym's default: Paris)."""
    meta = row.get("verifier_metadata") or {}
    if not isinstance(meta, Mapping):
        raise row.bad("verifier_metadata", "must be an object")
    city = meta.get("expected_city", "Paris")
    if not isinstance(city, str) or not city.strip():
        raise row.bad("verifier_metadata", "expected_city must be a non-empty string")
    return city
