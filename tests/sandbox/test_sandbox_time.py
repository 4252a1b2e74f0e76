"""Sandbox time of the local providers (`local`, `process`, `apptainer`, `docker`): start,
exec and teardown charged to the rollout's `SandboxClock` as the remote providers do,
and a CodeVerifier's pooled sandbox counted once per rollout that leases it."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest

import nemo_gym as gym
from nemo_gym.models import ScriptedModel
from nemo_gym.records import SandboxSpec
from nemo_gym.sandbox import get
from nemo_gym.sandbox.clock import SandboxClock, reset_clock, use_clock
from nemo_gym.sandbox.local import unavailable_reason
from nemo_gym.verify.code import CodeVerifier
from tests.sandbox.test_apptainer import FAKE as FAKE_APPTAINER

DOCKER_HOST = os.environ.get("NEMO_GYM_DOCKER_HOST") or os.environ.get("DOCKER_HOST")
DOCKER_IMAGE = os.environ.get("NEMO_GYM_DOCKER_IMAGE", "nemo-gym-test:py")


def _no_engine() -> str | None:
    if not DOCKER_HOST:
        return "no docker engine: set NEMO_GYM_DOCKER_HOST (scripts/docker-engine.sh start)"
    path = DOCKER_HOST.removeprefix("unix://")
    if DOCKER_HOST.startswith(("unix://", "/")) and not os.path.exists(path):
        return f"no docker engine socket at {path}"
    return None


@pytest.fixture
def apptainer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """test_apptainer.py's stand-in `apptainer`."""
    binary = tmp_path / "bin" / "apptainer"
    binary.parent.mkdir()
    binary.write_text(FAKE_APPTAINER)
    binary.chmod(0o755)
    monkeypatch.setenv("APPTAINER_FAKE_LOG", str(tmp_path / "calls.jsonl"))
    return binary


def _provider(name: str, apptainer: Path) -> tuple[Any, SandboxSpec]:
    if name == "docker":
        from nemo_gym.sandbox.docker import DockerProvider

        return DockerProvider(host=DOCKER_HOST, image=DOCKER_IMAGE, pull=False), SandboxSpec()
    if name == "apptainer":
        from nemo_gym.sandbox.apptainer import ApptainerProvider

        # The real command line, the worker run on the host by the stand-in.
        return ApptainerProvider(binary=str(apptainer)), SandboxSpec(image="py.sif")
    return get(name), SandboxSpec()


PROVIDERS = [
    pytest.param(
        "local",
        marks=pytest.mark.skipif(unavailable_reason() is not None, reason="needs bwrap"),
    ),
    "process",
    "apptainer",
    pytest.param(
        "docker", marks=pytest.mark.skipif(_no_engine() is not None, reason=_no_engine() or "")
    ),
]


@pytest.mark.parametrize("name", PROVIDERS)
def test_start_exec_and_teardown_are_charged_to_the_rollouts_clock(
    name: str, apptainer: Path
) -> None:
    provider, spec = _provider(name, apptainer)

    async def main() -> tuple[SandboxClock, SandboxClock]:
        clock, other = SandboxClock(), SandboxClock()
        token = use_clock(clock)
        try:
            async with provider.start(spec) as box:
                await box.exec("sleep 0.2")
                await box.write_file("f.txt", "x")
                assert await box.read_file("f.txt") == b"x"
                # a task of another rollout, concurrently: its clock only
                inner = use_clock(other)
                try:
                    await asyncio.ensure_future(box.exec("true"))
                finally:
                    reset_clock(inner)
            await box.aclose()  # idempotent: charges nothing twice
        finally:
            reset_clock(token)
        return clock, other

    clock, other = asyncio.run(main())
    assert clock.sandboxes == 1 and clock.execs == 1, clock
    assert clock.start_s > 0 and clock.teardown_s > 0
    assert clock.exec_s >= 0.2
    assert clock.held_s >= clock.start_s + clock.exec_s
    assert clock.held_s == pytest.approx(clock.start_s + clock.exec_s + clock.teardown_s, abs=0.5)
    assert other.execs == 1 and other.sandboxes == 0 and other.exec_s > 0


def test_no_clock_no_charge() -> None:
    async def main() -> None:
        async with get("process").start() as box:
            await box.exec("true")

    asyncio.run(main())  # nothing to charge; nothing fails


def test_every_rollout_of_a_pooled_code_verifier_records_its_sandbox() -> None:
    """The pool opens its sandbox inside the first rollout; each rollout that leases it
    records one sandbox, its execs and a held time, and none carries another's."""
    verifier = CodeVerifier(provider="process", pool_size=1, timeout_per_test=10)
    tasks = [
        gym.Task(
            id=f"t{i}",
            prompt="Print the sum of two integers read from stdin.",
            metadata={"tests": [{"input": "1 2\n", "output": "3\n"}]},
        )
        for i in range(3)
    ]
    answer = "```python\na, b = map(int, input().split())\nprint(a + b)\n```"
    env = gym.Env(verifier.verify, name="sums", tasks=tasks)

    async def main() -> list[gym.Rollout]:
        try:
            return [r async for r in gym.rollouts(env, ScriptedModel([answer] * 3), concurrency=1)]
        finally:
            await verifier.aclose()

    rollouts = asyncio.run(main())
    assert [r.reward for r in rollouts] == [1.0] * 3, [r.failure for r in rollouts]
    times = [r.metadata["sandbox"] for r in rollouts]
    assert [t["sandboxes"] for t in times] == [1, 1, 1]
    assert all(t["execs"] >= 1 and t["exec_s"] > 0 and t["held_s"] > 0 for t in times)
    # The first waited for the pool's sandbox to start; the others took it warm.
    assert times[0]["start_s"] > max(t["start_s"] for t in times[1:])
