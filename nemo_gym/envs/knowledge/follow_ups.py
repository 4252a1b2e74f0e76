"""`follow_ups`: a conversation with scripted follow-up questions; the last answer is scored.

NeMo Gym's `example_multi_turn_gymnasium`: after each reply the next of the row's
`follow_ups` is asked; the reply to the last one scores 1 when it names the row's
`expected_answer`. NeMo Gym tests for a substring anywhere (case-insensitive); here it is
our `contains` rule (`contains_answer`): whole words ("120" does not name "20"), and in a
reply over 80 characters within its first 40, so a reply that lists every number up to
100 does not name the one asked for.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from nemo_gym.envs.base import BasicEpisode, Turns
from nemo_gym.envs.rows import DatasetEnv, Row
from nemo_gym.harnesses import MultiStep
from nemo_gym.records import Message, Observation, Rewards, Task, Trajectory
from nemo_gym.verify.extract import strip_thinking
from nemo_gym.verify.short_answer import contains_answer

__all__ = ["FollowUps"]


class FollowUpEpisode(BasicEpisode):
    """Asks the follow-ups in turn; the reply after the last one ends the episode."""

    def __init__(self, follow_ups: Sequence[str], answer: str) -> None:
        super().__init__(state={"turn": 0, "final": None, "solved": False})
        self.follow_ups, self.answer = list(follow_ups), answer

    async def step(self, action: str) -> Observation:
        turn = self.state["turn"]
        self.state["turn"] = turn + 1
        if turn < len(self.follow_ups):
            return Observation(action=action, observation=self.follow_ups[turn], reward=0.0)
        final = strip_thinking(action)
        solved = bool(self.answer) and contains_answer(final, [self.answer])
        self.state.update(final=final, solved=solved)
        return Observation(action=action, observation="", reward=float(solved), terminated=True)


async def verify_last_answer(task: Task, trajectory: Trajectory) -> Rewards:
    """1.0 when the reply after the last follow-up names the expected answer."""
    state = trajectory.final_state or {}
    return Rewards(
        reward=float(bool(state.get("solved"))),
        metadata={"extracted_answer": state.get("final")},
    )


class FollowUps(DatasetEnv):
    """A question, then scripted follow-ups; the last reply must name `expected_answer`.

    Rows are NeMo Gym's `example_multi_turn_gymnasium` layout: `responses_create_params`
    (`input`), `follow_ups` (the questions asked after each reply) and `expected_answer`.
    Ships 4 conversations written by us.
    """

    name = "follow_ups"
    version = "1"
    domain = "knowledge"
    verification = "multi-step: the last reply names the expected answer (the contains rule)"
    source = "4 conversations written by us; NeMo Gym's example_multi_turn_gymnasium layout"
    license = "Apache-2.0"
    sample = "knowledge/data/follow_ups.jsonl"

    def __init__(self, *, path: str | None = None, tasks: Sequence[Task] | None = None) -> None:
        super().__init__(verify_last_answer, path=path, tasks=tasks, harness=MultiStep())

    def task_from_row(self, row: Row, split: str) -> Task:
        from nemo_gym.interop.nemo_gym.wire import prompt_of

        messages, _ = prompt_of(row)
        return Task(
            id=self.task_id(row, split, "id"),
            messages=messages,
            answer=row.require("expected_answer", str),
            metadata={"follow_ups": follow_ups(row)},
        )

    def turns(self, task: Task) -> int:
        return len(task.metadata["follow_ups"]) + 1

    async def open(self, task: Task) -> FollowUpEpisode:
        return FollowUpEpisode(task.metadata["follow_ups"], str(task.answer))

    def oracle(self, task: Task) -> Turns:
        asked = [Message.assistant("Let me answer that.") for _ in task.metadata["follow_ups"]]
        return [*asked, Message.assistant(f"The answer is {task.answer}.")]

    def wrong(self, task: Task) -> Turns:
        return [Message.assistant("I am not sure.") for _ in range(self.turns(task))]


def follow_ups(row: Row) -> list[str]:
    """A row's `follow_ups`: a list of strings (none is a single-turn question)."""
    value: Any = row.get("follow_ups", [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise row.bad("follow_ups", "must be a list of strings")
    return list(value)
