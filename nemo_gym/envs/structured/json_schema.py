"""`json_schema`: reply with a JSON, YAML, TOML, XML or CSV document valid for a JSON Schema."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from nemo_gym.envs.base import BasicEpisode, Turns
from nemo_gym.envs.prompts import join
from nemo_gym.envs.rows import DatasetEnv, Row
from nemo_gym.envs.structured.examples import schema_example
from nemo_gym.envs.tools.declared import declared_tools
from nemo_gym.errors import ConfigError
from nemo_gym.harnesses import SingleTurn, ToolLoop
from nemo_gym.records import Message, Task, ToolCall
from nemo_gym.verify.formats import FORMATS, DocumentVerifier, dump_document, strict_schema


class JSONSchemaEnv(DatasetEnv):
    """Structured output: a document in the task's format that validates against its schema.

    Rows: `description`, `schema` (a JSON Schema, or its text) and `format` (json by
    default; yaml, toml, xml and csv values are coerced to the schema's types).
    `strict=True` requires every property and forbids others (OpenAI strict mode).
    `response_mode="tool_call"`: the document is the arguments of one call of the task's
    `tool_name` (under its `payload_key`), the task's `tools` offered. Ships 8 tasks
    written by us across the five formats.
    """

    name = "json_schema"
    version = "1"
    domain = "structured"
    verification = "the document parses and validates against the JSON Schema (DocumentVerifier)"
    source = "8 tasks written by us in five formats; any description/schema rows via path="
    license = "Apache-2.0"
    sample = "structured/data/json_schema.jsonl"

    def __init__(
        self,
        *,
        strict: bool = False,
        response_mode: str = "text",
        path: str | None = None,
        dataset: str | None = None,
        dataset_name: str | None = None,
        load_options: Mapping[str, Any] | None = None,
        tasks: Sequence[Task] | None = None,
    ) -> None:
        if response_mode not in ("text", "tool_call"):
            raise ConfigError(
                f"json_schema: response_mode is 'text' or 'tool_call', got {response_mode!r}"
            )
        super().__init__(
            DocumentVerifier(strict=strict),
            path=path,
            dataset=dataset,
            dataset_name=dataset_name,
            load_options=load_options,
            tasks=tasks,
            harness=SingleTurn() if response_mode == "text" else ToolLoop(max_turns=1),
        )
        self.strict, self.response_mode = strict, response_mode

    def task_from_row(self, row: Row, split: str) -> Task:
        fmt = str(row.get("format", "json")).lower()
        if fmt not in FORMATS:
            raise row.bad("format", f"is {fmt!r}; one of {', '.join(FORMATS)}")
        schema = row.json("schema")
        prompt = join(
            row.require("description", str),
            f"Reply with a {fmt.upper()} document, and nothing else, that is valid against "
            f"this JSON Schema:\n```json\n{json.dumps(schema, indent=2)}\n```",
        )
        return Task(
            id=self.task_id(row, split, "id"),
            prompt=prompt,
            metadata={"format": fmt, "schema": schema},
        )

    async def open(self, task: Task) -> BasicEpisode:
        return BasicEpisode(declared_tools(task.metadata.get("tools", [])))

    def oracle(self, task: Task) -> Turns:
        schema = task.metadata["schema"]
        schema = json.loads(schema) if isinstance(schema, str) else schema
        value = schema_example(strict_schema(schema) if self.strict else schema)
        if task.metadata.get("response_mode") == "tool_call":
            key = task.metadata.get("payload_key")
            arguments = json.dumps({key: value} if key else value)
            call = ToolCall(id="call_0", name=task.metadata["tool_name"], arguments=arguments)
            return [Message.assistant(tool_calls=(call,))]
        return [Message.assistant(dump_document(value, task.metadata["format"]))]

    def wrong(self, task: Task) -> Turns:
        return [Message.assistant("Here you go: {not a document")]
