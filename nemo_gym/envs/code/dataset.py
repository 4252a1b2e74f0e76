"""The base of the code benchmarks: rows become tasks whose tests `CodeVerifier` runs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from nemo_gym.envs.base import Turns
from nemo_gym.envs.code.oracle import fenced, oracle_turns
from nemo_gym.envs.code.programs import SYSTEM
from nemo_gym.envs.rows import DatasetEnv
from nemo_gym.harnesses import SingleTurn
from nemo_gym.protocols import SandboxProvider
from nemo_gym.records import Message, ResourceLimits, Task

__all__ = ["CodeDatasetEnv"]


class CodeDatasetEnv(DatasetEnv):
    """Code problems from rows; the reply's program runs against their tests in a sandbox.

    `provider` ("local", "process", "docker", ... or a provider object),
    `timeout_per_test`, `timeout_total`, `partial_credit`, `limits` and `pool_size`
    configure the `CodeVerifier`.
    """

    domain = "code"
    requires = ("sandbox",)
    verification = "tests run in a sandbox (CodeVerifier)"

    def __init__(
        self,
        *,
        provider: str | SandboxProvider = "local",
        timeout_per_test: float = 5.0,
        timeout_total: float = 60.0,
        partial_credit: bool = False,
        limits: ResourceLimits | None = None,
        pool_size: int = 4,
        path: str | None = None,
        dataset: str | None = None,
        dataset_name: str | None = None,
        load_options: Mapping[str, Any] | None = None,
        tasks: Sequence[Task] | None = None,
    ) -> None:
        from nemo_gym.verify.code import CodeVerifier

        verifier = CodeVerifier(
            "python",
            provider=provider,
            timeout_per_test=timeout_per_test,
            timeout_total=timeout_total,
            partial_credit=partial_credit,
            limits=limits,
            pool_size=pool_size,
        )
        super().__init__(
            verifier,
            path=path,
            dataset=dataset,
            dataset_name=dataset_name,
            load_options=load_options,
            tasks=tasks,
            harness=SingleTurn(system_prompt=SYSTEM),
        )

    def oracle(self, task: Task) -> Turns | None:
        return oracle_turns(task)

    def wrong(self, task: Task) -> Turns:
        return [Message.assistant(fenced("raise SystemExit(1)"))]

    async def aclose(self) -> None:
        """Close the verifier's warm sandboxes."""
        await self.verifier.aclose()  # type: ignore[attr-defined]
