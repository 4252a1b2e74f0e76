"""The runner: streaming order, groups, seeds, concurrency, cancellation, failure kinds."""

from __future__ import annotations

import asyncio

import pytest

import nemo_gym as gym
from nemo_gym.errors import ModelError, ToolError, VerifierError
from nemo_gym.models import ScriptedModel


async def exact(task: gym.Task, trajectory: gym.Trajectory) -> float:
    return float(trajectory.final_text.strip() == task.answer)


def env_of(n: int = 3, verifier=exact, **kw) -> gym.Env:
    tasks = [gym.Task(id=f"t{i}", prompt=f"say {i}", answer=str(i)) for i in range(n)]
    return gym.Env(verifier, name="echo", tasks=tasks, **kw)


def echo(request: gym.ModelRequest) -> str:
    return request.messages[-1].content.removeprefix("say ")


async def collect_all(stream) -> list[gym.Rollout]:
    return [r async for r in stream]


async def test_rollouts_yield_in_completion_order() -> None:
    delays = {"t0": 0.08, "t1": 0.0, "t2": 0.04}

    async def slow_echo(request: gym.ModelRequest) -> str:
        text = echo(request)
        await asyncio.sleep(delays[f"t{text}"])
        return text

    got = await collect_all(gym.rollouts(env_of(), ScriptedModel(slow_echo), concurrency=3))
    assert [r.task_id for r in got] == ["t1", "t2", "t0"]
    assert all(r.ok and r.reward == 1.0 for r in got)


async def test_concurrency_is_bounded_and_tasks_pulled_lazily() -> None:
    in_flight = peak = 0
    pulled = 0

    async def counting(request: gym.ModelRequest) -> str:
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        await asyncio.sleep(0.001)
        in_flight -= 1
        return "x"

    def tasks():
        nonlocal pulled
        for i in range(200):
            pulled += 1
            yield gym.Task(id=f"t{i}", prompt="p", answer="x")

    stream = gym.rollouts(env_of(), ScriptedModel(counting), tasks=tasks(), concurrency=4)
    first = await anext(stream)
    assert first.ok
    assert pulled <= 6  # never more than concurrency (+1 look-ahead) before the first yield
    rest = await collect_all(stream)
    assert len(rest) == 199 and peak == 4


async def test_repeats_get_distinct_derived_seeds_passed_to_the_model() -> None:
    model = ScriptedModel(echo)
    got = await collect_all(gym.rollouts(env_of(2), model, repeats=3, seed=7))
    seeds = {(r.task_id, r.repeat): r.seed for r in got}
    assert len(set(seeds.values())) == 6
    assert seeds[("t0", 1)] == gym.derive_seed(7, "t0", 1)
    assert sorted(req.sampling.seed for req in model.requests) == sorted(seeds.values())
    again = await collect_all(gym.rollouts(env_of(2), ScriptedModel(echo), repeats=3, seed=7))
    assert {(r.task_id, r.repeat): r.seed for r in again} == seeds


async def test_run_sampling_overrides_the_harness_and_the_seed_overrides_both() -> None:
    model = ScriptedModel(echo)
    harness = gym.harnesses.SingleTurn(sampling=gym.Sampling(temperature=0.2, top_p=0.9, seed=1))
    sampling = gym.Sampling(temperature=1.0, max_tokens=5, seed=2)
    got = await collect_all(gym.rollouts(env_of(1), model, harness=harness, sampling=sampling))
    sent = model.requests[0].sampling
    assert (sent.temperature, sent.top_p, sent.max_tokens) == (1.0, 0.9, 5)
    assert sent.seed == got[0].seed == gym.derive_seed(0, "t0", 0)


async def test_groups_yield_all_repeats_of_a_task_together() -> None:
    async def jitter(request: gym.ModelRequest) -> str:
        await asyncio.sleep((request.sampling.seed % 7) / 1000)
        return echo(request)

    got = await collect_all(gym.groups(env_of(4), ScriptedModel(jitter), repeats=3, concurrency=5))
    assert sorted(g[0].task_id for g in got) == ["t0", "t1", "t2", "t3"]
    for group in got:
        assert [r.repeat for r in group] == [0, 1, 2]
        assert len({r.task_id for r in group}) == 1


