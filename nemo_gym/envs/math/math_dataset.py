"""`math`: competition problems in the MATH layout; the gold is the solution's \\boxed{}."""

from __future__ import annotations

from nemo_gym.envs.math.base import MathDatasetEnv
from nemo_gym.envs.rows import Row
from nemo_gym.verify.extract import last_boxed


class MATHEnv(MathDatasetEnv):
    """Competition math (MATH, MATH-500): the answer field, else the solution's last box.

    Ships 12 problems written by us; `dataset="HuggingFaceH4/MATH-500"` or the
    original `hendrycks/competition_math` layout (problem, solution, level, type) via
    `dataset=` or `path=`.
    """

    name = "math"
    version = "1"
    source = "12 problems written by us; MATH / MATH-500 layout via dataset= or path="
    license = "Apache-2.0 (sample); MATH is MIT"
    sample = "math/data/math.jsonl"
    public = "HuggingFaceH4/MATH-500"
    splits = ("train", "test")
    question_fields = ("problem",)

    def gold(self, row: Row) -> str:
        if row.get("answer") is not None:
            return str(row.get("answer")).strip()
        boxed = last_boxed(str(row.require("solution", str)))
        if boxed is None:
            raise row.bad("solution", "has no \\boxed{} answer (and the row no 'answer')")
        return boxed.strip()
