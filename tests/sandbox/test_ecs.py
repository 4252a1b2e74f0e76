"""The `ecs` backend's control plane through the real boto3 client, against a loopback fake
of the ECS API validated by botocore's own service model (`tests/sandbox/ecs_fake.py`).

Exec is not available on ECS yet (see the module doc of `nemo_gym.sandbox.remote.ecs`):
there is no conformance suite here, and the provider refuses to create sandboxes.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from typing import Any

import pytest

pytest.importorskip("boto3", reason="the ecs extra is not installed (pip install 'nemo-gym[ecs]')")

from nemo_gym.errors import ConfigError, SandboxError
from nemo_gym.records import SandboxSpec
from nemo_gym.sandbox import get
from nemo_gym.sandbox.remote.common import Labels, label_key
from nemo_gym.sandbox.remote.ecs import STARTED_BY, EcsBackend, EcsProvider
from tests.sandbox.ecs_fake import EcsFake

FAKE = EcsFake()
URL = FAKE.start()
LABELS = {"team": "rl", "user": "alice", "workload": "swe", "run": "r1"}
OPTIONS: dict[str, Any] = {
    "cluster": "rl",
    "task_definition": "sandbox:3",
    "subnets": ["subnet-0abc"],
    "security_groups": ["sg-0abc"],
    "region": "us-east-1",
    "endpoint_url": URL,
}


@pytest.fixture(autouse=True)
def credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAFAKEFAKEFAKE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "fake")
    monkeypatch.delenv("AWS_PROFILE", raising=False)


def backend(**extra: Any) -> EcsBackend:
    options = {k: v for k, v in {**OPTIONS, **extra}.items()}
    return EcsBackend(container="sandbox", **options)


def labels(workload: str) -> dict[str, str]:
    return Labels.resolve({**LABELS, "workload": workload}).as_dict()


def test_run_task_is_tagged_idempotent_bounded_and_waited_for() -> None:
    async def main() -> str:
        return await backend().create(
            SandboxSpec(env={"A": "1"}),
            labels=labels("run"),
            timeout_s=1799.5,
            idempotency_key="k" * 40,
        )

    arn = asyncio.run(main())
    task = FAKE.tasks[arn]
    assert task.last_status == "RUNNING"
    params = task.params
    assert params["launchType"] == "FARGATE" and params["startedBy"] == STARTED_BY
    assert params["clientToken"] == "k" * 40 and params["taskDefinition"] == "sandbox:3"
    assert {t["key"]: t["value"] for t in params["tags"]} == labels("run")
    (override,) = params["overrides"]["containerOverrides"]
    assert override["command"] == ["sleep", "1800"]  # the task's own lifetime
    assert override["environment"] == [{"name": "A", "value": "1"}]
    network = params["networkConfiguration"]["awsvpcConfiguration"]
    assert network == {
        "subnets": ["subnet-0abc"],
        "securityGroups": ["sg-0abc"],
        "assignPublicIp": "DISABLED",
    }


def test_a_run_whose_reply_was_lost_is_retried_into_the_same_task() -> None:
    from nemo_gym.sandbox.remote.common import RetryPolicy

    async def main() -> str:
        b = backend()
        return await RetryPolicy(attempts=3, base_s=0.01).run(
            "create",
            lambda: b.create(
                SandboxSpec(), labels=labels("lost"), timeout_s=60, idempotency_key="lost-1"
            ),
        )

    FAKE.fail_next["RunTask"] = 1  # throttled before acting
    FAKE.lose_run_replies = 1  # acted, then the reply was lost
    before = len(FAKE.tasks)
    arn = asyncio.run(main())
    assert len(FAKE.tasks) == before + 1 and FAKE.tasks[arn].last_status == "RUNNING"


def test_the_task_stops_itself_at_the_timeout() -> None:
    async def main() -> str:
        return await backend().create(
            SandboxSpec(), labels=labels("timeout"), timeout_s=1, idempotency_key="t-1"
        )

    arn = asyncio.run(main())
    time.sleep(1.3)
    assert FAKE.tasks[arn].last_status == "STOPPED"
    assert FAKE.tasks[arn].stop_code == "EssentialContainerExited"


def test_billing_rates_are_the_tasks_vcpus_and_memory() -> None:
    async def main() -> dict[str, float]:
        b = backend()
        arn = await b.create(
            SandboxSpec(), labels=labels("rates"), timeout_s=60, idempotency_key="r-1"
        )
        return await b.rates(arn)

    assert asyncio.run(main()) == {"vcpu": 1.0, "memory_gib": 2.0}


def test_a_killed_runs_tasks_are_reaped_by_tag() -> None:
    """A trainer starts two tasks and is SIGKILLed; reaping by its labels stops them, and
    leaves a live owner's task and another workload's alone."""
    child = subprocess.run(
        [
            sys.executable,
            "-c",
            "import asyncio, json, os, sys\n"
            "from nemo_gym.records import SandboxSpec\n"
            "from nemo_gym.sandbox.remote.common import Labels\n"
            "from nemo_gym.sandbox.remote.ecs import EcsBackend\n"
            "options, labels = json.loads(sys.argv[1]), json.loads(sys.argv[2])\n"
            "b = EcsBackend(container='sandbox', **options)\n"
            "async def main():\n"
            "    tags = Labels.resolve(labels).as_dict()\n"
            "    for key in ('a', 'b'):\n"
            "        print(await b.create(SandboxSpec(), labels=tags, timeout_s=600,\n"
            "                             idempotency_key='killed-' + key), flush=True)\n"
            "    os.kill(os.getpid(), 9)\n"
            "asyncio.run(main())\n",
            json.dumps(OPTIONS),
            json.dumps({**LABELS, "workload": "killed"}),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert child.returncode == -9, child.stderr
    orphans = child.stdout.split()
    assert len(orphans) == 2

    async def main() -> tuple[list[str], str, str]:
        live = await backend().create(
            SandboxSpec(), labels=labels("killed"), timeout_s=600, idempotency_key="live-1"
        )
        other = await backend().create(
            SandboxSpec(), labels=labels("other"), timeout_s=600, idempotency_key="other-1"
        )
        provider = get("ecs", **OPTIONS, labels={**LABELS, "workload": "killed"})
        assert isinstance(provider, EcsProvider)
        return await provider.reap(dead_owners_only=True), live, other

    reaped, live, other = asyncio.run(main())
    assert sorted(reaped) == sorted(orphans)
    assert all(FAKE.tasks[a].last_status == "STOPPED" for a in orphans)
    assert FAKE.tasks[live].last_status == "RUNNING"
    assert FAKE.tasks[other].last_status == "RUNNING"
    owner = {t["key"]: t["value"] for t in FAKE.tasks[orphans[0]].tags}[label_key("owner")]
    assert owner.split(".")[1] != str(__import__("os").getpid())


def test_stopping_a_task_that_is_gone_succeeds() -> None:
    arn = "arn:aws:ecs:us-east-1:123456789012:task/rl/" + "f" * 32
    asyncio.run(backend().delete(arn))


def test_create_is_refused_before_anything_starts() -> None:
    before = len(FAKE.tasks)
    with pytest.raises(SandboxError, match="ExecuteCommand") as info:
        asyncio.run(get("ecs", **OPTIONS, labels=LABELS).create())
    assert info.value.code == "sandbox_unavailable"
    assert len(FAKE.tasks) == before


def test_bad_configuration_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="subnets"):
        asyncio.run(
            backend(subnets=()).create(
                SandboxSpec(), labels=labels("x"), timeout_s=60, idempotency_key="x"
            )
        )
    with pytest.raises(ConfigError, match="loopback"):
        asyncio.run(
            backend().create(
                SandboxSpec(network="loopback", ports=(8000,)),
                labels=labels("x"),
                timeout_s=60,
                idempotency_key="y",
            )
        )


def test_the_fake_refuses_what_the_service_model_refuses() -> None:
    import boto3

    client = boto3.client("ecs", region_name="us-east-1", endpoint_url=URL)
    from botocore.exceptions import ClientError

    with pytest.raises(ClientError, match="FARGATE only"):
        client.run_task(taskDefinition="sandbox:3", launchType="EC2")