async def test_model_calls_are_recorded_with_latency() -> None:
    got = await collect_all(gym.rollouts(env_of(1), ScriptedModel(echo)))
    (call,) = got[0].trajectory.model_calls
    assert call.response is not None and call.response.message.content == "0"
    assert call.request.messages[-1].content == "say 0"
    assert call.latency_s >= 0 and got[0].timings.duration_s >= call.latency_s


async def test_model_error_is_a_failed_rollout_of_kind_model() -> None:
    got = await collect_all(gym.rollouts(env_of(1), ScriptedModel([ModelError("boom")])))
    (r,) = got
    assert r.status == "failed" and r.reward is None and r.rewards is None
    assert r.failure.kind == "model" and r.failure.where == "harness"
    assert "boom" in r.failure.message
    assert r.trajectory.model_calls[0].error.endswith("boom")


async def test_any_exception_from_a_model_is_a_model_failure() -> None:
    def broken(request: gym.ModelRequest) -> str:
        raise RuntimeError("socket closed")

    (r,) = await collect_all(gym.rollouts(env_of(1), ScriptedModel(broken)))
    assert r.failure.kind == "model" and r.failure.error_type == "RuntimeError"


async def test_verifier_exception_is_a_verifier_failure_not_a_zero() -> None:
    async def crash(task, trajectory):
        raise ZeroDivisionError("bad")

    (r,) = await collect_all(gym.rollouts(env_of(1, crash), ScriptedModel(echo)))
    assert r.status == "failed" and r.reward is None
    assert r.failure.kind == "verifier" and r.failure.where == "verify"
    assert r.failure.error_type == "ZeroDivisionError"
    assert r.trajectory.final_text == "0"  # the trajectory is kept for reverify


async def test_verifier_error_code_is_kept() -> None:
    async def judge(task, trajectory):
        raise VerifierError("judge said nothing useful", code="judge_failed")

    (r,) = await collect_all(gym.rollouts(env_of(1, judge), ScriptedModel(echo)))
    assert (r.failure.kind, r.failure.code) == ("verifier", "judge_failed")


async def test_verifier_returning_garbage_is_a_verifier_failure() -> None:
    async def nan(task, trajectory):
        return float("nan")

    (r,) = await collect_all(gym.rollouts(env_of(1, nan), ScriptedModel(echo)))
    assert r.failure.kind == "verifier"


class ToolEnv(gym.Env):
    def __init__(self, tool, **kw):
        super().__init__(
            exact,
            name="tools",
            tasks=[gym.Task(id="t", prompt="go", answer="done")],
            harness=gym.harnesses.ToolLoop(max_turns=3, **kw),
        )
        self.tool = tool

    async def open(self, task):
        return gym.BasicEpisode([self.tool])


def call(name: str = "probe", arguments: str = "{}") -> gym.Message:
    return gym.Message.assistant(
        tool_calls=(gym.ToolCall(id="c1", name=name, arguments=arguments),)
    )


async def test_fatal_tool_error_is_a_tool_failure() -> None:
    @gym.tool
    async def probe() -> str:
        raise ToolError("sandbox died")

    (r,) = await collect_all(gym.rollouts(ToolEnv(probe), ScriptedModel([call(), "done"])))
    assert (r.failure.kind, r.failure.where) == ("tool", "harness")


async def test_tool_exception_goes_back_to_the_model_by_default() -> None:
    @gym.tool
    async def probe() -> str:
        raise ValueError("no such row")

    model = ScriptedModel([call(), "done"])
    (r,) = await collect_all(gym.rollouts(ToolEnv(probe), model))
    assert r.ok and r.reward == 1.0
    assert r.trajectory.tool_results[0].error == "ValueError: no such row"
    assert model.requests[1].messages[-1].content == "Error: ValueError: no such row"


