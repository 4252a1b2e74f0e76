"""`function_calling`: pick the right functions and arguments for a request (xLAM layout)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from nemo_gym.envs.base import BasicEpisode, Turns
from nemo_gym.envs.rows import DatasetEnv, Row
from nemo_gym.envs.tools.declared import declared_tools
from nemo_gym.harnesses import ToolLoop
from nemo_gym.records import Message, Task, ToolCall
from nemo_gym.verify.structured import ToolCallMatch

SYSTEM = (
    "You can call the functions provided. When a request needs them, call the right "
    "functions with the right arguments; you may call several."
)
_TYPES = {
    "str": "string",
    "int": "integer",
    "float": "number",
    "bool": "boolean",
    "list": "array",
    "dict": "object",
    "any": "string",
}


def _json_type(text: str) -> dict[str, Any]:
    base = text.replace(", optional", "").replace("Optional[", "").rstrip("]").strip()
    if base.lower().startswith("list["):
        return {"type": "array", "items": _json_type(base[5:])}
    return {"type": _TYPES.get(base.lower(), "string")}


def xlam_parameters(parameters: Mapping[str, Any]) -> dict[str, Any]:
    """xLAM's {"param": {"type": "str, optional", ...}} as a JSON Schema object."""
    if parameters.get("type") == "object":  # already JSON Schema
        return dict(parameters)
    properties, required = {}, []
    for name, spec in parameters.items():
        kind = str(spec.get("type", "str"))
        properties[name] = {**_json_type(kind), "description": str(spec.get("description", ""))}
        if "optional" not in kind.lower() and "default" not in spec:
            required.append(name)
    return {"type": "object", "properties": properties, "required": required}


class FunctionCalling(DatasetEnv):
    """Single-step function calling: the calls made must be the expected calls, with equal
    arguments, in any order (`ToolCallMatch`; `partial_credit=True` scores the share).

    xLAM layout: `query`, `tools` and `answers` (lists, or their JSON text). The model
    gets one turn; the tools only acknowledge. Ships 8 requests written by us;
    `dataset="Salesforce/xlam-function-calling-60k"` (gated) reads the benchmark.
    """

    name = "function_calling"
    version = "1"
    domain = "tools"
    verification = "the tool calls equal the expected calls (ToolCallMatch)"
    source = "8 requests written by us; xLAM layout (Salesforce/xlam-function-calling-60k)"
    license = "Apache-2.0 (sample); xLAM-60k is CC BY 4.0"
    sample = "tools/data/function_calling.jsonl"
    public = "Salesforce/xlam-function-calling-60k"

    def __init__(
        self,
        *,
        partial_credit: bool = False,
        path: str | None = None,
        dataset: str | None = None,
        dataset_name: str | None = None,
        load_options: Mapping[str, Any] | None = None,
        tasks: Sequence[Task] | None = None,
    ) -> None:
        super().__init__(
            ToolCallMatch(partial_credit=partial_credit),
            path=path,
            dataset=dataset,
            dataset_name=dataset_name,
            load_options=load_options,
            tasks=tasks,
            harness=ToolLoop(max_turns=1, system_prompt=SYSTEM),
        )
        self.partial_credit = partial_credit

    def task_from_row(self, row: Row, split: str) -> Task:
        tools = [
            {
                "name": t["name"],
                "description": t.get("description", ""),
                "parameters": xlam_parameters(t.get("parameters") or {}),
            }
            for t in row.json("tools")
        ]
        return Task(
            id=self.task_id(row, split, "id"),
            prompt=row.first("query", "question"),
            answer=list(row.json("answers")),
            metadata={"tools": tools},
        )

    async def open(self, task: Task) -> BasicEpisode:
        return BasicEpisode(declared_tools(task.metadata["tools"]))

    def oracle(self, task: Task) -> Turns:
        calls = tuple(
            ToolCall(id=f"call_{i}", name=c["name"], arguments=json.dumps(c.get("arguments", {})))
            for i, c in enumerate(task.answer)
        )
        return [Message.assistant(tool_calls=calls)]

    def wrong(self, task: Task) -> Turns:
        return [Message.assistant("I would call a function, but I am not sure which.")]
