"""The fault kit: every fault ends a rollout the way docs/runner.md says (or lets it go
on), deterministically by seed, stacked, rebuilt from a spec, and on the wire through the
real OpenAI adapter."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import nemo_gym as gym
from nemo_gym import registry
from nemo_gym.errors import ConfigError
from nemo_gym.models import ScriptedModel
from nemo_gym.testing import faults
from nemo_gym.testing.synthetic import Echo, EchoModel, MemoryProvider


def echo_env(plan: faults.FaultPlan, n: int = 6, **options: Any) -> faults.FaultyEnv:
    provider = plan.wrap_provider(MemoryProvider())
    return plan.wrap_env(Echo(n=n, tools=True, provider=provider, **options))


async def run(plan: faults.FaultPlan, **options: Any) -> list[gym.Rollout]:
    env, model = echo_env(plan, n=options.pop("n", 6)), plan.wrap_model(EchoModel())
    options.setdefault("timeout", 0.5)
    got = [r async for r in gym.rollouts(env, model, **options)]
    assert plan.ledger.episodes_opened == plan.ledger.episodes_closed
    assert plan.ledger.sandboxes_started == plan.ledger.sandboxes_closed
    return got


@pytest.mark.parametrize("name", sorted(faults.FAULTS))
async def test_every_fault_ends_the_rollout_as_documented(name: str) -> None:
    plan = faults.FaultPlan(seed=3, rates={name: 1.0}, slow_s=0.01)
    got = await run(plan)
    assert len(got) == 6 and plan.ledger.injected[name] > 0
    fault = faults.FAULTS[name]
    for rollout in got:
        taken = plan.ledger.take(rollout.task_id, rollout.repeat)
        if name == "sandbox.die":
            # Every first exec dies, and the first is in open (the episode's setup).
            expected = faults.Outcome("sandbox", "sandbox", "open")
            assert taken == (name, expected) and expected.matches(rollout.failure)
        elif fault.outcome is None:
            assert taken is None and rollout.ok, rollout.failure
        else:
            assert taken == (name, fault.outcome)
            assert fault.outcome.matches(rollout.failure), rollout.failure
            assert rollout.reward is None and rollout.rewards is None
    assert plan.ledger.pending == 0


async def test_a_fault_shown_to_the_model_is_seen_by_it() -> None:
    plan = faults.FaultPlan(rates={"tool.error": 1.0})
    [got] = await run(plan, n=1)
    assert got.ok and got.reward == 1.0
    assert "injected fault tool.error" in got.trajectory.tool_results[0].error
    plan = faults.FaultPlan(rates={"model.malformed_tool_call": 0.5}, seed=1)
    got = await run(plan, n=40)
    errors = [t.error for r in got for t in r.trajectory.tool_results if t.error]
    assert errors and all("invalid arguments" in e for e in errors)


async def one(task: gym.Task, trajectory: gym.Trajectory) -> float:
    return 1.0


async def test_a_sandbox_that_dies_while_verifying_is_a_verifier_failure() -> None:
    plan = faults.FaultPlan(rates={"sandbox.die": 1.0})
    provider = plan.wrap_provider(MemoryProvider())

    async def in_sandbox(task: gym.Task, trajectory: gym.Trajectory) -> float:
        async with provider.start() as sandbox:
            await sandbox.exec(["check", trajectory.final_text])
        return 1.0

    tasks = [gym.Task(id=f"t{i}", prompt=f"say {i}", answer=str(i)) for i in range(3)]
    env = plan.wrap_env(gym.Env(in_sandbox, name="verify-in-sandbox", tasks=tasks))
    got = [r async for r in gym.rollouts(env, plan.wrap_model(EchoModel()))]
    assert len(got) == 3
    for rollout in got:
        failure = rollout.failure
        assert (failure.kind, failure.code, failure.where) == ("verifier", "sandbox", "verify")
        assert plan.ledger.take(rollout.task_id, rollout.repeat) == (
            "sandbox.die",
            faults.Outcome("verifier", "sandbox", "verify"),
        )
    assert plan.ledger.sandboxes_started == plan.ledger.sandboxes_closed == 3


async def test_faults_are_the_same_whatever_the_concurrency_and_differ_by_seed() -> None:
    def outcome(rollout: gym.Rollout) -> tuple[str, int, str | None]:
        f = rollout.failure
        return rollout.task_id, rollout.repeat, f and f"{f.kind}/{f.code}@{f.where}"

    runs = []
    for seed, concurrency in ((5, 1), (5, 64), (6, 64)):
        plan = faults.FaultPlan(seed=seed, slow_s=0.001)
        # Only the hang faults may reach the timeout: an unfaulted rollout takes ~40 ms
        # at concurrency 64, and a loaded CI machine in a long suite (a gen-2 GC over
        # the whole session's heap) must not push one past it.
        got = await run(plan, n=150, repeats=2, concurrency=concurrency, timeout=2.0)
        runs.append((sorted(map(outcome, got)), plan.ledger.injected))
    assert runs[0] == runs[1]
    assert runs[0][0] != runs[2][0]
    assert sum(o[2] is not None for o in runs[0][0]) > 10  # the mix does fail things


async def test_stacked_models_take_back_a_fault_the_outer_retry_recovered() -> None:
    ledger = faults.Ledger()
    inner = faults.FaultyModel(
        EchoModel(), seed=1, rates={"model.server_error": 0.5}, ledger=ledger, max_attempts=1
    )
    outer = faults.FaultyModel(inner, ledger=ledger, max_attempts=6)
    env = Echo(n=100)
    got = [r async for r in gym.rollouts(env, outer)]
    assert ledger.injected["model.server_error"] > 40
    assert ledger.pending == sum(not r.ok for r in got)
    for rollout in got:
        taken = ledger.take(rollout.task_id, rollout.repeat)
        assert (taken is None) == rollout.ok
        if taken is not None:
            assert taken[1].matches(rollout.failure)
    assert sum(r.ok for r in got) > 90  # six outer attempts recover nearly every call


def test_the_wrappers_rebuild_from_their_spec() -> None:
    plan = faults.FaultPlan(seed=9, rates={"model.empty_content": 0.3, "env.open": 0.2})
    env = echo_env(plan, n=20)
    model = plan.wrap_model(EchoModel(latency_s=0.001))
    env_spec = registry.spec_of(env, "env")
    model_spec = registry.spec_of(model, "model")
    assert env_spec.name == "FaultyEnv" and env_spec.rebuildable and model_spec.rebuildable
    assert "ledger" not in env_spec.options and "ledger" not in model_spec.options
    # Specs made in this process: their import paths are ours to trust.
    env2 = registry.rebuild(env_spec, trust_code=True)
    model2 = registry.rebuild(model_spec, trust_code=True)
    assert registry.spec_of(env2, "env") == env_spec
    assert registry.spec_of(model2, "model") == model_spec
    assert env2.name == "echo" and env2.rates == env.rates

    async def outcomes(e: Any, m: Any) -> list[Any]:
        got = [r async for r in gym.rollouts(e, m, concurrency=4)]
        return sorted((r.task_id, r.failure and r.failure.code) for r in got)

    assert asyncio.run(outcomes(env, model)) == asyncio.run(outcomes(env2, model2))


def test_bad_rates_are_refused_naming_the_fault() -> None:
    with pytest.raises(ConfigError, match=r"unknown fault .model\.explode."):
        faults.FaultPlan(rates={"model.explode": 0.1})
    with pytest.raises(ConfigError, match=r"model faults. rates sum to 1\.200"):
        faults.FaultPlan(rates={"model.server_error": 0.6, "model.hang": 0.6})
    with pytest.raises(ConfigError, match="rate must be a number in"):
        faults.FaultPlan(rates={"verifier.nan": 2})
    with pytest.raises(ConfigError, match="does not apply here"):
        faults.FaultyModel(EchoModel(), rates={"verifier.nan": 0.1})


async def test_a_plain_model_and_env_can_be_wrapped_too() -> None:
    async def exact(task: gym.Task, trajectory: gym.Trajectory) -> float:
        return float(trajectory.final_text == task.answer)

    plan = faults.FaultPlan(rates={"verifier.nan": 1.0})
    env = plan.wrap_env(gym.Env(exact, name="plain", tasks=[gym.Task(prompt="p", answer="a")]))
    [got] = [r async for r in gym.rollouts(env, plan.wrap_model(ScriptedModel(["a"])))]
    assert (got.failure.kind, got.failure.code) == ("verifier", "non_finite_reward")
    assert got.env == "plain"


async def test_a_sandbox_that_dies_inside_a_tool_is_a_sandbox_failure() -> None:
    class SandboxTool(gym.Env):
        name = "sandbox-tool"
        harness = gym.harnesses.ToolLoop()

        def __init__(self, sandbox: Any) -> None:
            super().__init__(one, tasks=[gym.Task(prompt="say 1", answer="1")])
            self.sandbox = sandbox

        async def open(self, task: gym.Task) -> gym.BasicEpisode:
            @gym.tool
            async def run(cmd: str) -> str:
                """Run a command."""
                return (await self.sandbox.exec(cmd)).stdout

            return gym.BasicEpisode([run])

    from nemo_gym.testing.synthetic import MemorySandbox

    plan = faults.FaultPlan(rates={"sandbox.die": 1.0})
    env = SandboxTool(plan.wrap_sandbox(MemorySandbox()))
    [got] = [r async for r in gym.rollouts(env, EchoModel())]
    assert got.failure is not None and got.failure.kind == "sandbox", got.failure
    assert got.failure.where == "harness" and "sandbox died" in got.failure.message
    assert got.reward is None  # never scored on the broken episode


# --------------------------------------------------------------------------- the wire


@pytest.mark.parametrize(
    ("name", "code"),
    [
        ("server_error", "server_error"),
        ("rate_limited", "rate_limited"),
        ("timeout", "timeout"),
        ("connection_reset", "connection_error"),
        ("empty_content", "empty_response"),
        ("malformed_tool_call", None),
        ("truncated_body", "bad_response"),
    ],
)
async def test_wire_faults_through_the_real_sdk_match_the_kits_codes(
    fake_openai: Any, name: str, code: str | None
) -> None:
    from nemo_gym.models.base import RetryPolicy
    from nemo_gym.models.openai import OpenAIChat

    wire = faults.WireFaults(lambda body: "4", rates={name: 1.0}, retry_after_s=0.01)
    fake = fake_openai(wire)
    model = OpenAIChat(
        "m", client=fake.client, retry=RetryPolicy(max_attempts=2, initial_backoff_s=0.001)
    )
    env = gym.Env(one, name="wire", tasks=[gym.Task(prompt="say 4", answer="4")])
    [got] = [r async for r in gym.rollouts(env, model)]
    assert wire.injected[name] >= 1
    if code is None:
        assert got.ok  # SingleTurn: the malformed call is the reply; nothing failed
    else:
        assert (got.failure.kind, got.failure.code, got.failure.where) == ("model", code, "harness")
        assert faults.FAULTS[f"model.{name}"].outcome.matches(got.failure)
    if name in ("server_error", "rate_limited", "timeout", "connection_reset", "truncated_body"):
        assert got.trajectory.model_calls[-1].attempts == 2  # retried, as the kit's are


def test_the_reliability_page_lists_every_fault() -> None:
    from pathlib import Path

    text = (Path(__file__).parents[1] / "docs" / "reliability.md").read_text()
    for name in faults.FAULTS:
        site, _, fault = name.partition(".")
        section = text[text.index(f"{site} —") :]
        assert f"`{fault}`" in section[:900], f"docs/reliability.md does not list {name}"
