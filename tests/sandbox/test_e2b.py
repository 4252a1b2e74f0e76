"""The `e2b` provider, through the real E2B SDK, against a loopback fake of E2B's API and
envd (`tests/sandbox/e2b_fake.py`), whose sandboxes are `local` ones."""

from __future__ import annotations

import asyncio
from typing import Any, ClassVar

import pytest

pytest.importorskip("e2b", reason="the e2b extra is not installed (pip install 'nemo-gym[e2b]')")

from nemo_gym.records import SandboxSpec
from nemo_gym.sandbox import get
from nemo_gym.sandbox.conformance import ConformanceSuite
from nemo_gym.sandbox.local import unavailable_reason
from nemo_gym.sandbox.remote.common import Labels
from nemo_gym.sandbox.remote.e2b import E2BProvider
from tests.sandbox.e2b_fake import E2BFake
from tests.sandbox.remote_service import RemoteProviderChecks

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


class TestE2BProvider(RemoteProviderChecks):
    provider = "e2b"
    provider_class = E2BProvider
    sdk_module = "e2b"
    install_hint = r"pip install 'nemo-gym\[e2b\]'"
    options: ClassVar[dict[str, Any]] = OPTIONS
    fake = FAKE
    throttle_create = "POST v2"

    def labels_held(self, sandbox_id: str) -> dict[str, str]:
        return dict(FAKE.sandboxes[sandbox_id].metadata)


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
