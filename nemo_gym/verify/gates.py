"""Format gates: a verifier that scores 0 unless the reply has the form the prompt asked.

`RequireBoxed(MathVerifier())` scores a reply only when it puts a non-empty answer in
`\\boxed{}`; any other reply gets reward 0 with `extracted_answer` None and the reason in
the metadata. That is how a benchmark whose prompt demands `\\boxed{}` (NeMo Gym's
`math_with_judge`, `mcqa`'s strict mode) is scored, while the inner verifier stays the
one that knows the answers.
"""

from __future__ import annotations

from nemo_gym.protocols import Verifier, VerifyFunction, as_verifier
from nemo_gym.records import Rewards, Task, Trajectory
from nemo_gym.verify.common import response_text
from nemo_gym.verify.extract import last_boxed

__all__ = ["RequireBoxed"]


class RequireBoxed:
    """0 unless the reply holds a non-empty `\\boxed{}`; else `inner`'s rewards.

    With `always=False` the gate applies only to tasks whose `metadata["require_boxed"]`
    is true (rows of one file that differ in grading mode).
    """

    def __init__(self, inner: Verifier | VerifyFunction, *, always: bool = True) -> None:
        self.inner = as_verifier(inner)
        self.always = always

    async def verify(self, task: Task, trajectory: Trajectory) -> Rewards:
        if not (self.always or task.metadata.get("require_boxed")):
            return Rewards.of(await self.inner.verify(task, trajectory))
        boxed = last_boxed(response_text(trajectory))
        if boxed is None or not boxed.strip():
            return Rewards(
                reward=0.0,
                components={"accuracy": 0.0, "format": 0.0},
                metadata={"extracted_answer": None, "reason": "no \\boxed{} answer"},
            )
        return Rewards.of(await self.inner.verify(task, trajectory))

    def __repr__(self) -> str:
        return f"RequireBoxed({self.inner!r})"
