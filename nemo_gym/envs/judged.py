"""The base of judge-scored environments: a judge `Model` the user passes decides the reward.

The judge sees a template with `{question}`, `{reference}` (the task's answer: a
reference answer, or the behaviour expected) and `{response}`, and ends with a
CORRECT / INCORRECT verdict (`nemo_gym.verify.judge.JudgeVerifier`, which fences the
judged response so it cannot instruct the judge). A judge that fails or gives no verdict
is a recorded verifier failure of the rollout, never a reward of 0.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from nemo_gym.envs.rows import DatasetEnv
from nemo_gym.harnesses import SingleTurn
from nemo_gym.protocols import Model
from nemo_gym.records import Task
from nemo_gym.verify.judge import JudgeVerifier

__all__ = ["JudgedEnv"]


class JudgedEnv(DatasetEnv):
    """Rows scored by `judge` with the class's `template` (see the module doc).

    `judge_model_name` overrides the judge adapter's model per request;
    `max_parse_retries` re-asks a judge whose reply has no verdict line.
    """

    requires = ("judge",)
    template: ClassVar[str] = "reference"

    def __init__(
        self,
        *,
        judge: Model,
        judge_model_name: str | None = None,
        max_parse_retries: int = 1,
        path: str | None = None,
        dataset: str | None = None,
        dataset_name: str | None = None,
        load_options: Mapping[str, Any] | None = None,
        tasks: Sequence[Task] | None = None,
    ) -> None:
        verifier = JudgeVerifier(
            judge,
            template=self.template,
            model_name=judge_model_name,
            max_parse_retries=max_parse_retries,
        )
        super().__init__(
            verifier,
            path=path,
            dataset=dataset,
            dataset_name=dataset_name,
            load_options=load_options,
            tasks=tasks,
            harness=SingleTurn(),
        )
