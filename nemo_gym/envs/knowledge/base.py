"""The base of the multiple-choice datasets: a question, lettered options, one gold letter."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from nemo_gym.envs.base import Turns
from nemo_gym.envs.prompts import LETTER_BOXED, LETTERS, multiple_choice
from nemo_gym.envs.rows import DatasetEnv, Row
from nemo_gym.errors import ConfigError
from nemo_gym.harnesses import SingleTurn
from nemo_gym.records import Message, Task
from nemo_gym.verify.gates import RequireBoxed
from nemo_gym.verify.mcqa import MultipleChoiceVerifier

__all__ = ["MultipleChoiceEnv", "gold_letter"]


def gold_letter(row: Row, key: str, options: Sequence[str]) -> str:
    """The gold as a letter, from a letter, a 0-based index or the text of an option."""
    value = row.require(key)
    if isinstance(value, int) and not isinstance(value, bool):
        if 0 <= value < len(options):
            return LETTERS[value]
        raise row.bad(key, f"is index {value}, but there are {len(options)} options")
    text = str(value).strip().strip("()").upper()
    if len(text) == 1 and text in LETTERS[: len(options)]:
        return text
    if str(value).strip() in options:
        return LETTERS[list(options).index(str(value).strip())]
    raise row.bad(key, f"is {value!r}: not a letter, index or option of {len(options)}")


class MultipleChoiceEnv(DatasetEnv):
    """Multiple choice from rows; `MultipleChoiceVerifier` reads the letter committed to.

    Subclasses implement `parse(row) -> (question, options, gold letter, metadata)`.
    `require_boxed=True` scores 0 a reply without `\\boxed{}` (strict benchmarks).
    """

    domain = "knowledge"
    verification = "the option letter committed to (MultipleChoiceVerifier)"
    instruction: ClassVar[str] = LETTER_BOXED

    def __init__(
        self,
        *,
        path: str | None = None,
        dataset: str | None = None,
        dataset_name: str | None = None,
        load_options: Mapping[str, Any] | None = None,
        tasks: Sequence[Task] | None = None,
        require_boxed: bool = False,
    ) -> None:
        verifier = MultipleChoiceVerifier()
        super().__init__(
            RequireBoxed(verifier, always=require_boxed),
            path=path,
            dataset=dataset,
            dataset_name=dataset_name,
            load_options=load_options,
            tasks=tasks,
            harness=SingleTurn(),
        )

    def parse(self, row: Row) -> tuple[str, list[str], str, dict[str, Any]]:
        raise NotImplementedError

    def task_from_row(self, row: Row, split: str) -> Task:
        question, options, gold, extra = self.parse(row)
        if len(options) < 2:
            raise ConfigError(f"{row.where}: a multiple-choice row needs at least 2 options")
        return Task(
            id=self.task_id(row, split, "question_id", "id", "Record ID", "uuid"),
            prompt=multiple_choice(question, options, self.instruction),
            answer=gold,
            metadata={"options": options, **extra},
        )

    def oracle(self, task: Task) -> Turns:
        letter = task.answer
        return [Message.assistant(f"The correct option is {letter}.\n\n\\boxed{{{letter}}}")]

    def wrong(self, task: Task) -> Turns:
        letters = LETTERS[: len(task.metadata["options"])]
        other = next(c for c in letters if c != task.answer)
        return [Message.assistant(f"\\boxed{{{other}}}")]
