"""`mbpp`: short Python functions from a description, checked by MBPP's asserts."""

from __future__ import annotations

from nemo_gym.envs.code.dataset import CodeDatasetEnv
from nemo_gym.envs.prompts import join
from nemo_gym.envs.rows import Row
from nemo_gym.records import Task


class MBPP(CodeDatasetEnv):
    """MBPP layout (task_id, text or prompt, code, test_list, test_setup_code); MBPP+
    (`evalplus/mbppplus`) has the same columns. The first assert shows the signature.

    Ships 6 problems written by us; `dataset="google-research-datasets/mbpp"` (or
    `dataset_name="sanitized"`) reads the benchmark.
    """

    name = "mbpp"
    version = "1"
    source = "6 problems written by us; MBPP / MBPP+ layout via dataset= or path="
    license = "Apache-2.0 (sample); MBPP is CC BY 4.0"
    sample = "code/data/mbpp.jsonl"
    public = "google-research-datasets/mbpp"

    def task_from_row(self, row: Row, split: str) -> Task:
        tests = [str(t) for t in row.require("test_list", list)]
        if not tests:
            raise row.bad("test_list", "is empty")
        metadata = {"asserts": tests, "test_setup": row.get("test_setup_code", "")}
        if row.get("code"):
            metadata["reference_solution"] = row.require("code", str)
        text = join(
            str(row.first("text", "prompt")),
            f"Your code should pass this test:\n{tests[0]}",
            "Reply with the function in one ```python code block.",
        )
        return Task(id=self.task_id(row, split, "task_id"), prompt=text, metadata=metadata)
