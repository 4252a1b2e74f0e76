"""`mmlu_pro`: up to ten options per question, in MMLU-Pro's layout."""

from __future__ import annotations

from typing import Any

from nemo_gym.envs.knowledge.base import MultipleChoiceEnv, gold_letter
from nemo_gym.envs.rows import Row


class MMLUPro(MultipleChoiceEnv):
    """MMLU-Pro: harder questions with up to ten options (A-J); gold letter or index.

    Ships 8 ten-option questions written by us; `dataset="TIGER-Lab/MMLU-Pro"` reads
    the benchmark (question_id, question, options, answer, answer_index, category).
    """

    name = "mmlu_pro"
    version = "1"
    source = "8 questions written by us; MMLU-Pro layout (TIGER-Lab/MMLU-Pro)"
    license = "Apache-2.0 (sample); MMLU-Pro is MIT"
    sample = "knowledge/data/mmlu_pro.jsonl"
    public = "TIGER-Lab/MMLU-Pro"

    def parse(self, row: Row) -> tuple[str, list[str], str, dict[str, Any]]:
        options = [str(o) for o in row.require("options", list) if str(o).strip() != "N/A"]
        key = "answer" if row.get("answer") is not None else "answer_index"
        return (
            row.require("question", str),
            options,
            gold_letter(row, key, options),
            {"category": row.get("category", "")},
        )
