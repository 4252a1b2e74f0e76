"""`formats`: turn a description into a JSON, YAML, TOML, XML or CSV document (StructEval)."""

from __future__ import annotations

from nemo_gym.envs.base import Turns
from nemo_gym.envs.prompts import join
from nemo_gym.envs.rows import DatasetEnv, Row
from nemo_gym.harnesses import SingleTurn
from nemo_gym.records import Message, Task
from nemo_gym.verify.formats import DocumentVerifier, document_from_paths, dump_document


class Formats(DatasetEnv):
    """Well-formed documents with the required keys, in StructEval's non-renderable layout
    (task_id, output_type, raw_output_metric = key paths such as `recipe.steps[1]`).

    Reward: 0.2 for a document that parses plus 0.8 times the share of key paths found
    (StructEval's score). Ships 6 tasks written by us; `dataset="TIGER-Lab/StructEval"`
    (non-renderable rows) or `path=` reads the benchmark.
    """

    name = "formats"
    version = "1"
    domain = "structured"
    verification = "parses as the format (0.2) + share of required key paths (0.8)"
    source = "6 tasks written by us; StructEval layout (TIGER-Lab/StructEval) via dataset="
    license = "Apache-2.0 (sample); StructEval is MIT"
    sample = "structured/data/formats.jsonl"
    public = "TIGER-Lab/StructEval"

    def __init__(self, **options: object) -> None:
        super().__init__(DocumentVerifier(), harness=SingleTurn(), **options)  # type: ignore[arg-type]

    def task_from_row(self, row: Row, split: str) -> Task:
        fmt = str(row.require("output_type", str)).lower()
        paths = [str(p) for p in row.require("raw_output_metric", list)]
        prompt = row.get("query") or join(
            row.require("description", str),
            f"Output only the {fmt.upper()} document, in one ```{fmt} code block.",
        )
        return Task(
            id=self.task_id(row, split, "task_id"),
            prompt=prompt,
            metadata={"format": fmt, "paths": paths},
        )

    def oracle(self, task: Task) -> Turns:
        fmt = task.metadata["format"]
        document = dump_document(document_from_paths(task.metadata["paths"], fmt), fmt)
        return [Message.assistant(f"```{fmt}\n{document.rstrip()}\n```")]

    def wrong(self, task: Task) -> Turns:
        return [Message.assistant("I would rather describe it in prose.")]
