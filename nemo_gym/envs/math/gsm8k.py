"""`gsm8k`: grade-school word problems in GSM8K's layout (question, answer ending "#### N")."""

from __future__ import annotations

from nemo_gym.envs.math.base import MathDatasetEnv
from nemo_gym.envs.rows import Row


class GSM8K(MathDatasetEnv):
    """Grade-school math word problems; the gold is the number after "####".

    Ships 16 problems written by us (6 "train", 10 "test"); `dataset="openai/gsm8k",
    dataset_name="main"` (or `path=` to its parquet/JSONL files) reads the benchmark.
    """

    name = "gsm8k"
    version = "1"
    source = "16 problems written by us; GSM8K layout (openai/gsm8k) via dataset= or path="
    license = "Apache-2.0 (sample); GSM8K is MIT"
    sample = "math/data/gsm8k.jsonl"
    public = "openai/gsm8k"
    splits = ("train", "test")
    question_fields = ("question",)

    def gold(self, row: Row) -> str:
        answer = str(row.require("answer", str))
        marker = answer.rfind("####")
        if marker < 0:
            raise row.bad("answer", "has no '#### <number>' final answer")
        return answer[marker + 4 :].strip().replace(",", "")
