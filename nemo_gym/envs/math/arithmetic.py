"""`arithmetic`: seeded integer arithmetic; answers in \\boxed{} or as a final number."""

from __future__ import annotations

import random

from nemo_gym.envs.base import Turns
from nemo_gym.envs.procedural import ProceduralEnv
from nemo_gym.envs.prompts import BOXED, boxed
from nemo_gym.harnesses import SingleTurn
from nemo_gym.records import Message, Rewards, Task, Trajectory
from nemo_gym.verify.extract import final_integer, strip_thinking

SYSTEM = "Solve the problem. " + BOXED


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


class Arithmetic(ProceduralEnv):
    """Integer expressions of `terms` terms with operands up to `max_value`.

    Tasks are drawn from (seed, split, index); a problem belongs to one split only
    (see `nemo_gym.envs.procedural`), so every split is reproducible and no test
    expression is a train expression. `size` bounds each split.
    """

    name = "arithmetic"
    version = "2"
    domain = "math"
    verification = "integer match (\\boxed{} or the final number)"

    def __init__(self, *, seed: int = 0, size: int = 10_000, terms: int = 3, max_value: int = 100):
        super().__init__(
            verify_integer, seed=seed, size=size, harness=SingleTurn(system_prompt=SYSTEM)
        )
        self.terms, self.max_value = terms, max_value

    def draw(self, rng: random.Random) -> Task:
        expression = _expression(rng, self.terms, self.max_value)
        return Task(
            prompt=f"What is {expression}?",
            answer=str(eval(expression, {"__builtins__": {}})),  # digits and + - * only
            metadata={"expression": expression},
        )

    def oracle(self, task: Task) -> Turns:
        return [Message.assistant(boxed(task.answer, f"{task.metadata['expression']}:"))]

    def wrong(self, task: Task) -> Turns:
        return [Message.assistant(boxed(int(task.answer) + 1))]


class ArithmeticSmall(Arithmetic):
    """Two-term arithmetic with operands up to 10: what a 135M model solves some of the time.

    The embedded SmolLM2-135M-Instruct, greedy, gets a third to half of these right
    (0.5 on the first 8 test tasks, 0.34 on the first 50), where
    it gets almost none of `arithmetic`'s three terms up to 100: a first evaluation
    whose reward means something.
    """

    name = "arithmetic_small"

    def __init__(self, *, seed: int = 0, size: int = 10_000, terms: int = 2, max_value: int = 10):
        super().__init__(seed=seed, size=size, terms=terms, max_value=max_value)
