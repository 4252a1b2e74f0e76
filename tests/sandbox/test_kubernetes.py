"""The `kubernetes` provider, through the real Kubernetes client, against a loopback fake of
the API server and its exec websocket (`tests/sandbox/kubernetes_fake.py`), whose pods
are `local` sandboxes."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from typing import Any, ClassVar

import pytest

pytest.importorskip(
    "kubernetes",
    reason="the kubernetes extra is not installed (pip install 'nemo-gym[kubernetes]')",
)

from nemo_gym.errors import ConfigError, SandboxError
from nemo_gym.records import SandboxSpec
from nemo_gym.sandbox import get
from nemo_gym.sandbox.conformance import ConformanceSuite
from nemo_gym.sandbox.local import unavailable_reason
from nemo_gym.sandbox.remote.common import Labels, owner_token
from nemo_gym.sandbox.remote.kubernetes import NETWORK_LABEL, NETWORK_POLICY, KubernetesProvider
from tests.sandbox.kubernetes_fake import KubernetesFake

pytestmark = pytest.mark.skipif(
    unavailable_reason() is not None, reason=f"the fake needs `local`: {unavailable_reason()}"
)

FAKE = KubernetesFake()
URL = FAKE.start() if unavailable_reason() is None else "http://127.0.0.1:9"
LABELS = {"team": "rl", "user": "alice", "workload": "swe", "run": "r1"}
OPTIONS: dict[str, Any] = {"host": URL, "token": "t0ken", "labels": LABELS, "retries": 3}


class TestConformance(ConformanceSuite):
    provider = "kubernetes"
    options: ClassVar[dict[str, Any]] = OPTIONS
    skip: ClassVar[dict[str, str]] = {
        "owner_killed": "a pod outlives its owner until activeDeadlineSeconds (always set) "
        "or a reap; test_a_killed_runs_pods_are_reaped_by_label covers it",
    }


class TestConformanceThroughPool(TestConformance):
    options: ClassVar[dict[str, Any]] = {**OPTIONS, "pool_size": 2}


def provider(**extra: Any) -> KubernetesProvider:
    made = get("kubernetes", **{**OPTIONS, **extra})
    assert isinstance(made, KubernetesProvider)
    return made


def test_the_pod_has_a_deadline_labels_and_no_privileges() -> None:
    async def main() -> None:
        p = provider(timeout_s=1200, resources={"cpu": "1", "memory": "2Gi"})
        async with p.start(SandboxSpec(image="python:3.12", env={"A": "1"})) as box:
            pod = FAKE.pod(box.id)
            assert pod is not None
            spec = pod.manifest["spec"]
            assert spec["activeDeadlineSeconds"] == 1200
            assert spec["restartPolicy"] == "Never"
            assert spec["automountServiceAccountToken"] is False
            (container,) = spec["containers"]
            assert container["image"] == "python:3.12"
            assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
            assert container["resources"]["limits"] == {"cpu": "1", "memory": "2Gi"}
            labels = pod.manifest["metadata"]["labels"]
            assert {k: v for k, v in labels.items() if k != NETWORK_LABEL} == Labels.resolve(
                LABELS
            ).as_dict()
            assert labels[NETWORK_LABEL] == "none"
            assert (await box.exec("echo $A")).stdout == "1\n"

    asyncio.run(main())
    policy = FAKE.policies[("default", NETWORK_POLICY)]["spec"]
    assert policy == {
        "podSelector": {"matchLabels": {NETWORK_LABEL: "none"}},
        "policyTypes": ["Ingress", "Egress"],
    }


def test_the_deadline_ends_the_pod_whoever_holds_it() -> None:
    async def main() -> None:
        p = provider(timeout_s=1)
        box = await p.create()
        await asyncio.sleep(1.5)
        pod = FAKE.pod(box.id)
        assert pod is not None and (pod.phase, pod.reason) == ("Failed", "DeadlineExceeded")
        with pytest.raises(SandboxError, match="container not running"):
            await box.exec("true")
        await box.aclose()
        assert FAKE.pod(box.id) is None

    asyncio.run(main())


def test_a_create_whose_reply_was_lost_is_retried_without_a_second_pod() -> None:
    async def main() -> None:
        p = provider(labels={**LABELS, "workload": "lost-reply"})
        p.retry = type(p.retry)(attempts=3, base_s=0.01)
        async with p.start() as box:
            assert (await box.exec("echo ok")).stdout == "ok\n"

    FAKE.fail_next["POST pods"] = 1  # throttled before acting
    FAKE.lose_create_replies = 1  # acted, then the reply was lost
    before = [r for r in FAKE.requests if r[0] == "POST" and r[1].endswith("/pods")]
    asyncio.run(main())
    posts = [r for r in FAKE.requests if r[0] == "POST" and r[1].endswith("/pods")]
    assert len(posts) - len(before) == 3  # throttled, lost reply, 409 for the same name
    assert not [
        p
        for p in FAKE.pods.values()
        if p.manifest["metadata"]["labels"].get("nemo-gym.workload") == "lost-reply"
    ]


def test_a_loopback_pod_has_no_network_and_its_tunnel_reaches_the_port() -> None:
    """The pod is made with network "none" (the NetworkPolicy's label); the listed port
    of this host answers through the tunnel over an exec websocket."""

    async def main() -> None:
        async def pong(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            writer.write(b"pong:" + await reader.readline())
            await writer.drain()
            writer.close()

        server = await asyncio.start_server(pong, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        p = provider()
        probe = (
            "import socket\n"
            f"s = socket.create_connection(('127.0.0.1', {port}), timeout=10)\n"
            "s.sendall(b'ping\\n'); print(s.makefile().readline().strip())\n"
        )
        try:
            async with p.start(SandboxSpec(network="loopback", ports=(port,))) as box:
                labels = FAKE.pod(box.id).manifest["metadata"]["labels"]
                assert labels[NETWORK_LABEL] == "none"
                result = await box.exec(["python3", "-c", probe], timeout=30)
                assert result.stdout.strip() == "pong:ping", result
        finally:
            await p.aclose()
            server.close()

    asyncio.run(main())


def test_binary_files_and_big_output_survive_the_channels() -> None:
    async def main() -> None:
        async with provider().start() as box:
            data = bytes(range(256)) * 1000
            await box.write_file("sub/blob.bin", data)
            assert await box.read_file("sub/blob.bin") == data
            result = await box.exec("head -c 3000000 /dev/zero | tr '\\0' x")
            assert result.stdout_truncated and len(result.stdout) == 1 << 20
            with pytest.raises(IsADirectoryError):
                await box.read_file("sub")

    asyncio.run(main())


def test_a_killed_runs_pods_are_reaped_by_label() -> None:
    """A trainer process makes two pods through the real client and is SIGKILLed; the
    next provider start of the same team, user and workload deletes them."""
    child = subprocess.run(
        [
            sys.executable,
            "-c",
            "import asyncio, json, os, sys\n"
            "from nemo_gym.sandbox import get\n"
            "p = get('kubernetes', **json.loads(sys.argv[1]))\n"
            "async def main():\n"
            "    a = await p.create(); b = await p.create()\n"
            "    print(a.id, b.id, flush=True)\n"
            "    os.kill(os.getpid(), 9)\n"
            "asyncio.run(main())\n",
            json.dumps({**OPTIONS, "labels": {**LABELS, "workload": "killed"}}),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert child.returncode == -9, child.stderr
    left = child.stdout.split()
    assert len(left) == 2 and all(FAKE.pod(i) is not None for i in left)

    async def main() -> None:
        mine = provider(labels={**LABELS, "workload": "killed"})
        live = await mine.create()
        async with provider(labels={**LABELS, "workload": "killed"}).start() as box:
            assert not any(FAKE.pod(i) for i in left)
            assert FAKE.pod(box.id) is not None and FAKE.pod(live.id) is not None
        assert FAKE.pod(live.id).manifest["metadata"]["labels"]["nemo-gym.owner"] == owner_token()  # type: ignore[union-attr]
        await live.aclose()

    asyncio.run(main())


def test_a_throttled_api_is_retried() -> None:
    async def main() -> None:
        p = provider(labels={**LABELS, "workload": "throttled"})
        p.retry = type(p.retry)(attempts=3, base_s=0.01)
        async with p.start() as box:
            FAKE.fail_next["GET pods"] = 1
            assert await p.reap() == []
            assert (await box.exec("true")).ok

    started = time.monotonic()
    asyncio.run(main())
    assert time.monotonic() - started < 60


def test_without_the_sdk_the_error_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "kubernetes", None)

    async def main() -> None:
        with pytest.raises(SandboxError, match=r"pip install 'nemo-gym\[kubernetes\]'"):
            await KubernetesProvider(host="http://127.0.0.1:9", labels=LABELS).create()

    asyncio.run(main())


def test_a_missing_kubeconfig_is_a_config_error_naming_it(tmp_path: Any) -> None:
    missing = str(tmp_path / "nope.yaml")

    async def main() -> None:
        with pytest.raises(ConfigError, match=f"could not load kubeconfig {missing}"):
            await KubernetesProvider(kubeconfig=missing, labels=LABELS).create()

    asyncio.run(main())
