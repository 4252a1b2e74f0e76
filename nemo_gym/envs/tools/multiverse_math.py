"""`multiverse_math`: compute with calculator tools whose arithmetic is not ours.

MultiVerse Math (from LangChain's tool-use benchmarks, as NeMo Gym's
`math_advanced_calculations` serves it): `add` adds 1.2 more, `multiply` scales by 1.1,
`sin` is the cosine, `pi` is e, ... so the model has to use the tools rather than its own
arithmetic. The reward is 1 when every gold value appears (as the same float) among the
tools' results in the episode, as NeMo Gym scores it; the final text is not read. The
results come from the tools, which the model cannot write.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from nemo_gym.envs.base import BasicEpisode, Turns
from nemo_gym.envs.rows import DatasetEnv, Row
from nemo_gym.envs.tools.declared import tool_spec
from nemo_gym.errors import ConfigError, VerifierError
from nemo_gym.harnesses import ToolLoop
from nemo_gym.records import Message, Rewards, Task, ToolCall, Trajectory
from nemo_gym.tools import Tool

__all__ = ["FUNCTIONS", "MultiverseMath", "verify_values"]

FUNCTIONS: Mapping[str, Callable[..., float]] = {
    "multiply": lambda a, b: 1.1 * a * b,
    "divide": lambda a, b: 0.5 * a / b,
    "add": lambda a, b: a + b + 1.2,
    "return_constant": lambda a: a,
    "sin": lambda radians: math.cos(radians),
    "cos": lambda radians: math.sin(radians),
    "subtract": lambda a, b: a - b - 3,
    "power": lambda a, b: a ** (b + 2),
    "log": lambda a, base: math.log(a, abs(base + 1.5)),
    "pi": lambda: math.e,
    "negate": lambda a: a,
}
"""The universe's functions, as NeMo Gym's math_advanced_calculations_tools.py defines them."""

_NUMBERS = ("a", "b", "radians", "base")


def _tool(name: str, spec: Mapping[str, Any]) -> Tool:
    function = FUNCTIONS[name]

    async def run(**arguments: Any) -> str:
        # NeMo Gym's request model: the four number fields as floats, anything else ignored.
        given = {k: float(arguments[k]) for k in _NUMBERS if arguments.get(k) is not None}
        return json.dumps({"solution": float(function(**given))})

    return Tool(spec=tool_spec(spec), fn=run)


def _gold(task: Task) -> list[float]:
    gold = task.metadata.get("ground_truth")
    if not isinstance(gold, list) or not all(isinstance(v, int | float) for v in gold):
        raise VerifierError(f"task {task.id}: ground_truth must be a list of numbers")
    return [float(v) for v in gold]


async def verify_values(task: Task, trajectory: Trajectory) -> Rewards:
    """1.0 when every gold value is one of the tools' results (`{"solution": x}`)."""
    gold = _gold(task)
    results: list[float | None] = []
    for message in trajectory.messages[len(task.messages) :]:
        if message.role != "tool":
            continue
        try:
            results.append(float(json.loads(message.content or "")["solution"]))
        except (ValueError, TypeError, KeyError):
            results.append(None)  # an error, as NeMo Gym counts it
    found = [v for v in gold if v in results]
    return Rewards(
        reward=float(len(found) == len(gold)),
        components={"found": len(found) / len(gold) if gold else 1.0},
        metadata={"extracted_answer": [v for v in results if v is not None]},
    )


class MultiverseMath(DatasetEnv):
    """Expressions to evaluate with altered calculator tools; every gold value must be a
    tool's result (`verify_values`).

    Rows are NeMo Gym's layout: `responses_create_params` (`input`, and `tools` naming
    functions of `FUNCTIONS`) and `ground_truth` (a list of numbers, or its JSON text).
    Ships 4 expressions written by us; `dataset="nvidia/Nemotron-RL-math-advanced_calculations"`
    reads NVIDIA's. The tool loop allows `max_turns` model turns (NeMo Gym's simple agent
    has no cap).
    """

    name = "multiverse_math"
    version = "1"
    domain = "tools"
    verification = "every gold value among the altered tools' results"
    source = "4 expressions written by us; NeMo Gym's math_advanced_calculations layout"
    license = "Apache-2.0 (sample); NVIDIA's data is Apache-2.0"
    sample = "tools/data/multiverse_math.jsonl"
    public = "nvidia/Nemotron-RL-math-advanced_calculations"

    def __init__(
        self,
        *,
        max_turns: int = 30,
        path: str | None = None,
        dataset: str | None = None,
        dataset_name: str | None = None,
        load_options: Mapping[str, Any] | None = None,
        tasks: Sequence[Task] | None = None,
    ) -> None:
        super().__init__(
            verify_values,
            path=path,
            dataset=dataset,
            dataset_name=dataset_name,
            load_options=load_options,
            tasks=tasks,
            harness=ToolLoop(max_turns=max_turns),
        )
        self.max_turns = max_turns

    def task_from_row(self, row: Row, split: str) -> Task:
        from nemo_gym.interop.nemo_gym.wire import prompt_of

        messages, tools = prompt_of(row)
        return Task(
            id=self.task_id(row, split, "id"),
            messages=messages,
            metadata={"tools": tools, "ground_truth": ground_truth(row)},
        )

    async def open(self, task: Task) -> BasicEpisode:
        specs = task.metadata.get("tools") or []
        unknown = sorted({s["name"] for s in specs} - set(FUNCTIONS))
        if unknown:
            raise ConfigError(f"task {task.id}: no function of this universe is named {unknown}")
        return BasicEpisode([_tool(s["name"], s) for s in specs])

    def oracle(self, task: Task) -> Turns:
        offered = {t["name"] for t in task.metadata.get("tools") or []}
        # Both are the identity in this universe: the gold values, echoed by the tools.
        echo = "return_constant" if "return_constant" in offered else "negate"
        calls = tuple(
            ToolCall(id=f"call_{i}", name=echo, arguments=json.dumps({"a": v}))
            for i, v in enumerate(_gold(task))
        )
        return [Message.assistant(tool_calls=calls), Message.assistant("Done.")]

    def wrong(self, task: Task) -> Turns:
        return [Message.assistant(f"The values are {', '.join(map(str, _gold(task)))}.")]


def ground_truth(row: Row) -> list[float]:
    """A row's `ground_truth`: a list of numbers, or its JSON text (NeMo Gym's rows)."""
    value = row.require("ground_truth")
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise row.bad("ground_truth", f"is not JSON ({exc.msg})") from None
    if not isinstance(value, list) or not all(
        isinstance(v, int | float) and not isinstance(v, bool) for v in value
    ):
        raise row.bad("ground_truth", "must be a list of numbers")
    return [float(v) for v in value]
