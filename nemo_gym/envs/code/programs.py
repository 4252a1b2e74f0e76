"""`code`: write a program; it is run against the problem's tests in a sandbox.

```python
env = gym.make("code")                                    # our problems, `local` sandbox
env = gym.make("code", provider="process")                # where namespaces are missing
env = gym.make("code", dataset="codeparrot/apps", trust_remote_code=True)
```

Our problems (problems.jsonl, 27 of them: 14 "train", 13 "test") each carry a
statement, stdin/stdout or function tests and a reference solution that the test suite
runs through `CodeVerifier`. Datasets in the APPS or LiveCodeBench layout load through
Hugging Face `datasets` (the `datasets` extra); see `loaders.py`. The reward is 1.0 when
every test passes (or the fraction passed with `partial_credit=True`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from nemo_gym.envs.base import Env, Turns
from nemo_gym.envs.code.loaders import load_hf, shipped_problems, task_from_problem
from nemo_gym.envs.code.oracle import fenced, oracle_turns
from nemo_gym.errors import ConfigError
from nemo_gym.harnesses import SingleTurn
from nemo_gym.protocols import SandboxProvider
from nemo_gym.records import Message, ResourceLimits, Task

__all__ = ["SYSTEM", "CodeEnv"]

SYSTEM = (
    "You are an expert programmer. Reason about the problem, then give your final "
    "solution as one ```python code block."
)


class CodeEnv(Env):
    """Programming problems scored by running the reply's code against tests.

    Tasks come from `tasks=` (any `Task`s with test metadata), else from `dataset` (a
    Hugging Face dataset in the APPS or LiveCodeBench layout, loaded per split on first
    use, `load_options` passed to `load_dataset`), else from our shipped problems
    (splits "train", "test" and "all"). `provider`, `timeout_per_test`, `timeout_total`,
    `partial_credit`, `limits` and `pool_size` configure the `CodeVerifier`.
    """

    name = "code"
    version = "1"
    domain = "code"
    verification = "stdin/stdout and function tests run in a sandbox (CodeVerifier)"
    requires = ("sandbox",)
    source = "27 problems written by us; APPS / LiveCodeBench layouts via dataset="
    license = "Apache-2.0"
    splits = ("train", "test")

    def __init__(
        self,
        *,
        tasks: Iterable[Task] | None = None,
        dataset: str | None = None,
        dataset_name: str | None = None,
        dataset_format: str = "auto",
        provider: str | SandboxProvider = "local",
        timeout_per_test: float = 5.0,
        timeout_total: float = 60.0,
        partial_credit: bool = False,
        limits: ResourceLimits | None = None,
        pool_size: int = 4,
        system_prompt: str | None = SYSTEM,
        **load_options: Any,
    ) -> None:
        from nemo_gym.verify.code import CodeVerifier

        if tasks is not None and dataset is not None:
            raise ConfigError("code env: give tasks= or dataset=, not both")
        if load_options and dataset is None:
            raise ConfigError(f"code env: unknown options {sorted(load_options)}")
        verifier = CodeVerifier(
            "python",
            provider=provider,
            timeout_per_test=timeout_per_test,
            timeout_total=timeout_total,
            partial_credit=partial_credit,
            limits=limits,
            pool_size=pool_size,
        )
        super().__init__(verifier, tasks=tasks, harness=SingleTurn(system_prompt=system_prompt))
        self.dataset = dataset
        self.dataset_name = dataset_name
        self.dataset_format = dataset_format
        self.load_options = load_options
        self._loaded: dict[str, list[Task]] = {}

    def tasks(self, split: str = "test", limit: int | None = None) -> list[Task]:
        """The tasks of `split` (at most `limit`)."""
        if self._tasks is not None:
            return super().tasks(split, limit)  # type: ignore[return-value]
        if self.dataset is not None:
            if split not in self._loaded:
                self._loaded[split] = load_hf(
                    self.dataset,
                    name=self.dataset_name,
                    split=split,
                    format=self.dataset_format,  # type: ignore[arg-type]
                    **self.load_options,
                )
            found = self._loaded[split]
        else:
            found = [task_from_problem(p) for p in shipped_problems(split)]
        return found[:limit] if limit is not None else found

    def oracle(self, task: Task) -> Turns | None:
        return oracle_turns(task)

    def wrong(self, task: Task) -> Turns:
        return [Message.assistant(fenced("print('no idea')"))]

    async def aclose(self) -> None:
        """Close the verifier's warm sandboxes."""
        await self.verifier.aclose()  # type: ignore[attr-defined]
