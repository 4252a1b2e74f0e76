"""Why rollouts lose reward, from the rows alone.

Every rollout gets one class. A rollout that passes (reward >= the success threshold)
is `passed`. Of the rest, in this order (the first that applies wins, so each rollout
is counted once, under its most upstream cause):

- `timeout`: failed with kind `timeout`;
- `infrastructure`: failed for any other reason (`failure.kind`: model, environment,
  sandbox, verifier, harness, cancelled; a tool failure that is not misuse);
- `truncated`: a model call ended with `finish_reason == "length"`;
- `tool_misuse`: a tool call named an unknown tool, had arguments that were not JSON or
  did not fit the tool, or the tool returned an error (`ToolResult.error`); also a
  failed rollout whose tool failure says so (`ToolLoop(tool_errors="fail")`);
- `no_answer`: the verifier extracted no answer
  (`Rewards.metadata["extracted_answer"] is None`);
- `format`: a `format` component is below 1 while the answer is right (an `accuracy`
  component of 1) or its rightness is not reported (no `accuracy` component);
- `wrong`: an answer was extracted (or extraction is not reported) and it is wrong.

Each class has a finer `detail` (the failure's `kind/code`, `unknown_tool`,
`bad_arguments`, `tool_error`, `extracted` / `not_reported`, ...).

The reward a rollout loses is `ceiling - reward` (ceiling: the best reward, 1.0 by
default) for an ok rollout that does not pass, and the whole ceiling for a failed one
(failed rollouts are masked in the metrics; here they count as what they cost). A
class's `share` is its part of all the reward lost; its `points` the reward lost per
rollout of the run, as a share of the ceiling: what fixing that class alone would add
to the mean reward, at most.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "CLASSES",
    "Diagnosis",
    "Example",
    "LossClass",
    "classify",
    "diagnose",
    "tool_problem",
]

CLASSES = (
    "timeout",
    "infrastructure",
    "truncated",
    "tool_misuse",
    "no_answer",
    "format",
    "wrong",
)
"""The loss classes, most upstream first (`passed` is not a loss)."""

DESCRIPTIONS = {
    "timeout": "the rollout ran past its deadline",
    "infrastructure": "the model, environment, sandbox, verifier or harness failed",
    "truncated": "the reply was cut off (finish_reason=length)",
    "tool_misuse": "unknown tool, bad arguments, or a tool error",
    "no_answer": "the verifier extracted no answer",
    "format": "a right answer, but not in the required format",
    "wrong": "an answer, and a wrong one",
}

_BAD_ARGUMENTS = (
    "invalid arguments for",
    "unexpected keyword argument",
    "missing 1 required",
    "missing 2 required",
    "required positional argument",
    "required keyword",
)


def tool_problem(error: str) -> str:
    """`unknown_tool`, `bad_arguments` or `tool_error`, from a tool error's text."""
    text = error.lower()
    if "unknown tool" in text:
        return "unknown_tool"
    if any(marker in text for marker in _BAD_ARGUMENTS):
        return "bad_arguments"
    return "tool_error"


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def classify(row: Mapping[str, Any], success_threshold: float = 1.0) -> tuple[str, str]:
    """(class, detail) of one stored row (a dict as in `rollouts.jsonl`)."""
    if row.get("status") != "ok":
        failure = _mapping(row.get("failure"))
        kind, code = str(failure.get("kind")), str(failure.get("code"))
        if kind == "timeout" or code == "timeout":
            return "timeout", f"{kind}/{code}"
        if kind == "tool":
            problem = tool_problem(str(failure.get("message") or ""))
            if problem != "tool_error":
                return "tool_misuse", problem
        return "infrastructure", f"{kind}/{code}"
    rewards = _mapping(row.get("rewards"))
    reward = rewards.get("reward")
    if isinstance(reward, int | float) and reward >= success_threshold:
        return "passed", "passed"
    trajectory = _mapping(row.get("trajectory"))
    for call in _list(trajectory.get("model_calls")):
        response = _mapping(_mapping(call).get("response"))
        if response.get("finish_reason") == "length":
            return "truncated", "length"
    for result in _list(trajectory.get("tool_results")):
        error = _mapping(result).get("error")
        if error:
            return "tool_misuse", tool_problem(str(error))
    metadata = _mapping(rewards.get("metadata"))
    if "extracted_answer" in metadata and metadata["extracted_answer"] is None:
        return "no_answer", "extracted_answer=None"
    components = _mapping(rewards.get("components"))
    accuracy = components.get("accuracy")
    form = components.get("format")
    right = not isinstance(accuracy, int | float) or accuracy >= 1.0
    if right and isinstance(form, int | float) and form < 1.0:
        return "format", "format<1"
    return "wrong", "extracted" if "extracted_answer" in metadata else "not_reported"


