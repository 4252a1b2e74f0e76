"""A 3-turn tool rollout with a real model, and the checks on its token trace.

Shared by the live-policy tests (main venv) and the vLLM tests (their own venv). The
135M SmolLM2 does not write Hermes tool calls reliably, so the environment uses a tool
format of its own (the pluggable `ToolFormat`): every reply *is* a call of the `note`
tool with the reply as its text. The model then takes exactly `max_turns` turns, each
after a tool result, which is what the trace checks need.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import nemo_gym as gym
from nemo_gym.harnesses import ToolLoop
from nemo_gym.models.chat import HermesTools
from nemo_gym.records import Message, Rollout, Sampling, Task, ToolCall

TURNS = 3


class NoteEveryReply(HermesTools):
    """Every reply is one `note(text=<the reply>)` call; written back as the reply text."""

    name = "note-every-reply"

    def render_calls(self, content: str | None, calls: Sequence[ToolCall]) -> str:
        return "".join(json.loads(c.arguments)["text"] for c in calls)

    def parse(self, text: str) -> tuple[str | None, tuple[ToolCall, ...]]:
        call = ToolCall(
            id=f"note_{abs(hash(text)) % 10**8}", name="note", arguments=json.dumps({"text": text})
        )
        return None, (call,)


@gym.tool
async def note(text: str) -> str:
    """Write down a note; returns how many words it had."""
    return f"Noted ({len(text.split())} words). Now write one more sentence."


class Notes(gym.Env):
    name = "notes"

    async def open(self, task: Task) -> gym.BasicEpisode:
        return gym.BasicEpisode([note])


async def verify(task: Task, trajectory: gym.Trajectory) -> float:
    return float(len(trajectory.tool_results) == TURNS)


def env() -> Notes:
    return Notes(verify, tasks=[Task(prompt="Write one sentence about the sea.")])


async def three_turn_rollout(model: gym.Model, *, sampling: Sampling) -> Rollout:
    environment = env()
    task = next(iter(environment.tasks()))
    return await gym.rollout(
        environment, model, task, harness=ToolLoop(max_turns=TURNS), sampling=sampling, seed=7
    )


def check_trace(rollout: Rollout, seen: Sequence[Sequence[int]], decode) -> None:
    """`seen[k]`: the prompt ids the model consumed at turn k (from the engine itself).

    The trace must be those ids, turn after turn, with the mask on exactly the ids each
    turn generated and the behaviour logprobs there; the tool results sit between turns.
    """
    assert rollout.ok, rollout.failure
    calls = [c.response for c in rollout.trajectory.model_calls]
    assert len(calls) == TURNS and all(c is not None for c in calls)
    assert [c.metadata["history"] for c in calls] == ["fresh", "continued", "continued"]
    assert len(seen) == TURNS
    trace = rollout.trajectory.token_trace()
    expected_mask = [0] * len(trace.token_ids)
    expected_logprobs = [0.0] * len(trace.token_ids)
    for turn, (response, prompt) in enumerate(zip(calls, seen, strict=True)):
        assert response.prompt_token_ids == list(prompt), f"turn {turn}: reported != consumed"
        assert trace.token_ids[: len(prompt)] == list(prompt), f"turn {turn}: trace != consumed"
        completion = response.completion_token_ids
        end = len(prompt) + len(completion)
        assert trace.token_ids[len(prompt) : end] == completion
        expected_mask[len(prompt) : end] = [1] * len(completion)
        expected_logprobs[len(prompt) : end] = response.completion_logprobs
        if turn + 1 < TURNS:
            between = decode(seen[turn + 1][end:])
            assert "Noted (" in between and between.rstrip().endswith("assistant")
    assert trace.loss_mask == expected_mask
    assert trace.logprobs == expected_logprobs
    assert sum(trace.loss_mask) == sum(len(c.completion_token_ids) for c in calls)
    last = calls[-1]
    assert trace.token_ids == [*last.prompt_token_ids, *last.completion_token_ids]
    assert all(isinstance(m, Message) for m in rollout.messages)
