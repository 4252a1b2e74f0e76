"""`gpqa`: graduate-level questions in GPQA's layout, options shuffled per question."""

from __future__ import annotations

import random
from typing import Any

from nemo_gym.envs.knowledge.base import MultipleChoiceEnv
from nemo_gym.envs.prompts import LETTERS
from nemo_gym.envs.rows import Row

ANSWER_LINE = (
    "Think step by step, then end with a line 'Answer: LETTER' (one of ABCD), or give the "
    "letter in \\boxed{}."
)


class GPQA(MultipleChoiceEnv):
    """GPQA: the correct answer and three distractors, shuffled by the question's id.

    The order depends only on the row's "Record ID" (and `seed`), so it is the same in
    every run. Ships 6 questions written by us; `dataset="Idavidrein/gpqa",
    dataset_name="gpqa_diamond", load_options={"split": ...}` reads the benchmark (gated).
    """

    name = "gpqa"
    version = "1"
    source = "6 questions written by us; GPQA layout (Idavidrein/gpqa, gated) via dataset="
    license = "Apache-2.0 (sample); GPQA is CC BY 4.0"
    sample = "knowledge/data/gpqa.jsonl"
    public = "Idavidrein/gpqa"
    instruction = ANSWER_LINE

    def __init__(self, *, seed: int = 0, **options: Any) -> None:
        super().__init__(**options)
        self.seed = seed

    def parse(self, row: Row) -> tuple[str, list[str], str, dict[str, Any]]:
        right = str(row.require("Correct Answer")).strip()
        options = [right] + [str(row.require(f"Incorrect Answer {i}")).strip() for i in (1, 2, 3)]
        random.Random(f"gpqa:{self.seed}:{row.get('Record ID', row.index)}").shuffle(options)
        extra = {"domain": row.get("High-level domain", ""), "subdomain": row.get("Subdomain", "")}
        return str(row.require("Question")).strip(), options, LETTERS[options.index(right)], extra
