"""The sandbox conformance suite, run for the built-in providers."""

from __future__ import annotations

import os
from typing import Any, ClassVar

import pytest

from nemo_gym.records import SandboxSpec
from nemo_gym.sandbox.conformance import ConformanceSuite

DOCKER_HOST = os.environ.get("NEMO_GYM_DOCKER_HOST") or os.environ.get("DOCKER_HOST")
DOCKER_IMAGE = os.environ.get("NEMO_GYM_DOCKER_IMAGE", "nemo-gym-test:py")


class TestProcess(ConformanceSuite):
    provider = "process"
    skip: ClassVar[dict[str, str]] = {
        "loopback_network": "process is not isolated: it shares the host's network",
    }


def _local_skip_reason() -> str | None:
    from nemo_gym.sandbox.local import unavailable_reason

    return unavailable_reason()


@pytest.mark.skipif(_local_skip_reason() is not None, reason=f"local: {_local_skip_reason()}")
class TestLocal(ConformanceSuite):
    provider = "local"


def _docker_skip_reason() -> str | None:
    if not DOCKER_HOST:
        return (
            "no docker engine: set NEMO_GYM_DOCKER_HOST (or DOCKER_HOST); "
            "scripts/docker-engine.sh start prints it"
        )
    path = DOCKER_HOST.removeprefix("unix://")
    if DOCKER_HOST.startswith(("unix://", "/")) and not os.path.exists(path):
        return f"no docker engine socket at {path} (scripts/docker-engine.sh start)"
    return None


@pytest.mark.skipif(_docker_skip_reason() is not None, reason=_docker_skip_reason() or "")
class TestDocker(ConformanceSuite):
    provider = "docker"
    options: ClassVar[dict[str, Any]] = {
        "host": DOCKER_HOST,
        # Podman on hosts with a low RLIMIT_NPROC hard limit needs it (see DockerProvider).
        "nproc": int(os.environ["NEMO_GYM_DOCKER_NPROC"])
        if os.environ.get("NEMO_GYM_DOCKER_NPROC")
        else None,
    }
    spec = SandboxSpec(image=DOCKER_IMAGE)
    skip: ClassVar[dict[str, str]] = {
        "signal_exit_code": "the engine reports a signal as 128 + n, like `exit 137`",
    }
