"""`guess_number`: a multi-step game. Guess a secret integer; the reply says higher/lower."""

from __future__ import annotations

import random
from collections.abc import Iterator

from nemo_gym.envs.base import BasicEpisode, Env
from nemo_gym.harnesses import MultiStep
from nemo_gym.records import Observation, Rewards, Task, Trajectory
from nemo_gym.verify.extract import final_integer, strip_thinking


class GuessEpisode(BasicEpisode):
    """The game state: the secret, the guesses so far, whether it is solved."""

    def __init__(self, secret: int, max_guesses: int) -> None:
        super().__init__(state={"secret": secret, "guesses": [], "solved": False})
        self.max_guesses = max_guesses

    async def step(self, action: str) -> Observation:
        guess = final_integer(strip_thinking(action)).value
        if guess is None:
            return Observation(action=action, observation="Reply with one integer.", reward=0.0)
        self.state["guesses"].append(guess)
        secret = self.state["secret"]
        solved = guess == secret
        self.state["solved"] = solved
        text = "Correct!" if solved else ("Higher." if guess < secret else "Lower.")
        out_of_guesses = len(self.state["guesses"]) >= self.max_guesses
        return Observation(
            action=action,
            observation=text,
            reward=float(solved),
            terminated=solved,
            truncated=not solved and out_of_guesses,
        )


async def verify_solved(task: Task, trajectory: Trajectory) -> Rewards:
    """1.0 when the secret was found; `efficiency` rewards finding it in fewer guesses."""
    state = trajectory.final_state
    guesses = len(state["guesses"])
    return Rewards(
        reward=float(state["solved"]),
        components={"efficiency": float(state["solved"]) / max(1, guesses)},
        metadata={"guesses": state["guesses"]},
    )


class GuessNumber(Env):
    """Find a secret integer in [1, high] within `max_guesses` guesses."""

    name = "guess_number"
    version = "1"
    domain = "games"
    verification = "multi-step: the secret found within the step budget"

    def __init__(self, *, seed: int = 0, size: int = 1000, high: int = 100, max_guesses: int = 10):
        super().__init__(verify_solved, harness=MultiStep(max_steps=max_guesses))
        self.seed, self.size, self.high, self.max_guesses = seed, size, high, max_guesses

    def tasks(self, split: str = "test", limit: int | None = None) -> Iterator[Task]:
        for index in range(self.size if limit is None else min(limit, self.size)):
            secret = random.Random(f"guess:{self.seed}:{split}:{index}").randint(1, self.high)
            yield Task(
                id=f"guess_number-{split}-{index}",
                prompt=(
                    f"I am thinking of an integer between 1 and {self.high}. Guess it: reply "
                    "with one integer each turn and I will say higher or lower."
                ),
                answer=secret,
            )

    async def open(self, task: Task) -> GuessEpisode:
        return GuessEpisode(int(task.answer), self.max_guesses)
