"""`genrm`: train a generative reward model: score two responses per rubric, as people did.

NeMo Gym's `generative_reward_model`. The reply holds exactly one JSON object
(`rubric_evaluations`: per rubric `rubric_id`, `score_1`, `score_2` (1-5), `ranking`
(1-6); `overall`: the same three); the reward is minus the distance to the human labels:
`score_weight` x each score's L1 error and `ranking_weight` x the ranking's, overall,
plus `rubric_weight` x their mean over the rubrics. The best reply scores 0. No object,
two objects (a repeated verdict), a missing field, or rubric IDs other than the labelled
ones score `parse_failure_penalty` (-100): a reply without a verdict.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from nemo_gym.envs.base import Turns
from nemo_gym.envs.rows import DatasetEnv, Row
from nemo_gym.harnesses import SingleTurn
from nemo_gym.records import Message, Rewards, Task, Trajectory
from nemo_gym.verify.common import response_text

__all__ = ["GenRM", "genrm_labels", "parse_verdict", "score_verdict"]

_FIELDS = ("score_1", "score_2", "ranking")
_INVALID_ESCAPE = re.compile(r'\\(?!["\\/bfnrtu])')
WEIGHTS = {"score_weight": 1.0, "ranking_weight": 2.0, "rubric_weight": 0.5}
PARSE_FAILURE = -100.0


def _objects(text: str) -> list[str]:
    """Every top-level balanced `{...}` of `text`, braces inside JSON strings skipped."""
    found, depth, start, in_string, escaped = [], 0, -1, False, False
    for i, ch in enumerate(text):
        if escaped:
            escaped = False
        elif ch == "\\" and in_string:
            escaped = True
        elif ch == '"':
            in_string = not in_string
        elif in_string:
            continue
        elif ch == "{":
            start = i if depth == 0 else start
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0 and start >= 0:
                found.append(text[start : i + 1])
                start = -1
    return found


def _loads(text: str) -> dict[str, Any] | None:
    # LaTeX in the analyses (`\\Delta`) is an invalid JSON escape: read it as a backslash.
    for candidate in (text, _INVALID_ESCAPE.sub(r"\\\\", text)):
        try:
            value = json.loads(candidate)
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict):
            return value
    return None


def parse_verdict(text: str) -> dict[str, Any] | None:
    """The reply's one verdict as {"overall": {field: float}, "rubrics": [(id, {field:
    float})]}, or None (no object, more than one, or a field missing or not a number)."""
    objects = [o for o in (_loads(c) for c in _objects(text)) if o is not None]
    if len(objects) != 1:
        return None
    overall, rubrics = objects[0].get("overall"), objects[0].get("rubric_evaluations")
    if not isinstance(overall, dict) or not isinstance(rubrics, list) or not rubrics:
        return None
    try:
        return {
            "overall": {f: float(overall[f]) for f in _FIELDS},
            "rubrics": [(int(r["rubric_id"]), {f: float(r[f]) for f in _FIELDS}) for r in rubrics],
        }
    except (TypeError, ValueError, KeyError):
        return None


def score_verdict(
    verdict: Mapping[str, Any] | None,
    overall: Mapping[str, Any] | None,
    rubrics: Sequence[Mapping[str, Any]] | None,
    weights: Mapping[str, float] = WEIGHTS,
) -> tuple[float, str | None]:
    """(reward, why it is the parse-failure penalty or None) against the labels."""
    if verdict is None:
        return PARSE_FAILURE, "no single verdict object with every field"

    def penalty(labels: Mapping[str, Any], predicted: Mapping[str, float]) -> float | None:
        terms = [
            weights["ranking_weight" if f == "ranking" else "score_weight"]
            * abs(float(labels[f]) - predicted[f])
            for f in _FIELDS
            if labels.get(f) is not None
        ]
        return sum(terms) if terms else None

    reward = 0.0 - (penalty(overall, verdict["overall"]) or 0.0) if overall else 0.0
    if rubrics:
        labelled = {int(r["rubric_id"]): r for r in rubrics}
        predicted = dict(verdict["rubrics"])
        # A repeated rubric ID would score only its last copy: the IDs must match one to one.
        if len(verdict["rubrics"]) != len(labelled) or set(predicted) != set(labelled):
            return PARSE_FAILURE, "rubric IDs differ from the labelled rubrics"
        penalties = [penalty(labelled[i], predicted[i]) for i in labelled]
        scored = [p for p in penalties if p is not None]
        if scored:
            reward -= weights["rubric_weight"] * sum(scored) / len(scored)
    return reward, None


def genrm_labels(row: Row) -> dict[str, Any]:
    """The row's human labels, checked: `ground_truth_overall` and/or
    `ground_truth_rubric_scores` (each rubric with a `rubric_id`)."""
    overall = row.get("ground_truth_overall")
    rubrics = row.get("ground_truth_rubric_scores")
    if overall is not None and not isinstance(overall, dict):
        raise row.bad("ground_truth_overall", "must be an object of score_1, score_2, ranking")
    if rubrics is not None and (
        not isinstance(rubrics, list)
        or not all(isinstance(r, dict) and isinstance(r.get("rubric_id"), int) for r in rubrics)
    ):
        raise row.bad("ground_truth_rubric_scores", "must be a list of objects with a rubric_id")
    if not overall and not rubrics:
        raise row.bad("ground_truth_overall", "is missing, and so is ground_truth_rubric_scores")
    return {"overall": overall, "rubrics": rubrics}


async def verify_genrm(task: Task, trajectory: Trajectory) -> Rewards:
    labels = task.metadata["labels"]
    verdict = parse_verdict(response_text(trajectory))
    reward, failed = score_verdict(verdict, labels["overall"], labels["rubrics"])
    return Rewards(
        reward=reward,
        components={"format": float(failed is None)},
        metadata={"verdict": verdict, "parse_failure": failed},
    )


def _verdict(labels: Mapping[str, Any], flip: bool) -> str:
    def fields(given: Mapping[str, Any] | None) -> dict[str, float]:
        given = given or {}
        values = {f: float(given.get(f) or 3.0) for f in _FIELDS}
        if flip:  # the other response preferred
            values = {
                "score_1": 6 - values["score_1"],
                "score_2": 6 - values["score_2"],
                "ranking": 7 - values["ranking"],
            }
        return values

    rubrics = labels["rubrics"] or [{"rubric_id": 1}]
    return json.dumps(
        {
            "rubric_evaluations": [{"rubric_id": r["rubric_id"], **fields(r)} for r in rubrics],
            "overall": fields(labels["overall"]),
        }
    )


class GenRM(DatasetEnv):
    """Pairwise judging with rubrics, scored against human labels (see the module doc).

    Rows are NeMo Gym's `generative_reward_model` layout: `responses_create_params` (the
    judging prompt with both responses and the rubrics), `ground_truth_overall` and
    `ground_truth_rubric_scores`. Ships 3 rows written by us."""

    name = "genrm"
    version = "1"
    domain = "knowledge"
    verification = "minus the weighted L1 distance of the verdict's scores to human labels"
    source = "3 judging rows written by us; NeMo Gym's generative_reward_model layout"
    license = "Apache-2.0"
    sample = "knowledge/data/genrm.jsonl"
    max_reward = 0.0  # no distance to the labels; every other reply is below 0

    def __init__(self, *, path: str | None = None, tasks: Sequence[Task] | None = None) -> None:
        super().__init__(verify_genrm, path=path, tasks=tasks, harness=SingleTurn())

    def task_from_row(self, row: Row, split: str) -> Task:
        from nemo_gym.interop.nemo_gym.wire import prompt_of

        messages, _ = prompt_of(row)
        return Task(
            id=self.task_id(row, split, "id"),
            messages=messages,
            metadata={"labels": genrm_labels(row)},
        )

    def oracle(self, task: Task) -> Turns:
        return [Message.assistant(f"```json\n{_verdict(task.metadata['labels'], False)}\n```")]

    def wrong(self, task: Task) -> Turns:
        return [Message.assistant(_verdict(task.metadata["labels"], True))]
