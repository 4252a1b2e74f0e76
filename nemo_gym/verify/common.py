"""Helpers shared by the rule-based verifiers: the response text and the gold.

Every verifier in `nemo_gym.verify` reads the gold from `task.answer` unless it is given
a `gold=` callable, and the response from `trajectory.final_text` with any reasoning
block (``<think>...</think>``) removed. Reading answers out of that text is
`nemo_gym.verify.extract`'s job.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from nemo_gym.errors import VerifierError
from nemo_gym.records import Task, Trajectory
from nemo_gym.verify.extract import strip_thinking

__all__ = ["GoldFn", "get_gold", "gold_strings", "response_text"]

GoldFn = Callable[[Task], Any]
"""Reads the gold answer of a task (default: `task.answer`)."""


def response_text(trajectory: Trajectory) -> str:
    """The final assistant text, without a reasoning block."""
    return strip_thinking(trajectory.final_text)


def get_gold(task: Task, gold: GoldFn | None = None) -> Any:
    """The gold answer of `task`: `gold(task)` when given, else `task.answer`.

    Raises `VerifierError` when there is none, because scoring against a missing gold
    would be a silent 0.
    """
    if gold is not None:
        try:
            value = gold(task)
        except Exception as exc:
            raise VerifierError(f"task {task.id}: the gold= callable failed: {exc!r}") from exc
        where = "the gold= callable"
    else:
        value = task.answer
        where = "task.answer"
    if value is None:
        raise VerifierError(f"task {task.id}: no gold answer ({where} is None)")
    return value


def gold_strings(task: Task, value: Any) -> list[str]:
    """A gold that is one string or a non-empty sequence of strings, as a list."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, int | float) and not isinstance(value, bool):
        return [str(value)]
    if isinstance(value, Sequence) and value and all(isinstance(v, str) for v in value):
        return list(value)
    raise VerifierError(
        f"task {task.id}: the gold must be a string or a non-empty list of strings, "
        f"got {type(value).__name__}"
    )
