"""`answer_equivalence`: open questions; a judge model decides if the answer means the reference."""

from __future__ import annotations

from nemo_gym.envs.base import Turns
from nemo_gym.envs.judged import JudgedEnv
from nemo_gym.envs.prompts import BOXED, boxed, join
from nemo_gym.envs.rows import Row
from nemo_gym.records import Message, Task


class AnswerEquivalence(JudgedEnv):
    """Free-form answers judged equivalent to a reference ("darwin" = "Charles Darwin").

    Needs `judge=` (any `Model`). Rows: `question` and `expected_answer` (or `answer`).
    Ships 8 questions written by us; `path=` reads SciQ- or TriviaQA-like rows.
    """

    name = "answer_equivalence"
    version = "1"
    domain = "knowledge"
    verification = "a judge model compares the answer with the reference (JudgeVerifier)"
    source = "8 questions written by us; any question/expected_answer rows via path="
    license = "Apache-2.0"
    sample = "knowledge/data/answer_equivalence.jsonl"

    def task_from_row(self, row: Row, split: str) -> Task:
        return Task(
            id=self.task_id(row, split, "id"),
            prompt=join(row.require("question", str), BOXED),
            answer=str(row.first("expected_answer", "answer")),
        )

    def oracle(self, task: Task) -> Turns:
        return [Message.assistant(boxed(task.answer))]

    def wrong(self, task: Task) -> Turns:
        return [Message.assistant(boxed("I have no idea"))]
