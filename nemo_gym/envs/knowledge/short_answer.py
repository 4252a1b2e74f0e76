"""`short_answer`: questions with a short answer in words or numbers ("Final answer: ...")."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from nemo_gym.envs.base import Turns
from nemo_gym.envs.prompts import (
    BOXED,
    FINAL_ANSWER,
    JSON_ANSWER,
    answer_line,
    boxed,
    join,
    json_answer,
)
from nemo_gym.envs.rows import DatasetEnv, Row
from nemo_gym.harnesses import SingleTurn
from nemo_gym.records import Message, Task
from nemo_gym.verify.short_answer import ShortAnswer

_ASK = {"boxed": BOXED, "json": JSON_ANSWER, "last_line": "Give the answer alone on the last line."}


class ShortAnswerQA(DatasetEnv):
    """Short-answer QA: the text after "Final answer:" must be the gold (or one of them).

    Matching forgives case, quotes, a trailing full stop, articles and punctuation
    (SQuAD), and compares numbers as numbers. Rows: `question` and `answer` (a string or
    a list of acceptable ones; also `expected_answer`). `extract` picks where the
    answer is read ("final_answer", "boxed", "last_line", "json", "full"). Ships 12
    trivia questions written by us; `path=` / `dataset=` read TriviaQA-style rows.
    """

    name = "short_answer"
    version = "1"
    domain = "knowledge"
    verification = "normalized exact match of the final answer (numbers as numbers)"
    source = "12 trivia questions written by us; any question/answer rows via path="
    license = "Apache-2.0"
    sample = "knowledge/data/short_answer.jsonl"

    def __init__(
        self,
        *,
        extract: str = "final_answer",
        path: str | None = None,
        dataset: str | None = None,
        dataset_name: str | None = None,
        load_options: Mapping[str, Any] | None = None,
        tasks: Sequence[Task] | None = None,
    ) -> None:
        super().__init__(
            ShortAnswer(extract=extract),  # type: ignore[arg-type]
            path=path,
            dataset=dataset,
            dataset_name=dataset_name,
            load_options=load_options,
            tasks=tasks,
            harness=SingleTurn(),
        )
        self.extract = extract

    def task_from_row(self, row: Row, split: str) -> Task:
        answer = row.first("answer", "expected_answer")
        if isinstance(answer, dict):  # TriviaQA: {"value": ..., "aliases": [...]}
            answer = [answer.get("value"), *answer.get("aliases", [])]
        return Task(
            id=self.task_id(row, split, "id", "question_id"),
            prompt=join(str(row.first("question", "prompt")), _ASK.get(self.extract, FINAL_ANSWER)),
            answer=answer if isinstance(answer, list) else str(answer),
        )

    def _reply(self, task: Task, answer: str) -> str:
        extract = task.metadata.get("extract", self.extract)
        if extract == "boxed":
            return boxed(answer)
        if extract == "json":
            return json_answer(answer)
        if extract in ("last_line", "full"):
            return answer
        return answer_line(answer, "Let me recall.")

    def oracle(self, task: Task) -> Turns:
        gold = task.answer[0] if isinstance(task.answer, list) else task.answer
        return [Message.assistant(self._reply(task, str(gold)))]

    def wrong(self, task: Task) -> Turns:
        return [Message.assistant(self._reply(task, "unknown"))]
