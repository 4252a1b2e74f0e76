"""`aime`: AIME-style problems whose answers are integers from 0 to 999."""

from __future__ import annotations

from nemo_gym.envs.math.base import MathDatasetEnv
from nemo_gym.envs.prompts import join
from nemo_gym.envs.rows import Row


class AIME(MathDatasetEnv):
    """AIME layout (problem / answer, or Question / Answer); answers are 0-999 integers.

    Ships 8 problems written by us; `dataset="AI-MO/aimo-validation-aime"` (or a local
    copy of any AIME year in that layout via `path=`) reads the real ones.
    """

    name = "aime"
    version = "1"
    source = "8 problems written by us; AIME layout (AI-MO/aimo-validation-aime) via dataset="
    license = "Apache-2.0 (sample)"
    sample = "math/data/aime.jsonl"
    public = "AI-MO/aimo-validation-aime"

    def prompt(self, row: Row, question: str) -> str:
        return join(question, "The answer is an integer from 0 to 999. " + self.instruction)

    def gold(self, row: Row) -> str:
        value = str(row.first(*self.answer_fields)).strip()
        try:
            number = int(float(value))
        except ValueError:
            raise row.bad("answer", f"is {value!r}, not an integer") from None
        return str(number)
