"""Records: task ids, coercion, token traces, the exported JSON Schema."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import nemo_gym as gym
from nemo_gym.errors import HarnessError
from nemo_gym.records import SCHEMA_VERSION, NonFiniteReward, rollout_json_schema

SCHEMA_FILE = Path(__file__).parents[1] / "nemo_gym" / "schema" / f"rollout.v{SCHEMA_VERSION}.json"


def test_task_id_is_derived_from_content_and_stable() -> None:
    a = gym.Task(prompt="2+2?", answer="4")
    assert a.id == gym.Task(prompt="2+2?", answer="4").id
    assert a.id != gym.Task(prompt="2+2?", answer="5").id
    assert a.messages == (gym.Message.user("2+2?"),)
    with pytest.raises(ValueError, match="prompt or messages"):
        gym.Task()


def test_rewards_coercion() -> None:
    assert gym.Rewards.of(True).reward == 1.0
    assert gym.Rewards.of(gym.Rewards(reward=0.3)).reward == 0.3
    with pytest.raises(NonFiniteReward, match="nan"):
        gym.Rewards.of(float("nan"))
    with pytest.raises(TypeError):
        gym.Rewards.of("1")  # type: ignore[arg-type]
    weighted = gym.Rewards.weighted(
        {"accuracy": 1.0, "format": 0.0}, {"accuracy": 0.9, "format": 0.1}
    )
    assert weighted.reward == pytest.approx(0.9)


def test_sampling_merge_keeps_explicit_values() -> None:
    merged = gym.Sampling(temperature=0.0, extra={"top_k": 5}).merged_over(
        gym.Sampling(temperature=1.0, max_tokens=9, extra={"top_k": 1, "min_p": 0.1})
    )
    assert (merged.temperature, merged.max_tokens) == (0.0, 9)
    assert merged.extra == {"top_k": 5, "min_p": 0.1}


def _call(prompt: list[int], completion: list[int], logprobs: list[float] | None) -> gym.ModelCall:
    return gym.ModelCall(
        request=gym.ModelRequest(messages=(gym.Message.user("x"),)),
        response=gym.ModelResponse(
            message=gym.Message.assistant("y"),
            prompt_token_ids=prompt,
            completion_token_ids=completion,
            completion_logprobs=logprobs,
        ),
    )


def test_token_trace_joins_turns_with_a_loss_mask() -> None:
    trajectory = gym.Trajectory(
        model_calls=[_call([1, 2], [3, 4], [-0.1, -0.2]), _call([1, 2, 3, 4, 5], [6], [-0.3])]
    )
    trace = trajectory.token_trace()
    assert trace.token_ids == [1, 2, 3, 4, 5, 6]
    assert trace.loss_mask == [0, 0, 1, 1, 0, 1]
    assert trace.logprobs == [0.0, 0.0, -0.1, -0.2, 0.0, -0.3]


def test_token_trace_refuses_retokenized_history() -> None:
    trajectory = gym.Trajectory(
        model_calls=[_call([1, 2], [3], [-0.1]), _call([1, 2, 9, 5], [6], [-0.3])]
    )
    with pytest.raises(HarnessError, match="re-tokenized"):
        trajectory.token_trace()


def test_token_trace_never_makes_up_a_logprob() -> None:
    # A call without logprobs: no behaviour logprobs at all, not 0.0 (probability 1).
    trajectory = gym.Trajectory(
        model_calls=[_call([1, 2], [3, 4], [-0.1, -0.2]), _call([1, 2, 3, 4, 5], [6], None)]
    )
    trace = trajectory.token_trace()
    assert trace.token_ids == [1, 2, 3, 4, 5, 6] and trace.logprobs is None
    # Logprobs that do not line up with the completion ids are refused.
    short = gym.Trajectory(model_calls=[_call([1, 2], [3, 4], [-0.1])])
    with pytest.raises(HarnessError, match="1 logprobs for 2 completion tokens"):
        short.token_trace()


def test_exported_schema_matches_the_record() -> None:
    assert json.loads(SCHEMA_FILE.read_text()) == rollout_json_schema(), (
        "the Rollout record changed: bump SCHEMA_VERSION if the change is incompatible, "
        f"then regenerate with `gym schema > {SCHEMA_FILE.relative_to(Path.cwd())}`"
    )


def test_tool_call_arguments_must_be_an_object() -> None:
    with pytest.raises(ValueError, match="JSON object"):
        gym.ToolCall(id="1", name="f", arguments="[1]").parsed_arguments()
    assert gym.ToolCall(id="1", name="f", arguments="").parsed_arguments() == {}


def test_trusted_builds_the_record_validation_would_and_refuses_what_it_cannot_check() -> None:
    from nemo_gym.records import Rewards, Task, Timings, ToolResult, trusted

    fast = trusted(ToolResult, call_id="c", name="f", arguments="{}", output="x")
    slow = ToolResult(call_id="c", name="f", arguments="{}", output="x")
    assert fast == slow and fast.model_dump_json() == slow.model_dump_json()
    assert fast.model_fields_set == slow.model_fields_set
    call = trusted(gym.ModelCall, request=gym.ModelRequest(messages=()))
    assert call == gym.ModelCall(request=gym.ModelRequest(messages=()))
    assert trusted(Timings, started_at=0.0, duration_s=1.0).model_s == 0.0
    # Each record gets its own mutable defaults.
    first = trusted(gym.ModelResponse, message=gym.Message.assistant("x"))
    second = trusted(gym.ModelResponse, message=gym.Message.assistant("x"))
    first.metadata["k"] = 1
    assert second.metadata == {}
    with pytest.raises(TypeError, match="validators"):
        trusted(Rewards, reward=float("nan"))  # its finiteness check would be skipped
    with pytest.raises(TypeError, match="validators"):
        trusted(Task, prompt="x")
    with pytest.raises(TypeError, match="missing \\['output'\\]"):
        trusted(ToolResult, call_id="c", name="f", arguments="{}")
    with pytest.raises(TypeError, match="unknown \\['outptu'\\]"):
        trusted(ToolResult, call_id="c", name="f", arguments="{}", output="x", outptu="y")


def test_a_model_that_returns_no_model_response_fails_the_rollout_as_a_model_failure() -> None:
    import asyncio

    class Broken:
        name = "broken"

        async def generate(self, request: gym.ModelRequest) -> object:
            return {"message": {"role": "assistant", "content": "4"}}

    async def verify(task: gym.Task, trajectory: gym.Trajectory) -> float:
        return 1.0

    env = gym.Env(verify, tasks=[gym.Task(prompt="2+2?", answer="4")])
    rollout = asyncio.run(gym.rollout(env, Broken(), next(iter(env.tasks()))))  # type: ignore[arg-type]
    assert not rollout.ok and rollout.failure is not None
    assert (rollout.failure.kind, rollout.failure.code) == ("model", "bad_response")
    assert "returned a dict" in rollout.failure.message
    assert "returned a dict" in (rollout.trajectory.model_calls[0].error or "")
