"""The `e2b` provider, through the real E2B SDK, against a loopback fake of E2B's API and
envd (`tests/sandbox/e2b_fake.py`), whose sandboxes are `local` ones."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from typing import Any, ClassVar

import pytest

pytest.importorskip("e2b", reason="the e2b extra is not installed (pip install 'nemo-gym[e2b]')")

from nemo_gym.errors import ConfigError, SandboxError
from nemo_gym.records import SandboxSpec
from nemo_gym.sandbox import get
from nemo_gym.sandbox.conformance import ConformanceSuite
from nemo_gym.sandbox.local import unavailable_reason
from nemo_gym.sandbox.remote.common import Labels, owner_token
from nemo_gym.sandbox.remote.e2b import E2BProvider
from tests.sandbox.e2b_fake import E2BFake

pytestmark = pytest.mark.skipif(
    unavailable_reason() is not None, reason=f"the fake needs `local`: {unavailable_reason()}"
)

FAKE = E2BFake()
URL = FAKE.start() if unavailable_reason() is None else "http://127.0.0.1:9"
LABELS = {"team": "rl", "user": "alice", "workload": "swe", "run": "r1"}
OPTIONS: dict[str, Any] = {
    "api_url": URL,
    "sandbox_url": URL,
    "api_key": "e2b_" + "0" * 40,
    "labels": LABELS,
    "retries": 3,
}


class TestConformance(ConformanceSuite):
    provider = "e2b"
    options: ClassVar[dict[str, Any]] = OPTIONS
    skip: ClassVar[dict[str, str]] = {
        "loopback_network": "an E2B sandbox cannot reach this host's 127.0.0.1 (ConfigError)",
        "owner_killed": "a remote sandbox outlives its owner until E2B's timeout (always "
        "set) or a reap; test_a_killed_runs_sandboxes_are_reaped_by_label covers it",
    }


class TestConformanceThroughPool(TestConformance):
    options: ClassVar[dict[str, Any]] = {**OPTIONS, "pool_size": 2}


def provider(**extra: Any) -> E2BProvider:
    made = get("e2b", **{**OPTIONS, **extra})
    assert isinstance(made, E2BProvider)
    return made


def test_registered_and_sends_labels_timeout_and_idempotency_key() -> None:
    async def main() -> None:
        p = provider(timeout_s=1200)
        async with p.start(SandboxSpec(image="my-template")) as box:
            held = FAKE.sandboxes[box.id]
            assert held.timeout_s == 1200
            assert held.metadata == Labels.resolve(LABELS).as_dict()

    FAKE.requests.clear()
    asyncio.run(main())
    assert ("POST", "/v2/sandboxes") in FAKE.requests
    assert ("DELETE", FAKE.requests[-1][1]) == FAKE.requests[-1]


def test_a_create_whose_reply_was_lost_is_retried_without_a_second_sandbox() -> None:
    async def main() -> str:
        p = provider(labels={**LABELS, "workload": "lost-reply"})
        p.retry = type(p.retry)(attempts=3, base_s=0.01)
        async with p.start() as box:
            assert (await box.exec("echo ok")).stdout == "ok\n"
            return box.id

    before = FAKE.created
    FAKE.fail_next["POST v2"] = 1  # throttled before acting
    FAKE.lose_create_replies = 1  # acted, then the reply was lost
    asyncio.run(main())
    assert FAKE.created == before + 1  # the idempotency key made the retry a replay
    assert not [
        s for s in FAKE.sandboxes.values() if s.metadata.get("nemo-gym.workload") == "lost-reply"
    ]


def test_loopback_network_is_refused_with_a_reason() -> None:
    async def main() -> None:
        with pytest.raises(ConfigError, match="loopback"):
            await provider().create(SandboxSpec(network="loopback", ports=(8000,)))

    asyncio.run(main())


def test_a_killed_runs_sandboxes_are_reaped_by_label() -> None:
    """A trainer process makes two sandboxes through the real SDK and is SIGKILLed; the
    next provider start of the same team, user and workload deletes them."""
    child = subprocess.run(
        [
            sys.executable,
            "-c",
            "import asyncio, json, os, sys\n"
            "from nemo_gym.sandbox import get\n"
            "p = get('e2b', **json.loads(sys.argv[1]))\n"
            "async def main():\n"
            "    a = await p.create(); b = await p.create()\n"
            "    print(a.id, b.id, flush=True)\n"
            "    os.kill(os.getpid(), 9)\n"
            "asyncio.run(main())\n",
            __import__("json").dumps({**OPTIONS, "labels": {**LABELS, "workload": "killed"}}),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert child.returncode == -9, child.stderr
    left = child.stdout.split()
    assert len(left) == 2 and all(i in FAKE.sandboxes for i in left)

    async def main() -> None:
        p = provider(labels={**LABELS, "workload": "killed"})
        async with p.start() as box:
            assert not any(i in FAKE.sandboxes for i in left)
            assert box.id in FAKE.sandboxes

    asyncio.run(main())


def test_a_live_trainers_sandboxes_are_not_reaped_on_start() -> None:
    async def main() -> None:
        mine = provider(labels={**LABELS, "workload": "live"})
        held = await mine.create()
        other = provider(labels={**LABELS, "workload": "live"})
        async with other.start():
            assert held.id in FAKE.sandboxes  # its owner (this process) is alive
        assert FAKE.sandboxes[held.id].metadata["nemo-gym.owner"] == owner_token()
        await held.aclose()

    asyncio.run(main())


def test_without_the_sdk_the_error_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "e2b", None)

    async def main() -> None:
        with pytest.raises(SandboxError, match=r"pip install 'nemo-gym\[e2b\]'"):
            await E2BProvider(api_key="x", labels=LABELS).create()

    asyncio.run(main())


def test_the_rollouts_clock_is_billed_the_vcpus_and_memory_e2b_reports() -> None:
    from nemo_gym.sandbox.clock import SandboxClock, reset_clock, use_clock
    from tests.sandbox.e2b_fake import CPU_COUNT, MEMORY_MB

    async def main() -> SandboxClock:
        clock = SandboxClock()
        token = use_clock(clock)
        try:
            async with provider().start() as box:
                await box.exec("true")
        finally:
            reset_clock(token)
        return clock

    FAKE.requests.clear()
    clock = asyncio.run(main())
    assert any(m == "GET" and p.startswith("/sandboxes/") for m, p in FAKE.requests)
    assert clock.held_s >= clock.start_s + clock.exec_s > 0
    times = clock.as_dict()
    assert times["billed_vcpu_s"] == pytest.approx(CPU_COUNT * clock.held_s, abs=1e-5)
    assert times["billed_memory_gib_s"] == pytest.approx(MEMORY_MB / 1024 * clock.held_s, abs=1e-5)
