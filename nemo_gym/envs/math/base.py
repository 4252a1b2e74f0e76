"""The base of the math datasets: a question, a gold answer, `MathVerifier` to compare."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from nemo_gym.envs.base import Turns
from nemo_gym.envs.prompts import BOXED, boxed, join
from nemo_gym.envs.rows import DatasetEnv, Row
from nemo_gym.harnesses import SingleTurn
from nemo_gym.records import Message, Task
from nemo_gym.verify.gates import RequireBoxed
from nemo_gym.verify.math import MathVerifier

__all__ = ["MathDatasetEnv", "wrong_answer"]


def wrong_answer(gold: Any) -> str:
    """An answer that is surely not `gold`: gold + 1 for a number, else a word (which is
    decided at once, where a number against a large expression can keep math-verify busy)."""
    text = str(gold).strip()
    try:
        return str(int(text) + 1)
    except ValueError:
        pass
    try:
        return str(float(text) + 1)
    except ValueError:
        return "\\text{none}"


class MathDatasetEnv(DatasetEnv):
    """Math problems from rows; the reply's final answer is checked by `MathVerifier`.

    `require_boxed=True` scores 0 any reply without a `\\boxed{}` answer (benchmarks
    whose prompt demands one); `timeout` bounds math-verify on the hard cases.
    """

    domain = "math"
    verification = "math equivalence of the final answer (MathVerifier)"
    question_fields: ClassVar[tuple[str, ...]] = ("problem", "question", "Problem", "Question")
    answer_fields: ClassVar[tuple[str, ...]] = ("answer", "Answer")
    id_fields: ClassVar[tuple[str, ...]] = ("id", "unique_id", "ID")
    instruction: ClassVar[str] = BOXED

    def __init__(
        self,
        *,
        path: str | None = None,
        dataset: str | None = None,
        dataset_name: str | None = None,
        load_options: Mapping[str, Any] | None = None,
        tasks: Sequence[Task] | None = None,
        require_boxed: bool = False,
        timeout: float = 5.0,
    ) -> None:
        verifier = MathVerifier(timeout=timeout)
        super().__init__(
            RequireBoxed(verifier, always=require_boxed),
            path=path,
            dataset=dataset,
            dataset_name=dataset_name,
            load_options=load_options,
            tasks=tasks,
            harness=SingleTurn(),
        )

    def gold(self, row: Row) -> str:
        return str(row.first(*self.answer_fields)).strip()

    def prompt(self, row: Row, question: str) -> str:
        return join(question, self.instruction)

    def task_from_row(self, row: Row, split: str) -> Task:
        question = str(row.first(*self.question_fields))
        keys = ("level", "type", "subject", "language", "difficulty")
        metadata = {k: row.data[k] for k in keys if k in row.data}
        return Task(
            id=self.task_id(row, split, *self.id_fields),
            prompt=self.prompt(row, question),
            answer=self.gold(row),
            metadata=metadata,
        )

    def oracle(self, task: Task) -> Turns:
        return [Message.assistant(boxed(task.answer, "Working it through step by step."))]

    def wrong(self, task: Task) -> Turns:
        return [Message.assistant(boxed(wrong_answer(task.answer)))]
