"""Harnesses: the tool loop's resilience and parallelism, the multi-step loop."""

from __future__ import annotations

import asyncio
import json

import nemo_gym as gym
from nemo_gym.models import ScriptedModel


def calls(*pairs: tuple[str, str]) -> gym.Message:
    return gym.Message.assistant(
        tool_calls=tuple(
            gym.ToolCall(id=f"c{i}", name=n, arguments=a) for i, (n, a) in enumerate(pairs)
        )
    )


@gym.tool
async def add(a: int, b: int = 0) -> int:
    """Add two integers."""
    return a + b


def test_tool_decorator_builds_the_json_schema() -> None:
    assert add.spec.name == "add" and add.spec.description == "Add two integers."
    assert add.spec.parameters == {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer", "default": 0}},
        "required": ["a"],
    }


async def run(harness, replies, tools=(), task=None):
    class E(gym.Env):
        async def open(self, task):
            return gym.BasicEpisode(tools)

    async def anything(task, trajectory):
        return 1.0

    task = task or gym.Task(id="t", prompt="go")
    model = ScriptedModel(replies)
    r = await gym.rollout(E(anything, name="e"), model, task, harness=harness)
    return r, model


async def test_malformed_json_and_unknown_tools_go_back_to_the_model() -> None:
    r, model = await run(
        gym.harnesses.ToolLoop(),
        [calls(("add", "{not json"), ("nope", "{}"), ("add", '{"a": "x"}')), "ok"],
        [add],
    )
    assert r.ok
    errors = [t.error for t in r.trajectory.tool_results]
    assert errors[0].startswith("invalid arguments for 'add'")
    assert errors[1] == "unknown tool 'nope'; available: add"
    assert errors[2] is not None  # wrong argument type reaches the tool and fails there
    tool_messages = [m for m in model.requests[1].messages if m.role == "tool"]
    assert [m.tool_call_id for m in tool_messages] == ["c0", "c1", "c2"]


async def test_tools_are_offered_and_results_fed_back() -> None:
    r, model = await run(gym.harnesses.ToolLoop(), [calls(("add", '{"a": 2, "b": 3}')), "5"], [add])
    assert model.requests[0].tools == (add.spec,)
    assert r.trajectory.tool_results[0].output == "5"
    assert [m.role for m in r.messages] == ["user", "assistant", "tool", "assistant"]


async def test_parallel_tool_calls_run_concurrently() -> None:
    running = peak = 0

    @gym.tool
    async def wait() -> str:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0.02)
        running -= 1
        return "done"

    await run(
        gym.harnesses.ToolLoop(),
        [calls(("wait", "{}"), ("wait", "{}"), ("wait", "{}")), "ok"],
        [wait],
    )
    assert peak == 3
    peak = 0
    await run(
        gym.harnesses.ToolLoop(parallel_tool_calls=False),
        [calls(("wait", "{}"), ("wait", "{}")), "ok"],
        [wait],
    )
    assert peak == 1


async def test_max_turns_bounds_model_calls() -> None:
    r, model = await run(
        gym.harnesses.ToolLoop(max_turns=2), [calls(("add", '{"a":1}'))] * 5, [add]
    )
    assert r.ok and len(model.requests) == 2


async def test_tool_timeout_is_reported_to_the_model() -> None:
    @gym.tool
    async def hang() -> str:
        await asyncio.sleep(5)
        return "late"

    r, _ = await run(
        gym.harnesses.ToolLoop(tool_timeout=0.01), [calls(("hang", "{}")), "ok"], [hang]
    )
    assert "timed out" in r.trajectory.tool_results[0].error


async def test_non_string_tool_results_are_json() -> None:
    @gym.tool
    async def info() -> dict:
        return {"a": [1, 2]}

    r, _ = await run(gym.harnesses.ToolLoop(), [calls(("info", "")), "ok"], [info])
    assert json.loads(r.trajectory.tool_results[0].output) == {"a": [1, 2]}


async def test_system_prompt_is_prepended_unless_the_task_has_one() -> None:
    _, model = await run(gym.harnesses.SingleTurn(system_prompt="be brief"), ["x"])
    assert [m.role for m in model.requests[0].messages] == ["system", "user"]
    own = gym.Task(messages=(gym.Message.system("mine"), gym.Message.user("hi")))
    _, model = await run(gym.harnesses.SingleTurn(system_prompt="be brief"), ["x"], task=own)
    assert model.requests[0].messages[0].content == "mine"


async def test_multistep_needs_a_step_method() -> None:
    r, _ = await run(gym.harnesses.MultiStep(), ["x"])
    assert r.failure.kind == "harness" and "step(action)" in r.failure.message


async def test_guess_number_game_with_a_bisecting_model() -> None:
    env = gym.make("guess_number", size=5)

    def bisect(request: gym.ModelRequest) -> str:
        low, high = 1, 100
        for message in request.messages:
            if message.role == "assistant":
                guess = int(message.content)
            elif message.content == "Higher.":
                low = guess + 1
            elif message.content == "Lower.":
                high = guess - 1
        return str((low + high) // 2)

    results = [r async for r in gym.rollouts(env, ScriptedModel(bisect))]
    assert all(r.ok and r.reward == 1.0 for r in results)
    for r in results:
        assert r.trajectory.step_rewards[-1] == 1.0 and len(r.trajectory.observations) <= 7
        assert r.trajectory.final_state["secret"] == r.task.answer


async def test_guess_number_truncates_after_max_guesses() -> None:
    env = gym.make("guess_number", size=1, max_guesses=3)
    results = [r async for r in gym.rollouts(env, ScriptedModel(["0"], cycle=True))]
    (r,) = results
    assert r.ok and r.reward == 0.0 and r.trajectory.observations[-1].truncated


def test_first_request_is_the_validated_request_and_still_validates_what_is_not_a_record() -> None:
    import pytest
    from pydantic import ValidationError

    from nemo_gym.harnesses import first_request

    messages = [gym.Message(role="user", content="hi")]
    spec = gym.ToolSpec(name="f", description="d", parameters={"type": "object"})
    fast = first_request(messages, (spec,), gym.Sampling(seed=3))
    slow = gym.ModelRequest(messages=tuple(messages), tools=(spec,), sampling=gym.Sampling(seed=3))
    assert fast == slow and fast.model_dump_json() == slow.model_dump_json()
    # A plain dict among the opening messages is validated (and coerced) as before.
    coerced = first_request([{"role": "user", "content": "hi"}], (), gym.Sampling())  # type: ignore[list-item]
    assert coerced.messages == (gym.Message(role="user", content="hi"),)
    with pytest.raises(ValidationError):
        first_request([{"role": "robot"}], (), gym.Sampling())  # type: ignore[list-item]
