"""`livecodebench`: contest problems in LiveCodeBench's layout (stdin or LeetCode-style)."""

from __future__ import annotations

from nemo_gym.envs.code.dataset import CodeDatasetEnv
from nemo_gym.envs.code.loaders import task_from_livecodebench
from nemo_gym.envs.rows import Row
from nemo_gym.errors import ConfigError
from nemo_gym.records import Task

# What LiveCodeBench's own harness imports before a LeetCode-style solution.
PRELUDE = "from typing import *\nimport collections, heapq, itertools, math, bisect, functools"


class LiveCodeBench(CodeDatasetEnv):
    """LiveCodeBench rows (question_content, public/private_test_cases as JSON or
    compressed, metadata.func_name, starter_code).

    Ships 4 problems written by us; `dataset="livecodebench/code_generation_lite"`
    reads the benchmark (with `load_options={"version_tag": "release_v5"}`).
    """

    name = "livecodebench"
    version = "1"
    source = "4 problems written by us; LiveCodeBench layout via dataset= or path="
    license = "Apache-2.0 (sample); LiveCodeBench is CC BY 4.0"
    sample = "code/data/livecodebench.jsonl"
    public = "livecodebench/code_generation_lite"

    def task_from_row(self, row: Row, split: str) -> Task:
        task = task_from_livecodebench(dict(row.data))
        if task is None:
            raise ConfigError(f"{row.where}: the row has no test cases")
        metadata = {**task.metadata, "test_setup": PRELUDE}
        if row.get("reference"):
            metadata["reference_solution"] = row.require("reference", str)
        return task.model_copy(
            update={
                "id": f"{self.name}-{split}-{row.data.get('question_id', row.index)}",
                "metadata": metadata,
            }
        )
