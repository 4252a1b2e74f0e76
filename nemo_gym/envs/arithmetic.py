"""`arithmetic`: seeded integer arithmetic; answers in \\boxed{} or as a final number."""

from __future__ import annotations

import random
from collections.abc import Iterator

from nemo_gym.envs.base import Env
from nemo_gym.harnesses import SingleTurn
from nemo_gym.records import Rewards, Task, Trajectory
from nemo_gym.verify.extract import final_integer, strip_thinking

SYSTEM = "Solve the problem. Put the final answer in \\boxed{}."
_SPLITS = ("train", "validation", "test")


def _expression(rng: random.Random, terms: int, max_value: int) -> str:
    parts = [str(rng.randint(1, max_value))]
    for _ in range(terms - 1):
        op = rng.choice("+-*")
        operand = rng.randint(1, max_value if op != "*" else max(2, max_value // 4))
        parts += [op, str(operand)]
    return " ".join(parts)


async def verify_integer(task: Task, trajectory: Trajectory) -> Rewards:
    """1.0 when the final integer equals the gold; `format` says whether it was boxed.

    `metadata["extracted_answer"]` is what was read (None when the reply has no answer),
    `metadata["value"]` its integer value (None when it is not an integer).
    """
    found = final_integer(strip_thinking(trajectory.final_text))
    correct = found.value is not None and found.value == int(task.answer)
    return Rewards(
        reward=float(correct),
        components={"accuracy": float(correct), "format": float(found.boxed)},
        metadata={"extracted_answer": found.text, "value": found.value},
    )


class Arithmetic(Env):
    """Integer expressions of `terms` terms with operands up to `max_value`.

    Tasks are generated from (seed, split, index), so every split is reproducible and
    splits never share a seed stream. `size` bounds each split.
    """

    name = "arithmetic"
    version = "1"
    domain = "math"
    verification = "integer match (\\boxed{} or the final number)"
    source = "procedural"
    license = "Apache-2.0"

    def __init__(self, *, seed: int = 0, size: int = 10_000, terms: int = 3, max_value: int = 100):
        super().__init__(verify_integer, harness=SingleTurn(system_prompt=SYSTEM))
        self.seed, self.size, self.terms, self.max_value = seed, size, terms, max_value

    def tasks(self, split: str = "test", limit: int | None = None) -> Iterator[Task]:
        if split not in _SPLITS:
            raise ValueError(f"unknown split {split!r}; choose from {_SPLITS}")
        count = self.size if limit is None else min(limit, self.size)
        for index in range(count):
            rng = random.Random(f"{self.seed}:{split}:{index}")
            expression = _expression(rng, self.terms, self.max_value)
            yield Task(
                id=f"{self.name}-{split}-{index}",
                prompt=f"What is {expression}?",
                answer=str(eval(expression, {"__builtins__": {}})),  # digits and + - * only
                metadata={"expression": expression},
            )


class ArithmeticSmall(Arithmetic):
    """Two-term arithmetic with operands up to 10: what a 135M model solves some of the time.

    The embedded SmolLM2-135M-Instruct, greedy, gets about half of these right, where
    it gets almost none of `arithmetic`'s three terms up to 100: a first evaluation
    whose reward means something.
    """

    name = "arithmetic_small"

    def __init__(self, *, seed: int = 0, size: int = 10_000, terms: int = 2, max_value: int = 10):
        super().__init__(seed=seed, size=size, terms=terms, max_value=max_value)
