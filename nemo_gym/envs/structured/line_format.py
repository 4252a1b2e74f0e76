"""`line_format`: answer with lines in a prescribed pattern ("- item", "key = value", ...)."""

from __future__ import annotations

import re
from typing import Any

from nemo_gym.envs.base import Turns
from nemo_gym.envs.prompts import join
from nemo_gym.envs.rows import DatasetEnv, Row
from nemo_gym.envs.structured.examples import regex_example
from nemo_gym.errors import VerifierError
from nemo_gym.harnesses import SingleTurn
from nemo_gym.records import Message, Rewards, Task, Trajectory
from nemo_gym.verify.common import response_text


async def verify_lines(task: Task, trajectory: Trajectory) -> Rewards:
    """1.0 when enough lines match a pattern (`regex`), or every marker appears and no
    stray one does (`string_match`), as the task's `verifier` says."""
    spec: dict[str, Any] = task.metadata["verifier"]
    reply = response_text(trajectory)
    if spec.get("type") in ("regex", "inline_prose"):
        try:
            patterns = [re.compile(p) for p in spec.get("verify_regex", [])]
        except re.error as exc:
            raise VerifierError(f"task {task.id}: bad pattern: {exc}") from exc
        matching = sum(1 for line in reply.split("\n") if any(p.search(line) for p in patterns))
        needed = int(spec.get("verify_min_matches", 1))
        return Rewards(reward=float(matching >= needed), metadata={"matching_lines": matching})
    if spec.get("type") == "string_match":
        markers = list(spec.get("expected_markers", []))
        missing = [m for m in markers if m not in reply]
        stray = [
            f.group(0)
            for p in spec.get("patterns", [])
            for f in re.finditer(p, reply)
            if f.group(0) not in markers
        ]
        return Rewards(
            reward=float(not missing and not stray), metadata={"missing": missing, "stray": stray}
        )
    raise VerifierError(f"task {task.id}: unknown verifier type {spec.get('type')!r}")


class LineFormat(DatasetEnv):
    """Formatting instructions checked line by line, in NeMo Gym's format_verification
    layout (`verifier`: {"type": "regex", "verify_regex": [...], "verify_min_matches": n}
    or {"type": "string_match", "expected_markers": [...]}).

    Ships 5 tasks written by us.
    """

    name = "line_format"
    version = "1"
    domain = "structured"
    verification = "enough lines match the required pattern (or markers present)"
    source = "5 tasks written by us; NeMo Gym format_verification layout via path="
    license = "Apache-2.0"
    sample = "structured/data/line_format.jsonl"

    def __init__(self, **options: object) -> None:
        super().__init__(verify_lines, harness=SingleTurn(), **options)  # type: ignore[arg-type]

    def task_from_row(self, row: Row, split: str) -> Task:
        verifier = row.require("verifier", dict)
        prompt = join(row.require("question", str), row.get("instructions", ""))
        return Task(
            id=self.task_id(row, split, "id"), prompt=prompt, metadata={"verifier": verifier}
        )

    def oracle(self, task: Task) -> Turns:
        spec = task.metadata["verifier"]
        if spec.get("type") == "string_match":
            return [Message.assistant(" ".join(spec.get("expected_markers", [])))]
        line = regex_example(spec["verify_regex"][0])
        return [Message.assistant("\n".join([line] * int(spec.get("verify_min_matches", 1))))]

    def wrong(self, task: Task) -> Turns:
        return [Message.assistant("Here is a single sentence of prose instead.")]
