"""`algebra`: seeded equations to solve: linear, with a fraction or integer solution."""

from __future__ import annotations

import random
from fractions import Fraction

from nemo_gym.envs.base import Turns
from nemo_gym.envs.procedural import ProceduralEnv
from nemo_gym.envs.prompts import BOXED, boxed, join
from nemo_gym.harnesses import SingleTurn
from nemo_gym.records import Message, Task
from nemo_gym.verify.math import MathVerifier


def _latex(value: Fraction) -> str:
    if value.denominator == 1:
        return str(value.numerator)
    sign = "-" if value < 0 else ""
    return f"{sign}\\frac{{{abs(value.numerator)}}}{{{value.denominator}}}"


def _side(x: int, constant: int) -> str:
    term = {1: "x", -1: "-x"}.get(x, f"{x}x")
    if constant == 0:
        return term
    return f"{term} {'+' if constant > 0 else '-'} {abs(constant)}"


class Algebra(ProceduralEnv):
    """Solve `a x + b = c x + d` for x; `fractions=False` keeps solutions integers."""

    name = "algebra"
    version = "1"
    domain = "math"
    verification = "math equivalence of the final answer (MathVerifier)"

    def __init__(
        self,
        *,
        seed: int = 0,
        size: int = 10_000,
        max_coefficient: int = 9,
        fractions: bool = True,
    ) -> None:
        super().__init__(MathVerifier(), seed=seed, size=size, harness=SingleTurn())
        self.max_coefficient, self.fractions = max_coefficient, fractions

    def draw(self, rng: random.Random) -> Task:
        m = self.max_coefficient
        a, c = rng.sample([k for k in range(-m, m + 1) if k != 0], 2)
        if self.fractions:
            b, d = rng.randint(-5 * m, 5 * m), rng.randint(-5 * m, 5 * m)
        else:
            x = rng.randint(-m, m)
            b = rng.randint(-5 * m, 5 * m)
            d = a * x + b - c * x
        solution = Fraction(d - b, a - c)
        equation = f"{_side(a, b)} = {_side(c, d)}"
        return Task(
            prompt=join(f"Solve for $x$: ${equation}$.", BOXED),
            answer=_latex(solution),
            metadata={"equation": equation, "solution": str(solution)},
        )

    def oracle(self, task: Task) -> Turns:
        return [Message.assistant(boxed(f"x = {task.answer}", "Collect the x terms."))]

    def wrong(self, task: Task) -> Turns:
        return [Message.assistant(boxed(_latex(Fraction(task.metadata["solution"]) + 1)))]
