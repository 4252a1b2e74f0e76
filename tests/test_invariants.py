"""The invariant suite: it holds for the core under every fault at once (20,000
rollouts at concurrency 2,048), and it catches a core that breaks one."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import nemo_gym as gym
from nemo_gym.testing import faults
from nemo_gym.testing.invariants import InvariantSuite, check_invariants, synthetic_env
from nemo_gym.testing.synthetic import Echo, EchoModel


class TestTheCoreUnderEveryFault(InvariantSuite):
    """The CI size: 20,000 rollouts at concurrency 2,048, every fault in `MIXED`.
    `NEMO_GYM_INVARIANT_ROLLOUTS=1000000` makes it a soak."""

    rollouts = 20_000
    concurrency = 2048

    def make_env(self, plan: faults.FaultPlan) -> gym.Environment:
        return synthetic_env(plan, n=self.rollouts)


def fast(**options: Any) -> dict[str, Any]:
    """A small, quick run for the tests that the suite can fail."""
    base = {
        "rollouts": 400,
        "concurrency": 64,
        # Long enough that a rollout with no fault never meets it on a loaded 2-core
        # machine (1.0 s did, under GC pauses at concurrency 64).
        "timeout": 3.0,
        "slow_consumer_rollouts": 100,
    }
    return base | options


def small_env(plan: faults.FaultPlan) -> gym.Environment:
    return synthetic_env(plan, n=400)


async def test_a_small_run_holds_and_reports_its_figures() -> None:
    report = await check_invariants(small_env, EchoModel, **fast())
    assert report.ok, report
    assert report.rollouts == 400 and report.tasks == 400 and report.repeats == 1
    assert sum(report.injected.values()) > 20 and report.outcomes["ok"] < 400
    assert "every invariant held" in str(report)


async def test_repeats_cover_an_environment_with_few_tasks() -> None:
    report = await check_invariants(lambda plan: synthetic_env(plan, n=7), EchoModel, **fast())
    assert report.ok, report
    assert (report.tasks, report.repeats, report.rollouts) == (7, 58, 406)


async def test_it_catches_a_row_written_twice(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib

    collect_module = importlib.import_module("nemo_gym.collect")  # not the function
    real = collect_module.write_line
    written: list[str] = []

    def twice(handle: Any, text: str) -> None:
        real(handle, text)
        main_run = handle.name.endswith("/run/rollouts.jsonl")  # not the warm-up's
        if main_run and not written and '"status":"ok"' in text:
            written.append(text)
            real(handle, text)

    monkeypatch.setattr(collect_module, "write_line", twice)
    report = await check_invariants(small_env, EchoModel, **fast())
    assert "each (task, repeat) exactly once in the file" in report.violations
    assert (
        "1 duplicated"
        in report.violations["each (task, repeat) exactly once in the file"].examples[0]
    )


async def test_it_catches_a_misclassified_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    from nemo_gym import runner

    real = runner.failure_of

    def wrong(exc: BaseException, where: str) -> gym.Failure:
        failure = real(exc, where)
        if where == "verify":
            return gym.records.replace(failure, kind="harness")
        return failure

    monkeypatch.setattr(runner, "failure_of", wrong)
    report = await check_invariants(small_env, EchoModel, **fast())
    found = report.violations["failures are the ones the faults must produce"]
    assert found.count > 5 and "at verify, got harness/" in found.examples[0]


async def test_it_catches_a_leaked_task_and_unbounded_memory() -> None:
    import mmap

    kept: list[mmap.mmap] = []
    leaked: list[asyncio.Task[None]] = []

    class Leaky(Echo):
        async def open(self, task: gym.Task) -> gym.BasicEpisode:
            # Every rollout keeps 16 KB forever, in pages of its own (a heap allocation
            # could reuse memory freed by earlier tests, and RSS would not move).
            page = mmap.mmap(-1, 16384)
            page.write(b"x" * 16384)
            kept.append(page)
            if task.id == "e3999" and not leaked:  # not in the warm-up run
                leaked.append(asyncio.create_task(asyncio.sleep(60)))
            return await super().open(task)

    try:
        report = await check_invariants(
            lambda: Leaky(n=4000), EchoModel, **fast(rollouts=4000, concurrency=256)
        )
    finally:
        for task in leaked:
            task.cancel()
        for page in kept:
            page.close()
    assert "no asyncio task left behind" in report.violations
    assert "RSS flat" in report.violations, report


async def test_it_catches_a_runner_that_runs_ahead_of_a_slow_consumer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from nemo_gym import runner

    real = runner.rollouts

    def greedy(*args: Any, concurrency: int = 32, **options: Any) -> Any:
        return real(*args, concurrency=concurrency * 4, **options)

    monkeypatch.setattr(runner, "rollouts", greedy)
    report = await check_invariants(small_env, EchoModel, **fast(slow_consumer_rollouts=400))
    assert "a slow consumer does not make the runner buffer" in report.violations
