"""`ruler2`: RULER v2's long-context tasks in NeMo Gym's `ruler2` row layout.

Each row names its evaluator (`eval_type`):

- `ruler2`: RULER v2's soft string match (`ReferenceMatch(soft=True)`: a reference the
  reply contains scores 1, else 1 - word error rate, never below 0) aggregated by the
  row's `match_type`: `all` (mean over the references), `part` (best reference, the
  reply's `Document N:` blocks dropped) or `2steps` (mean, on the reply's last paragraph).
  Where the references are single tokens (needles, indices), text the reply copies from
  the prompt does not count and naming more candidates than references scores 0
  (`ReferenceMatch`); where a reference is a passage (copy the question asked for),
  copying it is the task, and copying 16 words or more of the rest of the prompt
  scores 0 (the context echoed to contain the passage).
- `multichoice`: the letter the reply commits to (`MultipleChoiceVerifier`) against the
  row's gold letter.
"""

from __future__ import annotations

import string
from collections.abc import Sequence
from typing import Any

from nemo_gym.envs.base import Turns
from nemo_gym.envs.rows import DatasetEnv, Row
from nemo_gym.harnesses import SingleTurn
from nemo_gym.records import Message, Rewards, Task, Trajectory
from nemo_gym.verify.long_context import ReferenceMatch
from nemo_gym.verify.mcqa import MultipleChoiceVerifier

__all__ = ["Ruler2", "ruler2_fields", "verify_ruler2"]

_MATCH_TYPES = ("all", "part", "2steps")
# A reference of this many words or more is a passage the task asks to copy.
_PASSAGE_WORDS = 4
_MATCH = ReferenceMatch(soft=True)


def ruler2_fields(row: Row) -> tuple[Any, dict[str, Any]]:
    """The row's gold (references, or a letter) and the task metadata its evaluator reads."""
    eval_type = row.get("eval_type", "ruler2")
    gold = row.require("expected_answer")
    if eval_type == "multichoice":
        letter = str(gold).strip().upper()
        if len(letter) != 1 or letter not in string.ascii_uppercase:
            raise row.bad("expected_answer", f"is {gold!r}; a multichoice row's gold is a letter")
        letters = string.ascii_uppercase[: max(4, string.ascii_uppercase.index(letter) + 1)]
        return letter, {"eval_type": eval_type, "letters": letters}
    if eval_type != "ruler2":
        raise row.bad("eval_type", f"is {eval_type!r}; one of 'ruler2', 'multichoice'")
    match = row.get("match_type", "all")
    if match not in _MATCH_TYPES:
        raise row.bad("match_type", f"is {match!r}; one of {', '.join(_MATCH_TYPES)}")
    refs = [str(r) for r in gold] if isinstance(gold, list) else [str(gold)]
    if not refs or not all(r.split() for r in refs):
        raise row.bad("expected_answer", "needs at least one non-empty reference")
    metadata: dict[str, Any] = {"eval_type": eval_type, "match": match}
    if any(len(r.split()) >= _PASSAGE_WORDS for r in refs):
        metadata["copy"] = "passages"
    return refs, metadata


async def verify_ruler2(task: Task, trajectory: Trajectory) -> Rewards:
    """The row's evaluator: RULER v2's soft match or the multiple-choice letter."""
    if task.metadata["eval_type"] == "multichoice":
        choice = MultipleChoiceVerifier(task.metadata["letters"], options=lambda task: None)
        return await choice.verify(task, trajectory)
    return await _MATCH.verify(task, trajectory)


class Ruler2(DatasetEnv):
    """RULER v2 (needle search, multi-value needles, question copying, document QA) in
    NeMo Gym's `ruler2` row layout: `responses_create_params` (the long prompt),
    `expected_answer` (references, or a letter), `eval_type`, `match_type`, `task`,
    `length`. Ships 5 short rows written by us; `path=` reads NeMo Gym's prepared data."""

    name = "ruler2"
    version = "1"
    domain = "long_context"
    verification = (
        "per row: RULER v2 soft string match (substring, else 1 - WER) by match_type, "
        "or the committed multiple-choice letter"
    )
    source = "5 short rows written by us; NeMo Gym's ruler2 layout"
    license = "Apache-2.0"
    sample = "long_context/data/ruler2.jsonl"

    def __init__(self, *, path: str | None = None, tasks: Sequence[Task] | None = None) -> None:
        super().__init__(verify_ruler2, path=path, tasks=tasks, harness=SingleTurn())

    def task_from_row(self, row: Row, split: str) -> Task:
        from nemo_gym.interop.nemo_gym.wire import prompt_of

        messages, _ = prompt_of(row)
        answer, metadata = ruler2_fields(row)
        return Task(
            id=self.task_id(row, split, "id"),
            messages=messages,
            answer=answer,
            metadata={**metadata, "task": row.get("task"), "length": row.get("length")},
        )

    def oracle(self, task: Task) -> Turns:
        if task.metadata["eval_type"] == "multichoice":
            return [Message.assistant(f"The answer is \\boxed{{{task.answer}}}.")]
        if task.metadata["match"] == "part":
            return [Message.assistant(task.answer[0])]
        return [Message.assistant("\n".join(task.answer))]

    def wrong(self, task: Task) -> Turns:
        if task.metadata["eval_type"] == "multichoice":
            other = next(c for c in task.metadata["letters"] if c != task.answer)
            return [Message.assistant(f"The answer is \\boxed{{{other}}}.")]
        return [Message.assistant("It is not in the text.")]