async def test_tool_errors_fail_mode_ends_the_rollout() -> None:
    @gym.tool
    async def probe() -> str:
        raise ValueError("no such row")

    env = ToolEnv(probe, tool_errors="fail")
    (r,) = await collect_all(gym.rollouts(env, ScriptedModel([call(), "done"])))
    assert r.failure.kind == "tool" and "no such row" in r.failure.message


class Tracked(gym.Env):
    """Records which episodes were opened and which were closed."""

    def __init__(self, tasks: list[gym.Task]) -> None:
        super().__init__(exact, name="tracked", tasks=tasks)
        self.opened: list[str] = []
        self.closed: list[str] = []

    async def open(self, task: gym.Task) -> gym.BasicEpisode:
        self.opened.append(task.id)
        episode = gym.BasicEpisode()

        async def mark() -> None:
            self.closed.append(task.id)

        episode.on_close(mark)
        return episode


async def test_timeout_is_a_timeout_failure_and_closes_the_episode() -> None:
    async def never(request):
        await asyncio.sleep(10)
        return "x"

    env = Tracked([gym.Task(id="a", prompt="p", answer="x")])
    (r,) = await collect_all(gym.rollouts(env, ScriptedModel(never), timeout=0.05))
    assert (r.failure.kind, r.failure.where) == ("timeout", "harness")
    assert env.closed == ["a"]


async def test_a_verifier_past_the_deadline_is_a_verifier_timeout() -> None:
    async def slow(task, trajectory):
        await asyncio.sleep(10)
        return 1.0

    (r,) = await collect_all(gym.rollouts(env_of(1, slow), ScriptedModel(echo), timeout=0.1))
    assert (r.failure.kind, r.failure.code, r.failure.where) == ("verifier", "timeout", "verify")
    assert r.trajectory.final_text == "0"


async def test_a_verifier_raising_timeout_error_is_not_a_rollout_timeout() -> None:
    async def judge(task, trajectory):
        raise TimeoutError("judge endpoint timed out")

    (r,) = await collect_all(gym.rollouts(env_of(1, judge), ScriptedModel(echo), timeout=30))
    assert (r.failure.kind, r.failure.code) == ("verifier", "verifier")
    assert r.failure.message == "judge endpoint timed out"


async def test_tool_raising_timeout_error_is_not_a_rollout_timeout() -> None:
    async def crash(task, trajectory):
        return 1.0

    class Env(gym.Env):
        async def open(self, task):
            raise TimeoutError("database did not answer")

    env = Env(crash, name="e", tasks=[gym.Task(id="a", prompt="p")])
    (r,) = await collect_all(gym.rollouts(env, ScriptedModel(["x"]), timeout=5))
    assert (r.failure.kind, r.failure.where) == ("environment", "open")


async def test_closing_the_stream_cancels_in_flight_rollouts_and_closes_episodes() -> None:
    async def slow(request):
        await asyncio.sleep(0 if request.messages[-1].content == "say 0" else 30)
        return "0"

    env = Tracked([gym.Task(id=f"t{i}", prompt=f"say {i}", answer="0") for i in range(10)])
    stream = gym.rollouts(env, ScriptedModel(slow), concurrency=4)
    first = await anext(stream)
    assert first.task_id == "t0"
    await stream.aclose()
    assert len(env.opened) == 4 and sorted(env.closed) == sorted(env.opened)


async def test_cancelling_the_consumer_task_closes_episodes() -> None:
    async def forever(request):
        await asyncio.sleep(30)
        return "x"

    env = Tracked([gym.Task(id=f"t{i}", prompt="p") for i in range(3)])

    async def consume():
        async for _ in gym.rollouts(env, ScriptedModel(forever), concurrency=3):
            pass

    job = asyncio.create_task(consume())
    await asyncio.sleep(0.05)
    job.cancel()
    with pytest.raises(asyncio.CancelledError):
        await job
    assert sorted(env.closed) == ["t0", "t1", "t2"]