@dataclass
class Example:
    """One rollout shown for a class: where it is and what it said."""

    env: str | None
    variant: str | None
    task_id: str
    repeat: int
    line: int
    reward: float | None
    detail: str
    prompt: str = ""
    response: str = ""
    answer: str = ""
    extracted: str = ""
    note: str = ""


@dataclass
class LossClass:
    """One class of one environment: how many rollouts, how much reward they lost."""

    name: str
    count: int = 0
    lost: float = 0.0
    details: dict[str, int] = field(default_factory=dict)
    examples: list[Example] = field(default_factory=list)
    share: float = 0.0
    points: float = 0.0


@dataclass
class Diagnosis:
    """The classes of one environment (or of the whole run)."""

    env: str
    rollouts: int = 0
    passed: int = 0
    lost: float = 0.0
    ceiling: float = 1.0
    classes: dict[str, LossClass] = field(default_factory=dict)

    def add(self, cls: str, detail: str, reward: float | None) -> float:
        """Count one rollout; the reward it lost."""
        self.rollouts += 1
        if cls == "passed":
            self.passed += 1
            return 0.0
        lost = self.ceiling if reward is None else max(0.0, self.ceiling - reward)
        entry = self.classes.setdefault(cls, LossClass(cls))
        entry.count += 1
        entry.lost += lost
        entry.details[detail] = entry.details.get(detail, 0) + 1
        self.lost += lost
        return lost

    def finish(self) -> Diagnosis:
        """Fill each class's share and points, and order the classes as `CLASSES`."""
        for entry in self.classes.values():
            entry.share = entry.lost / self.lost if self.lost else 0.0
            entry.points = entry.lost / (self.rollouts * self.ceiling) if self.rollouts else 0.0
        self.classes = {name: self.classes[name] for name in CLASSES if name in self.classes}
        return self


def diagnose(
    rows: Iterable[Mapping[str, Any]],
    *,
    success_threshold: float = 1.0,
    ceiling: float = 1.0,
) -> dict[str, Diagnosis]:
    """Diagnoses per environment (and `"*"` for all) of rows (the last row per key
    wins, as in the metrics). Examples are not filled here (see `analysis.profile`)."""
    if not (math.isfinite(ceiling) and ceiling > 0):
        raise ValueError(f"ceiling must be a positive number, got {ceiling!r}")
    final: dict[tuple[Any, ...], tuple[str | None, str, str, float | None]] = {}
    for row in rows:
        metadata = _mapping(row.get("metadata"))
        key = (row.get("env"), metadata.get("variant"), row.get("task_id"), row.get("repeat"))
        cls, detail = classify(row, success_threshold)
        reward = _mapping(row.get("rewards")).get("reward") if row.get("status") == "ok" else None
        final[key] = (
            row.get("env"),
            cls,
            detail,
            reward if isinstance(reward, int | float) else None,
        )
    out: dict[str, Diagnosis] = {"*": Diagnosis("*", ceiling=ceiling)}
    for env, cls, detail, reward in final.values():
        out["*"].add(cls, detail, reward)
        name = str(env)
        out.setdefault(name, Diagnosis(name, ceiling=ceiling)).add(cls, detail, reward)
    return {name: d.finish() for name, d in out.items()}
