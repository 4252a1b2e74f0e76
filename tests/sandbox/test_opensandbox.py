"""The `opensandbox` provider, through the real OpenSandbox SDK, against a loopback fake
of OpenSandbox's lifecycle API and execd (`tests/sandbox/opensandbox_fake.py`), whose
sandboxes are `local` ones."""

from __future__ import annotations

import asyncio
import base64
import json
import sys
from pathlib import Path
from typing import Any, ClassVar

import pytest

pytest.importorskip(
    "opensandbox",
    reason="the opensandbox SDK is not installed (bash scripts/install-remote-sdks.sh)",
)

from nemo_gym.errors import ConfigError, SandboxError
from nemo_gym.records import ResourceLimits, SandboxSpec
from nemo_gym.sandbox import get
from nemo_gym.sandbox.conformance import ConformanceSuite
from nemo_gym.sandbox.local import unavailable_reason
from nemo_gym.sandbox.remote.common import Labels, owner_token
from nemo_gym.sandbox.remote.opensandbox import CREATE_KEY, OpenSandboxProvider, registry_auth
from tests.sandbox.opensandbox_fake import OpenSandboxFake
from tests.sandbox.remote_service import sandboxes_of_a_killed_trainer

pytestmark = pytest.mark.skipif(
    unavailable_reason() is not None, reason=f"the fake needs `local`: {unavailable_reason()}"
)

FAKE = OpenSandboxFake()
if unavailable_reason() is None:
    FAKE.start()
LABELS = {"team": "rl", "user": "alice", "workload": "swe", "run": "r1"}
OPTIONS: dict[str, Any] = {
    "domain": FAKE.domain if FAKE.url else "127.0.0.1:9",
    "api_key": "osb-" + "0" * 32,
    "labels": LABELS,
    "retries": 3,
}


class TestConformance(ConformanceSuite):
    provider = "opensandbox"
    options: ClassVar[dict[str, Any]] = OPTIONS
    skip: ClassVar[dict[str, str]] = {
        "loopback_network": "an OpenSandbox sandbox cannot reach this host's 127.0.0.1 "
        "(ConfigError)",
        "owner_killed": "a remote sandbox outlives its owner until OpenSandbox's timeout "
        "(always set) or a reap; test_a_killed_runs_sandboxes_are_reaped_by_label covers it",
    }


class TestConformanceThroughPool(TestConformance):
    options: ClassVar[dict[str, Any]] = {**OPTIONS, "pool_size": 2}


def provider(**extra: Any) -> OpenSandboxProvider:
    made = get("opensandbox", **{**OPTIONS, **extra})
    assert isinstance(made, OpenSandboxProvider)
    return made


def test_registered_and_sends_labels_timeout_network_resources_and_registry_auth(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    token = base64.b64encode(b"bot:s3cret").decode()
    (tmp_path / "config.json").write_text(
        json.dumps({"auths": {"registry.example.com": {"auth": token}}})
    )
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path))

    async def main() -> None:
        p = provider(timeout_s=1200, cpu="2")
        spec = SandboxSpec(
            image="registry.example.com/team/agent:1", limits=ResourceLimits(memory_bytes=3 << 30)
        )
        async with p.start(spec) as box:
            held = FAKE.sandboxes[box.id].request
            assert held.timeout == 1200
            assert held.image.uri == "registry.example.com/team/agent:1"
            assert (held.image.auth.username, held.image.auth.password) == ("bot", "s3cret")
            limits = held.resource_limits.additional_properties
            assert limits == {"cpu": "2", "memory": f"{3 << 10}Mi"}
            assert str(held.network_policy.default_action).endswith("deny")  # network="none"
            meta = FAKE.sandboxes[box.id].metadata
            assert {k: v for k, v in meta.items() if k != CREATE_KEY} == (
                Labels.resolve(LABELS).as_dict()
            )
        async with p.start(SandboxSpec(network="host")) as box:
            assert not FAKE.sandboxes[box.id].request.network_policy
        # The credential went to the create call only: nothing the provider keeps holds it.
        assert "s3cret" not in repr(vars(p)) + repr(vars(p.backend))
        await p.aclose()

    asyncio.run(main())


def test_registry_auth_reads_the_docker_config(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(
        json.dumps(
            {
                "auths": {
                    "https://index.docker.io/v1/": {"auth": base64.b64encode(b"u:p").decode()},
                    "ghcr.io": {"username": "g", "password": "q"},
                }
            }
        )
    )
    assert registry_auth("python:3.12", str(tmp_path)) == ("u", "p")
    assert registry_auth("ghcr.io/org/img:1", str(tmp_path)) == ("g", "q")
    assert registry_auth("quay.io/org/img", str(tmp_path)) is None
    assert registry_auth("img", str(tmp_path / "missing")) is None


def test_a_create_whose_reply_was_lost_is_retried_without_a_second_sandbox() -> None:
    async def main() -> str:
        p = provider(labels={**LABELS, "workload": "lost-reply"})
        p.retry = type(p.retry)(attempts=3, base_s=0.01)
        async with p.start() as box:
            assert (await box.exec("echo ok")).stdout == "ok\n"
            return box.id

    before = FAKE.created
    FAKE.fail_next["POST /v1/sandboxes"] = 1  # throttled before acting
    FAKE.lose_create_replies = 1  # acted, then the reply was lost
    asyncio.run(main())
    assert FAKE.created == before + 1  # the key in the metadata found the first one
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
    left = sandboxes_of_a_killed_trainer(
        "opensandbox", {**OPTIONS, "labels": {**LABELS, "workload": "killed"}}
    )
    assert all(i in FAKE.sandboxes for i in left)

    async def main() -> None:
        p = provider(labels={**LABELS, "workload": "killed"})
        async with p.start() as box:
            assert not any(i in FAKE.sandboxes for i in left)
            assert box.id in FAKE.sandboxes
        await p.aclose()

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
        await other.aclose()
        await mine.aclose()

    asyncio.run(main())


def test_without_the_sdk_the_error_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "opensandbox", None)

    async def main() -> None:
        with pytest.raises(SandboxError, match=r"pip install 'nemo-gym\[opensandbox\]'"):
            await OpenSandboxProvider(api_key="x", labels=LABELS).create()

    asyncio.run(main())
