"""The shared machinery of remote providers (`nemo_gym.sandbox.remote.common`), on a
stand-in service whose sandboxes are real `local` (bubblewrap) sandboxes."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from typing import Any, ClassVar

import pytest

from nemo_gym.errors import ConfigError, SandboxError
from nemo_gym.records import SandboxSpec
from nemo_gym.sandbox.clock import SandboxClock, reset_clock, use_clock
from nemo_gym.sandbox.conformance import ConformanceSuite, leftover_processes
from nemo_gym.sandbox.local import unavailable_reason
from nemo_gym.sandbox.remote.common import (
    Labels,
    RateLimiter,
    RemoteProvider,
    label_key,
    label_value,
    owner_alive,
    owner_token,
)
from tests.sandbox.remote_service import (
    LocalService,
    LocalServiceBackend,
    StreamingServiceBackend,
)

pytestmark = pytest.mark.skipif(
    unavailable_reason() is not None, reason=f"needs the local provider: {unavailable_reason()}"
)

LABELS = {"team": "rl", "user": "alice", "workload": "swe-grpo", "run": "run-7"}


def service_provider(**options: Any) -> RemoteProvider:
    """A provider on a fresh stand-in service (for the conformance suite), one with a
    streaming exec, so `network="loopback"` is checked through the tunnel."""
    return RemoteProvider(StreamingServiceBackend(LocalService()), labels=LABELS, **options)


class TestConformance(ConformanceSuite):
    provider = "tests.sandbox.test_remote_common:service_provider"


class TestConformanceThroughPool(ConformanceSuite):
    """Every check again with a pool: sandboxes given back are reset and handed out again."""

    provider = "tests.sandbox.test_remote_common:service_provider"
    options: ClassVar[dict[str, Any]] = {"pool_size": 2}


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def make(
    service: LocalService | None = None, **options: Any
) -> tuple[RemoteProvider, LocalService]:
    service = service or LocalService()
    options.setdefault("labels", LABELS)
    return RemoteProvider(LocalServiceBackend(service), **options), service


def test_every_sandbox_is_labelled_and_given_the_service_timeout() -> None:
    async def main() -> None:
        provider, service = make(timeout_s=900)
        async with provider.start() as box:
            held = service.sandboxes[box.id]
            assert held.timeout_s == 900
            assert held.labels == {
                "nemo-gym.team": "rl",
                "nemo-gym.user": "alice",
                "nemo-gym.workload": "swe-grpo",
                "nemo-gym.run": "run-7",
                "nemo-gym.owner": owner_token(),
            }
        assert service.sandboxes == {}

    run(main())


def test_the_service_timeout_cannot_be_turned_off() -> None:
    for bad in (0, -1, None, True):
        with pytest.raises(ConfigError, match="timeout_s"):
            make(timeout_s=bad)


def test_labels_from_the_environment_and_sanitised(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NEMO_GYM_TEAM", "Speech & RL")
    monkeypatch.setenv("NEMO_GYM_WORKLOAD", "w" * 80)
    labels = Labels.resolve({"run": "run/1"})
    values = labels.as_dict(owner="host.1.2")
    assert values[label_key("team")] == "Speech---RL"
    assert values[label_key("run")] == "run-1"
    assert len(values[label_key("workload")]) == 63
    assert label_value("--") == "none"
    with pytest.raises(ConfigError, match="unknown keys"):
        Labels.resolve({"project": "x"})


def test_owner_alive_tells_a_dead_owner_from_a_live_one() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    token = owner_token(child.pid)
    assert owner_alive(token) is True
    child.kill()
    child.wait()
    assert owner_alive(token) is False
    assert owner_alive(owner_token()) is True
    assert owner_alive("elsewhere.123.456") is None  # another host: not ours to judge


def test_live_sandboxes_are_capped() -> None:
    async def main() -> None:
        provider, service = make(max_sandboxes=2)
        first = await provider.create()
        second = await provider.create()
        third = asyncio.create_task(provider.create())
        await asyncio.sleep(0.3)
        assert not third.done() and len(service.sandboxes) == 2
        await first.aclose()
        box = await asyncio.wait_for(third, 20)
        assert len(service.sandboxes) == 2
        await second.aclose()
        await box.aclose()

    run(main())


def test_rate_limit_spaces_calls() -> None:
    async def main() -> float:
        limiter = RateLimiter(20.0, burst=1)
        started = time.monotonic()
        for _ in range(5):
            await limiter.acquire()
        return time.monotonic() - started

    # 5 calls at 20/s with a burst of 1: the last waits for 4 refills of 50 ms each.
    assert run(main()) >= 0.19
    with pytest.raises(ConfigError):
        RateLimiter(0)


def test_a_retried_create_with_an_idempotency_key_makes_one_sandbox() -> None:
    async def main() -> None:
        service = LocalService(fail_next={"create": 2})
        provider, _ = make(service)
        provider.retry = type(provider.retry)(attempts=4, base_s=0.01)
        async with provider.start() as box:
            assert (await box.exec("echo ok")).stdout == "ok\n"
        assert service.creates == 1
        assert service.calls.count("create") == 3

    run(main())


def test_create_is_not_retried_without_idempotency_and_frees_its_slot() -> None:
    async def main() -> None:
        service = LocalService(fail_next={"create": 1})
        provider = RemoteProvider(
            LocalServiceBackend(service, idempotent_create=False), labels=LABELS, max_sandboxes=1
        )
        with pytest.raises(SandboxError, match="429"):
            await provider.create()
        assert service.calls.count("create") == 1
        # The sandbox the lost reply made is labelled: an explicit reap removes it.
        assert await provider.reap() == ["sb-1"]
        async with provider.start() as box:  # the failed create gave its slot back
            assert (await box.exec("true")).ok
        await LocalServiceBackend(service).close_all()

    run(main())


def test_exec_is_not_retried() -> None:
    async def main() -> None:
        provider, service = make()
        async with provider.start() as box:
            before = service.calls.count("exec")
            service.fail_next["exec"] = 1
            with pytest.raises(SandboxError, match="exec failed"):
                await box.exec("echo once >> ran")
            assert service.calls.count("exec") == before + 1

    run(main())


def test_a_killed_runs_sandboxes_are_reaped_by_label_on_the_next_start() -> None:
    # A trainer that made two sandboxes and was SIGKILLed before closing them.
    trainer = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    dead = owner_token(trainer.pid)
    trainer.kill()
    trainer.wait()

    async def main() -> None:
        service = LocalService()
        backend = LocalServiceBackend(service)
        for key in ("a", "b"):
            await backend.create(
                SandboxSpec(),
                labels=Labels.resolve(LABELS).as_dict(owner=dead),
                timeout_s=60,
                idempotency_key=key,
            )
        # Left alone: a live trainer's sandbox, and a dead one's of another workload.
        live = await backend.create(
            SandboxSpec(),
            labels=Labels.resolve(LABELS).as_dict(owner=owner_token()),
            timeout_s=60,
            idempotency_key="live",
        )
        other = await backend.create(
            SandboxSpec(),
            labels=Labels.resolve({**LABELS, "workload": "other"}).as_dict(owner=dead),
            timeout_s=60,
            idempotency_key="other",
        )
        provider, _ = make(service)
        async with provider.start() as box:
            assert set(service.sandboxes) == {live, other, box.id}
        assert set(service.sandboxes) == {live, other}
        await backend.close_all()

    run(main())


def test_warm_pool_reuses_a_sandbox_only_after_a_checked_reset() -> None:
    async def main() -> None:
        provider, service = make(pool_size=1)
        assert await provider.warm() == 1
        assert service.creates == 1
        marker = f"nemo-gym-pool-{os.getpid()}-{time.time_ns()}"
        box = await provider.create()
        first_id = box.id
        assert service.creates == 1  # the warm one
        await box.write_file("secret.txt", "answer=42")
        await box.exec("echo x > /tmp/left && mkdir -p sub && echo y > sub/z")
        daemon = (
            f"# {marker}\nimport os, time\n"
            "if os.fork() == 0:\n"
            "    os.setsid()\n"
            "    if os.fork() == 0:\n"
            "        for fd in (0, 1, 2):\n"
            "            os.close(fd)\n"
            "        time.sleep(300)\n"
            "    os._exit(0)\n"
            "os.wait()\n"
        )
        assert (await box.exec(["python3", "-c", daemon])).ok
        assert leftover_processes(marker), "the daemonised grandchild did not start"
        await box.aclose()
        assert first_id in service.sandboxes  # back in the pool, not deleted
        with pytest.raises(SandboxError, match="closed"):
            await box.exec("cat secret.txt")  # the old handle cannot reach the next holder
        again = await provider.create()
        assert again.id == first_id and service.creates == 1
        listing = await again.exec("ls -A /work /tmp")
        assert listing.stdout.split() == ["/tmp:", "/work:"], listing
        assert not leftover_processes(marker)
        with pytest.raises(OSError):
            await again.read_file("secret.txt")
        await again.aclose()
        await provider.aclose()
        assert service.sandboxes == {}

    run(main())


def test_a_sandbox_whose_reset_fails_is_deleted_not_pooled() -> None:
    async def main() -> None:
        provider, service = make(pool_size=1)
        box = await provider.create()
        service.fail_next["exec"] = 1  # the reset's exec
        await box.aclose()
        assert service.sandboxes == {}

    run(main())


def test_sandbox_time_is_charged_to_the_rollouts_clock() -> None:
    async def main() -> SandboxClock:
        clock = SandboxClock()
        token = use_clock(clock)
        try:
            provider, _ = make()
            async with provider.start() as box:
                await box.exec("true")
                await box.write_file("f", "x")
        finally:
            reset_clock(token)
        return clock

    clock = run(main())
    assert clock.sandboxes == 1 and clock.execs == 1
    assert clock.start_s > 0 and clock.exec_s > 0 and clock.teardown_s > 0


class RatedBackend(LocalServiceBackend):
    """A service that reports what its sandboxes are billed by (or fails to)."""

    def __init__(self, service: LocalService, *, fail: bool = False) -> None:
        super().__init__(service)
        self.fail = fail

    async def rates(self, sandbox_id: str) -> dict[str, float]:
        if self.fail:
            raise SandboxError(f"403: may not read sandbox {sandbox_id}")
        return {"vcpu": 2, "memory_gib": 0.5, "bogus": -1.0}


def _clocked(provider: RemoteProvider, holds: int) -> SandboxClock:
    async def main() -> SandboxClock:
        clock = SandboxClock()
        token = use_clock(clock)
        try:
            for _ in range(holds):
                async with provider.start() as box:
                    await box.exec("sleep 0.05")
        finally:
            reset_clock(token)
        return clock

    return run(main())


@pytest.mark.parametrize("pool_size", [0, 1])
def test_held_time_is_billed_at_the_rates_the_service_reports(pool_size: int) -> None:
    provider = RemoteProvider(RatedBackend(LocalService()), labels=LABELS, pool_size=pool_size)
    clock = _clocked(provider, holds=2)
    # The reset into the pool is teardown, not the rollout's execs.
    assert clock.sandboxes == 2 and clock.execs == 2
    # Held: from asking for each sandbox to the end of giving it back.
    assert clock.held_s == pytest.approx(clock.start_s + clock.exec_s + clock.teardown_s, rel=0.2)
    assert clock.held_s >= 0.1
    assert clock.billed == pytest.approx(
        {"vcpu_s": 2 * clock.held_s, "memory_gib_s": clock.held_s / 2}
    )
    run(provider.aclose())


def test_rates_the_service_will_not_give_leave_billing_out_not_zero(
    caplog: pytest.LogCaptureFixture,
) -> None:
    provider = RemoteProvider(RatedBackend(LocalService(), fail=True), labels=LABELS)
    clock = _clocked(provider, holds=1)
    assert clock.sandboxes == 1 and clock.held_s > 0
    assert clock.billed == {}
    assert not any(k.startswith("billed_") for k in clock.as_dict())
    assert "no billing rates" in caplog.text


def test_the_rollout_record_carries_its_sandbox_time() -> None:
    import nemo_gym as gym
    from nemo_gym.models import ScriptedModel

    provider, _ = make()

    async def verify(task: gym.Task, trajectory: gym.Trajectory) -> float:
        async with provider.start() as box:
            result = await box.exec(["echo", trajectory.final_text])
        return float(result.stdout.strip() == task.answer)

    class SandboxEnv(gym.Env):
        pass

    env = SandboxEnv(verify, name="sandboxed", tasks=[gym.Task(id="t", prompt="p", answer="4")])

    async def main() -> list[gym.Rollout]:
        return [r async for r in gym.rollouts(env, ScriptedModel(["4"]))]

    (rollout,) = run(main())
    assert rollout.reward == 1.0, rollout.failure
    times = rollout.metadata["sandbox"]
    assert times["sandboxes"] == 1 and times["execs"] == 1
    assert times["start_s"] > 0 and times["exec_s"] > 0 and times["teardown_s"] > 0
    assert times["held_s"] >= times["start_s"] + times["exec_s"]


def test_run_metrics_aggregate_sandbox_time_of_ok_and_failed_rollouts() -> None:
    import json

    import nemo_gym as gym
    from nemo_gym.metrics import compute_metrics
    from nemo_gym.models import ScriptedModel
    from nemo_gym.rundir.rows import rollout_json

    provider = RemoteProvider(RatedBackend(LocalService()), labels=LABELS)

    async def verify(task: gym.Task, trajectory: gym.Trajectory) -> float:
        async with provider.start() as box:
            result = await box.exec(["echo", trajectory.final_text])
        if task.id == "broken":
            raise RuntimeError("the verifier crashed after using its sandbox")
        return float(result.stdout.strip() == task.answer)

    class SandboxEnv(gym.Env):
        pass

    tasks = [gym.Task(id=i, prompt="p", answer="4") for i in ("a", "b", "broken")]
    env = SandboxEnv(verify, name="sandboxed", tasks=tasks)

    async def main() -> list[gym.Rollout]:
        return [r async for r in gym.rollouts(env, ScriptedModel(["4"] * 3))]

    rollouts = run(main())
    assert sorted(r.status for r in rollouts) == ["failed", "ok", "ok"]
    rows = [json.loads(rollout_json(r)) for r in rollouts]
    metrics = compute_metrics(rows)
    sandbox = metrics.sandbox
    assert sandbox["sandboxes"].n == 3 and sandbox["sandboxes"].mean == 1
    assert sandbox["execs"].mean == 1
    held = [r.metadata["sandbox"]["held_s"] for r in rollouts]
    assert sandbox["held_s"].mean * 3 == pytest.approx(sum(held))
    assert sandbox["billed_vcpu_s"].mean == pytest.approx(2 * sandbox["held_s"].mean, rel=1e-4)
    assert metrics.by_env["sandboxed"].sandbox == sandbox


@pytest.mark.parametrize(
    ("times", "match"),
    [
        ("slow", "'metadata.sandbox' must be an object"),
        ({"held_s": "1.5"}, "'metadata.sandbox.held_s' must be a number"),
        ({"held_s": -1.0}, "'metadata.sandbox.held_s' is -1.0"),
        ({"held_s": float("inf")}, "'metadata.sandbox.held_s' is inf"),
    ],
)
def test_a_malformed_sandbox_time_is_an_error_naming_row_and_field(times: Any, match: str) -> None:
    from nemo_gym.metrics import compute_metrics

    row = {
        "task_id": "t",
        "repeat": 0,
        "status": "ok",
        "rewards": {"reward": 1.0},
        "metadata": {"sandbox": times},
    }
    with pytest.raises(ConfigError, match=f"row 1: field {match}"):
        compute_metrics([row])


SHARED = LocalService()


def shared_provider(**options: Any) -> RemoteProvider:
    """A provider on the one stand-in service `SHARED` (for the CLI tests)."""
    options["labels"] = {**LABELS, **options.get("labels", {})}
    return RemoteProvider(LocalServiceBackend(SHARED), **options)


@pytest.fixture
def registered_remote() -> Any:
    from nemo_gym import registry

    registry.register("sandbox", "test-remote", shared_provider)
    try:
        yield SHARED
    finally:
        registry.unregister("sandbox", "test-remote")
        asyncio.run(LocalServiceBackend(SHARED).close_all())


def test_gym_sandbox_reap_deletes_a_workloads_sandboxes(
    registered_remote: LocalService, capsys: pytest.CaptureFixture[str]
) -> None:
    from nemo_gym.cli.main import main

    backend = LocalServiceBackend(registered_remote)

    async def left(workload: str, key: str) -> str:
        labels = Labels.resolve({**LABELS, "workload": workload}).as_dict(owner=owner_token())
        return await backend.create(SandboxSpec(), labels=labels, timeout_s=60, idempotency_key=key)

    async def setup() -> tuple[str, str]:
        return await left("swe-grpo", "a"), await left("other", "b")

    ours, other = asyncio.run(setup())
    # This process is alive, so a start would keep them; an explicit reap does not.
    assert main(["sandbox", "reap", "test-remote", "--dead-owners-only"]) == 0
    assert set(registered_remote.sandboxes) == {ours, other}
    assert main(["sandbox", "reap", "test-remote", "--workload", "swe-grpo"]) == 0
    assert set(registered_remote.sandboxes) == {other}
    assert f"{ours}\n" in capsys.readouterr().out
    assert main(["sandbox", "reap", "process"]) == 2
    assert "keeps no labelled sandboxes" in capsys.readouterr().err


def test_gym_sandbox_check_runs_the_conformance_suite(
    registered_remote: LocalService, capsys: pytest.CaptureFixture[str]
) -> None:
    from nemo_gym.cli.main import main

    code = main(
        ["sandbox", "check", "test-remote", "-o", "timeout_s=600", "--checks", "exec,files"]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    assert "passed   exec" in out and "passed   files" in out
    assert registered_remote.sandboxes == {}
    assert main(["sandbox", "check", "test-remote", "--checks", "nope"]) == 2


def test_a_sandbox_changed_outside_its_scratch_directories_is_not_reused() -> None:
    """A rollout that leaves a file where the reset does not wipe (here /root) could hand
    it to the next holder: that sandbox is deleted instead of pooled."""

    async def main() -> None:
        provider, service = make(pool_size=1)
        box = await provider.create()
        first = box.id
        planted = await box.exec("echo answer=42 > /root/planted && echo x > /dev/shm/y")
        assert planted.ok, planted
        await box.aclose()
        assert first not in service.sandboxes  # deleted, not pooled
        again = await provider.create()
        assert again.id != first
        assert (await again.exec("cat /root/planted")).exit_code != 0
        await again.aclose()
        # A clean give-back is still reused.
        assert again.id in service.sandboxes
        await provider.aclose()

    run(main())


def test_a_change_in_the_same_clock_tick_as_the_start_is_still_seen(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """File times come from the kernel's coarse clock, a tick behind `date`: a file planted
    microseconds after the start has a time *before* a `date` reading of the start. The
    planted write here runs in the start script itself, so it lands in the start's tick."""
    from nemo_gym.sandbox.remote import common

    line = 'echo "$now" $found\n'
    assert line in common.BASELINE_SCRIPT
    monkeypatch.setattr(
        common,
        "BASELINE_SCRIPT",
        common.BASELINE_SCRIPT.replace(line, line + "echo answer=42 > /root/planted\n"),
    )

    async def main() -> None:
        provider, service = make(pool_size=1)
        for _ in range(3):
            box = await provider.create()
            await box.aclose()
            assert box.id not in service.sandboxes  # deleted, not pooled
        await provider.aclose()

    run(main())


def test_a_failed_orphan_reap_is_logged_and_does_not_stop_the_run(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def main() -> None:
        service = LocalService(fail_next={"list": 10})
        provider, _ = make(service, retries=2)
        provider.retry = type(provider.retry)(attempts=2, base_s=0.01)
        async with provider.start() as box:
            assert (await box.exec("true")).ok
        assert service.calls.count("list") == 2  # tried once per start of the provider

    with caplog.at_level("WARNING"):
        run(main())
    assert "reaping orphans failed" in caplog.text
