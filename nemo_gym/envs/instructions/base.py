"""The base of the instruction-following datasets: rows of IFEval's layout."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from nemo_gym.envs.base import Turns
from nemo_gym.envs.rows import DatasetEnv, Row
from nemo_gym.harnesses import SingleTurn
from nemo_gym.records import Message, Task
from nemo_gym.verify.ifeval import IFEvalVerifier

__all__ = ["InstructionsEnv"]


class InstructionsEnv(DatasetEnv):
    """Prompts with verifiable instructions (`prompt`, `instruction_id_list`, `kwargs`).

    `mode` ("strict" or "loose") and `reward` ("prompt": all instructions followed, or
    "instruction": the fraction followed) configure the `IFEvalVerifier`. Shipped rows
    carry a `reference_response` that follows every instruction (the oracle) and a
    `violating_response` that does not.
    """

    domain = "instructions"
    verification = "every instruction checked by its rule (IFEvalVerifier)"

    def __init__(
        self,
        *,
        mode: str = "strict",
        reward: str = "prompt",
        path: str | None = None,
        dataset: str | None = None,
        dataset_name: str | None = None,
        load_options: Mapping[str, Any] | None = None,
        tasks: Sequence[Task] | None = None,
    ) -> None:
        super().__init__(
            IFEvalVerifier(mode=mode, reward=reward),  # type: ignore[arg-type]
            path=path,
            dataset=dataset,
            dataset_name=dataset_name,
            load_options=load_options,
            tasks=tasks,
            harness=SingleTurn(),
        )

    def task_from_row(self, row: Row, split: str) -> Task:
        metadata: dict[str, Any] = {
            "instruction_id_list": list(row.require("instruction_id_list", list)),
            "kwargs": row.get("kwargs"),
        }
        for key in ("reference_response", "violating_response"):
            if row.get(key):
                metadata[key] = row.require(key, str)
        return Task(
            id=self.task_id(row, split, "key", "id"),
            prompt=row.require("prompt", str),
            metadata=metadata,
        )

    def oracle(self, task: Task) -> Turns | None:
        reference = task.metadata.get("reference_response")
        return [Message.assistant(reference)] if reference else None

    def wrong(self, task: Task) -> Turns:
        return [Message.assistant(task.metadata.get("violating_response", ""))]