async def test_a_plain_function_verifier_and_a_class_verifier_both_work() -> None:
    class Length:
        async def verify(self, task, trajectory):
            return gym.Rewards(reward=0.5, components={"len": float(len(trajectory.final_text))})

    (r,) = await collect_all(gym.rollouts(env_of(1, Length()), ScriptedModel(echo)))
    assert r.reward == 0.5 and r.rewards.components == {"len": 1.0}


def test_a_non_async_verifier_is_rejected_at_construction() -> None:
    with pytest.raises(TypeError, match="async function"):
        gym.Env(lambda task, trajectory: 1.0, name="x", tasks=[])


async def test_rollout_for_one_task_directly() -> None:
    r = await gym.rollout(
        env_of(1), ScriptedModel(["0"]), gym.Task(id="t0", prompt="say 0", answer="0")
    )
    assert r.ok and r.reward == 1.0 and r.repeat == 0


class _CloseFails(gym.Env):
    """An env whose episodes raise when closed."""

    name = "close-fails"

    async def open(self, task: gym.Task) -> gym.BasicEpisode:
        episode = gym.BasicEpisode()

        async def broken() -> None:
            raise RuntimeError("close failed")

        episode.on_close(broken)
        return episode


async def test_a_close_failure_never_replaces_the_failure_that_ended_the_harness() -> None:
    tasks = [gym.Task(id="t0", prompt="say 0", answer="0")]
    model = ScriptedModel([ModelError("down", code="server_error")])
    [got] = await collect_all(gym.rollouts(_CloseFails(exact, tasks=tasks), model))
    assert (got.failure.kind, got.failure.code, got.failure.where) == (
        "model",
        "server_error",
        "harness",
    )
    assert "closing the episode also failed: RuntimeError: close failed" in got.failure.message

    # Past the deadline: still a timeout, not the close error.
    async def slow(request: gym.ModelRequest) -> str:
        await asyncio.sleep(5)
        return "0"

    [got] = await collect_all(
        gym.rollouts(_CloseFails(exact, tasks=tasks), ScriptedModel(slow), timeout=0.05)
    )
    assert (got.failure.kind, got.failure.code) == ("timeout", "timeout")

    # The harness succeeded: the close failure is the rollout's, at `close`.
    [got] = await collect_all(gym.rollouts(_CloseFails(exact, tasks=tasks), ScriptedModel(["0"])))
    assert (got.failure.kind, got.failure.where) == ("environment", "close")


async def test_a_close_failure_never_swallows_a_cancellation() -> None:
    task = gym.Task(id="t0", prompt="say 0", answer="0")

    async def slow(request: gym.ModelRequest) -> str:
        await asyncio.sleep(30)
        return "0"

    job = asyncio.create_task(gym.rollout(_CloseFails(exact), ScriptedModel(slow), task))
    await asyncio.sleep(0.05)
    job.cancel()
    with pytest.raises(asyncio.CancelledError):
        await job  # not a Rollout recording the close error


async def test_current_rollout_names_the_rollout_in_every_phase() -> None:
    from nemo_gym.runner import RolloutKey, current_rollout

    seen: dict[str, set[RolloutKey | None]] = {}

    def saw(phase: str) -> None:
        seen.setdefault(phase, set()).add(current_rollout())

    class Watching(gym.Env):
        name = "watching"

        async def open(self, task: gym.Task) -> gym.BasicEpisode:
            saw("open")
            episode = gym.BasicEpisode()

            async def close() -> None:
                saw("close")

            episode.on_close(close)
            return episode

    async def verify(task: gym.Task, trajectory: gym.Trajectory) -> float:
        saw("verify")
        return 1.0

    def reply(request: gym.ModelRequest) -> str:
        saw("model")
        return "x"

    tasks = [gym.Task(id="t0", prompt="p", answer="x")]
    got = [
        r
        async for r in gym.rollouts(
            Watching(verify, tasks=tasks), ScriptedModel(reply), repeats=2, timeout=5
        )
    ]
    keys = {RolloutKey(r.task_id, r.repeat, r.seed) for r in got}
    assert all(found == keys for found in seen.values()) and len(seen) == 4
    assert current_rollout() is None
