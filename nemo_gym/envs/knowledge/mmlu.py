"""`mmlu`: four-option questions in MMLU's layout (question, subject, choices, answer index)."""

from __future__ import annotations

from typing import Any

from nemo_gym.envs.knowledge.base import MultipleChoiceEnv, gold_letter
from nemo_gym.envs.rows import Row


class MMLU(MultipleChoiceEnv):
    """MMLU: 57 subjects of four-option questions; the gold is an index into `choices`.

    Ships 12 questions written by us (2 "dev", 10 "test"); `dataset="cais/mmlu",
    dataset_name="all"` (or one subject) reads the benchmark.
    """

    name = "mmlu"
    version = "1"
    source = "12 questions written by us; MMLU layout (cais/mmlu) via dataset= or path="
    license = "Apache-2.0 (sample); MMLU is MIT"
    sample = "knowledge/data/mmlu.jsonl"
    public = "cais/mmlu"
    splits = ("dev", "test")

    def parse(self, row: Row) -> tuple[str, list[str], str, dict[str, Any]]:
        options = [str(c) for c in row.require("choices", list)]
        return (
            row.require("question", str),
            options,
            gold_letter(row, "answer", options),
            {"subject": row.get("subject", "")},
        )
